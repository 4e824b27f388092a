#!/usr/bin/env python3
"""One run of the peers benchmark (issue #16 part 3); driven by scripts/bench-peers.sh.

The same work on every peer: 512-byte messages for one recipient; durable enqueue of
N/10 messages from 1 producer (one message in flight), then of the other 9N/10 from 64
producers (one in flight each); then a drain of all N queued messages until the queue is
empty. Measured from /proc of the server process: bytes written to storage during the
enqueue (`write_bytes`) per message, peak RSS (`VmHWM`) at the end of the drain, CPU.

Usage: peers.py RUN_DIR [peer ...]   (peers: outpost redis nats mosquitto sqlite)
       peers.py --summary RESULTS.jsonl   (medians, spread and ratios to outpost)
Prints one JSON object per peer per line on stdout (and a readable line on stderr).
Every server is started on 127.0.0.1, a free port, a directory under RUN_DIR; its pid
is written to RUN_DIR/pids so the calling script's trap can stop it if this dies.
"""

import asyncio
import json
import os
import resource
import signal
import re
import socket
import sqlite3
import subprocess
import sys
import threading
import time

N = int(os.environ.get("OUTPOST_BENCH_SYNC_N", "10000"))
N1 = max(N // 10, 1)
N64 = N - N1
SIZE = 512
EXPIRES_MS = 1_790_003_600_000  # every message's expiry (the TTL index's score)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def usage(pid):
    """CPU seconds, bytes written to storage, peak RSS (KiB) of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(") ", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    cpu = (int(rest[11]) + int(rest[12])) / tick
    wb = 0
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("write_bytes:"):
                wb = int(line.split()[1])
    hwm = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return {"cpu": cpu, "wb": wb, "hwm_kib": hwm}


def client_cpu():
    """CPU seconds of this process and its finished children (the load generators)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + ch.ru_utime + ch.ru_stime


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, proc, limit=20.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"port {port} not open after {limit} s")


class Server:
    def __init__(self, run_dir, name, argv, port, cwd):
        self.log = open(os.path.join(cwd, f"{name}.log"), "w")
        self.proc = subprocess.Popen(argv, cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        with open(os.path.join(run_dir, "pids"), "a") as f:
            f.write(f"{self.proc.pid}\n")
        wait_port(port, self.proc)
        # BENCH_PEERS_STRACE=DIR: count the server's sync calls (a check of what each peer
        # calls durable; that run's timings are not comparable: strace slows the server).
        self.strace = None
        self.name, self.cwd = name, cwd
        if os.environ.get("BENCH_PEERS_STRACE"):
            self.strace = subprocess.Popen(
                ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync,sync_file_range,msync,sync",
                 "-o", os.path.join(cwd, f"{name}.strace"), "-p", str(self.proc.pid)],
                stderr=subprocess.DEVNULL)
            time.sleep(1)

    @property
    def pid(self):
        return self.proc.pid

    def stop(self):
        if self.strace:
            self.strace.send_signal(signal.SIGINT)  # detach, write the summary
            self.strace.wait()
            out = os.environ["BENCH_PEERS_STRACE"]
            with open(os.path.join(self.cwd, f"{self.name}.strace")) as f, \
                    open(os.path.join(out, f"{self.name}.strace"), "a") as g:
                g.write(f.read())
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def result(peer, durability, rate1, rate64, drain_s, enq, end, extra=None):
    r = {
        "peer": peer,
        "durability": durability,
        "enq1_per_s": rate1,
        "enq64_per_s": rate64,
        "drain_s": drain_s,
        "bytes_per_msg": enq["wb"] / N,
        "server_cpu_us_per_msg_enqueue": enq["cpu"] * 1e6 / N,
        "peak_rss_mib": end["hwm_kib"] / 1024,
        "n": N,
    }
    if extra:
        r.update(extra)
    return r


def delta(a, b):
    return {"cpu": b["cpu"] - a["cpu"], "wb": b["wb"] - a["wb"], "hwm_kib": b["hwm_kib"]}


