/*-------------------------------------------------------------------------
 *
 * statements.c
 *		Memory per query: a shared hash keyed like pg_stat_statements
 *		(userid, dbid, queryid, toplevel) with each statement's executor and
 *		planner memory peaks, glibc's heap change across it and the mmapped
 *		bytes it held, and its "out of memory" errors
 *		(glibc_malloc_statements).
 *
 * The executor peak is the statement log's measure (doctor.c): the bytes in
 * use in the query's memory context tree at ExecutorEnd, before the nodes
 * are shut down (what EXPLAIN ANALYZE reports for sorts and hashes), or the
 * largest of the executors nested in it.  The planner peak is the bytes the
 * planner used, in a memory context of its own made for the planning (as
 * EXPLAIN (MEMORY) does); the plan stays in it, a child of the caller's
 * context, and is freed with it.  The heap change is the program break's
 * across the statement, read after the executor's shutdown has freed its
 * memory (sbrk(0): glibc's main arena, which is all of a backend's heap
 * unless a module's threads allocate; no mallinfo, which walks every free
 * chunk).  The mmapped change of an executor is what its shutdown gave back
 * to the kernel (mallinfo before and after), read only when its memory
 * reached the smallest request glibc may mmap (so never for small
 * statements); a utility statement's is mallinfo's across it.  An
 * executor's call is stored once, after its shutdown (if the shutdown
 * fails, without the two changes).
 *
 * Statements without a queryid are not counted (PostgreSQL 13 has queryids
 * only with pg_stat_statements loaded; from 14, compute_query_id = off turns
 * them off): glibc_malloc_statements_info counts them.  Parallel workers do
 * not count: a parallel query's row has the leader's memory only.  Utility
 * statements count from PostgreSQL 14 (queryids), without EXECUTE, PREPARE
 * and DEALLOCATE, as in pg_stat_statements; their executor peak is that of
 * the executors run inside them (CREATE TABLE AS, COPY (query), EXPLAIN
 * ANALYZE), NULL without one.
 *
 * Eviction follows pg_stat_statements: an entry made by a call starts at
 * the usage of one call and every call adds one; an entry that has only
 * "out of memory" errors, no call yet (pg_stat_statements' sticky entry),
 * starts at the table's median usage; each error adds as a call does.  When the table is full, every
 * usage decays (a sticky entry's fast), the median is noted and the least
 * used 5 % (at least 10) go, found by selection, not by sorting all.
 *
 * Calls allocator.c and settings.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "access/parallel.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "common/hashfn.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "parser/parse_node.h"
#include "port/pg_bitutils.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "glibc_malloc.h"

/* glibc_malloc.track_statements */
typedef enum GmTrack
{
	GM_TRACK_NONE,
	GM_TRACK_TOP,
	GM_TRACK_ALL
} GmTrack;

static const struct config_enum_entry track_options[] = {
	{"none", GM_TRACK_NONE, false},
	{"top", GM_TRACK_TOP, false},
	{"all", GM_TRACK_ALL, false},
	{NULL, 0, false}
};

static int	track = GM_TRACK_NONE;
static int	statements_max = 5000;

/* Eviction, with pg_stat_statements' constants. */
#define GM_STMT_PEAK_CACHE_USEC	1000000 /* a recorded peak looked up is kept this long */
#define USAGE_EXEC			1.0		/* added by each call */
#define USAGE_INIT			1.0		/* an entry's first call starts here */
#define USAGE_MEDIAN_INIT	10.0	/* the median before any eviction */
#define USAGE_DECREASE		0.99	/* at each eviction */
#define STICKY_DECREASE		0.50	/* at each eviction, for a sticky entry */
#define USAGE_DEALLOC_PCT	5		/* evicted at once, at least 10 entries */
#define IS_STICKY(c)		((c).calls == 0)

/* Count, min, max, mean and the sum of squared deviations (Welford). */
typedef struct GmStmtPeak
{
	int64		n;
	double		min;
	double		max;
	double		mean;
	double		sum_var;
} GmStmtPeak;

typedef struct GmStmtCounters
{
	int64		calls;
	GmStmtPeak	plan;
	GmStmtPeak	exec;
	int64		heap_change;	/* bytes, summed over calls */
	int64		mmapped_change;
	int64		heap_grew;		/* calls after which the heap was larger */
	int64		max_heap_growth;
	int64		oom_errors;		/* "out of memory" ERRORs */
	int64		limit_oom_errors;	/* of those, under the module's limits */
	int64		waits;			/* starts that waited for memory (memory_wait) */
	int64		wait_usec;		/* their time waited */
	int64		mapped_n;		/* calls whose mapped peak was measured */
	int64		mapped_max;		/* the largest: VmPeak's growth over it */
	int64		mapped_exec;	/* that run's executor peak */
	int64		need;			/* the executor's peak of recent calls
								 * (gm_guard_need_after) */
	double		usage;
} GmStmtCounters;

typedef struct GmStmtEntry
{
	GmStmtKey	key;
	uint32		hash;			/* of key */
	bool		dead;			/* being removed (under the exclusive lock) */
	GmStmtCounters c;
	slock_t		mutex;			/* protects c */
} GmStmtEntry;

/*
 * The table: statements_max entries in one array, the first nentries in
 * use, and an open-addressing index (linear probing) of at least twice as
 * many slots, each 0 (empty) or an entry's hash (high 32 bits) and its
 * position + 1 (low 32 bits).  Eviction scans the array in order, and a
 * lookup reads one index slot or a few and only the entry whose hash
 * matches (a statement not in the table reads no entry).  Under churn both
 * run for most statements: with dynahash, its lookups and its walk took
 * 2.65 % of a backend's samples there, against 0.6 % now
 * (docs/statements.md).  Removing entries compacts the array and rebuilds
 * the index from the stored hashes.
 */
typedef struct GmStmtShared
{
	LWLock	   *lock;			/* exclusive to add or remove entries */
	int			nentries;		/* under lock */
	slock_t		mutex;			/* protects the fields below */
	double		median_usage;
	int64		dealloc;
	pg_atomic_uint64 no_queryid;	/* statements without a queryid */
	TimestampTz stats_reset;
} GmStmtShared;

