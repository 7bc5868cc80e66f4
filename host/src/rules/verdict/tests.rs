use super::*;
use crate::api::labels::{DO_NOT_DISRUPT, NODEPOOL, WAIT_FOR_JOBS};
use crate::rules::consolidation::price::NarrowError;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;

/// 2026-11-26T10:30:00Z, a Thursday.
fn now() -> Timestamp {
    "2026-11-26T10:30:00Z".parse().unwrap()
}

fn pool(annotations: serde_json::Value, disruption: serde_json::Value) -> NodePool {
    let mut d = json!({"consolidateAfter": "5m", "consolidationPolicy": "WhenEmptyOrUnderutilized",
                       "budgets": [{"nodes": "100%"}]});
    if let (Some(d), Some(over)) = (d.as_object_mut(), disruption.as_object()) {
        for (k, v) in over {
            d.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "p", "annotations": annotations},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "c"},
                "requirements": []}},
            "disruption": d,
        },
    }))
    .unwrap()
}

/// A claim initialized at 10:00, consolidatable, last pod event at `pod_event`.
fn claim(pod_event: Option<&str>, consolidatable: bool) -> NodeClaim {
    let condition = |type_: &str| {
        json!({"type": type_, "status": "True", "reason": type_, "message": "",
               "lastTransitionTime": "2026-11-26T10:00:00Z"})
    };
    let mut conditions = vec![condition("Launched"), condition("Initialized")];
    if consolidatable {
        conditions.push(condition("Consolidatable"));
    }
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "c1", "uid": "c1", "labels": {NODEPOOL: "p"}},
        "spec": {"nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "c"},
                 "requirements": []},
        "status": {"providerID": "kwok://n1", "nodeName": "n1", "conditions": conditions,
                   "lastPodEventTime": pod_event},
    }))
    .unwrap()
}

fn node(annotations: serde_json::Value) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "n1", "annotations": annotations,
                     "labels": {"karpenter.sh/initialized": "true"}},
        "spec": {"providerID": "kwok://n1"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

fn pod(name: &str, annotations: serde_json::Value, owner: Option<&str>) -> Pod {
    let owners = owner.map_or(json!([]), |job| {
        json!([{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": "j", "controller": true}])
    });
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "annotations": annotations,
                     "labels": {"app": "a"}, "ownerReferences": owners},
        "spec": {"containers": [], "nodeName": "n1"},
        "status": {"phase": "Running", "startTime": "2026-11-26T10:00:00Z"}
    }))
    .unwrap()
}

struct World {
    pdbs: Vec<Arc<PodDisruptionBudget>>,
    counts: BTreeMap<String, (usize, usize)>,
    recent: HashSet<String>,
    refused: HashMap<String, Refusal>,
    pending: Vec<String>,
}

impl World {
    fn new() -> Self {
        Self {
            pdbs: Vec::new(),
            counts: BTreeMap::from([("p".to_owned(), (4, 0))]),
            recent: HashSet::new(),
            refused: HashMap::new(),
            pending: Vec::new(),
        }
    }

    fn verdict(
        &self,
        pool: &NodePool,
        claim: &NodeClaim,
        node: &Node,
        pods: &[Pod],
    ) -> Option<Blocked> {
        let machine = Machine {
            claim,
            node,
            pods: pods.iter().collect(),
        };
        let facts = Facts {
            pdbs: &self.pdbs,
            now: now(),
            counts: &self.counts,
            recent: &self.recent,
            refused: &self.refused,
            pending: (!self.pending.is_empty()).then_some((self.pending.as_slice(), "Empty")),
        };
        verdict(&machine, pool, &facts)
    }
}

fn reason(b: &Option<Blocked>) -> &'static str {
    condition_of(b.as_ref()).0
}

#[test]
fn nothing_blocks_a_consolidatable_unheld_node() {
    let w = World::new();
    let v = w.verdict(
        &pool(json!({}), json!({})),
        &claim(None, true),
        &node(json!({})),
        &[],
    );
    assert_eq!(v, None);
    assert_eq!(
        condition_of(None),
        (NOT_BLOCKED, NOT_BLOCKED_MESSAGE.to_owned())
    );
}

