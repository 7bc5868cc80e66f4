//! Leader election between real `capstan run` processes on the real control plane: exactly one
//! replica runs the controllers, a `kill -9`ed leader is replaced within the lease duration, and a
//! SIGTERMed leader releases the Lease so the next replica takes over at its next poll, and a
//! leader that finds the Lease taken stops and exits non-zero.
//!
//! [`Replica`] is also the host the chart test runs with the chart's ServiceAccount.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use capstan::api::NodeClaim;
use capstan_test_support::{ControlPlane, unique_name, wait_until};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::fixtures::providers_dir;
use crate::lifecycle::{Names, cluster, node_class, node_pool, node_pool_json};
use crate::provisioner::{claims, namespace, teardown};
use crate::provisioner_e2e::Pods;

/// The lease duration of these tests (renew deadline 2.67 s, retry period 0.53 s).
pub const LEASE: Duration = Duration::from_secs(4);

/// A `capstan run --leader-elect` child process with the kwok provider; killed on drop.
pub struct Replica {
    /// Its identity (`POD_NAME`).
    pub identity: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Replica {
    /// Starts a replica named `identity` against `kubeconfig`, managing `names`' objects and
    /// electing on Lease `namespace/lease`. `env` is added to its environment.
    pub fn start(
        kubeconfig: &Path,
        names: &Names,
        identity: &str,
        namespace: &str,
        lease: &str,
        env: &[(&str, &str)],
    ) -> Self {
        Self::spawn(kubeconfig, names, identity, namespace, lease, env, true)
    }

    /// Like [`start`](Self::start); with `kwok_file` false the replica loads no provider from a
    /// file, only those of Provider resources.
    pub fn spawn(
        kubeconfig: &Path,
        names: &Names,
        identity: &str,
        namespace: &str,
        lease: &str,
        env: &[(&str, &str)],
        kwok_file: bool,
    ) -> Self {
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let log = tmp.join(format!("{}-{identity}.log", unique_name("replica")));
        let file = std::fs::File::create(&log).unwrap();
        let grants = tmp.join(format!("{}-kwok-grants.yaml", names.run));
        std::fs::write(&grants, crate::conformance::KWOK_GRANTS).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_capstan"));
        cmd.args([
            "--log-level",
            "info,capstan=debug",
            "--log-format",
            "text",
            "run",
        ]);
        if kwok_file {
            cmd.arg("--provider")
                .arg(format!(
                    "kwok={}",
                    providers_dir().join("kwok.wasm").display()
                ))
                .arg("--grants")
                .arg(format!("kwok={}", grants.display()));
        }
        cmd.arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--selector", &names.selector()])
            .arg("--cache-dir")
            .arg(tmp.join("components"))
            .args(["--batch-idle-duration", "500ms"])
            .args(["--metrics-bind-address", "127.0.0.1:0"])
            .args(["--health-probe-bind-address", "127.0.0.1:0"])
            .arg("--leader-elect")
            .args(["--leader-election-namespace", namespace])
            .args(["--leader-election-name", lease])
            .arg("--leader-election-lease-duration")
            .arg(format!("{}s", LEASE.as_secs()))
            .env_remove("RUST_LOG")
            .env("POD_NAME", identity)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file);
        Self {
            identity: identity.to_owned(),
            child: Some(cmd.spawn().expect("spawn capstan run")),
            log,
        }
    }

