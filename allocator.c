/*-------------------------------------------------------------------------
 *
 * allocator.c
 *		Facts about the malloc this process runs on: which library provides
 *		it, what the operator's environment set, mallinfo, RssAnon, and
 *		releases of free memory with their counters; and the table of the
 *		glibc parameters the module manages.
 *
 *		The bottom layer: it calls no other file of the module.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dlfcn.h>
#include <sys/resource.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef __GLIBC__
#include <gnu/libc-version.h>
#endif

#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "glibc_malloc.h"

/*
 * The glibc parameters, each with its GUC glibc_malloc.<name>.
 *
 * The raw knobs are SUSET: with them an unprivileged user could exhaust the
 * commit limit vm.overcommit_memory=2 sets for the whole server.  The arena
 * knobs are PGC_POSTMASTER: glibc reads M_ARENA_MAX once, when it makes the
 * first extra arena, so only the postmaster can usefully set them.
 */
const GmParamInfo gm_params[GM_NPARAMS] = {
	[GM_TRIM_THRESHOLD] = {"trim_threshold", M_TRIM_THRESHOLD,
		"glibc.malloc.trim_threshold", "MALLOC_TRIM_THRESHOLD_", 128 * 1024, true, true,
		"Sets M_TRIM_THRESHOLD: free memory at the heap top above which free() returns it to the OS (-1: not set).",
	-1, -1, GM_MAX_KB, PGC_SUSET, GUC_UNIT_KB, 1024},
	[GM_MMAP_THRESHOLD] = {"mmap_threshold", M_MMAP_THRESHOLD,
		"glibc.malloc.mmap_threshold", "MALLOC_MMAP_THRESHOLD_", 128 * 1024, true, true,
		"Sets M_MMAP_THRESHOLD: requests at least this large are served by mmap (-1: not set).",
	-1, -1, GM_MAX_KB, PGC_SUSET, GUC_UNIT_KB, 1024},
	[GM_TOP_PAD] = {"top_pad", M_TOP_PAD,
		"glibc.malloc.top_pad", "MALLOC_TOP_PAD_", 128 * 1024, true, true,
		"Sets M_TOP_PAD: extra memory requested on each heap growth and kept on each trim (-1: not set).",
	-1, -1, GM_MAX_KB, PGC_SUSET, GUC_UNIT_KB, 1024},
	[GM_MMAP_MAX] = {"mmap_max", M_MMAP_MAX,
		"glibc.malloc.mmap_max", "MALLOC_MMAP_MAX_", 65536, true, false,
		"Sets M_MMAP_MAX: the most chunks served by mmap at once (-1: not set).",
	-1, -1, INT_MAX, PGC_SUSET, 0, 1},
	[GM_MXFAST] = {"mxfast", M_MXFAST,
		"glibc.malloc.mxfast", NULL, 64 * sizeof(size_t) / 4, false, true,
		"Sets M_MXFAST: the largest request served from fastbins, at most 80 * sizeof(size_t) / 4 bytes (-1: not set).",
	-1, -1, 80 * sizeof(size_t) / 4, PGC_SUSET, GUC_UNIT_BYTE, 1},
	[GM_PERTURB] = {"perturb", M_PERTURB,
		"glibc.malloc.perturb", "MALLOC_PERTURB_", 0, false, false,
		"Sets M_PERTURB: fill allocated and freed memory with this byte, for debugging (0: off; -1: not set).",
	-1, -1, 255, PGC_SUSET, 0, 1},
	[GM_ARENA_MAX] = {"arena_max", M_ARENA_MAX,
		"glibc.malloc.arena_max", "MALLOC_ARENA_MAX", 0, false, false,
		"Sets M_ARENA_MAX in the postmaster: the most malloc arenas (0: not set; glibc ignores 0).",
	0, 0, INT_MAX, PGC_POSTMASTER, 0, 1},
	[GM_ARENA_TEST] = {"arena_test", M_ARENA_TEST,
		"glibc.malloc.arena_test", "MALLOC_ARENA_TEST", sizeof(long) == 4 ? 2 : 8, false, false,
		"Sets M_ARENA_TEST in the postmaster: arenas made before arena_max is checked (0: not set; glibc ignores 0).",
	0, 0, INT_MAX, PGC_POSTMASTER, 0, 1},
};

