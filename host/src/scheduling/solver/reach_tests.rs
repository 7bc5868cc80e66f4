//! Zone spread beside pools that cannot launch (issue 25, part 3): the zone only a pool at its
//! limits reaches is no domain of the skew, and comes back once the limits leave room.
//!
//! The pools are the issue's: `arm-spot-only` (weight 50; arm64, spot, not zone d, tainted),
//! `general` (weight 10; amd64) and `tiny-limit` (weight 100; `example.com/pool In [tiny]`,
//! `limits.cpu: 4`, no taint, no arch or zone requirement). Four zones, every type offered spot
//! and on-demand in each.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::labels::{ARCH, CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, ZONE};
use crate::scheduling::*;

const GI: i64 = 1 << 30;
const ZONES: [&str; 4] = ["test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d"];
const POOL_LABEL: &str = "example.com/pool";
const ARM_TAINT: &str = "example.com/arm";

fn instance_type(name: &str, cpu_millis: i64, arch: &str, price: f64) -> InstanceType {
    InstanceType {
        name: name.to_owned(),
        requirements: Requirements::new()
            .with(Requirement::in_(INSTANCE_TYPE, [name]))
            .with(Requirement::in_(ARCH, [arch]))
            .with(Requirement::in_(ZONE, ZONES))
            .with(Requirement::in_(CAPACITY_TYPE, ["spot", "on-demand"])),
        offerings: ZONES
            .iter()
            .flat_map(|z| {
                [
                    Offering::new(*z, "spot", price * 0.7),
                    Offering::new(*z, "on-demand", price),
                ]
            })
            .collect(),
        capacity: Resources::new(cpu_millis, 4 * cpu_millis / 1000 * GI, 110),
        overhead: Resources::default(),
        volume_limits: Default::default(),
        devices: Vec::new(),
    }
}

/// 4 CPU amd64 and arm64 types, and a half-CPU arm64 type no 1 CPU pod fits on.
fn types() -> Arc<[InstanceType]> {
    Arc::from(vec![
        instance_type("amd-4", 4000, "amd64", 0.4),
        instance_type("arm-4", 4000, "arm64", 0.3),
        instance_type("arm-half", 500, "arm64", 0.05),
    ])
}

/// The three pools; `tiny-limit` has `cpu_left` millicores of its 4 CPU limit left.
fn pools(cpu_left: i64) -> Vec<NodePoolView> {
    let mut arm = NodePoolView::new("arm-spot-only", types());
    arm.weight = 50;
    arm.requirements.add(Requirement::in_(ARCH, ["arm64"]));
    arm.requirements
        .add(Requirement::in_(CAPACITY_TYPE, ["spot"]));
    arm.requirements
        .add(Requirement::not_in(ZONE, ["test-zone-d"]));
    arm.taints
        .push(Taint::new(ARM_TAINT, "", TaintEffect::NoSchedule));
    let mut general = NodePoolView::new("general", types());
    general.weight = 10;
    general.requirements.add(Requirement::in_(ARCH, ["amd64"]));
    let mut tiny = NodePoolView::new("tiny-limit", types());
    tiny.weight = 100;
    tiny.requirements
        .add(Requirement::in_(POOL_LABEL, ["tiny"]));
    tiny.limits = Some(ResourceLimits::default().with("cpu", 4000));
    tiny.remaining = Some(ResourceLimits::default().with("cpu", cpu_left));
    vec![arm, general, tiny]
}

fn one_cpu(name: &str) -> Pod {
    Pod::new("default", name, Resources::new(1000, GI / 2, 0))
}

fn tiny_pod(i: usize) -> Pod {
    one_cpu(&format!("tiny-{i}"))
        .label("app", "tiny")
        .node_selector(POOL_LABEL, "tiny")
}

/// An arm64 pod tolerating the arm pool's taint.
fn arm_pod(name: &str, app: &str) -> Pod {
    one_cpu(name)
        .label("app", app)
        .node_selector(ARCH, "arm64")
        .tolerate(Toleration::exists(ARM_TAINT))
}

/// An arm64 pod spread over zones (`maxSkew: 1`, `DoNotSchedule`).
fn spread_pod(i: usize) -> Pod {
    let mut p = arm_pod(&format!("spread-{i}"), "spread");
    p.topology_spread.push(TopologySpreadConstraint {
        max_skew: 1,
        topology_key: ZONE.to_owned(),
        when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
        label_selector: Some(LabelSelector::labels([("app", "spread")])),
        min_domains: None,
        node_affinity_policy: NodeInclusionPolicy::Honor,
        node_taints_policy: NodeInclusionPolicy::Ignore,
    });
    p
}

