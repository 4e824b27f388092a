//! HTTP to the gateway: reqwest with rustls (a pinned CA when `upstream.ca_file` is set),
//! every request signed per PROTOCOL §5 (`Outpost-Node`, `Outpost-Timestamp`,
//! `Outpost-Signature` over method, path-and-query, timestamp and body hash).
//!
//! A 401 `clock_skew` carries the gateway's signed time; it becomes
//! [`SyncError::ClockSkew`] only once it verifies under the key the trust store pins for
//! `upstream.gateway_id` and echoes the signature just sent (PROTOCOL §5).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use ed25519_dalek::VerifyingKey;

use super::wire::ErrorAnswer;
use crate::config::Upstream;
use crate::envelope::{
    sign_request, verify_time_statement, Keys, HEADER_NODE, HEADER_SIGNATURE, HEADER_TIMESTAMP,
};

/// The signing key the node's trust store pins for a peer id, if any.
pub type PinnedKey = Arc<dyn Fn(&str) -> Option<VerifyingKey> + Send + Sync>;

#[derive(Debug, Clone, thiserror::Error)]
pub enum SyncError {
    #[error("cannot reach the gateway: {0}")]
    Network(String),
    /// The request went out but its answer did not come within the timeout: a slow
    /// link or an overloaded gateway (the sync loop then asks for smaller batches).
    #[error("no answer from the gateway in time: {0}")]
    Slow(String),
    #[error("gateway answered {status} {code}")]
    Status { status: u16, code: String },
    /// 401 `clock_skew` with a time statement that verified: the gateway's time was
    /// `gateway_ms` when it refused the request stamped `sent_ms`. A 4xx: about this
    /// node's clock, not the replica, so never a reason to fail over.
    #[error("gateway refused our timestamp {sent_ms} as outside the clock skew; its time is {gateway_ms}")]
    ClockSkew { gateway_ms: u64, sent_ms: u64 },
    #[error("gateway answer is malformed: {0}")]
    Malformed(String),
    #[error("upstream setup: {0}")]
    Setup(String),
}

