//! `make bench-multi`: falling back from a preferred NodePool to the next, Capstan beside upstream
//! Karpenter's own kwok controller where Karpenter can take part, each on a fresh control plane of
//! its own, one after the other (docs/multi-provider.md).
//!
//! Every run has two pools over Karpenter's kwok catalog (Capstan's kwok provider given the same
//! types and prices): `bench`, weight 100, and `bench-fallback`, weight 10, both on-demand Linux.
//! A Deployment of [`PODS`] pods of 1 CPU is created and the run waits until every pod runs; the
//! pods on each pool's nodes, the nodes and their price are recorded. The preferred pool is "full"
//! in one of three ways:
//!
//! - `limit`: its `limits.cpu` is 16 (both systems);
//! - `out of capacity`: its provider answers every launch with `insufficient-capacity` (Capstan
//!   only: a pool of the chaos provider beside the kwok provider's; Karpenter's kwok provider
//!   cannot fail a launch, and Karpenter runs one provider);
//! - `failing`: its provider traps on every launch (Capstan only, as above).
//!
//! A measurement: ignored by `make test`. Knobs: `CAPSTAN_BENCH_MULTI_SYSTEMS` (default
//! `capstan,karpenter`), `CAPSTAN_BENCH_MULTI_TIMEOUT` (seconds a run may take to settle,
//! default 300), and those of [`crate::bench_e2e`] (`CAPSTAN_BENCH_E2E_SAMPLES`).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::bench::catalog::Catalog;
use crate::bench::controller::{
    Controller, POOL, System, Upstream, apply, footer, prepare, report, start_controller,
};
use crate::bench::table::Table;
use crate::bench::watch::Watch;
use crate::bench::{env_or, systems};
use crate::bench_e2e::{Probe, Run, run_on_own_control_plane};

/// The pods of the scenario, 1 CPU each.
const PODS: usize = 40;
/// The preferred pool's CPU limit in the `limit` case.
const LIMIT_CPU: &str = "16";
/// The fallback pool's name.
const FALLBACK: &str = "bench-fallback";

/// How the preferred pool is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Full {
    Limit,
    OutOfCapacity,
    Failing,
}

impl Full {
    fn label(self) -> &'static str {
        match self {
            Full::Limit => "limit",
            Full::OutOfCapacity => "out of capacity",
            Full::Failing => "failing",
        }
    }

    /// The chaos provider's NodeClass parameters for the preferred pool, if it has its own.
    fn chaos(self) -> Option<Value> {
        match self {
            Full::Limit => None,
            Full::OutOfCapacity => {
                Some(json!({"mode": "create-error", "error": "insufficient-capacity"}))
            }
            Full::Failing => Some(json!({"mode": "create-error", "error": "trap"})),
        }
    }
}

/// A pool of `weight` over `class_ref`, on-demand Linux, consolidating when empty.
fn pool(name: &str, weight: i32, class_ref: Value, labels: Value, limit: Option<&str>) -> Value {
    let mut pool = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "weight": weight,
            "template": {"spec": {
                "nodeClassRef": class_ref,
                "requirements": [
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                ],
            }},
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"},
        },
    });
    if let Some(cpu) = limit {
        pool["spec"]["limits"] = json!({"cpu": cpu});
    }
    pool
}

/// One run's outcome beyond the step: pods per pool when the pods settled.
#[derive(Debug, Default)]
struct Placement {
    preferred: usize,
    fallback: usize,
}

/// Pods per pool (by their node's `karpenter.sh/nodepool` label).
fn placement(watch: &Watch) -> Placement {
    let pools: BTreeMap<String, String> = watch
        .nodes
        .state()
        .iter()
        .filter_map(|n| {
            let pool = n.labels().get("karpenter.sh/nodepool")?.clone();
            Some((n.name_any(), pool))
        })
        .collect();
    let mut out = Placement::default();
    for pod in watch.pods.state() {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_ref());
        match node.and_then(|n| pools.get(n)).map(String::as_str) {
            Some(POOL) => out.preferred += 1,
            Some(FALLBACK) => out.fallback += 1,
            _ => {}
        }
    }
    out
}

