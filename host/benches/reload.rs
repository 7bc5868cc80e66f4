//! Hot-reload latency (`cargo bench -p capstan --bench reload`): from a ConfigMap update (the
//! API server's answer) to the first call served by the new version, over 20 reloads of the kwok
//! provider, with a cold compile cache (every version new) and a warm one (every version already
//! compiled on disk, loaded by a fresh runtime). Runs on a real API server from the test harness.
//!
//! Prints p50, p95 and max per mode. Not criterion: each sample needs a watch round trip.

// Benchmarks are test code: a broken setup should stop them loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "support/guests.rs"]
mod guests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan::api::provider::Provider;
use capstan::controllers::providers::{ProviderController, Settings};
use capstan::provider::source::sha256_hex;
use capstan::provider::{Loader, Registry};
use capstan::runtime::Runtime;
use capstan_test_support::{ControlPlane, Options, repo_root, unique_name};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

const RELOADS: usize = 20;

/// `bytes` with a trailing custom section: the same code, a different digest.
fn variant(bytes: &[u8], n: u32) -> Vec<u8> {
    let name = b"capstan-bench-variant";
    let mut content = vec![name.len() as u8];
    content.extend_from_slice(name);
    content.extend_from_slice(&n.to_le_bytes());
    let mut out = bytes.to_vec();
    out.push(0);
    out.push(content.len() as u8);
    out.extend_from_slice(&content);
    out
}

fn runtime(cache: &std::path::Path) -> Arc<Runtime> {
    std::fs::create_dir_all(cache).unwrap();
    let dir = cap_std::fs::Dir::open_ambient_dir(cache, cap_std::ambient_authority()).unwrap();
    Arc::new(Runtime::builder().cache_dir(dir).build().unwrap())
}

async fn put_source(client: &Client, namespace: &str, bytes: &[u8]) {
    let config_map = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("src".into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        binary_data: Some([("provider.wasm".to_owned(), ByteString(bytes.to_vec()))].into()),
        ..Default::default()
    };
    let mut value = serde_json::to_value(&config_map).unwrap();
    value["apiVersion"] = "v1".into();
    value["kind"] = "ConfigMap".into();
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .patch(
            "src",
            &PatchParams::apply("bench").force(),
            &Patch::Apply(&value),
        )
        .await
        .unwrap();
}

/// Runs one mode; returns the sorted latencies.
async fn measure(
    cp: &ControlPlane,
    client: &Client,
    runtime: Arc<Runtime>,
    versions: &[Vec<u8>],
) -> Vec<Duration> {
    let run = unique_name("reload");
    let namespace = cp.create_namespace_unique("reload").await.unwrap();
    let registry = Arc::new(Registry::new());
    let loader = Arc::new(Loader::new(runtime, Some(client.clone()), None));
    let controller = ProviderController::new(
        client.clone(),
        Arc::clone(&registry),
        loader,
        Settings {
            source_namespace: Some(namespace.clone()),
            selector: Some(format!("bench-run={run}")),
            ..Settings::default()
        },
    );
    let task = tokio::spawn(controller.run());
    let name = format!("{run}-kwok");
    put_source(client, &namespace, &versions[0]).await;
    let provider = json!({
        "apiVersion": "capstan.dev/v1alpha1",
        "kind": "Provider",
        "metadata": {"name": name, "labels": {"bench-run": run}},
        "spec": {"source": {"configMap": {"namespace": namespace, "name": "src", "key": "provider.wasm"}}},
    });
    let providers: Api<Provider> = Api::all(client.clone());
    providers
        .patch(
            &name,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(&provider),
        )
        .await
        .unwrap();
    let first = sha256_hex(&versions[0]);
    let wait = |digest: String, at: Instant| {
        let registry = Arc::clone(&registry);
        let name = name.clone();
        async move {
            loop {
                if let Some(p) = registry.get(&name).filter(|p| p.sha256() == digest) {
                    p.name().await.expect("the new version answers");
                    return at.elapsed();
                }
                assert!(at.elapsed() < Duration::from_secs(120), "reload timed out");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    };
    wait(first, Instant::now()).await;
    let mut latencies = Vec::new();
    for bytes in &versions[1..] {
        let digest = sha256_hex(bytes);
        put_source(client, &namespace, bytes).await;
        let at = Instant::now();
        latencies.push(wait(digest, at).await);
    }
    task.abort();
    let _ = providers.delete(&name, &Default::default()).await;
    latencies.sort();
    latencies
}

fn report(mode: &str, latencies: &[Duration]) {
    let pick = |q: f64| latencies[((latencies.len() as f64 * q).ceil() as usize).saturating_sub(1)];
    println!(
        "reload/{mode}: {} reloads, p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms",
        latencies.len(),
        pick(0.50).as_secs_f64() * 1e3,
        pick(0.95).as_secs_f64() * 1e3,
        latencies[latencies.len() - 1].as_secs_f64() * 1e3,
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a filter that excludes us skips the run.
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with("--") && !"reload".contains(a.as_str()))
    {
        return;
    }
    let kwok = guests::guest_wasm("kwok");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cp = ControlPlane::start(Options::api_server_only())
            .await
            .unwrap();
        cp.install_crds_from_dir(&repo_root().join("crds"))
            .await
            .unwrap();
        let client = cp.client().unwrap();
        let scratch = std::env::temp_dir().join(unique_name("capstan-reload-bench"));

        // Cold: every version is new to the cache.
        let cold_versions: Vec<Vec<u8>> = (0..=RELOADS as u32).map(|n| variant(&kwok, n)).collect();
        let cold = measure(&cp, &client, runtime(&scratch.join("cold")), &cold_versions).await;
        report("cold-cache", &cold);

        // Warm: the same versions compiled on disk beforehand; a fresh runtime loads them.
        let warm_versions: Vec<Vec<u8>> = (1000..=1000 + RELOADS as u32)
            .map(|n| variant(&kwok, n))
            .collect();
        let warm_dir = scratch.join("warm");
        let precompile = runtime(&warm_dir);
        for bytes in &warm_versions {
            precompile.compile(bytes).unwrap();
        }
        drop(precompile);
        let warm = measure(&cp, &client, runtime(&warm_dir), &warm_versions).await;
        report("warm-cache", &warm);
        let _ = std::fs::remove_dir_all(&scratch);
        cp.stop().unwrap();
    });
}
