use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use serde_json::json;

use super::*;

fn class() -> Arc<DeviceClass> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == \"gpu.example.com\""}}]}
        }))
        .unwrap(),
    )
}

fn spec(count: i64) -> serde_json::Value {
    json!({"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": count}}
    ]}})
}

fn claim(name: &str, allocated_on: Option<(&str, &[&str])>) -> Arc<ResourceClaim> {
    let mut claim = json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec(1),
    });
    if let Some((node, devices)) = allocated_on {
        let results: Vec<_> = devices
            .iter()
            .map(|d| json!({"request": "gpu", "driver": "gpu.example.com", "pool": node, "device": d}))
            .collect();
        claim["status"] = json!({"allocation": {
            "devices": {"results": results},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}
            ]}]}
        }});
    }
    Arc::new(serde_json::from_value(claim).unwrap())
}

fn template(name: &str, count: i64) -> Arc<ResourceClaimTemplate> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"spec": spec(count)}
        }))
        .unwrap(),
    )
}

fn slice(node: &str, devices: usize) -> Arc<ResourceSlice> {
    let devices: Vec<_> = (0..devices)
        .map(|i| json!({"name": format!("gpu-{i}")}))
        .collect();
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": format!("{node}-gpus")},
            "spec": {"driver": "gpu.example.com", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}
        }))
        .unwrap(),
    )
}

fn pod(claims: serde_json::Value, statuses: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c"}], "resourceClaims": claims},
        "status": {"resourceClaimStatuses": statuses}
    }))
    .unwrap()
}

fn index(claims: &[Arc<ResourceClaim>]) -> ClaimIndex {
    ClaimIndex::new(
        claims,
        &[template("one-gpu", 1), template("two-gpus", 2)],
        &[class()],
        &[slice("node-a", 2), slice("node-b", 1)],
    )
}

#[test]
fn a_named_claim_and_a_template_both_become_requests() {
    let index = index(&[claim("shared", None)]);
    let devices = index
        .pod_devices(
            &pod(
                json!([{"name": "a", "resourceClaimName": "shared"},
                       {"name": "b", "resourceClaimTemplateName": "two-gpus"}]),
                json!([]),
            ),
            false,
        )
        .unwrap();
    let keys: Vec<String> = devices.keys().map(ToString::to_string).collect();
    assert_eq!(keys, ["default/shared", "default/p/b"]);
    assert_eq!(devices.pinned_to, None);
}

#[test]
fn a_generated_claim_is_used_once_it_exists_and_the_template_until_then() {
    let entries = json!([{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]);
    let generated = json!([{"name": "gpu", "resourceClaimName": "p-gpu-x7"}]);
    // Not in the cache yet: the template stands in.
    let devices = index(&[])
        .pod_devices(&pod(entries.clone(), generated.clone()), false)
        .unwrap();
    assert_eq!(devices.claims[0].key.to_string(), "default/p/gpu");
    // In the cache: the generated claim.
    let devices = index(&[claim("p-gpu-x7", None)])
        .pod_devices(&pod(entries, generated), false)
        .unwrap();
    assert_eq!(devices.claims[0].key.to_string(), "default/p-gpu-x7");
}

#[test]
fn an_allocated_claim_pins_a_pending_pod_and_moves_with_a_bound_one() {
    let index = index(&[claim("held", Some(("node-a", &["gpu-0"])))]);
    let entries = json!([{"name": "gpu", "resourceClaimName": "held"}]);
    let pending = index
        .pod_devices(&pod(entries.clone(), json!([])), false)
        .unwrap();
    assert_eq!(pending.pinned_to.as_deref(), Some("node-a"));
    assert!(pending.claims.is_empty());
    let moving = index.pod_devices(&pod(entries, json!([])), true).unwrap();
    assert_eq!(moving.pinned_to, None);
    assert_eq!(moving.claims.len(), 1);
}

#[test]
fn missing_objects_and_unknown_classes_are_errors_naming_them() {
    let index = index(&[]);
    let err = |claims: serde_json::Value| {
        index
            .pod_devices(&pod(claims, json!([])), false)
            .unwrap_err()
            .to_string()
    };
    assert!(
        err(json!([{"name": "a", "resourceClaimName": "gone"}]))
            .contains("ResourceClaim default/gone not found")
    );
    assert!(
        err(json!([{"name": "a", "resourceClaimTemplateName": "gone"}]))
            .contains("ResourceClaimTemplate default/gone not found")
    );
    let no_class = ClaimIndex::new(&[], &[template("one-gpu", 1)], &[], &[]);
    let why = no_class
        .pod_devices(
            &pod(
                json!([{"name": "a", "resourceClaimTemplateName": "one-gpu"}]),
                json!([]),
            ),
            false,
        )
        .unwrap_err()
        .to_string();
    assert!(why.contains("DeviceClass gpu does not exist"), "{why}");
}

#[test]
fn a_nodes_devices_are_its_slices_less_what_claims_hold() {
    let index = index(&[claim("held", Some(("node-a", &["gpu-1"])))]);
    let a = index.node_devices("node-a").unwrap().0;
    let id = |d: &str| capstan_dra::DeviceId {
        driver: "gpu.example.com".to_owned(),
        pool: "node-a".to_owned(),
        device: d.to_owned(),
    };
    assert_eq!(a.uses(&id("gpu-0")), Some(0));
    assert_eq!(a.uses(&id("gpu-1")), Some(1));
    assert_eq!(index.node_devices("node-b").unwrap().0.devices().count(), 1);
    assert!(index.node_devices("node-c").is_none());
}
