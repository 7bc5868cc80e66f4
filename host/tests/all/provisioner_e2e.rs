//! Provisioner end to end at scale and across pools, on the real control plane with
//! kube-scheduler and the `capstan run` binary with the kwok provider: 200 pods over two pools of
//! different architectures and capacity types, taints routing pods, a pod nothing can hold, and a
//! NodePool at its limit.
//!
//! As in `provisioner.rs`, pods carry the test's run label (the host's `--selector`) and select a
//! label only the test's pools put on their nodes, so concurrent tests never share pods or nodes.
//! Tolerations are exact here: a pod tolerates only what the test says.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use capstan::api::{NodeClaim, NodePool, TaintEffect};
use capstan_test_support::wait_until;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::lifecycle::{Host, Names, RUN_LABEL, cluster, events, node_class, node_pool};
use crate::provisioner::{claims, namespace, teardown};

/// A label the test's pools put on their nodes (template labels), for pods to select.
pub(crate) const GROUP: &str = "e2e.capstan.dev/group";
/// A label only the dedicated pool of the taint test sets.
const DEDICATED: &str = "e2e.capstan.dev/dedicated";

/// A NodePool JSON: `requirements`, template `labels`, `taints` and `limits` as given.
pub(crate) fn pool_json(
    names: &Names,
    name: &str,
    class: &str,
    requirements: serde_json::Value,
    labels: serde_json::Value,
    taints: serde_json::Value,
    limits: Option<serde_json::Value>,
) -> serde_json::Value {
    let mut pool = json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name, "labels": {RUN_LABEL: names.run}},
        "spec": {"template": {
            "metadata": {"labels": labels},
            "spec": {
                "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": class},
                "requirements": requirements,
                "taints": taints,
            },
        }},
    });
    if let Some(limits) = limits {
        pool["spec"]["limits"] = limits;
    }
    // Consolidation would remove nodes these tests count; its own tests turn it on.
    pool["spec"]["disruption"] = json!({"consolidateAfter": "Never"});
    pool
}

/// A kwok NodeClass with `parameters` and an amd64 NodePool over it that labels its nodes
/// [`GROUP`]` = <run>` (pods select that), with `limits` if given; returns the pool's name.
pub(crate) async fn group_pool(
    client: &Client,
    names: &Names,
    parameters: serde_json::Value,
    limits: Option<serde_json::Value>,
) -> String {
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(client, names, &class, "kwok", parameters).await;
    node_pool(
        client,
        pool_json(
            names,
            &pool,
            &class,
            json!([req("kubernetes.io/arch", &["amd64"])]),
            json!({GROUP: names.run}),
            json!([]),
            limits,
        ),
    )
    .await;
    pool
}

fn req(key: &str, values: &[&str]) -> serde_json::Value {
    json!({"key": key, "operator": "In", "values": values})
}

/// Pods to create: `count` pods `<prefix>-<i>` labelled with the test's run label and
/// `app: <prefix>`, each with one container requesting `cpu` and `memory`.
pub(crate) struct Pods<'a> {
    client: &'a Client,
    names: &'a Names,
    ns: &'a str,
    prefix: &'a str,
    count: usize,
    cpu: &'a str,
    memory: &'a str,
    spec: serde_json::Value,
}

impl<'a> Pods<'a> {
    pub(crate) fn new(client: &'a Client, names: &'a Names, ns: &'a str, prefix: &'a str) -> Self {
        Self {
            client,
            names,
            ns,
            prefix,
            count: 1,
            cpu: "100m",
            memory: "64Mi",
            spec: json!({}),
        }
    }

    pub(crate) fn count(mut self, count: usize) -> Self {
        self.count = count;
        self
    }

    pub(crate) fn cpu(mut self, cpu: &'a str) -> Self {
        self.cpu = cpu;
        self
    }

    pub(crate) fn memory(mut self, memory: &'a str) -> Self {
        self.memory = memory;
        self
    }

    pub(crate) fn node_selector(self, selector: serde_json::Value) -> Self {
        self.spec(json!({"nodeSelector": selector}))
    }

