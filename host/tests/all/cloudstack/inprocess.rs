//! The CloudStack provider loaded in-process with the runtime, its egress grants and config
//! given directly: the conformance kit against the emulator (with `reboot`, contract 0.4), a
//! reboot once per operation, and every kind of bad answer (HTML, malformed, huge, slow, a
//! redirect, a denied endpoint, a wrong secret) as a clear typed error.

use std::sync::Arc;
use std::time::Duration;

use capstan::capability::Capabilities;
use capstan::capability::config::ConfigValues;
use capstan::capability::egress::EgressRules;
use capstan::capability::outbound_http::{HttpLimits, HttpSettings};
use capstan::conformance::{self, Outcome, checks};
use capstan::runtime::lifecycle::RebootError;
use capstan::runtime::types::{NodeClaim, ProviderError};
use capstan::runtime::{CallError, Limits, ProviderPre, WitVersion};
use capstan_cloudstack_emulator::{
    Config, DEFAULT_API_KEY, DEFAULT_SECRET_KEY, Emulator, EmulatorHandle, FaultRule, HttpFault,
    Vm, VmState,
};
use serde_json::json;

use super::parameters;
use crate::fixtures::{class, cloudstack_compiled, runtime};

fn config(cs: &EmulatorHandle, secret: &str) -> ConfigValues {
    ConfigValues::new([
        ("api-key".to_owned(), DEFAULT_API_KEY.to_owned()),
        ("secret-key".to_owned(), secret.to_owned()),
        ("endpoint".to_owned(), cs.url()),
        ("cluster-name".to_owned(), "inprocess".to_owned()),
    ])
}

/// The provider with egress to the emulator only.
fn provider(
    cs: &EmulatorHandle,
    secret: &str,
    limits: HttpLimits,
) -> (ProviderPre, Arc<Capabilities>) {
    let caps = Capabilities::builder("cloudstack")
        .http(HttpSettings {
            rules: EgressRules::parse(&[format!("http://{}", cs.addr())]).unwrap(),
            limits,
            tls: None,
        })
        .config(config(cs, secret))
        .build();
    let pre = runtime()
        .instantiate_pre(cloudstack_compiled(), Limits::default(), caps.clone())
        .expect("cloudstack links");
    (pre, caps)
}

/// The provider's error, or a panic if the call itself failed (trap, timeout, limit).
fn provider_error<T: std::fmt::Debug>(result: Result<T, CallError>) -> ProviderError {
    match result {
        Err(CallError::Provider { error, .. }) => error,
        other => panic!("expected a provider error, got {other:?}"),
    }
}

