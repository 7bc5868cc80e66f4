//! Consolidation decisions, pure: which nodes can go, and what (if anything) replaces them.
//!
//! Karpenter's consolidation (`pkg/controllers/disruption/{emptiness,consolidation,
//! singlenodeconsolidation,multinodeconsolidation,balanced}.go`) over the scheduler's own
//! domain types, so the same solver that provisions decides what can move:
//!
//! - **Emptiness** ([`Cluster::empty`]): consolidatable nodes with no reschedulable pod go, as
//!   many as the pools' `Empty` budgets allow, in one command.
//! - **Multi-node** ([`Cluster::multi_node`]): the candidates cheapest to disrupt first, the
//!   largest prefix (at most [`Options::multi_node_max`]) whose pods fit on the other nodes plus at
//!   most one new node that is cheaper than the prefix, found by binary search as Karpenter does.
//! - **Single-node** ([`Cluster::single_node`]): the first candidate, cheapest to disrupt first,
//!   whose pods fit on the other nodes (delete) or on one cheaper new node (replace).
//!
//! A simulation takes the candidates' nodes out of the input, adds their reschedulable pods to
//! the pending ones and solves ([`crate::scheduling::solve`]); pods that would land on capacity
//! that is not initialized yet count as not placed (a node that may never come up is no home).
//! Replacement rules are Karpenter's ([`decide`]): strictly cheaper, spot-to-spot only behind
//! [`Options::spot_to_spot`] and with at least [`MIN_SPOT_TO_SPOT_TYPES`] cheaper types, an
//! on-demand node replaced by spot when the pool allows spot (the replacement is then pinned to
//! spot so a failed spot launch never becomes a pricier on-demand node). `Balanced` pools approve
//! a move only when its savings outweigh its disruption ([`cost::BalancedScore`]).
//!
//! Budgets, holds (do-not-disrupt, PDBs) and validation belong to the caller
//! ([`crate::controllers::disruption`]): a [`Cluster`] holds only nodes that may go now.

pub mod cost;
mod decide;
pub mod from_view;
mod headroom;
pub mod price;
mod search;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use crate::scheduling::removal::{self, Removal};
use crate::scheduling::{NewClaim, Pod, SchedulingInput};

pub use cost::{BalancedScore, PoolTotals};
pub use decide::Refusal;
pub use search::{Allowance, SingleNode};

/// A spot node is replaced by spot only when at least this many cheaper types remain, and the
/// replacement is limited to that many of the cheapest (Karpenter's rule: the launch then always
/// picks one of them, so the new node is not itself replaced at once).
pub const MIN_SPOT_TO_SPOT_TYPES: usize = 15;

/// How a pool consolidates (its `consolidationPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Only empty nodes go.
    WhenEmpty,
    /// Empty nodes go, and nodes whose pods fit elsewhere or on a cheaper node.
    WhenEmptyOrUnderutilized,
    /// As `WhenEmptyOrUnderutilized`, when the savings are worth the disruption.
    Balanced,
}

impl Policy {
    /// Whether nodes with pods may be consolidated.
    pub fn underutilized(self) -> bool {
        !matches!(self, Policy::WhenEmpty)
    }
}

/// Why a command removes its nodes (the budget reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Empty,
    Underutilized,
}

impl Reason {
    /// Karpenter's spelling (`Empty`, `Underutilized`).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Empty => "Empty",
            Reason::Underutilized => "Underutilized",
        }
    }
}

/// A node consolidation may remove.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The node's name: one of the input's existing nodes.
    pub node: String,
    /// Its NodeClaim.
    pub claim: String,
    pub node_pool: String,
    pub policy: Policy,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    /// What the node costs per hour ([`price::node_price`]).
    pub price: f64,
    /// Its pods that would need a new home: its node's in the input, shared.
    pub pods: Vec<Arc<Pod>>,
    /// Karpenter's ordering cost: the pods' eviction costs times the share of the node's
    /// lifetime left ([`cost::disruption_cost`]).
    pub disruption_cost: f64,
    /// What moving its pods disrupts, for `Balanced` ([`cost::reschedule_cost`]).
    pub reschedule_cost: f64,
}

/// Knobs, with Karpenter's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Karpenter's `SpotToSpotConsolidation` feature gate (off by default).
    pub spot_to_spot: bool,
    /// At most this many candidates in one multi-node command (Karpenter: 100).
    pub multi_node_max: usize,
    /// `Balanced` approves a move whose score reaches `1 / balanced_k` (Karpenter: k = 2).
    pub balanced_k: f64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            spot_to_spot: false,
            multi_node_max: 100,
            balanced_k: 2.0,
        }
    }
}

/// One decision: remove `candidates`, launching `replacement` first when there is one.
#[derive(Clone, Debug, PartialEq)]
pub struct Command {
    pub reason: Reason,
    /// Indices into [`Cluster::candidates`].
    pub candidates: Vec<usize>,
    /// The new node the pods need, narrowed to the types cheaper than what goes.
    pub replacement: Option<NewClaim>,
    /// $/h of the candidates.
    pub price_before: f64,
    /// $/h of the replacement's cheapest option (0 when nothing replaces them).
    pub price_after: f64,
}

impl Command {
    /// $/h saved.
    pub fn savings(&self) -> f64 {
        self.price_before - self.price_after
    }

    /// `delete` or `replace`, as Karpenter's decision label reads.
    pub fn decision(&self) -> &'static str {
        if self.replacement.is_some() {
            "replace"
        } else {
            "delete"
        }
    }
}

/// The cluster as consolidation sees it: the scheduler's input (every node, candidates'
/// included, and the pods that are pending) and the candidates, cheapest to disrupt first.
#[derive(Clone, Debug)]
pub struct Cluster {
    pub input: SchedulingInput,
    pub candidates: Vec<Candidate>,
    /// Per pool: its nodes' total price and disruption cost (for `Balanced`).
    pub totals: BTreeMap<String, PoolTotals>,
    pub options: Options,
    headroom: headroom::Headroom,
}

impl Cluster {
    /// A cluster whose candidates are ordered as Karpenter orders them: cheapest to disrupt
    /// first, then by node name.
    pub fn new(
        input: SchedulingInput,
        mut candidates: Vec<Candidate>,
        totals: BTreeMap<String, PoolTotals>,
        options: Options,
    ) -> Self {
        candidates.sort_by(|a, b| {
            a.disruption_cost
                .total_cmp(&b.disruption_cost)
                .then_with(|| a.node.cmp(&b.node))
        });
        let headroom = headroom::Headroom::new(&input.existing_nodes, &input.node_pools);
        Self {
            input,
            candidates,
            totals,
            options,
            headroom,
        }
    }

    /// Solves with `chosen`'s nodes gone and their pods pending. The input is restored after.
    pub(crate) fn simulate(&mut self, chosen: &[usize]) -> Removal {
        let leaving: HashSet<&str> = chosen
            .iter()
            .map(|&i| self.candidates[i].node.as_str())
            .collect();
        let moving = chosen
            .iter()
            .flat_map(|&i| self.candidates[i].pods.iter().map(AsRef::as_ref));
        removal::without_nodes(&mut self.input, &leaving, moving)
    }
}
