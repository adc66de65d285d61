/*-------------------------------------------------------------------------
 *
 * monitor.c
 *		The memory monitor: a background worker that asks backends to
 *		return the free heap glibc keeps for them when the server's memory
 *		runs short, before the OOM killer acts, and when all backends
 *		together keep more than glibc_malloc.max_total_free.
 *
 * Started when the module is preloaded.  Every GM_MONITOR_TICK_MS it reads
 * what limits the server's memory and how much of it is used (memsource.c
 * finds and reads the cgroup, or the whole machine); a guard that acts
 * glances at the usage alone in between, up to every GM_GUARD_TICK_MS
 * where a burst could reach the level it watches for by the next look.
 *
 * It acts in proportion.  Pressure starts when the usage reaches
 * glibc_malloc.monitor_fraction of the limit and ends below that fraction
 * minus GM_MONITOR_HYSTERESIS; while it lasts, the monitor asks for the
 * bytes above the lower mark.  PSI alone (glibc_malloc.monitor_psi) asks
 * for half of the free heap, at most once per GM_MONITOR_PSI_ROUND_MS.
 * The cap asks for what exceeds it.  Backends are asked largest holder
 * first, through the remote-trim path (served at their idle point, or after
 * their current transaction), and only until the bytes asked cover the
 * need.  A backend asked is not asked again until it has served the
 * request; what it was asked for counts against the need for
 * GM_MONITOR_GRACE_MS only, so that a backend that cannot serve (idle in a
 * transaction) does not stop the others from being asked.  Every round
 * that asks logs, at LOG,
 * how many backends, how many bytes and why; so does the end of pressure,
 * with what the backends returned (their RssAnon drop).
 *
 * It reads only the published snapshots (shmem.c), so it needs neither a
 * database connection nor a transaction; its state is in shared memory,
 * for the glibc_malloc_monitor view.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "port/atomics.h"
#include "postmaster/interrupt.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "glibc_malloc.h"

PGDLLEXPORT void glibc_malloc_monitor_main(Datum arg);

#define MB ((int64) 1024 * 1024)

#define GM_MONITOR_TICK_MS		250 /* how often the limits are read */
#define GM_GUARD_FRESH_MS	(2 * GM_MONITOR_TICK_MS)	/* work younger than
														 * this is not in a
														 * whole growth window */
#define GM_MONITOR_HYSTERESIS	0.05	/* pressure ends this far below */
#define GM_MONITOR_PSI_ROUND_MS 10000	/* PSI's avg10 needs 10 s to move */
#define GM_MONITOR_GRACE_MS		1000	/* a request not served by then may
											 * never be (idle in transaction) */
#define GM_MONITOR_MIN_FREE		(256 * 1024)	/* not worth a trim below */
#define GM_MONITOR_LOG_MS		10000	/* log rounds of one episode this often */

/*
 * The memory guard (glibc_malloc.memory_guard): from its engage level on
 * (guard_policy.c has the levels and the policy), it gives every guarded
 * process (gm_guarded_process) a soft RLIMIT_DATA with prlimit(2), so that
 * together they cannot add more than the headroom up to the target before
 * the next look.  The monitor reads, calls the policy, and sets the limits.
 */
#define GM_GUARD_TICK_MS	50		/* how often the monitor looks while engaged */
#define GM_GUARD_WAKE_MS	10		/* statement starts wake it at most this often */
#define GM_GUARD_REREAD_MS	1000	/* an idle process's VmData is read this often */

/* GUCs (SIGHUP: the monitor is server-wide policy). */
static int	memory_guard = GM_GUARD_CGROUP;
static bool monitor_enabled = true;
static double monitor_fraction = 0.9;
static double monitor_psi = 10.0;
static int	max_total_free = -1;	/* kB */
static char *monitor_cgroup = NULL;

/*
 * Backends with a trim request pending, by slot: the monitor's own, and
 * others' it found (glibc_malloc_trim_backend), until served (the request
 * flag is gone from the slot and the snapshot after serving is published)
 * or gone.  A request served within GM_MONITOR_GRACE_MS
 * counts against the need; one that is not may never be (a backend idle in
 * a transaction, a worker without transactions), so its bytes stop
 * counting and the next holders are asked instead.  Allocated once.
 */
typedef struct GmAsked
{
	int			pid;			/* 0 = none */
	uint32		served;			/* its count of served requests before */
	TimestampTz asked_at;		/* the monitor's clock (monotonic) */
	int64		rss_before;
	int64		bytes;			/* its free heap when asked */
	bool		ours;			/* the monitor asked (counted in the view) */
} GmAsked;

static GmAsked *asked = NULL;
static int *live = NULL;		/* settle_asked's: snapshot by slot, -1 = none */
static int	nslots = 0;

/* Pressure bookkeeping. */
static bool pressure = false;
static int64 pressure_since = 0;	/* intervals: gm_monotonic_usec() */
static int64 pressure_returned = 0;
static int64 returned_total = 0;	/* the view's returned_bytes */
static int	pressure_rounds = 0;
static int64 last_psi_round = 0;
static bool over_cap = false;		/* the cap was exceeded at the last look */

/* Rounds not logged yet (see ask_backends). */
static int64 last_log_at = 0;
static int	quiet_rounds = 0;
static int	quiet_count = 0;
static int64 quiet_bytes = 0;

/* The snapshots, read every tick into memory allocated once. */
static GmSnapshot *snaps = NULL;

/* The guard's, by slot: the pid it limits, its limit, its VmData last tick. */
typedef struct GmGuarded
{
	int			pid;			/* 0 = none */
	int64		limit;			/* the guard's soft limit; GM_NO_LIMIT = none */
	/* growth over windows of GM_MONITOR_TICK_MS, whatever the tick */
	int			ref_pid;		/* the process measured; 0 = none */
	int64		ref_vmdata;		/* its VmData at ref_at */
	int64		ref_at;			/* monotonic */
	int64		growth;			/* over the last window; GM_GROWTH_UNKNOWN */
	uint32		starts;			/* the slot's statement starts seen */
	/* the last reading of /proc/PID/status, reused while it idles */
	int			read_pid;		/* 0 = none */
	int64		read_at;		/* monotonic */
	int64		read_vmdata;
	int64		read_rss;
	bool		counted_idle;	/* the last look counted it as not working */
	int			since_pid;		/* the process since is of; 0 = none */
	uint64		since;			/* the look its current work began at */
	int64		since_at;		/* ... monotonic */
	int64		since_vmdata;	/* ... and its VmData then */
	bool		was_working;	/* the last measured look counted since_pid
								 * as working */
	bool		reused;			/* this look reused the last reading */
	bool		applied;		/* limit was set with prlimit (observe:
								 * only noted) */
	int			fail_pid;		/* observe: the process last counted in
								 * would_fail; 0 = none */
	uint32		fail_starts;	/* ... at this count of its starts */
	int			stalled_pid;	/* the process stalled_since is of; 0 = none */
	int64		stalled_since;	/* the first of the looks in a row that saw
								 * its statement wait in pg_sleep or to write
								 * to its client (gm_monotonic_usec); 0 = none */
	int64		stalled_read_at;	/* the last look that read it */
} GmGuarded;

static GmGuarded *guarded = NULL;
static GmGuardProc *cands = NULL;
static bool guard_engaged = false;

/*
 * Between two looks of a calm guard: the limit to glance at the usage of
 * (-1: no glance), and whether the last look was in the stretch where the
 * guard measures (then a glance looks early only at the engage point).
 */
static int64 glance_limit = -1;
static bool glance_measuring = false;
static int64 glance_usage = -1;	/* the usage last seen, reserves' shift in */
static int64 glance_read_at = 0;	/* when it was read (monotonic usec) */
static int	glance_ncpu = 0;	/* the CPUs a burst can grow on; 0 unknown */
static int	guard_nguarded = 0;	/* guarded processes in the last snapshots */
static bool guard_observed = false; /* the last look was in observe */
static uint64 guard_looks = 0;	/* measured looks, numbered */
static GmWaitLook *wait_looks = NULL;	/* admitted statements read this tick */
static int	nlooks = 0;
static int64 guard_last_log = 0;	/* monotonic */
static int	guard_quiet_rounds = 0;	/* tightening rounds not logged yet */
static bool guard_shrunk_logged = false;	/* this episode's shrunk reserve */

/* Bytes as "N MB" (or kB below 10 MB), into a static buffer per call site. */
static const char *
fmt_bytes(char *buf, size_t size, int64 bytes)
{
	if (bytes >= 10 * MB || bytes <= -10 * MB)
		snprintf(buf, size, INT64_FORMAT " MB", bytes / MB);
	else
		snprintf(buf, size, INT64_FORMAT " kB", bytes / 1024);
	return buf;
}

/*
 * Forget the backends that took their request (the flag is gone from their
 * slot), crediting the RssAnon drop their next snapshot shows, and those
 * that left their slot.  O(slots).
 */
static void
settle_asked(const GmSnapshot *snaps, int n)
{
	for (int i = 0; i < nslots; i++)
		live[i] = -1;
	for (int j = 0; j < n; j++)
		live[snaps[j].slot] = j;

	for (int i = 0; i < nslots; i++)
	{
		const GmSnapshot *s;

		if (asked[i].pid == 0)
			continue;
		s = live[i] >= 0 ? &snaps[live[i]] : NULL;
		if (s != NULL && s->pid == asked[i].pid)
		{
			if (gm_shmem_trim_pending(s))
				continue;		/* not served yet */
			if (s->served == asked[i].served)
				continue;		/* taken: trimming, its snapshot follows */
			if (asked[i].ours && s->rss_anon_bytes >= 0 && asked[i].rss_before > s->rss_anon_bytes)
			{
				int64		drop = asked[i].rss_before - s->rss_anon_bytes;

				pressure_returned += drop;
				returned_total += drop;
			}
		}
		asked[i].pid = 0;
	}
}

