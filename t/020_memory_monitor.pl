# The memory monitor: a background worker that reads the server's memory
# limit (cgroup v2, cgroup v1, or the system) and asks backends to return
# their free heap under pressure and above glibc_malloc.max_total_free.
# The cgroup files here are real-format copies in a directory named by
# glibc_malloc.monitor_cgroup; t/021 runs the server in a real cgroup.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep usleep);

my $MB = 2**20;
# The cgroup files here are copies with made-up usage: the memory guard
# would limit the real backends from those numbers (t/025 to t/027 test it).
my $node = new_node('monitor', "work_mem = '32MB'\nglibc_malloc.preset = 'greedy'\nglibc_malloc.memory_guard = off\n");
my $big_sort = workload('big_sort');
my $dir = PostgreSQL::Test::Utils::tempdir;

# The monitor's state, as a hash.
sub monitor
{
	my $row = $node->safe_psql('postgres',
		"SELECT row_to_json(m) FROM glibc_malloc_monitor m");
	my %m = $row =~ /"(\w+)":("(?:[^"\\]|\\.)*"|[^,}]+)/g;
	s/^"|"$//g for values %m;
	$_ eq 'null' and $_ = undef for values %m;
	return \%m;
}

# Write files into a directory, as the kernel formats them, in the order
# given, each at once (a new file renamed over the old: the monitor never
# reads one empty or half written).
sub write_files
{
	my ($d, @files) = @_;
	mkdir $d;
	while (my ($f, $v) = splice(@files, 0, 2))
	{
		open my $fh, '>', "$d/.$f.new" or die "$d/.$f.new: $!";
		print $fh $v;
		close $fh or die "$d/.$f.new: $!";
		rename "$d/.$f.new", "$d/$f" or die "$d/$f: $!";
	}
}

