//! Node class kinds a provider serves, on the real control plane: Karpenter's `KWOKNodeClass`
//! (its CRD from the pinned Karpenter module) served by the kwok provider, as Karpenter's own
//! kwok provider serves it — labels, a missing or not-ready class, a Node that cannot register.
//! The CloudStack and Cluster API kinds are tested with their worlds (`cloudstack.rs`,
//! `clusterapi.rs`).

use std::time::Duration;

use capstan::api::NodeClaim;
use capstan_test_support::upstream::{self, KARPENTER_CRDS};
use capstan_test_support::wait_until;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::lifecycle::{
    Host, Names, RUN_LABEL, claim, claim_json, cleanup, cluster, condition, node_pool,
    node_pool_json, wait_claim_gone, wait_condition,
};
use crate::provisioner_e2e::{Pods, wait_running};

/// `karpenter.kwok.sh/v1alpha1 KWOKNodeClass`.
/// Installs the CRD of the one node class kind `component` declares, as `capstan provider
/// package` ships it, after checking that kind is `kind`.
pub(crate) async fn install_declared_kind(
    cp: &capstan_test_support::ControlPlane,
    component: &[u8],
    kind: &str,
) {
    let info = capstan::runtime::validate::inspect(
        component,
        capstan::runtime::validate::DEFAULT_MAX_COMPONENT_SIZE,
    )
    .unwrap();
    let kinds: Vec<&str> = info
        .node_class_kinds
        .iter()
        .map(|k| k.kind.as_str())
        .collect();
    assert_eq!(kinds, [kind]);
    let crd_file = crate::lifecycle::write_once(
        &format!("{}-crds.json", kind.to_lowercase()),
        &serde_json::to_string(&info.node_class_kinds[0].crd).unwrap(),
    );
    cp.install_crds_from_files(&[crd_file]).await.unwrap();
}

fn kwok_classes(client: &Client) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "karpenter.kwok.sh".into(),
        version: "v1alpha1".into(),
        api_version: "karpenter.kwok.sh/v1alpha1".into(),
        kind: "KWOKNodeClass".into(),
        plural: "kwoknodeclasses".into(),
    };
    Api::all_with(client.clone(), &resource)
}

/// The shared control plane with Karpenter's KWOKNodeClass CRD (from the pinned module).
async fn with_kwok_crd() -> (&'static capstan_test_support::ControlPlane, Client) {
    let (cp, client) = cluster().await;
    let crds = upstream::paths(&KARPENTER_CRDS).unwrap_or_else(|err| panic!("{err}"));
    cp.install_crds_from_files(&crds)
        .await
        .expect("Karpenter CRDs");
    (cp, client)
}

/// Creates a KWOKNodeClass labelled for this test.
async fn kwok_class(client: &Client, names: &Names, name: &str, spec: Value) -> DynamicObject {
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "karpenter.kwok.sh/v1alpha1",
        "kind": "KWOKNodeClass",
        "metadata": {"name": name, "labels": {RUN_LABEL: names.run}},
        "spec": spec,
    }))
    .unwrap();
    kwok_classes(client)
        .create(&PostParams::default(), &object)
        .await
        .unwrap()
}

/// `nodeClassRef` to KWOKNodeClass `name`.
fn kwok_ref(name: &str) -> Value {
    json!({"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": name})
}

/// Creates NodePool `pool` of KWOKNodeClass `class`.
async fn kwok_pool(client: &Client, names: &Names, pool: &str, class: &str) {
    let mut json = node_pool_json(names, pool, class);
    json["spec"]["template"]["spec"]["nodeClassRef"] = kwok_ref(class);
    node_pool(client, json).await;
}

/// Creates NodeClaim `name` of pool `pool` and KWOKNodeClass `class`, with extra labels.
async fn kwok_claim(
    client: &Client,
    names: &Names,
    name: &str,
    pool: &str,
    class: &str,
    labels: Value,
) {
    let mut json = claim_json(names, name, pool, class);
    json["spec"]["nodeClassRef"] = kwok_ref(class);
    if let (Some(into), Some(extra)) = (
        json["metadata"]["labels"].as_object_mut(),
        labels.as_object(),
    ) {
        into.extend(extra.clone());
    }
    claim(client, json).await;
}

