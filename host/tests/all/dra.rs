//! Dynamic Resource Allocation end to end, on the real control plane: pods asking for GPUs through
//! ResourceClaimTemplates (a DeviceClass with a CEL selector) get nodes whose instance types carry
//! them, Karpenter's own DRA KWOK driver publishes the nodes' ResourceSlices from its `DRAConfig`
//! (the same object the kwok provider describes its instance types' devices from),
//! kube-controller-manager makes each pod its claim, kube-scheduler allocates the devices and binds
//! the pod, and the pods run. A pod asking for more than any type carries stays Pending, and the
//! host says why on it.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use std::cell::RefCell;
use std::collections::BTreeSet;

use capstan_test_support::{ControlPlane, repo_root, wait_until};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::fixtures::kwok_file;
use crate::lifecycle::{Host, Names, RUN_LABEL, capstan_notes, cluster};
use crate::provisioner::{claims, namespace, teardown};
use crate::provisioner_e2e::{GROUP, Pods, group_pool, wait_running};
use crate::verdict::explain_cli;

/// Karpenter's DRA KWOK driver, running against the control plane until dropped.
pub(crate) struct DraDriver {
    child: Child,
    log: PathBuf,
}

impl DraDriver {
    /// Builds it (cached; `tests/conformance-karpenter/dra-kwok-driver.sh`), installs its
    /// DRAConfig CRD and starts it.
    pub(crate) async fn start(cp: &ControlPlane, run: &str) -> Self {
        let script = repo_root().join("tests/conformance-karpenter/dra-kwok-driver.sh");
        let out = Command::new("bash").arg(&script).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8(out.stdout).unwrap();
        let mut lines = stdout.lines();
        let (bin, crd) = (lines.next().unwrap(), lines.next().unwrap());
        cp.install_crds_from_files(&[PathBuf::from(crd)])
            .await
            .unwrap();
        let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{run}-dra-driver.log"));
        let child = Command::new(bin)
            .args(["--health-probe-bind-address", "127.0.0.1:0"])
            .env("KUBECONFIG", cp.kubeconfig_path())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Self { child, log }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for DraDriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn draconfigs() -> ApiResource {
    ApiResource {
        group: "test.karpenter.sh".into(),
        version: "v1alpha1".into(),
        api_version: "test.karpenter.sh/v1alpha1".into(),
        kind: "DRAConfig".into(),
        plural: "draconfigs".into(),
    }
}

/// A kwok instance type of 8 CPUs with `price`.
fn instance_type(name: &str, price: f64) -> serde_json::Value {
    json!({
        "name": name, "architecture": "amd64", "operatingSystems": ["linux"],
        "resources": {"cpu": "8", "memory": "32Gi", "pods": "110"},
        "offerings": [{"capacityType": "on-demand", "zone": "test-zone-a", "price": price}],
    })
}

/// The pool of the driver's DRAConfig for instance type `name`: `gpus` GPUs.
fn gpu_pool(name: &str, gpus: usize) -> serde_json::Value {
    let devices: Vec<_> = (0..gpus)
        .map(|i| {
            json!({"name": format!("gpu-{i}"),
                   "attributes": {"type": {"string": "gpu"}, "index": {"int": i}},
                   "capacity": {"memory": {"value": "16Gi"}}})
        })
        .collect();
    json!({
        "name": format!("gpus-{gpus}"),
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [name]}
        ]}],
        "resourceSlices": [{"devices": devices}],
    })
}

pub(crate) async fn create_dynamic(
    client: &Client,
    resource: &ApiResource,
    ns: Option<&str>,
    object: serde_json::Value,
) {
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    let object: DynamicObject = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
}

pub(crate) fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

#[tokio::test]
async fn pods_asking_for_gpus_get_nodes_that_carry_them_and_run() {
    gpus_scenario("rust").await;
}

/// The same with the kwok provider in Python (the Python SDK's devices).
#[tokio::test]
async fn pods_asking_for_gpus_get_nodes_that_carry_them_and_run_python() {
    gpus_scenario("python").await;
}

