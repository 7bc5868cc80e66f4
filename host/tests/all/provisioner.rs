//! The provisioner against the real control plane: kube-scheduler marks pods unschedulable, the
//! `capstan run` binary with the real kwok provider creates NodeClaims, the nodes register and
//! kube-scheduler binds the pods.
//!
//! Pods carry the test's run label (the host's `--selector` then limits the provisioner to them)
//! and select the test's NodePool, so concurrent tests never see each other's pods or nodes.

use std::time::{Duration, Instant};

use capstan::api::NodeClaim;
use capstan::api::labels::PRICE_ANNOTATION;
use capstan_test_support::{ControlPlane, wait_until};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::fixtures::kwok_file;
use crate::lifecycle::{
    Host, Names, cleanup, cluster, events, node_class, node_pool, node_pool_json,
};
use crate::provisioner_e2e::Pods;

pub(crate) async fn claims(client: &Client, names: &Names) -> Vec<NodeClaim> {
    Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default().labels(&names.selector()))
        .await
        .unwrap()
        .items
}

pub(crate) async fn namespace(cp: &ControlPlane, prefix: &str) -> String {
    cp.create_namespace_unique(prefix).await.unwrap()
}

pub(crate) async fn teardown(client: &Client, names: &Names, ns: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(ns, &DeleteParams::default())
        .await;
    cleanup(client, names).await;
}

/// Pending pods → packed nodes → Running → deleted → gone, with the kwok provider built in
/// `language` (see [`kwok_file`]).
async fn pending_pods_get_packed_nodes_run_and_go(language: &str) {
    let (cp, client) = cluster().await;
    let names = Names::new(&format!("prov-{language}"));
    let host = Host::start_with_kwok(
        cp,
        &names,
        &["--batch-idle-duration", "500ms"],
        &kwok_file(language),
    );
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(&client, &names, &class, "kwok", json!({"maxCpu": 4})).await;
    node_pool(&client, node_pool_json(&names, &pool, &class)).await;
    let ns = namespace(cp, "prov").await;

    let started = Instant::now();
    let created = Pods::new(&client, &names, &ns, "web")
        .count(10)
        .cpu("1")
        .node_selector(json!({"karpenter.sh/nodepool": pool}))
        .tolerations(json!([{"operator": "Exists"}]))
        .memory("256Mi")
        .create()
        .await;
    let api = Api::<Pod>::namespaced(client.clone(), &ns);
    let running = wait_until(Duration::from_secs(240), "all pods Running", || async {
        let list = api.list(&ListParams::default()).await?;
        let running: Vec<Pod> = list
            .items
            .into_iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .collect();
        Ok::<_, kube::Error>((running.len() == created.len()).then_some(running))
    })
    .await;
    let running = match running {
        Ok(pods) => pods,
        Err(err) => panic!("{err}\nhost log:\n{}", host.log_tail()),
    };
    let elapsed = started.elapsed();
    host.check_alive();

    let claims = claims(&client, &names).await;
    let mut nodes: Vec<String> = running
        .iter()
        .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .collect();
    nodes.sort();
    nodes.dedup();
    println!(
        "kwok in {language}: 10 pods Running in {elapsed:?} on {} node(s) from {} NodeClaim(s)",
        nodes.len(),
        claims.len()
    );
    // Types of at most 4 cpu hold 3 such pods each: 4 nodes packed, never one per pod.
    assert!(
        (4..=5).contains(&nodes.len()),
        "10 pods of 1 cpu on types up to 4 cpu pack: {nodes:?}"
    );
    assert!(
        claims.len() < 10,
        "{:?}",
        claims.iter().map(|c| c.name_any()).collect::<Vec<_>>()
    );
    let node_api = Api::<Node>::all(client.clone());
    for node in &nodes {
        let node = node_api.get(node).await.unwrap();
        assert_eq!(node.labels()["karpenter.sh/nodepool"], pool);
    }
    for claim in &claims {
        assert!(claim.name_any().starts_with(&format!("{pool}-")));
        assert_eq!(claim.labels()["karpenter.sh/nodepool"], pool);
        let price: f64 = claim.annotations()[PRICE_ANNOTATION].parse().unwrap();
        assert!(price > 0.0, "{price}");
        assert_eq!(claim.spec.node_class_ref.name, class);
        assert!(
            claim
                .spec
                .requirements
                .iter()
                .any(|r| r.key == "node.kubernetes.io/instance-type"),
            "{:?}",
            claim.spec.requirements
        );
    }
    let nominated = events(&client, &ns, &created[0], "Nominated").await;
    assert!(
        nominated.iter().any(|e| e
            .note
            .as_deref()
            .is_some_and(|n| n.starts_with("Pod should schedule on: nodeclaim/"))),
        "{nominated:?}"
    );

    // Deleted: the pods, then the claims; the host drains, deletes the Nodes through the
    // provider and drops the claims.
    let deleting = Instant::now();
    api.delete_collection(
        &DeleteParams::default().grace_period(0),
        &ListParams::default(),
    )
    .await
    .unwrap();
    let claim_api = Api::<NodeClaim>::all(client.clone());
    for claim in &claims {
        let _ = claim_api
            .delete(&claim.name_any(), &DeleteParams::default())
            .await;
    }
    let gone = wait_until(Duration::from_secs(120), "claims and nodes gone", || {
        let (client, names, nodes, node_api) = (client.clone(), &names, &nodes, node_api.clone());
        async move {
            let left = self::claims(&client, names).await.len();
            let mut nodes_left = 0;
            for node in nodes {
                if node_api.get_opt(node).await?.is_some() {
                    nodes_left += 1;
                }
            }
            Ok::<_, kube::Error>((left == 0 && nodes_left == 0).then_some(()))
        }
    })
    .await;
    if let Err(err) = gone {
        panic!("{err}\nhost log:\n{}", host.log_tail());
    }
    println!(
        "kwok in {language}: claims and nodes gone {:?} after deletion",
        deleting.elapsed()
    );
    host.check_alive();
    teardown(&client, &names, &ns).await;
}

