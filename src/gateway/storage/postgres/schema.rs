//! The gateway's schema in PostgreSQL and its versioned migrations.
//!
//! Every replica runs [`migrate`] at start: under a session advisory lock (so two
//! replicas starting together do not both migrate), it applies the migrations newer
//! than the recorded version, each in its own transaction, and refuses to start when
//! the database was migrated by a newer outpost (its schema is unknown to this one).
//! docs/ARCHITECTURE.md "Gateway schema (PostgreSQL)" explains each table.

use tokio_postgres::Client;

use super::super::StateError;
use super::unavailable;

/// Key of the advisory lock held while migrating (any 64-bit value unique to us).
const MIGRATION_LOCK: i64 = 0x6f75_7470_6f73_7401;

/// Migrations in order; the schema version is the number applied.
pub const MIGRATIONS: &[&str] = &[
    // 1: the whole gateway state.
    r#"
CREATE TABLE messages (
    seq            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id     text    NOT NULL UNIQUE,
    queue          text    NOT NULL,
    peer           text    NOT NULL,
    priority       smallint NOT NULL,
    payload_type   text    NOT NULL,
    created_at_ms  bigint  NOT NULL,
    expires_at_ms  bigint  NOT NULL,
    body           bytea   NOT NULL,
    max_attempts   integer NOT NULL,
    attempts       integer NOT NULL DEFAULT 0,
    lease_until_ms bigint  NOT NULL DEFAULT 0
);
-- Delivery order per recipient (pull, stats) and the expiry sweep.
CREATE INDEX messages_fifo ON messages (queue, peer, priority DESC, seq);
CREATE INDEX messages_expiry ON messages (expires_at_ms);

-- How many messages each recipient has queued, in DEPTH_SHARDS rows summed (an enqueue
-- adds 1 to a random one, a removal subtracts from a random one): the cap check and a
-- pull's pending count read 16 rows instead of counting the queue, and concurrent
-- enqueues for one node rarely wait on the same row.
CREATE TABLE queue_depth (
    queue text     NOT NULL,
    peer  text     NOT NULL,
    shard smallint NOT NULL,
    n     bigint   NOT NULL,
    PRIMARY KEY (queue, peer, shard)
);

-- Where a message went once it left the queue; also what makes a known id a duplicate.
CREATE TABLE message_status (
    message_id    text    PRIMARY KEY,
    state         text    NOT NULL,
    queue         text    NOT NULL,
    peer          text    NOT NULL,
    attempts      integer NOT NULL,
    reason        text,
    keep_until_ms bigint  NOT NULL
);
CREATE INDEX message_status_keep ON message_status (keep_until_ms);

-- Ids refused as replays until keep_until_ms (results, inbox messages).
CREATE TABLE remembered_ids (
    scope         text   NOT NULL,
    id            text   NOT NULL,
    keep_until_ms bigint NOT NULL,
    PRIMARY KEY (scope, id)
);
CREATE INDEX remembered_ids_keep ON remembered_ids (keep_until_ms);

-- A caller's job id, bound to its TASK_REQUEST.
CREATE TABLE jobs (
    job_key     text PRIMARY KEY,
    message_id  text NOT NULL,
    tool_name   text NOT NULL,
    args_sha256 text NOT NULL,
    node_id     text NOT NULL
);
CREATE TABLE task_requests (
    request_id text PRIMARY KEY,
    node_id    text NOT NULL
);
CREATE TABLE task_results (
    request_id   text   PRIMARY KEY,
    result       bytea  NOT NULL,
    filed_at_ms  bigint NOT NULL
);

CREATE TABLE revocations (
    version       bigint PRIMARY KEY,
    jti           text   NOT NULL UNIQUE,
    revoked_at_ms bigint NOT NULL
);

-- The trust store: one row per enrolled peer (its identity document as enrolled).
CREATE TABLE peers (
    node_id     text    PRIMARY KEY,
    role        text    NOT NULL,
    document    text    NOT NULL,
    may_send    boolean NOT NULL,
    may_issue   boolean NOT NULL,
    added_at_ms bigint  NOT NULL
);

-- Each node's audit log copy and the checkpoints that sign it.
CREATE TABLE audit_entries (
    node_id text   NOT NULL,
    idx     bigint NOT NULL,
    entry   bytea  NOT NULL,
    PRIMARY KEY (node_id, idx)
);
CREATE TABLE audit_checkpoints (
    node_id text   NOT NULL,
    size    bigint NOT NULL,
    note    text   NOT NULL,
    PRIMARY KEY (node_id, size)
);

-- Signatures of node requests already seen (replay protection across replicas).
CREATE TABLE seen_signatures (
    signature     text   PRIMARY KEY,
    keep_until_ms bigint NOT NULL
);
CREATE INDEX seen_signatures_keep ON seen_signatures (keep_until_ms);

-- The newest pull of each node: it supersedes older pulls held at any replica.
CREATE TABLE node_pulls (
    node_id text   PRIMARY KEY,
    pull    bigint NOT NULL
);

-- Liveness: when each node was last heard from, through any replica.
CREATE TABLE nodes (
    node_id          text    PRIMARY KEY,
    last_seen_ms     bigint  NOT NULL,
    online           boolean NOT NULL,
    -- Some replica holds a long-poll of the node until then (refreshed every second).
    polling_until_ms bigint  NOT NULL DEFAULT 0
);
CREATE INDEX nodes_online ON nodes (last_seen_ms) WHERE online;

-- What /v1/events shows, in commit order (ids are assigned under a lock, so a
-- reader that saw id N never later sees a smaller one appear).
CREATE TABLE events (
    id    bigint PRIMARY KEY,
    ts_ms bigint NOT NULL,
    event text   NOT NULL
);
"#,
    // 2: events are committed with the write they describe (or by a replica's events
    // writer) into `events_staged`, without a lock; a sequencer gives them their ids in
    // one statement that locks the single `events_head` row, so ids still increase in
    // commit order while no writer waits for another replica's commit.
    r#"
CREATE TABLE events_staged (
    seq   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ts_ms bigint NOT NULL,
    event text   NOT NULL
);
CREATE TABLE events_head (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    next_id bigint  NOT NULL
);
INSERT INTO events_head (one, next_id) SELECT true, coalesce(max(id), 0) + 1 FROM events;
"#,
    // 3: callers' idempotency keys of commands, committed with the command and kept
    // (then pruned by the sweep) until keep_until_ms, at least the command's life.
    r#"
CREATE TABLE command_keys (
    message_id     text   PRIMARY KEY,
    subject        text   NOT NULL,
    request_sha256 text   NOT NULL,
    expires_at_ms  bigint NOT NULL,
    keep_until_ms  bigint NOT NULL
);
CREATE INDEX command_keys_keep ON command_keys (keep_until_ms);
"#,
    // 4: enrollment (PROTOCOL §15): tokens with their uses, and one record per node id
    // and device key (its JSON; `state` for the lookups of retired keys).
    r#"
CREATE TABLE enroll_tokens (
    id      text    PRIMARY KEY,
    record  text    NOT NULL,
    revoked boolean NOT NULL,
    uses    bigint  NOT NULL
);
CREATE TABLE enrollments (
    node_id text NOT NULL,
    sign_pk text NOT NULL,
    state   text NOT NULL,
    record  text NOT NULL,
    PRIMARY KEY (node_id, sign_pk)
);
"#,
    // 5: key rotation (PROTOCOL §15.7): a peer's retired keys (JSON: the one still in its
    // grace period and every retired signing key), NULL for a peer that never rotated;
    // the gateway's own newest rotation, handed to nodes by every replica.
    r#"
ALTER TABLE peers ADD COLUMN rotation text;
CREATE TABLE gateway_rotation (
    id        integer PRIMARY KEY CHECK (id = 1),
    statement text    NOT NULL,
    until_ms  bigint  NOT NULL
);
"#,
    // 6: the gateway's own audit entries (PROTOCOL §15.6) its decisions committed and
    // its log does not hold yet (a transactional outbox): inserted with the decision,
    // deleted when a replica appends them to the log. `entry` is the entry's JSON with
    // index 0 and the decision's time.
    r#"
CREATE TABLE gateway_audit_pending (
    seq   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    entry text   NOT NULL
);
"#,
    // 7: fleet state per node (PROTOCOL §16): the summary (labels, inventory, versions;
    // JSON) every listing reads, the documents apart, the revision a write checks, and
    // the desired version the pull path asks for.
    r#"
CREATE TABLE node_fleet (
    node_id         text   PRIMARY KEY,
    revision        bigint NOT NULL,
    summary         text   NOT NULL,
    docs            text   NOT NULL,
    desired_version bigint NOT NULL
);
"#,
    // 8: rollouts (PROTOCOL §17): each with its revision and its caller's idempotency
    // key, one row per target node, and the lease of the replica that drives it.
    r#"
CREATE TABLE rollouts (
    id          text   PRIMARY KEY,
    revision    bigint NOT NULL,
    created_ms  bigint NOT NULL,
    idem_key    text   UNIQUE,
    record      text   NOT NULL,
    lease_owner text,
    lease_until bigint NOT NULL DEFAULT 0
);
CREATE TABLE rollout_targets (
    rollout_id text NOT NULL,
    node_id    text NOT NULL,
    record     text NOT NULL,
    PRIMARY KEY (rollout_id, node_id)
);
"#,
    // 9: tenants (PROTOCOL §18): one row per tenant, its record as JSON (quotas, who
    // made it). `default` has a row only once its quotas were set. A peer's tenant is
    // the part of its address after `@` ('' for `default`): indexed, so counting a
    // tenant's nodes (its `max_nodes`) reads that tenant's rows only.
    r#"
CREATE TABLE tenants (
    name   text PRIMARY KEY,
    record text NOT NULL
);
CREATE INDEX peers_tenant ON peers ((split_part(node_id, '@', 2)));
"#,
];

