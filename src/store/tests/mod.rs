//! Store tests. Every behaviour is a generic fn over [`EngineKind`]; `for_each_engine!`
//! instantiates it once per compiled engine, so both engines pass the same suite.

use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::clock::ManualClock;

mod conformance;
mod corruption;
mod crash;
mod diskfull;
mod durability;
mod group;
mod model;
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
