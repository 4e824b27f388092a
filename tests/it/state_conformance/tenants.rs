//! The tenant registry (`TenantState`, PROTOCOL §18): create only over nothing, replace
//! only over something, delete only what exists; each write's audit entry committed
//! with it and nothing for a refused one; records survive a restart; the flows over it
//! (`gateway::tenants`) list `default` first, with usage, whether or not it was stored.

use outpost::fleet::tenant::{Quotas, TenantRecord};
use outpost::gateway::storage::tenants::{TenantDeleted, TenantPut};
use outpost::gateway::tenants::{self, QuotaChange, TenantError};

use super::*;

fn tenant(name: &str, max_nodes: Option<u64>) -> TenantRecord {
    TenantRecord {
        name: name.into(),
        quotas: Quotas {
            max_nodes,
            ..Quotas::default()
        },
        created_ms: T0,
        created_by: "local:test".into(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tenants_are_created_once_replaced_when_they_exist_and_deleted_once() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    assert!(state.tenants().await.unwrap().is_empty());
    let acme = tenant("acme", Some(10));
    assert!(state
        .tenant_put(&acme, TenantPut::Create, &entry("acme created"))
        .await
        .unwrap());
    // A second create and a replace of a missing tenant write nothing.
    assert!(!state
        .tenant_put(&tenant("acme", None), TenantPut::Create, &entry("again"))
        .await
        .unwrap());
    assert!(!state
        .tenant_put(&tenant("globex", None), TenantPut::Replace, &entry("nope"))
        .await
        .unwrap());
    assert_eq!(state.tenant("acme").await.unwrap(), Some(acme.clone()));
    assert_eq!(state.tenant("globex").await.unwrap(), None);
    let mut more = acme.clone();
    more.quotas.max_queued_messages = Some(500);
    assert!(state
        .tenant_put(&more, TenantPut::Replace, &entry("acme set"))
        .await
        .unwrap());
    let globex = tenant("globex", None);
    assert!(state
        .tenant_put(&globex, TenantPut::Create, &entry("globex created"))
        .await
        .unwrap());
    assert_eq!(
        state.tenants().await.unwrap(),
        vec![more.clone(), globex.clone()]
    );
    assert_eq!(
        state
            .tenant_delete("globex", &entry("globex deleted"))
            .await
            .unwrap(),
        TenantDeleted::Deleted
    );
    assert_eq!(
        state
            .tenant_delete("globex", &entry("again"))
            .await
            .unwrap(),
        TenantDeleted::NotFound
    );
    let pending: Vec<String> = state
        .audit_pending(10)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.entry.detail.unwrap_or_default())
        .collect();
    assert_eq!(
        pending,
        [
            "acme created",
            "acme set",
            "globex created",
            "globex deleted"
        ]
    );
    // The registry survives a restart.
    let e = e.reopen().await;
    assert_eq!(e.state.tenants().await.unwrap(), vec![more]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_flows_keep_default_implicit_and_refuse_what_is_not_allowed() {
    let Some(e) = Engine::open().await else {
        return;
    };
    let state = &*e.state;
    let names =
        |v: &[tenants::TenantView]| v.iter().map(|t| t.record.name.clone()).collect::<Vec<_>>();
    // A gateway from before tenants: its fleet is `default`, with no record stored.
    let n = "node:pump-1";
    state.queue_command(command(n, "m1"), None).await.unwrap();
    let all = tenants::list(state).await.unwrap();
    assert_eq!(names(&all), ["default"]);
    assert_eq!(all[0].usage.queued_messages, 1);
    assert!(all[0].usage.queued_bytes > 0);
    tenants::create(state, "zeta", Quotas::default(), "local:a")
        .await
        .unwrap();
    tenants::create(state, "acme", Quotas::default(), "local:a")
        .await
        .unwrap();
    assert!(matches!(
        tenants::create(state, "acme", Quotas::default(), "local:a").await,
        Err(TenantError::Exists(_))
    ));
    assert!(matches!(
        tenants::create(state, "default", Quotas::default(), "local:a").await,
        Err(TenantError::Default)
    ));
    assert!(matches!(
        tenants::create(state, "Bad_Name", Quotas::default(), "local:a").await,
        Err(TenantError::Invalid(_))
    ));
    assert!(matches!(
        tenants::delete(state, "default", "local:a").await,
        Err(TenantError::Default)
    ));
    assert!(matches!(
        tenants::set(state, "nobody", QuotaChange::default(), "local:a").await,
        Err(TenantError::NotFound(_))
    ));
    // Setting `default`'s quotas stores its record (twice: the second replaces).
    for limit in [5, 6] {
        let change = QuotaChange {
            max_queued_messages: Some(Some(limit)),
            ..QuotaChange::default()
        };
        let r = tenants::set(state, "default", change, "local:a")
            .await
            .unwrap();
        assert_eq!(r.quotas.max_queued_messages, Some(limit));
    }
    let all = tenants::list(state).await.unwrap();
    assert_eq!(names(&all), ["default", "acme", "zeta"]);
    assert_eq!(all[0].record.quotas.max_queued_messages, Some(6));
    assert_eq!(all[0].usage.queued_messages, 1);
    assert_eq!(all[1].usage, Default::default());
    tenants::delete(state, "zeta", "local:a").await.unwrap();
    assert!(matches!(
        tenants::delete(state, "zeta", "local:a").await,
        Err(TenantError::NotFound(_))
    ));
    let details: Vec<String> = state
        .audit_pending(10)
        .await
        .unwrap()
        .into_iter()
        .map(|p| {
            assert_eq!(p.entry.event, AuditEvent::Tenant);
            p.entry.detail.unwrap_or_default()
        })
        .collect();
    assert_eq!(
        details,
        [
            "zeta created max_nodes=- max_queued_messages=- max_queued_bytes=- max_commands_per_s=-",
            "acme created max_nodes=- max_queued_messages=- max_queued_bytes=- max_commands_per_s=-",
            "default set max_nodes=- max_queued_messages=5 max_queued_bytes=- max_commands_per_s=-",
            "default set max_nodes=- max_queued_messages=6 max_queued_bytes=- max_commands_per_s=-",
            "zeta deleted",
        ]
    );
}
