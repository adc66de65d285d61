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
# queries, read from outside through /proc.  In list context, glibc's own
# parameters (mp_) after the queries as well.
sub rss_around
{
	my ($preset, @queries) = @_;
	my $s = $node->background_psql('postgres');
	my $pid = $s->query_safe("SET glibc_malloc.preset = '$preset'; SELECT pg_backend_pid()");
	my $start = rss_anon($pid);
	$s->query_safe("$_; SELECT 'done'") for @queries;
	my $after = rss_anon($pid);
	my $mp = wantarray ? glibc_params($pid) : undef;
	$s->quit;
	note sprintf('%s: RssAnon %.1f MB at start, %.1f MB after', $preset, $start / 2**20, $after / 2**20);
	return wantarray ? ($after - $start, $mp) : $after - $start;
}

my $big_sort = workload('big_sort');

# frugal: once the query is over, RssAnon is back near its start value.
cmp_ok(rss_around('frugal', $sort), '<', 2 * 2**20,
	'frugal: RssAnon within 2 MB of its start value after the seed sort');
cmp_ok(rss_around('frugal', $big_sort, $big_sort), '<', 2 * 2**20,
	'frugal: RssAnon within 2 MB of its start value after two 1M-row sorts');

# Without frugal the same backends keep memory, so the checks above can fail.
cmp_ok(rss_around('greedy', $sort), '>', 8 * 2**20, 'greedy: keeps more than 8 MB after the seed sort');

# Under glibc's defaults, what stays after two 1M-row sorts depends on the
# word size.  Freeing an mmapped chunk raises glibc's dynamic mmap threshold
# to that chunk's size (and the trim threshold to twice that), but only up to
# DEFAULT_MMAP_THRESHOLD_MAX (malloc/malloc.c, __libc_free): 4 * 1024 * 1024
# * sizeof (long) = 32 MB on 64-bit, 512 kB where __WORDSIZE == 32.  On
# 64-bit the first sort's blocks raise it past 512 kB, the second sort's
# come from the heap and stay there; on 32-bit it stops at 512 kB, the large
# blocks stay mmapped and go back to the kernel at free() (greedy, which
# sets the thresholds, keeps them on both: the checks above).  The word
# size is PostgreSQL's (type internal is a pointer), not the module's.
my $word = $node->safe_psql('postgres', "SELECT typlen FROM pg_type WHERE typname = 'internal'");
my $threshold_max = $word == 4 ? 512 * 1024 : 4 * 1024 * 1024 * $word;
my ($kept, $mp) = rss_around('default', $big_sort, $big_sort);
note "glibc defaults, $word-byte words: mmap threshold $mp->{mmap_threshold}, trim threshold $mp->{trim_threshold}";
cmp_ok($mp->{mmap_threshold}, '<=', $threshold_max,
	"glibc defaults: the dynamic mmap threshold stays at most DEFAULT_MMAP_THRESHOLD_MAX ($threshold_max)");
if ($word == 4)
{
	cmp_ok($kept, '<', 2 * 2**20,
		'glibc defaults, 32-bit: RssAnon within 2 MB of its start value after two 1M-row sorts');
}
else
{
	cmp_ok($mp->{mmap_threshold}, '>', 512 * 1024,
		'glibc defaults, 64-bit: the sorts raised the dynamic mmap threshold past 512 kB');
	cmp_ok($kept, '>', 8 * 2**20, 'glibc defaults, 64-bit: keep more than 8 MB after two 1M-row sorts');
}

$node->stop;
done_testing();
