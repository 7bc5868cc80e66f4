//! Several providers from `Provider` resources in one `capstan run`: each NodeClass's
//! `spec.provider` picks its provider, and deleting a Provider turns its NodeClasses not ready
//! without losing a NodeClaim; a Provider's `spendLimitPerHour` bounds all its pools together.

use std::time::Duration;

use capstan::api::NodeClaim;
use capstan::api::provider::{Provider, ProviderGrant};
use capstan_test_support::wait_until;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::conformance::KWOK_GRANTS;
use crate::fixtures::{chaos_bytes, kwok_bytes};
use crate::leader_election::{address_in, http_get};
use crate::lifecycle::{
    Host, Names, RUN_LABEL, capstan_notes, claim, claim_json, cleanup, cluster, node_class,
    node_pool, node_pool_json, wait_condition,
};
use crate::metrics::parse;
use crate::multi_provider::{limit_reached, priced_catalog, run_nodes, weighted_pool};
use crate::pool_limits::pending;
use crate::provisioner::teardown;
use crate::provisioner_e2e::{GROUP, Pods, wait_running};
use crate::verdict::explain_cli;

async fn put_provider(client: &kube::Client, names: &Names, name: &str, namespace: &str) {
    put_provider_from(client, names, name, (namespace, "kwok")).await;
}

/// Provider `name` loading ConfigMap `config_map` of `namespace` (key `provider.wasm.gz`).
async fn put_provider_from(client: &kube::Client, names: &Names, name: &str, source: (&str, &str)) {
    put_provider_with(client, names, name, source, json!({})).await;
}

/// [`put_provider_from`] with the fields of `more` added to its spec.
async fn put_provider_with(
    client: &kube::Client,
    names: &Names,
    name: &str,
    (namespace, config_map): (&str, &str),
    more: serde_json::Value,
) {
    let grants: Vec<ProviderGrant> = serde_saphyr::from_str(KWOK_GRANTS).unwrap();
    let mut value = json!({
        "apiVersion": "capstan.dev/v1alpha1",
        "kind": "Provider",
        "metadata": {"name": name, "labels": {RUN_LABEL: names.run}},
        "spec": {
            "source": {"configMap": {"namespace": namespace, "name": config_map, "key": "provider.wasm.gz"}},
            "grants": grants,
        },
    });
    if let (Some(spec), Some(more)) = (value["spec"].as_object_mut(), more.as_object()) {
        spec.extend(more.clone());
    }
    Api::<Provider>::all(client.clone())
        .patch(
            name,
            &PatchParams::apply("capstan-tests").force(),
            &Patch::Apply(&value),
        )
        .await
        .unwrap();
}

/// ConfigMap `name` of `namespace` holding `component` gzip-compressed under `provider.wasm.gz`.
async fn put_component(client: &kube::Client, namespace: &str, name: &str, component: &[u8]) {
    let stored =
        capstan::provider::source::encode(component, capstan::provider::source::Compression::Gzip);
    let config_map = k8s_openapi::api::core::v1::ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.to_owned()),
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
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), namespace)
        .create(&Default::default(), &config_map)
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
    put_component(&client, &namespace, "kwok", kwok_bytes()).await;
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

/// Provider `name`'s `Healthy` condition as `(status, reason)`.
async fn healthy(client: &kube::Client, name: &str) -> Option<(String, String)> {
    let provider = Api::<Provider>::all(client.clone()).get(name).await.ok()?;
    let condition = provider
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Healthy")?;
    Some((
        format!("{:?}", condition.status),
        condition.reason.unwrap_or_default(),
    ))
}