/// Pods asking for 1, 2, 4, 8 and 16 GPUs with the kwok provider built in `language`.
async fn gpus_scenario(language: &str) {
    let (cp, client) = cluster().await;
    let names = Names::new(&format!("dra-{language}"));
    let driver_name = format!("gpu.{}.capstan.dev", names.run);
    let types = type_names(&names, &["cpu", "gpu1", "gpu4", "gpu8"]);
    // What the driver publishes, and what the kwok provider reads its types' devices from.
    let (driver, class) = gpu_devices(
        cp,
        &client,
        &names,
        vec![
            gpu_pool(&types[1], 1),
            gpu_pool(&types[2], 4),
            gpu_pool(&types[3], 8),
        ],
    )
    .await;
    // The CPU-only type is the cheapest: only devices can make the host pick the others.
    group_pool(
        &client,
        &names,
        json!({"instanceTypes": [
            instance_type(&types[0], 0.1),
            instance_type(&types[1], 1.0),
            instance_type(&types[2], 3.0),
            instance_type(&types[3], 5.0),
        ]}),
        None,
    )
    .await;
    let host = Host::start_with_kwok(
        cp,
        &names,
        &["--batch-idle-duration", "300ms"],
        &kwok_file(language),
    );
    let ns = namespace(cp, "dra").await;
    let templates = resource(
        "resource.k8s.io",
        "ResourceClaimTemplate",
        "resourceclaimtemplates",
    );
    for count in [1, 2, 4, 8, 16] {
        create_dynamic(
            &client,
            &templates,
            Some(&ns),
            json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": format!("gpus-{count}"), "namespace": ns},
                "spec": {"spec": {"devices": {"requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": class, "count": count}}
                ]}}},
            }),
        )
        .await;
    }
    let asking = |count: usize| {
        json!({
            "nodeSelector": {GROUP: names.run},
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": format!("gpus-{count}")}],
        })
    };
    for count in [1, 2, 4, 8] {
        Pods::new(&client, &names, &ns, &format!("gpus-{count}"))
            .spec(asking(count))
            .create()
            .await;
    }
    let running = wait_running(&client, &host, &ns, 4, Duration::from_secs(240)).await;

    // Each pod runs on a node whose type carries its GPUs, with its claim allocated there.
    let nodes = Api::<Node>::all(client.clone());
    let resource_claims = Api::<ResourceClaim>::namespaced(client.clone(), &ns);
    for pod in &running {
        let count: usize = pod.name_any()["gpus-".len()..]
            .trim_end_matches("-0")
            .parse()
            .unwrap();
        let node_name = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
        let node = nodes.get(&node_name).await.unwrap();
        let instance_type = node.labels()["node.kubernetes.io/instance-type"].clone();
        let carried = match types.iter().position(|t| *t == instance_type) {
            Some(1) => 1,
            Some(2) => 4,
            Some(3) => 8,
            other => panic!("{} on {instance_type} ({other:?})", pod.name_any()),
        };
        assert!(carried >= count, "{} on {instance_type}", pod.name_any());
        let claim_name = pod
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_ref())
            .and_then(|s| s.first())
            .and_then(|s| s.resource_claim_name.clone())
            .unwrap();
        let claim = resource_claims.get(&claim_name).await.unwrap();
        let results = claim
            .status
            .and_then(|s| s.allocation)
            .and_then(|a| a.devices)
            .and_then(|d| d.results)
            .unwrap_or_default();
        assert_eq!(results.len(), count, "{claim_name}");
        assert!(
            results
                .iter()
                .all(|r| r.driver == driver_name && r.pool.ends_with(&node_name))
        );
    }
    // Never a CPU-only node for them.
    let made = claims(&client, &names).await;
    assert!(
        made.iter()
            .all(|c| c.labels().get("node.kubernetes.io/instance-type") != Some(&types[0])),
        "{:?}",
        made.iter().map(|c| c.labels().clone()).collect::<Vec<_>>()
    );

    // 16 GPUs: no type carries them. No node is made, and the pod says why.
    Pods::new(&client, &names, &ns, "gpus-16")
        .spec(asking(16))
        .create()
        .await;
    let why = wait_until(
        Duration::from_secs(60),
        "gpus-16-0 FailedScheduling",
        || async {
            let notes = capstan_notes(&client, &ns, "gpus-16-0", "FailedScheduling").await;
            Ok::<_, kube::Error>(notes.into_iter().next())
        },
    )
    .await;
    let why = match why {
        Ok(why) => why,
        Err(err) => panic!(
            "{err}\nhost log:\n{}\ndriver log:\n{}",
            host.log_tail(),
            driver.log()
        ),
    };
    assert!(
        why.contains("carries the devices its ResourceClaims ask for"),
        "{why}"
    );
    let pending = Api::<Pod>::namespaced(client.clone(), &ns)
        .get("gpus-16-0")
        .await
        .unwrap();
    assert_eq!(
        pending.status.and_then(|s| s.phase).as_deref(),
        Some("Pending")
    );
    // `capstan explain pod` says the same, and for a running pod names its allocated devices.
    let report = explain_pod(cp, &format!("{ns}/gpus-16-0"));
    assert_eq!(report["decision"]["reason"], "FailedScheduling", "{report}");
    assert!(
        report["decision"]["note"]
            .as_str()
            .is_some_and(|n| n.contains("carries the devices its ResourceClaims ask for")),
        "{report}"
    );
    let report = explain_pod(cp, &format!("{ns}/gpus-4-0"));
    assert_eq!(report["phase"], "Running", "{report}");
    assert_eq!(
        report["claims"][0]["devices"].as_array().map(Vec::len),
        Some(4),
        "{report}"
    );
    let _ = Api::<DynamicObject>::all_with(client.clone(), &draconfigs())
        .delete(&names.name("gpus"), &Default::default())
        .await;
    teardown(&client, &names, &ns).await;
}

