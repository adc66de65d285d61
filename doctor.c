/*-------------------------------------------------------------------------
 *
 * doctor.c
 *		What each backend's memory is and what would free it
 *		(glibc_malloc_doctor), and the statements that bloat it
 *		(glibc_malloc.log_min_executor_memory).
 *
 * The doctor reads the published snapshots (shmem.c) and applies the rules
 * of doctor_rules[], each a kind of memory with the bytes a backend must
 * hold of it before it is worth a row, the reason and the action.  It
 * follows the view's visibility rules: a caller is told only about the
 * backends it may see in glibc_malloc_backends.
 *
 * The statement log measures the executor's memory at ExecutorEnd, before
 * the nodes are shut down, over the query's memory context tree: the
 * blocks allocated (MemoryContextMemAllocated, cheap: one read per
 * context), which the threshold and the view's peak_executor_bytes use, and,
 * for a statement that is logged, the bytes in use in those blocks, which is
 * what sorts report in EXPLAIN ANALYZE.  It logs in the style of
 * auto_explain.
 *
 * Calls allocator.c, settings.c and shmem.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/parallel.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/params.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "glibc_malloc.h"

#define MB ((int64) 1024 * 1024)

/* How one kind of memory is found in a snapshot and what frees it. */
typedef struct GmDoctorRule
{
	const char *kind;
	int64		min_bytes;		/* a backend holding less is not listed */
	int64		(*bytes) (const GmSnapshot *s);
	const char *reason;			/* after "backend PID (TYPE, role ROLE, preset P) " */
	const char *action;			/* %d: the pid */
	bool		names_statement;	/* the reason names the backend's largest
									 * statement (its queryid) */
} GmDoctorRule;

/* Free heap glibc keeps and that is still resident (see shmem.c). */
static int64
free_heap(const GmSnapshot *s)
{
	return gm_snapshot_free_heap(s);
}

/* PostgreSQL's caches (relcache, catcache, plan caches): only a reconnect returns them. */
static int64
caches(const GmSnapshot *s)
{
	return s->cache_bytes;
}

/* Malloc memory in use outside PostgreSQL's memory contexts: JIT, OpenSSL, libraries. */
static int64
outside_contexts(const GmSnapshot *s)
{
	return s->outside_context_bytes;
}

/*
 * A backend's private memory (VmData) when its soft RLIMIT_DATA
 * (max_backend_memory or the memory guard) leaves it less than a tenth of
 * the limit or 8 MB more, else 0.
 */
static int64
near_data_limit(const GmSnapshot *s)
{
	int64		soft;
	int64		hard;
	int64		vm;

	if (!s->guarded || !gm_data_limit(s->pid, &soft, &hard) || soft == GM_NO_LIMIT ||
		(vm = gm_proc_status_bytes(s->pid, "VmData:")) < 0)
		return 0;
	return soft - vm < Max(soft / 10, 8 * MB) ? vm : 0;
}

/*
 * The rules, one row per kind of memory.  The thresholds are set well above
 * what a fresh backend holds (under 0.1 MB free heap, about 0.7 MB of
 * caches, about 0.5 MB outside contexts on PostgreSQL 15 and glibc 2.36,
 * jit off) and below
 * what the trouble they point at costs: a greedy backend after a 32 MB sort
 * keeps 10 to 40 MB free; a session that touched a few thousand relations
 * holds tens of MB of caches; LLVM's JIT adds about 10 MB or more.
 */
/* Free heap worth a row: per backend, and the idle backends together. */
#define GM_DOCTOR_FREE_HEAP_MIN (4 * MB)

