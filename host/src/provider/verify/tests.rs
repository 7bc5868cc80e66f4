use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::json;

use super::*;
use crate::provider::source::sha256_hex;

/// A P-256 key pair, as `cosign generate-key-pair` makes.
struct Signer(EcdsaKeyPair);

/// The DER prefix of a P-256 SubjectPublicKeyInfo before its 65-byte point.
const P256_SPKI_PREFIX: &str = "3059301306072a8648ce3d020106082a8648ce3d030107034200";

impl Signer {
    fn new() -> Self {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
        Self(
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
                .unwrap(),
        )
    }

    fn public_pem(&self) -> String {
        let mut der = hex::decode(P256_SPKI_PREFIX).unwrap();
        der.extend_from_slice(self.0.public_key().as_ref());
        DerPublicKey::new(der).to_pem()
    }

    fn sign(&self, data: &[u8]) -> Vec<u8> {
        self.0
            .sign(&SystemRandom::new(), data)
            .unwrap()
            .as_ref()
            .to_vec()
    }

    fn keys(&self, name: &str) -> Keys {
        Keys::parse(vec![(name.to_owned(), self.public_pem())]).unwrap()
    }
}

fn b64(bytes: &[u8]) -> String {
    SignatureBytes::from_bytes(bytes).to_base64()
}

fn payload(digest: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "critical": {
            "identity": {"docker-reference": "127.0.0.1:5000/capstan/kwok"},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature"
        },
        "optional": null
    }))
    .unwrap()
}

fn simple(signer: &Signer, payload: Vec<u8>) -> SimpleSignature {
    SimpleSignature {
        signature: b64(&signer.sign(&payload)),
        payload,
    }
}

fn digest(n: u8) -> String {
    format!("sha256:{}", hex::encode([n; 32]))
}

#[test]
fn a_cosign_signature_of_the_manifest_verifies() {
    crate::provider::crypto::install();
    let signer = Signer::new();
    let sig = simple(&signer, payload(&digest(1)));
    assert_eq!(
        verify_simple_signing(&[sig], &digest(1), &signer.keys("release")).unwrap(),
        "release"
    );
}

#[test]
fn any_trusted_key_will_do() {
    crate::provider::crypto::install();
    let (old, new) = (Signer::new(), Signer::new());
    let keys = Keys::parse(vec![
        ("old".into(), old.public_pem()),
        ("new".into(), new.public_pem()),
    ])
    .unwrap();
    let sig = simple(&new, payload(&digest(1)));
    assert_eq!(
        verify_simple_signing(&[sig], &digest(1), &keys).unwrap(),
        "new"
    );
}

#[test]
fn refusals() {
    crate::provider::crypto::install();
    let (signer, stranger) = (Signer::new(), Signer::new());
    let keys = signer.keys("release");
    // No signature at all.
    let missing = verify_simple_signing(&[], &digest(1), &keys).unwrap_err();
    assert_eq!(missing.reason(), "SignatureMissing");
    assert!(missing.to_string().contains(".sig"), "{missing}");
    // Signed by another key.
    let wrong_key =
        verify_simple_signing(&[simple(&stranger, payload(&digest(1)))], &digest(1), &keys)
            .unwrap_err();
    assert_eq!(wrong_key.reason(), "SignatureInvalid");
    // A valid signature of another artifact (a tag moved to an unsigned build, the old
    // signature copied over).
    let other = verify_simple_signing(&[simple(&signer, payload(&digest(2)))], &digest(1), &keys)
        .unwrap_err();
    assert!(other.to_string().contains("not sha256:0101"), "{other}");
    // A tampered payload: the signature no longer matches.
    let mut tampered = simple(&signer, payload(&digest(1)));
    tampered.payload.push(b' ');
    assert_eq!(
        verify_simple_signing(&[tampered], &digest(1), &keys)
            .unwrap_err()
            .reason(),
        "SignatureInvalid"
    );
    // Garbage signature and payload.
    let garbage = SimpleSignature {
        payload: b"{}".to_vec(),
        signature: "!!".into(),
    };
    assert_eq!(
        verify_simple_signing(&[garbage], &digest(1), &keys)
            .unwrap_err()
            .reason(),
        "SignatureInvalid"
    );
    // One good signature among bad ones is enough.
    let good = simple(&signer, payload(&digest(1)));
    let bad = simple(&stranger, payload(&digest(1)));
    assert!(verify_simple_signing(&[bad, good], &digest(1), &keys).is_ok());
}

#[test]
fn keys_must_be_public_keys() {
    let err = Keys::parse(vec![("cm/k".into(), "not a key".into())]).unwrap_err();
    assert_eq!(err.reason(), "InvalidVerificationKey");
    assert!(err.to_string().contains("cm/k"), "{err}");
}

