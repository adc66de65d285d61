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
 * glibc_malloc_trim_backend(pid) sets the trim flag in the target's slot
 * and sends it SIGUSR2, which regular backends otherwise ignore.  The
 * handler acts at once only at the provably safe idle point (see idle.c);
 * otherwise the request waits for the target's next transaction end, which
 * serves it in normal context.
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
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "glibc_malloc.h"

#define GM_REQ_TRIM		0x1
#define GM_REQ_PUBLISH	0x2

/* One process's published snapshot. */
typedef struct GmSlot
{
	uint32		changecount;	/* odd while the owner writes */
	int			pid;			/* 0 = free */
	Oid			roleid;
	int			backend_type;	/* BackendType */
	int			preset;			/* GmPreset */
	bool		signalable;		/* owner serves SIGUSR2 requests */
	TimestampTz taken_at;
	int64		system_bytes;
	int64		in_use_bytes;
	int64		free_bytes;
	int64		mmapped_bytes;
	int64		rss_anon_bytes;
	int64		idle_releases;
	int64		idle_released_bytes;
	pg_atomic_uint32 requests;	/* GM_REQ_* from other processes */
} GmSlot;

typedef struct GmShared
{
	int			nslots;
	GmSlot		slots[FLEXIBLE_ARRAY_MEMBER];
} GmShared;

/* GUC: publish at most once per this many ms at transaction end. */
int			gm_stats_interval = 1000;

static GmShared *shared = NULL;
static GmSlot *my_slot = NULL;
static int	my_slot_pid = 0;
static TimestampTz last_publish = 0;
static struct sigaction prev_sigusr2;	/* chained, should anyone use it */

static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif

/* How many slots: one per PGPROC (regular, auxiliary, prepared xacts). */
static int
slot_count(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
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
			pg_atomic_init_u32(&shared->slots[i].requests, 0);
	}
	LWLockRelease(AddinShmemInitLock);
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

/* on_shmem_exit: leave the slot clean for the next process. */
static void
release_slot(int code, Datum arg)
{
	GmSlot	   *slot = my_slot;

	if (slot == NULL)
		return;
	slot->changecount++;
	pg_write_barrier();
	slot->pid = 0;
	slot->signalable = false;
	pg_write_barrier();
	slot->changecount++;
	pg_atomic_write_u32(&slot->requests, 0);
	my_slot = NULL;
}

/* This process's slot, claimed on first use; NULL without shared memory. */
static GmSlot *
claim_slot(void)
{
	int			n;

	if (shared == NULL || MyProc == NULL)
		return NULL;
	if (my_slot_pid == MyProcPid)
		return my_slot;

	n = GM_MY_PROC_NUMBER();
	if (n < 0 || n >= shared->nslots)
		return NULL;
	my_slot = &shared->slots[n];
	my_slot_pid = MyProcPid;
	pg_atomic_write_u32(&my_slot->requests, 0);
	on_shmem_exit(release_slot, (Datum) 0);
	return my_slot;
}

/*
 * Write a snapshot into this process's slot.  Safe at the idle wait too
 * (mallinfo under idle.c's argument; RssAnon with open/read/close).
 */
static void
publish(TimestampTz now)
{
	GmSlot	   *slot = my_slot;
	GmMallinfo	mi;

	if (slot == NULL)
		return;
	gm_mallinfo(&mi);
	slot->changecount++;
	pg_write_barrier();
	slot->pid = MyProcPid;
	slot->roleid = GetSessionUserId();
	slot->backend_type = MyBackendType;
	slot->preset = gm_current_preset();
	slot->taken_at = now;
	slot->system_bytes = mi.arena + mi.hblkhd;
	slot->in_use_bytes = mi.uordblks + mi.hblkhd;
	slot->free_bytes = mi.fordblks;
	slot->mmapped_bytes = mi.hblkhd;
	slot->rss_anon_bytes = gm_rss_anon();
	slot->idle_releases = gm_idle_releases;
	slot->idle_released_bytes = gm_idle_released_bytes;
	pg_write_barrier();
	slot->changecount++;
	last_publish = now;
}

/*
 * Serve pending requests (trim, publish) and publish; the caller knows that
 * malloc may be called: normal context, or the idle wait (idle.c).
 */
void
gm_shmem_serve_requests(void)
{
	uint32		req;

	if (my_slot == NULL || my_slot_pid != MyProcPid)
		return;
	req = pg_atomic_exchange_u32(&my_slot->requests, 0);

	if (req & GM_REQ_TRIM)
		gm_idle_trim();
	publish(GetCurrentTimestamp());
}

/* SIGUSR2 in regular backends: a request from another backend. */
static void
gm_sigusr2_handler(SIGNAL_ARGS)
{
	int			save_errno = errno;

	gm_run_at_idle(gm_shmem_serve_requests);
	if (prev_sigusr2.sa_handler != SIG_IGN && prev_sigusr2.sa_handler != SIG_DFL &&
		!(prev_sigusr2.sa_flags & SA_SIGINFO))
		prev_sigusr2.sa_handler(postgres_signal_arg);
	errno = save_errno;
}

