//! The two systems under test and how each is started on a control plane of its own: Capstan's
//! host with the kwok provider, or Karpenter's own kwok controller built from the pinned module.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use capstan_test_support::{ControlPlane, Options, repo_root, wait_until};
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use super::catalog::Catalog;
use super::evaluations::Evaluations;
use super::usage::{Usage, load_average, usage};
use crate::leader_election::address_in;
use crate::lifecycle::{Host, Names, RUN_LABEL};

/// The NodePool both systems get is named so.
pub const POOL: &str = "default";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    Capstan,
    Karpenter,
}

impl System {
    pub fn label(self) -> &'static str {
        match self {
            System::Capstan => "Capstan",
            System::Karpenter => "Karpenter",
        }
    }
}

/// Karpenter's kwok binary and the module it came from.
pub struct Upstream {
    bin: PathBuf,
    module_dir: PathBuf,
    pub version: String,
}

impl Upstream {
    /// Builds (or finds cached) the binary with `tests/bench-e2e/karpenter-kwok.sh`.
    pub fn build() -> Result<Self> {
        let script = repo_root().join("tests/bench-e2e/karpenter-kwok.sh");
        let out = Command::new("bash")
            .arg(&script)
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("running {}", script.display()))?;
        if !out.status.success() {
            bail!("{} failed ({})", script.display(), out.status);
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let (Some(bin), Some(module_dir)) = (lines.next(), lines.next()) else {
            bail!("{} printed {text:?}", script.display());
        };
        let module_dir = PathBuf::from(module_dir.trim());
        let version = module_dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split_once('@'))
            .map_or_else(|| "?".to_string(), |(_, v)| v.to_string());
        Ok(Self {
            bin: PathBuf::from(bin.trim()),
            module_dir,
            version,
        })
    }

    pub fn catalog_path(&self) -> PathBuf {
        self.module_dir
            .join("kwok/cloudprovider/instance_types.json")
    }

    /// Karpenter's CRDs: NodePool, NodeClaim, NodeOverlay, CapacityBuffer and KWOKNodeClass.
    pub fn crds(&self) -> Result<Vec<PathBuf>> {
        let dir = self.module_dir.join("pkg/apis/crds");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        files.push(
            self.module_dir
                .join("kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml"),
        );
        Ok(files)
    }
}

/// A loopback port nobody listens on now.
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `GET http://<address><path>` over HTTP/1.0 (no chunked answer): the status line and the
/// body, or `None` when nobody answers.
fn http_get(address: &str, path: &str) -> Option<(String, String)> {
    let mut stream = TcpStream::connect(address).ok()?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).ok()?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_owned(), body.to_owned()))
}

/// Whether `GET http://127.0.0.1:<port><path>` answers 200.
fn http_ok(port: u16, path: &str) -> bool {
    http_get(&format!("127.0.0.1:{port}"), path).is_some_and(|(status, _)| status.contains(" 200"))
}

/// Upstream Karpenter's kwok controller, run out of cluster as its own e2e setup does in cluster:
/// no leader election, metrics and health on free ports, logs to a file.
pub struct Karpenter {
    child: Mutex<Option<Child>>,
    log: PathBuf,
    metrics_port: u16,
}

impl Karpenter {
    /// Starts it with `settings` (environment variables, e.g. `IGNORE_DRA_REQUESTS`) on top of
    /// the harness's.
    pub fn start(
        bin: &Path,
        cp: &ControlPlane,
        health_port: u16,
        settings: &[(&str, &str)],
    ) -> Result<Self> {
        let log = cp.dir().join("logs/karpenter.log");
        let file = std::fs::File::create(&log)?;
        let metrics_port = free_port()?;
        let child = Command::new(bin)
            .envs(settings.iter().copied())
            .env("KUBECONFIG", cp.kubeconfig_path())
            .env("DISABLE_LEADER_ELECTION", "true")
            .env("METRICS_PORT", metrics_port.to_string())
            .env("HEALTH_PROBE_PORT", health_port.to_string())
            .env("LOG_LEVEL", "info")
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Self {
            child: Mutex::new(Some(child)),
            log,
            metrics_port,
        })
    }
}

/// The autoprovisioner under test.
pub enum Controller {
    Capstan(Host),
    Karpenter(Karpenter),
}

impl Controller {
    pub fn pid(&self) -> Option<u32> {
        match self {
            Controller::Capstan(host) => host.pid(),
            Controller::Karpenter(k) => k.child.lock().unwrap().as_ref().map(Child::id),
        }
    }

    pub fn usage(&self) -> Usage {
        self.pid().and_then(usage).unwrap_or_default()
    }

    /// What its `/metrics` says about its disruption decisions' durations (nothing when it
    /// cannot be read).
    pub fn evaluations(&self) -> Evaluations {
        let address = match self {
            Controller::Capstan(host) => address_in(&host.log(), "serving /metrics"),
            Controller::Karpenter(k) => Some(format!("127.0.0.1:{}", k.metrics_port)),
        };
        address
            .and_then(|a| http_get(&a, "/metrics"))
            .map(|(_, body)| Evaluations::read(&body))
            .unwrap_or_default()
    }

