//! A MachineDeployment as a node group: what a node made from it looks like (capacity, labels,
//! taints, zone), what it costs and how far it may grow, read from the scale-from-zero
//! annotations that cluster-autoscaler defined. Pure: the glue reads the objects.
//!
//! | annotation | meaning |
//! | --- | --- |
//! | `capacity.cluster-autoscaler.kubernetes.io/cpu`, `/memory` (required) | node capacity |
//! | `…/ephemeral-disk` | `ephemeral-storage` capacity |
//! | `…/maxPods` | `pods` capacity (default 110) |
//! | `…/gpu-count`, `…/gpu-type` | GPUs: the resource is `gpu-type` if it names one (`amd.com/gpu`), else `nvidia.com/gpu` |
//! | `…/labels` | node labels, `k=v,k=v` |
//! | `…/taints` | node taints, `key=value:Effect,key:Effect` |
//! | `cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size` | replicas it may grow to (unbounded if absent) |
//! | `cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size` | Machines consolidation keeps (0 if absent) |
//! | `cluster.x-k8s.io/autoscaling-options-maxnodeprovisiontime` | launch timeout for this group (a Go duration; the NodeClass's if shorter) |
//! | `capstan.dev/price-per-hour` (or `cluster.x-k8s.io/machine-current-price`) | hourly price (0 if absent) |
//!
//! The zone is the template's `failureDomain`, else the `topology.kubernetes.io/zone` label, else
//! `default`.
//!
//! Without the `cpu`/`memory` annotations, the capacity comes from the infrastructure machine
//! template's `status.capacity`, and the architecture and OS from its `status.nodeInfo` (Cluster
//! API's opt-in scale-from-zero contract; an annotation wins over the status, resource by
//! resource). Taints come from the annotation and from the Machine template's `spec.taints`.

use std::collections::BTreeMap;
use std::fmt;

use capstan_provider_sdk::{Quantity, ResourceList, labels};
use serde::Deserialize;
use serde_json::Value;

/// Prefix of the scale-from-zero capacity annotations.
pub const CAPACITY_PREFIX: &str = "capacity.cluster-autoscaler.kubernetes.io/";
/// The node-group minimum size annotation.
pub const MIN_SIZE: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size";
/// Cluster Autoscaler's per-node-group launch timeout (a Go duration, `15m`).
pub const MAX_PROVISION_TIME: &str = "cluster.x-k8s.io/autoscaling-options-maxnodeprovisiontime";
/// The node-group maximum size annotation.
pub const MAX_SIZE: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size";
/// The price annotation this provider defines.
pub const PRICE: &str = "capstan.dev/price-per-hour";
/// The price annotation the Cluster API provider proof of concept reserved (read as a fallback).
pub const PRICE_UPSTREAM: &str = "cluster.x-k8s.io/machine-current-price";
/// The label that makes a MachineDeployment a Karpenter member.
pub const MEMBER_LABEL: &str = "node.cluster.x-k8s.io/karpenter-member";
/// Zone used when a MachineDeployment names none.
pub const DEFAULT_ZONE: &str = "default";
/// Pods per node when `maxPods` is absent.
pub const DEFAULT_MAX_PODS: i128 = 110;

/// The parts of a MachineDeployment this provider reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct MachineDeployment {
    /// Metadata.
    #[serde(default)]
    pub metadata: Meta,
    /// Spec.
    #[serde(default)]
    pub spec: DeploymentSpec,
}

/// Object metadata (the fields used).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Resource version (optimistic concurrency).
    #[serde(default)]
    pub resource_version: Option<String>,
    /// Set while being deleted.
    #[serde(default)]
    pub deletion_timestamp: Option<String>,
    /// Creation time (RFC 3339).
    #[serde(default)]
    pub creation_timestamp: Option<String>,
}

/// MachineDeployment spec (the fields used).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentSpec {
    /// Desired Machines.
    #[serde(default)]
    pub replicas: Option<i64>,
    /// The Machine template.
    #[serde(default)]
    pub template: Template,
}

