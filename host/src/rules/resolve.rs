//! From a `nodeClassRef` to the node class and its provider, against node classes already read: a
//! `capstan.dev` NodeClass names its provider in `spec.provider`; an object of a kind a provider
//! serves (`KWOKNodeClass`, ...) belongs to that provider ([`crate::state::served`]). The
//! controllers' lookups on the API server are in `controllers::resolve`.

use std::collections::HashMap;
use std::sync::Arc;

use crate::api::nodeclass::{GROUP, KIND};
use crate::api::shared::find_condition;
use crate::api::{ConditionStatus, NodeClass, NodeClassReference};
use crate::provider::Registry;
use crate::provider::kinds::GroupKind;
use crate::runtime::ProviderPre;
use crate::state::served::{class_key, is_capstan};

/// Why a reference leads to no provider. Each has a condition reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unresolved {
    /// The reference is not to a `capstan.dev` NodeClass.
    #[error(
        "nodeClassRef {group}/{kind} {name} is neither a {GROUP} {KIND} nor a kind a loaded provider serves"
    )]
    UnsupportedNodeClassRef {
        /// Its group.
        group: String,
        /// Its kind.
        kind: String,
        /// Its name.
        name: String,
    },
    /// No such NodeClass.
    #[error("NodeClass {0} not found")]
    NodeClassNotFound(String),
    /// No such object of a kind a provider serves. As in Karpenter, a claim that cannot launch
    /// for this is deleted.
    #[error("{kind} {name} not found")]
    ServedNodeClassNotFound {
        /// `Kind.group`.
        kind: String,
        /// Its name.
        name: String,
    },
    /// An object of a kind a provider serves whose `Ready` condition is `False`. As in
    /// Karpenter, a claim that cannot launch for this is deleted.
    #[error("{kind} {name} is not ready: {message}")]
    NodeClassNotReady {
        /// `Kind.group`.
        kind: String,
        /// Its name.
        name: String,
        /// Its `Ready` condition's message.
        message: String,
    },
    /// The NodeClass names a provider that is not loaded.
    #[error("NodeClass {node_class} uses provider {provider}, which is not loaded")]
    ProviderNotFound {
        /// The NodeClass.
        node_class: String,
        /// Its provider.
        provider: String,
    },
}

impl Unresolved {
    /// The condition and Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Unresolved::UnsupportedNodeClassRef { .. }
            | Unresolved::NodeClassNotFound(_)
            | Unresolved::ServedNodeClassNotFound { .. } => "NodeClassNotFound",
            Unresolved::NodeClassNotReady { .. } => "NodeClassNotReady",
            Unresolved::ProviderNotFound { .. } => "ProviderNotFound",
        }
    }

    /// Whether a claim that cannot launch for this is deleted, as Karpenter does (its kwok
    /// provider answers a missing node class with insufficient capacity, one whose `Ready` is
    /// `False` with `NodeClassNotReady`): the Event reason and the disruption metric's reason.
    /// A missing `capstan.dev` NodeClass keeps the claim waiting, as it always did.
    pub fn deletes_claim(&self) -> Option<(&'static str, &'static str)> {
        match self {
            Unresolved::ServedNodeClassNotFound { .. } => {
                Some(("InsufficientCapacityError", "insufficient_capacity"))
            }
            Unresolved::NodeClassNotReady { .. } => {
                Some(("NodeClassNotReady", "nodeclass_not_ready"))
            }
            _ => None,
        }
    }
}

pub fn unsupported(reference: &NodeClassReference) -> Unresolved {
    Unresolved::UnsupportedNodeClassRef {
        group: reference.group.clone(),
        kind: reference.kind.clone(),
        name: reference.name.clone(),
    }
}

pub fn served_not_found(reference: &NodeClassReference) -> Unresolved {
    Unresolved::ServedNodeClassNotFound {
        kind: GroupKind::new(&reference.group, &reference.kind).to_string(),
        name: reference.name.clone(),
    }
}

/// A reference resolved.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The NodeClass (the cluster state's copy, shared).
    pub node_class: Arc<NodeClass>,
    /// The provider's name.
    pub provider_name: String,
    /// The provider.
    pub provider: Arc<ProviderPre>,
}

/// Resolves `reference` against NodeClasses already read (the cluster state's, or a dump's),
/// with the providers of `registry`; `classes` are keyed by [`class_key`].
pub fn resolve_with(
    registry: &Registry,
    reference: &NodeClassReference,
    classes: &HashMap<String, Arc<NodeClass>>,
) -> Result<Resolved, Unresolved> {
    let node_class = match classes.get(&class_key(reference)) {
        Some(class) => Arc::clone(class),
        None if is_capstan(reference) => {
            return Err(Unresolved::NodeClassNotFound(reference.name.clone()));
        }
        None => return Err(served_not_found(reference)),
    };
    with_provider(registry, reference, node_class)
}

