//! The drain of a terminating claim, as Karpenter does it, against the real control plane with
//! kwok nodes: pods go group by group (non-critical, DaemonSet, critical, critical DaemonSet); a
//! `karpenter.sh/do-not-disrupt` pod keeps the node until the claim's `terminationGracePeriod`;
//! a pod tolerating `karpenter.sh/disrupted:NoSchedule` is left alone; a pod a budget protects is
//! deleted when its own grace period still fits before the deadline; VolumeAttachments keep a
//! drained node until they go.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use capstan::api::labels::NODECLAIM_TERMINATION_TIMESTAMP;
use capstan_test_support::wait_until;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use super::disruption_budget::{launch, protected_pod};
use super::*;

/// A host managing one initialized kwok claim, and a namespace for its pods.
struct Setup {
    client: Client,
    names: Names,
    host: Host,
    claim: String,
    node: String,
    ns: String,
}

impl Setup {
    /// `grace`: the claim's `terminationGracePeriod`.
    async fn new(prefix: &str, grace: Option<&str>) -> Self {
        let (cp, client) = cluster().await;
        let names = Names::new(prefix);
        let host = Host::start(cp, &names, &[]);
        let (class, pool, claim_name) = (names.name("nc"), names.name("pool"), names.name("c"));
        node_class(&client, &names, &class, "kwok", json!({})).await;
        node_pool(&client, node_pool_json(&names, &pool, &class)).await;
        let mut spec = claim_json(&names, &claim_name, &pool, &class);
        if let Some(grace) = grace {
            spec["spec"]["terminationGracePeriod"] = json!(grace);
        }
        claim(&client, spec).await;
        let node = launch(&client, &host, &claim_name).await;
        let ns = cp.create_namespace_unique(prefix).await.unwrap();
        Self {
            client,
            names,
            host,
            claim: claim_name,
            node,
            ns,
        }
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Creates pods on the node (`pod_json`) and waits until kwok runs them all.
    async fn run(&self, pods: Vec<Value>) {
        let api = self.pods();
        for pod in pods {
            let pod: Pod = serde_json::from_value(pod).unwrap();
            api.create(&PostParams::default(), &pod).await.unwrap();
        }
        wait_until(Duration::from_secs(60), "pods running", || async {
            let list = api.list(&ListParams::default()).await?;
            Ok::<_, kube::Error>(
                list.items
                    .iter()
                    .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                    .then_some(()),
            )
        })
        .await
        .unwrap();
    }

    /// Deletes the claim; returns when.
    async fn delete_claim(&self) -> Instant {
        let deleted = Instant::now();
        Api::<NodeClaim>::all(self.client.clone())
            .delete(&self.claim, &DeleteParams::default())
            .await
            .unwrap();
        deleted
    }

    async fn node_exists(&self) -> bool {
        Api::<Node>::all(self.client.clone())
            .get_opt(&self.node)
            .await
            .unwrap()
            .is_some()
    }

    async fn finish(self) {
        self.host.check_alive();
        cleanup(&self.client, &self.names).await;
        let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(self.client.clone())
            .delete(&self.ns, &DeleteParams::default())
            .await;
    }
}

/// A pod on `node` with `terminationGracePeriodSeconds: 0`, changed by `f`.
fn pod_json(name: &str, node: &str, f: impl FnOnce(&mut Value)) -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "app", "image": "fake"}],
        },
    });
    f(&mut pod);
    pod
}

/// What became of a pod, in the order the API server tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Removal {
    Terminating,
    Deleted,
}

/// The pods' removals in `ns`, in order: (pod, what, when after `start`).
type Removals = Vec<(String, Removal, Duration)>;

