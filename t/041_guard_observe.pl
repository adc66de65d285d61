# glibc_malloc.memory_guard = observe: the guard reads and decides as with
# cgroup, logs and counts what it would do, and does nothing.  The server
# runs in a real cgroup v1 of 2 GB below a parent of 800 MB (a pod, a
# systemd slice), beside a sidecar in a sibling cgroup: the parent's limit
# is the guard's (the tightest level, named in glibc_malloc_monitor).  Calm,
# with room up to the guard's target for about 4 to 5 recorded sorts by their
# charge, the same burst of 8 sorts twice:
#
#  - with cgroup (memory_wait = 0): the guard engages, lowers limits, and
#    the sorts that do not fit get "out of memory" (its counts rise);
#  - after a reload to observe (memory_wait = 120s, which observe ignores):
#    the same engagement is logged as "would limit", the limits it would
#    lower and the statements that would have failed are counted
#    (would_limit, would_fail), no backend has a data size limit in
#    /proc/PID/limits, nobody waits, limits_lowered and guard_errors do not
#    move; and the burst ends as with the guard off: the kernel OOM-kills a
#    backend, the server restarts, and glibc_malloc_guard.oom_kills counts
#    the kill as the cgroup does.
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
my $K = 8;
my $rows = 300_000;
my $sort = "SELECT count(*) FROM (SELECT md5(i::text) FROM generate_series(1, $rows) i ORDER BY 1) s";

# The parent (the suite's cgroup) of 800 MB, without swap; the server's
# cgroup of 2 GB below it, and the sidecar's without a limit of its own.
my ($server_cg, $sidecar_cg) = ("$cg/server", "$cg/sidecar");
sub set_limit
{
	my ($dir, $bytes) = @_;
	write_file("$dir/memory.memsw.limit_in_bytes", -1) if -w "$dir/memory.memsw.limit_in_bytes";
	write_file("$dir/memory.limit_in_bytes", $bytes);
	write_file("$dir/memory.memsw.limit_in_bytes", $bytes) if -w "$dir/memory.memsw.limit_in_bytes";
}
write_file("$cg/memory.swappiness", 0);
set_limit($cg, $limit);
for my $dir ($server_cg, $sidecar_cg)
{
	mkdir $dir or die "$dir: $!" unless -d $dir;
	write_file("$dir/memory.swappiness", 0);
}
set_limit($server_cg, 2048 * $MB);
END { rmdir $_ for grep { defined } $server_cg, $sidecar_cg }

my $node = new_node('observe', "restart_after_crash = on\nshared_buffers = 16MB\nmax_connections = 40\n"
	  . "glibc_malloc.track_statements = top\nglibc_malloc.memory_guard = cgroup\n", no_start => 1);
$node->start;
write_file("$server_cg/cgroup.procs", (split /\n/, slurp_file($node->data_dir . '/postmaster.pid'))[0]);
$node->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');
my $offset = -s $node->logfile;
sub oom_kills { cgroup_v1_oom_kills($server_cg) }
my $kills_before = oom_kills();

# The tightest limit is the guard's: the parent's 800 MB, not the server's 2 GB.
my ($mon_limit, $mon_cgroup);
wait_for(sub {
	($mon_limit, $mon_cgroup) = split /\|/, $node->safe_psql('postgres', 'SELECT limit_bytes, cgroup FROM glibc_malloc_monitor');
	$mon_limit eq $limit;
}, 15);
is($mon_limit, $limit, 'glibc_malloc_monitor.limit_bytes is the parent cgroup\'s 800 MB, not the server\'s 2 GB');
my $parent_name = (split m{/}, $cg)[-1];
like($mon_cgroup, qr{/\Q$parent_name\E$}, 'and glibc_malloc_monitor.cgroup names the parent');

sub cg_read { my $v = slurp_file("$cg/$_[0]"); chomp $v; return $v }
write_file("$cg/memory.max_usage_in_bytes", '0');
my $usage0 = cg_read('memory.usage_in_bytes');
$node->safe_psql('postgres', "SET work_mem = '1GB'; $sort");
my $charge = cg_read('memory.max_usage_in_bytes') - $usage0;
diag sprintf('one sort adds %.1f MB to the cgroup\'s usage', $charge / $MB);

