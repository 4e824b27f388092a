//! Power-cut test: the crash test's child, killed, and then every write it had not
//! synced rolled back — what a power cut may leave on the flash.
//!
//! SIGKILL alone keeps the page cache, so the crash test cannot see an answer given
//! before the fsync that covers it. Here the child runs with an `LD_PRELOAD` shim
//! (`powercut.c`, built with the system C compiler at test time) that logs, before each
//! write or truncate of a store file, the bytes it replaces, and marks each successful
//! fsync/fdatasync. After the kill, each file is rolled back over the entries logged
//! since the start of its last completed sync. Writes that raced with a sync count as
//! lost. The checks are the crash test's: every acknowledged enqueue present exactly
//! once unless acked, no acked message back, counters right, `doctor` healthy.
//!
//! What it does not model: torn or reordered writes within the unsynced set (only
//! "all of it lost"; the crash test covers "all of it kept"), and directory entries
//! (creating, renaming and removing files is taken as durable).
//!
//! `OUTPOST_PCUT_DEBUG=1` prints, per run, what was rolled back. The kill count is the
//! crash test's (`OUTPOST_STORE_CRASH_KILLS`, default 50). The shim's Rust side is in
//! `powercut_shim.rs` (the daemon's power-cut test uses it too).

use std::process::{Command, Stdio};

use super::crash::kill_loop;
use super::powercut_shim::PowerCut;
use super::*;

/// Does the shim load into this test binary? (It does not when the binary runs under
/// an emulator whose loader cannot take a host library.)
fn loads(cut: &PowerCut) -> bool {
    let probe = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.envs(cut.env(probe.path(), 0, None));
    // Without the child env var, `crash_child` returns at once.
    let ok = cmd
        .args(["--exact", "store::tests::crash::crash_child", "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok && cut.shim_ran()
}

fn power_cut_loop(kind: EngineKind) {
    let cut = match PowerCut::build() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("SKIPPED power-cut test: {why}");
            return;
        }
    };
    if !loads(&cut) {
        eprintln!("SKIPPED power-cut test: the LD_PRELOAD shim does not load into this test binary (emulated target?)");
        return;
    }
    kill_loop(kind, Some(&cut));
    let (runs, writes) = cut.totals();
    eprintln!("power cut: {runs} runs had unsynced writes; {writes} writes rolled back");
}

for_each_engine!(power_cut_loop);
