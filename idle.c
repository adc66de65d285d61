/*-------------------------------------------------------------------------
 *
 * idle.c
 *		Run work at the idle point: while a client backend provably waits
 *		for its next command.
 *
 * PostgreSQL gives extensions no hook that runs while a backend waits for
 * its client.  This file provides one, for client backends: a per-process
 * POSIX timer (timer_create) and requests from other backends both raise
 * SIGUSR2, which regular backends otherwise ignore, and the handler runs
 * the work it was given (gm_idle_setup) only if the interrupted code is
 * provably the idle wait.  The work says when it wants to run again; when
 * the backend is not at the idle wait, the handler retries later while
 * work is pending, so a release that fell due during a ClientWrite stall,
 * a commit or a failed transaction block is not lost.  The timer is the
 * module's own: PostgreSQL's disable_all_timeouts() on an error does not
 * cancel it.
 *
 * Safety argument.  malloc-family functions are not async-signal-safe
 * because the interrupted code might be inside one, holding an arena lock or
 * halfway through updating a free list.  The handler acts only when all of
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
 *	(c) InterruptHoldoffCount and CritSectionCount are 0 and the process is
 *		not exiting: an ERROR thrown out of the wait leaves the wait event
 *		set, but PostgresMain's error recovery holds interrupts while it
 *		cleans up (and frees memory).
 *
 * All checks are plain reads of process-local memory, safe in a handler.
 * They describe the main thread, so the handler acts only there: the timer
 * is aimed at the main thread (SIGEV_THREAD_ID), and a request from
 * another process that the kernel delivered to a thread an extension
 * started is passed on to the main thread (tgkill) untouched.
 * malloc_trim takes each arena's mutex.  If an extension's thread holds
 * one, the handler on the main thread waits for that thread to finish its
 * malloc call, which never waits on the main thread, so the outcome is a
 * short wait, not corruption.  RssAnon is read with
 * open/read/close and the timer is set with timer_settime, both
 * async-signal-safe.
 *
 * Cost: nothing until something is scheduled.  Then one timer_settime at
 * most per scheduled delay: a transaction end that wants a later wake-up
 * than the one already armed only stores its due time, and the handler
 * re-arms when it finds the work not yet due.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

#include "access/xact.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "tcop/dest.h"
#include "tcop/tcopprot.h"
#include "utils/timestamp.h"

#include "glibc_malloc.h"

/*
 * Retry while the backend cannot act: every 20 ms at first (a commit or a
 * client write in progress), backing off to 1 s (a failed transaction block,
 * a client that stopped reading).  Inside a running transaction nothing is
 * retried: its end plans again.
 */
#define GM_IDLE_RETRY_MS		20
#define GM_IDLE_MAX_RETRY_MS	1000

static GmIdleWork idle_work = NULL;
static GmIdlePending idle_pending = NULL;

static int	setup_pid = 0;		/* the process that set up handler and timer */
static bool timer_ok = false;
static volatile sig_atomic_t in_idle_work = false;
static volatile sig_atomic_t retry_ms = GM_IDLE_RETRY_MS;	/* next retry interval */

#ifdef GM_HAVE_THREAD_SIGNALS
static timer_t idle_timer;

/*
 * When the timer fires (gm_monotonic_usec(), the timer's clock); 0 = not armed.  Where PostgreSQL
 * emulates 64-bit atomics with a spinlock, normal context touches it only
 * with SIGUSR2 blocked (gm_idle_schedule), so the handler never spins on a
 * lock the interrupted code holds.
 */
static pg_atomic_uint64 armed_for;
#endif
static struct sigaction prev_sigusr2;	/* chained, should anyone use it */

/* Whether this backend is provably in the idle wait (see above). */
static bool
gm_at_idle_wait(void)
{
	return GM_CURRENT_WAIT_EVENT() == WAIT_EVENT_CLIENT_READ &&
		InterruptHoldoffCount == 0 && CritSectionCount == 0 &&
		!proc_exit_inprogress &&
		!IsTransactionOrTransactionBlock();
}

/* Set the timer to fire in delay_ms; async-signal-safe. */
static void
arm(int64 delay_ms)
{
#ifdef GM_HAVE_THREAD_SIGNALS
	struct itimerspec its;

	if (delay_ms < 1)
		delay_ms = 1;
	memset(&its, 0, sizeof(its));
	its.it_value.tv_sec = delay_ms / 1000;
	its.it_value.tv_nsec = (delay_ms % 1000) * 1000000;
	if (timer_settime(idle_timer, 0, &its, NULL) == 0)
		pg_atomic_write_u64(&armed_for, gm_monotonic_usec() + delay_ms * 1000);
#endif
}