#[allow(clippy::too_many_arguments)]
async fn scenario(
    system: System,
    full: Full,
    cp: &capstan_test_support::ControlPlane,
    upstream: &Upstream,
    catalog: &Catalog,
    timeout: Duration,
    run: &mut Run,
    slot: &mut Option<Controller>,
    placed: &mut Placement,
) -> Result<()> {
    let limit = (full == Full::Limit).then_some(LIMIT_CPU);
    let chaos = full.chaos();
    let preferred = |class_ref: Value, labels: Value| match &chaos {
        // The preferred pool's class is the chaos provider's, made below; the harness waits for
        // the pool to be Ready, so it is made over the kwok class first and moved after.
        Some(_) => pool(POOL, 100, class_ref, labels, None),
        None => pool(POOL, 100, class_ref, labels, limit),
    };
    let beside = Some((upstream, catalog));
    let started = start_controller(system, cp, "multi", beside, &preferred).await?;
    let (controller, client, names) = run.started(started, slot);
    let labels = json!({crate::lifecycle::RUN_LABEL: names.run});
    let class_ref = match system {
        System::Capstan => json!({"group": "capstan.dev", "kind": "NodeClass", "name": "default"}),
        System::Karpenter => {
            json!({"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"})
        }
    };
    let mut objects = vec![pool(FALLBACK, 10, class_ref, labels.clone(), None)];
    if let Some(parameters) = chaos {
        objects.push(json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "NodeClass",
            "metadata": {"name": "chaos", "labels": labels},
            "spec": {"provider": "chaos", "parameters": parameters},
        }));
        objects.push(pool(
            POOL,
            100,
            json!({"group": "capstan.dev", "kind": "NodeClass", "name": "chaos"}),
            labels,
            None,
        ));
    }
    apply(cp, objects).await?;
    // Both pools' catalogs are in before the pods come (the preferred one's provider answers
    // its catalog; only its launches fail).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let ns = cp.create_namespace_unique("multi").await?;
    let watch = Watch::start(&client, &ns).await?;
    println!(
        "== {}: {PODS} pods, the preferred pool full: {}",
        run.label,
        full.label()
    );
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &crate::bench::deployment(&names.run, "app", PODS, "1", "1Gi"),
        )
        .await?;
    Probe {
        watch: &watch,
        controller,
        catalog,
        timeout,
        floor: None,
    }
    .step(run, &format!("{PODS} pods"), PODS)
    .await?;
    *placed = placement(&watch);
    println!(
        "   pods on the preferred pool: {}, on the fallback pool: {}",
        placed.preferred, placed.fallback
    );
    Ok(())
}

fn table(runs: &[(Run, Placement)]) -> String {
    let mut t = Table::new(runs.iter().map(|(r, _)| r.label.clone()).collect());
    let mut row = |label: &str, digits: usize, f: &dyn Fn(&Run, &Placement) -> Option<f64>| {
        t.row(
            label.to_string(),
            digits,
            runs.iter().map(|(r, p)| f(r, p)).collect(),
        );
    };
    let step = |r: &Run| r.steps.first().cloned();
    row("all pods Running after (s)", 1, &|r, _| {
        step(r).and_then(|s| s.settled.map(|d| d.as_secs_f64()))
    });
    row("pods on the preferred pool", 0, &|r, p| {
        step(r).map(|_| p.preferred as f64)
    });
    row("pods on the fallback pool", 0, &|r, p| {
        step(r).map(|_| p.fallback as f64)
    });
    row("most nodes", 0, &|r, _| {
        step(r).map(|s| s.most_nodes as f64)
    });
    row("$/h at the last sample", 3, &|r, _| {
        step(r).and_then(|s| s.samples.last().map(|x| x.price))
    });
    row("controller CPU (s)", 1, &|r, _| {
        step(r).map(|s| s.cpu_seconds)
    });
    let mut out = t.render();
    out.push_str(&footer(
        runs.iter().map(|(r, _)| (r.label.as_str(), &r.finished)),
    ));
    out
}

#[tokio::test]
#[ignore = "a measurement: make bench-multi"]
async fn bench_multi_weighted_fallback() {
    let timeout = Duration::from_secs(env_or("CAPSTAN_BENCH_MULTI_TIMEOUT", 300));
    let systems = systems("CAPSTAN_BENCH_MULTI_SYSTEMS");
    let (upstream, catalog) = prepare(&systems);
    let mut cases: Vec<(System, Full)> = systems.iter().map(|s| (*s, Full::Limit)).collect();
    if systems.contains(&System::Capstan) {
        cases.push((System::Capstan, Full::OutOfCapacity));
        cases.push((System::Capstan, Full::Failing));
    }
    let mut runs = Vec::new();
    for (system, full) in cases {
        let mut placed = Placement::default();
        let mut run = run_on_own_control_plane(system, &upstream, async |cp, run, slot| {
            scenario(
                system,
                full,
                cp,
                &upstream,
                &catalog,
                timeout,
                run,
                slot,
                &mut placed,
            )
            .await
        })
        .await;
        run.label = format!("{} ({})", run.label, full.label());
        runs.push((run, placed));
    }
    report(
        "bench-multi",
        &format!(
            "{PODS} pods of 1 CPU, a preferred pool (weight 100) full, a fallback pool (weight 10)"
        ),
        &table(&runs),
        runs.iter().map(|(r, _)| &r.finished),
    );
}
