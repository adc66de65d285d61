# The docs cannot go stale: the GUC tables in docs/reference.md and README.md
# list exactly the GUCs found in pg_settings under glibc_malloc.%, and the
# reference documents every SQL function and view of the extension.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = "$FindBin::RealBin/..";
my $node = new_node('docs');
my @gucs = split /\n/, $node->safe_psql('postgres',
	"SELECT name FROM pg_settings WHERE name LIKE 'glibc_malloc.%' ORDER BY name");
cmp_ok(scalar @gucs, '>=', 12, 'pg_settings lists the module\'s GUCs');

# GUC names in the first column of a Markdown table: `glibc_malloc.x`
# (or `glibc_malloc.x`, `glibc_malloc.y`).
sub documented_gucs
{
	my ($file) = @_;
	my %seen;
	for my $line (split /\n/, slurp_file($file))
	{
		next unless $line =~ /^\|\s*(`glibc_malloc\.[^|]*)\|/;
		$seen{$_} = 1 for $1 =~ /`(glibc_malloc\.\w+)`/g;
	}
	return [ sort keys %seen ];
}

is_deeply(documented_gucs("$root/docs/reference.md"), \@gucs,
	'docs/reference.md documents exactly the GUCs in pg_settings');
is_deeply(documented_gucs("$root/README.md"), \@gucs, 'so does the README\'s table');

my $reference = slurp_file("$root/docs/reference.md");
my @objects = split /\n/, $node->safe_psql('postgres', q{
	SELECT coalesce(p.proname, c.relname)
	FROM pg_depend d
	LEFT JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid
	LEFT JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
	WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'glibc_malloc')
	  AND d.deptype = 'e' AND coalesce(p.proname, c.relname) IS NOT NULL
	ORDER BY 1});
for my $o (@objects)
{
	like($reference, qr/`$o(\(|`)/, "docs/reference.md documents $o");
}

# Every doc the README links to exists.
for my $link (slurp_file("$root/README.md") =~ /\]\(((?:docs\/)?[\w.\/-]+\.md)\)/g)
{
	ok(-f "$root/$link", "README links to $link, which exists");
}

$node->stop;
done_testing();