/// A ValidatingAdmissionPolicy with its binding, deleted on drop (best effort).
struct Policy {
    client: Client,
    name: String,
}

impl Policy {
    /// Denies `operation` on `resource` (`group`/`version`) when `deny_if` (CEL) holds.
    async fn create(
        client: &Client,
        name: &str,
        (group, version, resource): (&str, &str, &str),
        operation: &str,
        deny_if: &str,
    ) -> Self {
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": [group], "apiVersions": [version],
                    "resources": [resource], "operations": [operation],
                }]},
                "validations": [{"expression": format!("!({deny_if})")}],
            },
        }))
        .unwrap();
        let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        }))
        .unwrap();
        Api::<ValidatingAdmissionPolicy>::all(client.clone())
            .create(&PostParams::default(), &policy)
            .await
            .unwrap();
        Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
        Self {
            client: client.clone(),
            name: name.to_owned(),
        }
    }
}

impl Drop for Policy {
    fn drop(&mut self) {
        let (client, name) = (self.client.clone(), self.name.clone());
        // Tests run on a multi-threaded runtime; a best-effort cleanup in the background.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
                    .delete(&name, &DeleteParams::default())
                    .await;
                let _ = Api::<ValidatingAdmissionPolicy>::all(client)
                    .delete(&name, &DeleteParams::default())
                    .await;
            });
        }
    }
}

/// The `Ready` condition of a served object: (status, reason, observedGeneration).
fn ready(object: &DynamicObject) -> Option<(String, String, Option<i64>)> {
    let conditions = object.data.pointer("/status/conditions")?.as_array()?;
    let ready = conditions.iter().find(|c| c["type"] == "Ready")?;
    Some((
        ready["status"].as_str()?.to_owned(),
        ready["reason"].as_str().unwrap_or_default().to_owned(),
        ready["observedGeneration"].as_i64(),
    ))
}

/// A NodePool referencing a KWOKNodeClass provisions Nodes labelled as Karpenter's kwok
/// provider labels them, after the class's `nodeRegistrationDelay`; the host keeps the class's
/// `Ready` condition (its observed generation is the host's).
#[tokio::test]
async fn a_kwok_node_class_pool_provisions_nodes_with_karpenters_labels() {
    provisions_nodes_with_karpenters_labels("rust").await;
}

/// The same with the kwok provider in Python: it declares the same KWOKNodeClass CRD (appended
/// to its component by `providers-wasm/python/node_class_crds.py`) and reads the class as the
/// Rust one does.
#[tokio::test]
async fn a_python_provider_serves_the_kwok_node_class_too() {
    provisions_nodes_with_karpenters_labels("python").await;
}

