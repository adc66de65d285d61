# Bursts of 8 sorts of 3 million md5 strings
# (work_mem = 1GB: about 500 MB of executor memory each, 460 MB of the
# cgroup's usage, 630 MB mapped at their peak) started at once in a real
# cgroup v1 of 1200 MB, from an idle server, in three configurations:
#
#  1. track_statements = top, the sort recorded once alone first,
#     memory_wait = 0: what fits is admitted with its need at once, the
#     others run with grants and fail early;
#  2. the same with the default memory_wait (30 s): the others wait; a
#     pair whose wait runs out runs with a grant and grows from within
#     (a pair of sorts takes about 7 s here: the last pair of a burst
#     waits about 20 s);
#  3. track_statements = off (nothing recorded: no admission, no grants),
#     the monitor's looks alone.
#
# In all three the kernel must kill nothing and no session may be lost (a
# burst the guard lets outrun it would restart the server).  Recorded, a
# sort completes in every burst; in 1 and 2 what fits by the recorded
# mapped need at a burst's start completes (2; the test waits for the
# usage to let 2 fit); in 2 a sort that does not complete is one whose
# wait ran out, and with GM_TEST_LONG at least 95% of all sorts complete
# (160 of 160 in 20 bursts here; in 2 bursts of a slower CI run, the
# last pair's wait ran out: 6 of 8 each).  Not recorded, the monitor's
# looks alone hold the bursts: sorts complete, but not in every burst for sure
# (2 in 57 bursts of 60 here, 1 in 3; CI saw one burst of 8 where none
# did), so at most one burst in ten (at least one) may complete none, and
# a burst where none did prints its errors.  2 bursts per configuration
# (about 3 minutes); with GM_TEST_LONG=1, GM_TEST_LONG_BURSTS (default 20,
# about 22 minutes).
#
# Needs a cgroup v1 memory directory writable by the test's user, named by
# GM_TEST_CGROUP_V1.  The measurements are printed (diag), passing or not.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

my $cg = test_cgroup_v1();

my $MB = 2**20;
my $limit = 1200 * $MB;
my $K = 8;
my $bursts = $ENV{GM_TEST_LONG} ? $ENV{GM_TEST_LONG_BURSTS} || 20 : 2;
my $rows = 3_000_000;
my $sort = "SELECT count(*) FROM (SELECT md5(i::text) FROM generate_series(1, $rows) i ORDER BY 1) s";

my $node = new_node('bigbursts', "shared_buffers = 16MB\nmax_connections = 40\n"
	  . "glibc_malloc.track_statements = top\n", no_start => 1);
$node->start;
enter_cgroup_v1($node, $cg, $limit);
$node->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');
ok(wait_for(sub { (guard_counts($node)->[2] || 0) > 0 }, 10), "the monitor read the cgroup's limit");

sub cg_read { my $v = slurp_file("$cg/$_[0]"); chomp $v; return $v }
sub kills { cgroup_v1_oom_kills($cg) }

# Recorded once alone: its peaks, and what it adds to the cgroup's usage.
write_file("$cg/memory.max_usage_in_bytes", '0');
my $usage0 = cg_read('memory.usage_in_bytes');
$node->safe_psql('postgres', "SET work_mem = '1GB'; $sort", timeout => 600);
my $charge = cg_read('memory.max_usage_in_bytes') - $usage0;
my ($exec, $mapped) = split /\|/, $node->safe_psql('postgres',
	'SELECT max(max_exec_peak_bytes), max(max_mapped_peak_bytes) FROM glibc_malloc_statements');
diag sprintf('one sort: %.0f MB of executor memory, %.0f MB mapped, %.0f MB of the cgroup\'s usage',
	$exec / $MB, ($mapped || 0) / $MB, $charge / $MB);

