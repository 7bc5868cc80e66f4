//! The Nodes the emulated VMs register: when a VM reaches Running the emulator creates its Node
//! as the VM's kubelet would (name from the VM name, `spec.providerID`
//! `cloudstack://<zone-id>/<vm-id>`, the well-known labels, capacity from the offering, the
//! registration taints Karpenter's kubelets start with), annotated `kwok.x-k8s.io/node: fake`
//! so kwok keeps it Ready; when the VM is destroyed, it deletes the Node. A rebooted VM's Node
//! goes as a rebooting kubelet's does: a new `status.nodeInfo.bootID` and `Ready=False`
//! (`KubeletNotReady`), then `Ready=True` again after [`NodeOptions::reboot_millis`] (unless kwok,
//! whose `node-initialize` stage readies any Node that is not Ready, did so first). Node work
//! runs in order on one task, outside the state lock.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::server::Shared;
use crate::state::{State, Vm};

/// The provider ID scheme.
pub const PROVIDER_ID_PREFIX: &str = "cloudstack://";
/// The annotation that makes kwok act as the Node's kubelet.
pub const KWOK_ANNOTATION: &str = "kwok.x-k8s.io/node";

/// A taint the kubelet registers with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterTaint {
    /// Key.
    pub key: String,
    /// Value.
    #[serde(default)]
    pub value: Option<String>,
    /// Effect.
    pub effect: String,
}

/// How Nodes are registered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeOptions {
    /// Taints the kubelet registers with; by default `karpenter.sh/unregistered:NoExecute`,
    /// which Karpenter's launch configuration gives every kubelet it starts.
    pub register_taints: Vec<RegisterTaint>,
    /// Labels added to every Node.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `pods` capacity.
    pub max_pods: u32,
    /// How long a rebooted VM's Node stays `Ready=False` before it is `Ready` again, in
    /// milliseconds.
    #[serde(default = "default_reboot_millis")]
    pub reboot_millis: u64,
}

fn default_reboot_millis() -> u64 {
    NodeOptions::default().reboot_millis
}

impl Default for NodeOptions {
    fn default() -> Self {
        Self {
            register_taints: vec![RegisterTaint {
                key: "karpenter.sh/unregistered".into(),
                value: None,
                effect: "NoExecute".into(),
            }],
            labels: BTreeMap::new(),
            max_pods: 110,
            reboot_millis: 1000,
        }
    }
}

/// The provider ID of a VM.
pub fn provider_id(zone_id: &str, vm_id: &str) -> String {
    format!("{PROVIDER_ID_PREFIX}{zone_id}/{vm_id}")
}

/// What a registering VM's Node is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Registration {
    pub name: String,
    pub provider_id: String,
    pub zone_name: String,
    pub instance_type: String,
    pub arch: String,
    pub cpu: u32,
    pub memory_mib: u64,
    pub gpus: u32,
    pub boot_id: String,
}

/// A VM's Node and the boot ID of its new boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Boot {
    pub name: String,
    pub boot_id: String,
}

/// Node work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeAction {
    Register(Registration),
    /// Delete the Node with this name.
    Remove(String),
    /// The VM rebooted: a new boot ID, `Ready=False`.
    Reboot(Boot),
    /// The rebooted VM's kubelet is up again: `Ready=True` (if that boot is still the Node's).
    Booted(Boot),
}

