//! The host side of the `kube` import: a proxy to the API server that checks every call against
//! the provider's [`Grants`] first.
//!
//! A call names its object by `apiVersion` and `kind`; the proxy resolves that to a resource
//! (plural name, scope, subresources) through discovery, cached per cluster and group-version
//! for [`DISCOVERY_TTL`] and refreshed once on a miss (a CRD installed a moment ago). Then the
//! grants decide, and only then does the request go out, through kube-rs, with the host's
//! credentials. Denied calls are logged at `warn` and counted.
//!
//! Names, namespaces and subresources must be single path segments: a provider cannot reach
//! another URL than the one the grants were checked for.
//!
//! A grant's scope is enforced here too, by [`ownership`](super::ownership)'s rules: every
//! created object is stamped with the provider's ownership mark; under an `owned` grant a get,
//! patch or delete first reads the object and refuses it unless it carries the mark (the write
//! then carries the object's uid, so it cannot land on a namesake), and a list sees only marked
//! objects; no patch may write the mark. As a kubelet under NodeRestriction registers only its
//! own Node, a provider under an `owned` grant creates a Node only while it launches a claim (its
//! `create`), and only with a provider ID.
//!
//! A hostile provider must not grow the host through this import: a request body may hold at
//! most [`MAX_REQUEST_BYTES`] (refused as `invalid` before it is parsed or copied), a response at
//! most [`MAX_RESPONSE_BYTES`] (read no further, `other`), and at most [`MAX_IN_FLIGHT`] calls of
//! one provider are on the wire at once (more wait). Patch bodies are checked for JSON syntax
//! without building a document and sent as the guest wrote them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ::kube::Client;
use ::kube::api::{
    DeleteParams, GetParams, ListParams, Patch, PatchParams, PostParams, Preconditions,
};
use ::kube::client::Body;
use ::kube::core::Request as KubeRequest;
use http_body_util::{BodyExt, Limited};
use tokio::sync::Semaphore;

use super::grants::{Cluster, GrantScope, Grants, Request, Scope, Verb};
use super::metrics::CapabilityMetrics;
use super::ownership::{self, Owner, OwnershipError, PatchShape};

/// How long discovery results are trusted.
pub const DISCOVERY_TTL: Duration = Duration::from_secs(300);
/// A kind missing from a discovery result is looked up again at most this often.
pub const DISCOVERY_MISS_REFRESH: Duration = Duration::from_secs(2);

/// The largest request body one call may send: the API server's own limit (3 MiB), so nothing
/// the server would refuse is ever copied or parsed.
pub const MAX_REQUEST_BYTES: usize = 3 << 20;
/// The largest response one call may receive (a list of a few thousand objects); the guest must
/// hold it in its own memory as well.
pub const MAX_RESPONSE_BYTES: usize = 16 << 20;
/// Calls of one provider on the wire at once; more wait for a slot.
pub const MAX_IN_FLIGHT: usize = 4;

/// Why a `kube` call failed, as the guest sees it (the WIT `kube-error`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeCallError {
    /// The grants do not allow the call, or the API server refused the host's credentials.
    #[error("permission-denied: {0}")]
    PermissionDenied(String),
    /// The object, kind or API version does not exist.
    #[error("not-found: {0}")]
    NotFound(String),
    /// The object exists, or changed underneath.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The request is malformed.
    #[error("invalid: {0}")]
    Invalid(String),
    /// The cluster is unreachable, not configured, or overloaded.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// Anything else.
    #[error("other: {0}")]
    Other(String),
}

/// The kind of object a call is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Which cluster.
    pub cluster: Cluster,
    /// `group/version`, or `version` for the core group.
    pub api_version: String,
    /// The kind (`ConfigMap`).
    pub kind: String,
    /// The namespace; none for cluster-scoped kinds and cluster-wide lists.
    pub namespace: Option<String>,
}

