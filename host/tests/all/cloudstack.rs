//! The CloudStack provider (`cloudstack.wasm`, contract 0.4) against the CloudStack API emulator
//! (`tests/cloudstack-emulator`): loaded from a `Provider` resource with egress grants and
//! credentials from a Secret, on the real control plane, the emulator registering each booted
//! VM's Node as its kubelet would (kwok keeps it Ready). The conformance kit and the bad-input
//! cases run in-process in [`inprocess`]; the `CloudStackNodeClass` CRD against
//! karpenter-provider-cloudstack's in [`schema`].

mod inprocess;
mod schema;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use capstan::api::NodeClaim;
use capstan_cloudstack_emulator::catalog::{Catalog, readme, sample};
use capstan_cloudstack_emulator::{
    Config, DEFAULT_API_KEY, DEFAULT_SECRET_KEY, Emulator, EmulatorHandle, JobFailure, JobLatency,
};
use capstan_test_support::{ControlPlane, wait_until};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Secret};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::fixtures::wasm;
use crate::lifecycle::{
    Host, Names, RUN_LABEL, class_ready, cleanup, cluster, node_class, node_pool, node_pool_json,
};
use crate::provisioner_e2e::{GROUP, Pods, wait_running};

/// The NodeClass parameters for the emulator's sample cloud (the endpoint comes from the
/// Provider's configuration).
pub fn parameters() -> Value {
    json!({
        "zones": ["zone-a", "zone-b"],
        "serviceOfferingSelectorTerms": [{"name": "small"}, {"name": "medium"}, {"name": "large"}],
        "templateSelectorTerms": [{"tags": {"capstan": "node-image"}}],
        "networkSelectorTerms": [{"tags": {"capstan": "nodes"}}],
        "userData": "#cloud-config\nruncmd: [echo capstan]\n",
        "tags": {"team": "platform"},
        "pollMillis": 100,
        "launchTimeoutSeconds": 60,
    })
}

/// One test's cloud: the emulator, and a Provider loading `cloudstack.wasm` from a ConfigMap
/// with egress to the emulator only and the keys from a Secret.
struct World {
    cs: EmulatorHandle,
    client: Client,
    names: Names,
    namespace: String,
    provider: String,
}

impl World {
    async fn new(prefix: &str, secret_key: &str) -> (Self, &'static ControlPlane) {
        Self::with_catalog(prefix, secret_key, Catalog::sample()).await
    }