const char *const gm_source_names[] = {
	[GM_SRC_GLIBC_DEFAULT] = "glibc default",
	[GM_SRC_SETTING] = "setting",
	[GM_SRC_PRESET] = "preset",
	[GM_SRC_ENVIRONMENT] = "environment",
};

/* True when glibc's malloc is the one in use (no LD_PRELOAD'ed allocator). */
bool		gm_malloc_is_glibc = false;

/* File name of the object that provides malloc, e.g. "libc.so.6". */
const char *gm_allocator = "unknown";

/* Values the environment set for each parameter, -1 when it set none. */
int64		gm_env_value[GM_NPARAMS];

/* Whether this glibc keeps freed small chunks in fastbins (M_MXFAST). */
bool		gm_glibc_has_fastbins = true;

/* glibc.malloc.hugetlb from GLIBC_TUNABLES, or NULL. */
const char *gm_env_hugetlb = NULL;

/*
 * Resident anonymous memory beyond the bytes in use right after the last
 * malloc_trim(0): memory that is not malloc's (the stack, data pages,
 * LLVM's relocated data) and free heap no trim can return (pieces smaller
 * than a page); 0 before the first.  The doctor subtracts it from RssAnon
 * to estimate how much free heap a trim would return: glibc goes on
 * counting trimmed pages as free.
 */
int64		gm_anon_outside_malloc = 0;

/*
 * Releases by kind.  Written in normal context or at the idle point, which
 * runs only while normal code waits for the client, so never concurrently.
 */
volatile GmReleaseCount gm_releases[GM_NRELEASE_KINDS];

/* mallinfo2 (glibc 2.33+) and mallinfo, looked up once at load. */
static void *mallinfo2_fn = NULL;
static void *mallinfo_fn = NULL;

/* Parse one environment value as glibc does (decimal or 0x hex). */
static int64
parse_env_number(const char *s)
{
	char	   *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	/* glibc ignores what does not fit its size_t (32-bit). */
	if (errno != 0 || end == s || v > PG_INT64_MAX || v > SIZE_MAX)
		return -1;
	return (int64) v;
}

/* Record what GLIBC_TUNABLES and the MALLOC_*_ variables set. */
static void
read_environment(void)
{
	const char *tunables = getenv("GLIBC_TUNABLES");

	for (int p = 0; p < GM_NPARAMS; p++)
	{
		const char *v = gm_params[p].envvar ? getenv(gm_params[p].envvar) : NULL;

		gm_env_value[p] = (v && *v) ? parse_env_number(v) : -1;
	}

	/* GLIBC_TUNABLES=name=value:name=value; it wins over MALLOC_*_. */
	if (tunables)
	{
		char	   *copy = strdup(tunables);
		char	   *save = NULL;

		for (char *item = copy ? strtok_r(copy, ":", &save) : NULL;
			 item != NULL;
			 item = strtok_r(NULL, ":", &save))
		{
			char	   *eq = strchr(item, '=');

			if (!eq)
				continue;
			*eq = '\0';
			if (strcmp(item, "glibc.malloc.hugetlb") == 0)
				gm_env_hugetlb = strdup(eq + 1);
			for (int p = 0; p < GM_NPARAMS; p++)
				if (strcmp(item, gm_params[p].tunable) == 0)
					gm_env_value[p] = parse_env_number(eq + 1);
		}
		free(copy);
	}

	/*
	 * glibc before 2.35 ignored an mmap threshold above its limit: not
	 * set, the dynamic thresholds not frozen, nothing to restore.
	 */
	if (gm_env_value[GM_MMAP_THRESHOLD] > gm_mmap_threshold_limit())
		gm_env_value[GM_MMAP_THRESHOLD] = -1;
}

