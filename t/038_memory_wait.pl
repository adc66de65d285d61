# glibc_malloc.memory_wait: while the memory guard acts on a limit, a
# top-level statement whose query's recorded executor peak does not fit
# the room left up to the guard's target waits for memory instead of
# failing, admitted in arrival order with a reservation.  In a real cgroup
# v1 of 800 MB (the guard's target 736 MB), another process of the
# container holds the usage so that the server is calm (the guard not
# engaged) with room for 2 sorts by their need:
#
#  - GM_TEST_BURSTS (10) bursts of 8 recorded sorts started at once, and a
#    small query in the middle of each: with memory_wait = 0 the first
#    sorts that fit are admitted at once with a reservation and complete,
#    in every burst, and the rest fail; with memory_wait long enough, at least 95 % complete, the
#    waits counted (glibc_malloc_guard, glibc_malloc_statements); the
#    small query always runs;
#  - a waiter (a sort recorded larger than the room: it never fits) is
#    cancelled by pg_cancel_backend and by statement_timeout, shows its own
#    wait event, and gives up at once, with an error, when another
#    session's ALTER TABLE waits for a lock it holds;
#  - a sort that fits, alone, is admitted without the admission's lock;
#    a backend stopped (gdb) between its read of the budget and its claim
#    while another's big sort is admitted takes its claim back and runs
#    with a grant: two claims without the lock never pass the room;
#  - a query recorded larger than the room, then run small: its need
#    follows its runs down, and it is admitted again (not run with a grant);
#  - 0 OOM kills, 0 restarts.
#
# The server runs with restart_after_crash = off, as CloudNativePG fixes
# it: one OOM kill would end the postmaster (the instance fails over), so
# the postmaster is checked alive after each burst.
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
my $bursts = $ENV{GM_TEST_BURSTS} || 10;	# bursts with and without memory_wait
					# (the chroots of scripts/matrix: 3)
my $rows = 300_000;		# a sort of about 50 MB (measured below)
my $sort = "SELECT count(*) FROM (SELECT md5(i::text) FROM generate_series(1, $rows) i ORDER BY 1) s";
my $big_rows = 2 * $rows;	# recorded larger than the room while a session holds a sort
my $big = "SELECT count(*) FROM (SELECT md5(i::text) || 'big' FROM generate_series(1, $big_rows) i ORDER BY 1) s";

sub oom_kills { cgroup_v1_oom_kills($cg) }
# The cgroup is the suite's: the kills of earlier tests are in its count.
my $kills_before = oom_kills();

my $node = new_node('memwait', "restart_after_crash = off\nshared_buffers = 16MB\nmax_connections = 40\n"
	  . "glibc_malloc.track_statements = top\n", no_start => 1);
$node->start;
enter_cgroup_v1($node, $cg, $limit);
my $postmaster = (split /\n/, slurp_file($node->data_dir . '/postmaster.pid'))[0];
$node->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');
$node->safe_psql('postgres', 'CREATE TABLE t (a int); INSERT INTO t VALUES (1)');
my $offset = -s $node->logfile;

# The sorts' sizes, recorded with the guard not engaged, and what one sort
# alone adds to the cgroup's usage at its peak (its charge).
sub cg_read { my $v = slurp_file("$cg/$_[0]"); chomp $v; return $v }
# The guard acts once the monitor has read the cgroup's limit.
ok(wait_for(sub { (guard_counts($node)->[2] || 0) > 0 }, 10), "the monitor read the cgroup's limit");
write_file("$cg/memory.max_usage_in_bytes", '0');
my $usage0 = cg_read('memory.usage_in_bytes');
$node->safe_psql('postgres', "SET work_mem = '1GB'; $sort");
my $charge = cg_read('memory.max_usage_in_bytes') - $usage0;
$node->safe_psql('postgres', "SET work_mem = '1GB'; $big");
# Each sort's need: what its process mapped at most over its start
# (VmPeak's growth), measured in its fresh backend while the guard acts.
my ($peak, $big_peak, $need, $big_need) = split /\|/, $node->safe_psql('postgres',
	"SELECT max(max_exec_peak_bytes) FILTER (WHERE max_exec_peak_bytes < $big_rows * 100), "
	  . "max(max_exec_peak_bytes), "
	  . "max(max_mapped_peak_bytes) FILTER (WHERE max_exec_peak_bytes < $big_rows * 100), "
	  . "max(max_mapped_peak_bytes) FILTER (WHERE max_exec_peak_bytes >= $big_rows * 100) "
	  . "FROM glibc_malloc_statements WHERE calls > 0");
