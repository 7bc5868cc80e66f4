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

#![allow(clippy::expect_used)] // a benchmark: a broken fixture should stop it

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan::consolidation::{Candidate, Cluster, Options, Policy, PoolTotals, price};
// The shared Karpenter inputs take their scheduling types from here.
#[allow(unused_imports)]
use capstan::scheduling::{
    ExistingNode, InstanceType, LabelSelector, Namespaces, NodeInclusionPolicy, NodePoolView,
    Offering, Pod, PodAffinityTerm, Requirement, Requirements, Resources, SchedulingInput,
    SchedulingResult, TopologySpreadConstraint, WhenUnsatisfiable,
};
use criterion::{BenchmarkId, Criterion, criterion_group};

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
        let pods: Vec<Pod> = (0..10)
            .map(|p| {
                let mut pod = Pod::new(
                    "default",
                    format!("{name}-pod-{p}"),
                    Resources::new(pod_millis, pod_millis * MI, 0),
                );
                pod.labels.insert("app".into(), format!("app-{}", p % 5));
                pod.owner_kind = Some("ReplicaSet".into());
                pod
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

fn bench(c: &mut Criterion) {
    let far = || Instant::now() + Duration::from_secs(3600);
    for (shape, millis) in [("underutilized", 100), ("packed", 380)] {
        for kind in ["multi", "single"] {
            let mut group = c.benchmark_group(format!("consolidation/{kind}/{shape}"));
            group.sample_size(10);
            group.warm_up_time(Duration::from_secs(1));
            group.measurement_time(Duration::from_secs(5));
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

criterion_group!(benches, bench);

fn main() {
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