    /// [`World::new`] with the emulator serving `catalog`.
    async fn with_catalog(
        prefix: &str,
        secret_key: &str,
        catalog: Catalog,
    ) -> (Self, &'static ControlPlane) {
        let (cp, client) = cluster().await;
        let cs = Emulator::start(Config {
            kube: Some(client.clone()),
            job_latency: JobLatency::duration(Duration::from_millis(300)),
            catalog,
            ..Config::default()
        })
        .await
        .expect("emulator");
        let names = Names::new(prefix);
        let namespace = cp.create_namespace_unique(prefix).await.unwrap();
        let config_map = ConfigMap {
            metadata: ObjectMeta {
                name: Some("cloudstack".into()),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            binary_data: Some(
                [("provider.wasm".to_owned(), ByteString(wasm("cloudstack")))].into(),
            ),
            ..ConfigMap::default()
        };
        Api::<ConfigMap>::namespaced(client.clone(), &namespace)
            .create(&Default::default(), &config_map)
            .await
            .unwrap();
        let provider = names.name("cs");
        let world = Self {
            cs,
            client,
            names,
            namespace,
            provider,
        };
        world.put_secret(secret_key).await;
        world.put_provider(&[world.origin()]).await;
        (world, cp)
    }

    /// `http://127.0.0.1:<port>`.
    fn origin(&self) -> String {
        format!("http://{}", self.cs.addr())
    }

    async fn put_secret(&self, secret_key: &str) {
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "cloudstack", "namespace": self.namespace},
            "stringData": {"api-key": DEFAULT_API_KEY, "secret-key": secret_key},
        });
        Api::<Secret>::namespaced(self.client.clone(), &self.namespace)
            .patch(
                "cloudstack",
                &PatchParams::apply("capstan-tests").force(),
                &Patch::Apply(&secret),
            )
            .await
            .unwrap();
    }

    async fn put_provider(&self, egress: &[String]) {
        let secret =
            |key: &str| json!({"name": key, "secretKeyRef": {"name": "cloudstack", "key": key}});
        let value = json!({
            "apiVersion": "capstan.dev/v1alpha1",
            "kind": "Provider",
            "metadata": {"name": self.provider, "labels": {RUN_LABEL: self.names.run}},
            "spec": {
                "source": {"configMap": {"namespace": self.namespace, "name": "cloudstack", "key": "provider.wasm"}},
                "egress": egress,
                "config": [
                    secret("api-key"),
                    secret("secret-key"),
                    {"name": "endpoint", "value": self.cs.url()},
                    {"name": "cluster-name", "value": self.names.run},
                ],
                "limits": {"httpFirstByteTimeout": "3s", "httpBetweenBytesTimeout": "3s"},
            },
        });
        Api::<capstan::api::provider::Provider>::all(self.client.clone())
            .patch(
                &self.provider,
                &PatchParams::apply("capstan-tests").force(),
                &Patch::Apply(&value),
            )
            .await
            .unwrap();
    }

    fn host(&self, cp: &ControlPlane) -> Host {
        Host::start(
            cp,
            &self.names,
            &["--provider-source-namespace", &self.namespace],
        )
    }

    /// A NodeClass and a NodePool for this cloud.
    async fn class_and_pool(&self, parameters: Value) -> (String, String) {
        let (class, pool) = (self.names.name("nc"), self.names.name("pool"));
        node_class(
            &self.client,
            &self.names,
            &class,
            &self.provider,
            parameters,
        )
        .await;
        node_pool(&self.client, node_pool_json(&self.names, &pool, &class)).await;
        (class, pool)
    }

    /// Waits until NodeClass `class` is `Ready=False`; its reason and message.
    async fn wait_class_not_ready(&self, host: &Host, class: &str) -> (String, String) {
        wait_until(Duration::from_secs(60), "NodeClass not ready", || async {
            host.check_alive();
            Ok::<_, String>(
                class_ready(&self.client, class)
                    .await
                    .filter(|(status, _, _)| status == "False")
                    .map(|(_, reason, message)| (reason, message)),
            )
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()))
    }

    /// VMs that are not destroyed.
    fn live_vms(&self) -> Vec<capstan_cloudstack_emulator::Vm> {
        self.cs
            .vms()
            .into_iter()
            .filter(|vm| !matches!(vm.state, capstan_cloudstack_emulator::VmState::Destroyed))
            .collect()
    }

    /// Deletes the pods' namespace and the test's objects, then waits until every VM is
    /// expunged and every Node of the cloud is gone.
    async fn tear_down(&self, host: &Host, pods_ns: &str) {
        let _ = Api::<Namespace>::all(self.client.clone())
            .delete(pods_ns, &DeleteParams::default())
            .await;
        cleanup(&self.client, &self.names).await;
        let nodes: Api<Node> = Api::all(self.client.clone());
        wait_until(
            Duration::from_secs(180),
            "every VM expunged, no Node left",
            || async {
                host.check_alive();
                let _ = self.cs.settle(Duration::from_secs(5)).await;
                let vms = self.cs.vms().len();
                let ids: Vec<String> = self
                    .cs
                    .jobs()
                    .iter()
                    .filter_map(|j| j.instance_id.clone())
                    .collect();
                let left = nodes
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .into_iter()
                    .filter(|n| {
                        let id = n
                            .spec
                            .as_ref()
                            .and_then(|s| s.provider_id.clone())
                            .unwrap_or_default();
                        ids.iter().any(|vm| id.ends_with(vm.as_str()))
                    })
                    .count();
                Ok::<_, String>((vms == 0 && left == 0).then_some(()))
            },
        )
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{e}\nVMs: {:?}\nhost log:\n{}",
                self.cs.vms(),
                host.log_tail()
            )
        });
    }
}

async fn claims(client: &Client, names: &Names) -> Vec<NodeClaim> {
    Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default().labels(&names.selector()))
        .await
        .unwrap()
        .items
}

