//! NodePool limits with claims in flight, on the real control plane: a pool with `limits.cpu: 64`
//! and pods arriving in several batches while the earlier claims are still launching (the kwok
//! provider sleeps before each launch). Each claim lists only instance types no larger than its
//! pods need, so all the pods that fit under the limit get nodes, the claims never hold more than
//! 64 CPUs (each counted at its largest listed type until it launches, then at what it
//! launched), and the pods beyond the limit stay Pending with a `LimitReached` Event on the pool.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use capstan::api::labels::INSTANCE_TYPE;
use capstan::api::{NodeClaim, NodeSelectorOperator};
use capstan_test_support::wait_until;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::lifecycle::{Host, Names, capstan_notes, cluster, events};
use crate::provisioner::{claims, namespace, teardown};
use crate::provisioner_e2e::{GROUP, Pods, group_pool, wait_running};

/// The CPUs of a kwok instance type (`c-8x-amd64-linux` → 8).
fn type_cpus(name: &str) -> i64 {
    name.split('-')
        .nth(1)
        .and_then(|s| s.strip_suffix('x'))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a kwok type: {name}"))
}

/// What a claim counts against the limit: its launched capacity, else its largest option.
fn worst_case_cpus(claim: &NodeClaim) -> i64 {
    if let Some(cpu) = claim.status.as_ref().and_then(|s| s.capacity.get("cpu")) {
        return match cpu.0.strip_suffix('m') {
            Some(millis) => (millis.parse::<i64>().unwrap() + 999) / 1000,
            None => cpu.0.parse().unwrap(),
        };
    }
    claim
        .spec
        .requirements
        .iter()
        .find(|r| r.key == INSTANCE_TYPE && r.operator == NodeSelectorOperator::In)
        .map(|r| r.values.iter().map(|v| type_cpus(v)).max().unwrap_or(0))
        .unwrap_or_else(|| panic!("claim {} lists no instance types", claim.name_any()))
}

/// Asserts the claims' worst cases sum to at most 64 CPUs; returns the sum.
async fn check_limit(client: &Client, names: &Names, host: &Host) -> i64 {
    let all = claims(client, names).await;
    let total: i64 = all.iter().map(worst_case_cpus).sum();
    assert!(
        total <= 64,
        "claims hold {total} CPUs over the 64-CPU limit: {:?}\nhost log:\n{}",
        all.iter()
            .map(|c| (c.name_any(), worst_case_cpus(c)))
            .collect::<Vec<_>>(),
        host.log_tail()
    );
    total
}

/// The pods of `ns` not bound to a node.
pub(crate) async fn pending(client: &Client, ns: &str) -> BTreeSet<String> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.spec.as_ref().is_none_or(|s| s.node_name.is_none()))
        .map(|p| p.name_any())
        .collect()
}

#[tokio::test]
async fn claims_in_flight_do_not_block_a_limited_pool_below_its_limit() {
    let (cp, client) = cluster().await;
    let names = Names::new("poollimit");
    let host = Host::start(cp, &names, &["--batch-idle-duration", "300ms"]);
    // Every launch takes 20 s, so the claims of all five batches are in flight together.
    let pool = group_pool(
        &client,
        &names,
        json!({"families": ["c"], "launchDelayMillis": 20000}),
        Some(json!({"cpu": "64"})),
    )
    .await;
    let ns = namespace(cp, "poollimit").await;

    // Five batches of two 3-CPU pods, each created once the claim of the one before exists (a
    // loaded machine would otherwise merge batches into larger claims): each batch fits an 8-CPU
    // node, 40 CPUs in all. Counting a claim in flight at the largest type under the limit
    // (48 CPUs) would refuse the second batch.
    let started = Instant::now();
    for batch in 0..5 {
        Pods::new(&client, &names, &ns, &format!("b{batch}"))
            .count(2)
            .cpu("3")
            .node_selector(json!({GROUP: names.run}))
            .create()
            .await;
        let made = wait_until(Duration::from_secs(60), "the batch's claim", || async {
            check_limit(&client, &names, &host).await;
            let n = claims(&client, &names).await.len();
            Ok::<_, std::convert::Infallible>((n > batch).then_some(n))
        })
        .await
        .unwrap_or_else(|err| panic!("{err}\nhost log:\n{}", host.log_tail()));
        assert_eq!(made, batch + 1, "one claim per batch");
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        check_limit(&client, &names, &host).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    wait_running(&client, &host, &ns, 10, Duration::from_secs(120)).await;
    let held = check_limit(&client, &names, &host).await;
    println!(
        "10 pods in 5 batches Running after {:?}; claims hold {held} CPUs",
        started.elapsed()
    );
    assert!(
        held <= 40,
        "each batch needs an 8-CPU node at most: {held} CPUs"
    );
    assert!(
        events(&client, "default", &pool, "LimitReached")
            .await
            .is_empty(),
        "no limit was reached yet"
    );

    // Four 7-CPU pods (an 8-CPU node each, or two on a 16): at most 24 CPUs are left, so three
    // get nodes and the fourth stays Pending, with an Event on the pool naming the limit.
    Pods::new(&client, &names, &ns, "big")
        .count(4)
        .cpu("7")
        .node_selector(json!({GROUP: names.run}))
        .create()
        .await;
    let reported = wait_until(
        Duration::from_secs(60),
        "LimitReached on the pool",
        || async {
            check_limit(&client, &names, &host).await;
            let notes = capstan_notes(&client, "default", &pool, "LimitReached").await;
            Ok::<_, kube::Error>(notes.into_iter().next())
        },
    )
    .await;
    let note = match reported {
        Ok(note) => note,
        Err(err) => panic!("{err}\nhost log:\n{}", host.log_tail()),
    };
    assert!(note.starts_with("limit cpu=64 reached"), "{note}");
    wait_running(&client, &host, &ns, 13, Duration::from_secs(120)).await;
    let held = check_limit(&client, &names, &host).await;
    let waiting = pending(&client, &ns).await;
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert!(waiting.iter().all(|p| p.starts_with("big-")), "{waiting:?}");
    // Later batches (the resync, pod updates) add no claim and, within the interval, no Event.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(check_limit(&client, &names, &host).await, held);
    let reports = events(&client, "default", &pool, "LimitReached").await;
    assert_eq!(
        reports
            .iter()
            .map(|e| e.series.as_ref().map_or(1, |s| s.count))
            .sum::<i32>(),
        1,
        "one Event per limit per interval"
    );
    println!("pool Event: {note}; claims hold {held} CPUs");

    Api::<Pod>::namespaced(client.clone(), &ns)
        .delete_collection(&DeleteParams::default(), &Default::default())
        .await
        .unwrap();
    teardown(&client, &names, &ns).await;
    host.check_alive();
}
