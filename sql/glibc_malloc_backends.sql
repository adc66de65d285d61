-- Every backend's malloc, from shared memory: the views' columns, the
-- caller's own row, and remote trim of itself.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS glibc_malloc;
RESET client_min_messages;

SELECT attname, format_type(atttypid, atttypmod)
FROM pg_attribute WHERE attrelid = 'glibc_malloc_backends'::regclass AND attnum > 0 ORDER BY attnum;
SELECT attname, format_type(atttypid, atttypmod)
FROM pg_attribute WHERE attrelid = 'glibc_malloc_summary'::regclass AND attnum > 0 ORDER BY attnum;

-- The caller's own row is current, and joins pg_stat_activity on pid.
SELECT b.backend_type, b.usename = current_user AS own_role, b.preset,
       b.system_bytes > 0 AS has_memory, b.rss_anon_bytes > 0 AS has_rss,
       b.snapshot_age < interval '1 minute' AS fresh, a.state
FROM glibc_malloc_backends b JOIN pg_stat_activity a USING (pid)
WHERE pid = pg_backend_pid();
SET glibc_malloc.preset = frugal;
SELECT preset FROM glibc_malloc_backends WHERE pid = pg_backend_pid();
RESET glibc_malloc.preset;

SELECT backends >= 1 AS counts_backends, rss_anon_bytes > 0 AS sums_rss FROM glibc_malloc_summary;

-- Trim itself: served at once.
SELECT glibc_malloc_trim_backend(pg_backend_pid());
SELECT idle_releases = 0 AS no_idle_release, remote_trims >= 1 AS counted FROM glibc_malloc_backends WHERE pid = pg_backend_pid();

-- Not a backend.
SELECT glibc_malloc_trim_backend(1);
SELECT glibc_malloc_trim_idle(0) >= 0 AS ran;

-- The kinds of memory: contexts and caches are measured, and nest: caches
-- within contexts, contexts within what malloc has in use.
SELECT context_bytes > 0 AS contexts, cache_bytes > 0 AS caches,
       cache_bytes <= context_bytes AS caches_in_contexts,
       context_bytes <= in_use_bytes AS contexts_in_use,
       outside_context_bytes = greatest(in_use_bytes - context_bytes, 0) AS outside_is_the_rest
FROM glibc_malloc_backends WHERE pid = pg_backend_pid();
-- A fresh session is not worth a word from the doctor.
SELECT count(*) AS about_me FROM glibc_malloc_doctor() WHERE pid = pg_backend_pid();

-- A library and an SQL definition that disagree on the columns: a clear
-- error, not a read past the row's values.
CREATE FUNCTION pg_temp.short_statements(OUT userid oid, OUT dbid oid)
RETURNS SETOF record AS '$libdir/glibc_malloc', 'glibc_malloc_statements' LANGUAGE C;
SELECT * FROM pg_temp.short_statements();
CREATE FUNCTION pg_temp.short_statements_info(OUT entries bigint, OUT dealloc bigint, OUT no_queryid bigint)
RETURNS record AS '$libdir/glibc_malloc', 'glibc_malloc_statements_info' LANGUAGE C;
SELECT * FROM pg_temp.short_statements_info();
