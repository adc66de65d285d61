-- Who may set what: presets are for everyone, raw knobs for superusers and
-- roles granted SET ON PARAMETER.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS glibc_malloc;
RESET client_min_messages;
LOAD 'glibc_malloc';
CREATE ROLE glibc_malloc_user;
GRANT USAGE ON SCHEMA public TO glibc_malloc_user;

SET ROLE glibc_malloc_user;
SET glibc_malloc.preset = greedy;
SHOW glibc_malloc.preset;
SET glibc_malloc.top_pad = '1GB';
SET glibc_malloc.max_trim_threshold = '1GB';
SET glibc_malloc.log_min_executor_memory = '1MB';
SHOW glibc_malloc.top_pad;
-- The per-backend reports are open to all; the diagnostic is not.
SELECT count(*) > 0 AS can_read FROM glibc_malloc_settings();
SELECT glibc_malloc_diag_alloc(1024);
-- The memory monitor's view sums every role's backends: pg_read_all_stats.
SELECT count(*) FROM glibc_malloc_monitor;
SELECT count(*) FROM glibc_malloc_monitor();
RESET ROLE;
GRANT pg_read_all_stats TO glibc_malloc_user;
SET ROLE glibc_malloc_user;
SELECT count(*) AS monitor_rows FROM glibc_malloc_monitor;
RESET ROLE;
REVOKE pg_read_all_stats FROM glibc_malloc_user;

-- GRANT SET ON PARAMETER exists from PostgreSQL 15 (expected/*_1.out: skipped).
SELECT current_setting('server_version_num')::int >= 150000 AS has_grant_set \gset
\if :has_grant_set
GRANT SET ON PARAMETER glibc_malloc.top_pad TO glibc_malloc_user;
SET ROLE glibc_malloc_user;
SET glibc_malloc.top_pad = '1MB';
SHOW glibc_malloc.top_pad;
SELECT value, source, applied FROM glibc_malloc_settings() WHERE name = 'top_pad';
RESET glibc_malloc.top_pad;
RESET ROLE;
REVOKE SET ON PARAMETER glibc_malloc.top_pad FROM glibc_malloc_user;
\else
\echo 'skipped: GRANT SET ON PARAMETER needs PostgreSQL 15 or later'
\endif

REVOKE USAGE ON SCHEMA public FROM glibc_malloc_user;
DROP ROLE glibc_malloc_user;
