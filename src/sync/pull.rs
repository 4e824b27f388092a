//! The worker's pull: the batch's answer (prefetched, or asked for with a long-poll),
//! the batch handed to the node, and its ack — which, mid-backlog, travels while the
//! next batch is opened. Returns the event the machine gets next.

use std::time::Duration;

use serde_json::value::RawValue;

use super::machine::Event;
use super::transport::SyncError;
use super::wire::{AckAnswer, AckRejected, AckRequest, PullAnswer};
use super::worker::{drop_prefetch, query_escape, Worker};
use super::InboundOutcome;

/// What the node made of a pulled batch, in the order it was pulled.
struct Taken {
    /// Stored (or already held): acknowledged to the gateway.
    ack: Vec<String>,
    /// Refused for good, with the reason the gateway hears.
    rejected: Vec<AckRejected>,
    /// The node could not store one; it and the rest stay queued upstream.
    stalled: bool,
}

impl Worker {
    /// The pull's answer: the prefetched one when there is one, else a request (a
    /// long-poll when `wait_s` > 0, which a wake-up ends early). `Err` carries the event
    /// that ended the wait instead.
    async fn fetch(
        &mut self,
        wait_s: u64,
        max: u32,
    ) -> Result<Result<PullAnswer, SyncError>, Event> {
        Ok(match self.prefetch.take() {
            // Asked for while the previous batch was stored (see below).
            Some(next) => tokio::select! {
                r = next => r.unwrap_or_else(|e| Err(SyncError::Setup(format!("prefetched pull: {e}")))),
                _ = self.shutdown.cancelled() => return Err(Event::Shutdown),
            },
            None => {
                let pq = format!(
                    "{}?wait_s={wait_s}&max={max}&desired={}",
                    self.t.node_path("pull"),
                    self.deps.node.state_versions().desired
                );
                let call = self
                    .t
                    .get::<PullAnswer>(&pq, self.now(), Duration::from_secs(wait_s));
                if wait_s > 0 {
                    tokio::select! {
                        r = call => r,
                        _ = self.shared.wake.notified() => return Err(Event::Woken),
                        _ = self.shared.report_wake.notified() => return Err(Event::StateWritten),
                        _ = self.shutdown.cancelled() => return Err(Event::Shutdown),
                    }
                } else {
                    tokio::select! {
                        r = call => r,
                        _ = self.shutdown.cancelled() => return Err(Event::Shutdown),
                    }
                }
            }
        })
    }

    /// One pull: fetch a batch, hand it to the node, acknowledge what it took.
    pub(super) async fn pull(&mut self, wait_s: u64, max: u32) -> Event {
        let resp = match self.fetch(wait_s, max).await {
            Ok(r) => r,
            Err(ev) => return ev,
        };
        let mut answer = match resp {
            Ok(a) => a,
            Err(e) => return self.fail(&e),
        };
        if let Some(rot) = answer.gateway_rotation.take() {
            // Before the batch: its envelopes may be signed with the new key.
            self.deps.node.gateway_rotated(rot).await;
        }
        // A full batch of a longer backlog: ask for the next one now, after this batch's
        // last message, so the gateway reads and sends it while this one is opened,
        // stored and acknowledged. Only this batch's outcome decides whether it is used:
        // a stall or a failed ack drops it, and the next pull starts at the head.
        let full = answer.envelopes.len() >= max as usize;
        if wait_s == 0 && full && answer.pending_count > answer.envelopes.len() as u64 {
            self.prefetch_after(&answer, max);
        }
        let Taken {
            ack,
            rejected,
            stalled,
        } = self.take(answer.envelopes).await;
        let received = (ack.len() + rejected.len()) as u64;
        // The previous batch's ack, if it is still on its way: its failure is this
        // pull's (nothing is lost: what it acked is stored here; the gateway resends
        // it and the node answers duplicate).
        if let Err(e) = self.settle_ack().await {
            drop_prefetch(&mut self.prefetch);
            return self.fail(&e);
        }
        if received > 0 {
            if let Err(e) = self.ack(ack, rejected, received).await {
                return self.fail(&e);
            }
        }
        Event::Pulled {
            pending_count: answer.pending_count,
            received,
            stalled,
        }
    }

