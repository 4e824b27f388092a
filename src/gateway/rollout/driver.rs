//! The loop every replica runs over the rollouts not yet ended: for each whose lease it
//! can take, one pass — add the nodes that came to match (dynamic rollouts), read what
//! became of the sent ones, take the step [`plan::advance`] names (start a phase, halt,
//! expire, complete) and send to the pending nodes of the started phases, a bounded
//! number per pass. A replica that dies mid-pass leaves its lease to run out; the next
//! holder reads everything again, and a send repeated after a lost record sends
//! nothing twice (`send`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::plan::{self, advance, Facts, NodeState, State, Step};
use super::{count, send, LEASE_MS};
use crate::gateway::error::GatewayError;
use crate::gateway::events::GatewayEvent;
use crate::gateway::state::Gateway;
use crate::gateway::storage::rollouts::{RolloutRecord, TargetRecord};

/// One pass over the rollouts at least this often.
pub const TICK: Duration = Duration::from_secs(1);
/// Sent nodes whose outcome one pass reads, at most.
const OBSERVE_MAX: usize = 2_000;
/// Nodes one pass sends to, at most (the next pass goes on).
const SEND_MAX: usize = 1_000;
/// Sends in flight at once: each is a durable write, and writes in flight together
/// share their commits (the store's group commit, the database's).
const SEND_CONCURRENCY: usize = 64;

pub async fn run(gw: Arc<Gateway>) {
    let holder = format!("driver:{}", uuid::Uuid::now_v7());
    let mut last: HashMap<String, plan::Counts> = HashMap::new();
    loop {
        if let Err(e) = pass(&gw, &holder, &mut last).await {
            tracing::warn!(event = "rollout_pass_failed", error = %e);
        }
        tokio::select! {
            _ = gw.shutdown().cancelled() => return,
            _ = tokio::time::sleep(TICK) => {}
        }
    }
}

async fn pass(
    gw: &Gateway,
    holder: &str,
    last: &mut HashMap<String, plan::Counts>,
) -> Result<(), GatewayError> {
    for r in gw.state.rollouts().await? {
        if matches!(r.state, State::Completed | State::Cancelled) {
            last.remove(&r.id);
            continue;
        }
        if !gw.state.rollout_lease(&r.id, holder, LEASE_MS).await? {
            continue;
        }
        let out = tick(gw, &r.id).await;
        gw.state.rollout_release(&r.id, holder).await?;
        // One rollout's failure (its tenant's store, a record that no longer reads) is
        // its own: the others still get their pass.
        let counts = match out {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(event = "rollout_pass_failed", rollout = %r.id, error = %e);
                continue;
            }
        };
        // `rollout_progress` at most once a pass (a second), and only when it moved.
        if let Some((r, c)) = counts {
            if last.get(&r.id) != Some(&c) {
                gw.publish(GatewayEvent::RolloutProgress {
                    rollout_id: r.id.clone(),
                    tenant: r.tenant.clone(),
                    state: r.state,
                    phase: r.phase,
                    counts: c,
                });
                last.insert(r.id, c);
            }
        }
    }
    Ok(())
}

