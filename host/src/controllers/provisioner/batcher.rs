//! Batching of provisioning triggers: a batch starts with the first trigger and closes when no
//! trigger arrived for the idle window or when the max window since its start has passed,
//! whichever comes first (Karpenter's `BATCH_IDLE_DURATION` / `BATCH_MAX_DURATION`).

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

/// The batching windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    /// Close the batch after this long without a trigger.
    pub idle: Duration,
    /// Close the batch this long after its first trigger at the latest.
    pub max: Duration,
}

impl Default for Windows {
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(1),
            max: Duration::from_secs(10),
        }
    }
}

/// Waits for the next batch of triggers on `rx`. Returns how many triggers the batch gathered,
/// or `None` once every sender is gone and nothing is pending.
pub async fn next_batch(rx: &mut mpsc::UnboundedReceiver<()>, windows: Windows) -> Option<usize> {
    rx.recv().await?;
    let start = Instant::now();
    let mut count = 1usize;
    loop {
        let deadline = (Instant::now() + windows.idle).min(start + windows.max);
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(())) => count = count.saturating_add(1),
            Ok(None) | Err(_) => return Some(count),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows() -> Windows {
        Windows {
            idle: Duration::from_secs(1),
            max: Duration::from_secs(10),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn closes_after_the_idle_window() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let started = Instant::now();
        tx.send(()).unwrap();
        tokio::spawn({
            let tx = tx.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(500)).await;
                tx.send(()).unwrap();
                tokio::time::sleep(Duration::from_millis(900)).await;
                tx.send(()).unwrap();
                // 1.1 s of quiet: the batch closes at 2.4 s; this one goes to the next batch.
                tokio::time::sleep(Duration::from_millis(1100)).await;
                tx.send(()).unwrap();
            }
        });
        assert_eq!(next_batch(&mut rx, windows()).await, Some(3));
        assert_eq!(started.elapsed(), Duration::from_millis(2400));
        assert_eq!(next_batch(&mut rx, windows()).await, Some(1));
        assert_eq!(started.elapsed(), Duration::from_millis(3500));
    }

    #[tokio::test(start_paused = true)]
    async fn closes_at_the_max_window_under_a_steady_stream() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let started = Instant::now();
        tx.send(()).unwrap();
        let feeder = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(300)).await;
                if tx.send(()).is_err() {
                    break;
                }
            }
        });
        let count = next_batch(&mut rx, windows()).await.unwrap();
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        assert_eq!(count, 1 + 33);
        feeder.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn ends_when_the_senders_are_gone() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        tx.send(()).unwrap();
        drop(tx);
        assert_eq!(next_batch(&mut rx, windows()).await, Some(1));
        assert_eq!(next_batch(&mut rx, windows()).await, None);
    }
}
