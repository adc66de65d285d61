# The memory guard admits a recorded utility statement as it admits a
# query.  In a real cgroup v1 of 800 MB (the guard's target 736 MB):
#
#  - a CREATE INDEX whose sort takes about 100 MB (maintenance_work_mem
#    1GB, not parallel) is recorded by what its process mapped (its VmPeak
#    growth): no executor runs in it, so it has no executor peak;
#  - another process of the container holds the usage so that the room up
#    to the target fits the index build or a recorded sort query of about
#    the same size, not both;
#  - session A's sort query is admitted and, its sort done, waits for an
#    advisory lock, its memory still mapped;
#  - session B's CREATE INDEX, recorded, does not fit beside it: it waits
#    for memory (glibc_malloc_guard.waits, its row's waits in
#    glibc_malloc_statements) until A ends, then is admitted and completes.
#    Without the admission it ran at once on the share A's memory left,
#    and got `out of memory`;
#  - COMMIT and SET never wait; 0 OOM kills.
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
my $limit = 800 * $MB;
my $rows = 600_000;

my $kills_before = cgroup_v1_oom_kills($cg);
my @fillers;
END { local $?; $_->kill_kill for @fillers }

my $node = new_node('guardutility', "shared_buffers = 16MB\nmax_connections = 20\n"
	  . "glibc_malloc.track_statements = top\nmax_parallel_maintenance_workers = 0\n", no_start => 1);
$node->start;
enter_cgroup_v1($node, $cg, $limit);
$node->safe_psql('postgres', q{
CREATE EXTENSION glibc_malloc;
CREATE TABLE t AS SELECT md5(i::text) AS x FROM generate_series(1, 600000) i;
VACUUM ANALYZE t;
CREATE FUNCTION gate(k int) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_advisory_xact_lock_shared(k);
	RETURN 0;
END $$;
});
ok(wait_for(sub { (guard_counts($node)->[2] || 0) > 0 }, 10), "the monitor read the cgroup's limit");

my $ci = "CREATE INDEX t_x ON t (x)";
my $q = "SELECT count(*) + gate(1) FROM (SELECT md5(i::text) FROM generate_series(1, $rows) i ORDER BY 1) s";

# Each recorded large, in a fresh backend (a new VmPeak).
$node->safe_psql('postgres', "SET maintenance_work_mem = '1GB'; $ci; DROP INDEX t_x");
$node->safe_psql('postgres', "SET work_mem = '1GB'; $q");
# (the largest mapped without an executor: the CREATE INDEX, not the
# VACUUM ANALYZE of a fresh table)
my ($ci_id, $ci_exec, $ci_n, $ci_need) = split /\|/, $node->safe_psql('postgres',
	"SELECT queryid, exec_measured, mapped_measured, max_mapped_peak_bytes FROM glibc_malloc_statements "
	  . "WHERE toplevel AND max_exec_peak_bytes IS NULL ORDER BY max_mapped_peak_bytes DESC NULLS LAST LIMIT 1");
my ($q_peak, $q_need) = split /\|/, $node->safe_psql('postgres',
	"SELECT max_exec_peak_bytes, coalesce(max_mapped_peak_bytes, 0) FROM glibc_malloc_statements "
	  . "WHERE toplevel ORDER BY max_exec_peak_bytes DESC NULLS LAST LIMIT 1");
$q_need ||= 1.25 * $q_peak;
diag sprintf('CREATE INDEX maps %.1f MB (%d runs measured); the sort query needs %.1f MB (executor %.1f MB)',
	($ci_need || 0) / $MB, $ci_n, $q_need / $MB, $q_peak / $MB);
is($ci_exec, 0, 'CREATE INDEX has no executor peak (exec_measured 0)');
cmp_ok($ci_n, '>=', 1, 'its mapped peak is measured (mapped_measured)');
cmp_ok($ci_need || 0, '>=', 40 * $MB, 'what it maps: its index sort');

# The room up to the target: each fits alone, not both.
my $max = $ci_need > $q_need ? $ci_need : $q_need;
my $want = 1.2 * $max;
sub room { my $g = guard_counts($node); return $g->[2] - $g->[1] }
for my $try (1 .. 20)
{
	sleep 0.5;
	my $room = room();
	last if abs($room - $want) < 0.1 * $max;
	push @fillers, start_filler($cg, $room - $want) if $room > $want;
	last if $room < $want;
}
my $room = room();
diag sprintf('room %.0f MB: %.2f of the larger need; together they need %.0f MB', $room / $MB, $room / $max, ($ci_need + $q_need) / $MB);
ok($room >= $max && $room < $ci_need + $q_need, 'the room fits either, not both');

