-- The expiry sweep's plan; scripts/pg-explain.py prints the enqueue, pull and ack
-- statements (taken from queue.rs) before this file. Run: bash scripts/pg-explain.sh
\echo '--- sweep: expired rows'
EXPLAIN SELECT seq FROM messages WHERE expires_at_ms <= 5 ORDER BY expires_at_ms LIMIT 10000 FOR UPDATE SKIP LOCKED;
