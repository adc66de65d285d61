# What differs between glibc and PostgreSQL versions and word sizes, checked
# on whichever this run has: mallinfo2 (2.33+) or the mallinfo fallback,
# measured against the heap the kernel maps; the 32 MB mmap threshold limit
# before 2.35; mxfast's platform limit; the shared memory request before
# PostgreSQL 15.
use strict;
use warnings;
use Config;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('versions', "work_mem = '32MB'\n");
my $s = $node->background_psql('postgres');
my $pid = $s->query_safe('SELECT pg_backend_pid()');
my $version = $s->query_safe('SELECT glibc_version FROM glibc_malloc_stats()');
my ($major, $minor) = $version =~ /^(\d+)\.(\d+)/;
my $at_least = sub { my ($ma, $mi) = @_; $major > $ma || ($major == $ma && $minor >= $mi) };
note "glibc $version, " . ($at_least->(2, 33) ? 'mallinfo2' : 'the mallinfo fallback') . ", $Config{sizesize}-byte size_t";

# The heap figures against /proc: a backend has one arena, the main one,
# whose bytes are the [heap] mappings.
$s->query_safe('SELECT g FROM generate_series(1, 300000) g ORDER BY g DESC OFFSET 300000');
my ($heap, $in_use, $free, $system) = split /\|/,
  $s->query_safe("SELECT heap_bytes || '|' || in_use_bytes || '|' || free_bytes || '|' || system_bytes FROM glibc_malloc_stats()");
my $mapped = 0;
for (split /\n/, slurp_file("/proc/$pid/maps"))
{
	$mapped += hex($2) - hex($1) if /^([0-9a-f]+)-([0-9a-f]+) .*\[heap\]$/;
}
cmp_ok($heap, '>', 0, "heap_bytes is not zero ($heap)");
is($heap, $mapped, 'heap_bytes equals the [heap] mappings in /proc/PID/maps');
cmp_ok($in_use, '>', 0, 'in_use_bytes is not zero');
is($in_use - ($system - $heap) + $free, $heap, 'heap bytes in use plus free bytes make up the heap');

# glibc before 2.35 rejects an mmap threshold above HEAP_MAX_SIZE / 2.
my $limit = 4 * 1024 * 1024 * $Config{longsize};
my ($ok, $out, $err) = $node->psql('postgres', sprintf("SET glibc_malloc.mmap_threshold = '%dkB'", $limit / 1024 + 1024));
if ($at_least->(2, 35))
{
	is($ok, 0, sprintf('glibc %s accepts an mmap threshold above %d MB', $version, $limit / 2**20));
}
else
{
	like($err, qr/glibc $version accepts an mmap threshold of at most \d+ kB; glibc 2\.35 and later accept more/,
		sprintf('glibc %s refuses an mmap threshold above %d MB, naming glibc 2.35', $version, $limit / 2**20));
}
is($node->safe_psql('postgres', sprintf("SET glibc_malloc.mmap_threshold = '%dkB'; SELECT applied FROM glibc_malloc_settings() WHERE name = 'mmap_threshold'", $limit / 1024)),
	't', sprintf('an mmap threshold of %d MB is accepted and applied', $limit / 2**20));

# mxfast: 0 .. 80 * sizeof(size_t) / 4.
my $mxfast = 80 * $Config{sizesize} / 4;
is($node->safe_psql('postgres', "SET glibc_malloc.mxfast = $mxfast; SELECT value FROM glibc_malloc_settings() WHERE name = 'mxfast'"),
	$mxfast, "mxfast = $mxfast is accepted");
($ok, $out, $err) = $node->psql('postgres', 'SET glibc_malloc.mxfast = ' . ($mxfast + 1));
like($err, qr/outside the valid range for parameter "glibc_malloc.mxfast"/, 'mxfast = ' . ($mxfast + 1) . ' is refused');

$s->quit;
$node->stop;

# The same limit on the environment: before 2.35 glibc ignores a larger
# MALLOC_MMAP_THRESHOLD_ (its dynamic thresholds go on), and the report
# says what glibc has, not what the environment asked for.
my $env_mmap = $limit + 2**20;
my $envnode = new_node('versions_env', '', no_start => 1);
{
	local $ENV{MALLOC_MMAP_THRESHOLD_} = $env_mmap;
	$envnode->start;
}
$envnode->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');
my $e = $envnode->background_psql('postgres');
my $epid = $e->query_safe('SELECT pg_backend_pid()');
my $eset = settings_of($e);
my $glibc_mmap = glibc_params($epid)->{mmap_threshold};
if ($at_least->(2, 35))
{
	is($eset->{mmap_threshold}, "$env_mmap|environment|true", "glibc $version takes an environment mmap threshold above ${\($limit / 2**20)} MB, and the report says so");
	is($glibc_mmap, $env_mmap, 'glibc has it');
	like($eset->{dynamic_thresholds}, qr/^0\|environment/, 'and it freezes the dynamic thresholds');
}
else
{
	is($eset->{mmap_threshold}, "131072|glibc default|false", "glibc $version ignores an environment mmap threshold above ${\($limit / 2**20)} MB, and so does the report");
	is($glibc_mmap, 131072, 'glibc keeps its default');
	like($eset->{dynamic_thresholds}, qr/^1\|/, 'and its dynamic thresholds');
}
$e->quit;
$envnode->stop;

# Shared memory for every backend: before PostgreSQL 15 the request is made
# while MaxBackends is still 0, so it must be computed from the settings.
my $many = new_node('many', "max_connections = 2000\n", no_start => 1);
$many->start;
my @b = map { $many->background_psql('postgres') } 1 .. 3;
is($many->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc; SELECT count(*) >= 3 FROM glibc_malloc_backends'), 't',
	'a preloaded server with max_connections = 2000 starts and every backend has a slot');
for my $x (@b) { $x->quit }
$many->stop;
done_testing();
