//! `capstan simulate`: what Capstan would do now on a cluster it does not run in, from a dump of
//! the cluster's objects ([`dump`]) and a provider component, writing nothing anywhere.
//!
//! The simulation is the host's own code over a [`View`] built from the dump instead of the
//! host's caches: the provisioner's [`Snapshot::from_view`] and [`Snapshot::input_from`] (instance
//! types from the component through [`FromRegistry`]), [`scheduling::solve`] for the NodeClaims
//! it would launch, and disruption's [`consolidation::cluster_from`], [`consolidation::allowances_in`]
//! and [`consolidation::search`] for the consolidation decision the next disruption pass would
//! take once the provisioner's claims exist (in flight, their pods nominated to them). [`run`]
//! returns a [`Report`] (serialized as the documented JSON, or rendered by
//! [`table`]).
//!
//! One difference from the host, on purpose: the host considers a node for consolidation only
//! once its claim's `Consolidatable` condition is true (`consolidateAfter` after its last pod
//! event). A dump of a cluster Capstan does not run has no such condition, so by default every
//! initialized claim of a pool whose `consolidateAfter` is not `Never` is taken as consolidatable
//! ([`assume_consolidatable`]); [`Settings::assume_consolidatable`] off reads the dumped
//! conditions as they are.

pub mod dump;
pub mod floor;
pub mod table;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde::Serialize;

use crate::api::labels::PRICE_ANNOTATION;
use crate::api::labels::{CAPACITY_TYPE, INSTANCE_TYPE, NODEPOOL, ZONE};
use crate::api::nodeclaim::conditions::{CONSOLIDATABLE, INITIALIZED};
use crate::api::{ConditionStatus, NodeClaim, NodeClass, NodeOverlay, NodePool, duration};
use crate::catalog::{Catalog, InstanceTypeCache};
use crate::provider::Registry;
use crate::rules::candidates::Joined;
use crate::rules::claims::{is_true, provider_id, set_condition};
use crate::rules::consolidation::from_view as consolidation;
use crate::rules::consolidation::{self as engine, Cluster, price};
use crate::rules::new_claim::{claim_for, resource_list};
use crate::rules::resolve;
use crate::rules::selector::Selector;
use crate::rules::snapshot::{InstanceTypeSource, ProvisionError, Snapshot};
use crate::rules::verdict;
use crate::scheduling::overlay::{self, Overlay};
use crate::scheduling::{self, InstanceType, NewClaim, NodePoolView, Target};
use crate::state::View;

/// The `schema` field of the JSON report; changes only with an incompatible change of its shape.
pub const SCHEMA: &str = "capstan.dev/simulate/v1";

/// The knobs of a simulation.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The host's `--selector`: only these NodeClaims and NodePools (in the [`View`]) and pods
    /// and nodes are managed.
    pub selector: Selector,
    /// Consolidation's knobs (spot-to-spot, ...), as `capstan run` would have them.
    pub options: engine::Options,
    /// Take every initialized claim of a pool whose `consolidateAfter` is not `Never` as
    /// consolidatable, whatever its dumped `Consolidatable` condition says.
    pub assume_consolidatable: bool,
    /// The moment simulated (budget schedules, do-not-disrupt durations, lifetimes).
    pub now: Timestamp,
    /// How long the consolidation search may run (the host: 10 s).
    pub search_timeout: Duration,
    /// Report every managed node's consolidation verdict ([`Consolidation::verdicts`]).
    pub explain: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            selector: Selector::default(),
            options: engine::Options::default(),
            assume_consolidatable: true,
            now: Timestamp::now(),
            search_timeout: Duration::from_secs(10),
            explain: false,
        }
    }
}

/// Instance types from the providers of a [`Registry`] (components `capstan simulate` loaded from
/// files), through an [`InstanceTypeCache`]. Nothing is marked unavailable: a dump carries no
/// record of launches that ran out of capacity.
#[derive(Debug, Default)]
pub struct FromRegistry {
    pub registry: Arc<Registry>,
    pub cache: InstanceTypeCache,
}

