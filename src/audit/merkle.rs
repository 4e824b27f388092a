//! RFC 6962 Merkle tree hashing, a compact incremental frontier and consistency proofs.
//!
//! Pure functions over 32-byte hashes: no I/O, no clock. The audit log keeps only a
//! [`Frontier`] (O(log n) hashes) in memory, so a node with millions of entries does not
//! hold them all to answer "what is the root now"; `verify` and the gateway rebuild
//! roots by streaming entries through a fresh frontier.
//!
//! Definitions (RFC 6962 §2.1, unchanged in RFC 9162 §2.1.1):
//! - `MTH({}) = SHA-256()`
//! - `MTH({d0}) = SHA-256(0x00 ‖ d0)`
//! - `MTH(D[n]) = SHA-256(0x01 ‖ MTH(D[0:k]) ‖ MTH(D[k:n]))`, k the largest power of
//!   two smaller than n.

use sha2::{Digest, Sha256};

/// A SHA-256 output: leaf hashes, node hashes and roots.
pub type Hash = [u8; 32];

/// `SHA-256(0x00 ‖ entry)`: the leaf hash of one log entry (its canonical bytes).
pub fn leaf_hash(entry: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0x00]);
    h.update(entry);
    h.finalize().into()
}

/// `SHA-256(0x01 ‖ left ‖ right)`: an interior node.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([0x01]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// The root of the empty tree, `SHA-256("")`.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// The largest power of two strictly smaller than `n` (n ≥ 2).
fn split_point(n: u64) -> u64 {
    debug_assert!(n >= 2);
    let mut k = 1u64;
    while k << 1 < n {
        k <<= 1;
    }
    k
}

/// `MTH` over already-hashed leaves, by the recursive definition.
///
/// Used as the reference the frontier is tested against, and by tools that hold a whole
/// (small) tree in memory.
pub fn root(leaf_hashes: &[Hash]) -> Hash {
    match leaf_hashes.len() {
        0 => empty_root(),
        1 => leaf_hashes[0],
        n => {
            let k = split_point(n as u64) as usize;
            node_hash(&root(&leaf_hashes[..k]), &root(&leaf_hashes[k..]))
        }
    }
}

/// The right edge of a Merkle tree: one perfect-subtree hash per set bit of `size`.
///
/// Appending is amortised O(1) hashing; [`Frontier::root`] folds at most 64 hashes.
/// `subtrees[i]` is the root of a perfect subtree; sizes strictly decrease left to right
/// and sum to `size`, exactly the binary decomposition RFC 6962's split produces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    /// (height, hash) of each perfect subtree, leftmost (largest) first.
    subtrees: Vec<(u32, Hash)>,
}

impl Frontier {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of leaves appended so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Append one leaf hash (not the raw entry: call [`leaf_hash`] first).
    pub fn push(&mut self, leaf: Hash) {
        let mut height = 0u32;
        let mut hash = leaf;
        // Merge equal-height neighbours, like carrying in binary addition.
        while let Some(&(h, left)) = self.subtrees.last() {
            if h != height {
                break;
            }
            self.subtrees.pop();
            hash = node_hash(&left, &hash);
            height += 1;
        }
        self.subtrees.push((height, hash));
        self.size += 1;
    }

    /// The perfect-subtree roots, largest first: exactly `size.count_ones()` hashes.
    ///
    /// This is all a verifier must persist to extend a tree later without re-reading its
    /// entries (the gateway keeps one per node).
    pub fn subtree_hashes(&self) -> Vec<Hash> {
        self.subtrees.iter().map(|(_, h)| *h).collect()
    }

    /// Rebuild a frontier from [`Frontier::subtree_hashes`]; `None` if the number of
    /// hashes does not fit `size`.
    pub fn from_subtree_hashes(size: u64, hashes: &[Hash]) -> Option<Self> {
        if hashes.len() != size.count_ones() as usize {
            return None;
        }
        let heights = (0..64u32).rev().filter(|b| size & (1u64 << b) != 0);
        let subtrees = heights.zip(hashes.iter().copied()).collect();
        Some(Self { size, subtrees })
    }

    /// `MTH` of all leaves appended so far.
    pub fn root(&self) -> Hash {
        let mut iter = self.subtrees.iter().rev();
        let Some(&(_, mut acc)) = iter.next() else {
            return empty_root();
        };
        for (_, left) in iter {
            acc = node_hash(left, &acc);
        }
        acc
    }
}

/// MTH of the leaves `[start, end)` fetched through `leaf`.
fn range_root<E>(
    start: u64,
    end: u64,
    leaf: &mut impl FnMut(u64) -> Result<Hash, E>,
) -> Result<Hash, E> {
    let mut f = Frontier::new();
    for i in start..end {
        f.push(leaf(i)?);
    }
    Ok(f.root())
}

