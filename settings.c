/*-------------------------------------------------------------------------
 *
 * settings.c
 *		Policy: the GUCs, the preset table, resolution of effective values,
 *		the one place that calls mallopt, and what should happen at
 *		statement start (follow work_mem) and after a transaction (the
 *		preset's trim, the idle delay).
 *
 *		It calls only allocator.c.  When is up to the caller: the entry
 *		file asks it at statement start and transaction end, and it reports
 *		settings changes through the callback given to gm_define_gucs().
 *
 * Every glibc parameter has an effective value, resolved in this order:
 *
 *	1. its explicit glibc_malloc.<param> GUC, if set;
 *	2. the operator's environment (GLIBC_TUNABLES, MALLOC_*_), which glibc
 *	   applied at process start and which presets never override;
 *	3. the value glibc_malloc.preset derives for it;
 *	4. otherwise nothing: glibc keeps its own (possibly dynamic) value.
 *
 * gm_apply() resolves every parameter and calls mallopt only for those whose
 * effective value differs from the one last applied, because mallopt
 * consolidates the main arena.  Assign hooks keep shadow copies of the new
 * values (the GUC variables themselves change only after the hook returns)
 * and call gm_apply().
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/parallel.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "glibc_malloc.h"

/*
 * The presets.  Everything a preset does is in its row; nothing else in
 * the module branches on a particular preset, so a new preset is one row.
 *
 *	rule			how it derives mmap_threshold and trim_threshold:
 *					GM_RULE_GLIBC leaves glibc alone; GM_RULE_WORK_MEM keeps
 *					about two work_mem (the original proposal's rule) and
 *					follows work_mem before each query; GM_RULE_FIXED uses
 *					fixed_threshold
 *	fixed_threshold	bytes, for GM_RULE_FIXED
 *	top_pad			M_TOP_PAD in bytes, or -1 to leave it alone
 *	idle_delay_ms	return free memory once idle this long (0: never)
 *	xact_trim_bytes	return free memory after each transaction once this
 *					much more is free than after the last such trim (0: never)
 *	reuse_bytes		busy backends too: return free memory once idle_delay
 *					has passed since the last statement whose executor
 *					memory reached this much (0: only when idle).  Memory
 *					nobody reuses is released even if the backend never
 *					goes idle for that long (pooled connections)
 */
static const GmPresetDef gm_presets[] = {
	/* name		rule			fixed_threshold	top_pad		idle_delay_ms	xact_trim_bytes	reuse_bytes */
	{"default", GM_RULE_GLIBC, 0, -1, 0, 0, 0},
	{"greedy", GM_RULE_WORK_MEM, 0, -1, 0, 0, 0},
	{"frugal", GM_RULE_FIXED, 128 * 1024, 64 * 1024, 0, 1024 * 1024, 0},
	{"balanced", GM_RULE_WORK_MEM, 0, -1, 1000, 0, 1024 * 1024},
};

#define GM_NPRESETS lengthof(gm_presets)

/* glibc_malloc.preset's values, filled from gm_presets[]. */
static struct config_enum_entry preset_options[GM_NPRESETS + 1];

/* GUC variables (the GUC machinery writes these after the assign hook). */
static int	preset_guc = GM_PRESET_DEFAULT;
static int	max_trim_threshold_guc = 64 * 1024;
static int	idle_release_delay_guc = -1;
static int	knob_guc[GM_NPARAMS];

/*
 * Given by the entry file: called after a setting that changes what is due
 * after a transaction changed (preset, idle_release_delay), also at GUC
 * rollback, so that the caller re-plans with the settings now in force.
 */
static void (*on_settings_change) (void) = NULL;

/* Whether the module was loaded through shared_preload_libraries. */
static bool preloaded = false;

/* Shadow copies kept by the assign hooks: what gm_apply() resolves from. */
static int	cur_preset = GM_PRESET_DEFAULT;
static int64 cur_max_trim = (int64) 64 * 1024 * 1024;
static int64 cur_knob[GM_NPARAMS];	/* bytes or count; -1 = not set */
static int	cur_idle_delay = -1;

/*
 * What this process last passed to mallopt, -1 = never (inherited on fork).
 * Set to -1 in a loop by gm_define_gucs: a 0 here would claim mallopt had
 * been called.
 */
static int64 applied[GM_NPARAMS];

/* How many times this process passed mallopt a new M_MMAP_THRESHOLD. */
static uint64 mmap_threshold_changes = 0;

