//! `POST /v1/nodes/{id}/audit` (SPEC §7 sync): the gateway keeps a verified copy of each
//! node's audit log.
//!
//! An upload is entries from the gateway's confirmed size plus a checkpoint signed by
//! the node. The gateway recomputes the root over its stored leaves + the new ones,
//! checks the signature with the node's key, and stores both only if the checkpoint's
//! size and root match — which also proves the new tree extends the old one, since the
//! old leaves are the prefix it hashed. A gap or mismatch is refused (409) and logged as
//! an alert, never merged. `GET` answers the confirmed size so a node can resume.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::Value;

use super::auth::SignedNode;
use super::state::{store_error, Gateway};
use crate::api::json::parse;
use crate::api::{ApiError, ApiResult};
use crate::audit::{leaf_hash, verify_extension, ExtensionError, Frontier};
use crate::envelope::b64_encode;
use crate::store::WriteOp;
use crate::sync::wire::{AuditAnswer, AuditStatus, AuditUpload};

fn ns_entries(node: &str) -> String {
    format!("gw_audit:{node}")
}
fn ns_checkpoints(node: &str) -> String {
    format!("gw_auditcp:{node}")
}
fn key(i: u64) -> String {
    format!("{i:020}")
}

/// Why an upload is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("entries must start at the confirmed size {expected}, got {got}")]
    Gap { expected: u64, got: u64 },
    #[error("entry {0} differs from the copy the gateway already holds")]
    Rewritten(u64),
    #[error("entry at position {0} is not an audit entry")]
    BadEntry(u64),
    #[error(transparent)]
    Extension(#[from] ExtensionError),
}

impl Refusal {
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::Gap { .. } | Refusal::Extension(ExtensionError::IndexMismatch { .. }) => {
                "audit_gap"
            }
            _ => "audit_mismatch",
        }
    }
}

fn entry_index(bytes: &[u8]) -> Option<u64> {
    serde_json::from_slice::<Value>(bytes)
        .ok()?
        .get("index")?
        .as_u64()
}

/// Drop a resent prefix (entries below the confirmed size, after a lost answer) if it
/// is byte-identical to what is stored, then run the audit module's pure extension
/// check on the rest. Returns the new frontier, size and the entries to store.
pub fn verify_upload(
    old: &Frontier,
    stored: &dyn Fn(u64) -> Option<Vec<u8>>,
    entries: Vec<Vec<u8>>,
    note: &str,
    key: &ed25519_dalek::VerifyingKey,
    node_id: &str,
) -> Result<(Frontier, u64, Vec<Vec<u8>>), Refusal> {
    let size = old.size();
    let mut fresh = Vec::new();
    for (pos, e) in entries.into_iter().enumerate() {
        let idx = entry_index(&e).ok_or(Refusal::BadEntry(pos as u64))?;
        if idx < size && fresh.is_empty() {
            if stored(idx).as_deref() != Some(e.as_slice()) {
                return Err(Refusal::Rewritten(idx));
            }
            continue;
        }
        if fresh.is_empty() && idx != size {
            return Err(Refusal::Gap {
                expected: size,
                got: idx,
            });
        }
        fresh.push(e);
    }
    let ext = verify_extension(old, &fresh, note, key, node_id)?;
    Ok((ext.frontier, ext.checkpoint.size, fresh))
}

fn load_frontier(gw: &Gateway, node: &str) -> Result<Frontier, ApiError> {
    let rows = gw.store.kv_list(&ns_entries(node)).map_err(store_error)?;
    let mut f = Frontier::new();
    for (_, v) in rows {
        f.push(leaf_hash(&v));
    }
    Ok(f)
}

pub async fn upload(
    State(gw): State<Arc<Gateway>>,
    signed: SignedNode,
) -> ApiResult<Json<AuditAnswer>> {
    // Entries that are neither text nor objects fail here, as 400 bad_request.
    let body: AuditUpload = parse(&signed.body)?;
    let node = signed.node_id.clone();
    let Some(peer_key) = gw.trust().get(&node).map(|p| p.keys.sign) else {
        return Err(ApiError::unauthorized("unknown node"));
    };
    let entries: Vec<Vec<u8>> = body.entries.into_iter().map(|e| e.into_bytes()).collect();
    let mut frontiers = gw.audit.lock().await;
    let old = match frontiers.get(&node) {
        Some(f) => f.clone(),
        None => load_frontier(&gw, &node)?,
    };
    let ns = ns_entries(&node);
    let stored = |i: u64| gw.store.kv_get(&ns, &key(i)).ok().flatten();
    let (new, size, fresh) =
        match verify_upload(&old, &stored, entries, &body.checkpoint, &peer_key, &node) {
            Ok(x) => x,
            Err(r) => {
                tracing::error!(
                    event = "audit_alert",
                    node_id = %node,
                    code = r.code(),
                    confirmed_size = old.size(),
                    detail = %r,
                    "audit upload refused: not merged"
                );
                return Err(ApiError::new(StatusCode::CONFLICT, r.code(), r.to_string()));
            }
        };
    let mut ops: Vec<WriteOp> = fresh
        .into_iter()
        .enumerate()
        .map(|(i, e)| WriteOp::KvPut {
            ns: ns.clone(),
            key: key(old.size() + i as u64),
            value: e,
        })
        .collect();
    ops.push(WriteOp::KvPut {
        ns: ns_checkpoints(&node),
        key: key(size),
        value: body.checkpoint.into_bytes(),
    });
    gw.store.write(ops).await.map_err(store_error)?;
    tracing::info!(event = "audit_synced", node_id = %node, size, "audit log extended and verified");
    frontiers.insert(node, new);
    Ok(Json(AuditAnswer { size }))
}

