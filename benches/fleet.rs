//! `cargo bench --bench fleet`: a fleet of simulated nodes against a real gateway.
//!
//! The gateway is the `outpost` binary (`init --role gateway` + `run`, temp dir, port 0,
//! durable SQLite store), or already-running gateways given in `OUTPOST_FLEET_GATEWAYS`.
//! The nodes are simulated in this process, one tokio runtime: each has its own
//! Ed25519/X25519 identity (`Keys::generate`), is enrolled at the gateway with `outpost
//! trust add`, and speaks the signed node protocol of docs/PROTOCOL.md §5 and §12 over
//! its own keep-alive HTTP/1.1 connection, as the real node's sync loop does: a
//! handshake `pull?wait_s=0&max=500`, flush pulls while `pending_count` says more is
//! queued, then long-polls (`wait_s` 25–30 s, drawn per node), an `ack` of every pulled
//! `message_id` after each batch, and `revocations` at connect and every 60 s. Simulated
//! nodes neither verify nor decrypt envelopes: they ack by id.
//!
//! A producer queues `POST /v1/commands` (bearer token from `outpost token issue`) at a
//! steady rate, each to a random node, over a bounded number of connections. Latency is
//! from just before the POST to the moment the target node's pull answer carrying that
//! `message_id` arrived. A command counts as sent when the gateway answered 2xx (durably
//! queued); as delivered once (later copies are duplicates); as lost if it was not
//! delivered by the end of the grace period.
//!
//! Environment (defaults in brackets):
//!
//! - `OUTPOST_FLEET_NODES` [2000], `OUTPOST_FLEET_RATE` commands/s [500],
//!   `OUTPOST_FLEET_SECS` [60], `OUTPOST_FLEET_CLIENTS` producer connections [16],
//!   `OUTPOST_FLEET_GRACE_S` [30], `OUTPOST_FLEET_WAIT_S` fixed long-poll wait
//!   [each node draws 25..=30]; `OUTPOST_FLEET_IDLE_S` [5]: how long the gateway's
//!   CPU is measured with every long-poll held and no command, before the load (30 or
//!   more includes every node's re-poll);
//! - `OUTPOST_FLEET_GATEWAYS=http://h1:p1,http://h2:p2`: use these gateways (replicas
//!   sharing one state) instead of starting one; nodes are spread round-robin, producer
//!   connections too. Needs `OUTPOST_FLEET_GATEWAY_CONFIG` (a gateway config for `outpost
//!   trust add --config` and `outpost token issue --config`); `OUTPOST_FLEET_GATEWAY_PIDS`
//!   (comma-separated, optional) for their RSS and CPU. Plain HTTP only.
//! - `OUTPOST_FLEET_ENROLL` [`bulk`; `cli`, `none`]: `bulk` enrolls all nodes but the
//!   last with one `outpost trust add` (the documents one per line: one write of the
//!   trust store, embedded or PostgreSQL), then the last with its own call, and reports
//!   how long that one took; `cli` runs one `outpost trust add` per node (2,000 calls
//!   took over 10 minutes on the embedded store: each loads and rewrites the whole
//!   record). Either way enrollment ends before anything is timed.
//!   `token`: the gateway starts first and every node enrolls itself at once with one
//!   enrollment token, retrying as the real node does, while an operator loads the
//!   console's fleet page (`benches/fleet/enroll.rs`): the time until all are enrolled,
//!   every answer by status, the console's p50/p99 during it.
//! - `OUTPOST_FLEET_GATEWAY_TOML`: TOML for a drop-in of the started gateway (e.g.
//!   `[security]` `max_clock_skew_s = 30`); `OUTPOST_FLEET_GATEWAY_LOG` its `OUTPOST_LOG`
//!   [`warn`] (its warn/error lines are counted by `event` in the summary).
//! - `OUTPOST_FLEET_ROLLOUT=1`: after the load, one rollout of a command to every node
//!   (PROTOCOL §17): how long its creation took, when every node had succeeded, and how
//!   long `GET /v1/rollouts/{id}` took while it ran.
//! - `OUTPOST_FLEET_PREFIX`: node ids are `node:<prefix>-00000`, … [`fleet`; against
//!   external gateways `fleet<unix seconds>`, new ids each run, unless
//!   `OUTPOST_FLEET_KEYS_DIR` is set: a running gateway keeps the keys it read for an id,
//!   so fresh keys under old ids are refused].
//! - `OUTPOST_FLEET_KEYS_DIR`: keep each node's keys there (`Keys::save`, one file per
//!   node) and reuse them next run; with `OUTPOST_FLEET_ENROLL=none` a later run against
//!   the same gateways skips enrollment.
//! - `OUTPOST_BIN`: the binary under test (default: this build's).
//!
//! Output: a human summary and one line `FLEET_RESULT {json}` on stdout.

#![allow(clippy::disallowed_methods)] // benchmarks read the clock directly
#![recursion_limit = "256"] // the FLEET_RESULT json! literal

#[path = "fleet/enroll.rs"]
mod enroll;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http_body::Body as _;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use rand::Rng;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use outpost::envelope::{
    sign_request, IdentityDocument, Keys, HEADER_NODE, HEADER_SIGNATURE, HEADER_TIMESTAMP,
};
use outpost::sync::wire::{AckRequest, PullAnswer, Revocations};

/// What the real node asks for per pull (docs/PROTOCOL.md §12.6).
const PULL_MAX: u32 = 500;
/// The real node fetches revocations at connect and every 60 s.
const REVOCATIONS_EVERY: Duration = Duration::from_secs(60);
/// The command type the producer queues (token scope `command:fleet`).
const COMMAND_TYPE: &str = "fleet";

// ---------------------------------------------------------------------------------
// Configuration

fn env_or<T: FromStr>(key: &str, default: T) -> T {
    match std::env::var(key) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{key}={v:?} is not a valid value")),
        _ => default,
    }
}

fn env_list(key: &str) -> Vec<String> {
    std::env::var(key)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Enroll {
    Cli,
    Bulk,
    /// Already enrolled (an earlier run with the same `OUTPOST_FLEET_KEYS_DIR`).
    None,
    /// Every device enrolls itself at once with one token ([`enroll`]).
    Token,
}

struct Cfg {
    nodes: usize,
    rate: f64,
    secs: f64,
    clients: usize,
    grace_s: f64,
    idle_s: f64,
    wait_s: Option<u64>,
    gateways: Vec<String>,
    gateway_config: Option<PathBuf>,
    pids: Vec<u32>,
    enroll: Enroll,
    prefix: String,
    keys_dir: Option<PathBuf>,
}

impl Cfg {
    fn from_env() -> Cfg {
        let gateways = env_list("OUTPOST_FLEET_GATEWAYS");
        let default_enroll = "bulk";
        let enroll = match env_or("OUTPOST_FLEET_ENROLL", default_enroll.to_string()).as_str() {
            "cli" => Enroll::Cli,
            "bulk" => Enroll::Bulk,
            "none" => Enroll::None,
            "token" => Enroll::Token,
            other => panic!("OUTPOST_FLEET_ENROLL={other:?}: cli, bulk, token or none"),
        };
        let wait_s = std::env::var("OUTPOST_FLEET_WAIT_S")
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(|v| v.trim().parse().expect("OUTPOST_FLEET_WAIT_S"));
        let c = Cfg {
            nodes: env_or("OUTPOST_FLEET_NODES", 2000),
            rate: env_or("OUTPOST_FLEET_RATE", 500.0),
            secs: env_or("OUTPOST_FLEET_SECS", 60.0),
            clients: env_or("OUTPOST_FLEET_CLIENTS", 16),
            grace_s: env_or("OUTPOST_FLEET_GRACE_S", 30.0),
            idle_s: env_or("OUTPOST_FLEET_IDLE_S", 5.0),
            wait_s,
            gateways,
            gateway_config: std::env::var("OUTPOST_FLEET_GATEWAY_CONFIG")
                .ok()
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            pids: env_list("OUTPOST_FLEET_GATEWAY_PIDS")
                .iter()
                .map(|p| p.parse().expect("OUTPOST_FLEET_GATEWAY_PIDS: numbers"))
                .collect(),
            enroll,
            prefix: String::new(),
            keys_dir: std::env::var("OUTPOST_FLEET_KEYS_DIR")
                .ok()
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
        };
        // Fresh keys under node ids a running gateway already knows would be refused
        // (a gateway without RELIABILITY F9's fix keeps the old keys), so against
        // external gateways each run gets its own ids unless the keys are kept.
        let default_prefix = if c.gateways.is_empty() || c.keys_dir.is_some() {
            "fleet".to_string()
        } else {
            format!(
                "fleet{}",
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0)
            )
        };
        let mut c = c;
        c.prefix = env_or("OUTPOST_FLEET_PREFIX", default_prefix);
        assert!(
            c.enroll != Enroll::None || c.keys_dir.is_some(),
            "OUTPOST_FLEET_ENROLL=none needs the OUTPOST_FLEET_KEYS_DIR the nodes were enrolled with"
        );
        assert!(c.nodes >= 1 && c.nodes <= 99_999, "1..=99999 nodes");
        assert!(c.rate > 0.0 && c.secs > 0.0 && c.clients >= 1);
        if !c.gateways.is_empty() {
            assert!(
                c.gateway_config.is_some(),
                "OUTPOST_FLEET_GATEWAYS needs OUTPOST_FLEET_GATEWAY_CONFIG (for trust add and token issue)"
            );
        }
        c
    }
}

