//! [`ClusterState`]: the caches of every kind the provisioner and disruption decide over, fed by
//! one watch each and shared by both, so a decision reads memory instead of listing the cluster.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{DaemonSet, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};

use super::Cache;
use super::cache::Rejected;
use crate::api::{NodeClaim, NodeClass, NodePool};
use crate::rules::default_spread::{DefaultSpread, SchedulerConfig, Workloads};

/// Why the caches did not fill.
#[derive(Debug, thiserror::Error)]
#[error("waiting for the {kind} cache: {message}")]
pub struct StateError {
    kind: &'static str,
    message: String,
}

/// The caches. [`ClusterState::run`] starts their watches; [`ClusterState::view`] reads them.
#[derive(Debug, Default)]
pub struct ClusterState {
    pub nodes: Cache<Node>,
    pub pods: Cache<Pod>,
    /// Managed NodeClaims (the host's selector applies).
    pub claims: Cache<NodeClaim>,
    /// Managed NodePools; one that does not parse is in [`Cache::rejected`], not here.
    pub pools: Cache<NodePool>,
    pub classes: Cache<NodeClass>,
    pub daemonsets: Cache<DaemonSet>,
    pub pdbs: Cache<PodDisruptionBudget>,
    pub namespaces: Cache<Namespace>,
    /// Volume topology: claims, volumes and classes (where a pod's volumes let it run).
    pub volume_claims: Cache<PersistentVolumeClaim>,
    pub volumes: Cache<PersistentVolume>,
    pub storage_classes: Cache<StorageClass>,
    /// CSI attach limits: how many volumes each driver may attach to a node.
    pub csi_nodes: Cache<CSINode>,
    /// Node classes of the kinds providers serve (filled by the node class kinds controller).
    pub served: super::served::ServedClasses,
    /// kube-scheduler's configuration the simulation mirrors; with default topology spread
    /// constraints, the objects their selectors are deduced from are watched too.
    scheduler: Option<Arc<SchedulerConfig>>,
    pub services: Cache<Service>,
    pub replica_sets: Cache<ReplicaSet>,
    pub stateful_sets: Cache<StatefulSet>,
    pub replication_controllers: Cache<ReplicationController>,
    /// Dynamic Resource Allocation (`resource.k8s.io/v1`), watched when the host provisions for
    /// pods' ResourceClaims: the claims, their templates, the device classes and the slices the
    /// nodes' drivers published.
    dra: bool,
    pub resource_claims: Cache<ResourceClaim>,
    pub claim_templates: Cache<ResourceClaimTemplate>,
    pub device_classes: Cache<DeviceClass>,
    pub resource_slices: Cache<ResourceSlice>,
}

/// What a view holds of Dynamic Resource Allocation (empty unless the host watches it).
#[derive(Debug, Clone, Default)]
pub struct DraView {
    pub claims: Vec<Arc<ResourceClaim>>,
    pub templates: Vec<Arc<ResourceClaimTemplate>>,
    pub classes: Vec<Arc<DeviceClass>>,
    pub slices: Vec<Arc<ResourceSlice>>,
}

/// One moment of the caches: every object as the caches held it when the view was taken.
#[derive(Debug, Clone, Default)]
pub struct View {
    pub nodes: Vec<Arc<Node>>,
    pub pods: Vec<Arc<Pod>>,
    pub claims: Vec<Arc<NodeClaim>>,
    pub pools: Vec<Arc<NodePool>>,
    /// Managed NodePools that do not parse, by name.
    pub rejected_pools: BTreeMap<String, Rejected>,
    /// Node classes by [`super::served::class_key`]: `capstan.dev` NodeClasses by name, the
    /// kinds providers serve as `Kind.group/name`.
    pub classes: HashMap<String, Arc<NodeClass>>,
    pub daemonsets: Vec<Arc<DaemonSet>>,
    pub pdbs: Vec<Arc<PodDisruptionBudget>>,
    /// Namespace labels, for namespace selectors.
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    pub volume_claims: Vec<Arc<PersistentVolumeClaim>>,
    pub volumes: Vec<Arc<PersistentVolume>>,
    pub storage_classes: Vec<Arc<StorageClass>>,
    pub csi_nodes: Vec<Arc<CSINode>>,
    /// kube-scheduler's default topology spread constraints over the workloads they deduce
    /// selectors from, when the host is given them.
    pub default_spread: Option<Arc<DefaultSpread>>,
    /// ResourceClaims, their templates, DeviceClasses and ResourceSlices; none when the host
    /// does not watch them (`--ignore-dra-requests`).
    pub dra: Option<DraView>,
}

