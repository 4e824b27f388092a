//! An edit of the enrolled peers by hand (`outpost trust add|rm` on the gateway host):
//! the peers it puts (new, or with another document, rights or rotation state) and the
//! ids it removes. An engine applies it to the peers as they are when it writes, so a
//! node another writer enrolled (or rotated, or retired) between the command's read
//! and its write keeps what that writer did. Pure.

use crate::envelope::{Peer, TrustStore};

/// What a hand edit changes, nothing else.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustEdit {
    pub put: Vec<Peer>,
    pub remove: Vec<String>,
}

impl TrustEdit {
    /// The edit that turns `before` into `after`.
    pub fn between(before: &TrustStore, after: &TrustStore) -> Self {
        let put = after
            .list()
            .filter(|p| before.get(&p.address()) != Some(*p))
            .cloned()
            .collect();
        let remove = before
            .list()
            .filter(|p| after.get(&p.address()).is_none())
            .map(|p| p.address())
            .collect();
        Self { put, remove }
    }

    /// Apply it to `t`: each put peer whole (its rotation history included), each
    /// removed id gone.
    pub fn apply(&self, t: &mut TrustStore) {
        for p in &self.put {
            t.insert(p.clone());
        }
        for id in &self.remove {
            t.remove(id);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.put.is_empty() && self.remove.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{IdentityDocument, Keys, Rights};

    fn doc(id: &str) -> IdentityDocument {
        IdentityDocument::new(id, "node", &Keys::generate(), "2026-12-01T00:00:00Z")
    }

    const SEND: Rights = Rights {
        send: true,
        issue: false,
    };

    #[test]
    fn an_edit_names_only_what_changed_and_leaves_what_another_writer_did() {
        let mut before = TrustStore::new();
        before.add(doc("node:a"), SEND).unwrap();
        before.add(doc("node:b"), SEND).unwrap();
        let mut after = before.clone();
        after.add(doc("node:c"), SEND).unwrap();
        after.remove("node:a");
        let b = after.get("node:b").unwrap().doc.clone();
        after.add(b, Rights::default()).unwrap();
        let edit = TrustEdit::between(&before, &after);
        let put: Vec<&str> = edit.put.iter().map(|p| p.doc.node_id.as_str()).collect();
        assert_eq!(put, ["node:b", "node:c"]);
        assert_eq!(edit.remove, ["node:a"]);
        assert!(TrustEdit::between(&after, &after).is_empty());

        // Meanwhile another writer trusted node:d: applying the edit keeps it.
        let mut now = before.clone();
        now.add(doc("node:d"), SEND).unwrap();
        edit.apply(&mut now);
        let ids: Vec<&str> = now.list().map(|p| p.doc.node_id.as_str()).collect();
        assert_eq!(ids, ["node:b", "node:c", "node:d"]);
        assert_eq!(now.get("node:b").unwrap().rights, Rights::default());
    }
}
