//! CapacityBuffers (`--feature-gates CapacityBuffer=true`) on the real control plane with
//! kube-scheduler, kwok and the `capstan run` binary: a buffer of 2 one-CPU pods makes the
//! provisioner launch room for them (`Provisioning=True`, `FitsExistingCapacity`); a Deployment of
//! 2 such pods takes the room and the buffer is refilled behind it; scaled back to 0, consolidation
//! removes the extra node but never the buffer's room. With the gate off, a buffer is ignored.
//!
//! Each host sees only the buffers carrying its run label (`--selector`), so the two tests, and
//! the other tests' hosts, stay apart on the shared control plane.

use std::time::Duration;

use capstan::api::CapacityBuffer;
use capstan_test_support::wait_until;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod, PodTemplate};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::consolidation::{Scene, on_demand, pool, scene};
use crate::disruption::{App, GROUP, deployment, pods, running};
use crate::lifecycle::{Names, RUN_LABEL};
use crate::provisioner::{claims, teardown};

/// One buffer pod's CPU, in millicores.
const POD_CPU: i64 = 1000;

fn kwok_types() -> serde_json::Value {
    json!({"instanceTypes": [
        {"name": "buf-2", "resources": {"cpu": "2", "memory": "8Gi", "pods": "110"},
         "offerings": [{"zone": "test-zone-a", "capacityType": "on-demand", "price": 0.1}]},
    ]})
}

/// A PodTemplate `name` of one 1-CPU pod on pool `pool`, and a CapacityBuffer `name` of
/// `replicas` of it, both labelled with the test's run label.
async fn buffer(
    client: &Client,
    names: &Names,
    ns: &str,
    (name, pool): (&str, &str),
    replicas: i32,
) {
    let template: PodTemplate = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PodTemplate",
        "metadata": {"name": name, "labels": {RUN_LABEL: names.run}},
        "template": {
            "metadata": {"labels": {RUN_LABEL: names.run, "app": "buffer"}},
            "spec": {
                "nodeSelector": {GROUP: pool},
                "containers": [{"name": "pause", "image": "fake",
                                "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}],
            },
        },
    }))
    .unwrap();
    Api::<PodTemplate>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &template)
        .await
        .unwrap();
    let b: CapacityBuffer = serde_json::from_value(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": name, "labels": {RUN_LABEL: names.run}},
        "spec": {"podTemplateRef": {"name": name}, "replicas": replicas},
    }))
    .unwrap();
    Api::<CapacityBuffer>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &b)
        .await
        .unwrap();
}

/// The buffer's `type` condition as `(status, reason)`, and `status.replicas`.
async fn buffer_state(
    client: &Client,
    ns: &str,
    name: &str,
    type_: &str,
) -> (Option<(String, String)>, Option<i32>) {
    let Ok(b) = Api::<CapacityBuffer>::namespaced(client.clone(), ns)
        .get(name)
        .await
    else {
        return (None, None);
    };
    let status = b.status.unwrap_or_default();
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| {
            (
                format!("{:?}", c.status),
                c.reason.clone().unwrap_or_default(),
            )
        });
    (condition, status.replicas)
}

pub(crate) fn millicores(q: &str) -> i64 {
    match q.strip_suffix('m') {
        Some(m) => m.parse().unwrap_or(0),
        None => q.parse::<f64>().map_or(0, |c| (c * 1000.0) as i64),
    }
}

/// The live, Ready nodes of `pool` and how many 1-CPU pods still fit on all of them.
async fn room(client: &Client, pool: &str) -> Result<(usize, i64), kube::Error> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{GROUP}={pool}")))
        .await?
        .items;
    let mut count = 0;
    let mut slots = 0;
    for node in nodes.iter().filter(|n| {
        n.metadata.deletion_timestamp.is_none()
            && n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    }) {
        let allocatable = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| a.get("cpu"))
            .map_or(0, |q| millicores(&q.0));
        let used: i64 = Api::<Pod>::all(client.clone())
            .list(&ListParams::default().fields(&format!("spec.nodeName={}", node.name_any())))
            .await?
            .items
            .iter()
            .filter(|p| {
                !matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                )
            })
            .flat_map(|p| p.spec.iter().flat_map(|s| s.containers.iter()))
            .filter_map(|c| c.resources.as_ref()?.requests.as_ref()?.get("cpu"))
            .map(|q| millicores(&q.0))
            .sum();
        count += 1;
        slots += (allocatable - used).max(0) / POD_CPU;
    }
    Ok((count, slots))
}

