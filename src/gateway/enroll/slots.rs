//! Enrollment decision slots shared between tenants (PROTOCOL §15.3).
//!
//! A bounded number of decisions run at once. A tenant alone may take every slot; while
//! another tenant's device waits, a tenant holding its share ([`tenant_share`]: all but
//! a quarter, at least one left) takes no more, so the next slot given back goes to the
//! device that waits for its tenant's first. Each tenant waits in a queue of its own,
//! bounded by [`MAX_WAITING`]: one tenant's burst neither takes every slot from another
//! nor fills its queue. The rule is [`Held::may_take`], pure; [`Slots`] waits on it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;

/// Decisions of one tenant that may wait for a slot; past it the request is told to
/// come back.
pub const MAX_WAITING: usize = 512;

/// The slots one tenant may hold while another tenant's device waits: all but a quarter
/// of them, and at least one left for the others.
pub fn tenant_share(slots: usize) -> usize {
    if slots <= 1 {
        1
    } else {
        slots - (slots / 4).max(1)
    }
}

/// Who holds and who waits, by tenant (`""`: a device whose token's tenant is not
/// known yet).
#[derive(Debug, Default)]
pub struct Held {
    free: usize,
    /// Tenant → (slots held, devices waiting); no entry at (0, 0).
    by: HashMap<String, (usize, usize)>,
}

impl Held {
    pub fn new(slots: usize) -> Self {
        Self {
            free: slots,
            by: HashMap::new(),
        }
    }

    /// May a device of `tenant` take a slot now?
    pub fn may_take(&self, tenant: &str, share: usize) -> bool {
        if self.free == 0 {
            return false;
        }
        let mine = self.by.get(tenant).map_or(0, |c| c.0);
        mine < share || !self.by.iter().any(|(t, c)| t != tenant && c.1 > 0)
    }

    fn entry(&mut self, tenant: &str) -> &mut (usize, usize) {
        self.by.entry(tenant.to_string()).or_default()
    }

    fn tidy(&mut self, tenant: &str) {
        if self.by.get(tenant) == Some(&(0, 0)) {
            self.by.remove(tenant);
        }
    }

    fn take(&mut self, tenant: &str) {
        self.free -= 1;
        self.entry(tenant).0 += 1;
    }

    fn give_back(&mut self, tenant: &str) {
        self.free += 1;
        let c = self.entry(tenant);
        c.0 = c.0.saturating_sub(1);
        self.tidy(tenant);
    }

    fn waiting(&self, tenant: &str) -> usize {
        self.by.get(tenant).map_or(0, |c| c.1)
    }

    fn wait(&mut self, tenant: &str) {
        self.entry(tenant).1 += 1;
    }

    fn stop_waiting(&mut self, tenant: &str) {
        let c = self.entry(tenant);
        c.1 = c.1.saturating_sub(1);
        self.tidy(tenant);
    }
}

/// Why no slot was had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoSlot;

/// The decision slots.
pub struct Slots {
    count: usize,
    share: usize,
    held: Mutex<Held>,
    /// A slot given back or a waiter gone: the waiters look again.
    changed: Notify,
}

/// A slot held by a device of `tenant`; given back on drop.
pub struct Slot<'a> {
    slots: &'a Slots,
    tenant: String,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.slots.lock().give_back(&self.tenant);
        self.slots.changed.notify_waiters();
    }
}

impl Slots {
    pub fn new(count: usize) -> Self {
        let count = count.max(1);
        Self {
            count,
            share: tenant_share(count),
            held: Mutex::new(Held::new(count)),
            changed: Notify::new(),
        }
    }

