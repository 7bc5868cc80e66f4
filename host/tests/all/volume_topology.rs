//! Volume topology on the real control plane: a pod whose claim is bound to a volume in one zone
//! gets its node in that zone, and kube-scheduler (whose `VolumeBinding` checks the volume's node
//! affinity) runs it there; a pod whose claim does not exist is reported, not provisioned for.

use std::time::Duration;

use capstan_test_support::wait_until;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::lifecycle::{Host, Names, cluster, events, node_class, node_pool, node_pool_json};
use crate::provisioner::{claims, namespace, teardown};
use crate::provisioner_e2e::{Pods, wait_running};

const ZONE: &str = "topology.kubernetes.io/zone";

/// A statically provisioned volume `pv` of class `class` with `source` (its volume source and
/// any other spec fields), and the claim `ns/pvc` pre-bound to it.
pub(crate) async fn bound_volume(
    client: &Client,
    ns: &str,
    pv: &str,
    pvc: &str,
    class: &str,
    source: serde_json::Value,
) {
    let mut spec = json!({
        "capacity": {"storage": "1Gi"},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": class,
        "claimRef": {"namespace": ns, "name": pvc},
    });
    if let (Some(spec), Some(source)) = (spec.as_object_mut(), source.as_object()) {
        spec.extend(source.clone());
    }
    let volume: PersistentVolume =
        serde_json::from_value(json!({"metadata": {"name": pv}, "spec": spec})).unwrap();
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
async fn a_pod_with_a_zonal_volume_gets_a_node_in_its_volumes_zone() {
    let (cp, client) = cluster().await;
    let names = Names::new("volzone");
    let host = Host::start(cp, &names, &["--batch-idle-duration", "500ms"]);
    let (class, pool) = (names.name("nc"), names.name("pool"));
    // Four zones; the volume is in the third, which is neither the cheapest nor the first.
    node_class(&client, &names, &class, "kwok", json!({"maxCpu": 4})).await;
    node_pool(&client, node_pool_json(&names, &pool, &class)).await;
    let ns = namespace(cp, "volzone").await;

    // A statically provisioned volume in test-zone-c, pre-bound to the claim.
    let (pv, pvc, storage) = (names.name("pv"), "data", names.name("manual"));
    let source = json!({
        "hostPath": {"path": "/tmp/capstan-volzone"},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": ZONE, "operator": "In", "values": ["test-zone-c"]},
        ]}]}},
    });
    bound_volume(&client, &ns, &pv, pvc, &storage, source).await;
    let volumes = Api::<PersistentVolume>::all(client.clone());

    let selector = json!({"karpenter.sh/nodepool": pool});
    Pods::new(&client, &names, &ns, "db")
        .node_selector(selector.clone())
        .spec(json!({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": pvc}}]}))
        .create()
        .await;
    // A pod whose claim does not exist: kube-scheduler cannot place it anywhere, and neither
    // does Capstan launch a node for it; it says why on the pod.
    Pods::new(&client, &names, &ns, "orphan")
        .node_selector(selector)
        .spec(json!({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "absent"}}]}))
        .create()
        .await;

    let running = wait_running(&client, &host, &ns, 1, Duration::from_secs(120)).await;
    let node_name = running[0]
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap();
    let node = Api::<Node>::all(client.clone())
        .get(&node_name)
        .await
        .unwrap();
    assert_eq!(
        node.metadata.labels.as_ref().unwrap()[ZONE],
        "test-zone-c",
        "the node is in its volume's zone\n{}",
        host.log_tail()
    );
    assert_eq!(
        running[0].metadata.name.as_deref(),
        Some("db-0"),
        "only the pod with a volume runs"
    );
    let made = claims(&client, &names).await;
    assert_eq!(made.len(), 1, "one claim, none for the orphan: {made:?}");
    let said = wait_until(Duration::from_secs(30), "the orphan's Event", || async {
        let found = events(&client, &ns, "orphan-0", "FailedScheduling")
            .await
            .into_iter()
            .any(|e| {
                e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("persistent volume claim absent not found"))
            });
        Ok::<_, kube::Error>(found.then_some(()))
    })
    .await;
    assert!(said.is_ok(), "{said:?}\n{}", host.log_tail());

    Api::<Pod>::namespaced(client.clone(), &ns)
        .delete_collection(&DeleteParams::default(), &Default::default())
        .await
        .unwrap();
    teardown(&client, &names, &ns).await;
    let _ = volumes.delete(&pv, &DeleteParams::default()).await;
    host.check_alive();
}