    pub(crate) fn tolerations(self, tolerations: serde_json::Value) -> Self {
        self.spec(json!({"tolerations": tolerations}))
    }

    /// Sets these pod spec fields (affinity, topology spread, ...).
    pub(crate) fn spec(mut self, fields: serde_json::Value) -> Self {
        if let (Some(spec), Some(fields)) = (self.spec.as_object_mut(), fields.as_object()) {
            spec.extend(fields.clone());
        }
        self
    }

    /// Creates the pods (16 at a time); returns their names.
    pub(crate) async fn create(self) -> Vec<String> {
        let api = Api::<Pod>::namespaced(self.client.clone(), self.ns);
        let mut spec = self.spec.clone();
        spec["containers"] = json!([{
            "name": "app", "image": "fake",
            "resources": {"requests": {"cpu": self.cpu, "memory": self.memory}},
        }]);
        futures::stream::iter(0..self.count)
            .map(|i| {
                let api = api.clone();
                let name = format!("{}-{i}", self.prefix);
                let pod: Pod = serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "labels": {RUN_LABEL: self.names.run, "app": self.prefix}},
                    "spec": spec,
                }))
                .unwrap();
                async move {
                    api.create(&PostParams::default(), &pod).await?;
                    Ok::<_, kube::Error>(name)
                }
            })
            .buffer_unordered(16)
            .try_collect()
            .await
            .unwrap()
    }
}

/// Waits until `expected` pods of `ns` are Running; returns them.
pub(crate) async fn wait_running(
    client: &Client,
    host: &Host,
    ns: &str,
    expected: usize,
    timeout: Duration,
) -> Vec<Pod> {
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    let result = wait_until(timeout, &format!("{expected} pods Running"), || async {
        host.check_alive();
        let list = api.list(&ListParams::default()).await?;
        let running: Vec<Pod> = list
            .items
            .into_iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .collect();
        Ok::<_, kube::Error>((running.len() == expected).then_some(running))
    })
    .await;
    match result {
        Ok(pods) => pods,
        Err(err) => {
            let running = api
                .list(&ListParams::default())
                .await
                .map(|l| {
                    l.items
                        .iter()
                        .filter(|p| {
                            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                        })
                        .count()
                })
                .unwrap_or_default();
            panic!("{err} ({running} Running)\nhost log:\n{}", host.log_tail())
        }
    }
}

/// The nodes the pods run on, by name.
async fn nodes_of(client: &Client, pods: &[Pod]) -> BTreeMap<String, Node> {
    let api = Api::<Node>::all(client.clone());
    let mut nodes = BTreeMap::new();
    for name in pods
        .iter()
        .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .collect::<BTreeSet<_>>()
    {
        let node = api.get(&name).await.unwrap();
        nodes.insert(name, node);
    }
    nodes
}

fn node_name(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

fn label<'a>(node: &'a Node, key: &str) -> &'a str {
    node.labels().get(key).map_or("", String::as_str)
}

/// A claim's `status.capacity.cpu` in millicores (0 until launched).
fn claim_cpu_millis(claim: &NodeClaim) -> i64 {
    let Some(q) = claim.status.as_ref().and_then(|s| s.capacity.get("cpu")) else {
        return 0;
    };
    let text = q.0.as_str();
    match text.strip_suffix('m') {
        Some(m) => m.parse().unwrap(),
        None => text.parse::<i64>().unwrap() * 1000,
    }
}

/// Waits for a capstan `FailedScheduling` event about pod `name` whose note satisfies `want`.
async fn wait_failed_scheduling(
    client: &Client,
    host: &Host,
    ns: &str,
    name: &str,
    want: impl Fn(&str) -> bool,
) -> String {
    let result = wait_until(
        Duration::from_secs(90),
        &format!("capstan FailedScheduling about {name}"),
        || async {
            host.check_alive();
            Ok::<_, kube::Error>(
                events(client, ns, name, "FailedScheduling")
                    .await
                    .into_iter()
                    .filter(|e| e.reporting_controller.as_deref() == Some("capstan"))
                    .filter_map(|e| e.note)
                    .find(|n| want(n)),
            )
        },
    )
    .await;
    match result {
        Ok(note) => note,
        Err(err) => {
            let seen: Vec<String> = events(client, ns, name, "FailedScheduling")
                .await
                .into_iter()
                .filter_map(|e| e.note)
                .collect();
            panic!("{err}\nseen: {seen:?}\nhost log:\n{}", host.log_tail())
        }
    }
}

