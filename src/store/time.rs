//! Store time: the wall clock, never earlier than what the store has already seen.
//!
//! A Pi without an RTC boots at 1970 until NTP answers. Trusting that clock would make
//! every queued message look fresh forever, and a clock that later jumps ahead would
//! expire everything at once. The store therefore keeps a *virtual now*:
//!
//! - it starts at `max(clock, persisted floor)`; the floor is the virtual now of the
//!   last committed write batch (every group commit that writes anything persists it;
//!   [`super::Store::touch_time`] forces one, which the daemons do when the persisted
//!   floor is [`FLOOR_EVERY_MS`] old and on shutdown: a store with nothing to do writes
//!   nothing in between, see "Idle" below);
//! - each reading adds the clock's forward step since the previous reading when that
//!   step is small (≤ [`MAX_STEP_MS`]), so time keeps flowing at the clock's rate even
//!   while the clock is stuck in 1970;
//! - backward steps and large forward jumps are not added; the result is
//!   `max(virtual, clock)`, so once NTP sets the real time we simply follow it.
//!
//! So after a reboot into 1970, nothing that was unexpired at shutdown expires early
//! (time resumes from the floor), and nothing that had expired becomes deliverable again
//! (time never goes below the floor). A large jump is never counted twice.
//!
//! The one way back is [`TimeKeeper::correct_back`] (RELIABILITY F2): a clock that went
//! far ahead (a bad NTP answer) and was then set right leaves the time ahead forever, so
//! when the node's gateway states a trusted time (signed, bound to the node's request)
//! *and the clock agrees with it*, time goes back to it. Neither alone can move it: a
//! gateway cannot drag a node's time back against its clock, and a clock that steps
//! back (1970) is still floored. The correction is remembered (`high_water_ms`,
//! `corrected_at_ms`) because replay memory may have been pruned while time was ahead,
//! and so is the newest `created_at` of any envelope whose id went into replay memory
//! ([`TimeKeeper::note_seen_created`]): only those ids can have been pruned.
//!
//! ## Idle
//!
//! The floor is a lower bound, so it may lag: persisting it coarsely costs only how far
//! time can resume behind real time after a power cut with the clock in 1970 (the
//! downtime plus at most [`FLOOR_EVERY_MS`], until NTP or the gateway's signed time
//! moves it on, RELIABILITY F6). What it protects is kept exactly, because the writes
//! that matter carry the floor with them: a sweep that expires a message or prunes a
//! replay entry commits, and with it a floor at or past that message's expiry, so
//! nothing that was removed as expired comes back. Everything else that commits (an
//! enqueue, an ack, an audit entry) piggy-backs the floor too.

use std::sync::Mutex;

use crate::clock::SharedClock;

/// How stale the persisted floor may get before the daemon persists it on its own
/// (`touch_time`): at most one small commit every 10 minutes on an idle store.
pub const FLOOR_EVERY_MS: u64 = 10 * 60 * 1000;

/// The largest clock skew a configuration may allow (`security.max_clock_skew_s` is
/// capped at 3600): an envelope accepted at store time `t` was created by `t` plus this.
pub const MAX_SKEW_MS: u64 = 3_600_000;

/// Forward steps larger than this are treated as clock corrections, not elapsed time.
pub const MAX_STEP_MS: u64 = 10 * 60 * 1000;

pub struct TimeKeeper {
    clock: SharedClock,
    state: Mutex<State>,
}

/// The store's time was moved back to trusted time ([`TimeKeeper::correct_back`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeCorrection {
    /// The highest the store's time has been: the time before the correction (or an
    /// earlier one's, if that was higher). Replay memory kept until a time up to this
    /// may have been pruned.
    pub high_water_ms: u64,
    /// The store's time right after the (latest) correction.
    pub corrected_at_ms: u64,
    /// The newest `created_at` of an envelope remembered before the correction: an
    /// envelope created later cannot be one whose id was pruned.
    pub seen_created_max_ms: u64,
}

/// What the store persisted besides the floor (restored on open).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct History {
    pub correction: Option<TimeCorrection>,
    /// See [`TimeKeeper::note_seen_created`].
    pub seen_created_max_ms: u64,
}

struct State {
    virtual_ms: u64,
    last_clock_ms: u64,
    persisted_ms: u64,
    correction: Option<TimeCorrection>,
    seen_created_max_ms: u64,
}

