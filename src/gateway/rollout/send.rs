//! A rollout's action for one node: its checks, the send (through the same flows as an
//! operator's command, tool call or desired write, so everything they guarantee holds),
//! what became of it, and taking back what was queued and not delivered.

use std::time::Duration;

use super::plan::{outcome, Action, NodeState, Seen};
use crate::fleet::{Versioned, Write};
use crate::gateway::commands::{message_id_for_key, result_of, Command, ToolCall};
use crate::gateway::error::GatewayError;
use crate::gateway::state::Gateway;
use crate::gateway::storage::rollouts::{RolloutRecord, TargetRecord};
use crate::gateway::storage::NodeAck;

/// The action's own checks, before anything is stored.
pub(super) fn check_action(a: &Action) -> Result<(), GatewayError> {
    match a {
        Action::Command { command_type, .. } => {
            if command_type.is_empty() || command_type.len() > 64 {
                return Err(GatewayError::BadRequest(
                    "command type must be 1..=64 characters".into(),
                ));
            }
        }
        Action::ToolCall { tool_name, .. } => {
            if !crate::tools::valid_tool_name(tool_name) {
                return Err(GatewayError::BadRequest(
                    "tool_name must match [a-z][a-z0-9_]{0,63}".into(),
                ));
            }
        }
        Action::Desired(patch) => {
            // The same bounds as a desired write of it.
            Versioned::default().write(&Write::Merge(patch.clone()), None)?;
        }
    }
    Ok(())
}

/// The key a rollout's message to `node` is sent under: a repeat (a pass that died
/// before it recorded the send) sends nothing twice.
fn key(r: &RolloutRecord, node: &str) -> String {
    format!("rollout/{}/{node}", r.id)
}

/// Why a node cannot take part (it is no longer enrolled, or cannot pull): a failure
/// of the node, not of the pass.
fn refused(e: &GatewayError) -> Option<String> {
    match e {
        GatewayError::UnknownNode(_) => Some("unknown_node".into()),
        GatewayError::NodeWithoutSend(_) => Some("node_without_send".into()),
        GatewayError::RecipientOffline(_) => Some("recipient_offline".into()),
        GatewayError::Ttl(t) => Some(t.to_string()),
        _ => None,
    }
}

/// Send the action to `t`'s node; `t` says what became of it.
pub(super) async fn send(
    gw: &Gateway,
    r: &RolloutRecord,
    t: &mut TargetRecord,
) -> Result<(), GatewayError> {
    let by = &r.created_by;
    let sent = match &r.spec.action {
        Action::Command {
            command_type,
            body,
            ttl_s,
        } => gw
            .commands()
            .command(
                by,
                Command {
                    node_id: t.node_id.clone(),
                    command_type: command_type.clone(),
                    body: body.clone(),
                    ttl_s: *ttl_s,
                    message_id: Some(message_id_for_key(by, &key(r, &t.node_id))),
                },
            )
            .await
            .map(|(id, _)| (Some(id), 0)),
        Action::ToolCall {
            tool_name,
            tool_args,
        } => gw
            .commands()
            .tool_call(
                by,
                ToolCall {
                    node_id: t.node_id.clone(),
                    tool_name: tool_name.clone(),
                    tool_args: tool_args.clone(),
                    job_id: Some(format!("rollout:{}", r.id)),
                    ttl_s: None,
                    wait: Duration::ZERO,
                    token: None,
                },
            )
            .await
            .map(|o| (Some(o.message_id().to_string()), 0)),
        Action::Desired(patch) => gw
            .node_states()
            .rollout_desired(&t.node_id, &Write::Merge(patch.clone()), by)
            .await
            .map(|v| (None, v)),
    };
    match sent {
        Ok((message_id, version)) => {
            t.state = NodeState::Queued;
            t.message_id = message_id;
            t.version = version;
            Ok(())
        }
        Err(e) => match refused(&e) {
            Some(code) => {
                t.state = NodeState::Failed;
                t.detail = Some(code);
                Ok(())
            }
            None => Err(e),
        },
    }
}

/// What became of a sent node's part: its new state and detail, if it moved.
pub(super) async fn observe(
    gw: &Gateway,
    r: &RolloutRecord,
    t: &TargetRecord,
) -> Result<Option<(NodeState, Option<String>)>, GatewayError> {
    let mut seen = Seen::default();
    if let Some(id) = &t.message_id {
        if let Some(st) = gw.state.message_status(id).await? {
            seen.message = Some(st.state.as_str().to_string());
            seen.reason = st.reason;
        }
        if matches!(r.spec.action, Action::ToolCall { .. }) {
            seen.result = result_of(gw, id)
                .await?
                .map(|res| match (res.ok, res.error) {
                    (true, _) => Ok(()),
                    (false, Some(e)) => Err(e.code),
                    (false, None) => Err("failed".into()),
                });
        }
    }
    if matches!(r.spec.action, Action::Desired(_)) {
        let s = gw.state.fleet_record(&t.node_id).await?.summary;
        seen.node_desired_version = s.node_desired_version;
        seen.in_sync = s.in_sync;
    }
    Ok(outcome(&r.spec.action, t.version, t.state, &seen))
}

/// Take back the message of a node's part if it is still queued: true when nothing of
/// it can reach the node any more (false: it was delivered already, or is a desired
/// write, which the node receives whatever happens to the rollout).
pub(super) async fn withdraw(
    gw: &Gateway,
    t: &TargetRecord,
    reason: &str,
) -> Result<bool, GatewayError> {
    let Some(id) = &t.message_id else {
        return Ok(t.state == NodeState::Pending);
    };
    if let Some(st) = gw.state.message_status(id).await? {
        if st.state == crate::store::MessageState::Delivered {
            return Ok(false);
        }
    }
    let ack = NodeAck {
        delivered: Vec::new(),
        rejected: vec![(id.clone(), reason.to_string())],
        events: (0, Vec::new()),
    };
    gw.state.ack(&t.node_id, ack).await?;
    Ok(true)
}
