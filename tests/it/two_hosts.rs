//! README "A gateway and a node by hand", run as written on two hosts: two network
//! namespaces joined by a veth pair (crate::netns), the gateway's host name
//! `gw.example` resolved to the gateway's namespace through the node namespace's own
//! hosts file (`ip netns exec` bind-mounts `/etc/netns/<ns>/hosts` over `/etc/hosts`).
//!
//! The block is read from README.md itself: `# on gw.example` and `# on the node`
//! lines say where the lines below them run; `outpost run … &` lines start daemons the
//! test stops at the end; everything else runs in `sh -e` with the `outpost` under
//! test first on `PATH`, in one working directory (the files the README says to copy
//! between the hosts are simply there). It ends with the tool call from the gateway to
//! the node, whose result must come back.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::harness::{bin, wait_for};
use crate::netns::NetPair;

/// The README's block: (runs on the gateway's host?, lines), in order.
fn readme_steps() -> Vec<(bool, Vec<String>)> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let section = readme
        .split("## A gateway and a node by hand")
        .nth(1)
        .expect("README has the section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the section has a sh block");
    let mut steps: Vec<(bool, Vec<String>)> = Vec::new();
    let mut pending = String::new();
    for line in block.lines() {
        if let Some(host) = line.strip_prefix("# on ") {
            steps.push((host.starts_with("gw.example"), Vec::new()));
            continue;
        }
        if let Some(cont) = line.strip_suffix('\\') {
            pending.push_str(cont);
            continue;
        }
        let whole = format!("{pending}{line}");
        pending.clear();
        steps
            .last_mut()
            .expect("the block starts by saying where it runs")
            .1
            .push(whole);
    }
    steps
}

/// Removes the namespace's `/etc/netns/<ns>` and stops the daemons.
struct Cleanup {
    etc: PathBuf,
    daemons: Vec<Child>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
        let _ = std::fs::remove_dir_all(&self.etc);
    }
}

fn path_env() -> String {
    let dir = bin().parent().unwrap().to_path_buf();
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// `sh -ec script` in namespace `ns`: its stdout.
fn sh(ns: &str, cwd: &Path, script: &str) -> String {
    let o = Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-ec", script])
        .current_dir(cwd)
        .env("PATH", path_env())
        .env_remove("OUTPOST_CONFIG")
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    eprintln!("[{ns}] $ {script}\n{out}{err}");
    assert!(o.status.success(), "in {ns}: {script}\n{out}{err}");
    out
}

#[test]
fn the_readme_gateway_and_node_on_two_hosts_deliver_a_tool_call() {
    let steps = readme_steps();
    assert!(steps.len() >= 4, "{steps:?}");
    let Some(net) = NetPair::new() else { return };
    // gw.example, for the node's host only.
    let etc = PathBuf::from("/etc/netns").join(&net.b);
    if let Err(e) = std::fs::create_dir_all(&etc).and_then(|()| {
        std::fs::write(
            etc.join("hosts"),
            format!(
                "127.0.0.1 localhost\n::1 localhost\n{} gw.example\n",
                net.a_ip
            ),
        )
    }) {
        eprintln!("SKIPPED: cannot write {}: {e}", etc.display());
        return;
    }
    let mut clean = Cleanup {
        etc,
        daemons: Vec::new(),
    };
    let work = tempfile::tempdir().unwrap();
    let cwd = work.path();
    let mut last_out = String::new();
    for (on_gateway, lines) in steps {
        let ns = if on_gateway { &net.a } else { &net.b };
        let mut script = String::new();
        for line in lines {
            let cmd = line.split(" #").next().unwrap().trim();
            if let Some(run) = cmd
                .strip_prefix("outpost run ")
                .and_then(|r| r.strip_suffix('&'))
            {
                if !script.is_empty() {
                    last_out = sh(ns, cwd, &script);
                    script.clear();
                }
                let log = std::fs::File::create(cwd.join(format!("{ns}.log"))).unwrap();
                let child = Command::new("ip")
                    .args(["netns", "exec", ns])
                    .arg(bin())
                    .arg("run")
                    .args(run.split_whitespace())
                    .current_dir(cwd)
                    .env_remove("OUTPOST_CONFIG")
                    .env_remove("NOTIFY_SOCKET")
                    .env("OUTPOST_LOG", "info")
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .unwrap();
                clean.daemons.push(child);
                continue;
            }
            script.push_str(&line);
            script.push('\n');
        }
        if !script.is_empty() {
            last_out = sh(ns, cwd, &script);
        }
    }
    let logs = || {
        [&net.a, &net.b]
            .iter()
            .map(|ns| std::fs::read_to_string(cwd.join(format!("{ns}.log"))).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n----\n")
    };
    // The last line is the tool call: `outpost call` prints its result; an HTTP client's
    // answer is 200 with the result, or 202 queued when the node had not connected yet
    // (then its result arrives at the gateway).
    let last_line = last_out.trim().lines().last().unwrap_or("");
    let answer: Value = serde_json::from_str(last_line)
        .unwrap_or_else(|e| panic!("the tool call answered {last_out:?} ({e})\n{}", logs()));
    let result = if answer == serde_json::json!({"hi": 1}) {
        // `outpost call` prints the result itself.
        answer.clone()
    } else if answer["ok"] == true {
        answer["result"].clone()
    } else {
        assert_eq!(answer["queued"], true, "{answer}\n{}", logs());
        let id = answer["message_id"].as_str().unwrap().to_string();
        let read = sh(
            &net.a,
            cwd,
            "outpost token issue --aud gateway:main --scope read --ttl 10m --config gw/gateway.toml",
        );
        wait_for("the tool call's result", Duration::from_secs(60), || {
            let o = sh(
                &net.a,
                cwd,
                &format!(
                    "curl -sS --cacert gw/tls.crt https://localhost:8787/v1/messages/{id} \
                     -H 'Authorization: Bearer {}'",
                    read.trim()
                ),
            );
            let v: Value = serde_json::from_str(&o).ok()?;
            (!v["result"].is_null()).then(|| v["result"]["result"].clone())
        })
    };
    assert_eq!(result, serde_json::json!({"hi": 1}), "{answer}\n{}", logs());
    // The node reached its gateway by name, over TLS it verified by the pin.
    let status = sh(
        &net.b,
        cwd,
        "outpost status --json --config pump/outpost.toml",
    );
    let v: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(v["upstream"]["url"], "https://gw.example:8787", "{v}");
    assert!(v["upstream"]["last_ok_ms"].is_u64(), "{v}");
    drop(clean);
}
