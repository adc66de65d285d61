/*-------------------------------------------------------------------------
 *
 * guard_policy.c
 *		The memory guard's decisions, as a pure function: from a snapshot
 *		(the limit and usage, a cgroup's or with glibc_malloc.memory_guard =
 *		machine the whole machine's, each guarded process's VmData,
 *		RssAnon, growth and whether it works) to each process's limit.
 *
 * No I/O, no globals, no PostgreSQL calls: monitor.c reads /proc and the
 * cgroup, calls gm_guard_policy, and carries out what it decided (prlimit);
 * t/035_guard_policy.pl compiles this file with a test driver and feeds it
 * tables of snapshots, without a server or a cgroup.
 *
 * The levels, for a limit L: the target, the usage the guard keeps
 * the server under, is L minus the margin (at least GM_GUARD_RESERVE % of L,
 * up to GM_GUARD_MARGIN when that is more, at most GM_GUARD_MAX_RESERVE % of
 * L): the kernel needs room to reclaim file pages before it kills.  The
 * guard engages GM_GUARD_ENGAGE % of L below the target and lifts its limits
 * GM_GUARD_RELEASE % of L below that.  Percentages are taken in integers,
 * the same on every build.
 *
 * While engaged, the budget is the headroom up to the target, less what the
 * working processes have mapped but not resident (it becomes resident
 * without a new mapping, which no limit stops), plus the free heap asked
 * for and not returned yet.  A process works when a statement started in
 * it since the monitor's last look, or when it runs one (it does not wait
 * for its client); one that waits for its client does not, whatever it
 * grew over the last window (its statement ended).  Processes not working may map twice their last growth, at most
 * GM_GUARD_FLOOR each, from at most half of the budget; when none works
 * they share all of it but the pool (below) (rounded down to GM_GUARD_GRAIN, so that a usage
 * that moves a little does not change every idle limit: with a thousand
 * backends that was a thousand prlimit calls per look).  Working processes
 * share the rest in the order their work began (since; ties by group, a
 * parallel query's processes together, the group of the lower pid first,
 * an order that holds from look to look), the earliest
 * first: each in turn may map twice its last window's growth (a fresh
 * one, below, at most twice what it mapped since its work began) while the
 * budget lasts; what is left goes half in equal shares, half halved (half
 * of it to the earliest, a quarter to the next, ..., the latest the
 * remainder; all of it to one that works alone; a group's processes take
 * their halvings together, in equal parts), so that a statement that
 * just started, its growth unknown, still gets room.  The halvings go
 * only to the processes that do not wait in pg_sleep or to write to
 * their client (halving_claimed), which would hold them, unused,
 * ahead of a statement that just started; when all wait so, to them all.
 * What one class does not take goes to the other.  So in a
 * burst of statements that do not all fit, the first ones complete and the
 * last ones get the ERROR early, before they hold much (served smallest
 * first, all would grow together and most fail near the target).
 *
 * A fresh statement is one whose work began within the last two growth
 * windows, as the monitor saw it; what it mapped since counts from its
 * VmData then (for a statement that started since the last reading, from
 * that reading).  Its process's growth over the last window is mostly its
 * previous statement's, which ended: in a mixed workload of short
 * statements that follow one another, claims of that growth would take the
 * whole budget from the statement that just started (docs/design.md).
 *
 * A statement admitted after waiting for memory (memory_wait) gets what
 * it reserved and has not mapped yet before anybody gets anything: the
 * admission counted on it.
 *
 * A process not working may also map GM_GUARD_MESSAGE for a client
 * message, or the whole budget when that is less (rounded down to
 * GM_GUARD_MESSAGE_GRAIN, so that a usage that moves a little changes no
 * idle limit): PostgreSQL reads a whole message before any hook sees a
 * statement, and parses, plans and runs it before the next look may count
 * the process as working.  Measured on PostgreSQL 15 above an idle
 * backend's VmData: an 8 MB query text needs 52 MB (the message buffer
 * doubles to 16 MB; the scanner and the literal copy it), an 8 MB Bind
 * value 40 MB.  That room is not taken from the budget: holding part of
 * it back from the working statements made a query that fits fail in a
 * tight container (t/021).  An idle session that receives a large message
 * goes at most that far past the target, into the margin; several within
 * one look go further.
 *
 * On top of that every process may map its reserve (GM_GUARD_PROC_RESERVE):
 * room for small work (SELECT 1, a login's first query, the catalog
 * catch-up after a sinval reset, NOTIFY delivery at the idle point, where
 * an ERROR becomes FATAL), kept in the margin: all reserves together take
 * at most GM_GUARD_RESERVE_SHARE % of it, and shrink when they do not fit
 * (the decision says so), but not below GM_GUARD_RESERVE_FLOOR: at the
 * floor they may take the whole margin (a bound on what idle backends map
 * at their idle point, which they seldom do together), and what they take
 * beyond it (the shift,
 * gm_guard_reserve_shift, at most GM_GUARD_ENGAGE % of the limit) is
 * counted as usage, so that the guard engages that much earlier and its
 * budget is that much smaller.  A working process gets back what it mapped
 * of its reserve from the budget, as its growth (its limit is never raised
 * past the one in force when the budget has nothing); renewed from the
 * margin at every look, the reserves of many processes that each grow
 * less than theirs a look would pass the target and the limit together.
 * An idle process's limit is thus never at its VmData.
 *
 * A raise smaller than GM_GUARD_SLACK is not worth a prlimit while the
 * limit in force leaves at least that much room (a lowering always is).
 *
 * The admission of statements waiting for memory (glibc_malloc.memory_wait,
 * gm_guard_admit): from the bytes available (the headroom, less what the
 * admitted statements are still expected to take) and the waiters, which
 * go.  In arrival order, each that fits goes and takes its need.  One that
 * does not fit may be passed by a smaller one behind it, as long as it has
 * waited less than GM_ADMIT_PASS_SHARE % of its memory_wait (of at most
 * GM_ADMIT_PASS_MAX_MS: memory_wait is the session's own setting); from then
 * on its need is kept for it, and only what is left beyond it may admit
 * others: passing never makes a waiter miss the memory that frees before
 * its wait ends.  A need above the most the admission could ever have
 * (the ceiling: the target less what the guard cannot move) is hopeless:
 * it is never kept, holds up nobody, and runs at once as without the wait
 * (waiting for memory that cannot free would only delay it).
 *
 * A reservation goes back to the budget (gm_guard_reservation_returns)
 * when its process has not grown at the monitor's looks for as long as it
 * grew since its admission (between GM_RESERVED_STILL_USEC and
 * GM_RESERVED_HOLD_USEC), or waits for a heavyweight lock, a timeout (pg_sleep)
 * or its client to take its rows: a statement that holds its reservation
 * without using it would hold memory others need (a plain role's
 * pg_sleep in a query recorded large).  The statement then runs on as a
 * working one, served by its growth.
 *
 * A statement that runs without its need (memory_wait = 0 and it does not
 * fit, its wait ran out, or its need is hopeless) runs with its grant:
 * what is left once the admitted statements, the kept needs and the needs
 * of the waiters that came before it are taken (0 when nothing is).  It
 * holds the grant as a reservation, and its process limits itself to its
 * VmData plus the grant plus its reserve (GM_GUARD_PROC_RESERVE, the
 * margin's, as every process's) while the statement runs
 * (gm_guard_grant_limit): a burst of statements that do not all fit grows
 * past the guard's target between two of the monitor's looks by at most
 * their reserves, engaged or not, and the first ones of it keep the room
 * they were admitted with.  A lone statement gets all that is left.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdlib.h>

#include "glibc_malloc.h"

#define MB ((int64) 1024 * 1024)

#define GM_GUARD_RESERVE	5		/* the margin: at least this % of the
								 * limit ... */
