//! HTTP to the gateway: reqwest with rustls (a pinned CA when `upstream.ca_file` is set),
//! every request signed per SPEC §6 (`Outpost-Node`, `Outpost-Timestamp`,
//! `Outpost-Signature` over method, path-and-query, timestamp and body hash).

use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::wire::ErrorAnswer;
use crate::config::Upstream;
use crate::envelope::{sign_request, Keys, HEADER_NODE, HEADER_SIGNATURE, HEADER_TIMESTAMP};

#[derive(Debug, Clone, thiserror::Error)]
pub enum SyncError {
    #[error("cannot reach the gateway: {0}")]
    Network(String),
    #[error("gateway answered {status} {code}")]
    Status { status: u16, code: String },
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

pub struct Transport {
    http: reqwest::Client,
    base: String,
    node_id: String,
    keys: Arc<Keys>,
    request_timeout: Duration,
}

impl Transport {
    pub fn new(up: &Upstream, node_id: &str, keys: Arc<Keys>) -> Result<Self, SyncError> {
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
            base: up.url.trim_end_matches('/').to_string(),
            node_id: node_id.to_string(),
            keys,
            request_timeout: Duration::from_secs(up.request_timeout_s.max(1)),
        })
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

    /// Send a signed request and read the answer as `T`. An answer that is not a `T`
    /// is [`SyncError::Malformed`]: the worker fails the chore and backs off, exactly
    /// as for a network error.
    async fn call<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
        now_ms: u64,
        extra_wait: Duration,
    ) -> Result<T, SyncError> {
        let url = reqwest::Url::parse(&format!("{}{}", self.base, path_and_query))
            .map_err(|e| SyncError::Setup(e.to_string()))?;
        // Sign exactly what goes on the wire after URL normalisation.
        let signed_pq = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_string(),
        };
        let has_body = body.is_some();
        let bytes = body.unwrap_or_default();
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
            .header(HEADER_SIGNATURE, sig);
        if has_body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(bytes);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| SyncError::Network(e.without_url().to_string()))?;
        let status = resp.status();
        let text = resp
            .bytes()
            .await
            .map_err(|e| SyncError::Network(e.without_url().to_string()))?;
        if !status.is_success() {
            // Already an error: a body without our error shape just leaves the code empty.
            let code = serde_json::from_slice::<ErrorAnswer>(&text)
                .map(|a| a.error.code)
                .unwrap_or_default();
            return Err(SyncError::Status {
                status: status.as_u16(),
                code,
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
