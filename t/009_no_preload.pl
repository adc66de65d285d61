# Without shared_preload_libraries: LOAD, session_preload_libraries and
# CREATE EXTENSION give a session the GUCs and functions; the arena knobs
# say that they need preloading.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('no_preload');
$node->init;
$node->append_conf('postgresql.conf', "jit = off\n");
$node->start;

# CREATE EXTENSION loads the library into a running backend.
$node->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');
is($node->safe_psql('postgres', "SELECT count(*) FROM glibc_malloc_settings()") > 0, 1,
	'CREATE EXTENSION works without preloading');

# Untouched, the module calls no mallopt: glibc stays dynamic.
my $s = $node->background_psql('postgres');
my $pid = $s->query_safe("LOAD 'glibc_malloc'; SELECT pg_backend_pid()");
is(glibc_params($pid)->{no_dyn_threshold}, 0, 'loaded but unused: glibc keeps dynamic thresholds');

# LOAD gives the session the GUCs, with their effect.
$s->query_safe("SET glibc_malloc.preset = 'greedy'");
is(settings_of($s)->{trim_threshold}, '8396800|preset|true', 'LOAD: greedy applies in the session');
is(glibc_params($pid)->{trim_threshold}, 8396800, 'and in glibc');
$s->quit;

# The arena knobs need preloading, and say so.
my ($ret, $out, $err) = $node->psql('postgres', "LOAD 'glibc_malloc'; SET glibc_malloc.arena_max = 2");
like($err, qr/glibc_malloc.arena_max takes effect only when glibc_malloc is loaded through shared_preload_libraries/,
	'SET arena_max without preloading: the error says it needs preloading');
($ret, $out, $err) = $node->psql('postgres', "LOAD 'glibc_malloc'; SET glibc_malloc.arena_test = 2");
like($err, qr/arena_test takes effect only when glibc_malloc is loaded through shared_preload_libraries/,
	'SET arena_test likewise');

($ret, $out, $err) = $node->psql('postgres', "LOAD 'glibc_malloc'; SET glibc_malloc.statements_max = 200");
like($err, qr/glibc_malloc.statements_max takes effect only when glibc_malloc is loaded through shared_preload_libraries/,
	'SET statements_max likewise (the server started: no FATAL for a PGC_POSTMASTER variable defined late)');
is($node->safe_psql('postgres', "LOAD 'glibc_malloc'; SET glibc_malloc.track_statements = 'all'; SELECT count(*) FROM generate_series(1, 10)"),
	'10', 'statements run with the hooks loaded and no hash to record into');

# session_preload_libraries, with settings in postgresql.conf: the presets
# apply; arena_max in the file is refused with that explanation.
$node->append_conf('postgresql.conf',
	"session_preload_libraries = 'glibc_malloc'\nglibc_malloc.preset = 'frugal'\nglibc_malloc.arena_max = 4\n");
$node->reload;
my $log_offset = -s $node->logfile;
is($node->safe_psql('postgres', "SELECT source FROM glibc_malloc_settings() WHERE name = 'top_pad'"),
	'preset', 'session_preload_libraries: the configured preset applies');
is($node->safe_psql('postgres', "SELECT value FROM glibc_malloc_settings() WHERE name = 'arena_max'"),
	'0', 'arena_max from the file is not applied');
like(slurp_file($node->logfile, $log_offset), qr/arena_max takes effect only when glibc_malloc is loaded through shared_preload_libraries/,
	'and the log says why');

# The cross-backend view and functions need preloading, and say so.
($ret, $out, $err) = $node->psql('postgres', 'SELECT * FROM glibc_malloc_backends');
like($err, qr/glibc_malloc must be loaded via shared_preload_libraries/, 'the view says it needs preloading');
($ret, $out, $err) = $node->psql('postgres', 'SELECT * FROM glibc_malloc_statements');
like($err, qr/glibc_malloc must be loaded via shared_preload_libraries to record statements/, 'so does glibc_malloc_statements');
($ret, $out, $err) = $node->psql('postgres', 'SELECT glibc_malloc_trim_backend(pg_backend_pid())');
like($err, qr/glibc_malloc must be loaded via shared_preload_libraries/, 'so does trim_backend');
is($node->safe_psql('postgres', 'SELECT rss_anon_bytes > 0 FROM glibc_malloc_stats()'), 't',
	'the per-backend functions still work');

$node->stop;
done_testing();
