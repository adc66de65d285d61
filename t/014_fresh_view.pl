# The view tells the truth about idle backends, transaction-end work runs
# after the transaction is over (GUCs rolled back, memory freed), a missed
# idle release is retried, and glibc_malloc_trim_idle() filters before it
# acts.  Memory is measured from outside, in /proc.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use IPC::Run;
use Test::More;
use Time::HiRes qw(usleep);

my $node = new_node('fresh', "work_mem = '32MB'\nglibc_malloc.stats_interval = '3s'\n");
my $big_sort = workload('big_sort');
my $admin = $node->background_psql('postgres');
sub view_of
{
	my ($pid, $cols) = @_;
	return $admin->query_safe("SELECT $cols FROM glibc_malloc_backends WHERE pid = $pid");
}

# 1. A session publishes at login, runs two big sorts within stats_interval
# and goes idle: the view catches up within stats_interval.
my $s = $node->background_psql('postgres');
my $pid = $s->query_safe("SET glibc_malloc.preset = 'greedy'; $big_sort; $big_sort; SELECT pg_backend_pid()");
my $rss = rss_anon($pid);
ok( wait_for(sub { view_of($pid, 'free_bytes > 8 * 1024 * 1024') eq 't' }, 5),
	'an idle backend whose last transaction ends fell inside stats_interval is republished');
my $seen = view_of($pid, 'rss_anon_bytes');
cmp_ok(abs($seen - $rss), '<', 2 * 2**20,
	sprintf('the view shows its RssAnon as in /proc (%.1f MB vs %.1f MB)', $seen / 2**20, $rss / 2**20));
$s->quit;

# 7. Transaction-end work runs after GUC rollback: SET LOCAL does not cancel
# the idle release of the session's setting.
$s = $node->background_psql('postgres');
$pid = $s->query_safe("SET glibc_malloc.preset = 'balanced'; SELECT pg_backend_pid()");
my $start = rss_anon($pid);
$s->query_safe("BEGIN; SET LOCAL glibc_malloc.idle_release_delay = 0; $big_sort; $big_sort; COMMIT");
ok(wait_for(sub { rss_anon($pid) - $start < 2 * 2**20 }, 3),
	'BEGIN; SET LOCAL idle_release_delay = 0; ...; COMMIT: the session\'s release still runs');
$s->quit;

# Transactions PostgreSQL runs by itself at the idle wait (sinval catch-up,
# here from another session creating and dropping temp tables) do not
# restart the idle release's clock.
$s = $node->background_psql('postgres');
$pid = $s->query_safe("SET glibc_malloc.preset = 'balanced'; SELECT pg_backend_pid()");
$start = rss_anon($pid);
my $churn_sql = PostgreSQL::Test::Utils::tempdir() . '/churn.sql';
open my $cf, '>', $churn_sql or die $!;
print $cf "CREATE TEMP TABLE churn (a int, b text, c int[]); DROP TABLE churn;\n";
close $cf;
my $churn = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '1', '-T', '5', '-h', $node->host, '-p', $node->port, '-f', $churn_sql, 'postgres' ],
	'<', \undef, '>', \my $churn_out, '2>', \my $churn_err);
sleep 1;
$s->query_safe("$big_sort; $big_sort; SELECT 1");
ok(wait_for(sub { rss_anon($pid) - $start < 2 * 2**20 }, 3),
	'an idle balanced backend releases within its delay while another session floods invalidations');
$churn->finish;
like($churn_out, qr/number of transactions actually processed: [1-9]/, 'the invalidation flood ran');
$s->quit;

# 7. ... and after the transaction's memory is freed: frugal returns what
# the end of the transaction itself frees (SET LOCAL values, freed at GUC
# rollback), not only what was free when the transaction ended.
$s = $node->background_psql('postgres');
$pid = $s->query_safe("SET glibc_malloc.preset = 'frugal'; SELECT pg_backend_pid()");
$start = rss_anon($pid);
$s->query_safe("SELECT count(set_config('gm_test.v' || i, repeat('x', 100000), true)) FROM generate_series(1, 300) i");
ok(wait_for(sub { rss_anon($pid) - $start < 4 * 2**20 }, 2),
	sprintf('frugal: 30 MB of SET LOCAL values freed at commit are returned once idle (%.1f MB above start)',
		(rss_anon($pid) - $start) / 2**20));
# Whether frugal trims is decided with the settings after rollback too.
$start = rss_anon($pid);
$s->query_safe("BEGIN; SET LOCAL glibc_malloc.preset = 'default'; SELECT count(set_config('gm_test.w' || i, repeat('x', 100000), true)) FROM generate_series(1, 300) i; COMMIT");
ok(wait_for(sub { rss_anon($pid) - $start < 4 * 2**20 }, 2),
	'BEGIN; SET LOCAL preset = default; ...; COMMIT: the session\'s frugal trim still runs');
$s->quit;

