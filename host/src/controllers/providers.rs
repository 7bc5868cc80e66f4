//! The Provider controller: loads each `capstan.dev/v1alpha1` Provider's component from its
//! ConfigMap (or the ConfigMaps a split component's parts are in) or its OCI artifact into the
//! [`Registry`](crate::provider::Registry), and hot-reloads it when one of them or the Provider
//! changes, or an OCI tag moves (tags are polled every `pollInterval`).
//!
//! Loading is read (or pull) → decompress → verify the pin → verify the signature (when
//! `spec.verification` asks; an unsigned or wrongly signed component is never compiled) → compile (through the on-disk cache) →
//! validate (WIT package, version, exports) → link with the Provider's grants and limits → a
//! `name()` self-check → an atomic swap into the registry. Calls in flight keep the version they
//! started on; new calls get the new one. A bad update is rejected: the last good version keeps
//! serving, `Degraded=True` says why, and a Warning Event records it. Deleting a Provider unloads
//! it (its NodeClasses turn not ready; no NodeClaim is touched).
//!
//! What a Provider points to besides its component (contract 0.2: the Secrets of `spec.config`,
//! the CA bundle of `spec.egressCABundle`) is read on every reconcile, and the Secrets and
//! ConfigMaps of the source namespace are watched: a rotated Secret is handed to the serving
//! version without a reload (the next call sees it). A missing Secret or key is `Ready=False`
//! with its reason; a version already serving keeps its last good values.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::api::ConditionStatus;
use crate::api::provider::Provider;
use crate::api::shared::set_condition;
use crate::capability::config::ConfigValues;
use crate::capability::kube::{Denial, DenialReason, DenialSink};
use crate::capability::outbound_http::{self, HttpSettings};
use crate::controllers::events::Events;
use crate::controllers::now;
use crate::provider::fetch::{self, FetchError, FetchSettings};
use crate::provider::health::Verdict;
use crate::provider::oci::{self, OciError};
use crate::provider::source::{self, SourceError};
use crate::provider::verify::VerifyError;
use crate::provider::{Loader, ProviderLoadError, ProviderSource, Registry, spec};
use crate::runtime::{LoadError, ProviderPre};

/// The condition saying whether a version of the provider is serving.
pub const READY: &str = "Ready";
/// The condition saying whether the latest source was refused (the last good one serving).
pub const DEGRADED: &str = "Degraded";
/// Condition: whether the serving version does its job ([`crate::provider::health`]): False
/// once a function failed 3 times in a row, True again at its next working call.
pub const HEALTHY: &str = "Healthy";
/// Condition: whether every grant is `scope: owned` (False names the `scope: any` ones; it does
/// not block Ready, it flags them).
pub const GRANTS_SCOPED: &str = "GrantsScoped";

/// Why a reconcile failed in a way worth retrying (API errors); rejections of the source are
/// not errors but status.
#[derive(Debug, thiserror::Error)]
pub enum ProviderControllerError {
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The loader task died.
    #[error("the loader task failed: {0}")]
    Join(String),
}

/// Tunables of the Provider controller.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Read source ConfigMaps only in this namespace (least privilege: the host needs no
    /// cluster-wide ConfigMap access); none reads any namespace.
    pub source_namespace: Option<String>,
    /// Largest component accepted, after decompression.
    pub max_component_size: usize,
    /// How often every Provider is re-checked even without a change. Default 5 min.
    pub resync: Duration,
    /// The reporting controller on Events.
    pub reporter: String,
    /// At most one `PermissionDenied` Event per provider and call this often. Default 30 s.
    pub denial_event_interval: Duration,
    /// Load only Providers with these labels (`k=v,...`); none loads every Provider.
    pub selector: Option<String>,
    /// Where layers pulled from OCI registries are cached by digest; none keeps no copy.
    pub oci_cache: Option<std::path::PathBuf>,
    /// Refuse every Provider without `spec.verification`.
    pub require_verification: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            source_namespace: None,
            max_component_size: crate::runtime::validate::DEFAULT_MAX_COMPONENT_SIZE,
            resync: Duration::from_secs(300),
            reporter: "capstan".to_owned(),
            denial_event_interval: Duration::from_secs(30),
            selector: None,
            oci_cache: None,
            require_verification: false,
        }
    }
}

