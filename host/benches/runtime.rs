//! Runtime benchmarks (`cargo bench -p capstan`):
//!
//! - `fresh-instance`: a `name()` call in a fresh instance, pooling vs on-demand allocation;
//! - `instance-types`: `get-instance-types` returning 1,000 types across the boundary vs the same
//!   Rust code (the `chaos-catalog` crate on the shared model's `CatalogBuilder`) called natively;
//!   the guest building them without returning them; the host checking and converting them for
//!   the scheduler;
//! - `load`: loading a precompiled component vs compiling it;
//! - `kwok`: the kwok provider built in Rust (`kwok.wasm`) next to the same provider in Python
//!   (`kwok-python.wasm`, componentize-py: CPython inside): a fresh-instance `name()`,
//!   `get-instance-types` for 1,000 types from NodeClass parameters, and loading the precompiled
//!   (cached) component; component size, compile time and memory per instance are printed.

// Benchmarks are test code: a broken setup should stop them loudly.
#![allow(clippy::expect_used)]

#[path = "support/guests.rs"]
mod guests;

use std::hint::black_box;
use std::time::{Duration, Instant};

use capstan::capability::Capabilities;
use capstan::catalog::from_catalog;
use capstan::provider::convert::catalog::CatalogView;
use capstan::runtime::cache::Precompiled;
use capstan::runtime::engine::{AllocatorChoice, EngineBuilder};
use capstan::runtime::types::{NodeClass, NodePool};
use capstan::runtime::{Limits, ProviderPre, Runtime};
use criterion::{Criterion, criterion_group, criterion_main};

/// The chaos fixture's catalog, built natively by the very code the guest runs (the
/// `chaos-catalog` crate on the shared model's `CatalogBuilder`), as the host's bindings.
mod native {
    use capstan::runtime::types::Catalog;

    pub fn catalog(count: usize) -> Catalog {
        chaos_catalog::catalog(count).into()
    }
}

fn runtime(allocator: AllocatorChoice, keep_resident: usize) -> Runtime {
    Runtime::builder()
        .engine(
            EngineBuilder::default()
                .allocator(allocator)
                .keep_resident(keep_resident),
        )
        .build()
        .expect("runtime")
}

fn provider(runtime: &Runtime, bytes: &[u8]) -> ProviderPre {
    runtime
        .load(bytes, Limits::default(), Capabilities::isolated("chaos"))
        .expect("chaos loads")
}

fn class(parameters: &str) -> NodeClass {
    NodeClass {
        name: "bench".into(),
        parameters: parameters.into(),
    }
}

fn pool() -> NodePool {
    NodePool {
        name: "bench".into(),
        requirements: Vec::new(),
        labels: Vec::new(),
        taints: Vec::new(),
        startup_taints: Vec::new(),
    }
}

fn tokio() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio")
}

/// Times `iters` sequential awaits of `call` inside one `block_on`.
fn timed<F, Fut>(rt: &tokio::runtime::Runtime, iters: u64, mut call: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    rt.block_on(async {
        let start = Instant::now();
        for _ in 0..iters {
            call().await;
        }
        start.elapsed()
    })
}

fn benches(c: &mut Criterion) {
    let bytes = guests::guest_wasm("chaos");
    let rt = tokio();

    let pooling = runtime(AllocatorChoice::Pooling, 0);
    let resident = runtime(AllocatorChoice::Pooling, 8 << 20);
    let on_demand = runtime(AllocatorChoice::OnDemand, 0);
    let pooled = provider(&pooling, &bytes);
    let kept = provider(&resident, &bytes);
    let unpooled = provider(&on_demand, &bytes);

    let mut group = c.benchmark_group("fresh-instance");
    group.bench_function("name/pooling", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, || async {
                black_box(pooled.name().await.expect("name"));
            })
        })
    });
    group.bench_function("name/pooling-keep-resident", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, || async {
                black_box(kept.name().await.expect("name"));
            })
        })
    });
    group.bench_function("name/on-demand", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, || async {
                black_box(unpooled.name().await.expect("name"));
            })
        })
    });
    group.finish();

    let mut group = c.benchmark_group("instance-types");
    let one = class(r#"{"mode":"catalog","count":1}"#);
    let thousand = class(r#"{"mode":"catalog","count":1000}"#);
    let pool = pool();
    group.bench_function("wasm/1", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, || async {
                black_box(pooled.get_instance_types(&pool, &one).await.expect("types"));
            })
        })
    });
    group.bench_function("wasm/1000", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, || async {
                let types = pooled
                    .get_instance_types(&pool, &thousand)
                    .await
                    .expect("types");
                assert_eq!(types.catalog.instance_types.len(), 1000);
                black_box(types);
            })
        })
    });
    let build_only = class(r#"{"mode":"build","count":1000}"#);
    group.bench_function("wasm/build-only-1000", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, || async {
                let types = pooled
                    .get_instance_types(&pool, &build_only)
                    .await
                    .expect("types");
                black_box(types);
            })
        })
    });
    group.bench_function("wasm/1000/pooling-keep-resident", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, || async {
                let types = kept
                    .get_instance_types(&pool, &thousand)
                    .await
                    .expect("types");
                black_box(types);
            })
        })
    });
    group.bench_function("wasm/1000/on-demand", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, || async {
                let types = unpooled
                    .get_instance_types(&pool, &thousand)
                    .await
                    .expect("types");
                black_box(types);
            })
        })
    });
    group.bench_function("native/1000", |b| {
        b.iter(|| {
            let types = native::catalog(black_box(1000));
            assert_eq!(types.instance_types.len(), 1000);
            black_box(types)
        })
    });
    // The allocations the host makes when it lifts the result, approximated by a deep clone.
    let catalog = native::catalog(1000);
    group.bench_function("native/clone-1000", |b| {
        b.iter(|| black_box(catalog.clone()))
    });
    // What the provisioner does with the answer: check the catalog, convert it to the scheduler's
    // types.
    group.bench_function("host/check-1000", |b| {
        b.iter(|| black_box(CatalogView::new(&catalog).expect("valid").len()))
    });
    group.bench_function("host/convert-1000", |b| {
        b.iter(|| black_box(from_catalog(&catalog).expect("convert")))
    });
    group.finish();

    let engine = pooling.engine().engine();
    let artifact = Precompiled::compile(engine, &bytes).expect("compile");
    let mut group = c.benchmark_group("load");
    group.sample_size(10);
    group.bench_function("deserialize-precompiled", |b| {
        b.iter(|| black_box(artifact.load(engine).expect("load")))
    });
    group.bench_function("compile", |b| {
        b.iter(|| {
            black_box(
                Precompiled::compile(engine, &bytes)
                    .and_then(|a| a.load(engine))
                    .expect("compile"),
            )
        })
    });
    group.finish();
}

