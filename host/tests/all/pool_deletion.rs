//! Deleting a NodePool deletes its NodeClaims, as Karpenter's owner references make Kubernetes'
//! garbage collector do: each claim drains and terminates as usual, and nothing is left at the
//! provider. Dynamic and static pools alike, and claims that predate the owner reference get it.

use std::time::Duration;

use capstan::api::{NodeClaim, NodePool};
use capstan_test_support::wait_until;
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::lifecycle::{
    Host, Names, claim, claim_json, cluster, node_class, node_pool, node_pool_json,
};
use crate::provisioner::{claims, namespace, teardown};
use crate::provisioner_e2e::{Pods, wait_running};
use crate::static_pool::wait_live;

/// The UID of the owner reference of kind NodePool on `claim`, if any.
fn pool_owner(claim: &NodeClaim) -> Option<(String, String)> {
    claim
        .owner_references()
        .iter()
        .find(|o| o.kind == "NodePool" && o.api_version == "karpenter.sh/v1")
        .map(|o| (o.name.clone(), o.uid.clone()))
}

#[tokio::test]
async fn deleting_a_pool_drains_and_removes_its_claims_and_machines() {
    let (cp, client) = cluster().await;
    let names = Names::new("pooldel");
    let host = Host::start(cp, &names, &["--batch-idle-duration", "500ms"]);
    let class = names.name("nc");
    let (dynamic, fixed) = (names.name("dynamic"), names.name("static"));
    node_class(&client, &names, &class, "kwok", json!({"maxCpu": 2})).await;
    node_pool(&client, node_pool_json(&names, &dynamic, &class)).await;
    let mut static_pool = node_pool_json(&names, &fixed, &class);
    static_pool["spec"]["replicas"] = json!(1);
    node_pool(&client, static_pool).await;

    let ns = namespace(cp, "pooldel").await;
    Pods::new(&client, &names, &ns, "web")
        .count(3)
        .cpu("900m")
        .node_selector(json!({"karpenter.sh/nodepool": dynamic}))
        .create()
        .await;
    wait_running(&client, &host, &ns, 3, Duration::from_secs(90)).await;
    // A claim made without an owner reference (by hand, or before Capstan set them) gets one.
    let by_hand = names.name("by-hand");
    claim(&client, claim_json(&names, &by_hand, &dynamic, &class)).await;

    let pools = Api::<NodePool>::all(client.clone());
    let uids = [
        (dynamic.clone(), pools.get(&dynamic).await.unwrap().uid().unwrap()),
        (fixed.clone(), pools.get(&fixed).await.unwrap().uid().unwrap()),
    ];
    let owned = wait_until(
        Duration::from_secs(60),
        "every claim owned by its pool",
        || async {
            let all = claims(&client, &names).await;
            let ok = all.len() >= 4
                && all.iter().all(|c| {
                    let pool = c.labels().get("karpenter.sh/nodepool").cloned();
                    pool_owner(c).is_some_and(|(name, uid)| {
                        Some(&name) == pool.as_ref()
                            && uids.iter().any(|(n, u)| *n == name && *u == uid)
                    })
                });
            Ok::<_, kube::Error>(ok.then_some(all))
        },
    )
    .await
    .unwrap_or_else(|err| panic!("{err}\n{}", host.log_tail()));
    let live = wait_live(&client, &names, &host, owned.len()).await;
    let provider_ids: Vec<String> = live
        .iter()
        .filter_map(|c| c.status.as_ref().and_then(|s| s.provider_id.clone()))
        .collect();
    assert_eq!(provider_ids.len(), live.len(), "every claim launched");

    // Both pools go, with the default (background) propagation `kubectl delete` uses.
    for pool in [&dynamic, &fixed] {
        pools.delete(pool, &DeleteParams::default()).await.unwrap();
    }
    let nodes = Api::<Node>::all(client.clone());
    let gone = wait_until(
        Duration::from_secs(120),
        "no claim and no machine left",
        || async {
            host.check_alive();
            let left = claims(&client, &names).await;
            let machines = nodes
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|n| {
                    n.spec
                        .as_ref()
                        .and_then(|s| s.provider_id.as_ref())
                        .is_some_and(|id| provider_ids.contains(id))
                })
                .count();
            Ok::<_, kube::Error>((left.is_empty() && machines == 0).then_some(()))
        },
    )
    .await;
    if let Err(err) = gone {
        let left: Vec<String> = claims(&client, &names)
            .await
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        panic!("{err}: claims left {left:?}\n{}", host.log_tail());
    }
    // Nothing re-created claims for the deleted pools meanwhile, and none come later.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(claims(&client, &names).await.is_empty());
    teardown(&client, &names, &ns).await;
    host.check_alive();
}
