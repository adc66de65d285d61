# The fastest bursts this suite makes, started at once in a real cgroup v1
# of 1200 MB from an idle server, nothing recorded (track_statements =
# none: no admission, the monitor's looks, start shares and the executor's
# checks alone), memory_wait = 0:
#
#  1. 16 connections, each a hash aggregate of 1.5 million md5 strings
#     (work_mem = 256MB, hash_mem_multiplier = 8: the hash table stays in
#     memory, about 250 MB mapped each);
#  2. 8 connections, each a parallel hash join of a table of 1.5 million
#     md5 strings with itself, 2 workers, enable_parallel_hash = off:
#     each of its 3 processes builds its own copy of the hash table in
#     private memory (a parallel-aware hash join's table is shared
#     memory, outside RLIMIT_DATA and the guard).
#
# Then, with the guard engaged, a new session's first statement and a
# parallel worker that each map 600 MB at once.
#
# The kernel must kill nothing, no session may be lost, an aggregate
# completes in every burst, a join in at least one of every 2.  2 bursts of each (GM_TEST_LONG=1:
# GM_TEST_LONG_BURSTS, default 20).  The measurements are printed (diag),
# passing or not.
#
# Needs a cgroup v1 memory directory writable by the test's user, named by
# GM_TEST_CGROUP_V1.
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
my $bursts = $ENV{GM_TEST_LONG} ? $ENV{GM_TEST_LONG_BURSTS} || 20 : 2;
my $rows = 1_500_000;

my $node = new_node('fastbursts', "shared_buffers = 16MB\nmax_connections = 50\n"
	  . "max_worker_processes = 24\nmax_parallel_workers = 24\n"
	  . "glibc_malloc.track_statements = none\n", no_start => 1);
$node->start;
enter_cgroup_v1($node, $cg, $limit);
$node->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');
$node->safe_psql('postgres', "CREATE TABLE keys AS SELECT md5(i::text) k FROM generate_series(1, $rows) i; VACUUM ANALYZE keys");
ok(wait_for(sub { (guard_counts($node)->[2] || 0) > 0 }, 10), "the monitor read the cgroup's limit");

sub cg_read { my $v = slurp_file("$cg/$_[0]"); chomp $v; return $v }

# A kill ends the postmaster too (restart_after_crash = off, as
# CloudNativePG runs it): started again, in the cgroup.  Returns whether.
sub restart_if_down
{
	my $up;
	# After a kill the postmaster shuts down: until it is gone, its pid
	# file stays.
	wait_for(sub { ($up = $node->psql('postgres', 'SELECT 1') == 0) || !-f $node->data_dir . '/postmaster.pid' }, 60);
	return 0 if $up;
	$node->_update_pid(-1);
	$node->start;
	enter_cgroup_v1($node, $cg, $limit);
	return 1;
}

my @serial = ("SET work_mem = '256MB'", "SET hash_mem_multiplier = 8", "SET enable_sort = off",
	"SET max_parallel_workers_per_gather = 0");
my @parallel = ("SET work_mem = '256MB'", "SET hash_mem_multiplier = 8", "SET enable_sort = off",
	"SET max_parallel_workers_per_gather = 2", "SET parallel_setup_cost = 0", "SET parallel_tuple_cost = 0",
	"SET min_parallel_table_scan_size = 0", "SET parallel_leader_participation = on",
	"SET enable_parallel_hash = off", "SET enable_mergejoin = off", "SET enable_nestloop = off");
my $agg_series = "SELECT count(*) FROM (SELECT md5(i::text) FROM generate_series(1, $rows) i GROUP BY 1) s";
my $join = "SELECT count(*) FROM keys a JOIN keys b USING (k)";

# The plans are what the test means: a hash aggregate, and a hash join
# whose workers each build their own hash table.
like(join("\n", map { $node->safe_psql('postgres', join(";\n", @serial, "EXPLAIN $agg_series")) } 1),
	qr/HashAggregate/, 'the serial burst runs a hash aggregate');
my $pplan = $node->safe_psql('postgres', join(";\n", @parallel, "EXPLAIN $join"));
ok($pplan =~ /Workers Planned: 2.*Hash Join/s && $pplan !~ /Parallel Hash/,
	'the parallel burst runs a hash join in 2 workers, each with its own hash table') or diag $pplan;

