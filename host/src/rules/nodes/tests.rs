use k8s_openapi::api::core::v1::{Node, Taint as NodeTaint};
use serde_json::json;

use super::*;

fn taint(key: &str, effect: &str) -> NodeTaint {
    NodeTaint {
        key: key.to_owned(),
        effect: effect.to_owned(),
        ..NodeTaint::default()
    }
}

#[test]
fn the_disrupted_taint_is_added_once_and_removed_whole() {
    let other = taint("example.com/gpu", "NoSchedule");
    let added = with_disrupted_taint(vec![other.clone()]);
    assert_eq!(added, vec![other.clone(), disrupted_taint()]);
    assert_eq!(with_disrupted_taint(added.clone()), added, "added once");
    // Another effect of the same key is replaced by the NoSchedule one.
    let replaced = with_disrupted_taint(vec![taint(DISRUPTED_TAINT_KEY, "NoExecute")]);
    assert_eq!(replaced, vec![disrupted_taint()]);
    assert_eq!(without_disrupted_taint(added), vec![other.clone()]);
    assert_eq!(
        without_disrupted_taint(vec![taint(DISRUPTED_TAINT_KEY, "NoExecute"), other.clone()]),
        vec![other]
    );
    assert!(is_disrupted_taint(&disrupted_taint()));
    assert!(!is_disrupted_taint(&taint(
        DISRUPTED_TAINT_KEY,
        "NoExecute"
    )));
    assert!(disrupted_taint_model().key == DISRUPTED_TAINT_KEY);
}

#[test]
fn node_facts() {
    let node = |value: serde_json::Value| -> Node { serde_json::from_value(value).unwrap() };
    let ready = node(json!({"metadata": {"name": "n"}, "status": {"conditions": [
        {"type": "Ready", "status": "True"}]}}));
    assert!(node_ready(&ready));
    assert!(!tainted_disrupted(&ready));
    let not_ready = node(json!({"metadata": {"name": "n"}, "status": {"conditions": [
        {"type": "Ready", "status": "Unknown"}]}}));
    assert!(!node_ready(&not_ready));
    assert!(!node_ready(&node(json!({"metadata": {"name": "n"}}))));
    let tainted = node(json!({"metadata": {"name": "n"}, "spec": {"taints": [
        {"key": DISRUPTED_TAINT_KEY, "effect": "NoExecute"}]}}));
    assert!(tainted_disrupted(&tainted), "any effect");
}
