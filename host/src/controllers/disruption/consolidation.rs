//! Consolidation in the disruption loop: keeps each claim's `status.lastPodEventTime` and
//! `Consolidatable` condition, builds the [`crate::rules::consolidation::Cluster`] from the host's
//! caches, searches (emptiness, then multi-node, then single-node, off the async runtime), holds
//! a decision for [`Settings::validation_delay`] and re-checks it against the cluster as it is
//! then, and hands it to [`super::command`] to carry out.
//!
//! While a decision waits for validation the other disruption work (drift, expiration,
//! disruptions under way) goes on; Karpenter blocks its whole loop for those 15 s.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType::Normal;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::command;
use crate::api::labels::NODEPOOL;
use crate::api::nodeclaim::conditions::{CONSOLIDATABLE, LAUNCHED};
use crate::api::shared::find_condition;
use crate::api::{ConditionStatus, NodeClaim, NodePool, duration};
use crate::controllers::nodeclaim::{self, persist_status};
use crate::controllers::{Context, ControllerError};
use crate::metrics::labels as metric_labels;
use crate::rules::candidates::{Joined, Machine, job_wait};
use crate::rules::claims::is_true;
use crate::rules::consolidation::from_view::{
    Allowances, add_unbound, allowances_in, cluster_from, search,
};
use crate::rules::consolidation::{self, Cluster, Command, Reason};
use crate::rules::snapshot::Snapshot;
use crate::rules::verdict::{self, Facts, consolidatable_since};
use crate::scheduling::convert::is_terminal;
use crate::state::View;

/// Consolidation's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// The engine's knobs (spot-to-spot, multi-node size, Balanced's k).
    pub options: consolidation::Options,
    /// How long a decision waits before it is re-checked and carried out (Karpenter: 15 s).
    pub validation_delay: Duration,
    /// How long one search may run.
    pub search_timeout: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            options: consolidation::Options::default(),
            validation_delay: Duration::from_secs(15),
            search_timeout: Duration::from_secs(10),
        }
    }
}

/// A search that found nothing is not repeated until the cluster changes, or this long.
const CONSOLIDATED_FOR: Duration = Duration::from_secs(5 * 60);
/// A search that found nothing is not even prepared again (pods and nodes converted for the
/// simulation, the cheapest part of a pass at rest only when skipped) while no cache took a
/// change and the budgets and recently changed claims are the same, for at most this long: what
/// changes with time alone (a `do-not-disrupt` duration running out, a job's wait, a catalog
/// refresh) is seen within it.
const QUIET_FOR: Duration = Duration::from_secs(20);

