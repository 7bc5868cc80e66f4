//! The cluster as consolidation sees it, from a [`View`] of the objects: the pools' allowances
//! from their budgets, the pods a pass must still place, the candidates (consolidatable,
//! eligible, unheld machines whose price is known) with the scheduling input, and one search in
//! Karpenter's order. The disruption pass builds it from the host's caches, `capstan simulate`
//! from a dump.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::{Candidate, Cluster, Command, Policy, PoolTotals, cost, price};
use crate::api::NodePool;
use crate::api::labels::{CAPACITY_TYPE, INSTANCE_TYPE, NODEPOOL, ZONE};
use crate::api::nodeclaim::conditions::{CONSOLIDATABLE, INITIALIZED};
use crate::api::nodepool::{ConsolidationPolicy, DisruptionReason};
use crate::rules::budgets;
use crate::rules::candidates::{Joined, Machine, eligible, held};
use crate::rules::claims::is_true;
use crate::rules::pods::asks_for_devices;
use crate::rules::pods::is_reschedulable;
use crate::rules::selector::Selector;
use crate::rules::snapshot::Snapshot;
use crate::scheduling::convert::is_terminal;
use crate::scheduling::convert::volumes::has_claims;
use crate::state::View;

/// One search, in Karpenter's order: every empty node the budgets allow; else the largest
/// multi-node move; else the first single node that can go. Returns the decision and the
/// candidates single-node consolidation refused, with why.
pub fn search(
    cluster: &mut Cluster,
    allowance: &Allowances,
    deadline: Instant,
) -> (Option<Command>, Vec<(usize, super::Refusal)>) {
    let found = cluster
        .empty(&allowance.empty)
        .or_else(|| cluster.multi_node(&allowance.underutilized, deadline));
    if found.is_some() {
        return (found, Vec::new());
    }
    let single = cluster.single_node(&allowance.underutilized, deadline);
    (single.command, single.refused)
}

/// Per pool: how many more nodes may go now, as `Empty` and as `Underutilized`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Allowances {
    pub empty: super::Allowance,
    pub underutilized: super::Allowance,
}

/// The pools' allowances from their budgets and the claims disrupting now; a pool whose budget
/// does not parse is left out, with the error.
pub fn allowances_in(
    joined: &Joined<'_>,
    pools: &BTreeMap<String, &NodePool>,
    now: Timestamp,
) -> (Allowances, Vec<(String, budgets::BudgetError)>) {
    let mut out = Allowances::default();
    let mut errors = Vec::new();
    for (name, pool) in pools {
        let (total, disrupting) = joined.counts.get(name).copied().unwrap_or_default();
        for (reason, into) in [
            (DisruptionReason::Empty, &mut out.empty),
            (DisruptionReason::Underutilized, &mut out.underutilized),
        ] {
            match budgets::allowed(
                &pool.spec.disruption.budgets,
                reason,
                total,
                disrupting,
                now,
            ) {
                Ok(n) => {
                    into.insert(name.clone(), n);
                }
                Err(err) => errors.push((name.clone(), err)),
            }
        }
    }
    (out, errors)
}

fn policy(pool: &NodePool) -> Policy {
    match pool.spec.disruption.consolidation_policy {
        ConsolidationPolicy::WhenEmpty => Policy::WhenEmpty,
        ConsolidationPolicy::WhenEmptyOrUnderutilized => Policy::WhenEmptyOrUnderutilized,
        ConsolidationPolicy::Balanced => Policy::Balanced,
    }
}

/// Adds to the snapshot's pending pods every pod not bound yet that kube-scheduler has not
/// judged (the provisioner waits for its verdict; consolidation may not): a pod evicted by a
/// disruption a moment ago comes back as such a pod, and the room it needs is not free.
pub fn add_unbound(snapshot: &mut Snapshot, view: &View, selector: &Selector) {
    let known: HashSet<(Option<String>, String)> = snapshot
        .pending
        .iter()
        .map(|p| (p.namespace(), p.name_any()))
        .collect();
    for pod in &view.pods {
        let unbound = pod.spec.as_ref().is_some_and(|s| s.node_name.is_none());
        if unbound
            && !is_terminal(pod)
            && pod.metadata.deletion_timestamp.is_none()
            && is_reschedulable(pod)
            && selector.matches(pod.labels())
            && !known.contains(&(pod.namespace(), pod.name_any()))
        {
            snapshot.pending.push(pod.clone());
        }
    }
    snapshot
        .pending
        .sort_by_key(|p| (p.namespace(), p.name_any()));
}

