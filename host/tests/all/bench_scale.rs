//! `make bench-scale`: Capstan beside Karpenter's own kwok controller at thousands of nodes, each
//! on a fresh control plane of its own (started with `capstan-cp supervise --scale`), one after
//! the other:
//!
//! 1. **scale-up**: one NodePool of 8-vCPU kwok types (Linux, on-demand and spot,
//!    `WhenEmptyOrUnderutilized`, `consolidateAfter: 0s`, budget `10%`) and `SCALE_PODS` pending
//!    pods in three Deployments (600m, 800m and 1 CPU; about ten pods a node), until every pod
//!    runs; the harness's share (pods created, pods bound) beside the controller's (claims
//!    created, launched);
//! 2. **at rest**: the controller's RSS, CPU seconds a minute and API requests a minute (kube-apiserver's
//!    audit log of the controller's user);
//! 3. **drift**: a label added to the pool's template drifts every node; until no node of before
//!    is left and every pod runs; the most nodes disrupting at once and the longest any pod waited;
//! 4. **scale to half**: the Deployments at half; until the price is within 5% of a fresh
//!    provisioning's (the scale-up's price, halved) and every pod runs;
//! 5. **delete all**: until no node is left.
//!
//! Every step also reports the controller's own timing of its disruption decisions in it (the
//! `karpenter_voluntary_disruption_decision_evaluation_duration_seconds` histogram both export,
//! read from `/metrics` before and after: [`crate::bench::evaluations`]).
//!
//! Knobs: `SCALE` (`2000`: 2,000 nodes and 20,000 pods, the default; `5000`: 5,000 and 50,000),
//! `SCALE_PODS` (pods; default ten a node), `CAPSTAN_BENCH_SCALE_SYSTEMS` (default
//! `capstan,karpenter`), `CAPSTAN_BENCH_SCALE_TIMEOUT` (seconds a step may take, default 1800),
//! `CAPSTAN_BENCH_SCALE_REST` (seconds at rest, default 120), `CAPSTAN_BENCH_SCALE_QUIET_REST=1`
//! (the pool's `consolidateAfter` is `Never` during the rest, set `CAPSTAN_BENCH_SCALE_QUIET_SETTLE`
//! seconds before it, default 120, so it measures a controller with nothing to do rather than one
//! still consolidating the scale-up). A step that does not finish in time
//! is reported as "more than" its timeout, and the next step starts from where it stopped.
//!
//! The small version, [`a_host_with_3000_pods_keeps_its_memory_per_pod_bounded`], runs in
//! `make test`: Capstan alone, 3,000 pods, its memory per pod against a bound.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use capstan_test_support::{ControlPlane, Options};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::bench::catalog::Catalog;
use crate::bench::controller::{
    Beside, Controller, Finished, POOL, Started, System, footer, on_own_control_plane, prepare,
    report, run_label, start_controller,
};
use crate::bench::evaluations::Summary;
use crate::bench::table::{Measure, Table};
use crate::bench::watch::Watch;
use crate::bench::{CONTROL_PLANE_ARGS, deployment, env_or, scale_deployments, systems};
use crate::lifecycle::Names;

/// The pods: three sizes (cpu, memory), as many of each; ten of them fill an 8-vCPU, 16 GiB node
/// on average.
const SIZES: [(&str, &str, &str); 3] = [
    ("s", "600m", "1200Mi"),
    ("m", "800m", "1600Mi"),
    ("l", "1", "2000Mi"),
];
/// The user both controllers (and the harness) reach the API server as; the audit log records its
/// requests.
const ADMIN_USER: &str = "capstan-admin";

/// Where a step got to.
#[derive(Clone, Debug, Default)]
struct Step {
    name: &'static str,
    /// Until the step's goal was reached; `None`: not in the time allowed.
    done: Option<Duration>,
    /// How long it was given.
    timeout: Duration,
    /// Named moments within the step (seconds from its start), e.g. "all claims created".
    marks: BTreeMap<&'static str, Duration>,
    most_disrupting: usize,
    longest_pending: Duration,
    cpu_seconds: f64,
    rss_kib: u64,
    /// The controller's disruption decisions in the step, as its `/metrics` times them.
    evaluations: Option<Summary>,
    /// Where the cluster stood when the step ended (done or not): pods running, nodes.
    end_running: usize,
    end_nodes: usize,
    /// Drift: the nodes of before still there when the step ended.
    end_old_nodes: Option<usize>,
}