/// One object, optionally a subresource of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    /// Its kind and place.
    pub target: Target,
    /// Its name.
    pub name: String,
    /// A subresource (`scale`, `status`).
    pub subresource: Option<String>,
}

/// Options of a list call.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListOptions {
    /// A label selector.
    pub label_selector: Option<String>,
    /// A field selector.
    pub field_selector: Option<String>,
    /// Page size.
    pub limit: Option<u32>,
    /// The previous page's `metadata.continue` (contract 0.3 and later).
    pub continue_token: Option<String>,
}

/// The kind of patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// RFC 7386 JSON merge patch.
    Merge,
    /// RFC 6902 JSON patch.
    Json,
    /// Server-side apply.
    Apply,
}

/// What discovery knows about a kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceInfo {
    /// The plural resource name.
    pub plural: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Its subresources (`status`, `scale`).
    pub subresources: Vec<String>,
}

struct GroupVersion {
    fetched: Instant,
    kinds: HashMap<String, ResourceInfo>,
}

/// Discovery results of one cluster, by group-version.
#[derive(Default)]
struct DiscoveryCache {
    entries: Mutex<HashMap<String, GroupVersion>>,
}

impl DiscoveryCache {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, GroupVersion>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn resolve(
        &self,
        client: &Client,
        cluster: Cluster,
        api_version: &str,
        kind: &str,
    ) -> Result<ResourceInfo, KubeCallError> {
        let missing = || {
            KubeCallError::NotFound(format!(
                "the {cluster} cluster serves no kind {kind} in {api_version}"
            ))
        };
        {
            let entries = self.lock();
            if let Some(gv) = entries.get(api_version)
                && gv.fetched.elapsed() < DISCOVERY_TTL
            {
                if let Some(info) = gv.kinds.get(kind) {
                    return Ok(info.clone());
                }
                if gv.fetched.elapsed() < DISCOVERY_MISS_REFRESH {
                    return Err(missing());
                }
            }
        }
        let kinds = fetch_group_version(client, cluster, api_version).await?;
        let info = kinds.get(kind).cloned();
        self.lock().insert(
            api_version.to_owned(),
            GroupVersion {
                fetched: Instant::now(),
                kinds,
            },
        );
        info.ok_or_else(missing)
    }
}

async fn fetch_group_version(
    client: &Client,
    cluster: Cluster,
    api_version: &str,
) -> Result<HashMap<String, ResourceInfo>, KubeCallError> {
    let list = if api_version.contains('/') {
        client.list_api_group_resources(api_version).await
    } else {
        client.list_core_api_resources(api_version).await
    };
    let list = list.map_err(|err| match map_error(err) {
        KubeCallError::NotFound(_) => KubeCallError::NotFound(format!(
            "the {cluster} cluster does not serve {api_version}"
        )),
        other => other,
    })?;
    let mut kinds: HashMap<String, ResourceInfo> = HashMap::new();
    let mut subresources: Vec<(String, String)> = Vec::new();
    for resource in list.resources {
        match resource.name.split_once('/') {
            Some((main, sub)) => subresources.push((main.to_owned(), sub.to_owned())),
            None => {
                kinds.entry(resource.kind.clone()).or_insert(ResourceInfo {
                    plural: resource.name,
                    namespaced: resource.namespaced,
                    subresources: Vec::new(),
                });
            }
        }
    }
    for info in kinds.values_mut() {
        info.subresources = subresources
            .iter()
            .filter(|(main, _)| *main == info.plural)
            .map(|(_, sub)| sub.clone())
            .collect();
    }
    Ok(kinds)
}

/// A connection to one cluster, with its discovery cache. Shared by every provider that talks to
/// the cluster.
pub struct ClusterConnection {
    cluster: Cluster,
    client: Client,
    discovery: DiscoveryCache,
}

