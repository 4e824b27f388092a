//! `cargo bench --bench tenants`: one tenant floods commands while another's nodes
//! keep their delivery latency (issue 37, PROTOCOL §18 `max_commands_per_s`).
//!
//! A real gateway (`outpost init --role gateway` + `run`, temp dir, port 0, durable
//! SQLite store) with two tenants: `bulk`, whose `max_commands_per_s` is
//! `OUTPOST_TENANTS_QUOTA` [200; `none` for no quota], and `quiet`. Each has
//! `OUTPOST_TENANTS_NODES` [100] simulated nodes in this process, enrolled with `trust add
//! --tenant`, each long-polling (`wait_s=25`), signing its requests as PROTOCOL §5 says
//! and acking what it pulled by id (as `benches/fleet.rs`'s nodes do). Both tenants send
//! with their own tenant tokens.
//!
//! Two phases of `OUTPOST_TENANTS_SECS` [20] each, after every node holds a long-poll:
//!
//! 1. **unloaded**: `quiet` sends `OUTPOST_TENANTS_RATE` [20] commands a second, each to
//!    a random one of its nodes, each on its own schedule (a slow answer delays no other);
//! 2. **flooded**: the same, while `bulk` sends commands to its nodes from
//!    `OUTPOST_TENANTS_FLOODERS` [8] connections as fast as the gateway answers (what its
//!    quota refuses is answered 429 `tenant_quota` and sent again at once);
//! 3. **enrolling**: the same, while `OUTPOST_TENANTS_ENROLL` [2000; 0 skips the phase]
//!    new devices of `bulk` enroll themselves at once with one enrollment token of
//!    `bulk` (`--approve auto`), from one address, retrying as the node does
//!    (`benches/fleet/enroll.rs`); with `OUTPOST_TENANTS_CONSOLE=1` an operator also
//!    loads the console's fleet page every 100 ms meanwhile.
//!
//! Latency is from just before `quiet`'s POST to the moment the target node's pull
//! answer carrying that message id arrived. Printed: `quiet`'s p50/p90/p99/max per phase
//! and the flooded/unloaded p99 ratio; `bulk`'s attempts, admissions and refusals a
//! second; the gateway's CPU per phase. `OUTPOST_TENANTS_GATEWAY_WORKERS`: the gateway's
//! tokio worker threads (its default: one per core). Output: a summary and one line
//! `TENANTS_RESULT {json}` on stdout. `OUTPOST_BIN`: the binary under test.

#![allow(clippy::disallowed_methods)] // benchmarks read the clock directly

#[path = "fleet/enroll.rs"]
mod enroll;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::Rng;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use outpost::envelope::{
    sign_request, IdentityDocument, Keys, HEADER_NODE, HEADER_SIGNATURE, HEADER_TIMESTAMP,
};

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    match std::env::var(key) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{key}={v:?} is not a valid value")),
        _ => default,
    }
}

fn outpost() -> String {
    std::env::var("OUTPOST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_outpost").to_string())
}

fn cli(cfg: &Path, args: &[&str], stdin: Option<&[u8]>) -> String {
    use std::io::Write;
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["--config", cfg.to_str().unwrap()]);
    let mut c = Command::new(outpost())
        .args(&a)
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
        "outpost {a:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// The gateway's user + system CPU seconds.
