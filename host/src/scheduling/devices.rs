//! Dynamic Resource Allocation in the simulation: the devices a pod's ResourceClaims ask for
//! ([`PodDevices`]) and the devices a node carries ([`NodeDevices`]: the ResourceSlices its
//! drivers published, or its instance type's templates), checked with `capstan-dra`'s allocator.
//! kube-scheduler allocates for real once the pod is bound; the simulation only makes sure every
//! pod lands where its claims can be satisfied, together with the claims of the pods placed there
//! before it.

use std::sync::Arc;

use capstan_dra::{ClaimKey, ClaimRequests, Inventory};

/// What a pod asks of a node's devices.
#[derive(Clone, Debug, Default)]
pub struct PodDevices {
    /// Its claims that still need devices (a claim shared by several pods appears in each, and
    /// is allocated once per node).
    pub claims: Vec<Arc<ClaimRequests>>,
    /// The node its claims are allocated on already (their allocation's node selector), if any:
    /// the pod can only run there.
    pub pinned_to: Option<String>,
}

impl PartialEq for PodDevices {
    fn eq(&self, other: &Self) -> bool {
        self.pinned_to == other.pinned_to
            && self.claims.len() == other.claims.len()
            && self
                .claims
                .iter()
                .zip(&other.claims)
                .all(|(a, b)| a.key == b.key)
    }
}

impl PodDevices {
    /// Whether the pod asks nothing of devices.
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty() && self.pinned_to.is_none()
    }

    /// The keys of its claims.
    pub fn keys(&self) -> impl Iterator<Item = &ClaimKey> {
        self.claims.iter().map(|c| &c.key)
    }
}

/// The devices of a node (existing, in flight or launched as an instance type).
#[derive(Clone, Debug)]
pub struct NodeDevices(pub Inventory);

impl PartialEq for NodeDevices {
    fn eq(&self, other: &Self) -> bool {
        self.0.devices().eq(other.0.devices())
    }
}

/// Whether `adding` can be allocated on a node with `devices` (none: a node without devices)
/// besides the claims `placed` on it in this simulation; `Err` says why not. Claims already in
/// `placed` (shared) need nothing more.
pub fn fit(
    devices: Option<&Inventory>,
    placed: &[Arc<ClaimRequests>],
    adding: &[Arc<ClaimRequests>],
) -> Result<(), String> {
    if adding.iter().all(|c| placed.iter().any(|p| p.key == c.key)) {
        return Ok(());
    }
    let Some(inventory) = devices else {
        return Err(format!(
            "the node has no devices for ResourceClaim {}",
            adding[0].key
        ));
    };
    // A cheap bound first on nodes that hold claims already: the solver tries a pod on many
    // of them, most full. (On an empty node the allocator's own answer says more.)
    if !placed.is_empty()
        && let Some(free) = inventory.free_devices()
    {
        let needed: usize = placed
            .iter()
            .chain(new_claims(placed, adding))
            .filter(|c| !inventory.is_committed(&c.key))
            .map(|c| c.min_devices())
            .sum();
        if needed > free {
            return Err(format!(
                "the node has {free} free devices and its claims need at least {needed}"
            ));
        }
    }
    let claims: Vec<ClaimRequests> = placed
        .iter()
        .chain(adding)
        .map(|c| ClaimRequests::clone(c))
        .collect();
    inventory
        .allocate(&claims)
        .map(|_| ())
        .map_err(|why| why.to_string())
}

/// The claims of `adding` not in `placed`, to add to a node's list when a pod lands.
pub fn new_claims<'a>(
    placed: &'a [Arc<ClaimRequests>],
    adding: &'a [Arc<ClaimRequests>],
) -> impl Iterator<Item = &'a Arc<ClaimRequests>> {
    adding
        .iter()
        .filter(move |c| !placed.iter().any(|p| p.key == c.key))
}
