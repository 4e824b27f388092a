//! Key layout and record encoding — the on-disk format, in one place.
//!
//! Keys are built so the engine's byte order *is* the order we need: a queue position
//! is `queue 0x00 peer 0x00 (255 - priority) seq(BE)`, so a prefix scan of one
//! recipient yields strict FIFO within priority, higher priority first. Names therefore
//! may not contain NUL (checked on enqueue).
//!
//! Values carry a version byte and a CRC-32, so a flipped bit on an SD card is detected
//! as a corrupt record (quarantined and reported) instead of being delivered.

// Tree ids, meta keys and the u64 value encoding live in the leaf `trees`, which the
// engines depend on too; they are re-exported here so every key-building caller keeps
// one import.
pub use super::trees::*;

const REC_VERSION: u8 = 1;

/// Why a stored value could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("undecodable record: {0}")]
pub struct DecodeError(pub String);

fn derr(what: &str) -> DecodeError {
    DecodeError(what.to_owned())
}

// ---------- CRC-32 (IEEE) ----------

/// CRC-32/ISO-HDLC (the zlib/PNG one); `crc32fast` uses the CPU's carry-less multiply
/// where it has one (x86 PCLMULQDQ, ARMv8 CRC32) and slice-by-16 elsewhere.
pub fn crc32(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

// ---------- primitive writer / reader ----------

#[derive(Default)]
pub struct W(pub Vec<u8>);

impl W {
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }
}

pub struct R<'a>(pub &'a [u8]);

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < n {
            return Err(derr("truncated"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
    pub fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub fn string(&mut self) -> Result<String, DecodeError> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| derr("string is not UTF-8"))
    }
    pub fn end(&self) -> Result<(), DecodeError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(derr("trailing bytes"))
        }
    }
}