/// 200 pending pods, half selecting amd64 and half arm64, over pool A (amd64, on-demand) and pool
/// B (arm64, spot): all run, each on a node of the right pool, arch and capacity type.
#[tokio::test]
async fn two_hundred_pods_over_two_pools_all_run_on_the_right_pool() {
    let (cp, client) = cluster().await;
    let names = Names::new("e2e200");
    let host = Host::start(cp, &names, &["--batch-idle-duration", "1s"]);
    let (class_a, class_b) = (names.name("nca"), names.name("ncb"));
    let (pool_a, pool_b) = (names.name("a"), names.name("b"));
    node_class(
        &client,
        &names,
        &class_a,
        "kwok",
        json!({"architectures": ["amd64"], "capacityTypes": ["on-demand"], "maxCpu": 16}),
    )
    .await;
    node_class(
        &client,
        &names,
        &class_b,
        "kwok",
        json!({"architectures": ["arm64"], "capacityTypes": ["spot"], "maxCpu": 16}),
    )
    .await;
    let group = json!({GROUP: names.run});
    for (pool, class, arch, ct) in [
        (&pool_a, &class_a, "amd64", "on-demand"),
        (&pool_b, &class_b, "arm64", "spot"),
    ] {
        node_pool(
            &client,
            pool_json(
                &names,
                pool,
                class,
                json!([
                    req("kubernetes.io/arch", &[arch]),
                    req("karpenter.sh/capacity-type", &[ct]),
                ]),
                group.clone(),
                json!([]),
                None,
            ),
        )
        .await;
    }
    let ns = namespace(cp, "e2e200").await;

    let started = Instant::now();
    for arch in ["amd64", "arm64"] {
        Pods::new(&client, &names, &ns, arch)
            .count(100)
            .cpu("100m")
            .node_selector(json!({GROUP: names.run, "kubernetes.io/arch": arch}))
            .create()
            .await;
    }
    let created_in = started.elapsed();
    let running = wait_running(&client, &host, &ns, 200, Duration::from_secs(240)).await;
    let elapsed = started.elapsed();
    host.check_alive();

    let nodes = nodes_of(&client, &running).await;
    let mut per_pool: BTreeMap<String, usize> = BTreeMap::new();
    for node in nodes.values() {
        *per_pool
            .entry(label(node, "karpenter.sh/nodepool").to_owned())
            .or_default() += 1;
    }
    for pod in &running {
        let node = &nodes[&node_name(pod)];
        let arch = pod.labels()["app"].as_str();
        let (pool, ct) = if arch == "amd64" {
            (&pool_a, "on-demand")
        } else {
            (&pool_b, "spot")
        };
        assert_eq!(
            label(node, "karpenter.sh/nodepool"),
            pool,
            "{}",
            pod.name_any()
        );
        assert_eq!(
            label(node, "kubernetes.io/arch"),
            arch,
            "{}",
            pod.name_any()
        );
        assert_eq!(
            label(node, "karpenter.sh/capacity-type"),
            ct,
            "{}",
            pod.name_any()
        );
    }
    let claims = claims(&client, &names).await;
    println!(
        "200 pods created in {created_in:?}, all Running after {elapsed:?}; nodes per pool \
         {per_pool:?}; {} NodeClaim(s)",
        claims.len()
    );
    assert_eq!(per_pool.len(), 2, "{per_pool:?}");
    // 100 pods of 100m fit in 16 cpu: packed, never a node per pod.
    assert!(claims.len() <= 10, "{} claims", claims.len());
    teardown(&client, &names, &ns).await;
}

