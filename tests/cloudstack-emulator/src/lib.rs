//! A CloudStack API emulator for Capstan's tests.
//!
//! [`Emulator::start`] serves CloudStack's API at `http://127.0.0.1:<port>/client/api` on the
//! caller's tokio runtime: requests are verified exactly as CloudStack's API server verifies
//! them (with the `cloudstack-sign` crate), the commands a provider needs answer with JSON
//! shaped like CloudStack's (see [`api::COMMANDS`]), VM work runs as async jobs that go pending →
//! success or failure, and errors use CloudStack's format and codes. The returned
//! [`EmulatorHandle`] inspects the state and turns the knobs tests need (zone capacity, job
//! latency and failures, response faults, credentials). Given a kube client, the emulator
//! registers each Running VM's Node as its kubelet would (kwok-managed) and deletes it when the
//! VM is expunged. The `cloudstack-emulator` binary serves the same with the knobs over HTTP
//! (`/admin/...`, see [`admin`]).

pub mod admin;
pub mod api;
pub mod catalog;
pub mod faults;
pub(crate) mod jobs;
pub mod nodes;
pub(crate) mod server;
pub mod state;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use catalog::{Catalog, Tag};
pub use cloudstack_sign::Credentials;
pub use faults::{FaultRule, HttpFault, JobFailure, JobLatency};
pub use jobs::JobSnapshot;
pub use nodes::{NodeOptions, RegisterTaint, provider_id};
pub use state::{Nic, RequestRecord, Snapshot, Vm, VmState};

use server::Shared;
use state::State;

/// The API key of the default account.
pub const DEFAULT_API_KEY: &str = "capstan-emulator-api-key";
/// The secret key of the default account.
pub const DEFAULT_SECRET_KEY: &str = "capstan-emulator-secret-key";

/// Errors starting the emulator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listen address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// Node work did not finish in time.
    #[error("Node work still pending after {0:?}")]
    NodesPending(Duration),
}

/// How the emulator starts.
#[derive(Clone)]
pub struct Config {
    /// Where to listen; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Accepted credentials.
    pub accounts: Vec<Credentials>,
    /// What the cloud offers.
    pub catalog: Catalog,
    /// Latency of VM jobs (deploy, destroy); tag jobs complete at once.
    pub job_latency: JobLatency,
    /// The cluster the VMs' Nodes register with; none registers no Nodes.
    pub kube: Option<kube::Client>,
    /// How Nodes are registered.
    pub nodes: NodeOptions,
    /// Serve the `/admin/` endpoints.
    pub admin: bool,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("accounts", &self.accounts)
            .field("job_latency", &self.job_latency)
            .field("kube", &self.kube.is_some())
            .field("nodes", &self.nodes)
            .field("admin", &self.admin)
            .finish_non_exhaustive()
    }
}

impl Default for Config {
    /// Loopback on a free port, the default account, the sample catalog, default job latency,
    /// no Nodes, no admin endpoints.
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            accounts: vec![Credentials::new(DEFAULT_API_KEY, DEFAULT_SECRET_KEY)],
            catalog: Catalog::sample(),
            job_latency: JobLatency::default(),
            kube: None,
            nodes: NodeOptions::default(),
            admin: false,
        }
    }
}

/// The emulator.
#[derive(Debug)]
pub struct Emulator;

impl Emulator {
    /// Binds, and serves on background tasks of the current tokio runtime until the handle is
    /// dropped.
    pub async fn start(config: Config) -> Result<EmulatorHandle, Error> {
        let address = config.listen;
        let bind = |source| Error::Bind { address, source };
        let listener = tokio::net::TcpListener::bind(address).await.map_err(bind)?;
        let addr = listener.local_addr().map_err(bind)?;
        let state = State::new(config.catalog, config.accounts.clone(), config.job_latency);
        let shared = Arc::new(Shared::new(state, config.admin));
        let (node_tx, node_task) =
            nodes::spawn_worker(config.kube, config.nodes, Arc::downgrade(&shared));
        shared.set_node_sender(node_tx);
        let server_task = tokio::spawn(server::serve(listener, Arc::clone(&shared)));
        let tick_task = tokio::spawn(server::tick(Arc::downgrade(&shared)));
        tracing::info!(%addr, "CloudStack emulator listening");
        Ok(EmulatorHandle {
            addr,
            credentials: config.accounts.into_iter().next(),
            shared,
            tasks: vec![server_task, tick_task, node_task],
        })
    }
}

