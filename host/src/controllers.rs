//! The controllers: the NodeClaim lifecycle (launch, registration, initialization, liveness,
//! termination), garbage collection, the NodeClass and NodePool status controllers, the
//! provisioner that turns unschedulable pods into NodeClaims, disruption (drift and
//! expiration) that replaces and removes them, node repair (behind its feature gate), and the
//! metrics controller that keeps the cluster gauges of `/metrics` current.
//!
//! All are level-triggered and idempotent (kube-rs `Controller`s plus one periodic loop): a
//! restart at any point converges. [`run`] starts them all and runs until one stops.

pub mod capacity_buffers;
pub mod disruption;
pub mod evaluations;
pub mod events;
pub mod finalizer;
pub mod garbage_collection;
pub mod metrics;
pub mod node_class_kinds;
pub mod node_overlays;
pub mod node_repair;
pub mod nodeclaim;
pub mod nodeclass_status;
pub mod nodepool_status;
pub mod providers;
pub mod provisioner;
pub mod resolve;
pub mod static_pools;
pub mod unavailable_offerings;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;

use crate::metrics::Metrics;
use crate::provider::Registry;
use crate::provider::convert::ConvertError;
use crate::rules::selector::Selector;
use crate::runtime::CallError;
use crate::state::ClusterState;

/// Why a controller step failed (the controller retries with backoff).
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A provider call failed.
    #[error("provider call: {0}")]
    Call(#[from] CallError),
    /// An object cannot be expressed in the provider contract.
    #[error(transparent)]
    Convert(#[from] ConvertError),
    /// The initial list of a watch failed.
    #[error("waiting for the node cache: {0}")]
    Cache(String),
    /// A controller stopped.
    #[error("controller {0} stopped")]
    Stopped(&'static str),
    /// An object could not be serialized.
    #[error("serializing: {0}")]
    Json(#[from] serde_json::Error),
    /// The selector does not parse.
    #[error(transparent)]
    Selector(#[from] crate::rules::selector::SelectorError),
}

/// Whether `err` is an HTTP 409 from the API server: the object changed since it was read (an
/// optimistic status write lost a race) or already exists. Normal under load; the reconcile runs
/// again on the fresh object.
pub fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 409)
}

/// How soon a reconcile that lost a write race runs again (the watch brings the new version).
pub const CONFLICT_RETRY: Duration = Duration::from_secs(1);

impl ControllerError {
    /// Whether this is a conflict ([`is_conflict`]).
    pub fn is_conflict(&self) -> bool {
        matches!(self, ControllerError::Kube(err) if is_conflict(err))
    }
}

/// Logs a failed reconcile of `kind` `name` and says when to retry: a conflict quietly (debug)
/// and soon, without growing the object's backoff; anything else at warn, after `backoff()`.
pub fn retry_after(
    kind: &str,
    name: &str,
    err: &ControllerError,
    backoff: impl FnOnce() -> Duration,
) -> Duration {
    if err.is_conflict() {
        tracing::debug!(kind, name, error = %err, "write conflict; retrying");
        CONFLICT_RETRY
    } else {
        tracing::warn!(kind, name, error = %err, "reconcile failed");
        backoff()
    }
}

/// Tunables of the controllers.
#[derive(Debug, Clone)]
pub struct Settings {
    /// A claim not launched this long after creation is deleted. Default 15 min.
    pub launch_timeout: Duration,
    /// A launched claim whose Node has not registered this long after launch is deleted.
    /// Default 15 min.
    pub registration_timeout: Duration,
    /// How often garbage collection runs. Default 30 s.
    pub gc_interval: Duration,
    /// Instances (and launched claims) younger than this are never garbage-collected. Default 30 s.
    pub gc_grace: Duration,
    /// Manage only NodeClaims, NodePools and NodeClasses with these labels (and collect only
    /// instances with them); none manages everything. Lets several hosts share a cluster (tests).
    pub selector: Option<String>,
    /// The reporting controller name on Events.
    pub reporter: String,
    /// The provisioner's batching windows (idle 1 s, max 10 s).
    pub batch: provisioner::batcher::Windows,
    /// Told when the controllers' caches have synced (for `/readyz`).
    pub readiness: crate::serve::Readiness,
    /// Consolidation's knobs.
    pub consolidation: disruption::consolidation::Settings,
    /// How the simulation treats pods' preferences (`--preference-policy`).
    pub preference_policy: crate::scheduling::PreferencePolicy,
    /// How the simulation treats `minValues` (`--min-values-policy`).
    pub min_values_policy: crate::scheduling::MinValuesPolicy,
    /// Node repair (`--feature-gates NodeRepair=true`): off by default, as in Karpenter.
    pub node_repair: bool,
    /// NodeOverlays (`--feature-gates NodeOverlay=true`): off by default, as in Karpenter v1.14.
    pub node_overlay: bool,
    /// CapacityBuffers (`--feature-gates CapacityBuffer=true`): off by default, as in Karpenter
    /// v1.14.
    pub capacity_buffer: bool,
    /// `--feature-gates TerminateFirstDrift=true`: a drifted node of a static NodePool at its
    /// node limit is deleted first and refilled after, rather than left (off by default, as in
    /// Karpenter v1.15).
    pub terminate_first_drift: bool,
    /// kube-scheduler's configuration the simulation mirrors (`--scheduler-config`), when it
    /// has default topology spread constraints.
    pub scheduler: Option<crate::rules::default_spread::SchedulerConfig>,
    /// Provision for pods' ResourceClaims (Dynamic Resource Allocation): watch the claims, their
    /// templates, DeviceClasses and ResourceSlices, and launch only instance types whose devices
    /// satisfy them. On by default; `--ignore-dra-requests` (Karpenter's `IGNORE_DRA_REQUESTS`,
    /// on by default there) turns it off, and then no node is made for such pods.
    pub dynamic_resources: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            launch_timeout: Duration::from_secs(15 * 60),
            registration_timeout: Duration::from_secs(15 * 60),
            gc_interval: Duration::from_secs(30),
            gc_grace: Duration::from_secs(30),
            selector: None,
            reporter: "capstan".to_owned(),
            batch: provisioner::batcher::Windows::default(),
            readiness: crate::serve::Readiness::default(),
            consolidation: disruption::consolidation::Settings::default(),
            preference_policy: crate::scheduling::PreferencePolicy::default(),
            min_values_policy: crate::scheduling::MinValuesPolicy::default(),
            node_repair: false,
            node_overlay: false,
            capacity_buffer: false,
            terminate_first_drift: false,
            scheduler: None,
            dynamic_resources: true,
        }
    }
}