/// One pass over rollout `id` (the lease held): the rollout as it is after it, and its
/// counts.
async fn tick(
    gw: &Gateway,
    id: &str,
) -> Result<Option<(RolloutRecord, plan::Counts)>, GatewayError> {
    let Some(mut r) = gw.state.rollout(id).await? else {
        return Ok(None);
    };
    let mut targets = gw.state.rollout_targets(id).await?;
    if r.spec.dynamic && r.state == State::Running {
        joined(gw, &r, &mut targets).await?;
    }
    let now = gw.now_ms();
    let mut changed = Vec::new();
    for t in targets
        .iter_mut()
        .filter(|t| t.state.in_flight())
        .take(OBSERVE_MAX)
    {
        if let Some((state, detail)) = send::observe(gw, &r, t).await? {
            t.state = state;
            t.detail = detail;
            t.at_ms = now;
            changed.push(t.clone());
        }
    }
    gw.state.put_targets(id, &changed).await?;
    let (per, _) = count(r.phases, &targets);
    let facts = Facts {
        spec: &r.spec,
        state: r.state,
        phase: r.phase,
        phase_started_ms: r.phase_started_ms,
        deadline_ms: r.deadline_ms,
        now_ms: now,
        forgiven: r.forgiven,
    };
    let step = advance(&facts, &per);
    apply(gw, &mut r, &mut targets, step, now).await?;
    if r.state == State::Running {
        let sent = send_due(gw, &r, &mut targets, now).await?;
        gw.state.put_targets(id, &sent).await?;
    }
    let (per, all) = count(r.phases, &targets);
    if per != r.counts {
        // What reading the rollout shows, kept with it (at most once a pass).
        r.counts = per;
        let expected = r.revision;
        r.revision += 1;
        if !gw.state.put_rollout(&r, expected, None).await? {
            return Err(GatewayError::Internal(format!(
                "rollout {} changed while its lease was held",
                r.id
            )));
        }
    }
    Ok(Some((r, all)))
}

/// Send to the pending nodes of the started phases (at most [`SEND_MAX`], many at
/// once): the targets that were sent (or failed to be), updated in `targets` too. A
/// storage failure ends the pass after what went through is returned to be recorded.
async fn send_due(
    gw: &Gateway,
    r: &RolloutRecord,
    targets: &mut [TargetRecord],
    now: u64,
) -> Result<Vec<TargetRecord>, GatewayError> {
    use futures_util::stream::{self, StreamExt};
    let due: Vec<TargetRecord> = targets
        .iter()
        .filter(|t| t.state == NodeState::Pending && t.phase <= r.phase)
        .take(SEND_MAX)
        .cloned()
        .collect();
    let results: Vec<Result<TargetRecord, GatewayError>> = stream::iter(due)
        .map(|mut t| async move {
            send::send(gw, r, &mut t).await?;
            t.at_ms = now;
            Ok(t)
        })
        .buffer_unordered(SEND_CONCURRENCY)
        .collect()
        .await;
    let mut sent = Vec::with_capacity(results.len());
    let mut failure = None;
    for res in results {
        match res {
            Ok(t) => sent.push(t),
            // Its tenant's rate or queue quota: the node stays pending, sent by a later
            // pass (a tenant's rollout goes at its `max_commands_per_s`).
            Err(GatewayError::TenantQuota(..)) => {}
            Err(e) => failure = Some(e),
        }
    }
    let index: HashMap<&str, usize> = sent
        .iter()
        .enumerate()
        .map(|(i, t)| (t.node_id.as_str(), i))
        .collect();
    for t in targets.iter_mut() {
        if let Some(&i) = index.get(t.node_id.as_str()) {
            *t = sent[i].clone();
        }
    }
    if let Some(e) = failure {
        gw.state.put_targets(&r.id, &sent).await?;
        return Err(e);
    }
    Ok(sent)
}

/// A dynamic rollout's new targets: nodes that match now and never took part, in the
/// last phase (sent as soon as that phase has started).
async fn joined(
    gw: &Gateway,
    r: &RolloutRecord,
    targets: &mut Vec<TargetRecord>,
) -> Result<(), GatewayError> {
    let selector = crate::fleet::Selector::parse(&r.spec.selector)?;
    let known: std::collections::HashSet<String> =
        targets.iter().map(|t| t.node_id.clone()).collect();
    let now = gw.now_ms();
    let new: Vec<TargetRecord> = gw
        .fleet()
        .nodes(Some(&selector))
        .await?
        .into_iter()
        .filter(|n| {
            n.can_connect
                && !known.contains(&n.node_id)
                && in_tenant(r.tenant.as_deref(), &n.node_id)
        })
        .map(|n| TargetRecord {
            node_id: n.node_id,
            phase: r.phases.saturating_sub(1),
            state: NodeState::Pending,
            message_id: None,
            version: 0,
            detail: None,
            at_ms: now,
        })
        .collect();
    if !new.is_empty() {
        gw.state.add_targets(&r.id, &new).await?;
        targets.extend(new);
    }
    Ok(())
}

