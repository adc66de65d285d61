/*-------------------------------------------------------------------------
 *
 * glibc_malloc_compat.h
 *		Every PostgreSQL-version and libc difference, in one place.
 *
 * Include after postgres.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GLIBC_MALLOC_COMPAT_H
#define GLIBC_MALLOC_COMPAT_H

/* ---- libc ---- */

#ifdef __GLIBC__
#include <malloc.h>
#define GM_HAVE_GLIBC 1
#else
/*
 * Not glibc (musl, macOS, FreeBSD): there is no mallopt to call.  The
 * module still builds and loads, and refuses every non-default setting.
 * The parameter numbers only label the report.
 */
#define M_TRIM_THRESHOLD	(-1)
#define M_TOP_PAD			(-2)
#define M_MMAP_THRESHOLD	(-3)
#define M_MMAP_MAX			(-4)
#define M_MXFAST			1
#define M_PERTURB			(-6)
#define M_ARENA_TEST		(-7)
#define M_ARENA_MAX			(-8)
#endif

/*
 * A timer aimed at one thread (SIGEV_THREAD_ID): glibc 2.35 named the
 * field sigev_notify_thread_id; before, only the union member is there.
 */
#if defined(__GLIBC__) && defined(__linux__)
#define GM_HAVE_THREAD_SIGNALS 1	/* gettid, tgkill, SIGEV_THREAD_ID */
#endif
#ifdef sigev_notify_thread_id
#define gm_sigev_thread_id sigev_notify_thread_id
#else
#define gm_sigev_thread_id _sigev_un._tid
#endif

/*
 * The largest M_MMAP_THRESHOLD glibc before 2.35 accepts, HEAP_MAX_SIZE / 2,
 * which is DEFAULT_MMAP_THRESHOLD_MAX (32 MiB on 64-bit, 512 kB on 32-bit,
 * glibc's malloc/malloc.c): a larger one, from mallopt or the environment, is
 * ignored (nor does it freeze the dynamic thresholds).  From 2.35 any int.
 * Checked at run time against the running glibc (gm_mmap_threshold_limit).
 */
#define GM_GLIBC_MMAP_LIMIT_UNTIL_MAJOR 2
#define GM_GLIBC_MMAP_LIMIT_UNTIL_MINOR 35
#define GM_GLIBC_MMAP_LIMIT_BEFORE \
	(sizeof(long) == 4 ? (int64) 512 * 1024 : (int64) 4 * 1024 * 1024 * sizeof(long))

/* ---- PostgreSQL ---- */

/* PG 15 renamed EmitWarningsOnPlaceholders and made it reserve the prefix. */
#if PG_VERSION_NUM < 150000
#define MarkGUCPrefixReserved(prefix) EmitWarningsOnPlaceholders(prefix)
#endif

/* PG 18 records the module name and version in the magic block. */
#if PG_VERSION_NUM >= 180000
#define GM_MODULE_MAGIC PG_MODULE_MAGIC_EXT(.name = "glibc_malloc", .version = GM_VERSION)
#else
#define GM_MODULE_MAGIC PG_MODULE_MAGIC
#endif

/* The predefined roles were "default roles" before PG 14. */
#if PG_VERSION_NUM < 140000
#define ROLE_PG_READ_ALL_STATS DEFAULT_ROLE_READ_ALL_STATS
#define ROLE_PG_SIGNAL_BACKEND DEFAULT_ROLE_SIGNAL_BACKENDID
#endif

/*
 * MaxBackends: from PG 15 computed before shmem_request_hook runs; before
 * PG 15 it is still 0 in _PG_init, where the request is made, so compute it
 * as InitializeMaxBackends() will.
 */
#if PG_VERSION_NUM >= 150000
#define GM_MAX_BACKENDS() (MaxBackends)
#else
#include "postmaster/autovacuum.h"
#include "postmaster/postmaster.h"
#include "replication/walsender.h"
#define GM_MAX_BACKENDS() \
	(MaxConnections + autovacuum_max_workers + 1 + max_worker_processes + max_wal_senders)
#endif

/*
 * The backend status snapshot behind pg_stat_activity, by position: PG 16
 * renamed the accessor; PG 13 declares it in pgstat.h.
 */
