//! One node's devices ([`Inventory`]) and the search that allocates claims to them.

mod search;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::resource::v1 as resource;
use serde::{Deserialize, Serialize};

use crate::request::{ClaimKey, ClaimRequests};
use crate::selector::{CompiledSelector, DeviceValue, matches_all};
use crate::template::qualified_name;
use crate::template::{AttributeValue, Device, DeviceId, ResourceSliceTemplate, TemplateError};
use crate::unsatisfiable::Unsatisfiable;

/// Search steps (device choices tried) one [`Inventory::allocate`] may take before giving up.
pub const DEFAULT_STEP_BUDGET: u64 = 200_000;

/// Why an inventory cannot be built or an allocation committed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InventoryError {
    /// A published slice does not convert.
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// Two devices with the same driver, pool and name.
    #[error("device {0} is declared twice")]
    DuplicateDevice(DeviceId),
    /// Two counter sets with the same driver, pool and name.
    #[error("counter set {0} is declared twice")]
    DuplicateCounterSet(String),
    /// A device consumes from a counter set (or counter) its pool does not declare.
    #[error("device {device} consumes counter {counter} which its pool does not declare")]
    UnknownCounter {
        /// The device.
        device: DeviceId,
        /// `set/counter`.
        counter: String,
    },
    /// An allocation names a device this inventory does not have.
    #[error("allocation names device {0}, which is not on this node")]
    UnknownDevice(DeviceId),
}

/// A device of the inventory, with everything the search reads precomputed.
#[derive(Debug)]
struct Entry {
    id: DeviceId,
    /// The device, attribute and capacity names fully qualified.
    device: Device,
    /// `(counter index, amount in milli-units)` taken while the device is allocated.
    consumes: Vec<(usize, i128)>,
    /// Devices with equal symmetry class are interchangeable for every selector and constraint.
    symmetry: usize,
}

#[derive(Debug)]
struct Counter {
    /// `driver/pool/set`.
    set: String,
    capacity: i128,
}

/// The devices of one node, what is allocated of them, and the claims committed to it. Clones
/// share the device data: cloning copies two small vectors and bumps reference counts.
#[derive(Debug, Clone)]
pub struct Inventory {
    entries: Arc<[Entry]>,
    counters: Arc<[Counter]>,
    index: Arc<HashMap<DeviceId, usize>>,
    /// Allocations per device (at most 1 unless it allows multiple allocations).
    uses: Arc<Vec<u32>>,
    /// Remaining amount per counter, in milli-units.
    remaining: Arc<Vec<i128>>,
    committed: Arc<BTreeSet<ClaimKey>>,
    /// Which devices each list of selectors matches, shared by clones (their devices are the
    /// same): the solver asks the same questions of many copies of one node.
    matches: Arc<Mutex<MatchCache>>,
}

/// Selector expressions (in order) → the devices they all match.
type MatchCache = HashMap<Vec<Arc<str>>, Arc<Matches>>;

/// The devices a list of selectors matches, in node order, and the first evaluation error.
#[derive(Debug)]
struct Matches {
    devices: Vec<usize>,
    note: Option<String>,
}

/// A device allocated to one request of a claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocatedDevice {
    /// `request` or `request/subrequest`, as in `status.allocation.devices.results`.
    pub request: String,
    /// The device.
    pub device: DeviceId,
}

/// The devices one claim got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimAllocation {
    /// The claim (remember it: pods sharing the claim use the same devices).
    pub claim: ClaimKey,
    /// Its devices, by request.
    pub devices: Vec<AllocatedDevice>,
}

/// The result of [`Inventory::allocate`]: the claims that needed devices on this node, and which.
/// Claims already allocated or committed to the inventory do not appear.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// Per claim, in the order given.
    pub claims: Vec<ClaimAllocation>,
}

/// The devices `claim`'s allocation holds (admin-access results, which take no device, left
/// out).
pub fn allocated_devices(claim: &resource::ResourceClaim) -> impl Iterator<Item = DeviceId> + '_ {
    claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_ref())
        .into_iter()
        .flatten()
        .filter(|r| r.admin_access != Some(true))
        .map(|r| DeviceId {
            driver: r.driver.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
        })
}

fn symmetry_key(driver: &str, device: &Device) -> String {
    let mut key = String::new();
    key.push_str(driver);
    key.push('\0');
    key.push_str(&format!(
        "{:?}\0{:?}\0{}",
        device.attributes, device.capacity, device.allow_multiple_allocations
    ));
    key
}

