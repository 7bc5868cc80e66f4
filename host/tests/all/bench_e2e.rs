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
//! and peak RSS (`VmHWM`), then prints both systems side by side with the ratios, and each
//! step's cost floor (`capstan::scheduling::floor`: no placement of the step's pods on the
//! catalog costs less) with how far above it each system was.
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

use std::time::{Duration, Instant};

use anyhow::Result;
use capstan::scheduling::floor::{Shape, floor};
use capstan::scheduling::resources::Resources;
use capstan_test_support::{ControlPlane, Options};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams, PostParams};

use crate::bench::catalog::Catalog;
use crate::bench::controller::{
    Controller, Finished, Started, System, Upstream, footer, on_own_control_plane, prepare, report,
    run_label, start_controller,
};
use crate::bench::table::Table;
use crate::bench::watch::{Sample, Watch};
use crate::bench::{CONTROL_PLANE_ARGS, env_or, scale_deployments, systems};

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

pub(crate) fn samples() -> Vec<u64> {
    std::env::var("CAPSTAN_BENCH_E2E_SAMPLES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .filter(|v: &Vec<u64>| !v.is_empty())
        .unwrap_or_else(|| SAMPLES.to_vec())
}

/// One step of the scenario.
#[derive(Clone, Debug, Default)]
pub(crate) struct Step {
    pub(crate) name: String,
    /// Until the pods settled: all Running, or all gone.
    pub(crate) settled: Option<Duration>,
    pub(crate) samples: Vec<Sample>,
    pub(crate) most_nodes: usize,
    /// The cost floor of the pods the step leaves ([`capstan::scheduling::floor`]), $/h.
    pub(crate) floor: Option<f64>,
    pub(crate) cpu_seconds: f64,
    /// VmHWM at the end of the step.
    pub(crate) hwm_kib: u64,
    pub(crate) rss_kib: u64,
}

/// One system's run.
#[derive(Debug, Default)]
pub(crate) struct Run {
    pub(crate) label: String,
    /// Until the controller answered `/readyz`.
    pub(crate) ready: Option<Duration>,
    pub(crate) startup_cpu_seconds: f64,
    pub(crate) steps: Vec<Step>,
    /// CPU, peak RSS, load and error of the whole run.
    pub(crate) finished: Finished,
}

impl Run {
    /// Records a controller started for this run (its time to `/readyz`, its CPU so far) and
    /// keeps it in `slot`: the controller, an admin client and the run's names.
    pub(crate) fn started<'s>(
        &mut self,
        started: Started,
        slot: &'s mut Option<Controller>,
    ) -> (&'s Controller, kube::Client, crate::lifecycle::Names) {
        let Started {
            controller,
            ready,
            client,
            names,
        } = started;
        self.ready = Some(ready);
        let controller = slot.insert(controller);
        self.startup_cpu_seconds = controller.usage().cpu_seconds;
        (controller, client, names)
    }
}

/// Watches a step: samples at [`SAMPLES`], until the pods settle (`running` Running and no
/// other pod) and the last sample is taken, or `timeout`.
pub(crate) async fn observe(
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

/// The scenario on one system, on a control plane of its own.
async fn run_system(
    system: System,
    upstream: &Upstream,
    catalog: &Catalog,
    pods: usize,
    timeout: Duration,
) -> Run {
    run_on_own_control_plane(system, upstream, async |cp, run, slot| {
        scenario(system, cp, upstream, catalog, pods, timeout, run, slot).await
    })
    .await
}

/// `scenario` on `system`, on a fresh control plane of its own (with [`CONTROL_PLANE_ARGS`]):
/// the run it records, with how it finished.
pub(crate) async fn run_on_own_control_plane(
    system: System,
    upstream: &Upstream,
    scenario: impl AsyncFnOnce(&ControlPlane, &mut Run, &mut Option<Controller>) -> Result<()>,
) -> Run {
    let mut run = Run {
        label: run_label(system, upstream),
        ..Run::default()
    };
    let options = Options {
        extra_args: CONTROL_PLANE_ARGS.iter().map(|s| s.to_string()).collect(),
        ..Options::default()
    };
    let label = run.label.clone();
    let finished = on_own_control_plane(&label, options, async |cp, slot| {
        scenario(cp, &mut run, slot).await
    })
    .await;
    run.finished = finished;
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
    let beside = Some((upstream, catalog));
    let started = start_controller(system, cp, "bench", beside, &crate::bench::node_pool).await?;
    let (controller, client, names) = run.started(started, slot);
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
                &crate::bench::deployment(&names.run, name, per_size, cpu, memory),
            )
            .await?;
    }
    let shapes = catalog.shapes();
    let floor = |pods: usize| size_mix_floor(pods, &shapes);
    let probe = Probe {
        watch: &watch,
        controller,
        catalog,
        timeout,
        floor: Some(&floor),
    };
    probe.step(run, &format!("{total} pods"), total).await?;
    halve_then_delete(run, &deployments, &SIZES.map(|s| s.0), per_size, &probe).await
}

