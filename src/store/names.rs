//! Every namespace the two roles keep in a store, in one place: queues, KV namespaces
//! and dedup scopes share one file set, so a name used twice for two meanings would be
//! a silent corruption. Each name is referenced from here only.

// --- node ---

/// Queue: envelopes this node sends, per recipient (`peer`), sealed.
pub const Q_OUTBOX: &str = "outbox";
/// Queue: opened envelopes for local consumers, per sender; also their dedup scope.
pub const Q_INBOX: &str = "inbox";
/// Queue: opened `TASK_REQUEST`s the task worker runs, per sender; also a dedup scope.
pub const Q_TASKS: &str = "tasks";
/// KV: node bookkeeping (`audit_synced_size`, …).
pub const KV_META: &str = "meta";
/// KV: revoked token ids (key = jti), fetched from the gateway.
pub const KV_REVOKED: &str = "revoked";
/// KV: sync-loop bookkeeping (`revocations_version`, …).
pub const KV_SYNC: &str = "sync";
/// Dedup scope: outbox requests that named their message id (`id/fingerprint`).
pub const SCOPE_OUTBOX_REQUESTS: &str = "outbox_requests";
/// KV: the node's desired and reported state documents with their versions
/// (keys [`KEY_DESIRED`], [`KEY_REPORTED`]; PROTOCOL §10.4, §16.4).
pub const KV_STATE: &str = "state";
pub const KEY_DESIRED: &str = "desired";
pub const KEY_REPORTED: &str = "reported";
/// Dedup scope: `DESIRED_STATE` envelopes received (they go to no queue).
pub const SCOPE_DESIRED: &str = "desired_state";

// --- both roles ---

/// KV: the trust store as older builds wrote it (one record, cut into rows), read until
/// the first write converts it (`daemon::trust`).
pub const KV_TRUST: &str = "trust";
/// KV: the trust store, one row per trusted peer, key = node id (`outpost trust add`,
/// enrollments, rotations and retirements write it).
pub const KV_TRUST_PEERS: &str = "trust_peers";
/// KV: the trust store's change log, key = [`crate::store::seq_key`] version, value =
/// the node id changed (`+id` put, `-id` removed); the newest few thousand are kept.
pub const KV_TRUST_LOG: &str = "trust_log";

// --- gateway (embedded engine; see `gateway::storage::embedded`) ---

/// Queue: sealed envelopes waiting for a node (`peer` = the node).
pub const Q_TO_NODE: &str = "to_node";
/// Queue: messages nodes sent to the gateway itself, per sender; also a dedup scope.
/// (Same name as the node's inbox: the two roles never share a store.)
pub const Q_GATEWAY_INBOX: &str = "inbox";
/// Dedup scope: result envelopes received.
pub const SCOPE_RESULTS: &str = "results";
/// KV: a caller's job → its TASK_REQUEST.
pub const KV_GW_JOBS: &str = "gw_jobs";
/// Results (kept until their keep-until, then swept): a command's message id → the
/// idempotency key it was queued with (`<prefix><message id>`).
pub const RESULT_GW_COMMAND_KEY_PREFIX: &str = "gw_command_key/";
/// KV: a TASK_REQUEST's message id → the node it was sent to.
pub const KV_GW_REQUESTS: &str = "gw_requests";
/// KV: a TASK_REQUEST's message id → its TASK_RESULT.
pub const KV_GW_RESULTS: &str = "gw_results";
/// KV: revoked token ids by version.
pub const KV_GW_REVOCATIONS: &str = "gw_revocations";
/// KV: enrollment tokens by id (written by `outpost enroll-token`), their uses (written
/// only by the gateway, so the two never overwrite each other), and enrollment records
/// by `<node id> <signing key>`.
pub const KV_GW_ENROLL_TOKENS: &str = "gw_enroll_tokens";
pub const KV_GW_ENROLL_USES: &str = "gw_enroll_uses";
pub const KV_GW_ENROLLMENTS: &str = "gw_enrollments";
/// KV: the gateway's own newest key rotation (one record, `current`).
pub const KV_GW_ROTATION: &str = "gw_rotation";
/// KV: the gateway's own audit entries its decisions committed and its log does not
/// hold yet, key = zero-padded sequence number (PROTOCOL §15.6).
pub const KV_GW_AUDIT_PENDING: &str = "gw_audit_pending";
/// KV: fleet state per node (PROTOCOL §16): the summary (labels, inventory, versions)
/// and, apart, the desired and reported documents; key = node id.
pub const KV_GW_FLEET: &str = "gw_fleet";
pub const KV_GW_FLEET_DOCS: &str = "gw_fleet_docs";
/// KV: rollouts by id; their callers' idempotency keys (→ id); each rollout's targets
/// under `<prefix><rollout id>`, key = node id (PROTOCOL §17).
pub const KV_GW_ROLLOUTS: &str = "gw_rollouts";
pub const KV_GW_ROLLOUT_KEYS: &str = "gw_rollout_keys";
pub const KV_GW_ROLLOUT_TARGETS_PREFIX: &str = "gw_rollout:";
/// KV: tenants by name (PROTOCOL §18), written by `outpost tenant`.
pub const KV_GW_TENANTS: &str = "gw_tenants";
/// KV prefixes of a node's audit copy and its checkpoints (`<prefix><node id>`).
pub const KV_GW_AUDIT_PREFIX: &str = "gw_audit:";
pub const KV_GW_AUDIT_CHECKPOINTS_PREFIX: &str = "gw_auditcp:";
