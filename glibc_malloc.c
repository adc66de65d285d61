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
 * Loaded but unused, it never calls mallopt; it costs one comparison per
 * query and, per transaction end, a few comparisons (plus, when preloaded,
 * a clock read and a snapshot at most once per glibc_malloc.stats_interval).
 *
 * IDENTIFICATION
 *		glibc_malloc.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "miscadmin.h"

#include "glibc_malloc.h"

GM_MODULE_MAGIC;

void		_PG_init(void);

static ExecutorStart_hook_type prev_ExecutorStart = NULL;

/* Let greedy follow work_mem before the query runs, then chain. */
static void
gm_ExecutorStart(QueryDesc *queryDesc, int eflags)
{
	gm_statement_start();
	if (prev_ExecutorStart)
		prev_ExecutorStart(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);
}

/* At every top-level transaction end: frugal's trim, the idle release, the snapshot. */
static void
gm_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			gm_transaction_end();
			gm_shmem_transaction_end();
			break;
		default:
			break;
	}
}

/* Module load: learn the allocator, define the GUCs, install the hooks. */
void
_PG_init(void)
{
	gm_allocator_init();
	gm_define_gucs();
	if (process_shared_preload_libraries_in_progress)
		gm_shmem_init();

	prev_ExecutorStart = ExecutorStart_hook;
	ExecutorStart_hook = gm_ExecutorStart;
	RegisterXactCallback(gm_xact_callback, NULL);
}