/// Pool C taints its nodes `dedicated=gpu:NoSchedule` and labels them; pods tolerating exactly
/// that taint and selecting the label land on C; pods without the toleration go to pool D.
#[tokio::test]
async fn taints_and_tolerations_route_pods_between_pools() {
    let (cp, client) = cluster().await;
    let names = Names::new("e2etaint");
    let host = Host::start(cp, &names, &["--batch-idle-duration", "500ms"]);
    let class = names.name("nc");
    let (pool_c, pool_d) = (names.name("c"), names.name("d"));
    node_class(&client, &names, &class, "kwok", json!({"maxCpu": 8})).await;
    let amd64 = json!([req("kubernetes.io/arch", &["amd64"])]);
    node_pool(
        &client,
        pool_json(
            &names,
            &pool_c,
            &class,
            amd64.clone(),
            json!({GROUP: names.run, DEDICATED: names.run}),
            json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
            None,
        ),
    )
    .await;
    node_pool(
        &client,
        pool_json(
            &names,
            &pool_d,
            &class,
            amd64,
            json!({GROUP: names.run}),
            json!([]),
            None,
        ),
    )
    .await;
    let ns = namespace(cp, "e2etaint").await;
    Pods::new(&client, &names, &ns, "tolerant").count(4).cpu("500m").node_selector(json!({DEDICATED: names.run})).tolerations(json!([{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}])).create()
    .await;
    Pods::new(&client, &names, &ns, "plain")
        .count(4)
        .cpu("500m")
        .node_selector(json!({GROUP: names.run}))
        .create()
        .await;
    let running = wait_running(&client, &host, &ns, 8, Duration::from_secs(180)).await;
    host.check_alive();
    let nodes = nodes_of(&client, &running).await;
    for pod in &running {
        let node = &nodes[&node_name(pod)];
        let want = if pod.labels()["app"] == "tolerant" {
            &pool_c
        } else {
            &pool_d
        };
        assert_eq!(
            label(node, "karpenter.sh/nodepool"),
            want,
            "{} on {}",
            pod.name_any(),
            node.name_any()
        );
    }
    for node in nodes.values() {
        let tainted = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .any(|t| t.key == "dedicated" && t.value.as_deref() == Some("gpu"));
        assert_eq!(
            tainted,
            label(node, "karpenter.sh/nodepool") == pool_c,
            "{}",
            node.name_any()
        );
    }
    for claim in claims(&client, &names).await {
        if claim.labels()["karpenter.sh/nodepool"] == pool_c {
            assert!(
                claim
                    .spec
                    .taints
                    .iter()
                    .any(|t| t.key == "dedicated" && t.effect == TaintEffect::NoSchedule),
                "{:?}",
                claim.spec.taints
            );
        }
    }
    println!(
        "taints: {} node(s): {:?}",
        nodes.len(),
        nodes
            .values()
            .map(|n| label(n, "karpenter.sh/nodepool").to_owned())
            .collect::<Vec<_>>()
    );
    teardown(&client, &names, &ns).await;
}

/// A pod of 1000 cpu fits no instance type: a capstan FailedScheduling Event says so, and no
/// NodeClaim is created.
#[tokio::test]
async fn a_pod_too_big_for_every_instance_type_gets_failed_scheduling_and_no_claim() {
    let (cp, client) = cluster().await;
    let names = Names::new("e2ebig");
    let host = Host::start(cp, &names, &["--batch-idle-duration", "300ms"]);
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(&client, &names, &class, "kwok", json!({})).await;
    node_pool(
        &client,
        pool_json(
            &names,
            &pool,
            &class,
            json!([req("kubernetes.io/arch", &["amd64"])]),
            json!({GROUP: names.run}),
            json!([]),
            None,
        ),
    )
    .await;
    let ns = namespace(cp, "e2ebig").await;
    let created = Pods::new(&client, &names, &ns, "huge")
        .count(1)
        .cpu("1000")
        .node_selector(json!({GROUP: names.run}))
        .create()
        .await;
    let note = wait_failed_scheduling(&client, &host, &ns, &created[0], |_| true).await;
    println!("FailedScheduling: {note}");
    assert!(
        note.contains("no instance type satisfies") && note.contains(&pool),
        "{note}"
    );
    assert!(note.contains("cpu"), "{note}");
    // Give later batches (resync, pod updates) a chance to misbehave.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let claims = claims(&client, &names).await;
    assert!(
        claims.is_empty(),
        "{:?}",
        claims.iter().map(|c| c.name_any()).collect::<Vec<_>>()
    );
    host.check_alive();
    teardown(&client, &names, &ns).await;
}

