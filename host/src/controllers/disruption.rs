//! Disruption: the half of Karpenter that removes nodes — drift, expiration and consolidation —
//! as a loop and its writes; the decisions are [`crate::rules`]' (candidates, budgets, verdicts,
//! drift, the consolidation search).
//!
//! One loop ([`run`]) makes a pass every [`PASS_INTERVAL`], and at once when a NodePool changes,
//! over the host's caches
//! ([`crate::state::ClusterState`]):
//!
//! 1. **Stamps**: every NodePool carries its template hash (`karpenter.sh/nodepool-hash` and
//!    `-version`); claims stamped with another hash version are re-stamped ([`crate::rules::drift::stamp`]).
//! 2. **Drift**: each launched claim's `Drifted` condition follows [`crate::rules::drift`]'s reasons; the
//!    provider's `is-drifted` is asked at most once per [`PROVIDER_DRIFT_INTERVAL`] per claim
//!    (and again at once when its NodeClass changes), at most [`PROVIDER_CALLS_PER_PASS`] calls a
//!    pass.
//! 3. **Expiration**: a claim older than its `expireAfter` is deleted — forcefully, as in
//!    Karpenter v1: budgets do not hold it. Its pods count as pending for the provisioner at once
//!    (see [`crate::controllers::provisioner::snapshot`]), so their new nodes launch while it
//!    drains.
//! 4. **Disruptions under way** move on ([`command`]): the state of each is in the objects (an
//!    annotation on the claim, its replacements' annotations, the node's `karpenter.sh/disrupted`
//!    taint), so a restarted host resumes them.
//! 5. **New disruptions**: per pool, within its budgets for the reason ([`crate::rules::budgets`]), the drifted
//!    claims that nothing holds ([`crate::rules::candidates`]) are simulated with the provisioner's solver;
//!    if their pods fit on the other nodes plus new claims, those claims are launched, and once
//!    they are initialized the drifted claim is deleted. One new disruption per pool per pass.

pub mod command;
pub mod consolidation;
pub mod plan;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde_json::json;

use crate::api::labels::{NODEPOOL, NODEPOOL_HASH, NODEPOOL_HASH_VERSION};
use crate::api::nodeclaim::conditions::{DRIFTED, INITIALIZED, LAUNCHED};
use crate::api::nodepool::DisruptionReason;
use crate::api::shared::find_condition;
use crate::api::template_hash::{HASH_VERSION, template_hash};
use crate::api::{ConditionStatus, NodeClaim, NodePool, duration};
use crate::controllers::events::Repeat;
use crate::controllers::nodeclaim::{self, persist_status};
use crate::controllers::{Context, ControllerError, merge_patch, provisioner, static_pools};
use crate::metrics::cloudprovider::controller;
use crate::provider::convert as provider_convert;
use crate::runtime::types as wit;
use crate::state::View;
use crate::state::served::class_key;

use self::plan::Plan;
use crate::rules::candidates::{Joined, Machine, eligible, held};
use crate::rules::claims::{is_true, nodepool};
use crate::rules::drift::{INSTANCE_TYPE_NOT_FOUND, Stamp};

/// How often a pass runs.
pub const PASS_INTERVAL: Duration = Duration::from_secs(3);
/// How often the provider is asked whether one claim drifted.
pub const PROVIDER_DRIFT_INTERVAL: Duration = Duration::from_secs(60);
/// At most this many `is-drifted` calls a pass (each instantiates the provider and hands it the
/// NodeClass; at 500 idle nodes, 20 a pass were most of the host's CPU). Above 200 claims it
/// stretches [`PROVIDER_DRIFT_INTERVAL`] to `claims × PASS_INTERVAL / this`.
pub const PROVIDER_CALLS_PER_PASS: usize = 10;
/// Claims younger than this are not checked for `InstanceTypeNotFound` (a catalog that blinks
/// should not replace new nodes; Karpenter waits an hour).
pub const INSTANCE_TYPE_CHECK_AGE: Duration = Duration::from_secs(10 * 60);

