//! A provider cannot use its `create` answer to escape its sandbox: relabel its claim into
//! another pool, dress its node in reserved labels, or take over a node that is not its claim's
//! (another provider's, or one no claim manages). The host refuses the answer, keeps the claim as
//! it was, and reports it on the claim and on the Provider.

use std::time::Duration;

use capstan::api::NodeClaim;
use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::*;

/// The notes of Capstan's `reason` Events about the Provider `provider`.
async fn provider_notes(client: &Client, provider: &str, reason: &str) -> Vec<String> {
    capstan_notes(client, "default", provider, reason).await
}

/// Waits for a Capstan Event about the Provider `provider` whose note contains `text`.
async fn wait_provider_note(
    client: &Client,
    host: &Host,
    provider: &str,
    reason: &str,
    text: &str,
) {
    let found = capstan_test_support::wait_until(
        Duration::from_secs(30),
        &format!("{reason} Event about Provider {provider} saying {text}"),
        || async {
            let notes = provider_notes(client, provider, reason).await;
            Ok::<_, kube::Error>(notes.into_iter().find(|n| n.contains(text)))
        },
    )
    .await;
    if let Err(err) = found {
        panic!("{err}\nhost log:\n{}", host.log_tail());
    }
}

/// Asserts the refused claim got no provider ID, and waits for a `LaunchFailed` Event from
/// Capstan about it whose note contains every one of `texts` (the Event follows the status).
async fn refused_with_note(client: &Client, host: &Host, refused: &NodeClaim, texts: &[String]) {
    assert!(
        refused
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_ref())
            .is_none(),
        "{}: no provider ID written",
        refused.name_any()
    );
    let name = refused.name_any();
    let found = capstan_test_support::wait_until(
        Duration::from_secs(30),
        &format!("a LaunchFailed Event about {name} saying {texts:?}"),
        || async {
            let notes = capstan_notes(client, "default", &name, "LaunchFailed").await;
            Ok::<_, kube::Error>(
                notes
                    .into_iter()
                    .find(|n| texts.iter().all(|t| n.contains(t.as_str()))),
            )
        },
    )
    .await;
    if let Err(err) = found {
        let notes = capstan_notes(client, "default", &name, "LaunchFailed").await;
        panic!("{err}: {notes:?}\nhost log:\n{}", host.log_tail());
    }
}

#[tokio::test]
async fn a_provider_cannot_move_its_claim_into_another_pool() {
    let (cp, client) = cluster().await;
    let names = Names::new("relabel");
    let host = Host::start(cp, &names, &[]);
    let (victim_pool, hostile_pool) = (names.name("kwok-pool"), names.name("hostile-pool"));
    let (kwok_class, hostile_class) = (names.name("kwok"), names.name("hostile"));
    node_class(&client, &names, &kwok_class, "kwok", json!({})).await;
    node_pool(&client, node_pool_json(&names, &victim_pool, &kwok_class)).await;
    node_class(
        &client,
        &names,
        &hostile_class,
        "chaos",
        json!({"mode": "instance", "createLabels": {
            "karpenter.sh/nodepool": victim_pool,
            "node-restriction.kubernetes.io/secure": "true",
        }}),
    )
    .await;
    let name = names.name("claim");
    claim(
        &client,
        claim_json(&names, &name, &hostile_pool, &hostile_class),
    )
    .await;

    let refused = wait_condition(
        &client,
        &host,
        &name,
        "Launched",
        "Unknown",
        Some("ProviderAnswerRefused"),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        refused.labels().get("karpenter.sh/nodepool"),
        Some(&hostile_pool),
        "the claim keeps its pool"
    );
    assert!(
        !refused
            .labels()
            .contains_key("node-restriction.kubernetes.io/secure"),
        "no reserved label written: {:?}",
        refused.labels()
    );
    refused_with_note(
        &client,
        &host,
        &refused,
        &[
            format!(
                "label karpenter.sh/nodepool={victim_pool} would change the claim's karpenter.sh/nodepool={hostile_pool}"
            ),
            "node-restriction.kubernetes.io/secure=true is in the reserved domain".to_owned(),
        ],
    )
    .await;
    wait_provider_note(
        &client,
        &host,
        "chaos",
        "ProviderAnswerRefused",
        &format!("for NodeClaim {name} refused"),
    )
    .await;
    // Still refused on the retries: the claim never joins the other pool.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let again = Api::<NodeClaim>::all(client.clone())
        .get(&name)
        .await
        .unwrap();
    assert_eq!(
        again.labels().get("karpenter.sh/nodepool"),
        Some(&hostile_pool)
    );
    host.check_alive();
    cleanup(&client, &names).await;
}

