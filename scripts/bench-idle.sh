#!/usr/bin/env bash
# Idle writes (BENCHMARKS "Idle writes", OPERATIONS "Idle writes"): a real gateway and a
# real node, paired, the node connected and long-polling with nothing to do, measured
# for MINUTES (default 10): bytes each process sent to the block layer (write_bytes in
# /proc/PID/io), bytes written by write(2) calls (wchar) and fsync/fdatasync calls
# (strace -c, when strace is installed).
#
#   scripts/bench-idle.sh [MINUTES] [OUTPOST_BINARY]
#
# Run it on a disk (not tmpfs: there write_bytes stays 0); the work directory is
# $BENCH_IDLE_DIR, else a new one under /var/tmp. Needs root or ptrace rights for strace.
set -euo pipefail

MIN=${1:-10}
BIN=${2:-target/release/outpost}
[ -x "$BIN" ] || { echo "no binary at $BIN (cargo build --release)" >&2; exit 64; }
BIN=$(realpath "$BIN")
DIR=${BENCH_IDLE_DIR:-$(mktemp -d /var/tmp/outpost-idle.XXXXXX)}
mkdir -p "$DIR"
cd "$DIR"
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')

"$BIN" init --role gateway --node-id gateway:main --data-dir "$DIR/gw/data" \
  --config "$DIR/gw/outpost.toml" --listen "127.0.0.1:$PORT" >/dev/null 2>>init.log
"$BIN" init --role node --node-id node:idle --data-dir "$DIR/node/data" \
  --config "$DIR/node/outpost.toml" --listen 127.0.0.1:0 >/dev/null 2>>init.log
mkdir -p node/outpost.d
printf '[upstream]\nurl = "http://127.0.0.1:%s"\ngateway_id = "gateway:main"\n' "$PORT" \
  >node/outpost.d/50-upstream.toml
"$BIN" identity --json --config node/outpost.toml |
  "$BIN" trust add - --send --config gw/outpost.toml >/dev/null
"$BIN" identity --json --config gw/outpost.toml |
  "$BIN" trust add - --send --issue --config node/outpost.toml >/dev/null

OUTPOST_LOG=info "$BIN" run --config gw/outpost.toml 2>gw.log &
GW=$!
sleep 1
OUTPOST_LOG=info "$BIN" run --config node/outpost.toml 2>node.log &
NODE=$!
trap 'kill $GW $NODE 2>/dev/null; wait 2>/dev/null || true' EXIT

# Connected and settled (start-up commits, the first long-poll).
for _ in $(seq 100); do
  grep -q upstream_connected node.log 2>/dev/null && break
  sleep 0.1
done
grep -q upstream_connected node.log || { echo "node never connected" >&2; cat node.log >&2; exit 1; }
sleep 10

io() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/io"; }
declare -A WB0 WC0
for p in $GW $NODE; do WB0[$p]=$(io "$p" write_bytes); WC0[$p]=$(io "$p" wchar); done
SECS=$((MIN * 60))
if command -v strace >/dev/null; then
  timeout "$SECS" strace -f -c -e trace=fsync,fdatasync,sync_file_range,msync -p "$GW" -o gw.strace 2>/dev/null &
  S1=$!
  timeout "$SECS" strace -f -c -e trace=fsync,fdatasync,sync_file_range,msync -p "$NODE" -o node.strace 2>/dev/null &
  S2=$!
  wait $S1 $S2 || true
else
  sleep "$SECS"
fi

syncs() {
  [ -f "$1" ] || { echo "n/a"; return; }
  awk '$NF ~ /^(fsync|fdatasync|sync_file_range|msync)$/ {n += $4} END {print n + 0}' "$1"
}
echo "idle for $MIN min ($(uname -m), $(nproc) cores, $(df -T "$DIR" | awk 'NR==2 {print $2}') at $DIR)"
printf '%-8s %12s %14s %12s %14s %8s\n' role write_bytes "per min" wchar "per min" fsyncs
for r in gateway node; do
  p=$GW; f=gw.strace
  [ $r = node ] && { p=$NODE; f=node.strace; }
  wb=$(($(io "$p" write_bytes) - WB0[$p]))
  wc=$(($(io "$p" wchar) - WC0[$p]))
  printf '%-8s %12d %14d %12d %14d %8s\n' $r "$wb" $((wb / MIN)) "$wc" $((wc / MIN)) "$(syncs $f)"
done