#[test]
fn do_not_disrupt_names_the_pod_or_the_node() {
    let w = World::new();
    let p = pool(json!({}), json!({}));
    let pods = [
        pod("web", json!({}), None),
        pod("db", json!({DO_NOT_DISRUPT: "true"}), None),
    ];
    let v = w.verdict(&p, &claim(None, true), &node(json!({})), &pods);
    assert_eq!(reason(&v), "DoNotDisruptPod");
    assert!(v.unwrap().message().contains("pod ns/db"));
    let v = w.verdict(
        &p,
        &claim(None, true),
        &node(json!({DO_NOT_DISRUPT: "true"})),
        &[],
    );
    assert_eq!(reason(&v), "DoNotDisruptNode");
    // A provider's hold on the claim, with its reason.
    let mut held = claim(None, true);
    held.metadata.annotations = Some(std::collections::BTreeMap::from([(
        crate::api::labels::HELD_BY_PROVIDER.to_owned(),
        "minimum size".to_owned(),
    )]));
    let v = w.verdict(&p, &held, &node(json!({})), &[]);
    assert_eq!(reason(&v), "HeldByProvider");
    assert!(v.unwrap().message().contains("minimum size"));
}

#[test]
fn a_pdb_at_zero_is_named() {
    let mut w = World::new();
    w.pdbs.push(Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "keep", "namespace": "ns"},
            "spec": {"selector": {"matchLabels": {"app": "a"}}},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1,
                       "expectedPods": 1}
        }))
        .unwrap(),
    ));
    let v = w.verdict(
        &pool(json!({}), json!({})),
        &claim(None, true),
        &node(json!({})),
        &[pod("web", json!({}), None)],
    );
    assert_eq!(reason(&v), "PodDisruptionBudget");
    assert_eq!(
        v.unwrap().message(),
        "PodDisruptionBudget ns/keep prevents evicting pod ns/web"
    );
}

#[test]
fn job_pods_hold_only_when_the_pool_waits_for_jobs_and_within_the_bound() {
    let w = World::new();
    let pods = [pod("batch-x", json!({}), Some("batch"))];
    let c = claim(None, true);
    let n = node(json!({}));
    assert_eq!(w.verdict(&pool(json!({}), json!({})), &c, &n, &pods), None);
    let v = w.verdict(
        &pool(json!({WAIT_FOR_JOBS: "true"}), json!({})),
        &c,
        &n,
        &pods,
    );
    assert_eq!(reason(&v), "JobRunning");
    assert!(v.unwrap().message().contains("Job ns/batch"));
    // Started 30 minutes ago: a 1h bound still holds, a 20m one has passed.
    let v = w.verdict(
        &pool(json!({WAIT_FOR_JOBS: "1h"}), json!({})),
        &c,
        &n,
        &pods,
    );
    assert_eq!(reason(&v), "JobRunning");
    assert_eq!(
        w.verdict(
            &pool(json!({WAIT_FOR_JOBS: "20m"}), json!({})),
            &c,
            &n,
            &pods
        ),
        None
    );
    // A value that does not parse holds nothing (the host warns on the NodePool).
    assert_eq!(
        w.verdict(
            &pool(json!({WAIT_FOR_JOBS: "soon"}), json!({})),
            &c,
            &n,
            &pods
        ),
        None
    );
}

#[test]
fn consolidate_after_names_a_fixed_deadline_and_never() {
    let w = World::new();
    let n = node(json!({}));
    let v = w.verdict(
        &pool(json!({}), json!({"consolidateAfter": "Never"})),
        &claim(None, false),
        &n,
        &[],
    );
    assert_eq!(reason(&v), "ConsolidateAfterNever");
    // Last pod event at 10:28, consolidateAfter 5m: until 10:33, whatever the clock says.
    let v = w.verdict(
        &pool(json!({}), json!({})),
        &claim(Some("2026-11-26T10:28:00Z"), false),
        &n,
        &[],
    );
    assert_eq!(reason(&v), "ConsolidateAfter");
    assert!(
        v.unwrap().message().contains("2026-11-26T10:33:00Z"),
        "a stable deadline"
    );
}

