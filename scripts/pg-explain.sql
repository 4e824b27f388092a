-- EXPLAIN of the PostgreSQL gateway's hot-path queries (enqueue, pull, ack, sweep),
-- as src/gateway/storage/postgres/queue.rs issues them, with literals for the parameters.
-- Run against a gateway database holding a backlog (docs/BENCHMARKS.md, 'Gateway on PostgreSQL'):
--   psql -X -q -d <db> -f scripts/pg-explain.sql
\echo '--- enqueue: per-recipient cap (bounded count)'
EXPLAIN SELECT count(*) FROM (SELECT 1 FROM messages WHERE queue = 'to_node' AND peer = 'node:n7' LIMIT 10000) q;
\echo '--- enqueue: insert unless the id is known'
EXPLAIN INSERT INTO messages (message_id, queue, peer, priority, payload_type, created_at_ms, expires_at_ms, body, max_attempts)
 SELECT 'new1', 'to_node', 'node:n7', 0, 'COMMAND', 1, 9999999999999, '\x00'::bytea, 0
 WHERE NOT EXISTS (SELECT 1 FROM message_status WHERE message_id = 'new1')
   AND NOT EXISTS (SELECT 1 FROM remembered_ids WHERE scope = 'to_node' AND id = 'new1')
 ON CONFLICT (message_id) DO NOTHING RETURNING seq;
\echo '--- pull: the newest pull number'
EXPLAIN SELECT pull FROM node_pulls WHERE node_id = 'node:n7';
\echo '--- pull: the next batch in queue order'
EXPLAIN SELECT seq, message_id, body FROM messages WHERE queue = 'to_node' AND peer = 'node:n7' AND expires_at_ms > 5 ORDER BY priority DESC, seq LIMIT 500;
\echo '--- pull: mark handed out'
EXPLAIN UPDATE messages SET lease_until_ms = 1, attempts = attempts + 1 WHERE seq = ANY(ARRAY[1,2,3]::bigint[]);
\echo '--- pull: pending count'
EXPLAIN SELECT count(*) FROM messages WHERE queue = 'to_node' AND peer = 'node:n7';
\echo '--- ack: remove and record'
EXPLAIN WITH gone AS (DELETE FROM messages WHERE queue = 'to_node' AND peer = 'node:n7' AND message_id = ANY(ARRAY['m7','m1007']) RETURNING message_id, attempts),
 why AS (SELECT * FROM unnest(ARRAY[]::text[], ARRAY[]::text[]) AS r(id, code))
 INSERT INTO message_status (message_id, state, queue, peer, attempts, reason, keep_until_ms)
 SELECT g.message_id, CASE WHEN w.code IS NULL THEN 'delivered' ELSE 'rejected' END, 'to_node', 'node:n7', g.attempts, w.code, 1
 FROM gone g LEFT JOIN why w ON w.id = g.message_id
 ON CONFLICT (message_id) DO UPDATE SET state = excluded.state RETURNING message_id;
\echo '--- sweep: expired rows'
EXPLAIN SELECT seq FROM messages WHERE expires_at_ms <= 5 ORDER BY expires_at_ms LIMIT 10000 FOR UPDATE SKIP LOCKED;