/* qsort: largest resident free heap first. */
static int
cmp_free_desc(const void *a, const void *b)
{
	int64		x = gm_snapshot_free_heap((const GmSnapshot *) a);
	int64		y = gm_snapshot_free_heap((const GmSnapshot *) b);

	return (x < y) - (x > y);
}

/*
 * Ask the largest holders of free heap, not asked already, to return it,
 * until the bytes asked cover need, counting what was asked before and not
 * served yet (the usage still includes it) and backends whose trim request
 * is still pending.  The first round of an episode (first) is logged at
 * once; later ones at most every GM_MONITOR_LOG_MS, with the rounds in
 * between added up.
 */
static bool
ask_backends(GmSnapshot *snaps, int n, int64 need, const char *why, bool first)
{
	GmMonitorState *st = gm_shmem_monitor();
	TimestampTz now = GetCurrentTimestamp();
	int64		mono = gm_monotonic_usec();
	int			count = 0;
	int64		bytes = 0;
	char		b1[32];
	char		b2[32];

	/* Pending requests still within their grace will return that much. */
	for (int i = 0; i < nslots; i++)
		if (asked[i].pid != 0 && mono - asked[i].asked_at < (int64) GM_MONITOR_GRACE_MS * 1000)
			need -= asked[i].bytes;
	qsort(snaps, n, sizeof(GmSnapshot), cmp_free_desc);
	for (int i = 0; i < n && need > 0; i++)
	{
		GmSnapshot *s = &snaps[i];
		int64		f = gm_snapshot_free_heap(s);
		GmAsked    *a = &asked[s->slot];
		int			r;

		if (f < GM_MONITOR_MIN_FREE)
			break;
		if (s->pid == MyProcPid || a->pid == s->pid)
			continue;			/* asked already: counted above, or unserved */
		r = gm_shmem_ask_trim(s, &a->served);
		if (r == 0)
			continue;
		a->pid = s->pid;
		a->asked_at = gm_monotonic_usec();	/* before it can serve */
		a->rss_before = s->rss_anon_bytes;
		a->bytes = f;
		a->ours = r > 0;
		need -= f;				/* still pending (r < 0) or asked now */
		if (r < 0)
			continue;
		count++;
		bytes += f;
	}
	if (count == 0)
		return false;

	st->changecount++;
	pg_write_barrier();
	st->rounds++;
	st->backends_asked += count;
	st->asked_bytes += bytes;
	snprintf(st->last_action, sizeof(st->last_action),
			 "asked %d %s to return %s of free heap: %s",
			 count, count == 1 ? "backend" : "backends", fmt_bytes(b1, sizeof(b1), bytes), why);
	st->last_action_at = now;
	pg_write_barrier();
	st->changecount++;
	pressure_rounds++;

	quiet_rounds++;
	quiet_count += count;
	quiet_bytes += bytes;
	if (!first && last_log_at != 0 && mono - last_log_at < (int64) GM_MONITOR_LOG_MS * 1000)
		return true;
	if (quiet_rounds == 1)
		ereport(LOG,
				(errmsg_plural("glibc_malloc memory monitor: asked %d backend to return %s of free heap",
							   "glibc_malloc memory monitor: asked %d backends to return %s of free heap",
							   count, count, fmt_bytes(b2, sizeof(b2), bytes)),
				 errdetail_internal("%s", why)));
	else
		ereport(LOG,
				(errmsg("glibc_malloc memory monitor: asked %d backends to return %s of free heap in %d rounds over %.1f s",
						quiet_count, fmt_bytes(b2, sizeof(b2), quiet_bytes), quiet_rounds,
						last_log_at ? (double) (mono - last_log_at) / USECS_PER_SEC : 0.0),
				 errdetail_internal("The last round: %s", st->last_action)));
	last_log_at = mono;
	quiet_rounds = 0;
	quiet_count = 0;
	quiet_bytes = 0;
	return true;
}

/*
 * Set the guard's limit of the process in slot (GM_NO_LIMIT: lift it), and
 * the lowest of its three limits with prlimit(2); true if that worked.
 */
static bool
guard_set(int slot, int pid, int64 limit)
{
	static bool warned = false;
	int64		want;
	int64		own;
	int64		cur;

	/* Even: a process's own first limit is odd (shmem.c). */
	if (limit != GM_NO_LIMIT)
		limit &= ~(int64) 1;
	guarded[slot].pid = limit == GM_NO_LIMIT ? 0 : pid;
	guarded[slot].limit = limit;
	guarded[slot].applied = limit != GM_NO_LIMIT;
	if (gm_shmem_set_guard_limit(slot, pid, limit) < 0)
	{
		guarded[slot].pid = 0;	/* it left its slot */
		return false;
	}
	/* Lifted: not counted as anything (a start waits for the next look). */
	if (limit == GM_NO_LIMIT)
		gm_shmem_set_guard_working(slot, pid, false);

	/*
	 * The backend may change its own limit, or raise the guard's, meanwhile
	 * and call setrlimit before or after this prlimit: if either changed
	 * while this one was set, set again, so the last call has both.
	 */
	for (int i = 0; i < 3; i++)
	{
		int64		rc;

		own = gm_shmem_slot_own_limit(slot);
		/* What the slot holds now: this limit, or a raise of the process since. */
		cur = gm_shmem_slot_guard_limit(slot);
		want = Min(cur, own);

		/*
		 * Under ProcArrayLock, the slot and its PGPROC still holding pid:
		 * as in send_request, the pid cannot have been reaped and handed to
		 * an unrelated process meanwhile (the slot lets go of it before
		 * the process leaves the proc array).
		 */
		LWLockAcquire(ProcArrayLock, LW_SHARED);
		if (gm_shmem_slot_holds(slot, pid) && GetPGProcByNumber(slot)->pid == pid)
			rc = gm_set_data_limit(pid, want);
		else
		{
			rc = -1;
			errno = ESRCH;
		}
		LWLockRelease(ProcArrayLock);
		if (rc < 0)
		{
			int			save_errno = errno;

			/* Not allowed (a security module): say so once; gone: nothing. */
			if (!warned && save_errno != ESRCH && kill(pid, 0) == 0)
			{
				errno = save_errno;
				ereport(WARNING,
						(errmsg("glibc_malloc memory guard: could not set the data size limit of process %d: %m", pid),
						 errhint("The guard needs prlimit(2) on the server's processes.")));
				warned = true;
			}
			return false;
		}
		if (gm_shmem_slot_own_limit(slot) == own && gm_shmem_slot_guard_limit(slot) == cur)
			break;
	}
	return true;
}

/* Note the limit the guard would set (memory_guard = observe): sets none. */
static void
guard_note(int slot, int pid, int64 limit)
{
	guarded[slot].pid = limit == GM_NO_LIMIT ? 0 : pid;
	guarded[slot].limit = limit;
	guarded[slot].applied = false;
}

/*
 * Lift the limits the guard set (lift_applied) and forget the ones it only
 * noted (forget_noted): both when pressure is over, the guard off, or the
 * monitor exits; the set ones when it turns to observe; the noted ones
 * when it turns from observe to acting (the policy then sets them).
 */
static void
guard_lift(bool lift_applied, bool forget_noted)
{
	for (int i = 0; i < nslots; i++)
	{
		if (guarded[i].pid == 0)
			continue;
		if (guarded[i].applied && lift_applied)
			(void) guard_set(i, guarded[i].pid, GM_NO_LIMIT);
		else if (!guarded[i].applied && forget_noted)
			guard_note(i, guarded[i].pid, GM_NO_LIMIT);
	}
}

/* Lift every limit the guard set or noted. */
static void
guard_lift_all(void)
{
	guard_lift(true, true);
}

/*
 * The usage as the guard counts it: with the reserves of the guarded
 * processes of the last look at their floor beyond their share of the
 * margin (gm_guard_reserve_shift), so that it engages earlier.
 */
static int64
guard_usage(const GmLimits *l)
{
	return l->usage + gm_guard_reserve_shift(l->limit, guard_nguarded);
}

/* Whether the guard can act on these limits (read, of a source it covers). */
static bool
guard_active(const GmLimits *l)
{
	return monitor_enabled && gm_guard_covers(memory_guard, l->source) &&
		l->limit > 0 && l->usage >= 0;
}

/*
 * Whether the guard is engaged after this tick's look at l: what
 * guard_tick decides, for the monitor's asks that come before it.
 */
static bool
guard_engaged_after(const GmLimits *l)
{
	return guard_active(l) && gm_guard_engaged_after(l->limit, guard_usage(l), guard_engaged);
}

/* The free heap asked for and not returned yet, within the grace period. */
static int64
asked_pending(void)
{
	int64		mono = gm_monotonic_usec();
	int64		bytes = 0;

	for (int i = 0; i < nslots; i++)
		if (asked[i].pid != 0 && mono - asked[i].asked_at < (int64) GM_MONITOR_GRACE_MS * 1000)
			bytes += asked[i].bytes;
	return bytes;
}

