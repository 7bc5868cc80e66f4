//! Static NodePools (`spec.replicas`) on the real control plane: the pool holds its count through
//! a deletion and a scale-down, a pending pod that only it could take launches nothing, and a
//! drifted node of a pool at its node limit is terminated first (`TerminateFirstDrift`).

use std::time::Duration;

use capstan::api::NodeClaim;
use capstan_test_support::wait_until;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::lifecycle::{Host, Names, cluster, events, node_class, node_pool, node_pool_json};
use crate::provisioner::{claims, namespace, teardown};
use crate::provisioner_e2e::Pods;

/// Waits until `names`' run has `count` claims not being deleted, all initialized.
pub(crate) async fn wait_live(
    client: &kube::Client,
    names: &Names,
    host: &Host,
    count: usize,
) -> Vec<NodeClaim> {
    let result = wait_until(
        Duration::from_secs(90),
        &format!("{count} initialized claims"),
        || async {
            host.check_alive();
            let live: Vec<NodeClaim> = claims(client, names)
                .await
                .into_iter()
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .collect();
            let initialized = live.iter().all(|c| {
                c.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|k| k.type_ == "Initialized" && k.is_true())
                })
            });
            Ok::<_, kube::Error>((live.len() == count && initialized).then_some(live))
        },
    )
    .await;
    result.unwrap_or_else(|err| panic!("{err}\n{}", host.log_tail()))
}

#[tokio::test]
async fn a_static_pool_holds_its_count_and_never_provisions_for_pods() {
    let (cp, client) = cluster().await;
    let names = Names::new("static");
    let host = Host::start(cp, &names, &["--batch-idle-duration", "500ms"]);
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(&client, &names, &class, "kwok", json!({"maxCpu": 2})).await;
    let mut static_pool = node_pool_json(&names, &pool, &class);
    static_pool["spec"]["replicas"] = json!(2);
    node_pool(&client, static_pool).await;

    let first = wait_live(&client, &names, &host, 2).await;
    for claim in &first {
        assert_eq!(
            claim.labels().get("capstan.dev/nodeclass"),
            Some(&class),
            "Karpenter's node class label"
        );
    }

    // A node deleted from under the pool is replaced.
    let api = Api::<NodeClaim>::all(client.clone());
    api.delete(&first[0].name_any(), &DeleteParams::default())
        .await
        .unwrap();
    let replaced = wait_live(&client, &names, &host, 2).await;
    assert!(
        replaced.iter().all(|c| c.name_any() != first[0].name_any()),
        "the deleted claim is not among the live ones"
    );

    // Pending pods that select it and fit no node: nothing launches for them.
    let ns = namespace(cp, "static").await;
    Pods::new(&client, &names, &ns, "big")
        .cpu("3")
        .node_selector(json!({"karpenter.sh/nodepool": pool}))
        .create()
        .await;
    let said = wait_until(
        Duration::from_secs(30),
        "FailedScheduling from Capstan",
        || async {
            let found = events(&client, &ns, "big-0", "FailedScheduling")
                .await
                .into_iter()
                .any(|e| {
                    e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("static nodepool"))
                });
            Ok::<_, kube::Error>(found.then_some(()))
        },
    )
    .await;
    assert!(said.is_ok(), "{said:?}\n{}", host.log_tail());
    let live = wait_live(&client, &names, &host, 2).await;
    assert_eq!(live.len(), 2, "no claim for the pending pod");

    // Scaled down to one: one claim goes.
    Api::<capstan::api::NodePool>::all(client.clone())
        .patch(
            &pool,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    wait_live(&client, &names, &host, 1).await;

    // The pool goes first, so that nothing replaces the claims the teardown deletes.
    Api::<capstan::api::NodePool>::all(client.clone())
        .delete(&pool, &DeleteParams::default())
        .await
        .unwrap();
    teardown(&client, &names, &ns).await;
    host.check_alive();
}

/// Karpenter v1.15's `TerminateFirstDrift`: a static pool at its node limit (`limits.nodes` =
/// `replicas`) cannot launch a replacement first, so a drifted node is deleted first and the pool
/// refilled after — never more nodes than the limit.
#[tokio::test]
async fn a_drifted_static_node_at_its_node_limit_is_terminated_first() {
    let (cp, client) = cluster().await;
    let names = Names::new("static-tf");
    let host = Host::start(
        cp,
        &names,
        &[
            "--batch-idle-duration",
            "500ms",
            "--feature-gates",
            "TerminateFirstDrift=true",
        ],
    );
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(&client, &names, &class, "kwok", json!({"maxCpu": 2})).await;
    let mut static_pool = node_pool_json(&names, &pool, &class);
    static_pool["spec"]["replicas"] = json!(1);
    static_pool["spec"]["limits"] = json!({"nodes": "1"});
    node_pool(&client, static_pool).await;
    let [first] = wait_live(&client, &names, &host, 1)
        .await
        .try_into()
        .unwrap();

    // A new template label: the node drifts.
    Api::<capstan::api::NodePool>::all(client.clone())
        .patch(
            &pool,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"metadata": {"labels": {"tier": "two"}}}}})),
        )
        .await
        .unwrap();
    let api = Api::<NodeClaim>::all(client.clone());
    let most = std::sync::atomic::AtomicUsize::new(0);
    let replaced = wait_until(
        Duration::from_secs(120),
        "the drifted claim replaced",
        || async {
            host.check_alive();
            let all = claims(&client, &names).await;
            most.fetch_max(all.len(), std::sync::atomic::Ordering::SeqCst);
            let fresh = all.into_iter().find(|c| {
                c.name_any() != first.name_any()
                    && c.labels().get("tier").map(String::as_str) == Some("two")
            });
            Ok::<_, kube::Error>(fresh)
        },
    )
    .await
    .unwrap_or_else(|err| panic!("{err}\n{}", host.log_tail()));
    assert!(
        api.get_opt(&first.name_any()).await.unwrap().is_none() || {
            // Gone or going: it was deleted first.
            api.get(&first.name_any())
                .await
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_some()
        }
    );
    assert_eq!(
        most.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "more claims than the node limit at once"
    );
    assert!(
        host.log()
            .contains("terminating drifted static capacity first"),
        "{}",
        host.log_tail()
    );
    let live = wait_live(&client, &names, &host, 1).await;
    assert_eq!(live[0].name_any(), replaced.name_any());

    Api::<capstan::api::NodePool>::all(client.clone())
        .delete(&pool, &DeleteParams::default())
        .await
        .unwrap();
    teardown(&client, &names, &namespace(cp, "static-tf").await).await;
    host.check_alive();
}
