//! Node repair (`--feature-gates NodeRepair=true`, off by default as in Karpenter): a node whose
//! condition matches one of its provider's repair rules for longer than the rule's toleration
//! has its NodeClaim deleted, forcefully, and its pods are provisioned for anew.
//!
//! As Karpenter v1.15's legacy repair (`--legacy-node-repair`; its `Repair` disruption method and
//! reboots are not here yet):
//!
//! - the rules are the provider's (the provider of the claim's NodeClass), asked once per
//!   loaded version, checked and matched as [`crate::rules::repair`] says; rules that reboot are
//!   left out (a provider of a contract before 0.4 has none);
//! - repair stops while more than 20% of the pool's nodes (rounded up: one of three may be)
//!   match a policy at all, however recently, with a `NodeRepairBlocked` Warning Event on the
//!   node, its claim and its NodePool (once per 15 minutes each) and the pool's condition
//!   `NodeRepairAllowed=False` (`TooManyUnhealthyNodes`, `True` again once it is over); nodes of
//!   claims without a pool are counted together;
//! - the claim gets `karpenter.sh/nodeclaim-termination-timestamp` = now before it is deleted, so
//!   termination deletes its pods at once, PodDisruptionBudgets and `do-not-disrupt`
//!   notwithstanding (an unhealthy node's pods are not served anyway), and does not wait for
//!   volumes to detach; then the instance is deleted through the provider as for any claim.
//!
//! Each repair is a `NodeRepair` Warning Event on the node and the claim, a log line and
//! `karpenter_nodeclaims_disrupted_total{reason="unhealthy"}`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::api::labels::{
    DO_NOT_DISRUPT, DO_NOT_REPAIR, NODECLAIM_TERMINATION_TIMESTAMP, NODEPOOL, REBOOT_GRACE_PERIOD,
    REBOOTS,
};
use crate::api::nodeclaim::conditions::{
    DISRUPTION_REASON, INITIALIZED, REBOOT_REQUESTED, REBOOTING,
};
use crate::api::nodepool::DisruptionReason;
use crate::api::shared::find_condition;
use crate::api::{ConditionStatus, NodeClaim, NodeClass, NodePool, duration};
use crate::controllers::nodeclaim::{self, termination::format_deadline};
use crate::controllers::nodepool_status::set_pool_condition;
use crate::controllers::{Context, ControllerError, resolve};
use crate::metrics::cloudprovider::controller;
use crate::rules::candidates::{self, Joined, Machine};
use crate::rules::claims::is_true;
use crate::rules::pods::do_not_disrupt;
use crate::rules::{budgets, reboot};

use crate::rules::repair::{self, Act, Decision, Rules};

/// The NodePool condition that says whether repair is stopped in the pool.
pub const NODE_REPAIR_ALLOWED: &str = "NodeRepairAllowed";

/// How often the nodes are looked at (the caches are read; no API request unless a node is
/// repaired or blocked).
pub const INTERVAL: Duration = Duration::from_secs(5);

/// How long a `NodeRepairBlocked` Event about one object is not repeated (Karpenter: 15 min).
const BLOCKED_EVENT_EVERY: Duration = Duration::from_secs(15 * 60);

/// Runs node repair while the gate is on; does nothing (forever) when it is off.
pub async fn run(ctx: Arc<Context>) {
    if !ctx.settings.node_repair {
        return std::future::pending().await;
    }
    tracing::info!("node repair on (feature gate NodeRepair)");
    let mut repair = NodeRepair::default();
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A node that turns unhealthy is looked at at once, not at the next tick: a condition may
    // be long past its toleration when it is written (and gone again a moment later), as
    // Karpenter's health controller reacts to the node's update.
    let mut unhealthy = ctx
        .state
        .nodes
        .subscribe()
        .filter(|node| std::future::ready(not_ready(node)))
        .boxed();
    loop {
        // The unhealthy versions of nodes seen since the last pass: a condition flipped back a
        // moment after it was written is judged as written (the cache may hold the newer one).
        let mut seen: Vec<Arc<Node>> = Vec::new();
        tokio::select! {
            _ = tick.tick() => {}
            Some(node) = unhealthy.next() => seen.push(node),
        }
        while let Some(Some(node)) = unhealthy.next().now_or_never() {
            seen.push(node);
        }
        if let Err(err) = repair.pass(&ctx, &seen).await {
            tracing::warn!(error = %err, "node repair pass failed; retrying");
        }
    }
}

