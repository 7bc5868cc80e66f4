//! The Node object kwok "launches": building it from a claim and a chosen offering, and reading a
//! claim back from it. Pure; the kube calls live in [`crate::provider`].

use std::collections::BTreeMap;

use capstan_provider_sdk::{KeyValue, NodeClaim, Resource, Taint, TaintEffect, labels};
use serde::{Deserialize, Serialize};

use crate::selection::Launch;

/// Provider ID scheme: `kwok://<node name>`.
pub const PROVIDER_ID_PREFIX: &str = "kwok://";
/// The ownership mark on every node this provider launched (`list` selects on it). The host
/// stamps it with the Provider's name whatever the body says (`kwok` here), and under an `owned`
/// grant shows this provider only the Nodes carrying its own: a node carrying the label at all is
/// this provider's.
pub const PROVIDER_LABEL: &str = "capstan.dev/provider";
/// The value written in [`PROVIDER_LABEL`] (the host replaces it with the Provider's name).
pub const PROVIDER_NAME: &str = "kwok";
/// Annotation the kwok controller looks for: it then marks the node Ready and keeps its lease.
pub const KWOK_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// The price label Karpenter's kwok provider puts on its nodes (for eks-node-viewer).
pub const NODE_VIEWER_PRICE_LABEL: &str = "eks-node-viewer/instance-price";
/// Annotation: the NodeClass parameters hash at launch (drift).
pub const HASH_ANNOTATION: &str = "kwok.capstan.dev/parameters-hash";
/// Annotation: the image at launch (drift, `image-id`).
pub const IMAGE_ANNOTATION: &str = "kwok.capstan.dev/image-id";
/// Annotation: launch time in milliseconds since the epoch (`created-at`).
pub const CREATED_AT_ANNOTATION: &str = "kwok.capstan.dev/created-at";
/// Annotation: the NodeClass the node was launched from.
pub const NODE_CLASS_ANNOTATION: &str = "kwok.capstan.dev/node-class";
/// Prefix of the annotations reported back on claims.
const ANNOTATION_PREFIX: &str = "kwok.capstan.dev/";

/// The parts of a `v1/Node` this provider writes and reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    /// `v1`.
    #[serde(default)]
    pub api_version: String,
    /// `Node`.
    #[serde(default)]
    pub kind: String,
    /// Name, labels, annotations, timestamps.
    pub metadata: Metadata,
    /// Provider ID and taints.
    #[serde(default)]
    pub spec: Spec,
    /// Capacity and allocatable.
    #[serde(default)]
    pub status: Status,
}

/// `metadata`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// Node name.
    pub name: String,
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Set by the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
    /// Set by the server once deletion started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
}

/// `spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    /// `kwok://<name>`.
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// Taints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<NodeTaint>,
}

/// One `spec.taints` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeTaint {
    /// Key.
    pub key: String,
    /// Value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// `status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Capacity.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, String>,
    /// Allocatable.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, String>,
    /// Architecture and OS, as a kubelet reports them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_info: Option<NodeInfo>,
}

/// `status.nodeInfo` (the fields kwok nodes carry).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    /// CPU architecture.
    #[serde(default)]
    pub architecture: String,
    /// Operating system.
    #[serde(default)]
    pub operating_system: String,
}

/// What the node records about the launch besides the offering.
#[derive(Debug, Clone, Copy)]
pub struct Provenance<'a> {
    /// NodeClass name.
    pub node_class: &'a str,
    /// Parameters hash.
    pub hash: &'a str,
    /// Image ID.
    pub image_id: &'a str,
    /// Launch time, ms since the epoch.
    pub created_at: u64,
}

/// The provider ID of the node named `name`.
pub fn provider_id(name: &str) -> String {
    format!("{PROVIDER_ID_PREFIX}{name}")
}

/// The node name in a kwok provider ID.
pub fn name_from_provider_id(provider_id: &str) -> Option<&str> {
    provider_id
        .strip_prefix(PROVIDER_ID_PREFIX)
        .filter(|name| !name.is_empty())
}

fn taint(t: &Taint) -> NodeTaint {
    NodeTaint {
        key: t.key.clone(),
        value: t.value.clone(),
        effect: t.effect.as_str().to_string(),
    }
}