/// A pool with `limits: {cpu: 8}` and types of at most 8 cpu: a 7-cpu pod gets one 8-cpu node;
/// once the pool's `status.resources` counts it, three more 1-cpu pods (which do not fit the
/// node's 0.9 cpu left) get a FailedScheduling Event naming the limit and no NodeClaim.
///
/// The pods over the limit are created after the pool's status counts the first node, so this
/// checks the steady state; `a_burst_over_a_nodepool_limit_never_overshoots_it` checks claims
/// still launching.
#[tokio::test]
async fn a_nodepool_at_its_limit_launches_nothing_more() {
    let (cp, client) = cluster().await;
    let names = Names::new("e2elimit");
    let host = Host::start(cp, &names, &["--batch-idle-duration", "500ms"]);
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(
        &client,
        &names,
        &class,
        "kwok",
        json!({"maxCpu": 8, "families": ["c"]}),
    )
    .await;
    node_pool(
        &client,
        pool_json(
            &names,
            &pool,
            &class,
            json!([req("kubernetes.io/arch", &["amd64"])]),
            json!({GROUP: names.run}),
            json!([]),
            Some(json!({"cpu": "8"})),
        ),
    )
    .await;
    let ns = namespace(cp, "e2elimit").await;
    Pods::new(&client, &names, &ns, "first")
        .count(1)
        .cpu("7")
        .node_selector(json!({GROUP: names.run}))
        .create()
        .await;
    wait_running(&client, &host, &ns, 1, Duration::from_secs(120)).await;
    let pools = Api::<NodePool>::all(client.clone());
    let counted = wait_until(
        Duration::from_secs(60),
        "pool status.resources cpu 8",
        || async {
            let p = pools.get(&pool).await?;
            let cpu = p
                .status
                .as_ref()
                .and_then(|s| s.resources.get("cpu"))
                .map(|q| q.0.clone());
            Ok::<_, kube::Error>((cpu.as_deref() == Some("8")).then_some(()))
        },
    )
    .await;
    if let Err(err) = counted {
        panic!(
            "{err}: {:?}\nhost log:\n{}",
            pools.get(&pool).await.map(|p| p.status),
            host.log_tail()
        );
    }
    assert_eq!(claims(&client, &names).await.len(), 1);

    let more = Pods::new(&client, &names, &ns, "more")
        .count(3)
        .cpu("1")
        .node_selector(json!({GROUP: names.run}))
        .create()
        .await;
    for pod in &more {
        let note = wait_failed_scheduling(&client, &host, &ns, pod, |n| n.contains("limit")).await;
        assert!(
            note.contains(&format!("nodepool {pool} limit cpu exceeded")),
            "{note}"
        );
        println!("{pod}: {note}");
    }
    // Later batches (pod updates, resync) must not launch either.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let claims = claims(&client, &names).await;
    let total: i64 = claims.iter().map(claim_cpu_millis).sum();
    assert_eq!(
        claims.len(),
        1,
        "{:?}",
        claims.iter().map(|c| c.name_any()).collect::<Vec<_>>()
    );
    assert!(
        total <= 8000,
        "claims hold {total}m cpu over the 8-cpu limit"
    );
    host.check_alive();
    teardown(&client, &names, &ns).await;
}

