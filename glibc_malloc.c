/*-------------------------------------------------------------------------
 *
 * glibc_malloc.c
 *		Put glibc's malloc tunables under PostgreSQL's control.
 *
 * PostgreSQL backends get their memory blocks from glibc's malloc, whose
 * mmap and trim thresholds move on their own.  This module exposes them as
 * glibc_malloc.* GUCs and presets, so they can be set through
 * shared_preload_libraries (the postmaster applies them once and every child
 * inherits them), SET, ALTER ROLE/DATABASE SET and ALTER SYSTEM.
 *
 * Loaded but unused, it never calls mallopt; it costs a few comparisons per
 * query and per transaction end.  When preloaded (and stats_interval is not
 * -1), or under balanced, add per query a walk of the query's few memory
 * contexts at ExecutorEnd (peak_executor_bytes; whether the free heap was
 * reused); when preloaded, per transaction end a clock read, a snapshot at
 * most once per glibc_malloc.stats_interval, and the memory monitor's
 * process (monitor.c).
 *
 * This file is the only place that wires lifecycle events:
 *
 *	statement start		take over the transaction-end trim if the idle
 *						point has not run yet; presets follow work_mem; the
 *						statement log notes glibc's heap
 *	statement end		(ExecutorEnd) the executor's memory, for the view's
 *						peak, the statement log, and whether it reused the
 *						free heap (balanced releases what nobody reuses)
 *	transaction end		note what is pending: the preset's trim, the idle
 *						release, the release of memory not reused while
 *						busy, requests from other backends, the next
 *						snapshot (in background processes, which have no
 *						idle point: do it now)
 *	idle point			(idle.c, signal context) do what is due, after the
 *						transaction's memory is freed and its GUCs rolled back
 *	memory limits		glibc_malloc.max_backend_memory is applied at
 *						statement start (ExecutorStart, ProcessUtility)
 *						and transaction end; an "out of
 *						memory" is counted where the hooks catch it (or
 *						else where it is reported) and, under the
 *						module's limits, gets a HINT there (the hooks'
 *						PG_CATCH, else emit_log_hook)
 *	statements			(planner, executor and ProcessUtility hooks, which
 *						keep the nesting level as pg_stat_statements does,
 *						except that ExecutorStart's SPI is nested here)
 *						each statement's memory into glibc_malloc_statements
 *	settings change		(assign hooks, also at GUC rollback) re-plan: at once
 *						if that only sets the timer, else at the next
 *						statement start or transaction end
 *
 * IDENTIFICATION
 *		glibc_malloc.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/parallel.h"
#include "access/xact.h"
#include "commands/prepare.h"
#include "executor/executor.h"
#include "executor/instrument.h"
#include "nodes/nodeFuncs.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "optimizer/planner.h"
#include "parser/analyze.h"
#include "storage/ipc.h"
#include "tcop/pquery.h"
#include "tcop/tcopprot.h"
#include "tcop/utility.h"
#include "utils/guc.h"
#include "utils/portal.h"
#include "utils/timestamp.h"

#include "glibc_malloc.h"

GM_MODULE_MAGIC;

void		_PG_init(void);

static ExecutorStart_hook_type prev_ExecutorStart = NULL;
static ExecutorEnd_hook_type prev_ExecutorEnd = NULL;
static ExecutorRun_hook_type prev_ExecutorRun = NULL;
static ExecutorFinish_hook_type prev_ExecutorFinish = NULL;
static planner_hook_type prev_planner = NULL;
static emit_log_hook_type prev_emit_log_hook = NULL;
static ProcessUtility_hook_type prev_ProcessUtility = NULL;
static post_parse_analyze_hook_type prev_post_parse_analyze = NULL;

/*
 * The "out of memory" error being handled was counted: its catches at
 * outer nesting levels and its report leave it alone.  Cleared when its
 * (sub)transaction aborts, and at the next statement's start.
 */
static bool oom_counted = false;

/*
 * The preset's after-transaction trim waits this long for the idle point:
 * a backend that runs its next statement sooner does it there, in normal
 * context, and costs no signal (frugal under pgbench -S: one timer call per
 * 20 ms instead of one signal per transaction).
 */
#define GM_XACT_TRIM_DELAY_MS 20

/*
 * What the last transaction end left for later.  Written in normal context;
 * the idle point (signal context) reads and clears them, and runs only while
 * normal code is provably waiting for the client.
 */
static volatile sig_atomic_t pend_xact_trim = false;	/* the preset's trim */
static volatile sig_atomic_t pend_release = false;	/* the idle release */
static volatile sig_atomic_t pend_publish = false;	/* a skipped publish */
static volatile sig_atomic_t pend_unused = false;	/* release of unused memory */
static int64 xact_end_at = 0;	/* gm_monotonic_usec(); 0: not read yet */

/*
 * Reuse, for presets that also release busy backends' memory (see
 * gm_reuse_bytes): when the last statement that used at least reuse_bytes
 * of executor memory ended, and whether a release has run since.
 */
static int64 reuse_end_at = 0;	/* gm_monotonic_usec() */
static volatile sig_atomic_t released_since_reuse = true;

/*
 * The statement start of the last transaction end.  Transactions that
 * PostgreSQL runs by itself at the idle wait (sinval catch-up, LISTEN
 * notifications) keep the last client statement's: they must not restart
 * the idle release's clock, or a backend on a busy cluster never gets there.
 */
static TimestampTz last_statement_start = 0;
static int64 last_statement_mono = 0;	/* the same on the monotonic clock */

/*
 * Statements running in one another (functions, triggers, utility
 * statements): 0 at the top level, as pg_stat_statements counts it, except
 * that what runs while the executor starts, and while EXECUTE evaluates
 * its parameters, is nested here.
 */
static int	nesting = 0;

/*
 * A top-level EXECUTE with parameters evaluates them (functions, and the
 * statements they run) before its prepared statement starts: meanwhile
 * the nesting level is 1, and execute_source is a copy of the prepared
 * statement's text, to know its portal when it starts (an invisible one,
 * other than the EXECUTE's own).
 */
static bool params_nested = false;
static char *execute_source = NULL;
static Portal execute_portal = NULL;	/* the EXECUTE's own (only compared) */

/* An EXECUTE's parameters are evaluated, or it failed: back to the top level. */
static void
params_end(void)
{
	params_nested = false;
	execute_source = NULL;
	nesting--;
}

