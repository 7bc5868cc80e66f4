//! Consolidation on the real control plane (kube-scheduler, kube-controller-manager, kwok, the
//! `capstan run` binary): empty nodes go after `consolidateAfter` and `Never` keeps them,
//! do-not-disrupt holds, underutilized nodes are deleted or replaced by cheaper ones, spot is
//! replaced by spot only behind the gate and with 15 cheaper types, `Balanced` weighs savings
//! against disruption, and 1,000 pods scaled to 300 end up on a pool that costs no more than
//! 110% of a fresh provisioning of the 300, within the budget, respecting a PDB.
//!
//! The hosts run with `--consolidation-validation-delay 2s` (Karpenter's 15 s is the default)
//! so the tests spend their time on consolidation, not on waiting.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use capstan::api::NodeClaim;
use capstan_test_support::wait_until;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::disruption::{App, GROUP, deployment, pods, pool_nodes, running, wait_running};
use crate::lifecycle::{self, Host, Names, cluster, events, node_class, node_pool};
use crate::provisioner::{claims, namespace, teardown};
use crate::provisioner_e2e::pool_json;

const VALIDATION: [&str; 2] = ["--consolidation-validation-delay", "2s"];

/// What [`scene`] started: a host, a kwok NodeClass and a namespace.
pub(crate) struct Scene {
    pub cp: &'static capstan_test_support::ControlPlane,
    pub client: Client,
    pub names: Names,
    pub host: Host,
    pub class: String,
    pub ns: String,
}

/// A host with `flags` (and the short validation delay), a kwok NodeClass with `parameters` and
/// a namespace, all named after `prefix`.
pub(crate) async fn scene(prefix: &str, flags: &[&str], parameters: serde_json::Value) -> Scene {
    let (cp, client) = cluster().await;
    let names = Names::new(prefix);
    let host = Host::start(cp, &names, &[flags, &VALIDATION[..]].concat());
    let class = names.name("nc");
    node_class(&client, &names, &class, "kwok", parameters).await;
    let ns = namespace(cp, prefix).await;
    Scene {
        cp,
        client,
        names,
        host,
        class,
        ns,
    }
}

/// A pool of class `class` labelled `GROUP: name`, with these extra requirements and
/// `disruption`.
pub(crate) async fn pool(
    client: &Client,
    names: &Names,
    (name, class): (&str, &str),
    requirements: serde_json::Value,
    disruption: serde_json::Value,
) {
    let mut reqs =
        vec![json!({"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]})];
    reqs.extend(requirements.as_array().cloned().unwrap_or_default());
    let mut p = pool_json(
        names,
        name,
        class,
        json!(reqs),
        json!({GROUP: name}),
        json!([]),
        None,
    );
    p["spec"]["disruption"] = disruption;
    node_pool(client, p).await;
}

pub(crate) fn on_demand() -> serde_json::Value {
    json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}])
}

/// A Deployment `name` of `replicas` pods of `cpu` on pool `pool`, replaced with `Recreate`
/// (a resized pod then lands where the old one was).
async fn app(
    client: &Client,
    names: &Names,
    ns: &str,
    (name, pool): (&str, &str),
    replicas: i32,
    cpu: &str,
) {
    let app = App {
        name,
        replicas,
        cpu,
        node_selector: json!({GROUP: pool}),
        annotations: json!({}),
    };
    deployment(client, names, ns, app).await;
    Api::<Deployment>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"spec": {"strategy": {"type": "Recreate", "rollingUpdate": null}}}),
            ),
        )
        .await
        .unwrap();
}

async fn scale(client: &Client, ns: &str, name: &str, replicas: i32) {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
}

/// Waits until `pool` has exactly `n` live nodes and `pods_total` pods run; returns its nodes
/// (name → instance type).
async fn wait_nodes(
    client: &Client,
    host: &Host,
    (pool, n): (&str, usize),
    (ns, pods_total): (&str, usize),
    timeout: Duration,
) -> BTreeMap<String, String> {
    let what = format!("{n} nodes in {pool} and {pods_total} pods Running");
    wait_until(timeout, &what, || async {
        host.check_alive();
        let nodes = pool_nodes(client, pool, "node.kubernetes.io/instance-type").await;
        let ok = nodes.len() == n && running(&pods(client, ns).await) == pods_total;
        Ok::<_, kube::Error>(ok.then_some(nodes))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()))
}

