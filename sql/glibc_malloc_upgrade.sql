-- The upgrade path: 1.0 then ALTER EXTENSION UPDATE gives exactly the
-- objects of a fresh install.
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS glibc_malloc;
RESET client_min_messages;

CREATE TEMP TABLE objects (install text, object text, definition text);
CREATE FUNCTION pg_temp.record_objects(label text) RETURNS void LANGUAGE sql AS $$
  INSERT INTO objects
  SELECT label, pg_describe_object(classid, objid, 0),
         coalesce((SELECT pg_get_function_identity_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) || ' ' || p.provolatile::text || p.proparallel::text || ' ' || (SELECT lanname FROM pg_language l WHERE l.oid = p.prolang)
                   FROM pg_proc p WHERE p.oid = d.objid AND d.classid = 'pg_proc'::regclass), '') ||
         coalesce((SELECT pg_get_viewdef(d.objid) FROM pg_class c WHERE c.oid = d.objid AND d.classid = 'pg_class'::regclass AND c.relkind = 'v'), '')
  FROM pg_depend d
  WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
    AND classid <> 'pg_type'::regclass   -- PG 18 also lists views' row types
    AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'glibc_malloc')
$$;

CREATE EXTENSION glibc_malloc VERSION '1.0';
SELECT extversion FROM pg_extension WHERE extname = 'glibc_malloc';
SELECT pg_temp.record_objects('1.0');
SELECT object FROM objects WHERE install = '1.0' ORDER BY 1;

ALTER EXTENSION glibc_malloc UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'glibc_malloc';
SELECT pg_temp.record_objects('updated');
DROP EXTENSION glibc_malloc;
CREATE EXTENSION glibc_malloc;
SELECT pg_temp.record_objects('fresh');

-- What 1.1 added, and no difference between the two ways to get there.
SELECT object FROM objects WHERE install = 'updated'
EXCEPT SELECT object FROM objects WHERE install = '1.0' ORDER BY 1;
(SELECT object, definition FROM objects WHERE install = 'updated'
 EXCEPT SELECT object, definition FROM objects WHERE install = 'fresh')
UNION ALL
(SELECT object, definition FROM objects WHERE install = 'fresh'
 EXCEPT SELECT object, definition FROM objects WHERE install = 'updated');
SELECT pg_get_viewdef('glibc_malloc_summary'::regclass) IS NOT NULL AS usable;

-- 1.1 to 1.2: glibc_malloc_trim_idle is a C function that filters first.
DROP EXTENSION glibc_malloc;
CREATE EXTENSION glibc_malloc VERSION '1.1';
SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE p.proname = 'glibc_malloc_trim_idle';
ALTER EXTENSION glibc_malloc UPDATE TO '1.2';
SELECT l.lanname, pg_get_function_arguments(p.oid) FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE p.proname = 'glibc_malloc_trim_idle';
SELECT glibc_malloc_trim_idle(-1);

-- 1.2 to 1.3: idle releases and remote trims counted apart.  A database
-- still on 1.2 calls the old C entry points of the new library, which count
-- both together; after the update the same process's counters show apart.
DROP EXTENSION glibc_malloc;
CREATE EXTENSION glibc_malloc VERSION '1.2';
SELECT glibc_malloc_trim_backend(pg_backend_pid());
SELECT idle_releases, idle_released_bytes >= 0 AS bytes FROM glibc_malloc_stats();
SELECT idle_releases FROM glibc_malloc_backends WHERE pid = pg_backend_pid();
SELECT count(*) FROM pg_attribute WHERE attrelid = 'glibc_malloc_backends'::regclass AND attname LIKE 'remote%';
ALTER EXTENSION glibc_malloc UPDATE TO '1.3';
SELECT idle_releases, remote_trims, remote_trimmed_bytes >= 0 AS bytes FROM glibc_malloc_stats();
SELECT idle_releases, remote_trims FROM glibc_malloc_backends WHERE pid = pg_backend_pid();
SELECT backends >= 1 AS ok, remote_trimmed_bytes >= 0 AS remote FROM glibc_malloc_summary;

-- 1.3 to 1.4: the memory monitor's view.
DROP EXTENSION glibc_malloc;
CREATE EXTENSION glibc_malloc VERSION '1.3';
SELECT count(*) FROM pg_class WHERE relname = 'glibc_malloc_monitor';
ALTER EXTENSION glibc_malloc UPDATE TO '1.4';
SELECT enabled, source IS NOT NULL AS reads, fraction FROM glibc_malloc_monitor;

