//! The DRA devices of kwok's instance types, read from the `DRAConfig`s of Karpenter's DRA KWOK
//! driver (`test.karpenter.sh/v1alpha1`, cluster-scoped): the driver publishes a pool's
//! ResourceSlices on every node its `nodeSelectorTerms` select, so a node of an instance type whose
//! labels a pool selects will carry that pool's devices. One truth for both sides: the same
//! object the driver publishes from is what the provider describes its instance types with.
//!
//! A term selects a type when each of its `matchExpressions` holds for the labels every node of
//! the type carries (instance type, architecture, OS, family, size and the type's own labels). A
//! term on a label the type leaves open (the zone, the capacity type) does not select it: the
//! host must not count on devices a node may lack. `matchFields` terms select nothing.

use std::collections::BTreeMap;

use capstan_provider_sdk::devices::{
    Attribute, AttributeValue, CounterConsumption, Device, Quantity, SliceTemplate,
};
use capstan_provider_sdk::model::requirements::{Operator, selector_matches};
use serde::{Deserialize, Serialize};

/// The API version of the driver's configuration.
pub const API_VERSION: &str = "test.karpenter.sh/v1alpha1";
/// Its kind.
pub const KIND: &str = "DRAConfig";

/// A `DRAConfig`, as much of it as the provider reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DraConfig {
    #[serde(default)]
    pub spec: DraConfigSpec,
}

/// Its spec: one driver and its pools.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DraConfigSpec {
    #[serde(default)]
    pub driver: String,
    #[serde(default)]
    pub pools: Vec<Pool>,
}

/// A pool: the nodes it applies to and the slices each of them gets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pool {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub node_selector_terms: Vec<Term>,
    #[serde(default)]
    pub resource_slices: Vec<SliceDevices>,
}

/// A node selector term (`matchExpressions` ANDed).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Term {
    #[serde(default)]
    pub match_expressions: Vec<Expression>,
    #[serde(default)]
    pub match_fields: Vec<Expression>,
}

/// A node selector requirement.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Expression {
    pub key: String,
    pub operator: String,
    #[serde(default)]
    pub values: Vec<String>,
}

/// The devices of one ResourceSlice of a pool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SliceDevices {
    #[serde(default)]
    pub devices: Vec<ApiDevice>,
}

/// A `resource.k8s.io/v1` `Device`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiDevice {
    pub name: String,
    #[serde(default)]
    pub attributes: BTreeMap<String, ApiAttribute>,
    #[serde(default)]
    pub capacity: BTreeMap<String, ApiCapacity>,
    #[serde(default)]
    pub allow_multiple_allocations: Option<bool>,
    #[serde(default)]
    pub consumes_counters: Vec<ApiCounterConsumption>,
}

/// A `DeviceAttribute`: exactly one of its fields is set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ApiAttribute {
    #[serde(default)]
    pub int: Option<i64>,
    #[serde(default)]
    pub bool: Option<bool>,
    #[serde(default)]
    pub string: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
}

/// A `DeviceCapacity` (or a `Counter`): its quantity.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ApiCapacity {
    pub value: serde_json::Value,
}

/// A `DeviceCounterConsumption`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiCounterConsumption {
    pub counter_set: String,
    #[serde(default)]
    pub counters: BTreeMap<String, ApiCapacity>,
}

fn quantity_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn quantities(map: &BTreeMap<String, ApiCapacity>) -> Vec<Quantity> {
    map.iter()
        .map(|(name, c)| Quantity {
            name: name.clone(),
            value: quantity_text(&c.value),
        })
        .collect()
}

fn attribute_value(a: &ApiAttribute) -> Option<AttributeValue> {
    if let Some(i) = a.int {
        Some(AttributeValue::Int(i))
    } else if let Some(b) = a.bool {
        Some(AttributeValue::Boolean(b))
    } else if let Some(s) = &a.string {
        Some(AttributeValue::Text(s.clone()))
    } else {
        a.version.clone().map(AttributeValue::Version)
    }
}

fn device(d: &ApiDevice) -> Device {
    Device {
        name: d.name.clone(),
        attributes: d
            .attributes
            .iter()
            .filter_map(|(name, a)| {
                attribute_value(a).map(|value| Attribute {
                    name: name.clone(),
                    value,
                })
            })
            .collect(),
        capacity: quantities(&d.capacity),
        allow_multiple_allocations: d.allow_multiple_allocations.unwrap_or(false),
        consumes_counters: d
            .consumes_counters
            .iter()
            .map(|c| CounterConsumption {
                counter_set: c.counter_set.clone(),
                counters: quantities(&c.counters),
            })
            .collect(),
    }
}

