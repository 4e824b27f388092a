//! `POST /v1/nodes/{id}/upload`: envelopes a node sends upstream.
//!
//! Each envelope gets its own verdict, so one bad envelope never costs the others:
//! - addressed to the gateway, `TASK_RESULT` → stored as the result of the original
//!   request (found through its `request_id`), `result` event;
//! - addressed to the gateway, anything else → the gateway inbox;
//! - addressed to another enrolled node → forwarded unopened into that node's queue
//!   (the gateway cannot read it: it is sealed to the recipient).
//!
//! The envelopes for the gateway are opened on all cores and stored in one
//! transaction; if that fails (an expired inbox message, a full disk), they are stored
//! one by one as before, so each still gets its own verdict.

use std::sync::Arc;

use crate::envelope::TrustStore;

use serde_json::value::RawValue;
use serde_json::Value;

use super::error::GatewayError;
use super::events::GatewayEvent;
use super::state::Gateway;
use super::storage::{FiledResult, ForNode, InboxMessage, Queued, StateError, Upload, QUEUE_INBOX};
use crate::envelope::{
    check_relay, open_parsed, replay_keep_until_ms, Envelope, OpenContext, OpenError, Opened,
};
use crate::store::StoreError;
use crate::sync::wire::{raw_message_id, InboxRecord, TaskResult, UploadAnswer, UploadRejected};
use crate::telemetry::{EnvelopeReceived, MessageEvent};

enum Verdict {
    Accepted,
    Duplicate,
    Rejected(String),
}

/// An envelope for the gateway itself, ready to open.
struct ForMe {
    slot: usize,
    env: Envelope,
    seen: bool,
}

/// What to store for an opened envelope, and what to announce once it is stored.
struct Keep {
    slot: usize,
    item: Upload,
    /// `(request_id, job_id, ok)` of a result, for the `result` event.
    result: Option<(String, String, bool)>,
}

impl Uploads<'_> {
    /// Receive what `uploader` sent upstream. Fails as a whole only for the gateway's own
    /// trouble (storage), so the node keeps everything queued and retries.
    pub async fn upload(
        &self,
        uploader: &str,
        envelopes: Vec<Box<RawValue>>,
    ) -> Result<UploadAnswer, GatewayError> {
        let gw = self.0;
        if envelopes.len() > super::delivery::MAX_BATCH {
            return Err(GatewayError::BadRequest(
                "at most 1000 envelopes per upload".into(),
            ));
        }
        let ids: Vec<String> = envelopes
            .iter()
            .map(|v| {
                raw_message_id(v)
                    .map(|s| s.chars().take(100).collect::<String>())
                    .unwrap_or_default()
            })
            .collect();
        let mut verdicts: Vec<Option<Verdict>> = envelopes.iter().map(|_| None).collect();
        // 1. Checks that need no key; forwards go through at once (they are not opened).
        let mut mine = Vec::new();
        let parsed = triage(gw, uploader, &envelopes, &mut verdicts).await?;
        // Which were received before: one question for the whole upload.
        let ids_mine: Vec<String> = parsed.iter().map(|(_, e)| e.message_id.clone()).collect();
        let seen = gw.state.uploads_seen(&ids_mine).await?;
        for (slot, env) in parsed {
            let seen = seen.contains(&env.message_id);
            mine.push(ForMe { slot, env, seen });
        }
        // 2. Open (signature, expiry, replay, decrypt) on all cores.
        let opened = open_all(gw, sender_trust(gw, uploader), mine).await;
        // 3. What to keep.
        let keep = choose(gw, uploader, opened, &mut verdicts).await?;
        // 4. Store it: one transaction, or one by one if that fails.
        store_kept(gw, uploader, keep, &mut verdicts).await?;
        let answer = answer(gw, uploader, ids, verdicts);
        gw.events_committed().await;
        Ok(answer)
    }
}

