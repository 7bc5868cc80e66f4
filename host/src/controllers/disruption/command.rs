//! One disruption, replace-then-delete, with its whole state kept in the objects:
//!
//! | state | in the objects | next |
//! | --- | --- | --- |
//! | decided | claim annotated [`DISRUPTION_ANNOTATION`] `<reason>/<n>`, `DisruptionReason` condition | launch the `n` replacements |
//! | launching | `n` claims annotated [`REPLACES`] the claim, visible in the host's cache | taint the node `karpenter.sh/disrupted:NoSchedule` |
//! | waiting | node tainted | once every replacement is Initialized: delete the claim |
//! | failed | a replacement deleted or failed to launch | untaint, clear the annotation and condition |
//!
//! The replacements are launched before the node is tainted, and the taint waits until the
//! host's cache shows them: the provisioner, which counts the pods of a tainted node as pending,
//! then already sees the replacements as capacity and never launches a second set. A host killed
//! at any point resumes from the table; a decision whose replacements were only partly created
//! is given up (and its replacements left as ordinary capacity).

use std::collections::HashMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Taint as NodeTaint};
use kube::api::PostParams;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::BLOCKED_EVENT_WINDOW;
use super::plan::Plan;
use crate::api::nodeclaim::conditions::{DISRUPTION_REASON, INITIALIZED, LAUNCHED};
use crate::api::shared::find_condition;
use crate::api::{ConditionStatus, NodeClaim};
use crate::controllers::events::Repeat;
use crate::controllers::nodeclaim::{self, persist_status};
use crate::controllers::provisioner::mark_overlays;
use crate::controllers::{Context, ControllerError, merge_patch};
use crate::metrics::labels as metric_labels;
use crate::rules::candidates::{DISRUPTION_ANNOTATION, Joined, Machine, REPLACES};
use crate::rules::claims::{is_true, nodepool};
use crate::rules::new_claim::claim_for;
use crate::rules::nodes::{self, tainted_disrupted};
use crate::scheduling;
use crate::state::View;

/// The consolidation policy of pool `name` as Karpenter's metrics spell it (empty if the pool
/// is gone).
fn consolidation_policy(ctx: &Context, name: &str) -> &'static str {
    ctx.state
        .pools
        .store()
        .get(&ObjectRef::new(name))
        .map_or("", |pool| {
            metric_labels::consolidation_policy(pool.spec.disruption.consolidation_policy)
        })
}

/// How many disruptions' writes go to the API server at once (the client's rate limit still
/// bounds them).
pub const WRITES_AT_ONCE: usize = 16;

/// `<reason>/<replacements>` from the annotation.
fn parse(value: &str) -> Option<(&str, usize)> {
    let (reason, count) = value.split_once('/')?;
    Some((reason, count.parse().ok()?))
}

/// Asks `plan` whether `m` may go for `reason` (the disruptions this pass decided already
/// carried out): the replacements it needs if so; if not, `DisruptionBlocked` Events say why.
pub async fn decide(
    ctx: &Context,
    plan: &mut Plan,
    m: &Machine<'_>,
    reason: &str,
) -> Option<Vec<scheduling::NewClaim>> {
    match plan.leave(m) {
        Ok(replacements) => Some(replacements),
        Err(why) => {
            let why = format!("Cannot disrupt NodeClaim: {why}");
            ctx.metrics.own.disruption_blocked(reason);
            // Once per window whatever the pods named: while many nodes move, the pods a
            // blocked candidate names change from pass to pass.
            ctx.events
                .normal_once_per(
                    BLOCKED_EVENT_WINDOW,
                    Repeat::AnyNote,
                    m.claim,
                    "DisruptionBlocked",
                    why.clone(),
                )
                .await;
            ctx.events
                .normal_once_per(
                    BLOCKED_EVENT_WINDOW,
                    Repeat::AnyNote,
                    m.node,
                    "DisruptionBlocked",
                    why,
                )
                .await;
            None
        }
    }
}