/*
 * Measure the guarded processes (VmData, RssAnon, growth over windows of
 * GM_MONITOR_TICK_MS, whether they wait for their client) into cands; in
 * observe, count into *would_fail those that mapped past the limit the
 * last look would have set.  Returns how many.
 */
static int
guard_measure(const GmLimits *l, const GmSnapshot *snaps, int n, bool observe, int *would_fail)
{
	int64		mono = gm_monotonic_usec();
	bool		active = guard_active(l);
	int			ncand = 0;
	char		b1[32],
				b2[32];

	if (active && gm_guard_measure(l->limit, guard_usage(l), guard_engaged))
		guard_looks++;

	/*
	 * The candidates, with their VmData now: also in the last stretch
	 * before engaging, so that the first engaged look knows who is growing.
	 */
	for (int i = 0; i < n && active && gm_guard_measure(l->limit, guard_usage(l), guard_engaged); i++)
	{
		const GmSnapshot *s = &snaps[i];
		GmGuarded  *g = &guarded[s->slot];
		GmGuardProc *c;
		int64		vm;
		uint32		starts;
		bool		waits;
		bool		in_statement;
		int64		prev_vm;

		if (!s->guarded || s->pid == 0)
			continue;
		c = &cands[ncand];
		waits = gm_shmem_waits_for_client(s);
		starts = gm_shmem_guard_starts(s->slot);
		in_statement = gm_shmem_guard_in_statement(s->slot, s->pid);

		/* The last reading: VmData before a statement that started since. */
		prev_vm = g->read_pid == s->pid ? g->read_vmdata : -1;

		/*
		 * /proc/PID/status (one read) is most of a look's cost: read it again
		 * only for a process that may have changed.  One that the last look
		 * counted as idle, with its limit set (a statement that starts in
		 * it counts in its slot's starts), no start since, still waiting for
		 * its client: its last reading, if younger than GM_GUARD_REREAD_MS
		 * (catalog catch-up and NOTIFY delivery at its idle point stay in
		 * its reserve meanwhile).
		 */
		g->reused = g->read_pid == s->pid && g->counted_idle && g->pid == s->pid &&
			g->limit != GM_NO_LIMIT && waits && !in_statement && starts == g->starts &&
			mono - g->read_at < (int64) GM_GUARD_REREAD_MS * 1000;
		if (g->reused)
		{
			vm = g->read_vmdata;
			c->rss = g->read_rss;
		}
		else
		{
			int64		rss;

			/* Both in one read of its status. */
			gm_proc_vmdata_rss(s->pid, &vm, &rss);
			if (vm < 0)
				continue;

			/*
			 * RssAnon only counts for a working process (the policy takes
			 * what it mapped but not resident off the budget): not for one
			 * that waits for its client and started nothing.
			 */
			if (!waits || in_statement || starts != g->starts)
			{
				if ((c->rss = rss) < 0)
					continue;	/* no RssAnon (a kernel before 4.5) */
			}
			else
				c->rss = vm;
			c->rss = Max(c->rss, 0);
			g->read_pid = s->pid;
			g->read_at = mono;
			g->read_vmdata = vm;
			g->read_rss = c->rss;

			/*
			 * Observe: mapped past the limit the last look would have set,
			 * so its statement would have failed with "out of memory"
			 * (once a statement).  Not one counted idle that started a
			 * statement since: acting, the guard makes that start wait for
			 * a look that raises its limit.
			 */
			if (observe && g->pid == s->pid && g->limit != GM_NO_LIMIT && vm > g->limit &&
				!(g->counted_idle && starts != g->starts) &&
				!(g->fail_pid == s->pid && g->fail_starts == starts))
			{
				g->fail_pid = s->pid;
				g->fail_starts = starts;
				(*would_fail)++;
				ereport(LOG,
						(errmsg("glibc_malloc memory guard (observe): would refuse memory to process %d: it maps %s, past the %s the guard would have allowed it",
								s->pid, fmt_bytes(b1, sizeof(b1), vm), fmt_bytes(b2, sizeof(b2), g->limit)),
						 errdetail_internal("With glibc_malloc.memory_guard = cgroup its statement would have failed with \"out of memory\".")));
			}
		}
		ncand++;
		c->slot = s->slot;
		c->pid = s->pid;
		c->vmdata = vm;
		/*
		 * Growth over the last window of GM_MONITOR_TICK_MS: ticks are 50
		 * ms while engaged, too short to tell a working process.  Unknown
		 * for a process not measured lately (the usage jumped).
		 */
		if (g->ref_pid != s->pid || mono - g->ref_at > (int64) 2 * GM_MONITOR_TICK_MS * 1000)
		{
			g->ref_pid = s->pid;
			g->ref_vmdata = vm;
			g->ref_at = mono;
			g->growth = GM_GROWTH_UNKNOWN;
		}
		else if (mono - g->ref_at >= (int64) GM_MONITOR_TICK_MS * 1000)
		{
			g->growth = vm - g->ref_vmdata;
			g->ref_vmdata = vm;
			g->ref_at = mono;
		}
		c->growth = g->growth;
		c->grown = vm - g->ref_vmdata;
		c->waits_for_client = waits;
		/* A statement started since the last look: working at once. */
		c->started = starts != g->starts;
		c->in_statement = in_statement;
		/*
		 * Its statement seen waiting so at every look for an engaged tick
		 * or more: not a moment's ClientWrite (a start wakes the monitor,
		 * and two looks may be a millisecond apart).
		 */
		if (!gm_shmem_stalled(s->slot, s->pid))
			g->stalled_since = 0;
		else if (g->stalled_since == 0 || g->stalled_pid != s->pid || starts != g->starts ||
				 mono - g->stalled_read_at > (int64) GM_MONITOR_TICK_MS * 1000)
			g->stalled_since = Max(mono, 1);	/* (a look skipped it: not in a row) */
		g->stalled_read_at = mono;
		g->stalled_pid = s->pid;
		c->stalled = g->stalled_since != 0 &&
			mono - g->stalled_since >= (int64) GM_GUARD_TICK_MS * 1000;
		g->starts = starts;

		/*
		 * When its current work began, as the number of the look that first
		 * saw it: a new statement, or a process the last measured look did
		 * not count as working, takes this look's; a statement that goes on
		 * keeps its own (the policy serves the earliest first, and breaks
		 * the ties of a look by group: a parallel query's processes
		 * together).
		 */
		if (g->since_pid != s->pid || c->started || !g->was_working)
		{
			g->since_pid = s->pid;
			g->since = guard_looks;
			g->since_at = mono;
			/*
			 * A statement that started since the last reading may have
			 * mapped before this one: at most that reading (an older one,
			 * of an idle backend, only lowers the claim).
			 */
			g->since_vmdata = c->started && prev_vm >= 0 ? Min(vm, prev_vm) : vm;
		}
		c->since = g->since;
		/* Growth shows its work only after a whole window of it. */
		c->fresh = mono - g->since_at < (int64) GM_GUARD_FRESH_MS * 1000;
		c->since_vmdata = g->since_vmdata;
		/* Waiting for memory (memory_wait): idle until admitted. */
		if (gm_shmem_waits_for_memory(s->slot, s->pid))
		{
			c->started = false;
			c->in_statement = false;
			c->waits_for_client = true;
		}
		c->reserved = gm_shmem_wait_reserved(s->slot, s->pid, vm);
		c->cur_limit = g->pid == s->pid ? g->limit : GM_NO_LIMIT;
		/* A raise the process took from the pool since is the limit in force. */
		if (c->cur_limit != GM_NO_LIMIT)
		{
			int64		in_slot = gm_shmem_slot_guard_limit(s->slot);

			if (in_slot != GM_NO_LIMIT && (in_slot & 1) == 0 && in_slot > c->cur_limit)
				c->cur_limit = in_slot;
		}
	}

	/*
	 * A parallel worker's work began with its leader's statement: its
	 * leader's number, and its leader's pid as its group, so that the
	 * policy serves a query's processes together.  Read without a lock
	 * (lockGroupLeader and the pids): at worst one look late.  A slot that
	 * another process has taken since this look read it leaves the process
	 * a group of its own, as a leader that exited does where its pid reads
	 * 0 (PostgreSQL 17 and later; before, the pid stays: the same group).
	 */
	for (int i = 0; i < ncand; i++)
	{
		volatile PGPROC *proc = &ProcGlobal->allProcs[cands[i].slot];
		PGPROC	   *leader;
		int			leader_pid;
		int			ls;

		cands[i].group = 0;
		if (proc->pid != cands[i].pid)
			continue;
		leader = proc->lockGroupLeader;
		if (leader == NULL || leader == &ProcGlobal->allProcs[cands[i].slot])
			continue;
		ls = leader - ProcGlobal->allProcs;
		if (ls < 0 || ls >= nslots)
			continue;
		leader_pid = ((volatile PGPROC *) leader)->pid;
		if (leader_pid == 0)
			continue;
		cands[i].group = leader_pid;
		if (guarded[ls].since_pid == leader_pid)
			cands[i].since = guarded[ls].since;
	}

	return ncand;
}

