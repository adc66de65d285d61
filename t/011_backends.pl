# Every backend's malloc across the server: the glibc_malloc_backends view,
# remote trim measured from outside in /proc, visibility and privilege
# rules, and slots left clean by exiting backends.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $node = new_node('backends', "glibc_malloc.stats_interval = 0\nwork_mem = '32MB'\n");
my $big_sort = workload('big_sort');
$node->safe_psql('postgres', q{
	CREATE ROLE alice LOGIN;
	CREATE ROLE bob LOGIN;
	CREATE ROLE watcher LOGIN IN ROLE pg_read_all_stats;
});

# Three sessions: one holds memory under greedy and stays idle.
my $holder = $node->background_psql('postgres', extra_params => [ '-U', 'alice' ]);
my $hpid = $holder->query_safe("SET glibc_malloc.preset = 'greedy'; $big_sort; SELECT pg_backend_pid()");
my $other = $node->background_psql('postgres', extra_params => [ '-U', 'bob' ]);
my $opid = $other->query_safe('SELECT pg_backend_pid()');
my $admin = $node->background_psql('postgres');

my $row = $admin->query_safe("SELECT free_bytes || '|' || preset || '|' || backend_type FROM glibc_malloc_backends WHERE pid = $hpid");
my ($free, $preset, $type) = split /\|/, $row;
cmp_ok($free, '>', 10 * 2**20, 'another session sees the idle greedy backend holding more than 10 MB free');
is($preset, 'greedy', 'with its effective preset');
is($type, 'client backend', 'and its backend type');
is($admin->query_safe("SELECT count(*) FROM glibc_malloc_backends b JOIN pg_stat_activity a USING (pid) WHERE a.usename = 'alice'"),
	1, 'the view joins pg_stat_activity on pid');

# Remote trim: RssAnon, read from outside, drops within 2 s; the view shows it.
my $before = rss_anon($hpid);
is($admin->query_safe("SELECT glibc_malloc_trim_backend($hpid)"), 't', 'the trim request is delivered');
ok(wait_for(sub { rss_anon($hpid) < $before - 8 * 2**20 }, 2), 'the idle backend\'s RssAnon drops within 2 s');
note sprintf('RssAnon %.1f MB -> %.1f MB', $before / 2**20, rss_anon($hpid) / 2**20);
ok( wait_for(sub {
			$admin->query_safe("SELECT free_bytes < 1048576 AND remote_trims >= 1 AND idle_releases = 0 FROM glibc_malloc_backends WHERE pid = $hpid") eq 't';
		}, 2),
	'the view shows the trimmed backend, counted as a remote trim, not an idle release');

# A busy backend is trimmed at its next safe point: its transaction end.
$holder->query_safe("BEGIN; $big_sort; SELECT 1");
$before = rss_anon($hpid);
$admin->query_safe("SELECT glibc_malloc_trim_backend($hpid)");
sleep 1;
cmp_ok(rss_anon($hpid), '>', $before - 2**20, 'not inside its open transaction');
$holder->query_safe('COMMIT');
ok(wait_for(sub { rss_anon($hpid) < $before - 8 * 2**20 }, 2), 'but once it is over');

# Nor at the next statements of its transaction block, nor at those a
# function runs (SPI): only once the transaction is over.
$holder->query_safe("BEGIN; $big_sort; SELECT 1");
$before = rss_anon($hpid);
my $trims = $holder->query_safe('SELECT remote_trims FROM glibc_malloc_stats()');
$admin->query_safe("SELECT glibc_malloc_trim_backend($hpid)");
$holder->query_safe('SELECT 2');
$holder->query_safe(q{DO $$ BEGIN FOR i IN 1 .. 5 LOOP PERFORM count(*) FROM pg_class; END LOOP; END $$});
is($holder->query_safe('SELECT remote_trims FROM glibc_malloc_stats()'), $trims,
	'no trim at the next statements of the block, nor in a function\'s loop');
cmp_ok(rss_anon($hpid), '>', $before - 2**20, 'its RssAnon stays');
$holder->query_safe('COMMIT');
ok(wait_for(sub { rss_anon($hpid) < $before - 8 * 2**20 }, 2), 'the trim comes after COMMIT');