#[tokio::test]
async fn a_provider_cannot_take_over_another_providers_node() {
    let (cp, client) = cluster().await;
    let names = Names::new("takeover");
    let host = Host::start(cp, &names, &[]);
    let pool = names.name("pool");
    let kwok_class = names.name("kwok");
    node_class(&client, &names, &kwok_class, "kwok", json!({})).await;
    let victim = names.name("victim");
    claim(&client, claim_json(&names, &victim, &pool, &kwok_class)).await;
    let registered = wait_condition(
        &client,
        &host,
        &victim,
        "Registered",
        "True",
        None,
        Duration::from_secs(60),
    )
    .await;
    let victim_id = registered
        .status
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .expect("the victim's provider ID");

    // A Node no claim manages, older than any claim that could want it.
    let unmanaged = names.name("unmanaged");
    let unmanaged_id = format!("fake://{unmanaged}");
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": unmanaged, "labels": {RUN_LABEL: names.run}},
        "spec": {"providerID": unmanaged_id},
    }))
    .unwrap();
    let nodes = Api::<Node>::all(client.clone());
    nodes.create(&PostParams::default(), &node).await.unwrap();
    // Creation timestamps have one-second resolution.
    tokio::time::sleep(Duration::from_millis(1100)).await;

    for (what, target) in [
        ("steal-claimed", &victim_id),
        ("steal-unmanaged", &unmanaged_id),
    ] {
        let class = names.name(what);
        node_class(
            &client,
            &names,
            &class,
            "chaos",
            json!({"mode": "instance", "createProviderId": target}),
        )
        .await;
        let name = names.name(&format!("{what}-claim"));
        claim(&client, claim_json(&names, &name, &pool, &class)).await;
        let refused = wait_condition(
            &client,
            &host,
            &name,
            "Launched",
            "Unknown",
            Some("ProviderIDTaken"),
            Duration::from_secs(60),
        )
        .await;
        let expected = if what == "steal-claimed" {
            format!("provider ID {victim_id} belongs to NodeClaim {victim}")
        } else {
            format!("Node {unmanaged} was created at")
        };
        refused_with_note(&client, &host, &refused, &[expected]).await;
    }
    wait_provider_note(
        &client,
        &host,
        "chaos",
        "ProviderIDTaken",
        "belongs to NodeClaim",
    )
    .await;

    // Neither Node changed hands.
    let victim_node = nodes_with_provider_id(&client, &victim_id).await;
    assert_eq!(victim_node.len(), 1);
    let owners: Vec<String> = victim_node[0]
        .owner_references()
        .iter()
        .map(|o| o.name.clone())
        .collect();
    assert_eq!(
        owners,
        vec![victim.clone()],
        "the victim's Node keeps one owner"
    );
    assert_eq!(
        victim_node[0].labels().get("karpenter.sh/nodepool"),
        Some(&pool)
    );
    let untouched = nodes.get(&unmanaged).await.unwrap();
    assert!(untouched.owner_references().is_empty());
    assert!(
        untouched.finalizers().is_empty(),
        "no termination finalizer on it"
    );
    host.check_alive();
    let _ = nodes.delete(&unmanaged, &Default::default()).await;
    cleanup(&client, &names).await;
}

