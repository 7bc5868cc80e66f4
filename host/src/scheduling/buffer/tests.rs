use super::*;
use crate::api::Quantity;
use crate::api::capacitybuffer::{CapacityBufferSpec, CapacityBufferStatus, LocalObjectRef};
use crate::api::shared::Condition;
use crate::rules::pods::is_provisionable;
use serde_json::json;

fn limits(pairs: &[(&str, &str)]) -> ResourceList {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity::new(*v)))
        .collect()
}

fn one_cpu() -> Resources {
    Resources::new(1000, 512 << 20, 0)
}

#[test]
fn replicas_alone() {
    assert_eq!(
        desired_replicas(Some(3), None, None, &one_cpu(), None).unwrap(),
        3
    );
    assert_eq!(
        desired_replicas(None, None, None, &one_cpu(), None).unwrap(),
        0
    );
}

#[test]
fn percentage_rounds_up_to_at_least_one() {
    assert_eq!(percentage_replicas(10, 20), 2);
    assert_eq!(percentage_replicas(5, 20), 1);
    assert_eq!(percentage_replicas(20, 20), 4);
    assert_eq!(percentage_replicas(11, 20), 3);
    assert_eq!(percentage_replicas(1, 1), 1);
    assert_eq!(percentage_replicas(3, 0), 0);
    assert_eq!(percentage_replicas(0, 50), 0);
}

#[test]
fn replicas_and_percentage_take_the_larger() {
    let got = desired_replicas(Some(3), Some(20), None, &one_cpu(), Some(10)).unwrap();
    assert_eq!(got, 3);
    let got = desired_replicas(Some(1), Some(50), None, &one_cpu(), Some(10)).unwrap();
    assert_eq!(got, 5);
    // Percentage of a workload with no replicas counts for nothing.
    let got = desired_replicas(None, Some(50), None, &one_cpu(), Some(0)).unwrap();
    assert_eq!(got, 0);
    // Percentage applies only to a scalableRef.
    let got = desired_replicas(None, Some(50), None, &one_cpu(), None).unwrap();
    assert_eq!(got, 0);
}

#[test]
fn limits_bound_or_decide_alone() {
    let two_cpu = limits(&[("cpu", "2")]);
    assert_eq!(
        desired_replicas(None, None, Some(&two_cpu), &one_cpu(), None).unwrap(),
        2
    );
    assert_eq!(
        desired_replicas(Some(10), None, Some(&two_cpu), &one_cpu(), None).unwrap(),
        2
    );
    assert_eq!(
        desired_replicas(Some(1), None, Some(&two_cpu), &one_cpu(), None).unwrap(),
        1
    );
    // The tightest resource wins: 5 CPUs fit 5, 1Gi fits 2 of 512Mi.
    let mixed = limits(&[("cpu", "5"), ("memory", "1Gi")]);
    assert_eq!(
        desired_replicas(None, None, Some(&mixed), &one_cpu(), None).unwrap(),
        2
    );
    // Floors: 2500m fits two 1-CPU pods.
    let frac = limits(&[("cpu", "2500m")]);
    assert_eq!(limit_replicas(&frac, &one_cpu()).unwrap(), Some(2));
    // A limit on a resource the pod does not request bounds nothing.
    let gpu = limits(&[("nvidia.com/gpu", "1")]);
    assert_eq!(limit_replicas(&gpu, &one_cpu()).unwrap(), None);
    assert_eq!(
        desired_replicas(Some(4), None, Some(&gpu), &one_cpu(), None).unwrap(),
        4
    );
    assert!(limit_replicas(&limits(&[("cpu", "lots")]), &one_cpu()).is_err());
}

fn template() -> PodTemplateSpec {
    serde_json::from_value(json!({
        "metadata": {"labels": {"app": "buf"}},
        "spec": {
            "nodeName": "somewhere",
            "priorityClassName": "high",
            "containers": [{
                "name": "pause", "image": "pause",
                "resources": {"requests": {"cpu": "1"}},
                "volumeMounts": [
                    {"name": "data", "mountPath": "/data"},
                    {"name": "config", "mountPath": "/config"},
                    {"name": "scratch", "mountPath": "/scratch"}
                ]
            }],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "config", "configMap": {"name": "config"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
            ]
        }
    }))
    .unwrap()
}

