-- The seed sort workload's table: t(a int, c1 .. c32 int), 100,000 random rows.
DROP TABLE IF EXISTS t;
SELECT format('CREATE TABLE t AS SELECT (random() * 1e9)::int AS a, %s FROM generate_series(1, 100000)',
              string_agg(format('(random() * 1e9)::int AS c%s', i), ', '))
FROM generate_series(1, 32) AS i \gexec
VACUUM ANALYZE t;
