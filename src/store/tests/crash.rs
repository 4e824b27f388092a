//! Crash test with real processes and SIGKILL.
//!
//! The parent re-executes this test binary filtered to [`crash_child`] with
//! `OUTPOST_STORE_CRASH_CHILD=<dir>`; the child enqueues and acks in a loop from four
//! threads and prints `T id` / `B id` before a call (intent) and `E id` / `A id` only
//! AFTER the enqueue / ack returned (i.e. after fsync).
//! The parent kills it with SIGKILL after a random number of lines, reopens the store
//! and checks: every acknowledged enqueue is present exactly once unless acked, no
//! acked message reappears, nothing appears that was never attempted, and the counters
//! match the records. Without the env var `crash_child` returns at once.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use rand::Rng;

use super::*;

const CHILD_ENV: &str = "OUTPOST_STORE_CRASH_CHILD";
const ENGINE_ENV: &str = "OUTPOST_STORE_CRASH_ENGINE";
const RUN_ENV: &str = "OUTPOST_STORE_CRASH_RUN";
/// Kills per engine; override with OUTPOST_STORE_CRASH_KILLS.
const DEFAULT_KILLS: usize = 50;

fn kind_from(name: &str) -> EngineKind {
    EngineKind::all()
        .into_iter()
        .find(|k| k.name() == name)
        .unwrap_or(EngineKind::Sqlite)
}

#[test]
fn crash_child() {
    let dir = match std::env::var(CHILD_ENV) {
        Ok(d) => d,
        Err(_) => return,
    };
    let kind = kind_from(&std::env::var(ENGINE_ENV).unwrap_or_default());
    let run = std::env::var(RUN_ENV).unwrap_or_default();
    let c = ManualClock::new(T0);
    let s = open(kind, Path::new(&dir), &c);
    let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let say = move |line: String| {
        let o = out.lock().unwrap();
        let mut o = o.lock();
        writeln!(o, "{line}").unwrap();
        o.flush().unwrap();
    };
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let s = s.clone();
            let say = say.clone();
            let run = run.clone();
            std::thread::spawn(move || {
                let peer = format!("p{t}");
                for i in 0.. {
                    let id = format!("r{run}-t{t}-{i}");
                    say(format!("T {id}"));
                    s.enqueue(msg(&peer, &id, (i % 3) as u8, id.as_bytes()))
                        .wait()
                        .unwrap();
                    say(format!("E {id}"));
                    if i % 3 == 2 {
                        let batch = s.next_batch("outbox", &peer, 2, T0).unwrap();
                        let got = ids(&batch);
                        for id in &got {
                            say(format!("B {id}"));
                        }
                        s.ack("outbox", &peer, got.clone(), T0).wait().unwrap();
                        for id in got {
                            say(format!("A {id}"));
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

fn crash_loop(kind: EngineKind) {
    kill_loop(kind, None);
}

/// The crash test's loop; with `cut`, each kill is also a power cut: every write the
/// child had not synced is rolled back before the store is reopened
/// ([`super::powercut`]).
pub(super) fn kill_loop(kind: EngineKind, cut: Option<&super::powercut_shim::PowerCut>) {
    let kills: usize = std::env::var("OUTPOST_STORE_CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_KILLS);
    let d = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = rand::thread_rng();
    let (mut tried, mut enq, mut acked) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let mut ack_tried = BTreeSet::new();
    for run in 0..kills {
        let mut cmd = Command::new(&exe);
        // A power-cut child kills itself right after a random write to its store
        // (every such cut leaves unsynced writes); the parent kills it only if it runs
        // on past many lines (then it is a power cut at a random moment).
        let kill_after = match cut {
            Some(cut) => {
                // SQLite: up to ~330 one-message commits, past two or three background
                // checkpoints (every 128 commits) and the WAL restarts after them. sled
                // writes far less often; up to 600 writes keeps its runs short.
                let writes = if matches!(kind, EngineKind::Sqlite) {
                    4000
                } else {
                    600
                };
                cmd.envs(cut.env(d.path(), rng.gen_range(1..writes), None));
                20_000
            }
            None => rng.gen_range(1..120usize),
        };
        let mut child = cmd
            .args([
                "--exact",
                "store::tests::crash::crash_child",
                "--nocapture",
                "--test-threads=1",
                "-q",
            ])
            .env(CHILD_ENV, d.path())
            .env(ENGINE_ENV, kind.name())
            .env(RUN_ENV, run.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let mut seen = 0;
        let mut line = String::new();
        let mut killed = false;
        loop {
            line.clear();
            let n = reader.read_line(&mut line).unwrap();
            if n == 0 {
                break;
            }
            // A line without '\n' was cut by the kill: the call may not have returned.
            if !line.ends_with('\n') {
                continue;
            }
            let l = line.trim_end();
            if let Some(id) = l.strip_prefix("T ") {
                tried.insert(id.to_owned());
            } else if let Some(id) = l.strip_prefix("E ") {
                enq.insert(id.to_owned());
            } else if let Some(id) = l.strip_prefix("B ") {
                ack_tried.insert(id.to_owned());
            } else if let Some(id) = l.strip_prefix("A ") {
                acked.insert(id.to_owned());
            } else {
                continue;
            }
            seen += 1;
            if seen == kill_after && !killed {
                child.kill().unwrap(); // SIGKILL
                killed = true;
            }
        }
        let status = child.wait().unwrap();
        let cut_itself = cut.is_some() && !killed && {
            use std::os::unix::process::ExitStatusExt;
            status.signal() == Some(libc::SIGKILL)
        };
        assert!(killed || cut_itself, "child exited on its own: {status:?}");
        if let Some(cut) = cut {
            let undone = cut.roll_back(run);
            // The cut came right after a write no sync can have covered yet: if there
            // was nothing to undo, the shim is not seeing the store's writes.
            assert!(
                !cut_itself || undone > 0,
                "run {run}: a power cut with nothing to roll back"
            );
        }

        let c = ManualClock::new(T0);
        let s = open(kind, d.path(), &c);
        let mut present = Vec::new();
        let mut after = None;
        loop {
            let page = s.list("outbox", None, after.as_deref(), 500).unwrap();
            present.extend(page.items.into_iter().map(|m| m.message_id));
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        let set: BTreeSet<String> = present.iter().cloned().collect();
        assert_eq!(set.len(), present.len(), "a message is present twice");
        for id in enq.difference(&ack_tried) {
            assert!(
                set.contains(id),
                "run {run}: acknowledged enqueue {id} lost"
            );
        }
        // An ack cut by the kill may or may not have committed — but then it is delivered.
        for id in ack_tried.difference(&acked) {
            if !set.contains(id) {
                assert_eq!(
                    s.status(id).unwrap().map(|st| st.state),
                    Some(MessageState::Delivered)
                );
            }
        }
        for id in &acked {
            assert!(!set.contains(id), "run {run}: acked {id} reappeared");
            assert_eq!(
                s.status(id).unwrap().map(|st| st.state),
                Some(MessageState::Delivered)
            );
        }
        for id in &set {
            assert!(tried.contains(id), "run {run}: {id} was never enqueued");
        }
        let report = s.doctor().unwrap();
        assert!(report.healthy(), "run {run}: {report:?}");
    }
    assert!(enq.len() > kills, "too little work done: {}", enq.len());
}

for_each_engine!(crash_loop);