/// What consolidation remembers between passes (rate limits and a decision waiting for
/// validation; nothing that a restart must keep).
#[derive(Debug, Default)]
pub struct Memory {
    /// Node → fingerprint of its pods, for `lastPodEventTime`.
    pods_seen: HashMap<String, u64>,
    /// A decision waiting to be validated.
    pending: Option<Pending>,
    /// The cluster's fingerprint when a search last found nothing, and when.
    consolidated: Option<(u64, Instant)>,
    /// The key of the inputs (cache generation, budgets, recently changed claims) when a search
    /// last found nothing or had no candidate, and when: see [`QUIET_FOR`].
    quiet: Option<(u64, Instant)>,
    /// Claim → the kind of the last `Unconsolidatable` refusal published for it, and when.
    refusals: HashMap<String, Vec<(&'static str, Instant)>>,
    /// Claim → the last search's refusal of it (the verdict's; replaced by each search).
    refused: HashMap<String, consolidation::Refusal>,
    /// Claim → the `ConsolidationBlocked` (reason, message) this host last wrote, and when: the
    /// cache may not show it yet, so it is not written again for [`VERDICT_CACHE_LAG`].
    verdicts: HashMap<String, ((String, String), Instant)>,
    /// Pool → the unreadable `capstan.dev/wait-for-jobs` value last warned about.
    bad_job_waits: HashMap<String, String>,
    /// Claim → when this host last saw its node's pods change. The cache may not show the
    /// `lastPodEventTime` written for it yet; a claim changed since its pool's
    /// `consolidateAfter` is no candidate whatever its cached condition says.
    changed_at: HashMap<String, Instant>,
}

#[derive(Debug)]
struct Pending {
    reason: Reason,
    decided: Instant,
    /// Claim names.
    claims: Vec<String>,
    replaces: bool,
    due: Instant,
}

/// One consolidation step of a disruption pass.
///
/// `generation` is [`crate::state::ClusterState::generation`] read before `view` was taken.
pub async fn pass(
    ctx: &Context,
    memory: &mut Memory,
    (view, joined, generation): (&View, &Joined<'_>, u64),
    pools: &BTreeMap<String, &NodePool>,
    now: Timestamp,
) -> Result<(), ControllerError> {
    let touched = pod_events(ctx, memory, joined, view).await;
    let names: std::collections::HashSet<String> =
        view.claims.iter().map(|c| c.name_any()).collect();
    memory.refusals.retain(|claim, _| names.contains(claim));
    for claim in &touched {
        memory.changed_at.insert(claim.clone(), Instant::now());
    }
    memory.changed_at.retain(|claim, _| names.contains(claim));
    let recent = recently_changed(&memory.changed_at, view, pools);
    mark_consolidatable(ctx, view, pools, now, &touched).await;
    let decided = decide(ctx, memory, (view, joined, generation), pools, now, &recent).await;
    publish_verdicts(ctx, memory, (view, joined), pools, now, &recent).await;
    decided
}

/// Searches for a decision, or validates the one waiting and carries it out.
async fn decide(
    ctx: &Context,
    memory: &mut Memory,
    (view, joined, generation): (&View, &Joined<'_>, u64),
    pools: &BTreeMap<String, &NodePool>,
    now: Timestamp,
    recent: &std::collections::HashSet<String>,
) -> Result<(), ControllerError> {
    if let Some(pending) = &memory.pending {
        if Instant::now() < pending.due {
            return Ok(());
        }
        let Some(pending) = memory.pending.take() else {
            return Ok(());
        };
        if let Some(claim) = pending.claims.iter().find(|c| {
            memory
                .changed_at
                .get(*c)
                .is_some_and(|at| *at > pending.decided)
        }) {
            let label = pending.reason.as_str().to_lowercase();
            return reject(ctx, &label, claim, "its pods changed").await;
        }
        return validate_and_start(ctx, (view, joined), pools, now, pending, recent).await;
    }
    let allowance = allowances(ctx, joined, pools, now).await;
    // What the budgets allow is part of what a search depends on: a node that finishes leaving
    // opens the budget without changing the nodes the search sees; so are the prices, which
    // NodeOverlays change, and the providers' catalogs (capacity available again on-prem is a
    // reason to look again at once, where Karpenter waits out its 5 minutes).
    let budgets = key((
        &allowance.empty,
        &allowance.underutilized,
        ctx.instance_types.overlay_version(),
        ctx.instance_types.changes(),
        ctx.unavailable_offerings.live(),
    ));
    let quiet_key = {
        let mut recent: Vec<&String> = recent.iter().collect();
        recent.sort();
        key((generation, budgets, recent))
    };
    if remembered(memory.quiet, quiet_key, QUIET_FOR) {
        return Ok(());
    }
    // Karpenter times a method's whole evaluation, taking the cluster included.
    let evaluating = Instant::now();
    let Some((mut cluster, cluster_fingerprint)) =
        build(ctx, (view, joined), pools, now, recent).await
    else {
        memory.refused.clear();
        memory.quiet = Some((quiet_key, Instant::now()));
        return Ok(());
    };
    let fingerprint = key((cluster_fingerprint, budgets));
    if remembered(memory.consolidated, fingerprint, CONSOLIDATED_FOR) {
        return Ok(());
    }
    let timeout = ctx.settings.consolidation.search_timeout;
    let started = Instant::now();
    let search = tokio::task::spawn_blocking(move || {
        let (found, refused) = search(&mut cluster, &allowance, Instant::now() + timeout);
        (cluster, found, refused)
    })
    .await;
    let Ok((cluster, found, refused)) = search else {
        tracing::warn!("consolidation search did not finish");
        return Ok(());
    };
    tracing::debug!(elapsed = ?started.elapsed(), candidates = cluster.candidates.len(), found = found.is_some(), "consolidation search");
    let disruption = &ctx.metrics.disruption;
    disruption.eligible("Underutilized", cluster.candidates.len());
    let (reason, candidates) = found.as_ref().map_or(("Underutilized", 1), |c| {
        (c.reason.as_str(), c.candidates.len())
    });
    disruption.evaluated(
        reason,
        metric_labels::consolidation_type(reason, candidates),
        evaluating.elapsed(),
    );
    if started.elapsed() >= timeout {
        disruption.consolidation_timeout(metric_labels::consolidation_type(reason, candidates));
    }
    memory.refused.clear();
    for (i, why) in refused {
        let c = &cluster.candidates[i];
        unconsolidatable(ctx, memory, view, &c.claim, &why).await;
        memory.refused.insert(c.claim.clone(), why);
    }
    let Some(cmd) = found else {
        memory.consolidated = Some((fingerprint, Instant::now()));
        memory.quiet = Some((quiet_key, Instant::now()));
        return Ok(());
    };
    memory.consolidated = None;
    memory.quiet = None;
    let claims: Vec<String> = cmd
        .candidates
        .iter()
        .map(|&i| cluster.candidates[i].claim.clone())
        .collect();
    tracing::info!(
        reason = cmd.reason.as_str(),
        decision = cmd.decision(),
        nodeclaims = ?claims,
        price_before = cmd.price_before,
        price_after = cmd.price_after,
        "consolidation decided; validating"
    );
    memory.pending = Some(Pending {
        reason: cmd.reason,
        claims,
        replaces: cmd.replacement.is_some(),
        decided: Instant::now(),
        due: Instant::now() + ctx.settings.consolidation.validation_delay,
    });
    Ok(())
}

/// The hash of `parts`.
fn key(parts: impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    parts.hash(&mut hasher);
    hasher.finish()
}

/// Whether `memo` holds `key`, remembered less than `within` ago.
fn remembered(memo: Option<(u64, Instant)>, key: u64, within: Duration) -> bool {
    memo.is_some_and(|(seen, at)| seen == key && at.elapsed() < within)
}

/// Re-checks a decision against the cluster now; carries it out if it still holds.
async fn validate_and_start(
    ctx: &Context,
    (view, joined): (&View, &Joined<'_>),
    pools: &BTreeMap<String, &NodePool>,
    now: Timestamp,
    pending: Pending,
    recent: &std::collections::HashSet<String>,
) -> Result<(), ControllerError> {
    let reason = pending.reason;
    let label = reason.as_str().to_lowercase();
    let Some((mut cluster, _)) = build(ctx, (view, joined), pools, now, recent).await else {
        return Ok(());
    };
    let allowances = allowances(ctx, joined, pools, now).await;
    let allowance = match reason {
        Reason::Empty => allowances.empty,
        Reason::Underutilized => allowances.underutilized,
    };
    let mut chosen = Vec::new();
    let mut per_pool: BTreeMap<&str, usize> = BTreeMap::new();
    for claim in &pending.claims {
        let Some(i) = cluster.candidates.iter().position(|c| &c.claim == claim) else {
            return reject(ctx, &label, claim, "it is no longer a candidate").await;
        };
        *per_pool
            .entry(cluster.candidates[i].node_pool.as_str())
            .or_default() += 1;
        chosen.push(i);
    }
    for (pool, n) in &per_pool {
        if allowance.get(*pool).copied().unwrap_or_default() < *n {
            let first = &pending.claims[0];
            return reject(
                ctx,
                &label,
                first,
                &format!("the budget of NodePool {pool} closed"),
            )
            .await;
        }
    }
    let checked = match reason {
        Reason::Empty => {
            if let Some(&i) = chosen
                .iter()
                .find(|&&i| !cluster.candidates[i].pods.is_empty())
            {
                let claim = cluster.candidates[i].claim.clone();
                return reject(ctx, &label, &claim, "pods arrived on it").await;
            }
            let price_before = chosen.iter().map(|&i| cluster.candidates[i].price).sum();
            Ok(Command {
                reason,
                candidates: chosen.clone(),
                replacement: None,
                price_before,
                price_after: 0.0,
            })
        }
        Reason::Underutilized => {
            let set = chosen.clone();
            let search = tokio::task::spawn_blocking(move || {
                let found = cluster.check(&set);
                (cluster, found)
            })
            .await;
            let Ok((c, found)) = search else {
                return Ok(());
            };
            cluster = c;
            found
        }
    };
    let cmd = match checked {
        Ok(cmd) if cmd.replacement.is_some() == pending.replaces => cmd,
        Ok(_) => {
            let first = &pending.claims[0];
            return reject(ctx, &label, first, "the decision changed").await;
        }
        Err(why) => {
            let first = &pending.claims[0];
            return reject(ctx, &label, first, &why.to_string()).await;
        }
    };
    start(ctx, joined, &cluster, &cmd).await
}

async fn reject(
    ctx: &Context,
    reason: &str,
    claim: &str,
    why: &str,
) -> Result<(), ControllerError> {
    tracing::info!(
        nodeclaim = claim,
        why,
        "consolidation decision dropped at validation"
    );
    ctx.metrics
        .disruption
        .failed_validation(metric_labels::consolidation_type(reason, 1));
    Ok(())
}

/// Carries a validated decision out through [`command::launch`].
async fn start(
    ctx: &Context,
    joined: &Joined<'_>,
    cluster: &Cluster,
    cmd: &Command,
) -> Result<(), ControllerError> {
    let chosen: Vec<&Machine<'_>> = cmd
        .candidates
        .iter()
        .filter_map(|&i| joined.machine(&cluster.candidates[i].claim))
        .collect();
    if chosen.len() != cmd.candidates.len() {
        return Ok(());
    }
    let reason = cmd.reason.as_str();
    let replacements: Vec<&crate::scheduling::NewClaim> = cmd.replacement.iter().collect();
    let note = format!(
        "{}/{}: ${:.4}/h → ${:.4}/h (saves ${:.4}/h)",
        reason,
        cmd.decision(),
        cmd.price_before,
        cmd.price_after,
        cmd.savings()
    );
    ctx.metrics.own.consolidation_savings(reason, cmd.savings());
    command::launch(ctx, &chosen, reason, &replacements, &note)
        .await
        .map(|_| ())
}

/// At most this many `ConsolidationBlocked` writes a pass: a cause that changes for every node
/// at once (a budget window opening) is written over a few passes, not in one burst.
pub const VERDICT_WRITES_PER_PASS: usize = 50;

/// How long a verdict just written is taken as written while the cache catches up.
const VERDICT_CACHE_LAG: Duration = Duration::from_secs(10);
/// How often this host rewrites a claim's verdict whose reason stands and only the message moved
/// (a budget's count of disrupting nodes, a price): a new reason is written at once, a new
/// message at most this often, so a large pool in motion is not a stream of status writes.
const VERDICT_MESSAGE_EVERY: Duration = Duration::from_secs(60);

/// Keeps each managed claim's `ConsolidationBlocked` condition true to its [`verdict`] (written
/// when its reason changes, or its message, at most every [`VERDICT_MESSAGE_EVERY`]; at most
/// [`VERDICT_WRITES_PER_PASS`] a pass) and
/// counts the verdicts per pool in `capstan_nodeclaims_consolidation_blocked`.
async fn publish_verdicts(
    ctx: &Context,
    memory: &mut Memory,
    (view, joined): (&View, &Joined<'_>),
    pools: &BTreeMap<String, &NodePool>,
    now: Timestamp,
    recent: &std::collections::HashSet<String>,
) {
    warn_bad_job_waits(ctx, memory, pools).await;
    let (all, counts) = (&joined.machines, &joined.counts);
    let pending = memory
        .pending
        .as_ref()
        .map(|p| (p.claims.as_slice(), p.reason.as_str()));
    let facts = Facts {
        pdbs: &view.pdbs,
        now,
        counts,
        recent,
        refused: &memory.refused,
        pending,
    };
    let mut tally: BTreeMap<(String, &'static str), usize> = BTreeMap::new();
    let mut writes = Vec::new();
    for m in all {
        let Some(pool_name) = m.claim.labels().get(NODEPOOL) else {
            continue;
        };
        let Some(pool) = pools.get(pool_name) else {
            continue;
        };
        if m.claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let blocked = verdict::verdict(m, pool, &facts);
        let (reason, message) = verdict::condition_of(blocked.as_ref());
        *tally.entry((pool_name.clone(), reason)).or_default() += 1;
        let name = m.claim.name_any();
        let current = m
            .claim
            .status
            .as_ref()
            .and_then(|s| find_condition(&s.conditions, verdict::CONSOLIDATION_BLOCKED))
            .map(|c| {
                (
                    c.reason.clone().unwrap_or_default(),
                    c.message.clone().unwrap_or_default(),
                )
            });
        let want = (reason.to_owned(), message);
        let last = memory.verdicts.get(&name);
        let just_written =
            last.is_some_and(|(w, at)| *w == want && at.elapsed() < VERDICT_CACHE_LAG);
        let message_moved_lately = current.as_ref().is_some_and(|(r, _)| *r == want.0)
            && last.is_some_and(|(w, at)| w.0 == want.0 && at.elapsed() < VERDICT_MESSAGE_EVERY);
        if current.as_ref() == Some(&want) || just_written || message_moved_lately {
            continue;
        }
        writes.push((m.claim, blocked.is_some(), want));
    }
    ctx.metrics.own.consolidation_verdicts(&tally);
    let names: std::collections::HashSet<String> =
        view.claims.iter().map(|c| c.name_any()).collect();
    memory.verdicts.retain(|claim, _| names.contains(claim));
    for (claim, is_blocked, (reason, message)) in writes.into_iter().take(VERDICT_WRITES_PER_PASS) {
        let mut claim = claim.clone();
        let name = claim.name_any();
        let status = if is_blocked {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        };
        nodeclaim::set(
            &mut claim,
            verdict::CONSOLIDATION_BLOCKED,
            status,
            &reason,
            &message,
        );
        match persist_status(ctx, &mut claim).await {
            Ok(()) => {
                memory
                    .verdicts
                    .insert(name, ((reason, message), Instant::now()));
            }
            Err(err) => {
                tracing::debug!(nodeclaim = %name, error = %err, "cannot write ConsolidationBlocked");
            }
        }
    }
}

/// An `InvalidWaitForJobs` Warning Event on each pool whose `capstan.dev/wait-for-jobs` does
/// not parse (it then holds nothing), once per value.
async fn warn_bad_job_waits(
    ctx: &Context,
    memory: &mut Memory,
    pools: &BTreeMap<String, &NodePool>,
) {
    memory
        .bad_job_waits
        .retain(|pool, _| pools.contains_key(pool));
    for (name, pool) in pools {
        let Err(error) = job_wait(pool) else {
            memory.bad_job_waits.remove(name);
            continue;
        };
        if memory.bad_job_waits.get(name) == Some(&error) {
            continue;
        }
        ctx.events
            .warning(
                *pool,
                "InvalidWaitForJobs",
                format!("{error}: Job pods do not hold this pool's nodes"),
            )
            .await;
        memory.bad_job_waits.insert(name.clone(), error);
    }
}

/// Writes `status.lastPodEventTime` on the claims whose node's pods changed since the last pass
/// (a pod bound, or gone or finished). Returns those claims.
async fn pod_events(
    ctx: &Context,
    memory: &mut Memory,
    joined: &Joined<'_>,
    view: &View,
) -> Vec<String> {
    let mut by_node: HashMap<&str, Vec<&str>> = HashMap::new();
    for pod in &view.pods {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        if is_terminal(pod) {
            continue;
        }
        by_node
            .entry(node)
            .or_default()
            .push(pod.metadata.uid.as_deref().unwrap_or_default());
    }
    let all = &joined.machines;
    let mut seen = HashMap::with_capacity(all.len());
    let mut touched = Vec::new();
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for m in all {
        let node = m.node.name_any();
        let mut uids = by_node.remove(node.as_str()).unwrap_or_default();
        uids.sort_unstable();
        let fingerprint = key(&uids);
        let changed = memory
            .pods_seen
            .get(&node)
            .is_some_and(|before| *before != fingerprint);
        seen.insert(node, fingerprint);
        if !changed || m.claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let patch = json!({"status": {"lastPodEventTime": Time(Timestamp::now())}});
        let name = m.claim.name_any();
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => touched.push(name),
            Err(err) => {
                tracing::debug!(nodeclaim = %name, error = %err, "cannot write lastPodEventTime")
            }
        }
    }
    memory.pods_seen = seen;
    touched
}

/// Keeps each launched claim's `Consolidatable` condition true to [`consolidatable_since`].
async fn mark_consolidatable(
    ctx: &Context,
    view: &View,
    pools: &BTreeMap<String, &NodePool>,
    now: Timestamp,
    touched: &[String],
) {
    for claim in &view.claims {
        if claim.metadata.deletion_timestamp.is_some() || !is_true(claim, LAUNCHED) {
            continue;
        }
        let name = claim.name_any();
        if touched.contains(&name) {
            continue;
        }
        let Some(pool) = claim.labels().get(NODEPOOL).and_then(|p| pools.get(p)) else {
            continue;
        };
        let want = consolidatable_since(pool, claim).is_some_and(|t| t <= now);
        if want == is_true(claim, CONSOLIDATABLE) {
            continue;
        }
        let mut claim = claim.as_ref().clone();
        if want {
            nodeclaim::set(
                &mut claim,
                CONSOLIDATABLE,
                ConditionStatus::True,
                "Consolidatable",
                "",
            );
        } else if let Some(status) = claim.status.as_mut() {
            status.conditions.retain(|c| c.type_ != CONSOLIDATABLE);
        }
        if let Err(err) = persist_status(ctx, &mut claim).await {
            tracing::debug!(nodeclaim = %name, error = %err, "cannot write Consolidatable");
        }
    }
}

async fn allowances(
    ctx: &Context,
    joined: &Joined<'_>,
    pools: &BTreeMap<String, &NodePool>,
    now: Timestamp,
) -> Allowances {
    let (allowances, errors) = allowances_in(joined, pools, now);
    for (name, err) in errors {
        if let Some(pool) = pools.get(&name) {
            ctx.events
                .warning(*pool, "DisruptionBlocked", format!("invalid budget: {err}"))
                .await;
        }
    }
    allowances
}

/// The cluster as consolidation sees it now, from the host's caches.
async fn build(
    ctx: &Context,
    (view, joined): (&View, &Joined<'_>),
    pools: &BTreeMap<String, &NodePool>,
    now: Timestamp,
    recent: &std::collections::HashSet<String>,
) -> Option<(Cluster, u64)> {
    // The room CapacityBuffers hold counts as pods on the nodes the provisioner placed their
    // virtual pods on: such a node is not empty, and whatever moves must leave the room.
    let room = ctx.buffers.room(&view.claims);
    if room.is_empty() {
        let snapshot = crate::controllers::provisioner::snapshot::take(ctx);
        return cluster(ctx, (view, joined), snapshot, pools, now, recent).await;
    }
    let mut now_view = ctx.state.view();
    now_view.pods.extend(room.iter().cloned().map(Arc::new));
    let snapshot = Snapshot::from_view(&now_view, &ctx.selector);
    let mut with_room = view.clone();
    with_room.pods.extend(room.into_iter().map(Arc::new));
    // The room's pods sit on nodes: joined again, with them.
    let joined = Joined::of(&with_room);
    cluster(ctx, (&with_room, &joined), snapshot, pools, now, recent).await
}

/// [`build`] from a snapshot: the pods not bound yet added, the scheduling input made, the
/// candidates chosen.
async fn cluster(
    ctx: &Context,
    (view, joined): (&View, &Joined<'_>),
    mut snapshot: Snapshot,
    pools: &BTreeMap<String, &NodePool>,
    now: Timestamp,
    recent: &std::collections::HashSet<String>,
) -> Option<(Cluster, u64)> {
    add_unbound(&mut snapshot, view, &ctx.selector);
    let built =
        crate::controllers::provisioner::snapshot::input(&snapshot, ctx, &ctx.instance_types).await;
    cluster_from(
        view,
        joined,
        &snapshot,
        built.input,
        (pools, recent),
        now,
        ctx.settings.consolidation.options.clone(),
    )
}

/// The claims whose pods this host saw change within their pool's `consolidateAfter`.
fn recently_changed(
    changed_at: &HashMap<String, Instant>,
    view: &View,
    pools: &BTreeMap<String, &NodePool>,
) -> std::collections::HashSet<String> {
    view.claims
        .iter()
        .filter_map(|c| {
            let at = changed_at.get(&c.name_any())?;
            let pool = pools.get(c.labels().get(NODEPOOL)?)?;
            let after = duration::parse_nillable(&pool.spec.disruption.consolidate_after)
                .ok()
                .flatten()?;
            (at.elapsed() < after).then(|| c.name_any())
        })
        .collect()
}

/// How long the same kind of `Unconsolidatable` refusal is not published again (Karpenter's
/// dedupe timeout for it).
const UNCONSOLIDATABLE_REPEAT: Duration = Duration::from_secs(15 * 60);

/// Whether a refusal of `kind` is to be published now, given the kinds `published` for the claim
/// and when (those older than [`UNCONSOLIDATABLE_REPEAT`] are forgotten); if so it is recorded.
fn due(published: &mut Vec<(&'static str, Instant)>, kind: &'static str, now: Instant) -> bool {
    published.retain(|(_, at)| now.duration_since(*at) < UNCONSOLIDATABLE_REPEAT);
    if published.iter().any(|(k, _)| *k == kind) {
        return false;
    }
    published.push((kind, now));
    true
}

/// Publishes `Unconsolidatable` on the claim and its node when its kind of refusal was not
/// published for it in the last [`UNCONSOLIDATABLE_REPEAT`] (the kind is the Event's action, so a
/// new kind is a new Event, not a repeat of the first one's series). Karpenter publishes it once
/// per object in 15 minutes whatever the reason; here a new kind shows at once, while the same
/// kind with other numbers (a price, a count) waits, and so does a kind the claim comes back to
/// (a refusal that alternates between two kinds as the cluster moves is two Events in 15
/// minutes, not two a pass), so a pool of thousands of nodes does not write thousands of Events
/// a minute.
async fn unconsolidatable(
    ctx: &Context,
    memory: &mut Memory,
    view: &View,
    claim: &str,
    refusal: &consolidation::Refusal,
) {
    let why = refusal.to_string();
    let action = refusal.kind();
    let now = Instant::now();
    if !due(
        memory.refusals.entry(claim.to_owned()).or_default(),
        action,
        now,
    ) {
        return;
    }
    let Some(object) = view.claims.iter().find(|c| c.name_any() == claim) else {
        return;
    };
    ctx.events
        .publish_action(
            object.as_ref(),
            Normal,
            "Unconsolidatable",
            action,
            why.clone(),
        )
        .await;
    let node = object
        .status
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .and_then(|n| view.nodes.iter().find(|node| node.name_any() == n));
    if let Some(node) = node {
        ctx.events
            .publish_action(node.as_ref(), Normal, "Unconsolidatable", action, why)
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kind is published once in the window, a new kind at once, and a kind the claim comes
    /// back to only after the window: a refusal alternating between two kinds every pass is two
    /// Events, not one a pass.
    #[test]
    fn each_kind_of_refusal_is_published_once_in_the_window() {
        let start = Instant::now();
        let mut published = Vec::new();
        let at = |s: u64| start + Duration::from_secs(s);
        assert!(due(&mut published, "NoRoom", at(0)));
        assert!(!due(&mut published, "NoRoom", at(30)));
        assert!(due(&mut published, "SpotToSpotDisabled", at(60)));
        let again = (2..20)
            .filter(|i| {
                let kind = if i % 2 == 0 {
                    "NoRoom"
                } else {
                    "SpotToSpotDisabled"
                };
                due(&mut published, kind, at(30 * i))
            })
            .count();
        assert_eq!(again, 0, "alternating kinds are not published again");
        let window = UNCONSOLIDATABLE_REPEAT.as_secs();
        assert!(due(&mut published, "NoRoom", at(window + 1)));
        assert!(!due(&mut published, "SpotToSpotDisabled", at(window + 1)));
        assert!(due(&mut published, "SpotToSpotDisabled", at(window + 61)));
    }
}
