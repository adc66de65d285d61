/*-------------------------------------------------------------------------
 *
 * guard.c
 *		glibc_malloc.max_backend_memory: a cap on one backend's private
 *		memory, through its soft RLIMIT_DATA; and the count and the HINT
 *		of an "out of memory" error when the module's limits are in force.
 *
 * RLIMIT_DATA (Linux 4.7 and later) counts a process's private writable
 * mappings: the brk heap, private anonymous mmaps (glibc's large chunks and
 * extra arenas), and the data of the libraries it loaded.  It does not
 * count shared memory: shared_buffers and dynamic shared memory are
 * outside it.  When a mapping would pass the soft limit, glibc's malloc
 * returns NULL and PostgreSQL raises "ERROR: out of memory", with its
 * DETAIL naming the request and the memory context; the session goes on.
 *
 * The cap is counted from what the process had mapped when the cap was
 * first applied in it (VmData then: the heap inherited from the
 * postmaster, the libraries' data), so that it means memory the backend
 * adds.  The limit is applied in normal context: at the first transaction
 * end (after the login, which runs without it), at a statement start, and
 * at each transaction end after the setting changed (SET, reload).  The
 * GUC's rollback at a transaction's end (SET LOCAL, a rolled back SET)
 * comes after the transaction callbacks: a cap it raises or lifts is
 * applied at once, from the assign hook; one it lowers at the next
 * statement start.  Only the soft limit changes; the hard limit stays, so
 * the limit can always be raised again, and RESET restores the soft limit
 * the process started with.
 *
 * The memory monitor (monitor.c, glibc_malloc.memory_guard) sets a second
 * limit from outside, with prlimit(2); the lower of the two, and of the
 * original, is in force.  Both sides publish theirs in the process's slot
 * (shmem.c) and set the lowest; the monitor checks it every tick.  A
 * process the monitor has not limited yet takes the guard's limit itself
 * at its first statement while the guard is engaged (first_limit), until
 * the monitor's look sets it.  A process the monitor's last look counted
 * as working raises the guard's limit itself by what it takes from the
 * budget, from the pool that look held back (gm_shmem_guard_raise); the
 * next look counts it and sets the limit again.  The waits that remain
 * for a look sleep on the latch the look sets (gm_shmem_await_look).
 *
 * Which processes: gm_guarded_process() (settings.c).
 *
 * glibc_malloc.memory_wait: while the guard acts on a limit (engaged or
 * not: a burst from a calm server is admitted as it fits, not all at
 * once), a top-level statement of a client backend whose query has a recorded executor peak
 * (glibc_malloc_statements) waits, up to memory_wait, until that peak fits
 * the headroom left after what the statements admitted before are still
 * expected to take; admitted, it reserves its peak in shared memory (the
 * queue is shmem.c's, the admission guard_policy.c's) until it ends or
 * fails (past its need, what it mapped and has not touched still counts).
 * The wait is on the latch, woken when a reservation
 * ends and every GM_WAIT_POLL_MS (the monitor's looks change the
 * headroom), and takes interrupts: statement_timeout, pg_cancel_backend,
 * termination.  A waiter that another backend waits for (it holds a lock
 * that one wants: PostgreSQL's own pg_blocking_pids, checked at once and
 * then once a second) gives up with an ERROR (55P03), which releases its
 * locks.  A statement that runs without its need (memory_wait = 0 and it
 * does not fit, its wait ran out, its need is above anything that could
 * free) runs with a grant (guard_policy.c): a share, reserved, and its
 * own soft RLIMIT_DATA at its VmData plus the grant and its reserve while
 * its executor runs.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/parallel.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/elog.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "glibc_malloc.h"

/* An out-of-memory this soon after the guard's last limits is the guard's. */
#define GM_GUARD_RECENT_USEC	(1000 * 1000)

/* A statement start waits at most this long for the guard's next look, ... */
#define GM_GUARD_START_WAIT_MS	250
/* ... woken by the look (its latch), and polling this often should a wake-up be lost. */
#define GM_LOOK_POLL_MS			50
/*
 * The running statement's check (gm_guard_executor_check): near its limit
 * within this many bytes (what a sort maps in a few milliseconds, with
 * room to spare) or half of what it grew; a read of /proc/self/statm at
 * most every GM_EXEC_READ_USEC.
 */
#define GM_EXEC_GROW_MARGIN		(8 * 1024 * 1024)
#define GM_EXEC_READ_USEC		2000

/* A waiter looks again at least this often (the monitor looks every 50 ms). */
#define GM_WAIT_POLL_MS			50

/* A waiter checks whether it blocks another's lock this often. */
#define GM_WAIT_LOCK_CHECK_USEC	(1000 * 1000)

/*
 * A statement's need is its query's executor peak of recent runs, scaled
 * by what the run that mapped most mapped (its process's VmPeak growth:
 * gm_guard_mapped_need), else times this: the
 * peak is the bytes in use in its memory contexts at its end; its process
 * maps more (a sort's array is copied when it grows, glibc keeps some
 * free).  Measured, VmPeak's growth over the recorded peak of md5 sorts of
 * 0.3, 0.6, 1 and 3 million rows: 1.07, 1.07, 1.88, 1.28.  What a
 * statement maps beyond its need is served as any working statement's.
 */
#define GM_WAIT_NEED_FACTOR		1.25

/*
 * GUC glibc_malloc.memory_wait, ms; 0 = no wait (the statement runs at
 * once, with a reservation where it fits).
 */
static int	memory_wait = 30000;

/*
 * GUC glibc_malloc.max_memory_wait, ms: the longest any session's
 * memory_wait counts for (a waiter keeps the memory that frees for itself
 * once it has waited half of its wait: a plain role's 1 h must not hold
 * it that long).
 */
static int	max_memory_wait = 30000;

/* The memory_wait in force: the session's, at most max_memory_wait. */
static inline int
wait_ms(void)
{
	return Min(memory_wait, max_memory_wait);
}

/* This process's statement is queued or admitted, or about to be (gm_shmem_wait_leave due). */
static bool wait_entered = false;

/* The admission's array (one per slot) and a context for the lock check. */
static GmAdmitWaiter *admit_buf = NULL;
static int	admit_max = 0;
static MemoryContext wait_cxt = NULL;

/* GUC glibc_malloc.max_backend_memory, kB; -1 = off. */
static int	max_backend_memory = -1;

/* The cap in bytes (assign hook's copy); -1 = off. */
static int64 cur_cap = -1;

/* The setting changed since it was last applied (true at start: check once). */
static bool limit_dirty = true;

/* What this process had mapped when a cap was first applied; -1 = not yet. */
static int64 base_vmdata = -1;

/* The soft limit the process started with; -1 = not read yet. */
static int64 orig_soft = -1;

/* The cap's limit in force (absolute soft RLIMIT_DATA); GM_NO_LIMIT = none. */
static int64 own_limit = GM_NO_LIMIT;

/*
 * The statement's grant (it runs without its need, with a share): an
 * absolute soft RLIMIT_DATA (grant_pending) from its admission until it
 * ends, in force (grant_limit) only while its executor runs, so that the
 * backend reads its client's next message without it; GM_NO_LIMIT = none.
 */
static int64 grant_pending = GM_NO_LIMIT;