static GmStmtShared *stmt_shared = NULL;
static GmStmtEntry *stmt_entries = NULL;	/* NULL: no table here */
static uint64 *stmt_index = NULL;	/* hash << 32 | (position + 1) */
static uint64 stmt_index_mask = 0;

static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif

/*
 * A running statement, by QueryDesc: its key, the program break and the mmap
 * floor at its start, and its planning.  Executors nest (functions, triggers,
 * cursors); a statement ended by an error never reaches ExecutorEnd, so the
 * slots are freed when its subtransaction aborts, and at transaction end.
 * With all slots taken, a new statement is not recorded (a running one is
 * never dropped).
 */
#define GM_STMT_SLOTS 16
typedef struct GmStmtRun
{
	QueryDesc  *query;			/* NULL: free */
	GmStmtKey	key;
	int64		heap_end;		/* the program break at its start */
	int64		mmap_floor;		/* gm_mmap_floor() at its start */
	uint64		mmap_changes;	/* gm_mmap_threshold_changes() at its start */
	int64		plan_bytes;		/* -1: not planned for this run */
	uint64		top_gen;		/* top_gen at its start */
	SubTransactionId subid;		/* the subtransaction it started in */
} GmStmtRun;

static GmStmtRun runs[GM_STMT_SLOTS];

/* The last planning measured, until its executor starts. */
static uint64 planned_queryid = 0;
static int	planned_nesting = -1;
static int64 planned_bytes = -1;

/*
 * The largest executor memory since the last top-level statement started,
 * and a count of top-level starts: a top-level statement takes top_peak at
 * its end only if no other top-level statement started meanwhile (another
 * open portal's).
 */
static int64 top_peak = -1;
static uint64 top_gen = 0;

/* The top-level statement running, for its "out of memory" errors. */
static GmStmtKey cur_key;
static bool cur_key_valid = false;

/* "out of memory" errors noted in emit_log_hook, stored at the next start. */
#define GM_PENDING_OOM 4
typedef struct GmPendingOom
{
	GmStmtKey	key;
	int64		errors;
	int64		limit_errors;
} GmPendingOom;
static GmPendingOom pending_oom[GM_PENDING_OOM];
static int	npending_oom = 0;

/* The index's slots: a power of 2, at least twice statements_max. */
static Size
index_slots(void)
{
	return (Size) pg_nextpower2_64((uint64) statements_max * 2);
}

/* Size of the shared state: the header, the index, the entries. */
static Size
stmt_shared_size(void)
{
	return add_size(add_size(MAXALIGN(sizeof(GmStmtShared)),
							 MAXALIGN(mul_size(index_slots(), sizeof(uint64)))),
					mul_size(statements_max, sizeof(GmStmtEntry)));
}

/* shmem_request_hook: the table and its lock. */
static void
gm_statements_request(void)
{
#if PG_VERSION_NUM >= 150000
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
#endif
	RequestAddinShmemSpace(stmt_shared_size());
	RequestNamedLWLockTranche("glibc_malloc_statements", 1);
}

