//! Bad updates: each malformed source is refused with its own reason while the last good
//! version keeps serving, and a good update afterwards clears `Degraded`.

use capstan::api::provider::GrantCluster;
use capstan::provider::source::{Compression, encode, sha256_hex};

use super::{Setup, grant, memory_limit, variant};
use crate::bad_input::component_exporting;
use crate::fixtures::chaos_bytes;

/// What a bad update changes.
enum Change {
    /// The source ConfigMap's content.
    Source {
        binary: Option<(&'static str, Vec<u8>)>,
        text: Option<(&'static str, &'static str)>,
        /// The key the Provider reads.
        key: &'static str,
    },
    /// The Provider's spec (source key, pin, grants, limits).
    Spec(Box<dyn Fn(&mut capstan::api::provider::ProviderSpec)>),
}

struct Case {
    what: &'static str,
    change: Change,
    reason: &'static str,
    message: &'static str,
}

/// The Provider reads `key`, which holds `bytes`.
fn source(key: &'static str, bytes: Vec<u8>) -> Change {
    Change::Source {
        binary: Some((key, bytes)),
        text: None,
        key,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_updates_are_refused_and_the_last_good_version_serves() {
    let good = variant(chaos_bytes(), 1000);
    let good_digest = sha256_hex(&good);
    let max = good.len() + 4096;
    let setup = Setup::start("badupd", |settings| settings.max_component_size = max).await;
    let name = setup.names.name("p");
    setup.put_source("src", "provider.wasm", &good).await;
    setup
        .put_provider(&name, setup.spec("src", "provider.wasm"))
        .await;
    setup.wait_serving(&name, &good_digest).await;
    setup.wait_condition(&name, "Ready", "True", "Loaded").await;

    let functions = capstan::runtime::WitVersion::V0_1.exported_functions();
    let oversized = {
        // A custom section of 8 KiB puts it over the limit.
        let mut bytes = good.clone();
        bytes.push(0);
        let content_len = 1 + 3 + 8192;
        bytes.extend_from_slice(&[(content_len & 0x7f) as u8 | 0x80, (content_len >> 7) as u8]);
        bytes.push(3);
        bytes.extend_from_slice(b"pad");
        bytes.extend(std::iter::repeat_n(0u8, 8192));
        bytes
    };
    let cases: Vec<Case> = vec![
        Case {
            what: "not wasm",
            change: source("provider.wasm", b"#!/bin/sh\necho hello\n".to_vec()),
            reason: "InvalidComponent",
            message: "not a WebAssembly file",
        },
        Case {
            what: "a core module",
            change: source("provider.wasm", wat::parse_str("(module)").unwrap()),
            reason: "InvalidComponent",
            message: "core",
        },
        Case {
            what: "a component of another world",
            change: source(
                "provider.wasm",
                component_exporting("example:greeter/hello@1.0.0", &["hello"]),
            ),
            reason: "InvalidComponent",
            message: "does not export capstan:provider/cloud-provider",
        },
        Case {
            what: "an unsupported major version",
            change: source(
                "provider.wasm",
                component_exporting("capstan:provider/cloud-provider@1.0.0", functions),
            ),
            reason: "InvalidComponent",
            message: "capstan:provider@1.0.0",
        },
        Case {
            what: "exports with the wrong types",
            change: source(
                "provider.wasm",
                component_exporting("capstan:provider/cloud-provider@0.1.0", functions),
            ),
            reason: "ContractMismatch",
            message: "does not match",
        },
        Case {
            what: "a truncated component",
            change: source("provider.wasm", good[..good.len() / 2].to_vec()),
            reason: "InvalidComponent",
            message: "",
        },
        Case {
            what: "oversized",
            change: source("provider.wasm", oversized),
            reason: "TooLarge",
            message: "larger than the limit",
        },
        Case {
            what: "a .gz key that is not gzip",
            change: source("provider.wasm.gz", good.clone()),
            reason: "DecompressFailed",
            message: "gzip",
        },
        Case {
            what: "a .zst key that is not zstd",
            change: source("provider.wasm.zst", b"garbage".to_vec()),
            reason: "DecompressFailed",
            message: "zstd",
        },
        Case {
            what: "the key missing",
            change: Change::Source {
                binary: Some(("other.wasm", good.clone())),
                text: None,
                key: "provider.wasm",
            },
            reason: "SourceKeyNotFound",
            message: "other.wasm",
        },
        Case {
            what: "the component in data (text)",
            change: Change::Source {
                binary: None,
                text: Some(("provider.wasm", "AGFzbQ==")),
                key: "provider.wasm",
            },
            reason: "SourceNotBinary",
            message: "binaryData",
        },
        Case {
            what: "an empty key",
            change: source("provider.wasm", Vec::new()),
            reason: "SourceEmpty",
            message: "empty",
        },
        Case {
            what: "a pin mismatch",
            change: Change::Spec(Box::new(|spec| {
                spec.source.sha256 = Some("ab".repeat(32));
            })),
            reason: "PinMismatch",
            message: "pin",
        },
        Case {
            what: "a failing self-check (no memory to instantiate in)",
            change: Change::Spec(Box::new(|spec| {
                spec.limits = Some(memory_limit("1Mi"));
            })),
            reason: "SelfCheckFailed",
            message: "name()",
        },
        Case {
            what: "grants with an unknown verb",
            change: Change::Spec(Box::new(|spec| {
                spec.grants = vec![grant(
                    GrantCluster::Workload,
                    &[""],
                    &["nodes"],
                    &["get", "obliterate"],
                    &[],
                )];
            })),
            reason: "InvalidGrants",
            message: "obliterate",
        },
        Case {
            what: "the ConfigMap in another namespace",
            change: Change::Spec(Box::new(|spec| {
                if let Some(source) = spec.source.config_map.as_mut() {
                    source.namespace = "kube-system".into();
                }
            })),
            reason: "SourceNamespaceNotAllowed",
            message: "kube-system",
        },
    ];
    assert!(cases.len() >= 10);

    for case in cases {
        // Each case starts from the good state.
        setup.put_source("src", "provider.wasm", &good).await;
        setup
            .put_provider(&name, setup.spec("src", "provider.wasm"))
            .await;
        setup
            .wait_condition(&name, "Degraded", "False", "AsExpected")
            .await;
        match &case.change {
            Change::Source { binary, text, key } => {
                setup
                    .put_config_map(
                        "src",
                        binary.as_ref().map(|(k, v)| (*k, v.as_slice())),
                        *text,
                    )
                    .await;
                if *key != "provider.wasm" {
                    setup.put_provider(&name, setup.spec("src", key)).await;
                }
            }
            Change::Spec(edit) => {
                let mut spec = setup.spec("src", "provider.wasm");
                edit(&mut spec);
                setup.put_provider(&name, spec).await;
            }
        }
        let provider = setup
            .wait_condition(&name, "Degraded", "True", case.reason)
            .await;
        let status = provider.status.unwrap();
        let degraded = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Degraded")
            .unwrap();
        let message = degraded.message.clone().unwrap_or_default();
        assert!(
            message.contains(case.message),
            "{}: message {message:?} should mention {:?}",
            case.what,
            case.message
        );
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(format!("{:?}", ready.status), "True", "{}", case.what);
        assert_eq!(
            status.digest.as_deref(),
            Some(good_digest.as_str()),
            "{}",
            case.what
        );
        // The last good version still serves, and answers.
        let serving = setup.registry.get(&name).expect("still loaded");
        assert_eq!(serving.sha256(), good_digest, "{}", case.what);
        assert_eq!(serving.name().await.unwrap(), "chaos", "{}", case.what);
        let note = setup.wait_event(&name, case.reason).await;
        assert!(note.contains("still serving"), "{}: {note}", case.what);
        eprintln!("refused {}: {} ({message})", case.what, case.reason);
    }

    // A compressed good update is accepted and clears Degraded.
    let next = variant(chaos_bytes(), 1001);
    let next_digest = sha256_hex(&next);
    setup
        .put_source(
            "src",
            "provider.wasm.zst",
            &encode(&next, Compression::Zstd),
        )
        .await;
    let mut spec = setup.spec("src", "provider.wasm.zst");
    spec.source.sha256 = Some(next_digest.clone());
    setup.put_provider(&name, spec).await;
    setup.wait_serving(&name, &next_digest).await;
    setup
        .wait_condition(&name, "Degraded", "False", "AsExpected")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_whose_first_source_is_bad_is_not_ready() {
    let setup = Setup::start("badfirst", |_| {}).await;
    let name = setup.names.name("p");
    setup
        .put_source("src", "provider.wasm.gz", b"not gzip")
        .await;
    setup
        .put_provider(&name, setup.spec("src", "provider.wasm.gz"))
        .await;
    let provider = setup
        .wait_condition(&name, "Ready", "False", "DecompressFailed")
        .await;
    assert!(provider.status.unwrap().digest.is_none());
    assert!(setup.registry.get(&name).is_none());
    let note = setup.wait_event(&name, "DecompressFailed").await;
    assert!(note.contains("no version is serving"), "{note}");

    // Fixing the source loads it.
    let good = variant(chaos_bytes(), 2000);
    setup
        .put_source("src", "provider.wasm.gz", &encode(&good, Compression::Gzip))
        .await;
    setup.wait_serving(&name, &sha256_hex(&good)).await;
    setup.wait_condition(&name, "Ready", "True", "Loaded").await;
    assert!(setup.state.synced());
}