/// Starts the `decided` disruptions for `reason` (each machine with its replacements),
/// [`WRITES_AT_ONCE`] at once. Returns how many started; the first error, if any, after all
/// were tried (a decision that failed is decided again by a later pass, on fresh objects).
pub async fn start_all(
    ctx: &Context,
    decided: &[(&Machine<'_>, Vec<scheduling::NewClaim>)],
    reason: &str,
) -> Result<usize, ControllerError> {
    let outcomes: Vec<Result<(), ControllerError>> = futures::stream::iter(decided)
        .map(|(m, replacements)| async move {
            let note = if replacements.is_empty() {
                "its pods fit on other nodes".to_owned()
            } else {
                format!("launching {} replacement(s)", replacements.len())
            };
            let replacements: Vec<&scheduling::NewClaim> = replacements.iter().collect();
            launch(ctx, &[*m], reason, &replacements, &note)
                .await
                .map(|_| ())
        })
        .buffer_unordered(WRITES_AT_ONCE)
        .collect()
        .await;
    let started = outcomes.iter().filter(|o| o.is_ok()).count();
    let failed = outcomes.len() - started;
    match outcomes.into_iter().find_map(Result::err) {
        Some(err) if started == 0 => Err(err),
        Some(err) => {
            // Not an error of the pass (those that started stand), but an operator wants to see
            // it: a later pass decides the others again.
            tracing::warn!(error = %err, started, failed, reason, "some disruptions did not start");
            Ok(started)
        }
        None => Ok(started),
    }
}

/// Starts one decided disruption of `machines` for `reason`: marks each claim (the "decided"
/// row of the table) and creates the `replacements`, each annotated with every claim it
/// replaces. `note` says why, for the Events. Returns the replacements' names.
pub async fn launch(
    ctx: &Context,
    machines: &[&Machine<'_>],
    reason: &str,
    replacements: &[&scheduling::NewClaim],
    note: &str,
) -> Result<Vec<String>, ControllerError> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let names: Vec<String> = machines.iter().map(|m| m.claim.name_any()).collect();
    // 1. Decided.
    let mut marked = Vec::with_capacity(machines.len());
    for m in machines {
        let patch = json!({"metadata": {
            "annotations": {DISRUPTION_ANNOTATION: format!("{reason}/{}", replacements.len())},
            "resourceVersion": m.claim.resource_version(),
        }});
        let mut claim = merge_patch::<NodeClaim>(&ctx.client, &m.claim.name_any(), &patch).await?;
        nodeclaim::set(
            &mut claim,
            DISRUPTION_REASON,
            ConditionStatus::True,
            reason,
            &format!("replacing with {} NodeClaim(s)", replacements.len()),
        );
        persist_status(ctx, &mut claim).await?;
        marked.push(claim);
    }
    // 2. Launching.
    let pools = ctx.state.view().pools;
    let mut launched = Vec::new();
    for new in replacements {
        let Some(pool) = pools.iter().find(|p| p.name_any() == new.node_pool) else {
            continue;
        };
        let mut replacement = claim_for(new, pool, &ctx.selector.equality_labels());
        mark_overlays(&ctx.instance_types, new, &mut replacement);
        let annotations = replacement
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        annotations.insert(REPLACES.to_owned(), names.join(","));
        let created = api.create(&PostParams::default(), &replacement).await?;
        ctx.metrics.lifecycle.created(reason, &new.node_pool, false);
        launched.push(created.name_any());
        ctx.state.claims.created(created);
    }
    tracing::info!(nodeclaims = ?names, reason, replacements = ?launched, note, "disrupting");
    ctx.metrics.disruption.decision(
        if launched.is_empty() {
            "delete"
        } else {
            "replace"
        },
        reason,
        machines.len(),
    );
    let note = if launched.is_empty() {
        format!("Disrupting NodeClaim ({reason}): {note}")
    } else {
        format!(
            "Disrupting NodeClaim ({reason}): {note}; launching {}",
            launched.join(", ")
        )
    };
    for (claim, m) in marked.iter().zip(machines) {
        ctx.events
            .normal(claim, "DisruptionLaunching", note.clone())
            .await;
        ctx.events
            .normal(m.node, "DisruptionLaunching", note.clone())
            .await;
    }
    Ok(launched)
}

/// Moves every disruption under way one step (see the module's table), and removes disrupted
/// taints no disruption stands behind.
pub async fn progress(
    ctx: &Context,
    view: &View,
    joined: &Joined<'_>,
) -> Result<(), ControllerError> {
    // Claim name → the claims replacing it, read once (not a scan of every claim per claim).
    let mut replacing: HashMap<&str, Vec<&NodeClaim>> = HashMap::new();
    for claim in &view.claims {
        if let Some(names) = claim.annotations().get(REPLACES) {
            for name in names.split(',') {
                replacing.entry(name).or_default().push(claim.as_ref());
            }
        }
    }
    // Each disruption's step is its own few writes; they go at once, so a thousand disruptions
    // under way wait for the API server's answers together, not one after another.
    let outcomes: Vec<Result<(), ControllerError>> = futures::stream::iter(&joined.machines)
        .map(|m| advance(ctx, &replacing, m))
        .buffer_unordered(WRITES_AT_ONCE)
        .collect()
        .await;
    outcomes.into_iter().collect()
}

/// Moves the disruption of `m`, if it is under one, one step.
async fn advance(
    ctx: &Context,
    replacing: &HashMap<&str, Vec<&NodeClaim>>,
    m: &Machine<'_>,
) -> Result<(), ControllerError> {
    if m.claim.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let Some(value) = m.claim.annotations().get(DISRUPTION_ANNOTATION) else {
        if tainted_disrupted(m.node) {
            // A taint without a decision (the host stopped after giving one up).
            untaint(ctx, m.node).await?;
        }
        return Ok(());
    };
    let Some((reason, planned)) = parse(value) else {
        give_up(ctx, m, "unreadable disruption annotation").await?;
        return Ok(());
    };
    let name = m.claim.name_any();
    let replacements = replacing.get(name.as_str()).map_or(&[][..], Vec::as_slice);
    if replacements.len() < planned {
        if tainted_disrupted(m.node) {
            give_up(ctx, m, "a replacement NodeClaim is gone").await?;
        } else if !recently_decided(m.claim) {
            give_up(ctx, m, "its replacements were not all created").await?;
        }
        return Ok(());
    }
    if let Some(failed) = replacements.iter().find(|r| failed(r)) {
        let why = format!("replacement NodeClaim {} failed", failed.name_any());
        give_up(ctx, m, &why).await?;
        return Ok(());
    }
    if !tainted_disrupted(m.node) {
        // Tainted now: with no replacement, or all of them up already, the claim goes in
        // this pass rather than once the cache shows the taint (a pass later).
        taint(ctx, m.node).await?;
    }
    if !replacements.iter().all(|r| is_true(r, INITIALIZED)) {
        if decided_before(m.claim, REPLACEMENT_TIMEOUT_MILLIS) {
            give_up(
                ctx,
                m,
                "its replacements were not initialized within 10 minutes",
            )
            .await?;
        }
        return Ok(());
    }
    let pool = nodepool(m.claim);
    tracing::info!(nodeclaim = %name, reason, "replacements initialized; deleting");
    let note = format!("Disrupting NodeClaim ({reason}): deleting it");
    ctx.events
        .normal(m.claim, "DisruptionTerminating", note.clone())
        .await;
    ctx.events
        .normal(m.node, "DisruptionTerminating", note)
        .await;
    ctx.metrics.lifecycle.disrupted(
        m.claim,
        reason,
        consolidation_policy(ctx, &pool),
        m.pods.len(),
    );
    nodeclaim::delete(ctx, m.claim).await?;
    Ok(())
}

/// A replacement that will not come up: being deleted, or its launch failed for good.
fn failed(claim: &NodeClaim) -> bool {
    claim.metadata.deletion_timestamp.is_some()
        || claim
            .status
            .as_ref()
            .and_then(|s| find_condition(&s.conditions, LAUNCHED))
            .is_some_and(|c| c.status == ConditionStatus::False)
}

/// How long replacements have to become Initialized before the disruption is given up and the
/// node untainted (Karpenter's orchestration queue gives a command 10 minutes); the replacements
/// stay as ordinary capacity.
const REPLACEMENT_TIMEOUT_MILLIS: i64 = 10 * 60 * 1000;

/// Whether the claim's decision is younger than a few passes (its replacements may not be in
/// the cache yet).
fn recently_decided(claim: &NodeClaim) -> bool {
    decision_age_millis(claim).is_some_and(|age| age < 30_000)
}

/// Whether the claim's disruption was decided more than `millis` ago.
fn decided_before(claim: &NodeClaim, millis: i64) -> bool {
    decision_age_millis(claim).is_some_and(|age| age >= millis)
}

/// How long ago the claim's disruption was decided (its `DisruptionReason` condition's age).
fn decision_age_millis(claim: &NodeClaim) -> Option<i64> {
    claim
        .status
        .as_ref()
        .and_then(|s| find_condition(&s.conditions, DISRUPTION_REASON))
        .map(|c| crate::controllers::millis_since(&c.last_transition_time))
}

async fn taint(ctx: &Context, node: &Node) -> Result<(), ControllerError> {
    let taints: Vec<NodeTaint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    patch_taints(ctx, node, nodes::with_disrupted_taint(taints)).await
}

async fn untaint(ctx: &Context, node: &Node) -> Result<(), ControllerError> {
    let taints: Vec<NodeTaint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    patch_taints(ctx, node, nodes::without_disrupted_taint(taints)).await
}

/// Writes the node's taints, guarded by its resourceVersion (a conflict retries next pass).
async fn patch_taints(
    ctx: &Context,
    node: &Node,
    taints: Vec<NodeTaint>,
) -> Result<(), ControllerError> {
    let patch = json!({
        "metadata": {"resourceVersion": node.resource_version()},
        "spec": {"taints": taints},
    });
    merge_patch::<Node>(&ctx.client, &node.name_any(), &patch).await?;
    Ok(())
}

/// Gives a disruption up: the node is untainted and the claim no longer marked; replacements
/// already launched stay as ordinary capacity.
async fn give_up(ctx: &Context, m: &Machine<'_>, why: &str) -> Result<(), ControllerError> {
    let name = m.claim.name_any();
    tracing::warn!(nodeclaim = %name, why, "giving up a disruption");
    if tainted_disrupted(m.node) {
        untaint(ctx, m.node).await?;
    }
    let patch = json!({"metadata": {"annotations": {DISRUPTION_ANNOTATION: null}}});
    let mut claim = merge_patch::<NodeClaim>(&ctx.client, &name, &patch).await?;
    if let Some(status) = claim.status.as_mut() {
        status.conditions.retain(|c| c.type_ != DISRUPTION_REASON);
    }
    persist_status(ctx, &mut claim).await?;
    let reason = m
        .claim
        .annotations()
        .get(DISRUPTION_ANNOTATION)
        .and_then(|v| parse(v))
        .map_or_else(|| "unknown".to_owned(), |(r, _)| r.to_lowercase());
    ctx.metrics.disruption.queue_failure("replace", &reason, 1);
    ctx.events
        .warning(
            &claim,
            "DisruptionBlocked",
            format!("Disruption given up: {why}"),
        )
        .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn annotations_parse() {
        assert_eq!(parse("Drifted/2"), Some(("Drifted", 2)));
        assert_eq!(parse("Drifted/0"), Some(("Drifted", 0)));
        assert_eq!(parse("Drifted"), None);
        assert_eq!(parse("Drifted/x"), None);
    }
}
