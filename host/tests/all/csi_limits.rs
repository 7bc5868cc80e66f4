//! CSI attach limits on the real control plane: a node whose CSINode lets a driver attach one
//! volume, already holding a pod with a volume of that driver, takes no second such pod, in
//! kube-scheduler (`NodeVolumeLimits`) and in Capstan's simulation alike, so the second pod gets
//! a NodeClaim of its own though the node has the CPU and memory for it.

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::lifecycle::{Host, Names, cluster, node_class, node_pool};
use crate::provisioner::{claims, namespace, teardown};
use crate::provisioner_e2e::{Pods, pool_json, wait_running};

/// A label only the test's pool puts on its nodes.
const GROUP: &str = "e2e.capstan.dev/group";

/// A statically provisioned CSI volume `pv` of `driver`, pre-bound to claim `ns/pvc`.
async fn bound_volume(client: &Client, ns: &str, pv: &str, pvc: &str, driver: &str, class: &str) {
    let volume: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": pv},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "csi": {"driver": driver, "volumeHandle": pv},
            "claimRef": {"namespace": ns, "name": pvc},
        },
    }))
    .unwrap();
    Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &volume)
        .await
        .unwrap();
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": pvc},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "volumeName": pv,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }))
    .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_node_at_its_csi_attach_limit_takes_no_more_volumes_of_that_driver() {
    let (cp, client) = cluster().await;
    let names = Names::new("csilimit");
    let host = Host::start(cp, &names, &["--batch-idle-duration", "300ms"]);
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(
        &client,
        &names,
        &class,
        "kwok",
        json!({"maxCpu": 4, "families": ["c"]}),
    )
    .await;
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
    bound_volume(&client, &ns, &pv1, "one", &driver, &storage).await;
    bound_volume(&client, &ns, &pv2, "two", &driver, &storage).await;
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
    let running = wait_running(&client, &host, &ns, 2, Duration::from_secs(120)).await;
    let second_node = running
        .iter()
        .find(|p| p.name_any() == "second-0")
        .and_then(|p| p.spec.as_ref()?.node_name.clone())
        .unwrap();
    assert_ne!(
        second_node, node,
        "the second pod runs on a node of its own"
    );
    let made = claims(&client, &names).await;
    assert_eq!(
        made.len(),
        2,
        "{:?}",
        made.iter().map(|c| c.name_any()).collect::<Vec<_>>()
    );

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
