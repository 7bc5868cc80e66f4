//! The metrics controller: keeps the gauges of what the cluster holds
//! ([`crate::metrics::state`]) current, and observes pod startup and binding
//! ([`crate::metrics::scheduler`]) as pods change.
//!
//! The gauges are rebuilt from one view of the cluster state when a scrape reads them, unless
//! they were built from the same state (the same [`crate::state::ClusterState::generation`])
//! less than 10 s before: a cluster at rest costs nothing between scrapes, however large, and a
//! scrape never reads gauges older than the state it could see. Each rebuild replaces every
//! series, so nothing deleted lingers.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::nodepool::DisruptionReason;
use crate::controllers::Context;
use crate::metrics::state;
use crate::rules::budgets;
use crate::rules::candidates::Joined;
use crate::state::View;

/// How long gauges built from an unchanged state serve scrapes (node lifetimes and budget
/// schedules move on with the clock); also how often the memory of gone pods is pruned.
const MAX_INTERVAL: Duration = Duration::from_secs(10);

/// Allowed disruptions per pool and reason, by the pools' budgets (Karpenter's
/// `karpenter_nodepools_allowed_disruptions`); a pool without a budget for a reason may
/// disrupt every node.
pub fn allowed_disruptions(view: &View, now: Timestamp) -> Vec<(String, String, usize)> {
    let counts = Joined::of(view).counts;
    let mut out = Vec::new();
    for pool in &view.pools {
        let name = pool.name_any();
        let (total, disrupting) = counts.get(&name).copied().unwrap_or_default();
        for reason in [
            DisruptionReason::Empty,
            DisruptionReason::Drifted,
            DisruptionReason::Underutilized,
        ] {
            let Ok(allowed) = budgets::allowed(
                &pool.spec.disruption.budgets,
                reason,
                total,
                disrupting,
                now,
            ) else {
                continue;
            };
            let allowed = allowed.min(total.saturating_sub(disrupting));
            out.push((name.clone(), format!("{reason:?}"), allowed));
        }
    }
    out
}

/// Rebuilds the gauges from the state now.
pub fn refresh(ctx: &Context) {
    let view = ctx.state.view();
    let allowed = allowed_disruptions(&view, Timestamp::now());
    let samples = state::samples(&view, &allowed);
    let pools: HashSet<String> = view.pools.iter().map(|p| p.name_any()).collect();
    ctx.metrics.exclusive(|| {
        ctx.metrics.state.replace(&samples);
        ctx.metrics.cloudprovider.retain_catalogs(&pools);
    });
}

/// Drops the scheduler metrics' memory of pods no longer in the cluster.
fn forget_gone_pods(ctx: &Context) {
    let pods = ctx.state.pods.store().state();
    let live: HashSet<&str> = pods
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    ctx.metrics.scheduler.retain_pods(&live);
}

/// What the gauges were last built from: the cluster state's generation, and when.
#[derive(Debug, Clone, Copy)]
struct Built {
    generation: u64,
    at: Instant,
}

/// Rebuilds the gauges unless they were built from this very state less than
/// [`MAX_INTERVAL`] ago.
fn refresh_if_stale(ctx: &Context, built: &Mutex<Option<Built>>) {
    let mut built = built.lock().unwrap_or_else(PoisonError::into_inner);
    let generation = ctx.state.generation();
    let fresh = built.is_some_and(|b| b.generation == generation && b.at.elapsed() < MAX_INTERVAL);
    if !fresh {
        refresh(ctx);
        *built = Some(Built {
            generation,
            at: Instant::now(),
        });
    }
}

/// Runs the controller until it stops.
pub async fn run(ctx: Arc<Context>) {
    let mut pods = ctx.state.pods.subscribe().boxed();
    for pod in ctx.state.pods.store().state() {
        ctx.metrics.scheduler.pod_changed(&pod);
    }
    let built = Arc::new(Mutex::new(None));
    refresh_if_stale(&ctx, &built);
    ctx.metrics.on_scrape({
        let ctx = Arc::downgrade(&ctx);
        move || {
            if let Some(ctx) = ctx.upgrade() {
                refresh_if_stale(&ctx, &built);
            }
        }
    });
    let mut prune = tokio::time::interval(MAX_INTERVAL);
    loop {
        tokio::select! {
            pod = pods.next() => match pod {
                Some(pod) => ctx.metrics.scheduler.pod_changed(&pod),
                None => return,
            },
            _ = prune.tick() => forget_gone_pods(&ctx),
        }
    }
}