# A cgroup v2 directory with usage, limits and pressure.  The monitor looks
# every 250 ms and may look between two files: each change is written so
# that no state in between shows more pressure than the old or the new one
# (first what eases it: the usage down to the lesser of the two, limits
# that rise, file pages that grow, PSI that falls; then the rest, the usage
# last), and a new directory becomes a cgroup (memory.current) last.
my %cgroup_v2_last;
sub cgroup_v2
{
	my ($d, %o) = @_;
	my %new = (
		'memory.current' => $o{current},
		'memory.max' => $o{max} // 'max',
		'memory.high' => $o{high} // 'max',
		file => ($o{active_file} // 0) + ($o{inactive_file} // 0),
		psi => $o{psi} // 0);
	my %text = (
		'memory.max' => "$new{'memory.max'}\n",
		'memory.high' => "$new{'memory.high'}\n",
		'memory.stat' => "anon 1000000\nfile 5000\nkernel 3000\nshmem 4096\nactive_anon 100\ninactive_anon 900\n"
		  . "active_file " . ($o{active_file} // 0) . "\ninactive_file " . ($o{inactive_file} // 0) . "\nunevictable 0\n",
		'memory.pressure' => sprintf("some avg10=%.2f avg60=0.00 avg300=0.00 total=12345\n"
			  . "full avg10=0.00 avg60=0.00 avg300=0.00 total=678\n", $new{psi}));
	my $old = $cgroup_v2_last{$d};
	my $inf = sub { $_[0] eq 'max' ? 9**99 : $_[0] };
	my %easing = !$old ? () : (
		'memory.max' => $inf->($new{'memory.max'}) >= $inf->($old->{'memory.max'}),
		'memory.high' => $inf->($new{'memory.high'}) >= $inf->($old->{'memory.high'}),
		'memory.stat' => $new{file} >= $old->{file},
		'memory.pressure' => $new{psi} <= $old->{psi});
	my @order = ('memory.stat', 'memory.max', 'memory.high', 'memory.pressure');
	write_files($d, 'memory.current' => ($old->{'memory.current'} < $new{'memory.current'}
			? $old->{'memory.current'} : $new{'memory.current'}) . "\n") if $old;
	write_files($d, map { ($_ => $text{$_}) } grep { $easing{$_} } @order);
	write_files($d, map { ($_ => $text{$_}) } grep { !$easing{$_} } @order);
	write_files($d, 'memory.current' => "$new{'memory.current'}\n");
	$cgroup_v2_last{$d} = \%new;
}

# Point the monitor at a directory (or '' for the server's own) and wait
# until it has read it.
sub watch
{
	my ($d) = @_;
	$node->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.monitor_cgroup = '$d'; SELECT pg_reload_conf()");
	my $since = $node->safe_psql('postgres', 'SELECT now()');
	wait_for(sub { $node->safe_psql('postgres', "SELECT checked_at > '$since' FROM glibc_malloc_monitor") eq 't' }, 15);
}

# A greedy session that ran two big sorts and went idle: about 13 MB of
# free heap.  Returns it and its pid, once its snapshot shows the free heap.
sub holder
{
	my $s = $node->background_psql('postgres');
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	$s->query_safe("$big_sort; $big_sort");
	$s->query_safe('SELECT 1');
	wait_for(sub { $node->safe_psql('postgres', "SELECT free_bytes > 8 * 2^20 FROM glibc_malloc_backends WHERE pid = $pid") eq 't' }, 15);
	return ($s, $pid);
}

sub remote_trims
{
	my ($pid) = @_;
	return $node->safe_psql('postgres', "SELECT remote_trims FROM glibc_malloc_backends WHERE pid = $pid");
}

# It runs, as its own process.
ok(wait_for(sub { $node->safe_psql('postgres', 'SELECT checked_at IS NOT NULL FROM glibc_malloc_monitor') eq 't' }, 15),
	'the monitor has looked');
my $m = monitor();
ok($m->{pid} && -d "/proc/$m->{pid}", 'the monitor runs');
like(slurp_file("/proc/$m->{pid}/cmdline"), qr/glibc_malloc memory monitor/, 'as a background worker of its own');
is($m->{enabled}, 'true', 'on by default');
like($m->{source}, qr/^(system|cgroup v[12])$/, "it reads the server's memory limit ($m->{source})");
ok($m->{limit_bytes} > 0 && $m->{usage_bytes} > 0, 'with a limit and a usage');

# No pressure, no cap: it never trims.  (A cgroup v2 at 50% of its limit,
# without PSI: the machine's own memory may be busy in CI.)
cgroup_v2("$dir/v2", current => 500 * $MB, max => 1000 * $MB);
watch("$dir/v2");
my ($s1, $pid1) = holder();
sleep 1;
$m = monitor();
is($m->{under_pressure}, 'false', 'no pressure at 50%');
is($m->{rounds}, 0, 'no pressure, no cap: no round');
is(remote_trims($pid1), 0, 'and the greedy backend keeps its free heap');
ok($m->{total_free_bytes} > 8 * $MB, sprintf('it sees the free heap (%.1f MB)', $m->{total_free_bytes} / $MB));

# cgroup v2 under its limit: usage minus file pages.
cgroup_v2("$dir/v2", current => 950 * $MB, max => 1000 * $MB, active_file => 50 * $MB, inactive_file => 150 * $MB);
sleep 0.6;
$m = monitor();
is($m->{source}, 'cgroup v2', 'memory.max and memory.current: cgroup v2');
is($m->{cgroup}, "$dir/v2", 'the directory configured');
is($m->{limit_bytes}, 1000 * $MB, 'the limit from memory.max');
is($m->{usage_bytes}, 750 * $MB, 'the usage is memory.current minus active_file and inactive_file');
is($m->{under_pressure}, 'false', '75%: no pressure');
is(remote_trims($pid1), 0, 'nothing trimmed');

# memory.high below memory.max is the limit; 95% of it is pressure.
my $log_offset = -s $node->logfile;
cgroup_v2("$dir/v2", current => 855 * $MB, high => 900 * $MB, max => 1000 * $MB);
ok(wait_for(sub { remote_trims($pid1) >= 1 }, 15), 'at 95% of memory.high the monitor trims the greedy backend');
$m = monitor();
is($m->{limit_bytes}, 900 * $MB, 'memory.high, being lower, is the limit');
is($m->{under_pressure}, 'true', 'under pressure');
ok($m->{rounds} >= 1 && $m->{backends_asked} >= 1, "a round that asked ($m->{rounds}, $m->{backends_asked})");
like($m->{last_action}, qr/cgroup v2 memory usage 855 MB is 95% of its 900 MB limit/, 'the last action says why');
ok(wait_for(sub { monitor()->{returned_bytes} > 8 * $MB }, 15), 'what the backend returned is measured');
my $log = slurp_file($node->logfile, $log_offset);
like($log, qr/LOG:  glibc_malloc memory monitor: asked \d+ backends? to return \d+ [kM]B of free heap\n.*DETAIL:  cgroup v2 memory usage 855 MB is 95% of its 900 MB limit \(acting at 90%, until below 85%\)/,
	'logged at LOG: how many backends, how many bytes, and why');

# The pressure ends below 85% (hysteresis), not at 90%.
cgroup_v2("$dir/v2", current => 783 * $MB, high => 900 * $MB);	# 87%
sleep 1;
is(monitor()->{under_pressure}, 'true', '87%: still under pressure (ends below 85%)');
cgroup_v2("$dir/v2", current => 720 * $MB, high => 900 * $MB);	# 80%
ok(wait_for(sub { monitor()->{under_pressure} eq 'false' }, 15), '80%: the pressure is over');
ok(wait_for(sub { slurp_file($node->logfile, $log_offset) =~ /memory pressure over after [\d.]+ s: cgroup v2 usage 720 MB is 80% of the 900 MB limit/ }, 15),
	'and that is logged');
like(slurp_file($node->logfile, $log_offset), qr/DETAIL:  \d+ rounds; the backends asked returned \d+ [kM]B\./, 'with what the backends returned');

# It asks only for what is needed, largest holder first: 91 MB of a
# 100 MB limit needs 6 MB back (to 85%), which one holder covers.
my ($s2, $pid2) = holder();
my ($s3, $pid3) = holder();
my %before = map { $_ => remote_trims($_) } ($pid1, $pid2, $pid3);
$log_offset = -s $node->logfile;
cgroup_v2("$dir/v2", current => 91 * $MB, max => 100 * $MB);
ok(wait_for(sub { slurp_file($node->logfile, $log_offset) =~ /asked \d+ backends?/ }, 15), 'pressure again at 91%');
cgroup_v2("$dir/v2", current => 10 * $MB, max => 100 * $MB);
like(slurp_file($node->logfile, $log_offset), qr/asked 1 backend to return \d+ [kM]B of free heap\n.*DETAIL:  cgroup v2 memory usage 91 MB is 91% of its 100 MB limit/,
	'a need of 6 MB asks one backend, not all three');
ok(wait_for(sub { monitor()->{under_pressure} eq 'false' }, 15), 'over again');

# PSI alone, without a limit: half of the free heap, once per 10 s.
$_->query_safe("$big_sort; $big_sort; SELECT 1") for ($s1, $s2, $s3);
sleep 1.5;
%before = map { $_ => remote_trims($_) } ($pid1, $pid2, $pid3);
cgroup_v2("$dir/psi", current => 900 * $MB, psi => 25);
watch("$dir/psi");
ok(wait_for(sub { grep { remote_trims($_) > $before{$_} } ($pid1, $pid2, $pid3) }, 15), 'PSI some avg10 25%: a round');
$m = monitor();
is($m->{limit_bytes}, undef, 'memory.max "max": no limit');
is($m->{psi_some_avg10}, 25, 'PSI read from memory.pressure');
like($m->{last_action}, qr/PSI some avg10 is 25.0% \(acting at 10.0%\)/, 'the round says why');
my $trimmed = grep { remote_trims($_) > $before{$_} } ($pid1, $pid2, $pid3);
ok($trimmed >= 1 && $trimmed <= 2, "half of the free heap: $trimmed of 3 backends asked");

# cgroup v1.
write_files("$dir/v1",
	'memory.usage_in_bytes' => 500 * $MB . "\n",
	'memory.limit_in_bytes' => 9223372036854771712 . "\n",
	'memory.stat' => "cache 1000\nrss 2000\ntotal_cache 0\ntotal_active_file " . 60 * $MB . "\ntotal_inactive_file " . 40 * $MB . "\n");
watch("$dir/v1");
$m = monitor();
is($m->{source}, 'cgroup v1', 'memory.limit_in_bytes: cgroup v1');
is($m->{limit_bytes}, undef, "v1's page-counter maximum means no limit");
write_files("$dir/v1", 'memory.limit_in_bytes' => 1000 * $MB . "\n");
ok(wait_for(sub { (monitor()->{limit_bytes} // 0) == 1000 * $MB }, 15), 'a v1 limit is read');
is(monitor()->{usage_bytes}, 400 * $MB, 'the usage is usage_in_bytes minus total_active_file and total_inactive_file');

# Turned off, it reads but never acts.
my $rounds = monitor()->{rounds};
$node->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.memory_monitor = off; SELECT pg_reload_conf()");
# The monitor reads the reload at its next look: wait for it, then go over
# the limit (a slow machine took more than 1.5 s to show the reload).
ok(wait_for(sub { monitor()->{enabled} eq 'false' }, 15), 'memory_monitor = off');
write_files("$dir/v1", 'memory.usage_in_bytes' => 1100 * $MB . "\n");
sleep 1.5;
is(monitor()->{rounds}, $rounds, 'off: no round even over the limit');
$node->safe_psql('postgres', "ALTER SYSTEM RESET glibc_malloc.memory_monitor; SELECT pg_reload_conf()");
write_files("$dir/v1", 'memory.usage_in_bytes' => 100 * $MB . "\n");

# Bad values are refused and change nothing.
my $auto = slurp_file($node->data_dir . '/postgresql.auto.conf');
my ($ret, $out, $err) = $node->psql('postgres', "ALTER SYSTEM SET glibc_malloc.monitor_cgroup = 'relative/dir'");
like($err, qr/invalid value for parameter "glibc_malloc.monitor_cgroup".*\n.*DETAIL:  glibc_malloc.monitor_cgroup must be an absolute path/, 'a relative cgroup path is refused');
($ret, $out, $err) = $node->psql('postgres', "ALTER SYSTEM SET glibc_malloc.monitor_fraction = 1.5");
like($err, qr/1.5 is outside the valid range for parameter "glibc_malloc.monitor_fraction"/, 'a fraction above 1 is refused');
is(slurp_file($node->data_dir . '/postgresql.auto.conf'), $auto, 'and nothing was written');
($ret, $out, $err) = $node->psql('postgres', "SET glibc_malloc.max_total_free = '64MB'");
like($err, qr/cannot be changed now/, 'the cap is server-wide (sighup)');

# A configured directory without memory files: logged, read as none.
watch("$dir");
is(monitor()->{source}, 'none', 'a directory without cgroup files reads as none');
like(slurp_file($node->logfile, $log_offset), qr/LOG:  glibc_malloc memory monitor: "\Q$dir\E" holds no cgroup memory files/, 'and says so');
cgroup_v2("$dir/v2", current => 500 * $MB, max => 1000 * $MB);
watch("$dir/v2");
$_->quit for ($s1, $s2, $s3);

# The cap: sixteen greedy backends keep about 150 MB of free heap together;
# with max_total_free = 64MB, they keep at most 64 MB plus one backend's
# worth soon after going idle, in the view and in /proc.
$node->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.max_total_free = '64MB'; SELECT pg_reload_conf()");
my (@sessions, @pids, %start);
for (1 .. 16)
{
	my $s = $node->background_psql('postgres');
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	$start{$pid} = rss_anon($pid);
	push @sessions, $s;
	push @pids, $pid;
}
$_->query_safe("$big_sort; $big_sort; SELECT 1") for @sessions;
my $done = time;
my $list = join ',', @pids;
my $one = 16 * $MB;		# one backend's worth: more than any of them holds
my $sum_free = sub {
	$node->safe_psql('postgres', "SELECT sum(least(free_bytes, greatest(rss_anon_bytes - in_use_bytes, 0))) FROM glibc_malloc_backends WHERE pid IN ($list)");
};
my $proc_free = sub { my $t = 0; $t += rss_anon($_) - $start{$_} for @pids; $t };
ok(wait_for(sub { monitor()->{total_free_bytes} <= 64 * $MB + $one && $proc_free->() <= 64 * $MB + $one }, 15),
	'soon after: at most 64 MB plus one backend of free heap');
note sprintf('%.1f s after the sorts: monitor total %.1f MB, view %.1f MB, RssAnon growth in /proc %.1f MB',
	time - $done, monitor()->{total_free_bytes} / $MB, $sum_free->() / $MB, $proc_free->() / $MB);
cmp_ok($sum_free->(), '<=', 64 * $MB + $one, 'the view agrees');
my $summary = $node->safe_psql('postgres', 'SELECT free_bytes FROM glibc_malloc_summary');
cmp_ok($summary, '<=', 64 * $MB + $one + 8 * $MB, 'and glibc_malloc_summary');
my $asked = grep { remote_trims($_) > 0 } @pids;
ok($asked >= 6 && $asked < 16, "the largest holders were asked, not all ($asked of 16)");
like(slurp_file($node->logfile, $log_offset), qr/all backends keep \d+ MB of free heap, more than glibc_malloc.max_total_free \(64 MB\)/,
	'the cap rounds say why');
$_->quit for @sessions;

# A backend that cannot serve a request (idle in a transaction) does not
# blind the monitor: what it was asked for stops counting against the need
# after a grace of about a second, and the next holder is asked.  A holds
# more free heap than B and sits idle in a transaction; the cap is just
# above B's free heap, so asking A (first, the largest) alone would cover
# the need.
$node->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.max_total_free = -1; SELECT pg_reload_conf()");
my $a = $node->background_psql('postgres');
my $apid = $a->query_safe('SELECT pg_backend_pid()');
$a->query_safe("SET work_mem = '256MB'; SET glibc_malloc.max_trim_threshold = '256MB'; SELECT g FROM generate_series(1, 2000000) g ORDER BY g DESC OFFSET 2000000");
sleep 1.2;    # its snapshot, published at its idle point
$a->query_safe('BEGIN; SELECT 1');
my ($b, $bpid) = holder();
my $heap = sub { $node->safe_psql('postgres', "SELECT least(free_bytes, greatest(rss_anon_bytes - in_use_bytes, 0)) FROM glibc_malloc_backends WHERE pid = $_[0]") };
my ($afree, $bfree) = ($heap->($apid), $heap->($bpid));
ok($afree > $bfree + 4 * $MB, sprintf('A holds %.1f MB free, idle in a transaction; B %.1f MB', $afree / $MB, $bfree / $MB));
my $cap = int($bfree / 1024) + 1024;    # kB: B's free heap plus 1 MB
my $rounds0 = monitor()->{rounds};
$node->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.max_total_free = '${cap}kB'; SELECT pg_reload_conf()");
my $t0 = time;
ok(wait_for(sub { remote_trims($bpid) >= 1 }, 15), sprintf('B is asked and trims within %.1f s', time - $t0));
is($a->query_safe('SELECT remote_trims FROM glibc_malloc_stats()'), 0, 'A, idle in its transaction, has not served');
ok(wait_for(sub { monitor()->{total_free_bytes} <= $afree + 2 * $MB }, 15),
	sprintf('the total falls to what A alone holds (%.1f MB)', monitor()->{total_free_bytes} / $MB));
$a->query_safe('COMMIT');
ok(wait_for(sub { $a->query_safe('SELECT remote_trims FROM glibc_malloc_stats()') >= 1 }, 15), 'A serves after its COMMIT');
ok(wait_for(sub { monitor()->{total_free_bytes} <= $cap * 1024 }, 15), 'and the total is under the cap');
$node->safe_psql('postgres', "ALTER SYSTEM RESET glibc_malloc.max_total_free; SELECT pg_reload_conf()");
$_->quit for ($a, $b);

# The kernel's OOM kills in the server's cgroup, as the monitor reads them
# (glibc_malloc_guard): cgroup v2's memory.events oom_kill and
# oom_group_kill, cgroup v1's memory.oom_control oom_kill; NULL where the
# file or the line is missing (v1 before kernel 4.13).
sub guard_row
{
	my $row = $node->safe_psql('postgres', "SELECT row_to_json(g) FROM glibc_malloc_guard g");
	my %g = $row =~ /"(\w+)":("(?:[^"\\]|\\.)*"|[^,}]+)/g;
	s/^"|"$//g for values %g;
	$_ eq 'null' and $_ = undef for values %g;
	return \%g;
}
cgroup_v2("$dir/ev2", current => 100 * $MB, max => 1000 * $MB);
watch("$dir/ev2");
is(guard_row()->{oom_kills}, undef, 'cgroup v2 without memory.events: oom_kills NULL');
write_files("$dir/ev2", 'memory.events' => "low 0\nhigh 7\nmax 12\noom 3\noom_kill 2\noom_group_kill 1\n");
ok(wait_for(sub { (guard_row()->{oom_kills} // -1) == 2 }, 15), 'cgroup v2: oom_kills from memory.events');
is(guard_row()->{oom_group_kills}, 1, 'and oom_group_kills');
write_files("$dir/ev2", 'memory.events' => "low 0\nhigh 7\nmax 12\noom 4\noom_kill 3\n");
ok(wait_for(sub { (guard_row()->{oom_kills} // -1) == 3 }, 15), 'a new kill is counted at the next look');
is(guard_row()->{oom_group_kills}, undef, 'a kernel without oom_group_kill: NULL');
write_files("$dir/v1", 'memory.oom_control' => "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n");
watch("$dir/v1");
ok(wait_for(sub { (guard_row()->{oom_kills} // -1) == 5 }, 15), 'cgroup v1: oom_kills from memory.oom_control');
is(guard_row()->{oom_group_kills}, undef, 'cgroup v1 has no group kills: NULL');
write_files("$dir/v1", 'memory.oom_control' => "oom_kill_disable 0\nunder_oom 0\n");
ok(wait_for(sub { !defined guard_row()->{oom_kills} }, 15), 'cgroup v1 before kernel 4.13 (no oom_kill line): NULL');
chmod 0, "$dir/v1/memory.oom_control";
sleep 0.6;
ok(!defined guard_row()->{oom_kills} && monitor()->{pid}, 'an unreadable file: NULL, and the monitor goes on');

# The commit limit's headroom, CommitLimit - Committed_AS from
# /proc/meminfo, whatever the source; machine-wide, so it moves with every
# program here: within 1 GB of what the test reads.
my %mi = slurp_file('/proc/meminfo') =~ /^(\w+):\s+(\d+)/mg;
my $ch = monitor()->{commit_headroom_bytes};
ok(defined $ch && abs($ch - ($mi{CommitLimit} - $mi{Committed_AS}) * 1024) < 1024 * $MB,
	sprintf('commit_headroom_bytes %.0f MB: CommitLimit - Committed_AS (%.0f MB)', ($ch // 0) / $MB,
		($mi{CommitLimit} - $mi{Committed_AS}) / 1024));

# glibc_malloc.memory_guard: off, cgroup (the default), machine.  The 1.6
# boolean spellings still load from a configuration file: on, true, yes
# and 1 are cgroup; off, false, no and 0 are off; so are the prefixes
# parse_bool read (t, f, y, n, of, ...).  Under this 1000 MB
# cgroup at 10%, whatever the guard does it is not engaged.
watch("$dir/ev2");
my %spelling = (on => 'cgroup', true => 'cgroup', yes => 'cgroup', 1 => 'cgroup',
	off => 'off', false => 'off', no => 'off', 0 => 'off', cgroup => 'cgroup', machine => 'machine', MACHINE => 'machine',
	t => 'cgroup', Y => 'cgroup', f => 'off', of => 'off', n => 'off', fals => 'off');
for my $v (sort keys %spelling)
{
	open my $fh, '>>', $node->data_dir . '/postgresql.conf' or die;
	print $fh "glibc_malloc.memory_guard = $v\n";
	close $fh;
	$node->reload;
	is($node->safe_psql('postgres', 'SHOW glibc_malloc.memory_guard'), $spelling{$v}, "memory_guard = $v in postgresql.conf reads as $spelling{$v}");
}
($ret, $out, $err) = $node->psql('postgres', "ALTER SYSTEM SET glibc_malloc.memory_guard = maybe");
like($err, qr/invalid value for parameter "glibc_malloc.memory_guard": "maybe"\n.*HINT:  Available values: off, cgroup, machine, observe\./,
	'a bad value is refused, naming the values (not the hidden spellings)');
$node->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.memory_guard = 'on'; SELECT pg_reload_conf()");
is($node->safe_psql('postgres', 'SHOW glibc_malloc.memory_guard'), 'cgroup', 'ALTER SYSTEM SET memory_guard = on (as 1.6 wrote it): cgroup');
ok(wait_for(sub { my $g = guard_row(); ($g->{enabled} // '') eq 'true' && defined $g->{target_bytes} }, 15),
	'the guard covers a cgroup limit: enabled, with a target');
is(guard_row()->{engaged}, 'false', 'not engaged at 10%');
$node->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.memory_guard = off; SELECT pg_reload_conf()");
ok(wait_for(sub { my $g = guard_row(); ($g->{enabled} // '') eq 'false' && !defined $g->{target_bytes} }, 15),
	'off: not enabled, no target');

# Without a cgroup limit (the machine's, source system), the guard acts
# only with machine: its target is 5% of MemTotal below it.  (Where the
# server runs under a cgroup limit, as in some CI, not checked.)
watch('');
SKIP:
{
	skip "the server's memory is limited by a $m->{source} here", 4 unless monitor()->{source} eq 'system';
	$node->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.memory_guard = cgroup; SELECT pg_reload_conf()");
	sleep 0.6;
	my $g = guard_row();
	ok($g->{enabled} eq 'true' && !defined $g->{target_bytes}, 'cgroup on a whole machine: enabled, but no target (it does not act)');
	$node->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.memory_guard = machine; SELECT pg_reload_conf()");
	ok(wait_for(sub { defined guard_row()->{target_bytes} }, 15), 'machine: the guard has a target');
	$g = guard_row();
	is($g->{limit_bytes}, $mi{MemTotal} * 1024, 'the limit is MemTotal');
	is($g->{target_bytes}, $mi{MemTotal} * 1024 - int(0.05 * $mi{MemTotal} * 1024), 'the target 5% below it');
	$node->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.memory_guard = off; SELECT pg_reload_conf()");
}

# Only the refusals above are errors.
my @bad = grep { /\b(ERROR|FATAL|PANIC):|terminated by signal/ && !/monitor_cgroup": "relative|outside the valid range for parameter "glibc_malloc.monitor_fraction"|"glibc_malloc.max_total_free" cannot be changed now|"glibc_malloc.memory_guard": "maybe"/ }
  split /\n/, slurp_file($node->logfile);
is_deeply(\@bad, [], 'no other errors, no crashes in the server log');
done_testing();
