# The memory guard keeps a reserve for small work: every guarded backend
# may map a few MB beyond its VmData, kept in the guard's margin, so that
# an idle backend's limit never sits at its VmData.  In a real cgroup v1 of
# 800 MB (the guard's target 736 MB), 30 idle sessions LISTEN while
# another process of the container holds the usage between the guard's
# engage level and its target (33 MB of headroom, as in issue 32's run);
# the guard engages, the monitor asks the idle sessions for their free heap
# and limits them.  Then SELECT 1 succeeds in all 30, and 300 NOTIFY with
# 7000-byte payloads plus temporary-table DDL (catalog invalidations, and
# a sinval reset for the listeners) from another session: no error, every
# listener gets every notification, no FATAL (NOTIFY delivery and the
# catalog catch-up run inside ReadCommand, where an ERROR becomes FATAL).
# Before, SELECT 1 failed in 11 of 30 sessions and the loop 186 of 300
# times.  The VmData growth of the listeners, measured in /proc, is noted:
# what the reserve must cover.
#
# And limits set right after a trim: 10 more sessions LISTEN on another
# channel after a sort under the greedy preset (its heap kept free); the
# guard engages, the monitor asks them for that free heap, they trim at
# their idle point, and the guard limits them at their trimmed VmData (no
# statement runs in them afterwards).  The same NOTIFY and DDL loop then
# delivers into them and makes them catch up with the catalog at their idle
# point: every notification arrives, no FATAL ("protocol synchronization
# was lost").  Then they are stopped while 1000 DDLs overflow the
# invalidation queue, and continued: each processes a sinval reset (it
# discards and rebuilds its catalog caches) at its idle point, no FATAL.
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
use Time::HiRes qw(sleep);

my $cg = test_cgroup_v1();

my $MB = 2**20;
my $limit = 800 * $MB;
my $listeners = 30;
my $trimmed_n = 10;
my $notifies = 300;
my $headroom_wanted = 33 * $MB;

sub oom_kills { cgroup_v1_oom_kills($cg) }
# The cgroup is the suite's: the kills of earlier tests are in its count.
my $kills_before = oom_kills();
sub vmdata { (slurp_file("/proc/$_[0]/status") =~ /VmData:\s+(\d+) kB/)[0] * 1024 }

my $node = new_node('reserve', "restart_after_crash = on\nshared_buffers = 16MB\nmax_connections = 100\n", no_start => 1);
$node->start;
enter_cgroup_v1($node, $cg, $limit);
$node->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');

my @ls = map { $node->background_psql('postgres', on_error_stop => 0) } 1 .. $listeners;
my @pids;
for my $s (@ls)
{
	$s->query_safe('LISTEN ch');
	push @pids, $s->query_safe('SELECT pg_backend_pid()');
}
# The sessions to be trimmed: 10 to 20 MB of free heap each, kept.
my @ts = map { $node->background_psql('postgres', on_error_stop => 0) } 1 .. $trimmed_n;
my @tpids;
for my $s (@ts)
{
	# DEBUG4 logs "cache state reset" when a sinval reset is processed.
	$s->query_safe("SET glibc_malloc.preset = greedy; SET work_mem = '1GB'; SET log_min_messages = debug4");
	$s->query_safe('SELECT count(*) FROM (SELECT md5(i::text) FROM generate_series(1, 100000) i ORDER BY 1) s');
	$s->query_safe('LISTEN ch2');
	push @tpids, $s->query_safe('SELECT pg_backend_pid()');
}
my $tlist = join ',', @tpids;
my $tfree = $node->safe_psql('postgres', "SELECT sum(free_bytes) FROM glibc_malloc_backends WHERE pid IN ($tlist)");
diag sprintf('the %d sessions to be trimmed keep %.0f MB of free heap', $trimmed_n, $tfree / $MB);
cmp_ok($tfree, '>=', $trimmed_n * 5 * $MB, 'the sessions to be trimmed keep free heap');
my $sender = $node->background_psql('postgres', on_error_stop => 0);
$sender->query_safe('SELECT 1');

# Another process of the container holds memory: it moves into the cgroup
# first, then touches its bytes, so that they are charged there.
my @fillers;
sub fill { push @fillers, start_filler($cg, $_[0]) }

