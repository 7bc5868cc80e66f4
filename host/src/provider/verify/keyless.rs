//! Keyless signatures (`Provider.spec.verification.identities`): a Sigstore bundle carrying a
//! short-lived certificate instead of naming a key, verified as Sigstore's own clients verify it,
//! against the admin's trust root in Sigstore's `trusted_root.json` form ([`TrustRoot`]):
//!
//! 1. **When it was signed.** A time is established from what the trust root vouches for: an
//!    RFC 3161 timestamp over the signature, signed by a timestamp authority of the trust root,
//!    and/or a transparency-log entry whose signed promise (a Rekor v1 SET) carries its
//!    integration time. A bundle with neither is refused: "now" is never used, so a certificate
//!    that was valid when it signed stays verifiable after its ten minutes, and one that had
//!    expired when it signed never is.
//! 2. **Who signed.** The certificate chains to a certificate authority of the trust root (valid
//!    over that authority's window), allows code signing and was valid at **every** established
//!    time; when the trust root lists certificate-transparency logs, its embedded SCT must verify
//!    with one of them. Then it must name one of the Provider's identities: its subject
//!    alternative name (email or URI) and its Fulcio OIDC issuer extension
//!    (`1.3.6.1.4.1.57264.1.8`, or the legacy `.1.1`), each exactly or by prefix.
//! 3. **The log.** Every transparency-log entry the bundle carries is verified (inclusion proof
//!    against a checkpoint signed by a log of the trust root, and its promise): an entry is never
//!    skipped. A bundle without entries (timestamped only) is accepted on its timestamp.
//! 4. **What was signed.** The signature verifies with the certificate's key over the component
//!    (a message signature), or over a DSSE envelope whose payload type is in-toto's and whose
//!    statement names the component's sha256.
//!
//! The checks are `sigstore-verify`'s (the Rust port of sigstore-python's and sigstore-go's
//! verifiers); this module picks the policy and matches identities by prefix, which that crate
//! does not offer.

use sigstore_verify::crypto::{CertificateInfo, parse_certificate_info};
use sigstore_verify::trust_root::TrustedRoot;
use sigstore_verify::types::Bundle;
use sigstore_verify::types::bundle::VerificationMaterialContent;
use sigstore_verify::{VerificationPolicy, Verifier};

use super::VerifyError;

/// How a certificate's value is matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    /// Equal to this.
    Exact(String),
    /// Starting with this.
    Prefix(String),
}

impl Match {
    /// Whether `value` matches.
    pub fn matches(&self, value: &str) -> bool {
        match self {
            Match::Exact(expected) => value == expected,
            Match::Prefix(prefix) => value.starts_with(prefix.as_str()),
        }
    }
}

impl std::fmt::Display for Match {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Match::Exact(value) => write!(f, "{value:?}"),
            Match::Prefix(prefix) => write!(f, "{prefix:?}*"),
        }
    }
}

/// A signer the Provider trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The OIDC issuer.
    pub issuer: Match,
    /// The certificate's subject alternative name.
    pub subject: Match,
}

impl Identity {
    /// Whether a certificate naming `subject` from `issuer` is this signer.
    pub fn matches(&self, subject: &str, issuer: &str) -> bool {
        self.subject.matches(subject) && self.issuer.matches(issuer)
    }
}

impl From<&crate::api::provider::KeylessIdentity> for Identity {
    /// The CRD's validation makes exactly one of each pair set; were neither set, the pair would
    /// match only an empty value (never everything).
    fn from(identity: &crate::api::provider::KeylessIdentity) -> Self {
        let pick = |exact: &Option<String>, prefix: &Option<String>| match (exact, prefix) {
            (Some(exact), _) => Match::Exact(exact.clone()),
            (None, Some(prefix)) => Match::Prefix(prefix.clone()),
            (None, None) => Match::Exact(String::new()),
        };
        Self {
            issuer: pick(&identity.issuer, &identity.issuer_prefix),
            subject: pick(&identity.subject, &identity.subject_prefix),
        }
    }
}

/// The admin's trust root: Sigstore's `trusted_root.json` (certificate authorities, timestamp
/// authorities, transparency logs and certificate-transparency logs, each with its validity
/// window), as `cosign trusted-root create` writes it or Sigstore's TUF repository serves it.
/// Supplied by the admin, so verification needs no network.
#[derive(Debug, Clone)]
pub struct TrustRoot {
    name: String,
    root: TrustedRoot,
}

