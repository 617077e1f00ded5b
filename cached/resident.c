/* resident.c: the resident prefix's anchors and the end anchor.
 *
 * The rows of the resident prompt stay where the prefill wrote them (the
 * live buffers); an anchor is a copy of the sections at a grid line of a
 * prefill (engine-filled slots, never decode state). Anchors are kept in
 * ascending line order, all at or below the resident length.
 *
 * Eviction (resident_bytes): the newest `resident_keep` (4) are never
 * evicted, since the next turn resumes near the end; then the anchors at
 * every pin_every (4,096) up to pin_upto (32,768) are kept for the pin
 * (given up highest first: the pin takes a head, so its low lines matter
 * most); the others go lowest first, so what remains is the pin's lines
 * and a tail of lines just under the newest.
 *
 * The end anchor is one more buffer of sections: the state at the last
 * position the engine forwarded, at commit. Its taint is the resident's
 * then (the lowest decode-written row).
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cache_int.h"
#include "moor.h"

uint64_t cache_anchor_bytes(cache *c)
{
	return cache_round_up(c->sec_bytes, ARENA_ALIGN);
}

/* The anchors resident_bytes holds. */
static uint32_t anchor_budget(cache *c)
{
	uint64_t b = cache_anchor_bytes(c);
	uint64_t n = b ? c->cfg.resident_bytes / b : 0;
	return n > CACHE_MAX_SLOTS * 4 ? CACHE_MAX_SLOTS * 4 : (uint32_t)n;
}

int cache_anchor_pin_kept(cache *c, uint64_t line)
{
	return c->cfg.pin_every && line % c->cfg.pin_every == 0 &&
	       line <= c->cfg.pin_upto;
}

/* The index of the largest anchor line <= lim, or -1. */
static int anchor_le(cache *c, uint64_t lim)
{
	int r = -1;
	for (uint32_t i = 0; i < c->n_anc && c->anc[i].line <= lim; i++)
		r = (int)i;
	return r;
}

int cache_anchor_find(cache *c, uint64_t line)
{
	for (uint32_t i = 0; i < c->n_anc; i++)
		if (c->anc[i].line == line)
			return (int)i;
	return -1;
}

static void anchor_drop(cache *c, uint32_t i)
{
	MOOR_ASSERT(i < c->n_anc);
	arena_release(c->dev, c->anc[i].off);
	memmove(c->anc + i, c->anc + i + 1,
		(c->n_anc - i - 1) * sizeof *c->anc);
	c->n_anc--;
}

static void anchors_drop_above(cache *c, uint64_t line)
{
	while (c->n_anc && c->anc[c->n_anc - 1].line > line)
		anchor_drop(c, c->n_anc - 1);
}

void cache_anchors_clear(cache *c)
{
	while (c->n_anc)
		anchor_drop(c, c->n_anc - 1);
}

int cache_anchor_insert(cache *c, uint64_t line, uint64_t off)
{
	if (c->n_anc == c->cap_anc) {
		uint32_t cap = c->cap_anc ? c->cap_anc * 2 : 32;
		cache_anchor *a = realloc(c->anc, cap * sizeof *a);
		if (!a)
			return -ENOMEM;
		c->anc = a;
		c->cap_anc = cap;
	}
	uint32_t i = c->n_anc;
	while (i > 0 && c->anc[i - 1].line > line)
		i--;
	MOOR_ASSERT(i == 0 || c->anc[i - 1].line != line);
	memmove(c->anc + i + 1, c->anc + i, (c->n_anc - i) * sizeof *c->anc);
	c->anc[i] = (cache_anchor){.line = line, .off = off, .busy = 0};
	c->n_anc++;
	return 0;
}

uint64_t cache_anchor_top(cache *c)
{
	return c->n_anc ? c->anc[c->n_anc - 1].line : 0;
}

/* The eviction order over lines[0, n) (ascending), among the alive ones
 * that are not busy: others lowest first, then the pin's lines highest
 * first, then (all) the newest `keep` lowest first. */