/*
 * A top-level statement started or ran since the last
 * gm_guard_top_statement_end that read what it maps at its end: that
 * /proc read is done once per statement.
 */
static bool statement_unchecked = false;

/* The statement holds a start share (gm_guard_take_start_share), until gm_guard_wait_end. */
static bool start_share_held = false;
static int64 grant_limit = GM_NO_LIMIT;

static void set_limits(void);

/* Bytes as "N MB" (or kB below 10 MB). */
static void
fmt_size(char *buf, size_t size, int64 bytes)
{
	if (bytes >= (int64) 10 * 1024 * 1024)
		snprintf(buf, size, INT64_FORMAT " MB", bytes / (1024 * 1024));
	else
		snprintf(buf, size, INT64_FORMAT " kB", bytes / 1024);
}

/*
 * Apply max_backend_memory if it changed: normal context (statement start,
 * transaction end).  Costs a flag test when nothing changed.
 */
void
gm_guard_apply(void)
{
	int64		hard;

	if (!limit_dirty)
		return;
	limit_dirty = false;
	if (!gm_guarded_process())
		return;
	/* Never capped and not asked to: leave the process alone. */
	if (cur_cap < 0 && own_limit == GM_NO_LIMIT)
		return;
	if (orig_soft < 0 && !gm_data_limit(0, &orig_soft, &hard))
		orig_soft = GM_NO_LIMIT;
	if (cur_cap >= 0)
	{
		/* /proc unreadable: no base, no cap (rather than one below VmData). */
		if (base_vmdata < 0)
			base_vmdata = gm_proc_status_bytes(0, "VmData:");
		own_limit = base_vmdata < 0 ? GM_NO_LIMIT : base_vmdata + cur_cap;
	}
	else
		own_limit = GM_NO_LIMIT;
	set_limits();
}

/*
 * Publish this process's own limit (the lower of the cap's and the
 * grant's) and set the soft limit to the lowest of it, the original and the
 * guard's.  Allocates nothing and raises no error: from the transaction
 * callbacks too, where it only raises.
 */
static void
set_limits(void)
{
	int64		own = Min(own_limit, grant_limit);
	int64		guard;

	/*
	 * The monitor may set the guard's limit meanwhile and call prlimit
	 * before or after this setrlimit: if the guard's limit changed while
	 * this one was set, set again, so the last call has both.
	 */
	guard = gm_shmem_own_limit(own, &orig_soft);
	for (int i = 0; i < 3; i++)
	{
		int64		again;

		(void) gm_set_data_limit(0, Min(orig_soft, Min(own, guard)));
		if ((again = gm_shmem_my_guard_limit()) == guard)
			break;
		guard = again;
	}
}

/* The statement runs with a grant: its limit, from VmData base (gm_guard_grant_run applies it). */
static void
grant_set(int64 base, int64 grant)
{
	int64		hard;

	if (base < 0)
		return;
	if (orig_soft < 0 && !gm_data_limit(0, &orig_soft, &hard))
		orig_soft = GM_NO_LIMIT;
	grant_pending = gm_guard_grant_limit(base, grant);
}

/* The grant's limit is no longer in force (a raise; a flag test when none). */
static void
grant_lift(void)
{
	if (grant_limit == GM_NO_LIMIT)
		return;
	grant_limit = GM_NO_LIMIT;
	set_limits();
}

/*
 * The executor of the statement with a grant starts (on) or stops running
 * (ExecutorRun, ExecutorFinish at the top level; also when they fail): its
 * limit is in force only meanwhile.  A flag test without a grant.
 * Allocates nothing.
 */
void
gm_guard_grant_run(bool on)
{
	if (!on)
		grant_lift();
	else if (grant_pending != GM_NO_LIMIT && grant_limit != grant_pending)
	{
		grant_limit = grant_pending;
		set_limits();
	}
}

/*
 * The set the waits for a look wait on (the latch, the postmaster's
 * death), made once per process, where an ERROR is still harmless
 * (look_set_make): on PostgreSQL 13 WaitLatch makes one at each call,
 * which allocates and opens a descriptor, and first_limit must not fail.
 */
static WaitEventSet *look_set = NULL;

/* Make look_set, once. */
static void
look_set_make(void)
{
	WaitEventSet *set;

	if (look_set != NULL)
		return;
	/* Kept only once whole: an ERROR in between leaves none. */
	set = GM_CREATE_SESSION_WAIT_SET(2);
	(void) AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	(void) AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	look_set = set;
}

/*
 * One wait for the monitor's next look, with gm_shmem_await_look on: until
 * the look sets the latch, at most GM_LOOK_POLL_MS (a wake-up lost) and
 * until deadline (gm_monotonic_usec), at least 1 ms.  Interrupts are the
 * caller's to serve (look_interrupts).  An ERROR making look_set leaves
 * the flag on until gm_guard_wait_end, at the transaction's abort.
 */
static void
look_wait(int64 deadline, uint32 wait_event_info)
{
	int64		left_ms = (deadline - gm_monotonic_usec() + 999) / 1000;
	WaitEvent	event;

	look_set_make();
	(void) WaitEventSetWait(look_set, (long) Min(Max(left_ms, 1), GM_LOOK_POLL_MS), &event, 1,
							wait_event_info);
	ResetLatch(MyLatch);
}

/*
 * Serve interrupts in a wait for the look, its flag off meanwhile: an
 * ERROR leaves no flag on, which would have the monitor set this latch at
 * every look.
 */
static void
look_interrupts(void)
{
	if (!INTERRUPTS_PENDING_CONDITION())
		return;
	gm_shmem_await_look(false);
	CHECK_FOR_INTERRUPTS();
	gm_shmem_await_look(true);
}

/*
 * Wait until the monitor's look counts this process as working (at most
 * GM_GUARD_START_WAIT_MS by the monotonic clock), interrupts served.
 */
static void
wait_counted_working(void)
{
	int64		deadline = gm_monotonic_usec() + (int64) GM_GUARD_START_WAIT_MS * 1000;

	gm_shmem_await_look(true);
	while (gm_shmem_guard_counts_idle() && gm_monotonic_usec() < deadline)
	{
		look_interrupts();
		look_wait(deadline, 0);
	}
	gm_shmem_await_look(false);
}

/*
 * A statement starts while the memory guard is engaged in a process it has
 * not limited yet (a parallel worker, a new session's first statements
 * before the monitor's next look): a limit the monitor sets at that look
 * cannot take back what the process mapped by then (a 600 MB value is
 * mapped whole at once).  Limit it as an idle backend is, its VmData and
 * the reserve, and wait for the look (at most GM_GUARD_START_WAIT_MS),
 * which counts it as working and gives it its share.  Without that look
 * (the guard let go, or the monitor did not answer) it takes its limit
 * back and runs as before.  Returns whether it took one; otherwise a flag
 * test.
 */
