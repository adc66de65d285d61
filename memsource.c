/*-------------------------------------------------------------------------
 *
 * memsource.c
 *		Where the server's memory limit and usage come from: the cgroup
 *		(v1 or v2) of the postmaster, a configured cgroup, or the whole
 *		machine; and the readings that go with them (PSI, the kernel's OOM
 *		kills, the commit limit).
 *
 * What limits the server's memory, as the memory monitor reads it every
 * look, from the cgroup of the postmaster (found again when it changes,
 * and every GM_MONITOR_REDETECT_MS) or glibc_malloc.monitor_cgroup:
 *
 *	cgroup v2	memory.current against the lower of memory.high and
 *				memory.max; memory.pressure's "some avg10"
 *	cgroup v1	memory.usage_in_bytes against memory.limit_in_bytes
 *	system		MemTotal - MemAvailable against MemTotal (/proc/meminfo)
 *
 * PSI is read only from the server's own cgroup v2 (memory.pressure, also
 * when the limit is the system's because that cgroup has none; not the root
 * cgroup's), never from the whole machine's /proc/pressure/memory: that
 * one rises with a neighbour's stalls and with page-cache refaults (a
 * database larger than RAM), and acting on it would ask for half of all
 * free heap every 10 s while the server's own usage is far below its limit.
 *
 * In a cgroup, the usage counts what the kernel cannot simply drop: the
 * cgroup's usage minus its file pages (active_file and inactive_file in
 * memory.stat), so that a page cache filling the container is not taken
 * for pressure; shared memory (shared_buffers) and anonymous memory count.
 * Every level from the server's cgroup up to the top of the mount that has
 * a limit is read, and the one with the least room is the limit (a pod or
 * a systemd slice may hold less than the server's own cgroup, and the
 * kernel acts at the first level that is full); without any, the system's
 * memory is.
 *
 * Only the memory monitor (monitor.c) calls it; its state is that
 * process's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include "miscadmin.h"

#include "glibc_malloc.h"

#define GM_MONITOR_REDETECT_MS	10000	/* look for a new limit this often */

const char *const gm_limit_source_names[] = {"none", "system", "cgroup v1", "cgroup v2"};


/* Where to read (the monitor's process-local state). */
static GmLimitSource source = GM_LIMIT_NONE;
static char cgroup_dir[MAXPGPATH];	/* where usage and pressure are read */
static char limit_dir[MAXPGPATH];	/* the level with the least room, last read */

/*
 * Every level at or above the server's cgroup with a limit of its own (up
 * to the mount's top: a cgroup namespace hides the levels above it), the
 * nearest first: a parent (a pod, a systemd slice) may leave less room than
 * the server's own cgroup.  Found again with the cgroup.
 */
#define GM_LIMIT_LEVELS 16
static char limit_dirs[GM_LIMIT_LEVELS][MAXPGPATH];
static int	nlimit_dirs = 0;
static char chosen_dir[MAXPGPATH];	/* the level read last; "" = none */
/* What gm_memsource_glance reads: the level with the least room, and what the usage read added to its own. */
static char glance_dir[MAXPGPATH];
static int64 glance_offset = 0;
#define GM_LIMIT_STICKY	5		/* % of its limit: see gm_memsource_read */
static char psi_dir[MAXPGPATH];	/* the server's own cgroup v2, for PSI; "" = none */
static char cgroup_seen[16384];	/* the postmaster's /proc/PID/cgroup */
static bool truncated_logged = false;
static char cgroup_guc_seen[MAXPGPATH];
static int64 detected_at = 0;	/* monotonic; 0: never */

/* Read a small file into buf (NUL-terminated); false if it cannot be read. */
bool
gm_read_small_file(const char *path, char *buf, size_t size)
{
	int			fd = open(path, O_RDONLY);
	ssize_t		n = 0;
	ssize_t		r;

	if (fd < 0)
		return false;
	while (n < (ssize_t) size - 1 && (r = read(fd, buf + n, size - 1 - n)) > 0)
		n += r;
	close(fd);
	buf[n] = '\0';
	return n > 0;
}

