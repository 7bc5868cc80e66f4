//! `capstan provider new`: the skeletons (Rust, Python) build into components as written, and the
//! conformance kit runs on it at once, naming every function still to write.

use std::path::PathBuf;
use std::process::Command;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `make test` in a fresh skeleton: the component built and loaded (its name and repair policies
/// pass), nothing failed, the run fails all the same, naming the functions still to write.
fn assert_kit_lists_what_is_missing(out: &std::process::Output, name: &str) {
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!("PASS  name: {name}")),
        "the component did not build or load:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("PASS  repair-policies"), "{stdout}");
    for function in ["get-instance-types", "validate-node-class"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with("TODO") && l.contains(function)),
            "{function} not reported:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("not implemented yet: get-instance-types, validate-node-class"),
        "{stdout}"
    );
    assert!(stdout.contains("0 failed"), "{stdout}");
}

/// Cargo's target directory for skeleton builds: under the test cache when there is one, so the
/// wit-bindgen build is reused across runs.
fn skeleton_target() -> PathBuf {
    std::env::var_os("CAPSTAN_CACHE")
        .map(|cache| PathBuf::from(cache).join("provider-new-target"))
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("provider-new-target"))
}

#[test]
fn a_rust_skeleton_builds_and_the_kit_lists_what_is_not_implemented() {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("provider-new");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let dir = root.join("my-cloud");

    let capstan = env!("CARGO_BIN_EXE_capstan");
    let out = Command::new(capstan)
        .args(["provider", "new", "my-cloud", "--lang", "rust", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("make test"),
        "{}",
        text(&out.stdout)
    );

    // Twice into the same directory: refused, nothing overwritten.
    let lib = std::fs::read_to_string(dir.join("src/lib.rs")).unwrap();
    let again = Command::new(capstan)
        .args(["provider", "new", "my-cloud", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(
        text(&again.stderr).contains("not empty"),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("src/lib.rs")).unwrap(),
        lib
    );
    let bad = Command::new(capstan)
        .args(["provider", "new", "My_Cloud", "--dir"])
        .arg(root.join("bad"))
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("not a provider name"),
        "{}",
        text(&bad.stderr)
    );
    assert!(!root.join("bad").exists());

    // The skeleton's own `make test`: builds with cargo, then runs the kit with this capstan.
    let out = Command::new("make")
        .arg("test")
        .current_dir(&dir)
        .env("CAPSTAN", capstan)
        .env("CARGO_TARGET_DIR", skeleton_target())
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    // The kit fails (exit status) while functions are missing, and says which.
    assert_kit_lists_what_is_missing(&out, "my-cloud");

    // What it built is a contract 0.5 component (the default, the newest) the host accepts.
    let wasm = skeleton_target().join("wasm32-wasip2/release/my_cloud.wasm");
    let inspect = Command::new(capstan)
        .args(["provider", "inspect", "--json"])
        .arg(&wasm)
        .output()
        .unwrap();
    assert!(inspect.status.success(), "{}", text(&inspect.stderr));
    let json: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(json["provider"]["wit"], "0.5");
}

/// The Python toolchain venv the repository's build uses (componentize-py, pytest; pinned), so
/// the skeleton's build does not install its own.
fn python_venv() -> PathBuf {
    let root = capstan_test_support::repo_root();
    let out = Command::new("bash")
        .arg("-c")
        .arg("source providers-wasm/python/toolchain.sh && ensure_python_toolchain >&2 && echo \"$CAPSTAN_PYTHON_VENV\"")
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    PathBuf::from(text(&out.stdout).trim())
}

#[test]
fn a_python_skeleton_builds_and_the_kit_lists_what_is_not_implemented() {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("provider-new-python");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let capstan = env!("CARGO_BIN_EXE_capstan");
    let venv = python_venv();
    // The oldest contract, and the default: the newest the SDK speaks, 0.5 (0.4's Karpenter v1.15
    // reboot, repair rules and registration hook, with the DRA devices of instance types).
    for (asked, contract) in [(Some("0.1"), "0.1"), (None, "0.5")] {
        let dir = root.join(format!("py-cloud-{contract}"));
        let out = Command::new(capstan)
            .args(["provider", "new", "py-cloud", "--lang", "python"])
            .args(asked.into_iter().flat_map(|c| ["--contract", c]))
            .arg("--dir")
            .arg(&dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(dir.join("capstan_provider/catalog.py").exists());

        // The skeleton's own `make test` with the repository's componentize-py: builds, then runs
        // the kit with this capstan.
        let out = Command::new("make")
            .arg("test")
            .current_dir(&dir)
            .env("CAPSTAN", capstan)
            .env("COMPONENTIZE_PY", venv.join("bin/componentize-py"))
            .env_remove("KUBECONFIG")
            .output()
            .unwrap();
        assert_kit_lists_what_is_missing(&out, "py-cloud");

        // Its unit tests run natively.
        let unit = Command::new("make")
            .arg("unit")
            .current_dir(&dir)
            .env("COMPONENTIZE_PY", venv.join("bin/componentize-py"))
            .output()
            .unwrap();
        assert!(
            unit.status.success(),
            "{}\n{}",
            text(&unit.stdout),
            text(&unit.stderr)
        );
        assert!(
            text(&unit.stdout).contains("1 passed"),
            "{}",
            text(&unit.stdout)
        );

        let inspect = Command::new(capstan)
            .args(["provider", "inspect", "--json"])
            .arg(dir.join("py-cloud.wasm"))
            .output()
            .unwrap();
        assert!(inspect.status.success(), "{}", text(&inspect.stderr));
        let json: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
        assert_eq!(json["provider"]["wit"], contract);
    }
}
