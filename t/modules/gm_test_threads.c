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
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fmgr.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(gm_test_start_thread);
PG_FUNCTION_INFO_V1(gm_test_block_sigusr2);
PG_FUNCTION_INFO_V1(gm_test_tgkill);

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
