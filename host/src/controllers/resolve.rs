//! From a `nodeClassRef` to the node class and its live provider: a `capstan.dev` NodeClass names
//! its provider in `spec.provider`; an object of a kind a provider serves (`KWOKNodeClass`, ...)
//! belongs to that provider ([`crate::state::served`]).

use std::sync::Arc;

use kube::Api;
use kube::api::DynamicObject;

use crate::api::nodeclass::{GROUP, KIND};
use crate::api::shared::find_condition;
use crate::api::{ConditionStatus, NodeClass, NodeClassReference};
use crate::controllers::Context;
use crate::provider::Registry;
use crate::provider::kinds::GroupKind;
use crate::runtime::ProviderPre;
use crate::state::served::{self, class_key, is_capstan};

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

fn unsupported(reference: &NodeClassReference) -> Unresolved {
    Unresolved::UnsupportedNodeClassRef {
        group: reference.group.clone(),
        kind: reference.kind.clone(),
        name: reference.name.clone(),
    }
}

fn served_not_found(reference: &NodeClassReference) -> Unresolved {
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

/// Looks up the node class only, on the API server (not a cache: a class created a moment ago
/// is found).
pub async fn node_class(
    ctx: &Context,
    reference: &NodeClassReference,
) -> Result<Result<NodeClass, Unresolved>, kube::Error> {
    if !is_capstan(reference) {
        let Some(serving) = ctx.state.served.serving(reference) else {
            return Ok(Err(unsupported(reference)));
        };
        let kind = GroupKind::new(&reference.group, &reference.kind);
        let api: Api<DynamicObject> =
            Api::all_with(ctx.client.clone(), &served::api_resource(&kind, &serving));
        return Ok(match api.get_opt(&reference.name).await? {
            Some(object) => Ok(served::to_node_class(&object, &serving)),
            None => Err(served_not_found(reference)),
        });
    }
    let api: Api<NodeClass> = Api::all(ctx.client.clone());
    Ok(api
        .get_opt(&reference.name)
        .await?
        .ok_or_else(|| Unresolved::NodeClassNotFound(reference.name.clone())))
}

/// [`node_class`] from the host's caches when they hold the class, from the API server when they
/// do not (yet): for loops that run on every NodeClaim change, thousands a minute at scale.
pub async fn node_class_cached(
    ctx: &Context,
    reference: &NodeClassReference,
) -> Result<Result<NodeClass, Unresolved>, kube::Error> {
    let cached = if is_capstan(reference) {
        ctx.state
            .classes
            .store()
            .get(&kube::runtime::reflector::ObjectRef::new(&reference.name))
    } else {
        ctx.state.served.get(&served::class_key(reference))
    };
    match cached {
        Some(class) => Ok(Ok(class.as_ref().clone())),
        None => node_class(ctx, reference).await,
    }
}

/// Looks up the NodeClass and its provider.
pub async fn resolve(
    ctx: &Context,
    reference: &NodeClassReference,
) -> Result<Result<Resolved, Unresolved>, kube::Error> {
    let node_class = match node_class(ctx, reference).await? {
        Ok(class) => class,
        Err(unresolved) => return Ok(Err(unresolved)),
    };
    Ok(with_provider(
        &ctx.registry,
        reference,
        Arc::new(node_class),
    ))
}

/// [`resolve`] for a launch: a served node class whose `Ready` condition is `False` is
/// [`Unresolved::NodeClassNotReady`] (a `capstan.dev` NodeClass launches whatever its status,
/// its provider's `create` decides).
pub async fn resolve_for_launch(
    ctx: &Context,
    reference: &NodeClassReference,
) -> Result<Result<Resolved, Unresolved>, kube::Error> {
    let resolved = match resolve(ctx, reference).await? {
        Ok(resolved) => resolved,
        Err(unresolved) => return Ok(Err(unresolved)),
    };
    if is_capstan(reference) {
        return Ok(Ok(resolved));
    }
    let conditions = resolved
        .node_class
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    Ok(match find_condition(conditions, "Ready") {
        Some(ready) if ready.status == ConditionStatus::False => {
            Err(Unresolved::NodeClassNotReady {
                kind: GroupKind::new(&reference.group, &reference.kind).to_string(),
                name: reference.name.clone(),
                message: ready.message.clone().unwrap_or_default(),
            })
        }
        _ => Ok(resolved),
    })
}

/// Resolves `reference` against NodeClasses already read (the cluster state's), by name.
pub fn resolve_in(
    ctx: &Context,
    reference: &NodeClassReference,
    classes: &std::collections::HashMap<String, Arc<NodeClass>>,
) -> Result<Resolved, Unresolved> {
    if !is_capstan(reference) && ctx.state.served.serving(reference).is_none() {
        return Err(unsupported(reference));
    }
    resolve_with(&ctx.registry, reference, classes)
}

/// [`resolve_in`] with the providers of `registry` (`capstan simulate` has no [`Context`]);
/// `classes` are keyed by [`class_key`].
pub fn resolve_with(
    registry: &Registry,
    reference: &NodeClassReference,
    classes: &std::collections::HashMap<String, Arc<NodeClass>>,
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
    classes: &std::collections::HashMap<String, Arc<NodeClass>>,
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

fn with_provider(
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

/// The provider that launched `claim`: through its NodeClass, or, when the NodeClass is gone, the
/// provider recorded on the claim at launch ([`PROVIDER_ANNOTATION`]) or the one serving the
/// class's kind, so a claim whose node class was deleted first still terminates its instance.
///
/// [`PROVIDER_ANNOTATION`]: crate::api::labels::PROVIDER_ANNOTATION
pub async fn launching_provider(
    ctx: &Context,
    claim: &crate::api::NodeClaim,
) -> Result<Result<(String, Arc<ProviderPre>), Unresolved>, kube::Error> {
    match resolve(ctx, &claim.spec.node_class_ref).await? {
        Ok(resolved) => Ok(Ok((resolved.provider_name, resolved.provider))),
        Err(
            unresolved @ (Unresolved::NodeClassNotFound(_)
            | Unresolved::ServedNodeClassNotFound { .. }
            | Unresolved::UnsupportedNodeClassRef { .. }),
        ) => {
            // The provider recorded at launch, else the one serving the class's kind (a client
            // that rewrote the claim's annotations from a stale copy may have dropped the record).
            let recorded = claim
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(crate::api::labels::PROVIDER_ANNOTATION))
                .or_else(|| {
                    // Providers may label their nodes with the same key.
                    claim
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(crate::api::labels::PROVIDER_ANNOTATION))
                })
                .cloned()
                .or_else(|| {
                    ctx.state
                        .served
                        .serving(&claim.spec.node_class_ref)
                        .map(|served| served.provider)
                });
            Ok(match recorded.as_ref() {
                Some(name) => match ctx.registry.get(name) {
                    Some(provider) => Ok((name.clone(), provider)),
                    None => Err(Unresolved::ProviderNotFound {
                        node_class: claim.spec.node_class_ref.name.clone(),
                        provider: name.clone(),
                    }),
                },
                None => Err(unresolved),
            })
        }
        Err(other) => Ok(Err(other)),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

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
