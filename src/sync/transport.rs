//! HTTP to the gateway: reqwest with rustls (the gateway's key pinned by its identity
//! document, else the CA of `upstream.ca_file`: [`crate::tls_pin`]),
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
    sign_request, verify_time_statement, KeyRing, Keys, HEADER_NODE, HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
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
    /// A non-2xx answer: its status, code, and the gateway's message (control
    /// characters dropped, at most [`MAX_MESSAGE_CHARS`]; empty when it sent none).
    #[error("gateway answered {status} {code}{}", said(message))]
    Status {
        status: u16,
        code: String,
        message: String,
    },
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

/// The most of a gateway's error message a node keeps (it is shown in `outpost status`
/// and logged).
pub const MAX_MESSAGE_CHARS: usize = 300;

fn said(message: &str) -> String {
    if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    }
}

/// A gateway's error message as the node keeps it: printable, bounded.
fn kept(message: &str) -> String {
    message
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_MESSAGE_CHARS)
        .collect()
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
    let detail = crate::tls_pin::plain_error(&detail);
    if slow {
        SyncError::Slow(detail)
    } else {
        SyncError::Network(detail)
    }
}

/// The body of `resp`, refused once it exceeds `max` bytes.
async fn read_capped(resp: reqwest::Response, max: usize) -> Result<Vec<u8>, SyncError> {
    super::capped::read(resp, max).await.map_err(|e| match e {
        super::capped::BodyError::Read(e) => network_error(e),
        too_large => SyncError::Malformed(too_large.to_string()),
    })
}

pub struct Transport {
    http: reqwest::Client,
    /// Replicas of the gateway, in order of preference; `current` is the one that
    /// answered last (the node sticks to it).
    bases: Vec<String>,
    current: std::sync::atomic::AtomicUsize,
    node_id: String,
    /// The node's keys (a key rotation switches them while the link runs).
    keys: Arc<KeyRing>,
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
        keys: Arc<KeyRing>,
        pinned: PinnedKey,
    ) -> Result<Self, SyncError> {
        Self::with_tls_pin(up, node_id, keys, pinned, Arc::new(|| None))
    }

    /// `https://` upstreams are verified by `tls_pin` (the gateway's `tls_spki_sha256`
    /// from the trust store, asked at each handshake) when it has one, else by
    /// `upstream.ca_file`, else refused (crate::tls_pin).
    pub fn with_tls_pin(
        up: &Upstream,
        node_id: &str,
        keys: Arc<KeyRing>,
        pinned: PinnedKey,
        tls_pin: crate::tls_pin::PinSource,
    ) -> Result<Self, SyncError> {
        let tls = crate::tls_pin::client_config(tls_pin, up.ca_file.as_deref())
            .map_err(SyncError::Setup)?;
        let b = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(up.request_timeout_s.max(1)))
            .use_preconfigured_tls(tls);
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
        let (signed_pq, text) = self
            .call(
                reqwest::Method::GET,
                path_and_query,
                None,
                now_ms,
                extra_wait,
            )
            .await?;
        decode(&signed_pq, &text)
    }

    /// Signed `POST` of a JSON body.
    pub async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path_and_query: &str,
        body: &B,
        now_ms: u64,
    ) -> Result<T, SyncError> {
        let bytes = serde_json::to_vec(body).map_err(|e| SyncError::Setup(e.to_string()))?;
        let (signed_pq, text) = self
            .call(
                reqwest::Method::POST,
                path_and_query,
                Some(bytes),
                now_ms,
                Duration::ZERO,
            )
            .await?;
        decode(&signed_pq, &text)
    }

    /// [`Self::post`] signed with `keys` instead of the node's current pair.
    pub async fn post_signed_by<B: Serialize, T: DeserializeOwned>(
        &self,
        keys: &Keys,
        path_and_query: &str,
        body: &B,
        now_ms: u64,
    ) -> Result<T, SyncError> {
        let bytes = serde_json::to_vec(body).map_err(|e| SyncError::Setup(e.to_string()))?;
        let (signed_pq, text) = self
            .call_as(
                Some(keys),
                reqwest::Method::POST,
                path_and_query,
                Some(bytes),
                now_ms,
                Duration::ZERO,
            )
            .await?;
        decode(&signed_pq, &text)
    }

    /// Send a signed request to the replica in use; the path as signed and the body of a
    /// 2xx answer. A connection error, a timeout or a 5xx moves to the next replica at
    /// once (each is tried at most once per call); the one that answers stays in use.
    /// Every request the node sends is safe to repeat (uploads and acks are
    /// deduplicated, pulls hand out what is not acked). Not generic: one copy of the
    /// request machinery serves every answer type ([`decode`] reads it).
    async fn call(
        &self,
        method: reqwest::Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
        now_ms: u64,
        extra_wait: Duration,
    ) -> Result<(String, Vec<u8>), SyncError> {
        self.call_as(None, method, path_and_query, body, now_ms, extra_wait)
            .await
    }

    /// [`Self::call`], signed with `signer` when given (else the current pair).
    async fn call_as(
        &self,
        signer: Option<&Keys>,
        method: reqwest::Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
        now_ms: u64,
        extra_wait: Duration,
    ) -> Result<(String, Vec<u8>), SyncError> {
        use std::sync::atomic::Ordering;
        let n = self.bases.len().max(1);
        let first = self.current.load(Ordering::Relaxed) % n;
        let mut last = None;
        for k in 0..n {
            let i = (first + k) % n;
            let base = self.bases.get(i).map(String::as_str).unwrap_or("");
            let r = self
                .call_one(
                    signer,
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

    #[allow(clippy::too_many_arguments)] // one request, as `call_as` was given it
    async fn call_one(
        &self,
        signer: Option<&Keys>,
        base: &str,
        method: reqwest::Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
        now_ms: u64,
        extra_wait: Duration,
    ) -> Result<(String, Vec<u8>), SyncError> {
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
        let current = self.keys.current();
        let sig = sign_request(
            signer.unwrap_or(&current),
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
            let (code, message) = answer
                .map(|a| (a.error.code, kept(&a.error.message)))
                .unwrap_or_default();
            return Err(SyncError::Status {
                status: status.as_u16(),
                code,
                message,
            });
        }
        Ok((signed_pq, text))
    }
}

/// A 2xx answer read as `T`. One that is not a `T` is [`SyncError::Malformed`]: the
/// worker fails the chore and backs off, exactly as for a network error.
fn decode<T: DeserializeOwned>(signed_pq: &str, text: &[u8]) -> Result<T, SyncError> {
    serde_json::from_slice(text).map_err(|e| {
        tracing::warn!(
            event = "gateway_answer_malformed",
            path = %signed_pq,
            error = %e
        );
        SyncError::Malformed(format!("{signed_pq}: {e}"))
    })
}

#[cfg(test)]
#[path = "transport_tests.rs"]
mod tests;
