#!/usr/bin/env bash
# The sync benchmark (benches/sync.rs) with the gateway on the embedded store, on
# PostgreSQL, and as two PostgreSQL replicas, alternately, ROUNDS times each, on a
# throw-away PostgreSQL cluster (Debian's server binaries; run as `nobody` under root).
#   ROUNDS=3 N=10000 bash scripts/bench-pg.sh | tee /tmp/bench-pg.txt
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${ROUNDS:-3}"
N="${N:-10000}"
PGBIN="${OUTPOST_TEST_PG_BIN:-$(printf "%s\n" /usr/lib/postgresql/*/bin | sort -V | tail -1)}"
[ -x "$PGBIN/initdb" ] || { echo "no PostgreSQL server binaries (apt install postgresql)" >&2; exit 1; }
dir="$(mktemp -d /tmp/outpost-bench-pg.XXXXXX)"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
as_pg=()
if [ "$(id -u)" -eq 0 ]; then
  chown nobody:nogroup "$dir"
  as_pg=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
fi
cleanup() { (cd "$dir" && "${as_pg[@]}" "$PGBIN/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1) || true; rm -rf "$dir"; }
trap cleanup EXIT
pg_extra=""
[ -n "${PG_STATS:-}" ] && pg_extra="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all"
(cd "$dir" && "${as_pg[@]}" "$PGBIN/initdb" -D "$dir/data" -U outpost --auth=trust --no-locale -E UTF8 >/dev/null)
# Durable as in the tests: fsync and synchronous_commit on (PostgreSQL's defaults).
(cd "$dir" && "${as_pg[@]}" "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
  -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=on -c synchronous_commit=on $pg_extra" start >/dev/null)
psql() { "$PGBIN/psql" -X -q -h 127.0.0.1 -p "$port" -U outpost "$@"; }
cargo build --release --benches -q
# ONLY=embedded|pg1|pg2 runs one of the three; PG_STATS=1 prints, after each PostgreSQL
# run, the statements that took the database's time (pg_stat_statements).
run() {
  local label="$1" db="$2"; shift 2
  echo "=== $label"
  if [ -n "$db" ]; then
    psql -d postgres -c "CREATE DATABASE $db"
    [ -n "${PG_STATS:-}" ] && psql -d "$db" -c "CREATE EXTENSION pg_stat_statements"
  fi
  env "$@" OUTPOST_BENCH_SYNC_N="$N" cargo bench -q --bench sync 2>/dev/null
  if [ -n "$db" ] && [ -n "${PG_STATS:-}" ]; then
    psql -d "$db" -P pager=off -c "SELECT calls, round(total_exec_time::numeric,0) AS total_ms, round(mean_exec_time::numeric,3) AS mean_ms, left(regexp_replace(query, '\s+', ' ', 'g'), 100) AS query FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) ORDER BY calls DESC LIMIT 25"
  fi
}
for r in $(seq 1 "$ROUNDS"); do
  echo "##### round $r"
  if [ -z "${ONLY:-}" ] || [ "$ONLY" = embedded ]; then run "embedded (SQLite)" ""; fi
  if [ -z "${ONLY:-}" ] || [ "$ONLY" = pg1 ]; then
    run "PostgreSQL, 1 replica" "b1_$r" OUTPOST_BENCH_PG_URL="postgres://outpost@127.0.0.1:$port/b1_$r"
  fi
  if [ -z "${ONLY:-}" ] || [ "$ONLY" = pg2 ]; then
    run "PostgreSQL, 2 replicas" "b2_$r" OUTPOST_BENCH_PG_URL="postgres://outpost@127.0.0.1:$port/b2_$r" OUTPOST_BENCH_REPLICAS=2
  fi
done
