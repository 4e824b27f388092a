#!/usr/bin/env python3
"""Fault harness for outpost (issue #17): a gateway and a node, real `outpost` processes,
in two network namespaces joined by a veth pair; faults between them; traffic both
ways; invariants checked afterwards. Needs root (ip netns, nft). Stdlib only.

    scripts/chaos.py SCENARIO [--messages N] [--seconds S] [--bin PATH] [--out FILE]

Scenarios (see docs/RELIABILITY.md for what each emulates and how):
  loss         10 % packet loss each way (nft numgen) + 100 ms ± 50 ms delay each way
               (userspace TCP proxy in the gateway's namespace; netem is not available)
  flap         the link drops every packet for 5-30 s, then passes for 5-30 s, repeatedly
  oneway-down  gateway -> node packets dropped, node -> gateway passes
  oneway-up    node -> gateway packets dropped, gateway -> node passes
  dup          10 % of packets duplicated each way (nft netdev egress `dup`)
  reorder      10 % of frames held back and sent after the next one, each way (a userspace
               L2 forwarder between the namespaces; netem is not available; needs ethtool)
  crash        flap + kill -9 of the gateway and of the node while the link is down or up
  clock-back   the node's clock steps back a day mid-run (libfaketime), then forward again
  clock-fwd    the node's clock steps forward a week mid-run, then back to the real time
  rtc-boot     the node restarts with its clock in 1970 while messages are queued both
               ways, then the clock is set right (NTP answering late)
  soak         no faults, steady mixed traffic; samples RSS, fds, store and WAL size of
               both processes every minute (--seconds 3600 for the documented hour)
  ci           short versions of loss, flap, oneway-down, oneway-up, dup, reorder, crash,
               clock-back, rtc-boot (a few minutes in all)

Invariants checked: every acknowledged (2xx) message delivered exactly once (commands
gateway -> node inbox, data node -> gateway inbox, queued tool calls -> their result),
FIFO per sender, nothing delivered after its expiry, the node's audit log synced to the
gateway (which verifies it against the node's signed checkpoints) and `outpost audit
verify` passing. Exit status 1 on any violation. One JSON line per scenario goes to
--out (default chaos-results.jsonl).
"""

import argparse
import asyncio
import ctypes
import http.client
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

GW = "gateway:main"
NODE = "node:pump-17"
GW_PORT = 8787
PROXY_PORT = 8788
NODE_PORT = 18000
SHORT_TTL_S = 4
STREAMS = 2  # concurrent sequential senders per direction
CLONE_NEWNET = 0x40000000
LIBC = ctypes.CDLL("libc.so.6", use_errno=True)
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
HERE = os.path.dirname(os.path.abspath(__file__))


def now_ms():
    return int(time.time() * 1000)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sh(*args, check=True, ns=None):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip()}")
    return p.stdout


def enter_ns(name):
    """Move the calling thread (only it) into network namespace `name`."""
    fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    try:
        if LIBC.setns(fd, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"setns {name}: {os.strerror(e)}")
    finally:
        os.close(fd)


# ---------------------------------------------------------------- network


class Net:
    """Namespaces `<tag>g` (gateway) and `<tag>n` (node), veth `<tag>vg` / `<tag>vn`.

    With `reorder=(pct, hold_ms, stats_path)` the two are not joined directly: each veth
    ends in a third namespace `<tag>m`, where a userspace forwarder (`run_reorder`)
    passes every Ethernet frame across, holding back `pct` % of them until the next
    frame in the same direction has gone (or `hold_ms` passed) — packet reordering,
    which this kernel's missing netem cannot do. Checksum and segmentation offloads are
    off on all four ends (ethtool), so every frame the forwarder sees is a finished
    packet of at most the MTU."""

    def __init__(self, reorder=None):
        tag = f"ch{os.getpid() % 100000}"
        self.gw_ns, self.node_ns, self.mid_ns = tag + "g", tag + "n", tag + "m"
        self.gw_if, self.node_if = tag + "vg", tag + "vn"
        sub = os.getpid() % 250
        self.gw_ip, self.node_ip = f"10.232.{sub}.1", f"10.232.{sub}.2"
        self.forwarder = None
        sh("ip", "netns", "add", self.gw_ns)
        sh("ip", "netns", "add", self.node_ns)
        if reorder is None:
            sh("ip", "link", "add", self.gw_if, "type", "veth", "peer", "name", self.node_if)
        else:
            sh("ip", "netns", "add", self.mid_ns)
            for dev in (self.gw_if, self.node_if):
                sh("ip", "link", "add", dev, "type", "veth", "peer", "name", dev + "m")
                sh("ip", "link", "set", dev + "m", "netns", self.mid_ns)
                sh("ip", "link", "set", dev + "m", "up", ns=self.mid_ns)
        sh("ip", "link", "set", self.gw_if, "netns", self.gw_ns)
        sh("ip", "link", "set", self.node_if, "netns", self.node_ns)
        for ns, dev, ip in ((self.gw_ns, self.gw_if, self.gw_ip), (self.node_ns, self.node_if, self.node_ip)):
            sh("ip", "addr", "add", f"{ip}/30", "dev", dev, ns=ns)
            sh("ip", "link", "set", dev, "up", ns=ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
        self.faults = "none"
        if reorder is not None:
            pct, hold_ms, stats_path = reorder
            for ns, dev in ((self.gw_ns, self.gw_if), (self.node_ns, self.node_if),
                            (self.mid_ns, self.gw_if + "m"), (self.mid_ns, self.node_if + "m")):
                sh("ethtool", "-K", dev, "tx", "off", "tso", "off", "gso", "off", "gro", "off", ns=ns)
            self.forwarder = subprocess.Popen(
                ["ip", "netns", "exec", self.mid_ns, sys.executable, os.path.abspath(__file__), "_reorder",
                 self.gw_if + "m", self.node_if + "m", str(pct), str(hold_ms), stats_path],
                stdout=subprocess.DEVNULL, stderr=open(stats_path + ".log", "w"))
            self.faults = f"reorder {pct}%"

    def close(self):
        if self.forwarder:
            self.forwarder.kill()
            self.forwarder.wait()
        for ns in (self.gw_ns, self.node_ns, self.mid_ns):
            sh("ip", "netns", "del", ns, check=False)

    def nft(self, ns, script):
        p = subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=script, text=True, capture_output=True)
        if p.returncode != 0:
            raise RuntimeError(f"nft in {ns}: {p.stderr.strip()}\n{script}")

    def heal(self):
        for ns in (self.gw_ns, self.node_ns):
            sh("nft", "flush", "ruleset", ns=ns, check=False)
        self.faults = "none"

    def _out_rule(self, ns, rule):
        self.nft(ns, f"table inet chaos {{\n chain out {{\n  type filter hook output priority 0;\n  {rule}\n }}\n}}\n")

    def loss(self, pct):
        self.heal()
        for ns in (self.gw_ns, self.node_ns):
            self._out_rule(ns, f"numgen random mod 100 < {pct} drop")
        self.faults = f"loss {pct}%"

    def down(self):
        self.heal()
        for ns in (self.gw_ns, self.node_ns):
            self._out_rule(ns, "oifname != \"lo\" drop")
        self.faults = "down"

    def oneway(self, direction):
        """'down': gateway -> node dropped; 'up': node -> gateway dropped."""
        self.heal()
        ns = self.gw_ns if direction == "down" else self.node_ns
        self._out_rule(ns, "oifname != \"lo\" drop")
        self.faults = f"oneway-{direction}"

    def dup(self, pct):
        self.heal()
        for ns, dev in ((self.gw_ns, self.gw_if), (self.node_ns, self.node_if)):
            self.nft(ns, f"table netdev chaosdup {{\n chain e {{\n  type filter hook egress device \"{dev}\" priority 0;\n"
                         f"  numgen random mod 100 < {pct} dup to \"{dev}\"\n }}\n}}\n")
        self.faults = f"dup {pct}%"

    def tcp_stats(self):
        out = {}
        for name, ns in (("gw", self.gw_ns), ("node", self.node_ns)):
            text = sh("cat", "/proc/net/snmp", ns=ns)
            rows = [l.split() for l in text.splitlines() if l.startswith("Tcp:")]
            if len(rows) >= 2:
                d = dict(zip(rows[0][1:], rows[1][1:]))
                out[name] = {"retrans_segs": int(d.get("RetransSegs", 0)), "out_segs": int(d.get("OutSegs", 0))}
                # Segments that arrived out of order and were queued by the receiver.
                ext = [l.split() for l in sh("cat", "/proc/net/netstat", ns=ns).splitlines() if l.startswith("TcpExt:")]
                if len(ext) >= 2:
                    out[name]["ofo_queued"] = int(dict(zip(ext[0][1:], ext[1][1:])).get("TCPOFOQueue", 0))
        return out


