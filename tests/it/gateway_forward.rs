//! Envelopes a node uploads for another node are relayed unopened: the gateway cannot
//! decrypt them, but it checks what it can (PROTOCOL §3.5, §12.4) so forgeries and junk
//! never wait in another node's queue.

use outpost::clock::{Clock, SystemClock};
use outpost::envelope::{b64_encode, seal, IdentityDocument, Keys, SealParams};
use serde_json::{json, Value};

use crate::gateway::{start, Fixture, NODE, SEED};
use crate::harness::text;

fn envelope(to: &IdentityDocument, created_at_ms: u64, expires_at_ms: u64) -> Value {
    let keys = Keys::from_secret_bytes(&SEED, &[12; 32]);
    let params = SealParams {
        message_id: uuid::Uuid::now_v7().to_string(),
        created_at_ms,
        expires_at_ms,
        payload_type: "DATA".into(),
        priority: 0,
    };
    let env = seal(&keys, NODE, to, &params, b"{}", &mut rand::rngs::OsRng).unwrap();
    serde_json::from_slice(&env.to_json()).unwrap()
}

async fn upload(f: &Fixture, envs: Vec<Value>) -> Value {
    let body = json!({ "envelopes": envs });
    let (st, v) = f
        .signed(
            "POST",
            &format!("/v1/nodes/{NODE}/upload"),
            Some(&body),
            |_, _| {},
        )
        .await;
    assert_eq!(st, 200, "{v}");
    v
}

/// Before the fix, the forgery, the over-long TTL and the one from the future were
/// all `accepted` and queued for the other node (only the expiry was checked).
#[tokio::test(flavor = "multi_thread")]
async fn a_forwarded_envelope_is_checked_like_any_relayed_one() {
    let f = start();
    let other_keys = Keys::from_secret_bytes(&[21; 32], &[22; 32]);
    let other = IdentityDocument::new("node:t2", "node", &other_keys, "2026-01-01T00:00:00Z");
    let o = f.home.cli_stdin(
        &["trust", "add", "-", "--send"],
        &serde_json::to_vec(&other).unwrap(),
    );
    assert!(o.status.success(), "{}", text(&o));
    // The running gateway re-reads its trust store when a lookup misses.
    let now = SystemClock.now_ms();

    let good = envelope(&other, now, now + 600_000);
    let mut forged = envelope(&other, now, now + 600_000);
    forged["signature"] = Value::String(b64_encode(&[7u8; 64]));
    let too_long = envelope(&other, now, now + 8 * 24 * 3600 * 1000);
    let future = envelope(&other, now + 3_600_000, now + 4_000_000);
    let ids: Vec<Value> = [&good, &forged, &too_long, &future]
        .iter()
        .map(|e| e["message_id"].clone())
        .collect();

    let v = upload(&f, vec![good, forged, too_long, future]).await;
    assert_eq!(v["accepted"], json!([ids[0]]), "{v}");
    let code = |id: &Value| {
        v["rejected"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == *id)
            .map(|r| r["code"].clone())
    };
    assert_eq!(code(&ids[1]), Some(json!("bad_signature")), "{v}");
    assert_eq!(code(&ids[2]), Some(json!("ttl_too_long")), "{v}");
    assert_eq!(code(&ids[3]), Some(json!("not_yet_valid")), "{v}");
}
