#!/usr/bin/env bash
# Fuzz both daemons against their own /openapi.json with schemathesis (issue #18).
#
# Starts a real gateway and a real node (temp dirs, port 0, paired as an operator pairs
# them), gives schemathesis an admin token for each, and runs every check on every
# operation. Exits non-zero on any finding. What is excluded, and why, is in
# docs/DEVIATIONS.md ("OpenAPI and schemathesis"); the configuration and hooks are in
# scripts/schemathesis/.
#
#   scripts/schemathesis.sh                 # builds target/debug/outpost if needed
#   OUTPOST_BIN=path/to/outpost ST_MAX_EXAMPLES=100 scripts/schemathesis.sh
#
# Needs `schemathesis` and `cryptography` (scripts/setup-ci.sh installs the pinned versions).
set -euo pipefail
cd "$(dirname "$0")/.."

MAX_EXAMPLES="${ST_MAX_EXAMPLES:-25}"
SEED="${ST_SEED:-18}"
if [ -z "${OUTPOST_BIN:-}" ]; then
  cargo build -q
  OUTPOST_BIN="${CARGO_TARGET_DIR:-target}/debug/outpost"
fi
command -v schemathesis >/dev/null || { echo "schemathesis not found: run scripts/setup-ci.sh" >&2; exit 1; }

work=$(mktemp -d)
pids=()
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

op() { "$OUTPOST_BIN" "$@"; }
for role in gateway node; do
  op init --role "$role" --node-id "$role:st" --data-dir "$work/$role" \
     --config "$work/$role.toml" --listen 127.0.0.1:0 >/dev/null
done
op identity --json --config "$work/node.toml" | op trust add - --send --config "$work/gateway.toml" >/dev/null
op identity --json --config "$work/gateway.toml" | op trust add - --send --issue --config "$work/node.toml" >/dev/null

for role in gateway node; do
  # The binary itself in the background (not through `op`), so that $! is its pid.
  OUTPOST_LOG=warn "$OUTPOST_BIN" run --config "$work/$role.toml" 2>"$work/$role.log" &
  pids+=("$!")
done
ready() {
  op wait-ready --config "$work/$1.toml" --timeout 60s \
    || { echo "==> the $1 did not get ready; its log:" >&2; cat "$work/$1.log" >&2; exit 1; }
}
gw=$(ready gateway)
node=$(ready node)
gw_tok=$(op token issue --config "$work/gateway.toml" --aud gateway:st --scope admin --ttl 1h)
node_tok=$(op token issue --config "$work/node.toml" --aud node:st --scope admin --ttl 1h)

status=0
run() {
  local name=$1 base=$2 tok=$3; shift 3
  export OUTPOST_ST_ROLE=$name
  echo "==> schemathesis: $name ($base/openapi.json, $MAX_EXAMPLES examples per operation, seed $SEED)"
  SCHEMATHESIS_HOOKS=outpost_hooks PYTHONPATH="$PWD/scripts/schemathesis${PYTHONPATH:+:$PYTHONPATH}" \
  schemathesis --config-file "scripts/schemathesis/$name.toml" run "$base/openapi.json" \
    --header "Authorization: Bearer $tok" \
    --checks all \
    --max-examples "$MAX_EXAMPLES" \
    --seed "$SEED" \
    --workers 1 \
    --request-timeout 20 \
    --suppress-health-check too_slow,filter_too_much \
    --report junit --report-dir "${ST_REPORT_DIR:-$work/report}/$name" \
    "$@" || status=1
}

run node "$node" "$node_tok"
# /v1/events is an endless SSE stream. The node-facing routes are signed as node:st by
# the hook (scripts/schemathesis/outpost_hooks.py), so fuzzed bodies reach their handlers.
export OUTPOST_ST_NODE_ID=node:st OUTPOST_ST_NODE_KEYS="$work/node/keys.json" OUTPOST_ST_BASE_URL="$gw"
run gateway "$gw" "$gw_tok" \
  --exclude-path /v1/events

for role in gateway node; do
  if grep -q "panicked" "$work/$role.log"; then
    echo "==> the $role daemon panicked during the run:" >&2
    cat "$work/$role.log" >&2
    status=1
  fi
done
exit $status
