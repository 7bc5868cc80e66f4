//! Zone spread beside a pool at its limit (issue 25, part 3), on the real control plane with
//! kube-scheduler, the `capstan run` binary and the kwok provider (zones a to d).
//!
//! The three pools: `arm-spot-only` (weight 50; arm64, spot, not zone d, a NoSchedule
//! taint), `general` (weight 10; amd64) and `tiny-limit` (weight 100; `example.com/pool In
//! [tiny]`, `limits.cpu: 4`, no taint, no arch or zone requirement). Six 1-CPU tiny pods fill
//! `tiny-limit` to its limit, six arm64 pods go to `arm-spot-only`, then six arm64 pods spread
//! over zones (`maxSkew: 1`, `DoNotSchedule`) arrive. Only `tiny-limit` reaches zone d for them,
//! and it can launch nothing: zone d is no domain, and every spread pod runs, two per zone a, b
//! and c. (The tiny pods ask for amd64 nodes: an arm64 tiny node in zone d would be a node the
//! spread pods may use, and kube-scheduler would then rightly count zone d.)

use std::collections::BTreeMap;
use std::time::Duration;

use capstan::api::labels::ZONE;
use capstan_test_support::wait_until;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::lifecycle::{Host, Names, capstan_notes, cluster, condition, node_class, node_pool};
use crate::pool_limits::pending;
use crate::provisioner::{namespace, teardown};
use crate::provisioner_e2e::{GROUP, Pods, pool_json, wait_running};

const POOL_LABEL: &str = "example.com/pool";
const ARM_TAINT: &str = "example.com/arm";

fn req(key: &str, operator: &str, values: &[&str]) -> serde_json::Value {
    json!({"key": key, "operator": operator, "values": values})
}

/// The pods of `ns` whose name starts with `prefix`.
async fn pods(client: &Client, ns: &str, prefix: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.name_any().starts_with(prefix))
        .collect()
}

/// Running pods per zone of their node.
async fn running_per_zone(client: &Client, pods: &[Pod]) -> BTreeMap<String, usize> {
    let nodes = Api::<Node>::all(client.clone());
    let mut zones = BTreeMap::new();
    for pod in pods {
        if pod.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Running") {
            continue;
        }
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        let node = nodes.get(node).await.unwrap();
        let zone = node.labels().get(ZONE).cloned().unwrap_or_default();
        *zones.entry(zone).or_default() += 1;
    }
    zones
}

