//! The tamper matrix: every single-field change to a sealed envelope is refused with the
//! right code, and the pipeline's order (cheapest first, replay after signature) holds.

use crate::envelope::{
    open, seal, Envelope, IdentityDocument, Keys, OpenContext, OpenError, Opened, PrunedAhead,
    Rights, SealError, SealParams, TrustStore,
};

pub(crate) struct World {
    pub gw: Keys,
    pub other: Keys,
    pub node: Keys,
    pub node_doc: IdentityDocument,
    pub trust: TrustStore,
}

pub(crate) const ME: &str = "node:pump-17";
pub(crate) const T0: u64 = 1_763_798_400_000;
pub(crate) const SKEW: u64 = 300_000;

pub(crate) fn world() -> World {
    let gw = Keys::from_secret_bytes(&[0x11; 32], &[0x12; 32]);
    let other = Keys::from_secret_bytes(&[0x21; 32], &[0x22; 32]);
    let quiet = Keys::from_secret_bytes(&[0x31; 32], &[0x32; 32]);
    let node = Keys::from_secret_bytes(&[0x41; 32], &[0x42; 32]);
    let at = "2025-11-22T08:00:00Z";
    let mut trust = TrustStore::new();
    trust
        .add(
            IdentityDocument::new("gateway:main", "gateway", &gw, at),
            Rights {
                send: true,
                issue: true,
            },
        )
        .unwrap();
    trust
        .add(
            IdentityDocument::new("node:other", "node", &other, at),
            Rights {
                send: true,
                issue: false,
            },
        )
        .unwrap();
    trust
        .add(
            IdentityDocument::new("node:quiet", "node", &quiet, at),
            Rights {
                send: false,
                issue: false,
            },
        )
        .unwrap();
    let node_doc = IdentityDocument::new(ME, "node", &node, at);
    World {
        gw,
        other,
        node,
        node_doc,
        trust,
    }
}

pub(crate) fn params() -> SealParams {
    SealParams {
        message_id: "01JDQ4Z5X7S8C1V2B3N4M5K6J7".into(),
        created_at_ms: T0,
        expires_at_ms: T0 + 3_600_000,
        payload_type: "COMMAND".into(),
        priority: 5,
    }
}

pub(crate) const PLAINTEXT: &[u8] = br#"{"command_type":"setpoint","value":21.5}"#;

pub(crate) fn sealed(w: &World) -> Envelope {
    seal(
        &w.gw,
        "gateway:main",
        &w.node_doc,
        &params(),
        PLAINTEXT,
        &mut rand_core::OsRng,
    )
    .unwrap()
}

pub(crate) fn ctx(w: &World, now_ms: u64) -> OpenContext<'_> {
    OpenContext {
        me: ME,
        keys: &w.node,
        previous_keys: None,
        trust: &w.trust,
        now_ms,
        skew_ms: SKEW,
        max_bytes: 1 << 20,
        max_ttl_ms: 7 * 86_400_000,
        pruned_ahead: None,
    }
}

fn never_seen(_: &str, _: &str) -> bool {
    false
}

fn open_at(w: &World, env: &Envelope, now_ms: u64) -> Result<Opened, OpenError> {
    open(&env.to_json(), &ctx(w, now_ms), &never_seen)
}

fn code(r: Result<Opened, OpenError>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(e) => e.code(),
    }
}

#[test]
fn genuine_envelope_opens() {
    let w = world();
    let env = sealed(&w);
    let o = open_at(&w, &env, T0 + 1000).unwrap();
    assert_eq!(o.plaintext, PLAINTEXT);
    assert_eq!(o.sender_node_id, "gateway:main");
    assert_eq!((o.priority, o.payload_type.as_str()), (5, "COMMAND"));
}

