//! Budgets for what strangers may ask: a token bucket per client address, in a table of
//! bounded size (PROTOCOL §15.3; the console's sign-in, docs/CONSOLE.md); [`Budgets`] is
//! the same table for any key (the console's sign-ins per token).
//!
//! Pure: the caller gives the time and the address. One flooding address empties only its
//! own bucket, so an honest client at another address is answered as if there were no
//! flood. IPv6 addresses are budgeted per /64 (what one subscriber is usually given, so a
//! single host cannot mint fresh budgets by rotating its interface id); an IPv4-mapped
//! IPv6 address counts as its IPv4 address.
//!
//! The table holds at most `max_sources` addresses. A bucket that has refilled to its
//! burst is indistinguishable from a fresh one and is dropped first; when every tracked
//! address is still drawing down, the one heard from longest ago makes room. So memory is
//! bounded whatever the number of addresses, and a new address is always given its
//! burst (never refused because the table is full).

use std::collections::HashMap;
use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr};

/// A token bucket's shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Requests a fresh source may make at once.
    pub burst: f64,
    /// Requests a second after that.
    pub per_s: f64,
}

/// One token bucket (the caller gives the time).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    tokens: f64,
    last_ms: u64,
}

impl Bucket {
    /// A full bucket at `now_ms`.
    pub fn full(rate: Rate, now_ms: u64) -> Self {
        Self {
            tokens: rate.burst,
            last_ms: now_ms,
        }
    }

    fn refill(&mut self, rate: Rate, now_ms: u64) {
        let dt = now_ms.saturating_sub(self.last_ms) as f64 / 1000.0;
        self.last_ms = self.last_ms.max(now_ms);
        self.tokens = (self.tokens + dt * rate.per_s).min(rate.burst);
    }

    /// Take one token at `now_ms`; false when the bucket is empty.
    pub fn take(&mut self, rate: Rate, now_ms: u64) -> bool {
        self.refill(rate, now_ms);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Is there a token at `now_ms` (nothing taken)?
    pub fn has(&mut self, rate: Rate, now_ms: u64) -> bool {
        self.refill(rate, now_ms);
        self.tokens >= 1.0
    }

    fn is_full(&self, rate: Rate, now_ms: u64) -> bool {
        let mut b = *self;
        b.refill(rate, now_ms);
        b.tokens >= rate.burst
    }
}

/// The address a budget is kept for: IPv4 as is, IPv6 by its /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Source(IpAddr);

impl Source {
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(_) => Source(ip),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source(IpAddr::V4(v4)),
                None => {
                    let s = v6.segments();
                    Source(IpAddr::V6(Ipv6Addr::new(
                        s[0], s[1], s[2], s[3], 0, 0, 0, 0,
                    )))
                }
            },
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V4(a) => write!(f, "{a}"),
            IpAddr::V6(a) => write!(f, "{a}/64"),
        }
    }
}

/// A token bucket per source address, at most `max_sources` of them.
#[derive(Debug, Clone)]
pub struct SourceBudgets(Budgets<Source>);

impl SourceBudgets {
    pub fn new(rate: Rate, max_sources: usize) -> Self {
        Self(Budgets::new(rate, max_sources))
    }

    /// Take one of `ip`'s tokens at `now_ms`; false when its bucket is empty.
    pub fn take(&mut self, ip: IpAddr, now_ms: u64) -> bool {
        self.0.take(Source::of(ip), now_ms)
    }

    /// Has `ip` a token left at `now_ms` (nothing taken)?
    pub fn has(&mut self, ip: IpAddr, now_ms: u64) -> bool {
        self.0.has(&Source::of(ip), now_ms)
    }

    /// Addresses tracked now.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A token bucket per key (a source address, a token id), at most `max_keys` of them,
/// bounded as the module says for addresses.
#[derive(Debug, Clone)]
pub struct Budgets<K> {
    rate: Rate,
    max_keys: usize,
    buckets: HashMap<K, Bucket>,
}

impl<K: Hash + Eq + Clone> Budgets<K> {
    pub fn new(rate: Rate, max_keys: usize) -> Self {
        Self {
            rate,
            max_keys: max_keys.max(1),
            buckets: HashMap::new(),
        }
    }

    /// Take one of `key`'s tokens at `now_ms`; false when its bucket is empty.
    pub fn take(&mut self, key: K, now_ms: u64) -> bool {
        let rate = self.rate;
        self.bucket(key, now_ms).take(rate, now_ms)
    }

    /// Has `key` a token left at `now_ms` (nothing taken)?
    pub fn has(&mut self, key: &K, now_ms: u64) -> bool {
        let rate = self.rate;
        match self.buckets.get_mut(key) {
            Some(b) => b.has(rate, now_ms),
            None => rate.burst >= 1.0,
        }
    }

