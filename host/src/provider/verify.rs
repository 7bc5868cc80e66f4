//! Signatures checked before a provider's bytes are compiled (`Provider.spec.verification`):
//! cosign public keys, against
//!
//! - cosign's signatures stored in the registry beside an OCI artifact (the `sha256-<hex>.sig`
//!   tag: a simple-signing payload naming the manifest digest, signed with the key), and
//! - a Sigstore bundle beside a component in a ConfigMap (`cosign sign-blob --bundle`), verified
//!   with `sigstore-verify`.
//!
//! A signature is accepted when any one of the keys verifies it. Transparency-log entries and
//! RFC 3161 timestamps in a bundle are not required (the key is the trust; clusters verifying
//! offline have no log to ask), but those a bundle carries are verified against the Provider's
//! trust root (Sigstore's `trusted_root.json`), never skipped: a bundle with a log entry and no
//! trust root naming that log is refused.
//!
//! Bundles signed keyless (a certificate instead of a key) are checked against the Provider's
//! identities and trust root ([`keyless`]).

pub mod keyless;

use serde::Deserialize;
use sigstore_verify::PublicKeyVerificationPolicy;
use sigstore_verify::crypto::KeyAlgorithm;
use sigstore_verify::types::bundle::SignatureContent;
use sigstore_verify::types::{Bundle, DerPublicKey, HashAlgorithm, SignatureBytes, Statement};

use crate::provider::oci::SimpleSignature;
use crate::provider::source::sha256_hex;

/// Why a component's signature is refused. Each has a condition reason ([`VerifyError::reason`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// Verification is required and there is no signature.
    #[error("no signature: {0}")]
    Missing(String),
    /// No signature verifies with any key.
    #[error("signature invalid: {0}")]
    Invalid(String),
    /// A key the Provider names is unusable.
    #[error("verification key {name}: {message}")]
    Key {
        /// Where the key is.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// The host requires verification and the Provider has none.
    #[error(
        "this host requires signed providers (--require-provider-verification) and the Provider has no spec.verification"
    )]
    Required,
}

impl VerifyError {
    /// The condition and Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            VerifyError::Missing(_) => "SignatureMissing",
            VerifyError::Invalid(_) => "SignatureInvalid",
            VerifyError::Key { .. } => "InvalidVerificationKey",
            VerifyError::Required => "VerificationRequired",
        }
    }
}

/// One trusted public key.
#[derive(Debug, Clone)]
pub struct Key {
    /// Where it came from (`ConfigMap ns/name key k`), for messages.
    pub name: String,
    der: DerPublicKey,
}

/// What a Provider trusts: public keys, keyless identities, and the trust root (Sigstore's
/// `trusted_root.json`) that keyless certificates, timestamps and log entries are checked
/// against.
#[derive(Debug, Clone, Default)]
pub struct Keys {
    keys: Vec<Key>,
    identities: Vec<keyless::Identity>,
    root: Option<keyless::TrustRoot>,
}

impl Keys {
    /// Parses PEM public keys (`-----BEGIN PUBLIC KEY-----`, as `cosign generate-key-pair`
    /// writes `cosign.pub`), each named by where it came from.
    pub fn parse(named: Vec<(String, String)>) -> Result<Self, VerifyError> {
        let mut keys = Vec::with_capacity(named.len());
        for (name, pem) in named {
            let der = DerPublicKey::from_pem(&pem).map_err(|err| VerifyError::Key {
                name: name.clone(),
                message: format!("not a PEM public key: {err}"),
            })?;
            KeyAlgorithm::from_spki(&der).map_err(|err| VerifyError::Key {
                name: name.clone(),
                message: err.to_string(),
            })?;
            keys.push(Key { name, der });
        }
        Ok(Self {
            keys,
            ..Self::default()
        })
    }

    /// These keys, with `root` to check certificates, timestamps and log entries against.
    pub fn with_trust_root(self, root: keyless::TrustRoot) -> Self {
        Self {
            root: Some(root),
            ..self
        }
    }

    /// These keys, and keyless signatures by `identities` (checked against the trust root).
    pub fn with_identities(self, identities: Vec<keyless::Identity>) -> Self {
        Self { identities, ..self }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.identities.is_empty()
    }

    /// The first key that verifies `signature` over `data`.
    fn verifying(&self, data: &[u8], signature: &SignatureBytes) -> Option<&Key> {
        self.keys.iter().find(|key| {
            KeyAlgorithm::from_spki(&key.der).is_ok_and(|algorithm| {
                sigstore_verify::crypto::verify_signature(
                    &key.der,
                    data,
                    signature,
                    algorithm.default_signing_scheme(),
                )
                .is_ok()
            })
        })
    }
}