    /// An error with the end of the log if the process exited.
    pub fn check_alive(&self) -> Result<()> {
        match self {
            Controller::Capstan(host) => {
                // `check_alive` panics with the log; turn that into an error here.
                let exited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    host.check_alive();
                }));
                if exited.is_err() {
                    bail!("capstan run exited:\n{}", host.log_tail());
                }
            }
            Controller::Karpenter(k) => {
                let status = k
                    .child
                    .lock()
                    .unwrap()
                    .as_mut()
                    .and_then(|c| c.try_wait().ok().flatten());
                if let Some(status) = status {
                    bail!("karpenter exited with {status}:\n{}", self.log_tail());
                }
            }
        }
        Ok(())
    }

    pub fn log_tail(&self) -> String {
        match self {
            Controller::Capstan(host) => host.log_tail(),
            Controller::Karpenter(k) => {
                let text = std::fs::read_to_string(&k.log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                lines[lines.len().saturating_sub(40)..].join("\n")
            }
        }
    }

    pub fn stop(&self) {
        match self {
            Controller::Capstan(host) => host.kill(),
            Controller::Karpenter(k) => {
                if let Some(mut child) = k.child.lock().unwrap().take() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
    }
}

/// Applies `objects` (JSON manifests) to namespace `default`.
pub async fn apply(cp: &ControlPlane, objects: Vec<Value>) -> Result<()> {
    let objects = objects
        .into_iter()
        .map(serde_json::from_value::<DynamicObject>)
        .collect::<Result<Vec<_>, _>>()?;
    cp.apply_objects("default", objects).await?;
    Ok(())
}

/// Waits until NodePool `default` reports `Ready=True`.
pub async fn wait_pool_ready(client: &Client, controller: &Controller) -> Result<()> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool"));
    let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
    let ready = wait_until(Duration::from_secs(120), "NodePool Ready", || async {
        controller.check_alive().map_err(|e| e.to_string())?;
        let pool = api.get(POOL).await.map_err(|e| e.to_string())?;
        let ready = pool.data["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        Ok::<_, String>(ready.then_some(()))
    })
    .await;
    ready.map_err(|e| anyhow::anyhow!("{e}\n{}", controller.log_tail()))
}

/// The system's controller, started, and how long it took to answer `/readyz`.
pub struct Started {
    pub controller: Controller,
    pub ready: Duration,
    /// An admin client of the control plane, and the run's names (`run` labels its objects).
    pub client: Client,
    pub names: Names,
}

/// Karpenter's module and its kwok catalog: what a run beside Karpenter needs (Karpenter's
/// binary and CRDs; the catalog as Capstan's instance types).
pub type Beside<'a> = (&'a Upstream, &'a Catalog);

/// Starts the system's controller on `cp` with its node class (for Capstan, the catalog's types
/// when `beside` is given, else the kwok provider's own) and the pool `node_pool` makes of the
/// class reference and labels; returns it once `/readyz` answers and the pool is Ready.
pub async fn start_controller(
    system: System,
    cp: &ControlPlane,
    run: &str,
    beside: Option<Beside<'_>>,
    node_pool: &dyn Fn(Value, Value) -> Value,
) -> Result<Started> {
    start_controller_with(system, cp, run, beside, node_pool, &[]).await
}

/// [`start_controller`] with Karpenter's `settings` (environment variables) on top of the
/// harness's; Capstan's defaults are the settings the benchmarks compare against.
pub async fn start_controller_with(
    system: System,
    cp: &ControlPlane,
    run: &str,
    beside: Option<Beside<'_>>,
    node_pool: &dyn Fn(Value, Value) -> Value,
    karpenter_settings: &[(&str, &str)],
) -> Result<Started> {
    let client = cp.client()?;
    let names = Names::new(run);
    let (upstream, catalog) = (beside.map(|b| b.0), beside.map(|b| b.1));
    let health = free_port()?;
    if system == System::Capstan {
        // Build the wasm providers first (`Host::start` would): the build is the harness's time.
        crate::fixtures::providers_dir();
    }
    let started = Instant::now();
    let controller = match system {
        System::Capstan => {
            cp.install_crds_from_dir(&repo_root().join("crds")).await?;
            let bind = format!("127.0.0.1:{health}");
            // The same log level as Karpenter's (the tests' hosts log at debug).
            let args = ["--log-level", "info", "--health-probe-bind-address", &bind];
            Controller::Capstan(Host::start(cp, &names, &args))
        }
        System::Karpenter => {
            let upstream = upstream.context("Karpenter needs its module")?;
            cp.install_crds_from_files(&upstream.crds()?).await?;
            Controller::Karpenter(Karpenter::start(
                &upstream.bin,
                cp,
                health,
                karpenter_settings,
            )?)
        }
    };
    loop {
        controller.check_alive()?;
        if http_ok(health, "/readyz") {
            break;
        }
        if started.elapsed() > Duration::from_secs(180) {
            bail!(
                "{} not ready after 180 s:\n{}",
                system.label(),
                controller.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ready = started.elapsed();
    let labels = json!({RUN_LABEL: names.run});
    match system {
        System::Capstan => {
            // Karpenter's catalog when given, else the kwok provider's own.
            let parameters = catalog.map_or_else(
                || json!({}),
                |c| json!({"instanceTypes": c.capstan_instance_types()}),
            );
            let class = json!({
                "apiVersion": "capstan.dev/v1alpha1", "kind": "NodeClass",
                "metadata": {"name": "default", "labels": labels},
                "spec": {"provider": "kwok", "parameters": parameters},
            });
            let pool = node_pool(
                json!({"group": "capstan.dev", "kind": "NodeClass", "name": "default"}),
                labels,
            );
            apply(cp, vec![class, pool]).await?;
        }
        System::Karpenter => {
            let class = json!({
                "apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
                "metadata": {"name": "default"},
            });
            let pool = node_pool(
                json!({"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}),
                labels,
            );
            apply(cp, vec![class, pool]).await?;
        }
    }
    wait_pool_ready(&client, &controller).await?;
    Ok(Started {
        controller,
        ready,
        client,
        names,
    })
}

/// A run's name in the output: `Capstan`, or `Karpenter` with its version.
pub fn run_label(system: System, upstream: &Upstream) -> String {
    match system {
        System::Capstan => "Capstan".to_string(),
        System::Karpenter => format!("Karpenter {}", upstream.version),
    }
}

/// How a run on a control plane of its own ended.
#[derive(Debug, Default)]
pub struct Finished {
    /// The controller's CPU seconds and peak RSS (`VmHWM`) at the end.
    pub total_cpu_seconds: f64,
    pub hwm_kib: u64,
    /// `/proc/loadavg` before and after: other work on the machine.
    pub load_start: String,
    pub load_end: String,
    /// Why the run stopped early, with the end of the controller's log.
    pub error: Option<String>,
}

/// Runs `scenario` on a fresh control plane started with `options`: the scenario puts the
/// controller it starts in the slot it is given; afterwards the controller's CPU seconds and peak
/// RSS are read, and the controller and the control plane are stopped.
pub async fn on_own_control_plane(
    label: &str,
    options: Options,
    scenario: impl AsyncFnOnce(&ControlPlane, &mut Option<Controller>) -> Result<()>,
) -> Finished {
    let mut finished = Finished {
        load_start: load_average(),
        ..Finished::default()
    };
    let cp = match ControlPlane::start(options).await {
        Ok(cp) => cp,
        Err(e) => {
            finished.error = Some(format!("control plane: {e}"));
            return finished;
        }
    };
    println!("== {label}: control plane in {}", cp.dir().display());
    let mut slot = None;
    if let Err(e) = scenario(&cp, &mut slot).await {
        let tail = slot.as_ref().map(Controller::log_tail).unwrap_or_default();
        finished.error = Some(format!("{e:#}\n{tail}"));
    }
    if let Some(c) = &slot {
        let u: Usage = c.usage();
        finished.total_cpu_seconds = u.cpu_seconds;
        finished.hwm_kib = u.hwm_kib;
        c.stop();
    }
    let _ = cp.stop();
    finished.load_end = load_average();
    finished
}

/// The lines under a table: each run's load average, and why a run failed.
pub fn footer<'a>(runs: impl Iterator<Item = (&'a str, &'a Finished)> + Clone) -> String {
    let mut out = String::new();
    for (label, f) in runs.clone() {
        out.push_str(&format!(
            "{label}: load average {} at the start, {} at the end\n",
            f.load_start, f.load_end
        ));
    }
    for (label, f) in runs {
        if let Some(e) = &f.error {
            out.push_str(&format!("\n{label} FAILED: {e}\n"));
        }
    }
    out
}

/// Karpenter's kwok controller and catalog for a benchmark of `systems` (warning when Capstan's
/// host is the debug build: the make targets set a release one).
pub fn prepare(systems: &[System]) -> (Upstream, Catalog) {
    if std::env::var_os("CAPSTAN_HOST_BIN").is_none() && systems.contains(&System::Capstan) {
        eprintln!(
            "warning: CAPSTAN_HOST_BIN is not set: measuring the debug build of the host \
             (the make targets build and set a release one)"
        );
    }
    let upstream = Upstream::build().expect("Karpenter's kwok controller");
    let catalog = Catalog::load(&upstream.catalog_path()).expect("Karpenter's kwok catalog");
    (upstream, catalog)
}

/// Prints the table of benchmark `name` under `scenario`, writes it to
/// `$CARGO_TARGET_TMPDIR/<name>.txt`, and fails if a run did.
pub fn report<'a>(
    name: &str,
    scenario: &str,
    table: &str,
    runs: impl IntoIterator<Item = &'a Finished>,
) {
    println!(
        "\n== {name}: {scenario}; {} cores\n\n{table}",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.txt"));
    let _ = std::fs::write(&out, table);
    println!("(also in {})", out.display());
    assert!(
        runs.into_iter().all(|f| f.error.is_none()),
        "a system failed; see above"
    );
}
