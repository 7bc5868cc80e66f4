//! Instance types from the providers' catalogs, as the scheduler sees them: converted
//! ([`convert`]), cached per NodePool and NodeClass, and overlaid. An entry lives for a TTL and is
//! keyed by the pool's and the class's generations and the provider's digest, so editing either or
//! shipping a new build invalidates it at once. With the `NodeOverlay` gate on, the NodeOverlays
//! ([`crate::scheduling::overlay`]) are applied to every catalog the cache answers with (the
//! provider's answer is kept, so a change of the overlays re-applies them without asking the
//! provider), and the price metrics show the result.
//!
//! The controllers ask it through their provisioner's source (the live providers), with
//! [`InstanceTypeCache::get_within`]: one provider's slow or failing `get-instance-types` must not
//! hold up the pools of the others. Its call runs in a task of its own; a pass waits for a first
//! answer at most a bound, and after that uses the last answer while a fresh one is fetched
//! (stale while it revalidates); a provider whose last call failed is not waited for again until
//! it answers. `capstan simulate` asks with [`InstanceTypeCache::get_catalog`], which waits.

pub mod convert;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

use crate::api::{NodeClass, NodePool};
use crate::provider::convert::{node_class_to_wit, node_pool_to_wit};
use crate::rules::snapshot::ProvisionError;
use crate::runtime::ProviderPre;
use crate::scheduling::InstanceType;
use crate::scheduling::overlay::{self, Overlay};

pub use self::convert::{from_answer, from_catalog};

/// How long an entry is fresh.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

/// How long [`InstanceTypeCache::get_within`] waits for a catalog it has no answer for yet.
pub const DEFAULT_FIRST_WAIT: Duration = Duration::from_secs(10);

/// How long after a failed `get-instance-types` the provider is not asked again.
pub const FAILURE_BACKOFF: Duration = Duration::from_secs(15);

/// A `get-instance-types` call running in a task of its own, shared by whoever waits for it.
type Fetch = Shared<BoxFuture<'static, Result<Arc<[InstanceType]>, String>>>;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    pool: String,
    pool_generation: Option<i64>,
    class: String,
    class_generation: Option<i64>,
    provider_sha256: String,
    /// The provider's registry name (offerings available again are reported under it).
    provider: String,
}

/// Which catalog [`InstanceTypeCache`] answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Catalog {
    /// As the provider gave it.
    Raw,
    /// With the NodeOverlays applied (the same as [`Catalog::Raw`] with the gate off).
    Overlaid,
}

/// The NodeOverlays the cache applies (see [`crate::scheduling::overlay`]).
#[derive(Debug, Clone, Default)]
enum Overlays {
    /// The `NodeOverlay` gate is off: catalogs are used as the providers give them.
    #[default]
    Off,
    /// The gate is on and the overlays have not been evaluated yet.
    Pending,
    /// The overlays to apply (in order, none conflicting), and a version that changes with them.
    Ready(u64, Arc<[Overlay]>),
}

/// One cached catalog: when it was fetched, as the provider gave it, and with the overlays of
/// one version applied.
type Entry = (Instant, Arc<[InstanceType]>, Applied);

/// A catalog with the overlays of one version applied (`None`: not applied yet).
type Applied = Option<(u64, Arc<[InstanceType]>)>;

/// The cache.
pub struct InstanceTypeCache {
    ttl: Duration,
    entries: Arc<Mutex<HashMap<Key, Entry>>>,
    overlays: Mutex<Overlays>,
    /// Per pool, what the overlays changed in the catalog it was last answered with.
    applied: Mutex<HashMap<String, overlay::Applied>>,
    /// Per pool, the catalog the price metrics show (they are published again when it changes).
    published: Mutex<HashMap<String, Arc<[InstanceType]>>>,
    /// Calls running in the background ([`Self::get_within`]), by key.
    fetching: Arc<Mutex<HashMap<Key, Fetch>>>,
    /// The last failure of each key not answered since: when, and why.
    failed: Arc<Mutex<HashMap<Key, (Instant, String)>>>,
    /// Told whenever a background call answers, so that a provisioner can look again.
    answered: Arc<tokio::sync::Notify>,
    /// What fresh answers changed.
    changes: Arc<Changes>,
}

