# Stress: pgbench clients that randomly switch presets and knobs (as
# superuser) while running sorts, hash aggregates and hash joins whose
# results are checked (a wrong count divides by zero).  No errors, no crash, a clean server log.
# Bounded: STRESS_SECONDS (default 60).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $seconds = $ENV{STRESS_SECONDS} // 60;
my $node = new_node('stress', "max_connections = 20\nlog_min_messages = warning\n");
seed_sort_table($node);
my $rows = $node->safe_psql('postgres', 'SELECT count(*) FROM t');
my $groups = $node->safe_psql('postgres', 'SELECT count(DISTINCT a % 5000) FROM t');

# Values every glibc accepts: mmap_threshold at most 32 MB (glibc before
# 2.35), mxfast at most the platform's limit.
my $mxfast_max = $node->safe_psql('postgres', "SELECT max_val FROM pg_settings WHERE name = 'glibc_malloc.mxfast'");
my $script = <<"SQL";
\\set p random(1, 3)
\\set k random(1, 6)
\\set v random(-1, 40000)
\\set w random(64, 65536)
SELECT set_config('glibc_malloc.preset', (ARRAY['default', 'greedy', 'frugal'])[:p], false);
SELECT set_config('glibc_malloc.' || (ARRAY['trim_threshold', 'mmap_threshold', 'top_pad', 'mmap_max', 'mxfast', 'perturb'])[:k],
  (CASE :k WHEN 2 THEN :v % 32769 WHEN 5 THEN :v % ($mxfast_max + 1) WHEN 6 THEN abs(:v) % 256 ELSE :v END)::text, false);
SELECT set_config('work_mem', :w || 'kB', false);
SELECT 1 / (count(*) = $rows)::int FROM (SELECT * FROM t ORDER BY a, c1) s;
SET enable_sort = off;
SELECT 1 / (count(*) = $groups)::int FROM (SELECT a % 5000, count(*), max(c2) FROM t GROUP BY 1) s;
SELECT 1 / (count(*) >= $rows)::int FROM t t1 JOIN t t2 USING (a);
RESET enable_sort;
SQL

my $log_offset = -s $node->logfile;
$node->pgbench(
	"--no-vacuum --client=8 --jobs=2 --time=$seconds",
	0,
	[ qr{actually processed: [1-9]\d*}, qr{number of failed transactions: 0 |^(?!.*failed)}s ],
	[qr{^$}],
	'pgbench with random presets and knobs',
	{ 'stress.sql' => $script });

check_clean_server($node, $log_offset, $rows);
$node->stop;
done_testing();
