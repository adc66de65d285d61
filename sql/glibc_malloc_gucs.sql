-- Every glibc_malloc GUC: definitions, valid and invalid values, units,
-- SET / RESET / SET LOCAL with ROLLBACK.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS glibc_malloc;
RESET client_min_messages;
LOAD 'glibc_malloc';

-- mxfast's range ends at glibc's MAX_FAST_SIZE, 80 * SIZE_SZ / 4 with
-- SIZE_SZ = sizeof(size_t) (malloc/malloc.c): 160 on 64-bit, 80 on 32-bit.
-- The word size comes from PostgreSQL, not from the module (type internal
-- is a pointer); where the module agrees, the output names the formula, so
-- it is the same on both word sizes and any other value shows as a number.
SELECT typlen AS word FROM pg_type WHERE typname = 'internal' \gset
SELECT 80 * :word / 4 AS max_fast \gset

-- What pg_settings shows: names, units, contexts, ranges and defaults.
SELECT name, setting, unit, context, vartype, min_val,
       CASE WHEN name = 'glibc_malloc.mxfast' AND max_val = :'max_fast' THEN 'MAX_FAST_SIZE'
            ELSE max_val END AS max_val, boot_val
FROM pg_settings WHERE name LIKE 'glibc_malloc.%' ORDER BY name;
SELECT enumvals FROM pg_settings WHERE name = 'glibc_malloc.preset';
-- memory_guard: 1.6's boolean spellings are accepted but not listed.
SELECT enumvals FROM pg_settings WHERE name = 'glibc_malloc.memory_guard';

-- (The reserved prefix: glibc_malloc_prefix.)

-- preset
SET glibc_malloc.preset = greedy;
SHOW glibc_malloc.preset;
SET glibc_malloc.preset = 'FRUGAL';
SHOW glibc_malloc.preset;
SET glibc_malloc.preset = balanced_typo;
SHOW glibc_malloc.preset;
RESET glibc_malloc.preset;
SHOW glibc_malloc.preset;

-- Size knobs take units as work_mem does; bare numbers are kB.
SET glibc_malloc.trim_threshold = '64MB';
SHOW glibc_malloc.trim_threshold;
SET glibc_malloc.trim_threshold = 2048;
SHOW glibc_malloc.trim_threshold;
SET glibc_malloc.trim_threshold = -2;
SET glibc_malloc.trim_threshold = '3GB';
SET glibc_malloc.trim_threshold = 'lots';
SHOW glibc_malloc.trim_threshold;
RESET glibc_malloc.trim_threshold;
SHOW glibc_malloc.trim_threshold;

SET glibc_malloc.mmap_threshold = '32MB';
SHOW glibc_malloc.mmap_threshold;
SET glibc_malloc.mmap_threshold = '-5kB';
SHOW glibc_malloc.mmap_threshold;
RESET glibc_malloc.mmap_threshold;

SET glibc_malloc.top_pad = '16MB';
SHOW glibc_malloc.top_pad;
SET glibc_malloc.top_pad = -3;
RESET glibc_malloc.top_pad;

SET glibc_malloc.max_trim_threshold = '128MB';
SHOW glibc_malloc.max_trim_threshold;
SET glibc_malloc.max_trim_threshold = '100kB';
SHOW glibc_malloc.max_trim_threshold;
RESET glibc_malloc.max_trim_threshold;

-- Counts and bytes.
SET glibc_malloc.mmap_max = 0;
SHOW glibc_malloc.mmap_max;
SET glibc_malloc.mmap_max = -7;
RESET glibc_malloc.mmap_max;

-- mxfast takes MAX_FAST_SIZE and refuses one byte more, which glibc would
-- refuse too; the error names the formula where its numbers are glibc's.
SET glibc_malloc.mxfast = :max_fast;
SELECT current_setting('glibc_malloc.mxfast') = :'max_fast' || 'B' AS at_max_fast;
CREATE FUNCTION mxfast_past_max(max_fast int) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('glibc_malloc.mxfast', (max_fast + 1)::text, false);
  RETURN 'accepted';
EXCEPTION WHEN invalid_parameter_value THEN
  RETURN regexp_replace(regexp_replace(SQLERRM, '^' || (max_fast + 1) || ' ', 'MAX_FAST_SIZE + 1 '),
                        '\m' || max_fast || '\M', 'MAX_FAST_SIZE', 'g');
END $$;
SELECT mxfast_past_max(:max_fast) AS error;
SELECT current_setting('glibc_malloc.mxfast') = :'max_fast' || 'B' AS still_at_max_fast;
DROP FUNCTION mxfast_past_max(int);
RESET glibc_malloc.mxfast;

SET glibc_malloc.perturb = 170;
SHOW glibc_malloc.perturb;
SET glibc_malloc.perturb = 256;
SET glibc_malloc.perturb = -2;
RESET glibc_malloc.perturb;

-- idle_release_delay: milliseconds, with units; -1 = the preset decides.
SET glibc_malloc.idle_release_delay = '2s';
SHOW glibc_malloc.idle_release_delay;
SET glibc_malloc.idle_release_delay = 250;
SHOW glibc_malloc.idle_release_delay;
SET glibc_malloc.idle_release_delay = -2;
SET glibc_malloc.idle_release_delay = '1 fortnight';
SHOW glibc_malloc.idle_release_delay;
RESET glibc_malloc.idle_release_delay;

-- The arena knobs are read once by glibc: postmaster start only.
SET glibc_malloc.arena_max = 2;
SET glibc_malloc.arena_test = 1;

-- SET LOCAL is undone by ROLLBACK, and the applied value with it.
BEGIN;
SET LOCAL glibc_malloc.mmap_threshold = '1MB';
SHOW glibc_malloc.mmap_threshold;
SELECT value, source, applied FROM glibc_malloc_settings() WHERE name = 'mmap_threshold';
ROLLBACK;
SHOW glibc_malloc.mmap_threshold;
SELECT value, source FROM glibc_malloc_settings() WHERE name = 'mmap_threshold';

-- A failed SET leaves the old value in force.
SET glibc_malloc.top_pad = '1MB';
SET glibc_malloc.top_pad = 'nonsense';
SELECT value, source, applied FROM glibc_malloc_settings() WHERE name = 'top_pad';
RESET glibc_malloc.top_pad;

-- SET inside a transaction that commits stays.
BEGIN;
SET glibc_malloc.preset = frugal;
COMMIT;
SHOW glibc_malloc.preset;
RESET ALL;
SHOW glibc_malloc.preset;

-- max_backend_memory: -1 (no cap) or at least 1MB; a refused value
-- changes nothing.
SET glibc_malloc.max_backend_memory = '64MB';
SET glibc_malloc.max_backend_memory = 0;
SET glibc_malloc.max_backend_memory = '512kB';
SET glibc_malloc.max_backend_memory = '-2';
SHOW glibc_malloc.max_backend_memory;
RESET glibc_malloc.max_backend_memory;
SHOW glibc_malloc.max_backend_memory;
