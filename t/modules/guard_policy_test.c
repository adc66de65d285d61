/*
 * guard_policy_test.c: table tests of the memory guard's policy
 * (guard_policy.c), compiled with it by t/035_guard_policy.pl.  Prints TAP.
 * No server, no cgroup: the policy is a pure function.
 */
#include "postgres.h"

#include <stdio.h>
#include <string.h>

#include "glibc_malloc.h"

#define MB ((int64) 1024 * 1024)

static int	ntests = 0;
static int	nfailed = 0;

/* One TAP line. */
static void
ok(bool cond, const char *name)
{
	ntests++;
	if (!cond)
		nfailed++;
	printf("%sok %d - %s\n", cond ? "" : "not ", ntests, name);
}

/* A process: VmData, RssAnon, growth, whether it waits for its client, whether a statement started. */
static GmGuardProc
proc(int pid, int64 vmdata, int64 growth, bool waits, bool started)
{
	GmGuardProc p;

	memset(&p, 0, sizeof(p));
	p.slot = pid;
	p.pid = pid;
	p.vmdata = vmdata;
	p.rss = vmdata;
	p.growth = growth;
	p.grown = 0;
	p.waits_for_client = waits;
	p.started = started;
	p.cur_limit = GM_NO_LIMIT;
	return p;
}

/* A process's group as the policy takes it: its leader's pid, or its own. */
static int
group_key(const GmGuardProc *p)
{
	return p->group != 0 ? p->group : p->pid;
}

/* name and suffix, in a static buffer (for one ok() at a time). */
static const char *
joined(const char *name, const char *suffix)
{
	static char buf[300];

	snprintf(buf, sizeof(buf), "%s%s", name, suffix);
	return buf;
}

/* A pseudo-random number (a fixed sequence). */
static uint32 seed = 12345;
static uint32
rnd(void)
{
	seed = seed * 1103515245 + 12345;
	return (seed >> 8) & 0xffffff;
}

/*
 * n sessions in pg_sleep (stalled), pids 1..n, each 3 MB, started at
 * since0 + i, then a statement that just started (pid n + 1, since 500):
 * n + 1 processes.
 */
static int
sleepers_and_new(GmGuardProc *procs, int n, int64 since0)
{
	for (int i = 0; i < n; i++)
	{
		procs[i] = proc(i + 1, 3 * MB, 0, false, false);
		procs[i].since = since0 + i;
		procs[i].stalled = true;
	}
	procs[n] = proc(n + 1, 3 * MB, 0, false, true);
	procs[n].fresh = true;
	procs[n].since = 500;
	return n + 1;
}

/* The process of pid in procs (the policy sorts them). */
static GmGuardProc *
find(GmGuardProc *procs, int n, int pid)
{
	for (int i = 0; i < n; i++)
		if (procs[i].pid == pid)
			return &procs[i];
	return NULL;
}

/*
 * A burst, look after look: 8 sorts of 60 MB start at once where 2.5 fit
 * (150 MB of headroom: 586 of 800 MB used by others), each growing 4 to 6
 * MB per look while its limit lets it.  One whose next step passes its
 * limit gets the ERROR and frees what it holds; one that reaches 60 MB
 * completes and frees it.  At least 2 complete, and the usage never passes
 * the target.  pooled: from sessions whose growth is known (0), fresh for
 * their first 2 looks (windows); old: beside a statement that began before them,
 * growing 1 MB a look (its growth taken from the 586 MB).
 */
static void
burst_sim(bool pooled, bool old)
{
	GmGuardInput in;
	GmGuardDecision d;
	GmGuardProc pr[9];
	int64		vm[8];
	int64		grew[8];
	bool		active[8];
	int			completed = 0;
	int			failed = 0;
	bool		over = false;
	bool		old_starved = false;
	int			n = old ? 9 : 8;
	char		name[200];

	for (int i = 0; i < 8; i++)
	{
		vm[i] = 3 * MB + i * 64 * 1024;
		grew[i] = pooled ? 0 : GM_GROWTH_UNKNOWN;
		active[i] = true;
	}
	for (int look = 0; look < 400 && completed + failed < 8; look++)
	{
		int64		used = 586 * MB;

		for (int i = 0; i < 8; i++)
			used += vm[i] - 3 * MB;
		over = over || used > 736 * MB;
		memset(&in, 0, sizeof(in));
		in.limit = 800 * MB;
		in.usage = used;
		in.engaged = true;
		for (int i = 0; i < 8; i++)
		{
			pr[i] = proc(i + 1, vm[i], grew[i], !active[i], look == 0);
			pr[i].since = i + 1;
			pr[i].fresh = pooled && active[i] && look < 2;
			pr[i].since_vmdata = 3 * MB;
		}
		if (old)
		{
			pr[8] = proc(100, 200 * MB + look * MB, MB, false, false);
			pr[8].since = 0;
		}
		gm_guard_policy(&in, pr, n, &d);
		/* The older statement's next step of 1 MB always fits in its room from the budget. */
		if (old && find(pr, n, 100)->allow < MB)
			old_starved = true;
		for (int i = 0; i < 8; i++)
		{
			GmGuardProc *p = find(pr, n, i + 1);
			int64		step = (4 + (i + look) % 3) * MB;

			if (!active[i])
				continue;
			if (vm[i] + step > p->limit)
			{
				active[i] = false;	/* out of memory: it frees all */
				vm[i] = 3 * MB;
				grew[i] = 0;
				failed++;
			}
			else if ((vm[i] += step) >= 63 * MB)
			{
				active[i] = false;
				vm[i] = 3 * MB;
				grew[i] = 0;
				completed++;
			}
			else
				grew[i] = step;
		}
	}
	/*
	 * Beside an older statement, 1 (as with the policy before fresh
	 * statements were told apart): it is the earliest, and takes half of
	 * what is left after the growth at each look (the second to complete
	 * runs short of it); its own steps always fit.
	 */
	snprintf(name, sizeof(name), "a burst of 8 where 2.5 fit%s%s",
			 pooled ? ", from pooled sessions" : "", old ? ", beside an older statement" : "");
	ok(completed >= (old ? 1 : 2), joined(name, old ? ": at least 1 completes" : ": at least 2 complete"));
	ok(!over, joined(name, ": the usage stays under the target"));
	if (old)
		ok(!old_starved, joined(name, ": the older statement's next step always fits"));
}

/*
 * A creeping burst, look after look: 24 processes (8 parallel hash joins of
 * 3 processes each, on 2 CPUs) grow 0.6 MB a look each, less than their
 * reserve, from 880 MB used by others in 1200 MB; the limits the monitor
 * sets stay in force until it sets others.  One whose next step passes its
 * limit gets the ERROR and frees what it holds; one that reaches 60 MB
 * completes and frees it.  The usage never passes the target by more than
 * the reserves (the kernel's limit is 64 MB above the target), and some
 * complete.
 */
static void
creep_sim(void)
{
	GmGuardInput in;
	GmGuardDecision d;
	GmGuardProc pr[24];
	int64		vm[24];
	int64		cur[24];
	bool		active[24];
	int64		peak = 0;
	int64		bound = 0;
	int			completed = 0;
	int			failed = 0;
	GmGuardLevels lv;

	gm_guard_levels(1200 * MB, &lv);
	for (int i = 0; i < 24; i++)
	{
		vm[i] = 3 * MB;
		cur[i] = GM_NO_LIMIT;
		active[i] = true;
	}
	for (int look = 0; look < 2000 && completed + failed < 24; look++)
	{
		int64		used = 880 * MB;

		for (int i = 0; i < 24; i++)
			used += vm[i];
		memset(&in, 0, sizeof(in));
		in.limit = 1200 * MB;
		in.usage = used;
		in.engaged = true;
		for (int i = 0; i < 24; i++)
		{
			pr[i] = proc(i + 1, vm[i], active[i] ? 6 * MB / 10 : 0, !active[i], look == 0);
			pr[i].in_statement = active[i];
			pr[i].since = i / 3 + 1;
			pr[i].since_vmdata = 3 * MB;
			pr[i].cur_limit = cur[i];
		}
		gm_guard_policy(&in, pr, 24, &d);
		peak = Max(peak, used);
		bound = Max(bound, lv.target + 24 * d.reserve);
		for (int i = 0; i < 24; i++)
		{
			GmGuardProc *p = find(pr, 24, i + 1);
			int64		step = 6 * MB / 10;

			if (p->set)
				cur[i] = p->limit;
			if (!active[i])
				continue;
			if (vm[i] + step > cur[i])
			{
				active[i] = false;	/* out of memory: it frees all */
				vm[i] = 3 * MB;
				failed++;
			}
			else if ((vm[i] += step) >= 60 * MB)
			{
				active[i] = false;
				vm[i] = 3 * MB;
				completed++;
			}
		}
	}
	ok(peak <= bound && peak < 1200 * MB,
	   "24 processes creeping 0.6 MB a look each (less than a reserve): the usage passes the target by at most the reserves, never the limit");
	ok(completed >= 1, "24 creeping processes: some complete");
	ok(completed + failed == 24, "24 creeping processes: each completes or fails, none creeps on forever");
}

/*
 * The pid of process i of group_sim: its query's leader (i % 3 == 0) is
 * 1..8, in the order the queries started; the workers, started after all
 * the leaders, 101..108 and 201..208.
 */
static int
pid_of(int i)
{
	return i / 3 + 1 + 100 * (i % 3);
}

/*
 * A burst of parallel queries, look after look: 8 parallel hash joins of 3
 * processes each (a leader and 2 workers, each building its own hash table
 * of 120 MB) start in the same look, in 1200 MB of which others use others
 * bytes (100 MB: about 2.7 fit).  Each process grows 3 to 7 MB a look
 * while its limit lets it; a query ends when one of its processes passes
 * its limit (the ERROR ends its workers: all 3 free what they hold) or
 * when all 3 reach 120 MB.
 * grouped: the caller tells the policy which processes are one query's.
 * Returns how many queries complete; sets *over if the usage passes the
 * target.
 */
static int
group_sim(bool grouped, int64 others, bool *over)
{
	GmGuardInput in;
	GmGuardDecision d;
	GmGuardProc pr[24];
	int64		vm[24];
	bool		done[24];
	bool		active[8];
	int			completed = 0;
	int			ended = 0;
	GmGuardLevels lv;

	gm_guard_levels(1200 * MB, &lv);
	*over = false;
	for (int i = 0; i < 24; i++)
	{
		vm[i] = 3 * MB;
		done[i] = false;
	}
	for (int q = 0; q < 8; q++)
		active[q] = true;
	for (int look = 0; look < 2000 && ended < 8; look++)
	{
		int64		used = others;

		for (int i = 0; i < 24; i++)
			used += vm[i];
		*over = *over || used > lv.target;
		memset(&in, 0, sizeof(in));
		in.limit = 1200 * MB;
		in.usage = used;
		in.engaged = true;
		for (int i = 0; i < 24; i++)
		{
			bool		a = active[i / 3];

			pr[i] = proc(pid_of(i), vm[i], a && !done[i] && look > 0 ? (3 + (i * 7 + look) % 5) * MB : 0, !a, look == 0);
			pr[i].in_statement = a;
			pr[i].since = 1;
			pr[i].since_vmdata = 3 * MB;
			pr[i].group = grouped ? pid_of(i / 3 * 3) : 0;
		}
		gm_guard_policy(&in, pr, 24, &d);
		for (int q = 0; q < 8; q++)
		{
			bool		failed = false;
			bool		all = true;

			if (!active[q])
				continue;
			for (int i = q * 3; i < q * 3 + 3; i++)
			{
				GmGuardProc *p = find(pr, 24, pid_of(i));
				int64		step = (3 + (i * 7 + look + 1) % 5) * MB;

				if (done[i])
					continue;
				if (vm[i] + step > p->limit)
					failed = true;
				else if ((vm[i] += step) >= 123 * MB)
					done[i] = true;
				all = all && done[i];
			}
			if (failed || all)
			{
				active[q] = false;
				ended++;
				completed += !failed;
				for (int i = q * 3; i < q * 3 + 3; i++)
					vm[i] = 3 * MB;
			}
		}
	}
	return completed;
}

