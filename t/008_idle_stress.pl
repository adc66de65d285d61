# Stress the idle release: a 1 ms delay so the timer fires thousands of
# times, glibc_malloc.perturb on, while clients run sorts, hash aggregates
# and joins over the extended and prepared protocols, and COPY FROM STDIN.
# No crash, hang, wrong result or server-log error.
# Bounded: STRESS_SECONDS (default 60).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $seconds = $ENV{STRESS_SECONDS} // 60;
my $node = new_node('idle_stress', <<'CONF');
max_connections = 30
glibc_malloc.preset = 'balanced'
glibc_malloc.idle_release_delay = 1
glibc_malloc.perturb = 165
log_min_messages = warning
CONF
seed_sort_table($node);
my $rows = $node->safe_psql('postgres', 'SELECT count(*) FROM t');
my $groups = $node->safe_psql('postgres', 'SELECT count(DISTINCT a % 5000) FROM t');
$node->safe_psql('postgres', q{
	CREATE TABLE releases (pid int PRIMARY KEY, n bigint);
	CREATE TABLE copied (a int, b text);
});

# Each statement is its own transaction; the \sleep gaps are idle time
# longer than the delay, so the release runs between statements.
my $script = <<"SQL";
\\set w random(1024, 65536)
SELECT set_config('work_mem', :w || 'kB', false);
\\sleep 2 ms
SELECT 1 / (count(*) = $rows)::int FROM (SELECT * FROM t ORDER BY a, c1) s;
\\sleep 2 ms
SELECT 1 / (count(*) = $groups)::int FROM (SELECT a % 5000, count(*), max(c2) FROM t GROUP BY 1) s;
\\sleep 2 ms
SELECT 1 / (count(*) >= $rows)::int FROM t t1 JOIN t t2 USING (a);
\\sleep 2 ms
BEGIN;
SELECT 1 / (count(*) = $rows)::int FROM (SELECT * FROM t ORDER BY c3) s;
\\sleep 3 ms
SELECT 1 / (sum(1) = 100)::int FROM generate_series(1, 100);
COMMIT;
\\sleep 2 ms
SELECT 1 / (count(*) = 1000)::int FROM generate_series(1, 1000);
\\sleep 2 ms
SELECT 1 / (length(string_agg(md5(g::text), ',')) = 32999)::int FROM generate_series(1, 1000) g;
\\sleep 2 ms
SELECT 1 / (count(*) = 1000)::int FROM generate_series(1, 1000);
\\sleep 2 ms
INSERT INTO releases SELECT pg_backend_pid(), idle_releases FROM glibc_malloc_stats()
  ON CONFLICT (pid) DO UPDATE SET n = excluded.n;
SQL

# COPY FROM STDIN in a loop beside the clients.
my $data = PostgreSQL::Test::Utils::tempdir() . '/copy.data';
open my $fh, '>', $data or die $!;
print $fh join("\n", map { "$_\t" . ('x' x ($_ % 300)) } 1 .. 20000), "\n";
close $fh;
my $copy = IPC::Run::start(
	[ 'bash', '-c',
		qq{end=\$((SECONDS + $seconds)); n=0; while [ \$SECONDS -lt \$end ]; do psql -X -q -v ON_ERROR_STOP=1 -h "\$3" -p "\$4" -d postgres -c "\$1" -c "\$2" >/dev/null || exit 1; n=\$((n + 1)); done; echo "copies: \$n"},
		'copy', "\\copy copied FROM '$data'", 'SELECT 1 / (count(*) % 20000 = 0)::int FROM copied', $node->host, $node->port ],
	'>', \my $copy_out, '2>', \my $copy_err);

my $log_offset = -s $node->logfile;
for my $mode ('extended', 'prepared')
{
	$node->pgbench(
		"--no-vacuum --client=4 --jobs=2 --time=" . int($seconds / 2) . " --protocol=$mode",
		0,
		[ qr{actually processed: [1-9]\d*}, qr{number of failed transactions: 0 |^(?!.*failed)}s ],
		[qr{^$}],
		"pgbench -M $mode with a 1 ms idle release and perturb",
		{ "idle_$mode.sql" => $script });
}
ok($copy->finish, 'COPY FROM STDIN loop ran without error') or diag $copy_err;
like($copy_out, qr/copies: [1-9]/, 'COPY FROM STDIN ran');

my $releases = $node->safe_psql('postgres', 'SELECT sum(n) FROM releases');
note "idle releases: $releases";
my $min = int(1000 * $seconds / 60);
cmp_ok($releases, '>', $min, "the idle release ran more than $min times");

check_clean_server($node, $log_offset, $rows);
$node->stop;
done_testing();
