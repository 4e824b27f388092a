//! The envelope's own HPKE (`envelope::hpke_base`, RFC 9180 base mode for outpost's one
//! suite) against the `hpke` crate it replaced, on random inputs: the same IKM gives the
//! same `enc` and ciphertext, each side opens what the other sealed, and any change to
//! what is authenticated is refused by both.

use hpke::aead::ChaCha20Poly1305;
use hpke::kdf::HkdfSha256;
use hpke::kem::X25519HkdfSha256;
use hpke::{Deserializable as _, OpModeR, OpModeS, Serializable as _};
use proptest::prelude::*;

use crate::envelope::{hpke_open, hpke_seal, FixedRng, Keys};

/// rand_core 0.6 → the rand_core 0.9 traits the `hpke` crate takes.
struct Rng09(FixedRng);
impl hpke::rand_core::RngCore for Rng09 {
    fn next_u32(&mut self) -> u32 {
        rand_core::RngCore::next_u32(&mut self.0)
    }
    fn next_u64(&mut self) -> u64 {
        rand_core::RngCore::next_u64(&mut self.0)
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        rand_core::RngCore::fill_bytes(&mut self.0, dst)
    }
}
impl hpke::rand_core::CryptoRng for Rng09 {}

fn reference_seal(
    pk_r: &[u8; 32],
    info: &[u8],
    pt: &[u8],
    aad: &[u8],
    ikm: &[u8],
) -> (Vec<u8>, Vec<u8>) {
    let pk = <X25519HkdfSha256 as hpke::Kem>::PublicKey::from_bytes(pk_r).unwrap();
    let (enc, ct) = hpke::single_shot_seal::<ChaCha20Poly1305, HkdfSha256, X25519HkdfSha256, _>(
        &OpModeS::Base,
        &pk,
        info,
        pt,
        aad,
        &mut Rng09(FixedRng::new(ikm)),
    )
    .unwrap();
    (enc.to_bytes().to_vec(), ct)
}

fn reference_open(
    sk_r: &[u8; 32],
    enc: &[u8],
    info: &[u8],
    ct: &[u8],
    aad: &[u8],
) -> Option<Vec<u8>> {
    let sk = <X25519HkdfSha256 as hpke::Kem>::PrivateKey::from_bytes(sk_r).ok()?;
    let enc = <X25519HkdfSha256 as hpke::Kem>::EncappedKey::from_bytes(enc).ok()?;
    hpke::single_shot_open::<ChaCha20Poly1305, HkdfSha256, X25519HkdfSha256>(
        &OpModeR::Base,
        &sk,
        &enc,
        info,
        ct,
        aad,
    )
    .ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn same_bytes_as_the_hpke_crate_and_each_opens_the_others(
        sk_r in any::<[u8; 32]>(),
        ikm in any::<[u8; 32]>(),
        info in prop::collection::vec(any::<u8>(), 0..64),
        aad in prop::collection::vec(any::<u8>(), 0..64),
        pt in prop::collection::vec(any::<u8>(), 0..600),
        flip in any::<prop::sample::Index>(),
    ) {
        let keys = Keys::from_secret_bytes(&[1u8; 32], &sk_r);
        let pk_r = keys.kex_pk().to_bytes();
        let (enc, ct) = hpke_seal(&pk_r, &info, &pt, &aad, &mut FixedRng::new(&ikm)).unwrap();
        let (ref_enc, ref_ct) = reference_seal(&pk_r, &info, &pt, &aad, &ikm);
        prop_assert_eq!(&enc, &ref_enc);
        prop_assert_eq!(&ct, &ref_ct);
        prop_assert_eq!(hpke_open(&keys, &ref_enc, &info, &ref_ct, &aad).unwrap(), pt.clone());
        prop_assert_eq!(reference_open(&sk_r, &enc, &info, &ct, &aad), Some(pt.clone()));

        // One flipped bit in the ciphertext, the enc, the info or the aad: both refuse.
        let mut bad_ct = ct.clone();
        let i = flip.index(bad_ct.len());
        bad_ct[i] ^= 0x01;
        prop_assert!(hpke_open(&keys, &enc, &info, &bad_ct, &aad).is_err());
        prop_assert!(reference_open(&sk_r, &enc, &info, &bad_ct, &aad).is_none());
        let mut bad_enc = enc.clone();
        bad_enc[flip.index(32)] ^= 0x01;
        prop_assert_eq!(
            hpke_open(&keys, &bad_enc, &info, &ct, &aad).is_ok(),
            reference_open(&sk_r, &bad_enc, &info, &ct, &aad).is_some()
        );
        prop_assert!(hpke_open(&keys, &bad_enc, &info, &ct, &aad).is_err());
        let mut bad_info = info.clone();
        bad_info.push(0);
        prop_assert!(hpke_open(&keys, &enc, &bad_info, &ct, &aad).is_err());
        let mut bad_aad = aad.clone();
        bad_aad.push(0);
        prop_assert!(hpke_open(&keys, &enc, &info, &ct, &bad_aad).is_err());
    }
}

#[test]
fn a_small_order_enc_or_recipient_key_is_refused_like_the_hpke_crate_does() {
    let keys = Keys::from_secret_bytes(&[1u8; 32], &[2u8; 32]);
    // u = 0 and u = 1, small-order points (RFC 7748 §6.1, Wycheproof): the DH output
    // is all zeros.
    let small: [[u8; 32]; 2] = [[0u8; 32], {
        let mut p = [0u8; 32];
        p[0] = 1;
        p
    }];
    for enc in small {
        assert!(hpke_open(&keys, &enc, b"i", &[0u8; 32], b"").is_err());
        assert!(hpke_seal(&enc, b"i", b"pt", b"", &mut FixedRng::new(&[3u8; 32])).is_err());
    }
    // A wrong-length enc is refused, not a panic.
    assert!(hpke_open(&keys, &[0u8; 31], b"i", &[0u8; 32], b"").is_err());
}
