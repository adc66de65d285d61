# The memory guard gives its budget to who works: a statement that starts
# in a session that was idle counts as working at once (a flag in its slot,
# and the monitor woken), and the budget the idle class does not use goes
# to it.  In a real cgroup v1 of 800 MB (the guard's target 736 MB), 60
# pooled sessions idle, another process of the container holds the usage in
# the engaged band with at least twice the query's size of headroom: 10 of
# 10 sorts of about 20 MB, each started in a previously idle session,
# complete.  Before, the monitor counted such a session as not working
# (its growth over the last window was known and small), gave it a share
# of half of the budget (a few hundred kB), and the sort got "out of
# memory" (10 of 10 at 44 MB of headroom in issue 32's run).  Then, with
# the start flag, 0 to 3 of 10 still failed: the session of the sort just
# before, back to waiting for its client, still counted as working by its
# last window's growth and took twice that growth, all of the budget, first.
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
my $sessions = 60;
my $queries = 10;
my $rows = 130_000;		# a sort of about 20 MB (measured below)
my $sort = "SELECT count(*) FROM (SELECT md5(i::text) FROM generate_series(1, $rows) i ORDER BY 1) s";

sub oom_kills { cgroup_v1_oom_kills($cg) }
# The cgroup is the suite's: the kills of earlier tests are in its count.
my $kills_before = oom_kills();

my $node = new_node('working', "restart_after_crash = on\nshared_buffers = 16MB\nmax_connections = 100\n"
	  . "glibc_malloc.track_statements = top\n", no_start => 1);
$node->start;
enter_cgroup_v1($node, $cg, $limit);
$node->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');

# The sort's size: its executor peak (the largest statement so far), with
# the guard not engaged.
my $peak = $node->safe_psql('postgres', "SET work_mem = '1GB'; $sort; SELECT max(max_exec_peak_bytes) FROM glibc_malloc_statements");
$peak = (split /\n/, $peak)[-1];
diag sprintf('the sort peaks at %.1f MB of executor memory', $peak / $MB);
cmp_ok($peak, '>=', 15 * $MB, 'the sort is about 20 MB');

# The pool: each session ran one query, and waits.
my @pool = map { $node->background_psql('postgres', on_error_stop => 0) } 1 .. $sessions;
$_->query_safe("SET work_mem = '1GB'") for @pool;

# Other processes of the container (sidecars) hold memory.
my @fillers;
sub fill { push @fillers, start_filler($cg, $_[0]) }

sub guard { [ split /\|/, $node->safe_psql('postgres', 'SELECT engaged, usage_bytes, target_bytes FROM glibc_malloc_guard') ] }

# The usage into the band: headroom between 2.2 and 3 times the sort, on
# top of what the reserves take beyond half of the guard's 64 MB margin
# (each of the sessions keeps 1 MB; the guard counts the rest as usage).
my $shift = ($sessions + 2) * $MB - 32 * $MB;
my $want_lo = 2.2 * $peak + $shift;
my $want_hi = 3 * $peak + $shift;
for my $try (1 .. 20)
{
	sleep 0.5;
	my ($engaged, $usage, $target) = @{ guard() };
	my $headroom = $target - $usage;
	last if $headroom <= $want_hi && $headroom >= $want_lo;
	fill($headroom - ($want_lo + $want_hi) / 2) if $headroom > $want_hi;
	last if $headroom < $want_lo;
}

my ($completed, $failed, $other) = (0, 0, 0);
my @headrooms;
for my $q (1 .. $queries)
{
	# The usage settles (the last sort's free heap is asked back).
	wait_for(sub { my $g = guard(); $g->[2] - $g->[1] >= 2 * $peak + $shift }, 10);
	my ($engaged, $usage, $target) = @{ guard() };
	push @headrooms, sprintf('%.0f%s', ($target - $usage) / $MB, $engaged eq 't' ? '' : ' (not engaged)');
	my $s = $pool[ $q * 5 ];
	my $r = $s->query($sort);
	if (($r // '') eq $rows)
	{
		$completed++;
	}
	elsif ($s->{stderr} =~ /out of memory/)
	{
		$failed++;
	}
	else
	{
		$other++;
		diag "other result: $r $s->{stderr}";
	}
	$s->{stderr} = '';
}
# A COPY FROM STDIN waits for its client inside its statement: a row of
# 6 MB sent in pieces over 3 s grows its line buffer to 8 MB and more (the
# row, its attribute buffer), look after look in which it waits for the
# client.  It counts as working: before, after its start's look it counted
# as idle (waiting for its client) and got an idle share, and the growth
# got "out of memory".
$node->safe_psql('postgres', 'CREATE TABLE copied (t text); ALTER TABLE copied ALTER t SET STORAGE EXTERNAL');
wait_for(sub { my $g = guard(); $g->[2] - $g->[1] >= 2 * $peak + $shift }, 10);
my ($copy_in, $copy_out, $copy_err) = ('', '', '');
my $copy = IPC::Run::start([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-c', 'COPY copied FROM STDIN' ],
	'<', \$copy_in, '>', \$copy_out, '2>', \$copy_err, IPC::Run::timeout(300));
for (1 .. 60)
{
	$copy_in .= 'x' x 100_000;
	$copy->pump while length $copy_in;
	sleep 0.05;
}
$copy_in .= "\n";
$copy->pump while length $copy_in;
$copy->finish;
my $copy_status = $? >> 8;
diag "COPY FROM STDIN of a 6 MB row: exit $copy_status $copy_err" if $copy_status;
is($copy_status, 0, 'a COPY FROM STDIN growing while it waits for its client completes');
is($node->safe_psql('postgres', 'SELECT count(*), max(length(t)) FROM copied'), '1|6000000', 'its row is in');

diag "headroom at each start (MB): @headrooms";
diag "$queries sorts in previously idle sessions: $completed completed, $failed out of memory";
my $engaged = guard()->[0];
is($engaged, 't', 'the guard is engaged');
is($completed, $queries, "$queries of $queries sorts of about 20 MB, started in previously idle sessions, complete");
is($other, 0, 'no other error');
is(oom_kills(), $kills_before, 'the kernel OOM-killed nothing');
my $log = slurp_file($node->logfile);
unlike($log, qr/terminated by signal|all server processes terminated; reinitializing/, 'no restart');

eval { $_->quit } for @pool;
$_->kill_kill for @fillers;
$node->stop('fast');
done_testing();
