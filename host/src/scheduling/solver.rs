//! The greedy first-fit-decreasing solver (Karpenter's `Scheduler.Solve`).
//!
//! Capacity is a list of *bins*: existing nodes and in-flight claims (fixed allocatable), then the
//! NodeClaims this run opens (a shrinking set of instance types). Placing a pod on a bin checks,
//! cheapest test first: taints, resources against the bin's best case, node requirements,
//! topology, and for new NodeClaims which instance types survive the narrowed requirements,
//! offerings and the summed requests. Failed attempts allocate nothing unless the pod carries
//! node requirements of its own.

mod bin_index;
mod bitset;
mod catalog;
mod fast_hash;
mod pod_state;
mod queue;
mod room;
mod topology;

#[cfg(test)]
mod index_tests;
#[cfg(test)]
mod reach_tests;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bin_index::{BinIndex, Listed};
use bitset::BitSet;
use catalog::Catalog;
use fast_hash::{FastMap, FastSet};
use pod_state::{PodState, inverse_specs, node_requirements};
use queue::Queue;
use room::FixedRoom;
use topology::{DomainId, GroupId, GroupKind, Topology};

use super::SchedulingInput;
use super::cluster::{InstanceType, NodePoolView};
use super::pod::{CsiVolume, HostPort, Pod, host_port_conflict, volume_limit_exceeded};
use super::policy::MinValuesPolicy;
use super::requirements::{Requirement, Requirements, ValueSet};
use super::resources::{ResourceLimits, Resources};
use super::result::{ChosenOffering, LimitReached, NewClaim, SchedulingResult, Target};
use super::taints::{Taint, first_untolerated};
use crate::api::labels::{CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, NODEPOOL, ZONE};
// Labels every node carries whether or not a pool constrains them (Karpenter's `WellKnownLabels`).
use capstan_model::labels::WELL_KNOWN;

pub(super) fn solve(input: &SchedulingInput) -> SchedulingResult {
    Solver::new(input).run()
}

/// [`solve`] without the bin index: every pod scans existing capacity and every open claim in
/// order, the way the solver worked before the index. Tests compare the two, and check on every
/// step that the index keeps each bin the scan would try.
#[cfg(test)]
pub(super) fn solve_by_scan(input: &SchedulingInput) -> SchedulingResult {
    let mut solver = Solver::new(input);
    solver.scan = true;
    solver.run()
}

/// What a bin is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BinKind {
    /// `input.existing_nodes[i]`.
    Node(usize),
    /// `input.inflight_claims[i]`.
    Claim(usize),
    /// A NodeClaim this run opens from `pools[pool]`.
    New { pool: usize },
}

#[derive(Debug)]
enum Capacity {
    /// Existing capacity: what it can allocate.
    Fixed(Resources),
    /// A new NodeClaim: the instance types still possible and their per-resource maximum, and
    /// in a pool with limits the type whose share of them it holds ([`Pool::room`]).
    Types {
        mask: BitSet,
        max_alloc: Resources,
        floor: Option<usize>,
    },
}

#[derive(Debug)]
struct Bin<'a> {
    kind: BinKind,
    requirements: Requirements,
    taints: &'a [Taint],
    /// Everything placed on it: used + pending DaemonSets + pods (new claims: pods only; their
    /// DaemonSet overhead is taken off each instance type's allocatable instead).
    requests: Resources,
    capacity: Capacity,
    pods: Vec<usize>,
    /// Whether well-known labels the bin leaves undefined may be required (new claims only: an
    /// existing node's labels are all there is).
    open_labels: bool,
    /// The bin's hostname domain, when a group uses hostnames.
    host_domain: Option<DomainId>,
    /// Per topology key, the domains `requirements` allow (filled lazily, cleared when the
    /// requirements change).
    key_domains: Vec<KeyDomains>,
    /// Host ports bound by the pods on it (running and placed).
    host_ports: Vec<HostPort>,
    /// Existing nodes whose CSINode limits attachments: the limits per driver, and the volumes
    /// of the pods on it (running and placed). New claims and claims in flight have no known
    /// limit, as in Karpenter.
    volume_limits: Option<&'a BTreeMap<String, i64>>,
    volumes: Vec<CsiVolume>,
}

/// The domains a bin's requirements allow for one topology key.
#[derive(Clone, Debug)]
enum KeyDomains {
    /// Not worked out yet.
    Unknown,
    /// No usable list: no requirement, a complement, or a value not registered as a domain.
    Unlisted,
    /// Exactly these registered domains.
    Ids(Vec<DomainId>),
}

struct Pool<'a> {
    view: &'a NodePoolView,
    /// Pool requirements, template labels and `karpenter.sh/nodepool In [name]`.
    template: Requirements,
    catalog: Catalog,
    /// What the pool's limits leave once every claim this run opened holds its *floor*: the
    /// type among its options that takes the least of the limits. `None` when unlimited. A
    /// claim's options are cut to types no larger than its floor when it is finalized, so the
    /// claims' worst cases sum to at most what the limits left, and a claim in flight holds no
    /// more than the smallest node its pods fit on.
    room: Option<ResourceLimits>,
}

/// A verdict on a bin from its hostname's count in one group.
#[derive(Clone, Copy, Debug)]
enum HostFilter {
    /// Ruled out when the count exceeds the limit.
    AtMost(GroupId, u32),
    /// Ruled out when the count is zero.
    Populated(GroupId),
    /// Always ruled out (a spread whose skew the pod alone exceeds).
    Never,
}

/// Buffers reused across attempts.
#[derive(Default)]
struct Scratch {
    domains: Vec<DomainId>,
    /// `(topology key, allowed domains)`; the first `narrowed_len` entries are live.
    narrowed: Vec<(usize, Vec<DomainId>)>,
    narrowed_len: usize,
    mask: BitSet,
    values: BitSet,
    /// Tracked topology keys whose requirement a commit changes.
    relisted: Vec<usize>,
}

struct Solver<'a> {
    input: &'a SchedulingInput,
    well_known: FastSet<String>,
    pools: Vec<Pool<'a>>,
    prefer_no_schedule_exists: bool,
    topology: Topology,
    hostname_key: Option<usize>,
    pods: Vec<PodState>,
    bins: Vec<Bin<'a>>,
    /// `bins[..fixed]` are existing nodes then in-flight claims, in the order they are tried.
    fixed: usize,
    /// New claims by pod count, and which bins a pod's topology rules out.
    index: BinIndex,
    /// Which fixed bins may still have room for a pod's requests.
    fixed_room: FixedRoom,
    /// Buffer for [`Topology::take_occupied`].
    occupied: Vec<(GroupId, DomainId)>,
    opened: usize,
    placements: Vec<(usize, Target)>,
    scratch: Scratch,
    host_filters: Vec<HostFilter>,
    /// Pod affinity on a non-hostname key: `(topology key, populated domains)`. A bin whose
    /// listed domains for the key miss all of them fails that affinity.
    domain_filters: Vec<(usize, Vec<DomainId>)>,
    /// Per pod, the `(pool, resource)` limits that refused it a new claim on its last attempt.
    limit_hits: Vec<Vec<(usize, String)>>,
    /// A pool's limits changed which types it can still launch: the domains spread groups
    /// reach are worked out again before the next pod ([`Solver::register_reachable`]).
    reach_stale: bool,
    /// Test only: place pods by scanning every bin instead of through the index.
    #[cfg(test)]
    scan: bool,
}

/// `Err(Some(reason))` when asked for a reason, `Err(None)` otherwise.
macro_rules! bail {
    ($want:expr, $($arg:tt)*) => {
        return Err(if $want { Some(format!($($arg)*)) } else { None })
    };
}