impl std::fmt::Debug for ClusterConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConnection")
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl ClusterConnection {
    /// A connection to `cluster` through `client`.
    pub fn new(cluster: Cluster, client: Client) -> Arc<Self> {
        Arc::new(Self {
            cluster,
            client,
            discovery: DiscoveryCache::default(),
        })
    }

    /// Which cluster this is.
    pub fn cluster(&self) -> Cluster {
        self.cluster
    }

    /// Resolves `kind` in `api_version` through the discovery cache.
    pub async fn resolve(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<ResourceInfo, KubeCallError> {
        self.discovery
            .resolve(&self.client, self.cluster, api_version, kind)
            .await
    }
}

/// The `kube` import of one provider: its grants, and the clusters it may reach.
pub struct KubeProxy {
    provider: Arc<str>,
    grants: Grants,
    workload: Option<Arc<ClusterConnection>>,
    management: Option<Arc<ClusterConnection>>,
    metrics: Arc<CapabilityMetrics>,
    on_denied: Option<DenialSink>,
    in_flight: Semaphore,
}

/// A call the grants refused, as reported to a [`DenialSink`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The provider that made the call.
    pub provider: String,
    /// The call, e.g. `get v1 Secret in namespace kube-system on the workload cluster`.
    pub call: String,
    /// Why it was refused.
    pub reason: DenialReason,
}

/// Why a call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenialReason {
    /// No grant allows it (or no egress rule, for outbound HTTP).
    NotGranted,
    /// An `owned` grant allows it, but the object is not the provider's, or a Node is created
    /// outside a launch.
    NotOwned,
    /// The call would set, change or remove the ownership mark.
    OwnershipMark,
}

impl DenialReason {
    /// The reason of the Event recorded on the Provider.
    pub fn event_reason(self) -> &'static str {
        match self {
            DenialReason::NotGranted => "PermissionDenied",
            DenialReason::NotOwned => "NotOwned",
            DenialReason::OwnershipMark => "OwnershipMark",
        }
    }
}

/// What a call is for, as far as the `kube` proxy cares: the claim a `create` call launches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallPurpose<'a> {
    /// The NodeClaim being launched, inside a `create` call.
    pub launching: Option<&'a str>,
}

/// Where denied calls are reported (besides the log and the counters), e.g. to record an Event
/// on the `Provider`. Called synchronously on the call's task: keep it cheap (send on a channel).
pub type DenialSink = Arc<dyn Fn(Denial) + Send + Sync>;

impl std::fmt::Debug for KubeProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeProxy")
            .field("provider", &self.provider)
            .field("grants", &self.grants)
            .field("workload", &self.workload.is_some())
            .field("management", &self.management.is_some())
            .finish()
    }
}

/// A call that passed the checks: where to send it, and which objects it may reach.
struct Resolved<'a> {
    connection: &'a ClusterConnection,
    url_path: String,
    scope: GrantScope,
    /// Whether the kind is the core group's Node.
    nodes: bool,
}

impl KubeProxy {
    /// A proxy for `provider`.
    pub fn new(
        provider: Arc<str>,
        grants: Grants,
        workload: Option<Arc<ClusterConnection>>,
        management: Option<Arc<ClusterConnection>>,
        metrics: Arc<CapabilityMetrics>,
        on_denied: Option<DenialSink>,
    ) -> Self {
        Self {
            provider,
            grants,
            workload,
            management,
            metrics,
            on_denied,
            in_flight: Semaphore::new(MAX_IN_FLIGHT),
        }
    }

    /// The grants in force.
    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    /// Reads one object (or subresource) as JSON. Under an `owned` grant, only an object
    /// carrying the provider's mark.
    pub async fn get(&self, object: &ObjectRef) -> Result<String, KubeCallError> {
        let resolved = self
            .resolve(
                &object.target,
                Verb::Get,
                Some(&object.name),
                object.subresource.as_deref(),
            )
            .await?;
        if resolved.scope == GrantScope::Owned {
            let main = self.owned(&resolved, object).await?;
            if object.subresource.is_none() {
                return Ok(main.text);
            }
        }
        let request = KubeRequest::new(resolved.url_path.as_str());
        let http = match object.subresource.as_deref() {
            Some(sub) => request.get_subresource(sub, &object.name),
            None => request.get(&object.name, &GetParams::default()),
        };
        self.send(resolved.connection, http).await
    }