impl Step {
    fn new(name: &'static str, timeout: Duration) -> Self {
        Self {
            name,
            timeout,
            ..Self::default()
        }
    }

    fn measure(&self) -> Measure {
        self.done
            .map_or(Measure::MoreThan(self.timeout.as_secs_f64()), |d| {
                Measure::Exact(d.as_secs_f64())
            })
    }
}

/// What the controller did at rest.
#[derive(Clone, Debug, Default)]
struct Rest {
    seconds: f64,
    cpu_seconds: f64,
    requests: usize,
    /// "verb resource" -> requests.
    by_kind: BTreeMap<String, usize>,
    rss_kib: u64,
}

#[derive(Debug, Default)]
struct Run {
    label: String,
    pods: usize,
    nodes: usize,
    price_full: f64,
    steps: Vec<Step>,
    rest: Option<Rest>,
    /// RSS once the pool was Ready, before any pod.
    rss_idle_kib: u64,
    /// CPU, peak RSS, load and error of the whole run.
    finished: Finished,
}

impl Run {
    fn step(&self, name: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.name == name)
    }
}

/// The scale: `SCALE` nodes (2,000 or 5,000, or any number) and `SCALE_PODS` pods, ten a node
/// unless set.
fn scale() -> (usize, usize) {
    let nodes: usize = env_or("SCALE", env_or("SCALE_NODES", 2000));
    let pods: usize = env_or("SCALE_PODS", nodes * 10);
    (nodes, pods)
}

/// `make bench-e2e`'s pool with 8-vCPU types only and a budget of 10% (Karpenter's default,
/// written out).
fn node_pool(node_class_ref: Value, labels: Value) -> Value {
    let mut pool = crate::bench::node_pool(node_class_ref, labels);
    if let Some(requirements) = pool["spec"]["template"]["spec"]["requirements"].as_array_mut() {
        requirements.push(
            json!({"key": "karpenter.kwok.sh/instance-cpu", "operator": "In", "values": ["8"]}),
        );
    }
    pool["spec"]["disruption"]["budgets"] = json!([{"nodes": "10%"}]);
    pool
}

/// The byte length of the audit log now (0 before it exists).
fn audit_offset(cp: &ControlPlane) -> u64 {
    std::fs::metadata(cp.dir().join("logs/audit.log")).map_or(0, |m| m.len())
}

/// The admin user's requests in the audit log after `from`, by verb and resource (and
/// subresource).
fn audited_requests(cp: &ControlPlane, from: u64) -> Result<BTreeMap<String, usize>> {
    let path = cp.dir().join("logs/audit.log");
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let tail = bytes.get(from as usize..).unwrap_or_default();
    let mut out = BTreeMap::new();
    for line in tail.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let Ok(event) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        if event["user"]["username"] != ADMIN_USER {
            continue;
        }
        let object = &event["objectRef"];
        let resource = match object["subresource"].as_str() {
            Some(sub) => format!("{}/{sub}", object["resource"].as_str().unwrap_or("?")),
            None => object["resource"].as_str().unwrap_or("?").to_owned(),
        };
        let key = format!("{} {resource}", event["verb"].as_str().unwrap_or("?"));
        *out.entry(key).or_default() += 1;
    }
    Ok(out)
}

