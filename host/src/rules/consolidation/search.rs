//! Which candidates to try: emptiness, multi-node and single-node consolidation, in Karpenter's
//! order and with its bounds.

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use super::decide::Refusal;
use super::{Cluster, Command, Reason};
use crate::scheduling::Target;

/// Per pool: how many more nodes may be disrupted now for the reason at hand.
pub type Allowance = BTreeMap<String, usize>;

/// What single-node consolidation found.
#[derive(Debug, Default)]
pub struct SingleNode {
    pub command: Option<Command>,
    /// Candidates tried and refused, with why (Karpenter's `Unconsolidatable` Events).
    pub refused: Vec<(usize, Refusal)>,
    /// Whether the deadline stopped the search before every candidate was tried.
    pub timed_out: bool,
}

impl Cluster {
    /// Every empty candidate the pools' `Empty` allowances let go now, in one command; but not
    /// one the pods pending now would land on (pods of nodes being disrupted, a CapacityBuffer's
    /// room there): such a node is about to be used, and deleting it would only launch another.
    pub fn empty(&self, allowance: &Allowance) -> Option<Command> {
        // The solve is only worth it when a budget would let an empty node go.
        let any_allowed = self
            .candidates
            .iter()
            .any(|c| c.pods.is_empty() && allowance.get(&c.node_pool).is_some_and(|n| *n > 0));
        if !any_allowed {
            return None;
        }
        let wanted: HashSet<String> = if self.input.pods.is_empty() {
            HashSet::new()
        } else {
            crate::scheduling::solve(&self.input)
                .existing_placements
                .into_iter()
                .filter_map(|(_, target)| match target {
                    Target::Node(name) => Some(name),
                    Target::Claim(_) => None,
                })
                .collect()
        };
        let mut left = allowance.clone();
        let mut chosen = Vec::new();
        for (i, c) in self.candidates.iter().enumerate() {
            if !c.pods.is_empty() || wanted.contains(&c.node) {
                continue;
            }
            let Some(n) = left.get_mut(&c.node_pool).filter(|n| **n > 0) else {
                continue;
            };
            *n -= 1;
            chosen.push(i);
        }
        if chosen.is_empty() {
            return None;
        }
        let price_before = chosen.iter().map(|&i| self.candidates[i].price).sum();
        Some(Command {
            reason: Reason::Empty,
            candidates: chosen,
            replacement: None,
            price_before,
            price_after: 0.0,
        })
    }

    /// The largest prefix of the underutilized candidates (cheapest to disrupt first, within the
    /// allowances, at most [`super::Options::multi_node_max`]) that can go with at most one
    /// cheaper replacement, by binary search over its length; the best found when the deadline
    /// passes. `None` when fewer than two candidates or nothing works.
    pub fn multi_node(&mut self, allowance: &Allowance, deadline: Instant) -> Option<Command> {
        let mut left = allowance.clone();
        let mut order = Vec::new();
        for (i, c) in self.candidates.iter().enumerate() {
            if !c.policy.underutilized() {
                continue;
            }
            let Some(n) = left.get_mut(&c.node_pool).filter(|n| **n > 0) else {
                continue;
            };
            *n -= 1;
            order.push(i);
            if order.len() == self.options.multi_node_max {
                break;
            }
        }
        if order.len() < 2 {
            return None;
        }
        let (mut low, mut high) = (1, order.len() - 1);
        let mut best = None;
        while low <= high {
            if Instant::now() >= deadline {
                break;
            }
            let mid = (low + high) / 2;
            match self.check(&order[..=mid]) {
                Ok(cmd) => {
                    best = Some(cmd);
                    low = mid + 1;
                }
                Err(_) => high = mid - 1,
            }
        }
        best
    }

    /// The first underutilized candidate (cheapest to disrupt first, of a pool with allowance
    /// left) that can go, alone, deleted or replaced by one cheaper node.
    pub fn single_node(&mut self, allowance: &Allowance, deadline: Instant) -> SingleNode {
        let mut out = SingleNode::default();
        for i in 0..self.candidates.len() {
            let c = &self.candidates[i];
            if !c.policy.underutilized() || allowance.get(&c.node_pool).is_none_or(|n| *n == 0) {
                continue;
            }
            if self.headroom.hopeless(c) {
                out.refused.push((i, Refusal::NoRoom { price: c.price }));
                continue;
            }
            if Instant::now() >= deadline {
                out.timed_out = true;
                break;
            }
            match self.check(&[i]) {
                Ok(cmd) => {
                    out.command = Some(cmd);
                    break;
                }
                Err(why) => out.refused.push((i, why)),
            }
        }
        out
    }
}
