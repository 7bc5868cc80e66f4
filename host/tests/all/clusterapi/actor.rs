//! A stand-in for Cluster API's MachineSet controller (and the infrastructure behind it), for
//! tests: it keeps each MachineDeployment's Machines at `spec.replicas` in the management
//! cluster, gives a new Machine a providerID after a delay and registers its Node in the
//! workload cluster, and on scale-down deletes the Machines marked
//! `cluster.x-k8s.io/delete-machine` first (then the newest), with their Nodes.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

/// The MachineDeployment name label Cluster API puts on Machines.
pub const DEPLOYMENT_NAME: &str = "cluster.x-k8s.io/deployment-name";
/// The annotation that marks a Machine to go first on scale-down.
pub const DELETE_MACHINE: &str = "cluster.x-k8s.io/delete-machine";

pub fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", kind))
}

/// What the actor did, for assertions.
#[derive(Debug, Default, Clone)]
pub struct Record {
    pub machines_created: usize,
    pub machines_deleted: Vec<String>,
}

/// The actor's configuration.
#[derive(Clone)]
pub struct Actor {
    pub management: Client,
    pub workload: Client,
    pub namespace: String,
    /// Time from a Machine's creation to its providerID and Node.
    pub provision_delay: Duration,
    pub record: std::sync::Arc<std::sync::Mutex<Record>>,
}

impl Actor {
    pub fn new(management: Client, workload: Client, namespace: &str) -> Self {
        Self {
            management,
            workload,
            namespace: namespace.to_owned(),
            provision_delay: Duration::from_millis(500),
            record: Default::default(),
        }
    }

    /// Runs the loop until the task is aborted.
    pub fn spawn(&self) -> tokio::task::JoinHandle<()> {
        let actor = self.clone();
        tokio::spawn(async move {
            loop {
                if let Err(err) = actor.step().await {
                    eprintln!("capi actor: {err}");
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        })
    }

    fn machines(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.management.clone(),
            &self.namespace,
            &resource("Machine"),
        )
    }

    /// One pass over every MachineDeployment.
    pub async fn step(&self) -> Result<(), kube::Error> {
        let deployments: Api<DynamicObject> = Api::namespaced_with(
            self.management.clone(),
            &self.namespace,
            &resource("MachineDeployment"),
        );
        for md in deployments.list(&ListParams::default()).await?.items {
            self.reconcile(&md).await?;
        }
        Ok(())
    }

    async fn reconcile(&self, md: &DynamicObject) -> Result<(), kube::Error> {
        let name = md.name_any();
        let want = md.data["spec"]["replicas"].as_i64().unwrap_or(0).max(0) as usize;
        let machines = self.machines();
        let mut live: Vec<DynamicObject> = machines
            .list(&ListParams::default().labels(&format!("{DEPLOYMENT_NAME}={name}")))
            .await?
            .items
            .into_iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
            .collect();
        while live.len() < want {
            live.push(self.create_machine(md).await?);
        }
        if live.len() > want {
            // Marked first, then newest.
            live.sort_by_key(|m| {
                (
                    !m.annotations().contains_key(DELETE_MACHINE),
                    std::cmp::Reverse(m.metadata.creation_timestamp.clone().map(|t| t.0)),
                )
            });
            for machine in live.drain(..live.len() - want) {
                self.delete_machine(&machine).await?;
            }
        }
        for machine in &live {
            self.provision(md, machine).await?;
        }
        Ok(())
    }

    async fn create_machine(&self, md: &DynamicObject) -> Result<DynamicObject, kube::Error> {
        let md_name = md.name_any();
        let template = &md.data["spec"]["template"];
        let mut labels: BTreeMap<String, String> =
            serde_json::from_value(template["metadata"]["labels"].clone()).unwrap_or_default();
        labels.insert(DEPLOYMENT_NAME.into(), md_name.clone());
        let mut machine = DynamicObject::new("", &resource("Machine"));
        machine.metadata.generate_name = Some(format!("{md_name}-"));
        machine.metadata.labels = Some(labels);
        machine.data = json!({"spec": template["spec"].clone()});
        machine.data["spec"]
            .as_object_mut()
            .map(|s| s.remove("providerID"));
        let created = self
            .machines()
            .create(&PostParams::default(), &machine)
            .await?;
        self.record.lock().unwrap().machines_created += 1;
        Ok(created)
    }

    async fn delete_machine(&self, machine: &DynamicObject) -> Result<(), kube::Error> {
        let name = machine.name_any();
        if let Some(node) = machine.data["status"]["nodeRef"]["name"].as_str() {
            let nodes: Api<Node> = Api::all(self.workload.clone());
            match nodes.delete(node, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(err) => return Err(err),
            }
        }
        match self
            .machines()
            .delete(&name, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => return Err(err),
        }
        self.record.lock().unwrap().machines_deleted.push(name);
        Ok(())
    }

    /// Gives an old enough Machine its providerID, Node and nodeRef.
    async fn provision(
        &self,
        md: &DynamicObject,
        machine: &DynamicObject,
    ) -> Result<(), kube::Error> {
        if machine.data["status"]["nodeRef"]["name"].is_string() {
            return Ok(());
        }
        let age = machine
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| k8s_openapi::jiff::Timestamp::now().as_millisecond() - t.0.as_millisecond())
            .unwrap_or(0);
        if age < self.provision_delay.as_millis() as i64 {
            return Ok(());
        }
        let name = machine.name_any();
        let provider_id = format!("capi-test://{}/{name}", self.namespace);
        let machines = self.machines();
        machines
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"providerID": provider_id}})),
            )
            .await?;
        self.create_node(md, &name, &provider_id).await?;
        machines
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"nodeRef": {"name": name}}})),
            )
            .await?;
        Ok(())
    }

    async fn create_node(
        &self,
        md: &DynamicObject,
        name: &str,
        provider_id: &str,
    ) -> Result<(), kube::Error> {
        let annotations = md.annotations();
        let capacity_annotation = |key: &str| {
            annotations
                .get(&format!("capacity.cluster-autoscaler.kubernetes.io/{key}"))
                .cloned()
        };
        let mut labels: BTreeMap<String, String> = BTreeMap::from([
            ("kubernetes.io/hostname".to_owned(), name.to_owned()),
            ("kubernetes.io/os".to_owned(), "linux".to_owned()),
            ("type".to_owned(), "kwok".to_owned()),
        ]);
        if let Some(text) = capacity_annotation("labels") {
            for pair in text.split(',').filter(|p| !p.is_empty()) {
                if let Some((k, v)) = pair.split_once('=') {
                    labels.insert(k.trim().to_owned(), v.trim().to_owned());
                }
            }
        }
        let mut capacity = serde_json::Map::new();
        for (annotation, resource) in [("cpu", "cpu"), ("memory", "memory"), ("maxPods", "pods")] {
            if let Some(value) = capacity_annotation(annotation) {
                capacity.insert(resource.to_owned(), Value::String(value));
            }
        }
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
                "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}],
            },
        }))
        .expect("node");
        let nodes: Api<Node> = Api::all(self.workload.clone());
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(err) => return Err(err),
        }
        nodes
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {
                    "capacity": capacity,
                    "allocatable": capacity,
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                    "message": "capi test actor"}],
                }})),
            )
            .await?;
        Ok(())
    }
}
