//! Node classes of the kinds providers serve (`KWOKNodeClass`, `CloudStackNodeClass`, ...): who
//! serves which kind (the [`Assignment`]) and every object of those kinds, held as the
//! [`NodeClass`] the rest of the host works with: `spec.provider` the serving provider,
//! `spec.parameters` the object's `spec` with its kind ([`kinds::parameters`]), the status
//! conditions the object's own. The node class kinds controller
//! ([`crate::controllers::node_class_kinds`]) fills it; [`super::ClusterState::view`] lists these
//! classes beside the `capstan.dev` ones, under [`class_key`].

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use kube::api::{ApiResource, DynamicObject};

use crate::api::nodeclass::{GROUP, KIND};
use crate::api::shared::Condition;
use crate::api::{NodeClass, NodeClassReference, NodeClassSpec, NodeClassStatus};
use crate::provider::kinds::{self, Assignment, GroupKind, Served};

/// The key of a node class in [`super::View::classes`]: a `capstan.dev` NodeClass's name, or
/// `Kind.group/name` for the other kinds (a `/` no object name has, so the two never collide).
pub fn class_key(reference: &NodeClassReference) -> String {
    if is_capstan(reference) {
        reference.name.clone()
    } else {
        format!("{}.{}/{}", reference.kind, reference.group, reference.name)
    }
}

/// Whether `reference` is to a `capstan.dev` NodeClass.
pub fn is_capstan(reference: &NodeClassReference) -> bool {
    reference.group == GROUP && reference.kind == KIND
}

/// The API resource of a served kind.
pub fn api_resource(kind: &GroupKind, served: &Served) -> ApiResource {
    ApiResource {
        group: kind.group.clone(),
        version: served.version.clone(),
        api_version: format!("{}/{}", kind.group, served.version),
        kind: kind.kind.clone(),
        plural: served.plural.clone(),
    }
}

/// An object of a served kind as a [`NodeClass`].
pub fn to_node_class(object: &DynamicObject, served: &Served) -> NodeClass {
    let conditions: Vec<Condition> = object
        .data
        .pointer("/status/conditions")
        .and_then(serde_json::Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|item| serde_json::from_value(item.clone()).ok())
                .collect()
        })
        .unwrap_or_default();
    NodeClass {
        metadata: object.metadata.clone(),
        spec: NodeClassSpec {
            provider: served.provider.clone(),
            parameters: Some(kinds::parameters(served, object.data.get("spec"))),
        },
        status: Some(NodeClassStatus {
            conditions,
            last_validated: None,
        }),
    }
}

/// The served kinds and their objects.
#[derive(Debug)]
pub struct ServedClasses {
    assignment: RwLock<Arc<Assignment>>,
    objects: RwLock<HashMap<String, Arc<NodeClass>>>,
    changes: tokio::sync::watch::Sender<u64>,
}

