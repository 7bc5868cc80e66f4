//! `karpenter.sh/v1alpha1` NodeOverlay: prices and extended resources an administrator sets on
//! the instance types that match its requirements (behind the `NodeOverlay` feature gate, as in
//! Karpenter v1.14). Field for field Karpenter's API; what the host does with it is in
//! [`crate::scheduling::overlay`].

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rules;
use super::shared::{Condition, NodeSelectorOperator, QUALIFIED_NAME_PATTERN, ResourceList};

/// `price`: a non-negative decimal.
pub const PRICE_PATTERN: &str = r"^\d+(\.\d+)?$";
/// `priceAdjustment`: a signed decimal (`+0.5`, `-1.2`), or a percentage: any increase (`+10%`),
/// a decrease of less than 100% (`-15%`, `-2.5%`), or `-100%`.
pub const PRICE_ADJUSTMENT_PATTERN: &str =
    r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$";

/// The condition Karpenter sets on a NodeOverlay: whether it is valid and conflicts with no
/// other overlay. `Ready` follows it.
pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
/// The overall condition.
pub const READY: &str = "Ready";

/// NodeOverlay sets or adjusts the price, and adds extended resources, of the instance types
/// (and offerings) its requirements match.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1alpha1",
    kind = "NodeOverlay",
    plural = "nodeoverlays",
    singular = "nodeoverlay",
    shortname = "overlays",
    category = "karpenter",
    status = "NodeOverlayStatus",
    derive = "PartialEq",
    doc = "NodeOverlay sets prices and extended resources of matching instance types",
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
    )
)]
#[x_kube(
    validation = Rule::new("!has(self.price) || !has(self.priceAdjustment)")
        .message(rules::PRICE_OR_ADJUSTMENT)
)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlaySpec {
    /// Which instance types and offerings the overlay applies to: well-known labels (instance
    /// type, zone, capacity type, `karpenter.sh/nodepool`, ...) and the NodePool's template labels.
    #[schemars(length(max = 100))]
    #[x_kube(
        validation = Rule::new("self.all(x, x.operator == 'NotIn' ? x.values.size() != 0 : true)")
            .message(rules::NOT_IN_NEEDS_VALUES),
        validation = Rule::new("self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)")
            .message(rules::IN_NEEDS_VALUES),
        validation = Rule::new(
            "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)"
        )
        .message(rules::OVERLAY_ONE_INTEGER)
    )]
    pub requirements: Vec<OverlayRequirement>,
    /// A change of the matching offerings' price: `+0.5`/`-0.5` (per hour), or `+10%`/`-15%`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(PRICE_ADJUSTMENT_PATTERN))]
    pub price_adjustment: Option<String>,
    /// The price per hour of the matching offerings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(PRICE_PATTERN))]
    pub price: Option<String>,
    /// Extended resources added to the matching instance types (never `cpu`, `memory`,
    /// `ephemeral-storage` or `pods`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(
        validation = Rule::new("self.all(x, !(x in ['cpu', 'memory', 'ephemeral-storage', 'pods']))")
            .message(rules::RESTRICTED_RESOURCE)
    )]
    pub capacity: Option<ResourceList>,
    /// Priority: higher weights win; unset is 0. Equal weights merge by name, and two of them
    /// setting the price of one offering (or one resource of one type) conflict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub weight: Option<i32>,
}

/// A node-selector requirement of an overlay (no `minValues`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverlayRequirement {
    /// The label key the requirement applies to.
    #[schemars(length(max = 316), pattern(QUALIFIED_NAME_PATTERN))]
    #[x_kube(
        validation = rules::outside_karpenter_domain("self"),
        validation = rules::not_hostname("self")
    )]
    pub key: String,
    pub operator: NodeSelectorOperator,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// What the host found: `ValidationSucceeded` and `Ready`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlayStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
