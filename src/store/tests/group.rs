//! One group, several requests: a request that fails part-way takes back exactly its own
//! writes (records, id index, counters, the byte total), and the requests
//! around it in the same group commit as if it had never been there.
//!
//! A wrapper engine holds the writer at the start of its first group until the test has
//! queued the other requests, so all of them are evaluated in that one group.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use super::*;
use crate::store::engine::{self, Engine, EngineError, GroupBuilder};

#[derive(Default)]
struct GateState {
    writer_waiting: bool,
    open: bool,
}

struct Gate {
    inner: Box<dyn Engine>,
    state: Mutex<GateState>,
    changed: Condvar,
    commits: AtomicU64,
}

impl Gate {
    fn open_engine(kind: EngineKind, dir: &Path) -> Arc<Gate> {
        Arc::new(Gate {
            inner: engine::open(kind, dir).unwrap(),
            state: Mutex::new(GateState::default()),
            changed: Condvar::new(),
            commits: AtomicU64::new(0),
        })
    }
    fn wait_for_writer(&self) {
        let mut s = self.state.lock().unwrap();
        while !s.writer_waiting {
            s = self.changed.wait(s).unwrap();
        }
    }
    fn release(&self) {
        self.state.lock().unwrap().open = true;
        self.changed.notify_all();
    }
    /// Holds the writer again at the start of its next group.
    fn close(&self) {
        let mut s = self.state.lock().unwrap();
        s.open = false;
        s.writer_waiting = false;
    }
}

pass_through_reader!(Gate);

impl Engine for Gate {
    fn name(&self) -> &'static str {
        "gate"
    }
    fn commit_group(&self, build: &mut GroupBuilder<'_>) -> Result<(), EngineError> {
        {
            let mut s = self.state.lock().unwrap();
            s.writer_waiting = true;
            self.changed.notify_all();
            while !s.open {
                s = self.changed.wait(s).unwrap();
            }
        }
        self.commits.fetch_add(1, Ordering::SeqCst);
        self.inner.commit_group(build)
    }
    fn sync(&self) -> Result<(), EngineError> {
        self.inner.sync()
    }
    pass_through_engine_methods!();
}

fn a_failed_request_takes_back_only_its_own_writes(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let gate = Gate::open_engine(kind, d.path());
    let o = StoreOptions {
        max_messages_per_recipient: 2,
        ..opts(kind)
    };
    let s = Store::open_on(d.path(), o, Arc::new(ManualClock::new(T0)), gate.clone()).unwrap();

    let a = s.enqueue(msg("gw2", "a0", 0, b"a"));
    gate.wait_for_writer();
    // Queued behind `a`, so evaluated in the same group: b0 and b1 fit the cap of 2,
    // b2 does not, so the whole request fails and must take b0 and b1 back.
    let b = s.write(
        ["b0", "b1", "b2"]
            .iter()
            .map(|id| WriteOp::Enqueue(msg("gw", id, 0, b"b")))
            .collect(),
    );
    // Only fits if b's counter increments were taken back.
    let c = s.enqueue(msg("gw", "c0", 0, b"c"));
    gate.release();

    assert!(matches!(a.wait().unwrap(), EnqueueOutcome::Queued { .. }));
    let e = b.wait().unwrap_err();
    assert!(matches!(e, StoreError::QueueFull { .. }), "{e}");
    assert!(matches!(c.wait().unwrap(), EnqueueOutcome::Queued { .. }));
    assert_eq!(gate.commits.load(Ordering::SeqCst), 1, "one group");

    assert_eq!(
        ids(&s.next_batch("outbox", "gw", 10, T0).unwrap()),
        vec!["c0"]
    );
    assert_eq!(
        ids(&s.next_batch("outbox", "gw2", 10, T0).unwrap()),
        vec!["a0"]
    );
    // b0's id index entry went with it: the id is free, not a duplicate.
    assert!(matches!(
        s.enqueue(msg("gw", "b0", 0, b"b")).wait().unwrap(),
        EnqueueOutcome::Queued { .. }
    ));
    let e = s.enqueue(msg("gw", "b1", 0, b"b")).wait().unwrap_err();
    assert!(
        matches!(e, StoreError::QueueFull { .. }),
        "cap of 2 reached: {e}"
    );
    // Nothing of b is left behind after a reopen either.
    drop(s);
    drop(gate);
    let s = open(kind, d.path(), &ManualClock::new(T0));
    assert_eq!(
        ids(&s.next_batch("outbox", "gw", 10, T0).unwrap()),
        vec!["c0", "b0"]
    );
}

/// A sweep in the same group as enqueues into a lane reads the lane's committed state,
/// which does not show those newcomers; the lane's next due time must still come before
/// the earliest of them expires (bounded by the committed tail, not the group's).
fn a_sweep_does_not_lose_lane_members_that_joined_in_its_own_group(kind: EngineKind) {
    let d = tempfile::tempdir().unwrap();
    let gate = Gate::open_engine(kind, d.path());
    let s = Store::open_on(
        d.path(),
        opts(kind),
        Arc::new(ManualClock::new(T0)),
        gate.clone(),
    )
    .unwrap();
    let expiring = |id: &str, at: u64| {
        let mut m = msg("gw", id, 0, b"x");
        m.expires_at_ms = at;
        m
    };
    let a = s.enqueue(expiring("a", T0 + 1_000));
    gate.wait_for_writer();
    gate.release();
    a.wait().unwrap();

    gate.close();
    // Both join the lane (each no earlier than the tail minus the slack), in one group
    // with a sweep: c expires before b's tail minus the slack.
    let c = s.enqueue(expiring("c", T0 + 3_000));
    gate.wait_for_writer();
    let b = s.enqueue(expiring("b", T0 + 6_000));
    let swept = s.sweep_expired(T0 + 1_200);
    gate.release();
    c.wait().unwrap();
    b.wait().unwrap();
    let swept: Vec<String> = swept
        .wait()
        .unwrap()
        .into_iter()
        .map(|e| e.message_id)
        .collect();
    assert_eq!(swept, vec!["a"]);
    assert_eq!(s.next_expiry_ms().unwrap(), Some(T0 + 3_000));
    assert_eq!(swept_ids(&s, T0 + 3_500), vec!["c"], "c came due in time");
    assert_eq!(s.next_expiry_ms().unwrap(), Some(T0 + 6_000));
}

for_each_engine!(
    a_failed_request_takes_back_only_its_own_writes,
    a_sweep_does_not_lose_lane_members_that_joined_in_its_own_group,
);
