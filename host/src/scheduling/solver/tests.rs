//! Scenario tests of the solver: each asserts on the instance types, counts or zones chosen.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::labels::{ARCH, CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, ZONE};
use crate::scheduling::*;

const GI: i64 = 1 << 30;
const ZONES: [&str; 3] = ["zone-1", "zone-2", "zone-3"];

fn instance_type(
    name: &str,
    cpu: i64,
    mem_gib: i64,
    pods: i64,
    arch: &str,
    price: f64,
) -> InstanceType {
    InstanceType {
        name: name.to_owned(),
        requirements: Requirements::new()
            .with(Requirement::in_(INSTANCE_TYPE, [name]))
            .with(Requirement::in_(ARCH, [arch]))
            .with(Requirement::in_(ZONE, ZONES))
            .with(Requirement::in_(CAPACITY_TYPE, ["on-demand"]))
            .with(Requirement::in_("example.com/cpu", [cpu.to_string()])),
        offerings: ZONES
            .iter()
            .map(|z| Offering::new(*z, "on-demand", price))
            .collect(),
        capacity: Resources::new(cpu * 1000, mem_gib * GI, pods),
        overhead: Resources::default(),
        volume_limits: Default::default(),
        devices: Vec::new(),
    }
}

/// 1, 2, 4, 8, 16 CPU amd64 types (`c1`..`c16`, 2 GiB per CPU, 10 pods per CPU, priced by CPU)
/// and a 4 CPU arm64 type that is cheaper than its amd64 twin.
fn catalog() -> Arc<[InstanceType]> {
    let mut types: Vec<InstanceType> = [1, 2, 4, 8, 16]
        .iter()
        .map(|&c| instance_type(&format!("c{c}"), c, 2 * c, 10 * c, "amd64", 0.1 * c as f64))
        .collect();
    types.push(instance_type("a4", 4, 8, 40, "arm64", 0.3));
    types.into()
}

fn pool(name: &str) -> NodePoolView {
    NodePoolView::new(name, catalog())
}

fn pod(name: &str, cpu_millis: i64, mem: i64) -> Pod {
    Pod::new("default", name, Resources::new(cpu_millis, mem, 0))
}

fn input(pods: Vec<Pod>, pools: Vec<NodePoolView>) -> SchedulingInput {
    SchedulingInput {
        pods,
        node_pools: pools,
        ..SchedulingInput::default()
    }
}

fn zone_of(claim: &NewClaim) -> &str {
    claim
        .requirements
        .set_of(ZONE)
        .and_then(ValueSet::single_value)
        .unwrap_or("<unset>")
}

fn affinity_term(key: &str, labels: &[(&str, &str)]) -> PodAffinityTerm {
    PodAffinityTerm {
        topology_key: key.to_owned(),
        label_selector: Some(LabelSelector::labels(labels.iter().copied())),
        namespaces: Namespaces::Own,
    }
}

fn spread(key: &str, labels: &[(&str, &str)]) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew: 1,
        topology_key: key.to_owned(),
        when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
        label_selector: Some(LabelSelector::labels(labels.iter().copied())),
        min_domains: None,
        node_affinity_policy: NodeInclusionPolicy::Honor,
        node_taints_policy: NodeInclusionPolicy::Ignore,
    }
}

#[test]
fn one_pod_gets_the_cheapest_type_that_fits_and_options_are_price_ordered() {
    let result = solve(&input(vec![pod("a", 1500, GI)], vec![pool("default")]));
    assert!(
        result.unschedulable.is_empty(),
        "{:?}",
        result.unschedulable
    );
    let [claim] = result.new_claims.as_slice() else {
        panic!("expected one claim, got {:?}", result.new_claims)
    };
    assert_eq!(claim.node_pool, "default");
    assert_eq!(claim.cheapest_offering.instance_type, "c2");
    assert!((claim.cheapest_price - 0.2).abs() < 1e-9);
    assert_eq!(
        claim.instance_type_options,
        vec!["c2", "a4", "c4", "c8", "c16"]
    );
    assert_eq!(
        claim.requirements.set_of(INSTANCE_TYPE),
        Some(&ValueSet::in_(["c2", "a4", "c4", "c8", "c16"]))
    );
    assert!(
        !claim.requirements.has(HOSTNAME),
        "placeholder hostname is removed"
    );
    assert_eq!(claim.requests, Resources::new(1500, GI, 1));
    assert_eq!(claim.pods, vec![0]);
}

#[test]
fn options_are_truncated_to_the_cheapest_n() {
    let mut inp = input(vec![pod("a", 500, GI)], vec![pool("default")]);
    inp.options.max_instance_types = 2;
    let result = solve(&inp);
    assert_eq!(result.new_claims[0].instance_type_options, vec!["c1", "c2"]);
}

#[test]
fn pods_pack_largest_first_onto_one_claim_that_grows() {
    // 3 + 2 + 2 + 1 CPU: fits one 8 CPU node (c8), the cheapest that holds all.
    let pods = vec![
        pod("s", 1000, GI),
        pod("l", 3000, GI),
        pod("m1", 2000, GI),
        pod("m2", 2000, GI),
    ];
    let result = solve(&input(pods, vec![pool("default")]));
    assert_eq!(result.new_claims.len(), 1);
    let claim = &result.new_claims[0];
    assert_eq!(claim.cheapest_offering.instance_type, "c8");
    assert_eq!(
        claim.pods,
        vec![1, 2, 3, 0],
        "largest first, ties in input order"
    );
    assert_eq!(claim.instance_type_options, vec!["c8", "c16"]);
}

#[test]
fn node_selector_narrows_instance_types() {
    let pods = vec![pod("arm", 1000, GI).node_selector(ARCH, "arm64")];
    let result = solve(&input(pods, vec![pool("default")]));
    let claim = &result.new_claims[0];
    assert_eq!(claim.instance_type_options, vec!["a4"]);
    assert_eq!(
        claim.requirements.set_of(ARCH),
        Some(&ValueSet::in_(["arm64"]))
    );
}

#[test]
fn incompatible_pool_requirement_is_reported() {
    let mut p = pool("default");
    p.requirements.add(Requirement::in_(ARCH, ["amd64"]));
    let pods = vec![pod("arm", 1000, GI).node_selector(ARCH, "arm64")];
    let result = solve(&input(pods, vec![p]));
    assert!(result.new_claims.is_empty());
    assert_eq!(
        result.unschedulable,
        vec![(0, "incompatible with nodepool default: requirement kubernetes.io/arch In [arm64] vs [amd64]".to_owned())]
    );
}

#[test]
fn required_node_affinity_with_gt_and_not_in() {
    let pods = vec![
        pod("big", 500, GI)
            .require(Requirement::gt("example.com/cpu", 4))
            .require(Requirement::not_in(INSTANCE_TYPE, ["c8"])),
    ];
    // Two required terms are ORed: the first (Gt 4) is used.
    let result = solve(&input(pods, vec![pool("default")]));
    assert_eq!(
        result.new_claims[0].instance_type_options,
        vec!["c8", "c16"]
    );

    let pods = vec![
        pod("p", 500, GI)
            .require(Requirement::lt("example.com/cpu", 4))
            .require(Requirement::gt("example.com/cpu", 100)),
    ];
    let mut p = pool("default");
    p.requirements
        .add(Requirement::not_in(INSTANCE_TYPE, ["c1"]));
    let result = solve(&input(pods, vec![p]));
    assert_eq!(result.new_claims[0].instance_type_options, vec!["c2"]);
}

