//! The embedded engine's side of `outpost gateway migrate`: its state read whole (the
//! layout named in `store::names`) into an engine-neutral [`Snapshot`].

use std::collections::BTreeSet;

use super::super::snapshot::{AuditCopy, Snapshot};
use super::super::StateError;
use crate::store::names::{
    KV_GW_AUDIT_CHECKPOINTS_PREFIX, KV_GW_AUDIT_PREFIX, KV_GW_JOBS, KV_GW_REQUESTS, KV_GW_RESULTS,
    KV_GW_REVOCATIONS, KV_GW_TENANTS, Q_GATEWAY_INBOX, Q_TO_NODE,
};
use crate::store::{Store, StoredMessage};

fn corrupt(what: &str, e: impl std::fmt::Display) -> StateError {
    StateError::Corrupt(format!("{what}: {e}"))
}

/// Everything a stopped embedded gateway's store holds that moves to another engine.
pub fn read(store: &Store) -> Result<Snapshot, StateError> {
    no_audit_pending(store)?;
    let messages = messages(store)?;
    let jobs = store
        .kv_list(KV_GW_JOBS)?
        .into_iter()
        .map(|(k, v)| {
            Ok((
                k,
                serde_json::from_slice(&v).map_err(|e| corrupt("job", e))?,
            ))
        })
        .collect::<Result<_, StateError>>()?;
    let requests = store
        .kv_list(KV_GW_REQUESTS)?
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
        .collect();
    let results = store.kv_list(KV_GW_RESULTS)?;
    let revocations = store
        .kv_list(KV_GW_REVOCATIONS)?
        .into_iter()
        .map(|(k, v)| {
            Ok((
                k.parse().map_err(|e| corrupt("revocation version", e))?,
                String::from_utf8_lossy(&v).into_owned(),
            ))
        })
        .collect::<Result<_, StateError>>()?;
    let trust = crate::daemon::trust::load(store).map_err(|e| corrupt("trust store", e))?;
    // Audit copies exist for enrolled nodes (and any node with messages).
    let nodes: BTreeSet<String> = trust
        .list()
        .map(|p| p.address())
        .chain(messages.iter().map(|m| m.peer.clone()))
        .collect();
    let audit = audit_copies(store, nodes)?;
    let tenants = store
        .kv_list(KV_GW_TENANTS)?
        .into_iter()
        .map(|(_, v)| serde_json::from_slice(&v).map_err(|e| corrupt("tenant", e)))
        .collect::<Result<_, StateError>>()?;
    Ok(Snapshot {
        messages,
        jobs,
        requests,
        results,
        revocations,
        trust,
        audit,
        tenants,
    })
}

/// Refuses a store whose own audit log has entries pending. The log moves as it is;
/// entries its decisions left pending (the gateway was stopped before appending them)
/// are appended by starting it once.
fn no_audit_pending(store: &Store) -> Result<(), StateError> {
    if !store
        .kv_list(crate::store::names::KV_GW_AUDIT_PENDING)?
        .is_empty()
    {
        return Err(StateError::Corrupt(
            "the gateway's own audit log has entries pending: start the gateway once \
             (it appends them at start) and stop it, then migrate"
                .into(),
        ));
    }
    Ok(())
}

/// Every queued message, to nodes and in the gateway's inbox, read a page at a time.
fn messages(store: &Store) -> Result<Vec<StoredMessage>, StateError> {
    let mut messages = Vec::new();
    for q in [Q_TO_NODE, Q_GATEWAY_INBOX] {
        let mut after: Option<String> = None;
        loop {
            let page = store.list(q, None, after.as_deref(), 1000)?;
            messages.extend(page.items);
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
    }
    Ok(messages)
}

/// The audit copies the gateway keeps of `nodes`: entries and checkpoints of each that
/// has any.
fn audit_copies(store: &Store, nodes: BTreeSet<String>) -> Result<Vec<AuditCopy>, StateError> {
    let mut audit = Vec::new();
    for n in nodes {
        let entries: Vec<Vec<u8>> = store
            .kv_list(&format!("{KV_GW_AUDIT_PREFIX}{n}"))?
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        let cps = store
            .kv_list(&format!("{KV_GW_AUDIT_CHECKPOINTS_PREFIX}{n}"))?
            .into_iter()
            .map(|(k, v)| {
                Ok((
                    k.parse().map_err(|e| corrupt("checkpoint size", e))?,
                    String::from_utf8_lossy(&v).into_owned(),
                ))
            })
            .collect::<Result<Vec<_>, StateError>>()?;
        if !entries.is_empty() || !cps.is_empty() {
            audit.push((n, entries, cps));
        }
    }
    Ok(audit)
}
