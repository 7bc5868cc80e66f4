//! The supply-chain tools the OCI and signature tests run: the CNCF distribution registry,
//! cosign and oras, each built from its pinned Go module by `tests/control-plane/cp supply-chain`
//! (cached; pinned in `tests/control-plane/supply-chain.env`), and [`OciRegistry`], a registry
//! served on loopback for one test.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::paths::repo_root;
use crate::{Error, Result};

static TOOLS: OnceLock<Result<BTreeMap<String, PathBuf>, String>> = OnceLock::new();

/// The path of supply-chain tool `name` (`registry`, `cosign` or `oras`): built (or found in
/// the cache) once per process.
pub fn tool(name: &str) -> Result<PathBuf> {
    let tools = TOOLS
        .get_or_init(|| {
            let script = repo_root().join("tests").join("control-plane").join("cp");
            let out = Command::new("bash")
                .arg(&script)
                .arg("supply-chain")
                .stdin(Stdio::null())
                .stderr(Stdio::inherit())
                .output()
                .map_err(|e| format!("run {}: {e}", script.display()))?;
            if !out.status.success() {
                return Err(format!(
                    "{} supply-chain exited with {} (see its output above)",
                    script.display(),
                    out.status
                ));
            }
            Ok(String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|line| line.split_once(' '))
                .map(|(name, path)| (name.to_owned(), PathBuf::from(path.trim())))
                .collect())
        })
        .clone()
        .map_err(Error::Build)?;
    tools
        .get(name)
        .cloned()
        .ok_or_else(|| Error::Build(format!("cp supply-chain printed no {name}")))
}

/// Runs tool `name` with `args` (and `env`), in `dir`; its output, whatever the exit status.
pub fn run_tool(name: &str, args: &[&str], env: &[(&str, &str)], dir: &Path) -> Result<Output> {
    let path = tool(name)?;
    Command::new(&path)
        .args(args)
        .envs(env.iter().copied())
        // No tool reaches beyond loopback: no proxy, no transparency log, no telemetry.
        .env("HOME", dir)
        .env("DOCKER_CONFIG", dir.join(".docker"))
        .env("SIGSTORE_NO_CACHE", "true")
        .env("COSIGN_EXPERIMENTAL", "0")
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| Error::Io { path, source })
}

/// A CNCF distribution registry on a free loopback port, storing in a temporary directory;
/// stopped (and its storage removed) on drop.
pub struct OciRegistry {
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
}

impl OciRegistry {
    /// Starts a registry and waits until it answers `/v2/`.
    pub fn start() -> Result<Self> {
        let registry = tool("registry")?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .map_err(|source| Error::Io {
                path: PathBuf::from("127.0.0.1:0"),
                source,
            })?;
        let dir = std::env::temp_dir().join(format!(
            "capstan-registry-{}-{port}",
            std::process::id()
        ));
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { path, source }
        };
        std::fs::create_dir_all(dir.join("storage")).map_err(io(&dir))?;
        let config = dir.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
                dir.join("storage").display()
            ),
        )
        .map_err(io(&config))?;
        let log = std::fs::File::create(dir.join("registry.log")).map_err(io(&dir))?;
        let child = Command::new(&registry)
            .arg("serve")
            .arg(&config)
            .env("OTEL_TRACES_EXPORTER", "none")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(io(&registry))?;
        let mut started = Self {
            child: Some(child),
            dir,
            port,
        };
        started.wait_ready(Duration::from_secs(30))?;
        Ok(started)
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let at = Instant::now();
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(Error::Start(format!(
                    "registry exited with {status}: {}",
                    self.log_tail()
                )));
            }
            if at.elapsed() > timeout {
                return Err(Error::Start(format!(
                    "registry not listening after {timeout:?}: {}",
                    self.log_tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The last lines of the registry's log.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Stops the registry (its storage is kept, so [`OciRegistry::restart`] serves it again).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the registry again on the same port and storage.
    pub fn restart(&mut self) -> Result<()> {
        self.stop();
        let registry = tool("registry")?;
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.join("registry.log"))
            .map_err(|source| Error::Io {
                path: self.dir.clone(),
                source,
            })?;
        self.child = Some(
            Command::new(&registry)
                .arg("serve")
                .arg(self.dir.join("config.yml"))
                .env("OTEL_TRACES_EXPORTER", "none")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .map_err(|source| Error::Io {
                    path: registry,
                    source,
                })?,
        );
        self.wait_ready(Duration::from_secs(30))
    }
}

impl Drop for OciRegistry {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
