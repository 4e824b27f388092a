//! Starts that restarting cannot fix: a damaged store and a key file others can read.
//! Each exits with its own code (listed in the units' `RestartPreventExitStatus`, so
//! systemd does not restart-loop) and one line that says what to do next.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use serde_json::json;

use crate::harness::{bin, http, text, Home};

fn run_once(home: &Home) -> std::process::Output {
    Command::new(bin())
        .args(["run", "--config", home.config().to_str().unwrap()])
        .env_remove("OUTPOST_CONFIG")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("JOURNAL_STREAM")
        .output()
        .unwrap()
}

/// The units' `RestartPreventExitStatus` codes.
fn unit_prevents_restart_on(code: i32) -> bool {
    let unit = concat!(env!("CARGO_MANIFEST_DIR"), "/systemd/outpost.service");
    let gw = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/systemd/outpost-gateway.service"
    );
    [unit, gw].iter().all(|u| {
        std::fs::read_to_string(u)
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("RestartPreventExitStatus="))
            .any(|v| v.split_whitespace().any(|c| c == code.to_string()))
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_store_refuses_to_start_with_its_own_exit_code() {
    let home = Home::init("node", "node:dmg", "");
    let d = home.start();
    let tok = home.token("node:dmg", &["tool:echo"], "10m");
    for i in 0..300 {
        let r = http()
            .post(d.url("/v1/tool_call"))
            .bearer_auth(&tok)
            .json(&json!({"job_id": format!("MARKERJOB{i}"), "tool_name": "echo", "tool_args": {}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
    }
    assert!(d.stop().success());

    // Everything into the main file, then flip the bytes of every page that holds the
    // entries of one job (its audit entry among them).
    let db = home.data().join("store/store.sqlite3");
    let page = {
        let c = rusqlite::Connection::open(&db).unwrap();
        c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        c.query_row("PRAGMA page_size", [], |r| r.get::<_, usize>(0))
            .unwrap()
    };
    let mut bytes = std::fs::read(&db).unwrap();
    let marker = b"\"MARKERJOB150\"";
    let hits: Vec<usize> = bytes
        .windows(marker.len())
        .enumerate()
        .filter(|(_, w)| *w == marker)
        .map(|(i, _)| i / page)
        .collect();
    assert!(!hits.is_empty());
    for p in hits {
        for b in &mut bytes[p * page + 100..(p + 1) * page] {
            *b ^= 0x5A;
        }
    }
    std::fs::write(&db, &bytes).unwrap();

    for _ in 0..2 {
        let o = run_once(&home);
        assert_eq!(o.status.code(), Some(65), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        let last = err.lines().last().unwrap_or("");
        assert!(
            last.starts_with("outpost: store damaged, refusing to start"),
            "{err}"
        );
        assert!(
            last.contains("outpost doctor") && last.contains("backup"),
            "{err}"
        );
        assert_eq!(
            last.matches("malformed").count(),
            1,
            "cause repeated: {last}"
        );
    }
    assert!(unit_prevents_restart_on(65));
}

#[test]
fn a_key_file_others_can_read_refuses_to_start_with_its_own_exit_code() {
    let home = Home::init("node", "node:perm", "");
    let keys = home.data().join("keys.json");
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = run_once(&home);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("unsafe permissions") && err.contains("chmod 600"),
        "{err}"
    );
    assert!(unit_prevents_restart_on(77));
}

fn init_in(cwd: &std::path::Path, config: &str) -> std::process::Output {
    Command::new(bin())
        .current_dir(cwd)
        .args([
            "init",
            "--node-id",
            "node:x",
            "--data-dir",
            "data",
            "--config",
            config,
        ])
        .env_remove("OUTPOST_CONFIG")
        .output()
        .unwrap()
}

/// `outpost init --config NAME.toml` (a bare file name: its parent is "") works, and the
/// config it writes is usable from another working directory.
#[test]
fn init_with_a_bare_config_file_name_works() {
    let dir = tempfile::tempdir().unwrap();
    let o = init_in(dir.path(), "node.toml");
    assert!(o.status.success(), "{}", text(&o));
    let o = crate::harness::outpost(&[
        "config",
        "check",
        "--config",
        dir.path().join("node.toml").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
}

/// A failed init leaves nothing behind that blocks a retry.
#[test]
fn a_failed_init_leaves_nothing_that_blocks_a_retry() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("file"), b"not a directory").unwrap();
    // The config's directory cannot be created (a file is in the way): init fails after
    // the keys would have been written.
    let o = init_in(dir.path(), "file/node.toml");
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        !dir.path().join("data").exists(),
        "half an init left behind"
    );
    let o = init_in(dir.path(), "etc/node.toml");
    assert!(o.status.success(), "retry: {}", text(&o));
    assert!(dir.path().join("data/keys.json").exists());
}

/// `store.engine = "postgres"` is for gateways: a node's config with it is refused by
/// `config check` and `run` with the usage exit code (64), so systemd does not loop.
#[test]
fn a_node_config_naming_postgres_is_refused_with_exit_64() {
    let home = Home::init("node", "node:pg", "");
    let d = home.dir.path().join("outpost.d");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("60-store.toml"),
        "[store]\nengine = \"postgres\"\npostgres_url = \"postgres://x@127.0.0.1:1/db\"\n",
    )
    .unwrap();
    for args in [&["config", "check"][..], &["run"][..]] {
        let o = home.cli(args);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("gateway role only"),
            "{}",
            text(&o)
        );
    }
}

/// Issue 25 (6): a second daemon on a data directory another one serves is refused with
/// one line (before, it served the same store beside the first); the lock is the
/// kernel's, so it is free again as soon as the first process is gone, however it ended.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_daemon_on_the_same_data_directory_is_refused() {
    let home = Home::init("node", "node:twice", "");
    let first = home.start();
    // Spawned, not waited for blindly: a second daemon that is not refused serves on.
    let mut second = Command::new(bin())
        .args(["run", "--config", home.config().to_str().unwrap()])
        .env_remove("OUTPOST_CONFIG")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("JOURNAL_STREAM")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while second.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            second.kill().unwrap();
            let o = second.wait_with_output().unwrap();
            panic!(
                "a second daemon on the same data directory kept running: {}",
                text(&o)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let o = second.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(
        lines[0].contains(&format!("(pid {})", first.pid())) && lines[0].contains("stop it first"),
        "{err}"
    );
    // The first one was not disturbed.
    let r = http().get(first.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    first.signal(libc::SIGKILL);
    let _ = first.stop();
    let again = home.start();
    assert!(http()
        .get(again.url("/healthz"))
        .send()
        .await
        .unwrap()
        .status()
        .is_success());
}
