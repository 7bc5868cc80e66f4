//! NodeClass status: `Ready` from the provider's `validate-node-class` (or `ProviderNotFound`
//! when the NodeClass names a provider that is not loaded) and from `InstanceTypesReady`: whether
//! the provider's `get-instance-types` answers, with a catalog the host takes (finite prices,
//! indices in range), for every NodePool of the class (`InvalidCatalog`,
//! `GetInstanceTypesFailed`, with the metric `capstan_nodeclass_instance_types_ready`); a broken
//! catalog is thus seen on the class and, through `NodeClassReady`, on its pools, and clears
//! when the provider answers again. And termination: like Karpenter's
//! node classes, a NodeClass carries a finalizer and, once deleted, stays until no NodeClaim
//! refers to it any more (their instances are deleted through it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::api::nodeclass::{GROUP, KIND};
use crate::api::shared::set_condition;
use crate::api::{ConditionStatus, NodeClaim, NodeClass, NodeClassStatus};
use crate::controllers::finalizer;
use crate::controllers::{Context, ControllerError, now};
use crate::metrics::cloudprovider::controller;
use crate::provider::convert;
use crate::rules::snapshot::ProvisionError;
use crate::runtime::types::ProviderError;

/// The condition type.
pub const READY: &str = "Ready";
/// The condition on the provider's catalog for the class's NodePools.
pub const INSTANCE_TYPES_READY: &str = "InstanceTypesReady";
/// How often a Ready class's catalog is looked at again (the instance-type cache's TTL).
const READY_RECHECK: Duration = Duration::from_secs(60);

/// Runs the controller until it stops. Every NodeClass is re-validated when a provider is
/// loaded, reloaded or removed, and when a NodePool comes, goes or changes its spec.
pub async fn run(ctx: Arc<Context>) {
    let api: Api<NodeClass> = Api::all(ctx.client.clone());
    let registry_changes = futures::stream::unfold(ctx.registry.subscribe(), |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    });
    // A NodePool created, changed in its spec or deleted changes what the class's catalog is
    // asked for: look at every class again (status-only changes keep the generation).
    let mut generations: std::collections::HashMap<String, Option<i64>> =
        std::collections::HashMap::new();
    let pool_changes = ctx.state.pools.subscribe().filter_map(move |pool| {
        let key = pool.name_any();
        let generation = pool
            .metadata
            .deletion_timestamp
            .is_none()
            .then_some(pool.metadata.generation)
            .flatten();
        let changed = generations.insert(key, generation) != Some(generation);
        futures::future::ready(changed.then_some(()))
    });
    Controller::new(api, ctx.watcher_config())
        .trigger_backoff(crate::state::watch_backoff())
        .reconcile_all_on(futures::stream::select(registry_changes, pool_changes))
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(error = %err, "nodeclass reconcile failed");
            }
        })
        .await;
}

fn error_policy(class: Arc<NodeClass>, err: &ControllerError, ctx: Arc<Context>) -> Action {
    let name = class.name_any();
    Action::requeue(super::retry_after("NodeClass", &name, err, || {
        ctx.backoff(&format!("nodeclass/{name}"))
    }))
}

/// What validation says: status, reason, message.
pub(crate) async fn validate(
    ctx: &Context,
    class: &NodeClass,
) -> (ConditionStatus, &'static str, String) {
    let name = &class.spec.provider;
    let Some(provider) = ctx.registry.get(name) else {
        let loaded = ctx.registry.names();
        return (
            ConditionStatus::False,
            "ProviderNotFound",
            format!(
                "provider {name} is not loaded (loaded: {})",
                loaded.join(", ")
            ),
        );
    };
    let started = Instant::now();
    let result = provider
        .validate_node_class(&convert::node_class_to_wit(class))
        .await;
    ctx.observe_call(
        controller::NODECLASS,
        name,
        "validate-node-class",
        "",
        &result,
        started,
    );
    match result {
        Ok(()) => (ConditionStatus::True, "Ready", String::new()),
        Err(err) => match err.provider_error() {
            Some(ProviderError::Invalid(m)) => {
                (ConditionStatus::False, "InvalidParameters", m.clone())
            }
            Some(ProviderError::NodeClassNotReady(m)) => {
                (ConditionStatus::False, "NodeClassNotReady", m.clone())
            }
            _ => (
                ConditionStatus::Unknown,
                "ValidationFailed",
                err.to_string(),
            ),
        },
    }
}