impl Inventory {
    /// The inventory of a node to be launched: every templated device is free.
    pub fn from_templates(templates: &[ResourceSliceTemplate]) -> Result<Self, InventoryError> {
        let mut counters = Vec::new();
        let mut counter_index: HashMap<(String, String, String, String), usize> = HashMap::new();
        let mut sets = BTreeSet::new();
        for template in templates {
            for set in &template.shared_counters {
                let set_name = format!("{}/{}/{}", template.driver, template.pool, set.name);
                if !sets.insert(set_name.clone()) {
                    return Err(InventoryError::DuplicateCounterSet(set_name));
                }
                for (name, value) in &set.counters {
                    let key = (
                        template.driver.clone(),
                        template.pool.clone(),
                        set.name.clone(),
                        name.clone(),
                    );
                    counter_index.insert(key, counters.len());
                    counters.push(Counter {
                        set: set_name.clone(),
                        capacity: value.millis(),
                    });
                }
            }
        }
        let mut entries = Vec::new();
        let mut index = HashMap::new();
        let mut symmetry: HashMap<String, usize> = HashMap::new();
        for template in templates {
            for device in &template.devices {
                let id = DeviceId {
                    driver: template.driver.clone(),
                    pool: template.pool.clone(),
                    device: device.name.clone(),
                };
                if index.insert(id.clone(), entries.len()).is_some() {
                    return Err(InventoryError::DuplicateDevice(id));
                }
                let mut consumes = Vec::new();
                for consumption in &device.consumes_counters {
                    for (name, amount) in &consumption.counters {
                        let key = (
                            template.driver.clone(),
                            template.pool.clone(),
                            consumption.counter_set.clone(),
                            name.clone(),
                        );
                        let counter = counter_index.get(&key).copied().ok_or_else(|| {
                            InventoryError::UnknownCounter {
                                device: id.clone(),
                                counter: format!("{}/{name}", consumption.counter_set),
                            }
                        })?;
                        consumes.push((counter, amount.millis()));
                    }
                }
                let device = Device {
                    name: device.name.clone(),
                    attributes: qualify_keys(&device.attributes, &template.driver),
                    capacity: qualify_keys(&device.capacity, &template.driver),
                    allow_multiple_allocations: device.allow_multiple_allocations,
                    consumes_counters: device.consumes_counters.clone(),
                };
                // Partitions of different counter sets are not interchangeable; name the sets.
                let mut key = symmetry_key(&template.driver, &device);
                for (counter, amount) in &consumes {
                    key.push_str(&format!("\0{counter}:{amount}"));
                }
                let next = symmetry.len();
                let class = *symmetry.entry(key).or_insert(next);
                entries.push(Entry {
                    id,
                    device,
                    consumes,
                    symmetry: class,
                });
            }
        }
        let remaining = counters.iter().map(|c| c.capacity).collect();
        Ok(Inventory {
            uses: Arc::new(vec![0; entries.len()]),
            entries: entries.into(),
            counters: counters.into(),
            index: Arc::new(index),
            remaining: Arc::new(remaining),
            committed: Arc::default(),
            matches: Arc::default(),
        })
    }

    /// The inventory of an existing node from the ResourceSlices its drivers published for it
    /// (the caller selects the node's slices), less the devices `claims` have allocated (claims
    /// allocated elsewhere name no device here and are ignored). Of a pool published in several
    /// generations, only the newest counts.
    pub fn from_slices(
        slices: &[resource::ResourceSlice],
        claims: &[resource::ResourceClaim],
    ) -> Result<Self, InventoryError> {
        let mut newest: BTreeMap<(&str, &str), i64> = BTreeMap::new();
        for slice in slices {
            let key = (slice.spec.driver.as_str(), slice.spec.pool.name.as_str());
            let generation = newest.entry(key).or_insert(slice.spec.pool.generation);
            *generation = (*generation).max(slice.spec.pool.generation);
        }
        // Several slices of one pool become one template so counter sets and devices meet.
        let mut pools: BTreeMap<(String, String), ResourceSliceTemplate> = BTreeMap::new();
        for slice in slices {
            let key = (slice.spec.driver.as_str(), slice.spec.pool.name.as_str());
            if newest.get(&key) != Some(&slice.spec.pool.generation) {
                continue;
            }
            let template = ResourceSliceTemplate::try_from(slice)?;
            let pool = pools
                .entry((template.driver.clone(), template.pool.clone()))
                .or_insert_with(|| ResourceSliceTemplate {
                    driver: template.driver.clone(),
                    pool: template.pool.clone(),
                    devices: Vec::new(),
                    shared_counters: Vec::new(),
                });
            pool.devices.extend(template.devices);
            pool.shared_counters.extend(template.shared_counters);
        }
        let templates: Vec<_> = pools.into_values().collect();
        let mut inventory = Self::from_templates(&templates)?;
        for claim in claims {
            for device in allocated_devices(claim) {
                inventory.mark_allocated(&device);
            }
        }
        Ok(inventory)
    }

