//! `make bench-dra`: pods asking for devices through Dynamic Resource Allocation, Capstan beside
//! upstream Karpenter's own kwok controller with its DRA allocator on (`IGNORE_DRA_REQUESTS=false`),
//! each on a fresh control plane of its own, one after the other, on the same scenario:
//!
//! 1. Karpenter's DRA KWOK driver publishes, from one `DRAConfig`, the devices of five of
//!    Karpenter's kwok catalog types: 1, 2, 4 and 8 GPUs on `m-4x`, `m-8x`, `m-16x` and `m-32x`,
//!    and seven MIG-like partitions (`1g.10gb`, devices of their own) on `c-16x`; two
//!    DeviceClasses select GPUs and partitions with CEL;
//! 2. `CAPSTAN_BENCH_DRA_PODS` (default 4) pods in each of five Deployments, asking for 1, 2, 4
//!    and 8 GPUs and for one partition through ResourceClaimTemplates, until every pod runs
//!    (kube-scheduler allocates the claims and binds);
//! 3. the Deployments scaled to half (consolidation keeps each pod's devices), then deleted.
//!
//! Recorded as in `make bench-e2e`: time until the pods settle, nodes and $/h (Karpenter's kwok
//! prices) 60 s and 180 s after each change, the controller's CPU and memory. Karpenter's kwok
//! provider gives its instance types no device templates (`DynamicResources`), which its DRA
//! allocator needs, so its pods stay Pending: a system whose first step does not settle within
//! `CAPSTAN_BENCH_DRA_TIMEOUT` (default 300 s) skips the rest. Knobs: `CAPSTAN_BENCH_DRA_SYSTEMS`
//! (default `capstan,karpenter`), `CAPSTAN_BENCH_E2E_SAMPLES` (default `60,180`). A measurement:
//! ignored by `make test`.

use std::time::Duration;

use anyhow::Result;
use capstan_test_support::ControlPlane;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::bench::catalog::Catalog;
use crate::bench::controller::{
    Controller, System, Upstream, prepare, report, start_controller_with,
};
use crate::bench::watch::Watch;
use crate::bench::{env_or, systems};
use crate::bench_e2e::{Probe, Run, halve_then_delete, run_on_own_control_plane, table};
use crate::dra::{DraDriver, create_dynamic, device_class, draconfigs, resource};
use crate::lifecycle::RUN_LABEL;

/// The driver whose devices the scenario asks for.
const DRIVER: &str = "gpu.bench.capstan.dev";
/// GPUs per catalog type.
const GPU_TYPES: [(&str, usize); 4] = [
    ("m-4x-amd64-linux", 1),
    ("m-8x-amd64-linux", 2),
    ("m-16x-amd64-linux", 4),
    ("m-32x-amd64-linux", 8),
];
/// The type carrying MIG-like partitions, and how many.
const MIG_TYPE: (&str, usize) = ("c-16x-amd64-linux", 7);
/// The Deployments: name, DeviceClass, devices per pod.
const WORKLOADS: [(&str, &str, usize); 5] = [
    ("gpu-1", "bench-gpu", 1),
    ("gpu-2", "bench-gpu", 2),
    ("gpu-4", "bench-gpu", 4),
    ("gpu-8", "bench-gpu", 8),
    ("mig-1", "bench-mig", 1),
];

/// The driver's DRAConfig: the GPU pools and the partition pool.
fn dra_config() -> Value {
    let pool = |name: &str, instance_type: &str, devices: Vec<Value>| {
        json!({
            "name": name,
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In",
                 "values": [instance_type]}
            ]}],
            "resourceSlices": [{"devices": devices}],
        })
    };
    let mut pools: Vec<Value> = GPU_TYPES
        .iter()
        .map(|(t, n)| {
            let devices = (0..*n)
                .map(|i| {
                    json!({"name": format!("gpu-{i}"),
                           "attributes": {"type": {"string": "gpu"}, "index": {"int": i}},
                           "capacity": {"memory": {"value": "80Gi"}}})
                })
                .collect();
            pool(&format!("gpus-{t}"), t, devices)
        })
        .collect();
    let (t, n) = MIG_TYPE;
    let partitions = (0..n)
        .map(|i| {
            json!({"name": format!("mig-{i}"),
                   "attributes": {"type": {"string": "mig"}, "profile": {"string": "1g.10gb"}},
                   "capacity": {"memory": {"value": "10Gi"}}})
        })
        .collect();
    pools.push(pool("partitions", t, partitions));
    json!({
        "apiVersion": "test.karpenter.sh/v1alpha1", "kind": "DRAConfig",
        "metadata": {"name": "bench"},
        "spec": {"driver": DRIVER, "pools": pools},
    })
}

