//! The fleet page's tenant switcher (PROTOCOL §18.2): the operator's session lists every
//! tenant ("all tenants") or narrows to one; a tenant's session is fixed to its own
//! tenant and has no switcher, only its tenant's name beside the subject.

use maud::{html, Markup};

use crate::gateway::caller::Caller;
use crate::gateway::console::sessions::Session;
use crate::gateway::console::tenants;
use crate::gateway::console::FleetQuery;

/// Whom the page for `q` shows the fleet as (see [`tenants::viewer`]).
pub fn viewer(session: &Session, q: &FleetQuery) -> Caller {
    tenants::viewer(session, (!q.tenant.is_empty()).then_some(q.tenant.as_str()))
}

/// The tenants the switcher offers: the operator's session only (a tenant's has no
/// switcher, and is not made to read the registry). A registry that cannot be read
/// leaves the switcher empty, said in the log; the fleet page itself still shows.
pub async fn names(gw: &crate::gateway::Gateway, session: &Session) -> Vec<String> {
    if session.tenant.is_some() {
        return Vec::new();
    }
    gw.fleet().tenant_names().await.unwrap_or_else(|e| {
        tracing::warn!(event = "tenants_unreadable", error = %e);
        Vec::new()
    })
}

/// The operator's switcher: a form that keeps the filter and the selector. Nothing for
/// a tenant's session.
pub fn switcher(session: &Session, names: &[String], q: &FleetQuery) -> Markup {
    html! {
        @if session.tenant.is_none() {
            form.tenants #tenant-switcher method="get" action="/ui" {
                label for="tenant" { "Tenant" }
                select #tenant name="tenant" {
                    option value="" selected[q.tenant.is_empty()] { "All tenants" }
                    @for n in names {
                        option value=(n) selected[q.tenant == *n] { (n) }
                    }
                }
                input type="hidden" name="q" value=(q.filter);
                input type="hidden" name="sel" value=(q.selector);
                button type="submit" { "Show" }
            }
        }
    }
}
