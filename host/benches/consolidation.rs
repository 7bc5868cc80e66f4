//! One consolidation pass over a cluster of N nodes with 10 pods each, on Karpenter's 400 fake
//! instance types (`fake.InstanceTypes(400)`, the scheduling benchmark's catalog):
//!
//! - `consolidation/multi/{underutilized,packed}/N`: multi-node consolidation (binary search over
//!   the 100 cheapest-to-disrupt candidates);
//! - `consolidation/single/{underutilized,packed}/N`: single-node consolidation, every candidate
//!   in order until one can go (in a packed cluster none can: every candidate is tried).
//!
//! Underutilized: each node (4 vCPU) runs 10 pods of 100m. Packed: 10 pods of 380m (nothing
//! fits elsewhere, no cheaper type holds them).
//!
//! And the same pass as the live host makes it, from its caches to a decision, over N nodes with 10
//! pods each as Kubernetes objects (Nodes, NodeClaims, Pods, one NodePool):
//!
//! - `live/build/N`: the cluster taken for the solver, as `consolidation::build` takes it: the
//!   snapshot of the caches (`Snapshot::from_view`), the pods kube-scheduler has not judged
//!   (`add_unbound`), the conversion to the solver's types (`Snapshot::input_from`) and the
//!   candidates (`cluster_from`);
//! - `live/pass/N`: that, then the multi-node and the single-node search on what it built: what a
//!   pass spends before its writes.

#![allow(clippy::expect_used)] // a benchmark: a broken fixture should stop it

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan::rules::consolidation::{Candidate, Cluster, Options, Policy, PoolTotals, price};
// The shared Karpenter inputs take their scheduling types from here.
use capstan::api::{NodeClass, NodePool};
use capstan::rules::candidates::Joined;
use capstan::rules::consolidation::from_view::{add_unbound, cluster_from};
use capstan::rules::selector::Selector;
use capstan::rules::snapshot::InstanceTypeSource;
use capstan::rules::snapshot::ProvisionError;
use capstan::rules::snapshot::Snapshot;
#[allow(unused_imports)]
use capstan::scheduling::{
    ExistingNode, InstanceType, LabelSelector, Namespaces, NodeInclusionPolicy, NodePoolView,
    Offering, Pod, PodAffinityTerm, Requirement, Requirements, Resources, SchedulingInput,
    SchedulingResult, TopologySpreadConstraint, WhenUnsatisfiable,
};
use capstan::state::View;
use criterion::{BenchmarkId, Criterion, criterion_group};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

#[path = "support/karpenter_inputs.rs"]
#[allow(dead_code)] // only the instance types are used here
mod karpenter_inputs;
use karpenter_inputs::{MI, ZONES, instance_types};

const NODE_TYPE: &str = "fake-it-3";