# ---------------------------------------------------------------- reordering forwarder


def run_reorder(a, b, pct, hold_ms, stats_path, seed=17):
    """Forward every Ethernet frame between interfaces `a` and `b` (run in the middle
    namespace); per direction, `pct` % of frames are held back and sent right after
    the next frame (or after `hold_ms` if none comes): adjacent packets swapped, the
    way a multipath radio link reorders. Counters go to `stats_path` (JSON) every
    second."""
    eth_p_all, packet_outgoing = 3, 4
    rng = random.Random(seed)
    socks = []
    for dev in (a, b):
        sk = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(eth_p_all))
        sk.bind((dev, 0))
        socks.append(sk)
    out = {socks[0]: socks[1], socks[1]: socks[0]}
    held = {socks[0]: None, socks[1]: None}
    st = {"frames": 0, "held": 0, "reordered": 0, "released_by_timer": 0}
    last_write = 0.0
    while True:
        now = time.monotonic()
        waits = [h[1] - now for h in held.values() if h]
        r, _, _ = select.select(socks, [], [], max(min(waits + [0.5]), 0))
        now = time.monotonic()
        for sk in socks:
            h = held[sk]
            if h and h[1] <= now and sk not in r:
                out[sk].send(h[0])
                held[sk] = None
                st["released_by_timer"] += 1
        for sk in r:
            frame, addr = sk.recvfrom(65535)
            if addr[2] == packet_outgoing:
                continue
            st["frames"] += 1
            h = held[sk]
            if h is None and rng.randrange(100) < pct:
                held[sk] = (frame, now + hold_ms / 1000)
                st["held"] += 1
                continue
            out[sk].send(frame)
            if h is not None:
                out[sk].send(h[0])
                held[sk] = None
                st["reordered"] += 1
        if now - last_write >= 1.0:
            with open(stats_path + ".tmp", "w") as f:
                json.dump(st, f)
            os.replace(stats_path + ".tmp", stats_path)
            last_write = now


# ---------------------------------------------------------------- delay proxy


def run_proxy(listen_ip, listen_port, to_port, delay_ms, jitter_ms):
    """A TCP proxy (run inside the gateway's namespace) that holds every chunk it reads
    for delay ± jitter ms before writing it on, in order (TCP cannot reorder bytes)."""

    async def pipe(reader, writer):
        q = asyncio.Queue()

        async def pump_out():
            release = 0.0
            while True:
                item = await q.get()
                if item is None:
                    break
                arrived, data = item
                d = max(0.0, (delay_ms + random.uniform(-jitter_ms, jitter_ms)) / 1000)
                release = max(release, arrived + d)
                wait = release - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                try:
                    writer.write(data)
                    await writer.drain()
                except (ConnectionError, OSError):
                    break
            try:
                writer.close()
            except Exception:
                pass

        out = asyncio.ensure_future(pump_out())
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                q.put_nowait((time.monotonic(), data))
        except (ConnectionError, OSError):
            pass
        q.put_nowait(None)
        await out

    async def handle(cr, cw):
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", to_port)
        except OSError:
            cw.close()
            return
        await asyncio.gather(pipe(cr, uw), pipe(ur, cw))

    async def main():
        srv = await asyncio.start_server(handle, listen_ip, listen_port)
        async with srv:
            await srv.serve_forever()

    asyncio.run(main())


# ---------------------------------------------------------------- processes


