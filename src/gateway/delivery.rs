//! Handing queued messages to their node: the long-poll pull, the ack that removes
//! them, and the revocation list nodes fetch.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;

use super::error::GatewayError;
use super::events::GatewayEvent;
use super::live::table::NodeWake;
use super::state::Gateway;
use super::storage::{NodeAck, PullBatch, RevocationList, Revoked, Take, QUEUE_TO_NODE};
use crate::telemetry::MessageEvent;

/// Upper bound of a long-poll, whatever the node asks for.
pub const MAX_WAIT_S: u64 = 60;
/// Most envelopes per pull, ids per ack, envelopes per upload.
pub const MAX_BATCH: usize = 1000;
/// Envelope bytes one pull answer carries at most (always at least one envelope): a
/// node asks for hundreds of envelopes, and messages may be up to 1 MiB each.
pub const PULL_BUDGET_BYTES: usize = 4 * 1024 * 1024;

/// Decrements the long-poll count however the pull ends. Dropped before it was
/// answered, the pull's connection closed (the HTTP edge drops a request's handler when
/// its client hangs up): the node went away, so it is not "between two polls" either.
struct PollGuard<'a> {
    gw: &'a Arc<Gateway>,
    node: &'a str,
    claimed_until_ms: Option<u64>,
    answered: bool,
}
impl Drop for PollGuard<'_> {
    fn drop(&mut self) {
        if self.answered {
            self.gw.poll_ended(self.node);
        } else {
            self.gw.poll_abandoned(self.node, self.claimed_until_ms);
        }
    }
}

/// A pull's answer: envelopes in queue order and how many were waiting.
pub struct Pulled {
    /// Each as it was stored (checked to be JSON, never re-parsed into a tree).
    pub envelopes: Vec<Box<RawValue>>,
    pub pending: u64,
}

impl Delivery<'_> {
    /// Up to `max` messages for `node`, waiting up to `wait` for the first (woken by the
    /// node's `Notify` when something is queued, or by shutdown).
    pub async fn pull(
        &self,
        node: &str,
        wait_s: Option<u64>,
        max: Option<usize>,
        after: Option<&str>,
        desired_held: Option<u64>,
    ) -> Result<Pulled, GatewayError> {
        let gw = self.0;
        let wait = Duration::from_secs(wait_s.unwrap_or(0).min(MAX_WAIT_S));
        let max = max
            .unwrap_or(gw.cfg.queue.flush_batch as usize)
            .clamp(1, MAX_BATCH);
        let mut guard = self.hold(node, wait).await;
        let deadline = tokio::time::Instant::now() + wait;
        let waker = gw.waker(node);
        // This pull supersedes the node's earlier ones (a long-poll it gave up on, here or
        // at another replica): they answer empty now (one that was mid-look may still
        // answer the connection the node gave up on; DECISIONS D11).
        let pull = gw.state.begin_pull(node).await?;
        gw.pull_begun(node, pull);
        let take = Take {
            pull,
            max,
            max_bytes: PULL_BUDGET_BYTES,
            after,
        };
        let (batch, desired) = self
            .look(node, take, desired_held, &waker, deadline)
            .await?;
        if let Some(g) = guard.as_mut() {
            g.answered = true;
        }
        Ok(answer(desired, batch))
    }

    /// Holds the node "on the line" for a pull that waits: a message queued while it is
    /// held goes out at once (`was_stored: false`). The handshake and flush pulls
    /// (`wait_s = 0`) answer immediately, and the node does its chores before it
    /// long-polls again, so counting them would call a message that then waits "live".
    async fn hold<'a>(&'a self, node: &'a str, wait: Duration) -> Option<PollGuard<'a>> {
        let gw = self.0;
        let mut guard = (!wait.is_zero()).then(|| {
            gw.poll_started(node);
            PollGuard {
                gw,
                node,
                claimed_until_ms: None,
                answered: false,
            }
        });
        if let Some(g) = guard.as_mut() {
            g.claimed_until_ms = gw.share_polling(node, wait.as_millis() as u64).await;
        }
        guard
    }

    /// Looks at the node's queue until there is something to answer — messages, a
    /// newer desired version than the node holds (which goes first, PROTOCOL §16.4),
    /// a newer pull of the node — or the deadline or shutdown comes.
    async fn look(
        &self,
        node: &str,
        take: Take<'_>,
        desired_held: Option<u64>,
        waker: &NodeWake,
        deadline: tokio::time::Instant,
    ) -> Result<(PullBatch, Option<Box<RawValue>>), GatewayError> {
        let gw = self.0;
        let superseded = || waker.newest_pull.load(Ordering::Acquire) > take.pull;
        let mut desired = None;
        let batch: PullBatch = 'pull: loop {
            let queued = waker.queued.notified();
            tokio::pin!(queued);
            // Registered before the look: a wake during it is not lost.
            queued.as_mut().enable();
            let batch = gw.state.take_batch(node, take).await?;
            if let (Some(held), false) = (desired_held, batch.superseded) {
                // Messages go out whatever happens to the desired state's read: the node
                // asks again with its next pull.
                desired = match gw.node_states().desired_for_pull(node, held).await {
                    Ok(d) => d,
                    Err(e) => {
                        tracing::warn!(event = "desired_state_unavailable", node, error = %e);
                        None
                    }
                };
            }
            if !batch.deliveries.is_empty()
                || desired.is_some()
                || batch.superseded
                || tokio::time::Instant::now() >= deadline
            {
                break batch;
            }
            // Wait for something queued. A newer pull of the node (announced here, or by
            // another replica through the store's notices) ends this one without another
            // look at the queue; our own pull's announcement is not a reason to look.
            loop {
                let pulled = waker.pulled.notified();
                tokio::pin!(pulled);
                pulled.as_mut().enable();
                if superseded() {
                    break 'pull PullBatch {
                        superseded: true,
                        ..PullBatch::default()
                    };
                }
                tokio::select! {
                    _ = &mut queued => continue 'pull,
                    _ = &mut pulled => {}
                    _ = tokio::time::sleep_until(deadline) => continue 'pull,
                    _ = gw.shutdown.cancelled() => break 'pull batch,
                }
            }
        };
        Ok((batch, desired))
    }
}

