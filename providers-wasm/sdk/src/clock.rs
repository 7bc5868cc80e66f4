//! Time, from the host: wall-clock now and a sleep that suspends the call without blocking a host
//! thread (it counts against the call's wall-clock limit).

use std::time::Duration;

use crate::bindings::capstan::provider::host;

/// Milliseconds since the Unix epoch.
pub fn now_millis() -> u64 {
    host::now()
}

/// Suspends this call for `millis` milliseconds.
pub fn sleep_millis(millis: u64) {
    host::sleep(millis);
}

/// Suspends this call for `duration` (rounded down to milliseconds, saturating).
pub fn sleep(duration: Duration) {
    host::sleep(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX));
}