impl ClusterState {
    /// Caches that mirror `scheduler` (kube-scheduler's configuration) as well, when it has
    /// default topology spread constraints, and with `dra` Dynamic Resource Allocation's
    /// objects.
    pub fn new(scheduler: Option<SchedulerConfig>, dra: bool) -> Self {
        Self {
            scheduler: scheduler
                .filter(|c| !c.default_constraints().is_empty())
                .map(Arc::new),
            dra,
            ..Self::default()
        }
    }

    /// Starts every watch (`managed` selects the claims and pools this host manages) and
    /// returns once each cache holds its first list.
    pub async fn run(
        &self,
        client: &Client,
        managed: watcher::Config,
    ) -> Result<Vec<tokio::task::JoinHandle<()>>, StateError> {
        let all = watcher::Config::default;
        let mut tasks = vec![
            tokio::spawn(self.nodes.run(Api::all(client.clone()), all())),
            tokio::spawn(self.pods.run(Api::all(client.clone()), all())),
            tokio::spawn(self.claims.run(Api::all(client.clone()), managed.clone())),
            tokio::spawn(self.pools.run_lenient(client.clone(), managed)),
            tokio::spawn(self.classes.run(Api::all(client.clone()), all())),
            tokio::spawn(self.daemonsets.run(Api::all(client.clone()), all())),
            tokio::spawn(self.pdbs.run(Api::all(client.clone()), all())),
            tokio::spawn(self.namespaces.run(Api::all(client.clone()), all())),
            tokio::spawn(self.volume_claims.run(Api::all(client.clone()), all())),
            tokio::spawn(self.volumes.run(Api::all(client.clone()), all())),
            tokio::spawn(self.storage_classes.run(Api::all(client.clone()), all())),
            tokio::spawn(self.csi_nodes.run(Api::all(client.clone()), all())),
        ];
        if self.scheduler.is_some() {
            tasks.extend([
                tokio::spawn(self.services.run(Api::all(client.clone()), all())),
                tokio::spawn(self.replica_sets.run(Api::all(client.clone()), all())),
                tokio::spawn(self.stateful_sets.run(Api::all(client.clone()), all())),
                tokio::spawn(
                    self.replication_controllers
                        .run(Api::all(client.clone()), all()),
                ),
            ]);
        }
        if self.dra {
            tasks.extend([
                tokio::spawn(self.resource_claims.run(Api::all(client.clone()), all())),
                tokio::spawn(self.claim_templates.run(Api::all(client.clone()), all())),
                tokio::spawn(self.device_classes.run(Api::all(client.clone()), all())),
                tokio::spawn(self.resource_slices.run(Api::all(client.clone()), all())),
            ]);
        }
        let ready = |kind: &'static str| {
            move |err: kube::runtime::reflector::store::WriterDropped| StateError {
                kind,
                message: err.to_string(),
            }
        };
        self.nodes
            .store()
            .wait_until_ready()
            .await
            .map_err(ready("Node"))?;
        self.pods
            .store()
            .wait_until_ready()
            .await
            .map_err(ready("Pod"))?;
        self.claims
            .store()
            .wait_until_ready()
            .await
            .map_err(ready("NodeClaim"))?;
        self.pools
            .store()
            .wait_until_ready()
            .await
            .map_err(ready("NodePool"))?;
        self.classes
            .store()
            .wait_until_ready()
            .await
            .map_err(ready("NodeClass"))?;
        self.daemonsets
            .store()
            .wait_until_ready()
            .await
            .map_err(ready("DaemonSet"))?;
        self.pdbs
            .store()
            .wait_until_ready()
            .await
            .map_err(ready("PodDisruptionBudget"))?;
        self.namespaces
            .store()
            .wait_until_ready()
            .await
            .map_err(ready("Namespace"))?;
        self.volume_claims
            .store()
            .wait_until_ready()
            .await
            .map_err(ready("PersistentVolumeClaim"))?;
        self.volumes
            .store()
            .wait_until_ready()
            .await
            .map_err(ready("PersistentVolume"))?;
        self.storage_classes
            .store()
            .wait_until_ready()
            .await
            .map_err(ready("StorageClass"))?;
        self.csi_nodes
            .store()
            .wait_until_ready()
            .await
            .map_err(ready("CSINode"))?;
        if self.scheduler.is_some() {
            self.services
                .store()
                .wait_until_ready()
                .await
                .map_err(ready("Service"))?;
            self.replica_sets
                .store()
                .wait_until_ready()
                .await
                .map_err(ready("ReplicaSet"))?;
            self.stateful_sets
                .store()
                .wait_until_ready()
                .await
                .map_err(ready("StatefulSet"))?;
            self.replication_controllers
                .store()
                .wait_until_ready()
                .await
                .map_err(ready("ReplicationController"))?;
        }
        if self.dra {
            self.resource_claims
                .store()
                .wait_until_ready()
                .await
                .map_err(ready("ResourceClaim"))?;
            self.claim_templates
                .store()
                .wait_until_ready()
                .await
                .map_err(ready("ResourceClaimTemplate"))?;
            self.device_classes
                .store()
                .wait_until_ready()
                .await
                .map_err(ready("DeviceClass"))?;
            self.resource_slices
                .store()
                .wait_until_ready()
                .await
                .map_err(ready("ResourceSlice"))?;
        }
        Ok(tasks)
    }

    /// The sum of every cache's [`Cache::generation`] and the served classes' generation: it
    /// grows after any change the caches take. Read it before [`ClusterState::view`]: an
    /// unchanged value at a later read means that view is still the cluster's state.
    pub fn generation(&self) -> u64 {
        [
            self.nodes.generation(),
            self.pods.generation(),
            self.claims.generation(),
            self.pools.generation(),
            self.classes.generation(),
            self.daemonsets.generation(),
            self.pdbs.generation(),
            self.namespaces.generation(),
            self.volume_claims.generation(),
            self.volumes.generation(),
            self.storage_classes.generation(),
            self.csi_nodes.generation(),
            self.served.generation(),
            self.services.generation(),
            self.replica_sets.generation(),
            self.stateful_sets.generation(),
            self.replication_controllers.generation(),
            self.resource_claims.generation(),
            self.claim_templates.generation(),
            self.device_classes.generation(),
            self.resource_slices.generation(),
        ]
        .into_iter()
        .fold(0u64, u64::wrapping_add)
    }

    /// Everything the caches hold now.
    pub fn view(&self) -> View {
        View {
            nodes: self.nodes.store().state(),
            pods: self.pods.store().state(),
            claims: self.claims.state(),
            pools: self.pools.store().state(),
            rejected_pools: self.pools.rejected(),
            classes: self
                .classes
                .store()
                .state()
                .into_iter()
                .map(|c| (c.name_any(), c))
                .chain(self.served.all())
                .collect(),
            daemonsets: self.daemonsets.store().state(),
            pdbs: self.pdbs.store().state(),
            namespaces: self
                .namespaces
                .store()
                .state()
                .iter()
                .map(|n| (n.name_any(), n.labels().clone()))
                .collect(),
            volume_claims: self.volume_claims.store().state(),
            volumes: self.volumes.store().state(),
            storage_classes: self.storage_classes.store().state(),
            csi_nodes: self.csi_nodes.store().state(),
            default_spread: self.scheduler.as_ref().and_then(|config| {
                let workloads = Workloads {
                    services: self.services.store().state(),
                    replica_sets: self.replica_sets.store().state(),
                    stateful_sets: self.stateful_sets.store().state(),
                    replication_controllers: self.replication_controllers.store().state(),
                };
                DefaultSpread::new(config, &workloads).map(Arc::new)
            }),
            dra: self.dra.then(|| DraView {
                claims: self.resource_claims.store().state(),
                templates: self.claim_templates.store().state(),
                classes: self.device_classes.store().state(),
                slices: self.resource_slices.store().state(),
            }),
        }
    }
}
