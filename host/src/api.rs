//! Kubernetes API types.
//!
//! - `karpenter.sh/v1` [`NodePool`] and [`NodeClaim`]: Karpenter's API, field for field, so existing
//!   NodePool YAML works unchanged and `kubectl get nodeclaims` shows what Karpenter would.
//! - `karpenter.sh/v1alpha1` [`NodeOverlay`]: prices and extended resources of matching instance
//!   types (feature gate `NodeOverlay`).
//! - `autoscaling.x-k8s.io/v1beta1` [`CapacityBuffer`]: spare room kept for placeholder pods
//!   (feature gate `CapacityBuffer`), the API Karpenter v1.14 carries from SIG Autoscaling.
//! - `capstan.dev/v1alpha1` [`NodeClass`] (what a NodePool's `nodeClassRef` points at; selects a
//!   provider and carries its parameters) and [`Provider`] (where a provider's wasm comes from, and
//!   the grants and limits it runs with).
//!
//! The CRD YAML in `crds/` and `charts/capstan/crds/` is generated from these types
//! ([`crds::all`]); a test fails when either drifts apart. The types also carry the validation
//! Karpenter's CRDs have (patterns, enums, lengths, and the CEL rules of [`rules`]), so the API
//! server refuses malformed NodePools and NodeClaims.

// `#[kube(printcolumn(...), ...)]` repeats keys on purpose.
#[allow(clippy::duplicated_attributes)]
pub mod capacitybuffer;
pub mod crds;
pub mod duration;
pub mod labels;
// `#[kube(printcolumn(...), ...)]` repeats keys on purpose.
#[allow(clippy::duplicated_attributes)]
pub mod nodeclaim;
// `#[kube(printcolumn(...), ...)]` repeats keys on purpose.
#[allow(clippy::duplicated_attributes)]
pub mod nodeclass;
// `#[kube(printcolumn(...), ...)]` repeats keys on purpose.
#[allow(clippy::duplicated_attributes)]
pub mod nodepool;
// `#[kube(printcolumn(...), ...)]` repeats keys on purpose.
#[allow(clippy::duplicated_attributes)]
pub mod nodeoverlay;
// `#[kube(printcolumn(...), ...)]` repeats keys on purpose.
#[allow(clippy::duplicated_attributes)]
pub mod provider;
pub mod rules;
pub mod shared;
pub mod template_hash;

pub use capacitybuffer::{CapacityBuffer, CapacityBufferSpec, CapacityBufferStatus};
pub use nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus};
pub use nodeclass::{NodeClass, NodeClassSpec, NodeClassStatus};
pub use nodeoverlay::{NodeOverlay, NodeOverlaySpec, NodeOverlayStatus};
pub use nodepool::{NodePool, NodePoolSpec, NodePoolStatus};
pub use provider::{Provider, ProviderSpec, ProviderStatus};
pub use shared::{
    Condition, ConditionStatus, NodeClassReference, NodeSelectorOperator, Quantity, Requirement,
    ResourceList, Taint, TaintEffect,
};
