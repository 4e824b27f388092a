#!/usr/bin/env bash
# Install outpost on a Raspberry Pi (or any systemd Linux) without a package manager:
# binary, systemd unit, system user, config, then `systemctl enable --now`.
#
# Usage:
#   sudo scripts/install.sh --node-id node:pump-17 [--binary PATH] [--role node|gateway]
#                           [--upstream-url URL [--gateway-doc gw.json]] [--no-start]
#                           [--dry-run] [--root DIR]
#   sudo scripts/install.sh --uninstall [--purge] [--dry-run] [--root DIR]
#
#   --binary PATH   the outpost executable for this device (default: ./outpost, else
#                   target/release/outpost next to this script's repository)
#   --node-id ID    identity for a fresh install: runs `outpost init` (config + keys + store)
#                   when /etc/outpost/<role config> does not exist yet
#   --gateway-doc F the gateway's identity document (`outpost identity --json` there):
#                   trusted (--send --issue) right after init; it pins the gateway's TLS,
#                   which an https:// --upstream-url needs (else `config check` fails)
#   --dry-run       print every step, change nothing
#   --root DIR      install into a staging tree (image building, CI); no systemctl, no init
#   --uninstall     stop, disable and remove binary, units and snippets; keeps config and
#                   state (keys, queues, audit log). With --purge also removes those and the user.
#
# Files: /usr/local/bin/outpost, /usr/local/lib/systemd/system/outpost{,-gateway}.service,
# /usr/local/lib/{sysusers,tmpfiles}.d/outpost.conf, /etc/outpost/, /var/lib/outpost{,-gateway}/.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
binary="" role="node" node_id="" upstream_url="" gateway_doc="" dry_run=0 root="" mode=install purge=0 start=1

die() { echo "install.sh: $*" >&2; exit 64; }
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="${2:?--binary needs a path}"; shift 2 ;;
    --role) role="${2:?--role needs node|gateway}"; shift 2 ;;
    --node-id) node_id="${2:?--node-id needs an id}"; shift 2 ;;
    --upstream-url) upstream_url="${2:?--upstream-url needs a URL}"; shift 2 ;;
    --gateway-doc) gateway_doc="${2:?--gateway-doc needs a file}"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --root) root="${2:?--root needs a directory}"; shift 2 ;;
    --uninstall) mode=uninstall; shift ;;
    --purge) purge=1; shift ;;
    --no-start) start=0; shift ;;
    -h | --help) sed -n '2,24p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
case "$role" in
  node) unit=outpost.service config=/etc/outpost/outpost.toml data=/var/lib/outpost ;;
  gateway) unit=outpost-gateway.service config=/etc/outpost/gateway.toml data=/var/lib/outpost-gateway ;;
  *) die "--role must be node or gateway" ;;
esac

BIN=/usr/local/bin/outpost
UNITDIR=/usr/local/lib/systemd/system
SYSUSERS=/usr/local/lib/sysusers.d/outpost.conf
TMPFILES=/usr/local/lib/tmpfiles.d/outpost.conf

# Every change goes through `run`, so --dry-run shows exactly what would happen.
run() {
  echo "+ $*"
  if [ "$dry_run" -eq 0 ]; then "$@"; fi
}
# systemctl and user tooling act on the live system only, never on a --root staging tree.
live() {
  if [ -n "$root" ]; then echo "  (skipped with --root: $*)"; else run "$@"; fi
}
have_systemd() { [ -z "$root" ] && [ -d /run/systemd/system ]; }

if [ "$dry_run" -eq 0 ] && [ -z "$root" ] && [ "$(id -u)" -ne 0 ]; then
  die "run as root (or use --dry-run / --root DIR)"
fi

create_user() {
  if [ -n "$root" ]; then
    run systemd-sysusers --root="$root" "$here/systemd/sysusers.d/outpost.conf"
  elif getent passwd outpost >/dev/null; then
    echo "  user outpost exists"
  elif command -v systemd-sysusers >/dev/null; then
    run systemd-sysusers "$root$SYSUSERS"
  else
    run useradd --system --user-group --home-dir /var/lib/outpost --no-create-home \
      --shell /usr/sbin/nologin outpost
  fi
}

install_unit() {
  local name=$1
  # The units name /usr/bin/outpost (the packaged path); this install lives in /usr/local.
  echo "+ sed 's|/usr/bin/outpost|$BIN|' systemd/$name > $root$UNITDIR/$name"
  if [ "$dry_run" -eq 0 ]; then
    sed "s|/usr/bin/outpost|$BIN|g" "$here/systemd/$name" >"$root$UNITDIR/$name.tmp"
    chmod 0644 "$root$UNITDIR/$name.tmp"
    mv "$root$UNITDIR/$name.tmp" "$root$UNITDIR/$name"
  fi
}

