//! `outpost gateway migrate --to postgres://…` (the `gateway_pg` binary only): an
//! embedded gateway with queued commands, a revocation and an audit copy moves into
//! PostgreSQL; a second migration into the same database is refused.
//! And the schema's migrations at start: a newer schema refused, schema 1 upgraded,
//! three replicas migrating an empty database together.

use std::time::Duration;

use ed25519_dalek::SigningKey;
use outpost::audit::{
    leaf_hash, origin_for, sign_checkpoint, AuditEntry, AuditEvent, AuditOutcome, AuditRecord,
    Frontier,
};
use serde_json::json;

use crate::harness::{http, text, Home};
use crate::pg::PgCluster;
use crate::sim::{command, SimNode};

#[tokio::test(flavor = "multi_thread")]
async fn an_embedded_gateway_moves_into_postgres_with_its_queues_revocations_and_audit() {
    let Some(pg) = PgCluster::shared() else {
        return;
    };
    // An embedded gateway (this binary's homes default to PostgreSQL).
    let home = Home::init("gateway", "gateway:main", "");
    std::fs::remove_file(home.dir.path().join("outpost.d/40-store.toml")).unwrap();
    let n = SimNode::new(5);
    n.enroll(&home);
    // The tenant registry moves too (PROTOCOL §18); its audit entries are appended by
    // the gateway at start.
    for args in [
        &["tenant", "create", "acme", "--max-nodes", "3"][..],
        &["tenant", "set", "default", "--max-queued-messages", "900"],
    ] {
        let o = home.cli(args);
        assert!(o.status.success(), "{}", text(&o));
    }
    let tenants_before = home.cli(&["tenant", "list", "--json"]);
    assert!(tenants_before.status.success(), "{}", text(&tenants_before));
    let admin = home.token("gateway:main", &["admin"], "1h");
    let gw = home.start();
    let mut ids = Vec::new();
    for i in 0..10 {
        ids.push(command(&gw, &admin, &n.id, i, 3600).await);
    }
    let (first, _) = n.pull(&gw, 0, 3).await;
    n.ack(&gw, &first).await;
    let r = http()
        .post(gw.url("/v1/revocations"))
        .bearer_auth(&admin)
        .json(&json!({"jti": "tok-moved"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let entries: Vec<Vec<u8>> = (0..4)
        .map(|i| {
            AuditEntry::from_record(
                i,
                1_000 + i,
                AuditRecord::new(AuditEvent::ToolCall, AuditOutcome::Ok),
            )
            .canonical_bytes()
        })
        .collect();
    let mut fr = Frontier::new();
    for e in &entries {
        fr.push(leaf_hash(e));
    }
    let note = sign_checkpoint(
        &SigningKey::from_bytes(&[45; 32]),
        &origin_for(&n.id),
        fr.size(),
        &fr.root(),
    );
    let texts: Vec<String> = entries
        .iter()
        .map(|b| String::from_utf8(b.clone()).unwrap())
        .collect();
    let audit = format!("/v1/nodes/{}/audit", n.id);
    let (st, v) = n
        .signed(
            &gw,
            "POST",
            &audit,
            Some(&json!({"entries": texts, "checkpoint": note})),
        )
        .await;
    assert_eq!(st, 200, "{v}");

    // Refused while the gateway runs.
    let url = pg.create_database();
    let o = home.cli(&["gateway", "migrate", "--to", &url]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("stop it first"),
        "{}",
        text(&o)
    );
    drop(gw);

    // With a password in the URL (the test cluster trusts loopback and ignores it): the
    // config the "next:" block prints must work as printed, so it carries the URL as
    // given. (Issue 29, 9: it printed the password masked, a URL that cannot connect.)
    let with_password = url.replacen("postgres://outpost@", "postgres://outpost:s3cret@", 1);
    let o = home.cli(&["gateway", "migrate", "--to", &with_password]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("7 message(s)")
            && out.contains("2 tenant(s)")
            && out.contains("audit roots match"),
        "{out}"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("postgres_url = \"{with_password}\"")),
        "{err}"
    );
    // Never into a database that already holds a gateway's state.
    let again = home.cli(&["gateway", "migrate", "--to", &url]);
    assert!(!again.status.success(), "{}", text(&again));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already holds gateway state"),
        "{}",
        text(&again)
    );

    // The same gateway on the database: what was queued, in order, the revocation and
    // the audit copy.
    Home::use_database(home.dir.path(), &url);
    // The records as they were (what they use is not compared: commands were queued
    // since the first listing).
    let records = |o: &std::process::Output| -> Vec<serde_json::Value> {
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        out.lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                v.as_object_mut().unwrap().remove("usage");
                v
            })
            .collect()
    };
    let tenants_after = home.cli(&["tenant", "list", "--json"]);
    assert_eq!(records(&tenants_after), records(&tenants_before));
    assert_eq!(
        records(&tenants_after)[1]["quotas"],
        json!({"max_nodes": 3})
    );
    let gw = home.start();
    let (rest, pending) = n.pull(&gw, 0, 100).await;
    assert_eq!((rest.as_slice(), pending), (&ids[3..], 7));
    let path = format!("/v1/nodes/{}/revocations?since=0", n.id);
    let (st, r) = n.signed(&gw, "GET", &path, None).await;
    assert_eq!(
        (st, r["revoked"].clone()),
        (200, json!(["tok-moved"])),
        "{r}"
    );
    let (st, a) = n.signed(&gw, "GET", &audit, None).await;
    assert_eq!((st, a["size"].as_u64()), (200, Some(4)), "{a}");
}

