//! How many API requests the host makes at rest, with 200 nodes and 2,000 pods: the API server's
//! own request counters (`apiserver_request_total`) over a minute with the host running, minus a
//! minute with it stopped (kube-controller-manager, kube-scheduler and kwok keep their own
//! traffic). On a control plane of its own. A measurement, run by `make bench-api-load`;
//! `CAPSTAN_HOST_BIN` runs another build of the host, to compare versions.

use std::collections::BTreeMap;
use std::time::Duration;

use capstan_test_support::{ControlPlane, Options, repo_root};
use kube::Client;
use serde_json::json;

use crate::lifecycle::{Host, Names, node_class, node_pool, node_pool_json};
use crate::provisioner::claims;
use crate::provisioner_e2e::{Pods, wait_running};

/// `apiserver_request_total` summed by verb and resource.
async fn requests(client: &Client) -> BTreeMap<String, f64> {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(request).await.unwrap();
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let Some((labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let label = |key: &str| {
            labels
                .split(&format!("{key}=\""))
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or_default()
                .to_owned()
        };
        let key = format!("{} {}", label("verb"), label("resource"));
        *out.entry(key).or_default() += value.parse::<f64>().unwrap_or(0.0);
    }
    out
}

fn diff(after: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

#[tokio::test]
#[ignore = "a measurement: make bench-api-load"]
async fn measure_api_requests_at_rest_with_200_nodes_and_2000_pods() {
    let cp = ControlPlane::start(Options::default()).await.unwrap();
    cp.install_crds_from_dir(&repo_root().join("crds"))
        .await
        .unwrap();
    let client = cp.client().unwrap();
    let names = Names::new("apiload");
    let host = Host::start(&cp, &names, &["--batch-idle-duration", "2s"]);
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(&client, &names, &class, "kwok", json!({"maxCpu": 2})).await;
    node_pool(&client, node_pool_json(&names, &pool, &class)).await;
    let ns = cp.create_namespace_unique("apiload").await.unwrap();
    Pods::new(&client, &names, &ns, "web")
        .count(2000)
        .cpu("180m")
        .memory("32Mi")
        .node_selector(json!({"karpenter.sh/nodepool": pool}))
        .create()
        .await;
    wait_running(&client, &host, &ns, 2000, Duration::from_secs(900)).await;
    let nodes = claims(&client, &names).await.len();
    // Let the scale-up's work finish, then count a quiet minute with the host.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let minute = Duration::from_secs(60);
    let start = requests(&client).await;
    tokio::time::sleep(minute).await;
    let with_host = diff(&requests(&client).await, &start);
    host.kill();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let start = requests(&client).await;
    tokio::time::sleep(minute).await;
    let without = diff(&requests(&client).await, &start);
    let mut host_only = BTreeMap::new();
    for (key, v) in &with_host {
        let d = v - without.get(key).copied().unwrap_or(0.0);
        if d > 0.5 {
            host_only.insert(key.clone(), d);
        }
    }
    let total: f64 = host_only.values().sum();
    println!(
        "at rest with {nodes} nodes and 2000 pods: the host makes {total:.0} API requests per minute: {host_only:?}"
    );
    cp.stop().unwrap();
}