/* A byte count from a cgroup file: -1 for "max" or unreadable. */
static int64
read_bytes(const char *dir, const char *file)
{
	char		path[MAXPGPATH];
	char		buf[64];
	char	   *end;
	int64		v;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	if (!gm_read_small_file(path, buf, sizeof(buf)) || strncmp(buf, "max", 3) == 0)
		return -1;
	errno = 0;
	v = strtoll(buf, &end, 10);
	if (errno != 0 || end == buf || v < 0)
		return -1;
	/* cgroup v1 says "no limit" with PAGE_COUNTER_MAX pages. */
	if (v >= ((int64) 1 << 60))
		return -1;
	return v;
}

/* The value of "key N" or "key: N" in text read from such a file; -1 if absent. */
static int64
find_key(const char *buf, const char *key)
{
	size_t		klen = strlen(key);

	for (const char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
	{
		if (strncmp(line, key, klen) == 0 && (line[klen] == ' ' || line[klen] == ':'))
		{
			const char *p = line + klen + 1;
			char	   *end;
			int64		v;

			while (*p == ' ')
				p++;
			errno = 0;
			v = strtoll(p, &end, 10);
			return errno != 0 || end == p || v < 0 ? -1 : v;
		}
	}
	return -1;
}

/* PSI's "some avg10=" from a pressure file, in percent; -1 if unreadable. */
static double
read_psi(const char *path)
{
	char		buf[512];
	char	   *p;

	if (!gm_read_small_file(path, buf, sizeof(buf)) || strncmp(buf, "some", 4) != 0 ||
		(p = strstr(buf, "avg10=")) == NULL)
		return -1;
	return strtod(p + 6, NULL);
}

/* Whether dir/file exists. */
static bool
has_file(const char *dir, const char *file)
{
	char		path[MAXPGPATH];

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	return access(path, R_OK) == 0;
}

/* The cgroup version whose memory files dir holds (2, 1), or 0. */
static GmLimitSource
cgroup_kind(const char *dir)
{
	if (has_file(dir, "memory.max") && has_file(dir, "memory.current"))
		return GM_LIMIT_CGROUP_V2;
	if (has_file(dir, "memory.limit_in_bytes") && has_file(dir, "memory.usage_in_bytes"))
		return GM_LIMIT_CGROUP_V1;
	return GM_LIMIT_NONE;
}

/* The limit in dir of a cgroup of the given kind, -1 = none. */
static int64
cgroup_limit(GmLimitSource kind, const char *dir)
{
	int64		max;
	int64		high;

	if (kind == GM_LIMIT_CGROUP_V1)
		return read_bytes(dir, "memory.limit_in_bytes");
	max = read_bytes(dir, "memory.max");
	high = read_bytes(dir, "memory.high");
	if (max < 0 || (high >= 0 && high < max))
		return high;
	return max;
}

/*
 * From a cgroup directory, every directory at or above it (up to top) that
 * has a limit, into limit_dirs (the nearest first) and the nearest into
 * limit_dir; false when none has.
 */
static bool
find_limit(GmLimitSource kind, const char *dir, const char *top)
{
	char		d[MAXPGPATH];

	strlcpy(d, dir, sizeof(d));
	strlcpy(limit_dir, dir, sizeof(limit_dir));
	nlimit_dirs = 0;
	for (;;)
	{
		char	   *slash;

		/* (cgroup v1: a parent without use_hierarchy does not count its children) */
		if (cgroup_kind(d) == kind && cgroup_limit(kind, d) >= 0 && nlimit_dirs < GM_LIMIT_LEVELS &&
			!(kind == GM_LIMIT_CGROUP_V1 && strcmp(d, dir) != 0 && read_bytes(d, "memory.use_hierarchy") == 0))
			strlcpy(limit_dirs[nlimit_dirs++], d, MAXPGPATH);
		if (strlen(d) <= strlen(top) || (slash = strrchr(d, '/')) == NULL || slash == d)
			break;
		*slash = '\0';
	}
	if (nlimit_dirs > 0)
		strlcpy(limit_dir, limit_dirs[0], sizeof(limit_dir));
	return nlimit_dirs > 0;
}

/* Decode mountinfo's octal escapes (\040 for a space) in place. */
static void
unescape(char *str)
{
	char	   *out = str;

	for (char *in = str; *in; in++)
	{
		if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' && in[2] >= '0' && in[2] <= '7' &&
			in[3] >= '0' && in[3] <= '7')
		{
			*out++ = (char) ((in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0'));
			in += 3;
		}
		else
			*out++ = *in;
	}
	*out = '\0';
}

/*
 * The directory of the cgroup at path rel (as /proc/PID/cgroup gives it)
 * in the first mount of fstype (with the memory controller, for v1) whose
 * root contains it; false if none is mounted here.
 */
static bool
cgroup_mount_dir(bool v2, const char *rel, char *dir, size_t size, char *top, size_t topsize)
{
	FILE	   *f = fopen("/proc/self/mountinfo", "r");
	char		line[4096];
	bool		found = false;

	if (f == NULL)
		return false;
	/* "id parent maj:min root mountpoint opts [optional...] - fstype source superopts" */
	while (!found && fgets(line, sizeof(line), f) != NULL)
	{
		char		root[MAXPGPATH];
		char		mnt[MAXPGPATH];
		char		fstype[32];
		char		superopts[512] = "";
		char	   *dash = strstr(line, " - ");
		const char *r = rel;
		size_t		rlen;

		if (dash == NULL || sscanf(line, "%*s %*s %*s %1023s %1023s", root, mnt) != 2 ||
			sscanf(dash + 3, "%31s %*s %511s", fstype, superopts) < 1)
			continue;
		if (v2 ? strcmp(fstype, "cgroup2") != 0 :
			(strcmp(fstype, "cgroup") != 0 || strstr(superopts, "memory") == NULL))
			continue;
		unescape(root);
		unescape(mnt);

		/* A namespaced mount shows the cgroup's path below its root. */
		rlen = strlen(root);
		if (strcmp(root, "/") != 0)
		{
			if (strncmp(rel, root, rlen) != 0 || (rel[rlen] != '/' && rel[rlen] != '\0'))
				continue;
			r = rel + rlen;
		}
		snprintf(dir, size, "%s%s", mnt, strcmp(r, "/") == 0 ? "" : r);
		strlcpy(top, mnt, topsize);
		found = true;
	}
	fclose(f);
	return found;
}

/*
 * Find where the postmaster's memory is accounted: its cgroup v2 if the
 * memory controller is on there and a limit is set at or above it, else its
 * cgroup v1 memory cgroup likewise, else the whole system.  pg_cgroup is
 * the postmaster's /proc/PID/cgroup.
 */
static void
detect_auto(const char *pg_cgroup)
{
	char		v1path[MAXPGPATH] = "";
	char		v2path[MAXPGPATH] = "";
	bool		have_v1 = false;
	bool		have_v2 = false;

	/* "hierarchy:controllers:path" lines */
	for (const char *line = pg_cgroup; line && *line;)
	{
		const char *c1 = strchr(line, ':');
		const char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		const char *eol = strchr(line, '\n');
		int			len;

		if (c2 == NULL || (eol && c2 > eol))
			break;
		len = (eol ? eol : line + strlen(line)) - (c2 + 1);
		if (c2 == c1 + 1 && strncmp(line, "0:", 2) == 0)
		{
			snprintf(v2path, sizeof(v2path), "%.*s", len, c2 + 1);
			have_v2 = true;
		}
		else
		{
			char		ctl[256];

			snprintf(ctl, sizeof(ctl), ",%.*s,", (int) (c2 - c1 - 1), c1 + 1);
			if (strstr(ctl, ",memory,"))
			{
				snprintf(v1path, sizeof(v1path), "%.*s", len, c2 + 1);
				have_v1 = true;
			}
		}
		line = eol ? eol + 1 : NULL;
	}

	source = GM_LIMIT_SYSTEM;
	strlcpy(cgroup_dir, "", sizeof(cgroup_dir));
	strlcpy(psi_dir, "", sizeof(psi_dir));
	for (int v = 2; v >= 1; v--)
	{
		GmLimitSource kind = v == 2 ? GM_LIMIT_CGROUP_V2 : GM_LIMIT_CGROUP_V1;
		char		dir[MAXPGPATH];
		char		top[MAXPGPATH];

		if (!(v == 2 ? have_v2 : have_v1) ||
			!cgroup_mount_dir(v == 2, v == 2 ? v2path : v1path, dir, sizeof(dir), top, sizeof(top)))
			continue;
		/*
		 * The server's own cgroup v2 has PSI even without a limit; not the
		 * real root's (the machine's), which has no memory.current, unlike
		 * the root of a cgroup namespace (a container).
		 */
		if (v == 2 && has_file(dir, "memory.pressure") &&
			(strcmp(dir, top) != 0 || has_file(dir, "memory.current")))
			strlcpy(psi_dir, dir, sizeof(psi_dir));
		if (cgroup_kind(dir) != kind)
			continue;
		if (find_limit(kind, dir, top))
		{
			source = kind;
			strlcpy(cgroup_dir, dir, sizeof(cgroup_dir));
			return;
		}
	}
}

/*
 * Work out where to read, when glibc_malloc.monitor_cgroup or the
 * postmaster's cgroup changed, and every GM_MONITOR_REDETECT_MS.  A
 * configured directory is used as it is.
 */
void
gm_memsource_detect(const char *configured)
{
	static char pg_cgroup[16384];
	char		path[64];
	const char *guc = configured ? configured : "";
	bool		changed;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int) PostmasterPid);
	if (!gm_read_small_file(path, pg_cgroup, sizeof(pg_cgroup)))
		pg_cgroup[0] = '\0';
	else if (strlen(pg_cgroup) == sizeof(pg_cgroup) - 1)
	{
		/* Cut: the memory line may be missing.  Keep what was found before. */
		if (!truncated_logged)
			ereport(WARNING,
					(errmsg("glibc_malloc memory monitor: %s is longer than %zu bytes; the cgroup is not read again",
							path, sizeof(pg_cgroup) - 1),
					 errhint("Set glibc_malloc.monitor_cgroup to the cgroup directory to watch.")));
		truncated_logged = true;
		if (detected_at != 0 && guc[0] == '\0')
			return;
		pg_cgroup[0] = '\0';
	}

	changed = strcmp(pg_cgroup, cgroup_seen) != 0 || strcmp(guc, cgroup_guc_seen) != 0;
	if (detected_at != 0 && !changed &&
		gm_monotonic_usec() - detected_at < (int64) GM_MONITOR_REDETECT_MS * 1000)
		return;
	detected_at = gm_monotonic_usec();
	strlcpy(cgroup_seen, pg_cgroup, sizeof(cgroup_seen));
	strlcpy(cgroup_guc_seen, guc, sizeof(cgroup_guc_seen));

	if (guc[0] != '\0')
	{
		strlcpy(psi_dir, "", sizeof(psi_dir));
		source = cgroup_kind(guc);
		strlcpy(cgroup_dir, guc, sizeof(cgroup_dir));
		strlcpy(limit_dir, guc, sizeof(limit_dir));
		strlcpy(limit_dirs[0], guc, MAXPGPATH);
		nlimit_dirs = 1;
		if (source == GM_LIMIT_NONE && changed)
			ereport(LOG,
					(errmsg("glibc_malloc memory monitor: \"%s\" holds no cgroup memory files", guc),
					 errhint("Set glibc_malloc.monitor_cgroup to a cgroup v2 directory (memory.current, memory.max) or a cgroup v1 memory directory (memory.usage_in_bytes, memory.limit_in_bytes), or to '' to find the server's own.")));
	}
	else
		detect_auto(pg_cgroup);
	ereport(DEBUG1,
			(errmsg_internal("glibc_malloc memory monitor: reading %s %s (limit from %s)",
							 gm_limit_source_names[source], cgroup_dir, limit_dir)));
}

