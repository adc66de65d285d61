-- max_trim_threshold above 64 MB lets greedy keep more than 32 MB: glibc
-- 2.35 and later accept such an mmap threshold; before, greedy stops at
-- 32 MB (expected/glibc_malloc_limits_1.out).
LOAD 'glibc_malloc';
SET glibc_malloc.preset = greedy;
SET glibc_malloc.max_trim_threshold = '1GB';
SET work_mem = '100MB';
SELECT name, value, source, applied FROM glibc_malloc_settings()
WHERE name IN ('trim_threshold', 'mmap_threshold');
