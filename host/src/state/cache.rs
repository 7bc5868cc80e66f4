//! [`Cache`]: one watch of a kind, a reflector store, and subscribers told of every change after
//! the store has it.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

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
    ahead: Ahead<K>,
}

/// Who is told of changes.
type Subscribers<K> = Arc<Mutex<Vec<mpsc::UnboundedSender<Arc<K>>>>>;

/// Objects the host created that the watch has not brought yet, each with when it was created
/// (see [`Cache::created`]).
type Ahead<K> = Arc<Mutex<Vec<(Arc<K>, Instant)>>>;

/// How long an object the host created counts without the watch bringing it ([`Cache::created`]):
/// long enough for an API server minutes behind, short enough that an object deleted before its
/// watch ever saw it is not counted for long.
pub const AHEAD_TTL: Duration = Duration::from_secs(120);

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
            ahead: Arc::default(),
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

    /// Counts `object`, which the host has just created, in [`Cache::state`] until the watch
    /// brings it (or [`AHEAD_TTL`] passes). A decision taken before the watch catches up must not
    /// take it again: with the API server behind, the provisioner's next batch would otherwise
    /// not see the claims of the last one and create them a second time. (Karpenter puts the
    /// NodeClaims it creates in its cluster state at once, for the same reason.)
    pub fn created(&self, object: K) {
        // The watch may have been quicker than the create's answer.
        if self
            .store
            .get(&reflector::ObjectRef::from_obj(&object))
            .is_some()
        {
            return;
        }
        let mut object = object;
        slim(&mut object);
        lock(&self.ahead).push((Arc::new(object), Instant::now()));
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Every object of the store, then those the host created that the store does not hold yet
    /// ([`Cache::created`]).
    pub fn state(&self) -> Vec<Arc<K>> {
        let mut objects = self.store.state();
        let mut ahead = lock(&self.ahead);
        if ahead.is_empty() {
            return objects;
        }
        ahead.retain(|(object, at)| {
            at.elapsed() < AHEAD_TTL
                && self
                    .store
                    .get(&reflector::ObjectRef::from_obj(object.as_ref()))
                    .is_none()
        });
        objects.extend(ahead.iter().map(|(object, _)| Arc::clone(object)));
        objects
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
        let ahead = Arc::clone(&self.ahead);
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
                        Ok(object) => {
                            seen(&ahead, &object);
                            notify(&subscribers, Arc::new(object));
                        }
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
        let ahead = Arc::clone(&self.ahead);
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
                    seen(&ahead, &object);
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

/// Forgets the created object the watch has now brought (applied, or already deleted).
fn seen<K>(ahead: &Ahead<K>, object: &K)
where
    K: Resource,
{
    let mut ahead = lock(ahead);
    if ahead.is_empty() {
        return;
    }
    let (name, namespace) = (
        object.meta().name.as_deref(),
        object.meta().namespace.as_deref(),
    );
    ahead.retain(|(created, _)| {
        created.meta().name.as_deref() != name || created.meta().namespace.as_deref() != namespace
    });
}

fn notify<K>(subscribers: &Mutex<Vec<mpsc::UnboundedSender<Arc<K>>>>, object: Arc<K>) {
    lock(subscribers).retain(|tx| tx.send(Arc::clone(&object)).is_ok());
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;

    fn config_map(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some("default".to_owned()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn names(objects: &[Arc<ConfigMap>]) -> Vec<String> {
        objects.iter().map(|o| o.name_any()).collect()
    }

    /// An object the host created counts at once and only once: alone while the watch has not
    /// brought it, from the store once it has.
    #[test]
    fn a_created_object_counts_until_the_watch_brings_it() {
        let cache: Cache<ConfigMap> = Cache::default();
        let (writer, _) = cache.start();
        let mut writer = writer.expect("the first start gets the writer");
        writer.apply_watcher_event(&watcher::Event::Apply(config_map("old")));
        let before = cache.generation();
        cache.created(config_map("new"));
        assert!(cache.generation() > before, "a reader must see the change");
        assert_eq!(names(&cache.state()), ["old", "new"]);
        // The watch brings it: the store's copy is the one counted.
        writer.apply_watcher_event(&watcher::Event::Apply(config_map("new")));
        let mut both = names(&cache.state());
        both.sort();
        assert_eq!(both, ["new", "old"]);
        assert!(lock(&cache.ahead).is_empty());
        // Created after the watch brought it: not counted twice.
        cache.created(config_map("new"));
        assert!(lock(&cache.ahead).is_empty());
        // Deleted before a read: the watch's delete forgets it too, so it does not come back.
        cache.created(config_map("brief"));
        seen(&cache.ahead, &config_map("brief"));
        let mut left = names(&cache.state());
        left.sort();
        assert_eq!(left, ["new", "old"]);
    }

    /// One that has waited longer than [`AHEAD_TTL`] no longer counts.
    #[test]
    fn a_created_object_the_watch_never_brings_stops_counting() {
        let cache: Cache<ConfigMap> = Cache::default();
        cache.created(config_map("lost"));
        if let Some(entry) = lock(&cache.ahead).first_mut() {
            entry.1 = Instant::now()
                .checked_sub(AHEAD_TTL + Duration::from_secs(1))
                .expect("the machine has been up longer than the TTL");
        }
        assert!(cache.state().is_empty());
        assert!(lock(&cache.ahead).is_empty());
    }
}
