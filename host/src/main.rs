//! The `capstan` command.
//!
//! - `capstan provider inspect FILE`: what a component is (WIT package and version, exports,
//!   imports, size, sha256) and whether this host can run it.
//! - `capstan provider test FILE`: the conformance kit.
//! - `capstan run --provider NAME=FILE --grants NAME=FILE`: the controllers.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use clap::{Args, Parser, Subcommand, ValueEnum};

use capstan::capability::Capabilities;
use capstan::capability::grants::{Cluster, Grants, parse as grants_parse};
use capstan::capability::kube::ClusterConnection;
use capstan::conformance;
use capstan::runtime::types::NodeClass;
use capstan::runtime::validate::{self, DEFAULT_MAX_COMPONENT_SIZE};
use capstan::runtime::{Limits, Runtime};

/// Capstan: a Karpenter-compatible node autoprovisioner with providers in WebAssembly.
#[derive(Debug, Parser)]
#[command(name = "capstan", version, about)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "CAPSTAN_LOG_FORMAT")]
    log_format: LogFormat,
    /// Log level or filter (`info`, `capstan=debug`); RUST_LOG wins if set.
    #[arg(long, global = true, default_value = "warn", env = "CAPSTAN_LOG_LEVEL")]
    log_level: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Work with provider components.
    #[command(subcommand)]
    Provider(ProviderCommand),
    /// Run the controllers (NodeClaim lifecycle, garbage collection, status).
    Run(RunArgs),
}

#[derive(Debug, Subcommand)]
enum ProviderCommand {
    /// Show what a component is and whether this host can run it.
    Inspect(InspectArgs),
    /// Run the conformance kit against a provider.
    Test(TestArgs),
    /// Print a ConfigMap and a Provider that ship a component (`| kubectl apply --server-side -f -`).
    Package(PackageArgs),
}

#[derive(Debug, Args)]
struct PackageArgs {
    /// The component (`.wasm`).
    file: PathBuf,
    /// The Provider's name (NodeClasses refer to it in `spec.provider`).
    #[arg(long)]
    name: String,
    /// Namespace of the ConfigMap (the host's own namespace when installed by the Helm chart).
    #[arg(long, default_value = "capstan")]
    namespace: String,
    /// Compression of the ConfigMap key: `auto` compresses only when the component would not fit.
    #[arg(long, value_enum, default_value_t = PackageCompression::Auto)]
    compression: PackageCompression,
    /// Grants file (YAML or JSON; the same format as `capstan run --grants`).
    #[arg(long)]
    grants: Option<PathBuf>,
    /// Do not pin the component's sha256 in the Provider.
    #[arg(long)]
    no_pin: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PackageCompression {
    Auto,
    None,
    Gzip,
    Zstd,
}

#[derive(Debug, Args)]
struct InspectArgs {
    /// The component (`.wasm`).
    file: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Refuse components larger than this many bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_COMPONENT_SIZE)]
    max_size: usize,
}

