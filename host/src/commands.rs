//! The subcommands, one module each, and what several of them share: reading components and
//! grants files, the compiled-component cache, Kubernetes clients and the async runtime.

pub mod explain;
pub mod provider;
pub mod run;
pub mod simulate;

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use clap::Args;

use capstan::capability::grants::{Grants, parse as grants_parse};
use capstan::runtime::Runtime;
use capstan::runtime::validate::ValidateError;

/// Where compiled components are cached (`--cache-dir`, `--no-cache`).
#[derive(Debug, Args)]
pub struct CacheArgs {
    /// Directory for compiled components (default: ~/.cache/capstan/components).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Do not cache compiled components.
    #[arg(long)]
    no_cache: bool,
}

impl CacheArgs {
    /// The cache directory, if caching is on: `--cache-dir`, else `~/.cache/capstan/components`
    /// (none without a home directory).
    fn dir(&self) -> Option<PathBuf> {
        if self.no_cache {
            return None;
        }
        self.cache_dir.clone().or_else(|| {
            std::env::var_os("HOME")
                .map(|home| PathBuf::from(home).join(".cache/capstan/components"))
        })
    }

    /// Where layers pulled from OCI registries are cached: `oci/` in the cache directory.
    pub fn oci_dir(&self) -> Option<PathBuf> {
        Some(self.dir()?.join("oci"))
    }

    /// A runtime whose compiled components go through this cache (created if missing).
    pub fn runtime(&self) -> Result<Runtime> {
        let mut builder = Runtime::builder();
        if let Some(dir) = self.dir() {
            fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create cache directory {}", dir.display()))?;
            let handle = Dir::open_ambient_dir(&dir, ambient_authority())
                .with_context(|| format!("cannot open cache directory {}", dir.display()))?;
            builder = builder.cache_dir(handle);
        }
        Ok(builder.build()?)
    }
}

/// Reads and checks a grants file (YAML or JSON: a list, or an object with `grants`).
pub fn read_grants(path: &Path) -> Result<Grants> {
    let text =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    grants_parse::from_text(&text).with_context(|| format!("{}", path.display()))
}

/// Reads a component, refusing oversized files before reading them.
pub fn read_component(path: &Path, max_size: usize) -> Result<Vec<u8>> {
    let file = fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let len = file
        .metadata()
        .with_context(|| format!("cannot stat {}", path.display()))?
        .len();
    if len > max_size as u64 {
        bail!(
            "{}: {}",
            path.display(),
            ValidateError::TooLarge {
                size: usize::try_from(len).unwrap_or(usize::MAX),
                limit: max_size,
            }
        );
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(max_size as u64 + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {}", path.display()))?;
    Ok(bytes)
}

/// Writes a report to standard output; a closed pipe (`| head`) is no error.
pub fn print(text: &str) -> Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to standard output"),
    }
}

/// Runs a future on a fresh multi-threaded Tokio runtime.
pub fn block_on<T>(future: impl Future<Output = Result<T>>) -> Result<T> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(future)
}

/// The client configuration of a kubeconfig file.
pub async fn kube_config(path: &Path) -> Result<kube::Config> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .with_context(|| format!("bad kubeconfig {}", path.display()))
}

/// A client for a kubeconfig file.
pub async fn client(path: &Path) -> Result<kube::Client> {
    kube::Client::try_from(kube_config(path).await?).context("cannot create the Kubernetes client")
}

/// A duration in the API's format (`15m`, `1h30m`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    capstan::api::duration::parse(text).map_err(|err| err.to_string())
}

/// Like [`parse_duration`], also taking milliseconds (`500ms`).
pub fn parse_short_duration(text: &str) -> Result<Duration, String> {
    match text.strip_suffix("ms") {
        Some(millis) => millis
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|err| format!("invalid duration {text:?}: {err}")),
        None => parse_duration(text),
    }
}
