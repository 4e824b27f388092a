#!/usr/bin/env python3
"""Print the PostgreSQL gateway's hot-path statements (enqueue, a pull's look, ack) as
`PREPARE` + `EXPLAIN EXECUTE`, taken from src/gateway/storage/postgres/queue.rs (enqueue)
and delivery.rs (a pull's look, ack) as they are now (so the plans shown are of the statements the gateway prepares), then
scripts/pg-explain.sql (the expiry sweep). Used by scripts/pg-explain.sh."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
pg = root / "src/gateway/storage/postgres"
src = (pg / "queue.rs").read_text() + (pg / "delivery.rs").read_text()


def const(name):
    m = re.search(r'const %s: &str = "(.*?)";' % name, src, re.S)
    if not m:
        sys.exit(f"{name} not found in queue.rs or delivery.rs")
    return m.group(1).strip()


m = re.search(r'"(WITH gone AS \(\s*DELETE FROM messages\s+WHERE message_id = ANY\(\$3\).*?RETURNING message_id)"', src, re.S)
if not m:
    sys.exit("the ack statement was not found in queue.rs or delivery.rs")
ack = m.group(1)

print("SET plan_cache_mode = force_generic_plan;")
print("\\echo '--- enqueue (ENQUEUE)'")
print("PREPARE enqueue(text, text, text, smallint, text, bigint, bigint, bytea, integer, bigint, smallint, bigint, text) AS")
print(const("ENQUEUE") + ";")
print("EXPLAIN EXECUTE enqueue('new1', 'to_node', 'node:n7', 0, 'COMMAND', 1, 9999999999999, '\\x00', 0, 10000, 3, 1, '{}');")
print("\\echo '--- pull: a look at the queue (TAKE_BATCH)'")
print("PREPARE take(text, text, bigint, bigint, bigint, bigint, bigint, text) AS")
print(const("TAKE_BATCH") + ";")
print("EXPLAIN EXECUTE take('to_node', 'node:n7', 5, 500, 1, 1048576, 10, NULL);")
print("\\echo '--- pull: the same, pipelined (after = a queued message of the node)'")
print("EXPLAIN EXECUTE take('to_node', 'node:n7', 5, 500, 1, 1048576, 10, 'm7');")
print("\\echo '--- ack: remove and record'")
print("PREPARE ack(text, text, text[], text[], text[], bigint, smallint) AS")
print(ack + ";")
print("EXPLAIN EXECUTE ack('to_node', 'node:n7', ARRAY['m7','m1007'], ARRAY[]::text[], ARRAY[]::text[], 1, 3);")
print((root / "scripts/pg-explain.sql").read_text())