-- 1.4 to 1.5: the memory guard's views.
DROP EXTENSION glibc_malloc;
CREATE EXTENSION glibc_malloc VERSION '1.4';
SELECT count(*) FROM pg_class WHERE relname IN ('glibc_malloc_guard', 'glibc_malloc_processes');
ALTER EXTENSION glibc_malloc UPDATE TO '1.5';
SELECT enabled IS NOT NULL AS reads, guard_errors >= 0 AS counts FROM glibc_malloc_guard;
SELECT backend_type, vmdata_bytes > 0 AS vmdata FROM glibc_malloc_processes WHERE pid = pg_backend_pid();

-- 1.5 to 1.6: memory per query.  Statements run before the update are in
-- the view once it exists (the hash lives in the library).
DROP EXTENSION glibc_malloc;
CREATE EXTENSION glibc_malloc VERSION '1.5';
SELECT count(*) FROM pg_class WHERE relname LIKE 'glibc_malloc_statements%';
SET glibc_malloc.track_statements = top;
SELECT 'before the update' AS marker;
ALTER EXTENSION glibc_malloc UPDATE TO '1.6';
-- (PostgreSQL 13 without pg_stat_statements: counted as without a queryid)
SELECT entries + no_queryid >= 1 AS counted FROM glibc_malloc_statements_info;
SELECT has_function_privilege('public', 'glibc_malloc_statements_reset(oid,oid,bigint)', 'execute') AS public_may_reset,
       has_table_privilege('public', 'glibc_malloc_statements', 'select') AS public_may_read;

-- 1.6 to 1.7: counters kept across process exits.  A trim done before
-- the update is in them (the counts live in shared memory).
DROP EXTENSION glibc_malloc;
CREATE EXTENSION glibc_malloc VERSION '1.6';
SELECT count(*) FROM pg_class WHERE relname = 'glibc_malloc_counters';
SELECT glibc_malloc_trim_backend(pg_backend_pid());
-- The 1.6 definitions (statements 21, guard 13, monitor 18 columns)
-- still read with this library until the update.
SELECT count(*) >= 0 AS reads FROM glibc_malloc_statements;
SELECT enabled, source IS NOT NULL AS reads FROM glibc_malloc_monitor;
SELECT enabled IS NOT NULL AS reads, guard_errors >= 0 AS counts FROM glibc_malloc_guard;
-- A user's objects over the three views 1.7 extends: a view over each, and
-- a role allowed to read each (with EXECUTE on the function behind it:
-- a view's reader needs it).  The statements function is taken from
-- PUBLIC, as a user may do.
CREATE ROLE regress_glibc_malloc_reader;
CREATE VIEW my_guard AS SELECT enabled, guard_errors FROM glibc_malloc_guard;
CREATE VIEW my_monitor AS SELECT pid, limit_bytes FROM glibc_malloc_monitor;
CREATE VIEW my_statements AS SELECT queryid, calls FROM glibc_malloc_statements;
GRANT SELECT ON glibc_malloc_guard, glibc_malloc_monitor, glibc_malloc_statements TO regress_glibc_malloc_reader;
GRANT EXECUTE ON FUNCTION glibc_malloc_guard(), glibc_malloc_monitor() TO regress_glibc_malloc_reader;
REVOKE EXECUTE ON FUNCTION glibc_malloc_statements() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION glibc_malloc_statements() TO regress_glibc_malloc_reader WITH GRANT OPTION;
-- A function a role could create in the extension's schema, a better
-- match than pg_catalog's for the script's calls: it is not called.
CREATE FUNCTION public.quote_ident(name) RETURNS text LANGUAGE plpgsql
  AS $$BEGIN RAISE EXCEPTION 'public.quote_ident called'; END$$;
CREATE FUNCTION public.format(text, regprocedure, text, text, text) RETURNS text LANGUAGE plpgsql
  AS $$BEGIN RAISE EXCEPTION 'public.format called'; END$$;
CREATE FUNCTION public.oid_eq_int(oid, integer) RETURNS boolean LANGUAGE plpgsql
  AS $$BEGIN RAISE EXCEPTION 'public.= (oid, integer) called'; END$$;
CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = integer, FUNCTION = public.oid_eq_int);
CREATE FUNCTION public.oid_eq_regprocedure(oid, regprocedure) RETURNS boolean LANGUAGE plpgsql
  AS $$BEGIN RAISE EXCEPTION 'public.= (oid, regprocedure) called'; END$$;
CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = regprocedure, FUNCTION = public.oid_eq_regprocedure);
ALTER EXTENSION glibc_malloc UPDATE TO '1.7';
DROP OPERATOR public.= (oid, integer), public.= (oid, regprocedure);
DROP FUNCTION public.quote_ident(name), public.format(text, regprocedure, text, text, text),
  public.oid_eq_int(oid, integer), public.oid_eq_regprocedure(oid, regprocedure);
SELECT extversion FROM pg_extension WHERE extname = 'glibc_malloc';
SELECT remote_trims >= 1 AS counted, idle_releases >= 0 AS idle, oom_errors >= 0 AS oom,
       counters_since <= now() AS since FROM glibc_malloc_counters;
-- Server-wide, as glibc_malloc_guard: pg_read_all_stats, not PUBLIC.
SELECT has_table_privilege('public', 'glibc_malloc_counters', 'select') AS public_may_read,
       has_function_privilege('public', 'glibc_malloc_counters()', 'execute') AS public_may_call,
       has_table_privilege('pg_read_all_stats', 'glibc_malloc_counters', 'select') AS stats_may_read;
-- glibc_malloc_guard gains the reserve for small work (NULL while the
-- guard is not engaged) and the kernel's OOM kills in the server's cgroup
-- (a count, or NULL where there is none).
SELECT reserve_bytes, reserve_shrunk FROM glibc_malloc_guard;
SELECT oom_kills IS NULL OR oom_kills >= 0 AS oom_kills,
       oom_group_kills IS NULL OR oom_group_kills >= 0 AS oom_group_kills
FROM glibc_malloc_guard;
-- glibc_malloc_monitor gains the commit limit's headroom (from
-- /proc/meminfo: shown once the monitor has looked; it may be negative).
SELECT count(*) FROM pg_attribute WHERE attrelid = 'glibc_malloc_monitor'::regclass AND attnum > 0;
SELECT commit_headroom_bytes IS NOT NULL AS shown FROM glibc_malloc_monitor WHERE checked_at IS NOT NULL;
SELECT has_table_privilege('public', 'glibc_malloc_monitor', 'select') AS public_may_read;
-- glibc_malloc.memory_wait: glibc_malloc_guard counts the waits for memory,
-- glibc_malloc_statements each query's.
SELECT waits >= 0 AS waits, wait_time >= 0 AS wait_time, admissions >= 0 AS admissions,
       wait_timeouts >= 0 AS timeouts, wait_skips >= 0 AS skips,
       unreserved_runs >= 0 AS unreserved FROM glibc_malloc_guard;
SELECT count(*) >= 0 AS reads FROM glibc_malloc_statements WHERE waits >= 0 AND wait_time >= 0;
SELECT has_table_privilege('public', 'glibc_malloc_statements', 'select') AS public_may_read;

