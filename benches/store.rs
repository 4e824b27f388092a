//! Store benchmarks (harness = false): `scripts/bench-store.sh` or
//! `cargo bench --bench store --features sled`.
//!
//! For every engine compiled in, with 512-byte messages:
//! - the raw write + fdatasync floor of the disk under the bench directory;
//! - durable enqueue latency p50/p99 and throughput with 1 producer;
//! - throughput with 64 producers (group commit) and bytes written per message
//!   (`/proc/self/io` write_bytes); the 64 producers as OS threads blocked in `wait()`,
//!   and again as 64 tasks awaiting `enqueue` on a tokio runtime (the daemon's callers);
//! - draining 10,000 messages (read + ack in batches of 50, reads pipelined with acks);
//! - peak RSS of a fresh process working on a store with 100,000 queued (`VmHWM`),
//!   measured in a child process per engine so the numbers are not polluted.
//!
//! `OUTPOST_BENCH_COLD_ONLY=1` measures one thing alone: bytes per one-message commit
//! after an unclean stop and a cold page cache (root, to drop the cache).
//!
//! Wall-clock measurement is the point here, hence the local `disallowed_methods` allows.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use outpost::clock;
use outpost::store::bench::SQLITE_PAGE_SIZE;
use outpost::store::{Batch, EngineKind, NewMessage, Store, StoreOptions};

const BODY: usize = 512;
/// WAL frames of a one-message SQLite commit (see `main`).
const COMMIT_PAGES: usize = 5;

#[allow(clippy::disallowed_methods)] // benchmark timing
fn now() -> Instant {
    Instant::now()
}

fn wall_ms() -> u64 {
    use outpost::clock::Clock;
    clock::SystemClock.now_ms()
}

fn msg(peer: &str, id: String) -> NewMessage {
    let t = wall_ms();
    NewMessage {
        queue: "outbox".into(),
        peer: peer.into(),
        message_id: id,
        payload_type: "telemetry".into(),
        priority: 0,
        created_at_ms: t,
        expires_at_ms: t + 24 * 3600 * 1000,
        body: vec![0xA5; BODY],
        max_attempts: None,
        dedup_until_ms: None,
    }
}

/// Message ids as the product makes them (SPEC §2: ULID or UUIDv7, time-ordered).
fn id() -> String {
    uuid::Uuid::now_v7().to_string()
}

fn opts(kind: EngineKind) -> StoreOptions {
    StoreOptions {
        engine: kind,
        max_messages_per_recipient: 1_000_000,
        max_store_bytes: 4 * 1024 * 1024 * 1024,
        ..StoreOptions::default()
    }
}

fn open(kind: EngineKind, dir: &Path) -> Store {
    Store::open(dir, opts(kind), clock::system()).expect("open store")
}

fn write_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// utime + stime of this process, in clock ticks (USER_HZ, 100 on Linux).
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    num(11) + num(12)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The disk's floor: append 512 bytes and fdatasync, one at a time.
/// `size`-byte appends + fdatasync, one at a time (the disk floor is `BODY` bytes).
fn fdatasync_floor(dir: &Path, n: usize, size: usize) -> (Duration, Duration) {
    let path = dir.join("floor.bin");
    let mut f = std::fs::File::create(&path).expect("floor file");
    settle();
    let buf = vec![0x5Au8; size];
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = now();
        f.write_all(&buf).expect("write");
        f.sync_data().expect("fdatasync");
        lat.push(t.elapsed());
    }
    let _ = std::fs::remove_file(&path);
    lat.sort();
    (pct(&lat, 0.5), pct(&lat, 0.99))
}

struct Row {
    engine: &'static str,
    p50: Duration,
    p99: Duration,
    tput1: f64,
    tput64: f64,
    group64: f64,
    /// 64 async tasks on a tokio runtime (the daemon's callers) → 1 recipient.
    tput64t: f64,
    wb_per_msg_64: f64,
    tput64r: f64,
    wb_per_msg_64r: f64,
    wb_per_msg_1: f64,
    drain: Duration,
    rss_kib: u64,
    rss_fill_kib: u64,
}

