/*-------------------------------------------------------------------------
 *
 * glibc_malloc.h
 *		Declarations shared by the glibc_malloc modules.
 *
 * glibc_malloc puts glibc's malloc tunables (mallopt) under PostgreSQL's
 * configuration system.  The code is split by concern into layers, and a
 * file calls only the files above it in this list (t/016_layers.pl checks
 * the object files); a lower layer reaches a higher one only through a
 * callback it is given:
 *
 *	1. allocator.c		facts about this process's malloc: which library, the
 *						environment, mallinfo, RssAnon, releases and their
 *						counters, and the parameter table
 *	2. settings.c		policy: GUCs, the preset table, resolution, the one
 *						mallopt caller, and what statement start and
 *						transaction end should do
 *	3. idle.c			the idle point: a timer and the safe-point check; runs
 *						the callback it is given
 *	   guard_policy.c	the memory guard's decisions, a pure function of a
 *						snapshot (no I/O, calls nothing of the module), for
 *						shmem.c's admission and the layers above
 *	4. shmem.c			every process's snapshot in shared memory, the views,
 *						remote trim, and glibc_malloc.stats_interval
 *	5. stats.c			SQL functions about the calling backend
 *	   doctor.c			what every backend's memory is and what would free it
 *						(glibc_malloc_doctor), and the statement log
 *						(log_min_executor_memory)
 *	   guard.c			glibc_malloc.max_backend_memory (RLIMIT_DATA) and
 *						the HINT of an "out of memory" under the limits
 *	   monitor.c		the memory monitor: a background worker that asks
 *						backends to return free heap under memory pressure
 *						or above glibc_malloc.max_total_free
 *	   statements.c		memory per query: a shared hash keyed like
 *						pg_stat_statements (glibc_malloc_statements);
 *						stats.c, doctor.c, guard.c, monitor.c and
 *						statements.c never call each other
 *	6. glibc_malloc.c	_PG_init, the hooks, and the only place that wires
 *						lifecycle events to the layers
 *
 *-------------------------------------------------------------------------
 */
#ifndef GLIBC_MALLOC_H
#define GLIBC_MALLOC_H

#include <limits.h>

#include "glibc_malloc_compat.h"
#include "datatype/timestamp.h"
#include "executor/execdesc.h"
#include "nodes/parsenodes.h"
#include "nodes/plannodes.h"

/* The glibc parameters the module manages, in report order. */
typedef enum GmParam
{
	GM_TRIM_THRESHOLD,
	GM_MMAP_THRESHOLD,
	GM_TOP_PAD,
	GM_MMAP_MAX,
	GM_MXFAST,
	GM_PERTURB,
	GM_ARENA_MAX,
	GM_ARENA_TEST,
	GM_NPARAMS
} GmParam;

/* Where an effective value comes from. */
typedef enum GmSource
{
	GM_SRC_GLIBC_DEFAULT,		/* nobody set it: glibc's own behaviour */
	GM_SRC_SETTING,				/* an explicit glibc_malloc.<param> GUC */
	GM_SRC_PRESET,				/* derived from glibc_malloc.preset */
	GM_SRC_ENVIRONMENT			/* GLIBC_TUNABLES or MALLOC_*_ */
} GmSource;

/* Largest kB value whose byte count still fits mallopt's int argument. */
#define GM_MAX_KB			(INT_MAX / 1024)

/* An RLIMIT_DATA of RLIM_INFINITY, as the module's limits store it. */
#define GM_NO_LIMIT			PG_INT64_MAX
/* Each process's reserve under the memory guard at most (guard_policy.c). */
#define GM_GUARD_PROC_RESERVE ((int64) 4 * 1024 * 1024)

/* Presets are rows of settings.c's gm_presets[]; row 0 leaves glibc alone. */
#define GM_PRESET_DEFAULT 0

/* How a preset derives mmap_threshold and trim_threshold. */
typedef enum GmThresholdRule
{
	GM_RULE_GLIBC,				/* leave them to glibc */
	GM_RULE_WORK_MEM,			/* keep about two work_mem; follow work_mem */
	GM_RULE_FIXED				/* fixed_threshold */
} GmThresholdRule;

/* One preset: everything it does (see settings.c). */
typedef struct GmPresetDef
{
	const char *name;
	GmThresholdRule rule;
	int64		fixed_threshold;	/* bytes, for GM_RULE_FIXED */
	int64		top_pad;		/* bytes, or -1 to leave M_TOP_PAD alone */
	int			idle_delay_ms;	/* idle release after this long; 0 = none */
	int64		xact_trim_bytes;	/* trim after transactions once this much
									 * more is free; 0 = never */
	int64		reuse_bytes;	/* busy too: release once idle_delay passed
								 * without a statement using this much
								 * executor memory; 0 = idle only */
} GmPresetDef;

