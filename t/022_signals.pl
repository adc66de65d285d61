# The idle point's signal paths.
#
# A backend with a thread of an extension's: the idle point's signal
# handler acts on the main thread only.  The timer is aimed at the main
# thread, and a request from another process that the kernel hands to the
# other thread is passed on to the main thread.  Before, the handler ran
# malloc_trim/mallinfo on the other thread, interrupted inside malloc, and
# the backend hung on that thread's arena lock.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $node = new_node('threads', "glibc_malloc.stats_interval = 0\nwork_mem = '64MB'\n");
my $so = test_module('gm_test_threads');
$node->safe_psql('postgres', qq{
	CREATE FUNCTION gm_test_start_thread() RETURNS integer AS '$so' LANGUAGE C;
	CREATE FUNCTION gm_test_block_sigusr2(boolean) RETURNS void AS '$so' LANGUAGE C;
	CREATE FUNCTION gm_test_tgkill(integer, integer) RETURNS boolean AS '$so' LANGUAGE C;
	CREATE FUNCTION gm_test_block_sigusr2_window(integer, integer) RETURNS void AS '$so' LANGUAGE C;
	CREATE FUNCTION gm_test_end_window(integer) RETURNS boolean AS '$so' LANGUAGE C;
});
my $sort = q{SELECT count(*) FROM (SELECT md5(i::text) FROM generate_series(1, 300000) i ORDER BY 1) s};

# Whether a session still answers within a few seconds.
sub answers
{
	my ($s) = @_;
	my $r = eval { $s->query_safe('SELECT 42') };
	return defined $r && $r eq '42';
}

my $admin = $node->background_psql('postgres');
my $big_sort = workload('big_sort');

# SIGUSR2 in one of process $p's signal masks: pending for its main thread
# (SigPnd) or the process (ShdPnd), or blocked in the main thread (SigBlk).
sub sigusr2_pending
{
	my ($p, $which) = @_;
	my $status = slurp_file("/proc/$p/task/$p/status");
	my ($mask) = $status =~ /^$which:\s+([0-9a-f]+)$/m;
	return hex(substr($mask, -4)) & (1 << 11) ? 1 : 0;
}

# Wait until process $p's main thread blocks SIGUSR2 (the window began).
sub window_open
{
	my ($p) = @_;
	return wait_for(sub { sigusr2_pending($p, 'SigBlk') }, 10);
}

# glibc_malloc_trim_idle()'s request survives the transactions PostgreSQL
# runs by itself at the idle wait (here it delivers a notification): the
# backend did not work since, it is still idle.  SIGUSR2 is held back from
# 0.3 s after its last statement until the test ends the window, while the
# backend waits for its client, so the request is still pending when the
# notification's transaction ends; then it arrives at the idle wait and is
# served, without a statement.
my $l = $node->background_psql('postgres');
my $lpid = $l->query_safe('SELECT pg_backend_pid()');
# 32MB: greedy's mmap threshold stops at 32 MB before glibc 2.35, and a
# larger work_mem's sort would be mmapped and given back at once.
$l->query_safe("SET work_mem = '32MB'; SET glibc_malloc.preset = 'greedy'; LISTEN ch; $big_sort; $big_sort");
$l->query_safe('SELECT gm_test_block_sigusr2_window(300, 60000)');
ok(window_open($lpid), 'SIGUSR2 is held back');
my $trims = $node->safe_psql('postgres', "SELECT remote_trims FROM glibc_malloc_backends WHERE pid = $lpid");
my $rss = rss_anon($lpid);
is($admin->query_safe('SELECT glibc_malloc_trim_idle(1048576)'), 1, 'trim_idle asks the idle listener');
$admin->query_safe("NOTIFY ch, 'hello'");
sleep 0.5;
is($node->safe_psql('postgres', "SELECT remote_trims FROM glibc_malloc_backends WHERE pid = $lpid"), $trims,
	'not served while SIGUSR2 is held back');
ok(sigusr2_pending($lpid, 'ShdPnd') || sigusr2_pending($lpid, 'SigPnd'), 'the request\'s signal waits');
$admin->query_safe("SELECT gm_test_end_window($lpid)");
ok(wait_for(sub { $node->safe_psql('postgres', "SELECT remote_trims FROM glibc_malloc_backends WHERE pid = $lpid") > $trims }, 6),
	'the request is served after the notification\'s transaction, at the idle wait');
