//! A constraint validator for [`super::solve`]'s output, run on Karpenter's `BenchmarkScheduling`
//! inputs (`makeDiversePods` over `fake.InstanceTypes(400)`, as in
//! `host/benches/scheduling.rs`). It re-checks every placed pod independently of the solver:
//!
//! - resources: the pods' requests (each counting `pods: 1`) plus the DaemonSet overhead the
//!   claim reports fit the allocatable of every listed instance-type option;
//! - node selector and required node affinity against the claim's requirements, and every
//!   option's requirements against the claim's;
//! - required pod anti-affinity: no pod shares a domain with a pod its term selects (either way);
//! - required pod affinity: some pod in the same domain matches the term (itself included, as the
//!   first pod of a self-selecting group may);
//! - hostname spread, in each claim's placement order: when a pod with `maxSkew` k lands, at most
//!   k−1 selected pods are already on the claim (a new node is always an empty hostname domain,
//!   so Karpenter's global minimum is 0);
//! - zone spread: the pod's claim is pinned to one zone and, over the eligible zones (those the
//!   pool's instance types offer; selected pods counted on zone-pinned claims only, as Karpenter
//!   records them), its zone's final count exceeds the minimum by at most `maxSkew` plus the
//!   selected pods there that do not carry the constraint (and so may have joined after it).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::*;

#[path = "../../benches/support/karpenter_inputs.rs"]
mod karpenter_inputs;
use karpenter_inputs::{
    HOSTNAME, Kind, ZONE, ZONES, diverse_pods, diverse_pods_v1_15, fingerprint, instance_types,
};

/// The bench's previous port: six kinds (an extra hostname pod affinity), independent selectors.
fn diverse_pods_six_kinds(count: usize) -> Vec<Pod> {
    diverse_pods(
        count,
        &[
            Kind::Generic,
            Kind::Spread(ZONE),
            Kind::Spread(HOSTNAME),
            Kind::Affinity(HOSTNAME),
            Kind::Affinity(ZONE),
            Kind::AntiAffinity(HOSTNAME),
        ],
        false,
    )
}

fn bench_input(pods: Vec<Pod>) -> SchedulingInput {
    SchedulingInput {
        pods,
        node_pools: vec![NodePoolView::new("default", instance_types(400))],
        ..SchedulingInput::default()
    }
}

fn namespace_ok(term: &PodAffinityTerm, owner: &Pod, other: &Pod) -> bool {
    match &term.namespaces {
        Namespaces::Own => owner.namespace == other.namespace,
        Namespaces::Listed(ns) => ns.contains(&other.namespace),
        Namespaces::All => true,
    }
}

fn selects(term: &PodAffinityTerm, owner: &Pod, other: &Pod) -> bool {
    namespace_ok(term, owner, other)
        && term
            .label_selector
            .as_ref()
            .is_some_and(|s| s.matches(&other.labels))
}

fn spread_selects(c: &TopologySpreadConstraint, owner: &Pod, other: &Pod) -> bool {
    owner.namespace == other.namespace
        && c.label_selector
            .as_ref()
            .is_some_and(|s| s.matches(&other.labels))
}

