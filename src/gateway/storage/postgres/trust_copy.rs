//! A replica's copy of the peers table with the addresses each of its versions changed,
//! so a reader a few versions behind is handed only those peers: an enrollment costs
//! the replica one peer, not the fleet (a copy of every peer per enrollment made a
//! 10,000-device burst quadratic). Pure: the database reads are `peers.rs`'s.

use std::collections::{BTreeSet, VecDeque};

use crate::daemon::trust::{Change, Update};
use crate::envelope::{Peer, TrustStore};

/// Changed addresses the log keeps: a reader further behind is handed every peer. A
/// replica's readers look at least once a second; this is minutes of an enrollment burst.
pub(super) const LOG_KEEP: usize = 8_192;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TrustCopy {
    version: u64,
    peers: TrustStore,
    /// `(version, address)`, oldest first: the addresses each version changed.
    log: VecDeque<(u64, String)>,
    /// The log holds every change of the versions after this one.
    complete_after: u64,
}

impl TrustCopy {
    /// A first read of every peer: version 1.
    pub(super) fn new(peers: TrustStore) -> Self {
        Self {
            version: 1,
            peers,
            log: VecDeque::new(),
            complete_after: 1,
        }
    }

    #[cfg(test)]
    fn version(&self) -> u64 {
        self.version
    }

    pub(super) fn peers(&self) -> &TrustStore {
        &self.peers
    }

    /// Every peer read again: the version moves only when something differs, and logs
    /// what did.
    pub(super) fn replace(&mut self, new: TrustStore) {
        let mut changed: BTreeSet<String> = BTreeSet::new();
        for p in self.peers.list() {
            let a = p.address();
            if new.get(&a) != Some(p) {
                changed.insert(a);
            }
        }
        for p in new.list() {
            let a = p.address();
            if self.peers.get(&a).is_none() {
                changed.insert(a);
            }
        }
        self.peers = new;
        self.record(changed);
    }

    /// The peers at `held` (addresses this copy has in the scope that was read) and
    /// `found` (what the database has there now): one read of a few peers. Those held
    /// and not found are gone.
    pub(super) fn put(&mut self, held: Vec<String>, found: Vec<Peer>) {
        let mut changed: BTreeSet<String> = BTreeSet::new();
        for a in held {
            if !found.iter().any(|p| p.address() == a) && self.peers.remove(&a).is_some() {
                changed.insert(a);
            }
        }
        for p in found {
            let a = p.address();
            if self.peers.get(&a) != Some(&p) {
                self.peers.insert(p);
                changed.insert(a);
            }
        }
        self.record(changed);
    }

    fn record(&mut self, changed: BTreeSet<String>) {
        if changed.is_empty() {
            return;
        }
        self.version += 1;
        for a in changed {
            self.log.push_back((self.version, a));
        }
        while self.log.len() > LOG_KEEP {
            if let Some((v, _)) = self.log.pop_front() {
                self.complete_after = self.complete_after.max(v);
            }
        }
    }

