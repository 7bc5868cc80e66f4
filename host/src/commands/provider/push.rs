//! `capstan provider push FILE REFERENCE`: the component as an OCI artifact in the CNCF wasm
//! layout (config `application/vnd.wasm.config.v0+json`, one layer `application/wasm`) — the
//! layout `Provider.spec.source.oci` pulls. Prints the manifest digest (what to sign and pin).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Args;

use capstan::provider::oci::push;
use capstan::runtime::validate::DEFAULT_MAX_COMPONENT_SIZE;

use crate::commands::provider::RegistryArgs;
use crate::commands::{block_on, read_component};

/// Arguments of `capstan provider push`.
#[derive(Debug, Args)]
pub struct PushArgs {
    /// The component (`.wasm`).
    file: PathBuf,
    /// Where to push: `registry/repository:tag`.
    reference: String,
    /// A manifest annotation `KEY=VALUE` (repeatable), e.g.
    /// `org.opencontainers.image.source=https://github.com/acme/provider`.
    #[arg(long = "annotation", value_name = "KEY=VALUE")]
    annotations: Vec<String>,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// Pushes the component; prints `REFERENCE@sha256:…`.
pub fn run(args: &PushArgs) -> Result<ExitCode> {
    let bytes = read_component(&args.file, DEFAULT_MAX_COMPONENT_SIZE)?;
    if !bytes.starts_with(b"\0asm") {
        bail!("{}: not a WebAssembly file", args.file.display());
    }
    let mut annotations = BTreeMap::new();
    for pair in &args.annotations {
        let Some((key, value)) = pair.split_once('=') else {
            bail!("--annotation {pair:?}: expected KEY=VALUE");
        };
        annotations.insert(key.to_owned(), value.to_owned());
    }
    let remote = args.registry.remote(&args.reference)?;
    let file_name = args
        .file
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or("provider.wasm")
        .to_owned();
    let pushed = block_on(async {
        push::push(&remote, &bytes, &file_name, annotations)
            .await
            .with_context(|| format!("cannot push {}", args.file.display()))
    })?;
    let repository = format!(
        "{}/{}",
        remote.reference.registry(),
        remote.reference.repository()
    );
    println!("{repository}@{}", pushed.manifest_digest);
    Ok(ExitCode::SUCCESS)
}