/// kwok NodeClass parameters with `count` instance types (4 offerings each).
fn kwok_types(count: usize) -> String {
    let types: Vec<serde_json::Value> = (0..count)
        .map(|i| {
            serde_json::json!({
                "name": format!("bench-{i}"),
                "resources": { "cpu": (1 + i % 96).to_string(), "memory": format!("{}Gi", 2 + i % 384) },
                "offerings": [
                    { "zone": "zone-a", "capacityType": "spot", "price": 0.01 * (i + 1) as f64 },
                    { "zone": "zone-a", "capacityType": "on-demand", "price": 0.02 * (i + 1) as f64 },
                    { "zone": "zone-b", "capacityType": "spot", "price": 0.01 * (i + 1) as f64 },
                    { "zone": "zone-b", "capacityType": "on-demand", "price": 0.02 * (i + 1) as f64 },
                ],
            })
        })
        .collect();
    serde_json::json!({ "instanceTypes": types }).to_string()
}

fn kwok(c: &mut Criterion) {
    let rt = tokio();
    let runtime = runtime(AllocatorChoice::Pooling, 0);
    let engine = runtime.engine().engine();
    let pool = pool();
    let thousand = class(&kwok_types(1000));
    let mut group = c.benchmark_group("kwok");
    group.sample_size(10);
    for (language, file) in [("rust", "kwok"), ("python", "kwok-python")] {
        let bytes = guests::guest_wasm(file);
        let gzip =
            capstan::provider::source::encode(&bytes, capstan::provider::source::Compression::Gzip);
        let started = Instant::now();
        let artifact = Precompiled::compile(engine, &bytes).expect("compile");
        let compile = started.elapsed();
        let provider = runtime
            .load(&bytes, Limits::default(), Capabilities::isolated("kwok"))
            .expect("kwok loads");
        let started = Instant::now();
        let first = rt.block_on(provider.name()).expect("name");
        let first_call = started.elapsed();
        assert_eq!(first, "kwok");
        let types = rt
            .block_on(provider.get_instance_types(&pool, &thousand))
            .expect("types");
        assert_eq!(types.catalog.instance_types.len(), 1000);
        eprintln!(
            "kwok/{language}: component {} bytes ({} gzip), compile {compile:?}, first name() {first_call:?}, peak memory per instance {} bytes",
            bytes.len(),
            gzip.len(),
            provider.stats().peak_memory_bytes
        );
        group.bench_function(format!("{language}/name"), |b| {
            b.iter_custom(|iters| {
                timed(&rt, iters, || async {
                    black_box(provider.name().await.expect("name"));
                })
            })
        });
        group.bench_function(format!("{language}/instance-types-1000"), |b| {
            b.iter_custom(|iters| {
                timed(&rt, iters, || async {
                    let types = provider
                        .get_instance_types(&pool, &thousand)
                        .await
                        .expect("types");
                    black_box(types);
                })
            })
        });
        group.bench_function(format!("{language}/load-precompiled"), |b| {
            b.iter(|| black_box(artifact.load(engine).expect("load")))
        });
        eprintln!(
            "kwok/{language}: peak memory per instance over the runs {} bytes",
            provider.stats().peak_memory_bytes
        );
    }
    group.finish();
}

criterion_group!(runtime_benches, benches, kwok);
criterion_main!(runtime_benches);
