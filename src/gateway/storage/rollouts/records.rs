//! What the state keeps of a rollout (PROTOCOL §17): its spec as an operator gave it,
//! where it stands, and one record per target node. The flow (`gateway::rollout`) and
//! both engines share these types; the logic over them is `gateway::rollout::plan`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The longest a rollout may run.
pub const MAX_DEADLINE_S: u64 = 30 * 86_400;
/// Its default deadline.
pub const DEFAULT_DEADLINE_S: u64 = 7 * 86_400;
/// Phases a rollout may have.
pub const MAX_PHASES: usize = 16;

/// The size of one phase: a number of nodes, or a share of the targets reached by the
/// end of this phase (`"10%"`: the first 10 % of the targets, counting earlier phases).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    Count(u64),
    Percent(u8),
}

impl Serialize for Size {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Size::Count(n) => s.serialize_u64(*n),
            Size::Percent(p) => s.serialize_str(&format!("{p}%")),
        }
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(Size::Count(n)),
            Raw::S(s) => s
                .strip_suffix('%')
                .and_then(|p| p.parse::<u8>().ok())
                .filter(|p| (1..=100).contains(p))
                .map(Size::Percent)
                .ok_or_else(|| {
                    serde::de::Error::custom(format!(
                        "a phase is a count of nodes or a share like \"10%\" (1-100%), not {s:?}"
                    ))
                }),
        }
    }
}

/// What a rollout does to each node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Action {
    /// A command (PROTOCOL §11.2); succeeded once delivered into the node's inbox.
    Command {
        #[serde(rename = "type")]
        command_type: String,
        #[serde(default)]
        body: Value,
        #[serde(default)]
        ttl_s: Option<u64>,
    },
    /// A tool call (PROTOCOL §11.1); succeeded with an `ok` result.
    ToolCall {
        tool_name: String,
        #[serde(default)]
        tool_args: Value,
    },
    /// A merge patch of the node's desired state (PROTOCOL §16.4); succeeded once the
    /// node holds that version and reports in sync.
    Desired(Value),
}

impl Action {
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Command { .. } => "command",
            Action::ToolCall { .. } => "tool_call",
            Action::Desired(_) => "desired",
        }
    }
}

/// `POST /v1/rollouts` as checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Spec {
    pub selector: String,
    pub action: Action,
    #[serde(default)]
    #[cfg_attr(test, schemars(with = "Vec<serde_json::Value>"))]
    pub phases: Vec<Size>,
    #[serde(default = "hundred")]
    pub success_threshold_pct: u8,
    /// Failures (failed or expired) among the nodes of the started phases at which the
    /// rollout halts; absent: it never halts by itself.
    #[serde(default)]
    pub error_threshold_pct: Option<u8>,
    #[serde(default)]
    pub dynamic: bool,
    #[serde(default = "default_deadline")]
    pub deadline_s: u64,
    /// A phase also starts this long after the previous one started, whatever its
    /// successes; absent: only the success threshold starts it.
    #[serde(default)]
    pub phase_wait_s: Option<u64>,
}

fn hundred() -> u8 {
    100
}
fn default_deadline() -> u64 {
    DEFAULT_DEADLINE_S
}

/// Why a spec is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("{0}")]
    Bad(String),
}

impl Spec {
    /// The spec's own bounds (the selector and the action are checked by their owners).
    pub fn check(&self) -> Result<(), SpecError> {
        let bad = |m: String| Err(SpecError::Bad(m));
        if self.phases.len() > MAX_PHASES {
            return bad(format!("at most {MAX_PHASES} phases"));
        }
        if self.phases.contains(&Size::Count(0)) {
            return bad("a phase of 0 nodes".into());
        }
        if !(1..=100).contains(&self.success_threshold_pct) {
            return bad("success_threshold_pct is 1-100".into());
        }
        if self
            .error_threshold_pct
            .is_some_and(|p| !(1..=100).contains(&p))
        {
            return bad("error_threshold_pct is 1-100".into());
        }
        if self.deadline_s == 0 || self.deadline_s > MAX_DEADLINE_S {
            return bad(format!("deadline_s is 1-{MAX_DEADLINE_S}"));
        }
        if self.phase_wait_s == Some(0) {
            return bad("phase_wait_s is at least 1".into());
        }
        Ok(())
    }
}

/// Where a rollout stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum State {
    Running,
    Halted,
    Completed,
    Cancelled,
}