fn claim(name: &str) -> NodeClaim {
    NodeClaim {
        node_pool_name: Some("default".into()),
        ..crate::fixtures::claim(name)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_kit_passes_against_the_emulator() {
    let cs = Emulator::start(Config::default()).await.expect("emulator");
    let (pre, caps) = provider(&cs, DEFAULT_SECRET_KEY, HttpLimits::default());
    let mut parameters = parameters();
    parameters["pollMillis"] = json!(50);
    let options = conformance::Options {
        node_class: class(parameters),
        delete_interval: Duration::from_millis(200),
        ..conformance::Options::default()
    };
    let report = conformance::run(&pre, &options).await;
    println!("{report}");
    assert!(report.passed(), "{report}");
    assert_eq!(report.skipped(), 0, "{report}");
    // Contract 0.4: the kit really reboots (not the host's `not-implemented` for older guests),
    // and the same operation twice is one reboot on the cloud.
    assert_eq!(pre.export().wit, WitVersion::V0_4);
    let outcome = |name: &str| report.check(name).map(|c| c.outcome.clone());
    assert_eq!(
        outcome(checks::REBOOT),
        Some(Outcome::Pass("rebooted".into()))
    );
    assert_eq!(
        outcome(checks::REGISTERED),
        Some(Outcome::Pass("ready".into()))
    );
    let reboots: Vec<_> = cs
        .jobs()
        .into_iter()
        .filter(|j| j.command == "rebootVirtualMachine")
        .collect();
    assert_eq!(
        reboots.len(),
        1,
        "one reboot for one operation: {reboots:?}"
    );
    assert_eq!(reboots[0].status, 1, "{reboots:?}");
    assert_eq!(cs.count("rebootVirtualMachine"), 1);
    let metrics = caps.metrics().snapshot();
    assert_eq!(metrics.http_denied, 0, "{metrics:?}");
    assert!(
        cs.vms().is_empty(),
        "the test VM was expunged: {:?}",
        cs.vms()
    );
    assert!(cs.count("deployVirtualMachine") >= 1);
    assert_eq!(cs.count("listTags"), 0);
}

/// `reboot` (contract 0.4) against the emulator: the VM reboots in place (still Running, a new
/// boot ID), once per operation ID however often it is asked (the emulator's VM and job list
/// say so), again for another operation, and a VM that is gone answers `not-found`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reboot_reboots_once_per_operation_and_never_a_gone_vm() {
    let cs = Emulator::start(Config::default()).await.expect("emulator");
    let (pre, _caps) = provider(&cs, DEFAULT_SECRET_KEY, HttpLimits::default());
    let mut parameters = parameters();
    parameters["pollMillis"] = json!(50);
    let nc = class(parameters);
    let created = pre.create(&claim("cs-reboot"), &nc).await.expect("create");
    let provider_id = created.provider_id.clone().expect("provider ID");
    let vm_id = provider_id
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let booted = cs.vm(&vm_id).expect("the VM").boot_id;
    let reboot = |operation: &'static str| {
        let pre = &pre;
        let created = &created;
        async move {
            pre.reboot(created, operation)
                .await
                .expect("reboot ends in an answer")
        }
    };
    let reboot_jobs = || {
        cs.jobs()
            .into_iter()
            .filter(|j| j.command == "rebootVirtualMachine")
            .map(|j| j.status)
            .collect::<Vec<_>>()
    };
    let operation_tag = |vm: &Vm| {
        vm.tags
            .iter()
            .find(|t| t.key == "cloudstack.capstan.dev/reboot-operation")
            .map(|t| t.value.clone())
    };

    assert_eq!(reboot("op-1").await, Ok(()));
    assert_eq!(reboot("op-1").await, Ok(()), "the same operation again");
    assert_eq!(reboot("op-1").await, Ok(()));
    let vm = cs.vm(&vm_id).expect("the VM");
    assert_eq!(vm.reboots, 1, "one reboot for operation op-1");
    assert_ne!(vm.boot_id, booted, "a new boot");
    assert_eq!(vm.state, VmState::Running, "rebooted in place");
    assert_eq!(operation_tag(&vm).as_deref(), Some("op-1"));
    assert_eq!(reboot_jobs(), [1]);

    assert_eq!(reboot("op-2").await, Ok(()), "another operation");
    let vm = cs.vm(&vm_id).expect("the VM");
    assert_eq!(vm.reboots, 2);
    assert_eq!(operation_tag(&vm).as_deref(), Some("op-2"));
    assert_eq!(reboot_jobs(), [1, 1]);

    // Gone: not-found, and nothing is asked of CloudStack but the VM.
    let mut deleted = false;
    for _ in 0..50 {
        match pre.delete(&created).await {
            Err(CallError::Provider {
                error: ProviderError::NotFound(_),
                ..
            }) => {
                deleted = true;
                break;
            }
            Ok(()) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("delete: {e}"),
        }
    }
    assert!(deleted, "the VM was expunged");
    match reboot("op-3").await {
        Err(RebootError::NotFound(m)) => assert!(m.contains(&vm_id), "{m}"),
        other => panic!("a reboot of an expunged VM: {other:?}"),
    }
    assert_eq!(reboot_jobs(), [1, 1], "no reboot asked for a gone VM");
}

