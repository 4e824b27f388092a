//! The worker's chores once connected: pushing the outbox, syncing the audit log,
//! fetching revocations. Each returns the event the machine gets next.
//!
//! A store error is a failure like a network error (logged, retried with backoff),
//! never "nothing to do": an outbox that cannot be read is not an empty outbox.

use std::time::Duration;

use rand::Rng;
use serde_json::value::RawValue;

use super::machine::Event;
use super::transport::SyncError;
use super::wire::{AuditAnswer, AuditEntryText, AuditStatus, AuditUpload, Revocations};
use super::wire::{UploadAnswer, UploadRequest};
use super::worker::Worker;
use super::{KEY_AUDIT_SYNCED, KEY_REVOCATIONS_VERSION, KV_META, KV_REVOKED, KV_SYNC, Q_OUTBOX};
use crate::store::Batch;
use crate::telemetry::DeliveryAttempt;

/// Envelope bytes one upload carries at most (one envelope always goes, whatever its
/// size): the gateway refuses request bodies over its `api.max_body_bytes` (2 MiB by
/// default) and a message may be up to `queue.max_message_bytes` (1 MiB), so a count
/// alone could build an upload no gateway takes — it would fail on every attempt until
/// its messages were dead-lettered.
pub(super) const PUSH_BUDGET_BYTES: usize = 1024 * 1024;

