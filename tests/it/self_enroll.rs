//! Zero-touch enrollment (PROTOCOL §15), on both gateway engines: nodes that enroll
//! themselves with one token, every refusal said by the node, a lost answer, manual
//! approval, a reflashed device's re-key, and retiring a node.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::harness::{http, text, wait_for, Daemon, Home};

/// A gateway on `0` with its token-minting CLI.
pub fn gateway() -> (Home, Daemon) {
    let gw = Home::init("gateway", "gateway:main", "");
    let d = gw.start();
    (gw, d)
}

/// `outpost enroll-token create` on the gateway host: the token text (only it on stdout).
pub fn make_token(gw: &Home, args: &[&str]) -> String {
    let mut a = vec!["enroll-token", "create"];
    a.extend_from_slice(args);
    let o = gw.cli(&a);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    assert_eq!(out.lines().count(), 1, "only the token on stdout: {out}");
    out.trim().to_string()
}

/// A node (its keys made by `init`) whose config names only the gateway's URL and a
/// token file: no gateway id, nothing trusted.
pub fn enrolling_node(id: &str, gw_url: &str, token: &str) -> (Home, PathBuf) {
    let home = Home::init("node", id, "");
    let file = home.dir.path().join("enroll.token");
    std::fs::write(&file, token).unwrap();
    let d = home.dir.path().join("outpost.d");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("60-enroll.toml"),
        format!(
            "[upstream]\nurl = \"{gw_url}\"\nenroll_token_file = \"{}\"\npoll_wait_s = 5\n",
            file.display()
        ),
    )
    .unwrap();
    (home, file)
}

