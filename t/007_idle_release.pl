# The idle release: a backend that goes idle returns its free memory to the
# OS after glibc_malloc.idle_release_delay, measured from outside in /proc,
# and never while a transaction or a COPY FROM STDIN is open.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = new_node('idle', "work_mem = '32MB'\n");
my $big_sort = workload('big_sort');

# Open a session under $preset (plus extra SETs); return it, its pid and its
# RssAnon at connection start.
sub session
{
	my ($sets) = @_;
	my $s = $node->background_psql('postgres');
	my $pid = $s->query_safe("$sets; SELECT pg_backend_pid()");
	return ($s, $pid, rss_anon($pid));
}

# balanced: greedy while working, memory back within delay + 1 s of idling.
my ($s, $pid, $start) = session("SET glibc_malloc.preset = 'balanced'");
is(settings_of($s)->{idle_release_delay}, '1000|preset|true', 'balanced releases after 1 s idle');
$s->query_safe("$big_sort; $big_sort; SELECT 1");
my $done = time;
my $busy = rss_anon($pid);
note sprintf('balanced: RssAnon %.1f MB at start, %.1f MB right after the sorts', $start / 2**20, $busy / 2**20);
cmp_ok($busy - $start, '>', 8 * 2**20, 'balanced keeps memory while the session works');
ok(wait_for(sub { rss_anon($pid) - $start < 2 * 2**20 }, 3), 'RssAnon back near its start value once idle');
my $took = time - $done;
cmp_ok($took, '<=', 2.0, sprintf('within delay + 1 s (%.2f s)', $took));
my ($n, $bytes) = split /\|/, $s->query_safe("SELECT idle_releases || '|' || idle_released_bytes FROM glibc_malloc_stats()");
cmp_ok($n, '>=', 1, 'the release is counted');
cmp_ok($bytes, '>', 8 * 2**20, 'with the bytes it returned');
$s->quit;

# With the release off, the memory stays.
($s, $pid, $start) = session("SET glibc_malloc.preset = 'balanced'; SET glibc_malloc.idle_release_delay = 0");
$s->query_safe("$big_sort; $big_sort; SELECT 1");
sleep 2;
cmp_ok(rss_anon($pid) - $start, '>', 8 * 2**20, 'idle_release_delay = 0: the memory stays after 2 s idle');
is($s->query_safe('SELECT idle_releases FROM glibc_malloc_stats()'), 0, 'and no release ran');
$s->quit;

# An explicit delay works with any preset, e.g. greedy.
($s, $pid, $start) = session("SET glibc_malloc.preset = 'greedy'; SET glibc_malloc.idle_release_delay = '200ms'");
$s->query_safe("$big_sort; $big_sort; SELECT 1");
ok(wait_for(sub { rss_anon($pid) - $start < 2 * 2**20 }, 2), 'greedy + idle_release_delay = 200ms: released');
$s->quit;

# Never inside a transaction: idle in transaction keeps the memory.
($s, $pid, $start) = session("SET glibc_malloc.idle_release_delay = '100ms'; SET glibc_malloc.preset = 'greedy'");
$s->query_safe("BEGIN; $big_sort; $big_sort; SELECT 1");
sleep 1;
cmp_ok(rss_anon($pid) - $start, '>', 8 * 2**20, 'idle in transaction: nothing released');
is($s->query_safe('SELECT idle_releases FROM glibc_malloc_stats()'), 0, 'no release counted inside the transaction');
$s->query_safe('COMMIT');
ok(wait_for(sub { rss_anon($pid) - $start < 2 * 2**20 }, 2), 'released once the transaction ended');

# Never in the middle of COPY FROM STDIN: the backend waits for the client
# there too, but inside a transaction.
$s->query_safe('CREATE TEMP TABLE c (a int)');
my $before = $s->query_safe('SELECT idle_releases FROM glibc_malloc_stats()');
$s->{stdin} .= "$big_sort;\nCOPY c FROM STDIN;\n";
$s->{run}->pump_nb;
for my $i (1 .. 10)
{
	$s->{stdin} .= "$i\n";
	$s->{run}->pump_nb;
	usleep(150_000);	# longer than the delay, ten times
}
$s->{stdin} .= "\\.\n";
is($s->query_safe("SELECT (SELECT count(*) FROM c) || '|' || idle_releases FROM glibc_malloc_stats()"),
	"10|$before", 'COPY FROM STDIN with pauses longer than the delay: no release during it');
$s->quit;

$node->stop;
done_testing();
