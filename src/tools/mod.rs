//! Tools a node runs on request: the built-ins (`echo`, `pii_redact`, `sysinfo`) and external programs from
//! `[[tools]]` config.
//!
//! - [`registry`]: [`Registry`] — lookup, argument validation, concurrency limits, dispatch.
//! - [`schema`]: the JSON Schema subset arguments are validated against.
//! - [`external`]: the external-process runner (no shell, cleared env, process-group kill).
//! - [`pii`], [`sysinfo`]: the non-trivial built-ins.
//!
//! Capability checks, idempotency by `job_id` and auditing happen *around* a call (API /
//! store layer); this module only answers "run tool X with these args, safely".
//!
//! Errors ([`ToolError`]) carry a stable `code()`: `unknown_tool`, `bad_request` (names
//! the failing field), `tool_timeout`, `tool_failed`, `busy` — a tool at its concurrency
//! limit refuses immediately instead of queueing. Their HTTP statuses (PROTOCOL §9) are
//! decided in `api::error`, the one place that knows HTTP.

pub mod external;
pub mod pii;
pub mod registry;
pub mod schema;
pub mod sysinfo;

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use registry::Registry;

/// A tool's public contract, as listed by `GET /v1/tools`. Fields in alphabetical
/// order: the listing gives each tool's keys sorted, like the rest of the API's answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct ToolSpec {
    /// JSON Schema (subset, see [`schema`]) the `tool_args` must satisfy.
    pub args_schema: Value,
    pub description: String,
    /// Calls of this tool that may run at once; more are refused with `busy`.
    pub max_concurrency: u32,
    /// Enforced on external tools' stdout (more → `tool_failed`). Built-ins are bounded
    /// by their argument limits instead (`pii_redact` output ≈ input ≤ 1 MiB).
    pub max_output_bytes: u64,
    pub name: String,
    /// JSON Schema of the result; documentation only (`{}` when unknown).
    pub result_schema: Value,
    pub timeout_ms: u64,
}

pub const DEFAULT_TIMEOUT_MS: u64 = 5_000;
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 65_536;
pub const DEFAULT_MAX_CONCURRENCY: u32 = 4;

fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT_MS
}
fn default_max_output_bytes() -> u64 {
    DEFAULT_MAX_OUTPUT_BYTES
}
fn default_max_concurrency() -> u32 {
    DEFAULT_MAX_CONCURRENCY
}

/// One `[[tools]]` entry in the config file.
///
/// ```toml
/// [[tools]]
/// name = "read_sensor"
/// command = ["/usr/lib/outpost/tools/read_sensor", "--json"]
/// timeout_ms = 5000           # default 5000
/// max_output_bytes = 65536    # default 65536
/// max_concurrency = 4         # default 4
/// description = "Reads the pump's pressure sensor"
/// args_schema = { type = "object" }   # default: any JSON object
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExternalToolConfig {
    pub name: String,
    /// argv: an absolute program path and its arguments. Never passed to a shell.
    pub command: Vec<String>,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default = "default_max_output_bytes")]
    pub max_output_bytes: u64,
    #[serde(default = "default_max_concurrency")]
    pub max_concurrency: u32,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub args_schema: Option<Value>,
}

/// Longest accepted timeout: a tool call holds an HTTP request open.
pub const MAX_TIMEOUT_MS: u64 = 600_000;
/// Largest accepted output limit.
pub const MAX_OUTPUT_LIMIT_BYTES: u64 = 16 * 1024 * 1024;

impl ExternalToolConfig {
    /// Semantic checks for `config check`; the message names the offending key.
    pub fn check(&self) -> Result<(), String> {
        if !valid_tool_name(&self.name) {
            return Err(format!(
                "tools.name {:?}: must match ^[a-z][a-z0-9_]{{0,63}}$",
                self.name
            ));
        }
        let ctx = |msg: &str| format!("tools[{}].{msg}", self.name);
        match self.command.first() {
            None => return Err(ctx("command: must not be empty")),
            Some(p) if !p.starts_with('/') => {
                return Err(ctx(
                    "command: the program must be an absolute path (no PATH lookup, no shell)",
                ))
            }
            Some(_) => {}
        }
        if self.command.iter().any(|a| a.contains('\0')) {
            return Err(ctx("command: arguments must not contain NUL"));
        }
        if self.timeout_ms == 0 || self.timeout_ms > MAX_TIMEOUT_MS {
            return Err(ctx(&format!("timeout_ms: must be 1..={MAX_TIMEOUT_MS}")));
        }
        if self.max_output_bytes == 0 || self.max_output_bytes > MAX_OUTPUT_LIMIT_BYTES {
            return Err(ctx(&format!(
                "max_output_bytes: must be 1..={MAX_OUTPUT_LIMIT_BYTES}"
            )));
        }
        if self.max_concurrency == 0 || self.max_concurrency > 1024 {
            return Err(ctx("max_concurrency: must be 1..=1024"));
        }
        if let Some(s) = &self.args_schema {
            schema::check_schema(s).map_err(|e| ctx(&format!("args_schema: {e}")))?;
        }
        Ok(())
    }
}

