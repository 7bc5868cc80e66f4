//! The NodeClaim lifecycle controller, in Karpenter's stages: [`liveness`], [`launch`],
//! [`registration`], [`reboot`] (while one is under way), [`initialization`] while the claim lives, and [`termination`] behind the
//! `karpenter.sh/termination` finalizer once it is deleted.
//!
//! Each stage reads the claim, acts, and persists what it learned before the next one runs, so
//! a crash between any two API calls converges on the next reconcile (the provider's `create` is
//! idempotent by claim name).

pub mod initialization;
pub mod launch;
pub mod liveness;
pub mod ownership;
pub mod reboot;
pub mod registration;
pub mod termination;

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::api::NodeClaim;
use crate::api::labels::TERMINATION_FINALIZER;
use crate::api::shared::ConditionStatus;
use crate::controllers::{Context, ControllerError, finalizer, now};
use crate::rules::claims::provider_id;
use crate::state::watch_backoff;

/// What a stage tells the reconciler.
#[derive(Debug)]
pub enum Step {
    /// Go on with the next stage.
    Continue,
    /// Stop here and come back as the action says.
    Stop(Action),
}

/// How often a healthy claim is looked at again anyway.
const RESYNC: Duration = Duration::from_secs(300);

/// Runs the controller until it stops. `node_changes` are the Nodes changed in the host's node
/// cache ([`Context::nodes`]), each sent once the cache holds the change, so the claims they
/// trigger read the Node as it is now (a second watch of Nodes could run ahead of the cache and
/// leave a claim looking at the Node as it was).
pub async fn run(ctx: Arc<Context>, node_changes: impl Stream<Item = Arc<Node>> + Send + 'static) {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let controller = Controller::new(api, ctx.watcher_config()).trigger_backoff(watch_backoff());
    let claims = controller.store();
    let triggers =
        node_changes.flat_map(move |node| futures::stream::iter(claims_of_node(&claims, &node)));
    controller
        .reconcile_on(triggers)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(error = %err, "nodeclaim reconcile failed");
            }
        })
        .await;
}

/// The claims a Node belongs to: by owner reference, else by provider ID. Only claims the store
/// holds: the reconciler could not read any other (a Node of another host's claim, or of a claim
/// outside `--selector`), and the controller would log each such trigger as a failure.
fn claims_of_node(claims: &Store<NodeClaim>, node: &Node) -> Vec<ObjectRef<NodeClaim>> {
    let owners: Vec<ObjectRef<NodeClaim>> = node
        .owner_references()
        .iter()
        .filter(|o| o.kind == "NodeClaim" && o.api_version.starts_with("karpenter.sh/"))
        .map(|o| ObjectRef::new(&o.name))
        .collect();
    if !owners.is_empty() {
        return owners
            .into_iter()
            .filter(|claim| claims.get(claim).is_some())
            .collect();
    }
    let Some(id) = node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) else {
        return Vec::new();
    };
    claims
        .state()
        .iter()
        .filter(|c| provider_id(c) == Some(id))
        .map(|c| ObjectRef::from_obj(c.as_ref()))
        .collect()
}

fn error_policy(claim: Arc<NodeClaim>, err: &ControllerError, ctx: Arc<Context>) -> Action {
    Action::requeue(super::retry_after(
        "NodeClaim",
        &claim.name_any(),
        err,
        || ctx.backoff(&backoff_key(&claim)),
    ))
}

/// The key a claim's reconcile failures are counted under.
fn backoff_key(claim: &NodeClaim) -> String {
    format!("nodeclaim/{}", claim.name_any())
}

/// One reconcile of one claim.
pub async fn reconcile(
    claim: Arc<NodeClaim>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let finalized = finalizer::has(claim.as_ref(), TERMINATION_FINALIZER);
    if claim.metadata.deletion_timestamp.is_some() {
        if !finalized {
            return Ok(Action::await_change());
        }
        return match termination::finalize(&claim, &ctx).await? {
            Step::Continue => {
                finalizer::remove(&api, claim.as_ref(), TERMINATION_FINALIZER).await?;
                ctx.metrics.lifecycle.terminated(&claim);
                ctx.reset_backoff(&backoff_key(&claim));
                ctx.events
                    .normal(claim.as_ref(), "Terminated", "instance and Node are gone")
                    .await;
                Ok(Action::await_change())
            }
            Step::Stop(action) => Ok(action),
        };
    }
    if !finalized {
        finalizer::add(&api, claim.as_ref(), TERMINATION_FINALIZER).await?;
        return Ok(Action::await_change());
    }
    if ownership::own_by_pool(&ctx, &claim).await? {
        return Ok(Action::await_change());
    }
    if let Some(node) = nodes_of(&ctx, &claim)
        .iter()
        .find(|n| n.metadata.deletion_timestamp.is_some())
    {
        // Someone deleted the Node: terminate the claim, which drains and removes it.
        ctx.events
            .normal(
                claim.as_ref(),
                "Terminating",
                format!("Node {} is being deleted", node.name_any()),
            )
            .await;
        delete(&ctx, &claim).await?;
        return Ok(Action::await_change());
    }
    let mut claim = (*claim).clone();
    for stage in [
        Stage::Liveness,
        Stage::Launch,
        Stage::Registration,
        Stage::Reboot,
        Stage::Initialization,
    ] {
        let step = match stage {
            Stage::Liveness => liveness::reconcile(&mut claim, &ctx).await?,
            Stage::Launch => launch::reconcile(&mut claim, &ctx).await?,
            Stage::Registration => registration::reconcile(&mut claim, &ctx).await?,
            Stage::Reboot => reboot::reconcile(&mut claim, &ctx).await?,
            Stage::Initialization => initialization::reconcile(&mut claim, &ctx).await?,
        };
        if let Step::Stop(action) = step {
            return Ok(action);
        }
    }
    ctx.reset_backoff(&backoff_key(&claim));
    Ok(Action::requeue(RESYNC))
}