/*
 * One managed parameter: what glibc knows it as, and how it is exposed as
 * the GUC glibc_malloc.<name> (allocator.c's gm_params[]).
 */
typedef struct GmParamInfo
{
	const char *name;			/* GUC suffix and report name */
	int			mallopt_param;	/* M_* from <malloc.h> */
	const char *tunable;		/* GLIBC_TUNABLES name */
	const char *envvar;			/* MALLOC_*_ variable, or NULL */
	int64		glibc_default;	/* glibc's static default */
	bool		freezes_dynamic;	/* setting it stops glibc's dynamic mode */
	bool		is_size;		/* a byte count (reported unit "bytes") */
	/* the GUC */
	const char *short_desc;
	int			boot;			/* also the "not set" value */
	int			min;
	int			max;
	int			context;		/* GucContext when preloaded */
	int			flags;			/* GUC_UNIT_* */
	int			scale;			/* GUC units to bytes */
} GmParamInfo;

/* Why this process returned free memory to the OS, for the counters. */
typedef enum GmReleaseKind
{
	GM_RELEASE_IDLE,			/* the idle release (balanced, idle_release_delay) */
	GM_RELEASE_REMOTE,			/* asked by another backend (trim_backend, trim_idle) */
	GM_NRELEASE_KINDS
} GmReleaseKind;

/* How many releases of one kind ran, and the RssAnon they returned. */
typedef struct GmReleaseCount
{
	int64		count;
	int64		bytes;
} GmReleaseCount;

/* One resolved parameter, as reported by glibc_malloc_settings(). */
typedef struct GmResolved
{
	int64		value;			/* bytes or count */
	GmSource	source;
	bool		applied;		/* this value is in force in glibc */
} GmResolved;

/* A mallinfo2-shaped snapshot (also filled from mallinfo before 2.33). */
typedef struct GmMallinfo
{
	size_t		arena;			/* heap bytes obtained with brk/heaps */
	size_t		ordblks;
	size_t		smblks;
	size_t		hblks;			/* number of mmapped chunks */
	size_t		hblkhd;			/* bytes in mmapped chunks */
	size_t		usmblks;
	size_t		fsmblks;		/* bytes in free fastbin chunks */
	size_t		uordblks;		/* heap bytes in use */
	size_t		fordblks;		/* heap bytes free */
	size_t		keepcost;		/* releasable top chunk */
} GmMallinfo;

/*
 * One process's published snapshot (shmem.c), as the views and the doctor
 * read it.
 */
typedef struct GmSnapshot
{
	int			pid;			/* 0 = free */
	Oid			roleid;
	int			backend_type;	/* BackendType */
	int			preset;
	bool		signalable;		/* serves SIGUSR2 requests */
	bool		guarded;		/* the memory limits cover it (gm_guarded_process) */
	TimestampTz taken_at;		/* 0 = claimed, not published yet */
	int64		system_bytes;
	int64		in_use_bytes;
	int64		free_bytes;
	int64		mmapped_bytes;
	int64		rss_anon_bytes;
	int64		context_bytes;	/* all memory contexts; -1 = not measured */
	int64		cache_bytes;	/* CacheMemoryContext's subtree; -1 = none */
	int64		outside_context_bytes;	/* in use outside them, measured with
										 * them; -1 = not measured */
	int64		anon_outside_malloc_bytes;	/* gm_anon_outside_malloc */
	int64		peak_executor_bytes;	/* largest executor memory since the
										 * last publish */
	int64		top_executor_bytes; /* the largest statement's executor
									 * memory since the backend last
									 * returned free heap (or started) */
	int64		top_queryid;	/* its queryid; 0 = none known */
	GmReleaseCount releases[GM_NRELEASE_KINDS];
	uint32		served;			/* requests served so far: the monitor tells
								 * a served request without comparing clocks */
	int			slot;			/* the slot it was read from (readers') */
} GmSnapshot;

/*
 * The memory monitor's state (monitor.c), in shared memory (shmem.c); one
 * writer, the monitor, under a change counter.
 */
