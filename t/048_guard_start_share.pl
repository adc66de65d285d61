# The memory guard engaged: a statement whose need is unknown (not
# recorded) takes a start share of the budget as it starts, held as a
# reservation that the monitor serves before the growth and the shares of
# the statements that began before it.  In a real cgroup v1 of 800 MB (the
# guard's target 736 MB), another process of the container holds the
# usage in the engaged band with about 150 MB of headroom, and 30 sessions
# run a long pg_sleep (working statements that do not grow):
#
#  - a PL/pgSQL loop that maps nothing: while it runs, the kernel holds a
#    soft RLIMIT_DATA for its backend at least 16 MB above its VmData
#    (/proc/PID/limits, /proc/PID/status).  Without the start share, the
#    latest of 31 working statements got an equal part of half of what was
#    left, about 2 MB, and its reserve;
#  - 5 statements that map 12 MB at once (a repeat() of 12 MB) in the
#    executor, and 5 that map 16 MB in the planner (a repeat() of 8 MB
#    with constant arguments, folded and copied), each in a session that
#    was idle: all complete (without the start share, 5 of 5 got "out of
#    memory");
#  - 5 sorts of 800,000 md5 strings (about 100 MB mapped), each in a
#    session that was idle: they grow past their start share, and their
#    plan nodes take more from the budget as they near their limit, each
#    raising its own limit by it (their DEBUG2 lines show it): all
#    complete (without it, 0 of 5: a look every 50 ms is too
#    late for a sort that maps a few MB between two);
#  - 3 inserts of 100,000 rows of 800 bytes that an AFTER trigger keeps
#    in memory (a transition table), each in a session that was idle:
#    the rows a ModifyTable writes are checked, and they take more as
#    they near their limit (without it, no DEBUG2 line: only the looks);
#  - a sort of a parallel hash join in 2 workers: the join sets its own
#    function again as a worker attaches, so its outer input is checked;
#    the workers take more as their sorts grow (without it, no line);
#  - CREATE TABLE AS (an event trigger runs a query first), REFRESH
#    MATERIALIZED VIEW, COPY (query) TO, EXPLAIN ANALYZE and EXPLAIN
#    ANALYZE EXECUTE of a sort of
#    800,000 md5 strings: the executor one level down checks itself as
#    a query's does, and takes more as it grows (without it, no line);
#  - a sort of about 100 MB that starts in a session counted working, the
#    monitor stopped (SIGSTOP) until its limit moves: its start share
#    raises its limit at once from its own backend, out of the pool the
#    last look held back (/proc/PID/limits while the monitor is stopped;
#    strace: its prlimit64 before any timed wait), and it completes
#    (before, it waited for a look, its limit unchanged);
#  - a new session's first statement, the monitor stopped: its wait for
#    the look that would limit it (250 ms) is on its latch, which the
#    look sets, with at most one wake-up per 50 ms (strace), not polling;
#  - a sort that began while the guard was calm (it waits at its first
#    row while the usage goes into the engaged band) is checked as it
#    runs once the guard engages, the monitor stopped (SIGSTOP) until the
#    sort takes more: it takes more and completes;
#  - with the other sessions idle none holds a share (a new statement's
#    DEBUG2 line), and a new statement's share is claimed without the
#    admission's lock; SELECT 1 runs, no admission is counted, 0 OOM
#    kills, no restart;
#  - a short statement opens no file: its start share and its end read
#    /proc/self/statm from a descriptor kept open, seen by strace; a CALL
#    that commits inside reads it at that commit and at its end too;
#  - a statement that maps megabytes as it is parsed and analyzed, before any
#    hook, beside 30 sessions that wait in pg_sleep, gets
#    the guard's halvings (they get their equal shares): it is not refused;
#  - a start share counts from the backend's VmData, not from statm's
#    data pages with the stack, after a statement grew the stack;
#  - glibc_malloc_guard counts the start shares (start_shares) and what
#    running statements asked for and got (executor_asks,
#    executor_shares).
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
use Time::HiRes qw(sleep time usleep);
use File::Temp ();
use IPC::Run ();

my $cg = test_cgroup_v1();

my $MB = 2**20;
my $limit = 800 * $MB;
my $sleepers = 30;
my $tries = 5;

my $kills_before = cgroup_v1_oom_kills($cg);
my @fillers;
my @sleeping;
my $monitor_stopped;
END { local $?; kill 'CONT', $monitor_stopped if $monitor_stopped; $_->kill_kill for @fillers; eval { $_->{h}->kill_kill } for @sleeping }

my $node = new_node('startshare', "restart_after_crash = on\nshared_buffers = 16MB\nmax_connections = 60\n"
	  . "glibc_malloc.track_statements = none\n", no_start => 1);
$node->start;
enter_cgroup_v1($node, $cg, $limit);
$node->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');
$node->safe_psql('postgres', 'CREATE TABLE sortme AS SELECT g, md5(g::text) m FROM generate_series(1, 800000) g; VACUUM ANALYZE sortme');
ok(wait_for(sub { (guard_counts($node)->[2] || 0) > 0 }, 10), "the monitor read the cgroup's limit");

sub guard { [ split /\|/, $node->safe_psql('postgres', 'SELECT engaged, usage_bytes, target_bytes FROM glibc_malloc_guard') ] }
sub shares { split /\|/, $node->safe_psql('postgres', 'SELECT start_shares, executor_asks, executor_shares FROM glibc_malloc_guard') }
sub headroom { my $g = guard(); return $g->[2] - $g->[1] }