async fn status(d: &Daemon) -> Value {
    http()
        .get(d.url("/v1/status"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Wait until the node's enrollment is `state`; returns the enrollment JSON.
pub async fn enrollment_becomes(d: &Daemon, state: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    loop {
        let v = status(d).await;
        let e = v["upstream"]["enrollment"].clone();
        if e["state"] == state {
            return e;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "enrollment never became {state}: {v}\n{}",
            d.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Wait until the node's status says its gateway refused it as retired.
async fn refused_as_revoked(d: &Daemon) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let v = status(d).await;
        if v["upstream"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("node_revoked"))
        {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub fn gw_url(d: &Daemon) -> String {
    format!("http://{}", d.addr)
}

/// `outpost command` to `node`, then wait until the gateway says it was delivered.
pub async fn command_is_delivered(gw: &Home, gwd: &Daemon, node: &str) {
    let o = gw.cli(&["command", node, "ping", "--body", "{}"]);
    assert!(o.status.success(), "{}", text(&o));
    let id = String::from_utf8(o.stdout).unwrap().trim().to_string();
    let token = gw.token("gateway:main", &["read"], "10m");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let v: Value = http()
            .get(gwd.url(&format!("/v1/messages/{id}")))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["state"] == "delivered" {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{id} for {node} never delivered: {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `outpost audit verify` on the gateway host passes; the events of its own log, in
/// order (`event detail` per entry).
fn gateway_audit(gw: &Home) -> Vec<String> {
    let o = gw.cli(&["audit", "verify"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("audit log OK"),
        "{}",
        text(&o)
    );
    let o = gw.cli(&["audit", "export", "--jsonl"]);
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let e: Value = serde_json::from_str(l).unwrap();
            format!(
                "{} {}",
                e["event"].as_str().unwrap(),
                e["detail"].as_str().unwrap_or("")
            )
        })
        .collect()
}

fn token_list(gw: &Home) -> Vec<Value> {
    let o = gw.cli(&["enroll-token", "list", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// One config for every device of the fleet (no `outpost init` per device): the device
/// names itself from SOURCE (its sysroot, `$OUTPOST_SYSROOT`), creates its keys at the
/// first start and enrolls with the token file.
const FLEET_TEMPLATE: &str =
    "[identity]\nnode_id_from = \"SOURCE\"\nnode_id_prefix = \"node:pump-\"\n\
     data_dir = \"DATA\"\n\n[api]\nlisten = \"127.0.0.1:0\"\n\n[upstream]\nurl = \"URL\"\n\
     enroll_token_file = \"TOKEN\"\npoll_wait_s = 5\n";

/// Device `i` of a fleet image: every third names itself from its machine id, its Pi
/// serial or a file. Returns its home and sysroot.
fn fleet_device(i: usize, url: &str, token: &str) -> (Home, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let put = |path: &str, text: String| {
        let p = root.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    let source = match i % 3 {
        0 => {
            put(
                "etc/machine-id",
                format!("{:032x}\n", 0xfeed_0000_u64 + i as u64),
            );
            "machine-id".to_string()
        }
        1 => {
            put(
                "proc/cpuinfo",
                format!("processor\t: 0\nSerial\t\t: 10000000{:08x}\n", i),
            );
            "serial".to_string()
        }
        _ => {
            put("etc/outpost/device-name", format!("station-{i}\n"));
            "file:/etc/outpost/device-name".to_string()
        }
    };
    let token_file = dir.path().join("enroll.token");
    std::fs::write(&token_file, token).unwrap();
    let cfg = FLEET_TEMPLATE
        .replace("SOURCE", &source)
        .replace("DATA", dir.path().join("data").to_str().unwrap())
        .replace("URL", url)
        .replace("TOKEN", token_file.to_str().unwrap());
    std::fs::write(dir.path().join("outpost.toml"), cfg).unwrap();
    let home = Home {
        dir,
        node_id: String::new(),
        db: None,
    };
    (home, root)
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_nodes_from_one_template_enroll_with_one_token_and_the_twenty_first_is_refused() {
    let (gw, gwd) = gateway();
    let url = gw_url(&gwd);
    let token = make_token(
        &gw,
        &[
            "--ttl",
            "1h",
            "--max-uses",
            "20",
            "--node-prefix",
            "node:pump-",
        ],
    );
    let mut nodes = Vec::new();
    for i in 0..20 {
        let (home, root) = fleet_device(i, &url, &token);
        let d = home.start_with_env(&[("OUTPOST_SYSROOT", root.path().to_str().unwrap())]);
        nodes.push((home, root, d));
    }
    let mut ids = std::collections::BTreeSet::new();
    for (_, _, d) in &nodes {
        let e = enrollment_becomes(d, "enrolled").await;
        assert_eq!(e["gateway_id"], "gateway:main", "{e}");
        let id = status(d).await["node_id"].as_str().unwrap().to_string();
        assert!(id.starts_with("node:pump-"), "{id}");
        ids.insert(id);
    }
    assert_eq!(ids.len(), 20, "one image, twenty names: {ids:?}");
    // Each receives commands (its queue is drained by its own sync).
    for id in &ids {
        command_is_delivered(&gw, &gwd, id).await;
    }
    let t = token_list(&gw);
    assert_eq!(t.len(), 1);
    assert_eq!(
        (t[0]["uses"].as_u64(), t[0]["state"].as_str()),
        (Some(20), Some("exhausted"))
    );

    let (extra, root) = fleet_device(20, &url, &token);
    let d = extra.start_with_env(&[("OUTPOST_SYSROOT", root.path().to_str().unwrap())]);
    let e = enrollment_becomes(&d, "refused").await;
    assert_eq!(e["code"], "token_exhausted", "{e}");
    assert!(
        d.log_text().contains("enrollment_refused"),
        "{}",
        d.log_text()
    );
    let o = std::process::Command::new(crate::harness::bin())
        .args(["status", "--config", extra.config().to_str().unwrap()])
        .env("OUTPOST_SYSROOT", root.path())
        .env_remove("OUTPOST_CONFIG")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        shown.contains("enrollment: refused") && shown.contains("token_exhausted"),
        "{}",
        text(&o)
    );
    // A restart of an enrolled node keeps it enrolled: no second use, nothing asked.
    let (home, root, d0) = nodes.remove(0);
    let id0 = status(&d0).await["node_id"].as_str().unwrap().to_string();
    d0.stop();
    let d0 = home.start_with_env(&[("OUTPOST_SYSROOT", root.path().to_str().unwrap())]);
    enrollment_becomes(&d0, "enrolled").await;
    command_is_delivered(&gw, &gwd, &id0).await;
    assert_eq!(token_list(&gw)[0]["uses"], 20);
}

#[tokio::test(flavor = "multi_thread")]
async fn expired_revoked_foreign_and_impersonated_tokens_are_refused_and_said() {
    let (gw, gwd) = gateway();
    let url = gw_url(&gwd);

    let expired = make_token(&gw, &["--ttl", "1s", "--max-uses", "5"]);
    std::thread::sleep(Duration::from_millis(1_500));
    let (n1, _) = enrolling_node("node:a", &url, &expired);
    let d1 = n1.start();

    let revoked = make_token(&gw, &["--max-uses", "5"]);
    let id = token_list(&gw)
        .into_iter()
        .find(|t| t["state"] == "active")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let o = gw.cli(&["enroll-token", "revoke", &id]);
    assert!(o.status.success(), "{}", text(&o));
    let (n2, _) = enrolling_node("node:b", &url, &revoked);
    let d2 = n2.start();

    // The same id at another gateway (other keys): its token names a fingerprint this
    // gateway does not have, so the node refuses it before sending the token.
    let imposter = Home::init("gateway", "gateway:main", "");
    let foreign = make_token(&imposter, &["--max-uses", "5"]);
    let (n3, _) = enrolling_node("node:c", &url, &foreign);
    let d3 = n3.start();
    // A token of another gateway id.
    let other = Home::init("gateway", "gateway:other", "");
    let elsewhere = make_token(&other, &["--max-uses", "5"]);
    let (n4, _) = enrolling_node("node:d", &url, &elsewhere);
    let d4 = n4.start();

    for (d, code) in [
        (&d1, "token_expired"),
        (&d2, "token_revoked"),
        (&d3, "wrong_gateway"),
        (&d4, "wrong_gateway"),
    ] {
        let e = enrollment_becomes(d, "refused").await;
        assert_eq!(e["code"], code, "{e}");
        assert!(e["reason"].as_str().is_some_and(|r| !r.is_empty()), "{e}");
        assert!(d.log_text().contains(code), "{}", d.log_text());
    }
    // Nothing of them is trusted at the gateway.
    let o = gw.cli(&["trust", "ls"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("no trusted peers"),
        "{}",
        text(&o)
    );
}

/// A TCP relay to `upstream` that drops the answer to the first `POST /v1/enroll` (the
/// request reaches the gateway, which commits; the node never hears back).
async fn answer_dropping_relay(upstream: std::net::SocketAddr) -> std::net::SocketAddr {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = l.accept().await else {
                return;
            };
            let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                continue;
            };
            let dropped = dropped.clone();
            tokio::spawn(async move {
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let drop_next = Arc::new(AtomicBool::new(false));
                let flag = drop_next.clone();
                let up = tokio::spawn(async move {
                    let mut buf = vec![0u8; 65536];
                    loop {
                        let n = match cr.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        if buf[..n].starts_with(b"POST /v1/enroll")
                            && !dropped.swap(true, Ordering::SeqCst)
                        {
                            flag.store(true, Ordering::SeqCst);
                        }
                        if sw.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
                let mut buf = vec![0u8; 65536];
                loop {
                    let n = match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if drop_next.load(Ordering::SeqCst) {
                        // The gateway answered (it committed): the node never sees it.
                        break;
                    }
                    if cw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                up.abort();
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_answer_still_ends_enrolled_with_one_use_consumed() {
    let (gw, gwd) = gateway();
    let relay = answer_dropping_relay(gwd.addr).await;
    let token = make_token(&gw, &["--max-uses", "1"]);
    let (node, _) = enrolling_node("node:lost", &format!("http://{relay}"), &token);
    let d = node.start();
    enrollment_becomes(&d, "enrolled").await;
    assert!(
        d.log_text().contains("enrollment_retrying"),
        "the first answer was lost, so the node retried: {}",
        d.log_text()
    );
    let t = token_list(&gw);
    assert_eq!(
        (t[0]["uses"].as_u64(), t[0]["state"].as_str()),
        (Some(1), Some("exhausted"))
    );
    command_is_delivered(&gw, &gwd, "node:lost").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn manual_approval_rejection_and_a_reflashed_devices_rekey() {
    let (gw, gwd) = gateway();
    let url = gw_url(&gwd);
    let manual = make_token(&gw, &["--max-uses", "5", "--approve", "manual"]);
    let (a, _) = enrolling_node("node:a", &url, &manual);
    let da = a.start();
    let (b, _) = enrolling_node("node:b", &url, &manual);
    let db = b.start();
    enrollment_becomes(&da, "pending").await;
    enrollment_becomes(&db, "pending").await;
    let o = gw.cli(&["nodes", "pending"]);
    let pending = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        pending.contains("node:a") && pending.contains("node:b"),
        "{}",
        text(&o)
    );

    let o = gw.cli(&["nodes", "approve", "node:a"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = gw.cli(&["nodes", "reject", "node:b"]);
    assert!(o.status.success(), "{}", text(&o));
    enrollment_becomes(&da, "enrolled").await;
    command_is_delivered(&gw, &gwd, "node:a").await;
    let e = enrollment_becomes(&db, "refused").await;
    assert_eq!(e["code"], "rejected", "{e}");

    // A second device with node:a's id while node:a is connected: refused, not merged.
    let auto = make_token(&gw, &["--max-uses", "5"]);
    let (twin, _) = enrolling_node("node:a", &url, &auto);
    let dt = twin.start();
    let e = enrollment_becomes(&dt, "refused").await;
    assert_eq!(e["code"], "duplicate_node_id", "{e}");
    dt.stop();

    // node:a is reflashed: the old device is gone, a new key asks for the same id.
    da.stop();
    let (reflashed, _) = enrolling_node("node:a", &url, &auto);
    let dr = reflashed.start();
    enrollment_becomes(&dr, "pending").await;
    let o = gw.cli(&["nodes", "pending", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["enrollments"][0]["kind"], "rekey", "{v}");
    let o = gw.cli(&["nodes", "approve", "node:a"]);
    assert!(o.status.success(), "{}", text(&o));
    enrollment_becomes(&dr, "enrolled").await;
    command_is_delivered(&gw, &gwd, "node:a").await;
    // The gateway's own log holds every decision, verifiable on its host.
    let log = gateway_audit(&gw);
    let events: Vec<&str> = log.iter().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(
        events,
        [
            "enroll_token_create",
            "enroll",
            "enroll",
            "approve",
            "reject",
            "enroll_token_create",
            "enroll",
            "approve"
        ],
        "{log:?}"
    );
    assert!(log[6].contains("node:a pending rekey"), "{log:?}");
    // The old key is refused from now on: the old device's data dir starts again.
    let old = a.start();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let v = status(&old).await;
        if v["upstream"]["connected"] == false && v["upstream"]["last_error"].is_string() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        gwd.log_text().contains("node_request_refused"),
        "{}",
        gwd.log_text()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retired_node_is_refused_and_its_queue_is_refused_with_the_reason() {
    let (gw, gwd) = gateway();
    let url = gw_url(&gwd);
    let token = make_token(&gw, &["--max-uses", "5"]);
    let (n, _) = enrolling_node("node:old", &url, &token);
    let d = n.start();
    enrollment_becomes(&d, "enrolled").await;
    command_is_delivered(&gw, &gwd, "node:old").await;
    d.stop();
    // Queued while it is away.
    let mut queued = Vec::new();
    for _ in 0..3 {
        let o = gw.cli(&["command", "node:old", "ping", "--ttl", "1h"]);
        assert!(o.status.success(), "{}", text(&o));
        queued.push(String::from_utf8(o.stdout).unwrap().trim().to_string());
    }
    let o = gw.cli(&["nodes", "revoke", "node:old"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("3 queued messages refused"),
        "{}",
        text(&o)
    );
    let read = gw.token("gateway:main", &["read"], "10m");
    for id in &queued {
        let v: Value = http()
            .get(gwd.url(&format!("/v1/messages/{id}")))
            .bearer_auth(&read)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            (v["state"].as_str(), v["reason"].as_str()),
            (Some("rejected"), Some("node_revoked")),
            "{v}"
        );
    }
    // Each refused message is counted as it leaves the queue.
    let counted = |event: &'static str| {
        let addr = gwd.addr;
        async move {
            let series = format!("outpost_messages_total{{queue=\"to_node\",event=\"{event}\"}}");
            crate::harness::metric(addr, &series).await
        }
    };
    assert_eq!(
        (counted("delivered").await, counted("rejected").await),
        (Some(1.0), Some(3.0)),
        "one ping delivered before, three refused by the retirement"
    );
    // Its next request: 401 node_revoked, said in its status.
    let d = n.start();
    refused_as_revoked(&d).await;
    // An event says so.
    wait_for(
        "node_revoked in the gateway's log",
        Duration::from_secs(5),
        || gwd.log_text().contains("node_revoked").then_some(()),
    );
    let log = gateway_audit(&gw);
    assert!(
        log.last()
            .is_some_and(|l| l.starts_with("revoke node:old revoked 3")),
        "{log:?}"
    );
    // Reflashed (new keys, same id) with a new token: it enrolls again.
    let fresh = make_token(&gw, &["--max-uses", "1"]);
    let (again, _) = enrolling_node("node:old", &url, &fresh);
    d.stop();
    let dn = again.start();
    enrollment_becomes(&dn, "enrolled").await;
    command_is_delivered(&gw, &gwd, "node:old").await;
}

/// The console (issue 28) acts on enrollment: an admin approves a pending device and
/// retires a node from the browser's forms; a read-only session cannot; both decisions
/// land in the gateway's audit log under the operator's token subject.
#[tokio::test(flavor = "multi_thread")]
async fn an_operator_approves_and_retires_from_the_console() {
    use crate::console::sign_in;
    let (gw, gwd) = gateway();
    let url = gw_url(&gwd);
    let manual = make_token(&gw, &["--max-uses", "5", "--approve", "manual"]);
    let (a, _) = enrolling_node("node:a", &url, &manual);
    let da = a.start();
    enrollment_becomes(&da, "pending").await;

    let read = gw.token("gateway:main", &["read"], "1h");
    let (_, reader) = sign_in(&gwd, &read).await;
    let reader = reader.expect("a read session");
    let page = reader.get("/ui").await.text().await.unwrap();
    assert!(page.contains("data-enrollment=\"node:a\""), "{page}");
    assert!(
        !page.contains("/ui/enrollments/node:a/approve"),
        "read-only sees no decision"
    );
    let csrf = reader.csrf().await;
    let r = reader
        .post(
            "/ui/enrollments/node:a/approve",
            Some(&reader.origin),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(r.status(), 403);

    let admin_token = gw.token("gateway:main", &["admin"], "1h");
    let (_, admin) = sign_in(&gwd, &admin_token).await;
    let admin = admin.expect("an admin session");
    let csrf = admin.csrf().await;
    // Without the session's CSRF token: refused, nothing decided.
    let r = admin
        .post(
            "/ui/enrollments/node:a/approve",
            Some(&admin.origin),
            &[("csrf", "forged")],
        )
        .await;
    assert_eq!(r.status(), 403);
    let r = admin
        .post(
            "/ui/enrollments/node:a/approve",
            Some(&admin.origin),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(r.status(), 303, "{}", r.text().await.unwrap());
    enrollment_becomes(&da, "enrolled").await;
    command_is_delivered(&gw, &gwd, "node:a").await;
    let page = admin.get("/ui").await.text().await.unwrap();
    assert!(
        !page.contains("data-enrollment=\"node:a\""),
        "decided: no longer pending"
    );

    let r = admin
        .post(
            "/ui/nodes/node:a/retire",
            Some(&admin.origin),
            &[("csrf", &csrf), ("confirm", "node:a")],
        )
        .await;
    assert_eq!(r.status(), 303, "{}", r.text().await.unwrap());
    refused_as_revoked(&da).await;
    let log = gateway_audit(&gw);
    assert!(
        log.iter().any(|l| l.starts_with("approve node:a")),
        "{log:?}"
    );
    assert!(
        log.iter().any(|l| l.starts_with("revoke node:a")),
        "{log:?}"
    );
}

/// In a real browser (issue 28): a device waiting for manual approval is listed, an
/// admin clicks *Approve*, the row goes and the device enrolls.
#[tokio::test(flavor = "multi_thread")]
async fn in_a_browser_an_admin_approves_a_pending_enrollment() {
    use fantoccini::Locator::Css;
    let Some(b) = crate::browser::start("enrollment approval browser test").await else {
        return;
    };
    let (gw, gwd) = gateway();
    let url = gw_url(&gwd);
    let manual = make_token(&gw, &["--max-uses", "5", "--approve", "manual"]);
    let (pump, _) = enrolling_node("node:pump-7", &url, &manual);
    let dp = pump.start();
    enrollment_becomes(&dp, "pending").await;

    let admin = gw.token("gateway:main", &["admin"], "1h");
    let c = &b.client;
    b.sign_in(&gwd.url(""), &admin).await;
    let row = r#"tr[data-enrollment="node:pump-7"]"#;
    assert_eq!(b.attr(row, "data-kind").await.as_deref(), Some("new"));
    b.screenshot("console-fleet-pending.png").await;
    c.find(Css(&format!("{row} button[value=approve]")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait_for("the decision's notice", 20, || async {
        let html = c.source().await.ok()?;
        (html.contains("node:pump-7 is enrolled")
            && !html.contains("data-enrollment=\"node:pump-7\""))
        .then_some(())
    })
    .await;
    enrollment_becomes(&dp, "enrolled").await;
    command_is_delivered(&gw, &gwd, "node:pump-7").await;
    b.close().await;
}
