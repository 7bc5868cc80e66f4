//! A reboot in place, as Karpenter v1.15's reboot controller drives it: what to do next with a
//! NodeClaim whose `Rebooting` condition is `True`, decided from the claim, its Node and the clock
//! (pure; the writes are [`crate::controllers::nodeclaim::reboot`]'s).
//!
//! A repair commits a reboot by setting `Rebooting=True` (reason `RebootRequested`) and, when the
//! drain is bounded, `karpenter.sh/reboot-termination-grace-period`. Then:
//!
//! 1. **Requested**: the Node is tainted `karpenter.sh/rebooting:NoSchedule` and drained: its pods
//!    are evicted (PodDisruptionBudgets and `do-not-disrupt` hold) until it is empty, at least
//!    [`MIN_DRAIN`] after the request, or until the bound has passed, when the pods left ride the
//!    reboot (they are never deleted); a bound of `0s` skips the drain. The Node's boot ID is
//!    recorded (`karpenter.sh/reboot-pre-boot-id`) and the provider's `reboot` called with an
//!    operation ID that is the same on every retry and across restarts ([`operation_id`]); a
//!    retryable error is retried for [`ISSUANCE_TIMEOUT`].
//! 2. **Issued**: `Initialized` goes `Unknown` (reason `Rebooting`) and the Node loses
//!    `karpenter.sh/initialized`; once the Node's boot ID differs from the one recorded the taint
//!    goes, and once it is also `Ready` the reboot succeeded (`Rebooting=False`,
//!    `RebootSucceeded`) and initialization runs again. It fails after [`OBSERVATION_WINDOW`].
//! 3. A failure (`RebootFailed`) replaces the node: the claim is deleted, its drain bounded by the
//!    reboot's; only a request that cannot be read (an unparsable bound) fails without a
//!    replacement.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use crate::api::NodeClaim;
use crate::api::duration as go_duration;
use crate::api::labels::{REBOOT_GRACE_PERIOD, REBOOT_PRE_BOOT_ID, REBOOTS};
use crate::api::nodeclaim::conditions::{
    self, INITIALIZED, REBOOT_ISSUED, REBOOT_REQUESTED, REBOOTING, REBOOTING_REASON,
};
use crate::api::shared::find_condition;
use crate::rules::nodes::node_ready;

/// How long after the reboot was issued the node has to come back with a new boot.
pub const OBSERVATION_WINDOW: Duration = Duration::from_secs(20 * 60);
/// How long the provider may answer `retryable` before the reboot fails.
pub const ISSUANCE_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// The least time between the request and the reboot when the node is drained, for pods bound by
/// a scheduler that had not seen the taint yet.
pub const MIN_DRAIN: Duration = Duration::from_secs(5);
/// How many reboots within [`REBOOT_WINDOW`] a node gets before a reboot repair replaces it.
pub const REBOOTS_BEFORE_REPLACEMENT: usize = 2;
/// The window [`REBOOTS_BEFORE_REPLACEMENT`] counts in.
pub const REBOOT_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// Where a reboot under way is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Committed: draining, then issuing.
    Requested,
    /// The provider accepted it: waiting for the new boot.
    Issued,
}

/// A reboot under way, as the claim records it.
#[derive(Clone, Debug, PartialEq)]
pub struct Episode {
    pub phase: Phase,
    /// When it was committed (`Rebooting`'s last transition).
    pub requested_at: Timestamp,
    /// When it was issued (`Initialized` went `Unknown`), once issued.
    pub issued_at: Option<Timestamp>,
    /// The boot ID before the reboot, once recorded.
    pub pre_boot_id: Option<String>,
    /// The drain bound: `Ok(None)` unbounded, `Ok(Some(0))` no drain; `Err` unreadable.
    pub grace: Result<Option<Duration>, String>,
    /// The condition's message (why it reboots).
    pub message: String,
}

/// How a reboot ended, as `karpenter_nodes_reboots_total{result}` counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    ProviderError,
    RecoveryTimeout,
    InvalidRequest,
}