#if PG_VERSION_NUM >= 140000
#include "utils/backend_status.h"
#else
#include "pgstat.h"
#endif
#if PG_VERSION_NUM >= 160000
#define gm_local_beentry(i) pgstat_get_local_beentry_by_index(i)
#else
#define gm_local_beentry(i) pgstat_fetch_stat_local_beentry(i)
#endif

/* PGPROC numbers: ProcNumber from PG 17. */
#if PG_VERSION_NUM >= 170000
#define GM_MY_PROC_NUMBER() (MyProcNumber)
#define GM_PROC_NUMBER(proc) GetNumberFromPGProc(proc)
#define GM_PROC_LXID(proc) ((proc)->vxid.lxid)
#else
#define GM_MY_PROC_NUMBER() (MyProc->pgprocno)
#define GM_PROC_NUMBER(proc) ((proc)->pgprocno)
#define GM_PROC_LXID(proc) ((proc)->lxid)
#endif

/*
 * GUC "extra" blocks: PG 16 wants guc_malloc (it frees them with guc_free);
 * before that, plain malloc/free.
 */
#if PG_VERSION_NUM >= 160000
#define gm_guc_malloc(size) guc_malloc(LOG, (size))
#else
#define gm_guc_malloc(size) malloc(size)
#endif

/*
 * The wait event this process reports right now: PG 14 added
 * my_wait_event_info; before, it lives in MyProc.
 */
#if PG_VERSION_NUM >= 140000
#include "utils/wait_event.h"
#define GM_CURRENT_WAIT_EVENT() (*my_wait_event_info)
#define GM_WAIT_EVENTS_REPORTED() true
#else
#include "pgstat.h"
#include "storage/proc.h"
#define GM_CURRENT_WAIT_EVENT() (MyProc ? MyProc->wait_event_info : 0)
/* Before PG 14, wait events are not reported with track_activities = off. */
#define GM_WAIT_EVENTS_REPORTED() (pgstat_track_activities)
#endif

/*
 * Materialized set-returning functions: PG 15 has InitMaterializedSRF;
 * older versions build the tuplestore by hand.
 */
#if PG_VERSION_NUM >= 150000
#define gm_init_srf(fcinfo) InitMaterializedSRF((fcinfo), 0)
#else
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/tuplestore.h"
static inline void
gm_init_srf(FunctionCallInfo fcinfo)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext old;
	TupleDesc	tupdesc;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	old = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	rsinfo->returnMode = SFRM_Materialize;
	rsinfo->setResult = tuplestore_begin_heap(true, false, work_mem);
	rsinfo->setDesc = CreateTupleDescCopy(tupdesc);
	MemoryContextSwitchTo(old);
}
#endif

/* A memory context's own counters (not its children's), for its used bytes. */
#if PG_VERSION_NUM >= 140000
#define GM_CONTEXT_STATS(cxt, totals) \
	((cxt)->methods->stats((cxt), NULL, NULL, (totals), false))
#else
#define GM_CONTEXT_STATS(cxt, totals) \
	((cxt)->methods->stats((cxt), NULL, NULL, (totals)))
#endif

/*
 * ProcessUtility_hook: PG 14 added readOnlyTree.  GM_PU_ARGS declares the
 * hook's parameters, GM_PU_PASS passes them on.
 */
#if PG_VERSION_NUM >= 140000
#define GM_PU_ARGS PlannedStmt *pstmt, const char *queryString, bool readOnlyTree, \
	ProcessUtilityContext context, ParamListInfo params, QueryEnvironment *queryEnv, \
	DestReceiver *dest, QueryCompletion *qc
#define GM_PU_PASS pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc
#else
#define GM_PU_ARGS PlannedStmt *pstmt, const char *queryString, \
	ProcessUtilityContext context, ParamListInfo params, QueryEnvironment *queryEnv, \
	DestReceiver *dest, QueryCompletion *qc
#define GM_PU_PASS pstmt, queryString, context, params, queryEnv, dest, qc
#endif

/*
 * Queryids: PG 14 computes them in core when a module asks
 * (compute_query_id = auto); PG 16 moved the header.  PG 13 has them only
 * from pg_stat_statements.
 */