    /// Keys tracked now.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    fn bucket(&mut self, key: K, now_ms: u64) -> &mut Bucket {
        if !self.buckets.contains_key(&key) && self.buckets.len() >= self.max_keys {
            self.make_room(now_ms);
        }
        let rate = self.rate;
        self.buckets
            .entry(key)
            .or_insert_with(|| Bucket::full(rate, now_ms))
    }

    /// Drop every bucket that has refilled (nothing is lost: a fresh one is the same);
    /// if none has, the one heard from longest ago.
    fn make_room(&mut self, now_ms: u64) {
        let rate = self.rate;
        self.buckets.retain(|_, b| !b.is_full(rate, now_ms));
        if self.buckets.len() >= self.max_keys {
            if let Some(oldest) = self
                .buckets
                .iter()
                .min_by_key(|(_, b)| b.last_ms)
                .map(|(s, _)| s.clone())
            {
                self.buckets.remove(&oldest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    const RATE: Rate = Rate {
        burst: 5.0,
        per_s: 1.0,
    };

    fn v4(n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0x7f00_0000 + n))
    }

    #[test]
    fn one_flooding_address_does_not_touch_another() {
        let mut b = SourceBudgets::new(RATE, 100);
        let taken = (0..1000).filter(|_| b.take(v4(2), 0)).count();
        assert_eq!(taken, 5);
        assert!(b.take(v4(3), 0), "another address still has its burst");
        assert!(!b.take(v4(2), 500));
        assert!(b.take(v4(2), 1000), "one token back after a second");
    }

    #[test]
    fn ipv6_is_budgeted_per_64_and_mapped_v4_as_v4() {
        let mut b = SourceBudgets::new(RATE, 100);
        for i in 0..5u16 {
            let a: IpAddr = Ipv6Addr::new(0x2001, 0xdb8, 1, 2, i, i, i, i).into();
            assert!(b.take(a, 0));
        }
        let sixth: IpAddr = Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 9, 9, 9, 9).into();
        assert!(!b.take(sixth, 0), "one /64 shares one bucket");
        let other: IpAddr = Ipv6Addr::new(0x2001, 0xdb8, 1, 3, 0, 0, 0, 1).into();
        assert!(b.take(other, 0));
        let mapped: IpAddr = Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped().into();
        for _ in 0..5 {
            assert!(b.take(mapped, 0));
        }
        assert!(!b.take(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 0));
        assert_eq!(Source::of(sixth).to_string(), "2001:db8:1:2::/64");
    }

    #[test]
    fn a_full_table_drops_refilled_buckets_first_then_the_oldest() {
        let mut b = SourceBudgets::new(RATE, 3);
        // 1 drew down long ago and has refilled; 2 and 3 are drawing down now.
        assert!(b.take(v4(1), 0));
        for _ in 0..5 {
            assert!(b.take(v4(2), 10_000));
            assert!(b.take(v4(3), 10_001));
        }
        assert!(b.take(v4(4), 10_002), "a new address gets its burst");
        assert_eq!(b.len(), 3);
        assert!(!b.take(v4(2), 10_003), "2 kept its empty bucket");
        // Now all three are drawing down: the oldest (2, last heard 10_003… but 3 at
        // 10_001 is older) makes room.
        assert!(b.take(v4(5), 10_004));
        assert!(b.take(v4(3), 10_005), "3 was dropped, and starts afresh");
    }

    proptest! {
        /// Whatever the others do, an address is granted at most burst + rate × time,
        /// the table never outgrows its bound, and a fresh address's first request
        /// is granted.
        #[test]
        fn budget_bounds_hold(
            reqs in proptest::collection::vec((0u32..40, 0u64..200), 1..600),
            max in 1usize..16,
        ) {
            let mut b = SourceBudgets::new(RATE, max);
            let mut now = 0u64;
            let mut granted: HashMap<u32, u64> = HashMap::new();
            let mut seen = std::collections::HashSet::new();
            for (who, dt) in reqs {
                now += dt;
                let fresh = seen.insert(who);
                let ok = b.take(v4(who), now);
                if fresh {
                    prop_assert!(ok);
                }
                if ok {
                    *granted.entry(who).or_default() += 1;
                }
                prop_assert!(b.len() <= max);
            }
            // With eviction an address may be forgotten and start afresh, so the
            // strict per-address bound holds only where the table never filled.
            if seen.len() <= max {
                for n in granted.values() {
                    prop_assert!(*n as f64 <= RATE.burst + RATE.per_s * now as f64 / 1000.0 + 1e-9);
                }
            }
        }
    }
}
