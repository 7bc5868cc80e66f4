//! Numbers for the clusterapi provider on real Cluster API (`make bench-capi`; ignored by `make
//! test`): Machines provisioned 2 s after their creation, as a cloud that takes 2 s would.
//!
//! - In-process: the `kube` requests the provider makes for one launch alone, for each of ten
//!   concurrent launches, and for one delete; and how long each took.
//! - Through the host: ten pending pods (one per node) to Running, and a NodeClaim deleted to its
//!   Machine gone; the provider's `kube` requests per launch from the host's `/metrics`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan::api::NodeClaim;
use capstan::capability::metrics::CapabilityMetrics;
use capstan_test_support::cluster_api::machine_template;
use capstan_test_support::wait_until;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::{
    CLUSTERAPI_GRANTS, World, capacity, claim, machine_deployment, provider_with_metrics,
    start_host, wit_class,
};
use crate::disruption::{App, deployment};
use crate::leader_election::{address_in, http_get};
use crate::lifecycle::{Host, Names, cleanup, cluster, node_class, node_pool, node_pool_json};
use crate::provisioner_e2e::wait_running;

/// How long the test infrastructure takes to provision a Machine.
const PROVISION_MILLIS: u64 = 2000;
/// Launches measured together.
const LAUNCHES: usize = 10;

/// A world with MachineDeployment `name` (2 CPUs, 8 GiB, up to 20 Machines) whose Machines are
/// provisioned [`PROVISION_MILLIS`] after creation.
async fn slow_world(prefix: &str, name: &str) -> World {
    let world = World::new(prefix, &[]).await;
    let template = machine_template(
        &format!("{name}-v1"),
        json!({"cpu": "2", "memory": "8Gi", "pods": "110"}),
        json!({"topology.kubernetes.io/zone": "zone-a"}),
        PROVISION_MILLIS,
    );
    world
        .add(
            &[template],
            &machine_deployment(name, capacity("2", "8Gi", "0.10", "20")),
        )
        .await;
    world
}

/// `capstan_provider_kube_calls_total{provider="clusterapi"}` on the host's `/metrics`.
async fn host_kube_calls(host: &Host) -> u64 {
    let address = address_in(&host.log(), "serving /metrics").expect("the host serves /metrics");
    let (_, body) = http_get(&address, "/metrics").await;
    body.lines()
        .find(|l| l.starts_with(r#"capstan_provider_kube_calls_total{provider="clusterapi"}"#))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

#[tokio::test]
#[ignore = "benchmark: make bench-capi"]
async fn bench_clusterapi() {
    let mut report = vec![format!(
        "clusterapi on Cluster API v1.14.2, Machines provisioned {PROVISION_MILLIS} ms after creation"
    )];

    // In-process: requests per launch and per delete.
    let world = slow_world("capi-bench-in", "bench").await;
    let metrics = Arc::new(CapabilityMetrics::default());
    let provider = provider_with_metrics(&world, CLUSTERAPI_GRANTS, metrics.clone());
    let class = wit_class(&world.parameters());
    let calls = || metrics.snapshot().kube_calls;

    let before = calls();
    let started = Instant::now();
    let one = provider
        .create(&claim("one", "bench"), &class)
        .await
        .unwrap();
    report.push(format!(
        "one launch alone: {} kube requests, {:.1} s to a providerID",
        calls() - before,
        started.elapsed().as_secs_f64()
    ));

    let claims: Vec<_> = (0..LAUNCHES)
        .map(|i| claim(&format!("many-{i}"), "bench"))
        .collect();
    let before = calls();
    let started = Instant::now();
    let launched = futures::future::join_all(claims.iter().map(|c| provider.create(c, &class)))
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    report.push(format!(
        "{LAUNCHES} concurrent launches: {:.1} kube requests per launch, {:.1} s until the last providerID",
        (calls() - before) as f64 / LAUNCHES as f64,
        started.elapsed().as_secs_f64()
    ));

    let before = calls();
    let started = Instant::now();
    provider.delete(&one).await.unwrap();
    let delete_calls = calls() - before;
    wait_until(Duration::from_secs(60), "the Machine gone", || async {
        let left =
            world.machines().await.iter().any(|m| {
                m.labels().get("capstan.dev/nodeclaim").map(String::as_str) == Some("one")
            });
        Ok::<_, String>((!left).then_some(()))
    })
    .await
    .unwrap();
    report.push(format!(
        "delete: {delete_calls} kube requests; the Machine gone {:.1} s after",
        started.elapsed().as_secs_f64()
    ));
    for claim in &launched {
        provider.delete(claim).await.unwrap();
    }

    // Through the host: pods to Running, a NodeClaim deleted to its Machine gone.
    let world = slow_world("capi-bench", "bench").await;
    let (cp, client) = cluster().await;
    let names = Names::new("capibench");
    let host = start_host(cp, &names).await;
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(&client, &names, &class, "clusterapi", world.parameters()).await;
    node_pool(&client, node_pool_json(&names, &pool, &class)).await;
    let ns = cp.create_namespace_unique("capi-bench").await.unwrap();
    // Let the host settle (NodeClass ready, catalog read) before counting.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = host_kube_calls(&host).await;
    let started = Instant::now();
    deployment(
        &client,
        &names,
        &ns,
        App {
            name: "web",
            replicas: LAUNCHES as i32,
            cpu: "1500m",
            node_selector: json!({"karpenter.sh/nodepool": pool}),
            annotations: json!({}),
        },
    )
    .await;
    wait_running(&client, &host, &ns, LAUNCHES, Duration::from_secs(300)).await;
    let elapsed = started.elapsed().as_secs_f64();
    let host_calls = host_kube_calls(&host).await - before;
    assert_eq!(world.machines().await.len(), LAUNCHES);
    report.push(format!(
        "{LAUNCHES} pending pods -> Running through the host: {elapsed:.1} s; the provider made {:.1} kube requests per launch (all calls, catalog reads included)",
        host_calls as f64 / LAUNCHES as f64
    ));

    let claims: Api<NodeClaim> = Api::all(client.clone());
    let victim = claims
        .list(&ListParams::default().labels(&format!("karpenter.sh/nodepool={pool}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .next()
        .unwrap()
        .name_any();
    let started = Instant::now();
    claims
        .delete(&victim, &DeleteParams::default())
        .await
        .unwrap();
    wait_until(Duration::from_secs(120), "its Machine gone", || async {
        let left = world
            .machines()
            .await
            .iter()
            .any(|m| m.labels().get("capstan.dev/nodeclaim") == Some(&victim));
        Ok::<_, String>((!left).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nhost log:\n{}", host.log_tail()));
    report.push(format!(
        "NodeClaim deleted -> its Machine gone (drain, delete-machine, scale-down, Cluster API): {:.1} s",
        started.elapsed().as_secs_f64()
    ));

    println!("\n== bench-capi ==\n{}\n", report.join("\n"));
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
    cleanup(&client, &names).await;
}