    /// Marks `device` allocated (to a claim outside the simulation), taking its counters; `false`
    /// if the device is not on this node.
    pub fn mark_allocated(&mut self, device: &DeviceId) -> bool {
        match self.index.get(device).copied() {
            Some(entry) => {
                self.take(entry);
                true
            }
            None => false,
        }
    }

    fn take(&mut self, entry: usize) {
        let uses = Arc::make_mut(&mut self.uses);
        if uses[entry] == 0 {
            let remaining = Arc::make_mut(&mut self.remaining);
            for (counter, amount) in &self.entries[entry].consumes {
                remaining[*counter] -= amount;
            }
        }
        uses[entry] += 1;
    }

    /// The node's devices.
    pub fn devices(&self) -> impl Iterator<Item = &DeviceId> {
        self.entries.iter().map(|e| &e.id)
    }

    /// How many allocations `device` has (`None` if not on this node).
    pub fn uses(&self, device: &DeviceId) -> Option<u32> {
        self.index.get(device).map(|&i| self.uses[i])
    }

    /// How many devices claims can still take here: the free ones, or `None` when a device
    /// allows several allocations (then no count bounds what fits). A quick bound for callers
    /// that try many nodes: claims needing more devices than this cannot be allocated.
    pub fn free_devices(&self) -> Option<usize> {
        let mut free = 0;
        for (entry, &uses) in self.entries.iter().zip(self.uses.iter()) {
            if entry.device.allow_multiple_allocations {
                return None;
            }
            if uses == 0 {
                free += 1;
            }
        }
        Some(free)
    }

    /// Whether `claim` was committed to this inventory (then it needs nothing more here).
    pub fn is_committed(&self, claim: &ClaimKey) -> bool {
        self.committed.contains(claim)
    }

    /// Allocates `claims` (one pod's, or several pods') on this node with the default step budget.
    /// Claims appearing twice, committed before, or allocated already on this node need nothing.
    pub fn allocate(&self, claims: &[ClaimRequests]) -> Result<Allocation, Unsatisfiable> {
        self.allocate_with_budget(claims, DEFAULT_STEP_BUDGET)
    }

    /// [`Inventory::allocate`] giving up after `budget` search steps.
    pub fn allocate_with_budget(
        &self,
        claims: &[ClaimRequests],
        budget: u64,
    ) -> Result<Allocation, Unsatisfiable> {
        search::allocate(self, claims, budget)
    }

    /// Marks the devices and counters of `allocation` used and its claims committed. Claims
    /// committed already are skipped, so committing twice is harmless.
    pub fn commit(&mut self, allocation: &Allocation) -> Result<(), InventoryError> {
        for claim in &allocation.claims {
            if self.committed.contains(&claim.claim) {
                continue;
            }
            let entries = claim
                .devices
                .iter()
                .map(|d| {
                    self.index
                        .get(&d.device)
                        .copied()
                        .ok_or_else(|| InventoryError::UnknownDevice(d.device.clone()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            for entry in entries {
                self.take(entry);
            }
            Arc::make_mut(&mut self.committed).insert(claim.claim.clone());
        }
        Ok(())
    }
}

impl Inventory {
    /// The devices matching all `selectors` (from the shared cache, else evaluated with the
    /// device values `value` gives).
    fn matching(
        &self,
        selectors: &[CompiledSelector],
        mut value: impl FnMut(usize, &Entry) -> DeviceValue,
    ) -> Arc<Matches> {
        let key: Vec<Arc<str>> = selectors
            .iter()
            .map(CompiledSelector::expression_arc)
            .collect();
        let cached = self
            .matches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned();
        if let Some(cached) = cached {
            return cached;
        }
        let mut note = None;
        let mut devices = Vec::new();
        for (index, entry) in self.entries.iter().enumerate() {
            match matches_all(selectors, &value(index, entry)) {
                Ok(true) => devices.push(index),
                Ok(false) => {}
                Err(error) => {
                    note.get_or_insert_with(|| error.to_string());
                }
            }
        }
        // Kube-scheduler fails the allocation on a node where a selector errs on a device: none
        // of its devices match then.
        if note.is_some() {
            devices.clear();
        }
        let matches = Arc::new(Matches { devices, note });
        self.matches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, matches.clone());
        matches
    }
}

fn qualify_keys<V: Clone>(map: &BTreeMap<String, V>, driver: &str) -> BTreeMap<String, V> {
    map.iter()
        .map(|(name, value)| (qualified_name(name, driver), value.clone()))
        .collect()
}

impl Entry {
    fn attribute(&self, name: &str) -> Option<&AttributeValue> {
        self.device.attributes.get(name)
    }
}

#[cfg(test)]
mod tests;