    /// Lists objects as a JSON `...List`.
    pub async fn list(
        &self,
        target: &Target,
        options: &ListOptions,
    ) -> Result<String, KubeCallError> {
        let resolved = self.resolve(target, Verb::List, None, None).await?;
        // Under an `owned` grant a list sees the provider's own objects only: filtered, not
        // refused.
        let label_selector = match resolved.scope {
            GrantScope::Owned => Some(ownership::owned_selector(
                options.label_selector.as_deref(),
                &self.provider,
            )),
            GrantScope::Any => options.label_selector.clone(),
        };
        let params = ListParams {
            label_selector,
            field_selector: options.field_selector.clone(),
            limit: options.limit,
            continue_token: options.continue_token.clone(),
            ..ListParams::default()
        };
        let http = KubeRequest::new(resolved.url_path.as_str()).list(&params);
        self.send(resolved.connection, http).await
    }

    /// Creates `body`, stamped with the provider's ownership mark, and returns what the server
    /// stored. Under an `owned` grant a Node is created only while `purpose` launches a claim,
    /// and only with a provider ID.
    pub async fn create(
        &self,
        target: &Target,
        body: &str,
        purpose: CallPurpose<'_>,
    ) -> Result<String, KubeCallError> {
        check_request_size(body)?;
        let resolved = self.resolve(target, Verb::Create, None, None).await?;
        let what = || describe(target, None);
        if resolved.scope == GrantScope::Owned && resolved.nodes {
            if purpose.launching.is_none() {
                return Err(self.refuse(
                    DenialReason::NotOwned,
                    &format!("create {} outside a launch", what()),
                    "a provider creates a Node only while it launches a NodeClaim (in create), as a kubelet registers only its own Node",
                ));
            }
            let provider_id = ownership::node_provider_id(body)
                .map_err(|err| self.ownership_error(err, &format!("create {}", what())))?;
            if provider_id.is_none() {
                return Err(self.refuse(
                    DenialReason::NotOwned,
                    &format!("create {} without spec.providerID", what()),
                    "a Node a provider creates must carry the provider ID of the instance it launched",
                ));
            }
        }
        let body = ownership::stamp(body, &self.provider)
            .map_err(|err| self.ownership_error(err, &format!("create {}", what())))?;
        let http = KubeRequest::new(resolved.url_path.as_str())
            .create(&PostParams::default(), body.into_bytes());
        self.send(resolved.connection, http).await
    }