/// The Node to create for `claim` launched as `launch`.
pub fn build(claim: &NodeClaim, launch: &Launch<'_>, provenance: Provenance<'_>) -> Node {
    let name = claim.name.clone();
    let mut labels_out = BTreeMap::new();
    // Single-valued requirements first, then the claim's labels, then what was actually launched.
    for r in &claim.requirements {
        if r.operator == capstan_provider_sdk::Operator::In
            && let [value] = r.values.as_slice()
        {
            labels_out.insert(r.key.clone(), value.clone());
        }
    }
    for kv in &claim.labels {
        labels_out.insert(kv.key.clone(), kv.value.clone());
    }
    labels_out.extend(launch.entry.node_labels());
    labels_out.insert(labels::ZONE.to_string(), launch.offer.zone.clone());
    labels_out.insert(
        labels::CAPACITY_TYPE.to_string(),
        launch.offer.capacity_type.clone(),
    );
    labels_out.insert(labels::HOSTNAME.to_string(), name.clone());
    if let Some(pool) = &claim.node_pool_name {
        labels_out.insert(labels::NODE_POOL.to_string(), pool.clone());
    }
    labels_out.insert(PROVIDER_LABEL.to_string(), PROVIDER_NAME.to_string());
    // As Karpenter's kwok provider labels its nodes: the kwok marker, and the price for
    // eks-node-viewer (Go's `%f`: six decimals).
    labels_out.insert(KWOK_ANNOTATION.to_string(), "fake".to_string());
    labels_out.insert(
        NODE_VIEWER_PRICE_LABEL.to_string(),
        format!("{:.6}", launch.offer.price),
    );

    let annotations = BTreeMap::from([
        (KWOK_ANNOTATION.to_string(), "fake".to_string()),
        (HASH_ANNOTATION.to_string(), provenance.hash.to_string()),
        (
            IMAGE_ANNOTATION.to_string(),
            provenance.image_id.to_string(),
        ),
        (
            CREATED_AT_ANNOTATION.to_string(),
            provenance.created_at.to_string(),
        ),
        (
            NODE_CLASS_ANNOTATION.to_string(),
            provenance.node_class.to_string(),
        ),
    ]);

    let mut taints = vec![NodeTaint {
        key: labels::UNREGISTERED_TAINT.to_string(),
        value: None,
        effect: TaintEffect::NoExecute.as_str().to_string(),
    }];
    for t in claim.taints.iter().chain(&claim.startup_taints).map(taint) {
        if !taints
            .iter()
            .any(|x| x.key == t.key && x.effect == t.effect)
        {
            taints.push(t);
        }
    }

    let quantities = |list: &capstan_provider_sdk::ResourceList| {
        list.iter()
            .map(|(k, q)| (k.to_string(), q.to_string()))
            .collect::<BTreeMap<_, _>>()
    };
    Node {
        api_version: "v1".to_string(),
        kind: "Node".to_string(),
        metadata: Metadata {
            name: name.clone(),
            labels: labels_out,
            annotations,
            creation_timestamp: None,
            deletion_timestamp: None,
        },
        spec: Spec {
            provider_id: Some(provider_id(&name)),
            taints,
        },
        status: Status {
            capacity: quantities(&launch.entry.capacity),
            allocatable: quantities(&launch.entry.allocatable()),
            node_info: Some(NodeInfo {
                architecture: launch.entry.arch.clone(),
                operating_system: launch.entry.os.first().cloned().unwrap_or_default(),
            }),
        },
    }
}

impl Node {
    /// Whether this provider launched the node: it carries an ownership mark (under an `owned`
    /// grant the host shows this provider only Nodes carrying its own).
    pub fn is_managed(&self) -> bool {
        self.metadata.labels.contains_key(PROVIDER_LABEL)
    }

    /// Whether deletion has started.
    pub fn is_deleting(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    /// The annotation `key`.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata.annotations.get(key).map(String::as_str)
    }

