#!/usr/bin/env bash
# Prove the ARM build without Docker (the way `cross` would, see Cross.toml and
# docs/INSTALL.md): Debian's rustc-web 1.85 (which is also our MSRV), Debian's prebuilt
# standard library for the target, the GNU cross linker and qemu-user to run tests.
# Every ARM build is the device's node binary: `--no-default-features`, so it carries no
# gateway and no PostgreSQL client (the `gateway` and `postgres` features are for x86
# gateways, docs/INSTALL.md). Prints the stripped size of each target's binary and fails
# when the aarch64 one is over its budget (docs/BENCHMARKS-size.md).
#
# Usage: scripts/cross-check.sh [--setup-only] [--no-setup]
#   env SMOKE_FILTERS  libtest filters run under qemu (default below; "" = whole lib suite)
#       SMOKE_TESTS    integration-test targets (tests/NAME) also run under qemu, if present.
#       SMOKE_SKIPS    libtest names skipped under qemu (they exec an ARM child; see below)
#                      Default none: tests/it spawns the outpost binary, which needs
#                      binfmt_misc to run an aarch64 child (CI machines have none).
#                      The store conformance tests are lib tests (store::tests::conformance).
#       CROSS_ARMV7    1 (default): armv7 build + tests; build: release binary only; 0: skip
#       MAX_SIZE_AARCH64  size budget of the stripped aarch64 node in bytes (default 6.0 MiB:
#                         docs/BENCHMARKS-size.md);
#                      "" = report only
#       CROSS_TARGET_DIR  cargo target dir (default target/cross)
#
# Idempotent: every install step is skipped when its result is already present.
set -euo pipefail

cd "$(dirname "$0")/.."

DEB_RUST_VER="1.85.0+dfsg3-1~deb12u3"
SMOKE_FILTERS="${SMOKE_FILTERS-store:: envelope:: token:: audit:: config::}"
SMOKE_TESTS="${SMOKE_TESTS-}"
# Tests that re-execute their own (ARM) binary as a child process: without binfmt_misc
# on this machine the kernel cannot exec it (exit 127), so under qemu they are skipped.
# They run natively in the main test command.
SMOKE_SKIPS="${SMOKE_SKIPS-store::tests::crash store::tests::rss}"
CROSS_ARMV7="${CROSS_ARMV7-1}"
# The budget is 6.0 MiB (6291456): growth past it fails (docs/BENCHMARKS-size.md says
# how much room today's binary leaves).
MAX_SIZE_AARCH64="${MAX_SIZE_AARCH64-6291456}"
TARGET_DIR="${CROSS_TARGET_DIR:-target/cross}"
# The device build: none of the default features (`gateway`, `postgres`).
FEATURES=(--no-default-features)
APT=(apt-get -o DPkg::Lock::Timeout=300 -y --no-install-recommends)
export DEBIAN_FRONTEND=noninteractive

setup=1 build=1
for arg in "$@"; do
  case "$arg" in
    --setup-only) build=0 ;;
    --no-setup) setup=0 ;;
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg" >&2; exit 64 ;;
  esac
done

log() { printf '\n==> %s\n' "$*"; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t0 ))s"; }

# Debian arch name, Rust target, GNU triple, qemu binary, gcc package, libc-dev package.
target_info() {
  case "$1" in
    arm64) echo "aarch64-unknown-linux-gnu aarch64-linux-gnu qemu-aarch64 gcc-aarch64-linux-gnu libc6-dev-arm64-cross" ;;
    armhf) echo "armv7-unknown-linux-gnueabihf arm-linux-gnueabihf qemu-arm gcc-arm-linux-gnueabihf libc6-dev-armhf-cross" ;;
  esac
}

apt_updated=0
apt_update() {
  if [ "$apt_updated" -eq 0 ]; then
    # A third-party source without the foreign architecture only warns; don't fail on it.
    as_root apt-get -o DPkg::Lock::Timeout=300 update -q || true
    apt_updated=1
  fi
}