/// Step 1 of [`upload`]: the checks that need no key. An envelope too large, unreadable
/// or not from `uploader` gets its verdict, one for another node is forwarded (its
/// verdict too); those for the gateway are returned parsed, with their slots.
async fn triage(
    gw: &Gateway,
    uploader: &str,
    envelopes: &[Box<RawValue>],
    verdicts: &mut [Option<Verdict>],
) -> Result<Vec<(usize, Envelope)>, GatewayError> {
    let mut parsed = Vec::new();
    for (slot, v) in envelopes.iter().enumerate() {
        // As the node stored it: parsed once, here, and never serialised again.
        let bytes = v.get().as_bytes().to_vec();
        if bytes.len() as u64 > gw.cfg.queue.max_message_bytes {
            verdicts[slot] = Some(Verdict::Rejected("payload_too_large".into()));
            continue;
        }
        let env = match Envelope::from_json(&bytes) {
            Ok(e) => e,
            Err(e) => {
                verdicts[slot] = Some(Verdict::Rejected(OpenError::from(e).code().into()));
                continue;
            }
        };
        if env.sender_node_id != crate::fleet::tenant::node_of(uploader) {
            verdicts[slot] = Some(Verdict::Rejected("forbidden".into()));
        } else if env.recipient_node_id != gw.cfg.node_id {
            verdicts[slot] = Some(forward(gw, uploader, env, bytes).await?);
        } else {
            parsed.push((slot, env));
        }
    }
    Ok(parsed)
}

/// Step 3 of [`upload`]: what to keep of the opened envelopes; the others get their
/// verdicts. The same envelope twice in one upload: the first is kept, the later ones
/// are duplicates (as if they had come one request after the other).
async fn choose(
    gw: &Gateway,
    uploader: &str,
    opened: Vec<(usize, Result<Opened, OpenError>)>,
    verdicts: &mut [Option<Verdict>],
) -> Result<Vec<Keep>, GatewayError> {
    let mut keep = Vec::new();
    let mut kept_ids = std::collections::HashSet::new();
    for (slot, r) in opened {
        match r {
            Err(OpenError::Duplicate) => verdicts[slot] = Some(Verdict::Duplicate),
            Err(e) => verdicts[slot] = Some(Verdict::Rejected(e.code().into())),
            Ok(o) if kept_ids.contains(&o.message_id) => verdicts[slot] = Some(Verdict::Duplicate),
            Ok(o) => match to_keep(gw, uploader, slot, o).await? {
                Ok(k) => {
                    kept_ids.insert(match &k.item {
                        Upload::Result(r) => r.result_message_id.clone(),
                        Upload::Inbox(m) => m.message_id.clone(),
                    });
                    keep.push(k)
                }
                Err(code) => verdicts[slot] = Some(Verdict::Rejected(code)),
            },
        }
    }
    Ok(keep)
}

/// Step 4 of [`upload`]: store what is kept (one transaction, or one by one if that
/// fails) and give each its verdict; a stored result is announced (`result` event).
async fn store_kept(
    gw: &Arc<Gateway>,
    uploader: &str,
    keep: Vec<Keep>,
    verdicts: &mut [Option<Verdict>],
) -> Result<(), GatewayError> {
    let items: Vec<Upload> = keep.iter().map(|k| k.item.clone()).collect();
    let outcomes = match gw.state.receive_uploads(items).await {
        Ok(o) => o.into_iter().map(Ok).collect(),
        Err(_) => {
            let mut each = Vec::new();
            for k in &keep {
                each.push(store_one(gw, k.item.clone()).await?);
            }
            each
        }
    };
    for (k, outcome) in keep.into_iter().zip(outcomes) {
        verdicts[k.slot] = Some(match outcome {
            Ok(Queued::Duplicate) => Verdict::Duplicate,
            Ok(Queued::Queued) => {
                if let Upload::Inbox(m) = &k.item {
                    MessageEvent {
                        queue: QUEUE_INBOX,
                        event: "enqueued",
                        peer: &m.from_node,
                        message_id: &m.message_id,
                        reason: None,
                    }
                    .emit(&gw.metrics);
                }
                if let Some((request_id, job_id, ok)) = k.result {
                    tracing::info!(event = "task_result", node_id = uploader, message_id = %request_id, job_id = %job_id, ok);
                    gw.publish(GatewayEvent::Result {
                        message_id: request_id,
                        job_id,
                        node_id: uploader.to_string(),
                        ok,
                    });
                }
                Verdict::Accepted
            }
            Err(code) => Verdict::Rejected(code),
        });
    }
    Ok(())
}