#[test]
fn second_required_term_is_used_when_the_first_cannot_be_met() {
    let pods = vec![
        pod("p", 500, GI)
            .require(Requirement::in_(ARCH, ["s390x"]))
            .require(Requirement::in_(INSTANCE_TYPE, ["c4"])),
    ];
    let result = solve(&input(pods, vec![pool("default")]));
    assert!(
        result.unschedulable.is_empty(),
        "{:?}",
        result.unschedulable
    );
    assert_eq!(result.new_claims[0].instance_type_options, vec!["c4"]);
}

#[test]
fn taints_need_tolerations() {
    let mut gpu = pool("gpu");
    gpu.taints
        .push(Taint::new("dedicated", "gpu", TaintEffect::NoSchedule));
    let result = solve(&input(vec![pod("plain", 500, GI)], vec![gpu.clone()]));
    assert_eq!(
        result.unschedulable,
        vec![(
            0,
            "incompatible with nodepool gpu: untolerated taint dedicated=gpu:NoSchedule".to_owned()
        )]
    );

    let tolerant = pod("tolerant", 500, GI).tolerate(Toleration::equal("dedicated", "gpu"));
    let result = solve(&input(vec![tolerant], vec![gpu.clone()]));
    assert_eq!(result.new_claims.len(), 1);

    // With an untainted pool too, the plain pod goes there even though gpu weighs more.
    gpu.weight = 50;
    let result = solve(&input(
        vec![pod("plain", 500, GI)],
        vec![gpu, pool("general")],
    ));
    assert_eq!(result.new_claims[0].node_pool, "general");
}

#[test]
fn prefer_no_schedule_taints_are_relaxed() {
    let mut soft = pool("soft");
    soft.taints
        .push(Taint::new("maybe", "", TaintEffect::PreferNoSchedule));
    let result = solve(&input(vec![pod("p", 500, GI)], vec![soft]));
    assert!(
        result.unschedulable.is_empty(),
        "{:?}",
        result.unschedulable
    );
    assert_eq!(result.new_claims[0].node_pool, "soft");
}

#[test]
fn daemonset_overhead_shrinks_allocatable() {
    // 1.5 CPU fits c2 alone, but not next to a 1 CPU DaemonSet pod.
    let ds = pod("ds", 1000, GI);
    let mut inp = input(vec![pod("a", 1500, GI)], vec![pool("default")]);
    let result = solve(&inp);
    assert_eq!(result.new_claims[0].cheapest_offering.instance_type, "c2");
    inp.daemonset_pods.push(ds.clone());
    let result = solve(&inp);
    let claim = &result.new_claims[0];
    assert_eq!(
        claim.cheapest_offering.instance_type, "a4",
        "the cheapest 4 CPU type"
    );
    assert_eq!(
        claim.requests,
        Resources::new(2500, 2 * GI, 2),
        "pod + DaemonSet pod"
    );

    // A DaemonSet that does not tolerate the pool's taint does not land there.
    let mut tainted = pool("default");
    tainted
        .taints
        .push(Taint::new("t", "", TaintEffect::NoSchedule));
    let inp = SchedulingInput {
        pods: vec![pod("a", 1500, GI).tolerate(Toleration::exists("t"))],
        node_pools: vec![tainted],
        daemonset_pods: vec![ds.clone()],
        ..SchedulingInput::default()
    };
    assert_eq!(
        solve(&inp).new_claims[0].cheapest_offering.instance_type,
        "c2"
    );

    // One that selects arm64 only lands on (and only shrinks) the arm64 type.
    let arm_ds = ds.node_selector(ARCH, "arm64");
    let inp = SchedulingInput {
        pods: vec![pod("a", 3500, GI)],
        node_pools: vec![pool("default")],
        daemonset_pods: vec![arm_ds],
        ..SchedulingInput::default()
    };
    let claim = &solve(&inp).new_claims[0];
    assert_eq!(
        claim.instance_type_options,
        vec!["c4", "c8", "c16"],
        "a4 no longer fits 3.5 CPU"
    );
}

#[test]
fn pods_resource_limits_pods_per_node() {
    let tiny = Arc::from(vec![instance_type("tiny", 4, 8, 2, "amd64", 0.1)]);
    let pods = (0..3)
        .map(|i| pod(&format!("p{i}"), 100, 1 << 20))
        .collect();
    let result = solve(&input(pods, vec![NodePoolView::new("default", tiny)]));
    let mut sizes: Vec<usize> = result.new_claims.iter().map(|c| c.pods.len()).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, vec![1, 2]);
}

#[test]
fn limits_stop_new_claims() {
    let mut p = NodePoolView::new(
        "default",
        Arc::from(vec![instance_type("c4", 4, 8, 40, "amd64", 0.4)]),
    );
    p.limits = Some(ResourceLimits::default().with("cpu", 4000));
    p.remaining = p.limits.clone();
    let result = solve(&input(
        vec![pod("a", 3000, GI), pod("b", 3000, GI)],
        vec![p],
    ));
    assert_eq!(result.new_claims.len(), 1);
    assert_eq!(
        result.unschedulable,
        vec![(1, "nodepool default limit cpu exceeded".to_owned())]
    );
}

#[test]
fn limits_keep_a_claim_to_types_no_larger_than_its_pods_need() {
    let mut p = pool("default");
    p.limits = Some(ResourceLimits::default().with("cpu", 16_000));
    p.remaining = Some(ResourceLimits::default().with("cpu", 4000));
    let result = solve(&input(vec![pod("a", 500, GI)], vec![p.clone()]));
    // c2, a4 and c4 fit under the limit too, but the claim would then hold 4 CPUs of it.
    assert_eq!(result.new_claims[0].instance_type_options, vec!["c1"]);
    // A 1.5-CPU pod needs 2 CPUs: the types of that size (none other here) are listed.
    let result = solve(&input(vec![pod("b", 1500, GI)], vec![p.clone()]));
    assert_eq!(result.new_claims[0].instance_type_options, vec!["c2"]);
    // Without limits every fitting type is listed.
    p.remaining = None;
    let result = solve(&input(vec![pod("a", 500, GI)], vec![p]));
    assert_eq!(
        result.new_claims[0].instance_type_options,
        vec!["c1", "c2", "a4", "c4", "c8", "c16"]
    );
}

#[test]
fn limits_let_a_claim_grow_while_room_is_left_then_open_smaller_ones() {
    let mut p = pool("default");
    p.limits = Some(ResourceLimits::default().with("cpu", 6000));
    p.remaining = p.limits.clone();
    // Three 1.5-CPU pods: the first claim grows to 4 CPUs (two pods), the third pod gets a
    // 2-CPU claim; 6 CPUs in all. A fourth pod finds no room.
    let pods = (0..4).map(|i| pod(&format!("p{i}"), 1500, GI)).collect();
    let result = solve(&input(pods, vec![p]));
    let options: Vec<&[String]> = result
        .new_claims
        .iter()
        .map(|c| c.instance_type_options.as_slice())
        .collect();
    assert_eq!(options, vec![&["a4", "c4"][..], &["c2"][..]]);
    assert_eq!(
        result.unschedulable,
        vec![(3, "nodepool default limit cpu exceeded".to_owned())]
    );
    assert_eq!(result.limits_reached.len(), 1);
    assert_eq!(result.limits_reached[0].left, 0);
    assert_eq!(result.limits_reached[0].pods, vec![3]);
}

