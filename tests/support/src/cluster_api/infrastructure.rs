//! The tests' infrastructure provider for Cluster API (contract v1beta2; CRDs in
//! `tests/control-plane/capi/test-infrastructure.yaml`), run in the test process for one namespace
//! of the management cluster:
//!
//! - a `TestCluster` is provisioned at once (`status.initialization.provisioned`), and a
//!   `TestControlPlane` initialized (`status.initialization.controlPlaneInitialized`, externally
//!   managed: Cluster API then drains and deletes the Nodes of Machines it deletes);
//! - a `TestMachine` (made by Cluster API's MachineSet controller from a `TestMachineTemplate`)
//!   gets, `spec.provisionDelayMillis` after its creation, `spec.providerID`
//!   `capi-test://<namespace>/<name>`, a kwok Node of that name and providerID in the workload
//!   cluster (capacity `spec.capacity`, labels `spec.nodeLabels`) and
//!   `status.initialization.provisioned`; `spec.outcome: Never` never provisions it, `Fail`
//!   reports a failure (`status.failureReason`, a `Ready=False` condition) instead;
//! - a `TestMachineTemplate` with `spec.reportCapacity` gets `status.capacity` (its template's
//!   capacity) and `status.nodeInfo` (architecture and OS from its `nodeLabels`), as an
//!   infrastructure provider implementing Cluster API's scale-from-zero contract reports them;
//! - a `TestMachine` being deleted loses its Node (if Cluster API has not deleted it already), then
//!   its finalizer, as a cloud's VM going takes its Node with it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use super::{control_plane_resource, infrastructure_resource};
use crate::{Error, Result};

/// The finalizer that keeps a TestMachine until its Node is gone.
pub const FINALIZER: &str = "testmachine.infrastructure.cluster.x-k8s.io";

/// What the provider did, for assertions.
#[derive(Debug, Default, Clone)]
pub struct Record {
    /// Every TestMachine it saw.
    pub seen: std::collections::BTreeSet<String>,
    /// TestMachines provisioned (Node registered), in order.
    pub provisioned: Vec<String>,
    /// TestMachines whose deletion it finished (Node removed), in order.
    pub deleted: Vec<String>,
    /// TestMachines it marked failed.
    pub failed: Vec<String>,
}

/// The provider for one namespace of the management cluster.
#[derive(Clone)]
pub struct TestInfrastructure {
    management: Client,
    workload: Client,
    namespace: String,
    record: Arc<Mutex<Record>>,
}

/// The running provider; it stops when dropped.
pub struct Running {
    provider: TestInfrastructure,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// What it did so far.
    pub fn record(&self) -> Record {
        self.provider
            .record
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 404)
}

/// The status a `TestMachineTemplate` with `spec.reportCapacity` reports: its template's capacity,
/// and the architecture and OS its Nodes register with (`amd64`, `linux` by default).
fn reported_status(template: &DynamicObject) -> Option<Value> {
    let spec = &template.data["spec"];
    if spec["reportCapacity"] != json!(true) {
        return None;
    }
    let machine = &spec["template"]["spec"];
    let label = |key: &str, default: &str| {
        machine["nodeLabels"][key]
            .as_str()
            .unwrap_or(default)
            .to_owned()
    };
    Some(json!({
        "capacity": machine["capacity"].clone(),
        "nodeInfo": {
            "architecture": label("kubernetes.io/arch", "amd64"),
            "operatingSystem": label("kubernetes.io/os", "linux"),
        },
    }))
}

fn age_millis(object: &DynamicObject) -> i64 {
    object
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| k8s_openapi::jiff::Timestamp::now().as_millisecond() - t.0.as_millisecond())
        .unwrap_or(0)
}

impl TestInfrastructure {
    /// The provider for `namespace` of `management`, registering Nodes in `workload`.
    pub fn new(management: Client, workload: Client, namespace: &str) -> Self {
        Self {
            management,
            workload,
            namespace: namespace.to_owned(),
            record: Arc::default(),
        }
    }