/* An EXECUTE's prepared statement (its text: text) is planned or starts: back to the top level. */
static void
params_evaluated(const char *text)
{
	if (nesting == 1 && text != NULL && strcmp(text, execute_source) == 0)
		params_end();
}

/*
 * The executor of the top-level statement that asked for memory
 * (memory_wait): its reservation ends when that executor ends, also inside
 * another statement (a protocol portal closed by the SQL command CLOSE).
 * Only compared, never followed.
 */
static QueryDesc *reserved_desc = NULL;

/*
 * The top-level planning asked for a start share (plan_tried), and the one
 * held was taken by it, for its executor (planned_share).
 */
static bool plan_tried = false;
static bool planned_share = false;

/*
 * A top-level utility statement that went through the admission runs: its
 * reservation or grant lasts until it ends, through the commits inside it
 * (VACUUM, CREATE INDEX CONCURRENTLY, a procedure's COMMIT).
 */
static bool utility_reserved = false;

/*
 * The top-level executor (or a top-level utility statement's) whose plan
 * nodes check its growth while it runs (exec_wrap) and its EState (only
 * compared, never followed), its check's state, and the node calls since
 * the last check.
 */
static QueryDesc *exec_desc = NULL;
static EState *exec_estate = NULL;
static GmExecCheck exec_state = GM_EXEC_CHECK_INIT;
static int	exec_calls = 0;

/* The nesting level at which that executor runs (1: a top-level query's). */
static int	exec_level = 1;

/*
 * A top-level utility statement whose work is one executor
 * (utility_runs_one_executor) runs: the nesting level its executor starts
 * at, checked as a query's (-1: none), and its text, which that executor's
 * QueryDesc points to (not a function's or an event trigger's query); and
 * whether that executor's check may have taken more from the budget,
 * which the utility statement's end ends.
 */
static int	utility_exec_nesting = -1;
static const char *utility_exec_source = NULL;
static bool utility_exec_took = false;

/* The executor's own first call of a node (static in execProcnode.c), learnt once. */
static ExecProcNodeMtd exec_first = NULL;

/*
 * The top-level executor whose mapped peak is measured (NULL: none), and
 * its process's VmSize and VmPeak at its start.
 */
static QueryDesc *mapped_desc = NULL;
static int64 mapped_size0 = -1;
static int64 mapped_peak0 = -1;


/* No statement has started since the last top-level transaction end. */
static bool first_statement = true;

/* A setting changed where plan() could not run (settings_changed). */
static bool replan = false;

/*
 * ms until the earliest pending work is due (0: now), or -1; plain reads
 * only.  now and every due time are gm_monotonic_usec() readings.
 */
static int64
next_due(int64 now)
{
	int64		best = -1;
	GmSource	source;
	int			delay = gm_idle_delay(&source);

	if (gm_shmem_has_requests())
		best = 0;
	else if ((pend_xact_trim && gm_xact_trim_wanted()) ||
			 (pend_unused && gm_reuse_bytes() > 0))
		best = GM_XACT_TRIM_DELAY_MS;
	if (pend_release && delay > 0 && xact_end_at != 0)
	{
		int64		due = xact_end_at + (int64) delay * 1000;
		int64		ms = due <= now ? 0 : (due - now + 999) / 1000;

		if (best < 0 || ms < best)
			best = ms;
	}
	if (pend_publish)
	{
		int64		ms = gm_shmem_publish_due(now);

		if (ms >= 0 && (best < 0 || ms < best))
			best = ms;
	}
	return best;
}

/* Publish the pending snapshot if stats_interval says it is due at 'at'. */
static void
publish_if_due(int64 at)
{
	int64		ms = gm_shmem_publish_due(at);

	if (ms > 0)
		return;
	if (ms == 0)
		gm_shmem_publish(gm_monotonic_usec());
	pend_publish = false;
}

/*
 * Release the free heap nobody reused for idle_release_delay, if the
 * preset still says so; normal context or the idle point.
 */
static void
release_unused(int64 now)
{
	GmSource	source;

	pend_unused = false;
	/*
	 * With the settings in force now: after the transaction's GUC rollback
	 * at the statement start or the idle point (in processes without an
	 * idle point, plan() runs it from the transaction-end callback).
	 */
	if (gm_reuse_bytes() <= 0 || released_since_reuse ||
		last_statement_mono - reuse_end_at < (int64) gm_idle_delay(&source) * 1000)
		return;
	released_since_reuse = true;
	gm_release_counted(GM_RELEASE_IDLE);
	gm_shmem_publish(now);
	pend_publish = false;
}

/*
 * The idle point (signal context, see idle.c): requests from other
 * backends, the preset's transaction-end trim, the idle release once its
 * delay has passed, and a publish skipped by stats_interval once it is due.
 */
static int64
idle_point(int64 now)
{
	GmSource	source;
	int			delay = gm_idle_delay(&source);

	gm_shmem_serve_requests(true);
	if (pend_xact_trim)
	{
		pend_xact_trim = false;
		gm_xact_trim(false);
	}
	if (pend_unused)
		release_unused(now);
	if (pend_release && (delay <= 0 || xact_end_at == 0))
		pend_release = false;
	else if (pend_release && now >= xact_end_at + (int64) delay * 1000)
	{
		pend_release = false;
		released_since_reuse = true;
		gm_release_counted(GM_RELEASE_IDLE);
		gm_shmem_publish(now);
		pend_publish = false;
	}
	if (pend_publish)
		publish_if_due(now);
	return next_due(now);
}

/*
 * Normal context, after a transaction end or a settings change: schedule
 * the idle point for what is pending.  Without an idle point (background
 * processes, single-user mode), the preset's trim runs right away.
 */
