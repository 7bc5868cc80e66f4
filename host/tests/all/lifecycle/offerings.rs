//! Insufficient capacity marks the claim's offerings unavailable for a while: the next claim
//! asking for the same offerings fails fast without a provider call, while a claim for another
//! offering still reaches the provider.

use std::time::{Duration, Instant};

use serde_json::json;

use super::*;

fn pinned(
    names: &Names,
    name: &str,
    pool: &str,
    class: &str,
    instance_type: &str,
) -> serde_json::Value {
    let mut claim = claim_json(names, name, pool, class);
    let requirements = claim["spec"]["requirements"].as_array_mut().unwrap();
    requirements.push(json!({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [instance_type]}));
    requirements.push(
        json!({"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}),
    );
    claim
}

async fn gone_with_note(client: &Client, host: &Host, name: &str) -> String {
    wait_claim_gone(client, host, name, Duration::from_secs(60)).await;
    let event = wait_event(client, "default", name, "InsufficientCapacityError").await;
    event.note.unwrap_or_default()
}

#[tokio::test]
async fn insufficient_capacity_is_cached_per_offering() {
    let (cp, client) = cluster().await;
    let names = Names::new("ice-cache");
    let host = Host::start(cp, &names, &[]);
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(
        &client,
        &names,
        &class,
        "chaos",
        json!({"mode": "create-error", "error": "insufficient-capacity"}),
    )
    .await;

    let first = names.name("first");
    claim(&client, pinned(&names, &first, &pool, &class, "small")).await;
    let note = gone_with_note(&client, &host, &first).await;
    assert!(
        note.contains("chaos: insufficient-capacity requested"),
        "{note}"
    );

    // Same offering: answered from the cache, the provider is not asked.
    let again = names.name("again");
    let started = Instant::now();
    claim(&client, pinned(&names, &again, &pool, &class, "small")).await;
    let note = gone_with_note(&client, &host, &again).await;
    println!(
        "cached insufficient capacity: claim gone in {:?}",
        started.elapsed()
    );
    assert!(
        note.contains("out of capacity at provider chaos (cached)"),
        "{note}"
    );
    assert!(!note.contains("requested"), "{note}");

    // Another instance type is still tried.
    let other = names.name("other");
    claim(&client, pinned(&names, &other, &pool, &class, "large")).await;
    let note = gone_with_note(&client, &host, &other).await;
    assert!(
        note.contains("chaos: insufficient-capacity requested"),
        "{note}"
    );
    host.check_alive();
    cleanup(&client, &names).await;
}
