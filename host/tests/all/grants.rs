//! Grants enforced on real `kube` calls, against a real API server.
//!
//! The chaos fixture's `validate-node-class` with `{"mode":"kube",...}` makes exactly one `kube`
//! call and reports a failure as `invalid("<kube-error-case>: <message>")`.

use std::sync::Arc;

use capstan::capability::Capabilities;
use capstan::capability::grants::{Cluster, Grant, GrantScope, Grants, Verb, VerbRule};
use capstan::capability::kube::ClusterConnection;
use capstan::runtime::types::ProviderError;
use capstan::runtime::{CallError, Limits, ProviderPre};
use capstan_test_support::ControlPlane;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

use crate::fixtures::{chaos, class};

/// The shared control plane.
async fn control_plane() -> &'static ControlPlane {
    ControlPlane::shared().await.expect("control plane")
}

/// A fresh namespace on the shared control plane.
async fn namespace(cp: &ControlPlane, prefix: &str) -> String {
    cp.create_namespace_unique(prefix).await.expect("namespace")
}

pub fn grant(
    groups: &[&str],
    resources: &[&str],
    verbs: &[VerbRule],
    namespaces: &[&str],
) -> Grant {
    Grant {
        cluster: Cluster::Workload,
        api_groups: groups.iter().map(|s| s.to_string()).collect(),
        resources: resources.iter().map(|s| s.to_string()).collect(),
        verbs: verbs.to_vec(),
        namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
        // These tests are about which calls a grant matches, on objects the test (not the
        // provider) created: ownership is `providers::hostile`'s.
        scope: GrantScope::Any,
    }
}

pub struct Setup {
    pub provider: ProviderPre,
    pub caps: Arc<Capabilities>,
}

pub async fn setup(grants: Vec<Grant>, management: bool) -> Setup {
    let cp = control_plane().await;
    let workload = ClusterConnection::new(Cluster::Workload, cp.client().expect("client"));
    let mut builder = Capabilities::builder("chaos")
        .grants(Grants(grants))
        .workload(workload);
    if management {
        builder = builder.management(ClusterConnection::new(
            Cluster::Management,
            cp.client().expect("client"),
        ));
    }
    let caps = builder.build();
    Setup {
        provider: chaos(Limits::default(), Arc::clone(&caps)),
        caps,
    }
}

/// Runs one kube call through chaos: `Ok(())`, or the kube error's `case: message`.
pub async fn kube_call(provider: &ProviderPre, call: Value) -> Result<(), String> {
    let mut params = json!({"mode": "kube"});
    if let (Some(params), Some(call)) = (params.as_object_mut(), call.as_object()) {
        params.extend(call.clone());
    }
    match provider.validate_node_class(&class(params)).await {
        Ok(()) => Ok(()),
        Err(CallError::Provider {
            error: ProviderError::Invalid(message),
            ..
        }) => Err(message),
        Err(other) => panic!("the call itself failed: {other}"),
    }
}

pub fn case(result: Result<(), String>) -> String {
    match result {
        Ok(()) => "ok".into(),
        Err(message) => message.split(':').next().unwrap_or_default().to_owned(),
    }
}

#[tokio::test]
async fn deny_by_default() {
    let cp = control_plane().await;
    let ns = namespace(cp, "deny").await;
    let s = setup(vec![], false).await;
    let result = kube_call(
        &s.provider,
        json!({"op": "get", "apiVersion": "v1", "kind": "Secret", "namespace": ns, "name": "x"}),
    )
    .await;
    assert_eq!(case(result.clone()), "permission-denied", "{result:?}");
    assert!(result.unwrap_err().contains("Secret"));
    let metrics = s.caps.metrics().snapshot();
    assert_eq!(metrics.kube_denied, 1);
    assert_eq!(metrics.kube_calls, 1);
}

#[tokio::test]
async fn allowed_and_wrong_namespace() {
    let cp = control_plane().await;
    let client = cp.client().expect("client");
    let ns = namespace(cp, "allowed").await;
    let other = namespace(cp, "other").await;
    for namespace in [&ns, &other] {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": "settings"}, "data": {"a": "1"}}))
                .unwrap();
        Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
    }
    let s = setup(
        vec![grant(
            &[""],
            &["configmaps"],
            &[VerbRule::One(Verb::Get), VerbRule::One(Verb::List)],
            &[&ns],
        )],
        false,
    )
    .await;
    let get = |namespace: &str| json!({"op": "get", "apiVersion": "v1", "kind": "ConfigMap", "namespace": namespace, "name": "settings"});
    assert_eq!(kube_call(&s.provider, get(&ns)).await, Ok(()));
    assert_eq!(
        case(kube_call(&s.provider, get(&other)).await),
        "permission-denied"
    );
    // A missing object in a granted namespace is not-found, not denied.
    let missing = json!({"op": "get", "apiVersion": "v1", "kind": "ConfigMap", "namespace": ns, "name": "nope"});
    assert_eq!(case(kube_call(&s.provider, missing).await), "not-found");
    // Listing across all namespaces needs namespaces: ["*"].
    let list_all = json!({"op": "list", "apiVersion": "v1", "kind": "ConfigMap"});
    assert_eq!(
        case(kube_call(&s.provider, list_all.clone()).await),
        "permission-denied"
    );
    let list_ns = json!({"op": "list", "apiVersion": "v1", "kind": "ConfigMap", "namespace": ns});
    assert_eq!(kube_call(&s.provider, list_ns).await, Ok(()));
    // A verb that was not granted.
    let delete = json!({"op": "delete", "apiVersion": "v1", "kind": "ConfigMap", "namespace": ns, "name": "settings"});
    assert_eq!(
        case(kube_call(&s.provider, delete).await),
        "permission-denied"
    );

    let everywhere = setup(
        vec![grant(
            &["core"],
            &["configmaps"],
            &[VerbRule::One(Verb::List)],
            &["*"],
        )],
        false,
    )
    .await;
    assert_eq!(kube_call(&everywhere.provider, list_all).await, Ok(()));
    assert_eq!(s.caps.metrics().snapshot().kube_denied, 3);
}

