//! The retry schedule of PROTOCOL §14, as a pure function (the sync loop uses it too).
//!
//! Attempt 1 goes out immediately; attempt `n ≥ 2` waits `min(5 s · 2^(n−2), 300 s)`,
//! spread by ±10 % jitter so a fleet that lost its uplink together does not retry in
//! lockstep: 5, 10, 20, 40, 80, 160, 300, 300 … seconds.

const BASE_MS: u64 = 5_000;
const CAP_MS: u64 = 300_000;
const JITTER: f64 = 0.10;

/// Delay before attempt number `attempt` (1-based). `jitter` in `[-1, 1]` scales the
/// ±10 % spread (values outside are clamped, NaN counts as 0); the caller supplies it
/// from its RNG so this stays deterministic under test.
pub fn delay_ms(attempt: u32, jitter: f64) -> u64 {
    delay_capped_ms(attempt, jitter, CAP_MS)
}

/// [`delay_ms`] with the schedule capped at `cap_ms` (at most 300 s) before the jitter:
/// the sync loop's reconnect backoff (`upstream.retry_max_s`).
pub fn delay_capped_ms(attempt: u32, jitter: f64, cap_ms: u64) -> u64 {
    let base = base_delay_ms(attempt).min(cap_ms);
    let j = if jitter.is_nan() {
        0.0
    } else {
        jitter.clamp(-1.0, 1.0)
    };
    let spread = base as f64 * JITTER * j;
    (base as f64 + spread).round().max(0.0) as u64
}

/// The un-jittered delay before attempt `attempt`.
pub fn base_delay_ms(attempt: u32) -> u64 {
    if attempt <= 1 {
        return 0;
    }
    let exp = attempt - 2;
    if exp >= 7 {
        return CAP_MS;
    }
    (BASE_MS << exp).min(CAP_MS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_lower_cap_stops_the_doubling_there_with_its_jitter() {
        let got: Vec<u64> = (1..=9)
            .map(|n| delay_capped_ms(n, 0.0, 60_000) / 1000)
            .collect();
        assert_eq!(got, vec![0, 5, 10, 20, 40, 60, 60, 60, 60]);
        assert_eq!(delay_capped_ms(20, 1.0, 60_000), 66_000);
    }

    #[test]
    fn schedule_matches_the_spec() {
        let got: Vec<u64> = (1..=9).map(|n| delay_ms(n, 0.0) / 1000).collect();
        assert_eq!(got, vec![0, 5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(delay_ms(u32::MAX, 0.0), 300_000);
    }

    proptest! {
        #[test]
        fn jitter_stays_within_ten_percent(n in 1u32..10_000, j in -1.0f64..=1.0) {
            let base = base_delay_ms(n) as f64;
            let d = delay_ms(n, j) as f64;
            prop_assert!(d >= base * 0.9 - 1.0 && d <= base * 1.1 + 1.0);
        }

        #[test]
        fn delay_never_exceeds_cap_plus_jitter(n in any::<u32>(), j in any::<f64>()) {
            prop_assert!(delay_ms(n, j) <= 330_000);
        }

        #[test]
        fn base_delay_is_monotonic(n in 1u32..1000) {
            prop_assert!(base_delay_ms(n) <= base_delay_ms(n + 1));
        }
    }
}