/* Log the guard's engaging and letting go, and a shrunk reserve (once an episode). */
static void
guard_log_changes(const GmLimits *l, const GmGuardDecision *dp, bool was_engaged, bool observe, int ncand)
{
	GmGuardDecision d = *dp;
	bool		active = guard_active(l);
	double		frac = active ? (double) l->usage / l->limit : 0;
	const char *obs = observe ? " (observe)" : "";
	char		b1[32],
				b2[32],
				b3[32],
				b4[32];

	if (!was_engaged && guard_engaged)
		ereport(LOG,
				(errmsg("glibc_malloc memory guard%s: %s backends' private memory: %s usage %s is %.0f%% of the %s limit",
						obs, observe ? "would limit" : "limiting",
						gm_limit_source_names[l->source], fmt_bytes(b1, sizeof(b1), l->usage), 100 * frac,
						fmt_bytes(b2, sizeof(b2), l->limit)),
				 errdetail_internal("The guard %s the usage below %s, and %s its limits below %s; the reserves of %d backends count as %s more usage%s%s%s.",
									observe ? "would keep" : "keeps",
									fmt_bytes(b3, sizeof(b3), d.levels.target),
									observe ? "would lift" : "lifts",
									fmt_bytes(b1, sizeof(b1), d.levels.release),
									ncand, fmt_bytes(b2, sizeof(b2), d.shift),
									d.shift_unfunded > 0 ? " (" : "",
									d.shift_unfunded > 0 ? fmt_bytes(b4, sizeof(b4), d.shift_unfunded) : "",
									d.shift_unfunded > 0 ? " of them beyond its cap of 20% of the limit, not counted)" : "")));
	else if (guard_engaged && observe != guard_observed)
		ereport(LOG,
				(errmsg("glibc_malloc memory guard%s: %s backends' private memory while engaged: %s usage %s is %.0f%% of the %s limit",
						obs, observe ? "no longer limiting, would limit" : "limiting",
						gm_limit_source_names[l->source], fmt_bytes(b1, sizeof(b1), l->usage), 100 * frac,
						fmt_bytes(b2, sizeof(b2), l->limit))));
	else if (was_engaged && !guard_engaged)
	{
		guard_lift_all();
		if (active)
			ereport(LOG,
					(errmsg("glibc_malloc memory guard%s: limits %s: %s usage %s is %.0f%% of the %s limit",
							obs, observe ? "would be lifted" : "lifted",
							gm_limit_source_names[l->source], fmt_bytes(b1, sizeof(b1), l->usage), 100 * frac,
							fmt_bytes(b2, sizeof(b2), l->limit))));
	}

	guard_observed = observe;
	if (!guard_engaged)
		guard_shrunk_logged = false;
	else if (d.reserve_shrunk && !guard_shrunk_logged)
	{
		ereport(LOG,
				(errmsg("glibc_malloc memory guard%s: the reserve for small work %s shrunk to %s per backend",
						obs, observe ? "would be" : "is", fmt_bytes(b1, sizeof(b1), d.reserve)),
				 errdetail_internal("The reserves of %d backends (%s each) do not fit in half of the guard's %s margin; small statements, catalog catch-up and NOTIFY delivery may get \"out of memory\".",
									ncand, fmt_bytes(b2, sizeof(b2), d.reserve_wanted),
									fmt_bytes(b3, sizeof(b3), d.levels.margin))));
		guard_shrunk_logged = true;
	}

}

/*
 * Carry out the policy's decisions while engaged: set (observe: note) each
 * limit, publish who counts as working, count and log the lowerings.
 * Returns how many processes are limited.
 */
static int
guard_apply(const GmLimits *l, GmGuardDecision *dp, int ncand, bool observe)
{
	GmMonitorState *st = gm_shmem_monitor();
	GmGuardDecision d = *dp;
	int64		mono = gm_monotonic_usec();
	const char *obs = observe ? " (observe)" : "";
	int			limited = 0;
	int			lowered = 0;
	char		b1[32],
				b2[32],
				b3[32];

	if (guard_engaged)
	{
		/*
		 * Engaged before any limit is set: a statement that starts from now
		 * on waits for a look while it counts as idle.
		 */
		if (!st->guard_engaged)
		{
			st->changecount++;
			pg_write_barrier();
			st->guard_engaged = true;
			pg_write_barrier();
			st->changecount++;
		}
		for (int i = 0; i < ncand; i++)
		{
			GmGuardProc *c = &cands[i];
			int64		orig,
						own,
						cur,
						soft,
						hard;

			/* Observe: note what it would set, and go on. */
			if (observe)
			{
				if (c->set)
				{
					if (c->lowered)
						lowered++;
					guard_note(c->slot, c->pid, c->limit);
				}
				if (guarded[c->slot].limit != GM_NO_LIMIT)
					limited++;
				guarded[c->slot].counted_idle = !c->working;
				continue;
			}

			/*
			 * Counted idle: say so before its limit changes, then look at
			 * its starts again.  A statement that started since this look
			 * read the process either sees "idle" and waits for the next
			 * look, or is seen here: its limit is kept, and it counts as
			 * working (the next look's start flag does the rest).
			 */
			if (!c->working)
			{
				gm_shmem_set_guard_working(c->slot, c->pid, false);
				pg_memory_barrier();
				if (gm_shmem_guard_starts(c->slot) != guarded[c->slot].starts)
				{
					/*
					 * Keep the last look's view and limit: a working
					 * process goes on with its working limit; one counted
					 * idle before goes on waiting for the next look, which
					 * its start woke.
					 */
					gm_shmem_set_guard_working(c->slot, c->pid,
											   guarded[c->slot].pid == c->pid && !guarded[c->slot].counted_idle);
					if (guarded[c->slot].limit != GM_NO_LIMIT)
						limited++;
					continue;
				}
			}

			/*
			 * A small raise waits while the limit in force leaves room (read
			 * with prlimit, unless the process idles since the last look:
			 * then the limit set is in force), and is the one the monitor
			 * set: a raise the process took from the pool since is set again
			 * from this look, which counted it (else it would stay, counted
			 * by no look's budget).
			 */
			if (!c->set &&
				gm_shmem_limits(c->slot, c->pid, &orig, &own, &cur, NULL) &&
				cur == guarded[c->slot].limit &&
				(guarded[c->slot].reused ||
				 (gm_data_limit(c->pid, &soft, &hard) && soft == Min(orig, Min(own, cur)))))
				limited++;
			else
			{
				GmGuarded  *g = &guarded[c->slot];
				int64		vm;

				/*
				 * A lowering from a reading reused: read VmData now, so that
				 * what the idle point added meanwhile (catalog catch-up,
				 * NOTIFY delivery) stays below the limit, with the reserve.
				 */
				if (g->reused && c->lowered &&
					(vm = gm_proc_status_bytes(c->pid, "VmData:")) > g->read_vmdata)
				{
					c->limit += vm - g->read_vmdata;
					g->read_vmdata = vm;
				}

				/*
				 * A lowering: a reservation or a start share its statement
				 * took since this look read it (it began meanwhile) is
				 * served at once, as the next look will, first (the
				 * admission counted it taken): without it the limit just
				 * lowered failed the statement before that look.  Counted
				 * from the VmData read last (what was added just above is
				 * not added twice).
				 */
				if (c->lowered &&
					(vm = gm_shmem_wait_reserved(c->slot, c->pid,
												 g->read_pid == c->pid ? Max(c->vmdata, g->read_vmdata) : c->vmdata)) > c->reserved)
				{
					c->limit += vm - c->reserved;
					c->reserved = vm;
					c->lowered = c->cur_limit == GM_NO_LIMIT || c->limit < c->cur_limit;
				}
				if (c->lowered)
					lowered++;
				if (guard_set(c->slot, c->pid, c->limit))
					limited++;
			}

			/*
			 * Once its limit is set: a statement that starts in it wakes the
			 * monitor (and waits for this) only while it counts as idle.
			 */
			pg_write_barrier();
			gm_shmem_set_guard_working(c->slot, c->pid, c->working);
			guarded[c->slot].counted_idle = !c->working;
		}
		if (lowered > 0)
		{
			st->changecount++;
			pg_write_barrier();
			if (observe)
				st->guard_would_limit += lowered;
			else
			{
				st->guard_rounds++;
				st->guard_lowered += lowered;
			}
			snprintf(st->guard_last_action, sizeof(st->guard_last_action),
					 "%s %d %s: headroom %s, %d working, usage %s of %s",
					 observe ? "would lower" : "lowered",
					 lowered, lowered == 1 ? "limit" : "limits", fmt_bytes(b1, sizeof(b1), d.headroom),
					 d.nworking, fmt_bytes(b2, sizeof(b2), l->usage), fmt_bytes(b3, sizeof(b3), l->limit));
			st->guard_last_action_at = GetCurrentTimestamp();
			pg_write_barrier();
			st->changecount++;
			guard_quiet_rounds++;
			if (guard_last_log == 0 || mono - guard_last_log >= (int64) GM_MONITOR_LOG_MS * 1000)
			{
				ereport(LOG,
						(errmsg("glibc_malloc memory guard%s: %s", obs, st->guard_last_action),
						 errdetail_internal("%d processes %slimited; %d tightening rounds since the last message.",
											limited, observe ? "would be " : "", guard_quiet_rounds)));
				guard_last_log = mono;
				guard_quiet_rounds = 0;
			}
		}
	}

	return limited;
}

/*
 * Publish the guard's state for the views, and for the admission of
 * statements that wait for memory the room and the ceiling.
 */
