//! Wire compatibility: the `cs` Python client (PyPI, the version `tests/scripts/lib.sh` pins and
//! installs with `ensure_cs_client`) drives the emulator through `tests/cs_drive.py`; this test
//! checks what the client got back.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use capstan_cloudstack_emulator::catalog::sample;
use capstan_cloudstack_emulator::{Config, Emulator};
use serde_json::{Value, json};

/// The venv's python: `$CAPSTAN_CS_PYTHON`, or where `ensure_cs_client` puts it.
fn cs_python() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("CAPSTAN_CS_PYTHON") {
        return Ok(PathBuf::from(path));
    }
    let root = capstan_test_support::repo_root();
    let lib = std::fs::read_to_string(root.join("tests/scripts/lib.sh"))?;
    let version = lib
        .lines()
        .find_map(|l| l.strip_prefix("CS_CLIENT_VERSION="))
        .context("CS_CLIENT_VERSION in tests/scripts/lib.sh")?;
    let cache = std::env::var_os("CAPSTAN_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/capstan")))
        .context("CAPSTAN_CACHE or HOME")?;
    let python = cache.join(format!("python-cs-{version}/bin/python"));
    if !python.exists() {
        bail!(
            "the cs client is not installed at {}: run `bash -c 'source tests/scripts/lib.sh && ensure_cs_client'` (make e2e does)",
            python.display()
        );
    }
    Ok(python)
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["name"].as_str())
        .collect()
}

#[tokio::test]
async fn the_cs_client_drives_the_emulator() -> Result<()> {
    let python = cs_python()?;
    let cs = Emulator::start(Config::default()).await?;
    assert!(cs.set_zone_capacity(sample::ZONE_B, Some(0)));
    let creds = cs.credentials().context("credentials")?;
    let script =
        capstan_test_support::repo_root().join("tests/cloudstack-emulator/tests/cs_drive.py");
    let out = tokio::process::Command::new(&python)
        .arg(&script)
        .args([cs.url(), creds.api_key.clone(), creds.secret_key.clone()])
        .kill_on_drop(true)
        .output()
        .await
        .with_context(|| format!("running {}", python.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "cs_drive.py failed: {stderr}");
    let r: Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("output of cs_drive.py; stderr: {stderr}"))?;

    // Lists, unwrapped and paged by the client.
    assert_eq!(names(&r["zones"]["ok"]), ["zone-a", "zone-b"]);
    assert_eq!(names(&r["offerings"]["ok"]), ["small", "medium", "large"]);
    assert_eq!(
        names(&r["templates"]["ok"]),
        ["ubuntu-24.04-kube", "ubuntu-24.04-kube-arm64"]
    );
    assert_eq!(
        names(&r["featured"]["ok"]),
        ["ubuntu-24.04-kube", "ubuntu-24.04-kube"]
    );
    assert_eq!(names(&r["networks"]["ok"]), ["net-a"]);
    assert_eq!(names(&r["diskOfferings"]["ok"]), ["data-50", "custom"]);
    assert_eq!(names(&r["keypairs"]["ok"]), ["capstan"]);
    let missing = &r["missingFilter"]["error"];
    assert_eq!(missing["status"], 431);
    assert_eq!(missing["error"]["cserrorcode"], 4350);

    // Deploy, with the client polling queryAsyncJobResult itself.
    let vm = &r["deploy"]["ok"]["virtualmachine"];
    assert_eq!(vm["state"], "Running", "{}", r["deploy"]);
    assert_eq!(vm["name"], "cs-wire-1");
    assert_eq!(
        vm["displayname"], "cs wire: 1 + 1 = 2 / é & co",
        "the values signed are the values received"
    );
    assert_eq!(vm["serviceofferingname"], "medium");
    assert_eq!(vm["keypairs"], "capstan");
    assert_eq!(vm["details"]["rootdisksize"], "20");
    let vm_id = vm["id"].as_str().context("vm id")?;
    assert_eq!(r["duplicate"]["error"]["status"], 431);

    // Tags, and listing by them.
    assert_eq!(r["tag"]["ok"], json!({"success": true}));
    assert_eq!(names(&r["byTag"]["ok"]), ["cs-wire-1"]);
    assert_eq!(r["byOtherTag"]["ok"], json!({}));
    assert_eq!(r["tags"]["ok"]["tag"][0]["value"], "wire test");

    // Reboot: the client waits for the job; the VM is still Running. Asked without waiting, the
    // answer is the job alone, and the job ends with the VM; an unknown id is refused at once,
    // an expunged VM by the job (431, as CloudStack's job does).
    let rebooted = &r["reboot"]["ok"]["virtualmachine"];
    assert_eq!(rebooted["id"], vm_id, "{}", r["reboot"]);
    assert_eq!(rebooted["state"], "Running");
    let start = r["rebootStart"]["ok"].as_object().context("rebootStart")?;
    assert_eq!(
        start.keys().collect::<Vec<_>>(),
        ["jobid"],
        "{}",
        r["rebootStart"]
    );
    let job = &r["rebootJob"]["ok"];
    assert_eq!(job["jobstatus"], 1, "{job}");
    assert_eq!(
        job["cmd"],
        "org.apache.cloudstack.api.command.user.vm.RebootVMCmd"
    );
    assert_eq!(job["jobinstanceid"], vm_id);
    assert_eq!(job["jobresult"]["virtualmachine"]["state"], "Running");
    let unknown = &r["rebootUnknown"]["error"];
    assert_eq!(unknown["status"], 431, "{unknown}");
    assert_eq!(unknown["error"]["cserrorcode"], 4350);
    let expunged = &r["rebootExpunged"]["error"];
    assert_eq!(expunged["message"], "Job failure", "{expunged}");
    assert_eq!(expunged["error"]["errorcode"], 431);
    assert_eq!(
        expunged["error"]["errortext"],
        format!("Unable to find a virtual machine with id {vm_id}")
    );

    // User data over GET is limited; over POST (a form body) it goes through.
    assert_eq!(
        r["bigUserDataGet"]["error"]["error"]["errortext"],
        "User data is too long for an http GET request"
    );
    assert_eq!(
        r["bigUserDataPost"]["ok"]["virtualmachine"]["state"],
        "Running"
    );

    // A full zone: the job fails and the client raises its job failure with the error.
    let full = &r["noCapacity"]["error"];
    assert_eq!(full["message"], "Job failure");
    assert_eq!(full["error"]["errorcode"], 533);

    // Destroy with expunge, then the VM is gone.
    assert_eq!(r["destroy"]["ok"]["virtualmachine"]["id"], vm_id);
    assert_eq!(
        r["destroyPost"]["ok"]["virtualmachine"]["state"],
        "Expunging"
    );
    assert_eq!(r["afterDestroy"]["ok"], json!({}));
    assert_eq!(
        r["destroyAgain"]["error"]["error"]["errortext"],
        "Unable to find a virtual machine with specified vmId"
    );
    assert_eq!(r["unknownId"]["error"]["status"], 431);

    // Credentials: a wrong secret and an expired request get the client's 401 error; the
    // legacy signature without expires still verifies.
    for case in ["wrongSecret", "expired"] {
        let e = &r[case]["error"];
        assert_eq!(e["type"], "CloudStackApiException", "{case}: {e}");
        assert_eq!(e["status"], 401, "{case}");
        assert_eq!(
            e["error"]["errortext"],
            "unable to verify user credentials and/or request signature"
        );
    }
    assert_eq!(r["unversioned"]["ok"]["count"], 2);

    // What the emulator saw: every signed request from cs used version 3 but the two above.
    let requests = cs.requests();
    let unversioned = requests
        .iter()
        .filter(|q| q.status == 200 && q.signature_version.is_none())
        .count();
    assert_eq!(unversioned, 1, "{requests:#?}");
    assert!(
        requests
            .iter()
            .any(|q| q.method == "POST" && q.command.as_deref() == Some("deployVirtualMachine"))
    );
    let reboots: Vec<_> = cs
        .jobs()
        .into_iter()
        .filter(|j| j.command == "rebootVirtualMachine")
        .map(|j| j.status)
        .collect();
    assert_eq!(reboots, [1, 1, 2], "two reboots, one refused job");
    assert!(
        cs.vms().iter().all(|vm| vm.name == "cs-wire-full"),
        "only the failed VM is left: {:?}",
        cs.vms()
    );
    Ok(())
}

