//! A node's key rotation on disk (PROTOCOL §15.7), crash-safe at every step.
//!
//! Files in the data directory (all 0600, each written whole: temp file, fsync, rename,
//! fsync of the directory):
//! - `keys.next.json`: the new pair, made by `outpost identity rotate`;
//! - `rotation.json`: the statement waiting for the gateway (the running node delivers
//!   it on its signed API and switches when the gateway accepts);
//! - `keys.previous.json`: the retired pair, kept to open envelopes sealed to it before
//!   the switch until `key-history.json`'s `previous_until_ms`, then removed;
//! - `key-history.json`: every retired signing key, for `outpost audit verify` (the
//!   log's older checkpoints carry their signatures).
//!
//! The switch ([`finish`]) is idempotent: a crash anywhere in it leaves `rotation.json`
//! in place, the next start delivers the statement again (the gateway answers "already
//! applied") and the switch runs again from where it stopped.

use std::path::{Path, PathBuf};

use anyhow::Context;
use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};

use super::files::{keys_path, write_atomic, write_identity};
use crate::config::{Config, Role};
use crate::envelope::{b64_encode, parse_sign_pk, KeyRotation, Keys, ROTATION_GRACE_MS};

pub fn next_keys_path(data_dir: &Path) -> PathBuf {
    data_dir.join("keys.next.json")
}

pub fn previous_keys_path(data_dir: &Path) -> PathBuf {
    data_dir.join("keys.previous.json")
}

pub fn rotation_path(data_dir: &Path) -> PathBuf {
    data_dir.join("rotation.json")
}

pub fn history_path(data_dir: &Path) -> PathBuf {
    data_dir.join("key-history.json")
}

/// `rotation.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Pending {
    v: u32,
    requested_at_ms: u64,
    statement: KeyRotation,
    /// `identity rotate --compromised`: the gateway is asked for no grace.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    no_grace: bool,
    /// Who ran `outpost identity rotate` (`local:<user>`): a gateway's own audit entry
    /// of its rotation names them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    requested_by: Option<String>,
}

/// A rotation `outpost identity rotate` left for the running role.
#[derive(Debug, Clone)]
pub struct Request {
    pub statement: KeyRotation,
    /// `--compromised`: no grace for the retired key.
    pub no_grace: bool,
    /// Who asked (absent in a file from before it was kept); read by a gateway only.
    #[cfg_attr(not(feature = "gateway"), allow(dead_code))]
    pub requested_by: Option<String>,
}

/// `key-history.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct History {
    pub v: u32,
    /// Retired signing keys (base64url), oldest first.
    pub retired: Vec<String>,
    /// `keys.previous.json` opens envelopes until then.
    pub previous_until_ms: u64,
}

fn write_json<T: Serialize>(path: &Path, v: &T) -> anyhow::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(v)?;
    bytes.push(b'\n');
    write_atomic(path, &bytes, 0o600).with_context(|| format!("writing {}", path.display()))
}

/// The statement `outpost identity rotate` left for the running node, if any.
pub fn pending(data_dir: &Path) -> anyhow::Result<Option<KeyRotation>> {
    Ok(pending_request(data_dir)?.map(|r| r.statement))
}

/// [`pending`], whether it asks for no grace (`--compromised`) and who asked.
pub fn pending_request(data_dir: &Path) -> anyhow::Result<Option<Request>> {
    let path = rotation_path(data_dir);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let p: Pending =
        serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", path.display()))?;
    Ok(Some(Request {
        statement: p.statement,
        no_grace: p.no_grace,
        requested_by: p.requested_by,
    }))
}

/// The new pair of the pending rotation (`keys.next.json`): what signs the rotation's
/// retry once a no-grace rotation was applied and the retired key is refused.
pub fn next_keys(data_dir: &Path) -> anyhow::Result<Keys> {
    Ok(Keys::load(&next_keys_path(data_dir))?)
}

pub fn history(data_dir: &Path) -> anyhow::Result<History> {
    let path = history_path(data_dir);
    match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b).with_context(|| format!("parsing {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(History {
            v: 1,
            ..History::default()
        }),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Every signing key this node has had, oldest first, the current one last: what its
