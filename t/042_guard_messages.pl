# An idle session is not a trap: while the memory guard is engaged, a
# session counted idle gets a limit that leaves room for a client message
# (64 MB, or the budget when less), because PostgreSQL reads the whole
# message, then parses, plans and runs it, before the monitor's next look
# may count the session as working.  In a real cgroup v1 of 800 MB, the
# guard engaged with about 100 MB of budget and another session working,
# a session idle for 3 s (limited by the guard, /proc/PID/limits) runs an
# 8 MB query text (simple protocol) and an 8 MB Bind parameter (extended
# protocol: Parse, Bind, Execute), sent over a raw protocol connection.
# With the reserve alone (at most 4 MB above VmData) both got "out of
# memory": the query text needs about 52 MB above an idle backend's
# VmData, the Bind about 40 MB.
#
# Needs a cgroup v1 memory directory writable by the test's user, named by
# GM_TEST_CGROUP_V1.  The measurements are printed (diag), passing or not.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use IO::Socket::UNIX;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $cg = test_cgroup_v1();

my $MB = 2**20;
my $limit = 800 * $MB;
my $size = 8 * $MB;

sub oom_kills { cgroup_v1_oom_kills($cg) }
my $kills_before = oom_kills();

# log_statement = none, PostgreSQL's default (the test framework's "all"
# logs the 8 MB parameter as 16 MB of hex, which needs another 32 MB).
my $node = new_node('messages', "shared_buffers = 16MB\nmax_connections = 20\nlog_statement = none\n", no_start => 1);
$node->start;
enter_cgroup_v1($node, $cg, $limit);
$node->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');

# A raw protocol connection: the frontend/backend protocol 3.0 over the
# node's Unix socket, trust authentication.
my $sock = IO::Socket::UNIX->new(Peer => $node->host . '/.s.PGSQL.' . $node->port)
  or die "cannot connect: $!";
binmode $sock;
sub send_msg
{
	my ($type, $body) = @_;
	print {$sock} ($type // '') . pack('N', length($body) + 4) . $body;
}
sub read_n
{
	my ($n) = @_;
	my $buf = '';
	while (length $buf < $n)
	{
		my $got = sysread($sock, $buf, $n - length $buf, length $buf);
		die "connection closed" unless $got;
	}
	return $buf;
}
# Messages until ReadyForQuery: the data rows' first column, the errors.
sub until_ready
{
	my (@rows, @errors, $pid);
	while (1)
	{
		my ($type, $len) = unpack('a N', read_n(5));
		my $body = read_n($len - 4);
		$pid = unpack('N', $body) if $type eq 'K';
		if ($type eq 'D')
		{
			my ($n, $l) = unpack('n N', $body);
			push @rows, substr($body, 6, $l);
		}
		if ($type eq 'E')
		{
			my %f = map { substr($_, 0, 1) => substr($_, 1) } grep { length } split /\0/, $body;
			push @errors, "$f{M}" . ($f{D} ? " ($f{D})" : '');
		}
		return (\@rows, \@errors, $pid) if $type eq 'Z';
	}
}
send_msg(undef, pack('N', 196608) . "user\0" . ($ENV{USER} // getpwuid($<)) . "\0database\0postgres\0\0");
my (undef, $errs, $pid) = until_ready();
ok($pid && !@$errs, "a raw protocol connection (backend $pid)");

# Another session works: a statement that runs for the whole test.
my $worker = GlibcMallocTest::start_query($node, 'SELECT pg_sleep(120)');

# The usage into the engaged band, about 100 MB below the target.
sub guard { [ split /\|/, $node->safe_psql('postgres', 'SELECT engaged, usage_bytes, target_bytes FROM glibc_malloc_guard') ] }
my @fillers;
for my $try (1 .. 20)
{
	sleep 0.5;
	my ($engaged, $usage, $target) = @{ guard() };
	my $headroom = $target - $usage;
	last if $headroom <= 115 * $MB && $headroom >= 95 * $MB;
	push @fillers, start_filler($cg, $headroom - 105 * $MB) if $headroom > 115 * $MB;
	last if $headroom < 95 * $MB;
}
ok(wait_for(sub { guard()->[0] eq 't' }, 10), 'the guard is engaged');

sub data_limit
{
	my ($lim) = slurp_file("/proc/$pid/limits") =~ /^Max data size\s+(\S+)/m;
	return $lim;
}
sub vmdata { (slurp_file("/proc/$pid/status") =~ /VmData:\s+(\d+) kB/)[0] * 1024 }

for my $case ([ 'an 8 MB query text', sub {
			send_msg('Q', "SELECT length('" . ('a' x $size) . "')\0");
		} ],
	[ 'an 8 MB Bind parameter', sub {
			send_msg('P', "\0SELECT length(\$1::bytea)\0" . pack('n N', 1, 17));
			send_msg('B', "\0\0" . pack('n n n N', 1, 1, 1, $size) . ('x' x $size) . pack('n', 0));
			send_msg('E', "\0" . pack('N', 0));
			send_msg('S', '');
		} ])
{
	my ($what, $send) = @$case;
	# Idle for 3 s: the guard has limited the session as idle.
	sleep 3;
	my ($engaged, $usage, $target) = @{ guard() };
	my $lim = data_limit();
	my $vm = vmdata();
	diag sprintf('%s: usage %.0f MB, headroom %.0f MB, engaged %s; the idle session maps %.1f MB, its limit %s',
		$what, $usage / $MB, ($target - $usage) / $MB, $engaged, $vm / $MB,
		$lim eq 'unlimited' ? $lim : sprintf('%.1f MB (%.1f MB above)', $lim / $MB, ($lim - $vm) / $MB));
	isnt($lim, 'unlimited', "$what: the idle session has the guard's limit");
	$send->();
	my ($rows, $errors) = until_ready();
	is_deeply($errors, [], "$what in a session counted idle: no error");
	is($rows->[0], $size, "$what: it runs");
}

send_msg('X', '');
close $sock;
is(oom_kills(), $kills_before, 'the kernel OOM-killed nothing');
$worker->{h}->kill_kill;
$_->kill_kill for @fillers;
$node->stop('fast');
done_testing();