#[test]
fn when_empty_pools_name_the_pods() {
    let w = World::new();
    let v = w.verdict(
        &pool(json!({}), json!({"consolidationPolicy": "WhenEmpty"})),
        &claim(None, true),
        &node(json!({})),
        &[pod("web", json!({}), None)],
    );
    assert_eq!(reason(&v), "WhenEmptyNotEmpty");
    assert!(v.unwrap().message().contains("ns/web"));
}

#[test]
fn a_closed_budget_names_the_pool_and_its_window() {
    let mut w = World::new();
    let p = pool(
        json!({}),
        json!({"budgets": [{"nodes": "0", "schedule": "0 9 * * *", "duration": "8h"},
                           {"nodes": "100%"}]}),
    );
    let v = w.verdict(&p, &claim(None, true), &node(json!({})), &[]);
    assert_eq!(reason(&v), "DisruptionBudget");
    let message = v.unwrap().message();
    assert!(message.contains("NodePool p"), "{message}");
    assert!(message.contains("\"0 9 * * *\" for 8h"), "{message}");
    assert!(message.contains("Empty"), "{message}");
    // One in four disrupting uses up a 25% budget.
    let p = pool(json!({}), json!({"budgets": [{"nodes": "25%"}]}));
    assert_eq!(
        w.verdict(&p, &claim(None, true), &node(json!({})), &[]),
        None
    );
    w.counts.insert("p".to_owned(), (4, 1));
    let v = w.verdict(&p, &claim(None, true), &node(json!({})), &[]);
    assert!(v.unwrap().message().contains("1 of 4 nodes disrupting"));
}

#[test]
fn the_last_search_refusal_and_a_pending_decision_are_reported() {
    let mut w = World::new();
    let p = pool(json!({}), json!({}));
    let pods = [pod("web", json!({}), None)];
    w.refused.insert(
        "c1".to_owned(),
        Refusal::Price(NarrowError::NoCheaper {
            price: 0.1,
            cheapest: Some(0.2),
        }),
    );
    let v = w.verdict(&p, &claim(None, true), &node(json!({})), &pods);
    assert_eq!(reason(&v), "NoCheaperReplacement");
    let message = v.unwrap().message();
    assert!(
        message.contains("$0.1000/h") && message.contains("$0.2000/h"),
        "{message}"
    );
    w.refused.insert(
        "c1".to_owned(),
        Refusal::Stranded(vec!["ns/web: no node has 3 cpu".to_owned()]),
    );
    let v = w.verdict(&p, &claim(None, true), &node(json!({})), &pods);
    assert_eq!(reason(&v), "PodsWouldNotSchedule");
    assert!(v.unwrap().message().contains("ns/web: no node has 3 cpu"));
    w.pending.push("c1".to_owned());
    let v = w.verdict(&p, &claim(None, true), &node(json!({})), &pods);
    assert_eq!(reason(&v), "PendingValidation");
}

#[test]
fn every_reason_says_what_unblocks_it() {
    for reason in [
        "StaticNodePool",
        "NotInitialized",
        "Disrupting",
        "DoNotDisruptNode",
        "HeldByProvider",
        "DoNotDisruptPod",
        "PodDisruptionBudget",
        "JobRunning",
        "ConsolidateAfterNever",
        "ConsolidateAfter",
        "WhenEmptyNotEmpty",
        "DisruptionBudget",
        "InvalidBudget",
        "PodsWouldNotSchedule",
        "NoRoom",
        "NoCheaperReplacement",
        "TooManyReplacements",
        "SpotToSpotDisabled",
        "SpotToSpotFlexibility",
        "BalancedBelowThreshold",
        "PendingValidation",
    ] {
        assert!(!unblock(reason).is_empty(), "{reason}");
    }
}
