//! `POST /v1/nodes/{id}/audit` (PROTOCOL §13.4): the gateway keeps a verified copy of each
//! node's audit log.
//!
//! An upload is entries from the gateway's confirmed size plus a checkpoint signed by
//! the node. The gateway recomputes the root over its stored leaves + the new ones,
//! checks the signature with the node's key, and stores both only if the checkpoint's
//! size and root match — which also proves the new tree extends the old one, since the
//! old leaves are the prefix it hashed. A gap or mismatch is refused (409) and logged as
//! an alert, never merged. `GET` answers the confirmed size so a node can resume.

use std::collections::HashMap;

use serde_json::Value;

pub(super) mod frontiers;

use frontiers::Frontiers;

use super::error::GatewayError;
pub use super::error::Refusal;
use super::state::Gateway;
use super::storage::AuditExtension;
use crate::audit::{leaf_hash, verify_extension, Frontier};
use crate::envelope::b64_encode;
use crate::sync::wire::{AuditStatus, AuditUpload};

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
    keys: &[ed25519_dalek::VerifyingKey],
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
    let ext = verify_extension(old, &fresh, note, keys, node_id)?;
    Ok((ext.frontier, ext.checkpoint.size, fresh))
}

async fn load_frontier(gw: &Gateway, node: &str) -> Result<Frontier, GatewayError> {
    let mut f = Frontier::new();
    for v in gw.state.audit_entries(node).await? {
        f.push(leaf_hash(&v));
    }
    Ok(f)
}

/// Entries a replica reads one by one to catch its frontier up; further behind, it
/// reads the whole copy.
const CATCH_UP_MAX: u64 = 64;

/// `f` extended by the entries from its size up to `size`; `None` when one of them is
/// not there (the copy changed under it: read it whole).
async fn catch_up(
    gw: &Gateway,
    node: &str,
    mut f: Frontier,
    size: u64,
) -> Result<Option<Frontier>, GatewayError> {
    for i in f.size()..size {
        match gw.state.audit_entry(node, i).await? {
            Some(v) => f.push(leaf_hash(&v)),
            None => return Ok(None),
        }
    }
    Ok(Some(f))
}

/// Entries an upload resends below the confirmed size (after a lost answer), as
/// stored, so the pure check can compare them.
async fn resent_prefix(
    gw: &Gateway,
    node: &str,
    size: u64,
    entries: &[Vec<u8>],
) -> Result<HashMap<u64, Vec<u8>>, GatewayError> {
    let mut out = HashMap::new();
    for e in entries {
        match entry_index(e) {
            Some(i) if i < size => {
                if let Some(v) = gw.state.audit_entry(node, i).await? {
                    out.insert(i, v);
                }
            }
            _ => break,
        }
    }
    Ok(out)
}

impl AuditSync<'_> {
    /// Verify an upload from `node` against its stored copy and store the extension.
    /// Returns the new confirmed size. Uploads are serialised per gateway.
    pub async fn extend(&self, node: &str, body: AuditUpload) -> Result<u64, GatewayError> {
        let gw = self.gw;
        // Its key, and the one a rotation retired while that key's grace lasts (a
        // checkpoint signed before the switch, uploaded after it).
        let now = gw.now_ms();
        let Some(peer_keys) = gw
            .trust()
            .get(node)
            .map(|p| p.sign_keys(now).copied().collect::<Vec<_>>())
        else {
            return Err(GatewayError::UnknownPeer);
        };
        let entries: Vec<Vec<u8>> = body.entries.into_iter().map(|e| e.into_bytes()).collect();
        let mut frontiers = self.lock_frontiers().await;
        let old = self.frontier(&mut frontiers, node).await?;
        let resent = resent_prefix(gw, node, old.size(), &entries).await?;
        let stored = |i: u64| resent.get(&i).cloned();
        // The checkpoint names the device's own id, never its address (PROTOCOL §18).
        let device = crate::fleet::tenant::node_of(node);
        let (new, size, fresh) =
            match verify_upload(&old, &stored, entries, &body.checkpoint, &peer_keys, device) {
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
                    gw.publish(super::events::GatewayEvent::AuditRefused {
                        node_id: node.to_string(),
                        code: r.code().to_string(),
                        confirmed_size: old.size(),
                    });
                    return Err(r.into());
                }
            };
        let ext = AuditExtension {
            start: old.size(),
            entries: fresh,
            checkpoint_size: size,
            checkpoint: body.checkpoint,
        };
        gw.state.audit_extend(node, ext).await?;
        tracing::info!(event = "audit_synced", node_id = %node, size, "audit log extended and verified");
        frontiers.insert(node.to_string(), new);
        Ok(size)
    }
}

