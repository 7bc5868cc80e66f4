//! From a `nodeClassRef` to the node class and its live provider, looked up on the API server or
//! in the host's caches; the rules of resolution, on classes already read, are
//! [`crate::rules::resolve`].

use std::collections::HashMap;
use std::sync::Arc;

use kube::Api;
use kube::api::DynamicObject;

use crate::api::{NodeClass, NodeClassReference};
use crate::controllers::Context;
use crate::provider::kinds::GroupKind;
use crate::rules::resolve::{
    Resolved, Unresolved, ready_for_launch, resolve_with, served_not_found, unsupported,
    with_provider,
};
use crate::runtime::ProviderPre;
use crate::state::served::{self, is_capstan};

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

/// [`resolve`] for a launch: [`ready_for_launch`].
pub async fn resolve_for_launch(
    ctx: &Context,
    reference: &NodeClassReference,
) -> Result<Result<Resolved, Unresolved>, kube::Error> {
    Ok(match resolve(ctx, reference).await? {
        Ok(resolved) => ready_for_launch(reference, resolved),
        Err(unresolved) => Err(unresolved),
    })
}

/// Resolves `reference` against NodeClasses already read (the cluster state's), by name.
pub fn resolve_in(
    ctx: &Context,
    reference: &NodeClassReference,
    classes: &HashMap<String, Arc<NodeClass>>,
) -> Result<Resolved, Unresolved> {
    if !is_capstan(reference) && ctx.state.served.serving(reference).is_none() {
        return Err(unsupported(reference));
    }
    resolve_with(&ctx.registry, reference, classes)
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
