//! The Node a VM's kubelet would register, on the real control plane (kwok keeps it Ready),
//! and its deletion when the VM is expunged.

use std::time::Duration;

use anyhow::Result;
use capstan_cloudstack_emulator::catalog::sample;
use capstan_cloudstack_emulator::{Config, Emulator, provider_id};
use capstan_test_support::{ControlPlane, unique_name, wait_until};
use k8s_openapi::api::core::v1::Node;
use kube::Api;

use super::http::{ok, wait_job};

#[tokio::test]
async fn a_booted_vm_registers_its_node_and_expunging_it_deletes_the_node() -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client()?;
    let cs = Emulator::start(Config {
        kube: Some(client.clone()),
        ..Config::default()
    })
    .await?;
    let name = unique_name("cs-vm");
    let deployed = ok(
        &cs,
        "deployVirtualMachine",
        &[
            ("zoneid", sample::ZONE_B),
            ("serviceofferingid", sample::GPU),
            ("templateid", sample::UBUNTU),
            ("name", &name),
        ],
    )
    .await?;
    let vm_id = deployed["id"].as_str().unwrap_or_default().to_string();
    let nodes: Api<Node> = Api::all(client);
    assert!(
        nodes.get_opt(&name).await?.is_none(),
        "no Node before the VM boots"
    );
    wait_job(&cs, deployed["jobid"].as_str().unwrap_or_default()).await?;
    cs.settle(Duration::from_secs(30)).await?;

    let node = nodes.get(&name).await?;
    let spec = node.spec.clone().unwrap_or_default();
    assert_eq!(
        spec.provider_id.as_deref(),
        Some(provider_id(sample::ZONE_B, &vm_id).as_str())
    );
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get("node.kubernetes.io/instance-type")
            .map(String::as_str),
        Some("gpu-a10")
    );
    assert_eq!(
        labels
            .get("topology.kubernetes.io/zone")
            .map(String::as_str),
        Some("zone-b")
    );
    assert_eq!(labels.get("kubernetes.io/hostname"), Some(&name));
    assert_eq!(
        labels.get("kubernetes.io/arch").map(String::as_str),
        Some("amd64")
    );
    let annotations = node.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("kwok.x-k8s.io/node").map(String::as_str),
        Some("fake")
    );
    assert!(
        spec.taints
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == "karpenter.sh/unregistered")
    );
    let capacity = node
        .status
        .clone()
        .unwrap_or_default()
        .capacity
        .unwrap_or_default();
    assert_eq!(capacity.get("cpu").map(|q| q.0.as_str()), Some("8"));
    assert_eq!(capacity.get("memory").map(|q| q.0.as_str()), Some("64Gi"));
    assert_eq!(
        capacity.get("nvidia.com/gpu").map(|q| q.0.as_str()),
        Some("1")
    );

    // kwok acts as its kubelet: the Node turns Ready.
    wait_until(Duration::from_secs(60), "the Node Ready", || {
        let nodes = nodes.clone();
        let name = name.clone();
        async move {
            let node = nodes.get(&name).await?;
            let ready = node
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            anyhow::Ok(ready.then_some(()))
        }
    })
    .await?;

    let destroyed = ok(
        &cs,
        "destroyVirtualMachine",
        &[("id", &vm_id), ("expunge", "true")],
    )
    .await?;
    wait_job(&cs, destroyed["jobid"].as_str().unwrap_or_default()).await?;
    cs.settle(Duration::from_secs(30)).await?;
    wait_until(Duration::from_secs(30), "the Node deleted", || {
        let nodes = nodes.clone();
        let name = name.clone();
        async move { anyhow::Ok(nodes.get_opt(&name).await?.is_none().then_some(())) }
    })
    .await?;
    assert!(cs.node_errors().is_empty(), "{:?}", cs.node_errors());
    Ok(())
}
