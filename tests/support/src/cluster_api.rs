//! Real Cluster API in the tests: a management cluster running Cluster API's core controllers
//! ([`Options::cluster_api_management`](crate::Options::cluster_api_management), which runs
//! `tests/control-plane/cp capi`), a workload cluster registered with it
//! ([`register_workload_cluster`]), and the tests' infrastructure provider
//! ([`infrastructure::TestInfrastructure`]).

pub mod infrastructure;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use crate::{ControlPlane, Error, Result};

/// Cluster API's core API group.
pub const CLUSTER_GROUP: &str = "cluster.x-k8s.io";
/// The API version of Cluster API's core objects the tests use.
pub const CLUSTER_VERSION: &str = "v1beta2";
/// The test infrastructure provider's API group (Cluster API's infrastructure group).
pub const INFRASTRUCTURE_GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// The test infrastructure provider's API version.
pub const INFRASTRUCTURE_VERSION: &str = "v1alpha1";
/// The test control plane's API group (Cluster API's control plane group).
pub const CONTROL_PLANE_GROUP: &str = "controlplane.cluster.x-k8s.io";

const FIELD_MANAGER: &str = "capstan-test-support";

/// A Cluster API core kind (`Cluster`, `MachineDeployment`, `MachineSet`, `Machine`, ...).
pub fn core_resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(CLUSTER_GROUP, CLUSTER_VERSION, kind))
}

/// The `TestControlPlane` kind.
pub fn control_plane_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        CONTROL_PLANE_GROUP,
        INFRASTRUCTURE_VERSION,
        "TestControlPlane",
    ))
}

/// A test infrastructure kind (`TestCluster`, `TestMachine`, `TestMachineTemplate`).
pub fn infrastructure_resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        INFRASTRUCTURE_GROUP,
        INFRASTRUCTURE_VERSION,
        kind,
    ))
}

fn manifest(what: &str, value: serde_json::Value) -> Result<DynamicObject> {
    serde_json::from_value(value).map_err(|e| Error::Manifest {
        source_name: what.to_owned(),
        message: e.to_string(),
    })
}

/// Registers `workload` with Cluster API as Cluster `name` in `namespace` of the management
/// cluster: its kubeconfig Secret `<name>-kubeconfig` (labelled with the cluster name, as Cluster
/// API's ClusterCache finds it), a `TestCluster` whose control-plane endpoint is the workload API
/// server, a `TestControlPlane` (an externally managed control plane; the test infrastructure
/// provider marks both ready), and the `Cluster`.
pub async fn register_workload_cluster(
    management: &Client,
    namespace: &str,
    name: &str,
    workload: &ControlPlane,
) -> Result<()> {
    let kubeconfig = std::fs::read_to_string(workload.kubeconfig_path())
        .map_err(crate::io_err(workload.kubeconfig_path()))?;
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": format!("{name}-kubeconfig"),
            "namespace": namespace,
            "labels": {"cluster.x-k8s.io/cluster-name": name},
        },
        "type": "cluster.x-k8s.io/secret",
        "stringData": {"value": kubeconfig},
    }))
    .map_err(|e| Error::Manifest {
        source_name: "kubeconfig Secret".into(),
        message: e.to_string(),
    })?;
    Api::<Secret>::namespaced(management.clone(), namespace)
        .patch(
            &format!("{name}-kubeconfig"),
            &apply,
            &Patch::Apply(&secret),
        )
        .await?;
    let endpoint = workload
        .server()
        .trim_start_matches("https://")
        .rsplit_once(':')
        .and_then(|(host, port)| Some((host.to_owned(), port.parse::<u16>().ok()?)))
        .ok_or_else(|| Error::Failed(format!("workload server {:?}", workload.server())))?;
    let test_cluster = manifest(
        "TestCluster",
        json!({
            "apiVersion": format!("{INFRASTRUCTURE_GROUP}/{INFRASTRUCTURE_VERSION}"),
            "kind": "TestCluster",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"controlPlaneEndpoint": {"host": endpoint.0, "port": endpoint.1}},
        }),
    )?;
    Api::<DynamicObject>::namespaced_with(
        management.clone(),
        namespace,
        &infrastructure_resource("TestCluster"),
    )
    .patch(name, &apply, &Patch::Apply(&test_cluster))
    .await?;
    let control_plane = manifest(
        "TestControlPlane",
        json!({
            "apiVersion": format!("{CONTROL_PLANE_GROUP}/{INFRASTRUCTURE_VERSION}"),
            "kind": "TestControlPlane",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"version": "v1.34.4"},
        }),
    )?;
    Api::<DynamicObject>::namespaced_with(management.clone(), namespace, &control_plane_resource())
        .patch(name, &apply, &Patch::Apply(&control_plane))
        .await?;
    let cluster = manifest(
        "Cluster",
        json!({
            "apiVersion": format!("{CLUSTER_GROUP}/{CLUSTER_VERSION}"),
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "infrastructureRef": {
                    "apiGroup": INFRASTRUCTURE_GROUP, "kind": "TestCluster", "name": name,
                },
                "controlPlaneRef": {
                    "apiGroup": CONTROL_PLANE_GROUP, "kind": "TestControlPlane", "name": name,
                },
            },
        }),
    )?;
    Api::<DynamicObject>::namespaced_with(management.clone(), namespace, &core_resource("Cluster"))
        .patch(name, &apply, &Patch::Apply(&cluster))
        .await?;
    Ok(())
}

/// A `TestMachineTemplate`: the Machines made from it get a Node with this capacity (`cpu`,
/// `memory`, `pods`) and these labels, `provision_delay_millis` after they are created.
pub fn machine_template(
    name: &str,
    capacity: serde_json::Value,
    node_labels: serde_json::Value,
    provision_delay_millis: u64,
) -> serde_json::Value {
    json!({
        "apiVersion": format!("{INFRASTRUCTURE_GROUP}/{INFRASTRUCTURE_VERSION}"),
        "kind": "TestMachineTemplate",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "capacity": capacity,
            "nodeLabels": node_labels,
            "provisionDelayMillis": provision_delay_millis,
        }}},
    })
}
