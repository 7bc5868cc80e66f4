//! Launch: the provider's `create`, and what its answer (or error) means for the claim.
//!
//! Before `create`, the claim's requirements are narrowed to offerings not recently out of
//! capacity ([`crate::controllers::unavailable_offerings`]); if none is left the claim fails with
//! `InsufficientCapacityError` without a provider call.
//!
//! | provider answer | reaction |
//! | --- | --- |
//! | an instance | labels, annotations, provider ID, image ID, capacity, allocatable; `Launched=True` |
//! | an instance labelled against the claim ([`launch_answer`]) | Events `LaunchFailed` (claim) and `ProviderAnswerRefused` (Provider); `Launched=Unknown`, reason `ProviderAnswerRefused`; retry with backoff |
//! | an instance whose provider ID another claim or its Node holds, or a Node older than the claim | the same, reason `ProviderIDTaken` |
//! | `insufficient-capacity` | Event `InsufficientCapacityError`, offerings cached unavailable, delete the claim |
//! | (no answer within the launch timeout) | Event `LaunchTimeout`, delete the claim |
//! | `node-class-not-ready` | Event `NodeClassNotReady`, delete the claim |
//! | (before `create`) a served node class missing | Event `InsufficientCapacityError`, delete the claim |
//! | (before `create`) a served node class with `Ready=False` | Event `NodeClassNotReady`, delete the claim |
//! | `create-failed{reason, message}` | `Launched=Unknown` with that reason; retry with backoff |
//! | `retryable` | retry with backoff; reported once it fails three times in a row |
//! | anything else (a trap, a call timeout, an answer the host cannot read) | `Launched=Unknown`, reason `LaunchFailed`; retry with backoff; the third failure in a row marks the claim's offerings unavailable and deletes the claim |
//!
//! Karpenter retries such a claim until the launch timeout (15 min here), its pods waiting on a
//! provider that is failing; here, after [`FAILURES_BEFORE_FALLBACK`] failures in a row (about
//! 7 s with the backoff) its offerings are avoided as after `insufficient-capacity`, so the
//! provisioner's next claim for those pods goes to the next NodePool by weight, of this provider
//! or another. The launch timeout marks the claim's offerings the same way ([`super::liveness`]).

use std::time::Instant;

use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::{Step, delete, liveness, ownership, persist_status, set};
use crate::api::labels::{HOSTNAME, INSTANCE_TYPE};
use crate::api::nodeclaim::conditions::LAUNCHED;
use crate::api::{ConditionStatus, NodeClaim, NodeSelectorOperator};
use crate::controllers::resolve;
use crate::controllers::unavailable_offerings::Narrowed;
use crate::controllers::{Context, ControllerError};
use crate::metrics::cloudprovider::controller;
use crate::provider::convert;
use crate::provider::launch_answer::{self, Refusal};
use crate::rules::claims::{is_true, nodepool};
use crate::rules::resolve::{Resolved, Unresolved};
use crate::runtime::CallError;
use crate::runtime::types::{NodeClaim as WitClaim, ProviderError};

/// After this many failures in a row of the provider itself (not `create-failed` or
/// `retryable`, which are its answers), the claim falls back: see the module's table.
pub const FAILURES_BEFORE_FALLBACK: u32 = 3;

/// How often an unresolvable claim is looked at again.
const UNRESOLVED_RETRY: std::time::Duration = std::time::Duration::from_secs(15);

