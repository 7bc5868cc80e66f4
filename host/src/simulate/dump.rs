//! Reading a cluster dump: the output of `kubectl get nodes,pods,nodepools,nodeclaims,daemonsets,
//! pdb -A -o json` (a `List`), of `kubectl get nodeclasses,namespaces -o yaml`, single objects, or
//! several YAML documents, from one file or several, into a [`View`] as the host's caches would
//! hold it. Dynamic Resource Allocation's objects (`resourceclaims,resourceclaimtemplates,
//! deviceclasses,resourceslices`) make pods' ResourceClaims part of the simulation; a dump with
//! none of them leaves pods with ResourceClaims out, as `--ignore-dra-requests` does.
//!
//! Kinds the simulation does not read (Deployments, Karpenter's `EC2NodeClass`, Events, ...) are
//! counted and skipped. An object of a kind it reads that does not parse is an error naming the
//! file, the object's place in it and its kind and name.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::ResourceExt;
use serde::de::DeserializeOwned;

use crate::api::nodeclass::{GROUP as NODECLASS_GROUP, KIND as NODECLASS_KIND};
use crate::api::{NodeClaim, NodeClass, NodeClassSpec, NodeOverlay, NodePool};
use crate::rules::selector::Selector;
use crate::state::{DraView, View};

use super::StandIn;

/// The label the API server puts on every namespace: its name.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Why a dump (or a stand-in NodeClass) cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DumpError {
    /// The file is neither JSON nor YAML.
    #[error("{file}: not JSON or YAML: {error}")]
    Syntax { file: String, error: String },
    /// An entry is not a Kubernetes object (no `apiVersion` or `kind`).
    #[error("{file}: {at}: not a Kubernetes object (no apiVersion and kind)")]
    NotAnObject { file: String, at: String },
    /// An object of a kind the simulation reads does not parse as that kind.
    #[error("{file}: {at} ({kind} {name}): {error}")]
    Object {
        file: String,
        at: String,
        kind: String,
        name: String,
        error: String,
    },
    /// The same object twice, with different contents.
    #[error("{file}: {at}: {kind} {name} appears twice with different contents")]
    Conflict {
        file: String,
        at: String,
        kind: String,
        name: String,
    },
    /// A stand-in NodeClass is not usable.
    #[error("{file}: {error}")]
    StandIn { file: String, error: String },
}

/// Objects read from one or more dump files.
#[derive(Debug, Default, Clone)]
pub struct Dump {
    nodes: BTreeMap<String, Node>,
    pods: BTreeMap<(String, String), Pod>,
    claims: BTreeMap<String, NodeClaim>,
    pools: BTreeMap<String, NodePool>,
    classes: BTreeMap<String, NodeClass>,
    daemonsets: BTreeMap<(String, String), DaemonSet>,
    pdbs: BTreeMap<(String, String), PodDisruptionBudget>,
    namespaces: BTreeMap<String, Namespace>,
    volume_claims: BTreeMap<(String, String), PersistentVolumeClaim>,
    volumes: BTreeMap<String, PersistentVolume>,
    storage_classes: BTreeMap<String, StorageClass>,
    csi_nodes: BTreeMap<String, CSINode>,
    overlays: BTreeMap<String, NodeOverlay>,
    resource_claims: BTreeMap<(String, String), ResourceClaim>,
    claim_templates: BTreeMap<(String, String), ResourceClaimTemplate>,
    device_classes: BTreeMap<String, DeviceClass>,
    resource_slices: BTreeMap<String, ResourceSlice>,
    /// Objects of other kinds, by `apiVersion/kind`: how many were skipped.
    pub skipped: BTreeMap<String, usize>,
}

/// What [`Dump::view`] holds, counted (for the report).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    pub nodes: usize,
    pub pods: usize,
    pub node_pools: usize,
    pub node_claims: usize,
    pub node_classes: usize,
    pub daemon_sets: usize,
    pub pod_disruption_budgets: usize,
    pub namespaces: usize,
}

/// Where an entry is in its file, for messages: `items[3]`, `document 2`, `items[0].items[1]`.
fn place(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_owned()
    } else {
        format!("{parent}.{child}")
    }
}

impl Dump {
    /// An empty dump.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads the objects of one file's text (`file` names it in errors): JSON or YAML, a `List`
    /// or single objects, several YAML documents.
    pub fn add_text(&mut self, file: &str, text: &str) -> Result<(), DumpError> {
        let trimmed = text.trim_start();
        let documents: Vec<serde_json::Value> =
            if trimmed.starts_with('{') || trimmed.starts_with('[') {
                match serde_json::from_str(text) {
                    Ok(value) => vec![value],
                    Err(json_error) => {
                        serde_saphyr::from_multiple(text).map_err(|_| DumpError::Syntax {
                            file: file.to_owned(),
                            error: json_error.to_string(),
                        })?
                    }
                }
            } else {
                serde_saphyr::from_multiple(text).map_err(|err| DumpError::Syntax {
                    file: file.to_owned(),
                    error: err.to_string(),
                })?
            };
        let several = documents.len() > 1;
        for (i, document) in documents.into_iter().enumerate() {
            let at = if several {
                format!("document {}", i + 1)
            } else {
                String::new()
            };
            self.add_value(file, &at, document)?;
        }
        Ok(())
    }

