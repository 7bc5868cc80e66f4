//! One consistent view of the cluster for a provisioning run or a disruption pass: taken from a
//! [`View`] (the host's caches at the start of the run, or a dump in `capstan simulate`), then
//! turned into the scheduler's input with instance types from an [`InstanceTypeSource`] (the
//! host's providers, a component loaded from a file, a fixed catalog). Nothing read during the
//! simulation changes under it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use capstan_dra::Inventory;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;

use crate::api::NodeClass as Class;
use crate::api::shared::{ConditionStatus, find_condition};
use crate::api::{NodeClaim, NodeClass, NodePool};
use crate::rules::selector::Selector;
use crate::scheduling::InstanceType;
use crate::scheduling::convert::claims::ClaimIndex;
use crate::scheduling::convert::volumes::{VolumeIndex, csi_limits};
use crate::scheduling::convert::{self, NamespaceLabels};
use crate::scheduling::devices::NodeDevices;
use crate::scheduling::{self, SchedulingInput};
use crate::state::View;

use super::claims::provider_id;
use super::daemonset_pods::daemonset_pods;
use super::default_spread::DefaultSpread;
use super::limits;
use super::nodes::tainted_disrupted;
use super::pods::{DEVICES_NOT_PROVISIONED, asks_for_devices, is_provisionable, is_reschedulable};

/// The cluster at one moment.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Pods to provision for, in a stable order (namespace, name).
    pub pending: Vec<Arc<Pod>>,
    /// Every pod bound to a node.
    pub bound: Vec<Arc<Pod>>,
    /// Nodes the scheduler may use.
    pub nodes: Vec<Arc<Node>>,
    /// Managed NodeClaims.
    pub claims: Vec<Arc<NodeClaim>>,
    /// Managed NodePools, not being deleted.
    pub pools: Vec<NodePool>,
    /// NodeClasses by name.
    pub classes: HashMap<String, Arc<NodeClass>>,
    /// The pods the DaemonSets would run on a new node ([`daemonset_pods`]), for their
    /// overhead.
    pub daemonset_pods: Vec<Pod>,
    /// Namespace labels, for namespace selectors of affinity terms.
    pub namespaces: NamespaceLabels,
    /// Provider IDs of the nodes that are leaving: their claims are no capacity.
    pub leaving: HashSet<String>,
    /// Persistent volume claims, volumes and storage classes, for volume topology and CSI
    /// attach limits.
    pub volumes: VolumeIndex,
    /// Per node name, how many volumes each CSI driver may attach to it (its CSINode).
    pub volume_limits: HashMap<String, BTreeMap<String, i64>>,
    /// kube-scheduler's default topology spread constraints, when the host is given them.
    pub default_spread: Option<Arc<DefaultSpread>>,
    /// Dynamic Resource Allocation's claims, templates, classes and slices; none when the host
    /// ignores pods' ResourceClaims (then no node is made for such pods).
    pub resource_claims: Option<ClaimIndex>,
}

/// What [`Snapshot::input_from`] built, with what it had to leave out.
#[derive(Debug, Default)]
pub struct Built {
    /// The simulation input; `pods[i]` is `pending[pod_index[i]]`.
    pub input: SchedulingInput,
    /// Index into [`Snapshot::pending`] of each input pod.
    pub pod_index: Vec<usize>,
    /// Pending pods that could not be converted, with why.
    pub rejected: Vec<(usize, String)>,
    /// Pools left out, with why.
    pub skipped_pools: Vec<(String, String)>,
}