/* shmem_startup_hook: create or attach the table. */
static void
gm_statements_startup(void)
{
	bool		found;
	char	   *p;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	stmt_shared = ShmemInitStruct("glibc_malloc_statements", stmt_shared_size(), &found);
	p = (char *) stmt_shared + MAXALIGN(sizeof(GmStmtShared));
	stmt_index = (uint64 *) p;
	stmt_entries = (GmStmtEntry *) (p + MAXALIGN(index_slots() * sizeof(uint64)));
	stmt_index_mask = index_slots() - 1;
	if (!found)
	{
		stmt_shared->nentries = 0;
		memset(stmt_index, 0, index_slots() * sizeof(uint64));
		stmt_shared->lock = &(GetNamedLWLockTranche("glibc_malloc_statements"))->lock;
		SpinLockInit(&stmt_shared->mutex);
		stmt_shared->median_usage = USAGE_MEDIAN_INIT;
		stmt_shared->dealloc = 0;
		pg_atomic_init_u64(&stmt_shared->no_queryid, 0);
		stmt_shared->stats_reset = GetCurrentTimestamp();
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Check hook for glibc_malloc.statements_max without preloading (then
 * SUSET: PostgreSQL refuses PGC_POSTMASTER variables defined after start):
 * no hash exists, so only the value in force is accepted.
 */
static bool
check_statements_max(int *newval, void **extra, GucSource source)
{
	if (!process_shared_preload_libraries_in_progress && stmt_entries == NULL &&
		*newval != statements_max)
	{
		GUC_check_errdetail("glibc_malloc.statements_max takes effect only when glibc_malloc is loaded through shared_preload_libraries.");
		return false;
	}
	return true;
}

/* Define glibc_malloc.track_statements and statements_max; from _PG_init. */
void
gm_statements_define_gucs(void)
{
	/*
	 * SUSET, as pg_stat_statements.track: what is recorded for everybody.
	 * Off by default: recording costs about 2 % of throughput when
	 * distinct statements churn through the table (docs/statements.md),
	 * and a module loaded for its presets should cost nothing more.
	 */
	DefineCustomEnumVariable("glibc_malloc.track_statements",
							 "Records each statement's memory in glibc_malloc_statements: top-level statements (top), nested ones too (all), or none.",
							 "Needs shared_preload_libraries and queryids (compute_query_id; on PostgreSQL 13, pg_stat_statements).",
							 &track,
							 GM_TRACK_NONE,
							 track_options,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
	/* POSTMASTER: the hash's size is fixed at server start. */
	DefineCustomIntVariable("glibc_malloc.statements_max",
							"The most statements glibc_malloc_statements keeps; the least used go first.",
							"Needs shared_preload_libraries.",
							&statements_max,
							5000, 100, INT_MAX / 2,
							process_shared_preload_libraries_in_progress ? PGC_POSTMASTER : PGC_SUSET,
							0,
							check_statements_max, NULL, NULL);
}

/* Called from _PG_init while preloading: the shared hash, and queryids. */
void
gm_statements_init(void)
{
#if PG_VERSION_NUM >= 150000
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = gm_statements_request;
#else
	gm_statements_request();
#endif
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = gm_statements_startup;
	/*
	 * Ask for queryids (compute_query_id = auto) only if statements are
	 * recorded at server start: with track_statements = none in the
	 * configuration, query jumbling costs nothing here.
	 */
	if (track != GM_TRACK_NONE)
		GM_ENABLE_QUERY_ID();
}

/* Whether a statement at this nesting level is recorded. */
static bool
tracked(int nesting)
{
	return stmt_entries != NULL && !IsParallelWorker() &&
		(track == GM_TRACK_ALL || (track == GM_TRACK_TOP && nesting == 0));
}

/* Whether statements are recorded at all here (the executor measure is wanted). */
bool
gm_statements_tracking(void)
{
	return stmt_entries != NULL && track != GM_TRACK_NONE && !IsParallelWorker();
}

/*
 * The queryid of the top-level statement running now, as
 * glibc_malloc_statements keys it; 0 if none is recorded.
 */
int64
gm_statements_top_queryid(void)
{
	return cur_key_valid ? (int64) cur_key.queryid : 0;
}

/* gm_statements_recorded_peak's last answer found, in this backend. */
static GmStmtKey peak_cache_key;
static int64 peak_cache_peak = -1;
static int64 peak_cache_mapped = -1;
static int64 peak_cache_at = 0;	/* gm_monotonic_usec(); 0 = none */

/* The key of a statement of this queryid run now. */
static void
make_key(GmStmtKey *key, uint64 queryid, int nesting)
{
	memset(key, 0, sizeof(*key));
	key->userid = GetUserId();
	key->dbid = MyDatabaseId;
	key->queryid = queryid;
	key->toplevel = nesting == 0;
}

/* Count a statement that had no queryid. */
static void
count_no_queryid(void)
{
	pg_atomic_fetch_add_u64(&stmt_shared->no_queryid, 1);
}

/* The hash of a key (its padding is zeroed by make_key). */
static uint32
key_hash(const GmStmtKey *key)
{
	return hash_bytes((const unsigned char *) key, sizeof(GmStmtKey));
}

/* The entry of key (of hash h), or NULL.  Under the lock. */
static GmStmtEntry *
entry_find(const GmStmtKey *key, uint32 h)
{
	/* The index always has an empty slot: it ends. */
	for (uint64 i = h & stmt_index_mask;; i = (i + 1) & stmt_index_mask)
	{
		uint64		slot = stmt_index[i];
		GmStmtEntry *e;

		if (slot == 0)
			return NULL;
		if ((uint32) (slot >> 32) != h)
			continue;
		e = &stmt_entries[(uint32) slot - 1];
		if (memcmp(&e->key, key, sizeof(GmStmtKey)) == 0)
			return e;
	}
}

/* Index the entry at position pos.  Under the exclusive lock. */
static void
index_add(int pos)
{
	uint64		i = stmt_entries[pos].hash & stmt_index_mask;

	while (stmt_index[i] != 0)
		i = (i + 1) & stmt_index_mask;
	stmt_index[i] = ((uint64) stmt_entries[pos].hash << 32) | (uint32) (pos + 1);
}

/*
 * Remove the entries marked dead: compact the array, rebuild the index.
 * Under the exclusive lock (nobody holds an entry's mutex then).
 */
static void
entries_compact(void)
{
	int			n = 0;

	for (int i = 0; i < stmt_shared->nentries; i++)
	{
		if (stmt_entries[i].dead)
			continue;
		if (n != i)
			memcpy(&stmt_entries[n], &stmt_entries[i], sizeof(GmStmtEntry));
		n++;
	}
	stmt_shared->nentries = n;
	memset(stmt_index, 0, (stmt_index_mask + 1) * sizeof(uint64));
	for (int i = 0; i < n; i++)
		index_add(i);
}

/*
 * Reorder entries[lo..hi] so that the k-th least used (0-based) is at k,
 * the less used before it and the more used after it (quickselect: linear
 * on average, where sorting them all would cost n log n at every eviction).
 */
static void
select_least_used(GmStmtEntry **entries, int lo, int hi, int k)
{
	while (lo < hi)
	{
		double		pivot = entries[lo + (hi - lo) / 2]->c.usage;
		int			i = lo;
		int			j = hi;

		while (i <= j)
		{
			while (entries[i]->c.usage < pivot)
				i++;
			while (entries[j]->c.usage > pivot)
				j--;
			if (i <= j)
			{
				GmStmtEntry *t = entries[i];

				entries[i++] = entries[j];
				entries[j--] = t;
			}
		}
		if (k <= j)
			hi = j;
		else if (k >= i)
			lo = i;
		else
			return;
	}
}

/*
 * Make room: decay every entry's usage (a sticky one's fast), note the
 * median usage of all (as pg_stat_statements, before the least used go)
 * and remove the least used 5 % (at least 10).  Under the exclusive lock.
 * False if it could not (no memory for the list: the statement being
 * stored is then not recorded, and does not fail).
 */
static bool
entry_dealloc(void)
{
	GmStmtEntry **entries;
	int			n = stmt_shared->nentries;
	int			mid = n / 2;
	int			drop;

	entries = palloc_extended(Max(n, 1) * sizeof(GmStmtEntry *),
							  MCXT_ALLOC_NO_OOM | MCXT_ALLOC_HUGE);
	if (entries == NULL)
		return false;
	for (int i = 0; i < n; i++)
	{
		entries[i] = &stmt_entries[i];
		entries[i]->c.usage *= IS_STICKY(entries[i]->c) ? STICKY_DECREASE : USAGE_DECREASE;
	}
	drop = Min(Max(10, n * USAGE_DEALLOC_PCT / 100), n);
	if (n > 0)
	{
		/* The median at mid, the less used before it; then the least used. */
		select_least_used(entries, 0, n - 1, mid);
		if (drop - 1 < mid)
			select_least_used(entries, 0, mid - 1, drop - 1);
		else if (drop - 1 > mid)
			select_least_used(entries, mid + 1, n - 1, drop - 1);
	}
	SpinLockAcquire(&stmt_shared->mutex);
	if (n > 0)
		stmt_shared->median_usage = entries[mid]->c.usage;
	stmt_shared->dealloc++;
	SpinLockRelease(&stmt_shared->mutex);
	for (int i = 0; i < drop; i++)
		entries[i]->dead = true;
	pfree(entries);
	entries_compact();
	return drop > 0;
}

/*
 * The entry of key, made (evicting) if new; NULL if there is no room.  A
 * new entry starts at the usage of one call, or at the median if sticky
 * (made for errors only: no call to store).  Under the exclusive lock.
 */
static GmStmtEntry *
entry_alloc(const GmStmtKey *key, uint32 h, bool sticky)
{
	GmStmtEntry *entry;

	while (stmt_shared->nentries >= statements_max)
		if (!entry_dealloc())
			return NULL;
	entry = &stmt_entries[stmt_shared->nentries];
	memset(entry, 0, sizeof(*entry));
	entry->key = *key;
	entry->hash = h;
	entry->c.usage = USAGE_INIT;
	if (sticky)
	{
		SpinLockAcquire(&stmt_shared->mutex);
		entry->c.usage = stmt_shared->median_usage;
		SpinLockRelease(&stmt_shared->mutex);
	}
	SpinLockInit(&entry->mutex);
	index_add(stmt_shared->nentries++);
	return entry;
}

/* Add one measure to a peak's statistics (-1: none). */
static void
peak_add(GmStmtPeak *p, int64 bytes)
{
	double		old_mean;

	if (bytes < 0)
		return;
	p->n++;
	if (p->n == 1)
	{
		p->min = p->max = p->mean = bytes;
		p->sum_var = 0;
		return;
	}
	old_mean = p->mean;
	p->mean += (bytes - old_mean) / p->n;
	p->sum_var += (bytes - old_mean) * (bytes - p->mean);
	p->min = Min(p->min, bytes);
	p->max = Max(p->max, bytes);
}

/*
 * Store one call (calls > 0) or "out of memory" errors into key's entry:
 * the shared lock to find it, the exclusive one to add it.
 */
static void
store(const GmStmtKey *key, int64 calls, int64 plan_bytes, int64 exec_bytes,
	  int64 heap_change, int64 mmapped_change, int64 oom, int64 limit_oom,
	  int64 mapped)
{
	GmStmtEntry *entry;
	uint32		h = key_hash(key);

	/* An error left the lock held (a background worker's exit): skip. */
	if (LWLockHeldByMe(stmt_shared->lock))
		return;
	/* The peak this backend kept may change: looked up again next time. */
	if (peak_cache_at != 0 && memcmp(key, &peak_cache_key, sizeof(*key)) == 0)
		peak_cache_at = 0;
	LWLockAcquire(stmt_shared->lock, LW_SHARED);
	entry = entry_find(key, h);
	if (entry == NULL)
	{
		LWLockRelease(stmt_shared->lock);
		LWLockAcquire(stmt_shared->lock, LW_EXCLUSIVE);
		/* Another backend may have added it meanwhile. */
		entry = entry_find(key, h);
		if (entry == NULL)
			entry = entry_alloc(key, h, calls == 0);
		if (entry == NULL)
		{
			LWLockRelease(stmt_shared->lock);
			return;
		}
	}
	SpinLockAcquire(&entry->mutex);
	/* Each error adds usage too: a statement that keeps failing stays seen. */
	entry->c.usage += oom * USAGE_EXEC;
	entry->c.oom_errors += oom;
	entry->c.limit_oom_errors += limit_oom;
	/* A run that failed for memory: the need is the largest run again. */
	if (oom > 0 && entry->c.exec.n > 0)
		entry->c.need = Max(entry->c.need, (int64) entry->c.exec.max);
	else if (oom > 0 && entry->c.mapped_n > 0)
		entry->c.need = Max(entry->c.need, entry->c.mapped_max);
	if (calls > 0)
	{
		/* A sticky entry's first call: it starts over, as a new one. */
		if (IS_STICKY(entry->c))
			entry->c.usage = USAGE_INIT;
		entry->c.usage += calls * USAGE_EXEC;
		entry->c.calls += calls;
		peak_add(&entry->c.plan, plan_bytes);
		peak_add(&entry->c.exec, exec_bytes);
		/*
		 * Pure arithmetic (guard_policy.c): nothing that can fail here.  A
		 * utility statement without an executor inside needs what its
		 * process mapped.
		 */
		entry->c.need = gm_guard_need_after(entry->c.need, exec_bytes >= 0 ? exec_bytes : mapped);
		entry->c.heap_change += heap_change;
		entry->c.mmapped_change += mmapped_change;
		if (heap_change > 0)
		{
			entry->c.heap_grew++;
			entry->c.max_heap_growth = Max(entry->c.max_heap_growth, heap_change);
		}
		if (mapped >= 0)
		{
			entry->c.mapped_n++;
			if (mapped > entry->c.mapped_max)
			{
				entry->c.mapped_max = mapped;
				entry->c.mapped_exec = exec_bytes;
			}
		}
	}
	SpinLockRelease(&entry->mutex);
	LWLockRelease(stmt_shared->lock);
}

/*
 * The need of the top-level statement of this queryid run now by this
 * role in this database: its executor's peak of recent calls (a larger
 * call sets it, each smaller one moves it a quarter of the way down); -1 =
 * none recorded; and into *mapped what it maps, by the run that mapped
 * most (-1 = unknown: gm_guard_mapped_need).  A utility statement without
 * an executor inside: the same of what its process mapped, both.
 * The same lookup says whether the statement is tracked (*tracked).
 *
 * A shared lock and an entry's mutex, only when asked (memory_wait on,
 * the guard acting on a limit), at most once a second for the same query
 * and role in a row: a peak found is kept that long (until this backend
 * records the statement again), so that a workload that runs one
 * statement again and again (pgbench -S) does not take the lock at each.
 */
int64
gm_statements_recorded_peak(uint64 queryid, int64 *mapped, bool *tracked)
{
	GmStmtKey	key;
	GmStmtEntry *entry;
	int64		peak = -1;
	int64		now;

	*mapped = -1;
	*tracked = gm_statements_tracking() && queryid != UINT64CONST(0) &&
		!LWLockHeldByMe(stmt_shared->lock);
	if (!*tracked)
		return -1;
	make_key(&key, queryid, 0);
	now = gm_monotonic_usec();
	if (peak_cache_at != 0 && now - peak_cache_at < GM_STMT_PEAK_CACHE_USEC &&
		now >= peak_cache_at && memcmp(&key, &peak_cache_key, sizeof(key)) == 0)
	{
		*mapped = peak_cache_mapped;
		return peak_cache_peak;
	}
	LWLockAcquire(stmt_shared->lock, LW_SHARED);
	entry = entry_find(&key, key_hash(&key));
	if (entry != NULL)
	{
		int64		mapped_max;
		int64		mapped_exec;

		bool		by_mapped;

		SpinLockAcquire(&entry->mutex);
		/* (a utility statement without an executor: by what it mapped) */
		by_mapped = entry->c.exec.n == 0 && entry->c.mapped_n > 0;
		if (entry->c.exec.n > 0 || by_mapped)
			peak = entry->c.need;
		mapped_max = entry->c.mapped_max;
		mapped_exec = entry->c.mapped_exec;
		SpinLockRelease(&entry->mutex);
		if (by_mapped)
			*mapped = peak;
		else if (peak >= 0)
			*mapped = gm_guard_mapped_need(peak, mapped_max, mapped_exec);
	}
	LWLockRelease(stmt_shared->lock);
	if (peak > 0)
	{
		peak_cache_key = key;
		peak_cache_peak = peak;
		peak_cache_mapped = *mapped;
		peak_cache_at = now;
	}
	return peak;
}

/* Add a wait for memory of usec to the top-level statement of queryid. */
void
gm_statements_note_wait(uint64 queryid, int64 usec)
{
	GmStmtKey	key;
	GmStmtEntry *entry;

	if (stmt_entries == NULL || queryid == UINT64CONST(0) || LWLockHeldByMe(stmt_shared->lock))
		return;
	make_key(&key, queryid, 0);
	LWLockAcquire(stmt_shared->lock, LW_SHARED);
	entry = entry_find(&key, key_hash(&key));
	if (entry != NULL)
	{
		SpinLockAcquire(&entry->mutex);
		entry->c.waits++;
		entry->c.wait_usec += usec;
		SpinLockRelease(&entry->mutex);
	}
	LWLockRelease(stmt_shared->lock);
}

/* Store the "out of memory" errors emit_log_hook noted. */
static void
flush_pending(void)
{
	int			n = npending_oom;

	npending_oom = 0;
	if (stmt_entries == NULL)
		return;
	for (int i = 0; i < n; i++)
		store(&pending_oom[i].key, 0, -1, -1, 0, 0,
			  pending_oom[i].errors, pending_oom[i].limit_errors, -1);
}

/* before_shmem_exit: what a session ended by the error leaves. */
static void
flush_at_exit(int code, Datum arg)
{
	if (npending_oom > 0 && stmt_shared != NULL)
		flush_pending();
}

/* A top-level statement starts: the peak restarts, it owns the errors. */
static void
top_start(const GmStmtKey *key)
{
	static bool exit_hook = false;

	top_peak = -1;
	top_gen++;
	if (key)
	{
		cur_key = *key;
		cur_key_valid = true;
	}
	else
		cur_key_valid = false;
	if (npending_oom > 0)
		flush_pending();
	if (!exit_hook)
	{
		before_shmem_exit(flush_at_exit, (Datum) 0);
		exit_hook = true;
	}
}

/*
 * The planner hook's first half: when the statement is recorded, a memory
 * context for the planning, made current; returns the context to go back to
 * (NULL: not measured).
 */
MemoryContext
gm_statements_plan_start(Query *parse, int nesting, MemoryContext *planner_cxt)
{
	if (!tracked(nesting) || parse->queryId == UINT64CONST(0))
		return NULL;
	if (nesting == 0)
	{
		GmStmtKey	key;

		make_key(&key, parse->queryId, nesting);
		cur_key = key;
		cur_key_valid = true;
	}
	*planner_cxt = AllocSetContextCreate(CurrentMemoryContext, "glibc_malloc planner",
										 ALLOCSET_DEFAULT_SIZES);
	return MemoryContextSwitchTo(*planner_cxt);
}

/*
 * Its second half, once the caller's context is current again: the bytes
 * planning used, kept for the executor start.
 */
void
gm_statements_plan_end(MemoryContext planner_cxt, Query *parse, int nesting)
{
	planned_queryid = parse->queryId;
	planned_nesting = nesting;
	planned_bytes = gm_context_used(planner_cxt);
}

/* ExecutorStart: note the statement's start. */
void
gm_statements_executor_start(QueryDesc *queryDesc, int eflags, int nesting)
{
	uint64		queryid;
	GmStmtRun  *run = NULL;
	GmStmtKey	key;

	if (!gm_statements_tracking() || (eflags & EXEC_FLAG_EXPLAIN_ONLY))
		return;
	queryid = queryDesc->plannedstmt->queryId;
	make_key(&key, queryid, nesting);
	if (nesting == 0)
		top_start(queryid != UINT64CONST(0) ? &key : NULL);
	if (!tracked(nesting))
		return;
	if (queryid == UINT64CONST(0))
	{
		count_no_queryid();
		return;
	}
	for (int i = 0; i < GM_STMT_SLOTS && run == NULL; i++)
		if (runs[i].query == NULL || runs[i].query == queryDesc)
			run = &runs[i];
	if (run == NULL)
		return;
	run->query = queryDesc;
	run->key = key;
	run->heap_end = gm_heap_end();
	run->mmap_floor = gm_mmap_floor();
	run->mmap_changes = gm_mmap_threshold_changes();
	run->plan_bytes = -1;
	run->top_gen = top_gen;
	run->subid = GetCurrentSubTransactionId();
	if (planned_queryid == queryid && planned_nesting == nesting)
	{
		run->plan_bytes = planned_bytes;
		planned_queryid = 0;
	}
}

/*
 * ExecutorEnd, before the nodes are shut down: the statement's executor
 * memory, the bytes in use in its memory contexts (what EXPLAIN ANALYZE
 * reports for sorts and hashes), kept in *end with its key and start for
 * gm_statements_executor_ended.  Every executor's memory counts toward the
 * running top-level statement's peak.  When that memory could hold mmapped
 * chunks (it reached the mmap floor, or the floor moved while it ran),
 * glibc's mmapped bytes are read too.
 */
void
gm_statements_executor_end(QueryDesc *queryDesc, GmStmtEnd *end)
{
	GmStmtRun  *run = NULL;
	GmMallinfo	mi;
	int64		bytes;
	int64		peak;

	end->pending = false;
	end->mapped_bytes = -1;
	if (!gm_statements_tracking() || queryDesc->estate == NULL ||
		(queryDesc->estate->es_top_eflags & EXEC_FLAG_EXPLAIN_ONLY))
		return;
	for (int i = 0; i < GM_STMT_SLOTS && run == NULL; i++)
		if (runs[i].query == queryDesc)
			run = &runs[i];
	bytes = gm_context_used(queryDesc->estate->es_query_cxt);
	peak = Max(bytes, run && run->key.toplevel && run->top_gen == top_gen ? top_peak : -1);
	top_peak = Max(top_peak, bytes);
	if (run == NULL)
		return;
	run->query = NULL;
	if (run->key.toplevel)
		cur_key_valid = false;
	end->pending = true;
	end->key = run->key;
	end->plan_bytes = run->plan_bytes;
	end->exec_bytes = peak;
	end->heap_end = run->heap_end;
	end->mmapped = false;
	/* Unless a block of its memory could have been large enough for mmap. */
	if (run->mmap_changes == gm_mmap_threshold_changes() &&
		(int64) MemoryContextMemAllocated(queryDesc->estate->es_query_cxt, true) <
		run->mmap_floor)
		return;
	gm_mallinfo(&mi);
	end->mmapped = true;
	end->mmapped_bytes = (int64) mi.hblkhd;
}

/*
 * After ExecutorEnd's shutdown: store the call kept in *end, with the heap
 * change across the statement (the program break now minus at its start,
 * so the memory its executor freed is not counted as growth) and the
 * mmapped bytes the shutdown gave back.  If the shutdown failed (failed),
 * the call without them.
 */
void
gm_statements_executor_ended(GmStmtEnd *end, bool failed)
{
	GmMallinfo	mi;
	int64		heap_change = 0;
	int64		mmapped_change = 0;

	if (!end->pending || stmt_entries == NULL)
		return;
	end->pending = false;
	if (!failed)
	{
		heap_change = gm_heap_end() - end->heap_end;
		if (end->mmapped)
		{
			gm_mallinfo(&mi);
			mmapped_change = end->mmapped_bytes - (int64) mi.hblkhd;
		}
	}
	store(&end->key, 1, end->plan_bytes, end->exec_bytes, heap_change, mmapped_change, 0, 0,
		  end->mapped_bytes);
}

/*
 * The queryids parse analysis gave the last top-level utility statements,
 * by their text (PostgreSQL 14 and later): pg_stat_statements zeroes a
 * utility statement's queryid in its ProcessUtility hook before it calls
 * the next module's, so that with it listed after glibc_malloc (as
 * CloudNativePG lists the libraries it manages) the queryid is found here.
 * By text, not by node: the extended protocol and cached plans run a copy
 * of the analysed statement, and a node's address is reused.  On PG 14
 * and 15 the queryid is the text's hash, so the same text has the same
 * one.  From 16 it is the analysed tree's, which for CALL, EXPLAIN,
 * CREATE TABLE AS and DECLARE holds the objects search_path resolved: two
 * named prepared statements of the same text prepared under different
 * search_paths share the one analysed last.  Each statement is analysed
 * just before it runs otherwise (simple protocol, unnamed statements, a
 * cached plan whose search_path changed).
 */
#if PG_VERSION_NUM >= 140000
#define GM_UTILITY_IDS 16
typedef struct GmUtilityId
{
	uint64		text_hash;		/* of the statement's text; 0 = none */
	int			len;
	uint64		queryid;
} GmUtilityId;
static GmUtilityId utility_ids[GM_UTILITY_IDS];
static uint32 utility_next = 0;

/* The hash of the statement at location, len of text (as the core cleans it). */
static uint64
statement_text_hash(const char *text, int location, int len, int *cleaned_len)
{
	const char *sql;

	*cleaned_len = 0;
	if (text == NULL)
		return 0;
	sql = CleanQuerytext(text, &location, &len);
	*cleaned_len = len;
	return DatumGetUInt64(hash_any_extended((const unsigned char *) sql, len, 0)) | 1;
}
#endif

/* post_parse_analyze: remember a top-level utility statement's queryid. */
void
gm_statements_analyzed(ParseState *pstate, Query *query, int nesting)
{
#if PG_VERSION_NUM >= 140000
	GmUtilityId *u;
	int			len;
	uint64		h;

	if (nesting != 0 || query->utilityStmt == NULL || query->queryId == UINT64CONST(0) ||
		!gm_statements_tracking() || pstate == NULL || pstate->p_sourcetext == NULL)
		return;
	h = statement_text_hash(pstate->p_sourcetext, query->stmt_location, query->stmt_len, &len);
	for (int i = 0; i < GM_UTILITY_IDS; i++)
		if (utility_ids[i].text_hash == h && utility_ids[i].len == len)
		{
			utility_ids[i].queryid = query->queryId;
			return;
		}
	u = &utility_ids[utility_next++ % GM_UTILITY_IDS];
	u->text_hash = h;
	u->len = len;
	u->queryid = query->queryId;
#endif
}

/*
 * A utility statement's queryid: its own, else (top level) the one
 * analysis gave its text.
 */
static uint64
utility_queryid(PlannedStmt *pstmt, const char *query_string, int nesting)
{
#if PG_VERSION_NUM >= 140000
	int			len;
	uint64		h;

	if (pstmt->queryId != UINT64CONST(0) || nesting != 0 || query_string == NULL)
		return pstmt->queryId;
	h = statement_text_hash(query_string, pstmt->stmt_location, pstmt->stmt_len, &len);
	for (int i = 0; i < GM_UTILITY_IDS; i++)
		if (utility_ids[i].text_hash == h && utility_ids[i].len == len)
			return utility_ids[i].queryid;
#endif
	return pstmt->queryId;
}

/*
 * ProcessUtility, before: whether the statement is recorded, and its start
 * in *mark.  EXECUTE, PREPARE and DEALLOCATE are not (the executor of
 * EXECUTE is, at this level).
 */
bool
gm_statements_utility_start(PlannedStmt *pstmt, const char *query_string, int nesting, GmUtilityMark *mark)
{
	Node	   *stmt = pstmt->utilityStmt;
	GmMallinfo	mi;
	uint64		queryid;

	mark->tracked = false;
	mark->vm_size0 = mark->vm_peak0 = mark->free0 = -1;
	if (stmt == NULL || IsA(stmt, ExecuteStmt) || IsA(stmt, PrepareStmt) || IsA(stmt, DeallocateStmt))
		return false;
	if (!tracked(nesting))
		return true;
	queryid = utility_queryid(pstmt, query_string, nesting);
	make_key(&mark->key, queryid, nesting);
	if (nesting == 0)
		top_start(queryid != UINT64CONST(0) ? &mark->key : NULL);
	if (queryid == UINT64CONST(0))
	{
		count_no_queryid();
		return true;
	}
	gm_mallinfo(&mi);
	mark->tracked = true;
	mark->top_gen = top_gen;
	mark->heap_end = gm_heap_end();
	mark->mmapped_bytes = mi.hblkhd;
	return true;
}

/*
 * ProcessUtility, after (not after an error): store the statement, with
 * what its process mapped at most over its start (-1 = not measured), kept
 * if it is at least the executor memory nested in it.  One that ran no
 * executor may have used the free heap glibc kept at its start first
 * (heap a trim gave back too: using it grows the usage, not VmSize): that
 * is added, an estimate from above.
 */
void
gm_statements_utility_end(GmUtilityMark *mark, int64 mapped)
{
	GmMallinfo	mi;
	int64		exec_bytes;

	if (!mark->tracked || stmt_entries == NULL)
		return;
	exec_bytes = mark->key.toplevel && mark->top_gen == top_gen ? top_peak : -1;
	if (mapped >= 0 && exec_bytes < 0)
		mapped += Max(mark->free0, 0);
	gm_mallinfo(&mi);
	store(&mark->key, 1, -1, exec_bytes,
		  gm_heap_end() - mark->heap_end, (int64) mi.hblkhd - mark->mmapped_bytes, 0, 0,
		  mapped >= Max(exec_bytes, 0) ? mapped : -1);
	if (mark->key.toplevel)
		cur_key_valid = false;
}

/*
 * emit_log_hook: an "out of memory" ERROR of the running top-level statement
 * (under the module's limits if limit), noted only: stored at the next
 * statement start, as the hook may run anywhere.
 */
void
gm_statements_note_oom(bool limit)
{
	int			i;

	if (!cur_key_valid || !gm_statements_tracking())
		return;
	for (i = 0; i < npending_oom; i++)
		if (memcmp(&pending_oom[i].key, &cur_key, sizeof(GmStmtKey)) == 0)
			break;
	if (i == npending_oom)
	{
		if (npending_oom == GM_PENDING_OOM)
			return;
		pending_oom[i].key = cur_key;
		pending_oom[i].errors = 0;
		pending_oom[i].limit_errors = 0;
		npending_oom++;
	}
	pending_oom[i].errors++;
	if (limit)
		pending_oom[i].limit_errors++;
}

/* A subtransaction aborted: its statements never reach ExecutorEnd. */
void
gm_statements_subxact_abort(SubTransactionId subid)
{
	for (int i = 0; i < GM_STMT_SLOTS; i++)
		if (runs[i].query != NULL && runs[i].subid >= subid)
			runs[i].query = NULL;
}

/* At top-level transaction end: no statement runs; free the slots. */
void
gm_statements_transaction_end(void)
{
	cur_key_valid = false;
	planned_queryid = 0;
	for (int i = 0; i < GM_STMT_SLOTS; i++)
		runs[i].query = NULL;
}

/* Error out unless the hash exists. */
static void
require_hash(void)
{
	if (stmt_entries == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("glibc_malloc must be loaded via shared_preload_libraries to record statements")));
}

/* The columns of glibc_malloc_statements() and glibc_malloc_statements_info(). */
#define GM_STMT_COLS		25
#define GM_STMT_COLS_1_6	21	/* before waits, wait_time, mapped_measured
								 * and max_mapped_peak_bytes */
#define GM_STMT_COLS_1_7_EARLY 23	/* a build of 1.7 before the last two */
#define GM_STMT_INFO_COLS	4

/*
 * Error out unless the SQL definition has the columns the library fills
 * (a library older or newer than the extension's SQL).
 */
static void
check_columns(TupleDesc tupdesc, int ncols, const char *fn)
{
	if (tupdesc->natts != ncols)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("%s() returns %d columns, but its SQL definition declares %d",
						fn, ncols, tupdesc->natts),
				 errhint("Update the extension (ALTER EXTENSION glibc_malloc UPDATE) to match the installed library.")));
}