impl Outcome {
    /// The metric's label value.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::ProviderError => "provider_error",
            Outcome::RecoveryTimeout => "recovery_timeout",
            Outcome::InvalidRequest => "invalid_request",
        }
    }

    /// Whether a failure replaces the node (all but an unreadable request).
    pub fn replaces(self) -> bool {
        matches!(self, Outcome::ProviderError | Outcome::RecoveryTimeout)
    }
}

/// What the reboot controller does next.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// The reboot failed.
    Fail { outcome: Outcome, message: String },
    /// The Node is gone: look again after this long (until the phase's deadline).
    AwaitNode(Duration),
    /// Taint and drain the Node (evict, never delete), then record its boot ID and issue.
    /// `until`: when the pods left may ride the reboot (`None`: only once drained); `floor`: not
    /// before this, drained or not.
    Drain {
        until: Option<Timestamp>,
        floor: Timestamp,
    },
    /// Taint the Node, record its boot ID (if not yet) and call the provider's `reboot`.
    Issue,
    /// The boot ID changed before the provider's answer was recorded: it rebooted; move to
    /// `Issued` without calling again.
    Issued,
    /// Issued, not back yet: drop the taint once `booted`; look again.
    Watch { booted: bool },
    /// Back with a new boot and `Ready`.
    Succeed,
}

impl Episode {
    /// The reboot under way on `claim`, if one is (`Rebooting=True` with a phase reason).
    pub fn of(claim: &NodeClaim) -> Option<Self> {
        let conditions = &claim.status.as_ref()?.conditions;
        let rebooting = find_condition(conditions, REBOOTING).filter(|c| c.is_true())?;
        let phase = match rebooting.reason.as_deref().unwrap_or_default() {
            REBOOT_REQUESTED => Phase::Requested,
            REBOOT_ISSUED => Phase::Issued,
            _ => return None,
        };
        let issued_at = find_condition(conditions, INITIALIZED)
            .filter(|c| {
                c.status == crate::api::ConditionStatus::Unknown
                    && c.reason.as_deref() == Some(REBOOTING_REASON)
            })
            .map(|c| c.last_transition_time.0);
        let grace = match claim.annotations().get(REBOOT_GRACE_PERIOD) {
            None => Ok(None),
            Some(text) => go_duration::parse(text)
                .map(Some)
                .map_err(|err| format!("{REBOOT_GRACE_PERIOD} {text:?}: {err}")),
        };
        Some(Self {
            phase,
            requested_at: rebooting.last_transition_time.0,
            issued_at,
            pre_boot_id: claim.annotations().get(REBOOT_PRE_BOOT_ID).cloned(),
            grace,
            message: rebooting.message.clone().unwrap_or_default(),
        })
    }

    /// When the current phase runs out: the observation window from the issue; the issuance
    /// timeout from when issuing began (`issuing_since`, kept by the controller), if it has.
    pub fn deadline(&self, issuing_since: Option<Timestamp>) -> Option<Timestamp> {
        let (from, window) = match self.phase {
            Phase::Issued => (self.issued_at?, OBSERVATION_WINDOW),
            Phase::Requested => (issuing_since?, ISSUANCE_TIMEOUT),
        };
        after(from, window)
    }
}

/// The provider's idempotency key for one reboot: the same for every call of the episode, on any
/// replica, after any restart (the claim's UID, the request time and the boot ID before).
pub fn operation_id(claim_uid: &str, episode: &Episode) -> String {
    format!(
        "{claim_uid}-{}-{}",
        episode.requested_at.as_nanosecond(),
        episode.pre_boot_id.as_deref().unwrap_or_default()
    )
}

/// The boot ID a Node reports (empty if none).
pub fn boot_id(node: &Node) -> &str {
    node.status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map_or("", |i| i.boot_id.as_str())
}

fn after(from: Timestamp, d: Duration) -> Option<Timestamp> {
    from.checked_add(SignedDuration::try_from(d).ok()?).ok()
}