    /// Runs it until the returned handle is dropped.
    pub fn spawn(self) -> Running {
        let provider = self.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Err(err) = provider.step().await {
                    tracing::warn!(namespace = %provider.namespace, "test infrastructure: {err}");
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        });
        Running {
            provider: self,
            task,
        }
    }

    fn api(&self, kind_name: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.management.clone(),
            &self.namespace,
            &infrastructure_resource(kind_name),
        )
    }

    fn note(&self, edit: impl FnOnce(&mut Record)) {
        if let Ok(mut record) = self.record.lock() {
            edit(&mut record);
        }
    }

    /// One pass over the namespace's TestClusters and TestMachines.
    pub async fn step(&self) -> Result<()> {
        let clusters = self.api("TestCluster");
        for cluster in clusters.list(&ListParams::default()).await?.items {
            if cluster.data["status"]["initialization"]["provisioned"] != json!(true) {
                clusters
                    .patch_status(
                        &cluster.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": {"initialization": {"provisioned": true}}})),
                    )
                    .await?;
            }
        }
        let control_planes: Api<DynamicObject> = Api::namespaced_with(
            self.management.clone(),
            &self.namespace,
            &control_plane_resource(),
        );
        for control_plane in control_planes.list(&ListParams::default()).await?.items {
            let status = &control_plane.data["status"];
            if status["initialization"]["controlPlaneInitialized"] != json!(true) {
                let version = control_plane.data["spec"]["version"].clone();
                control_planes
                    .patch_status(
                        &control_plane.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": {
                            "initialization": {"controlPlaneInitialized": true},
                            "externalManagedControlPlane": true,
                            "version": version,
                        }})),
                    )
                    .await?;
            }
        }
        let templates = self.api("TestMachineTemplate");
        for template in templates.list(&ListParams::default()).await?.items {
            if let Some(status) = reported_status(&template)
                && template.data["status"] != status
            {
                templates
                    .patch_status(
                        &template.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": status})),
                    )
                    .await?;
            }
        }
        for machine in self
            .api("TestMachine")
            .list(&ListParams::default())
            .await?
            .items
        {
            self.reconcile(&machine).await?;
        }
        Ok(())
    }

    async fn reconcile(&self, machine: &DynamicObject) -> Result<()> {
        let name = machine.name_any();
        self.note(|r| {
            r.seen.insert(name.clone());
        });
        let machines = self.api("TestMachine");
        let finalizers = machine.finalizers().to_vec();
        if machine.metadata.deletion_timestamp.is_some() {
            if !finalizers.iter().any(|f| f == FINALIZER) {
                return Ok(());
            }
            let nodes: Api<Node> = Api::all(self.workload.clone());
            match nodes.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
            let rest: Vec<String> = finalizers.into_iter().filter(|f| f != FINALIZER).collect();
            let patch = json!({"metadata": {
                "finalizers": rest,
                "resourceVersion": machine.metadata.resource_version,
            }});
            match machines
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => self.note(|r| r.deleted.push(name)),
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
            return Ok(());
        }
        if !finalizers.iter().any(|f| f == FINALIZER) {
            let mut all = finalizers;
            all.push(FINALIZER.to_owned());
            machines
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {
                        "finalizers": all,
                        "resourceVersion": machine.metadata.resource_version,
                    }})),
                )
                .await?;
            return Ok(());
        }
        let spec = &machine.data["spec"];
        let status = &machine.data["status"];
        if status["initialization"]["provisioned"] == json!(true)
            || status["failureReason"].is_string()
        {
            return Ok(());
        }
        let delay = spec["provisionDelayMillis"].as_i64().unwrap_or(0);
        if age_millis(machine) < delay {
            return Ok(());
        }
        match spec["outcome"].as_str().unwrap_or("Provision") {
            "Never" => Ok(()),
            "Fail" => {
                machines
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": {
                            "failureReason": "InsufficientCapacity",
                            "failureMessage": "the test infrastructure was told to fail",
                            "conditions": [{
                                "type": "Ready", "status": "False", "reason": "ProvisioningFailed",
                                "message": "the test infrastructure was told to fail",
                                "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
                            }],
                        }})),
                    )
                    .await?;
                self.note(|r| r.failed.push(name));
                Ok(())
            }
            _ => self.provision(machine).await,
        }
    }

    async fn provision(&self, machine: &DynamicObject) -> Result<()> {
        let name = machine.name_any();
        let provider_id = format!("capi-test://{}/{name}", self.namespace);
        let machines = self.api("TestMachine");
        if machine.data["spec"]["providerID"].as_str() != Some(provider_id.as_str()) {
            machines
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"providerID": provider_id}})),
                )
                .await?;
        }
        self.register_node(machine, &name, &provider_id).await?;
        machines
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {
                    "initialization": {"provisioned": true},
                    "addresses": [{"type": "Hostname", "address": name}],
                }})),
            )
            .await?;
        self.note(|r| r.provisioned.push(name));
        Ok(())
    }

    /// The Kubernetes version of the Machine owning `machine` (its kubelet's version).
    async fn machine_version(&self, machine: &DynamicObject) -> Result<Option<String>> {
        let Some(owner) = machine
            .owner_references()
            .iter()
            .find(|o| o.kind == "Machine")
        else {
            return Ok(None);
        };
        let machines: Api<DynamicObject> = Api::namespaced_with(
            self.management.clone(),
            &self.namespace,
            &super::core_resource("Machine"),
        );
        Ok(machines
            .get_opt(&owner.name)
            .await?
            .and_then(|m| m.data["spec"]["version"].as_str().map(str::to_owned)))
    }

    async fn register_node(
        &self,
        machine: &DynamicObject,
        name: &str,
        provider_id: &str,
    ) -> Result<()> {
        let spec = &machine.data["spec"];
        let mut labels: BTreeMap<String, String> =
            serde_json::from_value(spec["nodeLabels"].clone()).unwrap_or_default();
        labels.insert("kubernetes.io/hostname".into(), name.into());
        labels
            .entry("kubernetes.io/os".into())
            .or_insert_with(|| "linux".into());
        labels.insert("type".into(), "kwok".into());
        let capacity: BTreeMap<String, Value> =
            serde_json::from_value(spec["capacity"].clone()).unwrap_or_default();
        let capacity: BTreeMap<String, String> = capacity
            .into_iter()
            .map(|(k, v)| {
                let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                (k, text)
            })
            .collect();
        let kubelet_version = self.machine_version(machine).await?;
        // The status goes into the create too (a Node keeps it, as a kubelet registers): kwok,
        // seeing a Node without capacity, would give it its defaults.
        let status = json!({
            "capacity": capacity,
            "allocatable": capacity,
            // What a kubelet reports (Cluster API's NodeHealthy reads them all).
            "conditions": node_conditions(),
            // The kubelet of the Machine's Kubernetes version (kwok keeps what is set).
            "nodeInfo": {"kubeletVersion": kubelet_version},
        });
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {"kwok.x-k8s.io/node": "fake"},
            },
            "spec": {
                "providerID": provider_id,
                // As a kubelet that Karpenter's bootstrap configured registers.
                "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}],
            },
            "status": status.clone(),
        }))
        .map_err(|e| Error::Manifest {
            source_name: format!("Node {name}"),
            message: e.to_string(),
        })?;
        let nodes: Api<Node> = Api::all(self.workload.clone());
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        nodes
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await?;
        Ok(())
    }
}

/// A healthy kubelet's Node conditions.
fn node_conditions() -> Value {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let condition = |type_: &str, status: &str, reason: &str| {
        json!({"type": type_, "status": status, "reason": reason, "message": "test infrastructure",
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    json!([
        condition("Ready", "True", "KubeletReady"),
        condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
        condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
        condition("PIDPressure", "False", "KubeletHasSufficientPID"),
    ])
}