/// Polls `goal` every 500 ms until it holds or `timeout`, keeping the step's counters: the
/// most nodes disrupting at once, the longest pending pod, the controller's CPU and RSS.
async fn observe(
    step: &mut Step,
    watch: &Watch,
    controller: &Controller,
    mut goal: impl FnMut(&Watch, Duration, &mut BTreeMap<&'static str, Duration>) -> bool,
) -> Result<()> {
    let started = Instant::now();
    let before = controller.usage();
    let evaluations = controller.evaluations();
    watch.longest_pending_since_last();
    loop {
        controller.check_alive()?;
        let elapsed = started.elapsed();
        step.most_disrupting = step.most_disrupting.max(watch.disrupting());
        if goal(watch, elapsed, &mut step.marks) {
            step.done = Some(elapsed);
            break;
        }
        if elapsed >= step.timeout {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    step.longest_pending = watch.longest_pending_since_last();
    step.end_running = watch.pods().0;
    step.end_nodes = watch.nodes.state().len();
    let after = controller.usage();
    step.cpu_seconds = after.cpu_seconds - before.cpu_seconds;
    step.rss_kib = after.rss_kib;
    step.evaluations = controller.evaluations().since(&evaluations);
    if let Some(e) = step.evaluations {
        println!(
            "   {}: {} disruption evaluations, mean {:.3} s, all within {} s, {:.0}% within 1 s",
            step.name,
            e.count,
            e.mean,
            e.longest_within,
            e.within_one_second * 100.0
        );
    }
    println!(
        "   {}: {}; {} pods running, {} nodes at the end; most disrupting {}; longest pending \
         {:.0?}; CPU {:.1} s; RSS {} MiB; {:?}",
        step.name,
        step.done.map_or_else(
            || format!("not done in {:?}", step.timeout),
            |d| format!("done in {d:.1?}")
        ),
        step.end_running,
        step.end_nodes,
        step.most_disrupting,
        step.longest_pending,
        step.cpu_seconds,
        step.rss_kib / 1024,
        step.marks
    );
    Ok(())
}

/// Sets `mark` the first time `reached`.
fn mark(
    marks: &mut BTreeMap<&'static str, Duration>,
    mark: &'static str,
    reached: bool,
    at: Duration,
) {
    if reached {
        marks.entry(mark).or_insert(at);
    }
}

/// NodeClaims with condition `type_` True.
fn claims_with(watch: &Watch, type_: &str) -> usize {
    watch
        .claims
        .state()
        .iter()
        .filter(|c| {
            c.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|x| x["type"] == type_ && x["status"] == "True")
        })
        .count()
}

fn pods_all_running(watch: &Watch, want: usize) -> bool {
    let (running, all) = watch.pods();
    running == want && all == want
}

/// The nodes' price from Karpenter's catalog (0 without one).
fn price(watch: &Watch, catalog: Option<&Catalog>) -> f64 {
    let Some(catalog) = catalog else {
        return 0.0;
    };
    watch
        .nodes
        .state()
        .iter()
        .filter_map(|n| catalog.price(n))
        .sum()
}

/// Steps 1 and 2 (scale-up and rest); `rest` of zero seconds skips step 2.
#[allow(clippy::too_many_arguments)]
async fn scale_up(
    run: &mut Run,
    cp: &ControlPlane,
    client: &Client,
    names: &Names,
    controller: &Controller,
    catalog: Option<&Catalog>,
    timeout: Duration,
    rest: Duration,
) -> Result<(Watch, Api<Deployment>)> {
    let ns = cp.create_namespace_unique("scale").await?;
    let watch = Watch::start(client, &ns).await?;
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let per_size = run.pods / SIZES.len();
    let total = per_size * SIZES.len();
    run.pods = total;
    run.rss_idle_kib = controller.usage().rss_kib;

    println!("== {}: {total} pods", run.label);
    for (name, cpu, memory) in SIZES {
        deployments
            .create(
                &PostParams::default(),
                &deployment(&names.run, name, per_size, cpu, memory),
            )
            .await?;
    }
    let mut step = Step::new("scale-up", timeout);
    observe(&mut step, &watch, controller, |w, at, marks| {
        let pods = w.pods.state();
        mark(marks, "pods created", pods.len() >= total, at);
        let bound = pods
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .count();
        mark(marks, "pods bound", bound >= total, at);
        // The claims settle once every pod is bound; their count is the controller's answer.
        let claims = w.claims.state().len();
        let launched = claims_with(w, "Launched");
        mark(
            marks,
            "claims launched",
            bound >= total && launched == claims,
            at,
        );
        pods_all_running(w, total)
    })
    .await?;
    run.nodes = watch.nodes.state().len();
    run.price_full = price(&watch, catalog);
    println!(
        "   {} nodes, {} claims, ${:.2}/h",
        run.nodes,
        watch.claims.state().len(),
        run.price_full
    );
    run.steps.push(step);

    if !rest.is_zero() {
        let quiet = env_or("CAPSTAN_BENCH_SCALE_QUIET_REST", 0) == 1;
        if quiet {
            // What the switch itself sets off (a command already under way, the claims'
            // conditions and verdicts rewritten once) is over before the rest is measured.
            set_consolidate_after(client, "Never").await?;
            let settle = Duration::from_secs(env_or("CAPSTAN_BENCH_SCALE_QUIET_SETTLE", 120));
            println!(
                "== {}: consolidateAfter Never; settling for {settle:?}",
                run.label
            );
            tokio::time::sleep(settle).await;
        }
        println!(
            "== {}: at rest for {rest:?}{}",
            run.label,
            if quiet {
                " (consolidateAfter: Never)"
            } else {
                ""
            }
        );
        let before = controller.usage();
        let offset = audit_offset(cp);
        tokio::time::sleep(rest).await;
        let after = controller.usage();
        let by_kind = audited_requests(cp, offset)?;
        let r = Rest {
            seconds: rest.as_secs_f64(),
            cpu_seconds: after.cpu_seconds - before.cpu_seconds,
            requests: by_kind.values().sum(),
            by_kind,
            rss_kib: after.rss_kib,
        };
        println!(
            "   CPU {:.1} s, {} requests {:?}, RSS {} MiB",
            r.cpu_seconds,
            r.requests,
            r.by_kind,
            r.rss_kib / 1024
        );
        run.rest = Some(r);
        if quiet {
            set_consolidate_after(client, "0s").await?;
        }
    }
    Ok((watch, deployments))
}

/// Sets the pool's `consolidateAfter`.
async fn set_consolidate_after(client: &Client, after: &str) -> Result<()> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool"));
    Api::<DynamicObject>::all_with(client.clone(), &ar)
        .patch(
            POOL,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"disruption": {"consolidateAfter": after}}})),
        )
        .await?;
    Ok(())
}

