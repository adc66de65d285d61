# The docs cannot go stale: the GUC table in docs/reference.md lists exactly
# the GUCs found in pg_settings under glibc_malloc.%, each with its type,
# unit, default, context and range; its table of functions and views at a
# glance lists exactly the extension's objects, and it documents each.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use PostgreSQL::Test::Utils;
use IPC::Run;
use Test::More;

my $root = "$FindBin::RealBin/..";
my $node = new_node('docs', "shared_preload_libraries = 'pg_stat_statements,glibc_malloc'\nglibc_malloc.track_statements = top\n");
$node->safe_psql('postgres', 'CREATE EXTENSION pg_stat_statements');
my $pgver = $node->safe_psql('postgres', 'SHOW server_version_num');
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

# The reference's GUC table against pg_settings: type, unit, default,
# context, and the range where the row states one as "A .. B".
my %want;
for (split /\n/, $node->safe_psql('postgres',
	"SELECT name, vartype, coalesce(unit, ''), boot_val, context, coalesce(min_val, ''), coalesce(max_val, '') FROM pg_settings WHERE name LIKE 'glibc_malloc.%'"))
{
	my ($name, @f) = split /\|/, $_, -1;
	@{ $want{$name} }{qw(type unit boot context min max)} = @f;
}
my %in_base = (B => 1, kB => 1024, MB => 1024**2, GB => 1024**3, ms => 1, s => 1000, min => 60000);
# A documented value ("64MB", "2 GB", "1s", "-1") in the GUC's own unit.
sub in_unit
{
	my ($v, $unit) = @_;
	my ($n, $u) = $v =~ /^(-?[\d.]+)\s*([a-zA-Z]*)$/ or return undef;
	return $n if $u eq '' || $n == -1;
	return undef unless $in_base{$u} && $in_base{$unit};
	return $n * $in_base{$u} / $in_base{$unit};
}
my %type_word = (enum => 'enum', integer => 'integer', real => 'real', boolean => 'bool', string => 'string');
my $rows_checked = 0;
my %unit_word = (kB => 'kB', ms => 'ms', bytes => 'B');
for my $line (split /\n/, slurp_file("$root/docs/reference.md"))
{
	next unless $line =~ /^\|\s*`(glibc_malloc\.\w+)`\s*\|([^|]*)\|([^|]*)\|([^|]*)\|/;
	my ($name, $type, $default, $who) = ($1, $2, $3, $4);
	my $w = $want{$name} or next;
	$rows_checked++;
	my ($tw) = $type =~ /^\s*(\w+)/;
	is($type_word{$tw} // $tw, $w->{type}, "reference: $name is $w->{type}");
	my ($uw) = $type =~ /^\s*\w+(?::[^,]*)?,\s*(kB|ms|bytes)\b/;
	is($unit_word{ $uw // '' } // '', $w->{unit}, "reference: ${name}'s unit is '$w->{unit}'");
	my ($d) = $default =~ /`([^`]*)`/;
	$d = '' if defined $d && $d eq "''";
	my $boot = $w->{boot};
	if ($w->{type} eq 'integer' || $w->{type} eq 'real')
	{
		is(in_unit($d // '?', $w->{unit}), $boot, "reference: ${name}'s default $d is $boot $w->{unit}");
	}
	else
	{
		is($d, $boot, "reference: ${name}'s default is '$boot'");
	}
	my ($ctx) = $who =~ /\(`(\w+)`\)/;
	is($ctx, $w->{context}, "reference: $name is set in context $w->{context}");
	if ($type =~ /(-?[\d.]+\s*(?:[kMG]B)?)\s*\.\.\s*(-?[\d.]+\s*(?:[kMG]B)?)(?![\s\d]*[×x*])/)
	{
		my ($lo, $hi) = (in_unit($1, $w->{unit}), in_unit($2, $w->{unit}));
		# Exact, but for a documented "2 GB" that is 2 GB - 1 kB in kB.
		my $near = sub { my ($doc, $real) = @_; defined $doc && ($doc == $real || ($w->{type} eq 'integer' && abs($doc - $real) == 1 && abs($real) > 1000)) };
		ok($near->($lo, $w->{min}) && $near->($hi, $w->{max}),
			"reference: ${name}'s range $1 .. $2 is pg_settings' $w->{min} .. $w->{max} $w->{unit}");
	}
}
is($rows_checked, scalar @gucs, 'every GUC\'s row in the reference was checked against pg_settings');

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

# The table at a glance: its first column names each object once, no more.
my ($glance) = $reference =~ /^## Functions and views at a glance\n(.*?)^## /ms;
ok(defined $glance, 'docs/reference.md has a table of functions and views at a glance');
my %glance;
for my $line (split /\n/, $glance // '')
{
	$glance{$1} = 1 if $line =~ /^\|\s*`(glibc_malloc_\w+)/;
}
my %distinct = map { $_ => 1 } @objects;
is_deeply([ sort keys %glance ], [ sort keys %distinct ],
	'the table at a glance lists exactly the extension\'s functions and views');

# Sample output: every ```sql block followed at once by an output block, in
# the README and docs/, runs, and returns the columns the sample shows; and
# every view and function of the extension has such a sample.
my %sampled;
my $nsamples = 0;
for my $file ("$root/README.md", glob("$root/docs/*.md"))
{
	my $text = slurp_file($file);
	(my $short = $file) =~ s{^\Q$root\E/}{};
	while ($text =~ /```sql\n((?:(?!```).)*?)```\n```\n([^\n]*)\n/sg)
	{
		my ($sql, $header) = ($1, $2);
		next unless $header =~ /\|/ || $header =~ /^\s*\w+\s*$/;
		$sql =~ s/\s+$//;
		if ($pgver < 140000 && $sql =~ /\btoplevel\b/)
		{
			note "$short: skipping a sample that joins on toplevel (pg_stat_statements 13 has none)";
			next;
		}
		$nsamples++;
		my ($out, $err) = ('', '');
		IPC::Run::run([ 'psql', '-X', '-A', '-F', '|', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-c', $sql ],
			'>', \$out, '2>', \$err);
		my @want = map { s/^\s+|\s+$//gr } split /\|/, $header, -1;
		my @got = split /\|/, (split /\n/, $out)[0] // '', -1;
		is_deeply(\@got, \@want, "$short: the sample of \"" . substr($sql =~ s/\s+/ /gr, 0, 60) . "...\" has these columns")
		  or diag $err;
		$sampled{$1} = 1 while $sql =~ /\b(glibc_malloc_\w+)/g;
	}
}
cmp_ok($nsamples, '>=', 16, "the docs have samples ($nsamples)");
ok($sampled{$_}, "the docs show sample output of $_") for @objects;

# The README stays one screen: at most 800 words, counted as wc -w does.
my @readme_words = split ' ', slurp_file("$root/README.md");
cmp_ok(scalar @readme_words, '<=', 800, 'README.md has at most 800 words (' . scalar(@readme_words) . ')');

# Every doc the README links to exists.
for my $link (slurp_file("$root/README.md") =~ /\]\(((?:docs\/)?[\w.\/-]+\.md)\)/g)
{
	ok(-f "$root/$link", "README links to $link, which exists");
}

$node->stop;
done_testing();
