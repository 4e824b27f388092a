//! X25519 (RFC 7748) the fastest way this machine has, for the two places an envelope
//! needs it: [`agree_to`] a recipient when sealing, [`agree_once`] with a sender's
//! one-off key when opening. Both give exactly `x25519-dalek`'s answer (the tests below
//! compare them on any 32 bytes).
//!
//! **Opening** ([`agree_once`]): the ephemeral key is new every time, so nothing can be
//! precomputed. Where the CPU has AVX2, `curve25519-dalek` multiplies Edwards points
//! with it (chosen at run time), which with the conversions to and from the Montgomery
//! form is faster than the Montgomery ladder (39 against 53 µs on the benchmark VM);
//! elsewhere (the ARM nodes) the ladder is the faster and is used. The conversion is
//! the birational map (`u` → `y = (u−1)/(u+1)`; either sign of `x` gives the same `u`
//! in every multiple), and the clamped scalar below 2^255 multiplies any point,
//! torsion included (`EdwardsPoint::mul_clamped`). A `u` with no point on the curve
//! (one of its twist) takes the ladder.
//!
//! **Sealing** ([`agree_to`]) computes `X25519(ephemeral secret, recipient's public key)`: a Montgomery
//! ladder, 255 steps of field arithmetic, about 40 % of a seal. But the recipient's key
//! is the same for every message to one node (a backlog queued at the gateway) and for
//! every result a node uploads (always to its gateway). For such a key this module
//! builds a table of its multiples once (`curve25519-dalek`'s `EdwardsBasepointTable`,
//! the same constant-time radix-16 table the library uses for the base point, 30 KiB),
//! after which an agreement is 64 table look-ups and additions instead of the ladder.
//!
//! The arithmetic, for a clamped secret `k` and the recipient's point `P` (RFC 7748
//! decodes `u`; the Edwards point `±P` of that `u` has the same `u` in every multiple,
//! so the sign does not matter): `k` is a multiple of 8 below 2^255, so with
//! `k' = k / 8 < 2^252 < ℓ` and `Q = 8·P` (in the prime-order subgroup, or the
//! identity), `k·P = k'·Q` exactly, with `k'` a canonical scalar. A small-order `P`
//! gives `Q` = identity and `u` = 0, which the caller refuses as not contributory,
//! as with the ladder. A `u` that is not on the curve (on its twist) has no Edwards
//! point: the ladder is used for it.
//!
//! When to build: a table costs about as much as a few dozen ladders, so it is built
//! only for a key sealed to [`BUILD_AFTER`] times since the counts were last cleared,
//! and [`KEEP`] tables are kept; one is replaced only after [`IDLE`] agreements without
//! use (so more recipients than tables, sealed to in turn, cannot make every seal pay
//! for a table that is evicted before it pays off). A fleet's gateway
//! sealing one command each to many nodes builds none; a backlog for one node, or a
//! node's uploads, build one. `tests::agrees_with_the_ladder` checks every path
//! against `x25519-dalek` on random keys, small-order keys and twist points.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use curve25519_dalek::edwards::EdwardsBasepointTable;
use curve25519_dalek::montgomery::MontgomeryPoint;
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::BasepointTable;
use zeroize::{Zeroize, Zeroizing};

/// Seals to one key before its table is built.
pub const BUILD_AFTER: u32 = 32;
/// Tables kept (30 KiB each).
pub const KEEP: usize = 8;
/// Agreements after which an unused table may be replaced.
pub const IDLE: u64 = 4096;
/// Keys counted at most; beyond, the counts start again.
const COUNTED: usize = 1024;

/// The multiples of one recipient's point, for [`RecipientTable::agree`].
pub struct RecipientTable(Box<EdwardsBasepointTable>);

impl RecipientTable {
    /// The table for the public key `u`, or `None` when `u` is not on the curve (a
    /// point of the twist, which only the ladder handles).
    pub fn new(u: &[u8; 32]) -> Option<Self> {
        let p = MontgomeryPoint(*u).to_edwards(0)?;
        Some(Self(Box::new(EdwardsBasepointTable::create(
            &p.mul_by_cofactor(),
        ))))
    }

    /// `X25519(secret, u)` for this table's `u`.
    pub fn agree(&self, secret: &[u8; 32]) -> Zeroizing<[u8; 32]> {
        let mut k = Zeroizing::new(*secret);
        // Clamp (RFC 7748 decodeScalar25519), then divide by the cofactor: the low three
        // bits are zero, so this is a right shift of the 256-bit little-endian number.
        k[0] &= 248;
        k[31] &= 127;
        k[31] |= 64;
        let mut shifted = Zeroizing::new([0u8; 32]);
        for i in 0..32 {
            let next = if i < 31 { k[i + 1] } else { 0 };
            shifted[i] = (k[i] >> 3) | (next << 5);
        }
        // Below 2^252 < ℓ: canonical, nothing reduced.
        let mut s = Scalar::from_bytes_mod_order(*shifted);
        let mut point = &*self.0 * &s;
        let out = Zeroizing::new(point.to_montgomery().to_bytes());
        s.zeroize();
        point.zeroize();
        out
    }
}

