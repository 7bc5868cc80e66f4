//! Conversions from Kubernetes objects (`k8s_openapi` Pods and Nodes, Capstan's `api` NodePools
//! and NodeClaims) to the scheduler's domain types. The scheduling core never sees these types.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use super::cluster::{ExistingNode, InflightClaim, InstanceType, NodePoolView};
use super::pod::{
    HostPort, Namespaces, NodeInclusionPolicy, Pod, PodAffinityTerm, PreferredTerm,
    TopologySpreadConstraint, WeightedPodAffinityTerm, WhenUnsatisfiable,
};
use super::quantity::QuantityError;
use super::requirements::{Operator, Requirement, Requirements, RequirementsError};
use super::resources::{ResourceLimits, Resources};
use super::selector::{LabelSelector, SelectorOperator};
use super::taints::{Taint, TaintEffect, Toleration, TolerationOperator};
use crate::api;
use crate::api::labels::{HOSTNAME, INITIALIZED, NODEPOOL, REBOOTING_TAINT_KEY};

pub mod claims;
pub mod volumes;

/// An object the scheduler cannot take as it is.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// A resource quantity does not parse.
    #[error("{object}: resource {resource}: {source}")]
    Quantity {
        object: String,
        resource: String,
        #[source]
        source: QuantityError,
    },
    /// A node-selector requirement is malformed.
    #[error("{object}: {source}")]
    Requirement {
        object: String,
        #[source]
        source: RequirementsError,
    },
    /// A taint or toleration effect Kubernetes does not have.
    #[error("{object}: unknown taint effect {effect:?}")]
    Effect { object: String, effect: String },
    /// A label-selector operator Kubernetes does not have.
    #[error("{object}: unknown label selector operator {operator:?}")]
    SelectorOperator { object: String, operator: String },
}

impl ConvertError {
    /// The same error about `object` (conversions name the object only when they fail, not for
    /// every pod they convert).
    fn about(mut self, name: String) -> Self {
        match &mut self {
            Self::Quantity { object, .. }
            | Self::Requirement { object, .. }
            | Self::Effect { object, .. }
            | Self::SelectorOperator { object, .. } => *object = name,
        }
        self
    }
}

/// Taints that come and go with a node's lifecycle; they do not keep pods off a node that is
/// still starting (Karpenter ignores them the same way).
const EPHEMERAL_TAINTS: &[&str] = &[
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/uninitialized",
    crate::api::labels::UNREGISTERED_TAINT_KEY,
];

fn resources(
    object: &str,
    list: Option<&BTreeMap<String, K8sQuantity>>,
) -> Result<Resources, ConvertError> {
    let Some(list) = list else {
        return Ok(Resources::default());
    };
    Resources::parse(list.iter().map(|(k, v)| (k.as_str(), v.0.as_str()))).map_err(|source| {
        let resource = list
            .iter()
            .find(|(k, v)| Resources::parse([(k.as_str(), v.0.as_str())]).is_err())
            .map_or_else(String::new, |(k, _)| k.clone());
        ConvertError::Quantity {
            object: object.to_owned(),
            resource,
            source,
        }
    })
}

fn limits(
    object: &str,
    list: &BTreeMap<String, api::Quantity>,
) -> Result<ResourceLimits, ConvertError> {
    ResourceLimits::parse(list.iter().map(|(k, v)| (k.as_str(), v.as_str()))).map_err(|source| {
        ConvertError::Quantity {
            object: object.to_owned(),
            resource: String::new(),
            source,
        }
    })
}

fn container_requests(object: &str, c: &core::Container) -> Result<Resources, ConvertError> {
    resources(
        object,
        c.resources.as_ref().and_then(|r| r.requests.as_ref()),
    )
}

/// What a pod occupies on a node: the larger of its running containers (sidecars included) and
/// its heaviest init step, plus pod overhead (Kubernetes' effective requests).
pub fn pod_requests(pod: &core::Pod) -> Result<Resources, ConvertError> {
    requests_of(pod).map_err(|err| err.about(pod_key(pod)))
}

