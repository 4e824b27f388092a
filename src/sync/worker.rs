//! The async loop: ask the [`Machine`] what to do, do it over [`Transport`], feed the
//! outcome back. All protocol decisions live in the machine; this file only moves bytes
//! between the gateway, the store and the node.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::machine::{Action, Event, Machine, MachineConfig};
use super::transport::{SyncError, Transport};
use super::{
    InboundOutcome, NodeLink, Shared, SyncHandle, KEY_AUDIT_SYNCED, KEY_REVOCATIONS_VERSION,
    KV_META, KV_REVOKED, KV_SYNC, Q_OUTBOX,
};
use crate::config::Config;
use crate::envelope::Keys;
use crate::store::{Store, WriteOp};
use crate::telemetry::{DeliveryAttempt, Metrics, UpstreamState};

/// Audit entries per upload, at most (keeps one request well under the body limit).
const AUDIT_CHUNK: usize = 2_000;

pub struct SyncDeps {
    pub cfg: Arc<Config>,
    pub store: Store,
    pub keys: Arc<Keys>,
    pub metrics: Arc<Metrics>,
    pub node: Arc<dyn NodeLink>,
}

/// Start the sync loop on `tracker` if the config has an `[upstream]`; it ends promptly
/// when `shutdown` fires.
pub fn spawn(
    deps: SyncDeps,
    tracker: &TaskTracker,
    shutdown: CancellationToken,
) -> Result<Option<SyncHandle>, SyncError> {
    let Some(up) = deps.cfg.upstream.clone() else {
        return Ok(None);
    };
    let transport = Transport::new(&up, &deps.cfg.node_id, deps.keys.clone())?;
    let shared = Arc::new(Shared::default());
    let handle = SyncHandle {
        shared: shared.clone(),
        url: up.url.clone(),
    };
    let mcfg = MachineConfig {
        poll_wait_s: up.poll_wait_s,
        flush_batch: deps.cfg.queue.flush_batch,
        ..MachineConfig::default()
    };
    let w = Worker {
        deps,
        t: transport,
        shared,
        shutdown,
        confirmed_audit: None,
        url: up.url,
    };
    tracker.spawn(w.run(Machine::new(mcfg)));
    Ok(Some(handle))
}

struct Worker {
    deps: SyncDeps,
    t: Transport,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
    /// The gateway's confirmed audit size, asked once per connection.
    confirmed_audit: Option<u64>,
    url: String,
}

fn failed(e: &SyncError) -> Event {
    Event::Failed {
        error: e.to_string(),
        jitter: rand::thread_rng().gen_range(-1.0..=1.0),
    }
}

impl Worker {
    fn now(&self) -> u64 {
        self.deps.store.now_ms()
    }

    async fn run(mut self, mut m: Machine) {
        let mut ev = Event::Start;
        let mut was_connected = false;
        loop {
            if self.shutdown.is_cancelled() {
                ev = Event::Shutdown;
            }
            let now = self.now();
            let action = m.handle(ev, now);
            self.publish(&m, &mut was_connected);
            tracing::trace!(event = "sync_action", ?action);
            ev = match action {
                Action::Stop => return,
                Action::Wait { until_ms } => self.wait(until_ms).await,
                Action::Pull { wait_s, max } => self.pull(wait_s, max).await,
                Action::Push { max } => self.push(max).await,
                Action::SyncAudit => self.sync_audit().await,
                Action::FetchRevocations => self.revocations().await,
            };
            if matches!(ev, Event::Failed { .. }) {
                self.confirmed_audit = None;
            }
        }
    }

    fn publish(&self, m: &Machine, was_connected: &mut bool) {
        let connected = m.connected();
        {
            let mut s = self.shared.status.lock().unwrap_or_else(|p| p.into_inner());
            s.state = m.phase().as_str().to_string();
            s.connected = connected;
            s.last_ok_ms = m.last_ok_ms();
            s.last_error = m.last_error().map(str::to_string);
            if let Some(c) = self.confirmed_audit {
                s.audit_synced_size = c;
            }
        }
        if connected != *was_connected {
            UpstreamState {
                connected,
                url: &self.url,
                detail: m.last_error().unwrap_or(""),
            }
            .emit(&self.deps.metrics);
            *was_connected = connected;
        }
    }

    async fn wait(&self, until_ms: u64) -> Event {
        let d = Duration::from_millis(until_ms.saturating_sub(self.now()));
        tokio::select! {
            _ = self.shutdown.cancelled() => Event::Shutdown,
            _ = self.shared.wake.notified() => Event::Woken,
            _ = tokio::time::sleep(d) => Event::Timer,
        }
    }

    async fn pull(&self, wait_s: u64, max: u32) -> Event {
        let pq = format!("{}?wait_s={wait_s}&max={max}", self.t.node_path("pull"));
        let call = self.t.call(
            reqwest::Method::GET,
            &pq,
            None,
            self.now(),
            Duration::from_secs(wait_s),
        );
        let resp = if wait_s > 0 {
            tokio::select! {
                r = call => r,
                _ = self.shared.wake.notified() => return Event::Woken,
                _ = self.shutdown.cancelled() => return Event::Shutdown,
            }
        } else {
            tokio::select! {
                r = call => r,
                _ = self.shutdown.cancelled() => return Event::Shutdown,
            }
        };
        let v = match resp {
            Ok(v) => v,
            Err(e) => return failed(&e),
        };
        let pending = v["pending_count"].as_u64().unwrap_or(0);
        let envs = v["envelopes"].as_array().cloned().unwrap_or_default();
        let mut ack = Vec::new();
        for env in envs {
            let id = env["message_id"].as_str().unwrap_or_default().to_string();
            let bytes = serde_json::to_vec(&env).unwrap_or_default();
            match self.deps.node.receive(bytes).await {
                InboundOutcome::Accepted | InboundOutcome::Duplicate => ack.push(id),
                InboundOutcome::Rejected { code } => {
                    tracing::warn!(event = "pulled_envelope_rejected", message_id = %id, code = %code);
                    ack.push(id);
                }
                InboundOutcome::Retry => break,
            }
        }
        let received = ack.len() as u64;
        if !ack.is_empty() {
            let body = json!({"message_ids": ack});
            let pq = self.t.node_path("ack");
            if let Err(e) = self
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
                // Stored locally already; the gateway resends and we answer duplicate.
                return failed(&e);
            }
            self.shared
                .status
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pulled += received;
        }
        Event::Pulled {
            pending_count: pending,
            received,
        }
    }

    /// Upload up to `max` outbox envelopes, FIFO per recipient, recipients in turn.
    async fn push(&self, max: u32) -> Event {
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
                    let _ = store
                        .record_failure(Q_OUTBOX, &peer, ids, now, jitter)
                        .await;
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

    async fn sync_audit(&mut self) -> Event {
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

    async fn revocations(&self) -> Event {
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
