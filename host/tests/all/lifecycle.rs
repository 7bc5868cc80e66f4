//! The NodeClaim lifecycle, garbage collection and status controllers against the real control
//! plane, with the kwok (and chaos) providers, driven by the `capstan run` binary.
//!
//! Every test runs its own host with `--selector capstan.dev/test-run=<unique>` and labels its
//! NodeClaims, NodePools and NodeClasses with it, so hosts of concurrent tests never touch each
//! other's objects.

mod disruption_budget;
mod drain;
mod errors;
mod flow;
mod gc;
mod hostile_answers;
mod liveness;
mod offerings;
mod restart;
mod status;
mod upstream;
mod upstream_examples;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use capstan::api::{NodeClaim, NodeClass, NodePool};
use capstan_test_support::{ControlPlane, repo_root, unique_name, wait_until};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::OnceCell;

use crate::conformance::KWOK_GRANTS;
use crate::fixtures::providers_dir;

/// The test-isolation label.
pub const RUN_LABEL: &str = "capstan.dev/test-run";

/// The shared control plane with Capstan's CRDs installed.
pub async fn cluster() -> (&'static ControlPlane, Client) {
    static CRDS: OnceCell<()> = OnceCell::const_new();
    let cp = ControlPlane::shared().await.expect("control plane");
    CRDS.get_or_init(|| async {
        cp.install_crds_from_dir(&repo_root().join("crds"))
            .await
            .expect("install CRDs");
    })
    .await;
    (cp, cp.client().expect("client"))
}

/// One test's names.
#[derive(Debug, Clone)]
pub struct Names {
    pub run: String,
}

impl Names {
    pub fn new(prefix: &str) -> Self {
        Self {
            run: unique_name(prefix),
        }
    }

    pub fn selector(&self) -> String {
        format!("{RUN_LABEL}={}", self.run)
    }

    /// A name unique to this test.
    pub fn name(&self, what: &str) -> String {
        format!("{}-{what}", self.run)
    }
}

/// A `capstan run` child process; killed on drop.
pub struct Host {
    child: std::sync::Mutex<Option<Child>>,
    log: PathBuf,
}

fn grants_file() -> PathBuf {
    write_once("kwok-grants.yaml", KWOK_GRANTS)
}

/// Writes `contents` to `name` in the tests' temporary directory without a moment where another
/// reader (a host starting in a concurrent test or test process) could see it half written: a
/// unique file renamed over it. A truncating write there once gave a host empty grants.
pub fn write_once(name: &str, contents: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join(name);
    let staged = dir.join(format!("{name}.{}", unique_name("staged")));
    std::fs::write(&staged, contents).unwrap();
    std::fs::rename(&staged, &path).unwrap();
    path
}

impl Host {
    /// Starts `capstan run` with kwok and chaos against `cp`, managing `names`' objects.
    pub fn start(cp: &ControlPlane, names: &Names, extra: &[&str]) -> Self {
        Self::start_with_kwok(cp, names, extra, &providers_dir().join("kwok.wasm"))
    }

