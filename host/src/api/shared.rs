//! Types shared by the NodePool and NodeClaim APIs: requirements, taints, quantities, conditions.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::rules;

/// A Kubernetes resource quantity (`"4"`, `"500m"`, `"16Gi"`).
///
/// Karpenter's CRDs declare quantities as int-or-string, so `cpu: 1000` (a number) is as valid as
/// `cpu: "1000"`; both deserialize to the same textual quantity.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Quantity(pub String);

impl Quantity {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum IntOrString {
            Int(i64),
            Float(f64),
            Str(String),
        }
        Ok(match IntOrString::deserialize(deserializer)? {
            IntOrString::Int(i) => Quantity(i.to_string()),
            IntOrString::Float(f) => Quantity(f.to_string()),
            IntOrString::Str(s) => Quantity(s),
        })
    }
}

/// The pattern Kubernetes uses for quantities.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

impl JsonSchema for Quantity {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Quantity".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        // Structural-schema form of int-or-string: no `type`, the marker and a pattern.
        json_schema!({
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": true
        })
    }

    fn inline_schema() -> bool {
        true
    }
}

/// Resource name to quantity (`cpu`, `memory`, `pods`, `nvidia.com/gpu`, ...).
pub type ResourceList = BTreeMap<String, Quantity>;

/// A node-selector operator. Karpenter v1 accepts `Gte` and `Lte` besides the six Kubernetes ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum NodeSelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    Gte,
    Lte,
}

/// A label key or taint key: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// characters (Kubernetes' qualified name).
pub const QUALIFIED_NAME_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";
/// A label value (at most 63 characters, possibly empty).
pub const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";

/// `NodeSelectorRequirementWithMinValues`: a node-selector requirement, optionally asking for at
/// least `minValues` distinct values of `key` among the instance types a claim may use.
///
/// `In` needs at least one value; `Gt`, `Lt`, `Gte` and `Lte` exactly one, a non-negative
/// integer; `minValues` on an `In` at most as many as its values. The key is a label key outside
/// the `karpenter.sh` domain (but for `karpenter.sh/capacity-type` and `karpenter.sh/nodepool`),
/// and not `kubernetes.io/hostname`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.operator != 'In' || (has(self.values) && size(self.values) > 0)")
        .message(rules::IN_NEEDS_VALUES),
    validation = Rule::new(
        "!(self.operator in ['Gt', 'Lt', 'Gte', 'Lte']) || (has(self.values) && size(self.values) == 1 && int(self.values[0]) >= 0)"
    )
    .message(rules::ONE_INTEGER),
    validation = Rule::new(
        "!(self.operator == 'In' && has(self.minValues)) || (has(self.values) && size(self.values) >= self.minValues)"
    )
    .message(rules::MIN_VALUES)
)]
pub struct Requirement {
    /// The label key the requirement applies to.
    #[schemars(length(max = 316), pattern(QUALIFIED_NAME_PATTERN))]
    #[x_kube(
        validation = rules::outside_karpenter_domain("self"),
        validation = rules::not_hostname("self")
    )]
    pub key: String,
    pub operator: NodeSelectorOperator,
    // Not checked as label values (Karpenter's CRDs do not either): a claim's `NotIn` carries
    // whatever strings a pod's node affinity names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 500))]
    pub values: Vec<String>,
    /// The minimum number of distinct values of `key` the scheduler must keep available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 50))]
    pub min_values: Option<i64>,
}

impl Requirement {
    pub fn new(
        key: impl Into<String>,
        operator: NodeSelectorOperator,
        values: Vec<String>,
    ) -> Self {
        Self {
            key: key.into(),
            operator,
            values,
            min_values: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    /// The effect as Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

/// A node taint, as in `core/v1`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    #[schemars(length(min = 1, max = 316), pattern(QUALIFIED_NAME_PATTERN))]
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), pattern(LABEL_VALUE_PATTERN))]
    pub value: Option<String>,
    pub effect: TaintEffect,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<Time>,
}

impl Taint {
    /// Whether the Node taint `node` is this taint (same key and effect, as Kubernetes matches
    /// them).
    pub fn matches(&self, node: &k8s_openapi::api::core::v1::Taint) -> bool {
        node.key == self.key && node.effect == self.effect.as_str()
    }
}

/// The object that holds provider-specific configuration for the nodes of a pool.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct NodeClassReference {
    /// API group of the node class (`capstan.dev` for Capstan's own NodeClass).
    #[schemars(regex(pattern = r"^[^/]*$"), length(min = 1, max = 253))]
    pub group: String,
    /// Kind of the node class (`NodeClass`).
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Name of the node class.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// A status condition, as Karpenter writes them (`message` may be empty).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    #[schemars(length(max = 316))]
    pub type_: String,
    pub status: ConditionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    pub last_transition_time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32768))]
    pub message: Option<String>,
}

impl Condition {
    pub fn is_true(&self) -> bool {
        self.status == ConditionStatus::True
    }
}

/// Finds a condition by type.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Sets a condition, keeping `lastTransitionTime` when the status does not change. Returns whether
/// anything changed.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: Option<&str>,
    message: Option<&str>,
    observed_generation: Option<i64>,
    now: Time,
) -> bool {
    let reason = reason.map(str::to_owned);
    let message = message.map(str::to_owned);
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            let changed = existing.status != status
                || existing.reason != reason
                || existing.message != message
                || existing.observed_generation != observed_generation;
            if existing.status != status {
                existing.last_transition_time = now;
            }
            existing.status = status;
            existing.reason = reason;
            existing.message = message;
            existing.observed_generation = observed_generation;
            changed
        }
        None => {
            conditions.push(Condition {
                type_: type_.to_owned(),
                status,
                observed_generation,
                last_transition_time: now,
                reason,
                message,
            });
            true
        }
    }
}

/// Schema for free-form JSON objects whose fields the API server must keep.
pub fn preserve_unknown_fields(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantity_accepts_int_float_and_string() {
        let q: ResourceList =
            serde_json::from_str(r#"{"cpu": 1000, "memory": "8000Gi", "x": 1.5}"#).unwrap();
        assert_eq!(q["cpu"].as_str(), "1000");
        assert_eq!(q["memory"].as_str(), "8000Gi");
        assert_eq!(q["x"].as_str(), "1.5");
        assert_eq!(serde_json::to_string(&q["cpu"]).unwrap(), r#""1000""#);
    }

    #[test]
    fn set_condition_keeps_transition_time_when_status_is_unchanged() {
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(1).unwrap());
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(2).unwrap());
        let mut cs = Vec::new();
        assert!(set_condition(
            &mut cs,
            "Ready",
            ConditionStatus::False,
            Some("A"),
            None,
            None,
            t0.clone()
        ));
        assert!(set_condition(
            &mut cs,
            "Ready",
            ConditionStatus::False,
            Some("B"),
            None,
            None,
            t1.clone()
        ));
        assert_eq!(cs[0].last_transition_time, t0);
        assert!(!set_condition(
            &mut cs,
            "Ready",
            ConditionStatus::False,
            Some("B"),
            None,
            None,
            t1.clone()
        ));
        assert!(set_condition(
            &mut cs,
            "Ready",
            ConditionStatus::True,
            None,
            None,
            None,
            t1.clone()
        ));
        assert_eq!(cs[0].last_transition_time, t1);
        assert!(find_condition(&cs, "Ready").unwrap().is_true());
    }
}