# A request that arrives during a transaction is served at the first
# statement of the next one, a transaction block too (busy clients that
# work in blocks would otherwise never be trimmed).
$holder->query_safe("BEGIN; $big_sort; SELECT 1");
$trims = $holder->query_safe('SELECT remote_trims FROM glibc_malloc_stats()');
$admin->query_safe("SELECT glibc_malloc_trim_backend($hpid)");
is($holder->query_safe('COMMIT; BEGIN; SELECT remote_trims FROM glibc_malloc_stats()'), $trims + 1,
	'served at the first statement of the next transaction block');
$holder->query_safe('COMMIT');

# Visibility: a role without privileges sees only its own rows.
is($other->query_safe('SELECT string_agg(DISTINCT usename, \',\') FROM glibc_malloc_backends'), 'bob',
	'an unprivileged role sees only its own backends');
my $watcher = $node->safe_psql('postgres', "SELECT count(*) FROM glibc_malloc_backends WHERE pid IN ($hpid, $opid)",
	extra_params => [ '-U', 'watcher' ]);
is($watcher, 2, 'pg_read_all_stats sees everybody');

# Privileges: bob cannot trim alice's backend, nor a superuser's.
my ($ret, $out, $err) = $node->psql('postgres', "SELECT glibc_malloc_trim_backend($hpid)", extra_params => [ '-U', 'bob' ]);
like($err, qr/permission denied to trim backend $hpid/, 'an unprivileged role cannot trim another role\'s backend');
my $apid = $admin->query_safe('SELECT pg_backend_pid()');
$node->safe_psql('postgres', 'GRANT pg_signal_backend TO bob');
($ret, $out, $err) = $node->psql('postgres', "SELECT glibc_malloc_trim_backend($apid)", extra_params => [ '-U', 'bob' ]);
like($err, qr/SUPERUSER attribute/, 'pg_signal_backend cannot trim a superuser\'s backend');
is($node->safe_psql('postgres', "SELECT glibc_malloc_trim_backend($hpid)", extra_params => [ '-U', 'bob' ]), 't',
	'pg_signal_backend can trim another role\'s backend');

# glibc_malloc_trim_idle asks the idle ones.
$holder->query_safe("$big_sort; SELECT 1");
$before = rss_anon($hpid);
cmp_ok($admin->query_safe('SELECT glibc_malloc_trim_idle(10 * 1024 * 1024)'), '>=', 1, 'trim_idle asks the idle backend');
ok(wait_for(sub { rss_anon($hpid) < $before - 8 * 2**20 }, 2), 'and it returns its memory');

# Version 1.1's glibc_malloc_trim_idle() is in SQL: it resolves names in
# pg_catalog and the extension's schema only.  A superuser whose
# search_path starts with a schema others can write does not run their
# look-alike of glibc_malloc_backends (CVE-2018-1058).
$node->safe_psql('postgres', 'CREATE DATABASE v11');
$node->safe_psql('v11', q{
	CREATE EXTENSION glibc_malloc VERSION '1.1';
	CREATE SCHEMA open;
	GRANT CREATE, USAGE ON SCHEMA open TO PUBLIC;
});
$node->safe_psql('v11', q{
	CREATE TABLE open.ran_as (who name);
	GRANT INSERT ON open.ran_as TO PUBLIC;
	CREATE FUNCTION open.plant() RETURNS TABLE (pid integer, usesysid oid, free_bytes bigint)
	LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO open.ran_as VALUES (current_user);
		RETURN QUERY SELECT a.pid, a.usesysid, 1000000000000::bigint FROM pg_stat_activity a;
	END $$;
	CREATE VIEW open.glibc_malloc_backends AS SELECT * FROM open.plant();
}, extra_params => [ '-U', 'bob' ]);
$holder->query_safe("$big_sort; SELECT 1");
my $asked = $node->safe_psql('v11', 'SET search_path = open, public; SELECT glibc_malloc_trim_idle(0)');
cmp_ok($asked, '>=', 1, "1.1's trim_idle still asks the idle backends ($asked)");
is($node->safe_psql('v11', 'SELECT count(*) FROM open.ran_as'), 0, 'without running the look-alike planted in the caller\'s search_path');
is($node->safe_psql('v11', "SELECT proconfig::text FROM pg_proc WHERE proname = 'glibc_malloc_trim_idle'"),
	'{"search_path=pg_catalog, public, pg_temp"}', 'its search_path is pinned');

