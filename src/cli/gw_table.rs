//! `outpost nodes`: the node list as an aligned table.

use serde_json::Value;

/// Seconds as a person reads them.
pub(super) fn ago(now_ms: u64, at_ms: Option<u64>) -> String {
    match at_ms {
        None => "never".into(),
        Some(t) => {
            let s = now_ms.saturating_sub(t) / 1000;
            match s {
                0..=119 => format!("{s}s ago"),
                120..=7199 => format!("{}m ago", s / 60),
                _ => format!("{}h ago", s / 3600),
            }
        }
    }
}

/// Labels as `k=v,k=v` (`-` for none).
fn labels(v: &Value) -> String {
    let pairs: Vec<String> = v
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    if pairs.is_empty() {
        "-".into()
    } else {
        pairs.join(",")
    }
}

/// The node list as an aligned table.
pub fn nodes_table(v: &Value, now_ms: u64) -> String {
    let mut rows = vec![[
        "NODE".to_string(),
        "LIVENESS".into(),
        "POLLING".into(),
        "LAST SEEN".into(),
        "QUEUED".into(),
        "OLDEST".into(),
        "VERSION".into(),
        "SYNC".into(),
        "LABELS".into(),
    ]];
    for n in v["nodes"].as_array().into_iter().flatten() {
        rows.push([
            n["node_id"].as_str().unwrap_or("?").to_string(),
            n["liveness"].as_str().unwrap_or("?").to_string(),
            if n["polling"] == true { "yes" } else { "no" }.to_string(),
            ago(now_ms, n["last_seen"].as_u64()),
            n["queue_depth"].as_u64().unwrap_or(0).to_string(),
            match n["oldest_age_s"].as_u64() {
                Some(s) if n["queue_depth"].as_u64().unwrap_or(0) > 0 => format!("{s}s"),
                _ => "-".into(),
            },
            n["agent_version"].as_str().unwrap_or("-").to_string(),
            if n["in_sync"] == false { "no" } else { "yes" }.to_string(),
            labels(&n["labels"]),
        ]);
    }
    if rows.len() == 1 {
        return "no nodes enrolled (add one with `outpost trust add NODE.json --send`)\n".into();
    }
    let widths: Vec<usize> = (0..9)
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}
