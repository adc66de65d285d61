# The operator's environment wins over presets: with GLIBC_TUNABLES or
# MALLOC_TRIM_THRESHOLD_ in the server's environment, greedy leaves
# trim_threshold alone and reports it as coming from the environment.
use strict;
use warnings;
use Config;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $env_trim = 3 * 1024 * 1024;
my $greedy_mmap = 32 * 1024 * 1024;

for my $case (
	[ 'GLIBC_TUNABLES', "glibc.malloc.trim_threshold=$env_trim:glibc.malloc.hugetlb=0" ],
	[ 'MALLOC_TRIM_THRESHOLD_', $env_trim ])
{
	my ($var, $value) = @$case;
	my $node = new_node(lc($var), "glibc_malloc.preset = 'greedy'\nwork_mem = '32MB'\n", no_start => 1);
	{
		local $ENV{$var} = $value;
		$node->start;
	}
	$node->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');

	my $s = $node->background_psql('postgres');
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	my $set = settings_of($s);
	is($set->{trim_threshold}, "$env_trim|environment|true", "$var: trim_threshold comes from the environment");
	is($set->{mmap_threshold}, "$greedy_mmap|preset|true", "$var: greedy still sets mmap_threshold");
	my $mp = glibc_params($pid);
	is($mp->{trim_threshold}, $env_trim, "$var: glibc keeps the environment's trim threshold");
	is($mp->{mmap_threshold}, $greedy_mmap, "$var: glibc has greedy's mmap threshold");

	# An explicit setting still applies, and RESET goes back to the environment.
	$s->query_safe("SET glibc_malloc.trim_threshold = '8MB'");
	is(glibc_params($pid)->{trim_threshold}, 8 * 1024 * 1024, "$var: an explicit setting overrides it");
	$s->query_safe('RESET glibc_malloc.trim_threshold');
	is(settings_of($s)->{trim_threshold}, "$env_trim|environment|true", "$var: RESET returns to the environment's value");
	is(glibc_params($pid)->{trim_threshold}, $env_trim, "$var: in glibc too");

	if ($var eq 'GLIBC_TUNABLES')
	{
		like($set->{hugetlb}, qr/^0\|environment\|true$/, 'the hugetlb tunable is shown');
	}
	$s->quit;
	$node->stop;
}

# An environment value above INT_MAX cannot be restored through mallopt's
# int argument: the report says so instead of passing a wrapped value.
SKIP:
{
	skip 'a 5 GiB value does not fit a 32-bit size_t: glibc ignores it', 6 if $Config{sizesize} < 8;
	my $huge = 5 * 2**30;
	my $node = new_node('huge_env', '', no_start => 1);
	{
		local $ENV{MALLOC_TRIM_THRESHOLD_} = $huge;
		$node->start;
	}
	$node->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');
	my $s = $node->background_psql('postgres');
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	is(settings_of($s)->{trim_threshold}, "$huge|environment|true", 'a 5 GiB trim threshold from the environment is reported');
	is(glibc_params($pid)->{trim_threshold}, $huge, 'and is in force in glibc');
	$s->query_safe("SET glibc_malloc.trim_threshold = '1MB'");
	is(glibc_params($pid)->{trim_threshold}, 2**20, 'an explicit setting overrides it');
	$s->query_safe('RESET glibc_malloc.trim_threshold');
	is(settings_of($s)->{trim_threshold}, "$huge|environment|false",
		'RESET cannot restore it through mallopt: reported as not applied');
	is(glibc_params($pid)->{trim_threshold}, 2**20, 'and glibc keeps the last value, not a wrapped one');
	like($s->query_safe("SELECT detail FROM glibc_malloc_settings() WHERE name = 'trim_threshold'"),
		qr/cannot be restored/, 'the detail explains why');
	$s->quit;
	$node->stop;
}

# MALLOC_PERTURB_ in the environment: an explicit glibc_malloc.perturb = 0
# turns perturbation off (an explicit knob wins), and RESET restores the
# environment's byte.  Read in glibc itself.
{
	my $node = new_node('perturb_env', '', no_start => 1);
	{
		local $ENV{MALLOC_PERTURB_} = 165;
		$node->start;
	}
	$node->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');
	my $s = $node->background_psql('postgres');
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	is(settings_of($s)->{perturb}, '165|environment|true', 'MALLOC_PERTURB_: perturb comes from the environment');
	is(glibc_var($pid, 'perturb_byte'), 165, 'glibc perturbs with it');
	$s->query_safe('SET glibc_malloc.perturb = 0');
	is(settings_of($s)->{perturb}, '0|setting|true', 'SET glibc_malloc.perturb = 0 is an explicit setting');
	is(glibc_var($pid, 'perturb_byte'), 0, 'and glibc stops perturbing');
	$s->query_safe('RESET glibc_malloc.perturb');
	is(settings_of($s)->{perturb}, '165|environment|true', 'RESET: the environment again');
	is(glibc_var($pid, 'perturb_byte'), 165, 'in glibc too');
	$s->quit;
	$node->stop;
}

done_testing();