/// Watches `ns` (from now: returns once the watch is established) until each pod of `names` is
/// deleted, or 90 s.
async fn removals(
    client: &Client,
    ns: &str,
    names: &[&str],
    start: Instant,
) -> tokio::task::JoinHandle<Removals> {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Removals::new()));
    let mut watch = crate::pod_watch::watch_pods(
        Api::namespaced(client.clone(), ns),
        watcher::Config::default(),
        {
            let seen = seen.clone();
            move |event| {
                let (pod, what) = match event {
                    watcher::Event::Apply(pod) if pod.metadata.deletion_timestamp.is_some() => {
                        (pod, Removal::Terminating)
                    }
                    watcher::Event::Delete(pod) => (pod, Removal::Deleted),
                    _ => return ControlFlow::Continue(()),
                };
                let Ok(mut seen) = seen.lock() else {
                    return ControlFlow::Break(());
                };
                let name = pod.name_any();
                if names.contains(&name) && !seen.iter().any(|(n, r, _)| *n == name && *r == what) {
                    seen.push((name, what, start.elapsed()));
                }
                let deleted = |name: &String| {
                    seen.iter()
                        .any(|(n, r, _)| n == name && *r == Removal::Deleted)
                };
                if names.iter().all(deleted) {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            }
        },
    )
    .await;
    tokio::spawn(async move {
        if tokio::time::timeout(Duration::from_secs(90), &mut watch)
            .await
            .is_err()
        {
            watch.abort();
        }
        seen.lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default()
    })
}

/// When `name` was first seen terminating or deleted.
fn removed_at(seen: &Removals, name: &str) -> Duration {
    seen.iter()
        .find(|(n, _, _)| n == name)
        .map(|(_, _, at)| *at)
        .unwrap_or_else(|| panic!("{name} never left: {seen:?}"))
}

/// The `Drained` condition's message of a claim (waits for `Drained=Unknown` first).
async fn draining_message(s: &Setup) -> String {
    let claim = wait_condition(
        &s.client,
        &s.host,
        &s.claim,
        "Drained",
        "Unknown",
        Some("Draining"),
        Duration::from_secs(30),
    )
    .await;
    claim
        .status
        .and_then(|st| st.conditions.into_iter().find(|c| c.type_ == "Drained"))
        .and_then(|c| c.message)
        .unwrap_or_default()
}

#[tokio::test]
async fn drain_evicts_group_by_group() {
    let s = Setup::new("drain-order", None).await;
    // A DaemonSet that runs nowhere: the pods below name it as their owner (not as their
    // controller, so the DaemonSet controller leaves them be).
    let ds: DaemonSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"capstan-test/ds": "agent"}},
            "template": {
                "metadata": {"labels": {"capstan-test/ds": "agent"}},
                "spec": {
                    "nodeSelector": {"capstan-test/nowhere": "true"},
                    "containers": [{"name": "agent", "image": "fake"}],
                },
            },
        },
    }))
    .unwrap();
    let ds = Api::<DaemonSet>::namespaced(s.client.clone(), &s.ns)
        .create(&PostParams::default(), &ds)
        .await
        .unwrap();
    let owner = json!([{
        "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": ds.uid().unwrap(),
    }]);
    let daemon = |v: &mut Value| v["metadata"]["ownerReferences"] = owner.clone();
    let critical = |v: &mut Value| v["spec"]["priorityClassName"] = json!("system-node-critical");
    s.run(vec![
        pod_json("critical-daemon", &s.node, |v| {
            daemon(v);
            v["spec"]["priorityClassName"] = json!("system-cluster-critical");
        }),
        pod_json("critical", &s.node, critical),
        pod_json("daemon", &s.node, daemon),
        pod_json("app", &s.node, |_| {}),
    ])
    .await;

    let order = ["app", "daemon", "critical", "critical-daemon"];
    let start = Instant::now();
    let watch = removals(&s.client, &s.ns, &order, start).await;
    s.delete_claim().await;
    let message = draining_message(&s).await;
    wait_claim_gone(&s.client, &s.host, &s.claim, Duration::from_secs(60)).await;
    let gone = start.elapsed();
    let seen = watch.await.unwrap();
    println!("drain order: {seen:?}; claim gone after {gone:?}; Drained was {message:?}");
    // Each group is touched only once the previous one is deleted.
    let position = |name: &str, what: Option<Removal>| {
        seen.iter()
            .position(|(n, r, _)| n == name && what.is_none_or(|w| w == *r))
            .unwrap_or_else(|| panic!("{name} {what:?} not seen: {seen:?}"))
    };
    for pair in order.windows(2) {
        assert!(
            position(pair[0], Some(Removal::Deleted)) < position(pair[1], None),
            "{} was removed before {} was gone: {seen:?}",
            pair[1],
            pair[0]
        );
    }
    assert!(message.contains("pods left"), "{message}");
    for name in order {
        wait_event(&s.client, &s.ns, name, "Evicted").await;
    }
    s.finish().await;
}

