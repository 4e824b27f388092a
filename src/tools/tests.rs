//! Registry and external-runner tests with real processes (small `/bin/sh` scripts).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::*;
use crate::tools::registry::RegistryError;

/// A tool running `/bin/sh <script>`; the script is written into `dir`.
fn sh_tool(
    dir: &Path,
    name: &str,
    script: &str,
    timeout_ms: u64,
    max_output_bytes: u64,
) -> ExternalToolConfig {
    let path = dir.join(format!("{name}.sh"));
    std::fs::write(&path, script).unwrap();
    ExternalToolConfig {
        name: name.into(),
        command: vec!["/bin/sh".into(), path.to_string_lossy().into_owned()],
        timeout_ms,
        max_output_bytes,
        max_concurrency: 2,
        description: None,
        args_schema: None,
    }
}

fn registry(dir: &Path, tools: Vec<ExternalToolConfig>) -> Registry {
    Registry::new(dir.to_path_buf(), &tools).unwrap()
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return false;
    }
    // A killed process whose parent is gone may sit as a zombie until init reaps it
    // (containers without a reaping init); a zombie is not running.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .and_then(|(_, rest)| {
                    rest.split_whitespace()
                        .next()
                        .map(|st| st != "Z" && st != "X")
                })
                .unwrap_or(false)
        })
        .unwrap_or(false)
}

/// Poll `cond` every 10 ms until it holds or `limit` passes.
async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn read_pid(path: &PathBuf) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[tokio::test]
async fn builtins_are_listed_and_work() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), vec![]);
    let names: Vec<String> = reg.contracts().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["echo", "pii_redact", "sysinfo"]);
    let args = json!({"any": ["thing", 1, null]});
    assert_eq!(reg.call("echo", args.clone()).await.unwrap(), args);
    let out = reg
        .call("pii_redact", json!({"text": "mail bob@example.com"}))
        .await
        .unwrap();
    assert_eq!(out["text"], "mail [EMAIL]");
    let info = reg.call("sysinfo", json!({})).await.unwrap();
    assert!(info["disk"]["total_bytes"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn unknown_tool_and_bad_args_are_refused_before_running() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), vec![]);
    assert_eq!(
        reg.call("nope", json!({})).await.unwrap_err(),
        ToolError::UnknownTool("nope".into())
    );
    let e = reg
        .call("pii_redact", json!({"text": 5}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "bad_request");
    assert_eq!(e.to_string(), "tool_args/text: expected string, got number");
    let e = reg.call("pii_redact", json!({})).await.unwrap_err();
    assert_eq!(e.to_string(), "tool_args/text: is required");
    let e = reg.call("sysinfo", json!({"x": 1})).await.unwrap_err();
    assert_eq!(e.to_string(), "tool_args/x: is not an allowed property");
}

#[tokio::test]
async fn external_tool_gets_args_on_stdin_and_a_cleared_env() {
    let dir = tempfile::tempdir().unwrap();
    // `read` needs the trailing newline the runner sends.
    let script = "read -r input\nprintf '{\"input\":%s,\"env\":\"' \"$input\"\nenv | sort | tr '\\n' ' '\nprintf '\",\"cwd\":\"%s\"}' \"$(pwd)\"\n";
    let mut t = sh_tool(dir.path(), "envtool", script, 5_000, 65_536);
    t.args_schema = Some(
        json!({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}),
    );
    let reg = registry(dir.path(), vec![t]);
    // SAFETY-free way to prove isolation: this process has HOME etc.; the tool must not.
    let out = reg.call("envtool", json!({"n": 3})).await.unwrap();
    assert_eq!(out["input"], json!({"n": 3}));
    let env: Vec<&str> = out["env"].as_str().unwrap().split_whitespace().collect();
    // `sh` itself may add PWD/SHLVL/_; nothing from our environment may leak through.
    for var in &env {
        let name = var.split('=').next().unwrap();
        assert!(
            ["PATH", "LANG", "PWD", "SHLVL", "_", "OLDPWD"].contains(&name),
            "leaked {var}"
        );
    }
    assert!(
        env.contains(&"PATH=/usr/bin:/bin") && env.contains(&"LANG=C"),
        "{env:?}"
    );
    assert_eq!(out["cwd"], "/");
    let e = reg.call("envtool", json!({"n": "x"})).await.unwrap_err();
    assert_eq!(e.code(), "bad_request");
    assert_eq!(e.to_string(), "tool_args/n: expected integer, got string");
}

#[tokio::test]
async fn timeout_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let gc = dir.path().join("grandchild.pid");
    let script = format!(
        "sleep 30 &\necho $! > {gc}\necho $$ > {gc}.leader\nwait\n",
        gc = gc.display()
    );
    let reg = registry(
        dir.path(),
        vec![sh_tool(dir.path(), "sleepy", &script, 300, 1024)],
    );
    let e = reg.call("sleepy", json!({})).await.unwrap_err();
    assert_eq!(e, ToolError::Timeout { timeout_ms: 300 });
    assert_eq!(e.code(), "tool_timeout");
    let grandchild = read_pid(&gc).expect("grandchild pid written");
    let leader = read_pid(&gc.with_extension("pid.leader")).expect("leader pid written");
    assert!(
        eventually(Duration::from_secs(5), || !alive(grandchild)
            && !alive(leader))
        .await,
        "process group survived the timeout"
    );
}