static int pick_victim(cache *c, const uint64_t *line, const uint8_t *alive,
		       const uint8_t *busy, uint32_t n, int all)
{
	uint32_t keep = c->cfg.resident_keep, seen = 0;
	/* the newest `keep` alive entries start at index top */
	uint32_t top = n;
	while (top > 0 && seen < keep) {
		top--;
		if (alive[top])
			seen++;
	}
	if (seen < keep)
		top = 0;
	for (uint32_t i = 0; i < top; i++)
		if (alive[i] && !busy[i] && !cache_anchor_pin_kept(c, line[i]))
			return (int)i;
	for (uint32_t i = top; i-- > 0;)
		if (alive[i] && !busy[i])
			return (int)i;
	if (all)
		for (uint32_t i = top; i < n; i++)
			if (alive[i] && !busy[i])
				return (int)i;
	return -1;
}

/* Next anchor to evict: the budget's order (others lowest first, then the
 * pin's lines highest first); with all = 1 also the newest `keep` (the
 * memory policy). -1 when none may go. */
static int anchor_victim(cache *c, int all)
{
	uint32_t n = c->n_anc;
	if (!n)
		return -1;
	uint64_t line[n];
	uint8_t alive[n], busy[n];
	for (uint32_t i = 0; i < n; i++) {
		line[i] = c->anc[i].line;
		alive[i] = 1;
		busy[i] = (uint8_t)c->anc[i].busy;
	}
	return pick_victim(c, line, alive, busy, n, all);
}

void cache_anchors_plan_slots(cache *c, const uint64_t *lines, uint32_t n,
			      int *keep)
{
	uint32_t m = c->n_anc, t = m + n, K = anchor_budget(c), alive_n = t;
	if (c->cfg.resident_bytes == 0) { /* no anchors at all */
		for (uint32_t j = 0; j < n; j++)
			keep[j] = 0;
		return;
	}
	uint64_t *line = malloc((t + 1) * sizeof *line);
	uint8_t *alive = malloc(t + 1), *busy = calloc(t + 1, 1);
	if (!line || !alive || !busy) {
		free(line);
		free(alive);
		free(busy);
		for (uint32_t j = 0; j < n; j++)
			keep[j] = 0;
		return;
	}
	for (uint32_t i = 0; i < m; i++) {
		line[i] = c->anc[i].line;
		busy[i] = (uint8_t)c->anc[i].busy;
	}
	for (uint32_t j = 0; j < n; j++) {
		MOOR_ASSERT(!m || lines[j] > c->anc[m - 1].line);
		line[m + j] = lines[j];
	}
	memset(alive, 1, t);
	while (alive_n > K) {
		int v = pick_victim(c, line, alive, busy, t, 0);
		if (v < 0)
			break;
		alive[v] = 0;
		alive_n--;
	}
	for (uint32_t j = 0; j < n; j++)
		keep[j] = alive[m + j];
	for (uint32_t i = m; i-- > 0;)
		if (!alive[i]) {
			anchor_drop(c, i);
			c->k.evictions++;
		}
	free(line);
	free(alive);
	free(busy);
}

int cache_anchor_reserve(cache *c, uint64_t line, uint64_t limit, uint64_t *off)
{
	if (cache_anchor_find(c, line) >= 0 || c->cfg.resident_bytes == 0)
		return 1;
	return cache_budget_grow(c, CACHE_LV_ANCHORS, 0, c->sec_bytes, limit,
				 off);
}

int cache_anchor_place(cache *c, uint64_t line, uint64_t off)
{
	int rc = cache_anchor_insert(c, line, off);
	if (rc) {
		arena_release(c->dev, off);
		return rc;
	}
	while (c->n_anc > anchor_budget(c)) {
		int v = anchor_victim(c, 0);
		if (v < 0)
			break;
		anchor_drop(c, (uint32_t)v);
		c->k.evictions++;
	}
	return 0;
}

