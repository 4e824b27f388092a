//! Rollouts (PROTOCOL §17): one action to every node a selector selects, in phases,
//! with thresholds, a deadline, halt, resume and cancel.
//!
//! - [`plan`]: the logic, pure (phases, the next step, what an outcome means).
//! - this file: the operator's side — create (targets chosen and split into phases at
//!   once, idempotent with the caller's key), read, cancel, resume.
//! - [`driver`]: the loop every replica runs; a replica drives a rollout only while it
//!   holds its lease, so each decision (a phase started, a halt, a send) is made once.

pub mod driver;
pub mod plan;
mod send;

use serde::Serialize;

use self::plan::{phase_ends, phase_of, Counts, NodeState, Spec, State};
use super::caller::Caller;
use super::error::{Conflict, GatewayError};
use super::events::GatewayEvent;
use super::state::Gateway;
use super::storage::rollouts::{RolloutRecord, TargetRecord};
use crate::audit::{AuditEvent, AuditOutcome, AuditRecord};
use crate::fleet::Selector;

/// A lease is held this long; the driver renews it each pass.
pub const LEASE_MS: u64 = 15_000;
/// How long an operator's cancel or resume waits for the driver's pass to end.
const LEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// A rollout as `GET /v1/rollouts/{id}` shows it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct RolloutView {
    pub action: String,
    /// Per state, over every target.
    pub counts: Counts,
    pub created_at_ms: u64,
    pub created_by: String,
    pub deadline_ms: u64,
    pub detail: Option<String>,
    pub dynamic: bool,
    pub ended_at_ms: Option<u64>,
    /// The phase started last (0-based).
    pub phase: usize,
    /// Per phase, in order.
    pub phases: Vec<Counts>,
    pub rollout_id: String,
    pub selector: String,
    pub state: State,
    /// The tenant whose token created it; `null`: the operator's, over every tenant.
    pub tenant: Option<String>,
}

/// One node's part, as `GET /v1/rollouts/{id}/nodes` shows it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct TargetView {
    pub at_ms: u64,
    pub detail: Option<String>,
    pub message_id: Option<String>,
    pub node_id: String,
    pub phase: usize,
    pub state: NodeState,
}

impl TargetView {
    /// The target as `caller` sees it: its node as the caller names it.
    fn for_caller(caller: &Caller, t: TargetRecord) -> Self {
        Self {
            at_ms: t.at_ms,
            detail: t.detail,
            message_id: t.message_id,
            node_id: caller.shown(&t.node_id).to_string(),
            phase: t.phase,
            state: t.state,
        }
    }
}

/// Counts per phase (`phases` of them) and over all.
pub fn count(phases: usize, targets: &[TargetRecord]) -> (Vec<Counts>, Counts) {
    let mut per = vec![Counts::default(); phases.max(1)];
    let mut all = Counts::default();
    for t in targets {
        let p = t.phase.min(per.len() - 1);
        per[p].add(t.state);
        all.add(t.state);
    }
    (per, all)
}

/// The rollout as it reads, from its record (the counts its last write kept).
pub fn view(r: &RolloutRecord) -> RolloutView {
    let mut phases = r.counts.clone();
    phases.resize(r.phases.max(1), Counts::default());
    let mut counts = Counts::default();
    for c in &phases {
        counts.merge(c);
    }
    RolloutView {
        action: r.spec.action.kind().to_string(),
        counts,
        created_at_ms: r.created_at_ms,
        created_by: r.created_by.clone(),
        deadline_ms: r.deadline_ms,
        detail: r.detail.clone(),
        dynamic: r.spec.dynamic,
        ended_at_ms: r.ended_at_ms,
        phase: r.phase,
        phases,
        rollout_id: r.id.clone(),
        selector: r.spec.selector.clone(),
        state: r.state,
        tenant: r.tenant.clone(),
    }
}

/// May `caller` see (and act on) rollout `r`: the operator every one, a tenant's caller
/// its tenant's.
fn sees(caller: &Caller, r: &RolloutRecord) -> bool {
    caller.tenant.is_none() || caller.tenant == r.tenant
}

/// The gateway audit entry of an operator's act on a rollout.
pub(super) fn audit(what: &str, r: &RolloutRecord, by: &str) -> AuditRecord {
    AuditRecord::new(AuditEvent::Rollout, AuditOutcome::Ok)
        .actor(by)
        .detail(format!(
            "{what} rollout {} ({} to `{}`)",
            r.id,
            r.spec.action.kind(),
            r.spec.selector
        ))
}

fn ended(id: &str, s: State) -> GatewayError {
    GatewayError::Conflict(
        Conflict::RolloutEnded,
        format!("rollout {id} is {s:?}: it can no longer change").to_lowercase(),
    )
}

