//! `capstan provider inspect FILE`: what a component is (WIT package and version, exports,
//! imports, size, sha256) and whether this host can run it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, anyhow};
use clap::Args;

use capstan::runtime::validate::{self, DEFAULT_MAX_COMPONENT_SIZE};

use crate::commands::read_component;

/// Arguments of `capstan provider inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The component (`.wasm`).
    file: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Refuse components larger than this many bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_COMPONENT_SIZE)]
    max_size: usize,
}

/// Prints what the component is; fails when this host cannot run it.
pub fn run(args: &InspectArgs) -> Result<ExitCode> {
    let bytes = read_component(&args.file, args.max_size)?;
    let info = validate::inspect(&bytes, args.max_size)
        .map_err(|err| anyhow!("{}: {err}", args.file.display()))?;
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
        if !info.node_class_kinds.is_empty() {
            println!("node class kinds:");
            for kind in &info.node_class_kinds {
                println!(
                    "  {}/{} {}{}",
                    kind.group,
                    kind.version,
                    kind.kind,
                    if kind.status { " (status)" } else { "" }
                );
            }
        }
    }
    Ok(if provider.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