/* src: sec_bytes back to back, or NULL for the live sections */
static int adopt(cache *c, uint64_t line, const void *src, uint64_t limit)
{
	uint64_t off;
	int rc = cache_anchor_reserve(c, line, limit, &off);
	if (rc)
		return rc > 0 ? 0 : rc;
	rc = src ? c->mv->copy(c->mv->ctx, cache_dev_at(c, off), src,
			       c->sec_bytes)
		 : cache_secs_out(c, cache_dev_at(c, off));
	if (rc) {
		arena_release(c->dev, off);
		return rc;
	}
	return cache_anchor_place(c, line, off);
}

int cache_anchor_adopt(cache *c, uint64_t line, const void *src, uint64_t limit)
{
	return adopt(c, line, src, limit);
}

int cache_anchor_adopt_live(cache *c, uint64_t line, uint64_t limit)
{
	return adopt(c, line, NULL, limit);
}

static void end_drop(cache *c)
{
	if (c->end.have)
		c->k.end_dropped++;
	c->end.have = 0;
}

void cache_resident_cut(cache *c, uint64_t line)
{
	if (c->valid > line)
		c->valid = line;
	anchors_drop_above(c, line);
	if (c->end.have && c->end.len > line)
		end_drop(c);
	cache_marks_cut(c, line);
	if (c->taint >= c->valid)
		c->taint = CACHE_NO_TAINT;
}

void cache_end_release(cache *c)
{
	end_drop(c);
	if (c->end.buf)
		arena_release(c->dev, c->end.off);
	c->end.buf = 0;
}

int cache_end_reserve(cache *c, uint64_t *off)
{
	c->end.have = 0;
	if (!c->end.buf) {
		int rc = cache_budget_grow(c, CACHE_LV_END, 0, c->sec_bytes,
					   c->cfg.mem_ceiling, &c->end.off);
		if (rc) {
			c->k.end_skipped++;
			return rc;
		}
		c->end.buf = 1;
	}
	*off = c->end.off;
	return 0;
}

void cache_end_mark(cache *c, uint64_t len, uint64_t taint)
{
	c->end.have = 1;
	c->end.len = len;
	c->end.taint = taint;
	c->k.end_kept++;
}

int cache_end_keep(cache *c, uint64_t len, uint64_t taint)
{
	uint64_t off;
	int rc = cache_end_reserve(c, &off);
	if (!rc)
		rc = cache_secs_out(c, cache_dev_at(c, off));
	if (rc)
		return rc;
	cache_end_mark(c, len, taint);
	return 0;
}

/* ---- marks and the end anchor's record ---- */

void cache_marks_cut(cache *c, uint64_t line)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < c->n_mk; i++)
		if (c->mk[i].start + c->mk[i].len <= line)
			c->mk[k++] = c->mk[i];
	c->n_mk = k;
}

int cache_marks_add(cache *c, uint64_t start, uint64_t len, uint32_t kind)
{
	if (!len)
		return 0;
	if (c->n_mk == c->cap_mk) {
		uint32_t cap = c->cap_mk ? 2 * c->cap_mk : 16;
		cache_mark *m = realloc(c->mk, cap * sizeof *m);
		if (!m)
			return -ENOMEM;
		c->mk = m;
		c->cap_mk = cap;
	}
	c->mk[c->n_mk++] = (cache_mark){start, len, kind};
	return 0;
}

cache_mark *cache_marks_copy(const cache *c, uint64_t line, uint32_t *n)
{
	*n = 0;
	cache_mark *m = c->n_mk ? malloc(c->n_mk * sizeof *m) : NULL;
	for (uint32_t i = 0; m && i < c->n_mk; i++)
		if (c->mk[i].start + c->mk[i].len <= line)
			m[(*n)++] = c->mk[i];
	if (m && !*n) {
		free(m);
		m = NULL;
	}
	return m;
}