/// [`pod_requests`], its errors naming no object.
fn requests_of(pod: &core::Pod) -> Result<Resources, ConvertError> {
    let object = "";
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(Resources::default());
    };
    let mut running = Resources::default();
    for c in &spec.containers {
        running.add(&container_requests(object, c)?);
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        let requests = container_requests(object, c)?;
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&requests);
            init_peak.max_assign(&sidecars);
        } else {
            init_peak.max_assign(&sidecars.plus(&requests));
        }
    }
    running.add(&sidecars);
    running.max_assign(&init_peak);
    running.add(&resources(object, spec.overhead.as_ref())?);
    Ok(running)
}

fn pod_key(pod: &core::Pod) -> String {
    format!(
        "pod {}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

fn operator(object: &str, key: &str, text: &str) -> Result<Operator, ConvertError> {
    Operator::parse(key, text).map_err(|source| ConvertError::Requirement {
        object: object.to_owned(),
        source,
    })
}

fn selector_terms(
    object: &str,
    term: &core::NodeSelectorTerm,
) -> Result<Requirements, ConvertError> {
    let mut reqs = Requirements::new();
    for e in term.match_expressions.iter().flatten() {
        let op = operator(object, &e.key, &e.operator)?;
        let r = Requirement::new(e.key.as_str(), op, e.values.iter().flatten().cloned()).map_err(
            |source| ConvertError::Requirement {
                object: object.to_owned(),
                source,
            },
        )?;
        reqs.add(r);
    }
    // `metadata.name` is the only field selector Kubernetes allows: the node's name, which is
    // its hostname label for every node Capstan makes.
    for f in term.match_fields.iter().flatten() {
        if f.key == "metadata.name" {
            let op = operator(object, &f.key, &f.operator)?;
            let r = Requirement::new(HOSTNAME, op, f.values.iter().flatten().cloned()).map_err(
                |source| ConvertError::Requirement {
                    object: object.to_owned(),
                    source,
                },
            )?;
            reqs.add(r);
        }
    }
    Ok(reqs)
}

/// A Kubernetes label selector as the scheduler's; `object` names the owner in errors.
pub fn label_selector_of(
    object: &str,
    s: &meta::LabelSelector,
) -> Result<LabelSelector, ConvertError> {
    label_selector(object, s)
}

fn label_selector(object: &str, s: &meta::LabelSelector) -> Result<LabelSelector, ConvertError> {
    let mut out = LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions: Vec::new(),
    };
    for e in s.match_expressions.iter().flatten() {
        let op = match e.operator.as_str() {
            "In" => SelectorOperator::In,
            "NotIn" => SelectorOperator::NotIn,
            "Exists" => SelectorOperator::Exists,
            "DoesNotExist" => SelectorOperator::DoesNotExist,
            other => {
                return Err(ConvertError::SelectorOperator {
                    object: object.to_owned(),
                    operator: other.to_owned(),
                });
            }
        };
        out = out.with_expression(e.key.as_str(), op, e.values.iter().flatten().cloned());
    }
    Ok(out)
}

fn effect(object: &str, text: &str) -> Result<TaintEffect, ConvertError> {
    Ok(match text {
        "NoSchedule" => TaintEffect::NoSchedule,
        "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
        "NoExecute" => TaintEffect::NoExecute,
        other => {
            return Err(ConvertError::Effect {
                object: object.to_owned(),
                effect: other.to_owned(),
            });
        }
    })
}

pub(crate) fn toleration(object: &str, t: &core::Toleration) -> Result<Toleration, ConvertError> {
    Ok(Toleration {
        key: t.key.clone().unwrap_or_default(),
        operator: if t.operator.as_deref() == Some("Exists") {
            TolerationOperator::Exists
        } else {
            TolerationOperator::Equal
        },
        value: t.value.clone().unwrap_or_default(),
        effect: t
            .effect
            .as_deref()
            .filter(|e| !e.is_empty())
            .map(|e| effect(object, e))
            .transpose()?,
    })
}

/// Namespace name → labels, for resolving `namespaceSelector`s of pod-affinity terms.
pub type NamespaceLabels = BTreeMap<String, BTreeMap<String, String>>;

fn affinity_term(
    object: &str,
    t: &core::PodAffinityTerm,
    pod_labels: &BTreeMap<String, String>,
    namespaces: &NamespaceLabels,
) -> Result<PodAffinityTerm, ConvertError> {
    let mut selector = t
        .label_selector
        .as_ref()
        .map(|s| label_selector(object, s))
        .transpose()?;
    // matchLabelKeys: the pod's own values for these keys join the selector.
    if let Some(s) = selector.as_mut() {
        for key in t.match_label_keys.iter().flatten() {
            if let Some(v) = pod_labels.get(key) {
                *s = std::mem::take(s).with_expression(
                    key.as_str(),
                    SelectorOperator::In,
                    [v.as_str()],
                );
            }
        }
    }
    let listed = t.namespaces.clone().unwrap_or_default();
    let namespaces = match &t.namespace_selector {
        None if listed.is_empty() => Namespaces::Own,
        None => Namespaces::Listed(listed),
        Some(sel)
            if sel.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
                && sel.match_expressions.as_ref().is_none_or(Vec::is_empty) =>
        {
            Namespaces::All
        }
        Some(sel) => {
            let sel = label_selector(object, sel)?;
            let mut all = listed;
            all.extend(
                namespaces
                    .iter()
                    .filter(|(_, labels)| sel.matches(labels))
                    .map(|(name, _)| name.clone()),
            );
            Namespaces::Listed(all)
        }
    };
    Ok(PodAffinityTerm {
        topology_key: t.topology_key.clone(),
        label_selector: selector,
        namespaces,
    })
}

/// A Kubernetes Pod as the scheduler sees it. `namespaces` resolves affinity terms'
/// `namespaceSelector`s (pass an empty map when none are used).
pub fn pod(pod: &core::Pod, namespaces: &NamespaceLabels) -> Result<Pod, ConvertError> {
    convert_pod(pod, namespaces).map_err(|err| err.about(pod_key(pod)))
}

/// [`pod`], its errors naming no object.
fn convert_pod(pod: &core::Pod, namespaces: &NamespaceLabels) -> Result<Pod, ConvertError> {
    let object = "";
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let mut out = Pod {
        name: pod.metadata.name.clone().unwrap_or_default(),
        namespace: pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned()),
        owner_kind: pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| o.kind.clone()),
        requests: requests_of(pod)?,
        buffer: super::buffer::is_virtual(pod),
        ..Pod::default()
    };
    let Some(spec) = pod.spec.as_ref() else {
        out.labels = labels;
        return Ok(out);
    };
    out.node_selector = spec.node_selector.clone().unwrap_or_default();
    out.host_ports = host_ports(spec);
    out.tolerations = spec
        .tolerations
        .iter()
        .flatten()
        .map(|t| toleration(object, t))
        .collect::<Result<_, _>>()?;
    for c in spec.topology_spread_constraints.iter().flatten() {
        let mut selector = c
            .label_selector
            .as_ref()
            .map(|s| label_selector(object, s))
            .transpose()?;
        if let Some(s) = selector.as_mut() {
            for key in c.match_label_keys.iter().flatten() {
                if let Some(v) = labels.get(key) {
                    *s = std::mem::take(s).with_expression(
                        key.as_str(),
                        SelectorOperator::In,
                        [v.as_str()],
                    );
                }
            }
        }
        out.topology_spread.push(TopologySpreadConstraint {
            max_skew: c.max_skew,
            topology_key: c.topology_key.clone(),
            when_unsatisfiable: if c.when_unsatisfiable == "ScheduleAnyway" {
                WhenUnsatisfiable::ScheduleAnyway
            } else {
                WhenUnsatisfiable::DoNotSchedule
            },
            label_selector: selector,
            min_domains: c.min_domains,
            node_affinity_policy: inclusion_policy(
                c.node_affinity_policy.as_deref(),
                NodeInclusionPolicy::Honor,
            ),
            node_taints_policy: inclusion_policy(
                c.node_taints_policy.as_deref(),
                NodeInclusionPolicy::Ignore,
            ),
        });
    }
    if let Some(affinity) = spec.affinity.as_ref() {
        if let Some(na) = affinity.node_affinity.as_ref() {
            if let Some(required) = na
                .required_during_scheduling_ignored_during_execution
                .as_ref()
            {
                for term in &required.node_selector_terms {
                    out.required_node_affinity
                        .push(selector_terms(object, term)?);
                }
            }
            for p in na
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                out.preferred_node_affinity.push(PreferredTerm {
                    weight: p.weight,
                    requirements: selector_terms(object, &p.preference)?,
                });
            }
        }
        if let Some(pa) = affinity.pod_affinity.as_ref() {
            for t in pa
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                out.pod_affinity
                    .push(affinity_term(object, t, &labels, namespaces)?);
            }
            for w in pa
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                out.preferred_pod_affinity.push(WeightedPodAffinityTerm {
                    weight: w.weight,
                    term: affinity_term(object, &w.pod_affinity_term, &labels, namespaces)?,
                });
            }
        }
        if let Some(pa) = affinity.pod_anti_affinity.as_ref() {
            for t in pa
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                out.pod_anti_affinity
                    .push(affinity_term(object, t, &labels, namespaces)?);
            }
            for w in pa
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                out.preferred_pod_anti_affinity
                    .push(WeightedPodAffinityTerm {
                        weight: w.weight,
                        term: affinity_term(object, &w.pod_affinity_term, &labels, namespaces)?,
                    });
            }
        }
    }
    out.labels = labels;
    Ok(out)
}