#define GM_MONITOR_TEXT 256
typedef struct GmMonitorState
{
	uint32		changecount;	/* odd while the monitor writes */
	int			pid;			/* the monitor's, 0 = not running */
	bool		enabled;		/* glibc_malloc.memory_monitor */
	double		fraction;		/* glibc_malloc.monitor_fraction */
	int64		max_total_free; /* glibc_malloc.max_total_free, bytes; -1 */
	char		source[16];		/* cgroup v1, cgroup v2, system, none */
	char		cgroup[MAXPGPATH];	/* the directory read, or "" */
	int64		limit_bytes;	/* -1 = no limit */
	int64		usage_bytes;	/* -1 = unknown */
	double		psi_some_avg10; /* -1 = unknown */
	int64		commit_headroom;	/* CommitLimit - Committed_AS, bytes;
									 * PG_INT64_MIN = unknown */
	int64		oom_kills;		/* the server's cgroup's oom_kill; -1 */
	int64		oom_group_kills;	/* and oom_group_kill (v2); -1 */
	bool		under_pressure;
	int64		total_free_bytes;	/* resident free heap of all backends */
	TimestampTz checked_at;
	int64		rounds;			/* rounds that asked backends */
	int64		backends_asked;
	int64		asked_bytes;	/* their free heap when asked */
	int64		returned_bytes; /* their RssAnon drop once they served it */
	char		last_action[GM_MONITOR_TEXT];
	TimestampTz last_action_at; /* 0 = none yet */
	/* the memory guard (glibc_malloc.memory_guard) */
	bool		guard_enabled;
	int			guard_mode;		/* GmGuardMode, as the monitor last read it */
	bool		guard_covers;	/* the mode guards the source read */
	bool		guard_engaged;	/* limits are set */
	int64		guard_engaged_at;	/* gm_monotonic_usec() of the last tick
									 * with limits set; 0 = never */
	int64		guard_headroom; /* bytes up to the guard's target, engaged
								 * or not; -1 = the guard does not act */
	int			guard_limited;	/* processes with a guard limit now */
	int64		guard_rounds;	/* ticks that lowered a limit */
	int64		guard_lowered;	/* limits lowered */
	char		guard_last_action[GM_MONITOR_TEXT];
	TimestampTz guard_last_action_at;	/* 0 = none yet */
	int			limit_source;	/* GmLimitSource of source */
	int64		guard_reserve;	/* each guarded process's reserve; -1 */
	bool		guard_reserve_shrunk;	/* all did not fit the margin */
	bool		guard_observe;	/* memory_guard = observe: nothing is done */
	int64		guard_would_limit;	/* observe: limits it would have lowered */
	int64		guard_would_fail;	/* observe: statements that grew past the
									 * limit it would have set */
	struct Latch *guard_latch;	/* the monitor's, for statement starts; NULL */
} GmMonitorState;

/* 1. allocator.c */
extern const GmParamInfo gm_params[GM_NPARAMS];
extern const char *const gm_source_names[];
extern bool gm_malloc_is_glibc;
extern const char *gm_allocator;
extern int64 gm_env_value[GM_NPARAMS];
extern const char *gm_env_hugetlb;
extern bool gm_glibc_has_fastbins;
extern volatile GmReleaseCount gm_releases[GM_NRELEASE_KINDS];
extern int64 gm_anon_outside_malloc;
extern void gm_allocator_init(void);
extern const char *gm_glibc_version(void);
extern int64 gm_mmap_threshold_limit(void);
extern void gm_mallinfo(GmMallinfo *mi);
extern int64 gm_heap_end(void);
extern int64 gm_proc_status_bytes(int pid, const char *key);
extern void gm_proc_vmdata_rss(int pid, int64 *vmdata, int64 *rss);
extern void gm_proc_vmsize_peak(int64 *size, int64 *peak);
extern int64 gm_proc_statm_data_bytes(void);
extern int64 gm_proc_statm_self(int64 *rss_anon);
extern int64 gm_context_used(MemoryContext cxt);
extern int64 gm_rss_anon(void);
extern bool gm_data_limit(int pid, int64 *soft, int64 *hard);
extern int64 gm_set_data_limit(int pid, int64 soft);
extern int64 gm_monotonic_usec(void);
extern int64 gm_release(size_t pad);
extern void gm_release_counted(GmReleaseKind kind);

/* 2. settings.c */
extern void gm_define_gucs(void (*on_change) (void));
extern void gm_statement_start(void);
extern bool gm_xact_trim_wanted(void);
extern int64 gm_reuse_bytes(void);
extern bool gm_xact_trim(bool busy);
extern void gm_resolve(GmParam p, GmResolved *r);
extern int64 gm_mmap_floor(void);
extern uint64 gm_mmap_threshold_changes(void);
extern bool gm_dynamic_active(GmSource *frozen_by);
extern int	gm_idle_delay(GmSource *source);
extern int	gm_current_preset(void);
extern const char *gm_preset_name(int preset);
extern bool gm_guarded_process(void);

