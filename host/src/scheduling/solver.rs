//! The greedy first-fit-decreasing solver (Karpenter's `Scheduler.Solve`).
//!
//! Capacity is a list of *bins*: existing nodes and in-flight claims (fixed allocatable), then the
//! NodeClaims this run opens (a shrinking set of instance types). Placing a pod on a bin checks,
//! cheapest test first: taints, resources against the bin's best case, node requirements,
//! topology, and for new NodeClaims which instance types survive the narrowed requirements,
//! offerings and the summed requests. Failed attempts allocate nothing unless the pod carries
//! node requirements of its own.

/// `Err(Some(reason))` when asked for a reason, `Err(None)` otherwise.
macro_rules! bail {
    ($want:expr, $($arg:tt)*) => {
        return Err(if $want { Some(format!($($arg)*)) } else { None })
    };
}

mod bin_index;
mod bitset;
mod catalog;
mod fast_hash;
mod finalize;
mod fit;
mod pod_state;
mod queue;
mod room;
mod setup;
mod topology;

#[cfg(test)]
mod devices_tests;
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
use super::devices;
use super::pod::{CsiVolume, HostPort, Pod, host_port_conflict, volume_limit_exceeded};
use super::policy::MinValuesPolicy;
use super::requirements::{Requirement, Requirements, ValueSet};
use super::resources::{PROVIDER_PRICE, ResourceLimits, Resources};
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
    /// Existing nodes whose CSINode limits attachments: the limits per driver; and the volumes
    /// of the pods on it (running and placed), on those nodes and on new claims, whose instance
    /// types' limits narrow the types they may launch as (as Karpenter v1.15).
    volume_limits: Option<&'a BTreeMap<String, i64>>,
    volumes: Vec<CsiVolume>,
    /// Existing capacity's devices (a new claim's are its instance types', in the pool's
    /// catalog), and the claims of the pods placed on it in this run.
    devices: Option<&'a capstan_dra::Inventory>,
    claims: Vec<Arc<capstan_dra::ClaimRequests>>,
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
            let finalized = self.finalize(b, &mut slack);
            if let BinKind::New { pool } = self.bins[b].kind {
                self.share_spend_slack(pool, &mut slack);
            }
            match finalized {
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

    /// After a claim of `pools[pool]` was finalized: the other pools of its spend group get its
    /// [`PROVIDER_PRICE`] slack (what minValues took from it, the group no longer has).
    fn share_spend_slack(&self, pool: usize, slack: &mut [Option<ResourceLimits>]) {
        let Some((group, left)) = spend_room(self.pools[pool].view, slack[pool].as_ref()) else {
            return;
        };
        for (other, ps) in self.pools.iter().enumerate() {
            if ps.view.spend_group.as_deref() == Some(group)
                && let Some(Some(s)) = slack.get_mut(other)
            {
                s.0.insert(PROVIDER_PRICE.to_owned(), left);
            }
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
}

/// The spend group of `view` and the [`PROVIDER_PRICE`] that `room` leaves it, when it has one.
fn spend_room<'v>(view: &'v NodePoolView, room: Option<&ResourceLimits>) -> Option<(&'v str, i64)> {
    let group = view.spend_group.as_deref()?;
    let left = room?.0.get(PROVIDER_PRICE).copied()?;
    Some((group, left))
}
