//! Devices, classes and claims of the allocator tests.

use std::collections::BTreeMap;

use capstan_model::Quantity;
use k8s_openapi::api::resource::v1 as resource;
use serde_json::json;

use crate::allocator::Allocation;
use crate::request::{ClaimKey, ClaimRequests, DeviceClasses};
use crate::selector::SelectorCache;
use crate::template::{
    AttributeValue, CounterConsumption, CounterSet, Device, DeviceId, ResourceSliceTemplate,
};

pub const GPU_CLASS: &str = "gpu.example.com";
pub const NIC_CLASS: &str = "nic.example.com";
pub const MIG_1G_CLASS: &str = "mig-1g.example.com";
pub const MIG_2G_CLASS: &str = "mig-2g.example.com";
pub const MIG_4G_CLASS: &str = "mig-4g.example.com";
pub const MIG_WHOLE_CLASS: &str = "mig-whole.example.com";

pub fn classes() -> DeviceClasses {
    let mut classes = DeviceClasses::new();
    classes.insert(
        GPU_CLASS,
        vec![
            r#"device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].type == "gpu""#
                .into(),
        ],
    );
    classes.insert(
        NIC_CLASS,
        vec![r#"device.driver == "nic.example.com""#.into()],
    );
    for (class, profile) in [
        (MIG_1G_CLASS, "1g"),
        (MIG_2G_CLASS, "2g"),
        (MIG_4G_CLASS, "4g"),
        (MIG_WHOLE_CLASS, "whole"),
    ] {
        classes.insert(
            class,
            vec![
                r#"device.driver == "mig.example.com""#.into(),
                format!(r#"device.attributes["mig.example.com"].profile == "{profile}""#),
            ],
        );
    }
    classes
}

pub fn q(text: &str) -> Quantity {
    Quantity::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// GPUs `(name, memory)`; the first four on NUMA node 0, the next four on 1, and so on.
pub fn gpu_template(pool: &str, devices: &[(&str, &str)]) -> ResourceSliceTemplate {
    ResourceSliceTemplate {
        driver: "gpu.example.com".into(),
        pool: pool.into(),
        devices: devices
            .iter()
            .enumerate()
            .map(|(i, (name, memory))| {
                let numa = i64::try_from(i / 4).unwrap_or(0);
                Device {
                    name: (*name).into(),
                    attributes: BTreeMap::from([
                        ("type".into(), AttributeValue::String("gpu".into())),
                        ("numa".into(), AttributeValue::Int(numa)),
                    ]),
                    capacity: BTreeMap::from([("memory".into(), q(memory))]),
                    allow_multiple_allocations: false,
                    consumes_counters: vec![],
                }
            })
            .collect(),
        shared_counters: vec![],
    }
}

pub fn gpu_node(count: usize, memory: &str) -> crate::allocator::Inventory {
    let names: Vec<String> = (0..count).map(|i| format!("gpu-{i}")).collect();
    let devices: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), memory)).collect();
    crate::allocator::Inventory::from_templates(&[gpu_template("node", &devices)])
        .unwrap_or_else(|e| panic!("{e}"))
}

pub fn gpu_id(device: &str) -> DeviceId {
    gpu_id_in("node", device)
}

pub fn gpu_id_in(pool: &str, device: &str) -> DeviceId {
    DeviceId {
        driver: "gpu.example.com".into(),
        pool: pool.into(),
        device: device.into(),
    }
}

