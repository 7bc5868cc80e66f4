//! `make bench-e2e`: Capstan beside upstream Karpenter's own kwok controller, end to end, on the
//! same scenario, each on a fresh control plane of its own, one after the other:
//!
//! 1. one NodePool (any instance type of the kwok catalog, Linux, on-demand and spot,
//!    `WhenEmptyOrUnderutilized`, `consolidateAfter: 0s`) and its node class;
//! 2. 1,000 pending pods in five Deployments of 200 (100m to 2 CPU, 1 GiB per CPU), until every
//!    pod runs;
//! 3. the Deployments scaled to 500 pods in all, then deleted.
//!
//! After each change it records the nodes and their price per hour (each Node's instance type,
//! capacity type and zone priced from Karpenter's kwok catalog) 60 s and 180 s later, how long
//! the pods took to settle, and the controller's CPU seconds (`/proc/<pid>/stat` utime + stime)
//! and peak RSS (`VmHWM`), then prints both systems side by side with the ratios.
//!
//! Capstan runs the kwok provider with a NodeClass whose `instanceTypes` are Karpenter's kwok
//! catalog (`kwok/cloudprovider/instance_types.json` of the module the Karpenter binary was built
//! from): Capstan's generated catalog has the same shapes but prices memory per GiB where
//! Karpenter prices it per GB, and has no Windows types. The binaries: `CAPSTAN_HOST_BIN` (the
//! Makefile target builds a release host; a debug build measures something else), and
//! `tests/bench-e2e/karpenter-kwok.sh` for Karpenter's. A measurement: ignored by `make test`.
//!
//! Knobs: `CAPSTAN_BENCH_E2E_SYSTEMS` (default `capstan,karpenter`), `CAPSTAN_BENCH_E2E_PODS`
//! (default 1000; the scale-down keeps half), `CAPSTAN_BENCH_E2E_SAMPLES` (default `60,180`),
//! `CAPSTAN_BENCH_E2E_TIMEOUT` (seconds a step may take to settle, default 900),
//! `KARPENTER_VERSION` and `KARPENTER_GO` (see the script).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use capstan_test_support::{ControlPlane, Options, repo_root, wait_until};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::lifecycle::{Host, Names, RUN_LABEL};

/// Pods per size class: cpu and memory (1 GiB per CPU).
const SIZES: [(&str, &str, &str); 5] = [
    ("xs", "100m", "100Mi"),
    ("s", "250m", "256Mi"),
    ("m", "500m", "512Mi"),
    ("l", "1", "1Gi"),
    ("xl", "2", "2Gi"),
];
/// Seconds after each change at which nodes and price are recorded (`CAPSTAN_BENCH_E2E_SAMPLES`
/// overrides them, e.g. `10,20` for a quick run).
const SAMPLES: [u64; 2] = [60, 180];

fn samples() -> Vec<u64> {
    std::env::var("CAPSTAN_BENCH_E2E_SAMPLES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .filter(|v: &Vec<u64>| !v.is_empty())
        .unwrap_or_else(|| SAMPLES.to_vec())
}
/// Client rate limits for kube-controller-manager and kube-scheduler: with their defaults (20
/// and 50 QPS) the ReplicaSet controller creates about 18 pods a second here and the harness,
/// not the autoprovisioner, would be the floor.
const CONTROL_PLANE_ARGS: [&str; 4] = ["--kube-api-qps", "500", "--kube-api-burst", "1000"];
const POOL: &str = "default";

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum System {
    Capstan,
    Karpenter,
}

impl System {
    fn label(self) -> &'static str {
        match self {
            System::Capstan => "Capstan",
            System::Karpenter => "Karpenter",
        }
    }
}

/// Karpenter's kwok binary and the module it came from.
struct Upstream {
    bin: PathBuf,
    module_dir: PathBuf,
    version: String,
}