impl InstanceTypeSource for FromRegistry {
    async fn instance_types(
        &self,
        pool: &NodePool,
        classes: &HashMap<String, Arc<NodeClass>>,
    ) -> Result<Arc<[InstanceType]>, ProvisionError> {
        self.fetch(pool, classes, Catalog::Overlaid).await
    }
}

impl FromRegistry {
    /// `pool`'s catalog, as `catalog` says.
    pub async fn fetch(
        &self,
        pool: &NodePool,
        classes: &HashMap<String, Arc<NodeClass>>,
        catalog: Catalog,
    ) -> Result<Arc<[InstanceType]>, ProvisionError> {
        let resolved = resolve::resolve_offline(
            &self.registry,
            &pool.spec.template.spec.node_class_ref,
            classes,
        )
        .map_err(|unresolved| ProvisionError::Pool(unresolved.to_string()))?;
        let started = Instant::now();
        let types = self
            .cache
            .get_catalog(
                "simulate",
                &resolved.provider,
                pool,
                &resolved.node_class,
                catalog,
            )
            .await;
        tracing::debug!(
            nodepool = %pool.name_any(),
            provider = %resolved.provider_name,
            elapsed = ?started.elapsed(),
            ok = types.is_ok(),
            "get-instance-types"
        );
        types
    }

    /// Applies `overlays` (NodeOverlays, `--feature-gates NodeOverlay=true`) to every catalog
    /// from now on, as the host would: invalid ones and those that conflict over the catalogs of
    /// `view`'s pools left out. Returns the ones left out, with why.
    pub async fn apply_overlays<'a>(
        &self,
        overlays: impl IntoIterator<Item = &'a NodeOverlay>,
        view: &View,
        selector: &Selector,
    ) -> BTreeMap<String, String> {
        let mut refused = BTreeMap::new();
        let mut parsed = Vec::new();
        for object in overlays {
            match Overlay::from_api(object) {
                Ok(o) => parsed.push(o),
                Err(err) => {
                    refused.insert(object.name_any(), err.to_string());
                }
            }
        }
        let snapshot = Snapshot::from_view(view, selector);
        let mut catalogs = Vec::new();
        for pool in &snapshot.pools {
            if let Ok(types) = self.fetch(pool, &snapshot.classes, Catalog::Raw).await {
                catalogs.push((pool.name_any(), overlay::template_labels(pool), types));
            }
        }
        let (accepted, conflicts) = overlay::accept_over(parsed, &catalogs);
        refused.extend(conflicts);
        self.cache.set_overlays(accepted);
        refused
    }
}

/// Sets, on the in-memory claims of `view`, the `Consolidatable` condition to what a host would
/// eventually set it to when no pod moves: true for an initialized claim of a known pool whose
/// `consolidateAfter` is a duration, absent otherwise (`Never`, not initialized, no pool).
/// Returns how many claims it takes as consolidatable.
pub fn assume_consolidatable(view: &mut View, now: Timestamp) -> usize {
    let now = Time(now);
    let pools: HashMap<String, &NodePool> = view
        .pools
        .iter()
        .map(|p| (p.name_any(), p.as_ref()))
        .collect();
    let mut count = 0;
    for claim in &mut view.claims {
        let want = is_true(claim, INITIALIZED)
            && claim
                .labels()
                .get(NODEPOOL)
                .and_then(|p| pools.get(p))
                .is_some_and(|p| {
                    matches!(
                        duration::parse_nillable(&p.spec.disruption.consolidate_after),
                        Ok(Some(_))
                    )
                });
        count += usize::from(want);
        if want == is_true(claim, CONSOLIDATABLE) {
            continue;
        }
        let claim = Arc::make_mut(claim);
        if want {
            set_condition(
                claim,
                CONSOLIDATABLE,
                ConditionStatus::True,
                "Consolidatable",
                "assumed by capstan simulate",
                &now,
            );
        } else if let Some(status) = claim.status.as_mut() {
            status.conditions.retain(|c| c.type_ != CONSOLIDATABLE);
        }
    }
    count
}

