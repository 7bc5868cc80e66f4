//! Capstan's one model of the data the host and its providers both reason about, so the two cannot
//! disagree:
//!
//! - [`labels`]: well-known Kubernetes and Karpenter label keys, taint keys and values;
//! - [`requirements`]: node-selector requirements (`In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`,
//!   `Lt` and Karpenter v1's `Gte`/`Lte`) as per-key [`ValueSet`]s with Karpenter's algebra
//!   (intersection, `Intersects`, `Compatible`, label matching, `minValues`);
//! - [`quantity`]: Kubernetes quantities (`"500m"`, `"16Gi"`, `"2e3"`) parsed exactly into
//!   milli-units and formatted back canonically;
//! - [`taints`]: taints and tolerations with Kubernetes' matching rules;
//! - [`civil`]: calendar arithmetic (days since the epoch of a date and back) for timestamps;
//! - [`catalog`]: the flat instance-type catalog providers return, and the [`CatalogBuilder`]
//!   that interns it (run by guests, and natively by the host's tests and benchmarks).
//!
//! The host's scheduler (`capstan::scheduling`) and the guest SDK (`capstan-provider-sdk`) both use
//! this crate. It depends on nothing but `thiserror` (and, with the `serde` feature, `serde`), and
//! builds natively and for `wasm32-wasip2`.

pub mod catalog;
pub mod civil;
pub mod labels;
pub mod quantity;
pub mod requirements;
pub mod taints;

pub use catalog::{CatalogBuilder, InstanceTypeBuilder};
pub use quantity::{Quantity, QuantityError};
pub use requirements::{
    Incompatibility, Operator, Requirement, Requirements, RequirementsError, SetOperator, ValueSet,
};
pub use taints::{Taint, TaintEffect, Toleration, TolerationOperator};
