//! The host killed in the middle of a launch and started again: exactly one instance.

use std::time::Duration;

use capstan::api::NodeClaim;
use capstan::api::labels::TERMINATION_FINALIZER;
use capstan_test_support::wait_until;
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::*;

#[tokio::test]
async fn host_killed_mid_launch_makes_exactly_one_instance() {
    let (cp, client) = cluster().await;
    let names = Names::new("restart");
    let first = Host::start(cp, &names, &[]);
    let (class, pool, name) = (names.name("nc"), names.name("pool"), names.name("claim"));
    node_class(
        &client,
        &names,
        &class,
        "kwok",
        json!({"launchDelayMillis": 3000}),
    )
    .await;
    claim(&client, claim_json(&names, &name, &pool, &class)).await;
    let claims = Api::<NodeClaim>::all(client.clone());
    // The finalizer is the host's first write; the launch starts right after it.
    wait_until(
        Duration::from_secs(60),
        "the host picked the claim up",
        || async {
            let c = claims.get(&name).await?;
            Ok::<_, kube::Error>(
                c.finalizers()
                    .iter()
                    .any(|f| f == TERMINATION_FINALIZER)
                    .then_some(()),
            )
        },
    )
    .await
    .unwrap_or_else(|err| panic!("{err}\n{}", first.log_tail()));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    first.kill();
    let id = format!("kwok://{name}");
    assert!(
        nodes_with_provider_id(&client, &id).await.is_empty(),
        "killed before the Node was created"
    );
    assert!(
        condition(&claims.get(&name).await.unwrap(), "Launched").is_none_or(|(s, _)| s != "True")
    );

    let second = Host::start(cp, &names, &[]);
    wait_condition(
        &client,
        &second,
        &name,
        "Registered",
        "True",
        None,
        Duration::from_secs(90),
    )
    .await;
    // Let any stray second launch land before counting.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(nodes_with_provider_id(&client, &id).await.len(), 1);
    let labelled = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&names.selector()))
        .await
        .unwrap();
    assert_eq!(labelled.items.len(), 1, "exactly one instance for the run");

    claims
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    wait_claim_gone(&client, &second, &name, Duration::from_secs(60)).await;
    assert!(nodes_with_provider_id(&client, &id).await.is_empty());
    cleanup(&client, &names).await;
}
