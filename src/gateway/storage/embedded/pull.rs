//! The embedded state's pull: the next batch for a node, after its previous one when
//! the node pipelines (`Take::after`), cut to the batch's byte budget; and which
//! refusals in the node's ack are its own to make.

use super::{Delivery, PullBatch, StateError, Take};
use super::{Embedded, Q_TO_NODE};
use crate::store::{MessageState, StoredMessage};

impl Embedded {
    /// The refusals of an ack that name a message queued for `node`. The store records a
    /// refusal of any id (a node refusing what it never stored), but a node's refusal of
    /// an id it was never sent must change nothing: neither another node's message nor
    /// an id no one has queued yet.
    pub(super) fn queued_for_node<'r>(
        &self,
        node: &str,
        rejected: &'r [(String, String)],
    ) -> Result<Vec<(&'r str, &'r str)>, StateError> {
        let mut out = Vec::new();
        for (id, code) in rejected {
            let queued = self.store.status(id)?.is_some_and(|s| {
                s.queue == Q_TO_NODE
                    && s.peer == node
                    && matches!(s.state, MessageState::Queued | MessageState::Delivering)
            });
            if queued {
                out.push((id.as_str(), code.as_str()));
            }
        }
        Ok(out)
    }

    /// The next batch for `node` now (no waiting): empty and `superseded` when a newer
    /// pull of the node began; otherwise cut to the byte budget, remembered as handed
    /// out, and marked delivering.
    pub(super) async fn take_batch_now(
        &self,
        node: &str,
        take: Take<'_>,
    ) -> Result<PullBatch, StateError> {
        let Take {
            pull,
            max,
            max_bytes,
            after,
        } = take;
        let newest = self
            .pulls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(node)
            .copied()
            .unwrap_or(0);
        if pull < newest {
            return Ok(PullBatch {
                superseded: true,
                ..PullBatch::default()
            });
        }
        let from = self.resume_after(node, after);
        let mut batch = self.store.next_batch_after(
            Q_TO_NODE,
            node,
            from.as_ref(),
            max,
            self.store.now_ms(),
        )?;
        let mut bytes = 0usize;
        let fits = batch
            .iter()
            .position(|m| {
                bytes += m.body.len();
                bytes > max_bytes
            })
            .unwrap_or(batch.len())
            .max(1);
        batch.truncate(fits);
        let pending = self.store.pending(Q_TO_NODE, node)? as u64;
        if let Some(last) = batch.last() {
            self.note_handed_out(node, last);
        }
        if !batch.is_empty() {
            let ids = batch.iter().map(|m| m.message_id.clone()).collect();
            self.store.mark_delivering(Q_TO_NODE, node, ids).await?;
        }
        Ok(PullBatch {
            deliveries: batch
                .into_iter()
                .map(|m| Delivery {
                    message_id: m.message_id,
                    envelope: m.body,
                })
                .collect(),
            pending,
            superseded: false,
        })
    }

    /// Where a pull continues: after the node's previous batch only when `after` is the
    /// last message handed out to it; anything else starts at the head (what is not
    /// acknowledged is handed out again, and the node deduplicates).
    fn resume_after(&self, node: &str, after: Option<&str>) -> Option<StoredMessage> {
        after.and_then(|id| {
            self.handed_out
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(node)
                .filter(|m| m.message_id == id)
                .cloned()
        })
    }

    /// Remembers `last` (without its body) as the last message handed out to `node`.
    fn note_handed_out(&self, node: &str, last: &StoredMessage) {
        self.handed_out
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                node.to_string(),
                StoredMessage {
                    body: Vec::new(),
                    ..last.clone()
                },
            );
    }
}
