//! `cloudstack-emulator`: the CloudStack API emulator as a process, with its knobs over HTTP
//! under `/admin/` (see the crate's README).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use capstan_cloudstack_emulator::{
    Catalog, Config, Credentials, DEFAULT_API_KEY, DEFAULT_SECRET_KEY, Emulator, JobLatency,
};
use clap::Parser;

/// A CloudStack API emulator: /client/api, and /admin/ for its knobs.
#[derive(Debug, Parser)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// The accepted API key.
    #[arg(long, env = "CLOUDSTACK_EMULATOR_API_KEY", default_value = DEFAULT_API_KEY)]
    api_key: String,
    /// The accepted secret key.
    #[arg(long, env = "CLOUDSTACK_EMULATOR_SECRET_KEY", default_value = DEFAULT_SECRET_KEY, hide_env_values = true)]
    secret_key: String,
    /// A catalog (zones, offerings, templates, networks...) as JSON; the sample one by default.
    #[arg(long)]
    catalog: Option<PathBuf>,
    /// Register the VMs' Nodes in the cluster of this kubeconfig.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// How long VM jobs stay pending, in milliseconds.
    #[arg(long, default_value_t = 200)]
    job_latency_ms: u64,
    /// Print the sample catalog as JSON and exit.
    #[arg(long)]
    print_sample_catalog: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    if args.print_sample_catalog {
        println!("{}", serde_json::to_string_pretty(&Catalog::sample())?);
        return Ok(());
    }
    let catalog = match &args.catalog {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?
        }
        None => Catalog::sample(),
    };
    let kube = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .context("loading the kubeconfig")?;
            Some(kube::Client::try_from(config).context("building a kube client")?)
        }
        None => None,
    };
    let handle = Emulator::start(Config {
        listen: args.listen,
        accounts: vec![Credentials::new(args.api_key, args.secret_key)],
        catalog,
        job_latency: JobLatency {
            polls: 0,
            millis: args.job_latency_ms,
        },
        kube,
        admin: true,
        ..Config::default()
    })
    .await?;
    println!("{}", handle.url());
    tokio::signal::ctrl_c().await?;
    Ok(())
}