/// `GET /v1/nodes/{id}/audit`: the confirmed size and root.
pub async fn status(
    State(gw): State<Arc<Gateway>>,
    signed: SignedNode,
) -> ApiResult<Json<AuditStatus>> {
    let mut frontiers = gw.audit.lock().await;
    let f = match frontiers.get(&signed.node_id) {
        Some(f) => f.clone(),
        None => {
            let f = load_frontier(&gw, &signed.node_id)?;
            frontiers.insert(signed.node_id.clone(), f.clone());
            f
        }
    };
    Ok(Json(AuditStatus {
        root: b64_encode(&f.root()),
        size: f.size(),
    }))
}

/// Confirmed audit size of `node` (for `GET /v1/nodes`).
pub async fn confirmed_size(gw: &Gateway, node: &str) -> u64 {
    let mut frontiers = gw.audit.lock().await;
    if let Some(f) = frontiers.get(node) {
        return f.size();
    }
    match load_frontier(gw, node) {
        Ok(f) => {
            let s = f.size();
            frontiers.insert(node.to_string(), f);
            s
        }
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{
        origin_for, sign_checkpoint, AuditEntry, AuditEvent, AuditOutcome, AuditRecord,
    };
    use ed25519_dalek::SigningKey;

    fn entries(from: u64, n: u64) -> Vec<Vec<u8>> {
        (from..from + n)
            .map(|i| {
                AuditEntry::from_record(
                    i,
                    1000 + i,
                    AuditRecord::new(AuditEvent::ToolCall, AuditOutcome::Ok),
                )
                .canonical_bytes()
            })
            .collect()
    }

    fn note(k: &SigningKey, all: &[Vec<u8>]) -> String {
        let mut f = Frontier::new();
        for e in all {
            f.push(leaf_hash(e));
        }
        sign_checkpoint(k, &origin_for("node:a"), f.size(), &f.root())
    }

    #[test]
    fn extends_refuses_gap_mismatch_and_rewrite() {
        let k = SigningKey::from_bytes(&[7; 32]);
        let vk = k.verifying_key();
        let all = entries(0, 5);
        let none = |_: u64| None;
        let (f3, s, fresh) = verify_upload(
            &Frontier::new(),
            &none,
            all[..3].to_vec(),
            &note(&k, &all[..3]),
            &vk,
            "node:a",
        )
        .unwrap();
        assert_eq!((s, fresh.len()), (3, 3));
        // Next upload continues from 3.
        let (_, s, _) = verify_upload(
            &f3,
            &none,
            all[3..].to_vec(),
            &note(&k, &all),
            &vk,
            "node:a",
        )
        .unwrap();
        assert_eq!(s, 5);
        // Gap: skipping entry 3.
        let r = verify_upload(
            &f3,
            &none,
            all[4..].to_vec(),
            &note(&k, &all),
            &vk,
            "node:a",
        );
        assert_eq!(r.unwrap_err().code(), "audit_gap");
        // Root mismatch: checkpoint over different entries.
        let other = entries(0, 5)
            .into_iter()
            .map(|mut e| {
                e.push(b' ');
                e
            })
            .collect::<Vec<_>>();
        let r = verify_upload(
            &f3,
            &none,
            all[3..].to_vec(),
            &note(&k, &other),
            &vk,
            "node:a",
        );
        assert_eq!(r.unwrap_err().code(), "audit_mismatch");
        // Resending already-confirmed entries must match what is stored.
        let stored_ok = |i: u64| all.get(i as usize).cloned();
        assert!(
            verify_upload(&f3, &stored_ok, all.clone(), &note(&k, &all), &vk, "node:a").is_ok()
        );
        let stored_bad = |_: u64| Some(b"{}".to_vec());
        let r = verify_upload(
            &f3,
            &stored_bad,
            all.clone(),
            &note(&k, &all),
            &vk,
            "node:a",
        );
        assert_eq!(r.unwrap_err(), Refusal::Rewritten(0));
        // Signed by another key.
        let k2 = SigningKey::from_bytes(&[8; 32]);
        let r = verify_upload(
            &f3,
            &none,
            all[3..].to_vec(),
            &note(&k2, &all),
            &vk,
            "node:a",
        );
        assert!(matches!(
            r.unwrap_err(),
            Refusal::Extension(ExtensionError::Checkpoint(_))
        ));
    }
}