/// Whether a node reports any condition other than `Ready=True` that could match a policy: its
/// `Ready` is not `True`, or another condition is `True` (kubelet's pressure conditions, a node
/// problem detector's).
fn not_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                if c.type_ == "Ready" {
                    c.status != "True"
                } else {
                    c.status == "True"
                }
            })
        })
}

/// The repair policies of each loaded provider version, and when blocked Events were published.
#[derive(Default)]
struct NodeRepair {
    /// By provider name: the version's digest and its rules (none: no repair for its nodes).
    policies: HashMap<String, (String, Option<Arc<Rules>>)>,
    /// By object UID.
    blocked_events: HashMap<String, Instant>,
}

/// A managed node with its claim and its provider's rules.
struct Managed {
    node: Arc<Node>,
    claim: Arc<NodeClaim>,
    policies: Arc<Rules>,
}

impl NodeRepair {
    /// One look at every managed node.
    async fn pass(&mut self, ctx: &Context, seen: &[Arc<Node>]) -> Result<(), ControllerError> {
        let view = ctx.state.view();
        let classes = &view.classes;
        let claims: HashMap<&str, &Arc<NodeClaim>> = view
            .claims
            .iter()
            .filter_map(|c| Some((c.status.as_ref()?.node_name.as_deref()?, c)))
            .collect();
        // Nodes by pool ("" for claims without one), each with its provider's policies.
        let mut pools: BTreeMap<String, Vec<Managed>> = BTreeMap::new();
        for node in &view.nodes {
            if !ctx.selector.matches(node.labels()) {
                continue;
            }
            // The unhealthy version seen in an update, if it is the same node.
            let node = seen
                .iter()
                .rev()
                .find(|s| s.name_any() == node.name_any() && s.uid() == node.uid())
                .unwrap_or(node);
            let Some(claim) = claims.get(node.name_any().as_str()) else {
                continue;
            };
            let Some(policies) = self.policies_for(ctx, claim, classes).await else {
                continue;
            };
            let pool = claim.labels().get(NODEPOOL).cloned().unwrap_or_default();
            pools.entry(pool).or_default().push(Managed {
                node: Arc::clone(node),
                claim: Arc::clone(claim),
                policies,
            });
        }
        let now = Timestamp::now();
        // A pool whose repair was stopped and has no managed node left is allowed again.
        for pool in &view.pools {
            if !pools.contains_key(&pool.name_any()) {
                pool_condition(ctx, pool, 0, 0).await;
            }
        }
        // Joined once a pass, when some repair is due: each claim's pods and the pools' counts
        // for repair's budgets.
        let mut joined: Option<Joined<'_>> = None;
        for (pool, nodes) in &pools {
            let unhealthy = nodes
                .iter()
                .filter(|m| m.policies.is_unhealthy(&m.node))
                .count();
            let pool_object = view.pools.iter().find(|p| p.name_any() == *pool);
            if let Some(pool) = pool_object {
                pool_condition(ctx, pool, unhealthy, nodes.len()).await;
            }
            if unhealthy == 0 {
                continue;
            }
            let mut due: Vec<(&Managed, repair::Repair)> = Vec::new();
            for managed in nodes {
                let claim = managed.claim.as_ref();
                if claim.metadata.deletion_timestamp.is_some() || claim.rebooting() {
                    continue;
                }
                match repair::decide(
                    &managed.node,
                    &managed.policies,
                    now,
                    unhealthy,
                    nodes.len(),
                    reboot::rebooted_at(claim),
                ) {
                    Decision::Healthy | Decision::Wait(_) => {}
                    Decision::Blocked { unhealthy, total } => {
                        self.blocked(ctx, pool, managed, unhealthy, total, &view.pools)
                            .await;
                    }
                    Decision::Repair(found) => due.push((managed, found)),
                }
            }
            if due.is_empty() {
                continue;
            }
            // The most urgent first (rank, aged), then by name: the same set, the same order.
            due.sort_by(|(a, x), (b, y)| {
                y.score
                    .total_cmp(&x.score)
                    .then_with(|| a.claim.name_any().cmp(&b.claim.name_any()))
            });
            let joined = joined
                .get_or_insert_with(|| Joined::for_reason(&view, DisruptionReason::Unhealthy));
            let (total, disrupting) = joined.counts.get(pool).copied().unwrap_or_default();
            let mut allowed = match pool_object {
                Some(p) => budgets::allowed(
                    &p.spec.disruption.budgets,
                    DisruptionReason::Unhealthy,
                    total,
                    disrupting,
                    now,
                )
                .unwrap_or_else(|err| {
                    tracing::warn!(nodepool = %pool, error = %err, "invalid budget: no repair");
                    0
                }),
                None => usize::MAX,
            };
            for (managed, found) in due {
                let claim = managed.claim.as_ref();
                // An uninitialized node runs no workload to protect: it needs no budget.
                let initialized = is_true(claim, INITIALIZED);
                if initialized && allowed == 0 {
                    let note = format!(
                        "repair of node {} waits: the NodePool's disruption budget for Unhealthy allows no more now",
                        managed.node.name_any()
                    );
                    self.veto(ctx, managed, &note).await;
                    continue;
                }
                let machine = joined
                    .machines
                    .iter()
                    .find(|m| m.claim.metadata.uid == claim.metadata.uid);
                let blocker = machine.and_then(|m| pod_blocker(m, &view.pdbs, now));
                let claim_grace = claim
                    .spec
                    .termination_grace_period
                    .as_deref()
                    .and_then(|g| duration::parse(g).ok());
                let do_not_repair = managed
                    .node
                    .annotations()
                    .get(DO_NOT_REPAIR)
                    .is_some_and(|v| v == "true");
                match repair::act(
                    &found,
                    claim_grace,
                    reboot::exhausted(claim, now),
                    do_not_repair,
                    blocker.as_deref(),
                ) {
                    Act::Veto(why) => {
                        self.veto(ctx, managed, &why).await;
                        continue;
                    }
                    Act::Reboot { grace } => {
                        commit_reboot(ctx, managed, &found, grace, now).await?;
                    }
                    Act::Replace { grace } => {
                        let escalated = found.action == repair::Action::Reboot;
                        replace(ctx, managed, &found, grace, escalated).await?;
                    }
                }
                if initialized {
                    allowed = allowed.saturating_sub(1);
                }
            }
        }
        let horizon = BLOCKED_EVENT_EVERY;
        self.blocked_events.retain(|_, at| at.elapsed() < horizon);
        Ok(())
    }