/// Every constraint violation in `result` (new claims only; the bench has no existing capacity).
fn violations(input: &SchedulingInput, result: &SchedulingResult) -> Vec<String> {
    let mut out = Vec::new();
    let pods = &input.pods;
    let mut claim_of = vec![None; pods.len()];
    for (c, claim) in result.new_claims.iter().enumerate() {
        for &p in &claim.pods {
            if claim_of[p].replace(c).is_some() {
                out.push(format!("pod {} placed twice", pods[p].name));
            }
        }
    }
    let types: BTreeMap<&str, &InstanceType> = input
        .node_pools
        .iter()
        .flat_map(|pool| pool.instance_types.iter())
        .map(|it| (it.name.as_str(), it))
        .collect();
    let zone_of = |c: usize| {
        result.new_claims[c]
            .requirements
            .set_of(ZONE)
            .and_then(|s| s.single_value())
    };
    // Domain of a claim for a topology key: hostname → the claim itself, zone → its single zone.
    let domain = |c: usize, key: &str| -> Option<String> {
        match key {
            HOSTNAME => Some(format!("claim-{c}")),
            _ => result.new_claims[c]
                .requirements
                .set_of(key)
                .and_then(|s| s.single_value())
                .map(str::to_owned),
        }
    };

    for (c, claim) in result.new_claims.iter().enumerate() {
        // Resources.
        let mut used = claim.requests.clone();
        let mut sum = Resources::default();
        for &p in &claim.pods {
            sum.add(&pods[p].requests);
            sum.add(&Resources::new(0, 0, 1));
        }
        if !sum.fits_in(&used) {
            out.push(format!(
                "claim {c}: reported requests {used:?} < pods' {sum:?}"
            ));
            used = sum;
        }
        if claim.instance_type_options.is_empty() {
            out.push(format!("claim {c}: no instance-type options"));
        }
        if !claim
            .instance_type_options
            .contains(&claim.cheapest_offering.instance_type)
        {
            out.push(format!(
                "claim {c}: cheapest offering not among the options"
            ));
        }
        for name in &claim.instance_type_options {
            let Some(it) = types.get(name.as_str()) else {
                out.push(format!("claim {c}: unknown instance type {name}"));
                continue;
            };
            if !used.fits_in(&it.allocatable()) {
                out.push(format!(
                    "claim {c}: {:?} does not fit {name} allocatable {:?}",
                    used,
                    it.allocatable()
                ));
            }
            if let Err(e) = claim.requirements.intersects(&it.requirements) {
                out.push(format!("claim {c}: {name} incompatible: {e:?}"));
            }
        }
        for &p in &claim.pods {
            let pod = &pods[p];
            let selector = Requirements::from_labels(
                pod.node_selector
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            );
            if let Err(e) = claim.requirements.intersects(&selector) {
                out.push(format!("{} node selector vs claim {c}: {e:?}", pod.name));
            }
            if !pod.required_node_affinity.is_empty()
                && pod
                    .required_node_affinity
                    .iter()
                    .all(|t| claim.requirements.intersects(t).is_err())
            {
                out.push(format!("{} node affinity vs claim {c}", pod.name));
            }
        }
        // Hostname spread, in placement order.
        for (k, &p) in claim.pods.iter().enumerate() {
            let pod = &pods[p];
            for tsc in pod
                .topology_spread
                .iter()
                .filter(|t| t.topology_key == HOSTNAME)
            {
                let before = claim.pods[..k]
                    .iter()
                    .filter(|&&q| spread_selects(tsc, pod, &pods[q]))
                    .count() as i64;
                let own = i64::from(spread_selects(tsc, pod, pod));
                if before + own > i64::from(tsc.max_skew) {
                    out.push(format!(
                        "{}: hostname spread on claim {c}: {before} selected pods before it",
                        pod.name
                    ));
                }
            }
        }
    }

    for (p, pod) in pods.iter().enumerate() {
        let Some(c) = claim_of[p] else { continue };
        // Anti-affinity (both directions are covered by iterating every pod's terms).
        for term in &pod.pod_anti_affinity {
            let Some(d) = domain(c, &term.topology_key) else {
                out.push(format!(
                    "{}: anti-affinity on {} but claim {c} has no single domain",
                    pod.name, term.topology_key
                ));
                continue;
            };
            for (q, other) in pods.iter().enumerate() {
                if q != p
                    && claim_of[q]
                        .is_some_and(|cq| domain(cq, &term.topology_key) == Some(d.clone()))
                    && selects(term, pod, other)
                {
                    out.push(format!(
                        "{}: anti-affinity violated by {} in {d}",
                        pod.name, other.name
                    ));
                }
            }
        }
        // Affinity.
        for term in &pod.pod_affinity {
            let Some(d) = domain(c, &term.topology_key) else {
                out.push(format!(
                    "{}: affinity on {} but claim {c} has no single domain",
                    pod.name, term.topology_key
                ));
                continue;
            };
            let satisfied = pods.iter().enumerate().any(|(q, other)| {
                claim_of[q].is_some_and(|cq| domain(cq, &term.topology_key).as_deref() == Some(&d))
                    && selects(term, pod, other)
            });
            if !satisfied {
                out.push(format!("{}: no pod its affinity selects in {d}", pod.name));
            }
        }
        // Zone spread. Pods that match the selector without carrying the constraint are placed
        // regardless of it, so final counts alone cannot be held to `maxSkew`. What must hold:
        // the last carrier placed in zone d saw count(d) + 1 − min ≤ maxSkew, counts only grow
        // and afterwards only non-carriers could join d, so finally
        // count(d) − min ≤ maxSkew + (selected non-carriers in d).
        for tsc in pod
            .topology_spread
            .iter()
            .filter(|t| t.topology_key == ZONE)
        {
            let Some(zone) = zone_of(c) else {
                out.push(format!(
                    "{}: zone spread but claim {c} is not pinned to a zone",
                    pod.name
                ));
                continue;
            };
            let mut counts: BTreeMap<&str, i64> = ZONES.iter().map(|z| (*z, 0)).collect();
            let mut non_carriers = 0i64;
            for (q, other) in pods.iter().enumerate() {
                if let Some(z) = claim_of[q].and_then(zone_of)
                    && spread_selects(tsc, pod, other)
                    && let Some(n) = counts.get_mut(z)
                {
                    *n += 1;
                    let carrier =
                        other.namespace == pod.namespace && other.topology_spread.contains(tsc);
                    if z == zone && !carrier {
                        non_carriers += 1;
                    }
                }
            }
            let min = counts.values().copied().min().unwrap_or(0);
            let here = counts.get(zone).copied().unwrap_or(0);
            if here - min > i64::from(tsc.max_skew) + non_carriers {
                out.push(format!(
                    "{}: zone spread in {zone}: counts {counts:?}, {non_carriers} selected non-carriers there",
                    pod.name
                ));
            }
        }
    }
    let mut seen = BTreeSet::new();
    out.retain(|v| seen.insert(v.clone()));
    out
}