#[test]
fn every_single_field_change_is_refused() {
    let w = world();
    let base = sealed(&w);
    type Mutation = (&'static str, fn(&mut Envelope), &'static str);
    let cases: Vec<Mutation> = vec![
        ("v", |e| e.v = 2, "unsupported_version"),
        (
            "suite",
            |e| e.suite = "X25519-HKDF-SHA256-AES128GCM".into(),
            "unsupported_version",
        ),
        ("message_id", |e| e.message_id.push('X'), "bad_signature"),
        (
            "sender → other trusted",
            |e| e.sender_node_id = "node:other".into(),
            "bad_signature",
        ),
        (
            "sender → unknown",
            |e| e.sender_node_id = "node:stranger".into(),
            "unknown_sender",
        ),
        (
            "sender → without send",
            |e| e.sender_node_id = "node:quiet".into(),
            "forbidden",
        ),
        (
            "recipient",
            |e| e.recipient_node_id = "node:pump-18".into(),
            "wrong_recipient",
        ),
        ("created_at_ms", |e| e.created_at_ms -= 1, "bad_signature"),
        ("expires_at_ms", |e| e.expires_at_ms += 1, "bad_signature"),
        (
            "payload_type",
            |e| e.payload_type = "DATA".into(),
            "bad_signature",
        ),
        ("priority", |e| e.priority = 6, "bad_signature"),
        ("enc", |e| e.enc[0] ^= 0x01, "bad_signature"),
        (
            "ciphertext first",
            |e| e.ciphertext[0] ^= 0x80,
            "bad_signature",
        ),
        (
            "ciphertext tag",
            |e| *e.ciphertext.last_mut().unwrap() ^= 1,
            "bad_signature",
        ),
        (
            "ciphertext truncated",
            |e| {
                e.ciphertext.pop();
            },
            "bad_signature",
        ),
        ("signature R", |e| e.signature[0] ^= 1, "bad_signature"),
        ("signature S", |e| e.signature[63] ^= 0x10, "bad_signature"),
        (
            "enc length",
            |e| {
                e.enc.pop();
            },
            "bad_request",
        ),
        ("signature length", |e| e.signature.push(0), "bad_request"),
        (
            "bad message id",
            |e| e.message_id = "has space".into(),
            "bad_request",
        ),
        (
            "expires before created",
            |e| e.expires_at_ms = e.created_at_ms,
            "bad_request",
        ),
    ];
    for (name, mutate, want) in cases {
        let mut env = base.clone();
        mutate(&mut env);
        assert_ne!(env, base, "{name}: mutation must change something");
        assert_eq!(code(open_at(&w, &env, T0 + 1000)), want, "{name}");
    }
}

#[test]
fn sender_swapped_and_resigned_by_another_trusted_key_fails_to_decrypt() {
    let w = world();
    let mut env = sealed(&w);
    env.sender_node_id = "node:other".into();
    env.signature = w.other.sign(&env.signed_bytes()).to_vec();
    // Signature is now genuine for node:other, but the AAD named gateway:main.
    assert_eq!(code(open_at(&w, &env, T0 + 1000)), "decrypt_failed");
}

#[test]
fn replay_is_duplicate_but_only_after_the_signature() {
    let w = world();
    let env = sealed(&w);
    let always_seen = |s: &str, id: &str| s == "gateway:main" && id == env.message_id;
    assert_eq!(
        code(open(&env.to_json(), &ctx(&w, T0 + 1000), &always_seen)),
        "duplicate"
    );
    // A forged envelope reusing a seen id is a signature failure, not a duplicate
    // (and must not make the caller remember anything).
    let mut forged = env.clone();
    forged.ciphertext[1] ^= 1;
    assert_eq!(
        code(open(&forged.to_json(), &ctx(&w, T0 + 1000), &always_seen)),
        "bad_signature"
    );
}

#[test]
fn time_window_edges() {
    let w = world();
    let env = sealed(&w);
    let exp = env.expires_at_ms;
    assert_eq!(code(open_at(&w, &env, exp + SKEW - 1)), "ok");
    assert_eq!(code(open_at(&w, &env, exp + SKEW)), "expired");
    assert_eq!(code(open_at(&w, &env, u64::MAX)), "expired");
    assert_eq!(code(open_at(&w, &env, T0 - SKEW)), "ok");
    assert_eq!(code(open_at(&w, &env, T0 - SKEW - 1)), "not_yet_valid");
    assert_eq!(code(open_at(&w, &env, 0)), "not_yet_valid");
}

