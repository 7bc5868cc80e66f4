//! The host after kube-apiserver goes away and comes back mid scale-up, on a control plane of its
//! own (the shared one must not lose its API server under other tests).
//!
//! Every watch of the host resumes within seconds of the API server's return (a bounded backoff),
//! the claims whose status writes failed meanwhile converge, and each status transition is one
//! Event however many times its reconcile was retried.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use capstan_test_support::{ControlPlane, Options, repo_root, wait_until};
use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::lifecycle::{Host, Names, node_class, node_pool, node_pool_json};
use crate::provisioner::claims;
use crate::provisioner_e2e::{Pods, wait_running};

/// How long kube-apiserver stays down.
const OUTAGE: Duration = Duration::from_secs(6);

#[tokio::test]
async fn pods_run_promptly_after_the_api_server_restarts_and_launches_are_reported_once() {
    let cp = ControlPlane::start(Options::default()).await.unwrap();
    cp.install_crds_from_dir(&repo_root().join("crds"))
        .await
        .unwrap();
    let client = cp.client().unwrap();
    let names = Names::new("restart");
    let host = Host::start(&cp, &names, &["--batch-idle-duration", "1s"]);
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(&client, &names, &class, "kwok", json!({"maxCpu": 4})).await;
    node_pool(&client, node_pool_json(&names, &pool, &class)).await;
    let ns = cp.create_namespace_unique("restart").await.unwrap();
    Pods::new(&client, &names, &ns, "web")
        .count(200)
        .cpu("500m")
        .node_selector(json!({"karpenter.sh/nodepool": pool}))
        .create()
        .await;

    // Mid scale-up: some claims exist, not every pod runs yet.
    wait_until(Duration::from_secs(120), "the first NodeClaims", || async {
        host.check_alive();
        Ok::<_, kube::Error>((claims(&client, &names).await.len() >= 5).then_some(()))
    })
    .await
    .unwrap();
    cp.kill_api_server().await.unwrap();
    tokio::time::sleep(OUTAGE).await;
    cp.start_api_server().await.unwrap();
    let back = Instant::now();
    let client = cp.client().unwrap();
    wait_running(&client, &host, &ns, 200, Duration::from_secs(120)).await;
    let recovered = back.elapsed();
    host.check_alive();

    let claims = claims(&client, &names).await;
    let launched = launched_events(&client).await;
    let mut repeated = Vec::new();
    for claim in &claims {
        let n = launched.get(&claim.name_any()).copied().unwrap_or(0);
        if n > 1 {
            repeated.push((claim.name_any(), n));
        }
    }
    println!(
        "all 200 pods Running {recovered:?} after the API server came back ({} claims)",
        claims.len()
    );
    assert!(
        repeated.is_empty(),
        "claims with more than one Launched Event: {repeated:?}"
    );
    assert!(
        claims.iter().all(|c| launched.contains_key(&c.name_any())),
        "every claim has its Launched Event"
    );
    // The watches resume within the bounded backoff (a few seconds); the rest is the scheduler
    // and kwok placing 200 pods, which on a busy two-core machine took up to 26 s (quiet: under
    // 20 s). An unbounded or stuck watch would miss this by minutes.
    assert!(
        recovered <= Duration::from_secs(45),
        "pods Running {recovered:?} after the API server was back\n{}",
        host.log_tail()
    );
    drop(host);
    cp.stop().unwrap();
}

/// `Launched` Events per claim, counting each repeat of a series.
async fn launched_events(client: &kube::Client) -> BTreeMap<String, i32> {
    let mut out = BTreeMap::new();
    let events = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    for e in events.items {
        if e.reason.as_deref() != Some("Launched")
            || e.regarding.as_ref().and_then(|r| r.kind.as_deref()) != Some("NodeClaim")
        {
            continue;
        }
        let Some(name) = e.regarding.as_ref().and_then(|r| r.name.clone()) else {
            continue;
        };
        let count = e.series.as_ref().map_or(1, |s| s.count);
        *out.entry(name).or_default() += count;
    }
    out
}