void cache_end_get(cache *c, const int32_t *ids, uint64_t n,
		   cache_end_out *out)
{
	memset(out, 0, sizeof *out);
	out->tier = CACHE_TIER_NONE;
	/* a scratch run (the compaction preparer) changes nothing the
	 * record holds: the request that stops it aligns as before it */
	if (!c->have_layout || (c->t.active && !c->t.scratch) || !ids)
		return;
	uint64_t cr = 0, cp = 0, ep = 0;
	if (c->end.have)
		cr = cache_common_prefix(ids, n, c->res_ids, c->end.len);
	int j =
	    c->park.have ? cache_span_anchor_le(&c->park, c->park.top, 1) : -1;
	if (j >= 0 && c->park.anc[j].end) {
		ep = c->park.anc[j].line;
		cp = cache_common_prefix(ids, n, c->park.ids, ep);
	}
	if (c->end.have && (cr >= cp || !ep)) {
		if (cr >= c->end.len)
			return;
		out->tier = CACHE_TIER_END;
		out->common = cr;
		out->end = c->end.len;
		out->rows = c->res_ids;
		out->marks = c->mk;
		out->n_marks = 0;
		while (out->n_marks < c->n_mk &&
		       c->mk[out->n_marks].start + c->mk[out->n_marks].len <=
			   out->end)
			out->n_marks++;
		return;
	}
	if (ep && cp < ep) {
		out->tier = CACHE_TIER_PARK;
		out->common = cp;
		out->end = ep;
		out->rows = c->park.ids;
		out->marks = c->park.mk;
		out->n_marks = c->park.n_mk;
	}
}

/* ---- the resident prefix as a tier ---- */

static int resident_offer(cache *c, cache_tier_ask *q, cache_tier_offer *o)
{
	int i = anchor_le(c, q->lim);
	if (i < 0 || c->anc[i].line <= q->best)
		return 0;
	uint64_t s = c->anc[i].line;
	memset(o, 0, sizeof *o);
	o->start = o->cut = s;
	o->taint = q->t_res < s ? q->t_res : CACHE_NO_TAINT;
	return 1;
}

static void resident_busy(cache *c, const cache_tier_offer *o, int on)
{
	int i = cache_anchor_find(c, o->start);
	if (i >= 0)
		c->anc[i].busy = on;
}

static int resident_restore(cache *c, const cache_tier_offer *o,
			    const int32_t *ids, uint64_t limit)
{
	int i = cache_anchor_find(c, o->start);
	MOOR_ASSERT(i >= 0);
	return cache_secs_in(c, cache_dev_at(c, c->anc[i].off));
}

static uint64_t resident_bytes(cache *c)
{
	return (uint64_t)c->n_anc * cache_anchor_bytes(c);
}

static uint64_t resident_give_back(cache *c)
{
	if (c->protect_anchors)
		return 0;
	int i = anchor_victim(c, 1);
	if (i < 0)
		return 0;
	anchor_drop(c, (uint32_t)i);
	c->k.evictions++;
	return cache_anchor_bytes(c);
}

/* The anchors, the end anchor and a guest's stash go; a turn in flight
 * keeps its slots (they become the anchors of the prompt it commits) and
 * its rows. */
static int resident_clear(cache *c)
{
	cache_anchors_clear(c);
	cache_end_release(c);
	if (c->stash.have)
		cache_stash_drop(c);
	if (!c->t.active || c->t.guest || c->t.scratch) {
		c->valid = 0;
		c->n_mk = 0;
		c->taint = CACHE_NO_TAINT;
	}
	return 0;
}

