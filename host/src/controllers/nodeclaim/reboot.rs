//! The reboot stage: a claim with a reboot under way (`Rebooting=True`, committed by node repair)
//! is carried through [`crate::rules::reboot`]'s steps — taint and drain the Node, record its boot
//! ID, call the provider's `reboot` with the episode's operation ID, watch for the new boot — to
//! `RebootSucceeded` (initialization then runs again) or `RebootFailed` (the claim is deleted and
//! replaced, its drain bounded by the reboot's). Initialization does not run while it is under way.
//!
//! Each step is written before the next is taken, so a restarted host (or another replica) goes
//! on where this one stopped: the boot ID is recorded before the provider is called, and the
//! operation ID is the same on every call of one reboot, so the provider reboots once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Taint as NodeTaint};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::{Step, nodes_of, persist_status, set, termination};
use crate::api::labels::{
    INITIALIZED as INITIALIZED_LABEL, NODECLAIM_TERMINATION_TIMESTAMP, REBOOT_PRE_BOOT_ID,
    REBOOTING_TAINT_KEY,
};
use crate::api::nodeclaim::conditions::{
    DISRUPTION_REASON, INITIALIZED, REBOOT_FAILED, REBOOT_ISSUED, REBOOT_SUCCEEDED, REBOOTING,
    REBOOTING_REASON,
};
use crate::api::{ConditionStatus, NodeClaim};
use crate::controllers::{Context, ControllerError, merge_patch, resolve};
use crate::metrics::cloudprovider::controller;
use crate::metrics::lifecycle::nodepool_of;
use crate::provider::convert;
use crate::rules::reboot::{self as rules, Episode, Outcome};
use crate::runtime::lifecycle::RebootError;

/// How often a reboot under way is looked at (the Node's changes trigger a look too).
const POLL: Duration = Duration::from_secs(2);
/// Attempts at a Node taint write that keeps conflicting with other writers.
const TAINT_ATTEMPTS: usize = 5;
/// How soon a provider's `retryable` answer is retried.
const RETRY: Duration = Duration::from_secs(5);

/// When this process began issuing each reboot under way, by claim UID (as Karpenter, the
/// issuance timeout is process-local: a restart gives the provider another five minutes).
#[derive(Debug, Default)]
pub struct Issuing(Mutex<HashMap<String, Timestamp>>);

impl Issuing {
    fn since(&self, uid: &str) -> Option<Timestamp> {
        self.0.lock().ok()?.get(uid).copied()
    }

    fn start(&self, uid: &str, now: Timestamp) {
        if let Ok(mut map) = self.0.lock() {
            map.entry(uid.to_owned()).or_insert(now);
        }
    }

    fn clear(&self, uid: &str) {
        if let Ok(mut map) = self.0.lock() {
            map.remove(uid);
        }
    }
}

