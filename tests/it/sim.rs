//! A synthetic node whose keys the test holds: it enrols itself, signs requests (so
//! each can be sent to any gateway or replica, or replayed), pulls and acks; and a
//! client's command. Shared by the gateway suites of both engines.

#![allow(dead_code)] // each test binary uses part of it

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use outpost::clock::{Clock, SystemClock};
use outpost::enroll::{Request, Sealed, PAYLOAD_TYPE};
use outpost::envelope::{seal, sign_request, IdentityDocument, Keys, SealParams};
use serde_json::{json, Value};

use crate::harness::{http, text, Daemon, Home};

pub struct SimNode {
    pub id: String,
    keys: Keys,
    /// Added to this machine's clock for the timestamps it signs (a gateway that runs
    /// at another time, under libfaketime).
    skew_ms: i64,
}

impl SimNode {
    pub fn new(i: u8) -> SimNode {
        Self::with_keys(&format!("node:r{i}"), 40 + i)
    }

    /// `id` with keys derived from `seed` (another seed: the same node, new keys).
    pub fn with_keys(id: &str, seed: u8) -> SimNode {
        SimNode {
            id: id.to_string(),
            keys: Keys::from_secret_bytes(&[seed; 32], &[seed.wrapping_add(40); 32]),
            skew_ms: 0,
        }
    }

    /// `id` with fresh keys (a fleet of any size).
    pub fn generated(id: &str) -> SimNode {
        SimNode {
            id: id.to_string(),
            keys: Keys::generate(),
            skew_ms: 0,
        }
    }