/// Warning Events in `default` (cluster-scoped objects) whose note contains `text`.
async fn notes_with(client: &Client, reason: &str, text: &str) -> Vec<String> {
    Api::<k8s_openapi::api::events::v1::Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.note)
        .filter(|n| n.contains(text))
        .collect()
}

/// Pending pods → VMs of the cheapest fitting offering in the first zone → Nodes → pods Running;
/// pods gone → every VM expunged and every Node deleted. Prints the time from pending to
/// Running and the API calls per launch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_pods_run_on_the_cheapest_offering_and_leave_nothing_behind() {
    let (world, cp) = World::new("cs-e2e", DEFAULT_SECRET_KEY).await;
    let host = world.host(cp);
    let (_, pool) = world.class_and_pool(parameters()).await;
    let ns = cp.create_namespace_unique("cs-pods").await.unwrap();
    let before = world.cs.requests().len();
    let started = Instant::now();
    // 1500m each, one per node: small (1 vCPU) is too small, large fits but costs more: medium.
    Pods::new(&world.client, &world.names, &ns, "web")
        .count(2)
        .cpu("1500m")
        .memory("512Mi")
        .node_selector(json!({"karpenter.sh/nodepool": pool}))
        .spec(json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
        ]}}}))
        .create()
        .await;
    let running = wait_running(&world.client, &host, &ns, 2, Duration::from_secs(180)).await;
    let to_running = started.elapsed();
    let vms = world.live_vms();
    assert_eq!(vms.len(), 2, "{vms:?}");
    let nodes: Api<Node> = Api::all(world.client.clone());
    for vm in &vms {
        assert_eq!(vm.service_offering_id, sample::MEDIUM, "{vm:?}");
        assert_eq!(vm.zone_id, sample::ZONE_A, "{vm:?}");
        assert_eq!(vm.template_id, sample::UBUNTU);
        let tags: BTreeMap<&str, &str> = vm
            .tags
            .iter()
            .map(|t| (t.key.as_str(), t.value.as_str()))
            .collect();
        assert_eq!(
            tags.get("capstan.dev/cluster"),
            Some(&world.names.run.as_str())
        );
        assert_eq!(tags.get("karpenter.sh/nodepool"), Some(&pool.as_str()));
        assert_eq!(tags.get("team"), Some(&"platform"));
        assert!(tags.contains_key("karpenter.sh/nodeclaim"), "{tags:?}");
        assert!(vm.user_data.is_some(), "user data sent");
        let node = nodes.get(&vm.name.to_lowercase()).await.unwrap();
        assert_eq!(
            node.spec.and_then(|s| s.provider_id),
            Some(format!("cloudstack://{}/{}", vm.zone_id, vm.id))
        );
    }
    let on: std::collections::BTreeSet<String> = running
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    assert_eq!(on.len(), 2, "one pod per medium node");
    let requests = world.cs.requests()[before..].to_vec();
    let count = |cmd: &str| {
        requests
            .iter()
            .filter(|r| r.command.as_deref() == Some(cmd))
            .count()
    };
    assert_eq!(count("deployVirtualMachine"), 2);
    assert_eq!(count("listTags"), 0, "tags come with the VM lists");
    let mut per_command = BTreeMap::<String, usize>::new();
    for r in &requests {
        *per_command
            .entry(r.command.clone().unwrap_or_default())
            .or_default() += 1;
    }
    // Catalog lists are shared by every call within 30 s; the rest is per launch (plus the
    // host's garbage-collection `list`).
    println!(
        "cloudstack e2e: 2 pods pending -> Running in {to_running:?}; {} API requests while launching 2 VMs: {per_command:?}",
        requests.len(),
    );
    let all = claims(&world.client, &world.names).await;
    assert_eq!(all.len(), 2);
    for c in &all {
        let labels = c.labels();
        assert_eq!(
            labels
                .get("node.kubernetes.io/instance-type")
                .map(String::as_str),
            Some("medium")
        );
    }

    world.tear_down(&host, &ns).await;
    let destroys: Vec<_> = world
        .cs
        .requests()
        .into_iter()
        .filter(|r| r.command.as_deref() == Some("destroyVirtualMachine"))
        .collect();
    assert!(destroys.len() >= 2, "{destroys:?}");
    host.check_alive();
}