/// The cluster as consolidation sees it — the scheduling `input` built from `snapshot`, and the
/// candidates: consolidatable, eligible, unheld machines of `view` (`joined`) whose price is known, but for
/// the claims in `recent` — and its fingerprint (what a search depends on). `None` when there is
/// no candidate.
pub fn cluster_from(
    view: &View,
    joined: &Joined<'_>,
    snapshot: &Snapshot,
    input: crate::scheduling::SchedulingInput,
    (pools, recent): (&BTreeMap<String, &NodePool>, &HashSet<String>),
    now: Timestamp,
    options: super::Options,
) -> Option<(Cluster, u64)> {
    let all = &joined.machines;
    let consolidatable: Vec<&Machine<'_>> = all
        .iter()
        .filter(|m| {
            is_true(m.claim, CONSOLIDATABLE)
                && is_true(m.claim, INITIALIZED)
                && !recent.contains(&m.claim.name_any())
                && m.claim
                    .labels()
                    .get(NODEPOOL)
                    .and_then(|p| pools.get(p))
                    .is_some_and(|p| eligible(m, p) && held(m, p, &view.pdbs, now).is_none())
        })
        .collect();
    if consolidatable.is_empty() {
        return None;
    }
    let types_of = |pool: &str| {
        input
            .node_pools
            .iter()
            .find(|p| p.name == pool)
            .map(|p| p.instance_types.clone())
    };
    let mut totals: BTreeMap<String, PoolTotals> = BTreeMap::new();
    let mut priced: HashMap<String, f64> = HashMap::new();
    for m in all {
        let Some(pool) = m.claim.labels().get(NODEPOOL) else {
            continue;
        };
        let Some(price) = types_of(pool).and_then(|types| machine_price(m, &types)) else {
            continue;
        };
        let entry = totals.entry(pool.clone()).or_default();
        entry.cost += price;
        entry.disruption_cost += cost::reschedule_cost(m.pods.iter().copied());
        priced.insert(m.claim.name_any(), price);
    }
    // A candidate's pods are its node's in the input, shared rather than converted again (a
    // conversion of every pod of 5,000 nodes was a fifth of a pass); a pod with a volume claim is
    // converted with its volumes' requirements, and one kube-scheduler's default spread applies
    // to with those constraints, and one with ResourceClaims with their requests (a move takes
    // its devices along), which the node's pods leave out.
    let converted: HashMap<&str, &[Arc<crate::scheduling::Pod>]> = input
        .existing_nodes
        .iter()
        .map(|n| (n.name.as_str(), n.pods.as_slice()))
        .collect();
    let candidate_pod = |node: &str, pod: &k8s_openapi::api::core::v1::Pod| {
        let (namespace, name) = (
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or_default(),
        );
        let shared = converted.get(node).and_then(|pods| {
            pods.iter()
                .find(|p| p.name == name && p.namespace == namespace)
        });
        match shared {
            Some(p)
                if !has_claims(pod)
                    && !asks_for_devices(pod)
                    && !snapshot.spread_by_default(pod) =>
            {
                Ok::<_, String>(Arc::clone(p))
            }
            _ => snapshot.pod(pod).map(Arc::new),
        }
    };
    let mut candidates = Vec::new();
    let mut hasher = DefaultHasher::new();
    for m in consolidatable {
        let Some(pool_name) = m.claim.labels().get(NODEPOOL) else {
            continue;
        };
        let Some(pool) = pools.get(pool_name) else {
            continue;
        };
        let Some(&price) = priced.get(&m.claim.name_any()) else {
            continue;
        };
        let node = m.node.name_any();
        let Ok(pods) = m
            .pods
            .iter()
            .map(|p| candidate_pod(&node, p))
            .collect::<Result<Vec<_>, _>>()
        else {
            continue;
        };
        let label = |key: &str| m.node.labels().get(key).cloned().unwrap_or_default();
        let lifetime = cost::claim_lifetime_remaining(m.claim, now);
        (node.as_str(), m.pods.len()).hash(&mut hasher);
        candidates.push(Candidate {
            node,
            claim: m.claim.name_any(),
            node_pool: pool_name.clone(),
            policy: policy(pool),
            instance_type: label(INSTANCE_TYPE),
            zone: label(ZONE),
            capacity_type: label(CAPACITY_TYPE),
            price,
            pods,
            disruption_cost: cost::disruption_cost(m.pods.iter().copied(), lifetime),
            reschedule_cost: cost::reschedule_cost(m.pods.iter().copied()),
        });
    }
    for n in &input.existing_nodes {
        (
            n.name.as_str(),
            n.used.cpu_millis,
            n.used.memory,
            n.used.pods,
        )
            .hash(&mut hasher);
    }
    input.pods.len().hash(&mut hasher);
    input.inflight_claims.len().hash(&mut hasher);
    let cluster = Cluster::new(input, candidates, totals, options);
    Some((cluster, hasher.finish()))
}

/// What a machine costs per hour, from its node's instance type, zone and capacity type.
fn machine_price(m: &Machine<'_>, types: &[crate::scheduling::InstanceType]) -> Option<f64> {
    let labels = m.node.labels();
    let it = types
        .iter()
        .find(|t| Some(&t.name) == labels.get(INSTANCE_TYPE))?;
    price::node_price(it, labels.get(ZONE)?, labels.get(CAPACITY_TYPE)?)
}
