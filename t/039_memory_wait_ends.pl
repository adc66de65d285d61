# glibc_malloc.memory_wait: no reservation outlives its statement.  In a
# real cgroup v1 of 800 MB (the guard's target 736 MB), another process of
# the container holds the usage so that the room up to the target is 1.5
# times the need (the recorded mapped peak) of one recorded query: one
# reservation fits, two do not.  The query is run again with
# other constants (the same queryid, so the same recorded peak) on 10
# rows: it takes the whole need's reservation and almost no memory, so the
# room stays where it was set.  A need follows the query's recent runs
# (each small run moves it a quarter of the way down): the query is
# recorded again, large, after each check.  A session A holds a reservation, its
# statement ends, and A then stays busy in a DO block that waits for an
# advisory lock (not for its client: a backend that waits for its client
# holds no reservation whatever ended it, and a utility statement does not
# end the last one's); another session's recorded statement, which fits
# only if A's reservation is gone, is then admitted at once
# (glibc_malloc_guard.waits unchanged), A's transaction still open, and
# the guard returned no reservation meanwhile (reservations_returned
# unchanged: a reservation still held while A waits for a lock would go
# back at the monitor's next look):
#
#  - A's statement failed inside a savepoint (a client's ON_ERROR_ROLLBACK,
#    a driver's autosave: SAVEPOINT, the statement, ROLLBACK TO SAVEPOINT),
#    by an error after its sort (division by zero) and by
#    statement_timeout while it held its reservation (the subtransaction's
#    abort ends it: no ExecutorEnd, no transaction end);
#  - A's statement failed in a transaction block without a savepoint (the
#    transaction's abort ends it, before the client's ROLLBACK);
#  - A's statement ended normally inside its transaction (ExecutorEnd);
#  - A's cursor of the recorded query (DECLARE, FETCH: a utility statement's
#    query, which never waits) holds none;
#  - a portal of the extended query protocol suspended by a row limit (a
#    driver's fetch size) holds none while its backend waits for its
#    client, nor once closed, by the protocol (ExecutorEnd) or by the SQL
#    command CLOSE (its executor ends inside that utility statement), nor
#    once a top-level utility statement follows it in the same write;
#  - in a pipeline (Bind p5, Close p4, Execute p5), closing the older
#    portal leaves the reservation p5 took; p5 then waits for a lock in
#    its gate, and its reservation goes back (reservations_returned + 1):
#    another session's query is admitted at once.
#
# And while A's statement is admitted and blocked on a lock inside it:
#
#  - a deferred constraint trigger whose function runs the recorded query
#    at COMMIT (no client portal) never waits: waits and wait_skips
#    unchanged, the commit completes at once, the query counted under the
#    recorded queryid;
#  - A's reservation goes back once the monitor sees it wait for the lock,
#    and another session's recorded query is admitted at once (a plain
#    role's statement blocked on a lock holds no memory others need).
#
# Needs a cgroup v1 memory directory writable by the test's user, named by
# GM_TEST_CGROUP_V1.  The measurements are printed (diag), passing or not.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use GlibcMallocTest;
use IO::Select;
use IO::Socket::UNIX;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

my $cg = test_cgroup_v1();

my $MB = 2**20;
my $limit = 800 * $MB;
my $rows = 600_000;		# the recording run: a sort of about 100 MB

# The query: its sort, an error after it when $d is the row count
# (division by zero), and a gate that waits for advisory lock $k (0: none)
# once the sort is done.  Constants do not change its queryid.
sub rq
{
	my ($n, $d, $k) = @_;
	return "SELECT 1 / (count(*) - $d) + gate($k) FROM (SELECT md5(i::text) FROM generate_series(1, $n) i ORDER BY 1) s";
}

my $node = new_node('memwaitends', "shared_buffers = 16MB\nmax_connections = 40\n"
	  . "glibc_malloc.track_statements = top\n", no_start => 1);
