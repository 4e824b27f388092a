//! Who gets an enrollment answer while strangers flood (PROTOCOL §15.3).
//!
//! The hello (`GET /v1/enroll`, one signature) and the request (`POST /v1/enroll`, an
//! envelope to open and a storage transaction) have separate budgets, each a token
//! bucket per client address ([`SourceBudgets`]): one flooding address empties only its
//! own. A hello over its address's budget (a site of devices behind one NAT powering on
//! together) is answered from a budget all addresses share ([`HELLO_SHARED_RATE`]: a
//! signature costs about 20 µs, so it is CPU the gateway can give), and refused only
//! when that is spent too. A request over its address's budget (many devices behind one NAT, or a flood
//! from the device's own network) is not refused outright: its envelope is opened and
//! its token checked (about 0.2 ms of CPU; all addresses together at most
//! [`CHECK_RATE`]), and a token this gateway signed, unexpired and not known to be
//! spent or revoked, is decided as if there were no flood.
//!
//! Decisions then queue for a bounded number of slots ([`Admission::slots`]), so a
//! burst of real devices takes at most that share of the database pool and the
//! gateway's other work (delivery, the console) keeps the rest.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};

use crate::gateway::source_budget::{Bucket, Rate, SourceBudgets};

/// Hellos one address may ask for: a device asks one per attempt.
pub const HELLO_RATE: Rate = Rate {
    burst: 20.0,
    per_s: 2.0,
};
/// Hellos answered beyond their addresses' budgets, all addresses together: one
/// address's devices may enroll at fleet speed (10,000 behind one NAT in well under
/// the 5 minutes a site's power-on may take) while a flood costs at most this many
/// signatures a second.
pub const HELLO_SHARED_RATE: Rate = Rate {
    burst: 500.0,
    per_s: 500.0,
};
/// Enrollment requests one address may make before its token must prove it.
pub const REQUEST_RATE: Rate = Rate {
    burst: 10.0,
    per_s: 1.0,
};
/// Over-budget requests whose token is checked anyway, all addresses together.
pub const CHECK_RATE: Rate = Rate {
    burst: 200.0,
    per_s: 500.0,
};
/// Addresses tracked per budget (a few hundred KiB at most).
pub const MAX_SOURCES: usize = 8192;
/// Token ids remembered as spent, expired or revoked.
const DEAD_TOKENS: usize = 1024;
/// Decisions that may wait for a slot; past it a request is told to come back.
pub const MAX_WAITING: usize = 512;
/// How long a request waits for a slot before it is told to come back.
pub const SLOT_WAIT: Duration = Duration::from_secs(10);

/// What a request's address has left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    /// Within its address's budget: decided.
    Within,
    /// Over it, and the shared check budget let it through: decided only if its
    /// token is one this gateway still honours.
    TokenMustProve,
}

/// Why a request is not answered now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Throttle {
    /// Its address is over budget (and, for a request, so is the shared check budget).
    Address,
    /// Over budget, and its token is not one this gateway still honours.
    Token,
    /// Every decision slot is taken and too many wait already.
    Busy,
}

impl Throttle {
    pub fn as_str(self) -> &'static str {
        match self {
            Throttle::Address => "address_budget",
            Throttle::Token => "token_not_honoured",
            Throttle::Busy => "busy",
        }
    }
}

/// The enrollment exchange's budgets and decision slots.
pub struct Admission {
    hello: Mutex<SourceBudgets>,
    hello_shared: Mutex<Bucket>,
    requests: Mutex<SourceBudgets>,
    checks: Mutex<Bucket>,
    dead: Mutex<VecDeque<String>>,
    slots: Semaphore,
    slot_count: usize,
    waiting: AtomicUsize,
    /// Where each request's envelope is opened: off the async workers.
    pub(super) lane: super::opening::Lane,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Admission {
    /// `slots`: decisions in flight at once.
    pub fn new(slots: usize, now_ms: u64) -> Self {
        let slots = slots.max(1);
        Self {
            hello: Mutex::new(SourceBudgets::new(HELLO_RATE, MAX_SOURCES)),
            hello_shared: Mutex::new(Bucket::full(HELLO_SHARED_RATE, now_ms)),
            requests: Mutex::new(SourceBudgets::new(REQUEST_RATE, MAX_SOURCES)),
            checks: Mutex::new(Bucket::full(CHECK_RATE, now_ms)),
            dead: Mutex::new(VecDeque::new()),
            slots: Semaphore::new(slots),
            slot_count: slots,
            waiting: AtomicUsize::new(0),
            lane: Default::default(),
        }
    }

    /// Decisions in flight at once.
    pub fn slots(&self) -> usize {
        self.slot_count
    }

    /// May `ip` have a hello now? From its address's budget, else the shared one.
    pub fn hello(&self, ip: IpAddr, now_ms: u64) -> Result<(), Throttle> {
        if lock(&self.hello).take(ip, now_ms)
            || lock(&self.hello_shared).take(HELLO_SHARED_RATE, now_ms)
        {
            Ok(())
        } else {
            Err(Throttle::Address)
        }
    }

    /// May `ip`'s request be looked at now, and how?
    pub fn request(&self, ip: IpAddr, now_ms: u64) -> Result<Admitted, Throttle> {
        if lock(&self.requests).take(ip, now_ms) {
            return Ok(Admitted::Within);
        }
        if lock(&self.checks).take(CHECK_RATE, now_ms) {
            return Ok(Admitted::TokenMustProve);
        }
        Err(Throttle::Address)
    }

    /// Is `token_id` known to be spent, expired or revoked?
    pub fn is_dead(&self, token_id: &str) -> bool {
        lock(&self.dead).iter().any(|t| t == token_id)
    }

    /// `token_id` was refused for good (spent, expired, revoked): an over-budget
    /// request carrying it is refused without a decision from now on.
    pub fn mark_dead(&self, token_id: &str) {
        let mut d = lock(&self.dead);
        if !d.iter().any(|t| t == token_id) {
            if d.len() >= DEAD_TOKENS {
                d.pop_front();
            }
            d.push_back(token_id.to_string());
        }
    }

    /// A decision slot: waits up to [`SLOT_WAIT`] behind at most [`MAX_WAITING`] others.
    pub async fn slot(&self) -> Result<SemaphorePermit<'_>, Throttle> {
        self.slot_within(SLOT_WAIT).await
    }