/*
 * Probe for fastbins: free more small chunks than the tcache holds and see
 * whether mallinfo counts fastbin chunks.  Newer glibc may drop fastbins,
 * and M_MXFAST then does nothing.  Inconclusive (kept true) when the
 * environment already set mxfast.
 */
static void
probe_fastbins(void)
{
#ifdef GM_HAVE_GLIBC
	void	   *p[32];
	GmMallinfo	before,
				after;

	if (!gm_malloc_is_glibc || gm_env_value[GM_MXFAST] >= 0)
		return;
	gm_mallinfo(&before);
	for (int i = 0; i < lengthof(p); i++)
		p[i] = malloc(24);
	for (int i = 0; i < lengthof(p); i++)
		free(p[i]);
	gm_mallinfo(&after);
	gm_glibc_has_fastbins = after.smblks > before.smblks || after.fsmblks > before.fsmblks;
#endif
}

/* Find out which malloc is live and read the environment; once per process. */
void
gm_allocator_init(void)
{
	Dl_info		info;

	if (dladdr((void *) malloc, &info) && info.dli_fname)
	{
		const char *slash = strrchr(info.dli_fname, '/');

		gm_allocator = strdup(slash ? slash + 1 : info.dli_fname);
		if (gm_allocator == NULL)
			gm_allocator = "unknown";
	}
#ifdef GM_HAVE_GLIBC
	/* glibc's malloc lives in libc.so.6 (libc-2.x.so on old releases). */
	gm_malloc_is_glibc = strncmp(gm_allocator, "libc.so", 7) == 0 ||
		strncmp(gm_allocator, "libc-", 5) == 0;
#endif
#ifdef GM_HAVE_GLIBC
	/*
	 * Looked up by name so that one build runs on glibc before 2.33; here,
	 * not on first use, because the idle point calls gm_mallinfo in signal
	 * context, where dlsym is not safe.
	 */
	mallinfo2_fn = dlsym(RTLD_DEFAULT, "mallinfo2");
	mallinfo_fn = dlsym(RTLD_DEFAULT, "mallinfo");
#endif
	read_environment();
	probe_fastbins();
}

/* The running glibc's version string, or NULL off glibc. */
const char *
gm_glibc_version(void)
{
#ifdef GM_HAVE_GLIBC
	return gnu_get_libc_version();
#else
	return NULL;
#endif
}

/* The largest M_MMAP_THRESHOLD the running glibc accepts (see the compat header). */
int64
gm_mmap_threshold_limit(void)
{
	const char *v = gm_glibc_version();
	int			major = 0,
				minor = 0;

	if (v && sscanf(v, "%d.%d", &major, &minor) == 2 &&
		(major < GM_GLIBC_MMAP_LIMIT_UNTIL_MAJOR ||
		 (major == GM_GLIBC_MMAP_LIMIT_UNTIL_MAJOR && minor < GM_GLIBC_MMAP_LIMIT_UNTIL_MINOR)))
		return GM_GLIBC_MMAP_LIMIT_BEFORE;
	return PG_INT32_MAX;
}

/* mallinfo2 where glibc has it (2.33+), else mallinfo (wraps at 2 GiB). */
void
gm_mallinfo(GmMallinfo *mi)
{
	memset(mi, 0, sizeof(*mi));
#ifdef GM_HAVE_GLIBC
	{
		if (mallinfo2_fn)
		{
			/* struct mallinfo2 is ten size_t fields, as GmMallinfo. */
			*mi = ((GmMallinfo (*) (void)) mallinfo2_fn) ();
		}
		else if (mallinfo_fn)
		{
			struct mallinfo m = ((struct mallinfo (*) (void)) mallinfo_fn) ();

			mi->arena = (unsigned int) m.arena;
			mi->ordblks = (unsigned int) m.ordblks;
			mi->smblks = (unsigned int) m.smblks;
			mi->hblks = (unsigned int) m.hblks;
			mi->hblkhd = (unsigned int) m.hblkhd;
			mi->usmblks = (unsigned int) m.usmblks;
			mi->fsmblks = (unsigned int) m.fsmblks;
			mi->uordblks = (unsigned int) m.uordblks;
			mi->fordblks = (unsigned int) m.fordblks;
			mi->keepcost = (unsigned int) m.keepcost;
		}
	}
#endif
}

