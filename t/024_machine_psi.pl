# The memory monitor does not act on the whole machine's PSI.  On cgroup v1
# (and where a cgroup v2 has no memory.pressure) the only PSI is
# /proc/pressure/memory, which rises with a neighbour's stalls and with
# page-cache refaults; acting on it asked for half of all free heap every
# 10 s while the server's own usage was far below its limit.  Here a hog
# thrashes the page cache in a sibling cgroup until the machine's PSI is
# above glibc_malloc.monitor_psi, while the monitor watches a cgroup at 10%
# of its limit: no round.
#
# Needs a cgroup v1 memory directory writable by the test's user, named by
# GM_TEST_CGROUP_V1 (scripts/test makes one when run as root), for the hog.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $cg = test_cgroup_v1();
plan skip_all => 'no /proc/pressure/memory (kernel without PSI)' unless -r '/proc/pressure/memory';

my $MB = 2**20;
my $dir = PostgreSQL::Test::Utils::tempdir;

sub write_text
{
	my ($path, $text) = @_;
	open my $fh, '>', $path or die "$path: $!";
	print $fh $text;
	close $fh;
}

sub machine_psi { (slurp_file('/proc/pressure/memory') =~ /^some avg10=([\d.]+)/)[0] }

# The server's cgroup, as the monitor reads it: v1, 100 MB of 1000 MB.
mkdir "$dir/v1";
write_text("$dir/v1/memory.usage_in_bytes", 100 * $MB . "\n");
write_text("$dir/v1/memory.limit_in_bytes", 1000 * $MB . "\n");
write_text("$dir/v1/memory.stat", "total_active_file 0\ntotal_inactive_file 0\n");

my $node = new_node('psi', "work_mem = '32MB'\nglibc_malloc.preset = 'greedy'\nglibc_malloc.monitor_cgroup = '$dir/v1'\n");
my $big_sort = workload('big_sort');
my $s = $node->background_psql('postgres');
$s->query_safe("$big_sort; $big_sort");
$s->query_safe('SELECT 1');
sub monitor_row
{
	return $node->safe_psql('postgres',
		"SELECT source || '|' || under_pressure || '|' || rounds || '|' || coalesce(psi_some_avg10::text, 'null') || '|' || total_free_bytes FROM glibc_malloc_monitor");
}
ok(wait_for(sub { (split /\|/, monitor_row())[4] > 8 * $MB }, 5), 'the monitor sees a greedy backend\'s free heap: ' . monitor_row());

# The hog: a sibling cgroup limited to 32 MB that reads a 256 MB file over
# and over, so its page cache is reclaimed and refaulted all the time.
my $hog = "$cg/psi_hog.$$";
mkdir $hog or die "$hog: $!";
write_text("$hog/memory.limit_in_bytes", 32 * $MB);
my $file = "$dir/hogfile";
my $pid = fork // die;
if ($pid == 0)
{
	setpgrp;    # its cat processes too are killed with the group
	write_text("$hog/cgroup.procs", $$);
	system('dd', 'if=/dev/zero', "of=$file", 'bs=1M', 'count=256', 'status=none');
	my $end = time + 40;
	system("cat '$file' > /dev/null") while time < $end;
	exit 0;
}
ok(wait_for(sub { machine_psi() >= 1.0 }, 30), 'the machine\'s PSI rises: some avg10 = ' . machine_psi());

# Acting at 0.5%, the monitor would ask now, if it read the machine's PSI.
$node->safe_psql('postgres', "ALTER SYSTEM SET glibc_malloc.monitor_psi = 0.5; SELECT pg_reload_conf()");
sleep 3;
my ($source, $pressure, $rounds, $psi) = split /\|/, monitor_row();
cmp_ok(machine_psi(), '>=', 0.5, 'the machine\'s PSI is above monitor_psi (' . machine_psi() . ')');
is($source, 'cgroup v1', 'the monitor reads the v1 cgroup');
is($pressure, 'false', 'usage at 10% of the limit: no pressure');
is($rounds, 0, 'and no round: the machine\'s PSI is not the server\'s');
is($psi, 'null', 'the view shows no PSI for a v1 cgroup');

kill 'KILL', -$pid, $pid;
waitpid $pid, 0;
ok(wait_for(sub { rmdir $hog }, 10), 'the hog and its cgroup are gone');
$s->quit;
done_testing();