/// The tables built so far, and how often each key not yet tabled was sealed to.
#[derive(Default)]
struct Tables {
    tables: Vec<([u8; 32], u64, Arc<RecipientTable>)>,
    counts: HashMap<[u8; 32], u32>,
    tick: u64,
}

static TABLES: LazyLock<Mutex<Tables>> = LazyLock::new(Mutex::default);

/// What the caller does for one agreement.
enum Plan {
    Table(Arc<RecipientTable>),
    Build,
    Ladder,
}

impl Tables {
    fn plan(&mut self, u: &[u8; 32]) -> Plan {
        self.tick += 1;
        if let Some(t) = self.tables.iter_mut().find(|t| &t.0 == u) {
            t.1 = self.tick;
            return Plan::Table(t.2.clone());
        }
        if self.counts.len() >= COUNTED && !self.counts.contains_key(u) {
            self.counts.clear();
        }
        let n = self.counts.entry(*u).or_insert(0);
        *n = n.saturating_add(1);
        if *n >= BUILD_AFTER && self.slot().is_some() {
            self.counts.remove(u);
            Plan::Build
        } else {
            Plan::Ladder
        }
    }

    /// Where a new table may go: a free place, or the least recently used table if it
    /// has been idle for [`IDLE`] agreements. Never a table in use, so recipients
    /// sealed to in turn (more of them than [`KEEP`]) do not evict each other's tables
    /// over and over: the first ones keep theirs, the rest use the ladder.
    fn slot(&self) -> Option<usize> {
        if self.tables.len() < KEEP {
            return Some(self.tables.len());
        }
        let oldest = (0..self.tables.len()).min_by_key(|&i| self.tables[i].1)?;
        (self.tick.saturating_sub(self.tables[oldest].1) > IDLE).then_some(oldest)
    }

    fn keep(&mut self, u: [u8; 32], table: Arc<RecipientTable>) {
        if self.tables.iter().any(|t| t.0 == u) {
            return;
        }
        // Built outside the lock: the place may have been taken meanwhile.
        match self.slot() {
            Some(i) if i == self.tables.len() => self.tables.push((u, self.tick, table)),
            Some(i) => self.tables[i] = (u, self.tick, table),
            None => {}
        }
    }
}

/// `X25519(secret, u)` for a one-off `u` (a sender's ephemeral key).
pub fn agree_once(secret: &[u8; 32], u: &[u8; 32]) -> Zeroizing<[u8; 32]> {
    if edwards_is_faster() {
        if let Some(mut p) = MontgomeryPoint(*u).to_edwards(0) {
            let mut product = p.mul_clamped(*secret);
            let out = Zeroizing::new(product.to_montgomery().to_bytes());
            p.zeroize();
            product.zeroize();
            return out;
        }
    }
    ladder(secret, u)
}

/// Whether `curve25519-dalek` multiplies Edwards points with AVX2 here (its own run-time
/// choice on x86-64, by the same CPU feature).
fn edwards_is_faster() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `X25519(secret, u)` to a recipient: by the ladder, or by `u`'s table once it is
/// sealed to often.
pub fn agree_to(secret: &[u8; 32], u: &[u8; 32]) -> Zeroizing<[u8; 32]> {
    let plan = TABLES.lock().unwrap_or_else(|p| p.into_inner()).plan(u);
    match plan {
        Plan::Table(t) => t.agree(secret),
        Plan::Build => match RecipientTable::new(u) {
            Some(t) => {
                let t = Arc::new(t);
                let out = t.agree(secret);
                TABLES.lock().unwrap_or_else(|p| p.into_inner()).keep(*u, t);
                out
            }
            None => ladder(secret, u),
        },
        Plan::Ladder => ladder(secret, u),
    }
}

