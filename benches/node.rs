//! `cargo bench --bench node`: the node daemon as a user drives it.
//!
//! Starts the release `outpost` binary on a temp dir and port 0 (durable SQLite store,
//! audit on), then measures `POST /v1/tool_call` with the `echo` tool at 1 and 64
//! concurrent connections (throughput, p50/p99), idle RSS, and wakeups per second when
//! idle (context switches of all daemon threads over 10 s). The load generator runs on
//! the same machine and competes for its 2 cores; numbers are for this machine only.

#![allow(clippy::disallowed_methods)] // benchmarks read the clock directly

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// This build's binary, or `OUTPOST_BIN` (another build, for an A/B with one harness).
fn outpost() -> String {
    std::env::var("OUTPOST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_outpost").to_string())
}

fn proc_status(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn ctx_switches(pid: u32) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in rd.flatten() {
            let s = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            for l in s.lines() {
                if l.starts_with("voluntary_ctxt_switches")
                    || l.starts_with("nonvoluntary_ctxt_switches")
                {
                    total += l
                        .split_whitespace()
                        .nth(1)
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0);
                }
            }
        }
    }
    total
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// One keep-alive HTTP/1.1 connection, spoken by hand: the load generator shares the
/// machine's two cores with the daemon, so it does as little as a client can (no
/// pooling, no header maps), leaving the CPU to the thing being measured.
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

    /// Sends one request and reads one response; returns the status code.
    async fn call(&mut self, req: &[u8]) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        self.stream.write_all(req).await.unwrap();
        self.buf.clear();
        loop {
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "daemon closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = std::str::from_utf8(&self.buf[..end])
                    .unwrap()
                    .to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map(|v| v.trim().parse().unwrap())
                    .expect("content-length");
                if self.buf.len() >= end + 4 + len {
                    let status = head[9..12].parse().unwrap();
                    assert_eq!(self.buf.len(), end + 4 + len, "one response per request");
                    return status;
                }
            }
        }
    }
}

async fn load(addr: &str, token: &str, conns: usize, per_conn: usize) -> (f64, Duration, Duration) {
    let mut tasks = Vec::new();
    let start = Instant::now();
    for c in 0..conns {
        let addr = addr.to_string();
        let token = token.to_string();
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::open(&addr).await;
            let mut lat = Vec::with_capacity(per_conn);
            for i in 0..per_conn {
                let body =
                    format!("{{\"tool_name\":\"echo\",\"tool_args\":{{\"c\":{c},\"i\":{i}}}}}");
                let req = format!(
                    "POST /v1/tool_call HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                let t = Instant::now();
                let status = conn.call(req.as_bytes()).await;
                assert_eq!(status, 200);
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let secs = start.elapsed().as_secs_f64();
    all.sort();
    (all.len() as f64 / secs, pct(&all, 0.50), pct(&all, 0.99))
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("outpost.toml");
    let data = dir.path().join("data");
    let ok = Command::new(outpost())
        .args([
            "init",
            "--node-id",
            "node:bench",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(&data)
        .arg("--config")
        .arg(&cfg)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success());
    let mut child = Command::new(outpost())
        .args(["run", "--config"])
        .arg(&cfg)
        .env("OUTPOST_LOG", "warn")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let addr_file = data.join("api.addr");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !addr_file.exists() {
        assert!(Instant::now() < deadline, "daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let addr = std::fs::read_to_string(&addr_file)
        .unwrap()
        .trim()
        .to_string();
    std::thread::sleep(Duration::from_millis(500));
    let rss_start_kib = proc_status(pid, "VmRSS:");
    let token = String::from_utf8(
        Command::new(outpost())
            .args([
                "token",
                "issue",
                "--aud",
                "*",
                "--scope",
                "tool:echo",
                "--ttl",
                "1h",
                "--config",
            ])
            .arg(&cfg)
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    let url = addr.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let token = Arc::new(token);

    // Warm-up.
    rt.block_on(load(&url, &token, 4, 100));
    let (t1, p50_1, p99_1) = rt.block_on(load(&url, &token, 1, 3000));
    let (t64, p50_64, p99_64) = rt.block_on(load(&url, &token, 64, 300));
    let peak_kib = proc_status(pid, "VmHWM:");

    // Idle = 10 s without requests (the daemon trims its heap on the first quiet
    // sweeper pass, at most 8 s after the last request).
    std::thread::sleep(Duration::from_secs(10));
    let rss_idle_kib = proc_status(pid, "VmRSS:");
    let c0 = ctx_switches(pid);
    std::thread::sleep(Duration::from_secs(10));
    let wakeups = (ctx_switches(pid) - c0) as f64 / 10.0;

    let audit = Command::new(outpost())
        .args(["status", "--json", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&audit.stdout).unwrap_or_default();
    let _ = child.kill();
    let _ = child.wait();
    let _ = Path::new(&data);

    println!("| measurement | value |");
    println!("|---|---|");
    println!("| tool_call echo, 1 connection: throughput | {t1:.0} calls/s |");
    println!(
        "| tool_call echo, 1 connection: p50 / p99 | {:.3} ms / {:.3} ms |",
        p50_1.as_secs_f64() * 1e3,
        p99_1.as_secs_f64() * 1e3
    );
    println!("| tool_call echo, 64 connections: throughput | {t64:.0} calls/s |");
    println!(
        "| tool_call echo, 64 connections: p50 / p99 | {:.3} ms / {:.3} ms |",
        p50_64.as_secs_f64() * 1e3,
        p99_64.as_secs_f64() * 1e3
    );
    println!(
        "| RSS after start (idle, empty store) | {:.1} MiB |",
        rss_start_kib as f64 / 1024.0
    );
    println!(
        "| RSS idle after the load | {:.1} MiB |",
        rss_idle_kib as f64 / 1024.0
    );
    println!("| peak RSS (VmHWM) | {:.1} MiB |", peak_kib as f64 / 1024.0);
    println!("| wakeups when idle (context switches/s, all threads) | {wakeups:.1} |");
    println!(
        "| audit entries written (durable) | {} |",
        status["audit"]["size"]
    );
}
