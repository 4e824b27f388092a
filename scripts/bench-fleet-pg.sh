#!/usr/bin/env bash
# The fleet simulation (benches/fleet.rs) against REPLICAS gateway replicas sharing one
# PostgreSQL database, on a throw-away cluster (Debian's server binaries; run as `nobody`
# under root). The replicas are release builds of this tree.
#   NODES=2000 RATE=500 SECS=60 REPLICAS=2 bash scripts/bench-fleet-pg.sh | tee /tmp/fleet-pg.txt
# GATEWAY_TOML adds to each replica's config (see below).
# PG_STATS=1 loads pg_stat_statements and prints the statements that took the database's
# time at the end (calls, total and mean milliseconds).
set -euo pipefail
cd "$(dirname "$0")/.."
REPLICAS="${REPLICAS:-2}"
PGBIN="${OUTPOST_TEST_PG_BIN:-$(printf "%s\n" /usr/lib/postgresql/*/bin | sort -V | tail -1)}"
[ -x "$PGBIN/initdb" ] || { echo "no PostgreSQL server binaries (apt install postgresql)" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
dir="$(mktemp -d /tmp/outpost-fleet-pg.XXXXXX)"
pgdir="$dir/pg"
mkdir -p "$pgdir"
port="$(free_port)"
as_pg=()
if [ "$(id -u)" -eq 0 ]; then
  chmod 0755 "$dir"
  chown nobody:nogroup "$pgdir"
  as_pg=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
fi
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  (cd "$pgdir" && "${as_pg[@]}" "$PGBIN/pg_ctl" -D "$pgdir/data" -m immediate stop >/dev/null 2>&1) || true
  rm -rf "$dir"
}
trap cleanup EXIT
pg_extra=""
[ -n "${PG_STATS:-}" ] && pg_extra="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all"
(cd "$pgdir" && "${as_pg[@]}" "$PGBIN/initdb" -D "$pgdir/data" -U outpost --auth=trust --no-locale -E UTF8 >/dev/null)
(cd "$pgdir" && "${as_pg[@]}" "$PGBIN/pg_ctl" -D "$pgdir/data" -l "$pgdir/log" -w \
  -o "-p $port -k $pgdir -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=on -c synchronous_commit=on $pg_extra" start >/dev/null)
"$PGBIN/psql" -X -q -h 127.0.0.1 -p "$port" -U outpost -d postgres -c "CREATE DATABASE fleet"
[ -n "${PG_STATS:-}" ] && "$PGBIN/psql" -X -q -h 127.0.0.1 -p "$port" -U outpost -d fleet -c "CREATE EXTENSION pg_stat_statements"
url="postgres://outpost@127.0.0.1:$port/fleet"
cargo build --release -q --bin outpost
bin="${CARGO_TARGET_DIR:-target}/release/outpost"
urls=()
for r in $(seq 1 "$REPLICAS"); do
  gp="$(free_port)"
  home="$dir/gw$r"
  if [ "$r" -eq 1 ]; then
    "$bin" init --role gateway --node-id gateway:main --data-dir "$home/data" --config "$home/outpost.toml" --listen "127.0.0.1:$gp" >/dev/null 2>&1
  else
    mkdir -p "$home"
    cp -a "$dir/gw1/data" "$home/data"
    sed -e "s#$dir/gw1#$home#" -e "s#^listen = .*#listen = \"127.0.0.1:$gp\"#" "$dir/gw1/outpost.toml" > "$home/outpost.toml"
  fi
  mkdir -p "$home/outpost.d"
  printf '[store]\nengine = "postgres"\npostgres_url = "%s"\n' "$url" > "$home/outpost.d/40-store.toml"
  # GATEWAY_TOML: more of each replica's config, e.g. $'[api]\nmax_connections = 19000'
  # for more nodes than a replica's default 4,096 connections.
  [ -n "${GATEWAY_TOML:-}" ] && printf '%s\n' "$GATEWAY_TOML" > "$home/outpost.d/50-bench.toml"
  OUTPOST_LOG=warn "$bin" run --config "$home/outpost.toml" 2>"$home/log" &
  pids+=("$!")
  urls+=("http://127.0.0.1:$gp")
done
for u in "${urls[@]}"; do
  for _ in $(seq 1 100); do curl -fsS "$u/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
done
OUTPOST_FLEET_GATEWAYS="$(IFS=,; echo "${urls[*]}")" \
OUTPOST_FLEET_GATEWAY_CONFIG="$dir/gw1/outpost.toml" \
OUTPOST_FLEET_GATEWAY_PIDS="$(IFS=,; echo "${pids[*]}")" \
OUTPOST_FLEET_NODES="${NODES:-2000}" OUTPOST_FLEET_RATE="${RATE:-500}" OUTPOST_FLEET_SECS="${SECS:-60}" \
  cargo bench -q --bench fleet
if [ -n "${PG_STATS:-}" ]; then
  echo "--- statements by total time (pg_stat_statements)"
  "$PGBIN/psql" -X -h 127.0.0.1 -p "$port" -U outpost -d fleet -P pager=off -c \
    "SELECT calls, round(total_exec_time::numeric,0) AS total_ms, round(mean_exec_time::numeric,3) AS mean_ms, rows, left(regexp_replace(query, '\s+', ' ', 'g'), 110) AS query FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 30"
  "$PGBIN/psql" -X -h 127.0.0.1 -p "$port" -U outpost -d fleet -P pager=off -c \
    "SELECT calls, round(total_exec_time::numeric,0) AS total_ms, left(regexp_replace(query, '\s+', ' ', 'g'), 110) AS query FROM pg_stat_statements ORDER BY calls DESC LIMIT 20"
fi
for r in $(seq 1 "$REPLICAS"); do
  echo "--- replica $r log (warnings, last 5)"; tail -5 "$dir/gw$r/log" || true
done