impl Upstream {
    /// Builds (or finds cached) the binary with `tests/bench-e2e/karpenter-kwok.sh`.
    fn build() -> Result<Self> {
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

    fn catalog_path(&self) -> PathBuf {
        self.module_dir
            .join("kwok/cloudprovider/instance_types.json")
    }

    /// Karpenter's CRDs: NodePool, NodeClaim, NodeOverlay, CapacityBuffer and KWOKNodeClass.
    fn crds(&self) -> Result<Vec<PathBuf>> {
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

/// Karpenter's kwok catalog: the raw entries and the price of every offering.
struct Catalog {
    entries: Vec<Value>,
    /// (instance type, capacity type, zone) -> $/h
    prices: HashMap<(String, String, String), f64>,
}

impl Catalog {
    fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let entries: Vec<Value> = serde_json::from_str(&text)?;
        let mut prices = HashMap::new();
        for e in &entries {
            let name = e["name"].as_str().unwrap_or_default();
            for o in e["offerings"].as_array().into_iter().flatten() {
                let (ct, zone) = offering_keys(o);
                prices.insert(
                    (name.to_string(), ct, zone),
                    o["Price"].as_f64().unwrap_or_default(),
                );
            }
        }
        Ok(Self { entries, prices })
    }

    /// The catalog as the kwok provider's NodeClass `instanceTypes` (family and size as
    /// Karpenter's kwok provider derives them from the name and the CPU count).
    fn capstan_instance_types(&self) -> Value {
        let types: Vec<Value> = self
            .entries
            .iter()
            .map(|e| {
                let name = e["name"].as_str().unwrap_or_default();
                let family = name.split(['.', '-']).next().unwrap_or(name);
                let offerings: Vec<Value> = e["offerings"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|o| {
                        let (ct, zone) = offering_keys(o);
                        json!({"zone": zone, "capacityType": ct,
                               "price": o["Price"], "available": true})
                    })
                    .collect();
                json!({
                    "name": name,
                    "architecture": e["architecture"],
                    "operatingSystems": e["operatingSystems"],
                    "resources": e["resources"],
                    "offerings": offerings,
                    "family": family,
                    "size": e["resources"]["cpu"],
                })
            })
            .collect();
        Value::Array(types)
    }

    fn price(&self, node: &Node) -> Option<f64> {
        let labels = node.labels();
        let key = (
            labels.get("node.kubernetes.io/instance-type")?.clone(),
            labels.get("karpenter.sh/capacity-type")?.clone(),
            labels.get("topology.kubernetes.io/zone")?.clone(),
        );
        self.prices.get(&key).copied()
    }
}

fn offering_keys(offering: &Value) -> (String, String) {
    let mut ct = String::new();
    let mut zone = String::new();
    for r in offering["Requirements"].as_array().into_iter().flatten() {
        let value = r["values"][0].as_str().unwrap_or_default().to_string();
        match r["key"].as_str() {
            Some("karpenter.sh/capacity-type") => ct = value,
            Some("topology.kubernetes.io/zone") => zone = value,
            _ => {}
        }
    }
    (ct, zone)
}

/// CPU seconds (utime + stime) and memory of a live process, from `/proc`.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    cpu_seconds: f64,
    hwm_kib: u64,
    rss_kib: u64,
}

fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

fn usage(pid: u32) -> Option<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Some(Usage {
        cpu_seconds: (utime + stime) / clock_ticks(),
        hwm_kib: kib("VmHWM:"),
        rss_kib: kib("VmRSS:"),
    })
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Whether `GET http://127.0.0.1:<port><path>` answers 200.
fn http_ok(port: u16, path: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 16];
    let n = stream.read(&mut head).unwrap_or(0);
    String::from_utf8_lossy(&head[..n]).contains(" 200")
}

/// Upstream Karpenter's kwok controller, run out of cluster as its own e2e setup does in cluster:
/// no leader election, metrics and health on free ports, logs to a file.
struct Karpenter {
    child: Mutex<Option<Child>>,
    log: PathBuf,
}

impl Karpenter {
    fn start(bin: &Path, cp: &ControlPlane, health_port: u16) -> Result<Self> {
        let log = cp.dir().join("logs/karpenter.log");
        let file = std::fs::File::create(&log)?;
        let child = Command::new(bin)
            .env("KUBECONFIG", cp.kubeconfig_path())
            .env("DISABLE_LEADER_ELECTION", "true")
            .env("METRICS_PORT", free_port()?.to_string())
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
        })
    }
}

/// The autoprovisioner under test.
enum Controller {
    Capstan(Host),
    Karpenter(Karpenter),
}

impl Controller {
    fn pid(&self) -> Option<u32> {
        match self {
            Controller::Capstan(host) => host.pid(),
            Controller::Karpenter(k) => k.child.lock().unwrap().as_ref().map(Child::id),
        }
    }

    fn usage(&self) -> Usage {
        self.pid().and_then(usage).unwrap_or_default()
    }

