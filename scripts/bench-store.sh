#!/usr/bin/env sh
# Store benchmarks for every engine, in one go, 512-byte messages.
# Writes the table to target/bench-store.md (copy it into docs/BENCHMARKS-store.md).
#
# LTO is switched off for the bench build only to keep build time reasonable on a
# shared 2-core machine; the store's costs are fsync-bound, not CPU-bound.
# OUTPOST_BENCH_DIR picks the filesystem under test (default target/bench-store).
set -eu
cd "$(dirname "$0")/.."
export CARGO_PROFILE_BENCH_LTO=false
export CARGO_PROFILE_BENCH_CODEGEN_UNITS=16
cargo bench --bench store --features sled -- "$@" | tee target/bench-store.md
