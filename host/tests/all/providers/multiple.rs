//! Several providers from `Provider` resources in one `capstan run`: each NodeClass's
//! `spec.provider` picks its provider, and deleting a Provider turns its NodeClasses not ready
//! without losing a NodeClaim.

use std::time::Duration;

use capstan::api::NodeClaim;
use capstan::api::provider::{Provider, ProviderGrant};
use capstan_test_support::wait_until;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::conformance::KWOK_GRANTS;
use crate::fixtures::kwok_bytes;
use crate::lifecycle::{
    Host, Names, RUN_LABEL, claim, claim_json, cluster, node_class, node_pool, node_pool_json,
    wait_condition,
};

async fn put_provider(client: &kube::Client, names: &Names, name: &str, namespace: &str) {
    let grants: Vec<ProviderGrant> = serde_saphyr::from_str(KWOK_GRANTS).unwrap();
    let value = json!({
        "apiVersion": "capstan.dev/v1alpha1",
        "kind": "Provider",
        "metadata": {"name": name, "labels": {RUN_LABEL: names.run}},
        "spec": {
            "source": {"configMap": {"namespace": namespace, "name": "kwok", "key": "provider.wasm.gz"}},
            "grants": grants,
        },
    });
    Api::<Provider>::all(client.clone())
        .patch(
            name,
            &PatchParams::apply("capstan-tests").force(),
            &Patch::Apply(&value),
        )
        .await
        .unwrap();
}

async fn class_ready(client: &kube::Client, name: &str) -> Option<(String, String)> {
    crate::lifecycle::class_ready(client, name)
        .await
        .map(|(status, reason, _)| (status, reason))
}

async fn wait_class(client: &kube::Client, name: &str, status: &str, reason: &str) {
    wait_until(
        Duration::from_secs(60),
        &format!("NodeClass {name} Ready={status} ({reason})"),
        || async {
            let found = class_ready(client, name).await;
            Ok::<_, String>((found == Some((status.to_owned(), reason.to_owned()))).then_some(()))
        },
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn node_classes_pick_their_provider_and_survive_its_deletion() {
    let (cp, client) = cluster().await;
    let names = Names::new("multi");
    let namespace = cp.create_namespace_unique("multi").await.unwrap();
    // One ConfigMap (gzip-compressed), two Providers loading it under different names.
    let stored = capstan::provider::source::encode(
        kwok_bytes(),
        capstan::provider::source::Compression::Gzip,
    );
    let config_map = k8s_openapi::api::core::v1::ConfigMap {
        metadata: ObjectMeta {
            name: Some("kwok".into()),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        },
        binary_data: Some(
            [(
                "provider.wasm.gz".to_owned(),
                k8s_openapi::ByteString(stored),
            )]
            .into(),
        ),
        ..Default::default()
    };
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &namespace)
        .create(&Default::default(), &config_map)
        .await
        .unwrap();
    let (a, b) = (names.name("a"), names.name("b"));
    put_provider(&client, &names, &a, &namespace).await;
    put_provider(&client, &names, &b, &namespace).await;
    let host = Host::start(cp, &names, &["--provider-source-namespace", &namespace]);

    let (class_a, class_b) = (names.name("nc-a"), names.name("nc-b"));
    node_class(&client, &names, &class_a, &a, json!({})).await;
    node_class(&client, &names, &class_b, &b, json!({})).await;
    let (pool_a, pool_b) = (names.name("pool-a"), names.name("pool-b"));
    node_pool(&client, node_pool_json(&names, &pool_a, &class_a)).await;
    node_pool(&client, node_pool_json(&names, &pool_b, &class_b)).await;
    wait_class(&client, &class_a, "True", "Ready").await;
    wait_class(&client, &class_b, "True", "Ready").await;

    let (claim_a, claim_b) = (names.name("claim-a"), names.name("claim-b"));
    claim(&client, claim_json(&names, &claim_a, &pool_a, &class_a)).await;
    claim(&client, claim_json(&names, &claim_b, &pool_b, &class_b)).await;
    for name in [&claim_a, &claim_b] {
        wait_condition(
            &client,
            &host,
            name,
            "Registered",
            "True",
            None,
            Duration::from_secs(90),
        )
        .await;
    }

    // Delete provider b: its NodeClass turns not ready, its claim stays, a's is untouched.
    Api::<Provider>::all(client.clone())
        .delete(&b, &DeleteParams::default())
        .await
        .unwrap();
    wait_class(&client, &class_b, "False", "ProviderNotFound").await;
    assert_eq!(
        class_ready(&client, &class_a).await,
        Some(("True".to_owned(), "Ready".to_owned()))
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    host.check_alive();
    let claims = Api::<NodeClaim>::all(client.clone());
    for name in [&claim_a, &claim_b] {
        let claim = claims.get(name).await.unwrap();
        assert!(
            claim.metadata.deletion_timestamp.is_none(),
            "{name} is being deleted"
        );
    }

    // Back again: the NodeClass recovers.
    put_provider(&client, &names, &b, &namespace).await;
    wait_class(&client, &class_b, "True", "Ready").await;

    // Clean up through the host: both claims terminate with their providers loaded.
    for name in [&claim_a, &claim_b] {
        claims.delete(name, &DeleteParams::default()).await.unwrap();
    }
    wait_until(Duration::from_secs(90), "claims gone", || async {
        let left: Vec<String> = claims
            .list(&kube::api::ListParams::default().labels(&names.selector()))
            .await
            .map_err(|e| e.to_string())?
            .items
            .iter()
            .map(|c| c.name_any())
            .collect();
        Ok::<_, String>(left.is_empty().then_some(()))
    })
    .await
    .unwrap();
    for name in [&a, &b] {
        let _ = Api::<Provider>::all(client.clone())
            .delete(name, &DeleteParams::default())
            .await;
    }
}
