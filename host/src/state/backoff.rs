//! The retry policy of the host's watches.
//!
//! kube-runtime's default doubles from 0.8 s up to 30 s and resets only after two quiet minutes:
//! after an API-server outage of half a minute, the next attempt can be 30 s away, and every
//! controller waits that long before it sees the cluster again. Capstan's watches double from
//! 250 ms up to [`MAX_DELAY`], plus a jitter of up to as much again (so many watches do not retry
//! in step): an API server that is down sees at most a few requests per second per watch, and a
//! watch resumes within twice [`MAX_DELAY`] of its return.
//!
//! kube-runtime's stream backoff resets on every `Ok` item, and a watcher yields `Ok(Init)`
//! before each list attempt, failed ones too: a watch whose list always fails (a served kind
//! whose CRD is not installed) would retry every [`MIN_DELAY`] for ever — 150 lists a minute,
//! measured. So the delays here reset by time only: after [`RESET_AFTER`] without a failure.

use std::time::Duration;

use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::watcher::ExponentialBackoff;

/// The first retry delay.
pub const MIN_DELAY: Duration = Duration::from_millis(250);
/// The longest retry delay.
pub const MAX_DELAY: Duration = Duration::from_secs(2);
/// A watch that has not failed for this long starts again from [`MIN_DELAY`].
pub const RESET_AFTER: Duration = Duration::from_secs(60);

/// The backoff of one watch (each watch needs its own).
pub fn watch_backoff() -> impl Backoff + 'static {
    watch_backoff_up_to(MAX_DELAY)
}

/// [`watch_backoff`] with another longest delay (for a watch that fails for as long as an
/// admin has not installed something, rather than while the API server is away).
pub fn watch_backoff_up_to(max: Duration) -> impl Backoff + 'static {
    let builder = backon::ExponentialBuilder::default()
        .with_min_delay(MIN_DELAY)
        .with_max_delay(max)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetByTimeOnly(ResetTimerBackoff::new(
        ExponentialBackoff::from(builder),
        RESET_AFTER,
    ))
}

/// A backoff the stream's resets do not touch (see the module's documentation).
struct ResetByTimeOnly<B>(B);

impl<B: Backoff> Iterator for ResetByTimeOnly<B> {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.0.next()
    }
}

impl<B: Backoff> Backoff for ResetByTimeOnly<B> {
    fn reset(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_and_stay_bounded() {
        let mut backoff = watch_backoff();
        let delays: Vec<Duration> = (0..12).filter_map(|_| backoff.next()).collect();
        assert_eq!(delays.len(), 12, "a watch retries forever");
        // Jitter adds up to one more delay on top of the exponential one.
        assert!(
            delays[0] >= MIN_DELAY && delays[0] <= 2 * MIN_DELAY,
            "{delays:?}"
        );
        for d in &delays {
            assert!(*d <= 2 * MAX_DELAY, "{d:?} exceeds the bound: {delays:?}");
        }
        assert!(delays[11] >= MAX_DELAY, "{delays:?}");
    }

    #[test]
    fn the_streams_reset_after_each_list_attempt_does_not_restart_the_delays() {
        let mut backoff = watch_backoff();
        let mut last = Duration::ZERO;
        for _ in 0..8 {
            // What kube-runtime's stream backoff does on the watcher's `Ok(Init)`.
            backoff.reset();
            last = backoff.next().unwrap_or_default();
        }
        assert!(last >= MAX_DELAY, "{last:?}");
    }
}