/* Whether glibc's dynamic thresholds were frozen, and by what. */
static bool dynamic_frozen = false;
static GmSource frozen_by = GM_SRC_GLIBC_DEFAULT;

/* work_mem that the applied greedy thresholds were derived from. */
static int	applied_work_mem = -1;

/* RssAnon right after the last transaction-end trim (frugal). */
static int64 rss_after_trim = 0;

/* When gm_xact_trim last read RssAnon: at most every GM_RSS_CHECK_MS. */
#define GM_RSS_CHECK_MS 100
static int64 last_rss_check = 0;	/* gm_monotonic_usec() */

/* Assign hooks apply only once _PG_init has defined every GUC. */
static bool gucs_ready = false;

/* The byte count that preset gives parameter p, or -1 when it leaves p alone. */
static int64
gm_preset_value(int preset, GmParam p)
{
	const GmPresetDef *def = &gm_presets[preset];

	if (p == GM_TOP_PAD)
		return def->top_pad;
	if (p != GM_MMAP_THRESHOLD && p != GM_TRIM_THRESHOLD)
		return -1;
	switch (def->rule)
	{
		case GM_RULE_WORK_MEM:
			{
				/* The original proposal's rule: keep about two work_mem. */
				int64		mmap = Min((int64) work_mem * 1024 + 4096,
									   Min(cur_max_trim / 2, gm_mmap_threshold_limit()));

				return p == GM_MMAP_THRESHOLD ? mmap : Min(2 * mmap, cur_max_trim);
			}
		case GM_RULE_FIXED:
			return def->fixed_threshold;
		case GM_RULE_GLIBC:
			break;
	}
	return -1;
}

/* The preset in force in this backend. */
int
gm_current_preset(void)
{
	return cur_preset;
}

/*
 * Whether the memory limits (max_backend_memory, the memory guard) cover
 * this process: client backends and parallel workers under the postmaster.
 * Not autovacuum: a vacuum that keeps failing for lack of memory would
 * leave its table unvacuumed, up to wraparound; nor walsenders, auxiliary
 * processes, other background workers or single-user mode.
 */
bool
gm_guarded_process(void)
{
	if (!IsUnderPostmaster)
		return false;
	return MyBackendType == B_BACKEND || IsParallelWorker();
}

/* A preset's name. */
const char *
gm_preset_name(int preset)
{
	if (preset < 0 || preset >= GM_NPRESETS)
		return "unknown";
	return gm_presets[preset].name;
}

/*
 * The effective idle release delay in ms (0 = off), and its source.  Plain
 * reads only: the idle point calls it in signal context.
 */
int
gm_idle_delay(GmSource *source)
{
	if (cur_idle_delay >= 0)
	{
		*source = GM_SRC_SETTING;
		return cur_idle_delay;
	}
	if (gm_presets[cur_preset].idle_delay_ms > 0)
	{
		*source = GM_SRC_PRESET;
		return gm_presets[cur_preset].idle_delay_ms;
	}
	*source = GM_SRC_GLIBC_DEFAULT;
	return 0;
}

/* Whether the preset trims after transactions (see gm_xact_trim). */
bool
gm_xact_trim_wanted(void)
{
	return gm_malloc_is_glibc && gm_presets[cur_preset].xact_trim_bytes > 0;
}

/*
 * The executor memory (bytes) that counts as reusing the free heap, when
 * the preset also releases memory of busy backends after idle_delay; 0 when
 * it does not (or the delay is off).  Plain reads only.
 */
int64
gm_reuse_bytes(void)
{
	GmSource	source;

	if (!gm_malloc_is_glibc || gm_idle_delay(&source) <= 0)
		return 0;
	return gm_presets[cur_preset].reuse_bytes;
}

/* Resolve parameter p's effective value and source. */
void
gm_resolve(GmParam p, GmResolved *r)
{
	int64		preset_value = gm_preset_value(cur_preset, p);

	if (cur_knob[p] >= 0)
	{
		r->value = cur_knob[p];
		r->source = GM_SRC_SETTING;
	}
	else if (gm_env_value[p] >= 0)
	{
		r->value = gm_env_value[p];
		r->source = GM_SRC_ENVIRONMENT;
	}
	else if (preset_value >= 0)
	{
		r->value = preset_value;
		r->source = GM_SRC_PRESET;
	}
	else
	{
		r->value = gm_params[p].glibc_default;
		r->source = GM_SRC_GLIBC_DEFAULT;
	}

	/* Environment values are applied by glibc itself at process start. */
	if (!gm_malloc_is_glibc)
		r->applied = false;
	else if (applied[p] >= 0)
		r->applied = applied[p] == r->value;
	else
		r->applied = r->source == GM_SRC_ENVIRONMENT;
}