#[derive(Deserialize)]
struct Payload {
    critical: Critical,
}

#[derive(Deserialize)]
struct Critical {
    image: Image,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    digest: String,
}

/// The payload type of a DSSE envelope over an in-toto statement (what `cosign attest-blob`
/// writes and Sigstore's verifiers accept).
const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// The payload type cosign signs.
const COSIGN_PAYLOAD_TYPE: &str = "cosign container image signature";

/// Checks cosign simple-signing `signatures` of the artifact whose manifest digest is
/// `manifest_digest`: one must name that digest and verify with one of `keys`. Returns the
/// key's name.
pub fn verify_simple_signing(
    signatures: &[SimpleSignature],
    manifest_digest: &str,
    keys: &Keys,
) -> Result<String, VerifyError> {
    if signatures.is_empty() {
        return Err(VerifyError::Missing(format!(
            "no cosign signature of {manifest_digest} in the registry (tag {})",
            crate::provider::oci::signature_tag(manifest_digest)
        )));
    }
    let mut reasons = Vec::new();
    for (index, signature) in signatures.iter().enumerate() {
        let payload: Payload = match serde_json::from_slice(&signature.payload) {
            Ok(payload) => payload,
            Err(err) => {
                reasons.push(format!("signature {index}: payload does not parse: {err}"));
                continue;
            }
        };
        if !payload
            .critical
            .kind
            .eq_ignore_ascii_case(COSIGN_PAYLOAD_TYPE)
        {
            reasons.push(format!(
                "signature {index}: payload type {:?} is not a cosign image signature",
                payload.critical.kind
            ));
            continue;
        }
        if payload.critical.image.digest != manifest_digest {
            reasons.push(format!(
                "signature {index} signs {}, not {manifest_digest}",
                payload.critical.image.digest
            ));
            continue;
        }
        let Ok(bytes) = SignatureBytes::from_base64(&signature.signature) else {
            reasons.push(format!("signature {index} is not base64"));
            continue;
        };
        match keys.verifying(&signature.payload, &bytes) {
            Some(key) => return Ok(key.name.clone()),
            None => reasons.push(format!("signature {index} verifies with none of the keys")),
        }
    }
    Err(VerifyError::Invalid(reasons.join("; ")))
}

/// Checks an OCI artifact's signatures: cosign's simple-signing `signatures` (the `.sig` tag) and
/// Sigstore `bundles` attached as referrers (over the `manifest` bytes, whose digest is
/// `manifest_digest`). One that verifies with one of `keys` is enough. Returns the key's name.
pub fn verify_oci(
    signatures: &[SimpleSignature],
    bundles: &[String],
    manifest: &[u8],
    manifest_digest: &str,
    keys: &Keys,
) -> Result<String, VerifyError> {
    if signatures.is_empty() && bundles.is_empty() {
        return Err(VerifyError::Missing(format!(
            "no cosign signature of {manifest_digest} in the registry (neither the {} tag nor a Sigstore bundle referrer)",
            crate::provider::oci::signature_tag(manifest_digest)
        )));
    }
    let mut reasons = Vec::new();
    if !signatures.is_empty() {
        match verify_simple_signing(signatures, manifest_digest, keys) {
            Ok(key) => return Ok(key),
            Err(err) => reasons.push(err.to_string()),
        }
    }
    for bundle in bundles {
        match verify_bundle(manifest, bundle, keys) {
            Ok(key) => return Ok(key),
            Err(err) => reasons.push(err.to_string()),
        }
    }
    Err(VerifyError::Invalid(reasons.join("; ")))
}

