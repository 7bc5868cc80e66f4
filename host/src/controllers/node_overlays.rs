//! NodeOverlays (`--feature-gates NodeOverlay=true`, off by default as in Karpenter v1.14): reads
//! every NodeOverlay, validates it, finds the conflicts over every NodePool's catalog
//! ([`crate::scheduling::overlay::conflicts`]), hands the valid, conflict-free ones to the
//! instance-type cache (which applies them to every catalog the provisioner, consolidation and
//! the price metrics read) and writes `ValidationSucceeded` and `Ready` on each overlay, with a
//! Warning Event when one turns false.
//!
//! It evaluates at start, when a NodeOverlay or a NodePool changes, when a provider is loaded or
//! reloaded, and every [`RECHECK`] (a catalog may change under the same pool). Until the first
//! evaluation the provisioner and consolidation wait, so no NodeClaim is priced without the
//! overlays.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::api::nodeoverlay::{READY, VALIDATION_SUCCEEDED};
use crate::api::shared::set_condition;
use crate::api::{ConditionStatus, NodeOverlay, NodeOverlayStatus};
use crate::controllers::provisioner::instance_types;
use crate::controllers::{Context, ControllerError, evaluations, now};
use crate::scheduling::overlay::{self, Overlay};

/// How often the overlays are evaluated again without a change (the instance-type cache's TTL).
pub const RECHECK: Duration = Duration::from_secs(60);
/// How long triggers are gathered before an evaluation.
const SETTLE: Duration = Duration::from_millis(300);

/// Runs while the gate is on; does nothing (forever) when it is off.
pub async fn run(ctx: Arc<Context>) {
    if !ctx.settings.node_overlay {
        return std::future::pending().await;
    }
    tracing::info!("node overlays on (feature gate NodeOverlay)");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let overlays = evaluations::trigger_on(
        Api::<NodeOverlay>::all(ctx.client.clone()),
        watcher::Config::default(),
        tx.clone(),
        "NodeOverlay",
    );
    let pools_tx = tx.clone();
    let pools = tokio::spawn(ctx.state.pools.subscribe().for_each(move |_| {
        let _ = pools_tx.send(());
        futures::future::ready(())
    }));
    let mut registry = ctx.registry.subscribe();
    let registry_tx = tx.clone();
    let providers = tokio::spawn(async move {
        while registry.changed().await.is_ok() {
            if registry_tx.send(()).is_err() {
                break;
            }
        }
    });
    evaluations::run(&ctx, "nodeoverlays", (RECHECK, SETTLE), (tx, rx), || {
        evaluate(&ctx)
    })
    .await;
    overlays.abort();
    pools.abort();
    providers.abort();
}

/// What an overlay's conditions should say: status, reason, message.
type Verdict = (ConditionStatus, &'static str, String);

/// One evaluation: every overlay read, checked against every pool's catalog, the accepted ones
/// given to the cache, the statuses written.
async fn evaluate(ctx: &Context) -> Result<(), ControllerError> {
    let api: Api<NodeOverlay> = Api::all(ctx.client.clone());
    let objects = match api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(status)) if status.code == 404 => {
            tracing::warn!(
                "the NodeOverlay CRD (nodeoverlays.karpenter.sh) is not installed: no overlays apply"
            );
            Vec::new()
        }
        Err(err) => return Err(err.into()),
    };
    let mut verdicts: BTreeMap<String, Verdict> = BTreeMap::new();
    let mut overlays = Vec::new();
    for object in &objects {
        match Overlay::from_api(object) {
            Ok(o) => overlays.push(o),
            Err(err) => {
                verdicts.insert(
                    object.name_any(),
                    (ConditionStatus::False, "RuntimeValidation", err.to_string()),
                );
            }
        }
    }
    let (accepted, refused) = overlay::accept_over(overlays, &raw_catalogs(ctx).await);
    for (name, why) in &refused {
        verdicts.insert(
            name.clone(),
            (ConditionStatus::False, "Conflict", why.clone()),
        );
    }
    let names: Vec<String> = accepted.iter().map(|o| o.name.clone()).collect();
    if ctx.instance_types.set_overlays(accepted) {
        tracing::info!(applied = ?names, refused = ?refused.keys().collect::<Vec<_>>(), "node overlays changed");
    }
    for object in &objects {
        let verdict = verdicts.remove(&object.name_any()).unwrap_or((
            ConditionStatus::True,
            "ValidationSucceeded",
            String::new(),
        ));
        write_status(ctx, &api, object, verdict).await?;
    }
    Ok(())
}

/// Every managed NodePool's catalog as its provider gives it (a pool whose catalog cannot be had
/// is left out, as Karpenter leaves it out): name, template labels, instance types.
async fn raw_catalogs(ctx: &Context) -> Vec<overlay::PoolCatalog> {
    let mut out = Vec::new();
    for (pool, types) in instance_types::raw_catalogs(ctx).await {
        let name = pool.name_any();
        match types {
            Ok(types) => out.push((name, overlay::template_labels(&pool), types)),
            Err(err) => {
                tracing::debug!(nodepool = %name, error = %err, "nodepool left out of the overlay evaluation");
            }
        }
    }
    out
}

/// Writes `ValidationSucceeded` and `Ready` on `object` when they change, and a Warning Event
/// when they turn false.
async fn write_status(
    ctx: &Context,
    api: &Api<NodeOverlay>,
    object: &NodeOverlay,
    (status, reason, message): Verdict,
) -> Result<(), ControllerError> {
    let mut next = object.status.clone().unwrap_or_default();
    let generation = object.metadata.generation;
    let mut changed = set_condition(
        &mut next.conditions,
        VALIDATION_SUCCEEDED,
        status,
        Some(reason),
        Some(&message),
        generation,
        now(),
    );
    let ready_reason = if status == ConditionStatus::True {
        "Ready"
    } else {
        reason
    };
    changed |= set_condition(
        &mut next.conditions,
        READY,
        status,
        Some(ready_reason),
        Some(&message),
        generation,
        now(),
    );
    if !changed {
        return Ok(());
    }
    let was = object
        .status
        .as_ref()
        .and_then(|s| crate::api::shared::find_condition(&s.conditions, READY))
        .map(|c| (c.status, c.message.clone()));
    let patch = json!({
        "metadata": {"resourceVersion": object.resource_version()},
        "status": NodeOverlayStatus { ..next },
    });
    match api
        .patch_status(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        // Gone or changed meanwhile: the watch brings the next evaluation.
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => return Ok(()),
        Err(err) => return Err(err.into()),
        Ok(_) => {}
    }
    if status != ConditionStatus::True && was != Some((status, Some(message.clone()))) {
        ctx.events.warning(object, reason, message).await;
    }
    Ok(())
}