/*
 * The smallest request glibc's malloc may serve with mmap in this process:
 * the threshold last passed to mallopt, else the environment's if glibc took
 * it (not above its limit), else glibc's starting one (its dynamic threshold
 * only rises).  Another module's mallopt is not seen.
 */
int64
gm_mmap_floor(void)
{
	if (applied[GM_MMAP_THRESHOLD] >= 0)
		return applied[GM_MMAP_THRESHOLD];
	if (gm_env_value[GM_MMAP_THRESHOLD] >= 0)
		return gm_env_value[GM_MMAP_THRESHOLD];
	return gm_params[GM_MMAP_THRESHOLD].glibc_default;
}

/*
 * A count of the M_MMAP_THRESHOLD changes this process made: a statement
 * that saw it move may have been mmapped at a floor it cannot see at its
 * start and end (a function's SET clause puts the value back).
 */
uint64
gm_mmap_threshold_changes(void)
{
	return mmap_threshold_changes;
}

/* Whether glibc's dynamic thresholds are still active in this process. */
bool
gm_dynamic_active(GmSource *why)
{
	if (dynamic_frozen)
	{
		*why = frozen_by;
		return false;
	}
	for (int p = 0; p < GM_NPARAMS; p++)
	{
		if (gm_params[p].freezes_dynamic && gm_env_value[p] >= 0)
		{
			*why = GM_SRC_ENVIRONMENT;
			return false;
		}
	}
	*why = GM_SRC_GLIBC_DEFAULT;
	return true;
}

/* Call mallopt for every parameter whose effective value changed. */
static void
gm_apply(void)
{
	if (!gucs_ready || !gm_malloc_is_glibc)
		return;

	for (int p = 0; p < GM_NPARAMS; p++)
	{
		GmResolved	r;
		int64		target;

		gm_resolve(p, &r);
		if (r.source == GM_SRC_SETTING || r.source == GM_SRC_PRESET)
			target = r.value;
		else if (applied[p] >= 0)
			target = r.value;	/* restore the environment's or glibc's value */
		else
			continue;			/* never touched: leave glibc alone */

		if (target == applied[p])
			continue;

		/*
		 * mallopt takes an int: an environment value above INT_MAX cannot be
		 * restored once changed.  gm_resolve then reports it not applied.
		 */
		if (target > INT_MAX || target < 0)
			continue;

		/* glibc reads the arena limits once; only the postmaster sets them. */
		if ((p == GM_ARENA_MAX || p == GM_ARENA_TEST) &&
			!process_shared_preload_libraries_in_progress)
			continue;

#ifdef GM_HAVE_GLIBC
		if (mallopt(gm_params[p].mallopt_param, (int) target) != 1)
		{
			/* Check hooks refuse what glibc would; this is a safety net. */
			ereport(WARNING,
					(errcode(ERRCODE_WARNING),
					 errmsg("glibc rejected mallopt(%s, " INT64_FORMAT ")",
							gm_params[p].name, target),
					 errdetail("The previous value stays in force.")));
			continue;
		}
#endif
		applied[p] = target;
		if (p == GM_MMAP_THRESHOLD)
			mmap_threshold_changes++;
		if (gm_params[p].freezes_dynamic && !dynamic_frozen)
		{
			dynamic_frozen = true;
			frozen_by = r.source == GM_SRC_PRESET ? GM_SRC_PRESET : GM_SRC_SETTING;
		}
	}
	applied_work_mem = work_mem;
}

/* Before each query: presets that follow work_mem re-derive their thresholds. */
void
gm_statement_start(void)
{
	if (gm_presets[cur_preset].rule == GM_RULE_WORK_MEM && work_mem != applied_work_mem)
		gm_apply();
}

/*
 * After a transaction, once its memory is freed: return free heap memory
 * when the preset says so, glibc holds at least xact_trim_bytes free, and
 * RssAnon grew by that much since the last such trim.  RssAnon, not glibc's
 * free bytes, because memory a trim returned stays counted as free in glibc's
 * bins: a later transaction that reuses and frees it again leaves the free
 * bytes unchanged but the pages resident.  Runs in normal context (the next
 * statement start) or at the idle point.  A busy backend (at statement
 * start) reads /proc at most every GM_RSS_CHECK_MS and otherwise returns
 * false: the check is left to the idle point.
 */
