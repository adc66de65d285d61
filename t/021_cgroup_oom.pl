# A real memory cgroup (v1 on the CI machines, v2 in scripts/vm's guest):
# the postmaster runs in one whose limit a fleet of greedy backends exceeds
# while frugal ones fit.  60 connections each run a 1M-row sort, one after
# another, and then stay busy with light queries.  Without the memory
# monitor the kernel's OOM killer ends a backend (and PostgreSQL its
# server), or on cgroup v2 with memory.oom.group = 1 (the kubelet's
# setting) the whole cgroup, postmaster included; with it, the same run
# completes.
#
# Needs a memory cgroup writable by the test's user: GM_TEST_CGROUP_V1
# (scripts/test, as root, makes one and removes it) or GM_TEST_CGROUP_V2
# (scripts/vm check tap, in its guest).  The guest, many times slower,
# sets GM_TEST_OOM_LIMIT_MB (the limit, 400), GM_TEST_OOM_CONNECTIONS (60)
# and GM_TEST_OOM_SECONDS (the bound on each fleet, 180).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use List::Util qw(min);

my $cg = test_cgroup();
my $v = cgroup_version($cg);
# cgroup v2 memory.oom.group = 1: one OOM kill ends every process in it.
my $group = cgroup_oom_group($cg);