/// The pull's answer: the desired state first (counted as pending), then the batch's
/// envelopes; one stored unreadable is left out with a warning.
fn answer(desired: Option<Box<RawValue>>, batch: PullBatch) -> Pulled {
    let desired_count = u64::from(desired.is_some());
    let envelopes = desired
    .into_iter()
    .chain(batch
    .deliveries
    .into_iter()
    .filter_map(|d| {
        let text = String::from_utf8(d.envelope).map_err(|e| e.to_string());
        match text.and_then(|t| RawValue::from_string(t).map_err(|e| e.to_string())) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(event = "queued_envelope_unreadable", message_id = %d.message_id, error = %e);
                None
            }
        }
    }))
    .collect();
    Pulled {
        envelopes,
        pending: batch.pending + desired_count,
    }
}

impl Delivery<'_> {
    /// Remove what `node` acknowledged and emit `delivered` (with `was_stored`) — or
    /// `rejected` with the node's code — for each that was there. Returns those ids.
    pub async fn ack(&self, node: &str, ack: NodeAck) -> Result<Vec<String>, GatewayError> {
        let gw = self.0;
        check_ack(&ack)?;
        let rejected: Vec<(String, String)> = ack
            .rejected
            .into_iter()
            .map(|(id, code)| (id, code.chars().take(64).collect()))
            .collect();
        // The state commits each event with the removal it describes (a replica killed
        // after the commit must not lose them); one per id, however often the ack names it.
        let mut named = std::collections::HashSet::new();
        let events = ack
            .delivered
            .iter()
            .chain(rejected.iter().map(|(id, _)| id))
            .filter(|id| named.insert(id.as_str()))
            .map(|id| {
                (
                    id.clone(),
                    ack_event(&rejected, node, id, gw.was_stored(id)),
                )
            });
        let mut staged = gw
            .events
            .stage(gw.now_ms(), events)
            .map_err(|e| GatewayError::Internal(format!("event: {e}")))?;
        let removed = gw
            .state
            .ack(
                node,
                NodeAck {
                    delivered: ack.delivered.clone(),
                    rejected: rejected.clone(),
                    events: staged.take_rows(),
                },
            )
            .await?;
        self.removed(node, &removed, &rejected);
        gw.events.committed(staged);
        Ok(removed)
    }

    /// Counts and logs each removed message as `delivered` or `rejected`.
    fn removed(&self, node: &str, removed: &[String], rejected: &[(String, String)]) {
        let gw = self.0;
        for id in removed {
            gw.take_was_stored(id);
            let code = rejected.iter().find(|(r, _)| r == id).map(|(_, c)| c);
            MessageEvent {
                queue: QUEUE_TO_NODE,
                event: if code.is_some() {
                    "rejected"
                } else {
                    "delivered"
                },
                peer: node,
                message_id: id,
                reason: code.map(String::as_str),
            }
            .emit(&gw.metrics);
        }
    }
}

