# No spinlock section calls what may allocate or raise an error: a failed
# allocation under a spinlock leaves it held, and the next locker PANICs
# with "stuck spinlock".  Reads the C files (no server): every code between
# SpinLockAcquire and its SpinLockRelease may call only the functions and
# macros of a short list known not to allocate nor ereport, or a function
# of the tree that itself calls only those.  Int64GetDatum, Float8GetDatum
# and TimestampTzGetDatum palloc where 64-bit values are passed by
# reference (32-bit builds): they are not on the list.
use strict;
use warnings;
use FindBin;
use Test::More;

my $root = "$FindBin::RealBin/..";

# Known not to allocate nor raise an error, on every build.
my %allowed = map { $_ => 1 } qw(
  SpinLockAcquire SpinLockRelease SpinLockInit
  Min Max Abs Assert AssertMacro StaticAssertStmt lengthof sizeof offsetof
  pg_atomic_read_u32 pg_atomic_read_u64 pg_atomic_write_u32 pg_atomic_write_u64
  pg_atomic_fetch_add_u32 pg_atomic_fetch_add_u64 pg_atomic_fetch_sub_u32
  pg_atomic_fetch_sub_u64 pg_atomic_exchange_u32 pg_atomic_exchange_u64
  pg_memory_barrier pg_read_barrier pg_write_barrier
  memcpy memset memcmp
  sqrt);
# C's keywords, which a '(' also follows.
my %keyword = map { $_ => 1 } qw(if while for switch return do else case);

# The text of a C file without comments, strings and character constants
# (its lines kept).
sub code_of
{
	my ($text) = @_;
	$text =~ s{/\*.*?\*/}{"\n" x (() = $& =~ /\n/g) || ' '}gse;
	$text =~ s{//[^\n]*}{}g;
	$text =~ s{"(?:\\.|[^"\\])*"}{""}g;
	$text =~ s{'(?:\\.|[^'\\])*'}{''}g;
	return $text;
}

# The names called in a piece of code (a name followed by '(').
sub calls_in
{
	my ($code) = @_;
	my %seen;
	$seen{$1} = 1 while $code =~ /\b([A-Za-z_]\w*)\s*\(/g;
	delete @seen{ keys %keyword };
	return sort keys %seen;
}

# The functions defined in a file: name => body.
sub functions_of
{
	my ($code) = @_;
	my %body;
	while ($code =~ /^(?:static\s+|inline\s+)*[A-Za-z_][\w\s\*]*?\b([A-Za-z_]\w*)\s*\([^;{]*?\)\s*\{/mg)
	{
		my ($name, $start) = ($1, pos($code) - 1);
		my ($depth, $i) = (0, $start);
		for (; $i < length $code; $i++)
		{
			my $ch = substr($code, $i, 1);
			$depth++ if $ch eq '{';
			$depth-- if $ch eq '}';
			last if $depth == 0;
		}
		$body{$name} = substr($code, $start, $i - $start + 1);
	}
	return %body;
}

# The function-like macros defined in a file: name => replacement text
# (followed as the tree's functions are).
sub macros_of
{
	my ($code) = @_;
	my %body;
	$body{$1} = $2 while $code =~ /^[ \t]*#\s*define\s+([A-Za-z_]\w*)\(((?:[^\n\\]|\\.)*)/msg;
	return %body;
}

# The spinlock sections of a file's code: [line, text] each, from an
# acquire to the next release (the tree never nests them).
sub sections_of
{
	my ($code) = @_;
	my @sections;
	while ($code =~ /\bSpinLockAcquire\s*\(/g)
	{
		my $start = $-[0];
		my $line = 1 + (substr($code, 0, $start) =~ tr/\n//);
		pos($code) = $start + 1;
		if ($code =~ /\bSpinLockRelease\s*\([^;]*;/g)
		{
			push @sections, [ $line, substr($code, $start, pos($code) - $start) ];
		}
		else
		{
			push @sections, [ $line, substr($code, $start) ];
		}
	}
	return @sections;
}

# What a section calls that may allocate or raise an error: the names not
# allowed, through the tree's own functions (each checked once).
sub forbidden_calls
{
	my ($code, $functions, $seen) = @_;
	my @bad;
	for my $name (calls_in($code))
	{
		next if $allowed{$name};
		if (exists $functions->{$name})
		{
			next if $seen->{$name}++;
			push @bad, map { "$name -> $_" } forbidden_calls($functions->{$name}, $functions, $seen);
			next;
		}
		push @bad, $name;
	}
	return @bad;
}

# A file's text.
sub slurp
{
	my ($path) = @_;
	open my $fh, '<', $path or die "$path: $!";
	local $/;
	return scalar <$fh>;
}

# Self-test: the checker flags the defects it is for, and passes clean code.
{
	my %fns = functions_of(code_of(<<'EOC'));
static void
helper(int x)
{
	char *s = psprintf("%d", x);
}

static void
fine(int *x)
{
	*x = Max(*x, 1);
}
EOC
	my $bad = code_of(<<'EOC');
	SpinLockAcquire(&s->mutex);
	values[0] = Int64GetDatum(s->n);	/* "SpinLockRelease(" in a comment */
	helper(1);
	fine(&y);
	SpinLockRelease(&s->mutex);
EOC
	my @s = sections_of($bad);
	is(scalar @s, 1, 'self-test: one section found');
	is_deeply([ forbidden_calls($s[0][1], \%fns, {}) ], [ 'Int64GetDatum', 'helper -> psprintf' ],
		'self-test: a Datum builder and a helper that allocates are flagged, a clean helper not');
	my %macros = macros_of(code_of("#define GOOD(c) ((c).n == 0)\n#define BAD(c) \\\n\tpstrdup(c)\n"));
	is_deeply([ forbidden_calls("x = GOOD(e); y = BAD(e);", \%macros, {}) ], [ 'BAD -> pstrdup' ],
		'self-test: a macro of the tree is followed like a function');
	my @ok = sections_of(code_of("SpinLockAcquire(&m); n = s->n; SpinLockRelease(&m); x = Int64GetDatum(n);"));
	is_deeply([ forbidden_calls($ok[0][1], \%fns, {}) ], [], 'self-test: building the Datum after the release is fine');
}

my @files = sort glob("$root/*.c");
my @headers = sort glob("$root/*.h");
ok(@files >= 5, 'the C files are found') or BAIL_OUT('no C files');
my %code = map { $_ => code_of(slurp($_)) } @files;
my %functions = ((map { macros_of(code_of(slurp($_))) } @files, @headers), map { functions_of($code{$_}) } @files);
ok(exists $functions{gm_shmem_count_oom}, 'the tree\'s functions are read');

my $nsections = 0;
for my $file (@files)
{
	(my $short = $file) =~ s{.*/}{};
	for my $section (sections_of($code{$file}))
	{
		my ($line, $text) = @$section;
		$nsections++;
		like($text, qr/\bSpinLockRelease\s*\(/, "$short:$line: the section ends with a release");
		my @bad = forbidden_calls($text, \%functions, {});
		is_deeply(\@bad, [], "$short:$line: the spinlock section calls nothing that may allocate or raise an error")
		  or diag "calls: @bad";
	}
}
cmp_ok($nsections, '>=', 5, 'the spinlock sections are found');

done_testing();