/*
 * From /proc/meminfo, read once: the commit limit's headroom, and for the
 * system source the machine's limit and usage (MemTotal - MemAvailable of
 * MemTotal).  Unreadable: all stay unknown.
 */
static void
read_meminfo(GmLimits *l)
{
	char		buf[8192];
	int64		total;
	int64		avail;
	int64		commit_limit;
	int64		committed;

	if (!gm_read_small_file("/proc/meminfo", buf, sizeof(buf)))
		return;
	commit_limit = find_key(buf, "CommitLimit");
	committed = find_key(buf, "Committed_AS");
	if (commit_limit >= 0 && committed >= 0)
		l->commit_headroom = (commit_limit - committed) * 1024;
	if (source != GM_LIMIT_SYSTEM)
		return;
	total = find_key(buf, "MemTotal");
	avail = find_key(buf, "MemAvailable");
	if (total > 0 && avail >= 0)
	{
		l->limit = total * 1024;
		l->usage = Max(total - avail, 0) * 1024;
	}
}

/*
 * The OOM kills the kernel counted in the server's own cgroup (and below
 * it): cgroup v2's memory.events oom_kill and oom_group_kill, cgroup v1's
 * memory.oom_control oom_kill (kernel 4.13 and later).  On the system
 * source, the server's own cgroup v2 if it is in one (psi_dir).  Absent or
 * unreadable: -1.
 */
