/* glibc_malloc--1.0--1.1.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION glibc_malloc UPDATE TO '1.1'" to load this file. \quit

-- 1.1: every backend's malloc, from shared memory (needs
-- shared_preload_libraries), and remote trim.

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
    OUT idle_releases bigint,
    OUT idle_released_bytes bigint,
    OUT snapshot_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'glibc_malloc_backends'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

-- Joinable with pg_stat_activity on pid.  Rows of other roles' backends are
-- visible to superusers and members of pg_read_all_stats only.
CREATE VIEW glibc_malloc_backends AS
    SELECT pid, backend_type, usesysid, pg_get_userbyid(usesysid) AS usename,
           preset, system_bytes, in_use_bytes, free_bytes, mmapped_bytes,
           rss_anon_bytes, idle_releases, idle_released_bytes, snapshot_at,
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
           coalesce(sum(idle_released_bytes), 0)::bigint AS idle_released_bytes,
           max(snapshot_age) AS oldest_snapshot_age
    FROM glibc_malloc_backends;

COMMENT ON VIEW glibc_malloc_summary IS
'Totals of glibc_malloc_backends: free memory kept and RssAnon across the server';

GRANT SELECT ON glibc_malloc_summary TO PUBLIC;

CREATE FUNCTION glibc_malloc_trim_backend(pid integer)
RETURNS boolean
AS 'MODULE_PATHNAME', 'glibc_malloc_trim_backend'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION glibc_malloc_trim_backend(integer) IS
'Ask a backend to return its free malloc memory to the OS at its next safe point';

-- Ask every idle backend the caller may trim that holds more than
-- min_free_bytes free to return it; returns how many were asked.
CREATE FUNCTION glibc_malloc_trim_idle(min_free_bytes bigint DEFAULT 1048576)
RETURNS integer
LANGUAGE sql VOLATILE PARALLEL RESTRICTED
AS $$
    SELECT count(*)::integer
    FROM glibc_malloc_backends b JOIN pg_stat_activity a USING (pid)
    WHERE a.state = 'idle'
      AND b.free_bytes > min_free_bytes
      AND b.pid <> pg_backend_pid()
      AND (NOT (SELECT rolsuper FROM pg_roles WHERE oid = b.usesysid)
           OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user))
      AND (pg_has_role(b.usesysid, 'USAGE') OR pg_has_role('pg_signal_backend', 'USAGE'))
      AND glibc_malloc_trim_backend(b.pid)
$$;

COMMENT ON FUNCTION glibc_malloc_trim_idle(bigint) IS
'Ask every idle backend holding more than min_free_bytes free to return it';

-- Names in the function above resolve in pg_catalog and this extension's
-- schema only, whatever the caller's search_path: a superuser whose
-- search_path starts with a schema others can write must not run their
-- look-alike of glibc_malloc_backends (CVE-2018-1058).  The schema is the
-- one being installed into (the extension is relocatable, so @extschema@
-- is not available): after ALTER EXTENSION ... SET SCHEMA the function no
-- longer finds its view.  1.2 replaces it with a C function.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION glibc_malloc_trim_idle(bigint) SET search_path = pg_catalog, %I, pg_temp',
                   current_schema());
END
$$;
