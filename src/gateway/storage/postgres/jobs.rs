//! Tool-call jobs and their results: a job id's binding, the node a request was sent to,
//! the filed result, and which uploaded ids the gateway already holds.

use std::collections::HashSet;

use super::super::{CommandKey, GatewayState, JobRecord, StateError};
use super::queue;
use super::{i, u, unavailable, Postgres};

pub(super) async fn job(pg: &Postgres, key: &str) -> Result<Option<JobRecord>, StateError> {
    let c = pg.pool.get().await?;
    let row = c
        .query_opt(
            "SELECT message_id, tool_name, args_sha256 FROM jobs WHERE job_key = $1",
            &[&key],
        )
        .await
        .map_err(unavailable)?;
    Ok(row.map(|r| JobRecord {
        message_id: r.get(0),
        tool_name: r.get(1),
        args_sha256: r.get(2),
    }))
}

/// The idempotency key a command was queued with, while it is kept.
pub(super) async fn command_key(
    pg: &Postgres,
    message_id: &str,
) -> Result<Option<CommandKey>, StateError> {
    let c = pg.pool.get().await?;
    let row = c
        .query_opt(
            "SELECT subject, request_sha256, expires_at_ms, keep_until_ms FROM command_keys
             WHERE message_id = $1 AND keep_until_ms > $2",
            &[&message_id, &i(pg.now_ms())],
        )
        .await
        .map_err(unavailable)?;
    Ok(row.map(|r| CommandKey {
        message_id: message_id.to_string(),
        subject: r.get(0),
        request_sha256: r.get(1),
        expires_at_ms: u(r.get(2)),
        keep_until_ms: u(r.get(3)),
    }))
}

pub(super) async fn request_node(
    pg: &Postgres,
    request_id: &str,
) -> Result<Option<String>, StateError> {
    let c = pg.pool.get().await?;
    let row = c
        .query_opt(
            "SELECT node_id FROM task_requests WHERE request_id = $1",
            &[&request_id],
        )
        .await
        .map_err(unavailable)?;
    Ok(row.map(|r| r.get(0)))
}

pub(super) async fn result(pg: &Postgres, request_id: &str) -> Result<Option<Vec<u8>>, StateError> {
    let c = pg.pool.get().await?;
    let row = c
        .query_opt(
            "SELECT result FROM task_results WHERE request_id = $1",
            &[&request_id],
        )
        .await
        .map_err(unavailable)?;
    Ok(row.map(|r| r.get(0)))
}

pub(super) async fn upload_seen(pg: &Postgres, message_id: &str) -> Result<bool, StateError> {
    let c = pg.pool.get().await?;
    let row = c
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM remembered_ids
                            WHERE scope = ANY($1) AND id = $2)",
            &[
                &vec![queue::SCOPE_RESULTS, queue::Q_GATEWAY_INBOX],
                &message_id,
            ],
        )
        .await
        .map_err(unavailable)?;
    Ok(row.get(0))
}

pub(super) async fn uploads_seen(
    pg: &Postgres,
    message_ids: &[String],
) -> Result<HashSet<String>, StateError> {
    let mut c = pg.pool.get().await?;
    let st = c
        .prep("SELECT id FROM remembered_ids WHERE scope = ANY($1) AND id = ANY($2)")
        .await?;
    let rows = c
        .query(
            &st,
            &[
                &vec![queue::SCOPE_RESULTS, queue::Q_GATEWAY_INBOX],
                &message_ids,
            ],
        )
        .await
        .map_err(unavailable)?;
    Ok(rows.into_iter().map(|r| r.get(0)).collect())
}