# glibc_malloc_guard's row as a hash.
my @cols = qw(mode engaged usage_bytes target_bytes limits_lowered guard_errors would_limit would_fail waits oom_kills);
sub row
{
	my ($psql) = @_;
	my $sql = 'SELECT ' . join(', ', @cols) . ' FROM glibc_malloc_guard';
	my $out = $psql ? $psql->query_safe($sql) : $node->safe_psql('postgres', $sql);
	my %r;
	@r{@cols} = split /\|/, $out;
	return \%r;
}
sub room { my $r = row(); return $r->{target_bytes} - $r->{usage_bytes} }

# A sidecar in the sibling cgroup holds memory so that the usage is a
# little below the level where the guard lifts its limits (200 MB below
# the target of 736 MB, in 800 MB): the guard lets go after each burst.
# Processes of half a sort each, so that the kernel's OOM killer, which
# kills the largest, picks a sort when it acts.
my @fillers;
my ($want_lo, $want_hi) = (202 * $MB, 225 * $MB);
for my $try (1 .. 20)
{
	sleep 0.5;
	my $room = room();
	last if $room <= $want_hi && $room >= $want_lo;
	if ($room > $want_hi)
	{
		my $more = $room - ($want_lo + $want_hi) / 2;
		my $n = int($more / ($charge / 2)) + 1;
		push @fillers, start_filler($sidecar_cg, $more / $n) for 1 .. $n;
	}
	last if $room < $want_lo;
}
my $r0 = row();
diag sprintf('usage %.0f MB, target %.0f MB, limit %.0f MB: room for %.1f sorts up to the target, %.1f up to the limit',
	$r0->{usage_bytes} / $MB, $r0->{target_bytes} / $MB, $limit / $MB,
	($r0->{target_bytes} - $r0->{usage_bytes}) / $charge, ($limit - $r0->{usage_bytes}) / $charge);
is($r0->{engaged}, 'f', 'the guard is not engaged before the burst');
cmp_ok(($limit - $r0->{usage_bytes}) / $charge, '<', $K, "$K sorts do not fit up to the parent's limit");

