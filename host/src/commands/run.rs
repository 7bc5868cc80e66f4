//! `capstan run`: the controllers, with providers from `Provider` resources and files.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;

use capstan::capability::grants::Grants;
use capstan::controllers::{self, ProvidersSetup};
use capstan::provider::{Loader, ProviderSource, Registry};
use capstan::rules::default_spread::SchedulerConfig;
use capstan::runtime::Limits;
use capstan::runtime::validate::DEFAULT_MAX_COMPONENT_SIZE;
use capstan::scheduling::{MinValuesPolicy, PreferencePolicy};
use capstan::{leader, serve};

use super::{
    CacheArgs, block_on, kube_config, parse_duration, parse_short_duration, read_component,
    read_grants,
};

/// Arguments of `capstan run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// A provider from a file: `NAME=FILE.wasm` (repeatable). Providers normally come from
    /// `Provider` resources; a Provider of the same name takes over from a file.
    #[arg(long = "provider")]
    providers: Vec<String>,
    /// A provider's grants: `NAME=FILE` (YAML or JSON; repeatable).
    #[arg(long = "grants")]
    grants: Vec<String>,
    /// Kubeconfig of the workload cluster (default: in-cluster or ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig of the management cluster (Cluster API providers).
    #[arg(long)]
    management_kubeconfig: Option<PathBuf>,
    /// Delete a NodeClaim not launched this long after creation.
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    launch_timeout: Duration,
    /// Delete a NodeClaim whose Node has not registered this long after launch.
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    registration_timeout: Duration,
    /// How often garbage collection runs.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    gc_interval: Duration,
    /// Leaked instances younger than this are left alone.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    gc_grace: Duration,
    /// Manage only NodeClaims, NodePools and NodeClasses with these labels (`k=v,...`); the
    /// provisioner then also provisions only for pods and onto nodes with them.
    #[arg(long)]
    selector: Option<String>,
    /// The parts of the cluster's kube-scheduler configuration the simulation mirrors (Karpenter's
    /// document, YAML or JSON): `podTopologySpread.defaultConstraints`, applied to every pod that
    /// declares no topology spread constraints of its own. Empty: none.
    #[arg(long, env = "SCHEDULER_CONFIG", value_parser = parse_scheduler_config)]
    scheduler_config: Option<Box<SchedulerConfig>>,
    /// Make no node for pods that ask for devices through ResourceClaims (Dynamic Resource
    /// Allocation), as Karpenter does by default (`IGNORE_DRA_REQUESTS=true`). Off: Capstan
    /// launches instance types whose devices (the provider's templates) satisfy the claims.
    #[arg(
        long,
        env = "IGNORE_DRA_REQUESTS",
        default_value_t = false,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    ignore_dra_requests: bool,
    /// Close a provisioning batch after this long without a new unschedulable pod.
    #[arg(long, env = "BATCH_IDLE_DURATION", default_value = "1s", value_parser = parse_short_duration)]
    batch_idle_duration: Duration,
    /// Close a provisioning batch this long after its first pod at the latest.
    #[arg(long, env = "BATCH_MAX_DURATION", default_value = "10s", value_parser = parse_short_duration)]
    batch_max_duration: Duration,
    /// Requests per second to the API server, on average (a token bucket; Karpenter's
    /// `KUBE_CLIENT_QPS`).
    #[arg(long, env = "KUBE_CLIENT_QPS", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    kube_client_qps: u32,
    /// Requests to the API server at once before the QPS limit applies.
    #[arg(long, env = "KUBE_CLIENT_BURST", default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..))]
    kube_client_burst: u32,
    /// How the simulation treats preferences (preferred affinities, `ScheduleAnyway` spreads):
    /// `Respect` (relaxed one at a time when a pod does not fit) or `Ignore`.
    #[arg(long, env = "PREFERENCE_POLICY", default_value = "Respect")]
    preference_policy: PreferencePolicy,
    /// How `minValues` binds a new NodeClaim: `Strict`, or `BestEffort` (opened with fewer values
    /// when there are not enough).
    #[arg(long, env = "MIN_VALUES_POLICY", default_value = "Strict")]
    min_values_policy: MinValuesPolicy,
    #[command(flatten)]
    cache: CacheArgs,
    /// Read `Provider` source ConfigMaps only in this namespace (none: any namespace; the Helm
    /// chart sets its own, so the host needs no cluster-wide ConfigMap access).
    #[arg(long, env = "CAPSTAN_PROVIDER_SOURCE_NAMESPACE")]
    provider_source_namespace: Option<String>,
    /// Do not load providers from `Provider` resources (only `--provider` files serve).
    #[arg(long)]
    no_provider_resources: bool,
    /// Refuse every `Provider` without `spec.verification` (signed components only).
    #[arg(
        long,
        env = "CAPSTAN_REQUIRE_PROVIDER_VERIFICATION",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value_t = false,
        action = clap::ArgAction::Set
    )]
    require_provider_verification: bool,
    /// Where layers pulled from OCI registries are cached by digest (default: `oci/` in the
    /// compiled-component cache directory; none with `--no-cache`).
    #[arg(long, env = "CAPSTAN_OCI_CACHE_DIR")]
    oci_cache_dir: Option<PathBuf>,
    /// The port `/metrics` listens on, on every address (`--metrics-bind-address` wins).
    #[arg(long, env = "METRICS_PORT", default_value_t = 8080)]
    metrics_port: u16,
    /// The port `/healthz` and `/readyz` listen on (`--health-probe-bind-address` wins).
    #[arg(long, env = "HEALTH_PROBE_PORT", default_value_t = 8081)]
    health_probe_port: u16,
    /// Where `/metrics` listens, `ADDRESS:PORT` (`0` turns it off).
    #[arg(long, overrides_with = "metrics_bind_address")]
    metrics_bind_address: Option<String>,
    /// Where `/healthz` and `/readyz` listen (`0` turns them off).
    #[arg(long, overrides_with = "health_probe_bind_address")]
    health_probe_bind_address: Option<String>,
    /// Run the controllers without a Lease (leader election is on by default: one of several
    /// replicas runs them).
    #[arg(
        long,
        env = "DISABLE_LEADER_ELECTION",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value_t = false,
        action = clap::ArgAction::Set,
        overrides_with = "disable_leader_election"
    )]
    disable_leader_election: bool,
    /// Leader election is on by default; kept for earlier command lines.
    #[arg(long, hide = true)]
    leader_elect: bool,
    /// Namespace of the leader-election Lease (default: `$POD_NAMESPACE`, else `default`).
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(long, env = "LEADER_ELECTION_NAME", default_value = "capstan")]
    leader_election_name: String,
    /// How long a leader that stopped renewing keeps the Lease (renew deadline 2/3 of it, retry
    /// period 2/15).
    #[arg(long, default_value = "15s", value_parser = parse_short_duration)]
    leader_election_lease_duration: Duration,
    /// Feature gates, as Karpenter spells them (`NAME=true|false,...`): `NodeRepair` (default
    /// false) reboots or replaces nodes the provider's repair rules call unhealthy;
    /// `SpotToSpotConsolidation` (default false) lets consolidation replace a spot node with a
    /// cheaper spot node; `NodeOverlay` (default false) applies NodeOverlays (prices and
    /// extended resources) to every catalog; `CapacityBuffer` (default false) keeps room for
    /// CapacityBuffers' placeholder pods; `TerminateFirstDrift` (default false) deletes a drifted
    /// node of a static pool at its node limit first. Karpenter's other gates are accepted and
    /// ignored with a warning.
    #[arg(long, env = "FEATURE_GATES", default_value = "", value_parser = parse_feature_gates)]
    feature_gates: FeatureGates,
    /// How long a consolidation decision waits before it is re-checked against the cluster and
    /// carried out (Karpenter: 15 s).
    #[arg(long, default_value = "15s", value_parser = parse_short_duration)]
    consolidation_validation_delay: Duration,
    /// Print the settings this command line and environment give, as JSON, and exit.
    #[arg(long)]
    print_settings: bool,
}