-- The user's objects survived the update: the views over the views still
-- read, the views are the same objects with their grants, and the role
-- may call the functions they now read (its grants on the 1.6 functions
-- carried over, PUBLIC's revoke too).
SELECT enabled IS NOT NULL AS reads, guard_errors >= 0 AS counts FROM my_guard;
SELECT count(*) AS monitor_rows FROM my_monitor;
SELECT count(*) >= 0 AS reads FROM my_statements;
SELECT v AS view, has_table_privilege('regress_glibc_malloc_reader', v, 'select') AS reader_may_read
FROM unnest(ARRAY['glibc_malloc_guard', 'glibc_malloc_monitor', 'glibc_malloc_statements']) v;
SELECT f AS function,
       has_function_privilege('regress_glibc_malloc_reader', f, 'execute') AS reader,
       has_function_privilege('regress_glibc_malloc_reader', f, 'execute WITH GRANT OPTION') AS reader_may_grant,
       has_function_privilege('public', f, 'execute') AS public,
       has_function_privilege('pg_read_all_stats', f, 'execute') AS stats
FROM unnest(ARRAY['glibc_malloc_guard()', 'glibc_malloc_guard_1_7()',
                  'glibc_malloc_monitor()', 'glibc_malloc_monitor_1_7()',
                  'glibc_malloc_statements()', 'glibc_malloc_statements_1_7()']) f;
SET ROLE regress_glibc_malloc_reader;
SELECT count(*) AS guard_rows FROM glibc_malloc_guard;
SELECT count(*) AS monitor_rows FROM glibc_malloc_monitor;
SELECT count(*) >= 0 AS reads FROM glibc_malloc_statements;
RESET ROLE;
-- The columns 1.7 appended to each view, after 1.6's.
SELECT attrelid::regclass AS view, attnum, attname, atttypid::regtype AS type
FROM pg_attribute
WHERE (attrelid = 'glibc_malloc_guard'::regclass AND attnum > 13)
   OR (attrelid = 'glibc_malloc_monitor'::regclass AND attnum > 18)
   OR (attrelid = 'glibc_malloc_statements'::regclass AND attnum > 21)
ORDER BY attrelid::regclass::text, attnum;
-- The 1.6 functions stay, with 1.6's columns, for what may call them.
SELECT guard_errors >= 0 AS counts FROM glibc_malloc_guard();
SELECT count(*) AS monitor_rows FROM glibc_malloc_monitor();
SELECT count(*) >= 0 AS reads FROM glibc_malloc_statements();
DROP VIEW my_guard, my_monitor, my_statements;
DROP OWNED BY regress_glibc_malloc_reader;
DROP ROLE regress_glibc_malloc_reader;

-- 1.7 to 1.8: glibc_malloc_guard gains the counts of the guard's shares
-- of its budget.  A user's view over it and a role allowed to read it
-- (EXECUTE on the 1.7 function, granted on to others) survive the update,
-- and so does a revoke (pg_read_all_stats's EXECUTE, taken away).
DROP EXTENSION glibc_malloc;
CREATE EXTENSION glibc_malloc VERSION '1.7';
SELECT count(*) AS guard_columns FROM pg_attribute WHERE attrelid = 'glibc_malloc_guard'::regclass AND attnum > 0;
CREATE ROLE regress_glibc_malloc_reader;
CREATE VIEW my_guard AS SELECT enabled, guard_errors, reservations_returned FROM glibc_malloc_guard;
GRANT SELECT ON glibc_malloc_guard TO regress_glibc_malloc_reader;
GRANT EXECUTE ON FUNCTION glibc_malloc_guard_1_7() TO regress_glibc_malloc_reader WITH GRANT OPTION;
REVOKE EXECUTE ON FUNCTION glibc_malloc_guard_1_7() FROM pg_read_all_stats;
ALTER EXTENSION glibc_malloc UPDATE TO '1.8';
SELECT extversion FROM pg_extension WHERE extname = 'glibc_malloc';
-- The columns 1.8 appended, after 1.7's.
SELECT attnum, attname, atttypid::regtype AS type FROM pg_attribute
WHERE attrelid = 'glibc_malloc_guard'::regclass AND attnum > 27 ORDER BY attnum;
SELECT start_shares >= 0 AS start_shares, executor_asks >= 0 AS asks,
       executor_shares >= 0 AND executor_shares <= executor_asks AS shares FROM glibc_malloc_guard;
SELECT enabled IS NOT NULL AS reads, guard_errors >= 0 AS counts FROM my_guard;
SELECT f AS function,
       has_function_privilege('regress_glibc_malloc_reader', f, 'execute') AS reader,
       has_function_privilege('regress_glibc_malloc_reader', f, 'execute WITH GRANT OPTION') AS reader_may_grant,
       has_function_privilege('public', f, 'execute') AS public,
       has_function_privilege('pg_read_all_stats', f, 'execute') AS stats
FROM unnest(ARRAY['glibc_malloc_guard_1_7()', 'glibc_malloc_guard_1_8()']) f;
SET ROLE regress_glibc_malloc_reader;
SELECT count(*) AS guard_rows FROM glibc_malloc_guard;
RESET ROLE;
-- The 1.7 function stays, with 1.7's columns, for what may call it.
SELECT reservations_returned >= 0 AS counts FROM glibc_malloc_guard_1_7();
DROP VIEW my_guard;
DROP OWNED BY regress_glibc_malloc_reader;
DROP ROLE regress_glibc_malloc_reader;