/// The DeviceClasses, the claim templates and the Deployments of `per_workload` pods each.
async fn workloads(cp: &ControlPlane, ns: &str, run: &str, per_workload: usize) -> Result<()> {
    let client = cp.client()?;
    for (class, kind) in [("bench-gpu", "gpu"), ("bench-mig", "mig")] {
        device_class(&client, class, DRIVER, kind).await;
    }
    let templates = resource(
        "resource.k8s.io",
        "ResourceClaimTemplate",
        "resourceclaimtemplates",
    );
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns);
    for (name, class, count) in WORKLOADS {
        create_dynamic(
            &client,
            &templates,
            Some(ns),
            json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"spec": {"devices": {"requests": [
                    {"name": "devices", "exactly": {"deviceClassName": class, "count": count}}
                ]}}},
            }),
        )
        .await;
        let deployment: Deployment = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": {RUN_LABEL: run}},
            "spec": {
                "replicas": per_workload,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name, RUN_LABEL: run}},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "resourceClaims": [{"name": "devices", "resourceClaimTemplateName": name}],
                        "containers": [{"name": "app", "image": "fake",
                                        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                                                      "claims": [{"name": "devices"}]}}],
                    },
                },
            },
        }))?;
        deployments
            .create(&PostParams::default(), &deployment)
            .await?;
    }
    Ok(())
}

async fn scenario(
    system: System,
    cp: &ControlPlane,
    (upstream, catalog): (&Upstream, &Catalog),
    per_workload: usize,
    timeout: Duration,
    run: &mut Run,
    slot: &mut Option<Controller>,
) -> Result<()> {
    let driver = DraDriver::start(cp, "bench").await;
    let client = cp.client()?;
    create_dynamic(&client, &draconfigs(), None, dra_config()).await;
    let started = start_controller_with(
        system,
        cp,
        "bench",
        Some((upstream, catalog)),
        &crate::bench::node_pool,
        &[("IGNORE_DRA_REQUESTS", "false")],
    )
    .await?;
    let (controller, client, names) = run.started(started, slot);
    let ns = cp.create_namespace_unique("bench").await?;
    let watch = Watch::start(&client, &ns).await?;
    let total = per_workload * WORKLOADS.len();
    println!("== {}: {total} pods asking for devices", run.label);
    workloads(cp, &ns, &names.run, per_workload).await?;
    let probe = Probe {
        watch: &watch,
        controller,
        catalog,
        timeout,
        floor: None,
    };
    if !probe.step(run, &format!("{total} pods"), total).await? {
        println!(
            "== {}: the pods did not all run in {timeout:?}; the rest is skipped\n{}",
            run.label,
            driver
                .log()
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join("\n")
        );
        return Ok(());
    }
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    halve_then_delete(
        run,
        &deployments,
        &WORKLOADS.map(|w| w.0),
        per_workload,
        &probe,
    )
    .await
}

#[tokio::test]
#[ignore = "a measurement: make bench-dra"]
async fn bench_dra_capstan_beside_karpenter() {
    let per_workload: usize = env_or("CAPSTAN_BENCH_DRA_PODS", 4);
    let timeout = Duration::from_secs(env_or("CAPSTAN_BENCH_DRA_TIMEOUT", 300));
    let systems = systems("CAPSTAN_BENCH_DRA_SYSTEMS");
    let (upstream, catalog) = prepare(&systems);
    let mut runs = Vec::new();
    for system in systems {
        runs.push(
            run_on_own_control_plane(system, &upstream, async |cp, run, slot| {
                scenario(
                    system,
                    cp,
                    (&upstream, &catalog),
                    per_workload,
                    timeout,
                    run,
                    slot,
                )
                .await
            })
            .await,
        );
    }
    report(
        "bench-dra",
        &format!(
            "{} pods asking for 1, 2, 4, 8 GPUs and a partition, then half, then none",
            per_workload * WORKLOADS.len()
        ),
        &table(&runs),
        runs.iter().map(|r| &r.finished),
    );
}
