//! Garbage collection, every [`Settings::gc_interval`](super::Settings):
//!
//! - an instance a provider lists that no NodeClaim accounts for (by provider ID, or by name for
//!   a launch whose status was not recorded yet) and that is older than the grace period is
//!   deleted;
//! - a registered NodeClaim whose instance its provider no longer lists is deleted (its
//!   termination then cleans up the Node), unless its Node is `Ready`: a kubelet that still
//!   reports says the instance is there whatever the provider's list says (Karpenter's rule). A
//!   claim that never registered is left to the registration timeout.
//!
//! With a selector configured, only instances and claims carrying those labels are considered.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use kube::api::ListParams;
use kube::{Api, ResourceExt};

use super::nodeclaim;
use crate::api::labels::NODEPOOL;
use crate::api::nodeclaim::conditions::{LAUNCHED, REGISTERED};
use crate::api::shared::find_condition;
use crate::api::{NodeClaim, NodeClass};
use crate::controllers::{Context, ControllerError, millis_since};
use crate::metrics::cloudprovider::controller::GARBAGE_COLLECTION as GC;
use crate::provider::convert;
use crate::rules::claims::{is_true, provider_id};
use crate::rules::nodes::node_ready;
use crate::runtime::types::ProviderError;

/// Runs forever.
pub async fn run(ctx: Arc<Context>) {
    let mut ticker = tokio::time::interval(ctx.settings.gc_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if let Err(err) = collect(&ctx).await {
            tracing::warn!(error = %err, "garbage collection failed");
        }
    }
}

/// One pass.
pub async fn collect(ctx: &Context) -> Result<(), ControllerError> {
    let claims = Api::<NodeClaim>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let known_ids: HashSet<&str> = claims.iter().filter_map(|c| provider_id(c)).collect();
    let known_names: HashSet<String> = claims.iter().map(ResourceExt::name_any).collect();
    let grace_ms = i64::try_from(ctx.settings.gc_grace.as_millis()).unwrap_or(i64::MAX);
    let now_ms = k8s_openapi::jiff::Timestamp::now().as_millisecond();

    // Instances each provider lists; a provider whose list fails is left out of both halves.
    let mut listed: HashMap<String, HashSet<String>> = HashMap::new();
    for (name, provider) in ctx.registry.all() {
        let started = Instant::now();
        let result = provider.list().await;
        ctx.observe_call(GC, &name, "list", "", &result, started);
        let instances = match result {
            Ok(instances) => instances,
            Err(err) => {
                tracing::warn!(provider = %name, error = %err, "garbage collection: list failed");
                continue;
            }
        };
        let mut ids = HashSet::new();
        for instance in instances {
            let Some(id) = instance.provider_id.clone().filter(|id| !id.is_empty()) else {
                continue;
            };
            ids.insert(id.clone());
            let labels: BTreeMap<String, String> = convert::key_values_from_wit(&instance.labels);
            if !ctx.selector.matches(&labels)
                || known_ids.contains(id.as_str())
                || known_names.contains(&instance.name)
            {
                continue;
            }
            let young = instance
                .created_at
                .and_then(|ms| i64::try_from(ms).ok())
                .is_some_and(|created| now_ms - created < grace_ms);
            if young {
                continue;
            }
            let started = Instant::now();
            let result = provider.delete(&instance).await;
            let pool = labels.get(NODEPOOL).map_or("", String::as_str);
            ctx.observe_call(GC, &name, "delete", pool, &result, started);
            match result {
                Ok(()) => {}
                Err(err) if matches!(err.provider_error(), Some(ProviderError::NotFound(_))) => {}
                Err(err) => {
                    tracing::warn!(provider = %name, instance = %id, error = %err, "garbage collection: delete failed");
                    continue;
                }
            }
            ctx.metrics.own.instance_garbage_collected();
            tracing::info!(provider = %name, instance = %id, "garbage-collected a leaked instance");
        }
        listed.insert(name, ids);
    }

    // Launched claims whose instance is gone.
    let classes: HashMap<String, String> = Api::<NodeClass>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|c| (c.name_any(), c.spec.provider))
        .chain(
            ctx.state
                .served
                .all()
                .into_iter()
                .map(|(key, class)| (key, class.spec.provider.clone())),
        )
        .collect();
    for claim in &claims {
        if claim.metadata.deletion_timestamp.is_some()
            || !ctx.selector.matches(claim.labels())
            || !is_true(claim, REGISTERED)
        {
            continue;
        }
        let Some(id) = provider_id(claim) else {
            continue;
        };
        let launched_long_ago = claim
            .status
            .as_ref()
            .and_then(|s| find_condition(&s.conditions, LAUNCHED))
            .is_some_and(|c| millis_since(&c.last_transition_time) >= grace_ms);
        let Some(ids) = classes
            .get(&crate::state::served::class_key(&claim.spec.node_class_ref))
            .and_then(|provider| listed.get(provider))
        else {
            continue;
        };
        if !launched_long_ago || ids.contains(id) {
            continue;
        }
        if nodeclaim::nodes_of(ctx, claim)
            .iter()
            .any(|node| node_ready(node))
        {
            tracing::debug!(nodeclaim = %claim.name_any(), instance = %id, "not listed by its provider, but its Node is Ready: kept");
            continue;
        }
        ctx.events
            .warning(
                claim,
                "GarbageCollected",
                format!("instance {id} no longer exists"),
            )
            .await;
        let pods = nodeclaim::reschedulable_pods(ctx, claim);
        nodeclaim::delete(ctx, claim).await?;
        ctx.metrics
            .lifecycle
            .disrupted(claim, "garbage_collected", "", pods);
    }
    Ok(())
}
