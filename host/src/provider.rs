//! Live providers: the [`Registry`] the controllers resolve providers from, loading a provider
//! from its bytes and grants, and the conversions between the API types and the WIT types
//! ([`convert`]).
//!
//! A NodeClaim reaches its provider through `spec.nodeClassRef` → `capstan.dev` NodeClass →
//! `spec.provider` → [`Registry::get`].

pub mod convert;
pub mod crypto;
pub mod fetch;
pub mod health;
pub mod kinds;
pub mod launch_answer;
pub mod oci;
pub mod package;
pub mod registry;
pub mod source;
pub mod spec;
pub mod verify;

use std::sync::Arc;

pub use self::registry::Registry;

use crate::capability::Capabilities;
use crate::capability::config::ConfigValues;
use crate::capability::grants::{Cluster, Grants};
use crate::capability::kube::{ClusterConnection, DenialSink};
use crate::capability::outbound_http::HttpSettings;
use crate::runtime::{Limits, LoadError, ProviderPre, Runtime};

/// Why a provider could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ProviderLoadError {
    /// The component did not load.
    #[error("provider {name}: {source}")]
    Load {
        /// The provider's configured name.
        name: String,
        /// What went wrong.
        source: LoadError,
    },
}

/// What a provider is loaded from.
#[derive(Debug, Clone)]
pub struct ProviderSource {
    /// The name NodeClasses refer to (`spec.provider`).
    pub name: String,
    /// The component bytes.
    pub bytes: Vec<u8>,
    /// What it may do through the `kube` import.
    pub grants: Grants,
    /// Its per-call limits.
    pub limits: Limits,
    /// Its outbound HTTP settings (contract 0.2; the default denies every request).
    pub http: HttpSettings,
    /// Its configuration (contract 0.2 `wasi:config/store`).
    pub config: ConfigValues,
}

/// Loads providers for one host: the runtime, and the cluster connections every provider shares
/// (discovery is cached per connection).
#[derive(Debug, Clone)]
pub struct Loader {
    runtime: Arc<Runtime>,
    workload: Option<Arc<ClusterConnection>>,
    management: Option<Arc<ClusterConnection>>,
}

impl Loader {
    /// A loader on `runtime` with the given clusters.
    pub fn new(
        runtime: Arc<Runtime>,
        workload: Option<kube::Client>,
        management: Option<kube::Client>,
    ) -> Self {
        Self {
            runtime,
            workload: workload.map(|client| ClusterConnection::new(Cluster::Workload, client)),
            management: management
                .map(|client| ClusterConnection::new(Cluster::Management, client)),
        }
    }

    /// Compiles (through the runtime's cache), validates and links `source`. A `previous`
    /// version of the same provider hands over its cache and counters, so a reload keeps them.
    /// Denied `kube` calls are reported to `on_denied`. CPU-heavy on a cache miss: call it off
    /// the async executor.
    pub fn load(
        &self,
        source: ProviderSource,
        previous: Option<&ProviderPre>,
        on_denied: Option<DenialSink>,
    ) -> Result<ProviderPre, ProviderLoadError> {
        let mut caps = Capabilities::builder(source.name.as_str())
            .grants(source.grants)
            .http(source.http)
            .config(source.config);
        if let Some(connection) = &self.workload {
            caps = caps.workload(Arc::clone(connection));
        }
        if let Some(connection) = &self.management {
            caps = caps.management(Arc::clone(connection));
        }
        if let Some(previous) = previous {
            let previous = previous.capabilities();
            caps = caps
                .cache(previous.shared_cache())
                .metrics(previous.shared_metrics());
        }
        if let Some(sink) = on_denied {
            caps = caps.on_denied(sink);
        }
        self.runtime
            .load(&source.bytes, source.limits, caps.build())
            .map_err(|source_err| ProviderLoadError::Load {
                name: source.name,
                source: source_err,
            })
    }
}
