//! The solver with Dynamic Resource Allocation: pods whose ResourceClaims ask for devices land
//! only where devices satisfy them, with the claims of the pods placed there before.

use std::collections::BTreeMap;
use std::sync::Arc;

use capstan_dra::{
    AttributeValue, ClaimKey, ClaimRequests, Device, DeviceClasses, Inventory,
    ResourceSliceTemplate, SelectorCache,
};
use capstan_model::Quantity;
use k8s_openapi::api::resource::v1::ResourceClaimSpec;
use serde_json::json;

use crate::api::labels::{CAPACITY_TYPE, INSTANCE_TYPE, ZONE};
use crate::scheduling::devices::{NodeDevices, PodDevices};
use crate::scheduling::*;

const GI: i64 = 1 << 30;

fn gpus(count: usize, memory: &str) -> Arc<ResourceSliceTemplate> {
    Arc::new(ResourceSliceTemplate {
        driver: "gpu.example.com".to_owned(),
        pool: "gpus".to_owned(),
        devices: (0..count)
            .map(|i| Device {
                name: format!("gpu-{i}"),
                attributes: BTreeMap::from([(
                    "type".to_owned(),
                    AttributeValue::String("gpu".to_owned()),
                )]),
                capacity: BTreeMap::from([("memory".to_owned(), Quantity::parse(memory).unwrap())]),
                allow_multiple_allocations: false,
                consumes_counters: Vec::new(),
            })
            .collect(),
        shared_counters: Vec::new(),
    })
}

fn instance_type(name: &str, price: f64, devices: Vec<Arc<ResourceSliceTemplate>>) -> InstanceType {
    InstanceType {
        name: name.to_owned(),
        requirements: Requirements::new()
            .with(Requirement::in_(INSTANCE_TYPE, [name]))
            .with(Requirement::in_(ZONE, ["zone-1"]))
            .with(Requirement::in_(CAPACITY_TYPE, ["on-demand"])),
        offerings: vec![Offering::new("zone-1", "on-demand", price)],
        capacity: Resources::new(16_000, 64 * GI, 110),
        overhead: Resources::default(),
        volume_limits: Default::default(),
        devices,
    }
}

/// A CPU-only type, the cheapest; then 1, 4 and 8 GPUs of 16 GiB; and 1 GPU of 80 GiB.
fn catalog() -> Arc<[InstanceType]> {
    vec![
        instance_type("c16", 0.5, Vec::new()),
        instance_type("g1", 1.0, vec![gpus(1, "16Gi")]),
        instance_type("g4", 3.0, vec![gpus(4, "16Gi")]),
        instance_type("g8", 5.0, vec![gpus(8, "16Gi")]),
        instance_type("h1", 4.0, vec![gpus(1, "80Gi")]),
    ]
    .into()
}

/// A claim of `count` devices of class `gpu` (every device of the example driver), with an
/// extra CEL selector if given.
fn claim(name: &str, count: i64, selector: Option<&str>) -> Arc<ClaimRequests> {
    let mut classes = DeviceClasses::new();
    classes.insert(
        "gpu",
        vec!["device.driver == \"gpu.example.com\"".to_owned()],
    );
    let selectors: Vec<_> = selector
        .into_iter()
        .map(|e| json!({"cel": {"expression": e}}))
        .collect();
    let spec: ResourceClaimSpec = serde_json::from_value(json!({"devices": {"requests": [
        {"name": "gpus", "exactly": {"deviceClassName": "gpu", "count": count, "selectors": selectors}}
    ]}}))
    .unwrap();
    Arc::new(
        ClaimRequests::from_spec(
            ClaimKey::new("default", name),
            &spec,
            &classes,
            &mut SelectorCache::new(),
        )
        .unwrap(),
    )
}

fn pod_with(name: &str, claims: Vec<Arc<ClaimRequests>>) -> Pod {
    let mut pod = Pod::new("default", name, Resources::new(500, GI, 0));
    pod.devices = PodDevices {
        claims,
        pinned_to: None,
    };
    pod
}

fn solve(pods: Vec<Pod>, existing: Vec<ExistingNode>) -> SchedulingResult {
    crate::scheduling::solve(&SchedulingInput {
        pods,
        node_pools: vec![NodePoolView::new("default", catalog())],
        existing_nodes: existing,
        ..SchedulingInput::default()
    })
}

fn cheapest(claim: &NewClaim) -> &str {
    &claim.instance_type_options[0]
}

#[test]
fn pods_asking_for_1_2_4_and_8_gpus_get_the_cheapest_type_carrying_them() {
    for (count, want) in [(1, "g1"), (2, "g4"), (4, "g4"), (8, "g8")] {
        let result = solve(
            vec![pod_with("p", vec![claim("c", count, None)])],
            Vec::new(),
        );
        assert_eq!(result.new_claims.len(), 1, "{count}: {result:?}");
        let claim = &result.new_claims[0];
        assert_eq!(cheapest(claim), want, "{count} GPUs");
        // Every option the claim lists carries them: never a CPU-only type.
        assert!(
            claim.instance_type_options.iter().all(|t| t != "c16"),
            "{count}: {:?}",
            claim.instance_type_options
        );
    }
    // A pod without claims still gets the cheapest type.
    let result = solve(
        vec![Pod::new("default", "cpu", Resources::new(500, GI, 0))],
        Vec::new(),
    );
    assert_eq!(cheapest(&result.new_claims[0]), "c16");
}

