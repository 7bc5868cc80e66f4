//! Karpenter's kwok catalog (`kwok/cloudprovider/instance_types.json` of the pinned module):
//! the prices both systems' Nodes are judged by, and the same types as the kwok provider's
//! NodeClass `instanceTypes`.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result};
use capstan::scheduling::floor::Shape;
use capstan::scheduling::resources::Resources;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use serde_json::{Value, json};

/// Karpenter's kwok catalog: the raw entries and the price of every offering.
pub struct Catalog {
    entries: Vec<Value>,
    /// (instance type, capacity type, zone) -> $/h
    prices: HashMap<(String, String, String), f64>,
}

impl Catalog {
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let entries: Vec<Value> = serde_json::from_str(&text)?;
        let mut prices = HashMap::new();
        for e in &entries {
            let name = e["name"].as_str().unwrap_or_default();
            for o in e["offerings"].as_array().into_iter().flatten() {
                let (ct, zone) = offering_keys(o);
                prices.insert(
                    (name.to_string(), ct, zone),
                    o["Price"].as_f64().unwrap_or_default(),
                );
            }
        }
        Ok(Self { entries, prices })
    }

    /// The catalog as the kwok provider's NodeClass `instanceTypes` (family and size as
    /// Karpenter's kwok provider derives them from the name and the CPU count).
    pub fn capstan_instance_types(&self) -> Value {
        let types: Vec<Value> = self
            .entries
            .iter()
            .map(|e| {
                let name = e["name"].as_str().unwrap_or_default();
                let family = name.split(['.', '-']).next().unwrap_or(name);
                let offerings: Vec<Value> = e["offerings"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|o| {
                        let (ct, zone) = offering_keys(o);
                        json!({"zone": zone, "capacityType": ct,
                               "price": o["Price"], "available": true})
                    })
                    .collect();
                json!({
                    "name": name,
                    "architecture": e["architecture"],
                    "operatingSystems": e["operatingSystems"],
                    "resources": e["resources"],
                    "offerings": offerings,
                    "family": family,
                    "size": e["resources"]["cpu"],
                })
            })
            .collect();
        Value::Array(types)
    }

    /// The Linux types as the cost floor sees them: their capacity as what pods may use (no node
    /// of them holds more, so the bound stays a bound) at their cheapest offering's price.
    pub fn shapes(&self) -> Vec<Shape> {
        self.entries
            .iter()
            .filter(|e| {
                e["operatingSystems"]
                    .as_array()
                    .is_some_and(|os| os.iter().any(|o| o == "linux"))
            })
            .filter_map(|e| {
                let name = e["name"].as_str()?.to_owned();
                let resources = e["resources"].as_object()?;
                let allocatable = Resources::parse(
                    resources
                        .iter()
                        .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?))),
                )
                .ok()?;
                let price = self
                    .prices
                    .iter()
                    .filter(|((t, _, _), _)| *t == name)
                    .map(|(_, &p)| p)
                    .min_by(f64::total_cmp)?;
                Some(Shape {
                    name,
                    allocatable,
                    price,
                })
            })
            .collect()
    }

    pub fn price(&self, node: &Node) -> Option<f64> {
        let labels = node.labels();
        let key = (
            labels.get("node.kubernetes.io/instance-type")?.clone(),
            labels.get("karpenter.sh/capacity-type")?.clone(),
            labels.get("topology.kubernetes.io/zone")?.clone(),
        );
        self.prices.get(&key).copied()
    }
}

fn offering_keys(offering: &Value) -> (String, String) {
    let mut ct = String::new();
    let mut zone = String::new();
    for r in offering["Requirements"].as_array().into_iter().flatten() {
        let value = r["values"][0].as_str().unwrap_or_default().to_string();
        match r["key"].as_str() {
            Some("karpenter.sh/capacity-type") => ct = value,
            Some("topology.kubernetes.io/zone") => zone = value,
            _ => {}
        }
    }
    (ct, zone)
}
