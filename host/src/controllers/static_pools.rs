//! Static NodePools (`spec.replicas`, Karpenter's static capacity): such a pool keeps exactly
//! that many NodeClaims whatever pods are pending, and pending pods never make it launch (the
//! provisioner leaves it out: [`not_for_dynamic_provisioning`]).
//!
//! Every [`INTERVAL`], for each managed static pool: fewer live claims than `replicas` → new ones
//! from the template (every instance type the pool can launch, cheapest first:
//! [`Snapshot::static_claim`]); more → the surplus is deleted in Karpenter's order ([`Removal`]):
//! claims not launched, then empty nodes, then by disruption cost, nodes with a `do-not-disrupt`
//! pod last. `spec.limits.nodes` caps the replicas. A claim being deleted, or replaced by a
//! drift ([`super::disruption`]'s static drift), does not count, so a deleted node is replaced
//! at once (its replacement launches while it drains).
//!
//! [`not_for_dynamic_provisioning`]: crate::rules::snapshot::not_for_dynamic_provisioning

use std::sync::Arc;
use std::time::Duration;

use kube::api::PostParams;
use kube::{Api, ResourceExt};

use super::nodeclaim;
use super::provisioner::instance_types::FromProviders;
use crate::api::labels::NODEPOOL;
use crate::api::{NodeClaim, NodePool};
use crate::controllers::{Context, ControllerError};
use crate::rules::candidates;
use crate::rules::claims::provider_id;
use crate::rules::consolidation::cost;
use crate::rules::new_claim::claim_for;
use crate::rules::pods::{do_not_disrupt, owned_by_daemonset};
use crate::rules::snapshot::Snapshot;
use crate::scheduling::convert::is_terminal;
use crate::scheduling::quantity;
use k8s_openapi::api::core::v1::Pod;

/// How often static pools are checked.
pub const INTERVAL: Duration = Duration::from_secs(2);

/// Runs forever.
pub async fn run(ctx: Arc<Context>) {
    let mut ticker = tokio::time::interval(INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let snapshot = crate::controllers::provisioner::snapshot::take(&ctx);
        for pool in snapshot.pools.iter().filter(|p| p.spec.replicas.is_some()) {
            if let Err(err) = reconcile(&ctx, &snapshot, pool).await {
                tracing::warn!(nodepool = %pool.name_any(), error = %err, "static nodepool");
            }
        }
    }
}

/// How many claims a static pool keeps: `spec.replicas`, capped by `spec.limits.nodes` (the only
/// limit a static pool takes, as in Karpenter; an unreadable limit caps nothing).
fn target(pool: &NodePool) -> usize {
    let replicas = usize::try_from(pool.spec.replicas.unwrap_or(0)).unwrap_or(0);
    node_limit(pool).map_or(replicas, |limit| replicas.min(limit))
}

/// A pool's `spec.limits.nodes`, if it has a readable one.
pub fn node_limit(pool: &NodePool) -> Option<usize> {
    pool.spec
        .limits
        .as_ref()?
        .get("nodes")
        .and_then(|q| quantity::parse_units(q.as_str()).ok())
        .map(|n| usize::try_from(n.max(0)).unwrap_or(0))
}

/// Where a claim stands in a static pool's scale-down order (Karpenter's): claims not launched
/// yet, then empty nodes (DaemonSet pods only), then the others by disruption cost (eviction cost
/// of their pods × lifetime left), nodes with a `do-not-disrupt` pod last; the youngest first
/// among equals.
#[derive(Debug, PartialEq, PartialOrd)]
struct Removal {
    launched: bool,
    busy: bool,
    do_not_disrupt: bool,
    cost: f64,
    age: std::cmp::Reverse<Option<i64>>,
}

/// [`Removal`] of `claim`, whose node runs `pods` (not finished).
fn removal(claim: &NodeClaim, pods: &[&Pod], now: k8s_openapi::jiff::Timestamp) -> Removal {
    let daemon = |p: &&Pod| owned_by_daemonset(p);
    let do_not_disrupt = pods.iter().any(|p| do_not_disrupt(p, now));
    let busy = do_not_disrupt || !pods.iter().all(daemon);
    Removal {
        launched: provider_id(claim).is_some(),
        busy,
        do_not_disrupt,
        cost: if busy {
            cost::disruption_cost(
                pods.iter().copied(),
                crate::rules::consolidation::cost::claim_lifetime_remaining(claim, now),
            )
        } else {
            0.0
        },
        age: std::cmp::Reverse(
            claim
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_millisecond()),
        ),
    }
}

