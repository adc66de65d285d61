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

-- glibc_malloc_guard gains the reserve for small work each guarded backend
-- gets on top of its share of the budget, and whether the reserves of all
-- were shrunk to fit the guard's margin (NULL while the guard is not
-- engaged); and the OOM kills the kernel counted in the server's cgroup
-- (memory.events oom_kill and oom_group_kill on cgroup v2,
-- memory.oom_control oom_kill on cgroup v1; NULL where there is none);
-- and glibc_malloc.memory_wait's counts: the statements that waited for
-- memory, their time waited (ms), the statements admitted with a
-- reservation, the waits that ran out, the statements that did not
-- wait because their need is above what could ever free, and, with
-- memory_wait = 0, the statements that ran without a reservation.
DROP VIEW glibc_malloc_guard;
DROP FUNCTION glibc_malloc_guard();

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
    OUT last_action_at timestamptz,
    OUT reserve_bytes bigint,
    OUT reserve_shrunk boolean,
    OUT oom_kills bigint,
    OUT oom_group_kills bigint,
    OUT waits bigint,
    OUT wait_time double precision,
    OUT admissions bigint,
    OUT wait_timeouts bigint,
    OUT wait_skips bigint,
    OUT unreserved_runs bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'glibc_malloc_guard'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION glibc_malloc_guard() IS
'The memory guard: the headroom it keeps, the limits it lowered, the errors they caused, the reserve for small work, the kernel''s OOM kills, the waits for memory';

REVOKE ALL ON FUNCTION glibc_malloc_guard() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION glibc_malloc_guard() TO pg_read_all_stats;

CREATE VIEW glibc_malloc_guard AS
  SELECT * FROM glibc_malloc_guard();

REVOKE ALL ON glibc_malloc_guard FROM PUBLIC;
GRANT SELECT ON glibc_malloc_guard TO pg_read_all_stats;

COMMENT ON VIEW glibc_malloc_guard IS
'The memory guard: the headroom it keeps, the limits it lowered, the errors they caused, the reserve for small work, the kernel''s OOM kills, the waits for memory';

-- glibc_malloc_statements gains each query's waits for memory and time
-- waited (glibc_malloc.memory_wait).
DROP VIEW glibc_malloc_statements;
DROP FUNCTION glibc_malloc_statements();

CREATE FUNCTION glibc_malloc_statements(
    OUT userid oid,
    OUT dbid oid,
    OUT toplevel boolean,
    OUT queryid bigint,
    OUT calls bigint,
    OUT plans bigint,
    OUT min_plan_peak_bytes bigint,
    OUT max_plan_peak_bytes bigint,
    OUT mean_plan_peak_bytes double precision,
    OUT stddev_plan_peak_bytes double precision,
    OUT exec_measured bigint,
    OUT min_exec_peak_bytes bigint,
    OUT max_exec_peak_bytes bigint,
    OUT mean_exec_peak_bytes double precision,
    OUT stddev_exec_peak_bytes double precision,
    OUT heap_change_bytes bigint,
    OUT mmapped_change_bytes bigint,
    OUT heap_grew bigint,
    OUT max_heap_growth_bytes bigint,
    OUT oom_errors bigint,
    OUT limit_oom_errors bigint,
    OUT waits bigint,
    OUT wait_time double precision)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'glibc_malloc_statements'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

COMMENT ON FUNCTION glibc_malloc_statements() IS
'Memory per query: executor and planner peaks, heap change, out-of-memory errors, waits for memory';

CREATE VIEW glibc_malloc_statements AS
  SELECT * FROM glibc_malloc_statements();

GRANT SELECT ON glibc_malloc_statements TO PUBLIC;

COMMENT ON VIEW glibc_malloc_statements IS
'Memory per query: executor and planner peaks, heap change, out-of-memory errors, waits for memory';


-- glibc_malloc_monitor gains the commit limit's headroom, CommitLimit -
-- Committed_AS from /proc/meminfo: what malloc may still map under
-- vm.overcommit_memory = 2.
DROP VIEW glibc_malloc_monitor;
DROP FUNCTION glibc_malloc_monitor();

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
    OUT checked_at timestamptz,
    OUT commit_headroom_bytes bigint)
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
