//! The device model of one node: ResourceSlice templates a cloud provider declares per instance
//! type, or the ResourceSlices an existing node's DRA drivers published, in one form.

use std::collections::BTreeMap;

use capstan_model::Quantity;
use k8s_openapi::api::resource::v1 as resource;
use serde::{Deserialize, Serialize};

/// The devices one DRA driver will publish for a node, in one pool (Karpenter's
/// `cloudprovider.ResourceSliceTemplate`, plus the counter sets it shares).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSliceTemplate {
    /// The DRA driver name, e.g. `gpu.example.com`; also the domain of unqualified attributes.
    pub driver: String,
    /// The pool the devices belong to (device names are unique within a driver's pool).
    pub pool: String,
    /// The devices of the slice.
    #[serde(default)]
    pub devices: Vec<Device>,
    /// Counter sets the pool's partitionable devices consume from.
    #[serde(default)]
    pub shared_counters: Vec<CounterSet>,
}

/// One device of a slice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    /// Unique within the pool.
    pub name: String,
    /// Attributes by name: `domain/name`, or `name` in the driver's domain.
    #[serde(default)]
    pub attributes: BTreeMap<String, AttributeValue>,
    /// Capacities by name (qualified like attributes).
    #[serde(default)]
    pub capacity: BTreeMap<String, Quantity>,
    /// Whether the device may be allocated to several requests at once.
    #[serde(default)]
    pub allow_multiple_allocations: bool,
    /// Shared counters the device uses up while allocated (partitionable devices).
    #[serde(default)]
    pub consumes_counters: Vec<CounterConsumption>,
}

/// What a device takes from one counter set of its pool while allocated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CounterConsumption {
    /// The name of the counter set in the same driver's pool.
    pub counter_set: String,
    /// Amount per counter name.
    pub counters: BTreeMap<String, Quantity>,
}

/// Named counters shared by the devices of a pool, e.g. the memory slices of one physical GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CounterSet {
    /// Unique within the pool.
    pub name: String,
    /// Available amount per counter name.
    pub counters: BTreeMap<String, Quantity>,
}

/// A device attribute value, serialised as Kubernetes' `DeviceAttribute` (`{"int": 4}`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AttributeValue {
    /// A 64-bit integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// A string.
    String(String),
    /// A semantic version (`1.2.3`), compared as such in CEL.
    Version(String),
}

/// A device's identity on a node: driver, pool and device name, as in allocation results.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DeviceId {
    /// The DRA driver.
    pub driver: String,
    /// The pool within the driver.
    pub pool: String,
    /// The device within the pool.
    pub device: String,
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// Why a published ResourceSlice cannot be turned into a template.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A capacity or counter is not a Kubernetes quantity.
    #[error("ResourceSlice of driver {driver} pool {pool}: {what}: {message}")]
    Quantity {
        /// The slice's driver.
        driver: String,
        /// The slice's pool.
        pool: String,
        /// Which capacity or counter.
        what: String,
        /// The parse error.
        message: String,
    },
    /// An attribute sets no value or several.
    #[error(
        "ResourceSlice of driver {driver} pool {pool}: device {device} attribute {attribute} must set exactly one of int, bool, string, version"
    )]
    Attribute {
        /// The slice's driver.
        driver: String,
        /// The slice's pool.
        pool: String,
        /// The device.
        device: String,
        /// The attribute name.
        attribute: String,
    },
}

/// Splits an attribute or capacity name into domain and name; an unqualified name is in `driver`'s
/// domain.
pub fn qualify<'a>(name: &'a str, driver: &'a str) -> (&'a str, &'a str) {
    match name.split_once('/') {
        Some((domain, name)) => (domain, name),
        None => (driver, name),
    }
}

/// `name` fully qualified (`domain/name`), with `driver` as the default domain.
pub fn qualified_name(name: &str, driver: &str) -> String {
    let (domain, name) = qualify(name, driver);
    format!("{domain}/{name}")
}

impl AttributeValue {
    /// Converts Kubernetes' one-of `DeviceAttribute`; `None` unless exactly one field is set.
    pub fn from_k8s(attribute: &resource::DeviceAttribute) -> Option<Self> {
        let values = [
            attribute.int.map(AttributeValue::Int),
            attribute.bool.map(AttributeValue::Bool),
            attribute.string.clone().map(AttributeValue::String),
            attribute.version.clone().map(AttributeValue::Version),
        ];
        let mut set = values.into_iter().flatten();
        match (set.next(), set.next()) {
            (Some(value), None) => Some(value),
            _ => None,
        }
    }
}

impl std::fmt::Display for AttributeValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttributeValue::Int(v) => write!(f, "{v}"),
            AttributeValue::Bool(v) => write!(f, "{v}"),
            AttributeValue::String(v) => write!(f, "{v:?}"),
            AttributeValue::Version(v) => write!(f, "v{v}"),
        }
    }
}

fn quantity(
    value: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    slice: &resource::ResourceSliceSpec,
    what: impl FnOnce() -> String,
) -> Result<Quantity, TemplateError> {
    Quantity::parse(&value.0).map_err(|error| TemplateError::Quantity {
        driver: slice.driver.clone(),
        pool: slice.pool.name.clone(),
        what: what(),
        message: error.to_string(),
    })
}

fn counters(
    counters: &BTreeMap<String, resource::Counter>,
    slice: &resource::ResourceSliceSpec,
    set: &str,
) -> Result<BTreeMap<String, Quantity>, TemplateError> {
    counters
        .iter()
        .map(|(name, counter)| {
            let value = quantity(&counter.value, slice, || format!("counter {set}/{name}"))?;
            Ok((name.clone(), value))
        })
        .collect()
}

