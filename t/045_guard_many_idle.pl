# 250 idle sessions under an engaged guard take NOTIFY delivery and the
# catalog's catch-up at their idle point: no FATAL.  In a real cgroup v1 of
# 800 MB (the guard's target 736 MB), 250 sessions LISTEN and then stay
# idle, running SELECT 1 every 2 s; another process of the container holds
# the usage so that the guard is engaged with little headroom.  The
# reserves of 250 backends do not fit the guard's margin: each keeps the
# 1 MB floor, and the guard counts the rest as usage (it engages earlier)
# instead of shrinking them below it.  Another session then sends 200
# NOTIFY with 7000-byte payloads and 2000 temporary-table DDLs (catalog
# invalidations that overflow the queue): NOTIFY delivery and the catalog
# catch-up run inside ReadCommand, where an ERROR becomes FATAL.  Every
# session keeps running (pgbench's clients all complete), no FATAL, no out
# of memory, and the kernel kills nothing.
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
my $sessions = 250;
# The sessions' run, the NOTIFY and DDL loop inside it: longer on a slow
# machine, as wait_for's bounds.
my $slow = $PostgreSQL::Test::Utils::timeout_default / 180;
my $seconds = int(40 * ($slow > 1 ? $slow : 1));

my $kills_before = cgroup_v1_oom_kills($cg);
# The sidecars go whatever happens (they hold memory in the suite's cgroup).
my @fillers;
END { local $?; $_->kill_kill for @fillers }
my $node = new_node('manyidle', "restart_after_crash = off\nshared_buffers = 16MB\nmax_connections = 270\n", no_start => 1);
$node->start;
enter_cgroup_v1($node, $cg, $limit);
$node->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');
ok(wait_for(sub { (guard_counts($node)->[2] || 0) > 0 }, 10), "the monitor read the cgroup's limit");
my $offset = -s $node->logfile;

my $script = PostgreSQL::Test::Utils::tempdir() . '/idle.sql';
write_file($script, "LISTEN ch;\nSELECT 1;\n\\sleep 2 s\n");

my ($out, $err) = ('', '');
my $bench = IPC::Run::start([ 'pgbench', '-n', '-c', $sessions, '-j', 4, '-T', $seconds, '-f', $script, $node->connstr('postgres') . ' application_name=idle' ],
	'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout($seconds + $PostgreSQL::Test::Utils::timeout_default));
ok(wait_for(sub { $node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'idle'") >= $sessions }, 30),
	"$sessions sessions connected");
# Their pids, before the guard engages: once it does, a new session's first
# query has its 1 MB reserve and no more (the reserves take the budget), and
# reading pg_stat_activity's 270 slots with a cold catalog cache takes more.
my @pids = split /\n/, $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE application_name = 'idle'");
is(scalar @pids, $sessions, "the $sessions sessions' pids");

# A sidecar holds the usage 40 MB below the guard's target: the usage read
# from the cgroup once the sessions have settled (each has run its script
# at least once), not from the monitor's last look, which may be older than
# the last sessions' first queries (the sidecar was then too big, and the
# kernel killed it).  At most 10 s of the sessions' run.
ok(wait_for(sub { $node->safe_psql('postgres',
	"SELECT count(*) FROM pg_stat_activity WHERE application_name = 'idle' AND query <> ''") >= $sessions }, 30),
	'each session has run its script');
my $g = guard_counts($node);
my $fill = $g->[2] - cgroup_v1_counted($cg, 10) - 40 * $MB;
push @fillers, start_filler($cg, $fill) if $fill > 0;
ok(wait_for(sub { guard_counts($node)->[0] eq 't' }, 10), 'the guard is engaged');
my ($limited, $reserve, $shrunk) = split /\|/, $node->safe_psql('postgres',
	'SELECT limited_processes, reserve_bytes, reserve_shrunk FROM glibc_malloc_guard');
$g = guard_counts($node);
diag sprintf('engaged: usage %.0f MB, target %.0f MB; %d processes limited, reserve %.0f kB each (shrunk: %s)',
	$g->[1] / $MB, $g->[2] / $MB, $limited, $reserve / 1024, $shrunk);
cmp_ok($limited, '>=', $sessions, 'the guard limits every session');
cmp_ok($reserve, '>=', $MB, 'each keeps a reserve of at least 1 MB');

# Soft RLIMIT_DATA as the kernel has them: a sample of the sessions.
my @sample = @pids[ 0 .. 19 ];
my $with_limit = grep { ((eval { slurp_file("/proc/$_/limits") } // '') =~ /^Max data size\s+(\d+)/m) } @sample;
is($with_limit, scalar @sample, 'the sessions sampled have a soft RLIMIT_DATA (/proc/PID/limits)');

# NOTIFY with 7000-byte payloads and temporary-table DDL.
my $payload = 'x' x 7000;
my $loop = '';
$loop .= "NOTIFY ch, '$payload';\n" for 1 .. 200;
$loop .= "CREATE TEMP TABLE t$_ (a int); DROP TABLE t$_;\n" for 1 .. 1000;
my ($rc, $lout, $lerr) = $node->psql('postgres', $loop);
is($rc, 0, '200 NOTIFY and 2000 DDLs run') or diag $lerr;
$g = guard_counts($node);
diag sprintf('after the loop: engaged %s, usage %.0f MB, target %.0f MB', $g->[0], $g->[1] / $MB, $g->[2] / $MB);
# The sessions' processes were still there when the loop ended (the run
# outlasted it): /proc, not a new session's query.
is(scalar(grep { -d "/proc/$_" } @pids), $sessions, "the $sessions sessions' processes were still there when the loop ended");
is(guard_counts($node)->[0], 't', 'the guard was still engaged when the loop ended');

$bench->finish;
my ($done) = $out =~ /number of transactions actually processed: (\d+)/;
diag sprintf('%d sessions: %d transactions', $sessions, $done // 0);
is($bench->result(0), 0, "every session kept running to the end (pgbench succeeds)") or diag substr($err, 0, 2000);
my $log = substr(slurp_file($node->logfile), $offset);
my @fatal = grep { /FATAL:/ } split /\n/, $log;
is(scalar @fatal, 0, 'no FATAL') or diag join "\n", @fatal[ 0 .. ($#fatal < 4 ? $#fatal : 4) ];
unlike($log, qr/ERROR:\s+out of memory/, 'no out of memory');
is(cgroup_v1_oom_kills($cg), $kills_before, 'the kernel OOM-killed nothing');
$node->stop('fast');
done_testing();
