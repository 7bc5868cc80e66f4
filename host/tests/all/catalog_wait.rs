//! The provisioner's catalogs do not wait on one slow or failing provider: a first answer is
//! waited for at most a bound, once; a failing call is not repeated at every pass; an answer
//! older than the TTL is used while the next one is fetched.

use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan::api::{NodeClass, NodePool};
use capstan::capability::Capabilities;
use capstan::catalog::{Catalog, InstanceTypeCache};
use capstan::runtime::Limits;
use serde_json::json;

use crate::fixtures::chaos;

fn limits() -> Limits {
    Limits {
        cpu_time: Duration::from_secs(30),
        call_timeout: Duration::from_secs(30),
        ..Limits::default()
    }
}

fn pool(name: &str) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name, "generation": 1},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": name},
            "requirements": [],
        }}},
    }))
    .unwrap()
}

fn class(name: &str, parameters: serde_json::Value) -> NodeClass {
    serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "NodeClass",
        "metadata": {"name": name, "generation": 1},
        "spec": {"provider": "chaos", "parameters": parameters},
    }))
    .unwrap()
}

async fn ask(
    cache: &InstanceTypeCache,
    provider: &Arc<capstan::runtime::ProviderPre>,
    name: &str,
    parameters: serde_json::Value,
    wait: Duration,
) -> (Duration, Result<usize, String>) {
    let started = Instant::now();
    let result = cache
        .get_within(
            "test",
            provider,
            &pool(name),
            &class(name, parameters),
            Catalog::Overlaid,
            wait,
        )
        .await;
    (
        started.elapsed(),
        result.map(|t| t.len()).map_err(|e| e.to_string()),
    )
}

#[tokio::test]
async fn a_slow_catalog_is_waited_for_once_and_at_most_the_bound() {
    let provider = Arc::new(chaos(limits(), Capabilities::isolated("chaos")));
    let cache = InstanceTypeCache::new(Duration::from_millis(1500));
    let answered = cache.answered();
    let slow = json!({"mode": "sleep", "millis": 2000});
    let bound = Duration::from_millis(300);

    let (took, result) = ask(&cache, &provider, "slow", slow.clone(), bound).await;
    println!("first pass: {took:?}");
    let err = result.unwrap_err();
    assert!(
        err.contains("has not answered get-instance-types within"),
        "{err}"
    );
    assert!(took < bound + Duration::from_millis(200), "{took:?}");
    // The next pass does not wait again while the call runs.
    let (took, result) = ask(&cache, &provider, "slow", slow.clone(), bound).await;
    let err = result.unwrap_err();
    assert!(
        err.contains("no instance types yet (get-instance-types has not answered)"),
        "{err}"
    );
    assert!(took < Duration::from_millis(50), "{took:?}");
    // Its answer comes in the background, and is told.
    tokio::time::timeout(Duration::from_secs(10), answered.notified())
        .await
        .expect("the background call answers");
    let (took, result) = ask(&cache, &provider, "slow", slow.clone(), bound).await;
    assert_eq!(result.unwrap(), 1);
    assert!(took < Duration::from_millis(50), "{took:?}");
    // Past the TTL the old answer is used at once while the next one is fetched.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let (took, result) = ask(&cache, &provider, "slow", slow, bound).await;
    assert_eq!(result.unwrap(), 1, "the stale answer");
    assert!(took < Duration::from_millis(50), "{took:?}");
    tokio::time::timeout(Duration::from_secs(10), answered.notified())
        .await
        .expect("the stale answer is fetched afresh");
    let (took, result) = ask(
        &cache,
        &provider,
        "slow",
        json!({"mode": "sleep", "millis": 2000}),
        bound,
    )
    .await;
    assert_eq!(result.unwrap(), 1, "the fresh answer");
    assert!(took < Duration::from_millis(50), "{took:?}");
}

#[tokio::test]
async fn a_failing_catalog_is_not_asked_again_at_every_pass() {
    let provider = Arc::new(chaos(limits(), Capabilities::isolated("chaos")));
    let cache = InstanceTypeCache::default();
    let trap = json!({"mode": "trap"});
    let (_, result) = ask(
        &cache,
        &provider,
        "trap",
        trap.clone(),
        Duration::from_secs(10),
    )
    .await;
    let err = result.unwrap_err();
    assert!(err.contains("get-instance-types failed"), "{err}");
    let (took, result) = ask(&cache, &provider, "trap", trap, Duration::from_secs(10)).await;
    let err = result.unwrap_err();
    assert!(
        err.contains("no instance types yet (get-instance-types failed"),
        "{err}"
    );
    assert!(took < Duration::from_millis(50), "{took:?}");
    // Another pool of the same provider is not held back by it.
    let (_, result) = ask(
        &cache,
        &provider,
        "fine",
        json!({"mode": "catalog", "count": 3}),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(result.unwrap(), 3);
}

#[tokio::test]
async fn a_catalog_is_fetched_afresh_each_time_it_goes_stale() {
    let provider = Arc::new(chaos(limits(), Capabilities::isolated("chaos")));
    let cache = InstanceTypeCache::new(Duration::from_millis(300));
    let answered = cache.answered();
    // The first ask waits for the answer; each later one, past the TTL, is answered at once
    // with the stale catalog while a fresh one is fetched (and told).
    for round in 0..4 {
        if round > 0 {
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        let (_, result) = ask(
            &cache,
            &provider,
            "echo",
            json!({}),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(result.unwrap(), 1);
        if round > 0 {
            tokio::time::timeout(Duration::from_secs(10), answered.notified())
                .await
                .unwrap_or_else(|_| panic!("round {round}: the stale catalog is fetched afresh"));
        }
    }
}