#[tokio::test]
async fn dropping_the_call_kills_the_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let gc = dir.path().join("gc.pid");
    let script = format!("sleep 30 &\necho $! > {}\nwait\n", gc.display());
    let reg = Arc::new(registry(
        dir.path(),
        vec![sh_tool(dir.path(), "hang", &script, 60_000, 1024)],
    ));
    let r2 = reg.clone();
    let call = tokio::spawn(async move { r2.call("hang", json!({})).await });
    assert!(eventually(Duration::from_secs(5), || read_pid(&gc).is_some()).await);
    let grandchild = read_pid(&gc).unwrap();
    assert!(alive(grandchild));
    call.abort(); // like a client disconnect or shutdown dropping the request future
    assert!(call.await.unwrap_err().is_cancelled());
    assert!(
        eventually(Duration::from_secs(5), || !alive(grandchild)).await,
        "grandchild survived the dropped call"
    );
}

#[tokio::test]
async fn failures_are_tool_failed() {
    let dir = tempfile::tempdir().unwrap();
    let tools = vec![
        sh_tool(
            dir.path(),
            "exit3",
            "echo '{}'\necho 'secret path /etc/x' >&2\nexit 3\n",
            5_000,
            1024,
        ),
        sh_tool(dir.path(), "notjson", "echo 'hello world'\n", 5_000, 1024),
        sh_tool(dir.path(), "empty", "exit 0\n", 5_000, 1024),
        sh_tool(
            dir.path(),
            "huge",
            "yes '\"aaaaaaaaaaaaaaaaaaaa\"'\n",
            5_000,
            10_000,
        ),
        ExternalToolConfig {
            command: vec!["/nonexistent/tool".into()],
            ..sh_tool(dir.path(), "missing", "", 5_000, 1024)
        },
    ];
    let reg = registry(dir.path(), tools);
    let cases = [
        ("exit3", "tool exited with status 3"),
        ("notjson", "tool output is not valid JSON"),
        ("empty", "tool output is not valid JSON"),
        ("huge", "tool output exceeded 10000 bytes"),
        ("missing", "tool could not be started"),
    ];
    for (name, msg) in cases {
        let e = reg.call(name, json!({})).await.unwrap_err();
        assert_eq!(e.code(), "tool_failed", "{name}");
        assert_eq!(e.to_string(), msg, "{name}");
    }
}

#[tokio::test]
async fn output_at_the_limit_is_fine_and_stderr_is_not_returned() {
    let dir = tempfile::tempdir().unwrap();
    // 12 bytes of JSON (with newline) against a 12-byte limit; lots of stderr.
    let script = "head -c 200000 /dev/zero | tr '\\0' x >&2\nprintf '{\"ok\":true}\\n'\n";
    let reg = registry(
        dir.path(),
        vec![sh_tool(dir.path(), "edge", script, 5_000, 12)],
    );
    assert_eq!(
        reg.call("edge", json!({})).await.unwrap(),
        json!({"ok": true})
    );
}

#[tokio::test]
async fn concurrency_limit_refuses_with_busy() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    let script = format!("echo x >> {}\nsleep 30\n", marker.display());
    let reg = Arc::new(registry(
        dir.path(),
        vec![sh_tool(dir.path(), "slow", &script, 60_000, 1024)],
    ));
    let calls: Vec<_> = (0..2)
        .map(|_| {
            let r = reg.clone();
            tokio::spawn(async move { r.call("slow", json!({})).await })
        })
        .collect();
    let started = || {
        std::fs::read_to_string(&marker)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    assert!(eventually(Duration::from_secs(5), || started() == 2).await);
    let e = reg.call("slow", json!({})).await.unwrap_err();
    assert_eq!(
        e,
        ToolError::Busy {
            tool: "slow".into(),
            limit: 2
        }
    );
    assert_eq!(e.code(), "busy");
    for c in calls {
        c.abort();
    }
}

#[test]
fn registry_rejects_duplicates_and_invalid_configs() {
    let dir = tempfile::tempdir().unwrap();
    let echo = sh_tool(dir.path(), "echo", "", 100, 10);
    assert_eq!(
        Registry::new(dir.path().into(), &[echo]).err(),
        Some(RegistryError::Duplicate("echo".into()))
    );
    let a = sh_tool(dir.path(), "a", "", 100, 10);
    assert!(Registry::new(dir.path().into(), &[a.clone(), a.clone()]).is_err());
    let mut bad = a;
    bad.command[0] = "sh".into();
    assert!(matches!(
        Registry::new(dir.path().into(), &[bad]),
        Err(RegistryError::InvalidTool(_))
    ));
}

#[test]
fn contracts_serialize_for_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), vec![sh_tool(dir.path(), "ext", "", 1234, 99)]);
    let v: Value = serde_json::to_value(reg.contracts()).unwrap();
    let ext = v
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ext")
        .unwrap();
    assert_eq!(ext["timeout_ms"], 1234);
    assert_eq!(ext["args_schema"], json!({"type": "object"}));
    let pii = v
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "pii_redact")
        .unwrap();
    assert_eq!(pii["args_schema"]["required"], json!(["text"]));
}
