//! The tool-call flow shared by `POST /v1/tool_call` and inbound `TASK_REQUEST`s:
//! refuse early (shutdown, token, unknown tool) → idempotency by `job_id` → run →
//! audit entry and stored result in one durable batch → answer with evidence.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use std::sync::Arc;

use super::auth::Authorizer;
use super::base::Base;
use super::error::NodeError;
use super::recorder::Recorder;
use crate::audit::AuditOutcome;
use crate::telemetry::ToolCallFinished;
use crate::tools::Registry;

/// Results are kept at least this long for `job_id` idempotency (PROTOCOL §7a).
pub const RESULT_KEEP_MS: u64 = 25 * 3600 * 1000;

/// What a caller asks to run: from the local API or a `TASK_REQUEST`.
#[derive(Debug)]
pub struct ToolCallRequest {
    pub job_id: Option<String>,
    pub tool_name: String,
    pub tool_args: Value,
    pub token: Option<String>,
}

/// Where a call's audit entry is: its index in the log and its leaf hash (hex).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Evidence {
    pub audit_index: u64,
    pub audit_leaf_hash: String,
}

/// A call that ran: the tool's result and the evidence of its audit entry. A repeat of
/// its job id is answered with this, as it was kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct ToolCallDone {
    pub job_id: String,
    pub tool_name: String,
    pub result: Value,
    pub evidence: Evidence,
}

pub use crate::audit::sha256_hex;

/// A stored result with what it is bound to: a repeat of the `job_id` is answered from
/// it only by the same caller (token subject), for the same tool and the same arguments.
#[derive(Debug, Serialize, Deserialize)]
pub struct StoredResult {
    pub subject: String,
    pub tool_name: String,
    pub args_sha256: String,
    /// Named `body` on disk: results kept by earlier versions hold the HTTP answer
    /// there, which reads as the same fields plus `ok: true`.
    #[serde(rename = "body")]
    pub done: ToolCallDone,
}

/// How a repeat of a stored job compares with the stored one.
#[derive(Debug, PartialEq, Eq)]
pub enum Repeat {
    /// Same caller, tool and arguments: answer the stored result.
    Same,
    /// Same caller and job id, but another tool or other arguments: refuse.
    Conflict,
}

impl StoredResult {
    pub fn compare(&self, subject: &str, tool_name: &str, args_sha256: &str) -> Repeat {
        if self.subject == subject && self.tool_name == tool_name && self.args_sha256 == args_sha256
        {
            Repeat::Same
        } else {
            Repeat::Conflict
        }
    }
}

/// The store key of a caller's job: job ids are scoped per token subject, so two callers'
/// ids never collide (the subject is hashed to keep the key short and free of separators).
pub fn result_key(subject: &str, job_id: &str) -> String {
    format!("{}/{job_id}", sha256_hex(subject.as_bytes()))
}

pub use crate::tools::valid_job_id;

/// The tool-call flow: token, idempotency, run, audit + result.
pub struct ToolCalls {
    base: Arc<Base>,
    auth: Arc<Authorizer>,
    recorder: Arc<Recorder>,
    tools: Registry,
    /// One lock per caller's job, so concurrent repeats run the tool once.
    job_locks: crate::keyed_lock::KeyedLocks,
}

impl ToolCalls {
    pub(super) fn new(
        base: Arc<Base>,
        auth: Arc<Authorizer>,
        recorder: Arc<Recorder>,
        tools: Registry,
    ) -> Self {
        Self {
            base,
            auth,
            recorder,
            tools,
            job_locks: crate::keyed_lock::KeyedLocks::new(),
        }
    }

    /// The tools this node runs.
    pub fn tools(&self) -> &Registry {
        &self.tools
    }