#[tokio::test]
async fn a_pool_at_its_limit_does_not_strand_zone_spread_pods() {
    let (cp, client) = cluster().await;
    let names = Names::new("spreadreach");
    let host = Host::start(cp, &names, &["--batch-idle-duration", "300ms"]);
    let class = names.name("nc");
    node_class(&client, &names, &class, "kwok", json!({"maxCpu": 4})).await;
    let group = json!({GROUP: names.run});
    let tiny = names.name("tiny-limit");
    let arm = names.name("arm-spot-only");
    let general = names.name("general");
    let mut pool = pool_json(
        &names,
        &arm,
        &class,
        json!([
            req("kubernetes.io/arch", "In", &["arm64"]),
            req("karpenter.sh/capacity-type", "In", &["spot"]),
            req(ZONE, "NotIn", &["test-zone-d"]),
        ]),
        group.clone(),
        json!([{"key": ARM_TAINT, "effect": "NoSchedule"}]),
        None,
    );
    pool["spec"]["weight"] = json!(50);
    node_pool(&client, pool).await;
    let mut pool = pool_json(
        &names,
        &general,
        &class,
        json!([req("kubernetes.io/arch", "In", &["amd64"])]),
        group.clone(),
        json!([]),
        None,
    );
    pool["spec"]["weight"] = json!(10);
    node_pool(&client, pool).await;
    let mut pool = pool_json(
        &names,
        &tiny,
        &class,
        json!([req(POOL_LABEL, "In", &["tiny"])]),
        group.clone(),
        json!([]),
        Some(json!({"cpu": "4"})),
    );
    pool["spec"]["weight"] = json!(100);
    node_pool(&client, pool).await;
    let ns = namespace(cp, "spreadreach").await;

    // 1. Six 1-CPU tiny pods: `tiny-limit` reaches its limit, some wait.
    Pods::new(&client, &names, &ns, "tiny")
        .count(6)
        .cpu("1")
        .node_selector(json!({GROUP: names.run, POOL_LABEL: "tiny", "kubernetes.io/arch": "amd64"}))
        .create()
        .await;
    let reached = wait_until(
        Duration::from_secs(90),
        "LimitReached on tiny-limit",
        || async {
            let notes = capstan_notes(&client, "default", &tiny, "LimitReached").await;
            Ok::<_, kube::Error>(notes.into_iter().next())
        },
    )
    .await;
    if let Err(err) = reached {
        panic!("{err}\nhost log:\n{}", host.log_tail());
    }
    // Once every claim is up, no tiny pod is bound but not yet Running, and the count of Running
    // tiny pods has held longer than kube-scheduler's longest backoff (10 s) for a pod it found
    // unschedulable, the limit is spent: how many run depends on the types the claims launched
    // with.
    let last = std::cell::Cell::new((usize::MAX, std::time::Instant::now()));
    let settled = wait_until(
        Duration::from_secs(150),
        "tiny-limit's claims up and their pods Running",
        || async {
            host.check_alive();
            let claims = crate::provisioner::claims(&client, &names).await;
            let up = !claims.is_empty()
                && claims
                    .iter()
                    .all(|c| condition(c, "Initialized").is_some_and(|(s, _)| s == "True"));
            let tiny = pods(&client, &ns, "tiny-").await;
            let is_running =
                |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            let running = tiny.iter().filter(|p| is_running(p)).count();
            let bound = tiny
                .iter()
                .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
                .count();
            let (before, since) = last.get();
            if running != before || !up || bound != running {
                last.set((running, std::time::Instant::now()));
                return Ok::<_, kube::Error>(None);
            }
            Ok((running > 0 && since.elapsed() >= Duration::from_secs(12)).then_some(running))
        },
    )
    .await;
    let tiny_running = match settled {
        Ok(n) => n,
        Err(err) => panic!("{err}\nhost log:\n{}", host.log_tail()),
    };
    assert!(
        (1..6).contains(&tiny_running),
        "the limit lets some tiny pods run: {tiny_running}"
    );

    // 2. Six 1-CPU arm64 pods tolerating the arm taint.
    let arm_pods = |prefix| {
        Pods::new(&client, &names, &ns, prefix)
            .count(6)
            .cpu("1")
            .node_selector(json!({GROUP: names.run, "kubernetes.io/arch": "arm64"}))
            .tolerations(json!([{"key": ARM_TAINT, "operator": "Exists", "effect": "NoSchedule"}]))
    };
    arm_pods("arm").create().await;
    wait_running(
        &client,
        &host,
        &ns,
        tiny_running + 6,
        Duration::from_secs(120),
    )
    .await;

    // 3. Six arm64 pods spread over zones.
    arm_pods("spread")
        .spec(json!({"topologySpreadConstraints": [{
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "spread"}},
        }]}))
        .create()
        .await;
    wait_running(
        &client,
        &host,
        &ns,
        tiny_running + 12,
        Duration::from_secs(120),
    )
    .await;
    let spread = pods(&client, &ns, "spread-").await;
    let zones = running_per_zone(&client, &spread).await;
    assert_eq!(
        zones,
        BTreeMap::from([
            ("test-zone-a".to_owned(), 2),
            ("test-zone-b".to_owned(), 2),
            ("test-zone-c".to_owned(), 2),
        ]),
        "host log:\n{}",
        host.log_tail()
    );
    // Only tiny pods wait, for the limit.
    let waiting = pending(&client, &ns).await;
    assert_eq!(waiting.len(), 6 - tiny_running, "{waiting:?}");
    assert!(
        waiting.iter().all(|p| p.starts_with("tiny-")),
        "{waiting:?}"
    );
    println!("spread pods per zone: {zones:?}; {tiny_running} tiny pods run under the limit");

    Api::<Pod>::namespaced(client.clone(), &ns)
        .delete_collection(&DeleteParams::default(), &Default::default())
        .await
        .unwrap();
    teardown(&client, &names, &ns).await;
    host.check_alive();
}
