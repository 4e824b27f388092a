//! The console's side of rollouts (PROTOCOL §17), as plain functions: what the "start a
//! rollout" form means as a [`Spec`] (its checks beyond the form's own are the flow's,
//! so the console and the API refuse the same rollouts), and how a rollout's counts
//! split one progress bar.

use serde::Deserialize;
use serde_json::Value;

use crate::gateway::rollout::plan::{Action, Counts, Size, Spec, State, DEFAULT_DEADLINE_S};

/// The "start a rollout" form as typed: every field text, so a refused one comes back
/// exactly as it was.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct NewRollout {
    #[serde(default)]
    pub selector: String,
    /// `command`, `tool_call` or `desired` (the radio button chosen).
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub command_type: String,
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub ttl_s: String,
    #[serde(default)]
    pub tool_name: String,
    #[serde(default)]
    pub tool_args: String,
    #[serde(default)]
    pub patch: String,
    /// `1,10%,100%`.
    #[serde(default)]
    pub phases: String,
    #[serde(default)]
    pub success_pct: String,
    #[serde(default)]
    pub error_pct: String,
    #[serde(default)]
    pub phase_wait: String,
    /// `7d`, `12h`, `30m`, `90s` or seconds.
    #[serde(default)]
    pub deadline: String,
    /// Present (`on`) when the box is ticked.
    #[serde(default)]
    pub dynamic: Option<String>,
}

impl NewRollout {
    /// The spec the form asks for; `Err` says what to correct, in the operator's words.
    pub fn spec(&self) -> Result<Spec, String> {
        let action = match self.kind.as_str() {
            "command" => Action::Command {
                command_type: self.command_type.trim().to_string(),
                body: json_or_null(&self.body, "the command's body")?,
                ttl_s: duration_s(&self.ttl_s, "the TTL")?,
            },
            "tool_call" => Action::ToolCall {
                tool_name: self.tool_name.trim().to_string(),
                tool_args: json_or_null(&self.tool_args, "the tool's arguments")?,
            },
            "desired" => match self.patch.trim() {
                "" => return Err("type the merge patch of the desired state (JSON)".into()),
                t => Action::Desired(
                    serde_json::from_str(t)
                        .map_err(|e| format!("the merge patch is not JSON ({e})"))?,
                ),
            },
            k => {
                return Err(format!(
                    "choose an action (command, tool call or desired state), not {k:?}"
                ))
            }
        };
        Ok(Spec {
            selector: self.selector.trim().to_string(),
            action,
            phases: phases(&self.phases)?,
            success_threshold_pct: pct(&self.success_pct, "the success threshold")?.unwrap_or(100),
            error_threshold_pct: pct(&self.error_pct, "the error threshold")?,
            dynamic: self.dynamic.is_some(),
            deadline_s: duration_s(&self.deadline, "the deadline")?.unwrap_or(DEFAULT_DEADLINE_S),
            phase_wait_s: duration_s(&self.phase_wait, "the phase wait")?,
        })
    }
}

/// JSON, or `null` when nothing was typed.
fn json_or_null(text: &str, what: &str) -> Result<Value, String> {
    match text.trim() {
        "" => Ok(Value::Null),
        t => serde_json::from_str(t).map_err(|e| format!("{what} is not JSON ({e})")),
    }
}

/// `1, 10%, 100%` as phase sizes (blank: one phase of every target).
pub fn phases(text: &str) -> Result<Vec<Size>, String> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(Vec::new());
    }
    t.split(',')
        .map(|p| {
            let p = p.trim();
            let bad = || {
                format!(
                    "phases are counts of nodes or shares like 10%, separated by commas: not {p:?}"
                )
            };
            match p.strip_suffix('%') {
                Some(n) => n
                    .trim()
                    .parse::<u8>()
                    .ok()
                    .filter(|n| (1..=100).contains(n))
                    .map(Size::Percent)
                    .ok_or_else(bad),
                None => p.parse::<u64>().ok().map(Size::Count).ok_or_else(bad),
            }
        })
        .collect()
}

/// A whole percentage 1–100, or `None` when blank.
fn pct(text: &str, what: &str) -> Result<Option<u8>, String> {
    match text.trim().trim_end_matches('%').trim() {
        "" => Ok(None),
        t => t
            .parse::<u8>()
            .ok()
            .filter(|n| (1..=100).contains(n))
            .map(Some)
            .ok_or_else(|| format!("{what} is a whole percentage 1-100, not {t:?}")),
    }
}

/// `7d`, `12h`, `30m`, `90s` or a number of seconds; `None` when blank.
pub fn duration_s(text: &str, what: &str) -> Result<Option<u64>, String> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(None);
    }
    let (num, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => (&t[..i], t[i..].trim()),
        None => (t, "s"),
    };
    let scale = match unit {
        "s" => 1,
        "m" | "min" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => 0,
    };
    num.parse::<u64>()
        .ok()
        .filter(|_| scale > 0)
        .and_then(|n| n.checked_mul(scale))
        .map(Some)
        .ok_or_else(|| format!("{what} is a duration like 7d, 12h, 30m or 90s, not {t:?}"))
}

/// One part of a progress bar: which state, how many nodes, and where it lies on a
/// bar [`BAR_WIDTH`] wide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub kind: &'static str,
    pub n: u64,
    pub x: u64,
    pub width: u64,
}

/// The width of a progress bar (its SVG's view box).
pub const BAR_WIDTH: u64 = 1000;

/// The shares of `c.total` that succeeded, failed, expired, were cancelled, are in
/// flight (queued or delivered) and are pending, left to right; parts of no node are
/// left out, and the widths always add up to the whole bar (a total of 0: none).
pub fn bar(c: &Counts) -> Vec<Segment> {
    let parts = [
        ("succeeded", c.succeeded),
        ("failed", c.failed),
        ("expired", c.expired),
        ("cancelled", c.cancelled),
        ("in-flight", c.queued + c.delivered),
        ("pending", c.pending),
    ];
    let total: u64 = parts.iter().map(|(_, n)| n).sum();
    if total == 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut before = 0u64;
    for (kind, n) in parts {
        if n == 0 {
            continue;
        }
        let x = before * BAR_WIDTH / total;
        before += n;
        let end = before * BAR_WIDTH / total;
        out.push(Segment {
            kind,
            n,
            x,
            width: end - x,
        });
    }
    out
}

/// A rollout's state as the API spells it.
pub fn state_name(s: State) -> &'static str {
    match s {
        State::Running => "running",
        State::Halted => "halted",
        State::Completed => "completed",
        State::Cancelled => "cancelled",
    }
}

#[cfg(test)]
#[path = "rollouts_tests.rs"]
mod tests;
