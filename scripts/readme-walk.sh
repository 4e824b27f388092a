#!/usr/bin/env bash
# The README, walked top to bottom as a new user would, in a fresh clone: every command
# of its shell blocks is printed with its real output, and the walk stops at the first
# one that fails. docs/README-WALK.md is one such run; CI (.ci/run) runs it again and
# compares the two (scripts/readme-walk-check.sh).
#
#   scripts/readme-walk.sh [--bin PATH] [--record FILE] [--keep] [REPO]
#
# REPO      what to `git clone` (default: the checkout this script is in; a clone has
#           the committed files only).
# --bin P   use this `outpost` binary for everything: `cargo run [-q] --release -- ARGS`
#           lines run as `P ARGS` (no release build, which takes minutes). Without it the
#           README's cargo commands run as written, and the by-hand section uses the
#           release binary they built.
# --record F  also write the transcript to F as Markdown, with the command, date and
#           machine at the top.
# --keep    leave the temporary directory (its path is printed).
#
# What the walk does that the README does not say, each printed as a "# walk:" line:
#   - The by-hand section names the gateway's host `gw.example`; both of its hosts are
#     this machine here, and /etc/hosts cannot be assumed to name it, so `gw.example`
#     is replaced by `127.0.0.1` in that section's lines (the node verifies the gateway
#     by the certificate pin in gw.json, which does not depend on the name).
#   - Daemons a section starts in the background (`… &`) are stopped at the end of the
#     section: the quick start's node and the by-hand node both listen on 127.0.0.1:8000.
#   - The bulk `trust add` needs identity documents of more nodes: the walk makes two
#     with `outpost init` + `outpost identity --json`, as the by-hand block made pump-17's.
#   - Blocks it cannot run on any machine (Tests: the whole suite, root; Install on a
#     Raspberry Pi: cross builds, sudo, a Pi) are listed as skipped, with why. A README
#     section with a shell block the walk does not know fails the walk: decide here
#     whether it runs.
# Needs: git, bash, curl; cargo without --bin. Ports 8000 and 8787 on loopback must be
# free (the README's own).
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
tmp_prefix="${TMPDIR:-/tmp}/readme-walk."
repo="$here" bin="" record="" keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="${2:?--bin needs a path}"; shift 2 ;;
    --record) record="${2:?--record needs a file}"; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "readme-walk: unknown option $1" >&2; exit 2 ;;
    *) repo="$1"; shift ;;
  esac
done
if [ -n "$bin" ]; then
  [ -x "$bin" ] || { echo "readme-walk: --bin $bin is not an executable" >&2; exit 2; }
  bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
fi
if [ -n "$record" ]; then
  # Run the walk itself (same options, no --record) and keep what it printed.
  args=()
  [ -n "$bin" ] && args+=(--bin "$bin")
  [ "$keep" = 1 ] && args+=(--keep)
  t0=$SECONDS
  bash "$0" "${args[@]}" "$repo" 2>&1 | tee "$record.tmp"
  rc=${PIPESTATUS[0]}
  {
    echo "# The README, walked"
    echo
    echo "What a new user sees following README.md top to bottom in a fresh clone: every"
    echo "command of its shell blocks, with its real output."
    echo
    echo "- command: \`scripts/readme-walk.sh${bin:+ --bin target/debug/outpost} --record docs/README-WALK.md\`"
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- machine: $(uname -srm), $(nproc) CPUs, $(sed -n 's/^PRETTY_NAME="\(.*\)"/\1/p' /etc/os-release 2>/dev/null)"
    echo "- result: exit $rc after $((SECONDS - t0)) s"
    echo
    echo "Timestamps, ids, keys, tokens, pids, ports of the demo and temporary paths differ"
    echo "from run to run. CI (\`.ci/run\`) runs the same walk with the binary it built and"
    echo "fails if a command fails, or if its transcript differs from this one beyond those"
    echo "(\`scripts/readme-walk-check.sh\`). Lines \`# walk: …\` are what the walk does that the README"
    echo "does not say (the top of \`scripts/readme-walk.sh\` lists them); \`(ran: …)\` shows a"
    echo "README line as it was run: with \`--bin\`, \`cargo run --release --\` is that binary,"
    echo "and in the by-hand section \`gw.example\` is \`127.0.0.1\` (both hosts are this one)."
    echo
    echo '```text'
    sed "s#${tmp_prefix}[^/ ]*#/tmp/readme-walk.XXXXXX#g" "$record.tmp"
    echo '```'
  } >"$record"
  rm -f "$record.tmp"
  exit "$rc"
fi

start=$SECONDS
tmp=$(mktemp -d "${TMPDIR:-/tmp}/readme-walk.XXXXXX")
daemons=()   # pids (each the leader of its own process group) of `… &` lines
logs=()

