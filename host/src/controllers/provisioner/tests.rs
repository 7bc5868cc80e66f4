use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
use serde_json::json;

use super::*;
use crate::rules::snapshot::not_for_dynamic_provisioning;
use kube::api::ObjectMeta;

use crate::api::labels::PRICE_ANNOTATION;
use crate::rules::new_claim::{api_requirements, claim_for};
use crate::rules::snapshot::Snapshot;
use crate::scheduling::Requirement;
use crate::scheduling::{Requirements, Resources};

fn pending_pod() -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec::default()),
        status: Some(PodStatus {
            phase: Some("Pending".into()),
            conditions: Some(vec![PodCondition {
                type_: "PodScheduled".into(),
                status: "False".into(),
                reason: Some("Unschedulable".into()),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        }),
    }
}

/// Bounds below zero (a pool's `Gte 0`, a pod's `Gt -5` or `Lt -1`) become ones the NodeClaim CRD
/// accepts and that admit the same label values.
#[test]
fn negative_integer_bounds_become_non_negative_ones() {
    let requirements = Requirements::new()
        .with(Requirement::gt("example.com/gen", -1))
        .with(Requirement::gt("example.com/cpus", -5))
        .with(Requirement::lt("example.com/slots", -1))
        .with(Requirement::lt("example.com/zero", 0));
    assert_eq!(
        serde_json::to_value(api_requirements(&requirements)).unwrap(),
        json!([
            {"key": "example.com/cpus", "operator": "Gte", "values": ["0"]},
            {"key": "example.com/gen", "operator": "Gte", "values": ["0"]},
            {"key": "example.com/slots", "operator": "Lt", "values": ["0"]},
            {"key": "example.com/zero", "operator": "Lt", "values": ["0"]},
        ])
    );
}

#[test]
fn builds_a_claim_from_a_pool_and_a_decision() {
    let pool: NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "general"},
        "spec": {"template": {
            "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
            "spec": {
                "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "nc"},
                "requirements": [],
                "taints": [{"key": "dedicated", "value": "a", "effect": "NoSchedule"}],
                "expireAfter": "24h",
                "terminationGracePeriod": "1h",
            }
        }},
    }))
    .unwrap();
    let new = NewClaim {
        node_pool: "general".into(),
        requirements: Requirements::new()
            .with(Requirement::in_(
                "node.kubernetes.io/instance-type",
                ["b", "a"],
            ))
            .with(Requirement::gt("example.com/gen", 3))
            .with(Requirement::exists("example.com/any")),
        requests: Resources::new(1500, 2 << 30, 3),
        instance_type_options: vec!["a".into(), "b".into()],
        cheapest_price: 0.125,
        cheapest_offering: scheduling::ChosenOffering {
            instance_type: "a".into(),
            zone: "z".into(),
            capacity_type: "on-demand".into(),
            price: 0.125,
        },
        pods: vec![0, 1, 2],
    };
    let extra = BTreeMap::from([("run".to_owned(), "t1".to_owned())]);
    let claim = claim_for(&new, &pool, &extra);
    assert_eq!(claim.metadata.generate_name.as_deref(), Some("general-"));
    let labels = claim.labels();
    assert_eq!(labels["karpenter.sh/nodepool"], "general");
    assert_eq!(labels["team"], "a");
    assert_eq!(labels["run"], "t1");
    assert_eq!(
        labels["capstan.dev/nodeclass"], "nc",
        "Karpenter's node class label"
    );
    assert_eq!(claim.annotations()[PRICE_ANNOTATION], "0.125");
    assert_eq!(claim.annotations()["note"], "x");
    assert_eq!(claim.spec.taints.len(), 1);
    assert_eq!(claim.spec.expire_after, "24h");
    assert_eq!(claim.spec.termination_grace_period.as_deref(), Some("1h"));
    let requests = &claim.spec.resources.as_ref().unwrap().requests;
    assert_eq!(requests["cpu"].as_str(), "1500m");
    assert_eq!(requests["memory"].as_str(), (2i64 << 30).to_string());
    assert_eq!(requests["pods"].as_str(), "3");
    let reqs = serde_json::to_value(&claim.spec.requirements).unwrap();
    assert_eq!(
        reqs,
        json!([
            {"key": "example.com/any", "operator": "Exists"},
            {"key": "example.com/gen", "operator": "Gt", "values": ["3"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["a", "b"]},
        ])
    );
}

