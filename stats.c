/*-------------------------------------------------------------------------
 *
 * stats.c
 *		SQL functions about the calling backend's malloc.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdio.h>
#include <stdlib.h>

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "glibc_malloc.h"

PG_FUNCTION_INFO_V1(glibc_malloc_settings);
PG_FUNCTION_INFO_V1(glibc_malloc_stats);
PG_FUNCTION_INFO_V1(glibc_malloc_stats_1_3);
PG_FUNCTION_INFO_V1(glibc_malloc_info);
PG_FUNCTION_INFO_V1(glibc_malloc_trim);
PG_FUNCTION_INFO_V1(glibc_malloc_diag_alloc);

/* Add one settings row. */
static void
settings_row(ReturnSetInfo *rsinfo, const char *name, bool has_value, int64 value,
			 const char *unit, const char *source, bool applied, const char *detail)
{
	Datum		values[6];
	bool		nulls[6] = {0};

	values[0] = CStringGetTextDatum(name);
	values[1] = Int64GetDatum(value);
	nulls[1] = !has_value;
	values[2] = CStringGetTextDatum(unit);
	values[3] = CStringGetTextDatum(source);
	values[4] = BoolGetDatum(applied);
	if (detail)
		values[5] = CStringGetTextDatum(detail);
	else
		nulls[5] = true;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/* glibc_malloc_settings(): one row per parameter, with value and source. */
Datum
glibc_malloc_settings(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	GmSource	frozen_by;
	bool		dynamic;

	gm_init_srf(fcinfo);
	gm_statement_start();

	for (int p = 0; p < GM_NPARAMS; p++)
	{
		GmResolved	r;
		const char *detail = NULL;

		gm_resolve(p, &r);
		if (!gm_malloc_is_glibc)
			detail = psprintf("not applied: malloc is provided by %s, not by glibc", gm_allocator);
		else if (p == GM_MXFAST && !gm_glibc_has_fastbins)
			detail = psprintf("no effect: glibc %s has no fastbins", gm_glibc_version());
		else if (r.source == GM_SRC_ENVIRONMENT && !r.applied && r.value > PG_INT32_MAX)
			detail = psprintf("set by %s; cannot be restored through mallopt once changed: above INT_MAX",
							  gm_params[p].tunable);
		else if (r.source == GM_SRC_ENVIRONMENT)
			detail = psprintf("set by %s", gm_params[p].tunable);
		settings_row(rsinfo, gm_params[p].name, true, r.value,
					 gm_params[p].is_size ? "bytes" : "count",
					 gm_source_names[r.source], r.applied, detail);
	}

	{
		GmSource	source;
		int			delay = gm_idle_delay(&source);

		settings_row(rsinfo, "idle_release_delay", true, delay, "ms",
					 gm_source_names[source], gm_malloc_is_glibc, delay > 0 ?
					 "malloc_trim(0) once the backend has been idle this long" : "off");
	}

	dynamic = gm_dynamic_active(&frozen_by);
	settings_row(rsinfo, "dynamic_thresholds", true, dynamic ? 1 : 0, "boolean",
				 gm_source_names[frozen_by], gm_malloc_is_glibc && dynamic,
				 !gm_malloc_is_glibc ? psprintf("malloc is provided by %s, not by glibc", gm_allocator) :
				 dynamic ? "glibc raises its mmap and trim thresholds on its own" :
				 "frozen: glibc keeps static thresholds for the life of this process");

	if (gm_env_hugetlb)
		settings_row(rsinfo, "hugetlb", true, strtol(gm_env_hugetlb, NULL, 0), "count",
					 gm_source_names[GM_SRC_ENVIRONMENT], true, "set by glibc.malloc.hugetlb");

	return (Datum) 0;
}

/*
 * The columns of glibc_malloc_stats() by extension version (see shmem.c's
 * glibc_malloc_backends()): up to 1.2, idle_releases and
 * idle_released_bytes count idle releases and remote trims together; from
 * 1.3 they count idle releases only, and remote_trims and
 * remote_trimmed_bytes follow.
 */
typedef enum GmStatsVersion
{
	GM_STATS_V1_0,
	GM_STATS_V1_3
} GmStatsVersion;

#define GM_STATS_COLS_V1_0	13
#define GM_STATS_COLS_V1_3	15

/* mallinfo2 fields, RssAnon, the allocator and the release counters. */
static Datum
stats_internal(FunctionCallInfo fcinfo, GmStatsVersion api)
{
	TupleDesc	tupdesc;
	GmMallinfo	mi;
	Datum		values[GM_STATS_COLS_V1_3];
	bool		nulls[GM_STATS_COLS_V1_3] = {0};
	const char *version = gm_glibc_version();
	int64		rss = gm_rss_anon();
	GmReleaseCount idle = gm_releases[GM_RELEASE_IDLE];
	GmReleaseCount remote = gm_releases[GM_RELEASE_REMOTE];
	int			i = 0;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	if (tupdesc->natts != (api == GM_STATS_V1_3 ? GM_STATS_COLS_V1_3 : GM_STATS_COLS_V1_0))
		elog(ERROR, "incorrect number of output arguments");

	gm_mallinfo(&mi);
	values[i++] = CStringGetTextDatum(gm_allocator);
	if (version)
		values[i++] = CStringGetTextDatum(version);
	else
		nulls[i++] = true;
	values[i++] = Int64GetDatum((int64) (mi.arena + mi.hblkhd));	/* system_bytes */
	values[i++] = Int64GetDatum((int64) (mi.uordblks + mi.hblkhd));	/* in_use_bytes */
	values[i++] = Int64GetDatum((int64) mi.fordblks);	/* free_bytes */
	values[i++] = Int64GetDatum((int64) mi.fsmblks);	/* fastbin_free_bytes */
	values[i++] = Int64GetDatum((int64) mi.arena);	/* heap_bytes */
	values[i++] = Int64GetDatum((int64) mi.hblks);	/* mmapped_count */
	values[i++] = Int64GetDatum((int64) mi.hblkhd);	/* mmapped_bytes */
	values[i++] = Int64GetDatum((int64) mi.keepcost);	/* releasable_top_bytes */
	values[i] = Int64GetDatum(rss);
	nulls[i++] = rss < 0;
	if (api == GM_STATS_V1_3)
	{
		values[i++] = Int64GetDatum(idle.count);
		values[i++] = Int64GetDatum(idle.bytes);
		values[i++] = Int64GetDatum(remote.count);
		values[i++] = Int64GetDatum(remote.bytes);
	}
	else
	{
		values[i++] = Int64GetDatum(idle.count + remote.count);
		values[i++] = Int64GetDatum(idle.bytes + remote.bytes);
	}
	Assert(i == tupdesc->natts);

	return HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls));
}

