# The shipped queries file for prometheus-postgres-exporter: the real
# exporter, on loopback, against a throwaway cluster, scraped over HTTP; the
# glibc_malloc metrics are there, with the values of the view, and the
# counters do not drop when a backend exits.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use HTTP::Tiny;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $exporter = '/usr/bin/prometheus-postgres-exporter';
plan skip_all => 'prometheus-postgres-exporter is not installed (scripts/deps installs it)' unless -x $exporter;

my $node = new_node('exporter', "glibc_malloc.stats_interval = 0\nwork_mem = 32MB\n"
	  . "shared_preload_libraries = 'pg_stat_statements,glibc_malloc'\nglibc_malloc.track_statements = top\n");
$node->safe_psql('postgres', q{
	CREATE ROLE alice LOGIN;
	CREATE ROLE exporter LOGIN IN ROLE pg_monitor;
	GRANT USAGE ON SCHEMA public TO exporter;
});

# One idle backend of alice's, greedy after two big sorts: it keeps free heap.
my $a = $node->background_psql('postgres', extra_params => [ '-U', 'alice' ]);
my $big_sort = workload('big_sort');
my $apid = $a->query_safe("SET glibc_malloc.preset = 'greedy'; $big_sort; $big_sort; SELECT pg_backend_pid()");
my $admin = $node->background_psql('postgres');
my %view;
ok( wait_for(sub {
			# Always one row: old BackgroundPsql versions misreport an empty result.
			my $r = $admin->query_safe("SELECT coalesce((SELECT free_bytes || '|' || rss_anon_bytes || '|' || cache_bytes FROM glibc_malloc_backends WHERE pid = $apid AND snapshot_age > interval '0.3 s'), 'none')");
			@view{qw(free rss cache)} = split /\|/, $r;
			$r =~ /^\d+\|\d+\|\d+$/;
		}, 5),
	'alice\'s backend has published and is idle');

# The exporter, as the monitoring role.
my $port = PostgreSQL::Test::Cluster::get_free_port();
my $queries = "$FindBin::RealBin/../tools/glibc_malloc_exporter.yaml";
local $ENV{DATA_SOURCE_NAME} = sprintf('host=%s port=%d user=exporter dbname=postgres sslmode=disable', $node->host, $node->port);
my ($out, $err) = ('', '');
my $h = IPC::Run::start([ $exporter, "--web.listen-address=127.0.0.1:$port", "--extend.query-path=$queries",
	'--disable-settings-metrics' ], '>', \$out, '2>', \$err);

my $metrics = '';
my $http = HTTP::Tiny->new(timeout => 5);
ok( wait_for(sub {
			my $res = $http->get("http://127.0.0.1:$port/metrics");
			$metrics = $res->{success} ? $res->{content} : '';
			$metrics =~ /^glibc_malloc_backends_free_bytes\{[^}]*usename="alice"/m;
		}, 15),
	'the exporter serves glibc_malloc metrics on /metrics') or diag $err;

# The value of one series, by name and labels.
sub metric
{
	my ($name, %labels) = @_;
	for my $line (split /\n/, $metrics)
	{
		next unless $line =~ /^\Q$name\E(?:\{([^}]*)\})?\s+(\S+)$/;
		my ($l, $v) = ($1 // '', $2);
		next if grep { $l !~ /\b\Q$_\E="\Q$labels{$_}\E"/ } keys %labels;
		return $v + 0;
	}
	return undef;
}

