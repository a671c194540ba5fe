-- One publish as PostgreSQL sees it, for pgbench (scripts/bench-peers.sh runs it beside
-- smartfeeds on the same server): lock and bump the feed's row, insert the item, insert its
-- push log row, a durable commit. The floor of one publish per transaction.
\set n random(1, 1000000000)
BEGIN;
SELECT items FROM bench_feeds WHERE id = 1 FOR NO KEY UPDATE;
UPDATE bench_feeds SET items = items + 1 WHERE id = 1;
INSERT INTO bench_items (feed, id, payload) VALUES (1, :n || '-' || :client_id || '-' || clock_timestamp(), repeat('x', 500));
INSERT INTO bench_push_log (feed, item_id, payload) VALUES (1, :n, repeat('x', 500));
COMMIT;