do_install() {
  if [ -z "$binary" ]; then
    for b in ./outpost "$here/target/release/outpost"; do
      if [ -f "$b" ]; then binary=$b; break; fi
    done
  fi
  if [ -z "$binary" ] || [ ! -f "$binary" ]; then
    die "no binary: pass --binary PATH (built for this device's architecture)"
  fi
  for f in systemd/outpost.service systemd/outpost-gateway.service systemd/sysusers.d/outpost.conf \
    systemd/tmpfiles.d/outpost.conf packaging/outpost.toml; do
    [ -f "$here/$f" ] || die "missing $here/$f (run from an outpost source or release tree)"
  done

  echo "== outpost install ($role) from $binary${root:+ into $root}"
  run install -d -m 0755 "$root/usr/local/bin" "$root$UNITDIR" "$root/usr/local/lib/sysusers.d" \
    "$root/usr/local/lib/tmpfiles.d" "$root/etc/outpost/outpost.d"
  # New binary next to the old, then rename: a running daemon keeps its open inode.
  run install -m 0755 "$binary" "$root$BIN.new"
  run mv -f "$root$BIN.new" "$root$BIN"
  run install -m 0644 "$here/systemd/sysusers.d/outpost.conf" "$root$SYSUSERS"
  run install -m 0644 "$here/systemd/tmpfiles.d/outpost.conf" "$root$TMPFILES"
  install_unit outpost.service
  install_unit outpost-gateway.service
  create_user
  live systemd-tmpfiles --create "$TMPFILES"

  if [ -f "$root$config" ]; then
    echo "  $config exists: kept as is (upgrade)"
  elif [ -n "$node_id" ] && [ -z "$root" ]; then
    local args=(init --role "$role" --node-id "$node_id" --data-dir "$data" --config "$config")
    if [ -n "$upstream_url" ]; then args+=(--upstream-url "$upstream_url"); fi
    run "$BIN" "${args[@]}"
    if [ -n "$gateway_doc" ]; then
      run "$BIN" trust add "$gateway_doc" --send --issue --config "$config"
    fi
    run chown -R outpost:outpost "$data"
    run chmod 0700 "$data"
  else
    # No identity given (or staging): install the commented template; edit node_id and
    # run `outpost init` before starting (docs/INSTALL.md).
    if [ "$role" = gateway ]; then src=packaging/gateway.toml; else src=packaging/outpost.toml; fi
    run install -m 0644 "$here/$src" "$root$config"
    if [ -z "$root" ]; then
      echo "  NOTE: $config is a template (node_id unset); pass --node-id or run outpost init"
      start=0
    fi
  fi
  if [ -z "$root" ]; then
    run "$BIN" config check --config "$config"
  fi

  if have_systemd || [ "$dry_run" -eq 1 ]; then
    live systemctl daemon-reload
    if [ "$start" -eq 1 ]; then
      live systemctl enable --now "$unit"
      # An upgrade must restart onto the new binary; `enable --now` alone does not.
      live systemctl try-restart "$unit"
      if [ "$dry_run" -eq 0 ] && [ -z "$root" ]; then systemctl --no-pager status "$unit" | head -n 5 || true; fi
    else
      live systemctl enable "$unit"
      echo "  not started (--no-start or template config): systemctl start $unit when ready"
    fi
  else
    echo "  systemd not running here: units installed, not enabled"
  fi
  echo "== done"
}

do_uninstall() {
  echo "== outpost uninstall${root:+ from $root}"
  if have_systemd || [ "$dry_run" -eq 1 ]; then
    live systemctl disable --now outpost.service outpost-gateway.service
  fi
  run rm -f "$root$BIN" "$root$UNITDIR/outpost.service" "$root$UNITDIR/outpost-gateway.service" \
    "$root$SYSUSERS" "$root$TMPFILES"
  if have_systemd || [ "$dry_run" -eq 1 ]; then live systemctl daemon-reload; fi
  if [ "$purge" -eq 1 ]; then
    echo "  --purge: removing config, state (keys, queues, audit log) and the outpost user"
    run rm -rf "$root/etc/outpost" "$root/var/lib/outpost" "$root/var/lib/outpost-gateway"
    if [ -z "$root" ] && getent passwd outpost >/dev/null; then run userdel outpost; fi
  else
    echo "  kept /etc/outpost and /var/lib/outpost* (use --purge to remove keys and data)"
  fi
  echo "== done"
}

if [ "$mode" = install ]; then do_install; else do_uninstall; fi