#define GM_GUARD_MARGIN		(64 * MB)	/* ... or this much ... */
#define GM_GUARD_MAX_RESERVE 15	/* ... but no more than this % */
#define GM_GUARD_ENGAGE		20		/* set limits this % of the limit
									 * below the target ... */
#define GM_GUARD_RELEASE	5		/* ... and lift them this % below that */
#define GM_GUARD_FLOOR		(32 * MB)	/* a process not working may add at
										 * most this from the budget */
#define GM_GUARD_SLACK		(4 * MB)	/* smaller raises wait, while the limit
										 * leaves this much above VmData */
/* GM_GUARD_PROC_RESERVE (glibc_malloc.h): each process's reserve, shrunk
 * so that all take at most ... */
#define GM_GUARD_RESERVE_SHARE 50	/* ... this % of the margin, ... */
#define GM_GUARD_RESERVE_FLOOR (1 * MB)	/* ... but never below this: the
										 * guard engages earlier instead */
#define GM_GUARD_MESSAGE	(64 * MB)	/* a process not working may map this
										 * much (a client message, Parse,
										 * Bind), as far as the budget goes,
										 * ... */
#define GM_GUARD_MESSAGE_GRAIN (4 * MB)	/* ... rounded down to this */
#define GM_NEED_DECAY		4		/* a run below a query's need moves it
									 * 1/this of the way down */