/// A pod that has finished (`Succeeded` or `Failed`): it holds nothing on its node, needs no
/// place and blocks no drain. The one copy of this rule for the host.
pub fn is_terminal(pod: &core::Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The requests and scheduler views of the active pods among `pods`.
fn running(
    pods: &[&core::Pod],
    namespaces: &NamespaceLabels,
) -> Result<(Resources, Vec<Arc<Pod>>), ConvertError> {
    let mut used = Resources::default();
    let mut out = Vec::new();
    for p in pods.iter().filter(|p| !is_terminal(p)) {
        let converted = pod(p, namespaces)?;
        used.add(&converted.requests);
        used.pods += 1;
        out.push(Arc::new(converted));
    }
    Ok((used, out))
}

fn core_taint(object: &str, t: &core::Taint) -> Result<Taint, ConvertError> {
    Ok(Taint::new(
        t.key.as_str(),
        t.value.clone().unwrap_or_default(),
        effect(object, &t.effect)?,
    ))
}

fn api_taint(t: &api::Taint) -> Taint {
    let effect = match t.effect {
        api::TaintEffect::NoSchedule => TaintEffect::NoSchedule,
        api::TaintEffect::PreferNoSchedule => TaintEffect::PreferNoSchedule,
        api::TaintEffect::NoExecute => TaintEffect::NoExecute,
    };
    Taint::new(t.key.as_str(), t.value.clone().unwrap_or_default(), effect)
}

/// A spread constraint's `nodeAffinityPolicy` or `nodeTaintsPolicy`; unset (or a value this
/// version does not know) is Kubernetes' default for it.
fn inclusion_policy(value: Option<&str>, default: NodeInclusionPolicy) -> NodeInclusionPolicy {
    match value {
        Some("Honor") => NodeInclusionPolicy::Honor,
        Some("Ignore") => NodeInclusionPolicy::Ignore,
        _ => default,
    }
}

/// The host ports a pod binds: its containers' and its sidecars' (init containers that keep
/// running), as kube-scheduler's `NodePorts` counts them.
fn host_ports(spec: &core::PodSpec) -> Vec<HostPort> {
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    spec.containers
        .iter()
        .chain(sidecars)
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|&port| port > 0)?;
            Some(HostPort {
                port,
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
                host_ip: p
                    .host_ip
                    .clone()
                    .filter(|ip| !ip.is_empty())
                    .unwrap_or_else(|| HostPort::ANY_IP.to_owned()),
            })
        })
        .collect()
}