// ---------------------------------------------------------------------------------
// Processes (the style of benches/sync.rs)

/// The binary under test: this build's, or `OUTPOST_BIN`.
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

/// `outpost <args> --config <cfg>`.
fn cli(cfg: &Path, args: &[&str], stdin: Option<&[u8]>) -> String {
    let mut a = args.to_vec();
    a.extend(["--config", cfg.to_str().unwrap()]);
    run(&a, stdin)
}

struct Home {
    dir: tempfile::TempDir,
    cfg: PathBuf,
    data: PathBuf,
}

impl Home {
    fn init_gateway(id: &str) -> Home {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let cfg = dir.path().join("outpost.toml");
        run(
            &[
                "init",
                "--role",
                "gateway",
                "--node-id",
                id,
                "--data-dir",
                data.to_str().unwrap(),
                "--config",
                cfg.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
            ],
            None,
        );
        Home { dir, cfg, data }
    }

    fn dropin(&self, toml: &str) {
        let d = self.cfg.parent().unwrap().join("outpost.d");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("50-fleet.toml"), toml).unwrap();
    }

    fn start(&self) -> Daemon {
        let addr_file = self.data.join("api.addr");
        let _ = std::fs::remove_file(&addr_file);
        let log = self.dir.path().join("gateway.log");
        let child = Command::new(outpost())
            .args(["run", "--config", self.cfg.to_str().unwrap()])
            .env(
                "OUTPOST_LOG",
                std::env::var("OUTPOST_FLEET_GATEWAY_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .env_remove("JOURNAL_STREAM")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start outpost");
        // Owned by the Daemon from here: killed and reaped on drop, also on a panic.
        let mut d = Daemon {
            child,
            addr: String::new(),
            log,
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
                t0.elapsed() < Duration::from_secs(60),
                "gateway did not start"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

struct Daemon {
    child: Child,
    addr: String,
    log: PathBuf,
}

impl Daemon {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM; how long it took to exit (killed after `limit`), and its exit status.
    fn stop(&mut self, limit: Duration) -> (Duration, String) {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return (t0.elapsed(), st.to_string());
            }
            if t0.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return (t0.elapsed(), "killed after the limit".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------
// /proc

/// CPU seconds (utime + stime) of a process, all threads.
fn cpu_s(pid: u32) -> f64 {
    let (u, s) = cpu_split_s(pid);
    u + s
}

/// (user, kernel) CPU seconds of a process, all threads.
fn cpu_split_s(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at ") ".
    let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
    (ticks(11) / tick, ticks(12) / tick)
}

/// A `kB` line of /proc/<pid>/status (`VmRSS`, `VmHWM`), in KiB; 0 if unreadable.
fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// (idle + iowait, total) jiffies of all CPUs, from /proc/stat.
fn machine_jiffies() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = s
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    // guest and guest_nice (9, 10) are already counted in user and nice.
    (idle, v.iter().take(8).sum())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Raise the soft open-file limit to the hard one (the gateway we start inherits it).
fn raise_nofile() -> (u64, u64) {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 && rl.rlim_cur < rl.rlim_max {
            rl.rlim_cur = rl.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &rl);
        }
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl);
    }
    #[allow(clippy::useless_conversion)]
    (u64::from(rl.rlim_cur), u64::from(rl.rlim_max))
}

/// Samples each process's VmRSS once a second, from the ramp on.
struct RssSampler {
    stop: Arc<AtomicBool>,
    series: Arc<Mutex<Vec<Vec<u64>>>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    fn start(pids: Vec<u32>) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let series = Arc::new(Mutex::new(vec![Vec::new(); pids.len()]));
        let (s, out) = (stop.clone(), series.clone());
        let handle = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut k = 0u32;
            while !s.load(Ordering::Relaxed) {
                let now: Vec<u64> = pids.iter().map(|p| status_kib(*p, "VmRSS")).collect();
                for (v, x) in out.lock().unwrap().iter_mut().zip(now) {
                    v.push(x);
                }
                k += 1;
                std::thread::sleep(
                    (t0 + Duration::from_secs(k.into())).saturating_duration_since(Instant::now()),
                );
            }
        });
        RssSampler {
            stop,
            series,
            handle: Some(handle),
        }
    }

    /// Per process: the samples, one a second.
    fn finish(mut self) -> Vec<Vec<u64>> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        std::mem::take(&mut *self.series.lock().unwrap())
    }
}

// ---------------------------------------------------------------------------------
// HTTP/1.1 client: one hyper connection, kept alive, reopened after an error

struct Endpoint {
    /// What `connect` dials (host:port).
    addr: String,
    /// The `Host` header.
    host: String,
}

impl Endpoint {
    fn parse(url: &str) -> Endpoint {
        let rest = url.strip_prefix("http://").unwrap_or_else(|| {
            panic!("{url}: only http:// gateways are supported by this load generator")
        });
        let hostport = rest.split('/').next().unwrap_or("");
        assert!(!hostport.is_empty(), "{url}: no host");
        let addr = if hostport
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            hostport.to_string()
        } else {
            format!("{hostport}:80")
        };
        Endpoint {
            addr,
            host: hostport.to_string(),
        }
    }
}

struct Conn {
    ep: Arc<Endpoint>,
    tx: Option<http1::SendRequest<String>>,
    connects: Arc<AtomicU64>,
    /// For the detail of a failure: when this connection opened, how many answers it
    /// carried, when the last one ended.
    opened: Instant,
    answers: u64,
    last_answer: Instant,
}

/// Failures described in full on stderr (the summary groups them by kind).
const DETAILED_FAILURES: u64 = 20;
static FAILURES: AtomicU64 = AtomicU64::new(0);

type Answer = (u16, Vec<u8>);

impl Conn {
    fn new(ep: Arc<Endpoint>, connects: Arc<AtomicU64>) -> Conn {
        let now = Instant::now();
        Conn {
            ep,
            tx: None,
            connects,
            opened: now,
            answers: 0,
            last_answer: now,
        }
    }