static void
read_oom_kills(GmLimits *l)
{
	char		path[MAXPGPATH];
	char		buf[512];
	bool		v1 = source == GM_LIMIT_CGROUP_V1;
	const char *dir = source == GM_LIMIT_CGROUP_V1 || source == GM_LIMIT_CGROUP_V2 ? cgroup_dir : psi_dir;

	if (dir[0] == '\0')
		return;
	snprintf(path, sizeof(path), "%s/%s", dir, v1 ? "memory.oom_control" : "memory.events");
	if (!gm_read_small_file(path, buf, sizeof(buf)))
		return;
	l->oom_kills = find_key(buf, "oom_kill");
	if (!v1)
		l->oom_group_kills = find_key(buf, "oom_group_kill");
}

/* A cgroup level's usage without its page cache (which the kernel reclaims); -1 = unreadable. */
static int64
level_usage(bool v1, const char *dir)
{
	char		path[MAXPGPATH];
	char		buf[8192];
	int64		use = read_bytes(dir, v1 ? "memory.usage_in_bytes" : "memory.current");
	int64		active = -1;
	int64		inactive = -1;

	if (use < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/memory.stat", dir);
	if (gm_read_small_file(path, buf, sizeof(buf)))
	{
		active = find_key(buf, v1 ? "total_active_file" : "active_file");
		inactive = find_key(buf, v1 ? "total_inactive_file" : "inactive_file");
	}
	return Max(use - Max(active, 0) - Max(inactive, 0), 0);
}

/*
 * A glance between two reads: the usage, as gm_memsource_read counted it,
 * of the limit it read last (the level with the least room then, with the
 * offset a kept level adds, or the machine); -1 = unknown.  A cgroup's two
 * small files, or /proc/meminfo: cheap enough for every GM_GUARD_TICK_MS.
 */
int64
gm_memsource_glance(void)
{
	if ((source == GM_LIMIT_CGROUP_V1 || source == GM_LIMIT_CGROUP_V2) && glance_dir[0] != '\0')
	{
		int64		use = level_usage(source == GM_LIMIT_CGROUP_V1, glance_dir);

		return use < 0 ? -1 : use + glance_offset;
	}
	if (source == GM_LIMIT_SYSTEM)
	{
		GmLimits	l;

		l.limit = -1;
		l.usage = -1;
		read_meminfo(&l);
		return l.usage;
	}
	return -1;
}

/* Read the current limit, usage and pressure (and where the limit is). */
void
gm_memsource_read(GmLimits *l)
{
	char		path[MAXPGPATH];

	l->source = source;
	l->dir = limit_dir;
	l->limit = -1;
	l->usage = -1;
	l->psi = -1;
	l->commit_headroom = PG_INT64_MIN;
	l->oom_kills = -1;
	l->oom_group_kills = -1;
	read_meminfo(l);
	read_oom_kills(l);
	if (source == GM_LIMIT_CGROUP_V1 || source == GM_LIMIT_CGROUP_V2)
	{
		bool		v1 = source == GM_LIMIT_CGROUP_V1;

		/*
		 * The level with the least room: the kernel acts at the first one
		 * full.  The one of the last reading keeps its limit while another's
		 * room is not less by GM_LIMIT_STICKY % of the smaller limit, so
		 * that two levels with about the same room do not take turns (the
		 * guard's levels would jump); the room is always the least.
		 */
		int			best = -1;
		int			chosen_level = -1;
		int64		lim[GM_LIMIT_LEVELS];
		int64		use[GM_LIMIT_LEVELS];

		for (int i = 0; i < nlimit_dirs; i++)
		{
			const char *dir = limit_dirs[i];

			lim[i] = cgroup_limit(source, dir);
			use[i] = level_usage(v1, dir);
			if (strcmp(dir, chosen_dir) == 0)
				chosen_level = i;
			if (use[i] < 0)
				continue;		/* unreadable */
			/* (a level without a limit: a configured one, or lifted since) */
			if (best < 0 ||
				(lim[i] >= 0 && (lim[best] < 0 || lim[i] - use[i] < lim[best] - use[best])))
				best = i;
		}
		if (best >= 0 && chosen_level >= 0 && chosen_level != best &&
			use[chosen_level] >= 0 && lim[chosen_level] >= 0 && lim[best] >= 0 &&
			(lim[chosen_level] - use[chosen_level]) - (lim[best] - use[best]) <
			Min(lim[chosen_level], lim[best]) / 100 * GM_LIMIT_STICKY)
		{
			/*
			 * The level read last keeps its limit (the guard's levels stay),
			 * and its usage is made to leave the least room of any.
			 */
			l->limit = lim[chosen_level];
			l->usage = Max(lim[chosen_level] - (lim[best] - use[best]), 0);
			strlcpy(limit_dir, limit_dirs[chosen_level], sizeof(limit_dir));
		}
		else if (best >= 0)
		{
			l->limit = lim[best];
			l->usage = use[best];
			strlcpy(limit_dir, limit_dirs[best], sizeof(limit_dir));
			strlcpy(chosen_dir, limit_dirs[best], sizeof(chosen_dir));
		}
		else
			chosen_dir[0] = '\0';
		glance_dir[0] = '\0';
		if (best >= 0 && l->usage >= 0)
		{
			strlcpy(glance_dir, limit_dirs[best], sizeof(glance_dir));
			glance_offset = l->usage - use[best];
		}
		/* The cgroup's own PSI (v1: the server's v2 one, if any); never the machine's. */
		snprintf(path, sizeof(path), "%s/memory.pressure", v1 ? psi_dir : cgroup_dir);
		if (!v1 || psi_dir[0] != '\0')
			l->psi = read_psi(path);
	}
	else if (source == GM_LIMIT_SYSTEM)
	{
		/* (read_meminfo set limit and usage from MemTotal, MemAvailable) */
		/* The server's own cgroup v2's PSI, if it is in one (see above). */
		if (psi_dir[0] != '\0')
		{
			snprintf(path, sizeof(path), "%s/memory.pressure", psi_dir);
			l->psi = read_psi(path);
		}
	}
}

