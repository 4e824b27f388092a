#!/usr/bin/env bash
# Runs inside the cross image before its Docker layer is committed (Cross.toml
# `pre-build`). outpost needs no extra packages (SQLite bundled, rustls + ring): this
# records the toolchain in the build log and fails early if the C cross compiler — which
# builds SQLite and ring — cannot produce an object for the target.
set -euo pipefail
target="${1:?usage: pre-build.sh RUST_TARGET}"
var="CC_${target//-/_}"
cc="${!var:-}"
if [ -z "$cc" ]; then
  case "$target" in
    aarch64-*) cc=aarch64-linux-gnu-gcc ;;
    armv7-* | arm-*) cc=arm-linux-gnueabihf-gcc ;;
    *) echo "pre-build.sh: unknown target $target" >&2; exit 1 ;;
  esac
fi
echo "pre-build for $target: $("$cc" --version | head -n 1)"
tmp=$(mktemp -d)
printf 'int outpost_probe(int x) { return x + 1; }\n' >"$tmp/probe.c"
"$cc" -c -o "$tmp/probe.o" "$tmp/probe.c"
rm -rf "$tmp"
echo "pre-build: C cross compiler OK"