# A: the sort query, admitted; its sort done, it waits for lock 1, which C holds.
my $c = $node->background_psql('postgres');
$c->query_safe('SELECT pg_advisory_lock(1)');
my $g0 = guard_counts($node);
my $a = GlibcMallocTest::start_query($node, $q, "SET work_mem = '1GB'");
ok(wait_for(sub { $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'SELECT count(*) + gate(1)%'") == 1 }, 60),
	'A sorted and waits for its lock');
my $g1 = guard_counts($node);
is($g1->[5] - $g0->[5], 1, 'A was admitted with a reservation (admissions + 1)');

# B: the CREATE INDEX does not fit beside A's memory: it waits, then runs.
my $s0 = $node->safe_psql('postgres', "SELECT waits FROM glibc_malloc_statements WHERE toplevel AND queryid = $ci_id");
my $b = GlibcMallocTest::start_query($node, $ci, "SET maintenance_work_mem = '1GB'", "SET glibc_malloc.memory_wait = '60s'");
ok(wait_for(sub { $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Extension' AND query LIKE 'CREATE INDEX%'") == 1 }, 30),
	'B (CREATE INDEX) waits for memory (wait event type Extension)');
sleep 1;
$c->query_safe('SELECT pg_advisory_unlock(1)');
$a = GlibcMallocTest::finish_query($a);
$b = GlibcMallocTest::finish_query($b);
my $g2 = guard_counts($node);
diag sprintf('B took %.1f s; waits %d, admissions %d, wait_timeouts %d, guard_errors %d',
	$b->{secs}, $g2->[3] - $g1->[3], $g2->[5] - $g1->[5], $g2->[6] - $g1->[6], $g2->[7] - $g0->[7]);
is($a->{err}, '', 'A completes');
is($b->{err}, '', 'B completes (without the admission it got out of memory)') or diag $b->{err};
is($g2->[3] - $g1->[3], 1, 'B waited (glibc_malloc_guard.waits + 1)');
is($g2->[5] - $g1->[5], 1, 'and was admitted with a reservation (admissions + 1)');
is($node->safe_psql('postgres', "SELECT waits FROM glibc_malloc_statements WHERE toplevel AND queryid = $ci_id") - $s0, 1,
	"its row in glibc_malloc_statements counts the wait");
is($g2->[7] - $g0->[7], 0, 'no guard errors');

# Inside a transaction block (DDL before it may hold locks others queue
# behind) it does not wait: beside A again, it runs at once with a grant,
# and completes or gets out of memory.
$c->query_safe('SELECT pg_advisory_lock(1)');
$a = GlibcMallocTest::start_query($node, $q, "SET work_mem = '1GB'");
ok(wait_for(sub { $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'SELECT count(*) + gate(1)%'") == 1 }, 60),
	'A sorted again and waits for its lock');
my $g4 = guard_counts($node);
$b = GlibcMallocTest::finish_query(GlibcMallocTest::start_query($node, "BEGIN; $ci; COMMIT",
	"DROP INDEX t_x", "SET maintenance_work_mem = '1GB'", "SET glibc_malloc.memory_wait = '60s'"));
my $g5 = guard_counts($node);
$c->query_safe('SELECT pg_advisory_unlock(1)');
$a = GlibcMallocTest::finish_query($a);
diag sprintf('in a transaction block: %.1f s, waits %d, unreserved_runs %d: %s', $b->{secs},
	$g5->[3] - $g4->[3], $g5->[9] - $g4->[9], $b->{err} || 'completed');
is($g5->[3] - $g4->[3], 0, 'in a transaction block, CREATE INDEX does not wait');
is($g5->[9] - $g4->[9], 1, 'it runs at once with a grant (unreserved_runs + 1)');
like($b->{err}, qr/^(|.*ERROR:  out of memory.*)$/s, 'and completes or gets out of memory');
is($a->{err}, '', 'A completes');

# Transaction control and SET never wait, whatever they record.
my $g3 = guard_counts($node);
$node->safe_psql('postgres', "BEGIN; SET LOCAL work_mem = '64MB'; SHOW work_mem; COMMIT");
is(guard_counts($node)->[3] - $g3->[3], 0, 'BEGIN, SET, SHOW and COMMIT do not wait');

is(cgroup_v1_oom_kills($cg), $kills_before, 'the kernel OOM-killed nothing');
$_->kill_kill for @fillers;
@fillers = ();
$c->quit;
$node->stop('fast');
done_testing();
