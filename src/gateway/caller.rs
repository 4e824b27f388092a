//! Who a client call comes from, for what it may see (PROTOCOL §18): the token's
//! subject and, for a tenant's token, its tenant. Pure: every flow that takes a node, a
//! message or an event from a caller asks this, so "another tenant's object answers as
//! one that does not exist" is decided in one place.
//!
//! A tenant's caller names its nodes by their node ids (`node:pump-17`) and is shown
//! node ids; the gateway keys them by address (`node:pump-17@acme`). The operator (a
//! token without a tenant) names and is shown addresses, so every answer it gets names
//! the tenant.

use super::error::GatewayError;
use crate::fleet::tenant::{address, node_of, tenant_of};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's subject (`sub`).
    pub subject: String,
    /// The token's tenant; `None` = the gateway operator, who sees every tenant.
    pub tenant: Option<String>,
}

impl Caller {
    pub fn operator(subject: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            tenant: None,
        }
    }

    pub fn of_tenant(subject: impl Into<String>, tenant: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            tenant: Some(tenant.into()),
        }
    }

    /// The address of the node the caller names `node_id`; `None` when it names none
    /// the caller may reach (a tenant's caller naming an address: ids must not be
    /// probeable, so this answers as an unknown node).
    pub fn address(&self, node_id: &str) -> Option<String> {
        match &self.tenant {
            None => Some(node_id.to_string()),
            Some(_) if node_id.contains('@') => None,
            Some(t) => Some(address(node_id, t)),
        }
    }

    /// May the caller see the node at `address` (and what is queued for or came from it)?
    pub fn sees(&self, address: &str) -> bool {
        self.tenant
            .as_deref()
            .is_none_or(|t| tenant_of(address) == t)
    }

    /// [`Self::sees`] as the answer a caller gets for a node it may not see: the same
    /// [`GatewayError::UnknownNode`] as for one that does not exist.
    pub fn reaches(&self, address: &str) -> Result<(), GatewayError> {
        if self.sees(address) {
            Ok(())
        } else {
            Err(GatewayError::UnknownNode(address.to_string()))
        }
    }

    /// The node at `address` as the caller names it.
    pub fn shown<'a>(&self, address: &'a str) -> &'a str {
        match self.tenant {
            None => address,
            Some(_) => node_of(address),
        }
    }

    /// Who the caller is wherever its own names are scoped (idempotency keys, job ids):
    /// its subject, and its tenant with it, so two tenants' tokens with one subject never
    /// share a key.
    pub fn principal(&self) -> String {
        match &self.tenant {
            None => self.subject.clone(),
            Some(t) => format!("{}@{t}", self.subject),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_caller_reaches_only_its_own_nodes() {
        let op = Caller::operator("ops");
        let acme = Caller::of_tenant("ops", "acme");
        assert_eq!(op.address("node:a@acme").as_deref(), Some("node:a@acme"));
        assert_eq!(op.address("node:a").as_deref(), Some("node:a"));
        assert_eq!(acme.address("node:a").as_deref(), Some("node:a@acme"));
        assert_eq!(acme.address("node:a@globex"), None);
        assert_eq!(acme.address("node:a@acme"), None);
        assert!(op.sees("node:a") && op.sees("node:a@globex"));
        assert!(acme.sees("node:a@acme"));
        assert!(!acme.sees("node:a") && !acme.sees("node:a@globex"));
        assert_eq!(acme.shown("node:a@acme"), "node:a");
        assert_eq!(op.shown("node:a@acme"), "node:a@acme");
        assert_ne!(op.principal(), acme.principal());
        assert_ne!(
            acme.principal(),
            Caller::of_tenant("ops", "globex").principal()
        );
        // The default tenant's caller: plain ids are its nodes.
        let d = Caller::of_tenant("x", "default");
        assert_eq!(d.address("node:a").as_deref(), Some("node:a"));
        assert!(d.sees("node:a") && !d.sees("node:a@acme"));
    }
}