# --------------------------------------------------------------------------- outpost
def bench_outpost(run_dir):
    """`cargo bench --bench sync` (built beforehand), its printed lines parsed."""
    env = dict(os.environ, OUTPOST_BENCH_SYNC_N=str(N))
    out = subprocess.run(["cargo", "bench", "--bench", "sync"], env=env, check=True,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    with open(os.path.join(run_dir, "outpost-sync.txt"), "a") as f:
        f.write(out)

    def num(pattern):
        m = re.search(pattern, out, re.M)
        if not m:
            raise RuntimeError(f"sync bench output lacks {pattern!r}:\n{out}")
        return float(m.group(1))

    drain_block = out.split("drain ", 1)[1]
    gw_rss = float(re.search(r"^  gateway: .*peak RSS (\d+) KiB", drain_block, re.M).group(1))
    node_rss = float(re.search(r"^  node: .*peak RSS (\d+) KiB", drain_block, re.M).group(1))
    return {
        "peer": "outpost",
        "durability": "gateway and node: SQLite WAL, fsync before each 202 / each stored batch",
        "enq1_per_s": num(r"^gateway enqueue, 1 client:\s+(\d+)"),
        "enq64_per_s": num(r"^gateway enqueue, 64 clients:\s+(\d+)"),
        "drain_s": num(r"^drain \d+ gateway → node: ([\d.]+) s"),
        "bytes_per_msg": num(r"bytes written per message (\d+)"),
        "server_cpu_us_per_msg_enqueue": num(r"gateway CPU per message (\d+)"),
        "peak_rss_mib": gw_rss / 1024,
        "node_peak_rss_mib": node_rss / 1024,
        "seal_sign_us_all_cores": num(r"seal\+sign (\d+) µs/msg"),
        "upload_s": num(r"^upload \d+ node → gateway: ([\d.]+) s"),
        "n": N,
    }


# --------------------------------------------------------------------------- Redis
# RPUSH the message to the device's list and ZADD its id (scored by expiry) to the
# device's TTL set, atomically. redis-benchmark sends one command per request, so the
# pair is one EVAL (Redis 7 writes a script's effects to the AOF as MULTI … EXEC, as a
# client's MULTI would be).
REDIS_LUA = ("redis.call('RPUSH', KEYS[1], ARGV[1] .. ':' .. ARGV[2]); "
             "redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1]); return 1")


def bench_redis(run_dir):
    import redis  # pip: redis

    d = os.path.join(run_dir, "redis")
    os.makedirs(d)
    port = free_port()
    with open(os.path.join(d, "redis.conf"), "w") as f:
        f.write(f"bind 127.0.0.1\nport {port}\ndir {d}\ndaemonize no\nsave \"\"\n"
                "appendonly yes\nappendfsync always\n")
    srv = Server(run_dir, "redis", ["redis-server", os.path.join(d, "redis.conf")], port, d)
    try:
        # id = phase letter + __rand_int__ (12 digits, 0 ≤ n < 10^9: redis-benchmark reads -r
        # as a C int, so a larger range silently gives 0 every time; and two invocations in
        # the same second draw the same sequence, hence the phase letter); element = id ":"
        # filler, 512 bytes in all.
        filler = "x" * (SIZE - 14)
        base = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-r", "1000000000",
                "--csv"]

        def rb(n, c):
            cmd = ["EVAL", REDIS_LUA, "2", "q:dev1", "ttl:dev1", f"{'ab'[c > 1]}__rand_int__",
                   filler, str(EXPIRES_MS)]
            out = subprocess.run(base + ["-n", str(n), "-c", str(c)] + cmd, check=True,
                                 stdout=subprocess.PIPE, text=True).stdout
            # --csv: a header line, then "test","rps",...
            row = [ln for ln in out.splitlines() if ln.startswith('"EVAL')][-1]
            return float(row.split('","')[1])

        u0 = usage(srv.pid)
        rate1 = rb(N1, 1)
        c0 = client_cpu()
        rate64 = rb(N64, 64)
        c64 = client_cpu() - c0
        u1 = usage(srv.pid)
        r = redis.Redis(host="127.0.0.1", port=port)
        queued = r.llen("q:dev1")
        ids = r.zcard("ttl:dev1")
        # Distinct random ids (a birthday collision among 10,000 in 10^9 is ~5% likely).
        assert ids >= N - 5, f"TTL set holds {ids} ids for {N} messages"
        # Drain: LRANGE + LTRIM in a MULTI, then ZREM the batch's ids, until empty.
        t0 = time.monotonic()
        got = 0
        while True:
            p = r.pipeline(transaction=True)
            p.lrange("q:dev1", 0, 499)
            p.ltrim("q:dev1", 500, -1)
            items, _ = p.execute()
            if not items:
                break
            got += len(items)
            r.zrem("ttl:dev1", *[i.split(b":", 1)[0] for i in items])
        drain = time.monotonic() - t0
        u2 = usage(srv.pid)
        assert got == queued == N, (got, queued)
        r.close()
        return result("redis", "AOF, appendfsync always (fsync before replying; "
                      "RDB snapshots off)", rate1, rate64, drain, delta(u0, u1), u2,
                      {"client": "redis-benchmark (C) for enqueue; redis-py for drain",
                       "ttl_set_ids": ids,
                       "client_cpu_us_per_msg_enq64": c64 * 1e6 / N64})
    finally:
        srv.stop()