/// A pool with `limits: {cpu: 8}` and types of at most 4 cpu, and a single burst of twelve 1-cpu
/// pods (more than the limit can hold): whatever batches the burst and later retries make, the
/// claims never hold more than 8 cpu, though claims still launching are not in the pool's
/// `status.resources` yet (every claim of the pool counts against its limits).
#[tokio::test]
async fn a_burst_over_a_nodepool_limit_never_overshoots_it() {
    let (cp, client) = cluster().await;
    let names = Names::new("e2eburst");
    let host = Host::start(cp, &names, &["--batch-idle-duration", "500ms"]);
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(
        &client,
        &names,
        &class,
        "kwok",
        json!({"maxCpu": 4, "families": ["c"]}),
    )
    .await;
    node_pool(
        &client,
        pool_json(
            &names,
            &pool,
            &class,
            json!([req("kubernetes.io/arch", &["amd64"])]),
            json!({GROUP: names.run}),
            json!([]),
            Some(json!({"cpu": "8"})),
        ),
    )
    .await;
    let ns = namespace(cp, "e2eburst").await;
    Pods::new(&client, &names, &ns, "burst")
        .count(12)
        .cpu("1")
        .node_selector(json!({GROUP: names.run}))
        .create()
        .await;
    let first = wait_until(Duration::from_secs(60), "first nodeclaims", || async {
        Ok::<_, kube::Error>((!claims(&client, &names).await.is_empty()).then_some(()))
    })
    .await;
    if let Err(err) = first {
        panic!("{err}\nhost log:\n{}", host.log_tail());
    }
    let check = |claims: &[NodeClaim]| {
        let total: i64 = claims.iter().map(claim_cpu_millis).sum();
        assert!(
            total <= 8000,
            "claims hold {total}m cpu over the 8-cpu limit: {:?}\nhost log:\n{}",
            claims
                .iter()
                .map(|c| (c.name_any(), claim_cpu_millis(c)))
                .collect::<Vec<_>>(),
            host.log_tail()
        );
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        check(&claims(&client, &names).await);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Every claim launched by now counts at its real capacity.
    let launched = wait_until(Duration::from_secs(60), "all claims launched", || async {
        let all = claims(&client, &names).await;
        Ok::<_, kube::Error>(all.iter().all(|c| claim_cpu_millis(c) > 0).then_some(all))
    })
    .await;
    match launched {
        Ok(all) => check(&all),
        Err(err) => panic!("{err}\nhost log:\n{}", host.log_tail()),
    }
    host.check_alive();
    teardown(&client, &names, &ns).await;
}

/// Two pods binding host port 8080 (and a third on 9090) need two nodes, however small they are:
/// kube-scheduler would never put the two 8080 pods together, so neither does the simulation.
#[tokio::test]
async fn pods_binding_the_same_host_port_get_separate_nodes() {
    let (cp, client) = cluster().await;
    let names = Names::new("hostport");
    let host = Host::start(cp, &names, &["--batch-idle-duration", "500ms"]);
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(&client, &names, &class, "kwok", json!({"maxCpu": 4})).await;
    node_pool(
        &client,
        crate::lifecycle::node_pool_json(&names, &pool, &class),
    )
    .await;
    let ns = namespace(cp, "hostport").await;
    let ports = |port: i32| {
        json!({"containers": [{
            "name": "app", "image": "fake",
            "ports": [{"containerPort": port, "hostPort": port}],
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
        }]})
    };
    for (prefix, port) in [("web", 8080), ("metrics", 9090)] {
        let count = if port == 8080 { 2 } else { 1 };
        let api = Api::<Pod>::namespaced(client.clone(), &ns);
        for i in 0..count {
            let mut spec = ports(port);
            spec["nodeSelector"] = json!({"karpenter.sh/nodepool": pool});
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("{prefix}-{i}"), "labels": {RUN_LABEL: names.run}},
                "spec": spec,
            }))
            .unwrap();
            api.create(&PostParams::default(), &pod).await.unwrap();
        }
    }
    let running = wait_running(&client, &host, &ns, 3, Duration::from_secs(120)).await;
    let on = |name: &str| {
        running
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .map(node_name)
            .unwrap()
    };
    assert_ne!(on("web-0"), on("web-1"), "the two 8080 pods share a node");
    let made = claims(&client, &names).await;
    assert_eq!(made.len(), 2, "two nodes for the pods: {made:?}");
    teardown(&client, &names, &ns).await;
    host.check_alive();
}