$node->start;
enter_cgroup_v1($node, $cg, $limit);
$node->safe_psql('postgres', 'CREATE EXTENSION glibc_malloc');
$node->safe_psql('postgres', q{
CREATE FUNCTION gate(k int) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
	IF k > 0 THEN
		PERFORM pg_advisory_xact_lock_shared(k);
	END IF;
	RETURN 0;
END $$;
CREATE TABLE d (a int);
CREATE FUNCTION d_check() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM 1 / (count(*) - 0) + gate(0) FROM (SELECT md5(i::text) FROM generate_series(1, 10) i ORDER BY 1) s;
	RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER d_check AFTER INSERT ON d DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW EXECUTE FUNCTION d_check();
});

# The recorded peaks, and the need the admission reserves: what the run
# mapped at most, measured once the guard acts (the monitor read the
# cgroup's limit).
ok(wait_for(sub { (guard_counts($node)->[2] || 0) > 0 }, 10), "the monitor read the cgroup's limit");
# The query recorded large: its need is that run's again.
sub record { $node->safe_psql('postgres', "SET work_mem = '1GB'; " . rq($rows, 0, 0)) }
record();
my ($queryid, $peak, $need) = split /\|/, $node->safe_psql('postgres',
	'SELECT queryid, max_exec_peak_bytes, max_mapped_peak_bytes FROM glibc_malloc_statements WHERE toplevel ORDER BY max_exec_peak_bytes DESC NULLS LAST LIMIT 1');
diag sprintf('the query peaks at %.1f MB of executor memory, maps %.1f MB: its need', $peak / $MB, ($need || 0) / $MB);
cmp_ok($peak, '>=', 50 * $MB, 'the recorded sort is about 100 MB');
cmp_ok($need || 0, '>=', $peak, 'its mapped peak is measured, at least its executor memory');
$need ||= 1.25 * $peak;

sub stmt
{
	[ split /\|/, $node->safe_psql('postgres',
		"SELECT calls, waits, wait_time FROM glibc_malloc_statements WHERE toplevel AND queryid = $queryid") ]
}

my @fillers;
sub fill { push @fillers, start_filler($cg, $_[0]) }

sub guard { guard_counts($node) }
sub room { my $g = guard(); return $g->[2] - $g->[1] }

# The room up to the target: 1.5 times the need (one reservation fits,
# two do not), within a quarter of the need either way.
my ($lo, $hi) = (1.25 * $need, 1.75 * $need);
for my $try (1 .. 20)
{
	sleep 0.5;
	my $room = room();
	last if $room >= 1.4 * $need && $room <= 1.6 * $need;
	fill($room - 1.5 * $need) if $room > 1.6 * $need;
	last if $room < 1.4 * $need;
}
sub room_ok
{
	my ($what) = @_;
	my $room;
	wait_for(sub { $room = room(); $room >= $lo && $room <= $hi }, 10);
	diag sprintf('%s: room %.0f MB (%.2f needs)', $what, $room / $MB, $room / $need);
	ok($room >= $lo && $room <= $hi, "$what: the room fits one need, not two");
}
room_ok('set up');

sub start_query { GlibcMallocTest::start_query($node, @_) }

# Another session's recorded query, which fits only if no other
# reservation is outstanding: admitted at once (memory_wait long enough
# that a wait would show in the counts, short enough not to stall a
# failing run).
sub returned { $node->safe_psql('postgres', 'SELECT reservations_returned FROM glibc_malloc_guard') }

