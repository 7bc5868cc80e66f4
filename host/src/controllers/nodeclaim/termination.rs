//! Termination, behind the `karpenter.sh/termination` finalizer: taint the Node
//! `karpenter.sh/disrupted:NoSchedule`, evict its pods through the Eviction API (which honours
//! PodDisruptionBudgets) until the claim's `terminationGracePeriod` runs out — then delete them —,
//! delete the Node, and call the provider's `delete` until it answers `not-found`. Only then is the
//! finalizer removed (by the caller).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod, Taint as NodeTaint};
use kube::api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::{Step, is_true, nodes_of, persist_status, provider_id, set};
use crate::api::duration;
use crate::api::labels::{DISRUPTED_TAINT_KEY, TERMINATION_FINALIZER};
use crate::api::nodeclaim::conditions::INSTANCE_TERMINATING;
use crate::api::{ConditionStatus, NodeClaim};
use crate::controllers::resolve;
use crate::controllers::{Context, ControllerError, millis_since};
use crate::provider::convert;
use crate::runtime::types::ProviderError;

/// How often termination looks again while pods drain or the instance goes.
const POLL: Duration = Duration::from_secs(1);

/// One step of terminating the claim; `Continue` when the finalizer may go.
pub async fn finalize(claim: &NodeClaim, ctx: &Context) -> Result<Step, ControllerError> {
    let mut claim = claim.clone();
    let node_api: Api<Node> = Api::all(ctx.client.clone());
    for node in nodes_of(ctx, &claim) {
        let name = node.name_any();
        if taint_disrupted(&node_api, &name).await? {
            ctx.events
                .normal(&claim, "Terminating", format!("draining Node {name}"))
                .await;
        }
        if !drain(ctx, &claim, &name).await? {
            return Ok(Step::Stop(Action::requeue(POLL)));
        }
        if node.metadata.deletion_timestamp.is_none() {
            match node_api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(err) => return Err(err.into()),
            }
        }
        remove_node_finalizer(&node_api, &name).await?;
    }
    let Some(id) = provider_id(&claim).map(str::to_owned) else {
        // Never launched (or the launch never got recorded: garbage collection finds that
        // instance by its claim's absence).
        return Ok(Step::Continue);
    };
    let (provider_name, provider) = match resolve::launching_provider(ctx, &claim).await? {
        Ok(found) => found,
        Err(unresolved) => {
            let message = format!("cannot delete instance {id}: {unresolved}");
            ctx.events
                .warning(&claim, unresolved.reason(), message)
                .await;
            return Ok(Step::Stop(Action::requeue(Duration::from_secs(30))));
        }
    };
    let request = convert::node_claim_to_wit(&claim)?;
    let started = Instant::now();
    let result = provider.delete(&request).await;
    ctx.observe_call(&provider_name, "delete", &result, started);
    match result {
        Err(err) if matches!(err.provider_error(), Some(ProviderError::NotFound(_))) => {
            Ok(Step::Continue)
        }
        Ok(()) => {
            if !is_true(&claim, INSTANCE_TERMINATING) {
                set(
                    &mut claim,
                    INSTANCE_TERMINATING,
                    ConditionStatus::True,
                    "InstanceTerminating",
                    "",
                );
                persist_status(ctx, &mut claim).await?;
            }
            Ok(Step::Stop(Action::requeue(POLL)))
        }
        Err(err) => {
            ctx.events
                .warning(&claim, "TerminationFailed", err.to_string())
                .await;
            Err(err.into())
        }
    }
}

/// Adds the `karpenter.sh/disrupted:NoSchedule` taint; returns whether it was added now.
async fn taint_disrupted(api: &Api<Node>, name: &str) -> Result<bool, ControllerError> {
    for attempt in 1.. {
        let Some(mut node) = api.get_opt(name).await? else {
            return Ok(false);
        };
        let taints = node
            .spec
            .get_or_insert_with(Default::default)
            .taints
            .get_or_insert_with(Vec::new);
        if taints
            .iter()
            .any(|t| t.key == DISRUPTED_TAINT_KEY && t.effect == "NoSchedule")
        {
            return Ok(false);
        }
        taints.push(NodeTaint {
            key: DISRUPTED_TAINT_KEY.to_owned(),
            value: None,
            effect: "NoSchedule".to_owned(),
            time_added: None,
        });
        match api.replace(name, &PostParams::default(), &node).await {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < 5 => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(false)
}

async fn remove_node_finalizer(api: &Api<Node>, name: &str) -> Result<(), ControllerError> {
    let node = match api.get_opt(name).await? {
        Some(node) => node,
        None => return Ok(()),
    };
    if !node.finalizers().iter().any(|f| f == TERMINATION_FINALIZER) {
        return Ok(());
    }
    let rest: Vec<&String> = node
        .finalizers()
        .iter()
        .filter(|f| *f != TERMINATION_FINALIZER)
        .collect();
    let patch =
        json!({"metadata": {"finalizers": rest, "resourceVersion": node.resource_version()}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// Whether a pod still has to leave the node before it can go.
fn must_leave(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return false;
    }
    if pod
        .annotations()
        .contains_key("kubernetes.io/config.mirror")
    {
        return false;
    }
    !pod.owner_references().iter().any(|o| o.kind == "DaemonSet")
}

/// Evicts (or, past the grace period, deletes) the node's pods; true once none is left.
async fn drain(ctx: &Context, claim: &NodeClaim, node: &str) -> Result<bool, ControllerError> {
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let list = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await?;
    let leaving: Vec<&Pod> = list.items.iter().filter(|p| must_leave(p)).collect();
    if leaving.is_empty() {
        return Ok(true);
    }
    let past_deadline = match (
        claim.spec.termination_grace_period.as_deref(),
        claim.metadata.deletion_timestamp.as_ref(),
    ) {
        (Some(grace), Some(deleted)) => duration::parse(grace).is_ok_and(|grace| {
            millis_since(deleted) >= i64::try_from(grace.as_millis()).unwrap_or(i64::MAX)
        }),
        _ => false,
    };
    for pod in leaving {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = pod.name_any();
        let namespace = pod.namespace().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
        if past_deadline {
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            };
            match api.delete(&name, &params).await {
                Ok(_) => {
                    ctx.events
                        .warning(
                            pod,
                            "Deleted",
                            format!(
                                "terminationGracePeriod of NodeClaim {} elapsed",
                                claim.name_any()
                            ),
                        )
                        .await;
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(err) => return Err(err.into()),
            }
            continue;
        }
        match api.evict(&name, &EvictParams::default()).await {
            Ok(_) => {
                ctx.events
                    .normal(pod, "Evicted", format!("Evicted pod: draining Node {node}"))
                    .await;
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            // The namespace is being deleted: its controller removes the pod.
            Err(kube::Error::Api(status))
                if status.code == 403
                    && status.details.as_ref().is_some_and(|d| {
                        d.causes.iter().any(|c| c.reason == "NamespaceTerminating")
                    }) => {}
            Err(kube::Error::Api(status)) if status.code == 429 => {
                ctx.events
                    .warning(
                        pod,
                        "FailedDraining",
                        format!("eviction blocked: {}", status.message),
                    )
                    .await;
            }
            Err(err) => return Err(err.into()),
        }
    }
    Ok(false)
}