/// A Node and the pods bound to it as existing capacity, given the NodeClaim it belongs to (if
/// any).
///
/// A Karpenter-managed node that is not initialized yet is simulated as it will be once it is: its
/// lifecycle taints and its claim's startup taints are left out (an agent removes those; pods
/// need not tolerate them), and until the kubelet reports allocatable, the claim's stands in. So
/// pods waiting for a node that is still starting are placed on it rather than on another new
/// claim. A node rebooting in place (its claim `Rebooting=True`) is simulated the same way, its
/// `karpenter.sh/rebooting` fence left out too: its pods wait for it to come back rather than
/// ask for new capacity (Karpenter v1.15's).
pub fn node(
    node: &core::Node,
    pods: &[&core::Pod],
    namespaces: &NamespaceLabels,
    claim: Option<&api::NodeClaim>,
) -> Result<ExistingNode, ConvertError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let object = format!("node {name}");
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let managed = labels.contains_key(NODEPOOL);
    let initialized = !managed || labels.get(INITIALIZED).is_some_and(|v| v == "true");
    let startup_taints = claim.map_or(&[][..], |c| c.spec.startup_taints.as_slice());
    let coming_back = managed && (!initialized || claim.is_some_and(api::NodeClaim::rebooting));
    let mut taints = Vec::new();
    for t in node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
    {
        if coming_back
            && (EPHEMERAL_TAINTS.contains(&t.key.as_str())
                || t.key == REBOOTING_TAINT_KEY
                || startup_taints.iter().any(|s| s.matches(t)))
        {
            continue;
        }
        taints.push(core_taint(&object, t)?);
    }
    let (used, pods) = running(pods, namespaces)?;
    let reported = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    let allocatable = match (reported, claim) {
        (Some(list), _) if !list.is_empty() => resources(&object, Some(list))?,
        (_, Some(claim)) if !initialized => claim_allocatable(&object, claim)?,
        _ => Resources::default(),
    };
    Ok(ExistingNode {
        node_pool: labels.get(NODEPOOL).cloned(),
        labels,
        taints,
        allocatable,
        used,
        pods,
        initialized,
        name,
        volume_limits: BTreeMap::new(),
        // Filled by the snapshot, which holds the ResourceSlices and the catalogs.
        devices: None,
    })
}

