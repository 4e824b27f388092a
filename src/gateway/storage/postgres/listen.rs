//! One connection per replica that `LISTEN`s for what other replicas commit, and turns
//! each `NOTIFY` into a [`Notice`] for the gateway (wake a node's long-poll), an
//! announcement of new events (`EventTable::events_announced`), or a refresh of the
//! revocation list or the trust store. It reconnects by itself; after a reconnect it
//! announces [`Notice::Resync`] (and events again) so that everyone re-reads what they
//! might have missed while it was away.

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

/// Send queued notifications in batches, one statement per batch, outside the
/// transactions that made them true.
///
/// Why not `pg_notify` inside those transactions: PostgreSQL serialises the commits of
/// all transactions that notify (a database-wide lock held from before the commit
/// record until after it, so that notifications queue in commit order), so every
/// enqueue and pull waited for the previous one's WAL flush in turn — no group commit.
/// A statement that only notifies writes no WAL and holds that lock for microseconds.
/// The price: a replica killed between a commit and its notification leaves the other
/// replicas' long-polls of that node asleep until their wait ends (the node then pulls
/// again and gets the message) — later, never lost.
pub fn send_notifications(
    pg: Arc<Postgres>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<(&'static str, String)>,
    shutdown: CancellationToken,
) {
    tokio::spawn(async move {
        let mut batch: Vec<(&'static str, String)> = Vec::new();
        loop {
            let first = tokio::select! {
                _ = shutdown.cancelled() => None,
                m = rx.recv() => m,
            };
            let Some(first) = first else {
                return;
            };
            batch.push(first);
            while batch.len() < 1000 {
                match rx.try_recv() {
                    Ok(m) => batch.push(m),
                    Err(_) => break,
                }
            }
            batch.sort();
            batch.dedup();
            let channels: Vec<&str> = batch.iter().map(|(c, _)| *c).collect();
            let payloads: Vec<&str> = batch.iter().map(|(_, p)| p.as_str()).collect();
            let sent = async {
                let mut c = pg.pool.get().await?;
                let st = c
                    .prep("SELECT count(pg_notify(c, p)) FROM unnest($1::text[], $2::text[]) AS x(c, p)")
                    .await?;
                c.query_one(&st, &[&channels, &payloads])
                    .await
                    .map_err(super::unavailable)
            }
            .await;
            if let Err(e) = sent {
                // Hints only: a missed wake-up costs a long-poll its wait, not a message.
                tracing::warn!(event = "postgres_notify_failed", count = batch.len(), error = %e);
            }
            batch.clear();
        }
    });
}

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
    let (trust_tx, mut trust_rx) = tokio::sync::mpsc::unbounded_channel::<Option<String>>();
    let me = Arc::clone(pg);
    let client = pg
        .pool
        .connect_with(move |m| {
            if let AsyncMessage::Notification(n) = m {
                notified(&me, &trust_tx, n.channel(), n.payload());
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
        // Events may have been announced meanwhile: readers look again.
        pg.events_announced.send_modify(|_| {});
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
            Some(first) = trust_rx.recv() => {
                let changed = trust_changes(first, &mut trust_rx);
                if let Err(e) = match changed {
                    Some(addresses) => pg.refresh_peers_now(&addresses).await,
                    None => pg.refresh_trust().await,
                } {
                    tracing::warn!(event = "trust_refresh_failed", error = %e);
                }
            }
        }
    }
}

/// Every trust `NOTIFY` waiting, from `first`: the addresses they named, or `None` when
/// one named none (every peer is read again). A burst of enrollments is read in a few
/// batches, not one read per enrollment.
fn trust_changes(
    first: Option<String>,
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Option<String>>,
) -> Option<Vec<String>> {
    let mut all = std::collections::BTreeSet::new();
    let mut next = Some(first);
    let mut whole = false;
    while let Some(n) = next {
        match n {
            Some(a) => {
                all.insert(a);
            }
            None => whole = true,
        }
        if all.len() >= TRUST_BATCH {
            break;
        }
        next = rx.try_recv().ok();
    }
    (!whole).then(|| all.into_iter().collect())
}

/// Addresses read again in one query at most.
const TRUST_BATCH: usize = 512;

/// One `NOTIFY` received: a notice for the gateway, an announcement of events, a token
/// id for the revocation list, or the address of a peer to read again (`trust`; none: every peer).
fn notified(
    pg: &Postgres,
    trust: &tokio::sync::mpsc::UnboundedSender<Option<String>>,
    channel: &str,
    payload: &str,
) {
    match channel {
        CH_QUEUED => {
            let _ = pg.notices.send(Notice::Queued(payload.to_string()));
        }
        CH_PULLED => {
            if let Some(notice) = pulled(payload) {
                let _ = pg.notices.send(notice);
            }
        }
        CH_EVENTS => {
            let id: u64 = payload.parse().unwrap_or(0);
            pg.events_announced.send_if_modified(|newest| {
                let newer = id > *newest;
                *newest = (*newest).max(id);
                newer
            });
        }
        CH_REVOKED => {
            pg.revoked
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .jtis
                .insert(payload.to_string());
        }
        CH_TRUST => {
            let _ = trust.send((!payload.is_empty()).then(|| payload.to_string()));
        }
        _ => {}
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
        assert_eq!(
            pulled("7/node:a/b"),
            Some(Notice::Pulled("node:a/b".into(), 7))
        );
        assert_eq!(pulled("x/node"), None);
        assert_eq!(pulled("node"), None);
    }

    #[test]
    fn waiting_trust_notices_are_read_as_one_batch_or_as_every_peer() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for a in ["node:b", "node:a", "node:b"] {
            tx.send(Some(a.to_string())).unwrap();
        }
        assert_eq!(
            trust_changes(Some("node:c".into()), &mut rx),
            Some(vec!["node:a".into(), "node:b".into(), "node:c".into()])
        );
        tx.send(Some("node:a".into())).unwrap();
        tx.send(None).unwrap();
        tx.send(Some("node:d".into())).unwrap();
        assert_eq!(trust_changes(Some("node:c".into()), &mut rx), None);
        assert!(rx.try_recv().is_err(), "all read");
        for n in 0..TRUST_BATCH + 3 {
            tx.send(Some(format!("node:{n}"))).unwrap();
        }
        let first = trust_changes(rx.try_recv().unwrap(), &mut rx).unwrap();
        assert_eq!(first.len(), TRUST_BATCH);
        assert_eq!(
            trust_changes(rx.try_recv().unwrap(), &mut rx)
                .unwrap()
                .len(),
            3
        );
    }
}
