//! Scheduling throughput on Karpenter's `BenchmarkScheduling` inputs
//! (`pkg/controllers/provisioning/scheduling/scheduling_benchmark_test.go`):
//!
//! - 400 instance types as `fake.InstanceTypes(400)` makes them: type `i` has `i+1` vCPU,
//!   `2(i+1)` GiB and `10(i+1)` pods, 100m/10Mi kube-reserved, five offerings (spot in test-zone-1
//!   and -2, on-demand in test-zone-1, -2 and -3) priced `0.1·vCPU + 0.1·GB`, and the fake
//!   provider's labels (arch, os, zone, capacity type, `size`, `special`, `integer`).
//! - One default NodePool (Karpenter gives it 10,000,000 CPU / 10,000,000Gi limits, i.e. none);
//!   optionally (`diverse_min_values`) `instance-type Exists minValues 50`, which is our
//!   addition: v1.15.0's benchmark has no minValues variant.
//! - `makeDiversePods(n)` as in v1.15.0: n/5 each of generic pods, zonal topology spread, hostname
//!   topology spread (maxSkew 1, DoNotSchedule, own label `my-label` and selector `my-label`
//!   drawn independently from a..g), zonal pod affinity (self-affinity: the selector is the pod's
//!   own `my-affininity` label, one draw from a..g), and hostname anti-affinity (`app: nginx`,
//!   all repelling each other); the remainder generic. CPU requests drawn from
//!   {100m, 250m, 500m, 1, 1.5}, memory from {100, 256, 512, 1024, 2048, 4096}Mi. Karpenter uses
//!   Go's `math/rand` seeded with 42 shared across calls; we use a fixed-seed SplitMix64, so the
//!   draws follow the same distributions but are not the same sequence.
//!
//! Node counts. Karpenter v1.15.0 launches 200 nodes for 1,000 pods and 1,000 for 5,000 on this
//! machine (`tests/bench-baseline/karpenter.sh`); we launch the same. The count is set entirely
//! by the hostname anti-affinity pods: n/5 of them, one per node, and every other pod packs into
//! the nodes they force (each of those may grow to any of the 400 sizes). An earlier port of
//! these inputs had six kinds (n/6 each, adding a hostname pod affinity kind that v1.15.0 does not
//! have) and drew affinity selectors independently of the pod's own label; with n/6
//! anti-affinity pods it launched 166 and 833 nodes — the difference was the input, not the
//! scheduler. The placements are checked constraint by constraint (resources per instance-type
//! option, node selectors, anti-affinity, pod affinity, hostname and zone spread) by the
//! validator tests in `host/src/scheduling/validate_tests.rs`, on both the v1.15.0 inputs and the
//! old six-kind ones: no violations.
//!
//! Methodology, Karpenter's and ours: Karpenter runs `go test -tags=test_performance -run=XXX
//! -bench=.` (`BenchmarkScheduling{1,50,100,500,1000,2000,5000}`, `-count=10` and `benchstat` to
//! compare) and reports `pods/sec = len(pods) / (elapsed / b.N)`, timing only `scheduler.Solve`:
//! the scheduler and its topology are built before the timer starts. Here criterion times all of
//! `solve`, setup (instance-type indexing, topology groups, domains) included, and reports
//! throughput in pods (elements) per second.
//!
//! Karpenter's own published numbers for this benchmark (kubernetes-sigs/karpenter PR #2486,
//! November 2025, Apple M3 Pro, benchstat n=10, before that PR's change, on the revision of the
//! benchmark current then, which also has 10000/20000-pod variants): 100 pods 76.7 ms,
//! 500 388 ms, 1000 777 ms, 2000 1.54 s, 5000 3.74 s — about 1,300 pods/s at every size. (Older
//! numbers, e.g. 19 ms for 5000 pods in PR #852, predate PR #1930, which stopped the benchmark
//! from bailing out early on NodePool limits: those runs report 5 nodes for 5000 pods.)
//!
//! Sizes: 1, 100, 500, 1,000, 2,000, 5,000 and 20,000 pods (the 20,000-pod case takes minutes
//! with criterion's 10 samples; filter it out with e.g. `-- 'diverse/(1|100|1000)$'`).
//!
//! Devices (`scheduling/devices/N` beside `scheduling/devices_baseline/N`, our addition: Karpenter
//! v1.15.0 has no DRA benchmark): the same 400 types, every tenth carrying 1, 2, 4 or 8 GPUs as
//! one ResourceSlice template, and N pods of 500m/1Gi each asking through a ResourceClaim of its
//! own for 1, 2, 4 or 8 GPUs of a DeviceClass with a CEL selector; the baseline is the same pods
//! without claims, so the ratio of the two is what devices cost the solver.
//!
//! Run with `cargo bench -p capstan --bench scheduling`. On a machine busy with other work,
//! `CAPSTAN_BENCH_CPU=1 cargo bench -p capstan --bench scheduling [-- <filter>]` times solves by
//! the bench thread's on-CPU time instead of criterion's wall clock (see `cpu_time_run`).

