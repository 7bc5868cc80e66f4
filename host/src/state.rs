//! The cluster as the controllers see it: one watch per kind, kept in a reflector store and fanned
//! out to whoever needs to react to a change.
//!
//! - [`backoff`]: how every watch of the host retries after the API server went away (bounded, so
//!   watches resume within seconds of it coming back).
//! - [`cache`]: [`Cache`], one watch of a kind feeding a [`Store`](kube::runtime::reflector::Store)
//!   and subscribers. A subscriber is told about an object only after the store holds it, so a
//!   reconcile triggered by a change always reads that change (or a newer one) from the store.
//! - [`cluster`]: [`ClusterState`], the caches the provisioner and disruption decide over, and
//!   [`View`], one moment of them.
//! - [`served`]: node classes of the kinds providers serve, and who serves which kind.

pub mod backoff;
pub mod cache;
pub mod cluster;
pub mod served;

pub use self::backoff::watch_backoff;
pub use self::cache::Cache;
pub use self::cluster::{ClusterState, DraView, View};
