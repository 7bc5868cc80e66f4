//! The cluster as one pass's disruptions see it: taken from the pass's view and converted for
//! the solver once, and each disruption the pass starts carried out in it before the next is
//! simulated ([`crate::scheduling::removal`]). Starting a drift of hundreds of nodes then costs
//! one conversion of the cluster and a solve per node with pods (none for an empty node), where
//! taking and converting the cluster for every node bounded how many a pass could start.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use kube::ResourceExt;

use crate::controllers::Context;
use crate::rules::candidates::{Machine, disrupting};
use crate::rules::claims::provider_id;
use crate::rules::consolidation::Refusal;
use crate::rules::pods::is_reschedulable;
use crate::rules::snapshot::Snapshot;
use crate::scheduling::removal::{self, NAMED_STRANDED};
use crate::scheduling::{NewClaim, Pod, SchedulingInput, Taint, TaintEffect};
use crate::state::View;

/// A taint the plan puts on capacity that is not up, so no moving pod is placed there (a pod
/// that tolerates every taint still may, and is then held back as Karpenter holds it).
pub const NOT_UP: &str = "capstan.dev/not-up";

/// One pass's cluster, with the disruptions it started carried out.
#[derive(Debug)]
pub struct Plan {
    snapshot: Snapshot,
    input: SchedulingInput,
    /// Time spent taking the cluster and asking it (not starting what it said).
    spent: Duration,
}

impl Plan {
    /// The cluster of `view`, converted, as the pass's questions need it:
    ///
    /// - nodes whose claims were decided for disruption before (their taint not written yet)
    ///   are gone, their pods pending: they have replacements of their own on the way;
    /// - the pods pending are placed once, first (they were waiting before any of this pass's
    ///   candidates): the room they take is taken, and what they need beyond it is the
    ///   provisioner's to launch, never part of a replacement;
    /// - capacity that is not up (uninitialized nodes, claims in flight) takes no moving pod
    ///   ([`NOT_UP`]): a candidate's pods go to initialized nodes or to replacements of their
    ///   own, rather than being held back until that capacity comes up. Its pods still count
    ///   for topology.
    pub async fn new(ctx: &Context, view: &View) -> Self {
        let started = Instant::now();
        let snapshot = Snapshot::from_view(view, &ctx.selector);
        let mut input =
            crate::controllers::provisioner::snapshot::input(&snapshot, ctx, &ctx.instance_types)
                .await
                .input;
        let decided: HashSet<&str> = view
            .claims
            .iter()
            .filter(|c| disrupting(c))
            .filter_map(|c| provider_id(c))
            .collect();
        // Among the nodes not leaving already: a leaving node's pods are pending in the snapshot
        // (counting them here again would take their room twice).
        let decided_nodes: HashSet<String> = snapshot
            .nodes
            .iter()
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.provider_id.as_deref())
                    .is_some_and(|id| decided.contains(id))
            })
            .map(|n| n.name_any())
            .collect();
        let decided_pods: Vec<Pod> = snapshot
            .bound
            .iter()
            .filter(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some_and(|n| decided_nodes.contains(n))
            })
            .filter(|p| is_reschedulable(p) && ctx.selector.matches(p.labels()))
            .filter_map(|p| snapshot.pod(p).ok())
            .collect();
        prepare(&mut input, &decided_nodes, decided_pods);
        Self {
            snapshot,
            input,
            spent: started.elapsed(),
        }
    }

    /// How long taking the cluster and the questions asked of it took so far.
    pub fn spent(&self) -> Duration {
        self.spent
    }

    /// Whether `m`'s pods would all find a home with its node gone: if so, the new claims they
    /// need (its replacements), and the removal is carried out in the plan; if not, why not (the
    /// plan unchanged).
    pub fn leave(&mut self, m: &Machine<'_>) -> Result<Vec<NewClaim>, String> {
        let started = Instant::now();
        let answer = self.ask(m);
        self.spent += started.elapsed();
        answer
    }

    fn ask(&mut self, m: &Machine<'_>) -> Result<Vec<NewClaim>, String> {
        let node = m.node.name_any();
        let mut moving = Vec::with_capacity(m.pods.len());
        let mut unreadable = Vec::new();
        for pod in &m.pods {
            match self.snapshot.pod(pod) {
                Ok(converted) => moving.push(converted),
                Err(err) => unreadable.push(format!(
                    "{}/{}: {err}",
                    pod.namespace().unwrap_or_default(),
                    pod.name_any()
                )),
            }
        }
        if !unreadable.is_empty() {
            unreadable.truncate(NAMED_STRANDED);
            return Err(Refusal::Stranded(unreadable).to_string());
        }
        let leaving = HashSet::from([node.as_str()]);
        if moving.is_empty() {
            // Nothing to place: no question for the solver.
            self.input.existing_nodes.retain(|n| n.name != node);
            return Ok(Vec::new());
        }
        let found = removal::without_nodes(&mut self.input, &leaving, &moving);
        if !found.stranded.is_empty() {
            return Err(Refusal::Stranded(found.stranded_brief()).to_string());
        }
        let replacements = found.replacements().cloned().collect();
        removal::carry_out(&mut self.input, &leaving, &moving, &found);
        Ok(replacements)
    }
}