/// No capacity in zone-a: the VM goes to zone-b; a deploy job that fails shows its reason on
/// the claim (an Event `LaunchFailed` with the job's text) and the launch is retried; nothing
/// leaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_capacity_falls_to_the_next_zone_and_a_failed_job_is_retried_with_its_reason() {
    let (world, cp) = World::new("cs-fail", DEFAULT_SECRET_KEY).await;
    assert!(world.cs.set_zone_capacity(sample::ZONE_A, Some(0)));
    world.cs.fail_next_job(JobFailure::deploy(
        530,
        "Host h-7 lost during deployment (emulated)",
    ));
    let host = world.host(cp);
    let (_, pool) = world.class_and_pool(parameters()).await;
    let ns = cp.create_namespace_unique("cs-fail-pods").await.unwrap();
    Pods::new(&world.client, &world.names, &ns, "web")
        .count(1)
        .cpu("500m")
        .node_selector(json!({"karpenter.sh/nodepool": pool}))
        .create()
        .await;
    wait_running(&world.client, &host, &ns, 1, Duration::from_secs(180)).await;
    let vms = world.live_vms();
    assert_eq!(vms.len(), 1, "the failed VMs were expunged: {vms:?}");
    assert_eq!(vms[0].zone_id, sample::ZONE_B);
    assert_eq!(vms[0].service_offering_id, sample::SMALL);
    let jobs = world.cs.jobs();
    let failed: Vec<_> = jobs.iter().filter_map(|j| j.error.clone()).collect();
    assert!(failed.iter().any(|(code, _)| *code == 533), "{failed:?}");
    assert!(failed.iter().any(|(code, _)| *code == 530), "{failed:?}");
    let notes = wait_until(
        Duration::from_secs(30),
        "the LaunchFailed Event",
        || async {
            let notes = notes_with(&world.client, "LaunchFailed", "lost during deployment").await;
            Ok::<_, String>((!notes.is_empty()).then_some(notes))
        },
    )
    .await
    .unwrap();
    assert!(notes[0].starts_with("CloudStackJobFailed: "), "{notes:?}");
    world.tear_down(&host, &ns).await;
}

/// A wrong secret key: the NodeClass says why (`CloudStackAuthFailed`), nothing is launched and
/// the host keeps running; the Secret rotated to the right key is picked up without a restart
/// and the pods run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_secret_is_a_clear_condition_until_the_secret_is_rotated() {
    let (world, cp) = World::new("cs-auth", "not-the-secret").await;
    let host = world.host(cp);
    let (class, pool) = world.class_and_pool(parameters()).await;
    let ns = cp.create_namespace_unique("cs-auth-pods").await.unwrap();
    Pods::new(&world.client, &world.names, &ns, "web")
        .count(1)
        .node_selector(json!({"karpenter.sh/nodepool": pool}))
        .create()
        .await;
    let (reason, message) = world.wait_class_not_ready(&host, &class).await;
    assert_eq!(reason, "NodeClassNotReady");
    assert!(message.starts_with("CloudStackAuthFailed: "), "{message}");
    assert!(
        !message.contains("not-the-secret"),
        "the secret never shows: {message}"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    host.check_alive();
    assert!(world.cs.vms().is_empty(), "nothing launched");
    assert!(
        !host.log().contains("not-the-secret"),
        "the secret never reaches the log"
    );

    world.put_secret(DEFAULT_SECRET_KEY).await;
    let rotated = Instant::now();
    wait_running(&world.client, &host, &ns, 1, Duration::from_secs(180)).await;
    println!(
        "cloudstack: rotated Secret picked up, pod Running {:?} later",
        rotated.elapsed()
    );
    world.tear_down(&host, &ns).await;
}

