/*-------------------------------------------------------------------------
 *
 * gm_test_threads.c
 *		Test-only module: a thread in a backend, as extensions and libraries
 *		start them (pg_duckdb, plv8, PL/Java, GDAL, libcurl's resolver).
 *
 * t/022_threads.pl builds it with the server's headers and loads it by
 * path; it is never installed.
 *
 *	gm_test_start_thread()		start a thread that loops malloc/free with
 *								signals unblocked; returns its thread id
 *	gm_test_block_sigusr2(on)	block (or unblock) SIGUSR2 in the calling,
 *								main, thread: process-directed SIGUSR2 then
 *								goes to the other thread
 *	gm_test_tgkill(pid, tid)	send SIGUSR2 to thread tid of process pid
 *	gm_test_block_sigusr2_window(start_ms, end_ms)
 *								block SIGUSR2 in the main thread from
 *								start_ms to end_ms from now, from a timer's
 *								handler (through the mask its return
 *								restores), while the backend sits at its
 *								idle wait
 *	gm_test_end_window(pid)		end that window in process pid now
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "fmgr.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(gm_test_start_thread);
PG_FUNCTION_INFO_V1(gm_test_block_sigusr2);
PG_FUNCTION_INFO_V1(gm_test_tgkill);
PG_FUNCTION_INFO_V1(gm_test_block_sigusr2_window);
PG_FUNCTION_INFO_V1(gm_test_end_window);

static volatile pid_t thread_tid = 0;

/* The thread: malloc and free of varied sizes, forever. */
static void *
churn(void *arg)
{
	void	   *keep[64] = {0};
	unsigned	i = 0;

	thread_tid = (pid_t) syscall(SYS_gettid);
	for (;;)
	{
		unsigned	k = i % 64;

		free(keep[k]);
		keep[k] = malloc(16 + (i * 7919) % 4096);
		i++;
	}
	return NULL;
}

/* Start the thread, with every signal unblocked; its thread id. */
Datum
gm_test_start_thread(PG_FUNCTION_ARGS)
{
	pthread_t	t;
	sigset_t	none,
				old;

	sigemptyset(&none);
	pthread_sigmask(SIG_SETMASK, &none, &old);
	if (pthread_create(&t, NULL, churn, NULL) != 0)
		elog(ERROR, "pthread_create failed");
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_detach(t);
	while (thread_tid == 0)
		usleep(1000);
	PG_RETURN_INT32(thread_tid);
}

/* Block or unblock SIGUSR2 in the calling thread. */
Datum
gm_test_block_sigusr2(PG_FUNCTION_ARGS)
{
	sigset_t	set;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR2);
	pthread_sigmask(PG_GETARG_BOOL(0) ? SIG_BLOCK : SIG_UNBLOCK, &set, NULL);
	PG_RETURN_VOID();
}

/* SIGUSR2 to one thread of another process of the same user. */
Datum
gm_test_tgkill(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(syscall(SYS_tgkill, (pid_t) PG_GETARG_INT32(0),
						   (pid_t) PG_GETARG_INT32(1), SIGUSR2) == 0);
}

/*
 * The window timer's signal: the first expiry adds SIGUSR2 to the mask its
 * return restores, and re-arms; the second removes it.
 */
static timer_t window_timer;
static volatile sig_atomic_t window_phase = 0;	/* 0 idle, 1 before, 2 blocked */
static long window_rest_ms = 0;

static void
window_handler(int signo, siginfo_t *info, void *context)
{
	ucontext_t *uc = (ucontext_t *) context;

	if (window_phase == 1)
	{
		struct itimerspec its;

		sigaddset(&uc->uc_sigmask, SIGUSR2);
		window_phase = 2;
		memset(&its, 0, sizeof(its));
		its.it_value.tv_sec = window_rest_ms / 1000;
		its.it_value.tv_nsec = (window_rest_ms % 1000) * 1000000;
		timer_settime(window_timer, 0, &its, NULL);
	}
	else if (window_phase == 2)
	{
		sigdelset(&uc->uc_sigmask, SIGUSR2);
		window_phase = 0;
	}
}

/*
 * Block SIGUSR2 in the calling (main) thread from start_ms from now to
 * end_ms from now, from a timer's handler: the backend can sit at its idle
 * wait meanwhile, and what waited is delivered there.
 */
Datum
gm_test_block_sigusr2_window(PG_FUNCTION_ARGS)
{
	static bool made = false;
	int			start_ms = PG_GETARG_INT32(0);
	int			end_ms = PG_GETARG_INT32(1);
	struct itimerspec its;

	if (!made)
	{
		struct sigaction act;
		struct sigevent sev;

		memset(&act, 0, sizeof(act));
		act.sa_sigaction = window_handler;
		act.sa_flags = SA_SIGINFO | SA_RESTART;
		sigemptyset(&act.sa_mask);
		sigaction(SIGRTMIN + 5, &act, NULL);
		memset(&sev, 0, sizeof(sev));
		sev.sigev_notify = SIGEV_THREAD_ID;
		sev.sigev_signo = SIGRTMIN + 5;
		sev._sigev_un._tid = (pid_t) syscall(SYS_gettid);
		if (timer_create(CLOCK_MONOTONIC, &sev, &window_timer) != 0)
			elog(ERROR, "timer_create failed");
		made = true;
	}
	if (start_ms < 1 || end_ms <= start_ms)
		elog(ERROR, "need 0 < start_ms < end_ms");
	window_rest_ms = end_ms - start_ms;
	window_phase = 1;
	memset(&its, 0, sizeof(its));
	its.it_value.tv_sec = start_ms / 1000;
	its.it_value.tv_nsec = (long) (start_ms % 1000) * 1000000;
	timer_settime(window_timer, 0, &its, NULL);
	PG_RETURN_VOID();
}

/* End the window of process pid now: its window signal, sent early. */
Datum
gm_test_end_window(PG_FUNCTION_ARGS)
{
	pid_t		pid = (pid_t) PG_GETARG_INT32(0);

	PG_RETURN_BOOL(syscall(SYS_tgkill, pid, pid, SIGRTMIN + 5) == 0);
}