    /// What a reader holding version `known` needs: nothing when it is current, the
    /// peers changed since when the log reaches back that far, else every peer.
    pub(super) fn since(&self, known: Option<u64>) -> Option<(u64, Update)> {
        match known {
            Some(k) if k == self.version => None,
            Some(k) if k >= self.complete_after && k < self.version => {
                // The log is in version order: only its tail is read.
                let ids: BTreeSet<&str> = self
                    .log
                    .iter()
                    .rev()
                    .take_while(|(v, _)| *v > k)
                    .map(|(_, a)| a.as_str())
                    .collect();
                let changes = ids
                    .into_iter()
                    .map(|a| Change::of(&self.peers, a))
                    .collect();
                Some((self.version, Update::Changed(changes)))
            }
            _ => Some((self.version, Update::Full(self.peers.clone()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{IdentityDocument, Keys, Rights};
    use proptest::prelude::*;

    /// Two peers (two keys) for each of five ids, made once.
    fn peers() -> &'static Vec<[Peer; 2]> {
        static P: std::sync::OnceLock<Vec<[Peer; 2]>> = std::sync::OnceLock::new();
        P.get_or_init(|| {
            (0..5)
                .map(|i| {
                    let id = format!("node:{i}");
                    let p = || {
                        let doc = IdentityDocument::new(
                            &id,
                            "node",
                            &Keys::generate(),
                            "2026-01-01T00:00:00Z",
                        );
                        let mut t = TrustStore::new();
                        t.add(doc, Rights::default()).unwrap();
                        t.remove(&id).unwrap()
                    };
                    [p(), p()]
                })
                .collect()
        })
    }

    fn store(ps: &[&Peer]) -> TrustStore {
        let mut t = TrustStore::new();
        for p in ps {
            t.insert((*p).clone());
        }
        t
    }

    #[test]
    fn a_reader_behind_gets_only_what_changed_and_a_current_one_nothing() {
        let p = peers();
        let mut c = TrustCopy::new(store(&[&p[0][0], &p[1][0]]));
        assert_eq!(c.since(Some(1)), None);
        c.put(vec![], vec![p[2][0].clone()]);
        c.put(vec!["node:0".into()], vec![]);
        // The same again changes nothing and moves no version.
        c.put(vec![], vec![p[2][0].clone()]);
        assert_eq!(c.version(), 3);
        assert_eq!(
            c.since(Some(1)),
            Some((
                3,
                Update::Changed(vec![Change::remove("node:0"), Change::put(p[2][0].clone())])
            ))
        );
        assert_eq!(
            c.since(Some(2)),
            Some((3, Update::Changed(vec![Change::remove("node:0")])))
        );
        assert!(matches!(c.since(None), Some((3, Update::Full(_)))));
        // A version this copy never had (another process's): every peer.
        assert!(matches!(c.since(Some(9)), Some((3, Update::Full(_)))));
    }

    #[test]
    fn a_full_read_logs_only_the_peers_that_differ() {
        let p = peers();
        let mut c = TrustCopy::new(store(&[&p[0][0], &p[1][0], &p[2][0]]));
        c.replace(store(&[&p[0][0], &p[1][1], &p[3][0]]));
        assert_eq!(
            c.since(Some(1)),
            Some((
                2,
                Update::Changed(vec![
                    Change::put(p[1][1].clone()),
                    Change::remove("node:2"),
                    Change::put(p[3][0].clone()),
                ])
            ))
        );
        c.replace(c.peers().clone());
        assert_eq!(c.version(), 2);
    }

    #[test]
    fn a_reader_behind_what_the_log_keeps_gets_every_peer() {
        let p = peers();
        let mut c = TrustCopy::new(TrustStore::new());
        for n in 0..=LOG_KEEP {
            c.put(vec![], vec![p[n % 2][n / 2 % 2].clone()]);
        }
        assert!(matches!(c.since(Some(1)), Some((_, Update::Full(_)))));
        let v = c.version();
        assert!(matches!(c.since(Some(v - 1)), Some((_, Update::Changed(ref x))) if x.len() == 1));
    }

    /// An edit: put peer `k` of id `i`, or remove id `i`.
    fn edit() -> impl Strategy<Value = (usize, Option<usize>)> {
        (0..5usize, prop::option::of(0..2usize))
    }

    proptest! {
        /// Whatever a reader held, applying what `since` hands it gives the copy.
        #[test]
        fn what_since_hands_a_reader_brings_it_to_the_copy(
            edits in prop::collection::vec(prop::collection::vec(edit(), 0..4), 0..12),
            full_at in prop::collection::vec(any::<bool>(), 12),
        ) {
            let p = peers();
            let mut c = TrustCopy::new(TrustStore::new());
            let mut held: Vec<(u64, TrustStore)> = vec![(1, TrustStore::new())];
            for (n, batch) in edits.iter().enumerate() {
                let mut want = c.peers().clone();
                for (i, k) in batch {
                    match k {
                        Some(k) => want.insert(p[*i][*k].clone()),
                        None => {
                            want.remove(&format!("node:{i}"));
                        }
                    }
                }
                if full_at[n] {
                    c.replace(want.clone());
                } else {
                    let mut found: Vec<Peer> = Vec::new();
                    let mut gone = Vec::new();
                    for (i, _) in batch {
                        let a = format!("node:{i}");
                        match want.get(&a) {
                            Some(peer) if !found.contains(peer) => found.push(peer.clone()),
                            Some(_) => {}
                            None => gone.push(a),
                        }
                    }
                    c.put(gone, found);
                }
                prop_assert_eq!(c.peers(), &want);
                held.push((c.version(), want));
            }
            for (v, mut t) in held {
                if let Some((to, update)) = c.since(Some(v)) {
                    prop_assert_eq!(to, c.version());
                    update.apply_to(&mut t);
                }
                prop_assert_eq!(&t, c.peers());
            }
        }
    }
}