async fn provisions_nodes_with_karpenters_labels(language: &str) {
    let (cp, client) = with_kwok_crd().await;
    let names = Names::new(&format!("kinds-kwok-{language}"));
    let host = Host::start_with_kwok(cp, &names, &[], &crate::fixtures::kwok_file(language));
    let (class, pool) = (names.name("kwoknc"), names.name("pool"));
    let created = kwok_class(
        &client,
        &names,
        &class,
        json!({"nodeRegistrationDelay": "3s"}),
    )
    .await;
    kwok_pool(&client, &names, &pool, &class).await;

    let generation = created.metadata.generation;
    wait_until(
        Duration::from_secs(60),
        "KWOKNodeClass validated by the host",
        || async {
            host.check_alive();
            let object = kwok_classes(&client).get(&class).await?;
            Ok::<_, kube::Error>(ready(&object).filter(|(status, reason, observed)| {
                status == "True" && reason == "Ready" && *observed == generation
            }))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));

    let ns = cp.create_namespace_unique("kinds-kwok").await.unwrap();
    Pods::new(&client, &names, &ns, "app")
        .cpu("1")
        .node_selector(json!({"karpenter.sh/nodepool": pool}))
        .create()
        .await;
    let running = wait_running(&client, &host, &ns, 1, Duration::from_secs(120)).await;
    let node_name = running[0].spec.as_ref().unwrap().node_name.clone().unwrap();
    let node = Api::<Node>::all(client.clone())
        .get(&node_name)
        .await
        .unwrap();
    let labels = node.labels();
    assert_eq!(
        labels["karpenter.kwok.sh/kwoknodeclass"], class,
        "{labels:?}"
    );
    assert_eq!(labels["karpenter.sh/nodepool"], pool);
    let cpu = &labels["karpenter.kwok.sh/instance-cpu"];
    assert_eq!(
        &labels["karpenter.kwok.sh/instance-size"], cpu,
        "the vCPU count, as Karpenter's kwok"
    );
    assert!(cpu.parse::<u32>().is_ok(), "{cpu}");
    let memory = &labels["karpenter.kwok.sh/instance-memory"];
    assert!(
        memory.ends_with("Gi"),
        "a quantity, as Karpenter's kwok: {memory}"
    );
    assert_eq!(labels["kwok.x-k8s.io/node"], "fake");

    // The claim carries the node class label too, and its Node registered after the delay.
    let claims: Vec<NodeClaim> = Api::<NodeClaim>::all(client.clone())
        .list(&kube::api::ListParams::default().labels(&names.selector()))
        .await
        .unwrap()
        .items;
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].labels()["karpenter.kwok.sh/kwoknodeclass"], class);
    let seconds = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time| t.0.as_second();
    let waited = seconds(node.metadata.creation_timestamp.as_ref().unwrap())
        - seconds(claims[0].metadata.creation_timestamp.as_ref().unwrap());
    assert!(
        waited >= 2,
        "the Node registered {waited} s after its claim, not after 3s"
    );

    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
    cleanup(&client, &names).await;
    let _ = kwok_classes(&client)
        .delete(&class, &DeleteParams::default())
        .await;
}