/// The Machine template.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Template {
    /// Template metadata.
    #[serde(default)]
    pub metadata: TemplateMeta,
    /// The Machine spec.
    #[serde(default)]
    pub spec: TemplateSpec,
}

/// Template metadata.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct TemplateMeta {
    /// Machine labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// The Machine spec of the template (the fields used).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateSpec {
    /// Failure domain (the zone).
    #[serde(default)]
    pub failure_domain: Option<String>,
    /// Kubernetes version.
    #[serde(default)]
    pub version: Option<String>,
    /// Infrastructure template reference.
    #[serde(default)]
    pub infrastructure_ref: Value,
    /// Bootstrap configuration.
    #[serde(default)]
    pub bootstrap: Value,
    /// Taints Cluster API puts on the Node (v1beta2, feature gate `MachineTaintPropagation`).
    #[serde(default)]
    pub taints: Vec<MachineTaint>,
}

/// A taint of the Machine template (`spec.taints`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct MachineTaint {
    /// Key.
    #[serde(default)]
    pub key: String,
    /// Value.
    #[serde(default)]
    pub value: Option<String>,
    /// Effect.
    #[serde(default)]
    pub effect: String,
}

/// What an infrastructure machine template reports for scaling from zero (Cluster API's opt-in
/// contract): its `status`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InfraTemplateStatus {
    /// Node capacity (`cpu`, `memory`, `nvidia.com/gpu`, ...): quantities as strings or numbers.
    #[serde(default)]
    pub capacity: BTreeMap<String, Value>,
    /// The node's architecture and OS.
    #[serde(default)]
    pub node_info: NodeInfo,
}

/// `status.nodeInfo` of an infrastructure machine template.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    /// `amd64`, `arm64`, ...
    #[serde(default)]
    pub architecture: Option<String>,
    /// `linux`, `windows`.
    #[serde(default)]
    pub operating_system: Option<String>,
}

impl MachineDeployment {
    /// Whether its annotations leave out the capacity that scaling from zero needs, so the
    /// infrastructure template's status has to say it.
    pub fn needs_template_capacity(&self) -> bool {
        ["cpu", "memory"].iter().any(|name| {
            !self
                .metadata
                .annotations
                .contains_key(&format!("{CAPACITY_PREFIX}{name}"))
        })
    }
}

/// A node taint from the `taints` annotation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct GroupTaint {
    /// Key.
    pub key: String,
    /// Value (may be empty).
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// The kind of Cluster API resource a node group scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Kind {
    /// A MachineDeployment.
    #[default]
    MachineDeployment,
    /// A MachineSet that no MachineDeployment owns.
    MachineSet,
}

impl Kind {
    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::MachineDeployment => "MachineDeployment",
            Kind::MachineSet => "MachineSet",
        }
    }

    /// The label Cluster API puts on the Machines it owns, naming it.
    pub fn machine_label(self) -> &'static str {
        match self {
            Kind::MachineDeployment => "cluster.x-k8s.io/deployment-name",
            Kind::MachineSet => "cluster.x-k8s.io/set-name",
        }
    }
}

/// A MachineDeployment (or MachineSet) whose annotations cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupError {
    /// Its kind.
    pub kind: Kind,
    /// `namespace/name`.
    pub deployment: String,
    /// The annotation at fault.
    pub annotation: String,
    /// What is wrong.
    pub problem: String,
}

impl fmt::Display for GroupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: annotation {}: {}",
            self.kind.as_str(),
            self.deployment,
            self.annotation,
            self.problem
        )
    }
}

