//! A node that enrolls itself (PROTOCOL §15): with `upstream.enroll_token_file` and no
//! gateway trusted yet, it asks the gateway named by the token, pins it by the token's
//! fingerprint before sending anything secret, sends the token sealed to that gateway,
//! and on a signed "enrolled" trusts the gateway (send + issue, as a hand enrollment
//! does) and starts syncing. It retries with backoff while the gateway cannot be reached
//! or the enrollment waits for approval, and says why in its log and `/v1/status`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand_core::RngCore;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, EnrolledWith};
use crate::enroll::{codes, Answer, Hello, Request, Sealed, Standing, Token};
use crate::envelope::{
    b64_encode, seal, verify_time_statement, IdentityDocument, Keys, Rights, SealParams,
};
use crate::store::Store;

mod answer;

pub use answer::retry_wait;
use answer::{answer_json, refused_device_member, unit};

/// Where this node's enrollment stands (`/v1/status` → `upstream.enrollment`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EnrollStatus {
    /// `enrolling`, `pending`, `refused` or `enrolled`.
    pub state: String,
    /// The refusal's (or the last failure's) code, e.g. `token_exhausted`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// What happened, in a sentence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub gateway_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_id: Option<String>,
}

pub type SharedStatus = Arc<Mutex<EnrollStatus>>;

/// Backoff while the gateway cannot be reached (doubling, with jitter).
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);
/// While an operator has not decided.
const PENDING_EVERY: Duration = Duration::from_secs(15);
/// After a refusal retrying cannot fix: the token file may be replaced meanwhile.
const REFUSED_EVERY: Duration = Duration::from_secs(600);

/// The largest enrollment answer the node reads: the hello, the signed answer and a
/// refusal are each a few KiB at most. Whatever answers before the pin is checked may be
/// anyone (plain HTTP on the path, a spoofed name), so it gets no more memory than that.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// One attempt's outcome.
#[derive(Debug)]
enum Attempt {
    Enrolled {
        gateway: Box<IdentityDocument>,
        token_id: String,
    },
    Pending,
    /// Refused for a reason this token cannot overcome.
    Refused {
        code: String,
        reason: String,
    },
    /// Could not complete now (network, 5xx, rate limit): retry soon, not before the
    /// gateway's `Retry-After` when it sent one.
    Failed(String),
    /// The gateway answered "not now" (429, 503) and when to come back.
    Throttled {
        why: String,
        retry_after: Duration,
    },
}

/// What gets a refused enrollment through, by its code: a new token helps only when
/// the token was the problem.
pub fn refused_fix(code: &str) -> &'static str {
    match code {
        codes::REJECTED => {
            "an operator rejected this device at the gateway; a new token does not help: \
             if it should join, they run `outpost nodes approve <this node>` there and it is \
             let in at its next retry"
        }
        codes::NODE_REVOKED => {
            "this node was retired at the gateway; a new key (a reflashed device) enrolls \
             again with a token"
        }
        codes::DUPLICATE_NODE_ID => {
            "another device holds this node id and is connected: give this one its own name"
        }
        _ => "replace the token file with a valid token for this gateway (the node reads it at each retry)",
    }
}

/// The node's side, with what it needs from the daemon.
pub struct Enroller {
    pub cfg: Arc<Config>,
    pub keys: Arc<Keys>,
    pub store: Store,
    pub status: SharedStatus,
    /// What the device says about itself in its request (PROTOCOL §15.3).
    pub device: crate::fleet::Inventory,
}