/// What Capstan would do now.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// The moment simulated (RFC 3339).
    pub now: String,
    /// The host's selector (empty: everything).
    pub selector: String,
    /// Whether claims were taken as consolidatable ([`assume_consolidatable`]).
    pub consolidatable_assumed: bool,
    /// What was read (filled by the caller: [`run`] sees only the [`View`]).
    pub input: Input,
    pub provisioning: Provisioning,
    pub consolidation: Consolidation,
    pub totals: Totals,
}

/// What the simulation read.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Input {
    /// The dump files.
    pub files: Vec<String>,
    /// The objects of the kinds the simulation reads, counted.
    pub objects: dump::Counts,
    /// Objects of other kinds, by `apiVersion/kind`, counted.
    pub skipped_kinds: BTreeMap<String, usize>,
    /// Pools whose non-Capstan `nodeClassRef` a stand-in NodeClass replaced.
    pub stand_ins: Vec<StandIn>,
    /// The provider components, by the name NodeClasses use.
    pub providers: Vec<ProviderInfo>,
}

/// A pool served by a stand-in NodeClass.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StandIn {
    pub node_pool: String,
    /// What the pool referred to (`group/Kind name`).
    pub node_class_ref: String,
    /// The name it referred to.
    #[serde(skip)]
    pub referenced: String,
    /// The stand-in `capstan.dev` NodeClass.
    pub node_class: String,
}

/// A provider component.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderInfo {
    pub name: String,
    pub file: String,
    pub sha256: String,
}

/// The provisioner's simulation.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Provisioning {
    /// Pods to provision for (unschedulable, or on nodes that are leaving).
    pub pending_pods: usize,
    /// The NodeClaims it would create.
    pub node_claims: Vec<PlannedClaim>,
    /// Pending pods that fit on existing nodes or claims still launching.
    pub on_existing_capacity: Vec<Placement>,
    /// Pending pods that fit nowhere, with why.
    pub unschedulable: Vec<PodProblem>,
    /// NodePools left out, with why (no NodeClass, no provider, a provider error, ...).
    pub skipped_node_pools: Vec<PoolProblem>,
}

/// A NodeClaim that would be created (or a consolidation replacement).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedClaim {
    pub node_pool: String,
    /// Every instance type it could launch, cheapest first.
    pub instance_types: Vec<String>,
    /// The cheapest offering it could launch.
    pub cheapest: Offering,
    /// $/h of the cheapest offering.
    pub price_per_hour: f64,
    /// Its pods (`namespace/name`).
    pub pods: Vec<String>,
    /// Its resource requests (pods plus DaemonSet overhead), as Kubernetes quantities.
    pub requests: BTreeMap<String, String>,
}

impl PlannedClaim {
    /// The solver's new claim, its pods named by `pod_name` (from their index in the input).
    fn new(claim: &NewClaim, pod_name: impl Fn(usize) -> String) -> Self {
        let offering = &claim.cheapest_offering;
        Self {
            node_pool: claim.node_pool.clone(),
            instance_types: claim.instance_type_options.clone(),
            cheapest: Offering {
                instance_type: offering.instance_type.clone(),
                zone: offering.zone.clone(),
                capacity_type: offering.capacity_type.clone(),
                price_per_hour: offering.price,
            },
            price_per_hour: claim.cheapest_price,
            pods: claim.pods.iter().map(|&i| pod_name(i)).collect(),
            requests: resource_list(&claim.requests)
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect(),
        }
    }
}

/// An offering: instance type, zone, capacity type and price.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Offering {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    pub price_per_hour: f64,
}

/// A pending pod placed on capacity that exists or is launching.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    pub pod: String,
    /// `node/NAME` or `nodeclaim/NAME`.
    pub target: String,
}

/// A pod and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodProblem {
    pub pod: String,
    pub reason: String,
}

/// A pool and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolProblem {
    pub node_pool: String,
    pub reason: String,
}