# Another session's recorded query is admitted at once; with $ret0 (the
# count before A's statement), the guard returned no reservation since.
sub admitted_at_once
{
	my ($what, $ret0) = @_;
	my $g0 = guard();
	my $s0 = stmt();
	my $r = finish_query(start_query(rq(10, 0, 0), "SET glibc_malloc.memory_wait = '5s'"));
	my $g1 = guard();
	my $s1 = stmt();
	diag sprintf('%s: the other session\'s query took %.2f s, %d waits, %d admissions, %d wait_timeouts',
		$what, $r->{secs}, $g1->[3] - $g0->[3], $g1->[5] - $g0->[5], $g1->[6] - $g0->[6]);
	ok($r->{out} =~ /^0$/m && $r->{err} eq '', "$what: another session's recorded query runs") or diag "$r->{out} $r->{err}";
	is($g1->[3] - $g0->[3], 0, "$what: admitted at once (glibc_malloc_guard.waits unchanged)");
	is($s1->[1] - $s0->[1], 0, "$what: its waits in glibc_malloc_statements unchanged");
	is($g1->[5] - $g0->[5], 1, "$what: with a reservation of its own (admissions + 1)");
	is(returned() - $ret0, 0, "$what: A's reservation ended with its statement (none returned by the guard)")
	  if defined $ret0;
	record();
}

# Session C holds advisory locks the gates and DO blocks wait for.
my $c = $node->background_psql('postgres');
$c->query_safe('SELECT pg_advisory_lock(k) FROM generate_series(1, 11) k');
sub unlock { $c->query_safe("SELECT pg_advisory_unlock($_[0])") }

# Session A: a client's session, with its transaction open throughout.
my $sa = $node->background_psql('postgres', on_error_stop => 0);
my $a_pid = $sa->query_safe('SELECT pg_backend_pid()');

# Send to A without waiting for the result.
sub a_send
{
	$sa->{stdin} .= "$_[0]\n";
	$sa->{run}->pump_nb;
}

# A waits for advisory lock $k, in a DO block (a utility statement: it
# starts no executor at the top level) or in the query's gate, in the
# transaction it began before the request $in... (unless $new_xact);
# returns whether it does.
sub a_waits_for_lock { waits_for_lock($a_pid, @_) }

# The same for the backend of process $pid.
sub waits_for_lock
{
	my ($pid, $k, $in, $new_xact) = @_;
	my $open = $new_xact ? '' : 'AND a.xact_start < a.query_start';
	return wait_for(sub {
		$node->safe_psql('postgres',
			"SELECT count(*) FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid AND NOT l.granted "
			  . "WHERE a.pid = $pid AND l.locktype = 'advisory' AND l.objid = $k AND a.wait_event_type = 'Lock' "
			  . "$open AND a.query LIKE '$in%'") == 1;
	}, 20);
}

# A's last DO ends (C lets go of its lock), and A's transaction with it.
sub a_done
{
	my ($k) = @_;
	unlock($k);
	$sa->query('ROLLBACK');
	$sa->{stderr} = '';
}

# 1. A failed statement inside a savepoint.
room_ok('before the savepoints');
for my $how ('an error after its sort', 'statement_timeout')
{
	my $k = $how eq 'statement_timeout' ? 1 : 0;
	my $g0 = guard();
	my $ret0 = returned();
	$sa->query_safe('BEGIN');
	$sa->query_safe('SAVEPOINT s');
	$sa->query_safe("SET LOCAL statement_timeout = '1s'") if $k;
	$sa->query($k ? rq(10, 0, $k) : rq(10, 10, 0));
	like($sa->{stderr}, $k ? qr/canceling statement due to statement timeout/ : qr/division by zero/,
		"savepoint, $how: the statement fails");
	$sa->{stderr} = '';
	is(guard()->[5] - $g0->[5], 1, "savepoint, $how: it was admitted with a reservation");
	# ROLLBACK TO SAVEPOINT, and A busy without a statement of the executor.
	a_send('ROLLBACK TO SAVEPOINT s \; DO $$BEGIN PERFORM pg_advisory_xact_lock_shared(2); END $$;');
	ok(a_waits_for_lock(2, 'ROLLBACK TO SAVEPOINT'), "savepoint, $how: A rolled back to its savepoint, its transaction open, waits for a lock");
	# Blocked in its gate, a statement's reservation may go back before it fails.
	admitted_at_once("savepoint, $how", $k ? undef : $ret0);
	a_done(2);
	$c->query_safe('SELECT pg_advisory_lock(2)');
}