#[test]
fn limits_with_min_values_pay_for_larger_types_from_what_is_left() {
    let mut p = pool("default");
    p.requirements
        .add(Requirement::exists(INSTANCE_TYPE).with_min_values(Some(2)));
    p.limits = Some(ResourceLimits::default().with("cpu", 6000));
    p.remaining = p.limits.clone();
    // A 0.5-CPU pod: c1 alone would not meet minValues 2, so the claim lists c1 and c2 and
    // holds 2 CPUs; the next claim has 4 left.
    let result = solve(&input(vec![pod("a", 500, GI)], vec![p.clone()]));
    assert_eq!(result.new_claims[0].instance_type_options, vec!["c1", "c2"]);
    // With 3 CPUs and two pods that may not share a node, both claims hold c1 while solving;
    // the first then takes c2 too (2 CPUs), and the 1 CPU left cannot pay for the second's.
    p.remaining = Some(ResourceLimits::default().with("cpu", 3000));
    let apart = |name: &str| {
        let mut pod = pod(name, 500, GI).label("app", "apart");
        pod.pod_anti_affinity = vec![affinity_term(HOSTNAME, &[("app", "apart")])];
        pod
    };
    let result = solve(&input(vec![apart("a"), apart("b")], vec![p.clone()]));
    assert_eq!(result.new_claims.len(), 1);
    assert_eq!(result.new_claims[0].instance_type_options, vec!["c1", "c2"]);
    assert_eq!(
        result.unschedulable,
        vec![(
            1,
            "nodepool default limit leaves too few instance types for minValues".to_owned()
        )]
    );
    // When what is left cannot pay for a second type, the claim is not made.
    p.remaining = Some(ResourceLimits::default().with("cpu", 1000));
    let result = solve(&input(vec![pod("a", 500, GI)], vec![p]));
    assert!(result.new_claims.is_empty());
    assert!(
        result.unschedulable[0].1.contains("minValues 2"),
        "{:?}",
        result.unschedulable
    );
}

#[test]
fn csi_attach_limits_keep_further_volumes_of_a_driver_off_a_full_node() {
    let volume = |claim: &str| CsiVolume {
        driver: "ebs.csi.example.com".to_owned(),
        claim: format!("default/{claim}"),
    };
    let mut running = pod("running", 100, GI);
    running.csi_volumes = vec![volume("data-0")];
    let node = ExistingNode {
        name: "node-1".into(),
        labels: BTreeMap::from([(HOSTNAME.to_owned(), "node-1".to_owned())]),
        allocatable: Resources::new(8000, 16 * GI, 100),
        used: Resources::new(100, GI, 1),
        pods: vec![std::sync::Arc::new(running)],
        initialized: true,
        volume_limits: BTreeMap::from([("ebs.csi.example.com".to_owned(), 1)]),
        ..ExistingNode::default()
    };
    let mut second = pod("second", 100, GI);
    second.csi_volumes = vec![volume("data-1")];
    // The same claim as the running pod's: attached once, it counts once.
    let mut sharing = pod("sharing", 100, GI);
    sharing.csi_volumes = vec![volume("data-0")];
    let mut other_driver = pod("other", 100, GI);
    other_driver.csi_volumes = vec![CsiVolume {
        driver: "nfs.example.com".to_owned(),
        claim: "default/shared".to_owned(),
    }];
    let inp = SchedulingInput {
        pods: vec![second, sharing, other_driver],
        node_pools: vec![pool("default")],
        existing_nodes: vec![node],
        ..SchedulingInput::default()
    };
    let result = solve(&inp);
    assert_eq!(
        result.existing_placements,
        vec![
            (1, Target::Node("node-1".into())),
            (2, Target::Node("node-1".into())),
        ]
    );
    assert_eq!(result.new_claims.len(), 1);
    assert_eq!(result.new_claims[0].pods, vec![0]);
    // On the new claim no limit is known: a second volume of the driver joins it.
    let mut third = pod("third", 100, GI);
    third.csi_volumes = vec![volume("data-2")];
    let mut inp = inp;
    inp.pods.push(third);
    let result = solve(&inp);
    assert_eq!(result.new_claims.len(), 1);
    assert_eq!(result.new_claims[0].pods, vec![0, 3]);
}

/// Karpenter v1.15's `VolumeAttachmentLimits`: a new claim's types are narrowed to those whose
/// limit takes its pods' volumes (a type without a limit takes any number); more than every type
/// takes opens another claim, and a pod no type takes alone is unschedulable, saying why.
#[test]
fn instance_type_attach_limits_narrow_and_split_new_claims() {
    let driver = "ebs.csi.example.com";
    let volume = |claim: &str| CsiVolume {
        driver: driver.to_owned(),
        claim: format!("default/{claim}"),
    };
    let with_volumes = |name: &str, claims: &[&str]| {
        let mut p = pod(name, 100, GI);
        p.csi_volumes = claims.iter().map(|c| volume(c)).collect();
        p
    };
    let limited = |limits: &[(&str, i64)]| {
        let types: Vec<InstanceType> = catalog()
            .iter()
            .map(|t| {
                let mut t = t.clone();
                if let Some((_, limit)) = limits.iter().find(|(n, _)| *n == t.name) {
                    t.volume_limits = BTreeMap::from([(driver.to_owned(), *limit)]);
                }
                t
            })
            .collect();
        NodePoolView::new("default", types.into())
    };
    // Every type takes two volumes, the 16-CPU one three.
    let two_each = limited(&[
        ("c1", 2),
        ("c2", 2),
        ("c4", 2),
        ("c8", 2),
        ("a4", 2),
        ("c16", 3),
    ]);
    let result = solve(&input(
        vec![
            with_volumes("a", &["d-1"]),
            with_volumes("b", &["d-2"]),
            with_volumes("c", &["d-3"]),
        ],
        vec![two_each.clone()],
    ));
    assert!(
        result.unschedulable.is_empty(),
        "{:?}",
        result.unschedulable
    );
    let mut options: Vec<Vec<String>> = result
        .new_claims
        .iter()
        .map(|c| c.instance_type_options.clone())
        .collect();
    options.sort();
    // Three volumes on one claim: only c16 takes them.
    assert_eq!(
        options,
        vec![vec!["c16".to_owned()]],
        "{:?}",
        result.new_claims
    );
    // Four: two claims.
    let result = solve(&input(
        vec![
            with_volumes("a", &["d-1"]),
            with_volumes("b", &["d-2"]),
            with_volumes("c", &["d-3"]),
            with_volumes("d", &["d-4"]),
        ],
        vec![two_each.clone()],
    ));
    assert_eq!(result.new_claims.len(), 2, "{:?}", result.new_claims);
    assert!(result.unschedulable.is_empty());
    // A pod with more volumes than any type takes.
    let result = solve(&input(
        vec![with_volumes("many", &["d-1", "d-2", "d-3", "d-4"])],
        vec![two_each],
    ));
    assert!(result.new_claims.is_empty());
    assert!(
        result.unschedulable[0]
            .1
            .contains("volume limit of ebs.csi.example.com (3)"),
        "{:?}",
        result.unschedulable
    );
    // A type without a limit takes any number.
    let one_unlimited = limited(&[("c1", 1), ("c2", 1), ("c4", 1), ("c8", 1), ("a4", 1)]);
    let result = solve(&input(
        vec![with_volumes("many", &["d-1", "d-2", "d-3", "d-4"])],
        vec![one_unlimited],
    ));
    assert_eq!(result.new_claims.len(), 1);
    assert_eq!(result.new_claims[0].instance_type_options, vec!["c16"]);
}