    /// [`Host::start`] with `kwok` (a file) as the `kwok` provider: the same scenario runs on
    /// the kwok provider built in each language.
    pub fn start_with_kwok(cp: &ControlPlane, names: &Names, extra: &[&str], kwok: &Path) -> Self {
        let providers = providers_dir();
        let log = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "{}-{}.log",
            names.run,
            unique_name("host")
        ));
        let file = std::fs::File::create(&log).unwrap();
        // `CAPSTAN_HOST_BIN` runs another build of the host (the measurements compare versions).
        let bin = std::env::var_os("CAPSTAN_HOST_BIN").map_or_else(
            || PathBuf::from(env!("CARGO_BIN_EXE_capstan")),
            PathBuf::from,
        );
        let mut cmd = Command::new(bin);
        cmd.args(["--log-level", "info,capstan=debug", "run"])
            .arg("--provider")
            .arg(format!("kwok={}", kwok.display()))
            .arg("--provider")
            .arg(format!("chaos={}", providers.join("chaos.wasm").display()))
            .arg("--grants")
            .arg(format!("kwok={}", grants_file().display()))
            .arg("--kubeconfig")
            .arg(cp.kubeconfig_path())
            .arg("--selector")
            .arg(names.selector())
            .arg("--cache-dir")
            .arg(Path::new(env!("CARGO_TARGET_TMPDIR")).join("components"))
            // Free ports: hosts of concurrent tests must not fight over 8080/8081 (`extra` may
            // name others; the last one wins).
            .args(["--metrics-bind-address", "127.0.0.1:0"])
            .args(["--health-probe-bind-address", "127.0.0.1:0"])
            // Leader election is on by default; hosts of concurrent tests share one API server
            // and manage disjoint objects (`--selector`), so none waits for another's Lease.
            .arg("--disable-leader-election")
            .args(extra)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file);
        let child = cmd.spawn().expect("spawn capstan run");
        Self {
            child: std::sync::Mutex::new(Some(child)),
            log,
        }
    }

    /// The process id, while it runs (the measurements read its CPU time and memory in `/proc`).
    pub fn pid(&self) -> Option<u32> {
        self.child.lock().unwrap().as_ref().map(Child::id)
    }

    /// Kills the host (SIGKILL) and waits for it.
    pub fn kill(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The end of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// The whole log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Panics with the log if the host exited.
    pub fn check_alive(&self) {
        let exited = match self.child.lock().unwrap().as_mut() {
            Some(child) => child.try_wait().ok().flatten(),
            None => None,
        };
        if let Some(status) = exited {
            panic!("capstan run exited with {status}:\n{}", self.log_tail());
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Creates a NodeClass for `provider` with `parameters`.
pub async fn node_class(
    client: &Client,
    names: &Names,
    name: &str,
    provider: &str,
    parameters: serde_json::Value,
) {
    let class: NodeClass = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1",
        "kind": "NodeClass",
        "metadata": {"name": name, "labels": {RUN_LABEL: names.run}},
        "spec": {"provider": provider, "parameters": parameters},
    }))
    .unwrap();
    Api::<NodeClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
}

/// A NodePool JSON using NodeClass `class`.
pub fn node_pool_json(names: &Names, name: &str, class: &str) -> serde_json::Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name, "labels": {RUN_LABEL: names.run}},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": class},
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
        }},
        // Consolidation would remove nodes these tests count; its own tests turn it on.
        "disruption": {"consolidateAfter": "Never"}},
    })
}

/// Creates a NodePool.
pub async fn node_pool(client: &Client, pool: serde_json::Value) {
    let pool: NodePool = serde_json::from_value(pool).unwrap();
    Api::<NodePool>::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await
        .unwrap();
}

/// A NodeClaim JSON of pool `pool` using NodeClass `class`.
pub fn claim_json(names: &Names, name: &str, pool: &str, class: &str) -> serde_json::Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {RUN_LABEL: names.run, "karpenter.sh/nodepool": pool}},
        "spec": {
            "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": class},
            "requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            ],
            "resources": {"requests": {"cpu": "100m", "pods": "1"}},
        },
    })
}

/// Creates a NodeClaim.
pub async fn claim(client: &Client, claim: serde_json::Value) -> NodeClaim {
    let claim: NodeClaim = serde_json::from_value(claim).unwrap();
    Api::<NodeClaim>::all(client.clone())
        .create(&PostParams::default(), &claim)
        .await
        .unwrap()
}

/// The condition `type_` of claim `name`: (status, reason).
pub fn condition(claim: &NodeClaim, type_: &str) -> Option<(String, String)> {
    claim
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| {
            (
                format!("{:?}", c.status),
                c.reason.clone().unwrap_or_default(),
            )
        })
}

