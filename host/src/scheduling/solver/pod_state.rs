//! A pending pod's working state: its requirements as they stand after relaxation, the topology
//! groups it owns or is counted in, and preference relaxation (Karpenter's `Preferences.Relax`).

use super::topology::{GroupId, GroupKind, GroupSpec, NamespaceSet, Topology};
use crate::scheduling::pod::{NodeInclusionPolicy, Pod, PodAffinityTerm, WhenUnsatisfiable};
use crate::scheduling::requirements::Requirements;
use crate::scheduling::resources::Resources;
use crate::scheduling::taints::{Taint, TaintEffect, Toleration};

/// What the solver tracks per pending pod.
#[derive(Debug)]
pub(super) struct PodState {
    /// The pod's requests, counting the pod itself (`pods: 1`).
    pub(super) requests: Resources,
    /// Node selector, first remaining required term, heaviest remaining preferred term and the
    /// volume alternative in force.
    pub(super) requirements: Requirements,
    /// Node selector and first remaining required term: what topology treats as the pod's domains.
    pub(super) strict: Requirements,
    required_term: usize,
    /// Which of the pod's volume alternatives is in force.
    volume_term: usize,
    /// Preferred node-affinity terms not yet relaxed away, heaviest first.
    preferred_node: Vec<usize>,
    preferred_affinity: Vec<usize>,
    preferred_anti: Vec<usize>,
    /// Spread constraints not yet relaxed away.
    spreads: Vec<usize>,
    /// Relaxation added a toleration for `PreferNoSchedule` taints.
    pub(super) tolerates_prefer_no_schedule: bool,
    /// Groups whose constraint the pod carries.
    pub(super) owned: Vec<GroupId>,
    /// Inverse anti-affinity groups of the pod's required anti-affinity terms.
    pub(super) inverse_owned: Vec<GroupId>,
    /// Regular groups that count the pod (sorted).
    pub(super) selected_by: Vec<GroupId>,
    /// Inverse anti-affinity groups that repel the pod.
    pub(super) repelled_by: Vec<GroupId>,
}

/// The node requirements of `pod`: node selector, required term `term`, and `preferred` if given.
pub(super) fn node_requirements(pod: &Pod, term: usize, preferred: Option<usize>) -> Requirements {
    let mut reqs = Requirements::from_labels(
        pod.node_selector
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str())),
    );
    if let Some(p) = preferred.and_then(|i| pod.preferred_node_affinity.get(i)) {
        reqs.merge(&p.requirements);
    }
    if let Some(required) = pod.required_node_affinity.get(term) {
        reqs.merge(required);
    }
    reqs
}

/// The nodes a spread constraint of `pod` counts: its node selector combined with each required
/// node-affinity term (ORed); empty when unconstrained or when the constraint ignores node
/// affinity (`nodeAffinityPolicy: Ignore`).
fn spread_node_filter(pod: &Pod, policy: NodeInclusionPolicy) -> Vec<Requirements> {
    if policy == NodeInclusionPolicy::Ignore {
        return Vec::new();
    }
    let selector = node_requirements(pod, usize::MAX, None);
    if pod.required_node_affinity.is_empty() {
        return if selector.is_empty() {
            Vec::new()
        } else {
            vec![selector]
        };
    }
    pod.required_node_affinity
        .iter()
        .map(|term| {
            let mut t = selector.clone();
            t.merge(term);
            t
        })
        .collect()
}

fn affinity_spec(pod: &Pod, kind: GroupKind, term: &PodAffinityTerm, inverse: bool) -> GroupSpec {
    GroupSpec {
        kind,
        key: term.topology_key.clone(),
        namespaces: NamespaceSet::resolve(&term.namespaces, &pod.namespace),
        selector: term.label_selector.clone(),
        max_skew: i32::MAX,
        min_domains: None,
        node_filter: Vec::new(),
        tolerations: None,
        inverse,
    }
}

/// The inverse anti-affinity group specs of `pod`'s required anti-affinity terms.
pub(super) fn inverse_specs(pod: &Pod) -> impl Iterator<Item = GroupSpec> + '_ {
    pod.pod_anti_affinity
        .iter()
        .map(|term| affinity_spec(pod, GroupKind::AntiAffinity, term, true))
}

impl PodState {
    /// The initial state of `pod`, creating the groups it owns.
    pub(super) fn new(pod: &Pod, topology: &mut Topology) -> Self {
        let mut preferred_node: Vec<usize> = (0..pod.preferred_node_affinity.len()).collect();
        preferred_node.sort_by_key(|&i| std::cmp::Reverse(pod.preferred_node_affinity[i].weight));
        let mut preferred_affinity: Vec<usize> = (0..pod.preferred_pod_affinity.len()).collect();
        preferred_affinity
            .sort_by_key(|&i| std::cmp::Reverse(pod.preferred_pod_affinity[i].weight));
        let mut preferred_anti: Vec<usize> = (0..pod.preferred_pod_anti_affinity.len()).collect();
        preferred_anti
            .sort_by_key(|&i| std::cmp::Reverse(pod.preferred_pod_anti_affinity[i].weight));
        let mut requests = pod.requests.clone();
        requests.pods = 1;
        let mut state = Self {
            requests,
            requirements: Requirements::new(),
            strict: Requirements::new(),
            required_term: 0,
            volume_term: 0,
            preferred_node,
            preferred_affinity,
            preferred_anti,
            spreads: (0..pod.topology_spread.len()).collect(),
            tolerates_prefer_no_schedule: false,
            owned: Vec::new(),
            inverse_owned: inverse_specs(pod).map(|s| topology.group_for(s)).collect(),
            selected_by: Vec::new(),
            repelled_by: Vec::new(),
        };
        state.refresh(pod, topology);
        state
    }

