//! The bin index must not change a single placement: on random small clusters the solver gives
//! the same result as [`solve_by_scan`], which tries every bin in first-fit order (existing
//! nodes, in-flight claims, then open claims by fewest pods and age) and asserts on every pod
//! that the index keeps each bin the filters pass.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;

use super::{solve, solve_by_scan};
use crate::api::labels::{CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, ZONE};
use crate::scheduling::*;

const GI: i64 = 1 << 30;
const ZONES: [&str; 3] = ["z1", "z2", "z3"];
const LABELS: [&str; 3] = ["a", "b", "c"];

fn types() -> Arc<[InstanceType]> {
    [(1, 0.1), (2, 0.19), (4, 0.37), (8, 0.7)]
        .iter()
        .map(|&(cpu, price)| {
            let name = format!("t{cpu}");
            InstanceType {
                requirements: Requirements::new()
                    .with(Requirement::in_(INSTANCE_TYPE, [name.as_str()]))
                    .with(Requirement::in_(ZONE, ZONES))
                    .with(Requirement::in_(CAPACITY_TYPE, ["on-demand", "spot"])),
                offerings: ZONES
                    .iter()
                    .flat_map(|z| {
                        [
                            Offering::new(*z, "on-demand", price),
                            Offering::new(*z, "spot", price * 0.6),
                        ]
                    })
                    .collect(),
                capacity: Resources::new(cpu * 1000, 2 * cpu * GI, 4 * cpu),
                overhead: Resources::default(),
                name,
                volume_limits: Default::default(),
                devices: Vec::new(),
            }
        })
        .collect()
}

/// What a generated pod carries besides its label and requests.
#[derive(Clone, Debug)]
enum Kind {
    Plain,
    Spread(&'static str, i32, bool),
    Affinity(&'static str, usize),
    AntiAffinity(&'static str, usize),
    PreferredAnti(usize),
    InZone(usize),
}

fn kind() -> impl Strategy<Value = Kind> {
    let key = prop_oneof![Just(ZONE), Just(HOSTNAME)];
    prop_oneof![
        2 => Just(Kind::Plain),
        2 => (key.clone(), 1..3i32, any::<bool>()).prop_map(|(k, s, hard)| Kind::Spread(k, s, hard)),
        2 => (key.clone(), 0..LABELS.len()).prop_map(|(k, l)| Kind::Affinity(k, l)),
        2 => (key, 0..LABELS.len()).prop_map(|(k, l)| Kind::AntiAffinity(k, l)),
        1 => (0..LABELS.len()).prop_map(Kind::PreferredAnti),
        1 => (0..ZONES.len()).prop_map(Kind::InZone),
    ]
}

fn term(key: &str, label: usize) -> PodAffinityTerm {
    PodAffinityTerm {
        topology_key: key.to_owned(),
        label_selector: Some(LabelSelector::labels([("app", LABELS[label])])),
        namespaces: Namespaces::Own,
    }
}

fn pod(i: usize, label: usize, cpu: i64, kind: &Kind) -> Pod {
    let mut pod = Pod::new(
        "default",
        format!("p{i}"),
        Resources::new(cpu, cpu << 20, 0),
    )
    .label("app", LABELS[label]);
    match *kind {
        Kind::Plain => {}
        Kind::Spread(key, skew, hard) => pod.topology_spread.push(TopologySpreadConstraint {
            max_skew: skew,
            topology_key: key.to_owned(),
            when_unsatisfiable: if hard {
                WhenUnsatisfiable::DoNotSchedule
            } else {
                WhenUnsatisfiable::ScheduleAnyway
            },
            label_selector: Some(LabelSelector::labels([("app", LABELS[label])])),
            min_domains: None,
            node_affinity_policy: NodeInclusionPolicy::Honor,
            node_taints_policy: NodeInclusionPolicy::Ignore,
        }),
        Kind::Affinity(key, l) => pod.pod_affinity.push(term(key, l)),
        Kind::AntiAffinity(key, l) => pod.pod_anti_affinity.push(term(key, l)),
        Kind::PreferredAnti(l) => pod
            .preferred_pod_anti_affinity
            .push(WeightedPodAffinityTerm {
                weight: 10,
                term: term(HOSTNAME, l),
            }),
        Kind::InZone(z) => {
            pod.node_selector
                .insert(ZONE.to_owned(), ZONES[z].to_owned());
        }
    }
    pod
}

/// `(zone, label, anti-affine)` of an existing node with one running pod, and `used` millicores
/// of its 2 vCPU requested (more than it has, sometimes: overcommitted).
fn node(i: usize, zone: usize, label: usize, anti: bool, used: i64) -> ExistingNode {
    let mut running = Pod::new(
        "default",
        format!("running-{i}"),
        Resources::new(500, 1 << 29, 0),
    )
    .label("app", LABELS[label]);
    if anti {
        running.pod_anti_affinity.push(term(HOSTNAME, label));
    }
    ExistingNode {
        name: format!("node-{i}"),
        labels: BTreeMap::from([
            (ZONE.to_owned(), ZONES[zone].to_owned()),
            (HOSTNAME.to_owned(), format!("node-{i}")),
        ]),
        allocatable: Resources::new(2000, 4 * GI, 8),
        used: Resources::new(used, 1 << 29, 1),
        pods: vec![std::sync::Arc::new(running)],
        initialized: true,
        ..ExistingNode::default()
    }
}

fn input() -> impl Strategy<Value = SchedulingInput> {
    let pods = prop::collection::vec((0..LABELS.len(), 1..16i64, kind()), 1..40);
    let nodes = prop::collection::vec(
        (0..ZONES.len(), 0..LABELS.len(), any::<bool>(), 0..10i64),
        0..4,
    );
    (pods, nodes, any::<bool>()).prop_map(|(pods, nodes, inflight)| {
        let mut input = SchedulingInput {
            pods: pods
                .iter()
                .enumerate()
                .map(|(i, (label, cpu, kind))| pod(i, *label, cpu * 250, kind))
                .collect(),
            node_pools: vec![NodePoolView::new("default", types())],
            existing_nodes: nodes
                .iter()
                .enumerate()
                .map(|(i, &(z, l, anti, used))| node(i, z, l, anti, used * 250))
                .collect(),
            ..SchedulingInput::default()
        };
        if inflight {
            input.inflight_claims.push(InflightClaim {
                name: "launching".to_owned(),
                requirements: Requirements::new().with(Requirement::in_(ZONE, ["z2"])),
                allocatable: Resources::new(4000, 8 * GI, 16),
                ..InflightClaim::default()
            });
        }
        input
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn the_index_places_every_pod_where_a_full_scan_does(input in input()) {
        let indexed = solve(&input);
        let scanned = solve_by_scan(&input);
        prop_assert_eq!(indexed, scanned);
    }
}