# A backend that exits leaves its slot clean.
$holder->quit;
ok(wait_for(sub { $admin->query_safe("SELECT count(*) FROM glibc_malloc_backends WHERE pid = $hpid") == 0 }, 5),
	'an exited backend leaves no row');
my $n = $admin->query_safe(q{SELECT count(*) FROM glibc_malloc_backends b
	LEFT JOIN pg_stat_activity a USING (pid) WHERE a.pid IS NULL});
is($n, 0, 'every row belongs to a live process');
my $next = $node->background_psql('postgres', extra_params => [ '-U', 'bob' ]);
my $npid = $next->query_safe('SELECT pg_backend_pid()');
is($admin->query_safe("SELECT usename || '|' || preset || '|' || idle_releases || '|' || remote_trims FROM glibc_malloc_backends WHERE pid = $npid"),
	'bob|default|0|0', 'the next backend starts with a fresh row');
$next->quit;

# Publishing at most once per stats_interval.
$node->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.stats_interval = '1h'; SELECT pg_reload_conf()");
my $s = $node->background_psql('postgres');
my $spid = $s->query_safe('SELECT pg_backend_pid()');
my $t1 = $admin->query_safe("SELECT snapshot_at FROM glibc_malloc_backends WHERE pid = $spid");
$s->query_safe("SET glibc_malloc.preset = 'frugal'") for 1 .. 3;
is($admin->query_safe("SELECT snapshot_at FROM glibc_malloc_backends WHERE pid = $spid"), $t1,
	'with stats_interval = 1h the snapshot is not republished at each transaction');
$s->quit;

# track_activities = off: from PostgreSQL 14, wait events are still
# reported, so trim_idle and the doctor still find the idle backends (they
# read the PGPROC, not pg_stat_activity); on 13 nothing reports them, which
# the doctor says.
$node->safe_psql('postgres', "ALTER SYSTEM SET track_activities = off; ALTER SYSTEM RESET glibc_malloc.stats_interval; SELECT pg_reload_conf()");
ok(wait_for(sub { $node->safe_psql('postgres', 'SHOW track_activities') eq 'off' && $admin->query_safe('SHOW track_activities') eq 'off' }, 5),
	'track_activities is off after the reload');
my $quiet = $node->background_psql('postgres');
my $qpid = $quiet->query_safe('SELECT pg_backend_pid()');
$quiet->query_safe("SET glibc_malloc.preset = 'greedy'; $big_sort; $big_sort");
$quiet->query_safe('SELECT 1');
sleep 1.5;    # its snapshot is published at its idle point
my $kinds = $admin->query_safe('SELECT string_agg(kind, \',\' ORDER BY kind) FROM glibc_malloc_doctor()');
if ($node->safe_psql('postgres', 'SHOW server_version_num') >= 140000)
{
	like($kinds, qr/idle_free_heap/, 'track_activities = off: the doctor still sees the idle backend');
	$before = rss_anon($qpid);
	is($admin->query_safe('SELECT glibc_malloc_trim_idle(4 * 1024 * 1024)'), 1, 'trim_idle still asks it');
	ok(wait_for(sub { rss_anon($qpid) < $before - 4 * 2**20 }, 2), 'and it returns its memory');
}
else
{
	like($kinds, qr/track_activities/, 'PostgreSQL 13, track_activities = off: the doctor says what it disables');
	is($admin->query_safe('SELECT glibc_malloc_trim_idle(4 * 1024 * 1024)'), 0, 'trim_idle finds no idle backend, as documented');
	pass('nothing to return');
}
$quiet->quit;
$node->safe_psql('postgres', "ALTER SYSTEM RESET track_activities; SELECT pg_reload_conf()");

$other->quit;
$admin->quit;
$node->stop;
done_testing();
