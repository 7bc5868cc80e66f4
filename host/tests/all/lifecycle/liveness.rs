//! Liveness with short timeouts: a claim whose `create` blocks past `--launch-timeout` and a
//! claim whose Node never registers within `--registration-timeout` are deleted, with an Event,
//! and the registration timeout marks the NodePool `NodeRegistrationHealthy=False`.

use std::time::{Duration, Instant};

use capstan::api::{NodeClaim, NodePool};
use capstan_test_support::wait_until;
use kube::Api;
use serde_json::json;

use super::*;

const TIMEOUT: Duration = Duration::from_secs(4);

#[tokio::test]
async fn launch_and_registration_timeouts_delete_the_claim() {
    let (cp, client) = cluster().await;
    let names = Names::new("liveness");
    let host = Host::start(
        cp,
        &names,
        &["--launch-timeout", "4s", "--registration-timeout", "4s"],
    );
    let (blocks, ghost) = (names.name("blocks"), names.name("ghost"));
    // create blocks for a minute (host sleep inside the guest), far past the launch timeout.
    node_class(
        &client,
        &names,
        &blocks,
        "chaos",
        json!({"mode": "sleep", "millis": 60_000}),
    )
    .await;
    // create succeeds at once with provider ID chaos://<claim>, and no Node ever appears.
    node_class(&client, &names, &ghost, "chaos", json!({"mode": "ok"})).await;
    let (blocks_pool, ghost_pool) = (names.name("blocks-pool"), names.name("ghost-pool"));
    node_pool(&client, node_pool_json(&names, &blocks_pool, &blocks)).await;
    node_pool(&client, node_pool_json(&names, &ghost_pool, &ghost)).await;

    let (slow, unregistered) = (names.name("slow-claim"), names.name("unregistered-claim"));
    let started = Instant::now();
    claim(&client, claim_json(&names, &slow, &blocks_pool, &blocks)).await;
    claim(
        &client,
        claim_json(&names, &unregistered, &ghost_pool, &ghost),
    )
    .await;

    // The ghost claim launches, and stays unregistered until the timeout.
    let launched = wait_condition(
        &client,
        &host,
        &unregistered,
        "Launched",
        "True",
        None,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        launched.status.and_then(|s| s.provider_id).as_deref(),
        Some(format!("chaos://{unregistered}").as_str())
    );

    wait_claim_gone(&client, &host, &slow, Duration::from_secs(60)).await;
    let slow_after = started.elapsed();
    wait_claim_gone(&client, &host, &unregistered, Duration::from_secs(60)).await;
    let unregistered_after = started.elapsed();
    println!(
        "launch timeout {TIMEOUT:?}: claim gone after {slow_after:?}; registration timeout {TIMEOUT:?}: claim gone after {unregistered_after:?}"
    );
    // creationTimestamp has second granularity (truncated), so a claim can look up to 1 s older.
    assert!(
        slow_after >= TIMEOUT - Duration::from_secs(1),
        "deleted before the launch timeout: {slow_after:?}"
    );
    assert!(
        slow_after < TIMEOUT + Duration::from_secs(30),
        "the blocked create held the claim: {slow_after:?}"
    );
    assert!(
        unregistered_after >= TIMEOUT,
        "deleted before the registration timeout: {unregistered_after:?}"
    );

    let event = wait_event(&client, "default", &slow, "LaunchTimeout").await;
    assert!(
        event
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("did not launch"),
        "{event:?}"
    );
    let event = wait_event(&client, "default", &unregistered, "RegistrationTimeout").await;
    assert!(
        event
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("did not register"),
        "{event:?}"
    );

    // The ghost pool is marked unhealthy.
    let pools = Api::<NodePool>::all(client.clone());
    let health = wait_until(
        Duration::from_secs(30),
        "NodeRegistrationHealthy=False",
        || async {
            let pool = pools.get(&ghost_pool).await?;
            let condition = pool.status.and_then(|s| {
                s.conditions
                    .into_iter()
                    .find(|c| c.type_ == "NodeRegistrationHealthy")
            });
            Ok::<_, kube::Error>(condition.filter(|c| format!("{:?}", c.status) == "False"))
        },
    )
    .await
    .unwrap_or_else(|err| panic!("{err}\n{}", host.log_tail()));
    assert_eq!(health.reason.as_deref(), Some("RegistrationFailed"));
    assert!(
        health
            .message
            .as_deref()
            .unwrap_or_default()
            .contains(&unregistered),
        "{health:?}"
    );
    assert!(
        Api::<NodeClaim>::all(client.clone())
            .get_opt(&slow)
            .await
            .unwrap()
            .is_none()
    );
    host.check_alive();
    cleanup(&client, &names).await;
}