/// A source the controller refused: the condition reason and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The condition and Event reason.
    pub reason: &'static str,
    /// What is wrong.
    pub message: String,
    /// Whether the Provider is not Ready even while a version serves (a missing Secret: the
    /// version serves with its last good values, but what the admin wrote does not work).
    pub blocks_ready: bool,
}

impl Rejection {
    fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            blocks_ready: false,
        }
    }
}

impl From<SourceError> for Rejection {
    fn from(err: SourceError) -> Self {
        Rejection::new(err.reason(), err.to_string())
    }
}

impl From<OciError> for Rejection {
    fn from(err: OciError) -> Self {
        Rejection::new(err.reason(), err.to_string())
    }
}

impl From<VerifyError> for Rejection {
    /// A refused signature keeps the Provider not Ready, even while the last good version serves.
    fn from(err: VerifyError) -> Self {
        Rejection {
            blocks_ready: true,
            ..Rejection::new(err.reason(), err.to_string())
        }
    }
}

impl From<oci::auth::AuthError> for Rejection {
    fn from(err: oci::auth::AuthError) -> Self {
        Rejection {
            blocks_ready: true,
            ..Rejection::new("InvalidPullSecret", err.to_string())
        }
    }
}

/// A fetch's refusal as the Provider's status, or the API failing as an error to retry.
fn rejected<T>(err: FetchError) -> Result<Result<T, Rejection>, ProviderControllerError> {
    Ok(Err(match err {
        FetchError::Kube(err) => return Err(err.into()),
        FetchError::Source(err) => err.into(),
        FetchError::Oci(err) => err.into(),
        FetchError::Auth(err) => err.into(),
        FetchError::Verify(err) => err.into(),
        FetchError::InvalidSource => {
            Rejection::new("InvalidSource", FetchError::InvalidSource.to_string())
        }
    }))
}

impl From<spec::SpecError> for Rejection {
    fn from(err: spec::SpecError) -> Self {
        Rejection {
            blocks_ready: err.blocks_ready(),
            ..Rejection::new(err.reason(), err.to_string())
        }
    }
}

impl From<ProviderLoadError> for Rejection {
    fn from(err: ProviderLoadError) -> Self {
        let ProviderLoadError::Load { source, .. } = &err;
        let reason = match source {
            LoadError::Invalid(_) => "InvalidComponent",
            LoadError::Compile(_) => "CompileFailed",
            LoadError::Link(_) => "LinkFailed",
            LoadError::Mismatch { .. } => "ContractMismatch",
            LoadError::Engine(_) => "EngineFailed",
        };
        Rejection::new(reason, source.to_string())
    }
}

/// What the controller knows about one provider.
#[derive(Debug, Default, Clone)]
struct Record {
    /// The digest serving (loaded by this controller).
    digest: Option<String>,
    /// The Provider generation that version was loaded with.
    generation: Option<i64>,
    /// The generation the last reconcile looked at, and whether it was refused.
    observed: Option<i64>,
    rejection: Option<Rejection>,
    /// OCI sources: the manifest digest of the version serving.
    artifact_digest: Option<String>,
    /// The key that verified the version serving.
    signed_by: Option<String>,
}

/// The controller's state, shared with readiness checks.
#[derive(Debug, Default)]
pub struct ProviderState {
    records: Mutex<HashMap<String, Record>>,
    /// The Providers of the initial list, once it is in.
    initial: Mutex<Option<HashSet<String>>>,
}

impl ProviderState {
    /// Whether the initial list of Providers is in and each of them has been handled once
    /// (loaded or refused) or deleted since.
    pub fn synced(&self) -> bool {
        let initial = self.initial.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(initial) = initial.as_ref() else {
            return false;
        };
        let records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        initial
            .iter()
            .all(|name| records.get(name).is_some_and(|r| r.observed.is_some()))
    }

