//! The Cluster API provider against real Cluster API: the workload cluster (the shared control
//! plane, with kube-scheduler and kwok) and a management cluster (an API server running Cluster
//! API's core controllers, built from the pinned module), each test in a namespace of its own with
//! a `Cluster` registered for the workload cluster and the tests' infrastructure provider
//! ([`TestInfrastructure`]) turning Machines into kwok Nodes.

use std::time::Duration;

use capstan::api::NodeClass;
use capstan::capability::Capabilities;
use capstan::capability::grants::{Cluster, parse};
use capstan::capability::kube::ClusterConnection;
use capstan::conformance;
use capstan::runtime::Limits;
use capstan::runtime::types::NodeClass as WitNodeClass;
use capstan_test_support::cluster_api::infrastructure::{Running, TestInfrastructure};
use capstan_test_support::cluster_api::{
    core_resource as resource, infrastructure_resource, machine_template, register_workload_cluster,
};
use capstan_test_support::{ControlPlane, Options, wait_until};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

/// The MachineDeployment name label Cluster API puts on Machines.
const DEPLOYMENT_NAME: &str = "cluster.x-k8s.io/deployment-name";
use crate::disruption::{App, deployment, pods as disruption_pods, running};
use crate::fixtures::{providers_dir, runtime};
use crate::lifecycle::{Host, Names, cleanup, cluster, node_class, node_pool, node_pool_json};
use crate::provisioner_e2e::{Pods, wait_running};

mod bench;
mod burst;
mod parity;

/// What the clusterapi provider needs, on the management cluster: its own MachineDeployments,
/// MachineSets and Machines (scope owned: labelled `capstan.dev/provider: clusterapi`), and to
/// read the CRDs and templates (scope any, read only: to scale from zero from an infrastructure
/// template's status).
pub const CLUSTERAPI_GRANTS: &str = r#"
- cluster: management
  apiGroups: [cluster.x-k8s.io]
  resources: [machinedeployments, machinedeployments/scale, machinesets, machinesets/scale, machines]
  verbs: [get, list, patch, delete]
  namespaces: ["*"]
  scope: owned
- cluster: management
  apiGroups: [infrastructure.cluster.x-k8s.io]
  resources: ["*"]
  verbs: [get]
  namespaces: ["*"]
  scope: any
- cluster: management
  apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [get]
  scope: any
"#;

/// The ownership mark that hands a MachineDeployment (and, through its template, its
/// MachineSets and Machines) to the provider named `clusterapi`.
const OWNED_BY_CLUSTERAPI: (&str, &str) = ("capstan.dev/provider", "clusterapi");

/// The management cluster: its own API server running Cluster API's core controllers.
async fn management() -> &'static ControlPlane {
    static MANAGEMENT: OnceCell<ControlPlane> = OnceCell::const_new();
    MANAGEMENT
        .get_or_init(|| async {
            ControlPlane::start(Options::cluster_api_management())
                .await
                .unwrap_or_else(|e| panic!("management cluster with Cluster API: {e}"))
        })
        .await
}

/// A MachineDeployment (v1beta2) with the member label, these annotations, and the provider's
/// ownership mark on it and its template.
fn machine_deployment(name: &str, annotations: Value) -> Value {
    let (mark, owner) = OWNED_BY_CLUSTERAPI;
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineDeployment",
        "metadata": {
            "name": name,
            "labels": {"node.cluster.x-k8s.io/karpenter-member": "", mark: owner},
            "annotations": annotations,
        },
        "spec": {
            "clusterName": "workload",
            "replicas": 0,
            "selector": {"matchLabels": {DEPLOYMENT_NAME: name}},
            "template": {
                "metadata": {"labels": {DEPLOYMENT_NAME: name, mark: owner}},
                "spec": {
                    "clusterName": "workload",
                    "version": "v1.34.4",
                    "bootstrap": {"dataSecretName": "bootstrap"},
                    "infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "TestMachineTemplate",
                        "name": format!("{name}-v1"),
                    },
                },
            },
        },
    })
}

fn capacity(cpu: &str, memory: &str, price: &str, max: &str) -> Value {
    json!({
        "capacity.cluster-autoscaler.kubernetes.io/cpu": cpu,
        "capacity.cluster-autoscaler.kubernetes.io/memory": memory,
        "capacity.cluster-autoscaler.kubernetes.io/maxPods": "110",
        "capacity.cluster-autoscaler.kubernetes.io/labels": "topology.kubernetes.io/zone=zone-a",
        "capstan.dev/price-per-hour": price,
        "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": max,
    })
}