/*
 * At top-level transaction end: claim the slot, install the SIGUSR2 handler
 * once, serve requests, and publish when stats_interval says so.
 */
void
gm_shmem_transaction_end(void)
{
	GmSlot	   *slot;
	TimestampTz now;

	if (shared == NULL || (slot = claim_slot()) == NULL)
		return;

	if (!slot->signalable && MyBackendType == B_BACKEND)
	{
		struct sigaction act;

		/* Regular backends ignore SIGUSR2; block SIGALRM while serving. */
		memset(&act, 0, sizeof(act));
		act.sa_handler = gm_sigusr2_handler;
		sigemptyset(&act.sa_mask);
		sigaddset(&act.sa_mask, SIGALRM);
		act.sa_flags = SA_RESTART;
		sigaction(SIGUSR2, &act, &prev_sigusr2);
		slot->signalable = true;
	}

	if (pg_atomic_read_u32(&slot->requests) != 0)
	{
		gm_shmem_serve_requests();
		return;
	}
	if (gm_stats_interval < 0)
		return;
	now = GetCurrentTimestamp();
	if (gm_stats_interval == 0 || last_publish == 0 ||
		TimestampDifferenceExceeds(last_publish, now, gm_stats_interval))
		publish(now);
}

/* Copy a slot consistently; false if it is free. */
static bool
read_slot(GmSlot *slot, GmSlot *copy)
{
	for (;;)
	{
		uint32		before = slot->changecount;

		pg_read_barrier();
		memcpy(copy, slot, offsetof(GmSlot, requests));
		pg_read_barrier();
		if (before == slot->changecount && (before & 1) == 0)
			break;
		CHECK_FOR_INTERRUPTS();
	}
	return copy->pid != 0;
}

/* pg_stat_activity's rule: own roles' rows, or pg_read_all_stats. */
static bool
can_see(Oid roleid)
{
	return has_privs_of_role(GetUserId(), roleid) ||
		has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
}

PG_FUNCTION_INFO_V1(glibc_malloc_backends);
PG_FUNCTION_INFO_V1(glibc_malloc_trim_backend);

/* glibc_malloc_backends(): every visible slot's snapshot. */
Datum
glibc_malloc_backends(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	require_shared();
	gm_init_srf(fcinfo);

	/* The caller's own row is current. */
	if (claim_slot())
		publish(GetCurrentTimestamp());

	for (int i = 0; i < shared->nslots; i++)
	{
		GmSlot		s;
		Datum		values[12];
		bool		nulls[12] = {0};
		int			j = 0;

		if (!read_slot(&shared->slots[i], &s) || !can_see(s.roleid))
			continue;
		values[j++] = Int32GetDatum(s.pid);
		values[j++] = CStringGetTextDatum(GetBackendTypeDesc(s.backend_type));
		values[j++] = ObjectIdGetDatum(s.roleid);
		values[j++] = CStringGetTextDatum(gm_preset_name(s.preset));
		values[j++] = Int64GetDatum(s.system_bytes);
		values[j++] = Int64GetDatum(s.in_use_bytes);
		values[j++] = Int64GetDatum(s.free_bytes);
		values[j++] = Int64GetDatum(s.mmapped_bytes);
		values[j] = Int64GetDatum(s.rss_anon_bytes);
		nulls[j++] = s.rss_anon_bytes < 0;
		values[j++] = Int64GetDatum(s.idle_releases);
		values[j++] = Int64GetDatum(s.idle_released_bytes);
		values[j++] = TimestampTzGetDatum(s.taken_at);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
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
	GmSlot		s;
	GmSlot	   *slot = NULL;

	require_shared();

	proc = BackendPidGetProc(pid);
	if (proc == NULL)
	{
		ereport(WARNING,
				(errmsg("PID %d is not a PostgreSQL backend process", pid)));
		PG_RETURN_BOOL(false);
	}
	if (superuser_arg(proc->roleId) && !superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to trim backend %d", pid),
				 errdetail("Only roles with the SUPERUSER attribute may trim the memory of backends of roles with the SUPERUSER attribute.")));
	if (!has_privs_of_role(GetUserId(), proc->roleId) &&
		!has_privs_of_role(GetUserId(), ROLE_PG_SIGNAL_BACKEND))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to trim backend %d", pid),
				 errdetail("Only roles with privileges of the role whose backend is being trimmed or with privileges of the \"pg_signal_backend\" role may trim this backend.")));

	for (int i = 0; i < shared->nslots; i++)
	{
		if (read_slot(&shared->slots[i], &s) && s.pid == pid)
		{
			slot = &shared->slots[i];
			break;
		}
	}
	if (slot == NULL)
	{
		ereport(WARNING,
				(errmsg("backend %d has not published a malloc snapshot yet; try again after its next transaction", pid)));
		PG_RETURN_BOOL(false);
	}

	pg_atomic_fetch_or_u32(&slot->requests, GM_REQ_TRIM | GM_REQ_PUBLISH);
	if (pid == MyProcPid)
	{
		gm_shmem_serve_requests();
		PG_RETURN_BOOL(true);
	}
	if (s.signalable && kill(pid, SIGUSR2) != 0)
		PG_RETURN_BOOL(false);
	PG_RETURN_BOOL(true);
}
