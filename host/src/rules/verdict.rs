//! The verdict on each managed node: what keeps consolidation from taking it now, if anything
//! (pure).
//!
//! The verdict is a by-product of the disruption pass, not a second opinion: it reads the same
//! facts the pass decides on — [`eligible`], [`held`] (do-not-disrupt, PodDisruptionBudgets, Job
//! pods), the `Consolidatable` condition and `consolidateAfter`, the pools' allowances
//! ([`super::consolidation::allowances_in`]), the refusals of the last search and the decision
//! waiting for validation — in the order the pass applies them. The host keeps it on each
//! NodeClaim as the `ConsolidationBlocked` condition ([`CONSOLIDATION_BLOCKED`]) and counts it
//! in `capstan_nodeclaims_consolidation_blocked`; `capstan explain` reads it back.
//!
//! Messages carry no clock: a wait for `consolidateAfter` names the moment it ends, so a
//! condition is written when its cause changes, never because time passed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use super::budgets::{self, BudgetError};
use super::candidates::{Held, Machine, eligible, held};
use crate::api::labels::INITIALIZED as INITIALIZED_LABEL;
pub use crate::api::nodeclaim::conditions::CONSOLIDATION_BLOCKED;
use crate::api::nodeclaim::conditions::{CONSOLIDATABLE, INITIALIZED};
use crate::api::nodepool::{ConsolidationPolicy, DisruptionReason};
use crate::api::shared::find_condition;
use crate::api::{NodeClaim, NodePool, duration};
use crate::rules::claims::is_true;
use crate::rules::consolidation::Refusal;

/// The condition's reason when nothing blocks the node.
pub const NOT_BLOCKED: &str = "NotBlocked";
/// The condition's message when nothing blocks the node.
pub const NOT_BLOCKED_MESSAGE: &str = "nothing blocks consolidation: the node goes when a search finds that removing or replacing it saves money";

/// What keeps consolidation from taking a node now.
#[derive(Debug, Clone, PartialEq)]
pub enum Blocked {
    /// The pool is static (`replicas`): consolidation never takes its nodes.
    StaticNodePool,
    /// The claim or its node is not initialized yet.
    NotInitialized,
    /// It is being disrupted or deleted already.
    Disrupting,
    /// do-not-disrupt, a PodDisruptionBudget, or a running Job pod.
    Held(Held),
    /// The pool's `consolidateAfter` is `Never`.
    ConsolidateAfterNever,
    /// `consolidateAfter` has not passed since the node's last pod event; `None` when its pods
    /// changed a moment ago and the new time is not in the cache yet.
    ConsolidateAfter {
        after: String,
        until: Option<Timestamp>,
    },
    /// The pool consolidates only empty nodes and this one has pods.
    WhenEmpty { pods: usize, first: String },
    /// The pool's budgets allow no more disruptions for the reason now.
    Budget {
        pool: String,
        reason: DisruptionReason,
        budget: String,
        disrupting: usize,
        total: usize,
    },
    /// The pool's budgets cannot be read.
    InvalidBudget { pool: String, error: String },
    /// The last search tried the node and refused it.
    Refused(Refusal),
    /// A decision to remove it waits for validation.
    PendingValidation { reason: &'static str },
}

impl Blocked {
    /// The condition's reason (CamelCase, one per cause; also the metric's `reason` label).
    pub fn reason(&self) -> &'static str {
        match self {
            Blocked::StaticNodePool => "StaticNodePool",
            Blocked::NotInitialized => "NotInitialized",
            Blocked::Disrupting => "Disrupting",
            Blocked::Held(Held::Node) => "DoNotDisruptNode",
            Blocked::Held(Held::Provider(_)) => "HeldByProvider",
            Blocked::Held(Held::Pod(_)) => "DoNotDisruptPod",
            Blocked::Held(Held::Budget { .. }) => "PodDisruptionBudget",
            Blocked::Held(Held::Job { .. }) => "JobRunning",
            Blocked::ConsolidateAfterNever => "ConsolidateAfterNever",
            Blocked::ConsolidateAfter { .. } => "ConsolidateAfter",
            Blocked::WhenEmpty { .. } => "WhenEmptyNotEmpty",
            Blocked::Budget { .. } => "DisruptionBudget",
            Blocked::InvalidBudget { .. } => "InvalidBudget",
            Blocked::Refused(refusal) => refusal.kind(),
            Blocked::PendingValidation { .. } => "PendingValidation",
        }
    }

