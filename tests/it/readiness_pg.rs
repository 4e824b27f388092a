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

/// Issue 29 (6): a gateway started while its database is down did not listen at all, so
/// `outpost status` said "is `outpost run` active?". It listens at once now: `/healthz`
/// 200, `/readyz` and the rest 503 `not_ready` saying what it waits for, and `status`
/// shows that; once the database answers it serves as usual on the same socket.
#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_waiting_for_postgres_listens_and_says_why_it_is_not_ready() {
    let Some(pg) = PgCluster::start_private() else {
        return;
    };
    let home = Home::init("gateway", "gateway:main", "");
    Home::use_database(home.dir.path(), &pg.create_database());
    let port = crate::harness::free_port();
    crate::harness::listen_on(&home, port);
    pg.stop_fast();
    let log = std::fs::File::create(home.dir.path().join("early.log")).unwrap();
    let mut child = std::process::Command::new(crate::harness::bin())
        .args(["run", "--config", home.config().to_str().unwrap()])
        .env_remove("OUTPOST_CONFIG")
        .env_remove("NOTIFY_SOCKET")
        .stderr(log)
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let get = |path: &str| {
        let url = format!("{base}{path}");
        async move {
            let r = http().get(url).send().await.ok()?;
            let st = r.status().as_u16();
            Some((st, r.json::<Value>().await.unwrap_or(Value::Null)))
        }
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let health = loop {
        if let Some(x) = get("/healthz").await {
            break x;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the gateway never listened"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(health.0, 200);
    let (st, v) = get("/readyz").await.unwrap();
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (503, Some("not_ready")),
        "{v}"
    );
    let (st, v) = get("/v1/status").await.unwrap();
    assert_eq!(st, 503, "{v}");
    let msg = v["error"]["message"].as_str().unwrap_or("").to_string();
    assert!(msg.contains("PostgreSQL") || msg.contains("state"), "{v}");
    let o = home.cli(&["status"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("not_ready") || err.contains("starting"),
        "{err}"
    );
    assert!(!err.contains("is `outpost run` active"), "{err}");

    pg.start();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while get("/readyz").await.map(|x| x.0) != Some(200) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never ready after the database came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (st, v) = get("/v1/status").await.unwrap();
    assert_eq!(st, 200, "{v}");
    assert!(
        v["store"]
            .as_str()
            .unwrap_or("")
            .starts_with("postgres postgres://"),
        "{v}"
    );
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
}
