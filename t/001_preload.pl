# Preloaded settings reach every process: the postmaster applies them once and
# backends, autovacuum workers and parallel workers inherit them.  Checked in
# glibc itself (its mp_ parameters, read with gdb) as well as in the report.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('preload', <<'CONF');
glibc_malloc.preset = 'greedy'
work_mem = '32MB'
glibc_malloc.arena_max = 2
glibc_malloc.arena_test = 1
autovacuum_naptime = 1
CONF

my $mmap = 32 * 1024 * 1024;	# min(work_mem + 4 kB, 64MB / 2)
my $trim = 64 * 1024 * 1024;

# The postmaster applied the preset and the arena limits before forking.
my $pm = glibc_params(postmaster_pid($node));
is($pm->{mmap_threshold}, $mmap, 'postmaster: mmap threshold from greedy');
is($pm->{trim_threshold}, $trim, 'postmaster: trim threshold from greedy');
is($pm->{arena_max}, 2, 'postmaster: arena_max applied');
is($pm->{arena_test}, 1, 'postmaster: arena_test applied');
is($pm->{no_dyn_threshold}, 1, 'postmaster: dynamic thresholds frozen');

# A backend: the report and glibc agree.
my $s = $node->background_psql('postgres');
my $pid = $s->query_safe('SELECT pg_backend_pid()');
my $set = settings_of($s);
is($set->{mmap_threshold}, "$mmap|preset|true", 'backend reports greedy mmap threshold, applied');
is($set->{trim_threshold}, "$trim|preset|true", 'backend reports greedy trim threshold, applied');
is($set->{arena_max}, '2|setting|true', 'backend reports arena_max from the postmaster');
is($set->{arena_test}, '1|setting|true', 'backend reports arena_test from the postmaster');
is($set->{dynamic_thresholds}, '0|preset|false', 'backend reports dynamic mode frozen');
my $mp = glibc_params($pid);
is($mp->{mmap_threshold}, $mmap, 'backend: glibc mmap threshold');
is($mp->{trim_threshold}, $trim, 'backend: glibc trim threshold');
is($mp->{arena_max}, 2, 'backend: glibc arena_max');

# The autovacuum launcher, and a worker kept busy by cost-based delay.
my $launcher = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'autovacuum launcher'");
is(glibc_params($launcher)->{mmap_threshold}, $mmap, 'autovacuum launcher: glibc mmap threshold');

$node->safe_psql('postgres', q{
	CREATE TABLE churn (id int, pad text) WITH (autovacuum_vacuum_cost_delay = 100,
		autovacuum_vacuum_cost_limit = 1, autovacuum_vacuum_threshold = 1,
		autovacuum_vacuum_scale_factor = 0);
	INSERT INTO churn SELECT g, repeat('x', 200) FROM generate_series(1, 50000) g;
	DELETE FROM churn WHERE id % 2 = 0;
});
my $worker = wait_for(sub {
		$node->safe_psql('postgres',
			"SELECT pid FROM pg_stat_activity WHERE backend_type = 'autovacuum worker' AND query LIKE '%churn%' LIMIT 1");
	}, 60);
ok($worker, 'an autovacuum worker runs (on the throttled table)');
my $wmp = glibc_params($worker);
is($wmp->{mmap_threshold}, $mmap, 'autovacuum worker: glibc mmap threshold');
is($wmp->{trim_threshold}, $trim, 'autovacuum worker: glibc trim threshold');
is($wmp->{arena_max}, 2, 'autovacuum worker: glibc arena_max');
$node->safe_psql('postgres', 'DROP TABLE churn');

# Parallel workers: test-only, parallel-safe declarations of the report, of
# the diagnostic allocation and of pg_backend_pid run inside the workers.
my $force = parallel_option($node);
$node->safe_psql('postgres', q{
	CREATE FUNCTION worker_settings(OUT name text, OUT value bigint, OUT unit text,
		OUT source text, OUT applied boolean, OUT detail text) RETURNS SETOF record
		AS 'glibc_malloc', 'glibc_malloc_settings' LANGUAGE C PARALLEL SAFE;
	CREATE FUNCTION worker_alloc(bigint, integer, OUT mmapped_chunks integer,
		OUT heap_growth bigint, OUT top_free_after_alloc bigint, OUT heap_kept_after_free bigint,
		OUT fastbin_bytes_after_free bigint, OUT first_byte integer) RETURNS record
		AS 'glibc_malloc', 'glibc_malloc_diag_alloc' LANGUAGE C PARALLEL SAFE;
	CREATE FUNCTION worker_pid() RETURNS int AS 'pg_backend_pid' LANGUAGE internal PARALLEL SAFE;
});
my $par = $s->query_safe(qq{
	SET $force = on; SET max_parallel_workers_per_gather = 2;
	SELECT worker_pid() || '|' || value || '|' || source || '|' || applied
	FROM worker_settings() WHERE name = 'mmap_threshold';
});
my ($wpid, $rest) = split /\|/, $par, 2;
isnt($wpid, $pid, 'the report ran in a parallel worker');
is($rest, "$mmap|preset|true", 'parallel worker reports greedy mmap threshold, applied');
is($s->query_safe('SELECT mmapped_chunks FROM worker_alloc(2 * 1024 * 1024, 2)'), 0,
	'parallel worker: glibc serves 2 MB blocks from the heap under greedy');

# A session-level change reaches that session's parallel workers too.
$s->query_safe("SET glibc_malloc.preset = 'frugal'");
is($s->query_safe('SELECT mmapped_chunks FROM worker_alloc(2 * 1024 * 1024, 2)'), 2,
	'parallel worker follows the leader\'s SET: frugal mmaps 2 MB blocks');
$s->quit;

# A reload that changes a server-start knob: PostgreSQL's own "needs a
# restart", not our "needs shared_preload_libraries" (it is preloaded).
my $log_offset = -s $node->logfile;
$node->append_conf('postgresql.conf', "glibc_malloc.arena_max = 3\n");
$node->reload;
ok( wait_for(sub { slurp_file($node->logfile, $log_offset) =~ /glibc_malloc\.arena_max/ }, 10),
	'the reload reports the changed arena_max');
my $log = slurp_file($node->logfile, $log_offset);
like($log, qr/parameter "glibc_malloc.arena_max" cannot be changed without restarting the server/,
	'a reload says that arena_max needs a restart');
unlike($log, qr/shared_preload_libraries/, 'and does not claim that the module is not preloaded');
is($node->safe_psql('postgres', 'SHOW glibc_malloc.arena_max'), '2', 'the value in force stays');

$node->stop;
done_testing();

sub postmaster_pid
{
	my ($n) = @_;
	open my $fh, '<', $n->data_dir . '/postmaster.pid' or die $!;
	my $line = <$fh>;
	chomp $line;
	return $line;
}