/// What nodes of a MachineDeployment look like and cost.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeGroup {
    /// What it scales: a MachineDeployment, or a MachineSet no MachineDeployment owns.
    pub kind: Kind,
    /// The MachineDeployment's name (the instance type name).
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Current replicas.
    pub replicas: i64,
    /// Maximum replicas, if bounded.
    pub max_size: Option<i64>,
    /// Machines consolidation keeps (0 if unset).
    pub min_size: i64,
    /// How long a launch may take, in milliseconds, if the group says.
    pub max_provision_millis: Option<u64>,
    /// Node capacity.
    pub capacity: ResourceList,
    /// Node labels (well-known ones included).
    pub labels: BTreeMap<String, String>,
    /// Node taints.
    pub taints: Vec<GroupTaint>,
    /// Zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: String,
    /// Hourly price.
    pub price: f64,
    /// Hash of what makes a Machine (infrastructure reference, bootstrap, version): a Machine made
    /// under another hash has drifted.
    pub template_hash: String,
}

impl NodeGroup {
    /// Its kind and name: what the launch ledger and the scale requests go to.
    pub fn of(&self) -> (Kind, &str) {
        (self.kind, &self.name)
    }

    /// Whether it may grow by one.
    pub fn can_grow(&self) -> bool {
        self.max_size.is_none_or(|max| self.replicas < max)
    }

    /// The node's architecture.
    pub fn arch(&self) -> &str {
        self.labels
            .get(labels::ARCH)
            .map_or(labels::ARCH_AMD64, String::as_str)
    }

    /// The node's OS.
    pub fn os(&self) -> &str {
        self.labels
            .get(labels::OS)
            .map_or(labels::OS_LINUX, String::as_str)
    }
}

/// Reads a MachineDeployment as a node group, with its infrastructure template's status when
/// read (see the module docs).
pub fn parse(
    md: &MachineDeployment,
    template: Option<&InfraTemplateStatus>,
) -> Result<NodeGroup, GroupError> {
    parse_kind(Kind::MachineDeployment, md, template)
}