sub guard { [ split /\|/, $node->safe_psql('postgres', 'SELECT engaged, usage_bytes, target_bytes FROM glibc_malloc_guard') ] }

# The usage to about 33 MB below the target.
sub top_up
{
	for my $try (1 .. 20)
	{
		sleep 0.5;
		my ($engaged, $usage, $target) = @{ guard() };
		my $headroom = $target - $usage;
		last if $headroom < $headroom_wanted + 8 * $MB;
		fill($headroom - $headroom_wanted);
	}
}
top_up();
# The monitor asks the idle sessions for their free heap and limits them;
# what the trims returned is topped up again.
sleep 3;
top_up();
sleep 2;
my ($engaged, $usage, $target) = @{ guard() };
diag sprintf('usage %.0f MB, target %.0f MB: headroom %.0f MB', $usage / $MB, $target / $MB, ($target - $usage) / $MB);
is($engaged, 't', 'the guard is engaged');
my @before = map { vmdata($_) } @pids;

# The trimmed sessions: asked, trimmed, and limited at their trimmed VmData.
my $trims = $node->safe_psql('postgres', "SELECT count(*) FROM glibc_malloc_backends WHERE pid IN ($tlist) AND remote_trims > 0");
is($trims, $trimmed_n, "the monitor asked all $trimmed_n sessions for their free heap, and they trimmed it");
my $tight = 0;
my @room;
for my $pid (@tpids)
{
	my ($vm, $lim) = split /\|/, $node->safe_psql('postgres', "SELECT vmdata_bytes, guard_limit_bytes FROM glibc_malloc_processes() WHERE pid = $pid");
	next unless length $lim;
	push @room, sprintf('%.1f', ($lim - $vm) / $MB);
	$tight++ if $lim - $vm < 72 * $MB;
}
diag "the trimmed sessions' limits above their VmData (MB): @room";
is($tight, $trimmed_n, "the guard limits all $trimmed_n at their trimmed VmData, room for a client message (64 MB at most) and the reserve");
my $offset = -s $node->logfile;