/// As in Karpenter: a claim whose KWOKNodeClass does not exist is deleted, and so is one whose
/// class is `Ready=False` (held there with a ValidatingAdmissionPolicy on the status, as
/// Karpenter's suite does, so the host cannot set it back).
#[tokio::test]
async fn a_missing_or_not_ready_kwok_node_class_deletes_the_claim() {
    let (cp, client) = with_kwok_crd().await;
    let names = Names::new("kinds-gone");
    let host = Host::start(cp, &names, &[]);
    let (missing_class, missing_pool) = (names.name("no-such-class"), names.name("pool-missing"));
    kwok_pool(&client, &names, &missing_pool, &missing_class).await;
    let missing = names.name("missing");
    kwok_claim(
        &client,
        &names,
        &missing,
        &missing_pool,
        &missing_class,
        json!({}),
    )
    .await;
    wait_claim_gone(&client, &host, &missing, Duration::from_secs(60)).await;

    let (class, pool) = (names.name("notready"), names.name("pool"));
    kwok_class(&client, &names, &class, json!({})).await;
    kwok_pool(&client, &names, &pool, &class).await;
    let _policy = Policy::create(
        &client,
        &names.name("hold-status"),
        ("karpenter.kwok.sh", "v1alpha1", "kwoknodeclasses/status"),
        "UPDATE",
        &format!(
            "object.metadata.name == '{class}' && !object.status.conditions.filter(c, c.type == 'Ready').all(c, c.reason == 'TestingNotReady')"
        ),
    )
    .await;
    // The policy takes a moment to apply: set Ready=False until it stays so.
    wait_until(
        Duration::from_secs(60),
        "KWOKNodeClass held not ready",
        || async {
            host.check_alive();
            let patch = json!({"status": {"conditions": [{
                "type": "Ready", "status": "False", "reason": "TestingNotReady",
                "message": "NodeClass is not ready", "lastTransitionTime": "2024-01-01T01:01:01Z",
            }]}});
            kwok_classes(&client)
                .patch_status(&class, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            tokio::time::sleep(Duration::from_secs(3)).await;
            let object = kwok_classes(&client).get(&class).await?;
            Ok::<_, kube::Error>(ready(&object).filter(|(status, _, _)| status == "False"))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    let not_ready = names.name("notready-claim");
    kwok_claim(&client, &names, &not_ready, &pool, &class, json!({})).await;
    wait_claim_gone(&client, &host, &not_ready, Duration::from_secs(60)).await;
    let log = host.log();
    assert!(log.contains("NodeClassNotReady"), "{}", host.log_tail());

    cleanup(&client, &names).await;
    let _ = kwok_classes(&client)
        .delete(&class, &DeleteParams::default())
        .await;
}

/// The host writes a served class's `Ready` once per generation and verdict: a `Ready=False`
/// another writer sets afterwards (an operator holding the class back, with no admission policy
/// to keep the host out) stands, a claim of the class is deleted, and a change of the class's
/// spec brings the host's verdict back.
#[tokio::test]
async fn another_writers_not_ready_stands_until_the_class_changes() {
    let (cp, client) = with_kwok_crd().await;
    let names = Names::new("kinds-held");
    let host = Host::start(cp, &names, &[]);
    let (class, pool) = (names.name("held"), names.name("pool"));
    let created = kwok_class(&client, &names, &class, json!({})).await;
    kwok_pool(&client, &names, &pool, &class).await;
    let verdict = |generation: Option<i64>| {
        let (client, class) = (client.clone(), class.clone());
        async move {
            let object = kwok_classes(&client).get(&class).await?;
            Ok::<_, kube::Error>(ready(&object).filter(|(status, reason, observed)| {
                status == "True" && reason == "Ready" && *observed == generation
            }))
        }
    };
    wait_until(Duration::from_secs(60), "the host's Ready=True", || {
        host.check_alive();
        verdict(created.metadata.generation)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));

    let patch = json!({"status": {"conditions": [{
        "type": "Ready", "status": "False", "reason": "HeldByOperator",
        "message": "held for maintenance", "lastTransitionTime": "2024-01-01T01:01:01Z",
        "observedGeneration": created.metadata.generation,
    }]}});
    kwok_classes(&client)
        .patch_status(&class, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let object = kwok_classes(&client).get(&class).await.unwrap();
    assert_eq!(
        ready(&object).map(|(status, reason, _)| (status, reason)),
        Some(("False".to_owned(), "HeldByOperator".to_owned())),
        "the host overwrote another writer's Ready\n{}",
        host.log_tail()
    );
    let held = names.name("held-claim");
    kwok_claim(&client, &names, &held, &pool, &class, json!({})).await;
    wait_claim_gone(&client, &host, &held, Duration::from_secs(60)).await;

    // A new generation gets the host's verdict again.
    let bumped = kwok_classes(&client)
        .patch(
            &class,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"nodeRegistrationDelay": "1s"}})),
        )
        .await
        .unwrap();
    assert_ne!(bumped.metadata.generation, created.metadata.generation);
    wait_until(
        Duration::from_secs(60),
        "Ready=True on the new generation",
        || {
            host.check_alive();
            verdict(bumped.metadata.generation)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));

    cleanup(&client, &names).await;
    let _ = kwok_classes(&client)
        .delete(&class, &DeleteParams::default())
        .await;
}