/* glibc_malloc_stats(), extension versions 1.0 to 1.2. */
Datum
glibc_malloc_stats(PG_FUNCTION_ARGS)
{
	PG_RETURN_DATUM(stats_internal(fcinfo, GM_STATS_V1_0));
}

/* glibc_malloc_stats(), extension version 1.3. */
Datum
glibc_malloc_stats_1_3(PG_FUNCTION_ARGS)
{
	PG_RETURN_DATUM(stats_internal(fcinfo, GM_STATS_V1_3));
}

/* glibc_malloc_info(): glibc's malloc_info() XML for this backend. */
Datum
glibc_malloc_info(PG_FUNCTION_ARGS)
{
#ifdef GM_HAVE_GLIBC
	char	   *buf = NULL;
	size_t		len = 0;
	FILE	   *f;
	text	   *result;

	if (!gm_malloc_is_glibc)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("malloc_info is not available: malloc is provided by %s, not by glibc",
						gm_allocator)));

	f = open_memstream(&buf, &len);
	if (f == NULL)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
	malloc_info(0, f);
	fclose(f);
	result = cstring_to_text_with_len(buf, len);
	free(buf);
	PG_RETURN_TEXT_P(result);
#else
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("malloc_info is not available: this server is not built on glibc")));
	PG_RETURN_NULL();
#endif
}

/* glibc_malloc_trim(pad): malloc_trim; returns the RssAnon it gave back. */
Datum
glibc_malloc_trim(PG_FUNCTION_ARGS)
{
	int64		pad = PG_GETARG_INT64(0);

	if (pad < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("pad must not be negative")));
	if (!gm_malloc_is_glibc)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("malloc_trim is not available: malloc is provided by %s, not by glibc",
						gm_allocator)));
	PG_RETURN_INT64(gm_release((size_t) pad));
}

/*
 * glibc_malloc_diag_alloc(chunk_size, chunks): diagnostic.  Allocates and
 * touches `chunks` blocks of `chunk_size` bytes, frees them in reverse, and
 * reports what glibc did, measured with mallinfo: how many blocks it served
 * by mmap, how much the heap grew, the free top chunk left once all were
 * allocated (M_TOP_PAD's extra), how much of the growth glibc still holds
 * after the frees, the fastbin bytes the frees left, and, when M_PERTURB is
 * in force, the first byte of the first block before it was written (its
 * fill); without perturb that byte is leftover heap content, so NULL.
 */
Datum
glibc_malloc_diag_alloc(PG_FUNCTION_ARGS)
{
	int64		chunk_size = PG_GETARG_INT64(0);
	int32		chunks = PG_GETARG_INT32(1);
	TupleDesc	tupdesc;
	GmMallinfo	before,
				during,
				after;
	void	  **blocks;
	int			first_byte = -1;
	GmResolved	perturb;
	Datum		values[6];
	bool		nulls[6] = {0};

	if (chunk_size < 1 || chunks < 1 || chunks > 100000 ||
		chunk_size > (int64) 1024 * 1024 * 1024 / chunks)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("chunk_size and chunks must be positive and allocate at most 1 GB in all")));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	blocks = palloc0(sizeof(void *) * chunks);
	gm_mallinfo(&before);
	for (int i = 0; i < chunks; i++)
	{
		blocks[i] = malloc(chunk_size);
		if (blocks[i] == NULL)
		{
			for (int j = i - 1; j >= 0; j--)
				free(blocks[j]);
			ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
		}
		if (i == 0)
			first_byte = *(unsigned char *) blocks[0];
		memset(blocks[i], 0x5a, chunk_size);
	}
	gm_mallinfo(&during);
	for (int i = chunks - 1; i >= 0; i--)
		free(blocks[i]);
	gm_mallinfo(&after);
	pfree(blocks);

	values[0] = Int32GetDatum((int32) (during.hblks - before.hblks));
	values[1] = Int64GetDatum((int64) during.arena - (int64) before.arena);
	values[2] = Int64GetDatum((int64) during.keepcost);
	values[3] = Int64GetDatum((int64) after.arena - (int64) before.arena);
	values[4] = Int64GetDatum((int64) after.fsmblks - (int64) before.fsmblks);
	gm_resolve(GM_PERTURB, &perturb);
	values[5] = Int32GetDatum(first_byte);
	nulls[5] = !(perturb.applied && perturb.value > 0);

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