impl AuditSync<'_> {
    /// The confirmed size and root of `node`'s copy.
    pub async fn status(&self, node: &str) -> Result<AuditStatus, GatewayError> {
        let mut frontiers = self.lock_frontiers().await;
        let f = self.frontier(&mut frontiers, node).await?;
        Ok(AuditStatus {
            root: b64_encode(&f.root()),
            size: f.size(),
        })
    }
}

/// The frontiers, locked: no other upload (or append of the gateway's own log) runs
/// meanwhile.
pub(super) type Locked<'a> = tokio::sync::MutexGuard<'a, HashMap<String, Frontier>>;

impl AuditSync<'_> {
    pub(super) async fn lock_frontiers(&self) -> Locked<'_> {
        self.frontiers.lock().await
    }

    /// `node`'s frontier from the cache, unless another replica extended the copy since
    /// (a shared state is asked for the size first), else read from the state.
    pub(super) async fn frontier(
        &self,
        frontiers: &mut HashMap<String, Frontier>,
        node: &str,
    ) -> Result<Frontier, GatewayError> {
        let gw = self.gw;
        if let Some(f) = frontiers.get_mut(node) {
            if !self.frontiers.shared() {
                return Ok(f.clone());
            }
            // Another replica extended the copy: the entries it added, not all of them
            // again (the gateway's own log grows by one entry per enrollment).
            let size = gw.state.audit_size(node).await?;
            if size >= f.size() && size - f.size() <= CATCH_UP_MAX {
                if let Some(caught_up) = catch_up(gw, node, f.clone(), size).await? {
                    *f = caught_up;
                    return Ok(f.clone());
                }
            }
        }
        let f = load_frontier(gw, node).await?;
        frontiers.insert(node.to_string(), f.clone());
        Ok(f)
    }

    /// Confirmed audit sizes of `nodes` (for `GET /v1/nodes`): a shared state answers
    /// for all at once; one process from its frontiers (0 for a copy it cannot read).
    pub(super) async fn confirmed_sizes(
        &self,
        nodes: &[String],
    ) -> Result<HashMap<String, u64>, GatewayError> {
        if self.frontiers.shared() {
            return Ok(self.gw.state.audit_sizes(nodes).await?);
        }
        let mut frontiers = self.lock_frontiers().await;
        let mut out = HashMap::with_capacity(nodes.len());
        for node in nodes {
            let size = self
                .frontier(&mut frontiers, node)
                .await
                .map_or(0, |f| f.size());
            out.insert(node.clone(), size);
        }
        Ok(out)
    }
}

/// The gateway's verified copies of the nodes' audit logs.
pub struct AuditSync<'g> {
    gw: &'g Gateway,
    frontiers: &'g Frontiers,
}

impl Gateway {
    pub fn audit_sync(&self) -> AuditSync<'_> {
        AuditSync {
            gw: self,
            frontiers: &self.frontiers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{
        origin_for, sign_checkpoint, AuditEntry, AuditEvent, AuditOutcome, AuditRecord,
        ExtensionError,
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
            &[vk],
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
            &[vk],
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
            &[vk],
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
            &[vk],
            "node:a",
        );
        assert_eq!(r.unwrap_err().code(), "audit_mismatch");
        // Resending already-confirmed entries must match what is stored.
        let stored_ok = |i: u64| all.get(i as usize).cloned();
        assert!(verify_upload(
            &f3,
            &stored_ok,
            all.clone(),
            &note(&k, &all),
            &[vk],
            "node:a"
        )
        .is_ok());
        let stored_bad = |_: u64| Some(b"{}".to_vec());
        let r = verify_upload(
            &f3,
            &stored_bad,
            all.clone(),
            &note(&k, &all),
            &[vk],
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
            &[vk],
            "node:a",
        );
        assert!(matches!(
            r.unwrap_err(),
            Refusal::Extension(ExtensionError::Checkpoint(_))
        ));
    }
}
