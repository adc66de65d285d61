# Every kind of process the preloaded module runs in: the autovacuum
# launcher (a transaction without a session user), failed logins (a
# transaction aborted inside InitPostgres), and remote trim with
# publishing turned off.  On an assert-enabled server (scripts/cassert) a
# wrong assumption here is a TRAP that restarts the whole server.
use strict;
use warnings;
use Config;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('processes',
	"autovacuum_naptime = 1\nglibc_malloc.stats_interval = 0\nwork_mem = '32MB'\nrestart_after_crash = on\n");
my $big_sort = workload('big_sort');
my $log_offset = 0;
$node->safe_psql('postgres', q{
	CREATE ROLE ops LOGIN IN ROLE pg_monitor, pg_signal_backend;
});

# The autovacuum launcher runs transactions before it has any role.
ok( wait_for(sub {
			$node->safe_psql('postgres',
				"SELECT count(*) FROM glibc_malloc_backends WHERE backend_type = 'autovacuum launcher'") == 1;
		}, 10),
	'the autovacuum launcher publishes its snapshot');
my $launcher = $node->safe_psql('postgres',
	"SELECT pid || '|' || coalesce(usesysid::text, 'null') || '|' || coalesce(usename, 'null') FROM glibc_malloc_backends WHERE backend_type = 'autovacuum launcher'");
my ($lpid, $lrole, $lname) = split /\|/, $launcher;
is("$lrole|$lname", 'null|null', 'it shows no role, as in pg_stat_activity (not "unknown (OID=0)")');
is($node->safe_psql('postgres', "SELECT usesysid IS NULL FROM pg_stat_activity WHERE pid = $lpid"), 't',
	'pg_stat_activity agrees');

# pg_signal_backend's rule: a process without a role counts as a superuser's.
my ($ret, $out, $err) = $node->psql('postgres', "SELECT pg_cancel_backend($lpid)", extra_params => [ '-U', 'ops' ]);
like($err, qr/must be a superuser|permission denied/, 'pg_cancel_backend refuses the launcher to a pg_signal_backend member');
($ret, $out, $err) = $node->psql('postgres', "SELECT glibc_malloc_trim_backend($lpid)", extra_params => [ '-U', 'ops' ]);
like($err, qr/permission denied to trim backend $lpid/, 'so does glibc_malloc_trim_backend');
($ret, $out, $err) = $node->psql('postgres', "SELECT glibc_malloc_trim_backend($lpid)");
is($out, 't', 'a superuser may trim it');
like($err, qr/NOTICE:  the request to process $lpid is queued, not delivered\nDETAIL:  The autovacuum launcher has no idle point to wake: it trims at its next transaction end, if it has one\./,
	'and is told the request is only queued: the launcher has no idle point');

# Failed logins abort a transaction inside InitPostgres, without a session
# user (unknown role) or while exiting (unknown database).
($ret, $out, $err) = $node->psql('postgres', 'SELECT 1', extra_params => [ '-U', 'nosuchrole' ]);
like($err, qr/role "nosuchrole" does not exist/, 'a login with an unknown role fails cleanly');
($ret, $out, $err) = $node->psql('nosuchdb', 'SELECT 1');
like($err, qr/database "nosuchdb" does not exist/, 'a login to an unknown database fails cleanly');
for (1 .. 5) { $node->psql('postgres', 'SELECT 1', extra_params => [ '-U', "nosuchrole$_" ]) }
is($node->safe_psql('postgres', q{SELECT count(*) FROM glibc_malloc_backends b LEFT JOIN pg_stat_activity a USING (pid)
	WHERE a.pid IS NULL AND b.backend_type = 'client backend'}),
	0, 'failed logins leave no row behind');
sleep 2;    # two more autovacuum cycles
my $log = slurp_file($node->logfile, $log_offset);
unlike($log, qr/TRAP:/, 'no failed assertion in the server log');
unlike($log, qr/terminated by signal|was terminated by exception/, 'no process crashed');
unlike($log, qr/all server processes terminated/, 'the server did not restart');

# With publishing off, remote trim still finds the backend.
$node->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.stats_interval = -1; SELECT pg_reload_conf()");
my $holder = $node->background_psql('postgres');
my $hpid = $holder->query_safe('SELECT pg_backend_pid()');
ok(wait_for(sub { $holder->query_safe('SHOW glibc_malloc.stats_interval') eq '-1' }, 10), 'stats_interval = -1 reached the session');
$holder->query_safe("SET glibc_malloc.preset = 'greedy'; $big_sort; $big_sort; SELECT 1");
my $before = rss_anon($hpid);
is($node->safe_psql('postgres', "SELECT glibc_malloc_trim_backend($hpid)"), 't',
	'stats_interval = -1: the trim request is delivered');
ok(wait_for(sub { rss_anon($hpid) < $before - 8 * 2**20 }, 3), 'and the backend returns its memory');
$holder->quit;

# mxfast's maximum follows the platform: 80 * sizeof(size_t) / 4.
is($node->safe_psql('postgres', "SELECT max_val FROM pg_settings WHERE name = 'glibc_malloc.mxfast'"),
	80 * $Config{sizesize} / 4, "mxfast's maximum is " . (80 * $Config{sizesize} / 4) . " on this platform");

# /proc/self/status longer than 4 kB (many supplementary groups, as
# scripts/test runs the TAP tests): RssAnon is still read.
my $g = $node->background_psql('postgres');
my $groups = (grep { /^Groups:/ } split /\n/, slurp_file('/proc/' . $g->query_safe('SELECT pg_backend_pid()') . '/status'))[0] // '';
SKIP:
{
	skip 'the server runs with few supplementary groups (scripts/test gives it 1100)', 1 if length($groups) < 4096;
	is($node->safe_psql('postgres', 'SELECT rss_anon_bytes > 0 FROM glibc_malloc_stats()'), 't',
		sprintf('RssAnon is read although the Groups line alone is %d bytes', length $groups));
}
$g->quit;

$node->stop;
done_testing();