static const GmDoctorRule doctor_rules[] = {
	{"free_heap", GM_DOCTOR_FREE_HEAP_MIN, free_heap,
		"holds %s of resident free heap that glibc keeps for reuse",
	"SELECT glibc_malloc_trim_backend(%d) returns it (at once if the backend is idle, else after its transaction; needs the privileges of its role or of pg_signal_backend); glibc_malloc.preset = 'balanced' returns it once idle for glibc_malloc.idle_release_delay (1 s)", true},
	{"caches", 8 * MB, caches,
		"holds %s in PostgreSQL's caches (relcache, catcache, plan caches)",
	"a trim does not help: only a new connection returns the relcache and catcache (reconnect, or let the pooler recycle server connections, PgBouncer: server_lifetime); in backend %d's own session, DISCARD PLANS drops its cached plans"},
	{"outside_contexts", 16 * MB, outside_contexts,
		"holds %s of malloc memory in use outside PostgreSQL's memory contexts (LLVM's JIT, OpenSSL, other libraries)",
	"a trim does not help: only a new connection returns it; if backend %d ran JIT-compiled queries, jit = off or a higher jit_above_cost avoids it"},
	{"data_limit", 1, near_data_limit,
		"has %s of private memory mapped, close to its data size limit (less than a tenth of it, or 8 MB, left): its next large allocation fails with \"out of memory\"",
	"SELECT * FROM glibc_malloc_processes WHERE pid = %d shows whose limit it is: raise glibc_malloc.max_backend_memory for its role (ALTER ROLE ... SET) if it needs more; a guard limit means the server is near its memory limit (glibc_malloc_guard)", true},
};

/* Idle backends holding at least this much free heap are summed in one row. */
#define GM_DOCTOR_IDLE_MIN_FREE (1 * MB)

/* GUC glibc_malloc.log_min_executor_memory, in kB; -1 = off. */
static int	log_min_executor_memory = -1;

/*
 * glibc's heap and mmapped bytes at ExecutorStart, by QueryDesc, while the
 * statement log is on.  Executors nest (functions, triggers): a free slot is
 * taken first, else the next in turn.  A statement ended by an error never
 * reaches ExecutorEnd, so every slot is freed at transaction end.
 */
#define GM_STATEMENT_SLOTS 16
typedef struct GmStatementStart
{
	QueryDesc  *query;
	int64		heap_bytes;
	int64		mmapped_bytes;
} GmStatementStart;
static GmStatementStart statement_starts[GM_STATEMENT_SLOTS];
static int	next_statement_slot = 0;
static bool any_statement_start = false;	/* a slot may be taken */

/* "41 MB", "1.2 GB": bytes as the doctor's reasons print them. */
static char *
pretty_bytes(int64 bytes)
{
	if (bytes >= 10 * 1024 * MB)
		return psprintf(INT64_FORMAT " GB", bytes / (1024 * MB));
	if (bytes >= 1024 * MB)
		return psprintf("%.1f GB", (double) bytes / (1024 * MB));
	if (bytes >= MB)
		return psprintf(INT64_FORMAT " MB", (bytes + MB / 2) / MB);
	return psprintf(INT64_FORMAT " kB", (bytes + 512) / 1024);
}

/* A statement is named when its executor memory reached this much. */
#define GM_DOCTOR_STATEMENT_MIN (1 * MB)

/*
 * ", left by its largest statement ...": the queryid behind a backend's
 * peak since it last returned free heap, for glibc_malloc_statements and
 * pg_stat_statements; "" if none is known.
 */
static char *
largest_statement(const GmSnapshot *s)
{
	if (s->top_queryid == 0 || s->top_executor_bytes < GM_DOCTOR_STATEMENT_MIN)
		return "";
	return psprintf("; its largest statement since it last returned free heap allocated %s of executor memory: queryid " INT64_FORMAT " in glibc_malloc_statements and pg_stat_statements",
					pretty_bytes(s->top_executor_bytes), s->top_queryid);
}

/* "backend 4711 (client backend, role alice, preset greedy)". */
static char *
describe(const GmSnapshot *s)
{
	const char *role = OidIsValid(s->roleid) ? GetUserNameFromId(s->roleid, true) : NULL;

	return psprintf("backend %d (%s%s%s, preset %s)", s->pid, GetBackendTypeDesc(s->backend_type),
					role ? ", role " : "", role ? role : "", gm_preset_name(s->preset));
}