/// What [`run`] needs.
#[derive(Clone)]
pub struct Config {
    /// The workload cluster.
    pub client: Client,
    /// The live providers.
    pub registry: Arc<Registry>,
    /// Tunables.
    pub settings: Settings,
    /// Load providers from `Provider` resources (none: only the providers already in the
    /// registry serve).
    pub providers: Option<ProvidersSetup>,
}

/// What the Provider controller needs.
#[derive(Debug, Clone)]
pub struct ProvidersSetup {
    /// Compiles and links components.
    pub loader: Arc<crate::provider::Loader>,
    /// Its tunables.
    pub settings: providers::Settings,
    /// How long to wait for the Providers to load before starting the other controllers anyway.
    pub initial_load_timeout: Duration,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("providers", &self.registry.names())
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Shared state of the controllers.
pub struct Context {
    /// The workload cluster.
    pub client: Client,
    /// The live providers.
    pub registry: Arc<Registry>,
    /// Tunables.
    pub settings: Settings,
    /// The parsed [`Settings::selector`].
    pub selector: Selector,
    /// The Event recorder.
    pub events: events::Events,
    /// Every Node of the cluster (the store of [`ClusterState::nodes`]).
    pub nodes: Store<Node>,
    /// The caches the provisioner and disruption decide over.
    pub state: Arc<ClusterState>,
    /// Instance types per NodePool and NodeClass, shared by the provisioner and disruption.
    pub instance_types: crate::catalog::InstanceTypeCache,
    /// Metrics.
    pub metrics: &'static Metrics,
    /// Offerings recently out of capacity, avoided by launch.
    pub unavailable_offerings: unavailable_offerings::UnavailableOfferings,
    /// Drain Events published lately (one per distinct note, not one per retry).
    pub drain_events: nodeclaim::termination::Dedupe,
    /// CapacityBuffers' virtual pods and the room they hold.
    pub buffers: capacity_buffers::Buffers,
    /// Provider IDs launches wrote lately (two launches never take one ID).
    pub launched_ids: nodeclaim::ownership::LaunchedIds,
    /// When this process began issuing each reboot under way.
    pub reboots_issuing: nodeclaim::reboot::Issuing,
    failures: Mutex<HashMap<String, u32>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("settings", &self.settings)
            .field("providers", &self.registry.names())
            .finish_non_exhaustive()
    }
}