static void
guard_publish(const GmLimits *l, const GmGuardDecision *dp, int ncand, int limited, int would_fail, bool observe)
{
	GmMonitorState *st = gm_shmem_monitor();
	GmGuardDecision d = *dp;
	int64		mono = gm_monotonic_usec();
	bool		active = guard_active(l);

	st->changecount++;
	pg_write_barrier();
	st->guard_enabled = memory_guard != GM_GUARD_OFF && monitor_enabled;
	st->guard_mode = memory_guard;
	st->guard_observe = observe;
	st->guard_covers = monitor_enabled && gm_guard_covers(memory_guard, l->source);
	st->guard_engaged = guard_engaged;
	/* Observe sets no limit: an out-of-memory is never the guard's. */
	if (guard_engaged && !observe)
		st->guard_engaged_at = mono;
	st->guard_headroom = d.headroom;
	st->guard_limited = guard_engaged && !observe ? limited : 0;
	st->guard_would_fail += would_fail;
	st->guard_reserve = guard_engaged ? d.reserve : -1;
	st->guard_reserve_shrunk = guard_engaged && d.reserve_shrunk;
	pg_write_barrier();
	st->changecount++;

	/*
	 * For the admission of statements that wait for memory (memory_wait):
	 * the room up to the target, engaged or not, so that a burst from a
	 * calm server is admitted as it fits rather than all at once before
	 * the guard engages; and the ceiling, the target less what the guard
	 * cannot move: a need above it never fits, however long it waits.
	 * What it cannot move is the usage less the guarded backends' RssAnon,
	 * counted only on a look that read them (the candidates, every guarded
	 * backend; the last reading of one that idles since): their published
	 * snapshots lag behind a running statement.  Otherwise the ceiling is
	 * the target.  What other processes hold (autovacuum, another program)
	 * counts as unmovable, though some of it frees.
	 */
	if (active)
	{
		GmGuardLevels lv;
		int64		ceiling;

		gm_guard_levels(l->limit, &lv);
		ceiling = lv.target;
		if (ncand > 0)
		{
			int64		movable = 0;

			/*
			 * A working process's RssAnon as read now; one that idles, its
			 * VmData (the look reads only that of those): more than it
			 * holds, so that the ceiling errs high, toward a wait that runs
			 * out, rather than low, toward running a statement that could
			 * have waited (a snapshot's RssAnon lags behind).
			 */
			for (int i = 0; i < ncand; i++)
				movable += Max(cands[i].rss, 0);
			ceiling = lv.target - Max(l->usage - movable, 0);
		}
		gm_shmem_wait_publish(Max(lv.target - l->usage, 0), Max(ceiling, 0), wait_looks, nlooks);
		/* The admission's inputs from this look, for who debugs it (DEBUG2). */
		for (int k = 0; k < nlooks; k++)
			elog(DEBUG2, "glibc_malloc memory wait look: usage " INT64_FORMAT " room " INT64_FORMAT " pid %d vmdata " INT64_FORMAT " gap (whole process) " INT64_FORMAT " returns %d",
				 l->usage, Max(lv.target - l->usage, 0), wait_looks[k].pid, wait_looks[k].vmdata,
				 wait_looks[k].gap, (int) wait_looks[k].returns);
	}
	else
		gm_shmem_wait_publish(-1, -1, wait_looks, nlooks);
}

/*
 * The memory guard, once per tick, with the limits just read: measure, ask
 * the policy (gm_guard_policy), log, carry out and publish.  While engaged
 * the monitor looks every GM_GUARD_TICK_MS.
 */
static void
guard_tick(const GmLimits *l, const GmSnapshot *snaps, int n)
{
	bool		active = guard_active(l);
	bool		was_engaged = guard_engaged;
	bool		observe = memory_guard == GM_GUARD_OBSERVE;
	GmGuardInput in;
	GmGuardDecision d;
	int			ncand;
	int			limited = 0;
	int			would_fail = 0;

	/*
	 * A reload that turned the guard to observe lifts what it set; one that
	 * turned it from observe forgets what it noted, so that the policy sets
	 * those limits for real.
	 */
	guard_lift(observe, !observe);

	ncand = guard_measure(l, snaps, n, observe, &would_fail);

	in.limit = active ? l->limit : -1;
	in.usage = active ? l->usage : -1;
	in.engaged = guard_engaged;
	in.asked_pending = asked_pending();
	in.pool_share = GM_GUARD_POOL_SHARE;
	gm_guard_policy(&in, cands, ncand, &d);
	guard_engaged = d.engaged;
	for (int i = 0; i < ncand; i++)
		guarded[cands[i].slot].was_working = cands[i].working;

	/* The policy's inputs and outputs, for who debugs it (DEBUG2). */
	if (d.engaged)
	{
		elog(DEBUG2, "glibc_malloc memory guard look: usage " INT64_FORMAT " headroom " INT64_FORMAT " asked " INT64_FORMAT " budget " INT64_FORMAT " pool " INT64_FORMAT " reserve " INT64_FORMAT " %d of %d working",
			 in.usage, d.headroom, in.asked_pending, d.budget, d.pool, d.reserve, d.nworking, ncand);
		for (int i = 0; i < ncand; i++)
			if (cands[i].working || cands[i].started)
				elog(DEBUG2, "glibc_malloc memory guard look: pid %d vmdata " INT64_FORMAT " rss " INT64_FORMAT " growth " INT64_FORMAT " grown " INT64_FORMAT " waits %d started %d fresh %d (mapped " INT64_FORMAT ") reserved " INT64_FORMAT " since " UINT64_FORMAT " group %d: allow " INT64_FORMAT " limit " INT64_FORMAT,
					 cands[i].pid, cands[i].vmdata, cands[i].rss,
					 cands[i].growth == GM_GROWTH_UNKNOWN ? -1 : cands[i].growth, cands[i].grown,
					 (int) cands[i].waits_for_client, (int) cands[i].started,
					 (int) cands[i].fresh, cands[i].vmdata - cands[i].since_vmdata, cands[i].reserved,
					 cands[i].since, cands[i].group, cands[i].allow, cands[i].limit);
	}

	guard_log_changes(l, &d, was_engaged, observe, ncand);
	if (guard_engaged)
		limited = guard_apply(l, &d, ncand, observe);
	/* What raises may take until the next look, once its limits are set. */
	gm_shmem_guard_set_pool(guard_engaged && !observe ? d.pool : 0);
	guard_publish(l, &d, ncand, limited, would_fail, observe);
}

