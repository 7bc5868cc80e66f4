//! Node repair on the real control plane (`--feature-gates NodeRepair=true`), with the kwok
//! provider's simulated fault: `KWOKUnhealthy=True` for 30 s makes a node unhealthy (kwok's stages
//! reset `Ready` to `True` at once, but leave other condition types alone).
//!
//! - a node past the toleration is replaced: its claim is deleted at once, its pod deleted once the
//!   rule's drain bound (45 s) has passed even though a PodDisruptionBudget refuses evictions, and
//!   the Deployment's new pod gets a new node;
//! - a node whose fault asks for a reboot (`KWOKRebootRequired`) is rebooted in place: the same
//!   claim, a new boot, its pod that cannot be evicted still on it after the drain's bound;
//! - with two of two nodes unhealthy (more than 20%), nothing is repaired and the node, claim and
//!   pool get `NodeRepairBlocked`.

use std::time::Duration;

use capstan::api::NodeClaim;
use capstan_test_support::{ControlPlane, wait_until};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::lifecycle::{
    Host, Names, RUN_LABEL, cluster, events, node_class, node_pool, node_pool_json,
};
use crate::provisioner::{claims, namespace, teardown};
use crate::provisioner_e2e::Pods;
use crate::static_pool::wait_live;

/// The kwok provider's simulated-fault condition and its toleration.
const UNHEALTHY: &str = "KWOKUnhealthy";
const TOLERATION: Duration = Duration::from_secs(30);

/// Sets `KWOKUnhealthy=True` on `node` through the status subresource, as a node problem detector
/// would.
async fn make_unhealthy(client: &Client, node: &str) {
    set_fault(client, node, UNHEALTHY, "True").await;
}

/// Sets the condition `type_` to `status` on `node`, as of now.
async fn set_fault(client: &Client, node: &str, type_: &str, status: &str) {
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    Api::<Node>::all(client.clone())
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": [{
                "type": type_, "status": status, "reason": "SimulatedFault",
                "message": "set by the node repair test",
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            }]}})),
        )
        .await
        .unwrap();
}

/// Sets `KWOKUnhealthy` to `status` on `node`, its transition `ago` in the past.
async fn set_condition(client: &Client, node: &str, status: &str, ago: Duration) {
    let at = k8s_openapi::jiff::Timestamp::now()
        - k8s_openapi::jiff::SignedDuration::try_from(ago).unwrap();
    let at = at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    Api::<Node>::all(client.clone())
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": [{
                "type": UNHEALTHY, "status": status, "reason": "SimulatedFault",
                "message": "set by the node repair test",
                "lastHeartbeatTime": at, "lastTransitionTime": at,
            }]}})),
        )
        .await
        .unwrap();
}

/// Starts a host with node repair on, a NodeClass (nodes of at most 2 CPU) and a NodePool, and a
/// namespace for the pods; returns the host, the pool's name and the namespace.
async fn setup(
    cp: &'static ControlPlane,
    client: &Client,
    names: &Names,
) -> (Host, String, String) {
    let host = Host::start(
        cp,
        names,
        &[
            "--batch-idle-duration",
            "500ms",
            "--feature-gates",
            "NodeRepair=true",
        ],
    );
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(client, names, &class, "kwok", json!({"maxCpu": 2})).await;
    node_pool(client, node_pool_json(names, &pool, &class)).await;
    let ns = namespace(cp, &names.run).await;
    (host, pool, ns)
}

/// Deletes the pool first (so nothing replaces the claims the teardown deletes), then the rest.
async fn finish(client: &Client, names: &Names, host: &Host, pool: &str, ns: &str) {
    Api::<capstan::api::NodePool>::all(client.clone())
        .delete(pool, &Default::default())
        .await
        .unwrap();
    teardown(client, names, ns).await;
    host.check_alive();
}

fn node_of(claim: &NodeClaim) -> String {
    claim
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap()
}

