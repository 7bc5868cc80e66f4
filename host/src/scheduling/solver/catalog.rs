//! A NodePool's instance types, precomputed for filtering: cheapest first, with per-type
//! allocatable (DaemonSet overhead already taken off), per-key compatibility indexes and compact
//! offerings, so narrowing a claim's options is bit-set arithmetic.

use std::cell::OnceCell;
use std::sync::Arc;

use capstan_dra::{ClaimRequests, Inventory};

use super::fast_hash::FastMap;

use super::bitset::BitSet;
use crate::api::labels::{CAPACITY_TYPE, ZONE};
use crate::scheduling::cluster::{InstanceType, NodePoolView};
use crate::scheduling::devices;
use crate::scheduling::pod::{CsiVolume, Pod, volume_limit_exceeded};
use crate::scheduling::requirements::{Requirements, ValueSet};
use crate::scheduling::resources::{ResourceLimits, Resources};
use crate::scheduling::taints::first_untolerated;

/// An available offering compatible with the pool, with zone and capacity type interned.
#[derive(Debug)]
struct CatalogOffering {
    zone: u32,
    capacity_type: u32,
    price: f64,
    /// Index into the instance type's `offerings`.
    index: usize,
}

/// For one label key: which types leave it undefined, and the types grouped by their set.
#[derive(Debug)]
struct KeyIndex {
    key: String,
    undefined: BitSet,
    groups: Vec<(ValueSet, BitSet)>,
    /// The group of each distinct set.
    group_of: FastMap<ValueSet, usize>,
    /// Per group, its listed values as ids (for counting distinct values under `minValues`).
    group_values: Vec<Vec<u32>>,
    value_ids: FastMap<String, u32>,
    /// Memo: types compatible with `In [value]`.
    value_masks: FastMap<String, BitSet>,
}

/// The instance types one pool may launch.
#[derive(Debug)]
pub(super) struct Catalog {
    /// Indices into the pool's `instance_types`, cheapest compatible offering first (then name).
    pub(super) types: Vec<usize>,
    /// Per type, the position of its name in name order.
    pub(super) name_rank: Vec<u32>,
    /// Allocatable per type: capacity − overhead − the DaemonSet pods that would land.
    pub(super) alloc: Vec<Resources>,
    /// The standard resources of `alloc`, column by column, for the fit scan.
    columns: [Vec<i64>; 4],
    /// Whether any type offers an extended resource.
    any_extended: bool,
    /// Whether a NodeOverlay re-priced any offering (see [`Pricer::listed`]).
    pub(super) repriced: bool,
    /// The DaemonSet pods' requests per type.
    pub(super) daemon: Vec<Resources>,
    /// Every type.
    pub(super) all: BitSet,
    /// Types whose capacity fits in what the pool's limits leave.
    pub(super) within_limits: BitSet,
    keys: Vec<KeyIndex>,
    zones: Vec<String>,
    capacity_types: Vec<String>,
    offerings: Vec<Vec<CatalogOffering>>,
    /// Keys offerings' own requirements mention, besides zone and capacity type.
    offering_keys: Vec<String>,
    zone_scratch: Vec<bool>,
    capacity_type_scratch: Vec<bool>,
    /// Per type, the devices a node of it carries (none: no devices, or templates that do not
    /// form an inventory); worked out on the first pod that asks for devices.
    inventories: OnceCell<Vec<Option<Inventory>>>,
}

fn intern(names: &mut Vec<String>, name: &str) -> u32 {
    let pos = names.iter().position(|n| n == name).unwrap_or_else(|| {
        names.push(name.to_owned());
        names.len() - 1
    });
    u32::try_from(pos).unwrap_or(u32::MAX)
}

