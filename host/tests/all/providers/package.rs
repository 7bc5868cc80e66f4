//! `capstan provider package`: manifests that parse, carry the component exactly (raw or
//! compressed), pin it, hold the grants, and load when applied to the real API server.

use std::process::{Command, Stdio};

use capstan::api::provider::Provider;
use capstan::provider::source::{self, Compression, sha256_hex};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;

use super::Setup;
use crate::fixtures::{kwok_bytes, providers_dir};

fn package(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["provider", "package"])
        .args(args)
        .output()
        .expect("run capstan")
}

/// The ConfigMap and Provider in the output, in that order.
fn parse(stdout: &[u8]) -> (ConfigMap, Provider) {
    let text = String::from_utf8(stdout.to_vec()).unwrap();
    let docs: Vec<&str> = text
        .split("\n---\n")
        .filter(|doc| doc.trim_start().starts_with('{'))
        .collect();
    assert_eq!(docs.len(), 2, "{text}");
    (
        serde_json::from_str(docs[0]).unwrap(),
        serde_json::from_str(docs[1]).unwrap(),
    )
}

#[test]
fn packages_raw_and_compressed_components_exactly() {
    let kwok = providers_dir().join("kwok.wasm");
    let digest = sha256_hex(kwok_bytes());
    for (flag, compression) in [
        ("auto", Compression::None),
        ("gzip", Compression::Gzip),
        ("zstd", Compression::Zstd),
    ] {
        let out = package(&[
            kwok.to_str().unwrap(),
            "--name",
            "kwok",
            "--namespace",
            "ops",
            "--compression",
            flag,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (config_map, provider) = parse(&out.stdout);
        let key = format!("provider.wasm{}", compression.suffix());
        assert_eq!(provider.spec.source.config_map.key, key);
        assert_eq!(provider.spec.source.config_map.namespace, "ops");
        assert_eq!(provider.spec.source.config_map.name, config_map.name_any());
        assert_eq!(
            provider.spec.source.sha256.as_deref(),
            Some(digest.as_str())
        );
        let component = source::from_config_map(
            &config_map,
            &key,
            32 << 20,
            provider.spec.source.sha256.as_deref(),
        )
        .unwrap();
        assert_eq!(component.bytes, kwok_bytes(), "{flag}");
    }
}

#[test]
fn refuses_what_is_not_a_provider_and_checks_grants() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("package-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let not_wasm = dir.join("not.wasm");
    std::fs::write(&not_wasm, b"hello").unwrap();
    let out = package(&[not_wasm.to_str().unwrap(), "--name", "x"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not a provider component"), "{stderr}");
    assert!(out.stdout.is_empty());

    let grants = dir.join("bad-grants.yaml");
    std::fs::write(
        &grants,
        "- apiGroups: ['']\n  resources: [nodes]\n  verbs: [nuke]\n",
    )
    .unwrap();
    let kwok = providers_dir().join("kwok.wasm");
    let out = package(&[
        kwok.to_str().unwrap(),
        "--name",
        "x",
        "--grants",
        grants.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("nuke"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packaged_manifests_apply_and_load() {
    let setup = Setup::start("package", |_| {}).await;
    let name = setup.names.name("kwok");
    let grants = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("package-grants.yaml");
    std::fs::write(&grants, crate::conformance::KWOK_GRANTS).unwrap();
    let out = package(&[
        providers_dir().join("kwok.wasm").to_str().unwrap(),
        "--name",
        &name,
        "--namespace",
        &setup.namespace,
        "--grants",
        grants.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The test controller selects its run label: add it, as an admin would add their own labels.
    let (_, mut provider) = parse(&out.stdout);
    assert_eq!(provider.spec.grants.len(), 2);
    provider
        .labels_mut()
        .insert(crate::lifecycle::RUN_LABEL.into(), setup.names.run.clone());
    let text = String::from_utf8(out.stdout).unwrap();
    let provider_json = serde_json::to_string(&provider).unwrap();
    let docs: Vec<String> = text
        .split("\n---\n")
        .map(|doc| {
            if doc.contains("\"kind\": \"Provider\"") {
                provider_json.clone()
            } else {
                doc.to_owned()
            }
        })
        .collect();
    let (cp, _) = crate::lifecycle::cluster().await;
    let mut kubectl = cp.kubectl();
    let mut child = kubectl
        .args(["apply", "--server-side", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        &mut child.stdin.take().unwrap(),
        docs.join("\n---\n").as_bytes(),
    )
    .unwrap();
    let applied = child.wait_with_output().unwrap();
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let pre = setup.wait_serving(&name, &sha256_hex(kwok_bytes())).await;
    assert_eq!(pre.name().await.unwrap(), "kwok");
    let provider = setup.wait_condition(&name, "Ready", "True", "Loaded").await;
    assert_eq!(
        provider.status.unwrap().wit_version.as_deref(),
        Some("0.1.0")
    );
    let _ = kube::Api::<Provider>::all(setup.client.clone())
        .delete(&name, &Default::default())
        .await;
}