/// RFC 6962 §2.1.2 consistency proof that the tree of size `old_size` is a prefix of the
/// tree of size `new_size`.
///
/// `leaf(i)` returns the leaf hash at index `i` (< `new_size`); it is an accessor rather
/// than a slice so the gateway can serve proofs straight from its store. Returns an
/// empty proof when `old_size` is 0 or equals `new_size` (nothing to prove), and `None`
/// when `old_size > new_size`.
pub fn consistency_proof<E>(
    old_size: u64,
    new_size: u64,
    mut leaf: impl FnMut(u64) -> Result<Hash, E>,
) -> Result<Option<Vec<Hash>>, E> {
    if old_size > new_size {
        return Ok(None);
    }
    let mut proof = Vec::new();
    if old_size == 0 || old_size == new_size {
        return Ok(Some(proof));
    }
    subproof(old_size, 0, new_size, true, &mut leaf, &mut proof)?;
    Ok(Some(proof))
}

/// SUBPROOF(m, D[start:end], b) from RFC 6962 §2.1.2, appending to `out`.
fn subproof<E>(
    m: u64,
    start: u64,
    end: u64,
    complete: bool,
    leaf: &mut impl FnMut(u64) -> Result<Hash, E>,
    out: &mut Vec<Hash>,
) -> Result<(), E> {
    let n = end - start;
    if m == n {
        if !complete {
            out.push(range_root(start, end, leaf)?);
        }
        return Ok(());
    }
    let k = split_point(n);
    if m <= k {
        subproof(m, start, start + k, complete, leaf, out)?;
        out.push(range_root(start + k, end, leaf)?);
    } else {
        subproof(m - k, start + k, end, false, leaf, out)?;
        out.push(range_root(start, start + k, leaf)?);
    }
    Ok(())
}

/// Convenience for callers holding all leaf hashes.
pub fn consistency_proof_from_leaves(old_size: u64, leaves: &[Hash]) -> Option<Vec<Hash>> {
    let n = leaves.len() as u64;
    let res: Result<Option<Vec<Hash>>, std::convert::Infallible> =
        consistency_proof(old_size, n, |i| Ok(leaves[i as usize]));
    match res {
        Ok(p) => p,
        Err(never) => match never {},
    }
}

