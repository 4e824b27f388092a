//! A new user's first hour (issue #18): each rough edge found by following the README
//! literally, as a test that failed before its fix.

use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::harness::{bin, http, outpost, text, Daemon, Home};

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn dropin(home: &Home, name: &str, toml: &str) {
    let d = home.dir.path().join("outpost.d");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join(name), toml).unwrap();
}

/// `TOKEN=$(outpost token issue --dev …)` on a first use: the dev node's creation banner
/// went to stdout and into `$TOKEN` (before: stdout was "initialized node:dev (node)\n
/// config …" followed by the token).
#[test]
fn token_issue_on_first_dev_use_prints_only_the_token_on_stdout() {
    let cwd = tempfile::tempdir().unwrap();
    let o = Command::new(bin())
        .args(["token", "issue", "--dev", "--aud", "*"])
        .args(["--scope", "tool:pii_redact", "--ttl", "1h"])
        .current_dir(cwd.path())
        .env_remove("OUTPOST_CONFIG")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 1, "{}", text(&o));
    assert!(out.starts_with("v4.public."), "{}", text(&o));
    assert!(stderr(&o).contains("initialized node:dev"), "{}", text(&o));
}

/// A config whose node id is not the stored identity's passed `config check` and
/// `doctor` (exit 0), then `run` exited 1 and systemd restarted it for ever.
#[test]
fn a_config_naming_another_identity_is_refused_by_check_doctor_and_run() {
    let home = Home::init("node", "node:pump-17", "");
    dropin(
        &home,
        "90-renamed.toml",
        "[identity]\nnode_id = \"node:pump-18\"\n",
    );
    for args in [&["config", "check"][..], &["doctor"], &["run"]] {
        let o = home.cli(args);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {}", text(&o));
        let err = stderr(&o);
        assert!(
            err.contains("node:pump-18") && err.contains("node:pump-17"),
            "{args:?}: {}",
            text(&o)
        );
    }
}

/// `config check` stopped at the first problem (before: only the first drop-in's
/// syntax error, nothing about the others).
#[test]
fn config_check_reports_every_error_at_once() {
    let home = Home::init("node", "node:cfg", "");
    dropin(
        &home,
        "10-queue.toml",
        "[queue]\nmax_attempts = \"many\"\nmax_atempts = 3\n",
    );
    dropin(&home, "20-broken.toml", "this is not toml\n");
    dropin(
        &home,
        "30-api.toml",
        "[api]\nlisten = \"nowhere\"\nlisen = 1\n",
    );
    dropin(
        &home,
        "40-tools.toml",
        "[[tools]]\nname = \"t\"\ncommand = [\"/bin/true\"]\ntimeout = 5\n",
    );
    dropin(&home, "50-extra.toml", "[extra]\nx = 1\n");
    let o = home.cli(&["config", "check"]);
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    let err = stderr(&o);
    for want in [
        "queue.max_attempts",
        "queue.max_atempts",
        "20-broken.toml",
        "api.lisen",
        "tools[0].timeout",
        "[extra]",
    ] {
        assert!(err.contains(want), "missing {want:?}: {}", text(&o));
    }

    // Without the file that does not parse, the semantic checks run on the rest too.
    std::fs::remove_file(home.dir.path().join("outpost.d/20-broken.toml")).unwrap();
    let o = home.cli(&["config", "check"]);
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    let err = stderr(&o);
    for want in ["queue.max_atempts", "api.lisen", "api.listen", "nowhere"] {
        assert!(err.contains(want), "missing {want:?}: {}", text(&o));
    }
}

