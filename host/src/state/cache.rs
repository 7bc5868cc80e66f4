//! [`Cache`]: one watch of a kind, a reflector store, and subscribers told of every change after
//! the store has it.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

use futures::{Stream, StreamExt};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use super::watch_backoff;

/// One watch of `K`: a [`Store`] for reads and change notifications for reactions.
///
/// [`Cache::run`] drives the watch; [`Cache::subscribe`] may be called before or after it starts
/// (a subscriber sees the changes from then on). Notifications are sent on unbounded channels, so
/// a slow subscriber never holds the watch (and every other reader of the store) back.
pub struct Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    writer: Mutex<Option<reflector::store::Writer<K>>>,
    subscribers: Arc<Mutex<Vec<mpsc::UnboundedSender<Arc<K>>>>>,
}

impl<K> Debug for Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("objects", &self.store.state().len())
            .finish_non_exhaustive()
    }
}

impl<K> Default for Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    fn default() -> Self {
        let (store, writer) = reflector::store();
        Self {
            store,
            writer: Mutex::new(Some(writer)),
            subscribers: Arc::default(),
        }
    }
}

impl<K> Cache<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    /// The store (empty until the first list completes: see [`Store::wait_until_ready`]).
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Every object changed or deleted from now on, once the store reflects the change.
    pub fn subscribe(&self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let (tx, rx) = mpsc::unbounded_channel();
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(tx);
        futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|object| (object, rx))
        })
    }

    /// A future that watches `api` (with [`watch_backoff`] after failures) until it is dropped.
    /// Only the first call watches; later ones return at once.
    pub fn run(
        &self,
        api: Api<K>,
        config: watcher::Config,
    ) -> impl Future<Output = ()> + Send + 'static {
        let writer = self
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let subscribers = Arc::clone(&self.subscribers);
        async move {
            let Some(writer) = writer else {
                return;
            };
            reflector::reflector(writer, watcher(api, config))
                .backoff(watch_backoff())
                .touched_objects()
                .for_each(move |object| {
                    match object {
                        Ok(object) => notify(&subscribers, Arc::new(object)),
                        Err(err) => tracing::debug!(error = %err, "watch failed; retrying"),
                    }
                    futures::future::ready(())
                })
                .await;
        }
    }
}

fn notify<K>(subscribers: &Mutex<Vec<mpsc::UnboundedSender<Arc<K>>>>, object: Arc<K>) {
    subscribers
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .retain(|tx| tx.send(Arc::clone(&object)).is_ok());
}