my %alice = (backend_type => 'client backend', usename => 'alice');
is(metric('glibc_malloc_backends_backends', %alice), 1, 'one client backend of alice\'s');
is(metric('glibc_malloc_backends_free_bytes', %alice), $view{free}, 'its free_bytes as in the view');
is(metric('glibc_malloc_backends_rss_anon_bytes', %alice), $view{rss}, 'its rss_anon_bytes as in the view');
is(metric('glibc_malloc_backends_cache_bytes', %alice), $view{cache}, 'its cache_bytes as in the view');
cmp_ok($view{free}, '>', 2**20, 'and those are real figures: the greedy backend keeps free heap');
for my $m (qw(backends system_bytes in_use_bytes free_bytes rss_anon_bytes context_bytes cache_bytes idle_released_bytes remote_trimmed_bytes))
{
	my $v = metric("glibc_malloc_summary_$m");
	ok(defined $v && $v >= 0, "glibc_malloc_summary_$m is exported");
}
cmp_ok(metric('glibc_malloc_summary_free_bytes'), '>=', $view{free}, 'the summary includes alice\'s free heap');
cmp_ok(metric('glibc_malloc_summary_backends'), '>=', 3, 'and counts the backends the monitoring role sees (pg_monitor)');
my ($limit, $source) = split /\|/, $node->safe_psql('postgres', 'SELECT limit_bytes, source FROM glibc_malloc_monitor');
is(metric('glibc_malloc_monitor_limit_bytes', source => $source), $limit, "the memory monitor's limit as in its view ($source)");
ok(defined metric('glibc_malloc_monitor_rounds', source => $source), "and its rounds");
for my $m (qw(enabled engaged limited_processes guard_errors max_backend_memory_errors))
{
	is(metric("glibc_malloc_guard_$m"), $node->safe_psql('postgres', "SELECT ${m}::int FROM glibc_malloc_guard"),
		"glibc_malloc_guard_$m as in the view");
}
# The columns 1.7 added: as in the view, the times in seconds; a count the
# kernel does not keep here (oom_kills, oom_group_kills NULL) is NaN, and
# the scrape does not fail.
my %g;
@g{qw(reserve_bytes reserve_shrunk oom_kills oom_group_kills waits wait_time admissions wait_timeouts wait_skips unreserved_runs would_limit would_fail reservations_returned mode)} = split /\|/,
  $node->safe_psql('postgres', 'SELECT coalesce(reserve_bytes, 0), coalesce(reserve_shrunk, false)::int, oom_kills, oom_group_kills, waits, wait_time, admissions, wait_timeouts, wait_skips, unreserved_runs, would_limit, would_fail, reservations_returned, mode FROM glibc_malloc_guard'),
  -1;