/// The next consolidation pass.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Consolidation {
    /// How many nodes are candidates.
    pub candidates: usize,
    /// The decision the pass would take (the host validates it after a delay, then carries it
    /// out), if any.
    pub decision: Option<Decision>,
    /// Candidates single-node consolidation tried and refused, with why (the host's
    /// `Unconsolidatable` Events).
    pub refused: Vec<NodeNote>,
    /// Managed nodes that are not candidates, with why.
    pub not_candidates: Vec<NodeNote>,
    /// Per pool: how many more nodes its budgets let go now, as `Empty` and as `Underutilized`.
    pub allowances: BTreeMap<String, PoolAllowance>,
    /// Pools whose budgets do not parse (consolidation leaves them alone).
    pub budget_errors: Vec<PoolProblem>,
    /// With [`Settings::explain`]: every managed node's verdict after this pass, as the host
    /// would write it on the NodeClaim (`reason` the message, `verdict` the code).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdicts: Option<Vec<NodeNote>>,
}

/// A node and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeNote {
    pub node: String,
    pub node_claim: String,
    pub node_pool: String,
    pub reason: String,
    /// The verdict's reason code, as the host's `ConsolidationBlocked` condition would carry it
    /// (`DoNotDisruptPod`, `ConsolidateAfterNever`, `NoCheaperReplacement`, ...); `NotBlocked`
    /// when nothing blocks the node; empty for notes that are no verdict (price unknown).
    pub verdict: String,
}

/// A pool's consolidation allowance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolAllowance {
    pub empty: usize,
    pub underutilized: usize,
}

/// A consolidation decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// `Empty` or `Underutilized` (the budget reason).
    pub reason: String,
    /// `delete` or `replace`.
    pub action: String,
    /// The nodes that go.
    pub nodes: Vec<DecisionNode>,
    /// The node launched first, for `replace`.
    pub replacement: Option<PlannedClaim>,
    /// $/h of the nodes that go.
    pub price_before: f64,
    /// $/h of the replacement (0 for `delete`).
    pub price_after: f64,
    /// $/h saved.
    pub savings: f64,
}

/// A node a decision removes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionNode {
    pub node: String,
    pub node_claim: String,
    pub node_pool: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    pub price_per_hour: f64,
    /// Its pods that move (`namespace/name`).
    pub pods: Vec<String>,
}

/// Nodes and $/h now and after each step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    /// Every node the selector matches and every claim still launching.
    pub now: Total,
    /// Without the nodes already leaving, with the new claims.
    pub after_provisioning: Total,
    /// Then without the nodes the decision removes, with its replacement.
    pub after_consolidation: Total,
    /// What no placement of the pods can cost less than ([`floor`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor: Option<floor::CostFloor>,
}

/// A count of nodes and their price.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Total {
    pub nodes: usize,
    /// $/h of the nodes whose price is known.
    pub price_per_hour: f64,
    /// Nodes whose price is not known (their instance type is not in any pool's catalog and
    /// they carry no `capstan.dev/price-per-hour`): not in `pricePerHour`.
    pub unpriced_nodes: usize,
}

impl Total {
    fn add(&mut self, price: Option<f64>) {
        self.nodes += 1;
        match price {
            Some(p) => self.price_per_hour += p,
            None => self.unpriced_nodes += 1,
        }
    }

    fn remove(&mut self, price: Option<f64>) {
        self.nodes = self.nodes.saturating_sub(1);
        match price {
            Some(p) => self.price_per_hour -= p,
            None => self.unpriced_nodes = self.unpriced_nodes.saturating_sub(1),
        }
    }
}