host_toolchain_ok() {
  [ -x /usr/bin/rustc ] && /usr/bin/rustc --version | grep -q '^rustc 1\.85\.' \
    && command -v qemu-aarch64 >/dev/null
}

# Installs the cross toolchain for one Debian architecture; returns non-zero on failure.
setup_arch() {
  local arch=$1 rtarget gnu qemu gccpkg libcpkg
  read -r rtarget gnu qemu gccpkg libcpkg <<<"$(target_info "$arch")"
  if [ -d "/usr/lib/rustlib/$rtarget/lib" ] && command -v "$gnu-gcc" >/dev/null && host_toolchain_ok; then
    log "$arch toolchain already present (skip)"
    return 0
  fi
  log "installing $arch cross toolchain"
  if ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
    as_root dpkg --add-architecture "$arch"
    apt_updated=0
  fi
  apt_update
  as_root "${APT[@]}" install \
    "rustc-web=$DEB_RUST_VER" "libstd-rust-web-dev=$DEB_RUST_VER" "libstd-rust-web-1.85=$DEB_RUST_VER" \
    "$gccpkg" "$libcpkg" qemu-user file binutils || return 1
  local tmp
  tmp=$(mktemp -d)
  chmod 755 "$tmp" # apt-get download runs as _apt
  (cd "$tmp" && apt-get download "libstd-rust-web-dev:$arch=$DEB_RUST_VER" "libstd-rust-web-1.85:$arch=$DEB_RUST_VER" \
    && for f in *.deb; do dpkg-deb -x "$f" root; done) || { rm -rf "$tmp"; return 1; }
  as_root mkdir -p /usr/lib/rustlib
  as_root cp -r "$tmp/root/usr/lib/rustlib/$rtarget" /usr/lib/rustlib/
  rm -rf "$tmp"
  [ -d "/usr/lib/rustlib/$rtarget/lib" ]
}