/// Verifies a Sigstore bundle (JSON) over `artifact` with one of `keys`. Returns the key's name
/// (or the keyless signer).
///
/// - A keyless bundle (a certificate): [`keyless::verify`], against the trust root.
/// - A bundle with transparency-log entries or RFC 3161 timestamps: `sigstore-verify`'s verifier
///   with the key, over the Provider's trust root, every entry and timestamp verified (never
///   `skip_tlog`); without a trust root it is refused, saying so.
/// - One with neither (what `cosign sign-blob --tlog-upload=false` writes, the offline case) has
///   nothing to check but its signature, with `sigstore-crypto`: over the artifact (a message
///   signature) or over the DSSE envelope, whose payload type must be in-toto's and whose
///   statement must name the artifact's sha256.
pub fn verify_bundle(artifact: &[u8], bundle: &str, keys: &Keys) -> Result<String, VerifyError> {
    crate::provider::crypto::install();
    let bundle = Bundle::from_json(bundle).map_err(|err| {
        VerifyError::Invalid(format!("the Sigstore bundle does not parse: {err}"))
    })?;
    let material = &bundle.verification_material;
    if keyless::has_certificate(&material.content) {
        let Some(root) = &keys.root else {
            return Err(VerifyError::Invalid(
                "the Sigstore bundle is signed keyless (a certificate) and no trust root is set (spec.verification.trustRoot)".into(),
            ));
        };
        if keys.identities.is_empty() {
            return Err(VerifyError::Invalid(
                "the Sigstore bundle is signed keyless (a certificate) and no identities are trusted (spec.verification.identities)".into(),
            ));
        }
        return keyless::verify(artifact, &bundle, root, &keys.identities);
    }
    let evidence = evidence(&bundle);
    let verifier = match (&evidence, &keys.root) {
        (None, _) => None,
        (Some(what), None) => {
            return Err(VerifyError::Invalid(format!(
                "the Sigstore bundle carries {what}, which is verified, never skipped: name its log or timestamp authority in spec.verification.trustRoot (Sigstore's trusted_root.json), or sign offline (`cosign sign-blob --tlog-upload=false`)"
            )));
        }
        (Some(_), Some(root)) => Some(root.verifier()?),
    };
    let mut reasons = Vec::new();
    for key in &keys.keys {
        let verified = match &verifier {
            None => verify_keyed(artifact, &bundle, &key.der),
            Some(verifier) => verifier
                .verify(
                    artifact,
                    &bundle,
                    &PublicKeyVerificationPolicy::new(key.der.clone()),
                )
                .map(drop)
                .map_err(|err| err.to_string()),
        };
        match verified {
            Ok(()) => return Ok(key.name.clone()),
            Err(err) => reasons.push(format!("{}: {err}", key.name)),
        }
    }
    Err(VerifyError::Invalid(format!(
        "the Sigstore bundle verifies with none of the keys ({})",
        reasons.join("; ")
    )))
}

/// What in `bundle` proves when it was signed or that it was logged, as words; none for an
/// offline bundle.
fn evidence(bundle: &Bundle) -> Option<&'static str> {
    let material = &bundle.verification_material;
    let logged = !material.tlog_entries.is_empty();
    let timestamped = !material
        .timestamp_verification_data
        .rfc3161_timestamps
        .is_empty();
    match (logged, timestamped) {
        (false, false) => None,
        (true, false) => Some("a transparency-log entry"),
        (false, true) => Some("an RFC 3161 timestamp"),
        (true, true) => Some("a transparency-log entry and an RFC 3161 timestamp"),
    }
}

/// Checks a bundle's signature (a message signature over the artifact, or a DSSE envelope naming
/// it) with the public key `der`, without log entries or timestamps.
fn verify_keyed(artifact: &[u8], bundle: &Bundle, der: &DerPublicKey) -> Result<(), String> {
    let scheme = KeyAlgorithm::from_spki(der)
        .map_err(|err| err.to_string())?
        .default_signing_scheme();
    let digest = sha256_hex(artifact);
    match &bundle.content {
        SignatureContent::MessageSignature(signature) => {
            if let Some(declared) = &signature.message_digest
                && (declared.algorithm != HashAlgorithm::Sha2256
                    || hex::encode(declared.digest.as_bytes()) != digest)
            {
                return Err("the bundle's message digest is not the component's".into());
            }
            sigstore_verify::crypto::verify_signature(der, artifact, &signature.signature, scheme)
                .map_err(|err| err.to_string())
        }
        SignatureContent::DsseEnvelope(envelope) => {
            if envelope.payload_type != IN_TOTO_PAYLOAD_TYPE {
                return Err(format!(
                    "the DSSE payload type is {:?}, not in-toto's ({IN_TOTO_PAYLOAD_TYPE})",
                    envelope.payload_type
                ));
            }
            sigstore_verify::crypto::verify_signature(
                der,
                &envelope.pae(),
                &envelope.signature.sig,
                scheme,
            )
            .map_err(|err| err.to_string())?;
            let statement: Statement = serde_json::from_slice(envelope.payload.as_bytes())
                .map_err(|err| format!("the DSSE payload is not an in-toto statement: {err}"))?;
            let names_it = statement.subject.iter().any(|subject| {
                subject
                    .digest
                    .sha256
                    .as_ref()
                    .is_some_and(|hash| hash.to_hex() == digest)
            });
            if names_it {
                Ok(())
            } else {
                Err(format!(
                    "the signed statement does not name sha256 {digest}"
                ))
            }
        }
        _ => Err("the bundle holds neither a message signature nor a DSSE envelope".into()),
    }
}

#[cfg(test)]
mod tests;
