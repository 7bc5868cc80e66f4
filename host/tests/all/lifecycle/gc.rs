//! Garbage collection: a leaked instance is deleted; a claim whose instance is gone is removed.

use std::time::Duration;

use capstan::capability::Capabilities;
use capstan::capability::grants::{Cluster, parse};
use capstan::capability::kube::ClusterConnection;
use capstan::runtime::Limits;
use capstan::runtime::types::{KeyValue, NodeClass as WitClass};
use capstan_test_support::wait_until;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::*;
use crate::conformance::KWOK_GRANTS;
use crate::fixtures::{kwok_compiled, runtime};

#[tokio::test]
async fn leaked_instances_and_orphaned_claims_are_collected() {
    let (cp, client) = cluster().await;
    let names = Names::new("gc");
    let host = Host::start(cp, &names, &["--gc-interval", "1s", "--gc-grace", "2s"]);

    // An instance launched behind Capstan's back (no NodeClaim), labelled for this run.
    let caps = Capabilities::builder("kwok")
        .grants(parse::from_text(KWOK_GRANTS).unwrap())
        .workload(ClusterConnection::new(Cluster::Workload, client.clone()))
        .build();
    let kwok = runtime()
        .instantiate_pre(kwok_compiled(), Limits::default(), caps)
        .unwrap();
    let leak = names.name("leak");
    let mut request = crate::fixtures::claim(&leak);
    request.labels = vec![KeyValue {
        key: RUN_LABEL.into(),
        value: names.run.clone(),
    }];
    let class = WitClass {
        name: "gc".into(),
        parameters: "{}".into(),
    };
    let created = kwok.create(&request, &class).await.unwrap();
    let id = created.provider_id.unwrap();
    assert_eq!(nodes_with_provider_id(&client, &id).await.len(), 1);
    wait_until(
        Duration::from_secs(60),
        "the leaked instance is collected",
        || async {
            Ok::<_, kube::Error>(
                nodes_with_provider_id(&client, &id)
                    .await
                    .is_empty()
                    .then_some(()),
            )
        },
    )
    .await
    .unwrap_or_else(|err| panic!("{err}\n{}", host.log_tail()));

    // A claim whose instance disappears.
    let (nc, pool, name) = (names.name("nc"), names.name("pool"), names.name("claim"));
    node_class(&client, &names, &nc, "kwok", json!({})).await;
    claim(&client, claim_json(&names, &name, &pool, &nc)).await;
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
    let node = registered.status.unwrap().node_name.unwrap();
    let nodes = Api::<Node>::all(client.clone());
    // First its provider stops listing it while its Node stays Ready (the kubelet still reports):
    // the claim is kept, as Karpenter keeps it.
    wait_condition(
        &client,
        &host,
        &name,
        "Initialized",
        "True",
        None,
        Duration::from_secs(60),
    )
    .await;
    nodes
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"capstan.dev/provider": null}}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let kept = Api::<capstan::api::NodeClaim>::all(client.clone())
        .get_opt(&name)
        .await
        .unwrap();
    assert!(
        kept.is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
        "a claim whose Node is Ready was collected after several passes\n{}",
        host.log_tail()
    );
    // Then the instance really goes: Node and all.
    nodes
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    nodes.delete(&node, &Default::default()).await.unwrap();
    wait_claim_gone(&client, &host, &name, Duration::from_secs(60)).await;
    wait_event(&client, "default", &name, "GarbageCollected").await;
    host.check_alive();
    cleanup(&client, &names).await;
}
