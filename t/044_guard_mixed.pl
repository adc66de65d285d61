# The memory guard engaged does not fail short statements that fit.  In a
# real cgroup v1 of 5 GB, 20 sessions run a varied script of short
# statements (a temporary table, an INSERT ... SELECT of jsonb, CREATE
# INDEX, ANALYZE with a statistics target of 2000, a toasted value of
# 1.3 MB, a PL/pgSQL loop, REINDEX, a sort, VACUUM ANALYZE, a GROUP BY,
# TRUNCATE), 5 times each:
#
#  - with the guard off, to measure what they need together (the peak of
#    the cgroup's usage without its page cache, as the guard counts it);
#  - with the guard engaged (another process of the container holds the
#    usage in the band where it limits backends) and more headroom than
#    that, statements not recorded (track_statements = none: no
#    admission) and recorded (top, memory_wait at its default: queries and
#    utility statements take part in the admission, at least one per
#    session's later run; not recorded, each takes a start share): every
#    transaction completes, as with the guard off, 0 `out of memory` (0 in
#    40 engaged cases; before start shares, a statement that just started,
#    an ANALYZE or an INSERT that builds a jsonb value, limited among the
#    latest, got `out of memory` in 4 of 27 cases without records, when
#    the statements that began before it claimed the budget); an error
#    would be the guard's, no other error, at least 90 % of the
#    transactions complete;
#  - 0 OOM kills.
#
# Needs a cgroup v1 memory directory writable by the test's user, named by
# GM_TEST_CGROUP_V1.  The measurements are printed (diag), passing or not.
# GM_TEST_MIXED_ROUNDS=N runs the engaged cases N times each.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use POSIX ();
use Time::HiRes qw(sleep usleep);

my $cg = test_cgroup_v1();

my $MB = 2**20;
my $limit = 5120 * $MB;
my $clients = 20;
my $runs = 5;			# transactions per client
# The engaged cases run this many times (GM_TEST_MIXED_ROUNDS, for a rate).
my $rounds = $ENV{GM_TEST_MIXED_ROUNDS} || 1;

my $kills_before = cgroup_v1_oom_kills($cg);
# The sidecars go whatever happens (they hold memory in the suite's cgroup).
my @fillers;
END { local $?; $_->kill_kill for @fillers }
# Recording set at start: the module asks for queryids (compute_query_id =
# auto) only then; turned on by a reload alone it would record nothing.
my $node = new_node('mixed', "restart_after_crash = off\nshared_buffers = 64MB\nmax_connections = 40\n"
	  . "glibc_malloc.track_statements = top\n", no_start => 1);
$node->start;
my $version = $node->safe_psql('postgres', 'SHOW server_version_num');
enter_cgroup_v1($node, $cg, $limit);
$node->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');
ok(wait_for(sub { (guard_counts($node)->[2] || 0) > 0 }, 10), "the monitor read the cgroup's limit");

my $script = PostgreSQL::Test::Utils::tempdir() . '/mixed.sql';
write_file($script, <<'SQL');
SET client_min_messages = warning;
CREATE TEMP TABLE IF NOT EXISTS m (id int, j jsonb, t text);
INSERT INTO m SELECT g, jsonb_build_object('a', g, 'b', md5(g::text), 'c', repeat('x', 50)), md5(g::text) FROM generate_series(1, 20000) g;
CREATE INDEX IF NOT EXISTS m_t ON m (t);
ALTER TABLE m ALTER COLUMN t SET STATISTICS 2000;
ANALYZE m;
INSERT INTO m SELECT 0, (SELECT jsonb_agg(md5(g::text)) FROM generate_series(1, 35000) g), 'big';
DO $$ DECLARE s text := ''; BEGIN FOR i IN 1..2000 LOOP s := s || md5(i::text); END LOOP; PERFORM length(s); END $$;
REINDEX TABLE m;
SELECT count(*) FROM (SELECT t FROM m ORDER BY t) s;
VACUUM ANALYZE m;
SELECT count(*) FROM (SELECT t, count(*) FROM m GROUP BY t) s;
TRUNCATE m;
SQL

