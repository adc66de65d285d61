-- Effect, not bookkeeping: each raw knob changes what glibc does, measured
-- with mallinfo around real allocations (glibc_malloc_diag_alloc).
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS glibc_malloc;
RESET client_min_messages;
LOAD 'glibc_malloc';
SET glibc_malloc.top_pad = 0;

-- mmap_threshold: 512 kB blocks are mmapped below the threshold, heap above.
SET glibc_malloc.mmap_threshold = '256kB';
SELECT mmapped_chunks FROM glibc_malloc_diag_alloc(512 * 1024, 4);
SET glibc_malloc.mmap_threshold = '1MB';
SELECT mmapped_chunks FROM glibc_malloc_diag_alloc(512 * 1024, 4);
-- ...and SET LOCAL rolled back takes the effect back too.
BEGIN;
SET LOCAL glibc_malloc.mmap_threshold = '128kB';
SELECT mmapped_chunks FROM glibc_malloc_diag_alloc(512 * 1024, 4);
ROLLBACK;
SELECT mmapped_chunks FROM glibc_malloc_diag_alloc(512 * 1024, 4);

-- trim_threshold: with it high, freed heap stays; with it low, free() gives
-- it back to the OS.
SET glibc_malloc.trim_threshold = '64MB';
SELECT glibc_malloc_trim() >= 0 AS flushed;
SELECT heap_growth >= 2000000 AS grew, heap_kept_after_free = heap_growth AS kept_all
FROM glibc_malloc_diag_alloc(100 * 1024, 20);
SET glibc_malloc.trim_threshold = '128kB';
SELECT glibc_malloc_trim() >= 0 AS flushed;
SELECT heap_growth >= 2000000 AS grew, heap_kept_after_free < 256 * 1024 AS returned
FROM glibc_malloc_diag_alloc(100 * 1024, 20);

-- top_pad: each heap growth asks the kernel for this much extra, which stays
-- free at the top of the heap.  A 24 MB block is larger than any free top a
-- 16 MB pad can leave, so the heap must grow for it.
SET glibc_malloc.mmap_threshold = '32MB';
SET glibc_malloc.top_pad = '16MB';
SELECT top_free_after_alloc >= 16 * 1024 * 1024 AS padded FROM glibc_malloc_diag_alloc(24 * 1024 * 1024, 1);
SET glibc_malloc.top_pad = 0;
SELECT glibc_malloc_trim() >= 0 AS flushed;
SELECT top_free_after_alloc < 1024 * 1024 AS unpadded FROM glibc_malloc_diag_alloc(24 * 1024 * 1024, 1);
RESET glibc_malloc.trim_threshold;

-- mmap_max: 0 forbids mmap, so blocks above the threshold come from the heap.
SET glibc_malloc.mmap_threshold = '128kB';
SET glibc_malloc.mmap_max = 0;
SELECT mmapped_chunks FROM glibc_malloc_diag_alloc(512 * 1024, 4);
RESET glibc_malloc.mmap_max;
SELECT mmapped_chunks FROM glibc_malloc_diag_alloc(512 * 1024, 4);

-- mxfast: 0 disables fastbins, so small frees leave no fastbin bytes.
-- Where glibc has dropped fastbins, the report says mxfast has no effect.
SET glibc_malloc.mxfast = 0;
SELECT fastbin_bytes_after_free FROM glibc_malloc_diag_alloc(24, 200);
-- Back on at glibc's default, DEFAULT_MXFAST = 64 * SIZE_SZ / 4 in
-- malloc/malloc.c: 128 on 64-bit, 64 on 32-bit (where 128 is past
-- MAX_FAST_SIZE, 80); the word size is PostgreSQL's (type internal is a
-- pointer).
SELECT 64 * typlen / 4 AS default_fast FROM pg_type WHERE typname = 'internal' \gset
SET glibc_malloc.mxfast = :default_fast;
SELECT CASE WHEN detail LIKE 'no effect: glibc % has no fastbins' THEN d.fastbin_bytes_after_free = 0
            ELSE d.fastbin_bytes_after_free > 0 END AS fastbins_as_reported
FROM glibc_malloc_settings() s, glibc_malloc_diag_alloc(24, 200) d WHERE s.name = 'mxfast';
RESET glibc_malloc.mxfast;

-- Without perturb, fresh memory holds whatever was there: not shown.
SELECT first_byte FROM glibc_malloc_diag_alloc(4096, 1);
-- perturb: fresh memory is filled with the complement of the perturb byte.
SET glibc_malloc.perturb = 170;
SELECT first_byte, first_byte = (170 # 255) AS perturbed FROM glibc_malloc_diag_alloc(4096, 1);
RESET glibc_malloc.perturb;

-- The presets move the real thresholds: greedy keeps 2 MB blocks on the
-- heap, frugal mmaps them.
RESET glibc_malloc.mmap_threshold;
RESET glibc_malloc.top_pad;
SET glibc_malloc.preset = greedy;
SELECT mmapped_chunks FROM glibc_malloc_diag_alloc(2 * 1024 * 1024, 2);
SET glibc_malloc.preset = frugal;
SELECT mmapped_chunks FROM glibc_malloc_diag_alloc(2 * 1024 * 1024, 2);
