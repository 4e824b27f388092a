//! The one place that reads the wall clock.
//!
//! Everything else takes `now_ms` as an argument or holds a [`SharedClock`], so logic
//! (expiry, backoff, token windows) is tested with injected time. The store keeps a
//! persisted *time floor* on top of this (see `store`), so a device without an RTC that
//! boots in 1970 neither expires everything nor resurrects what already expired.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Milliseconds since the Unix epoch, as the wall clock sees it.
///
/// Contract: cheap, thread-safe; may jump (NTP, RTC-less boot), so callers that need
/// monotonic behaviour combine it with the store's time floor.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> u64;
}

pub type SharedClock = Arc<dyn Clock>;

/// The real wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)]
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A clock tests move by hand.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    pub fn new(now_ms: u64) -> Self {
        Self(Arc::new(AtomicU64::new(now_ms)))
    }
    pub fn set(&self, now_ms: u64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
    pub fn advance_ms(&self, by: u64) {
        self.0.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

pub fn system() -> SharedClock {
    Arc::new(SystemClock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(1_000);
        assert_eq!(c.now_ms(), 1_000);
        c.advance_ms(500);
        assert_eq!(c.now_ms(), 1_500);
        c.set(10);
        assert_eq!(c.now_ms(), 10);
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now_ms() > 1_577_836_800_000);
    }
}
