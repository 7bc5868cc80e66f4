//! Registration: find the claim's Node by provider ID and make it the claim's — labels,
//! annotations, taints and startup taints synced, an owner reference and the termination
//! finalizer on the Node, the `karpenter.sh/unregistered` taint removed, `karpenter.sh/registered`
//! set — then `status.nodeName` and `Registered=True`; once the provider's registration hook
//! (contract 0.4) says the node is ready.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Taint as NodeTaint};
use kube::api::PostParams;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

use super::{Step, nodes_with_provider_id, ownership, persist_status, set};
use crate::api::labels::{OWNER_LABEL, PROVIDER_ANNOTATION, ZONE};
use crate::api::labels::{
    REGISTERED as REGISTERED_LABEL, TERMINATION_FINALIZER, UNREGISTERED_TAINT_KEY,
};
use crate::api::nodeclaim::conditions::{LAUNCHED, REGISTERED};
use crate::api::{ConditionStatus, NodeClaim, Taint};
use crate::controllers::nodepool_status;
use crate::controllers::{Context, ControllerError, resolve};
use crate::metrics::cloudprovider::controller;
use crate::metrics::lifecycle::nodepool_of;
use crate::provider::convert;
use crate::rules::claims::owner_reference;
use crate::rules::claims::{is_true, nodepool};
use crate::runtime::lifecycle::Registration;

/// How often a launched claim looks for its Node.
const LOOK_AGAIN: Duration = Duration::from_secs(5);
/// The shortest wait a registration hook may ask for.
const MIN_HOOK_WAIT: Duration = Duration::from_secs(1);
/// Attempts at a Node update that keeps conflicting with other writers.
const UPDATE_ATTEMPTS: usize = 5;

/// Registers the claim's Node unless it is registered already.
pub async fn reconcile(claim: &mut NodeClaim, ctx: &Context) -> Result<Step, ControllerError> {
    if is_true(claim, REGISTERED) {
        mark_registered_node(ctx, claim).await?;
        return Ok(Step::Continue);
    }
    if !is_true(claim, LAUNCHED) {
        return Ok(Step::Stop(Action::await_change()));
    }
    let nodes = nodes_with_provider_id(ctx, claim);
    let node = match nodes.as_slice() {
        [node] => node.name_any(),
        [] => {
            if set(
                claim,
                REGISTERED,
                ConditionStatus::Unknown,
                "NodeNotFound",
                "Node not registered with cluster",
            ) {
                persist_status(ctx, claim).await?;
            }
            return Ok(Step::Stop(Action::requeue(LOOK_AGAIN)));
        }
        many => {
            let names: Vec<String> = many.iter().map(|n| n.name_any()).collect();
            let message = format!("multiple Nodes carry the provider ID: {}", names.join(", "));
            if set(
                claim,
                REGISTERED,
                ConditionStatus::Unknown,
                "MultipleNodesFound",
                &message,
            ) {
                persist_status(ctx, claim).await?;
                ctx.events
                    .warning(claim, "MultipleNodesFound", message)
                    .await;
            }
            return Ok(Step::Stop(Action::requeue(Duration::from_secs(30))));
        }
    };
    if let Some(step) = registration_hook(ctx, claim).await? {
        return Ok(step);
    }
    // A Node another claim owns, another provider's mark is on, or one older than the claim, is
    // never adopted: checked on the Node as the API server has it, and written with its
    // resourceVersion, so two claims can never both adopt it.
    if let Some(taken) = sync_node(ctx, claim, &node).await? {
        return not_owned(ctx, claim, &taken).await;
    }
    claim.status.get_or_insert_with(Default::default).node_name = Some(node.clone());
    set(claim, REGISTERED, ConditionStatus::True, "Registered", "");
    persist_status(ctx, claim).await?;
    let pool = nodepool(claim);
    let zone = crate::metrics::labels::label(claim.metadata.labels.as_ref(), ZONE).to_owned();
    ctx.metrics.lifecycle.registered(&pool, &zone);
    ctx.events
        .normal(claim, "Registered", format!("Node {node} registered"))
        .await;
    if !pool.is_empty() {
        nodepool_status::set_registration_health(ctx, &pool, true, "").await;
    }
    Ok(Step::Continue)
}

/// The provider's registration hook (contract 0.4's `registered`; Karpenter v1.15's
/// `NodeLifecycleHook`): until it answers `ready`, the Node is not adopted — it keeps its
/// `karpenter.sh/unregistered` taint — and `Registered` stays `Unknown`
/// (`RegistrationHookPending`, with the provider's message). A claim whose provider cannot be
/// resolved registers as before (termination and garbage collection need no hook either).
async fn registration_hook(
    ctx: &Context,
    claim: &mut NodeClaim,
) -> Result<Option<Step>, ControllerError> {
    let Ok((provider_name, provider)) = resolve::launching_provider(ctx, claim).await? else {
        return Ok(None);
    };
    let request = convert::node_claim_to_wit(claim)?;
    let started = Instant::now();
    let result = provider.registered(&request).await;
    ctx.observe_call(
        controller::NODECLAIM_LIFECYCLE,
        &provider_name,
        "registered",
        nodepool_of(claim),
        &result,
        started,
    );
    let (message, after) = match &result {
        Ok(Registration::Ready) => return Ok(None),
        Ok(Registration::Wait(wait)) => (
            format!("{provider_name}: {}", wait.message),
            wait.requeue_after_millis
                .map_or(LOOK_AGAIN, Duration::from_millis)
                .max(MIN_HOOK_WAIT),
        ),
        Err(err) => (format!("{provider_name}: {err}"), LOOK_AGAIN),
    };
    if set(
        claim,
        REGISTERED,
        ConditionStatus::Unknown,
        "RegistrationHookPending",
        &message,
    ) {
        persist_status(ctx, claim).await?;
    }
    match result {
        Err(err) => Err(err.into()),
        Ok(_) => Ok(Some(Step::Stop(Action::requeue(after)))),
    }
}