    /// Its whole log, without terminal colours.
    pub fn log(&self) -> String {
        let raw = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut text = String::with_capacity(raw.len());
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                // CSI: ESC [ parameters final-byte.
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            } else {
                text.push(c);
            }
        }
        text
    }

    /// The end of its log.
    pub fn log_tail(&self) -> String {
        let text = self.log();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "--- {} ---\n{}",
            self.identity,
            lines[lines.len().saturating_sub(40)..].join("\n")
        )
    }

    /// Waits until its log has a line containing `needle`.
    pub async fn wait_log(&self, needle: &str, timeout: Duration) {
        let result = wait_until(
            timeout,
            &format!("{}: log {needle:?}", self.identity),
            || {
                let found = self.log().contains(needle);
                async move { Ok::<_, kube::Error>(found.then_some(())) }
            },
        )
        .await;
        if let Err(err) = result {
            panic!("{err}\n{}", self.log_tail());
        }
    }

    /// The address of its `/healthz` and `/readyz` (from its log).
    pub fn probe_address(&self) -> Option<String> {
        address_in(&self.log(), "serving /healthz and /readyz")
    }

    /// The address of its `/metrics` (from its log).
    pub fn metrics_address(&self) -> Option<String> {
        address_in(&self.log(), "serving /metrics")
    }

    /// Sends a signal (`-9`, `-TERM`).
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().map(Child::id).expect("running");
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// Waits up to `timeout` for the process to exit; its exit code.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut()?;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return status.code();
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Panics with the log if the process exited.
    pub fn check_alive(&mut self) {
        if let Some(child) = self.child.as_mut()
            && let Some(status) = child.try_wait().unwrap()
        {
            panic!(
                "{} exited with {status}\n{}",
                self.identity,
                self.log_tail()
            );
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The `address=` of the first log line containing `message`.
pub(crate) fn address_in(log: &str, message: &str) -> Option<String> {
    let line = log.lines().find(|l| l.contains(message))?;
    let start = line.find("address=")? + "address=".len();
    Some(
        line[start..]
            .split_whitespace()
            .next()?
            .trim_matches('"')
            .to_owned(),
    )
}

/// `GET path` on `address`: (status code, body).
pub async fn http_get(address: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The Lease's holder.
pub async fn holder(client: &Client, namespace: &str, lease: &str) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(lease)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

/// Polls the Lease every 25 ms until `identity` holds it; the time that took.
async fn wait_holder(
    client: &Client,
    namespace: &str,
    lease: &str,
    identity: &str,
    timeout: Duration,
    replicas: &[&Replica],
) -> Duration {
    let started = Instant::now();
    while started.elapsed() < timeout {
        if holder(client, namespace, lease).await.as_deref() == Some(identity) {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let logs: Vec<String> = replicas.iter().map(|r| r.log_tail()).collect();
    panic!(
        "{identity} does not hold {namespace}/{lease} after {timeout:?} (holder {:?})\n{}",
        holder(client, namespace, lease).await,
        logs.join("\n")
    );
}

/// Waits until `expected` pods of `ns` are Running.
pub async fn wait_running(client: &Client, ns: &str, expected: usize, logs: &[&Replica]) {
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    let result = wait_until(
        Duration::from_secs(180),
        &format!("{expected} pods Running"),
        || async {
            let list = api.list(&ListParams::default()).await?;
            let running = list
                .items
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            Ok::<_, kube::Error>((running == expected).then_some(()))
        },
    )
    .await;
    if let Err(err) = result {
        let logs: Vec<String> = logs.iter().map(|r| r.log_tail()).collect();
        panic!("{err}\n{}", logs.join("\n"));
    }
}

/// A NodeClass and a NodePool of the kwok provider named `provider`; returns the pool's name.
pub async fn kwok_pool(client: &Client, names: &Names, provider: &str) -> String {
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(client, names, &class, provider, json!({"maxCpu": 4})).await;
    node_pool(client, node_pool_json(names, &pool, &class)).await;
    pool
}

fn created_claims(replica: &Replica) -> usize {
    replica.log().matches("created nodeclaim").count()
}

async fn run(cp: &ControlPlane, client: &Client) {
    let names = Names::new("leader");
    // Pods and the Lease in different namespaces: deleting the pods' must not take the Lease.
    let ns = namespace(cp, "leader").await;
    let lease_ns = namespace(cp, "lease").await;
    let lease = names.name("lease");
    let kubeconfig = cp.kubeconfig_path();
    let (id_a, id_b, id_c) = (names.name("a"), names.name("b"), names.name("c"));

    let a = Replica::start(kubeconfig, &names, &id_a, &lease_ns, &lease, &[]);
    a.wait_log("acquired the lease", Duration::from_secs(120))
        .await;
    let mut b = Replica::start(kubeconfig, &names, &id_b, &lease_ns, &lease, &[]);
    b.wait_log("waiting for the lease", Duration::from_secs(120))
        .await;
    assert_eq!(
        holder(client, &lease_ns, &lease).await.as_deref(),
        Some(id_a.as_str())
    );

    // Both answer the probes: the leader with its caches synced, the follower as a follower.
    let (a_probe, b_probe) = (a.probe_address().unwrap(), b.probe_address().unwrap());
    let ready = wait_until(Duration::from_secs(60), "leader ready", || async {
        Ok::<_, kube::Error>((http_get(&a_probe, "/readyz").await.0 == 200).then_some(()))
    })
    .await;
    assert!(
        ready.is_ok(),
        "{:?}\n{}",
        http_get(&a_probe, "/readyz").await,
        a.log_tail()
    );
    let (status, report) = http_get(&b_probe, "/readyz").await;
    assert_eq!(status, 200, "{report}");
    assert!(report.contains("leader: false"), "{report}");
    assert_eq!(http_get(&b_probe, "/healthz").await.0, 200);

    // Only the leader acts.
    let pool = kwok_pool(client, &names, "kwok").await;
    nodepool_pods(client, &names, &ns, ("first", 2), &pool).await;
    wait_running(client, &ns, 2, &[&a, &b]).await;
    let made = claims(client, &names).await.len();
    assert!(made >= 1);
    assert_eq!(created_claims(&a), made, "{}", a.log_tail());
    assert_eq!(created_claims(&b), 0, "{}", b.log_tail());
    assert!(
        !b.log().contains("controllers starting"),
        "{}",
        b.log_tail()
    );
    let (status, metrics) = http_get(&a.metrics_address().unwrap(), "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains("karpenter_nodeclaims_launched_total"),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"capstan_provider_kube_calls_total{provider="kwok"}"#),
        "{metrics}"
    );

    // kill -9 the leader: the follower takes over once the Lease expires.
    a.signal("-9");
    let killed = wait_holder(client, &lease_ns, &lease, &id_b, LEASE * 3, &[&a, &b]).await;
    b.wait_log("acquired the lease", Duration::from_secs(10))
        .await;
    assert!(
        killed <= LEASE + Duration::from_secs(2),
        "takeover after kill -9 took {killed:?}"
    );

    // The new leader acts.
    nodepool_pods(client, &names, &ns, ("second", 2), &pool).await;
    wait_running(client, &ns, 4, &[&b]).await;
    b.check_alive();

    // SIGTERM the leader: it releases the Lease, so a waiting replica takes over at its next poll.
    let mut c = Replica::start(kubeconfig, &names, &id_c, &lease_ns, &lease, &[]);
    c.wait_log("waiting for the lease", Duration::from_secs(120))
        .await;
    b.signal("-TERM");
    let released = wait_holder(client, &lease_ns, &lease, &id_c, LEASE * 3, &[&b, &c]).await;
    let code = b.wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(0), "{}", b.log_tail());
    assert!(b.log().contains("released the lease"), "{}", b.log_tail());
    assert!(
        released < LEASE / 2,
        "takeover after SIGTERM took {released:?}, not much faster than the {LEASE:?} lease"
    );
    c.wait_log("acquired the lease", Duration::from_secs(10))
        .await;
    c.check_alive();
    println!(
        "leader election (lease {LEASE:?}): takeover after kill -9 {killed:?}, after SIGTERM \
         {released:?}"
    );

    // The leader terminates the claims (drains and deletes the nodes) before it loses the Lease.
    // The pods go first: pods of a node being deleted are provisioned for ahead of the drain, as
    // Karpenter does, so claims deleted under running pods would get replacements.
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    pods.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    let pods_gone = wait_until(Duration::from_secs(120), "pods deleted", || async {
        Ok::<_, kube::Error>(
            pods.list(&ListParams::default())
                .await?
                .items
                .is_empty()
                .then_some(()),
        )
    })
    .await;
    assert!(pods_gone.is_ok(), "{pods_gone:?}\n{}", c.log_tail());
    let api = Api::<NodeClaim>::all(client.clone());
    for claim in claims(client, &names).await {
        api.delete(&claim.name_any(), &DeleteParams::default())
            .await
            .unwrap();
    }
    let gone = wait_until(
        Duration::from_secs(240),
        "NodeClaims terminated",
        || async { Ok::<_, kube::Error>(claims(client, &names).await.is_empty().then_some(())) },
    )
    .await;
    if let Err(err) = gone {
        let left: Vec<String> = claims(client, &names)
            .await
            .iter()
            .map(|claim| {
                let conditions: Vec<String> = claim
                    .status
                    .iter()
                    .flat_map(|s| &s.conditions)
                    .map(|c| {
                        format!(
                            "{}={:?}/{}",
                            c.type_,
                            c.status,
                            c.reason.as_deref().unwrap_or("")
                        )
                    })
                    .collect();
                format!(
                    "{} deleting={} finalizers={:?} {conditions:?}",
                    claim.name_any(),
                    claim.metadata.deletion_timestamp.is_some(),
                    claim.finalizers()
                )
            })
            .collect();
        panic!("{err}\n{}\n{}", left.join("\n"), c.log_tail());
    }

    // Someone else writes the Lease: the leader stops its controllers and exits non-zero.
    // (The leader renews meanwhile: a conflicting write reads the Lease again.)
    let leases = Api::<Lease>::namespaced(client.clone(), &lease_ns);
    for attempt in 1.. {
        let mut stolen = leases.get(&lease).await.unwrap();
        let spec = stolen.spec.get_or_insert_with(Default::default);
        spec.holder_identity = Some("intruder".to_owned());
        spec.lease_duration_seconds = Some(60);
        spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
        match leases
            .replace(&lease, &PostParams::default(), &stolen)
            .await
        {
            Ok(_) => break,
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < 10 => continue,
            Err(err) => panic!("stealing the Lease: {err}"),
        }
    }
    let code = c.wait_exit(LEASE * 2);
    assert!(
        code.is_some_and(|code| code != 0),
        "exit {code:?}\n{}",
        c.log_tail()
    );
    assert!(c.log().contains("lost to intruder"), "{}", c.log_tail());
    teardown(client, &names, &ns).await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&lease_ns, &DeleteParams::default())
        .await;
}

#[tokio::test]
async fn one_replica_leads_and_another_takes_over_after_kill_and_after_sigterm() {
    let (cp, client) = cluster().await;
    run(cp, &client).await;
}

/// `count` pods of 500m selecting `pool` (tolerating everything).
pub async fn nodepool_pods(
    client: &Client,
    names: &Names,
    ns: &str,
    (prefix, count): (&str, usize),
    pool: &str,
) {
    Pods::new(client, names, ns, prefix)
        .count(count)
        .cpu("500m")
        .memory("128Mi")
        .node_selector(json!({"karpenter.sh/nodepool": pool}))
        .tolerations(json!([{"operator": "Exists"}]))
        .create()
        .await;
}
