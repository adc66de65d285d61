# Reloads, per-role settings, bad configuration and faults.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('reload', "work_mem = '32MB'\nrestart_after_crash = on\n");
my $greedy_mmap = 32 * 1024 * 1024;

# An idle session, connected before the change, picks it up at its next
# command: in the report and in glibc.
my $idle = $node->background_psql('postgres');
my $idle_pid = $idle->query_safe('SELECT pg_backend_pid()');
is(settings_of($idle)->{mmap_threshold}, '131072|glibc default|false', 'before: glibc default');
$node->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.preset = 'greedy'");
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
ok( wait_for(sub { settings_of($idle)->{mmap_threshold} eq "$greedy_mmap|preset|true" }, 10),
	'idle session picks up ALTER SYSTEM + reload at its next command');
is(glibc_params($idle_pid)->{mmap_threshold}, $greedy_mmap, 'glibc in that backend has the new threshold');
$node->safe_psql('postgres', 'ALTER SYSTEM RESET glibc_malloc.preset');
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
ok( wait_for(sub { settings_of($idle)->{mmap_threshold} eq '131072|glibc default|true' }, 10),
	'reset by reload: glibc static default restored');
$idle->quit;

# ALTER ROLE ... SET applies to that role only.
$node->safe_psql('postgres', q{
	CREATE ROLE reporter LOGIN;
	ALTER ROLE reporter SET glibc_malloc.preset = 'greedy';
	CREATE ROLE other LOGIN;
});
like($node->safe_psql('postgres', "SELECT value || '|' || source FROM glibc_malloc_settings() WHERE name = 'mmap_threshold'",
	extra_params => [ '-U', 'reporter' ]), qr/^$greedy_mmap\|preset$/, 'the role gets greedy');
like($node->safe_psql('postgres', "SELECT source FROM glibc_malloc_settings() WHERE name = 'mmap_threshold'",
	extra_params => [ '-U', 'other' ]), qr/^glibc default$/, 'another role does not');

# ALTER DATABASE ... SET as well.
$node->safe_psql('postgres', "CREATE DATABASE frugaldb; ALTER DATABASE frugaldb SET glibc_malloc.preset = 'frugal'");
$node->safe_psql('frugaldb', 'CREATE EXTENSION glibc_malloc');
is($node->safe_psql('frugaldb', "SELECT source FROM glibc_malloc_settings() WHERE name = 'top_pad'"),
	'preset', 'ALTER DATABASE SET applies in that database');

# An invalid value in postgresql.conf: the log explains it, the previous
# value stays in force.
$node->append_conf('postgresql.conf', "glibc_malloc.preset = 'greedy'\n");
$node->reload;
my $s = $node->background_psql('postgres');
ok(wait_for(sub { $s->query_safe('SHOW glibc_malloc.preset') eq 'greedy' }, 10), 'valid value applied');
my $log_offset = -s $node->logfile;
$node->append_conf('postgresql.conf', "glibc_malloc.preset = 'bogus'\nglibc_malloc.mxfast = 500\n");
$node->reload;
ok( wait_for(sub { slurp_file($node->logfile, $log_offset) =~ /contains errors/ }, 10),
	'the reload reports errors');
my $log = slurp_file($node->logfile, $log_offset);
like($log, qr/invalid value for parameter "glibc_malloc.preset": "bogus"/, 'log names the bad preset');
like($log, qr/Available values: default, greedy, frugal/, 'log lists the valid presets');
# mxfast's range ends at glibc's MAX_FAST_SIZE, 80 * SIZE_SZ / 4
# (malloc/malloc.c): 160 on 64-bit, 80 on 32-bit, with the word size from
# PostgreSQL (type internal is a pointer), not from the module.
my $word = $s->query_safe("SELECT typlen FROM pg_type WHERE typname = 'internal'");
my $max_fast = 80 * $word / 4;
like($log, qr/500 B is outside the valid range for parameter "glibc_malloc.mxfast" \(-1( B)? \.\. $max_fast( B)?\)/,
	"log explains the bad mxfast (range up to MAX_FAST_SIZE, $max_fast)");
is($s->query_safe('SHOW glibc_malloc.preset'), 'greedy', 'previous preset stays in force');
is(settings_of($s)->{mmap_threshold}, "$greedy_mmap|preset|true", 'and stays applied');
$s->quit;

# Fix the file again.
my $conf = slurp_file($node->data_dir . '/postgresql.conf');
$conf =~ s/^glibc_malloc\.(preset = 'bogus'|mxfast = 500)\n//mg;
open my $fh, '>', $node->data_dir . '/postgresql.conf' or die $!;
print $fh $conf;
close $fh;
$node->reload;

# A reload during a running query does not disturb it.
seed_sort_table($node);
my $long = $node->background_psql('postgres');
$long->query_until(qr/started/, q{\echo started
SELECT count(*) FROM (SELECT * FROM t, generate_series(1, 20) ORDER BY a) s, pg_sleep(1);
});
$node->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.preset = 'frugal'");
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
my $res = $long->query_safe('SELECT 1');
like($long->{stdout} . $res, qr/2000000/, 'the running query finished with the right result');
is(settings_of($long)->{top_pad}, '65536|preset|true', 'and the session took the reload afterwards');
$long->quit;
$node->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.preset = 'greedy'");
$node->reload;

# A backend killed with SIGKILL mid-query under greedy: the server recovers
# and the settings apply again.
my $victim = $node->background_psql('postgres', on_error_stop => 0);
my $vpid = $victim->query_safe('SELECT pg_backend_pid()');
$victim->query_until(qr/started/, q{\echo started
SELECT count(*) FROM (SELECT * FROM t, generate_series(1, 50) ORDER BY a) s;
});
kill 'KILL', $vpid;
eval { $victim->quit };
ok( wait_for(sub { $node->psql('postgres', 'SELECT 1') == 0 }, 60), 'server accepts connections after the crash');
my $after = $node->background_psql('postgres');
my $apid = $after->query_safe('SELECT pg_backend_pid()');
is(settings_of($after)->{mmap_threshold}, "$greedy_mmap|preset|true", 'settings apply again after recovery');
is(glibc_params($apid)->{mmap_threshold}, $greedy_mmap, 'and glibc has them');
$after->quit;
like(slurp_file($node->logfile), qr/terminated by signal 9/, 'the crash was logged');

$node->stop;
done_testing();