impl Context {
    /// The watcher configuration of managed objects.
    pub fn watcher_config(&self) -> watcher::Config {
        match &self.settings.selector {
            Some(selector) => watcher::Config::default().labels(selector),
            None => watcher::Config::default(),
        }
    }

    /// Counts a failure of `key` and returns the delay before the next attempt (1 s doubling,
    /// at most 5 min).
    pub fn backoff(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let n = failures.entry(key.to_owned()).or_insert(0);
        *n = n.saturating_add(1);
        let exp = (*n - 1).min(9);
        Duration::from_secs(1u64 << exp).min(Duration::from_secs(300))
    }

    /// How many times in a row `key` failed.
    pub fn failures(&self, key: &str) -> u32 {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// Forgets the failures of `key`.
    pub fn reset_backoff(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }

    /// Records a provider call of `controller` (Karpenter's controller name, see
    /// [`crate::metrics::cloudprovider::controller`]) for `nodepool` (empty when it covers
    /// several): its duration, its error category when it failed, and the provider's health
    /// ([`Metrics::provider_call`]).
    pub fn observe_call<T>(
        &self,
        controller: &str,
        provider: &str,
        function: &'static str,
        nodepool: &str,
        result: &Result<T, CallError>,
        started: Instant,
    ) {
        self.metrics.provider_call(
            controller,
            provider,
            function,
            nodepool,
            started.elapsed(),
            result,
        );
    }
}

/// Now, as a Kubernetes time.
pub fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// A JSON merge patch of the cluster-scoped object `name` of kind `K` (a Node's taints, a
/// claim's annotations): the object as the API server holds it afterwards.
pub async fn merge_patch<K>(
    client: &Client,
    name: &str,
    patch: &serde_json::Value,
) -> Result<K, kube::Error>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    kube::Api::<K>::all(client.clone())
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
}

/// Milliseconds from `then` to now (negative if `then` is in the future).
pub fn millis_since(then: &Time) -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_millisecond() - then.0.as_millisecond()
}