/* One look at the limits and the snapshots; act if needed. */
static void
monitor_tick(void)
{
	GmMonitorState *st = gm_shmem_monitor();
	TimestampTz now = GetCurrentTimestamp();	/* shown in the view */
	int64		mono = gm_monotonic_usec();	/* for intervals */
	GmLimits	l;
	int			n;
	int64		total_free = 0;
	int64		need = 0;
	bool		first = false;
	bool		cap_round = false;
	char		why[GM_MONITOR_TEXT] = "";
	char		b1[32],
				b2[32],
				b3[32];

	gm_memsource_detect(monitor_cgroup);
	/* No raise until this look's pool: each one so far is in what it reads next. */
	gm_shmem_guard_set_pool(0);
	/* What the admitted statements grew, read before the usage. */
	nlooks = gm_shmem_wait_note_look(wait_looks);
	for (int k = 0; k < nlooks; k++)
		wait_looks[k].returns = gm_guard_reservation_returns(wait_looks[k].wait, wait_looks[k].still_usec,
																		wait_looks[k].grew_usec);
	gm_memsource_read(&l);
	glance_read_at = gm_monotonic_usec();
	glance_ncpu = Max((int) sysconf(_SC_NPROCESSORS_ONLN), 0);
	n = gm_shmem_all_snapshots(snaps);
	guard_nguarded = 0;
	for (int i = 0; i < n; i++)
		if (snaps[i].guarded && snaps[i].pid != 0)
			guard_nguarded++;
	for (int i = 0; i < n; i++)
		total_free += gm_snapshot_free_heap(&snaps[i]);
	settle_asked(snaps, n);

	if (monitor_enabled && l.limit > 0 && l.usage >= 0)
	{
		double		frac = (double) l.usage / l.limit;
		double		low = Max(monitor_fraction - GM_MONITOR_HYSTERESIS, 0);

		if (!pressure && frac >= monitor_fraction)
		{
			pressure = true;
			pressure_since = mono;
			pressure_returned = 0;
			pressure_rounds = 0;
		}
		else if (pressure && frac < low)
		{
			ereport(LOG,
					(errmsg("glibc_malloc memory monitor: memory pressure over after %.1f s: %s usage %s is %.0f%% of the %s limit",
							(double) (mono - pressure_since) / USECS_PER_SEC,
							gm_limit_source_names[l.source], fmt_bytes(b1, sizeof(b1), l.usage),
							100 * frac, fmt_bytes(b2, sizeof(b2), l.limit)),
					 errdetail_internal("%d rounds; the backends asked returned %s.",
										pressure_rounds, fmt_bytes(b3, sizeof(b3), pressure_returned))));
			pressure = false;
			/* Rounds not logged yet belong to the episode that ended. */
			quiet_rounds = 0;
			quiet_count = 0;
			quiet_bytes = 0;
		}
		if (pressure)
		{
			first = pressure_rounds == 0;
			need = l.usage - (int64) (low * l.limit);
			snprintf(why, sizeof(why), "%s memory usage %s is %.0f%% of its %s limit (acting at %.0f%%, until below %.0f%%)",
					 gm_limit_source_names[l.source], fmt_bytes(b1, sizeof(b1), l.usage), 100 * frac,
					 fmt_bytes(b2, sizeof(b2), l.limit), 100 * monitor_fraction, 100 * low);
		}
	}
	else if (!monitor_enabled)
		pressure = false;

	/*
	 * While the guard limits backends, their free heap is asked for too:
	 * the guard counts on it (guard_tick), and returning it lifts limits.
	 * Not in observe, which only says what the guard would do.
	 * From the look that engages it (guard_tick runs below): else its
	 * first limits count on none of it, and a query that the free heap of
	 * idle backends had room for gets "out of memory" (seen in t/021).
	 * That look's round is an episode's first, logged at once.
	 */
	if (monitor_enabled && need <= 0 && memory_guard != GM_GUARD_OBSERVE && guard_engaged_after(&l))
	{
		GmGuardLevels lv;
		int64		release;

		gm_guard_levels(l.limit, &lv);
		release = lv.release;

		if (l.usage > release)
		{
			need = l.usage - release;
			first = !guard_engaged && !pressure;
			snprintf(why, sizeof(why), "%s memory usage %s is %.0f%% of its %s limit (the memory guard acts from %.0f%%)",
					 gm_limit_source_names[l.source], fmt_bytes(b1, sizeof(b1), l.usage),
					 100.0 * l.usage / l.limit, fmt_bytes(b2, sizeof(b2), l.limit),
					 100.0 * lv.engage / l.limit);
		}
	}
	if (monitor_enabled && need <= 0 && monitor_psi > 0 && l.psi >= monitor_psi &&
		(last_psi_round == 0 || mono - last_psi_round >= (int64) GM_MONITOR_PSI_ROUND_MS * 1000))
	{
		need = total_free / 2;
		last_psi_round = mono;
		first = true;			/* at most every 10 s anyway */
		snprintf(why, sizeof(why), "memory pressure: PSI some avg10 is %.1f%% (acting at %.1f%%); asking for half of the %s of free heap",
				 l.psi, monitor_psi, fmt_bytes(b1, sizeof(b1), total_free));
	}
	if (monitor_enabled && max_total_free >= 0 && total_free > (int64) max_total_free * 1024 &&
		total_free - (int64) max_total_free * 1024 > need)
	{
		first = !over_cap;
		cap_round = true;
		need = total_free - (int64) max_total_free * 1024;
		snprintf(why, sizeof(why), "all backends keep %s of free heap, more than glibc_malloc.max_total_free (%s)",
				 fmt_bytes(b1, sizeof(b1), total_free),
				 fmt_bytes(b2, sizeof(b2), (int64) max_total_free * 1024));
	}
	else if (max_total_free < 0 || total_free <= (int64) max_total_free * 1024)
		over_cap = false;
	if (need > 0 && ask_backends(snaps, n, need, why, first) && cap_round)
		over_cap = true;
	guard_tick(&l, snaps, n);
	glance_limit = guard_active(&l) && !guard_engaged ? l.limit : -1;
	glance_usage = guard_usage(&l);
	glance_measuring = glance_limit > 0 && gm_guard_measure(l.limit, glance_usage, false);

	st->changecount++;
	pg_write_barrier();
	st->pid = MyProcPid;
	st->enabled = monitor_enabled;
	st->fraction = monitor_fraction;
	st->max_total_free = max_total_free < 0 ? -1 : (int64) max_total_free * 1024;
	strlcpy(st->source, gm_limit_source_names[l.source], sizeof(st->source));
	st->limit_source = l.source;
	strlcpy(st->cgroup, l.source == GM_LIMIT_CGROUP_V1 || l.source == GM_LIMIT_CGROUP_V2 ? l.dir : "",
			sizeof(st->cgroup));
	st->limit_bytes = l.limit;
	st->usage_bytes = l.usage;
	st->psi_some_avg10 = l.psi;
	st->commit_headroom = l.commit_headroom;
	st->oom_kills = l.oom_kills;
	st->oom_group_kills = l.oom_group_kills;
	st->under_pressure = pressure;
	st->total_free_bytes = total_free;
	st->returned_bytes = returned_total;
	st->checked_at = now;
	pg_write_barrier();
	st->changecount++;
}

/* on_shmem_exit: the view shows the monitor as not running. */
static void
monitor_exit(int code, Datum arg)
{
	GmMonitorState *st = gm_shmem_monitor();

	if (st == NULL)
		return;
	/* An ERROR (FATAL here: no sigsetjmp) may have left one held. */
	LWLockReleaseAll();
	if (guarded != NULL)
		guard_lift_all();
	st->changecount++;
	pg_write_barrier();
	st->pid = 0;
	st->guard_engaged = false;
	st->guard_headroom = -1;
	st->guard_latch = NULL;
	pg_write_barrier();
	st->changecount++;
	/* Waiters run as without the wait. */
	gm_shmem_guard_set_pool(0);
	gm_shmem_wait_publish(-1, -1, NULL, 0);
}

/* Milliseconds left until tick_ms after looked (elapsed time rounded up). */
static long
ms_left(int64 looked, int tick_ms)
{
	return tick_ms - (long) ((gm_monotonic_usec() - looked + 999) / 1000);
}

/*
 * Wait for the next look, tick_ms after looked, or a wake-up (WaitLatch's
 * result).  A calm guard glances at the usage meanwhile, every
 * GM_GUARD_TICK_MS where the fastest burst could reach the stretch where
 * the guard measures (from below it) or the engage point by the next
 * look, less often further below (gm_guard_glance_ms), and looks at once
 * when the usage has reached it: a burst grows hundreds of MB in
 * GM_MONITOR_TICK_MS.
 */
static int
monitor_wait(int64 looked, int tick_ms)
{
	long		left;

	while ((left = ms_left(looked, tick_ms)) > 0)
	{
		int64		usage;
		int			rc;

		/*
		 * Counted from when the usage was read, not from the look's end; none
		 * before the look when no burst could get there by then.
		 */
		if (glance_limit > 0)
		{
			int			glance_ms = gm_guard_glance_ms(glance_limit, glance_usage, glance_measuring,
													   glance_ncpu, GM_GUARD_TICK_MS, tick_ms);

			if (glance_ms < tick_ms)
				left = Min(left, Max(glance_ms - (long) ((gm_monotonic_usec() - glance_read_at) / 1000), 0));
		}
		rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					   left, PG_WAIT_EXTENSION);
		if (rc & WL_LATCH_SET)
			return rc;
		if (glance_limit <= 0 || ms_left(looked, tick_ms) <= 0)
			continue;
		usage = gm_memsource_glance();
		glance_read_at = gm_monotonic_usec();
		if (usage >= 0)
			usage += gm_guard_reserve_shift(glance_limit, guard_nguarded);
		glance_usage = usage;
		if (usage < 0)
			continue;
		if (glance_measuring ? gm_guard_engaged_after(glance_limit, usage, false) :
			gm_guard_measure(glance_limit, usage, false))
			return WL_TIMEOUT;
	}
	return WL_TIMEOUT;
}

/* The background worker's entry point. */
void
glibc_malloc_monitor_main(Datum arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	if (gm_shmem_monitor() == NULL)
		proc_exit(0);
	on_shmem_exit(monitor_exit, (Datum) 0);
	/* Once: a tick allocates nothing, so it cannot fail for lack of memory. */
	nslots = Max(gm_shmem_slot_count(), 1);
	snaps = MemoryContextAlloc(TopMemoryContext, sizeof(GmSnapshot) * nslots);
	asked = MemoryContextAllocZero(TopMemoryContext, sizeof(GmAsked) * nslots);
	live = MemoryContextAlloc(TopMemoryContext, sizeof(int) * nslots);
	guarded = MemoryContextAllocZero(TopMemoryContext, sizeof(GmGuarded) * nslots);
	cands = MemoryContextAlloc(TopMemoryContext, sizeof(GmGuardProc) * nslots);
	wait_looks = MemoryContextAlloc(TopMemoryContext, sizeof(GmWaitLook) * nslots);
	for (int i = 0; i < nslots; i++)
		guarded[i].ref_pid = 0;
	/* A restarted monitor goes on counting. */
	returned_total = gm_shmem_monitor()->returned_bytes;
	/* Statement starts wake it while the guard is engaged. */
	gm_shmem_monitor()->guard_latch = MyLatch;

	for (;;)
	{
		int64		looked;
		int			rc;

		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		monitor_tick();
		looked = gm_monotonic_usec();
		/* Faster while the guard's limits are set: they follow the usage. */
		rc = monitor_wait(looked, guard_engaged ? GM_GUARD_TICK_MS : GM_MONITOR_TICK_MS);

		/*
		 * Woken by a statement start (or a signal): look again at once, but
		 * not more often than every GM_GUARD_WAKE_MS, so that many short
		 * statements cannot make the monitor look without pause.
		 */
		if ((rc & WL_LATCH_SET) && guard_engaged)
		{
			int64		gap_ms = GM_GUARD_WAKE_MS - (gm_monotonic_usec() - looked) / 1000;

			if (gap_ms > 0)
				(void) WaitLatch(NULL, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, gap_ms, PG_WAIT_EXTENSION);
		}
	}
}

/*
 * Register the monitor; from _PG_init while preloading, after the GUCs are
 * defined.  Only if glibc_malloc.memory_monitor is on at server start: it
 * takes one of max_worker_processes.
 */
