//! A pod nominated by preemption (`status.nominatedNodeName`) waits for its victims to leave the
//! node kube-scheduler chose; Capstan launches nothing for it, while an otherwise identical pod
//! that is not nominated gets a NodeClaim.
//!
//! Both pods first select a label no node has yet, so neither is provisioned for; one is then
//! nominated through the status subresource and only then does a pool with the label appear.
//! They run under a PriorityClass with `preemptionPolicy: Never`, so kube-scheduler, which
//! clears the nomination of a pod that may preempt but finds no victims, leaves it alone (and a
//! tainted Node is kept, since with no Node at all it clears every nomination).

use std::time::Duration;

use capstan_test_support::wait_until;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::lifecycle::{Host, Names, capstan_notes, cluster, events};
use crate::provisioner::{claims, namespace, teardown};
use crate::provisioner_e2e::{GROUP, Pods, group_pool};

#[tokio::test]
async fn a_nominated_pod_gets_no_nodeclaim_and_its_twin_does() {
    let (cp, client) = cluster().await;
    let names = Names::new("nominated");
    let host = Host::start(cp, &names, &["--batch-idle-duration", "300ms"]);
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

    // kube-scheduler clears every nomination while the cluster has no Node at all: keep one
    // (tainted, so nothing runs on it).
    let anchor = names.name("anchor");
    let nodes = Api::<Node>::all(client.clone());
    let anchor_node: Node = serde_json::from_value(json!({
        "metadata": {"name": anchor},
        "spec": {"taints": [{"key": "e2e.capstan.dev/anchor", "effect": "NoSchedule"}]},
    }))
    .unwrap();
    nodes
        .create(&PostParams::default(), &anchor_node)
        .await
        .unwrap();

    let create = |prefix: &'static str| {
        Pods::new(&client, &names, &ns, prefix)
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
    let victims_node = names.name("victims-node");
    pods.patch_status(
        "nominated-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"nominatedNodeName": victims_node}})),
    )
    .await
    .unwrap();
    // kube-scheduler keeps the nomination (the pod may not preempt, so it never clears it).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let kept = pods.get("nominated-0").await.unwrap();
    assert_eq!(
        kept.status.and_then(|s| s.nominated_node_name),
        Some(victims_node)
    );

    group_pool(
        &client,
        &names,
        json!({"maxCpu": 2, "families": ["c"]}),
        None,
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

    // The batch provisions for the twin alone. (Once the twin's node is up, kube-scheduler may
    // bind either pod to it, since the nomination names no real node; Capstan then provisions
    // for the twin again if it is left, never for the nominated pod.)
    let capstan_nominated = |pod: &'static str| capstan_notes(&client, &ns, pod, "Nominated");
    let twin = wait_until(
        Duration::from_secs(60),
        "the twin nominated to a claim",
        || async {
            let notes = capstan_nominated("twin-0").await;
            Ok::<_, kube::Error>((!notes.is_empty()).then_some(notes))
        },
    )
    .await;
    let twin = match twin {
        Ok(notes) => notes,
        Err(err) => panic!("{err}\nhost log:\n{}", host.log_tail()),
    };
    assert!(twin[0].contains("nodeclaim/"), "{twin:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let nominated = capstan_nominated("nominated-0").await;
    assert!(
        nominated.is_empty(),
        "Capstan placed the nominated pod: {nominated:?}\nhost log:\n{}",
        host.log_tail()
    );
    // Every claim made was for one pod: the twin (both would fit one node).
    for claim in claims(&client, &names).await {
        let notes: Vec<String> = events(&client, "default", &claim.name_any(), "Provisioned")
            .await
            .into_iter()
            .filter_map(|e| e.note)
            .collect();
        assert!(
            notes.iter().all(|n| n.starts_with("for 1 pod(s)")),
            "{}: {notes:?}",
            claim.name_any()
        );
    }

    pods.delete_collection(&DeleteParams::default(), &Default::default())
        .await
        .unwrap();
    teardown(&client, &names, &ns).await;
    let _ = classes.delete(&priority, &DeleteParams::default()).await;
    let _ = nodes.delete(&anchor, &DeleteParams::default()).await;
    host.check_alive();
}