#define GM_NEED_MAPPED_OF	2		/* a mapped measure scales a need up to
									 * this many times its run's size */
#define GM_ADMIT_PASS_SHARE	50	/* a waiter may be passed for this % of
									 * its memory_wait ... */
#define GM_ADMIT_PASS_MAX_MS 30000	/* ... counted as at most this (the
									 * default memory_wait) */
#define GM_RESERVED_STILL_USEC (2 * 1000 * 1000)	/* a reservation that
														 * has not grown this
														 * long (at least) goes
														 * back ... */
#define GM_RESERVED_HOLD_USEC (10 * 1000 * 1000)	/* ... and at most this
														 * long */
#define GM_GUARD_GRAIN		(256 * 1024)	/* shares are rounded down to
											 * this */
#define GM_BURST_PER_CPU	(128 * MB)	/* the fastest growth per CPU over
										 * GM_GLANCE_RATE_MS (measured: 143 MB
										 * from 2 CPUs, docs/design.md), 1.8
										 * times that per CPU */
#define GM_GLANCE_RATE_MS	50
#define GM_GUARD_START_SHARE (16 * MB)	/* a statement whose need is unknown
										 * takes at most this at its start */

/*
 * Which limits each value of glibc_malloc.memory_guard guards.  A whole
 * machine's (source "system") only by choice: there the usage also counts
 * what the guard cannot move (other programs, huge pages, a ZFS ARC,
 * another cluster), and a server upgraded from a version without it must
 * not start failing queries at three quarters of the machine's memory.
 */
static const bool gm_guard_coverage[GM_GUARD_NMODES][GM_NLIMIT_SOURCES] = {
	/* none, system, cgroup v1, cgroup v2 */
	[GM_GUARD_OFF] = {false, false, false, false},
	[GM_GUARD_CGROUP] = {false, false, true, true},
	[GM_GUARD_MACHINE] = {false, true, true, true},
	[GM_GUARD_OBSERVE] = {false, false, true, true},
};

/*
 * Whether an admitted statement's reservation goes back to the budget: its
 * process waits for something a reservation should not outlast (wait), or
 * has not grown at the monitor's looks (for still_usec) for as long as it
 * grew since its admission (grew_usec: from its admission to the last look
 * that saw it grow), at least GM_RESERVED_STILL_USEC and at most
 * GM_RESERVED_HOLD_USEC: a sort that pauses between two growths (it fills
 * what it mapped) keeps it, a statement that grows no more gives it back,
 * and one that grows a little now and then holds it at most
 * GM_RESERVED_HOLD_USEC past its last growth.
 */
bool
gm_guard_reservation_returns(GmReservedWait wait, int64 still_usec, int64 grew_usec)
{
	if (wait == GM_RESERVED_CLIENT_READ)
		return false;			/* it ends: not a return */
	return wait != GM_RESERVED_RUNS ||
		still_usec >= Max(GM_RESERVED_STILL_USEC, Min(grew_usec, GM_RESERVED_HOLD_USEC));
}

/* Whether the guard in mode acts on a limit read from source. */
bool
gm_guard_covers(GmGuardMode mode, GmLimitSource source)
{
	if ((int) mode < 0 || mode >= GM_GUARD_NMODES || (int) source < 0 || source >= GM_NLIMIT_SOURCES)
		return false;
	return gm_guard_coverage[mode][source];
}

/*
 * The end of the guard's HINT: what gives the server more memory, for the
 * limit read from source (the container's, or the whole machine's).
 */
const char *
gm_guard_hint_remedy(GmLimitSource source)
{
	return source == GM_LIMIT_SYSTEM ? "add memory to the machine" : "raise the container's memory limit";
}

/*
 * pct% of v, in integers: the same on every build (x87's extended
 * precision truncated 15 % of 200 MB to a byte less), and no overflow.
 */
