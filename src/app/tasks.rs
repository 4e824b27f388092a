//! The task worker: runs `TASK_REQUEST`s from the `tasks` queue as local tool calls
//! (token inside the payload), seals the `TASK_RESULT` to the requester into the
//! outbox, then acks the task. A crash between the two re-runs the task on restart,
//! and `job_id` idempotency answers it from the stored result without running the
//! tool again.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::calls::ToolCallRequest;
use super::core::NodeCore;
use super::error::NodeError;
use super::inbound::Q_TASKS;
use super::outbox::{task_result_err, task_result_ok};
use crate::sync::wire::{InboxRecord, TaskRequest};

pub async fn worker(core: Arc<NodeCore>, shutdown: CancellationToken) {
    loop {
        let did = run_ready_tasks(&core, &shutdown).await;
        if shutdown.is_cancelled() {
            return;
        }
        if did == 0 {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = core.inbound.tasks_waiting().notified() => {}
                // Retry tasks whose result could not be queued (disk or outbox full).
                _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            }
        }
    }
}

/// Run the tasks that are due; how many were finished (their result queued, or
/// dropped as undeliverable). A task whose result could not be queued yet is not
/// counted: the worker then waits for new work or its 5 s tick instead of running the
/// same task again at once, in a loop, for as long as the outbox or disk stays full.
async fn run_ready_tasks(core: &NodeCore, shutdown: &CancellationToken) -> usize {
    let now = core.now_ms();
    let store = &core.base().store;
    let peers = match store.peers(Q_TASKS) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(event = "task_scan_failed", error = %e);
            return 0;
        }
    };
    let mut done = 0;
    for peer in peers {
        let batch = match store.next_batch(Q_TASKS, &peer, 16, now) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(event = "task_scan_failed", error = %e);
                continue;
            }
        };
        for m in batch {
            if shutdown.is_cancelled() {
                return done;
            }
            if run_one(core, &peer, &m.message_id, &m.body).await {
                done += 1;
            }
        }
    }
    done
}

/// Run one task; false when it stays queued for a later pass.
async fn run_one(core: &NodeCore, requester: &str, message_id: &str, body: &[u8]) -> bool {
    // An unreadable record (storage damage) is answered like an unreadable request:
    // with an error result, so the requester is not left waiting.
    let payload = match InboxRecord::from_bytes(body) {
        Ok(r) => r.payload,
        Err(e) => {
            tracing::error!(event = "task_record_unreadable", message_id, error = %e);
            Value::Null
        }
    };
    let req = serde_json::from_value::<TaskRequest>(payload.clone()).map(|t| ToolCallRequest {
        job_id: t.job_id,
        tool_name: t.tool_name,
        tool_args: t.tool_args,
        token: t.token,
    });
    // The request's job id, or the message id: also names the error result of a
    // request that did not parse.
    let job_id = payload
        .get("job_id")
        .and_then(|j| j.as_str())
        .unwrap_or(message_id)
        .to_string();
    let result = match req {
        Ok(mut r) => {
            r.job_id.get_or_insert_with(|| job_id.clone());
            match core.calls.tool_call(r, requester).await {
                Ok(done) => task_result_ok(&job_id, message_id, done),
                Err(NodeError::NotReady(_)) => return false, // shutting down: leave it queued
                Err(e) => task_result_err(&job_id, message_id, &e),
            }
        }
        Err(e) => task_result_err(
            &job_id,
            message_id,
            &NodeError::bad_request(format!("TASK_REQUEST payload: {e}")),
        ),
    };
    match core.outbox.queue_task_result(requester, result).await {
        Ok(_) => {
            ack_task(core, requester, message_id).await;
            true
        }
        Err(e) if e.is_transient() => {
            // Outbox full, disk full, shutting down: keep the task; it is retried on the
            // next pass and answered from the stored result.
            tracing::warn!(
                event = "task_result_not_queued",
                message_id,
                code = e.code()
            );
            false
        }
        Err(e) => {
            // The result can never be sealed (e.g. the requester is not in the trust
            // store): retrying would loop forever. Drop the task, loudly and audited.
            tracing::error!(event = "task_result_undeliverable", message_id, requester, code = e.code(), reason = %e.public_message());
            core.recorder
                .audit_event(
                    crate::audit::AuditEvent::DeadLetter,
                    crate::audit::AuditOutcome::Dead,
                    message_id,
                    Some(requester),
                    Some(e.code()),
                )
                .await;
            ack_task(core, requester, message_id).await;
            true
        }
    }
}

/// Remove a finished (or undeliverable) task. A failed ack only means the task runs
/// again, and `job_id` idempotency answers it from the stored result.
async fn ack_task(core: &NodeCore, requester: &str, message_id: &str) {
    let ids = vec![message_id.to_string()];
    if let Err(e) = core
        .base()
        .store
        .ack(Q_TASKS, requester, ids, core.now_ms())
        .await
    {
        tracing::warn!(event = "task_ack_failed", message_id, error = %e);
    }
}