    fn add_value(
        &mut self,
        file: &str,
        at: &str,
        value: serde_json::Value,
    ) -> Result<(), DumpError> {
        match value {
            // An empty YAML document.
            serde_json::Value::Null => Ok(()),
            serde_json::Value::Array(items) => {
                for (i, item) in items.into_iter().enumerate() {
                    self.add_value(file, &place(at, &format!("[{i}]")), item)?;
                }
                Ok(())
            }
            serde_json::Value::Object(mut map) => {
                let kind = map.get("kind").and_then(|k| k.as_str()).map(str::to_owned);
                let api_version = map
                    .get("apiVersion")
                    .and_then(|k| k.as_str())
                    .map(str::to_owned);
                let is_list = kind.as_deref().is_some_and(|k| k.ends_with("List"))
                    && map.get("items").is_some_and(serde_json::Value::is_array);
                if is_list {
                    let Some(serde_json::Value::Array(items)) = map.remove("items") else {
                        return Ok(());
                    };
                    for (i, item) in items.into_iter().enumerate() {
                        self.add_value(file, &place(at, &format!("items[{i}]")), item)?;
                    }
                    return Ok(());
                }
                let (Some(kind), Some(api_version)) = (kind, api_version) else {
                    return Err(DumpError::NotAnObject {
                        file: file.to_owned(),
                        at: if at.is_empty() {
                            "the file".to_owned()
                        } else {
                            at.to_owned()
                        },
                    });
                };
                self.add_object(
                    file,
                    at,
                    &api_version,
                    &kind,
                    serde_json::Value::Object(map),
                )
            }
            _ => Err(DumpError::NotAnObject {
                file: file.to_owned(),
                at: if at.is_empty() {
                    "the file".to_owned()
                } else {
                    at.to_owned()
                },
            }),
        }
    }

    fn add_object(
        &mut self,
        file: &str,
        at: &str,
        api_version: &str,
        kind: &str,
        value: serde_json::Value,
    ) -> Result<(), DumpError> {
        let name = value
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .unwrap_or("(no name)")
            .to_owned();
        let at = if at.is_empty() { "the object" } else { at };
        let ctx = Place {
            file,
            at,
            kind,
            name: &name,
        };
        match (api_version, kind) {
            ("v1", "Node") => insert(&ctx, &mut self.nodes, value, |n: &Node| n.name_any()),
            ("v1", "Pod") => insert(&ctx, &mut self.pods, value, namespaced),
            ("v1", "Namespace") => insert(&ctx, &mut self.namespaces, value, |n: &Namespace| {
                n.name_any()
            }),
            ("karpenter.sh/v1", "NodePool") => {
                insert(&ctx, &mut self.pools, value, |p: &NodePool| p.name_any())
            }
            ("karpenter.sh/v1", "NodeClaim") => {
                insert(&ctx, &mut self.claims, value, |c: &NodeClaim| c.name_any())
            }
            ("karpenter.sh/v1alpha1", "NodeOverlay") => {
                insert(&ctx, &mut self.overlays, value, |o: &NodeOverlay| {
                    o.name_any()
                })
            }
            ("capstan.dev/v1alpha1", "NodeClass") => {
                insert(&ctx, &mut self.classes, value, |c: &NodeClass| c.name_any())
            }
            ("apps/v1", "DaemonSet") => insert(&ctx, &mut self.daemonsets, value, namespaced),
            ("policy/v1", "PodDisruptionBudget") => insert(&ctx, &mut self.pdbs, value, namespaced),
            ("v1", "PersistentVolumeClaim") => {
                insert(&ctx, &mut self.volume_claims, value, namespaced)
            }
            ("v1", "PersistentVolume") => {
                insert(&ctx, &mut self.volumes, value, |v: &PersistentVolume| {
                    v.name_any()
                })
            }
            ("storage.k8s.io/v1", "StorageClass") => insert(
                &ctx,
                &mut self.storage_classes,
                value,
                |c: &StorageClass| c.name_any(),
            ),
            ("storage.k8s.io/v1", "CSINode") => {
                insert(&ctx, &mut self.csi_nodes, value, |c: &CSINode| c.name_any())
            }
            ("resource.k8s.io/v1", "ResourceClaim") => {
                insert(&ctx, &mut self.resource_claims, value, namespaced)
            }
            ("resource.k8s.io/v1", "ResourceClaimTemplate") => {
                insert(&ctx, &mut self.claim_templates, value, namespaced)
            }
            ("resource.k8s.io/v1", "DeviceClass") => {
                insert(&ctx, &mut self.device_classes, value, |c: &DeviceClass| {
                    c.name_any()
                })
            }
            ("resource.k8s.io/v1", "ResourceSlice") => insert(
                &ctx,
                &mut self.resource_slices,
                value,
                |s: &ResourceSlice| s.name_any(),
            ),
            _ => {
                tracing::debug!(
                    file,
                    at,
                    api_version,
                    kind,
                    name,
                    "skipped: not a kind the simulation reads"
                );
                *self
                    .skipped
                    .entry(format!("{api_version}/{kind}"))
                    .or_default() += 1;
                Ok(())
            }
        }
    }

