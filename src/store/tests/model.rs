//! Model-based property test: random enqueue / ack / fail / sweep / time jumps /
//! reopen against a plain in-memory model. Checked after every step: per-recipient
//! FIFO (exact `next_batch` contents), nothing lost, nothing returned after its ack,
//! nothing expired returned, counters right.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::clock::Clock;

const PEERS: [&str; 3] = ["p0", "p1", "p2"];

#[derive(Debug, Clone)]
enum Step {
    Enqueue { peer: usize, prio: u8, ttl_ms: u64 },
    AckHead { peer: usize, n: usize },
    AckId { id: usize },
    FailHead { peer: usize },
    Advance { ms: u64 },
    Sweep,
    Reopen,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        // 19 s after 20 s arrives out of expiry order but inside a lane's slack.
        6 => (0..3usize, 0..3u8, prop_oneof![Just(1_000u64), Just(19_000), Just(20_000), Just(10_000_000)])
            .prop_map(|(peer, prio, ttl_ms)| Step::Enqueue { peer, prio, ttl_ms }),
        3 => (0..3usize, 1..4usize).prop_map(|(peer, n)| Step::AckHead { peer, n }),
        1 => (0..64usize).prop_map(|id| Step::AckId { id }),
        1 => (0..3usize).prop_map(|peer| Step::FailHead { peer }),
        2 => prop_oneof![Just(500u64), Just(5_000), Just(30_000)].prop_map(|ms| Step::Advance { ms }),
        1 => Just(Step::Sweep),
        1 => Just(Step::Reopen),
    ]
}

#[derive(Debug, Clone)]
struct M {
    id: String,
    prio: u8,
    seq: u64,
    expires: u64,
    next_attempt: u64,
    attempts: u32,
}

#[derive(Default)]
struct Model {
    queues: BTreeMap<usize, Vec<M>>,
    gone: BTreeSet<String>,
    seq: u64,
}

impl Model {
    fn sorted(&mut self, peer: usize) -> &mut Vec<M> {
        let q = self.queues.entry(peer).or_default();
        q.sort_by_key(|m| (255 - m.prio, m.seq));
        q
    }
    fn expect_batch(&mut self, peer: usize, now: u64) -> Vec<String> {
        let mut out = Vec::new();
        for m in self.sorted(peer).iter() {
            if m.expires <= now {
                continue;
            }
            if m.next_attempt > now {
                break;
            }
            out.push(m.id.clone());
        }
        out
    }
}

fn run(kind: EngineKind, steps: Vec<Step>) {
    let d = tempfile::tempdir().unwrap();
    let c = ManualClock::new(T0);
    let mut s = open(kind, d.path(), &c);
    let mut model = Model::default();
    let mut n_ids = 0usize;
    for st in steps {
        let now = c.now_ms();
        match st {
            Step::Enqueue { peer, prio, ttl_ms } => {
                let id = format!("m{n_ids}");
                n_ids += 1;
                let mut m = msg(PEERS[peer], &id, prio, id.as_bytes());
                m.created_at_ms = now;
                m.expires_at_ms = now + ttl_ms;
                let r = s.enqueue(m).wait().unwrap();
                assert!(matches!(r, EnqueueOutcome::Queued { .. }));
                model.seq += 1;
                let seq = model.seq;
                model.queues.entry(peer).or_default().push(M {
                    id,
                    prio,
                    seq,
                    expires: now + ttl_ms,
                    next_attempt: 0,
                    attempts: 0,
                });
            }
            Step::AckHead { peer, n } => {
                let batch = s.next_batch("outbox", PEERS[peer], n, now).unwrap();
                let got = ids(&batch);
                let out = s
                    .ack("outbox", PEERS[peer], got.clone(), now)
                    .wait()
                    .unwrap();
                assert!(out.iter().all(|o| o.was_stored));
                model
                    .queues
                    .entry(peer)
                    .or_default()
                    .retain(|m| !got.contains(&m.id));
                model.gone.extend(got);
            }
            Step::AckId { id } => {
                let id = format!("m{id}");
                let owner = model
                    .queues
                    .iter()
                    .find(|(_, q)| q.iter().any(|m| m.id == id))
                    .map(|(p, _)| *p);
                let peer = owner.unwrap_or(0);
                let out = s
                    .ack("outbox", PEERS[peer], vec![id.clone()], now)
                    .wait()
                    .unwrap();
                assert_eq!(out[0].was_stored, owner.is_some(), "was_stored for {id}");
                if owner.is_some() {
                    model.queues.entry(peer).or_default().retain(|m| m.id != id);
                    model.gone.insert(id);
                }
            }
            Step::FailHead { peer } => {
                let batch = s.next_batch("outbox", PEERS[peer], 1, now).unwrap();
                let got = ids(&batch);
                let dead = s
                    .record_failure("outbox", PEERS[peer], got.clone(), now, 0.0)
                    .wait()
                    .unwrap();
                assert!(dead.is_empty());
                for m in model.queues.entry(peer).or_default().iter_mut() {
                    if got.contains(&m.id) {
                        m.attempts += 1;
                        m.next_attempt = now + backoff::delay_ms(m.attempts + 1, 0.0);
                    }
                }
            }
            Step::Advance { ms } => c.advance_ms(ms),
            Step::Sweep => {
                let swept = s.sweep_expired(now).wait().unwrap();
                let mut want = BTreeSet::new();
                for q in model.queues.values_mut() {
                    for m in q.iter().filter(|m| m.expires <= now) {
                        want.insert(m.id.clone());
                    }
                    q.retain(|m| m.expires > now);
                }
                let got: BTreeSet<String> = swept.into_iter().map(|e| e.message_id).collect();
                assert_eq!(got, want);
                model.gone.extend(want);
            }
            Step::Reopen => {
                drop(s);
                s = open(kind, d.path(), &c);
            }
        }
        let now = c.now_ms();
        for (p, name) in PEERS.iter().enumerate() {
            let want = model.expect_batch(p, now);
            let got = ids(&s.next_batch("outbox", name, 1_000, now).unwrap());
            assert_eq!(got, want, "peer {name} at {now}");
            assert!(got.iter().all(|id| !model.gone.contains(id)));
            let depth = model.queues.get(&p).map(|q| q.len()).unwrap_or(0);
            assert_eq!(s.pending("outbox", name).unwrap(), depth);
        }
        // Expiry-index heads and lane heads together give the exact next expiry.
        let next = model.queues.values().flatten().map(|m| m.expires).min();
        assert_eq!(s.next_expiry_ms().unwrap(), next, "next expiry at {now}");
    }
    drop(s);
    let s = open(kind, d.path(), &c);
    assert!(s.doctor().unwrap().healthy());
}

fn cases() -> ProptestConfig {
    ProptestConfig {
        cases: 24,
        max_shrink_iters: 200,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(cases())]
    #[test]
    fn sqlite_matches_the_model(steps in proptest::collection::vec(step(), 1..40)) {
        run(EngineKind::Sqlite, steps);
    }
}

#[cfg(feature = "sled")]
proptest! {
    #![proptest_config(cases())]
    #[test]
    fn sled_matches_the_model(steps in proptest::collection::vec(step(), 1..40)) {
        run(EngineKind::Sled, steps);
    }
}