/*
 * 3. idle.c.  The work runs at the idle point, in signal context; it
 * returns in how many ms it wants to run again (-1: not before something
 * schedules it).  The pending check is signal-safe and says the same
 * without doing anything.
 */
typedef int64 (*GmIdleWork) (int64 now);
typedef int64 (*GmIdlePending) (int64 now);
extern void gm_idle_setup(GmIdleWork work, GmIdlePending pending);
extern bool gm_idle_enabled(void);
extern bool gm_idle_ready(void);
extern void gm_idle_schedule(int64 now, int64 delay_ms);

/* 4. shmem.c */
extern void gm_shmem_define_gucs(void);
extern void gm_shmem_init(void);
extern bool gm_shmem_active(void);
extern bool gm_shmem_publishing(void);
extern bool gm_shmem_transaction_end(int64 now, bool client_statement);
extern bool gm_shmem_has_requests(void);
extern void gm_shmem_serve_requests(bool at_idle);
extern void gm_shmem_publish(int64 now);
extern int64 gm_shmem_publish_due(int64 now);
extern void gm_shmem_note_executor(int64 bytes, int64 queryid);
extern int	gm_shmem_snapshots(GmSnapshot **snaps);
extern bool gm_shmem_may_trim(const GmSnapshot *s);
extern bool gm_shmem_waits_for_client(const GmSnapshot *s);
/* A backend's pg_stat_activity state (BackendState), by pid. */
typedef struct GmPidState
{
	int			pid;
	int			state;
} GmPidState;
extern int	gm_shmem_backend_states(GmPidState **states);
extern bool gm_shmem_is_idle(const GmSnapshot *s, const GmPidState *states, int nstates);
extern int64 gm_snapshot_free_heap(const GmSnapshot *s);
extern int	gm_shmem_slot_count(void);
extern int	gm_shmem_all_snapshots(GmSnapshot *snaps);
extern int	gm_shmem_ask_trim(const GmSnapshot *s, uint32 *served);
extern bool gm_shmem_trim_pending(const GmSnapshot *s);
extern GmMonitorState *gm_shmem_monitor(void);
extern void gm_shmem_claim(void);
extern int64 gm_shmem_own_limit(int64 own, int64 *orig);
extern int64 gm_shmem_my_guard_limit(void);
extern void gm_shmem_guard_wake(void);
extern int64 gm_shmem_guard_reserve(void);
extern void gm_shmem_await_look(bool on);
extern bool gm_shmem_limits(int slotno, int pid, int64 *orig, int64 *own, int64 *guard, bool *guarded);
extern int64 gm_shmem_set_guard_limit(int slotno, int pid, int64 limit);
extern bool gm_shmem_guard_raise(int64 want, bool *covered);
extern void gm_shmem_guard_set_pool(int64 pool);
extern int64 gm_shmem_slot_guard_limit(int slotno);
extern int64 gm_shmem_slot_own_limit(int slotno);
extern bool gm_shmem_guard_statement_start(void);
extern bool gm_shmem_guard_counts_idle(void);
extern int64 gm_shmem_guard_first_limit(int64 vmdata);
extern void gm_shmem_guard_drop_first_limit(int64 limit);
extern bool gm_shmem_guard_engaged(void);
extern uint32 gm_shmem_guard_starts(int slotno);
extern void gm_shmem_guard_reads_client(bool on);
extern bool gm_shmem_guard_in_statement(int slotno, int pid);
extern bool gm_shmem_stalled(int slotno, int pid);
extern void gm_shmem_set_guard_working(int slotno, int pid, bool working);
extern int64 gm_shmem_guard_engaged_at(void);
extern int	gm_shmem_monitor_source(void);
extern void gm_shmem_count_oom(bool guard);
extern void gm_shmem_tell_leader_limit_oom(void);
extern bool gm_shmem_take_worker_limit_oom(void);
extern void gm_shmem_count_oom_error(void);
extern void gm_shmem_oom_counts(int64 *cap, int64 *guard);
/* glibc_malloc.memory_wait's counts (glibc_malloc_guard). */
typedef enum GmWaitCount
{
	GM_WAIT_WAITS,				/* statements that waited */
	GM_WAIT_USEC,				/* their time waited */
	GM_WAIT_ADMISSIONS,			/* statements admitted with a reservation */
	GM_WAIT_TIMEOUTS,			/* waits that ran out of memory_wait */
	GM_WAIT_SKIPS,				/* statements that ran at once: their need is
								 * above what could ever free */
	GM_WAIT_UNRESERVED,			/* memory_wait = 0: ran at once with a
								 * grant, their need not fitting */
	GM_WAIT_RETURNS,			/* reservations that went back before their
								 * statement ended (not grown, or waiting) */
	GM_WAIT_START_SHARES,		/* start shares taken */
	GM_WAIT_EXEC_SHARES,		/* executor asks that got more (before the
								 * asks: read first, counted after its ask) */
	GM_WAIT_EXEC_ASKS,			/* a running query near its limit asked the
								 * budget for more */
	GM_NWAIT_COUNTS
} GmWaitCount;
struct GmAdmitWaiter;

