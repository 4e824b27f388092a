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
    hpke_open, open, seal, Envelope, IdentityDocument, Keys, OpenContext, Rights, SealParams,
    TrustStore,
};

const ROUNDS: usize = 9;
const ROUND_BUDGET: Duration = Duration::from_millis(250);

type Op<'a> = (&'static str, Box<dyn FnMut() + 'a>);

/// CPU time of this thread. Used instead of wall time because the benchmark machine is
/// shared: time spent descheduled is not the code's cost.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux supports.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Thread-CPU ns/op samples (one per round) of each operation, printed as median/min/max.
/// Rounds are interleaved (op1, op2, …, op1, op2, …) so a change in machine load hits
/// every operation alike and the ratios stay meaningful on a shared machine.
fn measure_all(ops: &mut [Op<'_>]) -> Vec<Vec<f64>> {
    for (_, f) in ops.iter_mut() {
        for _ in 0..50 {
            f();
        }
    }
    let mut samples = vec![Vec::with_capacity(ROUNDS); ops.len()];
    for _ in 0..ROUNDS {
        for (i, (_, f)) in ops.iter_mut().enumerate() {
            let start = Instant::now();
            let cpu_start = thread_cpu_ns();
            let mut n = 0u64;
            while start.elapsed() < ROUND_BUDGET {
                for _ in 0..8 {
                    f();
                }
                n += 8;
            }
            samples[i].push((thread_cpu_ns() - cpu_start) as f64 / n as f64);
        }
    }
    for (v, (name, _)) in samples.iter().zip(ops.iter()) {
        let mut sorted = v.clone();
        sorted.sort_by(|a, b| a.total_cmp(b));
        let ns = sorted[ROUNDS / 2];
        println!(
            "{name:<36} {:>9.1} µs/op {:>9.0} ops/s   (min {:.1}, max {:.1} µs)",
            ns / 1000.0,
            1e9 / ns,
            sorted[0] / 1000.0,
            sorted[ROUNDS - 1] / 1000.0
        );
    }
    samples
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
        previous_keys: None,
        trust: &trust,
        now_ms: now,
        skew_ms: 300_000,
        max_bytes: 1 << 20,
        max_ttl_ms: 7 * 86_400_000,
        pruned_ahead: None,
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
    let mut ops: Vec<Op<'_>> = vec![
        (
            "ed25519 sign",
            Box::new(|| {
                black_box(sk.sign(black_box(&signed)));
            }),
        ),
        (
            "ed25519 verify_strict",
            Box::new(|| {
                black_box(vk.verify_strict(black_box(&signed), &sig)).expect("verify");
            }),
        ),
        (
            "hpke seal (1 KiB)",
            Box::new(|| {
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
            }),
        ),
        (
            "hpke open (1 KiB)",
            Box::new(|| {
                let enc = <X25519HkdfSha256 as hpke::Kem>::EncappedKey::from_bytes(&henc_bytes)
                    .expect("enc");
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
            }),
        ),
        (
            "envelope seal (1 KiB) + to_json",
            Box::new(|| {
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
            }),
        ),
        (
            "envelope open (1 KiB, from JSON)",
            Box::new(|| {
                black_box(open(black_box(&wire), &ctx, &|_, _| false).expect("open"));
            }),
        ),
        (
            "  of which: parse JSON only",
            Box::new(|| {
                black_box(Envelope::from_json(black_box(&wire)).expect("parse"));
            }),
        ),
        (
            "  of which: crypto via outpost calls",
            Box::new(|| {
                // The two crypto steps exactly as `open` performs them.
                let peer = trust.get("gateway:main").expect("trusted");
                let sig = ed25519_dalek::Signature::from_slice(&env.signature).expect("sig");
                peer.keys
                    .sign
                    .verify_strict(&env.signed_bytes(), &sig)
                    .expect("verify");
                black_box(
                    hpke_open(&node, &env.enc, &info, &env.ciphertext, &env.header_bytes())
                        .expect("open"),
                );
            }),
        ),
        (
            "  of which: all non-crypto steps",
            Box::new(|| {
                // Parse, trust lookup, header/signed-bytes PAE, plaintext JSON check.
                let e = Envelope::from_json(black_box(&wire)).expect("parse");
                black_box(trust.get(&e.sender_node_id).expect("trusted"));
                black_box(e.signed_bytes());
                black_box(
                    serde_json::from_slice::<serde::de::IgnoredAny>(&plaintext).expect("json"),
                );
            }),
        ),
    ];
    let r = measure_all(&mut ops);
    // Ratios per round (the operations of one round ran back to back under the same
    // load), median over rounds; next to it the ratio of per-operation minima.
    let ratio = |env: usize, a: usize, b: usize| {
        let mut per_round: Vec<f64> = (0..ROUNDS)
            .map(|i| r[env][i] / (r[a][i] + r[b][i]))
            .collect();
        per_round.sort_by(|x, y| x.total_cmp(y));
        let min = |k: usize| r[k].iter().copied().fold(f64::INFINITY, f64::min);
        (per_round[ROUNDS / 2], min(env) / (min(a) + min(b)))
    };
    let (seal_med, seal_min) = ratio(4, 0, 2);
    let (open_med, open_min) = ratio(5, 1, 3);
    println!();
    println!("seal: envelope / (sign + hpke seal)   = {seal_med:.3} (median of rounds), {seal_min:.3} (minima)");
    println!("open: envelope / (verify + hpke open) = {open_med:.3} (median of rounds), {open_min:.3} (minima); target <= 1.15");
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
