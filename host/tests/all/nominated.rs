//! A pod nominated by preemption (`status.nominatedNodeName`) waits for its victims to leave the
//! node kube-scheduler chose; Capstan launches nothing for it, while an otherwise identical pod
//! that is not nominated gets a NodeClaim.
//!
//! Both pods first select a label no node has yet, so neither is provisioned for; one is then
//! nominated through the status subresource and only then does a pool with the label appear.
//! They run under a PriorityClass with `preemptionPolicy: Never`, so kube-scheduler, which
//! clears the nomination of a pod that may preempt but finds no victims, leaves it alone.

use std::time::Duration;

use capstan_test_support::wait_until;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::lifecycle::{Host, Names, cluster, events, node_class, node_pool};
use crate::provisioner::{claims, namespace, teardown};
use crate::provisioner_e2e::{Pods, pool_json, wait_running};

/// A label only the test's pool puts on its nodes.
const GROUP: &str = "e2e.capstan.dev/group";

#[tokio::test]
async fn a_nominated_pod_gets_no_nodeclaim_and_its_twin_does() {
    let (cp, client) = cluster().await;
    let names = Names::new("nominated");
    let host = Host::start(cp, &names, &["--batch-idle-duration", "300ms"]);
    let (class, pool) = (names.name("nc"), names.name("pool"));
    // Nodes of 2 CPUs hold one of the 1.5-CPU pods: the twin's node has no room for the other.
    node_class(
        &client,
        &names,
        &class,
        "kwok",
        json!({"maxCpu": 2, "families": ["c"]}),
    )
    .await;
    let priority = names.name("never");
    let classes = Api::<PriorityClass>::all(client.clone());
    let never: PriorityClass = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": priority},
        "value": 0,
        "preemptionPolicy": "Never",
    }))
    .unwrap();
    classes
        .create(&PostParams::default(), &never)
        .await
        .unwrap();
    let ns = namespace(cp, "nominated").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);

    let create = |prefix: &'static str| {
        Pods::new(&client, &names, &ns, prefix)
            .cpu("1500m")
            .node_selector(json!({GROUP: names.run}))
            .spec(json!({"priorityClassName": priority}))
            .create()
    };
    create("nominated").await;
    create("twin").await;
    // kube-scheduler finds no node with the label for either.
    for pod in ["nominated-0", "twin-0"] {
        let marked = wait_until(Duration::from_secs(60), "PodScheduled=False", || async {
            let p = pods.get(pod).await?;
            let unschedulable = p
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable"));
            Ok::<_, kube::Error>(unschedulable.then_some(()))
        })
        .await;
        assert!(marked.is_ok(), "{pod}: {marked:?}");
    }
    pods.patch_status(
        "nominated-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"nominatedNodeName": names.name("victims-node")}})),
    )
    .await
    .unwrap();

    node_pool(
        &client,
        pool_json(
            &names,
            &pool,
            &class,
            json!([{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]),
            json!({GROUP: names.run}),
            json!([]),
            None,
        ),
    )
    .await;
    // A change to a pending pod starts a batch (the pool alone waits for the periodic one).
    pods.patch(
        "twin-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"e2e.capstan.dev/poke": "1"}}})),
    )
    .await
    .unwrap();

    let running = wait_running(&client, &host, &ns, 1, Duration::from_secs(120)).await;
    assert_eq!(running[0].name_any(), "twin-0");
    // Batches keep coming (the twin's binding, the node's arrival, kube-scheduler retrying the
    // nominated pod): none of them launches for it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let made = claims(&client, &names).await;
    assert_eq!(
        made.len(),
        1,
        "only the twin gets a claim: {:?}\nhost log:\n{}",
        made.iter().map(|c| c.name_any()).collect::<Vec<_>>(),
        host.log_tail()
    );
    let nominated = pods.get("nominated-0").await.unwrap();
    assert_eq!(
        nominated
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.clone()),
        Some(names.name("victims-node")),
        "kube-scheduler kept the nomination, so the pod was nominated all along"
    );
    assert!(
        nominated
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_none(),
        "the nominated pod is still pending"
    );
    let capstan_nominated = events(&client, &ns, "nominated-0", "Nominated")
        .await
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("capstan"))
        .count();
    assert_eq!(
        capstan_nominated, 0,
        "Capstan placed the nominated pod nowhere"
    );

    pods.delete_collection(&DeleteParams::default(), &Default::default())
        .await
        .unwrap();
    teardown(&client, &names, &ns).await;
    let _ = classes.delete(&priority, &DeleteParams::default()).await;
    host.check_alive();
}