/* The admission's budget as read without its lock (gm_shmem_wait_read_budget). */
typedef struct GmBudgetRead
{
	uint32		gen;			/* the exclusive holds begun before the read */
	int64		room;			/* the room at the monitor's last look; -1 = unknown */
	int64		ceiling;		/* the most the admission could ever have; -1 = unknown */
	int64		taken;			/* what the admitted statements still take */
	int			held;			/* how many hold a reservation or a share */
} GmBudgetRead;
extern bool gm_shmem_wait_ready(void);
extern bool gm_shmem_wait_read_budget(GmBudgetRead *b);
extern bool gm_shmem_wait_claim(const GmBudgetRead *b, int64 amount, bool admission,
								int64 vm, int64 rss, int64 now);
extern void gm_shmem_wait_lock(void);
extern void gm_shmem_wait_unlock(void);
extern void gm_shmem_wait_enqueue(int64 need, int64 patience_ms, int64 now);
extern int	gm_shmem_wait_collect(struct GmAdmitWaiter *w, int max, int64 now, int64 *outstanding,
								  int64 *room, int64 *ceiling, int *held);
extern void gm_shmem_wait_hold_share(int64 share, int64 vm, int64 rss, int64 now);
extern void gm_shmem_wait_admit_at_once(int64 need, int64 vm, int64 rss, int64 now);
extern bool gm_shmem_wait_queue_empty(void);
extern void gm_shmem_wait_grow(int64 extra, int64 vm, int64 rss, int64 now);
extern bool gm_shmem_wait_holds(void);
extern void gm_shmem_wait_admit(const struct GmAdmitWaiter *w, int n);
/* What an admitted statement's process waits for, as the monitor sees it. */
typedef enum GmReservedWait
{
	GM_RESERVED_RUNS,			/* nothing the reservation should outlast */
	GM_RESERVED_LOCK,			/* a heavyweight lock */
	GM_RESERVED_SLEEP,			/* pg_sleep */
	GM_RESERVED_CLIENT_WRITE,	/* its client, to take its rows */
	GM_RESERVED_CLIENT_READ		/* its client's next command: its statement
								 * is over (the reservation ends) */
} GmReservedWait;

/* An admitted statement's process, as the monitor read it before a look's usage. */
typedef struct GmWaitLook
{
	int			slot;
	int			pid;
	uint64		arrival;		/* its admission's */
	int64		vmdata;
	int64		gap;			/* VmData less RssAnon */
	int64		before;			/* VmData at the last look (or the base; -1) */
	int64		grew_at;		/* when a look last saw it grow */
	bool		granted;		/* a grant, not a need: never returned */
	bool		grew;			/* VmData above before */
	int64		still_usec;		/* since it last grew (0: it grew now) */
	int64		grew_usec;		/* from its admission to the last look that
								 * saw it grow */
	GmReservedWait wait;		/* what it waits for */
	bool		returns;		/* the monitor's decision: it goes back */
} GmWaitLook;
extern int	gm_shmem_wait_note_look(GmWaitLook *looks);
extern void gm_shmem_wait_publish(int64 room, int64 ceiling, const GmWaitLook *looks, int n);
extern int64 gm_shmem_wait_note_base(void);
extern void gm_shmem_wait_set_base(int64 vm, int64 rss);
extern bool gm_shmem_wait_hopeless(void);
extern bool gm_shmem_wait_admitted(void);
extern bool gm_shmem_wait_granted(int64 *grant);
extern uint32 gm_shmem_wait_looks(void);
extern void gm_shmem_wait_leave(void);
extern void gm_shmem_wait_count(GmWaitCount kind, int64 n);
extern void gm_shmem_wait_counts(int64 *counts);
extern bool gm_shmem_guard_acts(void);
extern bool gm_shmem_slot_holds(int slotno, int pid);
extern bool gm_shmem_waits_for_memory(int slotno, int pid);
extern int64 gm_shmem_wait_reserved(int slotno, int pid, int64 vmdata);