class Home:
    def __init__(self, root, name, role, node_id, listen, binary):
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir)
        self.cfg = os.path.join(self.dir, "outpost.toml")
        self.data = os.path.join(self.dir, "data")
        self.bin = binary
        self.node_id = node_id
        self.proc = None
        self.env_extra = {}
        # The gateway listens beyond loopback in plain HTTP (its nodes' delay proxies
        # speak HTTP): said on purpose, or init would give it a TLS certificate.
        plain = ["--allow-plaintext"] if role == "gateway" and not listen.startswith("127.") else []
        self.cli("init", "--role", role, "--node-id", node_id, "--data-dir", self.data, "--listen", listen, *plain)

    def cli(self, *args, stdin=None):
        p = subprocess.run([self.bin, *args, "--config", self.cfg], capture_output=True, text=True, input=stdin,
                           env={k: v for k, v in os.environ.items() if k != "OUTPOST_CONFIG"})
        if p.returncode != 0:
            raise RuntimeError(f"outpost {' '.join(args)}: {p.stdout}{p.stderr}")
        return p.stdout

    def dropin(self, name, text):
        d = os.path.join(self.dir, "outpost.d")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name), "w") as f:
            f.write(text)

    def start(self, ns):
        env = {k: v for k, v in os.environ.items() if k not in ("OUTPOST_CONFIG", "NOTIFY_SOCKET", "JOURNAL_STREAM")}
        env["OUTPOST_LOG"] = "info"
        env.update(self.env_extra)
        logf = open(os.path.join(self.dir, "daemon.log"), "a")
        # `ip netns exec` execs the command, so the child's pid is outpost's.
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns, self.bin, "run", "--config", self.cfg],
                                     stdout=subprocess.DEVNULL, stderr=logf, env=env)
        self.pid = self.proc.pid

    def kill9(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return "killed after 40 s"
            return f"exit {self.proc.returncode}"
        return "not running"

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def log_text(self):
        try:
            with open(os.path.join(self.dir, "daemon.log")) as f:
                return f.read()
        except OSError:
            return ""


# ---------------------------------------------------------------- HTTP clients


class Api:
    """Keep-alive HTTP/1.1 JSON client; the thread using it must already be in the
    right namespace."""

    def __init__(self, port, token, timeout=15):
        self.port, self.token, self.timeout = port, token, timeout
        self.conn = None

    def req(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            try:
                h = {"Authorization": f"Bearer {self.token}"}
                if data is not None:
                    h["Content-Type"] = "application/json"
                self.conn.request(method, path, body=data, headers=h)
                r = self.conn.getresponse()
                raw = r.read()
                try:
                    return r.status, json.loads(raw) if raw else None
                except ValueError:
                    return r.status, {"raw": raw[:200].decode(errors="replace")}
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                # A kept-alive connection the server closed: retry once on a new one
                # only if nothing could have been processed (fresh connection failure
                # is raised to the caller).
                self.conn.close()
                self.conn = None
                if attempt == 1 or method != "GET":
                    raise e
            except (OSError, http.client.HTTPException):
                if self.conn:
                    self.conn.close()
                self.conn = None
                raise


# ---------------------------------------------------------------- traffic


class Ledger:
    def __init__(self):
        self.lock = threading.Lock()
        # sent & acknowledged (2xx): message_id -> dict(seq, expires_at_ms)
        self.down_acked, self.up_acked, self.calls_acked = {}, {}, {}
        self.down_unanswered = self.up_unanswered = self.calls_unanswered = 0
        self.down_refused, self.up_refused = {}, {}
        # delivered: message_id -> first delivery info; dups counted
        self.down_seen, self.up_seen = {}, {}
        self.down_acked_at_consumer, self.up_acked_at_consumer = set(), set()
        self.dup_down = self.dup_up = 0
        self.ooo_down = self.ooo_up = 0
        self.expired_down = self.expired_up = 0
        # rtc-boot only: after a boot without a real-time clock the node's time resumes
        # from its floor (the last commit before the power loss), so it runs behind real
        # time by at most the downtime until NTP answers (docs/RELIABILITY.md F6). A
        # gateway → node message listed later than its expiry by less than that lag is
        # counted here, not as expired-but-delivered; later than that it still fails.
        self.down_grace_ms = 0
        self.late_within_lag = 0
        self.max_seq = {}  # (direction, stream) -> highest seq delivered so far
        self.last_delivery_ms = 0
        self.dup_seq_down, self.dup_seq_up = set(), set()
        self.seq_to_id_down, self.seq_to_id_up = {}, {}
        self.errors = []
        self.expired_examples = []


def paced(i, n, t0, seconds):
    """Sleep so that message i of n goes out at t0 + i * seconds / n."""
    due = t0 + i * seconds / max(n, 1)
    d = due - time.time()
    if d > 0:
        time.sleep(d)


class Traffic:
    def __init__(self, h, net, ledger, gw_token, node_token):
        self.h, self.net, self.L = h, net, ledger
        self.gw_token, self.node_token = gw_token, node_token
        self.stop_send = threading.Event()
        self.stop_consume = threading.Event()
        self.threads = []

    def start(self, n_down, n_up, n_calls, seconds):
        self.senders = [threading.Thread(target=self.send_calls, args=(n_calls, seconds), daemon=True)]
        for k in range(STREAMS):
            self.senders.append(threading.Thread(target=self.send_down, args=(n_down // STREAMS, seconds, k), daemon=True))
            self.senders.append(threading.Thread(target=self.send_up, args=(n_up // STREAMS, seconds, k), daemon=True))
        self.threads = self.senders + [
            threading.Thread(target=self.consume_node, daemon=True),
            threading.Thread(target=self.consume_gw, daemon=True),
        ]
        for t in self.threads:
            t.start()

    def add_up_sender(self, n, seconds):
        for k in range(STREAMS):
            t = threading.Thread(target=self.send_up, args=(n // STREAMS, seconds, k), daemon=True)
            self.senders.append(t)
            t.start()

    def senders_done(self):
        return all(not t.is_alive() for t in self.senders)

    # commands gateway -> node: STREAMS sequential senders; each waits for the answer
    # before sending its next message, so FIFO per sender implies FIFO per stream
    def send_down(self, n, seconds, stream=0):
        enter_ns(self.net.gw_ns)
        api, L, t0 = Api(GW_PORT, self.gw_token), self.L, time.time()
        for i in range(n):
            if self.stop_send.is_set():
                break
            paced(i, n, t0, seconds)
            ttl = SHORT_TTL_S if i % 10 == 9 else 86400
            body = {"target": {"node_id": NODE}, "command_type": "config", "body": {"stream": stream, "seq": i},
                    "ttl_s": ttl}
            try:
                st, b = api.req("POST", "/v1/commands", body)
            except Exception:
                with L.lock:
                    L.down_unanswered += 1
                time.sleep(0.2)
                continue
            with L.lock:
                if st == 202:
                    L.down_acked[b["message_id"]] = {"seq": (stream, i), "exp": b["expires_at_ms"]}
                else:
                    L.down_refused[st] = L.down_refused.get(st, 0) + 1

    # data node -> gateway: STREAMS sequential senders
    def send_up(self, n, seconds, stream=0):
        enter_ns(self.net.node_ns)
        api, L, t0 = Api(NODE_PORT, self.node_token), self.L, time.time()
        for i in range(n):
            if self.stop_send.is_set():
                break
            paced(i, n, t0, seconds)
            ttl = SHORT_TTL_S if i % 10 == 9 else 86400
            body = {"to": GW, "payload_type": "DATA", "payload": {"stream": stream, "seq": i}, "ttl_s": ttl}
            sent = now_ms()
            try:
                st, b = api.req("POST", "/v1/outbox", body)
            except Exception:
                with L.lock:
                    L.up_unanswered += 1
                time.sleep(0.2)
                continue
            with L.lock:
                if st == 202:
                    L.up_acked[b["message_id"]] = {"seq": (stream, i), "exp_max": now_ms() + ttl * 1000, "sent": sent}
                else:
                    L.up_refused[st] = L.up_refused.get(st, 0) + 1

    # queued tool calls (results come up): a few, sequential
    def send_calls(self, n, seconds):
        enter_ns(self.net.gw_ns)
        api, L, t0 = Api(GW_PORT, self.gw_token), self.L, time.time()
        for i in range(n):
            if self.stop_send.is_set():
                break
            paced(i, n, t0, seconds)
            body = {"target": {"node_id": NODE}, "tool_name": "echo", "tool_args": {"i": i}, "wait_s": 0,
                    "job_id": f"chaos-{i}"}
            try:
                st, b = api.req("POST", "/v1/tool_call", body)
            except Exception:
                with L.lock:
                    L.calls_unanswered += 1
                continue
            with L.lock:
                if st in (200, 202):
                    L.calls_acked[b.get("message_id") or f"job-{i}"] = {"seq": i, "answered": st == 200}

    def _deliver(self, direction, mid, seq, exp, t):
        L = self.L
        with L.lock:
            seen = L.down_seen if direction == "down" else L.up_seen
            acked_c = L.down_acked_at_consumer if direction == "down" else L.up_acked_at_consumer
            s2id = L.seq_to_id_down if direction == "down" else L.seq_to_id_up
            if mid in acked_c:
                # listed again after the consumer's ack succeeded: a duplicate delivery
                if direction == "down":
                    L.dup_down += 1
                else:
                    L.dup_up += 1
                return
            if mid in seen:
                return  # listed again, its ack had not gone through: not a second delivery
            if seq in s2id and s2id[seq] != mid:
                if direction == "down":
                    L.dup_down += 1
                else:
                    L.dup_up += 1
            s2id[seq] = mid
            seen[mid] = {"seq": seq, "t": t, "exp": exp}
            L.last_delivery_ms = t
            if exp is not None and t >= exp and direction == "down" and t < exp + L.down_grace_ms:
                L.late_within_lag += 1
            elif exp is not None and t >= exp:
                L.expired_examples.append({"dir": direction, "id": mid, "seq": seq, "late_ms": t - exp})
                if direction == "down":
                    L.expired_down += 1
                else:
                    L.expired_up += 1
            stream, n = seq
            top = L.max_seq.get((direction, stream), -1)
            if n < top:
                if direction == "down":
                    L.ooo_down += 1
                else:
                    L.ooo_up += 1
            L.max_seq[(direction, stream)] = max(top, n)

    def consume_node(self):
        enter_ns(self.net.node_ns)
        api = Api(NODE_PORT, self.node_token)
        while not self.stop_consume.is_set():
            try:
                # The listing's start time: a message the node listed is expired at
                # delivery only if it was already expired when the request went out.
                t = now_ms()
                st, b = api.req("GET", "/v1/inbox?limit=500")
                if st != 200:
                    time.sleep(0.2)
                    continue
                msgs = b["messages"]
                for m in msgs:
                    seq = (m["payload"].get("stream", -1), m["payload"].get("seq", -1))
                    self._deliver("down", m["message_id"], seq, m.get("expires_at_ms"), t)
                    st2, _ = api.req("POST", f"/v1/inbox/{m['message_id']}/ack")
                    if st2 == 200:
                        with self.L.lock:
                            self.L.down_acked_at_consumer.add(m["message_id"])
                if not msgs:
                    time.sleep(0.1)
            except Exception:
                time.sleep(0.3)

    def consume_gw(self):
        enter_ns(self.net.gw_ns)
        api = Api(GW_PORT, self.gw_token)
        while not self.stop_consume.is_set():
            try:
                t = now_ms()
                st, b = api.req("GET", "/v1/inbox")
                if st != 200:
                    time.sleep(0.2)
                    continue
                msgs = [m for m in b["messages"] if m.get("payload_type") == "DATA"]
                for m in msgs:
                    seq = (m["payload"].get("stream", -1), m["payload"].get("seq", -1))
                    # The gateway's inbox record carries no expiry; the node set it to
                    # (its time at enqueue) + ttl, at the latest the moment its 202 came
                    # back + ttl: a delivery after that is certainly past expiry.
                    with self.L.lock:
                        sent = self.L.up_acked.get(m["message_id"])
                    exp = m.get("expires_at_ms") or (sent["exp_max"] if sent else None)
                    self._deliver("up", m["message_id"], seq, exp, t)
                    st2, _ = api.req("POST", f"/v1/inbox/{m['message_id']}/ack")
                    if st2 == 200:
                        with self.L.lock:
                            self.L.up_acked_at_consumer.add(m["message_id"])
                if not msgs:
                    time.sleep(0.1)
            except Exception:
                time.sleep(0.3)


def in_ns(ns, fn):
    """Run fn() on a thread inside namespace ns and return its result."""
    out = {}

    def run():
        try:
            enter_ns(ns)
            out["v"] = fn()
        except Exception as e:  # noqa: BLE001
            out["e"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "e" in out:
        raise out["e"]
    return out["v"]


def get_json(port, token, path, timeout=5):
    st, b = Api(port, token, timeout=timeout).req("GET", path)
    return st, b


def metrics_text(port, token):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"})
    return c.getresponse().read().decode()


def metric(text, name, **labels):
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        m = re.match(r"^([a-z_]+)(\{[^}]*\})? ([0-9.eE+-]+)$", line)
        if not m or m.group(1) != name:
            continue
        lab = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(lab.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return int(total)


def counters(text):
    """The non-zero delivery, envelope and message counters of a /metrics text."""
    out = {}
    for line in text.splitlines():
        if line.startswith(("outpost_delivery_attempts_total", "outpost_envelopes_total", "outpost_messages_total")):
            name, _, value = line.rpartition(" ")
            if float(value) != 0:
                out[name.replace("outpost_", "").replace("_total", "")] = int(float(value))
    return out


# ---------------------------------------------------------------- a run


class Rig:
    def __init__(self, args, root, reorder=None):
        self.args = args
        self.root = root
        self.net = Net(reorder)
        self.gw = Home(root, "gateway", "gateway", GW, f"0.0.0.0:{GW_PORT}", args.bin)
        self.node = Home(root, "node", "node", NODE, f"127.0.0.1:{NODE_PORT}", args.bin)
        node_doc = self.node.cli("identity", "--json")
        gw_doc = self.gw.cli("identity", "--json")
        self.gw.cli("trust", "add", "-", "--send", stdin=node_doc)
        self.node.cli("trust", "add", "-", "--send", "--issue", stdin=gw_doc)
        self.gw_token = self.gw.cli("token", "issue", "--aud", GW, "--scope", "admin", "--ttl", "30d").strip()
        self.node_token = self.node.cli("token", "issue", "--aud", NODE, "--scope", "admin", "--ttl", "30d").strip()
        self.proxy = None
        self.upstream_port = GW_PORT
        self.gw.dropin("50-chaos.toml", "[queue]\nmax_messages_per_recipient = 100000\n")

    def use_proxy(self, delay_ms, jitter_ms):
        self.proxy = subprocess.Popen(
            ["ip", "netns", "exec", self.net.gw_ns, sys.executable, os.path.abspath(__file__), "_proxy",
             self.net.gw_ip, str(PROXY_PORT), str(GW_PORT), str(delay_ms), str(jitter_ms)],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.root, "proxy.log"), "w"))
        self.upstream_port = PROXY_PORT

    def start(self, node_env=None):
        self.node.dropin("50-chaos.toml",
                         f"[upstream]\nurl = \"http://{self.net.gw_ip}:{self.upstream_port}\"\n"
                         f"gateway_id = \"{GW}\"\npoll_wait_s = 10\nrequest_timeout_s = 5\n"
                         "[queue]\nmax_messages_per_recipient = 100000\n")
        if node_env:
            self.node.env_extra = node_env
        self.gw.start(self.net.gw_ns)
        self.wait_up(self.net.gw_ns, GW_PORT, self.gw_token)
        self.node.start(self.net.node_ns)
        self.wait_up(self.net.node_ns, NODE_PORT, self.node_token)

    def wait_up(self, ns, port, token, timeout=30):
        t0 = time.time()
        while time.time() - t0 < timeout:
            try:
                st, _ = in_ns(ns, lambda: get_json(port, token, "/readyz", timeout=2))
                if st == 200:
                    return
            except Exception:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"daemon on port {port} in {ns} not ready after {timeout}s")

    def restart(self, which):
        h, ns, port, tok = ((self.gw, self.net.gw_ns, GW_PORT, self.gw_token) if which == "gw"
                            else (self.node, self.net.node_ns, NODE_PORT, self.node_token))
        h.start(ns)
        self.wait_up(ns, port, tok)

    def close(self):
        for h in (self.node, self.gw):
            h.kill9()
        if self.proxy:
            self.proxy.kill()
            self.proxy.wait()
        self.net.close()

    def audit_state(self):
        _, st = in_ns(self.net.node_ns, lambda: get_json(NODE_PORT, self.node_token, "/v1/status"))
        _, nodes = in_ns(self.net.gw_ns, lambda: get_json(GW_PORT, self.gw_token, "/v1/nodes"))
        at_gw = 0
        for n in nodes.get("nodes", []):
            if n.get("node_id") == NODE:
                at_gw = n.get("audit_size", 0)
        return st["audit"]["size"], at_gw

    def pending_results(self, L):
        missing = 0
        for mid, c in list(L.calls_acked.items()):
            if c.get("result"):
                continue
            st, b = in_ns(self.net.gw_ns, lambda: get_json(GW_PORT, self.gw_token, f"/v1/messages/{mid}"))
            if st == 200 and b.get("result"):
                c["result"] = b["result"]
            elif st == 200 and b.get("state") == "expired":
                c["result"] = {"expired": True}
            else:
                missing += 1
        return missing


def undelivered(L):
    """Acked messages not yet delivered (short-TTL ones may legitimately expire)."""
    with L.lock:
        down = [(m, v) for m, v in L.down_acked.items() if m not in L.down_seen]
        up = [(m, v) for m, v in L.up_acked.items() if m not in L.up_seen]
    t = now_ms()
    # A short-TTL message that expired before delivery is not owed any more.
    down_owed = [m for m, v in down if v["exp"] > t]
    up_owed = [m for m, v in up if v["exp_max"] > t]
    return down_owed, up_owed, len(down) - len(down_owed), len(up) - len(up_owed)


def drain(rig, L, traffic, timeout):
    """Wait until every acked message is delivered (or has expired) and every queued
    tool call has its result (-> messages drained), then until the node's audit log is
    synced to the gateway. Returns (messages seconds, audit seconds); None = timed out."""
    t0 = time.time()
    msgs = None
    while time.time() - t0 < timeout:
        try:
            if msgs is None:
                down, up, _, _ = undelivered(L)
                if not down and not up and rig.pending_results(L) == 0:
                    msgs = time.time() - t0
            if msgs is not None:
                a, b = rig.audit_state()
                if a > 0 and a == b:
                    return msgs, time.time() - t0
        except Exception:
            pass
        time.sleep(0.25)
    return msgs, None


def finish(rig, L, traffic, name, heal_t, t_start, notes, extra=None):
    args = rig.args
    drain_s, audit_s = drain(rig, L, traffic, args.drain_timeout)
    healed_for = time.time() - heal_t
    traffic.stop_consume.set()
    down, up, exp_down, exp_up = undelivered(L)
    missing_results = rig.pending_results(L)
    a_node, a_gw = rig.audit_state()
    node_metrics = in_ns(rig.net.node_ns, lambda: metrics_text(NODE_PORT, rig.node_token))
    gw_metrics = in_ns(rig.net.gw_ns, lambda: metrics_text(GW_PORT, rig.gw_token))
    tcp = rig.net.tcp_stats()
    stop_gw, stop_node = rig.gw.stop(), rig.node.stop()
    verify = subprocess.run([args.bin, "audit", "verify", "--config", rig.node.cfg], capture_output=True, text=True)
    nlog = rig.node.log_text()
    cmd = f"scripts/chaos.py {name}"
    if args.messages:
        cmd += f" --messages {args.messages}"
    if args.seconds:
        cmd += f" --seconds {args.seconds:g}"
    res = {
        "scenario": name,
        "command": cmd,
        "messages_acked": len(L.down_acked) + len(L.up_acked) + len(L.calls_acked),
        "down_acked": len(L.down_acked), "up_acked": len(L.up_acked), "calls_acked": len(L.calls_acked),
        "unanswered_sends": L.down_unanswered + L.up_unanswered + L.calls_unanswered,
        "refused_sends": {"down": L.down_refused, "up": L.up_refused},
        "duration_s": round(heal_t - t_start, 1),
        "lost": len(down) + len(up) + missing_results,
        "lost_detail": {"down": down[:5], "up": up[:5], "results_missing": missing_results},
        "short_ttl_expired_undelivered": exp_down + exp_up,
        "duplicated": L.dup_down + L.dup_up,
        "out_of_order": L.ooo_down + L.ooo_up,
        "expired_but_delivered": L.expired_down + L.expired_up,
        "late_within_node_clock_lag": {"count": L.late_within_lag, "bound_ms": L.down_grace_ms},
        "expired_but_delivered_detail": {"down": L.expired_down, "up": L.expired_up, "examples": L.expired_examples[:5]},
        "drain_s": None if drain_s is None else round(drain_s, 1),
        "audit_synced_s": None if audit_s is None else round(audit_s, 1),
        "audit": {"node": a_node, "gateway": a_gw, "verify_ok": verify.returncode == 0},
        "retries": {
            "node_upstream_disconnects": nlog.count("upstream_disconnected"),
            "node_upload_attempts_failed": metric(node_metrics, "outpost_delivery_attempts_total", result="failure")
            + metric(node_metrics, "outpost_delivery_attempts_total", result="failed"),
            "node_envelopes_duplicate_redelivered": metric(node_metrics, "outpost_envelopes_total", result="duplicate"),
            "gw_refused_node_requests": rig.gw.log_text().count("node_request_refused"),
            "tcp_retrans_segs": {k: v["retrans_segs"] for k, v in tcp.items()},
            "tcp_ofo_queued": {k: v.get("ofo_queued") for k, v in tcp.items()},
        },
        "counters": {"gw": counters(gw_metrics), "node": counters(node_metrics)},
        "stops": {"gw": stop_gw, "node": stop_node},
        "notes": notes,
        "healed_for_s": round(healed_for, 1),
    }
    if extra:
        res.update(extra)
    ok = (res["lost"] == 0 and res["duplicated"] == 0 and res["out_of_order"] == 0
          and res["expired_but_delivered"] == 0 and a_node == a_gw and a_node > 0 and verify.returncode == 0
          and drain_s is not None and audit_s is not None and stop_gw == "exit 0" and stop_node == "exit 0")
    res["ok"] = ok
    if not ok:
        res["verify_output"] = (verify.stdout + verify.stderr)[-400:]
    with open(args.out, "a") as f:
        f.write(json.dumps(res) + "\n")
    log(f"RESULT {json.dumps(res)}")
    return res


REORDER_PCT, REORDER_HOLD_MS = 10, 20


def setup_run(args, name):
    root = tempfile.mkdtemp(prefix=f"outpost-chaos-{name}-")
    reorder = (REORDER_PCT, REORDER_HOLD_MS, os.path.join(root, "reorder.json")) if name == "reorder" else None
    rig = Rig(args, root, reorder)
    return rig, root


def counts(args, default_total):
    total = args.messages or default_total
    n_calls = max(10, total // 40)
    n_each = (total - n_calls) // 2
    return n_each, n_each, n_calls


def scenario_net(args, name):
    secs = args.seconds or 240
    n_down, n_up, n_calls = counts(args, 20000)
    rig, root = setup_run(args, name)
    notes = ""
    try:
        if name == "loss":
            rig.use_proxy(100, 50)
            notes = "nft: 10% of packets dropped each way; proxy: +100 ms ± 50 ms per chunk each way"
        rig.start()
        L = Ledger()
        tr = Traffic(rig, rig.net, L, rig.gw_token, rig.node_token)
        rng = random.Random(args.seed)
        t_start = time.time()
        tr.start(n_down, n_up, n_calls, secs)
        events = []
        if name == "loss":
            rig.net.loss(10)
            time.sleep(secs)
        elif name in ("flap", "crash"):
            # Up 5-30 s, down 5-30 s, repeatedly; the last outage runs to the end of the
            # window and heals after the senders stopped, so "drain after heal" measures
            # the recovery from an outage. `crash` also kill -9s one side during each
            # outage (restarted while the link is still down) and the other side right
            # after each heal (restarted at once).
            kills = 0
            end = t_start + secs

            def crash(victim, why):
                nonlocal kills
                (rig.gw if victim == "gw" else rig.node).kill9()
                kills += 1
                events.append(f"kill -9 {victim} ({why})")

            while time.time() < end:
                time.sleep(max(0.0, min(rng.uniform(5, 30), end - time.time() - 5)))
                rig.net.down()
                t_down = time.time()
                down_s = rng.uniform(5, 30)
                last = end - t_down - down_s < 10
                events.append(f"down {'until heal' if last else f'{down_s:.0f}s'}")
                if name == "crash":
                    victim = "gw" if (kills // 2) % 2 == 0 else "node"
                    time.sleep(min(2.0, down_s / 3))
                    crash(victim, "link down")
                    time.sleep(rng.uniform(1, 3))
                    rig.restart(victim)
                if last:
                    time.sleep(max(0.0, end - time.time()))
                    break
                time.sleep(max(0.0, t_down + down_s - time.time()))
                rig.net.heal()
                if name == "crash":
                    time.sleep(rng.uniform(0.5, 3))
                    other = "node" if victim == "gw" else "gw"
                    crash(other, "just after heal")
                    rig.restart(other)
            notes = f"{len([e for e in events if e.startswith('down')])} outages of 5-30 s, the last one healed after the senders stopped"
            if name == "crash":
                notes += f"; {kills} kill -9 (alternating gateway/node, during outages and right after heals)"
        elif name in ("oneway-down", "oneway-up"):
            direction = name.split("-")[1]
            # healthy first, then partitioned, so established connections carry requests
            # whose answers are lost (oneway-down) or that never arrive (oneway-up)
            healthy = min(10, secs / 4)
            time.sleep(healthy)
            rig.net.oneway(direction)
            time.sleep(secs - healthy)
            notes = ("gateway→node dropped" if direction == "down" else "node→gateway dropped") + \
                    f" from {healthy:g} s to the end of the window"
        elif name == "dup":
            rig.net.dup(10)
            time.sleep(secs)
            notes = "nft netdev egress dup: 10% of packets sent twice each way"
        elif name == "reorder":
            time.sleep(secs)
            try:
                with open(os.path.join(root, "reorder.json")) as f:
                    fw = json.load(f)
            except (OSError, ValueError):
                fw = {}
            notes = (f"L2 forwarder: {REORDER_PCT}% of frames held back until the next one in the same direction "
                     f"(or {REORDER_HOLD_MS} ms), each way; {fw.get('frames', '?')} frames forwarded, "
                     f"{fw.get('reordered', '?')} sent after a later one")
        tr.stop_send.set()
        while not tr.senders_done():
            time.sleep(0.1)
        rig.net.heal()
        heal_t = time.time()
        return finish(rig, L, tr, name, heal_t, t_start, notes, {"events": events[:40]})
    finally:
        rig.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            log(f"kept {root}")


def faketime_env(ts_file):
    if not os.path.exists(FAKETIME_LIB):
        raise RuntimeError(f"{FAKETIME_LIB} missing: apt-get install faketime")
    return {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME_TIMESTAMP_FILE": ts_file, "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def set_clock(ts_file, spec):
    tmp = ts_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(spec + "\n")
    os.rename(tmp, ts_file)


def scenario_clock(args, name):
    secs = args.seconds or 180
    n_down, n_up, n_calls = counts(args, 6000)
    rig, root = setup_run(args, name)
    ts_file = os.path.join(root, "faketime.rc")
    set_clock(ts_file, "+0")
    try:
        rig.start(node_env=faketime_env(ts_file))
        L = Ledger()
        tr = Traffic(rig, rig.net, L, rig.gw_token, rig.node_token)
        t_start = time.time()
        events = []
        extra = {}
        if name == "rtc-boot":
            # Queue both ways while the node is down, then boot it in 1970.
            t_down = time.time()
            rig.node.stop()
            tr.start(n_down, 0, n_calls, secs / 3)
            time.sleep(secs / 3)
            set_clock(ts_file, "@1970-01-01 00:10:00")
            events.append("node boots with its clock at 1970-01-01 00:10")
            rig.restart("node")
            L.down_grace_ms = int((time.time() - t_down) * 1000) + 1000
            # The node's local producer starts now, under the 1970 clock.
            tr.add_up_sender(n_up, secs / 3)
            time.sleep(secs / 3)
            set_clock(ts_file, "+0")
            events.append("clock set right (NTP)")
            time.sleep(secs / 3)
            notes = "queued while the node was down; node restarted with clock 1970, then NTP-corrected"
        else:
            tr.start(n_down, n_up, n_calls, secs)
            third = secs / 3
            time.sleep(third)
            if name == "clock-back":
                set_clock(ts_file, "-1d")
                events.append("node clock -1 day")
                time.sleep(third)
                set_clock(ts_file, "+0")
                events.append("node clock back to real time (+1 day step)")
                time.sleep(third)
                notes = "node clock stepped back a day for 1/3 of the window, then forward a day"
            else:
                set_clock(ts_file, "+7d")
                events.append("node clock +7 days")
                time.sleep(third)
                set_clock(ts_file, "+0")
                events.append("node clock back to real time")
                time.sleep(third)
                notes = "node clock stepped forward a week for 1/3 of the window, then back"
        tr.stop_send.set()
        while not tr.senders_done():
            time.sleep(0.1)
        heal_t = time.time()
        extra["events"] = events
        return finish(rig, L, tr, name, heal_t, t_start, notes, extra)
    finally:
        rig.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------- soak


def proc_sample(pid):
    rss = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None, None
    return rss, fds


def dir_sizes(data):
    store = wal = 0
    for dirpath, _, files in os.walk(data):
        for fn in files:
            p = os.path.join(dirpath, fn)
            try:
                s = os.path.getsize(p)
            except OSError:
                continue
            if fn.endswith("-wal"):
                wal += s
            elif fn.endswith("-shm") or fn.endswith(".log"):
                continue
            else:
                store += s
    return store, wal


def scenario_soak(args, name):
    secs = args.seconds or 3600
    rate = args.rate  # messages per second, all kinds together
    total = int(rate * secs)
    n_down, n_up, n_calls = counts(args, total) if not args.messages else counts(args, args.messages)
    rig, root = setup_run(args, name)
    samples = args.samples or os.path.join(os.getcwd(), "soak-samples.csv")
    try:
        rig.start()
        L = Ledger()
        tr = Traffic(rig, rig.net, L, rig.gw_token, rig.node_token)
        t_start = time.time()
        tr.start(n_down, n_up, n_calls, secs)
        with open(samples, "w") as f:
            f.write("minute,gw_rss_kib,gw_fds,gw_store_bytes,gw_wal_bytes,node_rss_kib,node_fds,node_store_bytes,"
                    "node_wal_bytes,down_acked,down_delivered,up_acked,up_delivered\n")
        minute = 0
        while True:
            gr, gf = proc_sample(rig.gw.pid)
            nr, nf = proc_sample(rig.node.pid)
            gs, gwal = dir_sizes(rig.gw.data)
            ns_, nwal = dir_sizes(rig.node.data)
            with L.lock:
                row = [minute, gr, gf, gs, gwal, nr, nf, ns_, nwal, len(L.down_acked), len(L.down_seen),
                       len(L.up_acked), len(L.up_seen)]
            with open(samples, "a") as f:
                f.write(",".join(str(x) for x in row) + "\n")
            log(f"soak sample {row}")
            if time.time() - t_start >= secs:
                break
            minute += 1
            time.sleep(max(0, t_start + minute * 60 - time.time()))
        tr.stop_send.set()
        while not tr.senders_done():
            time.sleep(0.1)
        heal_t = time.time()
        return finish(rig, L, tr, name, heal_t, t_start, f"steady {rate} msg/s; samples in {samples}")
    finally:
        rig.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


CI_SET = [("loss", 1200, 45), ("flap", 1200, 60), ("oneway-down", 600, 30), ("oneway-up", 600, 30),
          ("dup", 600, 30), ("reorder", 600, 30), ("crash", 1200, 60), ("clock-back", 600, 45),
          ("rtc-boot", 600, 45)]


def table(paths):
    """Markdown rows for docs/RELIABILITY.md from result files."""
    print("| scenario | messages | duration | lost | duplicated | out of order | expired-but-delivered "
          "| drain time after heal | notes | command |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for p in paths:
        with open(p) as f:
            for line in f:
                r = json.loads(line)
                rt = r["retries"]
                notes = (f"{r['notes']}; audit synced {r['audit_synced_s']} s after heal ({r['audit']['node']} entries, "
                         f"verified); retries: {rt['node_upload_attempts_failed']} failed uploads, "
                         f"{rt['node_upstream_disconnects']} disconnects, TCP retransmits gw {rt['tcp_retrans_segs'].get('gw')}"
                         f" / node {rt['tcp_retrans_segs'].get('node')}; {r['short_ttl_expired_undelivered']} short-TTL "
                         f"expired undelivered")
                if r["scenario"] == "reorder":
                    ofo = rt.get("tcp_ofo_queued", {})
                    notes += f"; segments queued out of order by TCP: gw {ofo.get('gw')} / node {ofo.get('node')}"
                if r.get("unanswered_sends"):
                    notes += f"; {r['unanswered_sends']} sends unanswered (process killed), not counted as acked"
                if rt.get("gw_refused_node_requests"):
                    notes += f"; {rt['gw_refused_node_requests']} node requests refused (401) by the gateway"
                cmd = r.get("command", f"scripts/chaos.py {r['scenario']}")
                print(f"| {r['scenario']} | {r['messages_acked']:,} | {r['duration_s']:g} s | {r['lost']} | "
                      f"{r['duplicated']} | {r['out_of_order']} | {r['expired_but_delivered']} | "
                      f"{'never' if r['drain_s'] is None else str(r['drain_s']) + ' s'} | {notes} | `{cmd}` |")


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "table":
        table(sys.argv[2:])
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "_reorder":
        _, _, a, b, pct, hold, stats = sys.argv
        run_reorder(a, b, int(pct), float(hold), stats)
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "_proxy":
        _, _, ip, lp, tp, d, j = sys.argv
        run_proxy(ip, int(lp), int(tp), float(d), float(j))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario")
    ap.add_argument("--messages", type=int, default=0, help="total messages (default: 20000 network, 6000 clock)")
    ap.add_argument("--seconds", type=float, default=0, help="fault window / soak length")
    ap.add_argument("--rate", type=float, default=20.0, help="soak: messages per second")
    ap.add_argument("--samples", default="", help="soak: CSV file for the per-minute samples")
    ap.add_argument("--bin", default=os.environ.get("OUTPOST_BIN", "target/release/outpost"))
    ap.add_argument("--out", default="chaos-results.jsonl")
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--drain-timeout", type=float, default=180)
    ap.add_argument("--keep", action="store_true", help="keep the temp dirs (daemon logs)")
    args = ap.parse_args()
    args.bin = os.path.abspath(args.bin)
    if os.geteuid() != 0:
        print("SKIPPED: the fault harness needs root (network namespaces, nft)")
        return 0
    try:
        Net().close()
    except Exception as e:  # noqa: BLE001
        print(f"SKIPPED: cannot create network namespaces here ({e})")
        return 0
    if not shutil.which("nft"):
        print("SKIPPED: nft (Debian package nftables) is missing")
        return 0
    runs = []
    if args.scenario == "ci":
        for name, n, s in CI_SET:
            a = argparse.Namespace(**vars(args))
            a.messages, a.seconds = n, s
            runs.append((name, a))
    else:
        runs.append((args.scenario, args))
    results = []
    for name, a in runs:
        log(f"=== {name}: {a.messages or 'default'} messages, {a.seconds or 'default'} s")
        if name == "reorder" and not shutil.which("ethtool"):
            print("SKIPPED reorder: ethtool (Debian package ethtool) is missing")
            continue
        if name in ("loss", "flap", "oneway-down", "oneway-up", "dup", "reorder", "crash"):
            results.append(scenario_net(a, name))
        elif name in ("clock-back", "clock-fwd", "rtc-boot"):
            results.append(scenario_clock(a, name))
        elif name == "soak":
            results.append(scenario_soak(a, name))
        else:
            ap.error(f"unknown scenario {name}")
    print()
    print("| scenario | messages | duration | lost | duplicated | out of order | expired-but-delivered | drain after heal | ok |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['scenario']} | {r['messages_acked']} | {r['duration_s']} s | {r['lost']} | {r['duplicated']} | "
              f"{r['out_of_order']} | {r['expired_but_delivered']} | {r['drain_s']} s | {r['ok']} |")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
