/* glibc_malloc--1.6--1.7.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION UPDATE
\echo Use "ALTER EXTENSION glibc_malloc UPDATE TO '1.7'" to load this file. \quit

-- Counters that never go down while the server runs: each process's
-- releases are added to its slot's counts when it exits, so a scraper may
-- take rates (the per-backend columns of glibc_malloc_backends, summed,
-- drop when a backend exits).  Server-wide, like glibc_malloc_guard: for
-- pg_read_all_stats (pg_monitor) and superusers.
CREATE FUNCTION glibc_malloc_counters(
    OUT idle_releases bigint,
    OUT idle_released_bytes bigint,
    OUT remote_trims bigint,
    OUT remote_trimmed_bytes bigint,
    OUT oom_errors bigint,
    OUT counters_since timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'glibc_malloc_counters'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION glibc_malloc_counters() IS
'Releases, trims and out-of-memory errors of every process since the server started, exited processes included';

REVOKE ALL ON FUNCTION glibc_malloc_counters() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION glibc_malloc_counters() TO pg_read_all_stats;

CREATE VIEW glibc_malloc_counters AS
  SELECT * FROM glibc_malloc_counters();

REVOKE ALL ON glibc_malloc_counters FROM PUBLIC;
GRANT SELECT ON glibc_malloc_counters TO pg_read_all_stats;

COMMENT ON VIEW glibc_malloc_counters IS
'Releases, trims and out-of-memory errors of every process since the server started, exited processes included';