#[test]
fn heavier_pools_are_tried_first() {
    let mut expensive = NodePoolView::new(
        "expensive",
        Arc::from(vec![instance_type("x4", 4, 8, 40, "amd64", 9.0)]),
    );
    expensive.weight = 10;
    let result = solve(&input(
        vec![pod("a", 500, GI)],
        vec![pool("cheap"), expensive.clone()],
    ));
    assert_eq!(result.new_claims[0].node_pool, "expensive");
    // When the heavier pool cannot take the pod, the next one does.
    let result = solve(&input(
        vec![pod("a", 6000, GI)],
        vec![pool("cheap"), expensive],
    ));
    assert_eq!(result.new_claims[0].node_pool, "cheap");
    assert_eq!(result.new_claims[0].cheapest_offering.instance_type, "c8");
}

#[test]
fn unschedulable_reason_names_requests_and_largest_type() {
    let result = solve(&input(
        vec![pod("huge", 64_000, 1 << 40)],
        vec![pool("default")],
    ));
    let (p, reason) = &result.unschedulable[0];
    assert_eq!(*p, 0);
    assert_eq!(
        reason,
        "no instance type satisfies cpu=64, memory=1Ti with nodepool default \
         (largest: c16 with allocatable cpu=16, memory=32Gi, pods=160)"
    );
}

#[test]
fn zonal_spread_balances_within_max_skew() {
    let pods = (0..9)
        .map(|i| {
            let mut p = pod(&format!("p{i}"), 1000, GI).label("app", "web");
            p.topology_spread.push(spread(ZONE, &[("app", "web")]));
            p
        })
        .collect();
    let result = solve(&input(pods, vec![pool("default")]));
    assert!(
        result.unschedulable.is_empty(),
        "{:?}",
        result.unschedulable
    );
    let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
    for claim in &result.new_claims {
        *per_zone.entry(zone_of(claim)).or_default() += claim.pods.len();
    }
    assert_eq!(
        per_zone,
        BTreeMap::from([("zone-1", 3), ("zone-2", 3), ("zone-3", 3)])
    );
}

#[test]
fn zonal_spread_respects_a_pool_restricted_to_two_zones() {
    let mut p = pool("default");
    p.requirements
        .add(Requirement::in_(ZONE, ["zone-1", "zone-2"]));
    let pods = (0..4)
        .map(|i| {
            let mut p = pod(&format!("p{i}"), 1000, GI).label("app", "web");
            p.topology_spread.push(spread(ZONE, &[("app", "web")]));
            p
        })
        .collect();
    let result = solve(&input(pods, vec![p]));
    let zones: Vec<&str> = result.new_claims.iter().map(zone_of).collect();
    assert_eq!(zones, vec!["zone-1", "zone-2"]);
    assert!(result.new_claims.iter().all(|c| c.pods.len() == 2));
}

#[test]
fn hostname_spread_puts_pods_on_separate_nodes() {
    let pods = (0..4)
        .map(|i| {
            let mut p = pod(&format!("p{i}"), 100, GI).label("app", "web");
            p.topology_spread.push(spread(HOSTNAME, &[("app", "web")]));
            p
        })
        .collect();
    let result = solve(&input(pods, vec![pool("default")]));
    assert_eq!(result.new_claims.len(), 4);
    assert!(result.new_claims.iter().all(|c| c.pods.len() == 1));
    assert!(
        result
            .new_claims
            .iter()
            .all(|c| c.cheapest_offering.instance_type == "c1")
    );
}

#[test]
fn hostname_anti_affinity_separates_and_others_still_pack() {
    let mut pods: Vec<Pod> = (0..3)
        .map(|i| {
            let mut p = pod(&format!("web{i}"), 500, GI).label("app", "web");
            p.pod_anti_affinity
                .push(affinity_term(HOSTNAME, &[("app", "web")]));
            p
        })
        .collect();
    pods.push(pod("other", 100, 1 << 20));
    let result = solve(&input(pods, vec![pool("default")]));
    assert_eq!(result.new_claims.len(), 3);
    let webs: Vec<usize> = result
        .new_claims
        .iter()
        .map(|c| c.pods.iter().filter(|&&p| p < 3).count())
        .collect();
    assert_eq!(webs, vec![1, 1, 1]);
    assert_eq!(
        result
            .new_claims
            .iter()
            .map(|c| c.pods.len())
            .sum::<usize>(),
        4
    );
}

#[test]
fn anti_affinity_of_running_pods_repels_matching_pods() {
    let mut guard = pod("guard", 100, GI);
    guard
        .pod_anti_affinity
        .push(affinity_term(HOSTNAME, &[("app", "web")]));
    let node = ExistingNode {
        name: "node-1".into(),
        labels: BTreeMap::from([
            (HOSTNAME.to_owned(), "node-1".to_owned()),
            (ZONE.to_owned(), "zone-1".to_owned()),
        ]),
        allocatable: Resources::new(8000, 16 * GI, 100),
        used: Resources::new(100, GI, 1),
        pods: vec![std::sync::Arc::new(guard)],
        initialized: true,
        ..ExistingNode::default()
    };
    let inp = SchedulingInput {
        pods: vec![
            pod("web", 100, GI).label("app", "web"),
            pod("db", 100, GI).label("app", "db"),
        ],
        node_pools: vec![pool("default")],
        existing_nodes: vec![node],
        ..SchedulingInput::default()
    };
    second_on_node_first_on_a_new_claim(&inp);
}

#[test]
fn zonal_self_affinity_co_locates() {
    // Each pod needs its own 16 CPU node, yet all must share a zone.
    let pods = (0..4)
        .map(|i| {
            let mut p = pod(&format!("p{i}"), 10_000, GI).label("app", "db");
            p.pod_affinity.push(affinity_term(ZONE, &[("app", "db")]));
            p
        })
        .collect();
    let result = solve(&input(pods, vec![pool("default")]));
    assert!(
        result.unschedulable.is_empty(),
        "{:?}",
        result.unschedulable
    );
    assert_eq!(result.new_claims.len(), 4);
    assert!(
        result.new_claims.iter().all(|c| zone_of(c) == "zone-1"),
        "{:?}",
        result.new_claims
    );
}

#[test]
fn affinity_to_a_pod_placed_later_resolves_on_retry() {
    // The follower sorts first (bigger) but can only go where the leader is.
    let mut follower = pod("follower", 2000, GI);
    follower
        .pod_affinity
        .push(affinity_term(HOSTNAME, &[("app", "leader")]));
    let leader = pod("leader", 500, GI).label("app", "leader");
    let result = solve(&input(vec![follower, leader], vec![pool("default")]));
    assert!(
        result.unschedulable.is_empty(),
        "{:?}",
        result.unschedulable
    );
    assert_eq!(result.new_claims.len(), 1);
    assert_eq!(result.new_claims[0].pods, vec![1, 0]);
}