#[test]
fn virtual_pods_are_marked_unscheduled_placeholders() {
    let pods = virtual_pods("ns", "buf", "uid", 3, &template());
    assert_eq!(pods.len(), 3);
    let names: Vec<_> = pods
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "capacity-buffer-buf-1",
            "capacity-buffer-buf-2",
            "capacity-buffer-buf-3"
        ]
    );
    let uids: std::collections::HashSet<_> = pods
        .iter()
        .map(|p| p.metadata.uid.clone().unwrap())
        .collect();
    assert_eq!(uids.len(), 3);
    let pod = &pods[0];
    assert!(is_virtual(pod));
    assert_eq!(buffer_of(pod), Some(("ns".to_owned(), "buf".to_owned())));
    assert_eq!(pod.metadata.labels.as_ref().unwrap()["app"], "buf");
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.node_name, None);
    assert_eq!(spec.priority, Some(i32::MIN));
    let volumes: Vec<_> = spec
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(volumes, ["config"]);
    let mounts: Vec<_> = spec.containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(mounts, ["config"]);
    // The provisioner takes it for a pod kube-scheduler gave up on.
    assert!(is_provisionable(pod));
    assert!(virtual_pods("ns", "buf", "uid", 0, &template()).is_empty());
}

#[test]
fn a_real_pod_is_not_virtual() {
    let pod = Pod::default();
    assert!(!is_virtual(&pod));
    assert_eq!(buffer_of(&pod), None);
}

fn buffer(resolved: bool, replicas: i32) -> CapacityBuffer {
    let mut b = CapacityBuffer::new(
        "buf",
        CapacityBufferSpec {
            pod_template_ref: Some(LocalObjectRef { name: "t".into() }),
            replicas: Some(replicas),
            ..CapacityBufferSpec::default()
        },
    );
    b.status = Some(CapacityBufferStatus {
        replicas: Some(replicas),
        conditions: vec![Condition {
            type_: READY_FOR_PROVISIONING.into(),
            status: if resolved {
                ConditionStatus::True
            } else {
                ConditionStatus::False
            },
            observed_generation: None,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ),
            reason: None,
            message: None,
        }],
        ..CapacityBufferStatus::default()
    });
    b
}

#[test]
fn provisioning_condition_follows_where_the_pods_went() {
    let fits = Placed {
        existing: 2,
        new: 0,
        failed: 0,
    };
    let (status, reason, _) = provisioning_condition(&buffer(true, 2), Some(&fits)).unwrap();
    assert_eq!(
        (status, reason),
        (ConditionStatus::True, FITS_EXISTING_CAPACITY)
    );
    let new = Placed {
        existing: 1,
        new: 1,
        failed: 0,
    };
    let (status, reason, message) = provisioning_condition(&buffer(true, 2), Some(&new)).unwrap();
    assert_eq!(
        (status, reason),
        (ConditionStatus::False, REQUIRES_NEW_CAPACITY)
    );
    assert_eq!(message, "1/2 virtual pods required new capacity, 0 failed");
    let failed = Placed {
        existing: 1,
        new: 0,
        failed: 1,
    };
    let (_, reason, _) = provisioning_condition(&buffer(true, 2), Some(&failed)).unwrap();
    assert_eq!(reason, REQUIRES_NEW_CAPACITY);
    // A pass that saw only part of the pods (or none) decides nothing.
    let partial = Placed {
        existing: 1,
        new: 0,
        failed: 0,
    };
    assert_eq!(
        provisioning_condition(&buffer(true, 2), Some(&partial)),
        None
    );
    assert_eq!(provisioning_condition(&buffer(true, 2), None), None);
    let (_, reason, _) = provisioning_condition(&buffer(false, 2), None).unwrap();
    assert_eq!(reason, NOT_READY_FOR_PROVISIONING);
    let (_, reason, _) = provisioning_condition(&buffer(true, 0), None).unwrap();
    assert_eq!(reason, BUFFER_EMPTY);
    assert!(ready(&buffer(true, 2)));
    assert!(!ready(&buffer(true, 0)));
    assert!(!ready(&buffer(false, 2)));
}

#[test]
fn real_pods_take_the_room_before_buffer_pods() {
    use crate::scheduling::{self, ExistingNode, Pod as SimPod, SchedulingInput, Target};
    // One free CPU on the node; the buffer pod comes first in the input and is larger, yet the
    // real pod gets the room and the buffer pod is left without.
    let node = ExistingNode {
        name: "n1".into(),
        allocatable: Resources::new(2000, 8 << 30, 110),
        used: Resources::new(1000, 0, 1),
        initialized: true,
        ..ExistingNode::default()
    };
    let mut placeholder = SimPod::new(
        "ns",
        "capacity-buffer-b-1",
        Resources::new(1000, 1 << 20, 0),
    );
    placeholder.buffer = true;
    let real = SimPod::new("ns", "web", Resources::new(900, 1 << 20, 0));
    let input = SchedulingInput {
        pods: vec![placeholder, real],
        existing_nodes: vec![node],
        ..SchedulingInput::default()
    };
    let result = scheduling::solve(&input);
    assert_eq!(
        result.existing_placements,
        vec![(1, Target::Node("n1".into()))]
    );
    assert_eq!(result.unschedulable.len(), 1);
    assert_eq!(result.unschedulable[0].0, 0);
}
