//! Topology groups: pod counts per domain of a topology key, for spread constraints, pod affinity
//! and pod anti-affinity (Karpenter's `Topology` and `TopologyGroup`).
//!
//! A group is identified by what it counts (kind, key, namespaces, selector, skew, node filter);
//! pods with identical constraints share one. Domains are interned per topology key and shared by
//! every group of that key, so registering a new claim's hostname registers it everywhere.
//! *Inverse* anti-affinity groups count where the pods that carry a required anti-affinity term
//! are, so that the pods they repel stay away even though those carry no term themselves.

use super::fast_hash::FastMap;

use crate::api::labels::HOSTNAME;
use crate::scheduling::pod::{Namespaces, Pod};
use crate::scheduling::requirements::{Requirements, ValueSet};
use crate::scheduling::selector::LabelSelector;
use crate::scheduling::taints::{Taint, TaintEffect, Toleration};

pub(super) type GroupId = usize;
pub(super) type DomainId = u32;

/// What a group enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum GroupKind {
    Spread,
    Affinity,
    AntiAffinity,
}

/// The namespaces a group counts pods in.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum NamespaceSet {
    Listed(Vec<String>),
    All,
}

impl NamespaceSet {
    pub(super) fn resolve(namespaces: &Namespaces, owner_namespace: &str) -> Self {
        match namespaces {
            Namespaces::Own => NamespaceSet::Listed(vec![owner_namespace.to_owned()]),
            Namespaces::Listed(list) => {
                let mut list = list.clone();
                list.sort_unstable();
                list.dedup();
                NamespaceSet::Listed(list)
            }
            Namespaces::All => NamespaceSet::All,
        }
    }

    fn contains(&self, namespace: &str) -> bool {
        match self {
            NamespaceSet::Listed(list) => list.iter().any(|n| n == namespace),
            NamespaceSet::All => true,
        }
    }
}

/// Everything that identifies a group.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct GroupSpec {
    pub(super) kind: GroupKind,
    pub(super) key: String,
    pub(super) namespaces: NamespaceSet,
    pub(super) selector: Option<LabelSelector>,
    pub(super) max_skew: i32,
    pub(super) min_domains: Option<i32>,
    /// Spread only: nodes count when they satisfy one of these terms (none: every node).
    pub(super) node_filter: Vec<Requirements>,
    /// Spread with `nodeTaintsPolicy: Honor`: nodes count only when these tolerate their
    /// `NoSchedule` and `NoExecute` taints.
    pub(super) tolerations: Option<Vec<Toleration>>,
    pub(super) inverse: bool,
}

impl GroupSpec {
    /// Whether a node with `taints` counts for the group (always, unless it honors taints).
    pub(super) fn admits_taints(&self, taints: &[Taint]) -> bool {
        self.tolerations.as_ref().is_none_or(|tolerations| {
            taints
                .iter()
                .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
                .all(|t| tolerations.iter().any(|tol| tol.tolerates(t)))
        })
    }
}

#[derive(Debug)]
struct Group {
    spec: GroupSpec,
    key: usize,
    counts: Vec<u32>,
    /// Domains with a non-zero count.
    nonzero: u32,
    /// Spread groups: the domains a pod could reach at all (by id), through a node that exists or
    /// one a pool can still launch; the others take no part in the skew (kube-scheduler's
    /// `nodeAffinityPolicy`/`nodeTaintsPolicy`). `None`: every domain.
    reachable: Option<Vec<bool>>,
}

/// The interned domains of one topology key.
#[derive(Debug)]
struct DomainKey {
    name: String,
    is_hostname: bool,
    ids: FastMap<String, DomainId>,
    names: Vec<String>,
}

#[derive(Debug, Default)]
pub(super) struct Topology {
    keys: Vec<DomainKey>,
    groups: Vec<Group>,
    index: FastMap<GroupSpec, GroupId>,
    /// Hostname domains whose count in a group went from zero to one, since the last
    /// [`Topology::take_occupied`].
    occupied: Vec<(GroupId, DomainId)>,
}