impl TryFrom<&resource::ResourceSlice> for ResourceSliceTemplate {
    type Error = TemplateError;

    /// Reads a published slice; node selection, taints and binding conditions are not kept (the
    /// caller passes the slices of one node).
    fn try_from(slice: &resource::ResourceSlice) -> Result<Self, TemplateError> {
        let spec = &slice.spec;
        let devices = spec
            .devices
            .iter()
            .flatten()
            .map(|device| device_from_k8s(device, spec))
            .collect::<Result<_, _>>()?;
        let shared_counters = spec
            .shared_counters
            .iter()
            .flatten()
            .map(|set| {
                Ok(CounterSet {
                    name: set.name.clone(),
                    counters: counters(&set.counters, spec, &set.name)?,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(ResourceSliceTemplate {
            driver: spec.driver.clone(),
            pool: spec.pool.name.clone(),
            devices,
            shared_counters,
        })
    }
}

fn device_from_k8s(
    device: &resource::Device,
    spec: &resource::ResourceSliceSpec,
) -> Result<Device, TemplateError> {
    let attributes = device
        .attributes
        .iter()
        .flatten()
        .map(|(name, value)| {
            AttributeValue::from_k8s(value)
                .map(|value| (name.clone(), value))
                .ok_or_else(|| TemplateError::Attribute {
                    driver: spec.driver.clone(),
                    pool: spec.pool.name.clone(),
                    device: device.name.clone(),
                    attribute: name.clone(),
                })
        })
        .collect::<Result<_, _>>()?;
    let capacity = device
        .capacity
        .iter()
        .flatten()
        .map(|(name, capacity)| {
            let value = quantity(&capacity.value, spec, || {
                format!("device {} capacity {name}", device.name)
            })?;
            Ok((name.clone(), value))
        })
        .collect::<Result<_, _>>()?;
    let consumes_counters = device
        .consumes_counters
        .iter()
        .flatten()
        .map(|consumption| {
            Ok(CounterConsumption {
                counter_set: consumption.counter_set.clone(),
                counters: counters(&consumption.counters, spec, &consumption.counter_set)?,
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(Device {
        name: device.name.clone(),
        attributes,
        capacity,
        allow_multiple_allocations: device.allow_multiple_allocations.unwrap_or(false),
        consumes_counters,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn templates_read_and_write_kubernetes_shaped_json() {
        let value = json!({
            "driver": "gpu.example.com",
            "pool": "node",
            "devices": [{
                "name": "gpu-0-1g-0",
                "attributes": {"profile": {"string": "1g"}, "numa.example.com/node": {"int": 0},
                               "driverVersion": {"version": "1.2.3"}, "healthy": {"bool": true}},
                "capacity": {"memory": "10Gi"},
                "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": "1"}}],
            }],
            "sharedCounters": [{"name": "gpu-0", "counters": {"memory": 8}}],
        });
        let template: ResourceSliceTemplate = serde_json::from_value(value).unwrap();
        let device = &template.devices[0];
        assert_eq!(
            device.attributes["driverVersion"],
            AttributeValue::Version("1.2.3".into())
        );
        assert_eq!(device.capacity["memory"], Quantity::from_bytes(10 << 30));
        assert!(!device.allow_multiple_allocations);
        assert_eq!(
            template.shared_counters[0].counters["memory"],
            Quantity::from_units(8)
        );
        let round_trip: ResourceSliceTemplate =
            serde_json::from_value(serde_json::to_value(&template).unwrap()).unwrap();
        assert_eq!(round_trip, template);
    }

    #[test]
    fn published_slices_convert() {
        let slice: resource::ResourceSlice = serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "node-a-gpu"},
            "spec": {
                "driver": "gpu.example.com",
                "nodeName": "node-a",
                "pool": {"name": "node-a", "generation": 3, "resourceSliceCount": 1},
                "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}],
                "devices": [{
                    "name": "gpu-0",
                    "allowMultipleAllocations": true,
                    "attributes": {"type": {"string": "gpu"}},
                    "capacity": {"memory": {"value": "80Gi"}},
                    "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}],
                }],
            },
        }))
        .unwrap();
        let template = ResourceSliceTemplate::try_from(&slice).unwrap();
        assert_eq!(template.pool, "node-a");
        assert!(template.devices[0].allow_multiple_allocations);
        assert_eq!(
            template.devices[0].consumes_counters[0].counters["memory"],
            Quantity::from_bytes(80 << 30)
        );
        assert_eq!(template.shared_counters[0].name, "gpu-0");

        let mut bad = slice.clone();
        if let Some(devices) = bad.spec.devices.as_mut() {
            devices[0].capacity.get_or_insert_default().insert(
                "memory".into(),
                resource::DeviceCapacity {
                    value: k8s_openapi::apimachinery::pkg::api::resource::Quantity("lots".into()),
                    ..Default::default()
                },
            );
        }
        assert!(matches!(
            ResourceSliceTemplate::try_from(&bad),
            Err(TemplateError::Quantity { .. })
        ));
        let mut empty = slice;
        if let Some(devices) = empty.spec.devices.as_mut() {
            devices[0]
                .attributes
                .get_or_insert_default()
                .insert("empty".into(), resource::DeviceAttribute::default());
        }
        assert!(matches!(
            ResourceSliceTemplate::try_from(&empty),
            Err(TemplateError::Attribute { .. })
        ));
    }

    #[test]
    fn names_qualify_in_the_driver_domain() {
        assert_eq!(
            qualified_name("memory", "gpu.example.com"),
            "gpu.example.com/memory"
        );
        assert_eq!(
            qualified_name("numa.example.com/node", "gpu.example.com"),
            "numa.example.com/node"
        );
        assert_eq!(qualify("a/b", "d"), ("a", "b"));
    }
}
