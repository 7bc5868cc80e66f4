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

use crate::{Error, Result};

static TOOLS: OnceLock<Result<BTreeMap<String, PathBuf>, String>> = OnceLock::new();

/// The path of supply-chain tool `name` (`registry`, `cosign` or `oras`): built (or found in
/// the cache) once per process.
pub fn tool(name: &str) -> Result<PathBuf> {
    let tools = TOOLS
        .get_or_init(|| {
            Ok(crate::paths::run_cp("supply-chain")?
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
    /// Starts a registry (anonymous access) and waits until it listens.
    pub fn start() -> Result<Self> {
        Self::launch(None)
    }

    /// Starts a registry that requires `user` and `password` for every request (HTTP basic
    /// auth against an htpasswd file of bcrypt entries, as the distribution registry reads).
    pub fn start_with_auth(user: &str, password: &str) -> Result<Self> {
        Self::launch(Some((user, password)))
    }

    fn launch(credentials: Option<(&str, &str)>) -> Result<Self> {
        let registry = tool("registry")?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .map_err(|source| Error::Io {
                path: PathBuf::from("127.0.0.1:0"),
                source,
            })?;
        let dir =
            std::env::temp_dir().join(format!("capstan-registry-{}-{port}", std::process::id()));
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { path, source }
        };
        std::fs::create_dir_all(dir.join("storage")).map_err(io(&dir))?;
        let auth = match credentials {
            None => String::new(),
            Some((user, password)) => {
                let hash = bcrypt::hash(password, 4)
                    .map_err(|err| Error::Start(format!("bcrypt: {err}")))?;
                let htpasswd = dir.join("htpasswd");
                std::fs::write(&htpasswd, format!("{user}:{hash}\n")).map_err(io(&htpasswd))?;
                format!(
                    "auth:\n  htpasswd:\n    realm: capstan-tests\n    path: {}\n",
                    htpasswd.display()
                )
            }
        };
        let config = dir.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n{auth}",
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

/// A scratch directory for one test's files (components, keys, bundles), with the tools run in
/// it; removed on drop. Every step returns the tool's complaint as [`Error::Tool`].
pub struct Workdir(PathBuf);

fn io_error(path: PathBuf) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { path, source }
}

impl Workdir {
    /// A new directory for test `name`.
    pub fn new(name: &str) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "capstan-oci-{name}-{}-{}",
            std::process::id(),
            crate::unique_name("d")
        ));
        std::fs::create_dir_all(&dir).map_err(io_error(dir.clone()))?;
        Ok(Self(dir))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes file `name`.
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).map_err(io_error(path))
    }

    /// Reads file `name`.
    pub fn read(&self, name: &str) -> Result<String> {
        let path = self.0.join(name);
        std::fs::read_to_string(&path).map_err(io_error(path))
    }

    /// Runs a tool here; its standard output, trimmed.
    pub fn run(&self, tool: &str, args: &[&str]) -> Result<String> {
        let out = run_tool(tool, args, &[("COSIGN_PASSWORD", "")], &self.0)?;
        if !out.status.success() {
            return Err(Error::Tool(format!(
                "{tool} {args:?} exited with {}: {}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Pushes `bytes` to `reference` in the CNCF wasm layout (config
    /// `application/vnd.wasm.config.v0+json`, layer `application/wasm`); its manifest digest.
    pub fn push_cncf(&self, reference: &str, bytes: &[u8]) -> Result<String> {
        self.write("provider.wasm", bytes)?;
        self.write("config.json", br#"{"architecture":"wasm","os":"wasip2"}"#)?;
        self.run(
            "oras",
            &[
                "push",
                "--plain-http",
                "--artifact-type",
                "application/vnd.wasm.component.v0+wasm",
                "--config",
                "config.json:application/vnd.wasm.config.v0+json",
                reference,
                "provider.wasm:application/wasm",
            ],
        )?;
        self.resolve(reference)
    }

    /// Pushes `bytes` as a plain file (`oras push REF FILE`); its manifest digest.
    pub fn push_file(&self, reference: &str, file: &str, bytes: &[u8]) -> Result<String> {
        self.write(file, bytes)?;
        self.run("oras", &["push", "--plain-http", reference, file])?;
        self.resolve(reference)
    }

    /// Pulls `reference` with `oras pull` into `dir` (under this directory); the bytes of the
    /// file named `file` it wrote.
    pub fn oras_pull(&self, reference: &str, dir: &str, file: &str) -> Result<Vec<u8>> {
        self.run("oras", &["pull", "--plain-http", "-o", dir, reference])?;
        let path = self.0.join(dir).join(file);
        std::fs::read(&path).map_err(io_error(path))
    }

    /// The manifest digest `reference` resolves to.
    pub fn resolve(&self, reference: &str) -> Result<String> {
        self.run("oras", &["resolve", "--plain-http", reference])
    }

    /// A cosign key pair `<prefix>.key`, `<prefix>.pub` (no password); the public key's PEM.
    pub fn cosign_key(&self, prefix: &str) -> Result<String> {
        self.run(
            "cosign",
            &["generate-key-pair", "--output-key-prefix", prefix],
        )?;
        self.read(&format!("{prefix}.pub"))
    }

    /// Signs `reference` (by digest) with `<prefix>.key`, storing the signature in the registry
    /// (cosign's `.sig` tag); no transparency log.
    pub fn cosign_sign(&self, prefix: &str, reference: &str) -> Result<()> {
        self.sign(prefix, reference, &[])
    }

    /// Signs `reference` (by digest) with `<prefix>.key` as a Sigstore bundle attached as an OCI
    /// referrer (`--new-bundle-format`; the `sha256-<hex>` fallback tag on a registry without
    /// the referrers API); no transparency log.
    pub fn cosign_sign_bundle(&self, prefix: &str, reference: &str) -> Result<()> {
        self.sign(prefix, reference, &["--new-bundle-format"])
    }

    fn sign(&self, prefix: &str, reference: &str, extra: &[&str]) -> Result<()> {
        let key = format!("{prefix}.key");
        let mut args = vec![
            "sign",
            "--key",
            &key,
            "--tlog-upload=false",
            "--allow-http-registry",
            "--allow-insecure-registry",
            "--yes",
        ];
        args.extend_from_slice(extra);
        args.push(reference);
        self.run("cosign", &args).map(drop)
    }

    /// A Sigstore bundle of `bytes` signed with `<prefix>.key` (`cosign sign-blob --bundle`).
    pub fn cosign_bundle(&self, prefix: &str, bytes: &[u8]) -> Result<String> {
        self.write("blob.wasm", bytes)?;
        self.run(
            "cosign",
            &[
                "sign-blob",
                "--key",
                &format!("{prefix}.key"),
                "--new-bundle-format",
                "--tlog-upload=false",
                "--bundle",
                "blob.sigstore.json",
                "--yes",
                "blob.wasm",
            ],
        )?;
        self.read("blob.sigstore.json")
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
