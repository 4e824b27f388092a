//! [`GatewayState`] on the embedded store (the default engine, the same store a node
//! runs): per-node queues, KV records and dedup windows, each under the names below —
//! which nothing outside this file uses — and the events, in memory (`events.rs`).

use super::TrustUpdate;
use super::{
    AuditExtension, CommandKey, Delivery, FiledResult, ForNode, Fut, GatewayState, InboxMessage,
    JobRecord, NewJob, NodeAck, PullBatch, Queued, QueuedMessage, RevocationList, Revoked,
    StateError, Take, Upload,
};
use crate::envelope::TrustStore;
use crate::store::{
    Batch, ExpiredMessage, MessageStatus, NewMessage, QueueStat, Store, StoredMessage,
};

use crate::store::names::{
    KV_GW_AUDIT_CHECKPOINTS_PREFIX, KV_GW_AUDIT_PREFIX, KV_GW_JOBS, KV_GW_REQUESTS, KV_GW_RESULTS,
    Q_GATEWAY_INBOX, Q_TO_NODE, RESULT_GW_COMMAND_KEY_PREFIX, SCOPE_RESULTS,
};

/// A trust store read or staged that failed: its rows cannot be read as peers.
fn trust_corrupt(e: anyhow::Error) -> StateError {
    StateError::Corrupt(format!("trust store: {e:#}"))
}

fn ns_audit_entries(node: &str) -> String {
    format!("{KV_GW_AUDIT_PREFIX}{node}")
}
fn ns_audit_checkpoints(node: &str) -> String {
    format!("{KV_GW_AUDIT_CHECKPOINTS_PREFIX}{node}")
}
fn index_key(i: u64) -> String {
    crate::store::seq_key(i)
}

pub struct Embedded {
    store: Store,
    /// Serialises revocations so two never take the same version.
    revoking: tokio::sync::Mutex<()>,
    /// The newest pull number per node (see `begin_pull`).
    pulls: std::sync::Mutex<std::collections::HashMap<String, u64>>,
    /// The last message handed out per node (body left out): where a pull with
    /// `after` naming it continues.
    handed_out: std::sync::Mutex<std::collections::HashMap<String, StoredMessage>>,
    /// Serialises enrollments, approvals and retirements (each reads what it changes).
    enrolling: tokio::sync::Mutex<()>,
    fleet: fleet::FleetCache,
    rollout_leases: rollouts::Leases,
    /// The events dashboards follow, in memory (one process writes them).
    events: events::EventRows,
}

impl Embedded {
    pub fn new(store: Store) -> Self {
        let first_event = store.now_ms().saturating_mul(1000);
        Self {
            store,
            revoking: tokio::sync::Mutex::new(()),
            pulls: std::sync::Mutex::new(std::collections::HashMap::new()),
            handed_out: std::sync::Mutex::new(std::collections::HashMap::new()),
            enrolling: tokio::sync::Mutex::new(()),
            fleet: fleet::FleetCache::default(),
            rollout_leases: rollouts::Leases::default(),
            events: events::EventRows::new(first_event),
        }
    }

    /// Queue `msg` after the changes of `before`, in one transaction.
    async fn enqueue(&self, msg: NewMessage, before: Batch) -> Result<Queued, StateError> {
        let mut batch = before;
        batch.enqueue(msg);
        Ok(if self.store.commit(batch).await?.had_duplicate() {
            Queued::Duplicate
        } else {
            Queued::Queued
        })
    }

    fn kv_json<T: serde::de::DeserializeOwned>(
        &self,
        ns: &str,
        key: &str,
    ) -> Result<Option<T>, StateError> {
        match self.store.kv_get(ns, key)? {
            None => Ok(None),
            Some(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| StateError::Corrupt(format!("{ns}/{key}: {e}"))),
        }
    }
}

impl GatewayState for Embedded {
    fn now_ms(&self) -> u64 {
        self.store.now_ms()
    }

    fn replicas(&self) -> Option<&dyn crate::gateway::storage::SharedState> {
        None
    }

    fn events(&self) -> &dyn crate::gateway::storage::EventTable {
        &self.events
    }