#![allow(clippy::expect_used)] // a benchmark: a broken fixture should stop it

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use capstan::scheduling::devices::PodDevices;
use capstan::scheduling::{
    InstanceType, LabelSelector, Namespaces, NodeInclusionPolicy, NodePoolView, Offering, Pod,
    PodAffinityTerm, Requirement, Requirements, Resources, SchedulingInput, SchedulingResult,
    TopologySpreadConstraint, WhenUnsatisfiable, solve,
};
use capstan_dra::{
    AttributeValue, ClaimKey, ClaimRequests, Device, DeviceClasses, ResourceSliceTemplate,
    SelectorCache,
};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use k8s_openapi::api::resource::v1::ResourceClaimSpec;

#[path = "support/karpenter_inputs.rs"]
mod karpenter_inputs;
use karpenter_inputs::{diverse_pods_v1_15, fingerprint, instance_types};

fn input(count: usize, min_values: bool) -> SchedulingInput {
    let mut pool = NodePoolView::new("default", instance_types(400));
    if min_values {
        pool.requirements
            .add(Requirement::exists("node.kubernetes.io/instance-type").with_min_values(Some(50)));
    }
    SchedulingInput {
        pods: diverse_pods_v1_15(count),
        node_pools: vec![pool],
        ..SchedulingInput::default()
    }
}

/// Type `i` of `types`, with `1 << (i / 10 % 4)` GPUs when `i` is a multiple of ten.
fn with_gpus(types: &[InstanceType]) -> Arc<[InstanceType]> {
    types
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut t = t.clone();
            if i % 10 == 0 {
                let count = 1usize << (i / 10 % 4);
                t.devices = vec![Arc::new(ResourceSliceTemplate {
                    driver: "gpu.example.com".to_owned(),
                    pool: "gpus".to_owned(),
                    devices: (0..count)
                        .map(|d| Device {
                            name: format!("gpu-{d}"),
                            attributes: BTreeMap::from([(
                                "type".to_owned(),
                                AttributeValue::String("gpu".to_owned()),
                            )]),
                            capacity: BTreeMap::new(),
                            allow_multiple_allocations: false,
                            consumes_counters: Vec::new(),
                        })
                        .collect(),
                    shared_counters: Vec::new(),
                })];
            }
            t
        })
        .collect()
}

/// `count` pods of 500m/1Gi; with `devices`, pod `i` asks for `1 << (i % 4)` GPUs through a
/// claim of its own.
fn device_input(count: usize, devices: bool) -> SchedulingInput {
    let mut classes = DeviceClasses::new();
    classes.insert(
        "gpu",
        vec!["device.driver == \"gpu.example.com\" && device.attributes[\"gpu.example.com\"].type == \"gpu\"".to_owned()],
    );
    let mut cache = SelectorCache::new();
    let pods = (0..count)
        .map(|i| {
            let mut pod = Pod::new("default", format!("p{i}"), Resources::new(500, 1 << 30, 0));
            if devices {
                let spec: ResourceClaimSpec = serde_json::from_value(serde_json::json!(
                    {"devices": {"requests": [{"name": "gpus", "exactly":
                        {"deviceClassName": "gpu", "count": 1 << (i % 4)}}]}}
                ))
                .expect("a valid claim spec");
                let claim = ClaimRequests::from_spec(
                    ClaimKey::new("default", format!("c{i}")),
                    &spec,
                    &classes,
                    &mut cache,
                )
                .expect("a valid claim");
                pod.devices = PodDevices {
                    claims: vec![Arc::new(claim)],
                    pinned_to: None,
                };
            }
            pod
        })
        .collect();
    SchedulingInput {
        pods,
        node_pools: vec![NodePoolView::new(
            "default",
            with_gpus(&instance_types(400)),
        )],
        ..SchedulingInput::default()
    }
}

