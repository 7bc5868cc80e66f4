//! What disrupting a node costs, and whether `Balanced` thinks a move is worth it.
//!
//! As Karpenter computes them (`pkg/utils/disruption`):
//!
//! - a pod's **eviction cost** is `1 + controller.kubernetes.io/pod-deletion-cost / 2^27 +
//!   priority / 2^25`, clamped to `[-10, 10]`;
//! - a node's **disruption cost** (the order candidates are tried in) is the sum of its pods'
//!   eviction costs times the share of its `expireAfter` lifetime still ahead (a node about to
//!   expire costs little to disrupt);
//! - a node's **reschedule cost** (what `Balanced` weighs) is `1 + Σ max(0, eviction cost)`.
//!
//! **Balanced** scores a move as
//!
//! ```text
//! score = (savings / pool cost) / (move's reschedule cost / pool's reschedule cost)
//! ```
//!
//! — the share of the pool's $/h the move saves over the share of the pool's disruption it
//! causes — and approves it when `score ≥ 1 / k` (k = 2): a move must save at least half as large
//! a share of the pool's cost as the share of its pods it disturbs. Deleting a node saves its
//! whole price; a replacement that saves 1% of a node's price scores about 0.01 and is refused.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

/// `controller.kubernetes.io/pod-deletion-cost`.
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// A pool's totals, the denominators of the `Balanced` score.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PoolTotals {
    /// $/h of every node of the pool.
    pub cost: f64,
    /// Σ reschedule cost of every node of the pool.
    pub disruption_cost: f64,
}

/// The cost of evicting one pod.
pub fn eviction_cost(pod: &Pod) -> f64 {
    let mut cost = 1.0;
    if let Some(value) = pod.annotations().get(POD_DELETION_COST)
        && let Ok(deletion) = value.trim().parse::<i32>()
    {
        cost += f64::from(deletion) / 2f64.powi(27);
    }
    if let Some(priority) = pod.spec.as_ref().and_then(|s| s.priority) {
        cost += f64::from(priority) / 2f64.powi(25);
    }
    cost.clamp(-10.0, 10.0)
}

/// The share of a node's lifetime still ahead: `1` without `expireAfter`, `0` once expired.
pub fn lifetime_remaining(
    created: Option<Timestamp>,
    expire_after_ms: Option<u128>,
    now: Timestamp,
) -> f64 {
    let (Some(created), Some(total)) = (created, expire_after_ms) else {
        return 1.0;
    };
    if total == 0 {
        return 0.0;
    }
    let age = (now.as_millisecond() - created.as_millisecond()).max(0) as f64;
    ((total as f64 - age) / total as f64).clamp(0.0, 1.0)
}

/// The share of the claim's `expireAfter` lifetime still ahead at `now` (1 without one).
pub fn claim_lifetime_remaining(claim: &crate::api::NodeClaim, now: Timestamp) -> f64 {
    let expire = crate::api::duration::parse_nillable(&claim.spec.expire_after)
        .ok()
        .flatten()
        .map(|d| d.as_millis());
    let created = claim.metadata.creation_timestamp.as_ref().map(|t| t.0);
    lifetime_remaining(created, expire, now)
}

/// The order in which candidates are tried: Σ eviction cost × lifetime remaining.
pub fn disruption_cost<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    lifetime_remaining: f64,
) -> f64 {
    pods.into_iter().map(eviction_cost).sum::<f64>() * lifetime_remaining
}

/// What moving a node's pods disrupts: `1 + Σ max(0, eviction cost)`.
pub fn reschedule_cost<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> f64 {
    1.0 + pods
        .into_iter()
        .map(|p| eviction_cost(p).max(0.0))
        .sum::<f64>()
}

/// The `Balanced` score of one move in one pool.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BalancedScore {
    /// Savings / the pool's cost.
    pub savings_fraction: f64,
    /// The move's reschedule cost / the pool's.
    pub disruption_fraction: f64,
    pub k: f64,
}

impl BalancedScore {
    pub fn new(savings: f64, move_disruption: f64, totals: PoolTotals, k: f64) -> Self {
        if totals.cost <= 0.0 || totals.disruption_cost <= 0.0 {
            return Self {
                savings_fraction: 0.0,
                disruption_fraction: 0.0,
                k,
            };
        }
        Self {
            savings_fraction: savings / totals.cost,
            disruption_fraction: move_disruption / totals.disruption_cost,
            k,
        }
    }

    /// Savings share over disruption share (0 when nothing is saved).
    pub fn score(&self) -> f64 {
        if self.savings_fraction <= 0.0 {
            return 0.0;
        }
        if self.disruption_fraction == 0.0 {
            return f64::INFINITY;
        }
        self.savings_fraction / self.disruption_fraction
    }

    /// `1 / k`.
    pub fn threshold(&self) -> f64 {
        1.0 / self.k
    }

    pub fn approved(&self) -> bool {
        self.score() >= self.threshold()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(annotations: serde_json::Value, priority: Option<i32>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "annotations": annotations},
            "spec": {"containers": [], "priority": priority}
        }))
        .unwrap()
    }

    #[test]
    fn eviction_cost_reads_deletion_cost_and_priority() {
        assert_eq!(eviction_cost(&pod(json!({}), None)), 1.0);
        let expensive = pod(json!({POD_DELETION_COST: "134217728"}), None);
        assert_eq!(eviction_cost(&expensive), 2.0);
        let critical = pod(json!({}), Some(2_000_000_000));
        assert_eq!(eviction_cost(&critical), 10.0, "clamped");
        let cheap = pod(json!({POD_DELETION_COST: "-2147483648"}), None);
        assert_eq!(eviction_cost(&cheap), -10.0, "clamped");
        assert_eq!(
            eviction_cost(&pod(json!({POD_DELETION_COST: "x"}), None)),
            1.0
        );
    }

    #[test]
    fn lifetime_remaining_shrinks_to_expiry() {
        let t = |s: &str| -> Timestamp { s.parse().unwrap() };
        let created = Some(t("2026-11-26T00:00:00Z"));
        let day = Some(24 * 3600 * 1000);
        assert_eq!(
            lifetime_remaining(created, None, t("2026-11-27T00:00:00Z")),
            1.0
        );
        assert_eq!(
            lifetime_remaining(created, day, t("2026-11-26T06:00:00Z")),
            0.75
        );
        assert_eq!(
            lifetime_remaining(created, day, t("2026-11-28T00:00:00Z")),
            0.0
        );
    }

    #[test]
    fn balanced_weighs_savings_against_disruption() {
        let totals = PoolTotals {
            cost: 2.0,
            disruption_cost: 8.0,
        };
        // A lightly loaded node (2 of 8) replaced for 40% of its $1/h: (0.4/2) / (2/8) = 0.8.
        let good = BalancedScore::new(0.4, 2.0, totals, 2.0);
        assert!((good.score() - 0.8).abs() < 1e-9);
        assert!(good.approved());
        // The same node saving 1%: 0.02.
        assert!(!BalancedScore::new(0.01, 2.0, totals, 2.0).approved());
        // Nothing saved is never approved; an empty move is.
        assert!(!BalancedScore::new(0.0, 2.0, totals, 2.0).approved());
        assert!(BalancedScore::new(1.0, 0.0, totals, 2.0).approved());
    }
}
