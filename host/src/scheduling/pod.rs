//! The scheduling-relevant part of a pod: requests and placement constraints.

use std::collections::BTreeMap;

use super::requirements::{Requirement, Requirements};
use super::resources::Resources;
use super::selector::LabelSelector;
use super::taints::Toleration;

/// A pod as the scheduler sees it. Built by hand in tests or by [`super::convert`] from a
/// Kubernetes Pod.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pod {
    pub name: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    /// Kind of the controlling owner (`ReplicaSet`, `DaemonSet`, ...), if any.
    pub owner_kind: Option<String>,
    /// Effective requests: the larger of the init containers' and the sum of the containers',
    /// plus pod overhead. The solver always counts the pod itself as `pods: 1`.
    pub requests: Resources,
    pub node_selector: BTreeMap<String, String>,
    /// `requiredDuringScheduling` node-selector terms, ORed. Like Karpenter, the solver uses the
    /// first term and relaxes to the next one when it cannot be met.
    pub required_node_affinity: Vec<Requirements>,
    /// `preferredDuringScheduling` node-affinity terms. The heaviest is treated as required until
    /// relaxation drops it.
    pub preferred_node_affinity: Vec<PreferredTerm>,
    pub tolerations: Vec<Toleration>,
    pub topology_spread: Vec<TopologySpreadConstraint>,
    pub pod_affinity: Vec<PodAffinityTerm>,
    pub preferred_pod_affinity: Vec<WeightedPodAffinityTerm>,
    pub pod_anti_affinity: Vec<PodAffinityTerm>,
    pub preferred_pod_anti_affinity: Vec<WeightedPodAffinityTerm>,
    /// Host ports its containers bind (kube-scheduler's `NodePorts`): two pods whose ports
    /// conflict never share a node.
    pub host_ports: Vec<HostPort>,
    /// Where its persistent volumes let it run ([`super::convert::volumes`]), as ORed
    /// alternatives: node requirements, tried in order, but not the pod's own node affinity (topology
    /// spread does not narrow its domains by them).
    pub volume_requirements: Vec<Requirements>,
    /// Its persistent volumes with the CSI driver that attaches each, for the nodes' attach
    /// limits ([`super::ExistingNode::volume_limits`]).
    pub csi_volumes: Vec<CsiVolume>,
    /// The devices its ResourceClaims ask for (Dynamic Resource Allocation).
    pub devices: super::devices::PodDevices,
    /// A CapacityBuffer's virtual pod ([`super::buffer`]): placed after every real pod, so real
    /// pods take the room and buffer pods fill what is left.
    pub buffer: bool,
}

/// A persistent volume a pod mounts, as CSI attach limits count it: the driver that attaches it
/// and its claim (`namespace/name`; pods sharing a claim attach one volume).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CsiVolume {
    pub driver: String,
    pub claim: String,
}

/// The first driver whose limit in `limits` the volumes of `attached` and `adding` together
/// exceed, with its limit (each claim counted once).
pub fn volume_limit_exceeded<'a>(
    limits: &'a BTreeMap<String, i64>,
    attached: &[CsiVolume],
    adding: &[CsiVolume],
) -> Option<(&'a str, i64)> {
    let mut seen: Vec<&CsiVolume> = Vec::new();
    for v in adding {
        let Some((driver, &limit)) = limits.get_key_value(&v.driver) else {
            continue;
        };
        if seen.iter().any(|s| s.driver == v.driver) {
            continue;
        }
        seen.push(v);
        let mut claims: Vec<&str> = attached
            .iter()
            .chain(adding)
            .filter(|a| a.driver == v.driver)
            .map(|a| a.claim.as_str())
            .collect();
        claims.sort_unstable();
        claims.dedup();
        if claims.len() as i64 > limit {
            return Some((driver.as_str(), limit));
        }
    }
    None
}

/// A container port bound on the node's network (`hostPort`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub port: i32,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// The address it binds; `0.0.0.0` (every address) when unset.
    pub host_ip: String,
}

impl HostPort {
    /// The wildcard address a port binds when `hostIP` is unset.
    pub const ANY_IP: &'static str = "0.0.0.0";

    /// `port`/`protocol` on every address.
    pub fn new(port: i32, protocol: &str) -> Self {
        Self {
            port,
            protocol: protocol.to_owned(),
            host_ip: Self::ANY_IP.to_owned(),
        }
    }