/// What the fresh answers changed.
#[derive(Debug, Default)]
struct Changes {
    /// Counts the answers that changed a catalog (offerings available again, new prices):
    /// consolidation searches again when it moves.
    count: std::sync::atomic::AtomicU64,
    /// Offerings a provider's catalog said were unavailable and now says are available, not
    /// taken yet ([`InstanceTypeCache::take_restored`]).
    restored: Mutex<Vec<Restored>>,
}

/// An offering a provider's catalog said was unavailable and now says is available: capacity
/// that came back, as the provider knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The provider (registry name).
    pub provider: String,
    /// The instance type.
    pub instance_type: String,
    /// The zone.
    pub zone: String,
    /// The capacity type.
    pub capacity_type: String,
}

/// The offerings of `after` that are available where `before` had them unavailable (an offering
/// new in `after` is not restored: nothing said it was unavailable).
fn restored(provider: &str, before: &[InstanceType], after: &[InstanceType]) -> Vec<Restored> {
    let unavailable: std::collections::HashSet<(&str, &str, &str)> = before
        .iter()
        .flat_map(|t| {
            t.offerings
                .iter()
                .filter(|o| !o.available)
                .map(|o| (t.name.as_str(), o.zone.as_str(), o.capacity_type.as_str()))
        })
        .collect();
    if unavailable.is_empty() {
        return Vec::new();
    }
    after
        .iter()
        .flat_map(|t| {
            t.offerings
                .iter()
                .filter(|o| o.available)
                .filter(|o| {
                    unavailable.contains(&(
                        t.name.as_str(),
                        o.zone.as_str(),
                        o.capacity_type.as_str(),
                    ))
                })
                .map(|o| Restored {
                    provider: provider.to_owned(),
                    instance_type: t.name.clone(),
                    zone: o.zone.clone(),
                    capacity_type: o.capacity_type.clone(),
                })
        })
        .collect()
}

impl std::fmt::Debug for InstanceTypeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstanceTypeCache")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// What [`InstanceTypeCache::get_within`] found for a key without a fresh entry.
enum Pending {
    /// An answer older than the TTL: used while the call for a fresh one runs.
    Stale(Arc<[InstanceType]>, Applied),
    /// A call to wait for, at most the bound.
    Wait(Fetch),
    /// Not waited for: why.
    Refused(String),
}

impl Default for InstanceTypeCache {
    fn default() -> Self {
        Self::new(DEFAULT_TTL)
    }
}

