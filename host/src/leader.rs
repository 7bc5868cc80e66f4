//! Leader election on a `coordination.k8s.io/v1` Lease, like client-go's `leaderelection`: the
//! replica named in `spec.holderIdentity` runs the controllers; the others poll the Lease every
//! retry period and take it when it is free (released on shutdown) or has not changed for a whole
//! lease duration (its holder died). Every write carries the `resourceVersion` that was read, so
//! two replicas can never both win the same round.
//!
//! [`lead`] runs a future (the controllers) only while this replica holds the Lease, stops it when
//! the Lease is lost, and releases the Lease on shutdown so another replica takes over at its next
//! poll instead of after the lease duration.

pub mod decision;

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use crate::serve::Readiness;

pub use self::decision::{Decision, claimed, decide, next_attempt, released, timings};

/// Why leader election failed or stopped.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// A Kubernetes API call failed.
    #[error("lease {name}: kubernetes API: {source}")]
    Kube {
        /// `namespace/name` of the Lease.
        name: String,
        /// The API error.
        source: kube::Error,
    },
    /// Another replica took the Lease.
    #[error("lease {name}: lost to {holder}")]
    Lost {
        /// `namespace/name` of the Lease.
        name: String,
        /// The new holder.
        holder: String,
    },
    /// Renewing kept failing for longer than the renew deadline.
    #[error("lease {name}: not renewed within {deadline:?}")]
    RenewDeadline {
        /// `namespace/name` of the Lease.
        name: String,
        /// The renew deadline.
        deadline: Duration,
    },
    /// The configuration cannot work.
    #[error("leader election: {0}")]
    Config(String),
}

/// Where the Lease is and how long it lasts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity (`holderIdentity`).
    pub identity: String,
    /// How long a holder that stopped renewing keeps the Lease.
    pub lease_duration: Duration,
    /// How long the holder keeps trying to renew before it gives up.
    pub renew_deadline: Duration,
    /// How often followers poll and the holder renews.
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// A configuration with the renew deadline and retry period derived from `lease_duration`
    /// (see [`timings`]).
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
        lease_duration: Duration,
    ) -> Result<Self, LeaderError> {
        if lease_duration < Duration::from_secs(1) {
            return Err(LeaderError::Config(format!(
                "lease duration {lease_duration:?} is shorter than 1s"
            )));
        }
        let (renew_deadline, retry_period) = timings(lease_duration);
        Ok(Self {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration,
            renew_deadline,
            retry_period,
        })
    }
}

/// This replica's identity: `$POD_NAME`, else the hostname plus a random suffix.
pub fn default_identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "capstan".to_owned());
    // RandomState is seeded randomly per process: a suffix without a random-number crate.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    format!("{host}_{:08x}", hasher.finish() as u32)
}

/// The last version of the Lease this replica read, and when (on its own clock) it last changed.
#[derive(Debug, Clone)]
struct Observed {
    resource_version: Option<String>,
    holder: Option<String>,
    lease_duration: Duration,
    since: Instant,
}

/// One replica's side of the election.
#[derive(Debug)]
pub struct LeaderElection {
    api: Api<Lease>,
    config: LeaseConfig,
    observed: Option<Observed>,
    /// The decision of the last round that read the Lease.
    last: Option<Decision>,
}

impl LeaderElection {
    /// An election on the Lease `config` names, through `client`.
    pub fn new(client: Client, config: LeaseConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
            last: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    fn lease_name(&self) -> String {
        format!("{}/{}", self.config.namespace, self.config.name)
    }

    fn kube_err(&self, source: kube::Error) -> LeaderError {
        LeaderError::Kube {
            name: self.lease_name(),
            source,
        }
    }

    fn spec_for_self(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        claimed(
            previous,
            &self.config.identity,
            self.config.lease_duration,
            k8s_openapi::jiff::Timestamp::now(),
        )
    }

    /// Records what was read; returns how long the record has been unchanged.
    fn observe(&mut self, lease: &Lease) -> Duration {
        let spec = lease.spec.clone().unwrap_or_default();
        let version = lease.metadata.resource_version.clone();
        let lease_duration = Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
        );
        match &self.observed {
            Some(seen) if seen.resource_version == version => seen.since.elapsed(),
            _ => {
                self.observed = Some(Observed {
                    resource_version: version,
                    holder: spec.holder_identity,
                    lease_duration,
                    since: Instant::now(),
                });
                Duration::ZERO
            }
        }
    }

    /// The holder as last observed.
    pub fn observed_holder(&self) -> Option<&str> {
        self.observed.as_ref().and_then(|o| o.holder.as_deref())
    }