/// `input` made ready for a pass's questions (see [`Plan::new`]): the `decided` nodes gone, their
/// pods (`decided_pods`) and the pending ones placed and bound where they go, capacity that is
/// not up tainted [`NOT_UP`].
fn prepare(input: &mut SchedulingInput, decided: &HashSet<String>, decided_pods: Vec<Pod>) {
    input.existing_nodes.retain(|n| !decided.contains(&n.name));
    let mut pending = std::mem::take(&mut input.pods);
    pending.extend(decided_pods);
    let placed = removal::without_nodes(input, &HashSet::new(), &pending);
    removal::carry_out(input, &HashSet::new(), &pending, &placed);
    let not_up = Taint::new(NOT_UP, "", TaintEffect::NoSchedule);
    for node in input.existing_nodes.iter_mut().filter(|n| !n.initialized) {
        node.taints.push(not_up.clone());
    }
    for claim in &mut input.inflight_claims {
        claim.taints.push(not_up.clone());
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::labels::HOSTNAME;
    use crate::scheduling::removal::tests::{GI, pod, pool};
    use crate::scheduling::{ExistingNode, InflightClaim, Resources, Target};

    fn node(name: &str, used_millis: i64, initialized: bool) -> ExistingNode {
        ExistingNode {
            name: name.into(),
            labels: BTreeMap::from([(HOSTNAME.to_owned(), name.to_owned())]),
            allocatable: Resources::new(4000, 8 * GI, 110),
            used: Resources::new(used_millis, 0, 0),
            initialized,
            ..ExistingNode::default()
        }
    }

    fn input() -> SchedulingInput {
        SchedulingInput {
            pods: vec![pod("pending", 2000)],
            node_pools: vec![pool()],
            existing_nodes: vec![
                node("up", 1000, true),
                node("decided", 1000, true),
                node("coming", 0, false),
            ],
            inflight_claims: vec![InflightClaim {
                name: "in-flight".into(),
                allocatable: Resources::new(4000, 8 * GI, 40),
                ..InflightClaim::default()
            }],
            ..SchedulingInput::default()
        }
    }

    /// Pending pods and those of nodes decided before take their room first; a candidate's
    /// pods then go to initialized nodes or a replacement of their own, never to capacity that
    /// is not up (where Karpenter would hold the candidate back until it is).
    #[test]
    fn pending_pods_go_first_and_capacity_not_up_takes_no_moving_pod() {
        let mut input = input();
        let decided = HashSet::from(["decided".to_owned()]);
        prepare(&mut input, &decided, vec![pod("from-decided", 1000)]);
        assert!(input.pods.is_empty(), "placed, not pending");
        let names: Vec<&str> = input
            .existing_nodes
            .iter()
            .map(|n| n.name.as_str())
            .collect();
        assert_eq!(names, ["up", "coming"]);
        let up = &input.existing_nodes[0];
        assert_eq!(
            up.used.cpu_millis, 4000,
            "pending 2 CPU and 1 CPU from the decided node"
        );
        assert_eq!(up.pods.len(), 2);
        assert!(
            input.existing_nodes[1]
                .taints
                .iter()
                .any(|t| t.key == NOT_UP)
        );
        assert!(
            input.inflight_claims[0]
                .taints
                .iter()
                .any(|t| t.key == NOT_UP)
        );

        // A candidate's pod: "up" is full, "coming" and the claim in flight are not up, so it
        // needs a replacement — and is not stranded.
        let moving = vec![pod("moving", 500)];
        let found = removal::without_nodes(&mut input, &HashSet::new(), &moving);
        assert!(found.stranded.is_empty(), "{:?}", found.stranded);
        assert_eq!(found.replacements().count(), 1);
        assert!(
            !found
                .result
                .existing_placements
                .iter()
                .any(|(_, t)| matches!(t, Target::Node(n) if n == "coming")),
            "{:?}",
            found.result.existing_placements
        );
    }
}