/// Why a provisioning run (or part of it) failed.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// `get-instance-types` failed.
    #[error("provider call: {0}")]
    Call(#[from] crate::runtime::CallError),
    /// A NodePool or NodeClass cannot be expressed in the provider contract.
    #[error(transparent)]
    ProviderConvert(#[from] crate::provider::convert::ConvertError),
    /// An object cannot be taken by the scheduler.
    #[error(transparent)]
    SchedulingConvert(#[from] crate::scheduling::convert::ConvertError),
    /// A provider returned an instance type the scheduler cannot use.
    #[error("provider instance type: {0}")]
    InstanceType(String),
    /// A NodePool cannot be provisioned from.
    #[error("{0}")]
    Pool(String),
}

/// Where [`Snapshot::input_from`] gets each pool's instance types: the host's providers
/// ([`crate::controllers::provisioner::instance_types::FromProviders`]) or, in `capstan
/// simulate`, a component loaded from a file.
pub trait InstanceTypeSource {
    /// The instance types `pool` may launch, its `nodeClassRef` resolved against `classes` (the
    /// snapshot's NodeClasses), offerings that cannot launch now marked unavailable.
    fn instance_types(
        &self,
        pool: &NodePool,
        classes: &HashMap<String, Arc<Class>>,
    ) -> impl Future<Output = Result<Arc<[InstanceType]>, ProvisionError>> + Send;

    /// The spend group `pool` shares a limit with (its provider's `spendLimitPerHour`), if any.
    fn spend_group(
        &self,
        _pool: &NodePool,
        _classes: &HashMap<String, Arc<Class>>,
    ) -> Option<limits::SpendGroup> {
        None
    }
}

/// A function of the pool and the classes is a source too (a fixed catalog, in tests and
/// benchmarks).
impl<F> InstanceTypeSource for F
where
    F: Fn(&NodePool, &HashMap<String, Arc<Class>>) -> Result<Arc<[InstanceType]>, ProvisionError>
        + Sync,
{
    fn instance_types(
        &self,
        pool: &NodePool,
        classes: &HashMap<String, Arc<Class>>,
    ) -> impl Future<Output = Result<Arc<[InstanceType]>, ProvisionError>> + Send {
        std::future::ready(self(pool, classes))
    }
}

fn deleting<K: ResourceExt>(object: &K) -> bool {
    object.meta().deletion_timestamp.is_some()
}

/// Nodes whose pods must find a new home: being deleted, belonging to a claim being deleted, or
/// tainted `karpenter.sh/disrupted`.
pub fn leaving_nodes(
    nodes: &[std::sync::Arc<Node>],
    claims: &[std::sync::Arc<NodeClaim>],
) -> HashSet<String> {
    let deleting_claims: HashSet<&str> = claims
        .iter()
        .filter(|c| deleting(c.as_ref()))
        .filter_map(|c| provider_id(c))
        .collect();
    nodes
        .iter()
        .filter(|n| {
            deleting(n.as_ref())
                || n.spec
                    .as_ref()
                    .and_then(|s| s.provider_id.as_deref())
                    .is_some_and(|id| deleting_claims.contains(id))
                || tainted_disrupted(n)
        })
        .map(|n| n.name_any())
        .collect()
}

impl Snapshot {
    /// The cluster as `view` holds it (the host's caches, or a dump in `capstan simulate`): no
    /// API request. Pods on nodes that are leaving (being deleted, their claim being deleted, or
    /// tainted `karpenter.sh/disrupted` by a disruption under way) count as pending and their
    /// nodes as gone, so their replacements are provisioned before the pods are evicted
    /// (Karpenter's provisioning for deleting nodes). Pods and nodes that `selector` does not
    /// match are left out.
    pub fn from_view(view: &View, selector: &Selector) -> Self {
        let leaving = leaving_nodes(&view.nodes, &view.claims);
        let mut pending = Vec::new();
        let mut bound = Vec::new();
        for pod in &view.pods {
            let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
            match node {
                Some(node) if leaving.contains(node) => {
                    if is_reschedulable(pod) && selector.matches(pod.labels()) {
                        pending.push(pod.clone());
                    }
                }
                Some(_) => bound.push(pod.clone()),
                None => {
                    if is_provisionable(pod) && selector.matches(pod.labels()) {
                        pending.push(pod.clone());
                    }
                }
            }
        }
        pending.sort_by_key(|p| (p.namespace(), p.name_any()));
        let nodes = view
            .nodes
            .iter()
            .filter(|n| !leaving.contains(n.name_any().as_str()) && selector.matches(n.labels()))
            .cloned()
            .collect();
        Self {
            pending,
            bound,
            nodes,
            claims: view.claims.clone(),
            pools: view
                .pools
                .iter()
                .filter(|p| !deleting(p.as_ref()))
                .map(|p| p.as_ref().clone())
                .collect(),
            // Shared, not copied: a class may hold a whole catalog (the kwok provider's does).
            classes: view.classes.clone(),
            daemonset_pods: daemonset_pods(
                view.daemonsets.iter().map(AsRef::as_ref),
                view.pods.iter().map(AsRef::as_ref),
            ),
            namespaces: view.namespaces.clone(),
            leaving: view
                .nodes
                .iter()
                .filter(|n| leaving.contains(n.name_any().as_str()))
                .filter_map(|n| n.spec.as_ref()?.provider_id.clone())
                .collect(),
            volumes: VolumeIndex::new(
                view.volume_claims.iter().map(AsRef::as_ref),
                view.volumes.iter().map(AsRef::as_ref),
                view.storage_classes.iter().map(AsRef::as_ref),
            ),
            volume_limits: view
                .csi_nodes
                .iter()
                .map(|c| (c.name_any(), csi_limits(c)))
                .filter(|(_, limits)| !limits.is_empty())
                .collect(),
            default_spread: view.default_spread.clone(),
            resource_claims: view
                .dra
                .as_ref()
                .map(|dra| ClaimIndex::new(&dra.claims, &dra.templates, &dra.classes, &dra.slices)),
        }
    }

    /// The claim a static pool (`spec.replicas`) adds next, if its template and limits allow one:
    /// what the solver opens for one empty pod that selects the pool and tolerates everything, so
    /// the claim lists every instance type the pool can launch (cheapest first) and requests
    /// nothing.
    pub async fn static_claim(
        &self,
        source: &impl InstanceTypeSource,
        pool: &NodePool,
    ) -> Result<Result<scheduling::NewClaim, String>, ProvisionError> {
        let groups = self.spend_groups(source);
        let mut view = self.pool_view(source, pool, &groups).await?;
        limits::share_spend_groups(std::slice::from_mut(&mut view), &groups, &self.claims);
        let mut pod = scheduling::Pod::new("", "static-capacity", scheduling::Resources::default());
        pod.node_selector
            .insert(crate::api::labels::NODEPOOL.to_owned(), pool.name_any());
        pod.tolerations.push(scheduling::Toleration {
            operator: scheduling::TolerationOperator::Exists,
            ..scheduling::Toleration::default()
        });
        let input = SchedulingInput {
            pods: vec![pod],
            node_pools: vec![view],
            ..SchedulingInput::default()
        };
        let mut result = scheduling::solve(&input);
        if let Some((_, why)) = result.unschedulable.pop() {
            return Ok(Err(why));
        }
        Ok(result
            .new_claims
            .pop()
            .map(|mut claim| {
                claim.requests = scheduling::Resources::default();
                claim.pods.clear();
                claim
            })
            .ok_or_else(|| "no claim".to_owned()))
    }

    /// Whether kube-scheduler's default topology spread constraints apply to `pod` (it is
    /// converted with them by [`Snapshot::pod`]).
    pub fn spread_by_default(&self, pod: &Pod) -> bool {
        self.default_spread
            .as_ref()
            .is_some_and(|d| d.for_pod(pod).is_some())
    }

    /// `pod` as the scheduler sees it, with where its volumes let it run and the default
    /// topology spread constraints it gets.
    pub fn pod(&self, pod: &Pod) -> Result<scheduling::Pod, String> {
        let defaulted = self.default_spread.as_ref().and_then(|d| {
            let constraints = d.for_pod(pod)?;
            let mut copy = pod.clone();
            copy.spec.as_mut()?.topology_spread_constraints = Some(constraints);
            Some(copy)
        });
        let pod = defaulted.as_ref().unwrap_or(pod);
        let mut converted = convert::pod(pod, &self.namespaces).map_err(|err| err.to_string())?;
        converted.volume_requirements = self
            .volumes
            .requirements(pod)
            .map_err(|err| err.to_string())?;
        converted.csi_volumes = self.volumes.csi_volumes(pod);
        if let Some(claims) = &self.resource_claims {
            // A bound pod is one a disruption would move: its claims' requests go with it.
            let bound = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
            converted.devices = claims
                .pod_devices(pod, bound)
                .map_err(|err| err.to_string())?;
        }
        Ok(converted)
    }

    /// The simulation input: pending pods, pools with their instance types (from `source`) and
    /// remaining limits, existing nodes with their pods, in-flight claims and DaemonSet templates.
    pub async fn input_from(&self, source: &impl InstanceTypeSource) -> Built {
        let mut built = Built::default();
        for (i, pod) in self.pending.iter().enumerate() {
            if self.resource_claims.is_none() && asks_for_devices(pod) {
                built.rejected.push((i, DEVICES_NOT_PROVISIONED.to_owned()));
                continue;
            }
            match self.pod(pod) {
                Ok(p) => {
                    built.input.pods.push(p);
                    built.pod_index.push(i);
                }
                Err(err) => built.rejected.push((i, err)),
            }
        }
        // Every pool's catalog at once: one provider's slow answer does not add to another's.
        let groups = self.spend_groups(source);
        let mut asked = Vec::new();
        for pool in &self.pools {
            let name = pool.name_any();
            match not_for_dynamic_provisioning(pool) {
                Some(why) => built.skipped_pools.push((name, why)),
                None => asked.push((name, self.pool_view(source, pool, &groups))),
            }
        }
        let (names, views): (Vec<String>, Vec<_>) = asked.into_iter().unzip();
        for (name, view) in names
            .into_iter()
            .zip(futures::future::join_all(views).await)
        {
            match view {
                Ok(view) => built.input.node_pools.push(view),
                Err(err) => {
                    tracing::warn!(nodepool = %name, error = %err, "nodepool left out of provisioning");
                    built.skipped_pools.push((name, err.to_string()));
                }
            }
        }
        limits::share_spend_groups(&mut built.input.node_pools, &groups, &self.claims);
        let mut by_node: HashMap<&str, Vec<&Pod>> = HashMap::new();
        for pod in &self.bound {
            if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                by_node.entry(node).or_default().push(pod);
            }
        }
        // A claim and its Node are one machine: once the Node exists (registered or not) it stands
        // for the claim, simulated as it will be once initialized; until then the claim is in
        // flight.
        let live_claims: Vec<&NodeClaim> = self
            .claims
            .iter()
            .map(Arc::as_ref)
            .filter(|c| !deleting(*c) && provider_id(c).is_none_or(|id| !self.leaving.contains(id)))
            .collect();
        let claim_of_node: HashMap<&str, &NodeClaim> = live_claims
            .iter()
            .filter_map(|c| Some((provider_id(c)?, *c)))
            .collect();
        let mut represented = HashSet::new();
        for node in &self.nodes {
            let name = node.name_any();
            let pods = by_node.get(name.as_str()).map_or(&[][..], Vec::as_slice);
            let claim = node
                .spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .and_then(|id| claim_of_node.get(id).copied());
            if let Some(claim) = claim {
                represented.insert(claim.name_any());
            }
            match convert::node(node, pods, &self.namespaces, claim) {
                Ok(mut n) => {
                    if let Some(claims) = &self.resource_claims {
                        n.devices = claims.node_devices(&name).or_else(|| {
                            template_devices(
                                &built.input.node_pools,
                                n.node_pool.as_deref(),
                                &n.labels,
                            )
                        });
                    }
                    if let Some(limits) = self.volume_limits.get(&name) {
                        n.volume_limits = limits.clone();
                        // The volumes of its pods count against its limits.
                        for converted in &mut n.pods {
                            let pod = pods.iter().find(|p| {
                                p.metadata.name.as_deref() == Some(converted.name.as_str())
                                    && p.metadata.namespace.as_deref()
                                        == Some(converted.namespace.as_str())
                            });
                            if let Some(pod) = pod {
                                // Converted a moment ago: not shared yet, so not copied.
                                Arc::make_mut(converted).csi_volumes =
                                    self.volumes.csi_volumes(pod);
                            }
                        }
                    }
                    built.input.existing_nodes.push(n)
                }
                Err(err) => {
                    tracing::warn!(node = %name, error = %err, "node left out of provisioning")
                }
            }
        }
        for claim in live_claims {
            if represented.contains(&claim.name_any()) {
                continue;
            }
            match inflight(claim, &self.namespaces) {
                Ok(mut c) => {
                    if self.resource_claims.is_some() {
                        c.devices = template_devices(
                            &built.input.node_pools,
                            c.node_pool.as_deref(),
                            &claim.metadata.labels.clone().unwrap_or_default(),
                        );
                    }
                    built.input.inflight_claims.push(c)
                }
                Err(err) => {
                    tracing::warn!(nodeclaim = %claim.name_any(), error = %err, "in-flight claim left out")
                }
            }
        }
        for pod in &self.daemonset_pods {
            match convert::pod(pod, &self.namespaces) {
                Ok(p) => built.input.daemonset_pods.push(p),
                Err(err) => {
                    tracing::debug!(daemonset = %pod.name_any(), error = %err, "daemonset left out")
                }
            }
        }
        built
    }

    /// The spend group of every pool that has one, by pool name.
    fn spend_groups(
        &self,
        source: &impl InstanceTypeSource,
    ) -> HashMap<String, limits::SpendGroup> {
        self.pools
            .iter()
            .filter_map(|pool| Some((pool.name_any(), source.spend_group(pool, &self.classes)?)))
            .collect()
    }

    async fn pool_view(
        &self,
        source: &impl InstanceTypeSource,
        pool: &NodePool,
        groups: &HashMap<String, limits::SpendGroup>,
    ) -> Result<scheduling::NodePoolView, ProvisionError> {
        let types = source.instance_types(pool, &self.classes).await?;
        let mut view = convert::node_pool(pool, types)?;
        if let Some(group) = groups.get(&pool.name_any()) {
            limits::join_spend_group(&mut view, group);
        }
        view.instance_types = limits::with_price_capacity(
            view.limits.as_ref(),
            std::mem::take(&mut view.instance_types),
        );
        // Every claim of the pool counts against its limits, not only what its status shows.
        let usage = limits::claim_usage(&pool.name_any(), &self.claims, &view.instance_types);
        view.remaining = limits::remaining(view.limits.as_ref(), pool, &usage);
        Ok(view)
    }
}

/// The devices a node of the instance type its `labels` name, in NodePool `pool`, will carry
/// (its provider's templates): what a node stands for until its drivers publish slices.
fn template_devices(
    pools: &[scheduling::NodePoolView],
    pool: Option<&str>,
    labels: &BTreeMap<String, String>,
) -> Option<NodeDevices> {
    let instance_type = labels.get(crate::api::labels::INSTANCE_TYPE)?;
    let view = pools.iter().find(|p| Some(p.name.as_str()) == pool)?;
    let it = view
        .instance_types
        .iter()
        .find(|t| &t.name == instance_type)?;
    if it.devices.is_empty() {
        return None;
    }
    let templates: Vec<_> = it.devices.iter().map(|t| (**t).clone()).collect();
    Inventory::from_templates(&templates).ok().map(NodeDevices)
}

/// Why `pool` takes no part in provisioning for pending pods, if it does not: a static pool
/// (`spec.replicas`) keeps its own count and is never used for pending pods, and a pool whose
/// `Ready` condition is `False` is left out as Karpenter leaves it out (a pool whose status is
/// not written yet is used: Capstan does not wait a status round for a new pool).
pub fn not_for_dynamic_provisioning(pool: &NodePool) -> Option<String> {
    if pool.spec.replicas.is_some() {
        return Some("a static nodepool (spec.replicas) is not used for pending pods".to_owned());
    }
    let ready = pool
        .status
        .as_ref()
        .and_then(|s| find_condition(&s.conditions, crate::api::nodepool::conditions::READY))?;
    (ready.status == ConditionStatus::False).then(|| {
        format!(
            "nodepool is not ready: {}",
            ready
                .message
                .as_deref()
                .filter(|m| !m.is_empty())
                .or(ready.reason.as_deref())
                .unwrap_or("Ready=False")
        )
    })
}

/// An in-flight claim. Before launch it has no allocatable yet: what it was sized for (its
/// requests) stands in, so pods nominated to it in an earlier batch pack onto it again instead of
/// opening a second claim.
fn inflight(
    claim: &NodeClaim,
    namespaces: &NamespaceLabels,
) -> Result<scheduling::InflightClaim, convert::ConvertError> {
    let has_allocatable = claim
        .status
        .as_ref()
        .is_some_and(|s| !s.allocatable.is_empty());
    if has_allocatable {
        return convert::inflight_claim(claim, &[], namespaces);
    }
    let mut claim = claim.clone();
    let requests: BTreeMap<_, _> = claim
        .spec
        .resources
        .as_ref()
        .map(|r| r.requests.clone())
        .unwrap_or_default();
    claim
        .status
        .get_or_insert_with(Default::default)
        .allocatable = requests;
    convert::inflight_claim(&claim, &[], namespaces)
}
