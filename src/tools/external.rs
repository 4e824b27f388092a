//! Running an external tool: one process group per call, killed as a whole.
//!
//! Contract with the tool program: it is started directly (argv from config, no shell)
//! with an empty environment except `PATH=/usr/bin:/bin` and `LANG=C`, working directory
//! `/`, its JSON arguments on stdin as one line (compact JSON, `\n`, then EOF — so
//! `read line` in a shell works), and must print one JSON value on stdout and exit 0.
//! Stderr is for the tool's own diagnostics: we keep the first few KiB for our logs and
//! never return it to clients (it may contain paths or data).
//!
//! A call ends when the program has exited *and* stdout/stderr reached EOF. A tool that
//! leaves a background process holding those pipes therefore runs into its timeout and
//! has its group killed — intended: nothing a tool started outlives its call.
//!
//! Why a process group: tools are often scripts that fork (`sh` → `python` → `curl`).
//! Killing only the direct child on timeout would leave the grandchildren running,
//! holding our pipes open and the device's resources busy. Each call starts its program
//! as the leader of a fresh group (`setpgid(0, 0)`) and every exit path — timeout,
//! oversized output, normal exit, and the future being dropped (client gone, shutdown) —
//! ends with `kill(-pgid, SIGKILL)`.
//!
//! The group is killed *before* the leader is reaped on every abnormal path, so its id
//! cannot have been recycled. After a normal exit we reap first (that is how we learn
//! the exit status) and then sweep leftover group members; the id of an empty group can
//! in principle be reused, but only after the kernel wraps around `pid_max` and some
//! process makes itself a group leader under that number in the microseconds between —
//! accepted, and documented here.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use super::ToolError;

/// The only environment a tool sees besides `LANG=C`.
pub const TOOL_PATH: &str = "/usr/bin:/bin";
/// Bytes of stderr kept for logging.
const STDERR_KEEP: usize = 4096;
/// How long we wait for a SIGKILLed group leader to be reaped before leaving it to
/// tokio's orphan reaper (a process stuck in uninterruptible I/O can take a while).
const REAP_GRACE: Duration = Duration::from_secs(5);

/// Kills the process group when dropped, unless disarmed. This is what turns "the
/// request future was dropped" into "the tool is gone".
struct GroupGuard {
    pgid: libc::pid_t,
    armed: bool,
}

impl GroupGuard {
    fn kill(&self) {
        if self.pgid > 0 {
            // SAFETY: kill(2) has no memory-safety preconditions; a negative pid targets
            // the process group. ESRCH (already gone) is fine.
            unsafe {
                libc::kill(-self.pgid, libc::SIGKILL);
            }
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            self.kill();
        }
    }
}

#[derive(Debug)]
struct TooLarge;

async fn read_limited<R: AsyncRead + Unpin>(r: Option<R>, limit: u64) -> Result<Vec<u8>, TooLarge> {
    let Some(mut r) = r else {
        return Ok(Vec::new());
    };
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = match r.read(&mut chunk).await {
            Ok(0) | Err(_) => return Ok(buf),
            Ok(n) => n,
        };
        if (buf.len() + n) as u64 > limit {
            return Err(TooLarge);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Read to EOF, keeping only the first `keep` bytes (the rest is drained so the tool
/// never blocks on a full stderr pipe).
async fn read_capped<R: AsyncRead + Unpin>(r: Option<R>, keep: usize) -> Result<Vec<u8>, TooLarge> {
    let Some(mut r) = r else {
        return Ok(Vec::new());
    };
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => return Ok(buf),
            Ok(n) => {
                let room = keep.saturating_sub(buf.len()).min(n);
                buf.extend_from_slice(&chunk[..room]);
            }
        }
    }
}

/// Run `argv` with `args` on stdin; see the module docs for the contract.
pub async fn run(
    tool: &str,
    argv: &[String],
    timeout_ms: u64,
    max_output_bytes: u64,
    args: &Value,
) -> Result<Value, ToolError> {
    let (program, rest) = argv
        .split_first()
        .ok_or_else(|| ToolError::Failed("tool has no command configured".into()))?;
    let mut input = serde_json::to_vec(args).unwrap_or_default();
    input.push(b'\n');
    let mut child = spawn(tool, program, rest)?;
    let pgid = child.id().map_or(0, |p| p as libc::pid_t);
    // Declared after `child`, so it drops (and kills the group) before the child handle.
    let mut group = GroupGuard { pgid, armed: true };

    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let io = async {
        let write = async move {
            if let Some(mut s) = stdin {
                // EPIPE just means the tool did not read its input; not our problem.
                let _ = s.write_all(&input).await;
                let _ = s.shutdown().await;
            }
            Ok::<(), TooLarge>(())
        };
        let (_, out, err) = tokio::try_join!(
            write,
            read_limited(stdout, max_output_bytes),
            read_capped(stderr, STDERR_KEEP)
        )?;
        Ok::<_, TooLarge>((out, err, child.wait().await))
    };
    let outcome = tokio::time::timeout(Duration::from_millis(timeout_ms), io).await;

    let (out, err, status) = match outcome {
        Ok(Ok((out, err, status))) => (out, err, status),
        abnormal => {
            group.kill();
            let _ = tokio::time::timeout(REAP_GRACE, child.wait()).await;
            group.armed = false;
            return Err(match abnormal {
                Err(_) => {
                    tracing::warn!(tool, timeout_ms, "tool timed out; process group killed");
                    ToolError::Timeout { timeout_ms }
                }
                _ => {
                    tracing::warn!(
                        tool,
                        max_output_bytes,
                        "tool output too large; process group killed"
                    );
                    ToolError::Failed(format!("tool output exceeded {max_output_bytes} bytes"))
                }
            });
        }
    };
    // Sweep anything the tool left behind in its group (see module docs).
    group.kill();
    group.armed = false;
    answer(tool, &out, &err, status)
}

/// Starts `program` as the leader of a fresh process group, with the environment, the
/// working directory and the pipes of the contract (module docs).
fn spawn(tool: &str, program: &str, rest: &[String]) -> Result<Child, ToolError> {
    let mut cmd = Command::new(program);
    cmd.args(rest)
        .env_clear()
        .env("PATH", TOOL_PATH)
        .env("LANG", "C")
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    cmd.spawn().map_err(|e| {
        tracing::warn!(tool, error = %e, "tool could not be started");
        ToolError::Failed("tool could not be started".into())
    })
}

/// The call's result once the tool exited and its pipes closed: its stdout as JSON if
/// it exited 0, else a failure that names the exit status, never its stderr (logged).
fn answer(
    tool: &str,
    out: &[u8],
    err: &[u8],
    status: std::io::Result<std::process::ExitStatus>,
) -> Result<Value, ToolError> {
    let stderr_text = String::from_utf8_lossy(err);
    let status = status.map_err(|e| {
        tracing::warn!(tool, error = %e, "waiting for tool failed");
        ToolError::Failed("tool status unknown".into())
    })?;
    if !status.success() {
        tracing::warn!(tool, status = %status, stderr = %stderr_text, "tool failed");
        return Err(ToolError::Failed(match status.code() {
            Some(code) => format!("tool exited with status {code}"),
            None => "tool was killed by a signal".into(),
        }));
    }
    if !err.is_empty() {
        tracing::debug!(tool, stderr = %stderr_text, "tool stderr");
    }
    serde_json::from_slice(out).map_err(|_| {
        tracing::warn!(
            tool,
            output_bytes = out.len(),
            "tool output is not valid JSON"
        );
        ToolError::Failed("tool output is not valid JSON".into())
    })
}