    /// Adds a NodeClass that stands in for the non-Capstan node classes pools refer to (see
    /// [`Dump::map_node_classes`]). A dumped NodeClass of the same name is an error.
    pub fn add_stand_in(&mut self, file: &str, class: NodeClass) -> Result<(), DumpError> {
        let name = class.name_any();
        if let Some(existing) = self.classes.get(&name)
            && *existing != class
        {
            return Err(DumpError::StandIn {
                file: file.to_owned(),
                error: format!(
                    "NodeClass {name} is in the dump too; give the stand-in another metadata.name"
                ),
            });
        }
        self.classes.insert(name, class);
        Ok(())
    }

    /// Points the pools that refer to a node class other than Capstan's at their stand-in:
    /// `by_name` maps the referenced name to a stand-in NodeClass, `for_all` serves the rest.
    /// Returns the pools changed.
    pub fn map_node_classes(
        &mut self,
        by_name: &HashMap<String, String>,
        for_all: Option<&str>,
    ) -> Vec<StandIn> {
        let mut changed = Vec::new();
        for (pool_name, pool) in &mut self.pools {
            let reference = &mut pool.spec.template.spec.node_class_ref;
            if reference.group == NODECLASS_GROUP && reference.kind == NODECLASS_KIND {
                continue;
            }
            let Some(stand_in) = by_name.get(&reference.name).map(String::as_str).or(for_all)
            else {
                continue;
            };
            changed.push(StandIn {
                node_pool: pool_name.clone(),
                node_class_ref: format!(
                    "{}/{} {}",
                    reference.group, reference.kind, reference.name
                ),
                referenced: reference.name.clone(),
                node_class: stand_in.to_owned(),
            });
            reference.group = NODECLASS_GROUP.to_owned();
            reference.kind = NODECLASS_KIND.to_owned();
            reference.name = stand_in.to_owned();
        }
        changed
    }

    /// The NodeOverlays of the dump (applied with `--feature-gates NodeOverlay=true`).
    pub fn overlays(&self) -> impl Iterator<Item = &NodeOverlay> {
        self.overlays.values()
    }

    /// How many objects of each kind the dump holds.
    pub fn counts(&self) -> Counts {
        Counts {
            nodes: self.nodes.len(),
            pods: self.pods.len(),
            node_pools: self.pools.len(),
            node_claims: self.claims.len(),
            node_classes: self.classes.len(),
            daemon_sets: self.daemonsets.len(),
            pod_disruption_budgets: self.pdbs.len(),
            namespaces: self.namespaces.len(),
        }
    }

    /// The dump as the host's caches would hold it with `--selector selector`: every Node, Pod,
    /// NodeClass, DaemonSet and PodDisruptionBudget; the NodeClaims and NodePools the selector
    /// matches. A namespace a pod uses that the dump lacks gets the label every namespace has
    /// (`kubernetes.io/metadata.name`).
    pub fn view(&self, selector: &Selector) -> View {
        let mut namespaces: BTreeMap<String, BTreeMap<String, String>> = self
            .namespaces
            .values()
            .map(|n| (n.name_any(), n.labels().clone()))
            .collect();
        for (namespace, _) in self.pods.keys() {
            namespaces.entry(namespace.clone()).or_insert_with(|| {
                BTreeMap::from([(NAMESPACE_NAME_LABEL.to_owned(), namespace.clone())])
            });
        }
        View {
            nodes: self.nodes.values().cloned().map(Arc::new).collect(),
            pods: self.pods.values().cloned().map(Arc::new).collect(),
            claims: self
                .claims
                .values()
                .filter(|c| selector.matches(c.labels()))
                .cloned()
                .map(Arc::new)
                .collect(),
            pools: self
                .pools
                .values()
                .filter(|p| selector.matches(p.labels()))
                .cloned()
                .map(Arc::new)
                .collect(),
            rejected_pools: BTreeMap::new(),
            classes: self
                .classes
                .iter()
                .map(|(name, c)| (name.clone(), Arc::new(c.clone())))
                .collect(),
            daemonsets: self.daemonsets.values().cloned().map(Arc::new).collect(),
            pdbs: self.pdbs.values().cloned().map(Arc::new).collect(),
            namespaces,
            volume_claims: self.volume_claims.values().cloned().map(Arc::new).collect(),
            volumes: self.volumes.values().cloned().map(Arc::new).collect(),
            storage_classes: self
                .storage_classes
                .values()
                .cloned()
                .map(Arc::new)
                .collect(),
            csi_nodes: self.csi_nodes.values().cloned().map(Arc::new).collect(),
            // A dump carries no kube-scheduler configuration.
            default_spread: None,
            dra: self.dra(),
        }
    }
}

