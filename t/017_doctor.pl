# The memory doctor: the kinds of memory in glibc_malloc_backends, the advice
# of glibc_malloc_doctor(), measured against /proc and EXPLAIN ANALYZE, and
# glibc_malloc.log_min_executor_memory.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('doctor', "work_mem = 32MB\n");
seed_sort_table($node);
my $big_sort = workload('big_sort');

# 2000 relations of 30 columns: a session that opens them all caches them.
$node->safe_psql('postgres', q{
	SELECT format('CREATE TABLE rel_%s (%s)', i,
	              (SELECT string_agg(format('c%s int', j), ', ') FROM generate_series(1, 30) j))
	FROM generate_series(1, 2000) i \gexec
});
$node->safe_psql('postgres', 'CREATE ROLE watcher LOGIN');
my $admin = $node->background_psql('postgres');

sub doctor_kinds
{
	my ($pid) = @_;
	return $admin->query_safe("SELECT coalesce(string_agg(kind, ',' ORDER BY kind), '') FROM glibc_malloc_doctor() WHERE pid = $pid");
}

# Caches: only a reconnect returns them, and the doctor says so.
my $c = $node->background_psql('postgres');
my $cpid = $c->query_safe(q{SET glibc_malloc.preset = 'frugal';
	DO $$ BEGIN FOR i IN 1..2000 LOOP EXECUTE format('SELECT count(*) FROM rel_%s', i); END LOOP; END $$;
	SELECT pg_backend_pid()});
my $row;
ok( wait_for(sub {
			$row = $admin->query_safe("SELECT cache_bytes || '|' || context_bytes || '|' || free_bytes || '|' || rss_anon_bytes FROM glibc_malloc_backends WHERE pid = $cpid");
			(split /\|/, $row)[0] >= 10 * 2**20;
		}, 5),
	'a session that opened 2000 relations shows cache_bytes >= 10 MB');
my ($cache, $contexts, $free, $rss) = split /\|/, $row;
note sprintf('cache %.1f MB, contexts %.1f MB, free %.1f MB, RssAnon %.1f MB', $cache / 2**20, $contexts / 2**20, $free / 2**20, $rss / 2**20);
cmp_ok($contexts, '>=', $cache, 'the caches are part of all contexts');
cmp_ok(rss_anon($cpid), '>=', 0.9 * $cache, 'and resident, as /proc shows (the blocks\' untouched tails aside)');
is(doctor_kinds($cpid), 'caches', 'the doctor names it as caches, not free heap');
like($admin->query_safe("SELECT action FROM glibc_malloc_doctor() WHERE pid = $cpid"), qr/a trim does not help: only a new connection returns the relcache and catcache/,
	'and says that only a reconnect returns them');

# Free heap: a greedy session after a big sort keeps it; the doctor advises a
# trim, and no longer lists it after the trim.
my $g = $node->background_psql('postgres');
my $gpid = $g->query_safe("SET glibc_malloc.preset = 'greedy'; $big_sort; $big_sort; SELECT pg_backend_pid()");
ok(wait_for(sub { doctor_kinds($gpid) eq 'free_heap' }, 5), 'a greedy session after a big sort: the doctor lists its free heap');
my ($bytes, $action) = split /\|/, $admin->query_safe("SELECT bytes || '|' || action FROM glibc_malloc_doctor() WHERE pid = $gpid");
like($action, qr/glibc_malloc_trim_backend\($gpid\)/, 'and advises a trim of that backend');
cmp_ok($bytes, '>=', 4 * 2**20, 'of at least 4 MB');
cmp_ok(rss_anon($gpid), '>=', $bytes, 'that /proc shows resident');
like($admin->query_safe("SELECT reason FROM glibc_malloc_doctor() WHERE kind = 'idle_free_heap'"),
	qr/^1 idle backend holds \d+ MB of free heap$/, 'the idle backends\' free heap is summed in one row');
my $before = rss_anon($gpid);
is($admin->query_safe("SELECT glibc_malloc_trim_backend($gpid)"), 't', 'the advised trim is delivered');
ok(wait_for(sub { rss_anon($gpid) < $before - $bytes / 2 }, 3), 'RssAnon drops by at least half of what the doctor named');
ok(wait_for(sub { doctor_kinds($gpid) eq '' }, 3), 'after the trim the doctor no longer lists it');
is($admin->query_safe("SELECT count(*) FROM glibc_malloc_doctor() WHERE kind = 'idle_free_heap'"), 0, 'nor the idle backends\' sum');

# Visibility: a role without pg_read_all_stats hears about its own backends
# only, in the per-backend rows and in the idle backends' sum.  Both roles
# now have an idle greedy backend holding free heap.
my $g2 = $node->background_psql('postgres');
my $g2pid = $g2->query_safe("SET glibc_malloc.preset = 'greedy'; $big_sort; $big_sort; SELECT pg_backend_pid()");
my $w2 = $node->background_psql('postgres', extra_params => [ '-U', 'watcher' ]);
my $w2pid = $w2->query_safe("SET glibc_malloc.preset = 'greedy'; $big_sort; $big_sort; SELECT pg_backend_pid()");
my $w = $node->background_psql('postgres', extra_params => [ '-U', 'watcher' ]);
ok(wait_for(sub { doctor_kinds($g2pid) eq 'free_heap' && doctor_kinds($w2pid) eq 'free_heap' }, 5),
	'the superuser sees both greedy backends\' free heap');
