//! Providers from an OCI registry, and signatures checked before a byte of them runs: a real
//! CNCF distribution registry on loopback (anonymous, or requiring credentials), artifacts pushed
//! with `oras` (the CNCF wasm layout and a plain file) and `capstan provider push`, signed with
//! `cosign` (keys, the `.sig` tag, `sign-blob` bundles), all three built from their pinned Go
//! modules (`tests/control-plane/cp supply-chain`); keyless bundles from Sigstore's own services
//! (Fulcio, the timestamp authority, Rekor v2) run on loopback.

use std::time::Duration;

use capstan::api::provider::{
    KeylessIdentity, LocalObjectKey, OciSource, ProviderSpec, ProviderVerification,
    VerificationKeyRef,
};
use capstan::provider::source::sha256_hex;
use capstan_test_support::sigstore::{RootSpec, Sigstore};
use capstan_test_support::supply_chain::{OciRegistry, Workdir as Scratch};
use capstan_test_support::unique_name;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::{CallerReport, Callers, Setup, variant};
use crate::fixtures::chaos_bytes;

/// A Provider spec pulling `reference` over plain HTTP, polling tags every second.
fn oci_spec(setup: &Setup, reference: &str) -> ProviderSpec {
    let mut spec = setup.spec("unused", "unused");
    spec.source.config_map = None;
    spec.source.oci = Some(OciSource {
        reference: reference.to_owned(),
        namespace: setup.namespace.clone(),
        pull_secret: None,
        poll_interval: Some("1s".into()),
        plain_http: true,
    });
    spec
}