    /// Patches an object (or subresource) and returns the result.
    pub async fn patch(
        &self,
        object: &ObjectRef,
        kind: PatchKind,
        body: &str,
        field_manager: Option<&str>,
    ) -> Result<String, KubeCallError> {
        check_request_size(body)?;
        let resolved = self
            .resolve(
                &object.target,
                Verb::Patch,
                Some(&object.name),
                object.subresource.as_deref(),
            )
            .await?;
        // Under an `owned` grant: read the object first, refuse it unless it is the provider's,
        // and pin the patch to its uid (not through subresources other than status, whose
        // bodies are not the object).
        let owner = match resolved.scope {
            GrantScope::Owned => Some(self.owned(&resolved, object).await?.owner),
            GrantScope::Any => None,
        };
        let pin = match object.subresource.as_deref() {
            None | Some("status") => owner.as_ref().and_then(|o| o.uid.as_deref()),
            Some(_) => None,
        };
        let shape = match kind {
            PatchKind::Merge => PatchShape::Merge,
            PatchKind::Json => PatchShape::Json,
            PatchKind::Apply => PatchShape::Apply,
        };
        // No patch writes the mark; a document is never built from the whole body (only its
        // metadata, or a JSON patch's operations one at a time).
        let guarded = ownership::guard_patch(shape, body, &self.provider, pin).map_err(|err| {
            self.ownership_error(
                err,
                &format!("patch {}", describe(&object.target, Some(&object.name))),
            )
        })?;
        if guarded.names_mark && owner.is_none() {
            // Repeating the mark is allowed only on an object that carries it already.
            self.owned(&resolved, object).await?;
        }
        let body = guarded.body.as_str();
        let (patch, params) = match kind {
            PatchKind::Merge | PatchKind::Json => {
                let params = PatchParams {
                    field_manager: field_manager.map(str::to_owned),
                    ..PatchParams::default()
                };
                (Patch::Merge(()), params)
            }
            PatchKind::Apply => {
                let manager = field_manager.ok_or_else(|| {
                    KubeCallError::Invalid("server-side apply requires a field-manager".into())
                })?;
                (Patch::Apply(()), PatchParams::apply(manager))
            }
        };
        let request = KubeRequest::new(resolved.url_path.as_str());
        let http = match object.subresource.as_deref() {
            Some(sub) => request.patch_subresource(sub, &object.name, &params, &patch),
            None => request.patch(&object.name, &params, &patch),
        };
        let http = http.map(|http| {
            // The request kube-rs built (URL, parameters, content type) with the guest's body.
            let mut http = http.map(|_| body.as_bytes().to_vec());
            if kind == PatchKind::Json {
                http.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json-patch+json"),
                );
            }
            http
        });
        self.send(resolved.connection, http).await
    }

    /// Deletes an object.
    pub async fn delete(&self, object: &ObjectRef) -> Result<(), KubeCallError> {
        if object.subresource.is_some() {
            return Err(KubeCallError::Invalid(
                "delete does not take a subresource".into(),
            ));
        }
        let resolved = self
            .resolve(&object.target, Verb::Delete, Some(&object.name), None)
            .await?;
        let mut params = DeleteParams::default();
        if resolved.scope == GrantScope::Owned {
            // The object read, and no namesake created since.
            let owned = self.owned(&resolved, object).await?;
            params.preconditions = Some(Preconditions {
                uid: owned.owner.uid,
                resource_version: None,
            });
        }
        let http = KubeRequest::new(resolved.url_path.as_str()).delete(&object.name, &params);
        self.send(resolved.connection, http).await.map(|_| ())
    }

    /// Reads `object` (the object itself, not a subresource) and returns it if the provider owns
    /// it; refuses it otherwise.
    async fn owned(
        &self,
        resolved: &Resolved<'_>,
        object: &ObjectRef,
    ) -> Result<OwnedObject, KubeCallError> {
        let http =
            KubeRequest::new(resolved.url_path.as_str()).get(&object.name, &GetParams::default());
        let text = self.send(resolved.connection, http).await?;
        let owner = Owner::of(&text).map_err(|err| KubeCallError::Other(err.to_string()))?;
        if !owner.is(&self.provider) {
            let what = describe(&object.target, Some(&object.name));
            let whose = match &owner.mark {
                Some(other) => format!("it is provider {other}'s"),
                None => "it carries no ownership mark".to_owned(),
            };
            return Err(self.refuse(
                DenialReason::NotOwned,
                &what,
                &format!(
                    "{whose}; an owned grant reaches only objects labelled {}={}",
                    ownership::OWNER_LABEL,
                    self.provider
                ),
            ));
        }
        Ok(OwnedObject { text, owner })
    }

    /// A body refused for ownership: the mark, or a body that is not what the call takes.
    fn ownership_error(&self, err: OwnershipError, call: &str) -> KubeCallError {
        match err {
            OwnershipError::Mark(why) => self.refuse(DenialReason::OwnershipMark, call, &why),
            OwnershipError::Invalid(why) => KubeCallError::Invalid(why),
        }
    }

    async fn send(
        &self,
        connection: &ClusterConnection,
        http: Result<http::Request<Vec<u8>>, ::kube::core::request::Error>,
    ) -> Result<String, KubeCallError> {
        let http = http.map_err(|err| KubeCallError::Invalid(format!("bad request: {err}")))?;
        tracing::debug!(
            provider = %self.provider,
            cluster = %connection.cluster,
            method = %http.method(),
            uri = %http.uri(),
            "kube call"
        );
        let _slot = self
            .in_flight
            .acquire()
            .await
            .map_err(|_| KubeCallError::Unavailable("the provider is shutting down".into()))?;
        exchange(&connection.client, http).await.inspect_err(|err| {
            if !matches!(err, KubeCallError::Invalid(_)) {
                self.metrics.kube_failed();
            }
        })
    }

    /// Validates, resolves and checks a call.
    async fn resolve(
        &self,
        target: &Target,
        verb: Verb,
        name: Option<&str>,
        subresource: Option<&str>,
    ) -> Result<Resolved<'_>, KubeCallError> {
        self.metrics.kube_call();
        let cluster = target.cluster;
        let (group, version) = split_api_version(&target.api_version)?;
        check_segment("kind", &target.kind)?;
        if let Some(ns) = &target.namespace {
            check_segment("namespace", ns)?;
        }
        if let Some(name) = name {
            check_segment("name", name)?;
        }
        if let Some(sub) = subresource {
            check_segment("subresource", sub)?;
        }
        // Deny before any API request when no grant could match (an obviously denied call costs
        // nothing and reveals nothing).
        if !self.grants.may_allow(cluster, group, verb) {
            let what = format!(
                "{verb} {} {} on the {cluster} cluster",
                target.api_version, target.kind
            );
            return Err(self.deny(&what));
        }
        let connection = match cluster {
            Cluster::Workload => self.workload.as_deref(),
            Cluster::Management => self.management.as_deref(),
        }
        .ok_or_else(|| {
            self.metrics.kube_failed();
            KubeCallError::Unavailable(format!("this host has no {cluster} cluster configured"))
        })?;
        let info = connection
            .resolve(&target.api_version, &target.kind)
            .await
            .inspect_err(|_| self.metrics.kube_failed())?;
        let scope = match (&target.namespace, info.namespaced) {
            (Some(ns), true) => Scope::Namespace(ns),
            (None, true) if verb == Verb::List || verb == Verb::Watch => Scope::AllNamespaces,
            (None, true) => {
                return Err(KubeCallError::Invalid(format!(
                    "{} is namespaced: the call needs a namespace",
                    target.kind
                )));
            }
            (Some(_), false) => {
                return Err(KubeCallError::Invalid(format!(
                    "{} is cluster-scoped: the call must not name a namespace",
                    target.kind
                )));
            }
            (None, false) => Scope::Cluster,
        };
        if let Some(sub) = subresource
            && !info.subresources.iter().any(|s| s == sub)
        {
            return Err(KubeCallError::NotFound(format!(
                "{} has no subresource {sub:?}",
                target.kind
            )));
        }
        let request = Request {
            cluster,
            group,
            resource: &info.plural,
            subresource,
            verb,
            scope,
        };
        let scope = match self.grants.check(&request) {
            Ok(scope) => scope,
            Err(denied) => return Err(self.deny(&denied.request)),
        };
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let url_path = match &target.namespace {
            Some(ns) => format!("{prefix}/namespaces/{ns}/{}", info.plural),
            None => format!("{prefix}/{}", info.plural),
        };
        Ok(Resolved {
            connection,
            url_path,
            scope,
            nodes: group.is_empty() && info.plural == "nodes",
        })
    }

    fn deny(&self, what: &str) -> KubeCallError {
        self.metrics.kube_denied();
        tracing::warn!(provider = %self.provider, call = %what, "kube call denied by the provider's grants");
        self.report(DenialReason::NotGranted, what);
        KubeCallError::PermissionDenied(format!(
            "the grants of provider {} do not allow {what}",
            self.provider
        ))
    }

    /// Refuses a call the grants allow but ownership does not: `what` is the call, `why` the
    /// rule.
    fn refuse(&self, reason: DenialReason, what: &str, why: &str) -> KubeCallError {
        self.metrics.kube_denied();
        self.metrics.kube_not_owned();
        tracing::warn!(provider = %self.provider, call = %what, %why, "kube call refused for ownership");
        let call = format!("{what}: {why}");
        self.report(reason, &call);
        KubeCallError::PermissionDenied(format!("provider {} may not {call}", self.provider))
    }

    fn report(&self, reason: DenialReason, call: &str) {
        if let Some(sink) = &self.on_denied {
            sink(Denial {
                provider: self.provider.to_string(),
                call: call.to_owned(),
                reason,
            });
        }
    }
}