/// RELIABILITY F2: a node whose time ran a week ahead pruned the ids of envelopes that
/// had expired by its time but not by real time; after its time was moved back, one of
/// those replayed would be "new". Envelopes created before the correction, no later
/// than the newest one it had remembered, that expired (with the skew) by the high water
/// are refused as expired; the others are not.
#[test]
fn after_a_time_correction_what_the_replay_memory_may_have_lost_is_expired() {
    let w = world();
    let env = sealed(&w); // created T0, expires T0 + 1 h
    let now = T0 + 60_000;
    let pruned_seen = |corrected_at_ms: u64, high_water_ms: u64, seen_created_max_ms: u64| {
        let mut c = ctx(&w, now);
        c.pruned_ahead = Some(PrunedAhead {
            corrected_at_ms,
            high_water_ms,
            seen_created_max_ms,
        });
        code(open(&env.to_json(), &c, &never_seen))
    };
    // The receiver had remembered an envelope created as late as this one.
    let pruned =
        |corrected_at_ms: u64, high_water_ms: u64| pruned_seen(corrected_at_ms, high_water_ms, T0);
    let week = 7 * 86_400_000;
    assert_eq!(code(open_at(&w, &env, now)), "ok", "without a correction");
    assert_eq!(pruned(T0 + 30_000, T0 + week), "expired");
    let exp = env.expires_at_ms;
    assert_eq!(pruned(T0 + 30_000, exp + SKEW), "expired", "the edge");
    assert_eq!(
        pruned(T0 + 30_000, exp + SKEW - 1),
        "ok",
        "its id was never pruned: time never reached its expiry plus the skew"
    );
    assert_eq!(
        pruned(T0, T0 + week),
        "ok",
        "created at (not before) the correction"
    );
    assert_eq!(
        pruned_seen(T0 + 30_000, T0 + week, T0 - 1),
        "ok",
        "created after every envelope the receiver had remembered: never pruned"
    );
}

#[test]
fn over_long_ttl_and_size_limits() {
    let w = world();
    let mut p = params();
    p.expires_at_ms = p.created_at_ms + 7 * 86_400_000 + 1;
    let env = seal(
        &w.gw,
        "gateway:main",
        &w.node_doc,
        &p,
        PLAINTEXT,
        &mut rand_core::OsRng,
    )
    .unwrap();
    assert_eq!(code(open_at(&w, &env, T0)), "ttl_too_long");
    let env = sealed(&w);
    let bytes = env.to_json();
    let mut c = ctx(&w, T0);
    c.max_bytes = bytes.len() - 1;
    assert_eq!(code(open(&bytes, &c, &never_seen)), "payload_too_large");
    c.max_bytes = bytes.len();
    assert_eq!(code(open(&bytes, &c, &never_seen)), "ok");
}

#[test]
fn cheapest_check_wins_when_several_fail() {
    let w = world();
    let mut env = sealed(&w);
    env.signature[0] ^= 1;
    env.recipient_node_id = "node:elsewhere".into();
    assert_eq!(code(open_at(&w, &env, T0)), "wrong_recipient");
    env.recipient_node_id = ME.into();
    assert_eq!(code(open_at(&w, &env, 0)), "not_yet_valid");
    env.sender_node_id = "node:stranger".into();
    assert_eq!(code(open_at(&w, &env, T0)), "unknown_sender");
}

#[test]
fn wire_strictness() {
    let w = world();
    let env = sealed(&w);
    let mut v: serde_json::Value = serde_json::from_slice(&env.to_json()).unwrap();
    v["extra"] = serde_json::json!(1);
    let r = open(&serde_json::to_vec(&v).unwrap(), &ctx(&w, T0), &never_seen);
    assert_eq!(code(r), "bad_request");
    // A future version with new fields is "unsupported", not "malformed".
    v["v"] = serde_json::json!(2);
    let r = open(&serde_json::to_vec(&v).unwrap(), &ctx(&w, T0), &never_seen);
    assert_eq!(code(r), "unsupported_version");
    // Padded base64 for the signature is refused.
    let mut v: serde_json::Value = serde_json::from_slice(&env.to_json()).unwrap();
    let s = format!("{}==", v["signature"].as_str().unwrap());
    v["signature"] = serde_json::json!(s);
    let r = open(&serde_json::to_vec(&v).unwrap(), &ctx(&w, T0), &never_seen);
    assert_eq!(code(r), "bad_request");
}

