# The benchmark's --quick mode runs end to end and writes well-formed output:
# a JSON document with every configuration and metric (bench/measure), the
# workloads people run among them (CPU per query and speed, their results
# checked by bench/measure itself), a Markdown report and a PNG chart
# (bench/report).  The reporting part
# renders a committed result again, byte for byte, and prints the demo's
# table.  No timing is asserted: machines here are noisy.
use strict;
use warnings;
use File::Copy;
use FindBin;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my $out = PostgreSQL::Test::Utils::tempdir();
my $bench = "$FindBin::RealBin/../bench/run";
my ($stdout, $stderr);
my $ok = IPC::Run::run([ $bench, '--quick', '--fleet', '4', '--out', $out ], '>', \$stdout, '2>', \$stderr);
ok($ok, 'bench/run --quick exits 0') or diag $stderr;

my ($json) = glob("$out/*.json");
my ($md) = glob("$out/*.md");
my ($png) = glob("$out/*.png");
ok($json && $md && $png, 'it writes .json, .md and .png');

my $r = decode_json(slurp_file($json));
my %c = map { $_->{key} => $_ } @{ $r->{configurations} };
for my $key (qw(glibc module greedy frugal balanced tunables jemalloc tcmalloc))
{
	ok($c{$key}, "configuration $key is present");
	for my $metric (qw(sort_tps hash_tps))
	{
		cmp_ok($c{$key}{$metric}{median} // 0, '>', 0, "$key: $metric median");
		ok(defined $c{$key}{$metric}{ratio}, "$key: $metric ratio against glibc defaults");
	}
	cmp_ok($c{$key}{idle_rss_max} // 0, '>', 0, "$key: largest idle RssAnon");
	cmp_ok($c{$key}{fleet_rss_total} // 0, '>', 0, "$key: fleet RssAnon");
	cmp_ok($c{$key}{busy_rss_total} // 0, '>', 0, "$key: busy-light fleet RssAnon");
	cmp_ok($c{$key}{busy_idle_rss_total} // 0, '>', 0, "$key: busy-light fleet RssAnon once idle");
	ok(defined $c{$key}{syscalls_per_query}, "$key: syscalls per query");
}
cmp_ok($c{$_}{select_tps}{median} // 0, '>', 0, "$_: pgbench -S median") for qw(glibc module greedy frugal balanced publish0 stmtlog nomonitor);
ok(defined $c{$_}{monitor_rounds}, "$_: the memory monitor's rounds are counted") for qw(module greedy frugal balanced nomonitor);
ok(!defined $c{glibc}{monitor_rounds}, 'not where the module is not loaded');
is($c{glibc}{sort_tps}{ratio}, 1, 'ratios are against glibc defaults');
is(scalar @{ $r->{targets} }, 13, 'balanced, publishing and the monitor are checked against their nine targets, the memory guard against off and its A/A control against four');
cmp_ok($r->{trim_floor} // 0, '>', 0, 'the malloc_trim floor is measured');

# The workloads people run: every case in every configuration that runs it.
my @cases = @{ $r->{cases} // [] };
my @at256 = grep { ($_->{work_mem} // '') eq '256MB' } @cases;
is_deeply([ map { $_->{key} } @cases ],
	[ qw(q1_32 q3_32 q5_32 q18_32 window_32 q1_256 q3_256 q5_256 q18_256 window_256 index copy jsonb periodic) ],
	'the workloads people run: TPC-H-like, window at two work_mem, CREATE INDEX, COPY, jsonb, periodic');
sub has_case
{
	my ($key, $case) = @_;
	my $m = $c{$key}{cases}{ $case->{key} };
	# Without schedstat, CPU time comes in clock ticks: a tiny query may take none.
	ok(defined $m->{cpu_ms}{median} && exists $m->{cpu_ms}{ratio}, "$key: $case->{title}: CPU ms per query and its ratio");
	my $speed = $case->{key} eq 'periodic' ? 'latency_ms' : 'qps';
	cmp_ok($m->{$speed}{median} // 0, '>', 0, "$key: $case->{title}: $speed");
	ok(defined $m->{$speed}{ratio}, "$key: $case->{title}: $speed ratio against glibc defaults");
}
for my $key (qw(glibc module greedy frugal balanced tunables jemalloc tcmalloc hugetlb balancedhuge glibc2))
{
	has_case($key, $_) for @cases;
}
for my $key (qw(greedy256 balanced256))
{
	has_case($key, $_) for @at256;
	is_deeply([ sort keys %{ $c{$key}{cases} } ], [ sort map { $_->{key} } @at256 ], "$key runs the 256MB variants only");
}
has_case('balanced5s', $cases[-1]);
is_deeply([ keys %{ $c{balanced5s}{cases} } ], ['periodic'], 'balanced5s runs the periodic workload only');
cmp_ok($c{$_}{cases}{periodic}{idle_rss}{median} // 0, '>', 0, "$_: RssAnon before each periodic query") for qw(glibc greedy balanced balanced5s);
ok(!$c{publish0}{cases}, 'configurations for the overhead only run none of them');
is($c{glibc}{cases}{q1_32}{qps}{ratio}, 1, 'their ratios are against glibc defaults too');
is($r->{design}, 'paired', 'they run paired: every configuration between two queries of the baseline');
cmp_ok($r->{queries_per_configuration}, '>=', 2, 'quick mode measures two queries per configuration, so quartiles differ from medians');
# R's type 7 quantile, to check the benchmark's own.
sub q7
{
	my ($q, @v) = @_;
	@v = sort { $a <=> $b } @v;
	my $i = $q * $#v;
	my $lo = int $i;
	return $lo == $#v ? $v[$lo] : $v[$lo] + ($i - $lo) * ($v[ $lo + 1 ] - $v[$lo]);
}
for my $key (qw(module balanced greedy256 glibc2))
{
	for my $metric (qw(cpu_ms qps))
	{
		my $m = $c{$key}{cases}{q1_256}{$metric};
		my @p = @{ $m->{paired} // [] };
		SKIP:
		{
			# Without schedstat, CPU comes in clock ticks: a tiny query's baseline may take none.
			skip "$key: no CPU ratios (clock ticks)", 3 if $metric eq 'cpu_ms' && !@p && !-e "/proc/self/schedstat";
			is(scalar @p, $r->{queries_per_configuration}, "$key: a paired $metric ratio per measured query");
			ok(@p && abs($m->{ratio} - q7(0.5, @p)) < 1e-9, "$key: its $metric ratio is the median of its paired ratios");
			ok(@p && abs($m->{ratio_q1} - q7(0.25, @p)) < 1e-9 && abs($m->{ratio_q3} - q7(0.75, @p)) < 1e-9,
				"$key: and its quartiles are theirs");
		}
	}
}
ok(!grep({ $c{glibc}{cases}{$_}{qps}{paired} || $c{glibc}{cases}{$_}{latency_ms}{paired} } keys %{ $c{glibc}{cases} }),
	'the baseline has no paired ratios of its own');
ok(defined $c{$_}{monitor_rounds}, "$_: the memory monitor's rounds are counted on its own server") for qw(greedy256 balanced256 balanced5s);
cmp_ok($c{$_}{cases}{q1_256}{idle_after}{median} // 0, '>', 0, "$_: RssAnon once idle after a workload")
  for qw(glibc greedy balanced greedy256);
is(scalar @{ $c{balanced}{cases}{periodic}{latency_ms}{paired} // [] }, $r->{periodic_queries},
	'balanced: a paired latency ratio per periodic tick');

my $report = slurp_file($md);
like($report, qr/^\| configuration \| seed sort TPS \|/m, 'the report has the main table');
like($report, qr/balanced against its targets/, 'and the targets');
like($report, qr/^### Busy-light fleet: 4 connections/m, 'and the busy-light fleet');
like($report, qr/^\| configuration \| Q1 32MB \|.* \| periodic \| geometric mean \| geometric mean, 256MB \|$/m,
	'and the workloads people run, one column each');
like($report, qr/^\| greedy, max_trim_threshold 512MB \| – \|.* \| [\d.n\/a]+ \/ [\d.n\/a]+ \(5\) \| /m,
	'greedy256: the 256MB variants, its geometric mean over them');
like($report, qr/^### Periodic: the seed sort every [\d.]+ s/m, 'and the periodic workload');
like($report, qr/^What a backend keeps once idle: /m, 'and what backends keep once idle');
like($report, qr/^The spread of those ratios, their 25th–75th percentiles/m, 'and the spread of the paired ratios');
like($report, qr/^Quartile width .*: CPU ×[\d.]+, speed ×[\d.]+\. (CPU|speed) spreads less/m, 'and which basis spreads less');
open my $fh, '<:raw', $png or die;
read $fh, my $magic, 8;
is($magic, "\x89PNG\r\n\x1a\n", 'the chart is a PNG');

# Committed results render again as they were committed.
my $results = "$FindBin::RealBin/../bench/results";
my @stems = map { m{([^/]+)\.json$} } glob("$results/*.json");
cmp_ok(scalar @stems, '>=', 4, 'the committed results are here to render');
for my $stem (@stems)
{
	my $copy = "$out/again-$stem";
	mkdir $copy;
	File::Copy::copy("$results/$stem.json", "$copy/$stem.json") or die;
	ok(IPC::Run::run([ "$FindBin::RealBin/../bench/report", "$copy/$stem.json" ], '>', \$stdout, '2>', \$stderr),
		"bench/report renders the committed $stem.json") or diag $stderr;
	is(slurp_file("$copy/$stem.md"), slurp_file("$results/$stem.md"), "into the committed $stem.md");
}

# --one-server: the configurations at once, on one server pinned to one CPU,
# each as its own role: every round the server sees them all, and only the
# recording ones leave rows.  The TPC-B-like script runs there too, one
# client per configuration with synchronous_commit = off.
SKIP:
{
	my @cpus = split /,/, ((`taskset -cp $$ 2>/dev/null` =~ /:\s*(\S+)\s*$/)[0] // '');
	my ($pgmajor) = `pg_config --version` =~ /(\d+)/;
	skip 'bench/measure --one-server needs taskset and 2 CPUs', 9 unless @cpus && (`nproc` + 0) >= 2;
	skip 'bench/measure --one-server needs PostgreSQL 14 (compute_query_id)', 9 unless ($pgmajor // 0) >= 14;
	my $one = "$out/one";
	mkdir $one;
	ok(IPC::Run::run([ "$FindBin::RealBin/../bench/run", '--out', $one, '--one-server', '--only', 'select,tpcb,distinct',
				'--configs', 'module,stmts,stmts2', '--rounds', '2', '--seconds', '2' ],
			'>', \$stdout, '2>', \$stderr),
		'bench/run --one-server exits 0 (its baseline: module)') or diag $stderr;
	my ($j) = glob("$one/*.json");
	my ($m) = glob("$one/*.md");
	my $o = $j ? decode_json(slurp_file($j)) : {};
	my %oc = map { $_->{key} => $_ } @{ $o->{configurations} // [] };
	is($o->{baseline}, 'module', 'the baseline is the module at its defaults');
	is_deeply($o->{roles_seen_together}, [ (3) x 6 ], 'every round and workload, the server had the three roles\' sessions at once');
	ok(!$o->{rows_per_role}{module} && ($o->{rows_per_role}{stmts} // 0) > 0 && ($o->{rows_per_role}{stmts2} // 0) > 0,
		'only the recording configurations\' roles have rows') or diag explain $o->{rows_per_role};
	ok(defined $o->{pinned}{server} && ($o->{pinned}{postmaster} // '') eq $o->{pinned}{server}, 'the postmaster ran on the server\'s CPU only');
	ok(%oc && !grep({ my $c = $_; grep { scalar @{ $oc{$c}{"${_}_tps"}{rounds} // [] } != 2 } qw(select tpcb distinct) } qw(module stmts stmts2)),
		'every configuration has a TPS per round and workload');
	ok(defined $oc{module}{monitor_rounds}, 'the memory monitor\'s rounds are counted on the one server');
	like($m ? slurp_file($m) : '', qr/^One server \(`--one-server`\), on CPU \d+/m, 'the report says how it ran');
	like($m ? slurp_file($m) : '', qr/^### Read-write OLTP: .*one client per configuration, synchronous_commit = off in every session/m,
		'and how the TPC-B-like script ran');
}

# --one-cpu: a server per configuration, all on that one CPU, every
# round's pgbench at once, each against its own server.
SKIP:
{
	my @cpus = split /,/, ((`taskset -cp $$ 2>/dev/null` =~ /:\s*(\S+)\s*$/)[0] // '');
	skip 'bench/measure --one-cpu needs taskset and 2 CPUs', 4 unless @cpus && (`nproc` + 0) >= 2;
	my $dir = "$out/onecpu";
	mkdir $dir;
	ok(IPC::Run::run([ "$FindBin::RealBin/../bench/run", '--out', $dir, '--one-cpu', '--only', 'select',
				'--configs', 'balanced,noguard', '--baseline', 'balanced', '--rounds', '2', '--seconds', '2' ],
			'>', \$stdout, '2>', \$stderr),
		'bench/run --one-cpu exits 0') or diag $stderr;
	my ($j) = glob("$dir/*.json");
	my ($m) = glob("$dir/*.md");
	my $o = $j ? decode_json(slurp_file($j)) : {};
	my %oc = map { $_->{key} => $_ } @{ $o->{configurations} // [] };
	is_deeply($o->{servers_seen_together}, [ 2, 2 ], 'every round, both servers had their pgbench\'s session at once');
	ok(%oc && !grep({ scalar @{ $oc{$_}{select_tps}{rounds} // [] } != 2 } qw(balanced noguard)),
		'every configuration has a TPS per round');
	like($m ? slurp_file($m) : '', qr/^One CPU \(`--one-cpu`\): a server per configuration/m, 'the report says how it ran');
}

# The demo's table, from the same JSON.
ok(IPC::Run::run([ "$FindBin::RealBin/../bench/report", '--text', $json ], '>', \$stdout, '2>', \$stderr),
	'bench/report --text runs') or diag $stderr;
like($stdout, qr/^preset\s+seed sort TPS, median \(min-max\)/m, 'the demo table has its header');
like($stdout, qr/^$_\s+[\d.]+ \([\d.]+-[\d.]+\)\s+[\d.]+\s+[\d.]+\s+[\d.]+ MB$/m, "and a full line for $_") for qw(greedy frugal balanced);

done_testing();