static inline int64
gm_pct(int64 v, int pct)
{
	return v / 100 * pct + v % 100 * pct / 100;
}

/* The guard's levels for a limit of limit bytes. */
void
gm_guard_levels(int64 limit, GmGuardLevels *lv)
{
	int64		margin = Max(gm_pct(limit, GM_GUARD_RESERVE),
							 Min(GM_GUARD_MARGIN, gm_pct(limit, GM_GUARD_MAX_RESERVE)));

	lv->target = limit - margin;
	lv->engage = lv->target - gm_pct(limit, GM_GUARD_ENGAGE);
	lv->release = lv->engage - gm_pct(limit, GM_GUARD_RELEASE);
	lv->margin = margin;
}

/* What n reserves at the floor take beyond the margin of limit, uncapped. */
static int64
reserve_excess(int64 limit, int n)
{
	GmGuardLevels lv;

	if (limit <= 0 || n <= 0)
		return 0;
	gm_guard_levels(limit, &lv);
	return Max((int64) n * GM_GUARD_RESERVE_FLOOR - lv.margin, 0);
}

/*
 * What n processes' reserves at the floor take beyond the margin of limit
 * (at the floor they may take all of it, not just their share): counted
 * as usage (the guard engages that much earlier),
 * at most GM_GUARD_ENGAGE % of the limit (thousands of connections would
 * have it engage near no usage; past that the reserves are not all
 * funded, as few use theirs at once).
 */
int64
gm_guard_reserve_shift(int64 limit, int n)
{
	return Min(reserve_excess(limit, n), limit > 0 ? gm_pct(limit, GM_GUARD_ENGAGE) : 0);
}

/* Whether the guard is engaged after a look at usage (it was: engaged). */
bool
gm_guard_engaged_after(int64 limit, int64 usage, bool engaged)
{
	GmGuardLevels lv;

	if (limit <= 0 || usage < 0)
		return false;
	gm_guard_levels(limit, &lv);
	return usage >= (engaged ? lv.release : lv.engage);
}

/*
 * Whether the processes should be measured at this look: while engaged, and
 * in the last stretch before engaging (so that the first engaged look knows
 * who grows).
 */
bool
gm_guard_measure(int64 limit, int64 usage, bool engaged)
{
	GmGuardLevels lv;

	if (limit <= 0 || usage < 0)
		return false;
	gm_guard_levels(limit, &lv);
	return engaged || usage >= lv.release - gm_pct(limit, GM_GUARD_RELEASE);
}

/*
 * How long a calm guard may wait before it glances at the usage again,
 * having seen usage (its reserves' shift included): the time the fastest
 * burst its ncpu CPUs can make takes to carry it to the next level it
 * watches for (the stretch where it measures; inside it, measuring, the
 * engage point), at least min_ms and at most max_ms; ncpu 0 (unknown):
 * min_ms.  Glancing every min_ms sees the same crossings, no later: far
 * below them it need not.
 */
int
gm_guard_glance_ms(int64 limit, int64 usage, bool measuring, int ncpu, int min_ms, int max_ms)
{
	GmGuardLevels lv;
	int64		level;
	double		ms;

	if (limit <= 0 || usage < 0 || ncpu <= 0 || max_ms <= min_ms)
		return min_ms;
	gm_guard_levels(limit, &lv);
	level = measuring ? lv.engage : lv.release - gm_pct(limit, GM_GUARD_RELEASE);
	if (usage >= level)
		return min_ms;
	/* In double: a limit of petabytes would overflow the product. */
	ms = (double) (level - usage) * GM_GLANCE_RATE_MS / GM_BURST_PER_CPU / ncpu;
	if (ms >= max_ms)
		return max_ms;
	return Max((int) ms, min_ms);
}

/*
 * Whether a process works, from what was read of it: a statement started
 * in it since the last look, a top-level statement runs in it (a COPY FROM
 * STDIN or a suspended portal waits for its client inside one), or it does
 * not wait for its client.  One that waits between statements does not,
 * whatever it grew over the last window: its statement ended (its next one
 * sets started), and counted as working it would take twice that growth
 * from the budget before a statement that just started.
 */
static bool
proc_works(const GmGuardProc *p)
{
	return p->started || p->in_statement || !p->waits_for_client;
}

/* A process's group: its parallel query's leader, or itself. */
static int
group_of(const GmGuardProc *p)
{
	return p->group != 0 ? p->group : p->pid;
}

