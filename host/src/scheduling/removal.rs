//! What removing nodes would take: the question every voluntary disruption (drift, consolidation)
//! asks the solver. The nodes are taken out of the input, their pods added to the pending ones,
//! the input solved and then restored, so one converted cluster serves many questions.

use std::collections::HashSet;

use super::{
    InstanceType, NewClaim, Pod, PodIndex, SchedulingInput, SchedulingResult, Target, solve,
};

/// What one simulated removal found.
#[derive(Debug)]
pub struct Removal {
    pub result: SchedulingResult,
    /// Index in `result`'s pods of the first moving pod; the moving pods follow it.
    pub first_moving: PodIndex,
    /// Moving pods that would find no home, each as `namespace/name: why`: no place at all, or
    /// only capacity that is not up yet (a node that may never come up is no home).
    pub stranded: Vec<String>,
}

/// A message names at most this many stranded pods and counts the rest.
pub const NAMED_STRANDED: usize = 3;

impl Removal {
    /// The stranded pods for a message: the first [`NAMED_STRANDED`], then how many more.
    pub fn stranded_brief(&self) -> Vec<String> {
        let mut brief: Vec<String> = self.stranded.iter().take(NAMED_STRANDED).cloned().collect();
        let more = self.stranded.len().saturating_sub(NAMED_STRANDED);
        if more > 0 {
            brief.push(format!("and {more} more"));
        }
        brief
    }

    /// Whether the moving pod at `index` (of the result) is one of the removed nodes' pods.
    pub fn is_moving(&self, index: PodIndex) -> bool {
        index >= self.first_moving
    }

    /// The new claims that hold moving pods: the removal's replacements (any other new claim is
    /// for pods that were pending already, the provisioner's business).
    pub fn replacements(&self) -> impl Iterator<Item = &NewClaim> + '_ {
        self.result
            .new_claims
            .iter()
            .filter(|c| c.pods.iter().any(|&p| self.is_moving(p)))
    }

    /// The moving pods placed on existing nodes: (index among the moving pods, node name).
    pub fn moved_to_nodes(&self) -> impl Iterator<Item = (usize, &str)> + '_ {
        self.result
            .existing_placements
            .iter()
            .filter(|(p, _)| self.is_moving(*p))
            .filter_map(|(p, target)| match target {
                Target::Node(name) => Some((p - self.first_moving, name.as_str())),
                Target::Claim(_) => None,
            })
    }
}

/// Solves `input` with the existing nodes named in `leaving` gone and `moving` (their pods that
/// need a new home) pending after the pods already pending. `input` is as it was afterwards.
pub fn without_nodes<'p>(
    input: &mut SchedulingInput,
    leaving: &HashSet<&str>,
    moving: impl IntoIterator<Item = &'p Pod>,
) -> Removal {
    // Each leaving node with its place, to be put back there: the solver tries existing nodes
    // in input order.
    let mut gone = Vec::new();
    let nodes = std::mem::take(&mut input.existing_nodes);
    for (i, node) in nodes.into_iter().enumerate() {
        if leaving.contains(node.name.as_str()) {
            gone.push((i, node));
        } else {
            input.existing_nodes.push(node);
        }
    }
    let first_moving = input.pods.len();
    input.pods.extend(moving.into_iter().cloned());
    let result = solve(input);
    let key = |p: PodIndex| format!("{}/{}", input.pods[p].namespace, input.pods[p].name);
    let mut stranded: Vec<String> = result
        .unschedulable
        .iter()
        .filter(|(p, _)| *p >= first_moving)
        .map(|(p, why)| format!("{}: {why}", key(*p)))
        .collect();
    for (p, name) in result.placements_not_up(input, first_moving) {
        stranded.push(format!(
            "{}: would schedule against {name}, which is not initialized",
            key(p)
        ));
    }
    input.pods.truncate(first_moving);
    for (i, node) in gone {
        input.existing_nodes.insert(i, node);
    }
    Removal {
        result,
        first_moving,
        stranded,
    }
}