    /// The condition's message: the cause, named.
    pub fn message(&self) -> String {
        match self {
            Blocked::StaticNodePool => {
                "its NodePool is static (replicas): consolidation does not take its nodes".into()
            }
            Blocked::NotInitialized => "the node is not initialized yet".into(),
            Blocked::Disrupting => "the node is being disrupted or deleted already".into(),
            Blocked::Held(held) => held.to_string(),
            Blocked::ConsolidateAfterNever => "its NodePool's consolidateAfter is Never".into(),
            Blocked::ConsolidateAfter {
                after,
                until: Some(until),
            } => format!(
                "consolidateAfter {after} has not passed since its last pod event: consolidatable from {until}"
            ),
            Blocked::ConsolidateAfter { after, until: None } => {
                format!("its pods changed moments ago: consolidatable {after} after that")
            }
            Blocked::WhenEmpty { pods, first } => format!(
                "its NodePool's consolidationPolicy is WhenEmpty and it has {pods} pod(s) ({first}{})",
                if *pods > 1 { ", ..." } else { "" }
            ),
            Blocked::Budget {
                pool,
                reason,
                budget,
                disrupting,
                total,
            } => format!(
                "NodePool {pool}'s budget allows no more {reason:?} disruptions now ({budget}; {disrupting} of {total} nodes disrupting)"
            ),
            Blocked::InvalidBudget { pool, error } => {
                format!("NodePool {pool}'s budgets cannot be read: {error}")
            }
            Blocked::Refused(refusal) => refusal.to_string(),
            Blocked::PendingValidation { reason } => format!(
                "a decision to remove it ({reason}) waits for validation; it goes if the cluster still allows it then"
            ),
        }
    }

    /// What would unblock it, for `capstan explain`.
    pub fn unblock(&self) -> &'static str {
        unblock(self.reason())
    }
}

/// What would unblock a node blocked for `reason` (a [`Blocked::reason`]), for `capstan explain`
/// reading the condition back.
pub fn unblock(reason: &str) -> &'static str {
    match reason {
        "StaticNodePool" => "nothing: scale the NodePool's replicas instead",
        "NotInitialized" => "wait for the node to become initialized",
        "Disrupting" => "nothing: it is on its way out",
        "DoNotDisruptNode" => "remove the karpenter.sh/do-not-disrupt annotation from the node",
        "HeldByProvider" => {
            "see the provider's reason in the NodeClaim's capstan.dev/held-by-provider annotation (clusterapi: the node group's minimum size)"
        }
        "DoNotDisruptPod" => {
            "remove karpenter.sh/do-not-disrupt from the pod, or wait for it to finish or for its duration to pass"
        }
        "PodDisruptionBudget" => {
            "wait until the PodDisruptionBudget allows a disruption (healthy replicas above its minimum), or relax it"
        }
        "JobRunning" => {
            "wait for the Job's pod to finish (or its bound in capstan.dev/wait-for-jobs to pass), or remove the annotation from the NodePool"
        }
        "ConsolidateAfterNever" => "set the NodePool's consolidateAfter to a duration",
        "ConsolidateAfter" => "wait: no pod may arrive on or leave the node until then",
        "WhenEmptyNotEmpty" => {
            "move its pods away, or set consolidationPolicy WhenEmptyOrUnderutilized"
        }
        "DisruptionBudget" => {
            "wait for the disruptions under way to finish or for the budget's window to open, or raise the budget"
        }
        "InvalidBudget" => "fix the NodePool's disruption budgets",
        "PodsWouldNotSchedule" | "NoRoom" => {
            "make room for its pods elsewhere (other nodes, or instance types the pool offers), or relax their constraints"
        }
        "NoCheaperReplacement" => {
            "nothing while its pods need this much room: no cheaper instance type fits them"
        }
        "TooManyReplacements" => "nothing: its pods would need more than one new node",
        "SpotToSpotDisabled" => "enable the SpotToSpotConsolidation feature gate",
        "SpotToSpotFlexibility" => "allow more instance types in the NodePool",
        "BalancedBelowThreshold" => {
            "nothing: the saving is too small for the disruption (or use WhenEmptyOrUnderutilized)"
        }
        "PendingValidation" => "nothing: the host re-checks and carries the decision out",
        _ => "",
    }
}

/// The verdict as the condition reads: (reason, message).
pub fn condition_of(blocked: Option<&Blocked>) -> (&'static str, String) {
    match blocked {
        Some(b) => (b.reason(), b.message()),
        None => (NOT_BLOCKED, NOT_BLOCKED_MESSAGE.to_owned()),
    }
}