/// Carries the claim's reboot one step on; `Continue` when none is under way.
pub async fn reconcile(claim: &mut NodeClaim, ctx: &Context) -> Result<Step, ControllerError> {
    let Some(episode) = Episode::of(claim) else {
        return Ok(Step::Continue);
    };
    let uid = claim.uid().unwrap_or_default();
    let node = nodes_of(ctx, claim).into_iter().next();
    let now = Timestamp::now();
    let step = rules::next(
        &episode,
        node.as_deref(),
        ctx.reboots_issuing.since(&uid),
        now,
    );
    tracing::debug!(nodeclaim = %claim.name_any(), ?step, "reboot");
    let action = match step {
        rules::Step::AwaitNode(after) => Action::requeue(after),
        rules::Step::Fail { outcome, message } => {
            fail(ctx, claim, node.as_deref(), &episode, outcome, &message).await?;
            Action::await_change()
        }
        rules::Step::Drain { until, floor } => {
            let Some(node) = node else {
                return Ok(Step::Stop(Action::requeue(POLL)));
            };
            taint(ctx, &node).await?;
            let left = termination::evict_only(ctx, &node.name_any()).await?;
            if !rules::drain_over(left.is_none(), until, floor, now) {
                return Ok(Step::Stop(Action::requeue(POLL)));
            }
            if let Some(left) = left {
                ctx.events
                    .normal(
                        claim as &NodeClaim,
                        "RebootDrainBounded",
                        format!("the drain's bound has passed: {left} ride the reboot"),
                    )
                    .await;
            }
            issue(ctx, claim, &node, episode, &uid, now).await?
        }
        rules::Step::Issue => {
            let Some(node) = node else {
                return Ok(Step::Stop(Action::requeue(POLL)));
            };
            taint(ctx, &node).await?;
            issue(ctx, claim, &node, episode, &uid, now).await?
        }
        rules::Step::Issued => {
            issued(ctx, claim, node.as_deref()).await?;
            Action::requeue(POLL)
        }
        rules::Step::Watch { booted } => {
            if let Some(node) = node.as_deref() {
                drop_initialized_label(ctx, node).await?;
                if booted {
                    untaint(ctx, node).await?;
                }
            }
            Action::requeue(POLL)
        }
        rules::Step::Succeed => {
            if let Some(node) = node.as_deref() {
                untaint(ctx, node).await?;
            }
            succeed(ctx, claim, &episode, now).await?;
            return Ok(Step::Continue);
        }
    };
    Ok(Step::Stop(action))
}

/// Records the boot ID (if not yet), starts the issuance window and calls the provider.
async fn issue(
    ctx: &Context,
    claim: &mut NodeClaim,
    node: &Node,
    mut episode: Episode,
    uid: &str,
    now: Timestamp,
) -> Result<Action, ControllerError> {
    if episode.pre_boot_id.is_none() {
        let boot = rules::boot_id(node).to_owned();
        let patch = json!({"metadata": {
            "annotations": {REBOOT_PRE_BOOT_ID: &boot},
            "resourceVersion": claim.resource_version(),
        }});
        *claim = merge_patch::<NodeClaim>(&ctx.client, &claim.name_any(), &patch).await?;
        episode.pre_boot_id = Some(boot);
    }
    ctx.reboots_issuing.start(uid, now);
    let (provider_name, provider) = match resolve::launching_provider(ctx, claim).await? {
        Ok(found) => found,
        Err(unresolved) => {
            let message = format!("cannot reboot: {unresolved}");
            ctx.events
                .warning(claim as &NodeClaim, unresolved.reason(), message)
                .await;
            return Ok(Action::requeue(Duration::from_secs(30)));
        }
    };
    let operation = rules::operation_id(uid, &episode);
    let request = convert::node_claim_to_wit(claim)?;
    let started = Instant::now();
    let result = provider.reboot(&request, &operation).await;
    ctx.observe_call(
        controller::NODECLAIM_REBOOT,
        &provider_name,
        "reboot",
        nodepool_of(claim),
        &result,
        started,
    );
    let refused = match result {
        Ok(Ok(())) => {
            tracing::info!(nodeclaim = %claim.name_any(), %operation, "reboot issued");
            issued(ctx, claim, Some(node)).await?;
            return Ok(Action::requeue(POLL));
        }
        Ok(Err(RebootError::Retryable(message))) => {
            ctx.events
                .warning(
                    claim as &NodeClaim,
                    "RebootRetrying",
                    format!("the provider could not reboot the node yet: {message}"),
                )
                .await;
            return Ok(Action::requeue(RETRY));
        }
        Ok(Err(RebootError::NotImplemented)) => {
            "reboot not implemented by the cloud provider".to_owned()
        }
        Ok(Err(RebootError::Failed(message) | RebootError::NotFound(message))) => {
            format!("reboot rejected by the cloud provider: {message}")
        }
        Err(err) => return Err(err.into()),
    };
    fail(
        ctx,
        claim,
        Some(node),
        &episode,
        Outcome::ProviderError,
        &refused,
    )
    .await?;
    Ok(Action::await_change())
}

