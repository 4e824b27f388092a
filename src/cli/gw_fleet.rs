//! `outpost nodes label|show|desired` and `--selector` (PROTOCOL §16): a node's labels,
//! its detail (inventory, desired and reported state) and its desired state, through the
//! gateway's client API like the rest of `outpost nodes`.

use std::time::Duration;

use serde_json::Value;

use super::table::ago;
use super::{json_arg, Client};
use crate::cli::Exit;
use crate::fleet::LabelChange;

const WAIT: Duration = Duration::from_secs(20);

/// `s` as a query-string or path value (the sync loop's: RFC 3986's unreserved
/// characters kept, everything else percent-encoded).
pub(super) use crate::sync::worker::query_escape;

/// `outpost nodes label NODE k=v k-…`.
pub(super) fn label(c: &Client, id: &str, changes: &[String]) -> anyhow::Result<()> {
    let change = LabelChange::parse_args(changes).map_err(|e| Exit::usage(e.to_string()))?;
    let body = serde_json::to_value(&change)?;
    let path = format!("/v1/nodes/{}/labels", query_escape(id));
    let (_, v) = c.call("PATCH", &path, Some(&body), &[], WAIT)?;
    println!("{id}: {}", labels_text(&v["labels"]));
    Ok(())
}

/// Labels as `k=v, k=v` (or `no labels`).
pub(super) fn labels_text(labels: &Value) -> String {
    let pairs: Vec<String> = labels
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    if pairs.is_empty() {
        "no labels".into()
    } else {
        pairs.join(", ")
    }
}

/// `outpost nodes desired NODE --set JSON | --merge JSON [--if-match N]`.
pub(super) fn desired(
    c: &Client,
    id: &str,
    set: Option<&str>,
    merge: Option<&str>,
    if_match: Option<u64>,
) -> anyhow::Result<()> {
    let (method, body) = match (set, merge) {
        (Some(s), None) => ("PUT", json_arg("--set", s)?),
        (None, Some(m)) => ("PATCH", json_arg("--merge", m)?),
        _ => return Err(Exit::usage("give --set or --merge").into()),
    };
    let version = if_match.map(|v| v.to_string());
    let headers: Vec<(&str, &str)> = version.iter().map(|v| ("If-Match", v.as_str())).collect();
    let path = format!("/v1/nodes/{}/desired", query_escape(id));
    let (_, v) = c.call(method, &path, Some(&body), &headers, WAIT)?;
    println!(
        "{id}: desired state version {} written; the node receives it when it next connects (or at once, if it is connected)",
        v["version"]
    );
    Ok(())
}

/// `outpost nodes show NODE [--json]`.
pub(super) fn show(c: &Client, id: &str, as_json: bool) -> anyhow::Result<()> {
    let path = format!("/v1/nodes/{}", query_escape(id));
    let (_, v) = c.call("GET", &path, None, &[], WAIT)?;
    if as_json {
        println!("{}", serde_json::to_string(&v)?);
        return Ok(());
    }
    print!("{}", detail_text(&v, crate::clock::system().now_ms()));
    Ok(())
}

/// A node's detail as a person reads it.
pub(super) fn detail_text(v: &Value, now_ms: u64) -> String {
    let s = |x: &Value| match x {
        Value::Null => "-".to_string(),
        Value::String(t) => t.clone(),
        other => other.to_string(),
    };
    let mut out = format!(
        "{}\n  liveness   {} (last seen {}){}\n  labels     {}\n  queued     {}\n",
        s(&v["node_id"]),
        s(&v["liveness"]),
        ago(now_ms, v["last_seen"].as_u64()),
        if v["polling"] == true {
            ", polling"
        } else {
            ""
        },
        labels_text(&v["labels"]),
        s(&v["queue_depth"]),
    );
    let inv = &v["inventory"];
    if inv.is_null() {
        out.push_str("  inventory  not reported yet\n");
    } else {
        out.push_str(&format!(
            "  inventory  agent {}, {} ({}), kernel {}, host {}, serial {}\n             free {} B, store {} B, clock synchronised {}, tools {}\n",
            s(&inv["agent_version"]),
            s(&inv["os"]),
            s(&inv["arch"]),
            s(&inv["kernel"]),
            s(&inv["hostname"]),
            s(&inv["serial"]),
            s(&inv["data_free_bytes"]),
            s(&inv["store_bytes"]),
            s(&inv["clock_synchronized"]),
            inv["tools"].as_array().map_or(0, Vec::len),
        ));
        for (k, f) in inv["facts"].as_object().into_iter().flatten() {
            out.push_str(&format!("             {k} = {}\n", s(f)));
        }
    }
    let st = &v["state"];
    out.push_str(&format!(
        "  desired    version {} (the node holds {}): {}\n  reported   version {}: {}\n  {}\n",
        s(&st["desired_version"]),
        s(&st["node_desired_version"]),
        st["desired"],
        s(&st["reported_version"]),
        st["reported"],
        if st["in_sync"] == true {
            "in sync".to_string()
        } else {
            format!("out of sync: {}", st["delta"])
        },
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_detail_reads_as_text() {
        let v = json!({"node_id": "node:a", "liveness": "online", "last_seen": 95_000,
            "polling": true, "queue_depth": 0, "labels": {"site": "north"},
            "inventory": {"agent_version": "0.1.0", "arch": "aarch64", "os": "Debian 12",
                "facts": {"firmware": "2.4.1"}, "tools": ["echo"]},
            "state": {"desired_version": 2, "node_desired_version": 2,
                "desired": {"fan": 1}, "reported_version": 1, "reported": {},
                "in_sync": false, "delta": {"fan": 1}}});
        let t = detail_text(&v, 100_000);
        assert!(t.contains("site=north"), "{t}");
        assert!(t.contains("agent 0.1.0, Debian 12 (aarch64)"), "{t}");
        assert!(t.contains("firmware = 2.4.1"), "{t}");
        assert!(t.contains("out of sync: {\"fan\":1}"), "{t}");
        assert_eq!(labels_text(&json!({})), "no labels");
        assert_eq!(query_escape("site in (a,b)"), "site%20in%20%28a%2Cb%29");
    }
}