# What holds the cgroup when the headroom does not come back: its
# memory.stat, and the processes with the most anonymous memory.
sub room_report
{
	my $stat = eval { slurp_file("$cg/memory.stat") } // '';
	my %k = $stat =~ /^(total_rss|total_cache|total_shmem|total_mapped_file|total_inactive_file|total_active_file) (\d+)$/mg;
	my @procs;
	for my $pid (split /\n/, eval { slurp_file("$cg/cgroup.procs") } // '')
	{
		my $st = eval { slurp_file("/proc/$pid/status") } // next;
		my ($anon) = $st =~ /^RssAnon:\s+(\d+)/m;
		my $cmd = eval { slurp_file("/proc/$pid/cmdline") } // '';
		$cmd =~ s/\0/ /g;
		$cmd =~ s/\s+/ /g;
		push @procs, [ $anon // 0, $pid, substr($cmd, 0, 60) ];
	}
	@procs = sort { $b->[0] <=> $a->[0] } @procs;
	diag sprintf('headroom %.1f MB; memory.stat (MB): %s; largest RssAnon (MB): %s', headroom() / $MB,
		join(', ', map { sprintf('%s %.1f', $_ =~ s/^total_//r, $k{$_} / $MB) } sort keys %k),
		join('; ', map { sprintf('%d %.1f %s', $_->[1], $_->[0] / 1024, $_->[2]) } @procs[0 .. ($#procs < 11 ? $#procs : 11)]));
}

# The headroom back to at least $want before a statement that needs it:
# the sessions kept open hold their reserves, and a machine's kernel
# charges the cgroup more or less for 40 backends, so where the looks do
# not show $want within a few seconds the other processes of the
# container (the fillers) give back what is missing and 10 MB more.
# What they gave back in all is checked at the end: the kept sessions
# hold their reserves (1 to 4 MB each), not what their statements mapped.
my $gave_back = 0;
sub ensure_headroom
{
	my ($want) = @_;
	return 0 if wait_for(sub { headroom() >= $want }, 3);
	room_report();
	my $give = $want + 10 * $MB - headroom();
	my $gave = 0;
	for my $f (reverse @fillers)
	{
		last if $gave >= $give;
		$gave += filler_free($f, $give - $gave);
	}
	wait_for(sub { headroom() >= $want }, 10);
	diag sprintf('the fillers gave back %.0f MB: headroom %.0f MB', $gave / $MB, headroom() / $MB);
	$gave_back += $gave;
	return $gave;
}

# Working statements that do not grow, begun before the others.
push @sleeping, GlibcMallocTest::start_query($node, 'SELECT pg_sleep(600)') for 1 .. $sleepers;
ok(wait_for(sub { $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'") == $sleepers }, 30),
	"$sleepers sessions sleep inside a statement");

# A sort that begins while the guard is calm (no start share): it waits
# at its first row (for an advisory lock another session holds) while the
# usage goes into the engaged band, then reads the rest and sorts about
# 100 MB with the guard engaged.
is(guard()->[0], 'f', 'the guard is calm');
my $gate = $node->background_psql('postgres');
$gate->query_safe('SELECT pg_advisory_lock(4242)');
my $calm = GlibcMallocTest::start_query($node,
	'SELECT count(*) FROM (SELECT m FROM sortme WHERE g <> 1 OR (SELECT true FROM pg_advisory_lock_shared(4242)) ORDER BY m) s',
	"SET work_mem = '1GB'", 'SET max_parallel_workers_per_gather = 0', 'SET synchronize_seqscans = off',
	'SET client_min_messages = debug2');
my $at_first_row = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'advisory' AND query LIKE 'SELECT count(*) FROM (SELECT m FROM sortme%'";
ok(wait_for(sub { $node->safe_psql('postgres', $at_first_row) == 1 }, 30),
	'a sort began while the guard was calm (it waits at its first row)');

# The usage into the engaged band, about 150 MB below the target.
for my $try (1 .. 20)
{
	sleep 0.5;
	my $h = headroom();
	last if $h <= 170 * $MB && $h >= 130 * $MB;
	push @fillers, start_filler($cg, $h - 150 * $MB) if $h > 170 * $MB;
	last if $h < 130 * $MB;
}
ok(wait_for(sub { guard()->[0] eq 't' }, 10), 'the guard is engaged');
diag sprintf('headroom %.0f MB', headroom() / $MB);
is($node->safe_psql('postgres', $at_first_row), '1', 'the sort that began calm still waits at its first row as the guard engages');
# The monitor stopped (SIGSTOP) as the sort goes on, until the sort
# takes more (its DEBUG2 line, as it is sent): its looks would otherwise
# raise the sort's limit ahead of it on a fast machine, and the check
# would not be needed.  The sort then waits at most 250 ms for a look
# that covers what it took: the test reads the line as it comes (every
# 5 ms) and lets the monitor go on (SIGCONT), whose look comes at once
# (the sort's wake-up is pending).  Stopped in its latch wait (epoll: its
# wchan do_epoll_wait or ep_poll), not while it waits for a lock (a
# futex) that the sort would then wait for; where the kernel names none
# (0, as for a running process, at 20 reads or more, every one),
# sleeping (its state after the command's last parenthesis).
my ($monitor) = $node->safe_psql('postgres', 'SELECT pid FROM glibc_malloc_monitor') =~ /(\d+)/;
defined $monitor or die 'glibc_malloc_monitor shows no monitor process';
my $state = sub { ((slurp_file("/proc/$monitor/stat") =~ /.*\)\s+(\S)/s)[0]) // '?' };
# Stop it once it sleeps there; whether it did.
my $monitor_stop = sub {
	my (%seen, $named);
	my $reads = 0;
	my $sleeps = sub {
		my $w = eval { slurp_file("/proc/$monitor/wchan") } // '';
		my $st = $state->();
		$reads++;
		$named ||= $w =~ /[a-z]/;
		$seen{$w =~ /[a-z]/ ? $w : "state $st"}++;
		return $w =~ /[a-z]/ ? scalar($w =~ /e(?:p_)?poll/) : !$named && $reads >= 20 && $st eq 'S';
	};
	my $ok = ok(wait_for($sleeps, 10), 'the monitor sleeps in its wait between two looks')
	  or diag 'its wchan: ' . join(', ', map { "$_ $seen{$_}" } sort keys %seen);
	if ($ok)
	{
		$monitor_stopped = $monitor;
		kill 'STOP', $monitor;
	}
	return $ok;
};
my $monitor_continue = sub {
	kill 'CONT', $monitor_stopped if $monitor_stopped;
	$monitor_stopped = undef;
};
my $stoppable = $monitor_stop->();
my $stopped_at = time;
$gate->query_safe('SELECT pg_advisory_unlock(4242)');
my $asked = 0;
while (time - $stopped_at < 20)
{
	eval { $calm->{h}->pump_nb; 1 };
	$asked = $calm->{err} =~ /glibc_malloc executor share: [1-9]/;
	last if $asked || !$calm->{h}->pumpable;
	sleep 0.005;
}
$monitor_continue->();
my $stopped_for = time - $stopped_at;
$calm = GlibcMallocTest::finish_query($calm);
$gate->quit;
my $calm_took = () = $calm->{err} =~ /glibc_malloc executor share: [1-9]/g;
diag sprintf('the sort that began calm: %s in %.1f s, took more %d times as it ran, the monitor stopped %.2f s until %s%s',
	$calm->{out} =~ /^800000$/m ? 'completed' : 'failed', $calm->{secs}, $calm_took, $stopped_for,
	$asked ? 'it took more' : 'it ended or 20 s passed', $calm->{err} =~ /(ERROR: .*)/ ? ": $1" : '');
like($calm->{out}, qr/^800000$/m, 'a sort of about 100 MB that began while the guard was calm completes with the guard engaged');
cmp_ok($calm_took, '>=', 1, 'it took more from the budget as it ran, once the guard engaged (its DEBUG2 lines)');
my $g0 = guard_counts($node);

# A loop that maps nothing: the kernel's limit for its backend, above its
# VmData, while it runs.
sleep 1;
my $loop = q{DO $$DECLARE x bigint := 0; BEGIN FOR i IN 1 .. 30000000 LOOP x := x + i; END LOOP; END$$};
my $q = GlibcMallocTest::start_query($node, $loop);
my $pid;
wait_for(sub { $pid = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE query LIKE 'DO \$\$DECLARE x bigint%' AND state = 'active'") }, 10);
my $room = -1;
my $polls = 0;
while ($pid && $q->{h}->pumpable && $polls < 400)
{
	my $limits = eval { slurp_file("/proc/$pid/limits") } // '';
	my $status = eval { slurp_file("/proc/$pid/status") } // '';
	my ($soft) = $limits =~ /^Max data size\s+(\d+)/m;
	my ($vm) = $status =~ /^VmData:\s+(\d+) kB/m;
	if (defined $soft && defined $vm)
	{
		my $r = $soft - $vm * 1024;
		$room = $r if $r > $room;
	}
	$polls++;
	sleep 0.01;
	$q->{h}->pump_nb;
}
$q = GlibcMallocTest::finish_query($q);
diag sprintf('the loop ran %.1f s; its backend could map %.1f MB above its VmData (%d reads of /proc)',
	$q->{secs}, $room / $MB, $polls);
is($q->{err}, '', 'the loop completes');
cmp_ok($room, '>=', 16 * $MB, 'while it runs, the kernel lets its backend map its 16 MB start share (/proc/PID/limits)');

# Statements that map 12 MB at once, each in a session that was idle: in
# the executor, and in the planner (a constant folded: its share is taken
# as its planning starts).
# Folded, the planner evaluates the repeat() and copies its result: 8 MB
# maps 16.
my %forms = (
	'in the executor' => [ "SELECT length(repeat('x', 12 * 1024 * 1024 + (0 * random())::int))", 12 * $MB ],
	'in the planner' => [ "SELECT length(repeat('x', 8 * 1024 * 1024))", 8 * $MB ]);
my @kept;			# open until the shares are checked
for my $form ('in the executor', 'in the planner')
{
	my ($sql, $len) = @{ $forms{$form} };
	my ($completed, $failed) = (0, 0);
	my @idle = map { $node->background_psql('postgres', on_error_stop => 0) } 1 .. $tries;
	$_->query_safe('SELECT 1') for @idle;
	# The monitor's looks count them idle, and limit them so.
	sleep 1;
	for my $s (@idle)
	{
		ensure_headroom(130 * $MB);
		my $r = $s->query($sql) // '';
		if ($r eq $len) { $completed++ }
		elsif ($s->{stderr} =~ /out of memory/) { $failed++ }
		else { diag "other result: $r $s->{stderr}" }
		$s->{stderr} = '';
	}
	push @kept, @idle;
	diag sprintf('%d statements with a repeat() of %d MB %s beside %d working ones: %d completed, %d out of memory',
		$tries, $len / $MB, $form, $sleepers, $completed, $failed);
	is($completed, $tries, "$tries of $tries statements with a repeat() of @{[ $len / $MB ]} MB $form, each the latest beside $sleepers working ones, complete");
}

# Sorts that grow past their start share while they run (800,000 md5
# strings: about 100 MB mapped, in steps of a few MB between two of the
# monitor's looks), each in a session that was idle: their plan nodes
# take more from the budget as they near their limit, and wait for the
# look that covers it.
{
	my $rows = 800000;
	my ($completed, $failed, $took, $roomy, $asked, $got) = (0, 0, 0, 0, 0, 0);
	my @rooms;
	my @shares0 = shares();
	my @idle = map { $node->background_psql('postgres', on_error_stop => 0) } 1 .. $tries;
	$_->query_safe("SET work_mem = '1GB'; SET max_parallel_workers_per_gather = 0") for @idle;
	sleep 1;
	for my $s (@idle)
	{
		ensure_headroom(115 * $MB);
		$roomy++ if headroom() >= 115 * $MB;
		push @rooms, sprintf('%.0f', headroom() / $MB);
		$s->query_safe('SET client_min_messages = debug2');
		$s->{stderr} = '';
		my $r = $s->query("SELECT count(*) FROM (SELECT m FROM sortme ORDER BY 1) s") // '';
		if ($r eq $rows) { $completed++ }
		elsif ($s->{stderr} =~ /out of memory/) { $failed++ }
		else { diag "other result: $r $s->{stderr}" }
		$took++ if $s->{stderr} =~ /glibc_malloc executor share: [1-9]/;
		# (each ask has its DEBUG2 line, with what it got)
		$asked += () = $s->{stderr} =~ /glibc_malloc executor share: \d+/g;
		$got += () = $s->{stderr} =~ /glibc_malloc executor share: [1-9]/g;
		$s->query('RESET client_min_messages');
		$s->{stderr} = '';
	}
	push @kept, @idle;
	diag sprintf('%d sorts of %d rows beside %d working statements: %d completed, %d out of memory, %d took more as they ran; headroom at their starts (MB): %s',
		$tries, $rows, $sleepers, $completed, $failed, $took, join(' ', @rooms));
	is($roomy, $tries, 'each sort started with at least 115 MB of headroom');
	is($took, $tries, 'each sort took more from the budget as it ran (its DEBUG2 lines)');
	is($completed, $tries, "$tries of $tries sorts of about 100 MB, each growing past its start share beside $sleepers working statements, complete");
	# glibc_malloc_guard counts what they asked for and got as they ran.
	my @shares1 = shares();
	diag sprintf('glibc_malloc_guard: executor_asks +%d, executor_shares +%d; the sorts\' DEBUG2 lines: %d asks, %d got more',
		$shares1[1] - $shares0[1], $shares1[2] - $shares0[2], $asked, $got);
	is($shares1[1] - $shares0[1], $asked, 'executor_asks counts every ask of the sorts (their DEBUG2 lines)');
	is($shares1[2] - $shares0[2], $got, 'executor_shares counts those that got more');
}

# A sort of about 100 MB that starts in a session the monitor counts as
# working (it waited for an advisory lock before), the monitor stopped
# (SIGSTOP, seen asleep between two looks) as it starts, until its limit
# moves: its start share raises its limit at once, from the backend
# itself, out of the pool the last look held back.  /proc/PID/limits
# shows the raise while the monitor is still stopped, and strace shows
# the backend's own prlimit64 on RLIMIT_DATA before any timed wait (an
# epoll_wait with a timeout: a wait for a look).  Before, the start waited
# for a look that could not come (250 ms), its limit unchanged.
{
	ensure_headroom(115 * $MB);
	my $gate = $node->background_psql('postgres');
	$gate->query_safe('SELECT pg_advisory_lock(4243)');
	my $q = GlibcMallocTest::start_query($node, 'SELECT count(*) FROM (SELECT m FROM sortme ORDER BY 1) s',
		"SET work_mem = '1GB'", 'SET max_parallel_workers_per_gather = 0', 'SET client_min_messages = debug2',
		'SELECT pg_advisory_lock_shared(4243)');
	my $pid;
	wait_for(sub { ($pid) = $node->safe_psql('postgres',
			"SELECT pid FROM pg_stat_activity WHERE wait_event = 'advisory' AND query LIKE 'SELECT pg_advisory_lock_shared(4243)%'") =~ /(\d+)/ }, 30);
	ok($pid, 'a session waits for an advisory lock before its sort');
	my $soft = sub { (eval { slurp_file("/proc/$pid/limits") } // '') =~ /^Max data size\s+(\d+)/m ? $1 : -1 };
	ok(wait_for(sub { guard()->[0] eq 't' && $soft->() >= 0 }, 10), 'the guard is engaged and limits it');
	sleep 0.5;
	my (undef, $file) = File::Temp::tempfile();
	my $strace = IPC::Run::start([ 'strace', '-qq', '-e', 'trace=prlimit64,epoll_wait,epoll_pwait', '-e', 'raw=epoll_wait,epoll_pwait',
		'-o', $file, '-p', $pid ], '<', \undef, '>', \my $sout, '2>', \my $serr);
	ok(wait_for(sub { (slurp_file("/proc/$pid/status") =~ /^TracerPid:\s+(\d+)/m)[0] != 0 }, 10), 'strace is attached to its backend')
	  or diag "strace did not attach: $serr";
	my $stopped = $monitor_stop->();
	my $before = $soft->();
	my $headroom = headroom();
	my $stopped_at = time;
	# (not stopped, the monitor's looks would raise the limit: the checks below would say nothing)
	$gate->query_safe('SELECT pg_advisory_unlock(4243)');
	my $raised = -1;
	while (time - $stopped_at < 10)
	{
		eval { $q->{h}->pump_nb; 1 };
		my $now = $soft->();
		$raised = $now if $now > $raised;
		last if $raised > $before || !$q->{h}->pumpable;
		sleep 0.005;
	}
	$monitor_continue->();
	my $stopped_for = time - $stopped_at;
	$q = GlibcMallocTest::finish_query($q);
	$gate->quit;
	usleep(200_000);
	$strace->signal('INT');
	$strace->finish;
	my @lines = split /\n/, slurp_file($file);
	unlink $file;
	my ($first_raise) = grep { $lines[$_] =~ /prlimit64\(0, RLIMIT_DATA, \{rlim_cur=/ } 0 .. $#lines;
	my ($first_timed) = grep {
		$lines[$_] =~ /epoll_p?wait\((?:[^,]+, ){3}(-?(?:0x)?[0-9a-f]+)/ && $1 !~ /^(?:-1|0x(?:ffffffff){1,2})$/
	} 0 .. $#lines;
	diag sprintf('a sort started with the monitor stopped (headroom %.0f MB): %s in %.1f s; its limit %.1f MB before, %.1f MB while the monitor was stopped (%.2f s); strace: its first own prlimit64 at line %s, its first timed wait at %s of %d%s',
		$headroom / $MB, $q->{out} =~ /^800000$/m ? 'completed' : 'failed', $q->{secs}, $before / $MB, $raised / $MB,
		$stopped_for, $first_raise // 'none', $first_timed // 'none', scalar @lines, $q->{err} =~ /(ERROR: .*)/ ? ": $1" : '');
	like($q->{out}, qr/^800000$/m, 'the sort completes');
	SKIP:
	{
		skip 'the monitor could not be stopped asleep', 3 unless $stopped;
		cmp_ok($raised, '>', $before, 'its limit rose while the monitor was stopped: the backend raised it itself (/proc/PID/limits)');
		ok(defined $first_raise, 'its backend set its own RLIMIT_DATA (prlimit64 on itself, strace)');
		ok(defined $first_raise && (!defined $first_timed || $first_raise < $first_timed),
			'before any timed wait: it did not wait for a look to raise it');
	}
}

# A new session's first statement while the guard is engaged and has not
# limited it: it limits itself and waits for the monitor's look, which
# sets its latch.  The monitor stopped, the look never comes: the wait
# runs out (250 ms) in a few timed waits on its latch, at most one per 50
# ms (strace: epoll_wait), not in sleeps of 1 ms polling (before: about
# 250), and the statement then runs.
{
	ok(wait_for(sub { guard()->[0] eq 't' }, 10), 'the guard is engaged before a new session starts');
	my $stopped = $monitor_stop->();
	my $s = do { local $ENV{PGAPPNAME} = 'gm_first_statement'; $node->background_psql('postgres') };
	my $pid = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE application_name = 'gm_first_statement'");
	like($pid, qr/^\d+$/, 'the new session is found by its application_name');
	my $r;
	my @lines = GlibcMallocTest::traced_lines($pid, sub { $r = $s->query_safe('SELECT 1') },
		'epoll_wait,epoll_pwait,select,pselect6,nanosleep,clock_nanosleep', '-e', 'raw=epoll_wait,epoll_pwait');
	$monitor_continue->();
	$s->quit;
	my @timeouts = map { /epoll_p?wait\((?:[^,]+, ){3}(-?(?:0x)?[0-9a-f]+)/ ? $1 : () } @lines;
	my @timed = grep { !/^(?:-1|0x(?:ffffffff){1,2})$/ } @timeouts;
	my $sleeps = grep { /^(?:\d+\s+)?(?:select|pselect6|nanosleep|clock_nanosleep)\(/ } @lines;
	diag sprintf('a new session\'s first statement, the monitor stopped: %d timed waits on its latch (%s ms), %d sleeps',
		scalar @timed, join(' ', map { hex } @timed), $sleeps);
	is($r, '1', 'its first statement runs once its wait for the look runs out');
	SKIP:
	{
		skip 'the monitor could not be stopped asleep', 3 unless $stopped;
		cmp_ok(scalar @timed, '>=', 1, 'it waited for the look on its latch (epoll_wait with a timeout)');
		cmp_ok(scalar @timed, '<=', 10, 'at most one wake-up per 50 ms: it does not poll');
		is($sleeps, 0, 'and no sleep of its own (pg_usleep: select or nanosleep)');
	}
}

# Statements that write rows an AFTER trigger keeps until their end (a
# transition table of 100,000 rows of 800 bytes in memory, work_mem 1GB),
# each in a session that was idle: the rows a ModifyTable writes are
# checked as a sort's are, and they take more from the budget as they near
# their limit (their DEBUG2 lines).  Before, nothing checked them: no
# line, and they were left to the monitor's looks.
{
	my $rows = 100000;
	my $n = 3;
	my ($completed, $took) = (0, 0);
	$node->safe_psql('postgres', q{CREATE UNLOGGED TABLE written (g int, m text);
		CREATE FUNCTION gm_noop() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;
		CREATE TRIGGER kept AFTER INSERT ON written REFERENCING NEW TABLE AS n FOR EACH STATEMENT EXECUTE FUNCTION gm_noop()});
	my @idle = map { $node->background_psql('postgres', on_error_stop => 0) } 1 .. $n;
	$_->query_safe("SET work_mem = '1GB'; SET max_parallel_workers_per_gather = 0") for @idle;
	sleep 1;
	for my $s (@idle)
	{
		$node->safe_psql('postgres', 'TRUNCATE written');
		ensure_headroom(115 * $MB);
		$s->query_safe('SET client_min_messages = debug2');
		$s->{stderr} = '';
		$s->query('INSERT INTO written SELECT g, repeat(m, 24) FROM sortme WHERE g <= 100000');
		$completed++ if $s->{stderr} !~ /ERROR/;
		$took++ if $s->{stderr} =~ /glibc_malloc executor share: [1-9]/;
		diag "other result: $1" if $s->{stderr} =~ /(ERROR: .*)/;
		$s->query('RESET client_min_messages');
		$s->{stderr} = '';
	}
	$_->quit for @idle;
	$node->safe_psql('postgres', 'DROP TABLE written');
	diag sprintf('%d inserts of %d rows kept by an AFTER trigger: %d completed, %d took more as they ran',
		$n, $rows, $completed, $took);
	is($took, $n, 'each insert whose rows an AFTER trigger keeps took more from the budget as it ran (its DEBUG2 lines)');
	is($completed, $n, "$n of $n such inserts complete");
}

# A parallel hash join read by a sort, in the workers only (the leader
# does not take part): a parallel hash join sets its own function again
# as a worker attaches, after the worker's plan was wrapped, so the calls
# of its outer input are counted instead.  Each of the 2 workers sorts
# about 300,000 md5 strings (about 40 MB) and takes more from the budget
# as it nears its limit (their DEBUG2 lines, sent to the client).
# Before, the sort's input was left unwrapped: no line.
{
	$node->safe_psql('postgres', 'CREATE TABLE small AS SELECT g FROM generate_series(0, 149999) g; VACUUM ANALYZE small');
	my @set = ('SET parallel_leader_participation = off', 'SET max_parallel_workers_per_gather = 2',
		'SET parallel_setup_cost = 0', 'SET parallel_tuple_cost = 0', 'SET min_parallel_table_scan_size = 0',
		'SET enable_mergejoin = off', 'SET enable_nestloop = off', "SET work_mem = '1GB'");
	my $sql = 'SELECT count(*) FROM (SELECT a.m FROM sortme a JOIN small b ON a.g % 200000 = b.g ORDER BY a.m) s';
	my $plan = $node->safe_psql('postgres', join(";\n", @set, "EXPLAIN (COSTS OFF) $sql"));
	like($plan, qr/Gather Merge.*Sort.*Parallel Hash Join.*Parallel Seq Scan on sortme/s,
		'the plan: a sort of a parallel hash join, under a Gather Merge');
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe($_) for @set;
	sleep 1;
	# (its 2 workers map about 96 MB together, a little more than a
	# sort alone, and the looks serve them as a group)
	ensure_headroom(125 * $MB);
	$s->query_safe('SET client_min_messages = debug2');
	$s->{stderr} = '';
	my $r = $s->query($sql) // '';
	my $asked = () = $s->{stderr} =~ /glibc_malloc executor share: \d+ .*\(a parallel worker\)$/mg;
	my $got = () = $s->{stderr} =~ /glibc_malloc executor share: [1-9].*\(a parallel worker\)$/mg;
	diag sprintf('a sort of a parallel hash join in 2 workers: %s; the workers asked %d times, got more %d times%s',
		$r eq '600000' ? 'completed' : 'failed', $asked, $got, $s->{stderr} =~ /(ERROR: .*)/ ? ": $1" : '');
	cmp_ok($got, '>=', 1, 'the workers took more from the budget as their sorts of a parallel hash join ran (their DEBUG2 lines)');
	is($r, '600000', 'the sort of a parallel hash join completes');
	$s->quit;
	$node->safe_psql('postgres', 'DROP TABLE small');
}

# Utility statements whose work is one executor (CREATE TABLE AS, REFRESH
# MATERIALIZED VIEW, COPY (query) TO, EXPLAIN ANALYZE, of a query or of
# an EXECUTE), each a sort of
# 800,000 md5 strings in a session that was idle: their executor, one
# level down, is checked as a query's, and takes more as it grows (its
# DEBUG2 lines).  Before, only a top-level executor was: no line.  An
# event trigger runs a query of its own at the same level before CREATE
# TABLE AS runs its own (a FOR loop's, not SPI's executor): CREATE TABLE
# AS's is still the one checked.
{
	my @stmts = ('CREATE TEMP TABLE sorted AS SELECT m FROM sortme ORDER BY m',
		'REFRESH MATERIALIZED VIEW sorted_mv',
		"COPY (SELECT m FROM sortme ORDER BY m) TO '/dev/null'",
		'EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) SELECT m FROM sortme ORDER BY m',
		'EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE sorting');
	$node->safe_psql('postgres', q{CREATE MATERIALIZED VIEW sorted_mv AS SELECT m FROM sortme ORDER BY m WITH NO DATA;
		CREATE FUNCTION gm_looks() RETURNS event_trigger LANGUAGE plpgsql AS
			$$DECLARE r record; BEGIN FOR r IN SELECT relname FROM pg_class LIMIT 3 LOOP END LOOP; RAISE NOTICE 'gm_looks ran'; END$$;
		CREATE EVENT TRIGGER gm_looks ON ddl_command_start WHEN TAG IN ('CREATE TABLE AS') EXECUTE FUNCTION gm_looks()});
	my ($completed, $took, $looked) = (0, 0, 0);
	my @idle = map { $node->background_psql('postgres', on_error_stop => 0) } @stmts;
	$_->query_safe("SET work_mem = '1GB'; SET max_parallel_workers_per_gather = 0; PREPARE sorting AS SELECT m FROM sortme ORDER BY m")
	  for @idle;
	sleep 1;
	for my $i (0 .. $#stmts)
	{
		my $s = $idle[$i];
		ensure_headroom(95 * $MB);
		my $h = headroom();
		$s->query_safe('SET client_min_messages = debug2');
		$s->{stderr} = '';
		$s->query($stmts[$i]);
		$looked = 1 if $s->{stderr} =~ /NOTICE:  gm_looks ran/ && $stmts[$i] =~ /^CREATE TEMP TABLE sorted AS/;
		my $ok = $s->{stderr} !~ /ERROR/;
		my $n = () = $s->{stderr} =~ /glibc_malloc executor share: [1-9]/g;
		$completed++ if $ok;
		$took++ if $n > 0;
		diag sprintf('%s (headroom %.0f MB): %s, took more %d times%s', $stmts[$i], $h / $MB, $ok ? 'completed' : 'failed', $n,
			$s->{stderr} =~ /(ERROR: .*)/ ? ": $1" : '');
		$s->query('RESET client_min_messages');
		$s->{stderr} = '';
	}
	$_->quit for @idle;
	$node->safe_psql('postgres', 'DROP EVENT TRIGGER gm_looks; DROP MATERIALIZED VIEW sorted_mv');
	ok($looked, "the event trigger's FOR loop ran before CREATE TABLE AS (its NOTICE)");
	is($took, scalar @stmts, 'CREATE TABLE AS (beside an event trigger\'s query), REFRESH MATERIALIZED VIEW, COPY (query) TO, EXPLAIN ANALYZE and EXPLAIN ANALYZE EXECUTE of a sort took more from the budget as they ran (their DEBUG2 lines)');
	is($completed, scalar @stmts, 'and they complete');
}
# At most 20 sessions were idle at once (the 15 kept and 5 of a block):
# their reserves at their most, 4 MB each.
cmp_ok($gave_back, '<=', 80 * $MB, 'the fillers gave back at most 80 MB in all: the idle sessions held their reserves, not what their statements mapped');

# With every other session idle, none holds a share (the guard ends a
# share at its statement's end, and at the latest when its backend waits
# for its client): a new statement takes the whole 16 MB (its DEBUG2
# line, sent to the client).
my $d = $node->background_psql('postgres', on_error_stop => 0);
$d->query_safe('SELECT 1');
sleep 1;
$d->query_safe('SET client_min_messages = debug2');
# (A look of the monitor that holds the admission's lock at that instant,
# one that the statement's own start woke, sends it the locked way: tried
# up to 3 times.)
my $share_line;
for my $try (1 .. 3)
{
	$d->{stderr} = '';
	$d->query('SELECT count(*) FROM generate_series(1, 1000 + (0 * random())::int)');
	($share_line) = $d->{stderr} =~ /(glibc_malloc start share: .*)/;
	last if ($share_line // '') =~ /without the lock$/;
	sleep 0.2;
}
diag $share_line // 'no start share line';
like($share_line // '', qr/^glibc_malloc start share: 16777216 of room \d+ taken 0 held 0 vmdata \d+ without the lock$/,
	'with every other session idle, none holds a share: a new statement takes 16 MB, without the admission\'s lock, and the sums of the budget count nothing taken');

# The VmData a start share counts from (its DEBUG2 line) is the
# backend's VmData, which its limit counts, not /proc/self/statm's data
# pages, which count the stack too: after a statement that grew the
# stack to max_stack_depth (2 MB), and a second for the stack's size to
# be read again, the two agree within a quarter of the stack.
{
	# (client_min_messages is debug2: query, not query_safe, which fails on stderr)
	my ($pid) = $d->query('SELECT pg_backend_pid()') =~ /(\d+)/;
	my $field = sub {
		open my $fh, '<', "/proc/$pid/status" or return -1;
		my ($kb) = join('', <$fh>) =~ /^$_[0]:\s+(\d+) kB/m;
		return defined $kb ? $kb * 1024 : -1;
	};
	# (a sum of 30,000 terms: its analysis recurses once per term and
	# maps megabytes before any hook of the module runs, where a recursive
	# function's frames would run into the guard's limit first.  Sent
	# right after another statement, a look sees it working while it is
	# parsed and analyzed, among the 30 sessions that wait in pg_sleep:
	# the guard's halvings go to it, not to them, and it
	# gets as far as the stack's limit.  Before, they went to the
	# sleepers, earliest first, and it got 2 MB and "out of memory".)
	$d->{stderr} = '';
	$d->query('SELECT ' . join('+', (1) x 30000));
	like($d->{stderr}, qr/stack depth limit exceeded/,
		'a deeply nested expression reaches max_stack_depth, beside 30 sessions in pg_sleep: not "out of memory" in its parse');
	my $stack = $field->('VmStk');
	sleep 1.2;
	$d->{stderr} = '';
	$d->query('SELECT count(*) FROM generate_series(1, 1000 + (0 * random())::int)');
	my ($vm) = $d->{stderr} =~ /glibc_malloc start share: \d+ of room .* vmdata (\d+)/;
	my $vmdata = $field->('VmData');
	diag sprintf('after a deep nesting: VmStk %.1f MB; the start share counts from %s, VmData %.1f MB',
		$stack / $MB, defined $vm ? sprintf('%.1f MB', $vm / $MB) : 'nothing (no share)', $vmdata / $MB);
	cmp_ok($stack, '>=', 1.5 * $MB, 'the stack grew');
	ok(defined $vm && abs($vm - $vmdata) < $stack / 4,
		"the share counts from the backend's VmData, not VmData and the stack");
}
$d->quit;
$_->quit for @kept;

# What a short statement costs in system calls while the guard is
# engaged (strace on its backend, -y names a descriptor's file): 100
# SELECTs, each in a transaction of its own, each taking a start share.
# Each reads /proc/self/statm twice (VmData, the stack and RssAnon as its
# share is taken, what it maps at its end) from a descriptor its backend
# keeps open, and opens nothing: it opened /proc/self/status for its
# share and /proc/self/statm for its end before, one open and close each.
{
	my $n = 100;
	my $s = $node->background_psql('postgres');
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	$s->query_safe('SELECT 1');
	my @shares0 = shares();
	my $t0 = time;
	my @lines = GlibcMallocTest::traced_lines($pid, sub { $s->query_safe('SELECT 1') for 1 .. $n },
		'openat,pread64', '-y');
	my $took = time - $t0;
	my @shares1 = shares();
	my $status = grep { m{openat\(.*"/proc/self/status"} } @lines;
	my $opens = grep { m{openat\(.*"/proc/self/statm"} } @lines;
	my $statm = grep { m{pread64\(\d+</proc/\d+/statm>} } @lines;
	diag sprintf('%d short statements with the guard engaged: %d opens of /proc/self/status, %d of /proc/self/statm, %d reads of statm kept open',
		$n, $status, $opens, $statm);
	# (with room for reads once a second: the stack's size, the statistics
	# the backend publishes, the idle point's asked by the monitor)
	diag sprintf('the %d statements took %.1f s under strace', $n, $took);
	cmp_ok($status, '<', 30, "$n short statements do not read /proc/self/status");
	cmp_ok($opens, '<=', 1, 'nor open /proc/self/statm: it is kept open');
	cmp_ok($statm, '>=', $n, 'they read statm from it: their shares and their ends did read what they map');
	cmp_ok($statm, '<', 2.5 * $n, 'twice each, not more');
	# (and the second read's own share, a query in a session of its own:
	# 101 while the guard stays engaged and each finds room)
	diag sprintf('glibc_malloc_guard.start_shares: +%d', $shares1[0] - $shares0[0]);
	cmp_ok($shares1[0] - $shares0[0], '>=', $n / 2, "start_shares counts the $n statements' shares");
	cmp_ok($shares1[0] - $shares0[0], '<=', $n + 5, 'and little else');

	# A procedure that commits inside its CALL: the end of the transaction
	# inside it reads, and so does the CALL's end, after it.
	$s->query_safe(q{CREATE PROCEDURE gm_commits() LANGUAGE plpgsql AS $$BEGIN PERFORM 1; COMMIT; PERFORM length(repeat('x', 1000)); END$$});
	@lines = GlibcMallocTest::traced_lines($pid, sub { $s->query_safe('CALL gm_commits()') }, 'pread64', '-y');
	$statm = grep { m{pread64\(\d+</proc/\d+/statm>} } @lines;
	diag "a CALL that commits inside: $statm reads of /proc/self/statm";
	cmp_ok($statm, '>=', 2, 'a CALL that commits inside reads what it maps at that commit and at its own end');
	$s->query_safe('DROP PROCEDURE gm_commits()');
	$s->quit;
}

my $g1 = guard_counts($node);
is(guard()->[0], 't', 'the guard was still engaged');
is($g1->[5] - $g0->[5], 0, 'a start share is not an admission (admissions unchanged)');
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'SELECT 1 runs');

$node->safe_psql('postgres', "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'PgSleep'");
GlibcMallocTest::finish_query($_) for @sleeping;
is(cgroup_v1_oom_kills($cg), $kills_before, 'the kernel OOM-killed nothing');
unlike(slurp_file($node->logfile), qr/terminated by signal|all server processes terminated; reinitializing/, 'no restart');
$_->kill_kill for @fillers;
@fillers = ();
$node->stop('fast');
done_testing();