/// Steps 3 to 5.
async fn disrupt_and_delete(
    run: &mut Run,
    client: &Client,
    controller: &Controller,
    catalog: Option<&Catalog>,
    watch: &Watch,
    deployments: &Api<Deployment>,
    timeout: Duration,
) -> Result<()> {
    let total = run.pods;
    println!("== {}: drift", run.label);
    let before: HashSet<String> = watch.nodes.state().iter().map(|n| n.name_any()).collect();
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool"));
    Api::<DynamicObject>::all_with(client.clone(), &ar)
        .patch(
            POOL,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"template": {"metadata": {"labels": {"bench-drift": "1"}}}}}),
            ),
        )
        .await?;
    let old_nodes = |w: &Watch| {
        w.nodes
            .state()
            .iter()
            .filter(|n| before.contains(&n.name_any()))
            .count()
    };
    let mut step = Step::new("drift", timeout);
    observe(&mut step, watch, controller, |w, at, marks| {
        let old = old_nodes(w);
        mark(
            marks,
            "half the nodes replaced",
            old * 2 <= before.len(),
            at,
        );
        old == 0 && pods_all_running(w, total)
    })
    .await?;
    let old_left = old_nodes(watch);
    println!(
        "   drift: {old_left} of {} nodes of before left",
        before.len()
    );
    step.end_old_nodes = Some(old_left);
    run.steps.push(step);

    let half = total / SIZES.len() / 2;
    println!("== {}: scale to {}", run.label, half * SIZES.len());
    let target = run.price_full * (half * SIZES.len()) as f64 / total as f64 * 1.05;
    scale_deployments(deployments, SIZES.map(|s| s.0), half).await?;
    let mut step = Step::new("scale to half", timeout);
    observe(&mut step, watch, controller, |w, at, marks| {
        let running = pods_all_running(w, half * SIZES.len());
        mark(marks, "pods settled", running, at);
        running && price(w, catalog) <= target
    })
    .await?;
    run.steps.push(step);

    println!("== {}: delete all", run.label);
    for (name, ..) in SIZES {
        deployments.delete(name, &DeleteParams::default()).await?;
    }
    let mut step = Step::new("delete all", timeout);
    observe(&mut step, watch, controller, |w, at, marks| {
        mark(marks, "pods gone", w.pods.state().is_empty(), at);
        w.nodes.state().is_empty()
    })
    .await?;
    run.steps.push(step);
    Ok(())
}

/// The control plane both systems get: the benchmarks' client rates, `--scale`, and an audit
/// log of the admin user.
fn control_plane_options() -> Options {
    let mut extra_args: Vec<String> = CONTROL_PLANE_ARGS.iter().map(|s| s.to_string()).collect();
    extra_args.extend(["--scale".into(), "--audit-users".into(), ADMIN_USER.into()]);
    Options {
        extra_args,
        start_timeout: Duration::from_secs(300),
        ..Options::default()
    }
}