/// `capstan explain pod NS/NAME -o json` against the control plane.
fn explain_pod(cp: &ControlPlane, pod: &str) -> serde_json::Value {
    explain_cli(cp, &["pod", pod])
}

/// Karpenter's DRA KWOK driver started, its `DRAConfig` of driver `gpu.<run>.capstan.dev` with
/// `pools` (what the kwok provider reads its types' devices from too), and DeviceClass `<run>-gpu`
/// selecting its GPUs; returns the driver and the class's name.
async fn gpu_devices(
    cp: &ControlPlane,
    client: &Client,
    names: &Names,
    pools: Vec<serde_json::Value>,
) -> (DraDriver, String) {
    let driver_name = format!("gpu.{}.capstan.dev", names.run);
    let driver = DraDriver::start(cp, &names.run).await;
    create_dynamic(
        client,
        &draconfigs(),
        None,
        json!({
            "apiVersion": "test.karpenter.sh/v1alpha1", "kind": "DRAConfig",
            "metadata": {"name": names.name("gpus")},
            "spec": {"driver": driver_name, "pools": pools},
        }),
    )
    .await;
    let class = names.name("gpu");
    device_class(client, &class, &driver_name, "gpu").await;
    (driver, class)
}

/// The run's instance type names for `short` ones.
fn type_names(names: &Names, short: &[&str]) -> Vec<String> {
    short.iter().map(|t| names.name(t)).collect()
}

/// DeviceClass `name`: the devices of `driver` whose `type` attribute is `kind` (a CEL selector).
pub(crate) async fn device_class(client: &Client, name: &str, driver: &str, kind: &str) {
    create_dynamic(
        client,
        &resource("resource.k8s.io", "DeviceClass", "deviceclasses"),
        None,
        json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": format!(
                "device.driver == \"{driver}\" && device.attributes[\"{driver}\"].type == \"{kind}\""
            )}}]},
        }),
    )
    .await;
}

/// The instance type of `node`.
async fn instance_type_of(client: &Client, node: &str) -> String {
    let node = Api::<Node>::all(client.clone()).get(node).await.unwrap();
    node.labels()["node.kubernetes.io/instance-type"].clone()
}