/* 3. guard_policy.c */
/* glibc_malloc.memory_guard's values. */
typedef enum GmGuardMode
{
	GM_GUARD_OFF,
	GM_GUARD_CGROUP,			/* under a cgroup limit (the default) */
	GM_GUARD_MACHINE,			/* also on a whole machine, by choice */
	GM_GUARD_OBSERVE,			/* cgroup's decisions, logged and counted,
								 * none carried out */
	GM_GUARD_NMODES
} GmGuardMode;

/* What limits the server's memory, as the monitor reads it. */
typedef enum GmLimitSource
{
	GM_LIMIT_NONE,				/* nothing readable */
	GM_LIMIT_SYSTEM,			/* MemTotal - MemAvailable of MemTotal */
	GM_LIMIT_CGROUP_V1,
	GM_LIMIT_CGROUP_V2,
	GM_NLIMIT_SOURCES
} GmLimitSource;

/* A process's growth not measured yet. */
#define GM_GROWTH_UNKNOWN	PG_INT64_MIN

/* The guard's levels for one limit, bytes. */
typedef struct GmGuardLevels
{
	int64		target;			/* the usage the guard keeps the server under */
	int64		engage;			/* limits are set from this usage ... */
	int64		release;		/* ... and lifted below this one */
	int64		margin;			/* the limit minus the target */
} GmGuardLevels;

/* What the policy is given about the server. */
typedef struct GmGuardInput
{
	int64		limit;			/* the limit guarded; <= 0: none */
	int64		usage;			/* its usage; -1 = unknown */
	bool		engaged;		/* the guard was engaged before this look */
	int64		asked_pending;	/* free heap asked for, not returned yet */
	int			pool_share;		/* % of the budget held back for raises
								 * between looks (GM_GUARD_POOL_SHARE) */
} GmGuardInput;
/* The monitor's pool_share: what statements take at once, until the next look counts it. */
#define GM_GUARD_POOL_SHARE		25

/* One guarded process: what was read of it, then what the policy decided. */
typedef struct GmGuardProc
{
	int			slot;			/* the caller's, carried through */
	int			pid;			/* the caller's, carried through */
	int			group;			/* the caller's: the processes of one
								 * parallel query share it (its leader's
								 * pid); 0 = a group of its own */
	int64		vmdata;			/* VmData */
	int64		rss;			/* RssAnon */
	int64		growth;			/* VmData's growth over the last window */
	int64		grown;			/* and since the current window began */
	bool		waits_for_client;	/* idle, or idle in a transaction */
	bool		started;		/* a statement started since the last look */
	bool		stalled;		/* it waits in pg_sleep or to write to
								 * its client, at this look and the one
								 * before */
	bool		in_statement;	/* it waits for its client inside a
								 * top-level statement (COPY FROM STDIN,
								 * a suspended portal) */
	int64		cur_limit;		/* the guard's limit now; GM_NO_LIMIT = none */
	int64		reserved;		/* an admitted statement's reservation not
								 * mapped yet (memory_wait); 0 = none */
	uint64		since;			/* when its current work began, in the
								 * caller's order (smaller = earlier) */
	bool		fresh;			/* its work began too recently for growth
								 * to show it (GM_GUARD_FRESH_MS) ... */
	int64		since_vmdata;	/* ... and its VmData then (the last
								 * reading before it, for a statement
								 * that started since) */
	/* the decision */
	bool		working;
	int64		allow;			/* it may map this much more, from the budget */
	int64		message;		/* ... not working: this much more for a
								 * client message, not from the budget */
	int64		reserve;		/* ... and this much, from the margin */
	int64		limit;			/* vmdata + allow + message + reserve;
								 * GM_NO_LIMIT */
	bool		set;			/* set limit (else only if cur_limit is not
								 * in force) */
	bool		lowered;		/* set, and lower than cur_limit */
} GmGuardProc;

/* What the policy decided about the server. */
typedef struct GmGuardDecision
{
	bool		engaged;		/* after this look */
	GmGuardLevels levels;		/* zeroes without a limit */
	int64		headroom;		/* up to the target; -1 = not engaged */
	int64		budget;			/* what the processes may map together */
	int			nworking;
	int64		reserve;		/* each process's reserve */
	int64		reserve_wanted; /* what it would be if all fitted the margin */
	bool		reserve_shrunk; /* reserve < reserve_wanted */
	int64		shift;			/* the reserves at their floor beyond their
								 * share of the margin, counted as usage */
	int64		shift_unfunded; /* the reserves' floor past the shift's cap */
	int64		message;		/* an idle process's room for a message */
	int64		pool;			/* held back for raises until the next look */
} GmGuardDecision;