/* SIGUSR2: our timer, or a request from another backend. */
static void
gm_sigusr2_handler(int signo, siginfo_t *info, void *context)
{
	int			save_errno = errno;

	/*
	 * A request from another process is process-directed: the kernel may
	 * deliver it to any thread that does not block it, such as one an
	 * extension or library started.  Everything below reads the main
	 * thread's state and may run malloc, which on that thread could wait
	 * for the very arena lock the interrupted thread holds.  Pass it on to
	 * the main thread (whose thread id is the pid) and return.  The timer
	 * is aimed at the main thread already.
	 */
#ifdef GM_HAVE_THREAD_SIGNALS
	if (setup_pid == MyProcPid && (pid_t) syscall(SYS_gettid) != MyProcPid)
	{
		(void) syscall(SYS_tgkill, (pid_t) MyProcPid, (pid_t) MyProcPid, SIGUSR2);
		errno = save_errno;
		return;
	}
#endif

	if (setup_pid == MyProcPid && !in_idle_work)
	{
		int64		now = gm_monotonic_usec();

#ifdef GM_HAVE_THREAD_SIGNALS
		if (info != NULL && info->si_code == SI_TIMER)
			pg_atomic_write_u64(&armed_for, 0);
#endif

		if (gm_at_idle_wait())
		{
			int64		next;

			/* Never nested: re-entering malloc_trim would deadlock. */
			in_idle_work = true;
			next = idle_work(now);
			in_idle_work = false;
			retry_ms = GM_IDLE_RETRY_MS;
			if (next >= 0)
				arm(next);
		}
		else if (!IsTransactionState() && GM_WAIT_EVENTS_REPORTED())
		{
			/* Not in a running transaction, whose end would plan again. */
			int64		next = idle_pending(now);

			if (next >= 0)
			{
				arm(Max(next, retry_ms));
				retry_ms = Min(retry_ms * 2, GM_IDLE_MAX_RETRY_MS);
			}
		}
	}

	if (prev_sigusr2.sa_handler != SIG_IGN && prev_sigusr2.sa_handler != SIG_DFL)
	{
		if (prev_sigusr2.sa_flags & SA_SIGINFO)
			prev_sigusr2.sa_sigaction(signo, info, context);
		else
			prev_sigusr2.sa_handler(signo);
	}
	errno = save_errno;
}

/* Give the work to run at the idle point; once, from _PG_init. */
void
gm_idle_setup(GmIdleWork work, GmIdlePending pending)
{
	idle_work = work;
	idle_pending = pending;
}

/*
 * Whether the idle point is set up and usable in this process, without
 * setting anything up: scheduling is then a timer_settime call.
 */
bool
gm_idle_ready(void)
{
	return setup_pid == MyProcPid && timer_ok && GM_WAIT_EVENTS_REPORTED();
}

/*
 * Whether this process has an idle point (a client backend talking to a
 * client, on glibc's malloc), setting up the handler and the timer on first
 * use.  Normal context only.
 */
bool
gm_idle_enabled(void)
{
#ifdef GM_HAVE_THREAD_SIGNALS
	struct sigaction act;
	struct sigevent sev;

	if (setup_pid == MyProcPid)
		return timer_ok && GM_WAIT_EVENTS_REPORTED();
	if (idle_work == NULL || !gm_malloc_is_glibc || proc_exit_inprogress ||
		MyBackendType != B_BACKEND || whereToSendOutput != DestRemote)
		return false;

	setup_pid = MyProcPid;
	pg_atomic_init_u64(&armed_for, 0);
	/* Aimed at this (the main) thread, never at a thread of an extension's. */
	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_THREAD_ID;
	sev.sigev_signo = SIGUSR2;
	sev.gm_sigev_thread_id = (pid_t) syscall(SYS_gettid);
	timer_ok = timer_create(CLOCK_MONOTONIC, &sev, &idle_timer) == 0;
	if (!timer_ok)
		return false;

	/* Regular backends ignore SIGUSR2; block SIGALRM while serving. */
	memset(&act, 0, sizeof(act));
	act.sa_sigaction = gm_sigusr2_handler;
	sigemptyset(&act.sa_mask);
	sigaddset(&act.sa_mask, SIGALRM);
	act.sa_flags = SA_RESTART | SA_SIGINFO;
	sigaction(SIGUSR2, &act, &prev_sigusr2);
	return GM_WAIT_EVENTS_REPORTED();
#else
	return false;
#endif
}

/*
 * Normal context: make sure the idle work runs no later than delay_ms after
 * now (sooner is fine: the work re-arms for what is not due yet).
 */
void
gm_idle_schedule(int64 now, int64 delay_ms)
{
#ifdef GM_HAVE_THREAD_SIGNALS
	uint64		armed;
	sigset_t	block,
				old;

	if (!gm_idle_enabled())
		return;

	retry_ms = GM_IDLE_RETRY_MS;
	sigemptyset(&block);
	sigaddset(&block, SIGUSR2);
#ifdef PG_HAVE_ATOMIC_U64_SIMULATION
	sigprocmask(SIG_BLOCK, &block, &old);
#endif
	armed = pg_atomic_read_u64(&armed_for);
#ifdef PG_HAVE_ATOMIC_U64_SIMULATION
	sigprocmask(SIG_SETMASK, &old, NULL);
#endif
	if (armed != 0 && armed <= (uint64) (now + delay_ms * 1000))
		return;

	/* The handler arms too: keep it out while the timer and armed_for change. */
	sigprocmask(SIG_BLOCK, &block, &old);
	arm(delay_ms);
	sigprocmask(SIG_SETMASK, &old, NULL);
#endif
}
