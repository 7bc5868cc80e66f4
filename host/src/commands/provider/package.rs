//! `capstan provider package FILE --name NAME`: a ConfigMap holding the component and a
//! Provider pointing at it, as YAML on stdout (`| kubectl apply --server-side -f -`).

use std::io::{ErrorKind, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow};
use clap::{Args, ValueEnum};

use capstan::provider::package::{self, CompressionChoice, PackageOptions};
use capstan::provider::source::Compression;
use capstan::runtime::validate::DEFAULT_MAX_COMPONENT_SIZE;

use crate::commands::{read_component, read_grants};

/// Arguments of `capstan provider package`.
#[derive(Debug, Args)]
pub struct PackageArgs {
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

impl From<PackageCompression> for CompressionChoice {
    fn from(choice: PackageCompression) -> Self {
        match choice {
            PackageCompression::Auto => CompressionChoice::Auto,
            PackageCompression::None => CompressionChoice::Exactly(Compression::None),
            PackageCompression::Gzip => CompressionChoice::Exactly(Compression::Gzip),
            PackageCompression::Zstd => CompressionChoice::Exactly(Compression::Zstd),
        }
    }
}

/// Prints the manifests.
pub fn run(args: &PackageArgs) -> Result<ExitCode> {
    let bytes = read_component(&args.file, DEFAULT_MAX_COMPONENT_SIZE)?;
    let grants = match &args.grants {
        // Checked by the host's rules, then written in the Provider's shape.
        Some(path) => serde_json::from_value(serde_json::to_value(read_grants(path)?)?)
            .with_context(|| format!("{}: grants", path.display()))?,
        None => Vec::new(),
    };
    let options = PackageOptions {
        name: args.name.clone(),
        namespace: args.namespace.clone(),
        compression: args.compression.into(),
        pin: !args.no_pin,
        grants,
        limits: None,
        max_component_size: DEFAULT_MAX_COMPONENT_SIZE,
    };
    let packaged = package::package(&bytes, &options)
        .map_err(|err| anyhow!("{}: {err}", args.file.display()))?;
    let yaml = package::to_yaml(&packaged)?;
    match std::io::stdout().lock().write_all(yaml.as_bytes()) {
        Err(err) if err.kind() != ErrorKind::BrokenPipe => {
            Err(err).context("cannot write to stdout")
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}