/// Starts every controller and runs until one of them stops.
pub async fn run(config: Config) -> Result<(), ControllerError> {
    let selector = Selector::parse(config.settings.selector.as_deref().unwrap_or(""))?;
    let state = Arc::new(ClusterState::new(
        config.settings.scheduler.clone(),
        config.settings.dynamic_resources,
    ));
    let node_changes = state.nodes.subscribe();
    let managed = match &config.settings.selector {
        Some(selector) => watcher::Config::default().labels(selector),
        None => watcher::Config::default(),
    };
    let state_tasks = state
        .run(&config.client, managed)
        .await
        .map_err(|err| ControllerError::Cache(err.to_string()))?;
    let nodes = state.nodes.store();
    config.settings.readiness.set_caches_synced(true);
    let provider_task = match &config.providers {
        Some(setup) => {
            let mut settings = setup.settings.clone();
            settings.selector = config.settings.selector.clone();
            let controller = providers::ProviderController::new(
                config.client.clone(),
                Arc::clone(&config.registry),
                Arc::clone(&setup.loader),
                settings,
            );
            let state = controller.state();
            let task = tokio::spawn(controller.run());
            // The other controllers start once the providers are in, so that claims do not see
            // a provider missing that is only not loaded yet.
            let deadline = Instant::now() + setup.initial_load_timeout;
            while !state.synced() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if !state.synced() {
                tracing::warn!(
                    timeout = ?setup.initial_load_timeout,
                    "providers not all loaded in time; starting the controllers anyway"
                );
            }
            Some(task)
        }
        None => None,
    };
    config.settings.readiness.set_providers_loaded(true);
    let ctx = Arc::new(Context {
        events: events::Events::new(config.client.clone(), &config.settings.reporter),
        client: config.client,
        registry: config.registry,
        settings: config.settings,
        selector,
        nodes,
        state,
        instance_types: crate::catalog::InstanceTypeCache::default(),
        metrics: crate::metrics::global(),
        unavailable_offerings: unavailable_offerings::UnavailableOfferings::default(),
        drain_events: nodeclaim::termination::Dedupe::default(),
        launched_ids: nodeclaim::ownership::LaunchedIds::default(),
        reboots_issuing: nodeclaim::reboot::Issuing::default(),
        buffers: capacity_buffers::Buffers::default(),
        failures: Mutex::new(HashMap::new()),
    });
    if ctx.settings.node_overlay {
        ctx.instance_types.enable_overlays();
    }
    tracing::info!(providers = ?ctx.registry.names(), selector = ?ctx.settings.selector, "controllers starting");
    let result = tokio::select! {
        () = nodeclaim::run(Arc::clone(&ctx), node_changes) => Err(ControllerError::Stopped("nodeclaim")),
        () = nodeclass_status::run(Arc::clone(&ctx)) => Err(ControllerError::Stopped("nodeclass-status")),
        () = node_class_kinds::run(Arc::clone(&ctx)) => Err(ControllerError::Stopped("node-class-kinds")),
        () = nodepool_status::run(Arc::clone(&ctx)) => Err(ControllerError::Stopped("nodepool-status")),
        () = nodepool_status::report_unparseable(Arc::clone(&ctx)) => Err(ControllerError::Stopped("nodepool-parse-report")),
        () = garbage_collection::run(Arc::clone(&ctx)) => Err(ControllerError::Stopped("garbage-collection")),
        () = provisioner::run(Arc::clone(&ctx)) => Err(ControllerError::Stopped("provisioner")),
        () = disruption::run(Arc::clone(&ctx)) => Err(ControllerError::Stopped("disruption")),
        () = static_pools::run(Arc::clone(&ctx)) => Err(ControllerError::Stopped("static-pools")),
        () = metrics::run(Arc::clone(&ctx)) => Err(ControllerError::Stopped("metrics")),
        () = node_repair::run(Arc::clone(&ctx)) => Err(ControllerError::Stopped("node-repair")),
        () = node_overlays::run(Arc::clone(&ctx)) => Err(ControllerError::Stopped("node-overlays")),
        () = capacity_buffers::run(Arc::clone(&ctx)) => Err(ControllerError::Stopped("capacity-buffers")),
    };
    for task in state_tasks {
        task.abort();
    }
    if let Some(task) = provider_task {
        task.abort();
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "message": "the object has been modified", "reason": "Conflict", "code": code
        }))
        .unwrap();
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn conflicts_retry_soon_without_backoff() {
        let conflict = ControllerError::Kube(api_error(409));
        assert!(conflict.is_conflict());
        let mut asked = false;
        let delay = retry_after("NodeClaim", "c", &conflict, || {
            asked = true;
            Duration::from_secs(64)
        });
        assert_eq!(delay, CONFLICT_RETRY);
        assert!(!asked, "a conflict does not count as a failure");

        let other = ControllerError::Kube(api_error(500));
        assert!(!other.is_conflict());
        assert_eq!(
            retry_after("NodeClaim", "c", &other, || Duration::from_secs(64)),
            Duration::from_secs(64)
        );
        assert!(!ControllerError::Stopped("x").is_conflict());
    }
}
