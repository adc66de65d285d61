# balanced releases the free heap nobody reuses even when the backend never
# goes idle for idle_release_delay (pooled connections with steady light
# traffic), and keeps it for a backend that goes on using it.  Measured from
# outside in /proc.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = new_node('unused', "work_mem = '32MB'\n");
my $big_sort = workload('big_sort');

# Open a session with $sets; return it, its pid and its RssAnon at start.
sub session
{
	my ($sets) = @_;
	my $s = $node->background_psql('postgres');
	my $pid = $s->query_safe("$sets; SELECT pg_backend_pid()");
	return ($s, $pid, rss_anon($pid));
}

# Run SELECT 1 every 0.3 s for $seconds; return the largest RssAnon seen in
# the last second and how long the loop ran.
sub light_work
{
	my ($s, $pid, $seconds) = @_;
	my $start = time;
	my $last = 0;
	while (time - $start < $seconds)
	{
		$s->query_safe('SELECT 1');
		my $rss = rss_anon($pid);
		$last = $rss if time - $start >= $seconds - 1 && $rss > $last;
		usleep(300_000);
	}
	return $last;
}

# balanced: two big sorts, then light queries every 0.3 s: never idle for
# the 1 s delay, yet the memory goes back.
my ($s, $pid, $start) = session("SET glibc_malloc.preset = 'balanced'");
$s->query_safe("$big_sort; $big_sort");
my $busy = rss_anon($pid);
cmp_ok($busy - $start, '>', 8 * 2**20, 'balanced keeps memory right after the sorts');
my $light = light_work($s, $pid, 3);
note sprintf('balanced: RssAnon %.1f MB at start, %.1f MB after the sorts, %.1f MB under light work',
	$start / 2**20, $busy / 2**20, $light / 2**20);
cmp_ok($light - $start, '<', 2 * 2**20, 'busy with light queries: the unused memory went back');
my ($n, $bytes) = split /\|/, $s->query_safe("SELECT idle_releases || '|' || idle_released_bytes FROM glibc_malloc_stats()");
cmp_ok($n, '>=', 1, 'the release is counted with the idle releases');
cmp_ok($bytes, '>', 8 * 2**20, 'with the bytes it returned');
$s->quit;

# greedy keeps it under the same traffic.
($s, $pid, $start) = session("SET glibc_malloc.preset = 'greedy'");
$s->query_safe("$big_sort; $big_sort");
$light = light_work($s, $pid, 3);
cmp_ok($light - $start, '>', 8 * 2**20, 'greedy: the memory stays under light work');
$s->quit;

# balanced with the delay off releases nothing, busy or not.
($s, $pid, $start) = session("SET glibc_malloc.preset = 'balanced'; SET glibc_malloc.idle_release_delay = 0");
$s->query_safe("$big_sort; $big_sort");
$light = light_work($s, $pid, 2.5);
cmp_ok($light - $start, '>', 8 * 2**20, 'balanced, idle_release_delay = 0: the memory stays');
is($s->query_safe('SELECT idle_releases FROM glibc_malloc_stats()'), 0, 'and no release ran');
$s->quit;

# A backend that keeps running big sorts, each starting well within the
# delay of the last one's end, keeps its memory: no release between them.
($s, $pid, $start) = session("SET glibc_malloc.preset = 'balanced'");
for (1 .. 5)
{
	$s->query_safe("$big_sort");
	$s->query_safe('SELECT 1');
	usleep(200_000);
}
is($s->query_safe('SELECT idle_releases FROM glibc_malloc_stats()'), 0,
	'big sorts 0.2 s apart (delay 1 s): nothing released between them');
cmp_ok(rss_anon($pid) - $start, '>', 8 * 2**20, 'and the memory is still there');
# Then light work only: released within about the delay.
$light = light_work($s, $pid, 3);
cmp_ok($light - $start, '<', 2 * 2**20, 'then light work: released');
$s->quit;

my $log = slurp_file($node->logfile);
unlike($log, qr/\b(ERROR|FATAL|PANIC|WARNING):|terminated by signal/, 'the server log is clean');
done_testing();
