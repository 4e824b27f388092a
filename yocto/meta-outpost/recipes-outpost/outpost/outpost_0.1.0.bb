SUMMARY = "Edge-node agent for ARM field devices"
DESCRIPTION = "outpost keeps a durable inbox/outbox on flash, verifies and decrypts \
               signed envelopes, runs local tools while offline and syncs a tamper-evident \
               audit log upstream when connectivity returns. The same binary runs the gateway."
HOMEPAGE = "https://github.com/outpost-edge/outpost"
BUGTRACKER = "https://github.com/outpost-edge/outpost/issues"
SECTION = "net"
CVE_PRODUCT = "outpost"
LICENSE = "Apache-2.0"
LIC_FILES_CHKSUM = "file://${COMMON_LICENSE_DIR}/Apache-2.0;md5=89aea4e17d99a7cacdbeed46a0096b10"

# Pin the release commit; bump SRCREV together with PV and regenerate outpost-crates.inc
# (scripts/yocto-crates.sh in the outpost repository).
SRC_URI = "git://github.com/outpost-edge/outpost.git;protocol=https;branch=main"
SRCREV = "0000000000000000000000000000000000000000"

S = "${WORKDIR}/git"

inherit cargo cargo-update-recipe-crates systemd useradd

require ${BPN}-crates.inc

# Only the daemon binary; the crate also has dev-only targets.
CARGO_BUILD_FLAGS += "--bin outpost"
# The device's node binary: without the default `gateway` and `postgres` features (the
# gateway role and its database backend), so no gateway code and no PostgreSQL client
# is built in. The crate list below still
# names its crates: cargo resolves the whole Cargo.lock offline (--frozen).
CARGO_BUILD_FLAGS += "--no-default-features"
# The `device` profile (Cargo.toml), not the class's `--release`: the binary
# docs/BENCHMARKS-size.md measures and scripts/cross-check.sh holds to its size budget.
# BUILD_DIR is where cargo_do_install takes the binary from (target/<triple>/device).
BUILD_MODE = "--profile device"
BUILD_DIR = "device"

USERADD_PACKAGES = "${PN}"
USERADD_PARAM:${PN} = "--system --user-group --home-dir ${localstatedir}/lib/outpost \
                       --no-create-home --shell ${base_sbindir}/nologin outpost"

# A fleet image (docs/INSTALL.md, "4. A fleet from one image"), set in local.conf or a
# bbappend: with OUTPOST_UPSTREAM_URL the image gets /etc/outpost/outpost.d/50-fleet.toml
# (the device names itself from OUTPOST_NODE_ID_FROM, creates its keys at the first
# start and enrols with the token) and outpost.service enabled; OUTPOST_ENROLL_TOKEN is a
# file on the build host holding the token from `outpost enroll-token create`, installed
# as /etc/outpost/enroll.token (0600, owned by outpost).
OUTPOST_UPSTREAM_URL ??= ""
OUTPOST_ENROLL_TOKEN ??= ""
OUTPOST_NODE_ID_FROM ??= "machine-id"
OUTPOST_NODE_ID_PREFIX ??= "node:"
do_install[vardeps] += "OUTPOST_UPSTREAM_URL OUTPOST_ENROLL_TOKEN OUTPOST_NODE_ID_FROM OUTPOST_NODE_ID_PREFIX"
do_install[file-checksums] += "${@'${OUTPOST_ENROLL_TOKEN}:True' if d.getVar('OUTPOST_ENROLL_TOKEN') else ''}"

SYSTEMD_PACKAGES = "${PN}"
# Without a fleet drop-in the units stay disabled: they would fail until the device has
# its node_id and keys (docs/INSTALL.md); an image that provisions them by other means
# sets SYSTEMD_AUTO_ENABLE:${PN} = "enable" in a bbappend. A fleet image enables the
# node's unit only (the device build has no gateway).
SYSTEMD_SERVICE:${PN} = "${@'outpost.service' if d.getVar('OUTPOST_UPSTREAM_URL') else 'outpost.service outpost-gateway.service'}"
SYSTEMD_AUTO_ENABLE:${PN} = "${@'enable' if d.getVar('OUTPOST_UPSTREAM_URL') else 'disable'}"

do_install:append() {
    install -d ${D}${systemd_system_unitdir}
    install -m 0644 ${S}/systemd/outpost.service ${D}${systemd_system_unitdir}/
    install -m 0644 ${S}/systemd/outpost-gateway.service ${D}${systemd_system_unitdir}/
    sed -i -e 's,/usr/bin/outpost,${bindir}/outpost,g' \
        ${D}${systemd_system_unitdir}/outpost.service \
        ${D}${systemd_system_unitdir}/outpost-gateway.service

    install -d ${D}${sysconfdir}/outpost/outpost.d
    install -m 0644 ${S}/packaging/outpost.toml ${D}${sysconfdir}/outpost/outpost.toml
    install -m 0644 ${S}/packaging/gateway.toml ${D}${sysconfdir}/outpost/gateway.toml

    if [ -n "${OUTPOST_UPSTREAM_URL}" ]; then
        sed -e 's|^url = .*|url = "${OUTPOST_UPSTREAM_URL}"|' \
            -e 's|^node_id_from = .*|node_id_from = "${OUTPOST_NODE_ID_FROM}"|' \
            -e 's|^node_id_prefix = .*|node_id_prefix = "${OUTPOST_NODE_ID_PREFIX}"|' \
            ${S}/packaging/50-fleet.toml > ${D}${sysconfdir}/outpost/outpost.d/50-fleet.toml
        chmod 0644 ${D}${sysconfdir}/outpost/outpost.d/50-fleet.toml
    fi
    if [ -n "${OUTPOST_ENROLL_TOKEN}" ]; then
        install -m 0600 -o outpost -g outpost ${OUTPOST_ENROLL_TOKEN} ${D}${sysconfdir}/outpost/enroll.token
    fi

    install -d ${D}${nonarch_libdir}/sysusers.d ${D}${nonarch_libdir}/tmpfiles.d
    install -m 0644 ${S}/systemd/sysusers.d/outpost.conf ${D}${nonarch_libdir}/sysusers.d/outpost.conf
    install -m 0644 ${S}/systemd/tmpfiles.d/outpost.conf ${D}${nonarch_libdir}/tmpfiles.d/outpost.conf
}

CONFFILES:${PN} = "${sysconfdir}/outpost/outpost.toml ${sysconfdir}/outpost/gateway.toml"
FILES:${PN} += "${nonarch_libdir}/sysusers.d ${nonarch_libdir}/tmpfiles.d"