like($admin->query_safe("SELECT reason FROM glibc_malloc_doctor() WHERE kind = 'idle_free_heap'"), qr/^2 idle backends hold/,
	'and sums both idle backends');
is($w->query_safe("SELECT string_agg(DISTINCT pid::text, ',') FROM glibc_malloc_doctor() WHERE pid IS NOT NULL"), $w2pid,
	'another role hears about its own backend only, not the superuser\'s (caches, free heap)');
like($w->query_safe("SELECT reason FROM glibc_malloc_doctor() WHERE kind = 'idle_free_heap'"), qr/^1 idle backend holds/,
	'and its sum of idle backends counts its own only');
$_->quit for $w, $w2, $g2;

# The statement log.
my $explain = $admin->query_safe('EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) ' . seed_sort());
my ($sort_kb) = $explain =~ /Sort Method: quicksort\s+Memory: (\d+)kB/;
ok($sort_kb, "EXPLAIN ANALYZE reports the seed sort's memory ($sort_kb kB)");
my $s = $node->background_psql('postgres');
$s->query_safe("SET glibc_malloc.log_min_executor_memory = '16MB'");
my $offset = -s $node->logfile;
$s->query_safe(seed_sort());
$s->query_safe('SELECT 1');
$s->query_safe("SELECT 1 FROM pg_class LIMIT 1");
my $spid = $s->query_safe('SELECT pg_backend_pid()');
my $log = slurp_file($node->logfile, $offset);
my @logged = $log =~ /LOG:  glibc_malloc: statement used (\d+) kB of executor memory, (\d+) kB allocated/g;
is(scalar @logged, 2, 'the seed sort is logged once, and nothing else');
my ($used_kb, $allocated_kb) = @logged;
note "logged: $used_kb kB used, $allocated_kb kB allocated; EXPLAIN ANALYZE: $sort_kb kB";
cmp_ok(abs($used_kb - $sort_kb), '<=', 0.2 * $sort_kb, 'its executor memory is within 20% of EXPLAIN ANALYZE\'s sort memory');
cmp_ok($allocated_kb, '>=', $used_kb, 'and the allocated blocks hold at least that');
like($log, qr/DETAIL:  log_min_executor_memory is 16384 kB; glibc heap [+-]\d+ kB, mmapped [+-]\d+ kB across the statement; heap now \d+ kB, mmapped now \d+ kB; preset default\. Query: SELECT \* FROM t ORDER BY a OFFSET 100000/,
	'with the heap and mmapped change, the preset and the query text');
unlike($log, qr/Query: SELECT 1/, 'SELECT 1 is never logged');
ok(wait_for(sub { $admin->query_safe("SELECT peak_executor_bytes FROM glibc_malloc_backends WHERE pid = $spid") >= $allocated_kb * 1024 }, 3),
	'the view\'s peak_executor_bytes shows the sort once the backend published');

# EXPLAIN without ANALYZE runs nothing, and is not logged, even at 0 kB.
$s->query_safe('SET glibc_malloc.log_min_executor_memory = 0');
$offset = -s $node->logfile;
$s->query_safe('EXPLAIN ' . seed_sort());
unlike(slurp_file($node->logfile, $offset), qr/statement used/, 'EXPLAIN without ANALYZE is not logged');
$s->query_safe('SELECT 1');
like(slurp_file($node->logfile, $offset), qr/statement used \d+ kB/, 'while SELECT 1 is, at 0 kB');

# A parallel query is logged once, by the leader; its workers log nothing.
my $parallel = 'SET max_parallel_workers_per_gather = 2; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0';
$s->query_safe("SET glibc_malloc.log_min_executor_memory = -1; $parallel");
like($s->query_safe('EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) SELECT count(*) FROM t'), qr/Workers Launched: [12]/,
	'the parallel plan launches workers in this session');
$s->query_safe('SET glibc_malloc.log_min_executor_memory = 0');
$offset = -s $node->logfile;
$s->query_safe('SELECT count(*) FROM t');
my @by = slurp_file($node->logfile, $offset) =~ /\[(\d+)\] [^\n]*?LOG:  glibc_malloc: statement used/g;
is("@by", $spid, 'a parallel query is logged once, by the leader');
$s->query_safe("RESET max_parallel_workers_per_gather; SET glibc_malloc.log_min_executor_memory = '16MB'");

# Bind parameters, cut as log_parameter_max_length says.
$s->query_safe("SET log_parameter_max_length = 3; PREPARE p(text) AS SELECT * FROM t WHERE \$1 <> '' ORDER BY a OFFSET 100000");
$offset = -s $node->logfile;
$s->query_safe("EXECUTE p('abcdefgh')");
like(slurp_file($node->logfile, $offset), qr/Parameters: \$1 = 'abc\.\.\.'/, 'parameters are logged, cut at log_parameter_max_length');

$_->quit for $c, $g, $s, $admin;
check_clean_server($node, 0, 100000);
$node->stop;

done_testing();