/// The upload's answer from the verdicts (in the upload's order); every refusal is
/// counted and announced (`rejected` event).
fn answer(
    gw: &Gateway,
    uploader: &str,
    ids: Vec<String>,
    verdicts: Vec<Option<Verdict>>,
) -> UploadAnswer {
    let (mut accepted, mut duplicates, mut rejected) = (Vec::new(), Vec::new(), Vec::new());
    for (id, v) in ids.into_iter().zip(verdicts) {
        match v.unwrap_or_else(|| Verdict::Rejected("internal".into())) {
            Verdict::Accepted => accepted.push(id),
            Verdict::Duplicate => duplicates.push(id),
            Verdict::Rejected(code) => {
                EnvelopeReceived {
                    result: &code,
                    sender: uploader,
                    message_id: &id,
                }
                .emit(&gw.metrics);
                gw.publish(GatewayEvent::Rejected {
                    message_id: id.clone(),
                    node_id: uploader.to_string(),
                    code: code.clone(),
                });
                rejected.push(UploadRejected { code, id });
            }
        }
    }
    UploadAnswer {
        accepted,
        duplicates,
        rejected,
    }
}

/// Below this many envelopes an upload is opened on the calling thread.
const PARALLEL_FROM: usize = 8;

/// What checks the envelopes `uploader` signed: the trust store, or for a node of a
/// tenant its peer alone at its node id (its envelopes name that id as the sender;
/// PROTOCOL §18).
fn sender_trust(gw: &Gateway, uploader: &str) -> Arc<TrustStore> {
    let trust = gw.trust();
    if crate::fleet::tenant::tenant_of(uploader) == crate::fleet::tenant::DEFAULT_TENANT {
        trust
    } else {
        Arc::new(trust.as_sender(uploader))
    }
}

fn open_one(gw: &Gateway, trust: &TrustStore, m: &ForMe) -> Result<Opened, OpenError> {
    let now_ms = gw.now_ms();
    // What a node sealed to this gateway's retired key (before its rotation) opens
    // while that key's grace lasts.
    let (keys, previous) = (gw.keys.current(), gw.keys.previous(now_ms));
    let ctx = OpenContext {
        me: &gw.cfg.node_id,
        keys: &keys,
        previous_keys: previous.as_deref(),
        trust,
        now_ms,
        skew_ms: gw.skew_ms(),
        max_bytes: gw.cfg.queue.max_message_bytes as usize,
        max_ttl_ms: gw.cfg.queue.max_ttl_s * 1000,
        pruned_ahead: None,
    };
    // The replay check is pure; the state was asked about this id before.
    let seen = |_s: &str, id: &str| m.seen && id == m.env.message_id;
    open_parsed(&m.env, &ctx, &seen)
}

/// Open each envelope on all cores ([`crate::daemon::spread`]); `(slot, outcome)` in
/// input order. One whose worker failed is refused as `internal` (the node gets a
/// verdict for every envelope).
async fn open_all(
    gw: &Arc<Gateway>,
    trust: Arc<TrustStore>,
    mine: Vec<ForMe>,
) -> Vec<(usize, Result<Opened, OpenError>)> {
    let g = gw.clone();
    let (mine, opened) =
        crate::daemon::spread::on_all_cores(mine, PARALLEL_FROM, move |m: &ForMe| {
            open_one(&g, &trust, m)
        })
        .await;
    mine.iter()
        .zip(opened)
        .map(|(m, r)| {
            (
                m.slot,
                r.unwrap_or_else(|| Err(OpenError::BadRequest("internal error".into()))),
            )
        })
        .collect()
}

/// What an opened envelope becomes: a filed result or an inbox message; `Err(code)`
/// when its payload is unusable.
async fn to_keep(
    gw: &Gateway,
    uploader: &str,
    slot: usize,
    opened: Opened,
) -> Result<Result<Keep, String>, GatewayError> {
    let keep = replay_keep_until_ms(opened.expires_at_ms, 2 * gw.skew_ms());
    if opened.payload_type == "TASK_RESULT" {
        let Ok(result) = serde_json::from_slice::<TaskResult>(&opened.plaintext) else {
            return Ok(Err("bad_request".into()));
        };
        // The result names its request (`request_id`); it is filed under that request
        // only if the request really went to this node. Anything else (a node-initiated
        // call, a request id of another node's) is kept under the result's own id.
        let request_id = match &result.request_id {
            Some(rid) => match gw.state.request_node(rid).await? {
                Some(node) if node == uploader => rid.clone(),
                _ => opened.message_id.clone(),
            },
            None => opened.message_id.clone(),
        };
        // Stored as the node sent it: `GET /v1/messages/{id}` shows those bytes.
        return Ok(Ok(Keep {
            slot,
            result: Some((request_id.clone(), result.job_id, result.ok)),
            item: Upload::Result(FiledResult {
                request_id,
                result_message_id: opened.message_id,
                plaintext: opened.plaintext,
                remember_until_ms: keep,
            }),
        }));
    }
    // The gateway's inbox record never carried the envelope times (see InboxRecord).
    let record = InboxRecord {
        created_at_ms: None,
        expires_at_ms: None,
        ..InboxRecord::new(
            &opened,
            serde_json::from_slice(&opened.plaintext).unwrap_or(Value::Null),
            gw.now_ms(),
        )
    };
    Ok(Ok(Keep {
        slot,
        result: None,
        item: Upload::Inbox(InboxMessage {
            from_node: uploader.to_string(),
            message_id: opened.message_id.clone(),
            payload_type: opened.payload_type.clone(),
            priority: opened.priority.min(255) as u8,
            created_at_ms: opened.created_at_ms,
            expires_at_ms: opened.expires_at_ms,
            record: record.to_bytes(),
            remember_until_ms: keep,
        }),
    }))
}

