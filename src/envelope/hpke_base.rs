//! HPKE (RFC 9180) in base mode, single shot (sequence 0), for outpost's one suite:
//! DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305 (PROTOCOL §3.3).
//!
//! Written on the primitives (`x25519-dalek`, `hkdf`, `chacha20poly1305`) instead of
//! through the `hpke` crate because that crate computes a public key it already has on
//! every call: its `Decap` derives the recipient's public key from the secret key, and
//! its `Encap` derives the ephemeral public key a second time after generating the pair.
//! Each is a fixed-base scalar multiplication plus an inversion, about a seventh of an
//! open or a seal (docs/BENCHMARKS-crypto.md). The steps below are RFC 9180's, named
//! as there; `envelope::tests::public_vectors` checks them against the RFC's A.2.1
//! vector and `envelope::tests::hpke_reference` against the `hpke` crate on random
//! inputs (DECISIONS D12).

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use hkdf::{Hkdf, HkdfExtract};
use rand_core::{CryptoRng, RngCore};
use sha2::Sha256;
use x25519_dalek::{PublicKey, StaticSecret};
use zeroize::Zeroizing;

use super::Keys;

/// `suite_id` of the KEM: "KEM" ‖ I2OSP(0x0020, 2).
const KEM_SUITE: &[u8] = b"KEM\x00\x20";
/// `suite_id` of the whole suite: "HPKE" ‖ kem 0x0020 ‖ kdf 0x0001 ‖ aead 0x0003.
const HPKE_SUITE: &[u8] = b"HPKE\x00\x20\x00\x01\x00\x03";
const VERSION_LABEL: &[u8] = b"HPKE-v1";
/// `mode_base`.
const MODE_BASE: u8 = 0x00;

/// Why HPKE refused: the shared secret would be all zeros (a small-order public key),
/// or the ciphertext does not authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HpkeError {
    NotContributory,
    Aead,
}

/// `LabeledExtract(salt, label, ikm)`: the pseudorandom key's bytes, and the key ready
/// to expand.
fn labeled_extract(
    salt: &[u8],
    suite: &[u8],
    label: &[u8],
    ikm: &[u8],
) -> (Zeroizing<[u8; 32]>, Hkdf<Sha256>) {
    let mut e = HkdfExtract::<Sha256>::new(Some(salt));
    for part in [VERSION_LABEL, suite, label, ikm] {
        e.input_ikm(part);
    }
    let (prk, hk) = e.finalize();
    let mut bytes = Zeroizing::new([0u8; 32]);
    bytes.copy_from_slice(&prk);
    (bytes, hk)
}

/// `LabeledExpand(prk, label, info, L)` into `out` (L = `out.len()`, at most 255 × 32).
fn labeled_expand(prk: &Hkdf<Sha256>, suite: &[u8], label: &[u8], info: &[u8], out: &mut [u8]) {
    let len = (out.len() as u16).to_be_bytes();
    prk.expand_multi_info(&[&len, VERSION_LABEL, suite, label, info], out)
        .expect("HPKE output lengths here are 12 and 32 bytes");
}

/// `DeriveKeyPair(ikm)` for X25519 (§7.1.3).
pub fn derive_key_pair(ikm: &[u8]) -> (StaticSecret, PublicKey) {
    let (_, prk) = labeled_extract(b"", KEM_SUITE, b"dkp_prk", ikm);
    let mut sk = Zeroizing::new([0u8; 32]);
    labeled_expand(&prk, KEM_SUITE, b"sk", b"", &mut sk[..]);
    let sk = StaticSecret::from(*sk);
    let pk = PublicKey::from(&sk);
    (sk, pk)
}

/// `ExtractAndExpand(dh, enc ‖ pkRm)` (§4.1).
fn shared_secret(dh: &[u8; 32], enc: &[u8; 32], pk_r: &[u8; 32]) -> Zeroizing<[u8; 32]> {
    let (_, prk) = labeled_extract(b"", KEM_SUITE, b"eae_prk", dh);
    let mut kem_context = [0u8; 64];
    kem_context[..32].copy_from_slice(enc);
    kem_context[32..].copy_from_slice(pk_r);
    let mut out = Zeroizing::new([0u8; 32]);
    labeled_expand(
        &prk,
        KEM_SUITE,
        b"shared_secret",
        &kem_context,
        &mut out[..],
    );
    out
}

