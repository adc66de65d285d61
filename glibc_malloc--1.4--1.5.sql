/* glibc_malloc--1.4--1.5.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION UPDATE
\echo Use "ALTER EXTENSION glibc_malloc UPDATE TO '1.5'" to load this file. \quit

-- The memory guard's state: the limit it keeps the server under, the
-- headroom, what it lowered, and the "out of memory" errors under the
-- module's limits.  Server-wide, like glibc_malloc_monitor: for
-- pg_read_all_stats (pg_monitor) and superusers.
CREATE FUNCTION glibc_malloc_guard(
    OUT enabled boolean,
    OUT engaged boolean,
    OUT limit_bytes bigint,
    OUT usage_bytes bigint,
    OUT target_bytes bigint,
    OUT headroom_bytes bigint,
    OUT limited_processes integer,
    OUT rounds bigint,
    OUT limits_lowered bigint,
    OUT guard_errors bigint,
    OUT max_backend_memory_errors bigint,
    OUT last_action text,
    OUT last_action_at timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'glibc_malloc_guard'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION glibc_malloc_guard() IS
'The memory guard: the headroom it keeps, the limits it lowered, the errors they caused';

REVOKE ALL ON FUNCTION glibc_malloc_guard() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION glibc_malloc_guard() TO pg_read_all_stats;

CREATE VIEW glibc_malloc_guard AS
  SELECT * FROM glibc_malloc_guard();

REVOKE ALL ON glibc_malloc_guard FROM PUBLIC;
GRANT SELECT ON glibc_malloc_guard TO pg_read_all_stats;

COMMENT ON VIEW glibc_malloc_guard IS
'The memory guard: the headroom it keeps, the limits it lowered, the errors they caused';

-- Every process of the server, the postmaster and the auxiliary processes
-- too, with its private memory as /proc shows it and its soft RLIMIT_DATA.
CREATE FUNCTION glibc_malloc_processes(
    OUT pid integer,
    OUT backend_type text,
    OUT guarded boolean,
    OUT vmdata_bytes bigint,
    OUT rss_anon_bytes bigint,
    OUT data_limit_bytes bigint,
    OUT max_backend_memory_limit_bytes bigint,
    OUT guard_limit_bytes bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'glibc_malloc_processes'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION glibc_malloc_processes() IS
'Every server process: private memory (VmData, RssAnon) and its data size limits';

REVOKE ALL ON FUNCTION glibc_malloc_processes() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION glibc_malloc_processes() TO pg_read_all_stats;

CREATE VIEW glibc_malloc_processes AS
  SELECT * FROM glibc_malloc_processes();

REVOKE ALL ON glibc_malloc_processes FROM PUBLIC;
GRANT SELECT ON glibc_malloc_processes TO pg_read_all_stats;

COMMENT ON VIEW glibc_malloc_processes IS
'Every server process: private memory (VmData, RssAnon) and its data size limits';
