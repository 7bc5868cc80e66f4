//! The engine on hand-built clusters: each rule of Karpenter's consolidation, one test each.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::decide::Refusal;
use super::*;
use crate::api::labels::{CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, NODEPOOL, ZONE};
use crate::scheduling::{
    ExistingNode, InstanceType, NodePoolView, Offering, Requirement, Requirements, Resources,
};

const GIB: i64 = 1 << 30;

/// `name` with `cpu` cores, priced `od` on-demand and `spot` spot (`None`: not sold as spot).
fn it(name: &str, cpu: i64, od: f64, spot: Option<f64>) -> InstanceType {
    let mut offerings = vec![Offering::new("zone-a", "on-demand", od)];
    if let Some(spot) = spot {
        offerings.push(Offering::new("zone-a", "spot", spot));
    }
    InstanceType {
        name: name.to_owned(),
        requirements: Requirements::new().with(Requirement::in_(INSTANCE_TYPE, [name])),
        offerings,
        capacity: Resources::new(cpu * 1000, cpu * 4 * GIB, 110),
        overhead: Resources::default(),
        volume_limits: Default::default(),
        devices: Vec::new(),
    }
}

fn pod(name: &str, millis: i64) -> Pod {
    Pod::new(
        "default",
        name,
        Resources::new(millis, millis * 1024 * 1024, 0),
    )
}

struct Builder {
    types: Vec<InstanceType>,
    pool: NodePoolView,
    /// Pools beside `default` (another provider's, say).
    others: Vec<NodePoolView>,
    policy: Policy,
    nodes: Vec<ExistingNode>,
    candidates: Vec<Candidate>,
    options: Options,
}

impl Builder {
    fn new(types: Vec<InstanceType>) -> Self {
        let pool = NodePoolView::new("default", Arc::from(types.clone()));
        Self {
            types,
            pool,
            others: Vec::new(),
            policy: Policy::WhenEmptyOrUnderutilized,
            nodes: Vec::new(),
            candidates: Vec::new(),
            options: Options::default(),
        }
    }

