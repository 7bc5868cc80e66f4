//! The `capstan` command: parses the arguments, sets up logging and hands over to a subcommand
//! in [`commands`].
//!
//! - `capstan run`: the controllers.
//! - `capstan provider new NAME`: a provider skeleton that builds at once.
//! - `capstan provider inspect FILE`: what a component is and whether this host can run it.
//! - `capstan provider test FILE`: the conformance kit.
//! - `capstan provider package FILE --name NAME`: a ConfigMap and a Provider that ship it.
//! - `capstan simulate --provider FILE DUMP...`: what Capstan would do now on a dumped cluster.
//! - `capstan explain node NAME` / `capstan explain nodepool NAME`: why nodes are or are not
//!   consolidated, on a live cluster.

mod commands;

use std::process::ExitCode;

use anyhow::{Context, Result, anyhow};
use clap::{Parser, Subcommand, ValueEnum};

use self::commands::explain::ExplainArgs;
use self::commands::provider::ProviderCommand;
use self::commands::run::RunArgs;
use self::commands::simulate::SimulateArgs;

/// Capstan: a Karpenter-compatible node autoprovisioner with providers in WebAssembly.
#[derive(Debug, Parser)]
#[command(name = "capstan", version, about)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "CAPSTAN_LOG_FORMAT")]
    log_format: LogFormat,
    /// Log level or filter (`debug`, `info`, `error`, `capstan=debug`; also `CAPSTAN_LOG_LEVEL`);
    /// RUST_LOG wins if set. Default: `info` for `run` (Karpenter's), `warn` for the others (their
    /// output is the report).
    #[arg(long, global = true, env = "LOG_LEVEL")]
    log_level: Option<String>,
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
    /// Run the controllers (provisioning, NodeClaim lifecycle, garbage collection, status).
    Run(RunArgs),
    /// Print what Capstan would do now on a dumped cluster (NodeClaims to launch, consolidation,
    /// $/h), writing nothing anywhere.
    Simulate(SimulateArgs),
    /// Why a node is, or is not, consolidated (the host's verdicts on a live cluster,
    /// read-only).
    Explain(ExplainArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let log_level = cli
        .log_level
        .clone()
        .filter(|level| !level.is_empty())
        .or_else(|| {
            std::env::var("CAPSTAN_LOG_LEVEL")
                .ok()
                .filter(|l| !l.is_empty())
        })
        .unwrap_or_else(|| match cli.command {
            Command::Run(_) => "info".to_owned(),
            _ => "warn".to_owned(),
        });
    if let Err(err) = init_tracing(cli.log_format, &log_level) {
        eprintln!("error: {err:#}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Provider(command) => commands::provider::run(command),
        Command::Run(args) => commands::run::run(args, &log_level),
        Command::Simulate(args) => commands::simulate::run(args),
        Command::Explain(args) => commands::explain::run(args),
    };
    result.unwrap_or_else(|err| {
        eprintln!("error: {err:#}");
        ExitCode::FAILURE
    })
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
    .map_err(|err| anyhow!("cannot install the log subscriber: {err}"))
}
