//! The tool registry: built-ins plus `[[tools]]` from config, one entry point `call`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::Semaphore;

use super::{external, pii, schema, sysinfo, ExternalToolConfig, ToolError, ToolSpec};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("{0}")]
    InvalidTool(String),
    #[error("tool {0:?} is defined twice (or shadows a built-in)")]
    Duplicate(String),
}

enum Kind {
    Echo,
    PiiRedact,
    Sysinfo,
    External(Vec<String>),
}

struct Tool {
    spec: ToolSpec,
    kind: Kind,
    permits: Arc<Semaphore>,
}

/// All tools this node offers. Build once at startup, share behind an `Arc`.
pub struct Registry {
    tools: BTreeMap<String, Tool>,
    data_dir: PathBuf,
}

fn builtin_specs() -> Vec<(ToolSpec, Kind)> {
    let spec =
        |name: &str, description: &str, args: Value, result: Value, timeout_ms, conc| ToolSpec {
            name: name.into(),
            description: description.into(),
            args_schema: args,
            result_schema: result,
            timeout_ms,
            max_output_bytes: 2 * 1024 * 1024,
            max_concurrency: conc,
        };
    vec![
        (
            spec(
                "echo",
                "Returns its arguments unchanged.",
                json!({}),
                json!({}),
                1_000,
                1024,
            ),
            Kind::Echo,
        ),
        (
            spec(
                "pii_redact",
                "Redacts e-mail addresses, phone numbers, Luhn-valid card numbers, IBANs \
                 with valid check digits, and IPv4/IPv6 addresses from text.",
                pii::args_schema(),
                pii::result_schema(),
                5_000,
                64,
            ),
            Kind::PiiRedact,
        ),
        (
            spec(
                "sysinfo",
                "Uptime, load averages, memory, disk usage of the data directory and CPU \
                 temperature where the board exposes it.",
                json!({"type": "object", "additionalProperties": false}),
                sysinfo::result_schema(),
                2_000,
                8,
            ),
            Kind::Sysinfo,
        ),
    ]
}

impl Registry {
    /// Built-ins plus the configured external tools. `data_dir` is what `sysinfo`
    /// reports disk usage for.
    pub fn new(data_dir: PathBuf, external: &[ExternalToolConfig]) -> Result<Self, RegistryError> {
        let mut tools = BTreeMap::new();
        let mut insert = |spec: ToolSpec, kind: Kind| {
            let permits = Arc::new(Semaphore::new(spec.max_concurrency as usize));
            let name = spec.name.clone();
            if tools.contains_key(&name) {
                return Err(RegistryError::Duplicate(name));
            }
            tools.insert(
                name,
                Tool {
                    spec,
                    kind,
                    permits,
                },
            );
            Ok(())
        };
        for (spec, kind) in builtin_specs() {
            insert(spec, kind)?;
        }
        for cfg in external {
            cfg.check().map_err(RegistryError::InvalidTool)?;
            let spec = ToolSpec {
                name: cfg.name.clone(),
                description: cfg.description.clone().unwrap_or_default(),
                args_schema: cfg
                    .args_schema
                    .clone()
                    .unwrap_or_else(|| json!({"type": "object"})),
                result_schema: json!({}),
                timeout_ms: cfg.timeout_ms,
                max_output_bytes: cfg.max_output_bytes,
                max_concurrency: cfg.max_concurrency,
            };
            insert(spec, Kind::External(cfg.command.clone()))?;
        }
        Ok(Self { tools, data_dir })
    }

    /// Contracts of all tools, sorted by name, for `GET /v1/tools`.
    pub fn contracts(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|t| t.spec.clone()).collect()
    }

    pub fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.get(name).map(|t| &t.spec)
    }

    /// Validate `args` and run the tool within its limits.
    ///
    /// Dropping the returned future stops the call: external tools' process groups are
    /// killed. A built-in already running on a blocking thread finishes in the
    /// background (they are bounded, short computations) and its result is discarded.
    pub async fn call(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        let tool = self
            .tools
            .get(name)
            .ok_or_else(|| ToolError::UnknownTool(name.to_string()))?;
        schema::validate(&tool.spec.args_schema, &args)
            .map_err(|e| ToolError::BadRequest(format!("tool_args{}: {}", e.path, e.message)))?;
        let _permit = tool
            .permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| ToolError::Busy {
                tool: name.to_string(),
                limit: tool.spec.max_concurrency,
            })?;
        let timeout_ms = tool.spec.timeout_ms;
        match &tool.kind {
            Kind::Echo => Ok(args),
            Kind::PiiRedact => {
                let text = args
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                run_blocking(timeout_ms, move || {
                    pii::redact(&text)
                        .map(|r| r.to_json())
                        .map_err(|e| ToolError::Failed(e.to_string()))
                })
                .await
            }
            Kind::Sysinfo => {
                let dir = self.data_dir.clone();
                run_blocking(timeout_ms, move || Ok(sysinfo::collect(&dir))).await
            }
            Kind::External(argv) => {
                external::run(name, argv, timeout_ms, tool.spec.max_output_bytes, &args).await
            }
        }
    }
}

/// Run a CPU- or file-bound built-in off the async workers, bounded by its timeout.
async fn run_blocking<F>(timeout_ms: u64, f: F) -> Result<Value, ToolError>
where
    F: FnOnce() -> Result<Value, ToolError> + Send + 'static,
{
    let task = tokio::task::spawn_blocking(f);
    match tokio::time::timeout(Duration::from_millis(timeout_ms), task).await {
        Ok(Ok(r)) => r,
        Ok(Err(_join)) => Err(ToolError::Failed("built-in tool crashed".into())),
        Err(_) => Err(ToolError::Timeout { timeout_ms }),
    }
}