fn check(pods: Vec<Pod>, label: &str) -> (usize, usize) {
    let input = bench_input(pods);
    let result = solve(&input);
    let v = violations(&input, &result);
    assert!(
        v.is_empty(),
        "{label}: {} violations, first: {:#?}",
        v.len(),
        &v[..v.len().min(20)]
    );
    (result.new_claims.len(), result.unschedulable.len())
}

#[test]
fn karpenter_v1_15_diverse_1000_is_valid() {
    let (nodes, unschedulable) = check(diverse_pods_v1_15(1000), "v1.15 1000");
    assert_eq!(unschedulable, 0);
    // 200 hostname anti-affinity pods need 200 nodes; Karpenter v1.15.0 launches exactly 200.
    assert_eq!(nodes, 200);
}

#[test]
fn karpenter_v1_15_diverse_5000_is_valid() {
    let (nodes, unschedulable) = check(diverse_pods_v1_15(5000), "v1.15 5000");
    assert_eq!(unschedulable, 0);
    assert_eq!(nodes, 1000);
}

#[test]
fn six_kind_port_diverse_1000_and_5000_are_valid() {
    check(diverse_pods_six_kinds(1000), "six kinds 1000");
    check(diverse_pods_six_kinds(5000), "six kinds 5000");
}

#[test]
fn validator_catches_corrupted_placements() {
    let input = bench_input(diverse_pods_v1_15(100));
    let result = solve(&input);
    assert!(violations(&input, &result).is_empty());
    let anti: Vec<PodIndex> = (0..input.pods.len())
        .filter(|&p| !input.pods[p].pod_anti_affinity.is_empty())
        .collect();
    let claim_with = |p: PodIndex| result.new_claims.iter().position(|c| c.pods.contains(&p));
    let (Some(a), Some(b)) = (claim_with(anti[0]), claim_with(anti[1])) else {
        panic!("anti-affinity pods not placed");
    };
    // Two anti-affine pods on one claim.
    let mut bad = result.clone();
    bad.new_claims[a].pods.push(anti[1]);
    bad.new_claims[b].pods.retain(|&p| p != anti[1]);
    let v = violations(&input, &bad);
    assert!(v.iter().any(|m| m.contains("anti-affinity")), "{v:?}");
    // A claim whose pods outgrow its instance type.
    let mut bad = result.clone();
    let all: Vec<PodIndex> = (0..input.pods.len()).collect();
    bad.new_claims[a].pods = all;
    let v = violations(&input, &bad);
    assert!(v.iter().any(|m| m.contains("does not fit")), "{v:?}");
    // A zone-spread pod moved onto a claim without a zone.
    let mut bad = result;
    bad.new_claims[a].requirements.remove(ZONE);
    bad.new_claims[a].pods.push(
        (0..input.pods.len())
            .find(|&p| {
                input.pods[p]
                    .topology_spread
                    .iter()
                    .any(|t| t.topology_key == ZONE)
            })
            .unwrap_or(0),
    );
    let v = violations(&input, &bad);
    assert!(v.iter().any(|m| m.contains("not pinned")), "{v:?}");
}

/// The placements on the bench inputs, pinned: a change to the solver's data structures must not
/// move a single pod. The digests were recorded with the solver that scanned every open claim per
/// pod (before claims were indexed by pod count and topology occupancy), and re-recorded when a
/// claim's instance types went from the cheapest 60 to Karpenter's 600 (the digest covers them);
/// `cargo bench -p capstan --bench scheduling` prints the same digests for every size, 20,000
/// pods included.
#[test]
fn bench_placements_are_unchanged() {
    let min_values = |pods: Vec<Pod>| {
        let mut input = bench_input(pods);
        input.node_pools[0]
            .requirements
            .add(Requirement::exists("node.kubernetes.io/instance-type").with_min_values(Some(50)));
        input
    };
    let cases = [
        (
            "v1.15 1000",
            bench_input(diverse_pods_v1_15(1000)),
            0x741a_f8dd_be73_a011_u64,
        ),
        (
            "v1.15 5000",
            bench_input(diverse_pods_v1_15(5000)),
            0xa42d_0f42_e842_7c21,
        ),
        (
            "min values 1000",
            min_values(diverse_pods_v1_15(1000)),
            0x7ff0_0ae8_3e75_077f,
        ),
        (
            "six kinds 1000",
            bench_input(diverse_pods_six_kinds(1000)),
            0x0290_9ae7_47ad_d380,
        ),
        (
            "six kinds 5000",
            bench_input(diverse_pods_six_kinds(5000)),
            0x7943_2c65_3e1e_6044,
        ),
    ];
    let mut wrong = Vec::new();
    for (label, input, want) in cases {
        let got = fingerprint(&solve(&input));
        if got != want {
            wrong.push(format!("{label}: {got:#018x}, recorded {want:#018x}"));
        }
    }
    assert!(wrong.is_empty(), "placements changed: {wrong:#?}");
}
