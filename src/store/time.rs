//! Store time: the wall clock, never earlier than what the store has already seen.
//!
//! A Pi without an RTC boots at 1970 until NTP answers. Trusting that clock would make
//! every queued message look fresh forever, and a clock that later jumps ahead would
//! expire everything at once. The store therefore keeps a *virtual now*:
//!
//! - it starts at `max(clock, persisted floor)`; the floor is the virtual now of the
//!   last committed write batch (every group commit persists it, and
//!   [`super::Store::touch_time`] forces one);
//! - each reading adds the clock's forward step since the previous reading when that
//!   step is small (≤ [`MAX_STEP_MS`]), so time keeps flowing at the clock's rate even
//!   while the clock is stuck in 1970;
//! - backward steps and large forward jumps are not added; the result is
//!   `max(virtual, clock)`, so once NTP sets the real time we simply follow it.
//!
//! So after a reboot into 1970, nothing that was unexpired at shutdown expires early
//! (time resumes from the floor), and nothing that had expired becomes deliverable again
//! (time never goes below the floor). A large jump is never counted twice.

use std::sync::Mutex;

use crate::clock::SharedClock;

/// Forward steps larger than this are treated as clock corrections, not elapsed time.
pub const MAX_STEP_MS: u64 = 10 * 60 * 1000;

pub struct TimeKeeper {
    clock: SharedClock,
    state: Mutex<State>,
}

struct State {
    virtual_ms: u64,
    last_clock_ms: u64,
    persisted_ms: u64,
}

impl TimeKeeper {
    pub fn new(clock: SharedClock, floor_ms: u64) -> Self {
        let c = clock.now_ms();
        Self {
            clock,
            state: Mutex::new(State {
                virtual_ms: c.max(floor_ms),
                last_clock_ms: c,
                persisted_ms: floor_ms,
            }),
        }
    }

    pub fn now_ms(&self) -> u64 {
        let c = self.clock.now_ms();
        let mut s = match self.state.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        if c >= s.last_clock_ms && c - s.last_clock_ms <= MAX_STEP_MS {
            s.virtual_ms += c - s.last_clock_ms;
        }
        s.last_clock_ms = c;
        s.virtual_ms = s.virtual_ms.max(c);
        s.virtual_ms
    }

    /// Real time is known to be at least `ms` (an authenticated timestamp from the
    /// gateway, see `Inbound`). While the clock is behind the virtual time — it is
    /// demonstrably wrong, e.g. in 1970 after a boot without a real-time clock, and
    /// time is flowing on from the floor — time jumps forward to `ms` if it is behind,
    /// never back. A clock at or ahead of the virtual time is the source and is left
    /// alone. Returns how far time moved.
    pub fn not_before(&self, ms: u64) -> u64 {
        self.now_ms();
        let mut s = match self.state.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        if s.last_clock_ms >= s.virtual_ms {
            return 0;
        }
        let moved = ms.saturating_sub(s.virtual_ms);
        s.virtual_ms = s.virtual_ms.max(ms);
        moved
    }

    /// Records that `ms` is now the durable floor.
    pub fn persisted(&self, ms: u64) {
        let mut s = match self.state.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        s.persisted_ms = s.persisted_ms.max(ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::sync::Arc;

    const Y2026: u64 = 1_780_000_000_000;

    #[test]
    fn boot_in_1970_resumes_from_the_floor_and_keeps_flowing() {
        let c = ManualClock::new(5_000);
        let t = TimeKeeper::new(Arc::new(c.clone()), Y2026);
        assert_eq!(t.now_ms(), Y2026);
        c.advance_ms(1_000);
        assert_eq!(t.now_ms(), Y2026 + 1_000);
    }

    #[test]
    fn ntp_jump_is_followed_not_added_twice() {
        let c = ManualClock::new(5_000);
        let t = TimeKeeper::new(Arc::new(c.clone()), Y2026);
        c.set(Y2026 + 3_600_000);
        assert_eq!(t.now_ms(), Y2026 + 3_600_000);
        c.advance_ms(10);
        assert_eq!(t.now_ms(), Y2026 + 3_600_010);
    }

    #[test]
    fn a_known_lower_bound_moves_time_forward_never_back() {
        // Booted into 1970 after 90 s without power: time resumes at the floor, 90 s
        // behind real time, until the gateway's signed timestamp says otherwise.
        let c = ManualClock::new(5_000);
        let t = TimeKeeper::new(Arc::new(c.clone()), Y2026);
        assert_eq!(t.not_before(Y2026 + 90_000), 90_000);
        assert_eq!(t.now_ms(), Y2026 + 90_000);
        c.advance_ms(1_000);
        assert_eq!(
            t.now_ms(),
            Y2026 + 91_000,
            "and flows on at the clock's rate"
        );
        assert_eq!(
            t.not_before(Y2026 + 10_000),
            0,
            "an older bound changes nothing"
        );
        assert_eq!(t.now_ms(), Y2026 + 91_000);
        // NTP then sets the real time: followed as before, and from then on the clock
        // is the source (a gateway's timestamp does not move it).
        c.set(Y2026 + 95_000);
        assert_eq!(t.now_ms(), Y2026 + 95_000);
        assert_eq!(t.not_before(Y2026 + 200_000), 0);
        assert_eq!(t.now_ms(), Y2026 + 95_000);
    }

    #[test]
    fn backward_clock_never_moves_time_back() {
        let c = ManualClock::new(Y2026);
        let t = TimeKeeper::new(Arc::new(c.clone()), 0);
        assert_eq!(t.now_ms(), Y2026);
        c.set(Y2026 - 50_000);
        assert_eq!(t.now_ms(), Y2026);
        c.advance_ms(100);
        assert_eq!(t.now_ms(), Y2026 + 100);
    }
}
