//! Finding damaged records (undecodable, or with a missing or altered blob) and moving
//! them aside, straight on the engine: used on open (before the writer runs) and by
//! `doctor`.

use super::blobs::{hex, Blobs};
use super::codec::*;
use super::engine::{BatchOp, Engine};
use super::error::StoreError;
use super::records::{Body, MsgRecord};

pub struct Damage {
    pub tree: u8,
    pub key: Vec<u8>,
    pub reason: String,
    pub kind: DamageKind,
}

#[derive(PartialEq, Eq)]
pub enum DamageKind {
    Undecodable,
    MissingBlob,
    CorruptBlob,
}

/// Streams every message and dead-letter record and checks it decodes and that its
/// blob is present and intact. Holds only the list of damaged keys.
pub fn scan_damage(
    engine: &dyn Engine,
    blobs: &Blobs,
    live: &mut u64,
) -> Result<Vec<Damage>, StoreError> {
    let mut out = Vec::new();
    for tree in [T_MSG, T_DEAD] {
        engine.scan(tree, &[], None, &mut |k, v| {
            match MsgRecord::decode(v) {
                Ok(rec) => {
                    if tree == T_MSG {
                        *live += 1;
                    }
                    if let Body::Blob { sha256, .. } = rec.body {
                        match blobs.get(&sha256) {
                            Ok(_) => {}
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                                out.push(Damage {
                                    tree,
                                    key: k.to_vec(),
                                    reason: format!("blob {} missing", hex(&sha256)),
                                    kind: DamageKind::MissingBlob,
                                })
                            }
                            Err(e) => out.push(Damage {
                                tree,
                                key: k.to_vec(),
                                reason: format!("blob {}: {e}", hex(&sha256)),
                                kind: DamageKind::CorruptBlob,
                            }),
                        }
                    }
                }
                Err(e) => out.push(Damage {
                    tree,
                    key: k.to_vec(),
                    reason: e.0,
                    kind: DamageKind::Undecodable,
                }),
            }
            true
        })?;
    }
    Ok(out)
}

/// Moves damaged records to the quarantine tree in one batch (used on open, before the
/// writer runs). Returns report lines.
pub fn quarantine_now(engine: &dyn Engine, damage: Vec<Damage>) -> Result<Vec<String>, StoreError> {
    let mut batch = Vec::new();
    let mut lines = Vec::new();
    for d in damage {
        let v = match engine.get(d.tree, &d.key)? {
            Some(v) => v,
            None => continue,
        };
        let mut qk = vec![d.tree];
        qk.extend_from_slice(&d.key);
        let mut w = W::default();
        w.str(&d.reason).bytes(&v);
        lines.push(format!("{}/{}: {}", d.tree, hex(&d.key), d.reason));
        batch.push(BatchOp::Put {
            tree: T_QUAR,
            key: qk,
            value: w.0,
        });
        batch.push(BatchOp::Delete {
            tree: d.tree,
            key: d.key,
        });
    }
    if !batch.is_empty() {
        engine.apply(&batch)?;
    }
    Ok(lines)
}

pub fn quarantine_list(engine: &dyn Engine) -> Result<Vec<String>, StoreError> {
    let mut out = Vec::new();
    engine.scan(T_QUAR, &[], None, &mut |k, v| {
        let mut r = R(v);
        let reason = r.string().unwrap_or_else(|_| "?".into());
        let (tree, key) = k.split_first().map(|(t, k)| (*t, k)).unwrap_or((0, &[]));
        out.push(format!("{tree}/{}: {reason}", hex(key)));
        true
    })?;
    Ok(out)
}
