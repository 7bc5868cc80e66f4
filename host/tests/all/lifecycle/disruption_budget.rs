//! Termination honours PodDisruptionBudgets and is bounded by `terminationGracePeriod`: a pod
//! covered by a `maxUnavailable: 0` PDB keeps its (kwok) Node while the budget blocks (429s
//! are retried, `FailedDraining` Events recorded); relaxing the budget lets the drain finish;
//! with `terminationGracePeriod: 10s` the pod (of `terminationGracePeriodSeconds: 0`) is deleted
//! once it is over and termination completes.

use std::time::{Duration, Instant};

use capstan_test_support::wait_until;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::*;

const GRACE: Duration = Duration::from_secs(10);

/// A registered, initialized kwok claim; returns its Node's name.
pub(super) async fn launch(client: &Client, host: &Host, name: &str) -> String {
    let claim = wait_condition(
        client,
        host,
        name,
        "Initialized",
        "True",
        None,
        Duration::from_secs(120),
    )
    .await;
    claim.status.and_then(|s| s.node_name).unwrap()
}

/// A running pod `app` on `node` in `ns` with `terminationGracePeriodSeconds: grace`, covered
/// by a PDB with `maxUnavailable: 0`.
pub(super) async fn protected_pod(client: &Client, ns: &str, node: &str, grace: i64) {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "app", "labels": {"app": "protected"}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "app", "image": "fake"}],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "protect"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "protected"}}},
    }))
    .unwrap();
    Api::<PodDisruptionBudget>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pdb)
        .await
        .unwrap();
    wait_until(Duration::from_secs(60), "pod running", || async {
        let p = pods.get("app").await?;
        Ok::<_, kube::Error>(
            (p.status.and_then(|s| s.phase).as_deref() == Some("Running")).then_some(()),
        )
    })
    .await
    .unwrap();
    // The disruption controller has seen the pod: no disruption allowed.
    let pdbs = Api::<PodDisruptionBudget>::namespaced(client.clone(), ns);
    let observed = wait_until(Duration::from_secs(60), "PDB observed", || async {
        let pdb = pdbs.get("protect").await?;
        Ok::<_, kube::Error>(
            pdb.status
                .filter(|s| {
                    s.observed_generation == Some(1)
                        && s.current_healthy == 1
                        && s.disruptions_allowed == 0
                })
                .map(|_| ()),
        )
    })
    .await;
    if let Err(err) = observed {
        let pdb = pdbs.get("protect").await.unwrap();
        let pod = pods.get("app").await.unwrap();
        panic!("{err}\nPDB: {:#?}\npod: {:#?}", pdb.status, pod.status);
    }
}

#[tokio::test]
async fn termination_waits_for_the_pdb_and_is_bounded_by_the_grace_period() {
    let (cp, client) = cluster().await;
    let names = Names::new("pdb");
    let host = Host::start(cp, &names, &[]);
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(&client, &names, &class, "kwok", json!({})).await;
    node_pool(&client, node_pool_json(&names, &pool, &class)).await;

    let (waits, bounded) = (names.name("waits"), names.name("bounded"));
    claim(&client, claim_json(&names, &waits, &pool, &class)).await;
    let mut graced = claim_json(&names, &bounded, &pool, &class);
    graced["spec"]["terminationGracePeriod"] = json!("10s");
    claim(&client, graced).await;
    let waits_node = launch(&client, &host, &waits).await;
    let bounded_node = launch(&client, &host, &bounded).await;

    let waits_ns = cp.create_namespace_unique("pdb-waits").await.unwrap();
    let bounded_ns = cp.create_namespace_unique("pdb-bounded").await.unwrap();
    protected_pod(&client, &waits_ns, &waits_node, 0).await;
    protected_pod(&client, &bounded_ns, &bounded_node, 0).await;

    let claims = Api::<NodeClaim>::all(client.clone());
    let deleted = Instant::now();
    claims
        .delete(&waits, &DeleteParams::default())
        .await
        .unwrap();
    claims
        .delete(&bounded, &DeleteParams::default())
        .await
        .unwrap();

    // Blocked: the eviction is refused (429) and retried; pods and Nodes stay.
    wait_event(&client, &waits_ns, "app", "FailedDraining").await;
    wait_event(&client, &bounded_ns, "app", "FailedDraining").await;
    tokio::time::sleep(Duration::from_secs(5).saturating_sub(deleted.elapsed())).await;
    let nodes = Api::<Node>::all(client.clone());
    for (ns, node, claim) in [
        (&waits_ns, &waits_node, &waits),
        (&bounded_ns, &bounded_node, &bounded),
    ] {
        assert!(
            nodes.get_opt(node).await.unwrap().is_some(),
            "Node {node} drained despite the PDB"
        );
        assert!(claims.get_opt(claim).await.unwrap().is_some());
        let pod = Api::<Pod>::namespaced(client.clone(), ns)
            .get_opt("app")
            .await
            .unwrap();
        assert!(
            pod.is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
            "pod in {ns} was evicted despite the PDB"
        );
    }
    let failed = events(&client, &waits_ns, "app", "FailedDraining").await;
    assert!(
        failed[0]
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("eviction blocked"),
        "{failed:?}"
    );

    // The budget allows a disruption (`minAvailable: 0`: a bare pod has no controller scale for
    // `maxUnavailable` to count against): the drain completes.
    let relaxed = Instant::now();
    Api::<PodDisruptionBudget>::namespaced(client.clone(), &waits_ns)
        .patch(
            "protect",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"maxUnavailable": null, "minAvailable": 0}})),
        )
        .await
        .unwrap();
    wait_claim_gone(&client, &host, &waits, Duration::from_secs(60)).await;
    let waits_after = relaxed.elapsed();
    wait_event(&client, &waits_ns, "app", "Evicted").await;
    assert!(nodes.get_opt(&waits_node).await.unwrap().is_none());

    // The grace period runs out: the pod is deleted and termination completes.
    wait_claim_gone(&client, &host, &bounded, Duration::from_secs(60)).await;
    let bounded_after = deleted.elapsed();
    println!(
        "PDB relaxed → claim gone in {waits_after:?}; terminationGracePeriod {GRACE:?} → claim gone after {bounded_after:?}"
    );
    // The deadline counts from deletionTimestamp, which has whole seconds: up to 1 s early.
    assert!(
        bounded_after >= GRACE - Duration::from_secs(1),
        "terminated before the grace period: {bounded_after:?}"
    );
    wait_event(&client, &bounded_ns, "app", "Disrupted").await;
    assert!(
        Api::<Pod>::namespaced(client.clone(), &bounded_ns)
            .get_opt("app")
            .await
            .unwrap()
            .is_none()
    );
    assert!(nodes.get_opt(&bounded_node).await.unwrap().is_none());
    host.check_alive();
    cleanup(&client, &names).await;
}