    /// Whether both cannot be bound on one node, as kube-scheduler decides: the same port and
    /// protocol on the same address, or on any address when either binds every address.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.host_ip == other.host_ip
                || self.host_ip == Self::ANY_IP
                || other.host_ip == Self::ANY_IP)
    }
}

/// The first port of `wanted` that conflicts with one of `used`.
pub fn host_port_conflict<'p>(used: &[HostPort], wanted: &'p [HostPort]) -> Option<&'p HostPort> {
    wanted.iter().find(|w| used.iter().any(|u| u.conflicts(w)))
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}/{}", self.host_ip, self.port, self.protocol)
    }
}

/// A weighted node-affinity preference.
#[derive(Clone, Debug, PartialEq)]
pub struct PreferredTerm {
    pub weight: i32,
    pub requirements: Requirements,
}

/// What to do when a spread constraint cannot be met.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum WhenUnsatisfiable {
    /// A hard constraint.
    #[default]
    DoNotSchedule,
    /// A preference the solver relaxes when it cannot be met.
    ScheduleAnyway,
}

/// Whether a spread constraint heeds the pod's node affinity or tolerations when it decides
/// which nodes (and so which domains) count (`nodeAffinityPolicy`, `nodeTaintsPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeInclusionPolicy {
    /// Only nodes the pod could use count.
    Honor,
    /// Every node counts.
    Ignore,
}

/// A topology spread constraint.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TopologySpreadConstraint {
    pub max_skew: i32,
    pub topology_key: String,
    pub when_unsatisfiable: WhenUnsatisfiable,
    /// `None` (a null selector) counts no pods.
    pub label_selector: Option<LabelSelector>,
    pub min_domains: Option<i32>,
    /// Kubernetes' default: `Honor`. Nodes (and domains) the pod's node selector and required
    /// node affinity rule out do not count.
    pub node_affinity_policy: NodeInclusionPolicy,
    /// Kubernetes' default: `Ignore`. With `Honor`, nodes (and domains) whose `NoSchedule` or
    /// `NoExecute` taints the pod does not tolerate do not count.
    pub node_taints_policy: NodeInclusionPolicy,
}

impl TopologySpreadConstraint {
    /// A constraint with Kubernetes' defaults (`DoNotSchedule`, node affinity honored, taints
    /// ignored) and a null selector.
    pub fn new(topology_key: impl Into<String>, max_skew: i32) -> Self {
        Self {
            max_skew,
            topology_key: topology_key.into(),
            when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
            label_selector: None,
            min_domains: None,
            node_affinity_policy: NodeInclusionPolicy::Honor,
            node_taints_policy: NodeInclusionPolicy::Ignore,
        }
    }
}

/// Which namespaces a pod-affinity term looks at.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Namespaces {
    /// The pod's own namespace (no `namespaces` and no `namespaceSelector`).
    #[default]
    Own,
    /// These namespaces (resolved from `namespaces` and `namespaceSelector`).
    Listed(Vec<String>),
    /// Every namespace (an empty `namespaceSelector`).
    All,
}

/// A pod (anti-)affinity term: pods matching `label_selector` in `namespaces`, per domain of
/// `topology_key`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodAffinityTerm {
    pub topology_key: String,
    /// `None` (a null selector) matches no pods.
    pub label_selector: Option<LabelSelector>,
    pub namespaces: Namespaces,
}

/// A weighted pod (anti-)affinity preference.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WeightedPodAffinityTerm {
    pub weight: i32,
    pub term: PodAffinityTerm,
}

impl Pod {
    /// A pod in `namespace` requesting `requests`, with nothing else set.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>, requests: Resources) -> Self {
        Self {
            name: name.into(),
            namespace: namespace.into(),
            requests,
            ..Self::default()
        }
    }

    /// Builder: adds a label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }

    /// Builder: adds a nodeSelector entry.
    pub fn node_selector(mut self, key: &str, value: &str) -> Self {
        self.node_selector.insert(key.to_owned(), value.to_owned());
        self
    }

    /// Builder: adds a required node-affinity term holding one requirement.
    pub fn require(mut self, requirement: Requirement) -> Self {
        self.required_node_affinity
            .push(Requirements::new().with(requirement));
        self
    }

    /// Builder: adds a toleration.
    pub fn tolerate(mut self, toleration: Toleration) -> Self {
        self.tolerations.push(toleration);
        self
    }

    /// Builder: binds a host port (TCP on every address).
    pub fn host_port(mut self, port: i32) -> Self {
        self.host_ports.push(HostPort::new(port, "TCP"));
        self
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}