/// Writes back every dirty page on the machine before a measured phase starts, so a
/// phase is not charged for the previous phase's (or the store fill's) writeback
/// competing with its fsyncs.
fn settle() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

fn one_producer(kind: EngineKind, dir: &Path, n: usize) -> (Duration, Duration, f64, f64) {
    let s = open(kind, dir);
    settle();
    let mut lat = Vec::with_capacity(n);
    let wb0 = write_bytes();
    let t0 = now();
    for _ in 0..n {
        let t = now();
        s.enqueue(msg("one", id())).wait().expect("enqueue");
        lat.push(t.elapsed());
    }
    let total = t0.elapsed();
    let wb = write_bytes() - wb0;
    lat.sort();
    (
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        n as f64 / total.as_secs_f64(),
        wb as f64 / n as f64,
    )
}

/// `producers` threads enqueue `per` messages each, to one shared recipient
/// (`recipients == 1`, the node's outbox to its gateway) or one recipient each.
/// Throughput, bytes written per message and messages per fsync of a phase that
/// started at `t0` with `write_bytes` at `wb0` and enqueued `n` messages.
fn phase_result(s: &Store, t0: Instant, wb0: u64, n: usize) -> (f64, f64, f64) {
    let total = t0.elapsed();
    let wb = write_bytes() - wb0;
    let c = s.commit_stats();
    (
        n as f64 / total.as_secs_f64(),
        wb as f64 / n as f64,
        c.requests as f64 / c.syncs.max(1) as f64,
    )
}