/// Makes `removal` of the nodes named in `leaving` part of `input`, as a decision carried out:
/// the nodes gone, each of their pods (`moving`, as passed to [`without_nodes`]) that it put on an
/// existing node bound there. Pods it put on new claims leave the input with those claims (they
/// are sized for them), so a later question neither counts on room this one took nor on its new
/// claims; those claims count against their pools' limits from then on, at the most any of their
/// instance types could take (as a claim not launched yet counts), while the leaving nodes still
/// count until they are gone.
pub fn carry_out(
    input: &mut SchedulingInput,
    leaving: &HashSet<&str>,
    moving: &[Pod],
    removal: &Removal,
) {
    input
        .existing_nodes
        .retain(|n| !leaving.contains(n.name.as_str()));
    for (k, name) in removal.moved_to_nodes() {
        let (Some(pod), Some(node)) = (
            moving.get(k),
            input.existing_nodes.iter_mut().find(|n| n.name == name),
        ) else {
            continue;
        };
        node.used.add(&pod.requests);
        node.used.pods += 1;
        node.pods.push(std::sync::Arc::new(pod.clone()));
    }
    for claim in removal.replacements() {
        let Some(pool) = input
            .node_pools
            .iter_mut()
            .find(|p| p.name == claim.node_pool)
        else {
            continue;
        };
        let Some(remaining) = pool.remaining.as_mut() else {
            continue;
        };
        let options = pool
            .instance_types
            .iter()
            .filter(|t| claim.instance_type_options.contains(&t.name));
        remaining.consume(&InstanceType::largest_capacity(options).unwrap_or_default());
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::labels::{HOSTNAME, INSTANCE_TYPE};
    use crate::scheduling::{
        ExistingNode, InstanceType, NodePoolView, Offering, Requirement, Requirements, Resources,
    };

    pub(crate) const GI: i64 = 1 << 30;

    fn node(name: &str, cpu: i64, pods: Vec<Pod>) -> ExistingNode {
        let mut used = Resources::default();
        for p in &pods {
            used.add(&p.requests);
            used.pods += 1;
        }
        ExistingNode {
            name: name.into(),
            labels: BTreeMap::from([(HOSTNAME.to_owned(), name.to_owned())]),
            allocatable: Resources::new(cpu * 1000, cpu * 2 * GI, 110),
            used,
            pods: pods.into_iter().map(std::sync::Arc::new).collect(),
            initialized: true,
            ..ExistingNode::default()
        }
    }

    /// A pod of `cpu_millis` and a quarter GiB in namespace `ns`.
    pub(crate) fn pod(name: &str, cpu_millis: i64) -> Pod {
        Pod::new("ns", name, Resources::new(cpu_millis, GI / 4, 0))
    }

    /// Pool `default` of one 4-vCPU, 8 GiB type, `c4`.
    pub(crate) fn pool() -> NodePoolView {
        let four = InstanceType {
            name: "c4".into(),
            requirements: Requirements::new().with(Requirement::in_(INSTANCE_TYPE, ["c4"])),
            offerings: vec![Offering::new("zone-1", "on-demand", 0.4)],
            capacity: Resources::new(4000, 8 * GI, 40),
            overhead: Resources::default(),
            volume_limits: Default::default(),
            devices: Vec::new(),
        };
        NodePoolView::new("default", vec![four].into())
    }

    fn input(nodes: Vec<ExistingNode>) -> SchedulingInput {
        SchedulingInput {
            node_pools: vec![pool()],
            existing_nodes: nodes,
            ..SchedulingInput::default()
        }
    }

    fn names(input: &SchedulingInput) -> Vec<&str> {
        input
            .existing_nodes
            .iter()
            .map(|n| n.name.as_str())
            .collect()
    }

    /// The question leaves the input as it was, nodes in their order; carrying the answer out
    /// binds the pods it moved and drops the node, so the next question sees the room taken.
    #[test]
    fn a_removal_is_asked_without_change_and_carried_out_with_its_moves() {
        let a_pods = vec![pod("a1", 1000), pod("a2", 1000)];
        let mut input = input(vec![
            node("a", 4, a_pods.clone()),
            node("b", 4, vec![pod("b1", 2500)]),
            node("c", 4, vec![pod("c1", 3000)]),
        ]);
        let leaving = HashSet::from(["a"]);
        let removal = without_nodes(&mut input, &leaving, &a_pods);
        assert_eq!(names(&input), ["a", "b", "c"], "restored in place");
        assert!(input.pods.is_empty());
        assert!(removal.stranded.is_empty(), "{:?}", removal.stranded);
        // b has 1.5 CPU free, c one: a1 goes to b, a2 to c (first fit, largest first).
        let moved: Vec<(usize, &str)> = removal.moved_to_nodes().collect();
        assert_eq!(moved.len(), 2, "{moved:?}");
        assert!(removal.result.new_claims.is_empty());

        carry_out(&mut input, &leaving, &a_pods, &removal);
        assert_eq!(names(&input), ["b", "c"]);
        let used: i64 = input.existing_nodes.iter().map(|n| n.used.cpu_millis).sum();
        assert_eq!(used, 7500, "the moved pods count where they went");
        assert_eq!(
            input
                .existing_nodes
                .iter()
                .map(|n| n.pods.len())
                .sum::<usize>(),
            4
        );

        // Now b's pods have nowhere to go but a new node.
        let b_pods = vec![pod("b1", 2500)];
        let removal = without_nodes(&mut input, &HashSet::from(["b"]), &b_pods);
        assert!(removal.stranded.is_empty());
        assert_eq!(removal.result.new_claims.len(), 1);
        assert!(removal.moved_to_nodes().next().is_none());
    }

    /// Replacements carried out take their pool's room: with room for two more nodes, the third
    /// removal that needs one strands its pod on the limit.
    #[test]
    fn replacements_carried_out_count_against_the_pools_limits() {
        let full = |name: &str| node(name, 4, vec![pod(&format!("{name}1"), 3500)]);
        let mut input = input(vec![full("a"), full("b"), full("c")]);
        input.node_pools[0].remaining =
            Some(crate::scheduling::ResourceLimits::default().with("cpu", 8000));
        for (i, name) in ["a", "b"].into_iter().enumerate() {
            let moving = vec![pod(&format!("{name}1"), 3500)];
            let leaving = HashSet::from([name]);
            let removal = without_nodes(&mut input, &leaving, &moving);
            assert!(
                removal.stranded.is_empty(),
                "{name}: {:?}",
                removal.stranded
            );
            assert_eq!(removal.replacements().count(), 1);
            carry_out(&mut input, &leaving, &moving, &removal);
            let left = input.node_pools[0].remaining.as_ref().map(|r| r.0["cpu"]);
            assert_eq!(left, Some(4000 - 4000 * i as i64), "after {name}");
        }
        let moving = vec![pod("c1", 3500)];
        let removal = without_nodes(&mut input, &HashSet::from(["c"]), &moving);
        assert_eq!(removal.replacements().count(), 0);
        assert_eq!(removal.stranded.len(), 1, "{:?}", removal.stranded);
    }

    /// Pods that fit nowhere, or only on capacity that is not up, are named.
    #[test]
    fn stranded_pods_are_named_with_why() {
        let mut not_up = node("d", 4, vec![]);
        not_up.initialized = false;
        let mut input = input(vec![node("a", 4, vec![]), not_up]);
        input.node_pools.clear();
        let moving = vec![pod("big", 8000), pod("small", 500)];
        let removal = without_nodes(&mut input, &HashSet::from(["a"]), &moving);
        assert_eq!(removal.stranded.len(), 2, "{:?}", removal.stranded);
        assert!(removal.stranded[0].starts_with("ns/big: "));
        assert_eq!(
            removal.stranded[1],
            "ns/small: would schedule against d, which is not initialized"
        );
        assert_eq!(names(&input), ["a", "d"]);
    }
}