impl<'a> Solver<'a> {
    fn new(input: &'a SchedulingInput) -> Self {
        let mut well_known: FastSet<String> = WELL_KNOWN.iter().map(|s| (*s).to_owned()).collect();
        well_known.extend(input.options.well_known_labels.iter().cloned());
        for pool in &input.node_pools {
            for it in pool.instance_types.iter() {
                for r in it.requirements.iter() {
                    if !well_known.contains(r.key()) {
                        well_known.insert(r.key().to_owned());
                    }
                }
            }
        }
        let is_well_known = |k: &str| well_known.contains(k);

        let daemonsets: Vec<(&Pod, Requirements)> = input
            .daemonset_pods
            .iter()
            .map(|p| (p, node_requirements(p, 0, None)))
            .collect();

        let mut order: Vec<&NodePoolView> = input.node_pools.iter().collect();
        order.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| a.name.cmp(&b.name)));
        let pools: Vec<Pool<'a>> = order
            .into_iter()
            .map(|view| {
                let mut template = view.requirements.clone();
                for (k, v) in &view.labels {
                    template.add(Requirement::in_(k.as_str(), [v.as_str()]));
                }
                template.add(Requirement::in_(NODEPOOL, [view.name.as_str()]));
                let mut catalog = Catalog::build(view, &template, &daemonsets, &is_well_known);
                catalog.apply_limits(view, view.remaining.as_ref());
                Pool {
                    view,
                    template,
                    catalog,
                    room: view.remaining.clone(),
                }
            })
            .collect();
        let prefer_no_schedule_exists = pools.iter().any(|p| {
            p.view
                .taints
                .iter()
                .any(|t| t.effect == super::taints::TaintEffect::PreferNoSchedule)
        });

        // Groups: every pending pod's own, and the inverse anti-affinity of running pods.
        let mut topology = Topology::default();
        let mut pods: Vec<PodState> = input
            .pods
            .iter()
            .map(|p| PodState::new(p, &mut topology))
            .collect();
        let running = input
            .existing_nodes
            .iter()
            .flat_map(|n| n.pods.iter())
            .chain(input.inflight_claims.iter().flat_map(|c| c.pods.iter()));
        for pod in running.clone() {
            for spec in inverse_specs(pod) {
                topology.group_for(spec);
            }
        }
        // Which groups count or repel a pod depends on its namespace and labels only: pods
        // stamped from one template share the answer.
        let mut by_labels: FastMap<(&str, &BTreeMap<String, String>), usize> = FastMap::default();
        for (p, pod) in input.pods.iter().enumerate() {
            match by_labels.get(&(pod.namespace.as_str(), &pod.labels)) {
                Some(&q) => {
                    let (selected_by, repelled_by) =
                        (pods[q].selected_by.clone(), pods[q].repelled_by.clone());
                    pods[p].selected_by = selected_by;
                    pods[p].repelled_by = repelled_by;
                }
                None => {
                    pods[p].index_selectors(pod, &topology);
                    by_labels.insert((pod.namespace.as_str(), &pod.labels), p);
                }
            }
        }

        let mut solver = Solver {
            input,
            well_known,
            pools,
            prefer_no_schedule_exists,
            hostname_key: topology.hostname_key(),
            topology,
            pods,
            bins: Vec::new(),
            fixed: 0,
            index: BinIndex::default(),
            fixed_room: FixedRoom::default(),
            occupied: Vec::new(),
            opened: 0,
            placements: Vec::new(),
            scratch: Scratch::default(),
            host_filters: Vec::new(),
            domain_filters: Vec::new(),
            limit_hits: vec![Vec::new(); input.pods.len()],
            reach_stale: false,
            #[cfg(test)]
            scan: false,
        };
        solver.register_domains();
        solver.register_reachable();
        let topology = &solver.topology;
        solver.index = BinIndex::new(
            topology.group_count(),
            (0..topology.group_count()).filter(|&g| topology.is_hostname_group(g)),
            topology.key_count(),
            (0..topology.key_count()).filter(|&k| Some(k) != solver.hostname_key),
        );
        solver.add_fixed_bins(&daemonsets);
        solver
    }

    /// Registers the domain universe of every topology key in use: what pools and their instance
    /// types and offerings allow, and what existing capacity carries.
    fn register_domains(&mut self) {
        let keys: Vec<String> = self.topology.key_names().map(str::to_owned).collect();
        let mut universe: Vec<(String, Vec<String>)> = Vec::with_capacity(keys.len());
        for key in keys {
            let mut values: BTreeSet<&str> = BTreeSet::new();
            for pool in &self.pools {
                let allowed = pool.template.set_of(&key);
                if let Some(set) = allowed.filter(|s| !s.is_complement()) {
                    values.extend(set.values().iter().map(String::as_str));
                }
                for &i in &pool.catalog.types {
                    values.extend(type_domains(pool, &pool.view.instance_types[i], &key));
                }
            }
            for node in &self.input.existing_nodes {
                values.extend(node_label(&node.labels, &node.name, &key));
            }
            for claim in &self.input.inflight_claims {
                let value = claim
                    .requirements
                    .set_of(&key)
                    .and_then(ValueSet::single_value)
                    .or_else(|| (key == HOSTNAME).then_some(claim.name.as_str()));
                values.extend(value);
            }
            let values = values.into_iter().map(str::to_owned).collect();
            universe.push((key, values));
        }
        for (key, values) in universe {
            for v in values {
                self.topology.register(&key, &v);
            }
        }
    }

    /// Spread groups on a key other than the hostname take part only in the domains where a node
    /// they count can be: those of the existing nodes and in-flight claims they admit, and those a
    /// pool could still *launch* a node they admit in. As in kube-scheduler, a zone only another
    /// pool's nodes reach (say, amd64 nodes for arm64 pods, or, under `nodeTaintsPolicy: Honor`,
    /// nodes behind an untolerated taint) does not hold the skew down at zero; and neither does a
    /// zone only a pool reaches that can launch nothing there for these pods: its limits leave
    /// room for no instance type (or none that holds the smallest of the pods), or none of its
    /// types fits them at all. Pools that are not Ready or static never reach the solver. When a
    /// pool's limits run out within the run, this is worked out again, the claims the run opened
    /// counting as claims in flight.
    fn register_reachable(&mut self) {
        let input = self.input;
        let well_known = |k: &str| self.well_known.contains(k);
        // Per group, the least of its pods' requests, resource by resource: a type that cannot
        // hold that holds none of them.
        let mut least: Vec<Option<Resources>> = vec![None; self.topology.group_count()];
        for state in &self.pods {
            for &g in &state.owned {
                match &mut least[g] {
                    Some(r) => r.min_assign(&state.requests),
                    slot @ None => *slot = Some(state.requests.clone()),
                }
            }
        }
        let mut found: Vec<(GroupId, BTreeSet<&str>)> = Vec::new();
        for (g, least) in least.iter().enumerate() {
            let spec = self.topology.spec(g);
            let key = self.topology.group_key(g);
            if spec.kind != GroupKind::Spread || spec.inverse || Some(key) == self.hostname_key {
                continue;
            }
            let key_name = self.topology.key_name(key);
            let unfiltered = [Requirements::new()];
            let terms = if spec.node_filter.is_empty() {
                &unfiltered[..]
            } else {
                &spec.node_filter[..]
            };
            let term_allows =
                |term: &Requirements, v: &str| term.set_of(key_name).is_none_or(|s| s.contains(v));
            let mut values: BTreeSet<&str> = BTreeSet::new();
            for pool in &self.pools {
                if !spec.admits_taints(&pool.view.taints) {
                    continue;
                }
                let allowed = pool.template.set_of(key_name);
                for term in terms {
                    if pool.template.compatible(term, well_known).is_err() {
                        continue;
                    }
                    let mut any_type = false;
                    for (t, &i) in pool.catalog.types.iter().enumerate() {
                        let it = &pool.view.instance_types[i];
                        let launchable = pool.catalog.within_limits.contains(t)
                            && least
                                .as_ref()
                                .is_none_or(|r| r.fits_in(&pool.catalog.alloc[t]));
                        if !launchable || it.requirements.intersects(term).is_err() {
                            continue;
                        }
                        any_type = true;
                        values.extend(
                            type_domains(pool, it, key_name).filter(|v| term_allows(term, v)),
                        );
                    }
                    // The pool's own values for the key (a label it sets), when it can launch
                    // anything the term admits.
                    if let Some(set) = allowed.filter(|s| any_type && !s.is_complement()) {
                        values.extend(
                            set.values()
                                .iter()
                                .map(String::as_str)
                                .filter(|v| term_allows(term, v)),
                        );
                    }
                }
            }
            let strict = |_: &str| false;
            for node in &input.existing_nodes {
                let labels = Requirements::from_labels(
                    node.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                );
                if spec.admits_taints(&node.taints)
                    && terms.iter().any(|t| labels.compatible(t, strict).is_ok())
                {
                    values.extend(node_label(&node.labels, &node.name, key_name));
                }
            }
            // Claims in flight, and the claims this run opened so far (none on the first call).
            let claims = input
                .inflight_claims
                .iter()
                .map(|c| (&c.requirements, &c.taints[..]))
                .chain(
                    self.bins[self.fixed..]
                        .iter()
                        .map(|b| (&b.requirements, b.taints)),
                );
            for (requirements, taints) in claims {
                if spec.admits_taints(taints)
                    && terms
                        .iter()
                        .any(|t| requirements.compatible(t, well_known).is_ok())
                {
                    values.extend(
                        requirements
                            .set_of(key_name)
                            .and_then(ValueSet::single_value),
                    );
                }
            }
            found.push((g, values));
        }
        for (g, values) in found {
            self.topology.set_reachable(g, values.into_iter());
        }
        self.reach_stale = false;
    }

    /// Existing nodes (initialized first, then by name) and in-flight claims (by name), with the
    /// topology counts of the pods already on them.
    fn add_fixed_bins(&mut self, daemonsets: &[(&Pod, Requirements)]) {
        let input = self.input;
        let mut nodes: Vec<usize> = (0..input.existing_nodes.len()).collect();
        nodes.sort_by(|&a, &b| {
            let (a, b) = (&input.existing_nodes[a], &input.existing_nodes[b]);
            b.initialized
                .cmp(&a.initialized)
                .then_with(|| a.name.cmp(&b.name))
        });
        let mut claims: Vec<usize> = (0..input.inflight_claims.len()).collect();
        claims.sort_by(|&a, &b| {
            input.inflight_claims[a]
                .name
                .cmp(&input.inflight_claims[b].name)
        });

        for i in nodes {
            let node = &input.existing_nodes[i];
            let mut requirements = Requirements::from_labels(
                node.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            );
            if !requirements.has(HOSTNAME) {
                requirements.add(Requirement::in_(HOSTNAME, [node.name.as_str()]));
            }
            self.push_fixed(
                BinKind::Node(i),
                requirements,
                &node.taints,
                node.used.clone(),
                &node.allocatable,
                &node.pods,
                Some(&node.volume_limits).filter(|l| !l.is_empty()),
            );
        }
        for i in claims {
            let claim = &input.inflight_claims[i];
            let mut requirements = claim.requirements.clone();
            if !requirements.has(HOSTNAME) {
                requirements.add(Requirement::in_(HOSTNAME, [claim.name.as_str()]));
            }
            let mut requests = claim.used.clone();
            for (ds, reqs) in daemonsets {
                if first_untolerated(&claim.taints, &ds.tolerations).is_none()
                    && requirements
                        .compatible(reqs, |k| self.well_known.contains(k))
                        .is_ok()
                {
                    requests.add(&ds.requests);
                    requests.pods += 1;
                }
            }
            self.push_fixed(
                BinKind::Claim(i),
                requirements,
                &claim.taints,
                requests,
                &claim.allocatable,
                &claim.pods,
                None,
            );
        }
        self.fixed = self.bins.len();
        // Fixed bins have fixed allocatable; anything else would be filed as room for all.
        self.fixed_room = FixedRoom::new(self.bins.iter().map(|bin| match &bin.capacity {
            Capacity::Fixed(alloc) => Some((&bin.requests, alloc)),
            Capacity::Types { .. } => None,
        }));
    }

    #[allow(clippy::too_many_arguments)]
    fn push_fixed(
        &mut self,
        kind: BinKind,
        requirements: Requirements,
        taints: &'a [Taint],
        requests: Resources,
        allocatable: &Resources,
        running: &[Arc<Pod>],
        volume_limits: Option<&'a BTreeMap<String, i64>>,
    ) {
        let host_domain = self.hostname_domain(&requirements);
        // Count the running pods in every group that selects them, and where the ones with
        // required anti-affinity are.
        let strict = |_: &str| false;
        for pod in running {
            for g in 0..self.topology.group_count() {
                let spec = self.topology.spec(g);
                if spec.inverse || !self.topology.selects(g, pod) {
                    continue;
                }
                if !self.topology.node_counts(g, &requirements, taints, &strict) {
                    continue;
                }
                let key = self
                    .topology
                    .key_name(self.topology.group_key(g))
                    .to_owned();
                self.topology
                    .record_set(g, requirements.set_of(&key), false);
            }
            for spec in inverse_specs(pod) {
                if let Some(g) = self.topology.existing_group(&spec) {
                    self.topology
                        .record_set(g, requirements.set_of(&spec.key), true);
                }
            }
        }
        self.bins.push(Bin {
            kind,
            requirements,
            taints,
            requests,
            capacity: Capacity::Fixed(allocatable.clone()),
            pods: Vec::new(),
            open_labels: false,
            host_domain,
            key_domains: Vec::new(),
            host_ports: running
                .iter()
                .flat_map(|pod| pod.host_ports.iter().cloned())
                .collect(),
            volume_limits,
            volumes: match volume_limits {
                Some(_) => running
                    .iter()
                    .flat_map(|pod| pod.csi_volumes.iter().cloned())
                    .collect(),
                None => Vec::new(),
            },
        });
        self.index_last_bin(false);
    }

    /// Adds the last bin to the index, after catching the index up with hostname counts.
    fn index_last_bin(&mut self, new_claim: bool) {
        self.sync_occupied();
        let b = self.bins.len() - 1;
        let host = self.bins[b].host_domain;
        let topology = &self.topology;
        let occupied: Vec<GroupId> = match host {
            Some(d) => self
                .index
                .occupancy_groups()
                .filter(|&g| topology.count(g, d) > 0)
                .collect(),
            None => Vec::new(),
        };
        let listed = self
            .index
            .tracked_keys()
            .map(|k| (k, self.listed(b, k)))
            .collect();
        self.index
            .add_bin(b, host, occupied.into_iter(), listed, new_claim);
    }

    /// Tells the index which hostnames became occupied in which groups.
    fn sync_occupied(&mut self) {
        self.topology.take_occupied(&mut self.occupied);
        for &(g, d) in &self.occupied {
            self.index.occupy(g, d);
        }
    }

    /// The domains bin `b`'s requirements list for topology key `key`.
    fn listed(&self, b: usize, key: usize) -> Listed {
        let topology = &self.topology;
        match self.bins[b].requirements.set_of(topology.key_name(key)) {
            Some(set) if !set.is_complement() => set
                .values()
                .iter()
                .map(|v| topology.domain(key, v))
                .collect::<Option<Vec<DomainId>>>()
                .map_or(Listed::Unlisted, Listed::Ids),
            _ => Listed::Unlisted,
        }
    }

    fn hostname_domain(&self, requirements: &Requirements) -> Option<DomainId> {
        let key = self.hostname_key?;
        let host = requirements.set_of(HOSTNAME)?.single_value()?;
        self.topology.domain(key, host)
    }

    fn run(mut self) -> SchedulingResult {
        let input = self.input;
        let mut order: Vec<usize> = (0..input.pods.len()).collect();
        // Real pods before CapacityBuffer pods, then largest first: CPU, then memory,
        // descending; input order breaks ties.
        order.sort_by(|&a, &b| {
            let (ra, rb) = (&self.pods[a].requests, &self.pods[b].requests);
            input.pods[a]
                .buffer
                .cmp(&input.pods[b].buffer)
                .then(rb.cpu_millis.cmp(&ra.cpu_millis))
                .then(rb.memory.cmp(&ra.memory))
        });
        let mut queue = Queue::new(order, input.pods.len());
        let mut errors: Vec<Option<String>> = vec![None; input.pods.len()];
        while let Some(p) = queue.pop() {
            match self.add(p) {
                Ok(()) => errors[p] = None,
                Err(reason) => {
                    errors[p] = Some(reason);
                    let relaxed = self.pods[p].relax(
                        &input.pods[p],
                        &mut self.topology,
                        self.prefer_no_schedule_exists,
                    );
                    if let Some(what) = relaxed {
                        tracing::debug!(pod = %input.pods[p].key(), relaxed = what, "relaxing a preference of a pod that did not schedule");
                    }
                    queue.push(p, relaxed.is_some());
                }
            }
        }

        let mut unschedulable: Vec<(usize, String)> = queue
            .remaining()
            .map(|p| {
                let reason = errors[p]
                    .take()
                    .unwrap_or_else(|| "not scheduled".to_owned());
                (p, reason)
            })
            .collect();
        let mut new_claims = Vec::new();
        let mut slack: Vec<Option<ResourceLimits>> =
            self.pools.iter().map(|p| p.room.clone()).collect();
        for b in self.fixed..self.bins.len() {
            match self.finalize(b, &mut slack) {
                Ok(claim) => new_claims.push(claim),
                Err(reason) => {
                    unschedulable.extend(self.bins[b].pods.iter().map(|&p| (p, reason.clone())))
                }
            }
        }
        unschedulable.sort_by_key(|(p, _)| *p);
        let limits_reached = self.limits_reached(&unschedulable);
        tracing::debug!(
            pods = input.pods.len(),
            new_claims = new_claims.len(),
            existing = self.placements.len(),
            unschedulable = unschedulable.len(),
            "scheduling simulation finished"
        );
        SchedulingResult {
            new_claims,
            existing_placements: self.placements,
            unschedulable,
            limits_reached,
        }
    }

    /// The pool limits that left pods of `unschedulable` without a claim, pool by pool.
    fn limits_reached(&self, unschedulable: &[(usize, String)]) -> Vec<LimitReached> {
        let mut by_limit: BTreeMap<(usize, &str), Vec<usize>> = BTreeMap::new();
        for &(p, _) in unschedulable {
            for (pool, resource) in self.limit_hits.get(p).into_iter().flatten() {
                by_limit.entry((*pool, resource)).or_default().push(p);
            }
        }
        by_limit
            .into_iter()
            .map(|((pool, resource), pods)| {
                let view = self.pools[pool].view;
                let amount = |l: Option<&ResourceLimits>| {
                    l.and_then(|l| l.0.get(resource)).copied().unwrap_or(0)
                };
                LimitReached {
                    node_pool: view.name.clone(),
                    resource: resource.to_owned(),
                    limit: amount(view.limits.as_ref()),
                    left: amount(self.pools[pool].room.as_ref()),
                    pods,
                }
            })
            .collect()
    }

    /// The hostname rules of pod `p` that can rule a bin out from its hostname's counts alone,
    /// into `self.host_filters`: the same verdicts [`Topology::allowed_domains`] reaches, without
    /// the rest of an attempt.
    fn collect_host_filters(&mut self, p: usize) {
        self.host_filters.clear();
        self.domain_filters.clear();
        self.index.begin(self.bins.len());
        let st = &self.pods[p];
        for &g in st.owned.iter().chain(&st.repelled_by) {
            let spec = self.topology.spec(g);
            let selects = spec.inverse || st.selected_by.binary_search(&g).is_ok();
            let key = self.topology.group_key(g);
            // Affinity fails on a bin without a populated domain unless the pod may bootstrap.
            let bootstraps = spec.kind == GroupKind::Affinity
                && selects
                && !self
                    .topology
                    .any_populated(g, st.strict.set_of(self.topology.key_name(key)));
            if Some(key) != self.hostname_key {
                if spec.kind == GroupKind::Affinity && !bootstraps {
                    let mut populated = Vec::new();
                    self.topology.populated_domains(g, &mut populated);
                    self.index.restrict_domains(key, &populated);
                    self.domain_filters.push((key, populated));
                }
                continue;
            }
            match spec.kind {
                GroupKind::AntiAffinity => {
                    self.index.restrict_host(g, false);
                    self.host_filters.push(HostFilter::AtMost(g, 0));
                }
                GroupKind::Spread => {
                    let limit = i64::from(spec.max_skew) - i64::from(selects);
                    match u32::try_from(limit) {
                        Ok(0) => {
                            self.index.restrict_host(g, false);
                            self.host_filters.push(HostFilter::AtMost(g, 0));
                        }
                        Ok(limit) => self.host_filters.push(HostFilter::AtMost(g, limit)),
                        Err(_) => self.host_filters.push(HostFilter::Never),
                    }
                }
                GroupKind::Affinity if !bootstraps => {
                    self.index.restrict_host(g, true);
                    self.host_filters.push(HostFilter::Populated(g));
                }
                GroupKind::Affinity => {}
            }
        }
    }

    /// Whether the host filters rule bin `b` out.
    #[inline]
    fn host_filtered(&self, b: usize) -> bool {
        let Some(d) = self.bins[b].host_domain else {
            return false;
        };
        self.host_filters.iter().any(|f| match *f {
            HostFilter::AtMost(g, limit) => self.topology.count(g, d) > limit,
            HostFilter::Populated(g) => self.topology.count(g, d) == 0,
            HostFilter::Never => true,
        })
    }

    /// Whether the domain filters rule bin `b` out: its listed domains for a filter's key hold
    /// no populated one, the verdict [`Topology::allowed_domains`] would reach.
    fn domain_filtered(&mut self, b: usize) -> bool {
        for i in 0..self.domain_filters.len() {
            let key = self.domain_filters[i].0;
            self.cache_key_domains(b, key);
            let Some(KeyDomains::Ids(ids)) = self.bins[b].key_domains.get(key) else {
                continue;
            };
            let populated = &self.domain_filters[i].1;
            if !ids.iter().any(|d| populated.binary_search(d).is_ok()) {
                return true;
            }
        }
        false
    }

    /// Fills `bins[b].key_domains[key]` if it is not known yet.
    fn cache_key_domains(&mut self, b: usize, key: usize) {
        let topology = &self.topology;
        let bin = &mut self.bins[b];
        if bin.key_domains.len() < topology.key_count() {
            bin.key_domains
                .resize(topology.key_count(), KeyDomains::Unknown);
        }
        if !matches!(bin.key_domains.get(key), Some(KeyDomains::Unknown)) {
            return;
        }
        let domains = match bin.requirements.set_of(topology.key_name(key)) {
            Some(set) if !set.is_complement() => set
                .values()
                .iter()
                .map(|v| topology.domain(key, v))
                .collect::<Option<Vec<DomainId>>>()
                .map_or(KeyDomains::Unlisted, KeyDomains::Ids),
            _ => KeyDomains::Unlisted,
        };
        if let Some(slot) = bin.key_domains.get_mut(key) {
            *slot = domains;
        }
    }

    /// Places pod `p`: existing capacity in order, then the claims this run opened (fewest pods
    /// first, then oldest), then a new claim. Only the bins the index keeps are tried.
    fn add(&mut self, p: usize) -> Result<(), String> {
        if self.reach_stale {
            self.register_reachable();
        }
        self.collect_host_filters(p);
        #[cfg(test)]
        if self.scan {
            return self.add_by_scan(p);
        }
        let words = self.index.candidate_words();
        let fixed_words = self.fixed.div_ceil(64);
        let classes = FixedRoom::classes(&self.pods[p].requests);
        for w in words.start..words.end.min(fixed_words) {
            let below_fixed = match self.fixed - w * 64 {
                n if n >= 64 => !0,
                n => (1u64 << n) - 1,
            };
            let mut word =
                self.index.candidate_word(w) & below_fixed & self.fixed_room.word(classes, w);
            while word != 0 {
                let b = w * 64 + word.trailing_zeros() as usize;
                word &= word - 1;
                if self.try_bin(b, p) {
                    return Ok(());
                }
            }
        }
        for k in 1..self.index.buckets() {
            if self.index.bucket_is_empty(k) {
                continue;
            }
            for w in words.clone() {
                let mut word = self.index.bucket_word(k, w) & self.index.candidate_word(w);
                while word != 0 {
                    let b = w * 64 + word.trailing_zeros() as usize;
                    word &= word - 1;
                    if self.try_bin(b, p) {
                        return Ok(());
                    }
                }
            }
        }
        self.open_claims(p)
    }

    /// [`Solver::add`] by scanning every bin in order, checking that the index keeps every bin
    /// the filters pass and buckets every open claim by its pod count.
    #[cfg(test)]
    fn add_by_scan(&mut self, p: usize) -> Result<(), String> {
        let mut order: Vec<usize> = (self.fixed..self.bins.len()).collect();
        order.sort_by_key(|&b| (self.bins[b].pods.len(), b));
        for b in (0..self.fixed).chain(order) {
            if let BinKind::New { .. } = self.bins[b].kind {
                let pods = self.bins[b].pods.len();
                assert!(
                    self.index.bucket_contains(pods, b),
                    "bin {b} not in bucket {pods}"
                );
            }
            if self.host_filtered(b) || self.domain_filtered(b) {
                continue;
            }
            assert!(
                self.index.is_candidate(b),
                "the index dropped bin {b} for pod {p}"
            );
            if self.try_bin(b, p) {
                return Ok(());
            }
        }
        self.open_claims(p)
    }

    /// Tries pod `p` on bin `b` unless a host or domain filter rules it out.
    fn try_bin(&mut self, b: usize, p: usize) -> bool {
        if self.host_filtered(b) || self.domain_filtered(b) || self.try_add(b, p, false).is_err() {
            return false;
        }
        if let Some(target) = self.target(b) {
            self.placements.push((p, target));
        }
        true
    }

    /// Opens a new claim for pod `p` from the first pool that can take it.
    fn open_claims(&mut self, p: usize) -> Result<(), String> {
        if let Some(hits) = self.limit_hits.get_mut(p) {
            hits.clear();
        }
        let mut reasons = Vec::new();
        for pool in 0..self.pools.len() {
            match self.open_claim(pool, p) {
                Ok(()) => return Ok(()),
                Err(reason) => reasons.push(reason),
            }
        }
        if reasons.is_empty() {
            reasons.push("no nodepool can launch capacity".to_owned());
        }
        Err(reasons.join("; "))
    }

    /// What existing capacity bin `b` is (`None` for new claims, which are reported as claims).
    fn target(&self, b: usize) -> Option<Target> {
        match self.bins[b].kind {
            BinKind::Node(i) => Some(Target::Node(self.input.existing_nodes[i].name.clone())),
            BinKind::Claim(i) => Some(Target::Claim(self.input.inflight_claims[i].name.clone())),
            BinKind::New { .. } => None,
        }
    }

    /// Opens a claim from `pools[pool]` for pod `p`, or says why the pool cannot take it.
    fn open_claim(&mut self, pool: usize, p: usize) -> Result<(), String> {
        let input = self.input;
        let pod = &input.pods[p];
        let ps = &self.pools[pool];
        let name = &ps.view.name;
        if let Some(taint) = self.pods[p].untolerated(pod, &ps.view.taints) {
            return Err(format!(
                "incompatible with nodepool {name}: untolerated taint {taint}"
            ));
        }
        if ps.catalog.len() == 0 {
            return Err(format!(
                "nodepool {name} has no instance type compatible with its requirements and an available offering"
            ));
        }
        let mut mask = ps.catalog.all.clone();
        mask.intersect_with(&ps.catalog.within_limits);
        if mask.is_empty() {
            return Err(self.limit_refusal(pool, p, 0));
        }
        let max_alloc = ps.catalog.restrict_to_fit(&mut mask, &Resources::default());
        let hostname = format!("hostname-placeholder-{:04}", self.opened + 1);
        let mut requirements = ps.template.clone();
        requirements.add(Requirement::in_(HOSTNAME, [hostname.as_str()]));
        let host_domain = self.topology.register(HOSTNAME, &hostname);
        self.bins.push(Bin {
            kind: BinKind::New { pool },
            requirements,
            taints: &self.pools[pool].view.taints,
            requests: Resources::default(),
            capacity: Capacity::Types {
                mask,
                max_alloc,
                floor: None,
            },
            pods: Vec::new(),
            open_labels: true,
            host_domain,
            key_domains: Vec::new(),
            host_ports: Vec::new(),
            volume_limits: None,
            volumes: Vec::new(),
        });
        self.index_last_bin(true);
        let b = self.bins.len() - 1;
        match self.try_add(b, p, true) {
            Ok(()) => {
                self.opened += 1;
                Ok(())
            }
            Err(reason) => {
                self.index.remove_last_bin(b, host_domain);
                self.bins.pop();
                // A pod that some type of the pool fits, but none the limits leave room for, is
                // refused by the limits.
                let ps = &self.pools[pool];
                if ps.room.is_some() {
                    let mut fits = ps.catalog.all.clone();
                    ps.catalog
                        .restrict_to_fit(&mut fits, &self.pods[p].requests);
                    if let Some(t) = fits.iter().next()
                        && !fits.intersects(&ps.catalog.within_limits)
                    {
                        return Err(self.limit_refusal(pool, p, t));
                    }
                }
                let pool_name = &self.pools[pool].view.name;
                let reason = reason.unwrap_or_default();
                // Instance-type failures already say which pool they are about.
                if reason.contains(&format!("nodepool {pool_name}")) {
                    Err(reason)
                } else {
                    Err(format!("incompatible with nodepool {pool_name}: {reason}"))
                }
            }
        }
    }

    /// "nodepool default limit cpu exceeded", for pod `p` that catalog type `t` of `pool` would
    /// fit but the pool's limits leave no room for; noted in [`Solver::limit_hits`].
    fn limit_refusal(&mut self, pool: usize, p: usize, t: usize) -> String {
        let ps = &self.pools[pool];
        let capacity = &ps.view.instance_types[ps.catalog.types[t]].capacity;
        let resource = ps
            .room
            .as_ref()
            .and_then(|r| r.exceeded_by(capacity))
            .unwrap_or("resource")
            .to_owned();
        let reason = format!("nodepool {} limit {resource} exceeded", ps.view.name);
        if let Some(hits) = self.limit_hits.get_mut(p)
            && !hits.contains(&(pool, resource.clone()))
        {
            hits.push((pool, resource));
        }
        reason
    }

    /// Tries pod `p` on bin `b`; on success the pod is placed and topology updated.
    fn try_add(&mut self, b: usize, p: usize, want: bool) -> Result<(), Option<String>> {
        let input = self.input;
        let pod = &input.pods[p];
        let st = &self.pods[p];
        let bin = &self.bins[b];

        // Taints.
        if let Some(taint) = st.untolerated(pod, bin.taints) {
            bail!(want, "untolerated taint {taint}");
        }
        if let Some(port) = host_port_conflict(&bin.host_ports, &pod.host_ports) {
            bail!(want, "host port {port} is already bound");
        }
        if let Some(limits) = bin.volume_limits
            && let Some((driver, limit)) =
                volume_limit_exceeded(limits, &bin.volumes, &pod.csi_volumes)
        {
            bail!(
                want,
                "the node attaches at most {limit} volume(s) of {driver}"
            );
        }

        // Resources, against the best case.
        match &bin.capacity {
            Capacity::Fixed(alloc) => {
                if !bin.requests.fits_with(&st.requests, alloc) {
                    bail!(want, "does not fit: allocatable {alloc}");
                }
            }
            Capacity::Types {
                max_alloc, mask, ..
            } => {
                if !bin.requests.fits_with(&st.requests, max_alloc) {
                    if let BinKind::New { pool } = bin.kind {
                        bail!(want, "{}", self.no_fit_reason(pool, mask, pod));
                    }
                    bail!(want, "does not fit");
                }
            }
        }

        // Node requirements.
        let mut merged: Vec<(&str, ValueSet)> = Vec::new();
        if !st.requirements.is_empty() {
            let open = bin.open_labels;
            let well_known = &self.well_known;
            if let Err(e) = bin
                .requirements
                .compatible(&st.requirements, |k| open && well_known.contains(k))
            {
                bail!(want, "{e}");
            }
            for r in st.requirements.iter() {
                let set = match bin.requirements.set_of(r.key()) {
                    Some(existing) => {
                        let narrowed = existing.intersection(r.set());
                        if narrowed == *existing {
                            continue;
                        }
                        narrowed
                    }
                    None => r.set().clone(),
                };
                merged.push((r.key(), set));
            }
        }
        let merged_set = |key: &str| merged.iter().find(|(k, _)| *k == key).map(|(_, s)| s);

        // Topology.
        let topology = &self.topology;
        let scratch = &mut self.scratch;
        scratch.narrowed_len = 0;
        if st.has_topology() {
            for &g in st.owned.iter().chain(&st.repelled_by) {
                let key = topology.group_key(g);
                let key_name = topology.key_name(key);
                let overridden = merged_set(key_name);
                let hint = if overridden.is_none() && Some(key) == self.hostname_key {
                    bin.host_domain
                } else {
                    None
                };
                let node_domains = match hint {
                    Some(_) => None,
                    None => overridden.or_else(|| bin.requirements.set_of(key_name)),
                };
                let selects = topology.spec(g).inverse || st.selected_by.binary_search(&g).is_ok();
                let pod_domains = st.strict.set_of(key_name);
                if !topology.allowed_domains(
                    g,
                    selects,
                    pod_domains,
                    node_domains,
                    hint,
                    &mut scratch.domains,
                ) {
                    bail!(want, "{}", topology_reason(topology, g));
                }
                let live = scratch.narrowed_len;
                if let Some((_, allowed)) =
                    scratch.narrowed[..live].iter_mut().find(|(k, _)| *k == key)
                {
                    allowed.retain(|d| scratch.domains.binary_search(d).is_ok());
                    if allowed.is_empty() {
                        bail!(want, "{}", topology_reason(topology, g));
                    }
                } else {
                    if scratch.narrowed.len() == live {
                        scratch.narrowed.push((key, Vec::new()));
                    }
                    let entry = &mut scratch.narrowed[live];
                    entry.0 = key;
                    entry.1.clear();
                    entry.1.extend_from_slice(&scratch.domains);
                    scratch.narrowed_len += 1;
                }
            }
        }

        let requests = bin.requests.plus(&st.requests);

        // Instance types of a new claim.
        let mut new_max_alloc = None;
        let mut new_floor = None;
        if let (Capacity::Types { mask, floor, .. }, BinKind::New { pool }) =
            (&bin.capacity, bin.kind)
        {
            let ps = &mut self.pools[pool];
            scratch.mask.copy_from(mask);
            let mut offerings_changed = false;
            for (key, set) in &merged {
                ps.catalog.restrict_to_set(&mut scratch.mask, key, set);
                offerings_changed |= ps.catalog.affects_offerings(key);
            }
            for (key, allowed) in &scratch.narrowed[..scratch.narrowed_len] {
                let key_name = topology.key_name(*key);
                if is_own_host(bin, self.hostname_key, *key, allowed)
                    || same_values(bin.requirements.set_of(key_name), topology, *key, allowed)
                {
                    continue;
                }
                let names = allowed.iter().map(|&d| topology.domain_name(*key, d));
                ps.catalog.restrict_to_values(
                    &mut scratch.mask,
                    key_name,
                    names,
                    &mut scratch.values,
                );
                offerings_changed |= ps.catalog.affects_offerings(key_name);
            }
            if scratch.mask.is_empty() {
                bail!(
                    want,
                    "no instance type of nodepool {} is compatible with {}",
                    ps.view.name,
                    describe_narrowing(
                        &merged,
                        topology,
                        &scratch.narrowed[..scratch.narrowed_len]
                    )
                );
            }
            if offerings_changed {
                let narrowed = &scratch.narrowed[..scratch.narrowed_len];
                let allows = |key: &str, value: &str| -> bool {
                    if let Some(k) = topology.key_index(key)
                        && let Some((_, allowed)) = narrowed.iter().find(|(nk, _)| *nk == k)
                    {
                        return topology
                            .domain(k, value)
                            .is_some_and(|d| allowed.binary_search(&d).is_ok());
                    }
                    merged_set(key)
                        .or_else(|| bin.requirements.set_of(key))
                        .is_none_or(|s| s.contains(value))
                };
                let pod_reqs = &st.requirements;
                let bin_reqs = &bin.requirements;
                ps.catalog.restrict_to_offerings(
                    &mut scratch.mask,
                    ps.view,
                    |z| allows(ZONE, z),
                    |c| allows(CAPACITY_TYPE, c),
                    |reqs| bin_reqs.intersects(reqs).is_ok() && pod_reqs.intersects(reqs).is_ok(),
                );
                if scratch.mask.is_empty() {
                    bail!(
                        want,
                        "no instance type of nodepool {} has an available offering the pod's constraints allow",
                        ps.view.name
                    );
                }
            }
            let before_fit = if want {
                Some(scratch.mask.clone())
            } else {
                None
            };
            let max_alloc = ps.catalog.restrict_to_fit(&mut scratch.mask, &requests);
            if scratch.mask.is_empty() {
                let candidates = before_fit.unwrap_or_default();
                bail!(want, "{}", self.no_fit_reason(pool, &candidates, pod));
            }
            for r in bin.requirements.iter() {
                if let Some(min) = r.min_values() {
                    let min = min as usize;
                    let have = ps.catalog.distinct_values(&scratch.mask, r.key(), min);
                    // BestEffort opens the claim anyway; its minValues is lowered at the end.
                    if have < min && self.input.options.min_values_policy == MinValuesPolicy::Strict
                    {
                        bail!(
                            want,
                            "minValues {min} for {} not met: only {have} value(s) remain",
                            r.key()
                        );
                    }
                }
            }
            // Limits: the claim's floor must stay among its types, or move to one that fits the
            // room the other claims leave.
            if let Some(room) = ps.room.as_ref()
                && floor.is_none_or(|f| !scratch.mask.contains(f))
            {
                let mut room = room.clone();
                if let Some(f) = *floor {
                    room.release(&ps.view.instance_types[ps.catalog.types[f]].capacity);
                }
                match ps.catalog.smallest_within(ps.view, &scratch.mask, &room) {
                    Some(t) => {
                        room.consume(&ps.view.instance_types[ps.catalog.types[t]].capacity);
                        new_floor = Some((t, room));
                    }
                    None => {
                        let any = scratch.mask.iter().next().unwrap_or_default();
                        let capacity = &ps.view.instance_types[ps.catalog.types[any]].capacity;
                        bail!(
                            want,
                            "nodepool {} limit {} exceeded",
                            ps.view.name,
                            room.exceeded_by(capacity).unwrap_or("resource")
                        );
                    }
                }
            }
            new_max_alloc = Some(max_alloc);
        }

        // Commit.
        let topology = &self.topology;
        let mut relisted = std::mem::take(&mut self.scratch.relisted);
        relisted.clear();
        relisted.extend(self.index.tracked_keys().filter(|&k| {
            let name = topology.key_name(k);
            merged.iter().any(|(m, _)| *m == name)
                || self.scratch.narrowed[..self.scratch.narrowed_len]
                    .iter()
                    .any(|(n, _)| *n == k)
        }));
        let merged: Vec<(String, ValueSet)> =
            merged.into_iter().map(|(k, s)| (k.to_owned(), s)).collect();
        let bin = &mut self.bins[b];
        bin.key_domains.clear();
        bin.requests = requests;
        for (key, set) in merged {
            bin.requirements.set(&key, set);
        }
        for (key, allowed) in &self.scratch.narrowed[..self.scratch.narrowed_len] {
            if is_own_host(bin, self.hostname_key, *key, allowed) {
                continue;
            }
            let key_name = self.topology.key_name(*key);
            if !same_values(
                bin.requirements.set_of(key_name),
                &self.topology,
                *key,
                allowed,
            ) {
                let set =
                    ValueSet::in_(allowed.iter().map(|&d| self.topology.domain_name(*key, d)));
                bin.requirements.set(key_name, set);
            }
        }
        if let (
            Capacity::Types {
                mask,
                max_alloc,
                floor,
            },
            Some(new_max),
        ) = (&mut bin.capacity, new_max_alloc)
        {
            mask.copy_from(&self.scratch.mask);
            *max_alloc = new_max;
            if let (Some((t, room)), BinKind::New { pool }) = (new_floor, bin.kind) {
                *floor = Some(t);
                let ps = &mut self.pools[pool];
                let before = ps.catalog.within_limits.clone();
                ps.catalog.apply_limits(ps.view, Some(&room));
                ps.room = Some(room);
                self.reach_stale |= ps.catalog.within_limits != before;
            }
        }
        bin.pods.push(p);
        bin.host_ports.extend(pod.host_ports.iter().cloned());
        if bin.volume_limits.is_some() {
            bin.volumes.extend(pod.csi_volumes.iter().cloned());
        }
        if let BinKind::New { .. } = bin.kind {
            self.index.grew(b, bin.pods.len());
        }
        for &key in &relisted {
            let listed = self.listed(b, key);
            self.index.update_listed(b, key, listed);
        }
        self.scratch.relisted = relisted;
        let bin = &self.bins[b];
        let st = &self.pods[p];
        let open = bin.open_labels;
        let well_known = &self.well_known;
        let allow = |k: &str| open && well_known.contains(k);
        for (&g, inverse) in st
            .selected_by
            .iter()
            .map(|g| (g, false))
            .chain(st.inverse_owned.iter().map(|g| (g, true)))
        {
            if !inverse
                && !self
                    .topology
                    .node_counts(g, &bin.requirements, bin.taints, &allow)
            {
                continue;
            }
            let key = self.topology.group_key(g);
            match bin.host_domain {
                Some(d) if Some(key) == self.hostname_key => self.topology.record(g, d),
                _ => {
                    let set = bin.requirements.set_of(self.topology.key_name(key));
                    self.topology.record_set(g, set, inverse);
                }
            }
        }
        self.sync_occupied();
        Ok(())
    }

    /// "no instance type satisfies cpu=64, memory=1Ti with nodepool default (largest: ...)".
    fn no_fit_reason(&self, pool: usize, candidates: &BitSet, pod: &Pod) -> String {
        let ps = &self.pools[pool];
        let largest = ps.catalog.largest(candidates).map_or_else(
            || "none".to_owned(),
            |t| {
                let it = &ps.view.instance_types[ps.catalog.types[t]];
                format!("{} with allocatable {}", it.name, ps.catalog.alloc[t])
            },
        );
        let daemon = ps
            .catalog
            .largest(candidates)
            .map(|t| &ps.catalog.daemon[t])
            .filter(|d| **d != Resources::default())
            .map(|d| format!(", daemonset overhead {d}"))
            .unwrap_or_default();
        format!(
            "no instance type satisfies {} with nodepool {} (largest: {largest}{daemon})",
            pod.requests, ps.view.name
        )
    }

    /// The NodeClaim for new bin `b`, or why it cannot be launched. In a pool with limits its
    /// types are cut to those no larger than its floor; when that leaves too few for a
    /// `minValues`, the pool's `slack` (what the limits leave once every claim holds its floor)
    /// pays for larger ones.
    fn finalize(&self, b: usize, slack: &mut [Option<ResourceLimits>]) -> Result<NewClaim, String> {
        const NO_OFFERING: &str = "no available offering is compatible with the pod's constraints";
        let bin = &self.bins[b];
        let (BinKind::New { pool }, Capacity::Types { mask, floor, .. }) =
            (bin.kind, &bin.capacity)
        else {
            return Err(NO_OFFERING.to_owned());
        };
        let ps = &self.pools[pool];
        let mut requirements = bin.requirements.clone();
        requirements.remove(HOSTNAME);
        let min_values_met = |mask: &BitSet| {
            requirements.iter().all(|r| {
                r.min_values().is_none_or(|min| {
                    let min = min as usize;
                    ps.catalog.distinct_values(mask, r.key(), min) >= min
                })
            })
        };
        let mut mask = mask.clone();
        if let (Some(room), Some(f), Some(slack)) = (&ps.room, *floor, slack.get_mut(pool)) {
            let mut tight = mask.clone();
            ps.catalog.restrict_to_floor(ps.view, &mut tight, f, room);
            if min_values_met(&tight) {
                mask = tight;
            } else {
                // Add the smallest of the types the slack pays for until minValues is met.
                let mut wide = slack.clone().unwrap_or_else(|| room.clone());
                wide.release(&ps.view.instance_types[ps.catalog.types[f]].capacity);
                let scale = ps.view.limits.as_ref().unwrap_or(room);
                let capacity = |t: usize| &ps.view.instance_types[ps.catalog.types[t]].capacity;
                let mut candidates: Vec<(f64, usize)> = mask
                    .iter()
                    .filter(|&t| !tight.contains(t) && wide.exceeded_by(capacity(t)).is_none())
                    .map(|t| (scale.share(capacity(t)), t))
                    .collect();
                candidates.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                let mut largest = Resources::default();
                for t in tight.iter() {
                    largest.max_assign(capacity(t));
                }
                for (_, t) in candidates {
                    if min_values_met(&tight) {
                        break;
                    }
                    tight.insert(t);
                    largest.max_assign(capacity(t));
                }
                mask = tight;
                if !min_values_met(&mask) {
                    return Err(format!(
                        "nodepool {} limit leaves too few instance types for minValues",
                        ps.view.name
                    ));
                }
                wide.consume(&largest);
                *slack = Some(wide);
            }
        }
        let pricer = ps.catalog.pricer(ps.view, &requirements);
        let mut priced: Vec<(f64, &str, usize, usize)> = mask
            .iter()
            .filter_map(|t| {
                let (price, offering) = pricer.cheapest(t)?;
                Some((
                    price,
                    ps.view.instance_types[ps.catalog.types[t]].name.as_str(),
                    t,
                    offering,
                ))
            })
            .collect();
        drop(pricer);
        priced.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)));
        let &(cheapest_price, _, cheapest_t, cheapest_o) =
            priced.first().ok_or_else(|| NO_OFFERING.to_owned())?;

        let limit = self.input.options.max_instance_types.max(1);
        let mut chosen: Vec<usize> = (0..priced.len().min(limit)).collect();
        // Keep minValues satisfiable after truncation: add the cheapest types that bring values.
        for r in requirements.iter() {
            let Some(min) = r.min_values() else { continue };
            let values_of = |i: usize| -> Vec<String> {
                let it = &ps.view.instance_types[ps.catalog.types[priced[i].2]];
                it.requirements
                    .set_of(r.key())
                    .map(|s| s.values().to_vec())
                    .unwrap_or_default()
            };
            let mut seen: BTreeSet<String> = chosen.iter().flat_map(|&i| values_of(i)).collect();
            let mut next = chosen.len();
            while seen.len() < min as usize && next < priced.len() {
                let values = values_of(next);
                if values.iter().any(|v| !seen.contains(v)) {
                    seen.extend(values);
                    chosen.push(next);
                }
                next += 1;
            }
        }
        chosen.sort_unstable();
        if self.input.options.min_values_policy == MinValuesPolicy::BestEffort {
            relax_min_values(&mut requirements, &chosen, |i, key| {
                ps.view.instance_types[ps.catalog.types[priced[i].2]]
                    .requirements
                    .set_of(key)
                    .map(|s| s.values().to_vec())
                    .unwrap_or_default()
            });
        }
        let options: Vec<String> = chosen.iter().map(|&i| priced[i].1.to_owned()).collect();
        // The same names in name order, which is the set's own order: building it is a copy.
        let mut by_name: Vec<usize> = chosen.iter().map(|&i| priced[i].2).collect();
        by_name.sort_unstable_by_key(|&t| ps.catalog.name_rank[t]);
        let names = ValueSet::in_(
            by_name
                .iter()
                .map(|&t| ps.view.instance_types[ps.catalog.types[t]].name.as_str()),
        );
        let narrowed = match requirements.set_of(INSTANCE_TYPE) {
            Some(existing) => existing.intersection(&names),
            None => names,
        };
        requirements.set(INSTANCE_TYPE, narrowed);

        let it = &ps.view.instance_types[ps.catalog.types[cheapest_t]];
        let offering = &it.offerings[cheapest_o];
        Ok(NewClaim {
            node_pool: ps.view.name.clone(),
            requirements,
            requests: bin.requests.plus(&ps.catalog.daemon[cheapest_t]),
            instance_type_options: options,
            cheapest_price,
            cheapest_offering: ChosenOffering {
                instance_type: it.name.clone(),
                zone: offering.zone.clone(),
                capacity_type: offering.capacity_type.clone(),
                price: offering.price,
            },
            pods: bin.pods.clone(),
        })
    }
}

