/* glibc_malloc--1.0.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION glibc_malloc" to load this file. \quit

-- All functions describe or change the calling backend's malloc, so none may
-- run in a parallel worker (it would report the worker's heap instead).

CREATE FUNCTION glibc_malloc_settings(
    OUT name text,
    OUT value bigint,
    OUT unit text,
    OUT source text,
    OUT applied boolean,
    OUT detail text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'glibc_malloc_settings'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION glibc_malloc_settings() IS
'Effective glibc malloc parameters of this backend, with their source';

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
    OUT idle_released_bytes bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'glibc_malloc_stats'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION glibc_malloc_stats() IS
'glibc mallinfo2 counters and RssAnon of this backend';

CREATE FUNCTION glibc_malloc_info()
RETURNS text
AS 'MODULE_PATHNAME', 'glibc_malloc_info'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION glibc_malloc_info() IS
'glibc malloc_info() XML of this backend';

CREATE FUNCTION glibc_malloc_trim(pad bigint DEFAULT 0)
RETURNS bigint
AS 'MODULE_PATHNAME', 'glibc_malloc_trim'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION glibc_malloc_trim(bigint) IS
'Return free heap memory of this backend to the OS; returns the RssAnon bytes released';

-- Diagnostic: allocates up to 1 GB, so only superusers may call it unless
-- granted.
CREATE FUNCTION glibc_malloc_diag_alloc(
    chunk_size bigint,
    chunks integer DEFAULT 1,
    OUT mmapped_chunks integer,
    OUT heap_growth bigint,
    OUT top_free_after_alloc bigint,
    OUT heap_kept_after_free bigint,
    OUT fastbin_bytes_after_free bigint,
    OUT first_byte integer)
RETURNS record
AS 'MODULE_PATHNAME', 'glibc_malloc_diag_alloc'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION glibc_malloc_diag_alloc(bigint, integer) IS
'Diagnostic: allocate, touch and free blocks, and report what glibc did';

REVOKE ALL ON FUNCTION glibc_malloc_diag_alloc(bigint, integer) FROM PUBLIC;
