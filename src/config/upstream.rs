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
    if !valid_node_id(&u.gateway_id) {
        errs.push(format!(
            "upstream.gateway_id {:?} is not a node id",
            u.gateway_id
        ));
    }
    if u.ca_file.is_some() && urls.iter().any(|u| u.starts_with("http://")) {
        errs.push("upstream.ca_file is set but an upstream URL is plain http://".into());
    }
    let poll_wait_s = u.poll_wait_s.unwrap_or(25);
    if poll_wait_s > 120 {
        errs.push("upstream.poll_wait_s must be at most 120".into());
    }
    Upstream {
        url: urls.first().cloned().unwrap_or_default(),
        urls,
        gateway_id: u.gateway_id,
        ca_file: u.ca_file,
        poll_wait_s,
        request_timeout_s: u.request_timeout_s.unwrap_or(10),
    }
}
