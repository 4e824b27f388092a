//! `[api]` limits against slow and idle clients: how long a request head, a request body
//! and a keep-alive pause may take, and how many connections the listener holds.
//!
//! The gateway faces any address, so these are what stand between a few thousand
//! half-open sockets and `/healthz` (issue #14): see `http_server` for how they act.

use super::raw::RawApi;
use super::Role;

/// Node default: the local API is on loopback, used by a handful of local clients.
pub const NODE_MAX_CONNECTIONS: u32 = 256;
/// Gateway default: well below the units' `LimitNOFILE=16384`, which also has to cover
/// the store, the journal and the per-connection TLS state.
pub const GATEWAY_MAX_CONNECTIONS: u32 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// From accept (first request) or the first byte of a later request until its head
    /// is complete; also bounds the TLS handshake.
    pub header_timeout_ms: u64,
    /// From the request head until the whole body has arrived.
    pub body_timeout_ms: u64,
    /// A keep-alive connection with no new request for this long is closed.
    pub idle_timeout_ms: u64,
    /// Open connections at most; at the cap the least recently active idle connection
    /// is evicted (never one with a request in flight).
    pub max_connections: u32,
}

impl HttpLimits {
    pub fn defaults(role: Role) -> Self {
        HttpLimits {
            header_timeout_ms: 10_000,
            body_timeout_ms: 30_000,
            idle_timeout_ms: 60_000,
            max_connections: match role {
                Role::Node => NODE_MAX_CONNECTIONS,
                Role::Gateway => GATEWAY_MAX_CONNECTIONS,
            },
        }
    }
}

/// Defaults for `role`, overridden by `[api]`; problems are pushed onto `errs`.
pub fn check(api: &RawApi, role: Role, errs: &mut Vec<String>) -> HttpLimits {
    let d = HttpLimits::defaults(role);
    let mut ms = |key: &str, v: Option<u64>, default: u64| {
        let v = v.unwrap_or(default);
        if !(100..=3_600_000).contains(&v) {
            errs.push(format!("api.{key} must be 100..=3600000 (ms)"));
        }
        v
    };
    let header_timeout_ms = ms(
        "header_timeout_ms",
        api.header_timeout_ms,
        d.header_timeout_ms,
    );
    let body_timeout_ms = ms("body_timeout_ms", api.body_timeout_ms, d.body_timeout_ms);
    let idle_timeout_ms = ms("idle_timeout_ms", api.idle_timeout_ms, d.idle_timeout_ms);
    let max_connections = api.max_connections.unwrap_or(d.max_connections);
    if !(1..=1_000_000).contains(&max_connections) {
        errs.push("api.max_connections must be 1..=1000000".into());
    }
    HttpLimits {
        header_timeout_ms,
        body_timeout_ms,
        idle_timeout_ms,
        max_connections,
    }
}
