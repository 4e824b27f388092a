//! `cargo bench --bench console`: the operator's console (`/ui`) on a gateway with a
//! fleet of 2,000 enrolled nodes — how long the gateway takes to answer the fleet page
//! (target ≤ 200 ms) and how long a real headless chromium takes to load it (target
//! ≤ 1 s). A measurement, not a test: it prints the spread of several runs and fails
//! only if something does not work at all.
//!
//! The gateway is the `outpost` binary (`init --role gateway` + `run`, temp dir, port
//! 0, the embedded store). The nodes are simulated here: each has its own identity
//! (`Keys::generate`), all are enrolled with one `outpost trust add -` (one document a
//! line); a quarter of them make one signed pull (so they are online, with a last-seen
//! time) and 200 get a queued command, so the table has every kind of row.
//!
//! Environment: `OUTPOST_BIN` (the binary; default this build's), `OUTPOST_CONSOLE_NODES`
//! [2000], `OUTPOST_CONSOLE_RUNS` [20] server-side and [10] browser runs per URL.
//! The browser part needs Debian's `chromium` and `chromium-driver`; without them it
//! says so and measures only the server.

#![allow(clippy::disallowed_methods)] // a benchmark times with the wall clock

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use outpost::envelope::{sign_request, IdentityDocument, Keys};

/// What `tests/it/browser.rs` needs of the integration harness.
mod harness {
    pub fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }
    pub fn skipped(what: &str, why: &str) {
        eprintln!("SKIPPED {what}: {why}");
    }
}

#[path = "../tests/it/browser.rs"]
mod browser;

fn outpost() -> String {
    std::env::var("OUTPOST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_outpost").to_string())
}

