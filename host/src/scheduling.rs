//! The scheduling simulation at the heart of the provisioner: given pending pods, NodePools with
//! their instance types, existing nodes and NodeClaims already launching, decide which pods go
//! where and which NodeClaims to create. Pure and I/O-free: plain domain types in, a
//! [`SchedulingResult`] out, same input → same output.
//!
//! It follows Karpenter's scheduler (`pkg/controllers/provisioning/scheduling`) behaviour for
//! behaviour:
//!
//! - **Requirements algebra** ([`requirements`], from `capstan-model`, shared with the guest SDK):
//!   `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt` (and v1's `Gte`/`Lte`) per key,
//!   intersection, compatibility and `minValues`.
//! - **Instance-type filtering**: a NodePool offers the instance types compatible with its
//!   requirements and labels that have an available offering it allows; a pod narrows them by its
//!   node selector and required node affinity, and must tolerate the pool's taints.
//! - **Resource fit** on allocatable = capacity − overhead − the DaemonSet pods that would land on
//!   the node (per instance type), counting every pod against the `pods` resource.
//! - **Packing**, first-fit decreasing: pods sorted by CPU then memory, largest first; each goes
//!   to the first existing node that fits, then the first in-flight NodeClaim, then the NodeClaims
//!   this run opened (fewest pods first), and only then opens a new NodeClaim from the
//!   highest-weight pool that can take it. A new NodeClaim keeps the set of instance types that
//!   still fit everything placed on it; at the end it is narrowed to the cheapest N
//!   ([`SchedulerOptions::max_instance_types`]) and priced by its cheapest available offering.
//! - **NodePool weights and limits**: heavier pools first; a pool's remaining limits exclude
//!   instance types that would exceed them. Each new NodeClaim holds its *floor*, the type among
//!   its options that takes the least of the limits, and is finalized with only the types no
//!   larger than that, so the largest options of all claims sum to at most what the limits left
//!   (Karpenter instead lets a claim list every type that fits and counts its largest, which lets
//!   one claim in flight block the pool).
//! - **Topology**: spread constraints, required pod affinity and anti-affinity over any topology
//!   key (zone and hostname in practice), including anti-affinity of already-running pods.
//!   Preferences (preferred affinities, `ScheduleAnyway` spreads, extra required-affinity terms,
//!   `PreferNoSchedule` taints) are treated as requirements and relaxed one at a time when a pod
//!   cannot be placed.
//!
//! Conversions from Kubernetes objects live in [`convert`], so the core never sees `k8s_openapi`.
//!
//! ```
//! use std::sync::Arc;
//! use capstan::scheduling::{self, *};
//!
//! let types: Arc<[InstanceType]> = Arc::from(vec![InstanceType {
//!     name: "small".into(),
//!     requirements: Requirements::new().with(Requirement::in_("node.kubernetes.io/instance-type", ["small"])),
//!     offerings: vec![Offering::new("zone-a", "on-demand", 0.1)],
//!     capacity: Resources::new(2000, 4 << 30, 10),
//!     overhead: Resources::default(),
//!     volume_limits: Default::default(),
//!     devices: Vec::new(),
//! }]);
//! let input = SchedulingInput {
//!     pods: vec![Pod::new("default", "web", Resources::new(500, 1 << 30, 0))],
//!     node_pools: vec![NodePoolView::new("default", types)],
//!     ..SchedulingInput::default()
//! };
//! let result = scheduling::solve(&input);
//! assert_eq!(result.new_claims.len(), 1);
//! assert_eq!(result.new_claims[0].instance_type_options, vec!["small".to_string()]);
//! ```

pub mod buffer;
pub mod cluster;
pub mod convert;
pub mod devices;
pub mod floor;
pub mod overlay;
pub mod pod;
pub mod policy;
pub mod removal;
// The requirements algebra, quantities and taints are the shared model's (`capstan-model`), the
// same code the guest SDK uses; re-exported here under their old paths.
pub use capstan_model::{quantity, requirements, taints};
pub mod resources;
pub mod result;
pub mod selector;
mod solver;
#[cfg(test)]
mod validate_tests;

pub use cluster::{ExistingNode, InflightClaim, InstanceType, NodePoolView, Offering};
pub use pod::{
    CsiVolume, HostPort, Namespaces, NodeInclusionPolicy, Pod, PodAffinityTerm, PreferredTerm,
    TopologySpreadConstraint, WeightedPodAffinityTerm, WhenUnsatisfiable,
};
pub use policy::{MinValuesPolicy, PreferencePolicy};
pub use requirements::{Incompatibility, Operator, Requirement, Requirements, ValueSet};
pub use resources::{ResourceLimits, Resources};
pub use result::{ChosenOffering, LimitReached, NewClaim, PodIndex, SchedulingResult, Target};
pub use selector::{LabelSelector, SelectorOperator};
pub use taints::{Taint, TaintEffect, Toleration, TolerationOperator};

/// How the solver behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerOptions {
    /// How many of the cheapest compatible instance types a new NodeClaim lists (Karpenter's
    /// `MaxInstanceTypes`: 600).
    pub max_instance_types: usize,
    /// Label keys every node has even when a NodePool does not constrain them, besides the
    /// built-in ones (zone, region, instance type, arch, os, capacity type, nodepool, Windows
    /// build) and every key an instance type defines. A pod may require these on a new NodeClaim
    /// whose pool leaves them open.
    pub well_known_labels: Vec<String>,
    /// Whether pods' preferences count (`--preference-policy`; default `Respect`).
    pub preference_policy: PreferencePolicy,
    /// Whether `minValues` can be relaxed (`--min-values-policy`; default `Strict`).
    pub min_values_policy: MinValuesPolicy,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        Self {
            max_instance_types: 600,
            well_known_labels: Vec::new(),
            preference_policy: PreferencePolicy::Respect,
            min_values_policy: MinValuesPolicy::Strict,
        }
    }
}

/// Everything one simulation looks at.
#[derive(Clone, Debug, Default)]
pub struct SchedulingInput {
    /// Pods to place.
    pub pods: Vec<Pod>,
    pub node_pools: Vec<NodePoolView>,
    pub existing_nodes: Vec<ExistingNode>,
    pub inflight_claims: Vec<InflightClaim>,
    /// One pod per DaemonSet (its template): they land on every new node they tolerate and select.
    pub daemonset_pods: Vec<Pod>,
    pub options: SchedulerOptions,
}

/// Runs the simulation. See the module documentation for the algorithm.
pub fn solve(input: &SchedulingInput) -> SchedulingResult {
    // `Ignore` drops the pending pods' preferences up front (Karpenter ignores them the same way,
    // for the pods it schedules); the solver then has nothing to relax.
    if input.options.preference_policy == PreferencePolicy::Ignore
        && input.pods.iter().any(policy::has_preferences)
    {
        let mut stripped = input.clone();
        stripped.pods.iter_mut().for_each(policy::drop_preferences);
        return solver::solve(&stripped);
    }
    solver::solve(input)
}
