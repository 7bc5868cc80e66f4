//! Grants from `Provider.spec.grants` on real calls (every denial a typed error, a counter and
//! an Event on the Provider), and providers that trap, hang or exhaust memory on every call next
//! to one that behaves.

use std::time::{Duration, Instant};

use capstan::api::provider::{GrantCluster, ProviderLimits};
use capstan::provider::source::sha256_hex;
use serde_json::json;

use super::{Setup, grant, variant};
use crate::fixtures::{chaos_bytes, class, kwok_bytes, pool};
use crate::grants::{case, kube_call};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_provider_is_denied_everything_it_was_not_granted() {
    let (_, management) = crate::lifecycle::cluster().await;
    let setup = Setup::start_with("hostile", Some(management), |_| {}).await;
    let name = setup.names.name("hostile");
    let bytes = variant(chaos_bytes(), 3000);
    setup.put_source("src", "provider.wasm", &bytes).await;
    let mut spec = setup.spec("src", "provider.wasm");
    spec.grants = vec![grant(
        GrantCluster::Workload,
        &[""],
        &["configmaps"],
        &["get"],
        &[&setup.namespace],
    )];
    setup.put_provider(&name, spec).await;
    let provider = setup.wait_serving(&name, &sha256_hex(&bytes)).await;
    let ns = setup.namespace.clone();

    // What it was granted works.
    let own = json!({"op": "get", "kind": "ConfigMap", "namespace": ns, "name": "src"});
    assert_eq!(kube_call(&provider, own).await, Ok(()));

    let attempts = [
        (
            "a Secret",
            json!({"op": "get", "kind": "Secret", "namespace": ns, "name": "anything"}),
        ),
        (
            "another namespace",
            json!({"op": "get", "kind": "ConfigMap", "namespace": "kube-system", "name": "kube-root-ca.crt"}),
        ),
        (
            "a verb not granted",
            json!({"op": "delete", "kind": "ConfigMap", "namespace": ns, "name": "src"}),
        ),
        (
            "a resource not granted",
            json!({"op": "list", "kind": "Node"}),
        ),
        (
            "the management cluster",
            json!({"op": "get", "cluster": "management", "kind": "ConfigMap", "namespace": ns, "name": "src"}),
        ),
    ];
    for (what, call) in &attempts {
        let result = kube_call(&provider, call.clone()).await;
        assert_eq!(
            case(result.clone()),
            "permission-denied",
            "{what}: {result:?}"
        );
    }
    let metrics = provider.capabilities().metrics().snapshot();
    assert_eq!(metrics.kube_denied, attempts.len() as u64);
    assert_eq!(metrics.kube_calls, attempts.len() as u64 + 1);
    // The source ConfigMap survived the delete attempt.
    assert_eq!(
        kube_call(
            &provider,
            json!({"op": "get", "kind": "ConfigMap", "namespace": ns, "name": "src"})
        )
        .await,
        Ok(())
    );
    // Reported to the admin as Events on the Provider.
    let note = setup.wait_event(&name, "PermissionDenied").await;
    assert!(note.contains("denied by the Provider's grants"), "{note}");
    capstan_test_support::wait_until(
        Duration::from_secs(30),
        "an Event per denied call",
        || async {
            let notes: Vec<String> = setup
                .events(&name, "PermissionDenied")
                .await
                .into_iter()
                .filter_map(|e| e.note)
                .collect();
            let all = ["secrets", "kube-system", "delete", "Node", "management"]
                .iter()
                .all(|needle| notes.iter().any(|n| n.contains(needle)));
            Ok::<_, String>(all.then_some(()))
        },
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn misbehaving_providers_do_not_disturb_the_others() {
    let setup = Setup::start("misbehave", |_| {}).await;
    let bad = setup.names.name("bad");
    let good = setup.names.name("good");
    let bad_bytes = variant(chaos_bytes(), 4000);
    let good_bytes = variant(kwok_bytes(), 4000);
    setup
        .put_source("bad-src", "provider.wasm", &bad_bytes)
        .await;
    setup
        .put_source("good-src", "provider.wasm", &good_bytes)
        .await;
    let mut bad_spec = setup.spec("bad-src", "provider.wasm");
    bad_spec.limits = Some(ProviderLimits {
        memory: Some(capstan::api::shared::Quantity::new("32Mi")),
        call_timeout: Some("1s".into()),
        ..ProviderLimits::default()
    });
    setup.put_provider(&bad, bad_spec).await;
    setup
        .put_provider(&good, setup.spec("good-src", "provider.wasm"))
        .await;
    let bad_provider = setup.wait_serving(&bad, &sha256_hex(&bad_bytes)).await;
    let good_provider = setup.wait_serving(&good, &sha256_hex(&good_bytes)).await;

    let started = Instant::now();
    let misbehave = tokio::spawn(async move {
        let modes = [
            json!({"mode": "trap"}),
            json!({"mode": "spin"}),
            json!({"mode": "grow", "bytes": 256u64 << 20}),
        ];
        let mut failures = 0;
        for round in 0..4 {
            let calls = modes.iter().map(|mode| {
                let provider = std::sync::Arc::clone(&bad_provider);
                let mode = mode.clone();
                async move {
                    provider
                        .get_instance_types(&pool(&format!("r{round}")), &class(mode))
                        .await
                }
            });
            for result in futures::future::join_all(calls).await {
                assert!(result.is_err(), "a misbehaving call succeeded");
                failures += 1;
            }
        }
        // Still loaded and callable after all that.
        assert_eq!(bad_provider.name().await.unwrap(), "chaos");
        failures
    });
    let mut good_calls = 0;
    while !misbehave.is_finished() {
        let types = good_provider
            .get_instance_types(&pool("good"), &class(json!({})))
            .await
            .expect("the good provider keeps working");
        assert!(!types.is_empty());
        good_calls += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let failures = misbehave.await.unwrap();
    eprintln!(
        "{failures} misbehaving calls failed alone; {good_calls} good calls succeeded in {:?}",
        started.elapsed()
    );
    assert_eq!(failures, 12);
    assert!(good_calls >= 4, "only {good_calls} good calls");
    // Both Providers stay Ready: misbehaving calls are call failures, not load failures.
    setup.wait_condition(&bad, "Ready", "True", "Loaded").await;
    setup.wait_condition(&good, "Ready", "True", "Loaded").await;
}