# --------------------------------------------------------------------------- NATS
def bench_nats(run_dir):
    import nats  # pip: nats-py
    from nats.js.api import RetentionPolicy, StorageType

    d = os.path.join(run_dir, "nats")
    os.makedirs(d)
    port = free_port()
    with open(os.path.join(d, "nats.conf"), "w") as f:
        f.write(f'listen: "127.0.0.1:{port}"\njetstream {{\n  store_dir: "{d}/js"\n}}\n')
    srv = Server(run_dir, "nats", ["nats-server", "-c", os.path.join(d, "nats.conf")], port, d)
    url = f"nats://127.0.0.1:{port}"
    payload = b"x" * SIZE
    try:
        async def go():
            nc = await nats.connect(url)
            js = nc.jetstream()
            await js.add_stream(name="Q", subjects=["dev.*"], storage=StorageType.FILE,
                                retention=RetentionPolicy.WORK_QUEUE)

            async def producer(count):
                c = await nats.connect(url)
                j = c.jetstream()
                for _ in range(count):
                    await j.publish("dev.dev1", payload)  # waits for the stream's ack
                await c.close()

            u0 = usage(srv.pid)
            t0 = time.monotonic()
            await producer(N1)
            rate1 = N1 / (time.monotonic() - t0)
            per = [N64 // 64 + (1 if i < N64 % 64 else 0) for i in range(64)]
            conns = []  # connect first, so the timing is of publishing only
            for _ in range(64):
                conns.append(await nats.connect(url))

            async def prod(c, count):
                j = c.jetstream()
                for _ in range(count):
                    await j.publish("dev.dev1", payload)

            t0, c0 = time.monotonic(), client_cpu()
            await asyncio.gather(*[prod(c, k) for c, k in zip(conns, per)])
            rate64 = N64 / (time.monotonic() - t0)
            c64 = client_cpu() - c0
            u1 = usage(srv.pid)
            for c in conns:
                await c.close()
            info = await js.stream_info("Q")
            assert info.state.messages == N, info.state.messages
            # Drain: a durable pull consumer, fetching batches of 500, acking each
            # message, until the work-queue stream is empty.
            t0 = time.monotonic()
            sub = await js.pull_subscribe("dev.dev1", durable="dev1")
            got = 0
            while got < N:
                try:
                    msgs = await sub.fetch(500, timeout=2)
                except nats.errors.TimeoutError:
                    break
                for m in msgs:
                    await m.ack()
                got += len(msgs)
            await nc.flush()
            while (await js.stream_info("Q")).state.messages > 0:
                await asyncio.sleep(0.002)
            drain = time.monotonic() - t0
            u2 = usage(srv.pid)
            await nc.close()
            assert got == N, got
            return rate1, rate64, drain, delta(u0, u1), u2, c64

        rate1, rate64, drain, enq, end, c64 = asyncio.run(go())
        return result("nats", "JetStream file store, nats-server 2.9.10 defaults: no fsync "
                      "per message (this version has no sync_interval option)", rate1, rate64,
                      drain, enq, end, {"client": "nats-py (Python asyncio)",
                                        "client_cpu_us_per_msg_enq64": c64 * 1e6 / N64})
    finally:
        srv.stop()


# --------------------------------------------------------------------------- Mosquitto
def bench_mosquitto(run_dir):
    import paho.mqtt.client as mqtt  # pip: paho-mqtt

    d = os.path.join(run_dir, "mosquitto")
    os.makedirs(d)
    port = free_port()
    with open(os.path.join(d, "mosquitto.conf"), "w") as f:
        f.write(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\n"
                f"persistence_location {d}/\nautosave_interval 1800\n"
                "max_queued_messages 1000000\nmax_queued_bytes 0\n")
    srv = Server(run_dir, "mosquitto", ["mosquitto", "-c", os.path.join(d, "mosquitto.conf")],
                 port, d)
    topic = "dev/dev1"
    try:
        got = {"n": 0, "done": threading.Event(), "subbed": threading.Event()}

        def on_message(c, u, m):
            got["n"] += 1
            if got["n"] >= N:
                got["done"].set()

        def subscriber():
            c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="dev1",
                            clean_session=False)
            c.on_message = on_message
            c.on_subscribe = lambda *a: got["subbed"].set()
            return c

        # The device's persistent session: connect, subscribe QoS 1, go offline.
        s = subscriber()
        s.connect("127.0.0.1", port)
        s.loop_start()
        s.subscribe(topic, qos=1)
        assert got["subbed"].wait(10)
        s.disconnect()
        s.loop_stop()

        payload = b"x" * SIZE

        def producer():
            c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, clean_session=True)
            c.max_inflight_messages_set(1)
            c.connect("127.0.0.1", port)
            c.loop_start()
            return c

        def publish(c, count):
            for _ in range(count):
                c.publish(topic, payload, qos=1).wait_for_publish()  # until its PUBACK

        def close(c):
            c.disconnect()
            c.loop_stop()

        u0 = usage(srv.pid)
        c = producer()
        t0 = time.monotonic()
        publish(c, N1)
        rate1 = N1 / (time.monotonic() - t0)
        close(c)
        per = [N64 // 64 + (1 if i < N64 % 64 else 0) for i in range(64)]
        cs = [producer() for _ in per]  # connected first, so the timing is of publishing
        ts = [threading.Thread(target=publish, args=(c, k)) for c, k in zip(cs, per)]
        t0, c0 = time.monotonic(), client_cpu()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        rate64 = N64 / (time.monotonic() - t0)
        c64 = client_cpu() - c0
        for c in cs:
            close(c)
        u1 = usage(srv.pid)
        # Drain: the device reconnects to its session and receives the backlog.
        t0 = time.monotonic()
        s = subscriber()
        s.connect("127.0.0.1", port)
        s.loop_start()
        assert got["done"].wait(300), got["n"]
        drain = time.monotonic() - t0
        u2 = usage(srv.pid)
        s.disconnect()
        s.loop_stop()
        assert got["n"] == N, got["n"]
        return result("mosquitto", "persistence true, autosave_interval 1800 (default): the "
                      "in-memory queue is written to mosquitto.db every 30 min and at "
                      "shutdown, never per message", rate1, rate64, drain, delta(u0, u1), u2,
                      {"client": "paho-mqtt (Python), one client per producer, one "
                       "message in flight each",
                       "client_cpu_us_per_msg_enq64": c64 * 1e6 / N64})
    finally:
        srv.stop()


# --------------------------------------------------------------------------- SQLite
def sqlite_child(path):
    """Runs in its own process so /proc/self is the mailbox's alone."""
    def connect():
        c = sqlite3.connect(path, timeout=60, isolation_level=None)
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("PRAGMA synchronous=FULL")
        return c

    c = connect()
    c.execute("CREATE TABLE IF NOT EXISTS mailbox (id INTEGER PRIMARY KEY, recipient TEXT "
              "NOT NULL, expires_ms INTEGER NOT NULL, body BLOB NOT NULL)")
    c.execute("CREATE INDEX IF NOT EXISTS by_recipient ON mailbox (recipient, id)")
    c.close()
    body = b"x" * SIZE

    def enqueue_one():
        # The naive mailbox: a connection and a transaction per message.
        c = connect()
        c.execute("BEGIN IMMEDIATE")
        c.execute("INSERT INTO mailbox (recipient, expires_ms, body) VALUES (?, ?, ?)",
                  ("dev1", EXPIRES_MS, body))
        c.execute("COMMIT")
        c.close()

    u0 = usage(os.getpid())
    t0 = time.monotonic()
    for _ in range(N1):
        enqueue_one()
    rate1 = N1 / (time.monotonic() - t0)
    per = [N64 // 64 + (1 if i < N64 % 64 else 0) for i in range(64)]
    start = threading.Barrier(65)

    def worker(k):
        start.wait()
        for _ in range(k):
            enqueue_one()

    ts = [threading.Thread(target=worker, args=(k,)) for k in per]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.monotonic()
    for t in ts:
        t.join()
    rate64 = N64 / (time.monotonic() - t0)
    u1 = usage(os.getpid())
    # Drain in batches of 500: read the oldest, delete them, one transaction per batch.
    t0 = time.monotonic()
    c = connect()
    got = 0
    while True:
        c.execute("BEGIN IMMEDIATE")
        rows = c.execute("SELECT id, body FROM mailbox WHERE recipient = ? ORDER BY id "
                         "LIMIT 500", ("dev1",)).fetchall()
        if not rows:
            c.execute("COMMIT")
            break
        c.execute("DELETE FROM mailbox WHERE recipient = ? AND id <= ?", ("dev1", rows[-1][0]))
        c.execute("COMMIT")
        got += len(rows)
    drain = time.monotonic() - t0
    c.close()
    u2 = usage(os.getpid())
    assert got == N, got
    print(json.dumps(result("sqlite", f"WAL, synchronous=FULL (fsync per commit); SQLite "
                            f"{sqlite3.sqlite_version} via Python's sqlite3", rate1, rate64,
                            drain, delta(u0, u1), u2,
                            {"client": "in-process (Python threads); RSS includes the Python "
                             "interpreter"})))


def bench_sqlite(run_dir):
    d = os.path.join(run_dir, "sqlite")
    os.makedirs(d)
    out = subprocess.run([sys.executable, __file__, "--sqlite-child",
                          os.path.join(d, "mailbox.db")], check=True, stdout=subprocess.PIPE,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


PEERS = {"outpost": bench_outpost, "redis": bench_redis, "nats": bench_nats,
         "mosquitto": bench_mosquitto, "sqlite": bench_sqlite}


METRICS = [  # key, heading, format, higher is better
    ("enq1_per_s", "enqueue, 1 producer (msg/s)", "{:,.0f}", True),
    ("enq64_per_s", "enqueue, 64 producers (msg/s)", "{:,.0f}", True),
    ("drain_s", "drain of N (s)", "{:.3f}", False),
    ("bytes_per_msg", "bytes written per message", "{:,.0f}", False),
    ("peak_rss_mib", "peak RSS (MiB)", "{:.1f}", False),
    ("server_cpu_us_per_msg_enqueue", "server CPU per message enqueued (µs)", "{:.0f}", False),
]


def summary(path):
    """Medians and min–max per peer over the runs in a results file, and ratios."""
    import statistics

    runs, floors = {}, []
    for line in open(path):
        r = json.loads(line)
        if "floor_p50_us" in r:
            floors.append(r["floor_p50_us"])
            continue
        runs.setdefault(r["peer"], []).append(r)
    order = [p for p in PEERS if p in runs]
    med = {p: {k: statistics.median(r[k] for r in runs[p]) for k, *_ in METRICS} for p in order}
    n = runs[order[0]][0]["n"]
    print(f"\n## medians (min–max) over {len(runs[order[0]])} runs, n = {n} messages of {SIZE} B\n")
    print("| peer | " + " | ".join(h.replace("N", f"{n:,}") for _, h, *_ in METRICS) + " |")
    print("|---" * (len(METRICS) + 1) + "|")
    for p in order:
        cells = []
        for k, _, fmt, _ in METRICS:
            vals = [r[k] for r in runs[p]]
            cells.append(f"{fmt.format(med[p][k])} ({fmt.format(min(vals))}–{fmt.format(max(vals))})")
        print(f"| {p} | " + " | ".join(cells) + " |")
    if "outpost" in med:
        print("\n## ratios to outpost (peer median / outpost median; rates: > 1 = peer "
              "faster; drain, bytes, RSS: < 1 = peer smaller)\n")
        print("| peer | " + " | ".join(h.replace("N", f"{n:,}") for _, h, *_ in METRICS) + " |")
        print("|---" * (len(METRICS) + 1) + "|")
        for p in order:
            cells = []
            for k, *_ in METRICS:
                o = med["outpost"][k]
                cells.append(f"{med[p][k] / o:.2f}×" if o else "—")
            print(f"| {p} | " + " | ".join(cells) + " |")
    if floors:
        print(f"\ndisk floor (512 B append + fdatasync, p50 per run): "
              + ", ".join(f"{f:.0f}" for f in floors) + " µs")
    print("\n## durability, as run\n")
    for p in order:
        r = runs[p][0]
        if p == "outpost" and "seal_sign_us_all_cores" in r:
            ss = [x["seal_sign_us_all_cores"] for x in runs[p]]
            nr = [x["node_peak_rss_mib"] for x in runs[p]]
            print(f"- outpost, same runs: crypto ceiling seal+sign {statistics.median(ss):.0f} µs per "
                  f"message on all cores ({min(ss):.0f}–{max(ss):.0f}); node peak RSS in the drain "
                  f"{statistics.median(nr):.1f} MiB ({min(nr):.1f}–{max(nr):.1f})")
        cc = [x["client_cpu_us_per_msg_enq64"] for x in runs[p] if "client_cpu_us_per_msg_enq64" in x]
        print(f"- {p}: {r['durability']}" + (f"; client: {r['client']}" if "client" in r else "")
              + (f"; load generator CPU at 64 producers {statistics.median(cc):.0f} µs/msg "
                 f"({min(cc):.0f}–{max(cc):.0f})" if cc else ""))


def disk_floor(run_dir, n=300):
    """p50 of a 512-byte append + fdatasync in the run's directory: what the disk gives."""
    path = os.path.join(run_dir, "floor")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        os.write(fd, b"x" * SIZE)
        os.fdatasync(fd)
        ts.append(time.perf_counter() - t0)
    os.close(fd)
    os.remove(path)
    return sorted(ts)[n // 2] * 1e6


def main():
    if sys.argv[1] == "--sqlite-child":
        sqlite_child(sys.argv[2])
        return
    if sys.argv[1] == "--summary":
        summary(sys.argv[2])
        return
    run_dir = sys.argv[1]
    floor = disk_floor(run_dir)
    log(f"  disk floor: 512 B append + fdatasync p50 {floor:.0f} µs")
    print(json.dumps({"floor_p50_us": floor}), flush=True)
    for name in sys.argv[2:] or list(PEERS):
        r = PEERS[name](run_dir)
        log(f"  {name:<10} enqueue 1: {r['enq1_per_s']:>8.0f}/s  64: {r['enq64_per_s']:>8.0f}/s"
            f"  drain {N}: {r['drain_s']:.3f} s  {r['bytes_per_msg']:>6.0f} B/msg  peak RSS "
            f"{r['peak_rss_mib']:.1f} MiB  [{r['durability']}]")
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