/* Add one row of advice. */
static void
doctor_row(ReturnSetInfo *rsinfo, const char *kind, int pid, int64 bytes,
		   const char *reason, const char *action)
{
	Datum		values[5];
	bool		nulls[5] = {0};

	values[0] = CStringGetTextDatum(kind);
	values[1] = Int32GetDatum(pid);
	nulls[1] = pid == 0;
	values[2] = Int64GetDatum(bytes);
	nulls[2] = bytes < 0;
	values[3] = CStringGetTextDatum(reason);
	values[4] = CStringGetTextDatum(action);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/* One backend's bytes of the kind a rule looks at, for sorting. */
typedef struct GmDoctorFinding
{
	int64		bytes;
	int			snap;			/* index into the snapshots */
	int			pid;
} GmDoctorFinding;

/* qsort: largest first, then by pid. */
static int
cmp_finding(const void *a, const void *b)
{
	const GmDoctorFinding *x = a;
	const GmDoctorFinding *y = b;

	if (x->bytes != y->bytes)
		return x->bytes > y->bytes ? -1 : 1;
	return (x->pid > y->pid) - (x->pid < y->pid);
}

PG_FUNCTION_INFO_V1(glibc_malloc_doctor);

/*
 * glibc_malloc_doctor(): advice as rows (kind, pid, bytes, reason, action):
 * first what holds for every backend (the environment, the allocator), then
 * the idle backends' free heap together, then one row per backend and kind
 * of memory above its rule's threshold, largest first within a kind.
 */
Datum
glibc_malloc_doctor(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	GmSnapshot *snaps;
	int			n;
	GmSource	frozen_by;
	GmPidState *states;
	int			nstates;
	int			idle_count = 0;
	int64		idle_free = 0;
	const char *track;

	gm_init_srf(fcinfo);

	/* Inherited from the postmaster: the same in every backend. */
	if (!gm_malloc_is_glibc)
		doctor_row(rsinfo, "allocator", 0, -1,
				   psprintf("malloc is provided by %s, not by glibc: glibc_malloc's presets and trims do nothing", gm_allocator),
				   "remove the LD_PRELOAD of the server, or tune that allocator by its own means");
	else if (!gm_dynamic_active(&frozen_by) && frozen_by == GM_SRC_ENVIRONMENT)
		doctor_row(rsinfo, "environment", 0, -1,
				   "GLIBC_TUNABLES or MALLOC_*_ in the server's environment freeze glibc's dynamic thresholds in every backend, for the life of the process",
				   "remove them from the server's environment and use glibc_malloc.preset, which can be set per role, database and session");
	if (!GM_WAIT_EVENTS_REPORTED())
		doctor_row(rsinfo, "track_activities", 0, -1,
				   "track_activities is off in this session, and maybe in others: before PostgreSQL 14 a backend with it off reports no wait events, so balanced and idle_release_delay never release its idle memory, and glibc_malloc_trim_idle() never finds it idle",
				   "set track_activities = on (the default)");

	/* Recording on without queryids: nothing is recorded. */
	track = GetConfigOption("glibc_malloc.track_statements", true, false);
	if (track != NULL && strcmp(track, "none") != 0 && !gm_query_ids_computed())
	{
		/* PostgreSQL 14 and later: with compute_query_id = off, only turning it on helps. */
		const char *compute = GetConfigOption("compute_query_id", true, false);

		doctor_row(rsinfo, "queryids", 0, -1,
				   "glibc_malloc.track_statements is on in this session, but statements get no queryids: none is recorded in glibc_malloc_statements, and none takes part in the memory guard's admission (glibc_malloc.memory_wait)",
				   compute != NULL && strcmp(compute, "off") == 0 ?
				   "set compute_query_id = on (a reload is enough): with it off, no queryid is computed" :
				   GM_QUERY_IDS_ACTION);
	}

	n = gm_shmem_snapshots(&snaps);

	nstates = gm_shmem_backend_states(&states);
	/* As glibc_malloc_trim_idle() would ask them: idle, signalable, the caller may trim them. */
	for (int i = 0; i < n; i++)
	{
		if (free_heap(&snaps[i]) >= GM_DOCTOR_IDLE_MIN_FREE && snaps[i].pid != MyProcPid &&
			snaps[i].signalable && gm_shmem_is_idle(&snaps[i], states, nstates) &&
			gm_shmem_may_trim(&snaps[i]))
		{
			idle_count++;
			idle_free += free_heap(&snaps[i]);
		}
	}
	if (idle_free >= GM_DOCTOR_FREE_HEAP_MIN)
		doctor_row(rsinfo, "idle_free_heap", 0, idle_free,
				   psprintf("%d idle backend%s hold%s %s of free heap", idle_count,
							idle_count == 1 ? "" : "s", idle_count == 1 ? "s" : "", pretty_bytes(idle_free)),
				   "SELECT glibc_malloc_trim_idle() returns it now (from the backends the caller may trim); glibc_malloc.preset = 'balanced' returns it once idle for glibc_malloc.idle_release_delay (1 s)");

	for (int r = 0; r < lengthof(doctor_rules); r++)
	{
		const GmDoctorRule *rule = &doctor_rules[r];
		GmDoctorFinding *found = palloc(sizeof(GmDoctorFinding) * Max(n, 1));
		int			nfound = 0;

		for (int i = 0; i < n; i++)
		{
			int64		b = rule->bytes(&snaps[i]);

			if (b >= rule->min_bytes)
				found[nfound++] = (GmDoctorFinding)
				{
					b, i, snaps[i].pid
				};
		}
		qsort(found, nfound, sizeof(GmDoctorFinding), cmp_finding);
		for (int f = 0; f < nfound; f++)
		{
			const GmSnapshot *s = &snaps[found[f].snap];

			doctor_row(rsinfo, rule->kind, s->pid, found[f].bytes,
					   psprintf("%s %s%s", describe(s), psprintf(rule->reason, pretty_bytes(found[f].bytes)),
								rule->names_statement ? largest_statement(s) : ""),
					   psprintf(rule->action, s->pid));
		}
	}
	return (Datum) 0;
}

/* Define glibc_malloc.log_min_executor_memory; from _PG_init. */
void
gm_doctor_define_gucs(void)
{
	/* SUSET, as auto_explain.log_min_duration: it writes to the server log. */
	DefineCustomIntVariable("glibc_malloc.log_min_executor_memory",
							"Logs each statement whose executor memory reached this much (-1: off).",
							"Measured at ExecutorEnd over the query's memory contexts; logged with the heap and mmapped bytes glibc gained across the statement, the preset and the query text.",
							&log_min_executor_memory,
							-1, -1, INT_MAX,
							PGC_SUSET,
							GUC_UNIT_KB,
							NULL, NULL, NULL);
}

/* ExecutorStart: while the statement log is on, note glibc's heap and mmapped bytes. */
void
gm_doctor_statement_start(QueryDesc *queryDesc)
{
	GmMallinfo	mi;
	GmStatementStart *slot = NULL;

	/* This QueryDesc's slot, if an old statement at this address left one. */
	for (int i = 0; any_statement_start && i < GM_STATEMENT_SLOTS && slot == NULL; i++)
		if (statement_starts[i].query == queryDesc)
			slot = &statement_starts[i];
	if (log_min_executor_memory < 0 || IsParallelWorker())
	{
		if (slot)
			slot->query = NULL;
		return;
	}
	/* Else a free one, else the next in turn. */
	for (int i = 0; i < GM_STATEMENT_SLOTS && slot == NULL; i++)
		if (statement_starts[i].query == NULL)
			slot = &statement_starts[i];
	if (slot == NULL)
	{
		slot = &statement_starts[next_statement_slot];
		next_statement_slot = (next_statement_slot + 1) % GM_STATEMENT_SLOTS;
	}
	gm_mallinfo(&mi);
	slot->query = queryDesc;
	slot->heap_bytes = mi.arena;
	slot->mmapped_bytes = mi.hblkhd;
	any_statement_start = true;
}

/* At top-level transaction end: statements ended by an error left slots taken. */
void
gm_doctor_transaction_end(void)
{
	if (!any_statement_start)
		return;
	for (int i = 0; i < GM_STATEMENT_SLOTS; i++)
		statement_starts[i].query = NULL;
	any_statement_start = false;
}

/*
 * ExecutorEnd, before the nodes are shut down: the statement's executor
 * memory, for the view's peak and, when it reached the threshold, the log.
 * Measured also when the caller asks (want); returns the bytes, or -1 when
 * not measured.  top_queryid is the running top-level statement's (0:
 * unknown), which the doctor names for the backend's largest statement.
 */
int64
gm_doctor_statement_end(QueryDesc *queryDesc, bool want, int64 top_queryid)
{
	int64		bytes;
	bool		started = false;
	int64		start_heap = 0;
	int64		start_mmapped = 0;
	GmMallinfo	mi;
	char	   *params = NULL;
	StringInfoData delta;

	/* Take this statement's start, freeing its slot whatever happens next. */
	for (int i = 0; any_statement_start && i < GM_STATEMENT_SLOTS && !started; i++)
		if (statement_starts[i].query == queryDesc)
		{
			started = true;
			start_heap = statement_starts[i].heap_bytes;
			start_mmapped = statement_starts[i].mmapped_bytes;
			statement_starts[i].query = NULL;
		}

	/*
	 * Not in parallel workers (the leader logs the statement, as auto_explain
	 * does), and not for EXPLAIN without ANALYZE, which runs nothing.
	 */
	if (queryDesc->estate == NULL || IsParallelWorker() ||
		(queryDesc->estate->es_top_eflags & EXEC_FLAG_EXPLAIN_ONLY) ||
		(log_min_executor_memory < 0 && !gm_shmem_publishing() && !want))
		return -1;
	bytes = (int64) MemoryContextMemAllocated(queryDesc->estate->es_query_cxt, true);
	gm_shmem_note_executor(bytes, top_queryid);
	if (log_min_executor_memory < 0 || bytes < (int64) log_min_executor_memory * 1024)
		return bytes;

	initStringInfo(&delta);
	gm_mallinfo(&mi);
	if (started)
		appendStringInfo(&delta, "heap %+lld kB, mmapped %+lld kB across the statement",
						 (long long) (((int64) mi.arena - start_heap) / 1024),
						 (long long) (((int64) mi.hblkhd - start_mmapped) / 1024));
	else
		appendStringInfoString(&delta, "heap and mmapped change unknown (the statement started before the log was on, or more than 16 statements were nested)");

	/* Bind parameters, as log_parameter_max_length says. */
	if (queryDesc->params && queryDesc->params->numParams > 0 &&
		queryDesc->params->paramFetch == NULL && log_parameter_max_length != 0)
		params = BuildParamLogString(queryDesc->params, NULL, log_parameter_max_length);

	appendStringInfo(&delta, "; heap now " INT64_FORMAT " kB, mmapped now " INT64_FORMAT " kB; preset %s. Query: %s",
					 (int64) mi.arena / 1024, (int64) mi.hblkhd / 1024,
					 gm_preset_name(gm_current_preset()),
					 queryDesc->sourceText ? queryDesc->sourceText : "");
	if (params)
		appendStringInfo(&delta, " Parameters: %s", params);

	ereport(LOG,
			(errmsg("glibc_malloc: statement used " INT64_FORMAT " kB of executor memory, " INT64_FORMAT " kB allocated",
					gm_context_used(queryDesc->estate->es_query_cxt) / 1024, bytes / 1024),
			 errdetail_internal("log_min_executor_memory is %d kB; glibc %s", log_min_executor_memory, delta.data),
			 errhidestmt(true)));
	return bytes;
}