    fn queue_command(&self, msg: ForNode, job: Option<NewJob>) -> Fut<'_, Queued> {
        Box::pin(async move {
            let mut extra = Batch::new();
            if let Some(job) = job {
                if self.id_taken(&msg.message_id)? {
                    return Ok(Queued::Duplicate);
                }
                let record = serde_json::to_vec(&job.record)
                    .map_err(|e| StateError::Corrupt(format!("job record: {e}")))?;
                extra.kv_put(KV_GW_JOBS, &job.key, record).kv_put(
                    KV_GW_REQUESTS,
                    &msg.message_id,
                    msg.node_id.clone().into_bytes(),
                );
            }
            self.enqueue_for_node(msg, extra).await
        })
    }

    fn queue_keyed_command(&self, msg: ForNode, key: CommandKey) -> Fut<'_, Queued> {
        Box::pin(async move {
            if self.id_taken(&msg.message_id)? {
                return Ok(Queued::Duplicate);
            }
            let record = serde_json::to_vec(&key)
                .map_err(|e| StateError::Corrupt(format!("command key: {e}")))?;
            let mut extra = Batch::new();
            extra.result_put(
                &format!("{RESULT_GW_COMMAND_KEY_PREFIX}{}", key.message_id),
                record,
                key.keep_until_ms,
            );
            self.enqueue_for_node(msg, extra).await
        })
    }

    fn command_key<'a>(&'a self, message_id: &'a str) -> Fut<'a, Option<CommandKey>> {
        Box::pin(async move {
            let key = format!("{RESULT_GW_COMMAND_KEY_PREFIX}{message_id}");
            match self.store.result_get(&key)? {
                None => Ok(None),
                Some(b) => serde_json::from_slice(&b)
                    .map(Some)
                    .map_err(|e| StateError::Corrupt(format!("{key}: {e}"))),
            }
        })
    }

    fn forward(&self, msg: ForNode) -> Fut<'_, Queued> {
        Box::pin(async move { self.enqueue_for_node(msg, Batch::new()).await })
    }

    fn job<'a>(&'a self, key: &'a str) -> Fut<'a, Option<JobRecord>> {
        Box::pin(async move { self.kv_json(KV_GW_JOBS, key) })
    }

    fn request_node<'a>(&'a self, request_id: &'a str) -> Fut<'a, Option<String>> {
        Box::pin(async move {
            Ok(self
                .store
                .kv_get(KV_GW_REQUESTS, request_id)?
                .map(|b| String::from_utf8_lossy(&b).into_owned()))
        })
    }

    fn result<'a>(&'a self, request_id: &'a str) -> Fut<'a, Option<Vec<u8>>> {
        Box::pin(async move { Ok(self.store.kv_get(KV_GW_RESULTS, request_id)?) })
    }

    fn file_result(&self, r: FiledResult) -> Fut<'_, ()> {
        Box::pin(async move {
            let mut batch = Batch::new();
            Self::file(&mut batch, r);
            self.store.commit(batch).await?;
            Ok(())
        })
    }

    fn receive_uploads(&self, items: Vec<Upload>) -> Fut<'_, Vec<Queued>> {
        Box::pin(async move {
            let mut batch = Batch::new();
            let inbox: Vec<bool> = items
                .into_iter()
                .map(|item| match item {
                    Upload::Result(r) => {
                        Self::file(&mut batch, r);
                        false
                    }
                    Upload::Inbox(m) => {
                        batch.enqueue(Self::inbox_message(m));
                        true
                    }
                })
                .collect();
            let done = self.store.commit(batch).await?;
            let mut enqueued = done.enqueued.iter();
            Ok(inbox
                .into_iter()
                .map(
                    |is_inbox| match is_inbox.then(|| enqueued.next()).flatten() {
                        Some(crate::store::EnqueueOutcome::Duplicate) => Queued::Duplicate,
                        _ => Queued::Queued,
                    },
                )
                .collect())
        })
    }

    fn upload_seen<'a>(&'a self, message_id: &'a str) -> Fut<'a, bool> {
        Box::pin(async move {
            Ok(self.store.seen(SCOPE_RESULTS, message_id)?
                || self.store.seen(Q_GATEWAY_INBOX, message_id)?)
        })
    }

    fn begin_pull<'a>(&'a self, node: &'a str) -> Fut<'a, u64> {
        Box::pin(async move {
            let mut pulls = self.pulls.lock().unwrap_or_else(|p| p.into_inner());
            let n = pulls.entry(node.to_string()).or_insert(0);
            *n += 1;
            Ok(*n)
        })
    }

    fn take_batch<'a>(&'a self, node: &'a str, take: Take<'a>) -> Fut<'a, PullBatch> {
        Box::pin(self.take_batch_now(node, take))
    }

    fn ack<'a>(&'a self, node: &'a str, ack: NodeAck) -> Fut<'a, Vec<String>> {
        Box::pin(async move {
            let now = self.now_ms();
            let mut batch = Batch::new();
            batch.ack(Q_TO_NODE, node, ack.delivered, now);
            for (id, code) in self.queued_for_node(node, &ack.rejected)? {
                batch.reject(Q_TO_NODE, node, id, code, now);
            }
            let done = self.store.commit(batch).await?;
            self.acked_events(done.removed(), ack.events);
            Ok(done.removed().map(str::to_string).collect())
        })
    }

    fn inbox_put(&self, m: InboxMessage) -> Fut<'_, Queued> {
        Box::pin(async move { self.enqueue(Self::inbox_message(m), Batch::new()).await })
    }

    fn inbox_list<'a>(&'a self, from: Option<&'a str>, limit: usize) -> Fut<'a, Vec<Vec<u8>>> {
        Box::pin(async move {
            let now = self.now_ms();
            let page = self.store.list(Q_GATEWAY_INBOX, from, None, limit)?;
            // `list` includes what expired but the sweeper has not removed yet (up to a
            // tick): never hand that out, as the node's inbox does not.
            Ok(page
                .items
                .into_iter()
                .filter(|m| m.expires_at_ms > now)
                .map(|m| m.body)
                .collect())
        })
    }

    fn inbox_ack<'a>(&'a self, message_id: &'a str) -> Fut<'a, Option<bool>> {
        Box::pin(async move {
            let Some(st) = self
                .store
                .status(message_id)?
                .filter(|s| s.queue == Q_GATEWAY_INBOX)
            else {
                return Ok(None);
            };
            let out = self
                .store
                .ack(
                    Q_GATEWAY_INBOX,
                    &st.peer,
                    vec![message_id.to_string()],
                    self.now_ms(),
                )
                .await?;
            Ok(Some(out.iter().any(|a| a.was_stored)))
        })
    }

    fn message_status<'a>(&'a self, message_id: &'a str) -> Fut<'a, Option<MessageStatus>> {
        Box::pin(async move { Ok(self.store.status(message_id)?) })
    }

    fn queued_for<'a>(&'a self, node: &'a str, limit: usize) -> Fut<'a, Vec<QueuedMessage>> {
        Box::pin(async move {
            let now = self.now_ms();
            let mut out = Vec::new();
            let mut after = None;
            // Pages past what expired and the sweep has not removed yet.
            while out.len() < limit {
                let page =
                    self.store
                        .list(Q_TO_NODE, Some(node), after.as_deref(), limit - out.len())?;
                out.extend(
                    page.items
                        .into_iter()
                        .filter(|m| m.expires_at_ms > now)
                        .map(|m| QueuedMessage {
                            message_id: m.message_id,
                            payload_type: m.payload_type,
                            priority: m.priority,
                            created_at_ms: m.created_at_ms,
                            expires_at_ms: m.expires_at_ms,
                            attempts: m.attempts,
                            max_attempts: m.max_attempts,
                        }),
                );
                match page.next {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
            Ok(out)
        })
    }

    fn queue_stats(&self) -> Fut<'_, Vec<QueueStat>> {
        Box::pin(async move { Ok(self.store.queue_stats(self.now_ms())?) })
    }

    fn sweep_expired(&self) -> Fut<'_, Vec<ExpiredMessage>> {
        Box::pin(async move {
            let expired = self.store.sweep_expired(self.now_ms()).await?;
            // A pass that changed nothing wrote nothing; the time floor is persisted
            // coarsely instead (see `store::time`, "Idle").
            if self.store.time_floor_lag_ms() >= crate::store::FLOOR_EVERY_MS {
                // Not the sweep's failure: what it expired is reported all the same.
                if let Err(e) = self.store.touch_time().await {
                    tracing::warn!(event = "time_floor_not_written", error = %e);
                }
            }
            Ok(expired)
        })
    }

    fn revoke<'a>(
        &'a self,
        jti: &'a str,
        audit: &'a crate::audit::AuditRecord,
    ) -> Fut<'a, Revoked> {
        Box::pin(self.revoke_now(jti, audit))
    }

    fn revocations(&self, since: u64) -> Fut<'_, RevocationList> {
        Box::pin(async move { self.revocations_now(since) })
    }

    fn is_revoked(&self, jti: &str) -> Result<bool, StateError> {
        Ok(self.revocation_rows()?.iter().any(|(_, j)| j == jti))
    }

    fn audit_entries<'a>(&'a self, node: &'a str) -> Fut<'a, Vec<Vec<u8>>> {
        Box::pin(async move {
            Ok(self
                .store
                .kv_list(&ns_audit_entries(node))?
                .into_iter()
                .map(|(_, v)| v)
                .collect())
        })
    }

    fn audit_checkpoints<'a>(&'a self, node: &'a str) -> Fut<'a, Vec<(u64, String)>> {
        Box::pin(async move {
            let mut out = Vec::new();
            for (k, v) in self.store.kv_list(&ns_audit_checkpoints(node))? {
                let size = k
                    .parse()
                    .map_err(|_| StateError::Corrupt(format!("audit checkpoint key {k}")))?;
                out.push((size, String::from_utf8_lossy(&v).into_owned()));
            }
            out.sort();
            Ok(out)
        })
    }

    fn audit_entry<'a>(&'a self, node: &'a str, index: u64) -> Fut<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            Ok(self
                .store
                .kv_get(&ns_audit_entries(node), &index_key(index))?)
        })
    }

    fn audit_extend<'a>(&'a self, node: &'a str, ext: AuditExtension) -> Fut<'a, ()> {
        Box::pin(async move {
            let ns = ns_audit_entries(node);
            let mut batch = Batch::new();
            for (i, e) in ext.entries.into_iter().enumerate() {
                batch.kv_put(&ns, &index_key(ext.start + i as u64), e);
            }
            batch.kv_put(
                &ns_audit_checkpoints(node),
                &index_key(ext.checkpoint_size),
                ext.checkpoint.into_bytes(),
            );
            self.store.commit(batch).await?;
            Ok(())
        })
    }

    fn load_trust(&self) -> Result<TrustStore, StateError> {
        crate::daemon::trust::load(&self.store).map_err(trust_corrupt)
    }

    fn load_trust_since(
        &self,
        known: Option<u64>,
    ) -> Result<Option<(u64, TrustUpdate)>, StateError> {
        crate::daemon::trust::read_since(&self.store, known).map_err(trust_corrupt)
    }

    fn uploads_seen<'a>(
        &'a self,
        message_ids: &'a [String],
    ) -> Fut<'a, std::collections::HashSet<String>> {
        Box::pin(self.uploads_seen_now(message_ids))
    }

    fn audit_size<'a>(&'a self, node: &'a str) -> Fut<'a, u64> {
        Box::pin(async move { Ok(self.audit_entries(node).await?.len() as u64) })
    }

    fn audit_sizes<'a>(
        &'a self,
        nodes: &'a [String],
    ) -> Fut<'a, std::collections::HashMap<String, u64>> {
        Box::pin(self.audit_sizes_now(nodes))
    }

    fn save_trust<'a>(
        &'a self,
        edit: &'a crate::gateway::storage::TrustEdit,
        audit: &'a [crate::audit::AuditRecord],
    ) -> Fut<'a, ()> {
        Box::pin(self.save_trust_now(edit, audit))
    }

    fn durable(&self) -> bool {
        !self.store.sync_failed()
    }

    fn ready(&self) -> Fut<'_, ()> {
        Box::pin(async move {
            if self.store.sync_failed() {
                return Err(StateError::Unavailable(
                    "the store can no longer make writes durable (a failed fsync)".into(),
                ));
            }
            Ok(())
        })
    }

    fn close(&self) -> Fut<'_, ()> {
        Box::pin(async move {
            let store = self.store.clone();
            tokio::task::spawn_blocking(move || store.close_keeping_time())
                .await
                .map_err(|e| StateError::Unavailable(format!("close: {e}")))
        })
    }
}

mod enroll;
mod events;
mod fleet;
mod pull;
mod records;
mod revocations;
mod rollouts;
mod shared;
#[cfg(feature = "postgres")]
pub mod snapshot;
mod tenants;

#[cfg(test)]
mod tests;