impl SyncError {
    pub fn status(&self) -> Option<u16> {
        match self {
            SyncError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// The largest gateway answer the node reads. A pull answer carries at most ~4 MiB of
/// envelopes (the gateway's budget) and other answers are small; anything larger is
/// refused as it streams in, never buffered whole.
pub const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// A transport error: [`SyncError::Slow`] when a request that got through to the gateway
/// timed out waiting for (or reading) its answer, [`SyncError::Network`] otherwise
/// (refused, unreachable, a connect that timed out, a connection reset). The detail
/// keeps the cause chain: reqwest's own message alone is "error sending request".
fn network_error(e: reqwest::Error) -> SyncError {
    let slow = e.is_timeout() && !e.is_connect();
    let e = e.without_url();
    let mut detail = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        detail.push_str(": ");
        detail.push_str(&s.to_string());
        src = s.source();
    }
    if slow {
        SyncError::Slow(detail)
    } else {
        SyncError::Network(detail)
    }
}

/// The body of `resp`, refused once it exceeds `max` bytes.
async fn read_capped(mut resp: reqwest::Response, max: usize) -> Result<Vec<u8>, SyncError> {
    let too_large = || SyncError::Malformed(format!("answer too large (over {max} bytes)"));
    if resp.content_length().is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(network_error)? {
        if body.len() + chunk.len() > max {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

pub struct Transport {
    http: reqwest::Client,
    /// Replicas of the gateway, in order of preference; `current` is the one that
    /// answered last (the node sticks to it).
    bases: Vec<String>,
    current: std::sync::atomic::AtomicUsize,
    node_id: String,
    keys: Arc<Keys>,
    /// `upstream.gateway_id` and how to find the key pinned for it.
    gateway_id: String,
    pinned: PinnedKey,
    request_timeout: Duration,
    /// The last `Outpost-Timestamp` sent. Signatures are deterministic, so two equal
    /// requests in the same millisecond (a flush pull that came back empty, then the
    /// next) would carry the same signature and the gateway would refuse the second as
    /// a replay (401, then the link backs off): each request gets a later stamp.
    last_stamp_ms: AtomicU64,
}

impl Transport {
    pub fn new(
        up: &Upstream,
        node_id: &str,
        keys: Arc<Keys>,
        pinned: PinnedKey,
    ) -> Result<Self, SyncError> {
        let mut b = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(up.request_timeout_s.max(1)));
        if let Some(ca) = &up.ca_file {
            let pem = std::fs::read(ca)
                .map_err(|e| SyncError::Setup(format!("reading {}: {e}", ca.display())))?;
            let cert = reqwest::Certificate::from_pem(&pem)
                .map_err(|e| SyncError::Setup(format!("{}: {e}", ca.display())))?;
            b = b.add_root_certificate(cert);
        }
        let http = b.build().map_err(|e| SyncError::Setup(e.to_string()))?;
        Ok(Self {
            http,
            bases: up
                .urls
                .iter()
                .map(|u| u.trim_end_matches('/').to_string())
                .collect(),
            current: std::sync::atomic::AtomicUsize::new(0),
            node_id: node_id.to_string(),
            keys,
            gateway_id: up.gateway_id.clone(),
            pinned,
            request_timeout: Duration::from_secs(up.request_timeout_s.max(1)),
            last_stamp_ms: AtomicU64::new(0),
        })
    }

    /// `upstream.gateway_id`.
    pub fn gateway_id(&self) -> &str {
        &self.gateway_id
    }

    /// The gateway URL in use now.
    pub fn current_url(&self) -> &str {
        let i = self.current.load(std::sync::atomic::Ordering::Relaxed);
        self.bases.get(i).map(String::as_str).unwrap_or("")
    }

    /// `now_ms`, or one past the previous stamp if that is not earlier.
    fn stamp(&self, now_ms: u64) -> u64 {
        let mut cur = self.last_stamp_ms.load(Ordering::SeqCst);
        loop {
            let next = now_ms.max(cur.saturating_add(1));
            match self.last_stamp_ms.compare_exchange_weak(
                cur,
                next,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return next,
                Err(actual) => cur = actual,
            }
        }
    }

    /// A 401 `clock_skew` whose time statement is from our gateway, for us, and answers
    /// the request we signed `sig` at `sent_ms`: [`SyncError::ClockSkew`]. The stamp
    /// counter starts over, so the next request carries the (perhaps corrected) store
    /// time rather than one past a stamp the gateway found too far off.
    fn clock_skew(
        &self,
        status: u16,
        answer: Option<&ErrorAnswer>,
        sent_ms: u64,
        sig: &str,
    ) -> Option<SyncError> {
        let a = answer.filter(|a| status == 401 && a.error.code == "clock_skew")?;
        let Some(statement) = a.error.time.as_ref() else {
            tracing::warn!(
                event = "time_statement_refused",
                error = "clock_skew without a time statement"
            );
            return None;
        };
        let verified = match (self.pinned)(&self.gateway_id) {
            Some(key) => {
                verify_time_statement(statement, &self.gateway_id, &key, &self.node_id, sig)
                    .map_err(|e| e.to_string())
            }
            None => Err(format!("no key pinned for {}", self.gateway_id)),
        };
        match verified {
            Ok(gateway_ms) => {
                self.last_stamp_ms.store(0, Ordering::SeqCst);
                Some(SyncError::ClockSkew {
                    gateway_ms,
                    sent_ms,
                })
            }
            Err(e) => {
                tracing::warn!(event = "time_statement_refused", error = %e);
                None
            }
        }
    }

    /// `/v1/nodes/<me>/<what>`.
    pub fn node_path(&self, what: &str) -> String {
        format!("/v1/nodes/{}/{what}", self.node_id)
    }

    /// Signed `GET`; `extra_wait` lengthens the timeout for long-polls.
    pub async fn get<T: DeserializeOwned>(
        &self,
        path_and_query: &str,
        now_ms: u64,
        extra_wait: Duration,
    ) -> Result<T, SyncError> {
        self.call(
            reqwest::Method::GET,
            path_and_query,
            None,
            now_ms,
            extra_wait,
        )
        .await
    }

    /// Signed `POST` of a JSON body.
    pub async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path_and_query: &str,
        body: &B,
        now_ms: u64,
    ) -> Result<T, SyncError> {
        let bytes = serde_json::to_vec(body).map_err(|e| SyncError::Setup(e.to_string()))?;
        self.call(
            reqwest::Method::POST,
            path_and_query,
            Some(bytes),
            now_ms,
            Duration::ZERO,
        )
        .await
    }

    /// Send a signed request to the replica in use and read the answer as `T`. A
    /// connection error, a timeout or a 5xx moves to the next replica at once (each is
    /// tried at most once per call); the one that answers stays in use. Every request
    /// the node sends is safe to repeat (uploads and acks are deduplicated, pulls hand
    /// out what is not acked). An answer that is not a `T` is [`SyncError::Malformed`]:
    /// the worker fails the chore and backs off, exactly as for a network error.
    async fn call<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
        now_ms: u64,
        extra_wait: Duration,
    ) -> Result<T, SyncError> {
        use std::sync::atomic::Ordering;
        let n = self.bases.len().max(1);
        let first = self.current.load(Ordering::Relaxed) % n;
        let mut last = None;
        for k in 0..n {
            let i = (first + k) % n;
            let base = self.bases.get(i).map(String::as_str).unwrap_or("");
            let r = self
                .call_one(
                    base,
                    method.clone(),
                    path_and_query,
                    body.clone(),
                    now_ms,
                    extra_wait,
                )
                .await;
            let moves_on = match &r {
                Err(SyncError::Network(_) | SyncError::Slow(_)) => true,
                Err(SyncError::Status { status, .. }) => *status >= 500,
                _ => false,
            };
            if !moves_on || n == 1 {
                if i != first {
                    self.current.store(i, Ordering::Relaxed);
                    tracing::warn!(event = "upstream_failover", to = %base, "now using this gateway replica");
                }
                return r;
            }
            if let Err(e) = &r {
                tracing::warn!(event = "upstream_replica_failed", url = %base, error = %e);
            }
            last = Some(r);
        }
        // None answered: the next call starts with the one after the first.
        self.current.store((first + 1) % n, Ordering::Relaxed);
        last.unwrap_or_else(|| Err(SyncError::Setup("no upstream URL".into())))
    }

    async fn call_one<T: DeserializeOwned>(
        &self,
        base: &str,
        method: reqwest::Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
        now_ms: u64,
        extra_wait: Duration,
    ) -> Result<T, SyncError> {
        let url = reqwest::Url::parse(&format!("{base}{path_and_query}"))
            .map_err(|e| SyncError::Setup(e.to_string()))?;
        // Sign exactly what goes on the wire after URL normalisation.
        let signed_pq = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_string(),
        };
        let has_body = body.is_some();
        let bytes = body.unwrap_or_default();
        let now_ms = self.stamp(now_ms);
        let sig = sign_request(
            &self.keys,
            &self.node_id,
            method.as_str(),
            &signed_pq,
            now_ms,
            &bytes,
        );
        let mut req = self
            .http
            .request(method, url)
            .timeout(self.request_timeout + extra_wait)
            .header(HEADER_NODE, &self.node_id)
            .header(HEADER_TIMESTAMP, now_ms.to_string())
            .header(HEADER_SIGNATURE, &sig);
        if has_body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(bytes);
        }
        let resp = req.send().await.map_err(network_error)?;
        let status = resp.status();
        let text = read_capped(resp, MAX_ANSWER_BYTES).await?;
        if !status.is_success() {
            // Already an error: a body without our error shape just leaves the code empty.
            let answer = serde_json::from_slice::<ErrorAnswer>(&text).ok();
            if let Some(e) = self.clock_skew(status.as_u16(), answer.as_ref(), now_ms, &sig) {
                return Err(e);
            }
            return Err(SyncError::Status {
                status: status.as_u16(),
                code: answer.map(|a| a.error.code).unwrap_or_default(),
            });
        }
        serde_json::from_slice(&text).map_err(|e| {
            tracing::warn!(
                event = "gateway_answer_malformed",
                path = %signed_pq,
                error = %e
            );
            SyncError::Malformed(format!("{signed_pq}: {e}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Found by the fault harness (scripts/chaos.py flap and crash, docs/RELIABILITY.md
    /// F5): two identical requests signed in the same millisecond carried the same
    /// signature, and the gateway refused the second as a replay.
    #[tokio::test]
    async fn two_requests_in_one_millisecond_never_share_a_signature() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            loop {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        let Ok(n) = sock.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head: Vec<u8> = buf.drain(..end + 4).collect();
                            let _ = tx.send(String::from_utf8_lossy(&head).to_lowercase());
                            let ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
                            if sock.write_all(ok).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        let up = Upstream {
            url: format!("http://{addr}"),
            urls: vec![format!("http://{addr}")],
            gateway_id: "gateway:main".into(),
            ca_file: None,
            poll_wait_s: 1,
            request_timeout_s: 5,
        };
        let t = Transport::new(
            &up,
            "node:a",
            Arc::new(Keys::generate()),
            Arc::new(|_| None),
        )
        .unwrap();
        let path = t.node_path("pull") + "?wait_s=0&max=50";
        let now = 1_780_000_000_000;
        for _ in 0..3 {
            t.get::<serde_json::Value>(&path, now, Duration::ZERO)
                .await
                .unwrap();
        }
        let header = |head: &str, name: &str| -> String {
            head.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}: ")))
                .unwrap_or_default()
                .to_string()
        };
        let mut stamps = Vec::new();
        let mut sigs = std::collections::HashSet::new();
        for _ in 0..3 {
            let head = rx.recv().await.unwrap();
            stamps.push(header(&head, "outpost-timestamp").parse::<u64>().unwrap());
            sigs.insert(header(&head, "outpost-signature"));
        }
        assert_eq!(stamps, [now, now + 1, now + 2]);
        assert_eq!(sigs.len(), 3, "a signature was sent twice");
    }

    /// A server that answers every request 401 `clock_skew` with a statement made by
    /// `answer(signature header)`, and sends each request head to the channel.
    async fn skew_server(
        answer: impl Fn(&str) -> crate::envelope::TimeStatement + Send + Sync + 'static,
    ) -> (String, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let answer = Arc::new(answer);
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let (tx, answer) = (tx.clone(), answer.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while let Ok(n) = sock.read(&mut chunk).await {
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head: Vec<u8> = buf.drain(..end + 4).collect();
                            let head = String::from_utf8_lossy(&head).to_string();
                            let sig = header(&head, "outpost-signature");
                            let _ = tx.send(head);
                            let body = serde_json::json!({"ok": false, "error": {
                                "code": "clock_skew", "message": "x", "time": answer(&sig)}})
                            .to_string();
                            let resp = format!(
                                "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            if sock.write_all(resp.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (format!("http://{addr}"), rx)
    }

    /// A header's value (the name in any case).
    fn header(head: &str, name: &str) -> String {
        head.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(": ")?;
                k.eq_ignore_ascii_case(name).then(|| v.to_string())
            })
            .unwrap_or_default()
    }

    fn upstream(urls: Vec<String>) -> Upstream {
        Upstream {
            url: urls[0].clone(),
            urls,
            gateway_id: "gateway:main".into(),
            ca_file: None,
            poll_wait_s: 1,
            request_timeout_s: 5,
        }
    }

    /// RELIABILITY F2: the gateway's signed time comes back as `ClockSkew` once it
    /// verifies under the pinned key and echoes the request; it is about this node, so
    /// the next replica is not tried; and the next stamp is not one past the refused one.
    #[tokio::test]
    async fn a_verified_clock_skew_answer_is_clock_skew_without_failover() {
        use crate::envelope::sign_time_statement;
        const WEEK: u64 = 7 * 86_400_000;
        let real = 1_780_000_000_000;
        let gw = Keys::generate();
        let pk = gw.sign_pk();
        let (url, mut heads) =
            skew_server(move |sig| sign_time_statement(&gw, "gateway:main", "node:a", real, sig))
                .await;
        let (second, mut second_heads) = skew_server(|_| unreachable!()).await;
        let node = Arc::new(Keys::generate());
        let t = Transport::new(
            &upstream(vec![url, second]),
            "node:a",
            node.clone(),
            Arc::new(move |id: &str| (id == "gateway:main").then_some(pk)),
        )
        .unwrap();
        let path = t.node_path("pull") + "?wait_s=0&max=50";
        let err = t
            .get::<serde_json::Value>(&path, real + WEEK, Duration::ZERO)
            .await
            .unwrap_err();
        assert!(
            matches!(err, SyncError::ClockSkew { gateway_ms, sent_ms } if gateway_ms == real && sent_ms == real + WEEK),
            "{err:?}"
        );
        assert!(heads.recv().await.is_some());
        assert!(second_heads.try_recv().is_err(), "failed over on a 4xx");
        // The corrected time goes out as it is, not one past the week-ahead stamp.
        let err = t
            .get::<serde_json::Value>(&path, real + 10, Duration::ZERO)
            .await
            .unwrap_err();
        assert!(matches!(err, SyncError::ClockSkew { sent_ms, .. } if sent_ms == real + 10));
        let head = heads.recv().await.unwrap();
        assert_eq!(header(&head, "outpost-timestamp"), (real + 10).to_string());
    }

    /// A statement for another request, or by a key other than the one pinned for the
    /// gateway, is a plain 401.
    #[tokio::test]
    async fn a_statement_that_does_not_verify_is_a_plain_401() {
        use crate::envelope::sign_time_statement;
        let real = 1_780_000_000_000;
        let gw = Keys::generate();
        let pk = gw.sign_pk();
        let stranger = Arc::new(Keys::generate());
        // Another request's echo; the right echo under a key that is not the pinned one.
        for (signer, echo) in [(Arc::new(gw), Some("b3RoZXI")), (stranger, None)] {
            let (url, _heads) = skew_server(move |sig| {
                sign_time_statement(&signer, "gateway:main", "node:a", real, echo.unwrap_or(sig))
            })
            .await;
            let t = Transport::new(
                &upstream(vec![url]),
                "node:a",
                Arc::new(Keys::generate()),
                Arc::new(move |_: &str| Some(pk)),
            )
            .unwrap();
            let err = t
                .get::<serde_json::Value>(&t.node_path("pull"), real, Duration::ZERO)
                .await
                .unwrap_err();
            assert!(
                matches!(&err, SyncError::Status { status: 401, code } if code == "clock_skew"),
                "{err:?}"
            );
        }
    }
}
