//! One connection per replica that `LISTEN`s for what other replicas commit, and turns
//! each `NOTIFY` into a [`Notice`] for the gateway (wake a node's long-poll, read new
//! events, refresh the revocation list or the trust store). It reconnects by itself;
//! after a reconnect it announces [`Notice::Resync`] so that everyone re-reads what
//! they might have missed while it was away.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;

use super::Postgres;

/// Payload: the node whose queue grew or shrank.
pub const CH_QUEUED: &str = "outpost_queued";
/// Payload: `{pull}/{node}`, a pull of the node that began (older ones end).
pub const CH_PULLED: &str = "outpost_pulled";
/// Payload: the revoked token id.
pub const CH_REVOKED: &str = "outpost_revoked";
pub const CH_TRUST: &str = "outpost_trust";
/// Payload: the newest event id.
pub const CH_EVENTS: &str = "outpost_events";

/// How often the revocation list is re-read even without a notification (it must be
/// fresh for the token check: see `REVOCATIONS_STALE_MS`).
const REFRESH_EVERY: Duration = Duration::from_secs(2);
const TRUST_REFRESH_EVERY: Duration = Duration::from_secs(30);

pub use super::super::Notice;

pub fn spawn(pg: Arc<Postgres>, shutdown: CancellationToken) {
    tokio::spawn(async move {
        let mut connected_before = false;
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            match listen_once(&pg, &shutdown, connected_before).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(event = "postgres_listener_lost", error = %e);
                    connected_before = true;
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
    });
}

/// Listen until the connection drops (`Err`) or shutdown (`Ok`).
async fn listen_once(
    pg: &Arc<Postgres>,
    shutdown: &CancellationToken,
    resync: bool,
) -> Result<(), String> {
    let tx = pg.notices.clone();
    let revoked = Arc::clone(pg);
    let (trust_tx, mut trust_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let client = pg
        .pool
        .connect_with(move |m| {
            let AsyncMessage::Notification(n) = m else {
                return;
            };
            match n.channel() {
                CH_QUEUED => {
                    let _ = tx.send(Notice::Queued(n.payload().to_string()));
                }
                CH_PULLED => {
                    if let Some(notice) = pulled(n.payload()) {
                        let _ = tx.send(notice);
                    }
                }
                CH_EVENTS => {
                    let _ = tx.send(Notice::Events(n.payload().parse().unwrap_or(0)));
                }
                CH_REVOKED => {
                    revoked
                        .revoked
                        .write()
                        .unwrap_or_else(|p| p.into_inner())
                        .jtis
                        .insert(n.payload().to_string());
                }
                CH_TRUST => {
                    let _ = trust_tx.send(());
                }
                _ => {}
            }
        })
        .await
        .map_err(|e| e.to_string())?;
    client
        .batch_execute(&format!(
            "LISTEN {CH_QUEUED}; LISTEN {CH_PULLED}; LISTEN {CH_EVENTS}; LISTEN {CH_REVOKED}; LISTEN {CH_TRUST};"
        ))
        .await
        .map_err(|e| e.to_string())?;
    tracing::info!(event = "postgres_listening");
    if resync {
        let _ = pg.notices.send(Notice::Resync);
        let _ = pg.refresh_trust().await;
    }
    let mut tick = tokio::time::interval(REFRESH_EVERY);
    let mut trust_tick = tokio::time::interval(TRUST_REFRESH_EVERY);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tick.tick() => {
                if client.is_closed() {
                    return Err("listener connection closed".into());
                }
                if let Err(e) = pg.refresh_revocations().await {
                    tracing::warn!(event = "revocations_refresh_failed", error = %e);
                }
            }
            _ = trust_tick.tick() => {
                if let Err(e) = pg.refresh_trust().await {
                    tracing::warn!(event = "trust_refresh_failed", error = %e);
                }
            }
            Some(()) = trust_rx.recv() => {
                if let Err(e) = pg.refresh_trust().await {
                    tracing::warn!(event = "trust_refresh_failed", error = %e);
                }
            }
        }
    }
}

/// A [`CH_PULLED`] payload; `None` for one this version does not understand.
fn pulled(payload: &str) -> Option<Notice> {
    let (n, node) = payload.split_once('/')?;
    Some(Notice::Pulled(node.to_string(), n.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pulled_payloads() {
        assert_eq!(pulled("7/node:a/b"), Some(Notice::Pulled("node:a/b".into(), 7)));
        assert_eq!(pulled("x/node"), None);
        assert_eq!(pulled("node"), None);
    }
}
