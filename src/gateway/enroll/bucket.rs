//! The rate limit of unauthenticated enrollment requests (PROTOCOL §15.3).

/// Unauthenticated enrollment requests a gateway answers: a token bucket (pure; the
/// caller gives the time), so a flood costs a few comparisons and no storage.
#[derive(Debug, Clone, Copy)]
pub struct Bucket {
    tokens: f64,
    last_ms: u64,
}

/// Burst and sustained rate of enrollment requests (a fleet of thousands booting at once
/// is served within minutes; nodes retry with backoff).
pub const BUCKET_BURST: f64 = 50.0;
pub const BUCKET_PER_S: f64 = 20.0;

impl Default for Bucket {
    fn default() -> Self {
        Self {
            tokens: BUCKET_BURST,
            last_ms: 0,
        }
    }
}

impl Bucket {
    /// Take one request's token at `now_ms`; false when the bucket is empty.
    pub fn take(&mut self, now_ms: u64) -> bool {
        let dt = now_ms.saturating_sub(self.last_ms) as f64 / 1000.0;
        self.last_ms = self.last_ms.max(now_ms);
        self.tokens = (self.tokens + dt * BUCKET_PER_S).min(BUCKET_BURST);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}