#[test]
fn unsatisfiable_affinity_is_reported() {
    let mut lonely = pod("lonely", 500, GI);
    lonely
        .pod_affinity
        .push(affinity_term(HOSTNAME, &[("app", "ghost")]));
    let result = solve(&input(vec![lonely], vec![pool("default")]));
    assert_eq!(result.unschedulable.len(), 1);
    assert!(
        result.unschedulable[0]
            .1
            .contains("pod affinity on kubernetes.io/hostname"),
        "{}",
        result.unschedulable[0].1
    );
}

#[test]
fn preferred_node_affinity_is_honoured_when_possible_and_relaxed_when_not() {
    let mut p = pod("p", 500, GI);
    p.preferred_node_affinity.push(PreferredTerm {
        weight: 10,
        requirements: Requirements::new().with(Requirement::in_(ZONE, ["zone-2"])),
    });
    let result = solve(&input(vec![p], vec![pool("default")]));
    assert_eq!(zone_of(&result.new_claims[0]), "zone-2");

    let mut p = pod("p", 500, GI);
    p.preferred_node_affinity.push(PreferredTerm {
        weight: 10,
        requirements: Requirements::new().with(Requirement::in_(ARCH, ["s390x"])),
    });
    let result = solve(&input(vec![p], vec![pool("default")]));
    assert!(
        result.unschedulable.is_empty(),
        "{:?}",
        result.unschedulable
    );
    assert_eq!(result.new_claims[0].cheapest_offering.instance_type, "c1");
}

#[test]
fn preferred_pod_anti_affinity_is_relaxed_when_impossible() {
    // Only one node may exist (nodes limit), so the second web pod gives up its preference.
    let mut p = pool("default");
    p.remaining = Some(ResourceLimits::default().with("nodes", 1));
    let pods = (0..2)
        .map(|i| {
            let mut p = pod(&format!("web{i}"), 500, GI).label("app", "web");
            p.preferred_pod_anti_affinity.push(WeightedPodAffinityTerm {
                weight: 100,
                term: affinity_term(HOSTNAME, &[("app", "web")]),
            });
            p
        })
        .collect();
    let result = solve(&input(pods, vec![p]));
    assert!(
        result.unschedulable.is_empty(),
        "{:?}",
        result.unschedulable
    );
    assert_eq!(result.new_claims.len(), 1);
    assert_eq!(result.new_claims[0].pods.len(), 2);
}

#[test]
fn schedule_anyway_spread_is_relaxed() {
    let mut p = pool("default");
    p.remaining = Some(ResourceLimits::default().with("nodes", 1));
    let pods = (0..2)
        .map(|i| {
            let mut p = pod(&format!("p{i}"), 500, GI).label("app", "web");
            let mut c = spread(HOSTNAME, &[("app", "web")]);
            c.when_unsatisfiable = WhenUnsatisfiable::ScheduleAnyway;
            p.topology_spread.push(c);
            p
        })
        .collect();
    let result = solve(&input(pods, vec![p]));
    assert!(
        result.unschedulable.is_empty(),
        "{:?}",
        result.unschedulable
    );
    assert_eq!(result.new_claims[0].pods.len(), 2);
}

#[test]
fn existing_capacity_is_used_first() {
    let node = ExistingNode {
        name: "node-1".into(),
        labels: BTreeMap::from([(HOSTNAME.to_owned(), "node-1".to_owned())]),
        allocatable: Resources::new(2000, 4 * GI, 10),
        used: Resources::new(500, GI, 2),
        initialized: true,
        ..ExistingNode::default()
    };
    let claim = InflightClaim {
        name: "claim-1".into(),
        requirements: Requirements::new().with(Requirement::in_(ARCH, ["amd64"])),
        allocatable: Resources::new(4000, 8 * GI, 40),
        ..InflightClaim::default()
    };
    let pods = vec![
        pod("a", 1000, GI),
        pod("b", 1000, GI),
        pod("c", 3000, GI),
        pod("d", 3000, GI),
    ];
    let inp = SchedulingInput {
        pods,
        node_pools: vec![pool("default")],
        existing_nodes: vec![node],
        inflight_claims: vec![claim],
        ..SchedulingInput::default()
    };
    let result = solve(&inp);
    // c (3 CPU) does not fit node-1 (1.5 free) and goes to claim-1; a fits node-1 (0.5 left);
    // b then goes to claim-1 (1 left); d needs a new claim.
    assert_eq!(
        result.existing_placements,
        vec![
            (2, Target::Claim("claim-1".into())),
            (0, Target::Node("node-1".into())),
            (1, Target::Claim("claim-1".into())),
        ]
    );
    assert_eq!(result.new_claims.len(), 1);
    assert_eq!(result.new_claims[0].pods, vec![3]);
}

#[test]
fn existing_nodes_only_take_pods_whose_requirements_their_labels_meet() {
    let node = ExistingNode {
        name: "node-1".into(),
        labels: BTreeMap::from([(ARCH.to_owned(), "amd64".to_owned())]),
        allocatable: Resources::new(8000, 16 * GI, 10),
        initialized: true,
        ..ExistingNode::default()
    };
    let inp = SchedulingInput {
        pods: vec![
            pod("arm", 100, GI).node_selector(ARCH, "arm64"),
            pod("zonal", 100, GI).node_selector(ZONE, "zone-1"),
        ],
        node_pools: vec![pool("default")],
        existing_nodes: vec![node],
        ..SchedulingInput::default()
    };
    let result = solve(&inp);
    assert!(
        result.existing_placements.is_empty(),
        "{:?}",
        result.existing_placements
    );
    // Both fit one new claim: arm64 in zone-1.
    let [claim] = result.new_claims.as_slice() else {
        panic!("{:?}", result.new_claims)
    };
    assert_eq!(claim.instance_type_options, vec!["a4"]);
    assert_eq!(zone_of(claim), "zone-1");
}

#[test]
fn best_effort_min_values_opens_the_claim_with_what_is_left() {
    let mut p = pool("default");
    p.requirements
        .add(Requirement::exists(INSTANCE_TYPE).with_min_values(Some(3)));
    // Only c8 and c16 fit 6 CPU: Strict refuses (min_values_keeps_enough_instance_types),
    // BestEffort opens the claim on the two and records minValues 2.
    let mut inp = input(vec![pod("big", 6000, GI)], vec![p]);
    inp.options.min_values_policy = MinValuesPolicy::BestEffort;
    let result = solve(&inp);
    assert!(
        result.unschedulable.is_empty(),
        "{:?}",
        result.unschedulable
    );
    let claim = &result.new_claims[0];
    assert_eq!(claim.instance_type_options, vec!["c8", "c16"]);
    assert_eq!(
        claim
            .requirements
            .get(INSTANCE_TYPE)
            .and_then(Requirement::min_values),
        Some(2)
    );
    // A claim that meets minValues keeps it under BestEffort too.
    let mut p = pool("default");
    p.requirements
        .add(Requirement::exists(INSTANCE_TYPE).with_min_values(Some(3)));
    let mut inp = input(vec![pod("a", 500, GI)], vec![p]);
    inp.options.min_values_policy = MinValuesPolicy::BestEffort;
    let claim = &solve(&inp).new_claims[0];
    assert_eq!(
        claim
            .requirements
            .get(INSTANCE_TYPE)
            .and_then(Requirement::min_values),
        Some(3)
    );
}