/// Signs each parameter set with the `cs` client's own signing code; returns its signatures.
async fn cs_signatures(
    python: &PathBuf,
    secret: &str,
    sets: &[Vec<(String, String)>],
) -> Result<Vec<String>> {
    let program = r#"
import json, sys
from cs import CloudStack
secret, sets = json.load(sys.stdin)
client = CloudStack(endpoint="http://unused.invalid", key="k", secret=secret)
out = []
for pairs in sets:
    data = dict(pairs)
    client._sign(data)
    out.append(data["signature"])
json.dump(out, sys.stdout)
"#;
    let mut child = tokio::process::Command::new(python)
        .args(["-c", program])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let input = serde_json::to_vec(&json!([secret, sets]))?;
    let mut stdin = child.stdin.take().context("stdin")?;
    tokio::io::AsyncWriteExt::write_all(&mut stdin, &input).await?;
    drop(stdin);
    let out = child.wait_with_output().await?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

#[tokio::test]
async fn cloudstack_sign_agrees_with_the_cs_client_on_random_values() -> Result<()> {
    let python = cs_python()?;
    // Letters, digits, Java's unreserved marks, reserved characters, spaces and non-ASCII;
    // not `~`, which cs leaves unescaped and CloudStack (and cloudstack-sign) escape.
    let alphabet: Vec<char> = "aZ09.-*_ +/=&?%#:,;@!$'()[]{}\"<>|^`\\éü日本🚀\n\t"
        .chars()
        .collect();
    let mut seed: u64 = 0x5eed_c10d_57ac;
    let mut next = move |n: usize| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) as usize % n.max(1)
    };
    let names = [
        "command",
        "name",
        "displayname",
        "userdata",
        "tags[0].key",
        "tags[0].value",
        "zoneId",
    ];
    let mut sets = Vec::new();
    for _ in 0..200 {
        let mut pairs = Vec::new();
        for name in names.iter().take(1 + next(names.len())) {
            let len = next(24);
            let value: String = (0..len).map(|_| alphabet[next(alphabet.len())]).collect();
            pairs.push((name.to_string(), value));
        }
        sets.push(pairs);
    }
    let secret = "s3cr3t+/=~é";
    let theirs = cs_signatures(&python, secret, &sets).await?;
    assert_eq!(theirs.len(), sets.len());
    for (pairs, signature) in sets.iter().zip(&theirs) {
        assert_eq!(
            &cloudstack_sign::compute_signature(secret, pairs),
            signature,
            "{pairs:?}"
        );
    }
    // The one known difference: `~`.
    let tilde = vec![vec![("name".to_string(), "a~b".to_string())]];
    let theirs = cs_signatures(&python, secret, &tilde).await?;
    assert_ne!(
        cloudstack_sign::compute_signature(secret, &tilde[0]),
        theirs[0]
    );
    Ok(())
}
