//! Bad input is refused with an error that names the problem, never a panic.

use capstan::capability::Capabilities;
use capstan::runtime::engine::EngineBuilder;
use capstan::runtime::validate::ValidateError;
use capstan::runtime::{Limits, LoadError, Runtime};

use crate::fixtures::{chaos_bytes, runtime};

fn load(bytes: &[u8]) -> LoadError {
    runtime()
        .load(bytes, Limits::default(), Capabilities::isolated("bad"))
        .expect_err("must be refused")
}

/// A component exporting one instance named `export` with functions `functions` (all `func()`).
pub fn component_exporting(export: &str, functions: &[&str]) -> Vec<u8> {
    let exports: String = functions
        .iter()
        .map(|f| format!("(export \"{f}\" (func $f))"))
        .collect::<Vec<_>>()
        .join(" ");
    let text = format!(
        r#"(component
            (core module $m (func (export "f")))
            (core instance $i (instantiate $m))
            (func $f (canon lift (core func $i "f")))
            (instance $inst {exports})
            (export "{export}" (instance $inst))
        )"#
    );
    wat::parse_str(&text).expect("valid component text")
}

#[test]
fn not_wasm() {
    let err = load(b"#!/bin/sh\necho this is not wasm\n");
    assert!(
        matches!(err, LoadError::Invalid(ValidateError::NotWasm)),
        "{err:?}"
    );
    assert!(err.to_string().contains("not a WebAssembly file"), "{err}");
}

#[test]
fn core_module() {
    let module = wat::parse_str("(module)").unwrap();
    let err = load(&module);
    assert!(
        matches!(err, LoadError::Invalid(ValidateError::CoreModule)),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("core WebAssembly module, not a component"),
        "{err}"
    );
    assert!(err.to_string().contains("wasm32-wasip2"), "{err}");
}

#[test]
fn truncated_component() {
    let mut bytes = component_exporting("capstan:provider/cloud-provider@0.1.0", &["name"]);
    // Cut inside the last (export) section; cutting at a section boundary would leave a smaller
    // but valid component.
    bytes.truncate(bytes.len() - 3);
    let err = load(&bytes);
    assert!(
        matches!(err, LoadError::Invalid(ValidateError::Malformed(_))),
        "{err:?}"
    );
}

#[test]
fn component_of_another_world() {
    let bytes = component_exporting("example:greeter/hello@1.0.0", &["hello"]);
    let err = load(&bytes);
    match &err {
        LoadError::Invalid(ValidateError::WrongWorld { exports }) => {
            assert_eq!(exports, &["example:greeter/hello@1.0.0"]);
        }
        other => panic!("expected WrongWorld, got {other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.contains("does not export capstan:provider/cloud-provider"),
        "{message}"
    );
    assert!(message.contains("example:greeter/hello@1.0.0"), "{message}");
}

#[test]
fn unsupported_major_version() {
    let functions = capstan::runtime::WitVersion::V0_1.exported_functions();
    let bytes = component_exporting("capstan:provider/cloud-provider@1.0.0", functions);
    let err = load(&bytes);
    match &err {
        LoadError::Invalid(ValidateError::UnsupportedVersion { found, supported }) => {
            assert_eq!(found, "1.0.0");
            assert_eq!(supported, "0.1.x, 0.2.x, 0.3.x, 0.4.x, 0.5.x");
        }
        other => panic!("expected UnsupportedVersion, got {other:?}"),
    }
    assert!(err.to_string().contains("capstan:provider@1.0.0"), "{err}");
}

#[test]
fn newer_minor_version_of_major_zero() {
    let bytes = component_exporting("capstan:provider/cloud-provider@0.6.0", &["name"]);
    let err = load(&bytes);
    assert!(
        matches!(
            err,
            LoadError::Invalid(ValidateError::UnsupportedVersion { .. })
        ),
        "{err:?}"
    );
}

#[test]
fn missing_export() {
    let bytes = component_exporting("capstan:provider/cloud-provider@0.1.0", &["name", "get"]);
    let err = load(&bytes);
    match &err {
        LoadError::Invalid(ValidateError::MissingExport { interface, missing }) => {
            assert_eq!(interface, "capstan:provider/cloud-provider@0.1.0");
            assert!(missing.contains(&"create".to_string()), "{missing:?}");
            assert!(
                missing.contains(&"validate-node-class".to_string()),
                "{missing:?}"
            );
            assert!(!missing.contains(&"name".to_string()), "{missing:?}");
        }
        other => panic!("expected MissingExport, got {other:?}"),
    }
    assert!(err.to_string().contains("get-instance-types"), "{err}");
}

#[test]
fn exports_with_the_wrong_types() {
    let functions = capstan::runtime::WitVersion::V0_1.exported_functions();
    let bytes = component_exporting("capstan:provider/cloud-provider@0.1.0", functions);
    let err = load(&bytes);
    assert!(matches!(err, LoadError::Mismatch { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("does not match the capstan:provider/cloud-provider@0.1.0 contract"),
        "{err}"
    );
}

#[test]
fn unsatisfied_import() {
    let text = r#"(component
        (import "example:secret/door@1.0.0" (instance $door (export "open" (func))))
        (core module $m (func (export "f")))
        (core instance $i (instantiate $m))
        (func $f (canon lift (core func $i "f")))
        (instance $inst (export "name" (func $f)) (export "get-instance-types" (func $f))
            (export "create" (func $f)) (export "delete" (func $f)) (export "get" (func $f))
            (export "list" (func $f)) (export "is-drifted" (func $f))
            (export "repair-policies" (func $f)) (export "validate-node-class" (func $f)))
        (export "capstan:provider/cloud-provider@0.1.0" (instance $inst))
    )"#;
    let bytes = wat::parse_str(text).unwrap();
    let err = load(&bytes);
    assert!(matches!(err, LoadError::Link(_)), "{err:?}");
    assert!(
        err.to_string().contains("example:secret/door@1.0.0"),
        "{err}"
    );
}

#[test]
fn oversized_file() {
    let runtime = Runtime::builder()
        .engine(EngineBuilder::default().allocator(capstan::runtime::AllocatorChoice::OnDemand))
        .max_component_size(1024)
        .build()
        .unwrap();
    let err = runtime
        .load(
            &vec![0u8; 4096],
            Limits::default(),
            Capabilities::isolated("big"),
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            LoadError::Invalid(ValidateError::TooLarge {
                size: 4096,
                limit: 1024
            })
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("over the limit of 1024 bytes"),
        "{err}"
    );
}

#[test]
fn real_fixture_passes_validation() {
    let (info, export) =
        capstan::runtime::validate::validate(crate::fixtures::chaos_bytes(), usize::MAX).unwrap();
    assert_eq!(export.interface, "capstan:provider/cloud-provider@0.1.0");
    assert_eq!(export.wit, capstan::runtime::WitVersion::V0_1);
    assert_eq!(info.size, chaos_bytes().len());
    assert!(
        info.imports
            .iter()
            .any(|i| i.name.starts_with("capstan:provider/kube@0.1"))
    );
}
