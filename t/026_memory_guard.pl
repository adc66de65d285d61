# The memory guard in a real memory cgroup (v1 on the CI machines, v2 in
# scripts/vm's guest), with restart_after_crash = on as in production.  K
# connections start, at the same moment, a sort whose live memory together
# exceeds the cgroup's limit.  Without the guard the kernel's OOM killer
# ends a backend and the server restarts, losing every session (on cgroup
# v2 with memory.oom.group = 1, the kubelet's setting, the kernel ends the
# whole cgroup, postmaster included, and the test starts the server again
# as the kubelet restarts the container); with it, over 10 bursts, the
# kernel kills nothing and the server never restarts: some sorts get
# "ERROR: out of memory" with the guard's HINT, the others complete with
# the right result, and every session runs its next query.
#
# Needs a memory cgroup writable by the test's user: GM_TEST_CGROUP_V1
# (scripts/test, as root, makes one and removes it) or GM_TEST_CGROUP_V2
# (scripts/vm check tap, in its guest).  The guest, many times slower,
# sets GM_TEST_GUARD_LIMIT_MB (the limit, 400), GM_TEST_GUARD_ROWS (rows
# per sort, 1000000) and GM_TEST_GUARD_BURSTS (10).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $cg = test_cgroup();
# cgroup v2 memory.oom.group = 1: one OOM kill ends every process in it.
my $group = cgroup_oom_group($cg);