/*
 * One statement waiting for memory (glibc_malloc.memory_wait), as the
 * admission is given it; then whether it is admitted.
 */
typedef struct GmAdmitWaiter
{
	int			id;				/* the caller's, carried through */
	uint64		arrival;		/* the order it came in */
	int64		need;			/* bytes: its query's need (recent runs) */
	int64		waited_ms;		/* how long it has waited */
	int64		patience_ms;	/* its memory_wait */
	bool		mine;			/* the calling process's own statement ... */
	bool		due;			/* ... which runs now if it does not fit
								 * (memory_wait = 0, or its wait ran out) */
	/* the decision */
	bool		admit;
	bool		hopeless;		/* need above the ceiling: never fits */
	bool		granted;		/* mine, not admitted, due or hopeless: it
								 * runs now with a grant ... */
	int64		grant;			/* ... of this many bytes (may be 0) */
} GmAdmitWaiter;


extern bool gm_guard_covers(GmGuardMode mode, GmLimitSource source);
extern bool gm_guard_reservation_returns(GmReservedWait wait, int64 still_usec, int64 grew_usec);
extern const char *gm_guard_hint_remedy(GmLimitSource source);
extern void gm_guard_levels(int64 limit, GmGuardLevels *lv);
extern int	gm_guard_admit(int64 available, int64 ceiling, GmAdmitWaiter *waiters, int n);
extern int64 gm_guard_grant_limit(int64 base, int64 grant);
extern int64 gm_guard_start_share(int64 room, int64 taken, int held);
extern int64 gm_guard_grow_share(int64 room, int64 taken, int others, int64 grown);
extern int64 gm_guard_need_after(int64 need, int64 run);
extern int64 gm_guard_mapped_need(int64 need, int64 mapped, int64 at_exec);
extern int64 gm_guard_outstanding(int64 need, int64 grown, int64 gap, bool returned);
extern int64 gm_guard_reserve_shift(int64 limit, int n);
extern bool gm_guard_engaged_after(int64 limit, int64 usage, bool engaged);
extern bool gm_guard_measure(int64 limit, int64 usage, bool engaged);
extern int	gm_guard_glance_ms(int64 limit, int64 usage, bool measuring, int ncpu, int min_ms, int max_ms);
extern void gm_guard_policy(const GmGuardInput *in, GmGuardProc *procs, int n, GmGuardDecision *out);

/* 4. memsource.c: one reading of the server's memory limit and usage. */
typedef struct GmLimits
{
	GmLimitSource source;
	const char *dir;			/* the cgroup directory of the limit, or "" */
	int64		limit;			/* -1 = none */
	int64		usage;			/* -1 = unknown */
	double		psi;			/* some avg10, -1 = unknown */
	int64		commit_headroom;	/* CommitLimit - Committed_AS; PG_INT64_MIN */
	int64		oom_kills;		/* the server's cgroup's, -1 = none */
	int64		oom_group_kills;	/* -1 = none */
} GmLimits;
extern const char *const gm_limit_source_names[];
extern bool gm_read_small_file(const char *path, char *buf, size_t size);
extern void gm_memsource_detect(const char *configured);
extern void gm_memsource_read(GmLimits *l);
extern int64 gm_memsource_glance(void);

/* 5. monitor.c */
extern void gm_monitor_define_gucs(void);
extern void gm_monitor_register(void);

/* 5. guard.c */
extern void gm_guard_define_gucs(void);
extern void gm_guard_apply(void);
extern void gm_guard_statement_start(void);
extern void gm_guard_top_statement_start(void);
extern void gm_guard_top_statement_end(bool last);
extern void gm_guard_top_statement_runs(void);
extern void gm_guard_reads_client(bool on);
extern bool gm_guard_may_wait(void);
extern bool gm_guard_may_check(void);
/* A statement whose need is smaller does not wait (the reserve covers it). */
#define GM_WAIT_MIN_NEED		((int64) 1024 * 1024)
extern int64 gm_guard_wait_for_memory(int64 exec_peak, int64 mapped_peak, bool may_wait);
/* The running statement's check: every this many calls of its plan's wrapped inputs. */
#define GM_EXEC_CHECK_CALLS		1024

