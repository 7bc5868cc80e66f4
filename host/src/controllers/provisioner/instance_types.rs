//! Instance types per NodePool and NodeClass, fetched from the provider and cached: an entry
//! lives for a TTL and is keyed by the pool's and the class's generations, so editing either
//! invalidates it at once. Converted from the provider's flat WIT catalog to the scheduler's types:
//! each distinct requirement is converted once and cloned where instance types share it. With the
//! `NodeOverlay` gate on, the NodeOverlays ([`crate::scheduling::overlay`]) are applied to every
//! catalog the cache answers with (the provider's answer is kept, so a change of the overlays
//! re-applies them without asking the provider), and the price metrics show the result.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kube::ResourceExt;

use crate::api::{NodeClass, NodePool};
use crate::controllers::{Context, resolve};
use crate::metrics::cloudprovider::controller;
use crate::provider::convert::catalog::{AmountView, CatalogView, RequirementView};
use crate::provider::convert::{node_class_to_wit, node_pool_to_wit};
use crate::runtime::ProviderPre;
use crate::runtime::types as wit;
use crate::scheduling::overlay::{self, Overlay};
use crate::scheduling::resources::CPU;
use crate::scheduling::{InstanceType, Offering, Requirement, Requirements, Resources};

use crate::rules::snapshot::{InstanceTypeSource, ProvisionError};

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

/// The host's source: the NodeClass's live provider from the registry, through the cache, with
/// the offerings recently out of capacity ([`Context::unavailable_offerings`]) marked unavailable.
#[derive(Debug, Clone, Copy)]
pub struct FromProviders<'a> {
    pub ctx: &'a Context,
    pub cache: &'a InstanceTypeCache,
}

impl InstanceTypeSource for FromProviders<'_> {
    async fn instance_types(
        &self,
        pool: &NodePool,
        classes: &HashMap<String, Arc<NodeClass>>,
    ) -> Result<Arc<[InstanceType]>, ProvisionError> {
        let ctx = self.ctx;
        // As Karpenter: with the NodeOverlay gate on, nothing is decided on prices the overlays
        // have not been applied to yet.
        if !self.cache.overlays_evaluated() {
            return Err(ProvisionError::Pool(
                "NodeOverlays are not evaluated yet".to_owned(),
            ));
        }
        let (provider_name, result) = self.fetch(pool, classes, Catalog::Overlaid).await?;
        let mut types = result?;
        // Offerings that recently ran out of capacity are simulated as unavailable.
        if !ctx.unavailable_offerings.entries(&provider_name).is_empty() {
            let mut marked = types.to_vec();
            ctx.unavailable_offerings.mark(&provider_name, &mut marked);
            types = marked.into();
        }
        Ok(types)
    }
}

/// Which catalog [`InstanceTypeCache`] answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Catalog {
    /// As the provider gave it.
    Raw,
    /// With the NodeOverlays applied (the same as [`Catalog::Raw`] with the gate off).
    Overlaid,
}

impl FromProviders<'_> {
    /// `pool`'s catalog from its NodeClass's provider, through the cache; the provider's name
    /// and the result.
    pub async fn fetch(
        &self,
        pool: &NodePool,
        classes: &HashMap<String, Arc<NodeClass>>,
        catalog: Catalog,
    ) -> Result<(String, Result<Arc<[InstanceType]>, ProvisionError>), ProvisionError> {
        let resolved =
            resolve::resolve_in(self.ctx, &pool.spec.template.spec.node_class_ref, classes)
                .map_err(|unresolved| ProvisionError::Pool(unresolved.to_string()))?;
        let (class, provider) = (&resolved.node_class, &resolved.provider);
        let started = Instant::now();
        let result = self
            .cache
            .get_catalog(controller::PROVISIONER, provider, pool, class, catalog)
            .await;
        if let Err(ProvisionError::Call(err)) = &result {
            tracing::warn!(provider = %class.spec.provider, error = %err, "get-instance-types failed");
        }
        tracing::debug!(nodepool = %pool.name_any(), elapsed = ?started.elapsed(), "instance types");
        Ok((class.spec.provider.clone(), result))
    }
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
                from_catalog(&result?)?.into()
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

fn requirement(r: &RequirementView<'_>) -> Result<Requirement, ProvisionError> {
    let op = crate::provider::convert::operator_from_wit(r.operator());
    Ok(Requirement::new(r.key(), op, r.values())
        .map_err(|err| ProvisionError::InstanceType(format!("requirement {}: {err}", r.key())))?
        .with_min_values(r.min_values()))
}

/// Each distinct requirement of a catalog converted once, on first use.
struct RequirementCache<'a> {
    view: CatalogView<'a>,
    converted: Vec<Option<Requirement>>,
}

impl<'a> RequirementCache<'a> {
    fn new(view: CatalogView<'a>) -> Self {
        Self {
            view,
            converted: vec![None; view.catalog().requirements.len()],
        }
    }