/// The feature gates `capstan run` (and `capstan simulate`) know.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FeatureGates {
    pub(crate) node_repair: bool,
    pub(crate) spot_to_spot_consolidation: bool,
    pub(crate) node_overlay: bool,
    pub(crate) capacity_buffer: bool,
    pub(crate) terminate_first_drift: bool,
    /// Karpenter's gates Capstan does not implement, as given (`NAME=value`): accepted, so that
    /// Karpenter's settings keep working, and logged as ignored.
    pub(crate) ignored: Vec<String>,
}

/// Karpenter's feature gates (v1.15) that Capstan accepts without acting on them.
const KARPENTER_ONLY_GATES: &[&str] = &[
    "ReservedCapacity",
    "StaticCapacity",
    "TerminateFirstRepair",
    "PodDeletionCostManagement",
];

pub(crate) fn parse_feature_gates(text: &str) -> Result<FeatureGates, String> {
    let mut gates = FeatureGates::default();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, value) = item
            .split_once('=')
            .ok_or_else(|| format!("feature gate {item:?} is not NAME=true|false"))?;
        let value: bool = value
            .trim()
            .parse()
            .map_err(|_| format!("feature gate {name}: {value:?} is not true or false"))?;
        match name.trim() {
            "NodeRepair" => gates.node_repair = value,
            "SpotToSpotConsolidation" => gates.spot_to_spot_consolidation = value,
            "NodeOverlay" => gates.node_overlay = value,
            "CapacityBuffer" => gates.capacity_buffer = value,
            "TerminateFirstDrift" => gates.terminate_first_drift = value,
            other if KARPENTER_ONLY_GATES.contains(&other) => {
                gates.ignored.push(format!("{other}={value}"));
            }
            other => {
                return Err(format!(
                    "unknown feature gate {other:?} (known: NodeRepair, SpotToSpotConsolidation, NodeOverlay, CapacityBuffer, \
                     TerminateFirstDrift; \
                     accepted and ignored: {})",
                    KARPENTER_ONLY_GATES.join(", ")
                ));
            }
        }
    }
    Ok(gates)
}