/// audit log's checkpoints are verified with.
pub fn audit_keys(data_dir: &Path, current: &Keys) -> anyhow::Result<Vec<VerifyingKey>> {
    let mut keys = Vec::new();
    for k in history(data_dir)?.retired {
        let bytes = crate::envelope::b64_decode(&k)
            .map_err(|_| anyhow::anyhow!("key-history.json: a key is not base64url"))?;
        keys.push(parse_sign_pk(&bytes)?);
    }
    keys.push(current.sign_pk());
    Ok(keys)
}

/// `outpost identity rotate --prepare`: the new key pair only, in `keys.next.json`, so
/// that it can be copied to every replica of a gateway before the rotation. Returns the
/// new pair (an existing `keys.next.json` is kept).
pub fn prepare(cfg: &Config) -> anyhow::Result<Keys> {
    let next = next_keys_path(&cfg.data_dir);
    if next.exists() {
        return Ok(Keys::load(&next)?);
    }
    super::files::create_keys(&next)
}

/// `outpost identity rotate`: the statement retiring the current key pair for the one
/// in `keys.next.json` (made now unless `--prepare` made it), for the running role (or
/// its next start) to apply: a node delivers it to its gateway, a gateway publishes it
/// to its nodes. Refused while another rotation waits. `by` is who asked (kept for the
/// gateway's audit entry).
pub fn begin(cfg: &Config, now_ms: u64, no_grace: bool, by: &str) -> anyhow::Result<KeyRotation> {
    let dir = &cfg.data_dir;
    if let Some(p) = pending(dir)? {
        anyhow::bail!(
            "a key rotation to {} is already waiting for the gateway (see `outpost status`); \
             it completes on the node's next sync",
            b64_encode(&p.new_doc.sign_pk)
        );
    }
    let old = Keys::load(&keys_path(dir))?;
    // A `keys.next.json` without `rotation.json` was never used: from `--prepare`, or
    // from a rotate cut short.
    let new = prepare(cfg)?;
    let tls_pin = match (&cfg.tls, cfg.role) {
        (Some((cert, _)), Role::Gateway) => Some(
            crate::tls_pin::spki_sha256_of_pem_file(cert)
                .map_err(|e| anyhow::anyhow!("api.tls_cert_file {e}"))?,
        ),
        _ => None,
    };
    let doc = super::files::new_identity(&cfg.node_id, cfg.role, &new, tls_pin)?;
    let statement = KeyRotation::new(&old, &new, doc);
    write_json(
        &rotation_path(dir),
        &Pending {
            v: 1,
            requested_at_ms: now_ms,
            statement: statement.clone(),
            no_grace,
            requested_by: Some(by.to_string()),
        },
    )?;
    Ok(statement)
}

