/* glibc_malloc--1.5--1.6.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION UPDATE
\echo Use "ALTER EXTENSION glibc_malloc UPDATE TO '1.6'" to load this file. \quit

-- Memory per query, keyed as pg_stat_statements is: JOIN pg_stat_statements
-- USING (userid, dbid, queryid, toplevel).  Every role sees its own rows;
-- pg_read_all_stats sees all (the function filters, the view is public).
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
    OUT limit_oom_errors bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'glibc_malloc_statements'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

COMMENT ON FUNCTION glibc_malloc_statements() IS
'Memory per query: executor and planner peaks, heap change, out-of-memory errors';

CREATE VIEW glibc_malloc_statements AS
  SELECT * FROM glibc_malloc_statements();

GRANT SELECT ON glibc_malloc_statements TO PUBLIC;

COMMENT ON VIEW glibc_malloc_statements IS
'Memory per query: executor and planner peaks, heap change, out-of-memory errors';

CREATE FUNCTION glibc_malloc_statements_info(
    OUT entries bigint,
    OUT dealloc bigint,
    OUT no_queryid bigint,
    OUT stats_reset timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'glibc_malloc_statements_info'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

COMMENT ON FUNCTION glibc_malloc_statements_info() IS
'glibc_malloc_statements: entries, evictions, statements without a queryid, the last reset';

CREATE VIEW glibc_malloc_statements_info AS
  SELECT * FROM glibc_malloc_statements_info();

GRANT SELECT ON glibc_malloc_statements_info TO PUBLIC;

COMMENT ON VIEW glibc_malloc_statements_info IS
'glibc_malloc_statements: entries, evictions, statements without a queryid, the last reset';

-- As pg_stat_statements_reset: superusers, and roles granted EXECUTE.
CREATE FUNCTION glibc_malloc_statements_reset(
    userid oid DEFAULT 0,
    dbid oid DEFAULT 0,
    queryid bigint DEFAULT 0)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'glibc_malloc_statements_reset'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

COMMENT ON FUNCTION glibc_malloc_statements_reset(oid, oid, bigint) IS
'Forget the memory recorded for the matching statements (0: any); all when called without arguments';

REVOKE ALL ON FUNCTION glibc_malloc_statements_reset(oid, oid, bigint) FROM PUBLIC;