/// The test infrastructure templates (`<name>-v1`, and `-v2`, `-v3` for rollouts) of a
/// MachineDeployment: Nodes with the capacity and labels its annotations promise, provisioned
/// 500 ms after the Machine, or never (`outcome` `Never`).
fn templates(md: &Value, outcome: &str) -> Vec<Value> {
    let name = md["metadata"]["name"].as_str().unwrap_or_default();
    let annotation = |key: &str| {
        md["metadata"]["annotations"][format!("capacity.cluster-autoscaler.kubernetes.io/{key}")]
            .as_str()
            .map(str::to_owned)
    };
    let mut capacity = serde_json::Map::new();
    for (key, resource) in [("cpu", "cpu"), ("memory", "memory"), ("maxPods", "pods")] {
        if let Some(value) = annotation(key) {
            capacity.insert(resource.into(), json!(value));
        }
    }
    let mut labels = serde_json::Map::new();
    for pair in annotation("labels").unwrap_or_default().split(',') {
        if let Some((k, v)) = pair.split_once('=') {
            labels.insert(k.trim().into(), json!(v.trim()));
        }
    }
    ["v1", "v2", "v3"]
        .iter()
        .map(|version| {
            let mut template = machine_template(
                &format!("{name}-{version}"),
                Value::Object(capacity.clone()),
                Value::Object(labels.clone()),
                500,
            );
            template["spec"]["template"]["spec"]["outcome"] = json!(outcome);
            template
        })
        .collect()
}

/// One test's world: a management namespace with a Cluster for the workload cluster,
/// MachineDeployments and their templates, and the test infrastructure provider running.
struct World {
    workload: Client,
    management: Client,
    namespace: String,
    infrastructure: Running,
}

impl World {
    async fn new(prefix: &str, deployments: &[Value]) -> Self {
        Self::with_outcome(prefix, deployments, "Provision").await
    }

    async fn with_outcome(prefix: &str, deployments: &[Value], outcome: &str) -> Self {
        let (workload_cp, workload) = cluster().await;
        let mgmt = management().await;
        let management = mgmt.client().unwrap();
        let namespace = mgmt.create_namespace_unique(prefix).await.unwrap();
        register_workload_cluster(&management, &namespace, "workload", workload_cp)
            .await
            .unwrap();
        let templates_api: Api<DynamicObject> = Api::namespaced_with(
            management.clone(),
            &namespace,
            &infrastructure_resource("TestMachineTemplate"),
        );
        let api: Api<DynamicObject> = Api::namespaced_with(
            management.clone(),
            &namespace,
            &resource("MachineDeployment"),
        );
        for md in deployments {
            for template in templates(md, outcome) {
                let object: DynamicObject = serde_json::from_value(template).unwrap();
                templates_api
                    .create(&PostParams::default(), &object)
                    .await
                    .unwrap();
            }
            let object: DynamicObject = serde_json::from_value(md.clone()).unwrap();
            api.create(&PostParams::default(), &object).await.unwrap();
        }
        let infrastructure =
            TestInfrastructure::new(management.clone(), workload.clone(), &namespace).spawn();
        Self {
            workload,
            management,
            namespace,
            infrastructure,
        }
    }

    /// Creates infrastructure `templates` and then MachineDeployment `md`.
    async fn add(&self, templates: &[Value], md: &Value) {
        let templates_api: Api<DynamicObject> = Api::namespaced_with(
            self.management.clone(),
            &self.namespace,
            &infrastructure_resource("TestMachineTemplate"),
        );
        for template in templates {
            let object: DynamicObject = serde_json::from_value(template.clone()).unwrap();
            templates_api
                .create(&PostParams::default(), &object)
                .await
                .unwrap();
        }
        let object: DynamicObject = serde_json::from_value(md.clone()).unwrap();
        self.deployments()
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
    }

    fn deployments(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.management.clone(),
            &self.namespace,
            &resource("MachineDeployment"),
        )
    }

    async fn replicas(&self, name: &str) -> i64 {
        self.deployments().get(name).await.unwrap().data["spec"]["replicas"]
            .as_i64()
            .unwrap_or(0)
    }

    async fn machines(&self) -> Vec<DynamicObject> {
        Api::<DynamicObject>::namespaced_with(
            self.management.clone(),
            &self.namespace,
            &resource("Machine"),
        )
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
    }

    fn parameters(&self) -> Value {
        json!({"namespace": self.namespace, "pollMillis": 200, "launchTimeoutSeconds": 60})
    }
}

fn grants_file() -> std::path::PathBuf {
    crate::lifecycle::write_once("clusterapi-grants.yaml", CLUSTERAPI_GRANTS)
}

/// `capstan run` with the clusterapi provider (from its file) and the management cluster.
async fn start_host(cp: &ControlPlane, names: &Names) -> Host {
    start_host_with(cp, names, &[]).await
}

