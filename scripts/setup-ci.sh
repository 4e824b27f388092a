#!/usr/bin/env bash
# Install everything the packaging checks need on a FRESH machine (Debian 12, root, with
# rustup's cargo): nothing installed by hand survives between CI machines. Idempotent:
# each step is skipped when its tool is already present at the pinned version.
#   apt:   shellcheck, file, binutils, dpkg-dev (dpkg-shlibdeps for cargo-deb's $auto),
#          iproute2 + curl (the off-loopback metrics test's network namespaces), mount (disk-full tmpfs),
#          gcc (builds the bundled SQLite and the power-cut tests' LD_PRELOAD shim),
#          nftables + faketime + ethtool (the fault harness, scripts/chaos.py: packet faults, clock
#          steps, offloads off for the reordering forwarder)
#          chromium + chromium-driver, when no /usr/bin/chromedriver (the console's browser tests,
#          tests/it/console.rs, drive Debian's headless chromium; nothing downloads a browser)
#          postgresql, when no /usr/lib/postgresql/*/bin/initdb (the gateway's PostgreSQL tests
#          start their own clusters from those binaries, tests/it/pg.rs; the package is
#          installed with create_main_cluster = false, so no system cluster is made or started)
#   pip:   oelint-adv (Yocto recipe linter), schemathesis (fuzzes both daemons' APIs against
#          their /openapi.json: scripts/schemathesis.sh) and cryptography (its hook signs
#          the gateway's node-facing requests with Ed25519)
#   cargo: cargo-deb (pinned; 3.8.0 declares rust-version 1.85, builds with the host cargo)
#   cross: Debian rustc-web 1.85 + arm64/armhf std + cross gcc + qemu-user
#          (scripts/cross-check.sh --setup-only)
set -euo pipefail

cd "$(dirname "$0")/.."
CARGO_DEB_VERSION="3.8.0"
OELINT_ADV_VERSION="9.11.2"
SCHEMATHESIS_VERSION="4.32.5"
CRYPTOGRAPHY_VERSION="48.0.0"
export DEBIAN_FRONTEND=noninteractive
t0=$SECONDS
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

apt_updated=0
apt_update() {
  if [ "$apt_updated" -eq 0 ]; then
    as_root apt-get -o DPkg::Lock::Timeout=300 update -q || true
    apt_updated=1
  fi
}
APT_INSTALL=(apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends)

need_apt=()
for pair in cc:gcc openssl:openssl shellcheck:shellcheck file:file ar:binutils dpkg-shlibdeps:dpkg-dev systemd-analyze:systemd ip:iproute2 curl:curl mount:mount nft:nftables faketime:faketime ethtool:ethtool; do
  command -v "${pair%%:*}" >/dev/null || need_apt+=("${pair#*:}")
done
if [ "${#need_apt[@]}" -gt 0 ]; then
  echo "==> apt-get install ${need_apt[*]}"
  apt_update
  as_root "${APT_INSTALL[@]}" "${need_apt[@]}"
else
  echo "==> apt tools present (skip)"
fi

if compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
  echo "==> PostgreSQL server binaries present (skip)"
else
  echo "==> apt-get install postgresql (server binaries only: no main cluster)"
  apt_update
  # postgresql-common first, so its createcluster.conf can say "no main cluster" before
  # the server package's postinst would create and start one on 5432.
  as_root "${APT_INSTALL[@]}" postgresql-common
  as_root sed -i -E 's/^#?[[:space:]]*create_main_cluster[[:space:]]*=.*/create_main_cluster = false/' \
    /etc/postgresql-common/createcluster.conf
  as_root "${APT_INSTALL[@]}" postgresql
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null \
    || { echo "setup-ci: postgresql installed but no /usr/lib/postgresql/*/bin/initdb" >&2; exit 1; }
fi

if [ -x /usr/bin/chromedriver ] && { [ -x /usr/lib/chromium/chromium ] || [ -x /usr/bin/chromium ]; }; then
  echo "==> chromium + chromedriver present (skip)"
else
  echo "==> apt-get install chromium chromium-driver"
  apt_update
  as_root "${APT_INSTALL[@]}" chromium chromium-driver
fi

if python3 -m pip show oelint-adv 2>/dev/null | grep -qx "Version: $OELINT_ADV_VERSION"; then
  echo "==> oelint-adv $OELINT_ADV_VERSION present (skip)"
else
  echo "==> pip install oelint-adv==$OELINT_ADV_VERSION"
  python3 -m pip install -q --disable-pip-version-check "oelint-adv==$OELINT_ADV_VERSION"
fi
for pin in "schemathesis==$SCHEMATHESIS_VERSION" "cryptography==$CRYPTOGRAPHY_VERSION"; do
  if python3 -m pip show "${pin%%==*}" 2>/dev/null | grep -qx "Version: ${pin##*==}"; then
    echo "==> ${pin%%==*} ${pin##*==} present (skip)"
  else
    echo "==> pip install $pin"
    python3 -m pip install -q --disable-pip-version-check "$pin"
  fi
done
command -v oelint-adv >/dev/null || hash -r

if cargo deb --version 2>/dev/null | grep -q "$CARGO_DEB_VERSION"; then
  echo "==> cargo-deb $CARGO_DEB_VERSION present (skip)"
else
  echo "==> cargo install cargo-deb $CARGO_DEB_VERSION (a few minutes)"
  cargo install --locked --version "$CARGO_DEB_VERSION" cargo-deb
fi

bash scripts/cross-check.sh --setup-only
echo "==> setup-ci done in $((SECONDS - t0))s"