fn cpu_s(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<&str> = s.rsplit(") ").next().unwrap_or("").split(' ').collect();
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (t(11) + t(12)) / 100.0
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// When each message was sent (just before its POST) and received (its pull answer).
#[derive(Default)]
struct Ledger {
    sent: Mutex<HashMap<String, (Instant, usize)>>,
    received: Mutex<HashMap<String, Instant>>,
    /// How long each of `quiet`'s POSTs took to its 202 (µs), by phase.
    post_us: Mutex<[Vec<u64>; 3]>,
}

struct Node {
    id: String,
    keys: Keys,
    last_stamp: u64,
}

impl Node {
    fn headers(&mut self, method: &str, pq: &str, body: &[u8]) -> [(&'static str, String); 3] {
        let ts = now_ms().max(self.last_stamp + 1);
        self.last_stamp = ts;
        let sig = sign_request(&self.keys, &self.id, method, pq, ts, body);
        [
            (HEADER_NODE, self.id.clone()),
            (HEADER_TIMESTAMP, ts.to_string()),
            (HEADER_SIGNATURE, sig),
        ]
    }

    /// Long-poll, record, ack; until stopped.
    async fn run(
        mut self,
        base: String,
        ledger: Arc<Ledger>,
        errors: Arc<AtomicU64>,
        stop: CancellationToken,
    ) {
        let c = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let mut wait = 0;
        while !stop.is_cancelled() {
            let pq = format!("/v1/nodes/{}/pull?wait_s={wait}&max=500", self.id);
            let mut r = c.get(format!("{base}{pq}"));
            for (k, v) in self.headers("GET", &pq, b"") {
                r = r.header(k, v);
            }
            let answer = tokio::select! {
                a = r.send() => a,
                _ = stop.cancelled() => return,
            };
            let at = Instant::now();
            let v: Value = match answer {
                Ok(a) if a.status().is_success() => a.json().await.unwrap_or(Value::Null),
                _ => {
                    errors.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            let ids: Vec<String> = v["envelopes"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|e| e["message_id"].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            {
                let mut got = ledger.received.lock().unwrap();
                for id in &ids {
                    got.entry(id.clone()).or_insert(at);
                }
            }
            let pending = v["pending_count"].as_u64().unwrap_or(0);
            wait = if pending > ids.len() as u64 { 0 } else { 25 };
            if ids.is_empty() {
                continue;
            }
            let pq = format!("/v1/nodes/{}/ack", self.id);
            let body = serde_json::to_vec(&json!({"message_ids": ids, "rejected": []})).unwrap();
            let mut r = c
                .post(format!("{base}{pq}"))
                .header("content-type", "application/json");
            for (k, v) in self.headers("POST", &pq, &body) {
                r = r.header(k, v);
            }
            if !r
                .body(body)
                .send()
                .await
                .is_ok_and(|a| a.status().is_success())
            {
                errors.fetch_add(1, Ordering::Relaxed);
                wait = 0;
            }
        }
    }
}

fn command_body(node: &str, i: u64) -> Value {
    json!({"target": {"node_id": node}, "command_type": "fleet", "body": {"i": i}, "ttl_s": 3600})
}

/// `quiet`'s commands of one phase at `rate` a second: each on its own schedule.
async fn quiet_phase(
    base: &str,
    token: &str,
    nodes: &[String],
    rate: f64,
    secs: f64,
    phase: usize,
    ledger: &Arc<Ledger>,
) -> u64 {
    let c = reqwest::Client::new();
    let n = (rate * secs) as u64;
    let t0 = Instant::now();
    let mut hs = Vec::new();
    for i in 0..n {
        let due = t0 + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(due.into()).await;
        let node = nodes[rand::thread_rng().gen_range(0..nodes.len())].clone();
        let (c, url, token, ledger) = (
            c.clone(),
            format!("{base}/v1/commands"),
            token.to_string(),
            ledger.clone(),
        );
        hs.push(tokio::spawn(async move {
            let sent = Instant::now();
            let r = c
                .post(url)
                .bearer_auth(token)
                .json(&command_body(&node, i))
                .send()
                .await;
            let v: Value = match r {
                Ok(a) if a.status().as_u16() == 202 => a.json().await.unwrap_or(Value::Null),
                _ => return 0,
            };
            let Some(id) = v["message_id"].as_str() else {
                return 0;
            };
            ledger.post_us.lock().unwrap()[phase].push(sent.elapsed().as_micros() as u64);
            ledger
                .sent
                .lock()
                .unwrap()
                .insert(id.to_string(), (sent, phase));
            1u64
        }));
    }
    let mut ok = 0;
    for h in hs {
        ok += h.await.unwrap_or(0);
    }
    ok
}

/// `bulk`'s flood: as fast as the gateway answers, until stopped.
#[derive(Default)]
struct Flood {
    attempts: AtomicU64,
    admitted: AtomicU64,
    refused: AtomicU64,
    other: AtomicU64,
}

async fn flood(
    base: String,
    token: String,
    nodes: Arc<Vec<String>>,
    f: Arc<Flood>,
    stop: CancellationToken,
) {
    let c = reqwest::Client::new();
    let mut i = 0;
    while !stop.is_cancelled() {
        i += 1;
        let node = &nodes[rand::thread_rng().gen_range(0..nodes.len())];
        let r = c
            .post(format!("{base}/v1/commands"))
            .bearer_auth(&token)
            .json(&command_body(node, i))
            .send()
            .await;
        f.attempts.fetch_add(1, Ordering::Relaxed);
        let counter = match r.map(|a| a.status().as_u16()) {
            Ok(202) => &f.admitted,
            Ok(429) => &f.refused,
            _ => &f.other,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

fn pct_ms(sorted: &[u64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() as f64 - 1.0) * p / 100.0).round() as usize;
    Some(sorted[i] as f64 / 1000.0)
}

struct Gateway {
    child: Child,
    base: String,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path, cfg: &Path, data: &Path) -> Gateway {
    let addr_file = data.join("api.addr");
    let workers = std::env::var("OUTPOST_TENANTS_GATEWAY_WORKERS")
        .ok()
        .filter(|w| !w.trim().is_empty());
    let child = Command::new(outpost())
        .args(["run", "--config", cfg.to_str().unwrap()])
        .env("OUTPOST_LOG", "warn")
        .env_remove("JOURNAL_STREAM")
        // The gateway's runtime apart from this process's (`TOKIO_WORKER_THREADS` of the
        // bench's own environment is not passed on).
        .env_remove("TOKIO_WORKER_THREADS")
        .envs(workers.map(|w| ("TOKIO_WORKER_THREADS", w)))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("gateway.log")).unwrap())
        .spawn()
        .expect("start outpost");
    let mut g = Gateway {
        child,
        base: String::new(),
    };
    let t0 = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(&addr_file) {
            if let Ok(a) = s.trim().parse::<std::net::SocketAddr>() {
                g.base = format!("http://{a}");
                return g;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "gateway did not start"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn main() {
    let per_tenant: usize = env_or("OUTPOST_TENANTS_NODES", 100);
    let quota: String = env_or("OUTPOST_TENANTS_QUOTA", "200".to_string());
    let secs: f64 = env_or("OUTPOST_TENANTS_SECS", 20.0);
    let rate: f64 = env_or("OUTPOST_TENANTS_RATE", 20.0);
    let flooders: usize = env_or("OUTPOST_TENANTS_FLOODERS", 8);
    let enrolling: usize = env_or("OUTPOST_TENANTS_ENROLL", 2000);
    let console = env_or("OUTPOST_TENANTS_CONSOLE", 0u8) == 1;

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg: PathBuf = dir.path().join("outpost.toml");
    let init = [
        "init",
        "--role",
        "gateway",
        "--node-id",
        "gateway:tenants",
        "--data-dir",
        data.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ];
    cli(&cfg, &init, None);
    cli(
        &cfg,
        &["tenant", "create", "bulk", "--max-commands-per-s", &quota],
        None,
    );
    cli(&cfg, &["tenant", "create", "quiet"], None);
    let mut nodes: Vec<(Node, usize)> = Vec::new();
    for (t, tenant) in ["bulk", "quiet"].iter().enumerate() {
        let mut docs = String::new();
        for i in 0..per_tenant {
            let id = format!("node:{tenant}-{i:04}");
            let keys = Keys::generate();
            let doc = IdentityDocument::new(&id, "node", &keys, "2026-01-01T00:00:00Z");
            docs.push_str(&serde_json::to_string(&doc).unwrap());
            docs.push('\n');
            nodes.push((
                Node {
                    id,
                    keys,
                    last_stamp: 0,
                },
                t,
            ));
        }
        cli(
            &cfg,
            &["trust", "add", "-", "--send", "--tenant", tenant],
            Some(docs.as_bytes()),
        );
    }
    let token = |tenant: &str| {
        cli(
            &cfg,
            &[
                "token",
                "issue",
                "--aud",
                "gateway:tenants",
                "--tenant",
                tenant,
                "--scope",
                "command:fleet",
                "--ttl",
                "2h",
                "--sub",
                tenant,
            ],
            None,
        )
        .trim()
        .to_string()
    };
    let (bulk_token, quiet_token) = (token("bulk"), token("quiet"));
    let admin = cli(
        &cfg,
        &[
            "token",
            "issue",
            "--aud",
            "gateway:tenants",
            "--scope",
            "admin",
            "--ttl",
            "2h",
            "--sub",
            "operator",
        ],
        None,
    )
    .trim()
    .to_string();
    let max_uses = enrolling.max(1).to_string();
    let create = [
        "enroll-token",
        "create",
        "--tenant",
        "bulk",
        "--max-uses",
        &max_uses,
        "--ttl",
        "2h",
        "--approve",
        "auto",
    ];
    let enroll_token = cli(&cfg, &create, None).trim().to_string();
    let newcomers: Vec<(String, Keys)> = (0..enrolling)
        .map(|i| (format!("node:new-{i:05}"), Keys::generate()))
        .collect();
    let ids = |t: usize| -> Vec<String> {
        nodes
            .iter()
            .filter(|(_, k)| *k == t)
            .map(|(n, _)| n.id.clone())
            .collect()
    };
    let (bulk_ids, quiet_ids) = (Arc::new(ids(0)), ids(1));
    let gw = start(dir.path(), &cfg, &data);
    let pid = gw.child.id();
    eprintln!(
        "tenants: {per_tenant} nodes each in bulk (max_commands_per_s {quota}) and quiet; quiet sends {rate}/s; bulk floods from {flooders} connections; {secs} s a phase"
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let ledger = Arc::new(Ledger::default());
    let errors = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    rt.block_on(async {
        for (n, _) in nodes {
            tokio::spawn(n.run(
                gw.base.clone(),
                ledger.clone(),
                errors.clone(),
                stop.clone(),
            ));
        }
        // Every node's handshake pull answered and its long-poll out.
        tokio::time::sleep(Duration::from_secs(3)).await;
    });

    let mut cpu = Vec::new();
    let mut quiet_sent = Vec::new();
    let f = Arc::new(Flood::default());
    let mut flood_s = 0.0;
    let mut burst = None;
    let phases = if enrolling > 0 { 3 } else { 2 };
    for phase in 0..phases {
        let c0 = cpu_s(pid);
        let t0 = Instant::now();
        let flood_stop = CancellationToken::new();
        if phase == 1 {
            rt.block_on(async {
                for _ in 0..flooders {
                    tokio::spawn(flood(
                        gw.base.clone(),
                        bulk_token.clone(),
                        bulk_ids.clone(),
                        f.clone(),
                        flood_stop.clone(),
                    ));
                }
            });
        }
        let quiet = quiet_phase(
            &gw.base,
            &quiet_token,
            &quiet_ids,
            rate,
            secs,
            phase,
            &ledger,
        );
        let sent = if phase == 2 {
            let devices: Vec<enroll::Device> = newcomers
                .iter()
                .map(|(id, keys)| enroll::Device { id, keys })
                .collect();
            let urls = [gw.base.clone()];
            // The burst on threads of its own (`enroll::run`): quiet's runtime measures.
            let (sent, b) = std::thread::scope(|s| {
                let b = s.spawn(|| {
                    enroll::run(
                        &urls,
                        &devices,
                        &enroll_token,
                        if console { &admin } else { "" },
                    )
                });
                (rt.block_on(quiet), b.join().unwrap())
            });
            burst = Some(b);
            sent
        } else {
            rt.block_on(quiet)
        };
        flood_stop.cancel();
        if phase == 1 {
            flood_s = t0.elapsed().as_secs_f64();
        }
        quiet_sent.push(sent);
        cpu.push((cpu_s(pid) - c0) / t0.elapsed().as_secs_f64());
        // What is in flight arrives before the next phase begins.
        std::thread::sleep(Duration::from_secs(3));
    }
    stop.cancel();
    rt.shutdown_timeout(Duration::from_secs(2));
    drop(gw);

    let sent = ledger.sent.lock().unwrap();
    let got = ledger.received.lock().unwrap();
    let mut lat: [Vec<u64>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let mut lost = [0u64; 3];
    for (id, (at, phase)) in sent.iter() {
        match got.get(id) {
            Some(r) => lat[*phase].push(r.saturating_duration_since(*at).as_micros() as u64),
            None => lost[*phase] += 1,
        }
    }
    for l in &mut lat {
        l.sort_unstable();
    }
    let mut posts = std::mem::take(&mut *ledger.post_us.lock().unwrap());
    for l in &mut posts {
        l.sort_unstable();
    }
    let fmt = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1} ms"));
    let names = ["unloaded", "flooded", "enrolling"];
    println!();
    for p in 0..phases {
        println!(
            "quiet, {:<8}: {} sent, {} delivered, {} not delivered; p50 {} p90 {} p99 {} max {} (the POST alone: p50 {} p99 {}); gateway CPU {:.2} cores",
            names[p],
            quiet_sent[p],
            lat[p].len(),
            lost[p],
            fmt(pct_ms(&lat[p], 50.0)),
            fmt(pct_ms(&lat[p], 90.0)),
            fmt(pct_ms(&lat[p], 99.0)),
            fmt(lat[p].last().map(|v| *v as f64 / 1000.0)),
            fmt(pct_ms(&posts[p], 50.0)),
            fmt(pct_ms(&posts[p], 99.0)),
            cpu[p]
        );
    }
    let ratio_of = |p: usize| match (pct_ms(&lat[p], 99.0), pct_ms(&lat[0], 99.0)) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let (ratio, enroll_ratio) = (ratio_of(1), ratio_of(2));
    let per_s = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / flood_s.max(1e-9);
    println!(
        "bulk's flood: {:.0} attempts/s, {:.0} admitted/s, {:.0} refused/s (429), {:.0} other/s",
        per_s(&f.attempts),
        per_s(&f.admitted),
        per_s(&f.refused),
        per_s(&f.other)
    );
    let x = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.2}x"));
    println!(
        "quiet's p99 flooded/unloaded: {}, enrolling/unloaded: {}; node errors {}",
        x(ratio),
        x(enroll_ratio),
        errors.load(Ordering::Relaxed)
    );
    if let Some(b) = &burst {
        println!(
            "bulk's enrollment burst: {} of {} enrolled in {:.1} s; answers {:?}; console p99 {} ({} loads not 200)",
            b.enrolled,
            b.devices,
            b.took_s,
            b.answers,
            fmt(pct_ms(&b.console_us, 99.0)),
            b.console_failed
        );
    }
    let phase_json = |p: usize| {
        if p >= phases {
            return Value::Null;
        }
        json!({
            "sent": quiet_sent[p], "delivered": lat[p].len(), "lost": lost[p],
            "p50_ms": pct_ms(&lat[p], 50.0), "p90_ms": pct_ms(&lat[p], 90.0),
            "p99_ms": pct_ms(&lat[p], 99.0), "gateway_cores": cpu[p],
        })
    };
    println!(
        "TENANTS_RESULT {}",
        json!({
            "nodes_per_tenant": per_tenant, "quota": quota, "rate": rate, "secs": secs,
            "flooders": flooders, "unloaded": phase_json(0), "flooded": phase_json(1),
            "enrolling": phase_json(2), "p99_ratio": ratio, "enrolling_p99_ratio": enroll_ratio,
            "burst": burst.as_ref().map(|b| json!({"devices": b.devices, "enrolled": b.enrolled,
                "took_s": b.took_s, "console_p99_ms": pct_ms(&b.console_us, 99.0)})),
            "flood": {"attempts_per_s": per_s(&f.attempts), "admitted_per_s": per_s(&f.admitted),
                      "refused_per_s": per_s(&f.refused), "other_per_s": per_s(&f.other)},
        })
    );
}