/// [`start_host`] with more arguments.
async fn start_host_with(cp: &ControlPlane, names: &Names, extra: &[&str]) -> Host {
    let file = providers_dir().join("clusterapi.wasm");
    let provider = format!("clusterapi={}", file.display());
    let grants = format!("clusterapi={}", grants_file().display());
    let mut args = vec![
        "--provider",
        &provider,
        "--grants",
        &grants,
        "--management-kubeconfig",
        management().await.kubeconfig_path().to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    Host::start(cp, names, &args)
}

#[tokio::test]
async fn pending_pods_scale_a_machine_deployment_and_back() {
    let world = World::new(
        "capi-e2e",
        &[
            machine_deployment("small", capacity("2", "8Gi", "0.10", "5")),
            machine_deployment("large", capacity("8", "32Gi", "0.50", "3")),
        ],
    )
    .await;
    let (cp, client) = cluster().await;
    let names = Names::new("capi");
    let host = start_host(cp, &names).await;
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(&client, &names, &class, "clusterapi", world.parameters()).await;
    node_pool(&client, node_pool_json(&names, &pool, &class)).await;
    let ns = cp.create_namespace_unique("capi-pods").await.unwrap();

    // Three pods of 1 cpu in one batch: the cheapest MachineDeployment that holds them grows.
    Pods::new(&client, &names, &ns, "web")
        .count(3)
        .cpu("1")
        .node_selector(json!({"karpenter.sh/nodepool": pool}))
        .tolerations(json!([{"operator": "Exists"}]))
        .memory("256Mi")
        .create()
        .await;
    let running = wait_running(&client, &host, &ns, 3, Duration::from_secs(180)).await;
    let nodes: std::collections::BTreeSet<String> = running
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    // Every node is a claimed Machine of the MachineDeployment it reports, and the replicas
    // add up.
    let machines = world.machines().await;
    assert_eq!(machines.len(), nodes.len(), "{machines:?}");
    let mut per_deployment = std::collections::BTreeMap::<String, i64>::new();
    for machine in &machines {
        assert!(
            machine.labels().contains_key("capstan.dev/nodeclaim"),
            "{machine:?}"
        );
        let node_name = machine.data["status"]["nodeRef"]["name"].as_str().unwrap();
        assert!(
            nodes.contains(node_name),
            "{node_name} runs none of the pods"
        );
        let node = Api::<Node>::all(world.workload.clone())
            .get(node_name)
            .await
            .unwrap();
        assert_eq!(
            node.spec.clone().unwrap().provider_id,
            machine.data["spec"]["providerID"]
                .as_str()
                .map(str::to_owned)
        );
        let deployment = machine.labels()[DEPLOYMENT_NAME].clone();
        assert_eq!(
            node.labels()["node.kubernetes.io/instance-type"],
            deployment
        );
        *per_deployment.entry(deployment).or_default() += 1;
    }
    for name in ["small", "large"] {
        assert_eq!(
            world.replicas(name).await,
            per_deployment.get(name).copied().unwrap_or(0),
            "{name}"
        );
    }
    let launched: Vec<String> = per_deployment.keys().cloned().collect();
    eprintln!("capi e2e: {} nodes from {launched:?}", nodes.len());

    // Pods gone, claims deleted: the Machines go and the replicas come back down.
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
    cleanup(&client, &names).await;
    wait_until(Duration::from_secs(120), "replicas back to 0", || async {
        host.check_alive();
        let replicas = world.replicas("small").await + world.replicas("large").await;
        let machines = world.machines().await.len();
        Ok::<_, String>((replicas == 0 && machines == 0).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nhost log:\n{}", host.log_tail()));
    // Every machine that came up went again, the ones that ran the pods among them (a machine
    // the host gave up on under load, launch timeout, is replaced and also goes: none leaks).
    let record = world.infrastructure.record();
    let deleted: std::collections::BTreeSet<&String> = record.deleted.iter().collect();
    let provisioned: std::collections::BTreeSet<&String> = record.provisioned.iter().collect();
    assert!(provisioned.is_subset(&deleted), "{record:?}");
    assert!(deleted.len() >= nodes.len(), "{record:?}");
}

/// A new Machine template drifts the claims of its MachineDeployment (`MachineTemplateChanged`
/// from the provider): disruption launches a replacement Machine (from the new MachineSet), moves
/// the pods and removes the old Machine. The MachineDeployment rolls out `OnDelete`, as the
/// provider's README asks of MachineDeployments Capstan manages: Capstan replaces the Machines, not
/// Cluster API's rolling update.
#[tokio::test]
async fn a_machine_template_change_replaces_the_nodes() {
    let mut md = machine_deployment("roll", capacity("2", "8Gi", "0.10", "5"));
    md["spec"]["rollout"] = json!({"strategy": {"type": "OnDelete"}});
    let world = World::new("capi-roll", &[md]).await;
    let (cp, client) = cluster().await;
    let names = Names::new("capiroll");
    let host = start_host(cp, &names).await;
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(&client, &names, &class, "clusterapi", world.parameters()).await;
    node_pool(&client, node_pool_json(&names, &pool, &class)).await;
    let ns = cp.create_namespace_unique("capi-roll").await.unwrap();
    deployment(
        &client,
        &names,
        &ns,
        App {
            name: "web",
            replicas: 2,
            cpu: "500m",
            node_selector: json!({"karpenter.sh/nodepool": pool}),
            annotations: json!({}),
        },
    )
    .await;
    let before: std::collections::BTreeSet<String> =
        wait_running(&client, &host, &ns, 2, Duration::from_secs(180))
            .await
            .iter()
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect();
    let machines_before: Vec<String> = world
        .machines()
        .await
        .iter()
        .map(|m| m.name_any())
        .collect();

    world
        .deployments()
        .patch(
            "roll",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"template": {"spec": {
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                      "kind": "TestMachineTemplate", "name": "roll-v2"}}}}})),
        )
        .await
        .unwrap();
    let started = std::time::Instant::now();
    wait_until(
        Duration::from_secs(240),
        "the old Machines replaced",
        || async {
            host.check_alive();
            let pods = disruption_pods(&client, &ns).await;
            let nodes: std::collections::BTreeSet<String> = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| p.spec.as_ref()?.node_name.clone())
                .collect();
            let machines: Vec<String> = world
                .machines()
                .await
                .iter()
                .map(|m| m.name_any())
                .collect();
            Ok::<_, String>(
                (running(&pods) == 2
                    && nodes.is_disjoint(&before)
                    && machines.iter().all(|m| !machines_before.contains(m)))
                .then_some(()),
            )
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nhost log:\n{}", host.log_tail()));
    let drift_notes: Vec<String> =
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), "default")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("Drifted"))
            .filter_map(|e| e.note)
            .filter(|n| n.contains("MachineTemplateChanged"))
            .collect();
    assert!(
        !drift_notes.is_empty(),
        "a claim drifted with the provider's reason"
    );
    println!(
        "capi rollout: {} node(s) replaced in {:?}",
        before.len(),
        started.elapsed()
    );
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
    cleanup(&client, &names).await;
}