#[tokio::test]
async fn do_not_disrupt_keeps_the_node_until_the_grace_period() {
    const GRACE: Duration = Duration::from_secs(20);
    let s = Setup::new("drain-dnd", Some("20s")).await;
    s.run(vec![
        pod_json("keep", &s.node, |v| {
            v["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
        }),
        pod_json("app", &s.node, |_| {}),
    ])
    .await;
    let start = Instant::now();
    let watch = removals(&s.client, &s.ns, &["app", "keep"], start).await;
    s.delete_claim().await;

    // The deadline is on the claim and its Node.
    let claims = Api::<NodeClaim>::all(s.client.clone());
    let claim = claims.get(&s.claim).await.unwrap();
    let deleted = claim.metadata.deletion_timestamp.clone().unwrap().0;
    let want = deleted
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(20))
        .unwrap()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let annotated = wait_until(Duration::from_secs(10), "deadline annotations", || async {
        let claim = claims.get(&s.claim).await?;
        let node = Api::<Node>::all(s.client.clone()).get(&s.node).await?;
        let on_claim = claim
            .annotations()
            .get(NODECLAIM_TERMINATION_TIMESTAMP)
            .cloned();
        let on_node = node
            .annotations()
            .get(NODECLAIM_TERMINATION_TIMESTAMP)
            .cloned();
        Ok::<_, kube::Error>(on_claim.zip(on_node))
    })
    .await
    .unwrap();
    assert_eq!(annotated, (want.clone(), want));
    let message = draining_message(&s).await;

    // Well before the deadline the pod and the node stay.
    tokio::time::sleep(Duration::from_secs(14).saturating_sub(start.elapsed())).await;
    assert!(s.node_exists().await, "the node went before the deadline");
    let keep = s.pods().get("keep").await.unwrap();
    assert!(
        keep.metadata.deletion_timestamp.is_none(),
        "do-not-disrupt pod evicted"
    );
    let message_late = draining_message(&s).await;

    wait_claim_gone(&s.client, &s.host, &s.claim, Duration::from_secs(40)).await;
    let gone = start.elapsed();
    let seen = watch.await.unwrap();
    println!(
        "do-not-disrupt: pods left at {seen:?}, claim gone after {gone:?} (grace {GRACE:?}); \
         Drained was {message:?}"
    );
    assert!(
        removed_at(&seen, "app") < Duration::from_secs(8),
        "{seen:?}"
    );
    // deletionTimestamp has whole seconds: the deadline may be up to a second early.
    let keep_left = removed_at(&seen, "keep");
    assert!(
        keep_left >= GRACE - Duration::from_secs(1) && keep_left < GRACE + Duration::from_secs(5),
        "the do-not-disrupt pod left at {keep_left:?}"
    );
    assert!(
        message_late.contains("/keep (do-not-disrupt)"),
        "{message_late}"
    );
    wait_event(&s.client, &s.ns, "keep", "Disrupted").await;
    assert!(events(&s.client, &s.ns, "keep", "Evicted").await.is_empty());
    s.finish().await;
}

