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

USERADD_PACKAGES = "${PN}"
USERADD_PARAM:${PN} = "--system --user-group --home-dir ${localstatedir}/lib/outpost \
                       --no-create-home --shell ${base_sbindir}/nologin outpost"

SYSTEMD_PACKAGES = "${PN}"
SYSTEMD_SERVICE:${PN} = "outpost.service outpost-gateway.service"
# Enabled units would fail until the device has its node_id and keys (docs/INSTALL.md);
# an image that provisions them sets SYSTEMD_AUTO_ENABLE:${PN} = "enable" in a bbappend.
SYSTEMD_AUTO_ENABLE:${PN} = "disable"

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

    install -d ${D}${nonarch_libdir}/sysusers.d ${D}${nonarch_libdir}/tmpfiles.d
    install -m 0644 ${S}/systemd/sysusers.d/outpost.conf ${D}${nonarch_libdir}/sysusers.d/outpost.conf
    install -m 0644 ${S}/systemd/tmpfiles.d/outpost.conf ${D}${nonarch_libdir}/tmpfiles.d/outpost.conf
}

CONFFILES:${PN} = "${sysconfdir}/outpost/outpost.toml ${sysconfdir}/outpost/gateway.toml"
FILES:${PN} += "${nonarch_libdir}/sysusers.d ${nonarch_libdir}/tmpfiles.d"