    async fn connect(&mut self) -> Result<(), String> {
        let tcp = tokio::time::timeout(
            Duration::from_secs(10),
            tokio::net::TcpStream::connect(&self.ep.addr),
        )
        .await
        .map_err(|_| "connect timeout".to_string())?
        .map_err(|e| format!("connect: {}", e.kind()))?;
        let _ = tcp.set_nodelay(true);
        let (tx, conn) = http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        self.connects.fetch_add(1, Ordering::Relaxed);
        self.tx = Some(tx);
        self.opened = Instant::now();
        self.answers = 0;
        self.last_answer = self.opened;
        Ok(())
    }

    /// One request on this connection (opened first if closed); any failure drops the
    /// connection, so the next request opens a new one.
    async fn request(
        &mut self,
        method: &str,
        pq: &str,
        headers: &[(&str, String)],
        body: String,
        limit: Duration,
    ) -> Result<Answer, String> {
        if self.tx.as_ref().is_none_or(|t| t.is_closed()) {
            self.connect().await?;
        }
        let host = &self.ep.host;
        let Some(tx) = self.tx.as_mut() else {
            return Err("not connected".into());
        };
        let r = tokio::time::timeout(limit, async {
            tx.ready().await.map_err(|e| {
                (
                    "connection closed before the request".to_string(),
                    format!("{e:?}"),
                )
            })?;
            let mut b = hyper::Request::builder()
                .method(method)
                .uri(pq)
                .header("host", host.as_str());
            for (k, v) in headers {
                b = b.header(*k, v.as_str());
            }
            let req = b.body(body).map_err(|e| (e.to_string(), String::new()))?;
            let resp = tx.send_request(req).await.map_err(|e| {
                let kind = if e.is_canceled() || e.is_closed() || e.is_incomplete_message() {
                    "connection closed by the gateway".to_string()
                } else {
                    e.to_string()
                };
                (kind, format!("{e:?}"))
            })?;
            let status = resp.status().as_u16();
            let mut body = resp.into_body();
            let mut out = Vec::new();
            while let Some(f) =
                std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
            {
                let f = f.map_err(|e| (format!("body: {e}"), format!("{e:?}")))?;
                if let Ok(d) = f.into_data() {
                    out.extend_from_slice(&d);
                }
            }
            Ok::<_, (String, String)>((status, out))
        })
        .await;
        let (kind, detail) = match r {
            Ok(Ok(a)) => {
                self.answers += 1;
                self.last_answer = Instant::now();
                return Ok(a);
            }
            Ok(Err(e)) => e,
            Err(_) => (
                format!("no answer within {} s", limit.as_secs()),
                String::new(),
            ),
        };
        self.tx = None;
        if FAILURES.fetch_add(1, Ordering::Relaxed) < DETAILED_FAILURES {
            eprintln!(
                "  failure: {method} {pq}: {kind} — connection {:.1} s old, {} answers on it, the last {:.3} s ago; {detail}",
                self.opened.elapsed().as_secs_f64(),
                self.answers,
                self.last_answer.elapsed().as_secs_f64(),
            );
        }
        Err(kind)
    }
}