/// The status of the claim's condition `type_`.
fn condition(claim: &NodeClaim, type_: &str) -> Option<String> {
    lifecycle::condition(claim, type_).map(|(status, _)| status)
}

async fn claim_of_pool<'a>(claims: &'a [NodeClaim], pool: &str) -> Vec<&'a NodeClaim> {
    claims
        .iter()
        .filter(|c| c.labels().get("karpenter.sh/nodepool").map(String::as_str) == Some(pool))
        .collect()
}

/// Empty nodes go once `consolidateAfter` has passed since their last pod left; a pool with
/// `Never` keeps its empty node, and a node annotated do-not-disrupt stays.
#[tokio::test]
async fn empty_nodes_go_after_consolidate_after_and_never_keeps_them() {
    let Scene {
        client,
        names,
        host,
        class,
        ns,
        ..
    } = scene(
        "empty",
        &["--batch-idle-duration", "500ms"],
        json!({"maxCpu": 2}),
    )
    .await;
    let (a, b) = (names.name("when-empty"), names.name("never"));
    let budget = json!([{"nodes": "100%"}]);
    pool(
        &client,
        &names,
        (&a, &class),
        on_demand(),
        json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "10s", "budgets": budget}),
    )
    .await;
    pool(
        &client,
        &names,
        (&b, &class),
        on_demand(),
        json!({"consolidateAfter": "Never", "budgets": budget}),
    )
    .await;
    app(&client, &names, &ns, ("a", &a), 3, "1500m").await;
    app(&client, &names, &ns, ("b", &b), 1, "1500m").await;
    wait_running(&client, &host, &ns, 4, Duration::from_secs(300)).await;
    let a_nodes = pool_nodes(&client, &a, GROUP).await;
    assert_eq!(
        a_nodes.len(),
        3,
        "one 1500m pod per 2-cpu node: {a_nodes:?}"
    );
    let kept = a_nodes.keys().next().unwrap().clone();
    Api::<Node>::all(client.clone())
        .patch(
            &kept,
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}),
            ),
        )
        .await
        .unwrap();

    scale(&client, &ns, "a", 0).await;
    scale(&client, &ns, "b", 0).await;
    let emptied = Instant::now();
    let left = wait_nodes(&client, &host, (&a, 1), (&ns, 0), Duration::from_secs(300)).await;
    let took = emptied.elapsed();
    println!(
        "empty nodes of a WhenEmpty pool (consolidateAfter 10s) gone {took:?} after their pods"
    );
    assert!(
        took >= Duration::from_secs(9),
        "consolidateAfter is 10s, gone after {took:?}"
    );
    assert_eq!(
        left.keys().collect::<Vec<_>>(),
        [&kept],
        "the do-not-disrupt node stays"
    );

    // The Never pool keeps its empty node, and its claim is never Consolidatable.
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(pool_nodes(&client, &b, GROUP).await.len(), 1);
    assert_eq!(pool_nodes(&client, &a, GROUP).await.len(), 1);
    let all = claims(&client, &names).await;
    for c in claim_of_pool(&all, &b).await {
        assert_eq!(condition(c, "Consolidatable"), None, "{}", c.name_any());
    }
    let of_a = claim_of_pool(&all, &a).await;
    for c in &of_a {
        assert_eq!(
            condition(c, "Consolidatable").as_deref(),
            Some("True"),
            "{}",
            c.name_any()
        );
    }
    let deleted: Vec<_> = a_nodes.keys().filter(|n| **n != kept).collect();
    let note = events(&client, "default", deleted[0], "DisruptionLaunching").await;
    assert!(
        note.iter()
            .any(|e| e.note.as_deref().unwrap_or_default().contains("Empty")),
        "{note:?}"
    );
    host.check_alive();
    teardown(&client, &names, &ns).await;
}

