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

pub mod allocator;
pub mod request;
pub mod selector;
pub mod template;
pub mod unsatisfiable;

pub use allocator::{
    AllocatedDevice, Allocation, ClaimAllocation, DEFAULT_STEP_BUDGET, Inventory, InventoryError,
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