impl TrustRoot {
    /// Parses `json` (from `name`, for messages) and checks that every key and certificate in it
    /// is usable.
    pub fn parse(name: String, json: &str) -> Result<Self, VerifyError> {
        let key_error = |message: String| VerifyError::Key {
            name: name.clone(),
            message,
        };
        if json.trim_start().starts_with("-----BEGIN") {
            return Err(key_error(
                "holds PEM, not a trusted root: give Sigstore's trusted_root.json (`cosign trusted-root create --fulcio url=…,certificate-chain=ca.pem --tsa url=…,certificate-chain=tsa.pem`), which names the timestamp authorities and logs a signing time is proven by".to_owned(),
            ));
        }
        let root = TrustedRoot::from_json(json)
            .map_err(|err| key_error(format!("not a Sigstore trusted_root.json: {err}")))?;
        let root = Self { name, root };
        root.verifier()?;
        Ok(root)
    }

    /// Where it came from.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A verifier over this root.
    pub(super) fn verifier(&self) -> Result<Verifier, VerifyError> {
        Verifier::new(&self.root).map_err(|err| VerifyError::Key {
            name: self.name.clone(),
            message: format!("unusable trust root: {err}"),
        })
    }

    /// What it vouches for, for messages: `2 certificate authorities, 1 timestamp authority, …`.
    pub fn summary(&self) -> String {
        let count =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        [
            count(
                self.root.certificate_authorities.len(),
                "certificate authority",
                "certificate authorities",
            ),
            count(
                self.root.timestamp_authorities.len(),
                "timestamp authority",
                "timestamp authorities",
            ),
            count(
                self.root.tlogs.len(),
                "transparency log",
                "transparency logs",
            ),
            count(
                self.root.ctlogs.len(),
                "certificate-transparency log",
                "certificate-transparency logs",
            ),
        ]
        .join(", ")
    }

    fn has_ct_logs(&self) -> bool {
        !self.root.ctlogs.is_empty()
    }
}

/// Whether a bundle's material is a certificate (keyless) rather than a key's hint.
pub fn has_certificate(content: &VerificationMaterialContent) -> bool {
    matches!(
        content,
        VerificationMaterialContent::Certificate(_)
            | VerificationMaterialContent::X509CertificateChain { .. }
    )
}

/// What a bundle's signing certificate claims (not verified: for messages).
pub fn certificate_of(bundle: &Bundle) -> Option<CertificateInfo> {
    bundle
        .signing_certificate()
        .and_then(|certificate| parse_certificate_info(certificate).ok())
}

/// `subject (issuer ...)` of a certificate.
fn describe(certificate: &CertificateInfo) -> String {
    format!(
        "{} (issuer {})",
        certificate
            .identity
            .as_ref()
            .map(|san| san.as_str())
            .unwrap_or_default(),
        certificate.issuer.as_deref().unwrap_or_default()
    )
}

/// Verifies keyless `bundle` over `artifact` against `root` (see the module's steps) and checks
/// its certificate names one of `identities`. Returns `subject (issuer ...)`.
pub fn verify(
    artifact: &[u8],
    bundle: &Bundle,
    root: &TrustRoot,
    identities: &[Identity],
) -> Result<String, VerifyError> {
    let mut policy = VerificationPolicy::any_identity();
    if !root.has_ct_logs() {
        // A private Fulcio without a CT log issues certificates without SCTs; a root that names
        // CT logs requires one.
        policy = policy.skip_sct();
    }
    if bundle.verification_material.tlog_entries.is_empty() {
        // Nothing to skip: the signing time must then come from a timestamp authority.
        policy = policy.skip_tlog_unsafe();
    }
    let verified = root
        .verifier()?
        .verify(artifact, bundle, &policy)
        .map_err(|err| {
            let signer = certificate_of(bundle)
                .map(|certificate| {
                    format!(
                        " (a certificate of {}, valid {} to {})",
                        describe(&certificate),
                        certificate.not_before,
                        certificate.not_after
                    )
                })
                .unwrap_or_default();
            VerifyError::Invalid(format!(
                "the keyless Sigstore bundle{signer} does not verify against the trust root {} ({}): {err}",
                root.name,
                root.summary()
            ))
        })?;
    let Some(certificate) = verified.certificate() else {
        return Err(VerifyError::Invalid(
            "the keyless Sigstore bundle verified without a certificate".into(),
        ));
    };
    let description = describe(certificate);
    let subject = certificate
        .identity
        .as_ref()
        .map(|san| san.as_str())
        .unwrap_or_default();
    let issuer = certificate.issuer.as_deref().unwrap_or_default();
    if identities
        .iter()
        .any(|identity| identity.matches(subject, issuer))
    {
        return Ok(description);
    }
    let wanted: Vec<String> = identities
        .iter()
        .map(|identity| format!("{} (issuer {})", identity.subject, identity.issuer))
        .collect();
    Err(VerifyError::Invalid(format!(
        "the certificate names {description}, none of the trusted identities: {}",
        wanted.join(", ")
    )))
}

#[cfg(test)]
mod tests;