/*
 * The end of glibc's main arena, the program break (sbrk(0), no system
 * call): its change is the heap's (mallinfo's arena) in a process whose
 * mallocs all run on its main thread, as a backend's do unless a module's
 * threads allocate.  0 when glibc's malloc is not the live one.
 */
int64
gm_heap_end(void)
{
#ifdef GM_HAVE_GLIBC
	if (gm_malloc_is_glibc)
		return (int64) (uintptr_t) sbrk(0);
#endif
	return 0;
}

/*
 * Microseconds on CLOCK_MONOTONIC, for due times and intervals: a step of
 * the wall clock moves neither.  Async-signal-safe; the same clock in every
 * process.
 */
int64
gm_monotonic_usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/*
 * "Key:   N kB" lines of /proc/PID/status (pid 0: this process) in bytes,
 * nkeys of them read at once into vals (-1 where unknown).
 * Async-signal-safe (open/read/close, no stdio): the idle point calls it
 * in signal context.  The file is read whole, in pieces,
 * line by line: with many supplementary groups its Groups: line alone
 * exceeds 4 kB.  Each key includes its colon and is shorter than 32.
 * snprintf only for another process (pid != 0), never in signal context.
 */
static void
gm_proc_status_fields(int pid, const char *const *keys, int64 *vals, int nkeys)
{
	char		path[64];
	char		buf[1024];
	char		head[48];		/* a line's first characters */
	int			len = 0;
	int			found = 0;
	ssize_t		n = 0;
	int			fd;

	for (int k = 0; k < nkeys; k++)
		vals[k] = -1;
	if (pid == 0)
		strcpy(path, "/proc/self/status");
	else
		snprintf(path, sizeof(path), "/proc/%d/status", pid);
	if ((fd = open(path, O_RDONLY)) < 0)
		return;
	for (;;)
	{
		bool		eof = found == nkeys || (n = read(fd, buf, sizeof(buf))) <= 0;

		/* (at the file's end, not a read error's, a last line without its newline) */
		for (ssize_t i = 0; eof ? len > 0 && n == 0 : i < n && found < nkeys; i++)
		{
			if (!eof && buf[i] != '\n')
			{
				if (len < (int) sizeof(head) - 1)
					head[len++] = buf[i];
				continue;
			}
			head[len] = '\0';
			for (int k = 0; k < nkeys; k++)
			{
				size_t		klen = strlen(keys[k]);
				const char *p = head + klen;
				int64		kb = 0;
				bool		digits = false;

				Assert(klen < 32);
				if (vals[k] >= 0 || strncmp(head, keys[k], klen) != 0)
					continue;
				while (*p == ' ' || *p == '\t')
					p++;
				for (; *p >= '0' && *p <= '9'; p++, digits = true)
					kb = kb * 10 + (*p - '0');
				if (digits)
				{
					vals[k] = kb * 1024;
					found++;
				}
				break;
			}
			len = 0;
		}
		if (eof)
			break;
	}
	close(fd);
}

/* One "Key:   N kB" line of /proc/PID/status in bytes (gm_proc_status_fields); -1 if unknown. */
int64
gm_proc_status_bytes(int pid, const char *key)
{
	int64		val;

	gm_proc_status_fields(pid, &key, &val, 1);
	return val;
}

/* A process's VmData and RssAnon in bytes (pid 0: this one's), in one read of its status (-1 where unknown). */
void
gm_proc_vmdata_rss(int pid, int64 *vmdata, int64 *rss)
{
	static const char *const keys[] = {"VmData:", "RssAnon:"};
	int64		vals[2];

	gm_proc_status_fields(pid, keys, vals, 2);
	*vmdata = vals[0];
	*rss = vals[1];
}

/* This process's VmSize and VmPeak in bytes, in one read of /proc/self/status (-1 where unknown). */
void
gm_proc_vmsize_peak(int64 *size, int64 *peak)
{
	static const char *const keys[] = {"VmSize:", "VmPeak:"};
	int64		vals[2];

	gm_proc_status_fields(0, keys, vals, 2);
	*size = vals[0];
	*peak = vals[1];
}