diag sprintf('the sort peaks at %.1f MB of executor memory, maps %.1f MB (%.2f times; %.1f MB of the cgroup\'s usage), the big one %.1f MB and %.1f MB',
	$peak / $MB, ($need || 0) / $MB, ($need || 0) / $peak, $charge / $MB, $big_peak / $MB, ($big_need || 0) / $MB);
cmp_ok($peak, '>=', 30 * $MB, 'the sort is about 50 MB');
cmp_ok($need || 0, '>=', $peak, "the sort's mapped peak is measured (max_mapped_peak_bytes), at least its executor memory");
cmp_ok($big_need || 0, '>=', $big_peak, "and the big one's");

# Another process of the container (a sidecar) holds memory: it moves into
# the cgroup first, then touches its bytes, so that they are charged there.
my @fillers;
sub fill { push @fillers, start_filler($cg, $_[0]) }

sub guard { guard_counts($node) }
sub room { my $g = guard(); return $g->[2] - $g->[1] }

# A calm server, the guard not engaged, with room up to the guard's target
# for about 4 sorts by their charge.  The burst then starts as bursts do,
# from below the level where the guard engages (160 MB below the target).
# What fits at once is counted as the guard must count it: by the need the
# admission reserves (the recorded mapped peak; a sort maps its doubling
# arrays before it touches them, and the limit is on what is mapped), up
# to the guard's target (its 64 MB margin is the kernel's).
my $want_lo = 3.8 * $charge;
my $want_hi = 4.2 * $charge;
for my $try (1 .. 20)
{
	sleep 0.5;
	my $room = room();
	last if $room <= $want_hi && $room >= $want_lo;
	fill($room - ($want_lo + $want_hi) / 2) if $room > $want_hi;
	last if $room < $want_lo;
}
my $g = guard();
my $room = $g->[2] - $g->[1];
my $fit = int($room / $need);
diag sprintf('usage %.0f MB, target %.0f MB, limit %.0f MB: room %.0f MB, %d sorts fit at once by their need (%.1f by their charge; %.1f by their charge up to the limit)',
	$g->[1] / $MB, $g->[2] / $MB, $limit / $MB, $room / $MB, $fit, $room / $charge, ($limit - $g->[1]) / $charge);
is($g->[0], 'f', 'the guard is not engaged before the bursts');
cmp_ok($fit, '>=', 2, 'at least 2 sorts fit at once');
cmp_ok($big_need, '<', $room, 'the big sort fits the room of a calm server');

sub start_query { GlibcMallocTest::start_query($node, @_) }

# A session that watches pg_stat_activity for waiters.
my $watch = $node->background_psql('postgres');

