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

-- The views glibc_malloc_guard, glibc_malloc_statements and
-- glibc_malloc_monitor gain columns, appended after 1.6's.  A function's
-- OUT columns cannot change in place, so, as pg_stat_statements does, 1.7
-- adds functions with new names over the same C entry points (which fill
-- as many columns as the caller's row type has) and replaces each view's
-- query with CREATE OR REPLACE VIEW, which accepts columns added at the
-- end.  The views stay the same objects: views of the user's over them,
-- and the GRANTs on them, are kept.
--
-- The 1.6 functions glibc_malloc_guard(), glibc_malloc_statements() and
-- glibc_malloc_monitor() stay, with 1.6's columns: a view or function of
-- the user's may call them, and dropping them would make the update fail
-- there.  The library serves both column counts.
--
-- A role that reads a view needs EXECUTE on the function it calls: the
-- new functions get the privileges the user's database gave the old ones
-- (at the end of this script), beyond the grants and revokes below,
-- which are the same as 1.6's.

-- glibc_malloc_guard gains the reserve for small work each guarded backend
-- gets on top of its share of the budget, and whether the reserves of all
-- were shrunk to fit the guard's margin (NULL while the guard is not
-- engaged); the OOM kills the kernel counted in the server's cgroup
-- (memory.events oom_kill and oom_group_kill on cgroup v2,
-- memory.oom_control oom_kill on cgroup v1; NULL where there is none);
-- glibc_malloc.memory_wait's counts: the statements that waited for
-- memory, their time waited (ms), the statements admitted with a
-- reservation, the waits that ran out, the statements that did not wait
-- because their need is above what could ever free, and, with
-- memory_wait = 0, the statements that ran without a reservation; and
-- the guard's mode (glibc_malloc.memory_guard) with, under observe, the
-- limits it would have lowered and the processes it would have refused
-- memory.
CREATE FUNCTION glibc_malloc_guard_1_7(
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
    OUT unreserved_runs bigint,
    OUT mode text,
    OUT would_limit bigint,
    OUT would_fail bigint,
    OUT reservations_returned bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'glibc_malloc_guard'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION glibc_malloc_guard_1_7() IS
'The memory guard: its mode, the headroom it keeps, the limits it lowered (or would, under observe), the errors they caused, the reserve for small work, the kernel''s OOM kills, the waits for memory';

REVOKE ALL ON FUNCTION glibc_malloc_guard_1_7() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION glibc_malloc_guard_1_7() TO pg_read_all_stats;

CREATE OR REPLACE VIEW glibc_malloc_guard AS
  SELECT * FROM glibc_malloc_guard_1_7();

COMMENT ON VIEW glibc_malloc_guard IS
'The memory guard: its mode, the headroom it keeps, the limits it lowered (or would, under observe), the errors they caused, the reserve for small work, the kernel''s OOM kills, the waits for memory';

COMMENT ON FUNCTION glibc_malloc_guard() IS
'The memory guard, with the columns of 1.6 (the view glibc_malloc_guard reads glibc_malloc_guard_1_7())';

-- glibc_malloc_statements gains each query's waits for memory and time
-- waited (glibc_malloc.memory_wait), and its mapped peak: what its
-- process mapped at most over its start, the need the guard admits it by.
CREATE FUNCTION glibc_malloc_statements_1_7(
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
    OUT wait_time double precision,
    OUT mapped_measured bigint,
    OUT max_mapped_peak_bytes bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'glibc_malloc_statements'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

COMMENT ON FUNCTION glibc_malloc_statements_1_7() IS
'Memory per query: executor and planner peaks, heap change, out-of-memory errors, waits for memory';

CREATE OR REPLACE VIEW glibc_malloc_statements AS
  SELECT * FROM glibc_malloc_statements_1_7();

COMMENT ON VIEW glibc_malloc_statements IS
'Memory per query: executor and planner peaks, heap change, out-of-memory errors, waits for memory';

COMMENT ON FUNCTION glibc_malloc_statements() IS
'Memory per query, with the columns of 1.6 (the view glibc_malloc_statements reads glibc_malloc_statements_1_7())';

-- glibc_malloc_monitor gains the commit limit's headroom, CommitLimit -
-- Committed_AS from /proc/meminfo: what malloc may still map under
-- vm.overcommit_memory = 2.
CREATE FUNCTION glibc_malloc_monitor_1_7(
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

COMMENT ON FUNCTION glibc_malloc_monitor_1_7() IS
'The memory monitor: the limit it sees, the usage, the commit limit''s headroom, and what it last did';

REVOKE ALL ON FUNCTION glibc_malloc_monitor_1_7() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION glibc_malloc_monitor_1_7() TO pg_read_all_stats;

CREATE OR REPLACE VIEW glibc_malloc_monitor AS
  SELECT * FROM glibc_malloc_monitor_1_7();

COMMENT ON VIEW glibc_malloc_monitor IS
'The memory monitor: the limit it sees, the usage, the commit limit''s headroom, and what it last did';

COMMENT ON FUNCTION glibc_malloc_monitor() IS
'The memory monitor, with the columns of 1.6 (the view glibc_malloc_monitor reads glibc_malloc_monitor_1_7())';

-- The privileges of the user's database: a role granted EXECUTE on a 1.6
-- function (so that it may read the view over it) gets it on the 1.7
-- one, and a grant revoked from the 1.6 function is revoked from the 1.7
-- one.  In a new database the two lists are the same and nothing is done.
-- Every catalog function, table and operator is schema-qualified: the
-- script runs as a superuser with the extension's schema in search_path,
-- where a role may have created a function or an operator of the same
-- name that matches better.
DO $$
DECLARE
    f record;
    d record;
BEGIN
    FOR f IN
        SELECT p_old.oid AS old_oid, p_new.oid AS new_oid, p_new.proowner AS owner
        FROM (VALUES ('glibc_malloc_guard()'::regprocedure, 'glibc_malloc_guard_1_7()'::regprocedure),
                     ('glibc_malloc_statements()'::regprocedure, 'glibc_malloc_statements_1_7()'::regprocedure),
                     ('glibc_malloc_monitor()'::regprocedure, 'glibc_malloc_monitor_1_7()'::regprocedure)) AS v(old, new)
        JOIN pg_catalog.pg_proc p_old ON p_old.oid OPERATOR(pg_catalog.=) v.old::pg_catalog.oid
        JOIN pg_catalog.pg_proc p_new ON p_new.oid OPERATOR(pg_catalog.=) v.new::pg_catalog.oid
    LOOP
        FOR d IN
            WITH o AS (SELECT a.grantee, a.is_grantable
                       FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) a
                       WHERE p.oid OPERATOR(pg_catalog.=) f.old_oid AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE' AND a.grantee OPERATOR(pg_catalog.<>) f.owner),
                 n AS (SELECT a.grantee, a.is_grantable
                       FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) a
                       WHERE p.oid OPERATOR(pg_catalog.=) f.new_oid AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE' AND a.grantee OPERATOR(pg_catalog.<>) f.owner)
            SELECT 'GRANT' AS verb, o.grantee, o.is_grantable FROM o
            WHERE NOT EXISTS (SELECT FROM n WHERE n.grantee OPERATOR(pg_catalog.=) o.grantee AND n.is_grantable OPERATOR(pg_catalog.>=) o.is_grantable)
            UNION ALL
            SELECT 'REVOKE', n.grantee, false FROM n
            WHERE NOT EXISTS (SELECT FROM o WHERE o.grantee OPERATOR(pg_catalog.=) n.grantee)
        LOOP
            EXECUTE pg_catalog.format('%s EXECUTE ON FUNCTION %s %s %s%s',
                           d.verb, f.new_oid::regprocedure,
                           CASE WHEN d.verb OPERATOR(pg_catalog.=) 'GRANT' THEN 'TO' ELSE 'FROM' END,
                           CASE WHEN d.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid THEN 'PUBLIC' ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(d.grantee)::text) END,
                           CASE WHEN d.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
    END LOOP;
END
$$;
