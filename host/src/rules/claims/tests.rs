use serde_json::json;

use super::*;

fn claim(value: serde_json::Value) -> NodeClaim {
    serde_json::from_value(value).unwrap()
}

#[test]
fn claim_facts() {
    let launched = claim(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "c", "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"nodeClassRef": {"group": "capstan.dev", "kind": "KwokNodeClass", "name": "k"}, "requirements": []},
        "status": {"providerID": "kwok://c", "conditions": [
            {"type": "Launched", "status": "True", "reason": "Launched", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Registered", "status": "False", "reason": "NotYet", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ]}
    }));
    assert_eq!(provider_id(&launched), Some("kwok://c"));
    assert_eq!(nodepool(&launched), "default");
    assert!(is_true(&launched, "Launched"));
    assert!(!is_true(&launched, "Registered"));
    assert!(!is_true(&launched, "Initialized"));

    let empty = claim(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "c"},
        "spec": {"nodeClassRef": {"group": "capstan.dev", "kind": "KwokNodeClass", "name": "k"}, "requirements": []},
        "status": {"providerID": ""}
    }));
    assert_eq!(provider_id(&empty), None, "an empty provider ID is none");
    assert_eq!(nodepool(&empty), "");
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

fn status_of<'a>(claim: &'a NodeClaim, type_: &str) -> Option<(&'a ConditionStatus, &'a str)> {
    let conditions = &claim.status.as_ref()?.conditions;
    find_condition(conditions, type_).map(|c| (&c.status, c.reason.as_deref().unwrap_or("")))
}

#[test]
fn the_first_condition_brings_every_dependent_of_ready_as_unknown() {
    let spec: crate::api::NodeClaimSpec = serde_json::from_value(serde_json::json!({
        "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "c"},
        "requirements": []
    }))
    .unwrap();
    let mut claim = NodeClaim::new("c", spec);
    assert!(set_condition(
        &mut claim,
        LAUNCHED,
        ConditionStatus::True,
        "Launched",
        "",
        &now()
    ));
    assert_eq!(
        status_of(&claim, LAUNCHED),
        Some((&ConditionStatus::True, "Launched"))
    );
    for dependent in [REGISTERED, INITIALIZED] {
        assert_eq!(
            status_of(&claim, dependent),
            Some((&ConditionStatus::Unknown, AWAITING_RECONCILIATION)),
            "{dependent}"
        );
    }
    assert_eq!(
        status_of(&claim, READY),
        Some((&ConditionStatus::Unknown, "UnhealthyDependents"))
    );
    // Setting the same again changes nothing; the other two make the claim Ready.
    for (type_, changes) in [(LAUNCHED, false), (REGISTERED, true), (INITIALIZED, true)] {
        let changed = set_condition(&mut claim, type_, ConditionStatus::True, type_, "", &now());
        assert_eq!(changed, changes, "{type_}");
    }
    assert_eq!(
        status_of(&claim, READY),
        Some((&ConditionStatus::True, "Ready"))
    );
}