static bool
first_limit(void)
{
	static int64 retry_at = 0;
	int64		limit;
	int64		deadline;

	if (!gm_shmem_guard_engaged() || !gm_shmem_guard_acts() || !gm_guarded_process() ||
		CritSectionCount != 0 || InterruptHoldoffCount != 0)
		return false;
	gm_shmem_claim();
	if (gm_shmem_my_guard_limit() != GM_NO_LIMIT || gm_monotonic_usec() < retry_at)
		return false;
	/* (its wait's set made first: an ERROR there leaves no limit behind) */
	look_set_make();
	limit = gm_shmem_guard_first_limit(gm_proc_status_bytes(0, "VmData:"));
	if (limit == GM_NO_LIMIT)
		return false;
	set_limits();

	/*
	 * Until the monitor's look replaces the limit and counts the process
	 * as working, or the guard lets go.  No interrupt is served meanwhile
	 * (at most GM_GUARD_START_WAIT_MS): an ERROR would leave the limit,
	 * which the monitor does not know of and would never lift.
	 */
	deadline = gm_monotonic_usec() + (int64) GM_GUARD_START_WAIT_MS * 1000;
	gm_shmem_await_look(true);
	while ((gm_shmem_my_guard_limit() == limit || gm_shmem_guard_counts_idle()) &&
		   gm_shmem_guard_engaged() && gm_monotonic_usec() < deadline)
		look_wait(deadline, 0);
	gm_shmem_await_look(false);
	/* Taken back only if still this one (the monitor's are even). */
	if (gm_shmem_my_guard_limit() == limit)
	{
		gm_shmem_guard_drop_first_limit(limit);
		/* Not answered: no other try for a second. */
		retry_at = gm_monotonic_usec() + (int64) 1000 * 1000;
	}
	/* The limit in force is the slot's, whoever changed it meanwhile. */
	set_limits();
	elog(DEBUG2, "glibc_malloc first limit: %lld until the monitor's look, now %lld",
		 (long long) limit, (long long) gm_shmem_my_guard_limit());
	CHECK_FOR_INTERRUPTS();
	return true;
}

/*
 * A parallel worker takes its slot at its first statement, for the guard,
 * and while the guard is engaged waits for the look that limits it.
 */
void
gm_guard_statement_start(void)
{
	static bool worker_started = false;

	if (IsParallelWorker())
	{
		gm_shmem_claim();
		if (!worker_started)
		{
			worker_started = true;
			(void) first_limit();
		}
	}
	gm_guard_apply();
}

/*
 * A top-level statement starts.  While the memory guard limits this
 * process and counted it as idle (a limit of its VmData, its reserve and
 * what it grew, and room for a client message that no budget counts), or
 * has not limited it yet (first_limit), tell the monitor, and wait for its
 * next look (at most GM_GUARD_START_WAIT_MS; on the latch the look sets),
 * which counts it as working and gives it a working share before the
 * executor allocates.  Otherwise a flag test or two.
 */
void
gm_guard_top_statement_start(void)
{
	statement_unchecked = true;
	/* A parallel worker's is taken at its statement start. */
	if ((!IsParallelWorker() && first_limit()) || !gm_shmem_guard_statement_start())
		return;
	gm_shmem_guard_wake();
	wait_counted_working();
}

/*
 * A top-level statement, or its transaction, ended (last), or a
 * transaction ended inside it (a procedure's COMMIT, VACUUM's own
 * transactions): a flag in the slot.  While the guard is engaged, a limit
 * within the reserve's floor of what the process maps (a working
 * statement used its reserve up, the budget empty) wakes the monitor,
 * whose next look that counts the process idle gives its reserve back
 * sooner.  What it maps is read once per statement that started or ran
 * since (its executor's end, else its transaction's), and at each
 * transaction's end inside it.  Allocates nothing.
 */
void
gm_guard_top_statement_end(bool last)
{
	int64		limit;
	int64		vm;

	gm_shmem_guard_reads_client(false);
	if (!statement_unchecked || !gm_shmem_guard_engaged() || IsParallelWorker() ||
		proc_exit_inprogress || (limit = gm_shmem_my_guard_limit()) == GM_NO_LIMIT)
		return;
	if (last)
		statement_unchecked = false;
	if ((vm = gm_proc_statm_data_bytes()) >= 0 && limit - vm < (int64) 1024 * 1024)
		gm_shmem_guard_wake();
}

/* A top-level statement's executor runs (a portal resumed too): its end reads what it maps. */
void
gm_guard_top_statement_runs(void)
{
	statement_unchecked = true;
}

/*
 * Whether the top-level statement waits for its client inside itself (a
 * COPY FROM STDIN, a portal that may be suspended): it counts as working
 * then, though its wait event says ClientRead.
 */
void
gm_guard_reads_client(bool on)
{
	gm_shmem_guard_reads_client(on);
}

/*
 * Whether this client backend may take part in the admission before a
 * top-level statement (wait for memory, or with memory_wait = 0 only take
 * a reservation where it fits): the guard acting on a limit, a slot, and a
 * state where waiting is safe (interrupts served, no critical section).
 * A flag test or two when not.
 */
bool
gm_guard_may_wait(void)
{
	return gm_shmem_guard_acts() &&
		MyBackendType == B_BACKEND && !IsParallelWorker() &&
		CritSectionCount == 0 && InterruptHoldoffCount == 0 &&
		gm_shmem_wait_ready() && gm_guarded_process();
}

/*
 * Whether the running query's check (gm_guard_executor_check) may act in
 * this process: where gm_guard_may_wait would, and in a parallel worker
 * (its slot taken as its statement started), whose growth only the
 * monitor's looks served: a worker near its limit takes more from the
 * budget and pauses for it, as its leader does.  A flag test or two when
 * not.
 */
bool
gm_guard_may_check(void)
{
	return gm_shmem_guard_acts() &&
		(MyBackendType == B_BACKEND || IsParallelWorker()) &&
		CritSectionCount == 0 && InterruptHoldoffCount == 0 &&
		gm_shmem_wait_ready() && gm_guarded_process();
}

/* before_shmem_exit: no queue entry or reservation outlives the process. */
static void
wait_at_exit(int code, Datum arg)
{
	if (wait_entered)
	{
		wait_entered = false;
		gm_shmem_wait_leave();
	}
}

/*
 * Whether another backend waits for a lock this one holds: a scan of the
 * wait events (no lock), and PostgreSQL's pg_blocking_pids for those that
 * wait for a heavyweight lock.
 */