impl InstanceTypeCache {
    /// An empty cache whose entries live `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Arc::new(Mutex::new(HashMap::new())),
            overlays: Mutex::new(Overlays::Off),
            applied: Mutex::new(HashMap::new()),
            published: Mutex::new(HashMap::new()),
            fetching: Arc::new(Mutex::new(HashMap::new())),
            failed: Arc::new(Mutex::new(HashMap::new())),
            answered: Arc::new(tokio::sync::Notify::new()),
            changes: Arc::new(Changes::default()),
        }
    }

    /// Turns NodeOverlays on (the `NodeOverlay` gate): until [`Self::set_overlays`] is first
    /// called, [`Self::overlays_evaluated`] is false.
    pub fn enable_overlays(&self) {
        let mut overlays = self.overlays_lock();
        if matches!(*overlays, Overlays::Off) {
            *overlays = Overlays::Pending;
        }
    }

    /// The overlays to apply from now on: ordered ([`crate::scheduling::overlay::order`]), the
    /// conflicting ones left out. Returns whether they differ from the ones before.
    pub fn set_overlays(&self, ordered: Vec<Overlay>) -> bool {
        let mut overlays = self.overlays_lock();
        let (version, changed) = match &*overlays {
            Overlays::Ready(version, before) => {
                let changed = before.as_ref() != ordered.as_slice();
                (version + u64::from(changed), changed)
            }
            _ => (1, true),
        };
        *overlays = Overlays::Ready(version, ordered.into());
        changed
    }

    /// Whether catalogs can be used: the gate is off, or the overlays have been evaluated.
    pub fn overlays_evaluated(&self) -> bool {
        !matches!(*self.overlays_lock(), Overlays::Pending)
    }

    /// A number that changes whenever the overlays applied change (0 with none).
    pub fn overlay_version(&self) -> u64 {
        match &*self.overlays_lock() {
            Overlays::Ready(version, _) => *version,
            _ => 0,
        }
    }

    /// The instance types `provider` offers for `pool` with `class`, the NodeOverlays applied;
    /// a call to the provider (a miss) is timed for `controller` (`karpenter_cloudprovider_*`).
    pub async fn get(
        &self,
        controller: &str,
        provider: &ProviderPre,
        pool: &NodePool,
        class: &NodeClass,
    ) -> Result<Arc<[InstanceType]>, ProvisionError> {
        self.get_catalog(controller, provider, pool, class, Catalog::Overlaid)
            .await
    }

    fn key(provider: &ProviderPre, pool: &NodePool, class: &NodeClass) -> Key {
        Key {
            pool: pool.metadata.name.clone().unwrap_or_default(),
            pool_generation: pool.metadata.generation,
            class: class.metadata.name.clone().unwrap_or_default(),
            class_generation: class.metadata.generation,
            provider_sha256: provider.sha256().to_owned(),
            provider: provider.capabilities().provider().to_owned(),
        }
    }

    /// [`Self::get`], the catalog as `catalog` says; a miss waits for the provider's answer.
    pub async fn get_catalog(
        &self,
        controller: &str,
        provider: &ProviderPre,
        pool: &NodePool,
        class: &NodeClass,
        catalog: Catalog,
    ) -> Result<Arc<[InstanceType]>, ProvisionError> {
        let key = Self::key(provider, pool, class);
        let cached = self
            .lock()
            .get(&key)
            .filter(|(at, _, _)| at.elapsed() < self.ttl)
            .cloned();
        let (raw, applied, fresh) = match cached {
            Some((_, raw, applied)) => (raw, applied, false),
            None => {
                let (wit_pool, wit_class) = (node_pool_to_wit(pool)?, node_class_to_wit(class));
                let raw = ask(controller, provider, &key.pool, &wit_pool, &wit_class).await?;
                (raw, None, true)
            }
        };
        Ok(self.answer(key, pool, (raw, applied), catalog, fresh))
    }

    /// [`Self::get_catalog`] without holding up the caller for one provider: a catalog older
    /// than the TTL is answered with while a fresh one is fetched in the background; one never
    /// answered is waited for at most `first_wait`, once (the call goes on, and a later pass
    /// finds its answer); a provider whose last call for it failed is not waited for (nor asked
    /// again within [`FAILURE_BACKOFF`]) until it answers. [`Self::answered`] tells when a background
    /// call answers.
    pub async fn get_within(
        &self,
        controller: &str,
        provider: &Arc<ProviderPre>,
        pool: &NodePool,
        class: &NodeClass,
        catalog: Catalog,
        first_wait: Duration,
    ) -> Result<Arc<[InstanceType]>, ProvisionError> {
        let key = Self::key(provider, pool, class);
        let cached = self.lock().get(&key).cloned();
        let pending = match cached {
            Some((at, raw, applied)) if at.elapsed() < self.ttl => {
                return Ok(self.answer(key, pool, (raw, applied), catalog, false));
            }
            Some((_, raw, applied)) => {
                self.fetch(controller, provider, pool, class, &key)
                    .map(drop)?;
                Pending::Stale(raw, applied)
            }
            None => {
                let failed = self
                    .failed
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(&key)
                    .cloned();
                let running = self
                    .fetching
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .contains_key(&key);
                match failed {
                    Some((at, why)) if at.elapsed() < FAILURE_BACKOFF => {
                        Pending::Refused(format!("get-instance-types failed: {why}"))
                    }
                    Some((_, why)) => {
                        self.fetch(controller, provider, pool, class, &key)
                            .map(drop)?;
                        Pending::Refused(format!("get-instance-types failed, asked again: {why}"))
                    }
                    // An earlier pass waited for it already.
                    None if running => {
                        Pending::Refused("get-instance-types has not answered".to_owned())
                    }
                    None => Pending::Wait(self.fetch(controller, provider, pool, class, &key)?),
                }
            }
        };
        match pending {
            Pending::Stale(raw, applied) => {
                Ok(self.answer(key, pool, (raw, applied), catalog, false))
            }
            Pending::Refused(why) => Err(ProvisionError::Pool(format!(
                "provider {}: no instance types yet ({why})",
                provider.capabilities().provider()
            ))),
            Pending::Wait(fetch) => match tokio::time::timeout(first_wait, fetch).await {
                Ok(Ok(raw)) => Ok(self.answer(key, pool, (raw, None), catalog, false)),
                Ok(Err(why)) => Err(ProvisionError::Pool(format!(
                    "provider {}: get-instance-types failed: {why}",
                    provider.capabilities().provider()
                ))),
                Err(_) => Err(ProvisionError::Pool(format!(
                    "provider {} has not answered get-instance-types within {first_wait:?}; the pool is left out until it does",
                    provider.capabilities().provider()
                ))),
            },
        }
    }

    /// How many answers changed a catalog so far.
    pub fn changes(&self) -> u64 {
        self.changes
            .count
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Makes every catalog of `provider` stale: the next look answers with it and fetches a
    /// fresh one. After an `insufficient-capacity`, a provider that knows its capacity lists the
    /// offering unavailable in that fresh catalog, and available again once it frees, which
    /// [`Self::take_restored`] then reports.
    pub fn expire_provider(&self, provider: &str) {
        let Some(stale) = Instant::now().checked_sub(self.ttl) else {
            return;
        };
        for (key, entry) in self.lock().iter_mut() {
            if key.provider == provider {
                entry.0 = entry.0.min(stale);
            }
        }
    }

    /// The offerings a provider's catalog said were unavailable and has since said are available
    /// again, each once: the unavailable-offerings cache forgets them (capacity that came back,
    /// as the provider knows it, need not wait out the cache's TTL).
    pub fn take_restored(&self) -> Vec<Restored> {
        std::mem::take(
            &mut *self
                .changes
                .restored
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Told each time a background `get-instance-types` ([`Self::get_within`]) answers (one
    /// listener: the provisioner).
    pub fn answered(&self) -> Arc<tokio::sync::Notify> {
        Arc::clone(&self.answered)
    }

    /// The call for `key` running in the background: the one already running, else a new one.
    fn fetch(
        &self,
        controller: &str,
        provider: &Arc<ProviderPre>,
        pool: &NodePool,
        class: &NodeClass,
        key: &Key,
    ) -> Result<Fetch, ProvisionError> {
        let mut fetching = self.fetching.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(running) = fetching.get(key) {
            return Ok(running.clone());
        }
        let (wit_pool, wit_class) = (node_pool_to_wit(pool)?, node_class_to_wit(class));
        let (provider, key_owned, controller) =
            (Arc::clone(provider), key.clone(), controller.to_owned());
        let (entries, failed, running, answered, changes) = (
            Arc::clone(&self.entries),
            Arc::clone(&self.failed),
            Arc::clone(&self.fetching),
            Arc::clone(&self.answered),
            Arc::clone(&self.changes),
        );
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let converted = ask(
                &controller,
                &provider,
                &key_owned.pool,
                &wit_pool,
                &wit_class,
            )
            .await
            .map_err(|err| err.to_string());
            tracing::debug!(provider = %provider.capabilities().provider(), nodepool = %key_owned.pool, elapsed = ?started.elapsed(), ok = converted.is_ok(), "get-instance-types answered in the background");
            match &converted {
                Ok(raw) => {
                    failed
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&key_owned);
                    let mut entries = entries.lock().unwrap_or_else(PoisonError::into_inner);
                    insert_fresh(&mut entries, &changes, key_owned.clone(), raw, None);
                }
                Err(why) => {
                    tracing::warn!(provider = %provider.capabilities().provider(), nodepool = %key_owned.pool, error = %why, "get-instance-types failed");
                    failed
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(key_owned.clone(), (Instant::now(), why.clone()));
                }
            }
            running
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&key_owned);
            answered.notify_one();
            converted
        });
        let shared = async move {
            task.await
                .unwrap_or_else(|err| Err(format!("get-instance-types task: {err}")))
        }
        .boxed()
        .shared();
        fetching.insert(key.clone(), shared.clone());
        Ok(shared)
    }

    /// The answer for `key` from the provider's catalog `raw` (and the overlays applied to it
    /// before, `applied`, if still current): overlaid as `catalog` says, and cached.
    fn answer(
        &self,
        key: Key,
        pool: &NodePool,
        (raw, applied): (Arc<[InstanceType]>, Applied),
        catalog: Catalog,
        fresh: bool,
    ) -> Arc<[InstanceType]> {
        let overlays = self.overlays_lock().clone();
        match (catalog, &overlays, &applied) {
            (_, Overlays::Off | Overlays::Pending, _) => {
                self.publish(&key.pool, &raw);
                self.keep(key, &raw, applied, fresh);
                return raw;
            }
            (Catalog::Raw, _, _) => {
                self.keep(key, &raw, applied, fresh);
                return raw;
            }
            (_, Overlays::Ready(version, _), Some((at, applied))) if at == version => {
                self.publish(&key.pool, applied);
                return Arc::clone(applied);
            }
            _ => {}
        }
        let applied = match &overlays {
            Overlays::Ready(version, ordered) => {
                let labels = overlay::template_labels(pool);
                let target = overlay::Pool {
                    name: &key.pool,
                    labels: &labels,
                };
                let (types, changed) = overlay::apply(ordered, target, &raw);
                self.applied
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(key.pool.clone(), changed);
                Some((*version, Arc::<[InstanceType]>::from(types)))
            }
            _ => None,
        };
        // The price metrics show what scheduling uses.
        let shown = applied.as_ref().map_or(&raw, |(_, types)| types);
        self.publish(&key.pool, shown);
        let answer = match catalog {
            Catalog::Raw => Arc::clone(&raw),
            Catalog::Overlaid => Arc::clone(shown),
        };
        self.keep(key, &raw, applied, fresh);
        answer
    }

    /// Shows `shown`, the catalog scheduling uses for `pool`, in the price metrics, unless they
    /// show it already.
    fn publish(&self, pool: &str, shown: &Arc<[InstanceType]>) {
        let mut published = self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if published
            .get(pool)
            .is_some_and(|before| Arc::ptr_eq(before, shown))
        {
            return;
        }
        published.insert(pool.to_owned(), Arc::clone(shown));
        let metrics = crate::metrics::global();
        metrics.exclusive(|| metrics.cloudprovider.catalog(pool, shown));
    }

    /// Caches `raw` (and `applied`) under `key`: the provider's answer of now when `fresh`, else
    /// the overlays applied to the answer cached (not if a newer answer replaced it meanwhile).
    /// Entries of other keys older than twice the TTL go (one older than the TTL is still
    /// answered with while it is fetched afresh).
    fn keep(&self, key: Key, raw: &Arc<[InstanceType]>, applied: Applied, fresh: bool) {
        let mut entries = self.lock();
        entries.retain(|k, (at, _, _)| k == &key || at.elapsed() < 2 * self.ttl);
        match entries.get_mut(&key) {
            Some(entry) if Arc::ptr_eq(&entry.1, raw) => entry.2 = applied,
            Some(_) | None if fresh => insert_fresh(&mut entries, &self.changes, key, raw, applied),
            Some(_) | None => {}
        }
    }

    /// Whether an overlay changed the price (first) or the capacity (second) of any of `types`
    /// of `pool` (Karpenter's `price-overlay-applied` and `capacity-overlay-applied`).
    pub fn overlaid(&self, pool: &str, types: &[String]) -> (bool, bool) {
        let applied = self.applied.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(applied) = applied.get(pool) else {
            return (false, false);
        };
        (
            types.iter().any(|t| applied.priced.contains(t)),
            types.iter().any(|t| applied.extended.contains(t)),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn overlays_lock(&self) -> std::sync::MutexGuard<'_, Overlays> {
        self.overlays.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One `get-instance-types` call of `provider` for pool `pool_name`, timed for `controller`
/// (`karpenter_cloudprovider_*`), its answer converted.
async fn ask(
    controller: &str,
    provider: &ProviderPre,
    pool_name: &str,
    pool: &crate::runtime::types::NodePool,
    class: &crate::runtime::types::NodeClass,
) -> Result<Arc<[InstanceType]>, ProvisionError> {
    let started = Instant::now();
    let result = provider.get_instance_types(pool, class).await;
    crate::metrics::global().provider_call(
        controller,
        provider.capabilities().provider(),
        "get-instance-types",
        pool_name,
        started.elapsed(),
        &result,
    );
    Ok(from_answer(&result?)?.into())
}

/// Caches `raw`, the provider's answer of now, under `key`, counts a change when it differs
/// from the answer cached before ([`InstanceTypeCache::changes`]) and notes the offerings it
/// says are available again ([`InstanceTypeCache::take_restored`]).
fn insert_fresh(
    entries: &mut HashMap<Key, Entry>,
    changes: &Changes,
    key: Key,
    raw: &Arc<[InstanceType]>,
    applied: Applied,
) {
    let provider = key.provider.clone();
    let before = entries.insert(key, (Instant::now(), Arc::clone(raw), applied));
    if before.as_ref().is_some_and(|(_, before, _)| before == raw) {
        return;
    }
    changes
        .count
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // Only a catalog that changed can list an offering available again.
    if let Some((_, before, _)) = before {
        let back = restored(&provider, &before, raw);
        if !back.is_empty() {
            changes
                .restored
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(back);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::Requirements;
    use crate::scheduling::cluster::Offering;

    fn shape(name: &str, offerings: &[(&str, bool)]) -> InstanceType {
        InstanceType {
            name: name.into(),
            requirements: Requirements::default(),
            offerings: offerings
                .iter()
                .map(|(zone, available)| Offering {
                    available: *available,
                    ..Offering::new(*zone, "on-demand", 1.0)
                })
                .collect(),
            capacity: Default::default(),
            overhead: Default::default(),
            volume_limits: Default::default(),
            devices: Vec::new(),
        }
    }

    #[test]
    fn only_offerings_the_catalog_had_unavailable_are_restored() {
        let before = [
            shape("a", &[("z1", false), ("z2", true)]),
            shape("b", &[("z1", false)]),
        ];
        let after = [
            shape("a", &[("z1", true), ("z2", true), ("z3", true)]),
            shape("b", &[("z1", false)]),
            shape("c", &[("z1", true)]),
        ];
        let back = restored("p", &before, &after);
        assert_eq!(
            back,
            vec![Restored {
                provider: "p".into(),
                instance_type: "a".into(),
                zone: "z1".into(),
                capacity_type: "on-demand".into(),
            }]
        );
        // A provider whose catalog never says unavailable (capacity found only at launch)
        // restores nothing.
        assert!(restored("p", &after[..1], &after[..1]).is_empty());
    }

    #[test]
    fn overlays_gate_the_cache_and_version_its_catalogs() {
        let cache = InstanceTypeCache::default();
        // The gate off: nothing awaited, nothing applied.
        assert!(cache.overlays_evaluated());
        assert_eq!(cache.overlay_version(), 0);
        cache.enable_overlays();
        assert!(!cache.overlays_evaluated(), "on, not evaluated yet");
        let overlay = |price: f64| Overlay {
            name: "o".to_owned(),
            weight: 1,
            requirements: Requirements::new(),
            price: Some(overlay::PriceChange::Set(price)),
            capacity: Vec::new(),
        };
        assert!(cache.set_overlays(vec![overlay(1.0)]));
        assert!(cache.overlays_evaluated());
        assert_eq!(cache.overlay_version(), 1);
        assert!(!cache.set_overlays(vec![overlay(1.0)]), "the same overlays");
        assert_eq!(cache.overlay_version(), 1);
        assert!(cache.set_overlays(vec![overlay(2.0)]));
        assert_eq!(cache.overlay_version(), 2);
        cache.enable_overlays();
        assert!(cache.overlays_evaluated(), "enabling again forgets nothing");
        assert_eq!(cache.overlaid("pool", &["t".to_owned()]), (false, false));
    }
}
