/* glibc_malloc--1.7--1.8.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION UPDATE
\echo Use "ALTER EXTENSION glibc_malloc UPDATE TO '1.8'" to load this file. \quit

-- glibc_malloc_guard gains three counts of the engaged guard's shares of
-- its budget: the statements that took a start share as they began (their
-- need not known), the times a running statement near its limit asked the
-- budget for more, and the times it got some (and paused for the
-- monitor's look that raised its limit).  As 1.7 did, a function with a
-- new name over the same C entry point (which fills as many columns as the
-- caller's row type has), and CREATE OR REPLACE VIEW, which accepts
-- columns added at the end: the view stays the same object, and views of
-- the user's over it and the GRANTs on it are kept.  glibc_malloc_guard_1_7()
-- stays, with 1.7's columns; glibc_malloc_guard_1_8() gets the privileges
-- the user's database gave it (at the end of this script).
CREATE FUNCTION glibc_malloc_guard_1_8(
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
    OUT reservations_returned bigint,
    OUT start_shares bigint,
    OUT executor_asks bigint,
    OUT executor_shares bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'glibc_malloc_guard'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION glibc_malloc_guard_1_8() IS
'The memory guard: its mode, the headroom it keeps, the limits it lowered (or would, under observe), the errors they caused, the reserve for small work, the kernel''s OOM kills, the waits for memory, the shares of its budget';

REVOKE ALL ON FUNCTION glibc_malloc_guard_1_8() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION glibc_malloc_guard_1_8() TO pg_read_all_stats;

CREATE OR REPLACE VIEW glibc_malloc_guard AS
  SELECT * FROM glibc_malloc_guard_1_8();

COMMENT ON VIEW glibc_malloc_guard IS
'The memory guard: its mode, the headroom it keeps, the limits it lowered (or would, under observe), the errors they caused, the reserve for small work, the kernel''s OOM kills, the waits for memory, the shares of its budget';

COMMENT ON FUNCTION glibc_malloc_guard_1_7() IS
'The memory guard, with the columns of 1.7 (the view glibc_malloc_guard reads glibc_malloc_guard_1_8())';

-- The privileges of the user's database: a role granted EXECUTE on the
-- 1.7 function gets it on the 1.8 one, and a grant revoked from the 1.7
-- function is revoked from the 1.8 one (as the 1.6 to 1.7 update does).
DO $$
DECLARE
    f record;
    d record;
BEGIN
    FOR f IN
        SELECT p_old.oid AS old_oid, p_new.oid AS new_oid, p_new.proowner AS owner
        FROM (VALUES ('glibc_malloc_guard_1_7()'::regprocedure, 'glibc_malloc_guard_1_8()'::regprocedure)) AS v(old, new)
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
