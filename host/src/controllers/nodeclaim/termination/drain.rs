//! The drain decision, pure: given a node's pods, the claim's termination deadline and the clock,
//! which pods to evict now, which to delete now, and which the drain waits for. Karpenter's rules
//! (`terminator.Drain`, its eviction queue and `utils/pod`):
//!
//! - a pod holds the drain up unless it is terminal (`Succeeded`/`Failed`), static (a mirror pod,
//!   owned by its Node), tolerates the `karpenter.sh/disrupted:NoSchedule` taint, or has been
//!   terminating for more than a minute past its deletion timestamp;
//! - pods are evicted in four groups, each only once the previous one is gone: non-critical
//!   non-DaemonSet, non-critical DaemonSet, critical non-DaemonSet, critical DaemonSet (critical:
//!   priority class `system-cluster-critical` or `system-node-critical`);
//! - a pod with an active `karpenter.sh/do-not-disrupt` annotation is not evicted (and holds its
//!   group up);
//! - with a deadline (the claim's `terminationGracePeriod` after its deletion), a pod is deleted
//!   — not evicted: PodDisruptionBudgets and do-not-disrupt no longer count — once less than its
//!   own `terminationGracePeriodSeconds` is left, with the time left as its grace period (at least
//!   1 s, so the pod is never removed from etcd before its kubelet stops it); in every group at
//!   once. A pod already terminating whose deletion timestamp lies past the deadline is deleted
//!   again with the shorter grace period.

use std::fmt;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use super::first_few;
use crate::rules::pods::{do_not_disrupt, is_static, owned_by_daemonset, tolerates_disruption};
use crate::scheduling::convert::is_terminal;

/// How long past its deletion timestamp a terminating pod still holds the drain up (Karpenter's
/// `IsStuckTerminating`: a minute for the kubelet to finish before the node goes).
pub const STUCK_TERMINATING: SignedDuration = SignedDuration::from_secs(60);

/// A pod's `terminationGracePeriodSeconds` when the spec has none (the API server's default).
pub const DEFAULT_POD_GRACE_SECONDS: i64 = 30;

/// The priority classes whose pods go last.
const CRITICAL_PRIORITY_CLASSES: [&str; 2] = ["system-cluster-critical", "system-node-critical"];

/// Karpenter's drain groups, in eviction order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    NonCritical,
    NonCriticalDaemon,
    Critical,
    CriticalDaemon,
}

impl Group {
    /// The group of a pod.
    pub fn of(pod: &Pod) -> Self {
        let critical = pod
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.as_deref())
            .is_some_and(|class| CRITICAL_PRIORITY_CLASSES.contains(&class));
        match (critical, owned_by_daemonset(pod)) {
            (false, false) => Self::NonCritical,
            (false, true) => Self::NonCriticalDaemon,
            (true, false) => Self::Critical,
            (true, true) => Self::CriticalDaemon,
        }
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NonCritical => "non-critical",
            Self::NonCriticalDaemon => "non-critical DaemonSet",
            Self::Critical => "critical",
            Self::CriticalDaemon => "critical DaemonSet",
        })
    }
}

/// What the drain does with a pod that holds it up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Evict it now (the Eviction API, which honours PodDisruptionBudgets).
    Evict,
    /// Delete it now with this grace period (seconds): the deadline is near.
    Delete { grace_seconds: i64 },
    /// Leave it for now.
    Wait(Wait),
}

/// Why the drain leaves a pod for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// It is terminating already.
    Terminating,
    /// It carries an active `karpenter.sh/do-not-disrupt`.
    DoNotDisrupt,
    /// An earlier group is still on the node.
    Behind(Group),
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Evict => f.write_str("evicting"),
            Self::Delete { grace_seconds } => write!(f, "deleting, {grace_seconds}s grace"),
            Self::Wait(Wait::Terminating) => f.write_str("terminating"),
            Self::Wait(Wait::DoNotDisrupt) => f.write_str("do-not-disrupt"),
            Self::Wait(Wait::Behind(group)) => write!(f, "after the {group} pods"),
        }
    }
}