/// Launches the claim's instance unless it is launched already.
pub async fn reconcile(claim: &mut NodeClaim, ctx: &Context) -> Result<Step, ControllerError> {
    if is_true(claim, LAUNCHED) {
        return Ok(Step::Continue);
    }
    // The controller's cache can lag behind the claim's own status writes (seen at a thousand
    // claims under load: a reconcile of a copy from before `Launched=True` called `create` again
    // for an instance launched and registered a moment before). `create` is the one call that is
    // not idempotent, so the claim is read afresh first.
    match Api::<NodeClaim>::all(ctx.client.clone())
        .get_opt(&claim.name_any())
        .await?
    {
        None => return Ok(Step::Stop(Action::await_change())),
        // Another claim under the same name: this one is gone.
        Some(fresh) if fresh.uid() != claim.uid() => return Ok(Step::Stop(Action::await_change())),
        Some(fresh) if is_true(&fresh, LAUNCHED) => {
            *claim = fresh;
            return Ok(Step::Continue);
        }
        Some(_) => {}
    }
    let resolved = match resolve::resolve_for_launch(ctx, &claim.spec.node_class_ref).await? {
        Ok(resolved) => resolved,
        Err(unresolved) if unresolved.deletes_claim().is_some() => {
            return node_class_unusable(claim, ctx, &unresolved).await;
        }
        Err(unresolved) => {
            let message = unresolved.to_string();
            if set(
                claim,
                LAUNCHED,
                ConditionStatus::Unknown,
                unresolved.reason(),
                &message,
            ) {
                persist_status(ctx, claim).await?;
                ctx.events
                    .warning(claim, unresolved.reason(), message)
                    .await;
            }
            return Ok(Step::Stop(Action::requeue(UNRESOLVED_RETRY)));
        }
    };
    let request = match convert::node_claim_to_wit(claim) {
        Ok(request) => request,
        Err(err) => {
            let message = err.to_string();
            if set(
                claim,
                LAUNCHED,
                ConditionStatus::False,
                "InvalidRequirements",
                &message,
            ) {
                persist_status(ctx, claim).await?;
                ctx.events.warning(claim, "LaunchFailed", message).await;
                ctx.metrics
                    .own
                    .failed(&nodepool(claim), "InvalidRequirements");
            }
            return Ok(Step::Stop(Action::await_change()));
        }
    };
    let mut request = request;
    match ctx
        .unavailable_offerings
        .narrow(&resolved.provider_name, &claim.spec.requirements)
    {
        Narrowed::Available(requirements) => {
            if requirements != claim.spec.requirements {
                tracing::debug!(nodeclaim = %claim.name_any(), "avoiding offerings recently out of capacity");
                request.requirements = convert::requirements_to_wit(&requirements)?;
            }
        }
        Narrowed::Exhausted => {
            let message = format!(
                "NodeClaim {} could not launch: every offering it allows is out of capacity at provider {} (cached)",
                claim.name_any(),
                resolved.provider_name
            );
            ctx.metrics
                .own
                .failed(&nodepool(claim), "InsufficientCapacity");
            ctx.metrics
                .lifecycle
                .disrupted(claim, "insufficient_capacity", "", 0);
            ctx.events
                .warning(claim, "InsufficientCapacityError", message)
                .await;
            delete(ctx, claim).await?;
            return Ok(Step::Stop(Action::await_change()));
        }
    }
    let class = convert::node_class_to_wit(&resolved.node_class);
    let started = Instant::now();
    // A create still running when the launch timeout runs out is abandoned (garbage collection
    // removes an instance it may leave behind) and the claim deleted.
    let budget = liveness::launch_budget(claim, ctx);
    let Ok(result) = tokio::time::timeout(budget, resolved.provider.create(&request, &class)).await
    else {
        let timed_out: Result<(), CallError> = Err(CallError::WallTimeout {
            function: "create",
            limit: budget,
        });
        ctx.observe_call(
            controller::NODECLAIM_LIFECYCLE,
            &resolved.provider_name,
            "create",
            &nodepool(claim),
            &timed_out,
            started,
        );
        return liveness::launch_timed_out(claim, ctx).await;
    };
    ctx.observe_call(
        controller::NODECLAIM_LIFECYCLE,
        &resolved.provider_name,
        "create",
        &nodepool(claim),
        &result,
        started,
    );
    match result {
        Ok(created) => launched(claim, ctx, &resolved, &request, &created).await,
        Err(err) => failed(claim, ctx, &resolved.provider_name, err).await,
    }
}

