//! The cluster as one pass's disruptions see it: taken from the pass's view and converted for
//! the solver once, and each disruption the pass starts carried out in it before the next is
//! simulated ([`crate::scheduling::removal`]). Starting a drift of hundreds of nodes then costs
//! one conversion of the cluster and a solve per node with pods (none for an empty node), where
//! taking and converting the cluster for every node bounded how many a pass could start.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use kube::ResourceExt;

use super::candidates::{Machine, disrupting};
use crate::consolidation::Refusal;
use crate::controllers::Context;
use crate::controllers::nodeclaim::provider_id;
use crate::controllers::provisioner::snapshot::Snapshot;
use crate::scheduling::removal::{self, NAMED_STRANDED};
use crate::scheduling::{NewClaim, SchedulingInput};
use crate::state::View;

/// One pass's cluster, with the disruptions it started carried out.
#[derive(Debug)]
pub struct Plan {
    snapshot: Snapshot,
    input: SchedulingInput,
    /// Time spent taking the cluster and asking it (not starting what it said).
    spent: Duration,
}

impl Plan {
    /// The cluster of `view`, converted. Nodes whose claims were decided for disruption before
    /// (their taint not written yet) are left out: their pods have replacements of their own on
    /// the way, and they are no home for others.
    pub async fn new(ctx: &Context, view: &View) -> Self {
        let started = Instant::now();
        let snapshot = Snapshot::from_view(view, &ctx.selector);
        let mut input = snapshot.input(ctx, &ctx.instance_types).await.input;
        let decided: HashSet<&str> = view
            .claims
            .iter()
            .filter(|c| disrupting(c))
            .filter_map(|c| provider_id(c))
            .collect();
        let decided_nodes: HashSet<String> = view
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
        input
            .existing_nodes
            .retain(|n| !decided_nodes.contains(&n.name));
        // The pods pending now are placed once, first (they were waiting before any of this
        // pass's candidates): the room they take on existing nodes is taken, and what they need
        // beyond it is the provisioner's to launch, not part of any replacement. Each question
        // then solves only the pods of the node it takes out.
        let pending = std::mem::take(&mut input.pods);
        let placed = removal::without_nodes(&mut input, &HashSet::new(), &pending);
        removal::carry_out(&mut input, &HashSet::new(), &pending, &placed);
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
