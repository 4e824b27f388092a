//! The gateway's own audit log (PROTOCOL §15.6): every enrollment, approval, rejection,
//! retirement, key rotation, rollout decision, enrollment token made or revoked, token
//! revocation and hand edit of the trust store, as entries in the node's format (§13.1)
//! with a checkpoint signed by the gateway's key after each append; each names who
//! decided (a token's subject, a node, the gateway, or the local user of a command on
//! its host). It is kept where the gateway keeps nodes' audit copies, under the
//! gateway's own id, so both engines hold it the same way and replicas append to one
//! log. `outpost audit verify` on the gateway host checks it.
//!
//! A decision's transaction writes its entry as pending ([`crate::gateway::storage::
//! EnrollmentState`]); [`append_pending`] moves pending entries into the log, oldest
//! first, each removed from pending in the transaction that appends it. The flow that
//! made the decision calls it right after the commit, and the sweeper on every replica
//! calls it once a tick, so an entry a crash or a failed append left pending is
//! appended by the next pass. Racing another replica's append is never a reason to
//! stop: the loop reads the log again and goes on until nothing is pending.

use std::collections::BTreeSet;

use super::error::GatewayError;
use super::state::Gateway;
use super::storage::AuditExtension;
use crate::audit::{leaf_hash, origin_for, sign_checkpoint, AuditEvent, AuditOutcome, AuditRecord};
use crate::enroll::TokenClaims;
use crate::envelope::{b64_encode, IdentityDocument, Peer, TrustStore};
use crate::fleet::{LabelChange, Write};
use serde_json::Value;

/// Pending entries appended in one extension at most.
const BATCH: usize = 256;

/// [`append_all`], with a failure logged and counted, never silent: the entries stay
/// pending and the sweeper's next pass appends them.
pub(super) async fn append_pending(gw: &Gateway) {
    if let Err(e) = append_all(gw).await {
        gw.metrics.audit_append_failures_total.inc(&[]);
        tracing::error!(
            event = "gateway_audit_append_failed",
            error = %e,
            "the entries stay pending; the sweeper appends them"
        );
    }
}

/// Append every pending entry; returns how many this call appended.
pub(super) async fn append_all(gw: &Gateway) -> Result<u64, GatewayError> {
    let me = gw.cfg.node_id.clone();
    let mut appended = 0;
    if gw.state.audit_pending(1).await?.is_empty() {
        return Ok(0);
    }
    let sync = gw.audit_sync();
    let mut frontiers = sync.lock_frontiers().await;
    loop {
        let pending = gw.state.audit_pending(BATCH).await?;
        if pending.is_empty() {
            return Ok(appended);
        }
        let f = sync.frontier(&mut frontiers, &me).await?;
        let mut next = f.clone();
        let mut entries = Vec::with_capacity(pending.len());
        let mut seqs = Vec::with_capacity(pending.len());
        for (k, p) in pending.into_iter().enumerate() {
            let mut entry = p.entry;
            entry.index = f.size() + k as u64;
            let bytes = entry.canonical_bytes();
            next.push(leaf_hash(&bytes));
            entries.push(bytes);
            seqs.push(p.seq);
        }
        let note = sign_checkpoint(
            gw.keys.current().signing_key(),
            &origin_for(&me),
            next.size(),
            &next.root(),
        );
        let n = entries.len() as u64;
        let ext = AuditExtension {
            start: f.size(),
            entries,
            checkpoint_size: next.size(),
            checkpoint: note,
        };
        if gw.state.audit_append_pending(&me, ext, &seqs).await? {
            frontiers.insert(me.clone(), next);
            appended += n;
        } else {
            // Another replica appended first (the log grew, or took these entries):
            // read the log again and go on with what is still pending.
            frontiers.remove(&me);
            tokio::task::yield_now().await;
        }
    }
}