    /// An error with the end of the log if the process exited.
    fn check_alive(&self) -> Result<()> {
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

    fn log_tail(&self) -> String {
        match self {
            Controller::Capstan(host) => host.log_tail(),
            Controller::Karpenter(k) => {
                let text = std::fs::read_to_string(&k.log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                lines[lines.len().saturating_sub(40)..].join("\n")
            }
        }
    }

    fn stop(&self) {
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

/// Nodes and price at one moment.
#[derive(Clone, Debug, Default)]
struct Sample {
    after: u64,
    running: usize,
    pods: usize,
    nodes: usize,
    price: f64,
    /// Nodes whose offering is not in the catalog.
    unpriced: usize,
    /// "instance type capacity type" -> count.
    mix: BTreeMap<String, usize>,
}

/// One step of the scenario.
#[derive(Clone, Debug, Default)]
struct Step {
    name: String,
    /// Until the pods settled: all Running, or all gone.
    settled: Option<Duration>,
    samples: Vec<Sample>,
    most_nodes: usize,
    cpu_seconds: f64,
    /// VmHWM at the end of the step.
    hwm_kib: u64,
    rss_kib: u64,
}

/// One system's run.
#[derive(Debug, Default)]
struct Run {
    label: String,
    /// Until the controller answered `/readyz`.
    ready: Option<Duration>,
    startup_cpu_seconds: f64,
    steps: Vec<Step>,
    total_cpu_seconds: f64,
    hwm_kib: u64,
    /// `/proc/loadavg` (1, 5, 15 minutes) before and after: other work on the machine.
    load_start: String,
    load_end: String,
    error: Option<String>,
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Watches (reflector stores) of the pods of the namespace and of the nodes.
struct Watch {
    pods: reflector::Store<Pod>,
    nodes: reflector::Store<Node>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Watch {
    async fn start(client: &Client, ns: &str) -> Result<Self> {
        let (pods, pods_writer) = reflector::store();
        let (nodes, nodes_writer) = reflector::store();
        let pod_stream = reflector(
            pods_writer,
            watcher(
                Api::<Pod>::namespaced(client.clone(), ns),
                watcher::Config::default(),
            ),
        )
        .default_backoff()
        .applied_objects();
        let node_stream = reflector(
            nodes_writer,
            watcher(Api::<Node>::all(client.clone()), watcher::Config::default()),
        )
        .default_backoff()
        .applied_objects();
        let tasks = vec![
            tokio::spawn(pod_stream.for_each(|_| async {})),
            tokio::spawn(node_stream.for_each(|_| async {})),
        ];
        pods.wait_until_ready().await?;
        nodes.wait_until_ready().await?;
        Ok(Self { pods, nodes, tasks })
    }

    /// (Running and not deleting, all pods).
    fn pods(&self) -> (usize, usize) {
        let all = self.pods.state();
        let running = all
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
            .count();
        (running, all.len())
    }

    fn sample(&self, after: u64, catalog: &Catalog) -> Sample {
        let (running, pods) = self.pods();
        let mut s = Sample {
            after,
            running,
            pods,
            ..Sample::default()
        };
        for node in self.nodes.state() {
            s.nodes += 1;
            match catalog.price(&node) {
                Some(p) => s.price += p,
                None => s.unpriced += 1,
            }
            let labels = node.labels();
            let key = format!(
                "{} {}",
                labels
                    .get("node.kubernetes.io/instance-type")
                    .map_or("?", String::as_str),
                labels
                    .get("karpenter.sh/capacity-type")
                    .map_or("?", String::as_str)
            );
            *s.mix.entry(key).or_default() += 1;
        }
        s
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Watches a step: samples at [`SAMPLES`], until the pods settle (`running` Running and no
/// other pod) and the last sample is taken, or `timeout`.
async fn observe(
    name: &str,
    want_running: usize,
    watch: &Watch,
    controller: &Controller,
    catalog: &Catalog,
    timeout: Duration,
) -> Result<Step> {
    let started = Instant::now();
    let before = controller.usage();
    let mut step = Step {
        name: name.to_string(),
        ..Step::default()
    };
    let mut pending = samples();
    loop {
        controller.check_alive()?;
        let elapsed = started.elapsed();
        let (running, all) = watch.pods();
        if step.settled.is_none() && running == want_running && all == want_running {
            step.settled = Some(elapsed);
        }
        step.most_nodes = step.most_nodes.max(watch.nodes.state().len());
        if let Some(&at) = pending.first()
            && elapsed >= Duration::from_secs(at)
        {
            step.samples.push(watch.sample(at, catalog));
            pending.remove(0);
        }
        if pending.is_empty() && (step.settled.is_some() || elapsed >= timeout) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let after = controller.usage();
    step.cpu_seconds = after.cpu_seconds - before.cpu_seconds;
    step.hwm_kib = after.hwm_kib;
    step.rss_kib = after.rss_kib;
    Ok(step)
}

fn deployment(run: &str, name: &str, replicas: usize, cpu: &str, memory: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {RUN_LABEL: run}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, RUN_LABEL: run}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "app", "image": "fake",
                                    "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
                },
            },
        },
    }))
    .unwrap()
}

/// The NodePool both systems get; only the node class reference (and Capstan's selector label)
/// differ.
fn node_pool(node_class_ref: Value, labels: Value) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": POOL, "labels": labels},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": node_class_ref,
                "requirements": [
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In",
                     "values": ["on-demand", "spot"]},
                ],
            }},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized",
                           "consolidateAfter": "0s"},
        },
    })
}