# Builds the release binary and the test binaries for one arch, runs the smoke set under qemu.
check_arch() {
  local arch=$1 rtarget gnu qemu gccpkg libcpkg
  read -r rtarget gnu qemu gccpkg libcpkg <<<"$(target_info "$arch")"
  local TGT
  TGT=$(echo "$rtarget" | tr 'a-z-' 'A-Z_')
  export RUSTC=/usr/bin/rustc
  export "CARGO_TARGET_${TGT}_LINKER=$gnu-gcc"
  export "CC_${rtarget//-/_}=$gnu-gcc"
  export "AR_${rtarget//-/_}=$gnu-ar"
  export "CARGO_TARGET_${TGT}_RUNNER=$qemu -L /usr/$gnu"

  log "[$arch] device dependency graph: no gateway, no PostgreSQL client, one Ed25519"
  local deps
  deps=$(cargo tree --locked "${FEATURES[@]}" --target "$rtarget" -e normal --prefix none)
  if grep -E '^((tokio-)?postgres|pasetors|orion|ed25519-compact) ' <<<"$deps"; then
    echo "cross-check: the $rtarget node build pulls in the crates above (feature gateway or postgres?)" >&2
    exit 1
  fi
  echo "none"
  log "[$arch] crates in more than one version (build-time proc-macro crates aside)"
  cargo tree --locked "${FEATURES[@]}" --target "$rtarget" -e normal -d --depth 0 --prefix none \
    | grep -E '^[a-z]' | grep -vE '^(syn|proc-macro2|quote) |proc-macro' | sort -u || true

  log "[$arch] $(/usr/bin/rustc --version) — device build (profile device: release, this crate at opt-level z) for $rtarget ($(elapsed))"
  local s=$SECONDS
  cargo build --locked "${FEATURES[@]}" --profile device --target "$rtarget" --target-dir "$TARGET_DIR" --bin outpost
  echo "device build: $((SECONDS - s))s"
  local bin="$TARGET_DIR/$rtarget/device/outpost"
  file "$bin"
  cp "$bin" "$TARGET_DIR/outpost-$rtarget"
  "$gnu-strip" "$TARGET_DIR/outpost-$rtarget" 2>/dev/null || true
  local size
  size=$(stat -c %s "$TARGET_DIR/outpost-$rtarget")
  awk -v t="$rtarget" -v s="$size" 'BEGIN { printf "stripped size %s: %d bytes (%.2f MiB)\n", t, s, s / 1048576 }'
  SIZES+=("$rtarget $size")
  log "[$arch] release binary under $qemu: --version"
  "$qemu" -L "/usr/$gnu" "$bin" --version || echo "(--version not available yet in this build)"

  if [ "${2-}" = build-only ]; then
    log "[$arch] build-only: test binaries not built"
    return 0
  fi
  log "[$arch] building test binaries ($(elapsed))"
  s=$SECONDS
  cargo test --locked "${FEATURES[@]}" --target "$rtarget" --target-dir "$TARGET_DIR" --lib --no-run
  echo "test build: $((SECONDS - s))s"
  log "[$arch] lib tests under $qemu, filters: ${SMOKE_FILTERS:-<all>}"
  s=$SECONDS
  local skips=() k
  for k in $SMOKE_SKIPS; do skips+=(--skip "$k"); done
  # shellcheck disable=SC2086 # filters are a word list on purpose
  cargo test --locked "${FEATURES[@]}" --target "$rtarget" --target-dir "$TARGET_DIR" --lib -- $SMOKE_FILTERS "${skips[@]}"
  echo "lib tests under qemu: $((SECONDS - s))s"
  local t
  for t in $SMOKE_TESTS; do
    if [ -f "tests/$t.rs" ] || [ -f "tests/$t/main.rs" ]; then
      log "[$arch] integration test $t under $qemu"
      s=$SECONDS
      cargo test --locked "${FEATURES[@]}" --target "$rtarget" --target-dir "$TARGET_DIR" --test "$t"
      echo "$t under qemu: $((SECONDS - s))s"
    else
      echo "(integration test tests/$t.rs not present; skipped)"
    fi
  done
}

if [ "$setup" -eq 1 ]; then
  setup_arch arm64
  if [ "$CROSS_ARMV7" != 0 ]; then
    setup_arch armhf || echo "WARNING: armv7 toolchain did not install (best effort; see docs/INSTALL.md)"
  fi
fi
[ "$build" -eq 1 ] || { log "setup done ($(elapsed))"; exit 0; }

SIZES=()
report_sizes() {
  log "stripped node binary sizes (--no-default-features, profile device)"
  local row
  for row in "${SIZES[@]}"; do
    awk -v t="${row% *}" -v s="${row#* }" 'BEGIN { printf "  %-32s %10d bytes  %.2f MiB\n", t, s, s / 1048576 }'
  done
}
check_arch arm64
aarch64_size=${SIZES[0]#* }
if [ "$CROSS_ARMV7" != 0 ]; then
  if [ -d /usr/lib/rustlib/armv7-unknown-linux-gnueabihf/lib ] && command -v arm-linux-gnueabihf-gcc >/dev/null; then
    if [ "$CROSS_ARMV7" = build ]; then check_arch armhf build-only; else check_arch armhf; fi
  else
    log "armv7 toolchain not installed: armv7 leg skipped (best effort)"
  fi
fi
report_sizes
if [ -n "$MAX_SIZE_AARCH64" ] && [ "$aarch64_size" -gt "$MAX_SIZE_AARCH64" ]; then
  echo "cross-check: the aarch64 node is $aarch64_size bytes, over its budget of $MAX_SIZE_AARCH64 (docs/BENCHMARKS-size.md)" >&2
  exit 1
fi
log "cross-check OK ($(elapsed))"
