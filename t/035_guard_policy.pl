# The memory guard's policy (guard_policy.c) is a pure function: compiled
# with a test driver (t/modules/guard_policy_test.c) and fed tables of
# snapshots, without a server or a cgroup.  The driver prints TAP; each of
# its lines is checked here.
use strict;
use warnings;
use FindBin;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = "$FindBin::RealBin/..";
my $pg_config = $ENV{PG_CONFIG} // 'pg_config';
chomp(my $inc = `$pg_config --includedir-server`);
chomp(my $lib = `$pg_config --pkglibdir`);
my $exe = PostgreSQL::Test::Utils::tempdir . '/guard_policy_test';
my ($out, $err) = ('', '');
IPC::Run::run([ 'cc', '-O2', '-Wall', '-Werror', '-I', $inc, '-I', $root,
		"$root/guard_policy.c", "$FindBin::RealBin/modules/guard_policy_test.c",
		"-L$lib", '-lpgport', '-lm', '-o', $exe ],
	'<', \undef, '>', \$out, '2>', \$err)
  or BAIL_OUT("cannot build the policy's test driver:\n$out$err");
ok(-x $exe, 'the policy compiles alone, with the test driver');

($out, $err) = ('', '');
my $ran = IPC::Run::run([$exe], '<', \undef, '>', \$out, '2>', \$err);
my ($plan) = $out =~ /^1\.\.(\d+)$/m;
cmp_ok($plan // 0, '>=', 20, 'the driver ran its tables') or diag "$out$err";
for (split /\n/, $out)
{
	next unless /^(not )?ok \d+ - (.*)$/;
	ok(!defined $1, $2);
}
ok($ran, 'the driver exits 0') or diag $err;
done_testing();