/*
 * qsort: the earliest work first; ties by group (a group's processes
 * together, the group of the lowest pid first: an order that holds from one
 * look to the next), the larger VmData first, then the lower pid.
 */
static int
cmp_since_asc(const void *a, const void *b)
{
	const GmGuardProc *x = (const GmGuardProc *) a;
	const GmGuardProc *y = (const GmGuardProc *) b;

	if (x->since != y->since)
		return (x->since > y->since) - (x->since < y->since);
	if (group_of(x) != group_of(y))
		return (group_of(x) > group_of(y)) - (group_of(x) < group_of(y));
	if (x->vmdata != y->vmdata)
		return (x->vmdata < y->vmdata) - (x->vmdata > y->vmdata);
	return (x->pid > y->pid) - (x->pid < y->pid);
}

/* The end of procs[i]'s run of its group (sorted: a group's processes of one look together). */
static int
group_end(const GmGuardProc *procs, int n, int i)
{
	int			end = i + 1;

	while (end < n && group_of(&procs[end]) == group_of(&procs[i]))
		end++;
	return end;
}

/*
 * The growth a working process claims twice: its last window's, but for a
 * fresh one at most what its work mapped since it began (the window's is
 * mostly its previous statement's: in a mixed workload, short statements
 * that had ended took twice what they no longer used).
 */
static int64
growth_claim(const GmGuardProc *p)
{
	int64		growth = p->growth == GM_GROWTH_UNKNOWN ? 0 : Max(p->growth, 0);

	if (p->fresh)
		growth = Min(growth, Max(p->vmdata - p->since_vmdata, 0));
	return growth;
}

/*
 * Whether a working process takes part in the halvings: it was not seen
 * waiting in pg_sleep or to write to its client at this look and the one
 * before (stalled, monitor.c), where its statement does not grow; such a
 * one keeps its equal share only.  Growth is not the test: a sort between two doublings
 * or a hash table filling before it grows may not grow for a window, and
 * needs its room when it does.
 */
static bool
halving_claimed(const GmGuardProc *p)
{
	return p->working && !p->stalled;
}

/*
 * The policy: sets each process's decision fields (working, allow, message,
 * reserve, limit, set, lowered) and out.  Sorts procs by since.  With the guard not
 * engaged after this look, every limit is GM_NO_LIMIT.
 */