# 1b. A failed statement in a transaction block, without a savepoint: the
# transaction's abort ends it, before the client's ROLLBACK.
room_ok('before the aborted transaction');
my $g0 = guard();
my $ret0 = returned();
$sa->query_safe('BEGIN');
$sa->query(rq(10, 10, 0));
like($sa->{stderr}, qr/division by zero/, 'transaction block: the statement fails');
$sa->{stderr} = '';
is(guard()->[5] - $g0->[5], 1, 'transaction block: it was admitted with a reservation');
a_send('ROLLBACK \; DO $$BEGIN PERFORM pg_advisory_xact_lock_shared(2); END $$;');
ok(a_waits_for_lock(2, 'ROLLBACK', 1), 'transaction block: A rolled back and waits for a lock');
admitted_at_once('transaction block', $ret0);
a_done(2);
$c->query_safe('SELECT pg_advisory_lock(2)');

# 2. A statement that ended normally inside its transaction.
room_ok('before the statement that ends');
$ret0 = returned();
$sa->query_safe('BEGIN');
a_send(rq(10, 0, 0) . ' \; DO $$BEGIN PERFORM pg_advisory_xact_lock_shared(3); END $$;');
ok(a_waits_for_lock(3, 'SELECT 1 / (count'), 'ended normally: A waits for a lock after it, its transaction open');
admitted_at_once('ended normally', $ret0);
a_done(3);

# 3. A cursor of the recorded query: DECLARE and FETCH.
room_ok('before the cursor');
$ret0 = returned();
$sa->query_safe('BEGIN');
a_send('DECLARE c CURSOR FOR ' . rq(10, 0, 0) . ' \; FETCH 1 FROM c \; DO $$BEGIN PERFORM pg_advisory_xact_lock_shared(4); END $$;');
ok(a_waits_for_lock(4, 'DECLARE c'), 'cursor: A fetched from it and waits for a lock, the cursor open');
admitted_at_once('cursor fetched', $ret0);
unlock(4);
a_send('CLOSE c \; DO $$BEGIN PERFORM pg_advisory_xact_lock_shared(5); END $$;');
ok(a_waits_for_lock(5, 'CLOSE c'), 'cursor: A closed it and waits for a lock');
admitted_at_once('cursor closed', $ret0);
a_done(5);

# 3b. A portal of the extended query protocol suspended by a row limit (a
# driver's fetch size), spoken here by hand: its backend waits for its
# client, and holds no reservation then; another such portal, suspended
# and closed at once (Close, then a DO block that waits for a lock, in one
# write: its backend never waits for its client in between), holds none
# either.
sub msg { return $_[0] . pack('N', 4 + length $_[1]) . $_[1] }
sub p_send { my ($p, $data) = @_; defined syswrite($p->{sock}, $data) or die "send: $!" }

# Read messages until one of type $want; returns the types read.
sub p_until
{
	my ($p, $want) = @_;
	my $types = '';
	my $sel = IO::Select->new($p->{sock});
	while (1)
	{
		while (length $p->{buf} < 5 || length $p->{buf} < 1 + unpack('N', substr($p->{buf}, 1, 4)))
		{
			die "no message $want (read: $types)" unless $sel->can_read(60);
			sysread($p->{sock}, $p->{buf}, 65536, length $p->{buf}) or die "connection closed (read: $types)";
		}
		my $len = unpack('N', substr($p->{buf}, 1, 4));
		my ($type, $body) = (substr($p->{buf}, 0, 1), substr($p->{buf}, 5, $len - 4));
		substr($p->{buf}, 0, 1 + $len) = '';
		$types .= $type;
		$p->{pid} = unpack('N', $body) if $type eq 'K';
		die "error: " . join(' ', split /\0/, $body) if $type eq 'E';
		return $types if $type eq $want;
	}
}