    fn requirements(&mut self, indices: &[u32]) -> Result<Requirements, ProvisionError> {
        let mut out = Requirements::new();
        for &i in indices {
            let slot = self.converted.get_mut(i as usize).ok_or_else(|| {
                ProvisionError::InstanceType(format!("catalog: no requirement #{i}"))
            })?;
            let r = match slot {
                Some(r) => r,
                None => {
                    let view = self.view.requirement(i).ok_or_else(|| {
                        ProvisionError::InstanceType(format!("catalog: no requirement #{i}"))
                    })?;
                    slot.insert(requirement(&view)?)
                }
            };
            out.add_ref(r);
        }
        Ok(out)
    }
}

/// Amounts as a resource vector: cpu in millicores, everything else in whole units rounded up (a
/// later duplicate wins).
fn resources<'a>(amounts: impl IntoIterator<Item = AmountView<'a>>) -> Resources {
    let mut out = Resources::default();
    for a in amounts {
        out.set(
            a.name,
            if a.name == CPU {
                a.milli_value
            } else {
                a.units()
            },
        );
    }
    out
}

/// Every instance type of a provider's catalog as the scheduler sees it, after checking the
/// catalog ([`CatalogView::new`]).
pub fn from_catalog(catalog: &wit::Catalog) -> Result<Vec<InstanceType>, ProvisionError> {
    let view =
        CatalogView::new(catalog).map_err(|err| ProvisionError::InstanceType(err.to_string()))?;
    let mut cache = RequirementCache::new(view);
    let mut types = Vec::with_capacity(view.len());
    for it in view.instance_types() {
        let mut offerings = Vec::with_capacity(it.offerings().len());
        for o in it.offerings() {
            let mut offering = Offering::new(o.zone(), o.capacity_type(), o.price());
            offering.available = o.available();
            offering.requirements = cache.requirements(o.requirement_indices())?;
            offerings.push(offering);
        }
        let mut overhead = Resources::default();
        for (_, list) in it.overhead_lists() {
            overhead.add(&resources(list));
        }
        types.push(InstanceType {
            name: it.name.to_owned(),
            requirements: cache.requirements(it.requirement_indices())?,
            offerings,
            capacity: resources(it.capacity()),
            overhead,
        });
    }
    Ok(types)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::labels::{CAPACITY_TYPE, ZONE};
    use crate::provider::convert::catalog::builder::CatalogBuilder;

    fn catalog() -> wit::Catalog {
        let mut b = CatalogBuilder::new();
        for name in ["c-4x", "c-8x"] {
            let mut t = b.instance_type(name);
            t.requirement_in("node.kubernetes.io/instance-type", &[name])
                .requirement_in(ZONE, &["zone-a"])
                .requirement_in(CAPACITY_TYPE, &["spot"])
                .requirement("example.com/gen", wit::Operator::Gt, &["3"], Some(1))
                .offering("zone-a", "spot", 0.25, true)
                .offering_requirement("example.com/reservation", wit::Operator::In, &["r"], None)
                .offering("zone-b", "on-demand", 0.5, false)
                .capacity("cpu", 4000)
                .capacity("memory", (8 << 30) * 1000)
                .capacity("pods", 110_000)
                .capacity("example.com/device", 1500)
                .kube_reserved("cpu", 100)
                .system_reserved("cpu", 100)
                .eviction_threshold("memory", (100 << 20) * 1000);
        }
        b.finish().into()
    }

    #[test]
    fn converts_a_catalog() {
        let types = from_catalog(&catalog()).unwrap();
        assert_eq!(types.len(), 2);
        let out = &types[1];
        assert_eq!(out.name, "c-8x");
        assert_eq!(out.offerings[0].zone, "zone-a");
        assert_eq!(out.offerings[0].capacity_type, "spot");
        assert_eq!(out.offerings[0].requirements.len(), 1);
        assert!(out.offerings[1].requirements.is_empty());
        assert!(!out.offerings[1].available);
        assert_eq!(out.offerings[1].price, 0.5);
        assert_eq!(out.requirements.len(), 4);
        let generation = out.requirements.get("example.com/gen").unwrap();
        assert_eq!(generation.min_values(), Some(1));
        assert_eq!(out.allocatable().cpu_millis, 3800);
        assert_eq!(out.capacity.memory, 8 << 30);
        assert_eq!(out.overhead.memory, 100 << 20);
        assert_eq!(out.capacity.pods, 110);
        // 1.5 devices round up to 2, as Kubernetes' Value() does.
        assert_eq!(out.capacity.get("example.com/device"), 2);
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

    #[test]
    fn a_bad_catalog_is_an_error_not_a_panic() {
        let mut bad = catalog();
        bad.requirement_lists[0] = 1_000;
        let err = from_catalog(&bad).unwrap_err();
        assert!(err.to_string().contains("requirement-lists"), "{err}");
        let mut bad = catalog();
        bad.offerings[0].price = f64::NAN;
        assert!(from_catalog(&bad).is_err());
    }
}
