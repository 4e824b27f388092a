//! Starts real `outpost` processes on temp dirs and port 0, and talks to them over
//! real sockets. Every wait polls a condition with a deadline; nothing sleeps blindly.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `outpost` binary under test: this build's, or `$OUTPOST_TEST_BIN` (another build
/// of the same version, e.g. to run the suites against a copy taken before a shared
/// target directory was rebuilt, or one from before a fix).
pub fn bin() -> PathBuf {
    std::env::var_os("OUTPOST_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_outpost")))
}

/// Says that a test did not run, and why, where a plain `cargo test` shows it: libtest
/// keeps a passing test's `eprintln!` to itself, so a machine without PostgreSQL,
/// libfaketime or root used to see all green. This writes one line,
/// `SKIPPED <what>: <why>`, to the process's own stderr, past the capture.
pub fn skipped(what: &str, why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {what}: {why}");
}

/// Run `outpost ARGS` to completion.
pub fn outpost(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env_remove("OUTPOST_CONFIG")
        .env_remove("NOTIFY_SOCKET")
        .output()
        .expect("spawn outpost")
}

/// [`outpost`] with `env` set for it.
pub fn outpost_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(bin())
        .args(args)
        .env_remove("OUTPOST_CONFIG")
        .env_remove("NOTIFY_SOCKET")
        .envs(env.iter().copied())
        .output()
        .expect("spawn outpost")
}