/// Whether the provider's `get-instance-types` gives a catalog the host takes for every NodePool
/// of `class` (through the provisioner's cache, so a catalog it fetched lately is not asked again).
async fn instance_types(
    ctx: &Context,
    class: &NodeClass,
) -> (ConditionStatus, &'static str, String) {
    let Some(provider) = ctx.registry.get(&class.spec.provider) else {
        return (ConditionStatus::Unknown, "ProviderNotFound", String::new());
    };
    let name = class.name_any();
    let mut pools: Vec<_> = ctx
        .state
        .pools
        .store()
        .state()
        .into_iter()
        .filter(|pool| {
            let reference = &pool.spec.template.spec.node_class_ref;
            reference.group == GROUP && reference.kind == KIND && reference.name == name
        })
        .collect();
    pools.sort_by_key(|pool| pool.name_any());
    let mut reason = "InstanceTypesReady";
    let mut failures = Vec::new();
    for pool in &pools {
        let result = ctx
            .instance_types
            .get(controller::NODECLASS, &provider, pool, class)
            .await;
        if let Err(err) = result {
            reason = match &err {
                ProvisionError::InstanceType(_) => "InvalidCatalog",
                ProvisionError::Call(_) => "GetInstanceTypesFailed",
                _ => "InstanceTypesUnavailable",
            };
            failures.push(format!("NodePool {}: {err}", pool.name_any()));
        }
    }
    if failures.is_empty() {
        (ConditionStatus::True, reason, String::new())
    } else {
        (
            ConditionStatus::False,
            reason,
            format!(
                "provider {} gives no usable instance types, so nothing launches for {}",
                class.spec.provider,
                failures.join("; ")
            ),
        )
    }
}

/// The finalizer that keeps a deleted NodeClass until its NodeClaims are gone.
pub const FINALIZER: &str = "capstan.dev/termination";

/// A deleted NodeClass: waits for the NodeClaims that use it, then lets it go.
async fn finalize(class: &NodeClass, ctx: &Context) -> Result<Action, ControllerError> {
    if !finalizer::has(class, FINALIZER) {
        return Ok(Action::await_change());
    }
    let name = class.name_any();
    let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
    let waiting: Vec<String> = claims
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|claim| {
            let reference = &claim.spec.node_class_ref;
            reference.group == GROUP && reference.kind == KIND && reference.name == name
        })
        .map(ResourceExt::name_any)
        .collect();
    if !waiting.is_empty() {
        ctx.events
            .normal(
                class,
                "WaitingOnNodeClaimTermination",
                format!(
                    "waiting on {} NodeClaim(s) to terminate: {}",
                    waiting.len(),
                    waiting.join(", ")
                ),
            )
            .await;
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    finalizer::remove(&Api::all(ctx.client.clone()), class, FINALIZER).await?;
    ctx.metrics.own.forget_nodeclass(&name);
    Ok(Action::await_change())
}

/// One reconcile of one NodeClass.
pub async fn reconcile(
    class: Arc<NodeClass>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    if class.metadata.deletion_timestamp.is_some() {
        return finalize(&class, &ctx).await;
    }
    if !finalizer::has(class.as_ref(), FINALIZER) {
        finalizer::add(&Api::all(ctx.client.clone()), class.as_ref(), FINALIZER).await?;
        // The update comes back as a watch event; validate the new version then.
        return Ok(Action::await_change());
    }
    let (valid, valid_reason, valid_message) = validate(&ctx, &class).await;
    let (types, types_reason, types_message) = if valid == ConditionStatus::True {
        instance_types(&ctx, &class).await
    } else {
        (
            ConditionStatus::Unknown,
            "NodeClassNotValidated",
            String::new(),
        )
    };
    if valid == ConditionStatus::True {
        ctx.metrics
            .own
            .instance_types_ready(&class.name_any(), types == ConditionStatus::True);
    }
    let (status, reason, message) = if valid != ConditionStatus::True {
        (valid, valid_reason, valid_message)
    } else if types != ConditionStatus::True {
        (types, types_reason, types_message.clone())
    } else {
        (ConditionStatus::True, "Ready", String::new())
    };
    let mut next = class.status.clone().unwrap_or_default();
    let types_changed = set_condition(
        &mut next.conditions,
        INSTANCE_TYPES_READY,
        types,
        Some(types_reason),
        Some(&types_message),
        class.metadata.generation,
        now(),
    );
    let changed = set_condition(
        &mut next.conditions,
        READY,
        status,
        Some(reason),
        Some(&message),
        class.metadata.generation,
        now(),
    );
    if changed || types_changed {
        next.last_validated = Some(now());
        let api: Api<NodeClass> = Api::all(ctx.client.clone());
        let patch = json!({"metadata": {"resourceVersion": class.resource_version()}, "status": NodeClassStatus { ..next }});
        api.patch_status(
            &class.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
        // Events follow `Ready`; the catalog's condition alone can move while Ready is False
        // for another reason.
        if changed && status == ConditionStatus::True {
            ctx.events
                .normal(
                    class.as_ref(),
                    "Ready",
                    "the provider accepted the parameters and its instance types are usable",
                )
                .await;
        } else if changed {
            ctx.events.warning(class.as_ref(), reason, message).await;
        }
    }
    ctx.reset_backoff(&format!("nodeclass/{}", class.name_any()));
    Ok(Action::requeue(if status == ConditionStatus::True {
        READY_RECHECK
    } else {
        Duration::from_secs(15)
    }))
}
