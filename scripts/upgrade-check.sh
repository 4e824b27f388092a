#!/usr/bin/env bash
# Real-binary upgrade and downgrade check of the store (manual; CI would need a build of
# the previous release):
#   scripts/upgrade-check.sh OLD_OUTPOST NEW_OUTPOST
# The old binary writes a store (three tool calls with job ids), the new one must open it
# (migrating if needed), verify the audit log, return a stored result for a repeated
# job_id with its old audit index and pass `doctor`; the old binary must then refuse the
# store as newer rather than start on it. Needs curl. With UPGRADE_EXPECT=compatible (no
# store format change between the two) the old binary must instead keep working on it.
set -euo pipefail
OLD=${1:?old outpost binary}
NEW=${2:?new outpost binary}
T=$(mktemp -d)
trap 'kill "${PID:-}" 2>/dev/null || true; rm -rf "$T"' EXIT
C=$T/outpost.toml
D=$T/data
fail() { echo "FAIL: $*" >&2; exit 1; }
"$OLD" init --node-id node:upgrade --listen 127.0.0.1:0 --data-dir "$D" --config "$C" >/dev/null
start() {
  "$1" run --config "$C" 2>"$T/log.$2" &
  PID=$!
  for _ in $(seq 100); do [ -s "$D/api.addr" ] && break; sleep 0.1; done
  ADDR=$(cat "$D/api.addr")
}
stop() { kill -TERM "$PID"; wait "$PID" || true; PID=; rm -f "$D/api.addr"; }
call() {
  curl -sf -H "Authorization: Bearer $TOK" -H 'content-type: application/json' \
    -d "{\"tool_name\":\"echo\",\"job_id\":\"$1\",\"tool_args\":{\"v\":\"$1\"}}" \
    "http://$ADDR/v1/tool_call"
}
TOK=$("$OLD" token issue --aud '*' --scope 'tool:echo' --ttl 1h --config "$C")
start "$OLD" old
for j in job-a job-b job-c; do call "$j" >/dev/null; done
before=$(call job-b)
stop
"$NEW" audit verify --config "$C" || fail "audit verify after upgrade"
start "$NEW" new
after=$(call job-b)
[ "$before" = "$after" ] || fail "stored result changed: $before vs $after"
call job-d >/dev/null || fail "new call after upgrade"
stop
"$NEW" doctor --config "$C" >/dev/null || fail "doctor after upgrade"
if [ "${UPGRADE_EXPECT:-}" = compatible ]; then
  # No format change between the two: the old binary must keep working on the store.
  "$OLD" doctor --config "$C" >"$T/old.out" 2>&1 || fail "old binary refused: $(cat "$T/old.out")"
  start "$OLD" old-again
  [ "$(call job-b)" = "$before" ] || fail "old binary lost the stored result"
  stop
  echo "upgrade check OK: opened, audit verified, stored result kept, old binary still works"
  exit 0
fi
if "$OLD" doctor --config "$C" >"$T/old.out" 2>&1; then
  fail "the old binary accepted the upgraded store"
fi
grep -q "newer" "$T/old.out" || fail "old binary refused for another reason: $(cat "$T/old.out")"
echo "upgrade check OK: migrated, audit verified, stored result kept, old binary refuses"
