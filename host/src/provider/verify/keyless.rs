//! Keyless signatures (`Provider.spec.verification.identities`): a Sigstore bundle carrying a
//! certificate instead of naming a key. The certificate must chain to the admin's trust root (a
//! PEM CA chain — Fulcio's, or a private CA's — so no network is needed), allow code signing, be
//! valid, and name one of the identities: its subject alternative name (email or URI) and its
//! Fulcio OIDC issuer extension (`1.3.6.1.4.1.57264.1.8`, or the legacy `.1.1`), each exactly or
//! by prefix. The signature is then checked with the certificate's key.
//!
//! The time the certificate must be valid at: **now**. A bundle's transparency-log time or RFC
//! 3161 timestamp is only as good as the log's or the authority's key, and the admin supplies a CA
//! only; so no timestamp is trusted, and a certificate that has expired (Fulcio's last ten
//! minutes) is refused. That suits a CA issuing certificates for a release's lifetime; verifying
//! public-good Sigstore signatures after their certificate expired needs the log's keys too.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, TrustAnchor, UnixTime};
use sigstore_verify::crypto::{CertificateInfo, WEBPKI_VERIFICATION_ALGS, parse_certificate_info};
use sigstore_verify::types::DerCertificate;
use sigstore_verify::types::bundle::VerificationMaterialContent;
use webpki::{EndEntityCert, KeyUsage, anchor_from_trusted_cert};

use super::VerifyError;

/// id-kp-codeSigning (1.3.6.1.5.5.7.3.3), DER content octets.
const CODE_SIGNING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x03];

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

/// The certificates keyless signatures chain to, with where they came from.
#[derive(Debug, Clone)]
pub struct TrustRoot {
    name: String,
    certificates: Vec<CertificateDer<'static>>,
}

impl TrustRoot {
    /// Parses the PEM certificates of `pem` (every one is a trust anchor: a root, or an
    /// intermediate the admin trusts as one, as Sigstore's trust roots do).
    pub fn parse(name: String, pem: &str) -> Result<Self, VerifyError> {
        let key_error = |message: String| VerifyError::Key {
            name: name.clone(),
            message,
        };
        let certificates = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| key_error(format!("not PEM certificates: {err}")))?;
        if certificates.is_empty() {
            return Err(key_error("holds no CERTIFICATE block".to_owned()));
        }
        for (index, certificate) in certificates.iter().enumerate() {
            anchor_from_trusted_cert(certificate)
                .map_err(|err| key_error(format!("certificate {index}: {err}")))?;
        }
        Ok(Self { name, certificates })
    }

    fn anchors(&self) -> Vec<TrustAnchor<'_>> {
        self.certificates
            .iter()
            .filter_map(|certificate| anchor_from_trusted_cert(certificate).ok())
            .collect()
    }
}

/// A Provider's keyless trust: a root and the identities it accepts.
#[derive(Debug, Clone)]
pub struct Keyless {
    /// The CA chain.
    pub root: TrustRoot,
    /// Who may sign.
    pub identities: Vec<Identity>,
}

/// A certificate that passed every check.
#[derive(Debug, Clone)]
pub struct Signer {
    /// What the certificate says, its public key included.
    pub certificate: CertificateInfo,
    /// `subject (issuer ...)`, for the status and Events.
    pub description: String,
}

/// The signing certificate of a bundle and the intermediates shipped with it; none when the
/// bundle names a key instead.
pub fn certificates(
    content: &VerificationMaterialContent,
) -> Option<(DerCertificate, Vec<DerCertificate>)> {
    match content {
        VerificationMaterialContent::Certificate(certificate) => {
            Some((certificate.raw_bytes.clone(), Vec::new()))
        }
        VerificationMaterialContent::X509CertificateChain { certificates } => {
            let (leaf, rest) = certificates.split_first()?;
            Some((
                leaf.raw_bytes.clone(),
                rest.iter().map(|c| c.raw_bytes.clone()).collect(),
            ))
        }
        _ => None,
    }
}

impl Keyless {
    /// Checks `leaf` (with `intermediates`) at `now`: the chain to the root (signatures,
    /// validity, code signing), then the identity. What is wrong, as a sentence.
    pub fn check(
        &self,
        leaf: &DerCertificate,
        intermediates: &[DerCertificate],
        now: UnixTime,
    ) -> Result<Signer, String> {
        let leaf_der = CertificateDer::from(leaf.as_bytes());
        let end_entity = EndEntityCert::try_from(&leaf_der)
            .map_err(|err| format!("the bundle's certificate does not parse: {err}"))?;
        let intermediates: Vec<CertificateDer<'_>> = intermediates
            .iter()
            .map(|c| CertificateDer::from(c.as_bytes()))
            .collect();
        let anchors = self.root.anchors();
        end_entity
            .verify_for_usage(
                WEBPKI_VERIFICATION_ALGS,
                &anchors,
                &intermediates,
                now,
                KeyUsage::required(CODE_SIGNING),
                None,
                None,
            )
            .map_err(|err| {
                format!(
                    "the bundle's certificate is not trusted by {} now: {err:?}",
                    self.root.name
                )
            })?;
        let certificate = parse_certificate_info(leaf)
            .map_err(|err| format!("the bundle's certificate does not parse: {err}"))?;
        let subject = certificate
            .identity
            .as_ref()
            .map(|san| san.as_str().to_owned())
            .unwrap_or_default();
        let issuer = certificate.issuer.clone().unwrap_or_default();
        let description = format!("{subject} (issuer {issuer})");
        if self
            .identities
            .iter()
            .any(|identity| identity.subject.matches(&subject) && identity.issuer.matches(&issuer))
        {
            Ok(Signer {
                certificate,
                description,
            })
        } else {
            let wanted: Vec<String> = self
                .identities
                .iter()
                .map(|identity| format!("{} (issuer {})", identity.subject, identity.issuer))
                .collect();
            Err(format!(
                "the certificate names {description}, none of the trusted identities: {}",
                wanted.join(", ")
            ))
        }
    }
}

#[cfg(test)]
mod tests;
