//! One async lock per key (a job id, a caller's job), created on first use and forgotten
//! when nobody holds or waits for it. Used so that two concurrent requests for the same
//! job run it once while different jobs never wait for each other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

type Slot = tokio::sync::Mutex<()>;

#[derive(Default)]
pub struct KeyedLocks {
    map: Mutex<HashMap<String, Weak<Slot>>>,
}

/// Held for as long as the caller owns the key.
pub struct KeyedGuard {
    _held: tokio::sync::OwnedMutexGuard<()>,
}

/// Entries are swept (dead `Weak`s dropped) when the table grows past this.
const SWEEP_AT: usize = 1024;

impl KeyedLocks {
    pub fn new() -> Self {
        Self::default()
    }

    /// Waits until no one else holds `key`, then holds it until the guard is dropped.
    pub async fn lock(&self, key: &str) -> KeyedGuard {
        let slot = {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            if map.len() >= SWEEP_AT {
                map.retain(|_, w| w.strong_count() > 0);
            }
            match map.get(key).and_then(Weak::upgrade) {
                Some(s) => s,
                None => {
                    let s = Arc::new(Slot::new(()));
                    map.insert(key.to_string(), Arc::downgrade(&s));
                    s
                }
            }
        };
        KeyedGuard {
            _held: slot.lock_owned().await,
        }
    }

    /// Keys with a live lock (held or awaited).
    #[cfg(test)]
    pub fn live(&self) -> usize {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.values().filter(|w| w.strong_count() > 0).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_holder_per_key_and_other_keys_do_not_wait() {
        let locks = Arc::new(KeyedLocks::new());
        let inside = Arc::new(AtomicU32::new(0));
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (locks, inside) = (locks.clone(), inside.clone());
            tasks.push(tokio::spawn(async move {
                let _g = locks.lock("job").await;
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
            }));
        }
        let held = locks.lock("job").await;
        // Another key is free while "job" is held.
        let other = tokio::time::timeout(std::time::Duration::from_secs(1), locks.lock("x"))
            .await
            .expect("another key waited");
        drop((held, other));
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(locks.live(), 0, "locks are forgotten when released");
    }

    #[tokio::test]
    async fn the_table_does_not_grow_without_bound() {
        let locks = KeyedLocks::new();
        for i in 0..10 * SWEEP_AT {
            drop(locks.lock(&i.to_string()).await);
        }
        assert!(locks.map.lock().unwrap().len() <= SWEEP_AT);
    }
}
