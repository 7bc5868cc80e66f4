//! `kwok`: Capstan's fake-node provider, for demos and tests.
//!
//! It "launches" an instance by creating a `v1/Node` in the workload cluster, annotated
//! `kwok.x-k8s.io/node: fake` so the kwok controller marks it Ready and keeps its lease. Instance
//! types come from a generated catalog shaped like Karpenter's kwok one, or from the NodeClass
//! parameters; see `README.md` for the parameters and the grants the provider needs.
//!
//! Modules: [`params`] (NodeClass parameters), [`catalog`] (instance types), [`devices`] (their
//! DRA devices, from Karpenter's DRA KWOK driver's `DRAConfig`s), [`selection`]
//! (cheapest compatible offering), [`node`] (the Node object), [`drift`], [`reboot`] (a reboot as
//! kwok plays one), [`errors`] (kube → provider errors) are pure and unit-tested natively; [`provider`] is the glue to the WIT export
//! and the `kube` import.

pub mod catalog;
pub mod devices;
pub mod drift;
pub mod errors;
pub mod node;
pub mod params;
pub mod provider;
pub mod reboot;
pub mod selection;

pub use provider::Kwok;

capstan_provider_sdk::export_provider!(Kwok);
// Karpenter's KWOKNodeClass, served besides capstan.dev NodeClass.
capstan_provider_sdk::declare_node_class_crds!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/node-class-crds.yaml"
));
