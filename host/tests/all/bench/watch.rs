//! Watches of the benchmark's pods and of the nodes, and what they show at one moment.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, ResourceExt};

use super::catalog::Catalog;

/// Nodes and price at one moment.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub after: u64,
    pub running: usize,
    pub pods: usize,
    pub nodes: usize,
    pub price: f64,
    /// Nodes whose offering is not in the catalog.
    pub unpriced: usize,
    /// "instance type capacity type" -> count.
    pub mix: BTreeMap<String, usize>,
}

/// Watches (reflector stores) of the pods of the namespace, of the nodes and of the NodeClaims,
/// and how long pods stay Pending.
pub struct Watch {
    pub pods: reflector::Store<Pod>,
    pub nodes: reflector::Store<Node>,
    pub claims: reflector::Store<DynamicObject>,
    pending: Arc<Mutex<PendingClock>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// When each pod not yet Running was first seen, and the longest any pod waited to run since the
/// last reset.
#[derive(Debug, Default)]
struct PendingClock {
    since: HashMap<String, Instant>,
    longest: Duration,
}

impl PendingClock {
    fn saw(&mut self, pod: &Pod, now: Instant) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if pod.metadata.deletion_timestamp.is_some() {
            self.since.remove(&uid);
        } else if running {
            if let Some(first) = self.since.remove(&uid) {
                self.longest = self.longest.max(now - first);
            }
        } else {
            self.since.entry(uid).or_insert(now);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Watch {
    pub async fn start(client: &Client, ns: &str) -> Result<Self> {
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
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim"));
        let claims_writer = reflector::store::Writer::new(ar.clone());
        let claims = claims_writer.as_reader();
        let claim_stream = reflector(
            claims_writer,
            watcher(
                Api::<DynamicObject>::all_with(client.clone(), &ar),
                watcher::Config::default(),
            ),
        )
        .default_backoff()
        .applied_objects();
        let pending = Arc::new(Mutex::new(PendingClock::default()));
        let clock = pending.clone();
        let tasks = vec![
            tokio::spawn(pod_stream.for_each(move |pod| {
                if let Ok(pod) = pod {
                    lock(&clock).saw(&pod, Instant::now());
                }
                async {}
            })),
            tokio::spawn(node_stream.for_each(|_| async {})),
            tokio::spawn(claim_stream.for_each(|_| async {})),
        ];
        pods.wait_until_ready().await?;
        nodes.wait_until_ready().await?;
        claims.wait_until_ready().await?;
        Ok(Self {
            pods,
            nodes,
            claims,
            pending,
            tasks,
        })
    }

    /// The longest any pod of the namespace has waited to run since the last call (pods still
    /// waiting count with their wait so far; pods deleted before they ran do not count).
    pub fn longest_pending_since_last(&self) -> Duration {
        let now = Instant::now();
        let live: std::collections::HashSet<String> = self
            .pods
            .state()
            .iter()
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
        let mut clock = lock(&self.pending);
        clock.since.retain(|uid, _| live.contains(uid));
        let waiting = clock
            .since
            .values()
            .map(|t| now - *t)
            .max()
            .unwrap_or_default();
        let longest = clock.longest.max(waiting);
        clock.longest = Duration::ZERO;
        longest
    }

    /// Nodes being disrupted now: deleting, or tainted `karpenter.sh/disrupted`.
    pub fn disrupting(&self) -> usize {
        self.nodes
            .state()
            .iter()
            .filter(|n| {
                n.metadata.deletion_timestamp.is_some()
                    || n.spec
                        .as_ref()
                        .and_then(|s| s.taints.as_ref())
                        .is_some_and(|ts| ts.iter().any(|t| t.key == "karpenter.sh/disrupted"))
            })
            .count()
    }

    /// (Running and not deleting, all pods).
    pub fn pods(&self) -> (usize, usize) {
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

    pub fn sample(&self, after: u64, catalog: &Catalog) -> Sample {
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