#[tokio::test]
async fn an_unhealthy_node_is_replaced_forcefully_after_its_toleration() {
    let (cp, client) = cluster().await;
    let names = Names::new("repair");
    let (host, pool, ns) = setup(cp, &client, &names).await;
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web", RUN_LABEL: names.run}},
                "spec": {
                    "nodeSelector": {"karpenter.sh/nodepool": pool},
                    "containers": [{"name": "app", "image": "fake",
                                    "resources": {"requests": {"cpu": "1", "memory": "256Mi"}}}],
                },
            },
        },
    }))
    .unwrap();
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    // No voluntary eviction is ever allowed: a drain would wait forever; repair does not.
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}},
    }))
    .unwrap();
    Api::<PodDisruptionBudget>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &pdb)
        .await
        .unwrap();

    let [first] = wait_live(&client, &names, &host, 1)
        .await
        .try_into()
        .unwrap();
    let sick = node_of(&first);
    make_unhealthy(&client, &sick).await;
    let marked = std::time::Instant::now();

    // The claim goes, and the Deployment's pod runs on a new node.
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let replaced = wait_until(
        Duration::from_secs(150),
        "the unhealthy node replaced and the pod running elsewhere",
        || async {
            host.check_alive();
            let gone = claims(&client, &names)
                .await
                .iter()
                .all(|c| c.name_any() != first.name_any());
            let running_elsewhere = pods
                .list(&ListParams::default().labels("app=web"))
                .await?
                .items
                .into_iter()
                .find(|p| {
                    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                        && p.metadata.deletion_timestamp.is_none()
                        && p.spec
                            .as_ref()
                            .and_then(|s| s.node_name.as_deref())
                            .is_some_and(|n| n != sick)
                });
            Ok::<_, kube::Error>(gone.then_some(running_elsewhere).flatten())
        },
    )
    .await;
    let pod = replaced.unwrap_or_else(|err| panic!("{err}\n{}", host.log_tail()));
    assert!(
        marked.elapsed() >= TOLERATION,
        "repaired after {:?}, before the toleration ran out",
        marked.elapsed()
    );
    let [second] = wait_live(&client, &names, &host, 1)
        .await
        .try_into()
        .unwrap();
    assert_ne!(second.name_any(), first.name_any());
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        Some(node_of(&second))
    );

    // Events on the node and the claim say why (cluster-scoped objects' Events are in default).
    for name in [sick.as_str(), first.name_any().as_str()] {
        let found = events(&client, "default", name, "NodeRepair").await;
        let note = found
            .first()
            .and_then(|e| e.note.clone())
            .unwrap_or_else(|| panic!("no NodeRepair Event about {name}\n{}", host.log_tail()));
        assert!(
            note.contains("KWOKUnhealthy=True") && note.contains("30s"),
            "{note}"
        );
    }
    let log = host.log();
    assert!(
        log.contains("replacing unhealthy node"),
        "{}",
        host.log_tail()
    );

    Api::<Deployment>::namespaced(client.clone(), &ns)
        .delete("web", &Default::default())
        .await
        .unwrap();
    finish(&client, &names, &host, &pool, &ns).await;
}

