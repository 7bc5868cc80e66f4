//! The consolidation verdict on the real control plane: each managed NodeClaim's
//! `ConsolidationBlocked` condition names what holds its node (a do-not-disrupt pod, a
//! PodDisruptionBudget) within seconds, and clears when the cause goes; `capstan explain` reads
//! it back and agrees with what the host does next (a node it calls blocked stays, one it calls
//! free goes); a pool with `capstan.dev/wait-for-jobs` lets a Job's node go once the Job is done.

use std::process::Command;
use std::time::{Duration, Instant};

use capstan::api::NodeClaim;
use capstan_test_support::{ControlPlane, wait_until};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::consolidation::{Scene, delete_pod, on_demand, pool, scene};
use crate::disruption::{GROUP, pods, pool_nodes, wait_running};
use crate::lifecycle::{self, Names, RUN_LABEL};
use crate::provisioner::{claims, teardown};

/// A bare pod `name` of `cpu` on pool `pool`, with `labels` and `annotations`.
async fn bare_pod(
    client: &Client,
    names: &Names,
    ns: &str,
    (name, pool): (&str, &str),
    cpu: &str,
    (labels, annotations): (serde_json::Value, serde_json::Value),
) {
    let mut all_labels = json!({RUN_LABEL: names.run});
    if let (Some(all), Some(extra)) = (all_labels.as_object_mut(), labels.as_object()) {
        all.extend(extra.clone());
    }
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": all_labels, "annotations": annotations},
        "spec": {
            "nodeSelector": {GROUP: pool},
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "app", "image": "fake",
                            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}],
        },
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
}

/// The node pod `name` runs on.
pub(crate) async fn node_of(client: &Client, ns: &str, name: &str) -> String {
    let pod = Api::<Pod>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap();
    pod.spec.and_then(|s| s.node_name).unwrap()
}

/// The claim of node `node`, if it is still there.
pub(crate) async fn claim_of(client: &Client, names: &Names, node: &str) -> Option<NodeClaim> {
    claims(client, names).await.into_iter().find(|c| {
        c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
            && c.metadata.deletion_timestamp.is_none()
    })
}

/// The claim's `ConsolidationBlocked` (status, reason, message).
pub(crate) fn verdict(claim: &NodeClaim) -> Option<(String, String, String)> {
    let (status, reason) = lifecycle::condition(claim, "ConsolidationBlocked")?;
    let message = claim
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "ConsolidationBlocked")?
        .message
        .clone()
        .unwrap_or_default();
    Some((status, reason, message))
}

/// Waits until node `node`'s verdict has `reason`; returns its message.
pub(crate) async fn wait_verdict(
    scene: &Scene,
    node: &str,
    reason: &str,
    timeout: Duration,
) -> String {
    let what = format!("{node}'s ConsolidationBlocked reason {reason}");
    let last = std::sync::Mutex::new(None);
    let found = wait_until(timeout, &what, || {
        let last = &last;
        async move {
            scene.host.check_alive();
            let v = claim_of(&scene.client, &scene.names, node)
                .await
                .and_then(|c| verdict(&c));
            let hit = v
                .as_ref()
                .filter(|(_, r, _)| r == reason)
                .map(|(_, _, m)| m.clone());
            *last.lock().unwrap() = v;
            Ok::<_, kube::Error>(hit)
        }
    })
    .await;
    found.unwrap_or_else(|e| {
        let last = last.lock().unwrap().clone();
        panic!("{e}; last verdict {last:?}\n{}", scene.host.log_tail())
    })
}

/// A host (with the short validation delay), a kwok NodeClass of 2-cpu nodes at most, a
/// namespace, and a pool `p` that consolidates anything after 5 s with no budget in the way.
async fn one_pool(prefix: &str) -> (Scene, String) {
    let scene = scene(
        prefix,
        &["--batch-idle-duration", "500ms"],
        json!({"maxCpu": 2}),
    )
    .await;
    let p = scene.names.name("p");
    pool(
        &scene.client,
        &scene.names,
        (&p, &scene.class),
        on_demand(),
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5s",
               "budgets": [{"nodes": "100%"}]}),
    )
    .await;
    (scene, p)
}

