//! What node repair does about one node: pure, over the node's conditions, the provider's repair
//! policies, the clock and how many nodes of its pool are unhealthy.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;

use crate::runtime::types::RepairPolicy;

/// The share of a pool's nodes that may be unhealthy for repair to go on (Karpenter's 20%).
pub const ALLOWED_UNHEALTHY_PERCENT: usize = 20;

/// A repair policy as the host uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The node condition's type (`Ready`).
    pub condition_type: String,
    /// The status that makes it unhealthy (`False`, `Unknown`).
    pub condition_status: String,
    /// How long it may have that status before the node is replaced.
    pub toleration: Duration,
}

impl From<&RepairPolicy> for Policy {
    fn from(policy: &RepairPolicy) -> Self {
        Self {
            condition_type: policy.condition_type.clone(),
            condition_status: policy.condition_status.clone(),
            toleration: Duration::from_secs(policy.toleration_seconds),
        }
    }
}

/// The condition of a node that a policy matches, and when its toleration ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unhealthy {
    /// The condition's type.
    pub condition_type: String,
    /// Its status.
    pub condition_status: String,
    /// The policy's toleration.
    pub toleration: Duration,
    /// When the condition took that status plus the toleration; `None` when the condition has no
    /// `lastTransitionTime` (never repaired: the host cannot tell how long it has been so).
    pub repair_at: Option<Timestamp>,
}

/// Whether any policy matches one of `node`'s conditions now (however recently).
pub fn is_unhealthy(node: &Node, policies: &[Policy]) -> bool {
    unhealthy(node, policies).is_some()
}

/// The matching condition whose toleration ends first (Karpenter acts on the earliest).
pub fn unhealthy(node: &Node, policies: &[Policy]) -> Option<Unhealthy> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    policies
        .iter()
        .filter_map(|policy| {
            let condition = conditions.iter().find(|c| {
                c.type_ == policy.condition_type && c.status == policy.condition_status
            })?;
            let repair_at = condition.last_transition_time.as_ref().and_then(|t| {
                let toleration =
                    k8s_openapi::jiff::SignedDuration::try_from(policy.toleration).ok()?;
                t.0.checked_add(toleration).ok()
            });
            Some(Unhealthy {
                condition_type: policy.condition_type.clone(),
                condition_status: policy.condition_status.clone(),
                toleration: policy.toleration,
                repair_at,
            })
        })
        .min_by_key(|u| (u.repair_at.is_none(), u.repair_at))
}

/// How many of a pool's `total` nodes may be unhealthy with repair going on: 20%, rounded up
/// (as Karpenter, like a PodDisruptionBudget's percentages: one of three nodes may be).
pub fn allowed_unhealthy(total: usize) -> usize {
    (total * ALLOWED_UNHEALTHY_PERCENT).div_ceil(100)
}

/// What to do about one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No policy matches.
    Healthy,
    /// A policy matches, but its toleration has not run out (or cannot be told): look again then.
    Wait(Option<Duration>),
    /// Past its toleration, but too many of its pool's nodes are unhealthy.
    Blocked {
        /// The pool's unhealthy nodes.
        unhealthy: usize,
        /// The pool's nodes.
        total: usize,
    },
    /// Replace it.
    Repair(Unhealthy),
}