/* The running statement's check's state (gm_guard_executor_check), set to GM_EXEC_CHECK_INIT as its executor starts. */
typedef struct GmExecCheck
{
	int64		start_vm;		/* data pages at its first read; -1: none yet */
	int64		last_vm;		/* data pages when it last took more; -1: never */
	int64		last_share;		/* what it took then */
	int64		read_at;		/* its last read of /proc/self/statm (gm_monotonic_usec) */
	uint32		tried_looks;	/* the monitor's look when it last asked ... */
	bool		tried;			/* ... and found none left, or its limit not
								 * covering what it took: not again before
								 * the next look */
} GmExecCheck;
#define GM_EXEC_CHECK_INIT	{-1, -1, 0, 0, 0, false}
extern bool gm_guard_executor_check(GmExecCheck *check);
extern bool gm_guard_take_start_share(void);
extern bool gm_guard_holds_start_share(void);
extern bool gm_guard_measures_mapped(int64 exec_peak, int64 mapped_peak);
extern void gm_guard_grant_run(bool on);
extern void gm_guard_wait_end(void);
/* What gm_guard_count_oom found. */
typedef enum GmOomKind
{
	GM_OOM_OTHER,				/* "out of memory", not under the module's limits */
	GM_OOM_LIMIT				/* one under max_backend_memory or the guard */
} GmOomKind;
extern GmOomKind gm_guard_count_oom(void);
extern void gm_guard_error_hint(ErrorData *edata);
extern void gm_guard_caught_oom_hint(void);

/* 5. statements.c */
/* A statement's key, as pg_stat_statements has it; padding zeroed. */
typedef struct GmStmtKey
{
	Oid			userid;
	Oid			dbid;
	uint64		queryid;
	bool		toplevel;
} GmStmtKey;

/* A utility statement's start, kept by the ProcessUtility hook. */
typedef struct GmUtilityMark
{
	bool		tracked;
	GmStmtKey	key;
	uint64		top_gen;		/* statements.c's count of top-level starts */
	int64		heap_end;		/* the program break at its start */
	int64		mmapped_bytes;
	int64		vm_size0;		/* top-level, measured: VmSize and VmPeak at */
	int64		vm_peak0;		/* its start; -1 = not measured */
	int64		free0;			/* and the free heap glibc kept then */
} GmUtilityMark;

/*
 * A recorded executor's end, measured before its shutdown and stored after
 * it, with the heap change and the mmapped bytes the shutdown gave back.
 */
typedef struct GmStmtEnd
{
	bool		pending;		/* a call to store after the shutdown */
	bool		mmapped;		/* mmapped_bytes was read */
	GmStmtKey	key;
	int64		plan_bytes;
	int64		exec_bytes;
	int64		heap_end;		/* the program break at its start */
	int64		mmapped_bytes;	/* glibc's before the shutdown */
	int64		mapped_bytes;	/* the mapped peak's growth over it; -1 = not
								 * measured (the caller sets it) */
} GmStmtEnd;
extern void gm_statements_define_gucs(void);
extern void gm_statements_init(void);
extern bool gm_statements_tracking(void);
extern int64 gm_statements_top_queryid(void);
extern MemoryContext gm_statements_plan_start(Query *parse, int nesting, MemoryContext *planner_cxt);
extern void gm_statements_plan_end(MemoryContext planner_cxt, Query *parse, int nesting);
extern void gm_statements_executor_start(QueryDesc *queryDesc, int eflags, int nesting);
extern void gm_statements_executor_end(QueryDesc *queryDesc, GmStmtEnd *end);
extern void gm_statements_executor_ended(GmStmtEnd *end, bool failed);
extern void gm_statements_analyzed(struct ParseState *pstate, Query *query, int nesting);
extern bool gm_statements_utility_start(PlannedStmt *pstmt, const char *query_string, int nesting, GmUtilityMark *mark);
extern void gm_statements_utility_end(GmUtilityMark *mark, int64 mapped);
extern void gm_statements_note_oom(bool limit);
extern int64 gm_statements_recorded_peak(uint64 queryid, int64 *mapped, bool *tracked);
extern void gm_statements_note_wait(uint64 queryid, int64 usec);
extern void gm_statements_subxact_abort(SubTransactionId subid);
extern void gm_statements_transaction_end(void);

/* 5. doctor.c (stats.c has no entry points of its own but SQL functions) */
extern void gm_doctor_define_gucs(void);
extern void gm_doctor_statement_start(QueryDesc *queryDesc);
extern int64 gm_doctor_statement_end(QueryDesc *queryDesc, bool want, int64 top_queryid);
extern void gm_doctor_transaction_end(void);

#endif							/* GLIBC_MALLOC_H */
