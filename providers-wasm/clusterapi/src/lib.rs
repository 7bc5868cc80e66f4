//! `clusterapi`: Capstan's Cluster API provider.
//!
//! Each MachineDeployment labelled `node.cluster.x-k8s.io/karpenter-member` (and each such
//! MachineSet no MachineDeployment owns) is an instance type (capacity, labels, taints, price and
//! sizes from its annotations, or the capacity from its infrastructure template's status). `create` scales the
//! cheapest compatible one up through its `scale` subresource, claims one of its new Machines and
//! waits for the Machine's providerID; `delete` marks the Machine
//! `cluster.x-k8s.io/delete-machine` and scales back down. Machines may live in a separate
//! management cluster. See `README.md` for the parameters, annotations and grants.
//!
//! Modules: [`params`], [`node_group`] (MachineDeployment annotations), [`catalog`] (instance
//! types and the choice of what to grow), [`ledger`] (launches sharing a scale-up), [`machine`] and
//! [`rollout`] (removing a Machine mid-rollout) are pure and unit-tested natively;
//! [`provider`] is the glue to the WIT export and the `kube` import.

pub mod catalog;
pub mod ledger;
pub mod machine;
pub mod node_group;
pub mod params;
pub mod provider;
pub mod rollout;

pub use provider::ClusterApi;

capstan_provider_sdk::export_provider!(ClusterApi);
// karpenter-provider-cluster-api's ClusterAPINodeClass, served besides capstan.dev NodeClass.
capstan_provider_sdk::declare_node_class_crds!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/node-class-crds.yaml"
));