#[test]
fn pods_share_a_node_only_while_its_devices_hold_all_their_claims() {
    // Two pods of 4 GPUs each: one 8-GPU node (cheaper than two of 4).
    let result = solve(
        vec![
            pod_with("a", vec![claim("a", 4, None)]),
            pod_with("b", vec![claim("b", 4, None)]),
        ],
        Vec::new(),
    );
    assert_eq!(result.new_claims.len(), 1, "{result:?}");
    assert_eq!(cheapest(&result.new_claims[0]), "g8");
    // Three of 4: no type holds 12, so a second claim.
    let result = solve(
        (0..3)
            .map(|i| pod_with(&format!("p{i}"), vec![claim(&format!("c{i}"), 4, None)]))
            .collect(),
        Vec::new(),
    );
    assert_eq!(result.new_claims.len(), 2, "{result:?}");
    let gpus: usize = result
        .new_claims
        .iter()
        .map(|c| match cheapest(c) {
            "g8" => 8,
            "g4" => 4,
            other => panic!("{other}"),
        })
        .sum();
    assert!(gpus >= 12);
}

#[test]
fn a_claim_shared_by_pods_is_allocated_once() {
    let shared = claim("shared", 1, None);
    let result = solve(
        vec![
            pod_with("a", vec![shared.clone()]),
            pod_with("b", vec![shared.clone()]),
        ],
        Vec::new(),
    );
    assert_eq!(result.new_claims.len(), 1, "{result:?}");
    assert_eq!(cheapest(&result.new_claims[0]), "g1");
    assert_eq!(result.new_claims[0].pods.len(), 2);
}

#[test]
fn a_cel_selector_on_capacity_picks_the_types_whose_devices_match() {
    let big = "device.capacity[\"gpu.example.com\"].memory.compareTo(quantity(\"40Gi\")) >= 0";
    let result = solve(
        vec![pod_with("p", vec![claim("c", 1, Some(big))])],
        Vec::new(),
    );
    assert_eq!(cheapest(&result.new_claims[0]), "h1", "{result:?}");
    assert_eq!(result.new_claims[0].instance_type_options.len(), 1);
}

#[test]
fn a_pod_asking_for_what_no_type_carries_is_unschedulable_saying_why() {
    let huge = "device.capacity[\"gpu.example.com\"].memory.compareTo(quantity(\"100Gi\")) >= 0";
    let result = solve(
        vec![pod_with("p", vec![claim("c", 1, Some(huge))])],
        Vec::new(),
    );
    assert!(result.new_claims.is_empty(), "{result:?}");
    let (_, reason) = &result.unschedulable[0];
    assert!(
        reason.contains("carries the devices its ResourceClaims ask for"),
        "{reason}"
    );
    let result = solve(vec![pod_with("p", vec![claim("c", 9, None)])], Vec::new());
    assert!(result.new_claims.is_empty(), "{result:?}");
}

fn node(name: &str, devices: Option<Inventory>) -> ExistingNode {
    ExistingNode {
        name: name.to_owned(),
        node_pool: Some("default".to_owned()),
        labels: BTreeMap::from([
            (INSTANCE_TYPE.to_owned(), "g4".to_owned()),
            (ZONE.to_owned(), "zone-1".to_owned()),
        ]),
        allocatable: Resources::new(16_000, 64 * GI, 110),
        initialized: true,
        devices: devices.map(NodeDevices),
        ..ExistingNode::default()
    }
}

#[test]
fn existing_nodes_take_pods_while_their_free_devices_last() {
    let templates = [(*gpus(2, "16Gi")).clone()];
    let mut inventory = Inventory::from_templates(&templates).unwrap();
    // One of its two GPUs is held by a running pod's claim.
    inventory.mark_allocated(&capstan_dra::DeviceId {
        driver: "gpu.example.com".to_owned(),
        pool: "gpus".to_owned(),
        device: "gpu-0".to_owned(),
    });
    let result = solve(
        vec![
            pod_with("a", vec![claim("a", 1, None)]),
            pod_with("b", vec![claim("b", 1, None)]),
        ],
        vec![node("gpu-node", Some(inventory)), node("plain-node", None)],
    );
    assert_eq!(result.existing_placements.len(), 1, "{result:?}");
    assert_eq!(
        result.existing_placements[0].1,
        Target::Node("gpu-node".to_owned()),
        "{result:?}"
    );
    assert_eq!(result.new_claims.len(), 1, "{result:?}");
    assert_eq!(cheapest(&result.new_claims[0]), "g1");
}

#[test]
fn a_pod_whose_claims_are_allocated_runs_only_on_their_node() {
    let mut pinned = Pod::new("default", "p", Resources::new(500, GI, 0));
    pinned.devices.pinned_to = Some("gpu-node".to_owned());
    let result = solve(
        vec![pinned.clone()],
        vec![node("plain-node", None), node("gpu-node", None)],
    );
    assert_eq!(
        result.existing_placements,
        vec![(0, Target::Node("gpu-node".to_owned()))],
        "{result:?}"
    );
    let result = solve(vec![pinned], vec![node("plain-node", None)]);
    assert!(result.new_claims.is_empty() && result.existing_placements.is_empty());
    assert!(
        result.unschedulable[0]
            .1
            .contains("allocated on node gpu-node"),
        "{result:?}"
    );
}
