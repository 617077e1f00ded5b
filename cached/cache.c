/* cache.c: the cache's lifecycle (new, free, hello), the copies between
 * the live buffers and arena memory, and clear. The turn (plan, commit,
 * abort) is planner.c's; the counters as JSON are stats.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache_int.h"
#include "moor.h"
#include "proto.h"

#define GiB (1024ull * 1024 * 1024)
#define MiB (1024ull * 1024)

void cache_cfg_defaults(cache_cfg *c)
{
	memset(c, 0, sizeof *c);
	snprintf(c->arena_prefix, sizeof c->arena_prefix, "moor");
	c->device_bytes = 24 * GiB;
	c->host_bytes = 12 * GiB;
	c->mem_ceiling = 70 * GiB;
	c->mem_peak = 77 * GiB;
	c->resident_bytes = 5 * GiB / 2;
	c->resident_keep = 4;
	c->pin_every = 4096;
	c->pin_upto = 32768;
	c->guest_max = 8192;
	c->guest_margin = 512;
	c->stash_bytes = 1 * GiB;
	c->pin_bytes = 4 * GiB;
	c->pin_anchors = 8;
	c->park_bytes = 4 * GiB;
	c->park_anchors = 4;
	c->end_anchor = 1;
	c->store_bytes = 2 * GiB;
	c->store_entry_bytes = 1 * GiB;
	c->store_boundaries = 1;
	c->store_sessions = 1;
	c->unified = 1;
	c->dev_cuda = -1;
	c->spill_bytes = 64 * GiB;
	c->spill_hours = 48;
	c->spill_codec = 1;
	c->spill_min_tokens = 16384;
	c->codec_threads = 8;
	c->disk_on = 1;
	c->disk_bytes = 16 * GiB;
	c->disk_days = 7;
	c->disk_min_free = 50 * GiB;
	c->disk_admit_after = 2;
	c->disk_head_anchors = 4;
	c->disk_min_tokens = 4096;
	c->write_budget = 200000000000ull; /* 200 GB (10^9): drive writes */
	c->guard_evict_tokens = 32768;
	c->prefill_tps = 740;
}

/* ---- layout ---- */

static void view_geom(const cache_view *v, cache_vgeom *g)
{
	uint64_t outer = 1, inner = v->elt;
	for (uint32_t d = 0; d < v->ndim; d++) {
		if (d < v->token_axis)
			outer *= (uint64_t)v->dims[d];
		else if (d > v->token_axis)
			inner *= (uint64_t)v->dims[d];
	}
	g->outer = outer;
	g->inner = inner;
	g->rowb = outer * inner;
}

uint64_t cache_layout_row_bytes(const cache_layout *l)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < l->n_views; i++) {
		cache_vgeom g;
		view_geom(&l->view[i], &g);
		n += g.rowb;
	}
	return n;
}

uint64_t cache_layout_section_bytes(const cache_layout *l)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < l->n_sections; i++)
		n += l->sec[i].bytes;
	return n;
}

static int layout_check(const cache_layout *l, char *err)
{
	if (l->n_sections > CACHE_MAX_SECTIONS ||
	    l->n_views > CACHE_MAX_VIEWS) {
		moor_errf(err, "layout: %u sections, %u views (at most %d, %d)",
			  l->n_sections, l->n_views, CACHE_MAX_SECTIONS,
			  CACHE_MAX_VIEWS);
		return MOOR_ERANGE;
	}
	if (l->n_sections == 0 && l->n_views == 0) {
		moor_errf(err, "layout: no section and no view");
		return MOOR_ERANGE;
	}
	if (l->window == 0 || l->grid == 0) {
		moor_errf(err,
			  "layout: window %llu, grid %u (both must be > 0)",
			  (unsigned long long)l->window, l->grid);
		return MOOR_ERANGE;
	}
	for (uint32_t i = 0; i < l->n_sections; i++)
		if (l->sec[i].bytes == 0) {
			moor_errf(err, "layout: section %u (%.*s) has 0 bytes",
				  i, CACHE_NAME_MAX, l->sec[i].name);
			return MOOR_ERANGE;
		}
	for (uint32_t i = 0; i < l->n_views; i++) {
		const cache_view *v = &l->view[i];
		if (v->elt == 0 || v->ndim == 0 || v->ndim > CACHE_MAX_DIMS ||
		    v->token_axis >= v->ndim) {
			moor_errf(err,
				  "layout: view %u (%.*s): elt %u, ndim %u, "
				  "token axis %u",
				  i, CACHE_NAME_MAX, v->name, v->elt, v->ndim,
				  v->token_axis);
			return MOOR_ERANGE;
		}
		for (uint32_t d = 0; d < v->ndim; d++)
			if (d != v->token_axis && v->dims[d] <= 0) {
				moor_errf(err,
					  "layout: view %u (%.*s): dim %u "
					  "is %lld",
					  i, CACHE_NAME_MAX, v->name, d,
					  (long long)v->dims[d]);
				return MOOR_ERANGE;
			}
	}
	return 0;
}

