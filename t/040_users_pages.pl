# Users' pages say what the product does, in the present tense: no history
# ("code of 2026-11-30", "before this release", "1.6 did") and no talk of
# the test bench ("8 of 8 runs of t/021", "what CI runs", "under
# emulation").  Those belong in docs/design.md (reasoning, history),
# docs/benchmarks.md and CONTRIBUTING.md, which this test does not read.
# Reads the README and docs/*.md (no server) and names the file and line of
# each hit.
#
# Links are fine: a link's target (`[benchmarks](benchmarks.md)`,
# `[results](../bench/results/2026-12-01-....md)`) is not checked, its text
# is.  Timestamps in sample output (`2026-12-01 10:06:19`) are not dates of
# the code.
use strict;
use warnings;
use FindBin;
use Test::More;

my $root = "$FindBin::RealBin/..";

# Each phrase with why it is not the users'.
my @phrases = (
	# history
	[ qr/\bcode of\b/i,                                 'the code of a date' ],
	[ qr/\bcode 1\.\d+/i,                               'a code version' ],
	[ qr/\bversions? 1\.\d+ to 1\.\d+/i,                'a range of code versions' ],
	[ qr/\b(?:before|since|until|in) (?:this|the (?:last|previous)) release\b/i, 'a release as history' ],
	[ qr/\bearlier (?:runs?|code|versions?|builds?)\b/i, 'what earlier runs or code did' ],
	[ qr/\b1\.\d+ (?:did|was|were|had|made|added|kept|counted|used|read|showed|reached|aimed)\b/, 'what a version did' ],
	[ qr/\b20\d\d-[01]\d-[0-3]\d\b(?![ T]\d\d:)/,       'a date (not a timestamp of sample output)' ],
	# the test bench
	[ qr{\bt/0\d\d},                                    'a test file' ],
	[ qr/\bCI\b/,                                       'CI' ],
	[ qr/\bregression (?:suite|tests?)\b/i,             'the regression suite' ],
	[ qr/\bpg_regress\b/,                               'pg_regress' ],
	[ qr/\bTAP\b/,                                      'the TAP tests' ],
	[ qr/\btest suite\b/i,                              'the test suite' ],
	[ qr/\bthe tests\b/i,                               'the tests' ],
	[ qr/\btest machines?\b|\bproject's machines\b/i,  'the test machines' ],
	[ qr/\bemulat(?:ion|ed)\b|\bTCG\b/,                 'a guest under emulation' ],
	[ qr/\b(?:the|a|Debian) guest\b/i,                  'a test VM\'s guest' ],
	[ qr/\bassert-enabled\b|\bcassert\b/i,              'an assert-enabled build' ],
	[ qr/\b\d+ of \d+ (?:runs|bursts|by hand)\b/i,      'a count of runs' ],
	[ qr/\b(?:in|of|over) (?:each of )?(?:\d+|two|three|four|five|six|seven|eight|nine|ten) runs\b/i, 'a count of runs' ],
	[ qr{\bscripts/(?:test|vm|matrix|cassert|chroot|package-test)\b|\btools/test-tracing\b|\.ci/}, 'a test driver' ],
	[ qr/\bGM_(?:VM|TEST)\w*|\bPROVE_\w+|\bPG_TEST_\w+/, 'a test variable' ],
);

# The phrases catch the sentences the issue named (and so their like).
my @named = (
	'3,525 MB (code of 2026-11-30, versions 1.1 to 1.2;',
	'Before this release, balanced kept greedy\'s 398 MB while busy.',
	'1.6 did not count them',
	'(earlier runs, one configuration after the other, saw one configuration\'s TPS fall',
	'with the guard on, 8 of 8 runs of `t/021` at the defaults had no OOM kill',
	'where t/018_exporter.pl runs it',
	'`t/012_docs.pl` runs every query of this section',
	'(6 of 40 on an assert-enabled build, whose sorts grow faster)',
	'the regression suite ran in CI',
	'The guest runs under emulation',
	'scripts/test    # run the whole test suite (what CI runs)',
	'TPC-B-like ×1.02 to ×1.06 (code 1.5,',
);
for my $s (@named)
{
	ok((grep { $s =~ $_->[0] } @phrases), "a phrase catches \"$s\"");
}
# ... and not what users' pages say.
my @fine = (
	'[benchmarks](docs/benchmarks.md)',
	'([results](../bench/results/2026-12-01-statements-1.6-oneserver-sbrk.md))',
	' 19 |       0 |          0 | 2026-12-01 10:06:19.123717+00',
	'`CREATE EXTENSION glibc_malloc` (1.6 or later)',
	'the seed sort ×1.46 over glibc\'s defaults ([benchmarks](benchmarks.md))',
	'what glibc did with a test allocation',
	'[CONTRIBUTING.md](CONTRIBUTING.md): the code, and how it is tested',
	'`EXPLAIN (MEMORY)` shows one planning\'s memory, for a statement you run by hand',
	'records the planner\'s and the executor\'s peaks of every run',
);

# A line's text as checked: link targets dropped.
sub checked_text
{
	my ($line) = @_;
	$line =~ s/\]\([^)\s]*\)/]()/g;
	$line =~ s/^\s*\[[^\]]+\]:\s*\S+//;
	return $line;
}

sub hits_of
{
	my ($line) = @_;
	my $text = checked_text($line);
	my @hits;
	for my $p (@phrases)
	{
		push @hits, "\"$&\" ($p->[1])" if $text =~ $p->[0];
	}
	return @hits;
}

for my $s (@fine)
{
	is_deeply([ hits_of($s) ], [], "no phrase catches \"$s\"");
}

my @pages = ("$root/README.md",
	grep { !m{/(?:design|benchmarks)\.md$} } sort glob("$root/docs/*.md"));
cmp_ok(scalar @pages, '>=', 10, 'the users\' pages are found (' . scalar(@pages) . ')');
for my $file (@pages)
{
	(my $short = $file) =~ s{^\Q$root\E/}{};
	open my $fh, '<', $file or die "$file: $!";
	my @hits;
	while (my $line = <$fh>)
	{
		push @hits, "$short:$.: $_" for hits_of($line);
	}
	close $fh;
	is(scalar @hits, 0, "$short: present tense, no history or test bench")
	  or diag join "\n", @hits;
}

done_testing();
