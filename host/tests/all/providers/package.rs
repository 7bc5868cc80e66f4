//! `capstan provider package`: manifests that parse, carry the component exactly (raw,
//! compressed, or split into parts), pin it, hold the grants, and load (and hot-reload) when
//! applied to the real API server.

use std::process::{Command, Stdio};

use capstan::api::provider::Provider;
use capstan::provider::source::{self, Compression, sha256_hex};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;

use std::time::Duration;

use super::{Callers, Setup, variant};
use crate::fixtures::{kwok_bytes, kwok_python_bytes, providers_dir};

fn package(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["provider", "package"])
        .args(args)
        .output()
        .expect("run capstan")
}

/// `capstan provider package FILE --name NAME --namespace NS --grants GRANTS`, which must
/// succeed: the manifests it prints.
fn package_with_grants(
    file: &std::path::Path,
    name: &str,
    namespace: &str,
    grants: &std::path::Path,
) -> Vec<u8> {
    let out = package(&[
        file.to_str().unwrap(),
        "--name",
        name,
        "--namespace",
        namespace,
        "--grants",
        grants.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The ConfigMaps and the Provider in the output, in that order (the CRDs of the node class kinds
/// the component declares come first and are left out here).
fn parse_all(stdout: &[u8]) -> (Vec<ConfigMap>, Provider) {
    let text = String::from_utf8(stdout.to_vec()).unwrap();
    let mut docs: Vec<&str> = text
        .split("\n---\n")
        .filter(|doc| doc.trim_start().starts_with('{'))
        .filter(|doc| {
            serde_json::from_str::<serde_json::Value>(doc)
                .is_ok_and(|v| v["kind"] != "CustomResourceDefinition")
        })
        .collect();
    assert!(docs.len() >= 2, "{text}");
    let provider = serde_json::from_str(docs.pop().unwrap()).unwrap();
    let config_maps = docs
        .into_iter()
        .map(|doc| serde_json::from_str(doc).unwrap())
        .collect();
    (config_maps, provider)
}

/// The one ConfigMap and the Provider in the output.
fn parse(stdout: &[u8]) -> (ConfigMap, Provider) {
    let (mut config_maps, provider) = parse_all(stdout);
    assert_eq!(config_maps.len(), 1);
    (config_maps.remove(0), provider)
}

/// Applies `capstan provider package` output with `kubectl apply --server-side`, the Provider
/// labelled for `setup`'s controller; returns the ConfigMaps and the Provider applied.
async fn apply(setup: &Setup, stdout: &[u8]) -> (Vec<ConfigMap>, Provider) {
    let (config_maps, mut provider) = parse_all(stdout);
    // The test controller selects its run label: add it, as an admin would add their own labels.
    provider
        .labels_mut()
        .insert(crate::lifecycle::RUN_LABEL.into(), setup.names.run.clone());
    let text = String::from_utf8(stdout.to_vec()).unwrap();
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
        // The node class CRDs in the package may already be installed by another test on this
        // shared control plane (another field manager): take them over, as an admin re-running
        // the apply would.
        .args(["apply", "--server-side", "--force-conflicts", "-f", "-"])
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
    (config_maps, provider)
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
        let source = provider.spec.source.config_map.as_ref().unwrap();
        assert_eq!(source.key, key);
        assert_eq!(source.namespace, "ops");
        assert_eq!(source.name, config_map.name_any());
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
    let manifests = package_with_grants(
        &providers_dir().join("kwok.wasm"),
        &name,
        &setup.namespace,
        &grants,
    );
    let (_, provider) = apply(&setup, &manifests).await;
    // KWOK_GRANTS: nodes, node-class kinds, and the DRA driver's DRAConfigs.
    assert_eq!(provider.spec.grants.len(), 3);
    let pre = setup.wait_serving(&name, &sha256_hex(kwok_bytes())).await;
    assert_eq!(pre.name().await.unwrap(), "kwok");
    let provider = setup.wait_condition(&name, "Ready", "True", "Loaded").await;
    assert_eq!(
        provider.status.unwrap().wit_version.as_deref(),
        Some("0.5.0")
    );
    let _ = kube::Api::<Provider>::all(setup.client.clone())
        .delete(&name, &Default::default())
        .await;
}

/// The kwok provider in Python is too large for one ConfigMap even compressed: it ships split
/// into parts, loads, serves calls, and hot-reloads to a new version (new parts) and to the Rust
/// build (one ConfigMap) while calls run, none failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_python_provider_ships_in_parts_and_hot_reloads_under_calls() {
    let setup = Setup::start("pyparts", |_| {}).await;
    let name = setup.names.name("kwok-py");
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("package-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let grants = dir.join("pyparts-grants.yaml");
    std::fs::write(&grants, crate::conformance::KWOK_GRANTS).unwrap();
    let v2 = variant(kwok_python_bytes(), 2);
    let v2_file = dir.join("kwok-python-v2.wasm");
    std::fs::write(&v2_file, &v2).unwrap();
    let versions = [
        providers_dir().join("kwok-python.wasm"),
        v2_file,
        providers_dir().join("kwok.wasm"),
    ];
    let digests = [
        sha256_hex(kwok_python_bytes()),
        sha256_hex(&v2),
        sha256_hex(kwok_bytes()),
    ];
    let ship = |file: &std::path::Path| package_with_grants(file, &name, &setup.namespace, &grants);

    // Packaged up front: the reloads below time applying, not packaging.
    let packages: Vec<Vec<u8>> = versions.iter().map(|file| ship(file)).collect();
    // A Python component compiles for a while the first time (tens of seconds in a debug build on
    // a busy machine); the compiled artifact is cached after that.
    let compile_wait = Duration::from_secs(240);
    let started = std::time::Instant::now();
    let (config_maps, provider) = apply(&setup, &packages[0]).await;
    assert!(config_maps.len() > 1, "a Python component is split");
    assert_eq!(provider.spec.source.parts.len(), config_maps.len() - 1);
    assert_eq!(
        provider.spec.source.config_map.as_ref().unwrap().key,
        "provider.wasm.gz"
    );
    let stored: usize = config_maps
        .iter()
        .map(|cm| {
            let size = cm.binary_data.as_ref().unwrap()["provider.wasm.gz"].0.len();
            assert!(
                size <= capstan::provider::package::CONFIG_MAP_BUDGET,
                "{size}"
            );
            size
        })
        .sum();
    let component = source::from_config_maps(
        &config_maps,
        "provider.wasm.gz",
        32 << 20,
        provider.spec.source.sha256.as_deref(),
    )
    .unwrap();
    assert_eq!(component.bytes, kwok_python_bytes());
    let pre = setup
        .wait_serving_within(&name, &digests[0], compile_wait)
        .await;
    eprintln!(
        "kwok-python: {} bytes, {stored} bytes gzip in {} ConfigMaps, serving {:?} after apply",
        kwok_python_bytes().len(),
        config_maps.len(),
        started.elapsed()
    );
    assert_eq!(pre.name().await.unwrap(), "kwok");
    let types = pre
        .get_instance_types(
            &crate::fixtures::pool("p"),
            &crate::fixtures::class(serde_json::json!({})),
        )
        .await
        .unwrap();
    assert_eq!(types.catalog.instance_types.len(), 72);
    setup.wait_loaded(&name, &digests[0]).await;

    // Callers: 2 tasks calling name() through the registry while versions change.
    let callers = Callers::start(&setup.registry, &name, "kwok", 2);
    for ((file, package), digest) in versions.iter().zip(&packages).zip(&digests).skip(1) {
        let at = std::time::Instant::now();
        apply(&setup, package).await;
        setup.wait_serving_within(&name, digest, compile_wait).await;
        eprintln!("reloaded to {} in {:?}", file.display(), at.elapsed());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let report = callers.stop().await;
    let (failures, served) = (report.failures, report.served);
    assert!(failures.is_empty(), "failed calls: {failures:?}");
    assert!(report.calls > 10);
    for digest in &digests {
        assert!(
            served.contains(digest),
            "version {digest} never served a call"
        );
    }
    setup.wait_loaded(&name, &digests[2]).await;
    let _ = kube::Api::<Provider>::all(setup.client.clone())
        .delete(&name, &Default::default())
        .await;
}
