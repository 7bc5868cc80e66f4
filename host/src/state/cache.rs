//! [`Cache`]: one watch of a kind, a reflector store, and subscribers told of every change after
//! the store has it.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::{Stream, StreamExt};
use std::collections::BTreeMap;

use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
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
    subscribers: Subscribers<K>,
    rejected: Arc<Mutex<BTreeMap<String, Rejected>>>,
    generation: Arc<AtomicU64>,
}

/// Who is told of changes.
type Subscribers<K> = Arc<Mutex<Vec<mpsc::UnboundedSender<Arc<K>>>>>;

/// An object the API server holds but the host cannot read as its type (see
/// [`Cache::run_lenient`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    /// The object as the API server holds it.
    pub object: DynamicObject,
    /// Why it does not parse.
    pub error: String,
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
            rejected: Arc::default(),
            generation: Arc::default(),
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

    /// A number that grows after every change the store takes (an object applied or deleted, a
    /// relist), and only then: a reader that sees the same generation before two reads of the
    /// store knows the second read holds nothing the first did not.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The writer (for the first caller only) and the subscribers, to start the watch with.
    fn start(&self) -> (Option<reflector::store::Writer<K>>, Subscribers<K>) {
        let writer = lock(&self.writer).take();
        (writer, Arc::clone(&self.subscribers))
    }

    /// Every object changed or deleted from now on, once the store reflects the change.
    pub fn subscribe(&self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&self.subscribers).push(tx);
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
        let (writer, subscribers) = self.start();
        let generation = Arc::clone(&self.generation);
        async move {
            let Some(writer) = writer else {
                return;
            };
            reflector::reflector(writer, watcher(api, config).modify(slim))
                .backoff(watch_backoff())
                // The reflector has applied the event to the store by now.
                .inspect(move |event| {
                    if event.is_ok() {
                        generation.fetch_add(1, Ordering::AcqRel);
                    }
                })
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

impl<K> Cache<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// Like [`run`](Self::run), but one object that does not parse as `K` (a field the host does
    /// not know, a value from a newer API) is left out and listed in
    /// [`rejected`](Self::rejected) instead of failing the whole watch: every other object is
    /// still seen.
    pub fn run_lenient(
        &self,
        client: Client,
        config: watcher::Config,
    ) -> impl Future<Output = ()> + Send + 'static {
        let (writer, subscribers) = self.start();
        let generation = Arc::clone(&self.generation);
        let rejected = Arc::clone(&self.rejected);
        let resource = ApiResource::erase::<K>(&());
        let api: Api<DynamicObject> = Api::all_with(client, &resource);
        let store = self.store.clone();
        async move {
            let Some(mut writer) = writer else {
                return;
            };
            let mut events = watcher(api, config).backoff(watch_backoff()).boxed();
            let mut listing: BTreeMap<String, Rejected> = BTreeMap::new();
            while let Some(event) = events.next().await {
                let event = match event {
                    Ok(event) => event,
                    Err(err) => {
                        tracing::debug!(error = %err, "watch failed; retrying");
                        continue;
                    }
                };
                let typed = match event {
                    watcher::Event::Init => {
                        listing.clear();
                        Some(watcher::Event::Init)
                    }
                    watcher::Event::InitApply(object) => match parse::<K>(&object) {
                        Ok(typed) => Some(watcher::Event::InitApply(typed)),
                        Err(error) => {
                            listing.insert(object.name_any(), Rejected { object, error });
                            None
                        }
                    },
                    watcher::Event::InitDone => {
                        *lock(&rejected) = std::mem::take(&mut listing);
                        Some(watcher::Event::InitDone)
                    }
                    watcher::Event::Apply(object) => {
                        let name = object.name_any();
                        match parse::<K>(&object) {
                            Ok(typed) => {
                                lock(&rejected).remove(&name);
                                Some(watcher::Event::Apply(typed))
                            }
                            Err(error) => {
                                lock(&rejected).insert(name.clone(), Rejected { object, error });
                                // The last good version is not kept: what the user wrote is
                                // what counts, and it is reported instead.
                                stored(&store, &name).map(watcher::Event::Delete)
                            }
                        }
                    }
                    watcher::Event::Delete(object) => {
                        let name = object.name_any();
                        lock(&rejected).remove(&name);
                        stored(&store, &name).map(watcher::Event::Delete)
                    }
                };
                let Some(typed) = typed else {
                    continue;
                };
                let typed = typed.modify(slim);
                writer.apply_watcher_event(&typed);
                generation.fetch_add(1, Ordering::AcqRel);
                // A relist (after the API server expired the watch) brings changes made
                // meanwhile as `InitApply`: subscribers hear of those too, as in `run`.
                if let watcher::Event::Apply(object)
                | watcher::Event::InitApply(object)
                | watcher::Event::Delete(object) = typed
                {
                    notify(&subscribers, Arc::new(object));
                }
            }
        }
    }

    /// The objects left out because they do not parse, by name.
    pub fn rejected(&self) -> BTreeMap<String, Rejected> {
        lock(&self.rejected).clone()
    }
}

/// Drops what no decision reads before an object is stored: its `managedFields` (often the
/// largest part of a Pod or Node). `None`, not an empty list, so an object written back from the
/// cache leaves the server's field managers as they are.
fn slim<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn parse<K: Resource + DeserializeOwned>(object: &DynamicObject) -> Result<K, String> {
    let value = serde_json::to_value(object).map_err(|e| e.to_string())?;
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// The stored object named `name` (cluster-scoped kinds), to delete it from the store.
fn stored<K>(store: &Store<K>, name: &str) -> Option<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .get(&reflector::ObjectRef::new(name))
        .map(|object| object.as_ref().clone())
}

fn notify<K>(subscribers: &Mutex<Vec<mpsc::UnboundedSender<Arc<K>>>>, object: Arc<K>) {
    lock(subscribers).retain(|tx| tx.send(Arc::clone(&object)).is_ok());
}
