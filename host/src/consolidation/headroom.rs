//! A quick test that a candidate cannot go, before any simulation. Its pods may only go to the
//! room the other nodes have left plus at most one new node cheaper than it, so: its largest pod
//! must fit the most room one other node has or the largest cheaper type, and all its pods the
//! room of all other nodes plus that type. These are necessary conditions of what the solver
//! would find (they ignore requirements, topology and DaemonSets, which only take room away), so
//! a candidate they rule out the solver would refuse too (a property test checks it); in a
//! packed cluster they spare a simulation per candidate.

use std::collections::BTreeMap;

use super::Candidate;
use super::price::launch_offering;
use crate::scheduling::{ExistingNode, NodePoolView, Requirement, Resources};

/// Free room of the initialized nodes, and the cheapest price of each pool's types.
#[derive(Clone, Debug, Default)]
pub(crate) struct Headroom {
    /// Σ free room of every initialized node.
    total: Resources,
    /// The two largest free cpu, memory and pod counts among initialized nodes, with the node
    /// that has it (so a candidate's own room can be left out).
    top_cpu: [(i64, usize); 2],
    top_memory: [(i64, usize); 2],
    top_pods: [(i64, usize); 2],
    /// Per node name: its index and free room.
    free: BTreeMap<String, (usize, Resources)>,
    /// Per pool: (cheapest launch price, allocatable) of each type, cheapest first.
    types: BTreeMap<String, Vec<(f64, Resources)>>,
}

fn push_top(top: &mut [(i64, usize); 2], value: i64, node: usize) {
    if value > top[0].0 {
        top[1] = top[0];
        top[0] = (value, node);
    } else if value > top[1].0 {
        top[1] = (value, node);
    }
}

fn top_without(top: &[(i64, usize); 2], node: Option<usize>) -> i64 {
    if Some(top[0].1) == node {
        top[1].0
    } else {
        top[0].0
    }
}

impl Headroom {
    pub(crate) fn new(nodes: &[ExistingNode], pools: &[NodePoolView]) -> Self {
        let mut room = Self {
            top_cpu: [(i64::MIN, usize::MAX); 2],
            top_memory: [(i64::MIN, usize::MAX); 2],
            top_pods: [(i64::MIN, usize::MAX); 2],
            ..Self::default()
        };
        for (i, n) in nodes.iter().enumerate().filter(|(_, n)| n.initialized) {
            let free = n.allocatable.minus(&n.used);
            room.total.cpu_millis += free.cpu_millis.max(0);
            room.total.memory += free.memory.max(0);
            room.total.pods += free.pods.max(0);
            push_top(&mut room.top_cpu, free.cpu_millis, i);
            push_top(&mut room.top_memory, free.memory, i);
            push_top(&mut room.top_pods, free.pods, i);
            room.free.insert(n.name.clone(), (i, free));
        }
        for pool in pools {
            // The pool's zones and capacity types bound what a replacement may cost.
            let mut allowed = pool.requirements.clone();
            for (k, v) in &pool.labels {
                allowed.add(Requirement::in_(k.as_str(), [v.as_str()]));
            }
            let mut types: Vec<(f64, Resources)> = pool
                .instance_types
                .iter()
                .filter_map(|t| Some((launch_offering(t, &allowed)?.price, t.allocatable())))
                .collect();
            types.sort_by(|a, b| a.0.total_cmp(&b.0));
            room.types.insert(pool.name.clone(), types);
        }
        room
    }

    /// Whether `c`'s pods could not possibly move: no room elsewhere and no cheaper type.
    pub(crate) fn hopeless(&self, c: &Candidate) -> bool {
        if c.pods.is_empty() {
            return false;
        }
        let mut need = Resources::default();
        let mut largest = Resources::default();
        for p in &c.pods {
            need.cpu_millis += p.requests.cpu_millis;
            need.memory += p.requests.memory;
            largest.cpu_millis = largest.cpu_millis.max(p.requests.cpu_millis);
            largest.memory = largest.memory.max(p.requests.memory);
        }
        need.pods = c.pods.len() as i64;
        let own = self.free.get(&c.node);
        let own_index = own.map(|(i, _)| *i);
        let own_free = own.map(|(_, f)| f.clone()).unwrap_or_default();
        // The most room one new node cheaper than the candidate could bring (per resource).
        let mut new_node = Resources::default();
        for (_, alloc) in self
            .types
            .get(&c.node_pool)
            .into_iter()
            .flatten()
            .take_while(|(price, _)| *price < c.price)
        {
            new_node.cpu_millis = new_node.cpu_millis.max(alloc.cpu_millis);
            new_node.memory = new_node.memory.max(alloc.memory);
            new_node.pods = new_node.pods.max(alloc.pods);
        }
        // Every pod needs one place, and all of them fit in the others' room plus one new node.
        let one = |top: &[(i64, usize); 2], new: i64, need: i64| {
            need <= top_without(top, own_index).max(new)
        };
        let all = |total: i64, own: i64, new: i64, need: i64| total - own.max(0) + new >= need;
        let possible = one(&self.top_cpu, new_node.cpu_millis, largest.cpu_millis)
            && one(&self.top_memory, new_node.memory, largest.memory)
            && one(&self.top_pods, new_node.pods, 1)
            && all(
                self.total.cpu_millis,
                own_free.cpu_millis,
                new_node.cpu_millis,
                need.cpu_millis,
            )
            && all(
                self.total.memory,
                own_free.memory,
                new_node.memory,
                need.memory,
            )
            && all(self.total.pods, own_free.pods, new_node.pods, need.pods);
        !possible
    }
}
