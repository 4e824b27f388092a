//! `cargo bench --bench sync`: the whole node ↔ gateway path, as users feel it.
//!
//! Real processes: the release `outpost` binary as a gateway and as a node, each on its
//! own temp dir with a durable SQLite store, talking over loopback. Measured:
//!
//! - gateway enqueue over HTTP (`POST /v1/commands`, 512-byte bodies, each durable
//!   before its 202) at 1 and 64 concurrent clients, from a native load generator;
//! - drain: 10,000 commands queued while the node is stopped, then the node starts;
//!   time until the gateway's queue for it is empty;
//! - upload: 10,000 `TASK_RESULT`s queued in the node's outbox while the gateway is
//!   stopped, then the gateway starts; time until the node's outbox is empty;
//! - per side and phase: CPU seconds (utime + stime from /proc), bytes written to
//!   storage (`write_bytes` from /proc/<pid>/io), peak RSS (`VmHWM`);
//! - the crypto ceiling: what each message needs cryptographically (seal + sign at the
//!   gateway, verify + HPKE open at the node) on all cores, in this process.
//!
//! `OUTPOST_BENCH_SYNC_N` overrides the 10,000. The load generator shares the machine's
//! cores with both daemons; the numbers are for this machine only.
//!
//! `OUTPOST_BENCH_PG_URL=postgres://…` (an empty database) runs the gateway on
//! PostgreSQL instead, and `OUTPOST_BENCH_REPLICAS=2` with it runs two gateway replicas
//! on that database: the enqueue load is spread over both, the node lists both;
//! `OUTPOST_BENCH_PG_POOL` sets `store.postgres_pool` (default 16). Bytes
//! written are then the gateway processes' own (PostgreSQL's writes are not counted);
//! `scripts/bench-pg.sh` runs all three set-ups alternately on a throw-away cluster.

#![allow(clippy::disallowed_methods)] // benchmarks read the clock directly

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use outpost::envelope::TrustStore;
use outpost::envelope::{open, seal, IdentityDocument, Keys, OpenContext, Rights, SealParams};

/// The binary under test: this build's, or `OUTPOST_BIN` (e.g. a build with symbols,
/// for `perf record`).
fn outpost() -> String {
    std::env::var("OUTPOST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_outpost").to_string())
}