# One burst of $K sorts; while it runs, every 50 ms: the sorts' soft data
# size limits (/proc/PID/limits), who waits for memory, and the guard's
# row (its counters start again if the server restarts).  Returns the
# results and what was seen.
sub burst
{
	my ($wait) = @_;
	my @runs = map { GlibcMallocTest::start_query($node, $sort, "SET work_mem = '1GB'",
			"SET glibc_malloc.memory_wait = '$wait'") } 1 .. $K;
	my $watch = $node->background_psql('postgres', on_error_stop => 0);
	my (%limited, %waited, %max);
	my $t0 = time;
	while (time - $t0 < 120)
	{
		eval { $_->{h}->pump_nb; 1 } for @runs;
		last unless grep { $_->{h}->pumpable } @runs;
		my ($ok, $pids, $row);
		$ok = eval {
			$pids = $watch->query_safe("SELECT coalesce(string_agg(pid || ':' || coalesce(wait_event_type, ''), ','), '') "
				  . "FROM pg_stat_activity WHERE query LIKE '%md5%' AND pid <> pg_backend_pid()");
			$row = row($watch);
			1;
		};
		last unless $ok;		# the server restarts
		for (grep { $_ ne '' } split /,/, $pids)
		{
			my ($pid, $event) = split /:/;
			$waited{$pid} = 1 if $event eq 'Extension';
			my $lim = eval { slurp_file("/proc/$pid/limits") } // '';
			$limited{$pid} = $1 if $lim =~ /^Max data size\s+(\S+)/m && $1 ne 'unlimited';
		}
		$max{$_} = $row->{$_} > ($max{$_} // -1) ? $row->{$_} : $max{$_} for qw(would_limit would_fail limits_lowered guard_errors);
		$max{engaged} ||= $row->{engaged} eq 't';
		sleep 0.05;
	}
	eval { $watch->quit };
	my ($completed, $oom, $other) = (0, 0, 0);
	for my $r (map { GlibcMallocTest::finish_query($_) } @runs)
	{
		if ($r->{out} =~ /^$rows$/m) { $completed++ }
		elsif ($r->{err} =~ /out of memory/) { $oom++ }
		else { $other++ }
	}
	diag sprintf('memory_wait %s: %d of %d completed, %d out of memory, %d other (connection lost); '
		  . '%d with a data size limit, %d waited; seen: engaged %s, would_limit %d, would_fail %d, limits_lowered %d, guard_errors %d',
		$wait, $completed, $K, $oom, $other, scalar(keys %limited), scalar(keys %waited),
		$max{engaged} ? 'yes' : 'no', map { $max{$_} // -1 } qw(would_limit would_fail limits_lowered guard_errors));
	return { completed => $completed, oom => $oom, other => $other, limited => scalar(keys %limited),
		waited => scalar(keys %waited), max => \%max };
}

# 1. The guard acts (cgroup).
cmp_ok(($r0->{target_bytes} - $r0->{usage_bytes}) / $charge, '<', $K, "$K sorts do not fit up to the target");
my $ra = burst('0');
my $r1 = row();
is($r1->{mode}, 'cgroup', 'glibc_malloc_guard.mode is cgroup');
ok($ra->{max}{engaged}, 'cgroup: the guard engaged during the burst');
cmp_ok($r1->{limits_lowered} - $r0->{limits_lowered}, '>', 0, 'cgroup: it lowered limits');
cmp_ok($ra->{limited}, '>', 0, 'cgroup: sorts ran with a data size limit in /proc/PID/limits');
cmp_ok($ra->{oom}, '>', 0, 'cgroup: the sorts that did not fit got "out of memory"');
cmp_ok($r1->{guard_errors} - $r0->{guard_errors}, '>', 0, 'cgroup: counted in guard_errors');
is($r1->{would_limit} + $r1->{would_fail}, 0, 'cgroup: would_limit and would_fail stay 0');
is(oom_kills(), $kills_before, 'cgroup: the kernel OOM-killed nothing, though the server\'s own cgroup has room for all');
my $log = slurp_file($node->logfile, $offset);
like($log, qr/glibc_malloc memory guard: limiting backends' private memory/, 'cgroup: logged as limiting');

# 2. The same burst, observed.
ok(wait_for(sub { room() >= $want_lo && row()->{engaged} eq 'f' }, 30), 'the guard lets go after the burst');
$node->append_conf('postgresql.conf', "glibc_malloc.memory_guard = observe\n");
$node->reload;
ok(wait_for(sub { row()->{mode} eq 'observe' }, 10), 'after a reload, glibc_malloc_guard.mode is observe');
$offset = -s $node->logfile;
my $r2 = row();
my $rb = burst('120s');
$log = slurp_file($node->logfile, $offset);
like($log, qr/glibc_malloc memory guard \(observe\): would limit backends' private memory/, 'observe: the engagement is logged as "would limit"');
like($log, qr/glibc_malloc memory guard \(observe\): would refuse memory to process \d+/, 'observe: a statement that would have failed is logged');
unlike($log, qr/glibc_malloc memory guard: limiting/, 'observe: nothing logged as limiting');
ok($rb->{max}{engaged}, 'observe: glibc_malloc_guard.engaged shows the guard would be engaged');
cmp_ok($rb->{max}{would_limit}, '>', 0, 'observe: the limits it would lower are counted (would_limit)');
cmp_ok($rb->{max}{would_fail}, '>', 0, 'observe: the statements that would have failed are counted (would_fail)');
is($rb->{max}{limits_lowered}, $r2->{limits_lowered}, 'observe: limits_lowered does not move');
is($rb->{max}{guard_errors}, $r2->{guard_errors}, 'observe: guard_errors does not move');
is($rb->{limited}, 0, 'observe: no sort had a data size limit in /proc/PID/limits');
is($rb->{waited}, 0, 'observe: nobody waited for memory (memory_wait = 120s)');
is($rb->{oom}, 0, 'observe: no "out of memory"');

# As with the guard off: the kernel kills, the server restarts.
cmp_ok(oom_kills(), '>', $kills_before, 'observe: the kernel OOM-killed a backend, as with the guard off');
$log = wait_for_log_text($node, $offset, qr/terminated by signal 9/, 30);
like($log, qr/terminated by signal 9/, 'and the server restarted its sessions');
ok(wait_for(sub { eval { row()->{oom_kills} == oom_kills() } }, 30),
	'glibc_malloc_guard.oom_kills counts the kill as the cgroup does');

$_->kill_kill for @fillers;
$node->stop('fast');
wait_for(sub { slurp_file("$server_cg/cgroup.procs") eq '' && slurp_file("$sidecar_cg/cgroup.procs") eq '' }, 10);
done_testing();
