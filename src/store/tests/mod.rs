//! Store tests. Every behaviour is a generic fn over [`EngineKind`]; `for_each_engine!`
//! instantiates it once per compiled engine, so both engines pass the same suite.

use std::path::Path;
use std::sync::Arc;

use super::counter::*;
use super::records::*;
use super::*;
use crate::clock::ManualClock;

mod conformance;
mod corruption;
mod crash;
mod diskfull;
mod durability;
mod group;
mod model;
mod powercut;
mod powercut_shim;
mod rss;

pub const T0: u64 = 1_780_000_000_000;

pub fn opts(kind: EngineKind) -> StoreOptions {
    StoreOptions {
        engine: kind,
        ..StoreOptions::default()
    }
}

pub fn open(kind: EngineKind, dir: &Path, clock: &ManualClock) -> Store {
    Store::open(dir, opts(kind), Arc::new(clock.clone())).unwrap()
}

pub fn msg(peer: &str, id: &str, prio: u8, body: &[u8]) -> NewMessage {
    NewMessage {
        queue: "outbox".into(),
        peer: peer.into(),
        message_id: id.into(),
        payload_type: "telemetry".into(),
        priority: prio,
        created_at_ms: T0,
        expires_at_ms: T0 + 3_600_000,
        body: body.to_vec(),
        max_attempts: None,
        dedup_until_ms: None,
    }
}

/// Ids a sweep at `now_ms` expired, sorted.
pub fn swept_ids(s: &Store, now_ms: u64) -> Vec<String> {
    let mut ids: Vec<String> = s
        .sweep_expired(now_ms)
        .wait()
        .unwrap()
        .into_iter()
        .map(|e| e.message_id)
        .collect();
    ids.sort();
    ids
}

pub fn ids(v: &[StoredMessage]) -> Vec<String> {
    v.iter().map(|m| m.message_id.clone()).collect()
}

/// Instantiates a generic test fn for every engine compiled in.
macro_rules! for_each_engine {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[test] fn $name() { super::$name(crate::store::EngineKind::Sqlite) })*
        }
        #[cfg(feature = "sled")]
        mod sled {
            $(#[test] fn $name() { super::$name(crate::store::EngineKind::Sled) })*
        }
    };
}
pub(crate) use for_each_engine;

/// For a test engine that wraps another in a field `inner`: its [`Reader`] impl, all
/// pass-through. Use with [`pass_through_engine_methods`].
///
/// [`Reader`]: crate::store::engine::Reader
macro_rules! pass_through_reader {
    ($t:ty) => {
        impl crate::store::engine::Reader for $t {
            fn get(
                &self,
                tree: crate::store::engine::Tree,
                key: &[u8],
            ) -> Result<Option<Vec<u8>>, crate::store::engine::EngineError> {
                self.inner.get(tree, key)
            }
            fn scan(
                &self,
                tree: crate::store::engine::Tree,
                start: &[u8],
                end: Option<&[u8]>,
                f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
            ) -> Result<(), crate::store::engine::EngineError> {
                self.inner.scan(tree, start, end, f)
            }
        }
    };
}
pub(crate) use pass_through_reader;

/// Inside such a wrapper's `impl Engine`: every method except `name`, `commit_group`
/// and `sync` (what the wrapper watches or holds up) passes through to `inner`, and
/// `write_group` is `commit_group` then `sync`, so it goes through the wrapper too.
macro_rules! pass_through_engine_methods {
    () => {
        fn apply(
            &self,
            batch: &[crate::store::engine::BatchOp],
        ) -> Result<(), crate::store::engine::EngineError> {
            self.inner.apply(batch)
        }
        fn write_group(
            &self,
            build: &mut crate::store::engine::GroupBuilder<'_>,
        ) -> Result<(), crate::store::engine::EngineError> {
            self.commit_group(build)?;
            self.sync()
        }
        fn integrity_check(&self) -> Result<Vec<String>, crate::store::engine::EngineError> {
            self.inner.integrity_check()
        }
        fn with_write_lock(
            &self,
            f: &mut dyn FnMut(&dyn crate::store::engine::Reader),
        ) -> Result<(), crate::store::engine::EngineError> {
            self.inner.with_write_lock(f)
        }
        fn backup_to(&self, dest: &Path) -> Result<(), crate::store::engine::EngineError> {
            self.inner.backup_to(dest)
        }
        fn disk_bytes(&self) -> u64 {
            self.inner.disk_bytes()
        }
    };
}
pub(crate) use pass_through_engine_methods;

/// A test that did not run says so where a plain `cargo test` shows it (libtest keeps a
/// passing test's `eprintln!` to itself): one `SKIPPED <what>: <why>` line on the
/// process's own stderr.
pub(crate) fn skipped(what: &str, why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {what}: {why}");
}