#[tokio::test]
async fn a_buffer_keeps_room_through_a_scale_up_and_a_consolidation() {
    let Scene {
        client,
        names,
        host,
        class,
        ns,
        ..
    } = scene(
        "buffer",
        &[
            "--batch-idle-duration",
            "500ms",
            "--feature-gates",
            "CapacityBuffer=true",
        ],
        kwok_types(),
    )
    .await;
    let p = names.name("pool");
    pool(
        &client,
        &names,
        (&p, &class),
        on_demand(),
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5s",
               "budgets": [{"nodes": "100%"}]}),
    )
    .await;
    let name = names.name("buf");
    buffer(&client, &names, &ns, (&name, &p), 2).await;

    // The buffer resolves to 2 pods and the provisioner launches room for them.
    let (replicas, ready) = (Some(2), Some(("True".to_owned(), "Resolved".to_owned())));
    wait_until(Duration::from_secs(120), "the buffer resolved", || async {
        host.check_alive();
        let (c, n) = buffer_state(&client, &ns, &name, "ReadyForProvisioning").await;
        Ok::<_, kube::Error>((c == ready && n == replicas).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    let fits = Some(("True".to_owned(), "FitsExistingCapacity".to_owned()));
    let room_for_two = || {
        let (client, ns, name, p, fits) = (
            client.clone(),
            ns.clone(),
            name.clone(),
            p.clone(),
            fits.clone(),
        );
        async move {
            let (nodes, slots) = room(&client, &p).await?;
            let (c, _) = buffer_state(&client, &ns, &name, "Provisioning").await;
            Ok::<_, kube::Error>((slots >= 2 && c == fits).then_some(nodes))
        }
    };
    let before = wait_until(Duration::from_secs(180), "room for 2 buffer pods", || {
        host.check_alive();
        room_for_two()
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    assert!(before >= 1);
    assert!(
        pods(&client, &ns).await.is_empty(),
        "buffer pods are never created"
    );

    // Two real pods of the buffer's shape take the room at once (kube-scheduler places them on
    // it) and the buffer is refilled behind them.
    let app = App {
        name: "app",
        replicas: 2,
        cpu: "1",
        node_selector: json!({GROUP: p}),
        annotations: json!({}),
    };
    deployment(&client, &names, &ns, app).await;
    let after = wait_until(
        Duration::from_secs(180),
        "2 pods running and room for 2 more",
        || {
            host.check_alive();
            let (client, ns) = (client.clone(), ns.clone());
            let next = room_for_two();
            async move {
                let nodes = next.await?;
                let up = running(&pods(&client, &ns).await) == 2;
                Ok::<_, kube::Error>(nodes.filter(|_| up))
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    assert!(
        after > before,
        "new room: {before} node(s) before, {after} after"
    );

    // Scaled to 0, the extra node goes; the buffer's room stays, and stays for a while.
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 0}})),
        )
        .await
        .unwrap();
    wait_until(
        Duration::from_secs(300),
        "back to the buffer's nodes",
        || {
            host.check_alive();
            let next = room_for_two();
            async move {
                let nodes = next.await?;
                Ok::<_, kube::Error>(nodes.filter(|n| *n == before).map(|_| ()))
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    for _ in 0..20 {
        // A loaded API server may fail a list now and then: that is not the buffer's room going.
        let Ok((nodes, slots)) = room(&client, &p).await else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        assert!(
            nodes == before && slots >= 2,
            "consolidation kept the buffer's room: {nodes} node(s), {slots} slot(s)\n{}",
            host.log_tail()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    host.check_alive();
    teardown(&client, &names, &ns).await;
}

#[tokio::test]
async fn with_the_gate_off_a_buffer_is_ignored() {
    let Scene {
        client,
        names,
        host,
        class,
        ns,
        ..
    } = scene(
        "buffer-off",
        &["--batch-idle-duration", "500ms"],
        kwok_types(),
    )
    .await;
    let p = names.name("pool");
    pool(
        &client,
        &names,
        (&p, &class),
        on_demand(),
        json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5s"}),
    )
    .await;
    let name = names.name("buf");
    buffer(&client, &names, &ns, (&name, &p), 2).await;
    for _ in 0..20 {
        host.check_alive();
        assert!(claims(&client, &names).await.is_empty(), "no NodeClaim");
        let b = Api::<CapacityBuffer>::namespaced(client.clone(), &ns)
            .get(&name)
            .await
            .unwrap();
        assert_eq!(b.status, None, "no status written");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    teardown(&client, &names, &ns).await;
}
