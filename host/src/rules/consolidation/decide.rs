//! One consolidation decision: can these candidates go, and with what replacement
//! (Karpenter's `computeConsolidation` and `computeSpotToSpotConsolidation`).

use std::collections::BTreeMap;

use super::price::{NarrowError, narrow};
use super::{BalancedScore, Cluster, Command, MIN_SPOT_TO_SPOT_TYPES, Policy, Reason};
use crate::api::labels::CAPACITY_TYPE;
use crate::scheduling::{InstanceType, NewClaim, ValueSet};

/// Why candidates cannot be consolidated; the text is the `Unconsolidatable` Event's.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    #[error("pods would not schedule elsewhere: {}", .0.join("; "))]
    Stranded(Vec<String>),
    #[error("its pods fit neither on the other nodes nor on a node cheaper than its ${price:.4}/h")]
    NoRoom {
        /// $/h of the node.
        price: f64,
    },
    #[error("Can't remove without creating {0} nodes")]
    TooManyNodes(usize),
    #[error("{0}")]
    Price(#[from] NarrowError),
    #[error("SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node")]
    SpotToSpotDisabled,
    #[error(
        "SpotToSpotConsolidation requires {MIN_SPOT_TO_SPOT_TYPES} cheaper instance type options than the current candidate to consolidate, got {0}"
    )]
    SpotToSpotFlexibility(usize),
    #[error("the replacement's NodePool {0} is not offered")]
    UnknownPool(String),
    #[error(
        "Balanced: savings of {savings_percent:.1}% of the pool's cost for {disruption_percent:.1}% of its disruption score {score:.2}, below the threshold {threshold:.2}"
    )]
    NotWorthIt {
        savings_percent: f64,
        disruption_percent: f64,
        score: f64,
        threshold: f64,
    },
}

impl Refusal {
    /// A short name of the kind of refusal (an Event's action: refusals of one kind aggregate,
    /// refusals of different kinds stay apart).
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::NoRoom { .. } => "NoRoom",
            Refusal::Stranded(_) => "PodsWouldNotSchedule",
            Refusal::TooManyNodes(_) => "TooManyReplacements",
            Refusal::Price(_) => "NoCheaperReplacement",
            Refusal::SpotToSpotDisabled => "SpotToSpotDisabled",
            Refusal::SpotToSpotFlexibility(_) => "SpotToSpotFlexibility",
            Refusal::UnknownPool(_) => "UnknownNodePool",
            Refusal::NotWorthIt { .. } => "BalancedBelowThreshold",
        }
    }
}

const SPOT: &str = "spot";
const ON_DEMAND: &str = "on-demand";

impl Cluster {
    /// What removing `chosen` (indices into the candidates) would take.
    pub(crate) fn decide(&mut self, chosen: &[usize]) -> Result<Command, Refusal> {
        let simulation = self.simulate(chosen);
        if !simulation.stranded.is_empty() {
            return Err(Refusal::Stranded(simulation.stranded_brief()));
        }
        let mut needed: Vec<&NewClaim> = simulation.replacements().collect();
        let price_before: f64 = chosen.iter().map(|&i| self.candidates[i].price).sum();
        let reason = if chosen.iter().all(|&i| self.candidates[i].pods.is_empty()) {
            Reason::Empty
        } else {
            Reason::Underutilized
        };
        let replacement = match needed.len() {
            0 => None,
            1 => Some(self.replacement(chosen, needed.remove(0), price_before)?),
            n => return Err(Refusal::TooManyNodes(n)),
        };
        let price_after = replacement.as_ref().map_or(0.0, |r| r.cheapest_price);
        Ok(Command {
            reason,
            candidates: chosen.to_vec(),
            replacement,
            price_before,
            price_after,
        })
    }

    fn types_of(&self, pool: &str) -> Result<&[InstanceType], Refusal> {
        self.input
            .node_pools
            .iter()
            .find(|p| p.name == pool)
            .map(|p| &p.instance_types[..])
            .ok_or_else(|| Refusal::UnknownPool(pool.to_owned()))
    }