/// Waits until claim `name`'s condition `type_` has `status` (`True`, `Unknown`, ...) and, if
/// given, `reason`.
pub async fn wait_condition(
    client: &Client,
    host: &Host,
    name: &str,
    type_: &str,
    status: &str,
    reason: Option<&str>,
    timeout: Duration,
) -> NodeClaim {
    let api = Api::<NodeClaim>::all(client.clone());
    let result = wait_until(
        timeout,
        &format!("{name} {type_}={status} {reason:?}"),
        || async {
            host.check_alive();
            let claim = api.get(name).await?;
            let ok = condition(&claim, type_)
                .is_some_and(|(s, r)| s == status && reason.is_none_or(|want| want == r));
            Ok::<_, kube::Error>(ok.then_some(claim))
        },
    )
    .await;
    match result {
        Ok(claim) => claim,
        Err(err) => {
            let now = api.get_opt(name).await.ok().flatten();
            panic!(
                "{err}\nclaim now: {:#?}\nhost log:\n{}",
                now.and_then(|c| c.status),
                host.log_tail()
            )
        }
    }
}

/// `Ready` of NodeClass `name`: `(status, reason, message)`.
pub async fn class_ready(client: &Client, name: &str) -> Option<(String, String, String)> {
    let class = Api::<NodeClass>::all(client.clone()).get(name).await.ok()?;
    class
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| {
            (
                format!("{:?}", c.status),
                c.reason.unwrap_or_default(),
                c.message.unwrap_or_default(),
            )
        })
}

/// Waits until claim `name` is gone.
pub async fn wait_claim_gone(client: &Client, host: &Host, name: &str, timeout: Duration) {
    let api = Api::<NodeClaim>::all(client.clone());
    if let Err(err) = wait_until(timeout, &format!("NodeClaim {name} gone"), || async {
        Ok::<_, kube::Error>(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
    {
        panic!("{err}\nhost log:\n{}", host.log_tail());
    }
}

/// Events (events.k8s.io) about `name` in `namespace` with `reason`.
pub async fn events(client: &Client, namespace: &str, name: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .collect()
}

/// The notes of the Events Capstan (not another controller) recorded about `name` for `reason`.
pub async fn capstan_notes(
    client: &Client,
    namespace: &str,
    name: &str,
    reason: &str,
) -> Vec<String> {
    events(client, namespace, name, reason)
        .await
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("capstan"))
        .filter_map(|e| e.note)
        .collect()
}

/// Waits for an Event.
pub async fn wait_event(client: &Client, namespace: &str, name: &str, reason: &str) -> Event {
    wait_until(
        Duration::from_secs(30),
        &format!("event {reason} about {name}"),
        || async {
            Ok::<_, kube::Error>(
                events(client, namespace, name, reason)
                    .await
                    .into_iter()
                    .next(),
            )
        },
    )
    .await
    .unwrap()
}

/// Nodes whose provider ID is `id`.
pub async fn nodes_with_provider_id(client: &Client, id: &str) -> Vec<Node> {
    Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(id))
        .collect()
}

/// Deletes cluster-scoped leftovers of a test (best effort).
pub async fn cleanup(client: &Client, names: &Names) {
    let lp = ListParams::default().labels(&names.selector());
    let claims = Api::<NodeClaim>::all(client.clone());
    for c in claims.list(&lp).await.map(|l| l.items).unwrap_or_default() {
        let _ = claims.delete(&c.name_any(), &DeleteParams::default()).await;
    }
    let pools = Api::<NodePool>::all(client.clone());
    for p in pools.list(&lp).await.map(|l| l.items).unwrap_or_default() {
        let _ = pools.delete(&p.name_any(), &DeleteParams::default()).await;
    }
    let classes = Api::<NodeClass>::all(client.clone());
    for c in classes.list(&lp).await.map(|l| l.items).unwrap_or_default() {
        let _ = classes
            .delete(&c.name_any(), &DeleteParams::default())
            .await;
    }
}