/// [`parse`] for a resource of `kind` (a MachineSet has the same fields).
pub fn parse_kind(
    kind: Kind,
    md: &MachineDeployment,
    template: Option<&InfraTemplateStatus>,
) -> Result<NodeGroup, GroupError> {
    let deployment = format!("{}/{}", md.metadata.namespace, md.metadata.name);
    let annotations = &md.metadata.annotations;
    let error = |annotation: &str, problem: String| GroupError {
        kind,
        deployment: deployment.clone(),
        annotation: annotation.to_string(),
        problem,
    };
    let capacity_key = |name: &str| format!("{CAPACITY_PREFIX}{name}");
    let quantity = |name: &str| -> Result<Option<Quantity>, GroupError> {
        let key = capacity_key(name);
        match annotations.get(&key) {
            Some(text) => Quantity::parse(text.trim())
                .map(Some)
                .map_err(|e| error(&key, format!("{text:?} is not a quantity: {e}"))),
            None => Ok(None),
        }
    };

    // The template's status first; the annotations override it resource by resource.
    let mut capacity = ResourceList::new();
    if let Some(status) = template {
        for (resource, value) in &status.capacity {
            let text = match value {
                Value::String(s) => s.trim().to_string(),
                other => other.to_string(),
            };
            let q = Quantity::parse(&text).map_err(|e| {
                error(
                    &format!("infrastructure template status.capacity.{resource}"),
                    format!("{text:?} is not a quantity: {e}"),
                )
            })?;
            capacity.insert(resource, q);
        }
    }
    for (annotation, resource) in [
        ("cpu", labels::RESOURCE_CPU),
        ("memory", labels::RESOURCE_MEMORY),
        ("ephemeral-disk", labels::RESOURCE_EPHEMERAL_STORAGE),
        ("maxPods", labels::RESOURCE_PODS),
    ] {
        if let Some(q) = quantity(annotation)? {
            capacity.insert(resource, q);
        }
    }
    for (annotation, resource) in [
        ("cpu", labels::RESOURCE_CPU),
        ("memory", labels::RESOURCE_MEMORY),
    ] {
        if !capacity.contains(resource) {
            return Err(error(
                &capacity_key(annotation),
                "missing (needed to scale from zero), and the infrastructure template's status.capacity has no such resource".into(),
            ));
        }
    }
    if !capacity.contains(labels::RESOURCE_PODS) {
        capacity.insert(
            labels::RESOURCE_PODS,
            Quantity::from_units(DEFAULT_MAX_PODS),
        );
    }
    if let Some(count) = quantity("gpu-count")? {
        let kind = annotations
            .get(&capacity_key("gpu-type"))
            .filter(|t| t.contains('/'))
            .map_or("nvidia.com/gpu", String::as_str);
        capacity.insert(kind, count);
    }
    for (name, q) in capacity.iter() {
        if q.millis() < 0 {
            return Err(error(&capacity_key(name), "must not be negative".into()));
        }
    }

    let mut node_labels = BTreeMap::new();
    // Cluster API copies these Machine labels to the Node.
    for (key, value) in &md.spec.template.metadata.labels {
        let domain = key.split('/').next().unwrap_or_default();
        if key.contains('/')
            && (domain == "node.cluster.x-k8s.io"
                || domain.ends_with(".node.cluster.x-k8s.io")
                || domain == "node-role.kubernetes.io"
                || domain == "node-restriction.kubernetes.io")
        {
            node_labels.insert(key.clone(), value.clone());
        }
    }
    let labels_key = capacity_key("labels");
    if let Some(text) = annotations.get(&labels_key) {
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| error(&labels_key, format!("{pair:?} is not key=value")))?;
            if key.trim().is_empty() {
                return Err(error(&labels_key, format!("{pair:?} has an empty key")));
            }
            node_labels.insert(key.trim().to_string(), value.trim().to_string());
        }
    }

    let taints_key = capacity_key("taints");
    let mut taints = Vec::new();
    if let Some(text) = annotations.get(&taints_key) {
        for item in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key_value, effect) = item
                .rsplit_once(':')
                .ok_or_else(|| error(&taints_key, format!("{item:?} is not key[=value]:Effect")))?;
            if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
                return Err(error(
                    &taints_key,
                    format!(
                        "{item:?}: unknown taint effect {effect:?} (NoSchedule, PreferNoSchedule or NoExecute)"
                    ),
                ));
            }
            let (key, value) = key_value.split_once('=').unwrap_or((key_value, ""));
            if key.is_empty() {
                return Err(error(&taints_key, format!("{item:?} has an empty key")));
            }
            taints.push(GroupTaint {
                key: key.to_string(),
                value: value.to_string(),
                effect: effect.to_string(),
            });
        }
    }

    for taint in &md.spec.template.spec.taints {
        let item = GroupTaint {
            key: taint.key.clone(),
            value: taint.value.clone().unwrap_or_default(),
            effect: taint.effect.clone(),
        };
        if !taints.contains(&item) {
            taints.push(item);
        }
    }

    let count = |annotation: &str| match annotations.get(annotation) {
        Some(text) => text
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .map(Some)
            .ok_or_else(|| error(annotation, format!("{text:?} is not a count"))),
        None => Ok(None),
    };
    let max_size = count(MAX_SIZE)?;
    let min_size = count(MIN_SIZE)?.unwrap_or(0);
    if let Some(max) = max_size.filter(|max| *max < min_size) {
        return Err(error(
            MIN_SIZE,
            format!("{min_size} is above the maximum size {max}"),
        ));
    }
    let max_provision_millis = match annotations.get(MAX_PROVISION_TIME) {
        Some(text) => Some(go_duration_millis(text.trim()).ok_or_else(|| {
            error(
                MAX_PROVISION_TIME,
                format!("{text:?} is not a duration (like 15m, 90s, 1h30m)"),
            )
        })?),
        None => None,
    };
    let (price_key, price_text) = match (annotations.get(PRICE), annotations.get(PRICE_UPSTREAM)) {
        (Some(text), _) => (PRICE, Some(text)),
        (None, Some(text)) => (PRICE_UPSTREAM, Some(text)),
        (None, None) => (PRICE, None),
    };
    let price = match price_text {
        Some(text) => text
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|p| p.is_finite() && *p >= 0.0)
            .ok_or_else(|| {
                error(
                    price_key,
                    format!("{text:?} is not a price (a number >= 0)"),
                )
            })?,
        None => 0.0,
    };

    let zone = md
        .spec
        .template
        .spec
        .failure_domain
        .clone()
        .filter(|z| !z.is_empty())
        .or_else(|| node_labels.get(labels::ZONE).cloned())
        .unwrap_or_else(|| DEFAULT_ZONE.to_string());
    let capacity_type = node_labels
        .get(labels::CAPACITY_TYPE)
        .cloned()
        .unwrap_or_else(|| labels::CAPACITY_TYPE_ON_DEMAND.to_string());
    if !labels::CAPACITY_TYPES.contains(&capacity_type.as_str()) {
        return Err(error(
            &labels_key,
            format!("unknown capacity type {capacity_type:?} (spot, on-demand or reserved)"),
        ));
    }
    node_labels.insert(labels::INSTANCE_TYPE.to_string(), md.metadata.name.clone());
    node_labels.insert(labels::ZONE.to_string(), zone.clone());
    node_labels.insert(labels::CAPACITY_TYPE.to_string(), capacity_type.clone());
    let node_info = template.map(|t| &t.node_info);
    let reported = |field: Option<&Option<String>>| {
        field
            .and_then(Option::as_deref)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    node_labels
        .entry(labels::ARCH.to_string())
        .or_insert_with(|| {
            reported(node_info.map(|n| &n.architecture))
                .unwrap_or_else(|| labels::ARCH_AMD64.to_string())
        });
    node_labels
        .entry(labels::OS.to_string())
        .or_insert_with(|| {
            reported(node_info.map(|n| &n.operating_system))
                .unwrap_or_else(|| labels::OS_LINUX.to_string())
        });

    Ok(NodeGroup {
        kind,
        name: md.metadata.name.clone(),
        namespace: md.metadata.namespace.clone(),
        replicas: md.spec.replicas.unwrap_or(0),
        max_size,
        min_size,
        max_provision_millis,
        capacity,
        labels: node_labels,
        taints,
        zone,
        capacity_type,
        price,
        template_hash: template_hash(&md.spec.template.spec),
    })
}