/// Static pools and pools whose `Ready` is `False` take no part in provisioning; a pool whose
/// status is not written yet does.
#[test]
fn static_and_unready_pools_are_left_out() {
    let pool = |replicas: Option<i64>, ready: Option<&str>| -> NodePool {
        let mut value = json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "p"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "nc"},
                "requirements": [],
            }}},
        });
        if let Some(n) = replicas {
            value["spec"]["replicas"] = json!(n);
        }
        if let Some(status) = ready {
            value["status"] = json!({"conditions": [{
                "type": "Ready", "status": status, "reason": "NodeClassNotReady",
                "message": "NodeClass nc is not ready", "lastTransitionTime": "2026-01-01T00:00:00Z",
            }]});
        }
        serde_json::from_value(value).unwrap()
    };
    assert_eq!(not_for_dynamic_provisioning(&pool(None, None)), None);
    assert!(
        not_for_dynamic_provisioning(&pool(Some(3), None))
            .is_some_and(|why| why.contains("static")),
        "a static pool"
    );
    assert_eq!(
        not_for_dynamic_provisioning(&pool(None, Some("False"))).as_deref(),
        Some("nodepool is not ready: NodeClass nc is not ready")
    );
    assert_eq!(
        not_for_dynamic_provisioning(&pool(None, Some("True"))),
        None
    );
    assert_eq!(
        not_for_dynamic_provisioning(&pool(None, Some("Unknown"))),
        None
    );
}

/// A source for pools this test has none of.
struct NoTypes;

impl crate::rules::snapshot::InstanceTypeSource for NoTypes {
    async fn instance_types(
        &self,
        _pool: &NodePool,
        _classes: &std::collections::HashMap<String, std::sync::Arc<crate::api::NodeClass>>,
    ) -> Result<Arc<[scheduling::InstanceType]>, ProvisionError> {
        Err(ProvisionError::Pool("no types in this test".to_owned()))
    }
}

#[tokio::test]
async fn a_nodes_csi_limits_and_the_volumes_of_its_pods_reach_the_simulation() {
    fn object<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).unwrap())
    }
    let with_claim = |name: &str, node: Option<&str>, claim: &str| -> Pod {
        let mut pod = pending_pod();
        pod.metadata.name = Some(name.to_owned());
        let spec = pod.spec.as_mut().unwrap();
        spec.node_name = node.map(str::to_owned);
        spec.volumes = Some(vec![
            serde_json::from_value(
                json!({"name": "data", "persistentVolumeClaim": {"claimName": claim}}),
            )
            .unwrap(),
        ]);
        pod
    };
    let csi_pv = |name: &str| -> Arc<k8s_openapi::api::core::v1::PersistentVolume> {
        object(json!({
            "metadata": {"name": name},
            "spec": {"csi": {"driver": "ebs.csi.example.com", "volumeHandle": name}},
        }))
    };
    let view = crate::state::View {
        nodes: vec![object(json!({"metadata": {"name": "n1"}}))],
        pods: vec![
            Arc::new(with_claim("first", Some("n1"), "one")),
            Arc::new(with_claim("second", None, "two")),
        ],
        volume_claims: vec![
            object(
                json!({"metadata": {"name": "one", "namespace": "default"}, "spec": {"volumeName": "pv-1"}}),
            ),
            object(
                json!({"metadata": {"name": "two", "namespace": "default"}, "spec": {"volumeName": "pv-2"}}),
            ),
        ],
        volumes: vec![csi_pv("pv-1"), csi_pv("pv-2")],
        csi_nodes: vec![object(json!({
            "metadata": {"name": "n1"},
            "spec": {"drivers": [{"name": "ebs.csi.example.com", "nodeID": "i-1", "allocatable": {"count": 1}}]},
        }))],
        ..crate::state::View::default()
    };
    let snapshot = Snapshot::from_view(&view, &crate::rules::selector::Selector::default());
    let built = snapshot.input_from(&NoTypes).await;
    let node = &built.input.existing_nodes[0];
    assert_eq!(node.volume_limits["ebs.csi.example.com"], 1);
    assert_eq!(node.pods[0].csi_volumes[0].claim, "default/one");
    assert_eq!(built.input.pods[0].csi_volumes[0].claim, "default/two");
    // The node is full for that driver: the pending pod is not placed on it.
    let result = scheduling::solve(&built.input);
    assert!(result.existing_placements.is_empty(), "{result:?}");
}

#[tokio::test]
async fn a_pod_asking_for_devices_is_rejected_with_the_reason_and_others_are_not() {
    let mut dra = pending_pod();
    dra.metadata.name = Some("gpu".to_owned());
    dra.spec.as_mut().unwrap().resource_claims = Some(vec![
        serde_json::from_value(json!({"name": "gpu", "resourceClaimTemplateName": "gpu-claim"}))
            .unwrap(),
    ]);
    let mut plain = pending_pod();
    plain.metadata.name = Some("plain".to_owned());
    let view = crate::state::View {
        pods: vec![Arc::new(dra), Arc::new(plain)],
        ..crate::state::View::default()
    };
    let snapshot = Snapshot::from_view(&view, &crate::rules::selector::Selector::default());
    let built = snapshot.input_from(&NoTypes).await;
    let names: Vec<_> = built.input.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["plain"]);
    let [(i, why)] = built.rejected.as_slice() else {
        panic!("one rejected pod: {:?}", built.rejected)
    };
    assert_eq!(snapshot.pending[*i].metadata.name.as_deref(), Some("gpu"));
    assert!(why.contains("Dynamic Resource Allocation"), "{why}");
}
