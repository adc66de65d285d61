-- The CREATE INDEX workload's table: ix(a int, b int), unlogged (no WAL),
-- psql variable rows random rows (setseed: the same every run).
SELECT setseed(0.23);
DROP TABLE IF EXISTS ix;
CREATE UNLOGGED TABLE ix AS SELECT (random() * 2e9 - 1e9)::int AS a, g AS b FROM generate_series(1, :rows) g;
VACUUM ANALYZE ix;