/// Each bad answer is a clear error on the NodeClass (`validate-node-class`) and on the claim
/// (`create`), never a trap; the provider serves normally once the endpoint behaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_answers_are_clear_errors_never_crashes() {
    let cs = Emulator::start(Config::default()).await.expect("emulator");
    let limits = HttpLimits {
        first_byte_timeout: Duration::from_secs(1),
        between_bytes_timeout: Duration::from_secs(1),
        max_response_body: 64 << 10,
        ..HttpLimits::default()
    };
    let (pre, _caps) = provider(&cs, DEFAULT_SECRET_KEY, limits);
    let nc = class(parameters());
    let cases = [
        (
            HttpFault::HtmlError { status: 502 },
            "CloudStackBadResponse",
            "HTML page",
        ),
        (
            HttpFault::MalformedJson,
            "CloudStackBadResponse",
            "malformed JSON",
        ),
        (
            HttpFault::Huge { bytes: 1 << 20 },
            "CloudStackResponseTooLarge",
            "larger than",
        ),
        (
            HttpFault::Slow { millis: 3000 },
            "CloudStackUnreachable",
            "no answer",
        ),
        (
            HttpFault::Redirect {
                location: "http://attacker.example/client/api".into(),
            },
            "CloudStackRedirect",
            "attacker.example",
        ),
    ];
    for (fault, reason, text) in cases {
        cs.clear_faults();
        cs.inject(FaultRule::always(fault.clone()));
        match provider_error(pre.validate_node_class(&nc).await) {
            ProviderError::NodeClassNotReady(m) => {
                assert!(m.starts_with(&format!("{reason}: ")), "{fault:?}: {m}");
                assert!(m.contains(text), "{fault:?}: {m}");
                assert!(
                    m.len() < 600,
                    "{fault:?}: a short message, got {} bytes",
                    m.len()
                );
            }
            other => panic!("{fault:?}: {other:?}"),
        }
        match provider_error(pre.create(&claim("bad-answer"), &nc).await) {
            ProviderError::CreateFailed(f) => {
                assert_eq!(f.reason, reason, "{fault:?}: {}", f.message)
            }
            other => panic!("{fault:?}: {other:?}"),
        }
        assert!(matches!(
            provider_error(pre.list().await),
            ProviderError::Retryable(_)
        ));
    }
    cs.clear_faults();
    pre.validate_node_class(&nc)
        .await
        .expect("valid once the endpoint behaves");
    assert!(cs.vms().is_empty());
}