impl Catalog {
    /// Indexes `pool`'s instance types that are compatible with `template` (the pool's
    /// requirements and labels) and have an available offering it allows.
    pub(super) fn build(
        pool: &NodePoolView,
        template: &Requirements,
        daemonsets: &[(&Pod, Requirements)],
        well_known: &dyn Fn(&str) -> bool,
    ) -> Self {
        let zone_set = template.set_of(ZONE);
        let ct_set = template.set_of(CAPACITY_TYPE);
        let mut candidates: Vec<(f64, &str, usize, Vec<usize>)> = Vec::new();
        for (i, it) in pool.instance_types.iter().enumerate() {
            if it.requirements.intersects(template).is_err() {
                continue;
            }
            let offerings: Vec<usize> = it
                .offerings
                .iter()
                .enumerate()
                .filter(|(_, o)| {
                    o.available
                        && zone_set.is_none_or(|s| s.contains(&o.zone))
                        && ct_set.is_none_or(|s| s.contains(&o.capacity_type))
                        && (o.requirements.is_empty()
                            || template.intersects(&o.requirements).is_ok())
                })
                .map(|(j, _)| j)
                .collect();
            let Some(price) = offerings
                .iter()
                .map(|&j| it.offerings[j].price)
                .min_by(f64::total_cmp)
            else {
                continue;
            };
            candidates.push((price, &it.name, i, offerings));
        }
        candidates.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)));

        let n = candidates.len();
        let mut catalog = Catalog {
            types: Vec::with_capacity(n),
            name_rank: vec![0; n],
            alloc: Vec::with_capacity(n),
            columns: Default::default(),
            any_extended: false,
            repriced: false,
            daemon: Vec::with_capacity(n),
            all: BitSet::full(n),
            within_limits: BitSet::full(n),
            keys: Vec::new(),
            zones: Vec::new(),
            capacity_types: Vec::new(),
            offerings: Vec::with_capacity(n),
            offering_keys: Vec::new(),
            zone_scratch: Vec::new(),
            capacity_type_scratch: Vec::new(),
            inventories: OnceCell::new(),
        };
        let daemons_for_pool: Vec<&(&Pod, Requirements)> = daemonsets
            .iter()
            .filter(|(ds, reqs)| {
                first_untolerated(&pool.taints, &ds.tolerations).is_none()
                    && template.compatible(reqs, well_known).is_ok()
            })
            .collect();
        for (t, (_, _, i, offerings)) in candidates.into_iter().enumerate() {
            let it = &pool.instance_types[i];
            let mut daemon = Resources::default();
            for (ds, reqs) in &daemons_for_pool {
                if it.requirements.intersects(reqs).is_ok() {
                    daemon.add(&ds.requests);
                    daemon.pods += 1;
                }
            }
            let alloc = it.allocatable().minus(&daemon);
            catalog.columns[0].push(alloc.cpu_millis);
            catalog.columns[1].push(alloc.memory);
            catalog.columns[2].push(alloc.ephemeral_storage);
            catalog.columns[3].push(alloc.pods);
            catalog.any_extended |= alloc.has_extended();
            catalog.alloc.push(alloc);
            catalog.daemon.push(daemon);
            let mut compact = Vec::with_capacity(offerings.len());
            for j in offerings {
                let o = &it.offerings[j];
                for r in o.requirements.iter() {
                    if r.key() != ZONE
                        && r.key() != CAPACITY_TYPE
                        && !catalog.offering_keys.iter().any(|k| k == r.key())
                    {
                        catalog.offering_keys.push(r.key().to_owned());
                    }
                }
                catalog.repriced |= o.listed_price.is_some();
                compact.push(CatalogOffering {
                    zone: intern(&mut catalog.zones, &o.zone),
                    capacity_type: intern(&mut catalog.capacity_types, &o.capacity_type),
                    price: o.price,
                    index: j,
                });
            }
            catalog.offerings.push(compact);
            catalog.types.push(i);
            catalog.index_requirements(t, it, n);
        }
        let mut by_name: Vec<usize> = (0..n).collect();
        by_name.sort_unstable_by(|&a, &b| {
            pool.instance_types[catalog.types[a]]
                .name
                .cmp(&pool.instance_types[catalog.types[b]].name)
        });
        for (rank, t) in by_name.into_iter().enumerate() {
            catalog.name_rank[t] = u32::try_from(rank).unwrap_or(u32::MAX);
        }
        // Types that leave a key undefined are compatible with any requirement on it.
        for key in &mut catalog.keys {
            let mut undefined = BitSet::full(n);
            for (_, members) in &key.groups {
                for t in members.iter() {
                    undefined.remove(t);
                }
            }
            key.undefined = undefined;
        }
        catalog
    }

    fn index_requirements(&mut self, t: usize, it: &InstanceType, n: usize) {
        for r in it.requirements.iter() {
            let pos = match self.keys.binary_search_by(|k| k.key.as_str().cmp(r.key())) {
                Ok(pos) => pos,
                Err(pos) => {
                    self.keys.insert(
                        pos,
                        KeyIndex {
                            key: r.key().to_owned(),
                            undefined: BitSet::empty(n),
                            groups: Vec::new(),
                            group_of: FastMap::default(),
                            group_values: Vec::new(),
                            value_ids: FastMap::default(),
                            value_masks: FastMap::default(),
                        },
                    );
                    pos
                }
            };
            let index = &mut self.keys[pos];
            match index.group_of.get(r.set()) {
                Some(&g) => index.groups[g].1.insert(t),
                None => {
                    let mut members = BitSet::empty(n);
                    members.insert(t);
                    let ids = r
                        .set()
                        .values()
                        .iter()
                        .map(|v| {
                            let next = u32::try_from(index.value_ids.len()).unwrap_or(u32::MAX);
                            *index.value_ids.entry(v.clone()).or_insert(next)
                        })
                        .collect();
                    index.group_of.insert(r.set().clone(), index.groups.len());
                    index.group_values.push(ids);
                    index.groups.push((r.set().clone(), members));
                }
            }
        }
    }

    /// Number of types.
    pub(super) fn len(&self) -> usize {
        self.types.len()
    }

    fn key_position(&self, key: &str) -> Option<usize> {
        self.keys.binary_search_by(|k| k.key.as_str().cmp(key)).ok()
    }

    /// Whether a change of `key` can change which offerings are allowed.
    pub(super) fn affects_offerings(&self, key: &str) -> bool {
        key == ZONE || key == CAPACITY_TYPE || self.offering_keys.iter().any(|k| k == key)
    }

    /// `mask &=` the types whose requirement on `key` is compatible with `set`.
    pub(super) fn restrict_to_set(&self, mask: &mut BitSet, key: &str, set: &ValueSet) {
        let Some(pos) = self.key_position(key) else {
            return;
        };
        let index = &self.keys[pos];
        let mut allowed = index.undefined.clone();
        for (group_set, members) in &index.groups {
            if group_set.compatible_with(set) {
                allowed.union_with(members);
            }
        }
        mask.intersect_with(&allowed);
    }

    /// `mask &=` the types compatible with `key In [values]` (memoized per value).
    pub(super) fn restrict_to_values<'v>(
        &mut self,
        mask: &mut BitSet,
        key: &str,
        values: impl Iterator<Item = &'v str>,
        scratch: &mut BitSet,
    ) {
        let Some(pos) = self.key_position(key) else {
            return;
        };
        let n = self.len();
        let index = &mut self.keys[pos];
        scratch.reset(n);
        for value in values {
            match index.value_masks.get(value) {
                Some(allowed) => scratch.union_with(allowed),
                None => {
                    let mut allowed = index.undefined.clone();
                    for (group_set, members) in &index.groups {
                        if group_set.contains(value) {
                            allowed.union_with(members);
                        }
                    }
                    scratch.union_with(&allowed);
                    index.value_masks.insert(value.to_owned(), allowed);
                }
            }
        }
        mask.intersect_with(scratch);
    }

    /// `mask &=` the types with an available offering whose zone and capacity type are allowed and
    /// whose own requirements pass `extra`.
    pub(super) fn restrict_to_offerings(
        &mut self,
        mask: &mut BitSet,
        pool: &NodePoolView,
        zone_ok: impl Fn(&str) -> bool,
        capacity_type_ok: impl Fn(&str) -> bool,
        extra: impl Fn(&Requirements) -> bool,
    ) {
        let mut zones = std::mem::take(&mut self.zone_scratch);
        let mut cts = std::mem::take(&mut self.capacity_type_scratch);
        zones.clear();
        zones.extend(self.zones.iter().map(|z| zone_ok(z)));
        cts.clear();
        cts.extend(self.capacity_types.iter().map(|c| capacity_type_ok(c)));
        mask.retain(|t| {
            let it = &pool.instance_types[self.types[t]];
            self.offerings[t].iter().any(|o| {
                zones[o.zone as usize]
                    && cts[o.capacity_type as usize]
                    && (it.offerings[o.index].requirements.is_empty()
                        || extra(&it.offerings[o.index].requirements))
            })
        });
        self.zone_scratch = zones;
        self.capacity_type_scratch = cts;
    }

    /// A pricer for claims with `requirements`: the cheapest allowed offering of a type.
    pub(super) fn pricer<'c>(
        &'c self,
        pool: &'c NodePoolView,
        requirements: &'c Requirements,
    ) -> Pricer<'c> {
        let zone = requirements.set_of(ZONE);
        let ct = requirements.set_of(CAPACITY_TYPE);
        Pricer {
            catalog: self,
            pool,
            requirements,
            zones: self
                .zones
                .iter()
                .map(|z| zone.is_none_or(|s| s.contains(z)))
                .collect(),
            capacity_types: self
                .capacity_types
                .iter()
                .map(|c| ct.is_none_or(|s| s.contains(c)))
                .collect(),
        }
    }

    /// `mask &=` the types whose allocatable holds `requests`; returns the per-resource maximum
    /// allocatable of what remains.
    /// Keeps the types whose volume attachment limits (Karpenter v1.15's
    /// `VolumeAttachmentLimits`) take `attached` and `adding` together; a type without a limit
    /// for a driver takes any number of its volumes. The first driver every type refused and its
    /// highest limit when none is left.
    pub(super) fn restrict_to_volumes(
        &self,
        mask: &mut BitSet,
        view: &NodePoolView,
        attached: &[CsiVolume],
        adding: &[CsiVolume],
    ) -> Option<(String, i64)> {
        let mut refused: Option<(String, i64)> = None;
        mask.retain(|t| {
            let limits = &view.instance_types[self.types[t]].volume_limits;
            match volume_limit_exceeded(limits, attached, adding) {
                None => true,
                Some((driver, limit)) => {
                    match &mut refused {
                        Some((d, best)) if d == driver => *best = (*best).max(limit),
                        Some(_) => {}
                        None => refused = Some((driver.to_owned(), limit)),
                    }
                    false
                }
            }
        });
        if mask.is_empty() { refused } else { None }
    }

    /// Keeps the types whose devices hold `adding` besides the claims `placed` on the claim;
    /// when none is left, why the first type with devices refused (none: no type has devices).
    pub(super) fn restrict_to_devices(
        &self,
        mask: &mut BitSet,
        view: &NodePoolView,
        placed: &[Arc<ClaimRequests>],
        adding: &[Arc<ClaimRequests>],
    ) -> Option<String> {
        let inventories = self.inventories.get_or_init(|| {
            self.types
                .iter()
                .map(|&i| {
                    let templates = &view.instance_types[i].devices;
                    if templates.is_empty() {
                        return None;
                    }
                    let owned: Vec<_> = templates.iter().map(|t| (**t).clone()).collect();
                    Inventory::from_templates(&owned)
                        .inspect_err(|err| {
                            tracing::debug!(instance_type = %view.instance_types[i].name, error = %err, "devices left out");
                        })
                        .ok()
                })
                .collect()
        });
        let mut refused: Option<String> = None;
        mask.retain(|t| {
            let Some(inventory) = inventories[t].as_ref() else {
                return false;
            };
            match devices::fit(Some(inventory), placed, adding) {
                Ok(()) => true,
                Err(why) => {
                    refused.get_or_insert(why);
                    false
                }
            }
        });
        if mask.is_empty() { refused } else { None }
    }

    pub(super) fn restrict_to_fit(&self, mask: &mut BitSet, requests: &Resources) -> Resources {
        let mut max = Resources::default();
        if requests.has_extended() || self.any_extended {
            mask.retain(|t| {
                let alloc = &self.alloc[t];
                let fits = requests.fits_in(alloc);
                if fits {
                    max.max_assign(alloc);
                }
                fits
            });
            return max;
        }
        // Standard resources only: compare columns.
        let [cpu, memory, storage, pods] = &self.columns;
        let mut top = [i64::MIN; 4];
        mask.retain(|t| {
            let fits = requests.cpu_millis <= cpu[t]
                && requests.memory <= memory[t]
                && requests.ephemeral_storage <= storage[t]
                && requests.pods <= pods[t];
            if fits {
                top[0] = top[0].max(cpu[t]);
                top[1] = top[1].max(memory[t]);
                top[2] = top[2].max(storage[t]);
                top[3] = top[3].max(pods[t]);
            }
            fits
        });
        if top[0] != i64::MIN {
            max.cpu_millis = top[0];
            max.memory = top[1];
            max.ephemeral_storage = top[2];
            max.pods = top[3];
        }
        max
    }

    /// The largest type of `mask` (by allocatable CPU, then memory).
    pub(super) fn largest(&self, mask: &BitSet) -> Option<usize> {
        mask.iter().max_by_key(|&t| {
            (
                self.alloc[t].cpu_millis,
                self.alloc[t].memory,
                std::cmp::Reverse(t),
            )
        })
    }

    /// Recomputes [`Catalog::within_limits`] for what the pool's limits leave.
    pub(super) fn apply_limits(&mut self, pool: &NodePoolView, remaining: Option<&ResourceLimits>) {
        let n = self.len();
        self.within_limits = BitSet::full(n);
        if let Some(remaining) = remaining {
            for t in 0..n {
                if remaining
                    .exceeded_by(&pool.instance_types[self.types[t]].capacity)
                    .is_some()
                {
                    self.within_limits.remove(t);
                }
            }
        }
    }

    /// The type of `mask` that fits in `room` and takes the smallest share of the pool's limits
    /// (cheapest first among equals), if any fits.
    pub(super) fn smallest_within(
        &self,
        pool: &NodePoolView,
        mask: &BitSet,
        room: &ResourceLimits,
    ) -> Option<usize> {
        let scale = pool.limits.as_ref().unwrap_or(room);
        let mut best: Option<(f64, usize)> = None;
        for t in mask.iter() {
            let capacity = &pool.instance_types[self.types[t]].capacity;
            if room.exceeded_by(capacity).is_some() {
                continue;
            }
            let share = scale.share(capacity);
            if best.is_none_or(|(s, _)| share < s) {
                best = Some((share, t));
            }
        }
        best.map(|(_, t)| t)
    }

    /// Keeps the types of `mask` that take no more of any resource `limits` bound than type
    /// `floor` does.
    pub(super) fn restrict_to_floor(
        &self,
        pool: &NodePoolView,
        mask: &mut BitSet,
        floor: usize,
        limits: &ResourceLimits,
    ) {
        let bound = &pool.instance_types[self.types[floor]].capacity;
        mask.retain(|t| limits.no_larger(&pool.instance_types[self.types[t]].capacity, bound));
    }

    /// The distinct values the types of `mask` define for `key`, counting up to `enough`.
    pub(super) fn distinct_values(&self, mask: &BitSet, key: &str, enough: usize) -> usize {
        let Some(pos) = self.key_position(key) else {
            return 0;
        };
        let index = &self.keys[pos];
        let mut seen = vec![false; index.value_ids.len()];
        let mut count = 0;
        for ((_, members), ids) in index.groups.iter().zip(&index.group_values) {
            if !members.intersects(mask) {
                continue;
            }
            for &id in ids {
                if let Some(slot) = seen.get_mut(id as usize)
                    && !*slot
                {
                    *slot = true;
                    count += 1;
                    if count >= enough {
                        return count;
                    }
                }
            }
        }
        count
    }
}

