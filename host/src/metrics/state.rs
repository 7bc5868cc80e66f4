//! Gauges of what the cluster holds, as Karpenter's metrics controllers report them: per node
//! (`karpenter_nodes_allocatable`, `..._total_pod_requests`, `..._total_pod_limits`,
//! `..._total_daemon_requests`, `..._total_daemon_limits`, `..._system_overhead`,
//! `..._current_lifetime_seconds`), per pool (`karpenter_nodepools_usage`, `..._limit`,
//! `..._allowed_disruptions`), per pod (`karpenter_pods_state`), the cluster
//! (`karpenter_cluster_utilization_percent`, `karpenter_cluster_state_node_count`,
//! `karpenter_cluster_state_synced`).
//!
//! [`samples`] computes them from one [`View`] of the cluster state (pure); [`State::replace`]
//! swaps every family for the new samples at once, so a node, pool or pod that is gone leaves
//! no series behind.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;

use super::labels::{self, Labels, label, labels};
use super::lifecycle::seconds_since;
use super::{Gauges, Registrar};
use crate::api::ResourceList;
use crate::api::labels::{ARCH, CAPACITY_TYPE, INSTANCE_TYPE, NODEPOOL, ZONE};
use crate::rules::pods::owned_by_daemonset;
use crate::scheduling::convert::{is_terminal, pod_requests};
use crate::scheduling::resources::Resources;
use crate::state::View;

/// One family of cluster gauges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Allocatable,
    PodRequests,
    PodLimits,
    DaemonRequests,
    DaemonLimits,
    SystemOverhead,
    Lifetime,
    Utilization,
    PoolUsage,
    PoolLimit,
    AllowedDisruptions,
    NodeCount,
    Synced,
    PodState,
}

/// Every kind: its name under `karpenter_` and help.
const KINDS: [(Kind, &str, &str); 14] = [
    (
        Kind::Allocatable,
        "nodes_allocatable",
        "Node allocatable, by node, its well-known labels and resource type",
    ),
    (
        Kind::PodRequests,
        "nodes_total_pod_requests",
        "Node total pod requests, by node, its well-known labels and resource type",
    ),
    (
        Kind::PodLimits,
        "nodes_total_pod_limits",
        "Node total pod limits, by node, its well-known labels and resource type",
    ),
    (
        Kind::DaemonRequests,
        "nodes_total_daemon_requests",
        "Node total DaemonSet pod requests, by node, its well-known labels and resource type",
    ),
    (
        Kind::DaemonLimits,
        "nodes_total_daemon_limits",
        "Node total DaemonSet pod limits, by node, its well-known labels and resource type",
    ),
    (
        Kind::SystemOverhead,
        "nodes_system_overhead",
        "Node system daemon overhead (capacity minus allocatable), by node, its well-known labels and resource type",
    ),
    (
        Kind::Lifetime,
        "nodes_current_lifetime_seconds",
        "Node age in seconds, by node and its well-known labels",
    ),
    (
        Kind::Utilization,
        "cluster_utilization_percent",
        "Utilization of allocatable resources by pod requests, by resource type",
    ),
    (
        Kind::PoolUsage,
        "nodepools_usage",
        "The amount of resources provisioned for a nodepool, by resource type and nodepool",
    ),
    (
        Kind::PoolLimit,
        "nodepools_limit",
        "Limits of the nodepool on the resources it provisions, by resource type and nodepool",
    ),
    (
        Kind::AllowedDisruptions,
        "nodepools_allowed_disruptions",
        "The number of nodes of a NodePool that may start disrupting now, by nodepool and reason",
    ),
    (
        Kind::NodeCount,
        "cluster_state_node_count",
        "Current count of nodes in cluster state",
    ),
    (
        Kind::Synced,
        "cluster_state_synced",
        "1 when the cluster state caches are synced, else 0",
    ),
    (
        Kind::PodState,
        "pods_state",
        "Pod state (1 per pod), by name, namespace, owner, node, scheduling, the node's labels, phase, readiness and whether the node is managed",
    ),
];

/// One gauge value.
pub type Sample = (Kind, Labels, f64);

/// The cluster gauges.
#[derive(Debug)]
pub struct State {
    families: HashMap<Kind, Gauges>,
}