/// Kubernetes' name for a CloudStack template arch.
fn kube_arch(arch: &str) -> &str {
    match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

impl NodeAction {
    /// The registration of a VM that just reached Running.
    pub fn register(state: &State, vm: &Vm) -> Option<NodeAction> {
        let offering = state.catalog.service_offering(&vm.service_offering_id)?;
        let zone = state.catalog.zone(&vm.zone_id)?;
        let template = state.catalog.template(&vm.template_id)?;
        Some(NodeAction::Register(Registration {
            // A kubelet registers under its host name, lower-cased.
            name: vm.name.to_lowercase(),
            provider_id: provider_id(&vm.zone_id, &vm.id),
            zone_name: zone.name.clone(),
            instance_type: offering.name.clone(),
            arch: kube_arch(&template.arch).to_string(),
            cpu: offering.cpu_number,
            memory_mib: offering.memory,
            gpus: offering.gpu.as_ref().map(|g| g.count).unwrap_or(0),
            boot_id: vm.boot_id.clone(),
        }))
    }

    /// The reboot of a VM (its boot ID already the new one).
    pub fn reboot(vm: &Vm) -> NodeAction {
        NodeAction::Reboot(Boot {
            name: vm.name.to_lowercase(),
            boot_id: vm.boot_id.clone(),
        })
    }
}

/// The `Ready` condition a kubelet reports (`KubeletReady`, or `KubeletNotReady` while it
/// starts), at `now`.
fn ready_condition(ready: bool, now: &Time) -> Value {
    let (status, reason, message) = if ready {
        ("True", "KubeletReady", "kubelet is posting ready status")
    } else {
        (
            "False",
            "KubeletNotReady",
            "container runtime status check may not have completed yet",
        )
    };
    json!({
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    })
}

/// The strategic merge patch of a Node's status for a new boot: its boot ID, `Ready=False`
/// (the Node's other conditions are left alone: conditions merge by `type`).
pub(crate) fn reboot_patch(boot_id: &str, now: &Time) -> Value {
    json!({"status": {
        "nodeInfo": {"bootID": boot_id},
        "conditions": [ready_condition(false, now)],
    }})
}

/// The strategic merge patch that makes a Node `Ready` after the boot `boot_id`; `None` when it
/// needs none: another boot since (that one readies it), or `Ready=True` already (kwok was
/// first).
pub(crate) fn booted_patch(node: &Node, boot_id: &str, now: &Time) -> Option<Value> {
    let status = node.status.as_ref()?;
    if status.node_info.as_ref().map(|i| i.boot_id.as_str()) != Some(boot_id) {
        return None;
    }
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    (!ready).then(|| json!({"status": {"conditions": [ready_condition(true, now)]}}))
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// The Node a registration creates.
pub(crate) fn build_node(r: &Registration, options: &NodeOptions) -> serde_json::Value {
    let mut labels = options.labels.clone();
    labels.extend([
        ("kubernetes.io/hostname".to_string(), r.name.clone()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), r.arch.clone()),
        (
            "node.kubernetes.io/instance-type".to_string(),
            r.instance_type.clone(),
        ),
        (
            "topology.kubernetes.io/zone".to_string(),
            r.zone_name.clone(),
        ),
    ]);
    let mut capacity = BTreeMap::from([
        ("cpu".to_string(), r.cpu.to_string()),
        ("memory".to_string(), format!("{}Mi", r.memory_mib)),
        ("pods".to_string(), options.max_pods.to_string()),
        ("ephemeral-storage".to_string(), "20Gi".to_string()),
    ]);
    if r.gpus > 0 {
        capacity.insert("nvidia.com/gpu".to_string(), r.gpus.to_string());
    }
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": r.name,
            "labels": labels,
            "annotations": { KWOK_ANNOTATION: "fake" },
        },
        "spec": {
            "providerID": r.provider_id,
            "taints": options.register_taints,
        },
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "nodeInfo": {
                "architecture": r.arch,
                "operatingSystem": "linux",
                "kubeletVersion": "fake",
                "bootID": r.boot_id, "containerRuntimeVersion": "", "kernelVersion": "",
                "kubeProxyVersion": "", "machineID": "", "osImage": "", "systemUUID": "",
            },
        },
    })
}

/// Starts the Node worker; returns the sender the jobs use.
pub(crate) fn spawn_worker(
    client: Option<kube::Client>,
    options: NodeOptions,
    shared: std::sync::Weak<Shared>,
) -> (
    mpsc::UnboundedSender<NodeAction>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<NodeAction>();
    let task = tokio::spawn(async move {
        let delay = Duration::from_millis(options.reboot_millis);
        while let Some(action) = rx.recv().await {
            let result = match &client {
                Some(client) => apply(client, &options, &action).await,
                None => Ok(None),
            };
            let Some(shared) = shared.upgrade() else {
                continue;
            };
            let error = match result {
                Ok(Some(later)) => {
                    Shared::send_node_after(&shared, later, delay);
                    None
                }
                Ok(None) => None,
                Err(e) => Some(format!("{action:?}: {e}")),
            };
            shared.node_done(error);
        }
    });
    (tx, task)
}

