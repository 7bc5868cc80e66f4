//! The metrics controller: keeps the gauges of what the cluster holds
//! ([`crate::metrics::state`]) current, and observes pod startup and binding
//! ([`crate::metrics::scheduler`]) as pods change.
//!
//! The gauges are rebuilt from one view of the cluster state at most once a second after a
//! change of a node, pod, claim or pool, and every 10 s regardless (node lifetimes move on).
//! Each rebuild replaces every series, so nothing deleted lingers.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::nodepool::DisruptionReason;
use crate::controllers::Context;
use crate::controllers::disruption::budgets;
use crate::controllers::disruption::candidates::{machines, pool_counts};
use crate::metrics::state;
use crate::state::View;

/// How often the gauges are rebuilt at most.
const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// How often the gauges are rebuilt at least.
const MAX_INTERVAL: Duration = Duration::from_secs(10);

/// Allowed disruptions per pool and reason, by the pools' budgets (Karpenter's
/// `karpenter_nodepools_allowed_disruptions`); a pool without a budget for a reason may
/// disrupt every node.
pub fn allowed_disruptions(view: &View, now: Timestamp) -> Vec<(String, String, usize)> {
    let all = machines(&view.claims, &view.nodes, &view.pods);
    let counts = pool_counts(&view.claims, &all);
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
    let live: HashSet<&str> = view
        .pods
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    ctx.metrics.scheduler.retain_pods(&live);
    let pools: HashSet<String> = view.pools.iter().map(|p| p.name_any()).collect();
    ctx.metrics.exclusive(|| {
        ctx.metrics.state.replace(&samples);
        ctx.metrics.cloudprovider.retain_catalogs(&pools);
    });
}

/// Runs the controller until it stops.
pub async fn run(ctx: Arc<Context>) {
    let mut pods = ctx.state.pods.subscribe().boxed();
    let changes = futures::stream::select_all([
        ctx.state.nodes.subscribe().map(|_| ()).boxed(),
        ctx.state.claims.subscribe().map(|_| ()).boxed(),
        ctx.state.pools.subscribe().map(|_| ()).boxed(),
    ]);
    let mut changes = changes;
    for pod in ctx.state.pods.store().state() {
        ctx.metrics.scheduler.pod_changed(&pod);
    }
    refresh(&ctx);
    let mut dirty = false;
    let mut tick = tokio::time::interval(MIN_INTERVAL);
    let mut last = tokio::time::Instant::now();
    loop {
        tokio::select! {
            pod = pods.next() => match pod {
                Some(pod) => {
                    ctx.metrics.scheduler.pod_changed(&pod);
                    dirty = true;
                }
                None => return,
            },
            change = changes.next() => match change {
                Some(()) => dirty = true,
                None => return,
            },
            _ = tick.tick() => {
                if dirty || last.elapsed() >= MAX_INTERVAL {
                    refresh(&ctx);
                    dirty = false;
                    last = tokio::time::Instant::now();
                }
            }
        }
    }
}