    fn node_with(
        mut self,
        name: &str,
        type_name: &str,
        capacity_type: &str,
        pods: Vec<Pod>,
        candidate: bool,
        initialized: bool,
    ) -> Self {
        let t = self
            .types
            .iter()
            .find(|t| t.name == type_name)
            .unwrap()
            .clone();
        let labels: BTreeMap<String, String> = [
            (HOSTNAME, name),
            (INSTANCE_TYPE, type_name),
            (ZONE, "zone-a"),
            (CAPACITY_TYPE, capacity_type),
            (NODEPOOL, "default"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let pods: Vec<std::sync::Arc<Pod>> = pods.into_iter().map(std::sync::Arc::new).collect();
        let mut used = Resources::default();
        for p in &pods {
            used.add(&p.requests);
            used.pods += 1;
        }
        self.nodes.push(ExistingNode {
            name: name.to_owned(),
            node_pool: Some("default".into()),
            labels,
            taints: Vec::new(),
            allocatable: t.allocatable(),
            used,
            pods: pods.clone(),
            initialized,
            ..ExistingNode::default()
        });
        if candidate {
            let price = price::node_price(&t, "zone-a", capacity_type).unwrap();
            let cost = pods.len() as f64;
            self.candidates.push(Candidate {
                node: name.to_owned(),
                claim: format!("claim-{name}"),
                node_pool: "default".into(),
                policy: self.policy,
                instance_type: type_name.to_owned(),
                zone: "zone-a".into(),
                capacity_type: capacity_type.to_owned(),
                price,
                pods,
                disruption_cost: cost,
                reschedule_cost: 1.0 + cost,
            });
        }
        self
    }

    fn node(self, name: &str, type_name: &str, capacity_type: &str, pods: Vec<Pod>) -> Self {
        self.node_with(name, type_name, capacity_type, pods, true, true)
    }

    fn build(self) -> Cluster {
        let mut totals: BTreeMap<String, PoolTotals> = BTreeMap::new();
        for n in &self.nodes {
            let t = self
                .types
                .iter()
                .find(|t| t.name == n.labels[INSTANCE_TYPE])
                .unwrap();
            let entry = totals.entry("default".into()).or_default();
            entry.cost += price::node_price(t, "zone-a", &n.labels[CAPACITY_TYPE]).unwrap();
            entry.disruption_cost += 1.0 + n.pods.len() as f64;
        }
        let mut node_pools = vec![self.pool];
        node_pools.extend(self.others);
        let input = SchedulingInput {
            node_pools,
            existing_nodes: self.nodes,
            ..SchedulingInput::default()
        };
        Cluster::new(input, self.candidates, totals, self.options)
    }
}

fn all(n: usize) -> search::Allowance {
    BTreeMap::from([("default".to_owned(), n)])
}

fn later() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

fn catalog() -> Vec<InstanceType> {
    vec![
        it("small", 2, 0.10, Some(0.03)),
        it("medium", 4, 0.20, Some(0.06)),
        it("large", 8, 0.40, Some(0.12)),
    ]
}

#[test]
fn empty_nodes_go_within_the_allowance() {
    let cluster = Builder::new(catalog())
        .node("a", "small", "on-demand", vec![])
        .node("b", "medium", "on-demand", vec![])
        .node("c", "small", "on-demand", vec![pod("p", 100)])
        .build();
    let cmd = cluster.empty(&all(10)).expect("two empty nodes");
    assert_eq!(cmd.reason, Reason::Empty);
    let names: Vec<&str> = cmd
        .candidates
        .iter()
        .map(|&i| cluster.candidates[i].node.as_str())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert!((cmd.savings() - 0.30).abs() < 1e-9);
    assert_eq!(cluster.empty(&all(1)).unwrap().candidates.len(), 1);
    assert!(cluster.empty(&all(0)).is_none());
}

/// An empty node the pending pods would land on is not deleted as empty (the pods of a node
/// being disrupted, a CapacityBuffer's room there): deleting it would only launch another.
#[test]
fn an_empty_node_pending_pods_would_use_stays() {
    let mut cluster = Builder::new(catalog())
        .node("a", "small", "on-demand", vec![])
        .node("b", "small", "on-demand", vec![])
        .node("c", "small", "on-demand", vec![pod("p", 1900)])
        .build();
    cluster.input.pods.push(pod("leaving", 1500));
    let cmd = cluster.empty(&all(10)).expect("one empty node is free");
    let names: Vec<&str> = cmd
        .candidates
        .iter()
        .map(|&i| cluster.candidates[i].node.as_str())
        .collect();
    assert_eq!(
        names,
        ["b"],
        "the pending pod lands on a, the first that fits"
    );
    cluster.input.pods.push(pod("leaving-too", 1500));
    assert!(cluster.empty(&all(10)).is_none(), "both are wanted");
}

#[test]
fn a_node_whose_pods_fit_elsewhere_is_deleted() {
    let mut cluster = Builder::new(catalog())
        .node("a", "medium", "on-demand", vec![pod("p1", 1000)])
        .node("b", "medium", "on-demand", vec![pod("p2", 3000)])
        .build();
    let found = cluster.single_node(&all(1), later());
    let cmd = found.command.expect("a goes");
    assert_eq!(cluster.candidates[cmd.candidates[0]].node, "a");
    assert_eq!(cmd.replacement, None);
    assert_eq!(cmd.decision(), "delete");
    // The input is as it was.
    assert_eq!(cluster.input.existing_nodes.len(), 2);
    assert!(cluster.input.pods.is_empty());
}

#[test]
fn an_on_demand_node_is_replaced_by_a_cheaper_one_pinned_to_spot() {
    let mut cluster = Builder::new(catalog())
        .node("a", "large", "on-demand", vec![pod("p1", 1500)])
        .build();
    let cmd = cluster
        .single_node(&all(1), later())
        .command
        .expect("replaced");
    let replacement = cmd.replacement.as_ref().unwrap();
    // Spot large (0.12) is cheaper than on-demand large too.
    assert_eq!(
        replacement.instance_type_options,
        ["small", "medium", "large"]
    );
    assert_eq!(
        replacement
            .requirements
            .set_of(CAPACITY_TYPE)
            .unwrap()
            .values(),
        ["spot"]
    );
    assert!((cmd.price_after - 0.03).abs() < 1e-9);
    assert!((cmd.price_before - 0.40).abs() < 1e-9);
}

#[test]
fn an_on_demand_only_pool_replaces_on_demand_with_cheaper_on_demand() {
    let mut b = Builder::new(catalog());
    b.pool.requirements = Requirements::new().with(Requirement::in_(CAPACITY_TYPE, ["on-demand"]));
    let mut cluster = b
        .node("a", "large", "on-demand", vec![pod("p1", 1500)])
        .build();
    let cmd = cluster
        .single_node(&all(1), later())
        .command
        .expect("replaced");
    let replacement = cmd.replacement.unwrap();
    assert_eq!(replacement.instance_type_options, ["small", "medium"]);
    assert!((cmd.price_after - 0.10).abs() < 1e-9);
}

/// Capacity freed in a cheaper pool of another provider (on-prem, weight 100) takes the pods of a
/// cloud node (weight 10): the replacement comes from the other pool, which the quick test must
/// not rule out by looking at the candidate's own pool only.
#[test]
fn a_node_is_replaced_from_a_cheaper_pool_of_another_provider() {
    let mut b = Builder::new(vec![it("std-4", 4, 1.0, None)]);
    b.pool.weight = 10;
    let mut onprem = NodePoolView::new("onprem", Arc::from(vec![it("rack-4", 4, 0.05, None)]));
    onprem.weight = 100;
    b.others.push(onprem);
    let mut cluster = b
        .node("cloud-a", "std-4", "on-demand", vec![pod("p1", 3000)])
        .build();
    let cmd = cluster
        .single_node(&all(1), later())
        .command
        .expect("replaced from the on-prem pool");
    let replacement = cmd.replacement.unwrap();
    assert_eq!(replacement.node_pool, "onprem");
    assert_eq!(replacement.instance_type_options, ["rack-4"]);
    assert!((cmd.price_after - 0.05).abs() < 1e-9);
}

#[test]
fn nothing_cheaper_means_no_replacement() {
    let mut cluster = Builder::new(catalog())
        .node("a", "small", "on-demand", vec![pod("p1", 1500)])
        .build();
    // Spot small (0.03) is cheaper than on-demand small (0.10): that one is made...
    let cmd = cluster
        .single_node(&all(1), later())
        .command
        .expect("to spot");
    assert_eq!(
        cmd.replacement.unwrap().instance_type_options,
        ["small", "medium"]
    );
    // ...unless the pool forbids spot.
    let mut b = Builder::new(catalog());
    b.pool.requirements = Requirements::new().with(Requirement::in_(CAPACITY_TYPE, ["on-demand"]));
    let mut cluster = b
        .node("a", "small", "on-demand", vec![pod("p1", 1500)])
        .build();
    let found = cluster.single_node(&all(1), later());
    assert!(found.command.is_none());
    assert!(
        matches!(found.refused[0].1, Refusal::NoRoom { .. }),
        "{:?}",
        found.refused
    );
}

#[test]
fn spot_to_spot_is_off_by_default_and_needs_fifteen_cheaper_types() {
    let mut cluster = Builder::new(catalog())
        .node("a", "large", "spot", vec![pod("p1", 1500)])
        .build();
    let found = cluster.single_node(&all(1), later());
    assert_eq!(found.refused[0].1, Refusal::SpotToSpotDisabled);

    let mut b = Builder::new(catalog());
    b.options.spot_to_spot = true;
    let mut cluster = b.node("a", "large", "spot", vec![pod("p1", 1500)]).build();
    let found = cluster.single_node(&all(1), later());
    assert_eq!(found.refused[0].1, Refusal::SpotToSpotFlexibility(2));

    // Twenty cheaper spot types: replaced, limited to the fifteen cheapest.
    let mut types: Vec<InstanceType> = (0..20)
        .map(|i| {
            it(
                &format!("t{i:02}"),
                2,
                0.10,
                Some(0.01 + f64::from(i) * 0.001),
            )
        })
        .collect();
    types.push(it("big", 8, 0.40, Some(0.12)));
    let mut b = Builder::new(types);
    b.options.spot_to_spot = true;
    let mut cluster = b.node("a", "big", "spot", vec![pod("p1", 1500)]).build();
    let cmd = cluster
        .single_node(&all(1), later())
        .command
        .expect("spot to spot");
    let replacement = cmd.replacement.unwrap();
    assert_eq!(
        replacement.instance_type_options.len(),
        MIN_SPOT_TO_SPOT_TYPES
    );
    assert_eq!(replacement.instance_type_options[0], "t00");
    assert_eq!(
        replacement
            .requirements
            .set_of(CAPACITY_TYPE)
            .unwrap()
            .values(),
        ["spot"]
    );
}

#[test]
fn pods_that_fit_only_on_a_node_not_initialized_hold_the_candidate() {
    let mut b = Builder::new(catalog());
    b.pool.requirements = Requirements::new().with(Requirement::in_(INSTANCE_TYPE, ["medium"]));
    let mut cluster = b
        .node("a", "medium", "on-demand", vec![pod("p1", 1000)])
        .node_with("b", "medium", "on-demand", vec![], false, false)
        .build();
    let found = cluster.single_node(&all(1), later());
    assert!(found.command.is_none());
    let why = found.refused[0].1.to_string();
    assert!(why.contains("not initialized"), "{why}");
}

#[test]
fn the_allowance_bounds_what_is_tried() {
    let mut cluster = Builder::new(catalog())
        .node("a", "medium", "on-demand", vec![pod("p1", 1000)])
        .node("b", "medium", "on-demand", vec![pod("p2", 1000)])
        .build();
    let found = cluster.single_node(&all(0), later());
    assert!(found.command.is_none() && found.refused.is_empty());
    assert!(
        cluster.multi_node(&all(1), later()).is_none(),
        "one allowed: no pair"
    );
}

#[test]
fn several_nodes_become_one_cheaper_node() {
    let mut b = Builder::new(catalog());
    b.pool.requirements = Requirements::new().with(Requirement::in_(CAPACITY_TYPE, ["on-demand"]));
    let mut cluster = b
        .node("a", "medium", "on-demand", vec![pod("p1", 500)])
        .node("b", "medium", "on-demand", vec![pod("p2", 500)])
        .node("c", "medium", "on-demand", vec![pod("p3", 500)])
        .node("d", "medium", "on-demand", vec![pod("p4", 500)])
        .build();
    let cmd = cluster
        .multi_node(&all(10), later())
        .expect("four into one");
    assert_eq!(cmd.candidates.len(), 4);
    let replacement = cmd.replacement.as_ref().unwrap();
    assert_eq!(replacement.instance_type_options, ["small"]);
    assert!((cmd.savings() - 0.70).abs() < 1e-9);
    // The allowance caps the prefix: two of them become... nothing (both fit on the others).
    let cmd = cluster.multi_node(&all(2), later()).expect("two deleted");
    assert_eq!(cmd.candidates.len(), 2);
    assert_eq!(cmd.replacement, None);
}

#[test]
fn several_nodes_never_become_one_of_their_own_type() {
    let mut b = Builder::new(vec![it("only", 4, 0.20, None)]);
    b.pool.requirements = Requirements::new().with(Requirement::in_(CAPACITY_TYPE, ["on-demand"]));
    let mut cluster = b
        .node("a", "only", "on-demand", vec![pod("p1", 3000)])
        .node("b", "only", "on-demand", vec![pod("p2", 3000)])
        .build();
    assert!(cluster.multi_node(&all(10), later()).is_none());
}

#[test]
fn balanced_replaces_for_forty_percent_but_not_for_one() {
    let build = |replacement_price: f64| {
        let types = vec![
            it("current", 8, 1.0, None),
            it("cheaper", 4, replacement_price, None),
        ];
        let mut b = Builder::new(types);
        b.policy = Policy::Balanced;
        b.pool.requirements =
            Requirements::new().with(Requirement::in_(CAPACITY_TYPE, ["on-demand"]));
        let full: Vec<Pod> = (0..4).map(|i| pod(&format!("busy{i}"), 2000)).collect();
        b.node("a", "current", "on-demand", vec![pod("p1", 3000)])
            .node_with("b", "current", "on-demand", full, false, true)
            .build()
    };
    let mut cluster = build(0.60);
    let cmd = cluster
        .single_node(&all(1), later())
        .command
        .expect("worth it");
    assert!((cmd.savings() - 0.40).abs() < 1e-9);

    let mut cluster = build(0.99);
    let found = cluster.single_node(&all(1), later());
    assert!(found.command.is_none());
    assert!(matches!(found.refused[0].1, Refusal::NotWorthIt { .. }));

    // The same 1% under WhenEmptyOrUnderutilized is Karpenter's: made.
    let mut cluster = build(0.99);
    for c in &mut cluster.candidates {
        c.policy = Policy::WhenEmptyOrUnderutilized;
    }
    assert!(cluster.single_node(&all(1), later()).command.is_some());
}

#[test]
fn min_values_survive_narrowing() {
    let mut b = Builder::new(catalog());
    b.pool.requirements = Requirements::new()
        .with(Requirement::in_(CAPACITY_TYPE, ["on-demand"]))
        .with(Requirement::exists(INSTANCE_TYPE).with_min_values(Some(3)));
    let mut cluster = b
        .node("a", "large", "on-demand", vec![pod("p1", 1500)])
        .build();
    let found = cluster.single_node(&all(1), later());
    assert!(found.command.is_none());
    let why = found.refused[0].1.to_string();
    assert!(why.contains("minValues 3"), "{why}");
}

#[test]
fn stranded_pods_are_named() {
    let mut picky = pod("picky", 100);
    picky.node_selector.insert("disk".into(), "ssd".into());
    let mut cluster = Builder::new(catalog())
        .node("a", "large", "on-demand", vec![picky])
        .node_with("b", "large", "on-demand", vec![], false, true)
        .build();
    let found = cluster.single_node(&all(1), later());
    let why = found.refused[0].1.to_string();
    assert!(why.contains("default/picky"), "{why}");
}

#[test]
fn a_packed_node_is_refused_without_a_simulation() {
    let full = |n: &str| {
        (0..4)
            .map(|i| pod(&format!("{n}{i}"), 1000))
            .collect::<Vec<_>>()
    };
    let mut b = Builder::new(catalog());
    b.pool.requirements = Requirements::new().with(Requirement::in_(CAPACITY_TYPE, ["on-demand"]));
    let mut cluster = b
        .node("a", "medium", "on-demand", full("a"))
        .node("b", "medium", "on-demand", full("b"))
        .build();
    let found = cluster.single_node(&all(2), later());
    assert!(found.command.is_none());
    assert_eq!(found.refused.len(), 2);
    assert!(
        found
            .refused
            .iter()
            .all(|(_, r)| matches!(r, Refusal::NoRoom { .. }))
    );
}

proptest::proptest! {
    /// The quick test never refuses what a simulation would allow.
    #[test]
    fn the_quick_test_only_refuses_what_simulation_refuses(
        nodes in proptest::collection::vec(
            (0usize..3, proptest::collection::vec(1i64..20, 0..6)), 1..5),
    ) {
        let names = ["small", "medium", "large"];
        let mut b = Builder::new(catalog());
        b.pool.requirements =
            Requirements::new().with(Requirement::in_(CAPACITY_TYPE, ["on-demand"]));
        for (n, (t, pods)) in nodes.iter().enumerate() {
            let pods = pods
                .iter()
                .enumerate()
                .map(|(p, m)| pod(&format!("n{n}p{p}"), m * 100))
                .collect();
            b = b.node(&format!("n{n}"), names[*t], "on-demand", pods);
        }
        let mut cluster = b.build();
        for i in 0..cluster.candidates.len() {
            if cluster.headroom.hopeless(&cluster.candidates[i]) {
                let checked = cluster.check(&[i]);
                proptest::prop_assert!(checked.is_err(), "{:?}", checked);
            }
        }
    }
}

#[test]
fn candidates_go_cheapest_to_disrupt_first() {
    let cluster = Builder::new(catalog())
        .node(
            "a",
            "small",
            "on-demand",
            vec![pod("p1", 100), pod("p2", 100)],
        )
        .node("b", "small", "on-demand", vec![pod("p3", 100)])
        .build();
    assert_eq!(cluster.candidates[0].node, "b");
}
