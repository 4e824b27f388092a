//! `[upstream]`: where a node's gateway is (one URL, or the URLs of its replicas).

use std::path::PathBuf;

use super::raw::RawUpstream;
use super::{valid_node_id, Role};

#[derive(Debug, Clone)]
pub struct Upstream {
    /// The first of `urls`: where the node starts.
    pub url: String,
    /// Replicas of one gateway (same identity, shared state), in order of preference:
    /// the node sticks to one while it answers and moves to the next on a connection
    /// error, a timeout or a 5xx.
    pub urls: Vec<String>,
    pub gateway_id: String,
    pub ca_file: Option<PathBuf>,
    pub poll_wait_s: u64,
    pub request_timeout_s: u64,
    /// The reconnect backoff's longest wait (5 s, doubling, up to this).
    pub retry_max_s: u64,
    /// Enroll with this token while no gateway is trusted (PROTOCOL §15).
    pub enroll_token_file: Option<PathBuf>,
    /// Delete the token file once enrolled (default false).
    pub enroll_token_delete: bool,
}

/// The reconnect backoff's default cap: a node finds its gateway again within a minute
/// of its return (PROTOCOL §14 allows up to 300 s).
pub const DEFAULT_RETRY_MAX_S: u64 = 60;

/// Where an enrolled node notes which gateway it enrolled with (its id, for a config
/// that names none once the token file is gone).
pub fn enrollment_path(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join("enrollment.json")
}

/// What `enrollment.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EnrolledWith {
    pub gateway_id: String,
    pub token_id: String,
    pub enrolled_at_ms: u64,
}

impl Upstream {
    /// The gateway's id when the config names none: the one this node enrolled with,
    /// else the one its enrollment token names. `Err` says what is missing.
    pub fn resolve_gateway_id(&mut self, data_dir: &std::path::Path) -> Result<(), String> {
        if !self.gateway_id.is_empty() {
            return Ok(());
        }
        if let Some(w) = std::fs::read(enrollment_path(data_dir))
            .ok()
            .and_then(|b| serde_json::from_slice::<EnrolledWith>(&b).ok())
        {
            self.gateway_id = w.gateway_id;
            return Ok(());
        }
        let Some(file) = &self.enroll_token_file else {
            return Err("[upstream] needs gateway_id (or enroll_token_file)".into());
        };
        let text = std::fs::read_to_string(file).map_err(|e| {
            format!(
                "upstream.enroll_token_file {}: {e}; this node has not enrolled yet, so it needs the token (or set upstream.gateway_id)",
                file.display()
            )
        })?;
        let token = crate::enroll::Token::parse(&text)
            .map_err(|e| format!("upstream.enroll_token_file {}: {e}", file.display()))?;
        self.gateway_id = token.claims.gateway_id;
        Ok(())
    }
}

/// Check `[upstream]` (problems go to `errs`, all of them).
pub(super) fn check(u: RawUpstream, role: Role, errs: &mut Vec<String>) -> Upstream {
    if role == Role::Gateway {
        errs.push("[upstream] is for the node role only".into());
    }
    let urls: Vec<String> = match (u.url, u.urls) {
        (Some(one), None) => vec![one],
        (None, Some(list)) if !list.is_empty() && list.len() <= 16 => list,
        (None, Some(_)) => {
            errs.push("upstream.urls must list 1 to 16 URLs".into());
            Vec::new()
        }
        (None, None) => {
            errs.push("[upstream] needs url (or urls, a list of replicas)".into());
            Vec::new()
        }
        (Some(_), Some(_)) => {
            errs.push("give upstream.url or upstream.urls, not both".into());
            Vec::new()
        }
    };
    for url in &urls {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            errs.push(format!("upstream URL {url:?} must be http:// or https://"));
        }
    }
    let urls: Vec<String> = urls
        .iter()
        .map(|u| u.trim_end_matches('/').to_string())
        .collect();
    let gateway_id = u.gateway_id.unwrap_or_default();
    if gateway_id.is_empty() && u.enroll_token_file.is_none() {
        errs.push(
            "[upstream] needs gateway_id, or enroll_token_file (a token that names the gateway)"
                .into(),
        );
    } else if !gateway_id.is_empty() && !valid_node_id(&gateway_id) {
        errs.push(format!(
            "upstream.gateway_id {gateway_id:?} is not a node id"
        ));
    }
    if let Some(f) = &u.enroll_token_file {
        if !f.is_absolute() {
            errs.push(format!(
                "upstream.enroll_token_file {} must be an absolute path",
                f.display()
            ));
        }
    }
    if u.ca_file.is_some() && urls.iter().any(|u| u.starts_with("http://")) {
        errs.push("upstream.ca_file is set but an upstream URL is plain http://".into());
    }
    let poll_wait_s = u.poll_wait_s.unwrap_or(25);
    if poll_wait_s > 120 {
        errs.push("upstream.poll_wait_s must be at most 120".into());
    }
    let retry_max_s = u.retry_max_s.unwrap_or(DEFAULT_RETRY_MAX_S);
    if !(5..=300).contains(&retry_max_s) {
        errs.push("upstream.retry_max_s must be between 5 and 300".into());
    }
    Upstream {
        url: urls.first().cloned().unwrap_or_default(),
        urls,
        gateway_id,
        ca_file: u.ca_file,
        poll_wait_s,
        request_timeout_s: u.request_timeout_s.unwrap_or(10),
        retry_max_s,
        enroll_token_file: u.enroll_token_file,
        enroll_token_delete: u.enroll_token_delete.unwrap_or(false),
    }
}