fn bench_devices(c: &mut Criterion) {
    for (name, devices) in [("devices_baseline", false), ("devices", true)] {
        let mut group = c.benchmark_group(format!("scheduling/{name}"));
        group.sample_size(10);
        group.warm_up_time(Duration::from_secs(1));
        group.measurement_time(Duration::from_secs(5));
        for count in [100usize, 500, 1000] {
            let input = device_input(count, devices);
            let result = solve(&input);
            eprintln!(
                "{name}/{count}: {} new nodes, {} unschedulable",
                result.new_claims.len(),
                result.unschedulable.len(),
            );
            group.throughput(Throughput::Elements(count as u64));
            group.bench_with_input(BenchmarkId::from_parameter(count), &input, |b, input| {
                b.iter(|| black_box(solve(black_box(input))));
            });
        }
        group.finish();
    }
}

fn bench(c: &mut Criterion) {
    for (name, min_values, sizes) in [
        (
            "diverse",
            false,
            &[1usize, 100, 500, 1000, 2000, 5000, 20000][..],
        ),
        ("diverse_min_values", true, &[1000, 5000][..]),
    ] {
        let mut group = c.benchmark_group(format!("scheduling/{name}"));
        group.sample_size(10);
        group.warm_up_time(Duration::from_secs(1));
        group.measurement_time(Duration::from_secs(5));
        for &count in sizes {
            let input = input(count, min_values);
            let result = solve(&input);
            let placed: usize = result.new_claims.iter().map(|c| c.pods.len()).sum();
            eprintln!(
                "{name}/{count}: {placed} pods on {} new nodes, {} unschedulable, placements {:016x}",
                result.new_claims.len(),
                result.unschedulable.len(),
                fingerprint(&result)
            );
            group.throughput(Throughput::Elements(count as u64));
            group.bench_with_input(BenchmarkId::from_parameter(count), &input, |b, input| {
                b.iter(|| black_box(solve(black_box(input))));
            });
        }
        group.finish();
    }
}

/// On-CPU nanoseconds of this thread so far (`/proc/thread-self/schedstat`, Linux).
fn thread_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

/// `CAPSTAN_BENCH_CPU=1`: instead of criterion's wall-clock samples, time solves by this
/// thread's on-CPU time, which a machine busy with other work disturbs far less than wall time.
/// The kernel accounts it in ticks (a few ms), so each of 5 batches solves until it has used
/// 400 ms of CPU; prints the mean and spread of the batches' pods/s per size.
fn cpu_time_run() {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    for (name, min_values, sizes) in [
        (
            "diverse",
            false,
            &[1usize, 100, 500, 1000, 2000, 5000, 20000][..],
        ),
        ("diverse_min_values", true, &[1000, 5000][..]),
    ] {
        for &count in sizes {
            let id = format!("scheduling/{name}/{count}");
            if !filter.is_empty() && !filter.iter().any(|f| id.contains(f.as_str())) {
                continue;
            }
            let input = input(count, min_values);
            let mut rates = Vec::new();
            for _ in 0..5 {
                let Some(start) = thread_cpu_ns() else {
                    eprintln!("no /proc/thread-self/schedstat: CPU-time mode needs Linux");
                    return;
                };
                let (mut solves, mut spent) = (0u64, 0u64);
                while spent < 400_000_000 {
                    black_box(solve(black_box(&input)));
                    solves += 1;
                    spent = thread_cpu_ns().unwrap_or(u64::MAX).saturating_sub(start);
                }
                rates.push((solves * count as u64) as f64 / (spent as f64 / 1e9));
            }
            let mean = rates.iter().sum::<f64>() / rates.len() as f64;
            let (lo, hi) = rates
                .iter()
                .fold((f64::MAX, f64::MIN), |(l, h), &r| (l.min(r), h.max(r)));
            println!(
                "{id}: {mean:.0} pods/s on-CPU (5 batches of 400 ms: {lo:.0}..{hi:.0}), {:.3} ms per solve",
                count as f64 / mean * 1e3
            );
        }
    }
}

criterion_group!(benches, bench, bench_devices);

fn main() {
    if std::env::var_os("CAPSTAN_BENCH_CPU").is_some_and(|v| v == "1") {
        cpu_time_run();
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
