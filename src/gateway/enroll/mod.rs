//! Enrollment at the gateway (PROTOCOL §15): tokens, the exchange with a node that
//! enrolls itself, operator approval, and retiring a node.
//!
//! The decision is [`decide`], pure: given what the state knows about the token, this
//! node id and this key, what to answer and what to write. The state runs it inside one
//! transaction ([`GatewayState::enroll`]), so uses are counted exactly once across
//! replicas and a repeated request (a lost answer) finds its first answer.

use std::net::IpAddr;

pub mod admission;
mod history;
mod opening;
mod retire;
mod slots;
pub use admission::{Admission, Admitted, Throttle};
use history::{audit, enrolled_or_pending, recorded_decision};
use opening::{Opened, Opener, Unopened};

use super::error::GatewayError;
use super::events::GatewayEvent;
use super::state::Gateway;
pub use super::storage::{
    retired_records, rotated_records, settleable, trust_node, Decision, EnrollmentRecord, Facts,
    Kind, RecordState, TenantRoom, TokenRecord, NODE_RIGHTS,
};
use crate::audit::{AuditEvent, AuditOutcome};
use crate::enroll::{codes, Answer, AnswerClaims, Approve, Hello, Standing};
use crate::envelope::b64_encode;

/// What the gateway learnt about the device from its request, kept in a new record.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub device: Option<crate::fleet::Inventory>,
    pub source: Option<String>,
}

/// Who decided a record made on a device's request: the token's policy when it
/// enrolled the device at once; nobody yet when it waits for an operator.
fn decided_by_token(state: RecordState, token_id: &str) -> Option<String> {
    (state == RecordState::Enrolled).then(|| format!("enroll-token:{token_id}"))
}

/// The decision for a device key the gateway has a record of: its answer again, or why
/// it is refused for good.
fn answer_known(r: &EnrollmentRecord) -> Decision {
    match r.state {
        RecordState::Enrolled | RecordState::Pending => Decision::Answer(r.clone()),
        RecordState::Rejected => Decision::Refuse(
            codes::REJECTED,
            "an operator rejected this device's enrollment".into(),
        ),
        RecordState::Revoked => Decision::Refuse(
            codes::NODE_REVOKED,
            "this device key was retired (`outpost nodes revoke`); a reflashed device enrolls with a new key".into(),
        ),
        RecordState::Rotated => Decision::Refuse(
            codes::NODE_REVOKED,
            "this device key was retired by a key rotation: the node signs with its newer key".into(),
        ),
    }
}

/// Why token `t` enrolls no device now: expired, used up, or not for this node id.
fn token_refusal(f: &Facts<'_>, t: &TokenRecord) -> Option<Decision> {
    if f.now_ms >= t.claims.expires_at_ms {
        return Some(Decision::Refuse(
            codes::TOKEN_EXPIRED,
            "the enrollment token expired".into(),
        ));
    }
    if t.uses >= t.claims.max_uses {
        return Some(Decision::Refuse(
            codes::TOKEN_EXHAUSTED,
            format!("the enrollment token was used {} times, its limit", t.uses),
        ));
    }
    if let Some(p) = &t.claims.node_prefix {
        if !f.node.node_id.starts_with(p.as_str()) {
            return Some(Decision::Refuse(
                codes::NODE_ID_NOT_ALLOWED,
                format!("this token enrolls node ids starting with {p:?} only"),
            ));
        }
    }
    None
}