void
gm_guard_policy(const GmGuardInput *in, GmGuardProc *procs, int n, GmGuardDecision *out)
{
	GmGuardLevels lv;
	int64		budget;
	int64		reserve;
	int64		shift = gm_guard_reserve_shift(in->limit, n);
	int64		message;
	int			nworking = 0;
	int			nidle;

	memset(out, 0, sizeof(*out));
	out->headroom = -1;
	out->shift = shift;
	out->shift_unfunded = reserve_excess(in->limit, n) - shift;
	out->engaged = in->usage >= 0 && gm_guard_engaged_after(in->limit, in->usage + shift, in->engaged);
	if (in->limit > 0)
		gm_guard_levels(in->limit, &out->levels);
	lv = out->levels;

	for (int i = 0; i < n; i++)
	{
		GmGuardProc *p = &procs[i];

		p->working = proc_works(p);
		p->allow = 0;
		p->message = 0;
		p->reserve = 0;
		p->limit = GM_NO_LIMIT;
		p->set = false;
		p->lowered = false;
		if (p->working)
			nworking++;
	}
	out->nworking = nworking;
	/* Not engaged: lift whatever is set. */
	if (!out->engaged)
	{
		for (int i = 0; i < n; i++)
			procs[i].set = procs[i].cur_limit != GM_NO_LIMIT;
		return;
	}

	out->headroom = Max(lv.target - in->usage, 0);
	budget = out->headroom - shift;
	for (int i = 0; i < n; i++)
		if (procs[i].working)
			budget -= Max(procs[i].vmdata - procs[i].rss, 0);
	budget += Max(in->asked_pending, 0);
	budget = Max(budget, 0);
	out->budget = budget;

	/* The reserves, in the margin: shrunk when they do not fit. */
	reserve = GM_GUARD_PROC_RESERVE;
	out->reserve_wanted = reserve;
	if (n > 0 && reserve * n > gm_pct(lv.margin, GM_GUARD_RESERVE_SHARE))
	{
		reserve = Max(gm_pct(lv.margin, GM_GUARD_RESERVE_SHARE) / n, GM_GUARD_RESERVE_FLOOR);
		out->reserve_shrunk = true;
	}
	out->reserve = reserve;

	qsort(procs, n, sizeof(GmGuardProc), cmp_since_asc);
	nidle = n - nworking;

	/*
	 * A working process's reserve is what is left of it under the limit in
	 * force; it gets back what it mapped of it from the budget, below (see
	 * the head of this file).  Not working, it keeps all of it (it maps
	 * only at its idle point, where an ERROR becomes FATAL); limited for
	 * the first time, the margin holds it.
	 */
	for (int i = 0; i < n; i++)
	{
		GmGuardProc *p = &procs[i];

		p->reserve = reserve;
		if (p->working && p->cur_limit != GM_NO_LIMIT)
			p->reserve = Min(reserve, Max(p->cur_limit - p->vmdata, 0));
	}

	/* Admitted statements first: what they reserved and have not mapped. */
	for (int i = 0; i < n; i++)
	{
		GmGuardProc *p = &procs[i];

		p->allow = Min(Max(p->reserved, 0), budget);
		budget -= p->allow;
	}

	/*
	 * Those not working: at most GM_GUARD_FLOOR each, from at most half of
	 * the budget, and only twice their last growth while others work (their
	 * reserve covers small work); all of the budget when none works.  And
	 * at least room for a client message, not taken from the budget.
	 */
	message = Min(GM_GUARD_MESSAGE, budget);
	message -= message % GM_GUARD_MESSAGE_GRAIN;
	out->message = message;

	/*
	 * The pool: a part of what is left that no limit of this look gives
	 * to anybody, from which a statement that takes a share, its need, or
	 * more as it runs raises its own limit at once (gm_shmem_guard_raise),
	 * until the next look counts what it took.  So the limits in force add
	 * up to the budget at most, raises included (the message's room, above,
	 * is taken from neither).
	 */
	out->pool = gm_pct(budget, Min(Max(in->pool_share, 0), 100));
	out->pool -= out->pool % GM_GUARD_GRAIN;
	budget -= out->pool;
	if (nidle > 0)
	{
		int64		pool = nworking > 0 ? budget / 2 : budget;
		int64		each = Min(GM_GUARD_FLOOR, pool / nidle);

		for (int i = 0; i < n; i++)
		{
			GmGuardProc *p = &procs[i];
			int64		growth = p->growth == GM_GROWTH_UNKNOWN ? 0 : Max(p->growth, 0);
			int64		more;

			if (p->working)
				continue;
			more = Min(nworking > 0 ? Min(2 * growth, each) : each, budget);
			/* Coarse: a usage that moves a little changes no idle limit. */
			more -= more % GM_GUARD_GRAIN;
			p->allow += more;
			budget -= more;
		}
	}
	/*
	 * Working processes, the earliest first: what they mapped of their
	 * reserve, and twice their growth claim ...
	 */
	for (int i = 0; i < n; i++)
	{
		GmGuardProc *p = &procs[i];
		int64		more;

		if (!p->working)
			continue;
		more = Min(reserve - p->reserve, budget);
		p->reserve += more;
		budget -= more;
		more = Min(2 * growth_claim(p), budget);

		p->allow += more;
		budget -= more;
	}
	/*
	 * ... then what is left: half in equal shares, so that a statement that
	 * just started, its growth unknown, gets a share of the room; the other half
	 * halved, earliest first, the latest the remainder (all of it when one
	 * works alone), so that in a burst whose growth is not known yet the
	 * first ones still have the room to complete; a parallel query's
	 * processes take their halvings together, in equal parts (one of them
	 * at its limit ends the query).  The shares are rounded
	 * down to GM_GUARD_GRAIN (a usage that moves a little changes no limit:
	 * a thousand prlimit calls per look otherwise); the earliest takes what
	 * the rounding leaves.
	 */
	if (nworking > 0)
	{
		int64		share = budget / 2 / nworking;
		int64		halves;
		int64		rounded = 0;
		int			ngroups = 0;
		int			seen = 0;
		int			earliest = -1;
		bool		any_claimed = false;

		share -= share % GM_GUARD_GRAIN;
		halves = budget - share * nworking;
		for (int i = 0; i < n; i++)
			any_claimed = any_claimed || halving_claimed(&procs[i]);
		/* Every working process has its equal share. */
		for (int i = 0; i < n; i++)
			if (procs[i].working)
				procs[i].allow += share;

		/*
		 * The halvings: to the groups with a process that claims them (to
		 * every working group when none does).
		 */
		for (int i = 0, end; i < n; i = end)
		{
			end = group_end(procs, n, i);
			for (int j = i; j < end; j++)
				if (any_claimed ? halving_claimed(&procs[j]) : procs[j].working)
				{
					ngroups++;
					break;
				}
		}
		for (int i = 0, end; i < n; i = end)
		{
			int64		half = 0;
			int64		each;
			int			members = 0;
			bool		claims = false;

			end = group_end(procs, n, i);
			for (int j = i; j < end; j++)
				claims = claims || (any_claimed ? halving_claimed(&procs[j]) : procs[j].working);
			if (!claims)
				continue;
			for (int j = i; j < end; j++)
				if (procs[j].working)
				{
					members++;
					if (earliest < 0)
						earliest = j;
				}

			/*
			 * A group takes the halvings its working processes would take in
			 * turn (the last group all that is left), in equal parts; what
			 * the rounding leaves goes to the earliest.
			 */
			if (++seen == ngroups)
				half = halves;
			else
				for (int m = 0; m < members; m++)
					half += (halves - half) / 2;
			halves -= half;
			each = half / members;
			each -= each % GM_GUARD_GRAIN;
			for (int j = i; j < end; j++)
				if (procs[j].working)
					procs[j].allow += each;
			rounded += half - each * members;
		}
		procs[earliest].allow += rounded + halves;
		budget = 0;
	}

	for (int i = 0; i < n; i++)
	{
		GmGuardProc *p = &procs[i];

		p->message = p->working ? 0 : Max(message - p->allow, 0);
		/* Even: a process's own first limit is odd (shmem.c). */
		p->limit = (p->vmdata + p->allow + p->message + p->reserve) & ~(int64) 1;
		if (p->cur_limit == GM_NO_LIMIT || p->limit < p->cur_limit)
		{
			p->set = true;
			p->lowered = true;
		}
		else if (p->limit == p->cur_limit)
			p->set = false;		/* unchanged */
		else
			/* A small raise waits while the limit in force leaves room. */
			p->set = !(p->limit - p->cur_limit < GM_GUARD_SLACK &&
					   p->cur_limit - p->vmdata >= GM_GUARD_SLACK);
	}
}

