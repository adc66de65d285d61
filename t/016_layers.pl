# The C files call each other one way (glibc_malloc.h lists the layers): an
# object file references only symbols defined by the files of lower layers,
# and none references the entry file.  Read from the built objects with nm,
# so a call added by a macro or an inline function counts too.
use strict;
use warnings;
use FindBin;
use Test::More;

my $root = "$FindBin::RealBin/..";
# Files of one layer (stats, doctor, monitor) do not call each other either.
my %rank = (allocator => 1, settings => 2, idle => 3, shmem => 4, guard_policy => 3, memsource => 4, stats => 5, doctor => 5, guard => 5, monitor => 5, statements => 5, glibc_malloc => 6);
my @layers = sort { $rank{$a} <=> $rank{$b} || $a cmp $b } keys %rank;

my (%defined_by, %refs);
for my $file (@layers)
{
	my $obj = "$root/$file.o";
	ok(-f $obj, "$file.o is built") or next;
	for (split /\n/, `nm -g --defined-only '$obj'`)
	{
		my ($sym) = (split ' ')[-1];
		$defined_by{$sym} = $file;
	}
	$refs{$file} = [ map { (split ' ')[-1] } split /\n/, `nm -u '$obj'` ];
}

# Sanity: the table is read (a failing nm would make every check vacuous).
is($defined_by{gm_mallinfo}, 'allocator', 'nm finds gm_mallinfo in allocator.o');
is($defined_by{_PG_init}, 'glibc_malloc', 'and _PG_init in glibc_malloc.o');

my @listing;
for my $file (@layers)
{
	my %to;
	for my $sym (@{ $refs{$file} // [] })
	{
		my $def = $defined_by{$sym} or next;
		push @{ $to{$def} }, $sym;
	}
	for my $def (sort { $rank{$a} <=> $rank{$b} } keys %to)
	{
		my $syms = join ', ', sort @{ $to{$def} };
		push @listing, "$file -> $def: $syms";
		cmp_ok($rank{$def}, '<', $rank{$file}, "$file calls only lower layers: $def ($syms)");
	}
}
cmp_ok(scalar @listing, '>=', 5, 'the files do call each other (the listing is not empty)');
note join "\n", 'cross-file references:', @listing;

done_testing();