/// The provider loaded in-process with grants on the management cluster.
fn provider(world: &World, grants: &str) -> capstan::runtime::ProviderPre {
    provider_with_metrics(world, grants, std::sync::Arc::default())
}

/// [`provider`], counting its calls in `metrics`.
fn provider_with_metrics(
    world: &World,
    grants: &str,
    metrics: std::sync::Arc<capstan::capability::metrics::CapabilityMetrics>,
) -> capstan::runtime::ProviderPre {
    let caps = Capabilities::builder("clusterapi")
        .grants(parse::from_text(grants).unwrap())
        .metrics(metrics)
        .workload(ClusterConnection::new(
            Cluster::Workload,
            world.workload.clone(),
        ))
        .management(ClusterConnection::new(
            Cluster::Management,
            world.management.clone(),
        ))
        .build();
    runtime()
        .load(
            &std::fs::read(providers_dir().join("clusterapi.wasm")).unwrap(),
            Limits::default(),
            caps,
        )
        .unwrap()
}

fn wit_class(parameters: &Value) -> WitNodeClass {
    WitNodeClass {
        name: "capi".into(),
        parameters: parameters.to_string(),
    }
}

#[tokio::test]
async fn the_conformance_kit_passes() {
    let world = World::new(
        "capi-conf",
        &[machine_deployment(
            "conf",
            capacity("4", "16Gi", "0.2", "3"),
        )],
    )
    .await;
    let provider = provider(&world, CLUSTERAPI_GRANTS);
    let options = conformance::Options {
        node_class: wit_class(&world.parameters()),
        delete_interval: Duration::from_millis(500),
        delete_attempts: 60,
        ..conformance::Options::default()
    };
    let report = conformance::run(&provider, &options).await;
    assert!(report.passed(), "{report}");
    // It launched and removed one Machine, and left the replicas as it found them.
    let record = world.infrastructure.record();
    assert!(!record.provisioned.is_empty(), "{record:?}");
    assert_eq!(world.replicas("conf").await, 0);
}