    /// Hands a pulled batch to the node's receive pipeline and sorts its outcomes; a
    /// message the node could not store ends the batch (and drops the prefetch). A new
    /// desired version among them makes the next state report due (PROTOCOL §16.5).
    async fn take(&mut self, envelopes: Vec<Box<RawValue>>) -> Taken {
        let mut ack = Vec::new();
        let mut rejected = Vec::new();
        // The id is the envelope's business; the pipeline refuses one without it.
        let ids: Vec<String> = envelopes.iter().map(|e| message_id(e)).collect();
        let bytes = envelopes
            .into_iter()
            .map(|e| String::from(Box::<str>::from(e)).into_bytes())
            .collect();
        let desired_before = self.deps.node.state_versions().desired;
        let outcomes = self.deps.node.receive_batch(bytes).await;
        if self.deps.node.state_versions().desired != desired_before {
            // A new desired version: the gateway hears that the node holds it with the
            // next report, which this wake-up makes due (PROTOCOL §16.5).
            self.shared.report_wake.notify_one();
        }
        let mut stalled = false;
        for (id, outcome) in ids.into_iter().zip(outcomes) {
            match outcome {
                InboundOutcome::Accepted | InboundOutcome::Duplicate => ack.push(id),
                InboundOutcome::Rejected { code } => {
                    tracing::warn!(event = "pulled_envelope_rejected", message_id = %id, code = %code);
                    rejected.push(AckRejected { code, id });
                }
                // Nothing after it was stored: leave it and the rest queued upstream.
                InboundOutcome::Retry => {
                    stalled = true;
                    drop_prefetch(&mut self.prefetch);
                    break;
                }
            }
        }
        Taken {
            ack,
            rejected,
            stalled,
        }
    }

    /// Acknowledges the `received` messages of a batch (and counts them pulled once
    /// the gateway answers): mid-backlog the ack travels while the next batch is
    /// opened and its failure is the next pull's; otherwise it is awaited here.
    async fn ack(
        &mut self,
        ack: Vec<String>,
        rejected: Vec<AckRejected>,
        received: u64,
    ) -> Result<(), SyncError> {
        let body = AckRequest {
            message_ids: ack,
            rejected,
        };
        let pq = self.t.node_path("ack");
        let (t, now, shared) = (self.t.clone(), self.now(), self.shared.clone());
        let send = async move {
            t.post::<_, AckAnswer>(&pq, &body, now).await?;
            shared
                .status
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pulled += received;
            Ok(())
        };
        if self.prefetch.is_some() {
            // Mid-backlog: the ack travels while the next batch is opened.
            self.acking = Some(tokio::spawn(send));
            Ok(())
        } else {
            send.await
        }
    }

    /// Ask for the batch after `answer`'s last message now (PROTOCOL §12.1 `after`).
    fn prefetch_after(&mut self, answer: &PullAnswer, max: u32) {
        let last = answer.envelopes.last().map(|e| message_id(e));
        if let Some(last) = last.filter(|id| !id.is_empty()) {
            let pq = format!(
                "{}?wait_s=0&max={max}&after={}&desired={}",
                self.t.node_path("pull"),
                query_escape(&last),
                self.deps.node.state_versions().desired
            );
            let (t, now) = (self.t.clone(), self.now());
            self.prefetch = Some(tokio::spawn(async move {
                t.get::<PullAnswer>(&pq, now, Duration::ZERO).await
            }));
        }
    }

    /// Wait for the ack on its way, if any.
    pub(super) async fn settle_ack(&mut self) -> Result<(), SyncError> {
        match self.acking.take() {
            Some(h) => h
                .await
                .unwrap_or_else(|e| Err(SyncError::Setup(format!("ack: {e}")))),
            None => Ok(()),
        }
    }
}

/// The `message_id` of a pulled envelope; empty when it has none.
fn message_id(envelope: &RawValue) -> String {
    super::wire::raw_message_id(envelope).unwrap_or_default()
}
