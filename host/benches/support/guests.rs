//! Building the guest fixtures for benchmarks (`providers-wasm/build.sh`, cached by cargo).

use std::path::PathBuf;
use std::process::Command;

/// Builds the guests and returns the bytes of `name.wasm` (`kwok`, `chaos`).
pub fn guest_wasm(name: &str) -> Vec<u8> {
    let root = capstan_test_support::repo_root();
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("providers");
    let mut command = Command::new("bash");
    command
        .arg(root.join("providers-wasm/build.sh"))
        .arg(&out)
        .current_dir(root.join("providers-wasm"))
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    if let Some(dir) = std::env::var_os("CAPSTAN_PROVIDERS_TARGET_DIR") {
        command.env("CARGO_TARGET_DIR", dir);
    }
    let status = command.status().expect("run providers-wasm/build.sh");
    assert!(status.success(), "providers-wasm/build.sh failed");
    std::fs::read(out.join(format!("{name}.wasm"))).expect("guest wasm")
}
