/*-------------------------------------------------------------------------
 *
 * idle.c
 *		Give free malloc memory back to the OS when a backend goes idle.
 *
 * PostgreSQL gives extensions no hook that runs while a backend waits for
 * its client.  At the end of every top-level transaction of a client
 * backend we arm a timeout (RegisterTimeout/enable_timeout_after); when it
 * fires, its handler runs in signal context and calls malloc_trim(0) only if
 * the interrupted code is provably the idle wait for the next command.
 *
 * Safety argument.  malloc-family functions are not async-signal-safe
 * because the interrupted code might be inside one, holding an arena lock or
 * halfway through updating a free list.  The handler acts only when both
 *
 *	(a) the reported wait event is WAIT_EVENT_CLIENT_READ: the backend is inside
 *		WaitEventSetWait() for the client socket, between
 *		pgstat_report_wait_start() and pgstat_report_wait_end().  That
 *		stretch of code runs no malloc-family function: it checks the latch
 *		and sits in epoll_wait()/poll().  With SSL or GSSAPI the wait happens
 *		in secure_read() between two SSL_read()/gss calls, never inside
 *		them, because the socket is non-blocking.  So this thread holds no
 *		malloc lock and is not in the middle of any malloc state change.
 *	(b) no transaction is open (IsTransactionOrTransactionBlock() is false):
 *		the backend is waiting for a new command, not reading COPY FROM STDIN
 *		data (which runs inside a transaction) and not between the messages
 *		of an extended-protocol sequence (Parse starts a transaction that
 *		only Sync ends).
 *
 * Both checks are plain reads of process-local memory, safe in a handler.
 * malloc_trim takes each arena's mutex.  If an extension has started
 * threads, one of them may hold a lock: the handler then waits for that
 * thread to finish its malloc call, which never waits on this thread, so
 * the outcome is a short wait, not corruption.  RssAnon is read with
 * open/read/close, which are async-signal-safe.
 *
 * Cost when unused: one comparison per transaction end.  When used:
 * enable_timeout_after per transaction end, which re-arms the interval
 * timer only when the new deadline is earlier than the pending one.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "tcop/dest.h"
#include "tcop/tcopprot.h"
#include "utils/timeout.h"

#include "glibc_malloc.h"

/* Counters for glibc_malloc_stats(); written only by the handler. */
volatile int64 gm_idle_releases = 0;
volatile int64 gm_idle_released_bytes = 0;

static TimeoutId idle_timeout;
static volatile sig_atomic_t at_idle_busy = false;
static int	idle_timeout_pid = 0;	/* process that registered it */

/* Whether this backend is provably in the idle wait (see above). */
bool
gm_at_idle_wait(void)
{
	return GM_CURRENT_WAIT_EVENT() == WAIT_EVENT_CLIENT_READ &&
		!IsTransactionOrTransactionBlock();
}

/*
 * From a signal handler: run fn only at the idle wait, and never nested (a
 * second handler interrupting the first one's malloc_trim would re-enter
 * malloc on the same thread and deadlock on the arena lock).
 */
void
gm_run_at_idle(void (*fn) (void))
{
	if (at_idle_busy || !gm_at_idle_wait())
		return;
	at_idle_busy = true;
	fn();
	at_idle_busy = false;
}

/* Trim and count it, for the idle release and for remote trim requests. */
void
gm_idle_trim(void)
{
	gm_idle_released_bytes += gm_release(0);
	gm_idle_releases++;
}

/* The idle release itself: trim, count, and publish the new snapshot. */
static void
idle_release(void)
{
	gm_idle_trim();
	gm_shmem_serve_requests();
}

/* Timeout handler, in signal context. */
static void
idle_release_handler(void)
{
	int			save_errno = errno;

	gm_run_at_idle(idle_release);
	errno = save_errno;
}

/*
 * At top-level transaction end: arm the idle release if one is configured,
 * or cancel a pending one when the delay was just turned off.
 */
void
gm_idle_arm(int delay_ms)
{
	bool		registered = idle_timeout_pid == MyProcPid;

	if (delay_ms <= 0 || !gm_malloc_is_glibc ||
		MyBackendType != B_BACKEND || whereToSendOutput != DestRemote)
	{
		if (registered && get_timeout_active(idle_timeout))
			disable_timeout(idle_timeout, false);
		return;
	}

	/* Timeouts are per process and reset at backend start: register lazily. */
	if (!registered)
	{
		idle_timeout = RegisterTimeout(USER_TIMEOUT, idle_release_handler);
		idle_timeout_pid = MyProcPid;
	}
	enable_timeout_after(idle_timeout, delay_ms);
}
