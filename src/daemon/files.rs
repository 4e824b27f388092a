//! Files a role keeps in its data directory that both roles and their shared parts
//! read: the key pair, the stored identity document, and how a file is written so that
//! a power cut leaves the old or the new one.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::config::Role;
use crate::envelope::{IdentityDocument, Keys};

pub fn identity_path(data_dir: &Path) -> PathBuf {
    data_dir.join("identity.json")
}

/// The directory `path` is in: `.` for a bare file name (whose `parent()` is "").
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// temp + fsync + rename + fsync(dir): the file is either the old or the new one after
/// a power cut, never half-written.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = parent_dir(path);
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file")
    ));
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

pub fn read_identity(data_dir: &Path) -> anyhow::Result<IdentityDocument> {
    let p = identity_path(data_dir);
    let bytes = std::fs::read(&p)
        .with_context(|| format!("reading {} (run `outpost init` first)", p.display()))?;
    let doc: IdentityDocument =
        serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", p.display()))?;
    Ok(doc)
}

/// The document peers are given (`outpost identity`, and a gateway's enrollment
/// answers): the stored one, carrying the pin of the certificate a gateway serves now
/// (`api.tls_cert_file`). When the stored pin differs (the operator brought a new
/// certificate with a new key) or is missing, the document is signed again with the
/// current one (same keys and `created_at`).
pub fn published_identity(
    cfg: &crate::config::Config,
    keys: &crate::envelope::Keys,
) -> anyhow::Result<IdentityDocument> {
    let doc = read_identity(&cfg.data_dir)?;
    let Some((cert, _)) = cfg.tls.as_ref().filter(|_| doc.role == "gateway") else {
        return Ok(doc);
    };
    let pin = crate::tls_pin::spki_sha256_of_pem_file(cert)
        .map_err(|e| anyhow::anyhow!("api.tls_cert_file {e}"))?;
    if doc.tls_pin() == Some(pin) {
        return Ok(doc);
    }
    Ok(IdentityDocument::with_tls_pin(
        &doc.node_id,
        &doc.role,
        keys,
        &doc.created_at,
        Some(pin),
    ))
}

pub fn keys_path(data_dir: &Path) -> PathBuf {
    data_dir.join("keys.json")
}

/// The data dir holds keys: 0700, created if missing.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

pub fn write_identity(data_dir: &Path, doc: &IdentityDocument) -> anyhow::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(doc)?;
    bytes.push(b'\n');
    write_atomic(&identity_path(data_dir), &bytes, 0o644)?;
    Ok(())
}

/// A new key pair written to `keys_path` (0600; temp file, fsync, rename, fsync of the
/// directory: [`Keys::save`]), never over an existing one. `outpost init` and a node's
/// first start both make their keys here.
pub fn create_keys(keys_path: &Path) -> anyhow::Result<Keys> {
    let keys = Keys::generate();
    keys.save(keys_path)
        .with_context(|| format!("writing {}", keys_path.display()))?;
    Ok(keys)
}

/// The identity document of `keys`, dated now (whole seconds).
pub fn new_identity(
    node_id: &str,
    role: Role,
    keys: &Keys,
    tls_pin: Option<[u8; 32]>,
) -> anyhow::Result<IdentityDocument> {
    let now_ms = crate::clock::system().now_ms();
    let created_at = crate::token::format_rfc3339_ms(now_ms - now_ms % 1000)
        .ok_or_else(|| anyhow::anyhow!("clock out of range"))?;
    Ok(IdentityDocument::with_tls_pin(
        node_id,
        role.as_str(),
        keys,
        &created_at,
        tls_pin,
    ))
}
