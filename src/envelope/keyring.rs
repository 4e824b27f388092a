//! The keys a running node signs and opens with, which a key rotation replaces while
//! it runs: the current pair, and the pair the last rotation retired, kept only to open
//! envelopes sealed to it before the switch (until its grace ends).

use std::sync::{Arc, RwLock};

use super::keys::Keys;

/// Shared by every flow of a running node; [`KeyRing::rotate`] switches them all at once.
#[derive(Debug)]
pub struct KeyRing {
    current: RwLock<Arc<Keys>>,
    previous: RwLock<Option<(Arc<Keys>, u64)>>,
}

impl From<Keys> for KeyRing {
    fn from(keys: Keys) -> Self {
        Arc::new(keys).into()
    }
}

impl From<Arc<Keys>> for KeyRing {
    fn from(keys: Arc<Keys>) -> Self {
        Self {
            current: RwLock::new(keys),
            previous: RwLock::new(None),
        }
    }
}

impl KeyRing {
    /// The keys to sign and seal with now.
    pub fn current(&self) -> Arc<Keys> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The retired keys while their grace lasts (`now_ms < until`).
    pub fn previous(&self, now_ms: u64) -> Option<Arc<Keys>> {
        self.previous
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .filter(|(_, until)| now_ms < *until)
            .map(|(k, _)| k.clone())
    }

    /// Keep `keys` as the retired pair until `until_ms` (a restart during a grace).
    pub fn set_previous(&self, keys: Keys, until_ms: u64) {
        *self.previous.write().unwrap_or_else(|p| p.into_inner()) =
            Some((Arc::new(keys), until_ms));
    }

    /// Switch to `new`; the current pair becomes the retired one until `until_ms`.
    pub fn rotate(&self, new: Keys, until_ms: u64) {
        let mut cur = self.current.write().unwrap_or_else(|p| p.into_inner());
        let old = std::mem::replace(&mut *cur, Arc::new(new));
        *self.previous.write().unwrap_or_else(|p| p.into_inner()) = Some((old, until_ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotate_switches_and_keeps_the_old_pair_for_the_grace() {
        let (a, b) = (Keys::generate(), Keys::generate());
        let (pa, pb) = (a.sign_pk(), b.sign_pk());
        let ring = KeyRing::from(a);
        assert!(ring.previous(0).is_none());
        ring.rotate(b, 100);
        assert_eq!(ring.current().sign_pk(), pb);
        assert_eq!(ring.previous(99).unwrap().sign_pk(), pa);
        assert!(ring.previous(100).is_none());
    }
}
