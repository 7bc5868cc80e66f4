//! Capabilities: the host side of every import a provider gets, and the grants that bound them.
//!
//! A provider reaches the world only through these: [`kube`] (the API servers, checked against
//! [`grants`]) and [`host`] (logging, time, sleep and a small cache). Everything is per provider
//! and bundled in [`Capabilities`], which each call's store points to.

pub mod grants;
pub mod host;
pub mod kube;
pub mod metrics;

use std::sync::Arc;

use self::grants::Grants;
use self::host::ProviderCache;
use self::kube::{ClusterConnection, DenialSink, KubeProxy};
use self::metrics::CapabilityMetrics;

/// Everything one provider may use, shared by all its calls.
#[derive(Debug)]
pub struct Capabilities {
    provider: Arc<str>,
    kube: KubeProxy,
    cache: Arc<ProviderCache>,
    metrics: Arc<CapabilityMetrics>,
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
}

impl std::fmt::Debug for CapabilitiesBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapabilitiesBuilder")
            .field("provider", &self.provider)
            .field("grants", &self.grants)
            .field("workload", &self.workload.is_some())
            .field("management", &self.management.is_some())
            .field("on_denied", &self.on_denied.is_some())
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

    /// Where denied `kube` calls are reported, besides the log and the counters.
    pub fn on_denied(mut self, sink: DenialSink) -> Self {
        self.on_denied = Some(sink);
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
                self.on_denied,
            ),
            provider: self.provider,
            cache: self.cache.unwrap_or_default(),
            metrics,
        })
    }
}
