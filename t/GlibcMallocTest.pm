# Helpers shared by glibc_malloc's TAP tests: a preloaded node, the seed sort
# workload, and measurements of what glibc really does in a process
# (glibc's own parameters read with gdb, syscalls seen by strace, RssAnon).
package GlibcMallocTest;

use strict;
use warnings;

use Exporter 'import';
use FindBin;
use File::Temp qw(tempfile);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use POSIX ();

# Every background psql session times out per query, not once for its
# whole life: a session that polls through a long test (t/038's watcher
# runs through every burst) died after 180 s in all on a loaded machine,
# its queries each taking milliseconds.
{
	no warnings 'redefine';
	my $background_psql = \&PostgreSQL::Test::Cluster::background_psql;
	*PostgreSQL::Test::Cluster::background_psql = sub {
		my $session = $background_psql->(@_);
		$session->set_query_timer_restart if $session->can('set_query_timer_restart');
		return $session;
	};
}

our @EXPORT = qw(new_node workload seed_sort_table seed_sort glibc_params glibc_var rss_anon
  count_syscalls settings_of parallel_option wait_for check_clean_server test_module
  write_file test_cgroup_v1 enter_cgroup_v1 cgroup_v1_oom_kills wait_for_log_text
  start_filler filler_free test_cgroup cgroup_version enter_cgroup cgroup_oom_kills cgroup_oom_group
  cgroup_oom_group_kills cgroup_limit_hits cgroup_peak finish_query guard_counts cgroup_v1_counted);

# A workload's SQL from bench/NAME.sql (shared with the benchmark and the
# demo), without its final semicolon.
sub workload
{
	my ($name) = @_;
	my $sql = PostgreSQL::Test::Utils::slurp_file("$FindBin::RealBin/../bench/$name.sql");
	$sql =~ s/;?\s*$//;
	return $sql;
}

# The seed sort workload's query.
sub seed_sort { return workload('sort') }