#[tokio::test]
async fn malformed_annotations_make_the_node_class_not_ready() {
    let mut bad = capacity("4", "16Gi", "0.2", "3");
    bad["capacity.cluster-autoscaler.kubernetes.io/memory"] = json!("sixteen gigs");
    bad["capacity.cluster-autoscaler.kubernetes.io/taints"] = json!("gpu=true:NoWay");
    let mut taint = capacity("4", "16Gi", "0.2", "3");
    taint["capacity.cluster-autoscaler.kubernetes.io/taints"] = json!("gpu=true:Sometimes");
    let world = World::new(
        "capi-bad",
        &[
            machine_deployment("bad-memory", bad),
            machine_deployment("bad-taint", taint),
            machine_deployment("fine", capacity("2", "8Gi", "0.1", "3")),
        ],
    )
    .await;
    // In-process: validate-node-class names both MachineDeployments and their annotations.
    let provider = provider(&world, CLUSTERAPI_GRANTS);
    let err = provider
        .validate_node_class(&wit_class(&world.parameters()))
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(message.contains("bad-memory"), "{message}");
    assert!(message.contains("not a quantity"), "{message}");
    assert!(message.contains("bad-taint"), "{message}");
    assert!(
        message.contains("unknown taint effect \"Sometimes\""),
        "{message}"
    );
    // The good one still serves instance types.
    let catalog = provider
        .get_instance_types(&crate::fixtures::pool("p"), &wit_class(&world.parameters()))
        .await
        .unwrap();
    let view = capstan::provider::convert::catalog::CatalogView::new(&catalog.catalog).unwrap();
    let names: Vec<String> = view.instance_types().map(|it| it.name.to_owned()).collect();
    assert_eq!(names, vec!["fine".to_string()]);

    // Through the host: the NodeClass condition says so, and the host keeps running.
    let (cp, client) = cluster().await;
    let names = Names::new("capibad");
    let host = start_host(cp, &names).await;
    let class = names.name("nc");
    node_class(&client, &names, &class, "clusterapi", world.parameters()).await;
    let api = Api::<NodeClass>::all(client.clone());
    let condition = wait_until(Duration::from_secs(60), "NodeClass not ready", || async {
        host.check_alive();
        let class = api.get(&class).await?;
        Ok::<_, kube::Error>(class.status.and_then(|s| {
            s.conditions
                .into_iter()
                .find(|c| c.type_ == "Ready" && format!("{:?}", c.status) == "False")
        }))
    })
    .await
    .unwrap();
    assert_eq!(condition.reason.as_deref(), Some("InvalidParameters"));
    let message = condition.message.unwrap_or_default();
    assert!(
        message.contains("bad-memory") && message.contains("bad-taint"),
        "{message}"
    );
    host.check_alive();
    cleanup(&client, &names).await;
}

/// A claim for MachineDeployment `deployment`.
fn claim(name: &str, deployment: &str) -> capstan::runtime::types::NodeClaim {
    use capstan::runtime::types::{NodeClaim, Operator, Requirement, Resource};
    NodeClaim {
        node_pool_name: Some("p".into()),
        requirements: vec![Requirement {
            key: "node.kubernetes.io/instance-type".into(),
            operator: Operator::In,
            values: vec![deployment.into()],
            min_values: None,
        }],
        requests: vec![Resource {
            name: "cpu".into(),
            quantity: "1".into(),
        }],
        ..crate::fixtures::claim(name)
    }
}

#[tokio::test]
async fn a_launch_that_times_out_leaves_no_machine_behind() {
    // The infrastructure never delivers: no providerID within the launch timeout, here the
    // MachineDeployment's own (Cluster Autoscaler's `maxnodeprovisiontime`, shorter than the
    // NodeClass's).
    let mut annotations = capacity("4", "16Gi", "0.2", "3");
    annotations["cluster.x-k8s.io/autoscaling-options-maxnodeprovisiontime"] = json!("8s");
    let world = World::with_outcome(
        "capi-timeout",
        &[machine_deployment("slow", annotations)],
        "Never",
    )
    .await;
    let provider = provider(&world, CLUSTERAPI_GRANTS);
    let mut parameters = world.parameters();
    parameters["launchTimeoutSeconds"] = json!(30);
    let started = std::time::Instant::now();
    let err = provider
        .create(&claim("slow-claim", "slow"), &wit_class(&parameters))
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    let message = err.to_string();
    assert!(message.contains("LaunchTimeout"), "{message}");
    assert!(
        (Duration::from_secs(7)..Duration::from_secs(20)).contains(&elapsed),
        "timed out after {elapsed:?}, not the MachineDeployment's 8 s"
    );
    wait_until(Duration::from_secs(30), "no Machine left", || async {
        let machines = world.machines().await.len();
        let replicas = world.replicas("slow").await;
        Ok::<_, String>((machines == 0 && replicas == 0).then_some(()))
    })
    .await
    .unwrap();
    let record = world.infrastructure.record();
    assert_eq!(record.seen.len(), 1, "{record:?}");
    assert!(record.provisioned.is_empty(), "{record:?}");
}

