//! The device binary the documents and packages build is the one measured and guarded
//! (issue 38: 16): every command that builds for an ARM target, the `.deb` for one and
//! the Yocto recipe use the `device` profile, the profile `scripts/cross-check.sh`
//! builds, sizes and holds to the budget of docs/BENCHMARKS-size.md. A plain
//! `--release` ARM build is larger than the budget.

use std::path::PathBuf;

fn read(rel: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

const ARM: [&str; 3] = [
    "aarch64-unknown-linux-gnu",
    "armv7-unknown-linux-gnueabihf",
    "arm-unknown-linux-gnueabihf",
];

/// The lines of `text` that build or package for an ARM target, continuation lines
/// (`\`) joined.
fn arm_builds(text: &str) -> Vec<String> {
    let mut joined = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let l = line.trim_start_matches('#').trim();
        cur.push_str(l.trim_end_matches('\\'));
        cur.push(' ');
        if !l.ends_with('\\') {
            joined.push(std::mem::take(&mut cur));
        }
    }
    joined
        .into_iter()
        .filter(|l| {
            (l.contains("cross build") || l.contains("cargo build") || l.contains("cargo deb"))
                && ARM.iter().any(|t| l.contains(&format!("--target {t}")))
        })
        .collect()
}

#[test]
fn every_documented_arm_build_uses_the_device_profile() {
    let mut seen = 0;
    for doc in [
        "README.md",
        "docs/INSTALL.md",
        "Cross.toml",
        "yocto/meta-outpost/README.md",
    ] {
        let text = read(doc);
        for l in arm_builds(&text) {
            seen += 1;
            assert!(
                l.contains("--profile device") && !l.contains("--release"),
                "{doc}: an ARM build that is not the measured device build: {l}"
            );
        }
        for t in ARM {
            assert!(
                !text.contains(&format!("target/{t}/release/")),
                "{doc}: points at the release build of {t}, not target/{t}/device/"
            );
        }
    }
    assert!(seen >= 4, "the ARM build commands were not found ({seen})");
}

#[test]
fn cross_check_and_the_yocto_recipe_build_the_device_profile() {
    let cc = read("scripts/cross-check.sh");
    assert!(
        cc.contains("--profile device --target \"$rtarget\""),
        "cross-check.sh"
    );
    let bb = read("yocto/meta-outpost/recipes-outpost/outpost/outpost_0.1.0.bb");
    assert!(
        bb.lines()
            .any(|l| l.trim() == "BUILD_MODE = \"--profile device\""),
        "the Yocto recipe builds another profile than the measured one"
    );
    assert!(
        bb.lines().any(|l| l.trim() == "BUILD_DIR = \"device\""),
        "the Yocto recipe must install from target/<triple>/device"
    );
}