/// [`resolve_with`] where no cluster tells which kinds are served (`capstan simulate`): a kind no
/// provider of `registry` declares is an unsupported reference, not a missing node class.
pub fn resolve_offline(
    registry: &Registry,
    reference: &NodeClassReference,
    classes: &HashMap<String, Arc<NodeClass>>,
) -> Result<Resolved, Unresolved> {
    if !is_capstan(reference) && !declared_by_any(registry, reference) {
        return Err(unsupported(reference));
    }
    resolve_with(registry, reference, classes)
}

/// Whether a provider of `registry` declares the kind `reference` names.
fn declared_by_any(registry: &Registry, reference: &NodeClassReference) -> bool {
    registry.all().iter().any(|(_, provider)| {
        provider
            .node_class_kinds()
            .iter()
            .any(|k| k.group == reference.group && k.kind == reference.kind)
    })
}

pub fn with_provider(
    registry: &Registry,
    reference: &NodeClassReference,
    node_class: Arc<NodeClass>,
) -> Result<Resolved, Unresolved> {
    let provider_name = node_class.spec.provider.clone();
    match registry.get(&provider_name) {
        Some(provider) => Ok(Resolved {
            node_class,
            provider_name,
            provider,
        }),
        None => Err(Unresolved::ProviderNotFound {
            node_class: reference.name.clone(),
            provider: provider_name,
        }),
    }
}

/// A served node class whose `Ready` condition is `False` cannot launch:
/// [`Unresolved::NodeClassNotReady`] (a `capstan.dev` NodeClass launches whatever its status, its
/// provider's `create` decides).
pub fn ready_for_launch(
    reference: &NodeClassReference,
    resolved: Resolved,
) -> Result<Resolved, Unresolved> {
    if is_capstan(reference) {
        return Ok(resolved);
    }
    let conditions = resolved
        .node_class
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    match find_condition(conditions, "Ready") {
        Some(ready) if ready.status == ConditionStatus::False => {
            Err(Unresolved::NodeClassNotReady {
                kind: GroupKind::new(&reference.group, &reference.kind).to_string(),
                name: reference.name.clone(),
                message: ready.message.clone().unwrap_or_default(),
            })
        }
        _ => Ok(resolved),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NodeClassSpec;

    fn reference(group: &str, kind: &str, name: &str) -> NodeClassReference {
        NodeClassReference {
            group: group.into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    #[test]
    fn served_classes_resolve_by_kind_and_name() {
        let class = |provider: &str| {
            NodeClass::new(
                "default",
                NodeClassSpec {
                    provider: provider.into(),
                    parameters: None,
                },
            )
        };
        let classes: HashMap<String, Arc<NodeClass>> = [
            ("default".to_owned(), Arc::new(class("capstan-provider"))),
            (
                "KWOKNodeClass.karpenter.kwok.sh/default".to_owned(),
                Arc::new(class("kwok")),
            ),
        ]
        .into();
        let registry = Registry::new();
        // Each reference finds its own class (no provider is loaded: the names say which).
        let kwok = resolve_with(
            &registry,
            &reference("karpenter.kwok.sh", "KWOKNodeClass", "default"),
            &classes,
        );
        assert!(
            matches!(&kwok, Err(Unresolved::ProviderNotFound { provider, .. }) if provider == "kwok"),
            "{kwok:?}"
        );
        let capstan = resolve_with(&registry, &reference(GROUP, KIND, "default"), &classes);
        assert!(
            matches!(&capstan, Err(Unresolved::ProviderNotFound { provider, .. }) if provider == "capstan-provider")
        );
        // Missing: a served kind's claim is deleted, a capstan.dev NodeClass's waits.
        let missing = resolve_with(
            &registry,
            &reference("karpenter.kwok.sh", "KWOKNodeClass", "other"),
            &classes,
        )
        .unwrap_err();
        assert_eq!(missing.reason(), "NodeClassNotFound");
        assert_eq!(
            missing.deletes_claim(),
            Some(("InsufficientCapacityError", "insufficient_capacity"))
        );
        let missing =
            resolve_with(&registry, &reference(GROUP, KIND, "other"), &classes).unwrap_err();
        assert_eq!(missing, Unresolved::NodeClassNotFound("other".into()));
        assert_eq!(missing.deletes_claim(), None);
        let not_ready = Unresolved::NodeClassNotReady {
            kind: "KWOKNodeClass.karpenter.kwok.sh".into(),
            name: "default".into(),
            message: "NodeClass is not ready".into(),
        };
        assert_eq!(not_ready.reason(), "NodeClassNotReady");
        assert_eq!(
            not_ready.deletes_claim(),
            Some(("NodeClassNotReady", "nodeclass_not_ready"))
        );
    }
}
