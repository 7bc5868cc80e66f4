//! `capstan provider`: work with provider components (new, inspect, test, package, push,
//! verify), and the registry options push and verify share.

pub mod inspect;
pub mod new;
pub mod package;
pub mod push;
pub mod test;
pub mod verify;

use std::process::ExitCode;

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use capstan::provider::oci::Remote;
use capstan::provider::oci::auth;
use oci_client::secrets::RegistryAuth;

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
    /// Push a component to an OCI registry (the CNCF wasm artifact layout the host pulls).
    Push(push::PushArgs),
    /// Verify a component's signature (a local file and its Sigstore bundle, or an OCI
    /// artifact's signatures in its registry) as the host does before loading it.
    Verify(verify::VerifyArgs),
}

/// Runs a `capstan provider` subcommand.
pub fn run(command: ProviderCommand) -> Result<ExitCode> {
    match command {
        ProviderCommand::New(args) => new::run(&args),
        ProviderCommand::Inspect(args) => inspect::run(&args),
        ProviderCommand::Test(args) => test::run(args),
        ProviderCommand::Package(args) => package::run(&args),
        ProviderCommand::Push(args) => push::run(&args),
        ProviderCommand::Verify(args) => verify::run(&args),
    }
}

/// How to reach a registry: plain HTTP or not, and credentials (flags, else the docker config
/// `docker login`/`oras login` write, else anonymous).
#[derive(Debug, Args)]
pub struct RegistryArgs {
    /// Talk plain HTTP to the registry (a registry on loopback or a lab network).
    #[arg(long)]
    plain_http: bool,
    /// Registry user name (with `--password`); default: the docker config's entry.
    #[arg(long, requires = "password")]
    username: Option<String>,
    /// Registry password or token (with `--username`).
    #[arg(
        long,
        env = "CAPSTAN_REGISTRY_PASSWORD",
        hide_env_values = true,
        requires = "username"
    )]
    password: Option<String>,
    /// Docker config file holding credentials (default: `$DOCKER_CONFIG/config.json`, else
    /// `~/.docker/config.json`, when it exists).
    #[arg(long)]
    docker_config: Option<PathBuf>,
}

impl RegistryArgs {
    /// `reference` with the credentials these options give for its registry.
    pub fn remote(&self, reference: &str) -> Result<Remote> {
        let anonymous = Remote::parse(reference, RegistryAuth::Anonymous, self.plain_http)?;
        let auth = match (&self.username, &self.password) {
            (Some(user), Some(password)) => RegistryAuth::Basic(user.clone(), password.clone()),
            _ => self.docker_config_auth(anonymous.reference.registry())?,
        };
        Ok(Remote { auth, ..anonymous })
    }

    fn docker_config_auth(&self, registry: &str) -> Result<RegistryAuth> {
        let path = match &self.docker_config {
            Some(path) => path.clone(),
            None => {
                let dir = std::env::var_os("DOCKER_CONFIG")
                    .map(PathBuf::from)
                    .or_else(|| {
                        std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".docker"))
                    });
                match dir.map(|dir| dir.join("config.json")) {
                    Some(path) if path.exists() => path,
                    _ => return Ok(RegistryAuth::Anonymous),
                }
            }
        };
        let config =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        match auth::from_docker_config(&config, registry, &path.display().to_string()) {
            Ok(auth) => Ok(auth),
            // A docker config without this registry: anonymous, as docker does.
            Err(auth::AuthError::NoEntry { .. }) if self.docker_config.is_none() => {
                Ok(RegistryAuth::Anonymous)
            }
            Err(err) => Err(err.into()),
        }
    }
}