/// What a launched claim says its node will have.
fn claim_allocatable(object: &str, claim: &api::NodeClaim) -> Result<Resources, ConvertError> {
    let Some(status) = claim.status.as_ref() else {
        return Ok(Resources::default());
    };
    Ok(ResourceLimits::parse(
        status
            .allocatable
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str())),
    )
    .map_err(|source| ConvertError::Quantity {
        object: object.to_owned(),
        resource: String::new(),
        source,
    })?
    .0
    .into_iter()
    .fold(Resources::default(), |r, (k, v)| r.with(&k, v)))
}

/// The API's node-selector operator as the scheduler's.
pub fn operator_of(op: api::NodeSelectorOperator) -> Operator {
    match op {
        api::NodeSelectorOperator::In => Operator::In,
        api::NodeSelectorOperator::NotIn => Operator::NotIn,
        api::NodeSelectorOperator::Exists => Operator::Exists,
        api::NodeSelectorOperator::DoesNotExist => Operator::DoesNotExist,
        api::NodeSelectorOperator::Gt => Operator::Gt,
        api::NodeSelectorOperator::Lt => Operator::Lt,
        api::NodeSelectorOperator::Gte => Operator::Gte,
        api::NodeSelectorOperator::Lte => Operator::Lte,
    }
}