    /// The same node, signing with its clock `skew_ms` off this machine's.
    pub fn skewed(self, skew_ms: i64) -> SimNode {
        SimNode { skew_ms, ..self }
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    pub fn document(&self) -> IdentityDocument {
        IdentityDocument::new(&self.id, "node", &self.keys, "2026-01-01T00:00:00Z")
    }

    /// `id` with keys derived from `n` (for fleets of more than 256 synthetic nodes).
    pub fn numbered(id: &str, n: u32) -> SimNode {
        let sign: [u8; 32] = n.to_le_bytes().repeat(8).try_into().unwrap();
        let kem: [u8; 32] = (n ^ 0x5a5a_5a5a)
            .to_le_bytes()
            .repeat(8)
            .try_into()
            .unwrap();
        SimNode {
            id: id.to_string(),
            keys: Keys::from_secret_bytes(&sign, &kem),
            skew_ms: 0,
        }
    }

    /// The body of `POST /v1/enroll` (PROTOCOL §15.3), as a device's client makes it:
    /// `token` sealed to `gateway` (its document, from the hello), signed by this node's
    /// key.
    pub fn enroll_request(&self, gateway: &IdentityDocument, token: &str) -> Vec<u8> {
        let sealed = serde_json::to_value(Sealed {
            token: token.to_string(),
            device: None,
        })
        .unwrap();
        self.enroll_request_sealing(gateway, &sealed)
    }

    /// [`Self::enroll_request`] sealing `sealed` as the request's plaintext (a device's
    /// facts, or members a gateway must refuse).
    pub fn enroll_request_sealing(&self, gateway: &IdentityDocument, sealed: &Value) -> Vec<u8> {
        let now = SystemClock.now_ms();
        let params = SealParams {
            message_id: format!("enroll-{}", uuid::Uuid::now_v7().simple()),
            created_at_ms: now,
            expires_at_ms: now + 600_000,
            payload_type: PAYLOAD_TYPE.into(),
            priority: 0,
        };
        let sealed = serde_json::to_vec(sealed).unwrap();
        let env = seal(
            &self.keys,
            &self.id,
            gateway,
            &params,
            &sealed,
            &mut rand_core::OsRng,
        )
        .unwrap();
        serde_json::to_vec(&Request {
            node: self.document(),
            envelope: serde_json::to_value(&env).unwrap(),
        })
        .unwrap()
    }

    /// Enroll itself at `gw`: the status and body of the answer.
    pub async fn self_enroll(
        &self,
        gw: &Daemon,
        gateway: &IdentityDocument,
        token: &str,
    ) -> (u16, Value) {
        loop {
            let body = self.enroll_request(gateway, token);
            let (st, v) = self
                .send(gw, "POST", "/v1/enroll", &[], &body)
                .await
                .expect("the gateway answers");
            // As a device does: a throttle (429 `rate_limited`) or busy decision slots
            // (429 `busy`) are tried again; another 429 (`tenant_quota`) is answered.
            let code = v["error"]["code"].as_str().unwrap_or("");
            if st != 429 || !matches!(code, "rate_limited" | "busy") {
                return (st, v);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn identity_json(&self) -> String {
        let doc = IdentityDocument::new(&self.id, "node", &self.keys, "2026-01-01T00:00:00Z");
        serde_json::to_string(&doc).unwrap()
    }

    pub fn enroll(&self, gw: &Home) {
        let o = gw.cli_stdin(
            &["trust", "add", "-", "--send"],
            self.identity_json().as_bytes(),
        );
        assert!(o.status.success(), "{}", text(&o));
    }

    /// The three signature headers for one request.
    pub fn sign(&self, method: &str, pq: &str, body: &[u8]) -> [(&'static str, String); 3] {
        let ts = SystemClock.now_ms().saturating_add_signed(self.skew_ms);
        let sig = sign_request(&self.keys, &self.id, method, pq, ts, body);
        [
            ("Outpost-Node", self.id.clone()),
            ("Outpost-Timestamp", ts.to_string()),
            ("Outpost-Signature", sig),
        ]
    }

    pub async fn send(
        &self,
        gw: &Daemon,
        method: &str,
        pq: &str,
        headers: &[(&'static str, String)],
        body: &[u8],
    ) -> Option<(u16, Value)> {
        self.send_within(gw, method, pq, headers, body, Duration::from_secs(30))
            .await
    }

    /// Like [`Self::send`], abandoned (the connection dropped) after `within`.
    pub async fn send_within(
        &self,
        gw: &Daemon,
        method: &str,
        pq: &str,
        headers: &[(&'static str, String)],
        body: &[u8],
        within: Duration,
    ) -> Option<(u16, Value)> {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut r = http().request(m, gw.url(pq)).timeout(within);
        for (k, v) in headers {
            r = r.header(*k, v);
        }
        if !body.is_empty() {
            r = r
                .header("content-type", "application/json")
                .body(body.to_vec());
        }
        let resp = r.send().await.ok()?;
        let st = resp.status().as_u16();
        Some((st, resp.json().await.unwrap_or(Value::Null)))
    }

    pub async fn signed(
        &self,
        gw: &Daemon,
        method: &str,
        pq: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let bytes = body
            .map(|b| serde_json::to_vec(b).unwrap())
            .unwrap_or_default();
        let h = self.sign(method, pq, &bytes);
        self.send(gw, method, pq, &h, &bytes)
            .await
            .expect("replica answers")
    }

    /// Pull (through `gw`) and return the envelopes' message ids and `pending_count`.
    pub async fn pull(&self, gw: &Daemon, wait_s: u64, max: usize) -> (Vec<String>, u64) {
        let pq = format!("/v1/nodes/{}/pull?wait_s={wait_s}&max={max}", self.id);
        self.pull_pq(gw, &pq).await
    }

    /// A flush pull of `max` beginning after `after` (a pipelining node).
    pub async fn pull_after(&self, gw: &Daemon, max: usize, after: &str) -> Vec<String> {
        let pq = format!(
            "/v1/nodes/{}/pull?wait_s=0&max={max}&after={after}",
            self.id
        );
        self.pull_pq(gw, &pq).await.0
    }

    async fn pull_pq(&self, gw: &Daemon, pq: &str) -> (Vec<String>, u64) {
        let (st, v) = self.signed(gw, "GET", pq, None).await;
        assert_eq!(st, 200, "{v}");
        let ids = v["envelopes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["message_id"].as_str().unwrap().to_string())
            .collect();
        (ids, v["pending_count"].as_u64().unwrap())
    }

    pub async fn ack(&self, gw: &Daemon, ids: &[String]) {
        let pq = format!("/v1/nodes/{}/ack", self.id);
        let (st, v) = self
            .signed(gw, "POST", &pq, Some(&json!({ "message_ids": ids })))
            .await;
        assert_eq!(st, 200, "{v}");
    }
}

/// The gateway's identity document, from its enrollment hello (`GET /v1/enroll`).
pub async fn gateway_document(gw: &Daemon) -> IdentityDocument {
    loop {
        let r = http()
            .get(gw.url("/v1/enroll?node_id=node:hello&nonce=n0"))
            .send()
            .await
            .unwrap();
        if r.status().as_u16() != 429 {
            let v: Value = r.json().await.unwrap();
            return serde_json::from_value(v["gateway"].clone()).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn command(gw: &Daemon, token: &str, node: &str, i: usize, ttl_s: u64) -> String {
    let r = http()
        .post(gw.url("/v1/commands"))
        .bearer_auth(token)
        .json(&json!({"target": {"node_id": node}, "command_type": "note",
                      "body": {"i": i}, "ttl_s": ttl_s}))
        .send()
        .await
        .unwrap();
    let st = r.status().as_u16();
    let v: Value = r.json().await.unwrap();
    assert_eq!(st, 202, "{v}");
    v["message_id"].as_str().unwrap().to_string()
}

/// Wait (up to 10 s) until `gw`'s `GET /v1/nodes` shows `node` holding a long-poll
/// (at any replica); returns its entry.
pub async fn wait_polling(gw: &Daemon, token: &str, node: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = http()
            .get(gw.url("/v1/nodes"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        let v: Value = r.json().await.unwrap();
        let entry = v["nodes"]
            .as_array()
            .and_then(|ns| ns.iter().find(|n| n["node_id"] == node).cloned());
        if let Some(e) = entry.filter(|e| e["polling"] == true) {
            return e;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{node} never shown polling: {v}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The `payload.i` of each message of a `GET /v1/inbox` answer, in its order.
pub fn inbox_ints(inbox: &Value) -> Vec<i64> {
    inbox["messages"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .filter_map(|m| m["payload"]["i"].as_i64())
                .collect()
        })
        .unwrap_or_default()
}

/// The node at `n` sends `{"k": k}` to `gateway:main` through its outbox (202).
pub async fn node_sends(n: &Daemon, token: &str, k: i64) {
    let r = http()
        .post(n.url("/v1/outbox"))
        .bearer_auth(token)
        .json(&json!({"to": "gateway:main", "payload_type": "DATA", "payload": {"k": k}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202, "{}", r.text().await.unwrap());
}

/// A client whose connections come from `ip` (a loopback alias: 127.0.0.2, …), with
/// an enrolling node's timeout (twice the default `upstream.request_timeout_s`).
pub fn client_from(ip: IpAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip)
        .timeout(Duration::from_secs(20))
        .pool_max_idle_per_host(64)
        .build()
        .unwrap()
}

pub fn loopback(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))
}

pub async fn post_enroll(c: &reqwest::Client, gwd: &Daemon, body: Vec<u8>) -> u16 {
    c.post(gwd.url("/v1/enroll"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}
