//! Read side: streaming scans of committed state. Never loads a whole queue.

use super::codec::*;
use super::counter::Counter;
use super::error::StoreError;
use super::ops::WriteOp;
use super::records::*;
use super::types::*;
use super::Store;

impl Store {
    fn scan_prefix(
        &self,
        tree: u8,
        prefix: &[u8],
        start: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        let end = prefix_end(prefix);
        let from = if start > prefix { start } else { prefix };
        self.inner.engine.scan(tree, from, end.as_deref(), f)?;
        Ok(())
    }

    /// Decodes a message record and loads its body; damaged records (undecodable,
    /// missing or altered blob) are quarantined in the background and skipped.
    fn materialize(&self, key: &[u8], value: &[u8]) -> Option<StoredMessage> {
        self.materialize_in(T_MSG, key, value)
    }

    fn materialize_in(&self, tree: u8, key: &[u8], value: &[u8]) -> Option<StoredMessage> {
        let rec = match MsgRecord::decode(value) {
            Ok(r) => r,
            Err(e) => {
                self.quarantine_later(tree, key, &e.0);
                return None;
            }
        };
        let body = match &rec.body {
            Body::Inline(b) => b.clone(),
            Body::Blob { sha256, .. } => match self.inner.blobs.get(sha256) {
                Ok(b) => b,
                Err(e) => {
                    self.quarantine_later(tree, key, &format!("blob: {e}"));
                    return None;
                }
            },
        };
        Some(rec.into_stored(body))
    }

    fn quarantine_later(&self, tree: u8, key: &[u8], reason: &str) {
        tracing::warn!(tree, reason, "damaged record found; quarantining");
        self.submit_detached(vec![WriteOp::Quarantine {
            tree,
            key: key.to_vec(),
            reason: reason.to_owned(),
        }]);
    }

    /// Messages waiting for `(queue, peer)`, from the persisted counter (no scan).
    /// Includes messages that expired less than one sweep ago; sweep first when an
    /// exact number matters (the reconnect handshake does).
    pub fn pending(&self, queue: &str, peer: &str) -> Result<usize, StoreError> {
        Ok(self.counter(queue, peer)?.depth as usize)
    }

    fn counter(&self, queue: &str, peer: &str) -> Result<Counter, StoreError> {
        Ok(
            match self.inner.engine.get(T_COUNT, &count_key(queue, peer))? {
                Some(v) => Counter::decode(&v).unwrap_or_default(),
                None => Counter::default(),
            },
        )
    }

    /// The next up-to-`max` messages to send to `(queue, peer)`, in strict FIFO within
    /// priority. Skips expired messages; stops at the first message whose
    /// `next_attempt_at_ms` is after `now_ms` (no overtaking, see module docs).
    pub fn next_batch(
        &self,
        queue: &str,
        peer: &str,
        max: usize,
        now_ms: u64,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        self.next_batch_after(queue, peer, None, max, now_ms)
    }

    /// Like [`Store::next_batch`], but continues after `after` (the last message of the
    /// previous batch) instead of at the head. This lets a consumer pipeline: read the
    /// next batch while the ack of the previous one is still being committed. Messages
    /// of a higher priority enqueued behind the cursor are not seen until the consumer
    /// starts again from the head.
    pub fn next_batch_after(
        &self,
        queue: &str,
        peer: &str,
        after: Option<&StoredMessage>,
        max: usize,
        now_ms: u64,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let mut out = Vec::new();
        if max == 0 {
            return Ok(out);
        }
        let prefix = recipient_prefix(queue, peer);
        let start = match after {
            Some(m) => {
                let mut k = msg_key(queue, peer, m.priority, m.seq);
                k.push(0); // the smallest key after it
                k
            }
            None => prefix.clone(),
        };
        self.scan_prefix(T_MSG, &prefix, &start, &mut |k, v| {
            let m = match self.materialize(k, v) {
                Some(m) => m,
                None => return true,
            };
            if m.expires_at_ms <= now_ms {
                return true;
            }
            if m.next_attempt_at_ms > now_ms {
                return false;
            }
            out.push(m);
            out.len() < max
        })?;
        Ok(out)
    }

