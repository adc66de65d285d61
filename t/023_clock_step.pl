# A step of the wall clock (an NTP correction, a VM resumed) does not move
# what is due after a time (the next publish, the idle release): due times
# are on the monotonic clock, like the timer.  The server runs under
# libfaketime, whose wall clock the test steps back by an hour, then
# forward.  (libfaketime does not fake the clock inside the backend's
# signal handler, so the test keeps the backend busy and watches the
# publishes that statement starts make when due.)
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my ($lib) = glob('/usr/lib/*/faketime/libfaketime.so.1');
plan skip_all => 'libfaketime is not installed (Debian package libfaketime)' unless $lib;

my $rc = PostgreSQL::Test::Utils::tempdir . '/faketime.rc';
# Replaced whole (rename): libfaketime reads the file on every clock call,
# and newer versions exit the process when they read it half written.
sub set_clock
{
	open my $fh, '>', "$rc.new" or die $!;
	print $fh "$_[0]\n";
	close $fh;
	rename "$rc.new", $rc or die $!;
}
set_clock('+0');

my $node = new_node('clock', "glibc_malloc.stats_interval = '2s'\nwork_mem = '32MB'\n", no_start => 1);
{
	local $ENV{LD_PRELOAD} = $lib;
	local $ENV{FAKETIME_TIMESTAMP_FILE} = $rc;
	local $ENV{FAKETIME_NO_CACHE} = 1;
	local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = 1;
	local $ENV{DONT_FAKE_MONOTONIC} = 1;
	$node->start;
}
$node->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');

my $s = $node->background_psql('postgres');
my $pid = $s->query_safe('SELECT pg_backend_pid()');

sub snapshot_at
{
	return $node->safe_psql('postgres', "SELECT snapshot_at FROM glibc_malloc_backends WHERE pid = $pid");
}

# A client that works without pause, for $seconds: statements back to
# back, so that publishing is left to their starts (each publishes when
# stats_interval says so), not to the idle point.
sub work
{
	my ($seconds) = @_;
	my $end = time + $seconds;
	$s->query_safe('SELECT pg_sleep(0.2)') while time < $end;
}

# Control: with the clock untouched, a busy backend publishes every 2 s.
work(0.5);
my $t1 = snapshot_at();
work(3);
isnt(snapshot_at(), $t1, 'a busy backend publishes again after stats_interval');

# The wall clock steps back an hour: the next publish still comes 2 s after
# the last, not an hour later.
my $t2 = snapshot_at();
set_clock('-1h');
my $now = $node->safe_psql('postgres', 'SELECT extract(epoch FROM now())::bigint');
cmp_ok(time - $now, '>', 3000, 'the server\'s wall clock is an hour behind');
work(3);
my $t3 = snapshot_at();
isnt($t3, $t2, "the backend still publishes within seconds ($t2, then $t3)");

# And forward again: publishing goes on.
set_clock('+0');
work(3);
isnt(snapshot_at(), $t3, 'and after the clock steps forward again');

$s->quit;
my @bad = grep { /\b(PANIC|FATAL):|terminated by signal|TRAP:/ } split /\n/, slurp_file($node->logfile);
is_deeply(\@bad, [], 'no crash in the server log');
done_testing();