sub p_connect
{
	my $sock = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => $node->host . '/.s.PGSQL.' . $node->port)
	  or die "connect: $!";
	my $p = { sock => $sock, buf => '' };
	my $body = pack('N', 196608) . 'user' . "\0" . getpwuid($<) . "\0" . 'database' . "\0" . 'postgres' . "\0\0";
	p_send($p, pack('N', 4 + length $body) . $body);
	p_until($p, 'Z');
	return $p;
}
sub p_parse { msg('P', "\0$_[0]\0" . pack('n', 0)) }
sub p_bind { msg('B', "$_[0]\0\0" . pack('nnn', 0, 0, 0)) }
sub p_execute { msg('E', "$_[0]\0" . pack('N', $_[1])) }

room_ok('before the portals');
my $p = p_connect();
p_send($p, msg('Q', "BEGIN\0"));
p_until($p, 'Z');
$g0 = guard();
$ret0 = returned();
p_send($p, p_parse(rq(10, 0, 0)) . p_bind('p1') . p_execute('p1', 1) . msg('H', ''));
like(p_until($p, 's'), qr/D/, 'portal: a row, and the portal suspended');
is(guard()->[5] - $g0->[5], 1, 'portal: its statement was admitted with a reservation');
ok(wait_for(sub { $node->safe_psql('postgres', "SELECT wait_event FROM pg_stat_activity WHERE pid = $p->{pid}") eq 'ClientRead' }, 10),
	'portal: its backend waits for its client');
admitted_at_once('portal suspended', $ret0);
$g0 = guard();
p_send($p, msg('C', "Pp1\0") . p_parse(rq(10, 0, 0)) . p_bind('p2') . p_execute('p2', 1)
	  . msg('C', "Pp2\0") . p_parse('DO $$BEGIN PERFORM pg_advisory_xact_lock_shared(8); END $$') . p_bind('') . p_execute('', 0)
	  . msg('S', ''));
ok(waits_for_lock($p->{pid}, 8, 'DO'), 'portal: suspended, closed, then its backend waits for a lock, its transaction open');
is(guard()->[5] - $g0->[5], 1, 'portal: the second was admitted with a reservation');
admitted_at_once('portal closed', $ret0);
unlock(8);
like(p_until($p, 'Z'), qr/s.*3.*C/, 'portal: it was suspended, then closed, and the DO block ran');
# ... nor one closed by the SQL command CLOSE (a utility statement, inside
# which the portal's executor ends).
$g0 = guard();
p_send($p, p_parse(rq(10, 0, 0)) . p_bind('p3') . p_execute('p3', 1) . msg('H', ''));
p_until($p, 's');
p_send($p, msg('Q', 'CLOSE p3; DO $$BEGIN PERFORM pg_advisory_xact_lock_shared(9); END $$' . "\0"));
ok(waits_for_lock($p->{pid}, 9, 'CLOSE p3'), 'portal: closed by CLOSE, then its backend waits for a lock');
is(guard()->[5] - $g0->[5], 1, 'portal: the third was admitted with a reservation');
admitted_at_once('portal closed by CLOSE', $ret0);
unlock(9);
p_until($p, 'Z');
# ... nor one suspended, then followed in the same write by a top-level
# utility statement (a DO block that waits for a lock): the backend never
# waits for its client in between.
$g0 = guard();
p_send($p, p_parse(rq(10, 0, 0)) . p_bind('p4') . p_execute('p4', 1)
	  . p_parse('DO $$BEGIN PERFORM pg_advisory_xact_lock_shared(10); END $$') . p_bind('') . p_execute('', 0)
	  . msg('S', ''));
