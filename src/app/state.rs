//! The node's desired and reported state (PROTOCOL §10.4, §16.4): two versioned
//! documents in the store (KV namespace [`KV_STATE`]). Local software reads both and
//! merge-patches the reported one; the desired one arrives from the gateway in a
//! `DESIRED_STATE` envelope ([`super::inbound`]) and is kept only when newer. The
//! versions held are also kept in memory, so the sync loop can put them on every pull
//! and decide whether to report without reading the store.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::Value;

use super::base::Base;
use super::error::NodeError;
use crate::fleet::state::MAX_STATE_BYTES;
use crate::fleet::{StateError, Versioned, Write};
use crate::store::names::{KEY_DESIRED, KEY_REPORTED, KV_STATE};
use crate::store::{Batch, StoreError};

/// The versions the node holds, shared with the sync loop.
#[derive(Debug, Default)]
pub struct HeldVersions {
    desired: AtomicU64,
    reported: AtomicU64,
}

impl HeldVersions {
    pub fn desired(&self) -> u64 {
        self.desired.load(Ordering::SeqCst)
    }
    pub fn reported(&self) -> u64 {
        self.reported.load(Ordering::SeqCst)
    }
}

/// Desired and reported state, each written under its own lock: a version is read,
/// compared and committed under it, so two writers never make the same version and a
/// desired version never goes back.
pub struct NodeState {
    base: Arc<Base>,
    reported_lock: tokio::sync::Mutex<()>,
    desired_lock: tokio::sync::Mutex<()>,
    held: Arc<HeldVersions>,
}

/// What a state read answers: both documents with their versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDocs {
    pub desired: Versioned,
    pub reported: Versioned,
}

impl NodeState {
    pub(super) fn open(base: Arc<Base>) -> Result<Self, NodeError> {
        let held = HeldVersions::default();
        held.desired
            .store(load(&base, KEY_DESIRED)?.version, Ordering::SeqCst);
        held.reported
            .store(load(&base, KEY_REPORTED)?.version, Ordering::SeqCst);
        Ok(Self {
            base,
            reported_lock: tokio::sync::Mutex::new(()),
            desired_lock: tokio::sync::Mutex::new(()),
            held: Arc::new(held),
        })
    }

    /// The versions held (cheap: memory).
    pub fn held(&self) -> &Arc<HeldVersions> {
        &self.held
    }

    /// `GET /v1/state`.
    pub fn get(&self) -> Result<StateDocs, NodeError> {
        Ok(StateDocs {
            desired: load(&self.base, KEY_DESIRED)?,
            reported: load(&self.base, KEY_REPORTED)?,
        })
    }

    /// The reported document as stored (the sync loop's report).
    pub fn reported(&self) -> Result<Versioned, NodeError> {
        load(&self.base, KEY_REPORTED)
    }

    /// `PATCH /v1/state/reported`: RFC 7396 `patch` on the reported document, one
    /// version on, if `if_match` (when given) names the current version. Answers once
    /// the new version is durable.
    pub async fn patch_reported(
        &self,
        patch: &Value,
        if_match: Option<u64>,
    ) -> Result<StateDocs, NodeError> {
        if !self.base.life.accepting() {
            return Err(NodeError::NotReady("shutting down"));
        }
        if !patch.is_object() {
            return Err(StateError::NotAnObject.into());
        }
        let len = serde_json::to_vec(patch).map(|b| b.len()).unwrap_or(0);
        if len > MAX_STATE_BYTES {
            return Err(StateError::TooLarge(len).into());
        }
        let reported = {
            let _one_writer = self.reported_lock.lock().await;
            let next =
                load(&self.base, KEY_REPORTED)?.write(&Write::Merge(patch.clone()), if_match)?;
            let mut batch = Batch::new();
            batch.kv_put(KV_STATE, KEY_REPORTED, record(&next));
            self.base.store.commit(batch).await?;
            self.held.reported.store(next.version, Ordering::SeqCst);
            next
        };
        Ok(StateDocs {
            desired: load(&self.base, KEY_DESIRED)?,
            reported,
        })
    }

    /// Held while a batch with `DESIRED_STATE` envelopes is checked and committed.
    pub(super) async fn lock_desired(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.desired_lock.lock().await
    }

    /// A desired version is durable now (under [`Self::lock_desired`]).
    pub(super) fn desired_stored(&self, version: u64) {
        self.held.desired.fetch_max(version, Ordering::SeqCst);
    }
}

/// The stored form of a document (its wire form: `{"doc","version"}`).
pub(super) fn record(v: &Versioned) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

fn load(base: &Base, key: &str) -> Result<Versioned, NodeError> {
    match base.store.kv_get(KV_STATE, key)? {
        None => Ok(Versioned::default()),
        Some(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| NodeError::Store(StoreError::Corrupt(format!("state record {key}: {e}")))),
    }
}

/// A `DESIRED_STATE` payload (PROTOCOL §16.4) as the node keeps it: an object of at
/// most [`MAX_STATE_BYTES`].
pub(super) fn desired_from_payload(plaintext: &[u8]) -> Result<Versioned, NodeError> {
    let d: crate::sync::wire::DesiredState = serde_json::from_slice(plaintext)
        .map_err(|e| NodeError::bad_request(format!("DESIRED_STATE payload: {e}")))?;
    if !d.desired.is_object() {
        return Err(StateError::NotAnObject.into());
    }
    let len = serde_json::to_vec(&d.desired).map(|b| b.len()).unwrap_or(0);
    if len > MAX_STATE_BYTES {
        return Err(StateError::TooLarge(len).into());
    }
    Ok(Versioned {
        doc: d.desired,
        version: d.version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn desired_payloads_are_objects_within_the_limit() {
        let v = desired_from_payload(br#"{"desired":{"fan":3},"version":4}"#).unwrap();
        assert_eq!((v.version, v.doc["fan"].as_u64()), (4, Some(3)));
        assert_eq!(
            desired_from_payload(br#"{"desired":[1],"version":4}"#)
                .unwrap_err()
                .code(),
            "bad_state"
        );
        assert_eq!(
            desired_from_payload(br#"{"desired":{}}"#)
                .unwrap_err()
                .code(),
            "bad_request"
        );
        let big = format!(
            r#"{{"desired":{{"x":"{}"}},"version":1}}"#,
            "y".repeat(MAX_STATE_BYTES)
        );
        assert_eq!(
            desired_from_payload(big.as_bytes()).unwrap_err().code(),
            "bad_state"
        );
    }
}