async fn wait_healthy(host: &Host, client: &kube::Client, name: &str, want: (&str, &str)) {
    wait_until(
        Duration::from_secs(90),
        &format!("Provider {name} Healthy={} ({})", want.0, want.1),
        || async {
            host.check_alive();
            let found = healthy(client, name).await;
            Ok::<_, String>((found == Some((want.0.to_owned(), want.1.to_owned()))).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nhost log:\n{}", host.log_tail()));
}

/// `capstan_provider_healthy` of `provider` on the host's `/metrics`.
async fn healthy_gauge(host: &Host, provider: &str) -> Option<f64> {
    let address = address_in(&host.log(), "serving /metrics")?;
    let (_, body) = http_get(&address, "/metrics").await;
    parse(&body)
        .get("capstan_provider_healthy")?
        .iter()
        .find(|s| s.labels.get("provider").map(String::as_str) == Some(provider))
        .map(|s| s.value)
}

/// Per-provider health: a provider whose launches keep trapping turns `Healthy=False`
/// (`Trapped`, a Warning Event, `capstan_provider_healthy` 0) while the provider beside it stays
/// healthy and keeps launching; a working launch brings it back (`ProviderHealthy`).
#[tokio::test]
async fn a_provider_whose_launches_keep_failing_is_unhealthy_until_one_works() {
    let (cp, client) = cluster().await;
    let names = Names::new("health");
    let namespace = cp.create_namespace_unique("health").await.unwrap();
    put_component(&client, &namespace, "kwok", kwok_bytes()).await;
    put_component(&client, &namespace, "chaos", chaos_bytes()).await;
    let (steady, flaky) = (names.name("steady"), names.name("flaky"));
    put_provider_from(&client, &names, &steady, (&namespace, "kwok")).await;
    put_provider_from(&client, &names, &flaky, (&namespace, "chaos")).await;
    let host = Host::start(cp, &names, &["--provider-source-namespace", &namespace]);

    let (steady_class, flaky_class) = (names.name("nc-steady"), names.name("nc-flaky"));
    node_class(&client, &names, &steady_class, &steady, json!({})).await;
    node_class(
        &client,
        &names,
        &flaky_class,
        &flaky,
        json!({"mode": "create-error", "error": "trap"}),
    )
    .await;
    let (steady_pool, flaky_pool) = (names.name("pool-steady"), names.name("pool-flaky"));
    node_pool(&client, node_pool_json(&names, &steady_pool, &steady_class)).await;
    node_pool(&client, node_pool_json(&names, &flaky_pool, &flaky_class)).await;
    wait_class(&client, &flaky_class, "True", "Ready").await;

    // Three launches trap (the third sends the claim to another pool): unhealthy.
    let failing = names.name("failing");
    claim(
        &client,
        claim_json(&names, &failing, &flaky_pool, &flaky_class),
    )
    .await;
    wait_healthy(&host, &client, &flaky, ("False", "Trapped")).await;
    // The Event is written just after the condition.
    crate::lifecycle::wait_event(&client, "default", &flaky, "ProviderUnhealthy").await;
    let notes = capstan_notes(&client, "default", &flaky, "ProviderUnhealthy").await;
    assert!(
        notes
            .iter()
            .any(|n| n
                .starts_with("create failed 3 times in a row; last: create: the provider trapped")),
        "{notes:?}"
    );
    assert_eq!(healthy_gauge(&host, &flaky).await, Some(0.0));

    // The other provider launches meanwhile and is healthy.
    let working = names.name("working");
    claim(
        &client,
        claim_json(&names, &working, &steady_pool, &steady_class),
    )
    .await;
    wait_condition(
        &client,
        &host,
        &working,
        "Registered",
        "True",
        None,
        Duration::from_secs(90),
    )
    .await;
    wait_healthy(&host, &client, &steady, ("True", "Healthy")).await;
    assert_eq!(healthy_gauge(&host, &steady).await, Some(1.0));
    assert_eq!(
        healthy(&client, &flaky).await,
        Some(("False".to_owned(), "Trapped".to_owned()))
    );

    // The flaky provider's next launch works: healthy again.
    Api::<capstan::api::NodeClass>::all(client.clone())
        .patch(
            &flaky_class,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"parameters": {"mode": "ok", "error": null}}})),
        )
        .await
        .unwrap();
    let recovered = names.name("recovered");
    claim(
        &client,
        claim_json(&names, &recovered, &flaky_pool, &flaky_class),
    )
    .await;
    wait_healthy(&host, &client, &flaky, ("True", "Healthy")).await;
    assert_eq!(healthy_gauge(&host, &flaky).await, Some(1.0));
    assert!(
        !capstan_notes(&client, "default", &flaky, "ProviderHealthy")
            .await
            .is_empty()
    );

    cleanup(&client, &names).await;
    for name in [&steady, &flaky] {
        let _ = Api::<Provider>::all(client.clone())
            .delete(name, &DeleteParams::default())
            .await;
    }
}

