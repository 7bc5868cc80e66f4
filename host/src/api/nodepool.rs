//! `karpenter.sh/v1` NodePool: a template for the nodes Capstan may launch, with limits, weight and
//! disruption settings. Field for field Karpenter's v1 API.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use super::duration::{DURATION_PATTERN, NILLABLE_DURATION_PATTERN};
use super::rules;
use super::shared::{
    Condition, LABEL_VALUE_PATTERN, NodeClassReference, Requirement, ResourceList, Taint,
};

/// NodePool condition types.
pub mod conditions {
    /// The pool can be provisioned from (its NodeClass ready, its registrations healthy).
    pub const READY: &str = "Ready";
}

/// A budget's `nodes`: a count, or a percentage up to 100%.
pub const BUDGET_NODES_PATTERN: &str = r"^((100|[0-9]{1,2})%|[0-9]+)$";
/// A budget's `schedule`: a cron macro or five cron fields (no time zone).
pub const BUDGET_SCHEDULE_PATTERN: &str =
    r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly)|(\S+\s+){4}\S+)$";
/// A budget's `duration`: hours and minutes (cron has no seconds); Go's `Duration.String()` adds
/// a trailing `0s`, which is allowed.
pub const BUDGET_DURATION_PATTERN: &str = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$";

/// NodePool describes the nodes Capstan may provision and how they may be disrupted.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
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
#[x_kube(
    validation = Rule::new("has(self.replicas) == has(oldSelf.replicas)")
        .message(rules::STATIC_TRANSITION),
    validation = Rule::new(
        "!has(self.replicas) || !has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits)"
    )
    .message(rules::STATIC_LIMITS),
    validation = Rule::new("!has(self.replicas) || !has(self.weight)")
        .message(rules::STATIC_WEIGHT)
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
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
pub struct TemplateMetadata {
    /// Labels of the pool's nodes: at most 100, none in the `karpenter.sh` domain (but for
    /// `karpenter.sh/capacity-type`), nor `kubernetes.io/hostname`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "template_labels_schema")]
    #[x_kube(
        validation = rules::for_all(rules::outside_karpenter_domain("x")),
        validation = rules::for_all(rules::not_nodepool("x")),
        validation = rules::for_all(rules::not_hostname("x"))
    )]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The labels map of a pool's template: label values, at most 100 of them.
fn template_labels_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "maxProperties": 100,
        "additionalProperties": {
            "type": "string",
            "maxLength": 63,
            "pattern": LABEL_VALUE_PATTERN
        }
    })
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeClaimTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    pub spec: NodeClaimTemplateSpec,
}

/// The NodeClaim spec fields a pool sets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
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
    #[x_kube(validation = rules::for_all(rules::not_nodepool("x.key")))]
    pub requirements: Vec<Requirement>,
    /// The node class holding provider-specific configuration (its group and kind are fixed once
    /// the pool exists).
    #[x_kube(
        validation = Rule::new("self.group == oldSelf.group")
            .message(rules::NODE_CLASS_GROUP_IMMUTABLE),
        validation = Rule::new("self.kind == oldSelf.kind")
            .message(rules::NODE_CLASS_KIND_IMMUTABLE)
    )]
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
    /// Only empty nodes are consolidated.
    WhenEmpty,
    /// Empty nodes, and nodes whose pods fit elsewhere or on a cheaper node.
    #[default]
    WhenEmptyOrUnderutilized,
    /// As `WhenEmptyOrUnderutilized`, when the savings outweigh the disruption (see
    /// `docs/disruption.md`).
    Balanced,
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
    // Node repair (Karpenter v1.15): reboots and replacements of unhealthy nodes.
    Unhealthy,
}

/// A disruption budget: at most `nodes` (a count or a percentage) disrupted at once, optionally only
/// during a cron `schedule` window of `duration` (both or neither), optionally only for some
/// `reasons`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.schedule) == has(self.duration)")
        .message(rules::SCHEDULE_WITH_DURATION)
)]
pub struct Budget {
    #[serde(default = "default_budget_nodes")]
    #[schemars(pattern(BUDGET_NODES_PATTERN))]
    pub nodes: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(BUDGET_SCHEDULE_PATTERN))]
    pub schedule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(BUDGET_DURATION_PATTERN))]
    pub duration: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    #[x_kube(merge_strategy = ListMerge::Set)]
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
