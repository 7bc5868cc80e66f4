//! Keyless bundles made by the real tools (`testdata/sigstore`, see its README): cosign v2.6.5
//! signing with a certificate from Fulcio v1.8.8 (ephemeral CA), an RFC 3161 timestamp from the
//! timestamp authority v2.1.3 and an entry in Rekor v2.3.0, all run on loopback, and the trust
//! root `cosign trusted-root create` wrote for them. The certificates lived ten minutes, long
//! gone when these tests run: they verify at the time the timestamp proves.

use serde_json::{Value, json};
use sigstore_verify::types::Bundle;

use crate::provider::verify::{Keys, VerifyError, verify_bundle};

use super::{Identity, Match, TrustRoot, certificate_of};

const ARTIFACT: &[u8] = include_bytes!("../testdata/sigstore/artifact.txt");
/// Fulcio certificate, timestamp and Rekor v2 entry.
const LOGGED: &str = include_str!("../testdata/sigstore/keyless.sigstore.json");
/// Fulcio certificate and timestamp; no log entry.
const TIMESTAMPED: &str = include_str!("../testdata/sigstore/keyless-timestamped.sigstore.json");
const ROOT: &str = include_str!("../testdata/sigstore/trusted_root.json");
const SUBJECT: &str = "release@example.com";
const ISSUER: &str = "http://127.0.0.1:5556";

fn exact(issuer: &str, subject: &str) -> Identity {
    Identity {
        issuer: Match::Exact(issuer.into()),
        subject: Match::Exact(subject.into()),
    }
}

fn keys(root: &str, identities: Vec<Identity>) -> Keys {
    Keys::default()
        .with_trust_root(
            TrustRoot::parse("ConfigMap ns/sigstore key trusted_root.json".into(), root).unwrap(),
        )
        .with_identities(identities)
}

/// The trust root with `edit` applied.
fn root_with(edit: impl FnOnce(&mut Value)) -> String {
    let mut root: Value = serde_json::from_str(ROOT).unwrap();
    edit(&mut root);
    root.to_string()
}

fn invalid(result: Result<String, VerifyError>) -> String {
    match result {
        Err(VerifyError::Invalid(message)) => message,
        other => panic!("expected SignatureInvalid, got {other:?}"),
    }
}

#[test]
fn an_expired_certificate_verifies_at_the_time_its_timestamp_proves() {
    crate::provider::crypto::install();
    // The certificate expired long ago (Fulcio's ten minutes).
    let bundle = Bundle::from_json(LOGGED).unwrap();
    let certificate = certificate_of(&bundle).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        certificate.not_after.as_second() < now as i64,
        "{certificate:?}"
    );

    let who = verify_bundle(ARTIFACT, LOGGED, &keys(ROOT, vec![exact(ISSUER, SUBJECT)])).unwrap();
    assert_eq!(who, format!("{SUBJECT} (issuer {ISSUER})"));
    // Timestamped only: no log entry to verify, the timestamp alone proves the time.
    verify_bundle(
        ARTIFACT,
        TIMESTAMPED,
        &keys(ROOT, vec![exact(ISSUER, SUBJECT)]),
    )
    .unwrap();
    // By prefix.
    let prefixed = Identity {
        issuer: Match::Prefix("http://127.0.0.1:".into()),
        subject: Match::Prefix("release@".into()),
    };
    verify_bundle(ARTIFACT, LOGGED, &keys(ROOT, vec![prefixed])).unwrap();
}

#[test]
fn identities_are_matched_on_the_verified_certificate() {
    crate::provider::crypto::install();
    for identity in [
        exact(ISSUER, "ops@example.com"),
        exact("https://accounts.example.com", SUBJECT),
        Identity {
            issuer: Match::Exact(ISSUER.into()),
            subject: Match::Prefix("ops@".into()),
        },
    ] {
        let message = invalid(verify_bundle(ARTIFACT, LOGGED, &keys(ROOT, vec![identity])));
        assert!(
            message.contains(SUBJECT) && message.contains("none of the trusted identities"),
            "{message}"
        );
    }
    // No identities at all: a keyless bundle is not trusted by keys alone.
    let message = invalid(verify_bundle(ARTIFACT, LOGGED, &keys(ROOT, Vec::new())));
    assert!(message.contains("no identities"), "{message}");
    // No trust root.
    let message = invalid(verify_bundle(
        ARTIFACT,
        LOGGED,
        &Keys::default().with_identities(vec![exact(ISSUER, SUBJECT)]),
    ));
    assert!(message.contains("no trust root"), "{message}");
}