/// An object read under an `owned` grant: its JSON and its owner.
struct OwnedObject {
    text: String,
    owner: Owner,
}

/// `Node n1`, `ConfigMap default/settings` (or the kind alone) for messages.
fn describe(target: &Target, name: Option<&str>) -> String {
    match (name, target.namespace.as_deref()) {
        (Some(name), Some(ns)) => format!("{} {ns}/{name}", target.kind),
        (Some(name), None) => format!("{} {name}", target.kind),
        (None, Some(ns)) => format!("{} in namespace {ns}", target.kind),
        (None, None) => format!("a {}", target.kind),
    }
}

/// `(group, version)` of an `apiVersion`; the core group is `""`.
fn split_api_version(api_version: &str) -> Result<(&str, &str), KubeCallError> {
    let (group, version) = match api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    };
    let valid_group = group
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-');
    let valid_version = !version.is_empty()
        && version
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !valid_group || !valid_version || (api_version.contains('/') && group.is_empty()) {
        return Err(KubeCallError::Invalid(format!(
            "apiVersion {api_version:?} is not `group/version` or `version`"
        )));
    }
    Ok((group, version))
}

/// Rejects anything that is not one safe URL path segment.
fn check_segment(what: &str, value: &str) -> Result<(), KubeCallError> {
    let ok = !value.is_empty()
        && value.len() <= 253
        && value != "."
        && value != ".."
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':'));
    if ok {
        Ok(())
    } else {
        Err(KubeCallError::Invalid(format!(
            "{what} {value:?} is not a valid Kubernetes name"
        )))
    }
}

