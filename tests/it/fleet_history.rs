//! The fleet's history at the gateway, on both gateway engines: what `/v1/enrollments`
//! and `POST /v1/enroll` say of every key a node has had, after key rotations and its
//! retirement, and the gateway's own audit log of each of those decisions.

use serde_json::{json, Value};

use crate::harness::{http, text, Daemon, Home};
use crate::self_enroll::{gateway, make_token};
use crate::sim::{gateway_document, SimNode};

const NODE: &str = "node:hist";

/// `GET /v1/enrollments?state=all`: each key of `NODE` (b64url) and its state.
async fn states(gw: &Daemon, admin: &str) -> Vec<(String, String)> {
    let v: Value = http()
        .get(gw.url("/v1/enrollments?state=all"))
        .bearer_auth(admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut out: Vec<(String, String)> = v["enrollments"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .filter(|r| r["node_id"] == NODE)
        .map(|r| {
            (
                r["node_sign_pk"].as_str().unwrap().to_string(),
                r["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

fn key(n: &SimNode) -> String {
    outpost::envelope::b64_encode(&n.document().sign_pk)
}

/// `from` rotates to `to`'s keys on the signed node API.
async fn rotate(gw: &Daemon, from: &SimNode, to: &SimNode) {
    let rot = outpost::envelope::KeyRotation::new(from.keys(), to.keys(), to.document());
    let body = serde_json::to_value(&rot).unwrap();
    let pq = format!("/v1/nodes/{NODE}/rotate");
    let (st, v) = from.signed(gw, "POST", &pq, Some(&body)).await;
    assert_eq!((st, &v["applied"]), (200, &json!(true)), "{v}");
}

/// Events of the gateway's own log (`event detail`), after `audit verify` passed.
pub fn audit_events(gw: &Home) -> Vec<String> {
    let o = gw.cli(&["audit", "verify"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = gw.cli(&["audit", "export", "--jsonl"]);
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let e: Value = serde_json::from_str(l).unwrap();
            format!(
                "{} {}",
                e["event"].as_str().unwrap(),
                e["detail"].as_str().unwrap_or("")
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_rotated_away_is_refused_and_listed_rotated_and_a_retired_nodes_every_key_revoked() {
    let (home, gw) = gateway();
    let token = make_token(&home, &["--max-uses", "5", "--ttl", "1h"]);
    let admin = home.token("gateway:main", &["admin"], "1h");
    let doc = gateway_document(&gw).await;
    let (a, b, c) = (
        SimNode::generated(NODE),
        SimNode::generated(NODE),
        SimNode::generated(NODE),
    );
    let (st, v) = a.self_enroll(&gw, &doc, &token).await;
    assert_eq!(st, 200, "{v}");

    rotate(&gw, &a, &b).await;
    rotate(&gw, &b, &c).await;
    let mut want = vec![
        (key(&a), "rotated".to_string()),
        (key(&b), "rotated".to_string()),
        (key(&c), "enrolled".to_string()),
    ];
    want.sort();
    assert_eq!(states(&gw, &admin).await, want);
    for old in [&a, &b] {
        let (st, v) = old.self_enroll(&gw, &doc, &token).await;
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (403, Some("node_revoked")),
            "{v}"
        );
    }
    // The current key is still answered enrolled (a repeat after a lost answer).
    let (st, v) = c.self_enroll(&gw, &doc, &token).await;
    assert_eq!(st, 200, "{v}");

    let r = http()
        .post(gw.url("/v1/node_revocations"))
        .bearer_auth(&admin)
        .json(&json!({ "node_id": NODE }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
    let revoked: Vec<(String, String)> = want
        .iter()
        .map(|(k, _)| (k.clone(), "revoked".to_string()))
        .collect();
    assert_eq!(states(&gw, &admin).await, revoked);
    for old in [&a, &b, &c] {
        let (st, v) = old.self_enroll(&gw, &doc, &token).await;
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (403, Some("node_revoked")),
            "{v}"
        );
    }

    let events: Vec<String> = audit_events(&home)
        .into_iter()
        .filter(|e| e.contains(NODE))
        .map(|e| e.split(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(events, ["enroll", "rotate", "rotate", "revoke"]);
}
