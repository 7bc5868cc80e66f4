//! Hot reload under load: calls keep running while the source ConfigMap changes 20 times; none
//! fails and every new version serves.

use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan::api::provider::Provider;
use kube::Api;
use kube::api::DeleteParams;

use super::{CallerReport, Callers, Setup, variant};
use crate::fixtures::chaos_bytes;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_reloads_under_load_fail_no_call() {
    let setup = Setup::start("reload", |_| {}).await;
    let name = setup.names.name("p");
    let versions: Vec<Vec<u8>> = (0..=20).map(|n| variant(chaos_bytes(), n)).collect();
    let digests: Vec<String> = versions
        .iter()
        .map(|bytes| capstan::provider::source::sha256_hex(bytes))
        .collect();
    setup.put_source("src", "provider.wasm", &versions[0]).await;
    setup
        .put_provider(&name, setup.spec("src", "provider.wasm"))
        .await;
    setup.wait_serving(&name, &digests[0]).await;
    setup.wait_loaded(&name, &digests[0]).await;

    // Callers: 4 tasks, each a call every 20 ms (≈200 calls/s in all), through the registry as
    // the controllers call providers.
    let callers = Callers::start(&setup.registry, &name, "chaos", 4);

    let started = Instant::now();
    let mut latencies = Vec::new();
    for (bytes, digest) in versions.iter().zip(&digests).skip(1) {
        let at = Instant::now();
        setup.put_source("src", "provider.wasm", bytes).await;
        loop {
            if setup
                .registry
                .get(&name)
                .is_some_and(|p| p.sha256() == digest.as_str())
            {
                break;
            }
            assert!(
                at.elapsed() < Duration::from_secs(60),
                "reload to {digest} timed out"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        latencies.push(at.elapsed());
        // Let the callers see this version before the next update.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let CallerReport {
        calls,
        failures,
        served,
    } = callers.stop().await;
    let elapsed = started.elapsed();
    let rate = calls as f64 / elapsed.as_secs_f64();
    latencies.sort();
    eprintln!(
        "reload under load: {calls} calls in {elapsed:?} ({rate:.0}/s), reload p50 {:?} max {:?}",
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1]
    );
    assert!(failures.is_empty(), "failed calls: {failures:?}");
    assert!(rate >= 50.0, "only {rate:.1} calls/s");
    for digest in &digests[1..] {
        assert!(
            served.contains(digest),
            "version {digest} never served a call"
        );
    }
    // The status follows the last version within the usual wait.
    setup.wait_loaded(&name, &digests[20]).await;
    assert!(!setup.wait_event(&name, "Loaded").await.is_empty());

    // Deleting the Provider unloads it.
    Api::<Provider>::all(setup.client.clone())
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    capstan_test_support::wait_until(Duration::from_secs(30), "provider unloaded", || {
        let registry = Arc::clone(&setup.registry);
        let name = name.clone();
        async move { Ok::<_, String>(registry.get(&name).is_none().then_some(())) }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_finishes_on_the_version_it_started_on() {
    let setup = Setup::start("inflight", |_| {}).await;
    let name = setup.names.name("p");
    let (old, new) = (variant(chaos_bytes(), 5000), variant(chaos_bytes(), 5001));
    let (old_digest, new_digest) = (
        capstan::provider::source::sha256_hex(&old),
        capstan::provider::source::sha256_hex(&new),
    );
    setup.put_source("src", "provider.wasm", &old).await;
    setup
        .put_provider(&name, setup.spec("src", "provider.wasm"))
        .await;
    let provider = setup.wait_serving(&name, &old_digest).await;
    // A call that takes 12 s (a host sleep inside the guest, no CPU), started on the old version:
    // long enough that compiling and swapping in the new version ends first even on a loaded
    // machine.
    let slow = tokio::spawn(async move {
        let result = provider
            .get_instance_types(
                &crate::fixtures::pool("slow"),
                &crate::fixtures::class(serde_json::json!({"mode": "sleep", "millis": 12000})),
            )
            .await;
        (
            result.map(|types| types.catalog.instance_types.len()),
            provider.sha256().to_owned(),
        )
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    setup.put_source("src", "provider.wasm", &new).await;
    setup.wait_serving(&name, &new_digest).await;
    assert!(!slow.is_finished(), "the slow call ended before the swap");
    let (result, served_by) = slow.await.unwrap();
    assert_eq!(result.expect("the in-flight call succeeds"), 1);
    assert_eq!(served_by, old_digest);
}