fn many_producers(
    kind: EngineKind,
    dir: &Path,
    producers: usize,
    recipients: usize,
    per: usize,
) -> (f64, f64, f64) {
    let s = open(kind, dir);
    settle();
    let wb0 = write_bytes();
    let t0 = now();
    let threads: Vec<_> = (0..producers)
        .map(|p| {
            let s = s.clone();
            std::thread::spawn(move || {
                for _ in 0..per {
                    s.enqueue(msg(&format!("p{}", p % recipients), id()))
                        .wait()
                        .expect("enqueue");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("producer");
    }
    phase_result(&s, t0, wb0, producers * per)
}

/// The same as [`many_producers`] with the daemon's kind of caller: `producers` tasks
/// awaiting `enqueue` on a multi-thread tokio runtime with one worker per core (what
/// `outpost run` builds), instead of OS threads blocked in `wait()`.
fn many_tasks(kind: EngineKind, dir: &Path, producers: usize, per: usize) -> (f64, f64, f64) {
    let s = open(kind, dir);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    settle();
    let wb0 = write_bytes();
    let t0 = now();
    rt.block_on(async {
        let tasks: Vec<_> = (0..producers)
            .map(|_| {
                let s = s.clone();
                tokio::spawn(async move {
                    for _ in 0..per {
                        s.enqueue(msg("p0", id())).await.expect("enqueue");
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("producer");
        }
    });
    phase_result(&s, t0, wb0, producers * per)
}

fn drain(kind: EngineKind, dir: &Path, n: usize) -> Duration {
    let s = open(kind, dir);
    for _ in 0..n / 1000 {
        let mut b = Batch::new();
        for _ in 0..1000 {
            b.enqueue(msg("drain", id()));
        }
        s.commit(b).wait().expect("fill");
    }
    settle();
    if let Some(ms) = std::env::var("OUTPOST_BENCH_DRAIN_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        // A quiet gap that separates fill and drain in a `perf record` timeline.
        std::thread::sleep(Duration::from_millis(ms));
    }
    // Read batch n+1 while the ack of batch n commits (a cursor instead of the head);
    // at most 8 acks in flight, and the drain ends when every ack is durable.
    let t0 = now();
    let mut done = 0;
    let mut in_flight = std::collections::VecDeque::new();
    let mut last = None;
    loop {
        let now_ms = s.now_ms();
        let batch = s
            .next_batch_after("outbox", "drain", last.as_ref(), 50, now_ms)
            .expect("read");
        let Some(tail) = batch.last().cloned() else {
            break;
        };
        let ids = batch.into_iter().map(|m| m.message_id).collect::<Vec<_>>();
        done += ids.len();
        in_flight.push_back(s.ack("outbox", "drain", ids, now_ms));
        if in_flight.len() > 8 {
            in_flight.pop_front().expect("ack").wait().expect("ack");
        }
        last = Some(tail);
    }
    for a in in_flight {
        a.wait().expect("ack");
    }
    let el = t0.elapsed();
    assert_eq!(done, n, "drained everything");
    el
}

/// Median time of a sweep (expiry + prune) when nothing is due, with `recipients`
/// queues of two messages each (24 h TTL).
fn sweep_idle(dir: &Path, recipients: usize) -> Duration {
    let s = open(EngineKind::Sqlite, dir);
    for chunk in (0..recipients).collect::<Vec<_>>().chunks(500) {
        let mut b = Batch::new();
        for r in chunk {
            for _ in 0..2 {
                b.enqueue(msg(&format!("node{r}"), id()));
            }
        }
        s.commit(b).wait().expect("fill");
    }
    settle();
    let mut lat = Vec::new();
    for _ in 0..41 {
        let t0 = now();
        s.sweep_expired(s.now_ms()).wait().expect("sweep");
        lat.push(t0.elapsed());
    }
    lat.sort();
    lat[lat.len() / 2]
}

/// Child mode: `store rss-fill|rss-run|cut-fill <engine> <dir>`; prints `HWM <kib>`.
fn child(mode: &str, engine: &str, dir: &Path) {
    let kind = EngineKind::all()
        .into_iter()
        .find(|k| k.name() == engine)
        .expect("engine");
    let s = open(kind, dir);
    if mode == "cut-fill" {
        // One message per commit, then gone without closing the store: what a power cut
        // leaves (a WAL full of committed frames that the next open recovers).
        for _ in 0..COLD_FILL {
            s.enqueue(msg("one", id())).wait().expect("enqueue");
        }
        println!("HWM {}", status_kib("VmHWM:"));
        std::process::exit(0);
    }
    if mode == "rss-fill" {
        for c in 0..100 {
            let mut b = Batch::new();
            for i in 0..1000 {
                b.enqueue(msg(&format!("peer{}", i % 10), format!("r{c}-{i}")));
            }
            s.commit(b).wait().expect("fill");
        }
    } else {
        // A working daemon on a 100k backlog: counts, stats, a flush round, new traffic.
        let now_ms = s.now_ms();
        let mut total = 0;
        for p in 0..10 {
            let peer = format!("peer{p}");
            total += s.pending("outbox", &peer).expect("pending");
            let b = s.next_batch("outbox", &peer, 50, now_ms).expect("batch");
            let ids = b.into_iter().map(|m| m.message_id).collect();
            s.ack("outbox", &peer, ids, now_ms).wait().expect("ack");
        }
        assert_eq!(total, 100_000);
        s.queue_stats(now_ms).expect("stats");
        s.sweep_expired(now_ms).wait().expect("sweep");
        for i in 0..1000 {
            s.enqueue(msg("peer0", format!("new{i}")))
                .wait()
                .expect("enqueue");
        }
    }
    drop(s);
    println!("HWM {}", status_kib("VmHWM:"));
}

fn rss_child(exe: &Path, mode: &str, kind: EngineKind, dir: &Path) -> u64 {
    let out = std::process::Command::new(exe)
        .args([mode, kind.name()])
        .arg(dir)
        .output()
        .expect("spawn child");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("HWM "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "child {mode} failed: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

/// Messages the `cut-fill` child commits before it vanishes.
const COLD_FILL: usize = 5_000;

/// Bytes written per one-message commit after the store was reopened with a cold page
/// cache (a reboot after a power cut): a child fills it and exits without closing, the
/// page cache is dropped (needs root), and this process enqueues `n`. `None` without
/// root.
fn cold_restart(exe: &Path, dir: &Path, n: usize) -> Option<f64> {
    rss_child(exe, "cut-fill", EngineKind::Sqlite, dir);
    if let Err(e) = std::fs::write("/proc/sys/vm/drop_caches", "3") {
        println!("cold restart: skipped, cannot drop the page cache ({e}; needs root)");
        return None;
    }
    let (_, _, _, wb) = one_producer(EngineKind::Sqlite, dir, n);
    Some(wb)
}

fn bench_root() -> PathBuf {
    match std::env::var("OUTPOST_BENCH_DIR") {
        Ok(d) => PathBuf::from(d),
        Err(_) => PathBuf::from("target/bench-store"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() >= 4 && (args[1].starts_with("rss-") || args[1] == "cut-fill") {
        child(&args[1], &args[2], Path::new(&args[3]));
        return;
    }
    let quick = std::env::var("OUTPOST_BENCH_QUICK").is_ok();
    let root = bench_root();
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("bench dir");
    let exe = std::env::current_exe().expect("exe");

    if std::env::var("OUTPOST_BENCH_DRAIN_ONLY").is_ok() {
        // For profiling the drain alone: `perf record` this, with
        // OUTPOST_BENCH_DRAIN_PAUSE_MS=1000 and `perf report --time` after the gap.
        let el = drain(EngineKind::Sqlite, &root.join("sqlite-drain"), 10_000);
        println!("drain 10,000: {:.3} s", el.as_secs_f64());
        return;
    }
    if std::env::var("OUTPOST_BENCH_SWEEP_ONLY").is_ok() {
        // What an idle sweep costs a gateway holding mail for many offline nodes.
        for recipients in [100, 1_000, 5_000] {
            let per = sweep_idle(&root.join(format!("sweep-{recipients}")), recipients);
            println!(
                "sweep with nothing due, {recipients} recipients x 2 queued: {:.0} µs",
                us(per)
            );
        }
        return;
    }
    if std::env::var("OUTPOST_BENCH_ONE_ONLY").is_ok() {
        // For profiling the one-producer path alone.
        let (p50, p99, tput, wb) =
            one_producer(EngineKind::Sqlite, &root.join("sqlite-one"), 20_000);
        println!(
            "1 producer: p50 {:.0} µs, p99 {:.0} µs, {tput:.0} msg/s, {wb:.0} B/msg",
            us(p50),
            us(p99)
        );
        return;
    }
    if std::env::var("OUTPOST_BENCH_COLD_ONLY").is_ok() {
        // Linux ≥ 6.16 with ext4: what reading the WAL back after a power cut did to the
        // bytes written per commit (store::engine::sqlite::readahead).
        if let Some(wb) = cold_restart(&exe, &root.join("sqlite-cold"), 5_000) {
            println!("1 producer after an unclean stop and a cold page cache: {wb:.0} B/msg");
        }
        return;
    }
    if std::env::var("OUTPOST_BENCH_MANY_ONLY").is_ok() {
        // For tracing one 64-producer run alone (`strace`/`perf` this); keeps the store.
        let kind = EngineKind::Sqlite;
        let cpu0 = cpu_ticks();
        let (t, wb, g) = many_producers(kind, &root.join("sqlite-many"), 64, 1, 400);
        let cpu_us = (cpu_ticks() - cpu0) as f64 * 10_000.0 / (64.0 * 400.0);
        println!(
            "64 producers: {t:.0} msg/s, {wb:.0} B/msg, {g:.1} per fsync, {cpu_us:.1} µs CPU/msg"
        );
        let cpu0 = cpu_ticks();
        let (t, wb, g) = many_tasks(kind, &root.join("sqlite-tasks"), 64, 400);
        let cpu_us = (cpu_ticks() - cpu0) as f64 * 10_000.0 / (64.0 * 400.0);
        println!("64 tasks: {t:.0} msg/s, {wb:.0} B/msg, {g:.1} per fsync, {cpu_us:.1} µs CPU/msg");
        return;
    }
    let (f50, f99) = fdatasync_floor(&root, if quick { 200 } else { 2000 }, BODY);
    // What a one-message SQLite commit writes: ~5 WAL frames of one page + a 24-byte
    // header (record, its key-index entry, the id entry with meta and the recipient
    // counter in the same leaf, and now and then page 1 or a split's pages):
    // `scripts/wal-breakdown.py --one` of the 1-producer phase counts 4.4 frames per
    // enqueue (7.14 before expiry-ordered lanes). The disk's own
    // price for that many bytes, measured like the floor.
    let commit_bytes = COMMIT_PAGES * (SQLITE_PAGE_SIZE + 24);
    let (c50, c99) = fdatasync_floor(&root, if quick { 200 } else { 2000 }, commit_bytes);
    let mut rows = Vec::new();
    let only = std::env::var("OUTPOST_BENCH_ENGINE").ok();
    for kind in EngineKind::all() {
        let name = kind.name();
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let d = |what: &str| root.join(format!("{name}-{what}"));
        eprintln!("[{name}] 1 producer");
        let (p50, p99, tput1, wb1) = one_producer(kind, &d("one"), if quick { 300 } else { 3000 });
        eprintln!("[{name}] 64 producers, 1 recipient");
        let per = if quick { 50 } else { 400 };
        let (tput64, wb64, group64) = many_producers(kind, &d("many"), 64, 1, per);
        eprintln!("[{name}] 64 async tasks, 1 recipient");
        let (tput64t, _, _) = many_tasks(kind, &d("tasks"), 64, per);
        eprintln!("[{name}] 64 producers, 64 recipients");
        let (tput64r, wb64r, _) = many_producers(kind, &d("many64"), 64, 64, per);
        eprintln!("[{name}] drain 10,000");
        let drain = drain(kind, &d("drain"), 10_000);
        eprintln!("[{name}] rss with 100,000 queued");
        let rss_fill_kib = rss_child(&exe, "rss-fill", kind, &d("rss"));
        let rss_kib = rss_child(&exe, "rss-run", kind, &d("rss"));
        rows.push(Row {
            engine: name,
            p50,
            p99,
            tput1,
            tput64,
            group64,
            tput64t,
            wb_per_msg_64: wb64,
            tput64r,
            wb_per_msg_64r: wb64r,
            wb_per_msg_1: wb1,
            drain,
            rss_kib,
            rss_fill_kib,
        });
    }

    println!(
        "Disk floor (512 B append + fdatasync): p50 {:.0} µs, p99 {:.0} µs",
        us(f50),
        us(f99)
    );
    println!(
        "Same for the {COMMIT_PAGES} pages of a one-message SQLite commit ({} B): p50 {:.0} µs ({:.2}× the floor), p99 {:.0} µs\n",
        commit_bytes,
        us(c50),
        us(c50) / us(f50).max(1.0),
        us(c99)
    );
    println!("| engine | enqueue p50 | p99 | p50 / floor | 1 producer msg/s | 64 producers msg/s | 64 / 1 | messages per fsync | 64 async tasks msg/s | tasks / 1 | bytes written/msg, 64 prod. | 1 prod. | 64 prod. → 64 recipients msg/s | bytes/msg | drain 10k | peak RSS, 100k queued (fill process) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {:.0} µs | {:.0} µs | {:.2}× | {:.0} | {:.0} | {:.1}× | {:.1} | {:.0} | {:.1}× | {:.0} B | {:.0} B | {:.0} | {:.0} B | {:.3} s | {:.1} MiB ({:.1} MiB) |",
            r.engine,
            us(r.p50),
            us(r.p99),
            us(r.p50) / us(f50).max(1.0),
            r.tput1,
            r.tput64,
            r.tput64 / r.tput1.max(1.0),
            r.group64,
            r.tput64t,
            r.tput64t / r.tput1.max(1.0),
            r.wb_per_msg_64,
            r.wb_per_msg_1,
            r.tput64r,
            r.wb_per_msg_64r,
            r.drain.as_secs_f64(),
            r.rss_kib as f64 / 1024.0,
            r.rss_fill_kib as f64 / 1024.0,
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}