/// Where one node stands in a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    /// Its phase has not started.
    Pending,
    /// Sent: queued for the node.
    Queued,
    /// In the node's inbox; its outcome is still to come (tool calls, desired state).
    Delivered,
    Succeeded,
    Failed,
    /// The deadline, or the message's own TTL, passed before it got there.
    Expired,
    Cancelled,
}

impl NodeState {
    pub const ALL: [NodeState; 7] = [
        NodeState::Pending,
        NodeState::Queued,
        NodeState::Delivered,
        NodeState::Succeeded,
        NodeState::Failed,
        NodeState::Expired,
        NodeState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Pending => "pending",
            NodeState::Queued => "queued",
            NodeState::Delivered => "delivered",
            NodeState::Succeeded => "succeeded",
            NodeState::Failed => "failed",
            NodeState::Expired => "expired",
            NodeState::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<NodeState> {
        NodeState::ALL.into_iter().find(|n| n.as_str() == s)
    }

    /// Nothing more happens to the node in this rollout.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            NodeState::Succeeded | NodeState::Failed | NodeState::Expired | NodeState::Cancelled
        )
    }

    /// Sent, and its outcome still to come.
    pub fn in_flight(self) -> bool {
        matches!(self, NodeState::Queued | NodeState::Delivered)
    }
}

/// How many nodes of one phase are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Counts {
    pub cancelled: u64,
    pub delivered: u64,
    pub expired: u64,
    pub failed: u64,
    pub pending: u64,
    pub queued: u64,
    pub succeeded: u64,
    pub total: u64,
}

impl Counts {
    pub fn add(&mut self, s: NodeState) {
        self.total += 1;
        *self.slot(s) += 1;
    }

    fn slot(&mut self, s: NodeState) -> &mut u64 {
        match s {
            NodeState::Pending => &mut self.pending,
            NodeState::Queued => &mut self.queued,
            NodeState::Delivered => &mut self.delivered,
            NodeState::Succeeded => &mut self.succeeded,
            NodeState::Failed => &mut self.failed,
            NodeState::Expired => &mut self.expired,
            NodeState::Cancelled => &mut self.cancelled,
        }
    }

    pub fn merge(&mut self, o: &Counts) {
        for (a, b) in [
            (&mut self.cancelled, o.cancelled),
            (&mut self.delivered, o.delivered),
            (&mut self.expired, o.expired),
            (&mut self.failed, o.failed),
            (&mut self.pending, o.pending),
            (&mut self.queued, o.queued),
            (&mut self.succeeded, o.succeeded),
            (&mut self.total, o.total),
        ] {
            *a += b;
        }
    }

    /// Every node of it is final.
    pub fn settled(&self) -> bool {
        self.pending + self.queued + self.delivered == 0
    }
}

/// A rollout as the state keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RolloutRecord {
    pub id: String,
    pub spec: Spec,
    /// The token subject that created it.
    pub created_by: String,
    /// The tenant whose token created it: it targets only that tenant's nodes and only
    /// that tenant's tokens (and the operator's) see it. `None`: the operator's, over
    /// every tenant (PROTOCOL §18).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    pub created_at_ms: u64,
    pub deadline_ms: u64,
    pub state: State,
    /// The phase started last, and when.
    pub phase: usize,
    pub phase_started_ms: u64,
    /// How many phases it has (their sizes applied to the targets it started with).
    pub phases: usize,
    /// Why it halted, or was cancelled, and by whom.
    #[serde(default)]
    pub detail: Option<String>,
    #[serde(default)]
    pub ended_at_ms: Option<u64>,
    /// Grows by one with every write (the driver writes only over the one it read).
    pub revision: u64,
    /// Failures an operator's resume forgave: the error threshold counts only those
    /// after it.
    #[serde(default)]
    pub forgiven: u64,
    /// Its nodes per state, per phase, as the last write saw them (the driver writes
    /// them once a pass when they moved): what reading a rollout shows without reading
    /// every target.
    #[serde(default)]
    pub counts: Vec<Counts>,
    /// sha256 (hex) of the request, when it came with an `Idempotency-Key`.
    #[serde(default)]
    pub request_sha256: Option<String>,
}

/// One node's part in a rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetRecord {
    pub node_id: String,
    pub phase: usize,
    pub state: NodeState,
    /// What was sent: the message id of a command or tool call.
    #[serde(default)]
    pub message_id: Option<String>,
    /// The desired version written for it (desired-state rollouts).
    #[serde(default)]
    pub version: u64,
    /// The node's error or refusal, when it failed or expired.
    #[serde(default)]
    pub detail: Option<String>,
    pub at_ms: u64,
}
