//! Machines: the parts this provider reads and writes, and a Machine as a NodeClaim.

use std::collections::BTreeMap;

use capstan_provider_sdk::{KeyValue, NodeClaim, labels};
use serde::Deserialize;

use crate::node_group::{Kind, Meta, NodeGroup};

/// The label that ties a Machine to the NodeClaim it was launched for.
pub const CLAIM_LABEL: &str = "capstan.dev/nodeclaim";
/// The template hash a Machine was claimed under (drift detection).
pub const HASH_ANNOTATION: &str = "capstan.dev/machine-template-hash";
/// Marks a Machine claimed while its MachineDeployment had fewer such Machines than its minimum
/// size (the value): its NodeClaim gets [`HELD_BY_PROVIDER`], so consolidation and drift keep it.
pub const MIN_SIZE_MEMBER: &str = "capstan.dev/min-size-member";
/// The host's annotation for a provider's hold on a node (providers may not set Karpenter's
/// `karpenter.sh/do-not-disrupt`); the value is the reason.
pub const HELD_BY_PROVIDER: &str = "capstan.dev/held-by-provider";
/// Cluster API's mark for the Machine to remove first on scale-down.
pub const DELETE_MACHINE: &str = "cluster.x-k8s.io/delete-machine";
/// The MachineDeployment a Machine belongs to.
pub const DEPLOYMENT_LABEL: &str = "cluster.x-k8s.io/deployment-name";
/// Provider IDs this provider makes up for Machines that have none yet (so the host's garbage
/// collection can see and remove them): `clusterapi-pending:///<namespace>/<machine>`.
pub const PENDING_PREFIX: &str = "clusterapi-pending:///";

/// The parts of a Machine this provider reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Machine {
    /// Metadata.
    #[serde(default)]
    pub metadata: Meta,
    /// Spec.
    #[serde(default)]
    pub spec: MachineSpec,
    /// Status.
    #[serde(default)]
    pub status: MachineStatus,
}

/// Machine spec (the fields used).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct MachineSpec {
    /// The infrastructure's ID, once known.
    #[serde(default, rename = "providerID")]
    pub provider_id: Option<String>,
}

/// Machine status (the fields used).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// The Node, once it joined.
    #[serde(default)]
    pub node_ref: Option<NodeRef>,
}

/// A reference to a Node.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct NodeRef {
    /// Its name.
    #[serde(default)]
    pub name: String,
}

impl Machine {
    /// The NodeClaim it was claimed for.
    pub fn claim(&self) -> Option<&str> {
        self.metadata.labels.get(CLAIM_LABEL).map(String::as_str)
    }

    /// Whether it is one of the Machines that keep its MachineDeployment at its minimum size.
    pub fn holds_min_size(&self) -> bool {
        self.metadata.annotations.contains_key(MIN_SIZE_MEMBER)
    }

    /// The node group it belongs to: its MachineDeployment, else its MachineSet (one no
    /// MachineDeployment owns).
    pub fn owner(&self) -> Option<(Kind, &str)> {
        [Kind::MachineDeployment, Kind::MachineSet]
            .into_iter()
            .find_map(|kind| {
                self.metadata
                    .labels
                    .get(kind.machine_label())
                    .map(|name| (kind, name.as_str()))
            })
    }

    /// Whether it is going away (deleting, or marked for scale-down).
    pub fn is_leaving(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
            || self.metadata.annotations.contains_key(DELETE_MACHINE)
    }

    /// Its provider ID, or the made-up pending one.
    pub fn provider_id(&self) -> String {
        match self.spec.provider_id.as_deref().filter(|id| !id.is_empty()) {
            Some(id) => id.to_string(),
            None => format!(
                "{PENDING_PREFIX}{}/{}",
                self.metadata.namespace, self.metadata.name
            ),
        }
    }

    /// Whether `id` names this Machine (its provider ID or its pending ID).
    pub fn has_provider_id(&self, id: &str) -> bool {
        self.provider_id() == id
    }