/* Same fingerprint and the same state layout (the workspace figures may
 * change without touching a stored byte). */
static int layout_same(const cache_layout *a, const cache_layout *b)
{
	if (memcmp(a->fingerprint, b->fingerprint, sizeof a->fingerprint) ||
	    a->n_sections != b->n_sections || a->n_views != b->n_views ||
	    a->window != b->window || a->grid != b->grid)
		return 0;
	for (uint32_t i = 0; i < a->n_sections; i++)
		if (strncmp(a->sec[i].name, b->sec[i].name, CACHE_NAME_MAX) ||
		    a->sec[i].layer != b->sec[i].layer ||
		    a->sec[i].bytes != b->sec[i].bytes)
			return 0;
	for (uint32_t i = 0; i < a->n_views; i++) {
		const cache_view *x = &a->view[i], *y = &b->view[i];
		if (strncmp(x->name, y->name, CACHE_NAME_MAX) ||
		    x->layer != y->layer || x->elt != y->elt ||
		    x->ndim != y->ndim || x->token_axis != y->token_axis)
			return 0;
		for (uint32_t d = 0; d < x->ndim; d++)
			if (d != x->token_axis && x->dims[d] != y->dims[d])
				return 0;
	}
	return 1;
}

/* ---- small helpers ---- */

void *cache_dev_at(cache *c, uint64_t off)
{
	return (char *)arena_base(c->dev) + off;
}

void *cache_host_at(cache *c, uint64_t off)
{
	return (char *)arena_base(c->host) + off;
}

/* ---- batches of copies ----
 *
 * The cache's copies of rows and sections go to the mover in batches
 * (arena_mover.copyv): a restore from the host arena, a copy a view a
 * block of rows, is a few calls, not a thousand. A copy of one run that
 * continues the batch's last copy (the same width, each side at one
 * stride on from it, at most XQ_PITCH_MAX) becomes one more run of it:
 * a block's rows of every view, the views being buffers of one size side
 * by side in the device arena and back to back in the block, are one 2D
 * copy. The bytes each copies are the same; the memcpy mover copies them
 * run by run, as before. */
#define XQ_PITCH_MAX (1ull << 30)

int cache_xq_flush(cache *c)
{
	uint32_t n = c->n_xq;
	c->n_xq = 0;
	if (!n)
		return 0;
	const arena_mover *mv = c->mv;
	if (mv->copyv)
		return mv->copyv(mv->ctx, c->xq_lane, c->xq, n);
	for (uint32_t i = 0; i < n; i++) {
		const arena_copy *x = &c->xq[i];
		int rc = mv->copy2d(mv->ctx, x->dst, x->dpitch, x->src,
				    x->spitch, x->width, x->height);
		if (rc)
			return rc;
	}
	return 0;
}

static int xq_add(cache *c, void *dst, size_t dpitch, const void *src,
		  size_t spitch, size_t width, size_t height)
{
	if (!width || !height)
		return 0;
	if (c->n_xq && height == 1) {
		arena_copy *e = &c->xq[c->n_xq - 1];
		uintptr_t ed = (uintptr_t)e->dst, es = (uintptr_t)e->src;
		uintptr_t xd = (uintptr_t)dst, xs = (uintptr_t)src;
		if (e->width == width && e->height == 1 && xd >= ed + width &&
		    xs >= es + width && xd - ed <= XQ_PITCH_MAX &&
		    xs - es <= XQ_PITCH_MAX) {
			e->dpitch = xd - ed;
			e->spitch = xs - es;
			e->height = 2;
			return 0;
		}
		if (e->width == width && e->height > 1 &&
		    xd == ed + e->height * e->dpitch &&
		    xs == es + e->height * e->spitch) {
			e->height++;
			return 0;
		}
	}
	if (c->n_xq == CACHE_XQ_MAX) {
		int rc = cache_xq_flush(c);
		if (rc)
			return rc;
	}
	c->xq[c->n_xq++] = (arena_copy){.dst = dst,
					.src = src,
					.dpitch = dpitch,
					.spitch = spitch,
					.width = width,
					.height = height};
	return 0;
}

