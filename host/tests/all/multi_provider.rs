//! Several providers in one host (docs/multi-provider.md), on the real control plane:
//!
//! - pods fall back from a preferred pool of one provider to a pool of another when the preferred
//!   one is out of capacity or its provider keeps failing, within a bound measured here;
//! - a provider whose `get-instance-types` never answers does not slow the provisioning of
//!   another's pools (time to Running measured against the same scenario without it);
//! - a spend limit (`capstan.dev/price-per-hour`) stops a pool at the price its nodes may cost,
//!   with the pool's `LimitReached` Event and `capstan explain pod` saying why.

use std::time::{Duration, Instant};

use capstan_test_support::wait_until;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::lifecycle::{Host, Names, capstan_notes, cluster, node_class, node_pool};
use crate::pool_limits::pending;
use crate::provisioner::{namespace, teardown};
use crate::provisioner_e2e::{GROUP, Pods, pool_json, wait_running};
use crate::verdict::explain_cli;

/// A pool of `weight` over a NodeClass of `provider` with `parameters`, its nodes labelled
/// [`GROUP`]` = <run>` (the pods select that); returns the pool's name.
pub(crate) async fn weighted_pool(
    client: &Client,
    names: &Names,
    what: &str,
    provider: &str,
    parameters: serde_json::Value,
    weight: i32,
    limits: Option<serde_json::Value>,
) -> String {
    let (class, pool) = (names.name(&format!("{what}-nc")), names.name(what));
    node_class(client, names, &class, provider, parameters).await;
    let mut spec = pool_json(
        names,
        &pool,
        &class,
        json!([
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        ]),
        json!({GROUP: names.run}),
        json!([]),
        limits,
    );
    spec["spec"]["weight"] = json!(weight);
    node_pool(client, spec).await;
    pool
}

/// The Nodes of the test's run (by the pools' template label).
pub(crate) async fn run_nodes(client: &Client, names: &Names) -> Vec<Node> {
    Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{GROUP}={}", names.run)))
        .await
        .unwrap()
        .items
}

/// Events of `reason` about NodeClaims of `pool` (their names start with the pool's).
async fn claim_events(client: &Client, pool: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| {
            e.regarding
                .as_ref()
                .is_some_and(|r| r.kind.as_deref() == Some("NodeClaim"))
                && e.regarding
                    .as_ref()
                    .and_then(|r| r.name.as_deref())
                    .is_some_and(|n| n.starts_with(pool))
        })
        .collect()
}

/// The preferred pool (weight 100, the chaos provider answering `create` with `error`) fails;
/// the pods run on the kwok provider's pool (weight 10) within `bound`, on kwok's nodes only.
async fn falls_back(error: &str, reason: &str, bound: Duration) {
    let (cp, client) = cluster().await;
    let names = Names::new(&format!("fallback-{error}"));
    let host = Host::start(cp, &names, &["--batch-idle-duration", "300ms"]);
    let preferred = weighted_pool(
        &client,
        &names,
        "onprem",
        "chaos",
        json!({"mode": "create-error", "error": error}),
        100,
        None,
    )
    .await;
    let cloud = weighted_pool(&client, &names, "cloud", "kwok", json!({}), 10, None).await;
    let ns = namespace(cp, "fallback").await;
    let started = Instant::now();
    Pods::new(&client, &names, &ns, "app")
        .count(3)
        .cpu("100m")
        .node_selector(json!({GROUP: names.run}))
        .create()
        .await;
    wait_running(&client, &host, &ns, 3, bound).await;
    let took = started.elapsed();
    println!("{error}: 3 pods Running on the fallback pool after {took:?} (bound {bound:?})");
    let failed = claim_events(&client, &preferred, reason).await;
    assert!(
        !failed.is_empty(),
        "the preferred pool was tried first and failed with {reason}\nhost log:\n{}",
        host.log_tail()
    );
    let nodes = run_nodes(&client, &names).await;
    assert!(!nodes.is_empty());
    for node in &nodes {
        assert_eq!(
            node.labels()
                .get("karpenter.sh/nodepool")
                .map(String::as_str),
            Some(cloud.as_str()),
            "{}",
            node.name_any()
        );
    }
    teardown(&client, &names, &ns).await;
    host.check_alive();
}

#[tokio::test]
async fn pods_fall_back_across_providers_when_the_preferred_is_out_of_capacity() {
    falls_back(
        "insufficient-capacity",
        "InsufficientCapacityError",
        Duration::from_secs(30),
    )
    .await;
}

#[tokio::test]
async fn pods_fall_back_across_providers_when_the_preferred_keeps_failing() {
    // Three failures in a row with the backoff (1 s, 2 s) before the claim goes.
    falls_back("trap", "LaunchFailed", Duration::from_secs(40)).await;
}