/// A condition written already past its toleration is acted on at once, even if it is gone a
/// moment later (as on a kwok node, whose kubelet stand-in writes its conditions back at once;
/// Karpenter v1.14's suite's Repair Policy specs): the node's update starts a repair pass, not the
/// next 5-second tick. As Karpenter v1.15, the toleration counts from the node's creation at the
/// earliest, so the node is older than the toleration first.
#[tokio::test]
async fn a_condition_long_past_its_toleration_is_repaired_even_if_it_flips_back() {
    let (cp, client) = cluster().await;
    let names = Names::new("repair-flip");
    let (host, pool, ns) = setup(cp, &client, &names).await;
    Pods::new(&client, &names, &ns, "app")
        .cpu("1")
        .node_selector(json!({"karpenter.sh/nodepool": pool}))
        .create()
        .await;
    let [first] = wait_live(&client, &names, &host, 1)
        .await
        .try_into()
        .unwrap();
    let sick = node_of(&first);
    let created = Api::<Node>::all(client.clone())
        .get(&sick)
        .await
        .unwrap()
        .metadata
        .creation_timestamp
        .unwrap()
        .0;
    // The kwok provider's toleration of the fault is 30 s.
    let old_enough = created + k8s_openapi::jiff::SignedDuration::from_secs(31);
    let wait = k8s_openapi::jiff::Timestamp::now().duration_until(old_enough);
    if let Ok(wait) = Duration::try_from(wait) {
        tokio::time::sleep(wait).await;
    }
    set_condition(&client, &sick, "True", Duration::from_secs(3600)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    set_condition(&client, &sick, "False", Duration::ZERO).await;
    wait_until(Duration::from_secs(30), "the claim repaired", || async {
        host.check_alive();
        let claims = claims(&client, &names).await;
        let repaired = claims
            .iter()
            .find(|c| c.name_any() == first.name_any())
            .is_none_or(|c| c.metadata.deletion_timestamp.is_some());
        Ok::<_, kube::Error>(repaired.then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    finish(&client, &names, &host, &pool, &ns).await;
}

#[tokio::test]
async fn repair_stops_when_more_than_a_fifth_of_the_pool_is_unhealthy() {
    let (cp, client) = cluster().await;
    let names = Names::new("repair-blocked");
    // Nodes of at most 2 CPU: two pods of 1.5 CPU need two nodes.
    let (host, pool, ns) = setup(cp, &client, &names).await;
    Pods::new(&client, &names, &ns, "big")
        .count(2)
        .cpu("1500m")
        .node_selector(json!({"karpenter.sh/nodepool": pool}))
        .create()
        .await;
    let before = wait_live(&client, &names, &host, 2).await;
    for claim in &before {
        make_unhealthy(&client, &node_of(claim)).await;
    }

    // 2 of 2 unhealthy; 20% of 2 rounded up is 1: blocked, said on node, claim and pool.
    let node = node_of(&before[0]);
    let blocked = wait_until(
        Duration::from_secs(90),
        "NodeRepairBlocked on the node",
        || async {
            host.check_alive();
            Ok::<_, kube::Error>(
                events(&client, "default", &node, "NodeRepairBlocked")
                    .await
                    .into_iter()
                    .next(),
            )
        },
    )
    .await
    .unwrap_or_else(|err| panic!("{err}\n{}", host.log_tail()));
    let note = blocked.note.unwrap_or_default();
    assert!(
        note.contains("more than 20%") && note.contains("2 of 2") && note.contains(&pool),
        "{note}"
    );
    for name in [before[0].name_any(), pool.clone()] {
        assert!(
            !events(&client, "default", &name, "NodeRepairBlocked")
                .await
                .is_empty(),
            "no NodeRepairBlocked about {name}"
        );
    }
    // The pool's condition says why.
    let pools = Api::<capstan::api::NodePool>::all(client.clone());
    let condition = pools
        .get(&pool)
        .await
        .unwrap()
        .status
        .unwrap_or_default()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "NodeRepairAllowed")
        .unwrap_or_else(|| panic!("no NodeRepairAllowed condition\n{}", host.log_tail()));
    assert!(!condition.is_true());
    assert_eq!(condition.reason.as_deref(), Some("TooManyUnhealthyNodes"));
    assert!(
        condition
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("2 of 2"),
        "{condition:?}"
    );
    // Two more passes: still nothing deleted.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let after = wait_live(&client, &names, &host, 2).await;
    let mut names_before: Vec<String> = before.iter().map(ResourceExt::name_any).collect();
    let mut names_after: Vec<String> = after.iter().map(ResourceExt::name_any).collect();
    names_before.sort();
    names_after.sort();
    assert_eq!(names_before, names_after, "no claim replaced");
    assert!(
        !host.log().contains("replacing unhealthy node"),
        "{}",
        host.log_tail()
    );

    finish(&client, &names, &host, &pool, &ns).await;
}

/// The kwok provider's rule for `KWOKRebootRequired=True` reboots after 30 s, its drain bounded by
/// 60 s: the node is tainted, its pod that cannot be evicted (`do-not-disrupt`) rides the reboot,
/// the provider reboots it (a new boot ID, `NotReady`, then `Ready` again), and the claim —
/// the same one — ends `Rebooting=False` (`RebootSucceeded`) and initialized again.
#[tokio::test]
async fn a_node_whose_fault_asks_for_a_reboot_is_rebooted_in_place() {
    let (cp, client) = cluster().await;
    let names = Names::new("repair-reboot");
    let (host, pool, ns) = setup(cp, &client, &names).await;
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "stays", "labels": {RUN_LABEL: names.run},
                     "annotations": {"karpenter.sh/do-not-disrupt": "true"}},
        "spec": {
            "nodeSelector": {"karpenter.sh/nodepool": pool},
            "containers": [{"name": "app", "image": "fake",
                            "resources": {"requests": {"cpu": "1", "memory": "256Mi"}}}],
        },
    }))
    .unwrap();
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let pod = pods.create(&PostParams::default(), &pod).await.unwrap();
    let [claim] = wait_live(&client, &names, &host, 1)
        .await
        .try_into()
        .unwrap();
    let node = node_of(&claim);
    let nodes = Api::<Node>::all(client.clone());
    let boot = |n: &Node| {
        n.status
            .as_ref()
            .and_then(|s| s.node_info.as_ref())
            .map(|i| i.boot_id.clone())
            .unwrap_or_default()
    };
    let boot_before = boot(&nodes.get(&node).await.unwrap());
    // Condition times are whole seconds: the toleration may run out up to a second early.
    let marked = std::time::Instant::now() - Duration::from_secs(1);
    set_fault(&client, &node, "KWOKRebootRequired", "True").await;
    let claims_api = Api::<NodeClaim>::all(client.clone());
    let rebooting = |c: &NodeClaim| {
        c.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "Rebooting")
                .cloned()
        })
    };

    // Committed after the toleration; the node is fenced.
    let requested = wait_until(Duration::from_secs(90), "Rebooting=True", || async {
        host.check_alive();
        let c = claims_api.get(&claim.name_any()).await?;
        Ok::<_, kube::Error>(rebooting(&c).filter(|r| r.is_true()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    assert!(marked.elapsed() >= TOLERATION, "{:?}", marked.elapsed());
    assert!(
        requested
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("KWOKRebootRequired"),
        "{requested:?}"
    );
    let fenced = wait_until(Duration::from_secs(30), "the rebooting taint", || async {
        let n = nodes.get(&node).await?;
        let tainted = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == "karpenter.sh/rebooting"));
        Ok::<_, kube::Error>(tainted.then_some(()))
    })
    .await;
    fenced.unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));

    // The reboot ends well; the fault is gone with it.
    let ended = wait_until(Duration::from_secs(150), "RebootSucceeded", || async {
        host.check_alive();
        let c = claims_api.get(&claim.name_any()).await?;
        if rebooting(&c).is_some_and(|r| r.reason.as_deref() == Some("RebootIssued")) {
            set_fault(&client, &node, "KWOKRebootRequired", "False").await;
        }
        Ok::<_, kube::Error>(rebooting(&c).filter(|r| !r.is_true()).map(|r| (c, r)))
    })
    .await;
    let (after, ended) = ended.unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    assert_eq!(
        ended.reason.as_deref(),
        Some("RebootSucceeded"),
        "{ended:?}"
    );
    // Not before the drain's bound (60 s from the request): the pod could not be evicted.
    assert!(
        marked.elapsed() >= TOLERATION + Duration::from_secs(59),
        "rebooted after {:?}",
        marked.elapsed()
    );
    assert!(
        after.metadata.annotations.as_ref().is_some_and(|a| {
            a.get("capstan.dev/reboots")
                .is_some_and(|r| r.split(',').count() == 1)
                && !a.contains_key("karpenter.sh/reboot-pre-boot-id")
        }),
        "{:?}",
        after.metadata.annotations
    );
    let rebooted = nodes.get(&node).await.unwrap();
    assert_ne!(boot(&rebooted), boot_before);
    assert!(boot(&rebooted).starts_with("kwok-"), "{}", boot(&rebooted));
    assert!(
        !rebooted
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == "karpenter.sh/rebooting")),
        "still fenced"
    );
    // The pod rode the reboot: the same pod, on the same node.
    let still = pods.get("stays").await.unwrap();
    assert_eq!(still.uid(), pod.uid());
    assert!(still.metadata.deletion_timestamp.is_none());
    assert_eq!(
        still.spec.as_ref().and_then(|s| s.node_name.clone()),
        Some(node.clone())
    );
    // Initialized again, the same claim.
    let live = wait_live(&client, &names, &host, 1).await;
    assert_eq!(live[0].name_any(), claim.name_any());
    assert!(
        !events(&client, "default", &claim.name_any(), "RebootSucceeded")
            .await
            .is_empty(),
        "no RebootSucceeded Event\n{}",
        host.log_tail()
    );
    finish(&client, &names, &host, &pool, &ns).await;
}