    /// Run a tool call end to end. `actor` names who asked (for the audit log): the
    /// token's subject, or the envelope's sender for `TASK_REQUEST`s.
    pub async fn tool_call(
        &self,
        req: ToolCallRequest,
        via: &str,
    ) -> Result<ToolCallDone, NodeError> {
        self.well_formed(&req)?;
        let job = self.job(req.job_id.as_deref(), &req.tool_name, &req.tool_args);

        // 1. Capability: no tool runs without a valid token.
        let actor = self.authorize(&req, &job, via).await?;

        // 2. Known tool?
        if self.tools.spec(&req.tool_name).is_none() {
            self.note(&job, &actor, AuditOutcome::Refused, "unknown_tool")
                .await;
            return Err(NodeError::UnknownTool(req.tool_name.clone()));
        }

        // 3. Idempotency: one run per (caller, job id), even under concurrent repeats.
        let key = result_key(&actor, &job.id);
        let _held = match job.minted {
            false => Some(self.job_locks.lock(&key).await),
            true => None,
        };
        if !job.minted {
            if let Some(answer) = self.stored_answer(&job, &actor, &key).await? {
                return Ok(answer);
            }
        }

        // 4. Room: refused before it runs if what it would write cannot be kept.
        if let Err(e) = self.room_for_call(!job.minted) {
            self.note(&job, &actor, AuditOutcome::Refused, "storage_full")
                .await;
            return Err(e);
        }

        // 5. Run, then audit (and keep the result) in one durable batch.
        let started = tokio::time::Instant::now();
        let outcome = self.tools.call(&req.tool_name, req.tool_args).await;
        let elapsed: Duration = started.elapsed();
        match outcome {
            Ok(result) => self.record(&job, &actor, &key, result, elapsed).await,
            Err(err) => {
                let audit_outcome = err.audit_outcome();
                self.note(&job, &actor, audit_outcome, err.code()).await;
                self.finished(&job, audit_outcome.as_str(), Some(elapsed));
                Err(NodeError::Tool(err))
            }
        }
    }

    /// Refuses a call before anything is noted: while shutting down, or with a tool
    /// name or job id no call can have.
    fn well_formed(&self, req: &ToolCallRequest) -> Result<(), NodeError> {
        if !self.base.life.accepting() {
            return Err(NodeError::NotReady("shutting down; the call was not run"));
        }
        if req.tool_name.is_empty() || req.tool_name.len() > 64 {
            return Err(NodeError::bad_request("tool_name must be 1..64 characters"));
        }
        if let Some(j) = &req.job_id {
            if !valid_job_id(j) {
                return Err(NodeError::bad_request(
                    "job_id must be 1..128 characters of [A-Za-z0-9._:-]",
                ));
            }
        }
        Ok(())
    }

    /// The call as the flow tracks it: its job id (the caller's, or minted here), the
    /// hash of its arguments, and its metric label.
    fn job<'r>(&self, job_id: Option<&str>, tool: &'r str, args: &Value) -> Job<'r> {
        Job {
            // A job id we mint ourselves is new by construction: no stored result to
            // find and nobody else to race with, so idempotency bookkeeping is skipped.
            minted: job_id.is_none(),
            id: job_id.map_or_else(|| uuid::Uuid::now_v7().to_string(), str::to_string),
            tool,
            args_sha: sha256_hex(&serde_json::to_vec(args).unwrap_or_default()),
            // Metric label: only configured tools get a series of their own, so a
            // caller cannot mint series by sending random names.
            label: match self.tools.spec(tool) {
                Some(_) => tool,
                None => "unknown",
            },
        }
    }

    /// The caller the token names (its subject, else its issuer); a refused token is
    /// noted as `via` with the reason, counted, and answered with its error.
    async fn authorize(
        &self,
        req: &ToolCallRequest,
        job: &Job<'_>,
        via: &str,
    ) -> Result<String, NodeError> {
        let claims = match self
            .auth
            .authorize_tool(req.token.as_deref(), &req.tool_name)
        {
            Ok(c) => c,
            Err(e) => {
                let detail = match &e {
                    _ if req.token.is_none() => "missing_token",
                    NodeError::Denied { reason, .. } => reason.as_str(),
                    other => other.code(),
                };
                self.note(job, via, AuditOutcome::Refused, detail).await;
                self.finished(job, "refused", None);
                return Err(e);
            }
        };
        Ok(if claims.sub.is_empty() {
            claims.iss
        } else {
            claims.sub
        })
    }

    /// The stored answer to a repeat of this caller's job: the result of the same call,
    /// or `job_id_conflict` for another tool or other arguments; `None` for a new job.
    async fn stored_answer(
        &self,
        job: &Job<'_>,
        actor: &str,
        key: &str,
    ) -> Result<Option<ToolCallDone>, NodeError> {
        let stored = self.base.store.result_get(key).map_err(NodeError::Store)?;
        let Some(stored) = stored.and_then(|b| serde_json::from_slice::<StoredResult>(&b).ok())
        else {
            return Ok(None);
        };
        if stored.compare(actor, job.tool, &job.args_sha) == Repeat::Same {
            return Ok(Some(stored.done));
        }
        self.note(job, actor, AuditOutcome::Refused, "job_id_conflict")
            .await;
        Err(NodeError::JobConflict(format!(
            "job_id {:?} was already used by this caller for another tool or other \
             arguments; nothing was run",
            job.id
        )))
    }

    /// A successful run: its audit entry and (unless the job id was minted) its result,
    /// one durable batch; the answer carries the entry's evidence.
    async fn record(
        &self,
        job: &Job<'_>,
        actor: &str,
        key: &str,
        result: Value,
        elapsed: Duration,
    ) -> Result<ToolCallDone, NodeError> {
        let result_bytes = serde_json::to_vec(&result).unwrap_or_default();
        if let Err(e) = self.result_fits(result_bytes.len()) {
            self.note(job, actor, AuditOutcome::Failed, e.code()).await;
            self.finished(job, "failed", Some(elapsed));
            return Err(e);
        }
        let result_sha = sha256_hex(&result_bytes);
        // A job id we minted cannot be repeated by anyone (the caller learns it from
        // this answer): its result is not kept.
        let keep = (!job.minted).then_some(key);
        let done = ToolCallDone {
            job_id: job.id.clone(),
            tool_name: job.tool.to_string(),
            result,
            evidence: Evidence::default(),
        };
        let done = self
            .recorder
            .record_tool_success(keep, actor, &job.args_sha, &result_sha, done)
            .await?;
        self.finished(job, "ok", Some(elapsed));
        Ok(done)
    }

    /// The call's audit entry for an outcome other than success (within the refusal
    /// budget for refusals).
    async fn note(&self, job: &Job<'_>, actor: &str, outcome: AuditOutcome, detail: &str) {
        self.recorder
            .audit_call_outcome(&job.id, job.tool, actor, &job.args_sha, outcome, detail)
            .await;
    }

    /// The call's metric and log line.
    fn finished(&self, job: &Job<'_>, outcome: &str, duration: Option<Duration>) {
        ToolCallFinished {
            tool: job.label,
            outcome,
            job_id: &job.id,
            duration,
        }
        .emit(&self.base.metrics);
    }
}