    /// The repair rules of `claim`'s provider (asked once per loaded version); none when the
    /// provider cannot be resolved or the call fails (logged; asked again next pass), or has no
    /// valid rules (logged once per version).
    async fn policies_for(
        &mut self,
        ctx: &Context,
        claim: &NodeClaim,
        classes: &HashMap<String, Arc<NodeClass>>,
    ) -> Option<Arc<Rules>> {
        let resolved = resolve::resolve_in(ctx, &claim.spec.node_class_ref, classes).ok()?;
        let digest = resolved.provider.sha256();
        if let Some((cached, policies)) = self.policies.get(&resolved.provider_name)
            && cached == digest
        {
            return policies.clone();
        }
        let started = Instant::now();
        let result = resolved.provider.repair_policies().await;
        ctx.observe_call(
            controller::NODE_REPAIR,
            &resolved.provider_name,
            "repair-policies",
            "",
            &result,
            started,
        );
        match result {
            Ok(policies) => {
                let rules = match Rules::new(&policies) {
                    Ok(rules) => rules.map(Arc::new),
                    Err(err) => {
                        tracing::warn!(provider = %resolved.provider_name, error = %err,
                            "the provider's repair rules are invalid: no repair for its nodes");
                        None
                    }
                };
                tracing::debug!(provider = %resolved.provider_name, ?rules, "repair rules");
                self.policies
                    .insert(resolved.provider_name, (digest.to_owned(), rules.clone()));
                rules
            }
            Err(err) => {
                tracing::warn!(provider = %resolved.provider_name, error = %err, "repair-policies failed");
                None
            }
        }
    }