#[test]
fn ignore_preference_policy_drops_preferences_from_the_simulation() {
    // Respect honours the preferred zone; Ignore places the pod as if it had no preference
    // (the cheapest offering's zone, zone-1), and drops a ScheduleAnyway spread with it.
    let mut p = pod("p", 500, GI);
    p.preferred_node_affinity.push(PreferredTerm {
        weight: 10,
        requirements: Requirements::new().with(Requirement::in_(ZONE, ["zone-2"])),
    });
    let respect = solve(&input(vec![p.clone()], vec![pool("default")]));
    assert_eq!(zone_of(&respect.new_claims[0]), "zone-2");
    let mut inp = input(vec![p], vec![pool("default")]);
    inp.options.preference_policy = PreferencePolicy::Ignore;
    let ignore = solve(&inp);
    assert_ne!(zone_of(&ignore.new_claims[0]), "zone-2");

    let mut p = pod("p", 500, GI);
    p.topology_spread.push(TopologySpreadConstraint {
        when_unsatisfiable: WhenUnsatisfiable::ScheduleAnyway,
        ..spread(ZONE, &[("app", "web")])
    });
    assert!(policy::has_preferences(&p));
    policy::drop_preferences(&mut p);
    assert!(!policy::has_preferences(&p));
    assert!(p.topology_spread.is_empty());
}

#[test]
fn min_values_keeps_enough_instance_types() {
    let mut p = pool("default");
    p.requirements
        .add(Requirement::exists(INSTANCE_TYPE).with_min_values(Some(3)));
    let mut inp = input(vec![pod("a", 500, GI)], vec![p.clone()]);
    inp.options.max_instance_types = 1;
    let claim = &solve(&inp).new_claims[0];
    assert_eq!(
        claim.instance_type_options,
        vec!["c1", "c2", "a4"],
        "extended past N for minValues"
    );
    assert_eq!(
        claim
            .requirements
            .get(INSTANCE_TYPE)
            .and_then(Requirement::min_values),
        Some(3)
    );

    // A pod that leaves only two types (>= 8 CPU) cannot honour minValues 3.
    let result = solve(&input(vec![pod("big", 6000, GI)], vec![p]));
    assert_eq!(result.new_claims.len(), 0);
    assert!(
        result.unschedulable[0]
            .1
            .contains("minValues 3 for node.kubernetes.io/instance-type not met"),
        "{}",
        result.unschedulable[0].1
    );
}

#[test]
fn zones_without_offerings_are_excluded() {
    let mut types = catalog().to_vec();
    for it in &mut types {
        for o in &mut it.offerings {
            o.available = o.zone != "zone-3";
        }
    }
    let pods = vec![pod("p", 500, GI).node_selector(ZONE, "zone-3")];
    let result = solve(&input(
        pods,
        vec![NodePoolView::new("default", types.into())],
    ));
    assert!(result.new_claims.is_empty());
    assert!(
        result.unschedulable[0].1.contains("available offering"),
        "{}",
        result.unschedulable[0].1
    );
}

#[test]
fn solving_is_deterministic() {
    let pods: Vec<Pod> = (0..60)
        .map(|i| {
            let mut p = pod(
                &format!("p{i}"),
                100 + (i % 7) * 250,
                (1 + i % 5) * (256 << 20),
            )
            .label("app", ["a", "b", "c"][i as usize % 3]);
            match i % 4 {
                0 => p.topology_spread.push(spread(ZONE, &[("app", "a")])),
                1 => p
                    .pod_anti_affinity
                    .push(affinity_term(HOSTNAME, &[("app", "b")])),
                2 => p.pod_affinity.push(affinity_term(ZONE, &[("app", "c")])),
                _ => {}
            }
            p
        })
        .collect();
    let inp = input(pods, vec![pool("default")]);
    let first = solve(&inp);
    assert_eq!(first, solve(&inp));
    let placed: usize = first.new_claims.iter().map(|c| c.pods.len()).sum();
    assert_eq!(placed + first.unschedulable.len(), 60);
}

#[test]
fn zonal_spread_counts_pods_already_running() {
    let running: Vec<Pod> = (0..2)
        .map(|i| pod(&format!("old{i}"), 100, GI).label("app", "web"))
        .collect();
    let node = ExistingNode {
        name: "node-1".into(),
        labels: BTreeMap::from([
            (HOSTNAME.to_owned(), "node-1".to_owned()),
            (ZONE.to_owned(), "zone-1".to_owned()),
        ]),
        // Full: new pods cannot land here, but its pods count for the spread.
        allocatable: Resources::new(200, 2 * GI, 2),
        used: Resources::new(200, 2 * GI, 2),
        pods: running.into_iter().map(std::sync::Arc::new).collect(),
        initialized: true,
        ..ExistingNode::default()
    };
    let pods = (0..4)
        .map(|i| {
            let mut p = pod(&format!("p{i}"), 1000, GI).label("app", "web");
            p.topology_spread.push(spread(ZONE, &[("app", "web")]));
            p
        })
        .collect();
    let inp = SchedulingInput {
        pods,
        node_pools: vec![pool("default")],
        existing_nodes: vec![node],
        ..SchedulingInput::default()
    };
    let result = solve(&inp);
    assert!(
        result.unschedulable.is_empty(),
        "{:?}",
        result.unschedulable
    );
    let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
    for claim in &result.new_claims {
        *per_zone.entry(zone_of(claim)).or_default() += claim.pods.len();
    }
    // zone-1 already has 2: the 4 new pods even out zone-2 and zone-3 at 2 each.
    assert_eq!(per_zone, BTreeMap::from([("zone-2", 2), ("zone-3", 2)]));
}

#[test]
fn tainted_existing_node_is_skipped() {
    let node = ExistingNode {
        name: "node-1".into(),
        labels: BTreeMap::from([(HOSTNAME.to_owned(), "node-1".to_owned())]),
        taints: vec![Taint::new("dedicated", "db", TaintEffect::NoSchedule)],
        allocatable: Resources::new(8000, 16 * GI, 100),
        initialized: true,
        ..ExistingNode::default()
    };
    let inp = SchedulingInput {
        pods: vec![
            pod("plain", 100, GI),
            pod("db", 100, GI).tolerate(Toleration::exists("dedicated")),
        ],
        node_pools: vec![pool("default")],
        existing_nodes: vec![node],
        ..SchedulingInput::default()
    };
    second_on_node_first_on_a_new_claim(&inp);
}

#[test]
fn inflight_claims_reserve_room_for_daemonsets() {
    let claim = InflightClaim {
        name: "claim-1".into(),
        allocatable: Resources::new(2000, 4 * GI, 10),
        ..InflightClaim::default()
    };
    let inp = SchedulingInput {
        pods: vec![pod("a", 1500, GI)],
        node_pools: vec![pool("default")],
        inflight_claims: vec![claim],
        daemonset_pods: vec![pod("ds", 1000, GI)],
        ..SchedulingInput::default()
    };
    let result = solve(&inp);
    assert!(
        result.existing_placements.is_empty(),
        "the DaemonSet takes 1 of 2 CPU"
    );
    assert_eq!(result.new_claims.len(), 1);
}