#[tokio::test]
async fn subresource_needs_its_own_grant() {
    let cp = control_plane().await;
    let client = cp.client().expect("client");
    let ns = namespace(cp, "scale").await;
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "example.invalid/web:1"}]}
            }
        }
    }))
    .unwrap();
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();

    let scale = json!({
        "op": "patch", "apiVersion": "apps/v1", "kind": "Deployment", "namespace": ns,
        "name": "web", "subresource": "scale", "patchType": "merge",
        "body": {"spec": {"replicas": 3}}
    });
    let only_deployments = setup(
        vec![grant(&["apps"], &["deployments"], &[VerbRule::Any], &[&ns])],
        false,
    )
    .await;
    assert_eq!(
        case(kube_call(&only_deployments.provider, scale.clone()).await),
        "permission-denied"
    );
    let get_main = json!({"op": "get", "apiVersion": "apps/v1", "kind": "Deployment", "namespace": ns, "name": "web"});
    assert_eq!(
        kube_call(&only_deployments.provider, get_main).await,
        Ok(())
    );

    let with_scale = setup(
        vec![grant(
            &["apps"],
            &["deployments/scale"],
            &[VerbRule::One(Verb::Patch), VerbRule::One(Verb::Get)],
            &[&ns],
        )],
        false,
    )
    .await;
    assert_eq!(kube_call(&with_scale.provider, scale).await, Ok(()));
    let replicas = deployments
        .get("web")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.replicas);
    assert_eq!(replicas, Some(3));
    // The scale grant does not open the deployment itself.
    let get_main = json!({"op": "get", "apiVersion": "apps/v1", "kind": "Deployment", "namespace": ns, "name": "web"});
    assert_eq!(
        case(kube_call(&with_scale.provider, get_main).await),
        "permission-denied"
    );
    // A subresource the kind does not have.
    let bogus = json!({"op": "get", "apiVersion": "apps/v1", "kind": "Deployment", "namespace": ns, "name": "web", "subresource": "bogus"});
    let bogus_grant = setup(
        vec![grant(
            &["apps"],
            &["deployments/*"],
            &[VerbRule::One(Verb::Get)],
            &[&ns],
        )],
        false,
    )
    .await;
    assert_eq!(
        case(kube_call(&bogus_grant.provider, bogus).await),
        "not-found"
    );
}

#[tokio::test]
async fn wrong_cluster() {
    let cp = control_plane().await;
    let ns = namespace(cp, "cluster").await;
    let get = json!({
        "op": "get", "cluster": "management", "apiVersion": "v1", "kind": "ConfigMap",
        "namespace": ns, "name": "x"
    });
    // Granted on the workload cluster only: a management call is denied.
    let workload_only = setup(
        vec![grant(&[""], &["configmaps"], &[VerbRule::Any], &["*"])],
        true,
    )
    .await;
    assert_eq!(
        case(kube_call(&workload_only.provider, get.clone()).await),
        "permission-denied"
    );

    // Granted on management, but the host has no management cluster: unavailable, said clearly.
    let mut management = grant(&[""], &["configmaps"], &[VerbRule::Any], &["*"]);
    management.cluster = Cluster::Management;
    let unconfigured = setup(vec![management.clone()], false).await;
    let result = kube_call(&unconfigured.provider, get.clone()).await;
    assert_eq!(case(result.clone()), "unavailable");
    assert!(result.unwrap_err().contains("no management cluster"));

    // Granted and configured: goes through (and the object is simply not there).
    let configured = setup(vec![management], true).await;
    assert_eq!(
        case(kube_call(&configured.provider, get).await),
        "not-found"
    );
}

#[tokio::test]
async fn unknown_kinds_and_bad_names() {
    let s = setup(
        vec![grant(&["*"], &["*"], &[VerbRule::One(Verb::Get)], &["*"])],
        false,
    )
    .await;
    let unknown = json!({"op": "get", "apiVersion": "v1", "kind": "Gizmo", "namespace": "default", "name": "x"});
    assert_eq!(case(kube_call(&s.provider, unknown).await), "not-found");
    let unknown_group = json!({"op": "get", "apiVersion": "nothing.example.com/v1", "kind": "Gizmo", "namespace": "default", "name": "x"});
    assert_eq!(
        case(kube_call(&s.provider, unknown_group).await),
        "not-found"
    );
    let escape = json!({"op": "get", "apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "../secrets/x"});
    assert_eq!(case(kube_call(&s.provider, escape).await), "invalid");
}