static void
plan(void)
{
	GmSource	source;
	int64		now;
	int64		ms;

	if (!(pend_xact_trim && gm_xact_trim_wanted()) && !pend_publish &&
		!(pend_unused && gm_reuse_bytes() > 0) &&
		!gm_shmem_has_requests() && (!pend_release || gm_idle_delay(&source) <= 0))
		return;
	if (!gm_idle_enabled())
	{
		if (pend_xact_trim)
		{
			pend_xact_trim = false;
			gm_xact_trim(false);
		}
		if (pend_unused)
			release_unused(gm_monotonic_usec());
		return;
	}
	now = gm_monotonic_usec();
	if (xact_end_at == 0)
		xact_end_at = now;
	ms = next_due(now);

	/*
	 * Overdue work (a publish, a request) that the last transaction could not
	 * take, because the backend runs transactions back to back without
	 * reaching the idle wait: at most one timer call per 20 ms, not one per
	 * transaction.
	 */
	if (ms == 0)
		ms = GM_XACT_TRIM_DELAY_MS;
	if (ms >= 0)
		gm_idle_schedule(now, ms);
}

/*
 * Assign hooks (settings.c), also at GUC rollback in AbortTransaction and
 * in parallel workers' RestoreGUCState: re-plan at once only when that is a
 * timer call; the rest (setting up the timer and the handler, a trim in a
 * process without an idle point) waits for the next statement start or
 * transaction end.
 */
static void
settings_changed(void)
{
	if (gm_idle_ready())
		plan();
	else
		replan = true;
}

/*
 * Before each query, in normal context: requests from other backends and
 * the preset's trim, if the idle point has not run since the last
 * transaction; then follow work_mem.
 */
static void
statement_start(void)
{
	if (replan)
	{
		replan = false;
		plan();
	}
	/*
	 * Requests from other backends wait until the transaction they arrived
	 * in is over: served here only by the first statement after a
	 * transaction end (the next transaction has only just begun, a block
	 * too), never by a later statement of a transaction or of a function
	 * (SPI); a procedure that commits begins a new transaction, whose first
	 * statement may.
	 */
	if (first_statement)
	{
		first_statement = false;
		if (gm_shmem_has_requests())
			gm_shmem_serve_requests(false);
	}
	if (pend_xact_trim && gm_xact_trim(true))
		pend_xact_trim = false;
	if (pend_unused)
		release_unused(gm_monotonic_usec());
	/* One vDSO clock read, only while a publish is pending. */
	if (pend_publish)
		publish_if_due(gm_monotonic_usec());
	gm_statement_start();
	gm_guard_statement_start();
}

/*
 * Count the "out of memory" error being handled, once, where it is caught
 * (the hooks' PG_CATCH) or else reported (emit_log_hook): whatever
 * log_min_messages hides from the log.  Allocates nothing.
 */
static void
count_oom(void)
{
	if (oom_counted)
		return;
	oom_counted = true;
	gm_statements_note_oom(gm_guard_count_oom() == GM_OOM_LIMIT);
	/* The server's count: a parallel worker's is counted by its leader. */
	if (!IsParallelWorker())
		gm_shmem_count_oom_error();
}

/*
 * In a hook's PG_CATCH: count the error if it is an "out of memory"; then,
 * unless the caller lifts a grant's limit first (hint false: it calls
 * caught_error_hint after), give it its HINT.
 */
static void
caught_error_counted(bool hint)
{
	if (geterrcode() != ERRCODE_OUT_OF_MEMORY)
		return;
	count_oom();
	if (hint)
		gm_guard_caught_oom_hint();
}

/* In a hook's PG_CATCH: count an "out of memory" and give it its HINT. */
static void
caught_error(void)
{
	caught_error_counted(true);
}

/* The HINT of an "out of memory" counted by caught_error_counted(false). */
static void
caught_error_hint(void)
{
	if (geterrcode() == ERRCODE_OUT_OF_MEMORY)
		gm_guard_caught_oom_hint();
}

/*
 * A top-level statement starts: the last one's reservation ends; while the
 * memory guard acts on a limit, a query with a recorded executor peak is
 * admitted with a reservation where it fits, else waits until it does
 * (glibc_malloc.memory_wait; with 0 it runs at once, unreserved), its time
 * waited recorded.
 */
static void
wait_for_memory(QueryDesc *queryDesc, int eflags)
{
	uint64		queryid;
	int64		exec_peak;
	int64		mapped_peak;
	int64		waited;
	bool		tracked;
	bool		planned = planned_share && gm_guard_holds_start_share();
	/* (its planning found none left; one the monitor ended is asked again) */
	bool		tried = plan_tried && !planned_share;

	planned_share = plan_tried = false;
	mapped_desc = NULL;
	/* Only a client's portal: not deferred triggers or login event triggers. */
	if (ActivePortal == NULL || (eflags & EXEC_FLAG_EXPLAIN_ONLY) || !gm_guard_may_wait())
	{
		gm_guard_wait_end();
		return;
	}
	/* The start share its planning took goes on with it, if it has no record. */
	if (!planned)
		gm_guard_wait_end();
	queryid = queryDesc->plannedstmt->queryId;
	exec_peak = gm_statements_recorded_peak(queryid, &mapped_peak, &tracked);
	/* Not a parallel plan: its shared memory would count as mapped. */
	if (tracked && !queryDesc->plannedstmt->parallelModeNeeded &&
		gm_guard_measures_mapped(exec_peak, mapped_peak))
	{
		gm_proc_vmsize_peak(&mapped_size0, &mapped_peak0);
		if (mapped_size0 >= 0 && mapped_peak0 >= 0)
			mapped_desc = queryDesc;
	}
	/* Its need unknown: a start share while the guard is engaged. */
	if (exec_peak < 0)
	{
		/* (none left when its planning asked: not asked again) */
		if (planned || (!tried && gm_guard_take_start_share()))
			reserved_desc = queryDesc;
		return;
	}
	if (planned)
		gm_guard_wait_end();
	if (exec_peak == 0)
		return;
	reserved_desc = queryDesc;
	if ((waited = gm_guard_wait_for_memory(exec_peak, mapped_peak, true)) > 0)
		gm_statements_note_wait(queryid, waited);
}

/*
 * The measured top-level executor ends, having used exec_bytes in its
 * memory contexts: what its process mapped at most over its start, if it
 * set a new VmPeak (else unknown: an earlier statement of the backend
 * mapped more), and if that is at least exec_bytes (else the run reused
 * free heap the backend had, and the measure says less than the run
 * needs); -1 = not measured.  VmPeak counts every mapping, not only what
 * RLIMIT_DATA counts: an estimate from above.
 */
