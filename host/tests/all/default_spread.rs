//! kube-scheduler's default topology spread (`--scheduler-config`, Karpenter v1.15's
//! `SCHEDULER_CONFIG`) on the real control plane with the `capstan run` binary and the kwok
//! provider (zones a to d): pods a Service selects get the defaults (one per node, one per zone)
//! and a node each sized for one; pods owned and selected by nothing are packed.

use std::collections::BTreeSet;
use std::time::Duration;

use capstan::api::labels::ZONE;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::capacity_buffers::millicores;
use crate::lifecycle::{Host, Names, cluster, node_class, node_pool};
use crate::provisioner::{namespace, teardown};
use crate::provisioner_e2e::{GROUP, Pods, pool_json, wait_running};

const SCHEDULER_CONFIG: &str = r#"{"podTopologySpread": {"defaultConstraints": [
  {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"},
  {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}
]}}"#;

/// The nodes, and their zones, the Running pods named `<prefix>-*` run on.
async fn placement(
    client: &Client,
    pods: &[Pod],
    prefix: &str,
) -> (BTreeSet<String>, BTreeSet<String>) {
    let nodes = Api::<Node>::all(client.clone());
    let mut on = BTreeSet::new();
    let mut zones = BTreeSet::new();
    for pod in pods.iter().filter(|p| p.name_any().starts_with(prefix)) {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
        let zone = nodes.get(&node).await.unwrap().labels().get(ZONE).cloned();
        zones.insert(zone.unwrap_or_default());
        on.insert(node);
    }
    (on, zones)
}

#[tokio::test]
async fn pods_a_service_selects_spread_by_the_clusters_defaults_and_others_pack() {
    let (cp, client) = cluster().await;
    let names = Names::new("defspread");
    let host = Host::start(
        cp,
        &names,
        &[
            "--batch-idle-duration",
            "1s",
            "--scheduler-config",
            SCHEDULER_CONFIG,
        ],
    );
    let class = names.name("nc");
    node_class(&client, &names, &class, "kwok", json!({"maxCpu": 8})).await;
    node_pool(
        &client,
        pool_json(
            &names,
            &names.name("pool"),
            &class,
            json!([{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]),
            json!({GROUP: names.run}),
            json!([]),
            None,
        ),
    )
    .await;
    let ns = namespace(cp, "defspread").await;

    // A Service selects these: the defaults apply with its selector. (The control plane's
    // kube-scheduler has no defaults; the nodes the host makes, each sized for one of these pods
    // in a zone of its own, leave it no other placement.)
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "spread"},
        "spec": {"selector": {"app": "spread"}, "ports": [{"port": 80}]},
    }))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    Pods::new(&client, &names, &ns, "spread")
        .count(4)
        .cpu("1")
        .node_selector(json!({GROUP: names.run}))
        .create()
        .await;
    let running = wait_running(&client, &host, &ns, 4, Duration::from_secs(180)).await;
    let (spread_nodes, zones) = placement(&client, &running, "spread").await;
    assert_eq!(
        spread_nodes.len(),
        4,
        "spread pods on {spread_nodes:?}\n{}",
        host.log_tail()
    );
    assert_eq!(zones.len(), 4, "spread pods in zones {zones:?}");
    // Sized for what the defaults let them share: each node holds one of them.
    let nodes = Api::<Node>::all(client.clone());
    for name in &spread_nodes {
        let node = nodes.get(name).await.unwrap();
        let cpu = node
            .status
            .and_then(|s| s.allocatable)
            .and_then(|a| a.get("cpu").cloned())
            .unwrap();
        let millis = millicores(&cpu.0);
        assert!(
            millis < 2000,
            "node {name} has {millis}m CPU: sized for more than one"
        );
    }

    // Owned and selected by nothing: no selector to deduce, no default, packed on one new node.
    Pods::new(&client, &names, &ns, "packed")
        .count(4)
        .cpu("1")
        .node_selector(json!({GROUP: names.run}))
        .create()
        .await;
    let running = wait_running(&client, &host, &ns, 8, Duration::from_secs(180)).await;
    let (packed_nodes, _) = placement(&client, &running, "packed").await;
    assert_eq!(packed_nodes.len(), 1, "packed pods: {packed_nodes:?}");
    assert!(packed_nodes.is_disjoint(&spread_nodes), "{packed_nodes:?}");
    teardown(&client, &names, &ns).await;
    host.check_alive();
}