#if PG_VERSION_NUM >= 160000
#include "nodes/queryjumble.h"
#define GM_ENABLE_QUERY_ID() EnableQueryId()
#elif PG_VERSION_NUM >= 140000
#include "utils/queryjumble.h"
#define GM_ENABLE_QUERY_ID() EnableQueryId()
#else
#define GM_ENABLE_QUERY_ID() ((void) 0)
#endif

/*
 * Whether statements get queryids: from PG 14 the core says; on PG 13 only
 * pg_stat_statements computes them, preloaded (its GUCs exist only then,
 * else a setting of one is a placeholder) and tracking.  And what to do
 * when they do not (compute_query_id = off is answered apart).
 */
#if PG_VERSION_NUM >= 140000
#define gm_query_ids_computed() IsQueryIdEnabled()
#define GM_QUERY_IDS_ACTION "set compute_query_id = on (a reload is enough), or restart the server with glibc_malloc.track_statements on in its configuration (the module asks for queryids only then), or load pg_stat_statements (a restart)"
#else
#include "utils/guc.h"
/* PG 13: pg_stat_statements loaded and tracking something. */
static inline bool
gm_query_ids_computed(void)
{
	const char *track = GetConfigOption("pg_stat_statements.track", true, false);

	return track != NULL && strcmp(track, "none") != 0 &&
		(GetConfigOptionFlags("pg_stat_statements.track", true) & GUC_CUSTOM_PLACEHOLDER) == 0;
}
#define GM_QUERY_IDS_ACTION "load pg_stat_statements (shared_preload_libraries, a restart) with pg_stat_statements.track = top or all: on PostgreSQL 13 only it computes queryids"
#endif

/*
 * post_parse_analyze_hook: PG 14 added the JumbleState (and core
 * queryids); before it only pg_stat_statements computes them, in this
 * hook, after the modules loaded before it.
 */
#if PG_VERSION_NUM >= 140000
#define GM_PPA_ARGS ParseState *pstate, Query *query, JumbleState *jstate
#define GM_PPA_PASS pstate, query, jstate
#else
#define GM_PPA_ARGS ParseState *pstate, Query *query
#define GM_PPA_PASS pstate, query
#endif

/* ExecutorRun_hook: PG 18 dropped execute_once. */
#if PG_VERSION_NUM >= 180000
#define GM_ER_ARGS QueryDesc *queryDesc, ScanDirection direction, uint64 count
#define GM_ER_PASS queryDesc, direction, count
#else
#define GM_ER_ARGS QueryDesc *queryDesc, ScanDirection direction, uint64 count, bool execute_once
#define GM_ER_PASS queryDesc, direction, count, execute_once
#endif

/*
 * The wait event of a statement waiting for memory (glibc_malloc.memory_wait):
 * PG 17 names an extension's own (WaitEventExtensionNew, registered once per
 * server, looked up by name in each process); before, the generic Extension.
 */
#if PG_VERSION_NUM >= 170000
static inline uint32
gm_memory_wait_event(void)
{
	static uint32 event = 0;

	if (event == 0)
		event = WaitEventExtensionNew("GlibcMallocMemory");
	return event;
}
#else
#define gm_memory_wait_event() ((uint32) PG_WAIT_EXTENSION)
#endif

/*
 * A ModifyTable's inputs (the rows it writes): PG 14 gave it one, its outer
 * plan; before, one per result relation (mt_plans).
 */
#if PG_VERSION_NUM >= 140000
#define GM_MODIFY_NINPUTS(mt) 1
#define GM_MODIFY_INPUT(mt, i) outerPlanState(mt)
#else
#define GM_MODIFY_NINPUTS(mt) ((mt)->mt_nplans)
#define GM_MODIFY_INPUT(mt, i) ((mt)->mt_plans[i])
#endif

/*
 * A wait event set for the life of the process: from PostgreSQL 17 it
 * takes a resource owner (NULL: none tracks it), before a memory context.
 */
#if PG_VERSION_NUM >= 170000
#define GM_CREATE_SESSION_WAIT_SET(n) CreateWaitEventSet(NULL, (n))
#else
#define GM_CREATE_SESSION_WAIT_SET(n) CreateWaitEventSet(TopMemoryContext, (n))
#endif

#endif							/* GLIBC_MALLOC_COMPAT_H */