/// Wraps a payload as `version | crc32(payload) | payload`, in the payload's own buffer
/// (no second allocation when the writer was made with room for the 5 header bytes).
pub fn seal(payload: W) -> Vec<u8> {
    let crc = crc32(&payload.0);
    let mut out = payload.0;
    let len = out.len();
    out.extend_from_slice(&[0; 5]);
    out.copy_within(0..len, 5);
    out[0] = REC_VERSION;
    out[1..5].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Checks version and CRC and returns the payload.
pub fn unseal(v: &[u8]) -> Result<&[u8], DecodeError> {
    if v.len() < 5 {
        return Err(derr("too short"));
    }
    if v[0] != REC_VERSION {
        return Err(DecodeError(format!("unknown record version {}", v[0])));
    }
    let mut c = [0u8; 4];
    c.copy_from_slice(&v[1..5]);
    if u32::from_le_bytes(c) != crc32(&v[5..]) {
        return Err(derr("checksum mismatch"));
    }
    Ok(&v[5..])
}

// ---------- keys ----------

/// `queue 0 peer 0` — the prefix of one recipient's queue.
pub fn recipient_prefix(queue: &str, peer: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(queue.len() + peer.len() + 2);
    k.extend_from_slice(queue.as_bytes());
    k.push(0);
    k.extend_from_slice(peer.as_bytes());
    k.push(0);
    k
}

/// `queue 0` — the prefix of every recipient of one queue.
pub fn queue_prefix(queue: &str) -> Vec<u8> {
    let mut k = queue.as_bytes().to_vec();
    k.push(0);
    k
}

pub fn msg_key(queue: &str, peer: &str, priority: u8, seq: u64) -> Vec<u8> {
    let mut k = recipient_prefix(queue, peer);
    k.push(255 - priority);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// Splits a message key back into `(queue, peer, priority, seq)`.
pub fn parse_msg_key(k: &[u8]) -> Option<(String, String, u8, u64)> {
    if k.len() < 9 {
        return None;
    }
    let (names, tail) = k.split_at(k.len() - 9);
    let prio = 255 - tail[0];
    let mut s = [0u8; 8];
    s.copy_from_slice(&tail[1..]);
    let mut parts = names.split(|b| *b == 0);
    let q = std::str::from_utf8(parts.next()?).ok()?.to_owned();
    let p = std::str::from_utf8(parts.next()?).ok()?.to_owned();
    Some((q, p, prio, u64::from_be_bytes(s)))
}

/// Counter key of one recipient: `queue 0 peer`.
pub fn count_key(queue: &str, peer: &str) -> Vec<u8> {
    let mut k = queue_prefix(queue);
    k.extend_from_slice(peer.as_bytes());
    k
}

/// `time(BE) | rest` — expiry indexes sort by time first.
pub fn time_key(t: u64, rest: &[u8]) -> Vec<u8> {
    let mut k = t.to_be_bytes().to_vec();
    k.extend_from_slice(rest);
    k
}

pub fn split_time_key(k: &[u8]) -> Option<(u64, &[u8])> {
    if k.len() < 8 {
        return None;
    }
    let mut b = [0u8; 8];
    b.copy_from_slice(&k[..8]);
    Some((u64::from_be_bytes(b), &k[8..]))
}

/// A numbered KV key ([`crate::store::Batch::kv_put_next`]): the number zero-padded to
/// 20 digits, so keys sort as numbers.
pub fn seq_key(n: u64) -> String {
    format!("{n:020}")
}

pub fn scoped_key(scope: &str, id: &str) -> Vec<u8> {
    let mut k = scope.as_bytes().to_vec();
    k.push(0);
    k.extend_from_slice(id.as_bytes());
    k
}

/// First byte of an id-tree key that holds a UUID in its 16 binary bytes (schema 4).
/// Ids are UTF-8, which never contains 0xFE, so no text id has a key starting with it;
/// and packed ids sort after every text id, so time-ordered UUIDs are appended at the
/// right end of the id tree. 0xFF, which UTF-8 lacks too, is left to the engine: the
/// SQLite engine keeps meta and counters in the id tree's table under it.
pub const ID_KEY_UUID: u8 = 0xFE;

/// The id tree's key for a message id. The ids outpost makes — and most peers send
/// (PROTOCOL §3.2: UUIDv7) — are canonical UUID text, 36 bytes; stored as `0xFE` + the 16
/// bytes they spell, so an id entry is ~20 bytes smaller and a commit's id leaves fill
/// more slowly (DECISIONS D3, "Packed UUID ids"). Only the canonical lowercase
/// hyphenated form is packed: an upper-case spelling of the same UUID is a different
/// id, kept as text like any other (a ULID, a test's `"a"`).
pub fn id_key(id: &str) -> Vec<u8> {
    if let Some(u) = canonical_uuid(id) {
        let mut k = Vec::with_capacity(17);
        k.push(ID_KEY_UUID);
        k.extend_from_slice(u.as_bytes());
        return k;
    }
    id.as_bytes().to_vec()
}

/// The message id an id-tree key stands for (`None`: not a key [`id_key`] makes).
/// Only tests read ids back out of keys; the store keeps the id in the record.
#[cfg(test)]
pub fn id_of_key(k: &[u8]) -> Option<String> {
    match k.split_first() {
        Some((&ID_KEY_UUID, b)) => Some(uuid::Uuid::from_slice(b).ok()?.hyphenated().to_string()),
        _ => String::from_utf8(k.to_vec()).ok(),
    }
}

/// `id` parsed as a UUID when it is spelled exactly as `Uuid`'s hyphenated lowercase text.
pub fn canonical_uuid(id: &str) -> Option<uuid::Uuid> {
    if id.len() != uuid::fmt::Hyphenated::LENGTH {
        return None;
    }
    let u = uuid::Uuid::try_parse(id).ok()?;
    let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
    (u.hyphenated().encode_lower(&mut buf).as_bytes() == id.as_bytes()).then_some(u)
}

/// The smallest key greater than every key starting with `prefix` (None = no bound).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut p = prefix.to_vec();
    while let Some(last) = p.pop() {
        if last < 0xFF {
            p.push(last + 1);
            return Some(p);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_uuid_ids_are_packed_and_everything_else_is_kept_as_text() {
        let id = "0190f5c2-7b1e-7a3c-9d4e-5f6a7b8c9d0e";
        let k = id_key(id);
        assert_eq!(k.len(), 17);
        assert_eq!(k[0], ID_KEY_UUID);
        assert_eq!(id_of_key(&k).as_deref(), Some(id));
        // Other spellings of the same UUID are other ids: never the same key.
        for other in [
            "0190F5C2-7B1E-7A3C-9D4E-5F6A7B8C9D0E",
            "0190f5c27b1e7a3c9d4e5f6a7b8c9d0e",
            "{0190f5c2-7b1e-7a3c-9d4e-5f6a7b8c9d0e}",
            "urn:uuid:0190f5c2-7b1e-7a3c-9d4e-5f6a7b8c9d0e",
        ] {
            assert_eq!(id_key(other), other.as_bytes());
            assert_eq!(id_of_key(&id_key(other)).as_deref(), Some(other));
        }
        assert_eq!(
            id_key("01J9ZQ7W0000000000000000AB"),
            b"01J9ZQ7W0000000000000000AB"
        );
        // Packed ids sort after text ids (appended at the id tree's right end), and
        // nothing `id_key` makes starts with 0xFF.
        assert!(id_key("zzzz") < k && k.as_slice() < [0xFF].as_slice());
        let nul: String = std::iter::once('\0')
            .chain("0123456789abcdef".chars())
            .collect();
        assert_eq!(id_of_key(&id_key(&nul)), Some(nul));
    }

    proptest::proptest! {
        /// Distinct ids get distinct keys, and every key gives its id back.
        #[test]
        fn id_keys_are_injective_and_reversible(
            a in "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[^\\x00]{1,40}",
            b in "[0-9a-fA-F]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[^\\x00]{1,40}",
            raw in proptest::array::uniform16(proptest::num::u8::ANY),
        ) {
            proptest::prop_assert_eq!(id_of_key(&id_key(&a)), Some(a.clone()));
            proptest::prop_assert_eq!(id_of_key(&id_key(&b)), Some(b.clone()));
            proptest::prop_assert_eq!(id_key(&a) == id_key(&b), a == b);
            let u = uuid::Uuid::from_bytes(raw).hyphenated().to_string();
            proptest::prop_assert_eq!(id_key(&u).len(), 17);
            proptest::prop_assert_eq!(id_of_key(&id_key(&u)), Some(u));
        }
    }

    #[test]
    fn crc_matches_known_vector() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn msg_keys_sort_by_priority_desc_then_seq() {
        let a = msg_key("outbox", "gw", 5, 10);
        let b = msg_key("outbox", "gw", 9, 11);
        let c = msg_key("outbox", "gw", 5, 2);
        let mut v = vec![a.clone(), b.clone(), c.clone()];
        v.sort();
        assert_eq!(v, vec![b, c, a.clone()]);
        assert_eq!(
            parse_msg_key(&a),
            Some(("outbox".into(), "gw".into(), 5, 10))
        );
    }

    #[test]
    fn crc32_is_the_ieee_polynomial_existing_stores_use() {
        // The check value of CRC-32/ISO-HDLC; records written before the switch to
        // crc32fast (a bytewise table of 0xEDB88320) carry this same CRC.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn seal_puts_version_and_crc_in_front() {
        for n in [0usize, 1, 5, 6, 700] {
            let payload: Vec<u8> = (0..n).map(|i| i as u8).collect();
            let mut w = W(Vec::with_capacity(n + 5));
            w.0.extend_from_slice(&payload);
            let v = seal(w);
            assert_eq!(v.len(), n + 5);
            assert_eq!(v[0], REC_VERSION);
            assert_eq!(v[1..5], crc32(&payload).to_le_bytes());
            assert_eq!(&v[5..], &payload[..]);
            assert_eq!(unseal(&v).unwrap(), &payload[..]);
        }
    }

    #[test]
    fn unseal_detects_a_flipped_bit() {
        let mut w = W::default();
        w.str("hello");
        let mut v = seal(w);
        assert!(unseal(&v).is_ok());
        let last = v.len() - 1;
        v[last] ^= 1;
        assert!(unseal(&v).is_err());
    }

    #[test]
    fn prefix_end_bounds_the_prefix() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xFF]), None);
    }
}
