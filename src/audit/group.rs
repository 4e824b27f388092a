//! Group commit for audit appends.
//!
//! Every tool call appends an entry and must not answer before that entry is durable.
//! Serialising "assign index → write → fsync" under one lock would cap the node at one
//! fsync per call. Instead callers queue their records; whichever caller finds no batch
//! in flight becomes the writer: it takes the whole queue, assigns consecutive indexes,
//! hands the batch to [`AuditStorage::append_batch`] *without* holding the lock (so the
//! queue keeps filling), then publishes the results and wakes everyone. Throughput is
//! then "batch size per fsync" while each caller still returns only once its own entry
//! is durable.
//!
//! Indexes stay dense and ordered because only the writer assigns them and at most one
//! batch is in flight. The frontier advances only after the storage write returned, so
//! roots and checkpoints never cover a non-durable entry. A failed (or panicking) write
//! poisons the log: nobody can tell which part of the batch reached the disk, so
//! further appends are refused until the log is reopened from storage.

use std::sync::MutexGuard;

use super::entry::AuditEntry;
use super::log::{AuditError, AuditLog, AuditStorage, Pending, State};
use super::merkle::{leaf_hash, Hash};
use super::AuditRecord;

const POISONED: &str = "audit log refuses appends after a failed write";

impl<S: AuditStorage> AuditLog<S> {
    /// Append one entry; durable when this returns. Returns `(index, leaf_hash)` for the
    /// call's `evidence`. Blocks (on the storage write); call from a blocking context.
    pub fn append(&self, record: AuditRecord, now_ms: u64) -> Result<(u64, Hash), AuditError> {
        let mut out = self.append_many(vec![record], now_ms)?;
        out.pop()
            .ok_or_else(|| AuditError::Corrupt("empty append result".into()))
    }

    /// Append several entries with consecutive indexes, durable when this returns.
    pub fn append_many(
        &self,
        records: Vec<AuditRecord>,
        now_ms: u64,
    ) -> Result<Vec<(u64, Hash)>, AuditError> {
        let mut st = self.lock();
        if st.poisoned {
            return Err(AuditError::Poisoned);
        }
        let ticket = st.next_ticket;
        st.next_ticket = st.next_ticket.wrapping_add(1);
        st.queue.push(Pending {
            ticket,
            records,
            now_ms,
        });
        loop {
            if let Some(result) = st.done.remove(&ticket) {
                return result.map_err(|msg| AuditError::Storage(msg.into()));
            }
            st = if st.writing {
                self.wake
                    .wait(st)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            } else {
                self.write_queue(st)
            };
        }
    }

    /// Records queued for the next group commit (for metrics and tests).
    pub fn queued(&self) -> usize {
        self.lock().queue.iter().map(|p| p.records.len()).sum()
    }

    /// Write everything queued as one batch; called with the lock held and no batch in
    /// flight, returns with the lock held again.
    fn write_queue<'a>(&'a self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        let batch = std::mem::take(&mut st.queue);
        if st.poisoned {
            for p in batch {
                st.done.insert(p.ticket, Err(POISONED.into()));
            }
            self.wake.notify_all();
            return st;
        }
        let first = st.tip.size();
        let mut bytes = Vec::new();
        let mut spans = Vec::with_capacity(batch.len());
        for p in batch {
            spans.push((p.ticket, bytes.len(), p.records.len()));
            for r in p.records {
                let index = first + bytes.len() as u64;
                bytes.push(AuditEntry::from_record(index, p.now_ms, r).canonical_bytes());
            }
        }
        st.writing = true;
        drop(st);

        let mut guard = InFlight {
            log: self,
            tickets: spans.iter().map(|(t, _, _)| *t).collect(),
            armed: true,
        };
        let written = self.storage.append_batch(first, &bytes);
        guard.armed = false;
        drop(guard);

        let mut st = self.lock();
        match written {
            Ok(()) => {
                let leaves: Vec<(u64, Hash)> = bytes
                    .iter()
                    .enumerate()
                    .map(|(i, b)| (first + i as u64, leaf_hash(b)))
                    .collect();
                let ticket = st.begin(first, leaves.iter().map(|(_, h)| *h).collect());
                st.confirm(ticket);
                for (ticket, start, len) in spans {
                    st.done
                        .insert(ticket, Ok(leaves[start..start + len].to_vec()));
                }
            }
            Err(e) => {
                tracing::error!(error = %e, first_index = first, entries = bytes.len(), "audit append failed; log poisoned");
                st.poisoned = true;
                let msg = e.to_string();
                for (ticket, _, _) in spans {
                    st.done.insert(ticket, Err(msg.clone()));
                }
            }
        }
        st.writing = false;
        self.wake.notify_all();
        st
    }
}

/// If the storage call panics, poison the log and release the waiters instead of
/// leaving them blocked behind a batch that will never finish.
struct InFlight<'a, S: AuditStorage> {
    log: &'a AuditLog<S>,
    tickets: Vec<u64>,
    armed: bool,
}

impl<S: AuditStorage> Drop for InFlight<'_, S> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut st = self.log.lock();
        st.poisoned = true;
        st.writing = false;
        for t in &self.tickets {
            st.done.insert(*t, Err(POISONED.into()));
        }
        self.log.wake.notify_all();
    }
}

#[cfg(test)]
#[path = "group_tests.rs"]
mod tests;
