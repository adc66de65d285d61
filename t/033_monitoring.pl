# The monitoring that ships with the module works and names only what
# exists: the alert rules pass `promtool check rules` and their unit tests
# (`promtool test rules`); every metric the rules and the Grafana dashboard
# query is one the exporter file exports (<query name>_<column>), and each
# of the exporter file's queries returns the columns it declares, on a real
# server; the runbook has a section for each alert, its SQL runs, and the
# views, columns, functions, settings and metrics it names exist.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = "$FindBin::RealBin/..";
my $mon = "$root/monitoring";

# The exporter file: query name => [ [column, usage], ... ] and its SQL.
my (%columns, %query, $ns);
for my $line (split /\n/, slurp_file("$root/tools/glibc_malloc_exporter.yaml"))
{
	if ($line =~ /^(\w+):\s*$/) { $ns = $1; $columns{$ns} = []; $query{$ns} = ''; next }
	next unless defined $ns;
	if ($line =~ /^    - (\w+):\s*$/) { push @{ $columns{$ns} }, [ $1, undef ]; next }
	if ($line =~ /^\s+usage:\s*"(\w+)"/) { $columns{$ns}[-1][1] = $1; next }
	$query{$ns} .= "$line\n" if $line =~ /^ {4}/ && !@{ $columns{$ns} };
}
my %exported;
for my $q (keys %columns)
{
	for my $c (@{ $columns{$q} })
	{
		ok(defined $c->[1], "exporter: $q.$c->[0] has a usage");
		$exported{"${q}_$c->[0]"} = $c->[1] if ($c->[1] // 'LABEL') ne 'LABEL';
	}
}
cmp_ok(scalar(keys %exported), '>=', 40, 'the exporter file exports metrics (' . scalar(keys %exported) . ')');
is($exported{glibc_malloc_counters_oom_errors}, 'COUNTER', 'glibc_malloc_counters_oom_errors is a counter');
# The exporter's own metric, besides the file's.
my %builtin = (pg_up => 1);

# The metric names in a PromQL expression: identifiers that are not in
# strings, label matchers or ranges, not functions, keywords or the label
# lists of by/without/on/ignoring/group_*.
my %keyword = map { $_ => 1 } qw(by without on ignoring group_left group_right and or unless offset bool);
sub promql_metrics
{
	my ($expr) = @_;
	$expr =~ s/"(?:[^"\\]|\\.)*"//g;
	$expr =~ s/\{[^}]*\}//g;
	$expr =~ s/\[[^\]]*\]//g;
	$expr =~ s/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)//g;
	$expr =~ s/\$\w+//g;
	my @names;
	while ($expr =~ /(?<![\w.])([a-zA-Z_:][\w:]*)(\s*\()?/g)
	{
		next if $2 || $keyword{$1};
		push @names, $1;
	}
	return @names;
}

# 1. The alert rules.
my $rules_file = "$mon/glibc_malloc_alerts.yaml";
my $rules = slurp_file($rules_file);
my @alerts = $rules =~ /^\s+- alert: (\w+)$/mg;
is_deeply([ sort @alerts ],
	[ sort qw(GlibcMallocOutOfMemoryErrors GlibcMallocGuardEngaged GlibcMallocFreeHeapHigh GlibcMallocMonitorDown GlibcMallocMetricsMissing) ],
	'the rules: OOM errors, guard engaged, free heap, monitor down, metrics missing');