    async fn slot_within(&self, wait: Duration) -> Result<SemaphorePermit<'_>, Throttle> {
        if let Ok(p) = self.slots.try_acquire() {
            return Ok(p);
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= MAX_WAITING {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(Throttle::Busy);
        }
        let got = tokio::time::timeout(wait, self.slots.acquire()).await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        match got {
            Ok(Ok(p)) => Ok(p),
            _ => Err(Throttle::Busy),
        }
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
    fn a_flooding_address_leaves_another_its_budget() {
        let a = Admission::new(4, 0);
        // Its own budget, then the shared one; then refused.
        let hellos = (0..10_000).filter(|_| a.hello(ip(2), 0).is_ok()).count();
        assert_eq!(
            hellos,
            (HELLO_RATE.burst + HELLO_SHARED_RATE.burst) as usize
        );
        // Another address still has all of its own.
        let other = (0..10_000).filter(|_| a.hello(ip(3), 0).is_ok()).count();
        assert_eq!(other, HELLO_RATE.burst as usize);
        let within = (0..10_000)
            .filter(|_| a.request(ip(2), 0) == Ok(Admitted::Within))
            .count();
        assert_eq!(within, REQUEST_RATE.burst as usize);
        assert_eq!(a.request(ip(3), 0), Ok(Admitted::Within));
    }

    /// A site of devices behind one address gets hellos at the shared rate once its
    /// own budget is spent: 10,000 of them within a minute, not at 2 a second.
    #[test]
    fn one_address_with_many_devices_gets_hellos_at_the_shared_rate() {
        let a = Admission::new(4, 0);
        let mut answered = 0;
        for ms in (0..60_000).step_by(10) {
            answered += (0..50).filter(|_| a.hello(ip(9), ms).is_ok()).count();
        }
        assert!(answered >= 10_000, "{answered} hellos in a minute");
    }

    #[test]
    fn over_budget_requests_are_checked_up_to_the_shared_rate() {
        let a = Admission::new(4, 0);
        let n = REQUEST_RATE.burst as usize;
        for _ in 0..n {
            assert_eq!(a.request(ip(2), 0), Ok(Admitted::Within));
        }
        let checked = (0..10_000)
            .filter(|_| a.request(ip(2), 0) == Ok(Admitted::TokenMustProve))
            .count();
        assert_eq!(checked, CHECK_RATE.burst as usize);
        assert_eq!(a.request(ip(2), 0), Err(Throttle::Address));
        // A second later the shared budget has refilled by its rate.
        let checked = (0..10_000)
            .filter(|_| a.request(ip(2), 1000) == Ok(Admitted::TokenMustProve))
            .count();
        assert_eq!(checked, CHECK_RATE.burst as usize);
    }

    #[test]
    fn dead_tokens_are_remembered_within_a_bound() {
        let a = Admission::new(1, 0);
        a.mark_dead("et-1");
        a.mark_dead("et-1");
        assert!(a.is_dead("et-1"));
        assert!(!a.is_dead("et-2"));
        for i in 0..DEAD_TOKENS {
            a.mark_dead(&format!("x-{i}"));
        }
        assert!(!a.is_dead("et-1"), "the oldest made room");
        assert_eq!(lock(&a.dead).len(), DEAD_TOKENS);
    }

    #[tokio::test]
    async fn decisions_wait_for_a_slot_and_a_full_queue_is_told_busy() {
        let a = std::sync::Arc::new(Admission::new(1, 0));
        let wait = Duration::from_millis(100);
        let held = a.slot().await.unwrap();
        // One waits for its wait and is told to come back.
        assert_eq!(a.slot_within(wait).await.err(), Some(Throttle::Busy));
        // One that waits gets the slot when it is given back.
        let b = a.clone();
        let waiter =
            tokio::spawn(async move { b.slot_within(Duration::from_secs(5)).await.is_ok() });
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(held);
        assert!(waiter.await.unwrap());
        // With MAX_WAITING already waiting, one more is refused at once.
        let held = a.slot().await.unwrap();
        a.waiting.store(MAX_WAITING, Ordering::SeqCst);
        assert_eq!(
            a.slot_within(Duration::from_secs(5)).await.err(),
            Some(Throttle::Busy)
        );
        drop(held);
    }
}