/// kwok NodeClass parameters: the `c` family up to 4 vCPUs, with the 1- and 2-vCPU types
/// unavailable unless `small`. Availability is no node-shaping parameter: changing it drifts
/// nothing, it only changes what consolidation may buy.
fn c_family(small: bool) -> serde_json::Value {
    let hidden = if small {
        json!([])
    } else {
        json!([{"instanceType": "c-1x-amd64-linux"}, {"instanceType": "c-2x-amd64-linux"}])
    };
    json!({"families": ["c"], "maxCpu": 4, "unavailableOfferings": hidden})
}

async fn set_parameters(client: &Client, class: &str, parameters: serde_json::Value) {
    Api::<capstan::api::NodeClass>::all(client.clone())
        .patch(
            class,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"parameters": parameters}})),
        )
        .await
        .unwrap();
}

/// A bare pod `name` of `cpu` on pool `pool` (deleted later to leave its node underused).
async fn filler(client: &Client, names: &Names, ns: &str, (name, pool): (&str, &str), cpu: &str) {
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {crate::lifecycle::RUN_LABEL: names.run}},
        "spec": {
            "nodeSelector": {GROUP: pool},
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "app", "image": "fake",
                            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}],
        },
    }))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
}

pub(crate) async fn delete_pod(client: &Client, ns: &str, name: &str) {
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns)
        .delete(name, &Default::default())
        .await
        .unwrap();
}

