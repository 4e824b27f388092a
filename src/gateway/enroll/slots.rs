//! Enrollment decision slots shared between tenants (PROTOCOL §15.3).
//!
//! A bounded number of decisions run at once. A device takes a free slot at once;
//! otherwise it waits in its tenant's queue (first come, first served, at most
//! [`MAX_WAITING`]), and a slot given back is handed straight to a waiting device of
//! the tenant holding the fewest slots ([`Held::give_back`], pure). So a tenant alone
//! has every slot, one tenant's burst leaves another tenant's device the next slot,
//! and a full queue of one tenant refuses only its own devices.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;

/// Decisions of one tenant that may wait for a slot; past it the request is told to
/// come back.
pub const MAX_WAITING: usize = 512;

/// One tenant's slots held and devices waiting (in order of arrival).
#[derive(Debug)]
struct Tenant<W> {
    held: usize,
    waiting: VecDeque<(u64, W)>,
}

impl<W> Default for Tenant<W> {
    fn default() -> Self {
        Self {
            held: 0,
            waiting: VecDeque::new(),
        }
    }
}

/// Who holds and who waits, by tenant (`""`: a device whose token's tenant is not
/// known yet); `W` is how a waiting device is told it has its slot.
#[derive(Debug)]
pub struct Held<W> {
    free: usize,
    /// No entry for a tenant holding and waiting for nothing.
    by: HashMap<String, Tenant<W>>,
}

impl<W> Held<W> {
    pub fn new(slots: usize) -> Self {
        Self {
            free: slots,
            by: HashMap::new(),
        }
    }

    /// A free slot for `tenant`, if there is one. A slot is free only while nobody
    /// waits (one given back goes to a waiting device).
    pub fn try_take(&mut self, tenant: &str) -> bool {
        if self.free == 0 {
            return false;
        }
        self.free -= 1;
        self.by.entry(tenant.to_string()).or_default().held += 1;
        true
    }

    /// Queue a device of `tenant` (`seq`: its place in arrival order); `Err` with its
    /// waiter back when its tenant's queue is full.
    pub fn enqueue(&mut self, tenant: &str, seq: u64, w: W) -> Result<(), W> {
        let t = self.by.entry(tenant.to_string()).or_default();
        if t.waiting.len() >= MAX_WAITING {
            self.tidy(tenant);
            return Err(w);
        }
        t.waiting.push_back((seq, w));
        Ok(())
    }

    /// A device stops waiting: `false` when it is no longer queued (it was handed a
    /// slot).
    pub fn leave(&mut self, tenant: &str, seq: u64) -> bool {
        let Some(t) = self.by.get_mut(tenant) else {
            return false;
        };
        let before = t.waiting.len();
        t.waiting.retain(|(s, _)| *s != seq);
        let left = t.waiting.len() < before;
        self.tidy(tenant);
        left
    }

    /// `tenant` gives a slot back: handed to the first waiting device of the tenant
    /// holding the fewest slots (of those that wait; the earlier arrival on a tie), now
    /// counted to it, or free when nobody waits.
    pub fn give_back(&mut self, tenant: &str) -> Option<(String, W)> {
        if let Some(t) = self.by.get_mut(tenant) {
            t.held = t.held.saturating_sub(1);
        }
        self.tidy(tenant);
        let next = self
            .by
            .iter()
            .filter_map(|(name, t)| t.waiting.front().map(|(seq, _)| (t.held, *seq, name)))
            .min()
            .map(|(_, _, name)| name.clone());
        let Some(name) = next else {
            self.free += 1;
            return None;
        };
        let t = self.by.get_mut(&name)?;
        let (_, w) = t.waiting.pop_front()?;
        t.held += 1;
        Some((name, w))
    }

    fn tidy(&mut self, tenant: &str) {
        if self
            .by
            .get(tenant)
            .is_some_and(|t| t.held == 0 && t.waiting.is_empty())
        {
            self.by.remove(tenant);
        }
    }
}

/// Why no slot was had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoSlot;

/// The decision slots.
pub struct Slots {
    count: usize,
    held: Mutex<Held<oneshot::Sender<()>>>,
    arrivals: std::sync::atomic::AtomicU64,
}

/// A slot held by a device of `tenant`; given back on drop.
pub struct Slot<'a> {
    slots: &'a Slots,
    tenant: String,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.slots.release(&self.tenant);
    }
}

/// A device in its tenant's queue. Dropped without its slot (it waited too long, or
/// its request went away), it leaves the queue, or passes on a slot it was handed.
struct Waiting<'a> {
    slots: &'a Slots,
    tenant: &'a str,
    seq: u64,
    rx: oneshot::Receiver<()>,
    has_slot: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.has_slot {
            return;
        }
        let left = self.slots.lock().leave(self.tenant, self.seq);
        // Not queued any more: it was handed a slot (under the lock, before this one).
        if !left && self.rx.try_recv().is_ok() {
            self.slots.release(self.tenant);
        }
    }
}

impl Slots {
    pub fn new(count: usize) -> Self {
        let count = count.max(1);
        Self {
            count,
            held: Mutex::new(Held::new(count)),
            arrivals: std::sync::atomic::AtomicU64::new(0),
        }
    }