/// A full node of `pool` in `zone` running `pods`.
fn node(name: &str, pool: &str, zone: &str, arch: &str, pods: Vec<Pod>) -> ExistingNode {
    let mut labels = BTreeMap::from([
        (HOSTNAME.to_owned(), name.to_owned()),
        (ZONE.to_owned(), zone.to_owned()),
        (ARCH.to_owned(), arch.to_owned()),
        ("karpenter.sh/nodepool".to_owned(), pool.to_owned()),
    ]);
    let mut taints = Vec::new();
    if pool == "arm-spot-only" {
        labels.insert(CAPACITY_TYPE.to_owned(), "spot".to_owned());
        taints.push(Taint::new(ARM_TAINT, "", TaintEffect::NoSchedule));
    }
    if pool == "tiny-limit" {
        labels.insert(POOL_LABEL.to_owned(), "tiny".to_owned());
    }
    let used = pods.iter().fold(Resources::default(), |mut r, p| {
        r.add(&p.requests);
        r
    });
    ExistingNode {
        name: name.to_owned(),
        node_pool: Some(pool.to_owned()),
        labels,
        taints,
        allocatable: used.clone(),
        used,
        pods: pods.into_iter().map(std::sync::Arc::new).collect(),
        initialized: true,
        ..ExistingNode::default()
    }
}

/// What the cluster holds once the first two steps are done: `tiny-limit`'s one node
/// (its 4 CPU limit spent) runs three tiny pods, and two full arm nodes run the six arm64 pods.
fn cluster() -> Vec<ExistingNode> {
    let arm = |from: usize| {
        (from..from + 3)
            .map(|i| arm_pod(&format!("arm-{i}"), "arm"))
            .collect()
    };
    vec![
        node(
            "tiny-1",
            "tiny-limit",
            "test-zone-a",
            "amd64",
            (0..3).map(tiny_pod).collect(),
        ),
        node("arm-1", "arm-spot-only", "test-zone-a", "arm64", arm(0)),
        node("arm-2", "arm-spot-only", "test-zone-b", "arm64", arm(3)),
    ]
}

/// Pods per zone over new claims and placements on existing nodes, for the pods `which` admits.
fn per_zone(
    inp: &SchedulingInput,
    result: &SchedulingResult,
    which: impl Fn(&Pod) -> bool,
) -> BTreeMap<String, usize> {
    let mut zones = BTreeMap::new();
    for claim in &result.new_claims {
        let zone = claim
            .requirements
            .set_of(ZONE)
            .and_then(ValueSet::single_value)
            .unwrap_or("<unset>");
        let n = claim.pods.iter().filter(|&&p| which(&inp.pods[p])).count();
        if n > 0 {
            *zones.entry(zone.to_owned()).or_default() += n;
        }
    }
    for (p, target) in &result.existing_placements {
        if !which(&inp.pods[*p]) {
            continue;
        }
        let Target::Node(name) = target else {
            panic!("no claims in flight here: {target:?}")
        };
        let node = inp.existing_nodes.iter().find(|n| &n.name == name).unwrap();
        *zones.entry(node.labels[ZONE].clone()).or_default() += 1;
    }
    zones
}

fn is_spread(p: &Pod) -> bool {
    p.labels.get("app").is_some_and(|a| a == "spread")
}

fn zones(counts: &[(&str, usize)]) -> BTreeMap<String, usize> {
    counts.iter().map(|(z, n)| ((*z).to_owned(), *n)).collect()
}

/// Solves `pods` with `node_pools` on the issue's [`cluster`]; returns the input with the result.
fn run(pods: Vec<Pod>, node_pools: Vec<NodePoolView>) -> (SchedulingInput, SchedulingResult) {
    let inp = SchedulingInput {
        pods,
        node_pools,
        existing_nodes: cluster(),
        ..SchedulingInput::default()
    };
    let result = solve(&inp);
    (inp, result)
}

/// Every pod placed, the spread pods two per zone a, b, c.
fn assert_two_per_zone_abc(pods: Vec<Pod>, node_pools: Vec<NodePoolView>) {
    let (inp, result) = run(pods, node_pools);
    assert!(result.unschedulable.is_empty(), "{result:?}");
    assert_eq!(
        per_zone(&inp, &result, is_spread),
        zones(&[("test-zone-a", 2), ("test-zone-b", 2), ("test-zone-c", 2)]),
    );
}

/// The issue, as it stood: three tiny pods wait for `tiny-limit`, six spread pods arrive. Zone d
/// is reachable only through `tiny-limit`, which can launch nothing: every spread pod places, two
/// per zone a, b and c, on `arm-spot-only`; only the tiny pods wait, for the limit.
#[test]
fn a_pool_at_its_limits_does_not_widen_the_zones_of_a_spread() {
    let mut pods: Vec<Pod> = (3..6).map(tiny_pod).collect();
    pods.extend((0..6).map(spread_pod));
    let (inp, result) = run(pods, pools(0));
    assert_eq!(
        per_zone(&inp, &result, is_spread),
        zones(&[("test-zone-a", 2), ("test-zone-b", 2), ("test-zone-c", 2)]),
        "{result:?}"
    );
    assert!(
        result
            .new_claims
            .iter()
            .filter(|c| c.pods.iter().any(|&p| is_spread(&inp.pods[p])))
            .all(|c| c.node_pool == "arm-spot-only"),
        "{result:?}"
    );
    let waiting: Vec<String> = result
        .unschedulable
        .iter()
        .map(|(p, why)| format!("{}: {why}", inp.pods[*p].name))
        .collect();
    assert_eq!(waiting.len(), 3, "{waiting:?}");
    assert!(
        waiting.iter().all(|w| w.starts_with("tiny-")
            && w.contains("nodepool tiny-limit limit cpu exceeded")),
        "{waiting:?}"
    );
}