/// Refuses a request body over [`MAX_REQUEST_BYTES`].
fn check_request_size(body: &str) -> Result<(), KubeCallError> {
    if body.len() > MAX_REQUEST_BYTES {
        return Err(KubeCallError::Invalid(format!(
            "the request body of {} bytes exceeds the limit of {MAX_REQUEST_BYTES} bytes per kube call",
            body.len()
        )));
    }
    Ok(())
}

/// Sends `http` and reads the response, at most [`MAX_RESPONSE_BYTES`] of it; an error status
/// becomes the matching [`KubeCallError`].
async fn exchange(client: &Client, http: http::Request<Vec<u8>>) -> Result<String, KubeCallError> {
    if http.body().len() > MAX_REQUEST_BYTES {
        return Err(KubeCallError::Invalid(format!(
            "the request of {} bytes exceeds the limit of {MAX_REQUEST_BYTES} bytes per kube call",
            http.body().len()
        )));
    }
    let response = client.send(http.map(Body::from)).await.map_err(map_error)?;
    let status = response.status();
    let too_large = || {
        KubeCallError::Other(format!(
            "the response exceeds the limit of {MAX_RESPONSE_BYTES} bytes per kube call (narrow the request: a label selector or a limit)"
        ))
    };
    let declared = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|len| len > MAX_RESPONSE_BYTES) {
        return Err(too_large());
    }
    let bytes = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
        .collect()
        .await
        .map_err(|err| {
            if err.is::<http_body_util::LengthLimitError>() {
                too_large()
            } else {
                KubeCallError::Unavailable(format!("reading the response: {err}"))
            }
        })?
        .to_bytes();
    let text = String::from_utf8(bytes.into())
        .map_err(|_| KubeCallError::Other("the response is not UTF-8".into()))?;
    if status.is_client_error() || status.is_server_error() {
        let status = serde_json::from_str::<::kube::core::Status>(&text)
            .unwrap_or_else(|_| {
                ::kube::core::Status::failure(text.trim(), "Failed to parse error data")
            })
            .with_code(status.as_u16());
        return Err(map_error(::kube::Error::Api(status.boxed())));
    }
    Ok(text)
}