/// A registered claim's Node without its provider's ownership mark (registered before the host
/// stamped marks) gets it, once: the provider's `owned` grants reach it from then on. Read from
/// the cache, so a Node already marked costs nothing.
async fn mark_registered_node(ctx: &Context, claim: &NodeClaim) -> Result<(), ControllerError> {
    let (Some(provider), Some(node)) = (
        claim.annotations().get(PROVIDER_ANNOTATION),
        claim.status.as_ref().and_then(|s| s.node_name.as_deref()),
    ) else {
        return Ok(());
    };
    let Some(cached) = ctx
        .nodes
        .get(&kube::runtime::reflector::ObjectRef::new(node))
    else {
        return Ok(());
    };
    if cached.labels().contains_key(OWNER_LABEL) {
        return Ok(());
    }
    let patch = serde_json::json!({"metadata": {"labels": {OWNER_LABEL: provider}}});
    crate::controllers::merge_patch::<Node>(&ctx.client, node, &patch).await?;
    tracing::info!(nodeclaim = %claim.name_any(), node, provider = %provider, "ownership mark added to the registered Node");
    Ok(())
}

/// `Registered=Unknown` (`NodeNotOwned`) and an Event: the Node is not the claim's to adopt.
async fn not_owned(
    ctx: &Context,
    claim: &mut NodeClaim,
    taken: &ownership::Taken,
) -> Result<Step, ControllerError> {
    let message = format!("not adopting the Node: {taken}");
    if set(
        claim,
        REGISTERED,
        ConditionStatus::Unknown,
        "NodeNotOwned",
        &message,
    ) {
        persist_status(ctx, claim).await?;
        ctx.events.warning(claim, "NodeNotOwned", message).await;
    }
    Ok(Step::Stop(Action::requeue(Duration::from_secs(30))))
}

/// The Node taint of a claim taint.
pub fn node_taint(t: &Taint) -> NodeTaint {
    NodeTaint {
        key: t.key.clone(),
        value: t.value.clone(),
        effect: t.effect.as_str().to_owned(),
        time_added: None,
    }
}

/// Whether `node` carries `taint` (key and effect).
pub fn has_taint(node: &Node, taint: &Taint) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| taint.matches(t)))
}

/// Makes Node `name` the claim's, unless the Node as the API server has it is not the claim's
/// to adopt (returned). The write carries the read's `resourceVersion`: a conflict reads again.
async fn sync_node(
    ctx: &Context,
    claim: &NodeClaim,
    name: &str,
) -> Result<Option<ownership::Taken>, ControllerError> {
    let api: Api<Node> = Api::all(ctx.client.clone());
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut node = api.get(name).await?;
        let claims = ownership::claims_on(ctx, &node);
        if let Some(taken) = ownership::node_taken(claim, &node, claims.iter().map(AsRef::as_ref)) {
            return Ok(Some(taken));
        }
        let before = node.clone();
        let first_time = node.labels().get(REGISTERED_LABEL).map(String::as_str) != Some("true");
        let labels = node.labels_mut();
        labels.extend(claim.labels().clone());
        labels.insert(REGISTERED_LABEL.to_owned(), "true".to_owned());
        // The provider's ownership mark: an `owned` grant reaches the Nodes of its claims.
        if let Some(provider) = claim.annotations().get(PROVIDER_ANNOTATION) {
            labels.insert(OWNER_LABEL.to_owned(), provider.clone());
        }
        let mut annotations = claim.annotations().clone();
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
        node.annotations_mut().extend(annotations);
        if !node.finalizers().iter().any(|f| f == TERMINATION_FINALIZER) {
            node.finalizers_mut().push(TERMINATION_FINALIZER.to_owned());
        }
        if let Some(owner) = owner_reference(claim)
            && !node.owner_references().iter().any(|o| o.uid == owner.uid)
        {
            node.owner_references_mut().push(owner);
        }
        let spec = node.spec.get_or_insert_with(Default::default);
        let taints = spec.taints.get_or_insert_with(Vec::new);
        if first_time {
            for t in claim.spec.taints.iter().chain(&claim.spec.startup_taints) {
                if !taints.iter().any(|nt| t.matches(nt)) {
                    taints.push(node_taint(t));
                }
            }
        }
        taints.retain(|t| t.key != UNREGISTERED_TAINT_KEY);
        if node == before {
            return Ok(None);
        }
        match api.replace(name, &PostParams::default(), &node).await {
            Ok(_) => return Ok(None),
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < UPDATE_ATTEMPTS => {}
            Err(err) => return Err(err.into()),
        }
    }
}
