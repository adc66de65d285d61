/*
 * guard_policy_test.c: table tests of the memory guard's policy
 * (guard_policy.c), compiled with it by t/035_guard_policy.pl.  Prints TAP.
 * No server, no cgroup: the policy is a pure function.
 */
#include "postgres.h"

#include <stdio.h>

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

/* A pseudo-random number (a fixed sequence). */
static uint32 seed = 12345;
static uint32
rnd(void)
{
	seed = seed * 1103515245 + 12345;
	return (seed >> 8) & 0xffffff;
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

int
main(void)
{
	GmGuardLevels lv;
	GmGuardInput in;
	GmGuardDecision d;
	GmGuardProc procs[200];
	int64		sum;

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
	ok(find(procs, 2, 1)->allow == 0 && find(procs, 2, 2)->allow == 36 * MB,
	   "the idle one, not growing, takes nothing from the budget; the working one all of it");
	ok(find(procs, 2, 1)->reserve == 4 * MB && find(procs, 2, 1)->limit == 24 * MB,
	   "the idle one's limit is its VmData plus a 4 MB reserve");
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

	/* Several working: smallest first, the largest gets what is left. */
	in.usage = 600 * MB;
	procs[0] = proc(1, 50 * MB, GM_GROWTH_UNKNOWN, false, false);
	procs[1] = proc(2, 100 * MB, GM_GROWTH_UNKNOWN, false, false);
	procs[2] = proc(3, 200 * MB, GM_GROWTH_UNKNOWN, false, false);
	gm_guard_policy(&in, procs, 3, &d);
	ok(find(procs, 3, 1)->allow == 68 * MB && find(procs, 3, 2)->allow == 34 * MB &&
	   find(procs, 3, 3)->allow == 34 * MB, "136 MB: half to the smallest, a quarter to the next, the rest to the largest");

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
	 * one that waits for its client, whatever it grew in the window.
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

	/* Nobody works: those not working share all of the budget. */
	procs[0] = proc(1, 20 * MB, 0, true, false);
	procs[1] = proc(2, 20 * MB, 0, true, false);
	gm_guard_policy(&in, procs, 2, &d);
	ok(find(procs, 2, 1)->allow == 18 * MB && find(procs, 2, 2)->allow == 18 * MB,
	   "nobody works: two idle share all 36 MB");

	/*
	 * 60 pooled sessions, 44 MB of headroom (692 of 800 MB): a statement
	 * starts in one that was idle, and it may map at least 20 MB at the
	 * next look (before: 370 kB, a share of half of the budget).
	 */
	in.usage = 692 * MB;
	for (int i = 0; i < 60; i++)
		procs[i] = proc(i + 1, 12 * MB, 0, true, false);
	procs[7].started = true;
	gm_guard_policy(&in, procs, 60, &d);
	ok(d.nworking == 1, "60 idle sessions, a statement starts in one: one working");
	ok(find(procs, 60, 8)->allow >= 20 * MB, "which may map at least 20 MB of the 44 MB of headroom");
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
	 * do; 30 are shrunk to a thirtieth of 32 MB, and the decision says so.
	 */
	in.usage = 700 * MB;
	for (int i = 0; i < 30; i++)
		procs[i] = proc(i + 1, 12 * MB, 0, true, false);
	gm_guard_policy(&in, procs, 8, &d);
	ok(d.reserve == 4 * MB && !d.reserve_shrunk, "8 backends: a reserve of 4 MB each");
	gm_guard_policy(&in, procs, 30, &d);
	ok(d.reserve_shrunk && d.reserve == 32 * MB / 30 && d.reserve_wanted == 4 * MB,
	   "30 backends: the reserve is shrunk to fit half of the margin, and says so");
	ok(d.reserve * 30 <= 32 * MB, "all reserves together within half of the margin");
	ok(procs[0].limit > procs[0].vmdata, "an idle backend's limit still above its VmData");

	/*
	 * Invariants over 2000 pseudo-random snapshots (a fixed seed): the
	 * grants fit the budget, the reserves half of the margin, no limit is
	 * at or below VmData, and every working process is one that started or
	 * runs.
	 */
	{
		int			bad_budget = 0,
					bad_reserve = 0,
					bad_limit = 0,
					bad_working = 0;

		for (int round = 0; round < 2000; round++)
		{
			int			np = 1 + rnd() % 200;

			in.limit = (int64) (200 + rnd() % 4000) * MB;
			gm_guard_levels(in.limit, &lv);
			in.usage = lv.release + (int64) (rnd() % 1000) * (lv.margin + lv.target - lv.release) / 1000;
			in.engaged = true;
			in.asked_pending = (int64) (rnd() % 20) * MB;
			for (int i = 0; i < np; i++)
			{
				int64		vm = (int64) (5 + rnd() % 300) * MB;
				int64		growth = rnd() % 4 == 0 ? GM_GROWTH_UNKNOWN : (int64) (rnd() % 40) * MB / 4;
				bool		waits = rnd() % 3 != 0;
				bool		started = rnd() % 10 == 0;

				procs[i] = proc(i + 1, vm, growth, waits, started);
				procs[i].rss = vm - (int64) (rnd() % 5) * MB;
			}
			gm_guard_policy(&in, procs, np, &d);
			if (!d.engaged)
				continue;
			sum = 0;
			for (int i = 0; i < np; i++)
			{
				GmGuardProc *p = &procs[i];
				bool		works = p->started || !p->waits_for_client;

				sum += p->allow;
				if (p->limit <= p->vmdata || p->limit != p->vmdata + p->allow + d.reserve)
					bad_limit++;
				if (p->working != works)
					bad_working++;
			}
			if (sum > d.budget)
				bad_budget++;
			if (d.reserve * np > lv.margin / 2 + np)
				bad_reserve++;
		}
		ok(bad_budget == 0, "2000 random snapshots: the grants never exceed the budget");
		ok(bad_reserve == 0, "the reserves never take more than half of the margin");
		ok(bad_limit == 0, "every limit is VmData plus the grant plus the reserve, above VmData");
		ok(bad_working == 0, "working: started or running");
	}

	printf("1..%d\n", ntests);
	return nfailed > 0;
}