/// Lowers each `minValues` of `requirements` that the instance types `chosen` cannot meet to the
/// number of distinct values they have (`values_of(i, key)`: type `i`'s values of `key`), as
/// Karpenter's `BestEffort` policy records on the claim what it could keep.
fn relax_min_values(
    requirements: &mut Requirements,
    chosen: &[usize],
    values_of: impl Fn(usize, &str) -> Vec<String>,
) {
    let short: Vec<(String, u32)> = requirements
        .iter()
        .filter_map(|r| {
            let min = r.min_values()?;
            let have: BTreeSet<String> =
                chosen.iter().flat_map(|&i| values_of(i, r.key())).collect();
            let have = u32::try_from(have.len()).unwrap_or(u32::MAX);
            (have < min).then(|| (r.key().to_owned(), have.max(1)))
        })
        .collect();
    for (key, have) in short {
        if let Some(r) = requirements.remove(&key) {
            requirements.add(r.with_min_values(Some(have)));
        }
    }
}

/// The value a node or claim carries for `key`; hostnames fall back to the object's name.
/// The values instance type `it` of `pool` can give `key` on a node: its own (a listed set) and,
/// for zones, those of its available offerings, as far as the pool's template allows them.
fn type_domains<'p, 'a>(
    pool: &'p Pool<'a>,
    it: &'p InstanceType,
    key: &str,
) -> impl Iterator<Item = &'p str> + use<'p, 'a> {
    let allowed = pool.template.set_of(key);
    let is_zone = key == ZONE;
    let own = it
        .requirements
        .set_of(key)
        .filter(|s| !s.is_complement())
        .into_iter()
        .flat_map(|s| s.values().iter().map(String::as_str));
    let zones = it
        .offerings
        .iter()
        .filter(move |o| is_zone && o.available)
        .map(|o| o.zone.as_str());
    own.chain(zones)
        .filter(move |v| allowed.is_none_or(|a| a.contains(v)))
}

