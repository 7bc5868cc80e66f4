//! A misbehaving call fails alone, with a typed error; the host and other calls carry on.

use std::time::{Duration, Instant};

use capstan::capability::Capabilities;
use capstan::provider::convert::catalog::CatalogView;
use capstan::runtime::{CallError, Limits};
use serde_json::json;

use crate::fixtures::{chaos, class, pool};

fn limits() -> Limits {
    Limits {
        cpu_time: Duration::from_secs(2),
        call_timeout: Duration::from_secs(10),
        ..Limits::default()
    }
}

#[tokio::test]
async fn name_and_catalog() {
    let provider = chaos(limits(), Capabilities::isolated("chaos"));
    assert_eq!(provider.name().await.unwrap(), "chaos");
    let types = provider
        .get_instance_types(&pool("p"), &class(json!({"mode": "catalog", "count": 7})))
        .await
        .unwrap();
    assert_eq!(types.catalog.instance_types.len(), 7);
    let view = CatalogView::new(&types.catalog).unwrap();
    let names: Vec<&str> = view.instance_types().map(|it| it.name).collect();
    assert_eq!(names[6], "chaos-7x");
    let last = view.instance_types().nth(6).unwrap();
    assert_eq!(last.offerings().len(), 5);
    let cpu = last.capacity().find(|a| a.name == "cpu").unwrap();
    assert_eq!(cpu.milli_value, 7000);
    // Shared strings cross the boundary once.
    assert_eq!(
        types
            .catalog
            .strings
            .iter()
            .filter(|s| *s == "amd64")
            .count(),
        1
    );
    let echo = provider
        .get_instance_types(&pool("my-pool"), &class(json!({})))
        .await
        .unwrap();
    let echo = CatalogView::new(&echo.catalog).unwrap();
    assert_eq!(echo.len(), 1);
    assert_eq!(echo.instance_types().next().unwrap().name, "my-pool");
}

#[tokio::test]
async fn trap_fails_only_that_call() {
    let provider = chaos(limits(), Capabilities::isolated("chaos"));
    let err = provider
        .get_instance_types(&pool("p"), &class(json!({"mode": "trap"})))
        .await
        .unwrap_err();
    match &err {
        CallError::Trap {
            function, stderr, ..
        } => {
            assert_eq!(*function, "get-instance-types");
            assert!(
                stderr.contains("chaos: trap requested"),
                "the panic message reaches the error: {stderr:?}"
            );
        }
        other => panic!("expected a trap, got {other:?}"),
    }
    // The next call on the same provider starts from a fresh instance.
    assert_eq!(provider.name().await.unwrap(), "chaos");
    let stats = provider.stats();
    assert_eq!(stats.failed, 1);
    assert_eq!(stats.in_flight, 0);
}

