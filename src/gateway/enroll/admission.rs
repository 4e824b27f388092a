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
//! gateway's other work (delivery, the console) keeps the rest. The slots are shared
//! between tenants (`slots.rs`): each tenant queues apart (its own [`MAX_WAITING`]) and
//! a slot given back goes to a waiting device of the tenant holding the fewest, so a
//! tenant alone has them all and one tenant's burst leaves another's device the next. A token's tenant is in its record, read inside the decision:
//! it is learnt from the token's first decision and remembered ([`TOKEN_TENANTS`]).

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::slots::Slots;
pub use super::slots::{Slot, MAX_WAITING};
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
/// How long a request waits for a slot before it is told to come back.
pub const SLOT_WAIT: Duration = Duration::from_secs(10);
/// Enrollment tokens whose tenant is remembered.
pub const TOKEN_TENANTS: usize = 1024;

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

/// Runs the exchange's CPU work (`opening.rs`) one piece at a time, on a blocking
/// thread: off the async workers that deliver.
pub struct Lane {
    one: Semaphore,
}

impl Default for Lane {
    fn default() -> Self {
        Self {
            one: Semaphore::new(1),
        }
    }
}

impl Lane {
    /// `work` on a blocking thread, after the pieces queued before it.
    /// `None` when the work panicked.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        // The semaphore is never closed.
        let _turn = self.one.acquire().await.ok()?;
        tokio::task::spawn_blocking(work).await.ok()
    }
}

/// The enrollment exchange's budgets and decision slots.
pub struct Admission {
    hello: Mutex<SourceBudgets>,
    hello_shared: Mutex<Bucket>,
    requests: Mutex<SourceBudgets>,
    checks: Mutex<Bucket>,
    dead: Mutex<VecDeque<String>>,
    slots: Slots,
    /// Where each request's envelope is opened: off the async workers.
    pub(super) lane: Lane,
    /// Token id → its tenant, learnt from decisions.
    token_tenants: Mutex<VecDeque<(String, String)>>,
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
            slots: Slots::new(slots),
            lane: Default::default(),
            token_tenants: Mutex::new(VecDeque::new()),
        }
    }

    /// Decisions in flight at once.
    pub fn slots(&self) -> usize {
        self.slots.count()
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

    /// The tenant of `token_id`, once a decision on it said.
    pub fn tenant_of_token(&self, token_id: &str) -> Option<String> {
        lock(&self.token_tenants)
            .iter()
            .find(|(t, _)| t == token_id)
            .map(|(_, tenant)| tenant.clone())
    }

    /// A decision on `token_id` enrolled (or found) a node of `tenant`.
    pub fn learn_token_tenant(&self, token_id: &str, tenant: &str) {
        let mut known = lock(&self.token_tenants);
        if !known.iter().any(|(t, _)| t == token_id) {
            if known.len() >= TOKEN_TENANTS {
                known.pop_front();
            }
            known.push_back((token_id.to_string(), tenant.to_string()));
        }
    }

    /// A decision slot ([`super::slots`]): waits up to [`SLOT_WAIT`] behind at most
    /// [`MAX_WAITING`] others of its tenant.
    pub async fn slot(&self, tenant: Option<&str>) -> Result<Slot<'_>, Throttle> {
        self.slot_within(tenant, SLOT_WAIT).await
    }

    async fn slot_within(
        &self,
        tenant: Option<&str>,
        wait: Duration,
    ) -> Result<Slot<'_>, Throttle> {
        self.slots
            .take(tenant, wait)
            .await
            .map_err(|_| Throttle::Busy)
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
        let held = a.slot(None).await.unwrap();
        // One waits for its wait and is told to come back.
        assert_eq!(a.slot_within(None, wait).await.err(), Some(Throttle::Busy));
        // One that waits gets the slot when it is given back.
        let b = a.clone();
        let waiter =
            tokio::spawn(async move { b.slot_within(None, Duration::from_secs(5)).await.is_ok() });
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(held);
        assert!(waiter.await.unwrap());
    }

    #[test]
    fn a_tokens_tenant_is_remembered_within_a_bound() {
        let a = Admission::new(4, 0);
        a.learn_token_tenant("et-1", "bulk");
        assert_eq!(a.tenant_of_token("et-1").as_deref(), Some("bulk"));
        for i in 0..TOKEN_TENANTS {
            a.learn_token_tenant(&format!("x-{i}"), "quiet");
        }
        assert_eq!(a.tenant_of_token("et-1"), None, "the oldest made room");
    }

    /// The work leaves the runtime's thread (so a burst does not hold up what else the
    /// workers run), and the lane runs one piece at a time.
    #[tokio::test(flavor = "current_thread")]
    async fn work_runs_off_the_runtime_one_piece_at_a_time() {
        let lane = Arc::new(Lane::default());
        let runtime_thread = std::thread::current().id();
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let pieces = (0..8).map(|_| {
            let (lane, now, most) = (lane.clone(), now.clone(), most.clone());
            tokio::spawn(async move {
                lane.run(move || {
                    let at = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(at, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    now.fetch_sub(1, Ordering::SeqCst);
                    std::thread::current().id()
                })
                .await
                .unwrap()
            })
        });
        for p in futures_util::future::join_all(pieces).await {
            assert_ne!(p.unwrap(), runtime_thread);
        }
        assert_eq!(most.load(Ordering::SeqCst), 1);
    }
}