async fn launched(
    claim: &mut NodeClaim,
    ctx: &Context,
    resolved: &Resolved,
    request: &WitClaim,
    created: &WitClaim,
) -> Result<Step, ControllerError> {
    let launched = convert::launched_from_wit(created);
    let Some(provider_id) = launched.provider_id.clone() else {
        let err = format!(
            "provider {} returned no provider ID",
            resolved.provider_name
        );
        return retry(claim, ctx, "LaunchFailed", &err).await;
    };
    let refusal = match refusals(ctx, claim, resolved, request, &launched).await {
        Ok(refusals) if refusals.is_empty() => None,
        Ok(refusals) => Some(("ProviderAnswerRefused", joined(&refusals))),
        Err(message) => Some(("ProviderAnswerRefused", message)),
    };
    let refusal = match refusal {
        Some(refusal) => Some(refusal),
        None => ownership::taken(ctx, claim, &provider_id)
            .or_else(|| ctx.launched_ids.hold(claim, &provider_id).err())
            .map(|taken| ("ProviderIDTaken", taken.to_string())),
    };
    if let Some((reason, message)) = refusal {
        return refuse(claim, ctx, &resolved.provider_name, reason, &message).await;
    }
    // Metadata first, then status: a crash in between re-runs create, which finds the same
    // instance. The claim's own labels win, then its single-value requirements, and the provider's
    // labels fill in the rest (Karpenter's order).
    let mut labels = launch_answer::labels_to_keep(&launched.labels);
    for r in &claim.spec.requirements {
        if r.operator == NodeSelectorOperator::In && r.values.len() == 1 && r.key != HOSTNAME {
            labels.insert(r.key.clone(), r.values[0].clone());
        }
    }
    labels.extend(claim.labels().clone());
    // The claim's annotations win too: a provider's that would change one is dropped (an Event
    // names it), the others fill in.
    let (mut annotations, dropped) =
        launch_answer::annotations_to_keep(claim.annotations(), &launched.annotations);
    if !dropped.is_empty() {
        let message = format!(
            "provider {}'s annotations {} dropped: the NodeClaim's own values win",
            resolved.provider_name,
            dropped.join(", ")
        );
        tracing::info!(nodeclaim = %claim.name_any(), %message, "provider annotations dropped");
        ctx.events
            .warning(claim, "ProviderAnnotationsDropped", message)
            .await;
    }
    annotations.insert(
        crate::api::labels::PROVIDER_ANNOTATION.to_owned(),
        resolved.provider_name.clone(),
    );
    if &labels != claim.labels() || &annotations != claim.annotations() {
        let api: Api<NodeClaim> = Api::all(ctx.client.clone());
        let patch = json!({"metadata": {"labels": labels, "annotations": annotations}});
        *claim = api
            .patch(
                &claim.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
    }
    let status = claim.status.get_or_insert_with(Default::default);
    status.provider_id = Some(provider_id.clone());
    status.image_id = launched.image_id.clone();
    status.capacity = launched.capacity.clone();
    status.allocatable = launched.allocatable.clone();
    // The claim read from the cache may be older than the one on the API server (the metadata
    // patch above refreshed it): the transition, its metric and its Event happen once, when this
    // write is the one that sets `Launched=True`.
    let transition = set(claim, LAUNCHED, ConditionStatus::True, "Launched", "");
    persist_status(ctx, claim).await?;
    ctx.reset_backoff(&launch_key(claim));
    if !transition {
        return Ok(Step::Continue);
    }
    ctx.metrics.lifecycle.launched(&nodepool(claim));
    let instance_type = launched
        .labels
        .get(INSTANCE_TYPE)
        .map_or(String::new(), |t| format!(" ({t})"));
    ctx.events
        .normal(
            claim,
            "Launched",
            format!("Launched instance {provider_id}{instance_type}"),
        )
        .await;
    Ok(Step::Continue)
}

async fn failed(
    claim: &mut NodeClaim,
    ctx: &Context,
    provider: &str,
    err: CallError,
) -> Result<Step, ControllerError> {
    let pool = nodepool(claim);
    match err.provider_error() {
        Some(ProviderError::InsufficientCapacity(message)) => {
            ctx.metrics.own.failed(&pool, "InsufficientCapacity");
            ctx.metrics
                .lifecycle
                .disrupted(claim, "insufficient_capacity", "", 0);
            let marked = ctx
                .unavailable_offerings
                .record_insufficient_capacity(provider, &claim.spec.requirements);
            // Its catalogs are asked again: one that knows its capacity says so, and says when
            // it is back (`InstanceTypeCache::take_restored`).
            ctx.instance_types.expire_provider(provider);
            tracing::info!(nodeclaim = %claim.name_any(), provider, offerings = marked, "offerings marked unavailable");
            ctx.events
                .warning(
                    claim,
                    "InsufficientCapacityError",
                    format!("NodeClaim {} could not launch: {message}", claim.name_any()),
                )
                .await;
            delete(ctx, claim).await?;
            Ok(Step::Stop(Action::await_change()))
        }
        Some(ProviderError::NodeClassNotReady(message)) => {
            ctx.metrics.own.failed(&pool, "NodeClassNotReady");
            ctx.metrics
                .lifecycle
                .disrupted(claim, "nodeclass_not_ready", "", 0);
            ctx.events
                .warning(claim, "NodeClassNotReady", message.clone())
                .await;
            delete(ctx, claim).await?;
            Ok(Step::Stop(Action::await_change()))
        }
        Some(ProviderError::CreateFailed(failure)) => {
            let reason = condition_reason(&failure.reason);
            let message = failure.message.clone();
            ctx.metrics.own.failed(&pool, &reason);
            retry(claim, ctx, &reason, &message).await
        }
        Some(ProviderError::Retryable(message)) => {
            let key = launch_key(claim);
            let delay = ctx.backoff(&key);
            if ctx.failures(&key) >= 3 {
                ctx.metrics.own.failed(&pool, "LaunchFailed");
                if set(
                    claim,
                    LAUNCHED,
                    ConditionStatus::Unknown,
                    "LaunchFailed",
                    message,
                ) {
                    persist_status(ctx, claim).await?;
                }
                ctx.events
                    .warning(claim, "LaunchFailed", format!("retryable: {message}"))
                    .await;
            } else {
                tracing::debug!(nodeclaim = %claim.name_any(), %message, "create: retryable");
            }
            Ok(Step::Stop(Action::requeue(delay)))
        }
        _ => {
            ctx.metrics.own.failed(&pool, "LaunchFailed");
            let message = err.to_string();
            let step = retry(claim, ctx, "LaunchFailed", &message).await?;
            let key = launch_key(claim);
            if ctx.failures(&key) < FAILURES_BEFORE_FALLBACK {
                return Ok(step);
            }
            ctx.reset_backoff(&key);
            let marked = ctx
                .unavailable_offerings
                .record_failed_claim(provider, claim);
            tracing::info!(nodeclaim = %claim.name_any(), provider, offerings = marked, "provider failing: offerings marked unavailable");
            ctx.metrics
                .lifecycle
                .disrupted(claim, "launch_failed", "", 0);
            // Its own action: the retries' Events aggregate into a series that keeps their note.
            ctx.events
                .warning_with_action(
                    claim,
                    "LaunchFailed",
                    "FallBack",
                    format!(
                        "NodeClaim {} failed {FAILURES_BEFORE_FALLBACK} times in a row at provider {provider} ({message}): its offerings are avoided for a while and the claim is deleted, so its pods can go to another NodePool",
                        claim.name_any()
                    ),
                )
                .await;
            delete(ctx, claim).await?;
            Ok(Step::Stop(Action::await_change()))
        }
    }
}

/// Marks the offerings of `claim`, which timed out, unavailable at its provider
/// ([`crate::controllers::unavailable_offerings::UnavailableOfferings::record_failed_claim`]), so
/// its pods go elsewhere; how many were marked (none when its provider cannot be resolved).
pub async fn avoid_offerings(ctx: &Context, claim: &NodeClaim) -> usize {
    let provider = match resolve::launching_provider(ctx, claim).await {
        Ok(Ok((name, _))) => name,
        Ok(Err(_)) | Err(_) => return 0,
    };
    let marked = ctx
        .unavailable_offerings
        .record_failed_claim(&provider, claim);
    tracing::info!(nodeclaim = %claim.name_any(), provider, offerings = marked, "timed out: offerings marked unavailable");
    marked
}

/// A served node class that is missing or not Ready: as in Karpenter, the claim goes (an Event,
/// the disruption metric) so its pods are provisioned again.
async fn node_class_unusable(
    claim: &NodeClaim,
    ctx: &Context,
    unresolved: &Unresolved,
) -> Result<Step, ControllerError> {
    let Some((event, metric)) = unresolved.deletes_claim() else {
        return Ok(Step::Continue);
    };
    ctx.metrics
        .own
        .failed(&nodepool(claim), unresolved.reason());
    ctx.metrics.lifecycle.disrupted(claim, metric, "", 0);
    ctx.events
        .warning(
            claim,
            event,
            format!(
                "NodeClaim {} could not launch: {unresolved}",
                claim.name_any()
            ),
        )
        .await;
    delete(ctx, claim).await?;
    Ok(Step::Stop(Action::await_change()))
}

/// What the host refuses in `launched`, `create`'s answer to `request` ([`launch_answer`]). A
/// reserved label is looked up in the launched instance type's catalog entry only when needed
/// (the catalog is usually cached).
async fn refusals(
    ctx: &Context,
    claim: &NodeClaim,
    resolved: &Resolved,
    request: &WitClaim,
    launched: &convert::Launched,
) -> Result<Vec<Refusal>, String> {
    let requirements =
        convert::requirements_from_wit(&request.requirements).map_err(|err| err.to_string())?;
    let claimed = launch_answer::Claimed {
        labels: claim.labels(),
        annotations: claim.annotations(),
        requirements: &requirements,
    };
    let answer = launch_answer::Answer {
        labels: &launched.labels,
        annotations: &launched.annotations,
    };
    let refusals = launch_answer::check(claimed, answer, None);
    if !refusals
        .iter()
        .any(|r| matches!(r, Refusal::ReservedLabel { .. }))
    {
        return Ok(refusals);
    }
    let declared = declared(ctx, claim, resolved, launched).await;
    Ok(launch_answer::check(claimed, answer, declared.as_ref()))
}

/// The requirements of the instance type the answer names, from the provider's catalog for the
/// claim's pool.
async fn declared(
    ctx: &Context,
    claim: &NodeClaim,
    resolved: &Resolved,
    launched: &convert::Launched,
) -> Option<crate::scheduling::Requirements> {
    let type_name = launched.labels.get(INSTANCE_TYPE)?;
    let pool = ctx
        .state
        .pools
        .store()
        .get(&ObjectRef::new(&nodepool(claim)))?;
    let types = ctx
        .instance_types
        .get(
            controller::NODECLAIM_LIFECYCLE,
            &resolved.provider,
            &pool,
            &resolved.node_class,
        )
        .await
        .ok()?;
    types
        .iter()
        .find(|t| &t.name == type_name)
        .map(|t| t.requirements.clone())
}

fn joined(refusals: &[Refusal]) -> String {
    refusals
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// An answer the host will not write on the claim: reported on the claim and on the Provider,
/// then retried with backoff like any launch failure (an instance it left behind has no claim and
/// is garbage-collected).
async fn refuse(
    claim: &mut NodeClaim,
    ctx: &Context,
    provider: &str,
    reason: &str,
    message: &str,
) -> Result<Step, ControllerError> {
    let message = format!(
        "provider {provider}'s answer to create for NodeClaim {} refused: {message}",
        claim.name_any()
    );
    tracing::warn!(nodeclaim = %claim.name_any(), provider, %message, "create answer refused");
    ctx.metrics.own.failed(&nodepool(claim), reason);
    ctx.events
        .warning_about(&provider_reference(provider), reason, message.clone())
        .await;
    retry(claim, ctx, reason, &message).await
}

/// The Provider object, for Events about it.
fn provider_reference(name: &str) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(crate::api::Provider::api_version(&()).into_owned()),
        kind: Some(crate::api::Provider::kind(&()).into_owned()),
        name: Some(name.to_owned()),
        ..Default::default()
    }
}

