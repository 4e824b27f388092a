#!/usr/bin/env bash
# The plans of the PostgreSQL gateway's hot-path statements (scripts/pg-explain.py, as
# queue.rs prepares them, and scripts/pg-explain.sql) on a
# throw-away cluster holding a backlog: 100,000 queued messages for 1,000 nodes, 100,000
# finished statuses, 50,000 remembered ids; the schema is made by a real gateway start.
#   bash scripts/pg-explain.sh | tee /tmp/pg-explain.txt
set -euo pipefail
cd "$(dirname "$0")/.."
PGBIN="${OUTPOST_TEST_PG_BIN:-$(printf "%s\n" /usr/lib/postgresql/*/bin | sort -V | tail -1)}"
[ -x "$PGBIN/initdb" ] || { echo "no PostgreSQL server binaries (apt install postgresql)" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
dir="$(mktemp -d /tmp/outpost-pg-explain.XXXXXX)"
port="$(free_port)"
as_pg=()
if [ "$(id -u)" -eq 0 ]; then
  chmod 0755 "$dir"; mkdir -p "$dir/pg"; chown nobody:nogroup "$dir/pg"
  as_pg=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
else
  mkdir -p "$dir/pg"
fi
gw_pid=""
cleanup() {
  [ -n "$gw_pid" ] && kill "$gw_pid" 2>/dev/null || true
  (cd "$dir/pg" && "${as_pg[@]}" "$PGBIN/pg_ctl" -D "$dir/pg/data" -m immediate stop >/dev/null 2>&1) || true
  rm -rf "$dir"
}
trap cleanup EXIT
(cd "$dir/pg" && "${as_pg[@]}" "$PGBIN/initdb" -D "$dir/pg/data" -U outpost --auth=trust --no-locale -E UTF8 >/dev/null)
(cd "$dir/pg" && "${as_pg[@]}" "$PGBIN/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/log" -w \
  -o "-p $port -k $dir/pg -c listen_addresses=127.0.0.1" start >/dev/null)
psql() { "$PGBIN/psql" -X -q -h 127.0.0.1 -p "$port" -U outpost "$@"; }
psql -d postgres -c "CREATE DATABASE explain"
cargo build --release -q --bin outpost
bin="${CARGO_TARGET_DIR:-target}/release/outpost"
gp="$(free_port)"
"$bin" init --role gateway --node-id gateway:main --data-dir "$dir/gw/data" --config "$dir/gw/outpost.toml" --listen "127.0.0.1:$gp" >/dev/null 2>&1
mkdir -p "$dir/gw/outpost.d"
printf '[store]\nengine = "postgres"\npostgres_url = "postgres://outpost@127.0.0.1:%s/explain"\n' "$port" > "$dir/gw/outpost.d/40-store.toml"
OUTPOST_LOG=warn "$bin" run --config "$dir/gw/outpost.toml" 2>"$dir/gw/log" &
gw_pid=$!
for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$gp/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
kill "$gw_pid"; wait "$gw_pid" 2>/dev/null || true; gw_pid=""
psql -d explain <<'SQL'
INSERT INTO messages (message_id, queue, peer, priority, payload_type, created_at_ms, expires_at_ms, body, max_attempts)
SELECT 'm' || g, 'to_node', 'node:n' || (g % 1000), 0, 'COMMAND', g, 9999999999999, decode(repeat('ab', 600), 'hex'), 0
FROM generate_series(1, 100000) g;
INSERT INTO queue_depth (queue, peer, shard, n)
SELECT 'to_node', peer, 0, count(*) FROM messages GROUP BY peer;
INSERT INTO message_status (message_id, state, queue, peer, attempts, reason, keep_until_ms)
SELECT 'done' || g, 'delivered', 'to_node', 'node:n' || (g % 1000), 1, NULL, 9999999999999 FROM generate_series(1, 100000) g;
INSERT INTO remembered_ids (scope, id, keep_until_ms)
SELECT 'results', 'r' || g, 9999999999999 FROM generate_series(1, 50000) g;
INSERT INTO node_pulls (node_id, pull) SELECT 'node:n' || g, 1 FROM generate_series(0, 999) g;
ANALYZE;
SQL
python3 scripts/pg-explain.py | psql -d explain -f -