impl Enroller {
    fn set(&self, state: &str, code: Option<&str>, reason: Option<String>, token: Option<&str>) {
        let mut s = self.status.lock().unwrap_or_else(|p| p.into_inner());
        let changed = s.state != state || s.code.as_deref() != code;
        s.state = state.to_string();
        s.code = code.map(str::to_string);
        s.reason = reason.clone();
        if token.is_some() {
            s.token_id = token.map(str::to_string);
        }
        if changed {
            let gateway = s.gateway_id.clone();
            drop(s);
            match state {
                "refused" => tracing::error!(
                    event = "enrollment_refused",
                    gateway = %gateway,
                    code = code.unwrap_or("-"),
                    reason = reason.as_deref().unwrap_or("-"),
                    fix = refused_fix(code.unwrap_or("-")),
                    "the gateway refused this node's enrollment; retrying every 10 minutes"
                ),
                "pending" => tracing::warn!(
                    event = "enrollment_pending",
                    gateway = %gateway,
                    "enrollment waits for an operator: `outpost nodes approve <this node>` on the gateway"
                ),
                "enrolling" => tracing::warn!(
                    event = "enrollment_retrying",
                    gateway = %gateway,
                    reason = reason.as_deref().unwrap_or("-"),
                    "cannot enroll yet; retrying with backoff"
                ),
                _ => {}
            }
        }
    }

