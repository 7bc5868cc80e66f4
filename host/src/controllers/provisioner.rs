//! The provisioner: turns pods kube-scheduler could not place into NodeClaims.
//!
//! A watch on Pods triggers a batch whenever a provisionable pod (see [`is_provisionable`](crate::rules::pods::is_provisionable))
//! appears or changes; the [`batcher`] gathers triggers until the cluster is quiet for the idle
//! window or the max window passes. Each batch takes a [`snapshot::Snapshot`], fetches instance
//! types per NodePool and NodeClass through the provider ([`instance_types`], cached), runs the
//! pure [`crate::scheduling::solve`] (offerings in the unavailable-offerings cache simulated as
//! unavailable) and creates one NodeClaim per new claim it decides. Claims
//! still launching are passed to the solver as in-flight capacity, which it fills first, so a
//! second batch never opens a duplicate claim for pods already nominated. Every pod gets an
//! Event: `Nominated` with where it should go, or `FailedScheduling` with why nothing fits.
//!
//! The chosen offering's price is kept on each NodeClaim in the [`PRICE_ANNOTATION`].

pub mod batcher;
pub mod instance_types;
pub mod nominations;
pub mod snapshot;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use tokio::sync::mpsc;

use crate::api::{NodeClaim, NodePool};
use crate::controllers::events::Repeat;
use crate::controllers::{Context, capacity_buffers};
use crate::metrics::cloudprovider::controller::PROVISIONER;
use crate::scheduling::{self, NewClaim, Target, buffer};

use self::nominations::{Nominations, Verdict};
use crate::catalog::InstanceTypeCache;
use crate::rules::limits::{self, LimitEvents};
use crate::rules::new_claim::claim_for;
use crate::rules::pods::is_provisionable;
pub use crate::rules::snapshot::ProvisionError;

/// How often pending pods are looked at again even without a change (a claim that failed to
/// launch leaves its pods pending with no pod event).
const RESYNC: Duration = Duration::from_secs(30);
/// A pod's `Nominated` Event is published once in this window (Karpenter's dedupe timeout).
const NOMINATED_EVENT_WINDOW: Duration = Duration::from_secs(120);
/// NodeClaims a pass creates at once.
const CREATES_AT_ONCE: usize = 16;

/// Runs the provisioner until the pod watch ends.
pub async fn run(ctx: Arc<Context>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<()>();
    let watch_tx = tx.clone();
    let selector = ctx.selector.clone();
    // A batch at once for what is pending already, then one per change of a pod to provision for.
    let _ = tx.send(());
    let watch_ctx = Arc::clone(&ctx);
    let pods = ctx.state.pods.subscribe().for_each(move |pod| {
        // While CapacityBuffers hold room, any pod may take it (kube-scheduler binds real pods
        // to the room the buffer pods kept), so every pod change is a reason to look again.
        if (is_provisionable(&pod) || watch_ctx.buffers.active()) && selector.matches(pod.labels())
        {
            let _ = watch_tx.send(());
        }
        futures::future::ready(())
    });
    let watch = tokio::spawn(pods);
    let buffers_tx = tx.clone();
    let buffers_ctx = Arc::clone(&ctx);
    let buffers = tokio::spawn(async move {
        loop {
            buffers_ctx.buffers.changed().await;
            if buffers_tx.send(()).is_err() {
                break;
            }
        }
    });
    // A claim going before it launched (out of capacity, a failing provider, the launch timeout)
    // leaves its pods to be provisioned again, elsewhere: look again at once.
    let claims_tx = tx.clone();
    let gone = ctx.state.claims.subscribe().for_each(move |claim| {
        if claim.metadata.deletion_timestamp.is_some()
            && !crate::rules::claims::is_true(&claim, crate::api::nodeclaim::conditions::LAUNCHED)
        {
            let _ = claims_tx.send(());
        }
        futures::future::ready(())
    });
    let gone = tokio::spawn(gone);
    // Catalogs are kept fresh while nothing is pending (see `instance_types::raw_catalogs`).
    let refresh_ctx = Arc::clone(&ctx);
    let refresh = tokio::spawn(async move {
        let mut tick = tokio::time::interval(crate::catalog::DEFAULT_TTL / 2);
        loop {
            tick.tick().await;
            for (pool, types) in instance_types::raw_catalogs(&refresh_ctx).await {
                if let Err(err) = types {
                    tracing::debug!(nodepool = %pool.name_any(), error = %err, "catalog not refreshed");
                }
            }
        }
    });
    // A catalog a pass did not wait for has come: look again.
    let answered_tx = tx.clone();
    let answered = ctx.instance_types.answered();
    let catalogs = tokio::spawn(async move {
        loop {
            answered.notified().await;
            if answered_tx.send(()).is_err() {
                break;
            }
        }
    });
    let resync = tokio::spawn(async move {
        let mut tick = tokio::time::interval(RESYNC);
        tick.tick().await;
        loop {
            tick.tick().await;
            if tx.send(()).is_err() {
                break;
            }
        }
    });
    let cache = &ctx.instance_types;
    let mut nominations = Nominations::default();
    let mut limit_events = LimitEvents::default();
    let windows = ctx.settings.batch;
    tracing::info!(idle = ?windows.idle, max = ?windows.max, "provisioner starting");
    while let Some(triggers) = batcher::next_batch(&mut rx, windows).await {
        let started = Instant::now();
        match provision(&ctx, cache, &mut nominations, &mut limit_events).await {
            Ok(outcome) if outcome.pods > 0 => tracing::info!(
                triggers,
                pods = outcome.pods,
                new_claims = outcome.created,
                unschedulable = outcome.unschedulable,
                held = outcome.held,
                elapsed = ?started.elapsed(),
                "provisioning batch"
            ),
            Ok(_) => tracing::debug!(triggers, "provisioning batch: nothing pending"),
            Err(err) => tracing::warn!(error = %err, "provisioning batch failed"),
        }
    }
    watch.abort();
    resync.abort();
    buffers.abort();
    catalogs.abort();
    gone.abort();
    refresh.abort();
}

