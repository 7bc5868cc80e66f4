//! Capabilities: the host side of every import a provider gets, and the grants that bound them.
//!
//! A provider reaches the world only through these: [`kube`] (the API servers, checked against
//! [`grants`]), [`host`] (logging, time, sleep and a small cache), and for contract 0.2
//! [`outbound_http`] (`wasi:http`, checked against [`egress`] rules) and [`config`]
//! (`wasi:config/store`). Everything is per provider and bundled in [`Capabilities`], which each
//! call's store points to.

pub mod config;
pub mod egress;
pub mod grants;
pub mod host;
pub mod kube;
pub mod metrics;
pub mod outbound_http;
pub mod ownership;

use std::sync::{Arc, PoisonError, RwLock};

use self::config::{ConfigValues, ProviderConfig};
use self::grants::Grants;
use self::host::ProviderCache;
use self::kube::{ClusterConnection, DenialSink, KubeProxy};
use self::metrics::CapabilityMetrics;
use self::outbound_http::{HttpSettings, OutboundHttp};

/// Everything one provider may use, shared by all its calls.
pub struct Capabilities {
    provider: Arc<str>,
    kube: KubeProxy,
    cache: Arc<ProviderCache>,
    metrics: Arc<CapabilityMetrics>,
    http: RwLock<Arc<HttpSettings>>,
    config: ProviderConfig,
    on_denied: Option<DenialSink>,
}

impl std::fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capabilities")
            .field("provider", &self.provider)
            .field("kube", &self.kube)
            .field("http", &self.http_settings())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Capabilities {
    /// A builder for provider `name`.
    pub fn builder(name: impl Into<Arc<str>>) -> CapabilitiesBuilder {
        CapabilitiesBuilder {
            provider: name.into(),
            grants: Grants::none(),
            workload: None,
            management: None,
            cache: None,
            metrics: None,
            on_denied: None,
            http: HttpSettings::default(),
            config: ConfigValues::default(),
        }
    }

    /// A provider with no grants and no clusters: `kube` calls are all denied.
    pub fn isolated(name: impl Into<Arc<str>>) -> Arc<Self> {
        Self::builder(name).build()
    }

    /// The provider's name (as configured by the admin, used in logs).
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// The `kube` import.
    pub fn kube(&self) -> &KubeProxy {
        &self.kube
    }

    /// The provider's cache.
    pub fn cache(&self) -> &ProviderCache {
        &self.cache
    }

    /// The provider's cache, to hand to a reloaded version of the same provider.
    pub fn shared_cache(&self) -> Arc<ProviderCache> {
        Arc::clone(&self.cache)
    }

    /// The provider's counters.
    pub fn metrics(&self) -> &CapabilityMetrics {
        &self.metrics
    }

    /// The provider's counters, to hand to a reloaded version of the same provider.
    pub fn shared_metrics(&self) -> Arc<CapabilityMetrics> {
        Arc::clone(&self.metrics)
    }

    /// The outbound HTTP settings in force.
    pub fn http_settings(&self) -> Arc<HttpSettings> {
        Arc::clone(&self.http.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Replaces the outbound HTTP settings (calls already running keep theirs).
    pub fn set_http_settings(&self, settings: HttpSettings) {
        *self.http.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(settings);
    }

    /// The provider's configuration (`wasi:config/store`).
    pub fn config(&self) -> &ProviderConfig {
        &self.config
    }

    /// The `wasi:http` hooks of one call, with the settings in force now.
    pub(crate) fn outbound_http(&self) -> OutboundHttp {
        OutboundHttp::new(
            Arc::clone(&self.provider),
            self.http_settings(),
            Arc::clone(&self.metrics),
            self.on_denied.clone(),
        )
    }
}

/// Builder for [`Capabilities`].
pub struct CapabilitiesBuilder {
    provider: Arc<str>,
    grants: Grants,
    workload: Option<Arc<ClusterConnection>>,
    management: Option<Arc<ClusterConnection>>,
    cache: Option<Arc<ProviderCache>>,
    metrics: Option<Arc<CapabilityMetrics>>,
    on_denied: Option<DenialSink>,
    http: HttpSettings,
    config: ConfigValues,
}

impl std::fmt::Debug for CapabilitiesBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapabilitiesBuilder")
            .field("provider", &self.provider)
            .field("grants", &self.grants)
            .field("workload", &self.workload.is_some())
            .field("management", &self.management.is_some())
            .field("on_denied", &self.on_denied.is_some())
            .field("http", &self.http)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl CapabilitiesBuilder {
    /// The grants (default: none, every `kube` call is denied).
    pub fn grants(mut self, grants: Grants) -> Self {
        self.grants = grants;
        self
    }

    /// The workload cluster.
    pub fn workload(mut self, connection: Arc<ClusterConnection>) -> Self {
        self.workload = Some(connection);
        self
    }

    /// The management cluster (optional; calls to it fail as unavailable without one).
    pub fn management(mut self, connection: Arc<ClusterConnection>) -> Self {
        self.management = Some(connection);
        self
    }

    /// A cache to share (e.g. the previous version's, across a hot reload). Default: a new one.
    pub fn cache(mut self, cache: Arc<ProviderCache>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Counters to share. Default: new ones.
    pub fn metrics(mut self, metrics: Arc<CapabilityMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Where denied `kube` calls and outbound requests are reported, besides the log and the
    /// counters.
    pub fn on_denied(mut self, sink: DenialSink) -> Self {
        self.on_denied = Some(sink);
        self
    }

    /// Outbound HTTP settings (default: every request denied).
    pub fn http(mut self, settings: HttpSettings) -> Self {
        self.http = settings;
        self
    }

    /// Configuration values (default: none).
    pub fn config(mut self, values: ConfigValues) -> Self {
        self.config = values;
        self
    }

    /// The capabilities.
    pub fn build(self) -> Arc<Capabilities> {
        let metrics = self.metrics.unwrap_or_default();
        Arc::new(Capabilities {
            kube: KubeProxy::new(
                Arc::clone(&self.provider),
                self.grants,
                self.workload,
                self.management,
                Arc::clone(&metrics),
                self.on_denied.clone(),
            ),
            provider: self.provider,
            cache: self.cache.unwrap_or_default(),
            metrics,
            http: RwLock::new(Arc::new(self.http)),
            config: {
                let config = ProviderConfig::default();
                config.replace(self.config);
                config
            },
            on_denied: self.on_denied,
        })
    }
}