    /// A page of queued messages of `queue` (one peer or all), in delivery order.
    /// `after` is the `next` of the previous page. Expired-but-unswept messages are
    /// included (this is an inspection view for CLI/inbox, not delivery).
    pub fn list(
        &self,
        queue: &str,
        peer: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<StoredMessage>, StoreError> {
        let prefix = match peer {
            Some(p) => recipient_prefix(queue, p),
            None => queue_prefix(queue),
        };
        self.page(T_MSG, &prefix, after, limit)
    }

    fn page(
        &self,
        tree: u8,
        prefix: &[u8],
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<StoredMessage>, StoreError> {
        let start = match after {
            Some(c) => {
                let mut k = unhex_any(c).ok_or_else(|| StoreError::Invalid("bad cursor".into()))?;
                k.push(0); // strictly after the cursor key
                k
            }
            None => prefix.to_vec(),
        };
        let mut items = Vec::new();
        let mut last = None;
        let mut more = false;
        self.scan_prefix(tree, prefix, &start, &mut |k, v| {
            if items.len() >= limit {
                more = true;
                return false;
            }
            last = Some(k.to_vec());
            if let Some(m) = self.materialize_in(tree, k, v) {
                items.push(m);
            }
            true
        })?;
        Ok(Page {
            items,
            next: if more {
                last.map(|k| super::blobs::hex(&k))
            } else {
                None
            },
        })
    }

    /// Dead letters in arrival order, a page at a time.
    pub fn dead_letters(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<StoredMessage>, StoreError> {
        self.page(T_DEAD, &[], after, limit)
    }

    /// Where `message_id` stands: live state from its queue record, else its tombstone.
    pub fn status(&self, message_id: &str) -> Result<Option<MessageStatus>, StoreError> {
        let e = &self.inner.engine;
        match e.get(T_BYID, &id_key(message_id))?.map(IdEntry::parse) {
            Some(IdEntry::Live(key)) => Ok(e
                .get(T_MSG, &key)?
                .and_then(|v| MsgRecord::decode(&v).ok())
                .map(|r| MessageStatus {
                    state: r.state,
                    queue: r.queue,
                    peer: r.peer,
                    attempts: r.attempts,
                    next_attempt_at_ms: r.next_attempt_at_ms,
                    reason: None,
                })),
            Some(IdEntry::Finished(st)) => Ok(st.ok().map(|s| s.to_status())),
            None => Ok(None),
        }
    }

    /// One row per recipient with messages queued. Reads the counters plus one head
    /// record per recipient.
    pub fn queue_stats(&self, now_ms: u64) -> Result<Vec<QueueStat>, StoreError> {
        let mut rows = Vec::new();
        self.inner.engine.scan(T_COUNT, &[], None, &mut |k, v| {
            let mut parts = k.splitn(2, |b| *b == 0);
            let q = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
            let p = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
            let c = Counter::decode(v).unwrap_or_default();
            rows.push(QueueStat {
                queue: q,
                peer: p,
                depth: c.depth,
                oldest_age_s: 0,
                bytes: c.bytes,
            });
            true
        })?;
        for r in rows.iter_mut() {
            let prefix = recipient_prefix(&r.queue, &r.peer);
            let mut created = None;
            self.scan_prefix(T_MSG, &prefix, &prefix, &mut |_, v| {
                created = MsgRecord::decode(v).ok().map(|m| m.created_at_ms);
                false
            })?;
            if let Some(c) = created {
                r.oldest_age_s = now_ms.saturating_sub(c) / 1000;
            }
        }
        Ok(rows)
    }

    /// Peers of `queue` that have messages waiting.
    pub fn peers(&self, queue: &str) -> Result<Vec<String>, StoreError> {
        let prefix = queue_prefix(queue);
        let mut out = Vec::new();
        self.scan_prefix(T_COUNT, &prefix, &prefix, &mut |k, _| {
            out.push(String::from_utf8_lossy(&k[prefix.len()..]).into_owned());
            true
        })?;
        Ok(out)
    }

    /// When the next queued message expires (for the sweeper's sleep): the head of the
    /// expiry index or of an expiry-ordered lane, whichever is earlier.
    pub fn next_expiry_ms(&self) -> Result<Option<u64>, StoreError> {
        let e = &*self.inner.engine;
        let mut t = None;
        e.scan(T_EXP, &[], None, &mut |k, _| {
            t = split_time_key(k).map(|(t, _)| t);
            false
        })?;
        Ok(super::lanes::next_expiry(e, t)?.or(t))
    }

    /// True if `id` is in the dedup window of `scope` (and not yet past keep-until).
    pub fn seen(&self, scope: &str, id: &str) -> Result<bool, StoreError> {
        let now = self.now_ms();
        Ok(self
            .inner
            .engine
            .get(T_SEEN, &scoped_key(scope, id))?
            .as_deref()
            .and_then(parse_u64)
            .map(|until| until > now)
            .unwrap_or(false))
    }

    pub fn kv_get(&self, ns: &str, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.inner.engine.get(T_KV, &scoped_key(ns, key))?)
    }

    /// Every `(key, value)` of a namespace, in key order. Namespaces hold small state.
    pub fn kv_list(&self, ns: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let prefix = scoped_key(ns, "");
        let mut out = Vec::new();
        self.scan_prefix(T_KV, &prefix, &prefix, &mut |k, v| {
            out.push((
                String::from_utf8_lossy(&k[prefix.len()..]).into_owned(),
                v.to_vec(),
            ));
            true
        })?;
        Ok(out)
    }

    /// Up to `limit` `(key, value)`s of a namespace from `from` (inclusive) on, in key
    /// order: a range of a namespace whose keys sort as they were written
    /// ([`crate::store::seq_key`] numbers), read without the rows before it.
    pub fn kv_list_from(
        &self,
        ns: &str,
        from: &str,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let prefix = scoped_key(ns, "");
        let start = scoped_key(ns, from);
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        self.scan_prefix(T_KV, &prefix, &start, &mut |k, v| {
            out.push((
                String::from_utf8_lossy(&k[prefix.len()..]).into_owned(),
                v.to_vec(),
            ));
            out.len() < limit
        })?;
        Ok(out)
    }

    /// The `(key, value)`s of a namespace whose keys start with `key_prefix`, in key
    /// order; the rows after them are not read.
    pub fn kv_list_prefix(
        &self,
        ns: &str,
        key_prefix: &str,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let ns_len = scoped_key(ns, "").len();
        let prefix = scoped_key(ns, key_prefix);
        let mut out = Vec::new();
        self.scan_prefix(T_KV, &prefix, &prefix, &mut |k, v| {
            out.push((
                String::from_utf8_lossy(&k[ns_len..]).into_owned(),
                v.to_vec(),
            ));
            true
        })?;
        Ok(out)
    }

    /// The stored result for `job_id`, unless its keep-until has passed.
    pub fn result_get(&self, job_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let now = self.now_ms();
        Ok(match self.inner.engine.get(T_RESULT, job_id.as_bytes())? {
            Some(v) if v.len() >= 8 => match parse_u64(&v[..8]) {
                Some(until) if until > now => Some(v[8..].to_vec()),
                _ => None,
            },
            _ => None,
        })
    }

    pub fn audit_len(&self) -> Result<u64, StoreError> {
        Ok(self
            .inner
            .engine
            .get(T_META, META_AUDIT_LEN)?
            .as_deref()
            .and_then(parse_u64)
            .unwrap_or(0))
    }

    pub fn audit_read(&self, from: u64, limit: usize) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        self.inner
            .engine
            .scan(T_AUDIT, &from.to_be_bytes(), None, &mut |k, v| {
                if let Ok(b) = <[u8; 8]>::try_from(k) {
                    out.push((u64::from_be_bytes(b), v.to_vec()));
                }
                out.len() < limit
            })?;
        Ok(out)
    }

    pub fn checkpoints(&self) -> Result<Vec<(u64, String)>, StoreError> {
        let mut out = Vec::new();
        self.inner.engine.scan(T_CKPT, &[], None, &mut |k, v| {
            if let Ok(b) = <[u8; 8]>::try_from(k) {
                out.push((
                    u64::from_be_bytes(b),
                    String::from_utf8_lossy(v).into_owned(),
                ));
            }
            true
        })?;
        Ok(out)
    }

    /// Bytes charged against the budget (queued + dead messages, incl. blobs).
    pub fn bytes_used(&self) -> Result<u64, StoreError> {
        Ok(self
            .inner
            .engine
            .get(T_META, META_BYTES)?
            .as_deref()
            .and_then(parse_u64)
            .unwrap_or(0))
    }

    /// Bytes the stored tool results take against their budget
    /// (`StoreOptions::max_result_store_bytes`).
    pub fn result_bytes(&self) -> Result<u64, StoreError> {
        Ok(self
            .inner
            .engine
            .get(T_META, META_RESULT_BYTES)?
            .as_deref()
            .and_then(parse_u64)
            .unwrap_or(0))
    }

    /// Bytes an unprivileged writer may still take on the filesystem holding the store
    /// (`statvfs(2)` `f_bavail`); `None` if it cannot be read.
    pub fn free_bytes(&self) -> Option<u64> {
        super::disk::disk_usage(&self.inner.dir).map(|d| d.available)
    }

    /// Bytes the store holds on disk: the engine's files and the blob files.
    pub fn held_bytes(&self) -> u64 {
        let blobs = self
            .inner
            .blobs
            .list()
            .map(|l| {
                l.iter()
                    .filter_map(|h| std::fs::metadata(self.inner.blobs.path(h)).ok())
                    .map(|m| m.len())
                    .sum::<u64>()
            })
            .unwrap_or(0);
        self.disk_bytes() + blobs
    }

    /// Bytes the engine files occupy on disk (not counting blobs).
    /// Frees the engine's caches (they refill from disk on demand).
    pub fn release_memory(&self) {
        self.inner.engine.release_memory();
    }

    pub fn disk_bytes(&self) -> u64 {
        self.inner.engine.disk_bytes()
    }
}

fn unhex_any(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}
