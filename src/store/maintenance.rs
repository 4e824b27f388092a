//! Doctor (integrity + damage report), online backup and compaction: the maintenance
//! calls of [`Store`]. The damage scan they share with the open is in `damage`.

use std::path::Path;

use super::blobs::{hex, Blobs};
use super::codec::*;
use super::counter::Counter;
use super::damage::{quarantine_list, scan_damage, DamageKind};
use super::error::StoreError;
use super::types::DoctorReport;
use super::Store;

impl Store {
    /// Full health check: engine integrity, every record decoded, every blob hashed,
    /// counters compared with the records, and the quarantine list. Reads the whole
    /// store once (streaming); run it from a blocking context.
    pub fn doctor(&self) -> Result<DoctorReport, StoreError> {
        let e = self.inner.engine.as_ref();
        let mut report = DoctorReport {
            engine: e.name().to_owned(),
            ..Default::default()
        };
        // Engine errors are findings here, not failures of the doctor.
        match e.integrity_check() {
            Ok(lines) => report.integrity = lines,
            Err(err) => report.integrity.push(err.to_string()),
        }
        let mut live = 0;
        let damage = match scan_damage(e, &self.inner.blobs, &mut live) {
            Ok(d) => d,
            Err(err) => {
                report.integrity.push(format!("scan stopped: {err}"));
                Vec::new()
            }
        };
        for d in damage {
            let line = format!("{}/{}: {}", d.tree, hex(&d.key), d.reason);
            match d.kind {
                DamageKind::Undecodable => report.undecodable.push(line),
                DamageKind::MissingBlob => report.missing_blobs.push(line),
                DamageKind::CorruptBlob => report.corrupt_blobs.push(line),
            }
        }
        report.messages = live;
        let mut counted = 0;
        if let Err(err) = e.scan(T_COUNT, &[], None, &mut |_, v| {
            counted += Counter::decode(v).map(|c| c.depth).unwrap_or(0);
            true
        }) {
            report.integrity.push(format!("counters: {err}"));
        }
        report.counted = counted;
        // Counters include records that are damaged but not yet quarantined.
        report.messages += report
            .undecodable
            .iter()
            .chain(&report.missing_blobs)
            .chain(&report.corrupt_blobs)
            .filter(|l| l.starts_with(&format!("{T_MSG}/")))
            .count() as u64;
        match quarantine_list(e) {
            Ok(q) => report.quarantined = q,
            Err(err) => report.integrity.push(format!("quarantine list: {err}")),
        }
        Ok(report)
    }

    /// Consistent online snapshot into directory `dest` (must not exist or be empty):
    /// the engine's own snapshot plus the blob files.
    pub fn backup_to(&self, dest: &Path) -> Result<(), StoreError> {
        std::fs::create_dir_all(dest).map_err(|e| StoreError::from_io("create backup dir", &e))?;
        self.inner.engine.backup_to(dest)?;
        let src = &self.inner.blobs;
        let dst = Blobs::open(dest).map_err(|e| StoreError::from_io("create backup blobs", &e))?;
        for h in src
            .list()
            .map_err(|e| StoreError::from_io("list blobs", &e))?
        {
            match src.get(&h) {
                Ok(data) => dst
                    .put(&h, &data)
                    .map_err(|e| StoreError::from_io("copy blob", &e))?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::from_io("read blob", &e)),
            }
        }
        Ok(())
    }

    /// Copies the WAL into the database and truncates it; a store created with
    /// `auto_vacuum=INCREMENTAL` (by older builds, DECISIONS D10) also gives its free
    /// pages back to the filesystem. Newer stores reuse free pages instead.
    pub fn compact(&self) -> Result<(), StoreError> {
        Ok(self.inner.engine.compact()?)
    }
}
