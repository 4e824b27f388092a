//! Content-addressed blob files for bodies over the inline threshold.
//!
//! Large payloads stay out of the engine (sled in particular degrades with big values,
//! and SQLite would copy them through the WAL twice). A blob is written as temp file →
//! fsync → rename → fsync(dir), so after a crash it is either whole under its final name
//! or absent. The name is the SHA-256 of the content, so writing the same body twice is
//! idempotent and a reader can verify what it reads.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

pub const BLOB_DIR: &str = "blobs";

#[derive(Debug, Clone)]
pub struct Blobs {
    root: PathBuf,
}

pub fn sha256(data: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(data);
    h.finalize().into()
}

pub fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

impl Blobs {
    pub fn open(store_dir: &Path) -> std::io::Result<Self> {
        let root = store_dir.join(BLOB_DIR);
        fs::create_dir_all(&root)?;
        Ok(Self { root })
    }

    pub fn path(&self, hash: &[u8; 32]) -> PathBuf {
        let h = hex(hash);
        self.root.join(&h[..2]).join(&h[2..])
    }

    /// Durably writes `data` under its hash (no-op if already present).
    pub fn put(&self, hash: &[u8; 32], data: &[u8]) -> std::io::Result<()> {
        let dest = self.path(hash);
        if dest.is_file() {
            return Ok(());
        }
        let dir = dest.parent().unwrap_or(&self.root).to_path_buf();
        let created_dir = !dir.is_dir();
        fs::create_dir_all(&dir)?;
        if created_dir {
            fsync_dir(&self.root)?;
        }
        let tmp = dir.join(format!(".tmp-{}-{}", hex(&hash[..8]), std::process::id()));
        let res = (|| {
            let mut f = File::create(&tmp)?;
            f.write_all(data)?;
            f.sync_all()?;
            fs::rename(&tmp, &dest)?;
            fsync_dir(&dir)
        })();
        if res.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        res
    }

    /// Reads a blob and verifies its hash; a mismatch is reported as `InvalidData`.
    pub fn get(&self, hash: &[u8; 32]) -> std::io::Result<Vec<u8>> {
        let data = fs::read(self.path(hash))?;
        if sha256(&data) != *hash {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("blob {} does not match its hash", hex(hash)),
            ));
        }
        Ok(data)
    }

    pub fn remove(&self, hash: &[u8; 32]) -> std::io::Result<()> {
        match fs::remove_file(self.path(hash)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Every blob hash present on disk (for doctor / orphan collection). Streams the
    /// directory tree; blob counts are small (only bodies over the threshold).
    pub fn list(&self) -> std::io::Result<Vec<[u8; 32]>> {
        let mut out = Vec::new();
        for d in fs::read_dir(&self.root)?.flatten() {
            let prefix = d.file_name().to_string_lossy().into_owned();
            if prefix.len() != 2 || !d.path().is_dir() {
                continue;
            }
            for f in fs::read_dir(d.path())?.flatten() {
                let name = f.file_name().to_string_lossy().into_owned();
                if let Some(h) = unhex(&format!("{prefix}{name}")) {
                    out.push(h);
                }
            }
        }
        Ok(out)
    }
}

pub fn unhex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}