    fn record(&self, name: &str) -> Record {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
            .unwrap_or_default()
    }

    fn update(&self, name: &str, f: impl FnOnce(&mut Record)) {
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        f(records.entry(name.to_owned()).or_default());
    }

    /// Forgets a deleted Provider; whether this controller had loaded it.
    fn forget(&self, name: &str) -> bool {
        if let Some(initial) = self
            .initial
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            initial.remove(name);
        }
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name)
            .is_some_and(|record| record.digest.is_some())
    }
}

struct Ctx {
    client: Client,
    registry: Arc<Registry>,
    loader: Arc<Loader>,
    settings: Settings,
    events: Events,
    state: Arc<ProviderState>,
    store: Store<Provider>,
    denials: tokio::sync::mpsc::Sender<Denial>,
}

/// The Provider controller, built but not yet running.
pub struct ProviderController {
    controller: Controller<Provider>,
    ctx: Arc<Ctx>,
    denials: tokio::sync::mpsc::Receiver<Denial>,
}

impl std::fmt::Debug for ProviderController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderController")
            .field("settings", &self.ctx.settings)
            .finish_non_exhaustive()
    }
}

impl ProviderController {
    /// A controller loading into `registry` with `loader`.
    pub fn new(
        client: Client,
        registry: Arc<Registry>,
        loader: Arc<Loader>,
        settings: Settings,
    ) -> Self {
        let controller = Controller::new(
            Api::<Provider>::all(client.clone()),
            provider_watch_config(&settings),
        )
        .trigger_backoff(crate::state::watch_backoff());
        let (denials_tx, denials) = tokio::sync::mpsc::channel(256);
        let ctx = Arc::new(Ctx {
            events: Events::new(client.clone(), &settings.reporter),
            client,
            registry,
            loader,
            settings,
            state: Arc::new(ProviderState::default()),
            store: controller.store(),
            denials: denials_tx,
        });
        Self {
            controller,
            ctx,
            denials,
        }
    }

    /// The state readiness checks look at.
    pub fn state(&self) -> Arc<ProviderState> {
        Arc::clone(&self.ctx.state)
    }

    /// Runs until the watches end (they retry with backoff, so: forever).
    pub async fn run(self) {
        let Self {
            controller,
            ctx,
            denials,
        } = self;
        let denial_task = tokio::spawn(report_denials(Arc::clone(&ctx), denials));
        let health_task = tokio::spawn(report_health(Arc::clone(&ctx)));
        let deletion_task = tokio::spawn(watch_deletions(Arc::clone(&ctx)));
        let config_maps: Api<ConfigMap> = match &ctx.settings.source_namespace {
            Some(namespace) => Api::namespaced(ctx.client.clone(), namespace),
            None => Api::all(ctx.client.clone()),
        };
        let secrets: Api<PartialObjectMeta<Secret>> = match &ctx.settings.source_namespace {
            Some(namespace) => Api::namespaced(ctx.client.clone(), namespace),
            None => Api::all(ctx.client.clone()),
        };
        let store = ctx.store.clone();
        let secret_store = ctx.store.clone();
        // Secrets: metadata only (a change bumps the resourceVersion); values are read on
        // reconcile, for the Providers that name them.
        let secret_changes = watcher(secrets, watcher::Config::default())
            .backoff(crate::state::watch_backoff())
            .touched_objects();
        controller
            .watches(config_maps, watcher::Config::default(), move |config_map| {
                let namespace = config_map.namespace().unwrap_or_default();
                let name = config_map.name_any();
                store
                    .state()
                    .iter()
                    .filter(|provider| {
                        provider.spec.source.namespace() == namespace
                            && spec::config_maps_read(&provider.spec).contains(&name.as_str())
                    })
                    .map(|provider| ObjectRef::from_obj(provider.as_ref()))
                    .collect::<Vec<_>>()
            })
            .watches_stream(secret_changes, move |secret: PartialObjectMeta<Secret>| {
                let namespace = secret.namespace().unwrap_or_default();
                let name = secret.name_any();
                secret_store
                    .state()
                    .iter()
                    .filter(|provider| {
                        provider.spec.source.namespace() == namespace
                            && spec::secrets_read(&provider.spec).contains(&name.as_str())
                    })
                    .map(|provider| ObjectRef::from_obj(provider.as_ref()))
                    .collect::<Vec<_>>()
            })
            .run(reconcile, error_policy, Arc::clone(&ctx))
            .for_each(|result| async move {
                if let Err(err) = result {
                    tracing::debug!(error = %err, "provider reconcile failed");
                }
            })
            .await;
        denial_task.abort();
        health_task.abort();
        deletion_task.abort();
    }
}