/// `gpus` GPUs of 8 memory slices each, partitioned MIG-like: 8×1g, 4×2g, 2×4g, 1 whole.
pub fn mig_template(gpus: usize) -> ResourceSliceTemplate {
    let mut devices = Vec::new();
    let mut shared_counters = Vec::new();
    for gpu in 0..gpus {
        let set = format!("gpu-{gpu}");
        shared_counters.push(CounterSet {
            name: set.clone(),
            counters: BTreeMap::from([("memory".into(), q("8"))]),
        });
        for (profile, slices, count) in [("1g", 1, 8), ("2g", 2, 4), ("4g", 4, 2), ("whole", 8, 1)]
        {
            for i in 0..count {
                devices.push(Device {
                    name: format!("gpu-{gpu}-{profile}-{i}"),
                    attributes: BTreeMap::from([
                        ("profile".into(), AttributeValue::String(profile.into())),
                        (
                            "parent".into(),
                            AttributeValue::Int(i64::try_from(gpu).unwrap_or(0)),
                        ),
                    ]),
                    capacity: BTreeMap::from([("memory".into(), q(&format!("{}Gi", slices * 10)))]),
                    allow_multiple_allocations: false,
                    consumes_counters: vec![CounterConsumption {
                        counter_set: set.clone(),
                        counters: BTreeMap::from([("memory".into(), q(&slices.to_string()))]),
                    }],
                });
            }
        }
    }
    ResourceSliceTemplate {
        driver: "mig.example.com".into(),
        pool: "node".into(),
        devices,
        shared_counters,
    }
}

pub fn exact_request(name: &str, class: &str, count: usize, selectors: &[&str]) -> String {
    let selectors: Vec<_> = selectors
        .iter()
        .map(|e| json!({"cel": {"expression": e}}))
        .collect();
    json!({"name": name, "exactly": {"deviceClassName": class, "count": count, "selectors": selectors}})
        .to_string()
}

pub fn first_available_request(name: &str, subrequests: &[(&str, &str, usize)]) -> String {
    let subrequests: Vec<_> = subrequests
        .iter()
        .map(|(sub, class, count)| json!({"name": sub, "deviceClassName": class, "count": count}))
        .collect();
    json!({"name": name, "firstAvailable": subrequests}).to_string()
}

pub fn exact(name: &str, class: &str, count: usize, selectors: &[&str]) -> String {
    format!(
        r#"{{"devices": {{"requests": [{}]}}}}"#,
        exact_request(name, class, count, selectors)
    )
}

pub fn all_request(name: &str, class: &str) -> String {
    json!({"devices": {"requests": [
        {"name": name, "exactly": {"deviceClassName": class, "allocationMode": "All"}}
    ]}})
    .to_string()
}

pub fn first_available(name: &str, subrequests: &[(&str, &str, usize)]) -> String {
    format!(
        r#"{{"devices": {{"requests": [{}]}}}}"#,
        first_available_request(name, subrequests)
    )
}

/// The claim `default/<name>` with the ResourceClaimSpec `spec` (JSON).
pub fn claim(name: &str, spec: &str) -> ClaimRequests {
    let spec: resource::ResourceClaimSpec =
        serde_json::from_str(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
    ClaimRequests::from_spec(
        ClaimKey::new("default", name),
        &spec,
        &classes(),
        &mut SelectorCache::new(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The slice the GPU driver published for `node`: `count` GPUs of 80Gi.
pub fn published_slice(node: &str, count: usize) -> resource::ResourceSlice {
    let devices: Vec<_> = (0..count)
        .map(|i| {
            json!({
                "name": format!("gpu-{i}"),
                "attributes": {"type": {"string": "gpu"}, "gpu.example.com/numa": {"int": i / 4}},
                "capacity": {"memory": {"value": "80Gi"}},
            })
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": format!("{node}-gpu")},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": node,
            "pool": {"name": "node", "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

/// A claim allocated to `devices` of the GPU driver's pool `node`.
pub fn allocated_claim(devices: &[&str]) -> resource::ResourceClaim {
    let results: Vec<_> = devices
        .iter()
        .map(
            |d| json!({"request": "gpu", "driver": "gpu.example.com", "pool": "node", "device": d}),
        )
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "used", "namespace": "default"},
        "spec": {},
        "status": {"allocation": {"devices": {"results": results}}},
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

pub fn device_names(allocation: &Allocation) -> Vec<String> {
    allocation
        .claims
        .iter()
        .flat_map(|c| c.devices.iter().map(|d| d.device.device.clone()))
        .collect()
}
