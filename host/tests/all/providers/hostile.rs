//! Grants from `Provider.spec.grants` on real calls (every denial a typed error, a counter and
//! an Event on the Provider), and providers that trap, hang or exhaust memory on every call next
//! to one that behaves.

use std::time::{Duration, Instant};

use crate::lifecycle::RUN_LABEL;
use capstan::api::provider::{GrantCluster, GrantScope, ProviderLimits};
use capstan::capability::grants::Cluster;
use capstan::capability::kube::{ListOptions, Target};
use capstan::provider::source::sha256_hex;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::{Setup, grant, variant};
use crate::fixtures::{chaos_bytes, class, kwok_bytes, pool};
use crate::grants::{case, kube_call};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_provider_is_denied_everything_it_was_not_granted() {
    let (_, management) = crate::lifecycle::cluster().await;
    let setup = Setup::start_with("hostile", Some(management), |_| {}).await;
    let name = setup.names.name("hostile");
    let bytes = variant(chaos_bytes(), 3000);
    setup.put_source("src", "provider.wasm", &bytes).await;
    let mut spec = setup.spec("src", "provider.wasm");
    // Reading the admin's ConfigMap takes an unscoped grant (ownership is the next tests').
    let mut read = grant(
        GrantCluster::Workload,
        &[""],
        &["configmaps"],
        &["get"],
        &[&setup.namespace],
    );
    read.scope = GrantScope::Any;
    spec.grants = vec![read];
    setup.put_provider(&name, spec).await;
    let provider = setup.wait_serving(&name, &sha256_hex(&bytes)).await;
    let ns = setup.namespace.clone();

    // What it was granted works.
    let own = json!({"op": "get", "kind": "ConfigMap", "namespace": ns, "name": "src"});
    assert_eq!(kube_call(&provider, own).await, Ok(()));

    let attempts = [
        (
            "a Secret",
            json!({"op": "get", "kind": "Secret", "namespace": ns, "name": "anything"}),
        ),
        (
            "another namespace",
            json!({"op": "get", "kind": "ConfigMap", "namespace": "kube-system", "name": "kube-root-ca.crt"}),
        ),
        (
            "a verb not granted",
            json!({"op": "delete", "kind": "ConfigMap", "namespace": ns, "name": "src"}),
        ),
        (
            "a resource not granted",
            json!({"op": "list", "kind": "Node"}),
        ),
        (
            "the management cluster",
            json!({"op": "get", "cluster": "management", "kind": "ConfigMap", "namespace": ns, "name": "src"}),
        ),
    ];
    for (what, call) in &attempts {
        let result = kube_call(&provider, call.clone()).await;
        assert_eq!(
            case(result.clone()),
            "permission-denied",
            "{what}: {result:?}"
        );
    }
    let metrics = provider.capabilities().metrics().snapshot();
    assert_eq!(metrics.kube_denied, attempts.len() as u64);
    assert_eq!(metrics.kube_calls, attempts.len() as u64 + 1);
    // The source ConfigMap survived the delete attempt.
    assert_eq!(
        kube_call(
            &provider,
            json!({"op": "get", "kind": "ConfigMap", "namespace": ns, "name": "src"})
        )
        .await,
        Ok(())
    );
    // Reported to the admin as Events on the Provider.
    let note = setup.wait_event(&name, "PermissionDenied").await;
    assert!(note.contains("denied by the Provider's grants"), "{note}");
    capstan_test_support::wait_until(
        Duration::from_secs(30),
        "an Event per denied call",
        || async {
            let notes: Vec<String> = setup
                .events(&name, "PermissionDenied")
                .await
                .into_iter()
                .filter_map(|e| e.note)
                .collect();
            let all = ["secrets", "kube-system", "delete", "Node", "management"]
                .iter()
                .all(|needle| notes.iter().any(|n| n.contains(needle)));
            Ok::<_, String>(all.then_some(()))
        },
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn misbehaving_providers_do_not_disturb_the_others() {
    let setup = Setup::start("misbehave", |_| {}).await;
    let bad = setup.names.name("bad");
    let good = setup.names.name("good");
    let bad_bytes = variant(chaos_bytes(), 4000);
    let good_bytes = variant(kwok_bytes(), 4000);
    setup
        .put_source("bad-src", "provider.wasm", &bad_bytes)
        .await;
    setup
        .put_source("good-src", "provider.wasm", &good_bytes)
        .await;
    let mut bad_spec = setup.spec("bad-src", "provider.wasm");
    bad_spec.limits = Some(ProviderLimits {
        memory: Some(capstan::api::shared::Quantity::new("32Mi")),
        call_timeout: Some("1s".into()),
        ..ProviderLimits::default()
    });
    setup.put_provider(&bad, bad_spec).await;
    setup
        .put_provider(&good, setup.spec("good-src", "provider.wasm"))
        .await;
    let bad_provider = setup.wait_serving(&bad, &sha256_hex(&bad_bytes)).await;
    let good_provider = setup.wait_serving(&good, &sha256_hex(&good_bytes)).await;

    let started = Instant::now();
    let misbehave = tokio::spawn(async move {
        let modes = [
            json!({"mode": "trap"}),
            json!({"mode": "spin"}),
            json!({"mode": "grow", "bytes": 256u64 << 20}),
        ];
        let mut failures = 0;
        for round in 0..4 {
            let calls = modes.iter().map(|mode| {
                let provider = std::sync::Arc::clone(&bad_provider);
                let mode = mode.clone();
                async move {
                    provider
                        .get_instance_types(&pool(&format!("r{round}")), &class(mode))
                        .await
                }
            });
            for result in futures::future::join_all(calls).await {
                assert!(result.is_err(), "a misbehaving call succeeded");
                failures += 1;
            }
        }
        // Still loaded and callable after all that.
        assert_eq!(bad_provider.name().await.unwrap(), "chaos");
        failures
    });
    let mut good_calls = 0;
    while !misbehave.is_finished() {
        let types = good_provider
            .get_instance_types(&pool("good"), &class(json!({})))
            .await
            .expect("the good provider keeps working");
        assert!(!types.catalog.instance_types.is_empty());
        good_calls += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let failures = misbehave.await.unwrap();
    eprintln!(
        "{failures} misbehaving calls failed alone; {good_calls} good calls succeeded in {:?}",
        started.elapsed()
    );
    assert_eq!(failures, 12);
    assert!(good_calls >= 4, "only {good_calls} good calls");
    // Both Providers stay Ready: misbehaving calls are call failures, not load failures.
    setup.wait_condition(&bad, "Ready", "True", "Loaded").await;
    setup.wait_condition(&good, "Ready", "True", "Loaded").await;
}

/// The Node a test plays "another provider's" with: marked `capstan.dev/provider: <owner>` (or
/// unmarked), labelled for the test's run, with a taint-free spec.
async fn foreign_node(setup: &Setup, name: &str, owner: Option<&str>) -> Node {
    let mut labels = serde_json::Map::new();
    labels.insert(RUN_LABEL.into(), json!(setup.names.run));
    labels.insert("team".into(), json!("victim"));
    if let Some(owner) = owner {
        labels.insert("capstan.dev/provider".into(), json!(owner));
    }
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": format!("kwok://{name}")},
    }))
    .unwrap();
    Api::<Node>::all(setup.client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap()
}

/// kwok's grants (Nodes and their status), at `scope`.
fn kwok_grants(scope: GrantScope) -> Vec<capstan::api::provider::ProviderGrant> {
    let mut nodes = grant(
        GrantCluster::Workload,
        &[""],
        &["nodes"],
        &["get", "list", "create", "patch", "delete"],
        &[],
    );
    nodes.scope = scope;
    let mut status = grant(
        GrantCluster::Workload,
        &[""],
        &["nodes/status"],
        &["patch"],
        &[],
    );
    status.scope = scope;
    vec![nodes, status]
}

/// A provider with kwok's grants (`scope: owned`, the default) reaches only the Nodes it owns:
/// it cannot read, relabel, patch the status of, taint, cordon or delete another provider's Node
/// or one no provider manages, nor create a Node outside a launch, nor plant one under another
/// provider's mark; a list sees only its own. Each refusal is `permission-denied`, counted in
/// `kube_not_owned` and an Event `NotOwned` (`OwnershipMark`) on the Provider. The same patch under
/// an explicit `scope: any` grant goes through: the refusals are the scope's doing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_touches_only_the_nodes_it_owns() {
    let setup = Setup::start("owned", |_| {}).await;
    let name = setup.names.name("hostile");
    let bytes = variant(chaos_bytes(), 3100);
    setup.put_source("src", "provider.wasm", &bytes).await;
    let mut spec = setup.spec("src", "provider.wasm");
    spec.grants = kwok_grants(GrantScope::Owned);
    setup.put_provider(&name, spec).await;
    let provider = setup.wait_serving(&name, &sha256_hex(&bytes)).await;
    let nodes = Api::<Node>::all(setup.client.clone());

    let theirs = setup.names.name("kwoks-node");
    let unmanaged = setup.names.name("unmanaged-node");
    foreign_node(&setup, &theirs, Some("kwok")).await;
    foreign_node(&setup, &unmanaged, None).await;

    let node = |op: &str, target: &str, extra: serde_json::Value| {
        let mut call = json!({"op": op, "kind": "Node", "name": target});
        if let (Some(call), Some(extra)) = (call.as_object_mut(), extra.as_object()) {
            call.extend(extra.clone());
        }
        call
    };
    let mut refused = 0u64;
    for target in [&theirs, &unmanaged] {
        let attempts = [
            ("read", node("get", target, json!({}))),
            (
                "relabel",
                node(
                    "patch",
                    target,
                    json!({"body": {"metadata": {"labels": {"team": "hostile"}}}}),
                ),
            ),
            (
                "patch the status of",
                node(
                    "patch",
                    target,
                    json!({"subresource": "status",
                    "body": {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}}),
                ),
            ),
            (
                "taint",
                node(
                    "patch",
                    target,
                    json!({"patchType": "json", "body": [
                    {"op": "add", "path": "/spec/taints", "value": [{"key": "x", "effect": "NoSchedule"}]}]}),
                ),
            ),
            (
                "cordon",
                node(
                    "patch",
                    target,
                    json!({"body": {"spec": {"unschedulable": true}}}),
                ),
            ),
            ("delete", node("delete", target, json!({}))),
        ];
        for (what, call) in attempts {
            let result = kube_call(&provider, call).await;
            assert_eq!(
                case(result.clone()),
                "permission-denied",
                "{what} {target}: {result:?}"
            );
            let message = result.unwrap_err();
            assert!(
                message.contains(&format!("Node {target}"))
                    && message.contains("capstan.dev/provider="),
                "{what} {target}: {message}"
            );
            refused += 1;
        }
    }
    // A Node created outside a launch (validate-node-class is not `create`) is refused too.
    let planted = setup.names.name("planted");
    let create = |labels: serde_json::Value| {
        json!({"op": "create", "kind": "Node", "body": {
            "metadata": {"name": planted, "labels": labels},
            "spec": {"providerID": format!("kwok://{planted}")}}})
    };
    let outside = kube_call(&provider, create(json!({}))).await;
    assert_eq!(case(outside.clone()), "permission-denied", "{outside:?}");
    assert!(
        outside
            .unwrap_err()
            .contains("only while it launches a NodeClaim"),
        "the rule is named"
    );
    refused += 1;
    assert!(nodes.get_opt(&planted).await.unwrap().is_none());

    let metrics = provider.capabilities().metrics().snapshot();
    assert_eq!(metrics.kube_not_owned, refused, "{metrics:?}");
    assert_eq!(metrics.kube_denied, refused, "{metrics:?}");

    // Nothing changed on either Node.
    for target in [&theirs, &unmanaged] {
        let node = nodes.get(target).await.unwrap();
        assert_eq!(
            node.labels().get("team").map(String::as_str),
            Some("victim")
        );
        let spec = node.spec.unwrap_or_default();
        // (kube-controller-manager may taint a Node no kubelet reports for, and write its Ready
        // condition as Unknown: only what the provider tried is looked for.)
        assert!(
            !spec.taints.unwrap_or_default().iter().any(|t| t.key == "x"),
            "{target}"
        );
        assert_ne!(spec.unschedulable, Some(true), "{target}");
        assert!(
            !node
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "False"),
            "{target}"
        );
    }

    // A list sees none of them: filtered by the mark, not refused.
    let listed = provider
        .capabilities()
        .kube()
        .list(
            &Target {
                cluster: Cluster::Workload,
                api_version: "v1".into(),
                kind: "Node".into(),
                namespace: None,
            },
            &ListOptions::default(),
        )
        .await
        .unwrap();
    assert!(
        !listed.contains(&theirs) && !listed.contains(&unmanaged),
        "{listed}"
    );

    // Reported to the admin.
    let note = setup.wait_event(&name, "NotOwned").await;
    assert!(note.contains("refused: the provider may not"), "{note}");

    // The same relabel under an explicit `scope: any` grant goes through.
    let mut spec = setup.spec("src", "provider.wasm");
    spec.grants = kwok_grants(GrantScope::Any);
    setup.put_provider(&name, spec).await;
    let flagged = setup
        .wait_condition(&name, "GrantsScoped", "False", "UnscopedGrants")
        .await;
    let message = flagged
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "GrantsScoped"))
        .and_then(|c| c.message.clone())
        .unwrap_or_default();
    assert!(message.contains("has scope any"), "{message}");
    let provider = setup.wait_serving(&name, &sha256_hex(&bytes)).await;
    capstan_test_support::wait_until(
        Duration::from_secs(30),
        "the unscoped grants to apply",
        || async {
            let relabel = node(
                "patch",
                &unmanaged,
                json!({"body": {"metadata": {"labels": {"team": "hostile"}}}}),
            );
            Ok::<_, String>(kube_call(&provider, relabel).await.ok())
        },
    )
    .await
    .unwrap();
    assert_eq!(
        nodes
            .get(&unmanaged)
            .await
            .unwrap()
            .labels()
            .get("team")
            .map(String::as_str),
        Some("hostile")
    );
    for target in [&theirs, &unmanaged] {
        let _ = nodes.delete(target, &Default::default()).await;
    }
}