/*
 * This process's /proc/self/statm, kept open (one descriptor per process,
 * counted with fd.c's AcquireExternalFD; one inherited from a parent is
 * closed and opened again) and read again from its start: -1 when it
 * cannot be opened.
 */
static int
statm_fd(void)
{
	static int	fd = -1;
	static int	fd_pid = 0;
	static bool counted = false;

	if (fd >= 0 && fd_pid == MyProcPid)
		return fd;
	if (fd >= 0)
	{
		/* (the parent's, counted in fd.c's copy too: closed, its count kept) */
		close(fd);
		fd = -1;
	}
	if (!counted && !AcquireExternalFD())
		return -1;
	counted = true;
	if ((fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC)) >= 0)
		fd_pid = MyProcPid;
	return fd;
}

/*
 * This process's stack (VmStk), read from /proc/self/status at its first
 * call and again at the first call a second or more after the last read
 * (GM_STACK_READ_USEC, by the monotonic clock): statm counts it in its
 * data pages, which RLIMIT_DATA and VmData do not.  The main stack only
 * grows, so a value read earlier is at most today's (0 when unreadable).
 */
#define GM_STACK_READ_USEC	((int64) 1000 * 1000)
static int64
stack_bytes(void)
{
	static int64 stack = 0;
	static int	stack_pid = 0;
	static int64 read_at = 0;
	int64		now = gm_monotonic_usec();

	if (stack_pid != MyProcPid || now - read_at >= GM_STACK_READ_USEC || now < read_at)
	{
		int64		v = gm_proc_status_bytes(0, "VmStk:");

		stack = Max(v, 0);
		stack_pid = MyProcPid;
		read_at = now;
	}
	return stack;
}

/*
 * This process's data pages (/proc/self/statm's sixth field) less its
 * stack as last read (stack_bytes): VmData, or a little above it when the
 * stack grew since (an estimate from above of what RLIMIT_DATA counts),
 * and its anonymous resident pages (its resident less its shared pages:
 * RssAnon) into *rss_anon (NULL: not wanted); -1 where unknown.  Much
 * cheaper than /proc/self/status: one short line from a descriptor kept
 * open (a statement's start share and the executor's check read it), and
 * otherwise an open and a close.
 */
int64
gm_proc_statm_self(int64 *rss_anon)
{
	char		buf[256];
	ssize_t		n;
	int			fd;
	int			field = 0;
	int64		vals[6] = {0, 0, 0, 0, 0, 0};
	bool		digits[6] = {false, false, false, false, false, false};
	int64		page = (int64) sysconf(_SC_PAGESIZE);

	if (rss_anon != NULL)
		*rss_anon = -1;
	if ((fd = statm_fd()) >= 0)
		n = pread(fd, buf, sizeof(buf) - 1, 0);
	else if ((fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC)) >= 0)
	{
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
	}
	else
		return -1;
	if (n <= 0)
		return -1;
	for (ssize_t i = 0; i < n && field <= 5; i++)
	{
		if (buf[i] == ' ' || buf[i] == '\n')
			field++;
		else if (buf[i] >= '0' && buf[i] <= '9')
		{
			vals[field] = vals[field] * 10 + (buf[i] - '0');
			digits[field] = true;
		}
	}
	if (rss_anon != NULL && digits[1] && digits[2])
		*rss_anon = Max(vals[1] - vals[2], 0) * page;
	return digits[5] ? Max(vals[5] * page - stack_bytes(), 0) : -1;
}

/* This process's VmData (gm_proc_statm_self), -1 if unknown: a statement's end. */
int64
gm_proc_statm_data_bytes(void)
{
	return gm_proc_statm_self(NULL);
}

/*
 * The bytes in use in a memory context tree: its blocks minus their free
 * space, as tuplesort and hash tables count their own memory (EXPLAIN
 * ANALYZE's figures), not the blocks allocated for it.  Walks every free
 * list of every context in the tree: for one statement's tree, cheap.
 */
