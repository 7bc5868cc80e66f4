//! Dynamic Resource Allocation (`resource.k8s.io/v1`, Kubernetes 1.34) for Capstan's scheduling
//! simulation.
//!
//! Pods may ask for devices through ResourceClaims (or ResourceClaimTemplates) whose requests
//! select devices by DeviceClass and CEL expressions. Before Capstan launches a node for such a
//! pod, or packs the pod onto a node in its simulation, it must know that the node will carry
//! devices that kube-scheduler can allocate to the pod's claims: never strand a pod on a node
//! lacking its devices, and never refuse a node that would fit.
//!
//! - [`template`]: the devices of one node: ResourceSlice templates a cloud provider declares per
//!   instance type (like Karpenter's `cloudprovider.DynamicResources`), or the ResourceSlices an
//!   existing node's drivers published.
//! - [`selector`]: CEL selectors, compiled once per expression and evaluated per device, with the
//!   Kubernetes `quantity()` and `semver()` library. CEL comes from the `cel` crate (cel-rust, a
//!   pure-Rust CEL interpreter): it is the only maintained CEL implementation in Rust, and the
//!   selectors are user-written CEL, so a hand-rolled subset would refuse real DeviceClasses.
//! - [`request`]: a claim's requests normalised against the DeviceClasses.
//! - [`allocator`]: an [`Inventory`] of one node and a bounded backtracking search allocating
//!   claims on it, with shared counters (partitionable devices), `matchAttribute`,
//!   `distinctAttribute`, `firstAvailable` and `allocationMode: All`.
//! - [`unsatisfiable`]: why not, in words for a pod Event.
//!
//! Everything is pure: no I/O, no async. Kube-scheduler does the real allocation later.
//!
//! # Typical use
//!
//! ```
//! use capstan_dra::{ClaimKey, ClaimRequests, DeviceClasses, Inventory, SelectorCache};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let templates: Vec<capstan_dra::ResourceSliceTemplate> = serde_json::from_str(r#"[{
//!     "driver": "gpu.example.com", "pool": "node",
//!     "devices": [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"}},
//!                  "capacity": {"memory": "80Gi"}}]
//! }]"#)?;
//! let mut node = Inventory::from_templates(&templates)?;
//! let mut classes = DeviceClasses::new();
//! classes.insert("gpu", vec![r#"device.driver == "gpu.example.com""#.to_owned()]);
//! let spec = serde_json::from_str(
//!     r#"{"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}"#,
//! )?;
//! let mut cache = SelectorCache::new();
//! let claim = ClaimRequests::from_spec(ClaimKey::new("ml", "train"), &spec, &classes, &mut cache)?;
//! let allocation = node.allocate(&[claim])?;
//! node.commit(&allocation)?;
//! assert_eq!(allocation.claims[0].devices[0].device.device, "gpu-0");
//! # Ok(())
//! # }
//! ```
//!
//! # Left out, knowingly
//!
//! - Consumable capacity (`exactly.capacity.requests`, `DeviceCapacity.requestPolicy`, alpha in
//!   1.34): a device with `allowMultipleAllocations` may be shared by any number of requests, and
//!   its shared counters are taken once. This is optimistic for such devices (rare, alpha).
//! - `adminAccess`: such requests are treated as ordinary ones (they need a free device), which is
//!   conservative.
//! - Device taints and request tolerations, binding conditions, node selectors of slices and
//!   network-attached (`allNodes`) pools: the caller passes the slices (or templates) of one node.
//! - Karpenter's `AttributeBindings` (runtime-only attribute values shared by a set of devices):
//!   templates must carry the attributes `matchAttribute` constrains.
//!
//! A selector's runtime error on a device (e.g. a missing attribute) refuses the node for that
//! request, quoting the error, as kube-scheduler 1.34's allocator fails the allocation on a node
//! where a device errs (whichever devices it evaluates first): the simulation never counts on a
//! node kube-scheduler may refuse. Guard attributes with `in` in selectors.

pub mod allocator;
pub mod request;
pub mod selector;
pub mod template;
pub mod unsatisfiable;

pub use allocator::{
    AllocatedDevice, Allocation, ClaimAllocation, DEFAULT_STEP_BUDGET, Inventory, InventoryError,
    allocated_devices,
};
pub use request::{
    AllocationMode, Alternative, ClaimKey, ClaimRequests, Constraint, ConstraintKind,
    DeviceClasses, ExistingAllocation, Request,
};
pub use selector::{CompiledSelector, DeviceValue, SelectorCache, SelectorError, matches_all};
pub use template::{
    AttributeValue, CounterConsumption, CounterSet, Device, DeviceId, ResourceSliceTemplate,
    TemplateError,
};
pub use unsatisfiable::Unsatisfiable;