/// A fresh id for one scheduling simulation (`karpenter_scheduler_queue_depth`'s
/// `scheduling_id`).
fn next_scheduling_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        .to_string()
}

/// What one run did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Pods considered.
    pub pods: usize,
    /// NodeClaims created.
    pub created: usize,
    /// Pods that fit nowhere.
    pub unschedulable: usize,
    /// New claims the simulation wanted for pods already nominated to claims still coming up,
    /// not created (see [`nominations`]).
    pub held: usize,
}

/// One provisioning run over a fresh snapshot. A pool whose limits leave pods without a node
/// gets a `LimitReached` Event, as often as `limit_events` allows.
pub async fn provision(
    ctx: &Context,
    cache: &InstanceTypeCache,
    nominations: &mut Nominations,
    limit_events: &mut LimitEvents,
) -> Result<Outcome, ProvisionError> {
    let mut snapshot = crate::controllers::provisioner::snapshot::take(ctx);
    // CapacityBuffers' virtual pods: pending pods that must fit, never bound, after every real
    // pod in the solver's order (see [`crate::scheduling::buffer`]).
    snapshot.pending.extend(
        ctx.buffers
            .pods()
            .into_iter()
            .filter(|p| ctx.selector.matches(p.labels()))
            .map(Arc::new),
    );
    let pending_uids: std::collections::HashSet<&str> = snapshot
        .pending
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    nominations.expire(&snapshot.claims, &pending_uids);
    if snapshot.pending.is_empty() {
        if ctx.settings.capacity_buffer {
            capacity_buffers::record_pass(ctx, BTreeMap::new(), Default::default()).await;
        }
        return Ok(Outcome::default());
    }
    let built = snapshot::input(&snapshot, ctx, cache).await;
    let scheduling_id = next_scheduling_id();
    let solving = Instant::now();
    ctx.metrics
        .scheduler
        .solving(PROVISIONER, &scheduling_id, snapshot.pending.len());
    let result = scheduling::solve(&built.input);
    ctx.metrics.scheduler.solved(
        PROVISIONER,
        &scheduling_id,
        solving.elapsed(),
        built.rejected.len() + result.unschedulable.len(),
    );
    // The guard (see [`nominations`]), judged on the nominations of earlier batches: if every
    // pending pod already waits for a claim that is still coming up, no new claim is created,
    // whatever the simulation says.
    let held = if result.new_claims.is_empty() {
        Verdict::Create
    } else {
        nominations.guard(
            built
                .pod_index
                .iter()
                .filter_map(|i| snapshot.pending[*i].metadata.uid.as_deref()),
        )
    };
    let mut outcome = Outcome {
        pods: snapshot.pending.len(),
        ..Outcome::default()
    };
    let pod_of = |i: usize| snapshot.pending[built.pod_index[i]].as_ref();
    let real = |i: usize| !buffer::is_virtual(pod_of(i));
    let mut buffers = BufferPass::default();
    let uid_of = |i: &usize| pod_of(*i).metadata.uid.as_deref().unwrap_or_default();
    let claim_of_node: BTreeMap<&str, String> = snapshot
        .claims
        .iter()
        .filter_map(|c| Some((c.status.as_ref()?.node_name.as_deref()?, c.name_any())))
        .collect();
    for (i, why) in &built.rejected {
        outcome.unschedulable += 1;
        let pod = snapshot.pending[*i].as_ref();
        if buffers.failed(pod) {
            continue;
        }
        ctx.events
            .warning(pod, "FailedScheduling", why.clone())
            .await;
    }
    for (i, target) in &result.existing_placements {
        let (note, claim) = match target {
            Target::Node(node) => (
                format!("Pod should schedule on: node/{node}"),
                claim_of_node.get(node.as_str()).cloned(),
            ),
            Target::Claim(claim) => (
                format!("Pod should schedule on: nodeclaim/{claim}"),
                Some(claim.clone()),
            ),
        };
        if let Some(claim) = claim {
            nominations.nominate([uid_of(i)], &claim);
        }
        if buffers.existing(pod_of(*i), target) {
            continue;
        }
        nominated(ctx, pod_of(*i), note).await;
    }
    let pools: BTreeMap<String, &NodePool> =
        snapshot.pools.iter().map(|p| (p.name_any(), p)).collect();
    let now = Instant::now();
    limit_events.expire(now);
    for reached in &result.limits_reached {
        let Some(pool) = pools.get(&reached.node_pool) else {
            continue;
        };
        let note = limits::limit_note(reached);
        tracing::info!(nodepool = %reached.node_pool, resource = %reached.resource, pods = reached.pods.len(), "{note}");
        if limit_events.due(&reached.node_pool, &reached.resource, now) {
            ctx.events.warning(*pool, "LimitReached", note).await;
        }
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let mut to_create = Vec::new();
    for new in &result.new_claims {
        let Some(pool) = pools.get(&new.node_pool) else {
            continue;
        };
        for i in &new.pods {
            buffers.new_claim(pod_of(*i));
        }
        if let Verdict::Waiting(claims) = &held {
            outcome.held += 1;
            tracing::warn!(
                nodepool = %new.node_pool,
                pods = new.pods.len(),
                waiting_for = ?claims,
                "not creating a nodeclaim: every pending pod is nominated to a claim still coming up"
            );
            continue;
        }
        let mut claim = claim_for(new, pool, &ctx.selector.equality_labels());
        mark_overlays(cache, new, &mut claim);
        to_create.push((new, claim));
    }
    // Created [`CREATES_AT_ONCE`] at a time (in order), as Karpenter creates a pass's claims in
    // parallel: one at a time, a 2,000-node scale-up waits on 2,000 round trips in turn.
    let mut created = futures::stream::iter(to_create)
        .map(|(new, claim)| {
            let api = api.clone();
            async move { (new, api.create(&PostParams::default(), &claim).await) }
        })
        .buffered(CREATES_AT_ONCE);
    while let Some((new, answer)) = created.next().await {
        match answer {
            Ok(created) => {
                outcome.created += 1;
                buffers.created |= new.pods.iter().any(|i| !real(*i));
                ctx.metrics
                    .lifecycle
                    .created("provisioned", &new.node_pool, false);
                let name = created.name_any();
                ctx.state.claims.created(created.clone());
                nominations.nominate(new.pods.iter().map(uid_of), &name);
                tracing::info!(
                    nodeclaim = %name,
                    nodepool = %new.node_pool,
                    pods = new.pods.len(),
                    requests = %new.requests,
                    cheapest = %new.cheapest_offering.instance_type,
                    price = new.cheapest_price,
                    "created nodeclaim"
                );
                ctx.events
                    .normal(
                        &created,
                        "Provisioned",
                        format!(
                            "for {} pod(s), {} instance type option(s), cheapest {} at {}/h",
                            new.pods.len(),
                            new.instance_type_options.len(),
                            new.cheapest_offering.instance_type,
                            new.cheapest_price
                        ),
                    )
                    .await;
                for i in new.pods.iter().filter(|i| real(**i)) {
                    let note = format!("Pod should schedule on: nodeclaim/{name}");
                    nominated(ctx, pod_of(*i), note).await;
                }
            }
            Err(err) => {
                tracing::warn!(nodepool = %new.node_pool, error = %err, "cannot create nodeclaim");
                for i in new.pods.iter().filter(|i| real(**i)) {
                    ctx.events
                        .warning(
                            pod_of(*i),
                            "FailedScheduling",
                            format!("cannot create a NodeClaim: {err}"),
                        )
                        .await;
                }
            }
        }
    }
    for (i, why) in &result.unschedulable {
        outcome.unschedulable += 1;
        if buffers.failed(pod_of(*i)) {
            continue;
        }
        let mut note = why.clone();
        if !built.skipped_pools.is_empty() {
            let skipped: Vec<String> = built
                .skipped_pools
                .iter()
                .map(|(pool, err)| format!("{pool}: {err}"))
                .collect();
            note.push_str(&format!("; nodepools left out: {}", skipped.join("; ")));
        }
        ctx.events
            .warning(pod_of(*i), "FailedScheduling", note)
            .await;
    }
    if ctx.settings.capacity_buffer {
        if buffers.created {
            ctx.buffers.again();
        }
        capacity_buffers::record_pass(ctx, buffers.placed, buffers.room).await;
    }
    Ok(outcome)
}

/// Where one pass put the CapacityBuffers' virtual pods: per buffer, and per node.
#[derive(Debug, Default)]
struct BufferPass {
    placed: BTreeMap<buffer::BufferKey, buffer::Placed>,
    room: capacity_buffers::Room,
    /// Whether a NodeClaim was created for buffer pods.
    created: bool,
}

impl BufferPass {
    /// Counts `pod` as placed on existing capacity if virtual; whether it is.
    fn existing(&mut self, pod: &Pod, target: &Target) -> bool {
        let Some(key) = buffer::buffer_of(pod) else {
            return false;
        };
        self.placed.entry(key).or_default().existing += 1;
        let on = match target {
            Target::Node(node) => self.room.nodes.entry(node.clone()),
            Target::Claim(claim) => self.room.claims.entry(claim.clone()),
        };
        on.or_default().push(pod.clone());
        true
    }

    /// Counts `pod` as needing a new NodeClaim if virtual.
    fn new_claim(&mut self, pod: &Pod) {
        if let Some(key) = buffer::buffer_of(pod) {
            self.placed.entry(key).or_default().new += 1;
        }
    }

    /// Counts `pod` as placed nowhere if virtual; whether it is.
    fn failed(&mut self, pod: &Pod) -> bool {
        let Some(key) = buffer::buffer_of(pod) else {
            return false;
        };
        self.placed.entry(key).or_default().failed += 1;
        true
    }
}

/// A pod's `Nominated` Event: once per pod in [`NOMINATED_EVENT_WINDOW`] whatever the target, as
/// Karpenter's recorder keys it (every pass nominates a pod still waiting for its claim again,
/// not always to the same one).
async fn nominated(ctx: &Context, pod: &Pod, note: String) {
    ctx.events
        .normal_once_per(
            NOMINATED_EVENT_WINDOW,
            Repeat::AnyNote,
            pod,
            "Nominated",
            note,
        )
        .await;
}

/// Marks `claim` (made for `new`) with Karpenter's `price-overlay-applied` and
/// `capacity-overlay-applied` annotations when NodeOverlays changed one of its instance types.
pub fn mark_overlays(cache: &InstanceTypeCache, new: &NewClaim, claim: &mut NodeClaim) {
    use crate::api::labels::{CAPACITY_OVERLAY_APPLIED, PRICE_OVERLAY_APPLIED};
    let (priced, extended) = cache.overlaid(&new.node_pool, &new.instance_type_options);
    let annotations = claim
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    for (applied, key) in [
        (priced, PRICE_OVERLAY_APPLIED),
        (extended, CAPACITY_OVERLAY_APPLIED),
    ] {
        if applied {
            annotations.insert(key.to_owned(), "true".to_owned());
        }
    }
}

#[cfg(test)]
mod spread_tests;
#[cfg(test)]
mod tests;
