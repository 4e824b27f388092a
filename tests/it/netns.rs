//! Two network namespaces joined by a veth pair: test hosts of our own, so that a
//! daemon can be reached from an address that is not loopback. Needs root (`ip netns`);
//! `NetPair::new` returns None, with the reason printed, where that is not allowed.

use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

pub struct NetPair {
    pub a: String,
    pub b: String,
    /// Address of `a`'s end (the server side in tests).
    pub a_ip: String,
    pub b_ip: String,
}

fn ip(args: &[&str]) -> Result<Output, String> {
    let o = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if o.status.success() {
        Ok(o)
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

impl NetPair {
    pub fn new() -> Option<NetPair> {
        // A machine that could make them can still be told not to (and the test that
        // a skipped suite says so in a plain run needs one that skips for certain).
        if std::env::var_os("OUTPOST_TEST_NETNS").is_some_and(|v| v == "off") {
            crate::harness::skipped("network-namespace tests", "OUTPOST_TEST_NETNS=off");
            return None;
        }
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{}x{n}", std::process::id() % 100_000);
        let subnet = (std::process::id() as u32 * 7 + n) % 250;
        let pair = NetPair {
            a: format!("opa{tag}"),
            b: format!("opb{tag}"),
            a_ip: format!("10.231.{subnet}.1"),
            b_ip: format!("10.231.{subnet}.2"),
        };
        let (va, vb) = (format!("va{tag}"), format!("vb{tag}"));
        let steps: Vec<Vec<String>> = vec![
            vec!["netns".into(), "add".into(), pair.a.clone()],
            vec!["netns".into(), "add".into(), pair.b.clone()],
            vec![
                "link".into(),
                "add".into(),
                va.clone(),
                "type".into(),
                "veth".into(),
                "peer".into(),
                "name".into(),
                vb.clone(),
            ],
            vec![
                "link".into(),
                "set".into(),
                va.clone(),
                "netns".into(),
                pair.a.clone(),
            ],
            vec![
                "link".into(),
                "set".into(),
                vb.clone(),
                "netns".into(),
                pair.b.clone(),
            ],
            vec![
                "-n".into(),
                pair.a.clone(),
                "addr".into(),
                "add".into(),
                format!("{}/30", pair.a_ip),
                "dev".into(),
                va.clone(),
            ],
            vec![
                "-n".into(),
                pair.b.clone(),
                "addr".into(),
                "add".into(),
                format!("{}/30", pair.b_ip),
                "dev".into(),
                vb.clone(),
            ],
            vec![
                "-n".into(),
                pair.a.clone(),
                "link".into(),
                "set".into(),
                va,
                "up".into(),
            ],
            vec![
                "-n".into(),
                pair.b.clone(),
                "link".into(),
                "set".into(),
                vb,
                "up".into(),
            ],
            vec![
                "-n".into(),
                pair.a.clone(),
                "link".into(),
                "set".into(),
                "lo".into(),
                "up".into(),
            ],
            vec![
                "-n".into(),
                pair.b.clone(),
                "link".into(),
                "set".into(),
                "lo".into(),
                "up".into(),
            ],
        ];
        for s in steps {
            let args: Vec<&str> = s.iter().map(String::as_str).collect();
            if let Err(e) = ip(&args) {
                crate::harness::skipped(
                    "network-namespace tests",
                    &format!("cannot make network namespaces here ({e}); they need root"),
                );
                return None;
            }
        }
        Some(pair)
    }

    /// `ip netns exec <ns>` as a command prefix.
    pub fn prefix(ns: &str) -> Vec<String> {
        vec!["ip".into(), "netns".into(), "exec".into(), ns.into()]
    }

    /// `curl` run in namespace `ns`: (status, body).
    pub fn curl(ns: &str, url: &str, bearer: Option<&str>) -> (u16, String) {
        let mut cmd = Command::new("ip");
        cmd.args([
            "netns",
            "exec",
            ns,
            "curl",
            "-s",
            "-m",
            "10",
            "-w",
            "\n%{http_code}",
        ]);
        if let Some(t) = bearer {
            cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
        }
        let o = cmd.arg(url).output().expect("curl");
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_string())
    }
}

impl Drop for NetPair {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.a]);
        let _ = ip(&["netns", "del", &self.b]);
    }
}