fn cluster(nodes: usize, pod_millis: i64) -> Cluster {
    let types = instance_types(400);
    let pool = NodePoolView::new("default", types.clone());
    let t: &InstanceType = types.iter().find(|t| t.name == NODE_TYPE).expect("type");
    let mut existing = Vec::with_capacity(nodes);
    let mut candidates = Vec::with_capacity(nodes);
    let mut totals = PoolTotals::default();
    for n in 0..nodes {
        let name = format!("node-{n:05}");
        let zone = ZONES[n % 2];
        let labels: BTreeMap<String, String> = [
            ("kubernetes.io/hostname", name.as_str()),
            ("node.kubernetes.io/instance-type", NODE_TYPE),
            ("topology.kubernetes.io/zone", zone),
            ("karpenter.sh/capacity-type", "on-demand"),
            ("karpenter.sh/nodepool", "default"),
            ("kubernetes.io/arch", "amd64"),
            ("kubernetes.io/os", "linux"),
            ("size", "small"),
            ("integer", "4"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let pods: Vec<Arc<Pod>> = (0..10)
            .map(|p| {
                let mut pod = Pod::new(
                    "default",
                    format!("{name}-pod-{p}"),
                    Resources::new(pod_millis, pod_millis * MI, 0),
                );
                pod.labels.insert("app".into(), format!("app-{}", p % 5));
                pod.owner_kind = Some("ReplicaSet".into());
                Arc::new(pod)
            })
            .collect();
        let mut used = Resources::default();
        for p in &pods {
            used.add(&p.requests);
            used.pods += 1;
        }
        let price = price::node_price(t, zone, "on-demand").expect("priced");
        totals.cost += price;
        totals.disruption_cost += 11.0;
        existing.push(ExistingNode {
            name: name.clone(),
            node_pool: Some("default".into()),
            labels,
            taints: Vec::new(),
            allocatable: t.allocatable(),
            used,
            pods: pods.clone(),
            initialized: true,
            ..ExistingNode::default()
        });
        candidates.push(Candidate {
            node: name.clone(),
            claim: name,
            node_pool: "default".into(),
            policy: Policy::WhenEmptyOrUnderutilized,
            instance_type: NODE_TYPE.into(),
            zone: zone.into(),
            capacity_type: "on-demand".into(),
            price,
            pods,
            disruption_cost: 10.0,
            reschedule_cost: 11.0,
        });
    }
    let input = SchedulingInput {
        node_pools: vec![pool],
        existing_nodes: existing,
        ..SchedulingInput::default()
    };
    Cluster::new(
        input,
        candidates,
        BTreeMap::from([("default".to_owned(), totals)]),
        Options::default(),
    )
}

fn allowance(nodes: usize) -> BTreeMap<String, usize> {
    BTreeMap::from([("default".to_owned(), nodes.div_ceil(10))])
}

/// A group of ten samples after a second's warm-up, measured `seconds` long.
fn group(
    c: &mut Criterion,
    name: String,
    seconds: u64,
) -> criterion::BenchmarkGroup<'_, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group(name);
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(seconds));
    group
}

fn bench(c: &mut Criterion) {
    let far = || Instant::now() + Duration::from_secs(3600);
    for (shape, millis) in [("underutilized", 100), ("packed", 380)] {
        for kind in ["multi", "single"] {
            let mut group = group(c, format!("consolidation/{kind}/{shape}"), 5);
            for nodes in [1000usize, 5000] {
                let mut cluster = cluster(nodes, millis);
                let budget = allowance(nodes);
                // What the pass decides, once, for the record.
                let started = Instant::now();
                let found = if kind == "multi" {
                    cluster
                        .multi_node(&budget, far())
                        .map(|c| (c.candidates.len(), c.decision(), c.savings()))
                } else {
                    let s = cluster.single_node(&budget, far());
                    eprintln!("  refused {}", s.refused.len());
                    s.command
                        .map(|c| (c.candidates.len(), c.decision(), c.savings()))
                };
                eprintln!(
                    "{kind}/{shape}/{nodes}: {found:?} in {:?}",
                    started.elapsed()
                );
                group.bench_with_input(BenchmarkId::from_parameter(nodes), &nodes, |b, _| {
                    b.iter(|| {
                        if kind == "multi" {
                            black_box(cluster.multi_node(&budget, far()).is_some())
                        } else {
                            black_box(cluster.single_node(&budget, far()).command.is_some())
                        }
                    });
                });
            }
            group.finish();
        }
    }
}

/// The live pass's pods: ten of them fill a node of [`NODE_TYPE`] (4 vCPU).
const POD_MILLIS: i64 = 380;

fn object<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).expect("a well-formed fixture")
}