/// Maps a kube-rs error onto the WIT error classes.
fn map_error(err: ::kube::Error) -> KubeCallError {
    match err {
        ::kube::Error::Api(status) => {
            let message = if status.message.is_empty() {
                status.reason.clone()
            } else {
                status.message.clone()
            };
            match status.code {
                401 | 403 => KubeCallError::PermissionDenied(format!(
                    "the API server refused the host's credentials: {message}"
                )),
                404 => KubeCallError::NotFound(message),
                // 410 Gone: a list's continue token expired; start the list again.
                409 | 410 => KubeCallError::Conflict(message),
                400 | 422 => KubeCallError::Invalid(message),
                408 | 429 | 500..=599 => KubeCallError::Unavailable(message),
                code => KubeCallError::Other(format!("HTTP {code}: {message}")),
            }
        }
        err @ (::kube::Error::HyperError(_) | ::kube::Error::Service(_)) => {
            KubeCallError::Unavailable(err.to_string())
        }
        other => KubeCallError::Other(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_versions() {
        assert_eq!(split_api_version("v1").unwrap(), ("", "v1"));
        assert_eq!(split_api_version("apps/v1").unwrap(), ("apps", "v1"));
        assert_eq!(
            split_api_version("cluster.x-k8s.io/v1beta1").unwrap(),
            ("cluster.x-k8s.io", "v1beta1")
        );
        for bad in [
            "",
            "/v1",
            "apps/",
            "a/b/c",
            "v1/../../x",
            "Apps/v1",
            "apps/v1?x",
        ] {
            assert!(split_api_version(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn segments() {
        for good in ["default", "a.b-c", "system:node", "x_y"] {
            assert!(check_segment("name", good).is_ok(), "{good}");
        }
        for bad in ["", ".", "..", "a/b", "a?b", "a#b", "a%2Fb", "a b"] {
            assert!(check_segment("name", bad).is_err(), "{bad}");
        }
    }

    fn api_error(code: u16) -> ::kube::Error {
        let status: ::kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "message": "boom", "reason": "Reason", "code": code
        }))
        .unwrap();
        ::kube::Error::Api(Box::new(status))
    }

    #[test]
    fn api_errors_map_onto_the_wit_cases() {
        let case = |code| map_error(api_error(code)).to_string();
        assert!(case(403).starts_with("permission-denied: "));
        assert!(case(401).starts_with("permission-denied: "));
        assert_eq!(case(404), "not-found: boom");
        assert_eq!(case(409), "conflict: boom");
        assert_eq!(case(410), "conflict: boom");
        assert_eq!(case(400), "invalid: boom");
        assert_eq!(case(422), "invalid: boom");
        assert_eq!(case(429), "unavailable: boom");
        assert_eq!(case(503), "unavailable: boom");
        assert_eq!(case(418), "other: HTTP 418: boom");
    }

    #[test]
    fn request_bodies_over_the_limit_are_invalid() {
        assert!(check_request_size(&"x".repeat(MAX_REQUEST_BYTES)).is_ok());
        let err = check_request_size(&"x".repeat(MAX_REQUEST_BYTES + 1)).unwrap_err();
        assert!(
            err.to_string().starts_with("invalid: the request body of"),
            "{err}"
        );
    }

    #[test]
    fn error_display_is_kebab_variant() {
        assert_eq!(
            KubeCallError::PermissionDenied("x".into()).to_string(),
            "permission-denied: x"
        );
    }
}
