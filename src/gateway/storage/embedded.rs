//! [`GatewayState`] on the embedded store (the default engine, the same store a node
//! runs): per-node queues, KV records and dedup windows, each under the names below —
//! which nothing outside this file uses.

use super::{
    AuditExtension, Batch, Delivery, FiledResult, ForNode, Fut, GatewayState, InboxMessage,
    JobRecord, NewJob, NodeAck, Queued, RevocationList, Revoked, StateError,
};
use crate::envelope::TrustStore;
use crate::store::{
    EnqueueOutcome, ExpiredMessage, MessageStatus, NewMessage, OpOutcome, QueueStat, Store, WriteOp,
};

/// Queue of messages waiting for a node; `peer` = the node id.
const Q_NODE: &str = super::QUEUE_TO_NODE;
/// Queue of non-result messages nodes sent to the gateway; `peer` = the sender.
const Q_INBOX: &str = super::QUEUE_INBOX;
/// Dedup scope of result envelopes received.
const SCOPE_RESULTS: &str = "results";
/// KV: a caller's job (`job_key`) → [`JobRecord`] of its TASK_REQUEST.
const KV_JOBS: &str = "gw_jobs";
/// KV: message_id of a TASK_REQUEST → the node it was sent to.
const KV_REQUESTS: &str = "gw_requests";
/// KV: message_id of a TASK_REQUEST → its TASK_RESULT payload (JSON).
const KV_RESULTS: &str = "gw_results";
/// KV: revoked token ids, key = zero-padded version, value = jti.
const KV_REVOCATIONS: &str = "gw_revocations";

fn ns_audit_entries(node: &str) -> String {
    format!("gw_audit:{node}")
}
fn ns_audit_checkpoints(node: &str) -> String {
    format!("gw_auditcp:{node}")
}
fn index_key(i: u64) -> String {
    format!("{i:020}")
}

pub struct Embedded {
    store: Store,
    /// Serialises revocations so two never take the same version.
    revoking: tokio::sync::Mutex<()>,
}

impl Embedded {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            revoking: tokio::sync::Mutex::new(()),
        }
    }

    fn new_message(&self, m: ForNode) -> NewMessage {
        NewMessage {
            queue: Q_NODE.into(),
            peer: m.node_id,
            message_id: m.message_id,
            payload_type: m.payload_type,
            priority: m.priority,
            created_at_ms: m.created_at_ms,
            expires_at_ms: m.expires_at_ms,
            body: m.envelope,
            max_attempts: Some(m.max_attempts),
            dedup_until_ms: None,
        }
    }

    async fn enqueue(&self, msg: NewMessage, extra: Vec<WriteOp>) -> Result<Queued, StateError> {
        let mut ops = extra;
        ops.push(WriteOp::Enqueue(msg));
        let out = self.store.write(ops).await?;
        Ok(
            if out
                .iter()
                .any(|o| matches!(o, OpOutcome::Enqueued(EnqueueOutcome::Duplicate)))
            {
                Queued::Duplicate
            } else {
                Queued::Queued
            },
        )
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

    fn revocation_rows(&self) -> Result<Vec<(u64, String)>, StateError> {
        Ok(self
            .store
            .kv_list(KV_REVOCATIONS)?
            .into_iter()
            .map(|(k, v)| {
                (
                    k.parse().unwrap_or(0),
                    String::from_utf8_lossy(&v).into_owned(),
                )
            })
            .collect())
    }
}

impl GatewayState for Embedded {
    fn now_ms(&self) -> u64 {
        self.store.now_ms()
    }