/// A NodeClass whose endpoint is outside the Provider's egress grants: denied by the host,
/// reported on the Provider (Event) and on the NodeClass (`EgressDenied`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_outside_the_egress_grants_is_denied_and_reported() {
    let (world, cp) = World::new("cs-egress", DEFAULT_SECRET_KEY).await;
    let host = world.host(cp);
    let mut params = parameters();
    // Another port on the same host: not granted.
    params["endpoint"] = json!("http://127.0.0.1:9/client/api");
    let (class, _) = world.class_and_pool(params).await;
    let (_, message) = world.wait_class_not_ready(&host, &class).await;
    assert!(message.starts_with("EgressDenied: "), "{message}");
    assert!(message.contains("127.0.0.1:9"), "{message}");
    let events = wait_until(Duration::from_secs(30), "the denial Event", || async {
        let notes: Vec<String> =
            Api::<k8s_openapi::api::events::v1::Event>::all(world.client.clone())
                .list(&ListParams::default().fields(&format!(
                    "regarding.kind=Provider,regarding.name={},reason=PermissionDenied",
                    world.provider
                )))
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .filter_map(|e| e.note)
                .collect();
        Ok::<_, String>((!notes.is_empty()).then_some(notes))
    })
    .await
    .unwrap();
    assert!(
        events.iter().any(|n| n.contains("127.0.0.1:9")),
        "{events:?}"
    );
    // Only the calls without a NodeClass (garbage collection's `list`) use the configured,
    // granted endpoint.
    let commands: Vec<Option<String>> =
        world.cs.requests().into_iter().map(|r| r.command).collect();
    assert!(
        commands
            .iter()
            .all(|c| c.as_deref() == Some("listVirtualMachines")),
        "{commands:?}"
    );
    host.check_alive();
    cleanup(&world.client, &world.names).await;
}

/// A new node image (the old template untagged, a new one tagged): the provider reports
/// `ImageDrifted`, disruption launches a replacement on the new template, moves the pod and
/// expunges the old VM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_template_drifts_the_nodes_and_replaces_them() {
    use crate::disruption::{App, deployment, pods, running};

    let (world, cp) = World::new("cs-drift", DEFAULT_SECRET_KEY).await;
    let host = world.host(cp);
    let (_, pool) = world.class_and_pool(parameters()).await;
    let ns = cp.create_namespace_unique("cs-drift-pods").await.unwrap();
    deployment(
        &world.client,
        &world.names,
        &ns,
        App {
            name: "web",
            replicas: 1,
            cpu: "500m",
            node_selector: json!({"karpenter.sh/nodepool": pool}),
            annotations: json!({}),
        },
    )
    .await;
    wait_running(&world.client, &host, &ns, 1, Duration::from_secs(180)).await;
    let before: Vec<String> = world.live_vms().into_iter().map(|vm| vm.id).collect();
    assert_eq!(before.len(), 1);

    const NEW_TEMPLATE: &str = "7e000000-0000-4000-8000-0000000000f2";
    world.cs.update_catalog(|catalog| {
        let mut next = catalog.templates[0].clone();
        catalog.templates[0].tags.clear();
        next.id = NEW_TEMPLATE.into();
        next.name = "ubuntu-24.04-kube-v2".into();
        catalog.templates.push(next);
    });
    let started = Instant::now();
    wait_until(
        Duration::from_secs(300),
        "the drifted VM replaced",
        || async {
            host.check_alive();
            let vms = world.live_vms();
            let pods = pods(&world.client, &ns).await;
            Ok::<_, String>(
                (running(&pods) == 1
                    && vms.len() == 1
                    && !before.contains(&vms[0].id)
                    && vms[0].template_id == NEW_TEMPLATE)
                    .then_some(()),
            )
        },
    )
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e}\nVMs: {:?}\nhost log:\n{}",
            world.cs.vms(),
            host.log_tail()
        )
    });
    let notes = notes_with(&world.client, "Drifted", "ImageDrifted").await;
    assert!(
        !notes.is_empty(),
        "the claim drifted with the provider's reason"
    );
    println!(
        "cloudstack: new template rolled out in {:?}",
        started.elapsed()
    );
    world.tear_down(&host, &ns).await;
}

