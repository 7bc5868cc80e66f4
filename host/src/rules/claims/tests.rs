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