# The cgroup's usage without its page cache, as the guard counts it.
sub usage { return cgroup_v1_counted($cg) }

# A process that samples usage() every 10 ms into a file, until killed.
sub start_sampler
{
	my ($file) = @_;
	my $parent = $$;
	my $pid = fork // die "fork: $!";
	if ($pid == 0)
	{
		my $max = 0;
		while (getppid() == $parent)
		{
			my $u = usage();
			if ($u > $max)
			{
				$max = $u;
				write_file("$file.new", $max);
				rename "$file.new", $file;
			}
			usleep(10_000);
		}
		POSIX::_exit(0);
	}
	return $pid;
}

# The soft RLIMIT_DATA of process $pid in bytes, as the kernel has it (-1: unlimited).
sub data_limit
{
	my ($pid) = @_;
	my $l = eval { slurp_file("/proc/$pid/limits") } // '';
	my ($soft) = $l =~ /^Max data size\s+(\S+)/m;
	return !defined $soft || $soft eq 'unlimited' ? -1 : $soft;
}

# Run the script: returns (pgbench's exit code, transactions processed, its
# stderr, the number of its backends seen with a soft RLIMIT_DATA in
# /proc/PID/limits while it ran).
sub mixed
{
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start([ 'pgbench', '-n', '-c', $clients, '-j', 4, '-t', $runs, '-f', $script, $node->connstr('postgres') ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	my %limited;
	while ($h->pumpable)
	{
		my $pids = $node->safe_psql('postgres', "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()");
		for my $pid (split /\n/, $pids)
		{
			$limited{$pid} = 1 if data_limit($pid) >= 0;
		}
		sleep 0.2;
		$h->pump_nb;
	}
	$h->finish;
	my $rc = $h->result(0);
	my ($done) = $out =~ /number of transactions actually processed: (\d+)/;
	return ($rc, $done // 0, $err, scalar keys %limited);
}

sub counts
{
	return [ split /\|/, $node->safe_psql('postgres',
		'SELECT (SELECT oom_errors FROM glibc_malloc_counters), guard_errors, engaged, usage_bytes, target_bytes, admissions, waits, wait_timeouts FROM glibc_malloc_guard') ];
}

# Set a server setting and wait until a new session sees it.
sub set_conf
{
	my ($name, $value) = @_;
	$node->safe_psql('postgres', "ALTER SYSTEM SET $name = '$value'");
	$node->reload;
	wait_for(sub { $node->safe_psql('postgres', "SHOW $name") eq $value }, 10)
	  or die "$name did not become $value";
}

# 1. The guard off: what the script needs, 20 sessions together.
set_conf('glibc_malloc.memory_guard', 'off');
my $peak_file = PostgreSQL::Test::Utils::tempdir() . '/peak';
my $usage0 = usage();
my $sampler = start_sampler($peak_file);
my ($rc, $done, $err, $nlimited) = mixed();
kill 'KILL', $sampler;
waitpid($sampler, 0);
my $need = slurp_file($peak_file) - $usage0;
diag sprintf('guard off: %d of %d transactions, the usage without page cache rose %.0f MB at its peak', $done, $clients * $runs, $need / $MB);
is($rc, 0, 'guard off: pgbench succeeds') or diag $err;
is($done, $clients * $runs, 'guard off: every transaction completes');
my $c0 = counts();
is($c0->[0], 0, 'guard off: no out of memory');

# 2. A sidecar holds the usage in the band where the guard is engaged,
# with 1.25 times that need (and 64 MB) as headroom up to its target.
# The guard engages 20 % of the limit below its target: a limit of at
# least 6 times the headroom wanted keeps it inside that band.
my $headroom = int(1.25 * $need + 64 * $MB);
if (6 * $headroom > $limit)
{
	$limit = 6 * $headroom;
	write_file("$cg/memory.memsw.limit_in_bytes", -1) if -w "$cg/memory.memsw.limit_in_bytes";
	write_file("$cg/memory.limit_in_bytes", $limit);
	write_file("$cg/memory.memsw.limit_in_bytes", $limit) if -w "$cg/memory.memsw.limit_in_bytes";
	diag sprintf('the limit raised to %.0f MB', $limit / $MB);
}
set_conf('glibc_malloc.memory_guard', 'cgroup');
ok(wait_for(sub { (counts()->[4] || 0) > 0 && counts()->[4] > 0.9 * $limit }, 10), 'the guard acts on the limit');
my $target = counts()->[4];
# In pieces of at most 1 GB: a 32-bit process maps less than 4 GB.
my $fill = $target - $headroom - usage();
while ($fill > 0)
{
	my $piece = $fill > 1024 * $MB ? 1024 * $MB : $fill;
	push @fillers, start_filler($cg, $piece);
	$fill -= $piece;
}
ok(wait_for(sub { counts()->[2] eq 't' }, 10), 'the guard is engaged');
my $g = counts();
diag sprintf('engaged: usage %.0f MB, target %.0f MB, headroom %.0f MB (the script needs %.0f MB)',
	$g->[3] / $MB, $g->[4] / $MB, ($g->[4] - $g->[3]) / $MB, $need / $MB);
cmp_ok($g->[4] - $g->[3], '>', $need, 'the headroom is more than the script needs');

for my $case (map { my $r = $_; map { [$r, $_] } 'none', 'top' } 1 .. $rounds)
{
	my ($round, $track) = @$case;
	# With several rounds, each test's name says which.
	my $in = $rounds > 1 ? "round $round, " : '';
	set_conf('glibc_malloc.track_statements', $track);
	my $before = counts();
	($rc, $done, $err, $nlimited) = mixed();
	my $after = counts();
	my $oom = $after->[0] - $before->[0];
	diag sprintf('%sguard engaged, track_statements = %s: %d of %d transactions, %d out of memory, %d admitted, %d waited (%d ran out), %d backends seen limited, engaged at the end: %s, headroom %.0f MB',
		$in, $track, $done, $clients * $runs, $oom, $after->[5] - $before->[5], $after->[6] - $before->[6],
		$after->[7] - $before->[7], $nlimited, $after->[2], ($after->[4] - $after->[3]) / $MB);
	cmp_ok($nlimited, '>=', $clients / 2, "${in}engaged, track_statements = $track: the kernel holds a soft RLIMIT_DATA for its backends (/proc/PID/limits)");
	is($after->[2], 't', "${in}engaged, track_statements = $track: the guard was still engaged at the end");
	# Recorded, the statements take part in the admission: each session's
	# later runs have their needs (at least one a run: about 6 are
	# admitted); not recorded, none.
	if ($track eq 'top')
	{
	  SKIP:
		{
			# PostgreSQL 13 computes queryids only with pg_stat_statements.
			skip 'no queryids without pg_stat_statements on PostgreSQL 13', 1 if $version < 140000;
			cmp_ok($after->[5] - $before->[5], '>=', $clients * ($runs - 1), "${in}engaged, track_statements = top: statements are admitted with their needs (admissions)");
		}
	}
	else
	{
		is($after->[5] - $before->[5], 0, "${in}engaged, track_statements = none: no admission");
	}
	# An out of memory would be the guard's, never another error.
	diag $err if $oom;
	is($after->[1] - $before->[1], $oom, "${in}engaged, track_statements = $track: an out of memory is the guard's (guard_errors)");
	cmp_ok($done, '>=', 0.9 * $clients * $runs, "${in}engaged, track_statements = $track: at least 90 % of the transactions complete");
	unlike($err, qr/ERROR:  (?!out of memory)/, "${in}engaged, track_statements = $track: no other error");
	is($rc, 0, "${in}engaged, track_statements = $track: pgbench succeeds");
	is($done, $clients * $runs, "${in}engaged, track_statements = $track: every transaction completes, as with the guard off");
	is($oom, 0, "${in}engaged, track_statements = $track: 0 out of memory");
}

is(cgroup_v1_oom_kills($cg), $kills_before, 'the kernel OOM-killed nothing');
$node->stop('fast');
done_testing();
