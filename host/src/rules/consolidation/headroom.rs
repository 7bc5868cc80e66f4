//! A quick test that a candidate cannot go, before any simulation. Its pods may only go to the
//! room the other nodes have left plus at most one new node cheaper than it (of any pool: the
//! solver places them in every pool by weight, so a cloud node's pods may move to a cheaper
//! pool of another provider), and room only
//! counts on a node that could take at least its smallest pod; so its largest pod must fit the
//! most room one such node has or the largest cheaper type, and all its pods the room of all
//! such nodes plus that type. These are necessary conditions of what the solver
//! would find (they ignore requirements, topology and DaemonSets, which only take room away), so
//! a candidate they rule out the solver would refuse too (a property test checks it); in a
//! packed cluster they spare a simulation per candidate.

use super::Candidate;
use super::price::launch_offering;
use crate::scheduling::{ExistingNode, NodePoolView, Requirement, Resources};

/// Free room of the initialized nodes, and the cheapest price of every pool's types.
#[derive(Clone, Debug, Default)]
pub(crate) struct Headroom {
    /// Each initialized node's name and free room.
    free: Vec<(String, Resources)>,
    /// (cheapest launch price, allocatable) of each type of each pool, cheapest first.
    types: Vec<(f64, Resources)>,
}

impl Headroom {
    pub(crate) fn new(nodes: &[ExistingNode], pools: &[NodePoolView]) -> Self {
        let free = nodes
            .iter()
            .filter(|n| n.initialized)
            .map(|n| (n.name.clone(), n.allocatable.minus(&n.used)))
            .collect();
        let mut types = Vec::new();
        for pool in pools {
            // The pool's zones and capacity types bound what a replacement may cost.
            let mut allowed = pool.requirements.clone();
            for (k, v) in &pool.labels {
                allowed.add(Requirement::in_(k.as_str(), [v.as_str()]));
            }
            types.extend(
                pool.instance_types
                    .iter()
                    .filter_map(|t| Some((launch_offering(t, &allowed)?.price, t.allocatable()))),
            );
        }
        types.sort_by(|a, b| a.0.total_cmp(&b.0));
        Self { free, types }
    }

    /// Whether `c`'s pods could not possibly move: not into the other nodes' usable room plus
    /// one new node cheaper than it.
    pub(crate) fn hopeless(&self, c: &Candidate) -> bool {
        if c.pods.is_empty() {
            return false;
        }
        let mut need = Resources::default();
        let mut largest = Resources::default();
        let mut smallest = Resources::new(i64::MAX, i64::MAX, 0);
        for p in &c.pods {
            need.cpu_millis += p.requests.cpu_millis;
            need.memory += p.requests.memory;
            largest.cpu_millis = largest.cpu_millis.max(p.requests.cpu_millis);
            largest.memory = largest.memory.max(p.requests.memory);
            smallest.cpu_millis = smallest.cpu_millis.min(p.requests.cpu_millis);
            smallest.memory = smallest.memory.min(p.requests.memory);
        }
        need.pods = c.pods.len() as i64;
        // The most room one new node cheaper than the candidate could bring (per resource).
        let mut new_node = Resources::default();
        for (_, alloc) in self.types.iter().take_while(|(price, _)| *price < c.price) {
            new_node.cpu_millis = new_node.cpu_millis.max(alloc.cpu_millis);
            new_node.memory = new_node.memory.max(alloc.memory);
            new_node.pods = new_node.pods.max(alloc.pods);
        }
        // Room only counts on nodes that could take at least the smallest pod.
        let mut usable = Resources::default();
        let mut most = Resources::default();
        for (name, free) in &self.free {
            if *name == c.node
                || free.cpu_millis < smallest.cpu_millis
                || free.memory < smallest.memory
                || free.pods < 1
            {
                continue;
            }
            usable.cpu_millis += free.cpu_millis;
            usable.memory += free.memory;
            usable.pods += free.pods;
            most.cpu_millis = most.cpu_millis.max(free.cpu_millis);
            most.memory = most.memory.max(free.memory);
            most.pods = most.pods.max(free.pods);
        }
        let possible = largest.cpu_millis <= most.cpu_millis.max(new_node.cpu_millis)
            && largest.memory <= most.memory.max(new_node.memory)
            && 1 <= most.pods.max(new_node.pods)
            && need.cpu_millis <= usable.cpu_millis + new_node.cpu_millis
            && need.memory <= usable.memory + new_node.memory
            && need.pods <= usable.pods + new_node.pods;
        !possible
    }
}