    /// The node as a claim: labels, provider ID, image, capacity, allocatable, creation time, and
    /// this provider's annotations. Taints exclude `karpenter.sh/unregistered`.
    pub fn to_claim(&self) -> NodeClaim {
        let pairs = |map: &BTreeMap<String, String>| -> Vec<KeyValue> {
            map.iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
                .collect()
        };
        let resources = |map: &BTreeMap<String, String>| -> Vec<Resource> {
            map.iter()
                .map(|(k, v)| Resource::new(k.clone(), v.clone()))
                .collect()
        };
        let created_at = self
            .annotation(CREATED_AT_ANNOTATION)
            .and_then(|v| v.parse::<u64>().ok())
            .or_else(|| {
                self.metadata
                    .creation_timestamp
                    .as_deref()
                    .and_then(capstan_provider_sdk::timestamp::parse_millis)
            });
        NodeClaim {
            name: self.metadata.name.clone(),
            node_pool_name: self.metadata.labels.get(labels::NODE_POOL).cloned(),
            labels: pairs(&self.metadata.labels),
            annotations: self
                .metadata
                .annotations
                .iter()
                .filter(|(k, _)| k.starts_with(ANNOTATION_PREFIX))
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
                .collect(),
            taints: self
                .spec
                .taints
                .iter()
                .filter(|t| t.key != labels::UNREGISTERED_TAINT)
                .filter_map(|t| {
                    Some(Taint::new(
                        t.key.clone(),
                        t.value.clone(),
                        TaintEffect::parse(&t.effect)?,
                    ))
                })
                .collect(),
            startup_taints: Vec::new(),
            requirements: Vec::new(),
            requests: Vec::new(),
            provider_id: Some(
                self.spec
                    .provider_id
                    .clone()
                    .unwrap_or_else(|| provider_id(&self.metadata.name)),
            ),
            image_id: self.annotation(IMAGE_ANNOTATION).map(str::to_string),
            node_name: Some(self.metadata.name.clone()),
            capacity: resources(&self.status.capacity),
            allocatable: resources(&self.status.allocatable),
            created_at,
        }
    }
}