#[derive(Debug, Clone, Copy)]
enum Stage {
    Liveness,
    Launch,
    Registration,
    Reboot,
    Initialization,
}

/// Sets a condition and recomputes the root `Ready`, now ([`crate::rules::claims::set_condition`]).
/// Returns whether anything changed.
pub fn set(
    claim: &mut NodeClaim,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
) -> bool {
    crate::rules::claims::set_condition(claim, type_, status, reason, message, &now())
}

/// Writes the claim's status (optimistically: a stale claim fails with a conflict and is
/// retried) and refreshes `claim` from the answer.
pub async fn persist_status(ctx: &Context, claim: &mut NodeClaim) -> Result<(), ControllerError> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let patch = json!({
        "metadata": { "resourceVersion": claim.resource_version() },
        "status": claim.status,
    });
    *claim = api
        .patch_status(
            &claim.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

/// Deletes the claim (this very object: a claim recreated under the same name is left alone).
pub async fn delete(ctx: &Context, claim: &NodeClaim) -> Result<(), ControllerError> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: claim.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&claim.name_any(), &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// How many reschedulable pods (not a DaemonSet's, not static, not finished) the claim's Nodes
/// run, from the host's caches: what its disruption disrupts.
pub fn reschedulable_pods(ctx: &Context, claim: &NodeClaim) -> usize {
    let nodes: Vec<String> = nodes_of(ctx, claim).iter().map(|n| n.name_any()).collect();
    if nodes.is_empty() {
        return 0;
    }
    ctx.state
        .view()
        .pods
        .iter()
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some_and(|n| nodes.contains(n))
                && crate::rules::pods::is_reschedulable(p)
        })
        .count()
}

/// The claim's Nodes: those carrying its provider ID that are its to have (not another claim's,
/// not older than the claim: [`ownership::node_taken`]).
pub fn nodes_of(ctx: &Context, claim: &NodeClaim) -> Vec<Arc<Node>> {
    let nodes = nodes_with_provider_id(ctx, claim);
    if nodes.is_empty() {
        return nodes;
    }
    nodes
        .into_iter()
        .filter(|n| {
            let claims = ownership::claims_on(ctx, n);
            ownership::node_taken(claim, n, claims.iter().map(AsRef::as_ref)).is_none()
        })
        .collect()
}

/// The Nodes carrying the claim's provider ID, whoever's they are.
pub fn nodes_with_provider_id(ctx: &Context, claim: &NodeClaim) -> Vec<Arc<Node>> {
    provider_id(claim).map_or_else(Vec::new, |id| nodes_carrying(ctx, id))
}

/// The Nodes whose `spec.providerID` is `id`. Filtered in the store: a copy of every Node for each
/// claim reconcile cost more than the reconcile's own work at 2,000 nodes.
pub fn nodes_carrying(ctx: &Context, id: &str) -> Vec<Arc<Node>> {
    ctx.nodes
        .state_filter(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim_named(name: &str, provider_id: Option<&str>) -> NodeClaim {
        let mut claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": name},
            "spec": {
                "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "c"},
                "requirements": []
            }
        }))
        .unwrap();
        if let Some(id) = provider_id {
            claim
                .status
                .get_or_insert_with(Default::default)
                .provider_id = Some(id.to_owned());
        }
        claim
    }

    fn node(owner: Option<&str>, provider_id: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "n",
                "ownerReferences": owner.map(|name| vec![serde_json::json!({
                    "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": name, "uid": "u"
                })]).unwrap_or_default()
            },
            "spec": {"providerID": provider_id}
        }))
        .unwrap()
    }

    #[test]
    fn a_node_triggers_only_the_claims_the_store_holds() {
        let mut writer = kube::runtime::reflector::store::Writer::<NodeClaim>::default();
        for claim in [
            claim_named("mine", Some("kwok://mine")),
            claim_named("other", None),
        ] {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(claim));
        }
        let store = writer.as_reader();
        let names = |node: &Node| -> Vec<String> {
            claims_of_node(&store, node)
                .into_iter()
                .map(|r| r.name)
                .collect()
        };
        // By owner reference: the owner if the store holds it, nothing for another host's claim
        // (not a fall-back to the provider ID either: an owned Node belongs to its owner).
        assert_eq!(names(&node(Some("mine"), "kwok://x")), ["mine"]);
        assert!(names(&node(Some("elsewhere"), "kwok://mine")).is_empty());
        // Without an owner: the claims carrying the Node's provider ID.
        assert_eq!(names(&node(None, "kwok://mine")), ["mine"]);
        assert!(names(&node(None, "kwok://unknown")).is_empty());
    }
}
