//! A watch of pods that a test starts before it acts: [`watch_pods`] returns once the watch has
//! listed, so nothing the test does afterwards is missed, and hands each later event to the test.

use std::ops::ControlFlow;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher::{self, watcher};

/// Watches the pods of `api` that `config` selects; returns once the first list is done (or 30 s
/// passed), the watch running on in the returned task. Every event after that list goes to `on`
/// until it returns [`ControlFlow::Break`].
pub async fn watch_pods<F>(
    api: Api<Pod>,
    config: watcher::Config,
    mut on: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut(watcher::Event<Pod>) -> ControlFlow<()> + Send + 'static,
{
    let (ready, listed) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut ready = Some(ready);
        let mut stream = watcher(api, config).boxed();
        while let Some(event) = stream.next().await {
            let event = match event {
                Ok(watcher::Event::InitDone) => {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                    continue;
                }
                // The first list, and failures the watcher retries itself.
                Ok(_) | Err(_) if ready.is_some() => continue,
                Ok(event) => event,
                Err(_) => continue,
            };
            if on(event).is_break() {
                break;
            }
        }
    });
    let _ = tokio::time::timeout(Duration::from_secs(30), listed).await;
    task
}