#[tokio::test]
async fn pending_pods_get_packed_nodes_and_run() {
    pending_pods_get_packed_nodes_run_and_go("rust").await;
}

#[tokio::test]
async fn pending_pods_get_packed_nodes_and_run_with_kwok_in_python() {
    pending_pods_get_packed_nodes_run_and_go("python").await;
}

#[tokio::test]
async fn a_pod_no_pool_satisfies_gets_failed_scheduling_and_no_claim() {
    let (cp, client) = cluster().await;
    let names = Names::new("provno");
    let host = Host::start(cp, &names, &["--batch-idle-duration", "300ms"]);
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(&client, &names, &class, "kwok", json!({})).await;
    node_pool(&client, node_pool_json(&names, &pool, &class)).await;
    let ns = namespace(cp, "provno").await;
    let created = Pods::new(&client, &names, &ns, "arm")
        .count(1)
        .cpu("1")
        .node_selector(json!({"karpenter.sh/nodepool": pool, "kubernetes.io/arch": "s390x"}))
        .tolerations(json!([{"operator": "Exists"}]))
        .memory("256Mi")
        .create()
        .await;
    let event = wait_until(
        Duration::from_secs(60),
        "FailedScheduling event",
        || async {
            Ok::<_, kube::Error>(
                events(&client, &ns, &created[0], "FailedScheduling")
                    .await
                    .into_iter()
                    .find(|e| e.reporting_controller.as_deref() == Some("capstan")),
            )
        },
    )
    .await;
    let event = match event {
        Ok(e) => e,
        Err(err) => panic!("{err}\nhost log:\n{}", host.log_tail()),
    };
    let note = event.note.clone().unwrap_or_default();
    println!("FailedScheduling: {note}");
    assert!(note.contains("kubernetes.io/arch"), "{note}");
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(claims(&client, &names).await.is_empty());
    host.check_alive();
    teardown(&client, &names, &ns).await;
}

#[tokio::test]
async fn a_second_batch_while_claims_are_in_flight_creates_no_duplicates() {
    let (cp, client) = cluster().await;
    let names = Names::new("provdup");
    let host = Host::start(
        cp,
        &names,
        &[
            "--batch-idle-duration",
            "200ms",
            "--batch-max-duration",
            "1s",
        ],
    );
    let (class, pool) = (names.name("nc"), names.name("pool"));
    // Slow launches keep the claims in flight while later batches run.
    node_class(
        &client,
        &names,
        &class,
        "kwok",
        json!({"launchDelayMillis": 8000}),
    )
    .await;
    node_pool(&client, node_pool_json(&names, &pool, &class)).await;
    let ns = namespace(cp, "provdup").await;
    let created = Pods::new(&client, &names, &ns, "api")
        .count(4)
        .cpu("1")
        .node_selector(json!({"karpenter.sh/nodepool": pool}))
        .tolerations(json!([{"operator": "Exists"}]))
        .memory("256Mi")
        .create()
        .await;
    match wait_until(Duration::from_secs(60), "a NodeClaim", || async {
        let c = claims(&client, &names).await;
        Ok::<_, kube::Error>((!c.is_empty()).then_some(c))
    })
    .await
    {
        Ok(c) => c,
        Err(err) => panic!("{err}\nhost log:\n{}", host.log_tail()),
    };
    // Let the first batch finish creating, then touch every pod: each touch is a new batch over
    // the same pending pods, which must pack onto the in-flight claims.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let first: Vec<String> = claims(&client, &names)
        .await
        .iter()
        .map(|c| c.name_any())
        .collect();
    let api = Api::<Pod>::namespaced(client.clone(), &ns);
    for round in 0..3 {
        for pod in &created {
            api.patch(
                pod,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"touch": round.to_string()}}})),
            )
            .await
            .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    let after: Vec<String> = claims(&client, &names)
        .await
        .iter()
        .map(|c| c.name_any())
        .collect();
    let log = host_log(&names);
    let batches = log
        .lines()
        .filter(|l| l.contains("provisioning batch") && l.contains("pods=4"))
        .count();
    println!("claims {first:?} -> {after:?}, {batches} batches over the 4 pods");
    assert!(batches >= 2, "later batches ran:\n{}", host.log_tail());
    assert_eq!(first, after, "no duplicate claims:\n{}", host.log_tail());
    host.check_alive();
    teardown(&client, &names, &ns).await;
}

/// The log of the test's host (`Host::start` names it after the run).
fn host_log(names: &Names) -> String {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let mut text = String::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!("{}-", names.run)) && name.ends_with(".log") {
            text.push_str(&strip_ansi(
                &std::fs::read_to_string(entry.path()).unwrap_or_default(),
            ));
        }
    }
    text
}

/// `text` without ANSI colour sequences.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