bool
gm_xact_trim(bool busy)
{
	GmMallinfo	mi;
	int64		min_growth;
	int64		rss;
	int64		now;

	if (!gm_xact_trim_wanted())
		return true;
	min_growth = gm_presets[cur_preset].xact_trim_bytes;
	gm_mallinfo(&mi);
	if ((int64) mi.fordblks < min_growth)
		return true;

	/*
	 * glibc keeps counting trimmed pages as free, so once 1 MB is free this
	 * point is reached after every transaction: a busy backend reads /proc
	 * at most every GM_RSS_CHECK_MS.
	 */
	now = gm_monotonic_usec();
	if (busy && last_rss_check != 0 &&
		now - last_rss_check < GM_RSS_CHECK_MS * 1000)
		return false;
	last_rss_check = now;
	if ((rss = gm_rss_anon()) < 0)
		return true;
	if (rss > rss_after_trim + min_growth)
	{
		gm_release(0);
		rss_after_trim = gm_rss_anon();
	}
	else if (rss < rss_after_trim)
		rss_after_trim = rss;
	return true;
}

/* The error detail for a non-default value when malloc is not glibc's. */
static bool
refuse_foreign_allocator(const char *what)
{
	GUC_check_errdetail("%s has no effect: malloc in this process is provided by %s, not by glibc.",
						what, gm_allocator);
	return false;
}

/* Check hook for glibc_malloc.preset. */
static bool
check_preset(int *newval, void **extra, GucSource source)
{
	if (*newval != GM_PRESET_DEFAULT && !gm_malloc_is_glibc)
		return refuse_foreign_allocator("glibc_malloc.preset");
	return true;
}

/* Assign hook for glibc_malloc.preset. */
static void
assign_preset(int newval, void *extra)
{
	cur_preset = newval;
	gm_apply();
	if (on_settings_change)
		on_settings_change();
}

/* Assign hook for glibc_malloc.idle_release_delay. */
static void
assign_idle_delay(int newval, void *extra)
{
	cur_idle_delay = newval;
	if (on_settings_change)
		on_settings_change();
}

/* Assign hook for glibc_malloc.max_trim_threshold (kB). */
static void
assign_max_trim(int newval, void *extra)
{
	cur_max_trim = (int64) newval * 1024;
	gm_apply();
}

/* Validate a raw knob's new value and pass its byte count through *extra. */
static bool
check_knob(GmParam p, int newval, void **extra)
{
	const GmParamInfo *def = &gm_params[p];
	int64		bytes = newval == def->boot ? -1 : (int64) newval * def->scale;
	int64	   *result;

	if (bytes >= 0 && !gm_malloc_is_glibc)
		return refuse_foreign_allocator(psprintf("glibc_malloc.%s", gm_params[p].name));

	if (p == GM_MMAP_THRESHOLD && bytes > gm_mmap_threshold_limit())
	{
		GUC_check_errdetail("glibc %s accepts an mmap threshold of at most " INT64_FORMAT " kB; glibc 2.35 and later accept more.",
							gm_glibc_version(), gm_mmap_threshold_limit() / 1024);
		return false;
	}

	/*
	 * glibc reads the arena limits once, so they only work when the
	 * postmaster applies them at start.  Keeping the value in force is fine.
	 * When preloaded they are PGC_POSTMASTER, and PostgreSQL itself answers
	 * a changed value on reload with "cannot be changed without restarting".
	 */
	if ((p == GM_ARENA_MAX || p == GM_ARENA_TEST) && bytes >= 0 && !preloaded &&
		bytes != cur_knob[p])
	{
		GUC_check_errdetail("glibc_malloc.%s takes effect only when glibc_malloc is loaded through shared_preload_libraries.",
							gm_params[p].name);
		return false;
	}

	result = gm_guc_malloc(sizeof(int64));
	if (result == NULL)
		return false;
	*result = bytes;
	*extra = result;
	return true;
}

/* Store a raw knob's byte count (computed by check_knob) and apply it. */
static void
assign_knob(GmParam p, void *extra)
{
	cur_knob[p] = *(int64 *) extra;
	gm_apply();
}

/* One check and one assign hook per knob: GUC hooks do not get the name. */
#define GM_KNOB_HOOKS(param, id) \
static bool check_##id(int *newval, void **extra, GucSource source) \
{ return check_knob(param, *newval, extra); } \
static void assign_##id(int newval, void *extra) \
{ assign_knob(param, extra); }

