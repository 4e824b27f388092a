//! Public test vectors, run through the exact crate instances and calls outpost uses:
//! RFC 9180 A.2.1 through `hpke_seal`/`hpke_open`; Wycheproof Ed25519 through
//! `VerifyingKey::verify_strict` (as `open`, identity and request verification do);
//! Wycheproof X25519 through our small-order policy and HPKE encapsulation;
//! ChaCha20-Poly1305 and HKDF-SHA256 through the `chacha20poly1305` 0.10 / `hkdf` 0.12
//! instances that `hpke` links.

use super::{hex, read_json};
use crate::envelope::{
    hpke_derive_public, hpke_open, hpke_seal, kex_pk_is_contributory, parse_kex_pk, FixedRng, Keys,
};

#[test]
fn rfc9180_a2_1_seal_and_open() {
    let v = read_json("hpke/rfc9180_a2_1.json");
    let g = |k: &str| hex(v[k].as_str().unwrap());
    let pk_r: [u8; 32] = g("pkRm").try_into().unwrap();
    // Our ephemeral key derivation from the IKM matches the RFC's pkEm.
    assert_eq!(hpke_derive_public(&g("ikmE")).to_vec(), g("pkEm"));
    let mut rng = FixedRng::new(&g("ikmE"));
    let (enc, ct) = hpke_seal(&pk_r, &g("info"), &g("pt"), &g("aad"), &mut rng).unwrap();
    assert_eq!(enc, g("enc"));
    assert_eq!(ct, g("ct"));
    let sk_r: [u8; 32] = g("skRm").try_into().unwrap();
    let keys = Keys::from_secret_bytes(&[0u8; 32], &sk_r);
    assert_eq!(keys.kex_pk().as_bytes().to_vec(), g("pkRm"));
    assert_eq!(
        hpke_open(&keys, &enc, &g("info"), &ct, &g("aad")).unwrap(),
        g("pt")
    );
    // And one flipped bit anywhere is refused.
    let mut bad = ct.clone();
    bad[3] ^= 1;
    assert!(hpke_open(&keys, &enc, &g("info"), &bad, &g("aad")).is_err());
    assert!(hpke_open(&keys, &enc, b"other info", &ct, &g("aad")).is_err());
}

fn wycheproof_tests(file: &str) -> Vec<(serde_json::Value, serde_json::Value)> {
    let v = read_json(file);
    let mut out = Vec::new();
    for group in v["testGroups"].as_array().unwrap() {
        for t in group["tests"].as_array().unwrap() {
            out.push((group.clone(), t.clone()));
        }
    }
    assert_eq!(
        out.len() as u64,
        v["numberOfTests"].as_u64().unwrap(),
        "{file}: all tests read"
    );
    out
}

#[test]
fn wycheproof_ed25519_strict_verify() {
    let mut checked = 0;
    for (group, t) in wycheproof_tests("wycheproof/ed25519_test.json") {
        let pk: [u8; 32] = hex(group["publicKey"]["pk"].as_str().unwrap())
            .try_into()
            .unwrap();
        let vk = ed25519_dalek::VerifyingKey::from_bytes(&pk).unwrap();
        let msg = hex(t["msg"].as_str().unwrap());
        let sig = hex(t["sig"].as_str().unwrap());
        let ok = <[u8; 64]>::try_from(sig.as_slice())
            .map(|s| {
                vk.verify_strict(&msg, &ed25519_dalek::Signature::from_bytes(&s))
                    .is_ok()
            })
            .unwrap_or(false);
        let want = t["result"] == "valid";
        assert_eq!(ok, want, "tcId {} ({})", t["tcId"], t["comment"]);
        checked += 1;
    }
    assert_eq!(checked, 151);
}