fn provider_watch_config(settings: &Settings) -> watcher::Config {
    match &settings.selector {
        Some(selector) => watcher::Config::default().labels(selector),
        None => watcher::Config::default(),
    }
}

/// Unloads Providers as they are deleted, and after every (re)list those whose delete was
/// missed. Also records the initial list for [`ProviderState::synced`].
async fn watch_deletions(ctx: Arc<Ctx>) {
    let api: Api<PartialObjectMeta<Provider>> = Api::all(ctx.client.clone());
    let mut listing: HashSet<String> = HashSet::new();
    let mut events = watcher(api, provider_watch_config(&ctx.settings))
        .backoff(crate::state::watch_backoff())
        .boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Delete(meta)) => unload(&ctx, &meta.name_any()),
            Ok(watcher::Event::Init) => listing.clear(),
            Ok(watcher::Event::InitApply(meta)) => {
                listing.insert(meta.name_any());
            }
            Ok(watcher::Event::InitDone) => {
                sweep(&ctx, &listing);
                let mut initial = ctx
                    .state
                    .initial
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if initial.is_none() {
                    *initial = Some(std::mem::take(&mut listing));
                }
            }
            Ok(watcher::Event::Apply(_)) => {}
            Err(err) => tracing::debug!(error = %err, "provider watch failed"),
        }
    }
}

/// Unloads a deleted Provider (if this controller loaded it).
fn unload(ctx: &Ctx, name: &str) {
    if ctx.state.forget(name) && ctx.registry.remove(name).is_some() {
        forget_health(name);
        tracing::info!(provider = name, "provider deleted: unloaded");
    }
}

/// Drops `name`'s health record and series.
fn forget_health(name: &str) {
    let metrics = crate::metrics::global();
    metrics.health.forget(name);
    metrics.own.forget_provider(name);
}

