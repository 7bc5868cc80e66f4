//! The host's cryptography for fetching and verifying providers: `ring` as rustls' provider (registry
//! TLS) and as `sigstore-crypto`'s, in place of its default aws-lc backend. ECDSA over a
//! prehashed digest, which `sigstore-verify` asks for every message signature and `ring` does not
//! offer, runs on RustCrypto's `p256` and `p384`.

use ring::digest;
use ring::signature::{self, UnparsedPublicKey, VerificationAlgorithm};
use sigstore_verify::crypto::provider::{CryptoProvider, HashContext};
use sigstore_verify::crypto::{Error, Result, SigningScheme};
use sigstore_verify::types::HashAlgorithm;

/// `ring` as a `sigstore-crypto` provider: hashing and verification over whole messages, and
/// ECDSA P-256 and P-384 over digests (what Fulcio certificates and cosign keys use). Other
/// schemes over a digest (RSA) are refused as unsupported.
#[derive(Debug)]
pub struct RingCrypto;

struct RingHash(digest::Context);

impl HashContext for RingHash {
    fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    fn finalize(self: Box<Self>) -> Vec<u8> {
        self.0.finish().as_ref().to_vec()
    }
}

fn algorithm(scheme: SigningScheme) -> Option<&'static dyn VerificationAlgorithm> {
    Some(match scheme {
        SigningScheme::EcdsaP256Sha256 => &signature::ECDSA_P256_SHA256_ASN1,
        SigningScheme::EcdsaP256Sha384 => &signature::ECDSA_P256_SHA384_ASN1,
        SigningScheme::EcdsaP384Sha256 => &signature::ECDSA_P384_SHA256_ASN1,
        SigningScheme::EcdsaP384Sha384 => &signature::ECDSA_P384_SHA384_ASN1,
        SigningScheme::Ed25519 => &signature::ED25519,
        SigningScheme::RsaPssSha256 => &signature::RSA_PSS_2048_8192_SHA256,
        SigningScheme::RsaPssSha384 => &signature::RSA_PSS_2048_8192_SHA384,
        SigningScheme::RsaPssSha512 => &signature::RSA_PSS_2048_8192_SHA512,
        SigningScheme::RsaPkcs1Sha256 => &signature::RSA_PKCS1_2048_8192_SHA256,
        SigningScheme::RsaPkcs1Sha384 => &signature::RSA_PKCS1_2048_8192_SHA384,
        SigningScheme::RsaPkcs1Sha512 => &signature::RSA_PKCS1_2048_8192_SHA512,
        _ => return None,
    })
}

impl CryptoProvider for RingCrypto {
    fn hash(&self, algorithm: HashAlgorithm) -> Result<Box<dyn HashContext>> {
        let algorithm = match algorithm {
            HashAlgorithm::Sha2256 => &digest::SHA256,
            HashAlgorithm::Sha2384 => &digest::SHA384,
            HashAlgorithm::Sha2512 => &digest::SHA512,
            other => return Err(Error::UnsupportedAlgorithm(format!("{other:?}"))),
        };
        Ok(Box::new(RingHash(digest::Context::new(algorithm))))
    }

    fn verify_raw(
        &self,
        scheme: SigningScheme,
        spki_pubkey_bytes: &[u8],
        data: &[u8],
        signature: &[u8],
    ) -> Result<()> {
        let Some(algorithm) = algorithm(scheme) else {
            return Err(Error::UnsupportedAlgorithm(scheme.name().to_owned()));
        };
        UnparsedPublicKey::new(algorithm, spki_pubkey_bytes)
            .verify(data, signature)
            .map_err(|_| Error::Verification(format!("{} signature invalid", scheme.name())))
    }

    /// `spki_pubkey_bytes` is, despite its name, the key's point (SEC1), as for `verify_raw`:
    /// sigstore-crypto takes it out of the SubjectPublicKeyInfo before calling.
    fn verify_prehashed(
        &self,
        scheme: SigningScheme,
        spki_pubkey_bytes: &[u8],
        digest: &[u8],
        signature: &[u8],
    ) -> Result<()> {
        use p256::ecdsa::signature::hazmat::PrehashVerifier as _;
        let invalid = |what: &str| Error::Verification(format!("{} {what}", scheme.name()));
        match scheme {
            SigningScheme::EcdsaP256Sha256 | SigningScheme::EcdsaP256Sha384 => {
                let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(spki_pubkey_bytes)
                    .map_err(|_| invalid("public key invalid"))?;
                let signature = p256::ecdsa::Signature::from_der(signature)
                    .map_err(|_| invalid("signature is not DER"))?;
                key.verify_prehash(digest, &signature)
                    .map_err(|_| invalid("signature invalid"))
            }
            SigningScheme::EcdsaP384Sha256 | SigningScheme::EcdsaP384Sha384 => {
                let key = p384::ecdsa::VerifyingKey::from_sec1_bytes(spki_pubkey_bytes)
                    .map_err(|_| invalid("public key invalid"))?;
                let signature = p384::ecdsa::Signature::from_der(signature)
                    .map_err(|_| invalid("signature is not DER"))?;
                key.verify_prehash(digest, &signature)
                    .map_err(|_| invalid("signature invalid"))
            }
            _ => Err(Error::UnsupportedAlgorithm(format!(
                "{} over a prehashed digest (only ECDSA P-256 and P-384 are verified over a digest)",
                scheme.name()
            ))),
        }
    }
}

static RING: RingCrypto = RingCrypto;

/// Installs the host's crypto providers (ring) for `sigstore-crypto` and for rustls (registry
/// TLS), once; harmless when already installed.
pub fn install() {
    let _ = sigstore_verify::crypto::provider::install_default_provider(&RING);
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests;