/// karpenter-provider-cloudstack's README example, as the issue quotes it: a `CloudStackNodeClass`
/// and the NodePool that uses it.
const README_EXAMPLE: &str = r#"apiVersion: karpenter.k8s.cloudstack/v1
kind: CloudStackNodeClass
metadata:
  name: default
spec:
  zone: zone-01
  networkSelectorTerms:
    - tags:
        karpenter.sh/discovery: my-cluster
  serviceOfferingSelectorTerms:
    - tags:
        karpenter.sh/discovery: my-cluster
  templateSelectorTerms:
    - tags:
        os: ubuntu
        version: "22.04"
  userData: |
    #!/bin/bash
    echo "Node initialization script"
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      nodeClassRef:
        group: karpenter.k8s.cloudstack
        kind: CloudStackNodeClass
        name: default
      requirements:
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["on-demand"]
        - key: node.kubernetes.io/instance-type
          operator: In
          values: ["medium", "large"]
"#;

/// The README example applies unchanged (the CRD is the one `cloudstack.wasm` declares) and
/// provisions against a cloud shaped like it (zone `zone-01`, offerings `medium` and `large`):
/// the host validates the `CloudStackNodeClass` (`Ready`), a pending pod gets a `medium` VM with
/// the example's user data, and its Node carries Karpenter's node class label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cloudstack_readme_example_applies_unchanged_and_provisions() {
    let (world, cp) = World::with_catalog("cs-readme", DEFAULT_SECRET_KEY, Catalog::readme()).await;
    // The CRDs the component declares, as `capstan provider package` ships them.
    crate::node_class_kinds::install_declared_kind(cp, &wasm("cloudstack"), "CloudStackNodeClass")
        .await;
    let host = world.host(cp);

    let objects = capstan_test_support::parse_yaml("README example", README_EXAMPLE).unwrap();
    let discovery = kube::Discovery::new(world.client.clone())
        .run()
        .await
        .unwrap();
    for object in &objects {
        let types = object.types.clone().unwrap();
        let gvk = kube::core::GroupVersionKind::try_from(&types).unwrap();
        let (resource, _) = discovery.resolve_gvk(&gvk).unwrap();
        let api: Api<kube::api::DynamicObject> = Api::all_with(world.client.clone(), &resource);
        api.patch(
            &object.name_any(),
            &PatchParams::apply("capstan-tests").force(),
            &Patch::Apply(object),
        )
        .await
        .unwrap_or_else(|e| panic!("{} {}: {e}", types.kind, object.name_any()));
        // Applied unchanged; then labelled so that this test's host (`--selector`) manages it.
        let label = json!({"metadata": {"labels": {RUN_LABEL: world.names.run}}});
        api.patch(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&label),
        )
        .await
        .unwrap();
    }

    let classes: Api<kube::api::DynamicObject> = Api::all_with(
        world.client.clone(),
        &kube::api::ApiResource {
            group: "karpenter.k8s.cloudstack".into(),
            version: "v1".into(),
            api_version: "karpenter.k8s.cloudstack/v1".into(),
            kind: "CloudStackNodeClass".into(),
            plural: "cloudstacknodeclasses".into(),
        },
    );
    wait_until(
        Duration::from_secs(60),
        "CloudStackNodeClass Ready",
        || async {
            host.check_alive();
            let class = classes.get("default").await.map_err(|e| e.to_string())?;
            let ready = class.data["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned());
            Ok::<_, String>(ready.filter(|c| c["status"] == "True"))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));

    let ns = cp.create_namespace_unique("cs-readme-pods").await.unwrap();
    Pods::new(&world.client, &world.names, &ns, "app")
        .cpu("1")
        .memory("512Mi")
        .node_selector(json!({"karpenter.sh/nodepool": "default"}))
        .create()
        .await;
    let running = wait_running(&world.client, &host, &ns, 1, Duration::from_secs(180)).await;
    let vms = world.live_vms();
    assert_eq!(vms.len(), 1, "{vms:?}");
    let vm = &vms[0];
    assert_eq!(
        vm.service_offering_id,
        readme::MEDIUM,
        "the cheaper of medium and large"
    );
    assert_eq!(vm.zone_id, readme::ZONE);
    assert_eq!(vm.template_id, readme::UBUNTU);
    assert_eq!(vm.nics[0].network_id, readme::NETWORK);
    // Base64 of the example's user data (ByteString serializes as Base64).
    let sent = serde_json::to_value(ByteString(
        b"#!/bin/bash\necho \"Node initialization script\"\n".to_vec(),
    ))
    .unwrap();
    assert_eq!(vm.user_data.as_deref(), sent.as_str());
    let node_name = running[0].spec.as_ref().unwrap().node_name.clone().unwrap();
    let node = Api::<Node>::all(world.client.clone())
        .get(&node_name)
        .await
        .unwrap();
    let labels = node.labels();
    assert_eq!(
        labels["karpenter.k8s.cloudstack/cloudstacknodeclass"],
        "default"
    );
    assert_eq!(labels["node.kubernetes.io/instance-type"], "medium");
    assert_eq!(labels["topology.kubernetes.io/zone"], "zone-01");

    world.tear_down(&host, &ns).await;
    let _ = classes.delete("default", &DeleteParams::default()).await;
}