impl State {
    /// Registers the families under `registry` (prefix `karpenter`).
    pub fn register(registry: &mut Registrar<'_>) -> Self {
        let mut families = HashMap::new();
        for (kind, name, help) in KINDS {
            let family = Gauges::default();
            registry.register(name, help, family.clone());
            families.insert(kind, family);
        }
        Self { families }
    }

    /// Replaces every family by `samples` (call inside [`super::Metrics::exclusive`]).
    pub fn replace(&self, samples: &[Sample]) {
        for family in self.families.values() {
            family.clear();
        }
        for (kind, labels, value) in samples {
            if let Some(family) = self.families.get(kind) {
                family.get_or_create(labels).set(*value);
            }
        }
    }
}

/// The metric names of the cluster gauges (for the docs and tests).
pub fn names() -> impl Iterator<Item = &'static str> {
    KINDS.iter().map(|(_, name, _)| *name)
}

/// A resource list (name, quantity) as a [`Resources`] vector (unparseable entries skipped).
fn parse<'a>(list: impl IntoIterator<Item = (&'a str, &'a str)>) -> Resources {
    let mut out = Resources::default();
    for (name, quantity) in list {
        if let Ok(one) = Resources::parse([(name, quantity)]) {
            out.add(&one);
        }
    }
    out
}

/// A Kubernetes resource list as a [`Resources`] vector.
fn parse_k8s(list: Option<&BTreeMap<String, Quantity>>) -> Resources {
    parse(
        list.into_iter()
            .flatten()
            .map(|(k, q)| (k.as_str(), q.0.as_str())),
    )
}

/// A resource list of the `karpenter.sh` API as a [`Resources`] vector.
fn parse_api(list: Option<&ResourceList>) -> Resources {
    parse(
        list.into_iter()
            .flatten()
            .map(|(k, q)| (k.as_str(), q.as_str())),
    )
}

/// What a pod's containers may use at most (the sum of their limits, plus pod overhead).
fn pod_limits(pod: &Pod) -> Resources {
    let Some(spec) = pod.spec.as_ref() else {
        return Resources::default();
    };
    let mut total = Resources::default();
    for c in &spec.containers {
        total.add(&parse_k8s(
            c.resources.as_ref().and_then(|r| r.limits.as_ref()),
        ));
    }
    total.add(&parse_k8s(spec.overhead.as_ref()));
    total
}