/// Runs the provisioner's and consolidation's simulations over `view`.
pub async fn run(mut view: View, source: &impl InstanceTypeSource, settings: &Settings) -> Report {
    if settings.assume_consolidatable {
        let n = assume_consolidatable(&mut view, settings.now);
        tracing::debug!(claims = n, "claims taken as consolidatable");
    }
    let snapshot = Snapshot::from_view(&view, &settings.selector);
    let built = snapshot.input_from(source).await;
    let result = scheduling::solve(&built.input);
    let pod_name = |i: usize| key(&built.input.pods[i]);
    let mut provisioning = Provisioning {
        pending_pods: snapshot.pending.len(),
        node_claims: result
            .new_claims
            .iter()
            .map(|c| PlannedClaim::new(c, pod_name))
            .collect(),
        on_existing_capacity: result
            .existing_placements
            .iter()
            .map(|(i, target)| Placement {
                pod: pod_name(*i),
                target: match target {
                    Target::Node(n) => format!("node/{n}"),
                    Target::Claim(c) => format!("nodeclaim/{c}"),
                },
            })
            .collect(),
        unschedulable: built
            .rejected
            .iter()
            .map(|(i, why)| PodProblem {
                pod: format!(
                    "{}/{}",
                    snapshot.pending[*i].namespace().unwrap_or_default(),
                    snapshot.pending[*i].name_any()
                ),
                reason: why.clone(),
            })
            .collect(),
        skipped_node_pools: built
            .skipped_pools
            .iter()
            .map(|(pool, why)| PoolProblem {
                node_pool: pool.clone(),
                reason: why.clone(),
            })
            .collect(),
    };
    provisioning
        .unschedulable
        .extend(result.unschedulable.iter().map(|(i, why)| PodProblem {
            pod: pod_name(*i),
            reason: why.clone(),
        }));

    let mut totals = Totals::default();
    // Cheap: the pools' catalogs are shared.
    let catalogs = built.input.node_pools.clone();
    let prices = NodePrices::new(&view, &catalogs);
    let managed_nodes: Vec<&Arc<Node>> = view
        .nodes
        .iter()
        .filter(|n| settings.selector.matches(n.labels()))
        .collect();
    let node_ids: HashSet<&str> = view
        .nodes
        .iter()
        .filter_map(|n| n.spec.as_ref()?.provider_id.as_deref())
        .collect();
    let leaving: HashSet<&str> = snapshot.leaving.iter().map(String::as_str).collect();
    for node in &managed_nodes {
        let price = prices.of(node);
        totals.now.add(price);
        let id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
        let gone = node.metadata.deletion_timestamp.is_some()
            || id.is_some_and(|id| leaving.contains(id))
            || !snapshot
                .nodes
                .iter()
                .any(|n| n.name_any() == node.name_any());
        if !gone {
            totals.after_provisioning.add(price);
        }
    }
    for claim in &view.claims {
        let launching = claim.metadata.deletion_timestamp.is_none()
            && provider_id(claim).is_none_or(|id| !node_ids.contains(id));
        if launching {
            let price = annotated_price(claim);
            totals.now.add(price);
            totals.after_provisioning.add(price);
        }
    }
    for claim in &provisioning.node_claims {
        totals.after_provisioning.add(Some(claim.price_per_hour));
    }
    let unplaced: HashSet<usize> = result.unschedulable.iter().map(|(i, _)| *i).collect();
    let placed: Vec<&scheduling::Pod> = built
        .input
        .pods
        .iter()
        .enumerate()
        .filter(|(i, _)| !unplaced.contains(i))
        .map(|(_, p)| p)
        .collect();
    totals.floor = floor::cost_floor(&managed_nodes, &view.pods, &placed, &catalogs);

    // The next consolidation pass runs once the provisioner created its claims: they are in
    // flight then, with the pending pods nominated to them.
    // As the host's pass does, consolidation takes its own snapshot, with the pods kube-scheduler
    // has not judged yet as pending too.
    let after = with_planned_claims(&view, &snapshot, &result.new_claims, &settings.selector);
    let mut snapshot = Snapshot::from_view(&after, &settings.selector);
    consolidation::add_unbound(&mut snapshot, &after, &settings.selector);
    let built = snapshot.input_from(source).await;
    let consolidation = consolidate(&after, &snapshot, built.input, settings, &prices).await;
    totals.after_consolidation = totals.after_provisioning;
    if let Some(decision) = &consolidation.decision {
        for node in &decision.nodes {
            totals.after_consolidation.remove(Some(node.price_per_hour));
        }
        if let Some(replacement) = &decision.replacement {
            totals
                .after_consolidation
                .add(Some(replacement.price_per_hour));
        }
    }
    Report {
        schema: SCHEMA,
        now: settings.now.to_string(),
        selector: settings.selector.to_string(),
        consolidatable_assumed: settings.assume_consolidatable,
        input: Input::default(),
        provisioning,
        consolidation,
        totals,
    }
}