/// Does `action`; returns the Node work that follows it later (a reboot's boot).
async fn apply(
    client: &kube::Client,
    options: &NodeOptions,
    action: &NodeAction,
) -> Result<Option<NodeAction>, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    match action {
        NodeAction::Register(r) => {
            let body = build_node(r, options);
            let node: Node =
                serde_json::from_value(body.clone()).map_err(kube::Error::SerdeError)?;
            let created = match nodes.create(&PostParams::default(), &node).await {
                Ok(created) => created,
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    tracing::warn!(node = %r.name, "a Node of that name exists already");
                    return Ok(None);
                }
                Err(e) => return Err(e),
            };
            let kept_status = created
                .status
                .as_ref()
                .and_then(|s| s.capacity.as_ref())
                .is_some_and(|c| !c.is_empty());
            if !kept_status {
                // The API server dropped the status on create: set it as a kubelet does.
                nodes
                    .patch_status(
                        &r.name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "status": body["status"] })),
                    )
                    .await?;
            }
            tracing::info!(node = %r.name, provider_id = %r.provider_id, "registered the VM's Node");
            Ok(None)
        }
        NodeAction::Remove(name) => match nodes.delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                tracing::info!(node = %name, "deleted the expunged VM's Node");
                Ok(None)
            }
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
            Err(e) => Err(e),
        },
        NodeAction::Reboot(boot) => {
            let patch = Patch::Strategic(reboot_patch(&boot.boot_id, &now()));
            match nodes
                .patch_status(&boot.name, &PatchParams::default(), &patch)
                .await
            {
                Ok(_) => {
                    tracing::info!(node = %boot.name, boot_id = %boot.boot_id, "the VM's Node is rebooting");
                    Ok(Some(NodeAction::Booted(boot.clone())))
                }
                // A VM whose Node is gone (or never registered): nothing to reboot.
                Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
                Err(e) => Err(e),
            }
        }
        NodeAction::Booted(boot) => {
            let Some(node) = nodes.get_opt(&boot.name).await? else {
                return Ok(None);
            };
            let Some(patch) = booted_patch(&node, &boot.boot_id, &now()) else {
                return Ok(None);
            };
            match nodes
                .patch_status(
                    &boot.name,
                    &PatchParams::default(),
                    &Patch::Strategic(patch),
                )
                .await
            {
                Ok(_) => {
                    tracing::info!(node = %boot.name, "the rebooted VM's Node is Ready");
                    Ok(None)
                }
                Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
                Err(e) => Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_look_like_a_registered_kubelets() {
        let r = Registration {
            name: "default-abc12".into(),
            provider_id: provider_id("zone-uuid", "vm-uuid"),
            zone_name: "zone-a".into(),
            instance_type: "gpu-a10".into(),
            arch: "amd64".into(),
            cpu: 8,
            memory_mib: 65536,
            gpus: 1,
            boot_id: "boot-1".into(),
        };
        let node = build_node(&r, &NodeOptions::default());
        assert_eq!(node["status"]["nodeInfo"]["bootID"], "boot-1");
        assert_eq!(node["spec"]["providerID"], "cloudstack://zone-uuid/vm-uuid");
        assert_eq!(node["metadata"]["annotations"][KWOK_ANNOTATION], "fake");
        let labels = &node["metadata"]["labels"];
        assert_eq!(labels["node.kubernetes.io/instance-type"], "gpu-a10");
        assert_eq!(labels["topology.kubernetes.io/zone"], "zone-a");
        assert_eq!(labels["kubernetes.io/hostname"], "default-abc12");
        assert_eq!(labels["kubernetes.io/arch"], "amd64");
        assert_eq!(node["status"]["capacity"]["memory"], "65536Mi");
        assert_eq!(node["status"]["capacity"]["nvidia.com/gpu"], "1");
        assert_eq!(
            node["spec"]["taints"][0]["key"],
            "karpenter.sh/unregistered"
        );
        // It is a valid Node.
        let parsed: Node = serde_json::from_value(node).unwrap();
        assert_eq!(parsed.metadata.name.as_deref(), Some("default-abc12"));
        assert_eq!(kube_arch("aarch64"), "arm64");
    }

    fn at(seconds: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap())
    }

    #[test]
    fn a_reboot_is_a_new_boot_id_and_a_kubelet_not_ready() {
        let patch = reboot_patch("boot-2", &at(1_767_323_045));
        assert_eq!(
            patch,
            json!({"status": {
                "nodeInfo": {"bootID": "boot-2"},
                "conditions": [{
                    "type": "Ready", "status": "False", "reason": "KubeletNotReady",
                    "message": "container runtime status check may not have completed yet",
                    "lastHeartbeatTime": "2026-01-02T03:04:05Z",
                    "lastTransitionTime": "2026-01-02T03:04:05Z",
                }],
            }})
        );
    }

    #[test]
    fn the_boot_readies_only_its_own_not_ready_node() {
        let node = |boot: &str, ready: &str| -> Node {
            serde_json::from_value(json!({
                "metadata": {"name": "n"},
                "status": {
                    "nodeInfo": {
                        "bootID": boot, "architecture": "amd64", "containerRuntimeVersion": "",
                        "kernelVersion": "", "kubeProxyVersion": "", "kubeletVersion": "",
                        "machineID": "", "operatingSystem": "linux", "osImage": "",
                        "systemUUID": "",
                    },
                    "conditions": [
                        {"type": "MemoryPressure", "status": "False"},
                        {"type": "Ready", "status": ready},
                    ],
                },
            }))
            .unwrap()
        };
        let now = at(1_767_323_046);
        let patch = booted_patch(&node("boot-2", "False"), "boot-2", &now).unwrap();
        assert_eq!(
            patch["status"]["conditions"][0],
            json!({
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": "2026-01-02T03:04:06Z",
                "lastTransitionTime": "2026-01-02T03:04:06Z",
            })
        );
        assert!(patch["status"].get("nodeInfo").is_none());
        // kwok readied it first; a later reboot readies it itself.
        assert_eq!(booted_patch(&node("boot-2", "True"), "boot-2", &now), None);
        assert_eq!(booted_patch(&node("boot-3", "False"), "boot-2", &now), None);
    }
}