/// What the loop remembers between passes (only rate limits: every decision is in the objects).
#[derive(Debug, Default)]
struct Memory {
    /// Claim UID → (when `is-drifted` was asked, NodeClass generation then).
    asked: HashMap<String, (Instant, Option<i64>)>,
    /// When the `is-drifted` calls of the last [`PASS_INTERVAL`] were made, oldest first (at most
    /// [`PROVIDER_CALLS_PER_PASS`]).
    recent_asks: VecDeque<Instant>,
    /// NodeClass UID → (its resourceVersion, itself as providers receive it): converted once per
    /// version, not once per `is-drifted` call (the parameters of a class can be a whole catalog).
    classes: HashMap<String, (Option<String>, wit::NodeClass)>,
    consolidation: consolidation::Memory,
}

/// How often the loop looks whether a NodePool changed (a changed pool starts a pass at once, so
/// its claims show `Drifted` within a second of the edit, as Karpenter's pool watch does).
pub const POOL_CHECK_INTERVAL: Duration = Duration::from_millis(500);
/// How long a pass may spend deciding drift disruptions (a simulation each); the next pass goes
/// on where it stopped. The decided ones then start together ([`command::start_all`]).
pub const DRIFT_STARTS_TIME: Duration = Duration::from_secs(5);
/// A claim's or node's `DisruptionBlocked` Event with the same note is published once per this
/// window (Karpenter's default dedupe), not once per pass.
pub const BLOCKED_EVENT_WINDOW: Duration = Duration::from_secs(120);
/// A NodePool's budget-blocked Event, once per this window (Karpenter's: budgets change by the
/// minute).
pub const POOL_BLOCKED_EVENT_WINDOW: Duration = Duration::from_secs(60);

