//! The opening half of [`super::inbound`]: the security pipeline for each envelope
//! (signature, recipient, expiry, replay, decrypt, and who may send what), on all cores
//! for a batch, and what an authenticated envelope from the node's gateway teaches it
//! about time.

use std::sync::Arc;

use serde_json::Value;

use super::base::Base;
use super::inbound::{Q_INBOX, Q_TASKS};
use crate::envelope::{open, OpenContext, OpenError, Opened, PrunedAhead};
use crate::store::names::SCOPE_DESIRED;
use crate::sync::wire::DESIRED_STATE;

/// Whether `id` was received before, by any receiving flow: ids are unique per sender
/// and in practice globally (UUIDv7/ULID), so any scope having it is a replay.
pub(super) fn seen_any(base: &Base, id: &str) -> bool {
    [Q_INBOX, Q_TASKS, SCOPE_DESIRED]
        .iter()
        .any(|q| base.store.seen(q, id).unwrap_or(false))
}

/// Below this many envelopes a batch is opened on the calling thread.
const PARALLEL_FROM: usize = 8;

/// Open every envelope (signature, recipient, expiry, replay, decrypt) on all cores
/// ([`crate::daemon::spread`]); results in the input's order, each with its bytes.
/// `None` marks an envelope that was not processed (its worker failed): the caller must
/// not go past it.
pub(super) async fn open_all(
    base: &Arc<Base>,
    envelopes: Vec<Vec<u8>>,
) -> Vec<(Vec<u8>, Option<Result<Opened, OpenError>>)> {
    let base = base.clone();
    let (bytes, opened) =
        crate::daemon::spread::on_all_cores(envelopes, PARALLEL_FROM, move |b: &Vec<u8>| {
            open_envelope(&base, b)
        })
        .await;
    bytes.into_iter().zip(opened).collect()
}

/// The security pipeline for one envelope (pure CPU plus dedup reads): callable from
/// any thread, so a batch can be opened on all cores.
pub(super) fn open_envelope(base: &Base, bytes: &[u8]) -> Result<Opened, OpenError> {
    let now_ms = base.now_ms();
    let (keys, previous) = (base.keys.current(), base.keys.previous(now_ms));
    let attempt = |trust: &crate::envelope::TrustStore| {
        let ctx = OpenContext {
            me: &base.cfg.node_id,
            keys: &keys,
            previous_keys: previous.as_deref(),
            trust,
            now_ms,
            skew_ms: base.skew_ms(),
            max_bytes: base.cfg.queue.max_message_bytes as usize,
            max_ttl_ms: base.cfg.queue.max_ttl_s * 1000,
            pruned_ahead: pruned_ahead(base),
        };
        let seen = |_sender: &str, id: &str| seen_any(base, id);
        open(bytes, &ctx, &seen)
    };
    let opened = match attempt(&base.trust()) {
        Err(OpenError::UnknownSender) => {
            base.recheck_trust();
            attempt(&base.trust())
        }
        other => other,
    }?;
    // Desired state is the gateway's to set: from anyone else (a peer with `send`) it
    // is refused, like a sender without `send`.
    let from_gateway = base
        .cfg
        .upstream
        .as_ref()
        .is_some_and(|up| up.gateway_id == opened.sender_node_id);
    if opened.payload_type == DESIRED_STATE && !from_gateway {
        return Err(OpenError::Forbidden);
    }
    learn_time(base, &opened);
    // Before it is stored: the commit that remembers its id also persists this.
    base.store.note_seen_created(opened.created_at_ms);
    Ok(opened)
}

/// The window of replay memory the node may have lost while its time was ahead, if its
/// time was ever moved back (RELIABILITY F2; `store::time`).
fn pruned_ahead(base: &Base) -> Option<PrunedAhead> {
    base.store.time_correction().map(|c| PrunedAhead {
        corrected_at_ms: c.corrected_at_ms,
        high_water_ms: c.high_water_ms,
        seen_created_max_ms: c.seen_created_max_ms,
    })
}

/// An authenticated envelope sealed by this node's own gateway was created no later
/// than now. After a boot without a real-time clock the node's time resumes from the
/// persisted floor and runs behind by the downtime until NTP answers; while its clock
/// is that wrong, the envelope's `created_at` moves it forward, never back
/// (RELIABILITY F6; `store::time`). Only the gateway's word counts (the node already
/// trusts it for trust documents and revocations), only within what `open` accepted
/// (`created_at` at most the clock skew ahead, so a gateway whose own clock is far
/// ahead cannot drag its nodes with it), and never while the node's clock is sane.
fn learn_time(base: &Base, opened: &Opened) {
    let Some(up) = base.cfg.upstream.as_ref() else {
        return;
    };
    if opened.sender_node_id != up.gateway_id {
        return;
    }
    let moved = base.store.time_not_before(opened.created_at_ms);
    if moved >= 1_000 {
        tracing::info!(
            event = "time_moved_forward",
            by_ms = moved,
            source = %up.gateway_id,
            detail = "the node's clock was behind a signed timestamp from its gateway"
        );
    }
}

/// Best-effort sender and id of a refused envelope, for logs only (never trusted).
pub(super) fn peek_ids(bytes: &[u8]) -> (String, String) {
    let v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    let s = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_str())
            .map(|x| x.chars().take(100).collect())
            .unwrap_or_default()
    };
    (s("sender_node_id"), s("message_id"))
}
