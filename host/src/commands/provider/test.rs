//! `capstan provider test FILE`: the conformance kit (well-formed instance types, classified
//! errors, idempotent create, delete until not-found); exits non-zero on any failure.

use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;

use capstan::capability::Capabilities;
use capstan::capability::config::ConfigValues;
use capstan::capability::egress::EgressRules;
use capstan::capability::grants::{Cluster, Grants, parse as grants_parse};
use capstan::capability::kube::ClusterConnection;
use capstan::capability::outbound_http::HttpSettings;
use capstan::conformance;
use capstan::runtime::Limits;
use capstan::runtime::types::{NodeClass, NodePool};
use capstan::runtime::validate::DEFAULT_MAX_COMPONENT_SIZE;

use crate::commands::{CacheArgs, block_on, client, read_component, read_grants};

/// Arguments of `capstan provider test`.
#[derive(Debug, Args)]
pub struct TestArgs {
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
    /// An egress rule for a contract 0.2 provider's outbound HTTP (`https://api.example.com`,
    /// `http://127.0.0.1:8080`; repeatable). Without one every request is denied.
    #[arg(long = "egress")]
    egress: Vec<String>,
    /// A configuration value for a contract 0.2 provider, `name=value`, or `name=@file` to read
    /// the value from a file (keeps secrets out of the command line; repeatable).
    #[arg(long = "config")]
    config: Vec<String>,
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
    #[command(flatten)]
    cache: CacheArgs,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs the kit and prints its report; fails when a check fails.
pub fn run(args: TestArgs) -> Result<ExitCode> {
    block_on(run_async(args))
}

async fn run_async(args: TestArgs) -> Result<ExitCode> {
    let bytes = read_component(&args.file, DEFAULT_MAX_COMPONENT_SIZE)?;
    let mut grants = match &args.grants {
        Some(path) => read_grants(path)?,
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

    let rules = EgressRules::parse(&args.egress).map_err(|e| anyhow::anyhow!("--egress: {e}"))?;
    let mut config = Vec::new();
    for entry in &args.config {
        let (name, value) = entry
            .split_once('=')
            // Never echo the entry: it may be a secret pasted without its name.
            .context("--config: an entry without `=`: expected name=value or name=@file")?;
        let value = match value.strip_prefix('@') {
            Some(path) => fs::read_to_string(path)
                .with_context(|| format!("--config {name}: cannot read {path}"))?
                .trim_end_matches(['\n', '\r'])
                .to_owned(),
            None => value.to_owned(),
        };
        config.push((name.to_owned(), value));
    }
    let mut caps = Capabilities::builder("conformance")
        .grants(grants)
        .http(HttpSettings {
            rules,
            ..HttpSettings::default()
        })
        .config(ConfigValues::new(config));
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

    let runtime = Arc::new(args.cache.runtime()?);
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
        node_pool: NodePool {
            name: args.pool.clone(),
            requirements: Vec::new(),
            labels: Vec::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
        },
        // A provider of a cloud outside Kubernetes (egress granted) runs the lifecycle without one.
        skip_cluster_checks: (args.kubeconfig.is_none() && args.egress.is_empty())
            .then(|| "needs a cluster or a cloud: pass --kubeconfig or --egress".to_owned()),
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