impl TimeKeeper {
    /// `floor_ms` and `history` as the store persisted them.
    pub fn new(clock: SharedClock, floor_ms: u64, history: History) -> Self {
        let c = clock.now_ms();
        Self {
            clock,
            state: Mutex::new(State {
                virtual_ms: c.max(floor_ms),
                last_clock_ms: c,
                persisted_ms: floor_ms,
                correction: history.correction,
                seen_created_max_ms: history.seen_created_max_ms,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        }
    }

    pub fn now_ms(&self) -> u64 {
        let c = self.clock.now_ms();
        let mut s = self.lock();
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
        let mut s = self.lock();
        if s.last_clock_ms >= s.virtual_ms {
            return 0;
        }
        let moved = ms.saturating_sub(s.virtual_ms);
        s.virtual_ms = s.virtual_ms.max(ms);
        moved
    }

    /// Trusted time is `trusted_ms` (the node's gateway said so, signed). Moves time
    /// back to `max(clock, trusted_ms)` only if time is ahead of it by more than
    /// `tolerance_ms` **and** the clock agrees with it within `tolerance_ms` — so a
    /// clock still ahead, or in 1970, keeps things as they are, and so does a trusted
    /// time that is ahead. Returns the correction made, if any.
    pub fn correct_back(&self, trusted_ms: u64, tolerance_ms: u64) -> Option<TimeCorrection> {
        self.now_ms();
        let mut s = self.lock();
        if s.virtual_ms <= trusted_ms.saturating_add(tolerance_ms)
            || s.last_clock_ms.abs_diff(trusted_ms) > tolerance_ms
        {
            return None;
        }
        let high_water_ms = s
            .correction
            .map_or(s.virtual_ms, |c| c.high_water_ms.max(s.virtual_ms));
        s.virtual_ms = s.last_clock_ms.max(trusted_ms);
        let c = TimeCorrection {
            high_water_ms,
            corrected_at_ms: s.virtual_ms,
            seen_created_max_ms: s.seen_created_max_ms,
        };
        s.correction = Some(c);
        Some(c)
    }

    /// An envelope created at `created_at_ms` is about to have its id remembered (the
    /// node's receive pipeline calls this before storing it). Persisted with the next
    /// commit — the one that stores it — so it is never behind what replay memory holds.
    pub fn note_seen_created(&self, created_at_ms: u64) {
        let mut s = self.lock();
        s.seen_created_max_ms = s.seen_created_max_ms.max(created_at_ms);
    }

    pub fn seen_created_max(&self) -> u64 {
        self.lock().seen_created_max_ms
    }

    /// The latest correction, if time was ever moved back.
    pub fn correction(&self) -> Option<TimeCorrection> {
        self.lock().correction
    }

    /// How far the store's time is past the durable floor (0 after a correction back,
    /// until the lowered floor is committed).
    pub fn floor_lag_ms(&self) -> u64 {
        let now = self.now_ms();
        now.saturating_sub(self.lock().persisted_ms)
    }

    /// Records that `ms` is now the durable floor (the latest commit's, which after a
    /// correction is lower than an earlier one's).
    pub fn persisted(&self, ms: u64) {
        self.lock().persisted_ms = ms;
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
        let t = TimeKeeper::new(Arc::new(c.clone()), Y2026, History::default());
        assert_eq!(t.now_ms(), Y2026);
        c.advance_ms(1_000);
        assert_eq!(t.now_ms(), Y2026 + 1_000);
    }

    #[test]
    fn ntp_jump_is_followed_not_added_twice() {
        let c = ManualClock::new(5_000);
        let t = TimeKeeper::new(Arc::new(c.clone()), Y2026, History::default());
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
        let t = TimeKeeper::new(Arc::new(c.clone()), Y2026, History::default());
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

    const WEEK: u64 = 7 * 86_400_000;
    const TOL: u64 = 150_000;

    /// RELIABILITY F2: a clock a week ahead, then set right, left time a week ahead.
    #[test]
    fn a_week_ahead_then_back_is_corrected_to_trusted_time() {
        let c = ManualClock::new(Y2026);
        let t = TimeKeeper::new(Arc::new(c.clone()), 0, History::default());
        t.note_seen_created(Y2026 - 5_000);
        c.set(Y2026 + WEEK);
        assert_eq!(t.now_ms(), Y2026 + WEEK);
        c.set(Y2026 + 1_000);
        assert_eq!(
            t.now_ms(),
            Y2026 + WEEK,
            "the floor holds without a trusted time"
        );
        let fix = t.correct_back(Y2026 + 1_200, TOL).unwrap();
        assert_eq!(
            fix,
            TimeCorrection {
                high_water_ms: Y2026 + WEEK,
                corrected_at_ms: Y2026 + 1_200,
                seen_created_max_ms: Y2026 - 5_000,
            },
            "max(clock, trusted)"
        );
        assert_eq!(t.now_ms(), Y2026 + 1_200);
        c.advance_ms(500);
        assert_eq!(
            t.now_ms(),
            Y2026 + 1_700,
            "and flows on at the clock's rate"
        );
        assert_eq!(t.correction(), Some(fix));
        assert_eq!(
            t.correct_back(Y2026 + 1_700, TOL),
            None,
            "nothing more to correct"
        );
    }

    #[test]
    fn refused_while_the_clock_is_still_ahead() {
        let c = ManualClock::new(Y2026 + WEEK);
        let t = TimeKeeper::new(Arc::new(c.clone()), 0, History::default());
        assert_eq!(t.correct_back(Y2026, TOL), None);
        assert_eq!(t.now_ms(), Y2026 + WEEK);
        // Ahead by more than the tolerance is still ahead.
        c.set(Y2026 + TOL + 1);
        assert_eq!(t.correct_back(Y2026, TOL), None);
        assert_eq!(t.now_ms(), Y2026 + WEEK);
        assert_eq!(t.correction(), None);
    }

    #[test]
    fn refused_when_the_trusted_time_is_ahead() {
        let c = ManualClock::new(Y2026);
        let t = TimeKeeper::new(Arc::new(c.clone()), 0, History::default());
        assert_eq!(t.correct_back(Y2026 + WEEK, TOL), None);
        assert_eq!(t.correct_back(Y2026 + TOL, TOL), None, "within tolerance");
        assert_eq!(t.now_ms(), Y2026);
    }

    /// The F6 and rtc-boot protections stay: a 1970 clock never agrees with anyone.
    #[test]
    fn refused_with_a_1970_clock() {
        let c = ManualClock::new(5_000);
        let t = TimeKeeper::new(Arc::new(c.clone()), Y2026 + WEEK, History::default());
        assert_eq!(t.correct_back(Y2026, TOL), None);
        assert_eq!(t.now_ms(), Y2026 + WEEK);
    }

    #[test]
    fn a_second_correction_keeps_the_highest_high_water() {
        let c = ManualClock::new(Y2026 + WEEK);
        let t = TimeKeeper::new(Arc::new(c.clone()), 0, History::default());
        c.set(Y2026);
        t.correct_back(Y2026, TOL).unwrap();
        c.set(Y2026 + 86_400_000);
        t.now_ms();
        c.set(Y2026 + 2_000);
        let second = t.correct_back(Y2026 + 2_000, TOL).unwrap();
        assert_eq!(second.high_water_ms, Y2026 + WEEK);
        assert_eq!(second.corrected_at_ms, Y2026 + 2_000);
    }

    proptest::proptest! {
        /// Whatever the clock and the trusted time: time moves back only when the clock
        /// agrees with the trusted time, never below either, and otherwise not at all.
        #[test]
        fn time_goes_back_only_when_clock_and_trusted_time_agree(
            ahead in 0u64..2 * WEEK, clock_off in -(WEEK as i64)..WEEK as i64,
            trusted_off in -(WEEK as i64)..WEEK as i64,
        ) {
            let c = ManualClock::new(Y2026 + ahead);
            let t = TimeKeeper::new(Arc::new(c.clone()), 0, History::default());
            let clock = Y2026.saturating_add_signed(clock_off);
            let trusted = Y2026.saturating_add_signed(trusted_off);
            c.set(clock);
            let was = t.now_ms();
            let fix = t.correct_back(trusted, TOL);
            let now = t.now_ms();
            match fix {
                Some(f) => {
                    proptest::prop_assert!(clock.abs_diff(trusted) <= TOL);
                    proptest::prop_assert!(was > trusted + TOL);
                    proptest::prop_assert_eq!(now, clock.max(trusted));
                    proptest::prop_assert_eq!(f.high_water_ms, was);
                }
                None => proptest::prop_assert_eq!(now, was),
            }
        }
    }

    #[test]
    fn the_floor_lag_grows_with_time_and_resets_when_persisted() {
        let c = ManualClock::new(Y2026);
        let t = TimeKeeper::new(Arc::new(c.clone()), Y2026, History::default());
        assert_eq!(t.floor_lag_ms(), 0);
        c.advance_ms(FLOOR_EVERY_MS);
        assert_eq!(t.floor_lag_ms(), FLOOR_EVERY_MS);
        t.persisted(t.now_ms());
        assert_eq!(t.floor_lag_ms(), 0);
        // A persisted floor ahead of time (a correction not yet committed) is no lag.
        t.persisted(Y2026 + WEEK);
        assert_eq!(t.floor_lag_ms(), 0);
    }

    #[test]
    fn backward_clock_never_moves_time_back() {
        let c = ManualClock::new(Y2026);
        let t = TimeKeeper::new(Arc::new(c.clone()), 0, History::default());
        assert_eq!(t.now_ms(), Y2026);
        c.set(Y2026 - 50_000);
        assert_eq!(t.now_ms(), Y2026);
        c.advance_ms(100);
        assert_eq!(t.now_ms(), Y2026 + 100);
    }
}
