//! `POST /v1/commands` with the caller's idempotency key (issue 25): a retry after a
//! lost answer is answered as the first request was and queues nothing. Both engines
//! (the `gateway_pg` binary runs this file again on PostgreSQL).

use serde_json::{json, Value};

use crate::gateway::{start, Fixture, NODE};
use crate::harness::{http, text};

fn token(f: &Fixture, sub: &str) -> String {
    let o = f.home.cli(&[
        "token",
        "issue",
        "--aud",
        "gateway:main",
        "--ttl",
        "10m",
        "--sub",
        sub,
        "--scope",
        "command:note",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

/// `POST /v1/commands` as `tok`, with `Idempotency-Key: key` when given.
async fn post(f: &Fixture, tok: &str, key: Option<&str>, body: &Value) -> (u16, Value) {
    let mut r = http().post(f.gw.url("/v1/commands")).bearer_auth(tok);
    if let Some(k) = key {
        r = r.header("Idempotency-Key", k);
    }
    let resp = r.json(body).send().await.unwrap();
    let st = resp.status().as_u16();
    (st, resp.json().await.unwrap())
}

fn id(answer: &Value) -> &str {
    answer["message_id"].as_str().unwrap()
}

fn note(n: u64) -> Value {
    json!({"target": {"node_id": NODE}, "command_type": "note", "body": {"n": n}, "ttl_s": 600})
}

/// Everything queued for the node, acknowledged: its message ids.
async fn drain(f: &Fixture) -> Vec<String> {
    let pq = format!("/v1/nodes/{NODE}/pull?wait_s=0&max=100");
    let (st, v) = f.signed("GET", &pq, None, |_, _| {}).await;
    assert_eq!(st, 200, "{v}");
    let ids: Vec<String> = v["envelopes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["message_id"].as_str().unwrap().to_string())
        .collect();
    let ack = json!({ "message_ids": ids });
    let (st, a) = f
        .signed(
            "POST",
            &format!("/v1/nodes/{NODE}/ack"),
            Some(&ack),
            |_, _| {},
        )
        .await;
    assert_eq!(st, 200, "{a}");
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_repeated_with_its_idempotency_key_is_answered_alike_and_queued_once() {
    let f = start();
    let alice = token(&f, "alice");
    let (st, first) = post(&f, &alice, Some("order-1"), &note(1)).await;
    assert_eq!(st, 202, "{first}");
    let (st, again) = post(&f, &alice, Some("order-1"), &note(1)).await;
    assert_eq!(
        (st, &again),
        (202, &first),
        "the retry gets the first answer"
    );

    // Concurrent repeats of one key: one command.
    let answers = futures_util::future::join_all(
        (0..8).map(|_| async { post(&f, &alice, Some("order-2"), &note(2)).await }),
    )
    .await;
    let second = answers[0].1.clone();
    for (st, v) in &answers {
        assert_eq!((*st, v), (202, &second));
    }
    assert_ne!(second["message_id"], first["message_id"]);

    let delivered = drain(&f).await;
    assert_eq!(delivered, [id(&first), id(&second)]);
    // Delivered and acknowledged: a late retry still gets the first answer, and queues
    // nothing.
    let (st, late) = post(&f, &alice, Some("order-1"), &note(1)).await;
    assert_eq!((st, &late), (202, &first));
    assert!(drain(&f).await.is_empty(), "a retry was queued again");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idempotency_key_reused_for_another_request_is_409_and_keys_are_per_caller() {
    let f = start();
    let (alice, bob) = (token(&f, "alice"), token(&f, "bob"));
    let (st, first) = post(&f, &alice, Some("k"), &note(1)).await;
    assert_eq!(st, 202, "{first}");
    // Same key, another body (or TTL): refused, nothing queued.
    let (st, v) = post(&f, &alice, Some("k"), &note(2)).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (409, Some("idempotency_conflict")),
        "{v}"
    );
    let mut longer = note(1);
    longer["ttl_s"] = json!(700);
    let (st, v) = post(&f, &alice, Some("k"), &longer).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (409, Some("idempotency_conflict"))
    );
    // Another caller's "k" is its own key: its own command.
    let (st, bobs) = post(&f, &bob, Some("k"), &note(2)).await;
    assert_eq!(st, 202, "{bobs}");
    assert_ne!(bobs["message_id"], first["message_id"]);
    let (st, again) = post(&f, &bob, Some("k"), &note(2)).await;
    assert_eq!((st, &again), (202, &bobs));
    assert_eq!(
        drain(&f).await,
        [id(&first), id(&bobs)],
        "one command per caller's key"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_id_in_the_body_is_the_commands_id_and_its_key() {
    let f = start();
    let (alice, bob) = (token(&f, "alice"), token(&f, "bob"));
    let id = "0196a2b4-6c1e-7d2a-9f00-000000000001";
    let mut body = note(1);
    body["message_id"] = json!(id);
    let (st, first) = post(&f, &alice, None, &body).await;
    assert_eq!(
        (st, first["message_id"].as_str()),
        (202, Some(id)),
        "{first}"
    );
    let (st, again) = post(&f, &alice, None, &body).await;
    assert_eq!((st, &again), (202, &first));
    // The id names one message: another caller cannot take it.
    let (st, v) = post(&f, &bob, None, &body).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (409, Some("duplicate")),
        "{v}"
    );
    // Not a UUID: 400; a header key that stands for another id than the body's: 409.
    let mut bad = note(1);
    bad["message_id"] = json!("order-1");
    let (st, v) = post(&f, &alice, None, &bad).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (400, Some("bad_request"))
    );
    let (st, v) = post(&f, &alice, Some("order-1"), &body).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (409, Some("idempotency_conflict"))
    );
    // Without a key, each request is a command of its own (as before).
    let (_, a) = post(&f, &alice, None, &note(3)).await;
    let (_, b) = post(&f, &alice, None, &note(3)).await;
    assert_ne!(a["message_id"], b["message_id"]);
    assert_eq!(drain(&f).await.len(), 3);
}