#[tokio::test]
async fn a_changed_machine_template_drifts_its_machines() {
    let world = World::new(
        "capi-drift",
        &[machine_deployment(
            "drifty",
            capacity("4", "16Gi", "0.2", "3"),
        )],
    )
    .await;
    let provider = provider(&world, CLUSTERAPI_GRANTS);
    let class = wit_class(&world.parameters());
    let launched = provider
        .create(&claim("drift-claim", "drifty"), &class)
        .await
        .unwrap();
    assert!(
        launched
            .provider_id
            .as_deref()
            .is_some_and(|id| id.starts_with("capi-test://"))
    );
    // Idempotent: the same claim again is the same Machine.
    let again = provider
        .create(&claim("drift-claim", "drifty"), &class)
        .await
        .unwrap();
    assert_eq!(again.provider_id, launched.provider_id);
    assert_eq!(world.replicas("drifty").await, 1);
    assert_eq!(provider.is_drifted(&launched, &class).await.unwrap(), None);
    // A new infrastructure template: the Machine made from the old one has drifted.
    world
        .deployments()
        .patch(
            "drifty",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"template": {"spec": {
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                      "kind": "TestMachineTemplate", "name": "drifty-v2"}}}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        provider.is_drifted(&launched, &class).await.unwrap(),
        Some("MachineTemplateChanged".to_owned())
    );
    // get and list see it; delete removes it and then answers not-found.
    let id = launched.provider_id.clone().unwrap();
    assert_eq!(provider.get(&id).await.unwrap().name, "drift-claim");
    assert!(
        provider
            .list()
            .await
            .unwrap()
            .iter()
            .any(|c| c.provider_id.as_deref() == Some(id.as_str()))
    );
    provider.delete(&launched).await.unwrap();
    wait_until(
        Duration::from_secs(30),
        "delete answers not-found",
        || async {
            match provider.delete(&launched).await {
                Err(e) if e.to_string().contains("not-found") => Ok(Some(())),
                Ok(()) => Ok(None),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(world.replicas("drifty").await, 0);
}

#[tokio::test]
async fn concurrent_launches_share_one_scale_up() {
    let world = World::new(
        "capi-batch",
        &[machine_deployment(
            "batch",
            capacity("4", "16Gi", "0.2", "10"),
        )],
    )
    .await;
    let provider = provider(&world, CLUSTERAPI_GRANTS);
    let mut parameters = world.parameters();
    parameters["batchMillis"] = json!(1000);
    let class = wit_class(&parameters);
    let generation = |md: DynamicObject| md.metadata.generation.unwrap_or(0);
    let before = generation(world.deployments().get("batch").await.unwrap());
    let claims: Vec<_> = (0..5)
        .map(|i| claim(&format!("batch-{i}"), "batch"))
        .collect();
    let launched = futures::future::join_all(claims.iter().map(|c| provider.create(c, &class)))
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let ids: std::collections::BTreeSet<_> = launched
        .iter()
        .map(|c| c.provider_id.clone().unwrap())
        .collect();
    assert_eq!(ids.len(), 5, "five launches, five Machines: {ids:?}");
    assert_eq!(world.replicas("batch").await, 5);
    // Each scale request changes the spec once: five launches took fewer than five.
    let scale_requests = generation(world.deployments().get("batch").await.unwrap()) - before;
    eprintln!("5 concurrent launches: {scale_requests} scale request(s)");
    assert!(
        (1..=2).contains(&scale_requests),
        "{scale_requests} scale requests"
    );
    // Nothing is left waiting.
    let md = world.deployments().get("batch").await.unwrap();
    assert!(
        !md.annotations().contains_key("capstan.dev/launch-requests"),
        "{:?}",
        md.annotations()
    );
    for claim in &launched {
        provider.delete(claim).await.unwrap();
    }
    wait_until(Duration::from_secs(30), "all Machines gone", || async {
        let machines = world.machines().await.len();
        let replicas = world.replicas("batch").await;
        Ok::<_, String>((machines == 0 && replicas == 0).then_some(()))
    })
    .await
    .unwrap();
}

/// A NodePool referencing karpenter-provider-cluster-api's `ClusterAPINodeClass` (the CRD
/// `clusterapi.wasm` declares, applied on the workload cluster) launches from the
/// MachineDeployments its `scalableResourceSelector` picks, in any namespace; the Node carries
/// Karpenter's node class label.
#[tokio::test]
async fn a_cluster_api_node_class_pool_launches() {
    let names = Names::new("capi-kind");
    let mut md = machine_deployment("kinds-md", capacity("2", "8Gi", "0.10", "3"));
    md["metadata"]["labels"]["capstan.dev/test-run"] = json!(names.run);
    let world = World::new("capi-kind", &[md]).await;
    let (cp, client) = cluster().await;
    crate::node_class_kinds::install_declared_kind(
        cp,
        &std::fs::read(providers_dir().join("clusterapi.wasm")).unwrap(),
        "ClusterAPINodeClass",
    )
    .await;
    let host = start_host(cp, &names).await;

    let (class, pool) = (names.name("capinc"), names.name("pool"));
    let classes: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &kube::api::ApiResource {
            group: "karpenter.cluster.x-k8s.io".into(),
            version: "v1alpha1".into(),
            api_version: "karpenter.cluster.x-k8s.io/v1alpha1".into(),
            kind: "ClusterAPINodeClass".into(),
            plural: "clusterapinodeclasses".into(),
        },
    );
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1",
        "kind": "ClusterAPINodeClass",
        "metadata": {"name": class, "labels": {"capstan.dev/test-run": names.run}},
        "spec": {"scalableResourceSelector": {"matchLabels": {"capstan.dev/test-run": names.run}}},
    }))
    .unwrap();
    classes
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    let mut pool_json = node_pool_json(&names, &pool, &class);
    pool_json["spec"]["template"]["spec"]["nodeClassRef"] = json!({
        "group": "karpenter.cluster.x-k8s.io", "kind": "ClusterAPINodeClass", "name": class,
    });
    node_pool(&client, pool_json).await;
    let ns = cp.create_namespace_unique("capi-kind-pods").await.unwrap();
    Pods::new(&client, &names, &ns, "web")
        .cpu("1")
        .memory("256Mi")
        .node_selector(json!({"karpenter.sh/nodepool": pool}))
        .tolerations(json!([{"operator": "Exists"}]))
        .create()
        .await;
    let running = wait_running(&client, &host, &ns, 1, Duration::from_secs(180)).await;
    let node_name = running[0].spec.as_ref().unwrap().node_name.clone().unwrap();
    let node = Api::<Node>::all(client.clone())
        .get(&node_name)
        .await
        .unwrap();
    assert_eq!(
        node.labels()["karpenter.cluster.x-k8s.io/clusterapinodeclass"],
        class
    );
    assert_eq!(
        node.labels()["node.kubernetes.io/instance-type"],
        "kinds-md"
    );
    assert_eq!(world.replicas("kinds-md").await, 1);
    let ready = classes.get(&class).await.unwrap().data["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned());
    assert_eq!(ready.map(|c| c["status"].clone()), Some(json!("True")));

    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
    cleanup(&client, &names).await;
    wait_until(Duration::from_secs(120), "replicas back to 0", || async {
        host.check_alive();
        Ok::<_, String>((world.replicas("kinds-md").await == 0).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nhost log:\n{}", host.log_tail()));
    let _ = classes.delete(&class, &DeleteParams::default()).await;
}

/// Deleting a claim removes its Machine and no other, also while the MachineDeployment is
/// mid-rollout with several MachineSets (with the `OnDelete` strategy the old ones keep their
/// Machines until they are deleted): a plain scale-down of the MachineDeployment would shrink the
/// oldest MachineSet (or the newest, as the MachineDeployment controller computes it) instead of
/// the marked Machine's.
#[tokio::test]
async fn deleting_a_claim_mid_rollout_removes_its_machine_and_no_other() {
    let mut md = machine_deployment("mid", capacity("4", "16Gi", "0.2", "5"));
    md["spec"]["rollout"] = json!({"strategy": {"type": "OnDelete"}});
    let world = World::new("capi-mid", &[md]).await;
    let provider = provider(&world, CLUSTERAPI_GRANTS);
    let class = wit_class(&world.parameters());
    let sets = Api::<DynamicObject>::namespaced_with(
        world.management.clone(),
        &world.namespace,
        &resource("MachineSet"),
    );
    // One claim per template version: three MachineSets with a Machine each.
    let mut launched = Vec::new();
    for (i, version) in ["v1", "v2", "v3"].iter().enumerate() {
        if i > 0 {
            world
                .deployments()
                .patch(
                    "mid",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"spec": {"template": {"spec": {
                        "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                              "kind": "TestMachineTemplate",
                                              "name": format!("mid-{version}")}}}}})),
                )
                .await
                .unwrap();
            wait_until(Duration::from_secs(60), "a new MachineSet", || async {
                let n = sets.list(&ListParams::default()).await?.items.len();
                Ok::<_, kube::Error>((n == i + 1).then_some(()))
            })
            .await
            .unwrap();
        }
        let claim = claim(&format!("mid-{version}"), "mid");
        launched.push(provider.create(&claim, &class).await.unwrap());
    }
    let machine_of = |claim: &str| {
        let claim = claim.to_owned();
        let world = &world;
        async move {
            world
                .machines()
                .await
                .into_iter()
                .find(|m| m.labels().get("capstan.dev/nodeclaim") == Some(&claim))
        }
    };
    let set_of = |m: &DynamicObject| m.labels()["cluster.x-k8s.io/set-name"].clone();
    let mut machine_sets = std::collections::BTreeSet::new();
    for version in ["v1", "v2", "v3"] {
        machine_sets.insert(set_of(
            &machine_of(&format!("mid-{version}")).await.unwrap(),
        ));
    }
    assert_eq!(machine_sets.len(), 3, "one Machine in each MachineSet");

    // Each deleted claim takes its own Machine, never another: the middle, the newest, the oldest.
    let mut left: std::collections::BTreeSet<&str> = ["mid-v1", "mid-v2", "mid-v3"].into();
    for index in [1, 2, 0] {
        let gone = launched[index].name.clone();
        provider.delete(&launched[index]).await.unwrap();
        left.remove(gone.as_str());
        wait_until(
            Duration::from_secs(60),
            "the claimed Machine gone",
            || async { Ok::<_, String>(machine_of(&gone).await.is_none().then_some(())) },
        )
        .await
        .unwrap();
        // Settled: the MachineDeployment controller (unpaused) takes no other Machine.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let machines = world.machines().await;
        let claims: std::collections::BTreeSet<&str> = machines
            .iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
            .filter_map(|m| m.labels().get("capstan.dev/nodeclaim").map(String::as_str))
            .collect();
        assert_eq!(claims, left, "after deleting {gone}");
        assert_eq!(machines.len(), left.len(), "{machines:?}");
        assert_eq!(world.replicas("mid").await, left.len() as i64);
        let md = world.deployments().get("mid").await.unwrap();
        assert!(
            !md.annotations().contains_key("cluster.x-k8s.io/paused"),
            "{:?}",
            md.annotations()
        );
    }
}

