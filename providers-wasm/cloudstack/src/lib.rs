//! `cloudstack`: Capstan's Apache CloudStack provider (contract `capstan:provider@0.4.0`).
//!
//! Service offerings are instance types, offered in every zone of the NodeClass that has the
//! offering, a selected template and a selected network; `create` deploys the cheapest
//! offering the claim allows through the signed CloudStack API (over `wasi:http`, under the
//! Provider's egress grants, with the API key and secret from `wasi:config`), tags the VM with
//! its owners, and waits for the async job with host sleeps; `reboot` reboots the VM in place
//! (`rebootVirtualMachine`), once per operation ID. See `README.md`.
//!
//! Pure and unit-tested natively: [`params`], [`selector`], [`pricing`], [`endpoint`],
//! [`api`] (CloudStack's JSON shapes and errors), [`catalog`], [`selection`], [`instance`],
//! [`drift`], [`tags`], [`hash`]; [`client`] and [`operations`] are generic over the transport,
//! clock and store and tested natively against a scripted cloud; [`provider`] is the glue to the
//! WIT export and the host.

pub mod api;
pub mod catalog;
pub mod client;
pub mod drift;
pub mod endpoint;
pub mod hash;
pub mod instance;
pub mod operations;
pub mod params;
pub mod pricing;
pub mod provider;
pub mod selection;
pub mod selector;
pub mod tags;

pub use provider::CloudStack;

capstan_provider_sdk::export_provider!(CloudStack);
// karpenter-provider-cloudstack's CloudStackNodeClass, served besides capstan.dev NodeClass.
capstan_provider_sdk::declare_node_class_crds!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/node-class-crds.yaml"
));
