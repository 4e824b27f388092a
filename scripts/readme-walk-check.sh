#!/usr/bin/env bash
# Does a fresh walk of the README (scripts/readme-walk.sh --record) say what the recorded
# one (docs/README-WALK.md) says? Both transcripts are compared with what legitimately
# differs between runs replaced by placeholders: times and durations, ids, keys,
# tokens, hashes, pids, ports, temporary paths, the binary's path and the commit line.
# Anything else that differs (a command's output, a new or removed README command)
# fails, with the diff: run `scripts/readme-walk.sh --bin target/debug/outpost --record
# docs/README-WALK.md` and commit the new recording.
#
#   scripts/readme-walk-check.sh RECORDED FRESH
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: $0 RECORDED FRESH" >&2; exit 2; }

# The transcript only (what is between the ```text fence and its end), normalized.
normalize() {
  # shellcheck disable=SC2016 # backticks of the Markdown fence, not a command
  sed -n '/^```text$/,/^```$/p' "$1" | sed -E \
    -e 's#^\#\# git clone .*#\#\# git clone REPO#' \
    -e 's#^at [0-9a-f]{7,} .*#at COMMIT#' \
    -e 's#/[^ ()$]*/(debug|release|device)/outpost#BIN#g' \
    -e 's#/tmp/outpost-demo-[0-9-]+#/tmp/outpost-demo-X#g' \
    -e 's#20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z#TIME#g' \
    -e 's#[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}#UUID#g' \
    -e 's#[A-Za-z0-9_-]{32,}#KEY#g' \
    -e 's#[0-9a-f]{16,}#HEX#g' \
    -e 's#\b1[0-9]{12}\b#MS#g' \
    -e 's#\[ *[0-9]+\.[0-9]+s\]#[T]#g' \
    -e 's#\b[0-9]+(\.[0-9]+)?(ms|s|m[0-9]+s)\b#Ns#g' \
    -e 's#(127\.0\.0\.1|localhost):[0-9]+#\1:PORT#g' \
    -e 's#pids? [0-9][0-9 ,]*#pid N#g' \
    -e 's#\bet-[0-9a-f]{16}\b#et-ID#g' \
    -e 's#\([0-9]+ s\)#(N s)#g' \
    -e 's# +# #g'
}

a=$(mktemp) b=$(mktemp)
trap 'rm -f "$a" "$b"' EXIT
normalize "$1" >"$a"
normalize "$2" >"$b"
[ -s "$a" ] || { echo "readme-walk-check: no transcript in $1" >&2; exit 1; }
if ! diff -u --label "$1 (recorded)" --label "$2 (fresh)" "$a" "$b"; then
  echo "readme-walk-check: the README walk differs from $1 beyond times, ids, keys, ports and paths;" >&2
  echo "  re-record it: scripts/readme-walk.sh --bin target/debug/outpost --record $1" >&2
  exit 1
fi
echo "readme-walk-check: the fresh walk matches $1"