/// `Rebooting` moves to `RebootIssued` (its message kept), `Initialized` to `Unknown`
/// (`Rebooting`), and the Node loses `karpenter.sh/initialized`.
async fn issued(
    ctx: &Context,
    claim: &mut NodeClaim,
    node: Option<&Node>,
) -> Result<(), ControllerError> {
    let message = condition_message(claim);
    let mut changed = set(
        claim,
        REBOOTING,
        ConditionStatus::True,
        REBOOT_ISSUED,
        &message,
    );
    changed |= set(
        claim,
        INITIALIZED,
        ConditionStatus::Unknown,
        REBOOTING_REASON,
        "node is rebooting",
    );
    if changed {
        persist_status(ctx, claim).await?;
    }
    if let Some(node) = node {
        drop_initialized_label(ctx, node).await?;
    }
    Ok(())
}

/// The reboot succeeded: the boot ID annotation goes, `Rebooting=False` (`RebootSucceeded`).
async fn succeed(
    ctx: &Context,
    claim: &mut NodeClaim,
    episode: &Episode,
    now: Timestamp,
) -> Result<(), ControllerError> {
    end(
        ctx,
        claim,
        REBOOT_SUCCEEDED,
        "node rebooted and rejoined the cluster",
    )
    .await?;
    let recovery = episode.issued_at.map(|at| seconds(at, now));
    ctx.metrics.lifecycle.rebooted(
        Outcome::Succeeded.label(),
        seconds(episode.requested_at, now),
        recovery,
    );
    ctx.events
        .normal(
            claim as &NodeClaim,
            "RebootSucceeded",
            format!("node rebooted ({})", episode.message),
        )
        .await;
    tracing::info!(nodeclaim = %claim.name_any(), "reboot succeeded");
    Ok(())
}

/// The reboot failed: the taint goes; the claim is deleted (its drain bounded by the reboot's,
/// if it had one) unless the request itself was unreadable, when it only ends `RebootFailed`.
async fn fail(
    ctx: &Context,
    claim: &mut NodeClaim,
    node: Option<&Node>,
    episode: &Episode,
    outcome: Outcome,
    message: &str,
) -> Result<(), ControllerError> {
    if let Some(node) = node {
        untaint(ctx, node).await?;
    }
    let name = claim.name_any();
    if outcome.replaces() {
        if let Ok(Some(grace)) = episode.grace
            && let Ok(grace) = SignedDuration::try_from(grace)
            && let Ok(deadline) = Timestamp::now().checked_add(grace)
        {
            tighten_deadline(ctx, claim, deadline).await?;
        }
        super::delete(ctx, claim).await?;
        let pods = super::reschedulable_pods(ctx, claim);
        ctx.metrics
            .lifecycle
            .disrupted(claim, "unhealthy", "", pods);
    } else {
        end(ctx, claim, REBOOT_FAILED, message).await?;
    }
    ctx.reboots_issuing.clear(&claim.uid().unwrap_or_default());
    ctx.metrics.lifecycle.rebooted(
        outcome.label(),
        seconds(episode.requested_at, Timestamp::now()),
        None,
    );
    let note = if outcome.replaces() {
        format!("{message}: replacing the node")
    } else {
        message.to_owned()
    };
    tracing::warn!(nodeclaim = %name, result = outcome.label(), %note, "reboot failed");
    ctx.events
        .warning(claim as &NodeClaim, "RebootFailed", note)
        .await;
    Ok(())
}

/// Ends the episode with `reason`: the boot ID annotation goes, `Rebooting=False`.
async fn end(
    ctx: &Context,
    claim: &mut NodeClaim,
    reason: &str,
    message: &str,
) -> Result<(), ControllerError> {
    ctx.reboots_issuing.clear(&claim.uid().unwrap_or_default());
    if claim.annotations().contains_key(REBOOT_PRE_BOOT_ID) {
        let patch = json!({"metadata": {
            "annotations": {REBOOT_PRE_BOOT_ID: null},
            "resourceVersion": claim.resource_version(),
        }});
        *claim = merge_patch::<NodeClaim>(&ctx.client, &claim.name_any(), &patch).await?;
    }
    let mut changed = set(claim, REBOOTING, ConditionStatus::False, reason, message);
    // The repair that asked for the reboot is over.
    if let Some(status) = claim.status.as_mut() {
        let before = status.conditions.len();
        status.conditions.retain(|c| c.type_ != DISRUPTION_REASON);
        changed |= status.conditions.len() != before;
    }
    if changed {
        persist_status(ctx, claim).await?;
    }
    Ok(())
}