/// `Launched=Unknown` with `reason`, an Event, and a retry with backoff.
async fn retry(
    claim: &mut NodeClaim,
    ctx: &Context,
    reason: &str,
    message: &str,
) -> Result<Step, ControllerError> {
    let delay = ctx.backoff(&launch_key(claim));
    if set(claim, LAUNCHED, ConditionStatus::Unknown, reason, message) {
        persist_status(ctx, claim).await?;
    }
    ctx.events
        .warning(claim, "LaunchFailed", format!("{reason}: {message}"))
        .await;
    Ok(Step::Stop(Action::requeue(delay)))
}

fn launch_key(claim: &NodeClaim) -> String {
    format!("launch/{}", claim.name_any())
}

/// A provider's reason as a condition reason (`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`).
pub fn condition_reason(reason: &str) -> String {
    let cleaned: String = reason
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(1024)
        .collect();
    match cleaned.chars().next() {
        Some(c) if c.is_ascii_alphabetic() => cleaned,
        _ => "CreateFailed".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::condition_reason;

    #[test]
    fn reasons_are_sanitized() {
        assert_eq!(condition_reason("NodeNameTaken"), "NodeNameTaken");
        assert_eq!(condition_reason("quota exceeded!"), "quotaexceeded");
        assert_eq!(condition_reason("42"), "CreateFailed");
        assert_eq!(condition_reason(""), "CreateFailed");
    }
}