# One alone: what it adds to the cgroup's usage.
for my $k ([ 'serial aggregate', $agg_series, \@serial ], [ 'parallel join', $join, \@parallel ])
{
	write_file("$cg/memory.max_usage_in_bytes", '0');
	my $u0 = cg_read('memory.usage_in_bytes');
	my $t0 = time;
	$node->safe_psql('postgres', join(";\n", @{ $k->[2] }, $k->[1]), timeout => 600);
	diag sprintf('one %s alone: %.0f MB of the cgroup\'s usage in %.1f s',
		$k->[0], (cg_read('memory.max_usage_in_bytes') - $u0) / $MB, time - $t0);
}

# One burst of $n connections running $sql from an idle server: completed,
# out of memory, other, the cgroup's peak.
sub burst
{
	my ($n, $sql, $settings) = @_;
	my $g;
	wait_for(sub { $g = guard_counts($node); $g->[0] eq 'f' && $g->[1] < $limit / 4 }, 60)
	  or diag "a burst starts with the guard still engaged";
	write_file("$cg/memory.max_usage_in_bytes", '0');
	my @runs = map { GlibcMallocTest::start_query($node, $sql, @$settings, "SET glibc_malloc.memory_wait = 0") } 1 .. $n;
	my ($c, $o, $x, @other) = (0, 0, 0);
	for my $r (map { finish_query($_) } @runs)
	{
		if ($r->{out} =~ /^\d+$/m) { $c++ }
		elsif ($r->{err} =~ /out of memory/) { $o++ }
		else { $x++; push @other, $r->{err} }
	}
	diag "other: $_" for @other[0 .. (@other > 3 ? 2 : $#other)];
	return ($c, $o, $x, cg_read('memory.max_usage_in_bytes'));
}

for my $config ([ '16 hash aggregates', 16, $agg_series, \@serial ],
	[ '8 parallel hash joins (2 workers each)', 8, $join, \@parallel ])
{
	my ($name, $n, $sql, $settings) = @$config;
	my $kills0 = cgroup_v1_oom_kills($cg);
	my (@per, $oom, $other, $top, $restarts);
	my $t0 = time;
	for my $b (1 .. $bursts)
	{
		my ($c, $o, $x, $peak) = burst($n, $sql, $settings);
		push @per, $c;
		$oom += $o;
		$other += $x;
		$top = $peak if !defined $top || $peak > $top;
		if (restart_if_down())
		{
			$restarts++;
		}
		elsif ($x > 0)
		{
			$node->poll_query_until('postgres', 'SELECT true');
			$restarts++;
		}
	}
	my $kills = cgroup_v1_oom_kills($cg) - $kills0;
	diag sprintf('%s: %d bursts in %.0f s: completed per burst %s; %d out of memory, %d other (lost), %d OOM kills, %d restarts, the cgroup peaked at %.0f MB of %.0f MB',
		$name, $bursts, time - $t0, "@per", $oom // 0, $other // 0, $kills, $restarts // 0, $top / $MB, $limit / $MB);
	is($kills, 0, "$name: the kernel killed nothing in $bursts bursts");
	is($other // 0, 0, "$name: no session lost");
	if ($n == 16)
	{
		is(scalar(grep { $_ < 1 } @per), 0, "$name: a statement completes in every burst");
	}
	else
	{
		# A join completes only if its 3 processes all do: in about 1
		# burst of 13 none did.
		my $done = 0;
		$done += $_ for @per;
		cmp_ok($done, '>=', $bursts / 2, "$name: on average at least one completes in every 2 bursts");
	}
}

# While the guard is engaged (a sidecar holds 900 MB of the 1200), 3
# parallel joins whose leaders only gather: each worker builds its own
# hash table, and near its limit takes more from the budget and pauses
# for it, as a leader's executor does (the workers' DEBUG2 lines, relayed
# by the leaders, say so).  Before, only the monitor's looks served the
# workers.
$node->safe_psql('postgres', "CREATE TABLE keys_small AS SELECT * FROM keys LIMIT 400000; VACUUM ANALYZE keys_small");
{
	my $filler = start_filler($cg, 900 * $MB);
	ok(wait_for(sub { guard_counts($node)->[0] eq 't' }, 30), 'a sidecar of 900 MB engages the guard');
	my $kills0 = cgroup_v1_oom_kills($cg);
	my @gather = (@parallel, 'SET parallel_leader_participation = off', 'SET glibc_malloc.memory_wait = 0',
		'SET client_min_messages = debug2');
	my @runs = map { GlibcMallocTest::start_query($node, 'SELECT count(*) FROM keys_small a JOIN keys_small b USING (k)', @gather) } 1 .. 3;
	my ($asks, $got, $done) = (0, 0, 0);
	for my $r (map { finish_query($_) } @runs)
	{
		$asks += () = $r->{err} =~ /glibc_malloc executor share: \d+ .*\(a parallel worker\)$/mg;
		$got += () = $r->{err} =~ /glibc_malloc executor share: [1-9].*\(a parallel worker\)$/mg;
		$done++ if $r->{out} =~ /^\d+$/m;
	}
	diag "3 parallel joins, their leaders only gathering, the guard engaged: the workers asked $asks times, got more $got times; $done of 3 completed";
	cmp_ok($asks, '>', 0, 'the parallel workers, near their limits, asked the budget for more');
	cmp_ok($got, '>', 0, 'and got more');
	is(cgroup_v1_oom_kills($cg) - $kills0, 0, 'the kernel killed nothing');
	restart_if_down();
	$filler->kill_kill;
	wait_for(sub { guard_counts($node)->[0] eq 'f' }, 30);
}

# While the guard is engaged (a sidecar holds 900 MB of the 1200), a
# process it has not limited yet maps 600 MB at once: a new session's
# first statement (the planner folds the constant), and a parallel
# worker.  A limit the monitor sets at its next look could not take back
# what they mapped by then.  Limited from their start, they get "out of
# memory"; the kernel kills nothing.
$node->safe_psql('postgres', "CREATE TABLE one AS SELECT repeat('x', 32) k");
my $filler;
# A test that dies leaves no sidecar behind in the cgroup.
END { $filler->kill_kill if $filler }
{
	$filler = start_filler($cg, 900 * $MB);
	ok(wait_for(sub { guard_counts($node)->[0] eq 't' }, 30), 'a sidecar of 900 MB engages the guard');
	my $force = $node->safe_psql('postgres', 'SHOW server_version_num') >= 160000
	  ? 'debug_parallel_query' : 'force_parallel_mode';
	my @worker = ("SET $force = on", "SET max_parallel_workers_per_gather = 2",
		"SET parallel_leader_participation = off");
	my $in_worker = "SELECT length(repeat(k, 20 * 1024 * 1024)) FROM one";
	for my $case ([ "a new session's first statement", "SELECT length(repeat('x', 600 * 1024 * 1024))" ],
		[ 'a parallel worker', join(";\n", @worker, $in_worker) ])
	{
		my ($name, $sql) = @$case;
		my $kills0 = cgroup_v1_oom_kills($cg);
		my ($oom, $other, $in_a_worker, $first) = (0, 0, 0, 0);
		for my $i (1 .. 3)
		{
			wait_for(sub { guard_counts($node)->[0] eq 't' }, 30);
			# Its DEBUG2 line says whether it limited itself before the look.
			local $ENV{PGOPTIONS} = '-c client_min_messages=debug2';
			my ($rc, $out, $err) = $node->psql('postgres', $sql);
			$first++ if $err =~ /glibc_malloc first limit/;
			# A worker's error reaches the client with its context.
			$in_a_worker++ if $err =~ /parallel worker/;
			if ($err =~ /out of memory/) { $oom++ }
			else { $other++; diag "$name, round $i: rc $rc, out $out, err $err" }
			restart_if_down();
			# The sidecar, if the kernel killed it.
			if (cgroup_v1_oom_kills($cg) > $kills0)
			{
				$filler->kill_kill;
				$filler = start_filler($cg, 900 * $MB);
			}
		}
		my $kills = cgroup_v1_oom_kills($cg) - $kills0;
		diag "$name mapping 600 MB at once, the guard engaged: $oom of 3 out of memory, $kills OOM kills";
		is($kills, 0, "$name that maps 600 MB at once while the guard is engaged: the kernel killed nothing");
		is($oom, 3, "$name: \"out of memory\", 3 times of 3");
		is($in_a_worker, 3, 'the error is the worker\'s, 3 times of 3') if $name =~ /worker/;
		# Not asserted: a session's login transaction takes its slot, and a
		# look between it and the statement limits it as idle first.
		diag "$name: it limited itself before the monitor's look $first times of 3";
	}
	$filler->kill_kill;
}

$node->stop('fast');
done_testing();
