//! Token tests: PASETO v4 public vectors, the deny matrix, known-answer vectors and
//! parser robustness.

mod kat;
mod matrix;
mod paseto_vectors;
mod props;

use crate::envelope::{IdentityDocument, Keys, Rights, TrustStore};

pub(crate) const ME: &str = "node:pump-17";
pub(crate) const T0: u64 = 1_763_798_400_000;
pub(crate) const SKEW: u64 = 300_000;

pub(crate) struct World {
    pub gw: Keys,
    pub sender_only: Keys,
    pub rogue: Keys,
    pub trust: TrustStore,
}

pub(crate) fn world() -> World {
    let gw = Keys::from_secret_bytes(&[0x11; 32], &[0x12; 32]);
    let sender_only = Keys::from_secret_bytes(&[0x21; 32], &[0x22; 32]);
    let rogue = Keys::from_secret_bytes(&[0x51; 32], &[0x52; 32]);
    let at = "2025-11-22T08:00:00Z";
    let mut trust = TrustStore::new();
    trust
        .add(
            IdentityDocument::new("gateway:main", "gateway", &gw, at),
            Rights {
                send: true,
                issue: true,
            },
        )
        .unwrap();
    trust
        .add(
            IdentityDocument::new("node:other", "node", &sender_only, at),
            Rights {
                send: true,
                issue: false,
            },
        )
        .unwrap();
    World {
        gw,
        sender_only,
        rogue,
        trust,
    }
}
