//! The compiled-component cache.

use std::path::PathBuf;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use capstan::runtime::cache::{CacheKey, ComponentCache};
use capstan::runtime::{CacheOutcome, Runtime};

use crate::fixtures::{chaos_bytes, runtime};

fn temp_dir(name: &str) -> (PathBuf, Dir) {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("cache-tests")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    std::fs::create_dir_all(&path).unwrap();
    let dir = Dir::open_ambient_dir(&path, ambient_authority()).unwrap();
    (path, dir)
}

#[test]
fn miss_then_hit_then_recompile_on_corruption() {
    let engine = runtime().engine().engine();
    let (path, dir) = temp_dir("corrupt");
    let cache = ComponentCache::new(dir);
    let bytes = chaos_bytes();

    let (_, outcome) = cache.load_or_compile(engine, bytes).unwrap();
    assert_eq!(outcome, CacheOutcome::Miss);
    assert!(cache.contains(engine, bytes));
    let (_, outcome) = cache.load_or_compile(engine, bytes).unwrap();
    assert_eq!(outcome, CacheOutcome::Hit);

    // Flip a byte in the middle of the artifact: the digest catches it and it is recompiled.
    let file = path.join(CacheKey::new(engine, bytes).file_name());
    let mut data = std::fs::read(&file).unwrap();
    let middle = data.len() / 2;
    data[middle] ^= 0xff;
    std::fs::write(&file, &data).unwrap();
    let (_, outcome) = cache.load_or_compile(engine, bytes).unwrap();
    assert_eq!(outcome, CacheOutcome::Replaced);
    let (_, outcome) = cache.load_or_compile(engine, bytes).unwrap();
    assert_eq!(outcome, CacheOutcome::Hit);

    // Truncated to nothing: also recompiled.
    std::fs::write(&file, b"").unwrap();
    let (_, outcome) = cache.load_or_compile(engine, bytes).unwrap();
    assert_eq!(outcome, CacheOutcome::Replaced);

    // No temporary files are left behind.
    let names: Vec<_> = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].ends_with(".cwasm"));
}

#[test]
fn key_depends_on_bytes_and_engine() {
    let engine = runtime().engine().engine();
    let a = CacheKey::new(engine, b"one");
    let b = CacheKey::new(engine, b"two");
    assert_ne!(a.component_sha256, b.component_sha256);
    assert_eq!(a.engine, b.engine);
    assert_eq!(a.component_sha256.len(), 64);

    // An engine whose code generation differs gets another digest.
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true).epoch_interruption(false);
    let other = wasmtime::Engine::new(&config).unwrap();
    let c = CacheKey::new(&other, b"one");
    assert_eq!(c.component_sha256, a.component_sha256);
    assert_ne!(c.engine, a.engine);
    assert_ne!(c.file_name(), a.file_name());
}

#[tokio::test]
async fn runtime_uses_the_cache() {
    let (_path, dir) = temp_dir("runtime");
    let runtime = Runtime::builder()
        .engine(
            capstan::runtime::EngineBuilder::default()
                .allocator(capstan::runtime::AllocatorChoice::OnDemand),
        )
        .cache_dir(dir)
        .build()
        .unwrap();
    let first = runtime.compile(chaos_bytes()).unwrap();
    assert_eq!(first.outcome, CacheOutcome::Miss);
    let second = runtime.compile(chaos_bytes()).unwrap();
    assert_eq!(second.outcome, CacheOutcome::Hit);
    let provider = runtime
        .instantiate_pre(
            &second,
            capstan::runtime::Limits::default(),
            capstan::capability::Capabilities::isolated("chaos"),
        )
        .unwrap();
    assert_eq!(provider.name().await.unwrap(), "chaos");
}
