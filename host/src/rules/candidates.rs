//! Which nodes voluntary disruption may take now, and what holds the others (pure).
//!
//! A candidate is an initialized node whose claim is not being deleted or disrupted already, of
//! a pool that is not static. It is held by `karpenter.sh/do-not-disrupt` on the node, by
//! `capstan.dev/held-by-provider` on its claim (set by the provider at launch), or on an
//! active pod (`"true"`, or a duration the pod has not run for yet, as Karpenter reads it), and
//! by a PodDisruptionBudget that allows no eviction of one of its pods, and — when its pool has
//! the `capstan.dev/wait-for-jobs` annotation (a Capstan extension) — by a running pod of a Job.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::labels::{DO_NOT_DISRUPT, HELD_BY_PROVIDER, INITIALIZED, NODEPOOL, WAIT_FOR_JOBS};
use crate::api::nodeclaim::conditions::INITIALIZED as INITIALIZED_CONDITION;
use crate::api::nodepool::DisruptionReason;
use crate::api::{NodeClaim, NodePool, duration};
use crate::rules::claims::{is_true, provider_id};
use crate::rules::nodes::{node_ready, tainted_disrupted};
use crate::rules::pods::{do_not_disrupt, is_reschedulable};
use crate::scheduling::convert;
use crate::scheduling::selector::LabelSelector;
use crate::state::View;

/// Annotation on a claim being disrupted: `<reason>/<replacement count>`. With the
/// `karpenter.sh/disrupted` taint on its node and the replacements' [`REPLACES`] annotations it
/// is the whole state of a disruption, so a restarted host picks up where the last one stopped.
pub const DISRUPTION_ANNOTATION: &str = "capstan.dev/disruption";
/// Annotation on a replacement claim: the claim it replaces.
pub const REPLACES: &str = "capstan.dev/replaces";

/// A claim's node and pods, as disruption sees them.
#[derive(Debug, Clone)]
pub struct Machine<'a> {
    pub claim: &'a NodeClaim,
    pub node: &'a Node,
    /// Pods bound to the node that would need a new home.
    pub pods: Vec<&'a Pod>,
}

/// Why a machine may not be disrupted now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// `karpenter.sh/do-not-disrupt` on the node.
    Node,
    /// `capstan.dev/held-by-provider` on the claim: the provider's reason.
    Provider(String),
    /// `karpenter.sh/do-not-disrupt` on this pod (namespace/name).
    Pod(String),
    /// This PodDisruptionBudget (namespace/name) allows no eviction of this pod.
    Budget { pod: String, pdb: String },
    /// This pod of this Job runs, and the pool waits for Jobs ([`WAIT_FOR_JOBS`]).
    Job { pod: String, job: String },
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Held::Node => write!(f, "node has the {DO_NOT_DISRUPT} annotation"),
            Held::Provider(reason) => {
                write!(f, "the provider holds it ({HELD_BY_PROVIDER}): {reason}")
            }
            Held::Pod(pod) => write!(f, "pod {pod} has the {DO_NOT_DISRUPT} annotation"),
            Held::Budget { pod, pdb } => {
                write!(f, "PodDisruptionBudget {pdb} prevents evicting pod {pod}")
            }
            Held::Job { pod, job } => write!(
                f,
                "pod {pod} of Job {job} is running and the NodePool has {WAIT_FOR_JOBS}"
            ),
        }
    }
}

fn key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

/// The PodDisruptionBudget that allows no eviction of `pod`, if one does.
pub fn blocking_pdb(pod: &Pod, pdbs: &[Arc<PodDisruptionBudget>]) -> Option<String> {
    let namespace = pod.namespace().unwrap_or_default();
    pdbs.iter()
        .filter(|p| p.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|p| {
            p.status
                .as_ref()
                .is_some_and(|s| s.disruptions_allowed <= 0)
        })
        .find(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .and_then(|s| convert::label_selector_of("pdb", s).ok())
                .is_some_and(|s: LabelSelector| s.matches(pod.labels()))
        })
        .map(|p| format!("{namespace}/{}", p.name_any()))
}

/// How long a pool waits for its nodes' Job pods ([`WAIT_FOR_JOBS`]): `None` when it does not;
/// `Some(None)` until they finish (`"true"`); `Some(Some(d))` until they finish or have run for
/// `d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobWait {
    No,
    UntilDone,
    AtMost(std::time::Duration),
}