/// Job ids (client-chosen idempotency keys of tool calls, at node and gateway alike).
pub fn valid_job_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))
}

/// Tool names: what token scopes (`tool:<name>`) and URLs can carry without escaping.
pub fn valid_tool_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_')
}

/// Why a tool call did not produce a result. Messages are safe to show clients: no
/// paths, no stderr, no argument values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("unknown tool {0:?}")]
    UnknownTool(String),
    /// Arguments do not satisfy the tool's schema; the message names the field.
    #[error("{0}")]
    BadRequest(String),
    #[error("tool did not finish within {timeout_ms} ms")]
    Timeout { timeout_ms: u64 },
    #[error("{0}")]
    Failed(String),
    /// The tool's concurrency limit is reached. We refuse at once instead of queueing:
    /// the caller (HTTP 429 with `Retry-After`) decides whether to retry, and a stuck
    /// tool cannot pile up waiting requests inside the daemon.
    #[error("tool {tool:?} is at its concurrency limit of {limit}")]
    Busy { tool: String, limit: u32 },
}

impl ToolError {
    /// Stable snake_case code for the API's error body.
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnknownTool(_) => "unknown_tool",
            Self::BadRequest(_) => "bad_request",
            Self::Timeout { .. } => "tool_timeout",
            Self::Failed(_) => "tool_failed",
            Self::Busy { .. } => "busy",
        }
    }

    /// Audit outcome for this failure (`timeout` vs `failed` vs `refused`).
    pub fn audit_outcome(&self) -> crate::audit::AuditOutcome {
        use crate::audit::AuditOutcome;
        match self {
            Self::Timeout { .. } => AuditOutcome::Timeout,
            Self::Failed(_) => AuditOutcome::Failed,
            Self::UnknownTool(_) | Self::BadRequest(_) | Self::Busy { .. } => AuditOutcome::Refused,
        }
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;

    #[test]
    fn config_parses_from_toml_with_defaults_and_rejects_unknown_keys() {
        #[derive(Deserialize)]
        struct Doc {
            tools: Vec<ExternalToolConfig>,
        }
        let doc: Doc = toml::from_str(
            r#"
            [[tools]]
            name = "read_sensor"
            command = ["/usr/lib/outpost/tools/read_sensor"]
            timeout_ms = 5000
            max_output_bytes = 65536
            args_schema = { type = "object", required = ["id"] }
            "#,
        )
        .unwrap();
        let t = &doc.tools[0];
        assert_eq!(t.max_concurrency, DEFAULT_MAX_CONCURRENCY);
        assert_eq!(t.args_schema.as_ref().unwrap()["required"][0], "id");
        t.check().unwrap();
        let bad = toml::from_str::<Doc>(
            "[[tools]]\nname = \"x\"\ncommand = [\"/bin/true\"]\ntimeout_s = 5\n",
        );
        assert!(bad.is_err());
    }

    #[test]
    fn check_rejects_unsafe_configs() {
        let ok = ExternalToolConfig {
            name: "t".into(),
            command: vec!["/bin/true".into()],
            timeout_ms: 100,
            max_output_bytes: 10,
            max_concurrency: 1,
            description: None,
            args_schema: None,
        };
        ok.check().unwrap();
        let mut c = ok.clone();
        c.command = vec!["true".into()];
        assert!(c.check().is_err());
        let mut c = ok.clone();
        c.command.clear();
        assert!(c.check().is_err());
        let mut c = ok.clone();
        c.name = "Bad Name".into();
        assert!(c.check().is_err());
        let mut c = ok.clone();
        c.timeout_ms = 0;
        assert!(c.check().is_err());
        let mut c = ok.clone();
        c.args_schema = Some(serde_json::json!({"minimum": "x"}));
        assert!(c.check().is_err());
    }

    #[test]
    fn error_codes_are_stable() {
        let cases = [
            (ToolError::UnknownTool("x".into()), "unknown_tool", 404),
            (
                ToolError::BadRequest("/a: is required".into()),
                "bad_request",
                400,
            ),
            (ToolError::Timeout { timeout_ms: 1 }, "tool_timeout", 504),
            (ToolError::Failed("x".into()), "tool_failed", 502),
            (
                ToolError::Busy {
                    tool: "x".into(),
                    limit: 1,
                },
                "busy",
                429,
            ),
        ];
        for (e, code, status) in cases {
            assert_eq!(e.code(), code, "status {status} is checked in api::error");
        }
    }
}
