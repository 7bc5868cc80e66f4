//! Each provider error class gets its reaction.

use std::time::Duration;

use capstan::api::NodeClaim;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

use super::*;

#[tokio::test]
async fn provider_errors_get_their_reactions() {
    let (cp, client) = cluster().await;
    let names = Names::new("errors");
    let host = Host::start(cp, &names, &[]);
    let pool = names.name("pool");
    let classes = [
        ("ice", "kwok", json!({"unavailableOfferings": [{}]})),
        ("taken", "kwok", json!({})),
        (
            "notready",
            "chaos",
            json!({"mode": "create-error", "error": "node-class-not-ready"}),
        ),
        (
            "invalid",
            "chaos",
            json!({"mode": "create-error", "error": "invalid"}),
        ),
        (
            "trap",
            "chaos",
            json!({"mode": "create-error", "error": "trap"}),
        ),
    ];
    for (what, provider, parameters) in &classes {
        node_class(
            &client,
            &names,
            &names.name(what),
            provider,
            parameters.clone(),
        )
        .await;
    }
    // A Node that is not kwok's already has the "taken" claim's name.
    let taken = names.name("taken-claim");
    let squatter: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": taken},
    }))
    .unwrap();
    let nodes = Api::<Node>::all(client.clone());
    nodes
        .create(&PostParams::default(), &squatter)
        .await
        .unwrap();

    for (what, _, _) in &classes {
        claim(
            &client,
            claim_json(
                &names,
                &names.name(&format!("{what}-claim")),
                &pool,
                &names.name(what),
            ),
        )
        .await;
    }

    // insufficient-capacity → Event, claim deleted.
    let ice = names.name("ice-claim");
    wait_claim_gone(&client, &host, &ice, Duration::from_secs(60)).await;
    wait_event(&client, "default", &ice, "InsufficientCapacityError").await;
    // node-class-not-ready → Event, claim deleted.
    let notready = names.name("notready-claim");
    wait_claim_gone(&client, &host, &notready, Duration::from_secs(60)).await;
    wait_event(&client, "default", &notready, "NodeClassNotReady").await;
    // create-failed → Launched=Unknown with the provider's reason, kept and retried.
    wait_condition(
        &client,
        &host,
        &taken,
        "Launched",
        "Unknown",
        Some("NodeNameTaken"),
        Duration::from_secs(60),
    )
    .await;
    // anything else → LaunchFailed and retried; the third failure in a row deletes the claim, so
    // that its pods can go to another NodePool.
    for what in ["invalid", "trap"] {
        let name = names.name(&format!("{what}-claim"));
        wait_claim_gone(&client, &host, &name, Duration::from_secs(60)).await;
        wait_until(
            Duration::from_secs(30),
            &format!("{what}: the fallback's LaunchFailed Event"),
            || async {
                let notes = capstan_notes(&client, "default", &name, "LaunchFailed").await;
                Ok::<_, String>(
                    notes
                        .iter()
                        .any(|n| n.contains("failed 3 times in a row at provider chaos"))
                        .then_some(()),
                )
            },
        )
        .await
        .unwrap();
    }
    wait_event(&client, "default", &taken, "LaunchFailed").await;

    // Claims that never launched go without a provider call.
    let claims = Api::<NodeClaim>::all(client.clone());
    for what in ["taken"] {
        let name = names.name(&format!("{what}-claim"));
        assert!(
            claims.get_opt(&name).await.unwrap().is_some(),
            "{name} was kept"
        );
        claims
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
        wait_claim_gone(&client, &host, &name, Duration::from_secs(60)).await;
    }
    assert!(
        nodes.get_opt(&taken).await.unwrap().is_some(),
        "someone else's Node is left alone"
    );
    nodes
        .delete(&taken, &DeleteParams::default())
        .await
        .unwrap();
    host.check_alive();
    cleanup(&client, &names).await;
}