/// The pool's [`WAIT_FOR_JOBS`] setting; an error for a value that is neither `"true"`,
/// `"false"` nor a duration.
pub fn job_wait(pool: &NodePool) -> Result<JobWait, String> {
    match pool.annotations().get(WAIT_FOR_JOBS).map(|v| v.trim()) {
        None | Some("false") => Ok(JobWait::No),
        Some("true") => Ok(JobWait::UntilDone),
        Some(value) => duration::parse(value).map(JobWait::AtMost).map_err(|_| {
            format!("{WAIT_FOR_JOBS} {value:?} is neither \"true\", \"false\" nor a duration")
        }),
    }
}

/// The Job that owns `pod`, if one does (a CronJob's pods are owned by its Jobs).
fn job_of(pod: &Pod) -> Option<String> {
    pod.owner_references()
        .iter()
        .find(|o| o.kind == "Job" && o.api_version.starts_with("batch/"))
        .map(|o| format!("{}/{}", pod.namespace().unwrap_or_default(), o.name))
}

/// Whether `wait` keeps a node for `pod` at `now` (a pod not started yet has not begun its
/// bound).
fn job_holds(pod: &Pod, wait: JobWait, now: Timestamp) -> bool {
    match wait {
        JobWait::No => false,
        JobWait::UntilDone => true,
        JobWait::AtMost(bound) => {
            let Some(started) = pod.status.as_ref().and_then(|s| s.start_time.as_ref()) else {
                return true;
            };
            let age = now.as_millisecond() - started.0.as_millisecond();
            u128::try_from(age).map_or(true, |age| age < bound.as_millis())
        }
    }
}

/// What holds a machine of `pool` from voluntary disruption, if anything (an unreadable
/// [`WAIT_FOR_JOBS`] holds nothing; the verdict reports it).
pub fn held(
    machine: &Machine<'_>,
    pool: &NodePool,
    pdbs: &[Arc<PodDisruptionBudget>],
    now: Timestamp,
) -> Option<Held> {
    let wait = job_wait(pool).unwrap_or(JobWait::No);
    if machine
        .node
        .annotations()
        .get(DO_NOT_DISRUPT)
        .map(String::as_str)
        == Some("true")
        || machine
            .claim
            .annotations()
            .get(DO_NOT_DISRUPT)
            .map(String::as_str)
            == Some("true")
    {
        return Some(Held::Node);
    }
    if let Some(reason) = machine.claim.annotations().get(HELD_BY_PROVIDER) {
        return Some(Held::Provider(reason.clone()));
    }
    for pod in &machine.pods {
        if do_not_disrupt(pod, now) {
            return Some(Held::Pod(key(pod)));
        }
        if let Some(pdb) = blocking_pdb(pod, pdbs) {
            return Some(Held::Budget { pod: key(pod), pdb });
        }
        if let Some(job) = job_of(pod).filter(|_| job_holds(pod, wait, now)) {
            return Some(Held::Job { pod: key(pod), job });
        }
    }
    None
}

/// Whether a claim is being disrupted (marked) or deleted.
pub fn disrupting(claim: &NodeClaim) -> bool {
    claim.metadata.deletion_timestamp.is_some()
        || claim.annotations().contains_key(DISRUPTION_ANNOTATION)
}

/// One view's claims, Nodes and pods joined once ([`machines`]) with each pool's counts
/// ([`pool_counts`]): what every step of a disruption pass, `simulate` and `explain` decide from.
#[derive(Debug, Clone)]
pub struct Joined<'a> {
    /// Each launched claim with its Node and the pods that would move.
    pub machines: Vec<Machine<'a>>,
    /// Per pool: (nodes that count, nodes disrupting).
    pub counts: BTreeMap<String, (usize, usize)>,
}

impl<'a> Joined<'a> {
    /// Joins `view`, counting for consolidation's and drift's budgets (every reason but
    /// repair's counts alike).
    pub fn of(view: &'a View) -> Self {
        Self::for_reason(view, DisruptionReason::Drifted)
    }