/// Two launches answered with one provider ID at once (both `create`s sleep, then answer the same
/// ID): exactly one claim takes the ID and the Node carrying it; the other is refused
/// (`ProviderIDTaken`), holds no provider ID, and never adopts the Node.
#[tokio::test]
async fn two_launches_answered_with_one_provider_id_never_share_a_node() {
    let (cp, client) = cluster().await;
    let names = Names::new("oneid");
    let host = Host::start(cp, &names, &[]);
    let pool = names.name("pool");
    let class = names.name("shared");
    let shared_id = format!("chaos://{}", names.name("instance"));
    node_class(
        &client,
        &names,
        &class,
        "chaos",
        json!({"mode": "instance", "createProviderId": shared_id, "createSleepMillis": 3000}),
    )
    .await;
    let (first, second) = (names.name("first"), names.name("second"));
    let claims = Api::<NodeClaim>::all(client.clone());
    let (a, b) = tokio::join!(
        claim(&client, claim_json(&names, &first, &pool, &class)),
        claim(&client, claim_json(&names, &second, &pool, &class)),
    );
    drop((a, b));
    // The Node the shared instance registers as (a kubelet's: no ownership mark), newer than
    // both claims (creation timestamps have one-second resolution).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let node_name = names.name("shared-node");
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node_name, "labels": {RUN_LABEL: names.run}},
        "spec": {"providerID": shared_id},
    }))
    .unwrap();
    let nodes = Api::<Node>::all(client.clone());
    nodes.create(&PostParams::default(), &node).await.unwrap();

    // One launches and registers; the other is refused.
    let outcome = capstan_test_support::wait_until(
        Duration::from_secs(90),
        "one claim Registered, the other refused with ProviderIDTaken",
        || async {
            let mut winner = None;
            let mut loser = None;
            for name in [&first, &second] {
                let claim = claims.get(name).await?;
                match (
                    condition(&claim, "Registered").map(|(s, _)| s),
                    condition(&claim, "Launched"),
                ) {
                    (Some(s), _) if s == "True" => winner = Some(claim),
                    (_, Some((s, r))) if s == "Unknown" && r == "ProviderIDTaken" => {
                        loser = Some(claim)
                    }
                    _ => {}
                }
            }
            Ok::<_, kube::Error>(winner.zip(loser))
        },
    )
    .await;
    let (winner, loser) = match outcome {
        Ok(pair) => pair,
        Err(err) => panic!("{err}\nhost log:\n{}", host.log_tail()),
    };
    refused_with_note(
        &client,
        &host,
        &loser,
        &[format!(
            "provider ID {shared_id} belongs to NodeClaim {}",
            winner.name_any()
        )],
    )
    .await;
    // A while later: still one owner, and the loser never took the ID.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let node = nodes.get(&node_name).await.unwrap();
    let owners: Vec<String> = node
        .owner_references()
        .iter()
        .map(|o| o.name.clone())
        .collect();
    assert_eq!(owners, vec![winner.name_any()], "one owner");
    let loser = claims.get(&loser.name_any()).await.unwrap();
    assert!(
        loser
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_ref())
            .is_none(),
        "{loser:?}"
    );
    host.check_alive();
    let _ = nodes.delete(&node_name, &Default::default()).await;
    cleanup(&client, &names).await;
}

/// A provider's annotations never overwrite the claim's: a colliding one is dropped (an Event
/// names it), the others are added.
#[tokio::test]
async fn the_claims_annotations_win_over_the_providers() {
    let (cp, client) = cluster().await;
    let names = Names::new("annot");
    let host = Host::start(cp, &names, &[]);
    let pool = names.name("pool");
    let class = names.name("annotating");
    node_class(
        &client,
        &names,
        &class,
        "chaos",
        json!({"mode": "instance", "createAnnotations": {
            "example.com/team": "hostile",
            "example.com/rack": "r7",
        }}),
    )
    .await;
    let name = names.name("claim");
    let mut body = claim_json(&names, &name, &pool, &class);
    body["metadata"]["annotations"] = json!({"example.com/team": "payments"});
    claim(&client, body).await;
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
    let annotations = launched.annotations();
    assert_eq!(
        annotations.get("example.com/team").map(String::as_str),
        Some("payments"),
        "the claim's own value: {annotations:?}"
    );
    assert_eq!(
        annotations.get("example.com/rack").map(String::as_str),
        Some("r7"),
        "the provider's new one: {annotations:?}"
    );
    let found = capstan_test_support::wait_until(
        Duration::from_secs(30),
        "a ProviderAnnotationsDropped Event naming example.com/team",
        || async {
            let notes =
                capstan_notes(&client, "default", &name, "ProviderAnnotationsDropped").await;
            Ok::<_, kube::Error>(notes.into_iter().find(|n| n.contains("example.com/team")))
        },
    )
    .await;
    if let Err(err) = found {
        panic!("{err}\nhost log:\n{}", host.log_tail());
    }
    host.check_alive();
    cleanup(&client, &names).await;
}