my $MB = 2**20;
my $limit = ($ENV{GM_TEST_GUARD_LIMIT_MB} // 400) * $MB;
my $K = 4;			# each sort peaks near 150 MB: together 1.5 times the limit
my $rows = $ENV{GM_TEST_GUARD_ROWS} // 1000000;
my $bursts = $ENV{GM_TEST_GUARD_BURSTS} // 10;
my $big = "SELECT count(*) FROM (SELECT md5(i::text) FROM generate_series(1, $rows) i ORDER BY 1) s";

sub oom_kills { cgroup_oom_kills($cg) }

my $node = new_node('guard', "restart_after_crash = on\nshared_buffers = 16MB\n", no_start => 1);
my $postmaster;
sub start_in_cgroup
{
	$node->start;
	enter_cgroup($node, $cg, $limit);
	$postmaster = (split /\n/, slurp_file($node->data_dir . '/postmaster.pid'))[0];
}
start_in_cgroup();
$node->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');

# One burst: K sessions start the big sort at once, then each runs a small
# query.  Returns, per session, its stdout and stderr.  Bounded by
# PG_TEST_TIMEOUT_DEFAULT (180 s), which a slow machine raises.
sub burst
{
	my @runs;
	for my $i (1 .. $K)
	{
		my %r = (out => '', err => '');
		$r{h} = IPC::Run::start(
			[ 'psql', '-X', '-At', '-d', $node->connstr('postgres'),
			  '-c', "SET work_mem = '1GB'", '-c', $big,
			  '-c', "SET work_mem = '4MB'", '-c', 'SELECT count(*) FROM generate_series(1, 1000)' ],
			'<', \undef, '>', \$r{out}, '2>', \$r{err},
			IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
		push @runs, \%r;
	}
	for my $r (@runs)
	{
		eval { $r->{h}->finish; 1 } or $r->{err} .= "timed out\n";
	}
	return @runs;
}

# 1. Without the guard: the OOM killer ends a backend, the server restarts.
# The monitor reads the setting at its next look after the SIGHUP
# (glibc_malloc_guard.enabled is what it last read).
sub guard_enabled { $node->safe_psql('postgres', 'SELECT enabled FROM glibc_malloc_guard') }
$node->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.memory_guard = off; SELECT pg_reload_conf()");
ok(wait_for(sub { guard_enabled() eq 'f' }, 5), 'the monitor reads memory_guard = off');
# glibc_malloc_guard shows the cgroup's count (memory.events or
# memory.oom_control oom_kill), as the monitor last read it: the suite's cgroup is shared, so
# compare what it rises by.
sub view_oom_kills { $node->safe_psql('postgres', 'SELECT oom_kills FROM glibc_malloc_guard') }
my $kills = oom_kills();
ok(wait_for(sub { view_oom_kills() eq $kills }, 5), "glibc_malloc_guard shows the cgroup's OOM kills ($kills so far)");
my $view_kills = view_oom_kills();
my $group_kills = cgroup_oom_group_kills($cg);
my $offset = -s $node->logfile;
my $t0 = time;
burst();
my $log;
if ($group)
{
	wait_for(sub { !kill 0, $postmaster }, 60);
}
else
{
	$log = wait_for_log_text($node, $offset, qr/all server processes terminated; reinitializing/, 60);
}
note sprintf('without the guard: peak usage %.0f MB of %.0f MB, %d OOM kills; %d s',
	cgroup_peak($cg) / $MB, $limit / $MB, oom_kills() - $kills, time - $t0);
cmp_ok(oom_kills(), '>', $kills, 'without the guard the kernel OOM-kills in the cgroup');
if ($group)
{
	cmp_ok(cgroup_oom_group_kills($cg), '>', $group_kills, 'and it kills the whole cgroup (memory.oom.group = 1, memory.events oom_group_kill)');
	ok(!kill(0, $postmaster), 'the postmaster with it, losing every session');
	# As the kubelet restarts the container.
	$node->stop('immediate', fail_ok => 1);
	start_in_cgroup();
}
else
{
	like($log, qr/terminated by signal 9: Killed.*all server processes terminated; reinitializing/s,
		'and the server restarts, losing every session');
}
ok(wait_for(sub { $node->psql('postgres', 'SELECT 1') == 0 }, 60), 'the server comes back');
ok(wait_for(sub { view_oom_kills() eq oom_kills() }, 10), 'its monitor reads the count again');
is(view_oom_kills() - $view_kills, oom_kills() - $kills,
	sprintf('glibc_malloc_guard.oom_kills rose by the kernel\'s count (%d)', oom_kills() - $kills));

# 2. With the guard (the default): 10 bursts.
$node->safe_psql('postgres', "ALTER SYSTEM RESET glibc_malloc.memory_guard; SELECT pg_reload_conf()");
ok(wait_for(sub { guard_enabled() eq 't' }, 5), 'the monitor reads the guard on again');
$kills = oom_kills();
$offset = -s $node->logfile;
$t0 = time;
my ($errors, $completed, $wrong, $next_ok, $other) = (0, 0, 0, 0, 0);
for my $b (1 .. $bursts)
{
	for my $r (burst())
	{
		my @lines = split /\n/, $r->{out};
		# "SET", the sort's count (if it completed), "SET", then 1000.
		$next_ok++ if @lines && $lines[-1] eq '1000';
		if ($r->{err} =~ /ERROR:  out of memory\nDETAIL:  Failed on request of size \d+ in memory context "[^"]+"\.\nHINT:  The server is close to its memory limit: glibc_malloc\.memory_guard limited this backend's private memory \([^)\n]+ mapped\) so that the kernel's OOM killer does not restart the server\. Retry when fewer large queries run, lower work_mem, or raise the container's memory limit\.\n/)
		{
			$errors++;
		}
		elsif ($r->{err} eq '' && grep { $_ eq $rows } @lines)
		{
			$completed++;
		}
		elsif ($r->{err} eq '')
		{
			$wrong++;
			diag "wrong result: $r->{out}";
		}
		else
		{
			$other++;
			diag "other error: $r->{err}";
		}
	}
}
$log = slurp_file($node->logfile, $offset);
note "with the guard: $bursts bursts of $K sorts: $completed completed, $errors got the guard's ERROR; " . (time - $t0) . ' s';
is(oom_kills(), $kills, 'with the guard the kernel OOM-kills nothing');
unlike($log, qr/terminated by signal|all server processes terminated; reinitializing/, 'and the server never restarts');
cmp_ok($errors, '>=', 1, 'some sorts get ERROR: out of memory with the DETAIL and the HINT');
cmp_ok($completed, '>=', 1, 'the others complete');
is($wrong, 0, 'with the right result');
is($other, 0, 'no other error, no lost connection');
is($next_ok, $bursts * $K, 'every session runs its next query');
like($log, qr/LOG:  glibc_malloc memory guard: lowered \d+ limits?: headroom \d+ [kM]B, \d+ working, usage \d+ MB of \d+ MB/,
	'the monitor logs each tightening with the numbers');
my $view = $node->safe_psql('postgres', 'SELECT enabled, rounds > 0, limits_lowered > 0, guard_errors FROM glibc_malloc_guard');
is($view, "t|t|t|$errors", 'glibc_malloc_guard counts the rounds, the limits lowered and exactly the ERRORs seen');
# Once the bursts are over the guard lifts every limit it set.
ok(wait_for(sub { $node->safe_psql('postgres', 'SELECT NOT engaged FROM glibc_malloc_guard') eq 't' }, 10), 'the guard disengages');
is($node->safe_psql('postgres', "SELECT count(*) FROM glibc_malloc_processes WHERE guard_limit_bytes IS NOT NULL OR (guarded AND data_limit_bytes IS NOT NULL)"),
	0, 'and no process keeps a guard limit, in shared memory or in force');
$node->stop('fast');
done_testing();