/// Writes the `Healthy` condition of every Provider whose health changed, with an Event:
/// Warning `ProviderUnhealthy` when it turns unhealthy, Normal `ProviderHealthy` when it
/// recovers.
async fn report_health(ctx: Arc<Ctx>) {
    let health = &crate::metrics::global().health;
    let mut changes = health.subscribe();
    let mut reported: HashMap<String, bool> = HashMap::new();
    loop {
        for provider in ctx.store.state() {
            let name = provider.name_any();
            if ctx.registry.get(&name).is_none() {
                continue;
            }
            let verdict = health.verdict(&name);
            if matches!(verdict, Verdict::Unknown) {
                continue;
            }
            let unhealthy = verdict.is_unhealthy();
            if reported.get(&name) == Some(&unhealthy) {
                continue;
            }
            if let Err(err) = write_status(&provider, &ctx).await {
                tracing::debug!(provider = %name, error = %err, "cannot write the Healthy condition");
                continue;
            }
            let (_, reason, message) = verdict.condition();
            if unhealthy {
                tracing::warn!(provider = %name, %reason, %message, "provider unhealthy");
                ctx.events
                    .warning_with_action(provider.as_ref(), "ProviderUnhealthy", reason, message)
                    .await;
            } else if reported.contains_key(&name) {
                tracing::info!(provider = %name, "provider healthy again");
                ctx.events
                    .normal(provider.as_ref(), "ProviderHealthy", &message)
                    .await;
            }
            reported.insert(name, unhealthy);
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// After a (re)list: unloads providers whose Provider is gone (a delete missed while the watch
/// was down).
fn sweep(ctx: &Ctx, present: &HashSet<String>) {
    let gone: Vec<String> = ctx
        .state
        .records
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|(name, record)| record.digest.is_some() && !present.contains(*name))
        .map(|(name, _)| name.clone())
        .collect();
    for name in gone {
        unload(ctx, &name);
    }
}

fn error_policy(provider: Arc<Provider>, err: &ProviderControllerError, _ctx: Arc<Ctx>) -> Action {
    if let ProviderControllerError::Kube(kube) = err
        && super::is_conflict(kube)
    {
        tracing::debug!(provider = %provider.name_any(), error = %err, "write conflict; retrying");
        return Action::requeue(super::CONFLICT_RETRY);
    }
    tracing::warn!(provider = %provider.name_any(), error = %err, "provider reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

/// Records denied calls as Events on the Provider, at most one per provider and call per
/// [`Settings::denial_event_interval`] (the counters and the log see every one).
async fn report_denials(ctx: Arc<Ctx>, mut denials: tokio::sync::mpsc::Receiver<Denial>) {
    let mut last: HashMap<(String, String), Instant> = HashMap::new();
    while let Some(denial) = denials.recv().await {
        let key = (denial.provider.clone(), denial.call.clone());
        if last
            .get(&key)
            .is_some_and(|at| at.elapsed() < ctx.settings.denial_event_interval)
        {
            continue;
        }
        // A hostile provider can vary its calls without end: forget quiet keys to stay bounded.
        if last.len() >= 1024 {
            let interval = ctx.settings.denial_event_interval;
            last.retain(|_, at| at.elapsed() < interval);
        }
        if last.len() >= 1024 {
            continue;
        }
        last.insert(key, Instant::now());
        let Some(provider) = ctx.store.get(&ObjectRef::<Provider>::new(&denial.provider)) else {
            continue;
        };
        ctx.events
            .warning_with_action(
                provider.as_ref(),
                denial.reason.event_reason(),
                &denial.call,
                match denial.reason {
                    DenialReason::NotGranted => {
                        format!("denied by the Provider's grants: {}", denial.call)
                    }
                    DenialReason::NotOwned | DenialReason::OwnershipMark => {
                        format!("refused: the provider may not {}", denial.call)
                    }
                },
            )
            .await;
    }
}

fn denial_sink(ctx: &Ctx) -> DenialSink {
    let sender = ctx.denials.clone();
    Arc::new(move |denial| {
        // A full queue drops the Event, never the count (a hostile provider cannot flood us).
        let _ = sender.try_send(denial);
    })
}

/// `spec.spendLimitPerHour` in thousandths of the price unit (the CRD's pattern keeps it a
/// decimal; one that does not parse is logged and ignored).
fn spend_limit(name: &str, spec: &crate::api::ProviderSpec) -> Option<i64> {
    let text = spec.spend_limit_per_hour.as_deref()?;
    match crate::scheduling::quantity::parse_millis(text) {
        Ok(millis) => Some(millis),
        Err(err) => {
            tracing::warn!(provider = %name, limit = %text, error = %err, "spendLimitPerHour ignored");
            None
        }
    }
}

/// One reconcile of one Provider.
async fn reconcile(
    provider: Arc<Provider>,
    ctx: Arc<Ctx>,
) -> Result<Action, ProviderControllerError> {
    let name = provider.name_any();
    let generation = provider.metadata.generation;
    ctx.registry
        .set_spend_limit(&name, spend_limit(&name, &provider.spec));
    let outcome = load(&provider, &ctx).await?;
    let record = ctx.state.record(&name);
    let serving = ctx.registry.get(&name);
    match outcome {
        Ok(Loaded::Unchanged { artifact_digest }) => {
            ctx.state.update(&name, |record| {
                record.observed = generation;
                record.rejection = None;
                record.artifact_digest = artifact_digest;
            });
        }
        Ok(Loaded::New {
            provider: pre,
            took,
            artifact_digest,
            signed_by,
        }) => {
            let digest = pre.sha256().to_owned();
            let wit = pre.export().version.to_string();
            ctx.registry.insert(name.clone(), Arc::new(pre));
            // A new version starts with a clean record (it may fix what failed).
            forget_health(&name);
            ctx.state.update(&name, |record| {
                record.digest = Some(digest.clone());
                record.generation = generation;
                record.observed = generation;
                record.rejection = None;
                record.artifact_digest = artifact_digest.clone();
                record.signed_by = signed_by.clone();
            });
            tracing::info!(provider = %name, %digest, artifact = ?artifact_digest, signed_by = ?signed_by, wit = %wit, took_ms = took.as_millis() as u64, "provider loaded");
            crate::metrics::global()
                .own
                .provider_load(&name, "Loaded", Some(took));
            ctx.events
                .normal(
                    provider.as_ref(),
                    "Loaded",
                    format!(
                        "loaded sha256 {digest} (capstan:provider@{wit}){}{} in {} ms",
                        artifact_digest
                            .map(|d| format!(" from artifact {d}"))
                            .unwrap_or_default(),
                        signed_by
                            .map(|k| format!(", signed by {k}"))
                            .unwrap_or_default(),
                        took.as_millis()
                    ),
                )
                .await;
        }
        Err(rejection) => {
            ctx.state.update(&name, |record| {
                record.observed = generation;
                record.rejection = Some(rejection.clone());
            });
            if record.rejection.as_ref() != Some(&rejection) {
                crate::metrics::global()
                    .own
                    .provider_load(&name, rejection.reason, None);
                let serving_note = match &serving {
                    Some(pre) => format!("; still serving sha256 {}", pre.sha256()),
                    None => "; no version is serving".to_owned(),
                };
                tracing::warn!(provider = %name, reason = rejection.reason, message = %rejection.message, "provider source refused");
                ctx.events
                    .warning(
                        provider.as_ref(),
                        rejection.reason,
                        format!("{}{serving_note}", rejection.message),
                    )
                    .await;
            }
        }
    }
    write_status(&provider, &ctx).await?;
    let next = match poll_interval(&provider.spec) {
        Some(poll) => poll.min(ctx.settings.resync),
        None => ctx.settings.resync,
    };
    Ok(Action::requeue(next))
}

/// Default interval between two checks of an OCI tag.
const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(300);

/// How often the source is polled: OCI tags only (a digest never changes; ConfigMaps are
/// watched).
fn poll_interval(spec: &crate::api::provider::ProviderSpec) -> Option<Duration> {
    let oci = spec.source.oci.as_ref()?;
    if oci.reference.contains('@') {
        return None;
    }
    Some(
        oci.poll_interval
            .as_deref()
            .and_then(|text| crate::api::duration::parse(text).ok())
            .filter(|d| !d.is_zero())
            .unwrap_or(DEFAULT_POLL_INTERVAL),
    )
}

/// What loading gave.
enum Loaded {
    /// The serving version already is this source at this generation.
    Unchanged { artifact_digest: Option<String> },
    /// A new version, ready to swap in.
    New {
        provider: ProviderPre,
        took: Duration,
        artifact_digest: Option<String>,
        signed_by: Option<String>,
    },
}

/// Reads, checks and (if anything changed) loads a Provider's source.
async fn load(
    provider: &Provider,
    ctx: &Ctx,
) -> Result<Result<Loaded, Rejection>, ProviderControllerError> {
    let started = Instant::now();
    let name = provider.name_any();
    let spec = &provider.spec;
    let namespace = spec.source.namespace();
    if let Some(allowed) = &ctx.settings.source_namespace
        && namespace != allowed
    {
        return Ok(Err(SourceError::NamespaceNotAllowed {
            namespace: namespace.to_owned(),
            allowed: allowed.clone(),
        }
        .into()));
    }
    if ctx.settings.require_verification && spec.verification.is_none() {
        return Ok(Err(VerifyError::Required.into()));
    }
    let inputs = match resolve_inputs(spec, ctx).await? {
        Ok(inputs) => inputs,
        Err(rejection) => return Ok(Err(rejection)),
    };
    let settings = FetchSettings {
        client: &ctx.client,
        max_component_size: ctx.settings.max_component_size,
        oci_cache: ctx.settings.oci_cache.as_deref(),
    };
    let fetched = match fetch::fetch(spec, settings).await {
        Ok(fetched) => fetched,
        Err(err) => return rejected(err),
    };
    let artifact_digest = fetched.artifact_digest();
    let record = ctx.state.record(&name);
    let serving = ctx.registry.get(&name);
    if let Some(serving) = &serving
        && record.digest.as_deref() == Some(fetched.component.sha256.as_str())
        && serving.sha256() == fetched.component.sha256
        && record.generation == provider.metadata.generation
    {
        let caps = serving.capabilities();
        caps.set_http_settings(inputs.http);
        if caps.config().replace(inputs.config) {
            tracing::info!(provider = %name, "provider configuration updated");
        }
        return Ok(Ok(Loaded::Unchanged { artifact_digest }));
    }
    let signed_by = match &spec.verification {
        None => None,
        Some(verification) => {
            match fetch::check_signature(verification, &fetched, namespace, &ctx.client).await {
                Ok(key) => Some(key),
                Err(err) => return rejected(err),
            }
        }
    };
    let component = fetched.component;
    let grants = match spec::grants(spec) {
        Ok(grants) => grants,
        Err(err) => return Ok(Err(err.into())),
    };
    let limits = match spec::limits(spec) {
        Ok(limits) => limits,
        Err(err) => return Ok(Err(err.into())),
    };
    let source = ProviderSource {
        name: name.clone(),
        bytes: component.bytes,
        grants,
        limits,
        http: inputs.http,
        config: inputs.config,
    };
    let loader = Arc::clone(&ctx.loader);
    let sink = denial_sink(ctx);
    let previous = serving.clone();
    let loaded =
        tokio::task::spawn_blocking(move || loader.load(source, previous.as_deref(), Some(sink)))
            .await
            .map_err(|err| ProviderControllerError::Join(err.to_string()))?;
    let pre = match loaded {
        Ok(pre) => pre,
        Err(err) => return Ok(Err(err.into())),
    };
    match pre.name().await {
        Ok(reported) if !reported.trim().is_empty() => {}
        Ok(_) => {
            return Ok(Err(Rejection::new(
                "SelfCheckFailed",
                "name() returned an empty name",
            )));
        }
        Err(err) => {
            return Ok(Err(Rejection::new(
                "SelfCheckFailed",
                format!("name() failed: {err}"),
            )));
        }
    }
    Ok(Ok(Loaded::New {
        provider: pre,
        took: started.elapsed(),
        artifact_digest,
        signed_by,
    }))
}

/// What a Provider points to besides its component, resolved.
struct Inputs {
    http: HttpSettings,
    config: ConfigValues,
}

/// Reads the egress rules, HTTP limits, CA bundle and configuration of `spec` (Secrets and the
/// CA ConfigMap from the provider source namespace).
async fn resolve_inputs(
    spec: &crate::api::provider::ProviderSpec,
    ctx: &Ctx,
) -> Result<Result<Inputs, Rejection>, ProviderControllerError> {
    let namespace = spec.source.namespace();
    let (rules, limits) = match (spec::egress(spec), spec::http_limits(spec)) {
        (Ok(rules), Ok(limits)) => (rules, limits),
        (Err(err), _) | (_, Err(err)) => return Ok(Err(err.into())),
    };
    let tls = match &spec.egress_ca_bundle {
        None => None,
        Some(bundle) => {
            let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
            let pem = api
                .get_opt(&bundle.name)
                .await?
                .and_then(|config_map| source::text_key(&config_map, &bundle.key))
                .map(String::into_bytes);
            let Some(pem) = pem else {
                return Ok(Err(spec::SpecError::CaBundle(format!(
                    "ConfigMap {namespace}/{} has no key {:?} (or does not exist)",
                    bundle.name, bundle.key
                ))
                .into()));
            };
            match outbound_http::tls_config(Some(&pem)) {
                Ok(config) => Some(config),
                Err(err) => return Ok(Err(spec::SpecError::CaBundle(err.to_string()).into())),
            }
        }
    };
    let secrets_api: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let mut secrets = BTreeMap::new();
    for name in spec::secret_names(spec) {
        if secrets.contains_key(name) {
            continue;
        }
        if let Some(secret) = secrets_api.get_opt(name).await? {
            secrets.insert(name.to_owned(), secret);
        }
    }
    let config = match spec::config_values(spec, namespace, &secrets) {
        Ok(config) => config,
        Err(err) => return Ok(Err(err.into())),
    };
    Ok(Ok(Inputs {
        http: HttpSettings { rules, limits, tls },
        config,
    }))
}

/// Writes `status` from what is serving and the last outcome, if it changed.
async fn write_status(provider: &Provider, ctx: &Ctx) -> Result<(), ProviderControllerError> {
    let name = provider.name_any();
    let record = ctx.state.record(&name);
    let serving = ctx.registry.get(&name);
    let generation = provider.metadata.generation;
    let old = provider.status.clone().unwrap_or_default();
    let mut next = old.clone();
    let at = now();
    match (&serving, &record.rejection) {
        (Some(pre), Some(rejection)) if rejection.blocks_ready => {
            set_condition(
                &mut next.conditions,
                READY,
                ConditionStatus::False,
                Some(rejection.reason),
                Some(&format!(
                    "{}; sha256 {} keeps serving with its last good configuration",
                    rejection.message,
                    pre.sha256()
                )),
                generation,
                at.clone(),
            );
        }
        (Some(pre), _) => {
            set_condition(
                &mut next.conditions,
                READY,
                ConditionStatus::True,
                Some("Loaded"),
                Some(&format!("serving sha256 {}", pre.sha256())),
                generation,
                at.clone(),
            );
        }
        (None, Some(rejection)) => {
            set_condition(
                &mut next.conditions,
                READY,
                ConditionStatus::False,
                Some(rejection.reason),
                Some(&rejection.message),
                generation,
                at.clone(),
            );
        }
        (None, None) => {
            set_condition(
                &mut next.conditions,
                READY,
                ConditionStatus::False,
                Some("NotLoaded"),
                Some("no version is loaded"),
                generation,
                at.clone(),
            );
        }
    }
    match &record.rejection {
        Some(rejection) => set_condition(
            &mut next.conditions,
            DEGRADED,
            ConditionStatus::True,
            Some(rejection.reason),
            Some(&rejection.message),
            generation,
            at.clone(),
        ),
        None => set_condition(
            &mut next.conditions,
            DEGRADED,
            ConditionStatus::False,
            Some("AsExpected"),
            Some(""),
            generation,
            at.clone(),
        ),
    };
    if serving.is_some() {
        let (status, reason, message) = crate::metrics::global().health.verdict(&name).condition();
        set_condition(
            &mut next.conditions,
            HEALTHY,
            status,
            Some(reason),
            Some(&message),
            generation,
            at.clone(),
        );
    }
    if let Ok(grants) = spec::grants(&provider.spec) {
        let (status, reason, message) = match grants.unscoped_summary() {
            Some(message) => (ConditionStatus::False, "UnscopedGrants", message),
            None => (
                ConditionStatus::True,
                "Owned",
                "every grant reaches only objects the provider owns".to_owned(),
            ),
        };
        set_condition(
            &mut next.conditions,
            GRANTS_SCOPED,
            status,
            Some(reason),
            Some(&message),
            generation,
            at.clone(),
        );
    }
    if let Some(pre) = &serving {
        if next.digest.as_deref() != Some(pre.sha256()) {
            next.digest = Some(pre.sha256().to_owned());
            next.last_loaded = Some(at);
        }
        next.wit_version = Some(pre.export().version.to_string());
        next.artifact_digest = record.artifact_digest.clone();
        next.signed_by = record.signed_by.clone();
    }
    next.observed_generation = generation;
    if next == old {
        return Ok(());
    }
    let api: Api<Provider> = Api::all(ctx.client.clone());
    let patch = json!({ "status": next });
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}
