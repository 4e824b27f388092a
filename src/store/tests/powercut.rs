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

use rand::Rng;

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

/// The shim, built and loading into this test binary; `None` (said on stderr) if this
/// machine cannot run `test` with it.
fn shim_for(test: &str) -> Option<PowerCut> {
    let cut = match PowerCut::build() {
        Ok(c) => c,
        Err(why) => {
            super::skipped(test, &why);
            return None;
        }
    };
    if !loads(&cut) {
        super::skipped(
            test,
            "the LD_PRELOAD shim does not load into this test binary (emulated target?)",
        );
        return None;
    }
    Some(cut)
}

fn power_cut_loop(kind: EngineKind) {
    let Some(cut) = shim_for("power-cut test") else {
        return;
    };
    kill_loop(kind, Some(&cut));
    let (runs, writes) = cut.totals();
    eprintln!("power cut: {runs} runs had unsynced writes; {writes} writes rolled back");
}

for_each_engine!(power_cut_loop);

const MIGRATE_ENV: &str = "OUTPOST_STORE_MIGRATE_CHILD";
const V2_EXTRA: usize = 5_000;

/// The child of [`a_migration_cut_by_power_loss_finishes_on_the_next_open`]: opening
/// the store migrates it. Without the env var it returns at once.
#[test]
fn migrate_child() {
    let Ok(dir) = std::env::var(MIGRATE_ENV) else {
        return;
    };
    let c = ManualClock::new(T0);
    drop(open(EngineKind::Sqlite, Path::new(&dir), &c));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Runs the migrate child on `dir` under the shim; whether the shim cut it.
fn migrate_under(cut: &PowerCut, dir: &Path, kill_at: u32) -> bool {
    use std::os::unix::process::ExitStatusExt;
    let status = Command::new(std::env::current_exe().unwrap())
        .envs(cut.env(dir, kill_at, None))
        .env(MIGRATE_ENV, dir)
        .args([
            "--exact",
            "store::tests::powercut::migrate_child",
            "--test-threads=1",
            "-q",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    match status.signal() {
        Some(libc::SIGKILL) => true,
        _ => {
            assert!(status.success(), "migration child failed: {status:?}");
            false
        }
    }
}

/// An upgrade that finds a schema-2 store migrates it in chunks when it opens. A power
/// cut at any write of that (each run cuts at a random one) leaves a store that the next
/// open finishes migrating, with every status and tombstone where it belongs.
#[test]
fn a_migration_cut_by_power_loss_finishes_on_the_next_open() {
    let Some(cut) = shim_for("migration power-cut test") else {
        return;
    };
    let c = ManualClock::new(T0);
    let root = tempfile::tempdir().unwrap();
    let template = root.path().join("v2");
    super::conformance::make_v2_store(EngineKind::Sqlite, &template, &c, V2_EXTRA);
    // How many writes a whole migration makes.
    let probe = root.path().join("probe");
    copy_dir(&template, &probe);
    assert!(!migrate_under(&cut, &probe, 0));
    let total = cut.logged_writes() as u32;
    assert!(total > 10, "the migration made only {total} writes");
    let mut rng = rand::thread_rng();
    let mut cuts = 0;
    for run in 1..=20 {
        let dir = root.path().join(format!("run{run}"));
        copy_dir(&template, &dir);
        if migrate_under(&cut, &dir, rng.gen_range(1..=total)) {
            cuts += 1;
            assert!(cut.roll_back(run) > 0, "run {run}: nothing to roll back");
        }
        let s = open(EngineKind::Sqlite, &dir, &c);
        let len = |tree| super::conformance::tree_len(&s, tree);
        assert_eq!(len(codec::T_STATUS), 0, "run {run}: old tombstone tree");
        super::conformance::assert_migrated(&s, V2_EXTRA);
        let report = s.doctor().unwrap();
        assert!(report.healthy(), "run {run}: {report:?}");
    }
    eprintln!("migration power cuts: {cuts} of 20 runs cut, within {total} writes");
    assert!(cuts >= 15, "only {cuts} of 20 runs were cut");
}