/// A new rollout's targets, each pending in the phase its place in `nodes` falls in.
fn targets(nodes: Vec<String>, ends: &[usize], now: u64) -> Vec<TargetRecord> {
    nodes
        .into_iter()
        .enumerate()
        .map(|(i, node_id)| TargetRecord {
            node_id,
            phase: phase_of(ends, i),
            state: NodeState::Pending,
            message_id: None,
            version: 0,
            detail: None,
            at_ms: now,
        })
        .collect()
}

/// What `create` did.
pub struct Created {
    pub rollout: RolloutView,
    /// A repeat of an earlier request with the same key: nothing new was made.
    pub repeat: bool,
}

/// Rollouts: create, read, cancel, resume.
pub struct Rollouts<'g>(pub(super) &'g Gateway);

impl Gateway {
    pub fn rollouts(&self) -> Rollouts<'_> {
        Rollouts(self)
    }
}

impl Rollouts<'_> {
    /// Check the spec, select the targets (enrolled nodes trusted with `send`; never a
    /// retired or pending one; for a tenant's caller, only its tenant's), split them
    /// into phases and store it all at once.
    pub async fn create(
        &self,
        caller: &Caller,
        spec: Spec,
        key: Option<&str>,
    ) -> Result<Created, GatewayError> {
        let gw = self.0;
        spec.check()
            .map_err(|e| GatewayError::BadRequest(e.to_string()))?;
        send::check_action(&spec.action)?;
        let selector = Selector::parse(&spec.selector)?;
        let request_sha256 = crate::audit::sha256_hex(
            &serde_json::to_vec(&spec).map_err(|e| GatewayError::Internal(e.to_string()))?,
        );
        let by = caller.principal();
        let scoped = key.map(|k| crate::audit::sha256_hex(format!("{by}\n{k}").as_bytes()));
        let nodes = self.selected(caller, &selector).await?;
        let now = gw.now_ms();
        let ends = phase_ends(&spec.phases, nodes.len());
        let targets = targets(nodes, &ends, now);
        let r = RolloutRecord {
            id: uuid::Uuid::now_v7().to_string(),
            deadline_ms: now + spec.deadline_s * 1000,
            spec,
            created_by: caller.subject.clone(),
            tenant: caller.tenant.clone(),
            created_at_ms: now,
            state: State::Running,
            phase: 0,
            phase_started_ms: now,
            phases: ends.len(),
            detail: None,
            ended_at_ms: None,
            revision: 1,
            forgiven: 0,
            counts: count(ends.len(), &targets).0,
            request_sha256: scoped.as_ref().map(|_| request_sha256.clone()),
        };
        let entry = audit("created", &r, &by);
        let taken = gw
            .state
            .rollout_create(&r, &targets, scoped.as_deref(), &entry)
            .await?;
        if let Some(id) = taken {
            return self.repeat(caller, &id, &request_sha256).await;
        }
        super::own_audit::append_pending(gw).await;
        gw.publish(GatewayEvent::RolloutProgress {
            rollout_id: r.id.clone(),
            tenant: r.tenant.clone(),
            state: r.state,
            phase: r.phase,
            counts: count(r.phases, &targets).1,
        });
        gw.events_committed().await;
        Ok(Created {
            rollout: view(&r),
            repeat: false,
        })
    }

    /// The nodes `selector` names that a rollout of `caller` may target (enrolled,
    /// trusted with `send`: able to connect; of the caller's tenant), in id order.
    async fn selected(
        &self,
        caller: &Caller,
        selector: &Selector,
    ) -> Result<Vec<String>, GatewayError> {
        let mut nodes: Vec<String> = self
            .0
            .fleet()
            .nodes(Some(selector))
            .await?
            .into_iter()
            .filter(|n| n.can_connect && driver::in_tenant(caller.tenant.as_deref(), &n.node_id))
            .map(|n| n.node_id)
            .collect();
        nodes.sort();
        Ok(nodes)
    }

    /// The caller's key names rollout `id` already: the same request (`request_sha256`)
    /// is answered by it, another one is a conflict.
    async fn repeat(
        &self,
        caller: &Caller,
        id: &str,
        request_sha256: &str,
    ) -> Result<Created, GatewayError> {
        let first = self.record(caller, id).await?;
        if first.request_sha256.as_deref() != Some(request_sha256) {
            return Err(GatewayError::IdempotencyConflict(format!(
                "rollout {id} was created for another request with this key; nothing was created"
            )));
        }
        Ok(Created {
            rollout: self.get(caller, id).await?,
            repeat: true,
        })
    }

    /// The rollouts `caller` sees: a tenant's caller its tenant's, the operator all.
    pub async fn list(&self, caller: &Caller) -> Result<Vec<RolloutView>, GatewayError> {
        let gw = self.0;
        let mut out = Vec::new();
        for r in gw.state.rollouts().await? {
            if sees(caller, &r) {
                out.push(view(&r));
            }
        }
        Ok(out)
    }

    /// Rollout `id` when `caller` sees it; another tenant's answers as one that does
    /// not exist.
    async fn record(&self, caller: &Caller, id: &str) -> Result<RolloutRecord, GatewayError> {
        self.0
            .state
            .rollout(id)
            .await?
            .filter(|r| sees(caller, r))
            .ok_or_else(|| GatewayError::NotFound("not_found", format!("no rollout {id}")))
    }

    pub async fn get(&self, caller: &Caller, id: &str) -> Result<RolloutView, GatewayError> {
        Ok(view(&self.record(caller, id).await?))
    }

    /// Cancel: nothing more is sent, and every message of it not yet delivered is taken
    /// back (its nodes read `cancelled`, and it never reaches them).
    pub async fn cancel(&self, caller: &Caller, id: &str) -> Result<RolloutView, GatewayError> {
        let by = caller.principal();
        self.operator_act(caller, id, |r| match r.state {
            State::Running | State::Halted => {
                r.state = State::Cancelled;
                r.detail = Some(format!("cancelled by {by}"));
                Ok("cancelled")
            }
            s => Err(ended(&r.id, s)),
        })
        .await
    }

    /// Resume a halted rollout: it goes on, and the error threshold counts only the
    /// failures after now.
    pub async fn resume(&self, caller: &Caller, id: &str) -> Result<RolloutView, GatewayError> {
        self.operator_act(caller, id, |r| match r.state {
            State::Halted => Ok("resumed"),
            State::Running => Err(GatewayError::Conflict(
                Conflict::RolloutRunning,
                format!("rollout {} is running; only a halted one resumes", r.id),
            )),
            s => Err(ended(&r.id, s)),
        })
        .await
    }

    /// An operator's act under the rollout's lease: `change` on the record, written with
    /// its audit entry; for a cancel, the queued messages taken back.
    async fn operator_act(
        &self,
        caller: &Caller,
        id: &str,
        change: impl Fn(&mut RolloutRecord) -> Result<&'static str, GatewayError>,
    ) -> Result<RolloutView, GatewayError> {
        let gw = self.0;
        self.record(caller, id).await?;
        let holder = format!("operator:{}", uuid::Uuid::now_v7());
        driver::lease_for(gw, id, &holder).await?;
        let out = self.act_leased(caller, id, change).await;
        gw.state.rollout_release(id, &holder).await?;
        out
    }

    async fn act_leased(
        &self,
        caller: &Caller,
        id: &str,
        change: impl Fn(&mut RolloutRecord) -> Result<&'static str, GatewayError>,
    ) -> Result<RolloutView, GatewayError> {
        let gw = self.0;
        let by = caller.principal();
        let mut r = self.record(caller, id).await?;
        let mut targets = gw.state.rollout_targets(id).await?;
        let before = r.state;
        let what = change(&mut r)?;
        let now = gw.now_ms();
        if what == "resumed" {
            let (per, _) = count(r.phases, &targets);
            r.forgiven = per
                .iter()
                .take(r.phase + 1)
                .map(|c| c.failed + c.expired)
                .sum();
            r.state = State::Running;
            r.detail = None;
        }
        let cancelled = r.state == State::Cancelled && before != State::Cancelled;
        if cancelled {
            // Under the lease: no pass sends meanwhile. Taken back first, so the record
            // written below counts them.
            r.ended_at_ms = Some(now);
            let gone =
                driver::end_all(gw, &mut targets, NodeState::Cancelled, "cancelled", now).await?;
            gw.state.put_targets(id, &gone).await?;
        }
        r.counts = count(r.phases, &targets).0;
        let expected = r.revision;
        r.revision += 1;
        let entry = audit(what, &r, &by);
        if !gw.state.put_rollout(&r, expected, Some(&entry)).await? {
            return Err(GatewayError::Internal(format!(
                "rollout {id} changed; retry"
            )));
        }
        if cancelled {
            gw.publish(GatewayEvent::RolloutCompleted {
                rollout_id: r.id.clone(),
                tenant: r.tenant.clone(),
                state: r.state,
            });
        }
        super::own_audit::append_pending(gw).await;
        gw.events_committed().await;
        Ok(view(&r))
    }

    /// Its nodes, those in `state` when given.
    pub async fn nodes(
        &self,
        caller: &Caller,
        id: &str,
        state: Option<NodeState>,
    ) -> Result<Vec<TargetView>, GatewayError> {
        self.record(caller, id).await?;
        Ok(self
            .0
            .state
            .rollout_targets(id)
            .await?
            .into_iter()
            .filter(|t| state.is_none_or(|s| t.state == s))
            .map(|t| TargetView::for_caller(caller, t))
            .collect())
    }
}