/// Room left under the limit, but not for a type the pods fit on (only the half-CPU type fits
/// in what is left): zone d is still out of reach, and all six place.
#[test]
fn limits_that_leave_room_only_for_types_too_small_do_not_widen_either() {
    assert_two_per_zone_abc((0..6).map(spread_pod).collect(), pools(1000));
}

/// Six spread pods already run two per zone a, b, c on `arm-spot-only`; two more arrive. While
/// `tiny-limit` is at its limit they go to a, b or c (skew 3 - 2); once its limit is raised,
/// zone d is a domain again (count 0), so both new pods go there.
#[test]
fn the_zone_comes_back_when_the_limit_leaves_room_again() {
    let mut existing = cluster();
    for (i, zone) in ["test-zone-a", "test-zone-b", "test-zone-c"]
        .into_iter()
        .enumerate()
    {
        let running = (2 * i..2 * i + 2).map(spread_pod).collect();
        existing.push(node(
            &format!("spread-node-{i}"),
            "arm-spot-only",
            zone,
            "arm64",
            running,
        ));
    }
    let run = |cpu_left: i64| {
        let inp = SchedulingInput {
            pods: (6..8).map(spread_pod).collect(),
            node_pools: pools(cpu_left),
            existing_nodes: existing.clone(),
            ..SchedulingInput::default()
        };
        let result = solve(&inp);
        assert!(result.unschedulable.is_empty(), "{result:?}");
        per_zone(&inp, &result, is_spread)
    };
    let at_limit = run(0);
    assert_eq!(at_limit.values().sum::<usize>(), 2);
    assert!(!at_limit.contains_key("test-zone-d"), "{at_limit:?}");
    assert!(
        at_limit.values().all(|&n| n == 1),
        "one each in two of a, b, c: {at_limit:?}"
    );
    assert_eq!(run(8000), zones(&[("test-zone-d", 2)]));
}

/// With room under its limit, `tiny-limit` (the heaviest pool, no taint, any arch) reaches zone
/// d for arm64 pods: the spread uses all four zones (its limit runs out after four claims; the
/// claims it opened keep zone d a domain).
#[test]
fn a_pool_with_room_widens_the_zones_as_before() {
    let (inp, result) = run((0..6).map(spread_pod).collect(), pools(16_000));
    assert!(result.unschedulable.is_empty(), "{result:?}");
    let counts = per_zone(&inp, &result, is_spread);
    assert_eq!(counts.len(), 4, "{counts:?}");
    assert!(counts.values().all(|&n| (1..=2).contains(&n)), "{counts:?}");
}

/// A pool left out of provisioning (not Ready, or static: the snapshot never passes it to the
/// solver) reaches no zone either: the arm pool's three zones are the domains.
#[test]
fn a_pool_that_is_not_provisioning_reaches_no_zone() {
    let mut node_pools = pools(16_000);
    node_pools.retain(|p| p.name != "tiny-limit");
    assert_two_per_zone_abc((0..6).map(spread_pod).collect(), node_pools);
}

/// `tiny-limit` has room and reaches zone d, but the pods' own node affinity leaves zone d out:
/// it is no domain of theirs, and they place two per zone a, b, c.
#[test]
fn a_zone_the_pods_own_affinity_excludes_is_no_domain() {
    let pods = (0..6)
        .map(|i| spread_pod(i).require(Requirement::not_in(ZONE, ["test-zone-d"])))
        .collect();
    assert_two_per_zone_abc(pods, pools(16_000));
}

/// A spread that ignores node affinity (`nodeAffinityPolicy: Ignore`) counts every zone a node
/// can be in: `general` launches amd64 nodes in zone d, so zone d holds the skew down, as in
/// kube-scheduler; but a zone only a pool at its limits reaches is still no domain.
#[test]
fn a_spread_that_ignores_affinity_still_skips_pools_at_their_limits() {
    let ignoring = || {
        (0..6)
            .map(|i| {
                let mut p = spread_pod(i);
                p.topology_spread[0].node_affinity_policy = NodeInclusionPolicy::Ignore;
                p
            })
            .collect::<Vec<_>>()
    };
    let mut arm_only = pools(0);
    arm_only.retain(|p| p.name != "general");
    assert_two_per_zone_abc(ignoring(), arm_only);
    let (_, result) = run(ignoring(), pools(0));
    assert_eq!(result.unschedulable.len(), 3, "{result:?}");
}