int
main(void)
{
	GmGuardLevels lv;
	GmGuardInput in;
	GmGuardDecision d;
	GmGuardProc procs[256];
	static GmGuardProc bigprocs[1000];
	int64		sum;

	/* No pool (pool_share 0) unless a table says so. */
	memset(&in, 0, sizeof(in));

	/* Levels: 800 MB: margin 64 MB (8 %), target 736, engage 576, release 536. */
	gm_guard_levels(800 * MB, &lv);
	ok(lv.target == 736 * MB, "800 MB: the target is 736 MB");
	ok(lv.margin == 64 * MB, "800 MB: the margin is 64 MB");
	ok(lv.engage == 736 * MB - 160 * MB, "800 MB: engages 20 % of the limit below the target");
	ok(lv.release == lv.engage - 40 * MB, "800 MB: releases 5 % below that");
	gm_guard_levels(4000 * MB, &lv);
	ok(lv.margin == 200 * MB, "4000 MB: the margin is 5 % (more than 64 MB)");
	gm_guard_levels(200 * MB, &lv);
	ok(lv.margin == 30 * MB, "200 MB: the margin is at most 15 %");

	/* Engaging and releasing, with hysteresis. */
	gm_guard_levels(800 * MB, &lv);
	ok(!gm_guard_engaged_after(800 * MB, lv.engage - 1, false), "below the engage level: not engaged");
	ok(gm_guard_engaged_after(800 * MB, lv.engage, false), "at the engage level: engaged");
	ok(gm_guard_engaged_after(800 * MB, lv.release, true), "engaged stays engaged down to the release level");
	ok(!gm_guard_engaged_after(800 * MB, lv.release - 1, true), "and lifts below it");
	ok(!gm_guard_engaged_after(-1, 100 * MB, true), "no limit: never engaged");
	ok(!gm_guard_engaged_after(800 * MB, -1, true), "usage unknown: never engaged");

	/* The HINT's remedy names what limits the server: the machine or a container. */
	ok(strcmp(gm_guard_hint_remedy(GM_LIMIT_SYSTEM), "add memory to the machine") == 0,
	   "the whole machine's memory (memory_guard = machine): the HINT says add memory to the machine");
	ok(strcmp(gm_guard_hint_remedy(GM_LIMIT_CGROUP_V2), "raise the container's memory limit") == 0 &&
	   strcmp(gm_guard_hint_remedy(GM_LIMIT_CGROUP_V1), "raise the container's memory limit") == 0,
	   "a cgroup's limit (v1 or v2): the HINT says raise the container's memory limit");

	/* Not engaged: no limits; those set are lifted. */
	in.limit = 800 * MB;
	in.usage = 100 * MB;
	in.engaged = false;
	in.asked_pending = 0;
	procs[0] = proc(1, 50 * MB, 0, true, false);
	procs[1] = proc(2, 50 * MB, 0, true, false);
	procs[1].cur_limit = 60 * MB;
	gm_guard_policy(&in, procs, 2, &d);
	ok(!d.engaged && d.headroom == -1, "not engaged: no headroom");
	ok(find(procs, 2, 1)->limit == GM_NO_LIMIT && !find(procs, 2, 1)->set, "not engaged: nothing to set");
	ok(find(procs, 2, 2)->set && find(procs, 2, 2)->limit == GM_NO_LIMIT, "not engaged: a limit set is lifted");

	/* Engaged, one runaway and one idle: the budget is shared, never exceeded. */
	in.usage = 700 * MB;
	in.engaged = true;
	procs[0] = proc(1, 20 * MB, 0, true, false);	/* idle */
	procs[1] = proc(2, 300 * MB, 10 * MB, false, false);	/* grows */
	gm_guard_policy(&in, procs, 2, &d);
	ok(d.engaged && d.headroom == 36 * MB, "engaged at 700 of 800 MB: 36 MB of headroom");
	ok(d.nworking == 1, "one working");
	sum = find(procs, 2, 1)->allow + find(procs, 2, 2)->allow;
	ok(sum <= d.budget, "the grants together fit the budget");
	ok(d.message == 36 * MB, "an idle one's message room: all of the 36 MB budget");
	ok(find(procs, 2, 1)->allow == 0 && find(procs, 2, 2)->allow == 36 * MB,
	   "the idle one, not growing, takes nothing from the budget; the working one all of it");
	ok(find(procs, 2, 1)->reserve == 4 * MB && find(procs, 2, 1)->message == 36 * MB &&
	   find(procs, 2, 1)->limit == 20 * MB + 36 * MB + 4 * MB,
	   "the idle one's limit is its VmData, room for a client message of the whole 36 MB budget (not taken from it) and a 4 MB reserve");
	ok(find(procs, 2, 2)->message == 0, "a working one gets no message room: its grant is its room");
	ok(find(procs, 2, 2)->limit == 300 * MB + 36 * MB + 4 * MB, "the working one's: VmData, its grant and the reserve");
	ok(find(procs, 2, 2)->lowered && find(procs, 2, 2)->set, "a first limit counts as lowered");

	/* Mapped but not resident, of working processes, comes off the budget. */
	procs[0] = proc(1, 100 * MB, 2 * MB, false, false);
	procs[0].rss = 80 * MB;
	gm_guard_policy(&in, procs, 1, &d);
	ok(d.budget == 16 * MB, "20 MB mapped but not resident comes off 36 MB of headroom");
	in.asked_pending = 4 * MB;
	gm_guard_policy(&in, procs, 1, &d);
	ok(d.budget == 20 * MB, "free heap asked for and not returned yet adds to it");
	in.asked_pending = 0;

	/* At the target: no budget at all. */
	in.usage = 740 * MB;
	procs[0] = proc(1, 100 * MB, 5 * MB, false, false);
	procs[1] = proc(2, 10 * MB, 0, true, false);
	gm_guard_policy(&in, procs, 2, &d);
	ok(d.headroom == 0 && d.budget == 0, "past the target: 0 headroom, 0 budget");
	ok(find(procs, 2, 1)->allow == 0 && find(procs, 2, 2)->allow == 0, "nobody may map more from the budget");
	ok(find(procs, 2, 2)->limit == 10 * MB + 4 * MB, "but an idle backend's limit never sits at its VmData: the reserve");
	ok(find(procs, 2, 2)->message == 0, "and no message room without a budget");

	/* With 7 MB of budget, an idle backend's message room is 4 MB of it (its grain). */
	in.usage = 729 * MB;
	gm_guard_policy(&in, procs, 2, &d);
	ok(d.budget == 7 * MB && find(procs, 2, 2)->allow + find(procs, 2, 2)->message == 4 * MB,
	   "7 MB of budget: an idle backend may take a message of 4 MB, what the budget allows in its 4 MB grain");
	/* With 3 MB of budget, no message room, and nothing held back for one. */
	in.usage = 733 * MB;
	gm_guard_policy(&in, procs, 2, &d);
	ok(d.budget == 3 * MB && d.message == 0 && find(procs, 2, 2)->message == 0,
	   "3 MB of budget: no message room (its 4 MB grain)");
	/* Nobody idle: nothing held back. */
	procs[1].waits_for_client = false;
	in.usage = 700 * MB;
	gm_guard_policy(&in, procs, 2, &d);
	ok(d.nworking == 2 && procs[0].message == 0 && procs[1].message == 0, "nobody idle: no message room");
	procs[1].waits_for_client = true;
	/* With 450 MB of budget, 64 MB: an 8 MB query text needs 52 MB, an 8 MB Bind 40 MB. */
	in.limit = 2000 * MB;
	in.usage = 1450 * MB;
	procs[0] = proc(1, 100 * MB, 5 * MB, false, false);
	gm_guard_policy(&in, procs, 2, &d);
	ok(d.budget > 400 * MB && find(procs, 2, 2)->message == 64 * MB,
	   "a large budget: an idle backend may take a client message of 64 MB (an 8 MB query text needs 52 MB)");
	in.limit = 800 * MB;
	in.usage = 740 * MB;

	/*
	 * Several working, their growth unknown: half of the budget in equal
	 * shares, half halved, earliest first; all of it handed out.
	 */
	in.usage = 600 * MB;
	procs[0] = proc(1, 50 * MB, GM_GROWTH_UNKNOWN, false, false);
	procs[0].since = 30;
	procs[1] = proc(2, 100 * MB, GM_GROWTH_UNKNOWN, false, false);
	procs[1].since = 20;
	procs[2] = proc(3, 200 * MB, GM_GROWTH_UNKNOWN, false, false);
	procs[2].since = 10;
	gm_guard_policy(&in, procs, 3, &d);
	ok(find(procs, 3, 3)->allow + find(procs, 3, 2)->allow + find(procs, 3, 1)->allow == 136 * MB &&
	   find(procs, 3, 3)->allow > find(procs, 3, 2)->allow + 15 * MB &&
	   find(procs, 3, 2)->allow >= 136 * MB / 6 + 136 * MB / 8 - MB &&
	   find(procs, 3, 1)->allow >= 136 * MB / 6 + 136 * MB / 8 - MB,
	   "136 MB, three just started: a sixth each, then half of the other half to the earliest, a quarter to the next, the rest to the latest");

	/*
	 * 20 statements start at once with 553 MB of budget (a mixed workload
	 * engaged with room to spare): each gets at least its share of half,
	 * 13 MB, where halving all of it left the twelfth and later less than
	 * their reserve.
	 */
	in.limit = 3000 * MB;
	in.usage = 2296 * MB;
	for (int i = 0; i < 20; i++)
	{
		procs[i] = proc(i + 1, 3 * MB, GM_GROWTH_UNKNOWN, false, false);
		procs[i].started = true;
		procs[i].since = 100 - i;
	}
	gm_guard_policy(&in, procs, 20, &d);
	{
		bool		fair = true;
		int64		total = 0;

		for (int pid = 1; pid <= 20; pid++)
		{
			fair = fair && find(procs, 20, pid)->allow >= d.budget / 40 - 256 * 1024 &&
				find(procs, 20, pid)->allow % (256 * 1024) == 0;
			total += find(procs, 20, pid)->allow;
		}
		ok(d.engaged && d.budget > 500 * MB && fair && total == d.budget,
		   "20 statements just started: each at least a fortieth of the budget, in 256 kB steps; all of it handed out");
	}

	/*
	 * 30 sessions in pg_sleep (stalled: their wait event says so) and a
	 * statement that just started (t/048): the halvings go to the one
	 * that runs, not to the sleepers ahead of it, which keep their equal
	 * shares; all of the budget handed out.  Before, the earliest sleeper
	 * got 36 MB and the new statement 2 MB.
	 */
	in.limit = 800 * MB;
	in.usage = 600 * MB;
	gm_guard_policy(&in, procs, sleepers_and_new(procs, 30, 1), &d);
	{
		bool		equal = true;
		int64		total = 0;

		for (int pid = 1; pid <= 30; pid++)
			equal = equal && find(procs, 31, pid)->allow == find(procs, 31, 1)->allow;
		for (int pid = 1; pid <= 31; pid++)
			total += find(procs, 31, pid)->allow;
		ok(d.engaged && d.budget > 100 * MB && equal && total == d.budget &&
		   find(procs, 31, 1)->allow <= d.budget / 2 / 31 + 256 * 1024 &&
		   find(procs, 31, 31)->allow >= d.budget / 2,
		   "30 sessions in pg_sleep and a statement that just started: it takes the halvings, each sleeper its equal share, all of the budget handed out");
	}
	/* The same sleepers alone: nobody claims the halvings, the earliest takes them. */
	gm_guard_policy(&in, procs, 30, &d);
	ok(find(procs, 30, 1)->allow > find(procs, 30, 2)->allow &&
	   find(procs, 30, 1)->allow >= d.budget / 4,
	   "sleepers alone: the halvings go earliest first, as to a burst whose growth is not known");

	/*
	 * A long aggregate that did not grow over the last window (its hash
	 * table fills before it doubles), beside the sleepers and a statement
	 * that just started: it does not wait, so it keeps the first halving.
	 */
	(void) sleepers_and_new(procs, 30, 2);
	procs[31] = proc(32, 80 * MB, 0, false, false);
	procs[31].since = 1;
	gm_guard_policy(&in, procs, 32, &d);
	ok(find(procs, 32, 32)->allow >= d.budget / 4 && find(procs, 32, 31)->allow >= d.budget / 8 &&
	   find(procs, 32, 1)->allow == find(procs, 32, 2)->allow &&
	   find(procs, 32, 1)->allow <= d.budget / 2 / 32 + 256 * 1024,
	   "an aggregate that did not grow for a window keeps the first halving, the new statement the rest; the sleepers their equal shares");

	/*
	 * A parallel query whose leader waits to write to its client while
	 * its two workers run, beside 10 sleepers: the query claims the
	 * halvings together (its three processes equal parts); an all-waiting
	 * query beside it keeps equal shares.
	 */
	for (int i = 0; i < 10; i++)
	{
		procs[i] = proc(i + 1, 3 * MB, 0, false, false);
		procs[i].since = i + 1;
		procs[i].stalled = true;
	}
	for (int i = 10; i < 13; i++)
	{
		procs[i] = proc(i + 1, 20 * MB, 0, false, false);
		procs[i].since = 50;
		procs[i].group = 11;
	}
	procs[10].stalled = true;
	for (int i = 13; i < 15; i++)
	{
		procs[i] = proc(i + 1, 20 * MB, 0, false, false);
		procs[i].since = 40;
		procs[i].group = 14;
		procs[i].stalled = true;
	}
	gm_guard_policy(&in, procs, 15, &d);
	{
		int64		total = 0;

		for (int pid = 1; pid <= 15; pid++)
			total += find(procs, 15, pid)->allow;
		ok(total == d.budget &&
		   find(procs, 15, 12)->allow == find(procs, 15, 13)->allow &&
		   find(procs, 15, 11)->allow + 256 * 1024 >= find(procs, 15, 12)->allow &&
		   find(procs, 15, 12)->allow >= d.budget / 2 / 3 &&
		   find(procs, 15, 14)->allow == find(procs, 15, 1)->allow &&
		   find(procs, 15, 15)->allow == find(procs, 15, 1)->allow,
		   "a parallel query with running workers claims the halvings in equal parts, its waiting leader too; an all-waiting query keeps equal shares");
	}

	/*
	 * A fast burst: 8 sorts engage the guard before their growth is known,
	 * 106 MB of budget.  The earliest gets far more than the latest, so
	 * that the first ones can complete rather than all failing together.
	 */
	in.limit = 1200 * MB;
	in.usage = 1136 * MB - 106 * MB;
	for (int i = 0; i < 8; i++)
	{
		procs[i] = proc(i + 1, 100 * MB, GM_GROWTH_UNKNOWN, false, false);
		procs[i].started = true;
		procs[i].since = 100 - i;	/* pid 8 began first */
	}
	gm_guard_policy(&in, procs, 8, &d);
	ok(d.engaged && find(procs, 8, 8)->allow >= 4 * find(procs, 8, 1)->allow && find(procs, 8, 1)->allow > 0,
	   "8 sorts, growth unknown: the earliest at least four times the latest's share, the latest a share");

	/*
	 * A thousand statements working, usage moving by 1 MB: their shares, in
	 * 256 kB steps, do not move, so no limit is set again.
	 */
	in.limit = 10000 * MB;
	in.usage = 8010 * MB;
	for (int i = 0; i < 1000; i++)
	{
		bigprocs[i] = proc(i + 1, 10 * MB, 0, false, false);
		bigprocs[i].started = true;
		bigprocs[i].since = 2000 - i;
	}
	gm_guard_policy(&in, bigprocs, 1000, &d);
	for (int i = 0; i < 1000; i++)
		bigprocs[i].cur_limit = bigprocs[i].limit;
	ok(d.engaged && d.budget > 900 * MB, "1000 working at 8010 of 10000 MB: engaged, a budget of 990 MB");
	in.usage = 8011 * MB;
	gm_guard_policy(&in, bigprocs, 1000, &d);
	{
		int			set = 0;

		for (int i = 0; i < 1000; i++)
			set += bigprocs[i].set;
		if (set > 25)
			printf("# %d set\n", set);
		ok(set <= 25, "1000 working, usage up 1 MB: at most 25 limits set again (the first halves, the last)");
	}
	in.limit = 800 * MB;

	/*
	 * Twice the growth, in the order the work began: 8 sorts each grew 10
	 * MB over the last window, 100 MB of budget: the first five get their
	 * 20 MB, the last three nothing but their reserve (their next
	 * allocation fails, early).
	 */
	in.usage = 636 * MB;
	for (int i = 0; i < 8; i++)
	{
		procs[i] = proc(i + 1, 40 * MB, 10 * MB, false, false);
		procs[i].since = 100 - i;	/* pid 8 began first */
	}
	gm_guard_policy(&in, procs, 8, &d);
	ok(d.budget == 100 * MB, "8 sorts at 636 of 800 MB: a budget of 100 MB");
	{
		bool		first = true;
		bool		last = true;

		for (int pid = 8; pid >= 4; pid--)
			first = first && find(procs, 8, pid)->allow == 20 * MB;
		for (int pid = 3; pid >= 1; pid--)
			last = last && find(procs, 8, pid)->allow == 0;
		ok(first, "the five that began first may map twice their growth");
		ok(last && find(procs, 8, 1)->limit == 44 * MB, "the three that began last: their VmData and the reserve");
	}

	/*
	 * Parallel queries that began in the same look are served a query at a
	 * time: 2 queries of 3 processes (leaders 20 and 10; workers 121, 122
	 * and 111, 112, started after them: the monitor gives a worker its
	 * leader's pid as its group, a leader 0), each process grew 10 MB, 100
	 * MB of budget.  The query of the lower leader pid takes its 60 MB first
	 * (an order that holds from one look to the next), the other the 40 MB
	 * left.
	 */
	{
		GmGuardProc pr[7];
		int			pids[7] = {20, 10, 121, 111, 122, 112, 30};
		int64		vms[7] = {50, 40, 45, 60, 42, 41, 70};
		int64		a[3],
					b[3];

		for (int round = 0; round < 2; round++)
		{
			/* round 1: growth not known, a statement alone (pid 30) too */
			int			np = round == 0 ? 6 : 7;

			for (int i = 0; i < np; i++)
			{
				pr[i] = proc(pids[i], vms[i] * MB, round == 0 ? 10 * MB : 0, false, false);
				pr[i].since = 7;
				pr[i].group = pids[i] > 100 ? pids[i] % 100 / 10 * 10 : 0;
			}
			gm_guard_policy(&in, pr, np, &d);
			for (int k = 0; k < 3; k++)
			{
				a[k] = find(pr, np, k == 0 ? 10 : 110 + k)->allow;
				b[k] = find(pr, np, k == 0 ? 20 : 120 + k)->allow;
			}
			if (round == 0)
				ok(d.budget == 100 * MB && a[0] == 20 * MB && a[1] == 20 * MB && a[2] == 20 * MB &&
				   b[0] + b[1] + b[2] == 40 * MB,
				   "2 parallel queries of the same look, 100 MB of budget: the first query's 3 processes take twice their growth together, the other the rest");

			/*
			 * Growth not known: half of the budget in equal shares (7 MB
			 * each, in 256 kB steps); of the other half (51 MB) the first
			 * query takes the halvings of its 3 processes (7/8), in equal
			 * parts (14.75 MB), the second 7/8 of what is left (1.75 MB
			 * each), the last statement the rest (0.75 MB); the earliest,
			 * the first query's largest (111), what the rounding left.
			 */
			else
				ok(d.budget == 100 * MB &&
				   a[0] == 21 * MB + 3 * MB / 4 && a[2] == a[0] && a[1] == a[0] + 3 * MB / 4 &&
				   b[0] == 8 * MB + 3 * MB / 4 && b[1] == b[0] && b[2] == b[0] &&
				   find(pr, np, 30)->allow == 7 * MB + 3 * MB / 4,
				   "3 statements of one look, growth not known: the first query's 3 processes 21.75 MB each and the rounding's 0.75 MB to the earliest, the second's 8.75, the last statement 7.75");
		}
	}

	/*
	 * Little left (1.5 MB), a query of 3 processes and a statement alone in
	 * the same look, growth not known: what the rounding to 256 kB leaves
	 * goes to the earliest, not down the order to the statement that began
	 * last.
	 */
	{
		GmGuardProc pr[4];
		int64		usage0 = in.usage;
		int64		least = PG_INT64_MAX;

		for (int i = 0; i < 4; i++)
		{
			pr[i] = proc(i == 3 ? 40 : 10 + (i > 0) * 100 + i, 40 * MB, 0, false, false);
			pr[i].since = 7;
			pr[i].group = i == 1 || i == 2 ? 10 : 0;
		}
		in.usage = 734 * MB + MB / 2;
		gm_guard_policy(&in, pr, 4, &d);
		for (int i = 0; i < 3; i++)
			least = Min(least, find(pr, 4, i == 0 ? 10 : 110 + i)->allow);
		ok(d.budget == 3 * MB / 2 && least >= find(pr, 4, 40)->allow &&
		   find(pr, 4, 10)->allow == MB && find(pr, 4, 111)->allow == MB / 4 &&
		   find(pr, 4, 112)->allow == MB / 4 && find(pr, 4, 40)->allow == 0,
		   "1.5 MB left, a query of 3 and a statement of the same look: the query's processes 256 kB each, its earliest (the leader) also the 768 kB the rounding left, the statement nothing");
		in.usage = usage0;
	}

	/*
	 * Statements that just started (fresh): what they claim, and the
	 * shares after the growth.
	 */
	{
		GmGuardProc pr[21];
		GmGuardInput in2;

		/*
		 * Short statements only (a look of t/044 before an ANALYZE got out
		 * of memory): 21 working, every one started within the last 500
		 * ms; 16 grew 10 to 16 MB over the last window, in their previous
		 * statements, their current ones at most 2 MB so far; 340 MB of
		 * budget.  The ANALYZE (last, 16 MB, 9 MB since it began) had no
		 * room: the others took twice their window's growth.
		 */
		memset(&in2, 0, sizeof(in2));
		in2.limit = 4000 * MB;
		in2.engaged = true;
		in2.usage = 4000 * MB - 200 * MB - 340 * MB;
		for (int i = 0; i < 21; i++)
		{
			pr[i] = proc(i + 1, 22 * MB, i < 16 ? (10 + i % 7) * MB : 5 * MB, false, false);
			pr[i].since = i + 1;
			pr[i].fresh = true;
			pr[i].since_vmdata = 22 * MB - (i % 3) * MB;
		}
		pr[20].vmdata = 16 * MB;
		pr[20].since_vmdata = 7 * MB;
		gm_guard_policy(&in2, pr, 21, &d);
		ok(d.budget == 340 * MB && find(pr, 21, 21)->allow >= 16 * MB,
		   "21 short statements, 16 grew in their previous ones: the last, an ANALYZE, may map 16 MB");

		/*
		 * A later look of t/044 (DEBUG2, before an ANALYZE got out of
		 * memory): 18 inserts done growing at 20 to 24 MB, each fresh and
		 * claiming twice the 11 to 17 MB it mapped since it began (344
		 * MB), 315 MB of budget, and the ANALYZE that began after them at
		 * 5.6 MB since its start.  Without a start share it gets nothing
		 * of the budget; holding one (taken as it started, 16 MB), it may
		 * map what it has not mapped of it before the inserts' claims.
		 */
		{
			GmGuardProc pr[19];
			GmGuardInput in2;

			memset(&in2, 0, sizeof(in2));
			in2.limit = 5000 * MB;
			in2.engaged = true;
			in2.usage = 5000 * MB - 250 * MB - 315 * MB;
			for (int i = 0; i < 19; i++)
			{
				pr[i] = proc(i + 1, (20 + i % 5) * MB, (11 + i % 7) * MB, false, false);
				pr[i].since = i + 1;
				pr[i].fresh = true;
				pr[i].since_vmdata = pr[i].vmdata - (11 + i % 7) * MB;
		}
		pr[18] = proc(19, 12 * MB, 0, false, true);
		pr[18].since = 19;
		pr[18].fresh = true;
		pr[18].since_vmdata = 12 * MB - 5734 * 1024;
		gm_guard_policy(&in2, pr, 19, &d);
		ok(d.budget == 315 * MB && find(pr, 19, 19)->allow == 0,
		   "18 inserts done growing claim twice what they mapped: the ANALYZE that began after them gets nothing of the budget");
		pr[18].reserved = gm_guard_start_share(315 * MB, 0, 18) - 5734 * 1024;
		gm_guard_policy(&in2, pr, 19, &d);
		ok(pr[18].reserved > 10 * MB && find(pr, 19, 19)->allow >= pr[18].reserved &&
		   find(pr, 19, 19)->limit >= 12 * MB + 10 * MB + 4 * MB,
		   "holding a start share: it may map the 10 MB it has not mapped of it, and its reserve");
		}

		/*
		 * A fresh statement that mapped nothing yet claims nothing of its
		 * window's 20 MB (its session's previous statement's), ahead of a
		 * later one that grows 10 MB a window.
		 */
		pr[0] = proc(1, 30 * MB, 20 * MB, false, true);
		pr[0].since = 1;
		pr[0].fresh = true;
		pr[0].since_vmdata = 30 * MB;
		pr[1] = proc(2, 60 * MB, 10 * MB, false, false);
		pr[1].since = 2;
		in2.usage = 4000 * MB - 200 * MB - 30 * MB;
		gm_guard_policy(&in2, pr, 2, &d);
		ok(d.budget == 30 * MB && find(pr, 2, 2)->allow >= 20 * MB && find(pr, 2, 1)->allow > 0,
		   "a fresh statement does not claim its session's previous growth: the later one gets twice its own, the fresh one a share");

		/*
		 * Its VmData below where its work began (it freed): it claims 0,
		 * not a negative growth; of the 10 MB left, 2.5 MB equal shares
		 * each, the earliest half of the other 5 MB.
		 */
		pr[0].since_vmdata = 40 * MB;
		gm_guard_policy(&in2, pr, 2, &d);
		ok(find(pr, 2, 1)->allow == 5 * MB && find(pr, 2, 2)->allow == 25 * MB,
		   "a fresh statement below its VmData at the start claims nothing: 5 MB of shares, the other 25 MB");

		/*
		 * A long aggregate that began first (grew 4 MB over the last
		 * window) beside 5 fresh short statements that mapped nothing yet,
		 * 100 MB of budget: it keeps the earliest half of what is left,
		 * room for its hash table to double by 32 MB.
		 */
		in2.usage = 4000 * MB - 200 * MB - 100 * MB;
		pr[0] = proc(1, 200 * MB, 4 * MB, false, false);
		pr[0].since = 1;
		for (int i = 1; i < 6; i++)
		{
			pr[i] = proc(i + 1, 10 * MB, 0, false, true);
			pr[i].since = i + 1;
			pr[i].fresh = true;
			pr[i].since_vmdata = 10 * MB;
		}
		gm_guard_policy(&in2, pr, 6, &d);
		ok(d.budget == 100 * MB && find(pr, 6, 1)->allow >= 32 * MB,
		   "a long aggregate beside 5 fresh short statements: 32 MB of room or more, the earliest half of what is left");

		/* All fresh (a burst from pooled sessions): the earliest first. */
		for (int i = 0; i < 8; i++)
		{
			pr[i] = proc(i + 1, 100 * MB, 0, false, true);
			pr[i].since = 100 - i;
			pr[i].fresh = true;
			pr[i].since_vmdata = 100 * MB;
		}
		in2.limit = 1200 * MB;
		in2.usage = 1136 * MB - 106 * MB;
		gm_guard_policy(&in2, pr, 8, &d);
		ok(d.engaged && find(pr, 8, 8)->allow >= 4 * find(pr, 8, 1)->allow && find(pr, 8, 1)->allow > 0,
		   "8 sorts from pooled sessions, all fresh: the earliest at least four times the latest's share");
	}

	/* A small raise waits while the limit leaves room; a lowering never does. */
	in.usage = 700 * MB;
	procs[0] = proc(1, 100 * MB, GM_GROWTH_UNKNOWN, false, false);
	procs[0].cur_limit = 100 * MB + 38 * MB;
	gm_guard_policy(&in, procs, 1, &d);
	ok(!procs[0].set && !procs[0].lowered, "a raise under 4 MB waits");
	procs[0] = proc(1, 100 * MB, 0, false, false);
	procs[0].cur_limit = 100 * MB + 44 * MB;
	gm_guard_policy(&in, procs, 1, &d);
	ok(procs[0].set && procs[0].lowered, "a lowering is set");

	/*
	 * Who works: a statement started since the last look, or runs now; not
	 * one that waits for its client between statements, whatever it grew in
	 * the window.
	 */
	in.usage = 700 * MB;
	procs[0] = proc(1, 20 * MB, 0, false, false);
	procs[1] = proc(2, 20 * MB, 0, true, true);
	procs[2] = proc(3, 20 * MB, 2 * MB, true, false);
	procs[3] = proc(4, 20 * MB, 0, true, false);
	procs[4] = proc(5, 20 * MB, GM_GROWTH_UNKNOWN, true, false);
	gm_guard_policy(&in, procs, 5, &d);
	ok(find(procs, 5, 1)->working, "running a statement with a small known growth: working");
	ok(find(procs, 5, 2)->working, "a statement started since the last look: working, even if it ended");
	ok(!find(procs, 5, 3)->working, "waiting for its client, though it grew 2 MB in the window: not working");
	ok(!find(procs, 5, 4)->working && !find(procs, 5, 5)->working, "waiting for its client, not growing: not working");
	/* A COPY FROM STDIN (or a suspended portal) waits for its client inside its statement. */
	procs[0] = proc(1, 20 * MB, 0, true, false);
	procs[0].in_statement = true;
	gm_guard_policy(&in, procs, 1, &d);
	ok(procs[0].working, "waiting for its client inside a top-level statement (COPY FROM STDIN): working");

	/* Nobody works: those not working share all of the budget. */
	procs[0] = proc(1, 20 * MB, 0, true, false);
	procs[1] = proc(2, 20 * MB, 0, true, false);
	gm_guard_policy(&in, procs, 2, &d);
	ok(find(procs, 2, 1)->allow == 18 * MB && find(procs, 2, 2)->allow == 18 * MB,
	   "nobody works: two idle share all 36 MB");

	/*
	 * 60 pooled sessions, 44 MB of headroom (692 of 800 MB): a statement
	 * starts in one that was idle, and it may map at least 20 MB at the
	 * next look (before: 370 kB, a share of half of the budget).  Their
	 * reserves at the 1 MB floor fit the 64 MB margin: nothing is counted
	 * as usage.
	 */
	in.usage = 692 * MB;
	for (int i = 0; i < 60; i++)
		procs[i] = proc(i + 1, 12 * MB, 0, true, false);
	procs[7].started = true;
	gm_guard_policy(&in, procs, 60, &d);
	ok(d.nworking == 1, "60 idle sessions, a statement starts in one: one working");
	ok(d.shift == 0 && d.budget == 44 * MB, "60 reserves of 1 MB fit the 64 MB margin: no shift, 44 MB of budget");
	ok(find(procs, 60, 8)->allow >= 20 * MB, "which may map at least 20 MB of the 44 MB of budget");
	sum = 0;
	for (int i = 0; i < 60; i++)
		sum += procs[i].allow;
	ok(sum <= d.budget, "all grants together within the budget");

	/*
	 * The same pool, the look right after the last sort ended (t/036's run):
	 * the session of that sort waits for its client again, its VmData back
	 * to 3.4 MB, but it grew 29.7 MB over its last window; a statement just
	 * started in another one (2.7 MB).  The one that waits is not working:
	 * the budget (49.5 MB) goes to the one that started.  Before, both
	 * counted as working, the finished one (smallest first) took twice its
	 * growth, all of the budget, and the new sort was left its reserve.
	 */
	in.usage = 722202624;
	for (int i = 0; i < 60; i++)
		procs[i] = proc(i + 1, 2674688, 0, true, false);
	procs[0] = proc(1, 2674688, 0, false, true);
	procs[1] = proc(2, 3366912, 29716480, true, false);
	procs[1].rss = 3973120;
	procs[1].grown = -29024256;
	gm_guard_policy(&in, procs, 60, &d);
	ok(!find(procs, 60, 2)->working, "a session whose statement ended waits for its client: not working, whatever it grew");
	ok(d.nworking == 1 && find(procs, 60, 1)->working, "the one whose statement started is the only one working");
	ok(find(procs, 60, 1)->allow >= 40 * MB,
	   "and may map at least 40 MB of the 49.5 MB budget (before: nothing)");
	ok(find(procs, 60, 2)->allow <= d.budget / 2 / 59, "the finished one: at most an idle share");

	/*
	 * 1000 idle backends limited at the last look, nobody working: the
	 * usage moves by 1 MB, and no limit changes (their shares are rounded
	 * down to 256 kB): no prlimit for any of them.
	 */
	{
		static GmGuardProc many[1000];
		int			nset = 0;

		in.limit = 5000 * MB;
		in.usage = 4300 * MB;
		for (int i = 0; i < 1000; i++)
			many[i] = proc(i + 1, 4 * MB, 0, true, false);
		gm_guard_policy(&in, many, 1000, &d);
		for (int i = 0; i < 1000; i++)
			many[i].cur_limit = many[i].limit;
		in.usage += MB;
		gm_guard_policy(&in, many, 1000, &d);
		for (int i = 0; i < 1000; i++)
			nset += many[i].set;
		ok(nset == 0, "1000 idle backends: a usage 1 MB higher changes none of their limits");
		in.usage -= 2 * MB;
		gm_guard_policy(&in, many, 1000, &d);
		nset = 0;
		for (int i = 0; i < 1000; i++)
			nset += many[i].set;
		ok(nset == 0, "nor 1 MB lower");
		in.limit = 800 * MB;
	}

	/*
	 * The reserves fit in half of the margin (32 MB of 64 here): 8 of 4 MB
	 * do; 30 are shrunk to a thirtieth of 32 MB, and the decision says so;
	 * 48 to the 1 MB floor, which all fit in the whole margin.
	 */
	in.usage = 700 * MB;
	for (int i = 0; i < 48; i++)
		procs[i] = proc(i + 1, 12 * MB, 0, true, false);
	gm_guard_policy(&in, procs, 8, &d);
	ok(d.reserve == 4 * MB && !d.reserve_shrunk, "8 backends: a reserve of 4 MB each");
	gm_guard_policy(&in, procs, 30, &d);
	ok(d.reserve_shrunk && d.reserve == 32 * MB / 30 && d.reserve_wanted == 4 * MB,
	   "30 backends: the reserve is shrunk to fit half of the margin, and says so");
	ok(d.reserve * 30 <= 32 * MB, "all reserves together within half of the margin");
	gm_guard_policy(&in, procs, 48, &d);
	ok(d.reserve == MB && d.shift == 0, "48 backends: the 1 MB floor, all in the 64 MB margin, no shift");
	ok(procs[0].limit > procs[0].vmdata, "an idle backend's limit still above its VmData");

	/*
	 * 250 backends in 800 MB: shrunk to fit, each would get 131 kB, too
	 * little for catalog catch-up or NOTIFY delivery at the idle point
	 * (where an ERROR is FATAL).  Each keeps 1 MB; the 186 MB beyond the
	 * margin count as usage, up to 20 % of the limit (160 MB): the
	 * guard engages at 416 MB instead of 576 MB, and not at 415 MB.
	 */
	for (int i = 0; i < 250; i++)
		procs[i] = proc(i + 1, 4 * MB, 0, true, false);
	ok(gm_guard_reserve_shift(800 * MB, 250) == 160 * MB, "250 reserves of 1 MB: 186 MB beyond the 64 MB margin, counted up to 160 MB (20 %)");
	ok(gm_guard_reserve_shift(800 * MB, 100) == 36 * MB, "100 reserves of 1 MB: 36 MB");
	ok(gm_guard_reserve_shift(800 * MB, 64) == 0 && gm_guard_reserve_shift(800 * MB, 0) == 0,
	   "64 reserves of 1 MB fit the margin: no shift");
	in.engaged = false;
	in.usage = 416 * MB;
	gm_guard_policy(&in, procs, 250, &d);
	ok(d.engaged && d.reserve == MB && d.reserve_shrunk && d.shift == 160 * MB,
	   "250 backends at 416 MB: engaged, each with a reserve of 1 MB (the floor)");
	ok(procs[0].limit >= procs[0].vmdata + MB, "each limit leaves at least the 1 MB reserve");
	in.usage = 415 * MB;
	gm_guard_policy(&in, procs, 250, &d);
	ok(!d.engaged, "at 415 MB not engaged yet");
	in.engaged = true;

	/*
	 * glibc_malloc.memory_guard: which sources each value guards.  A whole
	 * machine's ("system") only with machine; none never; off nothing.
	 */
	ok(!gm_guard_covers(GM_GUARD_OFF, GM_LIMIT_CGROUP_V1) && !gm_guard_covers(GM_GUARD_OFF, GM_LIMIT_CGROUP_V2) &&
	   !gm_guard_covers(GM_GUARD_OFF, GM_LIMIT_SYSTEM), "off: guards nothing");
	ok(gm_guard_covers(GM_GUARD_CGROUP, GM_LIMIT_CGROUP_V1) && gm_guard_covers(GM_GUARD_CGROUP, GM_LIMIT_CGROUP_V2),
	   "cgroup: guards a cgroup v1 or v2 limit");
	ok(!gm_guard_covers(GM_GUARD_CGROUP, GM_LIMIT_SYSTEM), "cgroup: not a whole machine (opt-in)");
	ok(gm_guard_covers(GM_GUARD_MACHINE, GM_LIMIT_SYSTEM), "machine: guards a whole machine");
	ok(gm_guard_covers(GM_GUARD_OBSERVE, GM_LIMIT_CGROUP_V1) && gm_guard_covers(GM_GUARD_OBSERVE, GM_LIMIT_CGROUP_V2) &&
	   !gm_guard_covers(GM_GUARD_OBSERVE, GM_LIMIT_SYSTEM) && !gm_guard_covers(GM_GUARD_OBSERVE, GM_LIMIT_NONE),
	   "observe: decides for what cgroup guards");
	ok(gm_guard_covers(GM_GUARD_MACHINE, GM_LIMIT_CGROUP_V1) && gm_guard_covers(GM_GUARD_MACHINE, GM_LIMIT_CGROUP_V2),
	   "machine: a cgroup limit, where there is one, still");
	ok(!gm_guard_covers(GM_GUARD_MACHINE, GM_LIMIT_NONE) && !gm_guard_covers(GM_GUARD_CGROUP, GM_LIMIT_NONE),
	   "nothing readable: never guarded");
	ok(!gm_guard_covers(GM_GUARD_NMODES, GM_LIMIT_SYSTEM) && !gm_guard_covers(GM_GUARD_MACHINE, GM_NLIMIT_SOURCES),
	   "out of range: never guarded");

	/*
	 * A whole machine of 16 GB (MemTotal), usage MemTotal - MemAvailable:
	 * the same levels as a cgroup of 16 GB: margin 5 % (819 MB), engaged
	 * from 75 %; at 90 % the budget is the headroom up to the target.
	 */
	gm_guard_levels(16384 * MB, &lv);
	ok(lv.margin == 16384 * MB * 5 / 100 && lv.target == 16384 * MB - lv.margin,
	   "16 GB machine: the margin is 5 % of MemTotal");
	ok(!gm_guard_engaged_after(16384 * MB, 12000 * MB, false) && gm_guard_engaged_after(16384 * MB, 12400 * MB, false),
	   "16 GB machine: engaged from 75 % of MemTotal, not at 73 %");
	in.limit = 16384 * MB;
	in.usage = 14746 * MB;
	in.engaged = true;
	in.asked_pending = 0;
	procs[0] = proc(1, 2000 * MB, 100 * MB, false, false);
	procs[1] = proc(2, 30 * MB, 0, true, false);
	gm_guard_policy(&in, procs, 2, &d);
	ok(d.engaged && d.headroom == lv.target - 14746 * MB && d.budget == d.headroom,
	   "16 GB machine at 90 %: the budget is the headroom up to the target");
	ok(find(procs, 2, 1)->allow + find(procs, 2, 2)->allow <= d.budget &&
	   find(procs, 2, 1)->limit == ((2000 * MB + find(procs, 2, 1)->allow + d.reserve) & ~(int64) 1),
	   "16 GB machine: the grants fit the budget; the working one's limit is VmData, grant, reserve");
	in.usage = 16300 * MB;
	gm_guard_policy(&in, procs, 2, &d);
	ok(d.headroom == 0 && find(procs, 2, 1)->allow == 0 && find(procs, 2, 1)->limit == 2000 * MB + 4 * MB,
	   "16 GB machine past the target (other programs grew): nothing more but the reserve");

	/*
	 * Invariants over 2000 pseudo-random snapshots (a fixed seed): the
	 * grants and what working processes get back of their reserves fit the
	 * budget, the reserves half of the margin, no idle process's limit is at
	 * or below VmData, and every working process is one that started or
	 * runs (some begin in the same look, some in parallel queries).
	 */
	{
		int			bad_budget = 0,
					bad_reserve = 0,
					bad_limit = 0,
					bad_working = 0,
					bad_order = 0;
		int64		kept[200];

		for (int round = 0; round < 2000; round++)
		{
			int			np = 1 + rnd() % 200;

			in.limit = (int64) (200 + rnd() % 4000) * MB;
			gm_guard_levels(in.limit, &lv);
			in.usage = lv.release + (int64) (rnd() % 1000) * (lv.margin + lv.target - lv.release) / 1000;
			in.engaged = true;
			in.asked_pending = (int64) (rnd() % 20) * MB;
			/* Half the rounds with the monitor's pool held back for raises. */
			in.pool_share = round % 2 == 0 ? GM_GUARD_POOL_SHARE : 0;
			for (int i = 0; i < np; i++)
			{
				int64		vm = (int64) (5 + rnd() % 300) * MB;
				int64		growth = rnd() % 4 == 0 ? GM_GROWTH_UNKNOWN : (int64) (rnd() % 40) * MB / 4;
				bool		waits = rnd() % 3 != 0;
				bool		started = rnd() % 10 == 0;

				procs[i] = proc(i + 1, vm, growth, waits, started);
				procs[i].in_statement = waits && rnd() % 5 == 0;
				procs[i].rss = vm - (int64) (rnd() % 5) * MB;
				/* Some begin in the same look, some are a parallel query's workers. */
				procs[i].since = rnd() % 5;
				if (i > 0 && rnd() % 3 == 0 && procs[i - 1].group == 0)
					procs[i].group = i;	/* a worker of pid i, a leader */
				else if (i > 1 && procs[i - 1].group != 0 && rnd() % 2 == 0)
					procs[i].group = procs[i - 1].group;
				/* A limit in force, for some: up to 8 MB above VmData, or below it. */
				if (rnd() % 2 == 0)
					procs[i].cur_limit = vm + (int64) (rnd() % 40) * MB / 4 - 2 * MB;
				kept[i] = procs[i].cur_limit;
			}
			gm_guard_policy(&in, procs, np, &d);
			if (!d.engaged)
				continue;
			sum = 0;
			for (int i = 0; i < np; i++)
			{
				GmGuardProc *p = &procs[i];
				bool		works = p->started || p->in_statement || !p->waits_for_client;

				int64		cur = kept[p->pid - 1];
				int64		left = cur == GM_NO_LIMIT ? d.reserve : Min(d.reserve, Max(cur - p->vmdata, 0));

				sum += p->allow;
				/* What a working one mapped of its reserve comes back from the budget. */
				if (p->working)
					sum += p->reserve - left;
				if (p->limit != ((p->vmdata + p->allow + p->message + p->reserve) & ~(int64) 1) ||
					p->message < 0 || (p->working && p->message != 0) ||
					p->reserve > d.reserve || p->reserve < (p->working ? left : d.reserve) ||
					(!p->working && p->limit <= p->vmdata))
					bad_limit++;
				if (p->working != works)
					bad_working++;
				/* A group's processes of one look together in the order. */
				for (int j = i + 1; j < np && i > 0; j++)
					if (procs[j].since == p->since && procs[i - 1].since == p->since &&
						group_key(&procs[j]) == group_key(&procs[i - 1]) &&
						group_key(p) != group_key(&procs[i - 1]))
						bad_order++;
			}
			/* Working processes take all of it, but the pool held back for raises. */
			if (sum + d.pool > d.budget || (d.nworking > 0 && sum + d.pool != d.budget) ||
				d.pool < 0 || (in.pool_share == 0 && d.pool != 0) || d.pool % (256 * 1024) != 0)
				bad_budget++;
			/* At most half of the margin, or at the floor with the rest counted as usage. */
			if (d.reserve < MB ||
				(d.reserve * np > lv.margin / 2 + np &&
				 !(d.reserve == MB && d.shift == Min(Max((int64) np * MB - lv.margin, 0), in.limit / 100 * 20 + in.limit % 100 * 20 / 100))))
				bad_reserve++;
		}
		ok(bad_budget == 0, "2000 random snapshots: the grants, the reserves' refills and the pool held back for raises never exceed the budget, and take all of it when a process works");
		in.pool_share = 0;
		ok(bad_reserve == 0, "the reserves take at most half of the margin, or sit at their 1 MB floor with what passes the margin counted as usage");
		ok(bad_limit == 0, "every limit is VmData plus the grant, the message room (idle only) and the reserve (a working one's: what is left of it under its limit in force, and its refill), an idle one's above VmData");
		ok(bad_working == 0, "working: started or running");
		ok(bad_order == 0, "a group's processes of one look are together in the order");
	}

	/*
	 * With no growth known and nothing reserved, what is left is all there
	 * is to share: no process gets more than one served before it, but the
	 * earliest, which also takes what the rounding left (500 pseudo-random
	 * snapshots, some in the same look, some in parallel queries).
	 */
	{
		int			bad = 0;

		for (int round = 0; round < 500; round++)
		{
			int			np = 1 + rnd() % 100;
			int			earliest = -1;
			int64		prev = PG_INT64_MAX;

			in.limit = (int64) (200 + rnd() % 4000) * MB;
			gm_guard_levels(in.limit, &lv);
			in.usage = lv.engage + (int64) (rnd() % 1000) * (lv.target - lv.engage) / 1000;
			in.engaged = true;
			in.asked_pending = 0;
			for (int i = 0; i < np; i++)
			{
				procs[i] = proc(i + 1, (int64) (5 + rnd() % 300) * MB, 0, false, true);
				procs[i].since = rnd() % 3;
				if (i > 0 && rnd() % 3 == 0 && procs[i - 1].group == 0)
					procs[i].group = i;
				else if (i > 1 && procs[i - 1].group != 0 && rnd() % 2 == 0)
					procs[i].group = procs[i - 1].group;
			}
			gm_guard_policy(&in, procs, np, &d);
			if (!d.engaged)
				continue;
			for (int i = 0; i < np; i++)
			{
				if (!procs[i].working)
					continue;
				if (earliest < 0)
				{
					earliest = i;
					continue;
				}
				if (procs[i].allow > prev)
					bad++;
				prev = procs[i].allow;
			}
		}
		ok(bad == 0, "500 random snapshots, growth not known: no process gets more than one served before it (but the earliest's rounding)");
	}

	/*
	 * An admitted statement's reservation comes first: a newcomer that
	 * starts working does not take it.
	 */
	{
		GmGuardProc pr[3];
		GmGuardProc *a;
		GmGuardProc *b;

		memset(&in, 0, sizeof(in));
		in.limit = 800 * MB;
		in.usage = 600 * MB;	/* headroom 136 MB */
		in.engaged = true;
		pr[0] = proc(1, 70 * MB, 0, false, false);	/* admitted, mapped 10 of 80 */
		pr[0].reserved = 70 * MB;
		pr[0].since = 1;
		pr[1] = proc(2, 8 * MB, GM_GROWTH_UNKNOWN, false, true);	/* a newcomer */
		pr[1].since = 2;
		pr[2] = proc(3, 8 * MB, 0, true, false);	/* idle */
		gm_guard_policy(&in, pr, 3, &d);
		a = find(pr, 3, 1);
		b = find(pr, 3, 2);
		ok(a->allow >= 70 * MB, "an admitted statement may still map what it reserved");
		ok(b->allow > 0 && b->allow <= d.budget - 70 * MB, "a newcomer shares only what is left beyond it");
		sum = 0;
		for (int i = 0; i < 3; i++)
			sum += pr[i].allow;
		ok(sum <= d.budget, "reservations and shares stay within the budget");
		pr[0] = proc(1, 70 * MB, 0, false, false);
		pr[0].reserved = 500 * MB;
		pr[1] = proc(2, 8 * MB, GM_GROWTH_UNKNOWN, false, true);
		pr[2] = proc(3, 8 * MB, 0, true, false);
		gm_guard_policy(&in, pr, 3, &d);
		sum = 0;
		for (int i = 0; i < 3; i++)
			sum += pr[i].allow;
		ok(find(pr, 3, 1)->allow == d.budget && sum == d.budget,
		   "a reservation larger than the budget gets the budget, no more");
	}

	/*
	 * A burst, look after look (burst_sim): growth not known at first; and
	 * from pooled sessions (growth known, 0), fresh for their first 2 looks
	 * (windows), alone and beside a long statement that began before them
	 * and grows 1 MB a look.
	 */
	burst_sim(false, false);
	burst_sim(true, false);
	burst_sim(true, true);
	creep_sim();
	{
		bool		over;
		bool		over_mixed;
		int			grouped = group_sim(true, 100 * MB, &over);
		int			mixed = group_sim(false, 100 * MB, &over_mixed);
		int			total = 0;
		int			least = 8;

		printf("# 8 parallel queries of 3 where 2.7 fit: %d complete grouped, %d with their processes ordered apart\n", grouped, mixed);
		ok(grouped >= 2, "8 parallel queries of 3 processes where 2.7 fit: at least 2 complete, each query's processes served together");
		ok(!over && !over_mixed, "8 parallel queries of 3 processes: the usage stays under the target");

		/* Others using 0 to 600 MB (3.1 to 1.5 queries fit), in 50 MB steps. */
		gm_guard_levels(1200 * MB, &lv);
		for (int64 others = 0; others <= 600 * MB; others += 50 * MB)
		{
			int			c = group_sim(true, others, &over);

			printf("# others %d MB (%.2f fit): %d complete\n", (int) (others / MB),
				   (double) (lv.target - others) / (3 * 123 * MB), c);
			total += c;
			least = Min(least, c);
			over_mixed = over_mixed || over;
		}
		ok(least >= 1 && total >= 17 && !over_mixed,
		   "8 parallel queries of 3 beside 0 to 600 MB of others' usage (13 cases): one completes in every case, 17 in all, the usage under the target");
	}

	/* When a reservation goes back to the budget. */
	{
		static const struct
		{
			GmReservedWait wait;
			int64		still_usec;
			int64		grew_usec;
			bool		returns;
			const char *name;
		}			rt[] = {
			{GM_RESERVED_RUNS, 0, 0, false, "a statement that grew at the last look keeps its reservation"},
			{GM_RESERVED_RUNS, 1900 * 1000, 0, false, "one still for 1.9 s since its admission keeps it"},
			{GM_RESERVED_RUNS, 2000 * 1000, 0, true, "one still for 2 s since its admission gives it back"},
			{GM_RESERVED_RUNS, 2000 * 1000, 1000 * 1000, true, "one that grew for 1 s, then still for 2 s, gives it back"},
			{GM_RESERVED_RUNS, 2500 * 1000, 6000 * 1000, false, "a sort that grew for 6 s pauses 2.5 s (it fills what it mapped): it keeps it"},
			{GM_RESERVED_RUNS, 6000 * 1000, 6000 * 1000, true, "still as long as it grew: it gives it back"},
			{GM_RESERVED_RUNS, (int64) 3600 * 1000 * 1000, 0, true, "a statement recorded large that never grows (an hour): back after 2 s, not held"},
			{GM_RESERVED_RUNS, 9000 * 1000, (int64) 3600 * 1000 * 1000, false, "one that grew for an hour, still for 9 s: keeps it"},
			{GM_RESERVED_RUNS, 10000 * 1000, (int64) 3600 * 1000 * 1000, true, "and gives it back after 10 s still, however long it grew"},
			{GM_RESERVED_RUNS, 3000 * 1000, 3250 * 1000, false, "grew until 3.25 s after its admission, still for 3 s: keeps it"},
			{GM_RESERVED_RUNS, 3250 * 1000, 3250 * 1000, true, "still for 3.25 s: gives it back"},
			{GM_RESERVED_LOCK, 0, 6000 * 1000, true, "one waiting for a lock gives it back at once"},
			{GM_RESERVED_SLEEP, 0, 0, true, "one in pg_sleep gives it back at once"},
			{GM_RESERVED_CLIENT_WRITE, 0, 0, true, "one waiting for its client to take its rows gives it back at once"},
			{GM_RESERVED_CLIENT_READ, 5000 * 1000, 0, false, "one waiting for its client's next command is not a return (its statement is over: the reservation ends)"},
		};

		for (int i = 0; i < (int) lengthof(rt); i++)
			ok(gm_guard_reservation_returns(rt[i].wait, rt[i].still_usec, rt[i].grew_usec) == rt[i].returns, rt[i].name);
	}

	/* How long a calm guard may go between two glances at the usage. */
	{
		GmGuardLevels lv;
		int64		stretch8;	/* where the guard measures, at 8 GB and 1 GB */
		int64		stretch1;

		gm_guard_levels(8192 * MB, &lv);
		stretch8 = lv.release - 8192 * MB * 5 / 100;
		ok(gm_guard_glance_ms(400 * MB, 50 * MB, false, 2, 50, 250) == 50,
		   "400 MB, 50 MB used, 2 CPUs: the fastest burst reaches the stretch within 50 ms: glance every 50 ms");
		ok(gm_guard_glance_ms(8192 * MB, 200 * MB, false, 2, 50, 250) == 250,
		   "8 GB, 200 MB used, 2 CPUs: no burst reaches the stretch before the next look: no glance");
		ok(gm_guard_glance_ms(8192 * MB, 200 * MB, false, 64, 50, 250) == 50,
		   "the same with 64 CPUs: a burst 32 times as fast could: glance every 50 ms");
		ok(gm_guard_glance_ms(8192 * MB, 200 * MB, false, 2, 50, 5000) == (int) ((stretch8 - 200 * MB) * 50 / (128 * MB) / 2),
		   "8 GB, 2 CPUs: the time 256 MB per 50 ms takes to reach the stretch");
		ok(gm_guard_glance_ms(8192 * MB, lv.engage - 64 * MB, true, 1, 50, 250) == 50 &&
		   gm_guard_glance_ms(8192 * MB, lv.engage - 700 * MB, true, 1, 50, 250) == 250 &&
		   gm_guard_glance_ms(8192 * MB, lv.engage - 256 * MB, true, 1, 50, 250) == 100,
		   "measuring, 8 GB, 1 CPU: 64 MB below the engage point every 50 ms, 256 MB below 100 ms, 700 MB below at the look");
		gm_guard_levels(1024 * MB, &lv);
		stretch1 = lv.release - 1024 * MB * 5 / 100;
		ok(gm_guard_glance_ms(1024 * MB, stretch1 - 128 * MB * 3, false, 1, 50, 250) == 150,
		   "1 GB, 1 CPU, 384 MB below the stretch: 150 ms");
		ok(gm_guard_glance_ms(1024 * MB, stretch1, false, 2, 50, 250) == 50 &&
		   gm_guard_glance_ms(1024 * MB, lv.engage + 1, true, 2, 50, 250) == 50,
		   "at the stretch, past the engage point: every 50 ms");
		ok(gm_guard_glance_ms(-1, 200 * MB, false, 2, 50, 250) == 50 &&
		   gm_guard_glance_ms(8192 * MB, -1, false, 2, 50, 250) == 50 &&
		   gm_guard_glance_ms(8192 * MB, 200 * MB, false, 0, 50, 250) == 50 &&
		   gm_guard_glance_ms(8192 * MB, 200 * MB, false, 2, 50, 30) == 50 &&
		   gm_guard_glance_ms((int64) 1 << 59, 200 * MB, false, 2, 50, 250) == 250,
		   "no limit, usage unknown, CPUs unknown: every 50 ms; never less than the minimum; a limit of 2^59 bytes does not overflow");
	}

	/* The admission of statements waiting for memory (memory_wait). */
	{
		GmAdmitWaiter w[8];
		int			n;

		/* A waiter: id, arrival, need (MB), waited and patience (ms). */
#define WAITER(i, arr, mb, waited, patience) \
		(w[i].id = (arr), w[i].arrival = (arr), w[i].need = (mb) * MB, \
		 w[i].waited_ms = (waited), w[i].patience_ms = (patience), w[i].admit = true, \
		 w[i].mine = false, w[i].due = false, w[i].grant = -1)

		/* Given out of order: admitted in arrival order, while they fit. */
		WAITER(0, 3, 400, 0, 10000);
		WAITER(1, 1, 400, 0, 10000);
		WAITER(2, 2, 400, 0, 10000);
		n = gm_guard_admit(900 * MB, -1, w, 3);
		ok(n == 2 && w[0].arrival == 1 && w[0].admit && w[1].admit && !w[2].admit,
		   "900 MB, three of 400 MB: the first two to arrive go, the third waits");

		/* Nothing available: nobody goes; a need of 0 always fits. */
		WAITER(0, 1, 100, 0, 10000);
		n = gm_guard_admit(0, -1, w, 1);
		ok(n == 0 && !w[0].admit, "nothing available: a waiter of 100 MB waits");
		WAITER(0, 1, 100, 0, 10000);
		n = gm_guard_admit(-50 * MB, -1, w, 1);
		ok(n == 0 && !w[0].admit, "less than nothing (reservations above the headroom): it waits");
		WAITER(0, 1, 100, 0, 10000);
		n = gm_guard_admit(100 * MB, -1, w, 1);
		ok(n == 1 && w[0].admit, "exactly what it needs: it goes");

		/* A small one passes a head that does not fit, while the head is young. */
		WAITER(0, 1, 500, 1000, 10000);
		WAITER(1, 2, 50, 0, 10000);
		n = gm_guard_admit(200 * MB, -1, w, 2);
		ok(n == 1 && !w[0].admit && w[1].admit,
		   "a head of 500 MB that does not fit 200 MB, waiting 1 of 10 s: a query of 50 MB behind it goes");

		/* A small query is not starved behind a large one that never fits. */
		{
			int			small_went = 0;

			for (int t = 0; t < 20; t++)
			{
				WAITER(0, 1, 2000, t * 100, 10000);
				WAITER(1, 2 + t, 20, 0, 10000);
				(void) gm_guard_admit(300 * MB, -1, w, 2);
				if (w[0].arrival == 2 + t ? w[0].admit : w[1].admit)
					small_went++;
			}
			ok(small_went == 20, "a head of 2000 MB that never fits 300 MB: every small query behind it goes");
		}

		/* Past half of its memory_wait, the head keeps its need: no more passing. */
		WAITER(0, 1, 500, 5000, 10000);
		WAITER(1, 2, 50, 0, 10000);
		n = gm_guard_admit(200 * MB, -1, w, 2);
		ok(n == 0 && !w[0].admit && !w[1].admit,
		   "the head waited 5 of 10 s: the 200 MB free are kept for it, the small one waits");
		WAITER(0, 1, 500, 6000, 10000);
		WAITER(1, 2, 50, 0, 10000);
		n = gm_guard_admit(560 * MB, -1, w, 2);
		ok(n == 2 && w[0].admit && w[1].admit,
		   "560 MB: the head of 500 MB goes, and the small one with what is left");
		WAITER(0, 1, 500, 6000, 10000);
		WAITER(1, 2, 50, 0, 10000);
		WAITER(2, 3, 40, 0, 10000);
		n = gm_guard_admit(540 * MB, -1, w, 3);
		ok(n == 2 && w[0].admit && !w[1].admit && w[2].admit,
		   "540 MB: the head goes, 50 MB does not fit the 40 MB left, 40 MB behind it does");
		/* Beyond what the head waits for, others still go. */
		WAITER(0, 1, 300, 6000, 10000);
		WAITER(1, 2, 50, 0, 10000);
		n = gm_guard_admit(200 * MB, -1, w, 2);
		ok(n == 0, "a due head of 300 MB and 200 MB free: nothing passes it");
		WAITER(0, 1, 300, 6000, 10000);
		WAITER(1, 2, 50, 0, 10000);
		WAITER(2, 3, 500, 9000, 20000);
		n = gm_guard_admit(290 * MB, -1, w, 3);
		ok(n == 0 && !w[1].admit,
		   "two due waiters keep their needs: 290 MB admit nobody");

		/*
		 * memory_wait = 0: a statement that does not fit runs at once,
		 * without a reservation; it keeps nothing for itself, so the
		 * waiters behind it still go.
		 */
		WAITER(0, 1, 500, 0, 0);
		WAITER(1, 2, 50, 0, 10000);
		n = gm_guard_admit(200 * MB, 1000 * MB, w, 2);
		ok(n == 1 && !w[0].admit && w[1].admit,
		   "a head of 500 MB with memory_wait 0 that does not fit 200 MB: the 50 MB behind it goes");
		WAITER(0, 1, 150, 0, 0);
		n = gm_guard_admit(200 * MB, 1000 * MB, w, 1);
		ok(n == 1 && w[0].admit, "memory_wait 0 and 150 MB in 200 MB: admitted at once, with a reservation");

		/*
		 * The caller's own statement that runs now without its need gets a
		 * grant: what is left once the admitted statements, the kept needs
		 * and the needs of the waiters before it are taken (0 when nothing
		 * is); nobody else's is decided by this round.
		 */
		WAITER(0, 1, 500, 0, 0);
		w[0].mine = w[0].due = true;
		n = gm_guard_admit(200 * MB, 1000 * MB, w, 1);
		ok(n == 0 && !w[0].admit && w[0].granted && w[0].grant == 200 * MB,
		   "mine alone, due, 500 MB in 200 MB: not admitted, a grant of all 200 MB");
		WAITER(0, 1, 50, 0, 10000);
		WAITER(1, 2, 500, 0, 0);
		w[1].mine = w[1].due = true;
		n = gm_guard_admit(200 * MB, 1000 * MB, w, 2);
		ok(n == 1 && w[0].admit && !w[0].granted && w[1].granted && w[1].grant == 150 * MB,
		   "a waiter of 50 MB ahead is admitted; mine gets the 150 MB left");
		WAITER(0, 1, 300, 6000, 10000);
		WAITER(1, 2, 500, 0, 0);
		w[1].mine = w[1].due = true;
		n = gm_guard_admit(400 * MB, 1000 * MB, w, 2);
		ok(n == 1 && w[0].admit && w[1].grant == 100 * MB,
		   "400 MB: the due head of 300 MB goes first, mine gets the 100 MB left");
		WAITER(0, 1, 300, 6000, 10000);
		WAITER(1, 2, 500, 0, 0);
		w[1].mine = w[1].due = true;
		n = gm_guard_admit(200 * MB, 1000 * MB, w, 2);
		ok(n == 0 && !w[0].granted && w[1].granted && w[1].grant == 0,
		   "a due head keeps 300 MB of 200 MB: mine runs with a grant of 0 (its reserve only)");
		WAITER(0, 1, 150, 0, 10000);
		WAITER(1, 2, 500, 0, 0);
		w[1].mine = w[1].due = true;
		n = gm_guard_admit(100 * MB, 1000 * MB, w, 2);
		ok(n == 0 && !w[0].admit && w[1].grant == 0,
		   "a young waiter of 150 MB ahead, 100 MB free: mine with memory_wait 0 does not take what the waiter waits for");
		WAITER(0, 1, 60, 0, 10000);
		WAITER(1, 2, 500, 0, 0);
		WAITER(2, 3, 70, 0, 10000);
		w[1].mine = w[1].due = true;
		n = gm_guard_admit(100 * MB, 1000 * MB, w, 3);
		ok(n == 1 && w[0].admit && w[1].grant == 40 * MB && !w[2].admit,
		   "100 MB: 60 MB ahead admitted, mine gets the 40 MB left, 70 MB behind waits");
		WAITER(0, 1, 500, 0, 0);
		w[0].mine = w[0].due = true;
		n = gm_guard_admit(-80 * MB, 1000 * MB, w, 1);
		ok(n == 0 && w[0].granted && w[0].grant == 0, "less than nothing left: a grant of 0");
		WAITER(0, 1, 2000, 0, 10000);
		w[0].mine = true;
		n = gm_guard_admit(200 * MB, 1000 * MB, w, 1);
		ok(n == 0 && w[0].hopeless && w[0].granted && w[0].grant == 200 * MB,
		   "mine, not due, but above the ceiling: a grant of all that is left at once (waiting would only delay it)");
		WAITER(0, 1, 500, 0, 10000);
		w[0].mine = true;
		n = gm_guard_admit(200 * MB, 1000 * MB, w, 1);
		ok(n == 0 && !w[0].granted && w[0].grant == 0, "mine, not due, 500 MB in 200 MB: it waits, no grant");
		WAITER(0, 1, 500, 0, 0);
		w[0].due = true;
		n = gm_guard_admit(200 * MB, 1000 * MB, w, 1);
		ok(n == 0 && !w[0].granted, "another's due statement: its own round grants it, not this one");
		WAITER(0, 1, 150, 0, 0);
		w[0].mine = w[0].due = true;
		n = gm_guard_admit(200 * MB, 1000 * MB, w, 1);
		ok(n == 1 && w[0].admit && !w[0].granted && w[0].grant == 0, "mine, due, and it fits: admitted with its need, no grant");
		ok(gm_guard_grant_limit(100 * MB, 30 * MB) == 134 * MB && gm_guard_grant_limit(100 * MB, 0) == 104 * MB,
		   "a grant's limit: VmData, the grant and the 4 MB reserve");

		/*
		 * A query's need follows its recent runs: a larger run sets it, a
		 * smaller one moves it a quarter of the way down.
		 */
		{
			int64		need = -1;
			int			k;

			need = gm_guard_need_after(0, 400 * MB);
			ok(need == 400 * MB, "a query's first run of 400 MB: its need is 400 MB");
			ok(gm_guard_need_after(need, -1) == 400 * MB, "a run not measured leaves it");
			ok(gm_guard_need_after(need, 500 * MB) == 500 * MB, "a larger run sets it at once");
			ok(gm_guard_need_after(need, 0) == 300 * MB && gm_guard_need_after(need, 200 * MB) == 350 * MB,
			   "a smaller run moves it a quarter of the way down: 400 MB and a run of 0 give 300 MB, of 200 MB 350 MB");
			for (k = 0; need > 100 * MB; k++)
				need = gm_guard_need_after(need, 40 * 1024);
			ok(k == 5, "recorded at 400 MB, then run small (40 kB): below 100 MB after 5 runs");
			for (; need >= MB; k++)
				need = gm_guard_need_after(need, 40 * 1024);
			ok(k == 21 && need >= 40 * 1024, "below 1 MB (the least need that waits) after 21, never below the runs");
			need = 3;
			ok(gm_guard_need_after(need, 0) == 3, "a need of 3 bytes and a run of 0: integer steps, it stays (no float)");
		}

		/*
		 * What a need maps: scaled by the run that mapped most, where that
		 * run was at least half the need.
		 */
		ok(gm_guard_mapped_need(400 * MB, 512 * MB, 400 * MB) == 512 * MB,
		   "a need equal to the run that mapped most: what that run mapped");
		ok(gm_guard_mapped_need(100 * MB, 512 * MB, 400 * MB) == 128 * MB,
		   "decayed to a quarter: a quarter of what it mapped (1.28 times)");
		ok(gm_guard_mapped_need(600 * MB, 512 * MB, 400 * MB) == 768 * MB,
		   "a need 1.5 times that run: 1.5 times what it mapped");
		ok(gm_guard_mapped_need(801 * MB, 512 * MB, 400 * MB) == -1,
		   "a run of less than half the need says nothing of it: unknown (the guard takes 1.25 times)");
		ok(gm_guard_mapped_need(100 * MB, -1, 0) == -1 && gm_guard_mapped_need(-1, 512 * MB, 400 * MB) == -1,
		   "no mapped measure, or no need: unknown");
		ok(gm_guard_mapped_need(3 * MB, 3 * MB + 1, 3 * MB) == 3 * MB + 1 &&
		   gm_guard_mapped_need(2 * MB, 3 * MB + 1, 3 * MB) >= 2 * MB + 1,
		   "the ratio rounds up: a byte more is never less");
		ok(gm_guard_mapped_need((int64) 1 << 40, (int64) 3 << 39, (int64) 1 << 39) == (int64) 3 << 40,
		   "a TB need, scaled by 3: no overflow");

		/*
		 * The pool: with 100 MB of headroom in 800 MB, an admitted
		 * statement that reserved 40 MB and has mapped none is served
		 * first; a quarter of what is left is held back for raises between
		 * looks (in 256 kB steps), and the two working statements share the
		 * rest, so that the limits and the pool add up to the budget.
		 */
		{
			GmGuardInput pin;
			GmGuardDecision pd;
			GmGuardProc pp[3];
			int64		given = 0;

			memset(&pin, 0, sizeof(pin));
			pin.limit = 800 * MB;
			pin.usage = 636 * MB;
			pin.engaged = true;
			pin.pool_share = GM_GUARD_POOL_SHARE;
			for (int i = 0; i < 3; i++)
			{
				pp[i] = proc(i + 1, 20 * MB, MB, false, false);
				pp[i].cur_limit = 30 * MB;
			}
			pp[0].reserved = 40 * MB;
			gm_guard_policy(&pin, pp, 3, &pd);
			for (int i = 0; i < 3; i++)
				given += pp[i].allow + (pp[i].reserve - Min(pd.reserve, Max(pp[i].cur_limit - pp[i].vmdata, 0)));
			ok(find(pp, 3, 1)->allow >= 40 * MB, "the pool: the admitted statement's 40 MB first");
			ok(pd.pool > 0 && pd.pool % (256 * 1024) == 0 &&
			   pd.pool <= (pd.budget - 40 * MB) / 4 && pd.pool > (pd.budget - 40 * MB) / 4 - 256 * 1024,
			   "then a quarter of what is left held back for raises, in 256 kB steps");
			ok(given + pd.pool == pd.budget, "the limits and the pool add up to the budget");
			pin.pool_share = 0;
			gm_guard_policy(&pin, pp, 3, &pd);
			ok(pd.pool == 0, "pool_share 0: nothing held back");
		}

		/*
		 * What a statement with a reservation still adds to the usage: a
		 * sort of 72 MB that mapped all of it and touched 30 MB still
		 * holds 42 MB (a burst's third sort was admitted beside two such
		 * as if they held nothing, and the guard then failed two of them).
		 */
		{
			static const struct
			{
				int64		need;
				int64		grown;
				int64		gap;
				bool		returned;
				int64		left;
				const char *name;
			}			out[] = {
				{72, 0, 0, false, 72, "just admitted: its whole need"},
				{72, 30, 0, false, 42, "mapped 30, all touched: the rest of its need"},
				{72, 30, 10, false, 52, "mapped 30, 10 of it untouched: the rest and the gap"},
				{72, 72, 42, false, 42, "mapped its whole need, touched 30: the 42 it has not touched"},
				{72, 90, 5, false, 5, "past its need: only its gap, never less than nothing"},
				{72, 90, 0, false, 0, "past its need, all touched: nothing"},
				{72, 30, 10, true, 10, "its reservation went back: only its gap"},
				{72, -5, -1, false, 72, "unknown readings (-1) or a shrunk VmData: its need"},
			};

			for (int i = 0; i < (int) lengthof(out); i++)
				ok(gm_guard_outstanding(out[i].need * MB, out[i].grown * MB, out[i].gap * MB,
										out[i].returned) == out[i].left * MB,
				   out[i].name);
		}
		ok(gm_guard_outstanding((int64) 1 << 40, 0, (int64) 1 << 40, false) == (int64) 1 << 41,
		   "a TB need and a TB gap: no overflow");

		/*
		 * The start share of a statement whose need is unknown: an equal
		 * part of what the admission has left, between it and those that
		 * hold one, at most 16 MB, in 256 kB steps, none below 1 MB.
		 */
		{
			static const struct
			{
				int64		room;
				int64		taken;
				int			held;
				int64		share;	/* kB */
				const char *name;
			}			sh[] = {
				{315 * MB, 0, 0, 16 * 1024, "alone in 315 MB: 16 MB, no more"},
				{315 * MB, 0, 18, 16 * 1024, "beside 18 holding, 315 MB left: 16 MB (an equal part is 16.6)"},
				{315 * MB, 200 * MB, 18, 6144, "beside 18, 115 MB left: an equal part (6.05 MB) in 256 kB steps, 6 MB"},
				{100 * MB, 90 * MB, 4, 2048, "10 MB left beside 4: 2 MB"},
				{100 * MB, 96 * MB, 4, 0, "4 MB left beside 4: 0.8 MB is too little to take, none"},
				{100 * MB, 150 * MB, 0, 0, "more taken than the room: none"},
				{-1, 0, 0, 0, "the room unknown (the monitor has not looked): none"},
				{100 * MB, -5, -2, 16 * 1024, "negative inputs count as none: 16 MB"},
				{(int64) 1 << 50, 0, 0, 16 * 1024, "a petabyte of room: 16 MB, no overflow"},
			};

			for (int i = 0; i < (int) lengthof(sh); i++)
				ok(gm_guard_start_share(sh[i].room, sh[i].taken, sh[i].held) == sh[i].share * 1024,
				   sh[i].name);
		}

		/*
		 * A running statement's share near its limit: as a start share,
		 * but up to what it grew (a sort asks as often as it doubles).
		 */
		{
			static const struct
			{
				int64		room;
				int64		taken;
				int			others;
				int64		grown;
				int64		share;	/* kB */
				const char *name;
			}			gr[] = {
				{137 * MB, 15 * MB, 0, 0, 16 * 1024, "alone, grown nothing yet: 16 MB"},
				{118 * MB, 13 * MB, 0, 30 * MB, 30 * 1024, "alone, grown 30 MB: 30 MB more"},
				{90 * MB, 65 * MB, 0, 64 * MB, 25 * 1024, "alone, 25 MB left: 25 MB, not the 64 it grew"},
				{300 * MB, 0, 3, 100 * MB, 75 * 1024, "beside 3 holding, 300 MB left: an equal part, 75 MB"},
				{64 * MB, 63 * MB + 512 * 1024, 0, 64 * MB, 0, "0.5 MB left: too little to take, none"},
				{-1, 0, 0, 64 * MB, 0, "the room unknown: none"},
				{100 * MB, -5, -2, -7, 16 * 1024, "negative inputs count as none: 16 MB"},
				{(int64) 1 << 50, 0, 0, (int64) 1 << 40, (int64) 1 << 30, "a TB grown in a PB of room: a TB more, no overflow"},
			};

			for (int i = 0; i < (int) lengthof(gr); i++)
				ok(gm_guard_grow_share(gr[i].room, gr[i].taken, gr[i].others, gr[i].grown) == gr[i].share * 1024,
				   gr[i].name);
		}

		/*
		 * memory_wait is the session's: half of at most 30 s counts, and
		 * half of an odd one is due from its ceiling, not before.  A head
		 * of 500 MB that does not fit 200 MB, a small one of 50 MB behind.
		 */
		{
			static const struct
			{
				int64		waited;
				int64		patience;
				bool		passes;
				const char *name;
			}			due[] = {
				{20000, 3600000, false, "a head of 500 MB with memory_wait 1 h, waiting 20 s: due (15 s), the small one waits"},
				{10000, 3600000, true, "the same head waiting 10 s: the small one passes"},
				{0, 1, true, "a head with memory_wait 1 ms, waiting 0 ms: not due, the small one passes"},
				{1, 3, true, "memory_wait 3 ms, waiting 1 ms: not due (1.5 ms), the small one passes"},
				{2, 3, false, "memory_wait 3 ms, waiting 2 ms: due, the small one waits"},
			};

			for (int i = 0; i < (int) lengthof(due); i++)
			{
				WAITER(0, 1, 500, due[i].waited, due[i].patience);
				WAITER(1, 2, 50, 0, 10000);
				n = gm_guard_admit(200 * MB, 1000 * MB, w, 2);
				ok(due[i].passes ? n == 1 && !w[0].admit && w[1].admit : n == 0 && !w[0].admit && !w[1].admit,
				   due[i].name);
			}
		}

		/*
		 * A need above the most there could ever be (the ceiling: the
		 * target less what the guard cannot move) is hopeless: never kept,
		 * and it runs at once.
		 */
		WAITER(0, 1, 2000, 1800000, 3600000);
		WAITER(1, 2, 50, 0, 10000);
		n = gm_guard_admit(200 * MB, 1000 * MB, w, 2);
		ok(n == 1 && !w[0].admit && w[1].admit,
		   "a head of 2000 MB, ceiling 1000 MB, waiting 30 of 60 min: never kept, the small one goes");
		ok(w[0].hopeless && !w[1].hopeless, "the head above the ceiling is hopeless (it runs as without the wait)");
		WAITER(0, 1, 300, 0, 30000);
		n = gm_guard_admit(200 * MB, 250 * MB, w, 1);
		ok(n == 0 && w[0].hopeless, "300 MB where at most 250 could ever free: hopeless at once, not made to wait");
		WAITER(0, 1, 1000, 20000, 30000);
		WAITER(1, 2, 50, 0, 10000);
		n = gm_guard_admit(200 * MB, 1000 * MB, w, 2);
		ok(n == 0 && !w[1].admit && !w[0].hopeless, "a due head of exactly the ceiling is kept, not hopeless");

		/* Bursts: 8 of 400 MB in 900 MB, reservations ending two at a time: arrival order. */
		{
			bool		done[8] = {0};
			int			order[8];
			int			norder = 0;
			bool		in_order = true;

			for (int round = 0; round < 8 && norder < 8; round++)
			{
				int			k = 0;
				int64		running = 0;

				for (int i = 0; i < 8; i++)
					if (!done[i])
					{
						WAITER(k, i + 1, 400, round * 3000, 30000);
						k++;
					}
				(void) gm_guard_admit(900 * MB - running, -1, w, k);
				for (int i = 0; i < k; i++)
					if (w[i].admit)
					{
						done[w[i].arrival - 1] = true;
						order[norder++] = (int) w[i].arrival;
					}
			}
			for (int i = 0; i < norder; i++)
				if (order[i] != i + 1)
					in_order = false;
			ok(norder == 8 && in_order, "8 of 400 MB in 900 MB, as reservations end: all admitted, in arrival order");
		}
#undef WAITER
	}

	printf("1..%d\n", ntests);
	return nfailed > 0;
}