/// `view` with the NodeClaims the provisioner would create for `new_claims` (named
/// `<pool>-planned-<n>`, not launched yet).
fn with_planned_claims(
    view: &View,
    snapshot: &Snapshot,
    new_claims: &[NewClaim],
    selector: &Selector,
) -> View {
    let mut after = view.clone();
    let labels = selector.equality_labels();
    for (i, new) in new_claims.iter().enumerate() {
        let Some(pool) = snapshot
            .pools
            .iter()
            .find(|p| p.name_any() == new.node_pool)
        else {
            continue;
        };
        let mut claim = claim_for(new, pool, &labels);
        claim.metadata.generate_name = None;
        claim.metadata.name = Some(format!("{}-planned-{}", new.node_pool, i + 1));
        after.claims.push(Arc::new(claim));
    }
    after
}

fn key(pod: &scheduling::Pod) -> String {
    format!("{}/{}", pod.namespace, pod.name)
}

fn annotated_price(claim: &NodeClaim) -> Option<f64> {
    claim
        .annotations()
        .get(PRICE_ANNOTATION)
        .and_then(|p| p.parse::<f64>().ok())
        .filter(|p| p.is_finite())
}

/// What nodes cost: from their pool's catalog (instance type, zone and capacity type labels, as
/// consolidation prices them), else their claim's `capstan.dev/price-per-hour`, else any pool's
/// catalog that has the type.
struct NodePrices<'a> {
    pools: &'a [NodePoolView],
    claims_by_id: HashMap<&'a str, &'a NodeClaim>,
}

impl<'a> NodePrices<'a> {
    fn new(view: &'a View, pools: &'a [NodePoolView]) -> Self {
        Self {
            pools,
            claims_by_id: view
                .claims
                .iter()
                .filter_map(|c| Some((provider_id(c)?, c.as_ref())))
                .collect(),
        }
    }

    /// From the node's pool's catalog only (what consolidation prices candidates by).
    fn in_pool(&self, node: &Node) -> Option<f64> {
        let labels = node.labels();
        let pool = self
            .pools
            .iter()
            .find(|p| Some(&p.name) == labels.get(NODEPOOL))?;
        catalog_price(node, pool)
    }

    fn of(&self, node: &Node) -> Option<f64> {
        let labels = node.labels();
        let in_pool = |pool: &NodePoolView| catalog_price(node, pool);
        let claim = node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .and_then(|id| self.claims_by_id.get(id));
        labels
            .get(NODEPOOL)
            .and_then(|name| self.pools.iter().find(|p| &p.name == name))
            .and_then(in_pool)
            .or_else(|| claim.and_then(|c| annotated_price(c)))
            .or_else(|| self.pools.iter().find_map(in_pool))
    }
}

/// What `node` costs by `pool`'s catalog (its instance type, zone and capacity type labels).
fn catalog_price(node: &Node, pool: &NodePoolView) -> Option<f64> {
    let labels = node.labels();
    let it = pool
        .instance_types
        .iter()
        .find(|t| Some(&t.name) == labels.get(INSTANCE_TYPE))?;
    price::node_price(it, labels.get(ZONE)?, labels.get(CAPACITY_TYPE)?)
}