for my $m (qw(reserve_bytes reserve_shrunk waits admissions wait_timeouts wait_skips unreserved_runs would_limit would_fail reservations_returned))
{
	is(metric("glibc_malloc_guard_$m"), $g{$m}, "glibc_malloc_guard_$m as in the view");
}
is(metric('glibc_malloc_guard_wait_time_seconds'), $g{wait_time} / 1000, 'glibc_malloc_guard_wait_time_seconds: the view\'s wait_time (ms) in seconds');
for my $m (qw(oom_kills oom_group_kills))
{
	my ($v) = $metrics =~ /^glibc_malloc_guard_$m(?:\{[^}]*\})? (\S+)$/m;
	if ($g{$m} eq '')
	{
		is($v, 'NaN', "glibc_malloc_guard_$m: NaN, as the view has no count here");
	}
	else
	{
		is($v, $g{$m}, "glibc_malloc_guard_$m as in the view");
	}
}
for my $m (qw(oom_kills oom_group_kills waits wait_time_seconds admissions wait_timeouts wait_skips unreserved_runs would_limit would_fail reservations_returned))
{
	like($metrics, qr/^# TYPE glibc_malloc_guard_$m counter$/m, "glibc_malloc_guard_$m is typed counter");
}
# The budget's shares (1.8), a query of their own: as in the view, counters.
{
	my @names = qw(start_shares executor_asks executor_shares);
	my @b = split /\|/, $node->safe_psql('postgres', 'SELECT ' . join(', ', @names) . ' FROM glibc_malloc_guard');
	for my $i (0 .. $#names)
	{
		is(metric("glibc_malloc_budget_$names[$i]"), $b[$i], "glibc_malloc_budget_$names[$i] as in the view");
		like($metrics, qr/^# TYPE glibc_malloc_budget_$names[$i] counter$/m, "glibc_malloc_budget_$names[$i] is typed counter");
	}
}
# The guard's mode: four series, 1 for the view's mode (cgroup, the
# default), not a label of the guard's other series.
is($g{mode}, 'cgroup', 'the guard runs in its default mode, cgroup');
for my $mode (qw(off cgroup machine observe))
{
	is(metric('glibc_malloc_guard_mode_active', mode => $mode), $mode eq $g{mode} ? 1 : 0,
		"glibc_malloc_guard_mode_active{mode=\"$mode\"}: " . ($mode eq $g{mode} ? 1 : 0));
}
unlike($metrics, qr/^glibc_malloc_guard_waits\{[^}]*mode=/m, 'the guard\'s counters have no mode label');
# Not engaged here: the headroom is NaN, not 0 (0 would say "no room").
is($node->safe_psql('postgres', 'SELECT engaged FROM glibc_malloc_guard'), 'f', 'the guard is not engaged');
my ($hr) = $metrics =~ /^glibc_malloc_guard_headroom_bytes(?:\{[^}]*\})? (\S+)$/m;
is($hr, 'NaN', 'glibc_malloc_guard_headroom_bytes is NaN while the guard is not engaged');
my $target = $node->safe_psql('postgres', 'SELECT target_bytes FROM glibc_malloc_guard');
my ($mt) = $metrics =~ /^glibc_malloc_guard_target_bytes(?:\{[^}]*\})? (\S+)$/m;
is($mt, $target eq '' ? 'NaN' : $target + 0 == $mt ? $mt : $target,
	'glibc_malloc_guard_target_bytes as in the view, NaN where the guard does not cover the limit (view: ' . ($target eq '' ? 'NULL' : $target) . ')');
# The monitor is on by setting: MonitorDown's condition.
is(metric('glibc_malloc_monitor_enabled', source => $source), 1, 'glibc_malloc_monitor_enabled is 1 (glibc_malloc.memory_monitor = on)');
is(metric('glibc_malloc_monitor_running', source => $source), 1, 'and glibc_malloc_monitor_running is 1');
my $headroom = $node->safe_psql('postgres', 'SELECT commit_headroom_bytes FROM glibc_malloc_monitor');
my ($mh) = $metrics =~ /^glibc_malloc_monitor_commit_headroom_bytes(?:\{[^}]*\})? (\S+)$/m;
ok(defined $mh && ($headroom eq '' ? $mh eq 'NaN' : abs($mh - $headroom) < 2**30),
	"glibc_malloc_monitor_commit_headroom_bytes is exported (view: $headroom, scraped: " . ($mh // 'none') . ')');

# The top statements by executor memory: alice's big sort among them, with
# the view's figures, and never more than ten.
my ($qid, $peak, $calls) = split /\|/, $node->safe_psql('postgres',
	"SELECT queryid, max_exec_peak_bytes, calls FROM glibc_malloc_statements WHERE userid = 'alice'::regrole ORDER BY max_exec_peak_bytes DESC NULLS LAST LIMIT 1");
ok($qid, 'alice\'s big sort has a row in glibc_malloc_statements');
is(metric('glibc_malloc_statements_top_max_exec_peak_bytes', queryid => $qid, usename => 'alice'), $peak,
	'glibc_malloc_statements_top_max_exec_peak_bytes of its queryid as in the view');
is(metric('glibc_malloc_statements_top_calls', queryid => $qid), $calls, 'and its calls');
is(metric('glibc_malloc_statements_top_waits', queryid => $qid), 0, 'and its waits for memory (none: no guard engaged)');
is(metric('glibc_malloc_statements_top_wait_time_seconds', queryid => $qid), 0, 'and the time they took');
my $series = () = $metrics =~ /^glibc_malloc_statements_top_max_exec_peak_bytes\{/mg;
cmp_ok($series, '>=', 1, "statements are exported ($series series)");
cmp_ok($series, '<=', 10, 'at most ten: the cardinality is bounded');

# Counters that survive a backend's exit (1.7).  A superuser's backend runs
# into an out-of-memory error under its own cap, releases its free heap
# when idle, is trimmed from another session, and exits; the exporter's
# counters of glibc_malloc_counters are typed counter and never go down,
# while the sums over live backends (gauges) lose what it did.
my $b = $node->background_psql('postgres', on_error_stop => 0);
my $bpid = $b->query_safe('SELECT pg_backend_pid()');
$b->{stderr} = '';
$b->query("SET glibc_malloc.max_backend_memory = '4MB'; $big_sort");
like($b->{stderr}, qr/ERROR:  out of memory/, 'the capped backend ran into an out-of-memory error');
$b->{stderr} = '';		# the next query_safe must not see it
$b->query_safe("RESET glibc_malloc.max_backend_memory; SET glibc_malloc.preset = 'greedy'; SET glibc_malloc.idle_release_delay = '200ms'; $big_sort");
ok( wait_for(sub {
			$admin->query_safe("SELECT coalesce((SELECT idle_releases FROM glibc_malloc_backends WHERE pid = $bpid), 0)") >= 1;
		}, 10),
	'it released its free heap when idle');
$admin->query_safe("SELECT glibc_malloc_trim_backend($bpid)");
ok( wait_for(sub {
			$admin->query_safe("SELECT coalesce((SELECT remote_trims FROM glibc_malloc_backends WHERE pid = $bpid), 0)") >= 1;
		}, 10),
	'and was trimmed from another session');

# The sum of one metric's series (all label values).
sub metric_sum
{
	my ($name) = @_;
	my $sum;
	$sum += $1 while $metrics =~ /^\Q$name\E(?:\{[^}]*\})?\s+(\S+)$/mg;
	return $sum;
}

sub scrape
{
	my $res = $http->get("http://127.0.0.1:$port/metrics");
	$metrics = $res->{success} ? $res->{content} : '';
}
my @counters = qw(idle_releases idle_released_bytes remote_trims remote_trimmed_bytes oom_errors);
scrape();
my %before = map { $_ => metric("glibc_malloc_counters_$_") } @counters;
my %gauge_before = map { $_ => metric_sum("glibc_malloc_backends_$_") } qw(idle_releases remote_trims);
for my $c (@counters)
{
	like($metrics, qr/^# TYPE glibc_malloc_counters_$c counter$/m, "glibc_malloc_counters_$c is typed counter");
}
cmp_ok($before{idle_releases} // -1, '>=', 1, 'the exported idle releases count the backend\'s');
cmp_ok($before{remote_trims} // -1, '>=', 1, 'the exported remote trims count the backend\'s');
cmp_ok($before{oom_errors} // -1, '>=', 1, 'the exported out-of-memory errors count the backend\'s');

$b->quit;
ok( wait_for(sub {
			$admin->query_safe("SELECT count(*) FROM pg_stat_activity WHERE pid = $bpid") == 0;
		}, 10),
	'the backend has exited');
scrape();
for my $c (@counters)
{
	cmp_ok(metric("glibc_malloc_counters_$c") // -1, '>=', $before{$c} // 0,
		"glibc_malloc_counters_$c did not drop when the backend exited ($before{$c})");
}
for my $g (qw(idle_releases remote_trims))
{
	cmp_ok(metric_sum("glibc_malloc_backends_$g") // 0, '<', $gauge_before{$g},
		"while the sum of glibc_malloc_backends_$g over live backends did: a gauge");
}
is(metric('glibc_malloc_counters_remote_trims'),
	$node->safe_psql('postgres', 'SELECT remote_trims FROM glibc_malloc_counters'),
	'glibc_malloc_counters_remote_trims as in the view');
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'psql', '-X', '-d', $node->connstr('postgres'), '-c', 'SELECT * FROM glibc_malloc_counters' ], '>', \$out, '2>', \$err);
	note "the view after the exit:\n$out";
}

unlike($err, qr/level=error/, 'the exporter logged no error') or diag $err;

$h->kill_kill;
$a->quit;
$admin->quit;
done_testing();