#[tokio::test]
async fn a_pod_tolerating_the_disrupted_taint_does_not_hold_the_node() {
    let s = Setup::new("drain-tolerant", None).await;
    // Were it drained, do-not-disrupt would hold it (and the node) for ever: no deadline.
    s.run(vec![
        pod_json("tolerant", &s.node, |v| {
            v["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
            v["spec"]["tolerations"] = json!([{
                "key": "karpenter.sh/disrupted", "operator": "Exists", "effect": "NoSchedule",
            }]);
        }),
        pod_json("app", &s.node, |_| {}),
    ])
    .await;
    let start = s.delete_claim().await;
    wait_claim_gone(&s.client, &s.host, &s.claim, Duration::from_secs(40)).await;
    let gone = start.elapsed();
    println!("a tolerating pod on the node: claim gone after {gone:?}");
    assert!(!s.node_exists().await);
    assert!(s.pods().get_opt("app").await.unwrap().is_none());
    let tolerant = s.pods().get_opt("tolerant").await.unwrap();
    assert!(
        tolerant.is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
        "the tolerating pod was evicted or deleted"
    );
    assert!(
        events(&s.client, &s.ns, "tolerant", "Evicted")
            .await
            .is_empty()
    );
    s.finish().await;
}

#[tokio::test]
async fn a_budget_protected_pod_is_deleted_its_own_grace_before_the_deadline() {
    // Deadline 20 s after deletion; the pod's own grace is 10 s: deleted at about 10 s.
    let s = Setup::new("drain-pdb", Some("20s")).await;
    protected_pod(&s.client, &s.ns, &s.node, 10).await;
    let start = Instant::now();
    let watch = removals(&s.client, &s.ns, &["app"], start).await;
    s.delete_claim().await;
    wait_event(&s.client, &s.ns, "app", "FailedDraining").await;
    wait_claim_gone(&s.client, &s.host, &s.claim, Duration::from_secs(40)).await;
    let gone = start.elapsed();
    let seen = watch.await.unwrap();
    println!(
        "PDB-protected pod of 10 s grace, deadline 20 s: deleted at {seen:?}, claim gone after {gone:?}"
    );
    let deleted = removed_at(&seen, "app");
    // deletionTimestamp has whole seconds (up to 1 s early), the drain looks every second.
    assert!(
        deleted >= Duration::from_millis(8_500) && deleted <= Duration::from_millis(12_500),
        "deleted at {deleted:?}, not about 10 s"
    );
    let disrupted = wait_event(&s.client, &s.ns, "app", "Disrupted").await;
    assert!(
        disrupted
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("of its 10 terminationGracePeriodSeconds"),
        "{disrupted:?}"
    );
    assert!(events(&s.client, &s.ns, "app", "Evicted").await.is_empty());
    // One FailedDraining Event for the refusals of ten seconds (a series at most).
    let failed = events(&s.client, &s.ns, "app", "FailedDraining").await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0].series.is_none(),
        "repeated: {:?}",
        failed[0].series
    );
    s.finish().await;
}

#[tokio::test]
async fn volume_attachments_keep_a_drained_node() {
    let s = Setup::new("drain-volumes", None).await;
    let attachments = Api::<VolumeAttachment>::all(s.client.clone());
    let name = s.names.name("va");
    let va: VolumeAttachment = serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
        "metadata": {"name": name},
        "spec": {
            "attacher": "csi.capstan.test",
            "nodeName": s.node,
            "source": {"persistentVolumeName": s.names.name("pv")},
        },
    }))
    .unwrap();
    attachments
        .create(&PostParams::default(), &va)
        .await
        .unwrap();
    let start = s.delete_claim().await;
    let claim = wait_condition(
        &s.client,
        &s.host,
        &s.claim,
        "VolumesDetached",
        "Unknown",
        Some("AwaitingVolumeDetachment"),
        Duration::from_secs(30),
    )
    .await;
    assert!(condition(&claim, "Drained").is_some_and(|(status, _)| status == "True"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        s.node_exists().await,
        "the node went with its volume attached"
    );
    attachments
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    let detached = Instant::now();
    wait_claim_gone(&s.client, &s.host, &s.claim, Duration::from_secs(30)).await;
    println!(
        "VolumeAttachment: claim waited, gone {:?} after it was deleted ({:?} in all)",
        detached.elapsed(),
        start.elapsed()
    );
    wait_event(&s.client, "default", &s.node, "AwaitingVolumeDetachment").await;
    s.finish().await;
}
