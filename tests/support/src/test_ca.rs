//! A certificate authority made in test code, issuing Fulcio-style signing certificates (an
//! email subject alternative name, code signing, the OIDC issuer extension) for the keyless
//! verification tests, and the Sigstore bundles those keys sign (cosign's `sign-blob` cannot
//! take a certificate of one's own CA).

pub use rcgen;
use rcgen::{
    BasicConstraints, CertificateParams, CustomExtension, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SanType, SignatureAlgorithm,
};

use crate::{Error, Result};

/// The Fulcio OIDC issuer extension (`1.3.6.1.4.1.57264.1.8`, a DER UTF8String).
const ISSUER_V2: &[u64] = &[1, 3, 6, 1, 4, 1, 57264, 1, 8];
/// Its legacy form (`.1.1`, the raw string).
const ISSUER_V1: &[u64] = &[1, 3, 6, 1, 4, 1, 57264, 1, 1];
/// The DER prefix of a P-256 SubjectPublicKeyInfo before its 65-byte point.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

fn cert_error(err: rcgen::Error) -> Error {
    Error::Tool(format!("test CA: {err}"))
}

/// Which issuer extension a leaf carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssuerExtension {
    /// `1.3.6.1.4.1.57264.1.8` (what Fulcio writes today).
    Current,
    /// `1.3.6.1.4.1.57264.1.1` (the deprecated form).
    Legacy,
}

/// What a leaf certificate says.
#[derive(Debug, Clone)]
pub struct Leaf<'a> {
    /// The email subject alternative name.
    pub subject: &'a str,
    /// The OIDC issuer.
    pub issuer: &'a str,
    /// Which extension holds it.
    pub extension: IssuerExtension,
    /// Valid from the start of this year ...
    pub from_year: i32,
    /// ... to the start of this one.
    pub to_year: i32,
}

/// A self-signed CA.
pub struct TestCa {
    params: CertificateParams,
    key: KeyPair,
    pem: String,
}

impl TestCa {
    /// A new CA named `name`.
    pub fn new(name: &str) -> Result<Self> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(cert_error)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(cert_error)?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let pem = params.self_signed(&key).map_err(cert_error)?.pem();
        Ok(Self { params, key, pem })
    }

    /// The CA's certificate (PEM): the trust root.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A leaf certificate for `public` saying `leaf`; its DER.
    pub fn issue(&self, leaf: &Leaf<'_>, public: &impl PublicKeyData) -> Result<Vec<u8>> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(cert_error)?;
        params.subject_alt_names = vec![SanType::Rfc822Name(
            leaf.subject.try_into().map_err(cert_error)?,
        )];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::CodeSigning];
        params.not_before = rcgen::date_time_ymd(leaf.from_year, 1, 1);
        params.not_after = rcgen::date_time_ymd(leaf.to_year, 1, 1);
        let (oid, content) = match leaf.extension {
            IssuerExtension::Legacy => (ISSUER_V1, leaf.issuer.as_bytes().to_vec()),
            IssuerExtension::Current => {
                let len = u8::try_from(leaf.issuer.len())
                    .map_err(|_| Error::Tool("test CA: issuer too long".into()))?;
                let mut der = vec![0x0c, len];
                der.extend_from_slice(leaf.issuer.as_bytes());
                (ISSUER_V2, der)
            }
        };
        params.custom_extensions = vec![CustomExtension::from_oid_content(oid, content)];
        let issuer = Issuer::from_params(&self.params, &self.key);
        Ok(params
            .signed_by(public, &issuer)
            .map_err(cert_error)?
            .der()
            .to_vec())
    }
}

/// A P-256 public key from its SubjectPublicKeyInfo DER (what `cosign.pub` holds), for
/// [`TestCa::issue`].
pub struct P256Public(Vec<u8>);

impl P256Public {
    /// From SubjectPublicKeyInfo DER.
    pub fn from_spki(der: &[u8]) -> Result<Self> {
        der.strip_prefix(&P256_SPKI_PREFIX[..])
            .map(|point| Self(point.to_vec()))
            .ok_or_else(|| Error::Tool("not a P-256 public key".into()))
    }
}

impl PublicKeyData for P256Public {
    fn der_bytes(&self) -> &[u8] {
        &self.0
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        &rcgen::PKCS_ECDSA_P256_SHA256
    }
}

/// A new P-256 leaf key pair (it signs: `rcgen::SigningKey::sign`).
pub fn leaf_key() -> Result<KeyPair> {
    KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(cert_error)
}

/// A Sigstore bundle v0.3 (what `cosign sign-blob --new-bundle-format --bundle` writes for a
/// keyless signature, without a transparency-log entry): the certificate `certificate_der` and
/// `key`'s message signature over `artifact`.
pub fn message_bundle(certificate_der: &[u8], key: &KeyPair, artifact: &[u8]) -> Result<String> {
    use base64::Engine;
    use rcgen::SigningKey;
    use sha2::Digest;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let signature = key.sign(artifact).map_err(cert_error)?;
    Ok(serde_json::json!({
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {"certificate": {"rawBytes": b64(certificate_der)}},
        "messageSignature": {
            "messageDigest": {"algorithm": "SHA2_256", "digest": b64(&sha2::Sha256::digest(artifact))},
            "signature": b64(&signature),
        },
    })
    .to_string())
}
