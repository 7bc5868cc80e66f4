//! Polling with a deadline.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// Polls `check` every 100 ms until it returns `Ok(Some(value))`, for at most `timeout`.
///
/// `Ok(None)` means "not yet"; an `Err` is remembered (shown in the timeout error) and polling
/// goes on, so transient API errors do not fail a wait.
pub async fn wait_until<T, E, F, Fut>(timeout: Duration, what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<Option<T>, E>>,
    E: std::fmt::Display,
{
    let deadline = Instant::now() + timeout;
    let mut last = None;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = Some(e.to_string()),
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                timeout,
                what: what.to_string(),
                last,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