/// The drain's decision for every pod that holds the node up, in the order of the input.
#[derive(Debug, Default)]
pub struct Plan<'a> {
    pub pods: Vec<(&'a Pod, Decision)>,
}

impl<'a> Plan<'a> {
    /// Whether no pod holds the node up any more.
    pub fn drained(&self) -> bool {
        self.pods.is_empty()
    }

    /// `N pods left: ns/a (evicting), ns/b (do-not-disrupt) and 3 more` (at most `shown` named).
    pub fn summary(&self, shown: usize) -> String {
        let names = first_few(
            self.pods
                .iter()
                .map(|(pod, decision)| format!("{} ({decision})", key(pod))),
            shown,
        );
        let n = self.pods.len();
        format!("{n} pod{} left: {names}", if n == 1 { "" } else { "s" })
    }
}

/// `namespace/name`.
pub fn key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

/// Decides what to do with each of a node's pods now.
pub fn plan(pods: &[Pod], deadline: Option<Timestamp>, now: Timestamp) -> Plan<'_> {
    let mut decided: Vec<(&Pod, Option<Decision>)> = pods
        .iter()
        .filter(|pod| blocks(pod, now))
        .map(|pod| (pod, deadline.and_then(|d| deletion(pod, d, now))))
        .collect();
    let first = decided
        .iter()
        .filter(|(_, d)| d.is_none())
        .map(|(pod, _)| Group::of(pod))
        .min();
    for (pod, decision) in &mut decided {
        if decision.is_some() {
            continue;
        }
        let group = Group::of(pod);
        *decision = Some(match first {
            Some(first) if group > first => Decision::Wait(Wait::Behind(first)),
            _ if terminating(pod) => Decision::Wait(Wait::Terminating),
            _ if do_not_disrupt(pod, now) => Decision::Wait(Wait::DoNotDisrupt),
            _ => Decision::Evict,
        });
    }
    Plan {
        pods: decided
            .into_iter()
            .filter_map(|(pod, d)| d.map(|d| (pod, d)))
            .collect(),
    }
}

/// Whether the drain waits for the pod to leave (Karpenter's `IsWaitingEviction`).
pub fn blocks(pod: &Pod, now: Timestamp) -> bool {
    !is_terminal(pod) && drainable(pod, now)
}

/// Whether the drain is concerned with the pod at all (Karpenter's `IsDrainable`): not static,
/// not tolerating the disrupted taint, not stuck terminating.
pub fn drainable(pod: &Pod, now: Timestamp) -> bool {
    !is_static(pod) && !tolerates_disruption(pod) && !stuck_terminating(pod, now)
}

/// `Some(grace)` when the deadline is near enough that the pod must be deleted now.
fn deletion(pod: &Pod, deadline: Timestamp, now: Timestamp) -> Option<Decision> {
    let left = now.duration_until(deadline);
    let grace_seconds = left.as_secs().max(1);
    let needed = match deletion_timestamp(pod) {
        // Deleted already, but its grace period runs past the deadline: shorten it (if a new
        // delete would).
        Some(deleted) => {
            deadline.duration_until(deleted).is_positive()
                && now.duration_until(deleted) > SignedDuration::from_secs(grace_seconds)
        }
        None => {
            let own = pod
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(DEFAULT_POD_GRACE_SECONDS);
            left < SignedDuration::from_secs(own)
        }
    };
    needed.then_some(Decision::Delete { grace_seconds })
}

fn terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn deletion_timestamp(pod: &Pod) -> Option<Timestamp> {
    pod.metadata.deletion_timestamp.as_ref().map(|t| t.0)
}

fn stuck_terminating(pod: &Pod, now: Timestamp) -> bool {
    deletion_timestamp(pod).is_some_and(|deleted| deleted.duration_until(now) > STUCK_TERMINATING)
}

#[cfg(test)]
mod tests;