/* The sections in (to the live buffers) or out, from or to buf. */
static int secs_xfer(cache *c, int out, char *buf)
{
	uint64_t o = 0;
	int rc = 0;
	for (uint32_t i = 0; i < c->lay->n_sections && !rc; i++) {
		char *live = cache_dev_at(c, c->sec_off[i]);
		uint64_t n = c->lay->sec[i].bytes;
		rc = out ? xq_add(c, buf + o, n, live, n, n, 1)
			 : xq_add(c, live, n, buf + o, n, n, 1);
		o += n;
	}
	int fr = cache_xq_flush(c);
	return rc ? rc : fr;
}

int cache_secs_out(cache *c, void *dst)
{
	return secs_xfer(c, 1, dst);
}

int cache_secs_in(cache *c, const void *src)
{
	return secs_xfer(c, 0, (char *)src);
}

int cache_secs_zero(cache *c)
{
	for (uint32_t i = 0; i < c->lay->n_sections; i++) {
		int rc = c->mv->zero(c->mv->ctx, cache_dev_at(c, c->sec_off[i]),
				     c->lay->sec[i].bytes);
		if (rc)
			return rc;
	}
	return 0;
}

int cache_view_rows(const arena_mover *mv, const cache_vgeom *g, void *dst,
		    uint64_t dwin, uint64_t drow, const void *src,
		    uint64_t swin, uint64_t srow, uint64_t n)
{
	if (!n)
		return 0;
	return mv->copy2d(mv->ctx, (char *)dst + drow * g->inner,
			  dwin * g->inner, (const char *)src + srow * g->inner,
			  swin * g->inner, n * g->inner, g->outer);
}

int cache_rows_add(cache *c, int out, void *buf, uint64_t bwin, uint64_t brow,
		   uint64_t live_row, uint64_t n)
{
	return cache_rows_add_some(c, out, buf, bwin, brow, live_row, n, NULL);
}

int cache_rows_add_some(cache *c, int out, void *buf, uint64_t bwin,
			uint64_t brow, uint64_t live_row, uint64_t n,
			const uint8_t *pick)
{
	uint64_t o = 0, W = c->lay->window;
	MOOR_ASSERT(live_row + n <= W && brow + n <= bwin);
	if (!n)
		return 0;
	for (uint32_t i = 0; i < c->lay->n_views; i++) {
		const cache_vgeom *g = &c->vg[i];
		if (pick && !pick[i]) {
			o += bwin * g->rowb;
			continue;
		}
		char *live = (char *)cache_dev_at(c, c->view_off[i]) +
			     live_row * g->inner;
		char *b = (char *)buf + o + brow * g->inner;
		size_t lp = W * g->inner, bp = bwin * g->inner;
		int rc = out ? xq_add(c, b, bp, live, lp, n * g->inner, g->outer)
			     : xq_add(c, live, lp, b, bp, n * g->inner,
				      g->outer);
		if (rc)
			return rc;
		o += bwin * g->rowb;
	}
	return 0;
}

int cache_rows_lane(cache *c, int lane, int out, void *buf, uint64_t bwin,
		    uint64_t brow, uint64_t live_row, uint64_t n)
{
	MOOR_ASSERT(c->n_xq == 0 && lane >= 0 && lane < ARENA_LANES);
	c->xq_lane = lane;
	int rc = cache_rows_add(c, out, buf, bwin, brow, live_row, n);
	int fr = cache_xq_flush(c);
	c->xq_lane = 0;
	return rc ? rc : fr;
}

int cache_rows_out(cache *c, void *buf, uint64_t bwin, uint64_t brow,
		   uint64_t live_row, uint64_t n)
{
	return cache_rows_lane(c, 0, 1, buf, bwin, brow, live_row, n);
}

int cache_rows_in(cache *c, const void *buf, uint64_t bwin, uint64_t brow,
		  uint64_t live_row, uint64_t n)
{
	return cache_rows_lane(c, 0, 0, (void *)buf, bwin, brow, live_row, n);
}

int cache_lanes(const cache *c)
{
	return c->mv->mark && c->mv->after;
}

