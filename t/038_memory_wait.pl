# glibc_malloc.memory_wait: while the memory guard is engaged, a top-level
# statement whose query's recorded executor peak does not fit the headroom
# left waits for memory instead of failing, admitted in arrival order with
# a reservation.  In a real cgroup v1 of 800 MB (the guard's target 736 MB),
# another process of the container holds the usage so that about 3 sorts
# fit the headroom:
#
#  - bursts of 8 recorded sorts started at once: with memory_wait long
#    enough, at least 95 % complete, and the waits are counted
#    (glibc_malloc_guard, glibc_malloc_statements); with memory_wait = 0 the
#    same burst is measured for comparison (printed, not asserted);
#  - a waiter (a sort recorded larger than the headroom: it never fits) is
#    cancelled by pg_cancel_backend and by statement_timeout, shows its own
#    wait event, and gives up at once, with an error, when another
#    session's ALTER TABLE waits for a lock it holds;
#  - 0 OOM kills, 0 restarts.
#
# Needs a cgroup v1 memory directory writable by the test's user, named by
# GM_TEST_CGROUP_V1.  The measurements are printed (diag), passing or not.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

my $cg = test_cgroup_v1();

my $MB = 2**20;
my $limit = 800 * $MB;
my $K = 8;				# sorts per burst
my $bursts = 3;			# bursts with memory_wait (issue 32's runs: 10)
my $rows = 300_000;		# a sort of about 50 MB (measured below)
my $sort = "SELECT count(*) FROM (SELECT md5(i::text) FROM generate_series(1, $rows) i ORDER BY 1) s";
my $big_rows = 4 * $rows;	# recorded larger than the headroom: never admitted
my $big = "SELECT count(*) FROM (SELECT md5(i::text) || 'big' FROM generate_series(1, $big_rows) i ORDER BY 1) s";

sub oom_kills { cgroup_v1_oom_kills($cg) }
# The cgroup is the suite's: the kills of earlier tests are in its count.
my $kills_before = oom_kills();

my $node = new_node('memwait', "restart_after_crash = on\nshared_buffers = 16MB\nmax_connections = 40\n"
	  . "glibc_malloc.track_statements = top\n", no_start => 1);
$node->start;
enter_cgroup_v1($node, $cg, $limit);
$node->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');
$node->safe_psql('postgres', 'CREATE TABLE t (a int); INSERT INTO t VALUES (1)');
my $offset = -s $node->logfile;

# The sorts' sizes, recorded with the guard not engaged.
$node->safe_psql('postgres', "SET work_mem = '1GB'; $sort; $big");
my ($peak, $big_peak) = split /\|/, $node->safe_psql('postgres',
	"SELECT max(max_exec_peak_bytes) FILTER (WHERE max_exec_peak_bytes < $big_rows * 100), "
	  . "max(max_exec_peak_bytes) FROM glibc_malloc_statements");
diag sprintf('the sort peaks at %.1f MB of executor memory, the big one at %.1f MB', $peak / $MB, $big_peak / $MB);
cmp_ok($peak, '>=', 30 * $MB, 'the sort is about 50 MB');

# Another process of the container (a sidecar) holds memory: it moves into
# the cgroup first, then touches its bytes, so that they are charged there.
my @fillers;
sub fill { push @fillers, start_filler($cg, $_[0]) }

sub guard
{
	[ split /\|/, $node->safe_psql('postgres',
		'SELECT engaged, usage_bytes, target_bytes, waits, wait_time, admissions, wait_timeouts, guard_errors FROM glibc_malloc_guard') ]
}

# The usage into the engaged band: headroom between 2.7 and 3.2 sorts (a
# statement's need is its recorded peak times 1.25: two fit).
my $want_lo = 2.7 * $peak;
my $want_hi = 3.2 * $peak;
for my $try (1 .. 20)
{
	sleep 0.5;
	my ($engaged, $usage, $target) = @{ guard() };
	my $headroom = $target - $usage;
	last if $headroom <= $want_hi && $headroom >= $want_lo;
	fill($headroom - ($want_lo + $want_hi) / 2) if $headroom > $want_hi;
	last if $headroom < $want_lo;
}
my $g = guard();
diag sprintf('usage %.0f MB, target %.0f MB: headroom %.0f MB (%.1f sorts)',
	$g->[1] / $MB, $g->[2] / $MB, ($g->[2] - $g->[1]) / $MB, ($g->[2] - $g->[1]) / $peak);