int64
gm_context_used(MemoryContext cxt)
{
	MemoryContextCounters c;
	int64		used;

	memset(&c, 0, sizeof(c));
	GM_CONTEXT_STATS(cxt, &c);
	used = (int64) c.totalspace - (int64) c.freespace;
	for (MemoryContext child = cxt->firstchild; child != NULL; child = child->nextchild)
		used += gm_context_used(child);
	return used;
}

/* This process's RssAnon in bytes; -1 if unknown.  Async-signal-safe. */
int64
gm_rss_anon(void)
{
	return gm_proc_status_bytes(0, "RssAnon:");
}

/*
 * Process pid's (0: this one's) RLIMIT_DATA: its soft limit into *soft and
 * hard into *hard, GM_NO_LIMIT for unlimited; false if it cannot be read
 * (gone, another user's).
 */
bool
gm_data_limit(int pid, int64 *soft, int64 *hard)
{
	struct rlimit cur;

	if (prlimit(pid, RLIMIT_DATA, NULL, &cur) != 0)
		return false;
	*soft = cur.rlim_cur == RLIM_INFINITY || cur.rlim_cur > (rlim_t) PG_INT64_MAX ?
		GM_NO_LIMIT : (int64) cur.rlim_cur;
	*hard = cur.rlim_max == RLIM_INFINITY || cur.rlim_max > (rlim_t) PG_INT64_MAX ?
		GM_NO_LIMIT : (int64) cur.rlim_max;
	return true;
}

/*
 * Set process pid's (0: this one's) soft RLIMIT_DATA to soft (GM_NO_LIMIT:
 * unlimited), at most its hard limit, which stays as it is.  Returns the
 * soft limit now in force, or -1 if it could not be set.  A limit below
 * what the process has mapped already is allowed: its next mapping fails.
 */
int64
gm_set_data_limit(int pid, int64 soft)
{
	int64		cur_soft;
	int64		hard;
	struct rlimit want;

	if (!gm_data_limit(pid, &cur_soft, &hard))
		return -1;
	if (soft > hard)
		soft = hard;
	if (soft == cur_soft)
		return soft;
	want.rlim_cur = soft == GM_NO_LIMIT ? RLIM_INFINITY : (rlim_t) soft;
	want.rlim_max = hard == GM_NO_LIMIT ? RLIM_INFINITY : (rlim_t) hard;
#if SIZEOF_SIZE_T < 8
	/* A 32-bit rlim_t cannot hold it: more than the address space anyway. */
	if (soft != GM_NO_LIMIT && (int64) want.rlim_cur != soft)
		want.rlim_cur = RLIM_INFINITY;
#endif
	if (prlimit(pid, RLIMIT_DATA, &want, NULL) != 0)
		return -1;
	return soft;
}

/*
 * Return free heap memory to the OS with malloc_trim(pad); the result is the
 * drop in RssAnon it caused (0 when nothing could be returned).
 */
int64
gm_release(size_t pad)
{
	int64		before,
				after;

	if (!gm_malloc_is_glibc)
		return 0;
	before = gm_rss_anon();
#ifdef GM_HAVE_GLIBC
	malloc_trim(pad);
#endif
	after = gm_rss_anon();
	if (after >= 0 && pad == 0)
	{
		GmMallinfo	mi;

		/*
		 * Right after a full trim, what is resident beyond the bytes in use
		 * is either not malloc's or free heap no trim can return: neither is
		 * what the doctor's free_heap rule is about.
		 */
		gm_mallinfo(&mi);
		gm_anon_outside_malloc = Max(after - (int64) (mi.uordblks + mi.hblkhd), 0);
	}
	if (before < 0 || after < 0 || after > before)
		return 0;
	return before - after;
}

/*
 * gm_release(0), counted as a release of the given kind.  Calls malloc_trim:
 * normal context, or the idle point (see idle.c), only.
 */
void
gm_release_counted(GmReleaseKind kind)
{
	gm_releases[kind].bytes += gm_release(0);
	gm_releases[kind].count++;
}