/// Verification with the public key in ConfigMap `name`, key `cosign.pub`.
fn keys_in(name: &str) -> ProviderVerification {
    ProviderVerification {
        keys: vec![VerificationKeyRef {
            config_map_key_ref: Some(LocalObjectKey {
                name: name.to_owned(),
                key: "cosign.pub".to_owned(),
            }),
            secret_key_ref: None,
        }],
        identities: Vec::new(),
        trust_root: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pulled_from_a_registry_cached_and_reloaded_when_the_tag_moves() {
    let mut registry = OciRegistry::start().expect("registry");
    let scratch = Scratch::new("pull").expect("scratch");
    let cache = scratch.path().join("cache");
    let setup = Setup::start("ocipull", |settings| {
        settings.oci_cache = Some(cache.clone());
    })
    .await;
    let name = setup.names.name("p");
    let reference = format!("{}/capstan/chaos:stable", registry.host());
    let (v1, v2) = (variant(chaos_bytes(), 7001), variant(chaos_bytes(), 7002));
    let (d1, d2) = (sha256_hex(&v1), sha256_hex(&v2));

    // v1 in the CNCF wasm layout.
    let m1 = scratch.push_cncf(&reference, &v1).expect("push cncf");
    setup
        .put_provider(&name, oci_spec(&setup, &reference))
        .await;
    setup.wait_serving(&name, &d1).await;
    let loaded = setup.wait_loaded(&name, &d1).await;
    let status = loaded.status.unwrap();
    assert_eq!(status.artifact_digest.as_deref(), Some(m1.as_str()));
    assert!(
        setup.wait_event(&name, "Loaded").await.contains(&m1),
        "the Loaded Event names the artifact"
    );
    // The layer is cached on disk by digest.
    assert!(cache.join("sha256").join(&d1).is_file(), "v1 layer cached");

    // The tag moves to v2 (pushed as a plain `oras push` file) while calls run: none fails.
    let callers = Callers::start(&setup.registry, &name, "chaos", 4);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let m2 = scratch
        .push_file(&reference, "chaos.wasm", &v2)
        .expect("push file");
    assert_ne!(m1, m2);
    setup.wait_serving(&name, &d2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let CallerReport {
        calls,
        failures,
        served,
    } = callers.stop().await;
    assert!(failures.is_empty(), "failed calls: {failures:?}");
    assert!(calls > 20, "only {calls} calls");
    assert!(served.contains(&d1) && served.contains(&d2), "{served:?}");
    let status = setup.wait_loaded(&name, &d2).await.status.unwrap();
    assert_eq!(status.artifact_digest.as_deref(), Some(m2.as_str()));

    // The registry goes down: the next poll fails, v2 keeps serving, Degraded says why.
    registry.stop();
    setup
        .wait_condition(&name, "Degraded", "True", "PullFailed")
        .await;
    let ready = setup.wait_condition(&name, "Ready", "True", "Loaded").await;
    assert_eq!(ready.status.unwrap().digest.as_deref(), Some(d2.as_str()));
    assert!(setup.wait_event(&name, "PullFailed").await.contains(&d2));
    assert_eq!(setup.registry.get(&name).unwrap().sha256(), d2);
    // Back up: the refusal clears.
    registry.restart().expect("registry restart");
    setup
        .wait_condition(&name, "Degraded", "False", "AsExpected")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_or_wrongly_signed_artifacts_never_run() {
    let registry = OciRegistry::start().expect("registry");
    let scratch = Scratch::new("sign").expect("scratch");
    let setup = Setup::start("ocisign", |_| {}).await;
    let name = setup.names.name("p");
    let reference = format!("{}/capstan/signed:v1", registry.host());
    let public = scratch.cosign_key("release").expect("cosign key");
    scratch.cosign_key("stranger").expect("cosign key");
    setup
        .put_config_map("keys", None, Some(("cosign.pub", &public)))
        .await;

    let (v1, v2, v3) = (
        variant(chaos_bytes(), 7101),
        variant(chaos_bytes(), 7102),
        variant(chaos_bytes(), 7103),
    );
    let m1 = scratch.push_cncf(&reference, &v1).expect("push cncf");
    scratch
        .cosign_sign(
            "release",
            &format!("{}/capstan/signed@{m1}", registry.host()),
        )
        .expect("cosign sign");
    let mut spec = oci_spec(&setup, &reference);
    spec.verification = Some(keys_in("keys"));
    setup.put_provider(&name, spec).await;
    let loaded = setup.wait_loaded(&name, &sha256_hex(&v1)).await;
    let signed_by = loaded.status.unwrap().signed_by.unwrap_or_default();
    assert!(signed_by.contains("keys"), "{signed_by}");

    // v2 unsigned: refused before it is compiled, v1 keeps serving.
    scratch.push_cncf(&reference, &v2).expect("push cncf");
    let refused = setup
        .wait_condition(&name, "Ready", "False", "SignatureMissing")
        .await;
    assert_eq!(
        refused.status.unwrap().digest.as_deref(),
        Some(sha256_hex(&v1).as_str())
    );
    let note = setup.wait_event(&name, "SignatureMissing").await;
    assert!(note.contains("still serving"), "{note}");
    assert_eq!(setup.registry.get(&name).unwrap().sha256(), sha256_hex(&v1));

    // v3 signed with a key the Provider does not trust: refused too.
    let m3 = scratch.push_cncf(&reference, &v3).expect("push cncf");
    scratch
        .cosign_sign(
            "stranger",
            &format!("{}/capstan/signed@{m3}", registry.host()),
        )
        .expect("cosign sign");
    setup
        .wait_condition(&name, "Ready", "False", "SignatureInvalid")
        .await;
    setup.wait_event(&name, "SignatureInvalid").await;
    assert_eq!(setup.registry.get(&name).unwrap().sha256(), sha256_hex(&v1));

    // Signed with the trusted key after all, as a Sigstore bundle referrer (cosign's new bundle
    // format): it loads.
    scratch
        .cosign_sign_bundle(
            "release",
            &format!("{}/capstan/signed@{m3}", registry.host()),
        )
        .expect("cosign sign --new-bundle-format");
    setup.wait_loaded(&name, &sha256_hex(&v3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_map_sources_verify_a_sigstore_bundle() {
    let scratch = Scratch::new("bundle").expect("scratch");
    let setup = Setup::start("ocibundle", |_| {}).await;
    let name = setup.names.name("p");
    let public = scratch.cosign_key("release").expect("cosign key");
    setup
        .put_config_map("keys", None, Some(("cosign.pub", &public)))
        .await;
    let (v1, v2) = (variant(chaos_bytes(), 7201), variant(chaos_bytes(), 7202));
    let bundle = scratch
        .cosign_bundle("release", &v1)
        .expect("cosign bundle");
    setup
        .put_config_map(
            "src",
            Some(("provider.wasm", &v1)),
            Some(("provider.sigstore.json", &bundle)),
        )
        .await;
    let spec = bundled_spec(&setup, keys_in("keys"));
    setup.put_provider(&name, spec).await;
    setup.wait_loaded(&name, &sha256_hex(&v1)).await;

    // Another component under v1's bundle: refused, v1 keeps serving.
    setup
        .put_config_map(
            "src",
            Some(("provider.wasm", &v2)),
            Some(("provider.sigstore.json", &bundle)),
        )
        .await;
    setup
        .wait_condition(&name, "Ready", "False", "SignatureInvalid")
        .await;
    assert_eq!(setup.registry.get(&name).unwrap().sha256(), sha256_hex(&v1));
    // No bundle at all.
    setup.put_source("src", "provider.wasm", &v2).await;
    setup
        .wait_condition(&name, "Ready", "False", "SignatureMissing")
        .await;
    assert_eq!(setup.registry.get(&name).unwrap().sha256(), sha256_hex(&v1));
}

/// Keyless, as a release pipeline signs: cosign gets an ID token's certificate from Fulcio, an
/// RFC 3161 timestamp from the timestamp authority and an entry in Rekor v2 — Sigstore's own
/// services on loopback — and the Provider trusts an identity and the `trusted_root.json`
/// `cosign trusted-root create` wrote for those services. `capstan provider verify` and the host
/// agree; a trust root without the timestamp authority (no time the certificate can be checked
/// at) or without the log (an entry is never skipped) refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_signers_are_trusted_by_identity_and_trust_root() {
    const SUBJECT: &str = "release@example.com";
    let sigstore = Sigstore::shared().expect("Sigstore's services");
    let issuer = sigstore.issuer().to_owned();
    let setup = Setup::start("ocikeyless", |_| {}).await;
    let component = variant(chaos_bytes(), 7501);
    let bundle = sigstore
        .sign_keyless(SUBJECT, &component, &[])
        .expect("cosign sign-blob, keyless");
    let root = sigstore
        .trusted_root(&unique_name("root.json"), &RootSpec::all())
        .expect("trusted root");
    let untimed = sigstore
        .trusted_root(
            &unique_name("untimed.json"),
            &RootSpec {
                tsa: None,
                ..RootSpec::all()
            },
        )
        .expect("trusted root without the TSA");
    let unlogged = sigstore
        .trusted_root(
            &unique_name("unlogged.json"),
            &RootSpec {
                rekor: false,
                ..RootSpec::all()
            },
        )
        .expect("trusted root without the log");

    // `capstan provider verify` checks it as the host does.
    let scratch = Scratch::new("keyless").expect("scratch");
    for (file, text) in [
        ("provider.sigstore.json", bundle.as_str()),
        ("trusted_root.json", root.as_str()),
        ("untimed.json", untimed.as_str()),
    ] {
        scratch.write(file, text.as_bytes()).expect(file);
    }
    scratch
        .write("provider.wasm", &component)
        .expect("component");
    let verify = |root: &str, subject_flag: &str, subject: &str| {
        crate::supply_chain::capstan(
            &scratch,
            &[
                "provider",
                "verify",
                "provider.wasm",
                "--bundle",
                "provider.sigstore.json",
                "--trust-root",
                root,
                subject_flag,
                subject,
                "--issuer",
                &issuer,
            ],
        )
    };
    let good = verify("trusted_root.json", "--subject", SUBJECT);
    assert!(good.status.success(), "{good:?}");
    for (root, flag, subject) in [
        ("trusted_root.json", "--subject-prefix", "ops@"),
        ("untimed.json", "--subject", SUBJECT),
    ] {
        let refused = verify(root, flag, subject);
        assert!(!refused.status.success(), "{refused:?}");
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("SignatureInvalid"),
            "{refused:?}"
        );
    }

    for (name, json) in [
        ("sigstore", &root),
        ("untimed", &untimed),
        ("unlogged", &unlogged),
    ] {
        setup
            .put_config_map(name, None, Some(("trusted_root.json", json)))
            .await;
    }
    setup
        .put_config_map(
            "src",
            Some(("provider.wasm", &component)),
            Some(("provider.sigstore.json", &bundle)),
        )
        .await;
    let spec_for = |subject: &str, root: &str| {
        bundled_spec(
            &setup,
            ProviderVerification {
                keys: Vec::new(),
                identities: vec![KeylessIdentity {
                    issuer: Some(issuer.clone()),
                    issuer_prefix: None,
                    subject: Some(subject.into()),
                    subject_prefix: None,
                }],
                trust_root: Some(LocalObjectKey {
                    name: root.into(),
                    key: "trusted_root.json".into(),
                }),
            },
        )
    };
    let refused_message = |provider: capstan::api::provider::Provider| {
        provider
            .status
            .unwrap()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .and_then(|c| c.message)
            .unwrap_or_default()
    };

    // Another identity: refused, with the certificate's identity in the message.
    let stranger = setup.names.name("stranger");
    setup
        .put_provider(&stranger, spec_for("someone@example.com", "sigstore"))
        .await;
    let refused = setup
        .wait_condition(&stranger, "Ready", "False", "SignatureInvalid")
        .await;
    let message = refused_message(refused);
    assert!(message.contains(SUBJECT), "{message}");
    setup.wait_event(&stranger, "SignatureInvalid").await;

    // The signer, but a trust root that cannot say when it signed, or lacks its log: refused.
    for (root, says) in [("untimed", "timestamp"), ("unlogged", "log")] {
        let name = setup.names.name(root);
        setup.put_provider(&name, spec_for(SUBJECT, root)).await;
        let refused = setup
            .wait_condition(&name, "Ready", "False", "SignatureInvalid")
            .await;
        let message = refused_message(refused);
        assert!(message.to_lowercase().contains(says), "{root}: {message}");
    }

    // The signer's identity and the whole trust root: loaded.
    let name = setup.names.name("p");
    setup
        .put_provider(&name, spec_for(SUBJECT, "sigstore"))
        .await;
    let loaded = setup.wait_loaded(&name, &sha256_hex(&component)).await;
    let signed_by = loaded.status.unwrap().signed_by.unwrap_or_default();
    assert!(signed_by.contains(SUBJECT), "{signed_by}");
}

/// A key's bundle that carries a transparency-log entry and a timestamp (cosign with the signing
/// config of the local Sigstore): loaded when the Provider's trust root names that log, refused
/// (never skipped) when it names none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logged_key_signature_is_checked_against_the_log() {
    let sigstore = Sigstore::shared().expect("Sigstore's services");
    let setup = Setup::start("ocilogged", |_| {}).await;
    let component = variant(chaos_bytes(), 7502);
    let prefix = unique_name("release");
    let public = sigstore.work().cosign_key(&prefix).expect("cosign key");
    let bundle = sigstore
        .sign_with_key(&prefix, &component)
        .expect("cosign sign-blob --key, logged");
    let root = sigstore
        .trusted_root(&unique_name("root.json"), &RootSpec::all())
        .expect("trusted root");
    setup
        .put_config_map("keys", None, Some(("cosign.pub", &public)))
        .await;
    setup
        .put_config_map("sigstore", None, Some(("trusted_root.json", &root)))
        .await;
    setup
        .put_config_map(
            "src",
            Some(("provider.wasm", &component)),
            Some(("provider.sigstore.json", &bundle)),
        )
        .await;
    let spec_with = |trust_root: Option<LocalObjectKey>| {
        bundled_spec(
            &setup,
            ProviderVerification {
                trust_root,
                ..keys_in("keys")
            },
        )
    };
    let unrooted = setup.names.name("unrooted");
    setup.put_provider(&unrooted, spec_with(None)).await;
    setup
        .wait_condition(&unrooted, "Ready", "False", "SignatureInvalid")
        .await;
    let name = setup.names.name("p");
    setup
        .put_provider(
            &name,
            spec_with(Some(LocalObjectKey {
                name: "sigstore".into(),
                key: "trusted_root.json".into(),
            })),
        )
        .await;
    let loaded = setup.wait_loaded(&name, &sha256_hex(&component)).await;
    assert!(
        loaded
            .status
            .unwrap()
            .signed_by
            .unwrap_or_default()
            .contains("cosign.pub"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pins_size_caps_and_the_host_wide_policy_refuse() {
    let registry = OciRegistry::start().expect("registry");
    let scratch = Scratch::new("refuse").expect("scratch");
    let setup = Setup::start("ocirefuse", |settings| {
        settings.max_component_size = 8 << 20;
        settings.require_verification = true;
    })
    .await;
    let component = variant(chaos_bytes(), 7301);

    // No verification on a host that requires it.
    let unverified = setup.names.name("unverified");
    let reference = format!("{}/capstan/refuse:v1", registry.host());
    let manifest = scratch
        .push_cncf(&reference, &component)
        .expect("push cncf");
    setup
        .put_provider(&unverified, oci_spec(&setup, &reference))
        .await;
    setup
        .wait_condition(&unverified, "Ready", "False", "VerificationRequired")
        .await;

    let public = scratch.cosign_key("release").expect("cosign key");
    setup
        .put_config_map("keys", None, Some(("cosign.pub", &public)))
        .await;
    scratch
        .cosign_sign(
            "release",
            &format!("{}/capstan/refuse@{manifest}", registry.host()),
        )
        .expect("cosign sign");

    // A digest pin the artifact does not match.
    let pinned = setup.names.name("pinned");
    let mut spec = oci_spec(
        &setup,
        &format!("{}/capstan/refuse@{manifest}", registry.host()),
    );
    spec.verification = Some(keys_in("keys"));
    spec.source.sha256 = Some("ab".repeat(32));
    setup.put_provider(&pinned, spec).await;
    setup
        .wait_condition(&pinned, "Ready", "False", "PinMismatch")
        .await;

    // A layer over the size cap is refused before it is downloaded.
    let big = setup.names.name("big");
    let mut huge = component.clone();
    huge.resize(9 << 20, 0);
    let big_ref = format!("{}/capstan/big:v1", registry.host());
    scratch.push_cncf(&big_ref, &huge).expect("push cncf");
    let mut spec = oci_spec(&setup, &big_ref);
    spec.verification = Some(keys_in("keys"));
    setup.put_provider(&big, spec).await;
    let refused = setup
        .wait_condition(&big, "Ready", "False", "TooLarge")
        .await;
    let message = refused
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .and_then(|c| c.message)
        .unwrap_or_default();
    assert!(message.contains("limit"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authenticated_registry_needs_the_pull_secret() {
    let registry = OciRegistry::start_with_auth("capstan", "pull-s3cret").expect("registry");
    let scratch = Scratch::new("auth").expect("scratch");
    let setup = Setup::start("ociauth", |_| {}).await;
    let component = variant(chaos_bytes(), 7401);
    let reference = format!("{}/capstan/private:v1", registry.host());

    // `capstan provider push` with credentials; without them the registry refuses it.
    scratch
        .write("private.wasm", &component)
        .expect("component");
    let anonymous = crate::supply_chain::capstan(
        &scratch,
        &[
            "provider",
            "push",
            "private.wasm",
            &reference,
            "--plain-http",
        ],
    );
    assert!(!anonymous.status.success(), "{anonymous:?}");
    let pushed = crate::supply_chain::capstan(
        &scratch,
        &[
            "provider",
            "push",
            "private.wasm",
            &reference,
            "--plain-http",
            "--username",
            "capstan",
            "--password",
            "pull-s3cret",
        ],
    );
    assert!(pushed.status.success(), "{pushed:?}");

    // No pull Secret: refused with a condition and an Event naming the registry's answer.
    let name = setup.names.name("p");
    setup
        .put_provider(&name, oci_spec(&setup, &reference))
        .await;
    let refused = setup
        .wait_condition(&name, "Ready", "False", "PullFailed")
        .await;
    let message = refused
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .and_then(|c| c.message)
        .unwrap_or_default();
    assert!(message.contains("capstan/private"), "{message}");
    assert!(
        message.to_lowercase().contains("not authorized"),
        "{message}"
    );
    setup.wait_event(&name, "PullFailed").await;

    // A `kubernetes.io/dockerconfigjson` pull Secret: pulled and served.
    let config =
        json!({"auths": {registry.host(): {"username": "capstan", "password": "pull-s3cret"}}});
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "pull", "namespace": setup.namespace},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": config.to_string()},
    });
    Api::<Secret>::namespaced(setup.client.clone(), &setup.namespace)
        .patch(
            "pull",
            &PatchParams::apply("capstan-tests").force(),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap();
    let mut spec = oci_spec(&setup, &reference);
    if let Some(oci) = spec.source.oci.as_mut() {
        oci.pull_secret = Some("pull".to_owned());
    }
    setup.put_provider(&name, spec).await;
    setup.wait_serving(&name, &sha256_hex(&component)).await;
    setup.wait_condition(&name, "Ready", "True", "Loaded").await;
}

/// What a pull and a verification cost next to reading the same component from a ConfigMap
/// (the kwok provider, median of 20 rounds each, in process against the loopback registry and the
/// real API server). Prints the numbers; `docs/supply-chain.md` quotes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_and_verify_cost_next_to_a_config_map_read() {
    use capstan::provider::oci::{self, Remote, cache::BlobCache};
    use capstan::provider::source;
    use capstan::provider::verify::{self, Keys};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;
    use oci_client::secrets::RegistryAuth;
    use std::time::Instant;

    let registry = OciRegistry::start().expect("registry");
    let scratch = Scratch::new("measure").expect("scratch");
    let setup = Setup::start("ocimeasure", |_| {}).await;
    let kwok = crate::fixtures::wasm("kwok");
    let reference = format!("{}/capstan/kwok:bench", registry.host());
    let manifest = scratch.push_cncf(&reference, &kwok).expect("push cncf");
    let public = scratch.cosign_key("release").expect("cosign key");
    scratch
        .cosign_sign(
            "release",
            &format!("{}/capstan/kwok@{manifest}", registry.host()),
        )
        .expect("cosign sign");
    let bundle = scratch
        .cosign_bundle("release", &kwok)
        .expect("cosign bundle");
    let keys = Keys::parse(vec![("release".into(), public)]).unwrap();
    setup.put_source("kwok", "provider.wasm", &kwok).await;
    let remote = Remote::parse(&reference, RegistryAuth::Anonymous, true).unwrap();
    let cache = BlobCache::new(scratch.path().join("cache"));

    fn median(mut samples: Vec<Duration>) -> Duration {
        samples.sort();
        samples[samples.len() / 2]
    }
    let rounds = 20;
    let (mut cold, mut cached, mut sig, mut cm, mut bundled) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let at = Instant::now();
        let pulled = oci::pull(&remote, None, 32 << 20).await.unwrap();
        cold.push(at.elapsed());
        assert_eq!(pulled.stored, kwok);

        let at = Instant::now();
        let pulled = oci::pull(&remote, Some(&cache), 32 << 20).await.unwrap();
        cached.push(at.elapsed());

        let at = Instant::now();
        let signatures = oci::signatures(&remote, &pulled.manifest_digest)
            .await
            .unwrap();
        verify::verify_simple_signing(&signatures, &pulled.manifest_digest, &keys).unwrap();
        sig.push(at.elapsed());

        let at = Instant::now();
        let config_map = Api::<ConfigMap>::namespaced(setup.client.clone(), &setup.namespace)
            .get("kwok")
            .await
            .unwrap();
        let component =
            source::from_config_map(&config_map, "provider.wasm", 32 << 20, None).unwrap();
        cm.push(at.elapsed());
        assert_eq!(component.bytes, kwok);

        let at = Instant::now();
        verify::verify_bundle(&component.bytes, &bundle, &keys).unwrap();
        bundled.push(at.elapsed());
    }
    eprintln!(
        "kwok ({} KiB): OCI pull {:?} (from the disk cache {:?}), cosign .sig fetch + verify {:?}; \
         ConfigMap read {:?}, bundle verify {:?} (medians of {rounds})",
        kwok.len() / 1024,
        median(cold),
        median(cached),
        median(sig),
        median(cm),
        median(bundled),
    );
}

/// The Provider spec of the component in ConfigMap `src` (key `provider.wasm`), its Sigstore
/// bundle beside it (`provider.sigstore.json`), checked against `verification`.
fn bundled_spec(setup: &Setup, verification: ProviderVerification) -> ProviderSpec {
    let mut spec = setup.spec("src", "provider.wasm");
    if let Some(source) = spec.source.config_map.as_mut() {
        source.bundle_key = Some("provider.sigstore.json".into());
    }
    spec.verification = Some(verification);
    spec
}