/// An endpoint outside the grants is denied by the host (counted) and named on the NodeClass; a
/// wrong secret is `CloudStackAuthFailed`; the rotated value is used by the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_endpoints_and_wrong_secrets_are_named_and_rotation_needs_no_reload() {
    let cs = Emulator::start(Config::default()).await.expect("emulator");
    let (pre, caps) = provider(&cs, "wrong-secret", HttpLimits::default());
    let mut elsewhere = parameters();
    elsewhere["endpoint"] = json!("http://127.0.0.1:9/client/api");
    match provider_error(pre.validate_node_class(&class(elsewhere)).await) {
        ProviderError::NodeClassNotReady(m) => {
            assert!(m.starts_with("EgressDenied: "), "{m}");
            assert!(m.contains("127.0.0.1:9"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    assert!(caps.metrics().snapshot().http_denied >= 1);

    let nc = class(parameters());
    match provider_error(pre.validate_node_class(&nc).await) {
        ProviderError::NodeClassNotReady(m) => {
            assert!(m.starts_with("CloudStackAuthFailed: "), "{m}");
            assert!(!m.contains("wrong-secret"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    match provider_error(pre.create(&claim("auth"), &nc).await) {
        ProviderError::CreateFailed(f) => assert_eq!(f.reason, "CloudStackAuthFailed"),
        other => panic!("{other:?}"),
    }
    assert!(caps.config().replace(config(&cs, DEFAULT_SECRET_KEY)));
    pre.validate_node_class(&nc)
        .await
        .expect("the rotated secret works");
}

/// The documented example (`docs/examples/cloudstack`) parses as the API types, and its
/// NodeClass is valid against the emulator's sample cloud (same zones, selectors, key pair).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_example_is_valid() {
    let dir = capstan_test_support::repo_root().join("docs/examples/cloudstack");
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let resource: capstan::api::provider::Provider =
        serde_saphyr::from_str(&read("provider.yaml")).unwrap();
    assert_eq!(
        resource.spec.egress,
        vec!["https://cloud.example.com".to_owned()]
    );
    let keys: Vec<&str> = resource
        .spec
        .config
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(keys, ["api-key", "secret-key", "endpoint", "cluster-name"]);
    let _: capstan::api::NodePool = serde_saphyr::from_str(&read("nodepool.yaml")).unwrap();
    let secret: k8s_openapi::api::core::v1::Secret =
        serde_saphyr::from_str(&read("secret.yaml")).unwrap();
    assert!(secret.string_data.unwrap().contains_key("secret-key"));
    let class: capstan::api::NodeClass = serde_saphyr::from_str(&read("nodeclass.yaml")).unwrap();
    assert_eq!(class.spec.provider, "cloudstack");

    let cs = Emulator::start(Config::default()).await.expect("emulator");
    let (pre, _) = provider(&cs, DEFAULT_SECRET_KEY, HttpLimits::default());
    let parameters = class.spec.parameters.clone().expect("parameters");
    pre.validate_node_class(&crate::fixtures::class(parameters.clone()))
        .await
        .expect("the example NodeClass is valid");
    let catalog = pre
        .get_instance_types(
            &crate::fixtures::pool("example"),
            &crate::fixtures::class(parameters),
        )
        .await
        .expect("instance types");
    assert_eq!(
        catalog.catalog.instance_types.len(),
        4,
        "small, medium, large and the GPU offering"
    );
}

/// `capstan provider test` (the CLI) runs the kit against the emulator: egress and
/// configuration from flags, the secret from a file; every check passes, none is skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capstan_provider_test_passes_against_the_emulator() {
    let cs = Emulator::start(Config::default()).await.expect("emulator");
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let secret = dir.join(capstan_test_support::unique_name("cs-secret"));
    std::fs::write(&secret, format!("{DEFAULT_SECRET_KEY}\n")).unwrap();
    let class = dir.join(capstan_test_support::unique_name("cs-class.json"));
    std::fs::write(&class, parameters().to_string()).unwrap();
    let file = crate::fixtures::providers_dir().join("cloudstack.wasm");
    let args: Vec<String> = vec![
        "provider".into(),
        "test".into(),
        file.display().to_string(),
        "--egress".into(),
        format!("http://{}", cs.addr()),
        "--config".into(),
        format!("api-key={DEFAULT_API_KEY}"),
        "--config".into(),
        format!("secret-key=@{}", secret.display()),
        "--config".into(),
        format!("endpoint={}", cs.url()),
        "--node-class".into(),
        class.display().to_string(),
        "--cache-dir".into(),
        dir.join("components").display().to_string(),
    ];
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(&args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Every check of the kit runs and passes (however many the kit has).
    let passes = stdout.lines().filter(|l| l.starts_with("PASS")).count();
    assert!(passes >= 13, "{stdout}");
    assert!(
        stdout.contains(&format!("{passes} passed, 0 failed, 0 skipped")),
        "{stdout}"
    );
    assert!(!stdout.contains(DEFAULT_SECRET_KEY), "{stdout}");
    assert!(cs.vms().is_empty(), "the kit's VM was expunged");
    assert!(cs.count("destroyVirtualMachine") >= 1);
}