/// Verify an RFC 6962 consistency proof (algorithm of RFC 9162 §2.1.4.2).
///
/// The empty tree is a prefix of every tree: `old_size == 0` verifies iff the proof is
/// empty and `old_root` is the empty root.
pub fn verify_consistency(
    old_size: u64,
    new_size: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> bool {
    if old_size > new_size {
        return false;
    }
    if old_size == 0 {
        return proof.is_empty() && *old_root == empty_root();
    }
    if old_size == new_size {
        return proof.is_empty() && old_root == new_root;
    }
    let mut path: Vec<Hash> = Vec::with_capacity(proof.len() + 1);
    if old_size.is_power_of_two() {
        path.push(*old_root);
    }
    path.extend_from_slice(proof);
    let Some((first, rest)) = path.split_first() else {
        return false;
    };
    let mut fnode = old_size - 1;
    let mut snode = new_size - 1;
    while fnode & 1 == 1 {
        fnode >>= 1;
        snode >>= 1;
    }
    let mut fr = *first;
    let mut sr = *first;
    for c in rest {
        if snode == 0 {
            return false;
        }
        if fnode & 1 == 1 || fnode == snode {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            if fnode & 1 == 0 {
                while fnode & 1 == 0 && fnode != 0 {
                    fnode >>= 1;
                    snode >>= 1;
                }
            }
        } else {
            sr = node_hash(&sr, c);
        }
        fnode >>= 1;
        snode >>= 1;
    }
    fr == *old_root && sr == *new_root && snode == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn leaves(n: u64) -> Vec<Hash> {
        (0..n)
            .map(|i| leaf_hash(format!("entry-{i}").as_bytes()))
            .collect()
    }

    fn hex(h: &Hash) -> String {
        h.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn empty_tree_root_is_sha256_of_nothing() {
        assert_eq!(
            hex(&root(&[])),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(Frontier::new().root(), root(&[]));
    }

    /// Known-answer test from the RFC 6962 reference test vectors (certificate-transparency
    /// `merkle_tree_test`): leaves are the 8 inputs below, the root of all 8 is fixed.
    #[test]
    fn matches_rfc6962_reference_vectors() {
        let inputs: [&[u8]; 8] = [
            b"",
            b"\x00",
            b"\x10",
            b"\x20\x21",
            b"\x30\x31",
            b"\x40\x41\x42\x43",
            b"\x50\x51\x52\x53\x54\x55\x56\x57",
            b"\x60\x61\x62\x63\x64\x65\x66\x67\x68\x69\x6a\x6b\x6c\x6d\x6e\x6f",
        ];
        let l: Vec<Hash> = inputs.iter().map(|d| leaf_hash(d)).collect();
        assert_eq!(
            hex(&root(&l[..1])),
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
        );
        assert_eq!(
            hex(&root(&l[..2])),
            "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"
        );
        assert_eq!(
            hex(&root(&l[..3])),
            "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77"
        );
        assert_eq!(
            hex(&root(&l)),
            "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"
        );
    }

    #[test]
    fn consistency_proofs_verify_for_all_pairs_up_to_64() {
        let l = leaves(64);
        let roots: Vec<Hash> = (0..=64).map(|n| root(&l[..n])).collect();
        for n in 0..=64u64 {
            let new_root = roots[n as usize];
            for m in 0..=n {
                let old_root = roots[m as usize];
                let proof = consistency_proof_from_leaves(m, &l[..n as usize]).unwrap();
                assert!(
                    verify_consistency(m, n, &old_root, &new_root, &proof),
                    "m={m} n={n}"
                );
            }
        }
    }

    #[test]
    fn consistency_proofs_fail_when_any_leaf_changed() {
        let l = leaves(16);
        for n in 2..=16u64 {
            for m in 1..n {
                let good_old = root(&l[..m as usize]);
                let good_new = root(&l[..n as usize]);
                let proof = consistency_proof_from_leaves(m, &l[..n as usize]).unwrap();
                for changed in 0..n as usize {
                    let mut t = l[..n as usize].to_vec();
                    t[changed] = leaf_hash(b"tampered");
                    let bad_new = root(&t);
                    // The honest proof never vouches for a different new tree.
                    assert!(!verify_consistency(m, n, &good_old, &bad_new, &proof));
                    if changed < m as usize {
                        // History rewritten: no proof from the tampered tree links it
                        // to the honest old root...
                        let bad_proof = consistency_proof_from_leaves(m, &t).unwrap();
                        assert!(
                            !verify_consistency(m, n, &good_old, &bad_new, &bad_proof),
                            "m={m} n={n} changed={changed}"
                        );
                        // ...and a tampered old root does not fit the honest proof.
                        let bad_old = root(&t[..m as usize]);
                        assert!(!verify_consistency(m, n, &bad_old, &good_new, &proof));
                    }
                }
            }
        }
    }

    #[test]
    fn rejects_malformed_inputs() {
        let l = leaves(8);
        let r8 = root(&l);
        let r4 = root(&l[..4]);
        let proof = consistency_proof_from_leaves(4, &l).unwrap();
        assert!(verify_consistency(4, 8, &r4, &r8, &proof));
        assert!(!verify_consistency(8, 4, &r8, &r4, &proof));
        assert!(!verify_consistency(
            4,
            8,
            &r4,
            &r8,
            &proof[..proof.len() - 1]
        ));
        let mut longer = proof.clone();
        longer.push(r4);
        assert!(!verify_consistency(4, 8, &r4, &r8, &longer));
        assert!(!verify_consistency(3, 8, &r4, &r8, &[]));
        assert!(verify_consistency(0, 8, &empty_root(), &r8, &[]));
        assert!(!verify_consistency(0, 8, &r4, &r8, &[]));
        assert!(consistency_proof_from_leaves(9, &l).is_none());
    }

    proptest! {
        // Debug-build SHA-256 is slow; 64 random sizes per property is plenty next to
        // the exhaustive small-size tests above.
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn frontier_root_equals_recursive_root(n in 0u64..600) {
            let l = leaves(n);
            let mut f = Frontier::new();
            for (i, h) in l.iter().enumerate() {
                f.push(*h);
                prop_assert_eq!(f.size(), i as u64 + 1);
            }
            prop_assert_eq!(f.root(), root(&l));
            // O(log n) state: one subtree per set bit.
            prop_assert_eq!(f.subtrees.len() as u32, n.count_ones());
        }

        #[test]
        fn frontier_survives_persistence(n in 0u64..300, extra in 0u64..40) {
            let l = leaves(n + extra);
            let mut f = Frontier::new();
            l[..n as usize].iter().for_each(|h| f.push(*h));
            let mut g = Frontier::from_subtree_hashes(n, &f.subtree_hashes()).unwrap();
            prop_assert_eq!(&g, &f);
            l[n as usize..].iter().for_each(|h| g.push(*h));
            prop_assert_eq!(g.root(), root(&l));
            prop_assert!(Frontier::from_subtree_hashes(n + 1, &f.subtree_hashes()).is_none()
                || (n + 1).count_ones() == n.count_ones());
        }

        #[test]
        fn random_pairs_verify(n in 1u64..300, m_seed in 0u64..1000) {
            let m = m_seed % (n + 1);
            let l = leaves(n);
            let proof = consistency_proof_from_leaves(m, &l).unwrap();
            prop_assert!(verify_consistency(m, n, &root(&l[..m as usize]), &root(&l), &proof));
        }
    }
}
