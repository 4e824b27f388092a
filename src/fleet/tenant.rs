//! Tenants (PROTOCOL §18): named namespaces on one gateway, each a fleet of its own.
//! Pure: the name grammar, a node's **address** inside the gateway (its node id for the
//! tenant `default`, `<node id>@<tenant>` otherwise: DECISIONS D17), and a tenant's
//! quotas. `@` is in no node id (PROTOCOL §2), so an address splits one way only.

use serde::{Deserialize, Serialize};

/// The tenant every node of a gateway from before tenants is in, and the one a node
/// enrolled without a tenant joins. Its addresses are plain node ids.
pub const DEFAULT_TENANT: &str = "default";

/// Why a tenant name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid tenant {0:?}: expected [a-z0-9][a-z0-9-]{{0,31}}")]
pub struct InvalidTenant(pub String);

/// `[a-z0-9][a-z0-9-]{0,31}`.
pub fn is_valid_tenant(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 32
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b[1..]
            .iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

/// [`is_valid_tenant`] with the refusal (the echo truncated: names come from callers).
pub fn validate_tenant(name: &str) -> Result<(), InvalidTenant> {
    if is_valid_tenant(name) {
        Ok(())
    } else {
        Err(InvalidTenant(name.chars().take(40).collect()))
    }
}

/// The address of node `node_id` of `tenant` (the node id itself in [`DEFAULT_TENANT`]).
pub fn address(node_id: &str, tenant: &str) -> String {
    if tenant == DEFAULT_TENANT {
        node_id.to_string()
    } else {
        format!("{node_id}@{tenant}")
    }
}

/// An address's node id and tenant (`default` when it names none).
pub fn split_address(address: &str) -> (&str, &str) {
    match address.rsplit_once('@') {
        Some((node, tenant)) => (node, tenant),
        None => (address, DEFAULT_TENANT),
    }
}

/// The tenant of an address.
pub fn tenant_of(address: &str) -> &str {
    split_address(address).1
}

/// The node id of an address (what the device calls itself).
pub fn node_of(address: &str) -> &str {
    split_address(address).0
}

/// A tenant's limits; `None` = unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quotas {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_nodes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queued_messages: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queued_bytes: Option<u64>,
    /// Commands and tool calls a second for the tenant's nodes, per gateway process
    /// (a burst of this many, then this many a second: [`super::rate::Bucket`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_commands_per_s: Option<u64>,
}

/// Which quota a request would exceed (`429 tenant_quota` names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quota {
    Nodes,
    QueuedMessages,
    QueuedBytes,
    CommandRate,
}

impl Quota {
    pub fn as_str(self) -> &'static str {
        match self {
            Quota::Nodes => "max_nodes",
            Quota::QueuedMessages => "max_queued_messages",
            Quota::QueuedBytes => "max_queued_bytes",
            Quota::CommandRate => "max_commands_per_s",
        }
    }
}

/// What a tenant uses now, against its [`Quotas`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub nodes: u64,
    pub queued_messages: u64,
    pub queued_bytes: u64,
}

impl Quotas {
    /// The first quota that `usage` plus one more node would exceed.
    pub fn admits_node(&self, usage: &Usage) -> Result<(), Quota> {
        over(self.max_nodes, usage.nodes, 1).map_or(Ok(()), |()| Err(Quota::Nodes))
    }

    /// The first quota that `usage` plus one more message of `bytes` would exceed.
    pub fn admits_message(&self, usage: &Usage, bytes: u64) -> Result<(), Quota> {
        if over(self.max_queued_messages, usage.queued_messages, 1).is_some() {
            return Err(Quota::QueuedMessages);
        }
        if over(self.max_queued_bytes, usage.queued_bytes, bytes).is_some() {
            return Err(Quota::QueuedBytes);
        }
        Ok(())
    }
}

/// `Some(())` when `used + more` is above `limit`.
fn over(limit: Option<u64>, used: u64, more: u64) -> Option<()> {
    let limit = limit?;
    (used.saturating_add(more) > limit).then_some(())
}

/// A tenant as the gateway keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantRecord {
    pub name: String,
    #[serde(default)]
    pub quotas: Quotas,
    pub created_ms: u64,
    /// Who created it (a token subject or `local:<user>`).
    pub created_by: String,
}

impl TenantRecord {
    /// The record the tenant `default` has when no one set its quotas: it always
    /// exists, and a gateway from before tenants has no record of it.
    pub fn implicit_default() -> Self {
        Self {
            name: DEFAULT_TENANT.to_string(),
            quotas: Quotas::default(),
            created_ms: 0,
            created_by: "gateway".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::is_valid_node_id;
    use proptest::prelude::*;

    #[test]
    fn names_follow_the_grammar() {
        for ok in ["default", "acme", "0", "a-b", "globex-2", &"a".repeat(32)] {
            assert!(is_valid_tenant(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "Acme",
            "a_b",
            "a.b",
            "a@b",
            "a:b",
            &"a".repeat(33),
        ] {
            assert!(!is_valid_tenant(bad), "{bad}");
            assert!(validate_tenant(bad).is_err());
        }
    }

    #[test]
    fn the_default_tenant_keeps_plain_node_ids() {
        assert_eq!(address("node:pump-17", "default"), "node:pump-17");
        assert_eq!(address("node:pump-17", "acme"), "node:pump-17@acme");
        assert_eq!(split_address("node:pump-17"), ("node:pump-17", "default"));
        assert_eq!(split_address("node:pump-17@acme"), ("node:pump-17", "acme"));
    }

    #[test]
    fn quotas_name_what_they_refuse() {
        let q = Quotas {
            max_nodes: Some(2),
            max_queued_messages: Some(10),
            max_queued_bytes: Some(1000),
            max_commands_per_s: None,
        };
        let mut u = Usage::default();
        assert_eq!(q.admits_node(&u), Ok(()));
        u.nodes = 2;
        assert_eq!(q.admits_node(&u), Err(Quota::Nodes));
        u.queued_messages = 9;
        assert_eq!(q.admits_message(&u, 1000), Ok(()));
        assert_eq!(q.admits_message(&u, 1001), Err(Quota::QueuedBytes));
        u.queued_messages = 10;
        assert_eq!(q.admits_message(&u, 1), Err(Quota::QueuedMessages));
        assert_eq!(Quotas::default().admits_message(&u, u64::MAX), Ok(()));
    }

    proptest! {
        /// Every (node id, tenant) pair has one address, and it gives both back.
        #[test]
        fn an_address_round_trips(
            node in "[a-z][a-z0-9-]{0,31}:[A-Za-z0-9._-]{1,64}",
            tenant in "[a-z0-9][a-z0-9-]{0,31}",
            other in "[a-z0-9][a-z0-9-]{0,31}",
        ) {
            prop_assume!(is_valid_node_id(&node));
            let a = address(&node, &tenant);
            prop_assert_eq!(split_address(&a), (node.as_str(), tenant.as_str()));
            // Two tenants' addresses of one node id never collide.
            prop_assume!(other != tenant);
            prop_assert_ne!(a, address(&node, &other));
        }
    }
}