/// The pure core of an enrollment.
pub fn decide(f: &Facts<'_>, token_id: &str, seen: &Seen) -> Decision {
    if let Some(r) = f.same {
        return answer_known(r);
    }
    let Some(t) = f.token.filter(|t| !t.revoked) else {
        return Decision::Refuse(
            codes::TOKEN_REVOKED,
            "the enrollment token was revoked".into(),
        );
    };
    if let Some(refused) = token_refusal(f, t) {
        return refused;
    }
    if f.tenant == TenantRoom::Missing {
        return Decision::Refuse(
            codes::TOKEN_REVOKED,
            "the enrollment token's tenant was deleted".into(),
        );
    }
    let trusted_same = f.trusted.is_some_and(|d| d.sign_pk == f.node.sign_pk);
    let record = |state, kind| EnrollmentRecord {
        node_id: t.address_of(&f.node.node_id),
        node_sign_pk: b64_encode(&f.node.sign_pk),
        token_id: token_id.to_string(),
        document: f.node.clone(),
        state,
        kind,
        created_at_ms: f.now_ms,
        decided_at_ms: (state == RecordState::Enrolled).then_some(f.now_ms),
        labels: t.labels.clone(),
        device: seen.device.clone(),
        source: seen.source.clone(),
        decided_by: decided_by_token(state, token_id),
    };
    if trusted_same {
        // Trusted by hand before: nothing to change, no use counted.
        return recorded_decision(record(RecordState::Enrolled, Kind::New), false);
    }
    if f.trusted.is_some() || f.pending_other {
        if f.online || f.pending_other {
            return Decision::Refuse(
                codes::DUPLICATE_NODE_ID,
                format!(
                    "{} is enrolled with another key{}: a second device with the same id is never merged (give each device its own id: identity.node_id_from)",
                    f.node.node_id,
                    if f.online { " and online now" } else { " waiting for approval" }
                ),
            );
        }
        // Enrolled, silent, and now a new key: a reflashed device. An operator decides.
        return recorded_decision(record(RecordState::Pending, Kind::Rekey), true);
    }
    // A new node of a tenant at its quota (a re-keyed one replaces its old key).
    if let TenantRoom::Full { max_nodes } = f.tenant {
        return Decision::Refuse(
            codes::TENANT_QUOTA,
            format!(
                "the token's tenant has its max_nodes ({max_nodes}) nodes, enrolled or waiting"
            ),
        );
    }
    let state = match t.claims.approve {
        Approve::Auto => RecordState::Enrolled,
        Approve::Manual => RecordState::Pending,
    };
    recorded_decision(record(state, Kind::New), true)
}

/// An enrollment's answer: enrolled (HTTP 200) or pending (202), signed.
pub struct Answered {
    pub standing: Standing,
    pub answer: Answer,
}

/// Count a request held back, and say why.
fn throttled(gw: &Gateway, route: &'static str, t: Throttle) -> GatewayError {
    gw.metrics.throttled_total.inc(&[route, t.as_str()]);
    GatewayError::Throttled(t)
}

/// A new record was written (its audit entry pending with it): log it, publish it,
/// append the entry, and trust it here at once.
async fn recorded(gw: &Gateway, record: &EnrollmentRecord) {
    let outcome = enrolled_or_pending(record);
    tracing::info!(
        event = "node_enrollment",
        node = %record.node_id,
        outcome,
        kind = record.kind.as_str(),
        token = %record.token_id,
    );
    gw.publish(GatewayEvent::Enrollment {
        node_id: record.node_id.clone(),
        outcome: outcome.into(),
        detail: record.kind.as_str().into(),
    });
    if record.state == RecordState::Enrolled {
        gw.recheck_trust(&record.node_id).await;
    }
    super::own_audit::append_pending(gw).await;
    gw.events_committed().await;
}

/// The signed answer for `record`: enrolled (200) or pending (202).
fn answer(gw: &Gateway, record: &EnrollmentRecord) -> Answered {
    let standing = match record.state {
        RecordState::Enrolled => Standing::Enrolled,
        _ => Standing::Pending,
    };
    let claims = AnswerClaims {
        v: 1,
        status: standing,
        // The device's own id: it never knows its address (PROTOCOL §18).
        node_id: record.document.node_id.clone(),
        node_sign_pk: record.node_sign_pk.clone(),
        token_id: record.token_id.clone(),
        kind: record.kind.as_str().into(),
        gateway: gw.identity(),
        now_ms: gw.now_ms(),
    };
    Answered {
        standing,
        answer: Answer::sign(&gw.keys.current(), &claims),
    }
}

/// Nodes enrolling themselves, and the operator's decisions on them.
pub struct Enrollment<'g> {
    pub(super) gw: &'g Gateway,
    /// Its own state: who gets an enrollment answer while strangers flood (budgets per
    /// source, decision slots).
    admission: &'g Admission,
}

