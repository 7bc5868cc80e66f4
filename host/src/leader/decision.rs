//! The pure part of leader election: given what the Lease says and how long this replica has seen
//! it unchanged, may this replica take or keep it, and what does it write?

use std::time::Duration;

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

/// What this replica may do with the Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nobody holds it (never held, or released): take it now.
    Free,
    /// This replica holds it: renew it.
    Held,
    /// Another replica held it but has not renewed it for a whole lease duration: take it over.
    Expired {
        /// The replica that stopped renewing.
        holder: String,
    },
    /// Another replica holds it and renewed it recently: wait.
    HeldByOther {
        /// The holder.
        holder: String,
        /// How long until it expires unless renewed.
        expires_in: Duration,
    },
}

impl Decision {
    /// Whether this replica should write itself into the Lease.
    pub fn may_take(&self) -> bool {
        !matches!(self, Self::HeldByOther { .. })
    }
}

/// Decides, from the Lease's holder and duration and from how long this replica has observed the
/// record unchanged (`unchanged_for`, measured on this replica's monotonic clock as client-go does,
/// so clock skew between replicas does not matter).
pub fn decide(
    holder: Option<&str>,
    lease_duration: Duration,
    unchanged_for: Duration,
    identity: &str,
) -> Decision {
    match holder {
        None | Some("") => Decision::Free,
        Some(holder) if holder == identity => Decision::Held,
        Some(holder) if unchanged_for >= lease_duration => Decision::Expired {
            holder: holder.to_owned(),
        },
        Some(holder) => Decision::HeldByOther {
            holder: holder.to_owned(),
            expires_in: lease_duration - unchanged_for,
        },
    }
}

/// How long a follower waits before its next attempt: the retry period, or less when the
/// holder's lease runs out sooner (so a dead holder is replaced when its lease ends, not up to a
/// retry period later).
pub fn next_attempt(decision: &Decision, retry_period: Duration) -> Duration {
    match decision {
        Decision::HeldByOther { expires_in, .. } => {
            (*expires_in + Duration::from_millis(10)).min(retry_period)
        }
        _ => retry_period,
    }
}

/// The Lease spec `identity` writes to take or renew the Lease at `now`: a renewal keeps the
/// acquire time and transition count; taking it over from someone (or from nobody, after a
/// release) starts a new acquire time and counts a transition.
pub fn claimed(
    previous: Option<&LeaseSpec>,
    identity: &str,
    lease_duration: Duration,
    now: Timestamp,
) -> LeaseSpec {
    let ours = previous.is_some_and(|p| p.holder_identity.as_deref() == Some(identity));
    let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(
            i32::try_from(lease_duration.as_secs().max(1)).unwrap_or(i32::MAX),
        ),
        acquire_time: if ours {
            previous.and_then(|p| p.acquire_time.clone())
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(if ours || previous.is_none() {
            transitions
        } else {
            transitions.saturating_add(1)
        }),
        ..LeaseSpec::default()
    }
}

/// The Lease spec after its holder gives it up at `now`: no holder, so the next follower's poll
/// takes it ([`decide`] says [`Decision::Free`]), and a 1 s duration for other implementations.
pub fn released(spec: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        renew_time: Some(MicroTime(now)),
        ..spec.clone()
    }
}

/// The renew deadline and retry period derived from a lease duration, in controller-runtime's
/// proportions (15 s / 10 s / 2 s): renew deadline 2/3 of the duration, retry period 2/15, at
/// least 50 ms.
pub fn timings(lease_duration: Duration) -> (Duration, Duration) {
    let renew_deadline = lease_duration * 2 / 3;
    let retry_period = (lease_duration * 2 / 15).max(Duration::from_millis(50));
    (renew_deadline, retry_period)
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_secs(15);

    #[test]
    fn a_lease_without_holder_is_free() {
        assert_eq!(decide(None, D, Duration::ZERO, "me"), Decision::Free);
        assert_eq!(decide(Some(""), D, Duration::ZERO, "me"), Decision::Free);
        assert!(Decision::Free.may_take());
    }

    #[test]
    fn a_lease_held_by_self_is_renewed_even_when_old() {
        let d = decide(Some("me"), D, Duration::from_secs(60), "me");
        assert_eq!(d, Decision::Held);
        assert!(d.may_take());
    }

    #[test]
    fn a_fresh_lease_of_another_is_left_alone() {
        let d = decide(Some("other"), D, Duration::from_secs(5), "me");
        assert_eq!(
            d,
            Decision::HeldByOther {
                holder: "other".into(),
                expires_in: Duration::from_secs(10)
            }
        );
        assert!(!d.may_take());
        assert!(!decide(Some("other"), D, D - Duration::from_millis(1), "me").may_take());
    }

    #[test]
    fn an_expired_lease_of_another_is_taken_over() {
        let d = decide(Some("other"), D, D, "me");
        assert_eq!(
            d,
            Decision::Expired {
                holder: "other".into()
            }
        );
        assert!(d.may_take());
    }

    #[test]
    fn a_follower_retries_when_the_holders_lease_ends() {
        let retry = Duration::from_secs(2);
        let soon = Decision::HeldByOther {
            holder: "other".into(),
            expires_in: Duration::from_millis(300),
        };
        assert_eq!(next_attempt(&soon, retry), Duration::from_millis(310));
        let later = Decision::HeldByOther {
            holder: "other".into(),
            expires_in: Duration::from_secs(9),
        };
        assert_eq!(next_attempt(&later, retry), retry);
        assert_eq!(next_attempt(&Decision::Free, retry), retry);
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap()
    }

    #[test]
    fn a_new_lease_starts_with_no_transition() {
        let spec = claimed(None, "me", D, at(100));
        assert_eq!(spec.holder_identity.as_deref(), Some("me"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(100))));
        assert_eq!(spec.renew_time, Some(MicroTime(at(100))));
    }

    #[test]
    fn renewing_keeps_the_acquire_time_and_taking_over_counts_a_transition() {
        let mine = claimed(None, "me", D, at(100));
        let renewed = claimed(Some(&mine), "me", D, at(110));
        assert_eq!(renewed.acquire_time, Some(MicroTime(at(100))));
        assert_eq!(renewed.renew_time, Some(MicroTime(at(110))));
        assert_eq!(renewed.lease_transitions, Some(0));
        let taken = claimed(Some(&renewed), "other", D, at(130));
        assert_eq!(taken.holder_identity.as_deref(), Some("other"));
        assert_eq!(taken.acquire_time, Some(MicroTime(at(130))));
        assert_eq!(taken.lease_transitions, Some(1));
    }

    #[test]
    fn a_released_lease_is_free_at_once() {
        let mine = claimed(None, "me", D, at(100));
        let free = released(&mine, at(105));
        assert_eq!(free.holder_identity, None);
        assert_eq!(free.lease_transitions, Some(0));
        assert_eq!(free.renew_time, Some(MicroTime(at(105))));
        assert_eq!(
            decide(
                free.holder_identity.as_deref(),
                Duration::from_secs(1),
                Duration::ZERO,
                "other"
            ),
            Decision::Free
        );
        let next = claimed(Some(&free), "other", D, at(106));
        assert_eq!(next.lease_transitions, Some(1));
    }

    #[test]
    fn timings_follow_controller_runtime_proportions() {
        assert_eq!(
            timings(Duration::from_secs(15)),
            (Duration::from_secs(10), Duration::from_secs(2))
        );
        assert_eq!(
            timings(Duration::from_millis(30)).1,
            Duration::from_millis(50)
        );
    }
}
