//! `karpenter.sh/v1` NodeClaim: a request for one node and, in its status, what the provider
//! launched for it. Field for field Karpenter's v1 API.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::duration::{DURATION_PATTERN, NILLABLE_DURATION_PATTERN};
use super::rules;
use super::shared::{Condition, NodeClassReference, Requirement, ResourceList, Taint};

/// Condition types on a NodeClaim, in lifecycle order.
pub mod conditions {
    pub const LAUNCHED: &str = "Launched";
    pub const REGISTERED: &str = "Registered";
    pub const INITIALIZED: &str = "Initialized";
    pub const READY: &str = "Ready";
    pub const DRIFTED: &str = "Drifted";
    pub const EMPTY: &str = "Empty";
    pub const CONSOLIDATABLE: &str = "Consolidatable";
    /// Capstan's verdict on consolidation: `True` with the cause while something keeps the node
    /// from being consolidated, `False` when nothing does.
    pub const CONSOLIDATION_BLOCKED: &str = "ConsolidationBlocked";
    pub const DISRUPTION_REASON: &str = "DisruptionReason";
    pub const DRAINED: &str = "Drained";
    pub const VOLUMES_DETACHED: &str = "VolumesDetached";
    pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
    /// A reboot in place: `True` while one is under way (reason [`REBOOT_REQUESTED`], then
    /// [`REBOOT_ISSUED`]), `False` once it ended ([`REBOOT_SUCCEEDED`] or [`REBOOT_FAILED`]).
    pub const REBOOTING: &str = "Rebooting";
    pub const REBOOT_REQUESTED: &str = "RebootRequested";
    pub const REBOOT_ISSUED: &str = "RebootIssued";
    pub const REBOOT_SUCCEEDED: &str = "RebootSucceeded";
    pub const REBOOT_FAILED: &str = "RebootFailed";
    /// `Initialized`'s reason while the node reboots.
    pub const REBOOTING_REASON: &str = "Rebooting";
}

/// NodeClaim is a request for one node. Its spec cannot change once created.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodeClaim",
    plural = "nodeclaims",
    singular = "nodeclaim",
    category = "karpenter",
    status = "NodeClaimStatus",
    derive = "PartialEq",
    doc = "NodeClaim is the Schema for the NodeClaims API",
    printcolumn(
        name = "Type",
        type_ = "string",
        json_path = ".metadata.labels.node\\.kubernetes\\.io/instance-type"
    ),
    printcolumn(
        name = "Capacity",
        type_ = "string",
        json_path = ".metadata.labels.karpenter\\.sh/capacity-type"
    ),
    printcolumn(
        name = "Zone",
        type_ = "string",
        json_path = ".metadata.labels.topology\\.kubernetes\\.io/zone"
    ),
    printcolumn(name = "Node", type_ = "string", json_path = ".status.nodeName"),
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
        name = "ImageID",
        type_ = "string",
        json_path = ".status.imageID",
        priority = "1"
    ),
    printcolumn(
        name = "ID",
        type_ = "string",
        json_path = ".status.providerID",
        priority = "1"
    ),
    printcolumn(
        name = "NodePool",
        type_ = "string",
        json_path = ".metadata.labels.karpenter\\.sh/nodepool",
        priority = "1"
    ),
    printcolumn(
        name = "NodeClass",
        type_ = "string",
        json_path = ".spec.nodeClassRef.name",
        priority = "1"
    ),
    printcolumn(
        name = "Drifted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Drifted\")].status",
        priority = "1"
    )
)]
#[x_kube(validation = Rule::new("self == oldSelf").message(rules::SPEC_IMMUTABLE))]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    /// Constraints the launched instance must satisfy.
    #[schemars(length(max = 100))]
    pub requirements: Vec<Requirement>,
    /// Resources the node must have room for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    pub node_class_ref: NodeClassReference,
    #[serde(default = "super::nodepool::default_expire_after")]
    #[schemars(pattern(NILLABLE_DURATION_PATTERN))]
    pub expire_after: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub termination_grace_period: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceRequirements {
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub requests: ResourceList,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub capacity: ResourceList,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub allocatable: ResourceList,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// When a pod was last scheduled to or removed from the node (drives consolidateAfter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<Time>,
}

impl NodeClaim {
    /// Whether a reboot in place is under way: `Rebooting=True`, from the repair that commits it
    /// until the node is back or the reboot failed. Its node's capacity is coming back.
    pub fn rebooting(&self) -> bool {
        self.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == conditions::REBOOTING && c.is_true())
        })
    }
}