    /// One round: creates the Lease if missing, takes it if free or expired, renews it if ours.
    /// `Ok(true)` when this replica holds the Lease afterwards. A conflict (another replica wrote
    /// first) is `Ok(false)`.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaderError> {
        let Some(lease) = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.kube_err(e))?
        else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec_for_self(None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(&created);
                    Ok(true)
                }
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(err) => Err(self.kube_err(err)),
            };
        };
        let unchanged_for = self.observe(&lease);
        let (holder, duration) = self
            .observed
            .as_ref()
            .map(|o| (o.holder.clone(), o.lease_duration))
            .unwrap_or_default();
        let decision = decide(
            holder.as_deref(),
            duration,
            unchanged_for,
            &self.config.identity,
        );
        self.last = Some(decision.clone());
        if !decision.may_take() {
            return Ok(false);
        }
        if let Decision::Expired { holder } = &decision {
            tracing::info!(lease = %self.lease_name(), %holder, "lease expired, taking it over");
        }
        let mut updated = lease.clone();
        updated.spec = Some(self.spec_for_self(lease.spec.as_ref()));
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &updated)
            .await
        {
            Ok(written) => {
                self.observe(&written);
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(err) => Err(self.kube_err(err)),
        }
    }

    /// Polls every retry period until this replica holds the Lease. API errors are logged and
    /// retried. `readiness` learns that this replica reached the API server (a follower needs no
    /// other cache).
    pub async fn acquire(&mut self, readiness: &Readiness) {
        let mut last_holder: Option<String> = None;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => return,
                Ok(false) => {
                    readiness.set_caches_synced(true);
                    let holder = self.observed_holder().map(str::to_owned);
                    if holder != last_holder {
                        tracing::info!(lease = %self.lease_name(), holder = ?holder, "waiting for the lease");
                        last_holder = holder;
                    }
                }
                Err(err) => tracing::warn!(error = %err, "cannot acquire the lease; retrying"),
            }
            let wait = match &self.last {
                Some(decision) => next_attempt(decision, self.config.retry_period),
                None => self.config.retry_period,
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Renews the Lease every retry period while this replica holds it; returns why it stopped
    /// (lost to another replica, or not renewed within the renew deadline).
    pub async fn hold(&mut self) -> LeaderError {
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(self.config.retry_period).await;
            let attempt = tokio::time::timeout(
                self.config.renew_deadline.saturating_sub(renewed.elapsed()),
                self.try_acquire_or_renew(),
            )
            .await;
            match attempt {
                Ok(Ok(true)) => renewed = Instant::now(),
                // A write conflict with the Lease last read as ours: someone wrote it between the
                // read and the renewal. Read it again next period (within the renew deadline), as
                // client-go does, and name the holder then.
                Ok(Ok(false)) if self.observed_holder() == Some(self.config.identity.as_str()) => {
                    tracing::debug!(lease = %self.lease_name(), "renewal conflicted; reading the lease again");
                }
                Ok(Ok(false)) => {
                    return LeaderError::Lost {
                        name: self.lease_name(),
                        holder: self.observed_holder().unwrap_or_default().to_owned(),
                    };
                }
                Ok(Err(err)) => tracing::warn!(error = %err, "cannot renew the lease; retrying"),
                Err(_elapsed) => {}
            }
            if renewed.elapsed() >= self.config.renew_deadline {
                return LeaderError::RenewDeadline {
                    name: self.lease_name(),
                    deadline: self.config.renew_deadline,
                };
            }
        }
    }

    /// Gives the Lease up if this replica holds it: no holder, a 1 s duration, so the next poll of
    /// another replica takes it.
    pub async fn release(&mut self) -> Result<(), LeaderError> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.kube_err(e))?
        else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        *spec = released(spec, k8s_openapi::jiff::Timestamp::now());
        self.api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
            .map_err(|e| self.kube_err(e))?;
        Ok(())
    }
}

/// How [`lead`] ended without an error.
#[derive(Debug)]
pub enum Outcome<T> {
    /// `shutdown` completed (the Lease was released if held).
    Shutdown,
    /// The work finished on its own (the Lease was released).
    Finished(T),
}

/// Waits for the Lease, then runs `work` while holding it. Returns when `shutdown` completes,
/// when `work` finishes (both release the Lease) or with an error when the Lease is lost (the
/// work is dropped; the caller should exit, as controller-runtime does).
pub async fn lead<T>(
    election: &mut LeaderElection,
    readiness: &Readiness,
    shutdown: impl Future<Output = ()>,
    work: impl Future<Output = T>,
) -> Result<Outcome<T>, LeaderError> {
    let mut shutdown = std::pin::pin!(shutdown);
    readiness.set_leader(false);
    tokio::select! {
        () = election.acquire(readiness) => {}
        () = &mut shutdown => return Ok(Outcome::Shutdown),
    }
    tracing::info!(
        lease = %election.lease_name(),
        identity = %election.config.identity,
        "acquired the lease; starting the controllers"
    );
    readiness.set_caches_synced(false);
    readiness.set_leader(true);
    let outcome = tokio::select! {
        err = election.hold() => Err(err),
        out = work => Ok(Outcome::Finished(out)),
        () = &mut shutdown => Ok(Outcome::Shutdown),
    };
    if outcome.is_ok() {
        match election.release().await {
            Ok(()) => tracing::info!(lease = %election.lease_name(), "released the lease"),
            Err(err) => tracing::warn!(error = %err, "cannot release the lease"),
        }
    }
    outcome
}