fn node_label<'l>(
    labels: &'l BTreeMap<String, String>,
    name: &'l str,
    key: &str,
) -> Option<&'l str> {
    labels
        .get(key)
        .map(String::as_str)
        .or_else(|| (key == HOSTNAME).then_some(name))
}

/// Whether `allowed` is just bin's own hostname.
fn is_own_host(
    bin: &Bin<'_>,
    hostname_key: Option<usize>,
    key: usize,
    allowed: &[DomainId],
) -> bool {
    matches!((hostname_key, bin.host_domain, allowed), (Some(h), Some(d), [a]) if h == key && *a == d)
}

/// Whether `set` is exactly the domains `allowed` of topology key `key`.
fn same_values(
    set: Option<&ValueSet>,
    topology: &Topology,
    key: usize,
    allowed: &[DomainId],
) -> bool {
    set.is_some_and(|s| {
        !s.is_complement()
            && s.values().len() == allowed.len()
            && allowed
                .iter()
                .all(|&d| s.contains(topology.domain_name(key, d)))
    })
}

fn describe_narrowing(
    merged: &[(&str, ValueSet)],
    topology: &Topology,
    narrowed: &[(usize, Vec<DomainId>)],
) -> String {
    let mut parts: Vec<String> = merged.iter().map(|(k, s)| format!("{k} {s}")).collect();
    for (key, allowed) in narrowed {
        let set = ValueSet::in_(allowed.iter().map(|&d| topology.domain_name(*key, d)));
        parts.push(format!("{} {set}", topology.key_name(*key)));
    }
    if parts.is_empty() {
        "the pod's requirements".to_owned()
    } else {
        parts.join(", ")
    }
}

fn topology_reason(topology: &Topology, g: GroupId) -> String {
    let spec = topology.spec(g);
    match spec.kind {
        GroupKind::Spread => format!(
            "topology spread constraint on {} (maxSkew {}) cannot be met",
            spec.key, spec.max_skew
        ),
        GroupKind::Affinity => format!(
            "pod affinity on {}: no allowed domain has a matching pod",
            spec.key
        ),
        GroupKind::AntiAffinity if spec.inverse => format!(
            "pod anti-affinity of running or placed pods on {}: every allowed domain has one",
            spec.key
        ),
        GroupKind::AntiAffinity => format!(
            "pod anti-affinity on {}: every allowed domain already has a matching pod",
            spec.key
        ),
    }
}
