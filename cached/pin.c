/* pin.c: the pinned head. A request too long to be a guest, of the same
 * session, whose prompt parts inside the head (opencode's compaction:
 * sharing nothing with the conversation, whose next turn starts with the
 * same tool block and system text again) would cut rows the next turn
 * needs. Before it does, the old prompt's head is copied aside: its rows
 * [0, H) and up to pin_anchors (8) anchors over it, the ones at every
 * pin_every (4,096) up to pin_upto (32,768) that eviction keeps for this,
 * as long a head as pin_bytes holds with its anchors. A later request that
 * shares more with it than with the rows in place gets the rows copied back
 * and resumes at the largest pinned anchor it shares (planner.c). The pin
 * carries its rows' taint line. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cache_int.h"
#include "moor.h"

uint64_t cache_pin_head(cache *c, uint32_t *idx, uint32_t *n_idx)
{
	uint32_t n = 0, max = c->cfg.pin_anchors;
	if (max > CACHE_SPAN_MAX_ANCHORS)
		max = CACHE_SPAN_MAX_ANCHORS;
	*n_idx = 0;
	for (uint32_t i = 0; i < c->n_anc && n < max; i++)
		if (cache_anchor_pin_kept(c, c->anc[i].line) &&
		    c->anc[i].line <= c->valid)
			idx[n++] = i;
	for (uint32_t j = n; j >= 1; j--) {
		uint64_t H = c->anc[idx[j - 1]].line;
		uint64_t bytes = (uint64_t)cache_span_blocks(c, H) *
				     cache_span_blk_bytes(c) +
				 (uint64_t)j * cache_anchor_bytes(c);
		if (bytes <= c->cfg.pin_bytes) {
			*n_idx = j;
			return H;
		}
	}
	return 0;
}

void cache_pin_drop(cache *c)
{
	if (!c->pin.have)
		return;
	cache_span_free(c, &c->pin);
	c->k.pin_dropped++;
}

int cache_pin_make(cache *c, uint64_t limit)
{
	uint32_t idx[CACHE_SPAN_MAX_ANCHORS], n;
	uint64_t H = cache_pin_head(c, idx, &n);
	if (!H)
		return 0;
	cache_span *p = &c->pin;
	if (p->have && p->top >= H &&
	    cache_common_prefix(p->ids, p->top, c->res_ids, H) >= H)
		return 0; /* this head is pinned already */
	cache_pin_drop(c);
	cache_span s = {0};
	s.base = 0;
	s.top = H;
	for (uint32_t i = 0; i < CACHE_SPAN_MAX_ANCHORS; i++)
		s.anc[i].off = UINT64_MAX;
	s.ids = malloc(H * sizeof *s.ids);
	if (!s.ids)
		return -ENOMEM;
	memcpy(s.ids, c->res_ids, H * sizeof *s.ids);
	c->protect_anchors = 1;
	int rc = cache_span_alloc_blocks(c, &s, cache_span_blocks(c, H),
					 CACHE_LV_PIN, limit);
	for (uint32_t i = 0; i < n && !rc; i++) {
		rc = cache_budget_grow(c, CACHE_LV_PIN, 1, c->sec_bytes, limit,
				       &s.anc[i].off);
		if (!rc)
			s.n_anc = i + 1;
	}
	c->protect_anchors = 0;
	if (!rc)
		rc = cache_span_rows_out(c, &s, 0, H);
	for (uint32_t i = 0; i < n && !rc; i++) {
		const cache_anchor *a = &c->anc[idx[i]];
		s.anc[i].line = a->line;
		s.anc[i].end = 0;
		rc = c->mv->copy(c->mv->ctx, cache_host_at(c, s.anc[i].off),
				 cache_dev_at(c, a->off), c->sec_bytes);
	}
	if (rc) {
		cache_span_free(c, &s);
		moor_info("cache: the head of %llu tokens was not pinned (%s)",
			  (unsigned long long)H, moor_strerror(rc));
		return rc;
	}
	s.taint = c->taint < H ? c->taint : CACHE_NO_TAINT;
	s.session = cache_str_dup(c->res_session);
	s.bytes = (uint64_t)s.n_blk * cache_span_blk_bytes(c) +
		  (uint64_t)s.n_anc * cache_anchor_bytes(c);
	s.have = 1;
	*p = s;
	c->k.pins++;
	return 0;
}

/* ---- the pinned head as a tier ---- */

static int pin_offer(cache *c, cache_tier_ask *q, cache_tier_offer *o)
{
	if (!c->pin.have)
		return 0;
	const cache_req *r = q->r;
	uint64_t cp = cache_common_prefix(r->ids, r->n, c->pin.ids, c->pin.top);
	int j = cache_span_anchor_le(&c->pin, cache_min64(cp, r->n - 1), 0);
	if (j < 0 || c->pin.anc[j].line <= q->best)
		return 0;
	uint64_t s = c->pin.anc[j].line;
	memset(o, 0, sizeof *o);
	o->start = s;
	o->src = j;
	/* rows in place below k are clean and the pin's: its rows from k on
	 * are copied */
	o->k = o->cut = cache_min64(cache_min64(q->c_res, q->t_res), s);
	o->taint = c->pin.taint < s ? c->pin.taint : CACHE_NO_TAINT;
	return 1;
}

static void pin_busy(cache *c, const cache_tier_offer *o, int on)
{
	c->pin.busy = on;
}

static int pin_restore(cache *c, const cache_tier_offer *o, const int32_t *ids,
		       uint64_t limit)
{
	MOOR_ASSERT(c->pin.have);
	int rc = cache_span_rows_in(c, &c->pin, o->k, o->start);
	if (!rc)
		rc = cache_secs_in(c, cache_host_at(c, c->pin.anc[o->src].off));
	/* the pinned anchors over the restored rows are the resident's again
	 * (the pin keeps its copies) */
	for (uint32_t j = 0; j < c->pin.n_anc && !rc; j++) {
		uint64_t line = c->pin.anc[j].line;
		if (line <= o->k || line > o->start)
			continue;
		if (line == o->start) /* the one just restored */
			(void)cache_anchor_adopt_live(c, line, limit);
		else
			(void)cache_anchor_adopt(
			    c, line, cache_host_at(c, c->pin.anc[j].off),
			    limit);
	}
	c->k.pin_hits++;
	return rc;
}

static uint64_t pin_bytes(cache *c)
{
	return c->pin.have ? c->pin.bytes : 0;
}

static uint64_t pin_give_back(cache *c)
{
	if (!c->pin.have || c->pin.busy)
		return 0;
	uint64_t b = c->pin.bytes;
	cache_pin_drop(c);
	return b;
}

static int pin_clear(cache *c)
{
	cache_pin_drop(c);
	return 0;
}

static json_t *pin_stats(cache *c)
{
	json_t *o = cache_span_json(&c->pin, c->cfg.pin_bytes);
	CACHE_SETI(o, "pins", c->k.pins);
	CACHE_SETI(o, "hits", c->k.pin_hits);
	CACHE_SETI(o, "dropped", c->k.pin_dropped);
	return o;
}

const cache_tier_ops cache_tier_pin = {
    .tier = CACHE_TIER_PIN,
    .level = CACHE_LV_PIN,
    .lv_name = "pin",
    .flags = CACHE_TF_HOST,
    .offer = pin_offer,
    .busy = pin_busy,
    .restore = pin_restore,
    .restore_bytes = cache_tier_rows_bytes,
    .bytes = pin_bytes,
    .give_back = pin_give_back,
    .clear = pin_clear,
    .stats = pin_stats,
};
