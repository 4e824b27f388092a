//! What refused requests may cost on flash. Every refusal is answered, but a local
//! process without a token must not be able to wear out the SD card by sending
//! refusals in a loop: each refusal is audited on its own while a token bucket allows
//! (a burst, then a few a minute), and the rest are counted and written as one
//! `refusal_summary` entry a minute (`detail` = `reason=count,…`), so the log still
//! accounts for every refusal. Pure: the caller passes the time.

use std::collections::BTreeMap;

/// Individual refusal entries allowed in a burst.
pub const BURST: u32 = 20;
/// One more individual entry is allowed per this many ms (6 a minute).
pub const REFILL_MS: u64 = 10_000;
/// Suppressed refusals are summarised at most this often.
pub const SUMMARY_EVERY_MS: u64 = 60_000;

#[derive(Debug)]
pub struct RefusalBudget {
    tokens: u32,
    refilled_at_ms: u64,
    suppressed: BTreeMap<String, u64>,
    summarised_at_ms: u64,
}

impl RefusalBudget {
    pub fn new(now_ms: u64) -> Self {
        Self {
            tokens: BURST,
            refilled_at_ms: now_ms,
            suppressed: BTreeMap::new(),
            summarised_at_ms: now_ms,
        }
    }

    /// A refusal for `reason` happened: true if it gets an audit entry of its own,
    /// false if it was counted for the next summary.
    pub fn admit(&mut self, now_ms: u64, reason: &str) -> bool {
        let earned = now_ms.saturating_sub(self.refilled_at_ms) / REFILL_MS;
        if earned > 0 {
            self.tokens = (self.tokens as u64 + earned).min(BURST as u64) as u32;
            self.refilled_at_ms += earned * REFILL_MS;
        }
        if now_ms < self.refilled_at_ms {
            // The clock went back: start the refill period again from now.
            self.refilled_at_ms = now_ms;
        }
        if self.tokens > 0 {
            self.tokens -= 1;
            return true;
        }
        *self.suppressed.entry(reason.to_string()).or_insert(0) += 1;
        false
    }

    /// The suppressed counts to summarise now, if any and a summary is due (or `force`,
    /// at shutdown). Taking them resets the counts.
    pub fn take_summary(&mut self, now_ms: u64, force: bool) -> Option<BTreeMap<String, u64>> {
        if self.suppressed.is_empty() {
            return None;
        }
        let due = now_ms.saturating_sub(self.summarised_at_ms) >= SUMMARY_EVERY_MS
            || now_ms < self.summarised_at_ms;
        if !due && !force {
            return None;
        }
        self.summarised_at_ms = now_ms;
        Some(std::mem::take(&mut self.suppressed))
    }

    /// Refusals counted and not yet summarised.
    #[cfg(test)]
    pub fn pending(&self) -> u64 {
        self.suppressed.values().sum()
    }

    /// Puts counts back after a summary could not be written.
    pub fn restore(&mut self, counts: BTreeMap<String, u64>) {
        for (r, n) in counts {
            *self.suppressed.entry(r).or_insert(0) += n;
        }
    }
}

/// The `refusal_summary` entry's `detail`: `reason=count,…` in reason order.
pub fn summary_detail(counts: &BTreeMap<String, u64>) -> String {
    counts
        .iter()
        .map(|(r, n)| format!("{r}={n}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn total(counts: &BTreeMap<String, u64>) -> u64 {
        counts.values().sum()
    }

    #[test]
    fn a_burst_then_a_few_a_minute_then_a_summary() {
        let mut b = RefusalBudget::new(0);
        let own = (0..1_000).filter(|_| b.admit(1, "missing_token")).count();
        assert_eq!(own, BURST as usize);
        assert_eq!(b.take_summary(30_000, false), None, "not due yet");
        let counts = b.take_summary(60_000, false).unwrap();
        assert_eq!(summary_detail(&counts), "missing_token=980");
        assert_eq!(b.pending(), 0);
        // A minute later the bucket has refilled by six.
        let own = (0..100).filter(|_| b.admit(60_000, "bad")).count();
        assert_eq!(own, 6);
    }

    #[test]
    fn restore_puts_counts_back() {
        let mut b = RefusalBudget::new(0);
        for _ in 0..BURST + 3 {
            b.admit(0, "x");
        }
        let s = b.take_summary(0, true).unwrap();
        b.restore(s);
        assert_eq!(b.pending(), 3);
    }

    proptest! {
        /// Every refusal is accounted for (its own entry or a summary count), and the
        /// number of entries is bounded by the budget, whatever the timing.
        #[test]
        fn every_refusal_is_counted_and_entries_are_bounded(
            steps in proptest::collection::vec((0u64..20_000, 0usize..3), 1..2_000)
        ) {
            let reasons = ["missing_token", "bad_signature", "unknown_tool"];
            let mut b = RefusalBudget::new(0);
            let (mut now, mut own, mut summaries, mut summarised) = (0u64, 0u64, 0u64, 0u64);
            for (dt, r) in &steps {
                now += dt;
                if b.admit(now, reasons[*r]) {
                    own += 1;
                }
                if let Some(s) = b.take_summary(now, false) {
                    summaries += 1;
                    summarised += total(&s);
                }
            }
            if let Some(s) = b.take_summary(now, true) {
                summaries += 1;
                summarised += total(&s);
            }
            prop_assert_eq!(own + summarised, steps.len() as u64);
            prop_assert!(own <= BURST as u64 + now / REFILL_MS);
            prop_assert!(summaries <= 1 + now / SUMMARY_EVERY_MS + 1);
        }
    }
}