impl Gateway {
    pub fn enrollment(&self) -> Enrollment<'_> {
        Enrollment {
            gw: self,
            admission: &self.admission,
        }
    }
}

impl Enrollment<'_> {
    /// `GET /v1/enroll`: the gateway's document and its time, signed for the node's nonce.
    /// The statement's `echo` is `enroll/<nonce>`: a request signature (what a `clock_skew`
    /// statement echoes) is base64url and never holds a `/`, so this one can never pass as
    /// the answer to a node's request.
    /// The signature is made in the lane, off the async workers, as a request's checks
    /// are: a site powering on asks hundreds at once.
    pub async fn hello(
        &self,
        from: IpAddr,
        node_id: &str,
        nonce: &str,
    ) -> Result<Hello, GatewayError> {
        let gw = self.gw;
        self.admission
            .hello(from, gw.now_ms())
            .map_err(|t| throttled(gw, "hello", t))?;
        let nonce_ok = (1..=64).contains(&nonce.len())
            && nonce
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !crate::envelope::is_valid_node_id(node_id) || !nonce_ok {
            return Err(GatewayError::BadRequest(
                "node_id must be a node id and nonce 1 to 64 base64url characters".into(),
            ));
        }
        let (keys, me, to, echo) = (
            gw.keys.current(),
            gw.cfg.node_id.clone(),
            node_id.to_string(),
            crate::enroll::hello_echo(nonce),
        );
        let now_ms = gw.now_ms();
        let time = self
            .admission
            .lane
            .run(move || crate::envelope::sign_time_statement(&keys, &me, &to, now_ms, &echo))
            .await
            .ok_or_else(|| GatewayError::Internal("signing the hello failed".into()))?;
        Ok(Hello {
            rotation: gw.rotation_for_nodes(),
            gateway: gw.identity(),
            time,
        })
    }

    /// `POST /v1/enroll`.
    pub async fn enroll(
        &self,
        from: IpAddr,
        req: crate::enroll::Request,
    ) -> Result<Answered, GatewayError> {
        let gw = self.gw;
        let admitted = self
            .admission
            .request(from, gw.now_ms())
            .map_err(|t| throttled(gw, "enroll", t))?;
        let must_prove = admitted == Admitted::TokenMustProve;
        let node = req.node;
        let opener = Opener::of(gw);
        let (node, opened) = self
            .admission
            .lane
            .run(move || {
                let opened = opener.open(&node, req.envelope);
                (node, opened)
            })
            .await
            .ok_or_else(|| {
                GatewayError::Internal("opening the enrollment request failed".into())
            })?;
        let refused =
            |code: &'static str, msg: String| refusal(gw, must_prove, &node.node_id, code, msg);
        let Opened { sealed, token } = opened.map_err(|e| match e {
            Unopened::Bad(e) => e,
            Unopened::NotOurs(msg) => refused(codes::WRONG_GATEWAY, msg),
        })?;
        let seen = Seen {
            device: sealed.device,
            source: Some(from.to_string()),
        };
        let now = gw.now_ms();
        if must_prove
            && (now >= token.claims.expires_at_ms || self.admission.is_dead(&token.claims.id))
        {
            return Err(throttled(gw, "enroll", Throttle::Token));
        }
        // A bounded number of decisions at once: the rest of the pool is delivery's.
        // Within its tenant's share once a decision on this token said which it is.
        let tenant = self.admission.tenant_of_token(&token.claims.id);
        let _slot = self
            .admission
            .slot(tenant.as_deref())
            .await
            .map_err(|t| throttled(gw, "enroll", t))?;
        let online = self.online_as(&node.node_id).await;
        let token_id = token.claims.id.clone();
        let decide = move |f: &Facts<'_>| decide(f, &token_id, &seen);
        let decision = gw
            .state
            .enroll(&node, &token.claims.id, &online, &decide)
            .await?;
        let record = match decision {
            Decision::Refuse(code, msg) => {
                self.note_refused(&node.node_id, &token.claims.id, code)
                    .await;
                return Err(refused(code, msg));
            }
            Decision::Answer(r) => r,
            Decision::Record { record, .. } => {
                recorded(gw, &record).await;
                record
            }
        };
        self.admission.learn_token_tenant(
            &token.claims.id,
            crate::fleet::tenant::tenant_of(&record.node_id),
        );
        Ok(answer(gw, &record))
    }

    /// The addresses of this node id (one per tenant at most) heard from recently.
    async fn online_as(&self, node_id: &str) -> Vec<String> {
        let addresses: Vec<String> = self
            .gw
            .trust()
            .with_node_id(node_id)
            .map(|p| p.address())
            .collect();
        let mut online = Vec::new();
        for a in addresses {
            if self.gw.reachable(&a).await {
                online.push(a);
            }
        }
        online
    }

    /// A decision refused the enrollment: a token that can never enroll again is
    /// remembered as dead (so a flood of it is cut short), and the refusal is an event.
    async fn note_refused(&self, node_id: &str, token_id: &str, code: &'static str) {
        let gw = self.gw;
        if matches!(
            code,
            codes::TOKEN_EXPIRED | codes::TOKEN_EXHAUSTED | codes::TOKEN_REVOKED
        ) {
            self.admission.mark_dead(token_id);
        }
        gw.publish(GatewayEvent::Enrollment {
            node_id: node_id.to_string(),
            outcome: "refused".into(),
            detail: code.to_string(),
        });
        gw.events_committed().await;
    }

    /// Every enrollment record.
    pub async fn records(&self) -> Result<Vec<EnrollmentRecord>, GatewayError> {
        let gw = self.gw;
        Ok(gw.state.enrollments().await?)
    }

    /// Enrollments waiting for an operator.
    pub async fn pending(&self) -> Result<Vec<EnrollmentRecord>, GatewayError> {
        let gw = self.gw;
        let mut all = gw.state.enrollments().await?;
        all.retain(|r| r.state == RecordState::Pending);
        Ok(all)
    }

    /// An operator approves (or rejects) the pending enrollment of `node_id`, or approves
    /// a rejected one ([`settleable`]). Approving a re-key retires the old key: from then
    /// on only the new one is trusted.
    pub async fn settle(
        &self,
        operator: &str,
        node_id: &str,
        approve: bool,
    ) -> Result<EnrollmentRecord, GatewayError> {
        let gw = self.gw;
        let outcome = if approve { "approved" } else { "rejected" };
        let entry = |r: &EnrollmentRecord| {
            let (event, result) = if approve {
                (AuditEvent::Approve, AuditOutcome::Ok)
            } else {
                (AuditEvent::Reject, AuditOutcome::Rejected)
            };
            audit(event, result, operator, r, outcome)
        };
        let r = gw
            .state
            .settle_enrollment(node_id, approve, gw.now_ms(), operator, &entry)
            .await?
            .ok_or_else(|| {
                GatewayError::NotFound(
                    "not_found",
                    if approve {
                        format!("no enrollment of {node_id} is pending or rejected")
                    } else {
                        format!("no enrollment of {node_id} is pending")
                    },
                )
            })?;
        tracing::info!(event = "node_enrollment", node = %node_id, outcome, kind = r.kind.as_str());
        gw.publish(GatewayEvent::Enrollment {
            node_id: node_id.to_string(),
            outcome: outcome.into(),
            detail: r.kind.as_str().into(),
        });
        if approve {
            gw.recheck_trust(node_id).await;
        }
        super::own_audit::append_pending(gw).await;
        gw.events_committed().await;
        Ok(r)
    }
}

/// An enrollment refusal with `code`: over its address's budget (`must_prove`) a
/// stranger's refusals are counted, not logged one by one (a flood would fill the
/// journal).
fn refusal(
    gw: &Gateway,
    must_prove: bool,
    node_id: &str,
    code: &'static str,
    msg: String,
) -> GatewayError {
    if must_prove {
        gw.metrics.throttled_total.inc(&["enroll", code]);
    } else {
        tracing::warn!(event = "enrollment_refused", node = %node_id, code, reason = %msg);
    }
    GatewayError::Enroll(code, msg)
}

#[cfg(test)]
mod tests;