/// `spec.spendLimitPerHour` on a Provider bounds every pool of it together: two pools of one
/// Provider (the preferred one capped at one node by its CPU limit), a budget of 2.50 an hour and
/// nodes at 1.00 each. Both pools launch one node; alone, the second would have had room for two.
/// The second pool's `LimitReached` Event and `capstan explain pod` say the provider's room is
/// spent.
#[tokio::test]
async fn a_provider_spend_limit_bounds_all_its_pools_together() {
    let (cp, client) = cluster().await;
    let names = Names::new("pspend");
    let namespace = cp.create_namespace_unique("pspend").await.unwrap();
    put_component(&client, &namespace, "kwok", kwok_bytes()).await;
    let billed = names.name("billed");
    put_provider_with(
        &client,
        &names,
        &billed,
        (&namespace, "kwok"),
        json!({"spendLimitPerHour": "2.5"}),
    )
    .await;
    let host = Host::start(
        cp,
        &names,
        &[
            "--provider-source-namespace",
            &namespace,
            "--batch-idle-duration",
            "300ms",
        ],
    );
    let first = weighted_pool(
        &client,
        &names,
        "first",
        &billed,
        priced_catalog(),
        10,
        Some(json!({"cpu": "4"})),
    )
    .await;
    let second = weighted_pool(
        &client,
        &names,
        "second",
        &billed,
        priced_catalog(),
        5,
        None,
    )
    .await;
    wait_class(&client, &names.name("second-nc"), "True", "Ready").await;

    let ns = crate::provisioner::namespace(cp, "pspend").await;
    // Four pods of 3 CPUs, one per 4-CPU node: the budget pays for two nodes in all.
    Pods::new(&client, &names, &ns, "app")
        .count(4)
        .cpu("3")
        .node_selector(json!({GROUP: names.run}))
        .create()
        .await;
    wait_running(&client, &host, &ns, 2, Duration::from_secs(90)).await;
    let note = limit_reached(&client, &host, &second).await;
    println!("second pool Event: {note}");
    assert!(
        note.starts_with(
            "limit capstan.dev/provider-price-per-hour=2.5 reached: \
             capstan.dev/provider-price-per-hour=0.5 left once the nodes and launching claims \
             of every NodePool of its provider count"
        ),
        "{note}"
    );
    // Later passes add nothing: one node in each pool, 2.00 an hour.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let nodes = run_nodes(&client, &names).await;
    let per_pool = |pool: &str| {
        nodes
            .iter()
            .filter(|n| n.labels().get("karpenter.sh/nodepool").map(String::as_str) == Some(pool))
            .count()
    };
    let node_names: Vec<String> = nodes.iter().map(|n| n.name_any()).collect();
    assert_eq!(
        (per_pool(&first), per_pool(&second)),
        (1, 1),
        "{node_names:?}"
    );
    let waiting = pending(&client, &ns).await;
    assert_eq!(waiting.len(), 2, "{waiting:?}");
    let pod = waiting.iter().next().unwrap();
    let report = explain_cli(cp, &["pod", &format!("{ns}/{pod}")]);
    println!("explain pod: {}", report["decision"]);
    assert!(
        report["decision"]["note"]
            .as_str()
            .is_some_and(|n| n.contains("limit capstan.dev/provider-price-per-hour exceeded")),
        "{report}"
    );
    teardown(&client, &names, &ns).await;
    host.check_alive();
    let _ = Api::<Provider>::all(client.clone())
        .delete(&billed, &DeleteParams::default())
        .await;
}
