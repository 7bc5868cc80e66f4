use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::*;

/// A pod kube-scheduler gave up on, with `edit` applied to its JSON.
fn pod(edit: impl FnOnce(&mut Value)) -> Pod {
    let mut value = json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": []},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
        }
    });
    edit(&mut value);
    serde_json::from_value(value).unwrap()
}

fn owned(api_version: &str, kind: &str) -> Pod {
    pod(|v| {
        v["metadata"]["ownerReferences"] = json!([{"apiVersion": api_version, "kind": kind, "name": "o", "uid": "u", "controller": true}]);
    })
}

#[test]
fn owners_are_matched_by_api_version_and_kind() {
    assert!(owned_by_daemonset(&owned("apps/v1", "DaemonSet")));
    assert_eq!(
        daemonset_of(&owned("apps/v1", "DaemonSet")).map(|o| o.uid.as_str()),
        Some("u")
    );
    // Karpenter's IsOwnedByDaemonSet: another API version is not a DaemonSet.
    assert!(!owned_by_daemonset(&owned(
        "extensions/v1beta1",
        "DaemonSet"
    )));
    assert!(!owned_by_daemonset(&owned("apps/v1", "ReplicaSet")));
    assert!(is_static(&owned("v1", "Node")));
    assert!(is_static(&pod(|v| {
        v["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "abc"});
    })));
    assert!(!is_static(&owned("apps/v1", "DaemonSet")));
    for (pod, expected) in [
        (owned("apps/v1", "DaemonSet"), true),
        (owned("v1", "Node"), true),
        (owned("apps/v1", "ReplicaSet"), false),
        (pod(|_| {}), false),
    ] {
        assert_eq!(
            daemon_or_static(&pod),
            expected,
            "{:?}",
            pod.metadata.owner_references
        );
    }
}

#[test]
fn provisionable_pods_are_the_unschedulable_ones_of_no_daemonset_or_node() {
    assert!(is_provisionable(&pod(|_| {})));
    assert!(is_provisionable(&owned("apps/v1", "ReplicaSet")));
    assert!(!is_provisionable(&owned("apps/v1", "DaemonSet")));
    assert!(!is_provisionable(&owned("v1", "Node")));
    let cases = [
        ("bound", pod(|v| v["spec"]["nodeName"] = json!("n1"))),
        (
            "terminating",
            pod(|v| v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")),
        ),
        (
            "not marked by the scheduler yet",
            pod(|v| v["status"] = json!({})),
        ),
        (
            "gated",
            pod(|v| v["status"]["conditions"][0]["reason"] = json!("SchedulingGated")),
        ),
        ("failed", pod(|v| v["status"]["phase"] = json!("Failed"))),
        (
            "nominated by preemption: it waits for its victims",
            pod(|v| v["status"]["nominatedNodeName"] = json!("n1")),
        ),
    ];
    for (name, pod) in cases {
        assert!(!is_provisionable(&pod), "{name}");
    }
    let empty_nomination = pod(|v| v["status"]["nominatedNodeName"] = json!(""));
    assert!(
        is_provisionable(&empty_nomination),
        "an empty nomination is none"
    );
}

#[test]
fn reschedulable_pods_are_active_and_neither_daemon_nor_static() {
    let bound = |edit: fn(&mut Value)| {
        pod(|v| {
            v["spec"]["nodeName"] = json!("n1");
            v["status"] = json!({"phase": "Running"});
            edit(v);
        })
    };
    assert!(is_reschedulable(&bound(|_| {})));
    assert!(!is_reschedulable(&bound(
        |v| v["status"]["phase"] = json!("Succeeded")
    )));
    assert!(!is_reschedulable(&bound(|v| {
        v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    })));
    assert!(!is_reschedulable(&bound(|v| {
        v["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]);
    })));
    assert!(!is_reschedulable(&bound(|v| {
        v["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u"}]);
    })));
}

#[test]
fn tolerating_the_disrupted_taint() {
    let tolerating = |toleration: Value| pod(|v| v["spec"]["tolerations"] = json!([toleration]));
    assert!(tolerates_disruption(&tolerating(
        json!({"operator": "Exists"})
    )));
    assert!(tolerates_disruption(&tolerating(
        json!({"key": "karpenter.sh/disrupted", "operator": "Exists", "effect": "NoSchedule"})
    )));
    assert!(!tolerates_disruption(&tolerating(
        json!({"key": "karpenter.sh/disrupted", "operator": "Exists", "effect": "NoExecute"})
    )));
    assert!(!tolerates_disruption(&tolerating(
        json!({"key": "other", "operator": "Exists"})
    )));
    assert!(!tolerates_disruption(&pod(|_| {})));
}

#[test]
fn do_not_disrupt_values() {
    const NOW: i64 = 1_800_000_000;
    let with = |value: &str, started: Option<i64>| {
        pod(|v| {
            v["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": value});
            v["status"]["startTime"] = match started {
                Some(s) => json!(Timestamp::from_second(NOW + s).unwrap().to_string()),
                None => Value::Null,
            };
        })
    };
    let cases = [
        ("true", Some(-10), true),
        ("false", Some(-10), false),
        ("True", Some(-10), false),
        ("garbage", Some(-10), false),
        ("5m", Some(-10), true),
        ("5m", Some(-299), true),
        ("5m", Some(-300), false),
        ("1h", Some(-7200), false),
        ("0s", Some(-10), false),
        ("5m", None, true),
    ];
    let now = Timestamp::from_second(NOW).unwrap();
    for (value, started, protected) in cases {
        assert_eq!(
            do_not_disrupt(&with(value, started), now),
            protected,
            "{value} started {started:?}"
        );
    }
    assert!(!do_not_disrupt(&pod(|_| {}), now));
}