impl Topology {
    /// The group for `spec`, created empty on first use.
    pub(super) fn group_for(&mut self, spec: GroupSpec) -> GroupId {
        if let Some(&id) = self.index.get(&spec) {
            return id;
        }
        let key = self.key_index_or_insert(&spec.key);
        let id = self.groups.len();
        self.groups.push(Group {
            spec: spec.clone(),
            key,
            counts: Vec::new(),
            nonzero: 0,
            reachable: None,
        });
        self.index.insert(spec, id);
        id
    }

    /// The group for `spec`, if it exists.
    pub(super) fn existing_group(&self, spec: &GroupSpec) -> Option<GroupId> {
        self.index.get(spec).copied()
    }

    fn key_index_or_insert(&mut self, key: &str) -> usize {
        if let Some(i) = self.key_index(key) {
            return i;
        }
        self.keys.push(DomainKey {
            name: key.to_owned(),
            is_hostname: key == HOSTNAME,
            ids: FastMap::default(),
            names: Vec::new(),
        });
        self.keys.len() - 1
    }

    /// The index of a topology key some group uses.
    pub(super) fn key_index(&self, key: &str) -> Option<usize> {
        self.keys.iter().position(|k| k.name == key)
    }

    /// The topology keys in use.
    pub(super) fn key_names(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| k.name.as_str())
    }

    pub(super) fn key_name(&self, key: usize) -> &str {
        &self.keys[key].name
    }

    /// The index of the hostname key, if a group uses it.
    pub(super) fn hostname_key(&self) -> Option<usize> {
        self.key_index(HOSTNAME)
    }

    /// Registers `value` as a domain of `key` (a no-op for keys no group uses).
    pub(super) fn register(&mut self, key: &str, value: &str) -> Option<DomainId> {
        let k = self.key_index(key)?;
        Some(self.register_at(k, value))
    }

    pub(super) fn register_at(&mut self, key: usize, value: &str) -> DomainId {
        let dk = &mut self.keys[key];
        if let Some(&id) = dk.ids.get(value) {
            return id;
        }
        let id = DomainId::try_from(dk.names.len()).unwrap_or(DomainId::MAX);
        dk.ids.insert(value.to_owned(), id);
        dk.names.push(value.to_owned());
        id
    }

    pub(super) fn domain(&self, key: usize, value: &str) -> Option<DomainId> {
        self.keys[key].ids.get(value).copied()
    }

    pub(super) fn domain_name(&self, key: usize, id: DomainId) -> &str {
        &self.keys[key].names[id as usize]
    }

    /// How many topology keys are in use.
    pub(super) fn key_count(&self) -> usize {
        self.keys.len()
    }

    pub(super) fn group_count(&self) -> usize {
        self.groups.len()
    }

    pub(super) fn group_key(&self, g: GroupId) -> usize {
        self.groups[g].key
    }

    pub(super) fn spec(&self, g: GroupId) -> &GroupSpec {
        &self.groups[g].spec
    }

    /// Whether group `g` counts `pod` (namespace and selector).
    pub(super) fn selects(&self, g: GroupId, pod: &Pod) -> bool {
        let spec = &self.groups[g].spec;
        spec.namespaces.contains(&pod.namespace)
            && spec
                .selector
                .as_ref()
                .is_some_and(|s| s.matches(&pod.labels))
    }

    /// Whether a node with `requirements` counts for group `g`.
    pub(super) fn node_counts(
        &self,
        g: GroupId,
        requirements: &Requirements,
        taints: &[Taint],
        well_known: &dyn Fn(&str) -> bool,
    ) -> bool {
        let spec = &self.groups[g].spec;
        spec.admits_taints(taints)
            && (spec.node_filter.is_empty()
                || spec
                    .node_filter
                    .iter()
                    .any(|term| requirements.compatible(term, well_known).is_ok()))
    }

    /// Restricts spread group `g` to the domains in `values` (see [`Group::reachable`]); values
    /// that are not registered domains are ignored.
    pub(super) fn set_reachable<'v>(&mut self, g: GroupId, values: impl Iterator<Item = &'v str>) {
        let key = self.groups[g].key;
        let dk = &self.keys[key];
        let mut reachable = vec![false; dk.names.len()];
        for v in values {
            if let Some(&d) = dk.ids.get(v) {
                reachable[d as usize] = true;
            }
        }
        self.groups[g].reachable = Some(reachable);
    }

    /// Whether domain `d` takes part in group `g`'s skew.
    #[inline]
    fn reachable(&self, g: GroupId, d: DomainId) -> bool {
        self.groups[g]
            .reachable
            .as_ref()
            .is_none_or(|r| r.get(d as usize).copied().unwrap_or(false))
    }

    /// How many matching pods group `g` counts in domain `d`.
    #[inline]
    pub(super) fn count(&self, g: GroupId, d: DomainId) -> u32 {
        self.groups[g].counts.get(d as usize).copied().unwrap_or(0)
    }

    /// Counts one more matching pod in domain `d`.
    pub(super) fn record(&mut self, g: GroupId, d: DomainId) {
        let group = &mut self.groups[g];
        let i = d as usize;
        if group.counts.len() <= i {
            group.counts.resize(i + 1, 0);
        }
        if group.counts[i] == 0 {
            group.nonzero += 1;
            if self.keys[group.key].is_hostname {
                self.occupied.push((g, d));
            }
        }
        group.counts[i] += 1;
    }

    /// Whether group `g` counts its pods by hostname.
    pub(super) fn is_hostname_group(&self, g: GroupId) -> bool {
        self.keys[self.groups[g].key].is_hostname
    }

    /// Drains the hostname domains that became occupied in some group since the last call.
    pub(super) fn take_occupied(&mut self, out: &mut Vec<(GroupId, DomainId)>) {
        out.clear();
        std::mem::swap(out, &mut self.occupied);
    }

    /// Records a pod that landed on a node whose domains for the group's key are `set`: every
    /// value for anti-affinity (the pod may be in any of them), the value only when it is known
    /// otherwise. Unregistered values are registered.
    pub(super) fn record_set(&mut self, g: GroupId, set: Option<&ValueSet>, all_values: bool) {
        let Some(set) = set else { return };
        if set.is_complement() {
            return;
        }
        let key = self.groups[g].key;
        if all_values || self.groups[g].spec.kind == GroupKind::AntiAffinity {
            for v in set.values() {
                let d = self.register_at(key, v);
                self.record(g, d);
            }
        } else if let Some(v) = set.single_value() {
            let d = self.register_at(key, v);
            self.record(g, d);
        }
    }

    /// The domains of `key` a node allows: `node_domains` (unconstrained when `None`),
    /// registered domains only; `hint` short-cuts a single known domain.
    fn candidates<'a>(
        &'a self,
        key: usize,
        node_domains: Option<&'a ValueSet>,
        hint: Option<DomainId>,
    ) -> Candidates<'a> {
        if let Some(d) = hint {
            return Candidates::One(Some(d));
        }
        match node_domains {
            Some(set) if !set.is_complement() => {
                Candidates::Values(set.values().iter(), &self.keys[key])
            }
            other => Candidates::All(0..self.keys[key].names.len(), other, &self.keys[key]),
        }
    }

    /// The domains group `g` lets a pod use on a node whose domains are `node_domains`, into
    /// `out` (ascending ids). `pod_domains` is what the pod's own required node affinity allows
    /// for the key; `selects` whether the group counts the pod itself. Returns whether any remain.
    pub(super) fn allowed_domains(
        &self,
        g: GroupId,
        selects: bool,
        pod_domains: Option<&ValueSet>,
        node_domains: Option<&ValueSet>,
        hint: Option<DomainId>,
        out: &mut Vec<DomainId>,
    ) -> bool {
        out.clear();
        let group = &self.groups[g];
        let key = group.key;
        let names = &self.keys[key].names;
        let pod_allows = |d: DomainId| pod_domains.is_none_or(|s| s.contains(&names[d as usize]));
        match group.spec.kind {
            GroupKind::Spread => {
                let min = self.spread_min(g, pod_domains);
                let self_count = u32::from(selects);
                let mut best: Option<(u32, DomainId)> = None;
                for d in self.candidates(key, node_domains, hint) {
                    if !self.reachable(g, d) {
                        continue;
                    }
                    let count = self.count(g, d) + self_count;
                    if i64::from(count) - i64::from(min) <= i64::from(group.spec.max_skew)
                        && best.is_none_or(|(c, bd)| (count, d) < (c, bd))
                    {
                        best = Some((count, d));
                    }
                }
                if let Some((_, d)) = best {
                    out.push(d);
                }
            }
            GroupKind::Affinity => {
                for d in self.candidates(key, node_domains, hint) {
                    if self.count(g, d) > 0 && pod_allows(d) {
                        out.push(d);
                    }
                }
                if out.is_empty() && selects && !self.any_populated(g, pod_domains) {
                    // Nothing to be near yet and the pod matches itself: it may start anywhere.
                    if let Some(d) = self
                        .candidates(key, node_domains, hint)
                        .filter(|&d| pod_allows(d))
                        .min()
                    {
                        out.push(d);
                    }
                }
            }
            GroupKind::AntiAffinity => {
                for d in self.candidates(key, node_domains, hint) {
                    if self.count(g, d) == 0 && pod_allows(d) {
                        out.push(d);
                    }
                }
            }
        }
        out.sort_unstable();
        !out.is_empty()
    }

    /// The domains where group `g` counts a matching pod, into `out` (ascending ids).
    pub(super) fn populated_domains(&self, g: GroupId, out: &mut Vec<DomainId>) {
        out.clear();
        out.extend(
            self.groups[g]
                .counts
                .iter()
                .enumerate()
                .filter(|&(_, &c)| c > 0)
                .filter_map(|(d, _)| DomainId::try_from(d).ok()),
        );
    }

    /// Whether any domain the pod allows holds a matching pod.
    pub(super) fn any_populated(&self, g: GroupId, pod_domains: Option<&ValueSet>) -> bool {
        let group = &self.groups[g];
        match pod_domains {
            None => group.nonzero > 0,
            Some(set) => {
                let names = &self.keys[group.key].names;
                group
                    .counts
                    .iter()
                    .enumerate()
                    .any(|(d, &c)| c > 0 && set.contains(&names[d]))
            }
        }
    }

    /// The global minimum the skew is measured against: zero for hostnames (a new node can always
    /// be made), otherwise the least count among the domains the pod may use (zero when fewer of
    /// them exist than `minDomains`).
    fn spread_min(&self, g: GroupId, pod_domains: Option<&ValueSet>) -> u32 {
        let group = &self.groups[g];
        let dk = &self.keys[group.key];
        if dk.is_hostname {
            return 0;
        }
        let mut min = u32::MAX;
        let mut domains = 0i64;
        for (d, name) in dk.names.iter().enumerate() {
            let reachable = DomainId::try_from(d).is_ok_and(|d| self.reachable(g, d));
            if reachable && pod_domains.is_none_or(|s| s.contains(name)) {
                domains += 1;
                min = min.min(group.counts.get(d).copied().unwrap_or(0));
            }
        }
        if group
            .spec
            .min_domains
            .is_some_and(|m| domains < i64::from(m))
        {
            return 0;
        }
        min
    }
}

