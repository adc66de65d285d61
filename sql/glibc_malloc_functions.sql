-- The shape of every function's result, and its argument checks.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS glibc_malloc;
RESET client_min_messages;
LOAD 'glibc_malloc';

-- Signatures, volatility and parallel safety: none may run in a worker.
SELECT p.proname, pg_get_function_identity_arguments(p.oid) AS args,
       pg_get_function_result(p.oid) AS result, p.provolatile, p.proparallel
FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'glibc_malloc'
ORDER BY p.proname;

-- glibc_malloc_settings: one row per parameter plus dynamic_thresholds.
SELECT name, unit FROM glibc_malloc_settings();
SELECT count(*) FILTER (WHERE source NOT IN ('setting', 'preset', 'environment', 'glibc default')) AS bad_sources
FROM glibc_malloc_settings();

-- glibc_malloc_stats: consistent counters for this backend.
SELECT allocator, glibc_version ~ '^\d+\.\d+' AS version_ok,
       system_bytes > 0 AS has_memory,
       system_bytes = heap_bytes + mmapped_bytes AS system_adds_up,
       in_use_bytes + free_bytes = system_bytes AS in_use_plus_free,
       mmapped_count >= 0 AND releasable_top_bytes <= free_bytes AS sane,
       rss_anon_bytes > 0 AS has_rss
FROM glibc_malloc_stats();

-- glibc_malloc_info: glibc's XML.
SELECT glibc_malloc_info() ~ '^<malloc version="1">' AS is_malloc_info,
       glibc_malloc_info()::xml IS DOCUMENT AS well_formed;

-- glibc_malloc_trim: bytes returned, never negative; pad is checked.
SELECT glibc_malloc_trim() >= 0 AS trimmed;
SELECT glibc_malloc_trim(1048576) >= 0 AS trimmed_with_pad;
SELECT glibc_malloc_trim(-1);
SELECT glibc_malloc_trim(NULL) IS NULL AS strict;

-- glibc_malloc_diag_alloc: bounded arguments.
SELECT glibc_malloc_diag_alloc(0);
SELECT glibc_malloc_diag_alloc(1024, 0);
SELECT glibc_malloc_diag_alloc(1024 * 1024 * 1024, 2);
SELECT mmapped_chunks >= 0 AS ran FROM glibc_malloc_diag_alloc(1024, 10);