/// A database migrated by a newer outpost is refused at start, with the reason.
#[test]
fn a_database_with_a_newer_schema_is_refused_at_start() {
    let Some(pg) = PgCluster::shared() else {
        return;
    };
    let home = Home::init("gateway", "gateway:main", "");
    let url = home.db.clone().expect("a gateway on PostgreSQL");
    pg.psql(
        &url,
        "CREATE TABLE outpost_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
         INSERT INTO outpost_schema (version) VALUES (99);",
    );
    let o = home.cli(&["run"]);
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("schema version 99 is newer than this binary supports"),
        "{}",
        text(&o)
    );
}

/// A database of schema 1 (event ids given by the writer under a lock) is upgraded at
/// start: its events keep their ids, and the next event continues after them — a
/// dashboard resuming with `Last-Event-ID` across the upgrade misses nothing and sees
/// no id twice.
#[tokio::test(flavor = "multi_thread")]
async fn a_schema_1_database_is_upgraded_and_event_ids_continue() {
    let Some(pg) = PgCluster::shared() else {
        return;
    };
    let home = Home::init("gateway", "gateway:main", "");
    let url = home.db.clone().expect("a gateway on PostgreSQL");
    let v1 = outpost::gateway::storage::postgres::schema::MIGRATIONS[0];
    pg.psql(
        &url,
        &format!(
            "CREATE TABLE outpost_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
             {v1}
             INSERT INTO outpost_schema (version) VALUES (1);
             INSERT INTO events (id, ts_ms, event)
             SELECT id, (extract(epoch FROM now()) * 1000)::bigint, e FROM (VALUES
               (1, '{{\"event\":\"node_online\",\"node_id\":\"node:old\"}}'),
               (2, '{{\"event\":\"node_offline\",\"node_id\":\"node:old\"}}'),
               (7, '{{\"event\":\"node_online\",\"node_id\":\"node:old\"}}')) AS v(id, e);"
        ),
    );
    let n = SimNode::new(1);
    n.enroll(&home);
    let admin = home.token("gateway:main", &["admin"], "1h");
    let gw = home.start();
    assert_eq!(
        pg.psql(&url, "SELECT max(version) FROM outpost_schema")
            .trim(),
        outpost::gateway::storage::postgres::schema::latest().to_string()
    );
    let mut sse = crate::replicas::subscribe(&gw, &admin, Some(7)).await;
    let id = command(&gw, &admin, &n.id, 0, 3600).await;
    let (mut buf, mut got) = (String::new(), Vec::new());
    let seen = crate::replicas::frames_until(
        &mut sse,
        &mut buf,
        &mut got,
        std::time::Duration::from_secs(10),
        |f| f.iter().any(|(_, name, _)| name == "queued"),
    )
    .await;
    assert!(seen, "no queued event after the upgrade: {got:?}");
    let (qid, _, data) = got.iter().find(|(_, name, _)| name == "queued").unwrap();
    assert_eq!(data["message_id"], json!(id), "{data}");
    assert_eq!(
        *qid, 8,
        "the first event after the upgrade follows the last one: {got:?}"
    );
    assert!(got.iter().all(|(i, _, _)| *i > 7), "{got:?}");
    assert_eq!(
        pg.psql(
            &url,
            "SELECT string_agg(id::text, ',' ORDER BY id) FROM events WHERE id <= 7"
        )
        .trim(),
        "1,2,7"
    );
}

