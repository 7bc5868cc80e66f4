use super::*;
use serde_json::json;

fn view(conditions: &[(&str, &str, &str, &str)]) -> View {
    let mut v = View::default();
    v.pools.push(std::sync::Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "c"},
                "requirements": []}},
                "disruption": {"consolidateAfter": "30s", "budgets": [{"nodes": "10%"}]}}
        }))
        .unwrap(),
    ));
    for (node, status, reason, message) in conditions {
        v.claims.push(std::sync::Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": format!("{node}-claim"), "uid": node,
                             "labels": {NODEPOOL: "p"},
                             "annotations": {PRICE_ANNOTATION: "0.085"}},
                "spec": {"nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "c"},
                         "requirements": []},
                "status": {"providerID": format!("kwok://{node}"), "conditions": [
                    {"type": CONSOLIDATION_BLOCKED, "status": status, "reason": reason,
                     "message": message, "lastTransitionTime": "2026-11-26T10:00:00Z"}]}
            }))
            .unwrap(),
        ));
        v.nodes.push(std::sync::Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": node, "labels": {INSTANCE_TYPE: "c-2x"}},
                "spec": {"providerID": format!("kwok://{node}")}
            }))
            .unwrap(),
        ));
    }
    v
}

fn now() -> Timestamp {
    "2026-11-26T10:30:00Z".parse().unwrap()
}

#[test]
fn a_node_reads_its_verdict_and_what_unblocks_it() {
    let v = view(&[(
        "n1",
        "True",
        "DoNotDisruptPod",
        "pod ns/db has the karpenter.sh/do-not-disrupt annotation",
    )]);
    let by_node = explain_node(&v, "n1", now()).unwrap();
    let by_claim = explain_node(&v, "n1-claim", now()).unwrap();
    assert_eq!(by_node, by_claim);
    let a = &by_node.answer;
    assert_eq!(a.verdict.blocked, Some(true));
    assert_eq!(a.verdict.reason, "DoNotDisruptPod");
    assert!(a.verdict.unblock.contains("do-not-disrupt"));
    assert_eq!(a.price_per_hour, Some(0.085));
    let text = table::node(&by_node);
    assert!(text.contains("BLOCKED DoNotDisruptPod"), "{text}");
    assert!(text.contains("pod ns/db"), "{text}");
    assert_eq!(
        explain_node(&v, "nope", now()),
        Err(ExplainError::NoNode("nope".to_owned()))
    );
}

#[test]
fn a_pool_says_what_the_host_does_next() {
    let v = view(&[
        ("n1", "True", "DoNotDisruptPod", "pod ns/db"),
        ("n2", "False", NOT_BLOCKED, "nothing"),
    ]);
    let r = explain_pool(&v, "p", now()).unwrap();
    assert_eq!(r.next.action, "searching");
    assert_eq!(r.next.nodes, ["n2"]);
    assert_eq!(r.by_reason.get("DoNotDisruptPod"), Some(&1));
    assert_eq!(r.budgets, ["nodes \"10%\""]);
    let v = view(&[
        ("n1", "True", "DoNotDisruptPod", "pod ns/db"),
        ("n2", "True", "PendingValidation", "waits"),
    ]);
    let r = explain_pool(&v, "p", now()).unwrap();
    assert_eq!(
        (r.next.action, r.next.nodes.clone()),
        ("validating", vec!["n2".to_owned()])
    );
    let v = view(&[("n1", "True", "DoNotDisruptPod", "pod ns/db")]);
    let r = explain_pool(&v, "p", now()).unwrap();
    assert_eq!(r.next.action, "none");
    let text = table::pool(&r);
    assert!(text.contains("Next: none"), "{text}");
    assert!(matches!(
        explain_pool(&v, "q", now()),
        Err(ExplainError::NoPool(_))
    ));
}