fn requirement(object: &str, r: &api::Requirement) -> Result<Requirement, ConvertError> {
    let op = operator_of(r.operator);
    Ok(
        Requirement::new(r.key.as_str(), op, r.values.iter().cloned())
            .map_err(|source| ConvertError::Requirement {
                object: object.to_owned(),
                source,
            })?
            .with_min_values(r.min_values.and_then(|m| u32::try_from(m).ok())),
    )
}

/// API requirements as the scheduler's; `object` names the owner in errors.
pub fn requirements(object: &str, list: &[api::Requirement]) -> Result<Requirements, ConvertError> {
    let mut out = Requirements::new();
    for r in list {
        out.add(requirement(object, r)?);
    }
    Ok(out)
}

/// A NodePool over the instance types its node class offers. What its limits leave is the limits
/// minus `status.resources` (what its nodes already have), as Karpenter computes it.
pub fn node_pool(
    pool: &api::NodePool,
    instance_types: Arc<[InstanceType]>,
) -> Result<NodePoolView, ConvertError> {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let object = format!("nodepool {name}");
    let spec = &pool.spec.template.spec;
    let limits = pool
        .spec
        .limits
        .as_ref()
        .map(|l| limits(&object, l))
        .transpose()?;
    let remaining = match (&limits, pool.status.as_ref()) {
        (Some(limits), Some(status)) => {
            let used = self::limits(&object, &status.resources)?;
            let mut remaining = limits.clone();
            for (name, value) in remaining.0.iter_mut() {
                *value -= used.0.get(name).copied().unwrap_or(0);
            }
            // `status.resources` may already count nodes; subtract `status.nodes` only if not.
            if !used.0.contains_key(super::resources::NODES)
                && let Some(nodes) = status.nodes
                && let Some(v) = remaining.0.get_mut(super::resources::NODES)
            {
                *v -= nodes;
            }
            Some(remaining)
        }
        (limits, _) => limits.clone(),
    };
    Ok(NodePoolView {
        weight: pool.spec.weight.unwrap_or(0),
        requirements: requirements(&object, &spec.requirements)?,
        labels: pool
            .spec
            .template
            .metadata
            .as_ref()
            .map(|m| m.labels.clone())
            .unwrap_or_default(),
        taints: spec.taints.iter().map(api_taint).collect(),
        startup_taints: spec.startup_taints.iter().map(api_taint).collect(),
        limits,
        remaining,
        spend_group: None,
        instance_types,
        name,
    })
}

/// A NodeClaim that has launched but whose node has not registered, with the pods nominated to
/// it. Its labels join its requirements.
pub fn inflight_claim(
    claim: &api::NodeClaim,
    pods: &[&core::Pod],
    namespaces: &NamespaceLabels,
) -> Result<InflightClaim, ConvertError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    let object = format!("nodeclaim {name}");
    let labels = claim.metadata.labels.clone().unwrap_or_default();
    let mut reqs = requirements(&object, &claim.spec.requirements)?;
    for (k, v) in &labels {
        reqs.add(Requirement::in_(k.as_str(), [v.as_str()]));
    }
    let allocatable = claim_allocatable(&object, claim)?;
    let (used, pods) = running(pods, namespaces)?;
    Ok(InflightClaim {
        node_pool: labels.get(NODEPOOL).cloned(),
        requirements: reqs,
        taints: claim.spec.taints.iter().map(api_taint).collect(),
        allocatable,
        used,
        pods,
        name,
        // Filled by the snapshot from the claim's instance type.
        devices: None,
    })
}

#[cfg(test)]
mod tests;