/// Three replicas started at the same moment on an empty database (no schema yet): the
/// advisory lock lets one of them migrate while the others wait, so all three start
/// and serve, and each migration is applied once.
#[tokio::test(flavor = "multi_thread")]
async fn three_replicas_started_together_on_an_empty_database_all_serve() {
    use crate::harness::Daemon;
    use outpost::gateway::storage::postgres::schema;
    let Some(pg) = PgCluster::shared() else {
        return;
    };
    let Some(homes) = crate::replicas::replicas(3) else {
        return;
    };
    let url = homes[0].db.clone().expect("a gateway on PostgreSQL");
    let admin = homes[0].token("gateway:main", &["admin"], "1h");
    assert_eq!(
        pg.psql(
            &url,
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        ),
        "0",
        "the database is not empty before the start"
    );
    let go = std::sync::Barrier::new(homes.len());
    let mut gws: Vec<Daemon> = std::thread::scope(|s| {
        let started: Vec<_> = homes
            .iter()
            .map(|h| {
                let go = &go;
                s.spawn(move || {
                    go.wait();
                    h.start()
                })
            })
            .collect();
        started.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for (k, gw) in gws.iter().enumerate() {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let ready = http().get(gw.url("/readyz")).send().await;
            if ready.is_ok_and(|r| r.status().as_u16() == 200) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "replica {k} never ready: {}",
                gw.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let versions: Vec<String> = (1..=schema::latest()).map(|v| v.to_string()).collect();
    assert_eq!(
        pg.psql(
            &url,
            "SELECT string_agg(version::text, ',' ORDER BY version) FROM outpost_schema"
        ),
        versions.join(","),
        "schema versions recorded"
    );
    let logs: Vec<String> = gws.iter().map(Daemon::log_text).collect();
    let migrated = logs
        .iter()
        .map(|l| l.matches("postgres_migrated").count())
        .sum::<usize>();
    assert_eq!(
        migrated as i64,
        schema::latest(),
        "each migration applied once across the replicas: {logs:#?}"
    );

    // All three serve: a node enrolled through one is known to each (the trust store is
    // re-read on its NOTIFY), commands queued through every replica are pulled, in the
    // order queued, through another.
    let n = SimNode::new(6);
    n.enroll(&homes[0]);
    let pq = format!("/v1/nodes/{}/pull?wait_s=0&max=1", n.id);
    for (k, gw) in gws.iter().enumerate() {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (st, v) = n.signed(gw, "GET", &pq, None).await;
            if st == 200 {
                break;
            }
            assert!(
                st == 401 && tokio::time::Instant::now() < deadline,
                "replica {k} answered the enrolled node {st} {v}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let mut ids = Vec::new();
    for (i, gw) in gws.iter().enumerate() {
        ids.push(command(gw, &admin, &n.id, i, 3600).await);
    }
    let (got, pending) = n.pull(&gws[1], 0, 10).await;
    assert_eq!((got, pending), (ids, 3));
    for (k, gw) in gws.iter_mut().enumerate() {
        assert!(gw.is_running(), "replica {k} exited: {}", gw.log_text());
        assert!(
            !gw.log_text().contains("ERROR"),
            "replica {k} logged an error: {}",
            gw.log_text()
        );
    }
}
