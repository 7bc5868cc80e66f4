//! Unresolvable references and malformed pools: clear conditions, nothing deleted.

use std::time::Duration;

use capstan::api::{Condition, NodeClaim, NodeClass, NodePool};
use capstan_test_support::wait_until;
use kube::Api;
use serde_json::json;

use super::*;

fn find(conditions: &[Condition], type_: &str) -> Option<(String, String)> {
    conditions.iter().find(|c| c.type_ == type_).map(|c| {
        (
            format!("{:?}", c.status),
            c.reason.clone().unwrap_or_default(),
        )
    })
}

async fn wait_pool(
    client: &Client,
    host: &Host,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
) {
    let api = Api::<NodePool>::all(client.clone());
    let result = wait_until(
        Duration::from_secs(60),
        &format!("NodePool {name} {type_}={status} {reason}"),
        || async {
            let pool = api.get(name).await?;
            let conditions = pool.status.map(|s| s.conditions).unwrap_or_default();
            Ok::<_, kube::Error>(
                (find(&conditions, type_) == Some((status.into(), reason.into()))).then_some(()),
            )
        },
    )
    .await;
    if let Err(err) = result {
        let pool = api.get(name).await.ok().and_then(|p| p.status);
        panic!("{err}\n{pool:#?}\n{}", host.log_tail());
    }
}

async fn wait_class(client: &Client, host: &Host, name: &str, status: &str, reason: &str) {
    let api = Api::<NodeClass>::all(client.clone());
    let result = wait_until(
        Duration::from_secs(60),
        &format!("NodeClass {name} Ready={status} {reason}"),
        || async {
            let class = api.get(name).await?;
            let conditions = class.status.map(|s| s.conditions).unwrap_or_default();
            Ok::<_, kube::Error>(
                (find(&conditions, "Ready") == Some((status.into(), reason.into()))).then_some(()),
            )
        },
    )
    .await;
    if let Err(err) = result {
        panic!("{err}\n{}", host.log_tail());
    }
}

#[tokio::test]
async fn unresolvable_references_and_malformed_pools_get_conditions() {
    let (cp, client) = cluster().await;
    let names = Names::new("status");
    let host = Host::start(cp, &names, &[]);
    let (ok, orphan, invalid) = (
        names.name("ok"),
        names.name("orphan"),
        names.name("invalid"),
    );
    node_class(&client, &names, &ok, "kwok", json!({})).await;
    node_class(&client, &names, &orphan, "no-such-provider", json!({})).await;
    node_class(&client, &names, &invalid, "kwok", json!({"bogus": 1})).await;
    wait_class(&client, &host, &ok, "True", "Ready").await;
    wait_class(&client, &host, &orphan, "False", "ProviderNotFound").await;
    wait_class(&client, &host, &invalid, "False", "InvalidParameters").await;

    let (good, lost, bad) = (names.name("good"), names.name("lost"), names.name("bad"));
    node_pool(&client, node_pool_json(&names, &good, &ok)).await;
    node_pool(&client, node_pool_json(&names, &lost, &orphan)).await;
    // The CRD lets a template label in the kubernetes.io domain through; the host refuses it.
    let mut malformed = node_pool_json(&names, &bad, &ok);
    malformed["spec"]["template"]["metadata"] =
        json!({"labels": {"node-role.kubernetes.io/worker": "x"}});
    node_pool(&client, malformed).await;
    wait_pool(&client, &host, &good, "Ready", "True", "Ready").await;
    wait_pool(
        &client,
        &host,
        &good,
        "NodeClassReady",
        "True",
        "NodeClassReady",
    )
    .await;
    wait_pool(
        &client,
        &host,
        &lost,
        "NodeClassReady",
        "False",
        "NodeClassNotReady",
    )
    .await;
    wait_pool(&client, &host, &lost, "Ready", "False", "NodeClassNotReady").await;
    wait_pool(
        &client,
        &host,
        &bad,
        "ValidationSucceeded",
        "False",
        "NodePoolValidationFailed",
    )
    .await;
    wait_pool(
        &client,
        &host,
        &bad,
        "Ready",
        "False",
        "NodePoolValidationFailed",
    )
    .await;

    let (unknown, missing) = (names.name("unknown-ref"), names.name("missing-provider"));
    claim(
        &client,
        claim_json(&names, &unknown, &good, &names.name("does-not-exist")),
    )
    .await;
    claim(&client, claim_json(&names, &missing, &lost, &orphan)).await;
    wait_condition(
        &client,
        &host,
        &unknown,
        "Launched",
        "Unknown",
        Some("NodeClassNotFound"),
        Duration::from_secs(60),
    )
    .await;
    wait_condition(
        &client,
        &host,
        &missing,
        "Launched",
        "Unknown",
        Some("ProviderNotFound"),
        Duration::from_secs(60),
    )
    .await;
    wait_event(&client, "default", &unknown, "NodeClassNotFound").await;

    // Nothing was deleted.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let claims = Api::<NodeClaim>::all(client.clone());
    for name in [&unknown, &missing] {
        let c = claims.get(name).await.unwrap();
        assert!(c.metadata.deletion_timestamp.is_none(), "{name} kept");
    }
    let pools = Api::<NodePool>::all(client.clone());
    for name in [&good, &lost, &bad] {
        assert!(
            pools
                .get(name)
                .await
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_none()
        );
    }
    host.check_alive();
    cleanup(&client, &names).await;
    for name in [&unknown, &missing] {
        wait_claim_gone(&client, &host, name, Duration::from_secs(60)).await;
    }
}

#[tokio::test]
async fn a_deleted_node_class_waits_for_its_claims() {
    let (cp, client) = cluster().await;
    let names = Names::new("ncfin");
    let host = Host::start(cp, &names, &[]);
    let (class, pool, name) = (names.name("nc"), names.name("pool"), names.name("claim"));
    node_class(&client, &names, &class, "kwok", json!({})).await;
    node_pool(&client, node_pool_json(&names, &pool, &class)).await;
    claim(&client, claim_json(&names, &name, &pool, &class)).await;
    wait_condition(
        &client,
        &host,
        &name,
        "Registered",
        "True",
        None,
        Duration::from_secs(90),
    )
    .await;
    let classes = Api::<NodeClass>::all(client.clone());
    let finalized = classes.get(&class).await.unwrap();
    assert!(
        finalized
            .finalizers()
            .iter()
            .any(|f| f == "capstan.dev/termination"),
        "{:?}",
        finalized.finalizers()
    );

    // Deleted while a claim uses it: it stays, and says why.
    classes
        .delete(&class, &DeleteParams::default())
        .await
        .unwrap();
    let note = wait_event(&client, "default", &class, "WaitingOnNodeClaimTermination")
        .await
        .note
        .unwrap_or_default();
    assert!(note.contains(&name), "{note}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let still = classes.get(&class).await.unwrap();
    assert!(still.metadata.deletion_timestamp.is_some());

    // The claim terminates through it (its instance deleted), then the NodeClass goes.
    Api::<NodeClaim>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    wait_until(Duration::from_secs(90), "NodeClass gone", || async {
        host.check_alive();
        Ok::<_, kube::Error>(classes.get_opt(&class).await?.is_none().then_some(()))
    })
    .await
    .unwrap();
    assert!(
        nodes_with_provider_id(&client, &format!("kwok://{name}"))
            .await
            .is_empty(),
        "the instance is gone"
    );
    cleanup(&client, &names).await;
}