# 1. SELECT 1 in every listener.
my $ok = 0;
for my $s (@ls)
{
	my ($r, $err) = $s->query('SELECT 1');
	$ok++ if ($r // '') eq '1' && !$err;
	$s->{stderr} = '';
}
diag "SELECT 1 succeeded in $ok of $listeners idle listeners";
is($ok, $listeners, "SELECT 1 succeeds in all $listeners idle sessions");
my @after1 = map { vmdata($_) } @pids;

# 2. NOTIFY with 7000-byte payloads, and temporary-table DDL.
my $errors = 0;
for my $i (1 .. $notifies)
{
	my (undef, $err) = $sender->query("SELECT pg_notify('ch', lpad('$i', 7000, 'x')), pg_notify('ch2', lpad('$i', 7000, 'y')); CREATE TEMP TABLE tt$i (a int, b text); DROP TABLE tt$i");
	if ($err)
	{
		$errors++;
		diag "notify $i: $sender->{stderr}" if $errors <= 3;
	}
	$sender->{stderr} = '';
}
diag "$notifies NOTIFY + temporary-table DDL: $errors errors";
is($errors, 0, "$notifies NOTIFY with 7000-byte payloads and temporary-table DDL: no error");

# Every listener gets every notification (psql prints them with its next
# result), and is still connected.
my ($all, $alive) = (0, 0);
for my $s (@ls)
{
	my ($r, $err) = $s->query('SELECT 1');
	my $got = () = ($r // '') =~ /Asynchronous notification "ch" with payload "x+\d+" received/g;
	$all++ if $got == $notifies;
	$alive++ if ($r // '') =~ /^1$/m;
	$s->{stderr} = '';
}
my @after2 = map { vmdata($_) } @pids;
my ($g1, $g2) = (0, 0);
for my $i (0 .. $#pids)
{
	$g1 = $after1[$i] - $before[$i] if $after1[$i] - $before[$i] > $g1;
	$g2 = $after2[$i] - $before[$i] if $after2[$i] - $before[$i] > $g2;
}
diag sprintf('largest VmData growth of a listener: %.0f kB for SELECT 1, %.0f kB after the notifications and the catalog catch-up', $g1 / 1024, $g2 / 1024);
is($all, $listeners, "every listener got all $notifies notifications");
is($alive, $listeners, 'and every listener is still connected');
($all, $alive) = (0, 0);
for my $s (@ts)
{
	my ($r, $err) = $s->query('SELECT 1');
	my $got = () = ($r // '') =~ /Asynchronous notification "ch2" with payload "y+\d+" received/g;
	$all++ if $got == $notifies;
	$alive++ if ($r // '') =~ /^1$/m;
	$s->{stderr} = '';
}
is($all, $trimmed_n, "every session limited right after its trim got all $notifies notifications");
is($alive, $trimmed_n, 'and is still connected');

# 3. A sinval reset at the idle point.  The sessions limited right after
# their trim are stopped (SIGSTOP) while 1000 temporary-table DDLs from
# another session overflow the invalidation queue (4096 messages): they
# cannot catch up, and are marked for a reset.  Continued, each serves the
# catch-up signal at its idle point, inside ReadCommand, and, reset,
# discards and rebuilds its catalog caches there.
my %limit_stop;
for my $pid (@tpids)
{
	my ($vm, $lim) = split /\|/, $node->safe_psql('postgres', "SELECT vmdata_bytes, guard_limit_bytes FROM glibc_malloc_processes() WHERE pid = $pid");
	$limit_stop{$pid} = [ $vm, $lim ];
}
my $reset_offset = -s $node->logfile;
kill 'STOP', @tpids;
my $ddl_errors = 0;
for my $i (1 .. 1000)
{
	my (undef, $err) = $sender->query("CREATE TEMP TABLE r$i (a int, b text, c int); DROP TABLE r$i");
	$ddl_errors++ if $err;
	$sender->{stderr} = '';
}
kill 'CONT', @tpids;
is($ddl_errors, 0, '1000 temporary-table DDLs while the sessions are stopped: no error');
# PostgreSQL signals the session furthest behind, one at a time: those it
# signalled reset at their idle point, the others at their next command.
sub resets
{
	my $l = slurp_file($node->logfile, $reset_offset);
	return scalar grep { $l =~ /\[$_\][^\n]*DEBUG:  cache state reset/ } @tpids;
}
wait_for(sub { resets() == $trimmed_n }, 10);
my $idle_resets = resets();
my @reset_room;
for my $pid (@tpids)
{
	my ($vm0, $lim) = @{ $limit_stop{$pid} };
	push @reset_room, sprintf('%.1f/%.1f', (vmdata($pid) - $vm0) / $MB, (($lim || 0) - $vm0) / $MB);
}
diag "$idle_resets of $trimmed_n sessions reset at their idle point; their VmData growth / their limit's room above VmData when stopped (MB): @reset_room";
cmp_ok($idle_resets, '>=', 1, 'sessions limited right after their trim process a sinval reset at their idle point (DEBUG4: cache state reset)');
$alive = 0;
for my $s (@ts)
{
	my ($r, $err) = $s->query('SELECT 1');
	$alive++ if ($r // '') =~ /^1$/m;
	$s->{stderr} = '';
}
is(resets(), $trimmed_n, "all $trimmed_n were reset, the others at their next command");
is($alive, $trimmed_n, 'after the reset, every session limited right after its trim is still connected and runs SELECT 1');
my $log = slurp_file($node->logfile, $offset);
my @fatal = grep { /FATAL:/ } split /\n/, $log;
is(scalar @fatal, 0, 'no FATAL') or diag join "\n", @fatal[ 0 .. ($#fatal < 4 ? $#fatal : 4) ];
my $view = $node->safe_psql('postgres', 'SELECT reserve_bytes, reserve_shrunk FROM glibc_malloc_guard');
diag "glibc_malloc_guard: reserve_bytes|reserve_shrunk = $view";
like($view, qr/^\d+\|[tf]$/, 'glibc_malloc_guard shows the reserve while engaged');
is(oom_kills(), $kills_before, 'the kernel OOM-killed nothing');
unlike(slurp_file($node->logfile), qr/terminated by signal|all server processes terminated; reinitializing/, 'no restart');

eval { $_->quit } for @ls, @ts, $sender;
$_->kill_kill for @fillers;
$node->stop('fast');
done_testing();