fn run(args: &[&str], stdin: Option<&[u8]>) -> String {
    use std::io::Write;
    let mut c = Command::new(outpost())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn outpost");
    if let Some(b) = stdin {
        c.stdin.take().unwrap().write_all(b).unwrap();
    }
    let o = c.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "outpost {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

struct Home {
    _dir: tempfile::TempDir,
    cfg: PathBuf,
    data: PathBuf,
}

impl Home {
    fn init(role: &str, id: &str, listen: &str) -> Home {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let cfg = dir.path().join("outpost.toml");
        run(
            &[
                "init",
                "--role",
                role,
                "--node-id",
                id,
                "--data-dir",
                data.to_str().unwrap(),
                "--config",
                cfg.to_str().unwrap(),
                "--listen",
                listen,
            ],
            None,
        );
        Home {
            _dir: dir,
            cfg,
            data,
        }
    }

    fn dropin(&self, toml: &str) {
        self.dropin_named("50-bench.toml", toml);
    }

    fn dropin_named(&self, name: &str, toml: &str) {
        let d = self.cfg.parent().unwrap().join("outpost.d");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(name), toml).unwrap();
    }

    fn cli(&self, args: &[&str], stdin: Option<&[u8]>) -> String {
        let mut a = args.to_vec();
        a.extend(["--config", self.cfg.to_str().unwrap()]);
        run(&a, stdin)
    }

    fn start(&self) -> Daemon {
        let addr_file = self.data.join("api.addr");
        let _ = std::fs::remove_file(&addr_file);
        let child = Command::new(outpost())
            .args(["run", "--config", self.cfg.to_str().unwrap()])
            .env("OUTPOST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start outpost");
        // Owned by the Daemon from here: killed and reaped on drop, also on a panic.
        let mut d = Daemon {
            child,
            addr: String::new(),
        };
        let t0 = Instant::now();
        loop {
            if let Ok(s) = std::fs::read_to_string(&addr_file) {
                if let Ok(a) = s.trim().parse::<std::net::SocketAddr>() {
                    d.addr = a.to_string();
                    return d;
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "daemon did not start"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

struct Daemon {
    child: Child,
    addr: String,
}

impl Daemon {
    fn pid(&self) -> u32 {
        self.child.id()
    }
    fn stop(mut self) {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What /proc says about a process: CPU seconds, bytes written to storage, peak RSS.
#[derive(Clone, Copy, Default)]
struct Usage {
    cpu_s: f64,
    write_bytes: u64,
    hwm_kib: u64,
}

fn usage(pid: u32) -> Usage {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at ") ".
    let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
    let cpu_s = (ticks(11) + ticks(12)) / tick;
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    let write_bytes = io
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let hwm_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    Usage {
        cpu_s,
        write_bytes,
        hwm_kib,
    }
}

/// The gateway replicas together: CPU and bytes summed, the largest peak RSS.
fn usage_all(pids: &[u32]) -> Usage {
    let mut u = Usage {
        cpu_s: 0.0,
        write_bytes: 0,
        hwm_kib: 0,
    };
    for p in pids {
        let one = usage(*p);
        u.cpu_s += one.cpu_s;
        u.write_bytes += one.write_bytes;
        u.hwm_kib = u.hwm_kib.max(one.hwm_kib);
    }
    u
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One keep-alive HTTP/1.1 connection spoken by hand, so the load generator costs the
/// shared cores as little as a client can.
struct Conn {
    stream: tokio::net::TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    async fn open(addr: &str) -> Conn {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Conn {
            stream,
            buf: Vec::with_capacity(4096),
        }
    }

    async fn call(&mut self, req: &[u8]) -> (u16, Vec<u8>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        self.stream.write_all(req).await.unwrap();
        self.buf.clear();
        loop {
            let mut chunk = [0u8; 8192];
            let n = self.stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                let head = std::str::from_utf8(&self.buf[..end]).unwrap().to_string();
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                while self.buf.len() < end + 4 + len {
                    let n = self.stream.read(&mut chunk).await.unwrap();
                    assert!(n > 0, "server closed the connection");
                    self.buf.extend_from_slice(&chunk[..n]);
                }
                let status = head[9..12].parse().unwrap();
                return (status, self.buf[end + 4..end + 4 + len].to_vec());
            }
        }
    }
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

fn post(path: &str, token: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nhost: bench\r\nauthorization: Bearer {token}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn get(path: &str, token: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nhost: bench\r\nauthorization: Bearer {token}\r\n\r\n")
        .into_bytes()
}

/// Sends `n` requests made by `make(i)` over `clients` connections; returns the rate.
async fn load(
    addrs: &[String],
    clients: usize,
    n: usize,
    make: Arc<dyn Fn(usize) -> Vec<u8> + Send + Sync>,
    ok: u16,
) -> f64 {
    let next = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for k in 0..clients {
        let (next, make, addr) = (next.clone(), make.clone(), addrs[k % addrs.len()].clone());
        tasks.push(tokio::spawn(async move {
            let mut c = Conn::open(&addr).await;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return;
                }
                let (st, body) = c.call(&make(i)).await;
                assert_eq!(st, ok, "{}", String::from_utf8_lossy(&body));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    n as f64 / t0.elapsed().as_secs_f64()
}

/// Polls `probe` every 10 ms until it answers true; returns the time it took.
async fn until(what: &str, limit: Duration, mut probe: impl AsyncFnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    loop {
        if probe().await {
            return t0.elapsed();
        }
        assert!(t0.elapsed() < limit, "{what}: not done after {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn json(b: &[u8]) -> serde_json::Value {
    serde_json::from_slice(b).unwrap_or(serde_json::Value::Null)
}

/// CPU time of the calling thread.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux supports.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU µs per message of what a message needs cryptographically (measured on all
/// cores at once, in thread CPU time).
fn crypto_ceiling(n: usize) -> (f64, f64) {
    let gw = Keys::generate();
    let node = Keys::generate();
    let gw_doc = IdentityDocument::new("gateway:main", "gateway", &gw, "2026-01-01T00:00:00Z");
    let node_doc = IdentityDocument::new("node:b1", "node", &node, "2026-01-01T00:00:00Z");
    let mut trust = TrustStore::new();
    trust
        .add(
            gw_doc,
            Rights {
                send: true,
                issue: true,
            },
        )
        .unwrap();
    let body =
        serde_json::to_vec(&serde_json::json!({"command_type": "bench", "data": "x".repeat(480)}))
            .unwrap();
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let now = 1_790_000_000_000u64;
    let per = n / threads;
    // Seal + sign (the gateway's part), all cores; CPU time per thread, so a busy
    // machine does not inflate it.
    let sealed: Vec<(Vec<Vec<u8>>, u64)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (gw, node_doc, body) = (&gw, &node_doc, &body);
                s.spawn(move || {
                    let c0 = thread_cpu_ns();
                    let out: Vec<Vec<u8>> = (0..per)
                        .map(|i| {
                            let p = SealParams {
                                message_id: format!("m-{t}-{i}"),
                                created_at_ms: now,
                                expires_at_ms: now + 3_600_000,
                                payload_type: "COMMAND".into(),
                                priority: 0,
                            };
                            seal(
                                gw,
                                "gateway:main",
                                node_doc,
                                &p,
                                body,
                                &mut rand_core::OsRng,
                            )
                            .unwrap()
                            .to_json()
                        })
                        .collect();
                    (out, thread_cpu_ns() - c0)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let msgs = (per * threads) as f64;
    let seal_us = sealed.iter().map(|(_, ns)| *ns as f64).sum::<f64>() / 1e3 / msgs;
    // Verify + open (the node's part), all cores.
    let open_ns: u64 = std::thread::scope(|s| {
        let hs: Vec<_> = sealed
            .iter()
            .map(|(envs, _)| {
                let (node, trust) = (&node, &trust);
                s.spawn(move || {
                    let c0 = thread_cpu_ns();
                    for e in envs {
                        let ctx = OpenContext {
                            me: "node:b1",
                            keys: node,
                            previous_keys: None,
                            trust,
                            now_ms: now,
                            skew_ms: 60_000,
                            max_bytes: 1 << 20,
                            max_ttl_ms: 86_400_000,
                            pruned_ahead: None,
                        };
                        open(e, &ctx, &|_, _| false).unwrap();
                    }
                    thread_cpu_ns() - c0
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let open_us = open_ns as f64 / 1e3 / msgs;
    (seal_us, open_us)
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

fn main() {
    let n: usize = std::env::var("OUTPOST_BENCH_SYNC_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let n1 = (n / 10).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    let pg_url = std::env::var("OUTPOST_BENCH_PG_URL").ok();
    let replicas: usize = match &pg_url {
        Some(_) => std::env::var("OUTPOST_BENCH_REPLICAS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1)
            .clamp(1, 4),
        None => 1,
    };
    let gw_ports: Vec<u16> = (0..replicas).map(|_| free_port()).collect();
    let gw = Home::init(
        "gateway",
        "gateway:main",
        &format!("127.0.0.1:{}", gw_ports[0]),
    );
    let node = Home::init("node", "node:b1", "127.0.0.1:0");
    gw.dropin("[queue]\nmax_messages_per_recipient = 100000\n");
    if let Some(url) = &pg_url {
        gw.dropin_named(
            "40-store.toml",
            &format!(
                "[store]\nengine = \"postgres\"\npostgres_url = \"{url}\"\n{}",
                std::env::var("OUTPOST_BENCH_PG_POOL")
                    .map(|n| format!("postgres_pool = {n}\n"))
                    .unwrap_or_default()
            ),
        );
    }
    let urls: Vec<String> = gw_ports
        .iter()
        .map(|p| format!("\"http://127.0.0.1:{p}\""))
        .collect();
    node.dropin(&format!(
        "[upstream]\nurls = [{}]\ngateway_id = \"gateway:main\"\npoll_wait_s = 25\n\n[queue]\nmax_messages_per_recipient = 100000\n",
        urls.join(", ")
    ));
    let node_id = node.cli(&["identity", "--json"], None);
    gw.cli(&["trust", "add", "-", "--send"], Some(node_id.as_bytes()));
    // Further replicas: the same identity (a copy of the data dir) and database.
    let mut gws = vec![gw];
    for p in &gw_ports[1..] {
        let r = Home::init("gateway", "gateway:main", &format!("127.0.0.1:{p}"));
        std::fs::remove_dir_all(&r.data).unwrap();
        copy_dir(&gws[0].data, &r.data);
        for f in ["40-store.toml", "50-bench.toml"] {
            let from = gws[0].cfg.parent().unwrap().join("outpost.d").join(f);
            r.dropin_named(f, &std::fs::read_to_string(from).unwrap());
        }
        gws.push(r);
    }
    let gw = &gws[0];
    let gw_id = gw.cli(&["identity", "--json"], None);
    node.cli(
        &["trust", "add", "-", "--send", "--issue"],
        Some(gw_id.as_bytes()),
    );
    let gw_admin = gw
        .cli(
            &[
                "token",
                "issue",
                "--aud",
                "gateway:main",
                "--scope",
                "admin",
                "--ttl",
                "2h",
            ],
            None,
        )
        .trim()
        .to_string();
    let node_admin = node
        .cli(
            &[
                "token", "issue", "--aud", "node:b1", "--scope", "admin", "--ttl", "2h",
            ],
            None,
        )
        .trim()
        .to_string();
    let data = "x".repeat(480);

    // --- Gateway enqueue, node stopped: these messages are the drain's backlog.
    let gs: Vec<Daemon> = gws.iter().map(Home::start).collect();
    let g = &gs[0];
    let gw_addr = g.addr.clone();
    let gw_addrs: Vec<String> = gs.iter().map(|d| d.addr.clone()).collect();
    let pids: Vec<u32> = gs.iter().map(Daemon::pid).collect();
    let before = usage_all(&pids);
    let cmd = {
        let (tok, data) = (gw_admin.clone(), data.clone());
        Arc::new(move |i: usize| {
            post(
                "/v1/commands",
                &tok,
                &format!(
                    r#"{{"target":{{"node_id":"node:b1"}},"command_type":"bench","body":{{"i":{i},"data":"{data}"}}}}"#
                ),
            )
        }) as Arc<dyn Fn(usize) -> Vec<u8> + Send + Sync>
    };
    let rate1 = rt.block_on(load(&gw_addrs[..1], 1, n1, cmd.clone(), 202));
    let rate64 = rt.block_on(load(&gw_addrs, 64, n - n1, cmd, 202));
    let after = usage_all(&pids);
    let enq_cpu_ms = (after.cpu_s - before.cpu_s) * 1000.0 / n as f64 * 1000.0;
    let enq_bytes = (after.write_bytes - before.write_bytes) as f64 / n as f64;

    // --- Drain: the node starts with n commands waiting for it.
    let depth = |addr: String, tok: String| async move {
        let mut c = Conn::open(&addr).await;
        let (_, b) = c.call(&get("/v1/nodes", &tok)).await;
        json(&b)["nodes"][0]["queue_depth"]
            .as_u64()
            .unwrap_or(u64::MAX)
    };
    let gw_before = usage_all(&pids);
    let t0 = Instant::now();
    let nd = node.start();
    let node_pid = nd.pid();
    eprintln!("pids: gateway {pids:?} node {node_pid}");
    let drain = rt
        .block_on(until("drain", Duration::from_secs(600), async || {
            depth(gw_addr.clone(), gw_admin.clone()).await == 0
        }))
        .max(t0.elapsed());
    let node_drain = usage(node_pid);
    let gw_drain = usage_all(&pids);

    // --- Upload: gateway stopped, n results queued in the node's outbox.
    for g in gs {
        g.stop();
    }
    let node_addr = nd.addr.clone();
    let res = {
        let (tok, data) = (node_admin.clone(), data.clone());
        Arc::new(move |i: usize| {
            post(
                "/v1/outbox",
                &tok,
                &format!(
                    r#"{{"to":"gateway:main","payload_type":"TASK_RESULT","payload":{{"job_id":"j{i}","ok":true,"evidence":null,"result":{{"data":"{data}"}}}}}}"#
                ),
            )
        }) as Arc<dyn Fn(usize) -> Vec<u8> + Send + Sync>
    };
    let node_before_fill = usage(node_pid);
    let outbox_rate = rt.block_on(load(std::slice::from_ref(&node_addr), 64, n, res, 202));
    let node_after_fill = usage(node_pid);
    let outbox_depth = |addr: String| async move {
        let mut c = Conn::open(&addr).await;
        let (_, b) = c.call(&get("/v1/status", "")).await;
        json(&b)["queues"]
            .as_array()
            .map(|qs| {
                qs.iter()
                    .filter(|q| q["queue"] == "outbox")
                    .map(|q| q["depth"].as_u64().unwrap_or(0))
                    .sum::<u64>()
            })
            .unwrap_or(u64::MAX)
    };
    let t0 = Instant::now();
    let g2s: Vec<Daemon> = gws.iter().map(Home::start).collect();
    let pids2: Vec<u32> = g2s.iter().map(Daemon::pid).collect();
    // The node reconnects on its backoff schedule (the gateway was down): the transfer
    // itself is timed from the first upload it saw to the last.
    let mut first: Option<Instant> = None;
    let upload = rt
        .block_on(until("upload", Duration::from_secs(600), async || {
            let d = outbox_depth(node_addr.clone()).await;
            if d < n as u64 && first.is_none() {
                first = Some(Instant::now());
            }
            d == 0
        }))
        .max(t0.elapsed());
    let transfer = first.map(|f| f.elapsed()).unwrap_or(upload);
    let node_up = usage(node_pid);
    let gw_up = usage_all(&pids2);
    nd.stop();
    for g in g2s {
        g.stop();
    }

    let (seal_us, open_us) = crypto_ceiling(4_000);

    let per_k = |cpu: f64| cpu * 1000.0 / n as f64;
    match &pg_url {
        None => println!(
            "sync bench: n = {n} messages of 512 B, both sides durable (SQLite, fsync per commit)"
        ),
        Some(_) => println!(
            "sync bench: n = {n} messages of 512 B; gateway on PostgreSQL ({replicas} replica(s), commit = durable), node on SQLite (fsync per commit)"
        ),
    }
    println!("gateway enqueue, 1 client:   {rate1:>9.0} commands/s ({n1} commands)");
    println!(
        "gateway enqueue, 64 clients: {rate64:>9.0} commands/s ({} commands)",
        n - n1
    );
    println!(
        "  gateway CPU per message {enq_cpu_ms:.0} µs; bytes written per message {enq_bytes:.0}"
    );
    println!(
        "drain {n} gateway → node: {:.2} s (from node start until the gateway's queue is empty)",
        drain.as_secs_f64()
    );
    println!(
        "  node: {:.2} CPU s ({:.3} s per 1,000); wrote {:.1} MiB ({:.0} B/msg); peak RSS {} KiB",
        node_drain.cpu_s,
        per_k(node_drain.cpu_s),
        mib(node_drain.write_bytes),
        node_drain.write_bytes as f64 / n as f64,
        node_drain.hwm_kib
    );
    println!(
        "  gateway: {:.2} CPU s ({:.3} s per 1,000); wrote {:.1} MiB; peak RSS {} KiB",
        gw_drain.cpu_s - gw_before.cpu_s,
        per_k(gw_drain.cpu_s - gw_before.cpu_s),
        mib(gw_drain.write_bytes - gw_before.write_bytes),
        gw_drain.hwm_kib
    );
    println!(
        "node outbox fill, 64 clients: {outbox_rate:.0} messages/s (node CPU {:.0} µs/msg)",
        (node_after_fill.cpu_s - node_before_fill.cpu_s) * 1e6 / n as f64
    );
    println!(
        "upload {n} node → gateway: {:.2} s from the first upload until the node's outbox is empty ({:.2} s from gateway start, the node's reconnect backoff included)",
        transfer.as_secs_f64(),
        upload.as_secs_f64()
    );
    println!(
        "  node: {:.2} CPU s ({:.3} s per 1,000); wrote {:.1} MiB; peak RSS {} KiB",
        node_up.cpu_s - node_after_fill.cpu_s,
        per_k(node_up.cpu_s - node_after_fill.cpu_s),
        mib(node_up.write_bytes - node_after_fill.write_bytes),
        node_up.hwm_kib
    );
    println!(
        "  gateway: {:.2} CPU s ({:.3} s per 1,000); wrote {:.1} MiB ({:.0} B/msg); peak RSS {} KiB",
        gw_up.cpu_s,
        per_k(gw_up.cpu_s),
        mib(gw_up.write_bytes),
        gw_up.write_bytes as f64 / n as f64,
        gw_up.hwm_kib
    );
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2) as f64;
    println!(
        "crypto ceiling: seal+sign {seal_us:.0} µs CPU/msg ({:.0} µs/msg on {cores} cores); verify+open {open_us:.0} µs CPU/msg ({:.0} µs/msg on {cores} cores)",
        seal_us / cores,
        open_us / cores
    );
    println!(
        "  node CPU per message in the drain = {:.2}× verify+open; gateway CPU per enqueued command = {:.2}× seal+sign",
        node_drain.cpu_s * 1e6 / n as f64 / open_us,
        enq_cpu_ms / seal_us
    );
}
