//! `capstan provider inspect FILE [--grants GRANTS]`: what a component is (WIT package and
//! version, exports, imports, size, sha256) and whether this host can run it; with `--grants`,
//! the grants it would run under, each `scope: any` one flagged.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, anyhow};
use clap::Args;

use capstan::runtime::validate::{self, DEFAULT_MAX_COMPONENT_SIZE};

use crate::commands::{read_component, read_grants};

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
    /// A grants file (as `capstan run --grants`): listed, each `scope: any` grant flagged.
    #[arg(long)]
    grants: Option<PathBuf>,
}

/// Prints what the component is; fails when this host cannot run it.
pub fn run(args: &InspectArgs) -> Result<ExitCode> {
    let bytes = read_component(&args.file, args.max_size)?;
    let info = validate::inspect(&bytes, args.max_size)
        .map_err(|err| anyhow!("{}: {err}", args.file.display()))?;
    let provider = info.provider_version();
    let grants = args.grants.as_deref().map(read_grants).transpose()?;
    if args.json {
        let value = serde_json::json!({
            "file": args.file,
            "info": info,
            "provider": provider.as_ref().ok(),
            "error": provider.as_ref().err().map(ToString::to_string),
            "grants": grants,
            "unscopedGrants": grants.as_ref().and_then(|g| g.unscoped_summary()),
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
        if let Some(grants) = &grants {
            println!("grants:");
            for (i, grant) in grants.iter().enumerate() {
                println!("  {i}: {} scope {}", grant.summary(), grant.scope.as_str());
            }
            if let Some(warning) = grants.unscoped_summary() {
                println!("warning:  {warning}");
            }
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
