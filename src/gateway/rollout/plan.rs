//! A rollout's logic (PROTOCOL §17), pure: the spec an operator gives and its checks,
//! how the targets split into phases, what each node's observed outcome means, and the
//! one step a running rollout takes next — start the next phase, halt, expire or
//! complete — from the counts per phase and the time. No I/O, no clock: the driver
//! (`rollout::driver`) reads, asks [`advance`], and writes over the revision it read.

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
#[serde(deny_unknown_fields)]
pub struct Spec {
    pub selector: String,
    pub action: Action,
    #[serde(default)]
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

/// The index one past the last target of each phase, for `total` targets (in the order
/// they were selected): counts add up, shares are of the whole; the last phase takes
/// every target left, and no phase ends before the one before it.
pub fn phase_ends(sizes: &[Size], total: usize) -> Vec<usize> {
    let sizes: &[Size] = if sizes.is_empty() {
        &[Size::Percent(100)]
    } else {
        sizes
    };
    let mut ends = Vec::with_capacity(sizes.len());
    let mut end = 0usize;
    for s in sizes {
        end = match *s {
            Size::Count(n) => end.saturating_add(n as usize),
            Size::Percent(p) => end.max((total * p as usize).div_ceil(100)),
        }
        .min(total);
        ends.push(end);
    }
    if let Some(last) = ends.last_mut() {
        *last = total;
    }
    ends
}

/// The phase of the target at `index` (0-based, in selection order).
pub fn phase_of(ends: &[usize], index: usize) -> usize {
    ends.iter()
        .position(|&e| index < e)
        .unwrap_or(ends.len().saturating_sub(1))
}

/// How many nodes of one phase are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
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

/// What the running rollout does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing now.
    Wait,
    /// Start phase `.0` (send to its pending nodes).
    Start(usize),
    /// Failures reached the error threshold: send nothing more.
    Halt { failed: u64, of: u64 },
    /// The deadline passed: what was not final expires.
    Expire,
    /// Every phase started and every node is final.
    Complete,
}

/// The rollout's facts [`advance`] decides on.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    pub spec: &'a Spec,
    pub state: State,
    /// The phase started last.
    pub phase: usize,
    /// When it started.
    pub phase_started_ms: u64,
    pub deadline_ms: u64,
    pub now_ms: u64,
}

/// The next step of a rollout with `counts` per phase.
pub fn advance(f: &Facts<'_>, counts: &[Counts]) -> Step {
    if f.state != State::Running {
        return Step::Wait;
    }
    if f.now_ms >= f.deadline_ms {
        return Step::Expire;
    }
    let mut started = Counts::default();
    for c in counts.iter().take(f.phase + 1) {
        started.merge(c);
    }
    if let Some(thr) = f.spec.error_threshold_pct {
        let failed = started.failed + started.expired;
        if started.total > 0 && failed * 100 >= u64::from(thr) * started.total {
            return Step::Halt {
                failed,
                of: started.total,
            };
        }
    }
    let here = counts.get(f.phase).copied().unwrap_or_default();
    let reached = here.succeeded * 100 >= u64::from(f.spec.success_threshold_pct) * here.total;
    let waited = f
        .spec
        .phase_wait_s
        .is_some_and(|w| f.now_ms >= f.phase_started_ms.saturating_add(w * 1000));
    if f.phase + 1 < counts.len() {
        if reached || waited {
            return Step::Start(f.phase + 1);
        }
        return Step::Wait;
    }
    let mut all = started;
    for c in counts.iter().skip(f.phase + 1) {
        all.merge(c);
    }
    if all.settled() && !f.spec.dynamic {
        return Step::Complete;
    }
    Step::Wait
}

/// What was seen of a node's part, for [`outcome`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// The message's state at the gateway (`queued`, `delivering`, `delivered`,
    /// `rejected`, `expired`, `dead`), if it is known.
    pub message: Option<String>,
    /// Why it was rejected or expired.
    pub reason: Option<String>,
    /// A tool call's result: ok, or the error's code.
    pub result: Option<Result<(), String>>,
    /// Desired state: the version the node holds and whether it reports in sync.
    pub node_desired_version: u64,
    pub in_sync: bool,
}

/// A sent node's state from what was seen (`version`: the desired version the
/// rollout wrote for it); `None` while nothing new is known.
pub fn outcome(
    action: &Action,
    version: u64,
    now: NodeState,
    seen: &Seen,
) -> Option<(NodeState, Option<String>)> {
    let refused = |why: &Option<String>| Some(why.clone().unwrap_or_else(|| "refused".into()));
    let next = match (seen.message.as_deref(), action) {
        (Some("rejected"), _) => (NodeState::Failed, refused(&seen.reason)),
        (Some("expired" | "dead"), _) => (NodeState::Expired, seen.reason.clone()),
        (_, Action::ToolCall { .. }) => match &seen.result {
            Some(Ok(())) => (NodeState::Succeeded, None),
            Some(Err(code)) => (NodeState::Failed, Some(code.clone())),
            None if seen.message.as_deref() == Some("delivered") => (NodeState::Delivered, None),
            None => return None,
        },
        (Some("delivered"), Action::Command { .. }) => (NodeState::Succeeded, None),
        (_, Action::Command { .. }) => return None,
        (_, Action::Desired(_)) => {
            if seen.node_desired_version >= version && seen.in_sync {
                (NodeState::Succeeded, None)
            } else if seen.node_desired_version >= version {
                (NodeState::Delivered, None)
            } else {
                return None;
            }
        }
    };
    (next.0 != now).then_some(next)
}

#[cfg(test)]
mod tests;
