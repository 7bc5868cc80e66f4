//! CSI attach limits on the real control plane: a node whose CSINode lets a driver attach one
//! volume, already holding a pod with a volume of that driver, takes no second such pod, in
//! kube-scheduler (`NodeVolumeLimits`) and in Capstan's simulation alike, so the second pod gets
//! a NodeClaim of its own though the node has the CPU and memory for it. (kube-scheduler binds it
//! to the new node when it next retries it; its queue does not retry a pod an attach limit
//! rejected on a node's arrival, so the test does not wait for that.)

use std::time::Duration;

use capstan_test_support::wait_until;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::lifecycle::{Host, Names, capstan_notes, cluster};
use crate::provisioner::{claims, namespace, teardown};
use crate::provisioner_e2e::{GROUP, Pods, group_pool, wait_running};
use crate::volume_topology::bound_volume;

#[tokio::test]
async fn a_node_at_its_csi_attach_limit_takes_no_more_volumes_of_that_driver() {
    let (cp, client) = cluster().await;
    let names = Names::new("csilimit");
    let host = Host::start(cp, &names, &["--batch-idle-duration", "300ms"]);
    group_pool(
        &client,
        &names,
        json!({"maxCpu": 4, "families": ["c"]}),
        None,
    )
    .await;
    let ns = namespace(cp, "csilimit").await;
    let driver = format!("{}.csi.capstan.dev", names.name("drv"));
    // No attacher runs here: the driver needs no VolumeAttachments.
    let drivers = Api::<CSIDriver>::all(client.clone());
    let csi_driver: CSIDriver = serde_json::from_value(json!({
        "metadata": {"name": driver},
        "spec": {"attachRequired": false},
    }))
    .unwrap();
    drivers
        .create(&PostParams::default(), &csi_driver)
        .await
        .unwrap();
    let storage = names.name("manual");
    let (pv1, pv2) = (names.name("pv1"), names.name("pv2"));
    for (pv, pvc) in [(&pv1, "one"), (&pv2, "two")] {
        let csi = json!({"csi": {"driver": driver, "volumeHandle": pv}});
        bound_volume(&client, &ns, pv, pvc, &storage, csi).await;
    }
    let with_claim = |claim: &str| json!({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]});

    // The first pod gets a 2-CPU node (1.9 allocatable) and leaves 400m free on it.
    Pods::new(&client, &names, &ns, "first")
        .cpu("1500m")
        .node_selector(json!({GROUP: names.run}))
        .spec(with_claim("one"))
        .create()
        .await;
    let running = wait_running(&client, &host, &ns, 1, Duration::from_secs(120)).await;
    let node = running[0]
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap();
    // Its CSINode, as the kubelet would register it: one volume of the driver.
    let csi_nodes = Api::<CSINode>::all(client.clone());
    let csi_node: CSINode = serde_json::from_value(json!({
        "metadata": {"name": node},
        "spec": {"drivers": [{"name": driver, "nodeID": node, "allocatable": {"count": 1}}]},
    }))
    .unwrap();
    csi_nodes
        .create(&PostParams::default(), &csi_node)
        .await
        .unwrap();
    // Give the host's CSINode watch a moment before the second pod's batch.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The second pod fits the first node's CPU and memory, not its attach limit.
    Pods::new(&client, &names, &ns, "second")
        .cpu("200m")
        .node_selector(json!({GROUP: names.run}))
        .spec(with_claim("two"))
        .create()
        .await;
    // Capstan launches a claim for it rather than counting on the first node.
    let nominated = wait_until(Duration::from_secs(60), "second-0 nominated", || async {
        let notes = capstan_notes(&client, &ns, "second-0", "Nominated").await;
        Ok::<_, kube::Error>(notes.into_iter().next())
    })
    .await;
    let note = match nominated {
        Ok(note) => note,
        Err(err) => panic!("{err}\nhost log:\n{}", host.log_tail()),
    };
    assert!(note.contains("nodeclaim/"), "{note}");
    assert_eq!(claims(&client, &names).await.len(), 2);
    // The new node has room for it: no claim is in flight any more and no third one comes.
    let second_node = wait_until(Duration::from_secs(60), "the second node", || async {
        let nodes = Api::<Node>::all(client.clone())
            .list(&ListParams::default().labels(&format!("{GROUP}={}", names.run)))
            .await?;
        Ok::<_, kube::Error>(
            nodes
                .items
                .into_iter()
                .map(|n| n.name_any())
                .find(|n| *n != node),
        )
    })
    .await;
    assert!(second_node.is_ok(), "{second_node:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(claims(&client, &names).await.len(), 2);

    Api::<Pod>::namespaced(client.clone(), &ns)
        .delete_collection(&DeleteParams::default(), &Default::default())
        .await
        .unwrap();
    teardown(&client, &names, &ns).await;
    let _ = csi_nodes.delete(&node, &DeleteParams::default()).await;
    let volumes = Api::<PersistentVolume>::all(client.clone());
    for pv in [&pv1, &pv2] {
        let _ = volumes.delete(pv, &DeleteParams::default()).await;
    }
    let _ = drivers.delete(&driver, &DeleteParams::default()).await;
    host.check_alive();
}