/*
 * A query's need (its executor's peak) after a run that peaked at run
 * bytes (-1: not measured): a larger run sets it at once, a smaller one
 * moves it 1/GM_NEED_DECAY of the way down, so that the need follows what
 * the query takes now, not the largest it ever took.
 */
int64
gm_guard_need_after(int64 need, int64 run)
{
	if (run < 0)
		return need;
	if (run >= need)
		return run;
	return need - (need - run) / GM_NEED_DECAY;
}

/*
 * What a query whose executor needs need bytes maps: need times the ratio
 * of mapped to executor memory (rounded up, in thousandths) of the run
 * that mapped most, mapped over its executor's at_exec, where that run was
 * at least 1/GM_NEED_MAPPED_OF of the need; -1 (unknown) without one.
 */
int64
gm_guard_mapped_need(int64 need, int64 mapped, int64 at_exec)
{
	int64		permille;

	if (need <= 0 || mapped < at_exec || at_exec <= 0 ||
		at_exec < need / GM_NEED_MAPPED_OF)
		return -1;
	if (need == at_exec)
		return mapped;
	permille = (mapped / at_exec) * 1000 + ((mapped % at_exec) * 1000 + at_exec - 1) / at_exec;
	return Max(need, need / 1000 * permille + need % 1000 * permille / 1000);
}

/*
 * What a statement with a reservation still adds to the usage, as of a
 * look: what it has not mapped of its need (none once its reservation went
 * back: returned), and what it mapped and has not touched (gap: VmData less
 * RssAnon), which it touches without asking anyone; so a statement past
 * its need still holds its gap, and the admission does not count as free
 * what a sort's doubling arrays will fill.  Unknown readings (-1) count 0.
 */
int64
gm_guard_outstanding(int64 need, int64 grown, int64 gap, bool returned)
{
	int64		rest = returned ? 0 : Max(need - Max(grown, 0), 0);

	return rest + Max(gap, 0);
}