/// A Go duration (`1h30m`, `90s`, `500ms`; h, m, s, ms, whole numbers) in milliseconds.
pub fn go_duration_millis(text: &str) -> Option<u64> {
    if text.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let number: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (1, 2)
        } else if rest.starts_with('h') {
            (3_600_000, 1)
        } else if rest.starts_with('m') {
            (60_000, 1)
        } else if rest.starts_with('s') {
            (1000, 1)
        } else {
            return None;
        };
        rest = &rest[len..];
        total = total.checked_add(number.checked_mul(unit)?)?;
    }
    Some(total)
}

/// The hash of what makes a Machine: infrastructure reference, bootstrap, version.
pub fn template_hash(spec: &TemplateSpec) -> String {
    let text = serde_json::json!({
        "infrastructureRef": spec.infrastructure_ref,
        "bootstrap": spec.bootstrap,
        "version": spec.version,
    })
    .to_string();
    format!("{:016x}", fnv1a(text.as_bytes()))
}

/// 64-bit FNV-1a: small, dependency-free and stable across builds.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(annotations: &[(&str, &str)]) -> MachineDeployment {
        let mut md: MachineDeployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "md-a", "namespace": "capi", "labels": {MEMBER_LABEL: ""}},
            "spec": {"replicas": 2, "template": {
                "metadata": {"labels": {"node.cluster.x-k8s.io/pool": "a", "cluster.x-k8s.io/cluster-name": "c"}},
                "spec": {"version": "v1.34.0", "infrastructureRef": {"kind": "DockerMachineTemplate", "name": "t1"}}
            }}
        }))
        .unwrap();
        for (k, v) in annotations {
            md.metadata
                .annotations
                .insert((*k).to_string(), (*v).to_string());
        }
        md
    }

    const BASE: [(&str, &str); 2] = [
        ("capacity.cluster-autoscaler.kubernetes.io/cpu", "2"),
        ("capacity.cluster-autoscaler.kubernetes.io/memory", "4G"),
    ];

    fn parse_md(md: &MachineDeployment) -> Result<NodeGroup, GroupError> {
        parse(md, None)
    }

    fn err(extra: &[(&str, &str)]) -> GroupError {
        let mut all = BASE.to_vec();
        all.extend_from_slice(extra);
        parse_md(&md(&all)).unwrap_err()
    }

    #[test]
    fn reads_the_upstream_example_annotations() {
        let group = parse_md(&md(&[
            ("cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size", "10"),
            ("capacity.cluster-autoscaler.kubernetes.io/memory", "4G"),
            ("capacity.cluster-autoscaler.kubernetes.io/cpu", "2"),
            ("capacity.cluster-autoscaler.kubernetes.io/ephemeral-disk", "100Gi"),
            ("capacity.cluster-autoscaler.kubernetes.io/maxPods", "110"),
            (
                "capacity.cluster-autoscaler.kubernetes.io/labels",
                "kubernetes.io/arch=amd64,karpenter.sh/capacity-type=on-demand,node.kubernetes.io/instance-type=kubemark-0,topology.kubernetes.io/zone=us-east-1a",
            ),
            ("cluster.x-k8s.io/machine-current-price", "0.50"),
        ]))
        .unwrap();
        assert_eq!(group.capacity.get("cpu").millis(), 2000);
        assert_eq!(group.capacity.get("memory").value(), 4_000_000_000);
        assert_eq!(group.capacity.get("ephemeral-storage").value(), 100 << 30);
        assert_eq!(group.capacity.get("pods").value(), 110);
        assert_eq!(group.max_size, Some(10));
        assert!(group.can_grow());
        assert_eq!(group.zone, "us-east-1a");
        assert_eq!(group.capacity_type, "on-demand");
        assert_eq!(group.price, 0.5);
        // The instance type is the MachineDeployment, whatever the labels annotation says.
        assert_eq!(group.labels[labels::INSTANCE_TYPE], "md-a");
        assert_eq!(group.labels["node.cluster.x-k8s.io/pool"], "a");
        assert!(!group.labels.contains_key("cluster.x-k8s.io/cluster-name"));
        assert_eq!((group.arch(), group.os()), ("amd64", "linux"));
    }

    #[test]
    fn defaults_gpus_taints_and_our_price_annotation() {
        let group = parse_md(&md(&[
            BASE[0],
            BASE[1],
            ("capacity.cluster-autoscaler.kubernetes.io/gpu-count", "2"),
            (
                "capacity.cluster-autoscaler.kubernetes.io/gpu-type",
                "nvidia-t4",
            ),
            (
                "capacity.cluster-autoscaler.kubernetes.io/taints",
                "gpu=true:NoSchedule, dedicated:NoExecute",
            ),
            (PRICE, "1.25"),
            (PRICE_UPSTREAM, "9"),
        ]))
        .unwrap();
        assert_eq!(group.capacity.get("nvidia.com/gpu").value(), 2);
        assert_eq!(group.capacity.get("pods").value(), 110);
        assert_eq!(group.price, 1.25);
        assert_eq!(group.zone, DEFAULT_ZONE);
        assert_eq!(group.max_size, None);
        assert_eq!(
            group.taints,
            vec![
                GroupTaint {
                    key: "gpu".into(),
                    value: "true".into(),
                    effect: "NoSchedule".into()
                },
                GroupTaint {
                    key: "dedicated".into(),
                    value: String::new(),
                    effect: "NoExecute".into()
                },
            ]
        );
        let amd = parse_md(&md(&[
            BASE[0],
            BASE[1],
            ("capacity.cluster-autoscaler.kubernetes.io/gpu-count", "1"),
            (
                "capacity.cluster-autoscaler.kubernetes.io/gpu-type",
                "amd.com/gpu",
            ),
        ]))
        .unwrap();
        assert_eq!(amd.capacity.get("amd.com/gpu").value(), 1);
    }

    #[test]
    fn failure_domain_wins_and_max_size_bounds_growth() {
        let mut m = md(&[BASE[0], BASE[1], (MAX_SIZE, "2")]);
        m.spec.template.spec.failure_domain = Some("fd-1".into());
        let group = parse_md(&m).unwrap();
        assert_eq!(group.zone, "fd-1");
        assert_eq!(group.labels[labels::ZONE], "fd-1");
        assert!(!group.can_grow(), "2 replicas of at most 2");
    }

    #[test]
    fn malformed_annotations_name_the_deployment_and_the_annotation() {
        let missing = parse_md(&md(&[BASE[0]])).unwrap_err();
        assert_eq!(
            missing.annotation,
            "capacity.cluster-autoscaler.kubernetes.io/memory"
        );
        assert!(
            missing.to_string().contains("MachineDeployment capi/md-a"),
            "{missing}"
        );

        let bad_quantity = err(&[("capacity.cluster-autoscaler.kubernetes.io/maxPods", "lots")]);
        assert!(
            bad_quantity.problem.contains("not a quantity"),
            "{bad_quantity}"
        );

        let effect = err(&[(
            "capacity.cluster-autoscaler.kubernetes.io/taints",
            "a=b:NoWay",
        )]);
        assert!(
            effect.problem.contains("unknown taint effect \"NoWay\""),
            "{effect}"
        );

        let no_effect = err(&[("capacity.cluster-autoscaler.kubernetes.io/taints", "a=b")]);
        assert!(
            no_effect.problem.contains("key[=value]:Effect"),
            "{no_effect}"
        );

        let label = err(&[(
            "capacity.cluster-autoscaler.kubernetes.io/labels",
            "novalue",
        )]);
        assert!(label.problem.contains("key=value"), "{label}");

        let max = err(&[(MAX_SIZE, "-1")]);
        assert_eq!(max.annotation, MAX_SIZE);

        let price = err(&[(PRICE, "cheap")]);
        assert_eq!(price.annotation, PRICE);
        let negative = err(&[(PRICE_UPSTREAM, "-3")]);
        assert_eq!(negative.annotation, PRICE_UPSTREAM);

        let capacity_type = err(&[(
            "capacity.cluster-autoscaler.kubernetes.io/labels",
            "karpenter.sh/capacity-type=cheap",
        )]);
        assert!(
            capacity_type.problem.contains("capacity type"),
            "{capacity_type}"
        );
    }

    #[test]
    fn the_template_hash_follows_what_makes_a_machine() {
        let a = md(&BASE);
        let mut b = a.clone();
        b.spec.replicas = Some(7);
        b.metadata.annotations.insert(PRICE.into(), "3".into());
        assert_eq!(
            parse_md(&a).unwrap().template_hash,
            parse_md(&b).unwrap().template_hash
        );
        let mut c = a.clone();
        c.spec.template.spec.version = Some("v1.35.0".into());
        assert_ne!(
            parse_md(&a).unwrap().template_hash,
            parse_md(&c).unwrap().template_hash
        );
        let mut d = a.clone();
        d.spec.template.spec.infrastructure_ref =
            serde_json::json!({"kind": "DockerMachineTemplate", "name": "t2"});
        assert_ne!(
            parse_md(&a).unwrap().template_hash,
            parse_md(&d).unwrap().template_hash
        );
    }

    #[test]
    fn scale_from_zero_reads_the_infrastructure_templates_status() {
        let status: InfraTemplateStatus = serde_json::from_value(serde_json::json!({
            "capacity": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 1, "pods": "58"},
            "nodeInfo": {"architecture": "arm64", "operatingSystem": "linux"},
        }))
        .unwrap();
        let bare = md(&[]);
        assert!(bare.needs_template_capacity());
        assert!(!md(&BASE).needs_template_capacity());
        let missing = parse(&bare, None).unwrap_err();
        assert!(missing.problem.contains("status.capacity"), "{missing}");
        let group = parse(&bare, Some(&status)).unwrap();
        assert_eq!(group.capacity.get("cpu").millis(), 4000);
        assert_eq!(group.capacity.get("memory").value(), 16 << 30);
        assert_eq!(group.capacity.get("nvidia.com/gpu").value(), 1);
        assert_eq!(group.capacity.get("pods").value(), 58);
        assert_eq!((group.arch(), group.os()), ("arm64", "linux"));
        // An annotation wins over the status, resource by resource; so does a labels annotation.
        let mixed = parse(
            &md(&[
                ("capacity.cluster-autoscaler.kubernetes.io/cpu", "8"),
                (
                    "capacity.cluster-autoscaler.kubernetes.io/labels",
                    "kubernetes.io/arch=amd64",
                ),
            ]),
            Some(&status),
        )
        .unwrap();
        assert_eq!(mixed.capacity.get("cpu").millis(), 8000);
        assert_eq!(mixed.capacity.get("memory").value(), 16 << 30);
        assert_eq!(mixed.arch(), "amd64");
        let bad: InfraTemplateStatus = serde_json::from_value(
            serde_json::json!({"capacity": {"cpu": "many", "memory": "1Gi"}}),
        )
        .unwrap();
        let error = parse(&bare, Some(&bad)).unwrap_err();
        assert!(error.annotation.contains("status.capacity.cpu"), "{error}");
    }

    #[test]
    fn machine_template_taints_join_the_annotations() {
        let mut m = md(&[
            BASE[0],
            BASE[1],
            (
                "capacity.cluster-autoscaler.kubernetes.io/taints",
                "gpu=true:NoSchedule",
            ),
        ]);
        m.spec.template.spec.taints = serde_json::from_value(serde_json::json!([
            {"key": "gpu", "value": "true", "effect": "NoSchedule", "propagation": "Always"},
            {"key": "dedicated", "effect": "NoExecute", "propagation": "OnInitialization"},
        ]))
        .unwrap();
        let group = parse_md(&m).unwrap();
        let keys: Vec<(&str, &str)> = group
            .taints
            .iter()
            .map(|t| (t.key.as_str(), t.effect.as_str()))
            .collect();
        assert_eq!(
            keys,
            vec![("gpu", "NoSchedule"), ("dedicated", "NoExecute")]
        );
    }

    #[test]
    fn min_size_is_a_count_not_above_the_max() {
        let group = parse_md(&md(&[BASE[0], BASE[1], (MIN_SIZE, "2"), (MAX_SIZE, "5")])).unwrap();
        assert_eq!((group.min_size, group.max_size), (2, Some(5)));
        assert_eq!(parse_md(&md(&BASE)).unwrap().min_size, 0);
        assert_eq!(err(&[(MIN_SIZE, "two")]).annotation, MIN_SIZE);
        let above = err(&[(MIN_SIZE, "6"), (MAX_SIZE, "5")]);
        assert!(above.problem.contains("above the maximum"), "{above}");
    }

    #[test]
    fn max_node_provision_time_is_a_go_duration() {
        assert_eq!(go_duration_millis("15m"), Some(900_000));
        assert_eq!(go_duration_millis("1h30m10s"), Some(5_410_000));
        assert_eq!(go_duration_millis("500ms"), Some(500));
        for bad in ["", "15", "m", "1.5h", "10d", "-1s"] {
            assert_eq!(go_duration_millis(bad), None, "{bad}");
        }
        let group = parse_md(&md(&[BASE[0], BASE[1], (MAX_PROVISION_TIME, "90s")])).unwrap();
        assert_eq!(group.max_provision_millis, Some(90_000));
        assert_eq!(parse_md(&md(&BASE)).unwrap().max_provision_millis, None);
        assert_eq!(
            err(&[(MAX_PROVISION_TIME, "soon")]).annotation,
            MAX_PROVISION_TIME
        );
    }
}
