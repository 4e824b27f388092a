//! The enrollment exchange's answers: what each means for the next attempt, and when
//! that attempt is made.

use std::time::Duration;

use rand_core::RngCore;

use super::{codes, Attempt, MAX_ANSWER_BYTES, RETRY_MAX};

/// The wait before the next attempt after `backoff` has grown to what it is: uniform
/// over `[0, backoff]` ("full jitter": thousands of devices refused together — a site
/// powered on at once, a gateway shedding load — come back spread over the whole
/// interval, not together at its end), never before the gateway's `retry_after`, and
/// at least a tenth of a second. `unit` is uniform in `[0, 1)`.
pub fn retry_wait(backoff: Duration, retry_after: Option<Duration>, unit: f64) -> Duration {
    let spread = backoff.mul_f64(unit.clamp(0.0, 1.0));
    spread
        .max(retry_after.unwrap_or_default())
        .max(Duration::from_millis(100))
}

/// Whether a failed attempt is a gateway older than the request's `device` member
/// refusing it (serde's "unknown field `device`" in a 400 `bad_request`).
pub(super) fn refused_device_member(failure: &str) -> bool {
    failure.starts_with("400 bad_request") && failure.contains("`device`")
}

/// Uniform in `[0, 1)`, from the OS.
pub(super) fn unit() -> f64 {
    f64::from(rand_core::OsRng.next_u32()) / (f64::from(u32::MAX) + 1.0)
}

/// A `Retry-After` of whole seconds (what the gateway sends), capped at [`RETRY_MAX`].
fn retry_after(resp: &reqwest::Response) -> Option<Duration> {
    let s = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?;
    let secs: u64 = s.trim().parse().ok()?;
    Some(Duration::from_secs(secs).min(RETRY_MAX))
}

/// The answer's JSON, or the attempt it stands for: a refusal code (4xx) or a retry.
pub(super) async fn answer_json<T: serde::de::DeserializeOwned>(
    resp: reqwest::Response,
) -> Result<T, Attempt> {
    let status = resp.status().as_u16();
    let come_back = retry_after(&resp).filter(|_| status == 429 || status == 503);
    let bytes = crate::sync::capped::read(resp, MAX_ANSWER_BYTES)
        .await
        .map_err(|e| Attempt::Failed(format!("reading the answer: {e}")))?;
    if status < 300 {
        return serde_json::from_slice(&bytes)
            .map_err(|e| Attempt::Failed(format!("malformed answer: {e}")));
    }
    let err: Option<crate::sync::wire::ErrorAnswer> = serde_json::from_slice(&bytes).ok();
    let (code, message) = err
        .map(|e| (e.error.code, e.error.message))
        .unwrap_or_else(|| {
            (
                format!("http_{status}"),
                String::from_utf8_lossy(&bytes).into_owned(),
            )
        });
    if codes::is_final(&code) {
        return Err(Attempt::Refused {
            code,
            reason: message,
        });
    }
    let why = format!("{status} {code}: {message}");
    Err(match come_back {
        Some(retry_after) => Attempt::Throttled { why, retry_after },
        None => Attempt::Failed(why),
    })
}
