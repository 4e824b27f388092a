//! `outpost status`: asks the running daemon (its address from `api.addr`, else the
//! configured one). A gateway that serves HTTPS is asked over TLS, its certificate
//! pinned by the key of the one its config names (crate::tls_pin), as a node pins it.

use std::time::Duration;

use serde_json::Value;

use crate::telemetry::status::{KeyRotationStatus, QueueStatus, Status};

use super::common::load_existing_config;
use super::{ConfigArg, Exit};
use loopback::http_request;

#[path = "status_http.rs"]
mod loopback;

/// How the CLI reaches its own daemon: the address it listens on (an unspecified one
/// is reached on loopback) and, for a gateway with TLS, the pin of its certificate.
pub(super) struct Local {
    addr: std::net::SocketAddr,
    tls: Option<crate::tls_pin::Pin>,
    /// A gateway's status is open on loopback only: beyond it (a gateway bound to one
    /// address is reached from that address) a `read` token this host signs with the
    /// gateway's key. `None` on a node, or when the key is not readable by this user.
    observer: Option<String>,
}

/// How long the `read` token `status` and `wait-ready` sign for themselves lives.
const OBSERVER_TTL_MS: u64 = 60 * 1000;

/// A short-lived `read` token signed with the gateway's own key, if this user can read it.
fn observer_token(cfg: &crate::config::Config) -> Option<String> {
    if cfg.role != crate::config::Role::Gateway {
        return None;
    }
    let keys = super::common::load_keys(cfg).ok()?;
    let claims = crate::token::Claims::new(
        &cfg.node_id,
        "outpost-status",
        &cfg.node_id,
        vec!["read".into()],
        crate::clock::system().now_ms(),
        OBSERVER_TTL_MS,
        &uuid::Uuid::now_v7().to_string(),
    )
    .ok()?;
    crate::token::issue(&keys, &claims).ok()
}