fn operator(text: &str) -> Option<Operator> {
    Some(match text {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        "Gt" => Operator::Gt,
        "Lt" => Operator::Lt,
        _ => return None,
    })
}

/// Whether `term` selects every node carrying `labels` (see the module docs).
fn selects(term: &Term, labels: &BTreeMap<String, String>) -> bool {
    term.match_fields.is_empty()
        && !term.match_expressions.is_empty()
        && term.match_expressions.iter().all(|e| {
            operator(&e.operator).is_some_and(|op| {
                selector_matches(op, &e.values, labels.get(&e.key).map(String::as_str))
            })
        })
}

/// The slices a node with `labels` gets from `configs`: each slice of each pool one of whose
/// terms selects it, named by its driver and its pool (the driver names the pool
/// `<driver>/<node>`; a template stands for any node, so the pool's own name stands in).
pub fn templates(configs: &[DraConfig], labels: &BTreeMap<String, String>) -> Vec<SliceTemplate> {
    let mut out = Vec::new();
    for config in configs {
        for pool in &config.spec.pools {
            if !pool.node_selector_terms.iter().any(|t| selects(t, labels)) {
                continue;
            }
            for slice in &pool.resource_slices {
                out.push(SliceTemplate {
                    driver: config.spec.driver.clone(),
                    pool: pool.name.clone(),
                    devices: slice.devices.iter().map(device).collect(),
                    shared_counters: Vec::new(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config() -> DraConfig {
        serde_json::from_value(json!({
            "apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": "gpus"},
            "spec": {"driver": "gpu.example.com", "pools": [
                {"name": "big", "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g-8x-amd64-linux"]}]}],
                 "resourceSlices": [{"devices": [
                    {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "index": {"int": 0},
                       "driverVersion": {"version": "1.2.3"}, "healthy": {"bool": true}},
                     "capacity": {"memory": {"value": "80Gi"}}},
                    {"name": "gpu-1", "attributes": {"type": {"string": "gpu"}}}]}]},
                {"name": "zonal", "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}]}],
                 "resourceSlices": [{"devices": [{"name": "nic-0"}]}]}
            ]}
        }))
        .unwrap()
    }

    fn labels(instance_type: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                "node.kubernetes.io/instance-type".to_string(),
                instance_type.to_string(),
            ),
            ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        ])
    }

    #[test]
    fn a_selected_type_gets_the_pools_devices() {
        let t = templates(&[config()], &labels("g-8x-amd64-linux"));
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].driver, "gpu.example.com");
        assert_eq!(t[0].pool, "big");
        let names: Vec<&str> = t[0].devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["gpu-0", "gpu-1"]);
        let gpu0 = &t[0].devices[0];
        assert!(gpu0.attributes.contains(&Attribute {
            name: "type".into(),
            value: AttributeValue::Text("gpu".into())
        }));
        assert!(gpu0.attributes.contains(&Attribute {
            name: "index".into(),
            value: AttributeValue::Int(0)
        }));
        assert!(gpu0.attributes.contains(&Attribute {
            name: "driverVersion".into(),
            value: AttributeValue::Version("1.2.3".into())
        }));
        assert_eq!(
            gpu0.capacity,
            [Quantity {
                name: "memory".into(),
                value: "80Gi".into()
            }]
        );
    }

    #[test]
    fn other_types_and_open_labels_get_nothing() {
        assert!(templates(&[config()], &labels("c-4x-amd64-linux")).is_empty());
        // The zone is not a label every node of a type carries: the zonal pool selects no type.
        let mut zoned = labels("c-4x-amd64-linux");
        zoned.remove("topology.kubernetes.io/zone");
        assert!(templates(&[config()], &zoned).is_empty());
    }

    #[test]
    fn terms_are_ored_and_expressions_anded() {
        let mut c = config();
        c.spec.pools[0].node_selector_terms = vec![
            Term {
                match_expressions: vec![
                    Expression {
                        key: "kubernetes.io/arch".into(),
                        operator: "In".into(),
                        values: vec!["arm64".into()],
                    },
                    Expression {
                        key: "node.kubernetes.io/instance-type".into(),
                        operator: "Exists".into(),
                        values: vec![],
                    },
                ],
                match_fields: vec![],
            },
            Term {
                match_expressions: vec![Expression {
                    key: "node.kubernetes.io/instance-type".into(),
                    operator: "In".into(),
                    values: vec!["m-8x-amd64-linux".into()],
                }],
                match_fields: vec![],
            },
        ];
        assert!(templates(std::slice::from_ref(&c), &labels("c-4x-amd64-linux")).is_empty());
        assert_eq!(templates(&[c], &labels("m-8x-amd64-linux")).len(), 1);
    }
}