    pub fn count(&self) -> usize {
        self.count
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held<oneshot::Sender<()>>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `tenant` gives a slot back: to the next waiting device, else free.
    fn release(&self, tenant: &str) {
        let mut held = self.lock();
        let mut from = tenant.to_string();
        while let Some((to, tx)) = held.give_back(&from) {
            if tx.send(()).is_ok() {
                return;
            }
            // Its device is gone: the slot counted to it goes on.
            from = to;
        }
    }

    /// A slot for a device of `tenant`: at once, else after waiting up to `wait` behind
    /// fewer than [`MAX_WAITING`] others of its tenant.
    pub async fn take(&self, tenant: Option<&str>, wait: Duration) -> Result<Slot<'_>, NoSlot> {
        let tenant = tenant.unwrap_or("");
        let slot = || Slot {
            slots: self,
            tenant: tenant.to_string(),
        };
        let (seq, rx) = {
            let mut held = self.lock();
            if held.try_take(tenant) {
                return Ok(slot());
            }
            let seq = self
                .arrivals
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let (tx, rx) = oneshot::channel();
            held.enqueue(tenant, seq, tx).map_err(|_| NoSlot)?;
            (seq, rx)
        };
        let mut waiting = Waiting {
            slots: self,
            tenant,
            seq,
            rx,
            has_slot: false,
        };
        match tokio::time::timeout(wait, &mut waiting.rx).await {
            Ok(Ok(())) => {
                waiting.has_slot = true;
                Ok(slot())
            }
            _ => Err(NoSlot),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_slot_given_back_goes_to_the_tenant_holding_fewest() {
        let mut h: Held<u32> = Held::new(4);
        for _ in 0..4 {
            assert!(h.try_take("bulk"));
        }
        assert!(!h.try_take("quiet"), "none free");
        h.enqueue("bulk", 1, 1).unwrap();
        h.enqueue("bulk", 2, 2).unwrap();
        h.enqueue("quiet", 3, 3).unwrap();
        // quiet came after bulk's two, and holds none: it has the next slot.
        assert_eq!(h.give_back("bulk"), Some(("quiet".to_string(), 3)));
        // Then bulk's, in their order.
        assert_eq!(h.give_back("quiet"), Some(("bulk".to_string(), 1)));
        assert_eq!(h.give_back("bulk"), Some(("bulk".to_string(), 2)));
        assert_eq!(h.give_back("bulk"), None);
        assert_eq!(h.free, 1);
        // A device that stopped waiting is not handed a slot.
        assert!(h.try_take("bulk"));
        h.enqueue("quiet", 4, 4).unwrap();
        assert!(h.leave("quiet", 4));
        assert!(!h.leave("quiet", 4));
        assert_eq!(h.give_back("bulk"), None);
    }

    #[test]
    fn a_full_queue_refuses_only_its_own_tenant() {
        let mut h: Held<u64> = Held::new(1);
        assert!(h.try_take("bulk"));
        for i in 0..MAX_WAITING as u64 {
            h.enqueue("bulk", i, i).unwrap();
        }
        assert_eq!(h.enqueue("bulk", 9_999, 9_999), Err(9_999));
        assert!(h.enqueue("quiet", 10_000, 10_000).is_ok());
    }

    proptest! {
        /// Whatever arrives, leaves and gives back: the slots held and free add up to
        /// the count, a slot is free only while nobody waits, and an idle tenant leaves
        /// no entry.
        #[test]
        fn slots_are_never_lost_nor_left_free_while_a_device_waits(
            ops in proptest::collection::vec((0u8..3, 0u8..3), 0..80),
        ) {
            let count = 4;
            let names = ["", "a", "b"];
            let mut h: Held<()> = Held::new(count);
            let mut seq = 0u64;
            for (t, op) in ops {
                let t = names[t as usize];
                match op {
                    0 if !h.try_take(t) => {
                        seq += 1;
                        let _ = h.enqueue(t, seq, ());
                    }
                    1 if h.by.get(t).is_some_and(|x| x.held > 0) => {
                        h.give_back(t);
                    }
                    2 => {
                        let first = h.by.get(t).and_then(|x| x.waiting.front().map(|w| w.0));
                        if let Some(s) = first {
                            prop_assert!(h.leave(t, s));
                        }
                    }
                    _ => {}
                }
                let held: usize = h.by.values().map(|x| x.held).sum();
                prop_assert_eq!(held + h.free, count);
                let waiting: usize = h.by.values().map(|x| x.waiting.len()).sum();
                prop_assert!(h.free == 0 || waiting == 0);
                prop_assert!(h.by.values().all(|x| x.held > 0 || !x.waiting.is_empty()));
            }
        }
    }

    #[tokio::test]
    async fn a_waiting_device_is_handed_the_slot_and_one_that_gives_up_loses_none() {
        let s = Slots::new(2);
        let wait = Duration::from_millis(50);
        let a = s.take(Some("bulk"), wait).await.unwrap();
        let b = s.take(Some("bulk"), wait).await.unwrap();
        // One gives up: nothing is lost.
        assert_eq!(s.take(Some("quiet"), wait).await.err(), Some(NoSlot));
        // One waits, and has the slot given back.
        let quiet = s.take(Some("quiet"), Duration::from_secs(5));
        let give_back = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(a);
        };
        let (quiet, ()) = tokio::join!(quiet, give_back);
        let quiet = quiet.expect("handed the slot given back");
        // A waiting request dropped midway (its client went away) loses no slot.
        let gone = s.take(Some("bulk"), Duration::from_secs(5));
        let _ = tokio::time::timeout(Duration::from_millis(10), gone).await;
        drop((quiet, b));
        assert_eq!(s.lock().free, 2);
        assert!(s.lock().by.is_empty());
    }
}
