use serde_json::json;

use super::*;

fn classes() -> DeviceClasses {
    let class: resource::DeviceClass = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.example.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == \"gpu.example.com\""}}]},
    }))
    .unwrap();
    let mut classes = DeviceClasses::from_objects([&class]);
    classes.insert("broken", vec!["device.driver ==".into()]);
    classes
}

fn build(spec: serde_json::Value) -> Result<ClaimRequests, Unsatisfiable> {
    let spec: resource::ResourceClaimSpec = serde_json::from_value(spec).unwrap();
    ClaimRequests::from_spec(
        ClaimKey::new("ns", "claim"),
        &spec,
        &classes(),
        &mut SelectorCache::new(),
    )
}

#[test]
fn exact_requests_join_class_and_request_selectors() {
    let claim = build(json!({"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu.example.com",
        "selectors": [{"cel": {"expression": "device.attributes[\"gpu.example.com\"].type == \"gpu\""}}],
    }}]}}))
    .unwrap();
    assert_eq!(claim.key.to_string(), "ns/claim");
    assert_eq!(claim.requests.len(), 1);
    let alt = &claim.requests[0].alternatives[0];
    assert_eq!(alt.name, "gpu");
    assert_eq!(
        alt.mode,
        AllocationMode::ExactCount(1),
        "count defaults to 1"
    );
    let expressions: Vec<_> = alt.selectors.iter().map(|s| s.expression()).collect();
    assert_eq!(
        expressions,
        [
            "device.driver == \"gpu.example.com\"",
            "device.attributes[\"gpu.example.com\"].type == \"gpu\""
        ]
    );
}

#[test]
fn modes_and_first_available_alternatives() {
    let claim = build(json!({"devices": {
        "requests": [
            {"name": "all", "exactly": {"deviceClassName": "gpu.example.com", "allocationMode": "All"}},
            {"name": "gpu", "firstAvailable": [
                {"name": "big", "deviceClassName": "gpu.example.com", "count": 4},
                {"name": "small", "deviceClassName": "gpu.example.com"},
            ]},
        ],
        "constraints": [
            {"matchAttribute": "gpu.example.com/numa", "requests": ["gpu/big", "all"]},
            {"distinctAttribute": "gpu.example.com/index"},
        ],
    }}))
    .unwrap();
    assert_eq!(claim.requests[0].alternatives[0].mode, AllocationMode::All);
    let names: Vec<_> = claim.requests[1]
        .alternatives
        .iter()
        .map(|a| (a.name.as_str(), a.mode))
        .collect();
    assert_eq!(
        names,
        [
            ("gpu/big", AllocationMode::ExactCount(4)),
            ("gpu/small", AllocationMode::ExactCount(1))
        ]
    );
    let [matching, distinct] = claim.constraints.as_slice() else {
        panic!("two constraints");
    };
    assert_eq!(matching.kind, ConstraintKind::MatchAttribute);
    assert!(matching.applies_to("gpu", "gpu/big"));
    assert!(!matching.applies_to("gpu", "gpu/small"));
    assert!(matching.applies_to("all", "all"));
    assert_eq!(distinct.kind, ConstraintKind::DistinctAttribute);
    assert!(
        distinct.applies_to("gpu", "gpu/small"),
        "no requests means all"
    );
}

#[test]
fn unknown_classes_and_bad_selectors_fail_the_claim() {
    let unknown = build(json!({"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "nope.example.com"}},
    ]}}));
    assert_eq!(
        unknown.unwrap_err().to_string(),
        "claim ns/claim request gpu: DeviceClass nope.example.com does not exist"
    );
    let broken = build(json!({"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "broken"}},
    ]}}));
    let error = broken.unwrap_err();
    assert!(
        matches!(&error, Unsatisfiable::SelectorCompile { error, .. } if error.is_compile()),
        "{error}"
    );
    assert!(error.to_string().contains("device.driver =="), "{error}");
}

#[test]
fn malformed_requests_are_invalid() {
    for spec in [
        json!({"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 0}}]}}),
        json!({"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "allocationMode": "Some"}}]}}),
        json!({"devices": {"requests": [{"name": "gpu"}]}}),
        json!({"devices": {"requests": [{"name": "gpu", "firstAvailable": []}]}}),
        json!({"devices": {
            "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}],
            "constraints": [{"matchAttribute": "gpu.example.com/numa", "requests": ["nic"]}],
        }}),
    ] {
        let error = build(spec.clone()).unwrap_err();
        assert!(
            matches!(error, Unsatisfiable::InvalidRequest { .. }),
            "{spec}: {error}"
        );
    }
}

#[test]
fn a_claim_without_devices_asks_nothing() {
    let claim = build(json!({})).unwrap();
    assert!(claim.requests.is_empty() && claim.constraints.is_empty());
}

#[test]
fn allocated_claims_keep_their_allocation_and_templates_read_their_spec() {
    let claim: resource::ResourceClaim = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gone"}}]}},
        "status": {"allocation": {"devices": {"results": []}}},
    }))
    .unwrap();
    let mut cache = SelectorCache::new();
    let here = ClaimRequests::from_claim(&claim, &classes(), &mut cache, true).unwrap();
    assert_eq!(here.existing, Some(ExistingAllocation::ThisNode));
    assert_eq!(here.key, ClaimKey::new("ns", "c"));
    let there = ClaimRequests::from_claim(&claim, &classes(), &mut cache, false).unwrap();
    assert_eq!(there.existing, Some(ExistingAllocation::OtherNode));

    let template: resource::ResourceClaimTemplate = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "ns"},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 2}},
        ]}}},
    }))
    .unwrap();
    let pod_claim = ClaimRequests::from_template(
        ClaimKey::new("ns", "pod-gpu"),
        &template,
        &classes(),
        &mut cache,
    )
    .unwrap();
    assert_eq!(pod_claim.existing, None);
    assert_eq!(
        pod_claim.requests[0].alternatives[0].mode,
        AllocationMode::ExactCount(2)
    );
    assert_eq!(cache.len(), 1, "the class selector compiled once");
}