    /// `NodeRepairBlocked` on the node, its claim and its pool, each at most once per 15 minutes.
    async fn blocked(
        &mut self,
        ctx: &Context,
        pool: &str,
        managed: &Managed,
        unhealthy: usize,
        total: usize,
        pools: &[Arc<NodePool>],
    ) {
        let scope = if pool.is_empty() {
            "of the NodeClaims without a NodePool".to_owned()
        } else {
            format!("in NodePool {pool}")
        };
        let note = format!(
            "more than {}% of nodes are unhealthy {scope} ({unhealthy} of {total}; at most {} may be): node repair stopped",
            repair::ALLOWED_UNHEALTHY_PERCENT,
            repair::allowed_unhealthy(total),
        );
        let reason = "NodeRepairBlocked";
        if self.first_in_a_while(managed.node.uid()) {
            tracing::warn!(node = %managed.node.name_any(), %note, "node repair blocked");
            ctx.events
                .warning(managed.node.as_ref(), reason, &note)
                .await;
        }
        if self.first_in_a_while(managed.claim.uid()) {
            ctx.events
                .warning(managed.claim.as_ref(), reason, &note)
                .await;
        }
        if let Some(pool) = pools.iter().find(|p| p.name_any() == pool)
            && self.first_in_a_while(pool.uid())
        {
            ctx.events.warning(pool.as_ref(), reason, &note).await;
        }
    }

    /// `DisruptionBlocked` on the node and its claim (each at most once per 15 minutes): a
    /// repair due is not made now, for `why`.
    async fn veto(&mut self, ctx: &Context, managed: &Managed, why: &str) {
        let reason = "DisruptionBlocked";
        if self.first_in_a_while(managed.node.uid()) {
            tracing::info!(node = %managed.node.name_any(), %why, "repair blocked");
            ctx.events.warning(managed.node.as_ref(), reason, why).await;
        }
        if self.first_in_a_while(managed.claim.uid()) {
            ctx.events
                .warning(managed.claim.as_ref(), reason, why)
                .await;
        }
    }

    /// Whether an Event about `uid` may go out now (none in the last 15 minutes); notes it.
    fn first_in_a_while(&mut self, uid: Option<String>) -> bool {
        let Some(uid) = uid else { return false };
        match self.blocked_events.get(&uid) {
            Some(at) if at.elapsed() < BLOCKED_EVENT_EVERY => false,
            _ => {
                self.blocked_events.insert(uid, Instant::now());
                true
            }
        }
    }
}

/// Keeps `pool`'s `NodeRepairAllowed` condition: `False` (`TooManyUnhealthyNodes`, with the
/// counts) while more than 20% of its `total` nodes are `unhealthy`; `True` (`Allowed`) again
/// afterwards. Written only when it changes, and never on a pool that has not been stopped.
async fn pool_condition(ctx: &Context, pool: &NodePool, unhealthy: usize, total: usize) {
    let current = pool
        .status
        .as_ref()
        .and_then(|s| find_condition(&s.conditions, NODE_REPAIR_ALLOWED));
    let allowed = repair::allowed_unhealthy(total);
    let (status, reason, message) = if unhealthy > allowed {
        (
            ConditionStatus::False,
            "TooManyUnhealthyNodes",
            format!(
                "{unhealthy} of {total} nodes are unhealthy, more than {}% ({allowed}): node repair stopped",
                repair::ALLOWED_UNHEALTHY_PERCENT
            ),
        )
    } else if current.is_some_and(|c| c.status == ConditionStatus::False) {
        (ConditionStatus::True, "Allowed", String::new())
    } else {
        return;
    };
    if current.is_some_and(|c| c.status == status && c.message.as_deref() == Some(&message)) {
        return;
    }
    set_pool_condition(
        ctx,
        &pool.name_any(),
        NODE_REPAIR_ALLOWED,
        status,
        reason,
        &message,
    )
    .await;
}

/// Replaces `managed`'s node: deletes its claim, with a termination deadline `grace` from now
/// when the drain is bounded (else its own `terminationGracePeriod` bounds it, if it has one).
async fn replace(
    ctx: &Context,
    managed: &Managed,
    found: &repair::Repair,
    grace: Option<Duration>,
    escalated: bool,
) -> Result<(), ControllerError> {
    let claim = managed.claim.as_ref();
    let name = claim.name_any();
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let deadline = grace.and_then(|g| {
        Timestamp::now()
            .checked_add(SignedDuration::try_from(g).ok()?)
            .ok()
    });
    if let Some(deadline) = deadline {
        let text = format_deadline(deadline);
        let patch = json!({"metadata": {"annotations": {NODECLAIM_TERMINATION_TIMESTAMP: text}}});
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(err) => return Err(err.into()),
        }
    }
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
        Err(err) => return Err(err.into()),
    }
    let pool = claim.labels().get(NODEPOOL).map_or("", String::as_str);
    let drain = match grace {
        Some(g) if g.is_zero() => "without waiting for its pods".to_owned(),
        Some(g) => format!("its pods drained for at most {g:?}"),
        None => "its pods drained as its terminationGracePeriod allows".to_owned(),
    };
    let why = if escalated {
        format!(
            " (it rebooted {} times within a day already)",
            reboot::REBOOTS_BEFORE_REPLACEMENT
        )
    } else {
        String::new()
    };
    let note = format!(
        "node {} has had condition {}={} (reason {:?}) for more than {:?} (its provider's repair rule){why}: \
         replacing it, NodeClaim {name} deleted, {drain}",
        managed.node.name_any(),
        found.condition_type,
        found.condition_status,
        found.reason,
        found.toleration,
    );
    tracing::info!(nodeclaim = %name, node = %managed.node.name_any(), nodepool = pool,
        condition = %found.condition_type, status = %found.condition_status, "replacing unhealthy node");
    let pods = nodeclaim::reschedulable_pods(ctx, claim);
    ctx.metrics
        .lifecycle
        .disrupted(claim, "unhealthy", "", pods);
    let reason = "NodeRepair";
    ctx.events
        .warning(managed.node.as_ref(), reason, &note)
        .await;
    ctx.events.warning(claim, reason, &note).await;
    Ok(())
}

