//! The worker's chores once connected: pushing the outbox, syncing the audit log,
//! fetching revocations. Each returns the event the machine gets next.

use std::time::Duration;

use rand::Rng;
use serde_json::{json, Value};

use super::machine::Event;
use super::transport::SyncError;
use super::worker::{failed, Worker, AUDIT_CHUNK};
use super::{KEY_AUDIT_SYNCED, KEY_REVOCATIONS_VERSION, KV_META, KV_REVOKED, KV_SYNC, Q_OUTBOX};
use crate::store::WriteOp;
use crate::telemetry::DeliveryAttempt;

impl Worker {
    /// Upload up to `max` outbox envelopes, FIFO per recipient, recipients in turn.
    pub(super) async fn push(&self, max: u32) -> Event {
        let store = &self.deps.store;
        let now = self.now();
        let peers = match store.peers(Q_OUTBOX) {
            Ok(p) => p,
            Err(e) => return failed(&SyncError::Setup(e.to_string())),
        };
        let mut batch: Vec<(String, String, Value)> = Vec::new();
        for peer in peers {
            let room = (max as usize).saturating_sub(batch.len());
            if room == 0 {
                break;
            }
            let msgs = store
                .next_batch(Q_OUTBOX, &peer, room, now)
                .unwrap_or_default();
            for m in msgs {
                if let Ok(v) = serde_json::from_slice::<Value>(&m.body) {
                    batch.push((peer.clone(), m.message_id, v));
                }
            }
        }
        if batch.is_empty() {
            return Event::Pushed { more: false };
        }
        let more = batch.len() >= max as usize;
        let body = json!({"envelopes": batch.iter().map(|b| b.2.clone()).collect::<Vec<_>>()});
        let pq = self.t.node_path("upload");
        let resp = self
            .t
            .call(reqwest::Method::POST, &pq, Some(&body), now, Duration::ZERO)
            .await;
        let v = match resp {
            Ok(v) => v,
            Err(e) => {
                let jitter = rand::thread_rng().gen_range(-1.0..=1.0);
                for (peer, ids) in group(&batch, |_| true) {
                    let dead = store
                        .record_failure(Q_OUTBOX, &peer, ids, now, jitter)
                        .await
                        .unwrap_or_default();
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
                return failed(&e);
            }
        };
        let list = |k: &str| -> Vec<String> {
            v[k].as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut done = list("accepted");
        done.extend(list("duplicates"));
        let rejected: Vec<(String, String)> = v["rejected"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| {
                        (
                            r["id"].as_str().unwrap_or_default().to_string(),
                            r["code"].as_str().unwrap_or_default().to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut ops = Vec::new();
        for (peer, ids) in group(&batch, |id| done.iter().any(|d| d == id)) {
            ops.push(WriteOp::Ack {
                queue: Q_OUTBOX.into(),
                peer,
                ids,
                now_ms: now,
            });
        }
        for (peer, id, _) in &batch {
            if let Some((_, code)) = rejected.iter().find(|(r, _)| r == id) {
                tracing::warn!(event = "upload_rejected", message_id = %id, code = %code);
                ops.push(WriteOp::Ack {
                    queue: Q_OUTBOX.into(),
                    peer: peer.clone(),
                    ids: vec![id.clone()],
                    now_ms: now,
                });
                ops.push(WriteOp::Reject {
                    queue: Q_OUTBOX.into(),
                    peer: peer.clone(),
                    message_id: id.clone(),
                    reason: code.clone(),
                    now_ms: now,
                });
            }
        }
        if let Err(e) = store.write(ops).await {
            return failed(&SyncError::Setup(format!("store: {e}")));
        }
        for (peer, id, _) in &batch {
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
        Event::Pushed { more }
    }

    pub(super) async fn sync_audit(&mut self) -> Event {
        let store = self.deps.store.clone();
        let confirmed = match self.confirmed_audit {
            Some(c) => c,
            None => {
                let pq = self.t.node_path("audit");
                match self
                    .t
                    .call(reqwest::Method::GET, &pq, None, self.now(), Duration::ZERO)
                    .await
                {
                    Ok(v) => v["size"].as_u64().unwrap_or(0),
                    Err(e) => return failed(&e),
                }
            }
        };
        self.confirmed_audit = Some(confirmed);
        let batch = match self.deps.node.audit_batch(confirmed, AUDIT_CHUNK).await {
            Ok(Some(b)) if b.size > confirmed => b,
            Ok(_) => return Event::AuditSynced,
            Err(e) => {
                tracing::warn!(event = "audit_batch_failed", error = %e);
                return Event::AuditSynced;
            }
        };
        let texts: Vec<Value> = batch
            .entries
            .iter()
            .map(|b| Value::String(String::from_utf8_lossy(b).into_owned()))
            .collect();
        let note = batch.checkpoint;
        let body = json!({"entries": texts, "checkpoint": note});
        let pq = self.t.node_path("audit");
        match self
            .t
            .call(
                reqwest::Method::POST,
                &pq,
                Some(&body),
                self.now(),
                Duration::ZERO,
            )
            .await
        {
            Ok(v) => {
                let s = v["size"].as_u64().unwrap_or(confirmed);
                self.confirmed_audit = Some(s);
                let _ = store
                    .kv_put(KV_META, KEY_AUDIT_SYNCED, s.to_string().into_bytes())
                    .await;
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
            Err(e) => failed(&e),
        }
    }

    pub(super) async fn revocations(&self) -> Event {
        let store = &self.deps.store;
        let since: u64 = store
            .kv_get(KV_SYNC, KEY_REVOCATIONS_VERSION)
            .ok()
            .flatten()
            .and_then(|b| String::from_utf8(b).ok()?.parse().ok())
            .unwrap_or(0);
        let pq = format!("{}?since={since}", self.t.node_path("revocations"));
        let v = match self
            .t
            .call(reqwest::Method::GET, &pq, None, self.now(), Duration::ZERO)
            .await
        {
            Ok(v) => v,
            Err(e) => return failed(&e),
        };
        let mut ops: Vec<WriteOp> = v["revoked"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|j| j.as_str())
                    .map(|jti| WriteOp::KvPut {
                        ns: KV_REVOKED.into(),
                        key: jti.into(),
                        value: b"1".to_vec(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let version = v["version"].as_u64().unwrap_or(since);
        if ops.is_empty() && version == since {
            return Event::RevocationsFetched;
        }
        ops.push(WriteOp::KvPut {
            ns: KV_SYNC.into(),
            key: KEY_REVOCATIONS_VERSION.into(),
            value: version.to_string().into_bytes(),
        });
        match store.write(ops).await {
            Ok(_) => Event::RevocationsFetched,
            Err(e) => failed(&SyncError::Setup(format!("store: {e}"))),
        }
    }
}

/// Ids of `batch` that pass `keep`, grouped by recipient.
fn group(
    batch: &[(String, String, Value)],
    keep: impl Fn(&str) -> bool,
) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for (peer, id, _) in batch.iter().filter(|b| keep(&b.1)) {
        match out.iter_mut().find(|(p, _)| p == peer) {
            Some((_, ids)) => ids.push(id.clone()),
            None => out.push((peer.clone(), vec![id.clone()])),
        }
    }
    out
}