/* The soft RLIMIT_DATA of a statement with grant bytes, at VmData base. */
int64
gm_guard_grant_limit(int64 base, int64 grant)
{
	return base + Max(grant, 0) + GM_GUARD_PROC_RESERVE;
}

/*
 * The start share of a top-level statement whose need is unknown (no
 * record), starting while the guard is engaged: an equal part of what the
 * admission has left (room, the headroom at the monitor's last look, less
 * taken: what the admitted statements still expect and what the waiters
 * need) between it and the held statements already holding a reservation
 * or a share, at most GM_GUARD_START_SHARE, rounded down to GM_GUARD_GRAIN;
 * 0 (none) below GM_WAIT_MIN_NEED, or with the room unknown (-1).  Held as
 * a reservation, the monitor serves it before the growth of the statements
 * that began before it: in a mixed workload their claims of what they had
 * grown took the whole budget from the statement that began last
 * (docs/design.md).
 */
int64
gm_guard_start_share(int64 room, int64 taken, int held)
{
	/* (a grow share of a statement that has grown nothing yet) */
	return gm_guard_grow_share(room, taken, held, 0);
}

/*
 * A share for a statement that nears its limit while it runs, the guard
 * engaged (gm_guard_executor_check), and (grown 0) a start share: an equal part of
 * what the admission has left between it and the others holding a
 * reservation or a share, but at most what it has grown since its start
 * (grown) or GM_GUARD_START_SHARE, whichever is more, so that a statement
 * that keeps growing asks as often as its size doubles, not every 16 MB.
 * 0 (none) below GM_WAIT_MIN_NEED, or with the room unknown (-1).
 */
int64
gm_guard_grow_share(int64 room, int64 taken, int others, int64 grown)
{
	int64		share;

	if (room < 0 || room - Max(taken, 0) <= 0)
		return 0;
	share = Min(Max(GM_GUARD_START_SHARE, grown), (room - Max(taken, 0)) / (Max(others, 0) + 1));
	share -= share % GM_GUARD_GRAIN;
	return share >= GM_WAIT_MIN_NEED ? share : 0;
}

/* qsort: arrival order. */
static int
cmp_arrival(const void *a, const void *b)
{
	uint64		x = ((const GmAdmitWaiter *) a)->arrival;
	uint64		y = ((const GmAdmitWaiter *) b)->arrival;

	return (x > y) - (x < y);
}

/*
 * The admission: sets each waiter's admit, hopeless and grant from
 * available bytes (ceiling: the most ever available, -1 = unknown);
 * returns how many go with their need.  Sorts waiters by arrival.
 */
int
gm_guard_admit(int64 available, int64 ceiling, GmAdmitWaiter *waiters, int n)
{
	int64		left = available;
	int			admitted = 0;

	qsort(waiters, n, sizeof(GmAdmitWaiter), cmp_arrival);
	for (int i = 0; i < n; i++)
	{
		GmAdmitWaiter *w = &waiters[i];
		int64		need = Max(w->need, 0);

		w->hopeless = ceiling >= 0 && need > ceiling;
		w->admit = !w->hopeless && need <= left;
		if (w->admit)
		{
			left -= need;
			admitted++;
		}
		/* Passed long enough: what frees from now on is kept for it. */
		else if (!w->hopeless && w->patience_ms > 0 &&
				 w->waited_ms * 100 >=
				 Min(w->patience_ms, GM_ADMIT_PASS_MAX_MS) * GM_ADMIT_PASS_SHARE)
			left -= need;
	}
	/*
	 * Who runs now without its need: what is left, less the needs of the
	 * waiters that came before it (the kept ones are out of left already).
	 */
	{
		int64		ahead = 0;

		for (int i = 0; i < n; i++)
		{
			GmAdmitWaiter *w = &waiters[i];
			bool		kept = w->patience_ms > 0 &&
				w->waited_ms * 100 >= Min(w->patience_ms, GM_ADMIT_PASS_MAX_MS) * GM_ADMIT_PASS_SHARE;

			w->granted = w->mine && !w->admit && (w->due || w->hopeless);
			w->grant = 0;
			if (w->granted)
			{
				w->grant = Max(left - ahead, 0);
				left -= w->grant;
			}
			else if (!w->admit && !w->hopeless && !kept)
				ahead += Max(w->need, 0);
		}
	}
	return admitted;
}
