//! What the scheduler schedules onto: instance types and their offerings, NodePools, nodes that
//! exist and NodeClaims already launching.

use std::collections::BTreeMap;
use std::sync::Arc;

use capstan_dra::template::ResourceSliceTemplate;

use super::devices::NodeDevices;
use super::pod::Pod;
use super::requirements::Requirements;
use super::resources::{ResourceLimits, Resources};
use super::taints::Taint;

/// A machine shape a provider can launch (Karpenter's `cloudprovider.InstanceType`).
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceType {
    pub name: String,
    /// Labels the node will carry, as requirements (`node.kubernetes.io/instance-type In [name]`,
    /// `kubernetes.io/arch In [amd64]`, `topology.kubernetes.io/zone In [zones]`, ...).
    pub requirements: Requirements,
    pub offerings: Vec<Offering>,
    pub capacity: Resources,
    /// Kube-reserved, system-reserved and eviction thresholds: allocatable is capacity minus this.
    pub overhead: Resources,
    /// How many volumes each CSI driver may attach to a node of this type (Karpenter's
    /// `VolumeAttachmentLimits`); a driver not listed is not limited. A registered node's CSINode
    /// takes precedence ([`ExistingNode::volume_limits`]).
    pub volume_limits: BTreeMap<String, i64>,
    /// The DRA devices a node of this type will carry, as the ResourceSlices its drivers will
    /// publish (Karpenter's `DynamicResources`); shared with the other types that carry them.
    pub devices: Vec<Arc<ResourceSliceTemplate>>,
}

impl InstanceType {
    /// What pods may use: capacity minus overhead.
    pub fn allocatable(&self) -> Resources {
        self.capacity.minus(&self.overhead)
    }

    /// The most a claim that may launch any of `types` can count against its pool's limits: the
    /// largest of each resource among their capacities (`None` for no type).
    pub fn largest_capacity<'a>(types: impl IntoIterator<Item = &'a Self>) -> Option<Resources> {
        types.into_iter().fold(None, |largest, t| {
            let mut largest = largest.unwrap_or_default();
            largest.max_assign(&t.capacity);
            Some(largest)
        })
    }
}

/// Where and how an instance type can be bought, and for how much.
#[derive(Clone, Debug, PartialEq)]
pub struct Offering {
    pub zone: String,
    /// `on-demand`, `spot`, `reserved`.
    pub capacity_type: String,
    /// Price per hour.
    pub price: f64,
    /// The provider's own price when a NodeOverlay changed [`Self::price`] (`None`: unchanged).
    /// The provider launches by its own prices, so the claim leaves out what it would pick
    /// before the host's cheapest (see the solver's `finalize`).
    pub listed_price: Option<f64>,
    pub available: bool,
    /// Further requirements the offering carries (e.g. a reservation id); usually empty.
    pub requirements: Requirements,
}

impl Offering {
    pub fn new(zone: impl Into<String>, capacity_type: impl Into<String>, price: f64) -> Self {
        Self {
            zone: zone.into(),
            capacity_type: capacity_type.into(),
            price,
            listed_price: None,
            available: true,
            requirements: Requirements::new(),
        }
    }
}

/// A NodePool as the scheduler needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodePoolView {
    pub name: String,
    /// Higher weights are tried first (default 0); ties go by name.
    pub weight: i32,
    /// The template's requirements, with `minValues`.
    pub requirements: Requirements,
    /// The template's labels; each becomes an `In [value]` requirement.
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// Taints removed once the node is ready; ignored by scheduling (kept for the caller).
    pub startup_taints: Vec<Taint>,
    /// `spec.limits`, for messages.
    pub limits: Option<ResourceLimits>,
    /// What the limits leave for new nodes (limits minus what the pool's nodes already have);
    /// `None` when unlimited.
    pub remaining: Option<ResourceLimits>,
    /// The spend group the pool shares [`PROVIDER_PRICE`] in `limits` and `remaining` with (its
    /// provider's name): the pools of a group draw on one room, so what one opens the others
    /// no longer have.
    ///
    /// [`PROVIDER_PRICE`]: super::resources::PROVIDER_PRICE
    pub spend_group: Option<String>,
    /// The instance types the pool's node class offers. Pools sharing a node class share the list.
    pub instance_types: Arc<[InstanceType]>,
}

impl NodePoolView {
    /// A pool with no requirements, taints or limits over `instance_types`.
    pub fn new(name: impl Into<String>, instance_types: Arc<[InstanceType]>) -> Self {
        Self {
            name: name.into(),
            weight: 0,
            requirements: Requirements::new(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            limits: None,
            remaining: None,
            spend_group: None,
            instance_types,
        }
    }
}

/// A node that exists. Its running pods (DaemonSet pods included) are in `used`; `pods` lists the
/// ones that matter for topology and anti-affinity, shared (a consolidation candidate's pods are
/// its node's, not copies).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ExistingNode {
    pub name: String,
    pub node_pool: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// Taints that keep pods off (startup and not-ready taints already left out by the caller).
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    pub used: Resources,
    pub pods: Vec<Arc<Pod>>,
    /// Initialized nodes are tried before uninitialized ones.
    pub initialized: bool,
    /// How many volumes each CSI driver may attach to it (its CSINode's
    /// `spec.drivers[].allocatable.count`); a driver not listed is not limited. The volumes of
    /// `pods` ([`Pod::csi_volumes`]) count against it.
    pub volume_limits: BTreeMap<String, i64>,
    /// Its devices: the ResourceSlices its drivers published (less what claims hold), or until
    /// they do its instance type's templates; none when it has no devices.
    pub devices: Option<NodeDevices>,
}

/// A NodeClaim that is launching but has no node yet. DaemonSet pods that would land on it are
/// added to `used` by the solver.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct InflightClaim {
    pub name: String,
    pub node_pool: Option<String>,
    /// The claim's requirements with its labels folded in.
    pub requirements: Requirements,
    pub taints: Vec<Taint>,
    /// The launched instance's allocatable.
    pub allocatable: Resources,
    /// Requests of pods already bound or nominated to it.
    pub used: Resources,
    pub pods: Vec<Arc<Pod>>,
    /// Its devices, from its instance type's templates once it has one.
    pub devices: Option<NodeDevices>,
}