/// Commits a reboot of `managed`'s node: the drain bound (or none) and the reboot's time in the
/// claim's annotations, then `Rebooting=True` (`RebootRequested`) and `DisruptionReason`
/// (`Unhealthy`) in its status, both guarded by its resourceVersion; the claim's controller
/// carries it out ([`crate::controllers::nodeclaim::reboot`]).
async fn commit_reboot(
    ctx: &Context,
    managed: &Managed,
    found: &repair::Repair,
    grace: Option<Duration>,
    now: Timestamp,
) -> Result<(), ControllerError> {
    let name = managed.claim.name_any();
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    // Read again: the cache may lag a reboot committed a moment ago.
    let Some(mut claim) = api.get_opt(&name).await? else {
        return Ok(());
    };
    if claim.metadata.deletion_timestamp.is_some() || claim.rebooting() {
        return Ok(());
    }
    let patch = json!({"metadata": {
        "resourceVersion": claim.resource_version(),
        "annotations": {
            REBOOT_GRACE_PERIOD: grace.map(duration::format),
            REBOOTS: reboot::with_reboot(&claim, now),
        },
    }});
    claim = match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(claim) => claim,
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
            return Ok(());
        }
        Err(err) => return Err(err.into()),
    };
    let message = format!("rebooting for {}/{}", found.condition_type, found.reason);
    nodeclaim::set(
        &mut claim,
        DISRUPTION_REASON,
        ConditionStatus::True,
        "Unhealthy",
        "Unhealthy",
    );
    nodeclaim::set(
        &mut claim,
        REBOOTING,
        ConditionStatus::True,
        REBOOT_REQUESTED,
        &message,
    );
    nodeclaim::persist_status(ctx, &mut claim).await?;
    let note = format!(
        "node {} has had condition {}={} (reason {:?}) for more than {:?} (its provider's repair rule): \
         rebooting it in place, its pods drained {}",
        managed.node.name_any(),
        found.condition_type,
        found.condition_status,
        found.reason,
        found.toleration,
        match grace {
            None => "without a bound".to_owned(),
            Some(g) if g.is_zero() => "not at all".to_owned(),
            Some(g) => format!("for at most {g:?}"),
        },
    );
    tracing::info!(nodeclaim = %name, node = %managed.node.name_any(),
        condition = %found.condition_type, "rebooting unhealthy node");
    ctx.events
        .warning(managed.node.as_ref(), "NodeRepair", &note)
        .await;
    ctx.events.warning(&claim, "NodeRepair", &note).await;
    Ok(())
}

/// A pod on the machine the drain could not evict now (`do-not-disrupt`, or a
/// PodDisruptionBudget that allows no eviction), as `namespace/name`.
fn pod_blocker(
    machine: &Machine<'_>,
    pdbs: &[Arc<k8s_openapi::api::policy::v1::PodDisruptionBudget>],
    now: Timestamp,
) -> Option<String> {
    machine.pods.iter().find_map(|pod| {
        let key = || format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
        if do_not_disrupt(pod, now) {
            return Some(format!("{} has {DO_NOT_DISRUPT}", key()));
        }
        candidates::blocking_pdb(pod, pdbs)
            .map(|pdb| format!("PodDisruptionBudget {pdb} prevents evicting {}", key()))
    })
}