    pub fn count(&self) -> usize {
        self.count
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a device of `tenant`: at once, else after waiting up to `wait` behind
    /// fewer than [`MAX_WAITING`] others of its tenant.
    pub async fn take(&self, tenant: Option<&str>, wait: Duration) -> Result<Slot<'_>, NoSlot> {
        let tenant = tenant.unwrap_or("").to_string();
        let slot = |held: &mut Held| {
            held.take(&tenant);
            Slot {
                slots: self,
                tenant: tenant.clone(),
            }
        };
        {
            let mut held = self.lock();
            if held.may_take(&tenant, self.share) {
                return Ok(slot(&mut held));
            }
            if held.waiting(&tenant) >= MAX_WAITING {
                return Err(NoSlot);
            }
            held.wait(&tenant);
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let changed = self.changed.notified();
            let mut changed = std::pin::pin!(changed);
            // Registered before looking, so a change after the look wakes it.
            changed.as_mut().enable();
            {
                let mut held = self.lock();
                if held.may_take(&tenant, self.share) {
                    held.stop_waiting(&tenant);
                    return Ok(slot(&mut held));
                }
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                self.lock().stop_waiting(&tenant);
                // Another tenant's holder may take more now that this one left.
                self.changed.notify_waiters();
                return Err(NoSlot);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_share_leaves_the_others_at_least_one_slot() {
        assert_eq!(tenant_share(1), 1);
        assert_eq!(tenant_share(4), 3);
        for slots in 2..64 {
            let share = tenant_share(slots);
            assert!(share >= 1 && share < slots, "{share} of {slots}");
        }
    }

    #[test]
    fn a_tenant_alone_takes_every_slot_but_not_another_waiters_share() {
        let mut h = Held::new(4);
        for _ in 0..4 {
            assert!(h.may_take("bulk", 3));
            h.take("bulk");
        }
        assert!(!h.may_take("bulk", 3), "none free");
        h.give_back("bulk");
        // quiet waits: bulk, at its share or over, takes no more; quiet does.
        h.wait("quiet");
        assert!(!h.may_take("bulk", 3));
        assert!(h.may_take("quiet", 3));
        h.stop_waiting("quiet");
        h.take("quiet");
        h.give_back("quiet");
        assert!(
            !h.by.contains_key("quiet"),
            "an idle tenant leaves no entry"
        );
        assert!(h.may_take("bulk", 3), "alone again");
    }

    proptest! {
        /// Whatever holds and waits, a tenant under its share is never kept from a free
        /// slot, and a slot is never taken beyond the count.
        #[test]
        fn under_its_share_a_tenant_takes_a_free_slot(
            ops in proptest::collection::vec((0u8..3, 0u8..4), 0..64),
        ) {
            let (count, share) = (4, tenant_share(4));
            let names = ["", "a", "b"];
            let mut h = Held::new(count);
            for (t, op) in ops {
                let t = names[t as usize];
                match op {
                    0 if h.may_take(t, share) => h.take(t),
                    1 if h.by.get(t).is_some_and(|c| c.0 > 0) => h.give_back(t),
                    2 => h.wait(t),
                    3 if h.waiting(t) > 0 => h.stop_waiting(t),
                    _ => {}
                }
                let held: usize = h.by.values().map(|c| c.0).sum();
                prop_assert_eq!(held + h.free, count);
                for t in names {
                    let mine = h.by.get(t).map_or(0, |c| c.0);
                    if h.free > 0 && mine < share {
                        prop_assert!(h.may_take(t, share));
                    }
                }
            }
        }
    }

    #[tokio::test]
    async fn a_waiting_device_gets_a_slot_given_back_and_queues_are_apart() {
        let s = Slots::new(4);
        let wait = Duration::from_millis(50);
        let mut bulk = Vec::new();
        for _ in 0..4 {
            bulk.push(s.take(Some("bulk"), wait).await.unwrap());
        }
        assert!(s.take(Some("quiet"), wait).await.is_err(), "none free");
        // quiet waits, and has the slot bulk gives back.
        let quiet = s.take(Some("quiet"), Duration::from_secs(5));
        let give_back = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            bulk.pop();
        };
        let (quiet, ()) = tokio::join!(quiet, give_back);
        let quiet = quiet.expect("quiet had the slot given back");
        // bulk's queue full does not make quiet's next device busy, only bulk's.
        s.lock().entry("bulk").1 = MAX_WAITING;
        assert_eq!(s.take(Some("bulk"), wait).await.err(), Some(NoSlot));
        drop(quiet);
        assert!(s.take(Some("quiet"), wait).await.is_ok());
        s.lock().entry("bulk").1 = 0;
        drop(bulk);
        assert_eq!(s.lock().free, 4);
    }
}
