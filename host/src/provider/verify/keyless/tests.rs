//! Keyless bundles built here: a test CA (rcgen) issues Fulcio-style leaves (an email SAN, code
//! signing, the OIDC issuer extension), whose keys sign a component in a Sigstore bundle.

use capstan_test_support::test_ca::rcgen::KeyPair;
use capstan_test_support::test_ca::{IssuerExtension, Leaf, TestCa, leaf_key, message_bundle};

use crate::provider::verify::{Keys, VerifyError, verify_bundle};

use super::{Identity, Match, TrustRoot};

const ISSUER: &str = "https://token.example.com";
const SUBJECT: &str = "release@example.com";
/// Years a valid leaf spans (now is inside).
const VALID: (i32, i32) = (2020, 2200);

/// A leaf of `ca` for `subject` and `issuer` through `extension`, valid over `years`; its DER
/// and its key.
fn leaf(
    ca: &TestCa,
    subject: &str,
    issuer: &str,
    extension: IssuerExtension,
    years: (i32, i32),
) -> (Vec<u8>, KeyPair) {
    let key = leaf_key().unwrap();
    let der = ca
        .issue(
            &Leaf {
                subject,
                issuer,
                extension,
                from_year: years.0,
                to_year: years.1,
            },
            &key,
        )
        .unwrap();
    (der, key)
}

/// `key`'s bundle of `artifact` with `certificate`.
fn bundle(certificate: &[u8], key: &KeyPair, artifact: &[u8]) -> String {
    message_bundle(certificate, key, artifact).unwrap()
}

fn trusting(ca: &TestCa, identities: Vec<Identity>) -> Keys {
    Keys::default().with_keyless(
        TrustRoot::parse("ConfigMap ns/fulcio key ca.pem".into(), ca.pem()).unwrap(),
        identities,
    )
}

fn exact(issuer: &str, subject: &str) -> Identity {
    Identity {
        issuer: Match::Exact(issuer.into()),
        subject: Match::Exact(subject.into()),
    }
}

fn invalid(result: Result<String, VerifyError>) -> String {
    match result {
        Err(VerifyError::Invalid(message)) => message,
        other => panic!("expected SignatureInvalid, got {other:?}"),
    }
}

#[test]
fn a_certificate_of_a_trusted_identity_verifies() {
    crate::provider::verify::install_crypto();
    let ca = TestCa::new("test fulcio").unwrap();
    let component = b"\0asm component bytes";
    let (certificate, key) = leaf(&ca, SUBJECT, ISSUER, IssuerExtension::Current, VALID);
    let signed = bundle(&certificate, &key, component);
    let who = verify_bundle(
        component,
        &signed,
        &trusting(&ca, vec![exact(ISSUER, SUBJECT)]),
    )
    .unwrap();
    assert!(who.contains(SUBJECT) && who.contains(ISSUER), "{who}");

    // By prefix, and through the legacy issuer extension.
    let prefixed = Identity {
        issuer: Match::Prefix("https://token.".into()),
        subject: Match::Prefix("release@".into()),
    };
    let (legacy_certificate, legacy_key) =
        leaf(&ca, SUBJECT, ISSUER, IssuerExtension::Legacy, VALID);
    let legacy = bundle(&legacy_certificate, &legacy_key, component);
    verify_bundle(component, &legacy, &trusting(&ca, vec![prefixed])).unwrap();

    // Another component: the signature does not cover it.
    let message = invalid(verify_bundle(
        b"\0asm other bytes",
        &signed,
        &trusting(&ca, vec![exact(ISSUER, SUBJECT)]),
    ));
    assert!(message.contains(SUBJECT), "{message}");
}

#[test]
fn identity_issuer_chain_and_expiry_are_each_refused() {
    crate::provider::verify::install_crypto();
    let ca = TestCa::new("test fulcio").unwrap();
    let component = b"\0asm component bytes";
    let (certificate, key) = leaf(&ca, SUBJECT, ISSUER, IssuerExtension::Current, VALID);
    let signed = bundle(&certificate, &key, component);

    // Identity mismatch: another subject, exact or by prefix.
    let message = invalid(verify_bundle(
        component,
        &signed,
        &trusting(&ca, vec![exact(ISSUER, "someone@example.com")]),
    ));
    assert!(
        message.contains("none of the trusted identities"),
        "{message}"
    );
    let message = invalid(verify_bundle(
        component,
        &signed,
        &trusting(
            &ca,
            vec![Identity {
                issuer: Match::Exact(ISSUER.into()),
                subject: Match::Prefix("ops@".into()),
            }],
        ),
    ));
    assert!(message.contains(SUBJECT), "{message}");

    // Wrong issuer.
    let message = invalid(verify_bundle(
        component,
        &signed,
        &trusting(&ca, vec![exact("https://accounts.example.org", SUBJECT)]),
    ));
    assert!(message.contains(ISSUER), "{message}");

    // A chain to another CA.
    let stranger = TestCa::new("another ca").unwrap();
    let (foreign, foreign_key) = leaf(&stranger, SUBJECT, ISSUER, IssuerExtension::Current, VALID);
    let message = invalid(verify_bundle(
        component,
        &bundle(&foreign, &foreign_key, component),
        &trusting(&ca, vec![exact(ISSUER, SUBJECT)]),
    ));
    assert!(message.contains("not trusted"), "{message}");

    // An expired certificate (no bundle timestamp is trusted: it must be valid now).
    let (expired, expired_key) = leaf(&ca, SUBJECT, ISSUER, IssuerExtension::Current, (2020, 2021));
    let message = invalid(verify_bundle(
        component,
        &bundle(&expired, &expired_key, component),
        &trusting(&ca, vec![exact(ISSUER, SUBJECT)]),
    ));
    assert!(message.contains("Expired"), "{message}");

    // Keyless bundle, keys only.
    let message = invalid(verify_bundle(component, &signed, &Keys::default()));
    assert!(message.contains("identities"), "{message}");
}

#[test]
fn trust_roots_must_be_certificates() {
    for bad in [
        "",
        "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
    ] {
        let err = TrustRoot::parse("cm".into(), bad).unwrap_err();
        assert_eq!(err.reason(), "InvalidVerificationKey", "{err}");
    }
}