/// A Sigstore bundle v0.3 as `cosign sign-blob --key k --bundle b --new-bundle-format
/// --tlog-upload=false` writes it: a message signature, the key's hint, no log entry.
fn bundle(signer: &Signer, artifact: &[u8]) -> String {
    json!({
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {"publicKey": {"hint": "test"}, "tlogEntries": []},
        "messageSignature": {
            "messageDigest": {
                "algorithm": "SHA2_256",
                "digest": b64(&hex::decode(sha256_hex(artifact)).unwrap())
            },
            "signature": b64(&signer.sign(artifact))
        }
    })
    .to_string()
}

#[test]
fn bundles_verify_over_the_component() {
    crate::provider::crypto::install();
    let (signer, stranger) = (Signer::new(), Signer::new());
    let component = b"\0asm\x0d\0\x01\0 the component".to_vec();
    let good = bundle(&signer, &component);
    assert_eq!(
        verify_bundle(&component, &good, &signer.keys("cm/cosign.pub")).unwrap(),
        "cm/cosign.pub"
    );
    // Another key.
    let err = verify_bundle(&component, &good, &stranger.keys("other")).unwrap_err();
    assert_eq!(err.reason(), "SignatureInvalid");
    // A changed component.
    let mut changed = component.clone();
    changed.push(0);
    assert_eq!(
        verify_bundle(&changed, &good, &signer.keys("k"))
            .unwrap_err()
            .reason(),
        "SignatureInvalid"
    );
    // Not a bundle.
    let err = verify_bundle(&component, "{}", &signer.keys("k")).unwrap_err();
    assert!(err.to_string().contains("does not parse"), "{err}");
}

/// A bundle written by cosign itself (`cosign sign-blob --key --new-bundle-format
/// --tlog-upload=false`, cosign v2.6.5) verifies with its public key, and not over other bytes.
#[test]
fn a_bundle_cosign_wrote_verifies() {
    crate::provider::crypto::install();
    let artifact = include_bytes!("testdata/artifact.txt");
    let bundle = include_str!("testdata/artifact.sigstore.json");
    let keys = Keys::parse(vec![(
        "cosign.pub".into(),
        include_str!("testdata/cosign.pub").into(),
    )])
    .unwrap();
    assert_eq!(
        verify_bundle(artifact, bundle, &keys).unwrap(),
        "cosign.pub"
    );
    assert!(verify_bundle(b"other bytes", bundle, &keys).is_err());
    assert!(verify_bundle(artifact, bundle, &Signer::new().keys("other")).is_err());
}

/// An offline DSSE bundle over `statement` with `payload_type`, signed by `signer` over DSSE's
/// pre-authentication encoding.
fn dsse_bundle(signer: &Signer, payload_type: &str, statement: &serde_json::Value) -> String {
    let body = serde_json::to_vec(statement).unwrap();
    let mut pae = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        body.len()
    )
    .into_bytes();
    pae.extend_from_slice(&body);
    json!({
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {"publicKey": {"hint": "test"}, "tlogEntries": []},
        "dsseEnvelope": {
            "payload": b64(&body),
            "payloadType": payload_type,
            "signatures": [{"sig": b64(&signer.sign(&pae)), "keyid": ""}]
        }
    })
    .to_string()
}

fn statement(digest: &str) -> serde_json::Value {
    json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "kwok.wasm", "digest": {"sha256": digest}}],
        "predicateType": "https://slsa.dev/provenance/v1",
        "predicate": {}
    })
}

#[test]
fn a_dsse_bundle_must_be_an_in_toto_statement_naming_the_component() {
    crate::provider::crypto::install();
    let signer = Signer::new();
    let component = b"\0asm\x0d\0\x01\0 the component".to_vec();
    let keys = signer.keys("k");
    let named = statement(&sha256_hex(&component));
    verify_bundle(
        &component,
        &dsse_bundle(&signer, IN_TOTO_PAYLOAD_TYPE, &named),
        &keys,
    )
    .unwrap();
    // The same statement, signed, under another payload type: not an attestation of it.
    let err = verify_bundle(
        &component,
        &dsse_bundle(&signer, "application/json", &named),
        &keys,
    )
    .unwrap_err();
    assert!(err.to_string().contains("payload type"), "{err}");
    // A statement about other bytes.
    let other = statement(&sha256_hex(b"other"));
    let err = verify_bundle(
        &component,
        &dsse_bundle(&signer, IN_TOTO_PAYLOAD_TYPE, &other),
        &keys,
    )
    .unwrap_err();
    assert!(err.to_string().contains("does not name"), "{err}");
    // Another key.
    let err = verify_bundle(
        &component,
        &dsse_bundle(&signer, IN_TOTO_PAYLOAD_TYPE, &named),
        &Signer::new().keys("other"),
    )
    .unwrap_err();
    assert_eq!(err.reason(), "SignatureInvalid");
}
