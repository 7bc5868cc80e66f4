//! A NodePool's instance types, precomputed for filtering: cheapest first, with per-type
//! allocatable (DaemonSet overhead already taken off), per-key compatibility indexes and compact
//! offerings, so narrowing a claim's options is bit-set arithmetic.

use std::collections::HashMap;

use super::bitset::BitSet;
use crate::api::labels::{CAPACITY_TYPE, ZONE};
use crate::scheduling::cluster::{InstanceType, NodePoolView};
use crate::scheduling::pod::Pod;
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
    /// Memo: types compatible with `In [value]`.
    value_masks: HashMap<String, BitSet>,
}

/// The instance types one pool may launch.
#[derive(Debug)]
pub(super) struct Catalog {
    /// Indices into the pool's `instance_types`, cheapest compatible offering first (then name).
    pub(super) types: Vec<usize>,
    /// Allocatable per type: capacity − overhead − the DaemonSet pods that would land.
    pub(super) alloc: Vec<Resources>,
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
            alloc: Vec::with_capacity(n),
            daemon: Vec::with_capacity(n),
            all: BitSet::full(n),
            within_limits: BitSet::full(n),
            keys: Vec::new(),
            zones: Vec::new(),
            capacity_types: Vec::new(),
            offerings: Vec::with_capacity(n),
            offering_keys: Vec::new(),
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
            catalog.alloc.push(it.allocatable().minus(&daemon));
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
                            value_masks: HashMap::new(),
                        },
                    );
                    pos
                }
            };
            let groups = &mut self.keys[pos].groups;
            match groups.iter_mut().find(|(set, _)| set == r.set()) {
                Some((_, members)) => members.insert(t),
                None => {
                    let mut members = BitSet::empty(n);
                    members.insert(t);
                    groups.push((r.set().clone(), members));
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
        *scratch = BitSet::empty(n);
        for value in values {
            if !index.value_masks.contains_key(value) {
                let mut allowed = index.undefined.clone();
                for (group_set, members) in &index.groups {
                    if group_set.contains(value) {
                        allowed.union_with(members);
                    }
                }
                index.value_masks.insert(value.to_owned(), allowed);
            }
            if let Some(allowed) = index.value_masks.get(value) {
                scratch.union_with(allowed);
            }
        }
        mask.intersect_with(scratch);
    }

    /// `mask &=` the types with an available offering whose zone and capacity type are allowed and
    /// whose own requirements pass `extra`.
    pub(super) fn restrict_to_offerings(
        &self,
        mask: &mut BitSet,
        pool: &NodePoolView,
        zone_ok: impl Fn(&str) -> bool,
        capacity_type_ok: impl Fn(&str) -> bool,
        extra: impl Fn(&Requirements) -> bool,
    ) {
        let zones: Vec<bool> = self.zones.iter().map(|z| zone_ok(z)).collect();
        let cts: Vec<bool> = self
            .capacity_types
            .iter()
            .map(|c| capacity_type_ok(c))
            .collect();
        let members: Vec<usize> = mask.iter().collect();
        for t in members {
            let it = &pool.instance_types[self.types[t]];
            let ok = self.offerings[t].iter().any(|o| {
                zones[o.zone as usize]
                    && cts[o.capacity_type as usize]
                    && (it.offerings[o.index].requirements.is_empty()
                        || extra(&it.offerings[o.index].requirements))
            });
            if !ok {
                mask.remove(t);
            }
        }
    }

    /// The cheapest offering of type `t` that the claim's requirements allow:
    /// `(price, index into the type's offerings)`.
    pub(super) fn cheapest_offering(
        &self,
        t: usize,
        pool: &NodePoolView,
        requirements: &Requirements,
    ) -> Option<(f64, usize)> {
        let it = &pool.instance_types[self.types[t]];
        let zone = requirements.set_of(ZONE);
        let ct = requirements.set_of(CAPACITY_TYPE);
        self.offerings[t]
            .iter()
            .filter(|o| {
                zone.is_none_or(|s| s.contains(&self.zones[o.zone as usize]))
                    && ct.is_none_or(|s| s.contains(&self.capacity_types[o.capacity_type as usize]))
                    && {
                        let reqs = &it.offerings[o.index].requirements;
                        reqs.is_empty() || requirements.intersects(reqs).is_ok()
                    }
            })
            .map(|o| (o.price, o.index))
            .min_by(|a, b| a.0.total_cmp(&b.0))
    }

    /// `mask &=` the types whose allocatable holds `requests`; returns the per-resource maximum
    /// allocatable of what remains.
    pub(super) fn restrict_to_fit(&self, mask: &mut BitSet, requests: &Resources) -> Resources {
        let mut max = Resources::default();
        let members: Vec<usize> = mask.iter().collect();
        for t in members {
            if requests.fits_in(&self.alloc[t]) {
                max.max_assign(&self.alloc[t]);
            } else {
                mask.remove(t);
            }
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

    /// The distinct values the types of `mask` define for `key`, counting up to `enough`.
    pub(super) fn distinct_values(
        &self,
        pool: &NodePoolView,
        mask: &BitSet,
        key: &str,
        enough: usize,
    ) -> usize {
        let mut seen: Vec<&str> = Vec::new();
        for t in mask.iter() {
            let it = &pool.instance_types[self.types[t]];
            if let Some(set) = it.requirements.set_of(key) {
                for v in set.values() {
                    if !seen.contains(&v.as_str()) {
                        seen.push(v);
                        if seen.len() >= enough {
                            return seen.len();
                        }
                    }
                }
            }
        }
        seen.len()
    }
}
