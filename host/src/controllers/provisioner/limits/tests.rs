use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::*;
use crate::api::labels::{CAPACITY_TYPE, ZONE};
use crate::scheduling::{
    self, NodePoolView, Offering, Pod, Requirement, Requirements, SchedulingInput,
};

const GI: i64 = 1 << 30;

fn instance_type(name: &str, cpu: i64) -> InstanceType {
    InstanceType {
        name: name.to_owned(),
        requirements: Requirements::new()
            .with(Requirement::in_(INSTANCE_TYPE, [name]))
            .with(Requirement::in_(ZONE, ["zone-1"]))
            .with(Requirement::in_(CAPACITY_TYPE, ["on-demand"])),
        offerings: vec![Offering::new("zone-1", "on-demand", 0.1 * cpu as f64)],
        capacity: Resources::new(cpu * 1000, 2 * cpu * GI, 10 * cpu),
        overhead: Resources::default(),
    }
}

fn types() -> Vec<InstanceType> {
    [1, 2, 4, 8]
        .iter()
        .map(|&c| instance_type(&format!("c{c}"), c))
        .collect()
}

fn pool(limits: Value, status: Option<Value>) -> NodePool {
    let mut pool = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "limits": limits,
            "template": {"spec": {
                "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "default"},
                "requirements": []
            }}
        }
    });
    if let Some(status) = status {
        pool["status"] = status;
    }
    serde_json::from_value(pool).unwrap()
}

/// A claim of `pool` that may launch as any of `options`, sized for `requests_cpu`.
fn launching(pool: &str, options: &[&str], requests_cpu: &str) -> NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": format!("{pool}-x"), "labels": {NODEPOOL: pool}},
        "spec": {
            "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "default"},
            "requirements": [
                {"key": INSTANCE_TYPE, "operator": "In", "values": options}
            ],
            "resources": {"requests": {"cpu": requests_cpu}}
        }
    }))
    .unwrap()
}

fn launched(pool: &str, cpu: &str) -> NodeClaim {
    let mut claim = launching(pool, &["c1", "c2", "c4", "c8"], "1");
    claim.status =
        Some(serde_json::from_value(json!({"capacity": {"cpu": cpu, "memory": "8Gi"}})).unwrap());
    claim
}

fn limits_of(pool: &NodePool) -> ResourceLimits {
    let list = pool.spec.limits.as_ref().unwrap();
    ResourceLimits::parse(list.iter().map(|(k, v)| (k.as_str(), v.as_str()))).unwrap()
}

#[test]
fn launching_claims_count_their_largest_option() {
    let types = types();
    let claims = vec![
        launching("default", &["c2", "c4"], "1500m"),
        launching("default", &["c1", "c8"], "500m"),
    ];
    let usage = claim_usage("default", &claims, &types);
    assert_eq!(usage.nodes, 2);
    assert_eq!(usage.resources.get("cpu"), 12_000);
    assert_eq!(usage.resources.get("memory"), 24 * GI);
    let p = pool(json!({"cpu": "16", "nodes": 3}), None);
    let remaining = remaining(Some(&limits_of(&p)), &p, &usage).unwrap();
    assert_eq!(remaining.0["cpu"], 4_000);
    assert_eq!(remaining.0["nodes"], 1);
}

#[test]
fn launching_claims_with_unknown_options_count_their_requests() {
    let types = types();
    let claims = vec![launching("default", &["z99"], "3")];
    let usage = claim_usage("default", &claims, &types);
    assert_eq!(usage.resources.get("cpu"), 3_000);
    let mut no_requirement = launching("default", &[], "2500m");
    no_requirement.spec.requirements.clear();
    assert_eq!(claim_capacity(&no_requirement, &types).get("cpu"), 2_500);
}

#[test]
fn launched_claims_count_their_capacity() {
    let types = types();
    let claims = vec![launched("default", "4"), launched("default", "2")];
    let usage = claim_usage("default", &claims, &types);
    assert_eq!(usage.nodes, 2);
    assert_eq!(usage.resources.get("cpu"), 6_000);
    assert_eq!(usage.resources.get("memory"), 16 * GI);
}

#[test]
fn mixed_claims_other_pools_and_deleting_claims() {
    let types = types();
    let mut deleting = launched("default", "8");
    deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    let claims = vec![
        launched("default", "4"),
        launching("default", &["c2", "c4", "c8"], "3"),
        launched("other", "8"),
        deleting,
    ];
    let usage = claim_usage("default", &claims, &types);
    assert_eq!(usage.nodes, 2);
    assert_eq!(usage.resources.get("cpu"), 12_000);
    let p = pool(json!({"cpu": "20"}), None);
    let remaining = remaining(Some(&limits_of(&p)), &p, &usage).unwrap();
    assert_eq!(remaining.0["cpu"], 8_000);
}

#[test]
fn status_counts_when_it_is_larger_and_nodes_are_not_counted_twice() {
    let p = pool(
        json!({"cpu": "16", "memory": "64Gi", "nodes": 5}),
        Some(json!({"resources": {"cpu": "10", "memory": "4Gi", "nodes": "2"}, "nodes": 2})),
    );
    let usage = claim_usage("default", &[launched("default", "4")], &types());
    let remaining = remaining(Some(&limits_of(&p)), &p, &usage).unwrap();
    // cpu from status (10 > 4), memory from the claim (8Gi > 4Gi), nodes max(1, 2).
    assert_eq!(remaining.0["cpu"], 6_000);
    assert_eq!(remaining.0["memory"], 56 * GI);
    assert_eq!(remaining.0["nodes"], 3);
    assert_eq!(super::remaining(None, &p, &usage), None);
}

#[test]
fn a_pool_at_its_limit_with_unlaunched_claims_launches_nothing() {
    let types = types();
    // Status still shows nothing: both claims were created by the previous batch.
    let p = pool(
        json!({"cpu": "8"}),
        Some(json!({"resources": {}, "nodes": 0})),
    );
    let claims = vec![
        launching("default", &["c2", "c4"], "2"),
        launching("default", &["c4"], "3"),
    ];
    let usage = claim_usage("default", &claims, &types);
    let remaining = remaining(Some(&limits_of(&p)), &p, &usage).unwrap();
    assert!(remaining.0["cpu"] <= 0, "{remaining:?}");

    let mut view = NodePoolView::new("default", Arc::from(types));
    view.limits = Some(limits_of(&p));
    view.remaining = Some(remaining);
    let result = scheduling::solve(&SchedulingInput {
        pods: vec![Pod::new("default", "p", Resources::new(500, GI, 0))],
        node_pools: vec![view],
        ..SchedulingInput::default()
    });
    assert!(result.new_claims.is_empty());
    assert_eq!(
        result.unschedulable,
        vec![(0, "nodepool default limit cpu exceeded".to_owned())]
    );
}
