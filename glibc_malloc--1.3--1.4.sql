/* glibc_malloc--1.3--1.4.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION glibc_malloc UPDATE TO '1.4'" to load this file. \quit

-- The memory monitor's state: what limits the server's memory, how much is
-- used, and what the monitor last did.  It sums the free heap of every
-- role's backends and names the server's cgroup, so, like the other rows of
-- other roles, it is for pg_read_all_stats (pg_monitor) and superusers.
CREATE FUNCTION glibc_malloc_monitor(
    OUT pid integer,
    OUT enabled boolean,
    OUT source text,
    OUT cgroup text,
    OUT limit_bytes bigint,
    OUT usage_bytes bigint,
    OUT fraction float8,
    OUT psi_some_avg10 float8,
    OUT under_pressure boolean,
    OUT total_free_bytes bigint,
    OUT max_total_free_bytes bigint,
    OUT rounds bigint,
    OUT backends_asked bigint,
    OUT asked_bytes bigint,
    OUT returned_bytes bigint,
    OUT last_action text,
    OUT last_action_at timestamptz,
    OUT checked_at timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'glibc_malloc_monitor'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION glibc_malloc_monitor() IS
'The memory monitor: the limit it sees, the usage, and what it last did';

REVOKE ALL ON FUNCTION glibc_malloc_monitor() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION glibc_malloc_monitor() TO pg_read_all_stats;

CREATE VIEW glibc_malloc_monitor AS
  SELECT * FROM glibc_malloc_monitor();

REVOKE ALL ON glibc_malloc_monitor FROM PUBLIC;
GRANT SELECT ON glibc_malloc_monitor TO pg_read_all_stats;

COMMENT ON VIEW glibc_malloc_monitor IS
'The memory monitor: the limit it sees, the usage, and what it last did';