/// A Machine claimed for a NodeClaim that does not exist (a host that died between launching and
/// recording the claim) is garbage-collected: the host's garbage collection lists it through the
/// provider and deletes it; Cluster API removes the Machine and its Node, and the replicas come
/// back down.
#[tokio::test]
async fn a_leaked_machine_is_garbage_collected() {
    let names = Names::new("capi-gc");
    let mut annotations = capacity("2", "8Gi", "0.10", "3");
    // The host manages only its run's instances (`--selector`): the node labels carry the run.
    annotations["capacity.cluster-autoscaler.kubernetes.io/labels"] = json!(format!(
        "topology.kubernetes.io/zone=zone-a,capstan.dev/test-run={}",
        names.run
    ));
    let world = World::new("capi-gc", &[machine_deployment("leak", annotations)]).await;
    let provider = provider(&world, CLUSTERAPI_GRANTS);
    let leaked = provider
        .create(
            &claim("capi-gc-leaked", "leak"),
            &wit_class(&world.parameters()),
        )
        .await
        .unwrap();
    let node_name = leaked.node_name.clone();
    assert_eq!(world.replicas("leak").await, 1);
    let (cp, _) = cluster().await;
    let host = start_host_with(cp, &names, &["--gc-interval", "2s", "--gc-grace", "1s"]).await;
    wait_until(
        Duration::from_secs(90),
        "the leaked Machine gone",
        || async {
            host.check_alive();
            let machines = world.machines().await.len();
            let replicas = world.replicas("leak").await;
            Ok::<_, String>((machines == 0 && replicas == 0).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nhost log:\n{}", host.log_tail()));
    if let Some(node) = node_name {
        wait_until(Duration::from_secs(30), "its Node gone", || async {
            let node = Api::<Node>::all(world.workload.clone())
                .get_opt(&node)
                .await;
            Ok::<_, String>(matches!(node, Ok(None)).then_some(()))
        })
        .await
        .unwrap();
    }
}

/// Consolidation on real Cluster API: of two nodes (one pod each), the one emptied when the
/// Deployment shrinks is removed — its Machine and Node go through Cluster API — and the Machine
/// still running a pod stays.
#[tokio::test]
async fn consolidation_removes_the_empty_machine_and_no_other() {
    let world = World::new(
        "capi-consol",
        &[machine_deployment(
            "consol",
            capacity("2", "8Gi", "0.10", "5"),
        )],
    )
    .await;
    let (cp, client) = cluster().await;
    let names = Names::new("capiconsol");
    let host = start_host(cp, &names).await;
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(&client, &names, &class, "clusterapi", world.parameters()).await;
    let mut pool_json = node_pool_json(&names, &pool, &class);
    pool_json["spec"]["disruption"] = json!({
        "consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
        "budgets": [{"nodes": "100%"}],
    });
    node_pool(&client, pool_json).await;
    let ns = cp.create_namespace_unique("capi-consol").await.unwrap();
    // One 1500m pod per 2-cpu node: two Machines.
    deployment(
        &client,
        &names,
        &ns,
        App {
            name: "web",
            replicas: 2,
            cpu: "1500m",
            node_selector: json!({"karpenter.sh/nodepool": pool}),
            annotations: json!({}),
        },
    )
    .await;
    wait_running(&client, &host, &ns, 2, Duration::from_secs(180)).await;
    assert_eq!(world.machines().await.len(), 2);
    assert_eq!(world.replicas("consol").await, 2);

    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), &ns)
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    let kept = wait_until(Duration::from_secs(180), "one Machine left", || async {
        host.check_alive();
        let pods = disruption_pods(&client, &ns).await;
        let busy: Vec<String> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect();
        let machines = world.machines().await;
        Ok::<_, String>(
            // `then`, not `then_some`: the indexing must wait for the lengths to be checked.
            (machines.len() == 1 && running(&pods) == 1 && busy.len() == 1).then(|| {
                (
                    machines[0].data["status"]["nodeRef"]["name"]
                        .as_str()
                        .map(str::to_owned),
                    busy[0].clone(),
                )
            }),
        )
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nhost log:\n{}", host.log_tail()));
    assert_eq!(
        kept.0.as_deref(),
        Some(kept.1.as_str()),
        "the busy node's Machine stays"
    );
    assert_eq!(world.replicas("consol").await, 1);
    assert_eq!(world.infrastructure.record().deleted.len(), 1);

    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
    cleanup(&client, &names).await;
}
