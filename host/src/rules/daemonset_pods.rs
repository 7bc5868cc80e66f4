//! The pod a DaemonSet will run on a new node, as the scheduler must count it.
//!
//! A DaemonSet's template is not what lands on the node: admission fills in what the template
//! leaves out (a `LimitRange`'s default limits and requests, the API server's defaulting of
//! requests from limits). So, as Karpenter does, the newest pod the DaemonSet already runs is the
//! model when there is one; its node affinity, which the DaemonSet controller rewrote to pin it to
//! its node, is put back to the template's. Without a running pod the template stands in, with
//! requests defaulted from limits the way the API server defaults a pod's.

use std::collections::HashMap;

use crate::rules::pods::daemonset_of;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Affinity, Container, Pod, PodSpec};
use kube::ResourceExt;

/// The pods every DaemonSet of `daemonsets` would run on a new node. `pods` are the cluster's
/// pods (any namespace); one pass over them.
pub fn daemonset_pods<'a>(
    daemonsets: impl IntoIterator<Item = &'a DaemonSet>,
    pods: impl IntoIterator<Item = &'a Pod>,
) -> Vec<Pod> {
    let mut newest: HashMap<&str, &Pod> = HashMap::new();
    for pod in pods {
        let Some(owner) = daemonset_of(pod).filter(|o| o.controller == Some(true)) else {
            continue;
        };
        let slot = newest.entry(owner.uid.as_str()).or_insert(pod);
        if key(pod) > key(slot) {
            *slot = pod;
        }
    }
    daemonsets
        .into_iter()
        .filter_map(|ds| {
            let running = ds
                .metadata
                .uid
                .as_deref()
                .and_then(|uid| newest.get(uid).copied())
                .filter(|p| p.namespace() == ds.namespace());
            daemonset_pod(ds, running)
        })
        .collect()
}

fn key(
    pod: &Pod,
) -> (
    Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    String,
) {
    (pod.creation_timestamp(), pod.name_any())
}

/// The pod `ds` would run on a new node, modelled on `running`, the newest pod it runs, if any.
fn daemonset_pod(ds: &DaemonSet, running: Option<&Pod>) -> Option<Pod> {
    let template = ds.spec.as_ref()?.template.clone();
    let mut spec = match running.and_then(|p| p.spec.clone()) {
        Some(mut spec) => {
            spec.affinity = template_affinity(spec.affinity.take(), template.spec.as_ref());
            spec
        }
        None => {
            let mut spec = template.spec.clone().unwrap_or_default();
            spec.containers.iter_mut().for_each(requests_from_limits);
            spec.init_containers
                .iter_mut()
                .flatten()
                .for_each(requests_from_limits);
            spec
        }
    };
    spec.node_name = None;
    let mut metadata = template.metadata.unwrap_or_default();
    metadata.namespace = ds.namespace();
    metadata.name = Some(ds.name_any());
    Some(Pod {
        metadata,
        spec: Some(spec),
        status: None,
    })
}

/// A running pod's affinity with its node affinity put back to the template's (the DaemonSet
/// controller replaces the required terms with its node's name).
fn template_affinity(running: Option<Affinity>, template: Option<&PodSpec>) -> Option<Affinity> {
    let wanted = template
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.clone());
    let mut affinity = running.unwrap_or_default();
    affinity.node_affinity = wanted;
    let empty = affinity.node_affinity.is_none()
        && affinity.pod_affinity.is_none()
        && affinity.pod_anti_affinity.is_none();
    (!empty).then_some(affinity)
}

/// The API server's defaulting of a container's requests from its limits, for the resources
/// that have a limit and no request.
fn requests_from_limits(container: &mut Container) {
    let Some(resources) = container.resources.as_mut() else {
        return;
    };
    let Some(limits) = resources.limits.as_ref() else {
        return;
    };
    let requests = resources.requests.get_or_insert_with(Default::default);
    for (name, quantity) in limits {
        requests
            .entry(name.clone())
            .or_insert_with(|| quantity.clone());
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn daemonset(affinity: serde_json::Value) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "ds", "namespace": "kube-system", "uid": "ds-uid"},
            "spec": {
                "selector": {"matchLabels": {"app": "ds"}},
                "template": {
                    "metadata": {"labels": {"app": "ds"}},
                    "spec": {
                        "affinity": affinity,
                        "containers": [{"name": "c", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "500m"}}}],
                        "initContainers": [{"name": "i", "resources": {"limits": {"memory": "2Gi"}}}],
                    },
                },
            },
        }))
        .unwrap()
    }

    fn pod(name: &str, created: &str, owner_uid: &str, cpu: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": name, "namespace": "kube-system", "creationTimestamp": created,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": owner_uid, "controller": true}],
            },
            "spec": {
                "nodeName": "n1",
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}},
                "containers": [{"name": "c", "resources": {"limits": {"cpu": cpu}, "requests": {"cpu": cpu, "memory": "3Gi"}}}],
            },
        }))
        .unwrap()
    }

    fn requests(pod: &Pod, container: usize) -> Vec<(String, String)> {
        pod.spec.as_ref().unwrap().containers[container]
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect()
    }

    #[test]
    fn without_a_running_pod_the_template_has_requests_defaulted_from_limits() {
        let got = daemonset_pods([&daemonset(json!(null))], []).remove(0);
        assert_eq!(
            requests(&got, 0),
            [
                ("cpu".to_owned(), "500m".to_owned()),
                ("memory".to_owned(), "1Gi".to_owned())
            ]
        );
        let init = &got.spec.as_ref().unwrap().init_containers.as_ref().unwrap()[0];
        let init = init.resources.as_ref().unwrap().requests.as_ref().unwrap();
        assert_eq!(init["memory"].0, "2Gi");
        assert_eq!(got.metadata.name.as_deref(), Some("ds"));
        assert_eq!(got.labels()["app"], "ds");
    }

    #[test]
    fn the_newest_running_pod_is_the_model_with_the_templates_node_affinity() {
        let affinity = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]}]}}});
        let ds = daemonset(affinity.clone());
        let pods = [
            pod("old", "2026-01-01T00:00:00Z", "ds-uid", "1"),
            pod("new", "2026-01-02T00:00:00Z", "ds-uid", "3"),
            pod("other", "2026-01-03T00:00:00Z", "another-uid", "7"),
        ];
        let got = daemonset_pods([&ds], &pods).remove(0);
        assert_eq!(
            requests(&got, 0),
            [
                ("cpu".to_owned(), "3".to_owned()),
                ("memory".to_owned(), "3Gi".to_owned())
            ]
        );
        let spec = got.spec.as_ref().unwrap();
        assert_eq!(spec.node_name, None);
        assert_eq!(
            serde_json::to_value(spec.affinity.as_ref().unwrap()).unwrap(),
            affinity
        );
    }

    #[test]
    fn a_running_pods_node_pinning_goes_when_the_template_has_no_node_affinity() {
        let ds = daemonset(json!(null));
        let pods = [pod("p", "2026-01-01T00:00:00Z", "ds-uid", "1")];
        let got = daemonset_pods([&ds], &pods).remove(0);
        assert!(got.spec.as_ref().unwrap().affinity.is_none());
    }
}