PG_FUNCTION_INFO_V1(glibc_malloc_statements);

/*
 * glibc_malloc_statements(): one row per entry; the caller's own rows, or
 * all with the privileges of pg_read_all_stats.
 */
Datum
glibc_malloc_statements(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			userid = GetUserId();
	bool		all = has_privs_of_role(userid, ROLE_PG_READ_ALL_STATS);
	int			ncols;

	require_hash();
	gm_init_srf(fcinfo);
	ncols = rsinfo->setDesc->natts;
	if (ncols != GM_STMT_COLS_1_6 && ncols != GM_STMT_COLS_1_7_EARLY)
		check_columns(rsinfo->setDesc, GM_STMT_COLS, "glibc_malloc_statements");

	LWLockAcquire(stmt_shared->lock, LW_SHARED);
	for (int e = 0; e < stmt_shared->nentries; e++)
	{
		GmStmtEntry *entry = &stmt_entries[e];
		Datum		values[GM_STMT_COLS];
		bool		nulls[GM_STMT_COLS] = {0};
		GmStmtCounters c;
		int			j = 0;
		const GmStmtPeak *peaks[2];

		if (!all && entry->key.userid != userid)
			continue;
		SpinLockAcquire(&entry->mutex);
		c = entry->c;
		SpinLockRelease(&entry->mutex);
		if (c.calls == 0 && c.oom_errors == 0)
			continue;

		values[j++] = ObjectIdGetDatum(entry->key.userid);
		values[j++] = ObjectIdGetDatum(entry->key.dbid);
		values[j++] = BoolGetDatum(entry->key.toplevel);
		values[j++] = Int64GetDatum((int64) entry->key.queryid);
		values[j++] = Int64GetDatum(c.calls);
		values[j++] = Int64GetDatum(c.plan.n);
		peaks[0] = &c.plan;
		peaks[1] = &c.exec;
		for (int p = 0; p < 2; p++)
		{
			const GmStmtPeak *pk = peaks[p];

			if (p == 1)
				values[j++] = Int64GetDatum(pk->n);
			if (pk->n == 0)
			{
				for (int k = 0; k < 4; k++)
					nulls[j++] = true;
				continue;
			}
			values[j++] = Int64GetDatum((int64) pk->min);
			values[j++] = Int64GetDatum((int64) pk->max);
			values[j++] = Float8GetDatum(pk->mean);
			values[j++] = Float8GetDatum(pk->n > 1 ? sqrt(pk->sum_var / pk->n) : 0.0);
		}
		values[j++] = Int64GetDatum(c.heap_change);
		values[j++] = Int64GetDatum(c.mmapped_change);
		values[j++] = Int64GetDatum(c.heap_grew);
		values[j++] = Int64GetDatum(c.max_heap_growth);
		values[j++] = Int64GetDatum(c.oom_errors);
		values[j++] = Int64GetDatum(c.limit_oom_errors);
		if (ncols >= GM_STMT_COLS_1_7_EARLY)
		{
			values[j++] = Int64GetDatum(c.waits);
			values[j++] = Float8GetDatum(c.wait_usec / 1000.0);
		}
		if (ncols == GM_STMT_COLS)
		{
			values[j++] = Int64GetDatum(c.mapped_n);
			if (c.mapped_n > 0)
				values[j++] = Int64GetDatum(c.mapped_max);
			else
				nulls[j++] = true;
		}
		Assert(j == ncols);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(stmt_shared->lock);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(glibc_malloc_statements_info);

/* glibc_malloc_statements_info(): evictions, the last reset, statements without a queryid. */
Datum
glibc_malloc_statements_info(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[GM_STMT_INFO_COLS];
	bool		nulls[GM_STMT_INFO_COLS] = {0};
	int64		nentries;
	int64		dealloc;
	int64		no_queryid;
	TimestampTz stats_reset;

	require_hash();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	check_columns(tupdesc, GM_STMT_INFO_COLS, "glibc_malloc_statements_info");
	LWLockAcquire(stmt_shared->lock, LW_SHARED);
	nentries = stmt_shared->nentries;
	LWLockRelease(stmt_shared->lock);
	/* Copied out first: the Datums palloc where int64 is by reference. */
	SpinLockAcquire(&stmt_shared->mutex);
	dealloc = stmt_shared->dealloc;
	no_queryid = (int64) pg_atomic_read_u64(&stmt_shared->no_queryid);
	stats_reset = stmt_shared->stats_reset;
	SpinLockRelease(&stmt_shared->mutex);
	values[0] = Int64GetDatum(nentries);
	values[1] = Int64GetDatum(dealloc);
	values[2] = Int64GetDatum(no_queryid);
	values[3] = TimestampTzGetDatum(stats_reset);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

PG_FUNCTION_INFO_V1(glibc_malloc_statements_reset);

/*
 * glibc_malloc_statements_reset(userid, dbid, queryid): remove the matching
 * entries (0 matches any); all three 0 also resets the counters of
 * glibc_malloc_statements_info.  Returns the time of the reset.
 */
Datum
glibc_malloc_statements_reset(PG_FUNCTION_ARGS)
{
	Oid			userid = PG_GETARG_OID(0);
	Oid			dbid = PG_GETARG_OID(1);
	int64		queryid = PG_GETARG_INT64(2);
	TimestampTz now = GetCurrentTimestamp();

	require_hash();
	LWLockAcquire(stmt_shared->lock, LW_EXCLUSIVE);
	for (int e = 0; e < stmt_shared->nentries; e++)
	{
		GmStmtEntry *entry = &stmt_entries[e];

		entry->dead = (userid == InvalidOid || entry->key.userid == userid) &&
			(dbid == InvalidOid || entry->key.dbid == dbid) &&
			(queryid == 0 || (int64) entry->key.queryid == queryid);
	}
	entries_compact();
	if (userid == InvalidOid && dbid == InvalidOid && queryid == 0)
	{
		SpinLockAcquire(&stmt_shared->mutex);
		stmt_shared->dealloc = 0;
		pg_atomic_write_u64(&stmt_shared->no_queryid, 0);
		stmt_shared->stats_reset = now;
		SpinLockRelease(&stmt_shared->mutex);
	}
	LWLockRelease(stmt_shared->lock);
	PG_RETURN_TIMESTAMPTZ(now);
}