/// Iterator over candidate domains.
enum Candidates<'a> {
    One(Option<DomainId>),
    Values(std::slice::Iter<'a, String>, &'a DomainKey),
    All(std::ops::Range<usize>, Option<&'a ValueSet>, &'a DomainKey),
}

impl Iterator for Candidates<'_> {
    type Item = DomainId;

    fn next(&mut self) -> Option<DomainId> {
        match self {
            Candidates::One(d) => d.take(),
            Candidates::Values(values, dk) => values.find_map(|v| dk.ids.get(v).copied()),
            Candidates::All(range, set, dk) => range
                .find(|&d| set.is_none_or(|s| s.contains(&dk.names[d])))
                .and_then(|d| DomainId::try_from(d).ok()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::labels::ZONE;

    fn spec(kind: GroupKind, key: &str, skew: i32) -> GroupSpec {
        GroupSpec {
            kind,
            key: key.to_owned(),
            namespaces: NamespaceSet::Listed(vec!["default".to_owned()]),
            selector: Some(LabelSelector::labels([("app", "web")])),
            max_skew: skew,
            min_domains: None,
            node_filter: Vec::new(),
            tolerations: None,
            inverse: false,
        }
    }

    #[test]
    fn spread_picks_the_least_loaded_domain_within_skew() {
        let mut t = Topology::default();
        let g = t.group_for(spec(GroupKind::Spread, ZONE, 1));
        let [a, b, c] = ["a", "b", "c"].map(|z| t.register(ZONE, z).unwrap());
        t.record(g, a);
        t.record(g, b);
        let mut out = Vec::new();
        assert!(t.allowed_domains(g, true, None, None, None, &mut out));
        assert_eq!(out, vec![c]);
        // Restricted to a and b by the node, both would be at skew 2 - 0 > 1.
        let ab = ValueSet::in_(["a", "b"]);
        assert!(!t.allowed_domains(g, true, None, Some(&ab), None, &mut out));
        // A pod that is not counted itself may go to a (1 - 0 <= 1).
        assert!(t.allowed_domains(g, false, None, Some(&ab), None, &mut out));
        assert_eq!(out, vec![a]);
        // The pod's own affinity to a and b leaves c out of the minimum.
        assert!(t.allowed_domains(g, true, Some(&ab), Some(&ab), None, &mut out));
    }

    #[test]
    fn affinity_requires_populated_domains_unless_bootstrapping() {
        let mut t = Topology::default();
        let g = t.group_for(spec(GroupKind::Affinity, ZONE, i32::MAX));
        let [a, b] = ["a", "b"].map(|z| t.register(ZONE, z).unwrap());
        let mut out = Vec::new();
        assert!(
            !t.allowed_domains(g, false, None, None, None, &mut out),
            "nothing to follow"
        );
        assert!(t.allowed_domains(g, true, None, None, None, &mut out));
        assert_eq!(
            out,
            vec![a],
            "self-selecting pods bootstrap in the first domain"
        );
        t.record(g, b);
        assert!(t.allowed_domains(g, true, None, None, None, &mut out));
        assert_eq!(out, vec![b]);
        let only_a = ValueSet::in_(["a"]);
        assert!(!t.allowed_domains(g, true, None, Some(&only_a), None, &mut out));
    }

    #[test]
    fn anti_affinity_requires_empty_domains() {
        let mut t = Topology::default();
        let g = t.group_for(spec(GroupKind::AntiAffinity, HOSTNAME, i32::MAX));
        let h1 = t.register(HOSTNAME, "h1").unwrap();
        let h2 = t.register(HOSTNAME, "h2").unwrap();
        t.record(g, h1);
        let mut out = Vec::new();
        assert!(!t.allowed_domains(g, true, None, None, Some(h1), &mut out));
        assert!(t.allowed_domains(g, true, None, None, Some(h2), &mut out));
        assert!(t.allowed_domains(g, true, None, None, None, &mut out));
        assert_eq!(out, vec![h2]);
    }

    #[test]
    fn groups_are_shared_by_identical_specs() {
        let mut t = Topology::default();
        let a = t.group_for(spec(GroupKind::Spread, ZONE, 1));
        let b = t.group_for(spec(GroupKind::Spread, ZONE, 1));
        let c = t.group_for(spec(GroupKind::Spread, ZONE, 2));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(t.group_count(), 2);
    }
}