is($g->[0], 't', 'the guard is engaged');
cmp_ok($big_peak, '>', $g->[2] - $g->[1], 'the big sort is recorded larger than the headroom');

# A query started now in its own session; returns its handle and outputs.
sub start_query
{
	my ($sql, @settings) = @_;
	my %r = (out => '', err => '', sql => $sql);
	$r{h} = IPC::Run::start(
		[ 'psql', '-X', '-At', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
		  (map { ('-c', $_) } @settings, $sql) ],
		'<', \undef, '>', \$r{out}, '2>', \$r{err}, IPC::Run::timeout(300));
	$r{started} = time;
	return \%r;
}

sub finish_query
{
	my ($r) = @_;
	eval { $r->{h}->finish; 1 } or $r->{err} .= "timed out\n";
	$r->{secs} = time - $r->{started};
	return $r;
}

# One burst of $K sorts at once; returns (completed, out of memory, other).
sub burst
{
	my ($wait) = @_;
	# The usage settles (the last burst's free heap is asked back).
	wait_for(sub { my $g = guard(); $g->[2] - $g->[1] >= 2 * $peak }, 15);
	my @runs = map { start_query($sort, "SET work_mem = '1GB'", "SET glibc_malloc.memory_wait = '$wait'") } 1 .. $K;
	my ($completed, $oom, $other) = (0, 0, 0);
	my @secs;
	for my $r (map { finish_query($_) } @runs)
	{
		push @secs, $r->{secs};
		if ($r->{out} =~ /^$rows$/m) { $completed++ }
		elsif ($r->{err} =~ /out of memory/) { $oom++ }
		else { $other++; diag "other result: $r->{out} $r->{err}" }
	}
	@secs = sort { $a <=> $b } @secs;
	diag sprintf('  memory_wait %s: %d of %d completed; each took %.1f s (median), %.1f s (max)',
		$wait, $completed, $K, $secs[ $#secs / 2 ], $secs[-1]);
	return ($completed, $oom, $other);
}

# 1. Bursts without waiting, for comparison.
my ($c0, $o0, $x0) = burst('0');
diag "memory_wait = 0: $c0 of $K completed, $o0 out of memory, $x0 other";

# 2. Bursts with memory_wait long enough.
my $before = guard();
my ($completed, $oom, $other) = (0, 0, 0);
my @per;
for my $b (1 .. $bursts)
{
	my ($c, $o, $x) = burst('120s');
	$completed += $c;
	$oom += $o;
	$other += $x;
	push @per, "$c/$K";
}
my $after = guard();
my ($waits, $wait_ms, $admissions, $timeouts) =
  map { $after->[$_] - $before->[$_] } 3 .. 6;
diag "memory_wait = 120s: completed per burst @per; $oom out of memory, $other other";
diag sprintf('%d waits, %.1f s waited in all (%.1f s each on average), %d admissions, %d timeouts',
	$waits, $wait_ms / 1000, $waits ? $wait_ms / 1000 / $waits : 0, $admissions, $timeouts);
cmp_ok($completed, '>=', 0.95 * $K * $bursts,
	"with memory_wait, at least 95 % of $bursts bursts of $K sorts complete");
is($other, 0, 'no other error');
cmp_ok($waits, '>', 0, 'statements waited (glibc_malloc_guard.waits)');
cmp_ok($wait_ms, '>', 0, 'for some time (wait_time)');
cmp_ok($admissions, '>=', $waits, 'every waiter that ran was admitted with a reservation');
is($timeouts, 0, 'no wait ran out');
my ($swaits, $swait_ms) = split /\|/, $node->safe_psql('postgres',
	"SELECT waits, wait_time FROM glibc_malloc_statements WHERE max_exec_peak_bytes BETWEEN $peak / 2 AND $peak * 2");
cmp_ok($swaits, '>', 0, "the sort's row in glibc_malloc_statements counts its waits");
cmp_ok($swait_ms, '>', 0, 'and its time waited');

# 3. A waiter (the big sort never fits) ...
sub waiting_pid
{
	my $pid;
	wait_for(sub {
		$pid = $node->safe_psql('postgres',
			"SELECT pid FROM pg_stat_activity WHERE query LIKE '%''big''%' AND wait_event_type = 'Extension' AND pid <> pg_backend_pid()");
		$pid ne '';
	}, 30);
	return $pid;
}

# ... cancelled by pg_cancel_backend,
my $r = start_query($big, "SET glibc_malloc.memory_wait = '120s'");
my $pid = waiting_pid();
ok($pid, 'a statement waiting for memory shows the wait event type Extension');
my $event = $node->safe_psql('postgres', "SELECT wait_event FROM pg_stat_activity WHERE pid = " . ($pid || 0));
diag "its wait event: $event";
$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)") if $pid;
finish_query($r);
like($r->{err}, qr/canceling statement due to user request/, 'pg_cancel_backend cancels a waiter');
cmp_ok($r->{secs}, '<', 60, 'long before its memory_wait runs out');

# ... by statement_timeout,
$r = finish_query(start_query($big, "SET glibc_malloc.memory_wait = '120s'", "SET statement_timeout = '2s'"));
like($r->{err}, qr/canceling statement due to statement timeout/, 'statement_timeout cancels a waiter');
cmp_ok($r->{secs}, '<', 60, 'long before its memory_wait runs out');

# ... and gives up at once when ALTER TABLE waits for a lock it holds.
my $errors_before = guard()->[7];
$r = start_query("BEGIN; LOCK TABLE t IN ACCESS SHARE MODE; $big; COMMIT", "SET glibc_malloc.memory_wait = '120s'");
$pid = waiting_pid();
ok($pid, 'a waiter holding a lock on t');
my $t0 = time;
$node->safe_psql('postgres', 'ALTER TABLE t ADD COLUMN b int', timeout => 100);
my $alter_secs = time - $t0;
finish_query($r);
diag sprintf('ALTER TABLE waited %.1f s for the waiter to give up', $alter_secs);
like($r->{err}, qr/gave up waiting for memory: another session waits for a lock this statement holds/, 'the waiter gives up with an error that says why');
unlike($r->{err}, qr/out of memory/, 'not an out of memory');
is(guard()->[7] - $errors_before, 0, 'and not counted in guard_errors');
cmp_ok($alter_secs, '<', 30, 'ALTER TABLE is not stalled for memory_wait');

# A wait that runs out runs the statement as without the wait.
$r = finish_query(start_query("SET work_mem = '4MB'; $big", "SET glibc_malloc.memory_wait = '1s'"));
like($r->{out} . $r->{err}, qr/^$big_rows$|out of memory/m, 'a wait that runs out runs the statement (it completes or gets the guard\'s error)');
is(guard()->[6] - $after->[6], 1, 'and is counted in wait_timeouts');

# Nothing leaked: with every session gone, a recorded sort is admitted at once.
wait_for(sub { my $g = guard(); $g->[2] - $g->[1] >= 2 * $peak }, 15);
$before = guard();
$r = finish_query(start_query($sort, "SET work_mem = '1GB'", "SET glibc_malloc.memory_wait = '120s'"));
like($r->{out}, qr/^$rows$/m, 'after the cancelled waiters, a sort that fits runs');
is(guard()->[3] - $before->[3], 0, 'without waiting: no reservation or queue entry was left behind');

is(oom_kills(), $kills_before, 'the kernel OOM-killed nothing');
my $log = substr(slurp_file($node->logfile), $offset);
unlike($log, qr/terminated by signal|all server processes terminated; reinitializing/, 'no restart');

$_->kill_kill for @fillers;
$node->stop('fast');
done_testing();