/// One call as the flow keeps track of it.
struct Job<'a> {
    /// The job id was made here (the caller gave none).
    minted: bool,
    id: String,
    tool: &'a str,
    args_sha: String,
    /// The metric's `tool` label.
    label: &'a str,
}

impl ToolCalls {
    /// Whether a call may run now: the disk keeps `queue.reserve_free_bytes` free for
    /// inbound envelopes and the audit log, and (when its result is to be kept) the
    /// results' budget has room for one more of the largest.
    fn room_for_call(&self, keeps_result: bool) -> Result<(), NodeError> {
        let q = &self.base.cfg.queue;
        let store = &self.base.store;
        if let Some(free) = store.free_bytes() {
            if free < q.reserve_free_bytes {
                return Err(NodeError::NoRoom(format!(
                    "the data directory's disk has {free} bytes free, below \
                     queue.reserve_free_bytes ({}), which are kept for inbound envelopes \
                     and the audit log; nothing was run",
                    q.reserve_free_bytes
                )));
            }
        }
        if keeps_result {
            let held = store.result_bytes().map_err(NodeError::Store)?;
            if held.saturating_add(q.max_result_bytes) > q.max_result_store_bytes {
                return Err(NodeError::NoRoom(format!(
                    "stored tool results take {held} bytes of queue.max_result_store_bytes \
                     ({}); retry once older results expire (or call without job_id: its \
                     result is not kept); nothing was run",
                    q.max_result_store_bytes
                )));
            }
        }
        Ok(())
    }

    /// A result (`len` bytes of JSON) the node may keep and answer.
    fn result_fits(&self, len: usize) -> Result<(), NodeError> {
        let max = self.base.cfg.queue.max_result_bytes;
        if len as u64 > max {
            return Err(NodeError::ResultTooLarge {
                size: len as u64,
                max,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result kept by an earlier version holds the HTTP answer (with `ok`) under
    /// `body`: it still answers a repeat, and what this version keeps reads back as is.
    #[test]
    fn kept_results_read_in_both_layouts() {
        let earlier = br#"{"subject":"ops","tool_name":"echo","args_sha256":"ab",
            "body":{"ok":true,"job_id":"j1","tool_name":"echo","result":{"x":1},
                    "evidence":{"audit_index":7,"audit_leaf_hash":"cd"}}}"#;
        let read: StoredResult = serde_json::from_slice(earlier).unwrap();
        let done = ToolCallDone {
            job_id: "j1".into(),
            tool_name: "echo".into(),
            result: serde_json::json!({"x": 1}),
            evidence: Evidence {
                audit_index: 7,
                audit_leaf_hash: "cd".into(),
            },
        };
        assert_eq!(read.done, done);
        assert_eq!(read.compare("ops", "echo", "ab"), Repeat::Same);
        let again: StoredResult =
            serde_json::from_slice(&serde_json::to_vec(&read).unwrap()).unwrap();
        assert_eq!(again.done, done);
    }
}