static int64
mapped_end(QueryDesc *queryDesc, int64 exec_bytes)
{
	int64		peak;
	int64		mapped;

	if (queryDesc != mapped_desc || nesting != 0)
		return -1;
	mapped_desc = NULL;
	peak = gm_proc_status_bytes(0, "VmPeak:");
	if (peak <= mapped_peak0)
		return -1;
	mapped = peak - mapped_size0;
	return mapped >= exec_bytes ? mapped : -1;
}

/*
 * Every GM_EXEC_CHECK_CALLS calls of the wrapped inputs: the guard's
 * check of the running statement, only from its own run at its level (not
 * a FETCH of its portal inside another statement, not another portal's
 * nodes); what it takes there ends with its executor, or for a utility
 * statement's executor with the statement.  Out of line: the wrappers
 * stay small.
 */
static pg_noinline void
exec_check(PlanState *node)
{
	exec_calls = 0;
	if (exec_desc == NULL || nesting != exec_level || node->state != exec_estate ||
		!gm_guard_may_check())
		return;
	/* A utility statement's executor: ended with the statement (even if its wait fails). */
	if (exec_level != 1)
		utility_exec_took = true;
	if (gm_guard_executor_check(&exec_state) && exec_level == 1)
		reserved_desc = exec_desc;
}

/* A wrapped input's call, with the count. */
static TupleTableSlot *
exec_node_plain(PlanState *node)
{
	if (unlikely(++exec_calls >= GM_EXEC_CHECK_CALLS))
		exec_check(node);
	return node->ExecProcNodeReal(node);
}

/*
 * A wrapped input's call with instrumentation (as ExecProcNodeInstr; a
 * check's pause counts in the time of the node that reads it).
 */
static TupleTableSlot *
exec_node_instr(PlanState *node)
{
	TupleTableSlot *slot;

	if (unlikely(++exec_calls >= GM_EXEC_CHECK_CALLS))
		exec_check(node);
	InstrStartNode(node->instrument);
	slot = node->ExecProcNodeReal(node);
	InstrStopNode(node->instrument, TupIsNull(slot) ? 0.0 : 1.0);
	return slot;
}

/* A wrapped input's first call: its stack check and its wrapper, as ExecProcNodeFirst's. */
static TupleTableSlot *
exec_node_first(PlanState *node)
{
	check_stack_depth();
	node->ExecProcNode = node->instrument ? exec_node_instr : exec_node_plain;
	return node->ExecProcNode(node);
}

/*
 * The plan nodes that keep what they read in memory (a sort, a hash table,
 * an aggregate's states, a window's partition, a tuplestore, a cache):
 * the calls of their inputs are where a statement grows, and where it is
 * checked.  Also read into memory, outside these: a CTE's rows (its CTE
 * scans' tuplestore) and a hashed subplan's (its hash table).
 */
static const NodeTag exec_keepers[] = {
	T_SortState, T_IncrementalSortState, T_HashState, T_AggState,
	T_WindowAggState, T_MaterialState, T_SetOpState, T_RecursiveUnionState,
#if PG_VERSION_NUM >= 140000
	T_MemoizeState,
#endif
};

/*
 * Wrap one input node if it is still set to the executor's own first call.
 * A parallel hash join sets its own function again as its Gather starts
 * the workers (ExecHashJoinInitializeDSM; in a worker, as it attaches):
 * unwrapped from then on, so the calls of its outer input are counted too.
 */
static void
exec_wrap_input(PlanState *input)
{
	if (input == NULL)
		return;
	if (input->ExecProcNode == exec_first)
		input->ExecProcNode = exec_node_first;
	if (IsA(input, HashJoinState) && input->plan->parallel_aware)
		exec_wrap_input(outerPlanState(input));
}

/*
 * planstate_tree_walker: wrap the inputs of the nodes that keep what they
 * read (exec_keepers), a CTE scan's CTE, a hashed subplan and the rows a
 * ModifyTable writes (each may queue an AFTER trigger's event or a
 * transition table's row, kept until the statement's end); another
 * module's wrapper stays, unchecked.  A query without such nodes (an index
 * lookup) gets none.
 */
static bool
exec_wrap_walker(PlanState *node, void *context)
{
	ListCell   *lc;

	for (int i = 0; i < (int) lengthof(exec_keepers); i++)
		if (nodeTag(node) == exec_keepers[i])
		{
			exec_wrap_input(outerPlanState(node));
			exec_wrap_input(innerPlanState(node));
			break;
		}
	if (IsA(node, ModifyTableState))
	{
		ModifyTableState *mt = (ModifyTableState *) node;

		for (int i = 0; i < GM_MODIFY_NINPUTS(mt); i++)
			exec_wrap_input(GM_MODIFY_INPUT(mt, i));
	}
	if (IsA(node, CteScanState))
		exec_wrap_input(((CteScanState *) node)->cteplanstate);
	foreach(lc, node->subPlan)
	{
		SubPlanState *sps = (SubPlanState *) lfirst(lc);

		if (sps->subplan->useHashTable)
			exec_wrap_input(sps->planstate);
	}
	return planstate_tree_walker(node, exec_wrap_walker, context);
}

/*
 * A client's top-level executor, a top-level utility statement's own
 * (utility_runs_one_executor) or a parallel worker's, starts while the
 * memory guard acts on a limit: the inputs of its plan nodes that keep
 * what they read check its growth every GM_EXEC_CHECK_CALLS calls
 * (gm_guard_executor_check, which does something only while the guard is
 * engaged: a statement of a burst that began calm is checked once it
 * engages).  A node that sets its own
 * function later (ExecSetExecProcNode) is unwrapped then.  Flag tests
 * otherwise.
 */
static void
exec_wrap(QueryDesc *queryDesc, int eflags)
{
	if ((ActivePortal == NULL && !IsParallelWorker()) ||
		(eflags & EXEC_FLAG_EXPLAIN_ONLY) ||
		queryDesc->planstate == NULL || !gm_guard_may_check())
		return;
	if (exec_first == NULL)
	{
		/* As the executor sets it for a node. */
		PlanState	probe;

		memset(&probe, 0, sizeof(probe));
		ExecSetExecProcNode(&probe, exec_node_plain);
		exec_first = probe.ExecProcNode;
	}
	exec_desc = queryDesc;
	exec_estate = queryDesc->estate;
	exec_level = nesting + 1;
	exec_state = (GmExecCheck) GM_EXEC_CHECK_INIT;
	exec_calls = 0;
	(void) exec_wrap_walker(queryDesc->planstate, NULL);
}

