//! A rollout's logic (PROTOCOL §17), pure: the spec an operator gives and its checks,
//! how the targets split into phases, what each node's observed outcome means, and the
//! one step a running rollout takes next — start the next phase, halt, expire or
//! complete — from the counts per phase and the time. No I/O, no clock: the driver
//! (`rollout::driver`) reads, asks [`advance`], and writes over the revision it read.

pub use crate::gateway::storage::rollouts::{
    Action, Counts, NodeState, Size, Spec, SpecError, State, DEFAULT_DEADLINE_S, MAX_DEADLINE_S,
    MAX_PHASES,
};

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
    /// Failures forgiven by a resume (not counted against the error threshold).
    pub forgiven: u64,
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
        let failed = (started.failed + started.expired).saturating_sub(f.forgiven);
        if started.total > 0 && failed > 0 && failed * 100 >= u64::from(thr) * started.total {
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