/// What to do next with `episode`, its Node (if it still exists) at `now`; `issuing_since` is
/// when the controller began issuing it (process-local, as Karpenter: a restart gives it another
/// [`ISSUANCE_TIMEOUT`]).
pub fn next(
    episode: &Episode,
    node: Option<&Node>,
    issuing_since: Option<Timestamp>,
    now: Timestamp,
) -> Step {
    let deadline = episode.deadline(issuing_since);
    let Some(node) = node else {
        // Without a Node there is no drain to start issuing: bound the wait from the request.
        let deadline = deadline.or_else(|| after(episode.requested_at, ISSUANCE_TIMEOUT));
        return match deadline {
            Some(d) if now > d => timed_out(episode),
            _ => Step::AwaitNode(Duration::from_secs(15)),
        };
    };
    if deadline.is_some_and(|d| now > d) {
        return timed_out(episode);
    }
    let booted = episode
        .pre_boot_id
        .as_deref()
        .is_some_and(|before| before != boot_id(node));
    match episode.phase {
        Phase::Requested => {
            let grace = match &episode.grace {
                Ok(grace) => *grace,
                Err(err) => {
                    return Step::Fail {
                        outcome: Outcome::InvalidRequest,
                        message: format!("invalid reboot request: {err}"),
                    };
                }
            };
            if episode.pre_boot_id.is_some() {
                // Issuing began (the drain is over): a new boot says the call went through.
                return if booted { Step::Issued } else { Step::Issue };
            }
            if grace == Some(Duration::ZERO) {
                return Step::Issue;
            }
            let floor = after(episode.requested_at, MIN_DRAIN).unwrap_or(episode.requested_at);
            let until = grace.and_then(|g| after(episode.requested_at, g.max(MIN_DRAIN)));
            Step::Drain { until, floor }
        }
        Phase::Issued if booted && node_ready(node) => Step::Succeed,
        Phase::Issued => Step::Watch { booted },
    }
}

fn timed_out(episode: &Episode) -> Step {
    let (outcome, message) = match episode.phase {
        Phase::Issued => (
            Outcome::RecoveryTimeout,
            "node did not recover within the observation window",
        ),
        Phase::Requested => (
            Outcome::ProviderError,
            "reboot was not issued within the issuance timeout",
        ),
    };
    Step::Fail {
        outcome,
        message: message.to_owned(),
    }
}

/// Whether the drain is over: drained and past the floor, or past the bound.
pub fn drain_over(
    drained: bool,
    until: Option<Timestamp>,
    floor: Timestamp,
    now: Timestamp,
) -> bool {
    (drained && now >= floor) || until.is_some_and(|u| now >= u)
}

/// The reboots committed on `claim` within [`REBOOT_WINDOW`] of `now` (from [`REBOOTS`]).
pub fn recent_reboots(claim: &NodeClaim, now: Timestamp) -> Vec<Timestamp> {
    let Some(text) = claim.annotations().get(REBOOTS) else {
        return Vec::new();
    };
    let window = SignedDuration::try_from(REBOOT_WINDOW).unwrap_or(SignedDuration::MAX);
    text.split(',')
        .filter_map(|t| t.trim().parse::<Timestamp>().ok())
        .filter(|t| now.duration_since(*t) < window)
        .collect()
}

/// Whether a reboot repair of `claim` becomes a replacement: it rebooted
/// [`REBOOTS_BEFORE_REPLACEMENT`] times within the window already.
pub fn exhausted(claim: &NodeClaim, now: Timestamp) -> bool {
    recent_reboots(claim, now).len() >= REBOOTS_BEFORE_REPLACEMENT
}

/// [`REBOOTS`]' new value once a reboot is committed at `now` (the recent ones and `now`).
pub fn with_reboot(claim: &NodeClaim, now: Timestamp) -> String {
    let mut times = recent_reboots(claim, now);
    times.push(now);
    let keep = times.len().saturating_sub(REBOOTS_BEFORE_REPLACEMENT);
    times[keep..]
        .iter()
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// When `claim`'s last reboot ended well (`Rebooting=False`, `RebootSucceeded`): a repair
/// rule's toleration counts again from then.
pub fn rebooted_at(claim: &NodeClaim) -> Option<Timestamp> {
    let found = &claim.status.as_ref()?.conditions;
    find_condition(found, REBOOTING)
        .filter(|c| !c.is_true() && c.reason.as_deref() == Some(conditions::REBOOT_SUCCEEDED))
        .map(|c| c.last_transition_time.0)
}

#[cfg(test)]
mod tests;