async fn consolidate(
    view: &View,
    snapshot: &Snapshot,
    input: scheduling::SchedulingInput,
    settings: &Settings,
    prices: &NodePrices<'_>,
) -> Consolidation {
    let now = settings.now;
    let pools: BTreeMap<String, &NodePool> = view
        .pools
        .iter()
        .map(|p| (p.name_any(), p.as_ref()))
        .collect();
    let joined = Joined::of(view);
    let (allowances, budget_errors) = consolidation::allowances_in(&joined, &pools, now);
    let mut out = Consolidation {
        budget_errors: budget_errors
            .into_iter()
            .map(|(pool, err)| PoolProblem {
                node_pool: pool,
                reason: format!("invalid budget: {err}"),
            })
            .collect(),
        ..Consolidation::default()
    };
    for pool in pools.keys() {
        out.allowances.insert(
            pool.clone(),
            PoolAllowance {
                empty: allowances.empty.get(pool).copied().unwrap_or_default(),
                underutilized: allowances
                    .underutilized
                    .get(pool)
                    .copied()
                    .unwrap_or_default(),
            },
        );
    }
    let found = consolidation::cluster_from(
        view,
        &joined,
        snapshot,
        input,
        // A dump has no memory of recent pod changes: the Consolidatable condition (assumed or
        // dumped) decides alone.
        (&pools, &HashSet::new()),
        now,
        settings.options.clone(),
    );
    let candidates: HashSet<String> = found
        .as_ref()
        .map(|(c, _)| c.candidates.iter().map(|c| c.claim.clone()).collect())
        .unwrap_or_default();
    out.not_candidates = not_candidates((view, &joined), &pools, &candidates, now, prices);
    let Some((cluster, _)) = found else {
        if settings.explain {
            out.verdicts = Some(verdicts(
                (view, &joined),
                &pools,
                now,
                &HashMap::new(),
                None,
            ));
        }
        return out;
    };
    out.candidates = cluster.candidates.len();
    let deadline = settings.search_timeout;
    let searched = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        let (command, refused) =
            consolidation::search(&mut cluster, &allowances, Instant::now() + deadline);
        (cluster, command, refused)
    })
    .await;
    let (cluster, command, refused) = match searched {
        Ok(found) => found,
        Err(err) => {
            tracing::warn!(error = %err, "the consolidation search did not finish");
            return out;
        }
    };
    out.refused = refused
        .iter()
        .map(|(i, why)| {
            let c = &cluster.candidates[*i];
            NodeNote {
                node: c.node.clone(),
                node_claim: c.claim.clone(),
                node_pool: c.node_pool.clone(),
                reason: why.to_string(),
                verdict: why.kind().to_owned(),
            }
        })
        .collect();
    if settings.explain {
        let refused: HashMap<String, engine::Refusal> = refused
            .into_iter()
            .map(|(i, why)| (cluster.candidates[i].claim.clone(), why))
            .collect();
        let pending: Option<(Vec<String>, &'static str)> = command.as_ref().map(|cmd| {
            let claims = cmd
                .candidates
                .iter()
                .map(|&i| cluster.candidates[i].claim.clone())
                .collect();
            (claims, cmd.reason.as_str())
        });
        let pending = pending.as_ref().map(|(c, r)| (c.as_slice(), *r));
        out.verdicts = Some(verdicts((view, &joined), &pools, now, &refused, pending));
    }
    out.decision = command.map(|cmd| decision(&cluster, &cmd));
    out
}

