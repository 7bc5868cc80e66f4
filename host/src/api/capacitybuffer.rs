//! `autoscaling.x-k8s.io/v1beta1` CapacityBuffer: spare room the provisioner keeps free, as
//! placeholder ("virtual") pods that must fit but are never bound (behind the `CapacityBuffer`
//! feature gate, as in Karpenter v1.14, which carries SIG Autoscaling's API). Field for field
//! Karpenter's API; what the host does with it is in [`crate::scheduling::buffer`] and
//! [`crate::controllers::capacity_buffers`].

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::shared::{Condition, ResourceList};

/// The only provisioning strategy: the buffer's pods make the cluster scale up ahead of need.
pub const ACTIVE_CAPACITY: &str = "buffer.x-k8s.io/active-capacity";

/// Condition: the buffer's pod shape and size are resolved (reasons [`RESOLVED`],
/// [`SCALABLE_REF_NOT_FOUND`], [`POD_TEMPLATE_NOT_FOUND`], [`RESOLUTION_FAILED`]).
pub const READY_FOR_PROVISIONING: &str = "ReadyForProvisioning";
/// Condition, written by the provisioner: whether every buffer pod fits capacity that exists
/// (reasons [`FITS_EXISTING_CAPACITY`], [`REQUIRES_NEW_CAPACITY`], [`NOT_READY_FOR_PROVISIONING`],
/// [`BUFFER_EMPTY`]).
pub const PROVISIONING: &str = "Provisioning";

pub const RESOLVED: &str = "Resolved";
pub const SCALABLE_REF_NOT_FOUND: &str = "ScalableRefNotFound";
pub const POD_TEMPLATE_NOT_FOUND: &str = "PodTemplateNotFound";
pub const RESOLUTION_FAILED: &str = "ResolutionFailed";
pub const FITS_EXISTING_CAPACITY: &str = "FitsExistingCapacity";
pub const REQUIRES_NEW_CAPACITY: &str = "RequiresNewCapacity";
pub const NOT_READY_FOR_PROVISIONING: &str = "NotReadyForProvisioning";
pub const BUFFER_EMPTY: &str = "BufferEmpty";

/// Annotation (value `"true"`) on a buffer's virtual pod, as Karpenter marks it.
pub const FAKE_POD_ANNOTATION: &str = "karpenter.sh/capacity-buffer-fake-pod";
/// Annotation on a virtual pod: the name of its buffer.
pub const BUFFER_NAME_ANNOTATION: &str = "karpenter.sh/capacity-buffer-name";
/// Annotation on a virtual pod: the namespace of its buffer.
pub const BUFFER_NAMESPACE_ANNOTATION: &str = "karpenter.sh/capacity-buffer-namespace";

/// The `scalableRef` kinds a buffer may take its pods from (group `apps`).
pub const SCALABLE_KINDS: &[&str] = &["Deployment", "ReplicaSet", "StatefulSet"];

/// CapacityBuffer keeps room for `replicas` (or `percentage` of a workload's, within `limits`)
/// copies of a pod.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "autoscaling.x-k8s.io",
    version = "v1beta1",
    kind = "CapacityBuffer",
    plural = "capacitybuffers",
    singular = "capacitybuffer",
    shortname = "cb",
    category = "autoscaling",
    namespaced,
    status = "CapacityBufferStatus",
    derive = "PartialEq",
    doc = "CapacityBuffer keeps spare capacity for placeholder pods",
    printcolumn(
        name = "Strategy",
        type_ = "string",
        json_path = ".spec.provisioningStrategy"
    ),
    printcolumn(
        name = "PodTemplate",
        type_ = "string",
        json_path = ".status.podTemplateRef.name"
    ),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.replicas"),
    printcolumn(
        name = "ConditionsType",
        type_ = "string",
        json_path = ".status.conditions[*].type"
    ),
    printcolumn(
        name = "ConditionsStatus",
        type_ = "string",
        json_path = ".status.conditions[*].status"
    ),
    printcolumn(
        name = "ConditionsReason",
        type_ = "string",
        json_path = ".status.conditions[*].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)")
        .message("If podTemplateRef is set, replicas or limits must also be set"),
    validation = Rule::new("!(has(self.podTemplateRef) && has(self.scalableRef))")
        .message("You must define either PodTemplateRef or ScalableRef, but not both")
)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferSpec {
    /// How the buffer is used; `buffer.x-k8s.io/active-capacity` (the default) is the only
    /// strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "buffer.x-k8s.io/active-capacity"))]
    pub provisioning_strategy: Option<String>,
    /// A PodTemplate in the buffer's namespace: the shape of one buffer pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// A Deployment, ReplicaSet or StatefulSet in the buffer's namespace whose pod template is
    /// the shape of one buffer pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalable_ref: Option<ScalableRef>,
    /// How many buffer pods. With `percentage` too, the larger of the two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// Buffer pods as a percentage of the `scalableRef`'s replicas, rounded up (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub percentage: Option<i32>,
    /// At most as many buffer pods as fit in these total requests; alone, exactly that many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceList>,
}

/// A reference to an object in the buffer's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LocalObjectRef {
    #[schemars(length(min = 1))]
    pub name: String,
}

/// A reference to an object with a scale subresource.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalableRef {
    /// The API group; empty is `apps` for the kinds supported.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[schemars(length(min = 1))]
    pub kind: String,
    #[schemars(length(min = 1))]
    pub name: String,
}

/// What the host resolved: the pod template used, how many buffer pods, and the conditions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferStatus {
    /// The PodTemplate the buffer pods were made from (none for a `scalableRef`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// How many buffer pods the host keeps room for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// The generation of the PodTemplate last resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_generation: Option<i64>,
    /// `ReadyForProvisioning` and `Provisioning`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The spec's strategy, as observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
}