impl RunArgs {
    /// Where `/metrics` listens: `--metrics-bind-address`, else every address on `--metrics-port`.
    fn metrics_address(&self) -> String {
        self.metrics_bind_address
            .clone()
            .unwrap_or_else(|| format!("0.0.0.0:{}", self.metrics_port))
    }

    /// Where the probes listen: `--health-probe-bind-address`, else `--health-probe-port`.
    fn health_probe_address(&self) -> String {
        self.health_probe_bind_address
            .clone()
            .unwrap_or_else(|| format!("0.0.0.0:{}", self.health_probe_port))
    }

    /// The Lease's namespace: the flag or `LEADER_ELECTION_NAMESPACE`, else `$POD_NAMESPACE`,
    /// else `default`.
    fn lease_namespace(&self) -> String {
        self.leader_election_namespace
            .clone()
            .filter(|ns| !ns.is_empty())
            .or_else(|| {
                std::env::var("POD_NAMESPACE")
                    .ok()
                    .filter(|ns| !ns.is_empty())
            })
            .unwrap_or_else(|| "default".to_owned())
    }

    /// The settings as Karpenter names them, for the startup log line and `--print-settings`.
    fn settings_report(&self, log_level: &str) -> serde_json::Value {
        serde_json::json!({
            "batchIdleDuration": format!("{:?}", self.batch_idle_duration),
            "batchMaxDuration": format!("{:?}", self.batch_max_duration),
            "logLevel": log_level,
            "kubeClientQPS": self.kube_client_qps,
            "kubeClientBurst": self.kube_client_burst,
            "leaderElection": !self.disable_leader_election,
            "leaderElectionName": self.leader_election_name,
            "leaderElectionNamespace": self.lease_namespace(),
            "metricsAddress": self.metrics_address(),
            "healthProbeAddress": self.health_probe_address(),
            "featureGates": {
                "nodeRepair": self.feature_gates.node_repair,
                "spotToSpotConsolidation": self.feature_gates.spot_to_spot_consolidation,
                "nodeOverlay": self.feature_gates.node_overlay,
                "capacityBuffer": self.feature_gates.capacity_buffer,
                "terminateFirstDrift": self.feature_gates.terminate_first_drift,
                "ignored": self.feature_gates.ignored,
            },
            "defaultTopologySpreadConstraints": self
                .scheduler_config
                .as_ref()
                .map_or(0, |c| c.default_constraints().len()),
            "preferencePolicy": self.preference_policy.to_string(),
            "minValuesPolicy": self.min_values_policy.to_string(),
            "requireProviderVerification": self.require_provider_verification,
            "ignoreDraRequests": self.ignore_dra_requests,
        })
    }
}