fn condition_true(pod: &Pod, type_: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

/// Pushes one sample per resource of `resources`, with `base` labels plus `resource_type`.
fn per_resource(out: &mut Vec<Sample>, kind: Kind, base: &Labels, resources: &Resources) {
    for (name, value) in resources.iter() {
        let mut l = base.clone();
        l.push(("resource_type".to_owned(), labels::resource_type(name)));
        out.push((kind, l, labels::resource_value(name, value)));
    }
}

fn node_base(node: &Node, managed: bool) -> Labels {
    let mut l = vec![("node_name".to_owned(), node.name_any())];
    l.extend(labels::node_labels(node.labels()));
    let phase = node
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    l.push(("phase".to_owned(), phase));
    l.push(("managed".to_owned(), managed.to_string()));
    l
}

/// The gauges of `view` (`allowed_disruptions`: per pool and reason, computed by the caller
/// from the pools' budgets).
pub fn samples(view: &View, allowed_disruptions: &[(String, String, usize)]) -> Vec<Sample> {
    let mut out = Vec::new();
    let managed_nodes: HashSet<&str> = view
        .claims
        .iter()
        .filter_map(|c| c.status.as_ref()?.node_name.as_deref())
        .collect();
    let mut requests: HashMap<&str, (Resources, Resources, Resources, Resources)> = HashMap::new();
    for pod in &view.pods {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        if is_terminal(pod) {
            continue;
        }
        let entry = requests.entry(node).or_default();
        let req = pod_requests(pod).unwrap_or_default();
        let lim = pod_limits(pod);
        if owned_by_daemonset(pod) {
            entry.2.add(&req);
            entry.3.add(&lim);
        }
        entry.0.add(&req);
        entry.1.add(&lim);
    }
    let mut cluster_allocatable = Resources::default();
    let mut cluster_requested = Resources::default();
    for node in &view.nodes {
        let name = node.name_any();
        let base = node_base(node, managed_nodes.contains(name.as_str()));
        let status = node.status.as_ref();
        let allocatable = parse_k8s(status.and_then(|s| s.allocatable.as_ref()));
        let capacity = parse_k8s(status.and_then(|s| s.capacity.as_ref()));
        per_resource(&mut out, Kind::Allocatable, &base, &allocatable);
        per_resource(
            &mut out,
            Kind::SystemOverhead,
            &base,
            &capacity.minus(&allocatable),
        );
        let (req, lim, dreq, dlim) = requests.remove(name.as_str()).unwrap_or_default();
        per_resource(&mut out, Kind::PodRequests, &base, &req);
        per_resource(&mut out, Kind::PodLimits, &base, &lim);
        per_resource(&mut out, Kind::DaemonRequests, &base, &dreq);
        per_resource(&mut out, Kind::DaemonLimits, &base, &dlim);
        if let Some(created) = node.metadata.creation_timestamp.as_ref() {
            out.push((Kind::Lifetime, base.clone(), seconds_since(created)));
        }
        cluster_allocatable.add(&allocatable);
        cluster_requested.add(&req);
    }
    for (name, allocatable) in cluster_allocatable.iter() {
        if allocatable > 0 {
            #[allow(clippy::cast_precision_loss)]
            let percent = 100.0 * cluster_requested.get(name) as f64 / allocatable as f64;
            out.push((
                Kind::Utilization,
                labels(&[("resource_type", &labels::resource_type(name))]),
                percent,
            ));
        }
    }
    for pool in &view.pools {
        let name = pool.name_any();
        let status = pool.status.as_ref().map(|s| &s.resources);
        for (kind, list) in [
            (Kind::PoolUsage, status),
            (Kind::PoolLimit, pool.spec.limits.as_ref()),
        ] {
            for (resource, value) in parse_api(list).iter() {
                out.push((
                    kind,
                    labels(&[
                        ("resource_type", &labels::resource_type(resource)),
                        ("nodepool", &name),
                    ]),
                    labels::resource_value(resource, value),
                ));
            }
        }
    }
    for (pool, reason, allowed) in allowed_disruptions {
        #[allow(clippy::cast_precision_loss)]
        out.push((
            Kind::AllowedDisruptions,
            labels(&[("nodepool", pool), ("reason", &labels::reason(reason))]),
            *allowed as f64,
        ));
    }
    #[allow(clippy::cast_precision_loss)]
    out.push((Kind::NodeCount, Vec::new(), view.nodes.len() as f64));
    out.push((Kind::Synced, Vec::new(), 1.0));
    let nodes: HashMap<String, &Node> = view
        .nodes
        .iter()
        .map(|n| (n.name_any(), n.as_ref()))
        .collect();
    for pod in &view.pods {
        out.push((Kind::PodState, pod_state(pod, &nodes, &managed_nodes), 1.0));
    }
    out
}

/// The labels of one pod's `karpenter_pods_state` series.
fn pod_state(pod: &Pod, nodes: &HashMap<String, &Node>, managed: &HashSet<&str>) -> Labels {
    let node_name = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let node_labels = nodes.get(&node_name).map(|n| n.labels());
    let owner = pod
        .owner_references()
        .first()
        .map(|o| format!("{}/{}", o.kind, o.name))
        .unwrap_or_default();
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    vec![
        ("name".to_owned(), pod.name_any()),
        ("namespace".to_owned(), pod.namespace().unwrap_or_default()),
        ("owner".to_owned(), owner),
        ("node".to_owned(), node_name.clone()),
        (
            "scheduled".to_owned(),
            condition_true(pod, "PodScheduled").to_string(),
        ),
        (
            "nodepool".to_owned(),
            label(node_labels, NODEPOOL).to_owned(),
        ),
        ("zone".to_owned(), label(node_labels, ZONE).to_owned()),
        ("arch".to_owned(), label(node_labels, ARCH).to_owned()),
        (
            "capacity_type".to_owned(),
            label(node_labels, CAPACITY_TYPE).to_owned(),
        ),
        (
            "instance_type".to_owned(),
            label(node_labels, INSTANCE_TYPE).to_owned(),
        ),
        ("phase".to_owned(), phase),
        ("ready".to_owned(), condition_true(pod, "Ready").to_string()),
        (
            "managed".to_owned(),
            managed.contains(node_name.as_str()).to_string(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::super::Metrics;
    use super::*;

    fn node(name: &str, pool: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {NODEPOOL: pool, ZONE: "z1"}, "creationTimestamp": "2026-01-01T00:00:00Z"},
                "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                           "allocatable": {"cpu": "3500m", "memory": "8Gi", "pods": "110"}},
            }))
            .unwrap(),
        )
    }

    fn pod(name: &str, node: &str, daemon: bool) -> Arc<Pod> {
        let owners = if daemon {
            json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "x"}])
        } else {
            json!([])
        };
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "ownerReferences": owners},
                "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {
                    "requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1"}}}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .unwrap(),
        )
    }

    fn pool(name: &str) -> Arc<crate::api::NodePool> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                "metadata": {"name": name},
                "spec": {"template": {"spec": {"nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "c"}, "requirements": []}},
                         "limits": {"cpu": "100"}},
                "status": {"resources": {"cpu": "4", "nodes": "1"}},
            }))
            .unwrap(),
        )
    }

    fn value(text: &str, prefix: &str) -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn node_pool_and_pod_gauges_and_no_stale_series() {
        let m = Metrics::new();
        let view = View {
            nodes: vec![node("n1", "p"), node("n2", "p")],
            pods: vec![pod("a", "n1", false), pod("d", "n1", true)],
            pools: vec![pool("p")],
            ..View::default()
        };
        let allowed = vec![("p".to_owned(), "Drifted".to_owned(), 1)];
        m.exclusive(|| m.state.replace(&samples(&view, &allowed)));
        let text = m.render().unwrap();
        let n1 = r#"node_name="n1",nodepool="p",zone="z1",region="",instance_type="",arch="",os="",capacity_type="",windows_build="",phase="",managed="false""#;
        for line in [
            format!(r#"karpenter_nodes_allocatable{{{n1},resource_type="cpu"}} 3.5"#),
            format!(r#"karpenter_nodes_system_overhead{{{n1},resource_type="cpu"}} 0.5"#),
            format!(r#"karpenter_nodes_total_pod_requests{{{n1},resource_type="cpu"}} 1.0"#),
            format!(r#"karpenter_nodes_total_pod_limits{{{n1},resource_type="cpu"}} 2.0"#),
            format!(r#"karpenter_nodes_total_daemon_requests{{{n1},resource_type="memory"}} 1073741824.0"#),
            r#"karpenter_nodepools_usage{resource_type="cpu",nodepool="p"} 4.0"#.to_owned(),
            r#"karpenter_nodepools_limit{resource_type="cpu",nodepool="p"} 100.0"#.to_owned(),
            r#"karpenter_nodepools_allowed_disruptions{nodepool="p",reason="drifted"} 1.0"#.to_owned(),
            "karpenter_cluster_state_node_count 2.0".to_owned(),
            "karpenter_cluster_state_synced 1.0".to_owned(),
            r#"karpenter_cluster_utilization_percent{resource_type="cpu"} 14.285714285714287"#.to_owned(),
            r#"karpenter_pods_state{name="a",namespace="ns",owner="",node="n1",scheduled="false",nodepool="p",zone="z1",arch="",capacity_type="",instance_type="",phase="Running",ready="true",managed="false"} 1.0"#.to_owned(),
        ] {
            assert!(text.contains(&line), "missing {line}:\n{text}");
        }
        assert_eq!(
            value(&text, "karpenter_nodes_current_lifetime_seconds{").len(),
            2
        );

        // n2, the pool and pod d go: their series go too.
        let view = View {
            nodes: vec![node("n1", "p")],
            pods: vec![pod("a", "n1", false)],
            ..View::default()
        };
        m.exclusive(|| m.state.replace(&samples(&view, &[])));
        let text = m.render().unwrap();
        assert!(!text.contains(r#"node_name="n2""#), "{text}");
        assert!(!text.contains("karpenter_nodepools_usage{"), "{text}");
        assert!(
            !text.contains("karpenter_nodepools_allowed_disruptions{"),
            "{text}"
        );
        assert!(!text.contains(r#"name="d""#), "{text}");
        assert!(
            text.contains("karpenter_cluster_state_node_count 1.0"),
            "{text}"
        );
        assert!(names().any(|n| n == "pods_state"));
    }
}
