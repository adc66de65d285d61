/* glibc_malloc--1.1--1.2.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION glibc_malloc UPDATE TO '1.2'" to load this file. \quit

-- 1.2: glibc_malloc_trim_idle() in C.  The SQL version of 1.1 let the
-- planner call glibc_malloc_trim_backend() inside the scan, before the
-- filters on state, pid and privileges, and it resolved its names through
-- the caller's search_path.  The C version filters first, skips what the
-- caller may not trim, and has its requests served at the idle point only.
CREATE OR REPLACE FUNCTION glibc_malloc_trim_idle(min_free_bytes bigint DEFAULT 1048576)
RETURNS integer
AS 'MODULE_PATHNAME', 'glibc_malloc_trim_idle'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION glibc_malloc_trim_idle(bigint) IS
'Ask every other idle backend the caller may trim that holds more than min_free_bytes free to return it; returns how many were asked';