/// The claim `create` returns: what the node says, plus the input claim's own requirements,
/// requests, taints and startup taints, and its annotations under the node's.
pub fn launched_claim(node: &Node, input: &NodeClaim) -> NodeClaim {
    let mut out = node.to_claim();
    let mut annotations = input.annotations.clone();
    annotations.retain(|kv| !out.annotations.iter().any(|o| o.key == kv.key));
    annotations.append(&mut out.annotations);
    NodeClaim {
        node_pool_name: out.node_pool_name.or_else(|| input.node_pool_name.clone()),
        annotations,
        taints: input.taints.clone(),
        startup_taints: input.startup_taints.clone(),
        requirements: input.requirements.clone(),
        requests: input.requests.clone(),
        ..out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;
    use crate::params::Parameters;
    use crate::selection;
    use capstan_provider_sdk::{Requirement, Requirements, ResourceList};

    fn claim() -> NodeClaim {
        NodeClaim {
            name: "default-abc12".into(),
            node_pool_name: Some("default".into()),
            labels: vec![
                KeyValue::new("team", "a"),
                KeyValue::new(labels::NODE_POOL, "default"),
            ],
            annotations: vec![KeyValue::new("example.com/note", "x")],
            taints: vec![Taint::new(
                "dedicated",
                Some("gpu".into()),
                TaintEffect::NoSchedule,
            )],
            startup_taints: vec![Taint::new("init", None, TaintEffect::NoExecute)],
            requirements: vec![
                Requirement::in_(labels::CAPACITY_TYPE, ["on-demand"]),
                Requirement::in_("tier", ["web"]),
            ],
            requests: vec![Resource::new("cpu", "1500m")],
            provider_id: None,
            image_id: None,
            node_name: None,
            capacity: Vec::new(),
            allocatable: Vec::new(),
            created_at: None,
        }
    }

    fn build_node() -> Node {
        let cat = catalog::build(&Parameters::default()).unwrap();
        let c = claim();
        let reqs = Requirements::from_slice(&c.requirements).unwrap();
        let requests = ResourceList::from_resources(&c.requests).unwrap();
        let launch = selection::cheapest(&cat, &reqs, &requests).unwrap();
        build(
            &c,
            &launch,
            Provenance {
                node_class: "default",
                hash: "0123456789abcdef",
                image_id: "img-1",
                created_at: 1_700_000_000_000,
            },
        )
    }

    #[test]
    fn node_carries_labels_annotations_taints_and_status() {
        let node = build_node();
        let l = &node.metadata.labels;
        assert_eq!(l[labels::INSTANCE_TYPE], "c-2x-amd64-linux");
        assert_eq!(l[labels::ZONE], "test-zone-a");
        assert_eq!(l[labels::REGION], "test-region");
        assert_eq!(l[labels::ARCH], "amd64");
        assert_eq!(l[labels::OS], "linux");
        assert_eq!(l[labels::HOSTNAME], "default-abc12");
        assert_eq!(l[labels::CAPACITY_TYPE], "on-demand");
        assert_eq!(l[labels::NODE_POOL], "default");
        assert_eq!(l["team"], "a");
        assert_eq!(l["tier"], "web");
        assert_eq!(l[PROVIDER_LABEL], "kwok");
        assert_eq!(node.annotation(KWOK_ANNOTATION), Some("fake"));
        assert_eq!(node.metadata.labels[KWOK_ANNOTATION], "fake");
        assert!(node.metadata.labels.contains_key(NODE_VIEWER_PRICE_LABEL));
        assert_eq!(node.annotation(HASH_ANNOTATION), Some("0123456789abcdef"));
        assert_eq!(node.annotation(IMAGE_ANNOTATION), Some("img-1"));
        assert_eq!(
            node.spec.provider_id.as_deref(),
            Some("kwok://default-abc12")
        );
        let taints: Vec<(&str, &str)> = node
            .spec
            .taints
            .iter()
            .map(|t| (t.key.as_str(), t.effect.as_str()))
            .collect();
        assert_eq!(
            taints,
            vec![
                ("karpenter.sh/unregistered", "NoExecute"),
                ("dedicated", "NoSchedule"),
                ("init", "NoExecute")
            ]
        );
        assert_eq!(node.status.capacity["cpu"], "2");
        assert_eq!(node.status.capacity["memory"], "4Gi");
        assert_eq!(node.status.allocatable["cpu"], "1900m");
        assert_eq!(node.status.allocatable["memory"], "4086Mi");
        assert!(node.is_managed() && !node.is_deleting());

        let json = serde_json::to_value(&node).unwrap();
        assert_eq!(json["apiVersion"], "v1");
        assert_eq!(json["kind"], "Node");
        assert_eq!(json["spec"]["providerID"], "kwok://default-abc12");
        assert_eq!(json["status"]["nodeInfo"]["operatingSystem"], "linux");
        assert!(json["metadata"].get("creationTimestamp").is_none());
    }

    #[test]
    fn claims_read_back_from_nodes() {
        let node = build_node();
        let c = node.to_claim();
        assert_eq!(c.provider_id.as_deref(), Some("kwok://default-abc12"));
        assert_eq!(c.node_name.as_deref(), Some("default-abc12"));
        assert_eq!(c.image_id.as_deref(), Some("img-1"));
        assert_eq!(c.created_at, Some(1_700_000_000_000));
        assert_eq!(c.node_pool_name.as_deref(), Some("default"));
        assert!(c.taints.iter().all(|t| t.key != labels::UNREGISTERED_TAINT));
        assert!(
            c.annotations
                .iter()
                .all(|a| a.key.starts_with("kwok.capstan.dev/"))
        );
        assert!(
            c.capacity
                .iter()
                .any(|r| r.name == "pods" && r.quantity == "32")
        );

        let launched = launched_claim(&node, &claim());
        assert_eq!(launched.requests, claim().requests);
        assert_eq!(launched.taints, claim().taints);
        assert!(
            launched
                .annotations
                .iter()
                .any(|a| a.key == "example.com/note")
        );
        assert!(
            launched
                .annotations
                .iter()
                .any(|a| a.key == HASH_ANNOTATION)
        );

        let mut server = node.clone();
        server.metadata.annotations.remove(CREATED_AT_ANNOTATION);
        server.metadata.creation_timestamp = Some("2024-11-25T23:21:05Z".into());
        assert_eq!(server.to_claim().created_at, Some(1_732_576_865_000));
    }

    #[test]
    fn provider_ids() {
        assert_eq!(provider_id("n"), "kwok://n");
        assert_eq!(name_from_provider_id("kwok://n"), Some("n"));
        assert_eq!(name_from_provider_id("kwok://"), None);
        assert_eq!(name_from_provider_id("aws:///us-east-1a/i-1"), None);
    }

    #[test]
    fn parses_a_server_node() {
        let json = r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n","uid":"u",
            "labels":{"capstan.dev/provider":"kwok"},"creationTimestamp":"2024-11-25T23:21:05Z",
            "deletionTimestamp":"2024-11-25T23:22:05Z"},
            "spec":{"providerID":"kwok://n","taints":[{"key":"k","effect":"NoSchedule","timeAdded":null}]},
            "status":{"capacity":{"cpu":"2"},"conditions":[{"type":"Ready","status":"True"}]}}"#;
        let node: Node = serde_json::from_str(json).unwrap();
        assert!(node.is_managed() && node.is_deleting());
        assert_eq!(node.to_claim().taints.len(), 1);
    }
}