/// The gateway audit entries of a hand edit of the trust store from `before` to `after`
/// (`outpost trust add|rm` on the gateway host, which writes the gateway's state itself,
/// not through its API), by `actor` (the local user, `cli::actor`): one per peer added,
/// changed (another document or other rights) or removed, in peer-id order; a peer
/// saved unchanged has none. `event` `trust_add` or `trust_remove`; `detail` `"<peer id>
/// trusted|updated <role> send=<b> issue=<b>"` or `"<peer id> removed <role>"`;
/// `args_sha256` binds the peer's signing key as an enrollment's does.
pub fn trust_entries(actor: &str, before: &TrustStore, after: &TrustStore) -> Vec<AuditRecord> {
    let mut out = Vec::new();
    let ids: BTreeSet<String> = before
        .list()
        .chain(after.list())
        .map(|p| p.address())
        .collect();
    for id in &ids {
        let id = id.as_str();
        let entry = match (before.get(id), after.get(id)) {
            (None, Some(new)) => trust_added("trusted", new),
            (Some(old), Some(new)) if (&old.doc, old.rights) != (&new.doc, new.rights) => {
                trust_added("updated", new)
            }
            (Some(old), None) => entry(
                AuditEvent::TrustRemove,
                format!("{id} removed {}", old.doc.role),
                &old.doc,
            ),
            _ => continue,
        };
        out.push(entry.actor(actor));
    }
    out
}

fn trust_added(what: &str, p: &Peer) -> AuditRecord {
    let detail = format!(
        "{} {what} {} send={} issue={}",
        p.address(),
        p.doc.role,
        p.rights.send,
        p.rights.issue
    );
    entry(AuditEvent::TrustAdd, detail, &p.doc)
}

fn entry(event: AuditEvent, detail: String, doc: &IdentityDocument) -> AuditRecord {
    let mut a = AuditRecord::new(event, AuditOutcome::Ok).detail(detail);
    a.args_sha256 = Some(crate::audit::sha256_hex(
        b64_encode(&doc.sign_pk).as_bytes(),
    ));
    a
}

/// The gateway audit entry of an enrollment token made on the gateway host (`outpost
/// enroll-token create`), by `actor`: `event` `enroll_token_create`, `detail` `"<token
/// id> created max_uses=<n> approve=<auto|manual> prefix=<prefix|-> expires_at_ms=<ms>"`.
pub fn enroll_token_created(actor: &str, t: &TokenClaims, tenant: Option<&str>) -> AuditRecord {
    AuditRecord::new(AuditEvent::EnrollTokenCreate, AuditOutcome::Ok)
        .actor(actor)
        .detail(format!(
            "{} created max_uses={} approve={} prefix={} expires_at_ms={}{}",
            t.id,
            t.max_uses,
            t.approve.as_str(),
            t.node_prefix.as_deref().unwrap_or("-"),
            t.expires_at_ms,
            tenant.map(|t| format!(" tenant={t}")).unwrap_or_default()
        ))
}

/// The gateway audit entry of an enrollment token revoked (`outpost enroll-token
/// revoke`), by `actor`: `event` `enroll_token_revoke`, `detail` `"<token id> revoked"`.
pub fn enroll_token_revoked(actor: &str, id: &str) -> AuditRecord {
    AuditRecord::new(AuditEvent::EnrollTokenRevoke, AuditOutcome::Ok)
        .actor(actor)
        .detail(format!("{id} revoked"))
}

/// The gateway audit entry of a tenant created, its quotas set or the tenant deleted
/// (`outpost tenant`, PROTOCOL §18) by `actor`: `event` `tenant`, `detail` `"<name>
/// created|set <quotas>"` (each quota `name=N` or `name=-` for none) or `"<name>
/// deleted"`.
pub fn tenant_changed(
    actor: &str,
    name: &str,
    what: &str,
    quotas: Option<&crate::fleet::tenant::Quotas>,
) -> AuditRecord {
    let q = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |n| n.to_string());
    let detail = match quotas {
        Some(x) => format!(
            "{name} {what} max_nodes={} max_queued_messages={} max_queued_bytes={} max_commands_per_s={}",
            q(x.max_nodes),
            q(x.max_queued_messages),
            q(x.max_queued_bytes),
            q(x.max_commands_per_s)
        ),
        None => format!("{name} {what}"),
    };
    AuditRecord::new(AuditEvent::Tenant, AuditOutcome::Ok)
        .actor(actor)
        .detail(detail)
}