impl Dump {
    /// Dynamic Resource Allocation's objects, if the dump has any (without them, pods with
    /// ResourceClaims are left out, as with `--ignore-dra-requests`).
    fn dra(&self) -> Option<DraView> {
        let none = self.resource_claims.is_empty()
            && self.claim_templates.is_empty()
            && self.device_classes.is_empty()
            && self.resource_slices.is_empty();
        (!none).then(|| DraView {
            claims: self
                .resource_claims
                .values()
                .cloned()
                .map(Arc::new)
                .collect(),
            templates: self
                .claim_templates
                .values()
                .cloned()
                .map(Arc::new)
                .collect(),
            classes: self
                .device_classes
                .values()
                .cloned()
                .map(Arc::new)
                .collect(),
            slices: self
                .resource_slices
                .values()
                .cloned()
                .map(Arc::new)
                .collect(),
        })
    }
}

/// Where an object is, for errors.
struct Place<'a> {
    file: &'a str,
    at: &'a str,
    kind: &'a str,
    name: &'a str,
}

fn namespaced<K: ResourceExt>(object: &K) -> (String, String) {
    (object.namespace().unwrap_or_default(), object.name_any())
}

/// Parses `value` as `K` and keeps it under `key_of`; the same object twice (several files of
/// overlapping dumps) is fine when identical.
fn insert<K, Key>(
    place: &Place<'_>,
    into: &mut BTreeMap<Key, K>,
    value: serde_json::Value,
    key_of: impl Fn(&K) -> Key,
) -> Result<(), DumpError>
where
    K: DeserializeOwned + PartialEq,
    Key: Ord,
{
    let object: K = serde_json::from_value(value).map_err(|err| DumpError::Object {
        file: place.file.to_owned(),
        at: place.at.to_owned(),
        kind: place.kind.to_owned(),
        name: place.name.to_owned(),
        error: err.to_string(),
    })?;
    let key = key_of(&object);
    if let Some(existing) = into.get(&key)
        && *existing != object
    {
        return Err(DumpError::Conflict {
            file: place.file.to_owned(),
            at: place.at.to_owned(),
            kind: place.kind.to_owned(),
            name: place.name.to_owned(),
        });
    }
    into.insert(key, object);
    Ok(())
}

/// Reads a stand-in NodeClass (`--node-class`, `--node-class-for-all`): a whole
/// `capstan.dev/v1alpha1` NodeClass, or only its spec (`provider`, `parameters`), which is then
/// named `default_name`.
pub fn stand_in(file: &str, text: &str, default_name: &str) -> Result<NodeClass, DumpError> {
    let bad = |error: String| DumpError::StandIn {
        file: file.to_owned(),
        error,
    };
    let value: serde_json::Value =
        serde_saphyr::from_str(text).map_err(|err| bad(format!("not JSON or YAML: {err}")))?;
    if value.get("kind").is_some() {
        let kind = value
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or_default();
        let api_version = value
            .get("apiVersion")
            .and_then(|k| k.as_str())
            .unwrap_or_default();
        if kind != NODECLASS_KIND || api_version != "capstan.dev/v1alpha1" {
            return Err(bad(format!(
                "{api_version}/{kind} is not a capstan.dev/v1alpha1 NodeClass"
            )));
        }
        let mut class: NodeClass =
            serde_json::from_value(value).map_err(|err| bad(format!("NodeClass: {err}")))?;
        if class.metadata.name.as_deref().is_none_or(str::is_empty) {
            class.metadata.name = Some(default_name.to_owned());
        }
        return Ok(class);
    }
    let spec: NodeClassSpec = serde_json::from_value(value)
        .map_err(|err| bad(format!("NodeClass spec (provider, parameters): {err}")))?;
    Ok(NodeClass::new(default_name, spec))
}

#[cfg(test)]
mod tests;