impl Default for ServedClasses {
    fn default() -> Self {
        Self {
            assignment: RwLock::default(),
            objects: RwLock::default(),
            changes: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl ServedClasses {
    /// A receiver that sees a new generation after every change of an object or the assignment.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// How many changes there were so far.
    pub fn generation(&self) -> u64 {
        *self.changes.borrow()
    }

    /// Tells the subscribers that something changed.
    pub fn touch(&self) {
        self.changes.send_modify(|generation| *generation += 1);
    }

    /// Who serves what, now.
    pub fn assignment(&self) -> Arc<Assignment> {
        Arc::clone(
            &self
                .assignment
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Replaces the assignment; forgets the objects of kinds no longer served.
    pub fn set_assignment(&self, assignment: Assignment) {
        let served: Vec<String> = assignment
            .kinds
            .keys()
            .map(|gk| format!("{}.{}/", gk.kind, gk.group))
            .collect();
        *self
            .assignment
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(assignment);
        self.objects
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|key, _| served.iter().any(|prefix| key.starts_with(prefix)));
        self.touch();
    }

    /// Who serves the kind `reference` points at, if anyone.
    pub fn serving(&self, reference: &NodeClassReference) -> Option<Served> {
        self.assignment()
            .get(&reference.group, &reference.kind)
            .cloned()
    }

    /// Stores (or replaces) an object of `kind`.
    pub fn insert(&self, kind: &GroupKind, class: NodeClass) {
        let key = key_of(kind, &class);
        self.objects
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, Arc::new(class));
    }

    /// Forgets an object of `kind`.
    pub fn remove(&self, kind: &GroupKind, name: &str) {
        let key = format!("{}.{}/{name}", kind.kind, kind.group);
        self.objects
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key);
    }

    /// Keeps only the objects of `kind` named in `names` (after a watch's re-list).
    pub fn retain(&self, kind: &GroupKind, names: &std::collections::HashSet<String>) {
        let prefix = format!("{}.{}/", kind.kind, kind.group);
        self.objects
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|key, _| match key.strip_prefix(&prefix) {
                Some(name) => names.contains(name),
                None => true,
            });
    }

    /// The object under `key` ([`class_key`]).
    pub fn get(&self, key: &str) -> Option<Arc<NodeClass>> {
        self.objects
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned()
    }

    /// Every object, by [`class_key`].
    pub fn all(&self) -> HashMap<String, Arc<NodeClass>> {
        self.objects
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

fn key_of(kind: &GroupKind, class: &NodeClass) -> String {
    format!(
        "{}.{}/{}",
        kind.kind,
        kind.group,
        class.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served() -> Served {
        Served {
            provider: "kwok".into(),
            version: "v1alpha1".into(),
            plural: "kwoknodeclasses".into(),
            status: true,
            api_version_as: "karpenter.kwok.sh/v1alpha1".into(),
            kind_as: "KWOKNodeClass".into(),
        }
    }

    #[test]
    fn an_object_becomes_a_node_class_of_its_provider() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.kwok.sh/v1alpha1",
            "kind": "KWOKNodeClass",
            "metadata": {"name": "default", "generation": 3},
            "spec": {"nodeRegistrationDelay": "5s"},
            "status": {"conditions": [{
                "type": "Ready", "status": "False", "reason": "TestingNotReady",
                "message": "NodeClass is not ready", "lastTransitionTime": "2024-01-01T01:01:01Z"
            }, {"type": "broken"}]}
        }))
        .unwrap();
        let class = to_node_class(&object, &served());
        assert_eq!(class.spec.provider, "kwok");
        assert_eq!(
            class.spec.parameters.unwrap()["spec"]["nodeRegistrationDelay"],
            "5s"
        );
        let conditions = class.status.unwrap().conditions;
        assert_eq!(conditions.len(), 1, "a malformed condition is skipped");
        assert_eq!(conditions[0].reason.as_deref(), Some("TestingNotReady"));
        assert_eq!(class.metadata.generation, Some(3));
    }

    #[test]
    fn keys_keep_capstan_names_and_set_other_kinds_apart() {
        let reference = |group: &str, kind: &str| NodeClassReference {
            group: group.into(),
            kind: kind.into(),
            name: "default".into(),
        };
        assert_eq!(class_key(&reference("capstan.dev", "NodeClass")), "default");
        assert_eq!(
            class_key(&reference("karpenter.kwok.sh", "KWOKNodeClass")),
            "KWOKNodeClass.karpenter.kwok.sh/default"
        );
    }

    #[test]
    fn objects_follow_the_assignment_and_relists() {
        let store = ServedClasses::default();
        let kind = GroupKind::new("karpenter.kwok.sh", "KWOKNodeClass");
        let mut assignment = Assignment::default();
        assignment.kinds.insert(kind.clone(), served());
        store.set_assignment(assignment.clone());
        for name in ["a", "b"] {
            let mut class = NodeClass::new(
                name,
                NodeClassSpec {
                    provider: "kwok".into(),
                    parameters: None,
                },
            );
            class.metadata.name = Some(name.into());
            store.insert(&kind, class);
        }
        assert_eq!(store.all().len(), 2);
        store.retain(&kind, &["a".to_owned()].into_iter().collect());
        assert!(
            store
                .all()
                .contains_key("KWOKNodeClass.karpenter.kwok.sh/a")
        );
        assert_eq!(store.all().len(), 1);
        store.remove(&kind, "a");
        assert!(store.all().is_empty());
        store.insert(
            &kind,
            NodeClass::new(
                "c",
                NodeClassSpec {
                    provider: "kwok".into(),
                    parameters: None,
                },
            ),
        );
        store.set_assignment(Assignment::default());
        assert!(
            store.all().is_empty(),
            "a kind no longer served drops its objects"
        );
    }
}