/// Decides about `node` at `now`, with `unhealthy`/`total` the counts of its pool's nodes (itself
/// included).
pub fn decide(
    node: &Node,
    policies: &[Policy],
    now: Timestamp,
    pool_unhealthy: usize,
    pool_total: usize,
) -> Decision {
    let Some(found) = unhealthy(node, policies) else {
        return Decision::Healthy;
    };
    let Some(repair_at) = found.repair_at else {
        return Decision::Wait(None);
    };
    if now < repair_at {
        let left = now
            .duration_until(repair_at)
            .try_into()
            .unwrap_or(Duration::ZERO);
        return Decision::Wait(Some(left));
    }
    if pool_unhealthy > allowed_unhealthy(pool_total) {
        return Decision::Blocked {
            unhealthy: pool_unhealthy,
            total: pool_total,
        };
    }
    Decision::Repair(found)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use proptest::prelude::*;

    use super::*;

    fn ready_policies(toleration: Duration) -> Vec<Policy> {
        ["False", "Unknown"]
            .into_iter()
            .map(|status| Policy {
                condition_type: "Ready".into(),
                condition_status: status.into(),
                toleration,
            })
            .collect()
    }

    fn node(conditions: &[(&str, &str, Option<Timestamp>)]) -> Node {
        Node {
            status: Some(NodeStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(type_, status, since)| NodeCondition {
                            type_: (*type_).into(),
                            status: (*status).into(),
                            last_transition_time: since.map(Time),
                            ..NodeCondition::default()
                        })
                        .collect(),
                ),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    #[test]
    fn a_matching_condition_waits_out_its_toleration_then_repairs() {
        let policies = ready_policies(Duration::from_secs(600));
        let sick = node(&[("Ready", "False", Some(at(0)))]);
        assert_eq!(
            decide(&sick, &policies, at(599), 1, 10),
            Decision::Wait(Some(Duration::from_secs(1)))
        );
        let Decision::Repair(found) = decide(&sick, &policies, at(600), 1, 10) else {
            panic!("not repaired at the end of the toleration");
        };
        assert_eq!(found.condition_type, "Ready");
        assert_eq!(found.condition_status, "False");
        assert_eq!(found.repair_at, Some(at(600)));

        // Ready=True, another status, another type, or no conditions at all: healthy.
        for healthy in [
            node(&[("Ready", "True", Some(at(0)))]),
            node(&[("MemoryPressure", "False", Some(at(0)))]),
            node(&[]),
            Node::default(),
        ] {
            assert_eq!(
                decide(&healthy, &policies, at(10_000), 0, 10),
                Decision::Healthy
            );
            assert!(!is_unhealthy(&healthy, &policies));
        }
        // No transition time: unhealthy (it counts toward the 20%) but never repaired.
        let unknown_since = node(&[("Ready", "Unknown", None)]);
        assert!(is_unhealthy(&unknown_since, &policies));
        assert_eq!(
            decide(&unknown_since, &policies, at(10_000), 1, 10),
            Decision::Wait(None)
        );
    }

    #[test]
    fn the_condition_whose_toleration_ends_first_wins() {
        let policies = vec![
            Policy {
                condition_type: "Ready".into(),
                condition_status: "False".into(),
                toleration: Duration::from_secs(1800),
            },
            Policy {
                condition_type: "DiskBroken".into(),
                condition_status: "True".into(),
                toleration: Duration::from_secs(30),
            },
        ];
        let sick = node(&[
            ("Ready", "False", Some(at(0))),
            ("DiskBroken", "True", Some(at(100))),
        ]);
        let found = unhealthy(&sick, &policies).unwrap();
        assert_eq!(found.condition_type, "DiskBroken");
        assert_eq!(found.repair_at, Some(at(130)));
    }

    #[test]
    fn more_than_twenty_percent_unhealthy_blocks_repair() {
        let policies = ready_policies(Duration::from_secs(60));
        let sick = node(&[("Ready", "False", Some(at(0)))]);
        // Karpenter's rounding: 20% rounded up.
        assert_eq!(allowed_unhealthy(0), 0);
        assert_eq!(allowed_unhealthy(1), 1);
        assert_eq!(allowed_unhealthy(3), 1);
        assert_eq!(allowed_unhealthy(5), 1);
        assert_eq!(allowed_unhealthy(6), 2);
        assert_eq!(allowed_unhealthy(10), 2);
        assert_eq!(allowed_unhealthy(11), 3);
        // One node of one, one of three: repaired. Two of three, two of five: blocked.
        assert!(matches!(
            decide(&sick, &policies, at(60), 1, 1),
            Decision::Repair(_)
        ));
        assert!(matches!(
            decide(&sick, &policies, at(60), 1, 3),
            Decision::Repair(_)
        ));
        assert_eq!(
            decide(&sick, &policies, at(60), 2, 3),
            Decision::Blocked {
                unhealthy: 2,
                total: 3
            }
        );
        assert_eq!(
            decide(&sick, &policies, at(60), 2, 5),
            Decision::Blocked {
                unhealthy: 2,
                total: 5
            }
        );
        assert!(matches!(
            decide(&sick, &policies, at(60), 2, 10),
            Decision::Repair(_)
        ));
    }

    proptest! {
        /// Repair goes on exactly while the unhealthy share is at most 20% rounded up, and the
        /// allowance never exceeds the pool or falls below 20% of it.
        #[test]
        fn the_threshold_is_twenty_percent_rounded_up(total in 1usize..500, unhealthy in 1usize..500) {
            let unhealthy = unhealthy.min(total);
            let allowed = allowed_unhealthy(total);
            prop_assert!(allowed <= total);
            prop_assert!(allowed * 100 >= total * 20);
            prop_assert!((allowed - 1) * 100 < total * 20);
            let policies = ready_policies(Duration::from_secs(1));
            let sick = node(&[("Ready", "False", Some(at(0)))]);
            let decision = decide(&sick, &policies, at(5), unhealthy, total);
            prop_assert_eq!(matches!(decision, Decision::Repair(_)), 5 * (unhealthy - 1) < total);
        }
    }
}
