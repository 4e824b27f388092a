//! Issue #14 item 3, the denial of service: the gateway must accept nodes from any
//! address, and a client holding more half-open connections than it has file
//! descriptors once took `/healthz` down. Here the gateway runs with the open-file
//! limit of a small unit (1024) while the test holds 2,000 half-open connections, and
//! a real node must keep syncing and `/healthz` must answer within a second throughout.
//! The header timeout is a minute, so what keeps the gateway serving is the connection
//! cap and its eviction, not the timeout.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::{pair, wait_for, Home};
use crate::slow_clients::parse_response;

const HELD: usize = 2000;
const PARTIAL_HEAD: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: x\r\n";

/// Our own open-file limit must fit the held connections (the gateway gets its own).
#[allow(clippy::unnecessary_cast)] // rlim_t is u32 on some 32-bit targets
fn raise_nofile(want: u64) {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain getrlimit/setrlimit on our own process.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl), 0);
        if (rl.rlim_cur as u64) < want {
            assert!(
                rl.rlim_max as u64 >= want,
                "this test needs RLIMIT_NOFILE >= {want} (hard limit is {})",
                rl.rlim_max
            );
            rl.rlim_cur = want as libc::rlim_t;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &rl), 0);
        }
    }
}

/// One request on a fresh connection (`Connection: close`), bounded by `timeout`.
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
    timeout: Duration,
) -> Option<(u16, Value)> {
    let mut s = match TcpStream::connect_timeout(&addr, timeout) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("connect {path}: {e}");
            return None;
        }
    };
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if !body.is_empty() {
        req.push_str("Content-Type: application/json\r\n");
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).ok()?;
    let mut got = Vec::new();
    s.read_to_end(&mut got).ok()?;
    let (st, _, v) = parse_response(&got);
    (st != 0).then_some((st, v))
}

/// The attacker: opens `HELD` connections that each send half a head, and reopens any
/// the gateway closes, until `stop`. About one connection a millisecond: at full speed
/// on a loaded two-core machine the listen backlog overflows and SYNs are dropped,
/// which measures the kernel, not the gateway (and the old gateway fails either way).
fn hold(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    opened: Arc<AtomicUsize>,
    reopened: Arc<AtomicUsize>,
) {
    let open = || {
        std::thread::sleep(Duration::from_millis(1));
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
        // Evicted before it could even write: the sweep below reopens it.
        let _ = s.write_all(PARTIAL_HEAD);
        s.set_nonblocking(true).ok()?;
        Some(s)
    };
    let mut socks: Vec<Option<TcpStream>> = Vec::new();
    while socks.len() < HELD && !stop.load(Ordering::Relaxed) {
        if let Some(s) = open() {
            opened.fetch_add(1, Ordering::Relaxed);
            socks.push(Some(s));
        }
    }
    let mut buf = [0u8; 256];
    while !stop.load(Ordering::Relaxed) {
        for slot in socks.iter_mut() {
            let closed = match slot {
                None => true,
                Some(s) => {
                    !matches!(s.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
                }
            };
            if closed {
                *slot = open();
                reopened.fetch_add(1, Ordering::Relaxed);
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn tail(log: &str) -> &str {
    &log[log.len().saturating_sub(3000)..]
}

#[test]
fn gateway_keeps_serving_nodes_and_healthz_while_2000_half_open_connections_are_held() {
    raise_nofile(HELD as u64 + 1024);
    let gw = Home::init(
        "gateway",
        "gateway:main",
        "[api]\nmax_connections = 512\nheader_timeout_ms = 60000\nbody_timeout_ms = 60000\nidle_timeout_ms = 60000\n",
    );
    let node = Home::init("node", "node:busy", "");
    pair(&gw, &node);
    let admin = gw.token("gateway:main", &["admin"], "1h");
    let g = gw.start_with_nofile(1024);
    let dropin = node.dir.path().join("outpost.d");
    std::fs::create_dir_all(&dropin).unwrap();
    std::fs::write(
        dropin.join("10-upstream.toml"),
        format!(
            "[upstream]\nurl = \"http://{}\"\ngateway_id = \"gateway:main\"\npoll_wait_s = 1\n",
            g.addr
        ),
    )
    .unwrap();
    let _n = node.start();
    let second = Duration::from_secs(1);
    let polling = || {
        let (_, v) = request(g.addr, "GET", "/v1/nodes", Some(&admin), None, second)?;
        (v["nodes"][0]["polling"] == true).then_some(())
    };
    wait_for("the node to poll", Duration::from_secs(30), polling);

    let stop = Arc::new(AtomicBool::new(false));
    let (opened, reopened) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let attacker = {
        let (stop, opened, reopened) = (stop.clone(), opened.clone(), reopened.clone());
        std::thread::spawn(move || hold(g.addr, stop, opened, reopened))
    };
    let healthz = |when: &str| {
        let t = Instant::now();
        let r = request(g.addr, "GET", "/healthz", None, None, second);
        assert!(
            matches!(r, Some((200, _))) && t.elapsed() < second,
            "/healthz {when}: {r:?} after {:?} ({} held); gateway log ends:\n{}",
            t.elapsed(),
            opened.load(Ordering::Relaxed),
            tail(&g.log_text())
        );
    };
    let all_open = Instant::now() + Duration::from_secs(60);
    while opened.load(Ordering::Relaxed) < HELD && Instant::now() < all_open {
        healthz("while the connections open");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Commands queued for the node at the gateway are delivered and answered.
    for i in 0..5 {
        let call = json!({"target": {"node_id": "node:busy"}, "tool_name": "echo",
                          "tool_args": {"i": i}, "job_id": format!("flood-{i}"), "wait_s": 0});
        let (st, v) = request(
            g.addr,
            "POST",
            "/v1/tool_call",
            Some(&admin),
            Some(&call),
            second,
        )
        .expect("tool_call answered");
        assert_eq!(st, 202, "{v}");
        let id = v["message_id"].as_str().unwrap().to_string();
        let path = format!("/v1/messages/{id}");
        wait_for("the node's result", Duration::from_secs(30), || {
            healthz("while the node syncs");
            let (_, m) = request(g.addr, "GET", &path, Some(&admin), None, second)?;
            (m["result"]["result"]["i"] == i).then_some(())
        });
    }
    stop.store(true, Ordering::Relaxed);
    attacker.join().unwrap();
    assert_eq!(opened.load(Ordering::Relaxed), HELD, "all held at once");
    assert!(
        reopened.load(Ordering::Relaxed) > 0,
        "the cap never evicted anything"
    );
    let log = g.log_text();
    assert_eq!(
        log.matches("connection_cap_reached").count(),
        1,
        "one log line per episode: {log}"
    );
}