/// Runs passes until the host stops: every [`PASS_INTERVAL`], and at once when a NodePool's
/// spec changes.
pub async fn run(ctx: Arc<Context>) {
    let mut memory = Memory::default();
    let mut tick = tokio::time::interval(POOL_CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_pass: Option<Instant> = None;
    let mut pools_seen = BTreeMap::new();
    loop {
        tick.tick().await;
        let pools_now = pool_generations(&ctx);
        let due = last_pass.is_none_or(|at| at.elapsed() >= PASS_INTERVAL);
        if !due && pools_now == pools_seen {
            continue;
        }
        pools_seen = pools_now;
        last_pass = Some(Instant::now());
        match pass(&ctx, &mut memory).await {
            Ok(()) => {}
            // The next pass (in PASS_INTERVAL) works on the fresh objects.
            Err(err) if err.is_conflict() => {
                tracing::debug!(error = %err, "disruption pass: write conflict");
            }
            Err(err) => tracing::warn!(error = %err, "disruption pass failed"),
        }
    }
}

/// Each managed NodePool's generation, by name.
fn pool_generations(ctx: &Context) -> BTreeMap<String, Option<i64>> {
    ctx.state
        .pools
        .store()
        .state()
        .iter()
        .map(|p| (p.name_any(), p.metadata.generation))
        .collect()
}

async fn pass(ctx: &Context, memory: &mut Memory) -> Result<(), ControllerError> {
    // Before the view: a later read that finds it unchanged knows the view is current.
    let generation = ctx.state.generation();
    let view = ctx.state.view();
    let now = Timestamp::now();
    let pools: BTreeMap<String, &NodePool> = view
        .pools
        .iter()
        .map(|p| (p.name_any(), p.as_ref()))
        .collect();
    stamp_pools(ctx, &view).await;
    // Decided one claim after another (the provider is asked at a bounded rate), written side by
    // side: a template change drifts every claim of the pool at once, 2,000 of them at 2,000 nodes.
    let mut writes = Vec::new();
    for claim in &view.claims {
        if claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(pool) = claim.labels().get(NODEPOOL).and_then(|p| pools.get(p)) else {
            continue;
        };
        if let Some(write) = drift_claim(ctx, memory, pool, claim, &view).await {
            writes.push((claim, write));
        }
    }
    futures::stream::iter(writes)
        .for_each_concurrent(command::WRITES_AT_ONCE, |(claim, write)| async move {
            if let Err(err) = write_drift(ctx, claim, write).await {
                tracing::debug!(nodeclaim = %claim.name_any(), error = %err, "drift check failed");
            }
        })
        .await;
    for claim in &view.claims {
        if claim.metadata.deletion_timestamp.is_none() && expired(claim, now) {
            expire(ctx, claim).await?;
        }
    }
    let uids: HashSet<&str> = view
        .claims
        .iter()
        .filter_map(|c| c.metadata.uid.as_deref())
        .collect();
    memory.asked.retain(|uid, _| uids.contains(uid.as_str()));
    let classes: HashSet<&str> = view
        .classes
        .values()
        .filter_map(|c| c.metadata.uid.as_deref())
        .collect();
    memory
        .classes
        .retain(|uid, _| classes.contains(uid.as_str()));
    // The claims, Nodes and pods joined once for the whole pass.
    let joined = Joined::of(&view);
    command::progress(ctx, &view, &joined).await?;
    if start_disruptions(ctx, &view, &joined, &pools, now).await? {
        // The budgets just changed under this view; consolidation waits a pass.
        return Ok(());
    }
    consolidation::pass(
        ctx,
        &mut memory.consolidation,
        (&view, &joined, generation),
        &pools,
        now,
    )
    .await
}

/// The merge patch that stamps a template hash (of this version) on a pool or a claim.
fn hash_stamp(hash: String) -> serde_json::Value {
    json!({"metadata": {"annotations": {
        NODEPOOL_HASH: hash, NODEPOOL_HASH_VERSION: HASH_VERSION,
    }}})
}

/// Writes each pool's template hash onto it when it is not there yet.
async fn stamp_pools(ctx: &Context, view: &View) {
    for pool in &view.pools {
        let hash = template_hash(pool);
        let annotations = pool.annotations();
        if annotations.get(NODEPOOL_HASH) == Some(&hash)
            && annotations.get(NODEPOOL_HASH_VERSION).map(String::as_str) == Some(HASH_VERSION)
        {
            continue;
        }
        if let Err(err) =
            merge_patch::<NodePool>(&ctx.client, &pool.name_any(), &hash_stamp(hash)).await
        {
            tracing::debug!(nodepool = %pool.name_any(), error = %err, "cannot stamp the template hash");
        }
    }
}

/// What keeping a claim's drift state true takes.
#[derive(Debug, PartialEq)]
enum DriftWrite {
    /// Stamp the pool's template hash (of this version) on the claim.
    Restamp(String),
    /// Set `Drifted` with this reason, or take it away.
    Drifted(Option<String>),
}

/// What the claim's `Drifted` condition needs to stay true to what [`drift`] and the provider
/// say, if anything.
async fn drift_claim(
    ctx: &Context,
    memory: &mut Memory,
    pool: &NodePool,
    claim: &NodeClaim,
    view: &View,
) -> Option<DriftWrite> {
    if !is_true(claim, LAUNCHED) {
        return None;
    }
    if let Stamp::Restamp(hash) = crate::rules::drift::stamp(pool, claim) {
        return Some(DriftWrite::Restamp(hash));
    }
    let mut reason = crate::rules::drift::static_reason(pool, claim).map(str::to_owned);
    if reason.is_none() && old_enough(claim, INSTANCE_TYPE_CHECK_AGE) {
        reason = instance_type_gone(ctx, pool, claim, view).await;
    }
    if reason.is_none() {
        match provider_reason(ctx, memory, claim, view).await {
            Ok(asked) => reason = asked,
            Err(err) => {
                tracing::debug!(nodeclaim = %claim.name_any(), error = %err, "drift check failed");
                return None;
            }
        }
    }
    (drift_reason(claim) != reason).then_some(DriftWrite::Drifted(reason))
}

/// Writes what [`drift_claim`] decided.
async fn write_drift(
    ctx: &Context,
    claim: &NodeClaim,
    write: DriftWrite,
) -> Result<(), ControllerError> {
    let reason = match write {
        DriftWrite::Restamp(hash) => {
            merge_patch::<NodeClaim>(&ctx.client, &claim.name_any(), &hash_stamp(hash)).await?;
            return Ok(());
        }
        DriftWrite::Drifted(reason) => reason,
    };
    let mut claim = claim.clone();
    match &reason {
        Some(reason) => {
            nodeclaim::set(&mut claim, DRIFTED, ConditionStatus::True, reason, reason);
        }
        None => {
            if let Some(status) = claim.status.as_mut() {
                status.conditions.retain(|c| c.type_ != DRIFTED);
            }
        }
    }
    persist_status(ctx, &mut claim).await?;
    if let Some(reason) = reason {
        tracing::info!(nodeclaim = %claim.name_any(), reason, "drifted");
        ctx.metrics.lifecycle.drifted(&reason, &nodepool(&claim));
        ctx.events
            .normal(&claim, "Drifted", format!("NodeClaim drifted: {reason}"))
            .await;
    }
    Ok(())
}

/// The reason of the claim's `Drifted` condition, when it is true.
fn drift_reason(claim: &NodeClaim) -> Option<String> {
    claim
        .status
        .as_ref()
        .and_then(|s| find_condition(&s.conditions, DRIFTED))
        .filter(|c| c.is_true())
        .and_then(|c| c.reason.clone())
}

fn old_enough(claim: &NodeClaim, age: Duration) -> bool {
    claim.metadata.creation_timestamp.as_ref().is_some_and(|t| {
        crate::controllers::millis_since(t) >= i64::try_from(age.as_millis()).unwrap_or(i64::MAX)
    })
}

async fn instance_type_gone(
    ctx: &Context,
    pool: &NodePool,
    claim: &NodeClaim,
    view: &View,
) -> Option<String> {
    let class = view
        .classes
        .get(&class_key(&pool.spec.template.spec.node_class_ref))?;
    let provider = ctx.registry.get(&class.spec.provider)?;
    let types = ctx
        .instance_types
        .get(controller::DISRUPTION, &provider, pool, class)
        .await
        .ok()?;
    crate::rules::drift::instance_type_not_found(&types, claim)
        .then(|| INSTANCE_TYPE_NOT_FOUND.to_owned())
}

/// The provider's drift reason, asked at a bounded rate; `None` when not asked this pass (the
/// condition then keeps what it says).
async fn provider_reason(
    ctx: &Context,
    memory: &mut Memory,
    claim: &NodeClaim,
    view: &View,
) -> Result<Option<String>, ControllerError> {
    let current = drift_reason(claim);
    let Some(class) = view.classes.get(&class_key(&claim.spec.node_class_ref)) else {
        return Ok(current);
    };
    let uid = claim.uid().unwrap_or_default();
    let generation = class.metadata.generation;
    if let Some((at, seen)) = memory.asked.get(&uid)
        && *seen == generation
        && at.elapsed() < PROVIDER_DRIFT_INTERVAL
    {
        return Ok(current);
    }
    while memory
        .recent_asks
        .front()
        .is_some_and(|at| at.elapsed() >= PASS_INTERVAL)
    {
        memory.recent_asks.pop_front();
    }
    if memory.recent_asks.len() >= PROVIDER_CALLS_PER_PASS {
        return Ok(current);
    }
    let Some(provider) = ctx.registry.get(&class.spec.provider) else {
        return Ok(current);
    };
    let asked_at = Instant::now();
    memory.recent_asks.push_back(asked_at);
    memory.asked.insert(uid, (asked_at, generation));
    let request = provider_convert::node_claim_to_wit(claim)?;
    let version = class.resource_version();
    let memo = memory
        .classes
        .entry(class.uid().unwrap_or_default())
        .or_insert_with(|| (version.clone(), provider_convert::node_class_to_wit(class)));
    if memo.0 != version {
        *memo = (version, provider_convert::node_class_to_wit(class));
    }
    let wit_class = &memo.1;
    let started = Instant::now();
    let result = provider.is_drifted(&request, wit_class).await;
    ctx.observe_call(
        controller::DISRUPTION,
        &class.spec.provider,
        "is-drifted",
        &nodepool(claim),
        &result,
        started,
    );
    match result {
        Ok(reason) => {
            Ok(reason.map(|r| crate::controllers::nodeclaim::launch::condition_reason(&r)))
        }
        Err(err) => {
            ctx.events
                .warning(claim, "DriftCheckFailed", format!("is-drifted: {err}"))
                .await;
            Ok(current)
        }
    }
}

/// Whether `claim` has lived longer than its `expireAfter`.
pub fn expired(claim: &NodeClaim, now: Timestamp) -> bool {
    let Ok(Some(ttl)) = duration::parse_nillable(&claim.spec.expire_after) else {
        return false;
    };
    let Some(created) = claim.metadata.creation_timestamp.as_ref() else {
        return false;
    };
    let age = now.as_millisecond() - created.0.as_millisecond();
    u128::try_from(age).is_ok_and(|age| age >= ttl.as_millis())
}

async fn expire(ctx: &Context, claim: &NodeClaim) -> Result<(), ControllerError> {
    let pool = nodepool(claim);
    tracing::info!(nodeclaim = %claim.name_any(), expire_after = %claim.spec.expire_after, "expired");
    ctx.events
        .normal(
            claim,
            "Expired",
            format!("NodeClaim expired after {}", claim.spec.expire_after),
        )
        .await;
    let pods = nodeclaim::reschedulable_pods(ctx, claim);
    ctx.metrics.lifecycle.disrupted(claim, "expired", "", pods);
    tracing::debug!(nodepool = %pool, "expiring");
    nodeclaim::delete(ctx, claim).await
}

/// Starts drift disruptions, as many per pool as its Drifted budget allows (each simulated with
/// the ones decided before it carried out: [`Plan`]), deciding for at most [`DRIFT_STARTS_TIME`]
/// a pass, then starting them together; Karpenter starts
/// one command per loop, which bounds a large drift by the host (kubernetes-sigs/karpenter#3197).
/// Returns whether it started any.
async fn start_disruptions(
    ctx: &Context,
    view: &View,
    joined: &Joined<'_>,
    pools: &BTreeMap<String, &NodePool>,
    now: Timestamp,
) -> Result<bool, ControllerError> {
    let mut started = false;
    let (all, counts) = (&joined.machines, &joined.counts);
    let mut drifted: BTreeMap<&str, Vec<&Machine<'_>>> = BTreeMap::new();
    for m in all {
        let Some(pool_name) = m.claim.labels().get(NODEPOOL) else {
            continue;
        };
        let Some(pool) = pools.get(pool_name) else {
            continue;
        };
        if eligible(m, pool) && is_true(m.claim, DRIFTED) && is_true(m.claim, INITIALIZED) {
            drifted.entry(pool_name.as_str()).or_default().push(m);
        }
    }
    if start_static_drift(ctx, view, pools, all, counts, now).await? {
        started = true;
    }
    ctx.metrics
        .disruption
        .eligible("Drifted", drifted.values().map(Vec::len).sum());
    // Taken once a pass, when a candidate is to be simulated; shared by the pools (a
    // disruption in one leaves less room for the pods of another).
    let mut plan: Option<Plan> = None;
    for (pool_name, mut machines) in drifted {
        let Some(pool) = pools.get(pool_name) else {
            continue;
        };
        let (total, disrupting) = counts.get(pool_name).copied().unwrap_or_default();
        let allowed = match crate::rules::budgets::allowed(
            &pool.spec.disruption.budgets,
            DisruptionReason::Drifted,
            total,
            disrupting,
            now,
        ) {
            Ok(allowed) => allowed,
            Err(err) => {
                ctx.events
                    .warning(*pool, "DisruptionBlocked", format!("invalid budget: {err}"))
                    .await;
                continue;
            }
        };
        if allowed == 0 {
            ctx.metrics.own.disruption_blocked("drifted");
            ctx.events
                .normal_once_per(
                    POOL_BLOCKED_EVENT_WINDOW,
                    Repeat::SameNote,
                    *pool,
                    "DisruptionBlocked",
                    format!(
                        "No allowed disruptions for disruption reason Drifted due to blocking budget ({disrupting} of {total} nodes disrupting)"
                    ),
                )
                .await;
            continue;
        }
        // Oldest drift first, empty nodes before others (Karpenter's order).
        machines.sort_by_key(|m| {
            let since = m
                .claim
                .status
                .as_ref()
                .and_then(|s| find_condition(&s.conditions, DRIFTED))
                .map(|c| c.last_transition_time.0.as_millisecond())
                .unwrap_or_default();
            (!m.pods.is_empty(), since)
        });
        let mut room = allowed;
        let deadline = Instant::now() + DRIFT_STARTS_TIME;
        let mut decided = Vec::new();
        for m in machines {
            if room == 0 || Instant::now() >= deadline {
                break;
            }
            if let Some(why) = held(m, pool, &view.pdbs, now) {
                ctx.events
                    .normal_once_per(
                        BLOCKED_EVENT_WINDOW,
                        Repeat::SameNote,
                        m.claim,
                        "DisruptionBlocked",
                        format!("Cannot disrupt NodeClaim: {why}"),
                    )
                    .await;
                ctx.events
                    .normal_once_per(
                        BLOCKED_EVENT_WINDOW,
                        Repeat::SameNote,
                        m.node,
                        "DisruptionBlocked",
                        format!("Cannot disrupt Node: {why}"),
                    )
                    .await;
                continue;
            }
            let plan = match &mut plan {
                Some(plan) => plan,
                none => none.insert(Plan::new(ctx, view).await),
            };
            if let Some(replacements) = command::decide(ctx, plan, m, "Drifted").await {
                room -= 1;
                decided.push((m, replacements));
            }
        }
        if command::start_all(ctx, &decided, "Drifted").await? > 0 {
            started = true;
        }
    }
    if let Some(plan) = plan {
        ctx.metrics
            .disruption
            .evaluated("Drifted", "", plan.spent());
    }
    Ok(started)
}

/// Drift of static pools (`replicas`), as Karpenter's static drift: each drifted claim, within
/// the pool's Drifted budget and its `limits.nodes` (counting the claims it has, the ones leaving
/// included), gets one replacement from the pool's template (no scheduling: a static pool's
/// nodes are not for pods), then goes once it is initialized ([`command`]). A pool over its
/// replicas is left to the static pool controller first.
async fn start_static_drift(
    ctx: &Context,
    view: &View,
    pools: &BTreeMap<String, &NodePool>,
    all: &[Machine<'_>],
    counts: &BTreeMap<String, (usize, usize)>,
    now: Timestamp,
) -> Result<bool, ControllerError> {
    let mut started = false;
    for (name, pool) in pools {
        let Some(replicas) = pool.spec.replicas else {
            continue;
        };
        let of_pool = |c: &&Arc<NodeClaim>| {
            c.metadata.deletion_timestamp.is_none()
                && c.labels().get(NODEPOOL).is_some_and(|p| p == name)
        };
        // The node limit counts every claim the pool holds, the ones being deleted too.
        let claims = view
            .claims
            .iter()
            .filter(|c| c.labels().get(NODEPOOL).is_some_and(|p| p == name))
            .count();
        let staying = view
            .claims
            .iter()
            .filter(of_pool)
            .filter(|c| !crate::rules::candidates::disrupting(c))
            .count();
        if i64::try_from(staying).unwrap_or(i64::MAX) > replicas {
            continue;
        }
        let candidates: Vec<&Machine<'_>> = all
            .iter()
            .filter(|m| m.claim.labels().get(NODEPOOL) == Some(name))
            .filter(|m| crate::rules::candidates::settled(m) && is_true(m.claim, DRIFTED))
            .filter(|m| held(m, pool, &view.pdbs, now).is_none())
            .collect();
        if candidates.is_empty() {
            continue;
        }
        let (total, disrupting) = counts.get(name).copied().unwrap_or_default();
        let Ok(allowed) = crate::rules::budgets::allowed(
            &pool.spec.disruption.budgets,
            DisruptionReason::Drifted,
            total,
            disrupting,
            now,
        ) else {
            continue;
        };
        let room =
            static_pools::node_limit(pool).map_or(usize::MAX, |limit| limit.saturating_sub(claims));
        if room == 0 && allowed > 0 {
            // At its node limit: no replacement can come first.
            started |=
                terminate_first(ctx, pool, &candidates[..allowed.min(candidates.len())]).await?;
            continue;
        }
        let take = allowed.min(room).min(candidates.len());
        if take == 0 {
            continue;
        }
        let snapshot = provisioner::snapshot::take(ctx);
        let source = provisioner::instance_types::FromProviders {
            ctx,
            cache: &ctx.instance_types,
        };
        let new = match snapshot.static_claim(&source, pool).await {
            Ok(Ok(new)) => new,
            Ok(Err(why)) => {
                ctx.events
                    .warning(
                        *pool,
                        "DisruptionBlocked",
                        format!("cannot replace drifted static capacity: {why}"),
                    )
                    .await;
                continue;
            }
            Err(err) => {
                tracing::debug!(nodepool = %name, error = %err, "static drift: no template claim");
                continue;
            }
        };
        for m in candidates.into_iter().take(take) {
            command::launch(
                ctx,
                &[m],
                "Drifted",
                &[&new],
                "replacing drifted static capacity",
            )
            .await?;
            started = true;
        }
    }
    Ok(started)
}

/// Drifted nodes of a static pool at its node limit (Karpenter v1.15's terminate-first): with
/// `TerminateFirstDrift` on and the pool Ready and not being deleted, each is deleted now (its
/// drain honours PodDisruptionBudgets and its `terminationGracePeriod`) and the static pool
/// controller refills the pool once the slot is free; otherwise each gets a `DisruptionBlocked`
/// Event. Returns whether any was deleted.
async fn terminate_first(
    ctx: &Context,
    pool: &NodePool,
    candidates: &[&Machine<'_>],
) -> Result<bool, ControllerError> {
    let ready = pool
        .status
        .as_ref()
        .and_then(|s| crate::api::shared::find_condition(&s.conditions, "Ready"))
        .is_some_and(|c| c.is_true());
    let allowed =
        ctx.settings.terminate_first_drift && ready && pool.metadata.deletion_timestamp.is_none();
    for m in candidates {
        if !allowed {
            let note = "static NodePool is at its node limit and cannot stage a replacement";
            ctx.events
                .normal_once_per(
                    POOL_BLOCKED_EVENT_WINDOW,
                    Repeat::SameNote,
                    m.claim,
                    "DisruptionBlocked",
                    note.to_owned(),
                )
                .await;
            continue;
        }
        let note = "Disrupting NodeClaim (Drifted): its static NodePool is at its node limit, \
                    so it is terminated first and refilled after (TerminateFirstDrift)";
        tracing::info!(nodeclaim = %m.claim.name_any(), nodepool = %pool.name_any(), "terminating drifted static capacity first");
        ctx.events
            .normal(m.claim, "DisruptionTerminating", note)
            .await;
        ctx.metrics
            .lifecycle
            .disrupted(m.claim, "drifted", "", m.pods.len());
        nodeclaim::delete(ctx, m.claim).await?;
    }
    Ok(allowed && !candidates.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn claims_expire_after_their_expire_after() {
        let claim = |expire: &str| -> NodeClaim {
            serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": "c", "creationTimestamp": "2026-11-26T10:00:00Z"},
                "spec": {
                    "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "c"},
                    "requirements": [], "expireAfter": expire
                }
            }))
            .unwrap()
        };
        let at = |t: &str| -> Timestamp { t.parse().unwrap() };
        assert!(!expired(&claim("1h"), at("2026-11-26T10:59:59Z")));
        assert!(expired(&claim("1h"), at("2026-11-26T11:00:00Z")));
        assert!(expired(&claim("30s"), at("2026-11-26T10:00:31Z")));
        assert!(!expired(&claim("Never"), at("2030-01-01T00:00:00Z")));
    }
}