/// Sets the claim's termination deadline to `deadline` unless it has an earlier one.
async fn tighten_deadline(
    ctx: &Context,
    claim: &mut NodeClaim,
    deadline: Timestamp,
) -> Result<(), ControllerError> {
    let current = claim
        .annotations()
        .get(NODECLAIM_TERMINATION_TIMESTAMP)
        .and_then(|t| t.parse::<Timestamp>().ok());
    if current.is_some_and(|c| c <= deadline) {
        return Ok(());
    }
    let text = termination::format_deadline(deadline);
    let patch = json!({"metadata": {"annotations": {NODECLAIM_TERMINATION_TIMESTAMP: text}}});
    *claim = merge_patch::<NodeClaim>(&ctx.client, &claim.name_any(), &patch).await?;
    Ok(())
}

fn condition_message(claim: &NodeClaim) -> String {
    claim
        .status
        .as_ref()
        .and_then(|s| crate::api::shared::find_condition(&s.conditions, REBOOTING))
        .and_then(|c| c.message.clone())
        .unwrap_or_default()
}

fn seconds(from: Timestamp, to: Timestamp) -> f64 {
    from.duration_until(to).as_secs_f64().max(0.0)
}

fn rebooting_taint() -> NodeTaint {
    NodeTaint {
        key: REBOOTING_TAINT_KEY.to_owned(),
        value: None,
        effect: "NoSchedule".to_owned(),
        time_added: None,
    }
}

fn is_rebooting_taint(taint: &NodeTaint) -> bool {
    taint.key == REBOOTING_TAINT_KEY && taint.effect == "NoSchedule"
}

/// Taints the Node `karpenter.sh/rebooting:NoSchedule` (if it is not yet).
async fn taint(ctx: &Context, node: &Node) -> Result<(), ControllerError> {
    set_taint(ctx, node, true).await
}

/// Removes `karpenter.sh/rebooting` from the Node (if it has it).
async fn untaint(ctx: &Context, node: &Node) -> Result<(), ControllerError> {
    set_taint(ctx, node, false).await
}

/// Adds (`on`) or removes the rebooting taint, guarded by the Node's resourceVersion (a merge
/// patch replaces the whole list: a taint another writer added meanwhile must not be lost). On a
/// conflict the Node is read again and the write made again; an error once that keeps failing.
async fn set_taint(ctx: &Context, cached: &Node, on: bool) -> Result<(), ControllerError> {
    let api: Api<Node> = Api::all(ctx.client.clone());
    let name = cached.name_any();
    let mut node = cached.clone();
    for attempt in 1..=TAINT_ATTEMPTS {
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        if taints.iter().any(is_rebooting_taint) == on {
            return Ok(());
        }
        let mut taints: Vec<NodeTaint> = taints
            .into_iter()
            .filter(|t| !is_rebooting_taint(t))
            .collect();
        if on {
            taints.push(rebooting_taint());
        }
        let patch = json!({
            "metadata": {"resourceVersion": node.resource_version()},
            "spec": {"taints": taints},
        });
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < TAINT_ATTEMPTS => {
                match api.get_opt(&name).await? {
                    Some(fresh) => node = fresh,
                    None => return Ok(()),
                }
            }
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
}

/// Removes `karpenter.sh/initialized` from the Node: initialization is per boot.
async fn drop_initialized_label(ctx: &Context, node: &Node) -> Result<(), ControllerError> {
    if !node.labels().contains_key(INITIALIZED_LABEL) {
        return Ok(());
    }
    let patch = json!({"metadata": {"labels": {INITIALIZED_LABEL: null}}});
    merge_patch::<Node>(&ctx.client, &node.name_any(), &patch).await?;
    Ok(())
}