GM_KNOB_HOOKS(GM_TRIM_THRESHOLD, trim_threshold)
GM_KNOB_HOOKS(GM_MMAP_THRESHOLD, mmap_threshold)
GM_KNOB_HOOKS(GM_TOP_PAD, top_pad)
GM_KNOB_HOOKS(GM_MMAP_MAX, mmap_max)
GM_KNOB_HOOKS(GM_MXFAST, mxfast)
GM_KNOB_HOOKS(GM_PERTURB, perturb)
GM_KNOB_HOOKS(GM_ARENA_MAX, arena_max)
GM_KNOB_HOOKS(GM_ARENA_TEST, arena_test)

static const struct
{
	GucIntCheckHook check;
	GucIntAssignHook assign;
}			knob_hooks[GM_NPARAMS] = {
	[GM_TRIM_THRESHOLD] = {check_trim_threshold, assign_trim_threshold},
	[GM_MMAP_THRESHOLD] = {check_mmap_threshold, assign_mmap_threshold},
	[GM_TOP_PAD] = {check_top_pad, assign_top_pad},
	[GM_MMAP_MAX] = {check_mmap_max, assign_mmap_max},
	[GM_MXFAST] = {check_mxfast, assign_mxfast},
	[GM_PERTURB] = {check_perturb, assign_perturb},
	[GM_ARENA_MAX] = {check_arena_max, assign_arena_max},
	[GM_ARENA_TEST] = {check_arena_test, assign_arena_test},
};

/*
 * Define the policy's glibc_malloc.* GUCs, then apply the result once;
 * on_change is called when what is due after a transaction may have changed.
 */
void
gm_define_gucs(void (*on_change) (void))
{
	on_settings_change = on_change;
	preloaded = process_shared_preload_libraries_in_progress;
	for (int p = 0; p < GM_NPARAMS; p++)
		applied[p] = -1;
	for (int i = 0; i < GM_NPRESETS; i++)
		preset_options[i] = (struct config_enum_entry)
		{
			gm_presets[i].name, i, false
		};
	preset_options[GM_NPRESETS] = (struct config_enum_entry)
	{
		NULL, 0, false
	};

	DefineCustomEnumVariable("glibc_malloc.preset",
							 "Selects a malloc preset: default (leave glibc alone), greedy (keep freed memory for reuse), frugal (return it promptly), balanced (greedy while working, released when idle).",
							 "Explicit glibc_malloc.<param> settings and the environment take precedence over the preset.",
							 &preset_guc,
							 GM_PRESET_DEFAULT,
							 preset_options,
							 PGC_USERSET,
							 0,
							 check_preset, assign_preset, NULL);

	DefineCustomIntVariable("glibc_malloc.max_trim_threshold",
							"Upper bound on the trim threshold (memory kept) of the greedy preset.",
							"greedy uses mmap_threshold = min(work_mem + 4 kB, max_trim_threshold / 2) and trim_threshold = min(2 * mmap_threshold, max_trim_threshold).",
							&max_trim_threshold_guc,
							64 * 1024, 256, GM_MAX_KB,
							PGC_SUSET,
							GUC_UNIT_KB,
							NULL, assign_max_trim, NULL);

	/* USERSET: it only changes when the caller's own backend trims. */
	DefineCustomIntVariable("glibc_malloc.idle_release_delay",
							"Returns free malloc memory to the OS after a backend has been idle this long (-1: the preset decides; 0: off).",
							"Idle means waiting for the next client command outside any transaction. The balanced preset uses 1s.",
							&idle_release_delay_guc,
							-1, -1, INT_MAX,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, assign_idle_delay, NULL);

	for (int p = 0; p < GM_NPARAMS; p++)
	{
		const GmParamInfo *def = &gm_params[p];
		GucContext	context = def->context;

		/*
		 * PostgreSQL refuses PGC_POSTMASTER variables defined after startup,
		 * so without preloading the arena knobs become SUSET, and their
		 * check hook refuses every value with "needs preloading".
		 */
		if (context == PGC_POSTMASTER && !preloaded)
			context = PGC_SUSET;

		knob_guc[p] = def->boot;
		cur_knob[p] = -1;
		DefineCustomIntVariable(psprintf("glibc_malloc.%s", gm_params[p].name),
								def->short_desc,
								NULL,
								&knob_guc[p],
								def->boot, def->min, def->max,
								context,
								def->flags,
								knob_hooks[p].check, knob_hooks[p].assign, NULL);
	}

	gucs_ready = true;
	gm_apply();
}
