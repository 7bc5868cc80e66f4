//! Instance types from the providers' catalogs, as the scheduler sees them: converted
//! ([`convert`]), cached per NodePool and NodeClass, and overlaid. An entry lives for a TTL and is
//! keyed by the pool's and the class's generations and the provider's digest, so editing either or
//! shipping a new build invalidates it at once. With the `NodeOverlay` gate on, the NodeOverlays
//! ([`crate::scheduling::overlay`]) are applied to every catalog the cache answers with (the
//! provider's answer is kept, so a change of the overlays re-applies them without asking the
//! provider), and the price metrics show the result.
//!
//! The controllers ask it through their provisioner's source (the live providers); `capstan
//! simulate` through the providers it loaded from files.

pub mod convert;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::api::{NodeClass, NodePool};
use crate::provider::convert::{node_class_to_wit, node_pool_to_wit};
use crate::rules::snapshot::ProvisionError;
use crate::runtime::ProviderPre;
use crate::scheduling::InstanceType;
use crate::scheduling::overlay::{self, Overlay};

pub use self::convert::{from_answer, from_catalog};

/// How long an entry is fresh.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    pool: String,
    pool_generation: Option<i64>,
    class: String,
    class_generation: Option<i64>,
    provider_sha256: String,
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
type Entry = (
    Instant,
    Arc<[InstanceType]>,
    Option<(u64, Arc<[InstanceType]>)>,
);

/// The cache.
#[derive(Debug)]
pub struct InstanceTypeCache {
    ttl: Duration,
    entries: Mutex<HashMap<Key, Entry>>,
    overlays: Mutex<Overlays>,
    /// Per pool, what the overlays changed in the catalog it was last answered with.
    applied: Mutex<HashMap<String, overlay::Applied>>,
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
            entries: Mutex::new(HashMap::new()),
            overlays: Mutex::new(Overlays::Off),
            applied: Mutex::new(HashMap::new()),
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

    /// [`Self::get`], the catalog as `catalog` says.
    pub async fn get_catalog(
        &self,
        controller: &str,
        provider: &ProviderPre,
        pool: &NodePool,
        class: &NodeClass,
        catalog: Catalog,
    ) -> Result<Arc<[InstanceType]>, ProvisionError> {
        let key = Key {
            pool: pool.metadata.name.clone().unwrap_or_default(),
            pool_generation: pool.metadata.generation,
            class: class.metadata.name.clone().unwrap_or_default(),
            class_generation: class.metadata.generation,
            provider_sha256: provider.sha256().to_owned(),
        };
        let overlays = self.overlays_lock().clone();
        let cached = self
            .lock()
            .get(&key)
            .filter(|(at, _, _)| at.elapsed() < self.ttl)
            .cloned();
        let raw = match cached {
            Some((_, raw, applied)) => {
                match (catalog, &overlays, applied) {
                    (Catalog::Raw, _, _) | (_, Overlays::Off | Overlays::Pending, _) => {
                        return Ok(raw);
                    }
                    (_, Overlays::Ready(version, _), Some((at, applied))) if at == *version => {
                        return Ok(applied);
                    }
                    _ => {}
                }
                raw
            }
            None => {
                let started = Instant::now();
                let result = provider
                    .get_instance_types(&node_pool_to_wit(pool)?, &node_class_to_wit(class))
                    .await;
                crate::metrics::global().cloudprovider.observe(
                    controller,
                    provider.capabilities().provider(),
                    "get-instance-types",
                    &key.pool,
                    started.elapsed(),
                    &result,
                );
                from_answer(&result?)?.into()
            }
        };
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
        let metrics = crate::metrics::global();
        metrics.exclusive(|| metrics.cloudprovider.catalog(&key.pool, shown));
        let answer = match catalog {
            Catalog::Raw => Arc::clone(&raw),
            Catalog::Overlaid => Arc::clone(shown),
        };
        let mut entries = self.lock();
        entries.retain(|_, (at, _, _)| at.elapsed() < self.ttl);
        let at = entries
            .get(&key)
            .map_or_else(Instant::now, |(at, _, _)| *at);
        entries.insert(key, (at, raw, applied));
        Ok(answer)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::Requirements;

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