    /// Enroll, retrying until enrolled (true) or shut down (false).
    pub async fn run(&self, shutdown: &CancellationToken) -> bool {
        let Some(up) = self.cfg.upstream.as_ref() else {
            return false;
        };
        let urls = up.urls.clone();
        let mut url_i = 0usize;
        let mut backoff = RETRY_MIN;
        loop {
            let url = &urls[url_i % urls.len().max(1)];
            let wait = match self.attempt(url).await {
                Attempt::Enrolled { gateway, token_id } => {
                    match self.trust_gateway(&gateway, &token_id).await {
                        Ok(()) => {
                            self.set("enrolled", None, None, Some(&token_id));
                            tracing::info!(
                                event = "enrolled",
                                gateway = %gateway.node_id,
                                token = %token_id,
                                "enrolled: the gateway trusts this node and this node trusts it"
                            );
                            return true;
                        }
                        Err(e) => {
                            self.set("enrolling", Some("store_failed"), Some(e), None);
                            RETRY_MAX
                        }
                    }
                }
                Attempt::Pending => {
                    self.set(
                        "pending",
                        Some(crate::enroll::PENDING_APPROVAL),
                        Some("waiting for an operator's approval at the gateway".into()),
                        None,
                    );
                    backoff = RETRY_MIN;
                    PENDING_EVERY
                }
                Attempt::Refused { code, reason } => {
                    self.set("refused", Some(&code), Some(reason), None);
                    REFUSED_EVERY
                }
                Attempt::Failed(why) => {
                    self.set("enrolling", Some("unreachable"), Some(why), None);
                    url_i += 1;
                    let w = retry_wait(backoff, None, unit());
                    backoff = (backoff * 2).min(RETRY_MAX);
                    w
                }
                Attempt::Throttled { why, retry_after } => {
                    self.set("enrolling", Some("busy"), Some(why), None);
                    url_i += 1;
                    let w = retry_wait(backoff, Some(retry_after), unit());
                    backoff = (backoff * 2).min(RETRY_MAX);
                    w
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return false,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    fn token(&self) -> Result<Token, Attempt> {
        let up = self.cfg.upstream.as_ref();
        let Some(file) = up.and_then(|u| u.enroll_token_file.as_ref()) else {
            return Err(Attempt::Refused {
                code: "no_token".into(),
                reason: "no upstream.enroll_token_file configured".into(),
            });
        };
        let text = std::fs::read_to_string(file).map_err(|e| Attempt::Refused {
            code: "no_token".into(),
            reason: format!("cannot read {}: {e}", file.display()),
        })?;
        let t = Token::parse(&text).map_err(|e| Attempt::Refused {
            code: "bad_token".into(),
            reason: format!("{}: {e}", file.display()),
        })?;
        let named = up.map(|u| u.gateway_id.as_str()).unwrap_or("");
        if !named.is_empty() && named != t.claims.gateway_id {
            return Err(Attempt::Refused {
                code: codes::WRONG_GATEWAY.into(),
                reason: format!(
                    "the token is for {}, upstream.gateway_id names {named}",
                    t.claims.gateway_id
                ),
            });
        }
        Ok(t)
    }

    fn http(&self, token: &Token) -> Result<reqwest::Client, String> {
        let up = self.cfg.upstream.as_ref().ok_or("no [upstream]")?;
        let pin = token.tls_pin();
        let tls = crate::tls_pin::client_config(Arc::new(move || pin), up.ca_file.as_deref())?;
        reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(up.request_timeout_s.max(1)))
            .timeout(Duration::from_secs(up.request_timeout_s.max(1) * 2))
            .use_preconfigured_tls(tls)
            .build()
            .map_err(|e| e.to_string())
    }

    async fn attempt(&self, url: &str) -> Attempt {
        let token = match self.token() {
            Ok(t) => t,
            Err(a) => return a,
        };
        {
            let mut s = self.status.lock().unwrap_or_else(|p| p.into_inner());
            s.gateway_id = token.claims.gateway_id.clone();
            s.token_id = Some(token.claims.id.clone());
        }
        let http = match self.http(&token) {
            Ok(h) => h,
            Err(e) => {
                return Attempt::Refused {
                    code: "tls_setup".into(),
                    reason: e,
                }
            }
        };
        match self.exchange(&http, url, &token).await {
            Ok(a) | Err(a) => a,
        }
    }

    /// Hello, pin, seal, post, verify: one enrollment attempt at `url`.
    async fn exchange(
        &self,
        http: &reqwest::Client,
        url: &str,
        token: &Token,
    ) -> Result<Attempt, Attempt> {
        let node_id = &self.cfg.node_id;
        let mut nonce = [0u8; 16];
        rand_core::OsRng.fill_bytes(&mut nonce);
        let nonce = b64_encode(&nonce);
        let failed =
            |what: &str, e: &dyn std::fmt::Display| Attempt::Failed(format!("{what} {url}: {e}"));
        // Node ids and b64url nonces are URL-safe as they are.
        let resp = http
            .get(format!("{url}/v1/enroll?node_id={node_id}&nonce={nonce}"))
            .send()
            .await
            .map_err(|e| failed("cannot reach", &e))?;
        let hello: Hello = answer_json(resp).await?;
        // Pinned before anything secret leaves the device.
        token
            .check_gateway_rotated(&hello.gateway, hello.rotation.as_ref())
            .map_err(|e| Attempt::Refused {
                code: codes::WRONG_GATEWAY.into(),
                reason: e.to_string(),
            })?;
        let gw_keys = hello.gateway.verify().map_err(|e| Attempt::Refused {
            code: codes::WRONG_GATEWAY.into(),
            reason: e.to_string(),
        })?;
        // The gateway's time, so a device without a real-time clock seals a request the
        // gateway finds fresh.
        let gw_now = verify_time_statement(
            &hello.time,
            &hello.gateway.node_id,
            &gw_keys.sign,
            node_id,
            &crate::enroll::hello_echo(&nonce),
        )
        .map_err(|e| Attempt::Refused {
            code: codes::WRONG_GATEWAY.into(),
            reason: format!("the gateway's signed time: {e}"),
        })?;
        let me = crate::daemon::files::read_identity(&self.cfg.data_dir)
            .map_err(|e| failed("identity", &e))?;
        let sent = Sent {
            http,
            url,
            node_id,
            gateway: &hello.gateway,
            gw_now,
            me: &me,
            token,
        };
        let answer = match self.post(&sent, Some(&self.device)).await {
            // A gateway older than PROTOCOL §15.3's `device` refuses the member: the same
            // request again without it.
            Err(Attempt::Failed(m)) if refused_device_member(&m) => {
                tracing::info!(
                    event = "enroll_without_device",
                    "the gateway does not take the device's facts; enrolling without them"
                );
                self.post(&sent, None).await?
            }
            other => other?,
        };
        let claims = answer
            .verify(&gw_keys.sign, node_id, &me.sign_pk)
            .map_err(|e| failed("answer", &e))?;
        Ok(match claims.status {
            Standing::Enrolled => Attempt::Enrolled {
                gateway: Box::new(claims.gateway),
                token_id: claims.token_id,
            },
            Standing::Pending => Attempt::Pending,
        })
    }

    /// Seal the token (and `device`) to the gateway and post it: the gateway's answer.
    async fn post(
        &self,
        s: &Sent<'_>,
        device: Option<&crate::fleet::Inventory>,
    ) -> Result<Answer, Attempt> {
        let url = s.url;
        let failed =
            |what: &str, e: &dyn std::fmt::Display| Attempt::Failed(format!("{what} {url}: {e}"));
        let plaintext = serde_json::to_vec(&Sealed {
            token: s.token.to_text(),
            device: device.cloned(),
        })
        .map_err(|e| failed("encode", &e))?;
        let gw_now = s.gw_now;
        let params = SealParams {
            message_id: format!("enroll-{}", uuid::Uuid::now_v7().simple()),
            created_at_ms: gw_now,
            expires_at_ms: gw_now + 10 * 60 * 1000,
            payload_type: crate::enroll::PAYLOAD_TYPE.into(),
            priority: 0,
        };
        let env = seal(
            &self.keys,
            s.node_id,
            s.gateway,
            &params,
            &plaintext,
            &mut rand_core::OsRng,
        )
        .map_err(|e| failed("seal", &e))?;
        let body = Request {
            node: s.me.clone(),
            envelope: serde_json::to_value(&env).map_err(|e| failed("encode", &e))?,
        };
        let body = serde_json::to_vec(&body).map_err(|e| failed("encode", &e))?;
        let resp = s
            .http
            .post(format!("{url}/v1/enroll"))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| failed("cannot reach", &e))?;
        answer_json(resp).await
    }

    /// Trust the gateway as a hand enrollment does, then note the enrollment (and delete
    /// the token file when configured).
    async fn trust_gateway(
        &self,
        gateway: &IdentityDocument,
        token_id: &str,
    ) -> Result<(), String> {
        use crate::daemon::trust::{self, Change};
        let id = &gateway.node_id;
        let mut t = crate::envelope::TrustStore::new();
        if let Some(p) = trust::peer(&self.store, id).map_err(|e| e.to_string())? {
            t.insert(p);
        }
        t.add(
            gateway.clone(),
            Rights {
                send: true,
                issue: true,
            },
        )
        .map_err(|e| e.to_string())?;
        let mut batch = crate::store::Batch::new();
        trust::stage(&self.store, &mut batch, &[Change::of(&t, id)]).map_err(|e| e.to_string())?;
        self.store.commit(batch).await.map_err(|e| e.to_string())?;
        let with = EnrolledWith {
            gateway_id: gateway.node_id.clone(),
            token_id: token_id.to_string(),
            enrolled_at_ms: self.store.now_ms(),
        };
        let bytes = serde_json::to_vec_pretty(&with).map_err(|e| e.to_string())?;
        crate::daemon::files::write_atomic(
            &crate::config::enrollment_path(&self.cfg.data_dir),
            &bytes,
            0o600,
        )
        .map_err(|e| e.to_string())?;
        if let Some(up) = self.cfg.upstream.as_ref().filter(|u| u.enroll_token_delete) {
            if let Some(f) = &up.enroll_token_file {
                if let Err(e) = std::fs::remove_file(f) {
                    tracing::warn!(event = "enroll_token_not_deleted", file = %f.display(), error = %e);
                }
            }
        }
        Ok(())
    }
}

/// What one enrollment request is made of, for [`Enroller::post`].
struct Sent<'a> {
    http: &'a reqwest::Client,
    url: &'a str,
    node_id: &'a str,
    gateway: &'a IdentityDocument,
    gw_now: u64,
    me: &'a IdentityDocument,
    token: &'a Token,
}

#[cfg(test)]
mod tests;
