//! Live providers: the [`Registry`] the controllers resolve providers from, loading a provider
//! from its bytes and grants, and the conversions between the API types and the WIT types
//! ([`convert`]).
//!
//! A NodeClaim reaches its provider through `spec.nodeClassRef` → `capstan.dev` NodeClass →
//! `spec.provider` → [`Registry::get`].

pub mod convert;
pub mod registry;

use std::sync::Arc;

pub use self::registry::Registry;

use crate::capability::Capabilities;
use crate::capability::grants::{Cluster, Grants};
use crate::capability::kube::ClusterConnection;
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
}

/// Compiles and links a provider with its grants and cluster connections. CPU-heavy on a cache
/// miss: call it off the async executor.
pub fn load(
    runtime: &Runtime,
    source: ProviderSource,
    workload: Option<kube::Client>,
    management: Option<kube::Client>,
) -> Result<ProviderPre, ProviderLoadError> {
    let mut caps = Capabilities::builder(source.name.as_str()).grants(source.grants);
    if let Some(client) = workload {
        caps = caps.workload(ClusterConnection::new(Cluster::Workload, client));
    }
    if let Some(client) = management {
        caps = caps.management(ClusterConnection::new(Cluster::Management, client));
    }
    runtime
        .load(&source.bytes, source.limits, caps.build())
        .map_err(|source_err| ProviderLoadError::Load {
            name: source.name,
            source: source_err,
        })
}

/// Shorthand for a shared provider.
pub type SharedProvider = Arc<ProviderPre>;
