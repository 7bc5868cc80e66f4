//! The happy path: a NodeClaim created by hand launches, registers and initializes; deleting it
//! evicts its pods, removes the Node and the instance.

use std::time::{Duration, Instant};

use capstan::api::NodeClaim;
use capstan::api::labels::{
    INITIALIZED, REGISTERED, TERMINATION_FINALIZER, UNREGISTERED_TAINT_KEY,
};
use capstan_test_support::wait_until;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::*;

#[tokio::test]
async fn claim_launches_registers_initializes_and_terminates() {
    let (cp, client) = cluster().await;
    let names = Names::new("flow");
    let host = Host::start(cp, &names, &[]);
    let (class, pool, name) = (names.name("nc"), names.name("pool"), names.name("claim"));
    node_class(&client, &names, &class, "kwok", json!({})).await;
    node_pool(&client, node_pool_json(&names, &pool, &class)).await;

    let started = Instant::now();
    claim(&client, claim_json(&names, &name, &pool, &class)).await;
    let launched = wait_condition(
        &client,
        &host,
        &name,
        "Launched",
        "True",
        None,
        Duration::from_secs(90),
    )
    .await;
    let launched_after = started.elapsed();
    let status = launched.status.clone().unwrap();
    let provider_id = status.provider_id.clone().unwrap();
    assert_eq!(provider_id, format!("kwok://{name}"));
    assert_eq!(status.image_id.as_deref(), Some("kwok-default-image"));
    assert!(status.capacity.contains_key("cpu"), "{status:?}");
    assert!(status.allocatable.contains_key("memory"), "{status:?}");
    assert!(
        launched
            .labels()
            .contains_key("node.kubernetes.io/instance-type")
    );
    assert_eq!(launched.labels()["karpenter.sh/capacity-type"], "on-demand");
    assert!(
        launched
            .finalizers()
            .iter()
            .any(|f| f == TERMINATION_FINALIZER)
    );

    let registered = wait_condition(
        &client,
        &host,
        &name,
        "Registered",
        "True",
        None,
        Duration::from_secs(60),
    )
    .await;
    let registered_after = started.elapsed();
    let node_name = registered.status.clone().unwrap().node_name.unwrap();
    let initialized = wait_condition(
        &client,
        &host,
        &name,
        "Initialized",
        "True",
        None,
        Duration::from_secs(60),
    )
    .await;
    let initialized_after = started.elapsed();
    assert_eq!(condition(&initialized, "Ready").unwrap().0, "True");
    println!(
        "claim created → Launched {launched_after:?}, Registered {registered_after:?}, Initialized {initialized_after:?}"
    );

    let nodes = Api::<Node>::all(client.clone());
    let node = nodes.get(&node_name).await.unwrap();
    assert_eq!(node.labels()[REGISTERED], "true");
    assert_eq!(node.labels()[INITIALIZED], "true");
    assert_eq!(node.labels()[RUN_LABEL], names.run);
    assert!(node.finalizers().iter().any(|f| f == TERMINATION_FINALIZER));
    assert!(
        node.owner_references()
            .iter()
            .any(|o| o.kind == "NodeClaim" && o.name == name)
    );
    let taints = node.spec.clone().unwrap().taints.unwrap_or_default();
    assert!(
        !taints.iter().any(|t| t.key == UNREGISTERED_TAINT_KEY),
        "{taints:?}"
    );
    for reason in ["Launched", "Registered", "Initialized"] {
        wait_event(&client, "default", &name, reason).await;
    }

    // A pod on the node, then delete the claim.
    let ns = cp.create_namespace_unique("flow").await.unwrap();
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "app"},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "app", "image": "fake"}],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    wait_until(Duration::from_secs(60), "pod running", || async {
        let p = pods.get("app").await?;
        Ok::<_, kube::Error>(
            (p.status.and_then(|s| s.phase).as_deref() == Some("Running")).then_some(()),
        )
    })
    .await
    .unwrap();

    let deleting = Instant::now();
    Api::<NodeClaim>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    wait_claim_gone(&client, &host, &name, Duration::from_secs(90)).await;
    println!("claim deleted → gone in {:?}", deleting.elapsed());
    assert!(
        pods.get_opt("app").await.unwrap().is_none(),
        "the pod was evicted"
    );
    assert!(
        nodes.get_opt(&node_name).await.unwrap().is_none(),
        "the Node is gone"
    );
    assert!(
        nodes_with_provider_id(&client, &provider_id)
            .await
            .is_empty(),
        "the instance is gone"
    );
    wait_event(&client, &ns, "app", "Evicted").await;
    wait_event(&client, "default", &name, "Terminating").await;
    host.check_alive();
    cleanup(&client, &names).await;
}
