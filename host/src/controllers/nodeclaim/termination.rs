//! Termination, behind the `karpenter.sh/termination` finalizer, in Karpenter's steps:
//!
//! 1. the deadline: a claim with a `terminationGracePeriod` gets the annotation
//!    `karpenter.sh/nodeclaim-termination-timestamp` (deletion time + grace, RFC 3339), its Node
//!    too;
//! 2. taint each Node `karpenter.sh/disrupted:NoSchedule` (and label it out of external load
//!    balancers);
//! 3. drain it ([`drain`] decides, pure): evict its pods group by group through the Eviction API
//!    (which honours PodDisruptionBudgets; refusals are retried), delete those the deadline
//!    leaves no time for; condition `Drained`, at least [`MIN_DRAIN_TIME`] after the drain began;
//! 4. wait for its VolumeAttachments to go ([`volumes`]), at most until the deadline; condition
//!    `VolumesDetached`;
//! 5. delete the Node, then call the provider's `delete` until it answers `not-found`.
//!
//! Only then is the finalizer removed (by the caller).

mod dedupe;
pub mod drain;
pub mod volumes;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures::future::join_all;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{
    DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::json;

pub use self::dedupe::Dedupe;
use self::drain::{Decision, Plan};
use super::{Step, nodes_of, persist_status, set};
use crate::api::duration;
use crate::api::labels::{NODECLAIM_TERMINATION_TIMESTAMP, TERMINATION_FINALIZER};
use crate::api::nodeclaim::conditions::{DRAINED, INSTANCE_TERMINATING, VOLUMES_DETACHED};
use crate::api::shared::find_condition;
use crate::api::{ConditionStatus, NodeClaim};
use crate::controllers::resolve;
use crate::controllers::{Context, ControllerError, millis_since};
use crate::metrics::cloudprovider::controller;
use crate::metrics::lifecycle::{nodepool_of, seconds_since};
use crate::provider::convert;
use crate::rules::claims::{is_true, provider_id};
use crate::rules::nodes;
use crate::runtime::types::ProviderError;

/// How often termination looks again while pods drain, volumes detach or the instance goes.
const POLL: Duration = Duration::from_secs(1);

/// The least time between the start of a drain and `Drained`, so that pods bound by a scheduler
/// that had not seen the taint yet are drained too (Karpenter's `MinDrainTime`).
pub const MIN_DRAIN_TIME: Duration = Duration::from_secs(5);

/// How many evictions or deletions of one drain pass are in flight at once.
const CONCURRENCY: usize = 16;

/// How many pods or volumes a condition message names.
const SHOWN: usize = 5;

/// The label that takes a draining node out of external load balancers.
const EXCLUDE_FROM_BALANCERS: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// One step of terminating the claim; `Continue` when the finalizer may go.
pub async fn finalize(claim: &NodeClaim, ctx: &Context) -> Result<Step, ControllerError> {
    let mut claim = claim.clone();
    let deadline = ensure_deadline(ctx, &mut claim).await?;
    let node_api: Api<Node> = Api::all(ctx.client.clone());
    for node in nodes_of(ctx, &claim) {
        let name = node.name_any();
        if prepare_node(&node_api, &name, deadline).await? {
            ctx.events
                .normal(&claim, "Terminating", format!("draining Node {name}"))
                .await;
        }
        let Some(pods) = drain(ctx, &mut claim, &name, deadline).await? else {
            return Ok(Step::Stop(Action::requeue(POLL)));
        };
        if !volumes_detached(ctx, &mut claim, &node, &pods, deadline).await? {
            return Ok(Step::Stop(Action::requeue(POLL)));
        }
        if node.metadata.deletion_timestamp.is_none() {
            match node_api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(err) => return Err(err.into()),
            }
        }
        if let Some(node) = remove_node_finalizer(&node_api, &name).await? {
            ctx.metrics.lifecycle.node_terminated(&node);
        }
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
    ctx.observe_call(
        controller::NODECLAIM_LIFECYCLE,
        &provider_name,
        "delete",
        nodepool_of(&claim),
        &result,
        started,
    );
    match result {
        Err(err) if matches!(err.provider_error(), Some(ProviderError::NotFound(_))) => {
            let terminating = claim
                .status
                .as_ref()
                .and_then(|s| find_condition(&s.conditions, INSTANCE_TERMINATING))
                .filter(|c| c.is_true());
            if let Some(since) = terminating {
                ctx.metrics.lifecycle.instance_terminated(
                    nodepool_of(&claim),
                    seconds_since(&since.last_transition_time),
                );
            }
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

/// The claim's termination deadline from its spec: deletion time + `terminationGracePeriod`.
pub fn deadline_of(claim: &NodeClaim) -> Option<Timestamp> {
    let deleted = claim.metadata.deletion_timestamp.as_ref()?.0;
    let grace = duration::parse(claim.spec.termination_grace_period.as_deref()?).ok()?;
    deleted
        .checked_add(SignedDuration::try_from(grace).ok()?)
        .ok()
}

/// A deadline as Karpenter writes it (Go's RFC 3339: whole seconds, UTC).
pub fn format_deadline(deadline: Timestamp) -> String {
    deadline.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The claim's deadline: its annotation, else (annotated now) from its spec; none without a
/// `terminationGracePeriod`.
async fn ensure_deadline(
    ctx: &Context,
    claim: &mut NodeClaim,
) -> Result<Option<Timestamp>, ControllerError> {
    if let Some(text) = claim.annotations().get(NODECLAIM_TERMINATION_TIMESTAMP) {
        match text.parse::<Timestamp>() {
            Ok(deadline) => return Ok(Some(deadline)),
            Err(err) => tracing::warn!(
                nodeclaim = %claim.name_any(), annotation = NODECLAIM_TERMINATION_TIMESTAMP,
                value = %text, error = %err, "ignoring an unparsable termination timestamp"
            ),
        }
    }
    let Some(deadline) = deadline_of(claim) else {
        return Ok(None);
    };
    let text = format_deadline(deadline);
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let patch = json!({"metadata": {"annotations": {NODECLAIM_TERMINATION_TIMESTAMP: &text}}});
    *claim = api
        .patch(
            &claim.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    ctx.events
        .warning(
            claim,
            "TerminationGracePeriodExpiring",
            format!("All pods will be deleted by {text}"),
        )
        .await;
    Ok(Some(deadline))
}

/// Taints the Node `karpenter.sh/disrupted:NoSchedule`, labels it out of external load balancers
/// and annotates it with the deadline; returns whether the taint was added now.
async fn prepare_node(
    api: &Api<Node>,
    name: &str,
    deadline: Option<Timestamp>,
) -> Result<bool, ControllerError> {
    for attempt in 1.. {
        let Some(mut node) = api.get_opt(name).await? else {
            return Ok(false);
        };
        let before = node.clone();
        let taints = node
            .spec
            .get_or_insert_with(Default::default)
            .taints
            .get_or_insert_with(Vec::new);
        let tainted = !taints.iter().any(nodes::is_disrupted_taint);
        *taints = nodes::with_disrupted_taint(std::mem::take(taints));
        node.labels_mut()
            .insert(EXCLUDE_FROM_BALANCERS.to_owned(), "karpenter".to_owned());
        if let Some(deadline) = deadline {
            node.annotations_mut().insert(
                NODECLAIM_TERMINATION_TIMESTAMP.to_owned(),
                format_deadline(deadline),
            );
        }
        if node == before {
            return Ok(false);
        }
        match api.replace(name, &PostParams::default(), &node).await {
            Ok(_) => return Ok(tainted),
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < 5 => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(false)
}

async fn remove_node_finalizer(
    api: &Api<Node>,
    name: &str,
) -> Result<Option<Node>, ControllerError> {
    let node = match api.get_opt(name).await? {
        Some(node) => node,
        None => return Ok(None),
    };
    if !node.finalizers().iter().any(|f| f == TERMINATION_FINALIZER) {
        return Ok(None);
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
        Ok(_) => Ok(Some(node)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// One pass of the drain of `node`: acts on [`drain::plan`] and records `Drained`. Returns the
/// node's pods once it is drained.
async fn drain(
    ctx: &Context,
    claim: &mut NodeClaim,
    node: &str,
    deadline: Option<Timestamp>,
) -> Result<Option<Vec<Pod>>, ControllerError> {
    let list = pods_on(ctx, node).await?;
    let plan = drain::plan(&list, deadline, Timestamp::now());
    if plan.drained() {
        let drained_since = claim
            .status
            .as_ref()
            .and_then(|s| find_condition(&s.conditions, DRAINED))
            .map(|c| (c.status, millis_since(&c.last_transition_time)));
        let min = i64::try_from(MIN_DRAIN_TIME.as_millis()).unwrap_or(i64::MAX);
        match drained_since {
            Some((ConditionStatus::True, _)) => {}
            Some((ConditionStatus::Unknown, since)) if since < min => {
                mark_draining(ctx, claim, "Draining").await?;
                return Ok(None);
            }
            None => {
                // The drain begins with nothing to drain: still wait for pods the scheduler
                // may bind before it sees the taint.
                mark_draining(ctx, claim, "Draining").await?;
                return Ok(None);
            }
            Some(_) => {
                set(claim, DRAINED, ConditionStatus::True, "Drained", "");
                persist_status(ctx, claim).await?;
                ctx.metrics.lifecycle.node_drained(nodepool_of(claim));
            }
        }
        return Ok(Some(list));
    }
    let (blocked, failure) = act_on(ctx, &plan, node, deadline).await;
    mark_draining(ctx, claim, &message(&plan, &blocked)).await?;
    match failure {
        Some(err) => Err(err),
        None => Ok(None),
    }
}

/// The pods bound to `node`.
async fn pods_on(ctx: &Context, node: &str) -> Result<Vec<Pod>, ControllerError> {
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let list = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await?;
    Ok(list.items)
}

/// Evicts and deletes as `plan` decided, [`CONCURRENCY`] at a time: the pods whose eviction a
/// PodDisruptionBudget refused (sorted), and the last failure.
async fn act_on(
    ctx: &Context,
    plan: &Plan<'_>,
    node: &str,
    deadline: Option<Timestamp>,
) -> (Vec<String>, Option<ControllerError>) {
    let actions: Vec<(&Pod, Decision)> = plan
        .pods
        .iter()
        .filter(|(_, d)| !matches!(d, Decision::Wait(_)))
        .copied()
        .collect();
    let mut outcomes = Vec::with_capacity(actions.len());
    for batch in actions.chunks(CONCURRENCY) {
        let calls = batch
            .iter()
            .map(|&(pod, decision)| act(ctx, pod, decision, node, deadline));
        outcomes.extend(join_all(calls).await);
    }
    let mut blocked = Vec::new();
    let mut failure = None;
    for outcome in outcomes {
        match outcome {
            Ok((_, Eviction::Done)) => {}
            Ok((pod, Eviction::Blocked)) => blocked.push(drain::key(pod)),
            Err(err) => failure = Some(err),
        }
    }
    blocked.sort();
    (blocked, failure)
}

/// One pass of a drain that never deletes a pod (a reboot's: what cannot be evicted rides the
/// reboot): evicts what [`drain::plan`] lets go now. `Ok(None)` once nothing holds `node` up,
/// else what is left, as the `Drained` condition would say it.
pub async fn evict_only(ctx: &Context, node: &str) -> Result<Option<String>, ControllerError> {
    let list = pods_on(ctx, node).await?;
    let plan = drain::plan(&list, None, Timestamp::now());
    if plan.drained() {
        return Ok(None);
    }
    let (blocked, failure) = act_on(ctx, &plan, node, None).await;
    match failure {
        Some(err) => Err(err),
        None => Ok(Some(message(&plan, &blocked))),
    }
}

/// `Drained` Unknown with `message`, written if it changed.
async fn mark_draining(
    ctx: &Context,
    claim: &mut NodeClaim,
    message: &str,
) -> Result<(), ControllerError> {
    if set(
        claim,
        DRAINED,
        ConditionStatus::Unknown,
        "Draining",
        message,
    ) {
        persist_status(ctx, claim).await?;
    }
    Ok(())
}

/// The `Drained` message while pods are left.
fn message(plan: &Plan<'_>, blocked: &[String]) -> String {
    let mut message = plan.summary(SHOWN);
    if !blocked.is_empty() {
        message.push_str("; eviction refused (PodDisruptionBudget): ");
        message.push_str(&first_few(blocked.iter().cloned(), SHOWN));
    }
    message
}

/// `a, b, c and 2 more`: the first `shown` items, then how many are left out.
fn first_few(items: impl ExactSizeIterator<Item = String>, shown: usize) -> String {
    let total = items.len();
    let names: Vec<String> = items.take(shown).collect();
    let mut text = names.join(", ");
    if total > shown {
        text.push_str(&format!(" and {} more", total - shown));
    }
    text
}

/// Evicts or deletes a pod as decided.
async fn act<'p>(
    ctx: &Context,
    pod: &'p Pod,
    decision: Decision,
    node: &str,
    deadline: Option<Timestamp>,
) -> Result<(&'p Pod, Eviction), ControllerError> {
    let outcome = match decision {
        Decision::Evict => evict(ctx, pod, node).await?,
        Decision::Delete { grace_seconds } => {
            delete_pod(ctx, pod, grace_seconds, deadline).await?;
            Eviction::Done
        }
        Decision::Wait(_) => Eviction::Done,
    };
    Ok((pod, outcome))
}

/// What an eviction came to.
enum Eviction {
    /// Evicted, gone already, or going with its namespace.
    Done,
    /// Refused by a PodDisruptionBudget: retried on the next pass.
    Blocked,
}

async fn evict(ctx: &Context, pod: &Pod, node: &str) -> Result<Eviction, ControllerError> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    let params = EvictParams {
        delete_options: Some(this_pod(pod, None)),
        post_options: PostParams::default(),
    };
    match api.evict(&pod.name_any(), &params).await {
        Ok(_) => {
            ctx.events
                .normal(pod, "Evicted", format!("Evicted pod: draining Node {node}"))
                .await;
            Ok(Eviction::Done)
        }
        // Gone, or replaced by another pod of the same name.
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
            Ok(Eviction::Done)
        }
        // The namespace is being deleted: its controller removes the pod.
        Err(kube::Error::Api(status))
            if status.code == 403
                && status.details.as_ref().is_some_and(|d| {
                    d.causes.iter().any(|c| c.reason == "NamespaceTerminating")
                }) =>
        {
            Ok(Eviction::Done)
        }
        // A budget allows no disruption now (429), or the pod has several budgets, which the
        // Eviction API refuses (500).
        Err(kube::Error::Api(status))
            if status.code == 429
                || (status.code == 500 && status.message.contains("PodDisruptionBudget")) =>
        {
            let note = format!("eviction blocked: {}", status.message);
            if ctx.drain_events.first(&format!(
                "FailedDraining/{}/{note}",
                pod.uid().unwrap_or_default()
            )) {
                ctx.events.warning(pod, "FailedDraining", note).await;
            }
            Ok(Eviction::Blocked)
        }
        Err(err) => Err(err.into()),
    }
}

/// Deletes a pod the deadline leaves no time to evict, with the grace period left.
async fn delete_pod(
    ctx: &Context,
    pod: &Pod,
    grace_seconds: i64,
    deadline: Option<Timestamp>,
) -> Result<(), ControllerError> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    match api
        .delete(&pod.name_any(), &this_pod(pod, Some(grace_seconds)))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => return Ok(()),
        Err(err) => return Err(err.into()),
    }
    let key = format!("Disrupted/{}", pod.uid().unwrap_or_default());
    if ctx.drain_events.first(&key) {
        let own = pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(drain::DEFAULT_POD_GRACE_SECONDS);
        let deadline = deadline.map(format_deadline).unwrap_or_default();
        ctx.events
            .normal(
                pod,
                "Disrupted",
                format!(
                    "Deleting the pod to accommodate the terminationTime {deadline} of the node. \
                     The pod was granted {grace_seconds} seconds of grace-period of its {own} \
                     terminationGracePeriodSeconds. This bypasses the PDB of the pod and the \
                     do-not-disrupt annotation."
                ),
            )
            .await;
    }
    Ok(())
}

/// Delete options that touch only this very pod (not a successor of the same name).
fn this_pod(pod: &Pod, grace_seconds: Option<i64>) -> DeleteParams {
    DeleteParams {
        grace_period_seconds: grace_seconds.and_then(|g| u32::try_from(g).ok()),
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

/// Whether the drained node's VolumeAttachments are gone (or the deadline passed); records
/// `VolumesDetached`.
async fn volumes_detached(
    ctx: &Context,
    claim: &mut NodeClaim,
    node: &Node,
    pods: &[Pod],
    deadline: Option<Timestamp>,
) -> Result<bool, ControllerError> {
    let name = node.name_any();
    let api: Api<VolumeAttachment> = Api::all(ctx.client.clone());
    let on_node: Vec<VolumeAttachment> = api
        .list(&ListParams::default().match_any())
        .await?
        .items
        .into_iter()
        .filter(|a| a.spec.node_name == name)
        .collect();
    let now = Timestamp::now();
    let mut ignored = BTreeSet::new();
    if !on_node.is_empty() {
        for pod in pods.iter().filter(|p| !drain::drainable(p, now)) {
            let claims: Api<PersistentVolumeClaim> =
                Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
            for pvc in volumes::claim_names(pod) {
                if let Some(volume) = claims
                    .get_opt(&pvc)
                    .await?
                    .and_then(|c| c.spec)
                    .and_then(|s| s.volume_name)
                {
                    ignored.insert(volume);
                }
            }
        }
    }
    let pending = volumes::pending(&on_node, &name, &ignored);
    let (status, reason, message, done) = if pending.is_empty() {
        (
            ConditionStatus::True,
            "VolumesDetached",
            String::new(),
            true,
        )
    } else if deadline.is_some_and(|d| now > d) {
        let reason = "TerminationGracePeriodElapsed";
        (ConditionStatus::False, reason, reason.to_owned(), true)
    } else {
        let message = volumes::summary(&pending, SHOWN);
        if ctx
            .drain_events
            .first(&format!("AwaitingVolumeDetachment/{name}/{message}"))
        {
            ctx.events
                .normal(node, "AwaitingVolumeDetachment", message.clone())
                .await;
        }
        let reason = "AwaitingVolumeDetachment";
        (ConditionStatus::Unknown, reason, message, false)
    };
    if set(claim, VOLUMES_DETACHED, status, reason, &message) {
        persist_status(ctx, claim).await?;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(deleted: Option<&str>, grace: Option<&str>) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "deletionTimestamp": deleted},
            "spec": {
                "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "nc"},
                "requirements": [],
                "terminationGracePeriod": grace,
            },
        }))
        .unwrap()
    }

    #[test]
    fn deadline_is_deletion_plus_grace_in_karpenters_format() {
        let cases = [
            (
                Some("2026-11-26T10:00:00Z"),
                Some("20s"),
                Some("2026-11-26T10:00:20Z"),
            ),
            (
                Some("2026-11-26T10:00:00Z"),
                Some("1h30m"),
                Some("2026-11-26T11:30:00Z"),
            ),
            (
                Some("2026-11-26T23:59:50Z"),
                Some("15s"),
                Some("2026-11-27T00:00:05Z"),
            ),
            (None, Some("20s"), None),
            (Some("2026-11-26T10:00:00Z"), None, None),
        ];
        for (deleted, grace, want) in cases {
            let got = deadline_of(&claim(deleted, grace)).map(format_deadline);
            assert_eq!(got.as_deref(), want, "{deleted:?} + {grace:?}");
        }
        let parsed: Timestamp = "2026-11-26T10:00:20Z".parse().unwrap_or(Timestamp::MIN);
        assert_eq!(format_deadline(parsed), "2026-11-26T10:00:20Z");
    }

    #[test]
    fn first_few_counts_the_rest() {
        let items = |n: usize| {
            (0..n)
                .map(|i| format!("p{i}"))
                .collect::<Vec<_>>()
                .into_iter()
        };
        assert_eq!(first_few(items(0), 2), "");
        assert_eq!(first_few(items(2), 2), "p0, p1");
        assert_eq!(first_few(items(4), 2), "p0, p1 and 2 more");
    }
}