    /// The NodeClaim it is, with what its node group says about the node when known.
    pub fn to_claim(&self, group: Option<&NodeGroup>) -> NodeClaim {
        let mut node_labels: BTreeMap<String, String> =
            group.map(|g| g.labels.clone()).unwrap_or_default();
        if let Some((_, owner)) = self.owner() {
            node_labels
                .entry(labels::INSTANCE_TYPE.to_string())
                .or_insert_with(|| owner.to_string());
        }
        let capacity = group.map(|g| g.capacity.to_resources()).unwrap_or_default();
        let mut annotations: Vec<KeyValue> = self
            .metadata
            .annotations
            .get(HASH_ANNOTATION)
            .map(|hash| KeyValue {
                key: HASH_ANNOTATION.to_string(),
                value: hash.clone(),
            })
            .into_iter()
            .collect();
        if self.holds_min_size() {
            annotations.push(KeyValue {
                key: HELD_BY_PROVIDER.to_string(),
                value: format!(
                    "keeps {} {} at its minimum size ({})",
                    self.owner()
                        .map_or("MachineDeployment", |(kind, _)| kind.as_str()),
                    self.owner().map_or("", |(_, name)| name),
                    self.metadata
                        .annotations
                        .get(MIN_SIZE_MEMBER)
                        .map_or("", String::as_str)
                ),
            });
        }
        NodeClaim {
            name: self.claim().unwrap_or(&self.metadata.name).to_string(),
            node_pool_name: None,
            labels: node_labels
                .into_iter()
                .map(|(key, value)| KeyValue { key, value })
                .collect(),
            annotations,
            taints: Vec::new(),
            startup_taints: Vec::new(),
            requirements: Vec::new(),
            requests: Vec::new(),
            provider_id: Some(self.provider_id()),
            image_id: None,
            node_name: self
                .status
                .node_ref
                .as_ref()
                .map(|n| n.name.clone())
                .filter(|n| !n.is_empty()),
            allocatable: capacity.clone(),
            capacity,
            created_at: self
                .metadata
                .creation_timestamp
                .as_deref()
                .and_then(capstan_provider_sdk::timestamp::parse_millis),
        }
    }
}

/// `(namespace, name)` of a pending provider ID.
pub fn parse_pending(id: &str) -> Option<(&str, &str)> {
    id.strip_prefix(PENDING_PREFIX)?.split_once('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(value: serde_json::Value) -> Machine {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn provider_ids_real_and_pending() {
        let pending = machine(serde_json::json!({"metadata": {"name": "m1", "namespace": "capi"}}));
        assert_eq!(pending.provider_id(), "clusterapi-pending:///capi/m1");
        assert_eq!(parse_pending(&pending.provider_id()), Some(("capi", "m1")));
        let real = machine(serde_json::json!({
            "metadata": {"name": "m1", "namespace": "capi", "labels": {CLAIM_LABEL: "c1", DEPLOYMENT_LABEL: "md"},
                         "creationTimestamp": "2026-11-26T02:30:48Z"},
            "spec": {"providerID": "aws:///us-east-1a/i-1"},
            "status": {"nodeRef": {"name": "ip-10-0-0-1"}},
        }));
        assert!(real.has_provider_id("aws:///us-east-1a/i-1"));
        assert_eq!(parse_pending("aws:///us-east-1a/i-1"), None);
        let claim = real.to_claim(None);
        assert_eq!(claim.name, "c1");
        assert_eq!(claim.node_name.as_deref(), Some("ip-10-0-0-1"));
        assert_eq!(
            capstan_provider_sdk::lookup(&claim.labels, labels::INSTANCE_TYPE),
            Some("md")
        );
        assert_eq!(claim.created_at, Some(1_795_660_248_000));
    }

    #[test]
    fn leaving_machines() {
        let marked =
            machine(serde_json::json!({"metadata": {"annotations": {DELETE_MACHINE: "yes"}}}));
        assert!(marked.is_leaving());
        let deleting =
            machine(serde_json::json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}));
        assert!(deleting.is_leaving());
        assert!(!machine(serde_json::json!({})).is_leaving());
    }

    #[test]
    fn a_min_size_member_is_held_from_disruption() {
        let annotation = |m: &Machine, key: &str| {
            m.to_claim(None)
                .annotations
                .into_iter()
                .find(|kv| kv.key == key)
                .map(|kv| kv.value)
        };
        let member = machine(serde_json::json!({"metadata": {
            "labels": {DEPLOYMENT_LABEL: "md"},
            "annotations": {MIN_SIZE_MEMBER: "2"},
        }}));
        assert!(member.holds_min_size());
        assert_eq!(
            annotation(&member, HELD_BY_PROVIDER).as_deref(),
            Some("keeps MachineDeployment md at its minimum size (2)")
        );
        let other = machine(serde_json::json!({}));
        assert_eq!(annotation(&other, HELD_BY_PROVIDER), None);
    }

    #[test]
    fn the_owner_is_the_deployment_else_the_set() {
        let of_deployment = machine(serde_json::json!({"metadata": {"labels": {
            DEPLOYMENT_LABEL: "md", "cluster.x-k8s.io/set-name": "md-abc"}}}));
        assert_eq!(of_deployment.owner(), Some((Kind::MachineDeployment, "md")));
        let of_set = machine(
            serde_json::json!({"metadata": {"labels": {"cluster.x-k8s.io/set-name": "ms"}}}),
        );
        assert_eq!(of_set.owner(), Some((Kind::MachineSet, "ms")));
        assert_eq!(of_set.to_claim(None).labels[0].value, "ms");
        assert_eq!(machine(serde_json::json!({})).owner(), None);
    }
}