#[test]
fn extended_resources_select_types_that_have_them() {
    let mut gpu = instance_type("g4", 4, 16, 40, "amd64", 2.0);
    gpu.capacity.set("nvidia.com/gpu", 1);
    let mut types = catalog().to_vec();
    types.push(gpu);
    let mut wants_gpu = pod("train", 1000, GI);
    wants_gpu.requests.set("nvidia.com/gpu", 1);
    let result = solve(&input(
        vec![wants_gpu, pod("web", 1000, GI)],
        vec![NodePoolView::new("default", types.into())],
    ));
    let gpu_claim = result
        .new_claims
        .iter()
        .find(|c| c.pods.contains(&0))
        .unwrap();
    assert_eq!(gpu_claim.instance_type_options, vec!["g4"]);
    assert_eq!(gpu_claim.requests.get("nvidia.com/gpu"), 1);
}

#[test]
fn every_pool_explains_its_refusal() {
    let mut gpu = pool("gpu");
    gpu.weight = 10;
    gpu.taints
        .push(Taint::new("dedicated", "gpu", TaintEffect::NoSchedule));
    let mut arm = pool("arm");
    arm.requirements.add(Requirement::in_(ARCH, ["arm64"]));
    let pods = vec![pod("x86", 500, GI).node_selector(ARCH, "amd64")];
    let result = solve(&input(pods, vec![arm, gpu]));
    assert_eq!(
        result.unschedulable,
        vec![(
            0,
            "incompatible with nodepool gpu: untolerated taint dedicated=gpu:NoSchedule; \
             incompatible with nodepool arm: requirement kubernetes.io/arch In [amd64] vs [arm64]"
                .to_owned()
        )]
    );
}

#[test]
fn pool_labels_and_nodepool_label_are_requirements() {
    let mut p = pool("default");
    p.labels.insert("team".into(), "a".into());
    let result = solve(&input(
        vec![
            pod("a", 100, GI).node_selector("team", "a"),
            pod("b", 100, GI).node_selector("team", "b"),
            pod("c", 100, GI).node_selector(crate::api::labels::NODEPOOL, "default"),
        ],
        vec![p],
    ));
    assert_eq!(result.unschedulable.len(), 1);
    assert_eq!(result.unschedulable[0].0, 1);
    let claim = &result.new_claims[0];
    assert_eq!(claim.pods, vec![0, 2]);
    assert_eq!(
        claim.requirements.set_of("team"),
        Some(&ValueSet::in_(["a"]))
    );
}

/// Solves `inp` and checks that pod 1 went to the existing `node-1` and pod 0 to one new claim.
fn second_on_node_first_on_a_new_claim(inp: &SchedulingInput) {
    let result = solve(inp);
    assert_eq!(
        result.existing_placements,
        vec![(1, Target::Node("node-1".into()))]
    );
    assert_eq!(result.new_claims.len(), 1);
    assert_eq!(result.new_claims[0].pods, vec![0]);
}

/// Two pods binding the same host port never share a node, whatever room there is; a third on
/// another port, or the same port over UDP, or on a distinct address, shares.
#[test]
fn host_ports_keep_conflicting_pods_apart() {
    let web = |name: &str| pod(name, 100, GI).host_port(8080);
    let mut udp = pod("udp", 100, GI);
    udp.host_ports.push(HostPort::new(8080, "UDP"));
    let mut other_ip = pod("other-ip", 100, GI);
    other_ip.host_ports.push(HostPort {
        host_ip: "10.0.0.2".into(),
        ..HostPort::new(9090, "TCP")
    });
    let mut same_ip = pod("same-ip", 100, GI);
    same_ip.host_ports.push(HostPort {
        host_ip: "10.0.0.3".into(),
        ..HostPort::new(9090, "TCP")
    });
    let pods = vec![web("a"), web("b"), web("c"), udp, other_ip, same_ip];
    let result = solve(&input(pods, vec![pool("default")]));
    assert!(
        result.unschedulable.is_empty(),
        "{:?}",
        result.unschedulable
    );
    assert_eq!(result.new_claims.len(), 3, "{:?}", result.new_claims);
    for claim in &result.new_claims {
        let tcp_8080 = claim.pods.iter().filter(|&&p| p < 3).count();
        assert_eq!(tcp_8080, 1, "one 8080/TCP pod per node: {claim:?}");
    }

    // A running pod's port counts on its node: the pending twin goes elsewhere.
    let node = ExistingNode {
        name: "node-1".into(),
        labels: BTreeMap::from([
            (HOSTNAME.to_owned(), "node-1".to_owned()),
            (ZONE.to_owned(), "zone-1".to_owned()),
        ]),
        allocatable: Resources::new(8000, 16 * GI, 100),
        used: Resources::new(100, GI, 1),
        pods: vec![std::sync::Arc::new(web("running"))],
        initialized: true,
        ..ExistingNode::default()
    };
    let inp = SchedulingInput {
        pods: vec![web("pending"), pod("plain", 100, GI)],
        node_pools: vec![pool("default")],
        existing_nodes: vec![node],
        ..SchedulingInput::default()
    };
    let result = solve(&inp);
    assert_eq!(result.new_claims.len(), 1);
    assert_eq!(
        result.new_claims[0].pods,
        vec![0],
        "the 8080 pod on a new node"
    );
    assert_eq!(
        result.existing_placements,
        vec![(1, Target::Node("node-1".into()))],
        "the plain pod on the node"
    );
}

#[test]
fn host_port_conflicts_follow_kube_scheduler() {
    let any = HostPort::new(80, "TCP");
    let on = |ip: &str| HostPort {
        host_ip: ip.into(),
        ..HostPort::new(80, "TCP")
    };
    assert!(any.conflicts(&on("10.0.0.1")), "every address covers one");
    assert!(on("10.0.0.1").conflicts(&any));
    assert!(on("10.0.0.1").conflicts(&on("10.0.0.1")));
    assert!(!on("10.0.0.1").conflicts(&on("10.0.0.2")));
    assert!(!any.conflicts(&HostPort::new(80, "UDP")));
    assert!(!any.conflicts(&HostPort::new(81, "TCP")));
}

/// arm64 pods spread over zones (max skew 1), served by a pool that leaves out zone-3, while
/// another pool's amd64 nodes are in zone-3: kube-scheduler counts only the zones the pods' node
/// affinity reaches, so every pod places, three per zone.
fn arm_spread_beside_an_amd64_zone(policy: NodeInclusionPolicy) -> SchedulingResult {
    let mut arm = pool("arm");
    arm.requirements.add(Requirement::not_in(ZONE, ["zone-3"]));
    arm.requirements.add(Requirement::in_(ARCH, ["arm64"]));
    let mut amd = pool("amd");
    amd.requirements.add(Requirement::in_(ZONE, ["zone-3"]));
    amd.requirements.add(Requirement::in_(ARCH, ["amd64"]));
    let node = ExistingNode {
        name: "amd-1".into(),
        node_pool: Some("amd".into()),
        labels: BTreeMap::from([
            (HOSTNAME.to_owned(), "amd-1".to_owned()),
            (ZONE.to_owned(), "zone-3".to_owned()),
            (ARCH.to_owned(), "amd64".to_owned()),
        ]),
        allocatable: Resources::new(1000, GI, 10),
        used: Resources::new(900, GI / 2, 1),
        initialized: true,
        ..ExistingNode::default()
    };
    let pods = (0..6)
        .map(|i| {
            let mut p = pod(&format!("web-{i}"), 1000, GI)
                .label("app", "web")
                .node_selector(ARCH, "arm64");
            let mut c = spread(ZONE, &[("app", "web")]);
            c.node_affinity_policy = policy;
            p.topology_spread.push(c);
            p
        })
        .collect();
    solve(&SchedulingInput {
        pods,
        node_pools: vec![arm, amd],
        existing_nodes: vec![node],
        ..SchedulingInput::default()
    })
}