# One burst of $K sorts at once, and a small query in the middle of it;
# returns (completed, out of memory, other, the small query's result, the
# seconds each sort waited: seen with the wait event type Extension in
# pg_stat_activity, from the first sighting to the last, polled about every
# 50 ms).
my $unhinted = 0;
sub burst
{
	my ($wait) = @_;
	# The usage settles (the last burst's sessions are gone).
	wait_for(sub { room() >= $want_lo }, 15);
	write_file("$cg/memory.max_usage_in_bytes", '0');
	my $g0 = guard();
	my @runs = map { start_query($sort, "SET work_mem = '1GB'", "SET glibc_malloc.memory_wait = '$wait'") } 1 .. $K;
	my $t0 = time;
	my ($small, %first, %last);
	my $empty = 0;
	while (time - $t0 < 150)
	{
		$small = start_query('SELECT count(*) FROM generate_series(1, 1000)', "SET glibc_malloc.memory_wait = '$wait'")
		  if !$small && time - $t0 >= 0.3;
		my $pids = $watch->query_safe(
			"SELECT coalesce(string_agg(pid::text, ','), '') FROM pg_stat_activity "
			  . "WHERE wait_event_type = 'Extension' AND query LIKE '%md5%' AND pid <> pg_backend_pid()");
		my $now = time;
		for my $p (grep { $_ ne '' } split /,/, $pids)
		{
			$first{$p} //= $now;
			$last{$p} = $now;
		}
		$empty = $pids eq '' ? $empty + 1 : 0;
		# The small query's time is to its end, not to this loop's.
		if ($small && !$small->{ended})
		{
			eval { $small->{h}->pump_nb; 1 };
			$small->{ended} = $now unless $small->{h}->pumpable;
		}
		last if $small && $empty >= 3 && $now - $t0 > 1;
		sleep 0.05;
	}
	$small = finish_query($small);
	my $burst_peak = cg_read('memory.max_usage_in_bytes');
	my ($completed, $oom, $other) = (0, 0, 0);
	my @secs;
	for my $r (map { finish_query($_) } @runs)
	{
		push @secs, $r->{secs};
		if ($r->{out} =~ /^$rows$/m) { $completed++ }
		elsif ($r->{err} =~ /out of memory/)
		{
			$oom++;
			# Every failure under the guard says why: the grant's HINT, or
			# the guard's limit's.  With a wait a failure is rare: each
			# says what it failed on.
			if ($r->{err} !~ /\nHINT:  (The statement's recorded memory need did not fit the room left below the server's memory limit when it started|The server is close to its memory limit: glibc_malloc\.memory_guard limited)/)
			{
				$unhinted++;
				diag "out of memory without the guard's HINT: $r->{err}";
			}
			elsif ($wait ne '0') { diag "  memory_wait $wait: out of memory after $r->{secs} s: $r->{err}" }
		}
		else { $other++; diag "other result: $r->{out} $r->{err}" }
	}
	my $g1 = guard();
	my @waited = sort { $a <=> $b } ((map { $last{$_} - $first{$_} } keys %first), (0) x ($K - keys %first));
	# What the guard counted in this burst: if sorts fail with a wait, how
	# they ran (admitted, unreserved, timed out, skipped as hopeless).
	diag sprintf('  memory_wait %s: the guard counted %d waits, %d admissions, %d unreserved runs, %d timeouts, %d skips, %d guard errors; engaged after: %s',
		$wait, (map { $g1->[$_] - $g0->[$_] } 3, 5, 9, 6, 8, 7), $g1->[0])
	  if $wait ne '0';
	@secs = sort { $a <=> $b } @secs;
	diag sprintf('  memory_wait %s: the cgroup peaked at %.0f MB (target %.0f MB, limit %.0f MB)',
		$wait, $burst_peak / $MB, guard()->[2] / $MB, $limit / $MB);
	diag sprintf('  memory_wait %s: %d of %d completed, %d out of memory; each took %.1f s (median), %.1f s (max); %d seen waiting, waited %.1f s (median), %.1f s (max); the small query %s in %.2f s',
		$wait, $completed, $K, $oom, $secs[ $#secs / 2 ], $secs[-1], scalar(keys %first), $waited[ $#waited / 2 ], $waited[-1],
		$small->{out} =~ /^1000$/m ? 'ran' : "FAILED: $small->{err}", $small->{secs});
	return ($completed, $oom, $other, $small->{out} =~ /^1000$/m && $small->{err} eq '', \@waited, scalar(keys %first), $burst_peak);
}

# Bursts of $K sorts where $fit fit: with memory_wait = $wait, returns the
# completions per burst, and counts the failures of all.
sub bursts
{
	my ($wait) = @_;
	my (@per, $oom, $other, $small_failed, @med, @max, $seen, $dead, $top);
	for my $b (1 .. $bursts)
	{
		my ($c, $o, $x, $small, $waited, $n, $peak) = burst($wait);
		$top = $peak if !defined $top || $peak > $top;
		$dead++ unless kill 0, $postmaster;
		$seen += $n;
		push @per, $c;
		push @med, sprintf('%.1f', $waited->[ $#$waited / 2 ]);
		push @max, sprintf('%.1f', $waited->[-1]);
		$oom += $o;
		$other += $x;
		$small_failed++ unless $small;
	}
	is($dead // 0, 0, "memory_wait = $wait: the postmaster (restart_after_crash = off) is alive after each of $bursts bursts");
	diag "memory_wait = $wait: completed per burst @per (of $K; $fit fit at once)";
	diag "  waited per burst, median (s): @med; max (s): @max";
	my $target = guard()->[2];
	cmp_ok($top, '<', $target, sprintf('memory_wait = %s: no burst crossed the guard\'s target (the cgroup peaked at %.0f MB; target %.0f MB, limit %.0f MB)',
		$wait, $top / $MB, $target / $MB, $limit / $MB));
	return (\@per, $oom // 0, $other // 0, $small_failed // 0, $seen);
}

# 1. Without waiting: the first sorts that fit are admitted at once with
# a reservation, and complete; the rest run without one, and fail.
# A running sort near its limit pauses (at most 250 ms) until the guard's
# look raises it, with the same wait event: executor_shares counts those.
sub executor_shares { $node->safe_psql('postgres', 'SELECT executor_shares FROM glibc_malloc_guard') }
my $before0 = guard();
my $shares0 = executor_shares();
my ($per, $o0, $x0, $s0, $seen0) = bursts('0');
my $after0 = guard();
$shares0 = executor_shares() - $shares0;
# An admission reserves what the sort maps (its recorded mapped peak);
# the others run with grants, their own limits at their share of what is
# left, so the burst cannot outgrow the room before the monitor's next
# look: what fits completes in every burst.
is(scalar(grep { $_ < $fit } @$per), 0, "memory_wait = 0: the $fit sorts that fit complete in each of $bursts bursts");
is($x0, 0, 'the others get "out of memory", no other error');
is($unhinted, 0, "each of the $o0 with the guard's HINT (a grant's limit is the guard's, also lifted before the error is reported)");
is($s0, 0, 'a small query in the middle of each burst runs');
is($after0->[3] - $before0->[3], 0, 'nobody waited (glibc_malloc_guard.waits)');
cmp_ok($seen0, '<=', $shares0,
	"and nobody was seen waiting in pg_stat_activity but sorts that paused for their limit (executor_shares: $shares0)");
cmp_ok($after0->[5] - $before0->[5], '>=', $fit * $bursts,
	'the first sorts of each burst were admitted at once, with a reservation (admissions)');
my $unreserved0 = $after0->[9] - $before0->[9];
cmp_ok($unreserved0, '>', 0, "the others ran at once with a grant (unreserved_runs: $unreserved0)");
cmp_ok($unreserved0 + $after0->[5] - $before0->[5], '<=', $K * $bursts, 'each sort admitted or unreserved, not both');
# A sort that fits, alone: admitted at once without the admission's lock
# (its DEBUG2 line, sent to the client), the sums of the budget counting
# nothing taken before it.  (A look of the monitor that holds the lock
# at that instant sends it the locked way: tried up to 3 times.)
my ($alone_out, $alone_line);
for my $try (1 .. 3)
{
	wait_for(sub { room() >= $want_lo }, 15);
	my $alone_err = '';
	$node->psql('postgres', "SET client_min_messages = debug2; SET work_mem = '1GB'; SET glibc_malloc.memory_wait = 0; $sort",
		stdout => \$alone_out, stderr => \$alone_err);
	($alone_line) = $alone_err =~ /(glibc_malloc memory wait: admitted: .*)/;
	last if ($alone_line // '') =~ /without the lock$/;
}
diag $alone_line // 'no admission line';
like($alone_line // '', qr/^glibc_malloc memory wait: admitted: room \d+ outstanding 0 ceiling \d+ waiters 0 without the lock$/,
	'a sort that fits, alone, is admitted at once without the admission\'s lock');
like($alone_out // '', qr/^$rows$/m, 'and completes');

# Two claims without the lock that race: backend A reads the budget and
# finds the big sort fits, and stops there (gdb, at gm_shmem_wait_claim)
# while backend B's big sort is admitted at once; A then claims: its
# bytes and B's do not fit the room together, so it takes them back and
# goes the locked way, where it runs with a grant (memory_wait = 0).  The
# monitor is stopped (SIGSTOP) from before A's read to after its claim:
# its looks take the lock, which alone would send A the locked way.
# (If the test dies meanwhile: gdb lets A go, and the monitor goes on.)
my ($monitor_stopped, $race_go, $race_gdb);
END
{
	write_file($race_go, '') if $race_go;
	eval { $race_gdb->kill_kill; 1 } if $race_gdb;
	kill 'CONT', $monitor_stopped if $monitor_stopped;
}
SKIP:
{
	skip 'gdb not installed', 4 unless system('gdb --version > /dev/null 2>&1') == 0;
	wait_for(sub { room() >= $want_lo }, 15);
	my $room2 = room();
	cmp_ok(2 * $big_need, '>', $room2, sprintf('two big sorts do not fit the room together (%.0f MB each, room %.0f MB)',
		$big_need / $MB, $room2 / $MB));
	my $holder = $node->background_psql('postgres');
	$holder->query_safe('SELECT pg_advisory_lock(4242)');
	my ($monitor) = $holder->query_safe('SELECT pid FROM glibc_malloc_monitor') =~ /(\d+)/;
	my ($set, $stop, $go) = map { $node->basedir . "/claim_$_" } qw(set stopped go);
	unlink $set, $stop, $go;
	$race_go = $go;
	my $qa = start_query($big, 'SELECT pg_backend_pid()', 'SELECT pg_advisory_lock(4242)', 'SET client_min_messages = debug2',
		"SET work_mem = '1GB'", 'SET glibc_malloc.memory_wait = 0');
	my $apid;
	wait_for(sub { eval { $qa->{h}->pump_nb; 1 }; ($apid) = $qa->{out} =~ /^(\d+)$/m; defined $apid }, 30);
	my ($gout, $gerr) = ('', '');
	# (gdb runs its commands in order: a file once the breakpoint is set,
	# another once A stopped at it, then it waits for the test's, at most
	# 60 s.)
	$race_gdb = IPC::Run::start([ 'gdb', '-nx', '-batch', '-p', $apid, '-ex', 'set pagination off',
			'-ex', 'handle all nostop noprint pass', '-ex', 'break gm_shmem_wait_claim',
			'-ex', "shell touch $set", '-ex', 'continue', '-ex', "shell touch $stop",
			'-ex', "shell for i in \$(seq 1200); do [ -e $go ] && break; sleep 0.05; done", '-ex', 'detach' ],
		'<', \undef, '>', \$gout, '2>', \$gerr, IPC::Run::timeout(180));
	wait_for(sub { -e $set }, 60);
	# The admissions before; nothing reads the monitor's state while it is stopped.
	my $g0 = guard();
	kill 'STOP', $monitor;
	$monitor_stopped = $monitor;
	# A goes on to its sort once the advisory lock is let go, and stops at its claim.
	$holder->query_safe('SELECT pg_advisory_unlock(4242)');
	my $stopped = wait_for(sub { -e $stop }, 60);
	# B is admitted at once: its DEBUG2 line.
	my $qb = start_query($big, 'SET client_min_messages = debug2', "SET work_mem = '1GB'", 'SET glibc_malloc.memory_wait = 0');
	my $b_admitted = wait_for(sub { eval { $qb->{h}->pump_nb; 1 }; $qb->{err} =~ /glibc_malloc memory wait: admitted: / }, 30);
	write_file($go, '');
	eval { $race_gdb->finish; 1 };
	$race_gdb = undef;
	# A's admission is over once its DEBUG2 line came (its statement runs on).
	wait_for(sub { $qa->{err} =~ /glibc_malloc memory wait: (admitted|granted): / || !eval { $qa->{h}->pump_nb; 1 } }, 30);
	kill 'CONT', $monitor;
	$monitor_stopped = undef;
	$qa = finish_query($qa);
	$qb = finish_query($qb);
	$holder->quit;
	my $g1 = guard();
	my ($a_line) = $qa->{err} =~ /(glibc_malloc memory wait: (?:admitted|granted): .*)/;
	my $hit = $gout =~ /^Breakpoint 1, .*gm_shmem_wait_claim/m;
	diag sprintf('backend A stopped at its claim: %s; B admitted meanwhile: %s; A: %s; admissions +%d; B %s',
		$stopped && $hit ? 'yes' : 'no', $b_admitted ? 'yes' : 'no', $a_line // 'no line', $g1->[5] - $g0->[5],
		$qb->{out} =~ /^$big_rows$/m ? 'completed' : "failed: $qb->{err}");
	ok($stopped && $hit && $b_admitted, 'A stopped between its read of the budget and its claim, and B was admitted meanwhile')
	  or diag "gdb: $gout $gerr";
	like($a_line // '', qr/^glibc_malloc memory wait: granted: /,
		'A, whose read found its need fit, is not admitted past the room once B holds it: it runs with a grant');
	is($g1->[5] - $g0->[5], 1, 'one admission of the two (glibc_malloc_guard.admissions)');
}

# 2. With memory_wait long enough, nearly all complete.
my $before = guard();
my ($oom, $other, $s1, $seen1);
($per, $oom, $other, $s1, $seen1) = bursts('120s');
my $completed = 0;
$completed += $_ for @$per;
my $after = guard();
my ($waits, $wait_ms, $admissions, $timeouts) =
  map { $after->[$_] - $before->[$_] } 3 .. 6;
diag sprintf('%d waits, %.1f s waited in all (%.1f s each on average), %d admissions, %d timeouts',
	$waits, $wait_ms / 1000, $waits ? $wait_ms / 1000 / $waits : 0, $admissions, $timeouts);
cmp_ok($completed, '>=', 0.95 * $K * $bursts,
	"with memory_wait, at least 95 % of $bursts bursts of $K sorts complete");
is($other, 0, 'no other error');
is($s1, 0, 'a small query in the middle of each burst runs');
cmp_ok($waits, '>', 0, 'statements waited (glibc_malloc_guard.waits)');
cmp_ok($seen1, '>', 0, 'and were seen waiting, with their own wait event type, in pg_stat_activity');
cmp_ok($wait_ms, '>', 0, 'for some time (wait_time)');
cmp_ok($admissions, '>=', $waits, 'every waiter that ran was admitted with a reservation');
is($timeouts, 0, 'no wait ran out');
is($after->[9] - $before->[9], 0, 'nobody ran unreserved (unreserved_runs)');
is($after->[8] - $before->[8], 0, 'no waiter was taken for one that never fits (wait_skips): the sort fits what can free');
# A burst's sort that mapped more than the first run's did moved the record.
diag sprintf("the sort's mapped peak after the bursts: %.1f MB (%.1f MB before them)", $node->safe_psql('postgres',
	"SELECT max(max_mapped_peak_bytes) FROM glibc_malloc_statements WHERE calls > 0 AND max_exec_peak_bytes < $big_rows * 100") / $MB,
	($need || 0) / $MB);
my ($swaits, $swait_ms) = split /\|/, $node->safe_psql('postgres',
	"SELECT waits, wait_time FROM glibc_malloc_statements WHERE max_exec_peak_bytes BETWEEN $peak / 2 AND $peak * 2");
cmp_ok($swaits, '>', 0, "the sort's row in glibc_malloc_statements counts its waits");
cmp_ok($swait_ms, '>', 0, 'and its time waited');

# 3. A waiter.  Another session holds a sort (a cursor in an open
# transaction, 1.8 times the size of the others): the big sort does not fit
# the room left, but would once that session let go (its memory is a
# backend's, which the guard can move): it waits.  A query whose need is
# above what could ever free (the target less what the guard cannot move)
# would run at once instead.
my $hog = $node->background_psql('postgres', on_error_stop => 0);
my $hog_rows = int(1.8 * $rows);
$hog->query_safe("SET work_mem = '1GB'");
$hog->query_safe("BEGIN");
$hog->query_safe("DECLARE h CURSOR FOR SELECT md5(i::text) FROM generate_series(1, $hog_rows) i ORDER BY 1");
$hog->query_safe("FETCH 1 FROM h");
wait_for(sub { room() < $big_need }, 10);
$room = room();
diag sprintf('a session holds a sort: room %.0f MB, the big sort needs %.0f MB', $room / $MB, $big_need / $MB);
cmp_ok($room, '<', $big_need, 'with it, the big sort does not fit the room');

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

# A session's memory_wait of an hour is cut to the server's
# max_memory_wait (SUSET: a plain role may not raise it).
$node->safe_psql('postgres', "CREATE ROLE plain LOGIN");
my ($pret, $pout, $perr) = $node->psql('postgres', "SET glibc_malloc.max_memory_wait = '1h'", extra_params => [ '-U', 'plain' ]);
like($perr, qr/permission denied to set parameter "glibc_malloc.max_memory_wait"/, 'a plain role may not raise max_memory_wait');
$node->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.max_memory_wait = '2s'");
$node->reload;
$r = finish_query(start_query("SET work_mem = '4MB'; $big", "SET glibc_malloc.memory_wait = '1h'"));
like($r->{out} . $r->{err}, qr/^$big_rows$|out of memory/m, 'memory_wait = 1h under max_memory_wait = 2s: the wait runs out and the statement runs');
cmp_ok($r->{secs}, '<', 30, sprintf('after about 2 s (%.1f s), not an hour', $r->{secs}));
is(guard()->[6] - $after->[6], 2, 'counted in wait_timeouts');
$node->safe_psql('postgres', "ALTER SYSTEM RESET glibc_malloc.max_memory_wait");
$node->reload;

# Nothing leaked: with every session gone, a recorded sort is admitted at once.
$hog->query_safe('COMMIT');
$hog->quit;
wait_for(sub { room() >= $want_lo }, 15);
$before = guard();
$r = finish_query(start_query($sort, "SET work_mem = '1GB'", "SET glibc_malloc.memory_wait = '120s'"));
like($r->{out}, qr/^$rows$/m, 'after the cancelled waiters, a sort that fits runs');
is(guard()->[3] - $before->[3], 0, 'without waiting: no reservation or queue entry was left behind');

# A reservation nobody uses goes back.  A query recorded large (constants
# are normalised away: generate_series(1, 1) is the same query) is run
# again, small, sleeping: admitted with the large need, it holds that
# until the monitor sees it sleep; then the big sort, which would not fit
# beside it, is admitted at once with memory_wait = 0.
my $sleepy = "SELECT pg_sleep(%s), count(*) FROM (SELECT md5(i::text) || 'sleepy' FROM generate_series(1, %d) i ORDER BY 1) s";
$node->safe_psql('postgres', 'SELECT glibc_malloc_statements_reset()');
$node->safe_psql('postgres', "SET work_mem = '1GB'; " . sprintf($sleepy, 0, $big_rows));
my $sleepy_need = $node->safe_psql('postgres',
	"SELECT max(max_mapped_peak_bytes) FROM glibc_malloc_statements WHERE max_exec_peak_bytes >= $big_rows * 100");
# The big sort recorded again (the reset forgot it).
$node->safe_psql('postgres', "SET work_mem = '1GB'; $big");
wait_for(sub { room() >= $want_lo }, 15);
$room = room();
diag sprintf('room %.0f MB; the sleeping query is recorded at %.0f MB, the big sort needs %.0f MB', $room / $MB, ($sleepy_need || 0) / $MB, $big_need / $MB);
cmp_ok($room - ($sleepy_need || 0), '<', $big_need, 'with the sleeping query\'s need reserved, the big sort would not fit');
$before = guard();
my $returned0 = $node->safe_psql('postgres', 'SELECT reservations_returned FROM glibc_malloc_guard');
my $sleeper = start_query(sprintf($sleepy, 20, 1), "SET glibc_malloc.memory_wait = '0'");
ok(wait_for(sub { guard()->[5] > $before->[5] }, 10), 'the sleeping query is admitted with its recorded need');
my $t_admitted = time;
ok(wait_for(sub { $node->safe_psql('postgres', 'SELECT reservations_returned FROM glibc_malloc_guard') > $returned0 }, 10),
	'its reservation goes back once the monitor sees it sleep (reservations_returned)');
my $returned_after = time - $t_admitted;
diag sprintf('the reservation went back %.2f s after the admission was seen', $returned_after);
# Because it sleeps (PgSleep), at a look 250 ms apart, not by the rule for
# a reservation that has not grown for 2 s.
cmp_ok($returned_after, '<', 1.9, 'because it sleeps, before the 2 s without growth ran out');
$before = guard();
$r = finish_query(start_query($big, "SET work_mem = '1GB'", "SET glibc_malloc.memory_wait = '0'"));
like($r->{out}, qr/^$big_rows$/m, 'the big sort completes beside the sleeping query');
is(guard()->[5] - $before->[5], 1, 'admitted at once with its need (admissions), not run with a grant');
is(guard()->[9] - $before->[9], 0, 'and not counted in unreserved_runs');
$node->safe_psql('postgres', "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE '%sleepy%' AND pid <> pg_backend_pid()");
finish_query($sleeper);

# 4. A need above what could ever free runs at once.  The sidecar grows
# until the room up to the target, with no session holding anything, is
# less than half the big sort's need (the guard counts what idle sessions
# map, more than they hold, as what could free): what the guard cannot move leaves it no
# chance; waiting its memory_wait out would only delay it.
fill(room() - 0.4 * $big_need);
wait_for(sub { room() < 0.5 * $big_need }, 10);
diag sprintf('the sidecar grew: room %.0f MB, the big sort needs %.0f MB', room() / $MB, $big_need / $MB);
$before = guard();
my $s4 = $node->background_psql('postgres');
$s4->query_safe("SET work_mem = '4MB'");
$s4->query_safe("SET glibc_malloc.memory_wait = '120s'");
my $pid4 = $s4->query_safe('SELECT pg_backend_pid()');
my $t4 = time;
my $out4 = $s4->query_safe($big);
my $secs4 = time - $t4;
like($out4, qr/^$big_rows$/m, 'a statement whose need is above what could ever free runs, with a grant (in less memory here)');
cmp_ok($secs4, '<', 30, 'at once, not after its memory_wait');
is(guard()->[8] - $before->[8], 1, 'counted in glibc_malloc_guard.wait_skips');
# Its grant's limit ends with it: the session's limit is the guard's, or none.
is($node->safe_psql('postgres', "SELECT max_backend_memory_limit_bytes IS NULL AND data_limit_bytes IS NOT DISTINCT FROM guard_limit_bytes FROM glibc_malloc_processes WHERE pid = $pid4"),
	't', "after the statement, its session has no limit of its own (the kernel's soft RLIMIT_DATA is the guard's or none)");
$s4->quit;

# 5. A need follows the query's recent runs, not its largest.  The big
# sort, recorded above what the room now is, runs small (the constants
# are normalised away: it is the same query) with memory_wait = 0: the
# first small runs do not fit by its record and run with a grant
# (unreserved_runs); each small run moves the need a quarter of the way
# down, and the last ones are admitted by it.
(my $big_small = $big) =~ s/\b$big_rows\b/1000/;
my $s5 = $node->background_psql('postgres', on_error_stop => 0);
$s5->query_safe("SET glibc_malloc.memory_wait = '0'");
my (@unreserved, @admitted, @wrong);
for my $i (1 .. 12)
{
	my $b = guard();
	push @wrong, $i unless $s5->query_safe($big_small) =~ /^1000$/m;
	push @unreserved, guard()->[9] - $b->[9];
	push @admitted, guard()->[5] - $b->[5];
}
is("@wrong", '', 'the big sort run small completes, 12 times');
diag sprintf('room %.0f MB; the big sort run small, 12 times: counted in unreserved_runs %s, in admissions %s',
	room() / $MB, join(' ', @unreserved), join(' ', @admitted));
is($unreserved[0], 1, 'its first small run does not fit by the big run\'s record: it runs with a grant');
is(join(' ', @unreserved[8 .. 11]), '0 0 0 0', 'after 8 small runs, its need followed them down: the last 4 are not run with a grant');
is(join(' ', @admitted[8 .. 11]), '1 1 1 1', 'they are admitted by it, each with a reservation (admissions)');
# A run that fails for memory makes the largest run the need again: the
# big sort under a 30 MB cap, then the small run does not fit by it.
$s5->query("SET glibc_malloc.max_backend_memory = '30MB'; SET work_mem = '1GB'; $big");
like($s5->{stderr}, qr/out of memory/, 'the big sort under a 30 MB cap fails for memory');
$s5->{stderr} = '';
$s5->query_safe('RESET glibc_malloc.max_backend_memory');
$s5->query_safe('RESET work_mem');
my $b5 = guard();
$s5->query_safe($big_small);
is(guard()->[9] - $b5->[9], 1, 'after that failure the small run does not fit by the need again: it runs with a grant');
# The big sort itself now, with memory_wait = 0: it does not fit, runs
# with a grant (a share of the room, less than it needs), and fails; its
# HINT is the guard's, though the grant's limit is lifted when the
# executor fails, before the error is reported.
$b5 = guard();
$s5->query("SET work_mem = '1GB'; $big");
like($s5->{stderr}, qr/ERROR:  out of memory\n.*\nHINT:  (The statement's recorded memory need did not fit the room left below the server's memory limit when it started, and it ran with what was left|The server is close to its memory limit: glibc_malloc\.memory_guard limited this backend's private memory) \([^)]+ mapped\)/,
	'the big sort with memory_wait = 0 fails under its grant (or the guard\'s lower limit), with the guard\'s HINT');
is(guard()->[9] - $b5->[9], 1, 'it ran with a grant (unreserved_runs)');
$s5->{stderr} = '';
$s5->query_safe('RESET work_mem');
is($node->safe_psql('postgres', "SELECT max(max_exec_peak_bytes) >= $big_rows * 100 FROM glibc_malloc_statements"),
	't', 'glibc_malloc_statements still shows its largest executor peak');
$s5->quit;

is(oom_kills(), $kills_before, 'the kernel OOM-killed nothing');
my $log = substr(slurp_file($node->logfile), $offset);
unlike($log, qr/terminated by signal|all server processes terminated; reinitializing/, 'no restart');

$watch->quit;
$_->kill_kill for @fillers;
$node->stop('fast');
done_testing();