/// One item on its own (after the batch's transaction failed): an expired inbox
/// message is that envelope's verdict; any other failure fails the upload.
async fn store_one(gw: &Gateway, item: Upload) -> Result<Result<Queued, String>, GatewayError> {
    let r = match item {
        Upload::Result(r) => gw.state.file_result(r).await.map(|()| Queued::Queued),
        Upload::Inbox(m) => gw.state.inbox_put(m).await,
    };
    match r {
        Ok(q) => Ok(Ok(q)),
        Err(StateError::Store(StoreError::Expired)) => Ok(Err("expired".into())),
        Err(e) => Err(e.into()),
    }
}

/// Node → node: queue the sealed envelope for its recipient, unopened. The recipient is
/// the node of that id in the sender's tenant (PROTOCOL §18): never another tenant's.
async fn forward(
    gw: &Gateway,
    uploader: &str,
    env: Envelope,
    bytes: Vec<u8>,
) -> Result<Verdict, GatewayError> {
    use crate::fleet::tenant::{address, tenant_of};
    let to = address(&env.recipient_node_id, tenant_of(uploader));
    if gw.enrolled(&to).await?.is_none() {
        return Ok(Verdict::Rejected("unknown_recipient".into()));
    }
    // What a hop that cannot decrypt can check: time window, sender trusted with `send`,
    // strict signature; the recipient still runs the whole pipeline.
    let trust = sender_trust(gw, uploader);
    let max_ttl_ms = gw.cfg.queue.max_ttl_s * 1000;
    if let Err(e) = check_relay(&env, &trust, gw.now_ms(), gw.skew_ms(), max_ttl_ms) {
        return Ok(Verdict::Rejected(e.code().into()));
    }
    match gw.admit_queued(&to, bytes.len() as u64).await {
        Err(GatewayError::TenantQuota(..)) => return Ok(Verdict::Rejected("tenant_quota".into())),
        other => other?,
    }
    let msg = ForNode {
        node_id: to.clone(),
        message_id: env.message_id.clone(),
        payload_type: env.payload_type.clone(),
        priority: env.priority.min(255) as u8,
        created_at_ms: env.created_at_ms,
        expires_at_ms: env.expires_at_ms,
        envelope: bytes,
        max_attempts: gw.cfg.queue.max_attempts,
        event: None,
    };
    match gw.state.forward(msg).await {
        Ok(Queued::Duplicate) => Ok(Verdict::Duplicate),
        Ok(Queued::Queued) => {
            super::commands::queued(
                gw,
                &env.message_id,
                &to,
                &env.payload_type,
                env.expires_at_ms,
            );
            Ok(Verdict::Accepted)
        }
        Err(StateError::Store(StoreError::Expired)) => Ok(Verdict::Rejected("expired".into())),
        Err(StateError::Store(e @ StoreError::QueueFull { .. })) => {
            tracing::warn!(event = "forward_refused", to = %to, error = %e);
            Ok(Verdict::Rejected("queue_full".into()))
        }
        Err(e) => Err(e.into()),
    }
}

/// What nodes send up: results, inbox messages, messages to forward.
pub struct Uploads<'g>(pub(super) &'g Arc<Gateway>);

impl Gateway {
    pub fn uploads(self: &Arc<Self>) -> Uploads<'_> {
        Uploads(self)
    }
}