#[derive(Debug, Args)]
struct TestArgs {
    /// The component (`.wasm`).
    file: PathBuf,
    /// Kubeconfig of the workload cluster; without it the checks that need a cluster are skipped.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig of the management cluster (Cluster API providers).
    #[arg(long)]
    management_kubeconfig: Option<PathBuf>,
    /// Grants file (YAML or JSON: a list, or an object with `grants`).
    #[arg(long)]
    grants: Option<PathBuf>,
    /// One grant, e.g. `groups=core;resources=nodes,nodes/status;verbs=get,list,create,patch,delete`
    /// (repeatable; added to --grants).
    #[arg(long = "grant")]
    grant: Vec<String>,
    /// NodeClass parameters for the test (a JSON or YAML object).
    #[arg(long)]
    node_class: Option<PathBuf>,
    /// Name of the NodePool to ask instance types for.
    #[arg(long, default_value = "conformance")]
    pool: String,
    /// Wall-clock limit of each call except create, in seconds.
    #[arg(long, default_value_t = 30)]
    call_timeout: u64,
    /// Wall-clock limit of create, in seconds.
    #[arg(long, default_value_t = 600)]
    create_timeout: u64,
    /// Memory limit per call, in MiB.
    #[arg(long, default_value_t = 64)]
    memory_mib: u64,
    /// Directory for compiled components (default: ~/.cache/capstan/components).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Do not cache compiled components.
    #[arg(long)]
    no_cache: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct RunArgs {
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
    /// Close a provisioning batch after this long without a new unschedulable pod.
    #[arg(long, default_value = "1s", value_parser = parse_short_duration)]
    batch_idle_duration: Duration,
    /// Close a provisioning batch this long after its first pod at the latest.
    #[arg(long, default_value = "10s", value_parser = parse_short_duration)]
    batch_max_duration: Duration,
    /// Directory for compiled components (default: ~/.cache/capstan/components).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Read `Provider` source ConfigMaps only in this namespace (none: any namespace; the Helm
    /// chart sets its own, so the host needs no cluster-wide ConfigMap access).
    #[arg(long, env = "CAPSTAN_PROVIDER_SOURCE_NAMESPACE")]
    provider_source_namespace: Option<String>,
    /// Do not load providers from `Provider` resources (only `--provider` files serve).
    #[arg(long)]
    no_provider_resources: bool,
    /// Where `/metrics` listens (`0` turns it off).
    #[arg(
        long,
        default_value = "0.0.0.0:8080",
        overrides_with = "metrics_bind_address"
    )]
    metrics_bind_address: String,
    /// Where `/healthz` and `/readyz` listen (`0` turns them off).
    #[arg(
        long,
        default_value = "0.0.0.0:8081",
        overrides_with = "health_probe_bind_address"
    )]
    health_probe_bind_address: String,
    /// Run the controllers only while holding a Lease (for several replicas).
    #[arg(long)]
    leader_elect: bool,
    /// Namespace of the leader-election Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    leader_election_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "capstan")]
    leader_election_name: String,
    /// How long a leader that stopped renewing keeps the Lease (renew deadline 2/3 of it, retry
    /// period 2/15).
    #[arg(long, default_value = "15s", value_parser = parse_short_duration)]
    leader_election_lease_duration: Duration,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    capstan::api::duration::parse(text).map_err(|err| err.to_string())
}

/// Like [`parse_duration`], also taking milliseconds (`500ms`).
fn parse_short_duration(text: &str) -> Result<Duration, String> {
    match text.strip_suffix("ms") {
        Some(millis) => millis
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|err| format!("invalid duration {text:?}: {err}")),
        None => parse_duration(text),
    }
}

fn split_pair<'a>(flag: &str, value: &'a str) -> Result<(&'a str, &'a str)> {
    value
        .split_once('=')
        .filter(|(name, path)| !name.is_empty() && !path.is_empty())
        .with_context(|| format!("--{flag} {value:?}: expected NAME=FILE"))
}

/// Runs a future on a fresh multi-threaded Tokio runtime.
fn block_on<T>(future: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(future)
}

