//! `/readyz` of a gateway on PostgreSQL follows the database (issue 25, 5): while the
//! database is away every write is answered 503, so the replica must not report itself
//! ready (a load balancer would keep sending it traffic it can only refuse).

use std::time::Duration;

use serde_json::Value;

use crate::harness::{http, Daemon, Home};
use crate::pg::PgCluster;

async fn readyz(gw: &Daemon) -> (u16, Value) {
    let r = http().get(gw.url("/readyz")).send().await.unwrap();
    let st = r.status().as_u16();
    (st, r.json().await.unwrap_or(Value::Null))
}

/// Polls `/readyz` until it answers `want`, for at most `within`.
async fn until(gw: &Daemon, want: u16, within: Duration) -> Value {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let (st, v) = readyz(gw).await;
        if st == want {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz still {st} {v} after {within:?}; wanted {want}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn readyz_is_503_while_postgres_is_away_and_200_once_it_is_back() {
    let Some(pg) = PgCluster::start_private() else {
        return;
    };
    let home = Home::init("gateway", "gateway:main", "");
    Home::use_database(home.dir.path(), &pg.create_database());
    let gw = home.start();
    until(&gw, 200, Duration::from_secs(10)).await;

    pg.stop_fast();
    // The probe itself is bounded: an unreachable database is "not ready" at once.
    let started = std::time::Instant::now();
    let v = until(&gw, 503, Duration::from_secs(5)).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(v["error"]["code"], "not_ready", "{v}");
    let msg = v["error"]["message"].as_str().unwrap_or("");
    assert!(msg.contains("cannot take writes"), "{v}");
    // The process stays up and healthy (systemd must not restart it for this).
    let h = http().get(gw.url("/healthz")).send().await.unwrap();
    assert_eq!(h.status().as_u16(), 200);

    pg.start();
    until(&gw, 200, Duration::from_secs(30)).await;
}