/// The gateway audit entry of a capability token revoked (`POST /v1/revocations`, the
/// console's form) by token subject `by`: `event` `token_revoke`, `detail` `"<jti>
/// revoked"`.
pub fn token_revoked(by: &str, jti: &str) -> AuditRecord {
    AuditRecord::new(AuditEvent::TokenRevoke, AuditOutcome::Ok)
        .actor(by)
        .detail(format!("{jti} revoked"))
}

/// The gateway audit entry of an operator's label change (PROTOCOL §16.1) by `by`:
/// `event` `labels`, `detail` `"<node id> labels set <k=v,…|-> removed <k,…|->"`.
pub fn labels_changed(by: &str, node: &str, change: &LabelChange) -> AuditRecord {
    let list = |v: Vec<String>| {
        if v.is_empty() {
            "-".into()
        } else {
            v.join(",")
        }
    };
    let set = list(change.set.iter().map(|(k, v)| format!("{k}={v}")).collect());
    let removed = list(change.remove.clone());
    AuditRecord::new(AuditEvent::Labels, AuditOutcome::Ok)
        .actor(by)
        .detail(format!("{node} labels set {set} removed {removed}"))
}

/// The gateway audit entry of an operator's desired-state write (PROTOCOL §16.4) by
/// `by`: `event` `desired`, `detail` `"<node id> desired version <n> <replace|merge>"`,
/// `args_sha256` the SHA-256 of the desired document it made (its JSON), which binds
/// what was written without keeping it in the log.
pub fn desired_written(
    by: &str,
    node: &str,
    write: &Write,
    version: u64,
    doc: &Value,
) -> AuditRecord {
    let how = match write {
        Write::Replace(_) => "replace",
        Write::Merge(_) => "merge",
    };
    let mut a = AuditRecord::new(AuditEvent::Desired, AuditOutcome::Ok)
        .actor(by)
        .detail(format!("{node} desired version {version} {how}"));
    a.args_sha256 = Some(crate::audit::json_sha256_hex(doc));
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{Keys, Rights};

    fn peer(id: &str) -> IdentityDocument {
        IdentityDocument::new(id, "node", &Keys::generate(), "2026-11-20T06:00:00Z")
    }

    #[test]
    fn a_trust_edit_has_one_entry_per_peer_it_changed() {
        let send = Rights {
            send: true,
            issue: false,
        };
        let mut before = TrustStore::new();
        for id in ["node:kept", "node:gone", "node:rights"] {
            before.add(peer(id), send).unwrap();
        }
        let mut after = before.clone();
        after.remove("node:gone");
        let rights = after.get("node:rights").unwrap().doc.clone();
        after.add(rights, Rights::default()).unwrap();
        after.add(peer("node:new"), send).unwrap();
        let kept = after.get("node:kept").unwrap().doc.clone();
        after.add(kept, send).unwrap();
        let said: Vec<(&str, String)> = trust_entries("local:alice", &before, &after)
            .into_iter()
            .map(|a| {
                assert_eq!(a.actor.as_deref(), Some("local:alice"));
                assert!(a.args_sha256.is_some());
                (a.event.as_str(), a.detail.unwrap())
            })
            .collect();
        let want = [
            ("trust_remove", "node:gone removed node".to_string()),
            (
                "trust_add",
                "node:new trusted node send=true issue=false".into(),
            ),
            (
                "trust_add",
                "node:rights updated node send=false issue=false".into(),
            ),
        ];
        assert_eq!(said, want, "node:kept was saved unchanged");
    }
}
