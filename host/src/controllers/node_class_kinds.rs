//! The node class kinds controller: which provider serves which node class kind, a watch per
//! served kind, and Karpenter's `Ready` condition on every object of those kinds.
//!
//! Whenever the providers change (and every [`RESYNC`], which covers a Provider's
//! `spec.nodeClassKinds` edited without a reload), the kinds each loaded component declares are
//! narrowed by its Provider's `spec.nodeClassKinds` and assigned one owner each
//! ([`crate::provider::kinds::assign`]); each Provider's `NodeClassKinds` condition says what it
//! serves or why not. Each served kind gets a watch of its objects (dynamic objects: the host
//! knows the kinds only at run time); every object goes into [`crate::state::served`], is
//! validated through its provider's `validate-node-class` (its `spec` and kind as the parameters),
//! and where the kind's CRD has a status its `Ready` condition is written (`Ready`,
//! `InvalidParameters`, `NodeClassNotReady`, `ProviderNotFound`, `ValidationFailed`), with an
//! Event when it turns not ready. A verdict is written once per generation: another writer's
//! `Ready` stands until the class or the verdict changes (see [`observe`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::api::ConditionStatus;
use crate::api::provider::Provider;
use crate::api::shared::{Condition, find_condition, set_condition};
use crate::controllers::{Context, now};
use crate::provider::kinds::{self, Assignment, Claimant, GroupKind, Served};
use crate::state::served;

/// The longest wait between attempts to watch a served kind (its CRD may not be installed).
const CRD_MISSING_RETRY: Duration = Duration::from_secs(30);

/// The Provider condition saying which node class kinds it serves.
pub const NODE_CLASS_KINDS: &str = "NodeClassKinds";
/// How often the assignment is worked out again without a provider change.
pub const RESYNC: Duration = Duration::from_secs(10);

/// Runs until the host stops.
pub async fn run(ctx: Arc<Context>) {
    let mut changes = ctx.registry.subscribe();
    let mut watches: HashMap<GroupKind, (Served, tokio::task::JoinHandle<()>)> = HashMap::new();
    loop {
        match assignment(&ctx).await {
            Ok((assignment, providers)) => {
                apply(&ctx, &assignment, &mut watches);
                report(&ctx, &assignment, &providers).await;
            }
            Err(err) => tracing::debug!(error = %err, "node class kinds: cannot list Providers"),
        }
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { break },
            () = tokio::time::sleep(RESYNC) => {}
        }
    }
    for (_, (_, task)) in watches {
        task.abort();
    }
}

/// The assignment from the loaded providers and their Provider objects.
async fn assignment(ctx: &Context) -> Result<(Assignment, Vec<Provider>), kube::Error> {
    let api: Api<Provider> = Api::all(ctx.client.clone());
    let mut params = ListParams::default();
    if let Some(selector) = &ctx.settings.selector {
        params = params.labels(selector);
    }
    let providers = api.list(&params).await?.items;
    let loaded: Vec<(String, Arc<crate::runtime::ProviderPre>)> = ctx.registry.all();
    let objects: BTreeMap<&str, &Provider> = providers
        .iter()
        .filter_map(|p| Some((p.metadata.name.as_deref()?, p)))
        .collect();
    // Every loaded provider, with its Provider object when it has one (`--provider name=file`
    // providers have none: they serve what their component declares).
    let claimants: Vec<Claimant<'_>> = loaded
        .iter()
        .map(|(name, pre)| {
            let object = objects.get(name.as_str());
            Claimant {
                name,
                created: object.and_then(|p| p.metadata.creation_timestamp.as_ref()),
                declared: pre.node_class_kinds(),
                spec: object.and_then(|p| p.spec.node_class_kinds.as_deref()),
            }
        })
        .collect();
    let assignment = kinds::assign(&claimants);
    Ok((assignment, providers))
}

/// Makes the running watches match `assignment` and publishes it.
fn apply(
    ctx: &Arc<Context>,
    assignment: &Assignment,
    watches: &mut HashMap<GroupKind, (Served, tokio::task::JoinHandle<()>)>,
) {
    if *ctx.state.served.assignment() != *assignment {
        tracing::info!(kinds = ?assignment.kinds.iter().map(|(k, s)| format!("{k}: {}", s.provider)).collect::<Vec<_>>(), "node class kinds served");
        ctx.state.served.set_assignment(assignment.clone());
    }
    watches.retain(|kind, (served, task)| {
        let keep = assignment.kinds.get(kind) == Some(&*served) && !task.is_finished();
        if !keep {
            task.abort();
        }
        keep
    });
    for (kind, served) in &assignment.kinds {
        if watches.contains_key(kind) {
            continue;
        }
        let task = tokio::spawn(watch_kind(Arc::clone(ctx), kind.clone(), served.clone()));
        watches.insert(kind.clone(), (served.clone(), task));
    }
}

/// Writes each loaded Provider's `NodeClassKinds` condition where it changed.
async fn report(ctx: &Context, assignment: &Assignment, providers: &[Provider]) {
    for provider in providers {
        let name = provider.name_any();
        let Some(report) = assignment.reports.get(&name) else {
            continue;
        };
        let (ok, reason, message) = report.condition();
        let mut conditions: Vec<Condition> = provider
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let status = if ok {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        };
        if !set_condition(
            &mut conditions,
            NODE_CLASS_KINDS,
            status,
            Some(reason),
            Some(&message),
            provider.metadata.generation,
            now(),
        ) {
            continue;
        }
        let api: Api<Provider> = Api::all(ctx.client.clone());
        let patch = json!({"status": {"conditions": conditions}});
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) if !ok => {
                ctx.events.warning(provider, reason, message).await;
            }
            Ok(_) => {}
            Err(err) => {
                tracing::debug!(provider = %name, error = %err, "cannot write the NodeClassKinds condition");
            }
        }
    }
}

