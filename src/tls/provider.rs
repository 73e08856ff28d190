//! The rustls crypto provider every link uses: rustls' *ring* provider, made from its public
//! parts.
//!
//! relink keeps *ring* because it builds with a C compiler alone (no cmake, Go or NASM, as
//! `aws-lc-rs` needs; build.md). rustls 0.23.48 deprecates `rustls::crypto::ring::default_provider`
//! because *ring* has no post-quantum key exchange, and offers a [`CryptoProvider`] made of
//! public parts as the way to any other provider: this is that value, with the same cipher
//! suites, key exchange groups, signature algorithms, random source and key loader as rustls'
//! own *ring* provider, so relink builds without a warning whichever rustls 0.23 a user's
//! lockfile resolves.

use std::sync::Arc;

use ring::rand::SecureRandom as _;
use rustls::crypto::ring::{sign, DEFAULT_CIPHER_SUITES, DEFAULT_KX_GROUPS};
use rustls::crypto::{
    CryptoProvider, GetRandomFailed, KeyProvider, SecureRandom, WebPkiSupportedAlgorithms,
};
use rustls::pki_types::PrivateKeyDer;
use rustls::sign::SigningKey;
use rustls::SignatureScheme;
use webpki::ring as alg;

/// rustls' *ring* provider: its default cipher suites and key exchange groups, webpki's *ring*
/// signature algorithms, *ring*'s system random source and key loader.
pub(crate) fn ring() -> CryptoProvider {
    CryptoProvider {
        cipher_suites: DEFAULT_CIPHER_SUITES.to_vec(),
        kx_groups: DEFAULT_KX_GROUPS.to_vec(),
        signature_verification_algorithms: SIGNATURES,
        secure_random: &Ring,
        key_provider: &Ring,
    }
}

/// The random source and the key loader, both *ring*'s.
#[derive(Debug)]
struct Ring;

impl SecureRandom for Ring {
    fn fill(&self, buf: &mut [u8]) -> Result<(), GetRandomFailed> {
        ring::rand::SystemRandom::new()
            .fill(buf)
            .map_err(|_| GetRandomFailed)
    }
}

impl KeyProvider for Ring {
    fn load_private_key(
        &self,
        key_der: PrivateKeyDer<'static>,
    ) -> Result<Arc<dyn SigningKey>, rustls::Error> {
        sign::any_supported_type(&key_der)
    }
}

/// What webpki verifies with *ring*, and which TLS signature scheme uses which algorithm (for
/// TLS 1.2 the curve is not fixed by the scheme; for TLS 1.3 it is).
static SIGNATURES: WebPkiSupportedAlgorithms = WebPkiSupportedAlgorithms {
    all: &[
        alg::ECDSA_P256_SHA256,
        alg::ECDSA_P256_SHA384,
        alg::ECDSA_P384_SHA256,
        alg::ECDSA_P384_SHA384,
        alg::ED25519,
        alg::RSA_PSS_2048_8192_SHA256_LEGACY_KEY,
        alg::RSA_PSS_2048_8192_SHA384_LEGACY_KEY,
        alg::RSA_PSS_2048_8192_SHA512_LEGACY_KEY,
        alg::RSA_PKCS1_2048_8192_SHA256,
        alg::RSA_PKCS1_2048_8192_SHA384,
        alg::RSA_PKCS1_2048_8192_SHA512,
        alg::RSA_PKCS1_2048_8192_SHA256_ABSENT_PARAMS,
        alg::RSA_PKCS1_2048_8192_SHA384_ABSENT_PARAMS,
        alg::RSA_PKCS1_2048_8192_SHA512_ABSENT_PARAMS,
    ],
    mapping: &[
        (
            SignatureScheme::ECDSA_NISTP384_SHA384,
            &[alg::ECDSA_P384_SHA384, alg::ECDSA_P256_SHA384],
        ),
        (
            SignatureScheme::ECDSA_NISTP256_SHA256,
            &[alg::ECDSA_P256_SHA256, alg::ECDSA_P384_SHA256],
        ),
        (SignatureScheme::ED25519, &[alg::ED25519]),
        (
            SignatureScheme::RSA_PSS_SHA512,
            &[alg::RSA_PSS_2048_8192_SHA512_LEGACY_KEY],
        ),
        (
            SignatureScheme::RSA_PSS_SHA384,
            &[alg::RSA_PSS_2048_8192_SHA384_LEGACY_KEY],
        ),
        (
            SignatureScheme::RSA_PSS_SHA256,
            &[alg::RSA_PSS_2048_8192_SHA256_LEGACY_KEY],
        ),
        (
            SignatureScheme::RSA_PKCS1_SHA512,
            &[alg::RSA_PKCS1_2048_8192_SHA512],
        ),
        (
            SignatureScheme::RSA_PKCS1_SHA384,
            &[alg::RSA_PKCS1_2048_8192_SHA384],
        ),
        (
            SignatureScheme::RSA_PKCS1_SHA256,
            &[alg::RSA_PKCS1_2048_8192_SHA256],
        ),
    ],
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_offers_tls13_and_tls12_suites_and_the_three_key_exchange_groups() {
        let p = ring();
        let suites: Vec<String> = p
            .cipher_suites
            .iter()
            .map(|s| format!("{:?}", s.suite()))
            .collect();
        assert!(
            suites.contains(&"TLS13_AES_128_GCM_SHA256".to_owned()),
            "{suites:?}"
        );
        assert!(
            suites.contains(&"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".to_owned()),
            "{suites:?}"
        );
        assert_eq!(p.cipher_suites.len(), 9, "{suites:?}");
        // rustls' default groups, in its order of preference (which its versions change).
        let mut groups: Vec<String> = p
            .kx_groups
            .iter()
            .map(|g| format!("{:?}", g.name()))
            .collect();
        groups.sort();
        assert_eq!(groups, ["X25519", "secp256r1", "secp384r1"]);
    }

    #[test]
    fn every_signature_scheme_maps_to_algorithms_the_provider_verifies_with() {
        let s = &ring().signature_verification_algorithms;
        assert_eq!(s.supported_schemes().len(), 9);
        for (_, algs) in s.mapping {
            for a in *algs {
                assert!(
                    s.all.iter().any(|b| std::ptr::addr_eq(*a, *b)),
                    "{a:?} is mapped and not in the list"
                );
            }
        }
    }

    #[test]
    fn the_random_source_fills_a_buffer() {
        let mut buf = [0u8; 32];
        ring().secure_random.fill(&mut buf).unwrap();
        assert_ne!(buf, [0u8; 32]);
    }
}
