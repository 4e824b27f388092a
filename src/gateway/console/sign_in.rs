//! Who may try to sign in to the console, and how often (docs/CONSOLE.md).
//!
//! Failed sign-ins are budgeted per client address ([`FAILED_RATE`], a
//! [`SourceBudgets`] bucket each): one address guessing tokens spends only its own
//! budget. A spent budget never refuses a token that verifies: the sign-in checks the
//! token first (a signature, tens of microseconds) and only a token that is refused is
//! then held back by the budget, without saying why it was refused. So nobody can lock
//! operators out by failing on purpose, from their own address or from any other.
//!
//! Successful sign-ins are budgeted per token ([`SIGN_IN_RATE`], by its `jti`): a token
//! signing in over and over is held back instead of churning the session table.
//!
//! Pure bookkeeping: the caller gives the address, the token id and the time.

use std::net::IpAddr;
use std::sync::Mutex;

use crate::gateway::source_budget::{Budgets, Rate, SourceBudgets};

/// Failed sign-ins one address may have: 10 at once, then one every 6 s.
pub const FAILED_RATE: Rate = Rate {
    burst: 10.0,
    per_s: 1.0 / 6.0,
};
/// Sign-ins one token may make: 10 at once, then one every 30 s.
pub const SIGN_IN_RATE: Rate = Rate {
    burst: 10.0,
    per_s: 1.0 / 30.0,
};
/// Addresses, and token ids, tracked (a few hundred KiB at most).
pub const MAX_TRACKED: usize = 8192;

/// The console's sign-in budgets.
pub struct SignInLimits {
    failed: Mutex<SourceBudgets>,
    per_token: Mutex<Budgets<String>>,
}

impl Default for SignInLimits {
    fn default() -> Self {
        Self::new()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SignInLimits {
    pub fn new() -> Self {
        Self {
            failed: Mutex::new(SourceBudgets::new(FAILED_RATE, MAX_TRACKED)),
            per_token: Mutex::new(Budgets::new(SIGN_IN_RATE, MAX_TRACKED)),
        }
    }

    /// A sign-in from `ip` was refused: one out of its budget. False when the budget was
    /// spent already (the refusal is then held back: the answer says only "too many").
    pub fn failed(&self, ip: IpAddr, now_ms: u64) -> bool {
        lock(&self.failed).take(ip, now_ms)
    }

    /// Token `jti` verified and may sign in: one out of its budget. False when it signed
    /// in too often.
    pub fn signed_in(&self, jti: &str, now_ms: u64) -> bool {
        lock(&self.per_token).take(jti.to_string(), now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(n: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))
    }

    #[test]
    fn failures_are_budgeted_per_address() {
        let l = SignInLimits::new();
        let t0 = 1_000_000;
        for _ in 0..10 {
            assert!(l.failed(ip(2), t0));
        }
        assert!(!l.failed(ip(2), t0), "2 spent its budget");
        assert!(l.failed(ip(1), t0), "1 has all of its own");
        assert!(!l.failed(ip(2), t0 + 5_999));
        assert!(l.failed(ip(2), t0 + 12_000), "one back every 6 s");
    }

    #[test]
    fn sign_ins_are_budgeted_per_token() {
        let l = SignInLimits::new();
        for _ in 0..10 {
            assert!(l.signed_in("read", 0));
        }
        assert!(!l.signed_in("read", 0));
        assert!(l.signed_in("admin", 0), "another token is untouched");
        assert!(l.signed_in("read", 30_000), "one back every 30 s");
    }
}
