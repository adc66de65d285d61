# The benchmark's --quick mode runs end to end and writes well-formed output:
# a JSON document with every configuration and metric (bench/measure), a
# Markdown report and a PNG chart (bench/report).  The reporting part
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
is(scalar @{ $r->{targets} }, 9, 'balanced, publishing and the monitor are checked against their nine targets');
cmp_ok($r->{trim_floor} // 0, '>', 0, 'the malloc_trim floor is measured');

my $report = slurp_file($md);
like($report, qr/^\| configuration \| seed sort TPS \|/m, 'the report has the main table');
like($report, qr/balanced against its targets/, 'and the targets');
like($report, qr/^### Busy-light fleet: 4 connections/m, 'and the busy-light fleet');
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

# The demo's table, from the same JSON.
ok(IPC::Run::run([ "$FindBin::RealBin/../bench/report", '--text', $json ], '>', \$stdout, '2>', \$stderr),
	'bench/report --text runs') or diag $stderr;
like($stdout, qr/^preset\s+seed sort TPS, median \(min-max\)/m, 'the demo table has its header');
like($stdout, qr/^$_\s+[\d.]+ \([\d.]+-[\d.]+\)\s+[\d.]+\s+[\d.]+\s+[\d.]+ MB$/m, "and a full line for $_") for qw(greedy frugal balanced);

done_testing();