/// The gateway accepted `rot`: switch the files (idempotently, see the module docs).
/// Returns the new pair and the retired one with its grace deadline.
pub fn finish(
    data_dir: &Path,
    rot: &KeyRotation,
    now_ms: u64,
) -> anyhow::Result<(Keys, Keys, u64)> {
    let (cur_path, next, prev) = (
        keys_path(data_dir),
        next_keys_path(data_dir),
        previous_keys_path(data_dir),
    );
    let current = Keys::load(&cur_path)?;
    let is = |k: &Keys, pk: &[u8]| k.sign_pk().as_bytes().as_slice() == pk;
    if is(&current, &rot.old_sign_pk) {
        let new = Keys::load(&next)?;
        anyhow::ensure!(
            is(&new, &rot.new_doc.sign_pk),
            "{} does not hold the key of the pending rotation",
            next.display()
        );
        if prev.exists() {
            std::fs::remove_file(&prev).with_context(|| format!("removing {}", prev.display()))?;
        }
        current.save(&prev)?;
        std::fs::rename(&next, &cur_path)
            .with_context(|| format!("renaming {} to {}", next.display(), cur_path.display()))?;
        std::fs::File::open(data_dir)?.sync_all()?;
    } else {
        anyhow::ensure!(
            is(&current, &rot.new_doc.sign_pk),
            "{} holds neither key of the pending rotation",
            cur_path.display()
        );
    }
    let (new, old) = (Keys::load(&cur_path)?, Keys::load(&prev)?);
    anyhow::ensure!(
        is(&old, &rot.old_sign_pk),
        "{} does not hold the retired key",
        prev.display()
    );
    write_identity(data_dir, &rot.new_doc)?;
    let mut h = history(data_dir)?;
    let old_pk = b64_encode(&rot.old_sign_pk);
    if !h.retired.contains(&old_pk) {
        h.retired.push(old_pk);
        h.previous_until_ms = now_ms.saturating_add(ROTATION_GRACE_MS);
    }
    h.v = 1;
    let until = h.previous_until_ms;
    write_json(&history_path(data_dir), &h)?;
    // A gateway replica applies a rotation another replica published: it has no
    // `rotation.json` of its own.
    match std::fs::remove_file(rotation_path(data_dir)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    std::fs::File::open(data_dir)?.sync_all()?;
    Ok((new, old, until))
}

/// At start: the retired pair while its grace lasts; once it is over, its file is
/// removed (the secret is no longer needed).
pub fn load_previous(data_dir: &Path, now_ms: u64) -> anyhow::Result<Option<(Keys, u64)>> {
    let prev = previous_keys_path(data_dir);
    if !prev.exists() {
        return Ok(None);
    }
    let until = history(data_dir)?.previous_until_ms;
    if now_ms >= until {
        std::fs::remove_file(&prev).with_context(|| format!("removing {}", prev.display()))?;
        tracing::info!(event = "retired_key_removed", path = %prev.display());
        return Ok(None);
    }
    Ok(Some((Keys::load(&prev)?, until)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(dir: &Path) -> Config {
        let text = format!(
            "[identity]\nnode_id = \"node:rot\"\nrole = \"node\"\ndata_dir = \"{}\"\n",
            dir.display()
        );
        let p = dir.join("outpost.toml");
        std::fs::write(&p, text).unwrap();
        let cfg = crate::config::load(&p).unwrap();
        super::super::files::create_private_dir(dir).unwrap();
        let k = super::super::files::create_keys(&keys_path(dir)).unwrap();
        write_identity(
            dir,
            &super::super::files::new_identity("node:rot", Role::Node, &k, None).unwrap(),
        )
        .unwrap();
        cfg
    }

    #[test]
    fn begin_then_finish_switches_keys_and_finish_is_idempotent() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = node(tmp.path());
        let dir = tmp.path();
        let old_pk = Keys::load(&keys_path(dir)).unwrap().sign_pk();
        let rot = begin(&cfg, 1_000, false, "local:alice").unwrap();
        assert!(
            begin(&cfg, 1_001, false, "local:alice").is_err(),
            "one rotation at a time"
        );
        assert_eq!(pending(dir).unwrap().as_ref(), Some(&rot));
        let asked = pending_request(dir).unwrap().unwrap();
        assert_eq!(asked.requested_by.as_deref(), Some("local:alice"));
        let (new, old, until) = finish(dir, &rot, 2_000).unwrap();
        assert_eq!(old.sign_pk(), old_pk);
        assert_eq!(new.sign_pk().as_bytes().as_slice(), rot.new_doc.sign_pk);
        assert_eq!(until, 2_000 + ROTATION_GRACE_MS);
        assert!(pending(dir).unwrap().is_none());
        assert_eq!(
            super::super::files::read_identity(dir).unwrap(),
            rot.new_doc
        );
        assert_eq!(audit_keys(dir, &new).unwrap(), vec![old_pk, new.sign_pk()]);
        // A crash before rotation.json was removed: the next finish changes nothing.
        write_json(
            &rotation_path(dir),
            &Pending {
                v: 1,
                requested_at_ms: 1_000,
                statement: rot.clone(),
                no_grace: false,
                requested_by: None,
            },
        )
        .unwrap();
        let (again, _, until2) = finish(dir, &rot, 3_000).unwrap();
        assert_eq!(again.sign_pk(), new.sign_pk());
        assert_eq!(until2, until);
        assert_eq!(history(dir).unwrap().retired.len(), 1);
        for mode in [keys_path(dir), previous_keys_path(dir), history_path(dir)] {
            use std::os::unix::fs::PermissionsExt;
            let m = std::fs::metadata(&mode).unwrap().permissions().mode() & 0o777;
            assert_eq!(m, 0o600, "{}", mode.display());
        }
        // The retired pair is kept for the grace, then removed.
        assert!(load_previous(dir, until - 1).unwrap().is_some());
        assert!(load_previous(dir, until).unwrap().is_none());
        assert!(!previous_keys_path(dir).exists());
    }
}