fn condition(type_: &str) -> serde_json::Value {
    json!({"type": type_, "status": "True", "reason": type_, "message": "",
           "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

/// The caches of a cluster of `nodes` packed nodes.
fn view(nodes: usize, types: &[InstanceType]) -> View {
    let t = types.iter().find(|t| t.name == NODE_TYPE).expect("type");
    let cpu = format!("{}m", t.capacity.cpu_millis);
    let memory = t.capacity.memory.to_string();
    let pool: NodePool = object(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default", "uid": "pool-uid", "generation": 1},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "default"},
                "requirements": [],
            }},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized",
                           "consolidateAfter": "0s", "budgets": [{"nodes": "10%"}]},
        },
    }));
    let mut view = View {
        pools: vec![Arc::new(pool)],
        ..View::default()
    };
    for n in 0..nodes {
        let name = format!("node-{n:05}");
        let zone = ZONES[n % 2];
        let labels = json!({
            "kubernetes.io/hostname": name, "node.kubernetes.io/instance-type": NODE_TYPE,
            "topology.kubernetes.io/zone": zone, "karpenter.sh/capacity-type": "on-demand",
            "karpenter.sh/nodepool": "default", "karpenter.sh/initialized": "true",
            "karpenter.sh/registered": "true", "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
        });
        let resources = json!({"cpu": cpu, "memory": memory, "pods": "110"});
        let conditions = ["Launched", "Registered", "Initialized", "Consolidatable"].map(condition);
        view.nodes.push(Arc::new(object::<Node>(json!({
            "metadata": {"name": name, "uid": format!("node-uid-{n}"), "labels": labels},
            "spec": {"providerID": format!("kwok://{name}")},
            "status": {"capacity": resources, "allocatable": resources,
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }))));
        view.claims.push(Arc::new(object(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "uid": format!("claim-uid-{n}"), "labels": labels,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass",
                                      "name": "default"},
                     "requirements": []},
            "status": {"providerID": format!("kwok://{name}"), "nodeName": name,
                       "capacity": resources, "allocatable": resources,
                       "conditions": conditions},
        }))));
        for p in 0..10 {
            view.pods
                .push(Arc::new(object::<k8s_openapi::api::core::v1::Pod>(json!({
                    "metadata": {"name": format!("{name}-pod-{p}"), "namespace": "default",
                                 "uid": format!("pod-uid-{n}-{p}"),
                                 "labels": {"app": format!("app-{}", p % 5)},
                                 "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                      "name": format!("app-{}", p % 5),
                                                      "uid": "rs", "controller": true}]},
                    "spec": {"nodeName": name, "containers": [{"name": "app", "image": "app",
                             "resources": {"requests": {"cpu": format!("{POD_MILLIS}m"),
                                                        "memory": format!("{POD_MILLIS}Mi")}}}]},
                    "status": {"phase": "Running"},
                }))));
        }
    }
    view
}

/// One build: the cluster as a live pass takes it for the solver.
async fn build(
    view: &View,
    source: &impl InstanceTypeSource,
    selector: &Selector,
    now: Timestamp,
) -> capstan::rules::consolidation::Cluster {
    let mut snapshot = Snapshot::from_view(view, selector);
    add_unbound(&mut snapshot, view, selector);
    let built = snapshot.input_from(source).await;
    let pools: BTreeMap<String, &NodePool> = view
        .pools
        .iter()
        .map(|p| (p.metadata.name.clone().unwrap_or_default(), p.as_ref()))
        .collect();
    let joined = Joined::of(view);
    let (cluster, _) = cluster_from(
        view,
        &joined,
        &snapshot,
        built.input,
        (&pools, &HashSet::new()),
        now,
        Options::default(),
    )
    .expect("every node is a candidate");
    cluster
}

fn live(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let types = instance_types(400);
    let catalog = types.clone();
    let source = move |_: &NodePool, _: &HashMap<String, Arc<NodeClass>>| {
        Ok::<_, ProvisionError>(Arc::clone(&catalog))
    };
    let selector = Selector::default();
    let now = Timestamp::now();
    let far = || Instant::now() + Duration::from_secs(3600);
    for step in ["build", "pass"] {
        let mut group = group(c, format!("live/{step}"), 10);
        for nodes in [1000usize, 5000] {
            let view = view(nodes, &types);
            let budget = allowance(nodes);
            let pass = || {
                let mut cluster = runtime.block_on(build(&view, &source, &selector, now));
                if step == "pass" {
                    let multi = cluster.multi_node(&budget, far());
                    let single = cluster.single_node(&budget, far()).command;
                    return black_box(format!(
                        "multi {:?}, single {:?}",
                        multi.map(|c| (c.candidates.len(), c.decision())),
                        single.map(|c| (c.candidates.len(), c.decision()))
                    ));
                }
                black_box(format!("{} candidates", cluster.candidates.len()))
            };
            let started = Instant::now();
            let found = pass();
            eprintln!(
                "live/{step}/{nodes}: {found}, {} pods, in {:?}",
                view.pods.len(),
                started.elapsed()
            );
            group.bench_with_input(BenchmarkId::from_parameter(nodes), &nodes, |b, _| {
                b.iter(pass);
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench, live);

fn main() {
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
