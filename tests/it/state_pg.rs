//! The PostgreSQL gateway state on its own (the `gateway_pg` binary only), with a clock
//! the test moves: what the embedded state's unit tests check of the promises both
//! engines make (`gateway::storage::embedded::tests`), against a real database.

use outpost::clock::ManualClock;
use outpost::gateway::storage::postgres::Postgres;
use outpost::gateway::storage::{GatewayState, InboxMessage, Queued};

use crate::pg::PgCluster;

const T0: u64 = 1_780_000_000_000;

/// RELIABILITY F1 on PostgreSQL: a message that expired between two sweeps must not be
/// listed (no sweeper runs here; the listing alone must leave it out).
#[tokio::test(flavor = "multi_thread")]
async fn the_inbox_never_lists_a_message_past_its_expiry_even_before_the_sweep() {
    let Some(pg) = PgCluster::shared() else {
        return;
    };
    let url = pg.create_database();
    let cfg = outpost::config::from_str(&format!(
        "[identity]\nnode_id = \"gateway:main\"\nrole = \"gateway\"\n[store]\nengine = \"postgres\"\npostgres_url = \"{url}\"\n"
    ))
    .unwrap();
    let clock = ManualClock::new(T0);
    let state = Postgres::open(
        cfg.gateway_db.as_ref().unwrap(),
        &cfg.queue,
        std::sync::Arc::new(clock.clone()),
    )
    .await
    .unwrap();
    for (id, ttl_ms) in [("short", 4_000), ("long", 86_400_000)] {
        let q = state
            .inbox_put(InboxMessage {
                from_node: "node:a".into(),
                message_id: id.into(),
                payload_type: "DATA".into(),
                priority: 0,
                created_at_ms: T0,
                expires_at_ms: T0 + ttl_ms,
                record: id.as_bytes().to_vec(),
                remember_until_ms: T0 + ttl_ms,
            })
            .await
            .unwrap();
        assert_eq!(q, Queued::Queued);
    }
    let listed = |rows: Vec<Vec<u8>>| -> Vec<String> {
        rows.into_iter()
            .map(|r| String::from_utf8(r).unwrap())
            .collect()
    };
    assert_eq!(
        listed(state.inbox_list(None, 10).await.unwrap()),
        ["short", "long"]
    );
    // At the expiry instant, and no sweep has run: still in the table, never listed.
    clock.advance_ms(4_000);
    assert_eq!(listed(state.inbox_list(None, 10).await.unwrap()), ["long"]);
    assert_eq!(
        listed(state.inbox_list(Some("node:a"), 10).await.unwrap()),
        ["long"]
    );
    assert_eq!(
        pg.psql(
            &url,
            "SELECT count(*) FROM messages WHERE message_id = 'short'"
        ),
        "1",
        "the test is about the listing, not the sweep"
    );
}