#[test]
fn other_bytes_are_refused() {
    crate::provider::crypto::install();
    let message = invalid(verify_bundle(
        b"another component",
        LOGGED,
        &keys(ROOT, vec![exact(ISSUER, SUBJECT)]),
    ));
    assert!(message.contains("does not verify"), "{message}");
}

/// Each part of the trust root is needed: the CA (over a window holding the signing time), the
/// timestamp authority (Rekor v2 entries carry no time of their own), and the log whose entry the
/// bundle carries (never skipped).
#[test]
fn what_the_trust_root_does_not_vouch_for_is_refused() {
    crate::provider::crypto::install();
    let identities = || vec![exact(ISSUER, SUBJECT)];
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "no timestamp authority",
            root_with(|root| root["timestampAuthorities"] = json!([])),
            "timestamp",
        ),
        (
            "no transparency log",
            root_with(|root| root["tlogs"] = json!([])),
            "log",
        ),
        (
            "another certificate authority",
            root_with(|root| {
                root["certificateAuthorities"] = root["timestampAuthorities"].clone();
            }),
            "certificate",
        ),
        (
            "a CA trusted only until before the signature",
            root_with(|root| {
                root["certificateAuthorities"][0]["validFor"] =
                    json!({"start": "2020-01-01T00:00:00Z", "end": "2026-12-02T06:18:00Z"});
            }),
            "",
        ),
        (
            "a timestamp authority trusted only from after the signature",
            root_with(|root| {
                root["timestampAuthorities"][0]["validFor"] =
                    json!({"start": "2030-01-01T00:00:00Z"});
            }),
            "",
        ),
    ];
    for (case, root, says) in cases {
        let message = invalid(verify_bundle(ARTIFACT, LOGGED, &keys(&root, identities())));
        assert!(
            message.contains("does not verify against the trust root")
                && message.to_lowercase().contains(says),
            "{case}: {message}"
        );
    }
    // The timestamped bundle carries no entry: a root without the log still verifies it.
    verify_bundle(
        ARTIFACT,
        TIMESTAMPED,
        &keys(&root_with(|root| root["tlogs"] = json!([])), identities()),
    )
    .unwrap();
}

#[test]
fn a_key_signed_bundle_with_a_log_entry_needs_the_log() {
    crate::provider::crypto::install();
    let bundle = include_str!("../testdata/sigstore/keyed.sigstore.json");
    let key = || {
        Keys::parse(vec![(
            "cosign.pub".into(),
            include_str!("../testdata/sigstore/cosign.pub").into(),
        )])
        .unwrap()
    };
    let root = |json: &str| TrustRoot::parse("root".into(), json).unwrap();
    assert_eq!(
        verify_bundle(ARTIFACT, bundle, &key().with_trust_root(root(ROOT))).unwrap(),
        "cosign.pub"
    );
    // No trust root: the entry is not skipped, the bundle is refused and the message says why.
    let message = invalid(verify_bundle(ARTIFACT, bundle, &key()));
    assert!(
        message.contains("never skipped") && message.contains("trustRoot"),
        "{message}"
    );
    // A trust root without that log.
    let message = invalid(verify_bundle(
        ARTIFACT,
        bundle,
        &key().with_trust_root(root(&root_with(|root| root["tlogs"] = json!([])))),
    ));
    assert!(message.contains("cosign.pub"), "{message}");
}

#[test]
fn trust_roots_are_sigstore_trusted_roots() {
    let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let err = TrustRoot::parse("cm".into(), pem).unwrap_err();
    assert_eq!(err.reason(), "InvalidVerificationKey");
    assert!(err.to_string().contains("trusted_root.json"), "{err}");
    for bad in ["", "{", "[]", r#"{"mediaType": 3}"#] {
        let err = TrustRoot::parse("cm".into(), bad).unwrap_err();
        assert!(err.to_string().starts_with("verification key cm:"), "{err}");
    }
    let root = TrustRoot::parse("cm".into(), ROOT).unwrap();
    assert_eq!(
        root.summary(),
        "1 certificate authority, 1 timestamp authority, 1 transparency log, 0 certificate-transparency logs"
    );
}

#[test]
fn identities_match_exactly_or_by_prefix() {
    let identity = Identity {
        issuer: Match::Exact("https://token.example.com".into()),
        subject: Match::Prefix("https://github.com/acme/".into()),
    };
    assert!(identity.matches(
        "https://github.com/acme/provider/.github/workflows/release.yml",
        "https://token.example.com"
    ));
    assert!(!identity.matches(
        "https://github.com/acme/provider",
        "https://token.example.com/"
    ));
    assert!(!identity.matches(
        "https://github.com/other/provider",
        "https://token.example.com"
    ));
    assert_eq!(
        identity.subject.to_string(),
        "\"https://github.com/acme/\"*"
    );
}