stop_daemons() {
  local pid
  for pid in "${daemons[@]}"; do
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
  done
  for pid in "${daemons[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null
  done
  daemons=()
}
cleanup() {
  stop_daemons
  if [ "$keep" = 1 ]; then echo "# walk: kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

note() { echo "# walk: $*"; }
fail() {
  echo
  echo "readme-walk: FAILED: $*"
  local l
  for l in "${logs[@]}"; do
    echo "--- last lines of $(basename "$l") (a daemon started above)"
    tail -n 30 "$l"
  done
  exit 1
}

# Run one README line in this shell (so `TOKEN=$(…)` carries on), printing it and its
# output. $1: the line as written; $2: the line as run.
run_line() {
  local shown="$1" cmd="$2" out="$tmp/out" rc
  echo "\$ $shown"
  [ "$cmd" != "$shown" ] && echo "  (ran: $cmd)"
  local bare
  bare=$(printf '%s' "$cmd" | sed 's/[[:space:]]#.*$//; s/[[:space:]]*$//')
  if [ "${bare%&}" != "$bare" ]; then
    local log
    log="$tmp/daemon-$((${#logs[@]} + 1)).log"
    setsid bash -c "exec ${bare%&}" >"$log" 2>&1 &
    daemons+=("$!")
    logs+=("$log")
    echo "[started in the background: pid $!, output in $(basename "$log")]"
    return
  fi
  eval "$cmd" >"$out" 2>&1 </dev/null
  rc=$?
  cat "$out"
  [ -s "$out" ] && [ -n "$(tail -c 1 "$out")" ] && echo
  [ "$rc" -eq 0 ] || fail "exit $rc from: $shown"
}

# The README's ```sh blocks: "@@BLOCK<TAB>section", its lines (continuations joined),
# "@@END".
blocks() {
  awk '
    /^## / { sec = substr($0, 4) }
    /^```sh[[:space:]]*$/ { inb = 1; print "@@BLOCK\t" sec; next }
    /^```/ { if (inb) { inb = 0; print "@@END" } next }
    inb {
      line = $0
      if (sub(/\\$/, "", line)) { pend = pend line; next }
      print pend line; pend = ""
    }
  ' README.md
}

if git -C "$repo" rev-parse --git-dir >/dev/null 2>&1; then
  echo "## git clone $repo"
  git clone -q "$repo" "$tmp/outpost" || fail "git clone $repo"
else
  note "$repo is not a git checkout: copying its files (without target/) instead of cloning"
  mkdir -p "$tmp/outpost"
  tar -C "$repo" --exclude=./target -cf - . | tar -C "$tmp/outpost" -xf - || fail "copying $repo"
fi
cd "$tmp/outpost" || fail "cd into the clone"
git log -1 --format='at %h %s' 2>/dev/null | cut -c1-100
unset OUTPOST_CONFIG NOTIFY_SOCKET
export OUTPOST_LOG="${OUTPOST_LOG:-warn}"

# `outpost` on PATH for the by-hand section.
mkdir -p "$tmp/bin"
export PATH="$tmp/bin:$PATH"
link_outpost() {
  local b="$bin"
  [ -n "$b" ] || b="${CARGO_TARGET_DIR:-$tmp/outpost/target}/release/outpost"
  [ -x "$b" ] || fail "no outpost binary at $b"
  ln -sf "$b" "$tmp/bin/outpost"
}
[ -n "$bin" ] && { link_outpost; echo "outpost: $("$bin" --version)"; }

# Commands as run: with --bin, the README's cargo lines use it.
as_run() {
  local l="$1"
  if [ -n "$bin" ]; then
    l=${l//cargo run -q --release -- /$bin }
    l=${l//cargo run --release -- /$bin }
  fi
  case "$section" in
    "A gateway and a node by hand") l=${l//gw.example/127.0.0.1} ;;
  esac
  printf '%s' "$l"
}

section="" nblock=0 skip=""
while IFS= read -r -u 3 line; do
  case "$line" in
    @@BLOCK*)
      new="${line#@@BLOCK	}"
      if [ "$new" != "$section" ]; then
        # Leaving a section: its daemons stop (the next one reuses their ports).
        if [ "${#daemons[@]}" -gt 0 ]; then
          note "stop what this section started in the background (pids ${daemons[*]})"
          stop_daemons
        fi
        section="$new" nblock=0
        echo
        echo "## $section"
      fi
      nblock=$((nblock + 1))
      case "$section/$nblock" in
        "Quick start/"*) skip="" ;;
        "A gateway and a node by hand/1")
          skip=""
          [ -z "$bin" ] && link_outpost
          note "both hosts are this machine: gw.example is 127.0.0.1 in this section"
          ;;
        "A gateway and a node by hand/2")
          skip=""
          note "two more nodes' identity documents, as pump-17.json was made above"
          for n in 18 19; do
            run_line "outpost init --node-id node:pump-$n --upstream-url https://gw.example:8787 --gateway-id gateway:main --data-dir pump-$n --config pump-$n/outpost.toml" \
              "outpost init --node-id node:pump-$n --upstream-url https://127.0.0.1:8787 --gateway-id gateway:main --data-dir pump-$n --config pump-$n/outpost.toml"
            run_line "outpost identity --json --config pump-$n/outpost.toml > pump-$n.json" \
              "outpost identity --json --config pump-$n/outpost.toml > pump-$n.json"
          done
          ;;
        "Tests/1") skip="the whole suite takes ~20 minutes and root; CI runs it (.ci/run)" ;;
        "Tests/2") skip="apt-get as root; scripts/setup-ci.sh does it in CI" ;;
        "Install on a Raspberry Pi/"*) skip="cross builds, sudo and a Raspberry Pi; docs/INSTALL.md, scripts/ci-packaging.sh in CI" ;;
        *) fail "README section \"$section\", shell block $nblock: the walk does not know it; say in scripts/readme-walk.sh whether and how it runs" ;;
      esac
      [ -n "$skip" ] && note "skipped block $nblock: $skip"
      ;;
    @@END) ;;
    *)
      if [ -n "$skip" ]; then
        echo "  (not run) $line"
      elif [ -z "${line//[[:space:]]/}" ]; then
        :
      elif [ "${line#\#}" != "$line" ]; then
        echo "$line"
      else
        run_line "$line" "$(as_run "$line")"
      fi
      ;;
  esac
done 3< <(blocks)

if [ "${#daemons[@]}" -gt 0 ]; then
  note "stop what the last section started (pids ${daemons[*]})"
  stop_daemons
fi
echo
echo "readme-walk: OK, every README command above ran ($((SECONDS - start)) s)"

if [ -n "$record" ]; then
  exec >&- 2>&-
  wait 2>/dev/null
fi