pub fn outpost_stdin(args: &[&str], stdin: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(bin())
        .args(args)
        .env_remove("OUTPOST_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn outpost");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Poll `f` until it returns Some or the deadline passes.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A directory with a config, keys and store made by `outpost init`.
/// [`wait_for`] with an async check.
pub async fn wait_for_async<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub struct Home {
    pub dir: tempfile::TempDir,
    pub node_id: String,
    /// The database URL of a gateway on PostgreSQL (the `pg` suite), else `None`.
    pub db: Option<String>,
}

impl Home {
    pub fn init(role: &str, node_id: &str, extra_toml: &str) -> Home {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let cfg = dir.path().join("outpost.toml");
        let o = outpost(&[
            "init",
            "--role",
            role,
            "--node-id",
            node_id,
            "--data-dir",
            data.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ]);
        assert!(o.status.success(), "init failed: {}", text(&o));
        if !extra_toml.is_empty() {
            // As a drop-in, the way operators customize a packaged config.
            let d = dir.path().join("outpost.d");
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("50-test.toml"), extra_toml).unwrap();
        }
        let db = (role == "gateway" && crate::GATEWAY_ENGINE == "postgres")
            .then(crate::pg::PgCluster::shared)
            .flatten()
            .map(|pg| pg.create_database());
        if let Some(url) = &db {
            Self::use_database(dir.path(), url);
        }
        Home {
            dir,
            node_id: node_id.to_string(),
            db,
        }
    }

    /// A gateway home whose state is the PostgreSQL database at `url` (a replica of
    /// every other home using the same database, once it has the same keys).
    pub fn use_database(dir: &Path, url: &str) {
        let d = dir.join("outpost.d");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("40-store.toml"), crate::pg::store_toml(url)).unwrap();
    }

    pub fn config(&self) -> PathBuf {
        self.dir.path().join("outpost.toml")
    }
    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `outpost ARGS --config <this home>`.
    pub fn cli(&self, args: &[&str]) -> Output {
        let cfg = self.config();
        let mut a: Vec<&str> = args.to_vec();
        a.push("--config");
        a.push(cfg.to_str().unwrap());
        outpost(&a)
    }

    /// [`Self::cli`] with `env` set for it (e.g. `SUDO_USER`, as sudo sets it).
    pub fn cli_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let cfg = self.config();
        let mut a: Vec<&str> = args.to_vec();
        a.push("--config");
        a.push(cfg.to_str().unwrap());
        outpost_env(&a, env)
    }

    pub fn cli_stdin(&self, args: &[&str], stdin: &[u8]) -> Output {
        let cfg = self.config();
        let mut a: Vec<&str> = args.to_vec();
        a.push("--config");
        a.push(cfg.to_str().unwrap());
        outpost_stdin(&a, stdin)
    }

    pub fn identity_json(&self) -> String {
        let o = self.cli(&["identity", "--json"]);
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8(o.stdout).unwrap()
    }

    /// A token issued by this home's own key.
    pub fn token(&self, aud: &str, scopes: &[&str], ttl: &str) -> String {
        let mut args = vec!["token", "issue", "--aud", aud, "--ttl", ttl, "--scope"];
        args.extend_from_slice(scopes);
        let o = self.cli(&args);
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8(o.stdout).unwrap().trim().to_string()
    }

    pub fn start(&self) -> Daemon {
        self.start_with_env(&[])
    }

    pub fn start_with_env(&self, env: &[(&str, &str)]) -> Daemon {
        self.start_cmd(&[], env, None)
    }

    /// Starts the daemon through `wrapper` (e.g. `ip netns exec NS`).
    pub fn start_wrapped(&self, wrapper: &[String], env: &[(&str, &str)]) -> Daemon {
        self.start_cmd(wrapper, env, None)
    }

    /// Start with `RLIMIT_NOFILE` set to `nofile`, as a unit's `LimitNOFILE=` would.
    pub fn start_with_nofile(&self, nofile: u64) -> Daemon {
        self.start_cmd(&[], &[], Some(nofile))
    }

    fn start_cmd(&self, wrapper: &[String], env: &[(&str, &str)], nofile: Option<u64>) -> Daemon {
        let addr_file = self.data().join("api.addr");
        let _ = std::fs::remove_file(&addr_file);
        let log = std::fs::File::create(self.dir.path().join("daemon.log")).unwrap();
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin());
                c
            }
            None => Command::new(bin()),
        };
        cmd.args(["run", "--config", self.config().to_str().unwrap()])
            .env_remove("OUTPOST_CONFIG")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("JOURNAL_STREAM")
            .env("OUTPOST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        if let Some(n) = nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit(2) is async-signal-safe; nothing else runs in the child.
            unsafe {
                cmd.pre_exec(move || {
                    let rl = libc::rlimit {
                        rlim_cur: n as libc::rlim_t,
                        rlim_max: n as libc::rlim_t,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &rl) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd.spawn().expect("spawn outpost run");
        let mut d = Daemon {
            child,
            addr: "127.0.0.1:1".parse().unwrap(),
            log: self.dir.path().join("daemon.log"),
        };
        let addr = wait_for("api.addr", Duration::from_secs(20), || {
            if let Ok(Some(st)) = d.child.try_wait() {
                panic!("daemon exited early ({st}): {}", d.log_text());
            }
            std::fs::read_to_string(&addr_file)
                .ok()
                .and_then(|s| s.trim().parse::<SocketAddr>().ok())
        });
        d.addr = addr;
        d
    }
}

/// A gateway (`gateway:main`, on a fixed free port, so it can start after the node) and
/// a node `node_id` whose upstream is that gateway with `poll_wait_s`; not paired yet
/// (see [`pair`]).
pub fn gateway_and_node(node_id: &str, poll_wait_s: u64) -> (Home, Home) {
    let port = free_port();
    let gw = Home::init("gateway", "gateway:main", "");
    listen_on(&gw, port);
    let node = Home::init(
        "node",
        node_id,
        &format!(
            "[upstream]\nurl = \"http://127.0.0.1:{port}\"\ngateway_id = \"gateway:main\"\npoll_wait_s = {poll_wait_s}\n"
        ),
    );
    (gw, node)
}

/// The `envelope_accepted` entries of `home`'s audit log, by message id (after `audit
/// verify` passed).
pub fn envelope_accepted_counts(home: &Home) -> std::collections::BTreeMap<String, usize> {
    let o = home.cli(&["audit", "verify"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = home.cli(&["audit", "export", "--jsonl"]);
    assert!(o.status.success(), "{}", text(&o));
    let mut entries = std::collections::BTreeMap::new();
    for line in String::from_utf8(o.stdout).unwrap().lines() {
        let e: serde_json::Value = serde_json::from_str(line).unwrap();
        if e["event"] == "envelope_accepted" {
            *entries
                .entry(e["message_id"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
    }
    entries
}

/// Makes a gateway and a node know each other the way an operator pairs them: the
/// gateway may seal to the node, the node may seal to the gateway and takes its tokens.
pub fn pair(gw: &Home, node: &Home) {
    let o = gw.cli_stdin(
        &["trust", "add", "-", "--send"],
        node.identity_json().as_bytes(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = node.cli_stdin(
        &["trust", "add", "-", "--send", "--issue"],
        gw.identity_json().as_bytes(),
    );
    assert!(o.status.success(), "{}", text(&o));
}

/// A running `outpost run` child; killed on drop.
pub struct Daemon {
    pub child: Child,
    pub addr: SocketAddr,
    pub log: PathBuf,
}

impl Daemon {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    /// SIGTERM, then wait for a clean exit.
    pub fn stop(mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        wait_for("daemon exit", Duration::from_secs(30), || {
            self.child.try_wait().ok().flatten()
        })
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP client for tests (no proxy, short timeouts).
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

pub fn read_file(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// Write an executable `/bin/sh` tool `name` into `dir` and return the `[[tools]]`
/// config block for it (`extra` adds keys such as `timeout_ms = 500\n`).
pub fn tool_script(dir: &Path, name: &str, body: &str, extra: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join(format!("{name}.sh"));
    std::fs::write(&script, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!(
        "[[tools]]\nname = \"{name}\"\ncommand = [\"{}\"]\n{extra}",
        script.display()
    )
}

/// A port free right now on loopback (for a daemon that must restart on the same one).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A drop-in that makes `h` listen on `port` (`init --listen` took port 0).
pub fn listen_on(h: &Home, port: u16) {
    let d = h.dir.path().join("outpost.d");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("40-port.toml"),
        format!("[api]\nlisten = \"127.0.0.1:{port}\"\n"),
    )
    .unwrap();
}

/// Copy a directory tree (a gateway's data dir for a replica with the same identity).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// Every `.rs` file under `dir`, recursively (the suites that read the source).
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The value of one series of `/metrics` on loopback (`name{labels}` exactly as
/// exposed), `None` when the daemon exposes no such series.
pub async fn metric(addr: SocketAddr, series: &str) -> Option<f64> {
    let text = http()
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}
