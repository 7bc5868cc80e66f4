//! `capstan provider`: work with provider components (new, inspect, test, package).

pub mod inspect;
pub mod new;
pub mod package;
pub mod test;

use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;

/// The `capstan provider` subcommands.
#[derive(Debug, Subcommand)]
pub enum ProviderCommand {
    /// Write a provider skeleton that builds at once (every export `invalid("not implemented")`).
    New(new::NewArgs),
    /// Show what a component is and whether this host can run it.
    Inspect(inspect::InspectArgs),
    /// Run the conformance kit against a provider.
    Test(test::TestArgs),
    /// Print a ConfigMap and a Provider that ship a component (`| kubectl apply --server-side -f -`).
    Package(package::PackageArgs),
}

/// Runs a `capstan provider` subcommand.
pub fn run(command: ProviderCommand) -> Result<ExitCode> {
    match command {
        ProviderCommand::New(args) => new::run(&args),
        ProviderCommand::Inspect(args) => inspect::run(&args),
        ProviderCommand::Test(args) => test::run(args),
        ProviderCommand::Package(args) => package::run(&args),
    }
}
