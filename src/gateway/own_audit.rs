//! The gateway's own audit log (PROTOCOL §15.6): every enrollment, approval, rejection
//! and retirement, as entries in the node's format (§13.1) with a checkpoint signed by
//! the gateway's key after each append. It is kept where the gateway keeps nodes' audit
//! copies, under the gateway's own id, so both engines hold it the same way and replicas
//! append to one log (an append that raced another replica's is rebuilt and retried).
//! `outpost audit verify` on the gateway host checks it.

use super::audit_sync::frontier;
use super::error::GatewayError;
use super::state::Gateway;
use super::storage::{AuditExtension, StateError};
use crate::audit::{leaf_hash, origin_for, sign_checkpoint, AuditEntry, AuditRecord};

/// Append `records` (one commit, one checkpoint over them). A failure is logged and
/// counted, never silent: the state change it records is already committed.
pub(super) async fn record(gw: &Gateway, records: Vec<AuditRecord>) {
    if let Err(e) = append(gw, records).await {
        gw.metrics.audit_append_failures_total.inc(&[]);
        tracing::error!(event = "gateway_audit_append_failed", error = %e);
    }
}

/// Append and return the log's new size.
pub(super) async fn append(gw: &Gateway, records: Vec<AuditRecord>) -> Result<u64, GatewayError> {
    let me = gw.cfg.node_id.clone();
    let mut frontiers = gw.audit.lock().await;
    let mut last = None;
    for _ in 0..3 {
        let f = frontier(gw, &mut frontiers, &me).await?;
        let now = gw.now_ms();
        let entries: Vec<Vec<u8>> = records
            .iter()
            .enumerate()
            .map(|(k, r)| {
                AuditEntry::from_record(f.size() + k as u64, now, r.clone()).canonical_bytes()
            })
            .collect();
        let mut next = f.clone();
        for e in &entries {
            next.push(leaf_hash(e));
        }
        let note = sign_checkpoint(
            gw.keys.current().signing_key(),
            &origin_for(&me),
            next.size(),
            &next.root(),
        );
        let ext = AuditExtension {
            start: f.size(),
            entries,
            checkpoint_size: next.size(),
            checkpoint: note,
        };
        match gw.state.audit_extend(&me, ext).await {
            Ok(()) => {
                let size = next.size();
                frontiers.insert(me, next);
                return Ok(size);
            }
            // Another replica appended first: read the log again and retry.
            Err(e @ StateError::Store(crate::store::StoreError::AuditIndex { .. })) => {
                frontiers.remove(&me);
                last = Some(e);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(last
        .map(GatewayError::from)
        .unwrap_or_else(|| GatewayError::Internal("gateway audit append".into())))
}
