//! `karpenter.sh/v1` NodePool: a template for the nodes Capstan may launch, with limits, weight and
//! disruption settings. Field for field Karpenter's v1 API.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::duration::{DURATION_PATTERN, NILLABLE_DURATION_PATTERN};
use super::shared::{Condition, NodeClassReference, Requirement, ResourceList, Taint};

/// NodePool describes the nodes Capstan may provision and how they may be disrupted.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    plural = "nodepools",
    singular = "nodepool",
    category = "karpenter",
    status = "NodePoolStatus",
    derive = "PartialEq",
    doc = "NodePool is the Schema for the NodePools API",
    printcolumn(
        name = "NodeClass",
        type_ = "string",
        json_path = ".spec.template.spec.nodeClassRef.name"
    ),
    printcolumn(name = "Nodes", type_ = "string", json_path = ".status.nodes"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Weight",
        type_ = "integer",
        json_path = ".spec.weight",
        priority = "1"
    ),
    printcolumn(
        name = "CPU",
        type_ = "string",
        json_path = ".status.resources.cpu",
        priority = "1"
    ),
    printcolumn(
        name = "Memory",
        type_ = "string",
        json_path = ".status.resources.memory",
        priority = "1"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolSpec {
    /// The template every NodeClaim of this pool starts from.
    pub template: NodeClaimTemplate,
    /// How nodes of this pool may be disrupted.
    #[serde(default)]
    pub disruption: Disruption,
    /// Upper bounds on the total resources of this pool's nodes (`cpu`, `memory`, `nodes`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceList>,
    /// Priority among pools: higher weights are tried first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
    /// A static pool: keep exactly this many nodes instead of provisioning for pending pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i64>,
}

/// Labels and annotations copied onto every NodeClaim and Node of the pool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TemplateMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeClaimTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    pub spec: NodeClaimTemplateSpec,
}

/// The NodeClaim spec fields a pool sets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    /// Taints every node of the pool carries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Taints the node starts with and some agent removes once it is ready (ignored by scheduling).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    /// Constraints on the instance types and offerings the pool may launch.
    #[schemars(length(max = 100))]
    pub requirements: Vec<Requirement>,
    /// The node class holding provider-specific configuration.
    pub node_class_ref: NodeClassReference,
    /// How long a node may live before it is replaced (`720h` by default, or `Never`).
    #[serde(default = "default_expire_after")]
    #[schemars(pattern(NILLABLE_DURATION_PATTERN))]
    pub expire_after: String,
    /// How long draining may take before pods are deleted regardless of PDBs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub termination_grace_period: Option<String>,
}

pub fn default_expire_after() -> String {
    "720h".to_owned()
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConsolidationPolicy {
    WhenEmpty,
    #[default]
    WhenEmptyOrUnderutilized,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// How long after a pod was added or removed a node may be consolidated (`0s` default, or `Never`).
    #[serde(default = "default_consolidate_after")]
    #[schemars(pattern(NILLABLE_DURATION_PATTERN))]
    pub consolidate_after: String,
    #[serde(default)]
    pub consolidation_policy: ConsolidationPolicy,
    /// How many nodes may be disrupted at once (`10%` by default).
    #[serde(default = "default_budgets")]
    #[schemars(length(max = 50))]
    pub budgets: Vec<Budget>,
}

impl Default for Disruption {
    fn default() -> Self {
        Self {
            consolidate_after: default_consolidate_after(),
            consolidation_policy: ConsolidationPolicy::default(),
            budgets: default_budgets(),
        }
    }
}

pub fn default_consolidate_after() -> String {
    "0s".to_owned()
}

pub fn default_budgets() -> Vec<Budget> {
    vec![Budget {
        nodes: "10%".to_owned(),
        schedule: None,
        duration: None,
        reasons: Vec::new(),
    }]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum DisruptionReason {
    Underutilized,
    Empty,
    Drifted,
}

/// A disruption budget: at most `nodes` (a count or a percentage) disrupted at once, optionally only
/// during a cron `schedule` window of `duration`, optionally only for some `reasons`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    #[serde(default = "default_budget_nodes")]
    #[schemars(pattern(r"^((100|[0-9]{1,2})%|[0-9]+)$"))]
    pub nodes: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$"))]
    pub duration: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<DisruptionReason>,
}

fn default_budget_nodes() -> String {
    "10%".to_owned()
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// Total resources of the pool's nodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: ResourceList,
    /// Number of nodes in the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
}
