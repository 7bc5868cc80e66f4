//! From a `nodeClassRef` to the NodeClass and its live provider.

use std::sync::Arc;

use kube::Api;

use crate::api::nodeclass::{GROUP, KIND};
use crate::api::{NodeClass, NodeClassReference};
use crate::controllers::Context;
use crate::provider::Registry;
use crate::runtime::ProviderPre;

/// Why a reference leads to no provider. Each has a condition reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unresolved {
    /// The reference is not to a `capstan.dev` NodeClass.
    #[error("nodeClassRef {group}/{kind} {name} is not a {GROUP} {KIND}")]
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
            Unresolved::UnsupportedNodeClassRef { .. } | Unresolved::NodeClassNotFound(_) => {
                "NodeClassNotFound"
            }
            Unresolved::ProviderNotFound { .. } => "ProviderNotFound",
        }
    }
}

/// A reference resolved.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The NodeClass.
    pub node_class: NodeClass,
    /// The provider's name.
    pub provider_name: String,
    /// The provider.
    pub provider: Arc<ProviderPre>,
}

/// Looks up the NodeClass only.
pub async fn node_class(
    ctx: &Context,
    reference: &NodeClassReference,
) -> Result<Result<NodeClass, Unresolved>, kube::Error> {
    if reference.group != GROUP || reference.kind != KIND {
        return Ok(Err(Unresolved::UnsupportedNodeClassRef {
            group: reference.group.clone(),
            kind: reference.kind.clone(),
            name: reference.name.clone(),
        }));
    }
    let api: Api<NodeClass> = Api::all(ctx.client.clone());
    Ok(api
        .get_opt(&reference.name)
        .await?
        .ok_or_else(|| Unresolved::NodeClassNotFound(reference.name.clone())))
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
    Ok(with_provider(&ctx.registry, reference, node_class))
}

/// Resolves `reference` against NodeClasses already read (the cluster state's), by name.
pub fn resolve_in(
    ctx: &Context,
    reference: &NodeClassReference,
    classes: &std::collections::HashMap<String, NodeClass>,
) -> Result<Resolved, Unresolved> {
    resolve_with(&ctx.registry, reference, classes)
}

/// [`resolve_in`] with the providers of `registry` (`capstan simulate` has no [`Context`]).
pub fn resolve_with(
    registry: &Registry,
    reference: &NodeClassReference,
    classes: &std::collections::HashMap<String, NodeClass>,
) -> Result<Resolved, Unresolved> {
    if reference.group != GROUP || reference.kind != KIND {
        return Err(Unresolved::UnsupportedNodeClassRef {
            group: reference.group.clone(),
            kind: reference.kind.clone(),
            name: reference.name.clone(),
        });
    }
    let node_class = classes
        .get(&reference.name)
        .cloned()
        .ok_or_else(|| Unresolved::NodeClassNotFound(reference.name.clone()))?;
    with_provider(registry, reference, node_class)
}

fn with_provider(
    registry: &Registry,
    reference: &NodeClassReference,
    node_class: NodeClass,
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
/// provider recorded on the claim at launch ([`PROVIDER_ANNOTATION`]), so a claim whose NodeClass
/// was deleted first still terminates its instance.
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
            | Unresolved::UnsupportedNodeClassRef { .. }),
        ) => {
            let recorded = claim
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(crate::api::labels::PROVIDER_ANNOTATION));
            Ok(match recorded {
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