fn env_or(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cli(cfg: &Path, args: &[&str], stdin: Option<&[u8]>) -> String {
    use std::io::Write;
    let mut c = Command::new(outpost())
        .args(args)
        .args(["--config", cfg.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn outpost");
    let mut input = c.stdin.take().unwrap();
    if let Some(b) = stdin {
        input.write_all(b).unwrap();
    }
    drop(input);
    let o = c.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "outpost {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// min / median / p90 / max of `ms`, in ms.
fn spread(ms: &mut [f64]) -> String {
    ms.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    format!(
        "n={} min {:.1} · median {:.1} · p90 {:.1} · max {:.1} ms",
        ms.len(),
        at(0.0),
        at(0.5),
        at(0.9),
        at(1.0)
    )
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// The session cookie of a sign-in with `token` over plain HTTP.
async fn sign_in(base: &str, token: &str) -> String {
    let c = client();
    let r = c.get(format!("{base}/ui/login")).send().await.unwrap();
    let nonce_cookie = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("outpost_login="))
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let html = r.text().await.unwrap();
    let at = html.find("name=\"login_csrf\" value=\"").unwrap() + 25;
    let nonce = &html[at..at + 64];
    let r = c
        .post(format!("{base}/ui/login"))
        .header("cookie", nonce_cookie)
        .header("origin", base)
        .form(&[("token", token), ("login_csrf", nonce)])
        .send()
        .await
        .unwrap();
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("outpost_session="))
        .expect("signed in")
        .split(';')
        .next()
        .unwrap()
        .to_string()
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let nodes = env_or("OUTPOST_CONSOLE_NODES", 2000);
    let runs = env_or("OUTPOST_CONSOLE_RUNS", 20);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    let data = dir.path().join("data");
    Command::new(outpost())
        .args(["init", "--role", "gateway", "--node-id", "gateway:main"])
        .args(["--data-dir", data.to_str().unwrap()])
        .args(["--config", cfg.to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();

    // The fleet, enrolled in one write.
    let t = Instant::now();
    let fleet: Vec<(String, Keys)> = (0..nodes)
        .map(|i| (format!("node:sim{i:05}"), Keys::generate()))
        .collect();
    let docs: String = fleet
        .iter()
        .map(|(id, k)| {
            let d = IdentityDocument::new(id, "node", k, "2026-01-01T00:00:00Z");
            serde_json::to_string(&d).unwrap() + "\n"
        })
        .collect();
    cli(
        &cfg,
        &["trust", "add", "-", "--send"],
        Some(docs.as_bytes()),
    );
    println!(
        "enrolled {nodes} nodes in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let admin = cli(
        &cfg,
        &[
            "token",
            "issue",
            "--aud",
            "gateway:main",
            "--scope",
            "admin",
            "--ttl",
            "1h",
        ],
        None,
    )
    .trim()
    .to_string();

    let log = std::fs::File::create(dir.path().join("gateway.log")).unwrap();
    let mut gw = Command::new(outpost())
        .args(["run", "--config", cfg.to_str().unwrap()])
        .env("OUTPOST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let addr_file = data.join("api.addr");
    let t = Instant::now();
    let addr = loop {
        if let Ok(a) = std::fs::read_to_string(&addr_file) {
            if !a.trim().is_empty() {
                break a.trim().to_string();
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "gateway did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let base = format!("http://{addr}");
    let http = client();

    // A quarter of the nodes call in once; 200 get a command each.
    let now = || outpost::clock::Clock::now_ms(&outpost::clock::SystemClock);
    for (id, keys) in fleet.iter().step_by(4) {
        let pq = format!("/v1/nodes/{id}/pull?wait_s=0");
        let ts = now();
        let sig = sign_request(keys, id, "GET", &pq, ts, b"");
        let r = http
            .get(format!("{base}{pq}"))
            .header("Outpost-Node", id)
            .header("Outpost-Timestamp", ts.to_string())
            .header("Outpost-Signature", sig)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "pull: {}", r.status());
    }
    for (id, _) in fleet.iter().skip(1).step_by(10).take(200) {
        let r = http
            .post(format!("{base}/v1/commands"))
            .bearer_auth(&admin)
            .json(&serde_json::json!({
                "target": {"node_id": id}, "command_type": "setpoint", "body": {"v": 1}
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
    }

    let cookie = sign_in(&base, &admin).await;
    println!("gateway: {base}, {nodes} nodes, {} runs per URL", runs);
    println!("server answer (request sent → whole body read, keep-alive client):");
    for path in [
        "/ui",
        "/ui?sort=queue&dir=desc&page=5",
        "/ui?q=sim01",
        "/ui/fleet/rows",
        "/ui/nodes/node:sim00001",
    ] {
        let mut ms = Vec::new();
        let mut bytes = 0;
        for _ in 0..runs + 2 {
            let t = Instant::now();
            let r = http
                .get(format!("{base}{path}"))
                .header("cookie", &cookie)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{path}");
            bytes = r.bytes().await.unwrap().len();
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        let mut ms = ms.split_off(2); // the first two warm the connection and caches
        println!(
            "  GET {path:<32} {} ({} KiB)",
            spread(&mut ms),
            bytes / 1024
        );
    }

    if let Some(b) = browser::start("console browser benchmark").await {
        use fantoccini::Locator::Css;
        let c = &b.client;
        c.goto(&format!("{base}/ui/login")).await.unwrap();
        c.find(Css("#token"))
            .await
            .unwrap()
            .send_keys(&admin)
            .await
            .unwrap();
        c.find(Css("form button[type=submit]"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        b.wait_for_page("/ui").await;
        let browser_runs = runs.min(10);
        println!("browser load (chromium {} headless; navigation start → load event end, from performance.timing; and the WebDriver navigation's wall time):",
            browser_version());
        for path in [
            "/ui",
            "/ui?sort=queue&dir=desc&page=5",
            "/ui/nodes/node:sim00001",
        ] {
            let (mut timing, mut wall) = (Vec::new(), Vec::new());
            for _ in 0..browser_runs + 1 {
                let t = Instant::now();
                c.goto(&format!("{base}{path}")).await.unwrap();
                let w = t.elapsed().as_secs_f64() * 1000.0;
                let v = b
                    .js("var t = performance.timing; return t.loadEventEnd - t.navigationStart;")
                    .await;
                let rows = c
                    .find_all(Css("tr[data-node-id], tr[data-message-id]"))
                    .await
                    .unwrap()
                    .len();
                assert!(rows > 0 || path.contains("nodes"), "{path}: no rows");
                timing.push(v.as_f64().unwrap_or(f64::NAN));
                wall.push(w);
            }
            let mut timing = timing.split_off(1);
            let mut wall = wall.split_off(1);
            println!("  {path:<34} load {}", spread(&mut timing));
            println!("  {:<34} wall {}", "", spread(&mut wall));
        }
        b.close().await;
    }
    let _ = gw.kill();
    let _ = gw.wait();
}

fn browser_version() -> String {
    Command::new("/usr/lib/chromium/chromium")
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}
