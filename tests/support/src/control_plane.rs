//! Starting, using and stopping a control plane.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use kube::{Client, Config};
use tokio::sync::OnceCell;

use crate::paths::bin_dir;
use crate::wait::wait_until;
use crate::yaml::{parse_yaml, unique_name};
use crate::{Error, Result, io_err};

/// Field manager used for server-side apply.
const FIELD_MANAGER: &str = "capstan-test-support";

/// What to run. The default runs everything.
#[derive(Debug, Clone)]
pub struct Options {
    /// Run kube-controller-manager (Deployments, ReplicaSets, ServiceAccounts, GC, ...).
    pub controller_manager: bool,
    /// Run kube-scheduler.
    pub scheduler: bool,
    /// Run kwok, which acts as the kubelet of Nodes annotated `kwok.x-k8s.io/node: fake`.
    pub kwok: bool,
    /// How long the supervisor waits for every component to become ready.
    pub start_timeout: Duration,
    /// State directory (kubeconfig, logs, pki, etcd data). Default: a fresh directory under
    /// `$CAPSTAN_TEST_RUN_DIR` or `<tmp>/capstan-test-cp`. A directory left by an earlier run is
    /// cleaned (its processes stopped) first.
    pub dir: Option<PathBuf>,
    /// Extra arguments for `capstan-cp supervise` (e.g. `--simulate-busy-port`).
    pub extra_args: Vec<String>,
    /// Run Cluster API's core controllers (with their CRDs and webhooks, and the test
    /// infrastructure provider's CRDs) against this control plane, as a management cluster:
    /// `tests/control-plane/cp capi` (see [`crate::cluster_api`]).
    pub cluster_api: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            controller_manager: true,
            scheduler: true,
            kwok: true,
            start_timeout: Duration::from_secs(180),
            dir: None,
            extra_args: Vec::new(),
            cluster_api: false,
        }
    }
}

impl Options {
    /// Only etcd and kube-apiserver.
    pub fn api_server_only() -> Self {
        Self {
            controller_manager: false,
            scheduler: false,
            kwok: false,
            ..Self::default()
        }
    }

    /// A Cluster API management cluster: etcd, kube-apiserver and Cluster API's core controllers.
    pub fn cluster_api_management() -> Self {
        Self {
            cluster_api: true,
            ..Self::api_server_only()
        }
    }
}

struct Supervisor {
    child: Child,
    /// Closing this pipe tells the supervisor to stop everything.
    stdin: Option<ChildStdin>,
}