#[test]
fn seal_refuses_bad_input() {
    let w = world();
    let try_seal = |doc: &IdentityDocument, from: &str, pt: &[u8]| {
        seal(&w.gw, from, doc, &params(), pt, &mut rand_core::OsRng).unwrap_err()
    };
    let mut small_order = w.node_doc.clone();
    small_order.kex_pk = vec![0; 32];
    assert_eq!(
        try_seal(&small_order, "gateway:main", PLAINTEXT),
        SealError::RecipientKey
    );
    let mut short = w.node_doc.clone();
    short.kex_pk.pop();
    assert_eq!(
        try_seal(&short, "gateway:main", PLAINTEXT),
        SealError::RecipientKey
    );
    assert_eq!(
        try_seal(&w.node_doc, "gateway:main", b"[1,2]"),
        SealError::NotJsonObject
    );
    assert_eq!(
        try_seal(&w.node_doc, "Gateway", PLAINTEXT),
        SealError::Invalid("sender_node_id")
    );
}

#[test]
fn relay_check_verifies_without_decrypting() {
    let w = world();
    let env = sealed(&w);
    let relay = |e: &Envelope, now: u64| {
        crate::envelope::check_relay(e, &w.trust, now, SKEW, 7 * 86_400_000).map_err(|e| e.code())
    };
    assert_eq!(relay(&env, T0), Ok(()));
    let mut bad = env.clone();
    bad.ciphertext[0] ^= 1;
    assert_eq!(relay(&bad, T0), Err("bad_signature"));
    assert_eq!(relay(&env, env.expires_at_ms + SKEW), Err("expired"));
    let mut stranger = env.clone();
    stranger.sender_node_id = "node:stranger".into();
    assert_eq!(relay(&stranger, T0), Err("unknown_sender"));
    // The relay check does not need the recipient's key: a forged-sender re-sign passes it
    // (the signature is genuine) but the recipient's full pipeline refuses it.
    let mut resigned = env.clone();
    resigned.sender_node_id = "node:other".into();
    resigned.signature = w.other.sign(&resigned.signed_bytes()).to_vec();
    assert_eq!(relay(&resigned, T0), Ok(()));
    assert_eq!(code(open_at(&w, &resigned, T0)), "decrypt_failed");
}

/// After a key rotation: an envelope sealed to the node's retired key opens only while
/// the node still holds that key, and one signed by the sender's retired key verifies
/// only during the grace the trust store gives it.
#[test]
fn rotation_grace_for_the_recipient_and_for_the_sender() {
    use crate::envelope::{check_relay, KeyRotation, ROTATION_GRACE_MS};
    let w = world();
    let env = sealed(&w);
    // The node rotated: its new keys cannot open it, the retired pair can.
    let new_node = Keys::generate();
    let mut c = ctx(&w, T0 + 1000);
    c.keys = &new_node;
    let bytes = env.to_json();
    assert_eq!(code(open(&bytes, &c, &never_seen)), "decrypt_failed");
    c.previous_keys = Some(&w.node);
    assert_eq!(code(open(&bytes, &c, &never_seen)), "ok");

    // The gateway rotated after sealing: its old signature holds during the grace only.
    let mut trust = w.trust.clone();
    let gw2 = Keys::generate();
    let doc2 = IdentityDocument::new("gateway:main", "gateway", &gw2, "2025-11-23T08:00:00Z");
    trust
        .rotate(&KeyRotation::new(&w.gw, &gw2, doc2), T0, ROTATION_GRACE_MS)
        .unwrap();
    let mut c = ctx(&w, T0 + 1000);
    c.trust = &trust;
    assert_eq!(code(open(&bytes, &c, &never_seen)), "ok");
    assert!(check_relay(&env, &trust, T0 + 1000, SKEW, 7 * 86_400_000).is_ok());
    // Past the grace (the trust store's deadline), the old signature is refused.
    let mut late = trust.clone();
    let mut p = late.get("gateway:main").unwrap().clone();
    p.previous.as_mut().unwrap().until_ms = T0 + 500;
    late.insert(p);
    let mut c = ctx(&w, T0 + 1000);
    c.trust = &late;
    assert_eq!(code(open(&bytes, &c, &never_seen)), "bad_signature");
}