/// Two half-used nodes become one (delete); then, once smaller types can be bought, the node
/// left with one pod is replaced by a cheaper one (replace). Only 4-vCPU nodes can be bought
/// at first, so the starting layout does not depend on how pods are batched.
#[tokio::test]
async fn underutilized_nodes_are_deleted_then_replaced_by_a_cheaper_node() {
    let Scene {
        client,
        names,
        host,
        class,
        ns,
        ..
    } = scene(
        "underused",
        &["--batch-idle-duration", "500ms"],
        c_family(false),
    )
    .await;
    let p = names.name("pool");
    pool(
        &client,
        &names,
        (&p, &class),
        on_demand(),
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "10s",
               "budgets": [{"nodes": "100%"}]}),
    )
    .await;
    app(&client, &names, &ns, ("first", &p), 2, "1500m").await;
    wait_running(&client, &host, &ns, 2, Duration::from_secs(300)).await;
    app(&client, &names, &ns, ("second", &p), 2, "1500m").await;
    let two = wait_nodes(&client, &host, (&p, 2), (&ns, 4), Duration::from_secs(300)).await;
    println!("4 pods of 1500m on {two:?}");

    // Half of each: one pod fits beside the other.
    scale(&client, &ns, "first", 1).await;
    scale(&client, &ns, "second", 1).await;
    let started = Instant::now();
    let one = wait_nodes(&client, &host, (&p, 1), (&ns, 2), Duration::from_secs(360)).await;
    println!(
        "two half-used nodes became {one:?} in {:?}",
        started.elapsed()
    );
    assert!(
        two.keys().any(|n| one.contains_key(n)),
        "a node was deleted, not replaced: {one:?}"
    );

    // One 1500m pod left on a 4-vCPU node; a 2-vCPU type becomes available and is cheaper.
    scale(&client, &ns, "second", 0).await;
    set_parameters(&client, &class, c_family(true)).await;
    let started = Instant::now();
    let replaced = wait_until(Duration::from_secs(360), "a cheaper node", || async {
        host.check_alive();
        let nodes = pool_nodes(&client, &p, "node.kubernetes.io/instance-type").await;
        let ok = nodes.len() == 1
            && !nodes.keys().any(|n| one.contains_key(n))
            && running(&pods(&client, &ns).await) == 1;
        Ok::<_, kube::Error>(ok.then_some(nodes))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    println!(
        "{one:?} replaced by {replaced:?} in {:?}",
        started.elapsed()
    );
    let (old_type, new_type) = (
        one.values().next().unwrap(),
        replaced.values().next().unwrap(),
    );
    let cpus = |t: &str| -> u32 {
        t.split('-')
            .nth(1)
            .unwrap()
            .trim_end_matches('x')
            .parse()
            .unwrap()
    };
    assert!(cpus(new_type) < cpus(old_type), "{old_type} → {new_type}");
    let old = one.keys().next().unwrap();
    let notes = events(&client, "default", old, "DisruptionLaunching").await;
    assert!(
        notes.iter().any(|e| {
            let n = e.note.as_deref().unwrap_or_default();
            n.contains("Underutilized/replace") && n.contains("saves $")
        }),
        "{notes:?}"
    );
    host.check_alive();
    teardown(&client, &names, &ns).await;
}

/// A spot node is not replaced by spot while the gate is off, nor with the gate on when fewer
/// than 15 cheaper spot types could hold its pods.
#[tokio::test]
async fn spot_is_replaced_by_spot_only_behind_the_gate_and_with_fifteen_cheaper_types() {
    let Scene {
        cp,
        client,
        names,
        host,
        class,
        ns,
    } = scene("spot", &["--batch-idle-duration", "500ms"], c_family(false)).await;
    let p = names.name("pool");
    pool(
        &client,
        &names,
        (&p, &class),
        json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]),
        json!({"consolidateAfter": "10s", "budgets": [{"nodes": "100%"}]}),
    )
    .await;
    app(&client, &names, &ns, ("app", &p), 1, "500m").await;
    filler(&client, &names, &ns, ("filler", &p), "3").await;
    let node = wait_nodes(&client, &host, (&p, 1), (&ns, 2), Duration::from_secs(300)).await;
    let node_name = node.keys().next().unwrap().clone();
    delete_pod(&client, &ns, "filler").await;
    set_parameters(&client, &class, c_family(true)).await;
    let wait_reason = |text: &'static str| {
        let (client, node_name) = (client.clone(), node_name.clone());
        async move {
            wait_until(Duration::from_secs(240), text, || async {
                let found = events(&client, "default", &node_name, "Unconsolidatable")
                    .await
                    .into_iter()
                    .any(|e| e.note.as_deref().unwrap_or_default().contains(text));
                Ok::<_, kube::Error>(found.then_some(()))
            })
            .await
        }
    };
    wait_reason("SpotToSpotConsolidation is disabled")
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    drop(host);

    let host = Host::start(
        cp,
        &names,
        &[
            &[
                "--batch-idle-duration",
                "500ms",
                "--feature-gates",
                "SpotToSpotConsolidation=true",
            ][..],
            &VALIDATION,
        ]
        .concat(),
    );
    wait_reason("requires 15 cheaper instance type options")
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    tokio::time::sleep(Duration::from_secs(10)).await;
    let now = pool_nodes(&client, &p, GROUP).await;
    assert_eq!(
        now.keys().collect::<Vec<_>>(),
        [&node_name],
        "the spot node stays"
    );
    host.check_alive();
    teardown(&client, &names, &ns).await;
}