# 11. A release that falls due while the backend cannot act (here: in a
# failed transaction block, which ROLLBACK ends without a transaction-end
# callback) is retried once the backend is idle.
$s = $node->background_psql('postgres', on_error_stop => 0);
$pid = $s->query_safe("SET glibc_malloc.preset = 'greedy'; SET glibc_malloc.idle_release_delay = '300ms'; SELECT pg_backend_pid()");
$start = rss_anon($pid);
$s->query("BEGIN; $big_sort; $big_sort; SELECT 1/0");
like($s->{stderr}, qr/division by zero/, 'the transaction block failed');
$s->{stderr} = '';
sleep 1;    # the release falls due inside the failed block
cmp_ok(rss_anon($pid) - $start, '>', 8 * 2**20, 'nothing is released inside the failed transaction block');
$s->query_safe('ROLLBACK');
ok(wait_for(sub { rss_anon($pid) - $start < 2 * 2**20 }, 3), 'the release is retried and runs once idle');
$s->quit;

# 3. glibc_malloc_trim_idle() asks idle backends only, never the caller, and
# follows pg_signal_backend's rules without failing on what it may not trim.
# Every session's snapshot shows its free memory first, so that only the
# state, caller and privilege filters can keep them out.
$node->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.stats_interval = 0; SELECT pg_reload_conf()");
$node->safe_psql('postgres', 'CREATE ROLE ops LOGIN IN ROLE pg_monitor, pg_signal_backend; CREATE ROLE app LOGIN');
my %sess;
for my $who ([ 'idle', 'app' ], [ 'intx', 'app' ], [ 'running', 'app' ], [ 'super', undef ])
{
	my ($name, $role) = @$who;
	my $b = $node->background_psql('postgres', $role ? (extra_params => [ '-U', $role ]) : ());
	$sess{$name} = { s => $b, pid => $b->query_safe("SET glibc_malloc.preset = 'greedy'; SELECT pg_backend_pid()") };
}
$sess{$_}{s}->query_safe("$big_sort; $big_sort; SELECT 1") for qw(idle super running intx);
ok( wait_for(sub {
			$admin->query_safe('SELECT count(*) FROM glibc_malloc_backends WHERE free_bytes > 8 * 1024 * 1024 AND pid IN ('
				  . join(',', map { $_->{pid} } values %sess) . ')') == 4;
		}, 5),
	'the view shows all four sessions holding free memory');
$sess{intx}{s}->query_safe('BEGIN; SELECT 1');
$sess{running}{s}->query_until(qr/started/, "\\echo started\nSELECT pg_sleep(4);\n");
sleep 1;
for my $k (keys %sess) { $sess{$k}{rss} = rss_anon($sess{$k}{pid}) }
my $ops = $node->background_psql('postgres', extra_params => [ '-U', 'ops' ]);
my $ops_pid = $ops->query_safe("SET glibc_malloc.preset = 'greedy'; $big_sort; SELECT pg_backend_pid()");
my $ops_rss = rss_anon($ops_pid);
my ($stdout, $failed) = $ops->query('SELECT glibc_malloc_trim_idle(1048576)');
is($ops->{stderr}, '', 'pg_monitor + pg_signal_backend calls trim_idle without error while an idle superuser session exists');
is($stdout, '1', 'it asks exactly the one idle backend it may trim');
ok(wait_for(sub { rss_anon($sess{idle}{pid}) < $sess{idle}{rss} - 8 * 2**20 }, 3), 'the idle backend returns its memory');
ok(wait_for(sub { $admin->query_safe("SELECT remote_trims || '|' || idle_releases FROM glibc_malloc_backends WHERE pid = $sess{idle}{pid}") eq '1|0' }, 3),
	'the view counts it as a remote trim, not an idle release');
cmp_ok(rss_anon($sess{super}{pid}), '>', $sess{super}{rss} - 2**20, 'the superuser\'s idle backend is left alone');
cmp_ok(rss_anon($sess{intx}{pid}), '>', $sess{intx}{rss} - 2**20, 'a backend idle in transaction is not trimmed');
cmp_ok(rss_anon($sess{running}{pid}), '>', $sess{running}{rss} - 2**20, 'a backend running a query is not trimmed');
cmp_ok(rss_anon($ops_pid), '>', $ops_rss - 2**20, 'the caller is not trimmed');
$sess{intx}{s}->query_safe('COMMIT');
$sess{running}{s}->query_safe('SELECT 1');
sleep 1;
is($admin->query_safe("SELECT string_agg(pid::text, ',') FROM glibc_malloc_backends WHERE idle_releases + remote_trims > 0 AND pid IN ($sess{intx}{pid}, $sess{running}{pid}, $ops_pid)"),
	'', 'nor later, at the end of their transactions');
for my $x (values %sess) { $x->{s}->quit }
$ops->quit;

# 12. trim_idle does not depend on the caller's search_path.
$node->safe_psql('postgres', 'CREATE DATABASE sp');
$node->safe_psql('sp', 'CREATE SCHEMA gm; CREATE EXTENSION glibc_malloc SCHEMA gm');
is($node->safe_psql('sp', "SET search_path = public; SELECT gm.glibc_malloc_trim_idle(0) >= 0"), 't',
	'trim_idle works with the extension outside the caller\'s search_path');

$admin->quit;
$node->stop;
done_testing();
