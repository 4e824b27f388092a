#!/usr/bin/env bash
# Issue #16 part 3: outpost and the systems people use instead, in one run.
#
#   scripts/bench-peers.sh [RUNS]        # default 3 runs; OUTPOST_BENCH_SYNC_N (default 10000)
#
# Each run measures, on the same machine and in the same run: outpost (`cargo bench --bench
# sync`: real gateway + node), Redis 7 (AOF, appendfsync always; RPUSH + ZADD per message),
# NATS JetStream (file store), Mosquitto 2 (persistence on; QoS 1 to an offline persistent
# session) and a naive SQLite mailbox (a connection and a transaction per message). The
# work: 512-byte messages for one recipient, durable enqueue from 1 producer (N/10
# messages) and 64 producers (9N/10), then a drain of the N queued. Every server runs on
# 127.0.0.1, a free port, a temp dir, and is stopped at the end (also on Ctrl-C / error).
# The work itself is in scripts/bench-peers/peers.py; the medians, spread and ratios to
# outpost are printed at the end. BENCH_PEERS_OUT=FILE keeps the raw results (JSON lines).
#
# Installs what it needs when missing (Debian packages with apt-get, Python clients with
# pip) and says so. Not part of .ci/run: a benchmark, not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
export OUTPOST_BENCH_SYNC_N=${OUTPOST_BENCH_SYNC_N:-10000}

SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-benchmark >/dev/null || missing+=(redis-tools)
command -v nats-server >/dev/null || missing+=(nats-server)
command -v mosquitto >/dev/null || missing+=(mosquitto)
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench-peers: installing with apt-get: ${missing[*]}"
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
pymissing=()
python3 -c 'import redis' 2>/dev/null || pymissing+=(redis)
python3 -c 'import nats' 2>/dev/null || pymissing+=(nats-py)
python3 -c 'import paho.mqtt' 2>/dev/null || pymissing+=(paho-mqtt)
if [ ${#pymissing[@]} -gt 0 ]; then
  echo "bench-peers: installing with pip: ${pymissing[*]}"
  python3 -m pip install --quiet "${pymissing[@]}"
fi

echo "bench-peers: cargo build --release --benches"
cargo build --release --benches --quiet

tmp=$(mktemp -d -t outpost-bench-peers.XXXXXX)
cleanup() {
  # Every server peers.py started wrote its pid here; stop those still running.
  for f in "$tmp"/run*/pids; do
    [ -f "$f" ] || continue
    while read -r pid; do
      case "$(cat "/proc/$pid/comm" 2>/dev/null)" in
        redis-server|nats-server|mosquitto) kill "$pid" 2>/dev/null || true ;;
      esac
    done <"$f"
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "bench-peers: $(date -u '+%F %T UTC'), commit $(git rev-parse --short HEAD), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "bench-peers: $(redis-server --version | cut -d' ' -f1-3), $(nats-server --version), $(mosquitto -h 2>&1 | head -1), SQLite $(python3 -c 'import sqlite3; print(sqlite3.sqlite_version)')"
for r in $(seq 1 "$RUNS"); do
  echo "run $r/$RUNS ($(date -u +%T), load $(cut -d' ' -f1 /proc/loadavg)):"
  mkdir "$tmp/run$r"
  python3 scripts/bench-peers/peers.py "$tmp/run$r" >>"$tmp/results.jsonl"
done
[ -z "${BENCH_PEERS_OUT:-}" ] || cp "$tmp/results.jsonl" "$BENCH_PEERS_OUT"
python3 scripts/bench-peers/peers.py --summary "$tmp/results.jsonl"