/// `Balanced`: a replacement saving 1% of a lightly loaded node is refused; once a type 40%
/// cheaper is offered, it is made. Only the 4-vCPU type can be bought at first.
#[tokio::test]
async fn balanced_replaces_for_forty_percent_not_for_one() {
    let parameters = |cheap_1: bool, cheap_2: bool| {
        let offer = |price: f64| json!([{"zone": "test-zone-a", "capacityType": "on-demand", "price": price}]);
        let small = |name: &str, price: f64| {
            json!({"name": name, "resources": {"cpu": "2", "memory": "8Gi", "pods": "110"},
                   "offerings": offer(price)})
        };
        let mut hidden = Vec::new();
        for (name, available) in [("cheap-1", cheap_1), ("cheap-2", cheap_2)] {
            if !available {
                hidden.push(json!({"instanceType": name}));
            }
        }
        json!({
            "instanceTypes": [
                {"name": "big", "resources": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                 "offerings": offer(1.0)},
                small("cheap-1", 0.99),
                small("cheap-2", 0.60),
            ],
            "unavailableOfferings": hidden,
        })
    };
    let Scene {
        client,
        names,
        host,
        class,
        ns,
        ..
    } = scene(
        "balanced",
        &["--batch-idle-duration", "500ms"],
        parameters(false, false),
    )
    .await;
    let p = names.name("pool");
    pool(
        &client,
        &names,
        (&p, &class),
        on_demand(),
        json!({"consolidationPolicy": "Balanced", "consolidateAfter": "10s",
               "budgets": [{"nodes": "100%"}]}),
    )
    .await;
    app(&client, &names, &ns, ("busy", &p), 5, "700m").await;
    wait_running(&client, &host, &ns, 5, Duration::from_secs(300)).await;
    app(&client, &names, &ns, ("light", &p), 1, "1500m").await;
    filler(&client, &names, &ns, ("filler", &p), "2").await;
    let before = wait_nodes(&client, &host, (&p, 2), (&ns, 7), Duration::from_secs(300)).await;
    assert!(before.values().all(|t| t == "big"), "{before:?}");
    let light_node = pods(&client, &ns)
        .await
        .into_iter()
        .find(|p| p.labels().get("app").map(String::as_str) == Some("light"))
        .and_then(|p| p.spec?.node_name)
        .unwrap();
    delete_pod(&client, &ns, "filler").await;
    set_parameters(&client, &class, parameters(true, false)).await;
    wait_until(Duration::from_secs(240), "Balanced refuses 1%", || async {
        let found = events(&client, "default", &light_node, "Unconsolidatable")
            .await
            .into_iter()
            .any(|e| e.note.as_deref().unwrap_or_default().contains("Balanced"));
        Ok::<_, kube::Error>(found.then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    assert_eq!(
        pool_nodes(&client, &p, "node.kubernetes.io/instance-type").await,
        before
    );

    set_parameters(&client, &class, parameters(true, true)).await;
    let after = wait_until(
        Duration::from_secs(360),
        "light replaced by cheap-2",
        || async {
            host.check_alive();
            let nodes = pool_nodes(&client, &p, "node.kubernetes.io/instance-type").await;
            let ok = nodes.len() == 2
                && nodes.values().any(|t| t == "cheap-2")
                && !nodes.contains_key(&light_node)
                && running(&pods(&client, &ns).await) == 6;
            Ok::<_, kube::Error>(ok.then_some(nodes))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    println!("Balanced: 1% refused, 40% made: {before:?} → {after:?}");
    let busy_node = before.keys().find(|n| **n != light_node).unwrap();
    assert!(
        after.contains_key(busy_node),
        "the busy node stays: {after:?}"
    );
    let notes = events(&client, "default", &light_node, "DisruptionLaunching").await;
    assert!(
        notes.iter().any(|e| e
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("Underutilized/replace")),
        "{notes:?}"
    );
    host.check_alive();
    teardown(&client, &names, &ns).await;
}

/// The price of each live node of `pool` from its labels, with the default kwok catalog's
/// formula ($0.025 per vCPU-hour and $0.001 per GiB-hour on demand; spot 70%).
async fn pool_cost(client: &Client, pool: &str) -> (usize, f64) {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("karpenter.sh/nodepool={pool}")))
        .await
        .unwrap()
        .items;
    let mut total = 0.0;
    let mut count = 0;
    for n in nodes
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
    {
        let l = n.labels();
        let cpu: f64 = l["karpenter.kwok.sh/instance-cpu"].parse().unwrap();
        let mib: f64 = l["karpenter.kwok.sh/instance-memory"]
            .strip_suffix("Gi")
            .map(|gib| gib.parse::<f64>().unwrap() * 1024.0)
            .unwrap_or_else(|| l["karpenter.kwok.sh/instance-memory"].parse().unwrap());
        let od = 0.025 * cpu + 0.001 * mib / 1024.0;
        total += if l["karpenter.sh/capacity-type"] == "spot" {
            od * 0.7
        } else {
            od
        };
        count += 1;
    }
    (count, total)
}

/// 1,000 pods of five sizes scaled to 300: the pool ends up costing no more than 110% of a
/// fresh provisioning of the same 300 pods (measured by provisioning them again on a second
/// pool), no pod waits Pending longer than a replacement takes, the PDB of one app is
/// respected (every xl pod that goes is evicted through the API that enforces it), and the
/// `10%` budget is never exceeded (sampled every second).
#[tokio::test]
#[ignore = "heavy: `make e2e` runs it alone after the parallel suite"]
async fn a_thousand_pods_scaled_to_three_hundred_cost_what_fresh_provisioning_does() {
    const SIZES: [(&str, &str); 5] = [
        ("xs", "100m"),
        ("s", "250m"),
        ("m", "500m"),
        ("l", "1"),
        ("xl", "2"),
    ];
    let Scene {
        client,
        names,
        host,
        class,
        ns,
        ..
    } = scene(
        "scaledown",
        &["--batch-idle-duration", "1s"],
        json!({"maxCpu": 32}),
    )
    .await;
    let (a, fresh) = (names.name("pool"), names.name("fresh"));
    pool(
        &client,
        &names,
        (&a, &class),
        on_demand(),
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "10s",
               "budgets": [{"nodes": "10%"}]}),
    )
    .await;
    for (name, cpu) in SIZES {
        app(&client, &names, &ns, (name, &a), 200, cpu).await;
    }
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "xl"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "xl"}}},
    }))
    .unwrap();
    Api::<PodDisruptionBudget>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &pdb)
        .await
        .unwrap();
    wait_running(&client, &host, &ns, 1000, Duration::from_secs(600)).await;
    let (nodes_1000, cost_1000) = pool_cost(&client, &a).await;
    println!("1000 pods on {nodes_1000} nodes, ${cost_1000:.3}/h");

    let xl_gone = removals(&client, &ns, "app=xl").await;
    for (name, _) in SIZES {
        scale(&client, &ns, name, 60).await;
    }
    let started = Instant::now();
    let mut first_settled: Option<Instant> = None;
    let mut pending_since: BTreeMap<String, Instant> = BTreeMap::new();
    let (mut longest_pending, mut most_disrupting, mut fewest_xl) =
        (Duration::ZERO, 0usize, usize::MAX);
    let mut settled_at: Option<Instant> = None;
    let mut last_cost = f64::MAX;
    loop {
        host.check_alive();
        let all = pods(&client, &ns).await;
        let live: Vec<_> = all
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let now = Instant::now();
        for p in &live {
            let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
            let key = p.name_any();
            if bound {
                if let Some(since) = pending_since.remove(&key) {
                    longest_pending = longest_pending.max(now - since);
                }
            } else {
                pending_since.entry(key).or_insert(now);
            }
        }
        if live.len() <= 300 {
            let xl = running(
                &all.iter()
                    .filter(|p| p.labels().get("app").map(String::as_str) == Some("xl"))
                    .cloned()
                    .collect::<Vec<_>>(),
            );
            if settled_at.is_some() {
                fewest_xl = fewest_xl.min(xl);
            } else if xl == 60 {
                settled_at = Some(now);
                first_settled = Some(now);
            }
        }
        let claims = claims(&client, &names).await;
        let initialized = claims
            .iter()
            .filter(|c| condition(c, "Initialized").as_deref() == Some("True"))
            .count();
        let disrupting = claims
            .iter()
            .filter(|c| {
                c.metadata.deletion_timestamp.is_some()
                    || c.annotations().contains_key("capstan.dev/disruption")
            })
            .count();
        most_disrupting = most_disrupting.max(disrupting);
        assert!(
            disrupting <= initialized.div_ceil(10),
            "{disrupting} of {initialized} nodes disrupting exceeds the 10% budget"
        );
        let (_, cost) = pool_cost(&client, &a).await;
        // Converged: the cost has not moved for a minute and nothing is disrupting.
        if disrupting == 0 && (cost - last_cost).abs() < 1e-9 && running(&all) == 300 {
            if started.elapsed() > Duration::from_secs(90)
                && now.duration_since(settled_at.unwrap_or(now)) > Duration::from_secs(60)
            {
                break;
            }
        } else {
            settled_at = settled_at.map(|_| now);
        }
        last_cost = cost;
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "no convergence in 10 min\n{}",
            host.log_tail()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (nodes_300, cost_300) = pool_cost(&client, &a).await;
    let took = started.elapsed();

    // The bound: the same 300 pods provisioned afresh on a second, identical pool.
    pool(
        &client,
        &names,
        (&fresh, &class),
        on_demand(),
        json!({"consolidateAfter": "Never"}),
    )
    .await;
    for (name, cpu) in SIZES {
        app(
            &client,
            &names,
            &ns,
            (&format!("{name}-fresh"), &fresh),
            60,
            cpu,
        )
        .await;
    }
    wait_running(&client, &host, &ns, 600, Duration::from_secs(300)).await;
    let (nodes_fresh, cost_fresh) = pool_cost(&client, &fresh).await;
    println!(
        "scaled to 300: {nodes_300} nodes ${cost_300:.3}/h after {took:?} (fresh: {nodes_fresh} nodes ${cost_fresh:.3}/h, ratio {:.3}); longest Pending {longest_pending:?}; at most {most_disrupting} disrupting; xl Running never below {fewest_xl}",
        cost_300 / cost_fresh
    );
    assert!(
        cost_300 <= 1.10 * cost_fresh,
        "${cost_300:.3}/h vs fresh ${cost_fresh:.3}/h"
    );
    assert!(
        longest_pending < Duration::from_secs(60),
        "a pod waited {longest_pending:?}"
    );
    // The PDB is the API server's to enforce, through the eviction API; what the host must never
    // do is take a pod away by any other path (deleting it, or deleting its Node under it). The
    // API server marks every pod it evicts with `DisruptionTarget=EvictionByEvictionAPI`, so each
    // xl pod that went away once the Deployments had scaled down must carry that mark. (How low
    // the Running count dips is the disruption controller's to keep: its budget is computed from
    // an informer that can lag the evictions it allows, so the count is printed, not asserted.)
    xl_gone.abort();
    let gone = xl_gone.seen.lock().map(|g| g.clone()).unwrap_or_default();
    let after: Vec<_> = gone
        .iter()
        .filter(|(at, _, _)| first_settled.is_some_and(|s| *at >= s))
        .collect();
    let evicted = gone
        .iter()
        .filter(|(_, _, why)| why.as_deref() == Some(EVICTED))
        .count();
    println!(
        "xl pods gone: {} ({evicted} by eviction), {} after the scale-down",
        gone.len(),
        after.len()
    );
    assert!(evicted > 0, "no xl pod was ever evicted: {gone:?}");
    let bypassed: Vec<_> = after
        .iter()
        .filter(|(_, _, why)| why.as_deref() != Some(EVICTED))
        .collect();
    assert!(
        bypassed.is_empty(),
        "xl pods went away without the eviction API (the PDB bypassed): {bypassed:?}"
    );
    host.check_alive();
    teardown(&client, &names, &ns).await;
}