static bool
blocks_others(void)
{
	bool		blocks = false;
	MemoryContext old;

	if (wait_cxt == NULL)
		wait_cxt = AllocSetContextCreate(TopMemoryContext, "glibc_malloc memory wait",
										 ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(wait_cxt);
	for (uint32 i = 0; i < ProcGlobal->allProcCount && !blocks; i++)
	{
		PGPROC	   *proc = &ProcGlobal->allProcs[i];
		int			pid = proc->pid;
		ArrayType  *arr;
		int32	   *pids;
		int			n;

		if (pid == 0 || proc == MyProc ||
			(proc->wait_event_info & 0xFF000000) != PG_WAIT_LOCK)
			continue;
		arr = DatumGetArrayTypeP(DirectFunctionCall1(pg_blocking_pids, Int32GetDatum(pid)));
		n = ArrayGetNItems(ARR_NDIM(arr), ARR_DIMS(arr));
		pids = (int32 *) ARR_DATA_PTR(arr);
		for (int k = 0; k < n; k++)
			if (pids[k] == MyProcPid)
				blocks = true;
	}
	MemoryContextSwitchTo(old);
	MemoryContextReset(wait_cxt);
	return blocks;
}

/*
 * Whether a top-level statement's mapped peak is worth measuring (two
 * reads of /proc/self/status): one not recorded yet (exec_peak -1), or one
 * large enough to take part in the admission.
 */
bool
gm_guard_measures_mapped(int64 exec_peak, int64 mapped_peak)
{
	return exec_peak < 0 || Max(exec_peak, mapped_peak) >= GM_WAIT_MIN_NEED;
}

/* The first round's queueing: the statement's need, its wait, its VmData and RssAnon before. */
typedef struct GmFirstRound
{
	int64		need;
	int64		patience_ms;
	int64		vm;				/* -1: unread */
	int64		rss;
} GmFirstRound;

/* What a round of the admission says of this process's statement. */
typedef enum GmRound
{
	GM_ROUND_WAIT,				/* it waits on */
	GM_ROUND_ADMITTED,			/* it goes, with its need reserved */
	GM_ROUND_GRANTED,			/* it goes now without its need, with a
								 * grant: a share, reserved, its limit */
	GM_ROUND_NO_LOOK			/* it runs as without the wait: the guard
								 * has not looked yet */
} GmRound;

/*
 * Whether the admission (gm_guard_admit) admits the first round's
 * statement alone, with available bytes and the ceiling: a round of one.
 */
static bool
admits_alone(int64 available, int64 ceiling, const GmFirstRound *first)
{
	GmAdmitWaiter me;

	memset(&me, 0, sizeof(me));
	me.id = -1;
	me.need = first->need;
	me.patience_ms = first->patience_ms;
	me.mine = true;
	(void) gm_guard_admit(available, ceiling, &me, 1);
	return me.admit;
}

/*
 * Under the queue's lock, a statement's first round while none waits (its
 * try without the lock, admit_without_lock, gave up): the admission of it
 * alone (gm_guard_admit), from the budget's sums, without a scan of the
 * slots.  Admitted with its need: its reservation is held
 * (with the VmData read before the lock as its base) and it returns true,
 * with the room, what is taken and the ceiling it saw (*room,
 * *outstanding, *ceiling); else the round goes on as one with a queue.
 */
static bool
admit_at_once(int64 now, const GmFirstRound *first,
			  int64 *room, int64 *outstanding, int64 *ceiling)
{
	int			held;

	if (!gm_shmem_wait_queue_empty())
		return false;
	(void) gm_shmem_wait_collect(NULL, 0, now, outstanding, room, ceiling, &held);
	if (*room < 0 || !admits_alone(*room - *outstanding, *ceiling, first))
		return false;
	gm_shmem_wait_admit_at_once(first->need, first->vm, first->rss, now);
	return true;
}

/*
 * One round of the admission, under the queue's lock: the available bytes
 * are the room up to the guard's target at the monitor's last look, less
 * what the admitted statements still expect to take as of that look; the
 * most ever available (the ceiling) is the target less what the guard
 * cannot move.  due: this process's statement runs now if it does not fit
 * (it gets a grant then); *hopeless: its need is above the ceiling (it
 * gets a grant at once); *grant: a grant's bytes.  The first round
 * (first, not NULL) queues the statement under the same lock, and notes
 * the VmData read before it as its base if it is admitted at once: one
 * lock for a statement that fits when its try without the lock
 * (admit_without_lock) gave up, with gm_shmem_wait_leave's none.
 */
static GmRound
admission_round(int64 now, bool due, bool *hopeless, int64 *grant, const GmFirstRound *first)
{
	int64		outstanding;
	int64		room;
	int64		ceiling;
	int			held;
	int			n;
	GmRound		r;

	gm_shmem_wait_lock();
	if (first != NULL && admit_at_once(now, first, &room, &outstanding, &ceiling))
	{
		gm_shmem_wait_unlock();
		*hopeless = false;
		elog(DEBUG2, "glibc_malloc memory wait: admitted: room " INT64_FORMAT " outstanding " INT64_FORMAT " ceiling " INT64_FORMAT " waiters 0",
			 room, outstanding, ceiling);
		return GM_ROUND_ADMITTED;
	}
	if (first != NULL)
		gm_shmem_wait_enqueue(first->need, first->patience_ms, now);
	n = gm_shmem_wait_collect(admit_buf, admit_max, now, &outstanding, &room, &ceiling, &held);
	if (!gm_shmem_wait_admitted() && room < 0)
		r = GM_ROUND_NO_LOOK;
	else
	{
		for (int i = 0; i < n; i++)
			admit_buf[i].due = admit_buf[i].mine && due;
		(void) gm_guard_admit(room - outstanding, ceiling, admit_buf, n);
		gm_shmem_wait_admit(admit_buf, n);
		r = !gm_shmem_wait_admitted() ? GM_ROUND_WAIT :
			gm_shmem_wait_granted(grant) ? GM_ROUND_GRANTED : GM_ROUND_ADMITTED;
		if (r != GM_ROUND_WAIT && first != NULL && first->vm >= 0)
			gm_shmem_wait_set_base(first->vm, first->rss);
	}
	*hopeless = gm_shmem_wait_hopeless();
	gm_shmem_wait_unlock();
	/* The admission's inputs, for who debugs it (DEBUG2), out of the lock. */
	if (r == GM_ROUND_ADMITTED || r == GM_ROUND_GRANTED)
		elog(DEBUG2, "glibc_malloc memory wait: %s: room " INT64_FORMAT " outstanding " INT64_FORMAT " ceiling " INT64_FORMAT " waiters %d",
			 r == GM_ROUND_ADMITTED ? "admitted" : "granted", room, outstanding, ceiling, n);
	return r;
}

static GmRound wait_loop(int64 start, bool *timed_out, bool *hopeless, int64 *grant);
static int64 wait_for_need(int64 need, bool may_wait);

/*
 * A statement's first round without the lock, while none waits and no
 * one holds it: admitted alone from the budget's sums (gm_guard_admit of
 * one waiter: the same rule as under the lock), its need claimed at once
 * (gm_shmem_wait_claim).  Returns whether it was; else the round takes the
 * lock (it does not fit, it must wait, or another process changed the
 * budget meanwhile).
 */
static bool
admit_without_lock(int64 now, const GmFirstRound *first)
{
	GmBudgetRead b;

	if (!gm_shmem_wait_read_budget(&b) || b.room < 0 ||
		!admits_alone(b.room - b.taken, b.ceiling, first))
		return false;
	if (!gm_shmem_wait_claim(&b, first->need, true, first->vm, first->rss, now))
		return false;
	elog(DEBUG2, "glibc_malloc memory wait: admitted: room " INT64_FORMAT " outstanding " INT64_FORMAT " ceiling " INT64_FORMAT " waiters 0 without the lock",
		 b.room, b.taken, b.ceiling);
	return true;
}

/*
 * A statement whose process the guard limits took want - VmData from the
 * budget (admitted with its need, a start share, more for its executor):
 * its limit covers want and the reserve at once, out of the pool the last
 * look held back, where the monitor set the limit in force
 * (gm_shmem_guard_raise).  Otherwise (a first limit, whose look replaces
 * it; the pool short; a process the last look counted as idle, whose
 * limit's room for a client message is no budget's) wait, on the latch
 * that the look sets, at most
 * GM_GUARD_START_WAIT_MS, until a look counts it working under a limit
 * that covers want, or two looks since the admission was noted have set
 * it (the budget may not cover the whole need).  At a statement's start
 * without a wait event (wait_event_info 0), as the start's wait for the
 * look that counts it working: part of its start, not a wait for memory
 * (memory_wait = 0 waits for none).  Returns whether the limit covers want.
 */
static bool
wait_for_reserved_limit(int64 want, uint32 looks0, uint32 wait_event_info)
{
	bool		covered;
	int64		deadline = gm_monotonic_usec() + (int64) GM_GUARD_START_WAIT_MS * 1000;

	/*
	 * What it took from the budget raises its limit at once, with the
	 * reserve, as the monitor's look would, out of the pool: no wait for
	 * the look, where the monitor set the limit in force.
	 */
	if (gm_shmem_guard_raise(want + Max(gm_shmem_guard_reserve(), 0), &covered))
		set_limits();
	if (covered)
		return true;
	gm_shmem_await_look(true);
	for (;;)
	{
		int64		limit = gm_shmem_my_guard_limit();

		/* (the look's limit serves what was taken: an idle one's no longer) */
		covered = limit == GM_NO_LIMIT ||
			(limit >= (want & ~(int64) 1) && !gm_shmem_guard_counts_idle());
		if (covered || gm_shmem_wait_looks() - looks0 >= 2 || gm_monotonic_usec() >= deadline)
			break;
		gm_shmem_guard_wake();
		look_wait(deadline, wait_event_info);
		look_interrupts();
	}
	gm_shmem_await_look(false);
	return covered;
}

/*
 * Before a top-level statement expected to take its need (what it maps,
 * else its executor need times GM_WAIT_NEED_FACTOR), once
 * gm_guard_may_wait said yes: queue it, and wait
 * until it is admitted (it then holds its need reserved until
 * gm_guard_wait_end), memory_wait runs out, or the guard lets go.  With
 * memory_wait = 0 it does not wait: admitted at once where it fits (the
 * first statements of a burst get their need before the others grow).  A
 * statement that runs without its need (memory_wait = 0, its wait ran out,
 * a need above anything that could free) runs with a grant: a share of
 * what is left, reserved, and its own limit while its executor runs, so
 * that a burst cannot outgrow the room between two of the monitor's looks
 * by more than its reserves.  may_wait false: as with memory_wait = 0.
 * Returns the microseconds waited (0: not waited).  ERROR (55P03, not an
 * out-of-memory) when another backend waits for a lock this one holds;
 * interrupts as always.
 */
int64
gm_guard_wait_for_memory(int64 exec_peak, int64 mapped_peak, bool may_wait)
{
	gm_guard_wait_end();
	if (Max(exec_peak, mapped_peak) < GM_WAIT_MIN_NEED)
		return 0;
	/* Without what it maps (-1: gm_guard_mapped_need), 1.25 times its executor need. */
	return wait_for_need(mapped_peak >= exec_peak ? mapped_peak :
						 (int64) (exec_peak * GM_WAIT_NEED_FACTOR), may_wait);
}

/*
 * The VmData an admitted or granted statement counts from: the first
 * round's, noted under its lock, when it was admitted at once; else (it
 * waited, or that read failed) read and noted now.
 */
static int64
admitted_base(int64 waited, const GmFirstRound *first)
{
	return waited == 0 && first->vm >= 0 ? first->vm : gm_shmem_wait_note_base();
}

/* The admission's buffer of waiters, and the exit callback, once per process. */
static void
admit_prepare(void)
{
	static bool exit_hook = false;

	if (admit_buf != NULL)
		return;
	admit_max = Max(gm_shmem_slot_count(), 1);
	admit_buf = MemoryContextAlloc(TopMemoryContext, sizeof(GmAdmitWaiter) * admit_max);
	if (!exit_hook)
	{
		before_shmem_exit(wait_at_exit, (Datum) 0);
		exit_hook = true;
	}
}

/*
 * Under the admission's lock: what the admission has left is *room (the
 * room at the monitor's last look, -1 = unknown) less what this returns,
 * what is taken (what the admitted statements still expect, and the
 * waiters' needs first: a hopeless one holds up nobody); *held: how many
 * hold a reservation, a grant or a share.
 */
static int64
admission_taken(int64 now, int64 *room, int *held)
{
	int64		outstanding;
	int64		ceiling;
	int64		taken;
	int			n;

	n = gm_shmem_wait_collect(admit_buf, admit_max, now, &outstanding, room, &ceiling, held);
	taken = outstanding;
	for (int i = 0; i < n; i++)
		if (ceiling < 0 || admit_buf[i].need <= ceiling)
			taken += Max(admit_buf[i].need, 0);
	return taken;
}

/*
 * Before a top-level statement whose need is unknown (no record), once
 * gm_guard_may_wait said yes, while the guard is engaged: take a start
 * share of what the admission has left (gm_guard_start_share), held as a
 * reservation until the statement ends, so that the monitor's looks serve
 * it before the growth of the statements that began before it; then wait
 * (at most GM_GUARD_START_WAIT_MS, not for memory) until the guard's limit
 * covers it.  None left, or the guard not engaged: nothing, it runs as
 * before, served by its growth.  Returns whether it holds one.  One read
 * of /proc/self/statm, only while engaged, and the share claimed without
 * the lock while none waits (gm_shmem_wait_claim), else under it.
 */
bool
gm_guard_take_start_share(void)
{
	int64		vm;
	int64		rss;
	int64		now;
	int64		room;
	int64		taken;
	int64		share;
	int			held;
	uint32		looks0;
	GmBudgetRead b;
	bool		lockless = false;

	gm_guard_wait_end();
	if (!gm_shmem_guard_engaged())
		return false;
	admit_prepare();
	vm = gm_proc_statm_self(&rss);
	if (vm < 0)
		return false;
	now = gm_monotonic_usec();
	/*
	 * While none waits and no one holds the lock: its share claimed
	 * without it.  Shares that race read the same count of holders, so
	 * each may be a little more than its turn under the lock would give;
	 * together within the room all the same (gm_shmem_wait_claim).
	 */
	if (gm_shmem_wait_read_budget(&b))
	{
		room = b.room;
		taken = b.taken;
		held = b.held;
		share = gm_guard_start_share(room, taken, held);
		if (share > 0)
			wait_entered = true;
		lockless = share == 0 || gm_shmem_wait_claim(&b, share, false, vm, rss, now);
	}
	if (!lockless)
	{
		gm_shmem_wait_lock();
		taken = admission_taken(now, &room, &held);
		share = gm_guard_start_share(room, taken, held);
		if (share > 0)
		{
			wait_entered = true;
			gm_shmem_wait_hold_share(share, vm, rss, now);
		}
		gm_shmem_wait_unlock();
	}
	start_share_held = share > 0;
	elog(DEBUG2, "glibc_malloc start share: " INT64_FORMAT " of room " INT64_FORMAT " taken " INT64_FORMAT " held %d vmdata " INT64_FORMAT "%s",
		 share, room, taken, held, vm, lockless ? " without the lock" : "");
	if (share == 0)
		return false;
	gm_shmem_wait_count(GM_WAIT_START_SHARES, 1);
	looks0 = gm_shmem_wait_looks();
	(void) wait_for_reserved_limit(vm + share, looks0, 0);
	return true;
}

/*
 * The running top-level statement's check (a parallel worker's plan's
 * too, in the worker), every GM_EXEC_CHECK_CALLS
 * calls of the wrapped inputs of its plan (check: its state); acts only
 * while the guard is engaged: at most every GM_EXEC_READ_USEC, where its
 * VmData (gm_proc_statm_data_bytes: from /proc/self/statm, less its
 * stack as last read; a little more than RLIMIT_DATA counts where the
 * stack grew since, so it errs early) come within GM_EXEC_GROW_MARGIN of
 * the guard's (or its grant's) limit, or within half of what it grew since
 * its first read (a sort's array doubles), and it has mapped half of what
 * it last took, it takes more from the admission's budget
 * (gm_guard_grow_share) as its reservation, and raises the guard's limit
 * by it at once (wait_for_reserved_limit; where it cannot, it waits at
 * most GM_GUARD_START_WAIT_MS, as a wait for memory, for the look that
 * covers it): its executor takes more at the limit instead of failing on
 * it between two of the monitor's looks.  A grant's own limit grows with
 * it.  Once it found none left, or its limit not covering it, not again
 * before the next look; none left: it goes on.  Not where the cap
 * (max_backend_memory) or the original limit is the lower: the guard
 * cannot raise those.  Returns whether it took more (the executor's end
 * ends the reservation).  Flag and clock reads; a /proc read at most every
 * GM_EXEC_READ_USEC; the lock only near the limit.
 */
bool
gm_guard_executor_check(GmExecCheck *check)
{
	int64		movable;
	int64		vm;
	int64		margin;
	int64		rss;
	int64		now;
	int64		room;
	int64		taken;
	int64		share;
	int			held;
	uint32		looks0;

	if (!gm_shmem_guard_engaged() ||
		((looks0 = gm_shmem_wait_looks()) == check->tried_looks && check->tried))
		return false;
	movable = Min(gm_shmem_my_guard_limit(), grant_limit);
	if (movable == GM_NO_LIMIT || Min(own_limit, orig_soft >= 0 ? orig_soft : GM_NO_LIMIT) <= movable)
		return false;
	now = gm_monotonic_usec();
	if (now >= check->read_at && now - check->read_at < GM_EXEC_READ_USEC)
		return false;
	check->read_at = now;
	if ((vm = gm_proc_statm_self(&rss)) < 0)
		return false;
	if (check->start_vm < 0)
		check->start_vm = vm;
	margin = Max(GM_EXEC_GROW_MARGIN, (vm - check->start_vm) / 2);
	if (movable - vm > margin ||
		(check->last_vm >= 0 && vm < check->last_vm + check->last_share / 2))
		return false;
	check->tried_looks = looks0;
	check->tried = true;
	admit_prepare();
	gm_shmem_wait_lock();
	taken = admission_taken(now, &room, &held);
	share = gm_guard_grow_share(room, taken, held - (gm_shmem_wait_admitted() ? 1 : 0),
								vm - check->start_vm);
	if (share > 0)
	{
		int64		grant;

		if (gm_shmem_wait_granted(&grant))
		{
			int64		lim = gm_guard_grant_limit(vm, share);

			if (grant_pending != GM_NO_LIMIT)
				grant_pending = Max(grant_pending, lim);
			if (grant_limit != GM_NO_LIMIT)
				grant_limit = Max(grant_limit, lim);
		}
		else if (!gm_shmem_wait_holds())
			start_share_held = true;
		wait_entered = true;
		gm_shmem_wait_grow(share, vm, rss, now);
	}
	gm_shmem_wait_unlock();
	elog(DEBUG2, "glibc_malloc executor share: " INT64_FORMAT " at " INT64_FORMAT " of limit " INT64_FORMAT " room " INT64_FORMAT " taken " INT64_FORMAT " held %d%s",
		 share, vm, movable, room, taken, held, IsParallelWorker() ? " (a parallel worker)" : "");
	gm_shmem_wait_count(GM_WAIT_EXEC_ASKS, 1);
	if (share == 0)
		return false;
	gm_shmem_wait_count(GM_WAIT_EXEC_SHARES, 1);
	check->last_vm = vm;
	check->last_share = share;
	if (grant_limit != GM_NO_LIMIT)
		set_limits();
	/* Covered at once: it may take more again before the next look. */
	check->tried = !wait_for_reserved_limit(vm + share, looks0, gm_memory_wait_event());
	return true;
}

/* Whether this process holds a start share (gm_guard_take_start_share) now: a flag read. */
bool
gm_guard_holds_start_share(void)
{
	/* (the monitor ends it when its backend waits for its client: a Bind's) */
	return start_share_held && gm_shmem_wait_holds();
}

/* gm_guard_wait_for_memory's work, for a need of need bytes. */
static int64
wait_for_need(int64 need, bool may_wait)
{
	int64		start;
	int64		waited = 0;
	int64		grant = 0;
	GmFirstRound first;
	GmRound		r;
	bool		hopeless = false;
	volatile bool timed_out = false;

	admit_prepare();
	first.need = need;
	first.patience_ms = may_wait ? wait_ms() : 0;
	/* Its base if it is admitted at once: read before the lock, not under it. */
	first.vm = gm_proc_statm_self(&first.rss);
	start = gm_monotonic_usec();
	wait_entered = true;
	r = admit_without_lock(start, &first) ? GM_ROUND_ADMITTED :
		admission_round(start, first.patience_ms == 0, &hopeless, &grant, &first);
	if (r == GM_ROUND_WAIT)
	{
		gm_shmem_wait_count(GM_WAIT_WAITS, 1);

		/*
		 * Cancelled, statement_timeout or given up (an ERROR): counted,
		 * left.  A termination (FATAL) does not come here: wait_at_exit
		 * leaves the queue, its time is not counted.
		 */
		PG_TRY();
		{
			r = wait_loop(start, (bool *) &timed_out, &hopeless, &grant);
		}
		PG_CATCH();
		{
			gm_shmem_wait_count(GM_WAIT_USEC, gm_monotonic_usec() - start);
			gm_guard_wait_end();
			PG_RE_THROW();
		}
		PG_END_TRY();
		waited = Max(gm_monotonic_usec() - start, 1);
		gm_shmem_wait_count(GM_WAIT_USEC, waited);
		/* Its wait ran out: admitted if it fits now, else with a grant. */
		if (timed_out)
			r = admission_round(gm_monotonic_usec(), true, &hopeless, &grant, NULL);
		if (timed_out && r != GM_ROUND_ADMITTED)
			gm_shmem_wait_count(GM_WAIT_TIMEOUTS, 1);
	}
	switch (r)
	{
		case GM_ROUND_ADMITTED:
			{
				uint32		looks0 = gm_shmem_wait_looks();
				int64		base = admitted_base(waited, &first);

				if (base >= 0)
					(void) wait_for_reserved_limit(base + need, looks0, 0);
				break;
			}
		case GM_ROUND_GRANTED:
			{
				grant_set(admitted_base(waited, &first), grant);
				/* A timeout is counted in wait_timeouts. */
				if (!timed_out && first.patience_ms == 0)
					gm_shmem_wait_count(GM_WAIT_UNRESERVED, 1);
				else if (!timed_out && hopeless)
					gm_shmem_wait_count(GM_WAIT_SKIPS, 1);
				break;
			}
		case GM_ROUND_WAIT:
		case GM_ROUND_NO_LOOK:
			/* The guard let go, or has not looked: runs as without the wait. */
			gm_guard_wait_end();
			break;
	}
	if (waited == 0)
		return 0;

	/*
	 * While it waited, the guard counted it idle and limited it so: a
	 * start again, which waits for the look that counts it working and
	 * gives it its reservation, before the executor allocates.
	 */
	gm_guard_top_statement_start();
	return waited;
}

/*
 * The wait itself, from start: returns the last round's word
 * (GM_ROUND_WAIT: memory_wait ran out, *timed_out, or the guard let go;
 * GM_ROUND_GRANTED: its need is above the ceiling, *hopeless).
 */
static GmRound
wait_loop(int64 start, bool *timed_out, bool *hopeless, int64 *grant)
{
	int64		next_lock_check = start;

	for (;;)
	{
		int64		now = gm_monotonic_usec();
		int64		left_ms = wait_ms() - (now - start) / 1000;
		GmRound		r;

		if (left_ms <= 0)
		{
			*timed_out = true;
			return GM_ROUND_WAIT;
		}
		if (!gm_shmem_guard_acts())
			return GM_ROUND_WAIT;	/* the guard let go: off, or no limit */
		/* At once, then about once a second: pg_blocking_pids takes locks. */
		if (now >= next_lock_check)
		{
			next_lock_check = now + GM_WAIT_LOCK_CHECK_USEC;
			if (blocks_others())
				ereport(ERROR,
						(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
						 errmsg("gave up waiting for memory: another session waits for a lock this statement holds"),
						 errdetail("The statement waited %.1f s for memory (glibc_malloc.memory_wait).",
								   (gm_monotonic_usec() - start) / 1000000.0),
						 errhint("Retry the statement, or set glibc_malloc.memory_wait to 0 for sessions that hold locks others wait for.")));
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(left_ms, GM_WAIT_POLL_MS), gm_memory_wait_event());
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		r = admission_round(gm_monotonic_usec(), false, hopeless, grant, NULL);
		if (r != GM_ROUND_WAIT)
			return r;
	}
}

/*
 * The statement's reservation ends (its end, an abort, the next top-level
 * statement), or it leaves the queue; a grant's limit goes.  Flag tests
 * when it has neither.  Allocates nothing: from the transaction callbacks
 * too.
 */
void
gm_guard_wait_end(void)
{
	start_share_held = false;
	/* (a wait for a look left by an ERROR) */
	gm_shmem_await_look(false);
	grant_pending = GM_NO_LIMIT;
	grant_lift();
	if (!wait_entered)
		return;
	wait_entered = false;
	gm_shmem_wait_leave();
}

/*
 * Whether the module's limits raised the "out of memory" being handled now
 * in this process, and which: the guard's if it limits this process now,
 * or limited it a moment ago (the monitor may have lifted or raised the
 * limit since the allocation failed); else the cap's if it is the limit in
 * force.
 */
static bool
limit_kind(bool *by_guard, int64 *soft)
{
	int64		guard;
	int64		hard;
	int64		engaged_at;

	if (!gm_guarded_process())
		return false;
	guard = gm_shmem_my_guard_limit();
	if (!gm_data_limit(0, soft, &hard))
		return false;
	engaged_at = gm_shmem_guard_engaged_at();
	/* A grant is the guard's: the statement's share of the room. */
	if (guard < own_limit || (grant_limit != GM_NO_LIMIT && grant_limit <= own_limit))
		*by_guard = true;
	else if (own_limit != GM_NO_LIMIT && *soft == own_limit)
		*by_guard = false;
	else if (engaged_at != 0 && gm_monotonic_usec() - engaged_at < GM_GUARD_RECENT_USEC)
		*by_guard = true;
	else
		return false;			/* not one of ours */
	return true;
}

/*
 * gm_guard_caught_oom_hint reads the error being handled through a copy in
 * this context, made at load; its first block (GM_HINT_CXT_SIZE) is kept
 * across resets.
 */
#define GM_HINT_CXT_SIZE	(16 * 1024)
static MemoryContext hint_cxt = NULL;

/*
 * What gm_guard_count_oom found of the "out of memory" it counted last, for
 * its HINT (gm_guard_caught_oom_hint, else emit_log_hook): counted with a
 * grant's limit in force, it is the grant's, though the HINT comes after
 * that limit is lifted.
 */
static struct
{
	bool		valid;			/* one of ours, not reported yet */
	bool		by_guard;		/* the guard's, not the cap's */
	bool		grant;			/* under the statement's grant */
	int64		soft;			/* the soft limit in force */
} oom_note;

/*
 * An "out of memory" error (SQLSTATE 53200) where it is caught or first
 * reported, once per error: say whether it is under the module's limits,
 * and count it in glibc_malloc_guard if so.  A parallel worker's tells its
 * leader, whose own raising of it again (without the worker's limits in
 * force) is then a limit's error too, counted by the worker.  Allocates
 * nothing.
 */
GmOomKind
gm_guard_count_oom(void)
{
	bool		by_guard;
	int64		soft;

	oom_note.valid = false;
	if (gm_shmem_take_worker_limit_oom())
		return GM_OOM_LIMIT;
	if (!limit_kind(&by_guard, &soft))
		return GM_OOM_OTHER;
	oom_note.valid = true;
	oom_note.by_guard = by_guard;
	oom_note.grant = by_guard && grant_limit != GM_NO_LIMIT && soft == grant_limit;
	oom_note.soft = soft;
	gm_shmem_count_oom(by_guard);
	if (IsParallelWorker())
		gm_shmem_tell_leader_limit_oom();
	return GM_OOM_LIMIT;
}

/*
 * The HINT of an "out of memory" under the module's limits into buf: of
 * the kind gm_guard_count_oom noted when it counted it, else as the limits
 * are now; false if it is not one of ours.  The note is used up.
 * Allocates nothing.
 */
static bool
oom_hint_text(char *buf, size_t size)
{
	int64		soft;
	int64		vm;
	bool		by_guard;
	bool		grant;
	char		lim[32];
	char		used[32];
	char		extra[32];
	bool		noted = oom_note.valid;

	oom_note.valid = false;
	if (noted)
	{
		by_guard = oom_note.by_guard;
		grant = oom_note.grant;
		soft = oom_note.soft;
	}
	else if (limit_kind(&by_guard, &soft))
		grant = by_guard && grant_limit != GM_NO_LIMIT && soft == grant_limit;
	else
		return false;
	vm = gm_proc_status_bytes(0, "VmData:");
	fmt_size(used, sizeof(used), Max(vm, 0));
	if (grant)
		snprintf(buf, size,
				 "The statement's recorded memory need did not fit the room left below the server's memory limit when it started, and it ran with what was left (%s mapped): glibc_malloc.memory_guard keeps the kernel's OOM killer from restarting the server. Set glibc_malloc.memory_wait so that it waits for room, or retry when fewer large queries run.",
				 used);
	else if (by_guard)
		snprintf(buf, size,
				 "The server is close to its memory limit: glibc_malloc.memory_guard limited this backend's private memory (%s mapped) so that the kernel's OOM killer does not restart the server. Retry when fewer large queries run, lower work_mem, or %s.",
				 used, gm_guard_hint_remedy(gm_shmem_monitor_source()));
	else
	{
		fmt_size(lim, sizeof(lim), soft);
		fmt_size(extra, sizeof(extra), cur_cap >= 0 ? cur_cap : soft - Max(base_vmdata, 0));
		snprintf(buf, size,
				 "glibc_malloc.max_backend_memory allows this backend %s of private memory beyond what it had when the limit was applied (%s in all, %s mapped). Raise the setting, or lower work_mem.",
				 extra, lim, used);
	}
	return true;
}

/*
 * A hook's PG_CATCH, the SQLSTATE 53200 error just counted
 * (gm_guard_count_oom) under the module's limits: if it is PostgreSQL's own
 * "out of memory" (a failed malloc) without a HINT, its HINT goes on the
 * error now, whether or not the server log shows it later (emit_log_hook
 * runs only for what log_min_messages lets through).  Others of SQLSTATE
 * 53200 ("out of shared memory" and its HINT, a parallel worker's error
 * raised again in the leader with the worker's HINT) are left as they are.
 * The error is read through a copy in hint_cxt (CopyErrorData may not copy
 * into ErrorContext), then errhint sets it in ErrorContext.  Both allocate:
 * meanwhile the soft limit is the one the process started with (prlimit
 * only), and the limits in force are set again after, also when the copy
 * fails.  The note is used up first, so an enclosing hook's catch does not
 * try again.
 */
void
gm_guard_caught_oom_hint(void)
{
	char		buf[512];
	ErrorData  *edata;
	MemoryContext old;
	bool		plain;
	int64		hard;

	if (!oom_note.valid)
		return;
	oom_note.valid = false;
	if (hint_cxt == NULL)
		return;
	MemoryContextReset(hint_cxt);
	if (orig_soft < 0 && !gm_data_limit(0, &orig_soft, &hard))
		orig_soft = GM_NO_LIMIT;
	(void) gm_set_data_limit(0, orig_soft);
	PG_TRY();
	{
		old = MemoryContextSwitchTo(hint_cxt);
		edata = CopyErrorData();
		MemoryContextSwitchTo(old);
		plain = edata->elevel >= ERROR && edata->message_id != NULL &&
			strcmp(edata->message_id, "out of memory") == 0 && edata->hint == NULL;
		MemoryContextReset(hint_cxt);
		/* oom_hint_text uses the note: valid again for it alone. */
		oom_note.valid = plain;
		if (plain && oom_hint_text(buf, sizeof(buf)))
			errhint("%s", buf);
	}
	PG_CATCH();
	{
		oom_note.valid = false;
		set_limits();
		PG_RE_THROW();
	}
	PG_END_TRY();
	set_limits();
}

/*
 * emit_log_hook's part: PostgreSQL's own "out of memory" (a failed
 * malloc) in a process under the module's limits, not caught by the
 * hooks, gets a HINT naming the limit and how to change it.  A parallel
 * worker's, raised again in the leader, has no message_id and already has
 * the worker's HINT.  Allocates only with MCXT_ALLOC_NO_OOM in
 * ErrorContext, which keeps a block for this.
 */
void
gm_guard_error_hint(ErrorData *edata)
{
	char		buf[512];
	char	   *hint;

	if (edata->elevel < ERROR || edata->sqlerrcode != ERRCODE_OUT_OF_MEMORY ||
		edata->message_id == NULL || strcmp(edata->message_id, "out of memory") != 0 ||
		edata->hint != NULL)
	{
		oom_note.valid = false;
		return;
	}
	if (!oom_hint_text(buf, sizeof(buf)))
		return;
	hint = MemoryContextAllocExtended(ErrorContext, strlen(buf) + 1, MCXT_ALLOC_NO_OOM);
	if (hint != NULL)
	{
		strcpy(hint, buf);
		edata->hint = hint;
	}
}

/* Check hook for glibc_malloc.max_backend_memory: -1, or at least 1 MB. */
static bool
check_max_backend_memory(int *newval, void **extra, GucSource source)
{
	if (*newval != -1 && *newval < 1024)
	{
		GUC_check_errdetail("glibc_malloc.max_backend_memory must be -1 (no cap) or at least 1MB.");
		return false;
	}
	return true;
}

/*
 * Assign hook: note the new cap; gm_guard_apply applies it.  A cap that
 * raises or lifts the one in force is applied at once: the GUC's rollback
 * at a transaction's end runs this after the transaction callbacks (inside
 * the commit, where an allocation that fails is a PANIC), and the session
 * may then stay idle.  Raising a limit can fail no allocation, and
 * gm_guard_apply then allocates nothing and raises no error (the base and
 * the original limit are known, the process has its slot: prlimit and
 * atomics only).  A lower cap waits for the next statement start or
 * transaction end.
 */
static void
assign_max_backend_memory(int newval, void *extra)
{
	int64		cap = newval < 0 ? -1 : (int64) newval * 1024;

	if (cap == cur_cap)
		return;
	limit_dirty = true;
	cur_cap = cap;
	if (own_limit != GM_NO_LIMIT && base_vmdata >= 0 && orig_soft >= 0 &&
		(cap < 0 || base_vmdata + cap >= own_limit))
		gm_guard_apply();
}

/*
 * Define glibc_malloc.max_backend_memory, memory_wait and max_memory_wait,
 * and make the context the caught HINT reads errors in; from _PG_init.
 */
void
gm_guard_define_gucs(void)
{
	/* Its block allocated now, kept across resets: an error's copy. */
	if (hint_cxt == NULL)
		hint_cxt = AllocSetContextCreate(TopMemoryContext, "glibc_malloc error hint",
										 GM_HINT_CXT_SIZE, GM_HINT_CXT_SIZE, GM_HINT_CXT_SIZE);

	/*
	 * USERSET: a session may only make its own statements wait (or not);
	 * the guard's limits protect the server either way.
	 */
	DefineCustomIntVariable("glibc_malloc.memory_wait",
							"While the memory guard acts on a limit, a query whose recorded memory peak does not fit the room left waits up to this long for memory (0: run at once, reserved where it fits).",
							"Only top-level statements of queries in glibc_malloc_statements (glibc_malloc.track_statements). A waiter another session waits for gives up at once with an error; a wait that runs out runs the query.",
							&memory_wait,
							30000, 0, 3600 * 1000,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	/*
	 * SUSET: a ceiling a role may not lift, so that no session holds the
	 * memory that frees (kept for a waiter) longer than the server allows.
	 */
	DefineCustomIntVariable("glibc_malloc.max_memory_wait",
							"The longest glibc_malloc.memory_wait counts for, whatever a session sets.",
							"A longer memory_wait is cut to it.",
							&max_memory_wait,
							30000, 0, 3600 * 1000,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	/*
	 * SUSET: a cap per role or database (ALTER ROLE ... SET) that the role
	 * itself must not lift; reload reaches running backends.
	 */
	DefineCustomIntVariable("glibc_malloc.max_backend_memory",
							"Caps the private memory one backend may add, through its soft RLIMIT_DATA (-1: no cap).",
							"Past it a query gets ERROR: out of memory and the session goes on. Counted from what the backend had mapped when the cap was applied; covers client backends and parallel workers.",
							&max_backend_memory,
							-1, -1, INT_MAX,
							PGC_SUSET,
							GUC_UNIT_KB,
							check_max_backend_memory, assign_max_backend_memory, NULL);
}
