//! The `capstan` binary: `provider inspect` and `provider test` (without a cluster).

use std::path::PathBuf;
use std::process::{Command, Output};

use crate::fixtures::providers_dir;

fn capstan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .output()
        .expect("run capstan")
}

fn write_temp(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn inspect_a_provider() {
    let chaos = providers_dir().join("chaos.wasm");
    let out = capstan(&["provider", "inspect", chaos.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("capstan:provider/cloud-provider@0.1.0"),
        "{stdout}"
    );
    assert!(
        stdout.contains("package capstan:provider@0.1.0"),
        "{stdout}"
    );
    assert!(stdout.contains("get-instance-types"), "{stdout}");
    assert!(stdout.contains("sha256:"), "{stdout}");
    assert!(stdout.contains("capstan:provider/kube@0.1.0"), "{stdout}");

    let out = capstan(&["provider", "inspect", "--json", chaos.to_str().unwrap()]);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["provider"]["version"], "0.1.0");
    assert_eq!(json["provider"]["wit"], "0.1");
    assert_eq!(json["info"]["sha256"].as_str().unwrap().len(), 64);
    let size = std::fs::metadata(&chaos).unwrap().len();
    assert_eq!(json["info"]["size"], size);
}

/// `inspect --grants` lists the grants and flags each `scope: any` one.
#[test]
fn inspect_flags_unscoped_grants() {
    let chaos = providers_dir().join("chaos.wasm");
    let grants = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("inspect-grants.yaml");
    std::fs::write(
        &grants,
        "- apiGroups: ['']\n  resources: [nodes]\n  verbs: [get, patch]\n\
         - apiGroups: [apiextensions.k8s.io]\n  resources: [customresourcedefinitions]\n  verbs: [get]\n  scope: any\n",
    )
    .unwrap();
    let out = capstan(&[
        "provider",
        "inspect",
        chaos.to_str().unwrap(),
        "--grants",
        grants.to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("0: get,patch nodes in core (workload) scope owned"),
        "{stdout}"
    );
    assert!(
        stdout.contains("warning:  grant 1 (get customresourcedefinitions in apiextensions.k8s.io (workload)) has scope any"),
        "{stdout}"
    );
    let out = capstan(&[
        "provider",
        "inspect",
        "--json",
        chaos.to_str().unwrap(),
        "--grants",
        grants.to_str().unwrap(),
    ]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["grants"][0]["scope"], "owned");
    assert!(
        json["unscopedGrants"]
            .as_str()
            .is_some_and(|s| s.starts_with("grant 1 ")),
        "{json}"
    );
}

#[test]
fn inspect_refuses_bad_input_by_name() {
    let not_wasm = write_temp("not-wasm.wasm", b"hello, world\n");
    let out = capstan(&["provider", "inspect", not_wasm.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("not a WebAssembly file"),
        "{}",
        text(&out.stderr)
    );

    let core = write_temp("core.wasm", &wat::parse_str("(module)").unwrap());
    let out = capstan(&["provider", "inspect", core.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("core WebAssembly module"),
        "{}",
        text(&out.stderr)
    );

    let big = write_temp("big.wasm", &[0u8; 4096]);
    let out = capstan(&[
        "provider",
        "inspect",
        "--max-size",
        "1000",
        big.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("over the limit of 1000 bytes"),
        "{}",
        text(&out.stderr)
    );

    let other = crate::bad_input::component_exporting("example:greeter/hello@1.0.0", &["hello"]);
    let other = write_temp("other.wasm", &other);
    let out = capstan(&["provider", "inspect", other.to_str().unwrap()]);
    assert!(!out.status.success());
    let stdout = text(&out.stdout);
    assert!(stdout.contains("not runnable"), "{stdout}");
    assert!(stdout.contains("example:greeter/hello@1.0.0"), "{stdout}");

    let out = capstan(&["provider", "inspect", "/definitely/not/here.wasm"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("cannot open"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn test_without_a_cluster_skips_cluster_checks_and_reports_failures() {
    let chaos = providers_dir().join("chaos.wasm");
    let out = capstan(&["provider", "test", "--no-cache", chaos.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    // chaos accepts an object with unknown fields as a NodeClass, which the kit calls a failure.
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.contains("PASS  name: chaos"), "{stdout}");
    assert!(
        stdout.contains("FAIL  validate-node-class rejects garbage"),
        "{stdout}"
    );
    assert!(
        stdout.contains("SKIP  create: needs a cluster or a cloud: pass --kubeconfig or --egress"),
        "{stdout}"
    );
    let last = stdout.trim_end().lines().last().unwrap();
    assert!(
        last.ends_with("skipped") && last.contains("failed"),
        "{last}"
    );

    let out = capstan(&[
        "provider",
        "test",
        "--no-cache",
        "--json",
        chaos.to_str().unwrap(),
    ]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = report["checks"].as_array().unwrap();
    assert!(checks.iter().any(|c| c["outcome"] == "skip"));
}

/// `capstan ARGS --print-settings` with nothing in its environment but `env`.
pub(crate) fn with_print_settings<K, V>(
    args: &[&str],
    env: impl IntoIterator<Item = (K, V)>,
) -> Output
where
    K: AsRef<std::ffi::OsStr>,
    V: AsRef<std::ffi::OsStr>,
{
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .arg("--print-settings")
        .env_clear()
        .envs(env)
        .output()
        .expect("run capstan")
}

/// `capstan run ARGS --print-settings` with only the environment `env`: the JSON.
fn print_settings(args: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
    let out = with_print_settings(&[&["run"][..], args].concat(), env.iter().copied());
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn run_settings_take_karpenters_defaults_env_vars_and_flags() {
    // Karpenter's defaults, leader election on.
    let defaults = print_settings(&[], &[]);
    assert_eq!(defaults["batchMaxDuration"], "10s");
    assert_eq!(defaults["batchIdleDuration"], "1s");
    assert_eq!(defaults["logLevel"], "info");
    assert_eq!(defaults["kubeClientQPS"], 200);
    assert_eq!(defaults["kubeClientBurst"], 300);
    assert_eq!(defaults["leaderElection"], true);
    assert_eq!(defaults["leaderElectionNamespace"], "default");
    assert_eq!(defaults["metricsAddress"], "0.0.0.0:8080");
    assert_eq!(defaults["healthProbeAddress"], "0.0.0.0:8081");
    assert_eq!(defaults["featureGates"]["nodeRepair"], false);
    assert_eq!(defaults["preferencePolicy"], "Respect");
    assert_eq!(defaults["minValuesPolicy"], "Strict");

    // Environment variables as Karpenter names them; a flag wins over its variable.
    let env = [
        ("BATCH_MAX_DURATION", "30s"),
        ("BATCH_IDLE_DURATION", "500ms"),
        ("LOG_LEVEL", "debug"),
        ("KUBE_CLIENT_QPS", "20"),
        ("DISABLE_LEADER_ELECTION", "true"),
        ("POD_NAMESPACE", "karpenter"),
        ("METRICS_PORT", "9090"),
        ("PREFERENCE_POLICY", "Ignore"),
    ];
    let from_env = print_settings(&[], &env);
    assert_eq!(from_env["batchMaxDuration"], "30s");
    assert_eq!(from_env["batchIdleDuration"], "500ms");
    assert_eq!(from_env["logLevel"], "debug");
    assert_eq!(from_env["kubeClientQPS"], 20);
    assert_eq!(from_env["leaderElection"], false);
    assert_eq!(from_env["leaderElectionNamespace"], "karpenter");
    assert_eq!(from_env["metricsAddress"], "0.0.0.0:9090");
    assert_eq!(from_env["preferencePolicy"], "Ignore");
    let flags = print_settings(
        &[
            "--batch-max-duration",
            "5s",
            "--kube-client-qps",
            "7",
            "--disable-leader-election=false",
            "--metrics-bind-address",
            "127.0.0.1:0",
            "--log-level",
            "error",
        ],
        &env,
    );
    assert_eq!(flags["batchMaxDuration"], "5s");
    assert_eq!(flags["kubeClientQPS"], 7);
    assert_eq!(flags["leaderElection"], true);
    assert_eq!(flags["metricsAddress"], "127.0.0.1:0");
    assert_eq!(flags["logLevel"], "error");

    // Capstan's earlier flags still work.
    let old = print_settings(&["--leader-elect", "--health-probe-bind-address", "0"], &[]);
    assert_eq!(old["leaderElection"], true);
    assert_eq!(old["healthProbeAddress"], "0");
    assert_eq!(
        print_settings(&["--disable-leader-election"], &[])["leaderElection"],
        false
    );

    // Bad values are refused, naming the setting.
    for (args, env, named) in [
        (
            &["--preference-policy", "Sometimes"][..],
            &[][..],
            "preference-policy",
        ),
        (
            &[][..],
            &[("MIN_VALUES_POLICY", "Loose")][..],
            "min-values-policy",
        ),
        (&["--kube-client-qps", "0"][..], &[][..], "kube-client-qps"),
    ] {
        let out = with_print_settings(&[&["run"][..], args].concat(), env.iter().copied());
        assert!(!out.status.success(), "{args:?} {env:?} accepted");
        assert!(text(&out.stderr).contains(named), "{}", text(&out.stderr));
    }
}