my $MB = 2**20;
my $limit = ($ENV{GM_TEST_OOM_LIMIT_MB} // 400) * $MB;
# The module's defaults (monitor_fraction 0.9, memory_guard on): before
# the guard the OOM killer struck in 2 of 7 runs of this burst at 0.9;
# with it, 8 of 8 ran clean (docs/guard.md).  GM_TEST_OOM_FRACTION
# measures other fractions.
my $fraction = $ENV{GM_TEST_OOM_FRACTION};
my $connections = $ENV{GM_TEST_OOM_CONNECTIONS} // 60;
my $seconds = $ENV{GM_TEST_OOM_SECONDS} // 180;
my $big_sort = workload('big_sort');

my $node = new_node('oom', "work_mem = '32MB'\nglibc_malloc.preset = 'greedy'\n"
	  . ($fraction ? "glibc_malloc.monitor_fraction = $fraction\n" : ''), no_start => 1);

# Start the server and move its postmaster into the cgroup: the backends it
# forks from now on are charged there.  The limit is set first.
my $postmaster;
sub start_in_cgroup
{
	my ($monitor) = @_;
	# Off: the memory guard too (it needs the monitor).
	$node->append_conf('postgresql.conf', "glibc_malloc.memory_monitor = $monitor\n");
	$node->start;
	# No swap for its pages: the limit must end in the OOM killer, not in swap.
	enter_cgroup($node, $cg, $limit);
	$postmaster = (split /\n/, slurp_file($node->data_dir . '/postmaster.pid'))[0];
	$node->safe_psql('postgres', 'CREATE EXTENSION IF NOT EXISTS glibc_malloc');
}

# The fleet: each connection sorts once, then every connection so far runs
# a light query.  Returns how many connections completed their sort and
# the error that stopped it, if any.  Bounded: at most $seconds s.
sub fleet
{
	my @sessions;
	my $done = 0;
	my $deadline = time + $seconds;
	my $error = '';
	eval {
		for my $i (1 .. $connections)
		{
			die "timed out after $done connections\n" if time > $deadline;
			my $s = $node->background_psql('postgres', on_error_stop => 1);
			push @sessions, $s;
			$s->query_safe($big_sort);
			$done++;
			$_->query_safe('SELECT 1') for @sessions;
		}
		# Stay busy a little longer, as pooled connections do.
		for (1 .. 5)
		{
			$_->query_safe('SELECT 1') for @sessions;
			usleep(300_000);
		}
		1;
	} or $error = $@ || 'unknown error';
	eval { $_->quit } for @sessions;
	return ($done, $error);
}

# 1. Without the monitor: the OOM killer acts.
my ($kills, $group_kills, $hits) = (cgroup_oom_kills($cg), cgroup_oom_group_kills($cg), cgroup_limit_hits($cg));
start_in_cgroup('off');
my $offset = -s $node->logfile;
my ($done, $error) = fleet();
my $log;
if ($group)
{
	wait_for(sub { !kill 0, $postmaster }, 30);
}
else
{
	$log = wait_for_log_text($node, $offset, qr/terminated by signal 9: Killed/, 30);
}
note sprintf('without the monitor: %d of %d connections sorted before: %s; peak usage %.0f MB of %.0f MB',
	$done, $connections, $error =~ s/\n.*//sr, cgroup_peak($cg) / $MB, $limit / $MB);
ok($done < $connections, "without the monitor the fleet does not complete ($done of $connections)");
if ($group)
{
	cmp_ok(cgroup_oom_group_kills($cg), '>', $group_kills, 'the kernel killed the whole cgroup (memory.oom.group = 1, memory.events oom_group_kill)');
	ok(!kill(0, $postmaster), 'the postmaster with it (the kubelet would restart the container)');
}
else
{
	like($log, qr/server process \(PID \d+\) was terminated by signal 9: Killed/, 'the server log shows a backend killed by signal 9 (the OOM killer)');
}
if ($v == 1)
{
	cmp_ok(cgroup_peak($cg), '>=', $limit - 2**20, 'the cgroup reached its limit');
}
else
{
	# memory.current is sampled: the kernel's own count says it surely.
	cmp_ok(cgroup_limit_hits($cg), '>', $hits, 'the cgroup reached its limit (memory.events max)');
}
cmp_ok(cgroup_oom_kills($cg), '>', $kills, 'and the kernel counted an OOM kill in it');
# restart_after_crash is off in tests: the postmaster shuts down (or the
# group kill ended it, leaving its postmaster.pid).
wait_for(sub { !-f $node->data_dir . '/postmaster.pid' }, 10) unless $group;
$node->stop('immediate', fail_ok => 1);

# 2. With the monitor: the same run completes.
$kills = cgroup_oom_kills($cg);
start_in_cgroup('on');
$offset = -s $node->logfile;
($done, $error) = fleet();
$log = slurp_file($node->logfile, $offset);
# Not safe_psql: if the server died, the checks below say so.
my (undef, $m) = $node->psql('postgres', "SELECT source || ' ' || limit_bytes || ' ' || rounds || ' ' || backends_asked || ' ' || returned_bytes FROM glibc_malloc_monitor");
$m //= '';
note sprintf('with the monitor: %d of %d connections; peak usage %.0f MB of %.0f MB; monitor: %s',
	$done, $connections, cgroup_peak($cg) / $MB, $limit / $MB, $m);
# What stopped a connection, if one stopped: its ERROR or a crash.
my $why = join "\n", grep { /\b(ERROR|FATAL|PANIC):|terminated by signal/ } split /\n/, $log;
is($done, $connections, 'with the monitor the fleet completes') or diag "$error\n$why";
is($error, '', 'no connection failed') or diag $why;
# Any process (the monitor itself too), by any signal.
unlike($log, qr/terminated by signal|"glibc_malloc memory monitor" \(PID \d+\) exited with exit code/,
	'no process was killed or crashed, and the monitor did not exit');
unlike($log, qr/all server processes terminated; reinitializing|database system was interrupted|terminating any other active server processes/, 'no restart');
is(cgroup_oom_kills($cg), $kills, 'the kernel counted no new OOM kill');
# The look that engages the guard asks for free heap first: its limits
# count on it.  The monitor's own lines, in order: the first "limiting"
# comes right after an "asked" (before the fix the guard's first limits
# came a look before any ask, and a sort could get "out of memory").
my @mon = grep { /glibc_malloc memory (monitor: asked|guard: limiting)/ } split /\n/, $log;
my ($first_limit) = grep { $mon[$_] =~ /guard: limiting/ } 0 .. $#mon;
ok(defined $first_limit && $first_limit > 0 && $mon[ $first_limit - 1 ] =~ /monitor: asked/,
	'the guard engaged, and the monitor asked for free heap in the look that engaged it')
  or diag join "\n", @mon[ 0 .. min($#mon, 3) ];
like($m, qr/^cgroup v$v $limit [1-9]\d* [1-9]\d* [1-9]\d*$/, "the monitor read the cgroup v$v limit and asked backends, which returned memory");
like($log, qr/LOG:  glibc_malloc memory monitor: asked \d+ backends? to return \d+ [kM]B of free heap\n.*DETAIL:  cgroup v$v memory usage \d+ MB is \d+% of its \d+ MB limit/,
	"the monitor's log lines show what it asked for and why");
$node->stop('fast', fail_ok => 1);
done_testing();