ok(rss_anon($lpid) < $rss - 4 * 2**20, sprintf('RssAnon %.1f MB -> %.1f MB', $rss / 2**20, rss_anon($lpid) / 2**20));
like($l->query_safe('SELECT 1'), qr/hello/, 'the notification was delivered meanwhile');
$l->quit;

# With SIGUSR2 blocked in the main thread, a process-directed SIGUSR2 (a
# remote trim) goes to the other thread, which loops in malloc.  It is
# passed on to the main thread, where it waits (the kernel's SigPnd of the
# main thread, not the process's ShdPnd), and nothing runs on the other
# thread.  Once unblocked, at the idle wait, the main thread serves it:
# no statement, no timer of ours is involved (preset default).
my $t = $node->background_psql('postgres', timeout => 15);
my $tpid = $t->query_safe('SELECT pg_backend_pid()');
my $ttid = $t->query_safe('SELECT gm_test_start_thread()');
$t->query_safe('SELECT gm_test_block_sigusr2_window(300, 60000)');
ok(window_open($tpid), 'SIGUSR2 is held back');
my $tc = $node->safe_psql('postgres', "SELECT remote_trims FROM glibc_malloc_backends WHERE pid = $tpid");
$admin->query_safe("SELECT glibc_malloc_trim_backend($tpid), pg_sleep(0.05)") for 1 .. 5;
is($node->safe_psql('postgres', "SELECT remote_trims FROM glibc_malloc_backends WHERE pid = $tpid"), $tc,
	'nothing is served on the other thread');
is(sigusr2_pending($tpid, 'SigPnd') . sigusr2_pending($tpid, 'ShdPnd'), '10',
	'SIGUSR2 was passed on: it waits for the main thread, not for the process');
my ($tstate) = slurp_file("/proc/$tpid/task/$ttid/stat") =~ /\) (\w) /;
is($tstate, 'R', 'the other thread is not stuck on a lock');
$admin->query_safe("SELECT gm_test_end_window($tpid)");
ok(wait_for(sub { $node->safe_psql('postgres', "SELECT remote_trims FROM glibc_malloc_backends WHERE pid = $tpid") > $tc }, 5),
	'unblocked, the main thread serves it at the idle wait');
ok(answers($t), 'the backend answers') or kill 'KILL', $tpid;
$t->quit;

my $s = $node->background_psql('postgres', timeout => 15);
my $pid = $s->query_safe('SELECT pg_backend_pid()');

# idle_releases,remote_trims of the backend, as published (read from
# another session: polling from its own would keep it busy).
sub counters
{
	return $node->safe_psql('postgres',
		"SELECT idle_releases || ',' || remote_trims FROM glibc_malloc_backends WHERE pid = $pid");
}

# The state letter of thread $t of the backend (R running, S sleeping).
sub thread_state
{
	my ($t) = @_;
	return (slurp_file("/proc/$pid/task/$t/stat") =~ /\) (\w) /)[0];
}

$s->query_safe("SET glibc_malloc.preset = 'balanced'");
my $tid = $s->query_safe('SELECT gm_test_start_thread()');
ok($tid > 0 && $tid != $pid, "a second thread runs in the backend ($tid)");
like(slurp_file("/proc/$pid/status"), qr/^Threads:\s+2$/m, 'two threads');

# The idle release's timer is aimed at the main thread (kernel: /proc/PID/timers).
$s->query_safe($sort);
ok(wait_for(sub { counters() =~ /^[1-9]/ }, 5), 'balanced releases the idle heap (' . counters() . ')');
like(slurp_file("/proc/$pid/timers"), qr/^notify:\s+signal\/tid\.$pid$/m,
	'the timer signals the main thread, not the process');

# SIGUSR2 sent straight at the other thread (tgkill) while the main
# thread waits for the client with an idle release pending: passed on,
# and the main thread releases.
my ($releases) = split /,/, counters();
$s->query_safe($sort);
$admin->query_safe("SELECT gm_test_tgkill($pid, $tid), pg_sleep(0.02)") for 1 .. 100;
is(thread_state($tid), 'R', 'after 100 signals at the other thread, it is not stuck');
ok(answers($s), 'the backend answers') or kill 'KILL', $pid;
ok(wait_for(sub { (split /,/, counters())[0] > $releases }, 5), 'and the idle release ran (' . counters() . ')');

$s->quit;


$admin->quit;
my @bad = grep { /\b(PANIC|FATAL):|terminated by signal|TRAP:/ } split /\n/, slurp_file($node->logfile);
is_deeply(\@bad, [], 'no crash in the server log');
done_testing();