    /// Joins `view`, counting for `reason`'s budgets.
    pub fn for_reason(view: &'a View, reason: DisruptionReason) -> Self {
        let machines = machines(&view.claims, &view.nodes, &view.pods);
        let counts = pool_counts(&view.claims, &machines, reason);
        Self { machines, counts }
    }

    /// The machine of the claim named `name`.
    pub fn machine(&self, name: &str) -> Option<&Machine<'a>> {
        self.machines
            .iter()
            .find(|m| m.claim.metadata.name.as_deref() == Some(name))
    }
}

/// The machines of the cluster: each launched claim with its node (by provider ID) and the
/// reschedulable pods bound to that node.
pub fn machines<'a>(
    claims: &'a [Arc<NodeClaim>],
    nodes: &'a [Arc<Node>],
    pods: &'a [Arc<Pod>],
) -> Vec<Machine<'a>> {
    let node_of: HashMap<&str, &Node> = nodes
        .iter()
        .filter_map(|n| Some((n.spec.as_ref()?.provider_id.as_deref()?, n.as_ref())))
        .collect();
    let mut pods_of: HashMap<&str, Vec<&Pod>> = HashMap::new();
    for pod in pods {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
            && is_reschedulable(pod)
        {
            pods_of.entry(node).or_default().push(pod.as_ref());
        }
    }
    claims
        .iter()
        .filter_map(|claim| {
            let node = *node_of.get(provider_id(claim)?)?;
            let pods = pods_of
                .get(node.name_any().as_str())
                .cloned()
                .unwrap_or_default();
            Some(Machine {
                claim: claim.as_ref(),
                node,
                pods,
            })
        })
        .collect()
}