/// The newest schema this binary knows.
pub fn latest() -> i64 {
    MIGRATIONS.len() as i64
}

/// Bring the database to [`latest`], or refuse a newer one.
pub async fn migrate(client: &mut Client) -> Result<i64, StateError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(unavailable)?;
    let out = migrate_locked(client).await;
    // Unlocked also when the connection ends; say so explicitly on the normal path.
    let _ = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    out
}

async fn migrate_locked(client: &mut Client) -> Result<i64, StateError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS outpost_schema (
                 version    integer PRIMARY KEY,
                 applied_at timestamptz NOT NULL DEFAULT now()
             )",
        )
        .await
        .map_err(unavailable)?;
    let found: i64 = client
        .query_one(
            "SELECT coalesce(max(version), 0)::bigint FROM outpost_schema",
            &[],
        )
        .await
        .map_err(unavailable)?
        .get(0);
    if found > latest() {
        return Err(StateError::Store(crate::store::StoreError::SchemaTooNew {
            found: found as u64,
            supported: latest() as u64,
        }));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = i as i32 + 1;
        let tx = client.transaction().await.map_err(unavailable)?;
        tx.batch_execute(sql).await.map_err(unavailable)?;
        tx.execute(
            "INSERT INTO outpost_schema (version) VALUES ($1)",
            &[&version],
        )
        .await
        .map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)?;
        tracing::info!(event = "postgres_migrated", version);
    }
    Ok(latest())
}