/* Admit a top-level query, let presets follow work_mem, chain; wrap its plan or a utility's. */
static void
gm_ExecutorStart(QueryDesc *queryDesc, int eflags)
{
	oom_counted = false;
	/* An EXECUTE's parameters are evaluated: its prepared statement starts. */
	if (params_nested && ActivePortal != NULL && ActivePortal != execute_portal && !ActivePortal->visible)
		params_evaluated(ActivePortal->sourceText);
	/* Admitted after waiting, it counts as working from the monitor's next look. */
	if (nesting == 0)
	{
		wait_for_memory(queryDesc, eflags);
		gm_guard_top_statement_start();
	}
	statement_start();
	gm_doctor_statement_start(queryDesc);
	gm_statements_executor_start(queryDesc, eflags, nesting);

	/*
	 * What runs while the executor starts (a function in initial partition
	 * pruning, through SPI) is nested: it neither ends this statement's
	 * reservation nor waits for memory nor counts as top-level.
	 */
	nesting++;
	PG_TRY();
	{
		if (prev_ExecutorStart)
			prev_ExecutorStart(queryDesc, eflags);
		else
			standard_ExecutorStart(queryDesc, eflags);
	}
	PG_CATCH();
	{
		nesting--;
		caught_error();
		PG_RE_THROW();
	}
	PG_END_TRY();
	nesting--;
	if (nesting == 0)
		exec_wrap(queryDesc, eflags);
	else if (nesting == utility_exec_nesting && queryDesc->sourceText == utility_exec_source &&
			 queryDesc->dest->mydest != DestSPI)
	{
		/* The utility statement's own executor, once. */
		utility_exec_nesting = -1;
		exec_wrap(queryDesc, eflags);
	}
}

/* Chain ExecutorEnd: the executor's shutdown. */
static void
chain_ExecutorEnd(QueryDesc *queryDesc)
{
	if (prev_ExecutorEnd)
		prev_ExecutorEnd(queryDesc);
	else
		standard_ExecutorEnd(queryDesc);
}

/*
 * An executor ends: the reservation for memory ends with the executor that
 * took it, whatever ends it (its own statement, another's CLOSE, a Close
 * message in a pipeline where another portal holds the reservation now),
 * before its shutdown, which may fail.
 */
static void
reservation_executor_end(QueryDesc *queryDesc)
{
	if (queryDesc == exec_desc)
		exec_desc = NULL;
	if (queryDesc == reserved_desc)
	{
		reserved_desc = NULL;
		gm_guard_wait_end();
	}
}

/* An executor ended: the top-level statement's end, for the guard. */
static void
executor_ended(void)
{
	if (nesting == 0)
		gm_guard_top_statement_end(true);
}

/*
 * Measure the executor's memory before the nodes are shut down (for the
 * view, the statement log, and whether the free heap was reused), then
 * chain, then store the recorded statement with what the shutdown gave
 * back (also when the shutdown fails, without it).  A clock read only
 * after a statement that reused it.
 */
static void
gm_ExecutorEnd(QueryDesc *queryDesc)
{
	int64		reuse = gm_reuse_bytes();
	int64		bytes = gm_doctor_statement_end(queryDesc, reuse > 0, gm_statements_top_queryid());
	GmStmtEnd	end;

	gm_statements_executor_end(queryDesc, &end);
	if (end.pending)
		end.mapped_bytes = mapped_end(queryDesc, end.exec_bytes);
	reservation_executor_end(queryDesc);

	if (reuse > 0 && bytes >= reuse)
	{
		reuse_end_at = gm_monotonic_usec();
		released_since_reuse = false;
	}
	if (!end.pending)
	{
		chain_ExecutorEnd(queryDesc);
		executor_ended();
		return;
	}
	PG_TRY();
	{
		chain_ExecutorEnd(queryDesc);
	}
	PG_CATCH();
	{
		gm_statements_executor_ended(&end, true);
		PG_RE_THROW();
	}
	PG_END_TRY();
	gm_statements_executor_ended(&end, false);
	executor_ended();
}

/* Count the nesting level around the executor's run, a grant's limit in force meanwhile; chain. */
static void
gm_ExecutorRun(GM_ER_ARGS)
{
	volatile bool granted = nesting == 0 && queryDesc == reserved_desc;

	/* (a portal resumed by a client's Execute starts nothing else) */
	if (nesting == 0)
		gm_guard_top_statement_runs();
	/* A grant's limit is in force while its executor runs. */
	if (granted)
		gm_guard_grant_run(true);
	nesting++;
	PG_TRY();
	{
		if (prev_ExecutorRun)
			prev_ExecutorRun(GM_ER_PASS);
		else
			standard_ExecutorRun(GM_ER_PASS);
	}
	PG_CATCH();
	{
		nesting--;
		/* Counted with the grant's limit in force: the guard's error. */
		caught_error_counted(false);
		/* The HINT allocates: once the grant's limit is lifted. */
		if (granted)
			gm_guard_grant_run(false);
		caught_error_hint();
		PG_RE_THROW();
	}
	PG_END_TRY();
	nesting--;
	if (granted)
		gm_guard_grant_run(false);

	/*
	 * A top-level portal that returned all the rows asked for may be
	 * suspended: its client fetches the rest later, inside it.
	 */
	if (nesting == 0)
		gm_guard_reads_client(count > 0 && queryDesc->estate != NULL &&
							  queryDesc->estate->es_processed >= count);
}

/* The same around ExecutorFinish (AFTER triggers), the grant's limit with it. */
static void
gm_ExecutorFinish(QueryDesc *queryDesc)
{
	volatile bool granted = nesting == 0 && queryDesc == reserved_desc;

	if (granted)
		gm_guard_grant_run(true);
	nesting++;
	PG_TRY();
	{
		if (prev_ExecutorFinish)
			prev_ExecutorFinish(queryDesc);
		else
			standard_ExecutorFinish(queryDesc);
	}
	PG_CATCH();
	{
		nesting--;
		/* Counted with the grant's limit in force: the guard's error. */
		caught_error_counted(false);
		/* The HINT allocates: once the grant's limit is lifted. */
		if (granted)
			gm_guard_grant_run(false);
		caught_error_hint();
		PG_RE_THROW();
	}
	PG_END_TRY();
	nesting--;
	if (granted)
		gm_guard_grant_run(false);
}