my @rule_exprs = $rules =~ /^\s+expr: (.+)$/mg;
is(scalar @rule_exprs, scalar @alerts, 'each alert has a one-line expression');
for my $expr (@rule_exprs)
{
	my @m = promql_metrics($expr);
	ok(@m, "rule \"$expr\" queries metrics");
	ok($exported{$_} || $builtin{$_}, "rule: $_ is exported") for @m;
}
like($rules, qr/increase\(glibc_malloc_counters_oom_errors\[/, 'the OOM rule takes the increase of a counter');

my $promtool = `sh -c 'command -v promtool'`;
chomp $promtool;
SKIP:
{
	skip 'promtool is not installed (Debian: the prometheus package; scripts/deps installs it)', 4 unless $promtool;
	my ($out, $err) = ('', '');
	ok(IPC::Run::run([ $promtool, 'check', 'rules', $rules_file ], '>', \$out, '2>', \$err),
		'promtool check rules passes') or diag "$out$err";
	like($out, qr/SUCCESS: 5 rules found/, 'and finds the five rules');
	($out, $err) = ('', '');
	ok(IPC::Run::run([ $promtool, 'test', 'rules', "$mon/glibc_malloc_alerts_test.yaml" ], '>', \$out, '2>', \$err),
		'promtool test rules passes: each alert fires when it should and only then') or diag "$out$err";
	like($out, qr/SUCCESS/, 'promtool says SUCCESS');
}
# Each alert is unit-tested.
my $unit = slurp_file("$mon/glibc_malloc_alerts_test.yaml");
like($unit, qr/alertname: $_\n\s+exp_alerts:\n\s+- exp_labels/, "the unit tests see $_ fire") for @alerts;

# 2. The dashboard: every query names exported metrics only.
my $dash = decode_json(slurp_file("$mon/glibc_malloc_dashboard.json"));
my (@exprs, %panel_has_target);
sub walk
{
	my ($node, $panel) = @_;
	if (ref $node eq 'HASH')
	{
		$panel = $node->{title} if exists $node->{gridPos};
		if (defined $node->{expr}) { push @exprs, $node->{expr}; $panel_has_target{$panel} = 1 if defined $panel }
		push @exprs, $node->{definition} if defined $node->{definition};
		push @exprs, $node->{query}{query} if ref $node->{query} eq 'HASH' && defined $node->{query}{query};
		walk($node->{$_}, $panel) for sort keys %$node;
	}
	elsif (ref $node eq 'ARRAY')
	{
		walk($_, $panel) for @$node;
	}
}
walk($dash, undef);
my @panels = grep { exists $_->{gridPos} } @{ $dash->{panels} };
cmp_ok(scalar @panels, '>=', 8, 'the dashboard has panels (' . scalar(@panels) . ')');
ok($panel_has_target{ $_->{title} }, "dashboard panel \"$_->{title}\" has a query") for @panels;
my %dash_metrics;
for my $expr (@exprs)
{
	(my $e = $expr) =~ s/^label_values\((\w+),\s*\w+\)$/$1/;
	my @m = promql_metrics($e);
	ok(@m, "dashboard query \"$expr\" names a metric");
	$dash_metrics{$_}++ for @m;
}
ok($exported{$_}, "dashboard: $_ is exported by tools/glibc_malloc_exporter.yaml") for sort keys %dash_metrics;
ok($dash_metrics{$_}, "the dashboard shows $_") for qw(glibc_malloc_counters_oom_errors glibc_malloc_guard_engaged
  glibc_malloc_monitor_total_free_bytes glibc_malloc_monitor_running);
unlike(join("\n", @exprs), qr/rate\(glibc_malloc_backends_/, 'no rate() of a sum over live backends (a gauge)');

# 3. A real server: the exporter file's queries return the columns they
# declare, and the runbook's SQL runs and names what exists.
my $node = new_node('monitoring', "shared_preload_libraries = 'pg_stat_statements,glibc_malloc'\n"
	  . "glibc_malloc.track_statements = top\n");
$node->safe_psql('postgres', 'CREATE EXTENSION pg_stat_statements');
my $pgver = $node->safe_psql('postgres', 'SHOW server_version_num');

sub psql_header
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ 'psql', '-X', '-A', '-F', '|', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-c', $sql ],
		'>', \$out, '2>', \$err);
	return ($ok, (split /\n/, $out)[0] // '', $err);
}

for my $q (sort keys %query)
{
	my ($ok, $header, $err) = psql_header($query{$q});
	ok($ok, "exporter query $q runs") or diag $err;
	is_deeply([ sort split /\|/, $header ], [ sort map { $_->[0] } @{ $columns{$q} } ],
		"exporter query $q returns exactly the columns it declares");
}

# Every numeric or boolean column of a view a query reads is exported
# (the query names it), or is listed here with the reason it is not: a
# column a new version adds cannot be forgotten.
my $group = 'the top ten keep calls, the largest and mean peaks, heap growths, errors and waits; the rest is in the view';
my %not_exported = (
	'glibc_malloc_backends.pid' => 'per-pid series would grow without bound',
	'glibc_malloc_backends.mmapped_bytes' => 'counted in system_bytes (heap and mmapped chunks)',
	'glibc_malloc_backends.system_bytes' => 'exported for all backends as glibc_malloc_summary_system_bytes',
	'glibc_malloc_guard.limit_bytes' => "the monitor's, exported as glibc_malloc_monitor_limit_bytes",
	'glibc_malloc_guard.usage_bytes' => "the monitor's, exported as glibc_malloc_monitor_usage_bytes",
	'glibc_malloc_monitor.enabled' => 'the setting glibc_malloc.memory_monitor; running says whether the monitor runs',
	'glibc_malloc_monitor.fraction' => 'the setting glibc_malloc.monitor_fraction',
	'glibc_malloc_monitor.max_total_free_bytes' => 'the setting glibc_malloc.max_total_free',
	map { ("glibc_malloc_statements.$_" => $group) } qw(plans min_plan_peak_bytes mean_plan_peak_bytes
	  stddev_plan_peak_bytes exec_measured min_exec_peak_bytes stddev_exec_peak_bytes heap_change_bytes
	  mmapped_change_bytes max_heap_growth_bytes limit_oom_errors));
my %numeric_col;
for my $row (split /\n/, $node->safe_psql('postgres', q{
	SELECT c.relname || '|' || a.attname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
	WHERE c.relname LIKE 'glibc\_malloc\_%' AND c.relkind = 'v' AND a.attnum > 0 AND NOT a.attisdropped
	  AND a.atttypid IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype, 'float4'::regtype,
	                     'float8'::regtype, 'numeric'::regtype, 'bool'::regtype)}))
{
	my ($v, $c) = split /\|/, $row;
	push @{ $numeric_col{$v} }, $c;
}
my %read_by;
for my $q (sort keys %query)
{
	my ($v) = $query{$q} =~ /\bFROM\s+(glibc_malloc_\w+)/;
	ok($v && $numeric_col{$v}, "exporter query $q reads a view of the extension") or next;
	push @{ $read_by{$v} }, $q;
}
for my $v (qw(glibc_malloc_guard glibc_malloc_monitor glibc_malloc_counters glibc_malloc_statements))
{
	ok($read_by{$v}, "the exporter file reads $v");
}
for my $v (sort keys %read_by)
{
	my $sql = join "\n", map { $query{$_} } @{ $read_by{$v} };
	for my $c (sort @{ $numeric_col{$v} })
	{
		my $named = $sql =~ /\b\Q$c\E\b/;
		my $reason = $not_exported{"$v.$c"};
		ok($named || $reason, "$v.$c is exported by @{ $read_by{$v} }" . ($reason ? " or is not: $reason" : ''));
		ok(!($named && $reason), "$v.$c is exported: drop it from the list of columns not exported") if $reason;
	}
}
for my $vc (sort keys %not_exported)
{
	my ($v, $c) = split /\./, $vc;
	ok(grep({ $_ eq $c } @{ $numeric_col{$v} // [] }), "not exported: $vc is a numeric column of the catalog");
}
# The columns 1.7 added, by name.
like($query{glibc_malloc_guard}, qr/\b$_\b/, "glibc_malloc_guard's query exports $_")
  for qw(reserve_bytes reserve_shrunk oom_kills oom_group_kills waits wait_time admissions wait_timeouts wait_skips unreserved_runs);
like($query{glibc_malloc_monitor}, qr/\bcommit_headroom_bytes\b/, "glibc_malloc_monitor's query exports commit_headroom_bytes");
like($query{glibc_malloc_statements_top}, qr/\b$_\b/, "glibc_malloc_statements_top's query exports $_") for qw(waits wait_time);
is($exported{"glibc_malloc_guard_$_"}, 'COUNTER', "glibc_malloc_guard_$_ is a counter")
  for qw(oom_kills oom_group_kills waits wait_time_seconds admissions wait_timeouts wait_skips unreserved_runs);
is($exported{"glibc_malloc_guard_$_"}, 'GAUGE', "glibc_malloc_guard_$_ is a gauge") for qw(reserve_bytes reserve_shrunk);
is($exported{glibc_malloc_monitor_commit_headroom_bytes}, 'GAUGE', 'glibc_malloc_monitor_commit_headroom_bytes is a gauge');
is($exported{"glibc_malloc_statements_top_$_"}, 'COUNTER', "glibc_malloc_statements_top_$_ is a counter") for qw(waits wait_time_seconds);

my $runbook = slurp_file("$root/docs/runbook.md");
for my $a (@alerts)
{
	like($runbook, qr/^## $a$/m, "the runbook has a section for $a");
	like($rules, qr/- alert: $a\n(?:.*\n){1,12}?\s+runbook: "docs\/runbook\.md#\L$a\E"/, "$a links to its section");
}
for my $a ($runbook =~ /^## (\w+)$/mg)
{
	ok((grep { $_ eq $a } @alerts), "runbook section $a is an alert of the rules");
}
my @blocks = $runbook =~ /```sql\n(.*?)```/sg;
cmp_ok(scalar @blocks, '>=', 10, 'the runbook has queries (' . scalar(@blocks) . ')');
for my $sql (@blocks)
{
	my $short = substr($sql =~ s/\s+/ /gr, 0, 60);
	if ($pgver < 140000 && $sql =~ /\btoplevel\b/)
	{
		note "skipping \"$short\": pg_stat_statements 13 has no toplevel";
		next;
	}
	my ($ok, $header, $err) = psql_header($sql);
	ok($ok, "runbook: \"$short...\" runs") or diag $err;
}

# The names the runbook and the dashboard use: glibc_malloc_* are views,
# functions or exported metrics; glibc_malloc.* are settings; other
# backticked snake_case names are a column of a glibc_malloc view or of
# pg_stat_activity, a setting, a role, or a relation of the server.
my %view_col;
for my $row (split /\n/, $node->safe_psql('postgres', q{
	SELECT c.relname || '|' || a.attname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
	WHERE (c.relname LIKE 'glibc\_malloc\_%' OR c.relname = 'pg_stat_activity') AND c.relkind = 'v'
	  AND a.attnum > 0 AND NOT a.attisdropped}))
{
	my ($v, $c) = split /\|/, $row;
	$view_col{$v}{$c} = 1;
}
my %column = map { %$_ } values %view_col;
my %object = map { $_ => 1 } split /\n/, $node->safe_psql('postgres', q{
	SELECT relname FROM pg_class WHERE relname LIKE 'glibc\_malloc\_%' OR relnamespace = 'pg_catalog'::regnamespace
	   OR relname LIKE 'pg\_stat\_statements%'
	UNION SELECT proname FROM pg_proc WHERE proname LIKE 'glibc\_malloc\_%'});
my %setting = map { $_ => 1 } split /\n/, $node->safe_psql('postgres', 'SELECT name FROM pg_settings');
$object{glibc_malloc} = 1;	# the extension
my %role = map { $_ => 1 } split /\n/, $node->safe_psql('postgres', 'SELECT rolname FROM pg_roles');
ok($view_col{glibc_malloc_counters}{oom_errors}, 'the catalog lists glibc_malloc_counters.oom_errors');

my $dash_text = slurp_file("$mon/glibc_malloc_dashboard.json");
for my $doc ([ 'runbook', $runbook ], [ 'dashboard', $dash_text ])
{
	my ($what, $text) = @$doc;
	my %seen;
	for my $name ($text =~ /\b(glibc_malloc_\w+)(?![\w.]*\.(?:yaml|json|md))/g)
	{
		next if $seen{$name}++;
		ok($object{$name} || $exported{$name}, "$what: $name is a view, a function or an exported metric");
	}
	for my $name ($text =~ /\b(glibc_malloc\.\w+)/g)
	{
		next if $seen{$name}++;
		ok($setting{$name}, "$what: setting $name exists");
	}
	for my $name ($text =~ /`([a-z][a-z0-9]*_[a-z0-9_]*)`/g)
	{
		next if $seen{$name}++ || $name =~ /^glibc_malloc_/;
		ok($column{$name} || $setting{$name} || $role{$name} || $object{$name} || $builtin{$name} || $exported{$name},
			"$what: `$name` is a view's column, a setting, a role or a relation");
	}
}
# Columns named as a view's: "`column` of the view `view`".
while ($runbook =~ /`(\w+)` of the view\s+`(\w+)`/g)
{
	ok($view_col{$2}{$1}, "runbook: $2 has a column $1");
}
for my $f ($runbook =~ /\]\(\.\.\/([\w\/.-]+)\)/g)
{
	ok(-f "$root/$f", "the runbook links to $f, which exists");
}

$node->stop;
done_testing();
