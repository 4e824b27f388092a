//! Envelope seal/open throughput next to the raw primitives it is built from, measured in
//! the same run (see docs/BENCHMARKS-crypto.md for the command and recorded numbers).
//!
//! No bench framework: a fixed time budget per operation, median of several rounds, so it
//! runs anywhere `cargo bench` does. The question it answers is the overhead ratio
//! `envelope open / (Ed25519 verify + HPKE open)`, target ≤ 1.15.

// Benchmarks measure wall time; this is the one place outside src/clock.rs allowed to.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use ed25519_dalek::{Signer as _, SigningKey};
use hpke::aead::ChaCha20Poly1305;
use hpke::kdf::HkdfSha256;
use hpke::kem::X25519HkdfSha256;
use hpke::{Deserializable as _, Kem as _, OpModeR, OpModeS, Serializable as _};
use outpost::envelope::{
    open, seal, Envelope, IdentityDocument, Keys, OpenContext, Rights, SealParams, TrustStore,
};

const ROUNDS: usize = 7;
const ROUND_BUDGET: Duration = Duration::from_millis(300);

/// Median ns/op of `f` over ROUNDS rounds of ~ROUND_BUDGET each.
fn measure(name: &str, mut f: impl FnMut()) -> f64 {
    for _ in 0..50 {
        f();
    }
    let mut per_op = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let mut n = 0u64;
        while start.elapsed() < ROUND_BUDGET {
            for _ in 0..16 {
                f();
            }
            n += 16;
        }
        per_op.push(start.elapsed().as_nanos() as f64 / n as f64);
    }
    per_op.sort_by(|a, b| a.total_cmp(b));
    let ns = per_op[ROUNDS / 2];
    println!(
        "{name:<34} {:>10.1} µs/op {:>10.0} ops/s",
        ns / 1000.0,
        1e9 / ns
    );
    ns
}

/// A 1 KiB JSON object plaintext.
fn payload_1k() -> Vec<u8> {
    let filler = "x".repeat(1024 - r#"{"data":""}"#.len());
    let p = format!(r#"{{"data":"{filler}"}}"#).into_bytes();
    assert_eq!(p.len(), 1024);
    p
}

fn main() {
    // `cargo bench` passes `--bench`; ignore arguments.
    let now = 1_763_798_400_000u64;
    let gw = Keys::generate();
    let node = Keys::generate();
    let node_doc = IdentityDocument::new("node:pump-17", "node", &node, "2025-11-22T08:00:00Z");
    let mut trust = TrustStore::new();
    trust
        .add(
            IdentityDocument::new("gateway:main", "gateway", &gw, "2025-11-22T08:00:00Z"),
            Rights {
                send: true,
                issue: true,
            },
        )
        .expect("trusted");
    let plaintext = payload_1k();
    let params = SealParams {
        message_id: "01JDQ4Z5X7S8C1V2B3N4M5K6J7".into(),
        created_at_ms: now,
        expires_at_ms: now + 3_600_000,
        payload_type: "DATA".into(),
        priority: 0,
    };
    let env = seal(
        &gw,
        "gateway:main",
        &node_doc,
        &params,
        &plaintext,
        &mut rand_core::OsRng,
    )
    .expect("seal");
    let wire = env.to_json();
    let ctx = OpenContext {
        me: "node:pump-17",
        keys: &node,
        trust: &trust,
        now_ms: now,
        skew_ms: 300_000,
        max_bytes: 1 << 20,
        max_ttl_ms: 7 * 86_400_000,
    };
    assert!(open(&wire, &ctx, &|_, _| false).is_ok());

    // Raw primitives, on the same sizes the envelope uses.
    let signed = env.signed_bytes();
    let header = env.header_bytes();
    let mut info = b"outpost/envelope/v1".to_vec();
    info.extend_from_slice(b"node:pump-17");
    let sk = SigningKey::generate(&mut rand_core::OsRng);
    let vk = sk.verifying_key();
    let sig = sk.sign(&signed);
    let (hsk, hpk) = X25519HkdfSha256::gen_keypair(&mut HpkeRng);
    let (henc, hct) = hpke::single_shot_seal::<ChaCha20Poly1305, HkdfSha256, X25519HkdfSha256, _>(
        &OpModeS::Base,
        &hpk,
        &info,
        &plaintext,
        &header,
        &mut HpkeRng,
    )
    .expect("hpke seal");
    let henc_bytes = henc.to_bytes().to_vec();

    println!("payload 1024 B plaintext, envelope JSON {} B", wire.len());
    let sign_ns = measure("ed25519 sign", || {
        black_box(sk.sign(black_box(&signed)));
    });
    let verify_ns = measure("ed25519 verify_strict", || {
        black_box(vk.verify_strict(black_box(&signed), &sig)).expect("verify");
    });
    let hseal_ns = measure("hpke seal (1 KiB)", || {
        black_box(
            hpke::single_shot_seal::<ChaCha20Poly1305, HkdfSha256, X25519HkdfSha256, _>(
                &OpModeS::Base,
                &hpk,
                &info,
                black_box(&plaintext),
                &header,
                &mut HpkeRng,
            )
            .expect("seal"),
        );
    });
    let hopen_ns = measure("hpke open (1 KiB)", || {
        let enc =
            <X25519HkdfSha256 as hpke::Kem>::EncappedKey::from_bytes(&henc_bytes).expect("enc");
        black_box(
            hpke::single_shot_open::<ChaCha20Poly1305, HkdfSha256, X25519HkdfSha256>(
                &OpModeR::Base,
                &hsk,
                &enc,
                &info,
                black_box(&hct),
                &header,
            )
            .expect("open"),
        );
    });
    let eseal_ns = measure("envelope seal (1 KiB) + to_json", || {
        let e = seal(
            &gw,
            "gateway:main",
            &node_doc,
            &params,
            black_box(&plaintext),
            &mut rand_core::OsRng,
        )
        .expect("seal");
        black_box(e.to_json());
    });
    let eopen_ns = measure("envelope open (1 KiB, from JSON)", || {
        black_box(open(black_box(&wire), &ctx, &|_, _| false).expect("open"));
    });
    measure("  of which: parse JSON only", || {
        black_box(Envelope::from_json(black_box(&wire)).expect("parse"));
    });

    let seal_prims = sign_ns + hseal_ns;
    let open_prims = verify_ns + hopen_ns;
    println!();
    println!(
        "seal: envelope / (sign + hpke seal)   = {:.3}",
        eseal_ns / seal_prims
    );
    println!(
        "open: envelope / (verify + hpke open) = {:.3}  (target <= 1.15)",
        eopen_ns / open_prims
    );
}

/// rand_core 0.9 OS RNG for calling `hpke` directly (outpost's API bridges this itself).
struct HpkeRng;

impl hpke::rand_core::RngCore for HpkeRng {
    fn next_u32(&mut self) -> u32 {
        rand_core::RngCore::next_u32(&mut rand_core::OsRng)
    }
    fn next_u64(&mut self) -> u64 {
        rand_core::RngCore::next_u64(&mut rand_core::OsRng)
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, dst)
    }
}

impl hpke::rand_core::CryptoRng for HpkeRng {}