/*
 * A top-level query's planning, while the guard is engaged: one without a
 * record takes its start share now (constant folding may allocate much),
 * and its executor keeps it (wait_for_memory).  A flag test when not
 * engaged.
 */
static void
plan_start_share(Query *parse, const char *query_string)
{
	int64		mapped_peak;
	bool		tracked;

	planned_share = plan_tried = false;

	/*
	 * A client's statement only: a simple query and a Bind are planned
	 * before their portal starts, from the text the backend runs
	 * (debug_query_string); not the SPI queries of deferred triggers at a
	 * commit.
	 */
	if (!gm_shmem_guard_engaged() || !gm_guard_may_wait() ||
		(ActivePortal == NULL && (query_string == NULL || query_string != debug_query_string)) ||
		gm_statements_recorded_peak(parse->queryId, &mapped_peak, &tracked) >= 0)
		return;
	plan_tried = true;
	/* (a suspended portal's reservation ended: its end must not end this) */
	if ((planned_share = gm_guard_take_start_share()))
		reserved_desc = NULL;
}

/*
 * Planning: measured in a memory context of its own when the statement is
 * recorded (glibc_malloc_statements); the nesting level counts it too.
 */
static PlannedStmt *
gm_planner(Query *parse, const char *query_string, int cursorOptions,
		   ParamListInfo boundParams)
{
	MemoryContext planner_cxt = NULL;
	MemoryContext old;
	PlannedStmt *result;

	/* An EXECUTE's parameters are evaluated: its prepared statement is planned. */
	if (params_nested)
		params_evaluated(query_string);
	/* Planning is the statement's work too: it may allocate much. */
	if (nesting == 0)
	{
		gm_guard_top_statement_start();
		plan_start_share(parse, query_string);
	}
	old = gm_statements_plan_start(parse, nesting, &planner_cxt);
	nesting++;
	PG_TRY();
	{
		if (prev_planner)
			result = prev_planner(parse, query_string, cursorOptions, boundParams);
		else
			result = standard_planner(parse, query_string, cursorOptions, boundParams);
	}
	PG_CATCH();
	{
		nesting--;
		/* Never leave the planning's context current, not even on error. */
		if (old != NULL)
			MemoryContextSwitchTo(old);
		caught_error();
		PG_RE_THROW();
	}
	PG_END_TRY();
	nesting--;
	if (old != NULL)
	{
		MemoryContextSwitchTo(old);
		gm_statements_plan_end(planner_cxt, parse, nesting);
	}
	return result;
}

/*
 * At every top-level transaction end.  The callbacks run before GUC
 * rollback, lock release and the freeing of the transaction's memory, so
 * the work itself is left to the idle point or the next statement start;
 * here only what is pending is noted, requests are served and the snapshot
 * published when due.  Nothing while exiting (a failed login).
 */
static void
gm_xact_callback(XactEvent event, void *arg)
{
	bool		client_statement;
	int64		mono;

	/*
	 * No statement runs any more: its reservation for memory ends; not a
	 * utility statement's at a commit or a procedure's rollback inside it.
	 */
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
	{
		mapped_desc = NULL;
		exec_desc = NULL;
		planned_share = plan_tried = false;
		/* (its own error ends it in gm_ProcessUtility, before the abort) */
		if (!utility_reserved)
			gm_guard_wait_end();
		gm_guard_top_statement_end(nesting == 0);
	}
	/* The error is handled; a worker's never raised again is forgotten. */
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
	{
		oom_counted = false;
		(void) gm_shmem_take_worker_limit_oom();
	}
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			if (proc_exit_inprogress)
				break;

			/*
			 * Whether they run is decided with the settings after rollback.
			 * A transaction without a client statement of its own (sinval
			 * catch-up, notifications at the idle wait) leaves them alone.
			 */
			first_statement = true;
			mono = gm_monotonic_usec();
			client_statement = GetCurrentStatementStartTimestamp() != last_statement_start;
			if (client_statement)
			{
				GmSource	source;
				TimestampTz wall = GetCurrentTimestamp();

				/*
				 * The statement's start on the monotonic clock: its age by
				 * the wall clock, taken from now (no older than now if the
				 * wall clock was stepped back meanwhile).
				 */
				last_statement_start = GetCurrentStatementStartTimestamp();
				last_statement_mono = mono - Max(wall - last_statement_start, 0);
				pend_release = true;
				pend_xact_trim = true;
				xact_end_at = 0;	/* plan() reads the clock if needed */

				/*
				 * Busy, but nothing reused the free heap for the delay: the
				 * statement started that long after the last one that did.
				 */
				if (!released_since_reuse && reuse_end_at != 0 &&
					last_statement_mono - reuse_end_at >=
					(int64) gm_idle_delay(&source) * 1000 && gm_reuse_bytes() > 0)
					pend_unused = true;
			}
			if (gm_shmem_active())
				pend_publish = gm_shmem_transaction_end(mono, client_statement);
			gm_doctor_transaction_end();
			gm_statements_transaction_end();
			gm_guard_apply();
			replan = false;
			plan();
			break;
		default:
			break;
	}
}

/* A subtransaction aborted: its statements will not reach ExecutorEnd. */
static void
gm_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					SubTransactionId parentSubid, void *arg)
{
	/*
	 * The error being handled stays counted: a handler may raise it again,
	 * to be caught once more outside (the next statement starts afresh).
	 */
	if (event == SUBXACT_EVENT_ABORT_SUB)
		gm_statements_subxact_abort(mySubid);

	/*
	 * A client's statement failed inside its savepoint (ON_ERROR_ROLLBACK,
	 * a driver's autosave): no ExecutorEnd, no transaction abort, so its
	 * reservation for memory ends here.  Not a PL/pgSQL block's (nested).
	 */
	if (event == SUBXACT_EVENT_ABORT_SUB && nesting == 0)
	{
		mapped_desc = NULL;
		exec_desc = NULL;
		planned_share = plan_tried = false;
		gm_guard_wait_end();
		gm_guard_top_statement_end(true);
	}
}

/*
 * Parse analysis: a utility statement's queryid for glibc_malloc_statements,
 * which pg_stat_statements hides from the ProcessUtility hooks after it.
 */