/// RFC 7748's X25519 by the Montgomery ladder.
fn ladder(secret: &[u8; 32], u: &[u8; 32]) -> Zeroizing<[u8; 32]> {
    Zeroizing::new(MontgomeryPoint(*u).mul_clamped(*secret).to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use x25519_dalek::{PublicKey, StaticSecret};

    fn reference(secret: [u8; 32], u: [u8; 32]) -> [u8; 32] {
        StaticSecret::from(secret)
            .diffie_hellman(&PublicKey::from(u))
            .to_bytes()
    }

    /// u-coordinates of points of small order (0, 1, and one of order 8): each gives
    /// an all-zero agreement both ways.
    const SMALL_ORDER: [[u8; 32]; 3] = [
        [0; 32],
        {
            let mut one = [0u8; 32];
            one[0] = 1;
            one
        },
        [
            0xe0, 0xeb, 0x7a, 0x7c, 0x3b, 0x41, 0xb8, 0xae, 0x16, 0x56, 0xe3, 0xfa, 0xf1, 0x9f,
            0xc4, 0x6a, 0xda, 0x09, 0x8d, 0xeb, 0x9c, 0x32, 0xb1, 0xfd, 0x86, 0x62, 0x05, 0x16,
            0x5f, 0x49, 0xb8, 0x00,
        ],
    ];

    fn bytes(hex: &str) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    }

    #[test]
    fn rfc7748_vector() {
        // RFC 7748 §5.2, the first test vector.
        let k = bytes("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4");
        let u = bytes("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c");
        // This u is on the curve or its twist; either path must give the vector.
        let out = match RecipientTable::new(&u) {
            Some(t) => *t.agree(&k),
            None => *ladder(&k, &u),
        };
        assert_eq!(
            crate::audit::to_hex(&out),
            "c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552"
        );
    }

    #[test]
    fn small_order_keys_give_zero_by_the_table_as_by_the_ladder() {
        for u in SMALL_ORDER {
            let secret = [0x42; 32];
            assert_eq!(reference(secret, u), [0; 32]);
            assert_eq!(*agree_once(&secret, &u), [0; 32]);
            if let Some(t) = RecipientTable::new(&u) {
                assert_eq!(*t.agree(&secret), [0; 32], "{u:?}");
            }
        }
    }

    #[test]
    fn a_key_sealed_to_often_gets_a_table_and_the_same_answers() {
        let recipient = StaticSecret::from([7u8; 32]);
        let u = PublicKey::from(&recipient).to_bytes();
        let mut tables = Tables::default();
        for i in 1..BUILD_AFTER {
            assert!(matches!(tables.plan(&u), Plan::Ladder), "seal {i}");
        }
        assert!(matches!(tables.plan(&u), Plan::Build));
        tables.keep(u, Arc::new(RecipientTable::new(&u).unwrap()));
        assert!(matches!(tables.plan(&u), Plan::Table(_)));
        // Through the shared cache: every agreement, before and after the table, is
        // the ladder's.
        for i in 0..(2 * BUILD_AFTER) {
            let secret = [i as u8; 32];
            assert_eq!(*agree_to(&secret, &u), reference(secret, u), "seal {i}");
        }
    }

    fn keys(n: usize) -> Vec<[u8; 32]> {
        (0..n)
            .map(|i| PublicKey::from(&StaticSecret::from([i as u8 + 1; 32])).to_bytes())
            .collect()
    }

    /// Applies a plan as `agree_to` does (a table built is kept), without the crypto.
    fn run(tables: &mut Tables, u: &[u8; 32], built: &mut usize) {
        if let Plan::Build = tables.plan(u) {
            *built += 1;
            tables.keep(*u, Arc::new(RecipientTable::new(u).unwrap()));
        }
    }

    #[test]
    fn more_recipients_than_tables_in_turn_build_each_table_once() {
        let keys = keys(3 * KEEP);
        let mut tables = Tables::default();
        let mut built = 0;
        for _ in 0..(4 * BUILD_AFTER) {
            for u in &keys {
                run(&mut tables, u, &mut built);
            }
        }
        assert_eq!(
            built, KEEP,
            "the first {KEEP} keep theirs; the rest use the ladder"
        );
        assert_eq!(tables.tables.len(), KEEP);
    }

    #[test]
    fn a_table_idle_long_enough_makes_room_for_a_new_busy_recipient() {
        let keys = keys(KEEP + 1);
        let mut tables = Tables::default();
        let mut built = 0;
        for u in &keys[..KEEP] {
            for _ in 0..BUILD_AFTER {
                run(&mut tables, u, &mut built);
            }
        }
        assert_eq!(built, KEEP);
        // The first stays busy; the others go quiet while a new one is sealed to.
        let (first, new) = (keys[0], keys[KEEP]);
        for _ in 0..IDLE {
            run(&mut tables, &first, &mut built);
            run(&mut tables, &new, &mut built);
        }
        assert_eq!(built, KEEP + 1);
        assert!(matches!(tables.plan(&new), Plan::Table(_)));
        assert!(matches!(tables.plan(&first), Plan::Table(_)));
        assert!(
            !matches!(tables.plan(&keys[1]), Plan::Table(_)),
            "the least recent went"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any secret and any 32 bytes as the key (curve, twist, non-canonical, top
        /// bit set): the table, where there is one, agrees with `x25519-dalek`.
        #[test]
        fn agrees_with_the_ladder(secret in any::<[u8; 32]>(), u in any::<[u8; 32]>()) {
            let want = reference(secret, u);
            prop_assert_eq!(*ladder(&secret, &u), want);
            prop_assert_eq!(*agree_once(&secret, &u), want);
            if let Some(t) = RecipientTable::new(&u) {
                prop_assert_eq!(*t.agree(&secret), want);
            }
        }

        /// Real public keys (always on the curve): the table always exists and agrees.
        #[test]
        fn agrees_on_real_keys(secret in any::<[u8; 32]>(), recipient in any::<[u8; 32]>()) {
            let u = PublicKey::from(&StaticSecret::from(recipient)).to_bytes();
            let t = RecipientTable::new(&u).expect("a public key is on the curve");
            prop_assert_eq!(*t.agree(&secret), reference(secret, u));
            prop_assert_eq!(*agree_once(&secret, &u), reference(secret, u));
        }
    }
}