/// The cost floor of `pods` pods spread evenly over [`SIZES`] on `shapes` (`None` when it cannot
/// be worked out: printed).
pub(crate) fn size_mix_floor(pods: usize, shapes: &[Shape]) -> Option<f64> {
    let per_size = pods / SIZES.len();
    let mut requests = Vec::with_capacity(pods);
    for (_, cpu, memory) in SIZES {
        let request = Resources::parse([("cpu", cpu), ("memory", memory)]).ok()?;
        requests.extend(std::iter::repeat_n(request, per_size));
    }
    floor(&requests, shapes)
        .map_err(|err| println!("   no cost floor: {err}"))
        .ok()
        .map(|f| f.price)
}

/// What a step is observed with: the watches, the controller, the prices and how long to wait.
pub(crate) struct Probe<'a> {
    pub(crate) watch: &'a Watch,
    pub(crate) controller: &'a Controller,
    pub(crate) catalog: &'a Catalog,
    pub(crate) timeout: Duration,
    /// The cost floor of a step that leaves this many pods, if known.
    pub(crate) floor: Option<&'a dyn Fn(usize) -> Option<f64>>,
}

impl Probe<'_> {
    /// Observes a step until `want` pods run, prints it and adds it to `run`; whether it settled.
    pub(crate) async fn step(&self, run: &mut Run, name: &str, want: usize) -> Result<bool> {
        let mut step = observe(
            name,
            want,
            self.watch,
            self.controller,
            self.catalog,
            self.timeout,
        )
        .await?;
        step.floor = self.floor.and_then(|floor| floor(want));
        print_step(&step);
        let settled = step.settled.is_some();
        run.steps.push(step);
        Ok(settled)
    }
}

/// The last two steps: Deployments `names` of `per` pods each scaled to half, then deleted.
pub(crate) async fn halve_then_delete(
    run: &mut Run,
    deployments: &Api<Deployment>,
    names: &[&str],
    per: usize,
    probe: &Probe<'_>,
) -> Result<()> {
    let half = per / 2;
    let pods = half * names.len();
    println!("== {}: scale to {pods} pods", run.label);
    scale_deployments(deployments, names.iter().copied(), half).await?;
    probe.step(run, &format!("scale to {pods}"), pods).await?;
    println!("== {}: delete all", run.label);
    for name in names {
        deployments.delete(name, &DeleteParams::default()).await?;
    }
    probe.step(run, "delete all", 0).await?;
    Ok(())
}

pub(crate) fn print_step(step: &Step) {
    let settled = step.settled.map_or_else(
        || "not settled".to_string(),
        |d| format!("settled in {d:.1?}"),
    );
    let floor = step
        .floor
        .map(|f| format!("; cost floor ${f:.3}/h"))
        .unwrap_or_default();
    println!(
        "   {}: {settled}; CPU {:.1} s; VmHWM {} MiB{floor}",
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

pub(crate) fn table(runs: &[Run]) -> String {
    let mut t = Table::new(runs.iter().map(|r| r.label.clone()).collect());
    let mut row = |label: String, digits: usize, f: &dyn Fn(&Run) -> Option<f64>| {
        t.row(label, digits, runs.iter().map(f).collect());
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
            row(format!("{name}: above the floor at +{at} s (%)"), 1, &|r| {
                let s = step(r)?;
                let floor = s.floor.filter(|f| *f > 0.0)?;
                s.samples.get(j).map(|x| (x.price / floor - 1.0) * 100.0)
            });
        }
        row(format!("{name}: cost floor ($/h)"), 3, &|r| {
            step(r).and_then(|s| s.floor)
        });
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
        (!r.steps.is_empty()).then_some(r.finished.total_cpu_seconds)
    });
    row("controller peak RSS, VmHWM (MiB)".into(), 0, &|r| {
        (r.finished.hwm_kib > 0).then_some(r.finished.hwm_kib as f64 / 1024.0)
    });
    let mut out = t.render();
    out.push_str(&footer(
        runs.iter().map(|r| (r.label.as_str(), &r.finished)),
    ));
    out
}

#[tokio::test]
#[ignore = "a measurement: make bench-e2e"]
async fn bench_e2e_capstan_beside_karpenter() {
    let pods: usize = env_or("CAPSTAN_BENCH_E2E_PODS", 1000);
    let timeout = Duration::from_secs(env_or("CAPSTAN_BENCH_E2E_TIMEOUT", 900));
    let systems = systems("CAPSTAN_BENCH_E2E_SYSTEMS");
    let (upstream, catalog) = prepare(&systems);
    let mut runs = Vec::new();
    for system in systems {
        runs.push(run_system(system, &upstream, &catalog, pods, timeout).await);
    }
    report(
        "bench-e2e",
        &format!(
            "{pods} pods, then {}, then none",
            pods / SIZES.len() / 2 * SIZES.len()
        ),
        &table(&runs),
        runs.iter().map(|r| &r.finished),
    );
}
