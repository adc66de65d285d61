# The memory guard's glance: between two looks (every 250 ms) a calm guard
# reads the usage alone every 50 ms where the fastest burst the machine's
# CPUs can make could reach the point where it starts measuring before
# the next look, and not at all far below it.  Counted as the monitor's
# wake-ups (its voluntary context switches in /proc), with the cgroup v1
# files copies of a real cgroup's with made-up numbers (the usage stays
# far below the engage point: the guard limits nobody).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $MB = 2**20;
my $dir = PostgreSQL::Test::Utils::tempdir;
# Far: a limit of 256 GB, whose measuring point no burst of up to 256
# CPUs reaches from 100 MB within a look.  Near: 400 MB, 116 MB below
# that point: any CPU count glances every 50 ms.
my $far = 2**38;
my $near = 400 * $MB;

# The cgroup v1 files, with a limit of $_[0] and 100 MB used.
sub cgroup
{
	my ($limit) = @_;
	my %files = (
		'memory.usage_in_bytes' => 100 * $MB . "\n",
		'memory.stat' => "cache 0\nrss " . 100 * $MB . "\ntotal_cache 0\ntotal_active_file 0\ntotal_inactive_file 0\n",
		'memory.limit_in_bytes' => "$limit\n");
	for my $f (sort keys %files)
	{
		open my $fh, '>', "$dir/$f.new" or die "$dir/$f.new: $!";
		print $fh $files{$f};
		close $fh;
		rename "$dir/$f.new", "$dir/$f" or die "$dir/$f: $!";
	}
}

cgroup($far);
my $node = new_node('glance', "glibc_malloc.monitor_cgroup = '$dir'\n");

# The monitor's row: pid, limit, usage; and whether the guard is engaged.
sub monitor
{
	return [ split /\|/, $node->safe_psql('postgres',
		'SELECT m.pid, m.limit_bytes, m.usage_bytes, g.engaged FROM glibc_malloc_monitor m, glibc_malloc_guard g') ];
}

# The monitor's wake-ups over 3 s.
sub wakeups
{
	my ($pid) = @_;
	my $read = sub { (slurp_file("/proc/$pid/status") =~ /^voluntary_ctxt_switches:\s+(\d+)/m)[0] };
	my $before = $read->();
	sleep 3;
	return $read->() - $before;
}

ok(wait_for(sub { (monitor()->[1] // 0) == $far }, 15), "the monitor read the limit");
my $m = monitor();
is($m->[3], 'f', 'the guard is calm');
sleep 0.5;
my $wake_far = wakeups($m->[0]);

cgroup($near);
ok(wait_for(sub { (monitor()->[1] // 0) == $near }, 15), 'the monitor read the smaller limit');
sleep 0.5;
my $wake_near = wakeups($m->[0]);
$m = monitor();
is($m->[3], 'f', 'the guard is still calm (100 MB of 400 MB)');
is($m->[2], 100 * $MB, 'the usage read is 100 MB');

diag sprintf('the monitor woke %d times in 3 s at 256 GB, %d times at 400 MB', $wake_far, $wake_near);
# 12 looks in 3 s; 60 glances besides near the measuring point.
cmp_ok($wake_far, '<=', 24, 'far below where the guard measures: it looks, and does not glance in between');
cmp_ok($wake_near, '>=', 36, 'where a burst could get there by the next look: it glances every 50 ms');

$node->stop('fast');
done_testing();