fn pods_per_zone(result: &SchedulingResult) -> BTreeMap<String, usize> {
    let mut zones = BTreeMap::new();
    for claim in &result.new_claims {
        *zones.entry(zone_of(claim).to_owned()).or_default() += claim.pods.len();
    }
    zones
}

#[test]
fn spread_counts_only_the_zones_node_affinity_reaches() {
    let result = arm_spread_beside_an_amd64_zone(NodeInclusionPolicy::Honor);
    assert!(
        result.unschedulable.is_empty(),
        "{:?}",
        result.unschedulable
    );
    assert_eq!(
        pods_per_zone(&result),
        BTreeMap::from([("zone-1".to_owned(), 3), ("zone-2".to_owned(), 3)])
    );
    // `nodeAffinityPolicy: Ignore` counts zone-3 (empty for these pods): kube-scheduler would
    // hold them to one per reachable zone as well.
    let ignored = arm_spread_beside_an_amd64_zone(NodeInclusionPolicy::Ignore);
    assert_eq!(
        ignored.unschedulable.len(),
        4,
        "{:?}",
        ignored.unschedulable
    );
}

/// `nodeTaintsPolicy: Honor`: a zone only a pool with an untolerated taint reaches takes no part
/// in the skew; with the default (`Ignore`) it does, and holds the pods back.
#[test]
fn spread_with_taints_honored_skips_zones_behind_untolerated_taints() {
    let run = |policy: NodeInclusionPolicy| {
        let mut open = pool("open");
        open.requirements.add(Requirement::not_in(ZONE, ["zone-3"]));
        let mut tainted = pool("tainted");
        tainted.requirements.add(Requirement::in_(ZONE, ["zone-3"]));
        tainted
            .taints
            .push(Taint::new("dedicated", "gpu", TaintEffect::NoSchedule));
        let pods = (0..4)
            .map(|i| {
                let mut p = pod(&format!("web-{i}"), 1000, GI).label("app", "web");
                let mut c = spread(ZONE, &[("app", "web")]);
                c.node_taints_policy = policy;
                p.topology_spread.push(c);
                p
            })
            .collect();
        solve(&input(pods, vec![open, tainted]))
    };
    let honored = run(NodeInclusionPolicy::Honor);
    assert!(
        honored.unschedulable.is_empty(),
        "{:?}",
        honored.unschedulable
    );
    assert_eq!(
        pods_per_zone(&honored),
        BTreeMap::from([("zone-1".to_owned(), 2), ("zone-2".to_owned(), 2)])
    );
    let ignored = run(NodeInclusionPolicy::Ignore);
    assert_eq!(
        ignored.unschedulable.len(),
        2,
        "{:?}",
        ignored.unschedulable
    );
}

/// A pod whose volume lives in zone-2 gets a node in zone-2; with two alternatives (zone-3 or
/// zone-1) the first that can be met is taken.
#[test]
fn volume_topology_places_pods_where_their_volumes_are() {
    let mut db = pod("db", 1000, GI);
    db.volume_requirements = vec![Requirements::new().with(Requirement::in_(ZONE, ["zone-2"]))];
    let result = solve(&input(vec![db.clone()], vec![pool("default")]));
    assert_eq!(result.new_claims.len(), 1);
    assert_eq!(zone_of(&result.new_claims[0]), "zone-2");

    // zone-3 is not offered by this pool: the second alternative holds.
    let mut west = pool("west");
    west.requirements.add(Requirement::not_in(ZONE, ["zone-3"]));
    let mut either = pod("either", 1000, GI);
    either.volume_requirements = vec![
        Requirements::new().with(Requirement::in_(ZONE, ["zone-3"])),
        Requirements::new().with(Requirement::in_(ZONE, ["zone-1"])),
    ];
    let result = solve(&input(vec![either], vec![west]));
    assert!(
        result.unschedulable.is_empty(),
        "{:?}",
        result.unschedulable
    );
    assert_eq!(zone_of(&result.new_claims[0]), "zone-1");

    // Volume topology is not the pod's node affinity: spread still counts all three zones, so
    // a second spread pod pinned by its volume to zone-2 as well exceeds the skew and waits.
    let spread_db = |name: &str| {
        let mut p = db.clone().label("app", "db");
        p.name = name.to_owned();
        p.topology_spread.push(spread(ZONE, &[("app", "db")]));
        p
    };
    let result = solve(&input(
        vec![spread_db("db-0"), spread_db("db-1")],
        vec![pool("default")],
    ));
    assert_eq!(result.new_claims.len(), 1);
    assert_eq!(result.unschedulable.len(), 1, "{result:?}");
}

/// The catalog with c1 and c2 re-priced by a NodeOverlay to 0.9 and 0.95 (their providers still
/// list them at 0.1 and 0.2).
fn repriced_pool() -> NodePoolView {
    let mut types: Vec<InstanceType> = catalog().to_vec();
    for (name, price) in [("c1", 0.9), ("c2", 0.95)] {
        let it = types.iter_mut().find(|t| t.name == name).unwrap();
        for o in &mut it.offerings {
            o.listed_price = Some(o.price);
            o.price = price;
        }
    }
    NodePoolView::new("default", types.into())
}

#[test]
fn a_claim_leaves_out_the_types_its_provider_would_launch_before_the_overlaid_cheapest() {
    // The host's cheapest is a4 (0.3); the provider lists c1 and c2 below it and would launch
    // one of them, so they are left out. c4 (0.4) and up follow a4 by both prices.
    let result = solve(&input(vec![pod("a", 500, GI)], vec![repriced_pool()]));
    let claim = &result.new_claims[0];
    assert_eq!(claim.cheapest_offering.instance_type, "a4");
    assert_eq!(claim.instance_type_options, vec!["a4", "c4", "c8", "c16"]);
    assert_eq!(
        claim.requirements.set_of(INSTANCE_TYPE),
        Some(&ValueSet::in_(["a4", "c16", "c4", "c8"]))
    );

    // minValues still wins: five types are needed, so the cheapest left out (c1) comes back.
    let mut p = repriced_pool();
    p.requirements
        .add(Requirement::exists(INSTANCE_TYPE).with_min_values(Some(5)));
    let result = solve(&input(vec![pod("a", 500, GI)], vec![p]));
    let claim = &result.new_claims[0];
    assert_eq!(
        claim.instance_type_options,
        vec!["a4", "c4", "c8", "c16", "c1"]
    );
}