#[test]
fn wycheproof_x25519_and_small_order_policy() {
    let (mut zero, mut nonzero) = (0, 0);
    for (_, t) in wycheproof_tests("wycheproof/x25519_test.json") {
        let pk: [u8; 32] = hex(t["public"].as_str().unwrap()).try_into().unwrap();
        let sk: [u8; 32] = hex(t["private"].as_str().unwrap()).try_into().unwrap();
        let shared = hex(t["shared"].as_str().unwrap());
        let got =
            x25519_dalek::StaticSecret::from(sk).diffie_hellman(&x25519_dalek::PublicKey::from(pk));
        assert_eq!(got.as_bytes().to_vec(), shared, "tcId {}", t["tcId"]);
        let is_zero = shared.iter().all(|&b| b == 0);
        // Policy: a public key is refused exactly when DH with it yields all-zero, i.e.
        // it has small order; such a key never enters the trust store, and HPKE itself
        // refuses to encapsulate to it.
        assert_eq!(
            !kex_pk_is_contributory(&pk),
            is_zero,
            "tcId {} ({})",
            t["tcId"],
            t["comment"]
        );
        assert_eq!(parse_kex_pk(&pk).is_err(), is_zero, "tcId {}", t["tcId"]);
        if is_zero {
            assert!(hpke_seal(&pk, b"i", b"{}", b"a", &mut FixedRng::new(&sk)).is_err());
            zero += 1;
        } else {
            nonzero += 1;
        }
    }
    assert!(zero >= 31, "low-order cases exercised: {zero}");
    assert!(nonzero > 400);
}

#[test]
fn wycheproof_chacha20_poly1305() {
    use chacha20poly1305::aead::{Aead, KeyInit, Payload};
    use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
    let (mut valid, mut invalid) = (0, 0);
    for (_, t) in wycheproof_tests("wycheproof/chacha20_poly1305_test.json") {
        let g = |k: &str| hex(t[k].as_str().unwrap());
        let (key, iv, aad, msg) = (g("key"), g("iv"), g("aad"), g("msg"));
        let mut ct_tag = g("ct");
        ct_tag.extend_from_slice(&g("tag"));
        let want_valid = t["result"] == "valid";
        if iv.len() != 12 {
            // HPKE's ChaCha20Poly1305 only ever uses 96-bit nonces; other sizes cannot
            // reach this code path, which is the expected refusal.
            assert!(!want_valid, "tcId {}", t["tcId"]);
            invalid += 1;
            continue;
        }
        let cipher = ChaCha20Poly1305::new(Key::from_slice(&key));
        let opened = cipher.decrypt(
            Nonce::from_slice(&iv),
            Payload {
                msg: &ct_tag,
                aad: &aad,
            },
        );
        if want_valid {
            assert_eq!(opened.unwrap(), msg, "tcId {}", t["tcId"]);
            let sealed = cipher
                .encrypt(
                    Nonce::from_slice(&iv),
                    Payload {
                        msg: &msg,
                        aad: &aad,
                    },
                )
                .unwrap();
            assert_eq!(sealed, ct_tag, "tcId {}", t["tcId"]);
            valid += 1;
        } else {
            assert!(opened.is_err(), "tcId {} must be refused", t["tcId"]);
            invalid += 1;
        }
    }
    assert_eq!((valid, invalid), (256, 69));
}

#[test]
fn wycheproof_hkdf_sha256() {
    let (mut valid, mut invalid) = (0, 0);
    for (_, t) in wycheproof_tests("wycheproof/hkdf_sha256_test.json") {
        let g = |k: &str| hex(t[k].as_str().unwrap());
        let size = t["size"].as_u64().unwrap() as usize;
        let salt = g("salt");
        let hk = hkdf::Hkdf::<sha2::Sha256>::new(Some(&salt), &g("ikm"));
        let mut okm = vec![0u8; size];
        let res = hk.expand(&g("info"), &mut okm);
        if t["result"] == "valid" {
            res.unwrap();
            assert_eq!(okm, g("okm"), "tcId {}", t["tcId"]);
            valid += 1;
        } else {
            assert!(res.is_err(), "tcId {} must be refused", t["tcId"]);
            invalid += 1;
        }
    }
    assert_eq!((valid, invalid), (83, 3));
}