    fn queue_command(&self, msg: ForNode, job: Option<NewJob>) -> Fut<'_, Queued> {
        Box::pin(async move {
            let mut extra = Vec::new();
            if let Some(job) = job {
                let record = serde_json::to_vec(&job.record)
                    .map_err(|e| StateError::Corrupt(format!("job record: {e}")))?;
                extra.push(WriteOp::KvPut {
                    ns: KV_JOBS.into(),
                    key: job.key,
                    value: record,
                });
                extra.push(WriteOp::KvPut {
                    ns: KV_REQUESTS.into(),
                    key: msg.message_id.clone(),
                    value: msg.node_id.clone().into_bytes(),
                });
            }
            let msg = self.new_message(msg);
            self.enqueue(msg, extra).await
        })
    }

    fn forward(&self, msg: ForNode) -> Fut<'_, Queued> {
        Box::pin(async move {
            let msg = self.new_message(msg);
            self.enqueue(msg, Vec::new()).await
        })
    }

    fn job<'a>(&'a self, key: &'a str) -> Fut<'a, Option<JobRecord>> {
        Box::pin(async move { self.kv_json(KV_JOBS, key) })
    }

    fn request_node<'a>(&'a self, request_id: &'a str) -> Fut<'a, Option<String>> {
        Box::pin(async move {
            Ok(self
                .store
                .kv_get(KV_REQUESTS, request_id)?
                .map(|b| String::from_utf8_lossy(&b).into_owned()))
        })
    }

    fn result<'a>(&'a self, request_id: &'a str) -> Fut<'a, Option<Vec<u8>>> {
        Box::pin(async move { Ok(self.store.kv_get(KV_RESULTS, request_id)?) })
    }

    fn file_result(&self, r: FiledResult) -> Fut<'_, ()> {
        Box::pin(async move {
            self.store
                .write(vec![
                    WriteOp::KvPut {
                        ns: KV_RESULTS.into(),
                        key: r.request_id,
                        value: r.plaintext,
                    },
                    WriteOp::Remember {
                        scope: SCOPE_RESULTS.into(),
                        id: r.result_message_id,
                        keep_until_ms: r.remember_until_ms,
                    },
                ])
                .await?;
            Ok(())
        })
    }

    fn upload_seen<'a>(&'a self, message_id: &'a str) -> Fut<'a, bool> {
        Box::pin(async move {
            Ok(self.store.seen(SCOPE_RESULTS, message_id)?
                || self.store.seen(Q_INBOX, message_id)?)
        })
    }

    fn take_batch<'a>(&'a self, node: &'a str, max: usize) -> Fut<'a, Batch> {
        Box::pin(async move {
            let batch = self.store.next_batch(Q_NODE, node, max, self.now_ms())?;
            let pending = self.store.pending(Q_NODE, node)? as u64;
            if !batch.is_empty() {
                let ids = batch.iter().map(|m| m.message_id.clone()).collect();
                self.store.mark_delivering(Q_NODE, node, ids).await?;
            }
            Ok(Batch {
                deliveries: batch
                    .into_iter()
                    .map(|m| Delivery {
                        message_id: m.message_id,
                        envelope: m.body,
                    })
                    .collect(),
                pending,
            })
        })
    }

    fn ack<'a>(&'a self, node: &'a str, ack: NodeAck) -> Fut<'a, Vec<String>> {
        Box::pin(async move {
            let now = self.now_ms();
            let mut ops = vec![WriteOp::Ack {
                queue: Q_NODE.into(),
                peer: node.to_string(),
                ids: ack.delivered,
                now_ms: now,
            }];
            for (id, code) in ack.rejected {
                ops.push(WriteOp::Ack {
                    queue: Q_NODE.into(),
                    peer: node.to_string(),
                    ids: vec![id.clone()],
                    now_ms: now,
                });
                ops.push(WriteOp::Reject {
                    queue: Q_NODE.into(),
                    peer: node.to_string(),
                    message_id: id,
                    reason: code,
                    now_ms: now,
                });
            }
            let out = self.store.write(ops).await?;
            Ok(out
                .into_iter()
                .filter_map(|o| match o {
                    OpOutcome::Acked(a) => Some(a),
                    _ => None,
                })
                .flatten()
                .filter(|a| a.was_stored)
                .map(|a| a.message_id)
                .collect())
        })
    }

    fn inbox_put(&self, m: InboxMessage) -> Fut<'_, Queued> {
        Box::pin(async move {
            let msg = NewMessage {
                queue: Q_INBOX.into(),
                peer: m.from_node,
                message_id: m.message_id,
                payload_type: m.payload_type,
                priority: m.priority,
                created_at_ms: m.created_at_ms,
                expires_at_ms: m.expires_at_ms,
                body: m.record,
                max_attempts: Some(0),
                dedup_until_ms: Some(m.remember_until_ms),
            };
            self.enqueue(msg, Vec::new()).await
        })
    }

    fn inbox_list<'a>(&'a self, from: Option<&'a str>, limit: usize) -> Fut<'a, Vec<Vec<u8>>> {
        Box::pin(async move {
            let page = self.store.list(Q_INBOX, from, None, limit)?;
            Ok(page.items.into_iter().map(|m| m.body).collect())
        })
    }

    fn inbox_ack<'a>(&'a self, message_id: &'a str) -> Fut<'a, Option<bool>> {
        Box::pin(async move {
            let Some(st) = self
                .store
                .status(message_id)?
                .filter(|s| s.queue == Q_INBOX)
            else {
                return Ok(None);
            };
            let out = self
                .store
                .ack(
                    Q_INBOX,
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

    fn queue_stats(&self) -> Fut<'_, Vec<QueueStat>> {
        Box::pin(async move { Ok(self.store.queue_stats(self.now_ms())?) })
    }

    fn sweep_expired(&self) -> Fut<'_, Vec<ExpiredMessage>> {
        Box::pin(async move { Ok(self.store.sweep_expired(self.now_ms()).await?) })
    }

    fn revoke<'a>(&'a self, jti: &'a str) -> Fut<'a, Revoked> {
        Box::pin(async move {
            let _one_at_a_time = self.revoking.lock().await;
            let rows = self.revocation_rows()?;
            if rows.iter().any(|(_, j)| j == jti) {
                return Ok(Revoked::Duplicate);
            }
            let version = rows.iter().map(|(v, _)| *v).max().unwrap_or(0) + 1;
            self.store
                .kv_put(KV_REVOCATIONS, &index_key(version), jti.as_bytes().to_vec())
                .await?;
            Ok(Revoked::Added { version })
        })
    }

    fn revocations(&self, since: u64) -> Fut<'_, RevocationList> {
        Box::pin(async move {
            let mut list = RevocationList::default();
            for (v, jti) in self.revocation_rows()? {
                list.version = list.version.max(v);
                if v > since {
                    list.revoked.push(jti);
                }
            }
            Ok(list)
        })
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
            let mut ops: Vec<WriteOp> = ext
                .entries
                .into_iter()
                .enumerate()
                .map(|(i, e)| WriteOp::KvPut {
                    ns: ns.clone(),
                    key: index_key(ext.start + i as u64),
                    value: e,
                })
                .collect();
            ops.push(WriteOp::KvPut {
                ns: ns_audit_checkpoints(node),
                key: index_key(ext.checkpoint_size),
                value: ext.checkpoint.into_bytes(),
            });
            self.store.write(ops).await?;
            Ok(())
        })
    }

    fn load_trust(&self) -> Result<TrustStore, StateError> {
        crate::daemon::trust::load(&self.store)
            .map_err(|e| StateError::Corrupt(format!("trust store: {e}")))
    }

    fn durable(&self) -> bool {
        !self.store.sync_failed()
    }

    fn close(&self) -> Fut<'_, ()> {
        Box::pin(async move {
            let store = self.store.clone();
            tokio::task::spawn_blocking(move || store.close())
                .await
                .map_err(|e| StateError::Unavailable(format!("close: {e}")))
        })
    }
}