async fn run_system(
    system: System,
    beside: Beside<'_>,
    pods: usize,
    timeout: Duration,
    rest: Duration,
) -> Run {
    let (upstream, catalog) = beside;
    let mut run = Run {
        label: run_label(system, upstream),
        pods,
        ..Run::default()
    };
    let label = run.label.clone();
    let finished = on_own_control_plane(&label, control_plane_options(), async |cp, slot| {
        let beside = Some((upstream, catalog));
        let Started {
            controller,
            client,
            names,
            ..
        } = start_controller(system, cp, "scale", beside, &node_pool).await?;
        let controller = slot.insert(controller);
        let (watch, deployments) = scale_up(
            &mut run,
            cp,
            &client,
            &names,
            controller,
            Some(catalog),
            timeout,
            rest,
        )
        .await?;
        disrupt_and_delete(
            &mut run,
            &client,
            controller,
            Some(catalog),
            &watch,
            &deployments,
            timeout,
        )
        .await
    })
    .await;
    run.finished = finished;
    run
}

/// The controller's memory for each pod it caches, nodes and claims included: RSS at rest less
/// RSS before the pods, over the pods.
fn kib_per_pod(run: &Run) -> Option<f64> {
    let rest = run.rest.as_ref()?;
    (run.pods > 0).then(|| (rest.rss_kib as f64 - run.rss_idle_kib as f64) / run.pods as f64)
}

fn table(runs: &[Run]) -> String {
    let mut t = Table::new(runs.iter().map(|r| r.label.clone()).collect());
    let col = |f: &dyn Fn(&Run) -> Option<f64>| runs.iter().map(f).collect::<Vec<_>>();
    t.row("pods", 0, col(&|r| Some(r.pods as f64)));
    t.row(
        "nodes after the scale-up",
        0,
        col(&|r| (r.nodes > 0).then_some(r.nodes as f64)),
    );
    t.row(
        "$/h after the scale-up",
        2,
        col(&|r| (r.nodes > 0).then_some(r.price_full)),
    );
    let names = ["scale-up", "drift", "scale to half", "delete all"];
    for name in names {
        t.measures(
            format!("{name}: time (s)"),
            1,
            runs.iter()
                .map(|r| r.step(name).map(Step::measure))
                .collect(),
        );
        let marks: Vec<&'static str> = runs
            .iter()
            .filter_map(|r| r.step(name))
            .flat_map(|s| s.marks.keys().copied())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        for m in marks {
            t.row(
                format!("{name}: {m} (s)"),
                1,
                col(&|r| {
                    r.step(name)
                        .and_then(|s| s.marks.get(m))
                        .map(Duration::as_secs_f64)
                }),
            );
        }
        t.row(
            format!("{name}: pods running at its end"),
            0,
            col(&|r| r.step(name).map(|s| s.end_running as f64)),
        );
        t.row(
            format!("{name}: nodes at its end"),
            0,
            col(&|r| r.step(name).map(|s| s.end_nodes as f64)),
        );
        if name == "drift" {
            t.row(
                "drift: nodes of before left at its end",
                0,
                col(&|r| r.step(name).and_then(|s| s.end_old_nodes).map(|n| n as f64)),
            );
        }
        if name != "scale-up" {
            t.row(
                format!("{name}: most nodes disrupting at once"),
                0,
                col(&|r| r.step(name).map(|s| s.most_disrupting as f64)),
            );
        }
        if name != "delete all" {
            t.row(
                format!("{name}: longest a pod waited to run (s)"),
                0,
                col(&|r| r.step(name).map(|s| s.longest_pending.as_secs_f64())),
            );
        }
        t.row(
            format!("{name}: controller CPU (s)"),
            1,
            col(&|r| r.step(name).map(|s| s.cpu_seconds)),
        );
        t.row(
            format!("{name}: disruption evaluations, mean (ms)"),
            0,
            col(&|r| {
                r.step(name)
                    .and_then(|s| s.evaluations)
                    .map(|e| e.mean * 1000.0)
            }),
        );
        t.row(
            format!("{name}: disruption evaluations, all within (s)"),
            2,
            col(&|r| {
                r.step(name)
                    .and_then(|s| s.evaluations)
                    .map(|e| e.longest_within)
            }),
        );
    }
    t.row(
        "at rest: controller RSS (MiB)",
        0,
        col(&|r| r.rest.as_ref().map(|x| x.rss_kib as f64 / 1024.0)),
    );
    t.row(
        "at rest: controller CPU (s per minute)",
        2,
        col(&|r| r.rest.as_ref().map(|x| x.cpu_seconds * 60.0 / x.seconds)),
    );
    t.row(
        "at rest: API requests per minute",
        0,
        col(&|r| {
            r.rest
                .as_ref()
                .map(|x| x.requests as f64 * 60.0 / x.seconds)
        }),
    );
    t.row(
        "controller memory per pod, nodes included (KiB)",
        1,
        col(&kib_per_pod),
    );
    t.row(
        "controller CPU, total (s)",
        1,
        col(&|r| (!r.steps.is_empty()).then_some(r.finished.total_cpu_seconds)),
    );
    t.row(
        "controller peak RSS, VmHWM (MiB)",
        0,
        col(&|r| (r.finished.hwm_kib > 0).then_some(r.finished.hwm_kib as f64 / 1024.0)),
    );
    let mut out = t.render();
    for r in runs {
        if let Some(rest) = &r.rest {
            out.push_str(&format!(
                "{} at rest, requests: {:?}\n",
                r.label, rest.by_kind
            ));
        }
    }
    out.push_str(&footer(
        runs.iter().map(|r| (r.label.as_str(), &r.finished)),
    ));
    out
}

