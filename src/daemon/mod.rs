//! What both roles' daemons share: the data directory's lock ([`lock`]), the API
//! socket's address file ([`listen`]), the
//! trust store as the running daemon sees it ([`trust`]), batch work on all cores
//! ([`spread`]), and the store opened with the
//! config's limits ([`open_store`]). The serve loop is [`crate::http_server`]. The node
//! role (`app`) and the gateway role (`gateway`) build on this; neither imports the
//! other's wiring.

pub mod files;
pub mod listen;
pub mod lock;
pub mod rotation;
pub mod spread;
#[cfg(feature = "gateway")]
pub mod starting;
pub mod trust;

use crate::config::Config;
use crate::store::{Store, StoreOptions};

/// Store options from the config: both roles keep their queues with the same limits.
pub fn store_options(cfg: &Config) -> StoreOptions {
    StoreOptions {
        engine: cfg.store_engine,
        max_messages_per_recipient: cfg.queue.max_messages_per_recipient,
        max_store_bytes: cfg.queue.max_store_bytes,
        max_message_bytes: cfg.queue.max_message_bytes,
        max_result_store_bytes: cfg.queue.max_result_store_bytes,
        max_attempts: cfg.queue.max_attempts,
        ..StoreOptions::default()
    }
}

/// `<data_dir>/store`: where both roles keep their store.
pub fn store_dir(data_dir: &std::path::Path) -> std::path::PathBuf {
    data_dir.join("store")
}

/// Open (creating if needed) the store in `<data_dir>/store` with the config's limits.
pub fn open_store(
    cfg: &Config,
    clock: crate::clock::SharedClock,
) -> Result<Store, crate::store::StoreError> {
    let dir = store_dir(&cfg.data_dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| crate::store::StoreError::from_io("store dir", &e))?;
    Store::open(&dir, store_options(cfg), clock)
}