/// `audit verify` said OK while no signed checkpoint covered the newest entries (before:
/// `--require-checkpoint` was an unknown argument, exit 64, and the OK line said nothing
/// about coverage).
#[tokio::test(flavor = "multi_thread")]
async fn audit_verify_says_what_signed_checkpoints_cover() {
    let home = Home::init(
        "node",
        "node:aud",
        "[audit]\ncheckpoint_interval_s = 3600\n",
    );
    let d = home.start();
    let tok = home.token("node:aud", &["tool:echo"], "10m");
    for i in 0..3 {
        let r = http()
            .post(d.url("/v1/tool_call"))
            .bearer_auth(&tok)
            .json(&json!({"tool_name": "echo", "tool_args": {"i": i}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    // Killed: no shutdown checkpoint, so the newest entries are covered by none.
    d.signal(libc::SIGKILL);
    drop(d);

    let o = home.cli(&["audit", "verify"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(stdout(&o).contains("3 not yet"), "{}", text(&o));
    let o = home.cli(&["audit", "verify", "--require-checkpoint"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(stderr(&o).contains("not covered"), "{}", text(&o));

    let o = home.cli(&["audit", "checkpoint", "--now"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stdout(&o).starts_with("outpost/node:aud\n3\n"),
        "{}",
        text(&o)
    );
    let o = home.cli(&["audit", "verify", "--require-checkpoint"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stdout(&o).contains("3 entries covered by a verified signed checkpoint, 0 not yet"),
        "{}",
        text(&o)
    );
    // Without --now: the latest stored note, as `outpost audit checkpoint --help` says.
    let o = home.cli(&["audit", "checkpoint"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stdout(&o).starts_with("outpost/node:aud\n3\n"),
        "{}",
        text(&o)
    );
}

/// `outpost status` printed the upstream as raw JSON and a queue table whose numbers
/// ignored the column widths (before: `upstream: {"detail":…,"state":"none"}`).
#[tokio::test(flavor = "multi_thread")]
async fn status_is_a_readable_summary_and_json_for_scripts() {
    let gw = Home::init("gateway", "gateway:a-long-gateway-name-for-the-table", "");
    let node = Home::init("node", "node:st", "");
    crate::harness::pair(&gw, &node);
    let d = node.start();
    let tok = node.token("node:st", &["admin"], "10m");
    let r = http()
        .post(d.url("/v1/outbox"))
        .bearer_auth(&tok)
        .json(&json!({"to": gw.node_id, "payload_type": "DATA", "payload": {"x": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap());

    let o = node.cli(&["status"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = stdout(&o);
    assert!(!out.contains('{'), "raw JSON in the summary: {out}");
    assert!(out.contains("upstream: none"), "{out}");
    let table: Vec<&str> = out
        .lines()
        .skip_while(|l| *l != "queues:")
        .skip(1)
        .collect();
    let row = table
        .iter()
        .find(|l| l.contains("gateway:a-long"))
        .unwrap_or_else(|| panic!("no outbox row: {out}"));
    let depth_end = table[0].find("DEPTH").unwrap() + "DEPTH".len();
    assert_eq!(row.find(" 1 ").map(|i| i + 2), Some(depth_end), "{out}");
    assert_eq!(row.find("gateway:"), table[0].find("PEER"), "{out}");

    let o = node.cli(&["status", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["node_id"], "node:st");
}

/// Any scope text and any TTL were signed (before: `--scope tools:echo` and `--ttl
/// 3650d` both printed a token).
#[test]
fn token_issue_refuses_unknown_scopes_and_absurd_ttls_without_force() {
    let home = Home::init("node", "node:tok", "");
    let issue = |extra: &[&str]| {
        let mut a = vec!["token", "issue", "--aud", "node:tok"];
        a.extend_from_slice(extra);
        home.cli(&a)
    };
    let o = issue(&["--scope", "tools:echo"]);
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    assert!(stderr(&o).contains("tools:echo"), "{}", text(&o));
    let o = issue(&["--scope", "tool:echo", "--ttl", "3650d"]);
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    assert!(stderr(&o).contains("31 days"), "{}", text(&o));
    let o = issue(&["--scope", "tools:echo", "--ttl", "3650d", "--force"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(stdout(&o).starts_with("v4.public."), "{}", text(&o));
    // The help says what a TTL and a scope look like.
    let o = outpost(&["token", "issue", "--help"]);
    let help = stdout(&o);
    assert!(
        help.contains("15m") && help.contains("tool:<name>"),
        "{help}"
    );
}

/// The daemon's log written to a file carried ANSI colour codes (before: every line
/// had `\x1b[`).
#[test]
fn logs_have_no_colour_codes_when_stderr_is_not_a_terminal() {
    let home = Home::init("node", "node:log", "");
    let d = home.start();
    assert!(d.stop().success());
    let log = std::fs::read_to_string(home.dir.path().join("daemon.log")).unwrap();
    assert!(
        log.contains("event=\"ready\"") || log.contains("ready"),
        "{log}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a log file: {log:?}"
    );
}

/// A taken port was reported with its OS reason twice (before: "cannot bind …: Address
/// already in use (os error 98): Address already in use (os error 98)").
#[test]
fn a_bind_error_is_stated_once_with_what_to_do() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let home = Home::init("node", "node:bind", "");
    dropin(
        &home,
        "90-port.toml",
        &format!("[api]\nlisten = \"{addr}\"\n"),
    );
    let o = home.cli(&["run"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = stderr(&o);
    assert_eq!(err.matches("in use").count(), 1, "{}", text(&o));
    assert!(err.contains("api.listen"), "{}", text(&o));
}

/// The quick start's curls ran before the node listened and `curl -s` hid it: there is
/// now `outpost wait-ready` (before: an unknown subcommand, exit 64).
#[tokio::test(flavor = "multi_thread")]
async fn wait_ready_waits_for_readyz_and_says_why_it_did_not_come() {
    let home = Home::init("node", "node:wr", "");
    // Not started: fails within its timeout, saying what it saw.
    let o = home.cli(&["wait-ready", "--timeout", "1s"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(stderr(&o).contains("not ready after 1s"), "{}", text(&o));
    assert!(stderr(&o).contains("outpost run"), "{}", text(&o));

    // Started in the background, as the README does: waits, then prints the URL.
    let child = Command::new(bin())
        .args(["run", "--config", home.config().to_str().unwrap()])
        .env_remove("OUTPOST_CONFIG")
        .env_remove("NOTIFY_SOCKET")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed on drop, whatever happens below.
    let _daemon = Daemon {
        child,
        addr: "127.0.0.1:1".parse().unwrap(),
        log: home.dir.path().join("unused.log"),
    };
    let o = home.cli(&["wait-ready", "--timeout", "30s"]);
    assert!(o.status.success(), "{}", text(&o));
    let url = stdout(&o).trim().to_string();
    let r = http().get(format!("{url}/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

/// The README's quick start, as pasted in one go: it waits for the node before the
/// first curl, and no curl hides its errors.
#[test]
fn the_readme_quick_start_waits_for_readiness_and_shows_errors() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let block = readme
        .split("```sh")
        .find(|b| b.contains("run --release -- run --dev &"))
        .and_then(|b| b.split("```").next())
        .expect("the quick start block");
    let lines: Vec<&str> = block.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.contains("run --dev &"))
        .unwrap();
    let ready = lines.iter().position(|l| l.contains("wait-ready"));
    let first_curl = lines
        .iter()
        .position(|l| l.trim_start().starts_with("curl"))
        .unwrap();
    assert!(
        matches!(ready, Some(r) if r > start && r < first_curl),
        "no wait-ready between the start and the first curl:\n{block}"
    );
    for l in lines.iter().filter(|l| l.trim_start().starts_with("curl")) {
        assert!(
            l.contains("-sS") || l.contains("--show-error"),
            "a curl that hides errors: {l}"
        );
    }
}

/// Issue 29 (8): a newcomer without root, PostgreSQL or libfaketime ran `cargo test` and
/// saw all green: the suites that could not run said `SKIPPED: …` with `eprintln!`,
/// which libtest keeps to itself for a passing test. The line now reaches the plain
/// output. (The test binary runs itself on one test whose namespaces are turned off.)
#[test]
fn a_suite_that_cannot_run_says_so_in_a_plain_run() {
    let o = Command::new(std::env::current_exe().unwrap())
        .args([
            "gateway::gateway_metrics_need_read_off_loopback_and_count_requests",
            "--exact",
        ])
        .env("OUTPOST_TEST_NETNS", "off")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let all = format!("{}{}", stdout(&o), stderr(&o));
    assert!(all.contains("1 passed"), "{all}");
    assert!(
        all.lines()
            .any(|l| l.starts_with("SKIPPED network-namespace tests: OUTPOST_TEST_NETNS=off")),
        "no SKIPPED line in the plain output:\n{all}"
    );
}

/// Issue 29 (9): a token refusal said only `token refused: missing_scope`; it now names
/// the scopes that would do and the audience this daemon expects.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_refusal_names_the_scope_and_the_audience_it_needed() {
    let home = Home::init("node", "node:msg", "");
    let d = home.start();
    let call = |tok: String| {
        let url = d.url("/v1/tool_call");
        async move {
            let r = http()
                .post(url)
                .bearer_auth(tok)
                .json(&json!({"tool_name": "echo", "tool_args": {}}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (st, v) = call(home.token("node:msg", &["tool:other"], "5m")).await;
    assert_eq!(st, 403, "{v}");
    let m = v["error"]["message"].as_str().unwrap();
    assert!(m.contains("`tool:echo`, `tool:*` or `admin`"), "{m}");
    let (st, v) = call(home.token("node:elsewhere", &["tool:echo"], "5m")).await;
    assert_eq!(st, 403, "{v}");
    let m = v["error"]["message"].as_str().unwrap();
    assert!(m.contains("node:msg") && m.contains("`*`"), "{m}");
}

/// Issue 29 (9): with no config at all, every command said only "cannot read
/// /etc/outpost/outpost.toml: No such file or directory"; it now says how to make one.
#[test]
fn a_missing_config_says_how_to_make_one() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    for cmd in [&["status"][..], &["config", "check"], &["run"]] {
        let mut args: Vec<&str> = cmd.to_vec();
        args.extend(["--config", missing.to_str().unwrap()]);
        let o = outpost(&args);
        assert_eq!(o.status.code(), Some(64), "{cmd:?}: {}", text(&o));
        let e = stderr(&o);
        assert!(
            e.contains("outpost init") && e.contains("--dev"),
            "{cmd:?}: {e}"
        );
    }
}

/// Issue 29 (9): `outpost status --dev` in a directory without a dev node created one
/// (keys, identity, store) just to report that nothing was running.
#[test]
fn status_dev_does_not_create_a_node() {
    let cwd = tempfile::tempdir().unwrap();
    // `wait-ready --dev` waits for the dev node `run --dev` makes (exit 1 when it does
    // not come); `status --dev` has nothing to wait for (64).
    for (cmd, code) in [
        (&["status", "--dev"][..], 64),
        (&["wait-ready", "--dev", "--timeout", "1s"], 1),
    ] {
        let o = Command::new(bin())
            .args(cmd)
            .current_dir(cwd.path())
            .env_remove("OUTPOST_CONFIG")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(code), "{cmd:?}: {}", text(&o));
        assert!(
            stderr(&o).contains("outpost run --dev"),
            "{cmd:?}: {}",
            text(&o)
        );
        assert!(
            !cwd.path().join("outpost-dev").exists(),
            "{cmd:?} created ./outpost-dev"
        );
    }
}

/// Issue 29 (2): `outpost init` ignored `$OUTPOST_CONFIG` (its `--help` says it uses it;
/// as root it wrote /etc/outpost/outpost.toml instead), and its hints named no config.
#[test]
fn init_writes_the_config_outpost_config_names_and_its_hints_carry_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("etc/node.toml");
    let o = Command::new(bin())
        .args(["init", "--node-id", "node:envcfg", "--data-dir"])
        .arg(dir.path().join("data"))
        .env("OUTPOST_CONFIG", &cfg)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(cfg.is_file(), "no config at $OUTPOST_CONFIG: {}", text(&o));
    let hint = format!("--config {}", cfg.display());
    assert!(stderr(&o).contains(&hint), "{}", text(&o));
    // And the other commands find it the same way.
    let o = Command::new(bin())
        .args(["config", "check"])
        .env("OUTPOST_CONFIG", &cfg)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
}

/// Issue 29 (4): a node that never reached its gateway logged `node ready` and then
/// nothing (`upstream_disconnected` fires only on connected → disconnected). It now logs
/// the first failure, and each change of reason, once, with what to do; `wait-ready
/// --upstream` waits for the connection and says why it did not come.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_that_cannot_reach_its_gateway_says_why_and_what_to_do() {
    let (gw, node) = crate::harness::gateway_and_node("node:lonely", 1);
    crate::harness::pair(&gw, &node);
    let n = node.start();
    let o = node.cli(&["wait-ready", "--upstream", "--timeout", "3s"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = stderr(&o);
    assert!(err.contains("not connected to the gateway"), "{err}");
    assert!(err.contains("what to do: nothing listens there"), "{err}");
    // Retried meanwhile (5 s, then more): still one line for the one reason.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    let log = n.log_text();
    assert_eq!(log.matches("upstream_unreachable").count(), 1, "{log}");
    assert!(
        log.contains("reason=\"refused\"") || log.contains("reason=refused"),
        "{log}"
    );
    // The gateway comes: connected, and wait-ready --upstream says so.
    let _g = gw.start();
    let o = node.cli(&["wait-ready", "--upstream", "--timeout", "40s"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stderr(&o).contains("connected to the gateway"),
        "{}",
        text(&o)
    );
}

/// Issue 29 (9): `upstream.gateway_id` naming no trusted gateway passed `config check`;
/// the node then refused everything its gateway sent. It fails now (64) with the fix,
/// and passes once the gateway's document is trusted.
#[test]
fn config_check_fails_while_the_upstream_gateway_is_not_trusted() {
    let gw = Home::init("gateway", "gateway:main", "");
    let node = Home::init(
        "node",
        "node:unpaired",
        "[upstream]\nurl = \"http://127.0.0.1:9\"\ngateway_id = \"gateway:main\"\n",
    );
    let o = node.cli(&["config", "check"]);
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    let e = stderr(&o);
    assert!(
        e.contains("names no trusted gateway") && e.contains("trust add gw.json"),
        "{e}"
    );
    let o = node.cli_stdin(
        &["trust", "add", "-", "--send", "--issue"],
        gw.identity_json().as_bytes(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = node.cli(&["config", "check"]);
    assert!(o.status.success(), "{}", text(&o));
}