/// `capstan explain ARGS -o json` against the scene's control plane.
pub(crate) fn explain(scene: &Scene, args: &[&str]) -> serde_json::Value {
    explain_cli(scene.cp, args)
}

/// `capstan explain ARGS -o json` against `cp`.
pub(crate) fn explain_cli(cp: &ControlPlane, args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .arg("explain")
        .arg("--kubeconfig")
        .arg(cp.kubeconfig_path())
        .args(args)
        .args(["-o", "json"])
        .output()
        .expect("run capstan explain");
    assert!(
        out.status.success(),
        "capstan explain {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A do-not-disrupt pod and a PodDisruptionBudget at zero each hold a node; the verdict names
/// them within seconds and `explain` says the same; when the pod goes its node's verdict clears
/// and the node is consolidated, while the PDB's node stays as `explain` said; when the PDB goes
/// its verdict clears too.
#[tokio::test]
async fn the_verdict_names_what_holds_a_node_and_explain_agrees() {
    let (scene, p) = one_pool("verdict").await;
    let Scene {
        client,
        names,
        host,
        ns,
        ..
    } = &scene;
    // One 1500m pod per 2-cpu node.
    bare_pod(
        client,
        names,
        ns,
        ("held", &p),
        "1500m",
        (json!({}), json!({"karpenter.sh/do-not-disrupt": "true"})),
    )
    .await;
    bare_pod(
        client,
        names,
        ns,
        ("guarded", &p),
        "1500m",
        (json!({"app": "guarded"}), json!({})),
    )
    .await;
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "keep-guarded"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }))
    .unwrap();
    Api::<PodDisruptionBudget>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pdb)
        .await
        .unwrap();
    wait_running(client, host, ns, 2, Duration::from_secs(300)).await;
    let held_node = node_of(client, ns, "held").await;
    let guarded_node = node_of(client, ns, "guarded").await;
    assert_ne!(held_node, guarded_node, "one 1500m pod per 2-cpu node");

    let started = Instant::now();
    let message = wait_verdict(
        &scene,
        &held_node,
        "DoNotDisruptPod",
        Duration::from_secs(60),
    )
    .await;
    assert!(message.contains(&format!("{ns}/held")), "{message}");
    let message = wait_verdict(
        &scene,
        &guarded_node,
        "PodDisruptionBudget",
        Duration::from_secs(60),
    )
    .await;
    assert!(
        message.contains(&format!("{ns}/keep-guarded"))
            && message.contains(&format!("{ns}/guarded")),
        "{message}"
    );
    println!(
        "do-not-disrupt and PDB verdicts on the claims {:?} after both pods ran",
        started.elapsed()
    );

    // explain reads the same verdicts; with both nodes held, the host does nothing next.
    let node = explain(&scene, &["node", &held_node]);
    assert_eq!(node["schema"], "capstan.dev/explain/v1");
    assert_eq!(node["verdict"]["blocked"], true, "{node}");
    assert_eq!(node["verdict"]["reason"], "DoNotDisruptPod", "{node}");
    assert!(
        node["verdict"]["unblock"]
            .as_str()
            .unwrap()
            .contains("do-not-disrupt"),
        "{node}"
    );
    assert_eq!(node["pods"], json!([format!("{ns}/held")]), "{node}");
    let pool_answer = explain(&scene, &["nodepool", &p]);
    assert_eq!(pool_answer["next"]["action"], "none", "{pool_answer}");
    assert_eq!(
        pool_answer["byReason"]["DoNotDisruptPod"], 1,
        "{pool_answer}"
    );
    assert_eq!(
        pool_answer["byReason"]["PodDisruptionBudget"], 1,
        "{pool_answer}"
    );

    // The held pod goes: the verdict leaves DoNotDisruptPod and the empty node is consolidated.
    delete_pod(client, ns, "held").await;
    let gone = Instant::now();
    let seen = std::sync::Mutex::new(Vec::new());
    wait_until(Duration::from_secs(120), "the held node to go", || {
        let seen = &seen;
        let held_node = &held_node;
        async move {
            host.check_alive();
            match claim_of(client, names, held_node)
                .await
                .and_then(|c| verdict(&c))
            {
                Some((_, reason, _)) => {
                    let mut seen = seen.lock().unwrap();
                    if seen.last() != Some(&reason) {
                        seen.push(reason);
                    }
                }
                None => return Ok::<_, kube::Error>(Some(())),
            }
            Ok(None)
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; verdicts {seen:?}\n{}", host.log_tail()));
    let seen = seen.into_inner().unwrap();
    println!(
        "held node consolidated {:?} after its pod went; verdicts seen {seen:?}",
        gone.elapsed()
    );
    assert!(
        seen.iter().any(|r| r != "DoNotDisruptPod"),
        "the verdict clears when the pod goes: {seen:?}"
    );

    // The PDB's node stays, as explain says, and its verdict still names the budget.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let node = explain(&scene, &["node", &guarded_node]);
    assert_eq!(node["verdict"]["reason"], "PodDisruptionBudget", "{node}");
    assert!(
        Api::<Node>::all(client.clone())
            .get_opt(&guarded_node)
            .await
            .unwrap()
            .is_some_and(|n| n.metadata.deletion_timestamp.is_none()),
        "a node explain calls blocked is not disrupted"
    );

    // The PDB goes: its verdict clears. The pod fits on no other node and on no cheaper one
    // (it is on the cheapest that fits), so the verdict is the search's refusal, with the
    // node's price, and the node stays.
    Api::<PodDisruptionBudget>::namespaced(client.clone(), ns)
        .delete("keep-guarded", &DeleteParams::default())
        .await
        .unwrap();
    let message = wait_verdict(&scene, &guarded_node, "NoRoom", Duration::from_secs(60)).await;
    assert!(
        message.contains("cheaper than its $") && message.contains("/h"),
        "the price named: {message}"
    );
    let node = explain(&scene, &["node", &guarded_node]);
    assert_eq!(node["verdict"]["blocked"], true, "{node}");
    assert_eq!(pool_nodes(client, &p, GROUP).await.len(), 1);
    assert_eq!(pods(client, ns).await.len(), 1);
    host.check_alive();
    teardown(client, names, ns).await;
}

/// A pool with `capstan.dev/wait-for-jobs` lets a Job's node go once the Job is done: kwok's
/// default stages complete a Job's pod as soon as it runs, so the node is empty and consolidated
/// (`job_hold` keeps a Job's pod running and sees the node held meanwhile).
#[tokio::test]
async fn a_finished_job_lets_its_node_go_under_wait_for_jobs() {
    let (scene, p) = one_pool("jobs").await;
    let Scene {
        client,
        names,
        host,
        ns,
        ..
    } = &scene;
    Api::<capstan::api::NodePool>::all(client.clone())
        .patch(
            &p,
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"metadata": {"annotations": {"capstan.dev/wait-for-jobs": "true"}}}),
            ),
        )
        .await
        .unwrap();
    let job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(json!({
        "metadata": {"name": "batch", "labels": {RUN_LABEL: names.run}},
        "spec": {"template": {
            "metadata": {"labels": {RUN_LABEL: names.run}},
            "spec": {
                "restartPolicy": "Never",
                "nodeSelector": {GROUP: p},
                "containers": [{"name": "work", "image": "fake",
                                "resources": {"requests": {"cpu": "1500m", "memory": "64Mi"}}}],
            }}},
    }))
    .unwrap();
    Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &job)
        .await
        .unwrap();
    let node = wait_until(Duration::from_secs(300), "a node for the Job", || async {
        host.check_alive();
        let nodes = pool_nodes(client, &p, GROUP).await;
        Ok::<_, kube::Error>(nodes.keys().next().cloned())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    let done = Instant::now();
    wait_until(Duration::from_secs(120), "the Job's node to go", || async {
        host.check_alive();
        let left = pool_nodes(client, &p, GROUP).await;
        Ok::<_, kube::Error>((!left.contains_key(&node)).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    println!(
        "the finished Job's node went {:?} after it came up",
        done.elapsed()
    );
    let succeeded = pods(client, ns)
        .await
        .iter()
        .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"));
    assert!(succeeded, "the Job's pod finished before its node went");
    host.check_alive();
    teardown(client, names, ns).await;
}

/// `consolidateAfter` (with the moment it ends), a closed pool budget (naming the pool and its
/// budget) and `WhenEmpty` with pods each show on the claim, and clear when their cause goes:
/// the budget opened, the node explain calls free is consolidated.
#[tokio::test]
async fn budgets_consolidate_after_and_when_empty_show_and_clear() {
    let scene = scene(
        "verdict-budget",
        &["--batch-idle-duration", "500ms"],
        json!({"maxCpu": 2}),
    )
    .await;
    let Scene {
        client,
        names,
        host,
        class,
        ns,
        ..
    } = &scene;
    let (closed, empty_only) = (names.name("closed"), names.name("when-empty"));
    pool(
        client,
        names,
        (&closed, class),
        on_demand(),
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "15s",
               "budgets": [{"nodes": "0"}]}),
    )
    .await;
    pool(
        client,
        names,
        (&empty_only, class),
        on_demand(),
        json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5s",
               "budgets": [{"nodes": "100%"}]}),
    )
    .await;
    bare_pod(
        client,
        names,
        ns,
        ("a", &closed),
        "1500m",
        (json!({}), json!({})),
    )
    .await;
    bare_pod(
        client,
        names,
        ns,
        ("b", &empty_only),
        "1500m",
        (json!({}), json!({})),
    )
    .await;
    wait_running(client, host, ns, 2, Duration::from_secs(300)).await;
    let closed_node = node_of(client, ns, "a").await;
    let empty_only_node = node_of(client, ns, "b").await;

    let message = wait_verdict(
        &scene,
        &empty_only_node,
        "WhenEmptyNotEmpty",
        Duration::from_secs(60),
    )
    .await;
    assert!(message.contains(&format!("{ns}/b")), "{message}");

    // The pod leaves the closed pool's node: first consolidateAfter runs (the message names
    // when it ends), then the budget of 0 holds the empty node.
    delete_pod(client, ns, "a").await;
    let message = wait_verdict(
        &scene,
        &closed_node,
        "ConsolidateAfter",
        Duration::from_secs(30),
    )
    .await;
    assert!(message.contains("consolidatable"), "{message}");
    let message = wait_verdict(
        &scene,
        &closed_node,
        "DisruptionBudget",
        Duration::from_secs(60),
    )
    .await;
    assert!(
        message.contains(&format!("NodePool {closed}"))
            && message.contains("nodes \"0\"")
            && message.contains("Empty"),
        "{message}"
    );
    let answer = explain(&scene, &["nodepool", &closed]);
    assert_eq!(answer["next"]["action"], "none", "{answer}");
    assert_eq!(pool_nodes(client, &closed, GROUP).await.len(), 1);

    // The budget opens: the empty node goes.
    Api::<capstan::api::NodePool>::all(client.clone())
        .patch(
            &closed,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"disruption": {"budgets": [{"nodes": "100%"}]}}})),
        )
        .await
        .unwrap();
    wait_until(Duration::from_secs(120), "the empty node to go", || async {
        host.check_alive();
        Ok::<_, kube::Error>(
            pool_nodes(client, &closed, GROUP)
                .await
                .is_empty()
                .then_some(()),
        )
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    // The WhenEmpty pool's node keeps its pod and stays.
    assert_eq!(pool_nodes(client, &empty_only, GROUP).await.len(), 1);
    host.check_alive();
    teardown(client, names, ns).await;
}