/// The reason the API server gives pods it evicts (their `DisruptionTarget` condition).
const EVICTED: &str = "EvictionByEvictionAPI";

/// A pod deleted: when, its name, the reason of its `DisruptionTarget` condition.
type Removal = (Instant, String, Option<String>);

/// The pods of a label selector deleted while a watch runs: when, which, and the reason of their
/// `DisruptionTarget` condition if they had one.
struct Removals {
    seen: std::sync::Arc<std::sync::Mutex<Vec<Removal>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Removals {
    fn abort(&self) {
        self.task.abort();
    }
}

/// Starts watching the pods of `ns` matching `selector` (returns once the watch is established).
async fn removals(client: &Client, ns: &str, selector: &str) -> Removals {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let task = crate::pod_watch::watch_pods(
        Api::namespaced(client.clone(), ns),
        watcher::Config::default().labels(selector),
        {
            let seen = seen.clone();
            move |event| {
                if let watcher::Event::Delete(pod) = event {
                    let why = pod
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .and_then(|c| c.iter().find(|c| c.type_ == "DisruptionTarget"))
                        .and_then(|c| c.reason.clone());
                    if let Ok(mut seen) = seen.lock() {
                        seen.push((Instant::now(), pod.name_any(), why));
                    }
                }
                std::ops::ControlFlow::Continue(())
            }
        },
    )
    .await;
    Removals { seen, task }
}
