//! The console's side of fleet state (PROTOCOL §16), as plain functions: the fleet
//! page's selector filter, what the label editor's form means as a [`LabelChange`],
//! the desired-state form as a [`Write`], and how an inventory reads on a node's page.

use crate::fleet::{BadSelector, Inventory, LabelChange, Selector, Write};

/// The longest selector the fleet page takes (a query parameter; the grammar's own
/// limits are per key and value).
pub const MAX_SELECTOR: usize = 2000;
/// The longest JSON document the state panel shows in full (a document may be 64 KiB).
pub const SHOWN_JSON: usize = 16 * 1024;

/// The fleet page's selector: `None` when blank (every node), else parsed by the one
/// grammar, its error naming the position of the fault.
pub fn parse_selector(text: &str) -> Result<Option<Selector>, BadSelector> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(None);
    }
    Selector::parse(t).map(Some)
}

/// What the label editor asks for: `op` is `set` (the key to the value) or `remove`
/// (the key). The key and value are trimmed; their checks are the flow's
/// (`Labels::apply`), so the console and the API refuse the same changes.
pub fn label_change(op: &str, key: &str, value: &str) -> Result<LabelChange, String> {
    let key = key.trim();
    if key.is_empty() {
        return Err("type a label key".into());
    }
    let mut c = LabelChange::default();
    match op {
        "set" => {
            c.set.insert(key.to_string(), value.trim().to_string());
        }
        "remove" => c.remove.push(key.to_string()),
        _ => return Err(format!("{op:?} is neither set nor remove")),
    }
    Ok(c)
}

/// What the desired-state form asks for: the document typed (JSON), `mode` `replace`
/// (PUT) or `merge` (an RFC 7396 merge patch), and an optional `If-Match` version.
pub fn desired_write(
    mode: &str,
    doc: &str,
    if_match: &str,
) -> Result<(Write, Option<u64>), String> {
    let value: serde_json::Value =
        serde_json::from_str(doc.trim()).map_err(|e| format!("the document is not JSON ({e})"))?;
    let write = match mode {
        "replace" => Write::Replace(value),
        "merge" => Write::Merge(value),
        _ => return Err(format!("{mode:?} is neither replace nor merge")),
    };
    let if_match = match if_match.trim() {
        "" => None,
        t => Some(
            t.parse::<u64>()
                .map_err(|_| "If-Match must be a document version (a whole number)".to_string())?,
        ),
    };
    Ok((write, if_match))
}

/// Bytes as people read them: `512 B`, `1.5 KiB`, `3.2 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// One line of the inventory panel: what, and its value as text (`—` where the node
/// could not read it). Times are left to the page (`when`), which formats them.
pub enum Fact {
    Text(&'static str, String),
    When(&'static str, Option<u64>),
}

/// The inventory as the node page lists it, in a fixed order.
pub fn inventory_facts(inv: &Inventory) -> Vec<Fact> {
    let text = |v: &Option<String>| v.clone().unwrap_or_else(|| "—".into());
    let yes_no = |v: Option<bool>| match v {
        Some(true) => "yes".to_string(),
        Some(false) => "no".to_string(),
        None => "—".to_string(),
    };
    let size = |v: Option<u64>| v.map(bytes).unwrap_or_else(|| "—".into());
    let list = |v: Vec<String>| {
        if v.is_empty() {
            "none".into()
        } else {
            v.join(", ")
        }
    };
    vec![
        Fact::Text("Agent version", inv.agent_version.clone()),
        Fact::Text("OS", text(&inv.os)),
        Fact::Text("Kernel", text(&inv.kernel)),
        Fact::Text("Arch", inv.arch.clone()),
        Fact::Text("Hostname", text(&inv.hostname)),
        Fact::Text("Serial", text(&inv.serial)),
        Fact::When("Booted", inv.boot_time_ms),
        Fact::Text("Free disk", size(inv.data_free_bytes)),
        Fact::Text("Store", size(inv.store_bytes)),
        Fact::Text("Clock synchronised", yes_no(inv.clock_synchronized)),
        Fact::When("Key rotated", inv.key_rotated_at_ms),
        Fact::Text("Tools", list(inv.tools.clone())),
        Fact::Text(
            "Operator facts",
            list(inv.facts.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        ),
    ]
}

/// JSON pretty-printed, cut at `max` bytes (on a character boundary) with a note.
pub fn pretty_cut(v: &serde_json::Value, max: usize) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("\n… (cut: the whole document is in GET /v1/nodes/{id}/state)");
    }
    s
}

#[cfg(test)]
#[path = "fleet_state_tests.rs"]
mod tests;
