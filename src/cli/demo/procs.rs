//! The demo's plumbing: run `outpost` subcommands, start/stop daemons as real child
//! processes, talk to them over HTTP, and collect the gateway's SSE events.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use serde_json::Value;

use crate::clock::{Clock, SystemClock};

pub fn now_ms() -> u64 {
    SystemClock.now_ms()
}

/// `outpost ARGS` with this same executable; fails with its stderr.
pub fn outpost(args: &[&str]) -> anyhow::Result<String> {
    let exe = std::env::current_exe().context("locating the outpost executable")?;
    let out = Command::new(exe)
        .args(args)
        .env_remove("OUTPOST_CONFIG")
        .env_remove("NOTIFY_SOCKET")
        .output()
        .with_context(|| format!("running outpost {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "outpost {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One process's home: config + data dir.
pub struct Home {
    pub dir: PathBuf,
}

impl Home {
    pub fn config(&self) -> PathBuf {
        self.dir.join("outpost.toml")
    }
    pub fn data(&self) -> PathBuf {
        self.dir.join("data")
    }
    pub fn cfg_arg(&self) -> String {
        self.config().display().to_string()
    }
    pub fn log(&self) -> PathBuf {
        self.dir.join("daemon.log")
    }

    pub fn init(root: &Path, name: &str, role: &str, node_id: &str) -> anyhow::Result<Home> {
        let h = Home {
            dir: root.join(name),
        };
        std::fs::create_dir_all(&h.dir)?;
        outpost(&[
            "init",
            "--role",
            role,
            "--node-id",
            node_id,
            "--data-dir",
            &h.data().display().to_string(),
            "--config",
            &h.cfg_arg(),
            "--listen",
            "127.0.0.1:0",
        ])?;
        Ok(h)
    }

    /// Start `outpost run` and wait (bounded) for the address it bound.
    pub async fn start(&self) -> anyhow::Result<Daemon> {
        let addr_file = self.data().join("api.addr");
        let _ = std::fs::remove_file(&addr_file);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log())?;
        let exe = std::env::current_exe()?;
        let child = Command::new(exe)
            .args(["run", "--config", &self.cfg_arg()])
            .env_remove("OUTPOST_CONFIG")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("JOURNAL_STREAM")
            .env("OUTPOST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting outpost run")?;
        let mut d = Daemon {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        let log = self.log();
        d.addr = poll("the daemon's api.addr", Duration::from_secs(15), || {
            if let Ok(Some(st)) = d.child.try_wait() {
                return Err(anyhow!("daemon exited early ({st}); see {}", log.display()));
            }
            Ok(std::fs::read_to_string(&addr_file)
                .ok()
                .and_then(|s| s.trim().parse::<SocketAddr>().ok()))
        })
        .await?;
        Ok(d)
    }
}

/// A running daemon; killed if dropped without [`Daemon::stop`].
pub struct Daemon {
    child: Child,
    pub addr: SocketAddr,
}

impl Daemon {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// SIGTERM and wait for the clean exit.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        // SAFETY: kill(2) on the pid of our own child process.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let st = poll("the daemon to exit", Duration::from_secs(20), || {
            Ok(self.child.try_wait()?)
        })
        .await?;
        if !st.success() {
            bail!("daemon exited with {st}");
        }
        Ok(())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Poll `f` every 50 ms until it yields a value, fails, or `timeout` passes.
pub async fn poll<T>(
    what: &str,
    timeout: Duration,
    mut f: impl FnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f()? {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An HTTP client with the operator's bearer token.
#[derive(Clone)]
pub struct Api {
    pub http: reqwest::Client,
    pub token: String,
}

impl Api {
    pub fn new(token: String) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self { http, token })
    }

    pub async fn get(&self, url: &str) -> anyhow::Result<(u16, Value)> {
        let r = self.http.get(url).bearer_auth(&self.token).send().await?;
        answer(r).await
    }

    pub async fn post(&self, url: &str, body: &Value) -> anyhow::Result<(u16, Value)> {
        let r = self
            .http
            .post(url)
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await?;
        answer(r).await
    }
}

/// The largest answer or SSE frame the demo reads from its daemons.
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// The status and the JSON body (`null` when it is not JSON), read with a cap.
pub async fn answer(r: reqwest::Response) -> anyhow::Result<(u16, Value)> {
    let st = r.status().as_u16();
    let body = crate::sync::capped::read(r, MAX_ANSWER_BYTES).await?;
    Ok((st, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}

/// Events received on `GET /v1/events`, in arrival order.
pub type Events = Arc<Mutex<Vec<Value>>>;

/// Subscribe to the gateway's SSE stream; a background task appends every event.
pub async fn subscribe(
    api: &Api,
    url: &str,
) -> anyhow::Result<(Events, tokio::task::JoinHandle<()>)> {
    let mut resp = api
        .http
        .get(url)
        .bearer_auth(&api.token)
        .timeout(Duration::from_secs(3600))
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!("GET /v1/events answered {}", resp.status());
    }
    let events: Events = Arc::default();
    let sink = events.clone();
    let task = tokio::spawn(async move {
        let mut buf = String::new();
        while let Ok(Some(chunk)) = resp.chunk().await {
            buf.push_str(&String::from_utf8_lossy(&chunk));
            if buf.len() > MAX_ANSWER_BYTES {
                return;
            }
            while let Some(end) = buf.find("\n\n") {
                let frame: String = buf.drain(..end + 2).collect();
                for line in frame.lines() {
                    if let Some(data) = line.strip_prefix("data: ") {
                        if let Ok(v) = serde_json::from_str::<Value>(data) {
                            sink.lock().unwrap_or_else(|p| p.into_inner()).push(v);
                        }
                    }
                }
            }
        }
    });
    Ok((events, task))
}

pub fn events_of(events: &Events, kind: &str) -> Vec<Value> {
    events
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|e| e["type"] == kind)
        .cloned()
        .collect()
}