fn error_code(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------
// What was sent and what arrived

enum Entry {
    /// Queued (2xx), not seen by its node yet.
    Sent {
        t0: Instant,
        node: u32,
    },
    /// Seen by a node before the producer read the POST's answer (a live long-poll is
    /// often faster than the answer), or an id this run never sent.
    Early {
        at: Instant,
        node: u32,
    },
    Done,
}

#[derive(Default)]
struct LedgerInner {
    map: HashMap<String, Entry>,
    lat_us: Vec<u64>,
    duplicates: u64,
    misrouted: u64,
    pending: u64,
}

#[derive(Default)]
struct Ledger(Mutex<LedgerInner>);

impl Ledger {
    fn lock(&self) -> std::sync::MutexGuard<'_, LedgerInner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The gateway answered 2xx with `id` for a command to `node` posted at `t0`.
    fn sent(&self, id: String, t0: Instant, node: u32) {
        let mut guard = self.lock();
        let g = &mut *guard;
        match g.map.get(&id) {
            Some(Entry::Early { at, node: got }) => {
                let (at, got) = (*at, *got);
                g.lat_us
                    .push(at.saturating_duration_since(t0).as_micros() as u64);
                if got != node {
                    g.misrouted += 1;
                }
                g.map.insert(id, Entry::Done);
            }
            Some(_) => panic!("the gateway answered message id {id} twice"),
            None => {
                g.pending += 1;
                g.map.insert(id, Entry::Sent { t0, node });
            }
        }
    }

    /// Node `node` received `id` in a pull answer that arrived at `at`.
    fn received(&self, id: &str, at: Instant, node: u32) {
        let mut guard = self.lock();
        let g = &mut *guard;
        match g.map.get_mut(id) {
            Some(e @ Entry::Sent { .. }) => {
                let Entry::Sent { t0, node: want } = *e else {
                    unreachable!()
                };
                *e = Entry::Done;
                g.pending -= 1;
                g.lat_us
                    .push(at.saturating_duration_since(t0).as_micros() as u64);
                if want != node {
                    g.misrouted += 1;
                }
            }
            Some(Entry::Done) | Some(Entry::Early { .. }) => g.duplicates += 1,
            None => {
                g.map.insert(id.to_string(), Entry::Early { at, node });
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// Shared counters

#[derive(Default)]
struct Stats {
    node_connects: Arc<AtomicU64>,
    producer_connects: Arc<AtomicU64>,
    pulls: AtomicU64,
    long_polls: AtomicU64,
    long_polls_empty: AtomicU64,
    envelopes: AtomicU64,
    acks: AtomicU64,
    revocation_fetches: AtomicU64,
    /// Long-polls sent and not answered yet, as this side sees them.
    holding: AtomicI64,
    errors: Mutex<BTreeMap<String, u64>>,
}

impl Stats {
    fn error(&self, what: String) {
        let mut what = what;
        what.truncate(120);
        *self
            .errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(what)
            .or_default() += 1;
    }
}

struct Holding<'a>(&'a AtomicI64);
impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Ctx {
    ledger: Ledger,
    stats: Stats,
    stop: CancellationToken,
}

// ---------------------------------------------------------------------------------
// A simulated node

struct SimNode {
    idx: u32,
    id: String,
    keys: Keys,
    wait_s: u64,
    last_stamp: u64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl SimNode {
    /// A request signed as docs/PROTOCOL.md §5 says (the library's `sign_request`, as
    /// the real node's transport); every stamp later than the previous one, as there.
    async fn signed(
        &mut self,
        conn: &mut Conn,
        method: &str,
        pq: &str,
        body: String,
        limit: Duration,
    ) -> Result<Answer, String> {
        let ts = now_ms().max(self.last_stamp + 1);
        self.last_stamp = ts;
        let sig = sign_request(&self.keys, &self.id, method, pq, ts, body.as_bytes());
        let mut h = vec![
            (HEADER_NODE, self.id.clone()),
            (HEADER_TIMESTAMP, ts.to_string()),
            (HEADER_SIGNATURE, sig),
        ];
        if !body.is_empty() {
            h.push(("content-type", "application/json".to_string()));
        }
        conn.request(method, pq, &h, body, limit).await
    }

    /// `Ok(body)` for a 2xx, else an error text naming the request.
    async fn call(
        &mut self,
        conn: &mut Conn,
        what: &str,
        method: &str,
        pq: &str,
        body: String,
        limit: Duration,
    ) -> Result<Vec<u8>, String> {
        match self.signed(conn, method, pq, body, limit).await {
            Ok((s, b)) if (200..300).contains(&s) => Ok(b),
            Ok((s, b)) => Err(format!("{what}: HTTP {s} {}", error_code(&b))),
            Err(e) => Err(format!("{what}: {e}")),
        }
    }

    async fn run(mut self, ep: Arc<Endpoint>, ctx: Arc<Ctx>) {
        let mut conn = Conn::new(ep, ctx.stats.node_connects.clone());
        // The handshake pull answers at once; so do flush pulls while more is queued.
        let mut flush = true;
        let mut rev_since = 0u64;
        let mut rev_due = Instant::now();
        let st = &ctx.stats;
        while !ctx.stop.is_cancelled() {
            let wait = if flush { 0 } else { self.wait_s };
            let pq = format!("/v1/nodes/{}/pull?wait_s={wait}&max={PULL_MAX}", self.id);
            let limit = Duration::from_secs(wait + 30);
            let answer = {
                let _held = (wait > 0).then(|| {
                    st.holding.fetch_add(1, Ordering::Relaxed);
                    Holding(&st.holding)
                });
                tokio::select! {
                    r = self.call(&mut conn, "pull", "GET", &pq, String::new(), limit) => r,
                    _ = ctx.stop.cancelled() => return,
                }
            };
            let at = Instant::now();
            st.pulls.fetch_add(1, Ordering::Relaxed);
            let answer = answer.and_then(|b| {
                serde_json::from_slice::<PullAnswer>(&b)
                    .map_err(|e| format!("pull: malformed answer: {e}"))
            });
            let answer = match answer {
                Ok(a) => a,
                Err(e) => {
                    self.failed(&ctx, e).await;
                    flush = true;
                    continue;
                }
            };
            let ids: Vec<String> = answer
                .envelopes
                .iter()
                .filter_map(|e| {
                    let v: Value = serde_json::from_str(e.get()).ok()?;
                    v.get("message_id")?.as_str().map(str::to_string)
                })
                .collect();
            if ids.len() != answer.envelopes.len() {
                st.error("pull: envelope without message_id".into());
            }
            if wait > 0 {
                st.long_polls.fetch_add(1, Ordering::Relaxed);
                if ids.is_empty() {
                    st.long_polls_empty.fetch_add(1, Ordering::Relaxed);
                }
            }
            for id in &ids {
                ctx.ledger.received(id, at, self.idx);
            }
            st.envelopes.fetch_add(ids.len() as u64, Ordering::Relaxed);
            let got = ids.len() as u64;
            if !ids.is_empty() {
                // Exactly what the real node sends: every id it took, none refused.
                let body = serde_json::to_string(&AckRequest {
                    message_ids: ids,
                    rejected: Vec::new(),
                })
                .unwrap();
                let pq = format!("/v1/nodes/{}/ack", self.id);
                let r = self
                    .call(&mut conn, "ack", "POST", &pq, body, Duration::from_secs(30))
                    .await;
                if let Err(e) = r {
                    // Not acked: the gateway hands them out again (counted as duplicates).
                    self.failed(&ctx, e).await;
                    flush = true;
                    continue;
                }
                st.acks.fetch_add(1, Ordering::Relaxed);
            }
            flush = answer.pending_count > got;
            if Instant::now() >= rev_due && !ctx.stop.is_cancelled() {
                let pq = format!("/v1/nodes/{}/revocations?since={rev_since}", self.id);
                let r = self
                    .call(
                        &mut conn,
                        "revocations",
                        "GET",
                        &pq,
                        String::new(),
                        Duration::from_secs(30),
                    )
                    .await
                    .and_then(|b| {
                        serde_json::from_slice::<Revocations>(&b)
                            .map_err(|e| format!("revocations: malformed answer: {e}"))
                    });
                match r {
                    Ok(v) => {
                        rev_since = v.version;
                        rev_due = Instant::now() + REVOCATIONS_EVERY;
                        st.revocation_fetches.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        self.failed(&ctx, e).await;
                        flush = true;
                    }
                }
            }
        }
    }

    /// A failure ends the connection; the real node backs off (5 s first, ±10 %) and
    /// starts again with the handshake.
    async fn failed(&self, ctx: &Ctx, e: String) {
        ctx.stats.error(e);
        let d = Duration::from_millis(rand::thread_rng().gen_range(4_500..=5_500));
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = ctx.stop.cancelled() => {}
        }
    }
}

// ---------------------------------------------------------------------------------
// The producer

struct Producer {
    ok: u64,
    post_us: Vec<u64>,
    max_lag: Duration,
}

#[allow(clippy::too_many_arguments)]
async fn produce(
    ep: Arc<Endpoint>,
    ctx: Arc<Ctx>,
    token: Arc<String>,
    node_ids: Arc<Vec<String>>,
    next: Arc<AtomicU64>,
    total: u64,
    rate: f64,
    t0: Instant,
    ttl_s: u64,
) -> Producer {
    let mut conn = Conn::new(ep, ctx.stats.producer_connects.clone());
    let mut out = Producer {
        ok: 0,
        post_us: Vec::new(),
        max_lag: Duration::ZERO,
    };
    let auth = format!("Bearer {token}");
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= total {
            return out;
        }
        let due = t0 + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(due.into()).await;
        out.max_lag = out
            .max_lag
            .max(Instant::now().saturating_duration_since(due));
        let node = rand::thread_rng().gen_range(0..node_ids.len()) as u32;
        let body = format!(
            r#"{{"target":{{"node_id":"{}"}},"command_type":"{COMMAND_TYPE}","body":{{"seq":{i}}},"ttl_s":{ttl_s}}}"#,
            node_ids[node as usize]
        );
        let headers = [
            ("authorization", auth.clone()),
            ("content-type", "application/json".to_string()),
        ];
        let t_send = Instant::now();
        let r = conn
            .request(
                "POST",
                "/v1/commands",
                &headers,
                body,
                Duration::from_secs(30),
            )
            .await;
        let took = t_send.elapsed();
        match r {
            Ok((s, b)) if (200..300).contains(&s) => {
                let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
                match v["message_id"].as_str() {
                    Some(id) => {
                        ctx.ledger.sent(id.to_string(), t_send, node);
                        out.ok += 1;
                        out.post_us.push(took.as_micros() as u64);
                    }
                    None => ctx
                        .stats
                        .error(format!("POST /v1/commands: {s} without message_id")),
                }
            }
            Ok((s, b)) => ctx
                .stats
                .error(format!("POST /v1/commands: HTTP {s} {}", error_code(&b))),
            Err(e) => ctx.stats.error(format!("POST /v1/commands: {e}")),
        }
    }
}

// ---------------------------------------------------------------------------------
// Client API helpers

/// `GET /v1/nodes` on `ep`: (our nodes polling now, queue depth of our nodes, seconds
/// the call took).
/// What a rollout to the whole fleet measured (`OUTPOST_FLEET_ROLLOUT=1`).
#[derive(Debug, Default)]
struct RolloutRun {
    create_ms: f64,
    targets: u64,
    all_succeeded_s: Option<f64>,
    get_ms: Vec<f64>,
}

/// Start a rollout of one command to every node of this fleet (`selector` empty:
/// all), then read it every 250 ms until every node succeeded or `limit` passed.
async fn rollout_run(
    ep: &Arc<Endpoint>,
    token: &str,
    limit: Duration,
) -> Result<RolloutRun, String> {
    let mut c = Conn::new(ep.clone(), Arc::new(AtomicU64::new(0)));
    let auth = [
        ("authorization", format!("Bearer {token}")),
        ("content-type", "application/json".to_string()),
    ];
    let body =
        serde_json::json!({"selector": "", "action": {"command": {"type": "rollout", "body": {}}}});
    let t = Instant::now();
    let (s, b) = c
        .request(
            "POST",
            "/v1/rollouts",
            &auth,
            body.to_string(),
            Duration::from_secs(60),
        )
        .await?;
    let mut run = RolloutRun {
        create_ms: t.elapsed().as_secs_f64() * 1000.0,
        ..RolloutRun::default()
    };
    if s != 201 {
        return Err(format!("POST /v1/rollouts: HTTP {s} {}", error_code(&b)));
    }
    let v: Value = serde_json::from_slice(&b).map_err(|e| e.to_string())?;
    run.targets = v["counts"]["total"].as_u64().unwrap_or(0);
    let id = v["rollout_id"].as_str().unwrap_or("").to_string();
    while t.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let g = Instant::now();
        let (s, b) = c
            .request(
                "GET",
                &format!("/v1/rollouts/{id}"),
                &auth[..1],
                String::new(),
                Duration::from_secs(60),
            )
            .await?;
        run.get_ms.push(g.elapsed().as_secs_f64() * 1000.0);
        if s != 200 {
            return Err(format!(
                "GET /v1/rollouts/{id}: HTTP {s} {}",
                error_code(&b)
            ));
        }
        let v: Value = serde_json::from_slice(&b).map_err(|e| e.to_string())?;
        if v["counts"]["succeeded"].as_u64() == Some(run.targets) {
            run.all_succeeded_s = Some(t.elapsed().as_secs_f64());
            break;
        }
    }
    Ok(run)
}

async fn nodes_view(
    ep: &Arc<Endpoint>,
    token: &str,
    prefix: &str,
) -> Result<(u64, u64, f64), String> {
    let mut c = Conn::new(ep.clone(), Arc::new(AtomicU64::new(0)));
    let t = Instant::now();
    let (s, b) = c
        .request(
            "GET",
            "/v1/nodes",
            &[("authorization", format!("Bearer {token}"))],
            String::new(),
            Duration::from_secs(60),
        )
        .await?;
    let took = t.elapsed().as_secs_f64();
    if s != 200 {
        return Err(format!("GET /v1/nodes: HTTP {s} {}", error_code(&b)));
    }
    let v: Value = serde_json::from_slice(&b).map_err(|e| e.to_string())?;
    let mut polling = 0;
    let mut depth = 0;
    for n in v["nodes"].as_array().into_iter().flatten() {
        if !n["node_id"].as_str().unwrap_or("").starts_with(prefix) {
            continue;
        }
        if n["polling"].as_bool() == Some(true) {
            polling += 1;
        }
        depth += n["queue_depth"].as_u64().unwrap_or(0);
    }
    Ok((polling, depth, took))
}

// ---------------------------------------------------------------------------------
// Reporting helpers

/// Nearest-rank percentile of sorted µs values, in ms.
fn pct_ms(sorted: &[u64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    Some(sorted[rank.min(sorted.len()) - 1] as f64 / 1000.0)
}

fn fmt_ms(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1} ms"))
        .unwrap_or_else(|| "-".into())
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// `event=` values of the gateway's log lines, counted by level and event (with the
/// default `OUTPOST_LOG=warn`, warnings and errors only).
fn log_events(path: &Path) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(level) = words
            .by_ref()
            .take(3)
            .find(|w| ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"].contains(w))
        else {
            continue;
        };
        let ev = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("event="))
            .unwrap_or("(no event)");
        let mut key = format!("{level} {}", ev.trim_matches('"'));
        // Which limit closed a connection matters (http_server's debug events).
        if let Some(t) = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("timeout="))
        {
            key.push_str(&format!(" timeout={}", t.trim_matches('"')));
        }
        *out.entry(key).or_default() += 1;
    }
    out
}