/// Every managed machine's verdict after the pass: the host's own
/// [`verdict::verdict`] over the dump, with the search's refusals and its decision (which the
/// host would then hold for validation).
fn verdicts(
    (view, joined): (&View, &Joined<'_>),
    pools: &BTreeMap<String, &NodePool>,
    now: Timestamp,
    refused: &HashMap<String, engine::Refusal>,
    pending: Option<(&[String], &'static str)>,
) -> Vec<NodeNote> {
    let recent = HashSet::new();
    let facts = verdict::Facts {
        pdbs: &view.pdbs,
        now,
        counts: &joined.counts,
        recent: &recent,
        refused,
        pending,
    };
    let mut out = Vec::new();
    for m in &joined.machines {
        let pool_name = m.claim.labels().get(NODEPOOL).cloned().unwrap_or_default();
        let Some(pool) = pools.get(&pool_name) else {
            continue;
        };
        let blocked = verdict::verdict(m, pool, &facts);
        let (code, message) = verdict::condition_of(blocked.as_ref());
        out.push(NodeNote {
            node: m.node.name_any(),
            node_claim: m.claim.name_any(),
            node_pool: pool_name,
            reason: message,
            verdict: code.to_owned(),
        });
    }
    out.sort_by(|a, b| a.node.cmp(&b.node));
    out
}

fn decision(cluster: &Cluster, cmd: &engine::Command) -> Decision {
    // The replacement's pods index the simulation's input: the pending pods, then the moving
    // pods of the candidates in the command's order.
    let mut names: Vec<String> = cluster.input.pods.iter().map(key).collect();
    for &i in &cmd.candidates {
        names.extend(cluster.candidates[i].pods.iter().map(|p| key(p)));
    }
    let name = |i: usize| names.get(i).cloned().unwrap_or_else(|| format!("#{i}"));
    let replacement = cmd.replacement.as_ref().map(|c| PlannedClaim::new(c, name));
    Decision {
        reason: cmd.reason.as_str().to_owned(),
        action: cmd.decision().to_owned(),
        nodes: cmd
            .candidates
            .iter()
            .map(|&i| {
                let c = &cluster.candidates[i];
                DecisionNode {
                    node: c.node.clone(),
                    node_claim: c.claim.clone(),
                    node_pool: c.node_pool.clone(),
                    instance_type: c.instance_type.clone(),
                    zone: c.zone.clone(),
                    capacity_type: c.capacity_type.clone(),
                    price_per_hour: c.price,
                    pods: c.pods.iter().map(|p| key(p)).collect(),
                }
            })
            .collect(),
        replacement,
        price_before: cmd.price_before,
        price_after: cmd.price_after,
        savings: cmd.savings(),
    }
}

/// Why each machine (a claim with its node) of a managed pool is not a candidate: its
/// [`verdict::verdict`] (what the host would write on its claim), else why it could not be
/// priced or simulated.
fn not_candidates(
    (view, joined): (&View, &Joined<'_>),
    pools: &BTreeMap<String, &NodePool>,
    candidates: &HashSet<String>,
    now: Timestamp,
    prices: &NodePrices<'_>,
) -> Vec<NodeNote> {
    let (recent, refused) = (HashSet::new(), HashMap::new());
    let facts = verdict::Facts {
        pdbs: &view.pdbs,
        now,
        counts: &joined.counts,
        recent: &recent,
        refused: &refused,
        pending: None,
    };
    let mut out = Vec::new();
    for m in &joined.machines {
        let claim = m.claim.name_any();
        if candidates.contains(&claim) {
            continue;
        }
        let pool_name = m.claim.labels().get(NODEPOOL).cloned().unwrap_or_default();
        // What keeps a machine from being a candidate comes before budgets and searches.
        let blocked = pools
            .get(&pool_name)
            .and_then(|pool| verdict::verdict(m, pool, &facts))
            .filter(|b| {
                !matches!(
                    b,
                    verdict::Blocked::WhenEmpty { .. }
                        | verdict::Blocked::Budget { .. }
                        | verdict::Blocked::InvalidBudget { .. }
                )
            });
        let (reason, code) = match (&blocked, pools.get(&pool_name)) {
            (_, None) => ("no managed NodePool".to_owned(), String::new()),
            (Some(b), Some(_)) => (b.message(), b.reason().to_owned()),
            (None, Some(_)) if prices.in_pool(m.node).is_none() => (
                "its price is unknown: its instance type, zone or capacity type is not in the pool's catalog"
                    .to_owned(),
                String::new(),
            ),
            (None, Some(_)) => ("its pods cannot be simulated".to_owned(), String::new()),
        };
        out.push(NodeNote {
            node: m.node.name_any(),
            node_claim: claim,
            node_pool: pool_name,
            reason,
            verdict: code,
        });
    }
    out
}

#[cfg(test)]
mod tests;
