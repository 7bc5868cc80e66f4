//! Where things are: the repository and the built binaries.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::{Error, Result};

/// The repository root: the nearest directory with `Cargo.lock` and `crds/` above the running
/// package (or, failing that, two levels above this crate's manifest directory).
pub fn repo_root() -> PathBuf {
    // The running package's directory (cargo sets it for tests and benches) wins over the one
    // compiled in: a build shared between checkouts (one CARGO_TARGET_DIR) may have been compiled
    // in another clone.
    let runtime = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
    let compiled = Path::new(env!("CARGO_MANIFEST_DIR"));
    for start in runtime.iter().map(PathBuf::as_path).chain([compiled]) {
        if let Some(root) = start
            .ancestors()
            .find(|dir| dir.join("Cargo.lock").is_file() && dir.join("crds").is_dir())
        {
            return root.to_path_buf();
        }
    }
    compiled
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| compiled.to_path_buf())
}

static BIN_DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// The directory holding `capstan-cp`, `kwok`, `helm` and the `kubectl` link. Runs
/// `tests/control-plane/cp build` once per process: instant when the binaries are cached, a long
/// cold build otherwise (its progress goes to standard error). `$CAPSTAN_CP_BIN_DIR` overrides.
pub fn bin_dir() -> Result<PathBuf> {
    BIN_DIR
        .get_or_init(|| {
            if let Some(dir) = std::env::var_os("CAPSTAN_CP_BIN_DIR") {
                return Ok(PathBuf::from(dir));
            }
            build_control_plane()
        })
        .clone()
        .map_err(Error::Build)
}

/// Runs `tests/control-plane/cp SUBCOMMAND` (its progress on standard error); its standard output.
pub(crate) fn run_cp(subcommand: &str) -> Result<String, String> {
    let script = repo_root().join("tests").join("control-plane").join("cp");
    tracing::info!(script = %script.display(), subcommand, "building (or reusing) cached binaries");
    let out = Command::new("bash")
        .arg(&script)
        .arg(subcommand)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} {subcommand} exited with {} (see its output above)",
            script.display(),
            out.status
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn build_control_plane() -> Result<PathBuf, String> {
    let stdout = run_cp("build")?;
    let dir = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| PathBuf::from(l.trim()))
        .ok_or_else(|| "cp build printed no directory".to_owned())?;
    if !dir.join("capstan-cp").is_file() {
        return Err(format!("{} has no capstan-cp binary", dir.display()));
    }
    Ok(dir)
}