/// May a rollout of `tenant` (`None`: the operator's) target the node at `address`?
pub(super) fn in_tenant(tenant: Option<&str>, address: &str) -> bool {
    tenant.is_none_or(|t| crate::fleet::tenant::tenant_of(address) == t)
}

/// Take `step`: the rollout written over the revision read (the lease makes this pass
/// the only writer), its events and audit entries.
async fn apply(
    gw: &Gateway,
    r: &mut RolloutRecord,
    targets: &mut [TargetRecord],
    step: Step,
    now: u64,
) -> Result<(), GatewayError> {
    let mut audit = None;
    match step {
        Step::Wait => return Ok(()),
        Step::Start(p) => {
            r.phase = p;
            r.phase_started_ms = now;
        }
        Step::Halt { failed, of } => {
            r.state = State::Halted;
            r.detail = Some(format!(
                "{failed} of the {of} nodes of the started phases failed, at or over the error threshold"
            ));
            audit = Some(super::audit("halted", r, "gateway"));
        }
        Step::Expire => {
            let gone = end_all(gw, targets, NodeState::Expired, "deadline", now).await?;
            gw.state.put_targets(&r.id, &gone).await?;
            r.state = State::Completed;
            r.ended_at_ms = Some(now);
            r.detail = Some("the deadline passed".into());
        }
        Step::Complete => {
            r.state = State::Completed;
            r.ended_at_ms = Some(now);
        }
    }
    // The counts the step was decided on go with it: a reader never sees `completed`
    // beside the previous pass's in-flight counts (two tests saw `queued: 1` there).
    r.counts = count(r.phases, targets).0;
    let expected = r.revision;
    r.revision += 1;
    if !gw.state.put_rollout(r, expected, audit.as_ref()).await? {
        return Err(GatewayError::Internal(format!(
            "rollout {} changed while its lease was held",
            r.id
        )));
    }
    if audit.is_some() {
        crate::gateway::own_audit::append_pending(gw).await;
    }
    match step {
        Step::Halt { failed, of } => gw.publish(GatewayEvent::RolloutHalted {
            rollout_id: r.id.clone(),
            tenant: r.tenant.clone(),
            failed,
            of,
        }),
        Step::Expire | Step::Complete => gw.publish(GatewayEvent::RolloutCompleted {
            rollout_id: r.id.clone(),
            tenant: r.tenant.clone(),
            state: r.state,
        }),
        _ => {}
    }
    Ok(())
}

/// End every node not final yet as `to` (withdrawing what is queued): those that
/// changed. A node whose message was delivered already keeps its course.
pub(super) async fn end_all(
    gw: &Gateway,
    targets: &mut [TargetRecord],
    to: NodeState,
    why: &str,
    now: u64,
) -> Result<Vec<TargetRecord>, GatewayError> {
    let mut changed = Vec::new();
    for t in targets
        .iter_mut()
        .filter(|t| matches!(t.state, NodeState::Pending | NodeState::Queued))
    {
        if send::withdraw(gw, t, &format!("rollout_{}", to.as_str())).await? {
            t.state = to;
            t.detail = Some(why.to_string());
            t.at_ms = now;
            changed.push(t.clone());
        }
    }
    Ok(changed)
}

/// Take rollout `id`'s lease for an operator's act, waiting for a pass that holds it.
pub(super) async fn lease_for(gw: &Gateway, id: &str, holder: &str) -> Result<(), GatewayError> {
    let deadline = tokio::time::Instant::now() + super::LEASE_WAIT;
    loop {
        if gw.state.rollout_lease(id, holder, LEASE_MS).await? {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(GatewayError::Internal(format!(
                "rollout {id} is being driven by another replica; retry"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