impl Local {
    pub(super) fn of(cfg: &crate::config::Config) -> anyhow::Result<Local> {
        let mut addr = crate::daemon::listen::read_addr_file(&cfg.data_dir).unwrap_or(cfg.listen);
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr {
                std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let tls = match &cfg.tls {
            Some((cert, _)) => Some(
                crate::tls_pin::spki_sha256_of_pem_file(cert)
                    .map_err(|e| Exit::usage(format!("api.tls_cert_file {e}")))?,
            ),
            None => None,
        };
        Ok(Local {
            addr,
            tls,
            observer: observer_token(cfg),
        })
    }

    pub(super) fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    fn get(&self, path: &str) -> std::io::Result<(u16, String)> {
        let auth = self.observer.as_ref().map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = auth
            .as_deref()
            .map(|a| ("Authorization", a))
            .into_iter()
            .collect();
        http_request(
            self.addr,
            "GET",
            path,
            &headers,
            &[],
            self.tls,
            Duration::from_secs(5),
        )
    }

    /// `method path` with a bearer token and an optional JSON body; waits up to
    /// `read_timeout` for the answer (a tool call's `wait_s` and a margin).
    #[cfg(feature = "gateway")]
    pub(super) fn request(
        &self,
        method: &str,
        path: &str,
        token: &str,
        body: Option<&[u8]>,
        extra: &[(&str, &str)],
        read_timeout: Duration,
    ) -> std::io::Result<(u16, String)> {
        let auth = format!("Bearer {token}");
        let mut headers = vec![("Authorization", auth.as_str())];
        headers.extend_from_slice(extra);
        if body.is_some() {
            headers.push(("Content-Type", "application/json"));
        }
        http_request(
            self.addr,
            method,
            path,
            &headers,
            body.unwrap_or_default(),
            self.tls,
            read_timeout,
        )
    }
}

pub fn status(arg: &ConfigArg, json: bool) -> anyhow::Result<()> {
    let cfg = load_existing_config(arg)?;
    let local = Local::of(&cfg)?;
    let addr = local.url();
    let body = match local.get("/v1/status") {
        Ok((200, body)) => body,
        Ok((code, body)) => {
            let why = if code == 401 && local.observer.is_none() {
                " (a gateway's status beyond loopback needs a read token, which this \
                 command signs with the gateway's key: run it as the gateway's user)"
            } else {
                ""
            };
            return Err(Exit::failed(format!(
                "the daemon on {addr} answered {code}: {}{why}",
                error_text(&body)
            ))
            .into());
        }
        Err(e) => {
            return Err(Exit::failed(format!(
                "the daemon does not answer on {addr} ({e}); is `outpost run` active?"
            ))
            .into())
        }
    };
    if json {
        let v: Value = serde_json::from_str(&body)?;
        println!("{}", serde_json::to_string(&v)?);
        return Ok(());
    }
    let v: Status = serde_json::from_str(&body)?;
    print!("{}", summary(&v, crate::clock::system().now_ms()));
    Ok(())
}

/// `outpost wait-ready`: poll `/readyz` until 200 or the deadline, saying on failure
/// what the last attempt saw (so a quick start pasted in one go shows its errors).
pub fn wait_ready(arg: &ConfigArg, timeout: &str, upstream: bool) -> anyhow::Result<()> {
    let timeout_ms = super::common::parse_duration_ms("--timeout", timeout)?;
    let clock = crate::clock::system();
    let deadline = clock.now_ms() + timeout_ms;
    if arg.dev && arg.config.is_none() {
        // `run --dev &` creates the dev node on first use: wait for it, never race it
        // by creating one here too.
        let path = super::common::dev_config_path()?;
        while !path.exists() {
            if clock.now_ms() >= deadline {
                return Err(Exit::failed(format!(
                    "not ready after {timeout}: {} does not exist; is `outpost run --dev` active?",
                    path.display()
                ))
                .into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let cfg = load_existing_config(arg)?;
    let mut last;
    loop {
        // The daemon writes api.addr once it listens (port 0 included); until then the
        // configured address is the best guess.
        let local = Local::of(&cfg)?;
        let addr = local.url();
        last = match local.get("/readyz") {
            Ok((200, _)) => {
                eprintln!("ready: {} on {addr}", cfg.node_id);
                if upstream && cfg.upstream.is_some() {
                    wait_upstream(&local, timeout, deadline)?;
                }
                println!("{addr}");
                return Ok(());
            }
            Ok((code, body)) => format!("{addr} answered {code}: {}", error_text(&body)),
            Err(e) => format!("nothing answers on {addr} ({e}); is `outpost run` active?"),
        };
        if clock.now_ms() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(Exit::failed(format!("not ready after {timeout}: {last}")).into())
}

/// `wait-ready --upstream`: until the node's `/v1/status` says it is connected to its
/// gateway, or the deadline; on failure, the last error and what to do.
fn wait_upstream(local: &Local, timeout: &str, deadline: u64) -> anyhow::Result<()> {
    let clock = crate::clock::system();
    let mut last = "no status yet".to_string();
    loop {
        if let Ok((200, body)) = local.get("/v1/status") {
            let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            let up = &v["upstream"];
            if up["connected"] == true {
                eprintln!(
                    "connected to the gateway at {}",
                    up["url"].as_str().unwrap_or("?")
                );
                return Ok(());
            }
            last = match (up["last_error"].as_str(), up["hint"].as_str()) {
                (Some(e), Some(h)) => format!("{e}\n  what to do: {h}"),
                (Some(e), None) => e.to_string(),
                _ => format!(
                    "{} (no answer yet)",
                    up["state"].as_str().unwrap_or("connecting")
                ),
            };
        }
        if clock.now_ms() >= deadline {
            return Err(Exit::failed(format!(
                "not connected to the gateway after {timeout}: {last}"
            ))
            .into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The `message` of an error body, else the body itself (shortened).
fn error_text(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            let e = &v["error"];
            Some(format!(
                "{} ({})",
                e["message"].as_str()?,
                e["code"].as_str()?
            ))
        })
        .unwrap_or_else(|| body.chars().take(200).collect())
}

/// The status JSON as a person reads it: one line per topic, the queue table aligned
/// on its widest cell.
pub fn summary(v: &Status, now_ms: u64) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} ({}) v{}, up {}",
        v.node_id,
        v.role,
        v.version,
        duration(v.uptime_s)
    );
    let _ = writeln!(out, "store: {}", v.store);
    let _ = writeln!(out, "upstream: {}", upstream_line(&v.upstream, now_ms));
    if let Some(line) = enrollment_line(&v.upstream["enrollment"]) {
        let _ = writeln!(out, "enrollment: {line}");
    }
    if v.role == "node" {
        let _ = writeln!(
            out,
            "audit: {} entries, {} synced upstream",
            v.audit.size, v.audit.synced_size
        );
    }
    if let Some(KeyRotationStatus::Pending { new_sign_pk }) = &v.key_rotation {
        let _ = writeln!(
            out,
            "key rotation: to {new_sign_pk} waits for the gateway (it completes on the next sync)"
        );
    }
    if let Some(n) = v.nodes_enrolled {
        let _ = writeln!(out, "nodes enrolled: {n}");
    }
    if let Some(clock) = v.clock.as_ref().filter(|c| c.behind_floor) {
        let behind = clock.now_ms.saturating_sub(clock.wall_ms);
        let _ = writeln!(
            out,
            "clock: wall clock {} behind the store's time floor (no RTC or NTP yet)",
            duration(behind / 1000)
        );
    }
    queue_table(&v.queues, &mut out);
    out
}

/// The `enrollment:` line of a node that enrolls itself: enrolled, pending, or refused
/// with the code and reason.
fn enrollment_line(e: &Value) -> Option<String> {
    let state = e["state"].as_str()?;
    let mut line = format!("{state} with {}", e["gateway_id"].as_str().unwrap_or("?"));
    if let Some(t) = e["token_id"].as_str() {
        line.push_str(&format!(" (token {t})"));
    }
    if let Some(c) = e["code"].as_str() {
        line.push_str(&format!(": {c}"));
    }
    if let Some(r) = e["reason"].as_str() {
        line.push_str(&format!(" — {r}"));
    }
    if state == "pending" {
        line.push_str("\n  what to do: on the gateway host, `outpost nodes pending` then `outpost nodes approve <node id>`");
    }
    Some(line)
}

/// The `upstream:` line: state, URL, last success, last error and what to do.
fn upstream_line(up: &Value, now_ms: u64) -> String {
    use std::fmt::Write as _;
    let mut line = match up["state"].as_str() {
        Some("none") | None => match up["detail"].as_str() {
            Some(d) => format!("none ({d})"),
            None => "none (no [upstream] configured: a fully offline node)".into(),
        },
        Some(state) => {
            let mut l = state.to_string();
            if let Some(url) = up["url"].as_str() {
                let _ = write!(l, " via {url}");
            }
            l
        }
    };
    if let Some(ms) = up["last_ok_ms"].as_u64() {
        let _ = write!(
            line,
            ", last ok {} ago",
            duration(now_ms.saturating_sub(ms) / 1000)
        );
    }
    if let Some(e) = up["last_error"].as_str() {
        let _ = write!(line, ", last error: {e}");
        if let Some(h) = up["hint"].as_str() {
            let _ = write!(line, "\n  what to do: {h}");
        }
    }
    if let Some(since) = up["failing_since_ms"].as_u64() {
        let what = match up["reason"].as_str() {
            Some(r) if crate::sync::advice::UNREACHABLE.contains(&r) => "gateway unreachable",
            _ => "no exchange with the gateway",
        };
        let _ = write!(
            line,
            "\n  {what} since {} ({} ago)",
            crate::token::format_rfc3339_ms(since).unwrap_or_default(),
            duration(now_ms.saturating_sub(since) / 1000)
        );
    }
    if let Some(next) = up["next_attempt_at_ms"].as_u64() {
        let _ = write!(
            line,
            "\n  next attempt at {} (in {})",
            crate::token::format_rfc3339_ms(next).unwrap_or_default(),
            duration(next.saturating_sub(now_ms).div_ceil(1000))
        );
    }
    line
}

/// The queue table, aligned on its widest cells.
fn queue_table(queues: &[QueueStatus], out: &mut String) {
    use std::fmt::Write as _;
    let rows: Vec<[String; 4]> = queues
        .iter()
        .map(|q| {
            [
                q.queue.clone(),
                q.peer.clone(),
                q.depth.to_string(),
                duration(q.oldest_age_s),
            ]
        })
        .collect();
    if rows.is_empty() {
        let _ = writeln!(out, "queues: empty");
        return;
    }
    let head = ["QUEUE", "PEER", "DEPTH", "OLDEST"].map(String::from);
    let mut w = [0usize; 4];
    for r in std::iter::once(&head).chain(&rows) {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let _ = writeln!(out, "queues:");
    for r in std::iter::once(&head).chain(&rows) {
        let _ = writeln!(
            out,
            "  {:<w0$}  {:<w1$}  {:>w2$}  {:>w3$}",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3]
        );
    }
}

/// 75 → "1m15s", 3600 → "1h0m0s" (seconds resolution is enough for a glance).
fn duration(s: u64) -> String {
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{}m{}s", s / 3600, s % 3600 / 60, s % 60),
        _ => format!("{}d{}h", s / 86_400, s % 86_400 / 3600),
    }
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