#[tokio::test]
#[ignore = "a measurement: make bench-scale"]
async fn bench_scale_capstan_beside_karpenter() {
    let (nodes, pods) = scale();
    let timeout = Duration::from_secs(env_or("CAPSTAN_BENCH_SCALE_TIMEOUT", 1800));
    let rest = Duration::from_secs(env_or("CAPSTAN_BENCH_SCALE_REST", 120));
    let systems = systems("CAPSTAN_BENCH_SCALE_SYSTEMS");
    let (upstream, catalog) = prepare(&systems);
    let mut runs = Vec::new();
    for system in systems {
        runs.push(run_system(system, (&upstream, &catalog), pods, timeout, rest).await);
    }
    report(
        "bench-scale",
        &format!("{nodes} nodes / {pods} pods"),
        &table(&runs),
        runs.iter().map(|r| &r.finished),
    );
}

/// The host's memory per cached pod, at 3,000 pods on about 300 nodes, stays under a bound: 47
/// KiB measured (debug build; 45 release), 89 before the snapshot shared the caches' pods and
/// Events were deduped and written in the background — the bound sits between. It runs alone
/// after the parallel suite: beside three other tests on two cores its control plane fell so far
/// behind (claims first reconciled 30–77 s after creation) that the node count meant nothing.
#[tokio::test]
#[ignore = "heavy: `make e2e` runs it alone after the parallel suite"]
async fn a_host_with_3000_pods_keeps_its_memory_per_pod_bounded() {
    const PODS: usize = 3000;
    const MAX_KIB_PER_POD: f64 = 64.0;
    let run = run_until_rest(PODS).await;
    assert!(run.finished.error.is_none(), "{:?}", run.finished.error);
    let step = run.step("scale-up").expect("the scale-up ran");
    assert!(step.done.is_some(), "3,000 pods did not all run: {step:?}");
    assert!(
        (250..=400).contains(&run.nodes),
        "about ten pods a node: {} nodes",
        run.nodes
    );
    let per_pod = kib_per_pod(&run).expect("measured at rest");
    println!(
        "{} nodes; RSS {} KiB before the pods, {} KiB at rest: {per_pod:.1} KiB per pod",
        run.nodes,
        run.rss_idle_kib,
        run.rest.as_ref().map_or(0, |r| r.rss_kib)
    );
    assert!(
        per_pod <= MAX_KIB_PER_POD,
        "the host holds {per_pod:.1} KiB per pod (bound {MAX_KIB_PER_POD}): {run:?}"
    );
}

/// Capstan alone through the scale-up and a minute at rest.
async fn run_until_rest(pods: usize) -> Run {
    let mut run = Run {
        label: "Capstan".into(),
        pods,
        ..Run::default()
    };
    let cp = ControlPlane::start(control_plane_options())
        .await
        .expect("control plane");
    let result = async {
        let Started {
            controller,
            client,
            names,
            ..
        } = start_controller(System::Capstan, &cp, "scale", None, &node_pool).await?;
        let outcome = scale_up(
            &mut run,
            &cp,
            &client,
            &names,
            &controller,
            None,
            Duration::from_secs(600),
            Duration::from_secs(60),
        )
        .await;
        controller.stop();
        outcome.map(|_| ())
    }
    .await;
    if let Err(e) = result {
        run.finished.error = Some(format!("{e:#}"));
    }
    let _ = cp.stop();
    run
}
