//! What a scheduling simulation decides.

use super::requirements::Requirements;
use super::resources::Resources;

/// Index of a pod in [`super::SchedulingInput::pods`].
pub type PodIndex = usize;

/// Where a pod goes when it goes to capacity that already exists or is launching.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// An [`super::ExistingNode`], by name.
    Node(String),
    /// An [`super::InflightClaim`], by name.
    Claim(String),
}

/// The cheapest offering a new claim could launch.
#[derive(Clone, Debug, PartialEq)]
pub struct ChosenOffering {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    pub price: f64,
}

/// A NodeClaim to create.
#[derive(Clone, Debug, PartialEq)]
pub struct NewClaim {
    pub node_pool: String,
    /// The pool's requirements narrowed by the pods' and topology's, with
    /// `node.kubernetes.io/instance-type In [instance_type_options]`. The placeholder hostname the
    /// solver used is removed.
    pub requirements: Requirements,
    /// The pods' requests plus the DaemonSet pods that would land on the cheapest option.
    pub requests: Resources,
    /// Names of the compatible instance types, cheapest first, at most
    /// [`super::SchedulerOptions::max_instance_types`] (more only when `minValues` needs them).
    pub instance_type_options: Vec<String>,
    /// Price of the cheapest available compatible offering.
    pub cheapest_price: f64,
    pub cheapest_offering: ChosenOffering,
    /// The pods, in the order they were placed.
    pub pods: Vec<PodIndex>,
}

/// The outcome of [`super::solve`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SchedulingResult {
    pub new_claims: Vec<NewClaim>,
    /// Pods placed on existing nodes or in-flight claims, in placement order.
    pub existing_placements: Vec<(PodIndex, Target)>,
    /// Pods that fit nowhere, with a reason fit for a pod Event, in input order.
    pub unschedulable: Vec<(PodIndex, String)>,
    /// NodePool limits that refused a claim to pods now in `unschedulable`.
    pub limits_reached: Vec<LimitReached>,
}

impl SchedulingResult {
    /// The placements of pods at `from` or later onto capacity that is not up yet: an in-flight
    /// claim, or an existing node of `input` that is not initialized. A disruption must not count
    /// on them (Karpenter's rule: a node that may never come up is no home for evicted pods).
    pub fn placements_not_up<'a>(
        &'a self,
        input: &'a super::SchedulingInput,
        from: PodIndex,
    ) -> impl Iterator<Item = (PodIndex, &'a str)> + 'a {
        self.existing_placements
            .iter()
            .filter(move |(p, _)| *p >= from)
            .filter_map(move |(p, target)| match target {
                Target::Claim(name) => Some((*p, name.as_str())),
                Target::Node(name) => input
                    .existing_nodes
                    .iter()
                    .any(|n| !n.initialized && n.name == *name)
                    .then_some((*p, name.as_str())),
            })
    }
}

/// A NodePool limit that left pods without a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitReached {
    pub node_pool: String,
    /// The bounded resource (`cpu`, `memory`, `nodes`, ...).
    pub resource: String,
    /// The pool's `spec.limits` for it, in base units (millicores for `cpu`).
    pub limit: i64,
    /// What is left of it once the pool's nodes, claims in flight and this run's claims count.
    pub left: i64,
    /// The pods it refused, by index.
    pub pods: Vec<PodIndex>,
}