/// Per pool: (nodes that count, nodes disrupting) for `reason`'s budgets. A claim counts once
/// initialized (or while it reboots, which resets initialization), with or without its Node (a
/// claim whose Node is already gone still uses the budget until it is gone, as in Karpenter); it
/// is disrupting when it is marked, being deleted or rebooting, or its Node is being deleted,
/// tainted disrupted, or — for every reason but `Unhealthy` — not Ready (an unhealthy node uses
/// the budget up too; repair's budget would be frozen by the very nodes it is to mend).
pub fn pool_counts(
    claims: &[Arc<NodeClaim>],
    machines: &[Machine<'_>],
    reason: DisruptionReason,
) -> BTreeMap<String, (usize, usize)> {
    let node_of: HashMap<&str, &Node> = machines
        .iter()
        .filter_map(|m| Some((m.claim.metadata.uid.as_deref()?, m.node)))
        .collect();
    let mut out: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for claim in claims {
        let Some(pool) = claim.labels().get(NODEPOOL) else {
            continue;
        };
        let rebooting = claim.rebooting();
        if !is_true(claim, INITIALIZED_CONDITION) && !rebooting {
            continue;
        }
        let node = claim
            .metadata
            .uid
            .as_deref()
            .and_then(|uid| node_of.get(uid));
        let entry = out.entry(pool.clone()).or_default();
        entry.0 += 1;
        let unready_counts = reason != DisruptionReason::Unhealthy;
        let node_leaving = node.is_some_and(|n| {
            n.metadata.deletion_timestamp.is_some()
                || tainted_disrupted(n)
                || (unready_counts && !node_ready(n))
        });
        if disrupting(claim) || rebooting || node_leaving {
            entry.1 += 1;
        }
    }
    out
}

/// Whether a machine may be considered at all: initialized, not disrupting, of a pool that is
/// not static.
pub fn eligible(machine: &Machine<'_>, pool: &NodePool) -> bool {
    pool.spec.replicas.is_none() && settled(machine)
}

/// Whether a machine may start a disruption at all (whatever its pool): not being disrupted,
/// deleted or rebooting, not tainted by a disruption, its node initialized.
pub fn settled(machine: &Machine<'_>) -> bool {
    !disrupting(machine.claim)
        && !machine.claim.rebooting()
        && machine.node.metadata.deletion_timestamp.is_none()
        && !tainted_disrupted(machine.node)
        && machine.node.labels().get(INITIALIZED).map(String::as_str) == Some("true")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::labels::DISRUPTED_TAINT_KEY;
    use serde_json::json;

    fn pod(annotations: serde_json::Value, started: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "annotations": annotations, "labels": {"app": "a"}},
            "spec": {"containers": [], "nodeName": "n1"},
            "status": {"startTime": started, "phase": "Running"}
        }))
        .unwrap()
    }

    fn now() -> Timestamp {
        "2026-11-26T10:30:00Z".parse().unwrap()
    }

    #[test]
    fn do_not_disrupt_reads_true_and_durations() {
        let table = [
            (json!({}), None, false),
            (json!({DO_NOT_DISRUPT: "true"}), None, true),
            (json!({DO_NOT_DISRUPT: "false"}), None, false),
            (
                json!({DO_NOT_DISRUPT: "1h"}),
                Some("2026-11-26T10:00:00Z"),
                true,
            ),
            (
                json!({DO_NOT_DISRUPT: "20m"}),
                Some("2026-11-26T10:00:00Z"),
                false,
            ),
            // Not started yet: the duration has not begun, so it holds.
            (json!({DO_NOT_DISRUPT: "20m"}), None, true),
            (json!({DO_NOT_DISRUPT: "soon"}), None, false),
        ];
        for (annotations, started, want) in table {
            assert_eq!(
                do_not_disrupt(&pod(annotations.clone(), started), now()),
                want,
                "{annotations} started {started:?}"
            );
        }
    }

    fn claim(name: &str, annotations: serde_json::Value, deleting: bool) -> Arc<NodeClaim> {
        let mut c: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "uid": name, "labels": {NODEPOOL: "p"},
                         "annotations": annotations},
            "spec": {"nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "c"},
                     "requirements": []},
            "status": {"providerID": format!("kwok://{name}"), "conditions": [
                {"type": "Initialized", "status": "True", "reason": "Initialized", "message": "",
                 "lastTransitionTime": "2026-11-26T10:00:00Z"}]}
        }))
        .unwrap();
        if deleting {
            c.metadata.deletion_timestamp = c.metadata.creation_timestamp.clone().or(Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()),
            ));
        }
        Arc::new(c)
    }

    fn node(name: &str, ready: &str, tainted: bool) -> Arc<Node> {
        let taints = if tainted {
            json!([{"key": DISRUPTED_TAINT_KEY, "effect": "NoSchedule"}])
        } else {
            json!([])
        };
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {INITIALIZED: "true"}},
                "spec": {"providerID": format!("kwok://{name}"), "taints": taints},
                "status": {"conditions": [{"type": "Ready", "status": ready}]}
            }))
            .unwrap(),
        )
    }

    /// A claim whose node is already gone still uses the budget while it terminates; marked
    /// claims, tainted and NotReady nodes do too.
    #[test]
    fn budgets_count_every_initialized_claim_and_what_is_disrupting() {
        let claims = vec![
            claim("a", json!({}), false),
            claim("b", json!({DISRUPTION_ANNOTATION: "Drifted/1"}), false),
            claim("c", json!({}), true),
            claim("d", json!({}), false),
            claim("e", json!({}), false),
        ];
        let nodes = vec![
            node("a", "True", false),
            node("b", "True", true),
            node("d", "False", false),
            node("e", "True", true),
        ];
        let all = machines(&claims, &nodes, &[]);
        assert_eq!(
            pool_counts(&claims, &all, DisruptionReason::Drifted).get("p"),
            Some(&(5, 4))
        );
        // Repair's budget is not used up by the NotReady node it is to mend.
        assert_eq!(
            pool_counts(&claims, &all, DisruptionReason::Unhealthy).get("p"),
            Some(&(5, 3))
        );
    }

    #[test]
    fn a_pdb_without_allowed_disruptions_holds_its_pods() {
        let pdb = |allowed: i32, app: &str| -> Arc<PodDisruptionBudget> {
            Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"name": format!("pdb-{app}-{allowed}"), "namespace": "ns"},
                    "spec": {"selector": {"matchLabels": {"app": app}}},
                    "status": {"disruptionsAllowed": allowed, "currentHealthy": 1,
                               "desiredHealthy": 1, "expectedPods": 1}
                }))
                .unwrap(),
            )
        };
        let p = pod(json!({}), None);
        assert_eq!(blocking_pdb(&p, &[pdb(1, "a"), pdb(0, "b")]), None);
        assert_eq!(
            blocking_pdb(&p, &[pdb(1, "a"), pdb(0, "a")]).as_deref(),
            Some("ns/pdb-a-0")
        );
    }
}
