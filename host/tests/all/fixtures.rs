//! Guest fixtures (`kwok.wasm`, `chaos.wasm`, `cloudstack.wasm`, ...), built once per test binary with
//! `providers-wasm/build.sh`, and a runtime shared by the tests.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use capstan::capability::Capabilities;
use capstan::runtime::engine::EngineBuilder;
use capstan::runtime::types::{NodeClaim, NodeClass, NodePool};
use capstan::runtime::{Compiled, Limits, ProviderPre, Runtime};

static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// The directory holding the built fixtures (builds them on first use; cargo makes it quick when
/// they are up to date).
pub fn providers_dir() -> &'static Path {
    let built = BUILT.get_or_init(|| {
        let root = capstan_test_support::repo_root();
        let script = root.join("providers-wasm/build.sh");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("providers");
        let mut command = Command::new("bash");
        command
            .arg(&script)
            .arg(&out)
            .current_dir(root.join("providers-wasm"))
            // The guests have their own workspace and target directory (`make test` names it in
            // CAPSTAN_PROVIDERS_TARGET_DIR); do not leak the host build's settings into it.
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET_DIR")
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("CARGO_BUILD_TARGET");
        if let Some(dir) = std::env::var_os("CAPSTAN_PROVIDERS_TARGET_DIR") {
            command.env("CARGO_TARGET_DIR", dir);
        }
        let output = command
            .output()
            .map_err(|err| format!("cannot run {}: {err}", script.display()))?;
        if !output.status.success() {
            return Err(format!(
                "{} failed ({}):\n{}\n{}",
                script.display(),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        Ok(out)
    });
    match built {
        Ok(dir) => dir,
        Err(err) => panic!("building the guest fixtures failed: {err}"),
    }
}

/// The bytes of a built fixture.
pub fn wasm(name: &str) -> Vec<u8> {
    let path = providers_dir().join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()))
}

/// `chaos.wasm`.
pub fn chaos_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| wasm("chaos"))
}

/// `kwok.wasm`.
pub fn kwok_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| wasm("kwok"))
}

/// `kwok-python.wasm`: the kwok provider in Python (componentize-py).
pub fn kwok_python_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| wasm("kwok-python"))
}

/// One runtime for the whole test binary (one engine, as in production).
pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        Runtime::builder()
            .engine(EngineBuilder::default().max_instances(512))
            .build()
            .expect("runtime")
    })
}

/// `chaos.wasm`, compiled once.
pub fn chaos_compiled() -> &'static Compiled {
    static COMPILED: OnceLock<Compiled> = OnceLock::new();
    COMPILED.get_or_init(|| runtime().compile(chaos_bytes()).expect("chaos compiles"))
}

/// `kwok.wasm`, compiled once.
pub fn kwok_compiled() -> &'static Compiled {
    static COMPILED: OnceLock<Compiled> = OnceLock::new();
    COMPILED.get_or_init(|| runtime().compile(kwok_bytes()).expect("kwok compiles"))
}

/// `kwok-python.wasm`, compiled once.
pub fn kwok_python_compiled() -> &'static Compiled {
    static COMPILED: OnceLock<Compiled> = OnceLock::new();
    COMPILED.get_or_init(|| {
        runtime()
            .compile(kwok_python_bytes())
            .expect("kwok-python compiles")
    })
}

/// The kwok provider built in `language` (`rust`: `kwok.wasm`, `python`: `kwok-python.wasm`),
/// compiled once: tests that run a scenario with each take it as a parameter.
pub fn kwok_in(language: &str) -> &'static Compiled {
    match language {
        "rust" => kwok_compiled(),
        "python" => kwok_python_compiled(),
        other => panic!("no kwok provider in {other}"),
    }
}

/// The file of the kwok provider built in `language` (see [`kwok_in`]).
pub fn kwok_file(language: &str) -> PathBuf {
    providers_dir().join(match language {
        "rust" => "kwok.wasm",
        "python" => "kwok-python.wasm",
        other => panic!("no kwok provider in {other}"),
    })
}

/// `cloudstack.wasm` (contract 0.4), compiled once.
pub fn cloudstack_compiled() -> &'static Compiled {
    static COMPILED: OnceLock<Compiled> = OnceLock::new();
    COMPILED.get_or_init(|| {
        runtime()
            .compile(&wasm("cloudstack"))
            .expect("cloudstack compiles")
    })
}

/// A chaos provider with these limits and capabilities.
pub fn chaos(limits: Limits, caps: Arc<Capabilities>) -> ProviderPre {
    runtime()
        .instantiate_pre(chaos_compiled(), limits, caps)
        .expect("chaos links")
}

/// A NodeClass with these JSON parameters.
pub fn class(parameters: serde_json::Value) -> NodeClass {
    NodeClass {
        name: "test".into(),
        parameters: parameters.to_string(),
    }
}

/// A claim named `name` with nothing else set: no pool, labels, requirements or requests (set
/// what a test needs on the result).
pub fn claim(name: &str) -> NodeClaim {
    NodeClaim {
        name: name.into(),
        node_pool_name: None,
        labels: vec![],
        annotations: vec![],
        taints: vec![],
        startup_taints: vec![],
        requirements: vec![],
        requests: vec![],
        provider_id: None,
        image_id: None,
        node_name: None,
        capacity: vec![],
        allocatable: vec![],
        created_at: None,
    }
}

/// A NodePool named `name`.
pub fn pool(name: &str) -> NodePool {
    NodePool {
        name: name.into(),
        requirements: Vec::new(),
        labels: Vec::new(),
        taints: Vec::new(),
        startup_taints: Vec::new(),
    }
}