    /// Recomputes requirements and owned groups after a change.
    fn refresh(&mut self, pod: &Pod, topology: &mut Topology) {
        self.requirements = node_requirements(
            pod,
            self.required_term,
            self.preferred_node.first().copied(),
        );
        if let Some(volumes) = pod.volume_requirements.get(self.volume_term) {
            self.requirements.merge(volumes);
        }
        self.strict = node_requirements(pod, self.required_term, None);
        self.owned = self
            .owned_specs(pod)
            .map(|s| topology.group_for(s))
            .collect();
    }

    fn owned_specs<'a>(&'a self, pod: &'a Pod) -> impl Iterator<Item = GroupSpec> + 'a {
        let spreads = self.spreads.iter().map(move |&i| {
            let c = &pod.topology_spread[i];
            GroupSpec {
                kind: GroupKind::Spread,
                key: c.topology_key.clone(),
                namespaces: NamespaceSet::Listed(vec![pod.namespace.clone()]),
                selector: c.label_selector.clone(),
                max_skew: c.max_skew,
                min_domains: c.min_domains,
                node_filter: spread_node_filter(pod, c.node_affinity_policy),
                tolerations: (c.node_taints_policy == NodeInclusionPolicy::Honor)
                    .then(|| pod.tolerations.clone()),
                inverse: false,
            }
        });
        let affinity = pod
            .pod_affinity
            .iter()
            .chain(
                self.preferred_affinity
                    .iter()
                    .map(|&i| &pod.preferred_pod_affinity[i].term),
            )
            .map(|t| affinity_spec(pod, GroupKind::Affinity, t, false));
        let anti = pod
            .pod_anti_affinity
            .iter()
            .chain(
                self.preferred_anti
                    .iter()
                    .map(|&i| &pod.preferred_pod_anti_affinity[i].term),
            )
            .map(|t| affinity_spec(pod, GroupKind::AntiAffinity, t, false));
        spreads.chain(affinity).chain(anti)
    }

    /// Finds the groups that count or repel the pod, once every group exists.
    pub(super) fn index_selectors(&mut self, pod: &Pod, topology: &Topology) {
        self.selected_by.clear();
        self.repelled_by.clear();
        for g in 0..topology.group_count() {
            if topology.selects(g, pod) {
                if topology.spec(g).inverse {
                    self.repelled_by.push(g);
                } else {
                    self.selected_by.push(g);
                }
            }
        }
    }

    /// Whether the pod carries any topology constraint or is repelled by one.
    pub(super) fn has_topology(&self) -> bool {
        !self.owned.is_empty() || !self.repelled_by.is_empty()
    }

    /// The first of `taints` the pod does not tolerate.
    pub(super) fn untolerated<'t>(&self, pod: &Pod, taints: &'t [Taint]) -> Option<&'t Taint> {
        taints.iter().find(|taint| {
            let relaxed =
                self.tolerates_prefer_no_schedule && taint.effect == TaintEffect::PreferNoSchedule;
            let tolerated = pod
                .tolerations
                .iter()
                .any(|t: &Toleration| t.tolerates(taint));
            !relaxed && !tolerated
        })
    }

    /// Drops one preference, in Karpenter's order: the first of several volume topology
    /// alternatives, the first of several required node-affinity terms, the heaviest preferred pod affinity, the heaviest preferred pod anti-affinity, the
    /// heaviest preferred node affinity, a `ScheduleAnyway` spread constraint, and finally (when
    /// some pool has such taints) `PreferNoSchedule` taints. Returns what was relaxed.
    pub(super) fn relax(
        &mut self,
        pod: &Pod,
        topology: &mut Topology,
        prefer_no_schedule_exists: bool,
    ) -> Option<&'static str> {
        let what = if pod.volume_requirements.len() > self.volume_term + 1 {
            self.volume_term += 1;
            "volume topology alternative"
        } else if pod.required_node_affinity.len() > self.required_term + 1 {
            self.required_term += 1;
            "required node affinity term"
        } else if !self.preferred_affinity.is_empty() {
            self.preferred_affinity.remove(0);
            "preferred pod affinity term"
        } else if !self.preferred_anti.is_empty() {
            self.preferred_anti.remove(0);
            "preferred pod anti-affinity term"
        } else if !self.preferred_node.is_empty() {
            self.preferred_node.remove(0);
            "preferred node affinity term"
        } else if let Some(pos) = self.spreads.iter().position(|&i| {
            pod.topology_spread[i].when_unsatisfiable == WhenUnsatisfiable::ScheduleAnyway
        }) {
            self.spreads.remove(pos);
            "ScheduleAnyway topology spread constraint"
        } else if prefer_no_schedule_exists && !self.tolerates_prefer_no_schedule {
            self.tolerates_prefer_no_schedule = true;
            "toleration for PreferNoSchedule taints"
        } else {
            return None;
        };
        self.refresh(pod, topology);
        Some(what)
    }
}
