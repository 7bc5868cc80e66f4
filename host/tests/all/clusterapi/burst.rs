//! On-prem first, burst to a cloud, come back (docs/multi-provider.md): a Cluster API pool
//! (weight 100, real Cluster API controllers, a MachineDeployment of at most two 4-CPU machines
//! at 0.05 an hour) and a kwok pool of another provider (weight 10, 4-CPU nodes at 1.00 an hour),
//! both consolidating. Pods beyond the on-prem maximum run in the cloud within a bound measured
//! here; once on-prem capacity frees, consolidation replaces the cloud nodes with Machines
//! (cheaper, as Karpenter's consolidation decides on price), and nothing leaks.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{DeleteParams, ListParams};
use serde_json::json;

use super::*;
use crate::provisioner_e2e::GROUP;

/// The pools' nodes by pool: (on-prem, cloud).
async fn nodes_by_pool(client: &Client, names: &Names, onprem: &str) -> (Vec<String>, Vec<String>) {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{GROUP}={}", names.run)))
        .await
        .unwrap()
        .items;
    nodes
        .into_iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .map(|n| {
            let pool = n.labels().get("karpenter.sh/nodepool").cloned();
            (n.name_any(), pool)
        })
        .fold(
            (Vec::new(), Vec::new()),
            |(mut on, mut off), (name, pool)| {
                if pool.as_deref() == Some(onprem) {
                    on.push(name);
                } else {
                    off.push(name);
                }
                (on, off)
            },
        )
}

fn consolidating(mut pool: Value, weight: i32, names: &Names) -> Value {
    pool["spec"]["weight"] = json!(weight);
    pool["spec"]["template"]["metadata"] = json!({"labels": {GROUP: names.run}});
    pool["spec"]["disruption"] = json!({
        "consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
        "budgets": [{"nodes": "100%"}],
    });
    pool
}

#[tokio::test]
async fn pods_burst_to_the_cloud_and_come_back_when_on_prem_frees() {
    let world = World::new(
        "capi-burst",
        &[machine_deployment(
            "onprem",
            capacity("4", "16Gi", "0.05", "2"),
        )],
    )
    .await;
    let (cp, client) = cluster().await;
    let names = Names::new("burst");
    let host = start_host_with(cp, &names, &["--batch-idle-duration", "300ms"]).await;
    let (onprem_class, onprem) = (names.name("onprem-nc"), names.name("onprem"));
    node_class(
        &client,
        &names,
        &onprem_class,
        "clusterapi",
        world.parameters(),
    )
    .await;
    node_pool(
        &client,
        consolidating(node_pool_json(&names, &onprem, &onprem_class), 100, &names),
    )
    .await;
    let ns = cp.create_namespace_unique("capi-burst").await.unwrap();
    let app = |name, replicas| App {
        name,
        replicas,
        cpu: "3",
        node_selector: json!({GROUP: names.run}),
        annotations: json!({}),
    };

    // On-prem first: two 3-CPU pods, one Machine each. The cloud pool comes after them: on a
    // loaded machine the first pass may stop waiting for the Cluster API catalog (the first-answer
    // bound) and open a cloud node, which is the isolation working, not what this test is about.
    deployment(&client, &names, &ns, app("base", 2)).await;
    wait_running(&client, &host, &ns, 2, Duration::from_secs(180)).await;
    let (on, off) = nodes_by_pool(&client, &names, &onprem).await;
    assert_eq!((on.len(), off.len()), (2, 0), "{on:?} {off:?}");

    let (cloud_class, cloud) = (names.name("cloud-nc"), names.name("cloud"));
    node_class(
        &client,
        &names,
        &cloud_class,
        "kwok",
        json!({"instanceTypes": [{
            "name": "std-4", "architecture": "amd64", "operatingSystems": ["linux"],
            "resources": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "offerings": [{"capacityType": "on-demand", "zone": "zone-a", "price": 1.0}],
        }]}),
    )
    .await;
    node_pool(
        &client,
        consolidating(node_pool_json(&names, &cloud, &cloud_class), 10, &names),
    )
    .await;
    // Burst: on-prem is at its maximum, two more pods go to the cloud.
    let started = Instant::now();
    deployment(&client, &names, &ns, app("burst", 2)).await;
    wait_running(&client, &host, &ns, 4, Duration::from_secs(60)).await;
    let burst = started.elapsed();
    let (on, off) = nodes_by_pool(&client, &names, &onprem).await;
    assert_eq!((on.len(), off.len()), (2, 2), "{on:?} {off:?}");
    assert_eq!(world.replicas("onprem").await, 2);

    // On-prem frees: the base pods go, their Machines are consolidated away, and the cloud
    // nodes are replaced by Machines.
    let started = Instant::now();
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .delete("base", &DeleteParams::default())
        .await
        .unwrap();
    let back = wait_until(
        Duration::from_secs(300),
        "the burst pods back on-prem, no cloud node",
        || async {
            host.check_alive();
            let pods = disruption_pods(&client, &ns).await;
            let (on, off) = nodes_by_pool(&client, &names, &onprem).await;
            let placed: Vec<String> = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| p.spec.as_ref()?.node_name.clone())
                .collect();
            Ok::<_, String>(
                (off.is_empty()
                    && running(&pods) == 2
                    && placed.len() == 2
                    && placed.iter().all(|n| on.contains(n)))
                .then_some(on.len()),
            )
        },
    )
    .await;
    let back = match back {
        Ok(back) => back,
        Err(e) => {
            let md = world.deployments().get("onprem").await.unwrap();
            let (_, off) = nodes_by_pool(&client, &names, &onprem).await;
            let explained: Vec<serde_json::Value> = off
                .iter()
                .map(|n| crate::verdict::explain_cli(cp, &["node", n]))
                .collect();
            panic!(
                "{e}\nMachineDeployment: {}\n{}\nexplain: {explained:#?}",
                md.data["spec"],
                serde_json::to_string(&md.metadata.annotations).unwrap(),
            );
        }
    };
    let returned = started.elapsed();
    println!(
        "burst: 2 pods Running in the cloud {burst:?} after on-prem was full; back on-prem on {back} Machine(s) {returned:?} after it freed"
    );
    assert!(back <= 2);

    // Nothing leaks: pods gone, every Machine and Node goes.
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
    cleanup(&client, &names).await;
    wait_until(
        Duration::from_secs(180),
        "no Machine, no Node left",
        || async {
            host.check_alive();
            let machines = world.machines().await.len();
            let (on, off) = nodes_by_pool(&client, &names, &onprem).await;
            Ok::<_, String>((machines == 0 && on.is_empty() && off.is_empty()).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nhost log:\n{}", host.log_tail()));
    let record = world.infrastructure.record();
    let deleted: std::collections::BTreeSet<&String> = record.deleted.iter().collect();
    let provisioned: std::collections::BTreeSet<&String> = record.provisioned.iter().collect();
    assert!(provisioned.is_subset(&deleted), "{record:?}");
}
