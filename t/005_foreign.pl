# Foreign allocators: with jemalloc, tcmalloc or mimalloc preloaded, the
# server starts, the module loads, every non-default setting is refused with
# an error that names the allocator, and nothing crashes.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use Test::More;

my %libs = (
	jemalloc => 'libjemalloc.so.2',
	tcmalloc => 'libtcmalloc_minimal.so.4',
	mimalloc => 'libmimalloc.so.2');

for my $name (sort keys %libs)
{
	my ($path) = glob("/usr/lib/*-linux-gnu/$libs{$name} /usr/lib64/$libs{$name} /usr/lib/$libs{$name}");
	if (!$path || !-e $path)
	{
		die "$libs{$name} is not installed (scripts/deps installs it)" unless $name eq 'mimalloc';
		diag "skipping mimalloc: $libs{$name} is not installed";
		next;
	}

	# A preset in postgresql.conf cannot apply: the server still starts.
	my $node = new_node($name, "glibc_malloc.preset = 'greedy'\nglibc_malloc.top_pad = '1MB'\n", no_start => 1);
	{
		local $ENV{LD_PRELOAD} = $path;
		$node->start;
	}
	my $log = slurp_file($node->logfile);
	like($log, qr/invalid value for parameter "glibc_malloc.preset": "greedy"/, "$name: the configured preset is refused at start");
	like($log, qr/malloc in this process is provided by \Q$libs{$name}\E, not by glibc/, "$name: the log names the allocator");
	$node->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');

	my ($ret, $out, $err) = $node->psql('postgres', "SET glibc_malloc.preset = 'frugal'");
	isnt($ret, 0, "$name: SET preset fails");
	like($err, qr/provided by \Q$libs{$name}\E, not by glibc/, "$name: the error names the allocator");
	for my $knob ("trim_threshold = '1MB'", "mmap_threshold = '1MB'", 'mxfast = 0', 'perturb = 1', 'mmap_max = 0')
	{
		($ret, $out, $err) = $node->psql('postgres', "SET glibc_malloc.$knob");
		like($err, qr/glibc_malloc\.\w+ has no effect: malloc in this process is provided by \Q$libs{$name}\E/,
			"$name: SET $knob is refused");
	}
	is($node->safe_psql('postgres', "SET glibc_malloc.preset = 'default'; SHOW glibc_malloc.preset"), 'default',
		"$name: the default preset is accepted");

	# The reports say the same.
	is($node->safe_psql('postgres', 'SELECT allocator FROM glibc_malloc_stats()'), $libs{$name},
		"$name: stats name the allocator");
	like($node->safe_psql('postgres', "SELECT applied || ' ' || detail FROM glibc_malloc_settings() WHERE name = 'trim_threshold'"),
		qr/^false not applied: malloc is provided by \Q$libs{$name}\E/, "$name: settings say nothing applies");
	($ret, $out, $err) = $node->psql('postgres', 'SELECT glibc_malloc_trim()');
	like($err, qr/malloc_trim is not available: malloc is provided by \Q$libs{$name}\E/, "$name: trim refuses clearly");

	# Real work still runs, and nothing crashed.
	is($node->safe_psql('postgres', 'SELECT count(*) FROM (SELECT g FROM generate_series(1, 200000) g ORDER BY g DESC) s'),
		200000, "$name: a sort runs");
	$node->stop;
	unlike(slurp_file($node->logfile), qr/terminated by signal|PANIC/, "$name: no crash");
}

done_testing();