/// Refuses an ack of more than [`MAX_BATCH`] ids, or naming an id no message can have
/// (the store would refuse it as a bug: 500).
fn check_ack(ack: &NodeAck) -> Result<(), GatewayError> {
    if ack.delivered.len() + ack.rejected.len() > MAX_BATCH {
        return Err(GatewayError::BadRequest("at most 1000 ids per ack".into()));
    }
    let impossible = |id: &str| id.is_empty() || id.len() > 255 || id.contains('\0');
    let mut ids = ack
        .delivered
        .iter()
        .chain(ack.rejected.iter().map(|(id, _)| id));
    if ids.any(|id| impossible(id)) {
        return Err(GatewayError::BadRequest(
            "message ids are 1..=255 bytes without NUL".into(),
        ));
    }
    Ok(())
}

/// The event an acked message leaves: `rejected` with the node's code when the node
/// refused it, `delivered` otherwise.
fn ack_event(
    rejected: &[(String, String)],
    node: &str,
    id: &str,
    was_stored: bool,
) -> GatewayEvent {
    match rejected.iter().find(|(r, _)| r == id).map(|(_, c)| c) {
        Some(c) => GatewayEvent::Rejected {
            message_id: id.to_string(),
            node_id: node.to_string(),
            code: c.clone(),
        },
        None => GatewayEvent::Delivered {
            message_id: id.to_string(),
            node_id: node.to_string(),
            was_stored,
        },
    }
}

impl Delivery<'_> {
    /// Revoked token ids added after version `since`, and the current version.
    pub async fn revocations(&self, since: u64) -> Result<RevocationList, GatewayError> {
        let gw = self.0;
        Ok(gw.state.revocations(since).await?)
    }
}

impl Delivery<'_> {
    /// Revoke `jti` on behalf of token subject `by` — the one flow behind `POST
    /// /v1/revocations` and the console's revoke form; nodes fetch the list
    /// ([`revocations`]) and refuse the token offline from then on. Leaves a `revoked`
    /// event and an entry of the gateway's own audit log (by `by`) when it was added (a
    /// repeat changes nothing and says so).
    pub async fn revoke(&self, by: &str, jti: &str) -> Result<Revoked, GatewayError> {
        let gw = self.0;
        if jti.is_empty() || jti.len() > 128 {
            return Err(GatewayError::BadRequest(
                "jti must be 1..=128 characters".into(),
            ));
        }
        let entry = super::own_audit::token_revoked(by, jti);
        let r = gw.state.revoke(jti, &entry).await?;
        if let Revoked::Added { version } = r {
            tracing::info!(event = "token_revoked", jti = %jti, version, by = %by);
            gw.publish(GatewayEvent::Revoked {
                jti: jti.to_string(),
                version,
                by: by.to_string(),
            });
            super::own_audit::append_pending(gw).await;
            gw.events_committed().await;
        }
        Ok(r)
    }
}

/// What nodes take from the gateway: their queue on long-polls, acks, the revocation
/// list; and revoking a token.
pub struct Delivery<'g>(pub(super) &'g Arc<Gateway>);

impl Gateway {
    pub fn delivery(self: &Arc<Self>) -> Delivery<'_> {
        Delivery(self)
    }
}