static void
gm_post_parse_analyze(GM_PPA_ARGS)
{
	if (prev_post_parse_analyze)
		prev_post_parse_analyze(GM_PPA_PASS);
	gm_statements_analyzed(pstate, query, nesting);
}

/*
 * The utility statements that take part in the admission: those that do
 * large work of their own (sorts, scans, rewrites, the code they run).
 * Never transaction control, SET, SHOW, LISTEN, NOTIFY, DISCARD, CLOSE or
 * FETCH, which must not wait, or run too often to measure; nor COPY FROM
 * STDIN, which its client could keep open with a grant.
 */
static const NodeTag admitted_utility[] = {
	T_IndexStmt,				/* CREATE INDEX */
	T_ReindexStmt,
	T_VacuumStmt,				/* VACUUM, ANALYZE */
	T_ClusterStmt,
	T_CreateTableAsStmt,		/* CREATE TABLE AS, SELECT INTO, CREATE
								 * MATERIALIZED VIEW */
	T_RefreshMatViewStmt,
	T_CopyStmt,
	T_ExplainStmt,				/* EXPLAIN (its ANALYZE runs the query) */
	T_AlterTableStmt,			/* a table rewrite (and ALTER INDEX, VIEW,
								 * SEQUENCE) */
	T_CallStmt,
	T_DoStmt,
};

/* Whether a utility statement of admitted_utility runs no executor inside. */
static bool
utility_runs_no_executor(Node *stmt)
{
	return IsA(stmt, IndexStmt) || IsA(stmt, ReindexStmt) || IsA(stmt, VacuumStmt) ||
		IsA(stmt, ClusterStmt) || IsA(stmt, AlterTableStmt) ||
		(IsA(stmt, CopyStmt) && ((CopyStmt *) stmt)->is_from);
}

/*
 * Whether a utility statement's work is one executor, one nesting level
 * down: CREATE TABLE AS (SELECT INTO, CREATE MATERIALIZED VIEW), REFRESH
 * MATERIALIZED VIEW, COPY (query) TO, EXPLAIN (its ANALYZE runs it).
 */
static bool
utility_runs_one_executor(Node *stmt)
{
	return IsA(stmt, CreateTableAsStmt) || IsA(stmt, RefreshMatViewStmt) ||
		IsA(stmt, ExplainStmt) ||
		(IsA(stmt, CopyStmt) && !((CopyStmt *) stmt)->is_from && ((CopyStmt *) stmt)->query != NULL);
}

/*
 * The text a utility statement's own executor runs with (compared, as a
 * pointer, with its QueryDesc's): the statement's, or for an EXPLAIN of
 * an EXECUTE the prepared statement's (NULL if there is none).
 */
static const char *
utility_exec_text(Node *stmt, const char *queryString)
{
	if (IsA(stmt, ExplainStmt))
	{
		Query	   *query = castNode(Query, ((ExplainStmt *) stmt)->query);

		if (query->commandType == CMD_UTILITY && IsA(query->utilityStmt, ExecuteStmt))
		{
			PreparedStatement *ps = FetchPreparedStatement(((ExecuteStmt *) query->utilityStmt)->name, false);

			return ps != NULL ? ps->plansource->query_string : NULL;
		}
	}
	return queryString;
}

/* Whether a utility statement is a COPY FROM STDIN (it reads its client's rows inside itself). */
static bool
copy_from_client(Node *stmt)
{
	return IsA(stmt, CopyStmt) && ((CopyStmt *) stmt)->is_from &&
		((CopyStmt *) stmt)->filename == NULL;
}

/* Whether a utility statement takes part in the admission (admitted_utility). */
static bool
utility_admitted(Node *stmt)
{
	if (copy_from_client(stmt))
		return false;
	for (int i = 0; i < lengthof(admitted_utility); i++)
		if (nodeTag(stmt) == admitted_utility[i])
			return true;
	return false;
}

/*
 * A top-level utility statement of a client's portal, recorded, of a kind
 * that takes part in the admission (admitted_utility): its mapped peak is
 * measured as a query's is, and with a need of 1 MB or more it is
 * admitted as a query is (it waits, or runs with its need reserved or
 * with a grant, until it ends, its transaction's commits inside it
 * included).  Inside a transaction block it does not wait, as with
 * memory_wait = 0: the block may hold locks (DDL before it) that others
 * queue behind, and a wait would fail it (55P03).  Whether it went
 * through the admission: its grant's limit is in force while it runs.
 */
static bool
utility_wait_for_memory(PlannedStmt *pstmt, GmUtilityMark *mark)
{
	int64		exec_peak;
	int64		mapped_peak;
	int64		waited;
	bool		tracked;

	if (ActivePortal == NULL || !utility_admitted(pstmt->utilityStmt) ||
		IsAbortedTransactionBlockState() || !gm_guard_may_wait())
		return false;
	/* Not recorded (recording off, no queryid): a start share while engaged. */
	if (!mark->tracked || !mark->key.toplevel)
		return (utility_reserved = gm_guard_take_start_share());
	exec_peak = gm_statements_recorded_peak(mark->key.queryid, &mapped_peak, &tracked);
	/*
	 * Measured as a query is (not recorded yet, or a need of 1 MB or
	 * more); one that runs no executor at every run, as a need recorded
	 * small, on a small table, may grow.
	 */
	if (tracked && (gm_guard_measures_mapped(exec_peak, mapped_peak) || utility_runs_no_executor(pstmt->utilityStmt)))
	{
		GmMallinfo	mi;

		gm_mallinfo(&mi);
		mark->free0 = (int64) mi.fordblks;
		gm_proc_vmsize_peak(&mark->vm_size0, &mark->vm_peak0);
	}
	if (exec_peak < 0)
		return (utility_reserved = gm_guard_take_start_share());
	if (exec_peak == 0)
		return false;
	if ((waited = gm_guard_wait_for_memory(exec_peak, mapped_peak, !IsTransactionBlock())) > 0)
		gm_statements_note_wait(mark->key.queryid, waited);
	utility_reserved = true;
	return true;
}

/*
 * What a measured utility statement's process mapped at most over its
 * start, if it set a new VmPeak (else unknown: -1): VmPeak less its VmSize
 * at the start.
 */
