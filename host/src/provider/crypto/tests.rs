use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_ASN1_SIGNING, ECDSA_P384_SHA384_ASN1_SIGNING, EcdsaKeyPair,
    EcdsaSigningAlgorithm, KeyPair,
};

use super::*;

/// Signs `message` with a new key; returns the key's point (what sigstore-crypto hands a
/// provider) and the DER signature.
fn signed(algorithm: &'static EcdsaSigningAlgorithm, message: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(algorithm, &rng).unwrap();
    let pair = EcdsaKeyPair::from_pkcs8(algorithm, pkcs8.as_ref(), &rng).unwrap();
    let point = pair.public_key().as_ref().to_vec();
    (point, pair.sign(&rng, message).unwrap().as_ref().to_vec())
}

fn digest_of(algorithm: &'static digest::Algorithm, message: &[u8]) -> Vec<u8> {
    digest::digest(algorithm, message).as_ref().to_vec()
}

#[test]
fn ecdsa_verifies_over_a_digest() {
    let message = b"the component";
    for (signing, scheme, hash) in [
        (
            &ECDSA_P256_SHA256_ASN1_SIGNING,
            SigningScheme::EcdsaP256Sha256,
            &digest::SHA256,
        ),
        (
            &ECDSA_P384_SHA384_ASN1_SIGNING,
            SigningScheme::EcdsaP384Sha384,
            &digest::SHA384,
        ),
    ] {
        let (key, signature) = signed(signing, message);
        let digest = digest_of(hash, message);
        RingCrypto
            .verify_prehashed(scheme, &key, &digest, &signature)
            .unwrap();
        // The same over the whole message.
        RingCrypto
            .verify_raw(scheme, &key, message, &signature)
            .unwrap();
        // Another digest, another key, a broken signature.
        let other = digest_of(hash, b"other bytes");
        assert!(
            RingCrypto
                .verify_prehashed(scheme, &key, &other, &signature)
                .is_err()
        );
        let (stranger, _) = signed(signing, message);
        assert!(
            RingCrypto
                .verify_prehashed(scheme, &stranger, &digest, &signature)
                .is_err()
        );
        assert!(
            RingCrypto
                .verify_prehashed(scheme, &key, &digest, &signature[1..])
                .is_err()
        );
    }
}

#[test]
fn other_schemes_over_a_digest_are_unsupported() {
    let err = RingCrypto
        .verify_prehashed(SigningScheme::RsaPkcs1Sha256, &[], &[0; 32], &[])
        .unwrap_err();
    assert!(err.to_string().contains("only ECDSA"), "{err}");
}
