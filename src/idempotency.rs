//! The one idempotency-key scheme of both roles (PROTOCOL §9, §11.1): a caller's
//! `Idempotency-Key` names the message it queues by a message id derived from the key
//! and whose key it is, so a repeat of the request finds the message the first one
//! queued (and the same key from another owner names another message). The header is
//! read by `api::idempotency_key`; the stores decide "same message or conflict" by the
//! id.

use sha2::Digest;

/// Whose keys: each kind names its own ids (the domain string of the derivation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner<'a> {
    /// A node's outbox: the node's id (its local clients share it).
    Outbox(&'a str),
    /// The gateway's commands and tool calls: the caller's token subject.
    #[cfg_attr(not(feature = "gateway"), allow(dead_code))]
    Command(&'a str),
}

/// The message id (a version 8 UUID) that `key` names for `owner`.
pub fn message_id(owner: Owner<'_>, key: &str) -> String {
    let (domain, who) = match owner {
        Owner::Outbox(node) => ("outpost outbox key", node),
        Owner::Command(subject) => ("outpost command key", subject),
    };
    let digest = sha2::Sha256::digest(format!("{domain}\n{who}\n{key}"));
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes)
        .into_uuid()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_names_one_message_per_owner_and_kind() {
        let a = message_id(Owner::Command("alice"), "k1");
        assert_eq!(a, message_id(Owner::Command("alice"), "k1"));
        assert_ne!(a, message_id(Owner::Command("bob"), "k1"));
        assert_ne!(a, message_id(Owner::Command("alice"), "k2"));
        assert_ne!(a, message_id(Owner::Outbox("alice"), "k1"));
        assert!(uuid::Uuid::parse_str(&a).is_ok(), "{a}");
    }

    /// The ids stay what earlier releases derived: a client retrying across an upgrade
    /// still finds its message.
    #[test]
    fn ids_are_the_ones_earlier_releases_derived() {
        let old = |domain: &str, who: &str, key: &str| {
            let d = sha2::Sha256::digest(format!("{domain}\n{who}\n{key}"));
            let mut b = [0u8; 16];
            b.copy_from_slice(&d[..16]);
            uuid::Builder::from_custom_bytes(b).into_uuid().to_string()
        };
        assert_eq!(
            message_id(Owner::Outbox("node:a"), "x"),
            old("outpost outbox key", "node:a", "x")
        );
        assert_eq!(
            message_id(Owner::Command("op"), "x"),
            old("outpost command key", "op", "x")
        );
    }
}