static int64
utility_mapped(const GmUtilityMark *mark)
{
	int64		peak;

	if (mark->vm_size0 < 0 || mark->vm_peak0 < 0 ||
		(peak = gm_proc_status_bytes(0, "VmPeak:")) < 0 || peak <= mark->vm_peak0)
		return -1;
	return peak - mark->vm_size0;
}

/* A utility statement ended (not by an error): recorded, with what it mapped if top-level. */
static void
utility_end(GmUtilityMark *mark, bool top)
{
	gm_statements_utility_end(mark, top ? utility_mapped(mark) : -1);
}

/*
 * Utility statements (COPY, CREATE INDEX, VACUUM, SET ...) never reach
 * ExecutorStart: apply a changed max_backend_memory before them too.  Those
 * glibc_malloc_statements records (not EXECUTE, PREPARE, DEALLOCATE) count
 * as a nesting level, as in pg_stat_statements; a top-level EXECUTE with
 * parameters is at level 1 while it evaluates them.
 */
static void
gm_ProcessUtility(GM_PU_ARGS)
{
	GmUtilityMark mark;
	bool		nests;
	volatile bool admitted = false;
	volatile bool params_set = false;
	volatile bool exec_nests = false;
	bool		top = nesting == 0;

	oom_counted = false;
	if (top)
	{
		/* The last statement's reservation ends (a portal suspended before). */
		reserved_desc = NULL;
		mapped_desc = NULL;
		exec_desc = NULL;
		planned_share = plan_tried = false;
		utility_exec_took = false;
		gm_guard_wait_end();
		gm_guard_top_statement_start();
		if (copy_from_client(pstmt->utilityStmt))
			gm_guard_reads_client(true);
	}
	gm_guard_apply();
	nests = gm_statements_utility_start(pstmt, queryString, nesting, &mark);
	if (top)
		admitted = utility_wait_for_memory(pstmt, &mark);
	if (nests)
		nesting++;
	else if (top && IsA(pstmt->utilityStmt, ExecuteStmt) &&
			 ((ExecuteStmt *) pstmt->utilityStmt)->params != NIL)
	{
		PreparedStatement *ps = FetchPreparedStatement(((ExecuteStmt *) pstmt->utilityStmt)->name, false);

		if (ps != NULL)
		{
			execute_source = pstrdup(ps->plansource->query_string);
			execute_portal = ActivePortal;
			params_nested = params_set = true;
			nesting++;
		}
	}
	else if (params_nested && IsA(pstmt->utilityStmt, ExecuteStmt))
	{
		/* An EXECUTE in the parameters: its prepared statement is deeper. */
		exec_nests = true;
		nesting++;
	}
	/* Its own executor is checked as a query's (the level it starts at, its text). */
	if (top && utility_runs_one_executor(pstmt->utilityStmt))
	{
		utility_exec_nesting = nesting;
		utility_exec_source = utility_exec_text(pstmt->utilityStmt, queryString);
	}
	PG_TRY();
	{
		/* A grant's limit is in force while it runs. */
		if (admitted)
			gm_guard_grant_run(true);
		if (prev_ProcessUtility)
			prev_ProcessUtility(GM_PU_PASS);
		else
			standard_ProcessUtility(GM_PU_PASS);
	}
	PG_CATCH();
	{
		if (nests || exec_nests)
			nesting--;
		if (params_set && params_nested)
			params_end();
		if (top)
		{
			utility_exec_nesting = -1;
			exec_desc = NULL;
			gm_guard_top_statement_end(true);
		}
		/* Counted with the grant's limit in force; the HINT allocates, after it. */
		caught_error_counted(false);
		if (admitted || (top && utility_exec_took))
		{
			utility_reserved = utility_exec_took = false;
			gm_guard_wait_end();
		}
		caught_error_hint();
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (nests || exec_nests)
		nesting--;
	/* (an EXECUTE whose prepared statement never started) */
	if (params_set && params_nested)
		params_end();
	if (top)
	{
		utility_exec_nesting = -1;
		exec_desc = NULL;
		gm_guard_top_statement_end(true);
	}
	/* Its reservation or grant ends with it, and what its executor took. */
	if (admitted || (top && utility_exec_took))
	{
		utility_reserved = utility_exec_took = false;
		gm_guard_wait_end();
	}
	utility_end(&mark, top);
}

/*
 * An "out of memory" ERROR no hook caught is counted here; under the
 * module's limits it gets a HINT.  Then chain.
 */
static void
gm_emit_log_hook(ErrorData *edata)
{
	if (edata->elevel >= ERROR && edata->sqlerrcode == ERRCODE_OUT_OF_MEMORY)
	{
		count_oom();
		gm_guard_error_hint(edata);
		/* Reported: the error's end, also where no transaction ends it. */
		oom_counted = false;
	}
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

/* Module load: learn the allocator, define the GUCs, wire the lifecycle. */
void
_PG_init(void)
{
	gm_allocator_init();
	gm_idle_setup(idle_point, next_due);
	gm_define_gucs(settings_changed);
	gm_shmem_define_gucs();
	gm_doctor_define_gucs();
	gm_monitor_define_gucs();
	gm_guard_define_gucs();
	gm_statements_define_gucs();
	MarkGUCPrefixReserved("glibc_malloc");
	if (process_shared_preload_libraries_in_progress)
	{
		gm_shmem_init();
		gm_statements_init();
		gm_monitor_register();
	}

	prev_ExecutorStart = ExecutorStart_hook;
	ExecutorStart_hook = gm_ExecutorStart;
	prev_ExecutorEnd = ExecutorEnd_hook;
	ExecutorEnd_hook = gm_ExecutorEnd;
	prev_ExecutorRun = ExecutorRun_hook;
	ExecutorRun_hook = gm_ExecutorRun;
	prev_ExecutorFinish = ExecutorFinish_hook;
	ExecutorFinish_hook = gm_ExecutorFinish;
	prev_planner = planner_hook;
	planner_hook = gm_planner;
	prev_ProcessUtility = ProcessUtility_hook;
	ProcessUtility_hook = gm_ProcessUtility;
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = gm_emit_log_hook;
	prev_post_parse_analyze = post_parse_analyze_hook;
	post_parse_analyze_hook = gm_post_parse_analyze;
	RegisterXactCallback(gm_xact_callback, NULL);
	RegisterSubXactCallback(gm_subxact_callback, NULL);
}