/// Time until `count` pods selecting the kwok pool run, with the chaos provider's pool (whose
/// `get-instance-types` spins until the call times out) beside it when `misbehaving`.
async fn kwok_time_to_running(misbehaving: bool) -> Duration {
    let (cp, client) = cluster().await;
    let names = Names::new(if misbehaving { "isolated" } else { "alone" });
    let host = Host::start(cp, &names, &["--batch-idle-duration", "300ms"]);
    let cloud = weighted_pool(&client, &names, "cloud", "kwok", json!({}), 10, None).await;
    if misbehaving {
        let spinning = weighted_pool(
            &client,
            &names,
            "spin",
            "chaos",
            json!({"mode": "spin"}),
            100,
            None,
        )
        .await;
        let ns = namespace(cp, "spin").await;
        Pods::new(&client, &names, &ns, "stuck")
            .count(2)
            .cpu("100m")
            .node_selector(json!({"karpenter.sh/nodepool": spinning}))
            .create()
            .await;
    }
    let ns = namespace(cp, "isolation").await;
    let started = Instant::now();
    // Several batches: the slow provider's catalog is asked on every pass.
    for batch in 0..3 {
        Pods::new(&client, &names, &ns, &format!("b{batch}"))
            .count(2)
            .cpu("500m")
            .node_selector(json!({"karpenter.sh/nodepool": cloud}))
            .create()
            .await;
        wait_running(
            &client,
            &host,
            &ns,
            2 * (batch + 1),
            Duration::from_secs(60),
        )
        .await;
    }
    let took = started.elapsed();
    teardown(&client, &names, &ns).await;
    host.check_alive();
    took
}

#[tokio::test]
async fn a_provider_that_never_answers_does_not_slow_another() {
    let alone = kwok_time_to_running(false).await;
    let beside = kwok_time_to_running(true).await;
    println!(
        "kwok pods, 3 batches, time to Running: alone {alone:?}, beside a provider whose catalog never answers {beside:?} (ratio {:.2})",
        beside.as_secs_f64() / alone.as_secs_f64()
    );
    // The first pass waits for the silent provider at most its first-answer bound (10 s), once;
    // the spinning call itself (until the 30 s call timeout) holds no one up.
    assert!(
        beside <= alone + capstan::catalog::DEFAULT_FIRST_WAIT + Duration::from_secs(4),
        "alone {alone:?}, beside {beside:?}"
    );
}

/// The note of the first `LimitReached` Event on pool `pool` (waits for it a minute).
pub(crate) async fn limit_reached(client: &Client, host: &Host, pool: &str) -> String {
    wait_until(
        Duration::from_secs(60),
        &format!("LimitReached on {pool}"),
        || async {
            let notes = capstan_notes(client, "default", pool, "LimitReached").await;
            Ok::<_, kube::Error>(notes.into_iter().next())
        },
    )
    .await
    .unwrap_or_else(|err| panic!("{err}\nhost log:\n{}", host.log_tail()))
}

/// The kwok provider's catalog of one type, `std-4`: 4 CPUs for 1.00 an hour.
pub(crate) fn priced_catalog() -> serde_json::Value {
    json!({"instanceTypes": [{
        "name": "std-4", "architecture": "amd64", "operatingSystems": ["linux"],
        "resources": {"cpu": "4", "memory": "16Gi", "pods": "110"},
        "offerings": [{"capacityType": "on-demand", "zone": "test-zone-a", "price": 1.0}],
    }]})
}

#[tokio::test]
async fn a_spend_limit_stops_a_pool_at_its_price() {
    let (cp, client) = cluster().await;
    let names = Names::new("spend");
    let host = Host::start(cp, &names, &["--batch-idle-duration", "300ms"]);
    let pool = weighted_pool(
        &client,
        &names,
        "budget",
        "kwok",
        priced_catalog(),
        10,
        Some(json!({"capstan.dev/price-per-hour": "3.5"})),
    )
    .await;
    let ns = namespace(cp, "spend").await;
    // Five pods of 3 CPUs: one per 4-CPU node at 1.00 an hour; 3.5 pays for three.
    Pods::new(&client, &names, &ns, "app")
        .count(5)
        .cpu("3")
        .node_selector(json!({GROUP: names.run}))
        .create()
        .await;
    wait_running(&client, &host, &ns, 3, Duration::from_secs(90)).await;
    let note = limit_reached(&client, &host, &pool).await;
    println!("pool Event: {note}");
    assert!(
        note.starts_with(
            "limit capstan.dev/price-per-hour=3.5 reached: capstan.dev/price-per-hour=0.5 left"
        ),
        "{note}"
    );
    // Later passes add nothing: still three nodes, 3.00 an hour.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let nodes = run_nodes(&client, &names).await;
    let spend: f64 = nodes
        .iter()
        .filter_map(|n| n.labels().get("eks-node-viewer/instance-price"))
        .map(|p| p.parse::<f64>().unwrap())
        .sum();
    assert_eq!(nodes.len(), 3, "{spend}");
    assert!((spend - 3.0).abs() < 1e-9, "{spend}");
    let waiting = pending(&client, &ns).await;
    assert_eq!(waiting.len(), 2, "{waiting:?}");
    let pod = waiting.iter().next().unwrap();
    let report = explain_cli(cp, &["pod", &format!("{ns}/{pod}")]);
    println!("explain pod: {}", report["decision"]);
    assert_eq!(report["decision"]["reason"], "FailedScheduling", "{report}");
    assert!(
        report["decision"]["note"]
            .as_str()
            .is_some_and(|n| n.contains("limit capstan.dev/price-per-hour exceeded")),
        "{report}"
    );
    teardown(&client, &names, &ns).await;
    host.check_alive();
}
