-- The prefix is reserved: a misspelt name is an error, not a placeholder.
-- PostgreSQL reserves prefixes from 15 on; before, a misspelt name becomes a
-- placeholder (expected/glibc_malloc_prefix_1.out).
LOAD 'glibc_malloc';
SET glibc_malloc.trim_treshold = '1MB';
SELECT current_setting('glibc_malloc.trim_treshold', true) AS misspelt;