/// Prices the types of one claim: the cheapest offering its zone, capacity-type and other
/// requirements allow.
pub(super) struct Pricer<'c> {
    catalog: &'c Catalog,
    pool: &'c NodePoolView,
    requirements: &'c Requirements,
    zones: Vec<bool>,
    capacity_types: Vec<bool>,
}

impl Pricer<'_> {
    /// `(price, index into the type's offerings)` of type `t`'s cheapest allowed offering.
    ///
    /// Kept out of line: inlined into its callers' iterator chains, LLVM stops inlining the
    /// filter closure here (the requirement check lives in `capstan-model`, another crate), which
    /// cost the scheduling benchmark ~5%.
    #[inline(never)]
    pub(super) fn cheapest(&self, t: usize) -> Option<(f64, usize)> {
        self.allowed(t)
            .map(|o| (o.price, o.index))
            .min_by(|a, b| a.0.total_cmp(&b.0))
    }

    /// Type `t`'s available offerings the claim's zone, capacity-type and other requirements
    /// allow.
    fn allowed(&self, t: usize) -> impl Iterator<Item = &CatalogOffering> {
        let it = &self.pool.instance_types[self.catalog.types[t]];
        self.catalog.offerings[t].iter().filter(move |o| {
            self.zones[o.zone as usize] && self.capacity_types[o.capacity_type as usize] && {
                let reqs = &it.offerings[o.index].requirements;
                reqs.is_empty() || self.requirements.intersects(reqs).is_ok()
            }
        })
    }

    /// The provider's own price of type `t`: the cheapest of its allowed offerings at the price
    /// the provider listed (before any NodeOverlay; what it launches by). `None` when no offering
    /// is allowed.
    pub(super) fn listed(&self, t: usize) -> Option<f64> {
        let it = &self.pool.instance_types[self.catalog.types[t]];
        self.allowed(t)
            .map(|o| it.offerings[o.index].listed_price.unwrap_or(o.price))
            .min_by(f64::total_cmp)
    }
}
