//! Test support for Capstan: a real Kubernetes control plane for integration and e2e tests.
//!
//! [`ControlPlane::shared`] starts one control plane per test binary (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok, built from the pinned upstream Go modules by
//! `tests/control-plane/cp build`) and [`ControlPlane::start`] starts a fresh one for a test that
//! must not share. Tests isolate themselves with [`ControlPlane::create_namespace_unique`] and
//! unique names for cluster-scoped objects ([`unique_name`]).
//!
//! Nothing outlives the test process: the control plane's supervisor watches a pipe from the test
//! process and stops every component when it closes, and each component dies with the
//! supervisor (`PR_SET_PDEATHSIG`). Directories left by an earlier crashed run are swept on the
//! next start.
//!
//! [`upstream`] gives the tests upstream Karpenter and Cluster API files (CRDs, examples) from the
//! pinned Go modules in the Go module cache.

pub mod cluster_api;
mod control_plane;
mod paths;
pub mod sigstore;
pub mod supply_chain;
pub mod upstream;
mod wait;
mod yaml;

pub use control_plane::{ControlPlane, Options};
pub use paths::{bin_dir, repo_root};
pub use wait::wait_until;
pub use yaml::{parse_yaml, unique_name};

use std::path::PathBuf;
use std::time::Duration;

/// Errors of the test harness.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `tests/control-plane/cp build` failed; the message holds the tail of its output.
    #[error("building the control plane failed: {0}")]
    Build(String),
    /// Upstream test data (a pinned Go module or a file in it) is not available; the message
    /// says what is missing and how to get it.
    #[error("upstream test data: {0}")]
    Upstream(String),
    /// The control plane did not become ready; the message holds the component logs' tails.
    #[error("control plane did not start: {0}")]
    Start(String),
    /// A component of a running control plane died; the message holds its log's tail.
    #[error("control plane failed: {0}")]
    Failed(String),
    /// A supply-chain tool (registry, cosign, oras) failed; the message holds its output.
    #[error("{0}")]
    Tool(String),
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The generated kubeconfig could not be loaded.
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// A manifest could not be parsed or is not a Kubernetes object.
    #[error("manifest {source_name}: {message}")]
    Manifest {
        /// Where the manifest came from (file name or a description).
        source_name: String,
        /// What is wrong.
        message: String,
    },
    /// Something did not happen in time.
    #[error("timed out after {timeout:?} waiting for {what}{}", last.as_ref().map(|l| format!(" (last: {l})")).unwrap_or_default())]
    Timeout {
        /// How long was waited.
        timeout: Duration,
        /// What was waited for.
        what: String,
        /// The last error or observation, if any.
        last: Option<String>,
    },
}

/// Result with the harness [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.into();
    move |source| Error::Io { path, source }
}
