//! A tenant's command rate (PROTOCOL §18, `max_commands_per_s`): a token bucket that
//! holds one second's worth, so a tenant may send a burst of `rate` commands and then
//! `rate` a second. Pure: the caller passes the time.

/// Tokens are counted in thousandths so that refills of a few milliseconds count.
const MILLI: u64 = 1_000;

/// One tenant's bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    milli: u64,
    at_ms: u64,
}

impl Bucket {
    /// A full bucket for `rate` a second, at `now_ms`.
    pub fn full(rate: u64, now_ms: u64) -> Self {
        Bucket {
            milli: rate.saturating_mul(MILLI),
            at_ms: now_ms,
        }
    }

    /// Take one token at `now_ms` for `rate` a second: whether it was there. A clock
    /// that goes back refills nothing (and takes nothing back).
    pub fn take(&mut self, rate: u64, now_ms: u64) -> bool {
        let cap = rate.saturating_mul(MILLI);
        let elapsed = now_ms.saturating_sub(self.at_ms);
        self.milli = self
            .milli
            .saturating_add(elapsed.saturating_mul(rate))
            .min(cap);
        self.at_ms = self.at_ms.max(now_ms);
        if self.milli >= MILLI {
            self.milli -= MILLI;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_burst_of_rate_then_rate_a_second() {
        let mut b = Bucket::full(5, 0);
        assert_eq!((0..10).filter(|_| b.take(5, 0)).count(), 5);
        assert!(!b.take(5, 100), "a fifth of a second is not a whole token");
        assert!(b.take(5, 200));
        assert!(!b.take(5, 200));
        // A long pause refills one second's worth, no more.
        assert_eq!((0..10).filter(|_| b.take(5, 60_000)).count(), 5);
        // Zero a second admits nothing, ever.
        let mut z = Bucket::full(0, 0);
        assert!(!z.take(0, 0) && !z.take(0, 1_000_000));
    }

    proptest! {
        /// Over any span, at most one second's burst plus `rate` a second of that span
        /// is admitted, whatever the times (back-steps included).
        #[test]
        fn never_more_than_burst_plus_rate(
            rate in 0u64..200,
            steps in proptest::collection::vec(0u64..50, 1..400),
        ) {
            let mut b = Bucket::full(rate, 1_000);
            let (mut now, mut latest, mut admitted) = (1_000u64, 1_000u64, 0u64);
            for (i, s) in steps.iter().enumerate() {
                // Every seventh step goes back in time.
                now = if i % 7 == 6 { now.saturating_sub(*s) } else { now + s };
                latest = latest.max(now);
                admitted += u64::from(b.take(rate, now));
            }
            let span_ms = latest - 1_000;
            prop_assert!(admitted <= rate + rate * span_ms / 1_000);
        }

        /// Requests spaced at least a token apart are all admitted.
        #[test]
        fn a_caller_within_the_rate_is_never_refused(rate in 1u64..500, n in 1usize..300) {
            let mut b = Bucket::full(rate, 0);
            let gap = 1_000u64.div_ceil(rate);
            for i in 0..n as u64 {
                prop_assert!(b.take(rate, i * gap));
            }
        }
    }
}