/// A running control plane: etcd, kube-apiserver and (optionally) kube-controller-manager,
/// kube-scheduler and kwok, on free loopback ports, with TLS, RBAC and service-account tokens.
pub struct ControlPlane {
    dir: PathBuf,
    bin_dir: PathBuf,
    kubeconfig: PathBuf,
    server: String,
    config: Config,
    options: Options,
    supervisor: Mutex<Option<Supervisor>>,
    /// `cp capi --watch-stdin`, when [`Options::cluster_api`].
    cluster_api: Mutex<Option<Supervisor>>,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("dir", &self.dir)
            .field("server", &self.server)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

static SHARED: OnceCell<ControlPlane> = OnceCell::const_new();

fn run_root() -> PathBuf {
    std::env::var_os("CAPSTAN_TEST_RUN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("capstan-test-cp"))
}

fn pid_alive(pid: u32) -> bool {
    // A zombie has exited; treat it as gone.
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

fn tail(path: &Path, lines: usize) -> String {
    match fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// Stops and removes run directories whose owning test process is gone (an earlier run that
/// crashed or was killed). Directory names start with the owner's pid.
fn sweep_stale(root: &Path, bin: &Path) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    let me = std::process::id();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(owner) = name.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if owner == me || pid_alive(owner) {
            continue;
        }
        let path = entry.path();
        tracing::info!(dir = %path.display(), "removing control plane left by an earlier run");
        let _ = Command::new(bin.join("capstan-cp"))
            .arg("down")
            .arg("--dir")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = fs::remove_dir_all(&path);
    }
}

impl ControlPlane {
    /// The control plane shared by all tests of this test binary, started on first use with the
    /// default [`Options`]. It stops when the test process exits.
    ///
    /// Tests sharing it must isolate themselves: a namespace from
    /// [`create_namespace_unique`](Self::create_namespace_unique), unique names (see
    /// [`unique_name`](crate::unique_name)) and labels for cluster-scoped objects.
    pub async fn shared() -> Result<&'static ControlPlane> {
        let cp = SHARED
            .get_or_try_init(|| ControlPlane::start(Options::default()))
            .await?;
        cp.health()?;
        Ok(cp)
    }

    /// Starts a fresh control plane. It stops on [`stop`](Self::stop), on drop, or when the test
    /// process exits.
    pub async fn start(options: Options) -> Result<ControlPlane> {
        let bin = tokio::task::spawn_blocking(bin_dir)
            .await
            .map_err(|e| Error::Build(format!("build task: {e}")))??;
        let root = run_root();
        fs::create_dir_all(&root).map_err(io_err(&root))?;
        {
            let (root, bin) = (root.clone(), bin.clone());
            let _ = tokio::task::spawn_blocking(move || sweep_stale(&root, &bin)).await;
        }
        let dir = match &options.dir {
            Some(d) => d.clone(),
            None => root.join(format!(
                "{}-{}",
                std::process::id(),
                unique_name("cp").trim_start_matches("cp-")
            )),
        };
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let dir = dir.canonicalize().map_err(io_err(&dir))?;
        for stale in ["ready", "failed"] {
            let _ = fs::remove_file(dir.join(stale));
        }
        let log_path = dir.join("supervisor.log");
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(io_err(&log_path))?;
        let log2 = log.try_clone().map_err(io_err(&log_path))?;

        let mut cmd = Command::new(bin.join("capstan-cp"));
        cmd.arg("supervise")
            .arg("--dir")
            .arg(&dir)
            .arg("--watch-stdin")
            .arg("--start-timeout")
            .arg(format!("{}s", options.start_timeout.as_secs().max(1)));
        if !options.controller_manager {
            cmd.arg("--no-controller-manager");
        }
        if !options.scheduler {
            cmd.arg("--no-scheduler");
        }
        if !options.kwok {
            cmd.arg("--no-kwok");
        }
        cmd.args(&options.extra_args);
        cmd.stdin(Stdio::piped()).stdout(log).stderr(log2);
        let started = Instant::now();
        let mut child = cmd.spawn().map_err(|e| {
            Error::Start(format!("spawn {}: {e}", bin.join("capstan-cp").display()))
        })?;
        let stdin = child.stdin.take();
        let pid = child.id();
        tracing::info!(dir = %dir.display(), pid, "starting control plane");
        let mut supervisor = Supervisor { child, stdin };

        let ready_path = dir.join("ready");
        let deadline = started + options.start_timeout + Duration::from_secs(30);
        let ready = loop {
            if let Ok(text) = fs::read_to_string(&ready_path) {
                let fields = parse_kv(&text);
                if fields.get("supervisor_pid").map(String::as_str) == Some(&pid.to_string()) {
                    break fields;
                }
            }
            let exited = supervisor
                .child
                .try_wait()
                .map_err(|e| Error::Start(format!("wait for supervisor: {e}")))?;
            if let Some(status) = exited {
                let why =
                    fs::read_to_string(dir.join("failed")).unwrap_or_else(|_| tail(&log_path, 80));
                return Err(Error::Start(format!(
                    "supervisor exited with {status}; state in {}:\n{why}",
                    dir.display()
                )));
            }
            if Instant::now() >= deadline {
                let _ = supervisor.child.kill();
                let _ = supervisor.child.wait();
                return Err(Error::Start(format!(
                    "not ready after {:?}; supervisor log {}:\n{}",
                    options.start_timeout + Duration::from_secs(30),
                    log_path.display(),
                    tail(&log_path, 80)
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let kubeconfig = dir.join("kubeconfig");
        let server = ready.get("server").cloned().unwrap_or_default();
        let config = match load_config(&kubeconfig).await {
            Ok(c) => c,
            Err(e) => {
                drop(supervisor.stdin.take());
                let _ = supervisor.child.kill();
                let _ = supervisor.child.wait();
                return Err(e);
            }
        };
        let cluster_api = options.cluster_api;
        let cp = ControlPlane {
            dir: dir.clone(),
            bin_dir: bin,
            kubeconfig,
            server,
            config,
            options,
            supervisor: Mutex::new(Some(supervisor)),
            cluster_api: Mutex::new(None),
        };
        if cluster_api {
            let dir = cp.dir.clone();
            let started = Instant::now();
            let manager = tokio::task::spawn_blocking(move || start_cluster_api(&dir))
                .await
                .map_err(|e| Error::Start(format!("Cluster API start task: {e}")))??;
            *cp.cluster_api
                .lock()
                .map_err(|_| Error::Failed("Cluster API lock poisoned".into()))? = Some(manager);
            tracing::info!(
                seconds = started.elapsed().as_secs_f64(),
                "Cluster API core controllers ready"
            );
        }
        tracing::info!(
            dir = %cp.dir.display(),
            server = %cp.server,
            seconds = started.elapsed().as_secs_f64(),
            "control plane ready"
        );
        Ok(cp)
    }

    /// A new client for this control plane, authenticated as a cluster admin (`system:masters`).
    ///
    /// Make one per test: a `kube::Client` is bound to the Tokio runtime it was made on, and each
    /// `#[tokio::test]` has its own.
    pub fn client(&self) -> Result<Client> {
        self.health()?;
        Ok(Client::try_from(self.config.clone())?)
    }

    /// The client configuration (admin credentials), e.g. to derive other identities.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The admin kubeconfig file.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The API server URL (`https://127.0.0.1:<port>`).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The state directory: `kubeconfig`, `logs/<component>.log`, `pki/` (CA, service-account
    /// keys), `pids`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory with `kubectl`, `helm`, `kwok` and `capstan-cp`.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// The options it was started with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// A `kubectl` command with `KUBECONFIG` set to this control plane.
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(self.bin_dir.join("kubectl"));
        cmd.env("KUBECONFIG", &self.kubeconfig);
        cmd
    }

    /// A `helm` command with `KUBECONFIG` set to this control plane and its own cache/config dirs.
    pub fn helm(&self) -> Command {
        let mut cmd = Command::new(self.bin_dir.join("helm"));
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CACHE_HOME", self.dir.join("helm/cache"))
            .env("HELM_CONFIG_HOME", self.dir.join("helm/config"))
            .env("HELM_DATA_HOME", self.dir.join("helm/data"));
        cmd
    }

    /// The component processes as recorded by the supervisor (`name`, `pid`), supervisor first.
    pub fn pids(&self) -> Vec<(String, u32)> {
        fs::read_to_string(self.dir.join("pids"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (name, pid) = l.split_once(' ')?;
                Some((name.to_string(), pid.trim().parse().ok()?))
            })
            .collect()
    }

    /// Ok while every component runs. When one has died, the error carries the failure report
    /// (the tail of each component's log).
    pub fn health(&self) -> Result<()> {
        if let Ok(report) = fs::read_to_string(self.dir.join("failed")) {
            return Err(Error::Failed(report));
        }
        let mut guard = self
            .supervisor
            .lock()
            .map_err(|_| Error::Failed("supervisor lock poisoned".into()))?;
        match guard.as_mut() {
            None => Err(Error::Failed("control plane was stopped".into())),
            Some(s) => match s.child.try_wait() {
                Ok(None) => self.cluster_api_health(),
                Ok(Some(status)) => Err(Error::Failed(format!(
                    "supervisor exited with {status}; its log:\n{}",
                    tail(&self.dir.join("supervisor.log"), 80)
                ))),
                Err(e) => Err(Error::Failed(format!("wait for supervisor: {e}"))),
            },
        }
    }

    fn cluster_api_health(&self) -> Result<()> {
        let mut guard = self
            .cluster_api
            .lock()
            .map_err(|_| Error::Failed("Cluster API lock poisoned".into()))?;
        match guard.as_mut().map(|s| s.child.try_wait()) {
            None | Some(Ok(None)) => Ok(()),
            Some(Ok(Some(status))) => Err(Error::Failed(format!(
                "the Cluster API manager exited ({status}); its log:\n{}",
                self.log_tail("cluster-api", 60)
            ))),
            Some(Err(e)) => Err(Error::Failed(format!("wait for Cluster API: {e}"))),
        }
    }

    /// Kills kube-apiserver (SIGKILL) and leaves it down until
    /// [`start_api_server`](Self::start_api_server); the other components keep running.
    pub async fn kill_api_server(&self) -> Result<()> {
        self.signal_supervisor("USR1")?;
        self.wait_api_server_state(|state| state == "down").await
    }

    /// Starts kube-apiserver again on the same port and waits until it is ready.
    pub async fn start_api_server(&self) -> Result<()> {
        let before = self.api_server_restarts();
        self.signal_supervisor("USR2")?;
        self.wait_api_server_state(move |state| {
            state
                .strip_prefix("up ")
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|n| n > before)
        })
        .await
    }

    fn api_server_restarts(&self) -> u32 {
        fs::read_to_string(self.dir.join("apiserver"))
            .ok()
            .and_then(|s| s.trim().strip_prefix("up ")?.parse().ok())
            .unwrap_or(0)
    }

    fn signal_supervisor(&self, signal: &str) -> Result<()> {
        let pid = self
            .supervisor
            .lock()
            .map_err(|_| Error::Failed("supervisor lock poisoned".into()))?
            .as_ref()
            .map(|s| s.child.id())
            .ok_or_else(|| Error::Failed("control plane was stopped".into()))?;
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .map_err(|e| Error::Failed(format!("kill -{signal} {pid}: {e}")))?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::Failed(format!("kill -{signal} {pid}: {status}")))
        }
    }

    async fn wait_api_server_state(&self, want: impl Fn(&str) -> bool) -> Result<()> {
        let path = self.dir.join("apiserver");
        let deadline = Instant::now() + self.options.start_timeout + Duration::from_secs(10);
        loop {
            let state = fs::read_to_string(&path).unwrap_or_default();
            if want(state.trim()) {
                return Ok(());
            }
            self.health()?;
            if Instant::now() >= deadline {
                return Err(Error::Failed(format!(
                    "kube-apiserver state is {:?}; its log:\n{}",
                    state.trim(),
                    self.log_tail("kube-apiserver", 40)
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The last `lines` lines of a component's log (`etcd`, `kube-apiserver`,
    /// `kube-controller-manager`, `kube-scheduler`, `kwok`).
    pub fn log_tail(&self, component: &str, lines: usize) -> String {
        tail(
            &self.dir.join("logs").join(format!("{component}.log")),
            lines,
        )
    }

    /// Stops every component and waits until they are gone.
    pub fn stop(&self) -> Result<()> {
        let manager = self
            .cluster_api
            .lock()
            .map_err(|_| Error::Failed("Cluster API lock poisoned".into()))?
            .take();
        if let Some(mut manager) = manager {
            // EOF on its stdin: `cp capi --watch-stdin` stops the manager and exits.
            drop(manager.stdin.take());
            let deadline = Instant::now() + Duration::from_secs(15);
            while matches!(manager.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = manager.child.kill();
            let _ = manager.child.wait();
        }
        let taken = self
            .supervisor
            .lock()
            .map_err(|_| Error::Failed("supervisor lock poisoned".into()))?
            .take();
        let Some(mut s) = taken else {
            return Ok(());
        };
        let pids = self.pids();
        // EOF on its stdin: the supervisor stops the components (SIGTERM, then SIGKILL) and exits.
        drop(s.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match s.child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    let _ = s.child.kill();
                    let _ = s.child.wait();
                    break;
                }
            }
        }
        // Components die with the supervisor (PDEATHSIG); wait for that to be visible.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left: Vec<_> = pids.iter().filter(|(_, p)| pid_alive(*p)).collect();
            if left.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::Failed(format!(
                    "processes still running after stop: {left:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Creates a namespace `<prefix>-<random>` and, when the controller manager runs, waits for
    /// its `default` ServiceAccount (pods cannot be created before it exists).
    pub async fn create_namespace_unique(&self, prefix: &str) -> Result<String> {
        let client = self.client()?;
        let name = unique_name(prefix);
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": { "name": name, "labels": { "capstan.dev/test": "true" } },
        }))
        .map_err(|e| Error::Manifest {
            source_name: "namespace".into(),
            message: e.to_string(),
        })?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        if self.options.controller_manager {
            let sas = Api::<ServiceAccount>::namespaced(client, &name);
            wait_until(
                Duration::from_secs(60),
                &format!("ServiceAccount {name}/default"),
                || async { sas.get_opt("default").await },
            )
            .await?;
        }
        Ok(name)
    }

    /// Installs every CustomResourceDefinition found in the `*.yaml`/`*.yml` files of `dir`
    /// (multi-document files; other kinds are skipped) and waits until each is Established and
    /// served. Returns the CRD names.
    pub async fn install_crds_from_dir(&self, dir: &Path) -> Result<Vec<String>> {
        let mut files: Vec<PathBuf> = fs::read_dir(dir)
            .map_err(io_err(dir))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
            .collect();
        files.sort();
        self.install_crds_from_files(&files).await
    }

    /// Like [`install_crds_from_dir`](Self::install_crds_from_dir) for a list of files.
    pub async fn install_crds_from_files(&self, files: &[PathBuf]) -> Result<Vec<String>> {
        let mut manifests = Vec::new();
        for file in files {
            let text = fs::read_to_string(file).map_err(io_err(file))?;
            manifests.push((file.display().to_string(), text));
        }
        let client = self.client()?;
        let crds = Api::<CustomResourceDefinition>::all(client.clone());
        let mut names = Vec::new();
        for (source, text) in &manifests {
            for obj in parse_yaml(source, text)? {
                let is_crd = obj.types.as_ref().is_some_and(|t| {
                    t.kind == "CustomResourceDefinition"
                        && t.api_version.starts_with("apiextensions.k8s.io/")
                });
                if !is_crd {
                    continue;
                }
                let name = obj.metadata.name.clone().ok_or_else(|| Error::Manifest {
                    source_name: source.clone(),
                    message: "CustomResourceDefinition without a name".into(),
                })?;
                crds.patch(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&obj),
                )
                .await?;
                names.push(name);
            }
        }
        for name in &names {
            let crd = wait_until(
                Duration::from_secs(60),
                &format!("CRD {name} Established"),
                || async {
                    let crd = crds.get(name).await?;
                    let established = crd
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c.type_ == "Established" && c.status == "True")
                        });
                    Ok::<_, kube::Error>(established.then_some(crd))
                },
            )
            .await?;
            for version in crd.spec.versions.iter().filter(|v| v.served) {
                let gvk =
                    GroupVersionKind::gvk(&crd.spec.group, &version.name, &crd.spec.names.kind);
                wait_until(
                    Duration::from_secs(60),
                    &format!("discovery of {}/{} {}", gvk.group, gvk.version, gvk.kind),
                    || async { discovery::pinned_kind(&client, &gvk).await.map(Some) },
                )
                .await?;
            }
        }
        Ok(names)
    }

    /// Applies (server-side apply, forced) every object of a multi-document YAML manifest.
    /// Namespaced objects go to `namespace` (overriding the manifest's own namespace, so tests
    /// stay isolated); cluster-scoped objects keep their names. Returns the applied objects as
    /// the server returned them.
    pub async fn apply_yaml(&self, namespace: &str, yaml: &str) -> Result<Vec<DynamicObject>> {
        let objects = parse_yaml("manifest", yaml)?;
        self.apply_objects(namespace, objects).await
    }

    /// [`apply_yaml`](Self::apply_yaml) for already parsed objects.
    pub async fn apply_objects(
        &self,
        namespace: &str,
        objects: Vec<DynamicObject>,
    ) -> Result<Vec<DynamicObject>> {
        let client = self.client()?;
        let mut applied = Vec::with_capacity(objects.len());
        for mut obj in objects {
            let (api, name) = self.dynamic_api(&client, namespace, &mut obj).await?;
            let out = api
                .patch(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&obj),
                )
                .await?;
            applied.push(out);
        }
        Ok(applied)
    }

    /// Resolves an object's kind through discovery and returns the API for it and its name.
    /// Namespaced objects are moved to `namespace`.
    pub async fn dynamic_api(
        &self,
        client: &Client,
        namespace: &str,
        obj: &mut DynamicObject,
    ) -> Result<(Api<DynamicObject>, String)> {
        let types = obj.types.clone().ok_or_else(|| Error::Manifest {
            source_name: "object".into(),
            message: "no apiVersion/kind".into(),
        })?;
        let gvk = GroupVersionKind::try_from(&types).map_err(|e| Error::Manifest {
            source_name: "object".into(),
            message: e.to_string(),
        })?;
        let name = obj.metadata.name.clone().ok_or_else(|| Error::Manifest {
            source_name: format!("{} {}", types.api_version, types.kind),
            message: "object without metadata.name".into(),
        })?;
        let (ar, caps) = discovery::pinned_kind(client, &gvk).await?;
        let api = match caps.scope {
            Scope::Namespaced => {
                obj.metadata.namespace = Some(namespace.to_string());
                Api::namespaced_with(client.clone(), namespace, &ar)
            }
            Scope::Cluster => {
                obj.metadata.namespace = None;
                Api::all_with(client.clone(), &ar)
            }
        };
        Ok((api, name))
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::warn!(dir = %self.dir.display(), "stopping control plane: {e}");
        }
    }
}

/// [`start_cluster_api_once`], again (up to three times in all) when a port it picked was taken
/// by another process between its choice and its bind.
fn start_cluster_api(dir: &Path) -> Result<Supervisor> {
    let mut attempt = 1;
    loop {
        match start_cluster_api_once(dir) {
            Err(Error::Start(why)) if attempt < 3 && why.contains("address already in use") => {
                tracing::warn!(attempt, "Cluster API lost a port to another process; again");
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Runs `cp capi --dir DIR --watch-stdin` and waits for its `ready PID` line: Cluster API's core
/// controllers run until its standard input closes (on [`ControlPlane::stop`], or when the test
/// process exits).
fn start_cluster_api_once(dir: &Path) -> Result<Supervisor> {
    use std::io::{BufRead, BufReader};
    let script = crate::paths::repo_root()
        .join("tests")
        .join("control-plane")
        .join("cp");
    let log_path = dir.join("cluster-api-start.log");
    let log = fs::File::create(&log_path).map_err(io_err(&log_path))?;
    let mut child = Command::new("bash")
        .arg(&script)
        .arg("capi")
        .arg("--dir")
        .arg(dir)
        .arg("--watch-stdin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(|e| Error::Start(format!("spawn {} capi: {e}", script.display())))?;
    let stdin = child.stdin.take();
    let ready = child.stdout.take().and_then(|out| {
        BufReader::new(out)
            .lines()
            .map_while(std::result::Result::ok)
            .find(|line| line.starts_with("ready "))
    });
    if ready.is_none() {
        let _ = child.kill();
        let status = child.wait();
        return Err(Error::Start(format!(
            "Cluster API did not start ({status:?}); {}:\n{}",
            log_path.display(),
            tail(&log_path, 40)
        )));
    }
    Ok(Supervisor { child, stdin })
}

async fn load_config(kubeconfig: &Path) -> Result<Config> {
    let kc = Kubeconfig::read_from(kubeconfig)?;
    Ok(Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?)
}

fn parse_kv(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}
