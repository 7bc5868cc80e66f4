//! The Node a VM's kubelet would register, on the real control plane (kwok keeps it Ready),
//! its reboot (a new boot ID, `Ready=False`, then Ready again) and its deletion when the VM is
//! expunged.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use capstan_cloudstack_emulator::catalog::sample;
use capstan_cloudstack_emulator::{Config, Emulator, EmulatorHandle, NodeOptions, provider_id};
use capstan_test_support::{ControlPlane, unique_name, wait_until};
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{WatchEvent, WatchParams};

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
    let (vm_id, deployed) = deploy(&cs, sample::ZONE_B, sample::GPU, &name).await?;
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

    expunge(&cs, &vm_id).await?;
    wait_until(Duration::from_secs(30), "the Node deleted", || {
        let nodes = nodes.clone();
        let name = name.clone();
        async move { anyhow::Ok(nodes.get_opt(&name).await?.is_none().then_some(())) }
    })
    .await?;
    assert!(cs.node_errors().is_empty(), "{:?}", cs.node_errors());
    Ok(())
}

/// The Node's boot ID and `Ready` status.
/// Deploys an Ubuntu VM named `name`: its ID and the answer.
async fn deploy(
    cs: &EmulatorHandle,
    zone: &str,
    offering: &str,
    name: &str,
) -> Result<(String, serde_json::Value)> {
    let deployed = ok(
        cs,
        "deployVirtualMachine",
        &[
            ("zoneid", zone),
            ("serviceofferingid", offering),
            ("templateid", sample::UBUNTU),
            ("name", name),
        ],
    )
    .await?;
    let vm_id = deployed["id"].as_str().unwrap_or_default().to_string();
    Ok((vm_id, deployed))
}

/// Destroys and expunges the VM, and waits for the emulator to settle.
async fn expunge(cs: &EmulatorHandle, vm_id: &str) -> Result<()> {
    let destroyed = ok(
        cs,
        "destroyVirtualMachine",
        &[("id", vm_id), ("expunge", "true")],
    )
    .await?;
    wait_job(cs, destroyed["jobid"].as_str().unwrap_or_default()).await?;
    cs.settle(Duration::from_secs(30)).await?;
    Ok(())
}

fn boot_and_ready(node: &Node) -> (String, Option<(String, Option<String>)>) {
    let status = node.status.clone().unwrap_or_default();
    let boot = status.node_info.map(|i| i.boot_id).unwrap_or_default();
    let ready = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status, c.reason));
    (boot, ready)
}

#[tokio::test]
async fn a_rebooted_vm_s_node_gets_a_new_boot_and_is_ready_again() -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client()?;
    let cs = Emulator::start(Config {
        kube: Some(client.clone()),
        nodes: NodeOptions {
            reboot_millis: 1500,
            ..NodeOptions::default()
        },
        ..Config::default()
    })
    .await?;
    let name = unique_name("cs-reboot");
    let (vm_id, deployed) = deploy(&cs, sample::ZONE_A, sample::SMALL, &name).await?;
    wait_job(&cs, deployed["jobid"].as_str().unwrap_or_default()).await?;
    cs.settle(Duration::from_secs(30)).await?;
    let nodes: Api<Node> = Api::all(client);
    let first_boot = cs.vm(&vm_id).context("the VM")?.boot_id;
    wait_until(Duration::from_secs(60), "the Node Ready", || {
        let nodes = nodes.clone();
        let name = name.clone();
        async move {
            let node = nodes.get(&name).await?;
            let (_, ready) = boot_and_ready(&node);
            anyhow::Ok(ready.is_some_and(|(s, _)| s == "True").then_some(node))
        }
    })
    .await?;
    let node = nodes.get(&name).await?;
    assert_eq!(boot_and_ready(&node).0, first_boot, "the kubelet's boot ID");

    // Every change of the Node from here on.
    let version = node.metadata.resource_version.clone().unwrap_or_default();
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(60);
    let mut events = Box::pin(nodes.watch(&params, &version).await?);
    let rebooted = ok(&cs, "rebootVirtualMachine", &[("id", &vm_id)]).await?;
    let job = wait_job(&cs, rebooted["jobid"].as_str().unwrap_or_default()).await?;
    assert_eq!(job["jobstatus"], 1, "{job}");
    let new_boot = cs.vm(&vm_id).context("the VM")?.boot_id;
    assert_ne!(new_boot, first_boot);

    // The Node goes NotReady with the new boot ID, then Ready with it (kwok, or the emulator
    // after reboot_millis, whichever is first).
    let mut seen_not_ready = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let event = tokio::time::timeout_at(deadline, events.try_next())
            .await
            .context("the rebooted Node Ready again")??;
        let node = match event {
            Some(WatchEvent::Modified(node)) => node,
            Some(WatchEvent::Bookmark(_)) => continue,
            Some(other) => bail!("unexpected watch event {other:?}"),
            None => bail!("the watch ended before the Node was Ready again"),
        };
        let (boot, ready) = boot_and_ready(&node);
        if boot != new_boot {
            continue;
        }
        match ready {
            Some((status, reason)) if status == "False" => {
                assert_eq!(reason.as_deref(), Some("KubeletNotReady"));
                seen_not_ready = true;
            }
            Some((status, _)) if status == "True" => break,
            _ => {}
        }
    }
    assert!(seen_not_ready, "the Node went NotReady with its new boot");
    cs.settle(Duration::from_secs(30)).await?;
    let (boot, ready) = boot_and_ready(&nodes.get(&name).await?);
    assert_eq!(boot, new_boot);
    assert_eq!(ready.map(|(s, _)| s).as_deref(), Some("True"));
    assert_eq!(cs.vm(&vm_id).map(|vm| vm.reboots), Some(1));

    expunge(&cs, &vm_id).await?;
    assert!(cs.node_errors().is_empty(), "{:?}", cs.node_errors());
    Ok(())
}
