//! Proof test for the Cluster API harness: Cluster API's real core controllers (with their
//! webhooks) on a management API server, a workload cluster registered as a `Cluster`, and the test
//! infrastructure provider turning Machines into kwok Nodes and back.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use capstan_test_support::cluster_api::infrastructure::TestInfrastructure;
use capstan_test_support::cluster_api::{
    core_resource, infrastructure_resource, machine_template, register_workload_cluster,
};
use capstan_test_support::{ControlPlane, Options, wait_until};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn cluster_api_turns_a_machine_deployment_into_nodes_and_back() -> Result<()> {
    let workload = ControlPlane::shared().await?;
    let management = ControlPlane::start(Options::cluster_api_management()).await?;
    let (mgmt, wl) = (management.client()?, workload.client()?);
    let ns = management.create_namespace_unique("capi").await?;
    register_workload_cluster(&mgmt, &ns, "workload", workload).await?;
    let templates: Api<DynamicObject> = Api::namespaced_with(
        mgmt.clone(),
        &ns,
        &infrastructure_resource("TestMachineTemplate"),
    );
    let template = machine_template(
        "small-v1",
        json!({"cpu": "2", "memory": "4Gi", "pods": "110"}),
        json!({"topology.kubernetes.io/zone": "zone-a"}),
        200,
    );
    templates
        .create(&PostParams::default(), &serde_json::from_value(template)?)
        .await?;
    let deployments: Api<DynamicObject> =
        Api::namespaced_with(mgmt.clone(), &ns, &core_resource("MachineDeployment"));
    let md: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineDeployment",
        "metadata": {"name": "small"},
        "spec": {
            "clusterName": "workload",
            "replicas": 2,
            "selector": {"matchLabels": {"pool": "small"}},
            "template": {
                "metadata": {"labels": {"pool": "small"}},
                "spec": {
                    "clusterName": "workload",
                    "version": "v1.34.4",
                    "bootstrap": {"dataSecretName": "none"},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                          "kind": "TestMachineTemplate", "name": "small-v1"},
                },
            },
        },
    }))?;
    let created = deployments.create(&PostParams::default(), &md).await?;
    // Cluster API's defaulting webhook ran (no cert-manager: the harness issued its certificate).
    ensure!(
        created.data["spec"]["rollout"]["strategy"]["type"] == json!("RollingUpdate"),
        "not defaulted by the webhook: {:?}",
        created.data["spec"]
    );
    let infrastructure = TestInfrastructure::new(mgmt.clone(), wl.clone(), &ns).spawn();
    let machines: Api<DynamicObject> =
        Api::namespaced_with(mgmt.clone(), &ns, &core_resource("Machine"));
    let nodes: Api<Node> = Api::all(wl.clone());

    // Two Machines, each with a providerID and a nodeRef (Cluster API's ClusterCache found the
    // Node in the workload cluster by providerID), the Node with the template's capacity.
    let names = wait_until(
        Duration::from_secs(120),
        "two Machines with Nodes",
        || async {
            let list = machines.list(&ListParams::default()).await?.items;
            let with_nodes: Vec<String> = list
                .iter()
                .filter_map(|m| m.data["status"]["nodeRef"]["name"].as_str())
                .map(str::to_owned)
                .collect();
            Ok::<_, kube::Error>((with_nodes.len() == 2).then_some(with_nodes))
        },
    )
    .await?;
    for name in &names {
        let node = nodes.get(name).await?;
        let capacity = node
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .context("node capacity")?;
        ensure!(capacity["cpu"].0 == "2", "{capacity:?}");
        ensure!(
            node.spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|id| id.starts_with("capi-test://")),
            "{node:?}"
        );
    }

    // Scaled to zero: the Machines go, and their Nodes with them.
    deployments
        .patch(
            "small",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await?;
    wait_until(
        Duration::from_secs(120),
        "Machines and Nodes gone",
        || async {
            let left = machines.list(&ListParams::default()).await?.items.len();
            let mut nodes_left = 0;
            for name in &names {
                if nodes.get_opt(name).await?.is_some() {
                    nodes_left += 1;
                }
            }
            Ok::<_, kube::Error>((left == 0 && nodes_left == 0).then_some(()))
        },
    )
    .await?;
    let record = infrastructure.record();
    ensure!(record.provisioned.len() == 2, "{record:?}");
    ensure!(record.deleted.len() == 2, "{record:?}");
    management.stop()?;
    Ok(())
}
