//! The loop of the controllers that evaluate a whole kind at once (NodeOverlays,
//! CapacityBuffers): triggers from watches gathered for a moment, an evaluation at start, on each
//! trigger and on a timer, and a failed evaluation retried after a backoff.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

use super::{Context, ControllerError};

/// Watches `api` and sends a trigger on `tx` for every event (`what` names the watch in logs).
pub fn trigger_on<K>(
    api: Api<K>,
    config: watcher::Config,
    tx: UnboundedSender<()>,
    what: &'static str,
) -> JoinHandle<()>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    tokio::spawn(
        watcher(api, config)
            .default_backoff()
            .for_each(move |event| {
                match event {
                    Ok(_) => {
                        let _ = tx.send(());
                    }
                    Err(err) => tracing::debug!(error = %err, "{what} watch"),
                }
                futures::future::ready(())
            }),
    )
}

/// Runs `evaluate` every `every` and on each trigger of `rx` (those arriving within `settle` of
/// one another gathered into one), until every sender is gone. A failure is logged and retried
/// after the backoff of `key` (see [`Context::backoff`]).
pub async fn run<F, Fut>(
    ctx: &Context,
    key: &str,
    (every, settle): (Duration, Duration),
    (tx, mut rx): (
        UnboundedSender<()>,
        tokio::sync::mpsc::UnboundedReceiver<()>,
    ),
    mut evaluate: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), ControllerError>>,
{
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            got = rx.recv() => if got.is_none() { break },
        }
        tokio::time::sleep(settle).await;
        while rx.try_recv().is_ok() {}
        match evaluate().await {
            Ok(()) => ctx.reset_backoff(key),
            Err(err) => {
                let delay = ctx.backoff(key);
                tracing::warn!(error = %err, retry_in = ?delay, "evaluating {key} failed");
                tokio::time::sleep(delay).await;
                let _ = tx.send(());
            }
        }
    }
}