# A node with glibc_malloc preloaded and the extension created.
sub new_node
{
	my ($name, $conf, %opts) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'glibc_malloc'\n"
		  . "jit = off\nmax_parallel_workers_per_gather = 0\n"
		  . ($conf // ''));
	return $node if $opts{no_start};
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');
	return $node;
}

# Create the seed table t(a int, c1 .. c32 int) with 100,000 random rows
# (bench/seed.sql).
sub seed_sort_table
{
	my ($node) = @_;
	$node->safe_psql('postgres', workload('seed'));
}

# glibc's own malloc parameters (struct malloc_par mp_) in process $pid,
# read with gdb and the distribution's glibc debug symbols.
sub glibc_params
{
	my ($pid) = @_;
	my ($out, $err);
	IPC::Run::run([ 'gdb', '-batch', '-nx', '-p', $pid, '-ex', 'p mp_' ],
		'<', \undef, '>', \$out, '2>', \$err);
	my %mp = ($out // '') =~ /(\w+) = (0x[0-9a-f]+|-?\d+)/g;
	die "cannot read glibc's mp_ in process $pid (are gdb and libc6-dbg installed?):\n$out$err"
	  unless exists $mp{trim_threshold};
	return \%mp;
}

# One of glibc's own variables in process $pid (perturb_byte, say), read
# with gdb like glibc_params.
sub glibc_var
{
	my ($pid, $var) = @_;
	my ($out, $err);
	IPC::Run::run([ 'gdb', '-batch', '-nx', '-p', $pid, '-ex', "p $var" ],
		'<', \undef, '>', \$out, '2>', \$err);
	die "cannot read glibc's $var in process $pid:\n$out$err" unless ($out // '') =~ /^\$\d+ = (-?\d+)/m;
	return $1;
}

# RssAnon of process $pid, in bytes.
sub rss_anon
{
	my ($pid) = @_;
	local $_;
	open my $fh, '<', "/proc/$pid/status" or die "no process $pid: $!";
	while (<$fh>) { return $1 * 1024 if /^RssAnon:\s+(\d+) kB/ }
	die "no RssAnon for $pid";
}

# Run $code while strace watches process $pid for the system calls
# $trace (strace's -e trace=); return the lines it wrote.
sub traced_lines
{
	my ($pid, $code, $trace, @opts) = @_;
	my (undef, $file) = tempfile();
	my $h = IPC::Run::start(
		[ 'strace', '-qq', '-f', @opts, '-e', "trace=$trace", '-o', $file, '-p', $pid ],
		'<', \undef, '>', \my $out, '2>', \my $err);
	# Wait until strace is attached (TracerPid set).
	wait_for(sub { (`grep TracerPid /proc/$pid/status` =~ /(\d+)/)[0] != 0 }, 10)
	  or die "strace did not attach to $pid: $err";
	$code->();
	usleep(200_000);
	$h->signal('INT');
	$h->finish;
	open my $fh, '<', $file or die $!;
	my @lines = <$fh>;
	close $fh;
	unlink $file;
	return @lines;
}

# Run $code while strace watches process $pid; return the number of brk,
# mmap and munmap calls it made meanwhile.
sub count_syscalls
{
	my ($pid, $code) = @_;
	return scalar grep { /\b(?:brk|mmap|munmap)\(/ } traced_lines($pid, $code, 'brk,mmap,munmap');
}

# glibc_malloc_settings() of a session (node or BackgroundPsql), as
# { name => "value|source|applied" }.
sub settings_of
{
	my ($session) = @_;
	my $sql = "SELECT name, value || '|' || source || '|' || applied FROM glibc_malloc_settings()";
	my $out = $session->isa('PostgreSQL::Test::Cluster')
	  ? $session->safe_psql('postgres', $sql)
	  : $session->query_safe($sql);
	return { map { split /\|/, $_, 2 } split /\n/, $out };
}

# The GUC that forces parallel query: debug_parallel_query from PG 16.
sub parallel_option
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_settings WHERE name = 'debug_parallel_query'") ? 'debug_parallel_query' : 'force_parallel_mode';
}

# After a stress run: the server log since $offset is clean, no backend
# crashed, and the server still answers with the seed table's $rows rows.
sub check_clean_server
{
	my ($node, $offset, $rows) = @_;
	my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset);
	unlike($log, qr/\b(ERROR|FATAL|PANIC|WARNING):/, 'the server log is clean');
	unlike($log, qr/terminated by signal/, 'no backend crashed');
	is($node->safe_psql('postgres', 'SELECT count(*) FROM t'), $rows, 'the server still answers');
}

# Build the test-only C module t/modules/$name.c against the server's
# headers (pg_config first in PATH, as for the tests' servers) and return
# the path of its shared library, for CREATE FUNCTION ... AS 'path'.
sub test_module
{
	my ($name) = @_;
	my $inc = `pg_config --includedir-server`;
	chomp $inc;
	my $so = PostgreSQL::Test::Utils::tempdir . "/$name.so";
	my ($out, $err);
	IPC::Run::run([ 'cc', '-shared', '-fPIC', '-O2', '-Wall', '-I', $inc,
			"$FindBin::RealBin/modules/$name.c", '-o', $so, '-lpthread', '-lrt' ],
		'<', \undef, '>', \$out, '2>', \$err)
	  or die "cannot build t/modules/$name.c:\n$out$err";
	return $so;
}

# Write $value and a newline to $path (a cgroup or /proc file).
sub write_file
{
	my ($path, $value) = @_;
	open my $fh, '>', $path or die "$path: $!";
	print $fh "$value\n";
	close $fh or die "$path: $!";
}

# The cgroup v1 memory directory the test may use (GM_TEST_CGROUP_V1,
# writable by the test's user: scripts/test makes one as root); skips the
# whole test without one.
sub test_cgroup_v1
{
	my $cg = $ENV{GM_TEST_CGROUP_V1};
	plan skip_all => 'needs a writable cgroup v1 memory directory in GM_TEST_CGROUP_V1 (scripts/test makes one when run as root)'
	  unless $cg && -w "$cg/cgroup.procs" && -w "$cg/memory.limit_in_bytes";
	return $cg;
}

# Limit the cgroup v1 memory directory $cg to $limit bytes without swap,
# and move $node's postmaster into it: the backends it forks from then on
# are charged there.
sub enter_cgroup_v1
{
	my ($node, $cg, $limit) = @_;
	my $memsw = -w "$cg/memory.memsw.limit_in_bytes";
	write_file("$cg/memory.swappiness", 0);
	# The kernel keeps the memory limit at or below memory+swap's: lift
	# that first, or a test raising the limit a former one left gets EINVAL.
	write_file("$cg/memory.memsw.limit_in_bytes", -1) if $memsw;
	write_file("$cg/memory.limit_in_bytes", $limit);
	write_file("$cg/memory.memsw.limit_in_bytes", $limit) if $memsw;
	write_file("$cg/memory.max_usage_in_bytes", 0);
	write_file("$cg/cgroup.procs", (split /\n/, PostgreSQL::Test::Utils::slurp_file($node->data_dir . '/postmaster.pid'))[0]);
}

# The OOM kills the kernel counted in the cgroup v1 memory directory $cg.
sub cgroup_v1_oom_kills
{
	my ($cg) = @_;
	return (PostgreSQL::Test::Utils::slurp_file("$cg/memory.oom_control") =~ /oom_kill (\d+)/)[0] // 0;
}

# What the guard counts of the cgroup v1 memory directory $cg, read from
# the kernel now (not at the monitor's last look): its usage less its file
# pages.  With $settle, read again every second until two reads differ by
# less than 2 MB, at most $settle seconds (sessions that just connected
# still grow); says so if it did not settle.
sub cgroup_v1_counted
{
	my ($cg, $settle) = @_;
	my $read = sub {
		my $stat = PostgreSQL::Test::Utils::slurp_file("$cg/memory.stat");
		my $file = 0;
		$file += $1 while $stat =~ /^total_(?:in)?active_file (\d+)$/mg;
		return PostgreSQL::Test::Utils::slurp_file("$cg/memory.usage_in_bytes") - $file;
	};
	my $v = $read->();
	return $v unless $settle;
	for (1 .. $settle)
	{
		sleep 1;
		my $w = $read->();
		return $w if abs($w - $v) < 2 * 2**20;
		$v = $w;
	}
	Test::More::diag(sprintf('the cgroup\'s usage did not settle in %d s: %.0f MB', $settle, $v / 2**20));
	return $v;
}

# The memory cgroup the test may use, cgroup v1 or v2: GM_TEST_CGROUP_V2, a
# cgroup v2 directory with the memory controller on for it, where the test's
# user may move processes and write memory.max (scripts/vm makes one in its
# guest, as the kubelet makes a container's), else GM_TEST_CGROUP_V1 (see
# test_cgroup_v1).  Skips the whole test without either.
sub test_cgroup
{
	my $v2 = $ENV{GM_TEST_CGROUP_V2};
	return $v2 if $v2 && -w "$v2/cgroup.procs" && -w "$v2/memory.max";
	my $v1 = $ENV{GM_TEST_CGROUP_V1};
	plan skip_all => 'needs a writable memory cgroup: a cgroup v1 memory directory in GM_TEST_CGROUP_V1 '
	  . '(scripts/test makes one when run as root) or a cgroup v2 directory in GM_TEST_CGROUP_V2 '
	  . "(scripts/vm check tap makes one in its guest)"
	  unless $v1 && -w "$v1/cgroup.procs" && -w "$v1/memory.limit_in_bytes";
	return $v1;
}

# 2 for a cgroup v2 directory (every one has cgroup.controllers), else 1.
sub cgroup_version { return -e "$_[0]/cgroup.controllers" ? 2 : 1 }

my %peak_sampler;	# cgroup v2 directory => [pid, file]

# Limit the memory cgroup $cg (v1 or v2) to $limit bytes without swap, and
# move $node's postmaster into it: the backends it forks from then on are
# charged there.  The cgroup's peak usage (cgroup_peak) starts again.  On
# cgroup v2 memory.high is lifted (max), and memory.oom.group is left as
# it is (cgroup_oom_group).
sub enter_cgroup
{
	my ($node, $cg, $limit) = @_;
	return enter_cgroup_v1($node, $cg, $limit) if cgroup_version($cg) == 1;
	write_file("$cg/memory.swap.max", 0) if -e "$cg/memory.swap.max";
	write_file("$cg/memory.high", 'max');
	write_file("$cg/memory.max", $limit);
	start_peak_sampler($cg);
	write_file("$cg/cgroup.procs", (split /\n/, PostgreSQL::Test::Utils::slurp_file($node->data_dir . '/postmaster.pid'))[0]);
}

# Value $key of a cgroup v2 flat keyed file (memory.events), 0 if absent.
sub keyed
{
	my ($path, $key) = @_;
	return (PostgreSQL::Test::Utils::slurp_file($path) =~ /^\Q$key\E (\d+)$/m)[0] // 0;
}

# The OOM kills the kernel counted in the memory cgroup $cg: memory.events
# oom_kill (v2, the cgroups below it too), memory.oom_control (v1).
sub cgroup_oom_kills
{
	my ($cg) = @_;
	return cgroup_version($cg) == 2 ? keyed("$cg/memory.events", 'oom_kill') : cgroup_v1_oom_kills($cg);
}

# The kills of the whole cgroup (memory.events oom_group_kill, v2); 0 on v1.
sub cgroup_oom_group_kills
{
	my ($cg) = @_;
	return cgroup_version($cg) == 2 ? keyed("$cg/memory.events", 'oom_group_kill') : 0;
}

# Whether an OOM kill in $cg ends every process in it (cgroup v2
# memory.oom.group = 1, as the kubelet sets it); never on v1.
sub cgroup_oom_group
{
	my ($cg) = @_;
	return 0 if cgroup_version($cg) == 1;
	my $v = PostgreSQL::Test::Utils::slurp_file("$cg/memory.oom.group");
	return $v =~ /^1/ ? 1 : 0;
}

# How many times the usage of $cg reached its limit, as the kernel counts
# them: memory.events max (v2), memory.failcnt (v1).
sub cgroup_limit_hits
{
	my ($cg) = @_;
	return keyed("$cg/memory.events", 'max') if cgroup_version($cg) == 2;
	my $v = PostgreSQL::Test::Utils::slurp_file("$cg/memory.failcnt");
	chomp $v;
	return $v;
}

# The peak usage of $cg since enter_cgroup: memory.max_usage_in_bytes (v1);
# on v2, whose memory.peak cannot be reset before Linux 6.12, the highest
# memory.current that a process sampling it every 10 ms saw.
sub cgroup_peak
{
	my ($cg) = @_;
	if (cgroup_version($cg) == 1)
	{
		my $v = PostgreSQL::Test::Utils::slurp_file("$cg/memory.max_usage_in_bytes");
		chomp $v;
		return $v;
	}
	my $s = $peak_sampler{$cg} or die "no peak sampler for $cg (enter_cgroup starts it)";
	my $v = -s $s->[1] ? PostgreSQL::Test::Utils::slurp_file($s->[1]) : 0;
	chomp $v;
	return $v || 0;
}

sub start_peak_sampler
{
	my ($cg) = @_;
	stop_peak_sampler($cg);
	my (undef, $file) = tempfile();
	my $pid = fork // die "fork: $!";
	if ($pid == 0)
	{
		my $max = 0;
		while (getppid() > 1)
		{
			if (open my $fh, '<', "$cg/memory.current")
			{
				my $v = <$fh>;
				close $fh;
				if (defined $v && $v > $max)
				{
					$max = $v + 0;
					if (open my $out, '>', "$file.new")
					{
						print $out "$max\n";
						close $out;
						rename "$file.new", $file;
					}
				}
			}
			usleep(10_000);
		}
		POSIX::_exit(0);
	}
	$peak_sampler{$cg} = [ $pid, $file ];
}

sub stop_peak_sampler
{
	my ($cg) = @_;
	my $s = delete $peak_sampler{$cg} or return;
	kill 'KILL', $s->[0];
	waitpid($s->[0], 0);
	unlink $s->[1];
}

END { local $?; stop_peak_sampler($_) for keys %peak_sampler }

# Another process of the container (a sidecar) that holds $bytes: it moves
# into the cgroup $cg (v1 or v2) first, then touches its bytes, so that
# they are charged there.  Returns its IPC::Run handle (kill_kill it at the
# end); filler_free gives some of its bytes back.
my %filler_io;
sub start_filler
{
	my ($cg, $bytes) = @_;
	my ($in, $out) = ('', '');
	my $h = IPC::Run::start([ 'perl', '-e', '$| = 1; print "pid $$\n"; my $n = <STDIN>; my @x; push @x, "a" x 1048576 for 1 .. $n / 1048576; print "ready\n"; '
		  . 'while (my $f = <STDIN>) { my $k = int($f / 1048576); $k = @x if $k > @x; splice(@x, -$k) if $k; print "freed $k\n" } sleep 900' ],
		'<', \$in, '>', \$out, IPC::Run::timeout(1200));
	$h->pump until $out =~ /pid (\d+)/;
	write_file("$cg/cgroup.procs", $1);
	$in = int($bytes) . "\n";
	$h->pump until $out =~ /ready/;
	$filler_io{$h} = [ \$in, \$out ];
	return $h;
}

# A filler of start_filler frees $bytes (whole MB, rounded up, at most
# all it holds: strings of 1 MB, the last it made first); returns the
# bytes it freed.  (Callers see the effect in the cgroup's usage.)
sub filler_free
{
	my ($h, $bytes) = @_;
	my ($in, $out) = @{ $filler_io{$h} };
	$$out = '';
	$$in .= int(($bytes + 1048575) / 1048576) * 1048576 . "\n";
	$h->pump until $$out =~ /freed (\d+)/;
	return $1 * 1048576;
}

# Poll $cond until it is true or $seconds pass; returns its last result.
# A slow machine that raises PG_TEST_TIMEOUT_DEFAULT above its 180 s (the
# emulated guest of scripts/vm) raises these bounds in proportion: they
# return as soon as the condition holds.
sub wait_for
{
	my ($cond, $seconds) = @_;
	my $slow = $PostgreSQL::Test::Utils::timeout_default / 180;
	my $deadline = time + ($seconds // 10) * ($slow > 1 ? $slow : 1);
	while (1)
	{
		my $r = $cond->();
		return $r if $r || time > $deadline;
		usleep(50_000);
	}
}

# The server log from $offset once it matches $re, or as it is after
# $seconds: for what the postmaster logs some time after a process died
# (a session sees its connection close before the postmaster reaps it).
sub wait_for_log_text
{
	my ($node, $offset, $re, $seconds) = @_;
	my $log;
	wait_for(sub { ($log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset)) =~ $re }, $seconds // 30);
	return $log;
}

# A query started now on $node in a psql of its own, its settings (SET
# ...) first; returns its handle and outputs (out, err), for finish_query.
sub start_query
{
	my ($node, $sql, @settings) = @_;
	my %r = (out => '', err => '', sql => $sql);
	$r{h} = IPC::Run::start(
		[ 'psql', '-X', '-At', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
		  (map { ('-c', $_) } @settings, $sql) ],
		'<', \undef, '>', \$r{out}, '2>', \$r{err}, IPC::Run::timeout(300));
	$r{started} = Time::HiRes::time();
	return \%r;
}

# Wait for a query of start_query to end: its seconds (to its end, when
# the caller noted it in {ended}), "timed out" in its err after 300 s.
sub finish_query
{
	my ($r) = @_;
	eval { $r->{h}->finish; 1 } or $r->{err} .= "timed out\n";
	$r->{secs} = ($r->{ended} // Time::HiRes::time()) - $r->{started};
	return $r;
}

# glibc_malloc_guard's row on $node, as an array: engaged, usage_bytes,
# target_bytes, waits, wait_time, admissions, wait_timeouts, guard_errors,
# wait_skips, unreserved_runs.
sub guard_counts
{
	my ($node) = @_;
	return [ split /\|/, $node->safe_psql('postgres',
		'SELECT engaged, usage_bytes, target_bytes, waits, wait_time, admissions, wait_timeouts, guard_errors, wait_skips, unreserved_runs FROM glibc_malloc_guard') ];
}

1;
