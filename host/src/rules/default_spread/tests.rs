use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, TopologySpreadConstraint};
use serde_json::json;

use super::*;

const CONFIG: &str = "
podTopologySpread:
  defaultConstraints:
    - maxSkew: 1
      topologyKey: kubernetes.io/hostname
      whenUnsatisfiable: DoNotSchedule
    - maxSkew: 1
      topologyKey: topology.kubernetes.io/zone
      whenUnsatisfiable: DoNotSchedule
";

fn object<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).unwrap())
}

fn pod(labels: serde_json::Value, owner: Option<(&str, &str)>) -> Pod {
    let owners: Vec<_> = owner
        .into_iter()
        .map(|(kind, uid)| json!({"apiVersion": "apps/v1", "kind": kind, "name": "w", "uid": uid, "controller": true}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "default", "labels": labels, "ownerReferences": owners},
        "spec": {"containers": []},
    }))
    .unwrap()
}

fn spread(workloads: &Workloads) -> DefaultSpread {
    let config = SchedulerConfig::parse(CONFIG).unwrap().unwrap();
    DefaultSpread::new(&config, workloads).unwrap()
}

fn selector_of(constraints: &[TopologySpreadConstraint]) -> serde_json::Value {
    assert_eq!(constraints.len(), 2, "{constraints:?}");
    assert_eq!(constraints[0].topology_key, "kubernetes.io/hostname");
    assert_eq!(constraints[1].topology_key, "topology.kubernetes.io/zone");
    assert_eq!(constraints[0].label_selector, constraints[1].label_selector);
    serde_json::to_value(constraints[0].label_selector.as_ref().unwrap()).unwrap()
}

#[test]
fn a_replica_sets_pods_get_the_defaults_with_its_selector() {
    let workloads = Workloads {
        replica_sets: vec![object(json!({
            "metadata": {"name": "w", "namespace": "default", "uid": "rs-1"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
        }))],
        ..Workloads::default()
    };
    let constraints = spread(&workloads)
        .for_pod(&pod(json!({"app": "web"}), Some(("ReplicaSet", "rs-1"))))
        .unwrap();
    assert_eq!(
        selector_of(&constraints),
        json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]})
    );
    assert_eq!(constraints[0].when_unsatisfiable, "DoNotSchedule");
}

#[test]
fn services_selecting_the_pod_give_equalities_and_others_nothing() {
    let workloads = Workloads {
        services: vec![
            object(
                json!({"metadata": {"name": "a", "namespace": "default"}, "spec": {"selector": {"app": "web"}}}),
            ),
            object(
                json!({"metadata": {"name": "b", "namespace": "default"}, "spec": {"selector": {"app": "db"}}}),
            ),
            object(
                json!({"metadata": {"name": "c", "namespace": "other"}, "spec": {"selector": {"tier": "front"}}}),
            ),
            // No selector: selects nothing.
            object(json!({"metadata": {"name": "d", "namespace": "default"}, "spec": {}})),
        ],
        ..Workloads::default()
    };
    let spread = spread(&workloads);
    let constraints = spread
        .for_pod(&pod(json!({"app": "web", "tier": "front"}), None))
        .unwrap();
    assert_eq!(
        selector_of(&constraints),
        json!({"matchLabels": {"app": "web"}})
    );
    // Selected by nothing and owned by nothing: nothing to deduce, no default.
    assert_eq!(spread.for_pod(&pod(json!({"app": "cache"}), None)), None);
}

#[test]
fn a_replication_controllers_labels_overwrite_the_services() {
    let workloads = Workloads {
        services: vec![object(
            json!({"metadata": {"name": "a", "namespace": "default"}, "spec": {"selector": {"app": "web"}}}),
        )],
        replication_controllers: vec![object(json!({
            "metadata": {"name": "w", "namespace": "default", "uid": "rc-1"},
            "spec": {"selector": {"app": "web", "release": "blue"}},
        }))],
        ..Workloads::default()
    };
    let constraints = spread(&workloads)
        .for_pod(&pod(
            json!({"app": "web", "release": "blue"}),
            Some(("ReplicationController", "rc-1")),
        ))
        .unwrap();
    assert_eq!(
        selector_of(&constraints),
        json!({"matchLabels": {"app": "web", "release": "blue"}})
    );
}

#[test]
fn a_pod_with_constraints_of_its_own_keeps_them_alone() {
    let workloads = Workloads {
        services: vec![object(
            json!({"metadata": {"name": "a", "namespace": "default"}, "spec": {"selector": {"app": "web"}}}),
        )],
        ..Workloads::default()
    };
    let mut own = pod(json!({"app": "web"}), None);
    own.spec.as_mut().unwrap().topology_spread_constraints =
        Some(vec![serde_json::from_value(json!({
            "maxSkew": 4, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
        }))
        .unwrap()]);
    assert_eq!(spread(&workloads).for_pod(&own), None);
}

#[test]
fn no_configuration_or_no_constraints_means_no_defaults() {
    assert_eq!(SchedulerConfig::parse("").unwrap(), None);
    assert_eq!(SchedulerConfig::parse("  \n").unwrap(), None);
    let empty = SchedulerConfig::parse("podTopologySpread: {}")
        .unwrap()
        .unwrap();
    assert!(DefaultSpread::new(&empty, &Workloads::default()).is_none());
}

#[test]
fn what_kube_scheduler_refuses_is_refused() {
    let constraint = |extra: &str| {
        format!(
            "podTopologySpread:\n  defaultConstraints:\n    - {{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule{extra}}}\n"
        )
    };
    let refused = |raw: &str| SchedulerConfig::parse(raw).unwrap_err().to_string();
    assert!(refused("nodeAffinity: {}").contains("decoding"));
    assert!(refused("podTopologySpread: {defaultingType: List}").contains("decoding"));
    assert!(
        refused(&constraint(", labelSelector: {matchLabels: {app: web}}"))
            .contains("defaultConstraints[0].labelSelector must not be set")
    );
    assert!(refused(&constraint(", matchLabelKeys: [app]")).contains(".matchLabelKeys"));
    assert!(
        refused(&constraint("").replace("maxSkew: 1", "maxSkew: 0")).contains(".maxSkew must be")
    );
    assert!(
        refused(&constraint("").replace("DoNotSchedule", "Sometimes"))
            .contains(".whenUnsatisfiable")
    );
    assert!(
        refused(&constraint("").replace("kubernetes.io/hostname", "-bad-/key"))
            .contains("not a valid label name")
    );
    let twice = format!(
        "{}    - {{maxSkew: 2, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}}\n",
        constraint("")
    );
    assert!(refused(&twice).contains("defaultConstraints[1] repeats [0]"));
    // The same key with the other mode is two constraints, as kube-scheduler allows.
    let both = twice.replace(
        "maxSkew: 2, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule",
        "maxSkew: 2, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway",
    );
    assert!(SchedulerConfig::parse(&both).unwrap().is_some());
}
