# Memory per query (glibc_malloc_statements): the seed sort's executor peak
# against EXPLAIN ANALYZE, SELECT 1's, calls, the planner's peak, the heap
# change against glibc's own counters, utility statements, the join with
# pg_stat_statements, eviction within statements_max, reset and its
# privileges, visibility, parallel workers, "out of memory" errors,
# compute_query_id = off, track_statements, and the doctor naming the
# queryid behind a backend's free heap.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('statements',
	"shared_preload_libraries = 'pg_stat_statements,glibc_malloc'\nglibc_malloc.track_statements = top\n");
$node->safe_psql('postgres', 'CREATE EXTENSION pg_stat_statements');
my $pgver = $node->safe_psql('postgres', 'SHOW server_version_num');
seed_sort_table($node);
my $sort = seed_sort();

# One row of the view for the statement whose pg_stat_statements text is
# $text (joined as the docs show it), as a hash.
sub row_for
{
	my ($text, $where) = @_;
	my $join = $pgver >= 140000 ? 'USING (userid, dbid, queryid, toplevel)' : 'USING (userid, dbid, queryid)';
	my $out = $node->safe_psql('postgres', qq{
		SELECT s.calls, s.plans, coalesce(s.max_plan_peak_bytes, -1), s.exec_measured,
		       coalesce(s.max_exec_peak_bytes, -1), coalesce(s.min_exec_peak_bytes, -1),
		       s.heap_change_bytes, s.heap_grew, s.oom_errors, s.limit_oom_errors, s.queryid,
		       s.mmapped_change_bytes
		FROM glibc_malloc_statements s JOIN pg_stat_statements p $join
		WHERE p.query = \$\$$text\$\$ } . ($where // ''));
	return undef if $out eq '';
	my %r;
	@r{qw(calls plans plan_peak exec_measured max_exec min_exec heap_change heap_grew oom limit_oom queryid mmapped_change)} = split /\|/, $out;
	return \%r;
}

# The seed sort: its peak is the sort's memory as EXPLAIN ANALYZE reports it.
my $explain = $node->safe_psql('postgres', "SET work_mem = '64MB'; EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) $sort");
my ($sort_kb) = $explain =~ /Sort Method: quicksort\s+Memory: (\d+)kB/;
ok($sort_kb, "EXPLAIN ANALYZE reports an in-memory sort of the seed table (${\($sort_kb // '?')} kB)");
$node->safe_psql('postgres', 'SELECT glibc_malloc_statements_reset()');
$node->safe_psql('postgres', "SET work_mem = '64MB'; $sort; $sort");
my $r = row_for('SELECT * FROM t ORDER BY a OFFSET $1');
ok($r, 'the seed sort has a row, found through pg_stat_statements\' query text');
is($r->{calls}, 2, 'calls: 2');
cmp_ok(abs($r->{max_exec} / ($sort_kb * 1024) - 1), '<', 0.2,
	"its max executor peak ($r->{max_exec} bytes) is within 20 % of EXPLAIN ANALYZE's sort memory");
cmp_ok($r->{min_exec}, '>', 0, 'min peak measured too');
cmp_ok($r->{plan_peak}, '>', 1024, "the planner's peak is measured ($r->{plan_peak} bytes)");
cmp_ok($r->{plan_peak}, '<', 1024 * 1024, 'and small');
is($r->{plans}, 2, 'two plannings (simple protocol)');

# SELECT 1: a small peak; calls counted right.
$node->safe_psql('postgres', 'SELECT 1; SELECT 2; SELECT 3');
$node->safe_psql('postgres', 'SELECT 4');
$r = row_for('SELECT $1');
is($r->{calls}, 4, 'SELECT 1: four calls over two connections');
cmp_ok($r->{max_exec}, '>', 0, "a peak measured ($r->{max_exec} bytes)");
cmp_ok($r->{max_exec}, '<', 64 * 1024, 'and small (under 64 kB)');

# The heap change against glibc's own counters: a greedy session keeps its
# heap, so the heap glibc reports grows by what the row says the sort added.
$node->safe_psql('postgres', 'SELECT glibc_malloc_statements_reset()');
my $h = $node->safe_psql('postgres', qq{
	SET glibc_malloc.preset = 'greedy'; SET work_mem = '64MB';
	CREATE TEMP TABLE h AS SELECT heap_bytes FROM glibc_malloc_stats();
	$sort;
	SELECT s.heap_bytes - h.heap_bytes FROM glibc_malloc_stats() s, h});
$r = row_for('SELECT * FROM t ORDER BY a OFFSET $1');
cmp_ok($h, '>', 8 * 2**20, "a greedy session's heap grew across the sort, as glibc reports it ($h bytes)");
cmp_ok(abs($r->{heap_change} - $h), '<', 2**20, "the row's heap change ($r->{heap_change}) is glibc's, within 1 MB");
is($r->{heap_grew}, 1, 'and it counts one call that grew the heap');

# The heap change is read after the executor's shutdown: under glibc's
# defaults the sort's memory goes back to the kernel when its executor is
# freed, so the same sort run three times leaves glibc's heap as it was,
# and its row says so (read before the shutdown, each run counted the
# sort's memory as growth).  Under balanced the heap keeps it: the first
# run grows it, the others reuse it.  Either way the rows' heap change is
# what glibc reports across the three runs.
for my $preset ('default', 'balanced')
{
	$node->safe_psql('postgres', 'SELECT glibc_malloc_statements_reset()');
	my $set = $preset eq 'default' ? '' : "SET glibc_malloc.preset = '$preset';";
	my $d = $node->safe_psql('postgres', qq{
		$set SET work_mem = '64MB';
		CREATE TEMP TABLE h AS SELECT heap_bytes FROM glibc_malloc_stats();
		$sort; $sort; $sort;
		SELECT s.heap_bytes - h.heap_bytes FROM glibc_malloc_stats() s, h});
	$r = row_for('SELECT * FROM t ORDER BY a OFFSET $1');
	is($r->{calls}, 3, "$preset: the sort run three times");
	cmp_ok(abs($r->{heap_change} - $d), '<', 2**20,
		"$preset: its heap change ($r->{heap_change}) is glibc's across the three runs ($d), within 1 MB");
	cmp_ok($r->{heap_grew}, '<=', 1, "$preset: at most the first run grew the heap ($r->{heap_grew})");
	cmp_ok($r->{max_exec}, '>', 8 * 2**20, "$preset: while its executor held $r->{max_exec} bytes");
}

# The mmapped change against glibc's own counters.  With mmap_threshold at
# 128 kB the sort's large blocks are mmapped and held until the executor
# shuts down: a cursor holds the same sort open, and glibc counts them.  The
# row's mmapped change is that, read from glibc around the shutdown.
my $mm = "SET glibc_malloc.mmap_threshold = '128kB'; SET work_mem = '64MB'";
my $held = $node->safe_psql('postgres', qq{
	$mm;
	CREATE TEMP TABLE m AS SELECT mmapped_bytes FROM glibc_malloc_stats();
	BEGIN;
	DECLARE c CURSOR FOR $sort;
	FETCH 1 FROM c;
	SELECT s.mmapped_bytes - m.mmapped_bytes FROM glibc_malloc_stats() s, m;
	COMMIT});
cmp_ok($held, '>', 4 * 2**20, "glibc counts the open sort's mmapped chunks ($held bytes)");
$node->safe_psql('postgres', 'SELECT glibc_malloc_statements_reset()');
$node->safe_psql('postgres', "$mm; $sort");
$r = row_for('SELECT * FROM t ORDER BY a OFFSET $1');
cmp_ok(abs($r->{mmapped_change} - $held), '<', 0.1 * $held,
	"the row's mmapped change ($r->{mmapped_change}) is glibc's, within 10 %");
# With mmap_max = 0 glibc maps nothing: the row says 0 for the same sort.
$node->safe_psql('postgres', 'SELECT glibc_malloc_statements_reset()');
$node->safe_psql('postgres', "$mm; SET glibc_malloc.mmap_max = 0; $sort");
$r = row_for('SELECT * FROM t ORDER BY a OFFSET $1');
cmp_ok($r->{max_exec}, '>', 4 * 2**20, "with mmap_max = 0, the sort's peak is as large ($r->{max_exec} bytes)");
is($r->{mmapped_change}, 0, 'and its mmapped change 0: nothing was mmapped');
# A function's SET clause lowers the threshold and puts it back: the
# tuplestore it fills in its caller's memory is mmapped at 128 kB, in a
# statement that starts and ends at 32 MB, above its executor's memory.
$node->safe_psql('postgres', q{
	CREATE FUNCTION mm_rows() RETURNS SETOF text LANGUAGE plpgsql
	SET glibc_malloc.mmap_threshold = '128kB'
	AS $$ BEGIN RETURN QUERY SELECT md5(g::text) FROM generate_series(1, 200000) g; END $$});
my $mm32 = "SET glibc_malloc.mmap_threshold = '32MB'; SET work_mem = '64MB'";
$held = $node->safe_psql('postgres', qq{
	$mm32;
	CREATE TEMP TABLE m AS SELECT mmapped_bytes FROM glibc_malloc_stats();
	BEGIN;
	DECLARE c CURSOR FOR SELECT count(*) FROM mm_rows();
	FETCH 1 FROM c;
	SELECT s.mmapped_bytes - m.mmapped_bytes FROM glibc_malloc_stats() s, m;
	COMMIT});
($held) = $held =~ /(-?\d+)\s*$/;
cmp_ok($held, '>', 2**20, "glibc counts the function's tuplestore in mmapped chunks while a cursor holds it ($held bytes)");
$node->safe_psql('postgres', 'SELECT glibc_malloc_statements_reset()');
$node->safe_psql('postgres', "$mm32; SELECT count(*) FROM mm_rows()");
$r = row_for('SELECT count(*) FROM mm_rows()');
cmp_ok($r->{max_exec}, '<', 32 * 2**20, "the caller's executor peak is under 32 MB ($r->{max_exec} bytes)");
cmp_ok(abs($r->{mmapped_change} - $held), '<', 0.1 * $held,
	"the row's mmapped change ($r->{mmapped_change} bytes) is glibc's, within 10 %");

# Utility statements (queryids from PostgreSQL 14).
SKIP:
{
	skip 'utility statements have no queryid before PostgreSQL 14', 4 if $pgver < 140000;
	$node->safe_psql('postgres', "SET maintenance_work_mem = '64MB'; CREATE INDEX t_c1 ON t (c1)");
	$r = row_for('CREATE INDEX t_c1 ON t (c1)');
	is($r->{calls}, 1, 'CREATE INDEX is counted');
	is($r->{exec_measured}, 0, 'without an executor peak (it runs no executor)');
	$node->safe_psql('postgres', "SET work_mem = '64MB'; CREATE TABLE t2 AS SELECT * FROM t ORDER BY a");
	$r = row_for('CREATE TABLE t2 AS SELECT * FROM t ORDER BY a');
	is($r->{calls}, 1, 'CREATE TABLE AS is counted');
	cmp_ok($r->{max_exec}, '>', 0.8 * $sort_kb * 1024, 'with the peak of the executor inside it (its sort)');
}

# A utility statement's heap and mmapped changes are glibc's across it
# ("after minus before"), under the default preset and balanced: FETCH runs
# a cursor's sort and holds its memory, CLOSE frees it (glibc's defaults
# give it back, balanced keeps the heap).  On the heap (mmap_max = 0), then
# mmapped (mmap_threshold 128 kB); the session reads glibc's counters after
# each of the two.
SKIP:
{
	skip 'utility statements have no queryid before PostgreSQL 14', 20 if $pgver < 140000;
	for my $preset ('default', 'balanced')
	{
		for my $where ('heap', 'mmapped')
		{
			my $col = "${where}_bytes";
			my $set = ($preset eq 'default' ? '' : "SET glibc_malloc.preset = '$preset'; ")
			  . ($where eq 'heap' ? 'SET glibc_malloc.mmap_max = 0' : "SET glibc_malloc.mmap_threshold = '128kB'");
			$node->safe_psql('postgres', 'SELECT glibc_malloc_statements_reset()');
			my $out = $node->safe_psql('postgres', qq{
				$set; SET work_mem = '64MB';
				CREATE TEMP TABLE u (step int, b bigint);
				INSERT INTO u SELECT 0, $col FROM glibc_malloc_stats();
				BEGIN;
				DECLARE c CURSOR FOR $sort;
				FETCH 1 FROM c;
				INSERT INTO u SELECT 1, $col FROM glibc_malloc_stats();
				CLOSE c;
				INSERT INTO u SELECT 2, $col FROM glibc_malloc_stats();
				COMMIT;
				SELECT (SELECT b FROM u WHERE step = 1) - (SELECT b FROM u WHERE step = 0),
				       (SELECT b FROM u WHERE step = 2) - (SELECT b FROM u WHERE step = 1)});
			my ($fetch_d, $close_d) = (split /\n/, $out)[-1] =~ /^(-?\d+)\|(-?\d+)$/;
			my $f = row_for('FETCH 1 FROM c');
			my $c = row_for('CLOSE c');
			my $key = $where eq 'heap' ? 'heap_change' : 'mmapped_change';
			cmp_ok($fetch_d, '>', 4 * 2**20, "$preset, $where: glibc's $where grew across FETCH by the sort's memory ($fetch_d bytes)");
			cmp_ok(abs($f->{$key} - $fetch_d), '<', 2**20,
				"$preset, $where: FETCH's row says so ($f->{$key}), within 1 MB");
			if ($preset eq 'balanced' && $where eq 'heap')
			{
				cmp_ok(abs($close_d), '<', 2**20, "$preset, $where: glibc kept its heap across CLOSE ($close_d bytes)");
			}
			else
			{
				cmp_ok($close_d, '<', -4 * 2**20, "$preset, $where: glibc gave the sort's memory back across CLOSE ($close_d bytes)");
			}
			cmp_ok(abs($c->{$key} - $close_d), '<', 2**20,
				"$preset, $where: CLOSE's row is glibc's change across it ($c->{$key}, glibc $close_d), within 1 MB");
			my $other = $where eq 'heap' ? 'mmapped_change' : 'heap_change';
			cmp_ok(abs($f->{$other}), '<', 2**20, "$preset, $where: and FETCH's other change is small ($f->{$other})");
		}
	}
}

# Parallel query: the leader's memory only; workers add no calls.
SKIP:
{
	$node->safe_psql('postgres', 'SELECT glibc_malloc_statements_reset()');
	my $par = "SET work_mem = '64MB'; SET max_parallel_workers_per_gather = 2; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0; SET parallel_leader_participation = off;";
	my $plan = $node->safe_psql('postgres', "$par EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) SELECT * FROM t ORDER BY a OFFSET 99999");
	skip 'no parallel worker launched', 3 unless $plan =~ /Workers Launched: [1-9]/;
	$node->safe_psql('postgres', "$par SELECT * FROM t ORDER BY a OFFSET 99999");
	$r = row_for('SELECT * FROM t ORDER BY a OFFSET $1');
	is($r->{calls}, 1, 'a parallel sort counts one call');
	cmp_ok($r->{max_exec}, '<', 0.5 * $sort_kb * 1024,
		"its peak is the leader's ($r->{max_exec} bytes): the workers' sorts are not counted (documented)");
	is($node->safe_psql('postgres', "SELECT count(*) FROM glibc_malloc_statements WHERE queryid = $r->{queryid}"), 1,
		'and the workers make no rows of their own');
}

# "out of memory" under max_backend_memory counts for the statement that
# ran into it; calls only for the runs that completed.
$node->safe_psql('postgres', 'SELECT glibc_malloc_statements_reset()');
# (the next statement of the same session stores the error)
my ($ret, $out, $err) = $node->psql('postgres', "SET work_mem = '64MB'; SET glibc_malloc.max_backend_memory = '10MB'; $sort; SELECT 1",
	on_error_stop => 0);
like($err, qr/out of memory/, 'the seed sort under a 10 MB cap fails with "out of memory"');
$node->safe_psql('postgres', "SET work_mem = '64MB'; $sort");
$r = row_for('SELECT * FROM t ORDER BY a OFFSET $1');
is($r->{oom}, 1, 'its row counts the "out of memory" error');
is($r->{limit_oom}, 1, 'as one under the module\'s limits');
is($r->{calls}, 1, 'and one completed call');

# Eviction, visibility and reset on a small hash.
my $small = new_node('statements_small',
	"shared_preload_libraries = 'pg_stat_statements,glibc_malloc'\nglibc_malloc.statements_max = 100\nglibc_malloc.track_statements = top\n");
$small->safe_psql('postgres', 'CREATE EXTENSION pg_stat_statements');
$small->safe_psql('postgres', join '', map { "SELECT 'hot', $_;\n" } 1 .. 50);
my $many = join '', map { 'SELECT 1' . ('+1' x $_) . ";\n" } 1 .. 300;
$small->safe_psql('postgres', $many);
my ($entries, $dealloc) = split /\|/, $small->safe_psql('postgres', 'SELECT entries, dealloc FROM glibc_malloc_statements_info');
cmp_ok($entries, '<=', 100, "300 distinct statements: the hash keeps at most statements_max = 100 ($entries)");
cmp_ok($dealloc, '>', 0, "evicting ($dealloc times)");
cmp_ok($small->safe_psql('postgres', 'SELECT count(*) FROM glibc_malloc_statements'), '<=', 100, 'the view shows no more');
is($small->safe_psql('postgres', q{SELECT s.calls FROM glibc_malloc_statements s JOIN pg_stat_statements p USING (userid, dbid, queryid) WHERE p.query = 'SELECT $1, $2'}),
	50, 'the statement called 50 times survived the churn: the least used go');
# Evictions move the entries that stay: each is still found, once.
$small->safe_psql('postgres', join '', map { "SELECT 'hot', $_;\n" } 1 .. 10);
is($small->safe_psql('postgres', q{SELECT string_agg(s.calls::text, ',') FROM glibc_malloc_statements s JOIN pg_stat_statements p USING (userid, dbid, queryid) WHERE p.query = 'SELECT $1, $2'}),
	60, 'called 10 times more after the churn, it counts on in its one row');
is($small->safe_psql('postgres', 'SELECT count(*) - count(DISTINCT (userid, dbid, queryid, toplevel)) FROM glibc_malloc_statements'),
	0, 'no statement has two rows');
# Every churned statement that survived (moved when others before it were
# evicted), run once more, counts one more call in its row.  Read without
# recording, so that reading evicts nothing; the re-runs are all hits.
{
	local $ENV{PGOPTIONS} = '-c glibc_malloc.track_statements=none';
	my $read = q{SELECT s.queryid || '|' || s.calls || '|' || p.query FROM glibc_malloc_statements s
		JOIN pg_stat_statements p USING (userid, dbid, queryid) WHERE p.query LIKE 'SELECT $1+%'};
	my (%calls, $rerun);
	for (split /\n/, $small->safe_psql('postgres', $read))
	{
		my ($q, $c, $text) = split /\|/, $_, 3;
		my $n = () = $text =~ /\$/g;
		$calls{$q} = $c;
		$rerun .= 'SELECT 1' . ('+1' x ($n - 1)) . ";\n";
	}
	cmp_ok(scalar keys %calls, '>=', 20, 'churned statements survive: ' . scalar(keys %calls));
	{
		local $ENV{PGOPTIONS} = '';
		$small->safe_psql('postgres', $rerun);
	}
	my %after = map { split /\|/, $_, 2 } split /\n/,
	  $small->safe_psql('postgres', q{SELECT queryid || '|' || calls FROM glibc_malloc_statements});
	my @wrong = grep { ($after{$_} // 0) != $calls{$_} + 1 } sort keys %calls;
	is(scalar @wrong, 0, 'each survivor, run once more, counts one more call in its own row')
	  or diag join ', ', map { "$_: $calls{$_} -> " . ($after{$_} // 'gone') } @wrong[ 0 .. ($#wrong < 4 ? $#wrong : 4) ];
}

# Eviction as pg_stat_statements': a statement that ran starts at a usage
# of one call, not at the median of the table, so a statement that recurs
# outlives statements run once.  One run in every 100 distinct statements,
# through ten times statements_max statements run once, keeps its row and
# every call.
{
	$small->safe_psql('postgres', 'SELECT glibc_malloc_statements_reset()');
	my @ops = ('+', '-', '*', '/');
	my @once = map { my $op = $ops[ $_ % 4 ]; 'SELECT 1' . ("${op}1" x (1 + int($_ / 4))) . ";\n" } 0 .. 999;
	my ($script, $runs) = ('', 0);
	for my $i (0 .. $#once)
	{
		if ($i % 99 == 0)
		{
			$script .= "SELECT 'recurring' AS recurring;\n";
			$runs++;
		}
		$script .= $once[$i];
	}
	$script .= "SELECT 'recurring' AS recurring;\n";
	$runs++;
	$small->safe_psql('postgres', $script);
	local $ENV{PGOPTIONS} = '-c glibc_malloc.track_statements=none';
	cmp_ok($small->safe_psql('postgres', 'SELECT dealloc FROM glibc_malloc_statements_info'), '>=', 80,
		'1000 statements run once through a table of 100: evicting');
	is($small->safe_psql('postgres', q{SELECT coalesce(sum(s.calls), 0) FROM glibc_malloc_statements s
		JOIN pg_stat_statements p USING (userid, dbid, queryid) WHERE p.query = 'SELECT $1 AS recurring'}),
		$runs, "a statement run once in every 100 survives them, with its $runs calls");
}

$small->safe_psql('postgres', q{
	CREATE ROLE alice LOGIN; CREATE ROLE bob LOGIN; CREATE ROLE carol LOGIN;
	GRANT pg_read_all_stats TO carol;
	GRANT USAGE, CREATE ON SCHEMA public TO alice, bob, carol});
$small->safe_psql('postgres', 'SELECT 42 AS alices', extra_params => [ '-U', 'alice' ]);
$small->safe_psql('postgres', 'SELECT 43 AS bobs, 44', extra_params => [ '-U', 'bob' ]);
my $alice = $small->safe_psql('postgres', "SELECT oid FROM pg_roles WHERE rolname = 'alice'");
is($small->safe_psql('postgres', "SELECT count(*) FROM glibc_malloc_statements WHERE userid <> 'bob'::regrole", extra_params => [ '-U', 'bob' ]),
	0, 'bob sees only his own rows');
cmp_ok($small->safe_psql('postgres', "SELECT count(*) FROM glibc_malloc_statements WHERE userid = 'bob'::regrole", extra_params => [ '-U', 'bob' ]),
	'>=', 1, 'and does see them');
cmp_ok($small->safe_psql('postgres', "SELECT count(*) FROM glibc_malloc_statements WHERE userid = $alice", extra_params => [ '-U', 'carol' ]),
	'>=', 1, 'a member of pg_read_all_stats sees alice\'s rows');
($ret, $out, $err) = $small->psql('postgres', 'SELECT glibc_malloc_statements_reset()', extra_params => [ '-U', 'bob' ]);
like($err, qr/permission denied for function glibc_malloc_statements_reset/, 'bob may not reset');
cmp_ok($small->safe_psql('postgres', "SELECT count(*) FROM glibc_malloc_statements WHERE userid = 'bob'::regrole"),
	'>=', 1, 'and his refused reset removed nothing');
$small->safe_psql('postgres', "SELECT glibc_malloc_statements_reset($alice)");
is($small->safe_psql('postgres', "SELECT count(*) FROM glibc_malloc_statements WHERE userid = $alice"), 0,
	'a superuser\'s reset of one role removes its rows');
cmp_ok($small->safe_psql('postgres', "SELECT count(*) FROM glibc_malloc_statements WHERE userid = 'bob'::regrole"),
	'>=', 1, 'and no other role\'s');
$small->safe_psql('postgres', 'GRANT EXECUTE ON FUNCTION glibc_malloc_statements_reset(oid, oid, bigint) TO bob');
$small->safe_psql('postgres', 'SELECT glibc_malloc_statements_reset()', extra_params => [ '-U', 'bob' ]);
is($small->safe_psql('postgres', "SELECT count(*) FROM glibc_malloc_statements WHERE userid <> 'bob'::regrole"),
	0, 'granted EXECUTE, bob resets everything: no other role\'s rows are left');
is($small->safe_psql('postgres', "SELECT count(*) FROM glibc_malloc_statements WHERE userid = 'bob'::regrole"),
	1, 'and of his, only the reset itself (stored when it ended)');
is($small->safe_psql('postgres', 'SELECT dealloc FROM glibc_malloc_statements_info'), 0, 'and the counters of the info view');
$small->stop;

# compute_query_id = off (PostgreSQL 14+): nothing recorded, counted as such.
SKIP:
{
	skip 'compute_query_id is PostgreSQL 14+', 4 if $pgver < 140000;
	$node->safe_psql('postgres', 'SELECT glibc_malloc_statements_reset()');
	$node->safe_psql('postgres', 'SELECT count(*) AS id_marker FROM pg_am');
	my $before = row_for('SELECT count(*) AS id_marker FROM pg_am');
	is($before && $before->{calls}, 1, 'with a queryid, a statement is counted');
	$node->safe_psql('postgres', 'SET compute_query_id = off; SELECT count(*) AS id_marker FROM pg_am; SELECT count(*) AS id_marker FROM pg_am');
	is(row_for('SELECT count(*) AS id_marker FROM pg_am')->{calls}, 1, 'compute_query_id = off: the same statement run twice more is not');
	cmp_ok($node->safe_psql('postgres', 'SELECT no_queryid FROM glibc_malloc_statements_info'), '>=', 2,
		'the statements are counted as without a queryid');
	like($node->safe_psql('postgres', "SET compute_query_id = off; SELECT action FROM glibc_malloc_doctor() WHERE kind = 'queryids'"),
		qr/^set compute_query_id = on \(a reload is enough\): with it off, no queryid is computed$/,
		'compute_query_id = off, pg_stat_statements loaded: the doctor says to turn it on, nothing else');
}

# PostgreSQL 13: a pg_stat_statements that tracks nothing computes no
# queryids, and the doctor says so (a setting of pg_stat_statements.track
# without the library would be a placeholder: no queryids either).
if ($pgver < 140000)
{
	# In one session: the two reads of no_queryid and the doctor's SELECT
	# between them have no queryid (tracked, they would count 0).
	my ($n1, $action, $n2) = split /\n/, $node->safe_psql('postgres',
		"SET pg_stat_statements.track = none; SELECT no_queryid FROM glibc_malloc_statements_info; SELECT action FROM glibc_malloc_doctor() WHERE kind = 'queryids'; SELECT no_queryid FROM glibc_malloc_statements_info");
	like($action, qr/^load pg_stat_statements .* with pg_stat_statements.track = top or all/, 'PostgreSQL 13, pg_stat_statements.track = none: a queryids row');
	cmp_ok($n2 - $n1, '>=', 2, 'and indeed its statements have no queryid');
}

# track_statements: none records nothing; all records nested statements too.
$node->safe_psql('postgres', q{CREATE FUNCTION inner_sort() RETURNS void LANGUAGE plpgsql AS
	$$ BEGIN PERFORM * FROM t ORDER BY c2 OFFSET 100000; END $$});
$node->safe_psql('postgres', 'SELECT glibc_malloc_statements_reset()');
$node->safe_psql('postgres', 'SELECT count(*) AS track_marker FROM pg_namespace');
$node->safe_psql('postgres', "SET glibc_malloc.track_statements = none; SELECT count(*) AS track_marker FROM pg_namespace; SELECT count(*) AS track_marker FROM pg_namespace");
is(row_for('SELECT count(*) AS track_marker FROM pg_namespace')->{calls}, 1, 'track_statements = none: the statement run twice more is not counted');
$node->safe_psql('postgres', "SET work_mem = '64MB'; SET glibc_malloc.track_statements = 'all'; SET pg_stat_statements.track = 'all'; SELECT inner_sort()");
my $nested = $node->safe_psql('postgres', q{SELECT s.toplevel || '|' || s.max_exec_peak_bytes FROM glibc_malloc_statements s
	JOIN pg_stat_statements p USING (userid, dbid, queryid) WHERE p.query LIKE 'SELECT * FROM t ORDER BY c2%' LIMIT 1});
my ($toplevel, $nested_peak) = split /\|/, $nested;
is($toplevel, 'false', 'track_statements = all: the function\'s statement has a row, not top-level');
cmp_ok($nested_peak // 0, '>', 0.8 * $sort_kb * 1024, 'with its sort\'s memory');
$node->safe_psql('postgres', 'SELECT glibc_malloc_statements_reset()');
$node->safe_psql('postgres', "SET work_mem = '64MB'; SELECT inner_sort()");
$r = row_for('SELECT inner_sort()', ' AND s.toplevel');
cmp_ok($r->{max_exec}, '>', 0.8 * $sort_kb * 1024,
	'with top: the calling statement\'s peak includes the nested sort');

# A statement run while the executor starts (a stable PL/pgSQL function in
# a partitioned table's initial pruning) is nested, not top-level: with
# track_statements = top it has no row, and the outer query has its own.
$node->safe_psql('postgres', q{CREATE TABLE pruned (k int, v text) PARTITION BY LIST (k);
	CREATE TABLE pruned_1 PARTITION OF pruned FOR VALUES IN (1);
	CREATE TABLE pruned_2 PARTITION OF pruned FOR VALUES IN (2);
	CREATE FUNCTION prune_key() RETURNS int STABLE LANGUAGE plpgsql AS
	$$ DECLARE n int; BEGIN SELECT count(*) AS prune_marker INTO n FROM pg_am WHERE amname = 'btree'; RETURN n; END $$});
$node->safe_psql('postgres', 'SELECT glibc_malloc_statements_reset()');
my $pruning = $node->safe_psql('postgres', "SET pg_stat_statements.track = 'all'; SET plan_cache_mode = force_generic_plan;
	EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT * FROM pruned WHERE k = prune_key();
	SELECT count(*) AS prune_outer FROM pruned WHERE k = prune_key()");
like($pruning, qr/Subplans Removed: 1/, 'the function runs in the executor\'s initial pruning');
is($node->safe_psql('postgres', q{SELECT count(*) FROM glibc_malloc_statements s
	JOIN pg_stat_statements p USING (userid, dbid, queryid) WHERE p.query LIKE 'SELECT count(*) AS prune_marker%'}), 0,
	'track_statements = top: the function\'s statement, run while the executor starts, has no row');
ok(row_for('SELECT count(*) AS prune_outer FROM pruned WHERE k = prune_key()', ' AND s.toplevel'),
	'the outer statement has its top-level row');
$node->safe_psql('postgres', "SET glibc_malloc.track_statements = 'all'; SELECT count(*) AS prune_outer FROM pruned WHERE k = prune_key()");
is($node->safe_psql('postgres', q{SELECT string_agg(DISTINCT s.toplevel::text, ',') FROM glibc_malloc_statements s
	JOIN pg_stat_statements p USING (userid, dbid, queryid) WHERE p.query LIKE 'SELECT count(*) AS prune_marker%'}), 'false',
	'track_statements = all: it has a row, not top-level');

# EXECUTE p(f()): f's statement runs while EXECUTE evaluates its
# parameters, before the prepared statement: nested, not top-level (it
# neither waits for memory nor takes a reservation as a statement of its
# own); the prepared statement keeps its top-level row, planned and run.
$node->safe_psql('postgres', q{CREATE FUNCTION param_key() RETURNS int LANGUAGE plpgsql AS
	$$ DECLARE n int; BEGIN SET LOCAL work_mem = '4MB';
	SELECT count(*) AS param_marker INTO n FROM pg_class WHERE relname = 'pg_am'; RETURN n; END $$});
$node->safe_psql('postgres', 'SELECT glibc_malloc_statements_reset()');
is($node->safe_psql('postgres', "SET pg_stat_statements.track = 'all'; SET plan_cache_mode = force_custom_plan;
	PREPARE param_outer(int) AS SELECT count(*) >= 0 AS param_outer FROM pg_am WHERE oid > \$1;
	EXECUTE param_outer(param_key()); EXECUTE param_outer(param_key() + 1)"), "t\nt",
	'EXECUTE with a function in its parameters runs');
is($node->safe_psql('postgres', "SET plan_cache_mode = force_generic_plan;
	PREPARE param_generic(int) AS SELECT count(*) >= 0 AS param_generic FROM pg_namespace WHERE oid > \$1;
	EXECUTE param_generic(param_key()); EXECUTE param_generic(param_key()); EXECUTE param_generic(param_key())"), "t\nt\nt",
	'and with a generic plan (planned once, then started from the cache)');
is($node->safe_psql('postgres', q{SELECT count(*) FROM glibc_malloc_statements s
	JOIN pg_stat_statements p USING (userid, dbid, queryid) WHERE p.query LIKE 'SELECT count(*) AS param_marker%'}), 0,
	'track_statements = top: the statement of the function in EXECUTE\'s parameters (after a SET it runs) has no row');
$r = row_for('PREPARE param_generic(int) AS SELECT count(*) >= $2 AS param_generic FROM pg_namespace WHERE oid > $1', ' AND s.toplevel');
is($r && $r->{calls}, 3, 'the generic prepared statement has its top-level row: 3 runs');
$r = row_for('PREPARE param_outer(int) AS SELECT count(*) >= $2 AS param_outer FROM pg_am WHERE oid > $1', ' AND s.toplevel');
is($r && "$r->{calls}|$r->{plans}", '2|2', 'the prepared statement has its top-level row: 2 runs, 2 plans');
$node->safe_psql('postgres', "SET glibc_malloc.track_statements = 'all'; SET pg_stat_statements.track = 'all';
	PREPARE param_outer(int) AS SELECT count(*) >= 0 AS param_outer FROM pg_am WHERE oid > \$1; EXECUTE param_outer(param_key())");
is($node->safe_psql('postgres', q{SELECT string_agg(DISTINCT s.toplevel::text, ',') FROM glibc_malloc_statements s
	JOIN pg_stat_statements p USING (userid, dbid, queryid) WHERE p.query LIKE 'SELECT count(*) AS param_marker%'}), 'false',
	'track_statements = all: it has a row, not top-level');

# Statements that failed inside a PL/pgSQL EXCEPTION block free their place:
# with track_statements = all, 40 of them in one transaction (more than the
# 16 statements that can run nested) leave the next nested statement recorded.
$node->safe_psql('postgres', 'SELECT glibc_malloc_statements_reset()');
$node->safe_psql('postgres', q{SET glibc_malloc.track_statements = 'all'; SET pg_stat_statements.track = 'all';
	DO $$ BEGIN
	  FOR i IN 1 .. 40 LOOP
	    BEGIN PERFORM 1 / (i - i); EXCEPTION WHEN division_by_zero THEN NULL; END;
	  END LOOP;
	  PERFORM count(*) AS after_errors FROM pg_tablespace;
	END $$});
is($node->safe_psql('postgres', q{SELECT sum(s.calls) FROM glibc_malloc_statements s JOIN pg_stat_statements p USING (userid, dbid, queryid)
	WHERE p.query LIKE 'SELECT count(*) AS after_errors FROM pg_tablespace%'}),
	1, 'after 40 caught errors in one transaction, the next nested statement is still recorded');

# EXPLAIN without ANALYZE runs nothing: no executor peak for it.
SKIP:
{
	skip 'utility statements have no queryid before PostgreSQL 14', 1 if $pgver < 140000;
	$node->safe_psql('postgres', "SET work_mem = '64MB'; EXPLAIN SELECT * FROM t ORDER BY c3");
	is(row_for('EXPLAIN SELECT * FROM t ORDER BY c3')->{exec_measured}, 0, 'EXPLAIN without ANALYZE has no executor peak');
}

# The doctor names the queryid behind a greedy backend's free heap.
my $g = $node->background_psql('postgres');
my $gpid = $g->query_safe("SET glibc_malloc.preset = 'greedy'; SET work_mem = '64MB'; $sort; SELECT pg_backend_pid()");
my $qid = $node->safe_psql('postgres', q{SELECT queryid FROM pg_stat_statements WHERE query = 'SELECT * FROM t ORDER BY a OFFSET $1'}
	  . ($pgver >= 140000 ? ' AND toplevel' : '') . ' LIMIT 1');
my $reason;
ok( wait_for(sub {
			$reason = $node->safe_psql('postgres', "SELECT reason FROM glibc_malloc_doctor() WHERE pid = $gpid AND kind = 'free_heap'");
			$reason =~ /queryid/;
		}, 10),
	'the doctor\'s free-heap row for a greedy backend names a queryid');
like($reason, qr/queryid \Q$qid\E /, 'the seed sort\'s, as pg_stat_statements has it');
$g->quit;

is($node->safe_psql('postgres', "SELECT count(*) FROM glibc_malloc_doctor() WHERE kind = 'preload_order'"), 0,
	'pg_stat_statements listed first: no preload_order advice');

# pg_stat_statements listed after glibc_malloc (as CloudNativePG lists the
# libraries it manages) zeroes a utility statement's queryid before
# glibc_malloc's ProcessUtility hook sees it: glibc_malloc takes it from
# parse analysis, so the statement is recorded either way (PostgreSQL 14
# and later; before, utility statements have no queryid), one in the middle
# of a multi-statement query too, and the doctor has no advice about the
# order.
my $late = new_node('statements_late', "shared_preload_libraries = 'glibc_malloc,pg_stat_statements'\nglibc_malloc.track_statements = top\n");
$late->safe_psql('postgres', 'CREATE EXTENSION pg_stat_statements; CREATE TABLE u (a int)');
$late->safe_psql('postgres', 'CREATE INDEX u_a ON u (a)');
$late->safe_psql('postgres', 'SELECT 1; CREATE INDEX u_a2 ON u (a); SELECT 2');
# The extended protocol and a prepared statement run a copy of the
# analysed statement (pgbench -M extended, -M prepared).
my $script = PostgreSQL::Test::Utils::tempdir() . '/utility.sql';
write_file($script, 'ANALYZE u');
for my $mode ('extended', 'prepared')
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'pgbench', '-n', '-t', '2', '-M', $mode, '-f', $script, $late->connstr('postgres') ],
		'<', \undef, '>', \$out, '2>', \$err) or diag "pgbench -M $mode: $err";
}
SKIP:
{
	skip 'utility statements have no queryid before PostgreSQL 14', 3 if $pgver < 140000;
	is($late->safe_psql('postgres', q{SELECT s.calls FROM glibc_malloc_statements s JOIN pg_stat_statements p USING (userid, dbid, queryid, toplevel) WHERE p.query = 'ANALYZE u'}),
		4, 'and through the extended protocol and prepared statements, as pg_stat_statements counts them');
	is($late->safe_psql('postgres', q{SELECT s.calls FROM glibc_malloc_statements s JOIN pg_stat_statements p USING (userid, dbid, queryid, toplevel) WHERE p.query = 'CREATE INDEX u_a ON u (a)'}),
		1, 'listed after glibc_malloc, pg_stat_statements does not hide CREATE INDEX from it');
	is($late->safe_psql('postgres', q{SELECT s.calls FROM glibc_malloc_statements s JOIN pg_stat_statements p USING (userid, dbid, queryid, toplevel) WHERE p.query = 'CREATE INDEX u_a2 ON u (a)'}),
		1, 'nor one in the middle of a multi-statement query');
}
is($late->safe_psql('postgres', "SELECT count(*) FROM glibc_malloc_doctor() WHERE kind = 'preload_order'"),
	0, 'the doctor has no advice about the order');
$late->stop;

# At the module's defaults (track_statements = none) nothing is recorded,
# nothing counted, and no queryid is asked for.
my $default = new_node('statements_default');
$default->safe_psql('postgres', "SET work_mem = '64MB'; SELECT count(*) FROM generate_series(1, 1000) g");
is($default->safe_psql('postgres', 'SELECT entries || \'|\' || no_queryid FROM glibc_malloc_statements_info'), '0|0',
	'defaults: no statement recorded or counted');
if ($pgver >= 140000)
{
	is($default->safe_psql('postgres', 'SELECT query_id IS NULL FROM pg_stat_activity WHERE pid = pg_backend_pid()'), 't',
		'defaults: no queryid computed (compute_query_id = auto stays off)');
}
is($default->safe_psql('postgres', "SELECT count(*) FROM glibc_malloc_doctor() WHERE kind = 'queryids'"), 0,
	'defaults: the doctor has no queryids row (nothing is asked to be recorded)');

# Recording turned on by a reload alone: no queryids, nothing recorded, and
# the doctor says so and what to do; its advice (14+: compute_query_id = on
# by a reload) makes statements recorded.
$default->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.track_statements = top; SELECT pg_reload_conf()");
ok(wait_for(sub { $default->safe_psql('postgres', 'SHOW glibc_malloc.track_statements') eq 'top' }, 10), 'track_statements = top by a reload');
$default->safe_psql('postgres', "SET work_mem = '64MB'; SELECT count(*) AS reload_marker FROM generate_series(1, 1000) g");
is($default->safe_psql('postgres', 'SELECT count(*) FROM glibc_malloc_statements'), 0, 'turned on by a reload alone: nothing is recorded');
my ($dreason, $daction) = split /\|/, $default->safe_psql('postgres',
	"SELECT reason || '|' || action FROM glibc_malloc_doctor() WHERE kind = 'queryids' AND pid IS NULL AND bytes IS NULL");
like($dreason, qr/track_statements is on in this session, but statements get no queryids: none is recorded/, 'the doctor says no queryids, nothing recorded');
if ($pgver >= 140000)
{
	like($daction, qr/^set compute_query_id = on \(a reload is enough\), or restart the server with glibc_malloc.track_statements on/, 'and to set compute_query_id = on, or restart');
	$default->safe_psql('postgres', "ALTER SYSTEM SET compute_query_id = on; SELECT pg_reload_conf()");
	ok(wait_for(sub { $default->safe_psql('postgres', 'SHOW compute_query_id') eq 'on' }, 10), 'compute_query_id = on by a reload');
	is($default->safe_psql('postgres', "SELECT count(*) FROM glibc_malloc_doctor() WHERE kind = 'queryids'"), 0, 'the doctor\'s row is gone');
	$default->safe_psql('postgres', "SET work_mem = '64MB'; SELECT count(*) AS reload_marker FROM generate_series(1, 1000) g");
	cmp_ok($default->safe_psql('postgres', 'SELECT count(*) FROM glibc_malloc_statements'), '>=', 1,
		'and following it, the statement is recorded');
}
else
{
	like($daction, qr/^load pg_stat_statements/, 'PostgreSQL 13: and to load pg_stat_statements');
}
$default->stop;

# Without pg_stat_statements: queryids from the core (14+) through
# compute_query_id = auto; on 13 none, counted as such.
my $bare = new_node('statements_bare', "glibc_malloc.track_statements = top\n");
$bare->safe_psql('postgres', 'SELECT glibc_malloc_statements_reset()');
$bare->safe_psql('postgres', "SET work_mem = '64MB'; SELECT count(*) FROM generate_series(1, 1000) g");
my ($rows, $noid) = split /\|/, $bare->safe_psql('postgres', 'SELECT (SELECT count(*) FROM glibc_malloc_statements), no_queryid FROM glibc_malloc_statements_info');
if ($pgver >= 140000)
{
	cmp_ok($rows, '>=', 1, 'without pg_stat_statements, statements are recorded (compute_query_id = auto)');
}
else
{
	is($rows, 0, 'PostgreSQL 13 without pg_stat_statements: no queryids, no rows');
	cmp_ok($noid, '>=', 1, 'the statements are counted as without a queryid');
}
is($bare->safe_psql('postgres', "SELECT count(*) FROM glibc_malloc_doctor() WHERE kind = 'queryids'"), $pgver >= 140000 ? 0 : 1,
	'on at start without pg_stat_statements: a doctor\'s queryids row on PostgreSQL 13 only');
$bare->stop;

is($node->safe_psql('postgres', "SELECT count(*) FROM glibc_malloc_doctor() WHERE kind = 'queryids'"), 0,
	'with pg_stat_statements: no queryids row');

# Nothing went wrong in any of the servers.
for my $n ($node, $small, $late, $bare, $default)
{
	unlike(slurp_file($n->logfile), qr/TRAP|PANIC|server process .* was terminated/, $n->name . ': no crash, no assertion failure');
}
$node->stop;
done_testing();
