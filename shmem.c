/*-------------------------------------------------------------------------
 *
 * shmem.c
 *		Malloc snapshots of every backend in shared memory, and remote trim.
 *
 * With shared_preload_libraries, shared memory holds one slot per PGPROC.
 * Each process publishes a snapshot of its malloc state into its own slot:
 * at transaction end (at most once per glibc_malloc.stats_interval), after
 * an idle release, and on request.  Any session reads all slots through the
 * glibc_malloc_backends view.
 *
 * A slot has a single writer, its owner, and is read without locks under a
 * change counter (as pgstat's backend status): the writer makes the counter
 * odd, writes, and makes it even; a reader retries until it sees the same
 * even value before and after copying.  Requests from other processes
 * (trim, publish) are atomic flags beside it.
 *
 * A process claims its slot, with its pid, role and type, at its first
 * transaction end, whatever stats_interval says; processes exiting (a
 * failed login) and client backends without a role yet claim nothing.
 *
 * glibc_malloc_trim_backend(pid) sets the trim flag in the target's slot
 * and sends it SIGUSR2, which idle.c's handler takes.  The request is
 * served at once at the provably safe idle point; otherwise, once the
 * target's current transaction is over, at its idle point or the first
 * statement of its next transaction.
 * glibc_malloc_trim_idle() sets a flag that only the idle point serves: a
 * backend that ran a statement meanwhile drops it at that transaction's
 * end.  Senders find the slot by PGPROC number, so a request costs O(1).
 *
 * Each snapshot also holds the kinds of memory: all memory contexts, the
 * caches (CacheMemoryContext), the malloc memory in use outside them, and
 * the largest executor memory of one statement since the last publish
 * (doctor.c measures it at ExecutorEnd).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/twophase.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/memutils.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "glibc_malloc.h"

#define GM_REQ_TRIM		0x1		/* trim at the next safe point */
#define GM_REQ_PUBLISH	0x2		/* publish at the next safe point */
#define GM_REQ_TRIM_IDLE 0x4	/* trim at the idle point only */

/* What a slot's statement is to the admission (glibc_malloc.memory_wait). */
typedef enum GmWaitState
{
	GM_WAIT_NONE,
	GM_WAIT_WAITING,			/* queued */
	GM_WAIT_ADMITTED,			/* runs with a reservation */
	GM_WAIT_RETURNED			/* runs; its reservation went back until it
								 * grows again (gm_shmem_wait_publish) */
} GmWaitState;

/*
 * Under GmShared's wait_lock, but for ended: the owner ends its admitted
 * statement's reservation without the lock (gm_shmem_wait_leave), and
 * whoever reads the state under the lock reads it through wait_state.
 * gm_shmem_wait_leave also reads state and latch without the lock.  The
 * owner also fills its slot while it is NONE and makes it ADMITTED
 * without the lock (gm_shmem_wait_claim), fields first.
 */
typedef struct GmWaitSlot
{
	GmWaitState state;
	pg_atomic_uint32 ended;		/* 1: ADMITTED or RETURNED ended, counts as
								 * NONE (the owner's, set without the lock) */
	pg_atomic_uint64 counted;	/* its part of wait_taken (slot_recount) */
	pg_atomic_uint32 counted_held;	/* and of wait_held: 1 or 0 */
	int			pid;
	uint64		arrival;		/* the queue's order */
	int64		need;			/* bytes: WAITING's need, ADMITTED's reservation */
	int64		since;			/* gm_monotonic_usec() it queued */
	int64		patience_ms;	/* its memory_wait */
	int64		base_vmdata;	/* ADMITTED: VmData read just before the round
								 * that admitted it, or when its process woke
								 * admitted; -1 = not yet */
	int64		look_vmdata;	/* ADMITTED: VmData at the monitor's last look
								 * since, the look wait_room is of; -1 = none */
	int64		look_gap;		/* and VmData less RssAnon then: mapped, not
								 * touched yet, beyond base_gap */
	int64		base_gap;		/* VmData less RssAnon with base_vmdata: what
								 * the process had mapped and not touched
								 * before its statement; 0 = unknown */
	int64		admitted_at;	/* ADMITTED: gm_monotonic_usec() of its
								 * admission */
	int64		grew_at;		/* ADMITTED: gm_monotonic_usec() of its base,
								 * or of the last look that saw it grow */
	bool		hopeless;		/* its need is above what the
								 * admission could ever have */
	bool		granted;		/* ADMITTED: with a share (need is its grant),
								 * not with its need */
	bool		start;			/* ADMITTED: a start share
								 * (gm_shmem_wait_hold_share), not an
								 * admission */
	struct Latch *latch;
} GmWaitSlot;

/* One process's slot: its snapshot, and requests from other processes. */
typedef struct GmSlot
{
	uint32		changecount;	/* odd while the owner writes */
	GmSnapshot	snap;
	pg_atomic_uint32 requests;	/* GM_REQ_* from other processes */

	/*
	 * The releases of the processes that held this slot and exited, added
	 * by each at its exit under the change counter: with the snapshot's,
	 * the slot's counts never go down (glibc_malloc_counters).
	 */
	GmReleaseCount exited[GM_NRELEASE_KINDS];

	/*
	 * Soft RLIMIT_DATA values, bytes (GM_NO_LIMIT: none): the one the
	 * process started with, its own glibc_malloc.max_backend_memory, and
	 * the memory guard's.  The owner writes the first two, the monitor the
	 * third (always an even number), but for the owner's first limit
	 * (gm_shmem_guard_first_limit, an odd one, taken only where there is
	 * none); whoever changes one sets the lowest of the three.
	 */
	pg_atomic_uint64 orig_limit;
	pg_atomic_uint64 own_limit;
	pg_atomic_uint64 guard_limit;

	/*
	 * "out of memory" errors its parallel workers raised under their
	 * limits, not yet seen by this process (their leader) raising them
	 * again: the workers add, the leader takes.
	 */
	pg_atomic_uint32 worker_limit_oom;

	/*
	 * The memory guard's view of the process: whether its last look counted
	 * it as working (the monitor writes it), and the top-level statements
	 * that started while it did not (the owner counts them, and wakes the
	 * monitor).
	 */
	bool		guard_working;
	pg_atomic_uint32 guard_starts;
	/* the owner waits for the monitor's next look (gm_shmem_await_look) */
	pg_atomic_uint32 look_waiter;
	/* the pid the monitor set guard_limit for (0: none): only it raises it */
	pg_atomic_uint32 guard_owner;
	/* its top-level statement waits for its client inside itself (the owner writes it) */
	bool		guard_in_statement;

	/*
	 * A statement waiting for memory, or admitted with a reservation
	 * (glibc_malloc.memory_wait): under the shared wait lock (GmWaitSlot
	 * says what is read or written without it).
	 */
	GmWaitSlot	wait;
} GmSlot;

typedef struct GmShared
{
	GmMonitorState monitor;		/* the memory monitor's (monitor.c) */
	pg_atomic_uint64 oom_errors[2];	/* out-of-memory errors under our
										 * limits: [0] max_backend_memory,
										 * [1] the memory guard's */
	pg_atomic_uint64 all_oom_errors;	/* every "out of memory" error */
	TimestampTz counters_since; /* when the slots were created */
	/* glibc_malloc.memory_wait: the queue's lock and order, the counts */
	LWLock	   *wait_lock;
	pg_atomic_uint32 wait_locked;	/* 1 while an exclusive holder of
									 * wait_lock may change the budget (left
									 * at 1 by an ERROR under it until the
									 * next holder's release) */
	pg_atomic_uint32 wait_gen;	/* one more at every exclusive hold: a
								 * claim without the lock (gm_shmem_wait_claim)
								 * that saw none begin goes on */
	pg_atomic_uint64 wait_arrivals;	/* the queue's order */
	int64		wait_room;		/* written under wait_lock (read without it
								 * by gm_shmem_wait_read_budget, which
								 * wait_gen checks): the room up to the
								 * guard's target at the monitor's last look;
								 * -1 = unknown */
	int64		wait_ceiling;	/* and the most the admission could ever
								 * have: the target less what the guard cannot
								 * move; -1 = unknown */
	pg_atomic_uint64 wait_counts[GM_NWAIT_COUNTS];
	pg_atomic_uint32 wait_looks;	/* the monitor's looks published */
	pg_atomic_uint64 raise_pool;	/* what raises may take until the next
									 * look (gm_shmem_guard_raise) */
	pg_atomic_uint32 wait_waiting;	/* slots WAITING (changed under
									 * wait_lock; read without it) */
	pg_atomic_uint64 wait_taken;	/* what the admitted statements still
									 * expect to take, as of the monitor's
									 * last look: the sum of the slots'
									 * counted (an int64; slot_recount) */
	pg_atomic_uint32 wait_held;	/* the slots ADMITTED: their counted_held */
	int			nslots;
	GmSlot		slots[FLEXIBLE_ARRAY_MEMBER];
} GmShared;

/* GUC glibc_malloc.stats_interval: publish at most once per this many ms. */
static int	stats_interval = 1000;

static GmShared *shared = NULL;
static GmSlot *my_slot = NULL;
static int	my_slot_pid = 0;
static int64 last_publish = 0;	/* gm_monotonic_usec(); 0 = never */

static void slot_recount(GmWaitSlot *ws);
static void end_lockless(GmWaitSlot *ws);
static void wake_waiters(GmWaitSlot *mine);

static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif

/* How many slots: one per PGPROC (regular, auxiliary, prepared xacts). */
static int
slot_count(void)
{
	return GM_MAX_BACKENDS() + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

static Size
shared_size(void)
{
	return add_size(offsetof(GmShared, slots), mul_size(slot_count(), sizeof(GmSlot)));
}

/* shmem_request_hook: reserve the slots. */
static void
gm_shmem_request(void)
{
#if PG_VERSION_NUM >= 150000
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
#endif
	RequestAddinShmemSpace(shared_size());
	RequestNamedLWLockTranche("glibc_malloc_memory_wait", 1);
}

/* shmem_startup_hook: create or attach the slots. */
static void
gm_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("glibc_malloc", shared_size(), &found);
	if (!found)
	{
		memset(shared, 0, shared_size());
		shared->nslots = slot_count();
		for (int i = 0; i < shared->nslots; i++)
		{
			pg_atomic_init_u32(&shared->slots[i].requests, 0);
			pg_atomic_init_u64(&shared->slots[i].orig_limit, GM_NO_LIMIT);
			pg_atomic_init_u64(&shared->slots[i].own_limit, GM_NO_LIMIT);
			pg_atomic_init_u64(&shared->slots[i].guard_limit, GM_NO_LIMIT);
			pg_atomic_init_u32(&shared->slots[i].worker_limit_oom, 0);
			pg_atomic_init_u32(&shared->slots[i].guard_starts, 0);
			pg_atomic_init_u32(&shared->slots[i].look_waiter, 0);
			pg_atomic_init_u32(&shared->slots[i].guard_owner, 0);
			pg_atomic_init_u32(&shared->slots[i].wait.ended, 0);
			pg_atomic_init_u64(&shared->slots[i].wait.counted, 0);
			pg_atomic_init_u32(&shared->slots[i].wait.counted_held, 0);
		}
		pg_atomic_init_u64(&shared->oom_errors[0], 0);
		pg_atomic_init_u64(&shared->oom_errors[1], 0);
		pg_atomic_init_u64(&shared->all_oom_errors, 0);
		shared->wait_lock = &(GetNamedLWLockTranche("glibc_malloc_memory_wait"))->lock;
		shared->wait_room = -1;
		shared->wait_ceiling = -1;
		pg_atomic_init_u32(&shared->wait_locked, 0);
		pg_atomic_init_u32(&shared->wait_gen, 0);
		pg_atomic_init_u64(&shared->wait_arrivals, 0);
		for (int k = 0; k < GM_NWAIT_COUNTS; k++)
			pg_atomic_init_u64(&shared->wait_counts[k], 0);
		pg_atomic_init_u32(&shared->wait_looks, 0);
		pg_atomic_init_u64(&shared->raise_pool, 0);
		pg_atomic_init_u32(&shared->wait_waiting, 0);
		pg_atomic_init_u64(&shared->wait_taken, 0);
		pg_atomic_init_u32(&shared->wait_held, 0);
		shared->counters_since = GetCurrentTimestamp();
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Define glibc_malloc.stats_interval; from _PG_init, preloaded or not. */
void
gm_shmem_define_gucs(void)
{
	/* SIGHUP: how often backends publish is server-wide monitoring policy. */
	DefineCustomIntVariable("glibc_malloc.stats_interval",
							"Publishes each backend's malloc snapshot to the glibc_malloc_backends view at most this often, at transaction end (0: every transaction; -1: off).",
							"Needs shared_preload_libraries. Snapshots are also published after an idle release and on request.",
							&stats_interval,
							1000, -1, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/* Called from _PG_init while preloading: install the shmem hooks. */
void
gm_shmem_init(void)
{
#if PG_VERSION_NUM >= 150000
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = gm_shmem_request;
#else
	gm_shmem_request();
#endif
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = gm_shmem_startup;
}

/* Error out unless the slots exist (they need shared_preload_libraries). */
static void
require_shared(void)
{
	if (shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("glibc_malloc must be loaded via shared_preload_libraries to see or trim other backends")));
}

/*
 * on_shmem_exit: leave the slot clean for the next process, with this
 * process's releases, as counted now (no fewer than it published), added
 * to the slot's counts in the same change.
 */
static void
release_slot(int code, Datum arg)
{
	GmSlot	   *slot = my_slot;

	if (slot == NULL)
		return;
	gm_shmem_wait_leave();
	slot->changecount++;
	pg_write_barrier();
	for (int k = 0; k < GM_NRELEASE_KINDS; k++)
	{
		slot->exited[k].count += gm_releases[k].count;
		slot->exited[k].bytes += gm_releases[k].bytes;
	}
	slot->snap.pid = 0;
	slot->snap.signalable = false;
	memset(slot->snap.releases, 0, sizeof(slot->snap.releases));
	pg_write_barrier();
	slot->changecount++;
	pg_atomic_write_u32(&slot->requests, 0);
	pg_atomic_write_u64(&slot->own_limit, GM_NO_LIMIT);
	pg_atomic_write_u64(&slot->guard_limit, GM_NO_LIMIT);
	pg_atomic_write_u32(&slot->worker_limit_oom, 0);
	pg_atomic_write_u32(&slot->look_waiter, 0);
	pg_atomic_write_u32(&slot->guard_owner, 0);
	my_slot = NULL;
}

/*
 * This process's slot, claimed on first use with its identity (so that
 * remote trim finds it even when nothing is published); NULL without
 * shared memory, while exiting, or in a client backend that has no role yet.
 */
static GmSlot *
claim_slot(void)
{
	int			n;
	GmSlot	   *slot;

	if (shared == NULL || MyProc == NULL)
		return NULL;
	if (my_slot_pid == MyProcPid)
		return my_slot;
	if (proc_exit_inprogress ||
		(MyBackendType == B_BACKEND && !OidIsValid(MyProc->roleId)))
		return NULL;

	n = GM_MY_PROC_NUMBER();
	if (n < 0 || n >= shared->nslots)
		return NULL;
	slot = &shared->slots[n];
	pg_atomic_write_u32(&slot->requests, 0);
	{
		int64		soft;
		int64		hard;

		pg_atomic_write_u64(&slot->orig_limit,
							gm_data_limit(0, &soft, &hard) ? soft : GM_NO_LIMIT);
		pg_atomic_write_u64(&slot->own_limit, GM_NO_LIMIT);
		pg_atomic_write_u64(&slot->guard_limit, GM_NO_LIMIT);
	}
	pg_atomic_write_u32(&slot->worker_limit_oom, 0);
	pg_atomic_write_u32(&slot->look_waiter, 0);
	pg_atomic_write_u32(&slot->guard_owner, 0);
	slot->guard_working = false;
	slot->guard_in_statement = false;
	/* A crashed predecessor's: none survive (NONE stored before ended is cleared). */
	slot->wait.state = GM_WAIT_NONE;
	pg_write_barrier();
	pg_atomic_write_u32(&slot->wait.ended, 0);
	slot_recount(&slot->wait);
	slot->changecount++;
	pg_write_barrier();
	memset(&slot->snap, 0, sizeof(slot->snap));
	slot->snap.pid = MyProcPid;
	slot->snap.roleid = MyProc->roleId;
	slot->snap.backend_type = MyBackendType;
	slot->snap.signalable = gm_idle_enabled();
	slot->snap.guarded = gm_guarded_process();
	slot->snap.taken_at = 0;
	pg_write_barrier();
	slot->changecount++;
	my_slot = slot;
	my_slot_pid = MyProcPid;
	on_shmem_exit(release_slot, (Datum) 0);
	return my_slot;
}

/*
 * How often the memory contexts are walked for a publish: the walk costs
 * time proportional to the number of contexts, which a session with many
 * relations in its relcache has thousands of.  A publish in between reuses
 * the last totals, unless another process asked for a fresh snapshot.
 */
#define GM_CONTEXT_WALK_MS 1000

static int64 last_context_walk = 0;	/* gm_monotonic_usec() */
static int64 context_bytes = -1;
static int64 cache_bytes = -1;
static int64 outside_context_bytes = -1;	/* in_use - context_bytes, at the walk */

/* Requests this process has served, for the snapshot. */
static uint32 served = 0;

/* The largest executor memory since the last publish (gm_shmem_note_executor). */
static int64 peak_executor_bytes = 0;

/*
 * The largest statement since this process last returned free heap, and its
 * queryid: what left the free heap the doctor sees.  releases_seen tells a
 * release since.
 */
static int64 top_executor_bytes = 0;
static int64 top_queryid = 0;
static int64 releases_seen = 0;

/* Releases of every kind so far. */
static int64
releases_so_far(void)
{
	int64		n = 0;

	for (int k = 0; k < GM_NRELEASE_KINDS; k++)
		n += gm_releases[k].count;
	return n;
}

/*
 * Write a snapshot into this process's slot.  Safe at the idle wait too
 * (mallinfo under idle.c's argument; RssAnon with open/read/close; the
 * context walk only reads the context tree, which the interrupted code is
 * not changing).
 */
static void
publish(int64 now, bool fresh_contexts)
{
	GmSlot	   *slot = my_slot;
	GmMallinfo	mi;

	if (slot == NULL || my_slot_pid != MyProcPid)
		return;
	gm_mallinfo(&mi);
	if (fresh_contexts || last_context_walk == 0 ||
		now - last_context_walk >= GM_CONTEXT_WALK_MS * 1000)
	{
		context_bytes = TopMemoryContext ? (int64) MemoryContextMemAllocated(TopMemoryContext, true) : -1;
		cache_bytes = CacheMemoryContext ? (int64) MemoryContextMemAllocated(CacheMemoryContext, true) : -1;
		/* Paired with the in-use bytes of the same moment, not of a later publish. */
		outside_context_bytes = context_bytes < 0 ? -1 :
			Max((int64) (mi.uordblks + mi.hblkhd) - context_bytes, 0);
		last_context_walk = now;
	}
	if (releases_so_far() != releases_seen)
	{
		/* The free heap that statement left has been returned. */
		releases_seen = releases_so_far();
		top_executor_bytes = 0;
		top_queryid = 0;
	}
	slot->changecount++;
	pg_write_barrier();
	slot->snap.pid = MyProcPid;
	slot->snap.roleid = MyProc->roleId;	/* InvalidOid in the autovacuum launcher */
	slot->snap.backend_type = MyBackendType;
	slot->snap.preset = gm_current_preset();
	slot->snap.taken_at = GetCurrentTimestamp();	/* shown, not compared */
	slot->snap.system_bytes = mi.arena + mi.hblkhd;
	slot->snap.in_use_bytes = mi.uordblks + mi.hblkhd;
	slot->snap.free_bytes = mi.fordblks;
	slot->snap.mmapped_bytes = mi.hblkhd;
	slot->snap.rss_anon_bytes = gm_rss_anon();
	slot->snap.context_bytes = context_bytes;
	slot->snap.cache_bytes = cache_bytes;
	slot->snap.outside_context_bytes = outside_context_bytes;
	slot->snap.anon_outside_malloc_bytes = gm_anon_outside_malloc;
	slot->snap.peak_executor_bytes = peak_executor_bytes;
	slot->snap.top_executor_bytes = top_executor_bytes;
	slot->snap.top_queryid = top_queryid;
	for (int k = 0; k < GM_NRELEASE_KINDS; k++)
		slot->snap.releases[k] = gm_releases[k];
	slot->snap.served = served;
	pg_write_barrier();
	slot->changecount++;
	last_publish = now;
	peak_executor_bytes = 0;
}

/* Publish a snapshot now (the contexts walked at most every GM_CONTEXT_WALK_MS). */
void
gm_shmem_publish(int64 now)
{
	publish(now, false);
}

/*
 * At ExecutorEnd: the statement's executor memory and queryid (0: none), for
 * peak_executor_bytes and the doctor's largest statement.
 */
void
gm_shmem_note_executor(int64 bytes, int64 queryid)
{
	int64		releases = releases_so_far();

	if (bytes > peak_executor_bytes)
		peak_executor_bytes = bytes;
	if (releases != releases_seen)
	{
		releases_seen = releases;
		top_executor_bytes = 0;
		top_queryid = 0;
	}
	if (bytes > top_executor_bytes)
	{
		top_executor_bytes = bytes;
		top_queryid = queryid;
	}
}

/* Whether another process asked this one for something; signal-safe. */
bool
gm_shmem_has_requests(void)
{
	return my_slot != NULL && my_slot_pid == MyProcPid &&
		pg_atomic_read_u32(&my_slot->requests) != 0;
}

/*
 * Serve pending requests and publish; the caller knows that malloc may be
 * called: normal context, or the idle point (at_idle, see idle.c).  Trim
 * requests of glibc_malloc_trim_idle() are served at the idle point only
 * and dropped otherwise: the backend has started working since.
 */
void
gm_shmem_serve_requests(bool at_idle)
{
	uint32		req;

	if (!gm_shmem_has_requests())
		return;
	req = pg_atomic_exchange_u32(&my_slot->requests, 0);
	if ((req & GM_REQ_TRIM) || (at_idle && (req & GM_REQ_TRIM_IDLE)))
		gm_release_counted(GM_RELEASE_REMOTE);
	served++;
	publish(gm_monotonic_usec(), true);
}

/* In how many ms a publish is due (0: now), or -1 when publishing is off; signal-safe. */
int64
gm_shmem_publish_due(int64 now)
{
	int64		due;

	if (my_slot == NULL || my_slot_pid != MyProcPid || stats_interval < 0)
		return -1;
	due = last_publish + (int64) stats_interval * 1000;
	return due <= now ? 0 : (due - now + 999) / 1000;
}

/*
 * At top-level transaction end (client_statement: one that ran a statement
 * of the client's): claim the slot.  A process with an idle
 * point (a client backend) leaves requests and its next snapshot for after
 * the transaction and returns true; the others serve requests, and publish
 * when stats_interval says so, now.
 */
bool
gm_shmem_transaction_end(int64 now, bool client_statement)
{
	if (shared == NULL || claim_slot() == NULL)
		return false;

	/*
	 * The backend ran a client statement since trim_idle() asked: drop that
	 * request.  Not for transactions PostgreSQL runs by itself at the idle
	 * wait (sinval catch-up, notifications): the backend is still idle.
	 * Other requests wait for the idle point or the next statement start,
	 * after this transaction's locks and memory are released, in processes
	 * that have them (client backends); the others are served now.
	 */
	if (gm_shmem_has_requests())
	{
		if (client_statement)
			pg_atomic_fetch_and_u32(&my_slot->requests, ~(uint32) GM_REQ_TRIM_IDLE);
		if (!gm_idle_enabled())
		{
			gm_shmem_serve_requests(false);
			return false;
		}
	}
	if (stats_interval < 0)
		return false;

	/* After the transaction: at the idle point or the next statement start. */
	if (gm_idle_enabled())
		return true;
	if (stats_interval == 0 || last_publish == 0 ||
		now - last_publish >= (int64) stats_interval * 1000)
	{
		gm_shmem_publish(now);
		return false;
	}
	return true;
}

/* Whether slots exist in this process (the module was preloaded). */
bool
gm_shmem_active(void)
{
	return shared != NULL;
}

/* Whether this process publishes snapshots (preloaded, stats_interval >= 0). */
bool
gm_shmem_publishing(void)
{
	return shared != NULL && stats_interval >= 0;
}

/* Copy a slot's snapshot consistently; false if the slot is free. */
static bool
read_slot(GmSlot *slot, GmSnapshot *copy)
{
	for (;;)
	{
		uint32		before = slot->changecount;

		pg_read_barrier();
		memcpy(copy, &slot->snap, sizeof(*copy));
		pg_read_barrier();
		if (before == slot->changecount && (before & 1) == 0)
			break;
		CHECK_FOR_INTERRUPTS();
	}
	copy->slot = slot - shared->slots;
	return copy->pid != 0;
}

/*
 * Free heap glibc keeps and that is still resident: what a trim returns.
 * glibc goes on counting pages a trim gave back as free, so free_bytes
 * alone would list a backend again right after its trim.  What is resident
 * is bounded by RssAnon minus the bytes in use minus the anonymous memory
 * that is not malloc's (measured at the backend's last release).
 */
int64
gm_snapshot_free_heap(const GmSnapshot *s)
{
	if (s->rss_anon_bytes < 0)
		return s->free_bytes;
	return Min(s->free_bytes,
			   Max(s->rss_anon_bytes - s->in_use_bytes - s->anon_outside_malloc_bytes, 0));
}

/* The memory monitor's state, or NULL without shared memory. */
GmMonitorState *
gm_shmem_monitor(void)
{
	return shared ? &shared->monitor : NULL;
}

/* pg_stat_activity's rule: own roles' rows, or pg_read_all_stats. */
static bool
can_see(Oid roleid)
{
	return has_privs_of_role(GetUserId(), roleid) ||
		has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
}

/*
 * pg_signal_backend's rule for trimming a process: a process without a role
 * counts as a superuser's; otherwise the caller needs the privileges of its
 * role or of pg_signal_backend.  Returns the errdetail of a refusal, or NULL.
 */
static const char *
trim_refusal(PGPROC *proc)
{
	if ((!OidIsValid(proc->roleId) || superuser_arg(proc->roleId)) && !superuser())
		return "Only roles with the SUPERUSER attribute may trim the memory of processes of roles with the SUPERUSER attribute or of processes without a role.";
	if (!has_privs_of_role(GetUserId(), proc->roleId) &&
		!has_privs_of_role(GetUserId(), ROLE_PG_SIGNAL_BACKEND))
		return "Only roles with privileges of the role whose backend is being trimmed or with privileges of the \"pg_signal_backend\" role may trim this backend.";
	return NULL;
}

/*
 * The PGPROC of the process whose snapshot s is, or NULL if it is gone.
 * O(1): the slot number is its PGPROC number.
 */
static PGPROC *
snapshot_proc(const GmSnapshot *s)
{
	PGPROC	   *proc;

	if (s->slot < 0 || s->slot >= shared->nslots)
		return NULL;
	proc = GetPGProcByNumber(s->slot);
	return proc->pid == s->pid ? proc : NULL;
}

/*
 * Whether the process of snapshot s waits for its client's next command
 * (wait event ClientRead, reported whatever track_activities says from
 * PostgreSQL 14; on 13 only with it on): for the memory guard, which has
 * no pgstat snapshot.  False if it is gone.
 */
bool
gm_shmem_waits_for_client(const GmSnapshot *s)
{
	PGPROC	   *proc = snapshot_proc(s);

	return proc != NULL && proc->wait_event_info == WAIT_EVENT_CLIENT_READ;
}

/* Whether the caller may trim the process of snapshot s (trim_refusal's rules); false if it is gone. */
bool
gm_shmem_may_trim(const GmSnapshot *s)
{
	PGPROC	   *proc = snapshot_proc(s);

	return proc != NULL && trim_refusal(proc) == NULL;
}

/* What send_request did. */
typedef enum GmSent
{
	GM_SENT_NONE,				/* the process has no slot (any more) */
	GM_SENT_QUEUED,				/* flags set; it has no idle point to wake,
								 * and serves them at its next transaction
								 * end, if it ever has one */
	GM_SENT_DELIVERED			/* flags set and the process woken (or it
								 * is this one, which served them) */
} GmSent;

/*
 * Set request flags in slot slotno, which process pid holds, and wake that
 * process.  O(1): callers know the slot.  The signal is sent under
 * ProcArrayLock, after checking that the slot's PGPROC still has this pid:
 * a backend leaves the proc array under that lock (exclusive) before it
 * exits, so while we hold it the pid cannot have been reaped and handed to
 * an unrelated process, which SIGUSR2 would kill.
 */
static GmSent
send_request(int slotno, int pid, uint32 flags)
{
	GmSlot	   *slot = &shared->slots[slotno];
	GmSent		sent = GM_SENT_NONE;

	if (slot->snap.pid != pid)
		return GM_SENT_NONE;
	pg_atomic_fetch_or_u32(&slot->requests, flags);
	if (pid == MyProcPid)
	{
		gm_shmem_serve_requests(false);
		return GM_SENT_DELIVERED;
	}
	pg_memory_barrier();
	LWLockAcquire(ProcArrayLock, LW_SHARED);
	if (GetPGProcByNumber(slotno)->pid == pid && slot->snap.pid == pid)
	{
		if (!slot->snap.signalable)
			sent = GM_SENT_QUEUED;
		else if (kill(pid, SIGUSR2) == 0)
			sent = GM_SENT_DELIVERED;
	}
	LWLockRelease(ProcArrayLock);
	return sent;
}

PG_FUNCTION_INFO_V1(glibc_malloc_backends);
PG_FUNCTION_INFO_V1(glibc_malloc_backends_1_3);
PG_FUNCTION_INFO_V1(glibc_malloc_trim_backend);
PG_FUNCTION_INFO_V1(glibc_malloc_trim_idle);

/*
 * The published snapshots the caller may see (pg_stat_activity's rule),
 * the caller's own freshly taken; returns how many, palloc'd in *snaps.
 * Claimed but unpublished slots (stats_interval = -1) are left out.
 */
int
gm_shmem_snapshots(GmSnapshot **snaps)
{
	int			n = 0;

	require_shared();
	if (claim_slot())
		publish(gm_monotonic_usec(), true);
	*snaps = palloc(sizeof(GmSnapshot) * shared->nslots);
	for (int i = 0; i < shared->nslots; i++)
	{
		GmSnapshot *s = &(*snaps)[n];

		if (read_slot(&shared->slots[i], s) && s->taken_at != 0 && can_see(s->roleid))
			n++;
	}
	return n;
}

/* How many slots there are (0 without shared memory). */
int
gm_shmem_slot_count(void)
{
	return shared ? shared->nslots : 0;
}

/*
 * Every published snapshot, and the slots that guarded processes claimed
 * before publishing (for the memory guard), with no privilege check and
 * without claiming a slot: for the memory monitor, which has no role and
 * no transaction.
 * snaps has room for gm_shmem_slot_count(); returns how many were copied.
 */
int
gm_shmem_all_snapshots(GmSnapshot *snaps)
{
	int			n = 0;

	if (shared == NULL)
		return 0;
	for (int i = 0; i < shared->nslots; i++)
		if (read_slot(&shared->slots[i], &snaps[n]) && (snaps[n].taken_at != 0 || snaps[n].guarded))
			n++;
	return n;
}

/*
 * The memory monitor's trim request for the process of snapshot s: like
 * glibc_malloc_trim_backend()'s, served at the target's next safe point.
 * Returns 1 when asked, 0 when the process has left its slot, -1 when a
 * trim request is still pending there (idle in a transaction, say): asking
 * again would change nothing.  *served is the process's count of served
 * requests before this one, for telling its snapshot after serving this
 * one (gm_shmem_trim_pending says whether it is still pending).  O(1).
 */
int
gm_shmem_ask_trim(const GmSnapshot *s, uint32 *served_before)
{
	GmSlot	   *slot;

	if (shared == NULL || s->slot < 0 || s->slot >= shared->nslots)
		return 0;
	slot = &shared->slots[s->slot];
	if (slot->snap.pid != s->pid)
		return 0;
	*served_before = slot->snap.served;
	pg_read_barrier();
	if (pg_atomic_read_u32(&slot->requests) & GM_REQ_TRIM)
		return -1;
	return send_request(s->slot, s->pid, GM_REQ_TRIM | GM_REQ_PUBLISH) != GM_SENT_NONE ? 1 : 0;
}

/* Whether a trim request is still pending in the slot of snapshot s's process. */
bool
gm_shmem_trim_pending(const GmSnapshot *s)
{
	GmSlot	   *slot;

	if (shared == NULL || s->slot < 0 || s->slot >= shared->nslots)
		return false;
	slot = &shared->slots[s->slot];
	return slot->snap.pid == s->pid && (pg_atomic_read_u32(&slot->requests) & GM_REQ_TRIM) != 0;
}

/* Claim this process's slot now (a parallel worker, at its first statement). */
void
gm_shmem_claim(void)
{
	(void) claim_slot();
}

/*
 * Publish this process's own soft RLIMIT_DATA (max_backend_memory;
 * GM_NO_LIMIT: none) and return the memory guard's for it (GM_NO_LIMIT:
 * none, or no shared memory); *orig gets the soft limit the process had
 * when it claimed its slot, before anybody changed it (left alone
 * without a slot).
 */
int64
gm_shmem_own_limit(int64 own, int64 *orig)
{
	GmSlot	   *slot = claim_slot();

	if (slot == NULL)
		return GM_NO_LIMIT;
	*orig = (int64) pg_atomic_read_u64(&slot->orig_limit);
	pg_atomic_write_u64(&slot->own_limit, own);
	pg_atomic_fetch_add_u32(&slot->requests, 0);	/* a full barrier */
	return (int64) pg_atomic_read_u64(&slot->guard_limit);
}

/* The memory guard's soft RLIMIT_DATA for this process; GM_NO_LIMIT: none. */
int64
gm_shmem_my_guard_limit(void)
{
	if (shared == NULL || my_slot == NULL || my_slot_pid != MyProcPid)
		return GM_NO_LIMIT;
	return (int64) pg_atomic_read_u64(&my_slot->guard_limit);
}

/*
 * The limits of the process in slot slotno, if it is still pid's: the soft
 * limit it started with, its own, and the guard's (GM_NO_LIMIT: none); and
 * into *guarded (if not NULL) whether the limits cover it.
 */
bool
gm_shmem_limits(int slotno, int pid, int64 *orig, int64 *own, int64 *guard, bool *guarded)
{
	GmSlot	   *slot;

	if (shared == NULL || slotno < 0 || slotno >= shared->nslots)
		return false;
	slot = &shared->slots[slotno];
	*orig = (int64) pg_atomic_read_u64(&slot->orig_limit);
	*own = (int64) pg_atomic_read_u64(&slot->own_limit);
	*guard = (int64) pg_atomic_read_u64(&slot->guard_limit);
	if (guarded)
		*guarded = slot->snap.pid == pid && slot->snap.guarded;
	return slot->snap.pid == pid;
}

/* The guard's limit in slot slotno now (the monitor's, or its process's raise). */
int64
gm_shmem_slot_guard_limit(int slotno)
{
	return (int64) pg_atomic_read_u64(&shared->slots[slotno].guard_limit);
}

/*
 * Whether process pid still holds slot slotno: the slot's pid is cleared
 * before the process leaves the proc array, so under ProcArrayLock (with
 * its PGPROC's pid checked too) the pid cannot have been reaped and reused.
 */
bool
gm_shmem_slot_holds(int slotno, int pid)
{
	return shared != NULL && slotno >= 0 && slotno < gm_shmem_slot_count() &&
		shared->slots[slotno].snap.pid == pid;
}

/*
 * The monitor: set the guard's limit for pid in slot slotno.  A raise the
 * process took (gm_shmem_guard_raise) is one this look counted: the pool
 * it came from is emptied before the look reads the reservations
 * (gm_shmem_guard_set_pool).  Returns the soft limit the process should
 * now have (the lowest of the three), or -1 if the slot is no longer
 * pid's (then nothing is left in it).
 */
int64
gm_shmem_set_guard_limit(int slotno, int pid, int64 limit)
{
	GmSlot	   *slot = &shared->slots[slotno];
	uint64		expected pg_attribute_aligned(8) = (uint64) limit;
	int64		orig;
	int64		own;

	/* Even (guard_set): never a process's own first limit, an odd one. */
	Assert(limit == GM_NO_LIMIT || (limit & 1) == 0);
	if (slot->snap.pid != pid)
		return -1;
	/* Whose it is, before it is set: a process that took the slot since cannot raise it. */
	pg_atomic_write_u32(&slot->guard_owner, limit == GM_NO_LIMIT ? 0 : (uint32) pid);
	pg_atomic_write_u64(&slot->guard_limit, limit);
	pg_atomic_fetch_add_u32(&slot->requests, 0);	/* a full barrier */
	if (slot->snap.pid != pid)
	{
		/* A new process took the slot meanwhile: take the limit back. */
		(void) pg_atomic_compare_exchange_u64(&slot->guard_limit, &expected, GM_NO_LIMIT);
		return -1;
	}
	orig = (int64) pg_atomic_read_u64(&slot->orig_limit);
	own = (int64) pg_atomic_read_u64(&slot->own_limit);
	return Min(orig, Min(own, limit));
}

/*
 * This process took from the budget what brings it to want (a start
 * share, its admitted need, more for its running query, and its reserve):
 * raise the guard's limit in its slot to want (rounded up to even, as the
 * monitor's are) at once, rather than wait for the monitor's next look,
 * where the monitor set the limit in force for this process and its last
 * look counted it as working; the raise is taken from the pool the last
 * look held back (gm_guard_policy), so that the limits in force, raises
 * included, add up to the budget at most; the next look counts what was
 * taken.  A compare-and-swap on the slot (the limit and its owner read
 * without a barrier between: a stale owner only refuses).  Not over a
 * first limit (odd: gm_shmem_guard_first_limit, whose look replaces it),
 * nor where there is none, nor while counted idle (an idle limit's room
 * for a client message is no budget's: the look that counts the process
 * working serves it); past what the pool has, by what it has (the look
 * serves the rest).  Returns whether it raised the limit (the caller then
 * sets its soft limit, set_limits), and in *covered whether the limit
 * covers want now (no limit: true).
 */
bool
gm_shmem_guard_raise(int64 want, bool *covered)
{
	uint64		cur pg_attribute_aligned(8);

	*covered = false;
	if (shared == NULL || my_slot == NULL || my_slot_pid != MyProcPid || want < 0 ||
		gm_shmem_guard_counts_idle())
		return false;
	want += want & 1;
	/* (its working flag read first: the idle limit before it is not this one) */
	pg_read_barrier();
	cur = pg_atomic_read_u64(&my_slot->guard_limit);
	for (;;)
	{
		uint64		pool pg_attribute_aligned(8);
		uint64		delta;

		if ((int64) cur == GM_NO_LIMIT)
		{
			*covered = true;
			return false;
		}
		if ((cur & 1) != 0 || gm_shmem_guard_counts_idle() ||
			pg_atomic_read_u32(&my_slot->guard_owner) != (uint32) MyProcPid)
		{
			*covered = false;
			return false;
		}
		if ((int64) cur >= want)
		{
			*covered = true;
			return false;
		}

		/*
		 * The pool's bytes first, what it has up to the raise (even: a
		 * statement near its limit gets room now, and the look serves the
		 * rest); then the limit.  Not given back if the limit moved
		 * meanwhile (a look's, which counted the claim): the pool may have
		 * been emptied and written again since, and bytes lost until the
		 * next look are the safe error.
		 */
		pool = pg_atomic_read_u64(&shared->raise_pool);
		do
		{
			delta = Min((uint64) want - cur, pool & ~(uint64) 1);
			if (delta == 0)
				return false;
		} while (!pg_atomic_compare_exchange_u64(&shared->raise_pool, &pool, pool - delta));
		if (pg_atomic_compare_exchange_u64(&my_slot->guard_limit, &cur, cur + delta))
		{
			*covered = cur + delta >= (uint64) want;
			return true;
		}
	}
}

/*
 * The monitor: the pool its look held back for raises until the next; 0
 * (none) as a look begins, before it reads the reservations, so that each
 * raise is one the look that follows counts, and as it exits.
 */
void
gm_shmem_guard_set_pool(int64 pool)
{
	if (shared != NULL)
		pg_atomic_write_u64(&shared->raise_pool, (uint64) Max(pool, 0));
}

/*
 * A top-level statement starts in this process: count the start in the
 * slot (an atomic add; a look that read the process between two statements
 * then keeps its limit, see guard_apply); whether the memory guard limits
 * it and its last look did not count it as working (the caller then wakes
 * the monitor and waits for its look).
 */
bool
gm_shmem_guard_statement_start(void)
{
	if (shared == NULL || my_slot == NULL || my_slot_pid != MyProcPid)
		return false;
	/*
	 * Every start is counted: a look that read this process before it (as
	 * idle) then keeps its limit.  A full barrier: the monitor reads the
	 * starts after it writes idle, this reads idle after the count.
	 */
	pg_atomic_fetch_add_u32(&my_slot->guard_starts, 1);
	return gm_shmem_guard_counts_idle();
}

/*
 * Whether the memory guard limits this process and its last look counted
 * it as not working.
 */
bool
gm_shmem_guard_counts_idle(void)
{
	if (shared == NULL || my_slot == NULL || my_slot_pid != MyProcPid)
		return false;
	pg_read_barrier();
	return shared->monitor.guard_engaged && !my_slot->guard_working &&
		pg_atomic_read_u64(&my_slot->guard_limit) != GM_NO_LIMIT;
}

/*
 * A statement starts while the memory guard acts and is engaged in a process
 * it has not limited: limit it as an idle backend is (its VmData plus the
 * reserve, 1 to 4 MB), unless the monitor set a limit meanwhile, count a
 * start and wake the monitor.  The limit is odd: the monitor's are even, so
 * that gm_shmem_guard_drop_first_limit never takes one of the monitor's.
 * Returns the limit taken, or GM_NO_LIMIT when it took none.
 */
int64
gm_shmem_guard_first_limit(int64 vmdata)
{
	uint64		expected pg_attribute_aligned(8) = (uint64) GM_NO_LIMIT;
	int64		limit;
	int64		reserve;

	if (shared == NULL || my_slot == NULL || my_slot_pid != MyProcPid || vmdata < 0 ||
		!gm_shmem_guard_acts() || !shared->monitor.guard_engaged)
		return GM_NO_LIMIT;
	pg_read_barrier();
	/* An int64 read unlocked (torn on 32-bit): kept within the reserve's range. */
	reserve = shared->monitor.guard_reserve;
	reserve = Min(Max(reserve, (int64) 1024 * 1024), GM_GUARD_PROC_RESERVE);
	limit = (vmdata + reserve) | 1;
	if (!pg_atomic_compare_exchange_u64(&my_slot->guard_limit, &expected, (uint64) limit))
		return GM_NO_LIMIT;
	pg_atomic_fetch_add_u32(&my_slot->guard_starts, 1);
	gm_shmem_guard_wake();
	return limit;
}

/*
 * Take back the limit gm_shmem_guard_first_limit took, if the monitor has
 * not set one since (it lifts only the limits it set).
 */
void
gm_shmem_guard_drop_first_limit(int64 limit)
{
	uint64		expected pg_attribute_aligned(8) = (uint64) limit;

	if (shared != NULL && my_slot != NULL && my_slot_pid == MyProcPid)
		(void) pg_atomic_compare_exchange_u64(&my_slot->guard_limit, &expected, (uint64) GM_NO_LIMIT);
}

/*
 * The reserve every process the guard limits may map for small work, as
 * its last look set it; -1 while it is not engaged.  An int64 read
 * unlocked (torn on 32-bit): one outside 0..GM_GUARD_PROC_RESERVE reads
 * as -1.
 */
int64
gm_shmem_guard_reserve(void)
{
	int64		reserve;

	if (shared == NULL || !shared->monitor.guard_engaged)
		return -1;
	pg_read_barrier();
	reserve = shared->monitor.guard_reserve;
	return reserve >= 0 && reserve <= GM_GUARD_PROC_RESERVE ? reserve : -1;
}

/* Whether the memory guard's last look left it engaged (a flag read). */
bool
gm_shmem_guard_engaged(void)
{
	return shared != NULL && shared->monitor.guard_engaged;
}

/*
 * Whether this process's top-level statement waits for its client inside
 * itself (on: a COPY FROM STDIN, a portal that may be suspended; off at its
 * end and its transaction's).
 */
void
gm_shmem_guard_reads_client(bool on)
{
	if (shared != NULL && my_slot != NULL && my_slot_pid == MyProcPid)
		my_slot->guard_in_statement = on;
}

/*
 * The monitor: whether process pid, in slot slotno, runs a top-level
 * statement (a COPY FROM STDIN or a suspended portal waits for its client
 * inside one).
 */
bool
gm_shmem_guard_in_statement(int slotno, int pid)
{
	GmSlot	   *slot = &shared->slots[slotno];

	return slot->snap.pid == pid && slot->guard_in_statement;
}

/* The monitor: the count of statement starts in slot slotno. */
uint32
gm_shmem_guard_starts(int slotno)
{
	return pg_atomic_read_u32(&shared->slots[slotno].guard_starts);
}

/* Wake the monitor for a look now (its latch; nothing without one). */
void
gm_shmem_guard_wake(void)
{
	struct Latch *latch;

	if (shared == NULL)
		return;
	latch = shared->monitor.guard_latch;
	if (latch != NULL)
		SetLatch(latch);
}

/*
 * The monitor: whether its last look counted process pid, in slotno, as
 * working (not written if another process claimed the slot since).
 */
void
gm_shmem_set_guard_working(int slotno, int pid, bool working)
{
	GmSlot	   *slot = &shared->slots[slotno];

	if (slot->snap.pid == pid)
		slot->guard_working = working;
}

/* The process's own limit in slot slotno (GM_NO_LIMIT: none). */
int64
gm_shmem_slot_own_limit(int slotno)
{
	GmSlot	   *slot = &shared->slots[slotno];

	return Min((int64) pg_atomic_read_u64(&slot->orig_limit),
			   (int64) pg_atomic_read_u64(&slot->own_limit));
}

/*
 * A field of the monitor's state (size bytes at offset off) into dst, read
 * under its change counter (no torn read of an int64 on 32-bit); false
 * where no consistent read came.  No error, no lock, a bounded retry (the
 * error path and emit_log_hook call it).
 */
static bool
monitor_read(size_t off, void *dst, size_t size)
{
	GmMonitorState *st = shared ? &shared->monitor : NULL;

	for (int i = 0; st != NULL && i < 1000; i++)
	{
		uint32		before = st->changecount;

		pg_read_barrier();
		memcpy(dst, (const char *) st + off, size);
		pg_read_barrier();
		if (before == st->changecount && (before & 1) == 0)
			return true;
	}
	return false;
}

/*
 * When the memory guard last had limits set (gm_monotonic_usec(); 0 =
 * never), read under the monitor's change counter (no torn 64-bit read on
 * 32-bit).  For emit_log_hook: no error, a bounded retry.
 */
int64
gm_shmem_guard_engaged_at(void)
{
	int64		at;

	if (!monitor_read(offsetof(GmMonitorState, guard_engaged_at), &at, sizeof(at)))
		return 0;
	return at < 0 ? 0 : at;
}

/*
 * What limits the server's memory as the monitor last read it (GmLimitSource;
 * GM_LIMIT_NONE before its first look), under its change counter.  For
 * emit_log_hook: no error, no lock, a bounded retry.
 */
int
gm_shmem_monitor_source(void)
{
	int			value;

	if (!monitor_read(offsetof(GmMonitorState, limit_source), &value, sizeof(value)))
		return GM_LIMIT_NONE;
	return value;
}

/* Count an out-of-memory error under the module's limits (guard: the guard's). */
void
gm_shmem_count_oom(bool guard)
{
	if (shared != NULL)
		pg_atomic_fetch_add_u64(&shared->oom_errors[guard ? 1 : 0], 1);
}

/*
 * A parallel worker's "out of memory" under its limits: tell its leader,
 * which raises the error again, that it is a limit's error.  The slot is
 * the leader's PGPROC's, claimed or not.
 */
void
gm_shmem_tell_leader_limit_oom(void)
{
	PGPROC	   *leader = MyProc ? MyProc->lockGroupLeader : NULL;
	int			n;

	if (shared == NULL || leader == NULL || leader == MyProc)
		return;
	n = GM_PROC_NUMBER(leader);
	if (n >= 0 && n < shared->nslots)
		pg_atomic_fetch_add_u32(&shared->slots[n].worker_limit_oom, 1);
}

/*
 * Whether this process's parallel workers raised an "out of memory" under
 * their limits since it last asked (and forget them).
 */
bool
gm_shmem_take_worker_limit_oom(void)
{
	int			n = MyProc ? GM_MY_PROC_NUMBER() : -1;
	GmSlot	   *slot;

	if (shared == NULL || n < 0 || n >= shared->nslots)
		return false;
	slot = &shared->slots[n];
	return pg_atomic_read_u32(&slot->worker_limit_oom) != 0 &&
		pg_atomic_exchange_u32(&slot->worker_limit_oom, 0) != 0;
}

/* Count an "out of memory" error of any kind, once (glibc_malloc_counters). */
void
gm_shmem_count_oom_error(void)
{
	if (shared != NULL)
		pg_atomic_fetch_add_u64(&shared->all_oom_errors, 1);
}

/* The out-of-memory errors counted: under max_backend_memory, under the guard. */
void
gm_shmem_oom_counts(int64 *cap, int64 *guard)
{
	*cap = shared ? (int64) pg_atomic_read_u64(&shared->oom_errors[0]) : 0;
	*guard = shared ? (int64) pg_atomic_read_u64(&shared->oom_errors[1]) : 0;
}

/*
 * glibc_malloc.memory_wait's queue: one entry per slot, under wait_lock
 * (an LWLock: the monitor reads /proc between two holds of it, and an
 * ERROR while it is held releases it).  The admission itself is guard_policy.c's; guard.c
 * runs the rounds.
 */

/* A slot's state, an ended reservation as none. */
static inline GmWaitState
wait_state(GmWaitSlot *ws)
{
	GmWaitState st;

	if (pg_atomic_read_u32(&ws->ended) != 0)
		return GM_WAIT_NONE;
	/*
	 * Its state after ended, its fields after its state: a claim without
	 * the lock stores NONE before it clears ended, its fields before its
	 * state.
	 */
	pg_read_barrier();
	st = ws->state;
	pg_read_barrier();
	return st;
}

/*
 * After a read of slot ws's fields without the exclusive lock (under the
 * shared one, which a claim does not wait for): whether it still holds the
 * reservation read, in state st, arrival (a claim writes a new arrival
 * before its other fields, and NONE before both).
 */
static inline bool
slot_same(GmWaitSlot *ws, GmWaitState st, uint64 arrival)
{
	pg_read_barrier();
	return wait_state(ws) == st && ws->arrival == arrival;
}

/* What the admission counts slot ws as still taking: gm_guard_outstanding of its reservation. */
static int64
slot_outstanding(GmWaitSlot *ws)
{
	GmWaitState st = wait_state(ws);

	if (st != GM_WAIT_ADMITTED && st != GM_WAIT_RETURNED)
		return 0;
	return gm_guard_outstanding(ws->need, ws->base_vmdata >= 0 && ws->look_vmdata >= 0 ?
								ws->look_vmdata - ws->base_vmdata : 0,
								ws->look_gap, st == GM_WAIT_RETURNED);
}

/*
 * After slot ws changed (under the lock, or its owner ending it without
 * the lock): its parts of wait_taken and wait_held follow, so that a round
 * reads what the admitted statements take in two atomics, not a scan of
 * every slot.  The owner's end sets ended first, then comes here: an
 * update under the lock that counted the slot before the end saw it reads
 * ended again after its exchange and counts it out (both exchanges are
 * full barriers), so no ended slot stays counted.
 */
static void
slot_recount(GmWaitSlot *ws)
{
	for (;;)
	{
		int64		c = slot_outstanding(ws);
		uint32		h = wait_state(ws) == GM_WAIT_ADMITTED ? 1 : 0;
		int64		old = (int64) pg_atomic_exchange_u64(&ws->counted, (uint64) c);
		uint32		oldh = pg_atomic_exchange_u32(&ws->counted_held, h);

		if (c != old)
			pg_atomic_fetch_add_u64(&shared->wait_taken, c - old);
		if (h != oldh)
			pg_atomic_fetch_add_u32(&shared->wait_held, (int32) h - (int32) oldh);
		if ((c == 0 && h == 0) || pg_atomic_read_u32(&ws->ended) == 0)
			return;
	}
}

/* Whether the queue exists and this process has its slot. */
bool
gm_shmem_wait_ready(void)
{
	return shared != NULL && my_slot != NULL && my_slot_pid == MyProcPid;
}

/*
 * Take the queue's lock, exclusive: marked taken (wait_locked, then
 * wait_gen, both full barriers) before the holder reads or changes the
 * budget, so that a claim without the lock that overlaps it gives up.
 */
static void
wait_lock_exclusive(void)
{
	LWLockAcquire(shared->wait_lock, LW_EXCLUSIVE);
	(void) pg_atomic_exchange_u32(&shared->wait_locked, 1);
	pg_atomic_fetch_add_u32(&shared->wait_gen, 1);
}

/* Release it: its changes before the mark is cleared (a full barrier). */
static void
wait_unlock_exclusive(void)
{
	(void) pg_atomic_exchange_u32(&shared->wait_locked, 0);
	LWLockRelease(shared->wait_lock);
}

/* Take the queue's lock (exclusive). */
void
gm_shmem_wait_lock(void)
{
	wait_lock_exclusive();
}

/* Release it. */
void
gm_shmem_wait_unlock(void)
{
	wait_unlock_exclusive();
}

/*
 * Under the lock: queue this process's statement, needing need bytes (its
 * slot WAITING, its ended flag cleared, counted in wait_waiting).
 */
void
gm_shmem_wait_enqueue(int64 need, int64 patience_ms, int64 now)
{
	GmWaitSlot *w = &my_slot->wait;
	bool		was_waiting = wait_state(w) == GM_WAIT_WAITING;

	w->latch = MyLatch;
	w->state = GM_WAIT_WAITING;
	pg_atomic_write_u32(&w->ended, 0);
	/* Counted after its state and latch are stored (a full barrier), before the round reads the slots. */
	if (!was_waiting)
		pg_atomic_fetch_add_u32(&shared->wait_waiting, 1);
	w->pid = MyProcPid;
	w->arrival = pg_atomic_add_fetch_u64(&shared->wait_arrivals, 1);
	w->need = need;
	w->since = now;
	w->patience_ms = patience_ms;
	w->base_vmdata = -1;
	w->base_gap = 0;
	w->look_vmdata = -1;
	w->look_gap = 0;
	w->hopeless = false;
	w->granted = false;
	w->start = false;
	slot_recount(w);
}

/* A slot's base: the VmData its reservation counts from, and its gap from VmData less RssAnon. */
static void
wait_set_base(GmWaitSlot *w, int64 vm, int64 rss)
{
	w->base_vmdata = vm;
	w->base_gap = vm >= 0 && rss >= 0 ? Max(vm - rss, 0) : 0;
}

/*
 * This process's slot w holds amount bytes from now, admitted (start: a
 * start share, else an admission), counted from VmData vm and its gap from
 * VmData less RssAnon rss, and in the sums: NONE by its state before ended
 * is cleared (as claim_slot does), its fields before its state ADMITTED,
 * so that a reader without the lock (wait_state) sees it whole.  Under the
 * lock, or without it from NONE (gm_shmem_wait_claim).
 */
static void
slot_hold(GmWaitSlot *w, int64 amount, bool start, int64 vm, int64 rss, int64 now)
{
	/* Never a waiter's: its count in wait_waiting would stay. */
	Assert(wait_state(w) != GM_WAIT_WAITING);
	w->state = GM_WAIT_NONE;
	pg_write_barrier();
	pg_atomic_write_u32(&w->ended, 0);
	w->arrival = pg_atomic_add_fetch_u64(&shared->wait_arrivals, 1);
	pg_write_barrier();			/* a new arrival before its other fields */
	w->latch = MyLatch;
	w->pid = MyProcPid;
	w->need = amount;
	w->since = now;
	w->patience_ms = 0;
	wait_set_base(w, vm, rss);
	w->look_vmdata = -1;
	w->look_gap = 0;
	w->hopeless = false;
	w->granted = false;
	w->start = start;
	w->admitted_at = now;
	w->grew_at = now;
	pg_write_barrier();
	w->state = GM_WAIT_ADMITTED;
	slot_recount(w);			/* in the sums: full barriers */
}

/*
 * Under the lock: this process's statement holds a start share of share
 * bytes (gm_guard_start_share), admitted at once as a reservation counted
 * from VmData vm (and its gap from VmData less RssAnon rss), never queued:
 * neither an admission nor, when it goes back, a return in the counts.  It ends as a reservation does
 * (gm_shmem_wait_leave), and goes back as one does when its statement
 * stops growing or waits.
 */
void
gm_shmem_wait_hold_share(int64 share, int64 vm, int64 rss, int64 now)
{
	slot_hold(&my_slot->wait, share, true, vm, rss, now);
}

/*
 * Under the lock, while none waits: this process's statement, needing need
 * bytes, fits and is admitted at once with its reservation, counted from
 * VmData vm (-1: noted later) and its gap from VmData less RssAnon rss,
 * never queued: the locked way of gm_shmem_wait_claim's, without a scan
 * of the slots.  Counted as an admission.
 */
void
gm_shmem_wait_admit_at_once(int64 need, int64 vm, int64 rss, int64 now)
{
	slot_hold(&my_slot->wait, need, false, vm, rss, now);
	pg_atomic_fetch_add_u64(&shared->wait_counts[GM_WAIT_ADMISSIONS], 1);
}

/*
 * Without the lock: the budget (*b) as the admission would read it under
 * the lock while none waits: the room and the ceiling of the monitor's
 * last look and the two sums.  False (take the lock): a statement waits,
 * an exclusive holder may be changing the budget, or one began during the
 * read.  Reads of the mark, the count of holds, then the budget, in that
 * order (a hold marks itself before it counts).
 */
bool
gm_shmem_wait_read_budget(GmBudgetRead *b)
{
	if (!gm_shmem_wait_ready())
		return false;
	b->gen = pg_atomic_read_u32(&shared->wait_gen);
	pg_read_barrier();
	if (pg_atomic_read_u32(&shared->wait_locked) != 0 ||
		pg_atomic_read_u32(&shared->wait_waiting) != 0)
		return false;
	pg_read_barrier();
	b->room = shared->wait_room;
	b->ceiling = shared->wait_ceiling;
	b->taken = (int64) pg_atomic_read_u64(&shared->wait_taken);
	b->held = (int) pg_atomic_read_u32(&shared->wait_held);
	pg_read_barrier();
	return pg_atomic_read_u32(&shared->wait_gen) == b->gen;
}

/*
 * Without the lock, after gm_shmem_wait_read_budget read *b and the
 * admission's rule (guard_policy.c) gave amount bytes from it: this
 * process's statement holds them at once, admitted with its need
 * (admission: counted as an admission) or as a start share, counted from
 * VmData vm (-1: noted later) and its gap from VmData less RssAnon rss.
 * Its slot is counted in the sums first (a full barrier), then checked:
 * no exclusive hold began since the read, none waits, and all that is
 * taken, its own and any other claim's since the read, fits the room.  A
 * hold that begins later reads the sums with it; of two claims that race,
 * the later to add sees both.  Else it ends its slot as a reservation's
 * end does, without the lock, and returns false: the caller takes the
 * lock (a round may meanwhile have counted the claim: a wait or a grant
 * for another, never an admission past the room).  Its slot is NONE
 * before (the statement's start ended what it held), and no one else
 * writes a slot that is NONE.
 */
bool
gm_shmem_wait_claim(const GmBudgetRead *b, int64 amount, bool admission,
					int64 vm, int64 rss, int64 now)
{
	GmWaitSlot *w;
	int64		taken;

	Assert(gm_shmem_wait_ready());
	w = &my_slot->wait;
	if (b->room < 0 || wait_state(w) != GM_WAIT_NONE)
		return false;
	slot_hold(w, amount, !admission, vm, rss, now);
	pg_memory_barrier();
	taken = (int64) pg_atomic_read_u64(&shared->wait_taken);
	if (pg_atomic_read_u32(&shared->wait_locked) == 0 &&
		pg_atomic_read_u32(&shared->wait_gen) == b->gen &&
		pg_atomic_read_u32(&shared->wait_waiting) == 0 &&
		taken <= b->room)
	{
		if (admission)
			pg_atomic_fetch_add_u64(&shared->wait_counts[GM_WAIT_ADMISSIONS], 1);
		return true;
	}
	/* Whatever a holder of the lock made of its slot meanwhile: ended, counted out. */
	end_lockless(w);
	wake_waiters(w);
	return false;
}

/* Under the lock: whether no statement waits in the queue (a counter's read). */
bool
gm_shmem_wait_queue_empty(void)
{
	return pg_atomic_read_u32(&shared->wait_waiting) == 0;
}

/*
 * Under the lock: this process's running statement, near its limit, takes
 * extra bytes more (gm_guard_executor_check): a reservation, a grant or a
 * share it holds now expects extra beyond VmData vm (its need: what it
 * grew or its need, whichever is more, plus extra); one that went back
 * (RETURNED: the admission counted only what it mapped) is taken again
 * for what it grew plus extra, not its old need; without one, it holds
 * extra as a start share does (gm_shmem_wait_hold_share).  vm may count
 * what the stack grew since its last read too (an estimate from above).
 */
void
gm_shmem_wait_grow(int64 extra, int64 vm, int64 rss, int64 now)
{
	GmWaitSlot *w = &my_slot->wait;
	GmWaitState st = wait_state(w);

	if ((st != GM_WAIT_ADMITTED && st != GM_WAIT_RETURNED) || w->pid != MyProcPid)
	{
		gm_shmem_wait_hold_share(extra, vm, rss, now);
		return;
	}
	if (w->base_vmdata < 0)
		wait_set_base(w, vm, rss);
	if (st == GM_WAIT_RETURNED)
	{
		w->need = Max(vm - w->base_vmdata, 0) + extra;
		w->state = GM_WAIT_ADMITTED;
		w->admitted_at = now;
	}
	else
		w->need = Max(w->need, vm - w->base_vmdata) + extra;
	w->grew_at = now;
	slot_recount(w);
}

/*
 * Whether process pid, in slot slotno (its PGPROC number), waits for its
 * client's next command: a statement it was admitted for failed inside a
 * savepoint or its portal is suspended, and holds no reservation.  A read
 * without a lock.
 */
static bool
waits_for_client(int slotno, int pid)
{
	PGPROC	   *proc = &ProcGlobal->allProcs[slotno];

	return proc->pid == pid && proc->wait_event_info == WAIT_EVENT_CLIENT_READ;
}

/*
 * Under the lock: a reservation whose process left its slot, or that waits
 * for its client's next command, ends.  Returns whether it did.
 */
static bool
end_if_lost(int slotno)
{
	GmWaitSlot *ws = &shared->slots[slotno].wait;
	GmWaitState st = wait_state(ws);

	if ((st != GM_WAIT_ADMITTED && st != GM_WAIT_RETURNED) ||
		(ws->pid == shared->slots[slotno].snap.pid && !waits_for_client(slotno, ws->pid)))
		return false;
	ws->state = GM_WAIT_NONE;
	slot_recount(ws);
	return true;
}

/* Under the lock: the waiters into w (at most max), ending the lost reservations met. */
static int
collect_waiters(GmAdmitWaiter *w, int max, int64 now)
{
	int			n = 0;

	for (int i = 0; i < shared->nslots; i++)
	{
		GmWaitSlot *ws = &shared->slots[i].wait;
		GmWaitState st = wait_state(ws);

		if (st == GM_WAIT_ADMITTED || st == GM_WAIT_RETURNED)
			(void) end_if_lost(i);
		else if (st == GM_WAIT_WAITING && n < max)
		{
			w[n].id = i;
			w[n].arrival = ws->arrival;
			w[n].need = ws->need;
			w[n].waited_ms = Max(now - ws->since, 0) / 1000;
			w[n].patience_ms = ws->patience_ms;
			w[n].mine = &shared->slots[i] == my_slot;
			w[n].due = false;
			w[n].admit = false;
			w[n].grant = 0;
			n++;
		}
	}
	return n;
}

/*
 * Under the lock: the waiters into w (at most max; id is the slot), the
 * room and the ceiling of the monitor's last look (*room, *ceiling; -1 =
 * unknown), and the bytes the admitted statements are still expected to
 * take as of that look: each its reservation less what its process had
 * grown since its admission at the monitor's last look, the look the
 * headroom is of (growth since is in neither: counted with a live VmData
 * against an older headroom, it was counted as room twice, and a burst
 * was admitted past what fits), plus what it had mapped and not touched
 * then (the guard's budget leaves that out of the headroom too: it
 * becomes resident without a new mapping): gm_guard_outstanding, summed
 * in wait_taken as the slots change.  One whose growth passed its
 * reservation still counts its gap, as does one whose reservation went
 * back, until its statement ends.  *held: how many still hold a
 * reservation, a grant or a start share.  Scans the slots only when some
 * wait (a reservation whose process left its slot, or that waits for its
 * client, ends then, else at the monitor's next look): a few reads while
 * none waits (gm_shmem_wait_read_budget reads the same without the
 * lock).  No /proc read.
 */
int
gm_shmem_wait_collect(GmAdmitWaiter *w, int max, int64 now, int64 *outstanding,
					  int64 *room, int64 *ceiling, int *held)
{
	int			n = 0;

	*room = shared->wait_room;
	*ceiling = shared->wait_ceiling;
	if (pg_atomic_read_u32(&shared->wait_waiting) > 0)
		n = collect_waiters(w, max, now);
	*outstanding = (int64) pg_atomic_read_u64(&shared->wait_taken);
	*held = (int) pg_atomic_read_u32(&shared->wait_held);
	return n;
}

/*
 * Under the lock: admit the waiters the admission chose, with their need
 * or with a grant (their slots hold their reservations from now on, and
 * leave wait_waiting), and wake them.
 */
void
gm_shmem_wait_admit(const GmAdmitWaiter *w, int n)
{
	for (int i = 0; i < n; i++)
	{
		GmWaitSlot *ws;

		if (w[i].id < 0 || w[i].id >= shared->nslots)
			continue;
		ws = &shared->slots[w[i].id].wait;
		if (wait_state(ws) != GM_WAIT_WAITING)
			continue;
		ws->hopeless = w[i].hopeless;
		if (!w[i].admit && !w[i].granted)
			continue;
		ws->state = GM_WAIT_ADMITTED;
		pg_atomic_fetch_sub_u32(&shared->wait_waiting, 1);
		ws->granted = !w[i].admit;
		if (ws->granted)
			ws->need = w[i].grant;
		ws->base_vmdata = -1;	/* the process notes it (gm_shmem_wait_set_base) */
		ws->base_gap = 0;
		ws->look_vmdata = -1;
		ws->look_gap = 0;
		ws->grew_at = gm_monotonic_usec();
		ws->admitted_at = ws->grew_at;
		slot_recount(ws);
		if (!ws->granted)
			pg_atomic_fetch_add_u64(&shared->wait_counts[GM_WAIT_ADMISSIONS], 1);
		if (ws->pid != MyProcPid && ws->latch != NULL)
			SetLatch(ws->latch);
	}
}

/* What the process in slot slotno, if still pid's, waits for, as a reservation sees it. */
static GmReservedWait
reserved_wait(int slotno, int pid)
{
	PGPROC	   *proc = &ProcGlobal->allProcs[slotno];
	uint32		info = proc->wait_event_info;

	if (proc->pid != pid)
		return GM_RESERVED_RUNS;
	if ((info & 0xFF000000) == PG_WAIT_LOCK)
		return GM_RESERVED_LOCK;
	if (info == WAIT_EVENT_PG_SLEEP)
		return GM_RESERVED_SLEEP;
	if (info == WAIT_EVENT_CLIENT_WRITE)
		return GM_RESERVED_CLIENT_WRITE;
	if (info == WAIT_EVENT_CLIENT_READ)
		return GM_RESERVED_CLIENT_READ;
	return GM_RESERVED_RUNS;
}

/*
 * The monitor: whether the process in slot slotno, if still pid's, waits
 * in pg_sleep or to write to its client (a read without a lock): its
 * statement does not grow meanwhile.  Not a lock wait: a CREATE INDEX
 * that waited for its lock fills its sort at once when it gets it, and
 * extension and tuple locks are waited for briefly.
 */
bool
gm_shmem_stalled(int slotno, int pid)
{
	GmReservedWait w = reserved_wait(slotno, pid);

	return w == GM_RESERVED_SLEEP || w == GM_RESERVED_CLIENT_WRITE;
}

/*
 * The monitor, at each look, just before it reads the usage: the VmData
 * and RssAnon of each process admitted for a statement (memory_wait), into
 * looks (room for every slot; returns how many), without the lock: they
 * become the look's, with its room, in gm_shmem_wait_publish.  Growth
 * between this and the usage's reading is in the usage and not in the
 * growth: counted against the room, never as room twice.
 */
int
gm_shmem_wait_note_look(GmWaitLook *looks)
{
	int			n = 0;
	int			kept = 0;

	if (shared == NULL)
		return 0;
	/* What the slots hold, under the lock (64-bit fields: 32-bit builds). */
	LWLockAcquire(shared->wait_lock, LW_SHARED);
	for (int i = 0; i < shared->nslots; i++)
	{
		GmWaitSlot *ws = &shared->slots[i].wait;
		GmWaitLook *lk = &looks[n];
		GmWaitState st = wait_state(ws);

		if ((st != GM_WAIT_ADMITTED && st != GM_WAIT_RETURNED) || ws->pid == 0)
			continue;
		lk->slot = i;
		lk->arrival = ws->arrival;	/* checked again at publish */
		pg_read_barrier();
		lk->pid = ws->pid;
		lk->before = ws->look_vmdata >= 0 ? ws->look_vmdata : ws->base_vmdata;
		lk->grew_at = ws->grew_at;
		lk->grew_usec = Max(ws->grew_at - ws->admitted_at, 0);
		lk->granted = ws->granted;
		/* Its owner may end it and claim again without the lock meanwhile. */
		if (slot_same(ws, st, lk->arrival))
			n++;
	}
	LWLockRelease(shared->wait_lock);
	/* Then /proc, without it. */
	for (int k = 0; k < n; k++)
	{
		GmWaitLook *lk = &looks[k];

		gm_proc_vmdata_rss(lk->pid, &lk->vmdata, &lk->gap);
		if (lk->vmdata < 0 || lk->gap < 0)
			continue;
		lk->gap = Max(lk->vmdata - lk->gap, 0);
		lk->grew = lk->before >= 0 && lk->vmdata > lk->before;
		lk->still_usec = lk->grew ? 0 : Max(gm_monotonic_usec() - lk->grew_at, 0);
		lk->wait = reserved_wait(lk->slot, lk->pid);
		lk->returns = false;
		looks[kept++] = *lk;
	}
	return kept;
}

/*
 * Under the lock, the monitor at a look (now) of room bytes: a returned
 * reservation whose process grew at this look and waits for nothing is
 * admitted again with what it has not mapped of its need, in slot order,
 * where that fits the room less what the admitted statements still
 * expect; one grown past its need has none to take.
 */
static void
retake_reservations(int64 room, int64 now)
{
	int64		left = room;

	for (int i = 0; i < shared->nslots; i++)
	{
		GmWaitSlot *ws = &shared->slots[i].wait;
		GmWaitState st = wait_state(ws);

		if (st == GM_WAIT_ADMITTED || st == GM_WAIT_RETURNED)
			left -= slot_outstanding(ws);
		else if (st == GM_WAIT_WAITING && !ws->hopeless)
			left -= ws->need;	/* a waiter comes before a retake */
	}
	for (int i = 0; i < shared->nslots; i++)
	{
		GmWaitSlot *ws = &shared->slots[i].wait;
		int64		rest;

		if (wait_state(ws) != GM_WAIT_RETURNED || ws->grew_at != now ||
			ws->look_vmdata < 0 || ws->base_vmdata < 0 ||
			reserved_wait(i, ws->pid) != GM_RESERVED_RUNS)
			continue;
		/* Its gap is counted already; what it has not mapped of its need, if any. */
		rest = ws->need - (ws->look_vmdata - ws->base_vmdata);
		if (rest > 0 && rest <= left)
		{
			ws->state = GM_WAIT_ADMITTED;
			/* Its hold (gm_guard_reservation_returns) counts from now. */
			ws->admitted_at = now;
			slot_recount(ws);
			left -= rest;
		}
	}
}

/*
 * The monitor, at the end of each look: its room up to the guard's target
 * and its ceiling (-1: the guard does not act), and the admitted
 * statements' readings it took before the usage (looks, n of them), all
 * under the lock, which it takes once: a round sees a look's room with
 * that look's growth, never one look's with another's.  A reservation
 * the monitor decided should not be held any longer (returns) goes back;
 * one that went back and grows again with nothing to wait for is taken
 * again where it fits.  Wakes the waiters when the room grew or a
 * reservation went back.
 */
void
gm_shmem_wait_publish(int64 room, int64 ceiling, const GmWaitLook *looks, int n)
{
	bool		grew;
	bool		retake = false;
	int64		now = gm_monotonic_usec();

	if (shared == NULL)
		return;
	wait_lock_exclusive();
	grew = room > shared->wait_room;
	shared->wait_room = room;
	shared->wait_ceiling = ceiling;
	for (int k = 0; k < n; k++)
	{
		GmWaitSlot *ws = &shared->slots[looks[k].slot].wait;
		GmWaitState st = wait_state(ws);

		if ((st != GM_WAIT_ADMITTED && st != GM_WAIT_RETURNED) ||
			ws->pid != looks[k].pid || ws->arrival != looks[k].arrival)
			continue;
		if (looks[k].grew)
			ws->grew_at = now;
		ws->look_vmdata = looks[k].vmdata;
		ws->look_gap = Max(looks[k].gap - ws->base_gap, 0);
		if (ws->base_vmdata < 0)
		{
			slot_recount(ws);
			continue;
		}
		if (looks[k].wait == GM_RESERVED_CLIENT_READ)
		{
			/* Its statement is over (a suspended portal): it ends. */
			ws->state = GM_WAIT_NONE;
			grew = true;
		}
		else if (wait_state(ws) == GM_WAIT_ADMITTED && !ws->granted && looks[k].returns &&
				 ws->need > looks[k].vmdata - ws->base_vmdata)
		{
			/*
			 * What it has not mapped of its need goes back (its gap stays
			 * counted); counted, but a start share's.
			 */
			ws->state = GM_WAIT_RETURNED;
			if (!ws->start)
				pg_atomic_fetch_add_u64(&shared->wait_counts[GM_WAIT_RETURNS], 1);
			grew = true;
		}
		else if (wait_state(ws) == GM_WAIT_RETURNED && looks[k].grew &&
				 looks[k].wait == GM_RESERVED_RUNS)
			retake = true;
		slot_recount(ws);
	}
	/* The reservations lost since (a round ends them only when some wait); none held, none lost. */
	if (pg_atomic_read_u32(&shared->wait_held) != 0 || pg_atomic_read_u64(&shared->wait_taken) != 0)
		for (int i = 0; i < shared->nslots; i++)
			if (end_if_lost(i))
				grew = true;
	/* Those that grow again take their reservation again, where it fits. */
	if (retake && room >= 0)
		retake_reservations(room, now);
	if (grew)
		for (int i = 0; i < shared->nslots; i++)
		{
			GmWaitSlot *ws = &shared->slots[i].wait;

			if (wait_state(ws) == GM_WAIT_WAITING && ws->latch != NULL)
				SetLatch(ws->latch);
		}
	wait_unlock_exclusive();
	pg_atomic_fetch_add_u32(&shared->wait_looks, 1);
	/*
	 * The processes that wait for this look (gm_shmem_await_look): their
	 * latch, set after the look is published, with a full barrier between
	 * (each sets its flag, then reads what the look publishes).  A slot is
	 * its process's PGPROC number.
	 */
	pg_memory_barrier();
	for (int i = 0; i < shared->nslots && i < (int) ProcGlobal->allProcCount; i++)
		if (pg_atomic_read_u32(&shared->slots[i].look_waiter) != 0)
			SetLatch(&GetPGProcByNumber(i)->procLatch);
}

/*
 * This process waits (on) or no longer waits (off) for the monitor's next
 * look: the look sets its latch.  A full barrier after it is set, so the
 * monitor's look that follows the caller's check of its condition sees it.
 */
void
gm_shmem_await_look(bool on)
{
	if (shared == NULL || my_slot == NULL || my_slot_pid != MyProcPid ||
		(!on && pg_atomic_read_u32(&my_slot->look_waiter) == 0))
		return;
	pg_atomic_write_u32(&my_slot->look_waiter, on ? 1 : 0);
	pg_memory_barrier();
}

/* How many looks the monitor has published (a counter that wraps). */
uint32
gm_shmem_wait_looks(void)
{
	return shared ? pg_atomic_read_u32(&shared->wait_looks) : 0;
}

/*
 * An admitted process, awake: its VmData now is what its statement's
 * growth is counted from, and what it had mapped and not touched then
 * what its gap is counted from (read before the lock; until then its whole
 * reservation is outstanding).  Returns it (-1: not admitted, or
 * unreadable).
 */
int64
gm_shmem_wait_note_base(void)
{
	int64		vm;
	int64		rss;

	if (!gm_shmem_wait_ready() || wait_state(&my_slot->wait) != GM_WAIT_ADMITTED)
		return -1;
	vm = gm_proc_statm_self(&rss);
	wait_lock_exclusive();
	gm_shmem_wait_set_base(vm, rss);
	wait_unlock_exclusive();
	return vm;
}

/*
 * Under the lock: this process's admitted statement counts its growth
 * from VmData vm and its gap from VmData less RssAnon rss (read awake,
 * admitted or just before the round that admitted it), unless noted.
 */
void
gm_shmem_wait_set_base(int64 vm, int64 rss)
{
	if (wait_state(&my_slot->wait) == GM_WAIT_ADMITTED && my_slot->wait.pid == MyProcPid &&
		my_slot->wait.base_vmdata < 0)
	{
		wait_set_base(&my_slot->wait, vm, rss);
		slot_recount(&my_slot->wait);
	}
}

/*
 * Whether this process's statement holds a reservation now, or one that
 * went back until it grows again (a flag read, without the lock).
 */
bool
gm_shmem_wait_holds(void)
{
	GmWaitState st;

	if (!gm_shmem_wait_ready())
		return false;
	st = wait_state(&my_slot->wait);
	return (st == GM_WAIT_ADMITTED || st == GM_WAIT_RETURNED) && my_slot->wait.pid == MyProcPid;
}

/* Under the lock: whether this process's statement is hopeless (above the ceiling). */
bool
gm_shmem_wait_hopeless(void)
{
	return wait_state(&my_slot->wait) != GM_WAIT_NONE && my_slot->wait.hopeless;
}

/* Under the lock: whether this process's statement was admitted (with its need or a grant). */
bool
gm_shmem_wait_admitted(void)
{
	return wait_state(&my_slot->wait) == GM_WAIT_ADMITTED;
}

/* Under the lock: whether this process's statement runs with a grant, and of how much (*grant). */
bool
gm_shmem_wait_granted(int64 *grant)
{
	*grant = my_slot->wait.need;
	return wait_state(&my_slot->wait) == GM_WAIT_ADMITTED && my_slot->wait.granted;
}

/*
 * The owner ends its slot's reservation without the lock: ended first (a
 * full barrier), then counted out (a read of ended, two exchanges), so an
 * update under the lock that computed it before counts it out too.
 */
static void
end_lockless(GmWaitSlot *ws)
{
	(void) pg_atomic_exchange_u32(&ws->ended, 1);
	slot_recount(ws);
}

/*
 * After a reservation ended: wake the waiters (but mine), without the
 * lock: a latch that is no longer theirs wakes for nothing.
 */
static void
wake_waiters(GmWaitSlot *mine)
{
	if (pg_atomic_read_u32(&shared->wait_waiting) == 0)
		return;
	pg_read_barrier();			/* their states and latches after the count */
	for (int i = 0; i < shared->nslots; i++)
	{
		GmWaitSlot *ws = &shared->slots[i].wait;
		struct Latch *latch = ws->latch;

		if (ws->state == GM_WAIT_WAITING && latch != NULL && ws != mine)
			SetLatch(latch);
	}
}

/*
 * This process's statement leaves the queue (under the lock: a round may
 * be admitting it) or ends its reservation (without the lock: its slot's
 * ended flag); wakes the waiters if that freed a reservation, so that
 * they look again.  A waiter counts itself in wait_waiting under the lock
 * before its round reads the slots, and the flag is set before the count
 * is read: either its round sees the reservation ended or it is woken.
 * Allocates nothing and raises no error of its own: from abort and exit
 * callbacks too.
 */
void
gm_shmem_wait_leave(void)
{
	GmSlot	   *slot = my_slot;
	GmWaitState st;

	if (shared == NULL || slot == NULL || my_slot_pid != MyProcPid)
		return;
	/* Only this process makes its slot WAITING: otherwise it stays out of it. */
	st = wait_state(&slot->wait);
	if (st == GM_WAIT_NONE)
		return;
	if (st == GM_WAIT_WAITING)
	{
		/* An exit, or the wait's PG_CATCH, while a round held the lock. */
		bool		held = LWLockHeldByMe(shared->wait_lock);

		if (!held)
			wait_lock_exclusive();
		st = wait_state(&slot->wait);
		if (st == GM_WAIT_WAITING)
		{
			slot->wait.state = GM_WAIT_NONE;
			pg_atomic_fetch_sub_u32(&shared->wait_waiting, 1);
		}
		else if (st != GM_WAIT_NONE)
		{
			pg_atomic_write_u32(&slot->wait.ended, 1);	/* admitted meanwhile */
			slot_recount(&slot->wait);
		}
		if (!held)
			wait_unlock_exclusive();
		if (st == GM_WAIT_WAITING || st == GM_WAIT_NONE)
			return;
	}
	else
		end_lockless(&slot->wait);
	wake_waiters(&slot->wait);
}

/* Add to one of the wait counts (glibc_malloc_guard). */
void
gm_shmem_wait_count(GmWaitCount kind, int64 n)
{
	if (shared != NULL)
		pg_atomic_fetch_add_u64(&shared->wait_counts[kind], (uint64) n);
}

StaticAssertDecl(GM_WAIT_EXEC_SHARES < GM_WAIT_EXEC_ASKS,
				 "an executor share is read before the asks, which count it first");

/*
 * The wait counts, into counts[GM_NWAIT_COUNTS] (zeroes without shared
 * memory), in their order, a read barrier after each: a backend bumps an
 * ask before its executor share, so reading the shares first, the asks
 * read after them include each share's ask (shares <= asks).
 */
void
gm_shmem_wait_counts(int64 *counts)
{
	for (int k = 0; k < GM_NWAIT_COUNTS; k++)
	{
		counts[k] = shared ? (int64) pg_atomic_read_u64(&shared->wait_counts[k]) : 0;
		pg_read_barrier();
	}
}


/*
 * The monitor: whether process pid, in slot slotno, waits for memory now
 * (a read without the lock: the guard counts it as idle until admitted).
 */
bool
gm_shmem_waits_for_memory(int slotno, int pid)
{
	GmWaitSlot *ws = &shared->slots[slotno].wait;

	return wait_state(ws) == GM_WAIT_WAITING && ws->pid == pid;
}

/*
 * The monitor: the bytes process pid, in slot slotno, reserved for its
 * admitted statement and has not mapped yet, at VmData vmdata; 0 = none.
 * The lock only when it has a reservation.
 */
int64
gm_shmem_wait_reserved(int slotno, int pid, int64 vmdata)
{
	GmWaitSlot *ws = &shared->slots[slotno].wait;
	int64		left = 0;
	uint64		arrival;

	if (wait_state(ws) != GM_WAIT_ADMITTED)
		return 0;
	LWLockAcquire(shared->wait_lock, LW_SHARED);
	if (wait_state(ws) == GM_WAIT_ADMITTED)
	{
		arrival = ws->arrival;
		pg_read_barrier();
		if (ws->pid == pid && ws->base_vmdata >= 0 && !waits_for_client(slotno, pid))
			left = Max(ws->need - Max(vmdata - ws->base_vmdata, 0), 0);
		/* Its owner may end it and claim again without the lock meanwhile. */
		if (!slot_same(ws, GM_WAIT_ADMITTED, arrival))
			left = 0;
	}
	LWLockRelease(shared->wait_lock);
	return left;
}

/*
 * Whether the memory guard acts on a limit now: the monitor runs, and its
 * last look read a limit the guard's mode covers, in a mode that acts (not
 * observe) (flag reads).
 */
bool
gm_shmem_guard_acts(void)
{
	return shared != NULL && shared->monitor.pid != 0 && shared->monitor.guard_covers &&
		shared->monitor.guard_enabled && !shared->monitor.guard_observe;
}

/*
 * The columns of glibc_malloc_backends() by extension version, as
 * pg_stat_statements does: a database still on an older version calls its
 * own entry point, and keeps working with a newer library.
 *
 *	1.1	idle_releases and idle_released_bytes count idle releases and
 *		remote trims together
 *	1.3	the kinds of memory (context_bytes, cache_bytes,
 *		outside_context_bytes, peak_executor_bytes); idle_releases and
 *		idle_released_bytes count
 *		idle releases only, remote_trims and remote_trimmed_bytes remote trims
 */
typedef enum GmBackendsVersion
{
	GM_BACKENDS_V1_1,
	GM_BACKENDS_V1_3
} GmBackendsVersion;

#define GM_BACKENDS_COLS_V1_1	12
#define GM_BACKENDS_COLS_V1_3	18
#define GM_BACKENDS_COLS		18	/* the most of any version */

/* Every visible snapshot, with the columns of the given version. */
static void
backends_internal(FunctionCallInfo fcinfo, GmBackendsVersion api)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			ncols = api == GM_BACKENDS_V1_1 ? GM_BACKENDS_COLS_V1_1 : GM_BACKENDS_COLS_V1_3;
	GmSnapshot *snaps;
	int			n;

	require_shared();
	gm_init_srf(fcinfo);
	if (rsinfo->setDesc->natts != ncols)
		elog(ERROR, "incorrect number of output arguments");

	n = gm_shmem_snapshots(&snaps);
	for (int i = 0; i < n; i++)
	{
		const GmSnapshot *s = &snaps[i];
		const GmReleaseCount *idle = &s->releases[GM_RELEASE_IDLE];
		const GmReleaseCount *remote = &s->releases[GM_RELEASE_REMOTE];
		Datum		values[GM_BACKENDS_COLS];
		bool		nulls[GM_BACKENDS_COLS] = {0};
		int			j = 0;

		values[j++] = Int32GetDatum(s->pid);
		values[j++] = CStringGetTextDatum(GetBackendTypeDesc(s->backend_type));
		/* No role (the autovacuum launcher): NULL, as in pg_stat_activity. */
		values[j] = ObjectIdGetDatum(s->roleid);
		nulls[j++] = !OidIsValid(s->roleid);
		values[j++] = CStringGetTextDatum(gm_preset_name(s->preset));
		values[j++] = Int64GetDatum(s->system_bytes);
		values[j++] = Int64GetDatum(s->in_use_bytes);
		values[j++] = Int64GetDatum(s->free_bytes);
		values[j++] = Int64GetDatum(s->mmapped_bytes);
		values[j] = Int64GetDatum(s->rss_anon_bytes);
		nulls[j++] = s->rss_anon_bytes < 0;
		if (api == GM_BACKENDS_V1_1)
		{
			values[j++] = Int64GetDatum(idle->count + remote->count);
			values[j++] = Int64GetDatum(idle->bytes + remote->bytes);
		}
		else
		{
			values[j] = Int64GetDatum(s->context_bytes);
			nulls[j++] = s->context_bytes < 0;
			values[j] = Int64GetDatum(s->cache_bytes);
			nulls[j++] = s->cache_bytes < 0;
			values[j] = Int64GetDatum(s->outside_context_bytes);
			nulls[j++] = s->outside_context_bytes < 0;
			values[j++] = Int64GetDatum(s->peak_executor_bytes);
			values[j++] = Int64GetDatum(idle->count);
			values[j++] = Int64GetDatum(idle->bytes);
			values[j++] = Int64GetDatum(remote->count);
			values[j++] = Int64GetDatum(remote->bytes);
		}
		values[j++] = TimestampTzGetDatum(s->taken_at);
		Assert(j == ncols);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}

/*
 * Add a slot's release counts to sum: those of its exited processes, and
 * its process's last snapshot's, read together under the change counter.
 */
static void
add_slot_counters(GmSlot *slot, GmReleaseCount *sum)
{
	GmReleaseCount exited[GM_NRELEASE_KINDS];
	GmReleaseCount live[GM_NRELEASE_KINDS];
	int			pid;

	for (;;)
	{
		uint32		before = slot->changecount;

		pg_read_barrier();
		memcpy(exited, slot->exited, sizeof(exited));
		memcpy(live, slot->snap.releases, sizeof(live));
		pid = slot->snap.pid;
		pg_read_barrier();
		if (before == slot->changecount && (before & 1) == 0)
			break;
		CHECK_FOR_INTERRUPTS();
	}
	for (int k = 0; k < GM_NRELEASE_KINDS; k++)
	{
		sum[k].count += exited[k].count + (pid != 0 ? live[k].count : 0);
		sum[k].bytes += exited[k].bytes + (pid != 0 ? live[k].bytes : 0);
	}
}

PG_FUNCTION_INFO_V1(glibc_malloc_counters);

/*
 * glibc_malloc_counters(): the server's counters since its slots were
 * created (server start, or the restart after a crash), kept across
 * process exits; one row.  Each slot's counts only grow, so a later read
 * never returns less than an earlier one.
 */
Datum
glibc_malloc_counters(PG_FUNCTION_ARGS)
{
	GmReleaseCount sum[GM_NRELEASE_KINDS] = {{0}};
	TupleDesc	tupdesc;
	Datum		values[6];
	bool		nulls[6] = {0};
	int			j = 0;

	require_shared();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	if (tupdesc->natts != lengthof(values))
		elog(ERROR, "incorrect number of output arguments");
	if (claim_slot())
		publish(gm_monotonic_usec(), false);
	for (int i = 0; i < shared->nslots; i++)
		add_slot_counters(&shared->slots[i], sum);

	values[j++] = Int64GetDatum(sum[GM_RELEASE_IDLE].count);
	values[j++] = Int64GetDatum(sum[GM_RELEASE_IDLE].bytes);
	values[j++] = Int64GetDatum(sum[GM_RELEASE_REMOTE].count);
	values[j++] = Int64GetDatum(sum[GM_RELEASE_REMOTE].bytes);
	values[j++] = Int64GetDatum((int64) pg_atomic_read_u64(&shared->all_oom_errors));
	values[j++] = TimestampTzGetDatum(shared->counters_since);
	Assert(j == lengthof(values));
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/* glibc_malloc_backends(), extension versions 1.1 and 1.2. */
Datum
glibc_malloc_backends(PG_FUNCTION_ARGS)
{
	backends_internal(fcinfo, GM_BACKENDS_V1_1);
	return (Datum) 0;
}

/* glibc_malloc_backends(), extension version 1.3. */
Datum
glibc_malloc_backends_1_3(PG_FUNCTION_ARGS)
{
	backends_internal(fcinfo, GM_BACKENDS_V1_3);
	return (Datum) 0;
}

/*
 * glibc_malloc_trim_backend(pid): ask a process to return its free memory
 * at its next safe point.  pg_signal_backend's rules apply.
 */
Datum
glibc_malloc_trim_backend(PG_FUNCTION_ARGS)
{
	int			pid = PG_GETARG_INT32(0);
	PGPROC	   *proc;
	const char *refusal;

	require_shared();

	proc = BackendPidGetProc(pid);
	if (proc == NULL)
	{
		ereport(WARNING,
				(errcode(ERRCODE_WARNING),
				 errmsg("PID %d is not a PostgreSQL backend process", pid)));
		PG_RETURN_BOOL(false);
	}
	if ((refusal = trim_refusal(proc)) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to trim backend %d", pid),
				 errdetail_internal("%s", refusal)));

	switch (send_request(GM_PROC_NUMBER(proc), pid, GM_REQ_TRIM | GM_REQ_PUBLISH))
	{
		case GM_SENT_NONE:
			ereport(WARNING,
					(errcode(ERRCODE_WARNING),
					 errmsg("process %d does not take glibc_malloc requests yet", pid),
					 errhint("Try again after its next transaction.")));
			PG_RETURN_BOOL(false);
		case GM_SENT_QUEUED:
			/* Still true, so existing callers keep working: it was asked. */
			ereport(NOTICE,
					(errmsg("the request to process %d is queued, not delivered", pid),
					 errdetail("The %s has no idle point to wake: it trims at its next transaction end, if it has one.",
							   GetBackendTypeDesc(shared->slots[GM_PROC_NUMBER(proc)].snap.backend_type))));
			break;
		case GM_SENT_DELIVERED:
			break;
	}
	PG_RETURN_BOOL(true);
}

/* qsort/bsearch comparator for GmPidState by pid. */
static int
cmp_pid_state(const void *a, const void *b)
{
	int			x = ((const GmPidState *) a)->pid;
	int			y = ((const GmPidState *) b)->pid;

	return (x > y) - (x < y);
}

/*
 * The backends' pg_stat_activity states, from the same snapshot as that
 * view, sorted by pid and palloc'd in *states; returns how many.
 */
int
gm_shmem_backend_states(GmPidState **states)
{
	int			nbackends = pgstat_fetch_stat_numbackends();
	int			n = 0;

	*states = palloc(sizeof(GmPidState) * Max(nbackends, 1));
	for (int i = 1; i <= nbackends; i++)
	{
		LocalPgBackendStatus *local = gm_local_beentry(i);

		if (local == NULL)
			continue;
		(*states)[n].pid = local->backendStatus.st_procpid;
		(*states)[n].state = local->backendStatus.st_state;
		n++;
	}
	qsort(*states, n, sizeof(GmPidState), cmp_pid_state);
	return n;
}

/*
 * Whether the process of snapshot s waits for its client's next command
 * outside any transaction: pg_stat_activity's state 'idle' (states, from
 * gm_shmem_backend_states).  Where the backend does not report its state
 * (track_activities = off), read from its PGPROC instead: the wait event
 * is ClientRead and it has no local transaction.  From PostgreSQL 14 wait
 * events are reported whatever track_activities says; on 13 such a
 * backend is never seen idle.  (The PGPROC cannot tell a failed
 * transaction block, which has no local transaction either: with
 * track_activities on, the state does.)
 */
bool
gm_shmem_is_idle(const GmSnapshot *s, const GmPidState *states, int nstates)
{
	GmPidState	key = {.pid = s->pid};
	const GmPidState *found = nstates > 0 ?
		bsearch(&key, states, nstates, sizeof(GmPidState), cmp_pid_state) : NULL;
	PGPROC	   *proc;

	if (found != NULL && found->state != STATE_DISABLED)
		return found->state == STATE_IDLE;
	proc = snapshot_proc(s);
	return proc != NULL && proc->wait_event_info == WAIT_EVENT_CLIENT_READ &&
		GM_PROC_LXID(proc) == InvalidLocalTransactionId;
}

/*
 * glibc_malloc_trim_idle(min_free_bytes): ask every other backend that is
 * idle (gm_shmem_is_idle), that the caller may trim, and whose last
 * snapshot holds more than min_free_bytes free, to return it at its idle
 * point.  Every filter runs before any request is sent; processes the
 * caller may not trim are skipped, not errors.  Returns how many were asked.
 */
Datum
glibc_malloc_trim_idle(PG_FUNCTION_ARGS)
{
	int64		min_free = PG_GETARG_INT64(0);
	GmPidState *states;
	int			nstates;
	GmSnapshot *targets;
	int			ntargets = 0;
	int			asked = 0;

	if (min_free < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("min_free_bytes must not be negative")));
	require_shared();

	/* Every filter, the privileges too, before asking anybody. */
	nstates = gm_shmem_backend_states(&states);
	targets = palloc(sizeof(GmSnapshot) * shared->nslots);
	for (int i = 0; i < shared->nslots; i++)
	{
		GmSnapshot *s = &targets[ntargets];

		if (!read_slot(&shared->slots[i], s) || s->pid == MyProcPid || !s->signalable ||
			s->taken_at == 0 || s->free_bytes <= min_free || !gm_shmem_is_idle(s, states, nstates) ||
			!gm_shmem_may_trim(s))
			continue;
		ntargets++;
	}

	for (int i = 0; i < ntargets; i++)
		if (send_request(targets[i].slot, targets[i].pid, GM_REQ_TRIM_IDLE | GM_REQ_PUBLISH) == GM_SENT_DELIVERED)
			asked++;
	PG_RETURN_INT32(asked);
}
