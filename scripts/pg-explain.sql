-- EXPLAIN of the PostgreSQL gateway's hot-path statements (enqueue, pull, ack, sweep)
-- exactly as src/gateway/storage/postgres/queue.rs prepares them (keep in step with it;
-- scripts/pg-explain.sh regenerates nothing, it runs this file), shown as the generic
-- plans a prepared statement uses. Run against a gateway database holding a backlog:
--   bash scripts/pg-explain.sh            # throw-away cluster with a generated backlog
--   psql -X -q -d <db> -f scripts/pg-explain.sql
SET plan_cache_mode = force_generic_plan;
\echo '--- enqueue (ENQUEUE)'
PREPARE enqueue(text, text, text, smallint, text, bigint, bigint, bytea, integer, bigint, smallint, bigint, text) AS
WITH known AS (
        SELECT EXISTS (SELECT 1 FROM messages WHERE message_id = $1)
            OR EXISTS (SELECT 1 FROM message_status WHERE message_id = $1)
            OR EXISTS (SELECT 1 FROM remembered_ids WHERE scope = $2 AND id = $1) AS k),
    depth AS (
        SELECT coalesce(sum(n), 0)::bigint AS n FROM queue_depth
        WHERE queue = $2 AND peer = $3),
    ins AS (
        INSERT INTO messages (message_id, queue, peer, priority, payload_type,
                              created_at_ms, expires_at_ms, body, max_attempts)
        SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9
        WHERE NOT (SELECT k FROM known) AND (SELECT n FROM depth) < $10
        ON CONFLICT (message_id) DO NOTHING
        RETURNING seq),
    counted AS (
        INSERT INTO queue_depth (queue, peer, shard, n) SELECT $2, $3, $11, 1 FROM ins
        ON CONFLICT (queue, peer, shard) DO UPDATE SET n = queue_depth.n + 1
        RETURNING 1),
    staged AS (
        INSERT INTO events_staged (ts_ms, event) SELECT $12, $13 FROM ins
        WHERE $13::text IS NOT NULL
        RETURNING 1)
    SELECT (SELECT count(*) FROM ins), (SELECT k FROM known), (SELECT n FROM depth),
           (SELECT count(*) FROM counted), (SELECT count(*) FROM staged);
EXPLAIN EXECUTE enqueue('new1', 'to_node', 'node:n7', 0, 'COMMAND', 1, 9999999999999, '\x00', 0, 10000, 3, 1, '{}');
\echo '--- pull: a look at the queue (TAKE_BATCH)'
PREPARE take(text, text, bigint, bigint, bigint, bigint, bigint) AS
WITH p AS (
    SELECT pull FROM node_pulls WHERE node_id = $2),
head AS (
    SELECT m.seq, m.message_id, m.body, m.priority,
           sum(octet_length(m.body)) OVER w AS run, row_number() OVER w AS rn
    FROM (SELECT seq, message_id, body, priority FROM messages
          WHERE queue = $1 AND peer = $2 AND expires_at_ms > $3
            AND NOT EXISTS (SELECT 1 FROM p WHERE pull > $5)
          ORDER BY priority DESC, seq LIMIT $4) m
    WINDOW w AS (ORDER BY m.priority DESC, m.seq)),
take AS (
    SELECT seq, message_id, body, priority FROM head WHERE run <= $6 OR rn = 1),
marked AS (
    UPDATE messages SET lease_until_ms = $7, attempts = attempts + 1
    WHERE seq IN (SELECT seq FROM take) RETURNING 1)
SELECT (SELECT pull FROM p),
       (SELECT coalesce(sum(n), 0)::bigint FROM queue_depth WHERE queue = $1 AND peer = $2),
       t.message_id, t.body
FROM (SELECT 1) one LEFT JOIN take t ON true
ORDER BY t.priority DESC, t.seq;
EXPLAIN EXECUTE take('to_node', 'node:n7', 5, 500, 1, 1048576, 10);
\echo '--- ack: remove and record'
PREPARE ack(text, text, text[], text[], text[], bigint, smallint) AS
WITH gone AS (
    DELETE FROM messages WHERE queue = $1 AND peer = $2 AND message_id = ANY($3)
    RETURNING message_id, attempts, queue, peer),
    why AS (SELECT * FROM unnest($4::text[], $5::text[]) AS r(id, code)),
    uncounted AS (
    INSERT INTO queue_depth (queue, peer, shard, n)
    SELECT $1, $2, $7, -count(*) FROM gone HAVING count(*) > 0
    ON CONFLICT (queue, peer, shard) DO UPDATE SET n = queue_depth.n + excluded.n
    RETURNING 1)
    INSERT INTO message_status (message_id, state, queue, peer, attempts, reason, keep_until_ms)
    SELECT g.message_id,
    CASE WHEN w.code IS NULL THEN 'delivered' ELSE 'rejected' END,
    $1, $2, g.attempts, w.code, $6
    FROM gone g LEFT JOIN why w ON w.id = g.message_id
    ON CONFLICT (message_id) DO UPDATE
    SET state = excluded.state, reason = excluded.reason,
    attempts = excluded.attempts, keep_until_ms = excluded.keep_until_ms
    RETURNING message_id;
EXPLAIN EXECUTE ack('to_node', 'node:n7', ARRAY['m7','m1007'], ARRAY[]::text[], ARRAY[]::text[], 1, 3);
\echo '--- sweep: expired rows'
EXPLAIN SELECT seq FROM messages WHERE expires_at_ms <= 5 ORDER BY expires_at_ms LIMIT 10000 FOR UPDATE SKIP LOCKED;