/// What the pass knows besides the machine and its pool.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    pub pdbs: &'a [Arc<PodDisruptionBudget>],
    pub now: Timestamp,
    /// Per pool: (nodes that count, nodes disrupting) ([`super::candidates::pool_counts`]).
    pub counts: &'a BTreeMap<String, (usize, usize)>,
    /// Claims whose pods this host saw change within their pool's `consolidateAfter`.
    pub recent: &'a HashSet<String>,
    /// Claim → the last search's refusal of it.
    pub refused: &'a HashMap<String, Refusal>,
    /// Claims of the decision waiting for validation, and its reason.
    pub pending: Option<(&'a [String], &'static str)>,
}

/// When the claim may be consolidated: `consolidateAfter` past the later of its initialization
/// and its last pod event. `None` when never (`Never`, or not initialized).
pub fn consolidatable_since(pool: &NodePool, claim: &NodeClaim) -> Option<Timestamp> {
    let after = duration::parse_nillable(&pool.spec.disruption.consolidate_after).ok()??;
    let status = claim.status.as_ref()?;
    let initialized = find_condition(&status.conditions, INITIALIZED).filter(|c| c.is_true())?;
    let mut since = initialized.last_transition_time.0;
    if let Some(t) = &status.last_pod_event_time
        && t.0 > since
    {
        since = t.0;
    }
    since
        .checked_add(SignedDuration::try_from(after).ok()?)
        .ok()
}

/// What keeps consolidation from taking `machine` of `pool` now; `None` when nothing does.
pub fn verdict(machine: &Machine<'_>, pool: &NodePool, facts: &Facts<'_>) -> Option<Blocked> {
    let claim = machine.claim;
    let name = claim.name_any();
    let pool_name = pool.name_any();
    if pool.spec.replicas.is_some() {
        return Some(Blocked::StaticNodePool);
    }
    let node_initialized = machine
        .node
        .labels()
        .get(INITIALIZED_LABEL)
        .map(String::as_str)
        == Some("true");
    if !is_true(claim, INITIALIZED) || !node_initialized {
        return Some(Blocked::NotInitialized);
    }
    if !eligible(machine, pool) {
        return Some(Blocked::Disrupting);
    }
    if let Some(why) = held(machine, pool, facts.pdbs, facts.now) {
        return Some(Blocked::Held(why));
    }
    let after = &pool.spec.disruption.consolidate_after;
    if matches!(duration::parse_nillable(after), Ok(None)) {
        return Some(Blocked::ConsolidateAfterNever);
    }
    let since = consolidatable_since(pool, claim);
    if facts.recent.contains(&name) {
        return Some(Blocked::ConsolidateAfter {
            after: after.clone(),
            until: since.filter(|t| *t > facts.now),
        });
    }
    if !is_true(claim, CONSOLIDATABLE) {
        return Some(Blocked::ConsolidateAfter {
            after: after.clone(),
            until: since,
        });
    }
    if let Some((claims, reason)) = facts.pending
        && claims.contains(&name)
    {
        return Some(Blocked::PendingValidation { reason });
    }
    let empty = machine.pods.is_empty();
    if !empty && pool.spec.disruption.consolidation_policy == ConsolidationPolicy::WhenEmpty {
        let first = machine
            .pods
            .first()
            .map(|p| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()))
            .unwrap_or_default();
        return Some(Blocked::WhenEmpty {
            pods: machine.pods.len(),
            first,
        });
    }
    let reason = if empty {
        DisruptionReason::Empty
    } else {
        DisruptionReason::Underutilized
    };
    let (total, disrupting) = facts.counts.get(&pool_name).copied().unwrap_or_default();
    match budget_block(pool, reason, total, disrupting, facts.now) {
        Ok(Some(blocked)) => return Some(blocked),
        Ok(None) => {}
        Err(err) => {
            return Some(Blocked::InvalidBudget {
                pool: pool_name,
                error: err.to_string(),
            });
        }
    }
    facts.refused.get(&name).cloned().map(Blocked::Refused)
}

/// The budget that allows no more disruptions of `pool` for `reason`, as a block.
fn budget_block(
    pool: &NodePool,
    reason: DisruptionReason,
    total: usize,
    disrupting: usize,
    now: Timestamp,
) -> Result<Option<Blocked>, BudgetError> {
    let budgets = &pool.spec.disruption.budgets;
    if budgets::allowed(budgets, reason, total, disrupting, now)? > 0 {
        return Ok(None);
    }
    let budget = budgets::tightest(budgets, reason, total, now)?
        .map(|(_, b)| budgets::describe(b))
        .unwrap_or_default();
    Ok(Some(Blocked::Budget {
        pool: pool.name_any(),
        reason,
        budget,
        disrupting,
        total,
    }))
}

#[cfg(test)]
mod tests;