/// Runs the controllers until they fail or the process gets SIGTERM or SIGINT.
pub fn run(args: RunArgs, log_level: &str) -> Result<ExitCode> {
    let settings = args.settings_report(log_level);
    if args.print_settings {
        println!("{}", serde_json::to_string_pretty(&settings)?);
        return Ok(ExitCode::SUCCESS);
    }
    tracing::info!(settings = %settings, "settings");
    if args.leader_elect && args.disable_leader_election {
        tracing::warn!("--leader-elect and --disable-leader-election: leader election is off");
    }
    for gate in &args.feature_gates.ignored {
        tracing::warn!(
            gate,
            "Karpenter feature gate not implemented by Capstan; ignored"
        );
    }
    block_on(run_async(args))
}

async fn run_async(args: RunArgs) -> Result<ExitCode> {
    // The controllers retry with their own backoff; kube-client's transparent retry of 429s
    // would hide an eviction refused by a PodDisruptionBudget for minutes (15 retries).
    let mut workload_config = match &args.kubeconfig {
        Some(path) => kube_config(path).await?,
        None => kube::Config::infer()
            .await
            .context("cannot find a Kubernetes configuration")?,
    };
    workload_config.default_retry = false;
    let workload = capstan::kube_client::client(
        workload_config,
        args.kube_client_qps,
        args.kube_client_burst,
    )
    .context("cannot create the Kubernetes client")?;
    let management = match &args.management_kubeconfig {
        Some(path) => Some(
            capstan::kube_client::client(
                kube_config(path).await?,
                args.kube_client_qps,
                args.kube_client_burst,
            )
            .context("cannot create the management cluster's client")?,
        ),
        None => None,
    };
    let mut grants_by_name = HashMap::new();
    for flag in &args.grants {
        let (name, path) = split_pair("grants", flag)?;
        grants_by_name.insert(name.to_owned(), read_grants(Path::new(path))?);
    }
    let runtime = Arc::new(args.cache.runtime()?);
    let registry = Arc::new(Registry::new());
    let readiness = serve::Readiness::new();
    serve::start(
        &args.metrics_address(),
        &args.health_probe_address(),
        Arc::clone(&registry),
        readiness.clone(),
    )
    .await?;
    // One loader (and one discovery cache per cluster) for file and resource providers alike.
    let loader = Arc::new(Loader::new(
        Arc::clone(&runtime),
        Some(workload.clone()),
        management.clone(),
    ));
    for flag in &args.providers {
        let (name, path) = split_pair("provider", flag)?;
        let source = ProviderSource {
            name: name.to_owned(),
            bytes: read_component(Path::new(path), DEFAULT_MAX_COMPONENT_SIZE)?,
            grants: grants_by_name.remove(name).unwrap_or_else(Grants::none),
            limits: Limits::default(),
            http: Default::default(),
            config: Default::default(),
        };
        let file_loader = Arc::clone(&loader);
        let provider = tokio::task::spawn_blocking(move || file_loader.load(source, None, None))
            .await
            .context("the loader task failed")??;
        registry.insert(name, provider);
    }
    if let Some(name) = grants_by_name.keys().next() {
        bail!("--grants {name}=...: no --provider {name}");
    }
    let lease_client = workload.clone();
    let lease_namespace = args.lease_namespace();
    let providers = (!args.no_provider_resources).then(|| ProvidersSetup {
        loader,
        settings: controllers::providers::Settings {
            source_namespace: args.provider_source_namespace.clone(),
            oci_cache: args.oci_cache_dir.clone().or_else(|| args.cache.oci_dir()),
            require_verification: args.require_provider_verification,
            ..controllers::providers::Settings::default()
        },
        initial_load_timeout: Duration::from_secs(60),
    });
    let config = controllers::Config {
        client: workload,
        registry,
        settings: controllers::Settings {
            launch_timeout: args.launch_timeout,
            registration_timeout: args.registration_timeout,
            gc_interval: args.gc_interval,
            gc_grace: args.gc_grace,
            selector: args.selector,
            batch: controllers::provisioner::batcher::Windows {
                idle: args.batch_idle_duration,
                max: args.batch_max_duration,
            },
            readiness: readiness.clone(),
            consolidation: controllers::disruption::consolidation::Settings {
                options: capstan::rules::consolidation::Options {
                    spot_to_spot: args.feature_gates.spot_to_spot_consolidation,
                    ..capstan::rules::consolidation::Options::default()
                },
                validation_delay: args.consolidation_validation_delay,
                ..controllers::disruption::consolidation::Settings::default()
            },
            preference_policy: args.preference_policy,
            min_values_policy: args.min_values_policy,
            node_repair: args.feature_gates.node_repair,
            node_overlay: args.feature_gates.node_overlay,
            capacity_buffer: args.feature_gates.capacity_buffer,
            terminate_first_drift: args.feature_gates.terminate_first_drift,
            scheduler: args
                .scheduler_config
                .map(|c| *c)
                .filter(|c| !c.default_constraints().is_empty()),
            dynamic_resources: !args.ignore_dra_requests,
            ..controllers::Settings::default()
        },
        providers,
    };
    let shutdown = shutdown_signal()?;
    if !args.disable_leader_election {
        let lease = leader::LeaseConfig::new(
            lease_namespace,
            args.leader_election_name,
            leader::default_identity(),
            args.leader_election_lease_duration,
        )?;
        let mut election = leader::LeaderElection::new(lease_client, lease);
        let controllers = controllers::run(config);
        match leader::lead(&mut election, &readiness, shutdown, controllers).await? {
            leader::Outcome::Finished(result) => result?,
            leader::Outcome::Shutdown => {}
        }
    } else {
        tokio::select! {
            result = controllers::run(config) => result?,
            () = shutdown => {}
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `NAME=FILE` of a `--provider` or `--grants` flag.
fn split_pair<'a>(flag: &str, value: &'a str) -> Result<(&'a str, &'a str)> {
    value
        .split_once('=')
        .filter(|(name, path)| !name.is_empty() && !path.is_empty())
        .with_context(|| format!("--{flag} {value:?}: expected NAME=FILE"))
}

/// Completes on SIGTERM or SIGINT (ctrl-c).
fn shutdown_signal() -> Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = interrupt.recv() => tracing::info!("SIGINT: shutting down"),
        }
    })
}

/// `--scheduler-config`: Karpenter's document, checked as kube-scheduler checks it (empty: none).
fn parse_scheduler_config(raw: &str) -> Result<Box<SchedulerConfig>, String> {
    SchedulerConfig::parse(raw)
        .map(|config| Box::new(config.unwrap_or_default()))
        .map_err(|err| err.to_string())
}
