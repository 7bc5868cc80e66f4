//! A reboot, as kwok can play one: the Node gets a new boot ID (`kwok-<operation ID>`, so the same
//! operation asked twice reboots once) and goes `Ready=False` (`KubeletNotReady`); kwok's
//! `node-initialize` stage then brings it back Ready, as a kubelet that has booted again would,
//! with its default conditions (a simulated fault such as `KWOKUnhealthy` is gone with the reboot).
//!
//! [`patch`] is pure: from the Node as read to the JSON patch that reboots it.

use serde_json::{Value, json};

/// The boot ID a Node gets from the reboot of `operation_id`.
pub fn boot_id(operation_id: &str) -> String {
    format!("kwok-{operation_id}")
}

/// The JSON patch (RFC 6902) of `node`'s status that reboots it for `operation_id`, at `now`
/// (RFC 3339); `None` when this operation already rebooted it. The patch tests the condition it
/// replaces, so a Node whose conditions moved in between is not patched blindly.
pub fn patch(node: &Value, operation_id: &str, now: &str) -> Option<Vec<Value>> {
    let boot = boot_id(operation_id);
    let status = node.get("status");
    let info = status.and_then(|s| s.get("nodeInfo"));
    if info
        .and_then(|i| i.get("bootID"))
        .and_then(Value::as_str)
        .is_some_and(|current| current == boot)
    {
        return None;
    }
    let mut ops = Vec::new();
    if status.is_none() {
        ops.push(json!({"op": "add", "path": "/status", "value": {}}));
    }
    if info.is_some() {
        ops.push(json!({"op": "add", "path": "/status/nodeInfo/bootID", "value": boot}));
    } else {
        ops.push(json!({"op": "add", "path": "/status/nodeInfo", "value": {"bootID": boot}}));
    }
    let not_ready = json!({
        "type": "Ready",
        "status": "False",
        "reason": "KubeletNotReady",
        "message": format!("kwok provider: rebooting (operation {operation_id})"),
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    });
    let conditions = status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array);
    match conditions {
        Some(list) => match list
            .iter()
            .position(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        {
            Some(i) => {
                ops.push(json!({"op": "test", "path": format!("/status/conditions/{i}/type"), "value": "Ready"}));
                ops.push(json!({"op": "replace", "path": format!("/status/conditions/{i}"), "value": not_ready}));
            }
            None => {
                ops.push(json!({"op": "add", "path": "/status/conditions/-", "value": not_ready}))
            }
        },
        None => ops.push(json!({"op": "add", "path": "/status/conditions", "value": [not_ready]})),
    }
    Some(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-12-02T13:00:00Z";

    #[test]
    fn a_running_node_gets_a_new_boot_and_goes_not_ready() {
        let node = json!({"status": {
            "nodeInfo": {"bootID": "", "architecture": "amd64"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            ],
        }});
        let ops = patch(&node, "uid-1-abc", NOW).unwrap();
        assert_eq!(
            ops,
            vec![
                json!({"op": "add", "path": "/status/nodeInfo/bootID", "value": "kwok-uid-1-abc"}),
                json!({"op": "test", "path": "/status/conditions/1/type", "value": "Ready"}),
                json!({"op": "replace", "path": "/status/conditions/1", "value": {
                    "type": "Ready", "status": "False", "reason": "KubeletNotReady",
                    "message": "kwok provider: rebooting (operation uid-1-abc)",
                    "lastHeartbeatTime": NOW, "lastTransitionTime": NOW,
                }}),
            ]
        );
    }

    #[test]
    fn the_same_operation_reboots_once() {
        let node = json!({"status": {"nodeInfo": {"bootID": "kwok-op"}, "conditions": []}});
        assert_eq!(patch(&node, "op", NOW), None);
        // Another operation reboots again.
        assert!(patch(&node, "op2", NOW).is_some());
    }

    #[test]
    fn a_node_without_status_gets_one() {
        let ops = patch(&json!({"metadata": {"name": "n"}}), "op", NOW).unwrap();
        assert_eq!(ops[0], json!({"op": "add", "path": "/status", "value": {}}));
        assert_eq!(
            ops[1],
            json!({"op": "add", "path": "/status/nodeInfo", "value": {"bootID": "kwok-op"}})
        );
        assert_eq!(ops[2]["path"], "/status/conditions");
    }
}