    /// The one new node, narrowed to what is cheaper than the candidates.
    fn replacement(
        &self,
        chosen: &[usize],
        claim: &NewClaim,
        price_before: f64,
    ) -> Result<NewClaim, Refusal> {
        let types = self.types_of(&claim.node_pool)?;
        let allowed = |ct: &str| {
            claim
                .requirements
                .set_of(CAPACITY_TYPE)
                .is_none_or(|s| s.contains(ct))
        };
        let all_spot = chosen
            .iter()
            .all(|&i| self.candidates[i].capacity_type == SPOT);
        if all_spot && allowed(SPOT) {
            if !self.options.spot_to_spot {
                return Err(Refusal::SpotToSpotDisabled);
            }
            let spot = pinned(claim, SPOT);
            let cheaper = narrow(&spot, types, price_before, None)?;
            if chosen.len() > 1 {
                return Ok(cheaper);
            }
            if cheaper.instance_type_options.len() < MIN_SPOT_TO_SPOT_TYPES {
                return Err(Refusal::SpotToSpotFlexibility(
                    cheaper.instance_type_options.len(),
                ));
            }
            return Ok(narrow(
                &cheaper,
                types,
                price_before,
                Some(MIN_SPOT_TO_SPOT_TYPES),
            )?);
        }
        // Several nodes never become one of the same type they are (Karpenter's
        // filterOutSameInstanceType): cheaper than the cheapest candidate type on offer.
        let mut max_price = price_before;
        if chosen.len() > 1 {
            for &i in chosen {
                let c = &self.candidates[i];
                if claim.instance_type_options.contains(&c.instance_type) {
                    max_price = max_price.min(c.price);
                }
            }
        }
        if allowed(SPOT) && allowed(ON_DEMAND) {
            // Priced assuming spot launches, so the replacement is pinned to spot: if spot runs
            // out, the launch fails and the node stays, rather than a pricier on-demand node
            // replacing it. When no spot type is cheaper, a cheaper on-demand type may still be.
            return narrow(&pinned(claim, SPOT), types, max_price, None)
                .or_else(|_| narrow(&pinned(claim, ON_DEMAND), types, max_price, None))
                .map_err(Refusal::from);
        }
        Ok(narrow(claim, types, max_price, None)?)
    }

    /// [`Cluster::decide`] then [`Cluster::approve`]: what removing `chosen` takes, if it is
    /// worth it (validation re-checks a decision with it).
    pub fn check(&mut self, chosen: &[usize]) -> Result<Command, Refusal> {
        let command = self.decide(chosen)?;
        self.approve(&command)?;
        Ok(command)
    }

    /// Whether every `Balanced` pool of the command thinks it worth it (others always do).
    pub(crate) fn approve(&self, command: &Command) -> Result<(), Refusal> {
        let mut by_pool: BTreeMap<&str, (f64, f64, Policy)> = BTreeMap::new();
        for &i in &command.candidates {
            let c = &self.candidates[i];
            let entry = by_pool
                .entry(c.node_pool.as_str())
                .or_insert((0.0, 0.0, c.policy));
            entry.0 += c.price;
            entry.1 += c.reschedule_cost;
        }
        let several = by_pool.len() > 1;
        for (pool, (price, disruption, policy)) in by_pool {
            if policy != Policy::Balanced {
                continue;
            }
            let savings = if several && command.price_before > 0.0 {
                command.savings() * price / command.price_before
            } else {
                command.savings()
            };
            let totals = self.totals.get(pool).copied().unwrap_or_default();
            let score = BalancedScore::new(savings, disruption, totals, self.options.balanced_k);
            if !score.approved() {
                return Err(Refusal::NotWorthIt {
                    savings_percent: score.savings_fraction * 100.0,
                    disruption_percent: score.disruption_fraction * 100.0,
                    score: score.score(),
                    threshold: score.threshold(),
                });
            }
        }
        Ok(())
    }
}

/// `claim` restricted to one capacity type.
fn pinned(claim: &NewClaim, capacity_type: &str) -> NewClaim {
    let mut pinned = claim.clone();
    let set = pinned.requirements.set_of(CAPACITY_TYPE).map_or_else(
        || ValueSet::single(capacity_type),
        |s| s.intersection(&ValueSet::single(capacity_type)),
    );
    pinned.requirements.set(CAPACITY_TYPE, set);
    pinned
}