async fn apply(cp: &ControlPlane, objects: Vec<Value>) -> Result<()> {
    let objects = objects
        .into_iter()
        .map(serde_json::from_value::<DynamicObject>)
        .collect::<Result<Vec<_>, _>>()?;
    cp.apply_objects("default", objects).await?;
    Ok(())
}

/// Waits until NodePool `default` reports `Ready=True`.
async fn wait_pool_ready(client: &Client, controller: &Controller) -> Result<()> {
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

/// Starts the system's controller on `cp` with its node class and pool; returns it once
/// `/readyz` answers and the pool is Ready.
async fn start_controller(
    system: System,
    cp: &ControlPlane,
    client: &Client,
    names: &Names,
    upstream: &Upstream,
    catalog: &Catalog,
    run: &mut Run,
) -> Result<Controller> {
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
            Controller::Capstan(Host::start(
                cp,
                names,
                // The same log level as Karpenter's (the tests' hosts log at debug).
                &["--log-level", "info", "--health-probe-bind-address", &bind],
            ))
        }
        System::Karpenter => {
            cp.install_crds_from_files(&upstream.crds()?).await?;
            Controller::Karpenter(Karpenter::start(&upstream.bin, cp, health)?)
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
    run.ready = Some(started.elapsed());
    let labels = json!({RUN_LABEL: names.run});
    match system {
        System::Capstan => {
            let class = json!({
                "apiVersion": "capstan.dev/v1alpha1", "kind": "NodeClass",
                "metadata": {"name": "default", "labels": labels},
                "spec": {"provider": "kwok",
                         "parameters": {"instanceTypes": catalog.capstan_instance_types()}},
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
    wait_pool_ready(client, &controller).await?;
    Ok(controller)
}

/// The scenario on one system, on a control plane of its own.
async fn run_system(
    system: System,
    upstream: &Upstream,
    catalog: &Catalog,
    pods: usize,
    timeout: Duration,
) -> Run {
    let mut run = Run {
        label: match system {
            System::Capstan => "Capstan".to_string(),
            System::Karpenter => format!("Karpenter {}", upstream.version),
        },
        load_start: load_average(),
        ..Run::default()
    };
    let options = Options {
        extra_args: CONTROL_PLANE_ARGS.iter().map(|s| s.to_string()).collect(),
        ..Options::default()
    };
    let cp = match ControlPlane::start(options).await {
        Ok(cp) => cp,
        Err(e) => {
            run.error = Some(format!("control plane: {e}"));
            return run;
        }
    };
    println!("== {}: control plane in {}", run.label, cp.dir().display());
    let mut controller = None;
    if let Err(e) = scenario(
        system,
        &cp,
        upstream,
        catalog,
        pods,
        timeout,
        &mut run,
        &mut controller,
    )
    .await
    {
        let tail = controller
            .as_ref()
            .map(Controller::log_tail)
            .unwrap_or_default();
        run.error = Some(format!("{e:#}\n{tail}"));
    }
    if let Some(c) = &controller {
        let u = c.usage();
        run.total_cpu_seconds = u.cpu_seconds;
        run.hwm_kib = u.hwm_kib;
        c.stop();
    }
    let _ = cp.stop();
    run.load_end = load_average();
    run
}

#[allow(clippy::too_many_arguments)]
async fn scenario(
    system: System,
    cp: &ControlPlane,
    upstream: &Upstream,
    catalog: &Catalog,
    pods: usize,
    timeout: Duration,
    run: &mut Run,
    slot: &mut Option<Controller>,
) -> Result<()> {
    let client = cp.client()?;
    let names = Names::new("bench");
    let controller =
        slot.insert(start_controller(system, cp, &client, &names, upstream, catalog, run).await?);
    run.startup_cpu_seconds = controller.usage().cpu_seconds;
    let ns = cp.create_namespace_unique("bench").await?;
    let watch = Watch::start(&client, &ns).await?;
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let per_size = pods / SIZES.len();
    let total = per_size * SIZES.len();

    println!("== {}: {total} pods", run.label);
    for (name, cpu, memory) in SIZES {
        deployments
            .create(
                &PostParams::default(),
                &deployment(&names.run, name, per_size, cpu, memory),
            )
            .await?;
    }
    let step = observe(
        &format!("{total} pods"),
        total,
        &watch,
        controller,
        catalog,
        timeout,
    )
    .await?;
    print_step(&step);
    run.steps.push(step);

    let half = per_size / 2;
    println!("== {}: scale to {} pods", run.label, half * SIZES.len());
    for (name, ..) in SIZES {
        deployments
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": half}})),
            )
            .await?;
    }
    let step = observe(
        &format!("scale to {}", half * SIZES.len()),
        half * SIZES.len(),
        &watch,
        controller,
        catalog,
        timeout,
    )
    .await?;
    print_step(&step);
    run.steps.push(step);

    println!("== {}: delete all", run.label);
    for (name, ..) in SIZES {
        deployments.delete(name, &DeleteParams::default()).await?;
    }
    let step = observe("delete all", 0, &watch, controller, catalog, timeout).await?;
    print_step(&step);
    run.steps.push(step);
    Ok(())
}

fn print_step(step: &Step) {
    let settled = step.settled.map_or_else(
        || "not settled".to_string(),
        |d| format!("settled in {d:.1?}"),
    );
    println!(
        "   {}: {settled}; CPU {:.1} s; VmHWM {} MiB",
        step.name,
        step.cpu_seconds,
        step.hwm_kib / 1024
    );
    for s in &step.samples {
        let mix: Vec<String> = s.mix.iter().map(|(k, n)| format!("{n}× {k}")).collect();
        println!(
            "   +{} s: {}/{} pods Running, {} nodes, ${:.3}/h{} [{}]",
            s.after,
            s.running,
            s.pods,
            s.nodes,
            s.price,
            if s.unpriced > 0 {
                format!(" ({} nodes not in the catalog)", s.unpriced)
            } else {
                String::new()
            },
            mix.join(", ")
        );
    }
}

/// One row of the table: a label and a number per run.
struct Row {
    label: String,
    values: Vec<Option<f64>>,
    /// Digits after the point.
    digits: usize,
}

fn table(runs: &[Run]) -> String {
    let mut rows: Vec<Row> = Vec::new();
    let mut row = |label: String, digits: usize, f: &dyn Fn(&Run) -> Option<f64>| {
        rows.push(Row {
            label,
            values: runs.iter().map(f).collect(),
            digits,
        });
    };
    row("controller start to /readyz (s)".into(), 1, &|r| {
        r.ready.map(|d| d.as_secs_f64())
    });
    row("controller CPU before the pods (s)".into(), 1, &|r| {
        r.ready.map(|_| r.startup_cpu_seconds)
    });
    let steps = runs.iter().map(|r| r.steps.len()).max().unwrap_or(0);
    for i in 0..steps {
        let name = runs
            .iter()
            .find_map(|r| r.steps.get(i).map(|s| s.name.clone()))
            .unwrap_or_default();
        let step = move |r: &Run| r.steps.get(i).cloned();
        row(format!("{name}: pods settled (s)"), 1, &|r| {
            step(r).and_then(|s| s.settled.map(|d| d.as_secs_f64()))
        });
        for (j, at) in samples().into_iter().enumerate() {
            row(format!("{name}: nodes at +{at} s"), 0, &|r| {
                step(r).and_then(|s| s.samples.get(j).map(|x| x.nodes as f64))
            });
            row(format!("{name}: $/h at +{at} s"), 3, &|r| {
                step(r).and_then(|s| s.samples.get(j).map(|x| x.price))
            });
        }
        row(format!("{name}: most nodes"), 0, &|r| {
            step(r).map(|s| s.most_nodes as f64)
        });
        row(format!("{name}: controller CPU (s)"), 1, &|r| {
            step(r).map(|s| s.cpu_seconds)
        });
        row(format!("{name}: controller RSS at end (MiB)"), 0, &|r| {
            step(r).map(|s| s.rss_kib as f64 / 1024.0)
        });
    }
    row("controller CPU, total (s)".into(), 1, &|r| {
        (!r.steps.is_empty()).then_some(r.total_cpu_seconds)
    });
    row("controller peak RSS, VmHWM (MiB)".into(), 0, &|r| {
        (r.hwm_kib > 0).then_some(r.hwm_kib as f64 / 1024.0)
    });

    let ratio = runs.len() == 2;
    let width = rows.iter().map(|r| r.label.len()).max().unwrap_or(0);
    let col = runs
        .iter()
        .map(|r| r.label.len())
        .max()
        .unwrap_or(0)
        .max(10);
    let mut out = String::new();
    let _ = write!(out, "{:width$}", "");
    for r in runs {
        let _ = write!(out, " | {:>col$}", r.label);
    }
    if ratio {
        let _ = write!(out, " | {:>9}", "ratio");
    }
    out.push('\n');
    let line = width + runs.len() * (col + 3) + if ratio { 12 } else { 0 };
    let _ = writeln!(out, "{}", "-".repeat(line));
    for r in &rows {
        let _ = write!(out, "{:width$}", r.label);
        for v in &r.values {
            let text = v.map_or_else(|| "—".to_string(), |v| format!("{v:.*}", r.digits));
            let _ = write!(out, " | {text:>col$}");
        }
        if ratio {
            let text = match (r.values[0], r.values[1]) {
                (Some(a), Some(b)) if b != 0.0 => format!("{:.2}", a / b),
                _ => "—".to_string(),
            };
            let _ = write!(out, " | {text:>9}");
        }
        out.push('\n');
    }
    if ratio {
        let _ = writeln!(out, "ratio: {} / {}", runs[0].label, runs[1].label);
    }
    for r in runs {
        let _ = writeln!(
            out,
            "{}: load average {} at the start, {} at the end",
            r.label, r.load_start, r.load_end
        );
    }
    for r in runs {
        if let Some(e) = &r.error {
            let _ = writeln!(out, "\n{} FAILED: {e}", r.label);
        }
    }
    out
}

#[tokio::test]
#[ignore = "a measurement: make bench-e2e"]
async fn bench_e2e_capstan_beside_karpenter() {
    let pods: usize = env_or("CAPSTAN_BENCH_E2E_PODS", 1000);
    let timeout = Duration::from_secs(env_or("CAPSTAN_BENCH_E2E_TIMEOUT", 900));
    let systems: Vec<System> = std::env::var("CAPSTAN_BENCH_E2E_SYSTEMS")
        .unwrap_or_else(|_| "capstan,karpenter".into())
        .split(',')
        .filter_map(|s| match s.trim() {
            "capstan" => Some(System::Capstan),
            "karpenter" => Some(System::Karpenter),
            "" => None,
            other => panic!("CAPSTAN_BENCH_E2E_SYSTEMS: unknown system {other:?}"),
        })
        .collect();
    if std::env::var_os("CAPSTAN_HOST_BIN").is_none() && systems.contains(&System::Capstan) {
        eprintln!(
            "warning: CAPSTAN_HOST_BIN is not set: measuring the debug build of the host \
             (make bench-e2e builds and sets a release one)"
        );
    }
    let upstream = Upstream::build().expect("Karpenter's kwok controller");
    let catalog = Catalog::load(&upstream.catalog_path()).expect("Karpenter's kwok catalog");
    let mut runs = Vec::new();
    for system in systems {
        runs.push(run_system(system, &upstream, &catalog, pods, timeout).await);
    }
    let table = table(&runs);
    println!(
        "\n== bench-e2e: {pods} pods, then {}, then none; {} cores\n\n{table}",
        pods / SIZES.len() / 2 * SIZES.len(),
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-e2e.txt");
    let _ = std::fs::write(&out, &table);
    println!("(also in {})", out.display());
    assert!(
        runs.iter().all(|r| r.error.is_none()),
        "a system failed; see above"
    );
}
