//! Which fleet a console session looks at (PROTOCOL §18.2): a tenant's session only its
//! own tenant's; the operator's every tenant ("all tenants") or, with the fleet page's
//! tenant switcher, one of them. Pure but for the registry's names.

use super::super::caller::Caller;
use super::super::error::GatewayError;
use super::super::fleet::Fleet;
use super::sessions::Session;
use crate::fleet::tenant::is_valid_tenant;

/// Whom a page of `session` shows the fleet as: the session's own caller, or for the
/// operator's session that switched to `tenant`, that tenant's view (what the operator
/// may do is unchanged: it only narrows what is listed).
pub fn viewer(session: &Session, tenant: Option<&str>) -> Caller {
    match (&session.tenant, tenant) {
        (None, Some(t)) if is_valid_tenant(t) => Caller::of_tenant(session.subject.clone(), t),
        _ => session.caller(),
    }
}

impl Fleet<'_> {
    /// The tenants an operator may switch to: `default` first, then by name.
    pub async fn tenant_names(&self) -> Result<Vec<String>, GatewayError> {
        let mut names: Vec<String> = self
            .0
            .state
            .tenants()
            .await?
            .into_iter()
            .map(|r| r.name)
            .filter(|n| n != crate::fleet::tenant::DEFAULT_TENANT)
            .collect();
        names.sort();
        names.insert(0, crate::fleet::tenant::DEFAULT_TENANT.to_string());
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(tenant: Option<&str>) -> Session {
        Session {
            subject: "ops".into(),
            jti: "j".into(),
            admin: true,
            tenant: tenant.map(Into::into),
            created_ms: 0,
            expires_ms: 1,
            csrf: "c".into(),
        }
    }

    #[test]
    fn a_tenant_session_never_switches_and_the_operator_narrows_only() {
        let acme = session(Some("acme"));
        assert_eq!(viewer(&acme, None).tenant.as_deref(), Some("acme"));
        assert_eq!(
            viewer(&acme, Some("globex")).tenant.as_deref(),
            Some("acme")
        );
        let op = session(None);
        assert_eq!(viewer(&op, None).tenant, None);
        assert_eq!(
            viewer(&op, Some("globex")).tenant.as_deref(),
            Some("globex")
        );
        assert_eq!(viewer(&op, Some("Not A Tenant")).tenant, None);
    }
}