impl Worker {
    /// Upload up to `max` outbox envelopes (and about [`PUSH_BUDGET_BYTES`]), FIFO per
    /// recipient, recipients in turn.
    pub(super) async fn push(&self, max: u32) -> Event {
        let store = &self.deps.store;
        let now = self.now();
        let peers = match store.peers(Q_OUTBOX) {
            Ok(p) => p,
            Err(e) => return self.fail(&SyncError::Setup(e.to_string())),
        };
        // (recipient, message id) of each envelope in `raws`, in the same order.
        let mut batch: Vec<(String, String)> = Vec::new();
        let mut raws: Vec<Box<RawValue>> = Vec::new();
        let mut bytes = 0usize;
        let mut full = false;
        'peers: for peer in peers {
            let room = (max as usize).saturating_sub(batch.len());
            if room == 0 || full {
                break;
            }
            let msgs = match store.next_batch(Q_OUTBOX, &peer, room, now) {
                Ok(m) => m,
                Err(e) => return self.fail(&store_failed(e)),
            };
            for m in msgs {
                if !batch.is_empty() && bytes + m.body.len() > PUSH_BUDGET_BYTES {
                    // The rest of this peer waits for the next upload (FIFO holds).
                    full = true;
                    break 'peers;
                }
                bytes += m.body.len();
                // Checked to be JSON, sent as stored (no tree built, nothing re-serialised).
                let raw = String::from_utf8(m.body)
                    .map_err(|e| e.to_string())
                    .and_then(|t| RawValue::from_string(t).map_err(|e| e.to_string()));
                match raw {
                    Ok(v) => {
                        batch.push((peer.clone(), m.message_id));
                        raws.push(v);
                    }
                    // Sealed by this node, so only storage damage gets here; it stays
                    // queued (and counted) for an operator to look at.
                    Err(e) => tracing::error!(
                        event = "outbox_body_unreadable",
                        message_id = %m.message_id,
                        peer = %peer,
                        error = %e
                    ),
                }
            }
        }
        if batch.is_empty() {
            return Event::Pushed { more: false };
        }
        let more = full || batch.len() >= max as usize;
        let body = UploadRequest { envelopes: raws };
        let pq = self.t.node_path("upload");
        let answer = match self.t.post::<_, UploadAnswer>(&pq, &body, now).await {
            Ok(a) => a,
            Err(e) if matches!(e, SyncError::Slow(_)) && batch.len() > 1 => {
                // Too large for the link, not a failed delivery: the machine halves the
                // batch and these go again at once, without an attempt counted against
                // them (a batch of one that is still too slow is counted below).
                return self.fail(&e);
            }
            // About the node's clock, not these messages: no attempt is counted, and no
            // retry time is set from a time that may be about to go back a week (it
            // would hold the queue head until real time got there).
            Err(e @ SyncError::ClockSkew { .. }) => return self.fail(&e),
            Err(e) => {
                self.count_failed_upload(&batch, now).await;
                return self.fail(&e);
            }
        };
        match self.settle_upload(&batch, answer, now).await {
            Ok(()) => Event::Pushed { more },
            Err(e) => self.fail(&e),
        }
    }

    /// An upload that failed: one attempt counted against each of its messages (those
    /// past `max_attempts` become dead letters).
    async fn count_failed_upload(&self, batch: &[(String, String)], now: u64) {
        let jitter = rand::thread_rng().gen_range(-1.0..=1.0);
        for (peer, ids) in group(batch, |_| true) {
            let dead = match self
                .deps
                .store
                .record_failure(Q_OUTBOX, &peer, ids, now, jitter)
                .await
            {
                Ok(d) => d,
                Err(se) => {
                    // The attempt goes uncounted; the upload failure is still what the
                    // machine hears about.
                    tracing::warn!(event = "outbox_failure_not_recorded", peer = %peer, error = %se);
                    Vec::new()
                }
            };
            for id in dead {
                self.deps
                    .node
                    .outbound_failed("dead", &peer, &id, "max_attempts")
                    .await;
            }
        }
        DeliveryAttempt {
            result: "failed",
            peer: "upstream",
            count: batch.len(),
        }
        .emit(&self.deps.metrics);
    }

    /// The gateway's answer to an upload: what it took (or had) leaves the outbox, what
    /// it refused is rejected with its code, in one commit.
    async fn settle_upload(
        &self,
        batch: &[(String, String)],
        answer: UploadAnswer,
        now: u64,
    ) -> Result<(), SyncError> {
        let store = &self.deps.store;
        let UploadAnswer {
            accepted: mut done,
            duplicates,
            rejected,
        } = answer;
        done.extend(duplicates);
        let rejected: Vec<(String, String)> =
            rejected.into_iter().map(|r| (r.id, r.code)).collect();
        let mut settle = Batch::new();
        let done_ids: std::collections::HashSet<&str> = done.iter().map(String::as_str).collect();
        for (peer, ids) in group(batch, |id| done_ids.contains(id)) {
            settle.ack(Q_OUTBOX, &peer, ids, now);
        }
        for (peer, id) in batch {
            if let Some((_, code)) = rejected.iter().find(|(r, _)| r == id) {
                tracing::warn!(event = "upload_rejected", message_id = %id, code = %code);
                settle.reject(Q_OUTBOX, peer, id, code, now);
            }
        }
        store.commit(settle).await.map_err(store_failed)?;
        for (peer, id) in batch {
            if let Some((_, code)) = rejected.iter().find(|(r, _)| r == id) {
                self.deps
                    .node
                    .outbound_failed("rejected", peer, id, code)
                    .await;
            }
        }
        DeliveryAttempt {
            result: "ok",
            peer: "upstream",
            count: done.len(),
        }
        .emit(&self.deps.metrics);
        self.shared
            .status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pushed += done.len() as u64;
        Ok(())
    }

    /// Upload audit entries past the gateway's confirmed size, `max_entries` at a time.
    pub(super) async fn sync_audit(&mut self, max_entries: usize) -> Event {
        let store = self.deps.store.clone();
        let confirmed = match self.confirmed_audit {
            Some(c) => c,
            None => {
                let pq = self.t.node_path("audit");
                match self
                    .t
                    .get::<AuditStatus>(&pq, self.now(), Duration::ZERO)
                    .await
                {
                    Ok(a) => a.size,
                    Err(e) => return self.fail(&e),
                }
            }
        };
        self.confirmed_audit = Some(confirmed);
        let batch = match self.deps.node.audit_batch(confirmed, max_entries).await {
            Ok(Some(b)) if b.size > confirmed => b,
            Ok(_) => return Event::AuditSynced,
            Err(e) => {
                tracing::warn!(event = "audit_batch_failed", error = %e);
                return Event::AuditSynced;
            }
        };
        let body = AuditUpload {
            checkpoint: batch.checkpoint,
            entries: batch
                .entries
                .iter()
                .map(|b| AuditEntryText::Text(String::from_utf8_lossy(b).into_owned()))
                .collect(),
        };
        let pq = self.t.node_path("audit");
        match self.t.post::<_, AuditAnswer>(&pq, &body, self.now()).await {
            Ok(AuditAnswer { size: s }) => {
                self.confirmed_audit = Some(s);
                if let Err(e) = store
                    .kv_put(KV_META, KEY_AUDIT_SYNCED, s.to_string().into_bytes())
                    .await
                {
                    return self.fail(&store_failed(e));
                }
                tracing::info!(event = "audit_synced", size = s);
                Event::AuditSynced
            }
            Err(e) if e.status() == Some(409) => {
                // The gateway refused to merge: an alert on its side, a loud log here;
                // re-ask its size next time instead of hammering.
                tracing::error!(event = "audit_sync_refused", error = %e);
                self.confirmed_audit = None;
                Event::AuditSynced
            }
            Err(e) => self.fail(&e),
        }
    }

    pub(super) async fn revocations(&self) -> Event {
        let store = &self.deps.store;
        let stored = match store.kv_get(KV_SYNC, KEY_REVOCATIONS_VERSION) {
            Ok(v) => v,
            Err(e) => return self.fail(&store_failed(e)),
        };
        let since: u64 = match stored {
            None => 0,
            Some(b) => match String::from_utf8(b).ok().and_then(|t| t.parse().ok()) {
                Some(n) => n,
                None => {
                    // Asking from 0 again is safe (revocations only add) and rewrites it.
                    tracing::warn!(event = "revocations_version_unreadable");
                    0
                }
            },
        };
        let pq = format!("{}?since={since}", self.t.node_path("revocations"));
        let Revocations { revoked, version } = match self
            .t
            .get::<Revocations>(&pq, self.now(), Duration::ZERO)
            .await
        {
            Ok(r) => r,
            Err(e) => return self.fail(&e),
        };
        if revoked.is_empty() && version == since {
            return Event::RevocationsFetched;
        }
        let mut batch = Batch::new();
        for jti in &revoked {
            batch.kv_put(KV_REVOKED, jti, b"1".to_vec());
        }
        batch.kv_put(
            KV_SYNC,
            KEY_REVOCATIONS_VERSION,
            version.to_string().into_bytes(),
        );
        match store.commit(batch).await {
            Ok(_) => Event::RevocationsFetched,
            Err(e) => self.fail(&store_failed(e)),
        }
    }
}

fn store_failed(e: crate::store::StoreError) -> SyncError {
    SyncError::Setup(format!("store: {e}"))
}

/// Ids of `batch` that pass `keep`, grouped by recipient.
fn group(batch: &[(String, String)], keep: impl Fn(&str) -> bool) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for (peer, id) in batch.iter().filter(|b| keep(&b.1)) {
        match out.iter_mut().find(|(p, _)| p == peer) {
            Some((_, ids)) => ids.push(id.clone()),
            None => out.push((peer.clone(), vec![id.clone()])),
        }
    }
    out
}