/// Watches the objects of one served kind until aborted.
async fn watch_kind(ctx: Arc<Context>, kind: GroupKind, served: Served) {
    let resource = served::api_resource(&kind, &served);
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
    // `--selector` applies, as to NodeClasses: hosts sharing a cluster keep to their own classes.
    let mut events = watcher(api.clone(), ctx.watcher_config())
        // Up to half a minute apart while the kind's CRD is missing.
        .backoff(crate::state::backoff::watch_backoff_up_to(
            CRD_MISSING_RETRY,
        ))
        .boxed();
    let mut listing: HashSet<String> = HashSet::new();
    let mut written = Written::default();
    let mut reported_error = false;
    while let Some(event) = events.next().await {
        // The watcher announces `Init` before every list attempt, failed ones too: only an
        // object or a finished list shows the watch works again.
        if matches!(&event, Ok(event) if !matches!(event, watcher::Event::Init)) {
            reported_error = false;
        }
        match event {
            Ok(watcher::Event::Init) => listing.clear(),
            Ok(watcher::Event::InitApply(object)) => {
                listing.insert(object.name_any());
                observe(&ctx, &api, (&kind, &served), &mut written, object).await;
            }
            Ok(watcher::Event::InitDone) => {
                ctx.state.served.retain(&kind, &listing);
                written.retain(|name, _| listing.contains(name));
            }
            Ok(watcher::Event::Apply(object)) => {
                observe(&ctx, &api, (&kind, &served), &mut written, object).await
            }
            Ok(watcher::Event::Delete(object)) => {
                written.remove(&object.name_any());
                ctx.state.served.remove(&kind, &object.name_any());
                ctx.state.served.touch();
            }
            Err(err) => {
                // Most often the kind's CRD is not installed (yet).
                if !reported_error {
                    tracing::warn!(%kind, provider = %served.provider, error = %err, "cannot watch a served node class kind (is its CRD installed?)");
                    reported_error = true;
                }
            }
        }
    }
}

/// The `Ready` verdict the host last wrote on one object of a served kind.
#[derive(Debug, Clone, PartialEq)]
struct Verdict {
    uid: Option<String>,
    generation: Option<i64>,
    status: ConditionStatus,
    reason: &'static str,
    message: String,
}

/// The verdicts written so far, by object name.
type Written = HashMap<String, Verdict>;

/// One object of a served kind: stored, validated, its `Ready` condition kept.
///
/// The host writes `Ready` when its verdict differs from the object's condition, except where it
/// already wrote that same verdict on that same generation: a `Ready` another writer set since
/// (an operator holding a class back, Karpenter's suite marking it not ready) then stands until
/// the class changes or the host's verdict does. Controllers that rewrite a condition on every
/// event fight such writers and win the race by timing alone.
async fn observe(
    ctx: &Context,
    api: &Api<DynamicObject>,
    (kind, served): (&GroupKind, &Served),
    written: &mut Written,
    object: DynamicObject,
) {
    let class = served::to_node_class(&object, served);
    ctx.state.served.insert(kind, class.clone());
    ctx.state.served.touch();
    if object.metadata.deletion_timestamp.is_some() || !served.status {
        return;
    }
    let (status, reason, message) = super::nodeclass_status::validate(ctx, &class).await;
    let old = class
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    // Written once per generation at least, as Karpenter's status controllers do (a CRD's
    // default condition carries none).
    let same = find_condition(&old, "Ready").is_some_and(|c| {
        c.status == status
            && c.reason.as_deref() == Some(reason)
            && c.message.as_deref().unwrap_or_default() == message
            && c.observed_generation == object.metadata.generation
    });
    let verdict = Verdict {
        uid: object.metadata.uid.clone(),
        generation: object.metadata.generation,
        status,
        reason,
        message: message.clone(),
    };
    let name = object.name_any();
    if same {
        written.insert(name, verdict);
        return;
    }
    if written.get(&name) == Some(&verdict) {
        return;
    }
    // Conditions of other types on the object are kept (the merge patch replaces the list).
    let mut raw: Vec<serde_json::Value> = object
        .data
        .pointer("/status/conditions")
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default();
    raw.retain(|c| c.get("type").and_then(serde_json::Value::as_str) != Some("Ready"));
    // From the object's own condition, so its transition time moves only with its status.
    let mut ready: Vec<Condition> = old.into_iter().filter(|c| c.type_ == "Ready").collect();
    set_condition(
        &mut ready,
        "Ready",
        status,
        Some(reason),
        Some(&message),
        object.metadata.generation,
        now(),
    );
    raw.extend(ready.iter().filter_map(|c| serde_json::to_value(c).ok()));
    let patch = json!({
        "apiVersion": format!("{}/{}", kind.group, served.version),
        "kind": kind.kind,
        "status": {"conditions": raw},
    });
    match api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            written.insert(name.clone(), verdict);
            if status != ConditionStatus::True {
                let reference = ObjectReference {
                    api_version: Some(format!("{}/{}", kind.group, served.version)),
                    kind: Some(kind.kind.clone()),
                    name: Some(name.clone()),
                    uid: object.metadata.uid.clone(),
                    resource_version: object.metadata.resource_version.clone(),
                    ..ObjectReference::default()
                };
                ctx.events.warning_about(&reference, reason, message).await;
            }
        }
        // A status the cluster refuses to let the host write (Karpenter's suite blocks it to
        // hold a class not ready) stays as it is.
        Err(err) => {
            tracing::debug!(%kind, %name, error = %err, "cannot write the node class status")
        }
    }
}