/// A running emulator; dropping it stops it.
#[derive(Debug)]
pub struct EmulatorHandle {
    addr: SocketAddr,
    credentials: Option<Credentials>,
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for EmulatorHandle {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl EmulatorHandle {
    /// The API endpoint, `http://127.0.0.1:<port>/client/api`.
    pub fn url(&self) -> String {
        format!("http://{}/client/api", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The first configured account's credentials.
    pub fn credentials(&self) -> Option<Credentials> {
        self.credentials.clone()
    }

    /// VMs, jobs, requests and Node errors now (due jobs completed first).
    pub fn snapshot(&self) -> Snapshot {
        self.shared.tick();
        self.shared.state().snapshot()
    }

    /// VMs now (expunged ones are gone).
    pub fn vms(&self) -> Vec<Vm> {
        self.snapshot().vms
    }

    /// The VM with this UUID.
    pub fn vm(&self, id: &str) -> Option<Vm> {
        self.vms().into_iter().find(|vm| vm.id == id)
    }

    /// The VM with this exact name.
    pub fn vm_named(&self, name: &str) -> Option<Vm> {
        self.vms().into_iter().find(|vm| vm.name == name)
    }

    /// Async jobs, oldest first.
    pub fn jobs(&self) -> Vec<JobSnapshot> {
        self.snapshot().jobs
    }

    /// Requests answered, oldest first (signatures left out).
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.state().requests.clone()
    }

    /// How many answered requests were for `command`.
    pub fn count(&self, command: &str) -> usize {
        self.shared
            .state()
            .requests
            .iter()
            .filter(|r| r.command.as_deref() == Some(command))
            .count()
    }

    /// The catalog now.
    pub fn catalog(&self) -> Catalog {
        self.shared.state().catalog.clone()
    }

    /// Changes the catalog (a new template, a removed offering...).
    pub fn update_catalog(&self, change: impl FnOnce(&mut Catalog)) {
        change(&mut self.shared.state().catalog);
    }

    /// Sets a zone's capacity (`None`: unlimited); false if there is no such zone.
    pub fn set_zone_capacity(&self, zone_id: &str, capacity: Option<u32>) -> bool {
        self.shared.state().set_zone_capacity(zone_id, capacity)
    }

    /// Sets the latency of VM jobs started from now on.
    pub fn set_job_latency(&self, latency: JobLatency) {
        self.shared.state().job_latency = latency;
    }

    /// Makes the next job matching `failure.command` fail.
    pub fn fail_next_job(&self, failure: JobFailure) {
        self.shared.state().faults.job_failures.push(failure);
    }

    /// Adds a response fault.
    pub fn inject(&self, rule: FaultRule) {
        self.shared.state().faults.rules.push(rule);
    }

    /// Clears response faults and planned job failures.
    pub fn clear_faults(&self) {
        let mut state = self.shared.state();
        state.faults.rules.clear();
        state.faults.job_failures.clear();
    }

    /// Replaces the accepted credentials (a rotated or revoked key).
    pub fn set_accounts(&self, accounts: Vec<Credentials>) {
        self.shared.state().accounts = accounts;
    }

    /// Node work that failed so far.
    pub fn node_errors(&self) -> Vec<String> {
        self.shared.state().node_errors.clone()
    }

    /// Waits until queued Node work (registrations, deletions, reboots until the rebooted Node
    /// is Ready again) is done.
    pub async fn settle(&self, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        loop {
            self.shared.tick();
            if self.shared.node_pending() == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::NodesPending(timeout));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
