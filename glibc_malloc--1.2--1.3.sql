/* glibc_malloc--1.2--1.3.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION glibc_malloc UPDATE TO '1.3'" to load this file. \quit

-- 1.3: the kinds of memory in each backend (context_bytes, cache_bytes,
-- outside_context_bytes, peak_executor_bytes), glibc_malloc_doctor(), and
-- idle releases and remote trims counted apart.  Up to 1.2,
-- idle_releases and idle_released_bytes counted both; they now count idle
-- releases only, and remote_trims and remote_trimmed_bytes count the trims
-- other backends asked for (glibc_malloc_trim_backend, glibc_malloc_trim_idle).
-- The functions get new C entry points; a database still on 1.2 keeps
-- calling the old ones, which report the two together as before.

DROP VIEW glibc_malloc_summary;
DROP VIEW glibc_malloc_backends;
DROP FUNCTION glibc_malloc_backends();

CREATE FUNCTION glibc_malloc_backends(
    OUT pid integer,
    OUT backend_type text,
    OUT usesysid oid,
    OUT preset text,
    OUT system_bytes bigint,
    OUT in_use_bytes bigint,
    OUT free_bytes bigint,
    OUT mmapped_bytes bigint,
    OUT rss_anon_bytes bigint,
    OUT context_bytes bigint,
    OUT cache_bytes bigint,
    OUT outside_context_bytes bigint,
    OUT peak_executor_bytes bigint,
    OUT idle_releases bigint,
    OUT idle_released_bytes bigint,
    OUT remote_trims bigint,
    OUT remote_trimmed_bytes bigint,
    OUT snapshot_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'glibc_malloc_backends_1_3'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

-- Joinable with pg_stat_activity on pid.  Rows of other roles' backends are
-- visible to superusers and members of pg_read_all_stats only.
CREATE VIEW glibc_malloc_backends AS
    SELECT pid, backend_type, usesysid, pg_get_userbyid(usesysid) AS usename,
           preset, system_bytes, in_use_bytes, free_bytes, mmapped_bytes,
           rss_anon_bytes, context_bytes, cache_bytes,
           outside_context_bytes,
           peak_executor_bytes, idle_releases, idle_released_bytes,
           remote_trims, remote_trimmed_bytes, snapshot_at,
           clock_timestamp() - snapshot_at AS snapshot_age
    FROM glibc_malloc_backends();

COMMENT ON VIEW glibc_malloc_backends IS
'Malloc snapshot of every backend, as last published';

-- Everyone may read it; the function filters the rows a role may see.
GRANT SELECT ON glibc_malloc_backends TO PUBLIC;

-- One row for the whole server, for monitoring.
CREATE VIEW glibc_malloc_summary AS
    SELECT count(*) AS backends,
           coalesce(sum(system_bytes), 0)::bigint AS system_bytes,
           coalesce(sum(in_use_bytes), 0)::bigint AS in_use_bytes,
           coalesce(sum(free_bytes), 0)::bigint AS free_bytes,
           coalesce(sum(rss_anon_bytes), 0)::bigint AS rss_anon_bytes,
           coalesce(sum(context_bytes), 0)::bigint AS context_bytes,
           coalesce(sum(cache_bytes), 0)::bigint AS cache_bytes,
           coalesce(sum(idle_released_bytes), 0)::bigint AS idle_released_bytes,
           coalesce(sum(remote_trimmed_bytes), 0)::bigint AS remote_trimmed_bytes,
           max(snapshot_age) AS oldest_snapshot_age
    FROM glibc_malloc_backends;

COMMENT ON VIEW glibc_malloc_summary IS
'Totals of glibc_malloc_backends: free memory kept and RssAnon across the server';

GRANT SELECT ON glibc_malloc_summary TO PUBLIC;

DROP FUNCTION glibc_malloc_stats();

CREATE FUNCTION glibc_malloc_stats(
    OUT allocator text,
    OUT glibc_version text,
    OUT system_bytes bigint,
    OUT in_use_bytes bigint,
    OUT free_bytes bigint,
    OUT fastbin_free_bytes bigint,
    OUT heap_bytes bigint,
    OUT mmapped_count bigint,
    OUT mmapped_bytes bigint,
    OUT releasable_top_bytes bigint,
    OUT rss_anon_bytes bigint,
    OUT idle_releases bigint,
    OUT idle_released_bytes bigint,
    OUT remote_trims bigint,
    OUT remote_trimmed_bytes bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'glibc_malloc_stats_1_3'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION glibc_malloc_stats() IS
'glibc mallinfo2 counters and RssAnon of this backend';

-- Server-wide advice: what each backend's memory is and what would free it.
-- Follows the view's visibility rules.
CREATE FUNCTION glibc_malloc_doctor(
    OUT kind text,
    OUT pid integer,
    OUT bytes bigint,
    OUT reason text,
    OUT action text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'glibc_malloc_doctor'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION glibc_malloc_doctor() IS
'Advice on the memory of every visible backend: what it is, and what would free it';