/// kwok launches the instance and its Node registers afterwards: a Node the API server refuses
/// (a ValidatingAdmissionPolicy, as Karpenter's suite blocks registration) leaves the claim
/// `Launched` with `Registered=Unknown` until the registration timeout deletes it.
#[tokio::test]
async fn a_node_that_cannot_register_leaves_the_claim_launched_until_the_registration_timeout() {
    let (cp, client) = with_kwok_crd().await;
    let names = Names::new("kinds-reg");
    let host = Host::start(cp, &names, &["--registration-timeout", "30s"]);
    let (class, pool) = (names.name("kwoknc"), names.name("pool"));
    kwok_class(&client, &names, &class, json!({})).await;
    kwok_pool(&client, &names, &pool, &class).await;
    let _policy = Policy::create(
        &client,
        &names.name("block-nodes"),
        ("", "v1", "nodes"),
        "CREATE",
        &format!(
            "has(object.metadata.labels) && '{RUN_LABEL}' in object.metadata.labels && object.metadata.labels['{RUN_LABEL}'] == '{}' && 'registration' in object.metadata.labels && object.metadata.labels['registration'] == 'fail'",
            names.run
        ),
    )
    .await;
    // The policy takes a moment to apply.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let name = names.name("claim");
    kwok_claim(
        &client,
        &names,
        &name,
        &pool,
        &class,
        json!({"registration": "fail"}),
    )
    .await;
    let launched = wait_condition(
        &client,
        &host,
        &name,
        "Launched",
        "True",
        None,
        Duration::from_secs(60),
    )
    .await;
    let provider_id = launched.status.clone().unwrap().provider_id.unwrap();
    // Launched, not registered, for a while.
    for _ in 0..5 {
        let claim = Api::<NodeClaim>::all(client.clone())
            .get(&name)
            .await
            .unwrap();
        assert_eq!(
            condition(&claim, "Launched").map(|(s, _)| s).as_deref(),
            Some("True")
        );
        assert_eq!(
            condition(&claim, "Registered").map(|(s, _)| s).as_deref(),
            Some("Unknown"),
            "{:?}",
            claim.status
        );
        assert!(
            crate::lifecycle::nodes_with_provider_id(&client, &provider_id)
                .await
                .is_empty()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    wait_claim_gone(&client, &host, &name, Duration::from_secs(90)).await;
    assert!(
        host.log().contains("cannot register"),
        "kwok said why: {}",
        host.log_tail()
    );

    cleanup(&client, &names).await;
    let _ = kwok_classes(&client)
        .delete(&class, &DeleteParams::default())
        .await;
}

/// A claim terminates its instance even when its node class is deleted first and a client
/// rewrote its annotations from a stale copy (Karpenter's suite does both): the provider serving
/// the class's kind deletes it.
#[tokio::test]
async fn a_claim_whose_class_and_provider_record_are_gone_still_terminates() {
    let (cp, client) = with_kwok_crd().await;
    let names = Names::new("kinds-orphan");
    let host = Host::start(cp, &names, &[]);
    let (class, pool) = (names.name("class"), names.name("pool"));
    kwok_class(&client, &names, &class, json!({})).await;
    kwok_pool(&client, &names, &pool, &class).await;
    let name = names.name("claim");
    kwok_claim(&client, &names, &name, &pool, &class, json!({})).await;
    let launched = wait_condition(
        &client,
        &host,
        &name,
        "Registered",
        "True",
        None,
        Duration::from_secs(60),
    )
    .await;
    let node = launched.status.as_ref().unwrap().node_name.clone().unwrap();
    // Every record of the provider on the claim goes.
    let claims = Api::<NodeClaim>::all(client.clone());
    let forget = json!({"metadata": {
        "annotations": {"capstan.dev/provider": null},
        "labels": {"capstan.dev/provider": null},
    }});
    let patched = claims
        .patch(&name, &PatchParams::default(), &Patch::Merge(&forget))
        .await
        .unwrap();
    assert!(!patched.annotations().contains_key("capstan.dev/provider"));
    assert!(!patched.labels().contains_key("capstan.dev/provider"));
    kwok_classes(&client)
        .delete(&class, &DeleteParams::default())
        .await
        .unwrap();
    claims
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    wait_claim_gone(&client, &host, &name, Duration::from_secs(60)).await;
    let nodes = Api::<Node>::all(client.clone());
    wait_until(
        Duration::from_secs(30),
        "the instance's Node gone",
        || async { Ok::<_, kube::Error>(nodes.get_opt(&node).await?.is_none().then_some(())) },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    cleanup(&client, &names).await;
}