#[tokio::test]
async fn infinite_loop_is_stopped_by_the_cpu_limit() {
    let provider = chaos(
        Limits {
            cpu_time: Duration::from_millis(200),
            call_timeout: Duration::from_secs(20),
            ..Limits::default()
        },
        Capabilities::isolated("chaos"),
    );
    let started = Instant::now();
    let err = provider
        .get_instance_types(&pool("p"), &class(json!({"mode": "spin"})))
        .await
        .unwrap_err();
    assert!(
        matches!(err, CallError::CpuLimit { function: "get-instance-types", limit } if limit == Duration::from_millis(200)),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(provider.name().await.unwrap(), "chaos");
}

#[tokio::test]
async fn spinning_guest_does_not_starve_other_calls() {
    // A spinning guest yields to the executor every epoch tick, so on a single-threaded executor a
    // second call still completes while the first spins.
    let provider = chaos(
        Limits {
            cpu_time: Duration::from_secs(3),
            ..limits()
        },
        Capabilities::isolated("chaos"),
    );
    let spinner = {
        let provider = provider.clone();
        tokio::spawn(async move {
            provider
                .get_instance_types(&pool("p"), &class(json!({"mode": "spin"})))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    assert_eq!(provider.name().await.unwrap(), "chaos");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(
        spinner.await.unwrap(),
        Err(CallError::CpuLimit { .. })
    ));
}

#[tokio::test]
async fn memory_bomb_is_stopped_by_the_memory_limit() {
    let provider = chaos(
        Limits {
            memory_bytes: 16 << 20,
            ..limits()
        },
        Capabilities::isolated("chaos"),
    );
    let err = provider
        .get_instance_types(
            &pool("p"),
            &class(json!({"mode": "grow", "bytes": 256u64 << 20})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, CallError::MemoryLimit { function: "get-instance-types", limit } if limit == 16 << 20),
        "{err:?}"
    );
    // Below the limit the same mode works.
    let types = provider
        .get_instance_types(
            &pool("p"),
            &class(json!({"mode": "grow", "bytes": 1u64 << 20})),
        )
        .await
        .unwrap();
    assert_eq!(types.catalog.instance_types.len(), 1);
}

#[tokio::test]
async fn slow_host_call_hits_the_wall_clock_limit() {
    let provider = chaos(
        Limits {
            call_timeout: Duration::from_millis(300),
            ..limits()
        },
        Capabilities::isolated("chaos"),
    );
    let started = Instant::now();
    let err = provider
        .get_instance_types(
            &pool("p"),
            &class(json!({"mode": "sleep", "millis": 60_000})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, CallError::WallTimeout { function: "get-instance-types", limit } if limit == Duration::from_millis(300)),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // The host stays responsive; a short sleep is fine.
    provider
        .get_instance_types(&pool("p"), &class(json!({"mode": "sleep", "millis": 10})))
        .await
        .unwrap();
}

#[tokio::test]
async fn create_has_its_own_wall_clock_limit() {
    let provider = chaos(
        Limits {
            call_timeout: Duration::from_millis(1),
            create_timeout: Duration::from_secs(30),
            ..limits()
        },
        Capabilities::isolated("chaos"),
    );
    assert_eq!(
        provider.limits().wall_limit("create"),
        Duration::from_secs(30)
    );
    let claim = crate::fixtures::claim("c");
    // Even a fresh instance takes longer than 1 ms in a debug build under load, but create is
    // bounded by its own, longer limit.
    let created = provider
        .create(&claim, &class(json!({"mode": "ok"})))
        .await
        .unwrap();
    assert_eq!(created.provider_id.as_deref(), Some("chaos://c"));
}

#[tokio::test]
async fn provider_errors_are_typed() {
    let provider = chaos(limits(), Capabilities::isolated("chaos"));
    let err = provider.get("chaos://nothing").await.unwrap_err();
    assert!(
        matches!(
            err.provider_error(),
            Some(capstan::runtime::types::ProviderError::NotFound(_))
        ),
        "{err:?}"
    );
    assert_eq!(
        provider.stats().failed,
        0,
        "a typed error is not a failure of the call"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_calls_respect_the_concurrency_limit() {
    let provider = chaos(
        Limits {
            concurrency: 4,
            ..limits()
        },
        Capabilities::isolated("chaos"),
    );
    let started = Instant::now();
    let calls: Vec<_> = (0..64)
        .map(|i| {
            let provider = provider.clone();
            tokio::spawn(async move {
                provider
                    .get_instance_types(
                        &pool(&format!("pool-{i}")),
                        &class(json!({"mode": "sleep", "millis": 20})),
                    )
                    .await
            })
        })
        .collect();
    for call in calls {
        let types = call.await.unwrap().unwrap();
        assert_eq!(types.catalog.instance_types.len(), 1);
    }
    let stats = provider.stats();
    assert_eq!(stats.calls, 64);
    assert_eq!(stats.failed, 0);
    assert_eq!(stats.in_flight, 0);
    assert!(stats.peak_in_flight <= 4, "{stats:?}");
    assert_eq!(stats.peak_in_flight, 4, "the limit was reached: {stats:?}");
    // 64 calls of 20 ms, 4 at a time, cannot take less than 16 * 20 ms.
    assert!(
        started.elapsed() >= Duration::from_millis(320),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn waiting_for_a_slot_counts_against_the_wall_clock_limit() {
    let provider = chaos(
        Limits {
            concurrency: 1,
            call_timeout: Duration::from_millis(400),
            ..limits()
        },
        Capabilities::isolated("chaos"),
    );
    let sleep = |millis: u64| class(json!({"mode": "sleep", "millis": millis}));
    let busy = {
        let provider = provider.clone();
        let class = sleep(5_000);
        tokio::spawn(async move { provider.get_instance_types(&pool("p"), &class).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The slot frees at ~400 ms (the busy call's limit); this call then has ~100 ms of its own
    // 400 ms left, not enough for a 200 ms sleep.
    let started = Instant::now();
    let err = provider
        .get_instance_types(&pool("p"), &sleep(200))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            CallError::WallTimeout {
                function: "get-instance-types",
                ..
            }
        ),
        "{err:?}"
    );
    // Generous under load; the error kind above is the real check.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(
        busy.await.unwrap(),
        Err(CallError::WallTimeout { .. })
    ));
}

#[tokio::test]
async fn a_long_queue_is_refused_as_overloaded() {
    let provider = chaos(
        Limits {
            concurrency: 1,
            call_timeout: Duration::from_millis(400),
            ..limits()
        },
        Capabilities::isolated("chaos"),
    );
    // Ten 100 ms calls through one slot: about four fit in 400 ms; the rest wait out their whole
    // limit in the queue.
    let calls: Vec<_> = (0..10)
        .map(|_| {
            let provider = provider.clone();
            tokio::spawn(async move {
                provider
                    .get_instance_types(&pool("p"), &class(json!({"mode": "sleep", "millis": 100})))
                    .await
            })
        })
        .collect();
    let (mut ok, mut overloaded) = (0, 0);
    for call in calls {
        match call.await.unwrap() {
            Ok(_) => ok += 1,
            Err(CallError::Overloaded { function, reason }) => {
                assert_eq!(function, "get-instance-types");
                assert!(reason.contains("concurrency slots"), "{reason}");
                overloaded += 1;
            }
            Err(CallError::WallTimeout { .. }) => {}
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert!(ok >= 2, "ok {ok}, overloaded {overloaded}");
    assert!(overloaded >= 3, "ok {ok}, overloaded {overloaded}");
}

#[tokio::test]
async fn cache_is_shared_across_calls() {
    let caps = Capabilities::isolated("chaos");
    let provider = chaos(limits(), caps.clone());
    provider
        .validate_node_class(&class(
            json!({"mode": "cache", "key": "k", "set": "v1", "ttlMillis": 60_000}),
        ))
        .await
        .unwrap();
    let hit = provider
        .validate_node_class(&class(json!({"mode": "cache", "key": "k"})))
        .await
        .unwrap_err();
    assert!(hit.to_string().contains("cache-hit: v1"), "{hit}");
    let miss = provider
        .validate_node_class(&class(json!({"mode": "cache", "key": "other"})))
        .await
        .unwrap_err();
    assert!(miss.to_string().contains("cache-miss"), "{miss}");
    // A reload of the same provider that is handed the same cache sees the value; a new cache
    // does not.
    let reloaded = chaos(
        limits(),
        Capabilities::builder("chaos")
            .cache(caps.shared_cache())
            .build(),
    );
    let warm = reloaded
        .validate_node_class(&class(json!({"mode": "cache", "key": "k"})))
        .await
        .unwrap_err();
    assert!(warm.to_string().contains("cache-hit: v1"), "{warm}");
    let fresh = chaos(limits(), Capabilities::isolated("chaos"));
    let cold = fresh
        .validate_node_class(&class(json!({"mode": "cache", "key": "k"})))
        .await
        .unwrap_err();
    assert!(cold.to_string().contains("cache-miss"), "{cold}");
    assert_eq!(caps.metrics().snapshot().cache_hits, 1);
    assert_eq!(caps.metrics().snapshot().cache_misses, 1);
}
