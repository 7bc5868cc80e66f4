//! Static NodePools (`spec.replicas`, Karpenter's static capacity): such a pool keeps exactly
//! that many NodeClaims whatever pods are pending, and pending pods never make it launch (the
//! provisioner leaves it out: [`not_for_dynamic_provisioning`]).
//!
//! Every [`INTERVAL`], for each managed static pool: fewer live claims than `replicas` → new ones
//! from the template (every instance type the pool can launch, cheapest first:
//! [`Snapshot::static_claim`]); more → the surplus is deleted, the claims whose nodes run the
//! fewest pods first, then the youngest. A claim being deleted does not count, so a deleted node
//! is replaced at once (its replacement launches while it drains).
//!
//! [`not_for_dynamic_provisioning`]: super::provisioner::snapshot::not_for_dynamic_provisioning

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::api::PostParams;
use kube::{Api, ResourceExt};

use super::nodeclaim;
use super::provisioner::claim_for;
use super::provisioner::instance_types::FromProviders;
use super::provisioner::snapshot::Snapshot;
use crate::api::labels::NODEPOOL;
use crate::api::{NodeClaim, NodePool};
use crate::controllers::{Context, ControllerError};
use crate::scheduling::quantity;

/// How often static pools are checked.
pub const INTERVAL: Duration = Duration::from_secs(2);

/// How long a claim this controller created counts before the cache shows it.
const UNSEEN_GRACE: Duration = Duration::from_secs(30);

/// Claims created lately, by pool, until the cache has them (so one is not created twice).
#[derive(Debug, Default)]
struct Created(Mutex<HashMap<String, Vec<(String, Instant)>>>);

impl Created {
    /// Records `claim` as created for `pool`.
    fn record(&self, pool: &str, claim: String) {
        if let Ok(mut created) = self.0.lock() {
            created
                .entry(pool.to_owned())
                .or_default()
                .push((claim, Instant::now()));
        }
    }

    /// How many of `pool`'s recent creations `live` does not show yet; forgets the ones it shows
    /// and the old ones.
    fn unseen(&self, pool: &str, live: &[&NodeClaim]) -> usize {
        let Ok(mut created) = self.0.lock() else {
            return 0;
        };
        let Some(recent) = created.get_mut(pool) else {
            return 0;
        };
        recent.retain(|(name, at)| {
            at.elapsed() < UNSEEN_GRACE && !live.iter().any(|c| c.name_any() == *name)
        });
        recent.len()
    }
}

/// Runs forever.
pub async fn run(ctx: Arc<Context>) {
    let created = Created::default();
    let mut ticker = tokio::time::interval(INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let snapshot = Snapshot::take(&ctx);
        for pool in snapshot.pools.iter().filter(|p| p.spec.replicas.is_some()) {
            if let Err(err) = reconcile(&ctx, &snapshot, pool, &created).await {
                tracing::warn!(nodepool = %pool.name_any(), error = %err, "static nodepool");
            }
        }
    }
}

/// How many claims a static pool keeps: `spec.replicas`, capped by `spec.limits.nodes` (the only
/// limit a static pool takes, as in Karpenter; an unreadable limit caps nothing).
fn target(pool: &NodePool) -> usize {
    let replicas = usize::try_from(pool.spec.replicas.unwrap_or(0)).unwrap_or(0);
    let limit = pool
        .spec
        .limits
        .as_ref()
        .and_then(|l| l.get("nodes"))
        .and_then(|q| quantity::parse_units(q.as_str()).ok())
        .and_then(|n| usize::try_from(n.max(0)).ok());
    limit.map_or(replicas, |limit| replicas.min(limit))
}

/// Brings one static pool to its replica count (within its node limit).
async fn reconcile(
    ctx: &Context,
    snapshot: &Snapshot,
    pool: &NodePool,
    created: &Created,
) -> Result<(), ControllerError> {
    let name = pool.name_any();
    let replicas = usize::try_from(pool.spec.replicas.unwrap_or(0)).unwrap_or(0);
    let want = target(pool);
    let live: Vec<&NodeClaim> = snapshot
        .claims
        .iter()
        .filter(|c| {
            c.metadata.deletion_timestamp.is_none()
                && c.labels().get(NODEPOOL).is_some_and(|p| *p == name)
        })
        .collect();
    let have = live.len() + created.unseen(&name, &live);
    if have < replicas && have >= want {
        ctx.events
            .normal(
                pool,
                "NodeLimitReached",
                format!("nodepool node limit reached: {have} of {replicas} replicas"),
            )
            .await;
    }
    if have < want {
        let source = FromProviders {
            ctx,
            cache: &ctx.instance_types,
        };
        let new = match snapshot
            .static_claim(&source, pool)
            .await
            .map_err(|err| err.to_string())
            .and_then(|answer| answer)
        {
            Ok(new) => new,
            Err(why) => {
                ctx.events
                    .warning(
                        pool,
                        "StaticCapacityUnavailable",
                        format!("cannot add a node to reach {want} replicas: {why}"),
                    )
                    .await;
                return Ok(());
            }
        };
        let api: Api<NodeClaim> = Api::all(ctx.client.clone());
        for _ in have..want {
            let claim = claim_for(&new, pool, &ctx.selector.equality_labels());
            let made = api.create(&PostParams::default(), &claim).await?;
            ctx.metrics.lifecycle.created("provisioned", &name, false);
            tracing::info!(nodepool = %name, nodeclaim = %made.name_any(), replicas = want, "static nodepool: created nodeclaim");
            ctx.events
                .normal(
                    &made,
                    "Provisioned",
                    format!(
                        "static capacity of nodepool {name} ({want} replicas), {} instance type option(s), cheapest {}",
                        new.instance_type_options.len(),
                        new.cheapest_offering.instance_type
                    ),
                )
                .await;
            created.record(&name, made.name_any());
        }
    } else if live.len() > want {
        let pods_on = |claim: &NodeClaim| {
            let node = claim.status.as_ref().and_then(|s| s.node_name.as_deref());
            snapshot
                .bound
                .iter()
                .filter(|p| {
                    node.is_some() && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == node
                })
                .count()
        };
        let mut surplus = live;
        surplus.sort_by_cached_key(|c| {
            (
                pods_on(c),
                std::cmp::Reverse(c.metadata.creation_timestamp.as_ref().map(|t| t.0)),
            )
        });
        for claim in surplus.iter().take(surplus.len() - want) {
            tracing::info!(nodepool = %name, nodeclaim = %claim.name_any(), replicas = want, "static nodepool: deleting a surplus nodeclaim");
            ctx.events
                .normal(
                    *claim,
                    "Disrupted",
                    format!("nodepool {name} scaled down to {want} replicas"),
                )
                .await;
            nodeclaim::delete(ctx, claim).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pool(replicas: i64, limits: serde_json::Value) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "p"},
            "spec": {
                "replicas": replicas,
                "limits": limits,
                "template": {"spec": {"nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "c"}, "requirements": []}},
            },
        }))
        .unwrap()
    }

    #[test]
    fn the_node_limit_caps_the_replicas() {
        assert_eq!(target(&pool(10, json!({"nodes": "5"}))), 5);
        assert_eq!(target(&pool(3, json!({"nodes": "5"}))), 3);
        assert_eq!(target(&pool(10, json!({"cpu": "5"}))), 10);
        assert_eq!(target(&pool(10, json!(null))), 10);
        assert_eq!(target(&pool(10, json!({"nodes": "0"}))), 0);
    }
}