# One burst, from a server where 2 fit by the recorded mapped need as the
# monitor last saw the usage (waited for, up to 30 s): returns completed,
# out of memory, other, the cgroup's peak, and how many fit at its start.
sub burst
{
	my ($wait) = @_;
	my $g;
	wait_for(sub { $g = guard_counts($node); $g->[0] eq 'f' && $g->[1] < $limit / 4 }, 60);
	# With 32 MB to spare: the admission counts the usage of a later look.
	wait_for(sub { $g = guard_counts($node); $g->[1] <= $g->[2] - 2 * $mapped - 32 * $MB }, 30) if $mapped;
	my $fit = $mapped ? int(($g->[2] - $g->[1] - 32 * $MB) / $mapped) : 0;
	write_file("$cg/memory.max_usage_in_bytes", '0');
	my $offset = -s $node->logfile;
	my @runs = map { GlibcMallocTest::start_query($node, $sort, "SET work_mem = '1GB'",
		$wait eq 'default' ? 'RESET glibc_malloc.memory_wait' : "SET glibc_malloc.memory_wait = '$wait'") } 1 .. $K;
	my ($c, $o, $x) = (0, 0, 0);
	for my $r (map { finish_query($_) } @runs)
	{
		if ($r->{out} =~ /^$rows$/m) { $c++ }
		elsif ($r->{err} =~ /out of memory/) { $o++ }
		else { $x++ }
	}
	# None completed: what each sort failed on, for the record.
	diag join "\n", grep { /out of memory|Failed on request/ } split /\n/, substr(slurp_file($node->logfile), $offset)
	  if $c == 0;
	return ($c, $o, $x, cg_read('memory.max_usage_in_bytes'), $fit);
}

for my $config ([ 'recorded, memory_wait 0', 'top', '0' ], [ 'recorded, the default memory_wait', 'top', 'default' ],
	[ 'not recorded (track_statements off)', 'none', '0' ])
{
	my ($name, $track, $wait) = @$config;
	$node->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.track_statements = '$track'");
	$node->reload;
	my $kills0 = kills();
	my $g0 = guard_counts($node);
	my (@per, @short, $oom, $other, $top, $restarts);
	my $t0 = time;
	for my $b (1 .. $bursts)
	{
		my ($c, $o, $x, $peak, $fit) = burst($wait);
		push @per, $c;
		push @short, "burst $b: $c completed where $fit fit" if $c < ($fit < 2 ? $fit : 2);
		$oom += $o;
		$other += $x;
		$top = $peak if !defined $top || $peak > $top;
		# A kill restarts the server (restart_after_crash = on), or ends
		# the postmaster too: started again.
		if (!-f $node->data_dir . '/postmaster.pid')
		{
			$node->start;
			$restarts++;
		}
		elsif ($x > 0)
		{
			$node->poll_query_until('postgres', 'SELECT true');
			$restarts++;
		}
	}
	my $kills = kills() - $kills0;
	my $g1 = guard_counts($node);
	diag sprintf('%s: %d bursts of %d in %.0f s: completed per burst %s; %d out of memory, %d other (lost), %d OOM kills, %d restarts, the cgroup peaked at %.0f MB of %.0f MB; %d waited, %d waits ran out',
		$name, $bursts, $K, time - $t0, "@per", $oom, $other // 0, $kills, $restarts // 0, $top / $MB, $limit / $MB,
		$g1->[3] - $g0->[3], $g1->[6] - $g0->[6]);
	is($kills, 0, "$name: the kernel killed nothing in $bursts bursts");
	is($other // 0, 0, "$name: no session lost");
	if ($track eq 'none')
	{
		my $empty_ok = $bursts >= 20 ? int($bursts / 10) : 1;
		my $done = 0;
		$done += $_ for @per;
		ok(scalar(grep { $_ < 1 } @per) <= $empty_ok && $done > 0, "$name: sorts complete in all bursts but at most $empty_ok");
		next;
	}
	is(scalar(grep { $_ < 1 } @per), 0, "$name: a sort completes in every burst");
	if ($wait eq '0')
	{
		is(scalar(@short), 0, "$name: what fits at a burst's start completes (up to 2: 3 never fit)")
		  or diag join "\n", @short;
	}
	else
	{
		my $done = 0;
		$done += $_ for @per;
		# (the last pair's wait runs out where a pair takes more than a
		# third of memory_wait: that one's wait, not an admitted sort)
		cmp_ok($bursts * $K - $done, '<=', $g1->[6] - $g0->[6],
			"$name: a sort that did not complete is one whose wait ran out (none admitted failed)");
		is(scalar(@short), 0, "$name: what fits at a burst's start completes")
		  or diag join "\n", @short;
		cmp_ok($done, '>=', 0.95 * $bursts * $K, "$name: at least 95% complete") if $ENV{GM_TEST_LONG};
	}
}

$node->stop('fast');
done_testing();