int cache_lane_mark(cache *c, int lane, uint64_t *pt)
{
	*pt = 0;
	return cache_lanes(c) ? c->mv->mark(c->mv->ctx, lane, pt) : 0;
}

int cache_lane_after(cache *c, int lane, uint64_t pt)
{
	return cache_lanes(c) ? c->mv->after(c->mv->ctx, lane, pt) : 0;
}

void cache_view_copy(const cache_view *v, void *dst, uint64_t dst_window,
		     uint64_t dst_row, const void *src, uint64_t src_window,
		     uint64_t src_row, uint64_t n)
{
	cache_vgeom g;
	view_geom(v, &g);
	MOOR_ASSERT(dst_row + n <= dst_window && src_row + n <= src_window);
	cache_view_rows(&arena_mover_memcpy, &g, dst, dst_window, dst_row, src,
			src_window, src_row, n);
}

uint64_t cache_common_prefix(const int32_t *a, uint64_t na, const int32_t *b,
			     uint64_t nb)
{
	uint64_t n = cache_min64(na, nb), i = 0;
	while (i < n && a[i] == b[i])
		i++;
	return i;
}

uint64_t cache_ids_hash(const int32_t *ids, uint64_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (uint64_t i = 0; i < n; i++) {
		h ^= (uint32_t)ids[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

int cache_session_none(const char *s)
{
	return !s || !s[0];
}

int cache_session_same(const char *a, const char *b)
{
	return !cache_session_none(a) && !cache_session_none(b) &&
	       strcmp(a, b) == 0;
}

char *cache_str_dup(const char *s)
{
	if (cache_session_none(s))
		return NULL;
	size_t n = strlen(s) + 1;
	char *d = malloc(n);
	if (d)
		memcpy(d, s, n);
	return d;
}

const char *cache_tier_name(int tier)
{
	return proto_tier_name(tier < 0 ? UINT32_MAX : (uint32_t)tier);
}

/* ---- lifecycle ---- */

int cache_new(const cache_cfg *cfg, cache **out, char *err)
{
	MOOR_ASSERT(cache_tiers_check());
	*out = NULL;
	if (cfg->device_bytes < ARENA_ALIGN || cfg->host_bytes < ARENA_ALIGN) {
		moor_errf(err, "cache: arena sizes %llu and %llu are too small",
			  (unsigned long long)cfg->device_bytes,
			  (unsigned long long)cfg->host_bytes);
		return MOOR_ERANGE;
	}
	cache *c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	c->cfg = *cfg;
	c->cfg.arena_prefix[sizeof c->cfg.arena_prefix - 1] = 0;
	c->mv = &arena_mover_memcpy;
	c->taint = CACHE_NO_TAINT;
	c->lay = calloc(1, sizeof *c->lay);
	c->xq = calloc(CACHE_XQ_MAX, sizeof *c->xq);
	if (!c->lay || !c->xq) {
		free(c->lay);
		free(c->xq);
		free(c);
		return -ENOMEM;
	}
	char name[ARENA_NAME_MAX];
	snprintf(name, sizeof name, "/%s.dev", c->cfg.arena_prefix);
	uint64_t dsz = cache_round_up(cfg->device_bytes, ARENA_ALIGN);
	int rc = cfg->dev_cuda >= 0
		     ? arena_cuda_create(name, dsz, cfg->dev_cuda, &c->dev, err)
		     : arena_create(name, dsz, &c->dev, err);
	if (!rc) {
		snprintf(name, sizeof name, "/%s.host", c->cfg.arena_prefix);
		rc = arena_create(name,
				  cache_round_up(cfg->host_bytes, ARENA_ALIGN),
				  &c->host, err);
	}
	/* the CUDA mover registers the host arena for DMA: its pages stay */
	if (!rc && cfg->dev_cuda >= 0)
		arena_set_punch(c->host, 0);
	if (!rc && cfg->dev_cuda >= 0 &&
	    (rc = arena_cuda_mover_new(cfg->dev_cuda, c->dev, c->host,
				       &c->mv_own, err)) == 0)
		c->mv = c->mv_own;
	const char *tr = getenv("MOOR_MOVER_TRACE");
	c->trace.on = tr && strcmp(tr, "0") != 0 && c->mv->stats;
	c->spill.dfd = -1;
	if (!rc)
		rc = cache_ledger_open(c, err);
	if (!rc)
		rc = cache_spill_open(c, err);
	if (!rc)
		rc = cache_disk_open(c, err);
	if (rc) {
		cache_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* Drops every cache and the resident prompt; the live buffers stay. */
static void drop_all(cache *c)
{
	if (c->t.active)
		cache_turn_abort(c, 0, 0);
	if (c->stash.have)
		cache_stash_drop(c);
	cache_anchors_clear(c);
	cache_end_release(c);
	cache_pin_drop(c);
	cache_park_drop(c);
	cache_store_clear(c);
	c->valid = 0;
	c->n_mk = 0;
	c->taint = CACHE_NO_TAINT;
	free(c->res_session);
	c->res_session = NULL;
}

static void layout_release(cache *c)
{
	if (!c->have_layout)
		return;
	cache_disk_detach(c); /* its writer reads the live rows */
	drop_all(c);
	for (uint32_t i = 0; i < c->lay->n_sections; i++)
		if (c->sec_off[i] != UINT64_MAX)
			arena_release(c->dev, c->sec_off[i]);
	for (uint32_t i = 0; i < c->lay->n_views; i++)
		if (c->view_off[i] != UINT64_MAX)
			arena_release(c->dev, c->view_off[i]);
	free(c->sec_off);
	free(c->view_off);
	free(c->vg);
	free(c->res_ids);
	free(c->t.ids);
	free(c->t.session);
	c->t.session = NULL;
	free(c->ph);
	c->sec_off = c->view_off = NULL;
	c->vg = NULL;
	c->res_ids = c->t.ids = NULL;
	c->ph = NULL;
	c->have_layout = 0;
}

void cache_free(cache *c)
{
	if (!c)
		return;
	layout_release(c);
	cache_disk_close(c);
	cache_spill_close(c);
	cache_ledger_close(c);
	free(c->anc);
	free(c->mk);
	free(c->st);
	free(c->lay);
	free(c->xq);
	arena_cuda_mover_free(c->mv_own); /* before the host arena goes */
	arena_close(c->dev);
	arena_close(c->host);
	free(c);
}

void cache_trace_plan(cache *c, int begin, uint64_t n, uint64_t start,
		      int tier, uint64_t bytes)
{
	if (!c->trace.on)
		return;
	if (begin) {
		c->trace.armed = 0;
		c->trace.t0 = moor_now();
		c->mv->stats(c->mv->ctx, &c->trace.s0);
		return;
	}
	c->trace.armed = 1;
	c->trace.t_plan = moor_now();
	c->trace.n = n;
	c->trace.start = start;
	c->trace.tier = tier;
	c->trace.bytes = bytes;
}

static void trace_log(cache *c)
{
	c->trace.armed = 0;
	arena_mover_stats s;
	c->mv->stats(c->mv->ctx, &s);
	const arena_mover_stats *a = &c->trace.s0;
	double total = moor_now() - c->trace.t0;
	double iss = s.issue_s - a->issue_s, wt = s.wait_s - a->wait_s;
	moor_info("mover: plan of %llu tokens from the %s at %llu: %.3f GB "
		  "restored in %.2f ms (%.1f GB/s; %.2f ms to the plan's "
		  "answer) = %llu copies (%.3f GB) in %llu calls issued in "
		  "%.2f ms + %.2f ms waiting + %.2f ms of the plan's own work",
		  (unsigned long long)c->trace.n, cache_tier_name(c->trace.tier),
		  (unsigned long long)c->trace.start, c->trace.bytes / 1e9,
		  total * 1e3, total > 0 ? c->trace.bytes / 1e9 / total : 0.0,
		  (c->trace.t_plan - c->trace.t0) * 1e3,
		  (unsigned long long)(s.copies - a->copies),
		  (double)(s.bytes - a->bytes) / 1e9,
		  (unsigned long long)(s.calls - a->calls), iss * 1e3, wt * 1e3,
		  (total - iss - wt) * 1e3);
}

int cache_sync(cache *c)
{
	int rc = c->mv->sync ? c->mv->sync(c->mv->ctx) : 0;
	if (c->trace.armed)
		trace_log(c);
	return rc;
}

int cache_mover_stats(const cache *c, arena_mover_stats *out)
{
	memset(out, 0, sizeof *out);
	if (!c->mv->stats)
		return MOOR_EUNSUP;
	c->mv->stats(c->mv->ctx, out);
	return 0;
}

void cache_arena_info_get(const cache *c, cache_arena_info *out)
{
	memset(out, 0, sizeof *out);
	snprintf(out->dev_name, sizeof out->dev_name, "%s", arena_name(c->dev));
	snprintf(out->host_name, sizeof out->host_name, "%s",
		 arena_name(c->host));
	out->dev_size = arena_size(c->dev);
	out->host_size = arena_size(c->host);
	out->dev_device = -1;
	if (c->cfg.dev_cuda >= 0 &&
	    arena_cuda_handle(c->dev, out->dev_handle, &out->dev_device) == 0)
		out->dev_cuda = 1;
}

void *cache_dev_base(cache *c)
{
	return arena_base(c->dev);
}

void *cache_host_base(cache *c)
{
	return arena_base(c->host);
}

/* An engine whose workspace cannot fit under mem_peak beside the live
 * buffers attaches (stats, peek and clear still work), but every prefill
 * will be refused: said once, at the attach, with the numbers. */
static void hello_check_peak(cache *c)
{
	uint64_t ws = c->lay->workspace_floor,
		 floor = cache_policy_floor(c, NULL);
	if (floor + ws > c->cfg.mem_peak)
		moor_warn("cache: every prefill will be refused: the engine's "
			  "workspace (%.3f GiB) and the live buffers (%.3f "
			  "GiB) exceed mem_peak (%.3f GiB)",
			  (double)ws / (1 << 30), (double)floor / (1 << 30),
			  (double)c->cfg.mem_peak / (1 << 30));
}

static void hello_fill(cache *c, cache_hello_out *out, int adopted)
{
	hello_check_peak(c);
	memset(out, 0, sizeof *out);
	out->adopted = adopted;
	out->resident_len = c->valid;
	for (uint32_t i = 0; i < c->lay->n_sections; i++)
		out->sec_off[i] = c->sec_off[i];
	for (uint32_t i = 0; i < c->lay->n_views; i++)
		out->view_off[i] = c->view_off[i];
}

int cache_hello(cache *c, const cache_layout *lay, cache_hello_out *out,
		char *err)
{
	int rc = layout_check(lay, err);
	if (rc)
		return rc;
	if (c->have_layout && layout_same(c->lay, lay)) {
		/* the engine died mid-turn: its slots and the rows past the
		 * start are not trusted */
		if (c->t.active)
			cache_turn_abort(c, 0, c->t.start);
		c->lay->workspace_floor = lay->workspace_floor;
		c->lay->workspace_per_token = lay->workspace_per_token;
		moor_info("cache: engine attached with the same fingerprint "
			  "and layout: adopted (%llu resident tokens, %u "
			  "anchors)",
			  (unsigned long long)c->valid, c->n_anc);
		hello_fill(c, out, 1);
		return 0;
	}
	if (c->have_layout) {
		moor_info("cache: engine attached with another %s: dropping "
			  "every cache (%llu resident tokens, %u anchors, %u "
			  "store entries) and carving new live buffers",
			  memcmp(c->lay->fingerprint, lay->fingerprint,
				 sizeof lay->fingerprint)
			      ? "fingerprint"
			      : "state layout",
			  (unsigned long long)c->valid, c->n_anc, c->n_st);
		layout_release(c);
	}
	*c->lay = *lay;
	uint32_t ns = lay->n_sections, nv = lay->n_views;
	uint64_t W = lay->window;
	/* the live buffers must fit before anything sized by the window is
	 * allocated */
	uint64_t need = 0;
	for (uint32_t i = 0; i < ns; i++)
		need += cache_round_up(lay->sec[i].bytes, ARENA_ALIGN);
	for (uint32_t i = 0; i < nv; i++) {
		cache_vgeom g;
		view_geom(&lay->view[i], &g);
		need += cache_round_up(g.rowb * W, ARENA_ALIGN);
	}
	if (need > arena_size(c->dev) - arena_used(c->dev)) {
		moor_errf(err,
			  "cache: the live buffers (%llu bytes: %u "
			  "sections, %u views of %llu tokens) do not fit "
			  "the device arena (%llu bytes, %llu free)",
			  (unsigned long long)need, ns, nv,
			  (unsigned long long)W,
			  (unsigned long long)arena_size(c->dev),
			  (unsigned long long)(arena_size(c->dev) -
					       arena_used(c->dev)));
		return MOOR_ENOSPACE;
	}
	c->sec_off = malloc((ns + 1) * sizeof *c->sec_off);
	c->view_off = malloc((nv + 1) * sizeof *c->view_off);
	c->vg = calloc(nv + 1, sizeof *c->vg);
	c->res_ids = malloc(W * sizeof *c->res_ids);
	c->t.ids = malloc(W * sizeof *c->t.ids);
	c->ph = malloc((W + 1) * sizeof *c->ph);
	c->have_layout = 1; /* layout_release frees what follows */
	if (!c->sec_off || !c->view_off || !c->vg || !c->res_ids || !c->t.ids ||
	    !c->ph) {
		for (uint32_t i = 0; c->sec_off && i < ns; i++)
			c->sec_off[i] = UINT64_MAX;
		for (uint32_t i = 0; c->view_off && i < nv; i++)
			c->view_off[i] = UINT64_MAX;
		if (!c->sec_off || !c->view_off) {
			free(c->sec_off);
			free(c->view_off);
			c->sec_off = c->view_off = NULL;
			c->lay->n_sections = c->lay->n_views = 0;
		}
		layout_release(c);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < ns; i++)
		c->sec_off[i] = UINT64_MAX;
	for (uint32_t i = 0; i < nv; i++)
		c->view_off[i] = UINT64_MAX;
	c->sec_bytes = cache_layout_section_bytes(lay);
	c->row_bytes = cache_layout_row_bytes(lay);
	uint64_t live = 0;
	for (uint32_t i = 0; i < nv; i++) {
		view_geom(&lay->view[i], &c->vg[i]);
		live += c->vg[i].rowb * W;
	}
	live += c->sec_bytes;
	for (uint32_t i = 0; i < ns && !rc; i++)
		rc = arena_alloc(c->dev, lay->sec[i].bytes, &c->sec_off[i]);
	for (uint32_t i = 0; i < nv && !rc; i++)
		rc = arena_alloc(c->dev, c->vg[i].rowb * W, &c->view_off[i]);
	if (rc) {
		moor_errf(err,
			  "cache: the live buffers (%llu bytes: %u "
			  "sections, %u views of %llu tokens) do not fit "
			  "the device arena (%llu bytes)",
			  (unsigned long long)live, ns, nv,
			  (unsigned long long)W,
			  (unsigned long long)arena_size(c->dev));
		layout_release(c);
		return rc == -ENOMEM ? rc : MOOR_ENOSPACE;
	}
	c->valid = 0;
	c->n_mk = 0;
	c->taint = CACHE_NO_TAINT;
	rc = cache_secs_zero(c);
	if (rc) {
		layout_release(c);
		return rc;
	}
	moor_info("cache: live buffers carved: %u sections (%llu bytes), %u "
		  "views (%llu bytes a token, window %llu), grid %u",
		  ns, (unsigned long long)c->sec_bytes, nv,
		  (unsigned long long)c->row_bytes, (unsigned long long)W,
		  lay->grid);
	/* a drained conversation of this fingerprint and layout comes back
	 * into the live buffers (a failure costs the entry, not the hello) */
	cache_ledger_attach(c, lay->fingerprint);
	(void)cache_spill_read_back(c);
	cache_disk_attach(c);
	hello_fill(c, out, 0);
	return 0;
}

/* Whether this cache runs with tier t (cache_tier_ops.on: the RAM tiers
 * always). */
static int tier_runs(const cache *c, const cache_tier_ops *t)
{
	return !t->on || t->on(c);
}

int cache_clear(cache *c, const char *tier)
{
	if (!tier)
		return MOOR_ERANGE;
	/* "ram": every RAM cache; "all": those and the NVMe tiers it runs
	 * with */
	int all = !strcmp(tier, "all"), ram = !strcmp(tier, "ram");
	const cache_tier_ops *one = all || ram ? NULL : cache_tier_named(tier);
	if (!all && !ram && !one)
		return MOOR_ERANGE;
	/* a tier it runs without: an OK would say a tier was emptied that
	 * never held anything (every client, moorctl and gatewayd, relays
	 * this) */
	if (one && !tier_runs(c, one))
		return MOOR_EUNSUP;
	for (int i = 0; i < CACHE_N_TIERS; i++) {
		const cache_tier_ops *t = cache_tiers[i];
		int nvme = (t->flags & CACHE_TF_NVME) != 0;
		if (one ? t != one : (ram && nvme) || !tier_runs(c, t))
			continue;
		if (nvme || c->have_layout)
			(void)t->clear(c);
	}
	return 0;
}