/// Objects a provider creates carry its mark; it may read, patch and delete them, but never write
/// the mark itself: not remove it, not change it, not through a JSON patch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_cannot_write_its_ownership_mark() {
    let setup = Setup::start("mark", |_| {}).await;
    let name = setup.names.name("marker");
    let bytes = variant(chaos_bytes(), 3200);
    setup.put_source("src", "provider.wasm", &bytes).await;
    let mut spec = setup.spec("src", "provider.wasm");
    spec.grants = vec![grant(
        GrantCluster::Workload,
        &[""],
        &["configmaps"],
        &["get", "create", "patch", "delete"],
        &[&setup.namespace],
    )];
    setup.put_provider(&name, spec).await;
    let provider = setup.wait_serving(&name, &sha256_hex(&bytes)).await;
    let ns = setup.namespace.clone();
    let config_maps = Api::<ConfigMap>::namespaced(setup.client.clone(), &ns);

    let create = json!({"op": "create", "kind": "ConfigMap", "namespace": ns,
        "body": {"metadata": {"name": "mine", "labels": {"a": "1"}}, "data": {"k": "v"}}});
    assert_eq!(kube_call(&provider, create).await, Ok(()));
    let mine = config_maps.get("mine").await.unwrap();
    assert_eq!(
        mine.labels().get("capstan.dev/provider"),
        Some(&name),
        "stamped at creation"
    );
    let patch = |body: serde_json::Value, patch_type: &str| {
        json!({"op": "patch", "kind": "ConfigMap", "namespace": ns, "name": "mine",
            "patchType": patch_type, "body": body})
    };
    assert_eq!(
        kube_call(&provider, patch(json!({"data": {"k": "w"}}), "merge")).await,
        Ok(()),
        "its own object"
    );
    for (what, body, patch_type) in [
        (
            "remove",
            json!({"metadata": {"labels": {"capstan.dev/provider": null}}}),
            "merge",
        ),
        (
            "change",
            json!({"metadata": {"labels": {"capstan.dev/provider": "kwok"}}}),
            "merge",
        ),
        (
            "drop all labels",
            json!({"metadata": {"labels": null}}),
            "merge",
        ),
        (
            "json remove",
            json!([{"op": "remove", "path": "/metadata/labels/capstan.dev~1provider"}]),
            "json",
        ),
    ] {
        let result = kube_call(&provider, patch(body, patch_type)).await;
        assert_eq!(
            case(result.clone()),
            "permission-denied",
            "{what}: {result:?}"
        );
    }
    // A create naming another provider in the mark is stamped with its own name.
    let planted = json!({"op": "create", "kind": "ConfigMap", "namespace": ns,
        "body": {"metadata": {"name": "planted", "labels": {"capstan.dev/provider": "kwok"}}}});
    assert_eq!(kube_call(&provider, planted).await, Ok(()));
    assert_eq!(
        config_maps
            .get("planted")
            .await
            .unwrap()
            .labels()
            .get("capstan.dev/provider"),
        Some(&name),
        "stamped with the creator's name, never another's"
    );
    let mine = config_maps.get("mine").await.unwrap();
    assert_eq!(mine.labels().get("capstan.dev/provider"), Some(&name));
    assert_eq!(mine.labels().get("a").map(String::as_str), Some("1"));
    assert_eq!(
        mine.data.unwrap_or_default().get("k").map(String::as_str),
        Some("w")
    );
    let note = setup.wait_event(&name, "OwnershipMark").await;
    assert!(note.contains("ownership mark"), "{note}");
    let delete = json!({"op": "delete", "kind": "ConfigMap", "namespace": ns, "name": "mine"});
    assert_eq!(kube_call(&provider, delete).await, Ok(()));
    // The source ConfigMap is the admin's: not the provider's to delete.
    let source = json!({"op": "delete", "kind": "ConfigMap", "namespace": ns, "name": "src"});
    assert_eq!(
        case(kube_call(&provider, source).await),
        "permission-denied"
    );
    assert!(config_maps.get_opt("src").await.unwrap().is_some());
}