ok(waits_for_lock($p->{pid}, 10, 'DO'), 'portal: suspended, then a DO block in the same write waits for a lock');
is(guard()->[5] - $g0->[5], 1, 'portal: the fourth was admitted with a reservation');
admitted_at_once('portal suspended, then a utility statement', $ret0);
unlock(10);
p_until($p, 'Z');
# A pipeline: portal p5 is bound (its executor starts: admitted, with a
# reservation), portal p4 is closed (its executor ends: p5 keeps its
# reservation), then p5 runs and waits for a lock in its gate: its
# reservation goes back at the monitor's next look, and another session's
# query that fits only without it is admitted at once.
$g0 = guard();
$ret0 = returned();
p_send($p, p_parse(rq(10, 0, 11)) . p_bind('p5') . msg('C', "Pp4\0") . p_execute('p5', 0) . msg('S', ''));
ok(waits_for_lock($p->{pid}, 11, 'SELECT 1 / (count'), 'pipeline: p5 waits in its gate, p4 closed after p5 was bound');
is(guard()->[5] - $g0->[5], 1, 'pipeline: p5 was admitted with a reservation');
ok(wait_for(sub { returned() - $ret0 == 1 }, 10), 'pipeline: p5 waits for a lock: its reservation goes back (reservations_returned + 1)');
admitted_at_once('pipeline, p5 waiting for a lock');
unlock(11);
p_until($p, 'Z');
p_send($p, msg('Q', "ROLLBACK\0") . msg('X', ''));
p_until($p, 'Z');

# 4. A's statement is admitted, then waits for a lock in its gate, after
# its sort, and then (once C lets go) in a DO block.
room_ok('before the held reservation');
$g0 = guard();
$ret0 = returned();
$sa->query_safe('BEGIN');
a_send(rq(10, 0, 6) . ' \; DO $$BEGIN PERFORM pg_advisory_xact_lock_shared(7); END $$;');
ok(a_waits_for_lock(6, 'SELECT 1 / (count'), 'held: A\'s statement waits in its gate');
is(guard()->[5] - $g0->[5], 1, 'held: A\'s statement was admitted with a reservation');

# ... a deferred trigger's recorded query at COMMIT does not wait,
my $s0 = stmt();
$g0 = guard();
my $r = finish_query(start_query('BEGIN; INSERT INTO d VALUES (1); COMMIT', "SET glibc_malloc.memory_wait = '10s'"));
my $g1 = guard();
my $s1 = stmt();
diag sprintf('the deferred trigger\'s commit took %.2f s', $r->{secs});
is($r->{err}, '', 'deferred trigger: the commit completes');
is($node->safe_psql('postgres', 'SELECT count(*) FROM d'), 1, 'deferred trigger: its row is committed');
is($s1->[0] - $s0->[0], 1, 'deferred trigger: its function ran the recorded query (its calls + 1)');
is($g1->[3] - $g0->[3], 0, 'deferred trigger: it did not wait (waits unchanged)');
is($g1->[8] - $g0->[8], 0, 'deferred trigger: nor was counted as skipping a wait');
is($g1->[5] - $g0->[5], 0, 'deferred trigger: nor took part in the admission (admissions unchanged)');
cmp_ok($r->{secs}, '<', 5, 'deferred trigger: the commit was not delayed');

# ... A's reservation goes back while it waits for the lock, and a
# client's recorded query is admitted at once.
ok(wait_for(sub { returned() - $ret0 == 1 }, 10), 'held: A waits for a lock: its reservation goes back (reservations_returned + 1)');
admitted_at_once('held, A waiting for a lock');
unlock(6);
ok(a_waits_for_lock(7, 'SELECT 1 / (count'), 'held: A\'s statement ended, A waits for a lock, its transaction open');
a_done(7);

# Nothing left: with A idle, a recorded query is admitted at once.
room_ok('at the end');
admitted_at_once('at the end');

$sa->quit;
$c->quit;
$_->kill_kill for @fillers;
$node->stop('fast');
done_testing();