/// Brings one static pool to its replica count (within its node limit).
async fn reconcile(
    ctx: &Context,
    snapshot: &Snapshot,
    pool: &NodePool,
) -> Result<(), ControllerError> {
    let name = pool.name_any();
    let replicas = usize::try_from(pool.spec.replicas.unwrap_or(0)).unwrap_or(0);
    let want = target(pool);
    let live: Vec<&NodeClaim> = snapshot
        .claims
        .iter()
        .map(AsRef::as_ref)
        .filter(|c| {
            c.metadata.deletion_timestamp.is_none()
                && c.labels().get(NODEPOOL).is_some_and(|p| *p == name)
        })
        .collect();
    // Every claim the pool holds counts against its node limit, the ones being replaced or
    // deleted too.
    let held = snapshot
        .claims
        .iter()
        .filter(|c| c.labels().get(NODEPOOL).is_some_and(|p| *p == name))
        .count();
    let room = node_limit(pool).map_or(usize::MAX, |limit| limit.saturating_sub(held));
    // A claim being replaced (static drift) no longer counts: its replacement does.
    let live: Vec<&NodeClaim> = live
        .into_iter()
        .filter(|c| !candidates::disrupting(c))
        .collect();
    let have = live.len();
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
        for _ in 0..(want - have).min(room) {
            let claim = claim_for(&new, pool, &ctx.selector.equality_labels());
            let made = api.create(&PostParams::default(), &claim).await?;
            ctx.state.claims.created(made.clone());
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
        }
    } else if live.len() > want {
        let now = k8s_openapi::jiff::Timestamp::now();
        let pods_on = |claim: &NodeClaim| -> Vec<&Pod> {
            let node = claim.status.as_ref().and_then(|s| s.node_name.as_deref());
            snapshot
                .bound
                .iter()
                .map(AsRef::as_ref)
                .filter(|p| {
                    node.is_some() && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == node
                })
                .filter(|p| !is_terminal(p))
                .collect()
        };
        let mut surplus: Vec<(Removal, &NodeClaim)> = live
            .iter()
            .map(|claim| (removal(claim, &pods_on(claim), now), *claim))
            .collect();
        surplus.sort_by(|(a, _), (b, _)| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        for (_, claim) in surplus.iter().take(surplus.len() - want) {
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

    fn claim(name: &str, created: &str, launched: bool) -> NodeClaim {
        let mut claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "c"}, "requirements": []},
        }))
        .unwrap();
        if launched {
            claim.status = Some(
                serde_json::from_value(json!({"providerID": format!("kwok://{name}")})).unwrap(),
            );
        }
        claim
    }

    fn pod(daemon: bool, do_not_disrupt: bool) -> Pod {
        let owners = if daemon {
            json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u", "controller": true}])
        } else {
            json!([])
        };
        let annotations = if do_not_disrupt {
            json!({"karpenter.sh/do-not-disrupt": "true"})
        } else {
            json!({})
        };
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "ownerReferences": owners, "annotations": annotations},
            "status": {"phase": "Running"},
        }))
        .unwrap()
    }

    #[test]
    fn scale_down_takes_unlaunched_then_empty_then_cheapest_and_do_not_disrupt_last() {
        let now = k8s_openapi::jiff::Timestamp::now();
        let hour_ago = (now - k8s_openapi::jiff::SignedDuration::from_hours(1)).to_string();
        let minute_ago = (now - k8s_openapi::jiff::SignedDuration::from_mins(1)).to_string();
        let (daemon, plain, held) = (pod(true, false), pod(false, false), pod(false, true));
        let mut order = [
            (
                "held",
                removal(&claim("held", &hour_ago, true), &[&held], now),
            ),
            (
                "two",
                removal(&claim("two", &hour_ago, true), &[&plain, &plain], now),
            ),
            (
                "one",
                removal(&claim("one", &hour_ago, true), &[&plain], now),
            ),
            (
                "empty",
                removal(&claim("empty", &hour_ago, true), &[&daemon], now),
            ),
            (
                "pending",
                removal(&claim("pending", &hour_ago, false), &[], now),
            ),
            (
                "younger-one",
                removal(&claim("younger-one", &minute_ago, true), &[&plain], now),
            ),
        ];
        order.sort_by(|(_, a), (_, b)| a.partial_cmp(b).unwrap());
        let names: Vec<&str> = order.iter().map(|(n, _)| *n).collect();
        // Among equal pods, the node with less of its lifetime left costs less to disrupt.
        assert_eq!(
            names,
            ["pending", "empty", "one", "younger-one", "two", "held"]
        );
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