/// `KeySchedule(mode_base, shared_secret, info, "", "")` (§5.1): the AEAD key and the
/// base nonce (sequence 0 uses it as is).
fn key_schedule(shared: &[u8; 32], info: &[u8]) -> (Zeroizing<[u8; 32]>, [u8; 12]) {
    let (psk_id_hash, _) = labeled_extract(b"", HPKE_SUITE, b"psk_id_hash", b"");
    let (info_hash, _) = labeled_extract(b"", HPKE_SUITE, b"info_hash", info);
    let mut context = [0u8; 65];
    context[0] = MODE_BASE;
    context[1..33].copy_from_slice(&psk_id_hash[..]);
    context[33..].copy_from_slice(&info_hash[..]);
    let (_, secret) = labeled_extract(&shared[..], HPKE_SUITE, b"secret", b"");
    let mut key = Zeroizing::new([0u8; 32]);
    labeled_expand(&secret, HPKE_SUITE, b"key", &context, &mut key[..]);
    let mut nonce = [0u8; 12];
    labeled_expand(&secret, HPKE_SUITE, b"base_nonce", &context, &mut nonce);
    (key, nonce)
}

/// `SealBase(pkR, info, aad, pt)`: (`enc`, ciphertext ‖ tag). The ephemeral key is
/// `DeriveKeyPair` of 32 bytes drawn from `rng` (what `GenerateKeyPair` does in the
/// `hpke` crate, so a seeded RNG gives the same bytes as before).
pub fn seal<R: RngCore + CryptoRng>(
    pk_r: &[u8; 32],
    info: &[u8],
    plaintext: &[u8],
    aad: &[u8],
    rng: &mut R,
) -> Result<([u8; 32], Vec<u8>), HpkeError> {
    let mut ikm = Zeroizing::new([0u8; 32]);
    rng.fill_bytes(&mut ikm[..]);
    let (sk_e, pk_e) = derive_key_pair(&ikm[..]);
    // The ladder, or the recipient's table when it is sealed to often (`x25519`).
    let dh = super::x25519::agree_to(&Zeroizing::new(sk_e.to_bytes()), pk_r);
    // Not contributory: all zeros (checked without an early exit).
    if dh.iter().fold(0u8, |acc, b| acc | b) == 0 {
        return Err(HpkeError::NotContributory);
    }
    let enc = pk_e.to_bytes();
    let shared = shared_secret(&dh, &enc, pk_r);
    let (key, nonce) = key_schedule(&shared, info);
    let ct = ChaCha20Poly1305::new(Key::from_slice(&key[..]))
        .encrypt(
            Nonce::from_slice(&nonce),
            Payload {
                msg: plaintext,
                aad,
            },
        )
        .map_err(|_| HpkeError::Aead)?;
    Ok((enc, ct))
}

/// `OpenBase(enc, skR, info, aad, ct)` with the recipient's `keys`, whose public key is
/// known (not derived again).
pub fn open(
    keys: &Keys,
    enc: &[u8; 32],
    info: &[u8],
    ciphertext: &[u8],
    aad: &[u8],
) -> Result<Vec<u8>, HpkeError> {
    let dh = keys.kex_diffie_hellman(enc);
    if dh.iter().fold(0u8, |acc, b| acc | b) == 0 {
        return Err(HpkeError::NotContributory);
    }
    let shared = shared_secret(&dh, enc, keys.kex_pk().as_bytes());
    let (key, nonce) = key_schedule(&shared, info);
    ChaCha20Poly1305::new(Key::from_slice(&key[..]))
        .decrypt(
            Nonce::from_slice(&nonce),
            Payload {
                msg: ciphertext,
                aad,
            },
        )
        .map_err(|_| HpkeError::Aead)
}
