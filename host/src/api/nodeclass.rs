//! `capstan.dev/v1alpha1` NodeClass: what a NodePool's `nodeClassRef` points at. It names the
//! provider that launches the pool's nodes and carries that provider's parameters, which the
//! provider itself validates (`validate-node-class`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::shared::{Condition, preserve_unknown_fields};

/// The `nodeClassRef.kind` and `group` that point at this resource.
pub const KIND: &str = "NodeClass";
pub const GROUP: &str = "capstan.dev";

/// NodeClass selects a provider and configures it for the nodes of one or more NodePools.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "capstan.dev",
    version = "v1alpha1",
    kind = "NodeClass",
    plural = "nodeclasses",
    singular = "nodeclass",
    category = "capstan",
    status = "NodeClassStatus",
    derive = "PartialEq",
    doc = "NodeClass selects a Capstan provider and holds its parameters",
    printcolumn(name = "Provider", type_ = "string", json_path = ".spec.provider"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassSpec {
    /// Name of the `Provider` that launches nodes for this class.
    #[schemars(length(min = 1, max = 253))]
    pub provider: String,
    /// Provider-specific configuration, passed to the provider as JSON. Its schema is the
    /// provider's; the provider validates it and the result shows in the `Ready` condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_fields")]
    pub parameters: Option<serde_json::Value>,
}

impl NodeClassSpec {
    /// The parameters as the JSON text a provider receives (`{}` when absent).
    pub fn parameters_json(&self) -> String {
        match &self.parameters {
            Some(value) => value.to_string(),
            None => "{}".to_owned(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// When the provider last validated the parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_validated: Option<Time>,
}