static json_t *resident_stats(cache *c)
{
	const cache_counters *k = &c->k;
	json_t *o = json_object();
	CACHE_SETI(o, "hits", k->res_hits);
	CACHE_SETI(o, "misses", k->res_misses);
	CACHE_SETI(o, "anchors", c->n_anc);
	CACHE_SETI(o, "anchors_made", k->anchors_made);
	CACHE_SETI(o, "evictions", k->evictions);
	CACHE_SETI(o, "bytes", resident_bytes(c));
	CACHE_SETI(o, "budget", c->cfg.resident_bytes);
	CACHE_SETI(o, "tokens", c->valid);
	CACHE_SETI(o, "tokens_saved", k->tokens_saved);
	json_object_set_new(o, "taint",
			    c->taint != CACHE_NO_TAINT
				? json_integer((json_int_t)c->taint)
				: json_null());
	json_t *lines = json_array();
	for (uint32_t i = 0; i < c->n_anc; i++)
		json_array_append_new(lines,
				      json_integer((json_int_t)c->anc[i].line));
	json_object_set_new(o, "lines", lines);
	json_object_set_new(o, "session",
			    c->res_session ? json_string(c->res_session)
					   : json_null());
	return o;
}

const cache_tier_ops cache_tier_resident = {
    .tier = CACHE_TIER_RESIDENT,
    .level = CACHE_LV_ANCHORS,
    .lv_name = "anchors",
    .flags = CACHE_TF_IN_PLACE,
    .offer = resident_offer,
    .busy = resident_busy,
    .restore = resident_restore,
    .restore_bytes = cache_tier_secs_bytes,
    .bytes = resident_bytes,
    .give_back = resident_give_back,
    .clear = resident_clear,
    .stats = resident_stats,
};

/* ---- the end anchor as a tier ---- */

static int end_offer(cache *c, cache_tier_ask *q, cache_tier_offer *o)
{
	if (!c->end.have || c->end.len > q->lim || c->end.len <= q->best)
		return 0;
	uint64_t s = c->end.len, t = cache_min64(c->end.taint, q->t_res);
	memset(o, 0, sizeof *o);
	o->start = o->cut = s;
	o->taint = t < s ? t : CACHE_NO_TAINT;
	return 1;
}

static void end_busy(cache *c, const cache_tier_offer *o, int on)
{
	c->end.busy = on;
}

static int end_restore(cache *c, const cache_tier_offer *o, const int32_t *ids,
		       uint64_t limit)
{
	MOOR_ASSERT(c->end.have && c->end.len == o->start);
	c->k.end_hits++;
	return cache_secs_in(c, cache_dev_at(c, c->end.off));
}

static uint64_t end_bytes(cache *c)
{
	return c->end.buf ? cache_anchor_bytes(c) : 0;
}

static uint64_t end_give_back(cache *c)
{
	if (!c->end.buf || c->end.busy)
		return 0;
	cache_end_release(c);
	return cache_anchor_bytes(c);
}

static int end_clear(cache *c)
{
	cache_end_release(c);
	return 0;
}

static json_t *end_stats(cache *c)
{
	const cache_counters *k = &c->k;
	json_t *o = json_object();
	CACHE_SETI(o, "kept", k->end_kept);
	CACHE_SETI(o, "hits", k->end_hits);
	CACHE_SETI(o, "dropped", k->end_dropped);
	CACHE_SETI(o, "skipped", k->end_skipped);
	CACHE_SETI(o, "bytes", end_bytes(c));
	CACHE_SETI(o, "len", c->end.have ? c->end.len : 0);
	json_object_set_new(o, "have", json_boolean(c->end.have));
	json_object_set_new(o, "taint",
			    c->end.have && c->end.taint != CACHE_NO_TAINT
				? json_integer((json_int_t)c->end.taint)
				: json_null());
	return o;
}

const cache_tier_ops cache_tier_end = {
    .tier = CACHE_TIER_END,
    .level = CACHE_LV_END,
    .lv_name = "end",
    .flags = CACHE_TF_IN_PLACE,
    .offer = end_offer,
    .busy = end_busy,
    .restore = end_restore,
    .restore_bytes = cache_tier_secs_bytes,
    .bytes = end_bytes,
    .give_back = end_give_back,
    .clear = end_clear,
    .stats = end_stats,
};
