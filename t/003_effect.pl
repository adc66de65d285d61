# The effect, measured from outside: strace counts the memory syscalls of a
# backend running the seed sort workload, /proc gives its RssAnon.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('effect', "work_mem = '32MB'\n");
seed_sort_table($node);
my $sort = seed_sort() . ';';

# Run the seed sort $n times in one backend under $preset; return the
# syscall count of each run.
sub syscalls_per_query
{
	my ($preset, $n) = @_;
	my $s = $node->background_psql('postgres');
	my $pid = $s->query_safe("SET glibc_malloc.preset = '$preset'; SELECT pg_backend_pid()");
	my @counts = map { count_syscalls($pid, sub { $s->query_safe("$sort SELECT 'done'") }) } 1 .. $n;
	$s->quit;
	note "$preset: syscalls per query: @counts";
	return @counts;
}

my @default = syscalls_per_query('default', 3);
cmp_ok($default[$_], '>', 5, "default: query " . ($_ + 1) . " makes more than 5 brk/mmap/munmap calls")
  for 1 .. 2;

my @greedy = syscalls_per_query('greedy', 3);
is($greedy[$_], 0, "greedy: query " . ($_ + 1) . " makes no brk/mmap/munmap call") for 1 .. 2;

# RssAnon of one backend under $preset: at connection start and after the
# queries, read from outside through /proc.
sub rss_around
{
	my ($preset, @queries) = @_;
	my $s = $node->background_psql('postgres');
	my $pid = $s->query_safe("SET glibc_malloc.preset = '$preset'; SELECT pg_backend_pid()");
	my $start = rss_anon($pid);
	$s->query_safe("$_; SELECT 'done'") for @queries;
	my $after = rss_anon($pid);
	$s->quit;
	note sprintf('%s: RssAnon %.1f MB at start, %.1f MB after', $preset, $start / 2**20, $after / 2**20);
	return $after - $start;
}

my $big_sort = workload('big_sort');

# frugal: once the query is over, RssAnon is back near its start value.
cmp_ok(rss_around('frugal', $sort), '<', 2 * 2**20,
	'frugal: RssAnon within 2 MB of its start value after the seed sort');
cmp_ok(rss_around('frugal', $big_sort, $big_sort), '<', 2 * 2**20,
	'frugal: RssAnon within 2 MB of its start value after two 1M-row sorts');

# Without frugal the same backends keep memory, so the checks above can fail.
cmp_ok(rss_around('greedy', $sort), '>', 8 * 2**20, 'greedy: keeps more than 8 MB after the seed sort');
cmp_ok(rss_around('default', $big_sort, $big_sort), '>', 8 * 2**20,
	'glibc defaults: keep more than 8 MB after two 1M-row sorts');

$node->stop;
done_testing();