void
gm_monitor_register(void)
{
	BackgroundWorker worker;

	if (!monitor_enabled)
		return;
	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_PostmasterStart;
	worker.bgw_restart_time = 10;
	strlcpy(worker.bgw_library_name, "glibc_malloc", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "glibc_malloc_monitor_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "glibc_malloc memory monitor", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "glibc_malloc memory monitor", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

/*
 * glibc_malloc.memory_guard's values; "on" and the other boolean spellings
 * of 1.6, when it was a boolean, hidden (as PostgreSQL's huge_pages).
 */
static const struct config_enum_entry memory_guard_options[] = {
	{"off", GM_GUARD_OFF, false},
	{"cgroup", GM_GUARD_CGROUP, false},
	{"machine", GM_GUARD_MACHINE, false},
	{"observe", GM_GUARD_OBSERVE, false},
	{"on", GM_GUARD_CGROUP, true},
	{"true", GM_GUARD_CGROUP, true},
	{"yes", GM_GUARD_CGROUP, true},
	{"1", GM_GUARD_CGROUP, true},
	{"false", GM_GUARD_OFF, true},
	{"no", GM_GUARD_OFF, true},
	{"0", GM_GUARD_OFF, true},
	/* the prefixes 1.6's parse_bool read too */
	{"t", GM_GUARD_CGROUP, true},
	{"tr", GM_GUARD_CGROUP, true},
	{"tru", GM_GUARD_CGROUP, true},
	{"y", GM_GUARD_CGROUP, true},
	{"ye", GM_GUARD_CGROUP, true},
	{"f", GM_GUARD_OFF, true},
	{"fa", GM_GUARD_OFF, true},
	{"fal", GM_GUARD_OFF, true},
	{"fals", GM_GUARD_OFF, true},
	{"n", GM_GUARD_OFF, true},
	{"of", GM_GUARD_OFF, true},
	{NULL, 0, false}
};

/* Check hook for glibc_malloc.monitor_cgroup: an absolute path or ''. */
static bool
check_monitor_cgroup(char **newval, void **extra, GucSource src)
{
	if (*newval && (*newval)[0] != '\0' && (*newval)[0] != '/')
	{
		GUC_check_errdetail("glibc_malloc.monitor_cgroup must be an absolute path, or empty to use the server's own cgroup.");
		return false;
	}
	if (*newval && strlen(*newval) >= MAXPGPATH - 32)
	{
		GUC_check_errdetail("The path is too long.");
		return false;
	}
	return true;
}

/* Define the monitor's GUCs; from _PG_init, preloaded or not. */
void
gm_monitor_define_gucs(void)
{
	DefineCustomBoolVariable("glibc_malloc.memory_monitor",
							 "Asks backends to return their free malloc memory when the server's memory runs short or glibc_malloc.max_total_free is exceeded.",
							 "Needs shared_preload_libraries. The monitor reads the server's cgroup (v2 or v1), or the whole system's memory without one.",
							 &monitor_enabled,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomEnumVariable("glibc_malloc.memory_guard",
							 "Limits backends' private memory (RLIMIT_DATA) when the server nears its memory limit, so that a query gets ERROR: out of memory instead of the OOM killer restarting the server.",
							 "cgroup: under a cgroup memory limit; machine: also against the whole machine's memory without one; observe: decide and log as cgroup, act on nothing; off. Needs glibc_malloc.memory_monitor. Covers client backends and parallel workers.",
							 &memory_guard,
							 GM_GUARD_CGROUP,
							 memory_guard_options,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomRealVariable("glibc_malloc.monitor_fraction",
							 "The memory monitor acts when memory usage reaches this fraction of the limit.",
							 "The limit is the cgroup's memory.high or memory.max (v2), memory.limit_in_bytes (v1), or MemTotal. It stops 0.05 below.",
							 &monitor_fraction,
							 0.9, 0.1, 1.0,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomRealVariable("glibc_malloc.monitor_psi",
							 "The memory monitor also acts when memory pressure (PSI some avg10, in percent) reaches this (0: ignore PSI).",
							 "It then asks for half of the backends' free heap, at most every 10 s.",
							 &monitor_psi,
							 10.0, 0.0, 100.0,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("glibc_malloc.max_total_free",
							"Caps the free malloc memory all backends keep together; the memory monitor asks the largest holders to return the rest (-1: no cap).",
							"Enforced from the published snapshots (glibc_malloc.stats_interval).",
							&max_total_free,
							-1, -1, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomStringVariable("glibc_malloc.monitor_cgroup",
							   "The cgroup directory whose memory the monitor watches (empty: the postmaster's own cgroup).",
							   "A cgroup v2 directory (memory.current, memory.max, memory.high, memory.pressure) or a cgroup v1 memory directory (memory.usage_in_bytes, memory.limit_in_bytes).",
							   &monitor_cgroup,
							   "",
							   PGC_SIGHUP,
							   0,
							   check_monitor_cgroup, NULL, NULL);
}

/*
 * For the SQL functions: a consistent copy of the monitor's state (under
 * its change counter) into *c, and the result row type of natts columns.
 */
static void
monitor_state_for_sql(FunctionCallInfo fcinfo, GmMonitorState *c, TupleDesc *tupdesc, int natts)
{
	GmMonitorState *st = gm_shmem_monitor();

	if (st == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("glibc_malloc must be loaded via shared_preload_libraries to run the memory monitor")));
	if (get_call_result_type(fcinfo, NULL, tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	/* natts < 0: the caller checks (a function whose columns grew). */
	if (natts >= 0 && (*tupdesc)->natts != natts)
		elog(ERROR, "incorrect number of output arguments");
	for (;;)
	{
		uint32		before = st->changecount;

		pg_read_barrier();
		memcpy(c, st, sizeof(*c));
		pg_read_barrier();
		if (before == st->changecount && (before & 1) == 0)
			break;
		CHECK_FOR_INTERRUPTS();
	}
}

PG_FUNCTION_INFO_V1(glibc_malloc_monitor);

/* glibc_malloc_monitor(): the monitor's state, one row. */
Datum
glibc_malloc_monitor(PG_FUNCTION_ARGS)
{
	GmMonitorState c;
	TupleDesc	tupdesc;
	Datum		values[19];
	bool		nulls[19] = {0};
	int			j = 0;

	/* 18 columns before 1.7 (no commit_headroom_bytes). */
	monitor_state_for_sql(fcinfo, &c, &tupdesc, -1);
	if (tupdesc->natts != 18 && tupdesc->natts != 19)
		elog(ERROR, "incorrect number of output arguments");
	values[j] = Int32GetDatum(c.pid);
	nulls[j++] = c.pid == 0;
	/* The monitor's settings, not this backend's: it may not have reloaded yet. */
	values[j] = BoolGetDatum(c.enabled);
	nulls[j++] = c.checked_at == 0;
	values[j] = CStringGetTextDatum(c.source);
	nulls[j++] = c.checked_at == 0;
	values[j] = CStringGetTextDatum(c.cgroup);
	nulls[j++] = c.cgroup[0] == '\0';
	values[j] = Int64GetDatum(c.limit_bytes);
	nulls[j++] = c.limit_bytes < 0 || c.checked_at == 0;
	values[j] = Int64GetDatum(c.usage_bytes);
	nulls[j++] = c.usage_bytes < 0 || c.checked_at == 0;
	values[j] = Float8GetDatum(c.fraction);
	nulls[j++] = c.checked_at == 0;
	values[j] = Float8GetDatum(c.psi_some_avg10);
	nulls[j++] = c.psi_some_avg10 < 0 || c.checked_at == 0;
	values[j++] = BoolGetDatum(c.under_pressure);
	values[j] = Int64GetDatum(c.total_free_bytes);
	nulls[j++] = c.checked_at == 0;
	values[j] = Int64GetDatum(c.max_total_free);
	nulls[j++] = c.max_total_free < 0 || c.checked_at == 0;
	values[j++] = Int64GetDatum(c.rounds);
	values[j++] = Int64GetDatum(c.backends_asked);
	values[j++] = Int64GetDatum(c.asked_bytes);
	values[j++] = Int64GetDatum(c.returned_bytes);
	values[j] = CStringGetTextDatum(c.last_action);
	nulls[j++] = c.last_action_at == 0;
	values[j] = TimestampTzGetDatum(c.last_action_at);
	nulls[j++] = c.last_action_at == 0;
	values[j] = TimestampTzGetDatum(c.checked_at);
	nulls[j++] = c.checked_at == 0;
	if (tupdesc->natts == 19)
	{
		values[j] = Int64GetDatum(c.commit_headroom);
		nulls[j++] = c.commit_headroom == PG_INT64_MIN || c.checked_at == 0;
	}
	Assert(j == tupdesc->natts);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/* A glibc_malloc.memory_guard value's name, as SHOW prints it. */
static const char *
guard_mode_name(int mode)
{
	for (const struct config_enum_entry *e = memory_guard_options; e->name != NULL; e++)
		if (e->val == mode && !e->hidden)
			return e->name;
	return "unknown";
}

PG_FUNCTION_INFO_V1(glibc_malloc_guard);

/* glibc_malloc_guard()'s columns in 1.8 (13 in 1.6; 23, 26, 27 in builds of 1.7). */
#define GM_GUARD_COLS		30

/* glibc_malloc_guard(): the memory guard's state, one row. */
Datum
glibc_malloc_guard(PG_FUNCTION_ARGS)
{
	GmMonitorState c;
	TupleDesc	tupdesc;
	Datum		values[GM_GUARD_COLS];
	bool		nulls[GM_GUARD_COLS] = {0};
	int64		waits[GM_NWAIT_COUNTS];
	int64		cap_errors;
	int64		guard_errors;
	int			j = 0;
	GmGuardLevels lv;

	/*
	 * 13 columns before 1.7; 1.7 added reserve_bytes, reserve_shrunk,
	 * oom_kills, oom_group_kills, memory_wait's six counts, mode,
	 * would_limit, would_fail and reservations_returned (23 and 26: builds
	 * of 1.7 before the last four and the last one); 1.8 start_shares,
	 * executor_asks and executor_shares.
	 */
	monitor_state_for_sql(fcinfo, &c, &tupdesc, -1);
	if (tupdesc->natts != 13 && tupdesc->natts != 23 && tupdesc->natts != 26 &&
		tupdesc->natts != 27 && tupdesc->natts != GM_GUARD_COLS)
		elog(ERROR, "incorrect number of output arguments");
	gm_shmem_oom_counts(&cap_errors, &guard_errors);
	gm_guard_levels(c.limit_bytes, &lv);

	values[j] = BoolGetDatum(c.guard_enabled);
	nulls[j++] = c.checked_at == 0;
	values[j++] = BoolGetDatum(c.pid != 0 && c.guard_engaged);
	values[j] = Int64GetDatum(c.limit_bytes);
	nulls[j++] = c.limit_bytes < 0 || c.checked_at == 0;
	values[j] = Int64GetDatum(c.usage_bytes);
	nulls[j++] = c.usage_bytes < 0 || c.checked_at == 0;
	values[j] = Int64GetDatum(lv.target);
	nulls[j++] = c.limit_bytes < 0 || c.checked_at == 0 || !c.guard_covers;
	values[j] = Int64GetDatum(c.guard_headroom);
	nulls[j++] = c.guard_headroom < 0 || !c.guard_engaged;
	values[j++] = Int32GetDatum(c.guard_limited);
	values[j++] = Int64GetDatum(c.guard_rounds);
	values[j++] = Int64GetDatum(c.guard_lowered);
	values[j++] = Int64GetDatum(guard_errors);
	values[j++] = Int64GetDatum(cap_errors);
	values[j] = CStringGetTextDatum(c.guard_last_action);
	nulls[j++] = c.guard_last_action_at == 0;
	values[j] = TimestampTzGetDatum(c.guard_last_action_at);
	nulls[j++] = c.guard_last_action_at == 0;
	if (tupdesc->natts >= 15)
	{
		values[j] = Int64GetDatum(c.guard_reserve);
		nulls[j++] = !c.guard_engaged || c.guard_reserve < 0;
		values[j] = BoolGetDatum(c.guard_reserve_shrunk);
		nulls[j++] = !c.guard_engaged;
	}
	if (tupdesc->natts >= 23)
	{
		values[j] = Int64GetDatum(c.oom_kills);
		nulls[j++] = c.oom_kills < 0 || c.checked_at == 0;
		values[j] = Int64GetDatum(c.oom_group_kills);
		nulls[j++] = c.oom_group_kills < 0 || c.checked_at == 0;
		/* glibc_malloc.memory_wait */
		gm_shmem_wait_counts(waits);
		values[j++] = Int64GetDatum(waits[GM_WAIT_WAITS]);
		values[j++] = Float8GetDatum(waits[GM_WAIT_USEC] / 1000.0);
		values[j++] = Int64GetDatum(waits[GM_WAIT_ADMISSIONS]);
		values[j++] = Int64GetDatum(waits[GM_WAIT_TIMEOUTS]);
		values[j++] = Int64GetDatum(waits[GM_WAIT_SKIPS]);
		values[j++] = Int64GetDatum(waits[GM_WAIT_UNRESERVED]);
	}
	if (tupdesc->natts >= 26)
	{
		values[j] = CStringGetTextDatum(guard_mode_name(c.guard_mode));
		nulls[j++] = c.checked_at == 0;
		values[j++] = Int64GetDatum(c.guard_would_limit);
		values[j++] = Int64GetDatum(c.guard_would_fail);
	}
	if (tupdesc->natts >= 27)
		values[j++] = Int64GetDatum(waits[GM_WAIT_RETURNS]);
	if (tupdesc->natts >= GM_GUARD_COLS)
	{
		values[j++] = Int64GetDatum(waits[GM_WAIT_START_SHARES]);
		values[j++] = Int64GetDatum(waits[GM_WAIT_EXEC_ASKS]);
		values[j++] = Int64GetDatum(waits[GM_WAIT_EXEC_SHARES]);
	}
	Assert(j == tupdesc->natts);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/* One row of glibc_malloc_processes(). */
static void
process_row(ReturnSetInfo *rsinfo, int pid, const char *type, PGPROC *proc)
{
	Datum		values[8];
	bool		nulls[8] = {0};
	int64		vm;
	int64		rss;
	int64		soft;
	int64		hard;
	int64		orig = GM_NO_LIMIT;
	int64		own = GM_NO_LIMIT;
	int64		guard = GM_NO_LIMIT;
	bool		covered = false;
	int			j = 0;

	gm_proc_vmdata_rss(pid, &vm, &rss);
	if (proc != NULL &&
		!gm_shmem_limits(GM_PROC_NUMBER(proc), pid, &orig, &own, &guard, &covered))
		own = guard = GM_NO_LIMIT;
	if (!gm_data_limit(pid, &soft, &hard))
		soft = GM_NO_LIMIT;
	values[j++] = Int32GetDatum(pid);
	values[j++] = CStringGetTextDatum(type);
	values[j++] = BoolGetDatum(covered);
	values[j] = Int64GetDatum(vm);
	nulls[j++] = vm < 0;
	values[j] = Int64GetDatum(rss);
	nulls[j++] = rss < 0;
	values[j] = Int64GetDatum(soft);
	nulls[j++] = soft == GM_NO_LIMIT;
	values[j] = Int64GetDatum(own);
	nulls[j++] = own == GM_NO_LIMIT;
	values[j] = Int64GetDatum(guard);
	nulls[j++] = guard == GM_NO_LIMIT;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

PG_FUNCTION_INFO_V1(glibc_malloc_processes);

/* pid's parent from /proc/PID/stat, or -1. */
static int
parent_pid(int pid)
{
	char		path[64];
	char		buf[512];
	char	   *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if (!gm_read_small_file(path, buf, sizeof(buf)) || (p = strrchr(buf, ')')) == NULL)
		return -1;
	/* "pid (comm) state ppid ..." */
	return sscanf(p + 1, " %*c %d", &pid) == 1 ? pid : -1;
}

/*
 * A process's title without "postgres: " and the cluster name (a process
 * pg_stat_activity does not list: the memory monitor, the logger), or NULL.
 */
static char *
process_title(int pid)
{
	char		path[64];
	char		buf[256];
	char	   *t = buf;
	char	   *colon;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
	if (!gm_read_small_file(path, buf, sizeof(buf)))
		return NULL;
	if (strncmp(t, "postgres: ", 10) == 0)
		t += 10;
	if (cluster_name && cluster_name[0] != '\0' && strncmp(t, cluster_name, strlen(cluster_name)) == 0 &&
		(colon = t + strlen(cluster_name))[0] == ':')
		t = colon + 2;
	/* The fixed part of the title ends in a space before the activity. */
	for (char *end = t + strlen(t); end > t && end[-1] == ' '; end--)
		end[-1] = '\0';
	return pstrdup(t);
}

/*
 * glibc_malloc_processes(): every process of the server (the postmaster's
 * children, from /proc: the auxiliary processes, background workers and
 * the memory monitor too), named as pg_stat_activity names them, with what
 * /proc shows from outside (VmData, RssAnon: NULL when it cannot be read)
 * and the soft RLIMIT_DATA in force, with the module's two limits.
 */
Datum
glibc_malloc_processes(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			nbackends;
	int		   *pids;
	const char **types;
	DIR		   *dir;
	struct dirent *de;

	gm_init_srf(fcinfo);
	if (rsinfo->setDesc->natts != 8)
		elog(ERROR, "incorrect number of output arguments");

	/* pg_stat_activity's names, by pid. */
	nbackends = pgstat_fetch_stat_numbackends();
	pids = palloc0(sizeof(int) * Max(nbackends, 1));
	types = palloc0(sizeof(char *) * Max(nbackends, 1));
	for (int i = 1; i <= nbackends; i++)
	{
		LocalPgBackendStatus *local = gm_local_beentry(i);

		if (local == NULL || (pids[i - 1] = local->backendStatus.st_procpid) == 0)
			continue;
		/* A background worker by its type, as pg_stat_activity does. */
		/* (its result is a static buffer: copied) */
		if (local->backendStatus.st_backendType != B_BG_WORKER ||
			(types[i - 1] = GetBackgroundWorkerTypeByPid(pids[i - 1])) == NULL)
			types[i - 1] = GetBackendTypeDesc(local->backendStatus.st_backendType);
		else
			types[i - 1] = pstrdup(types[i - 1]);
	}

	process_row(rsinfo, PostmasterPid, "postmaster", NULL);
	if ((dir = AllocateDir("/proc")) == NULL)
		return (Datum) 0;
	while ((de = ReadDirExtended(dir, "/proc", LOG)) != NULL)
	{
		int			pid = atoi(de->d_name);
		const char *type = NULL;

		if (pid <= 0 || parent_pid(pid) != PostmasterPid)
			continue;
		for (int i = 0; i < nbackends && type == NULL; i++)
			if (pids[i] == pid)
				type = types[i];
		if (type == NULL && (type = process_title(pid)) == NULL)
			continue;			/* gone */
		process_row(rsinfo, pid, type, BackendPidGetProc(pid));
	}
	FreeDir(dir);
	return (Datum) 0;
}
