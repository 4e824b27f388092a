//! The optional sled 0.34 engine (`--features sled`).
//!
//! sled's own `flush()` ends in `sync_file_range`, which does not flush the device write
//! cache or file metadata (sled#1452); measured here, 20,000 insert+flush calls reached
//! the disk as 2 device flushes. So after every flush we `fsync` sled's files ourselves.
//! All trees live in sled's default tree under a one-byte prefix, so a batch across trees
//! is one atomic `apply_batch`. The page cache is kept small for Pi-class RAM, and the
//! store keeps large payloads out of sled (blob files), which sled handles poorly.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{BatchOp, Engine, EngineError, Tree};

/// Directory of the sled database inside the store directory.
pub const SLED_DIR: &str = "sled";
const CACHE_BYTES: u64 = 4 * 1024 * 1024;

pub struct SledEngine {
    dir: PathBuf,
    db: sled::Db,
    /// Held open so the per-batch fsync does not pay an `open` each time.
    files: Mutex<Vec<File>>,
}

fn err(e: sled::Error) -> EngineError {
    match e {
        sled::Error::Io(io) => EngineError::from_io(&io),
        sled::Error::Corruption { .. } => EngineError::Corrupt(e.to_string()),
        other => EngineError::Other(other.to_string()),
    }
}

fn prefixed(tree: Tree, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(tree);
    k.extend_from_slice(key);
    k
}

impl SledEngine {
    pub fn open(dir: &Path) -> Result<Self, EngineError> {
        let dir = dir.join(SLED_DIR);
        let db = sled::Config::new()
            .path(&dir)
            .cache_capacity(CACHE_BYTES)
            .mode(sled::Mode::LowSpace)
            .flush_every_ms(None)
            .open()
            .map_err(err)?;
        let me = Self {
            dir,
            db,
            files: Mutex::new(Vec::new()),
        };
        me.reopen_files()?;
        Ok(me)
    }

    /// (Re)opens every regular file sled keeps (`db`, `conf`, `snap.*`, blobs) plus the
    /// directory itself, so a new snapshot file is fsynced too.
    fn reopen_files(&self) -> Result<(), EngineError> {
        let mut files = Vec::new();
        files.push(File::open(&self.dir).map_err(|e| EngineError::from_io(&e))?);
        let rd = std::fs::read_dir(&self.dir).map_err(|e| EngineError::from_io(&e))?;
        for entry in rd.flatten() {
            if entry.file_type().map(|t| t.is_file()).unwrap_or(false) {
                if let Ok(f) = File::open(entry.path()) {
                    files.push(f);
                }
            }
        }
        let mut guard = self
            .files
            .lock()
            .map_err(|_| EngineError::Other("file list poisoned".into()))?;
        *guard = files;
        Ok(())
    }

    fn fsync_all(&self) -> Result<(), EngineError> {
        // Snapshot files come and go; refresh the list, then fsync each.
        self.reopen_files()?;
        let guard = self
            .files
            .lock()
            .map_err(|_| EngineError::Other("file list poisoned".into()))?;
        for f in guard.iter() {
            f.sync_all().map_err(|e| EngineError::from_io(&e))?;
        }
        Ok(())
    }
}

impl Engine for SledEngine {
    fn name(&self) -> &'static str {
        "sled"
    }

    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        Ok(self
            .db
            .get(prefixed(tree, key))
            .map_err(err)?
            .map(|v| v.to_vec()))
    }

    fn scan(
        &self,
        tree: Tree,
        start: &[u8],
        end: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), EngineError> {
        let lo = prefixed(tree, start);
        let hi = match end {
            Some(e) => prefixed(tree, e),
            None => {
                if tree == u8::MAX {
                    // No upper bound: scan to the end of the keyspace.
                    for item in self.db.range(lo..) {
                        let (k, v) = item.map_err(err)?;
                        if !f(&k[1..], &v) {
                            break;
                        }
                    }
                    return Ok(());
                }
                vec![tree + 1]
            }
        };
        for item in self.db.range(lo..hi) {
            let (k, v) = item.map_err(err)?;
            if !f(&k[1..], &v) {
                break;
            }
        }
        Ok(())
    }

    fn apply(&self, batch: &[BatchOp]) -> Result<(), EngineError> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut b = sled::Batch::default();
        for op in batch {
            match op {
                BatchOp::Put { tree, key, value } => {
                    b.insert(prefixed(*tree, key), value.as_slice())
                }
                BatchOp::Delete { tree, key } => b.remove(prefixed(*tree, key)),
            }
        }
        self.db.apply_batch(b).map_err(err)?;
        self.db.flush().map_err(err)?;
        // sled#1452: flush() uses sync_file_range; make it really durable.
        self.fsync_all()
    }

    fn integrity_check(&self) -> Result<Vec<String>, EngineError> {
        // sled has no checker; walking every key forces every page to decode.
        let mut problems = Vec::new();
        for item in self.db.iter() {
            if let Err(e) = item {
                problems.push(e.to_string());
                break;
            }
        }
        Ok(problems)
    }

    fn backup_to(&self, dest: &Path) -> Result<(), EngineError> {
        // sled iterators read one consistent-enough view per key; copy into a fresh db.
        let target = dest.join(SLED_DIR);
        let copy = sled::Config::new().path(&target).open().map_err(err)?;
        for item in self.db.iter() {
            let (k, v) = item.map_err(err)?;
            copy.insert(k, v).map_err(err)?;
        }
        copy.flush().map_err(err)?;
        drop(copy);
        for entry in std::fs::read_dir(&target)
            .map_err(|e| EngineError::from_io(&e))?
            .flatten()
        {
            if let Ok(f) = File::open(entry.path()) {
                f.sync_all().map_err(|e| EngineError::from_io(&e))?;
            }
        }
        Ok(())
    }

    fn disk_bytes(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }
}