/// CloudStack beside another provider (docs/multi-provider.md): the CloudStack pool (weight 100)
/// takes the pods its cloud has room for; when the emulator answers `deployVirtualMachine` with
/// error 533 (no capacity), the provider says `insufficient-capacity` and the remaining pods run on
/// the kwok provider's pool (weight 10) of the same host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_cloudstack_cloud_bursts_to_another_providers_pool() {
    let (world, cp) = World::new("cs-burst", DEFAULT_SECRET_KEY).await;
    // Room for one VM (3-CPU pods fit only the 8-vCPU `large`, in zone A, two to a VM).
    assert!(world.cs.set_zone_capacity(sample::ZONE_A, Some(1)));
    assert!(world.cs.set_zone_capacity(sample::ZONE_B, Some(0)));
    let host = world.host(cp);
    let (_, cs_pool) = world.class_and_pool(parameters()).await;
    let pools = Api::<capstan::api::NodePool>::all(world.client.clone());
    pools
        .patch(
            &cs_pool,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"weight": 100, "template": {
                "metadata": {"labels": {GROUP: world.names.run}},
            }}})),
        )
        .await
        .unwrap();
    let (kwok_class, kwok_pool) = (world.names.name("kwok-nc"), world.names.name("kwok"));
    node_class(&world.client, &world.names, &kwok_class, "kwok", json!({})).await;
    let mut spec = node_pool_json(&world.names, &kwok_pool, &kwok_class);
    spec["spec"]["weight"] = json!(10);
    spec["spec"]["template"]["metadata"] = json!({"labels": {GROUP: world.names.run}});
    node_pool(&world.client, spec).await;

    let ns = cp.create_namespace_unique("cs-burst-pods").await.unwrap();
    let started = Instant::now();
    Pods::new(&world.client, &world.names, &ns, "app")
        .count(4)
        .cpu("3")
        .node_selector(json!({GROUP: world.names.run}))
        .create()
        .await;
    wait_running(&world.client, &host, &ns, 4, Duration::from_secs(120)).await;
    let took = started.elapsed();
    let by_pool = |pool: String| {
        let client = world.client.clone();
        async move {
            Api::<Node>::all(client)
                .list(&ListParams::default().labels(&format!("karpenter.sh/nodepool={pool}")))
                .await
                .unwrap()
                .items
                .len()
        }
    };
    let (on_cs, on_kwok) = (by_pool(cs_pool.clone()).await, by_pool(kwok_pool).await);
    println!(
        "CloudStack full after one VM: 4 pods Running after {took:?}, {on_cs} CloudStack node(s), {on_kwok} kwok node(s)"
    );
    assert_eq!(on_cs, 1, "{}", host.log_tail());
    assert!(on_kwok >= 1, "{}", host.log_tail());
    assert_eq!(world.live_vms().len(), 1);
    let failed: Vec<_> = world
        .cs
        .jobs()
        .iter()
        .filter_map(|j| j.error.clone())
        .collect();
    assert!(
        failed.iter().any(|(code, _)| *code == 533),
        "the cloud said it was full: {failed:?}"
    );
    world.tear_down(&host, &ns).await;
}