/// Consolidation keeps every pod's devices: four pods of 2 GPUs share one 8-GPU node; scaled to
/// two, the node is replaced by the cheaper 4-GPU type (consolidation ran and weighed devices),
/// never by the CPU-only type that would be cheapest if devices did not count, and the pods run
/// there with their claims allocated by kube-scheduler.
#[tokio::test]
async fn consolidation_moves_gpu_pods_only_onto_nodes_that_carry_their_gpus() {
    let (cp, client) = cluster().await;
    let names = Names::new("dra-cons");
    let types = type_names(&names, &["cpu", "gpu4", "gpu8"]);
    let (driver, class) = gpu_devices(
        cp,
        &client,
        &names,
        vec![gpu_pool(&types[1], 4), gpu_pool(&types[2], 8)],
    )
    .await;
    let pool = group_pool(
        &client,
        &names,
        json!({"instanceTypes": [
            instance_type(&types[0], 0.1),
            instance_type(&types[1], 3.0),
            instance_type(&types[2], 5.0),
        ]}),
        None,
    )
    .await;
    Api::<DynamicObject>::all_with(
        client.clone(),
        &resource("karpenter.sh", "NodePool", "nodepools"),
    )
    .patch(
        &pool,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"disruption": {
            "consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
            "budgets": [{"nodes": "100%"}],
        }}})),
    )
    .await
    .unwrap();
    let host = Host::start(cp, &names, &["--batch-idle-duration", "300ms"]);
    let ns = namespace(cp, "dra-cons").await;
    create_dynamic(
        &client,
        &resource(
            "resource.k8s.io",
            "ResourceClaimTemplate",
            "resourceclaimtemplates",
        ),
        Some(&ns),
        json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "gpus-2", "namespace": ns},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpus", "exactly": {"deviceClassName": class, "count": 2}}
            ]}}},
        }),
    )
    .await;
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": ns},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": {"app": "trainer"}},
            "template": {
                "metadata": {"labels": {"app": "trainer", RUN_LABEL: names.run}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "nodeSelector": {GROUP: names.run},
                    "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpus-2"}],
                    "containers": [{"name": "app", "image": "fake",
                                    "resources": {"requests": {"cpu": "500m", "memory": "256Mi"},
                                                  "claims": [{"name": "gpus"}]}}],
                },
            },
        },
    }))
    .unwrap();
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    wait_running(&client, &host, &ns, 4, Duration::from_secs(240)).await;

    // Half the work goes: 4 GPUs are left to carry.
    deployments
        .patch(
            "trainer",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    // Every NodeClaim's type seen while it settles: never the CPU-only one.
    let seen = RefCell::new(BTreeSet::new());
    let settled = wait_until(
        Duration::from_secs(240),
        "two trainers Running on one 4-GPU node",
        || async {
            host.check_alive();
            for claim in claims(&client, &names).await {
                if let Some(t) = claim.labels().get("node.kubernetes.io/instance-type") {
                    seen.borrow_mut().insert(t.clone());
                }
            }
            let pods = Api::<Pod>::namespaced(client.clone(), &ns)
                .list(&Default::default())
                .await?
                .items;
            let nodes: BTreeSet<String> = pods
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
                .collect();
            let claims_now = claims(&client, &names).await;
            let done = pods.len() == 2
                && nodes.len() == 1
                && claims_now.len() == 1
                && claims_now[0]
                    .labels()
                    .get("node.kubernetes.io/instance-type")
                    == Some(&types[1]);
            Ok::<_, kube::Error>(done.then_some(nodes))
        },
    )
    .await;
    let nodes = match settled {
        Ok(nodes) => nodes,
        Err(err) => panic!(
            "{err}; types seen {:?}\nhost log:\n{}\ndriver log:\n{}",
            seen.borrow(),
            host.log_tail(),
            driver.log()
        ),
    };
    let seen = seen.into_inner();
    assert!(
        !seen.contains(&types[0]),
        "a CPU-only node was made: {seen:?}"
    );
    let node = nodes.into_iter().next().unwrap();
    assert_eq!(instance_type_of(&client, &node).await, types[1]);
    // Their claims are allocated on that node.
    for claim in Api::<ResourceClaim>::namespaced(client.clone(), &ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
    {
        let results = claim
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref())
            .and_then(|d| d.results.clone())
            .unwrap_or_default();
        assert_eq!(results.len(), 2, "{}", claim.name_any());
        assert!(
            results.iter().all(|r| r.pool.ends_with(&node)),
            "{results:?}"
        );
    }
    let _ = Api::<DynamicObject>::all_with(client.clone(), &draconfigs())
        .delete(&names.name("gpus"), &Default::default())
        .await;
    teardown(&client, &names, &ns).await;
}