fn run(args: RunArgs) -> Result<ExitCode> {
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
    let workload =
        kube::Client::try_from(workload_config).context("cannot create the Kubernetes client")?;
    let management = match &args.management_kubeconfig {
        Some(path) => Some(client(path).await?),
        None => None,
    };
    let mut grants_by_name = std::collections::HashMap::new();
    for flag in &args.grants {
        let (name, path) = split_pair("grants", flag)?;
        let text = fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
        let grants = grants_parse::from_text(&text).with_context(|| path.to_owned())?;
        grants_by_name.insert(name.to_owned(), grants);
    }
    let mut builder = Runtime::builder();
    let cache = args.cache_dir.clone().or_else(|| {
        std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache/capstan/components"))
    });
    if let Some(dir) = cache {
        fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create cache directory {}", dir.display()))?;
        let handle = Dir::open_ambient_dir(&dir, ambient_authority())
            .with_context(|| format!("cannot open cache directory {}", dir.display()))?;
        builder = builder.cache_dir(handle);
    }
    let runtime = Arc::new(builder.build()?);
    let registry = Arc::new(capstan::provider::Registry::new());
    let readiness = capstan::serve::Readiness::new();
    capstan::serve::start(
        &args.metrics_bind_address,
        &args.health_probe_bind_address,
        Arc::clone(&registry),
        readiness.clone(),
    )
    .await?;
    // One loader (and one discovery cache per cluster) for file and resource providers alike.
    let loader = Arc::new(capstan::provider::Loader::new(
        Arc::clone(&runtime),
        Some(workload.clone()),
        management.clone(),
    ));
    for flag in &args.providers {
        let (name, path) = split_pair("provider", flag)?;
        let source = capstan::provider::ProviderSource {
            name: name.to_owned(),
            bytes: read_component(Path::new(path), DEFAULT_MAX_COMPONENT_SIZE)?,
            grants: grants_by_name.remove(name).unwrap_or_else(Grants::none),
            limits: Limits::default(),
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
    let providers = (!args.no_provider_resources).then(|| capstan::controllers::ProvidersSetup {
        loader,
        settings: capstan::controllers::providers::Settings {
            source_namespace: args.provider_source_namespace.clone(),
            ..capstan::controllers::providers::Settings::default()
        },
        initial_load_timeout: Duration::from_secs(60),
    });
    let config = capstan::controllers::Config {
        client: workload,
        registry,
        settings: capstan::controllers::Settings {
            launch_timeout: args.launch_timeout,
            registration_timeout: args.registration_timeout,
            gc_interval: args.gc_interval,
            gc_grace: args.gc_grace,
            selector: args.selector,
            batch: capstan::controllers::provisioner::batcher::Windows {
                idle: args.batch_idle_duration,
                max: args.batch_max_duration,
            },
            readiness: readiness.clone(),
            ..capstan::controllers::Settings::default()
        },
        providers,
    };
    let shutdown = shutdown_signal()?;
    if args.leader_elect {
        let lease = capstan::leader::LeaseConfig::new(
            args.leader_election_namespace,
            args.leader_election_name,
            capstan::leader::default_identity(),
            args.leader_election_lease_duration,
        )?;
        let mut election = capstan::leader::LeaderElection::new(lease_client, lease);
        let controllers = capstan::controllers::run(config);
        match capstan::leader::lead(&mut election, &readiness, shutdown, controllers).await? {
            capstan::leader::Outcome::Finished(result) => result?,
            capstan::leader::Outcome::Shutdown => {}
        }
    } else {
        tokio::select! {
            result = capstan::controllers::run(config) => result?,
            () = shutdown => {}
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Completes on SIGTERM or SIGINT (ctrl-c).
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>> {
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(err) = init_tracing(cli.log_format, &cli.log_level) {
        eprintln!("error: {err:#}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Provider(ProviderCommand::Inspect(args)) => inspect(&args),
        Command::Provider(ProviderCommand::Test(args)) => test(args),
        Command::Provider(ProviderCommand::Package(args)) => package(&args),
        Command::Run(args) => run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(format: LogFormat, level: &str) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .with_context(|| format!("bad log level {level:?}"))?;
    // Colours only for a person at a terminal, never in files or log collectors.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    }
    .map_err(|err| anyhow::anyhow!("cannot install the log subscriber: {err}"))
}

/// Reads a component, refusing oversized files before reading them.
fn read_component(path: &Path, max_size: usize) -> Result<Vec<u8>> {
    let file = fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let len = file
        .metadata()
        .with_context(|| format!("cannot stat {}", path.display()))?
        .len();
    if len > max_size as u64 {
        bail!(
            "{}: {}",
            path.display(),
            validate::ValidateError::TooLarge {
                size: usize::try_from(len).unwrap_or(usize::MAX),
                limit: max_size,
            }
        );
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(max_size as u64 + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {}", path.display()))?;
    Ok(bytes)
}

fn inspect(args: &InspectArgs) -> Result<ExitCode> {
    let bytes = read_component(&args.file, args.max_size)?;
    let info = validate::inspect(&bytes, args.max_size)
        .map_err(|err| anyhow::anyhow!("{}: {err}", args.file.display()))?;
    let provider = info.provider_version();
    if args.json {
        let value = serde_json::json!({
            "file": args.file,
            "info": info,
            "provider": provider.as_ref().ok(),
            "error": provider.as_ref().err().map(ToString::to_string),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        println!("file:     {}", args.file.display());
        println!("size:     {} bytes", info.size);
        println!("sha256:   {}", info.sha256);
        match &provider {
            Ok(export) => println!(
                "provider: {} (package capstan:provider@{}, host bindings {})",
                export.interface, export.version, export.wit
            ),
            Err(err) => println!("provider: not runnable: {err}"),
        }
        println!("exports:");
        for export in &info.exports {
            println!("  {}", export.name);
            if !export.functions.is_empty() {
                println!("    {}", export.functions.join(", "));
            }
        }
        println!("imports:");
        for import in &info.imports {
            println!("  {}", import.name);
        }
    }
    Ok(if provider.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn package(args: &PackageArgs) -> Result<ExitCode> {
    use capstan::provider::package::{self, CompressionChoice, PackageOptions};
    use capstan::provider::source::Compression;
    let bytes = read_component(&args.file, DEFAULT_MAX_COMPONENT_SIZE)?;
    let grants = match &args.grants {
        Some(path) => {
            let text = fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            // Checked by the host's rules, then written in the Provider's shape.
            let parsed =
                grants_parse::from_text(&text).with_context(|| format!("{}", path.display()))?;
            serde_json::from_value(serde_json::to_value(&parsed)?)
                .with_context(|| format!("{}: grants", path.display()))?
        }
        None => Vec::new(),
    };
    let options = PackageOptions {
        name: args.name.clone(),
        namespace: args.namespace.clone(),
        compression: match args.compression {
            PackageCompression::Auto => CompressionChoice::Auto,
            PackageCompression::None => CompressionChoice::Exactly(Compression::None),
            PackageCompression::Gzip => CompressionChoice::Exactly(Compression::Gzip),
            PackageCompression::Zstd => CompressionChoice::Exactly(Compression::Zstd),
        },
        pin: !args.no_pin,
        grants,
        limits: None,
        max_component_size: DEFAULT_MAX_COMPONENT_SIZE,
    };
    let packaged = package::package(&bytes, &options)
        .map_err(|err| anyhow::anyhow!("{}: {err}", args.file.display()))?;
    let yaml = package::to_yaml(&packaged)?;
    let mut stdout = std::io::stdout().lock();
    match std::io::Write::write_all(&mut stdout, yaml.as_bytes()) {
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(err).context("cannot write to stdout")
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}

fn test(args: TestArgs) -> Result<ExitCode> {
    block_on(test_async(args))
}

async fn test_async(args: TestArgs) -> Result<ExitCode> {
    let bytes = read_component(&args.file, DEFAULT_MAX_COMPONENT_SIZE)?;

    let mut grants = match &args.grants {
        Some(path) => {
            let text = fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            grants_parse::from_text(&text).with_context(|| format!("{}", path.display()))?
        }
        None => Grants::none(),
    };
    for flag in &args.grant {
        grants.0.push(grants_parse::from_flag(flag)?);
    }

    let parameters = match &args.node_class {
        Some(path) => {
            let text = fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let value: serde_json::Value = serde_saphyr::from_str(&text)
                .with_context(|| format!("{} is not JSON or YAML", path.display()))?;
            serde_json::to_string(&value)?
        }
        None => "{}".to_owned(),
    };

    let mut caps = Capabilities::builder("conformance").grants(grants);
    if let Some(path) = &args.kubeconfig {
        caps = caps.workload(ClusterConnection::new(
            Cluster::Workload,
            client(path).await?,
        ));
    }
    if let Some(path) = &args.management_kubeconfig {
        caps = caps.management(ClusterConnection::new(
            Cluster::Management,
            client(path).await?,
        ));
    }

    let mut builder = Runtime::builder();
    if !args.no_cache {
        let dir = match &args.cache_dir {
            Some(dir) => Some(dir.clone()),
            None => std::env::var_os("HOME")
                .map(|home| PathBuf::from(home).join(".cache/capstan/components")),
        };
        if let Some(dir) = dir {
            fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create cache directory {}", dir.display()))?;
            let handle = Dir::open_ambient_dir(&dir, ambient_authority())
                .with_context(|| format!("cannot open cache directory {}", dir.display()))?;
            builder = builder.cache_dir(handle);
        }
    }
    let runtime = Arc::new(builder.build()?);
    let limits = Limits {
        memory_bytes: args.memory_mib << 20,
        call_timeout: Duration::from_secs(args.call_timeout),
        create_timeout: Duration::from_secs(args.create_timeout),
        ..Limits::default()
    };
    let caps = caps.build();
    let loader = Arc::clone(&runtime);
    let provider = tokio::task::spawn_blocking(move || loader.load(&bytes, limits, caps))
        .await
        .context("the loader task failed")?
        .with_context(|| format!("{}", args.file.display()))?;

    let options = conformance::Options {
        node_class: NodeClass {
            name: "conformance".into(),
            parameters,
        },
        node_pool: capstan::runtime::types::NodePool {
            name: args.pool.clone(),
            requirements: Vec::new(),
            labels: Vec::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
        },
        skip_cluster_checks: args
            .kubeconfig
            .is_none()
            .then(|| "needs a cluster: pass --kubeconfig".to_owned()),
        ..conformance::Options::default()
    };
    let report = conformance::run(&provider, &options).await;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{} ({}, sha256 {}, {} allocator)",
            args.file.display(),
            provider.export().interface,
            provider.sha256(),
            runtime.engine().allocator()
        );
        println!("{report}");
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn client(path: &Path) -> Result<kube::Client> {
    kube::Client::try_from(kube_config(path).await?).context("cannot create the Kubernetes client")
}

async fn kube_config(path: &Path) -> Result<kube::Config> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .with_context(|| format!("bad kubeconfig {}", path.display()))
}