// ---------------------------------------------------------------------------------

/// A node's keys: new, or kept in `dir` (loaded if there, else generated and saved).
fn node_keys(dir: Option<&Path>, id: &str) -> Keys {
    let Some(dir) = dir else {
        return Keys::generate();
    };
    let path = dir.join(format!("{}.json", id.replace(':', "_")));
    if path.exists() {
        return Keys::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    let k = Keys::generate();
    k.save(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    k
}

fn enroll_cli(cfg: &Path, docs: &[String]) {
    let t = Instant::now();
    for (i, d) in docs.iter().enumerate() {
        cli(cfg, &["trust", "add", "-", "--send"], Some(d.as_bytes()));
        if (i + 1) % 250 == 0 {
            eprintln!(
                "  enrolled {} of {} ({:.1} s)",
                i + 1,
                docs.len(),
                t.elapsed().as_secs_f64()
            );
        }
    }
}

/// One `outpost trust add` with every document, one per line: one write of the trust
/// store (the embedded record, or the database's rows).
fn enroll_bulk(cfg: &Path, docs: &[String]) {
    let lines: String = docs.iter().map(|d| format!("{d}\n")).collect();
    cli(
        cfg,
        &["trust", "add", "-", "--send"],
        Some(lines.as_bytes()),
    );
}

fn main() {
    let cfg = Cfg::from_env();
    let (soft, hard) = raise_nofile();
    let need = cfg.nodes as u64 + cfg.clients as u64 + 256;
    assert!(
        soft >= need,
        "RLIMIT_NOFILE is {soft} (hard {hard}); {} nodes need about {need} descriptors here (and as many in a gateway we start): raise the hard limit",
        cfg.nodes
    );
    let external = !cfg.gateways.is_empty();
    eprintln!(
        "fleet: {} nodes, {} commands/s for {} s over {} connections, grace {} s; {}; RLIMIT_NOFILE {soft}",
        cfg.nodes,
        cfg.rate,
        cfg.secs,
        cfg.clients,
        cfg.grace_s,
        if external {
            format!("gateways {}", cfg.gateways.join(", "))
        } else {
            "a gateway started here".to_string()
        }
    );

    // --- Identities.
    let t = Instant::now();
    let mut rng = rand::thread_rng();
    if let Some(d) = &cfg.keys_dir {
        std::fs::create_dir_all(d).expect("OUTPOST_FLEET_KEYS_DIR");
    }
    let sims: Vec<SimNode> = (0..cfg.nodes)
        .map(|i| {
            let id = format!("node:{}-{i:05}", cfg.prefix);
            SimNode {
                idx: i as u32,
                keys: node_keys(cfg.keys_dir.as_deref(), &id),
                id,
                wait_s: cfg.wait_s.unwrap_or_else(|| rng.gen_range(25..=30)),
                last_stamp: 0,
            }
        })
        .collect();
    let docs: Vec<IdentityDocument> = sims
        .iter()
        .map(|s| IdentityDocument::new(&s.id, "node", &s.keys, "2026-01-01T00:00:00Z"))
        .collect();
    eprintln!(
        "identities: {} generated in {:.2} s",
        sims.len(),
        t.elapsed().as_secs_f64()
    );

    // --- Gateway: ours (not started until enrolled) or theirs.
    let home = (!external).then(|| Home::init_gateway("gateway:fleet"));
    if let (Some(h), Ok(toml)) = (&home, std::env::var("OUTPOST_FLEET_GATEWAY_TOML")) {
        h.dropin(&toml);
    }
    let gw_cfg: PathBuf = match &home {
        Some(h) => h.cfg.clone(),
        None => cfg.gateway_config.clone().unwrap(),
    };
    let gw_id = {
        let doc: Value = serde_json::from_str(&cli(&gw_cfg, &["identity", "--json"], None))
            .expect("gateway identity");
        doc["node_id"].as_str().unwrap().to_string()
    };

    // --- Enrollment, before anything is timed.
    let texts: Vec<String> = docs
        .iter()
        .map(|d| serde_json::to_string(d).unwrap())
        .collect();
    let t = Instant::now();
    let mut last_cli_s = None;
    match cfg.enroll {
        Enroll::Cli => enroll_cli(&gw_cfg, &texts),
        Enroll::Bulk => {
            let n = docs.len();
            enroll_bulk(&gw_cfg, &texts[..n - 1]);
            let t1 = Instant::now();
            cli(
                &gw_cfg,
                &["trust", "add", "-", "--send"],
                Some(texts[n - 1].as_bytes()),
            );
            last_cli_s = Some(t1.elapsed().as_secs_f64());
        }
        Enroll::None | Enroll::Token => {}
    }
    let enroll_s = t.elapsed().as_secs_f64();
    let enroll_how = match (cfg.enroll, last_cli_s) {
        (Enroll::Bulk, Some(c)) => format!(
            "{} with one `outpost trust add` (all documents, one per line), the last with its own ({c:.2} s for that call)",
            cfg.nodes - 1
        ),
        (Enroll::None, _) => "none: enrolled by an earlier run".to_string(),
        (Enroll::Token, _) => "not yet: each enrolls itself with a token once the gateway runs".to_string(),
        _ => "`outpost trust add` per node".to_string(),
    };
    eprintln!(
        "enrolled {} nodes at {gw_id} in {enroll_s:.1} s: {enroll_how}",
        cfg.nodes
    );
    let token = cli(
        &gw_cfg,
        &[
            "token",
            "issue",
            "--aud",
            &gw_id,
            "--scope",
            &format!("command:{COMMAND_TYPE}"),
            "read",
            "--ttl",
            "6h",
            "--sub",
            "fleet-bench",
        ],
        None,
    )
    .trim()
    .to_string();
    // The rollout (admin only), when asked for.
    let admin = cli(
        &gw_cfg,
        &[
            "token",
            "issue",
            "--aud",
            &gw_id,
            "--scope",
            "admin",
            "--ttl",
            "6h",
            "--sub",
            "fleet-bench",
        ],
        None,
    )
    .trim()
    .to_string();

    let mut daemon = home.as_ref().map(Home::start);
    let urls: Vec<String> = match &daemon {
        Some(d) => vec![format!("http://{}", d.addr)],
        None => cfg.gateways.clone(),
    };
    let eps: Vec<Arc<Endpoint>> = urls.iter().map(|u| Arc::new(Endpoint::parse(u))).collect();
    let pids: Vec<u32> = match &daemon {
        Some(d) => vec![d.pid()],
        None => cfg.pids.clone(),
    };
    std::thread::sleep(Duration::from_millis(500));
    let rss_start: Vec<u64> = pids.iter().map(|p| status_kib(*p, "VmRSS")).collect();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let ctx = Arc::new(Ctx {
        ledger: Ledger::default(),
        stats: Stats::default(),
        stop: CancellationToken::new(),
    });
    let node_ids: Arc<Vec<String>> = Arc::new(sims.iter().map(|s| s.id.clone()).collect());
    let prefix = format!("node:{}-", cfg.prefix);
    let sampler = RssSampler::start(pids.clone());
    let t_sampler = Instant::now();
    let me = std::process::id();

    // --- Enrollment burst (`OUTPOST_FLEET_ENROLL=token`): every device at once.
    let burst = (cfg.enroll == Enroll::Token).then(|| {
        let enroll_token = cli(
            &gw_cfg,
            &[
                "enroll-token", "create", "--max-uses", &cfg.nodes.to_string(), "--ttl", "2h",
                "--approve", "auto",
            ],
            None,
        )
        .trim()
        .to_string();
        let devices: Vec<enroll::Device> = sims
            .iter()
            .map(|s| enroll::Device {
                id: &s.id,
                keys: &s.keys,
            })
            .collect();
        let b = enroll::run(&urls, &devices, &enroll_token, &admin);
        eprintln!(
            "enrollment burst: {} of {} devices enrolled in {:.1} s; answers {:?}; console fleet page p50 {} p99 {} over {} loads ({} not 200)",
            b.enrolled,
            b.devices,
            b.took_s,
            b.answers,
            fmt_ms(pct_ms(&b.console_us, 50.0)),
            fmt_ms(pct_ms(&b.console_us, 99.0)),
            b.console_us.len(),
            b.console_failed
        );
        b
    });

    // --- Ramp: every node connects (in waves of 100 per 50 ms) and long-polls.
    let t_ramp = Instant::now();
    let mut node_tasks = Vec::new();
    rt.block_on(async {
        for (i, s) in sims.into_iter().enumerate() {
            let ep = eps[i % eps.len()].clone();
            node_tasks.push(tokio::spawn(s.run(ep, ctx.clone())));
            if (i + 1) % 100 == 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    // Held = every node has a long-poll out (this side's count) and the gateways count
    // them as `polling` (GET /v1/nodes; replicas share liveness, so each one reports the
    // polls held at any of them: the largest count, not the sum).
    let (polling, nodes_call_s) = rt.block_on(async {
        loop {
            let mut polling = 0;
            let mut took: f64 = 0.0;
            for ep in &eps {
                match nodes_view(ep, &token, &prefix).await {
                    Ok((p, _, s)) => {
                        polling = polling.max(p);
                        took = took.max(s);
                    }
                    Err(e) => eprintln!("  {e}"),
                }
            }
            let out = ctx.stats.holding.load(Ordering::Relaxed);
            if (polling >= cfg.nodes as u64 && out >= cfg.nodes as i64)
                || t_ramp.elapsed() > Duration::from_secs(180)
            {
                return (polling, took);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    let ramp_s = t_ramp.elapsed().as_secs_f64();
    eprintln!(
        "ramp: {polling} of {} nodes hold a long-poll after {ramp_s:.1} s (GET /v1/nodes took {:.0} ms)",
        cfg.nodes,
        nodes_call_s * 1000.0
    );
    // Idle with every long-poll held: what holding them costs the gateway.
    let idle_cpu0: Vec<f64> = pids.iter().map(|p| cpu_s(*p)).collect();
    let idle_sys0: Vec<f64> = pids.iter().map(|p| cpu_split_s(*p).1).collect();
    let node_requests = || {
        let st = &ctx.stats;
        st.pulls.load(Ordering::Relaxed)
            + st.acks.load(Ordering::Relaxed)
            + st.revocation_fetches.load(Ordering::Relaxed)
    };
    let idle_requests0 = node_requests();
    let t_idle = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(cfg.idle_s));
    let idle_s = t_idle.elapsed().as_secs_f64();
    let idle_requests = node_requests() - idle_requests0;
    let idle_cpu: Vec<f64> = pids
        .iter()
        .zip(&idle_cpu0)
        .map(|(p, c0)| cpu_s(*p) - c0)
        .collect();
    let idle_sys: Vec<f64> = pids
        .iter()
        .zip(&idle_sys0)
        .map(|(p, c0)| cpu_split_s(*p).1 - c0)
        .collect();
    let rss_polls: Vec<u64> = pids.iter().map(|p| status_kib(*p, "VmRSS")).collect();
    let errors_before_load: u64 = ctx.stats.errors.lock().unwrap().values().sum();

    // --- Load.
    let total = (cfg.rate * cfg.secs).round() as u64;
    let ttl_s = (cfg.secs + cfg.grace_s) as u64 + 600;
    let gw_cpu0: Vec<f64> = pids.iter().map(|p| cpu_s(*p)).collect();
    let gw_sys0: Vec<f64> = pids.iter().map(|p| cpu_split_s(*p).1).collect();
    let me_cpu0 = cpu_s(me);
    let mach0 = machine_jiffies();
    let connects0 = ctx.stats.node_connects.load(Ordering::Relaxed);
    let t0 = Instant::now() + Duration::from_millis(50);
    let load_at_s = t0.duration_since(t_sampler).as_secs_f64();
    eprintln!("load: {total} commands at {} /s …", cfg.rate);
    let producers: Vec<Producer> = rt.block_on(async {
        let next = Arc::new(AtomicU64::new(0));
        let token = Arc::new(token.clone());
        let hs: Vec<_> = (0..cfg.clients)
            .map(|w| {
                tokio::spawn(produce(
                    eps[w % eps.len()].clone(),
                    ctx.clone(),
                    token.clone(),
                    node_ids.clone(),
                    next.clone(),
                    total,
                    cfg.rate,
                    t0,
                    ttl_s,
                ))
            })
            .collect();
        let mut out = Vec::new();
        for h in hs {
            out.push(h.await.unwrap());
        }
        out
    });
    let load_s = t0.elapsed().as_secs_f64();
    let sent: u64 = producers.iter().map(|p| p.ok).sum();
    eprintln!("load: {sent} queued in {load_s:.1} s; waiting for deliveries …");

    // --- Grace: until every queued command arrived, or the grace period ends.
    let t_grace = Instant::now();
    while ctx.ledger.lock().pending > 0 && t_grace.elapsed().as_secs_f64() < cfg.grace_s {
        std::thread::sleep(Duration::from_millis(100));
    }
    let drain_s = t_grace.elapsed().as_secs_f64();
    // --- A rollout of one command to the whole fleet, after the load (its messages are
    // counted apart from the load's).
    let early_before = ctx
        .ledger
        .lock()
        .map
        .values()
        .filter(|e| matches!(e, Entry::Early { .. }))
        .count() as u64;
    let rollout = (std::env::var("OUTPOST_FLEET_ROLLOUT").as_deref() == Ok("1")).then(|| {
        eprintln!("rollout: one command to every node …");
        let r = rt
            .block_on(rollout_run(&eps[0], &admin, Duration::from_secs_f64(cfg.grace_s.max(60.0))))
            .unwrap_or_else(|e| panic!("rollout: {e}"));
        let mut g = r.get_ms.clone();
        g.sort_by(f64::total_cmp);
        let pick = |q: f64| g.get(((g.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
        eprintln!(
            "rollout: {} targets, created in {:.0} ms; every node succeeded after {}; GET /v1/rollouts/{{id}} while it ran: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} reads)",
            r.targets,
            r.create_ms,
            r.all_succeeded_s.map_or("(not within the limit)".to_string(), |s| format!("{s:.1} s ({:.0}/s)", r.targets as f64 / s)),
            pick(0.5),
            pick(0.99),
            g.last().copied().unwrap_or(0.0),
            g.len()
        );
        r
    });
    let rollout_receipts = ctx
        .ledger
        .lock()
        .map
        .values()
        .filter(|e| matches!(e, Entry::Early { .. }))
        .count() as u64
        - early_before;
    let gw_cpu1: Vec<f64> = pids.iter().map(|p| cpu_s(*p)).collect();
    let gw_sys1: Vec<f64> = pids.iter().map(|p| cpu_split_s(*p).1).collect();
    let me_cpu1 = cpu_s(me);
    let mach1 = machine_jiffies();
    let load_avg = loadavg();
    let hwm: Vec<u64> = pids.iter().map(|p| status_kib(*p, "VmHWM")).collect();
    let rss_end: Vec<u64> = pids.iter().map(|p| status_kib(*p, "VmRSS")).collect();
    let rss_series = sampler.finish();
    let rss_peak: Vec<u64> = rss_series
        .iter()
        .map(|v| v.iter().copied().max().unwrap_or(0))
        .collect();
    // Every 10th sample, in MiB: the shape over the run.
    let rss_every_10s: Vec<Vec<f64>> = rss_series
        .iter()
        .map(|v| {
            v.iter()
                .step_by(10)
                .map(|k| (mib(*k) * 10.0).round() / 10.0)
                .collect()
        })
        .collect();
    let depth_end = rt.block_on(async {
        // Replicas share one state: the first gateway's view is the queue.
        nodes_view(&eps[0], &token, &prefix)
            .await
            .map(|(_, d, _)| d)
            .ok()
    });
    let reconnects_in_load = ctx.stats.node_connects.load(Ordering::Relaxed) - connects0;
    // What went wrong while it mattered; stopping below (nodes mid-request while the
    // gateway shuts down) is reported apart.
    let errors = ctx.stats.errors.lock().unwrap().clone();
    let errors_total: u64 = errors.values().sum();

    // --- Stop: nodes issue nothing more; the gateway we started gets SIGTERM with
    // every long-poll still open (how long its drain takes is reported).
    ctx.stop.cancel();
    let stop = daemon.as_mut().map(|d| d.stop(Duration::from_secs(60)));
    rt.block_on(async {
        for h in node_tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), h).await;
        }
    });
    rt.shutdown_timeout(Duration::from_secs(2));
    let log = daemon
        .as_ref()
        .map(|d| log_events(&d.log))
        .unwrap_or_default();

    // --- Results.
    let mut g = ctx.ledger.lock();
    g.lat_us.sort_unstable();
    let lost = g.pending;
    let foreign = g
        .map
        .values()
        .filter(|e| matches!(e, Entry::Early { .. }))
        .count() as u64
        - rollout_receipts;
    let delivered = g.lat_us.len() as u64;
    let lat = std::mem::take(&mut g.lat_us);
    let (duplicates, misrouted) = (g.duplicates, g.misrouted);
    drop(g);
    let mut post_us: Vec<u64> = producers.iter().flat_map(|p| p.post_us.clone()).collect();
    post_us.sort_unstable();
    let max_lag = producers
        .iter()
        .map(|p| p.max_lag)
        .max()
        .unwrap_or_default();
    let st = &ctx.stats;
    let errors_at_stop = st.errors.lock().unwrap().values().sum::<u64>() - errors_total;
    let window_s = load_s + drain_s;
    let me_cpu = me_cpu1 - me_cpu0;
    let idle_pct = {
        let (di, dt) = (mach1.0 - mach0.0, mach1.1 - mach0.1);
        if dt > 0 {
            100.0 * di as f64 / dt as f64
        } else {
            f64::NAN
        }
    };
    let (p50, p90, p99, pmax) = (
        pct_ms(&lat, 50.0),
        pct_ms(&lat, 90.0),
        pct_ms(&lat, 99.0),
        lat.last().map(|v| *v as f64 / 1000.0),
    );
    let mean =
        (!lat.is_empty()).then(|| lat.iter().sum::<u64>() as f64 / lat.len() as f64 / 1000.0);

    println!();
    println!(
        "fleet: {} simulated nodes on {} gateway{} ({}), {} commands/s for {} s, {} producer connections",
        cfg.nodes,
        eps.len(),
        if eps.len() == 1 { "" } else { "s" },
        if external { "external" } else { "started here, SQLite store" },
        cfg.rate,
        cfg.secs,
        cfg.clients
    );
    println!(
        "  enrollment: {enroll_s:.1} s ({enroll_how}); ramp: {polling}/{} long-polls held after {ramp_s:.1} s",
        cfg.nodes
    );
    println!(
        "  commands: {total} attempted, {sent} queued (2xx) in {load_s:.1} s = {:.0} /s achieved; producer max lag {:.1} ms; POST p50 {} p99 {} max {}",
        sent as f64 / load_s,
        max_lag.as_secs_f64() * 1000.0,
        fmt_ms(pct_ms(&post_us, 50.0)),
        fmt_ms(pct_ms(&post_us, 99.0)),
        fmt_ms(pct_ms(&post_us, 100.0)),
    );
    println!(
        "  delivered {delivered}, lost {lost} (not delivered {:.0} s after the last send), duplicates {duplicates}, misrouted {misrouted}, unmatched receipts {foreign}; queued at the gateway at the end: {}",
        drain_s,
        depth_end.map(|d| d.to_string()).unwrap_or_else(|| "?".into())
    );
    println!(
        "  command → node latency: p50 {}  p90 {}  p99 {}  max {}  (mean {})",
        fmt_ms(p50),
        fmt_ms(p90),
        fmt_ms(p99),
        fmt_ms(pmax),
        fmt_ms(mean)
    );
    for (i, pid) in pids.iter().enumerate() {
        println!(
            "  gateway pid {pid}: RSS {:.1} MiB at start, {:.1} MiB holding the long-polls, peak {:.1} MiB sampled / {:.1} MiB VmHWM, {:.1} MiB at the end",
            mib(rss_start[i]),
            mib(rss_polls[i]),
            mib(rss_peak[i]),
            mib(hwm[i]),
            mib(rss_end[i]),
        );
        println!(
            "    RSS every 10 s from the ramp (load from +{load_at_s:.0} s): {} MiB",
            rss_every_10s[i]
                .iter()
                .map(|m| format!("{m:.1}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        let cpu = gw_cpu1[i] - gw_cpu0[i];
        println!(
            "    CPU {cpu:.2} s ({:.2} s of it in the kernel) in the {window_s:.1} s load+drain ({:.0} % of a core, {:.0} µs per queued command); idle with the long-polls held: {:.0} % of a core ({:.0} % of it in the kernel) over {idle_s:.0} s, {:.4} % per node, {idle_requests} node requests",
            gw_sys1[i] - gw_sys0[i],
            100.0 * cpu / window_s,
            cpu * 1e6 / sent.max(1) as f64,
            100.0 * idle_cpu[i] / idle_s,
            100.0 * idle_sys[i] / idle_cpu[i].max(1e-9),
            100.0 * idle_cpu[i] / idle_s / cfg.nodes.max(1) as f64,
        );
        println!(
            "    memory per held long-poll: {:.1} KiB ((RSS holding - RSS at start) / nodes)",
            rss_polls[i].saturating_sub(rss_start[i]) as f64 / cfg.nodes.max(1) as f64
        );
    }
    println!(
        "  load generator: CPU {me_cpu:.2} s ({:.0} % of a core); machine idle {idle_pct:.0} % during load+drain; load average {load_avg}",
        100.0 * me_cpu / window_s
    );
    println!(
        "  node protocol: {} pulls ({} long-polls, {} of them ended empty), {} envelopes, {} acks, {} revocation fetches; node connections opened {} ({} during load+drain); producer connections opened {}",
        st.pulls.load(Ordering::Relaxed),
        st.long_polls.load(Ordering::Relaxed),
        st.long_polls_empty.load(Ordering::Relaxed),
        st.envelopes.load(Ordering::Relaxed),
        st.acks.load(Ordering::Relaxed),
        st.revocation_fetches.load(Ordering::Relaxed),
        st.node_connects.load(Ordering::Relaxed),
        reconnects_in_load,
        st.producer_connects.load(Ordering::Relaxed),
    );
    if errors.is_empty() {
        println!("  errors: none");
    } else {
        println!("  errors ({errors_total}, {errors_before_load} before the load):");
        for (k, v) in &errors {
            println!("    {v:>7}  {k}");
        }
    }
    if let Some((d, status)) = &stop {
        println!(
            "  gateway stop (SIGTERM with the long-polls open): {:.2} s, {status}; {errors_at_stop} node requests failed while it stopped",
            d.as_secs_f64()
        );
    }
    if !log.is_empty() {
        println!("  gateway log (warn/error lines by event):");
        for (k, v) in &log {
            println!("    {v:>7}  {k}");
        }
    }

    let gw_json: Vec<Value> = pids
        .iter()
        .enumerate()
        .map(|(i, pid)| {
            json!({
                "pid": pid,
                "rss_start_kib": rss_start[i],
                "rss_polls_kib": rss_polls[i],
                "rss_peak_sampled_kib": rss_peak[i],
                "rss_every_10s_mib": rss_every_10s[i],
                "hwm_kib": hwm[i],
                "rss_end_kib": rss_end[i],
                "cpu_s": gw_cpu1[i] - gw_cpu0[i],
                "cpu_kernel_s": gw_sys1[i] - gw_sys0[i],
                "idle_polls_cpu_pct": 100.0 * idle_cpu[i] / idle_s,
                "idle_polls_cpu_kernel_pct": 100.0 * idle_sys[i] / idle_s,
                "idle_s": idle_s,
                "idle_node_requests": idle_requests,
                "idle_cpu_pct_per_node": 100.0 * idle_cpu[i] / idle_s / cfg.nodes.max(1) as f64,
                "kib_per_long_poll": rss_polls[i].saturating_sub(rss_start[i]) as f64 / cfg.nodes.max(1) as f64,
            })
        })
        .collect();
    let result = json!({
        "nodes": cfg.nodes,
        "gateways": eps.len(),
        "external": external,
        "rate_target": cfg.rate,
        "secs": cfg.secs,
        "clients": cfg.clients,
        "enroll": match cfg.enroll { Enroll::Cli => "cli", Enroll::Bulk => "bulk", Enroll::None => "none", Enroll::Token => "token" },
        "enroll_burst": burst.as_ref().map(|b| json!({
            "devices": b.devices, "enrolled": b.enrolled, "took_s": b.took_s,
            "answers": b.answers, "console_loads": b.console_us.len(),
            "console_failed": b.console_failed,
            "console_p50_ms": pct_ms(&b.console_us, 50.0), "console_p99_ms": pct_ms(&b.console_us, 99.0),
        })),
        "prefix": cfg.prefix,
        "enroll_s": enroll_s,
        "enroll_last_cli_s": last_cli_s,
        "ramp_s": ramp_s,
        "load_at_s": load_at_s,
        "polling_before_load": polling,
        "attempted": total,
        "sent": sent,
        "achieved_rate": sent as f64 / load_s,
        "load_s": load_s,
        "drain_s": drain_s,
        "delivered": delivered,
        "lost": lost,
        "duplicates": duplicates,
        "misrouted": misrouted,
        "unmatched": foreign,
        "rollout": rollout.as_ref().map(|r| serde_json::json!({
            "targets": r.targets, "create_ms": r.create_ms, "all_succeeded_s": r.all_succeeded_s,
            "get_ms_max": r.get_ms.iter().copied().fold(0.0, f64::max), "gets": r.get_ms.len(),
        })),
        "queue_depth_end": depth_end,
        "p50_ms": p50, "p90_ms": p90, "p99_ms": p99, "max_ms": pmax, "mean_ms": mean,
        "post_p50_ms": pct_ms(&post_us, 50.0),
        "post_p99_ms": pct_ms(&post_us, 99.0),
        "post_max_ms": pct_ms(&post_us, 100.0),
        "producer_max_lag_ms": max_lag.as_secs_f64() * 1000.0,
        "gateway": gw_json,
        "generator_cpu_s": me_cpu,
        "machine_idle_pct": idle_pct,
        "loadavg": load_avg,
        "pulls": st.pulls.load(Ordering::Relaxed),
        "long_polls": st.long_polls.load(Ordering::Relaxed),
        "acks": st.acks.load(Ordering::Relaxed),
        "node_connects": st.node_connects.load(Ordering::Relaxed),
        "node_connects_in_load": reconnects_in_load,
        "producer_connects": st.producer_connects.load(Ordering::Relaxed),
        "envelopes": st.envelopes.load(Ordering::Relaxed),
        "errors": errors,
        "stop_s": stop.as_ref().map(|(d, _)| d.as_secs_f64()),
        "gateway_log": log,
    });
    println!("FLEET_RESULT {result}");
}
