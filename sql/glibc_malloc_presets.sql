-- How presets resolve, seen through glibc_malloc_settings().
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS glibc_malloc;
RESET client_min_messages;
LOAD 'glibc_malloc';

CREATE FUNCTION thresholds() RETURNS TABLE (name text, value bigint, source text, applied boolean)
LANGUAGE sql AS $$
  SELECT name, value, source, applied FROM glibc_malloc_settings()
  WHERE name IN ('trim_threshold', 'mmap_threshold', 'top_pad')
$$;

-- Nothing set yet in this backend: glibc keeps its dynamic thresholds.
SELECT * FROM glibc_malloc_settings() WHERE name = 'dynamic_thresholds';
SELECT * FROM thresholds();

-- greedy: mmap = min(work_mem + 4 kB, max_trim / 2), trim = min(2 * mmap, max_trim)
SET work_mem = '4MB';
SET glibc_malloc.preset = greedy;
SELECT * FROM thresholds();

-- A SET work_mem takes effect before the next query.
SET work_mem = '32MB';
SELECT * FROM thresholds();

-- max_trim_threshold caps what greedy keeps.
SET glibc_malloc.max_trim_threshold = '16MB';
SELECT * FROM thresholds();
-- (Raising it past 64 MB: glibc_malloc_limits.)
RESET glibc_malloc.max_trim_threshold;

-- An explicit knob beats the preset.
SET glibc_malloc.trim_threshold = '1MB';
SELECT * FROM thresholds();
RESET glibc_malloc.trim_threshold;

-- frugal: glibc's static thresholds and a small top pad.
SET glibc_malloc.preset = frugal;
SELECT * FROM thresholds();

-- balanced: greedy's thresholds, plus the idle release after 1 s.
SET glibc_malloc.preset = balanced;
SELECT * FROM thresholds();
SELECT name, value, unit, source FROM glibc_malloc_settings() WHERE name = 'idle_release_delay';
-- balanced follows work_mem before the next query, as greedy does.
SET work_mem = '8MB';
SELECT * FROM thresholds();
RESET work_mem;
SELECT * FROM thresholds();
SET glibc_malloc.idle_release_delay = '250ms';
SELECT name, value, unit, source FROM glibc_malloc_settings() WHERE name = 'idle_release_delay';
SET glibc_malloc.idle_release_delay = 0;
SELECT name, value, unit, source, detail FROM glibc_malloc_settings() WHERE name = 'idle_release_delay';
RESET glibc_malloc.idle_release_delay;
-- Other presets do not release when idle, unless asked to.
SET glibc_malloc.preset = greedy;
SELECT name, value, source FROM glibc_malloc_settings() WHERE name = 'idle_release_delay';
SET glibc_malloc.idle_release_delay = '5s';
SELECT name, value, source FROM glibc_malloc_settings() WHERE name = 'idle_release_delay';
RESET glibc_malloc.idle_release_delay;

-- Back to default: glibc's static defaults are restored, and dynamic mode
-- stays off for the life of this backend.
RESET glibc_malloc.preset;
SELECT * FROM thresholds();
SELECT * FROM glibc_malloc_settings() WHERE name = 'dynamic_thresholds';

-- Parameters no preset touches.  Two of glibc's defaults depend on the word
-- size (malloc/malloc.c): mxfast is DEFAULT_MXFAST, 64 * SIZE_SZ / 4 (128 on
-- 64-bit, 64 on 32-bit), arena_test NARENAS_FROM_NCORES (1), 8 or 2 as
-- sizeof (long) is 8 or 4.  The word size is PostgreSQL's (type internal is
-- a pointer); where the module reports what the formula gives, the output
-- names the formula, so it is the same on both word sizes.
SELECT typlen AS word FROM pg_type WHERE typname = 'internal' \gset
SELECT name,
       CASE WHEN name = 'mxfast' AND value = 64 * :word / 4 THEN 'DEFAULT_MXFAST'
            WHEN name = 'arena_test' AND value = CASE :word WHEN 4 THEN 2 ELSE 8 END
              THEN 'NARENAS_FROM_NCORES (1)'
            ELSE value::text END AS value,
       unit, source, applied
FROM glibc_malloc_settings()
WHERE name IN ('mmap_max', 'mxfast', 'perturb', 'arena_max', 'arena_test') ORDER BY name;
