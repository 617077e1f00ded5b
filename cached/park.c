/* park.c: the parked session. Two sessions used in turn (A, B, A) share
 * their head and nothing after it. When a request of another session (the
 * session keys differ; with no keys, a prompt that parts from the rows in
 * place) replaces the resident prompt, the rows it would overwrite, from
 * where its prefill starts up to the replaced prompt's newest anchor that
 * fits park_bytes, are parked with its newest park_anchors (4) anchors; when
 * the rows up to the end anchor fit, they go whole and the end anchor moves
 * with them (taking one of the four places). A later request that shares
 * more with the park than with the rows in place, with the shared head in
 * place, gets them back: the parked rows and the rows in place are swapped
 * a block at a time, so B is parked while A comes back. One conversation
 * is parked at a time; a third session gives it up.
 *
 * The swap on two lanes of the mover (the CUDA mover: two streams, so the
 * device-to-host and host-to-device halves share a full-duplex PCIe link
 * instead of taking turns). OUT copies the rows in place out to host
 * blocks, IN copies A's blocks in over them. Block j of the rows both
 * hold goes out into a bounce and A's block j comes in; A's storage is
 * then a bounce. What keeps every byte read before it is written:
 *   - both lanes start after the mover's earlier copies (the anchors just
 *     copied, the stash put back) and its later copies (the sections,
 *     the anchors adopted) after both lanes: marks on lane 0 and on each
 *     lane at the ends;
 *   - IN writes block j's rows in place after OUT has read them: IN waits
 *     for the mark after OUT's copy of block j;
 *   - OUT writes a bounce after IN has read what it held: with K bounces
 *     block j goes out into bounce j % K, which holds A's block j - K
 *     (its storage since), so OUT waits for the mark after IN's copy of
 *     block j - K. With K = 2, OUT's block j + 1 runs beside IN's block j;
 *     with K = 1 (no room for a second) they take turns, as on one stream;
 *   - a block only one side holds (past the other's end) is rows in place
 *     and host memory that nothing else of the swap touches.
 * A mover without lanes (memcpy) runs it all in call order, which keeps
 * each of these. The points a lane waits for are at most K marks old
 * (ARENA_MARKS). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cache_int.h"
#include "moor.h"

static uint64_t park_bytes_for(cache *c, uint64_t base, uint64_t top,
			       uint32_t n_anc)
{
	return (uint64_t)cache_span_blocks(c, top - base) *
		   cache_span_blk_bytes(c) +
	       (uint64_t)n_anc * cache_anchor_bytes(c);
}

uint64_t cache_park_choose(cache *c, uint64_t base, uint32_t *idx,
			   uint32_t *n_idx, int *with_end)
{
	uint32_t places = c->cfg.park_anchors;
	if (places > CACHE_SPAN_MAX_ANCHORS - 1)
		places = CACHE_SPAN_MAX_ANCHORS - 1;
	*n_idx = 0;
	*with_end = 0;
	if (c->valid <= base || places == 0)
		return 0;
	if (c->end.have && c->end.len > base && c->end.len <= c->valid) {
		uint64_t e = c->end.len;
		uint32_t n = 0;
		for (uint32_t i = c->n_anc; i-- > 0 && n + 1 < places;)
			if (c->anc[i].line > base && c->anc[i].line <= e)
				n++;
		if (park_bytes_for(c, base, e, n + 1) <= c->cfg.park_bytes) {
			uint32_t k = 0;
			for (uint32_t i = 0; i < c->n_anc; i++)
				if (c->anc[i].line > base &&
				    c->anc[i].line <= e)
					k++;
			/* the newest n of the k above base */
			uint32_t skip = k - n, m = 0;
			for (uint32_t i = 0; i < c->n_anc; i++)
				if (c->anc[i].line > base &&
				    c->anc[i].line <= e) {
					if (skip) {
						skip--;
						continue;
					}
					idx[m++] = i;
				}
			*n_idx = m;
			*with_end = 1;
			return e;
		}
	}
	for (uint32_t t = c->n_anc; t-- > 0;) {
		uint64_t T = c->anc[t].line;
		if (T <= base)
			break;
		uint32_t n = 0;
		for (uint32_t i = t + 1; i-- > 0 && n < places;)
			if (c->anc[i].line > base)
				n++;
		if (park_bytes_for(c, base, T, n) > c->cfg.park_bytes)
			continue;
		for (uint32_t j = 0; j < n; j++)
			idx[j] = t + 1 - n + j;
		*n_idx = n;
		return T;
	}
	return 0;
}

void cache_park_drop(cache *c)
{
	if (!c->park.have)
		return;
	cache_span_free(c, &c->park);
	c->k.park_dropped++;
}

/* A span of the rows in place [base, T) with the chosen anchors, its
 * blocks from `reuse` (n_reuse of them, already holding nothing needed)
 * and new ones; allocation only, nothing copied. */
static int park_alloc(cache *c, cache_span *s, uint64_t base, uint64_t T,
		      uint32_t n_anc, uint64_t limit)
{
	memset(s, 0, sizeof *s);
	for (uint32_t i = 0; i < CACHE_SPAN_MAX_ANCHORS; i++)
		s->anc[i].off = UINT64_MAX;
	s->base = base;
	s->top = T;
	s->ids = malloc(T * sizeof *s->ids);
	if (!s->ids)
		return -ENOMEM;
	memcpy(s->ids, c->res_ids, T * sizeof *s->ids);
	int rc = 0;
	for (uint32_t i = 0; i < n_anc && !rc; i++) {
		rc = cache_budget_grow(c, CACHE_LV_PARK, 1, c->sec_bytes, limit,
				       &s->anc[i].off);
		if (!rc)
			s->n_anc = i + 1;
	}
	return rc;
}

/* Copies the chosen anchors (and the end anchor) of the rows in place. */
static int park_copy_anchors(cache *c, cache_span *s, const uint32_t *idx,
			     uint32_t n, int with_end)
{
	int rc = 0;
	for (uint32_t i = 0; i < n && !rc; i++) {
		s->anc[i].line = c->anc[idx[i]].line;
		s->anc[i].end = 0;
		rc = c->mv->copy(c->mv->ctx, cache_host_at(c, s->anc[i].off),
				 cache_dev_at(c, c->anc[idx[i]].off),
				 c->sec_bytes);
	}
	if (with_end && !rc) {
		s->anc[n].line = c->end.len;
		s->anc[n].end = 1;
		rc = c->mv->copy(c->mv->ctx, cache_host_at(c, s->anc[n].off),
				 cache_dev_at(c, c->end.off), c->sec_bytes);
	}
	return rc;
}

static void park_finish(cache *c, cache_span *s, uint64_t taint, char *session)
{
	s->taint = taint < s->top ? taint : CACHE_NO_TAINT;
	s->session = session;
	s->bytes = (uint64_t)s->n_blk * cache_span_blk_bytes(c) +
		   (uint64_t)s->n_anc * cache_anchor_bytes(c);
	s->have = 1;
}

int cache_park_make(cache *c, uint64_t base, uint64_t limit)
{
	uint32_t idx[CACHE_SPAN_MAX_ANCHORS], n;
	int with_end;
	uint64_t T = cache_park_choose(c, base, idx, &n, &with_end);
	if (!T)
		return 0;
	cache_park_drop(c);
	cache_span s;
	c->protect_anchors = 1;
	int busy = c->end.busy;
	c->end.busy = 1;
	int rc = park_alloc(c, &s, base, T, n + (uint32_t)with_end, limit);
	if (!rc)
		rc = cache_span_alloc_blocks(c, &s,
					     cache_span_blocks(c, T - base),
					     CACHE_LV_PARK, limit);
	c->protect_anchors = 0;
	c->end.busy = busy;
	if (!rc)
		rc = park_copy_anchors(c, &s, idx, n, with_end);
	if (!rc)
		rc = cache_span_rows_out(c, &s, base, T);
	if (rc) {
		cache_span_free(c, &s);
		moor_info("cache: rows [%llu, %llu) were not parked (%s)",
			  (unsigned long long)base, (unsigned long long)T,
			  moor_strerror(rc));
		return rc;
	}
	s.mk = cache_marks_copy(c, T, &s.n_mk);
	park_finish(c, &s, c->taint, cache_str_dup(c->res_session));
	c->park = s;
	c->k.parks++;
	return 0;
}

int cache_park_swap(cache *c, int hi, uint64_t limit)
{
	cache_span *A = &c->park;
	MOOR_ASSERT(A->have && hi >= 0 && (uint32_t)hi < A->n_anc);
	uint64_t b = A->base, blk = cache_span_blk_rows(c),
		 bb = cache_span_blk_bytes(c);
	cache_held_anchor src = A->anc[hi];
	uint32_t idx[CACHE_SPAN_MAX_ANCHORS], n = 0;
	int with_end = 0;
	uint64_t TB =
	    c->valid > b ? cache_park_choose(c, b, idx, &n, &with_end) : 0;
	uint32_t nbA = A->n_blk, nbB = TB ? cache_span_blocks(c, TB - b) : 0;
	uint32_t both = nbA < nbB ? nbA : nbB;
	cache_span B;
	memset(&B, 0, sizeof B);
	enum { OUT = 1, IN = 2 }; /* the mover's lanes */
	uint64_t bounce[2] = {UINT64_MAX, UINT64_MAX};
	int rc = 0;

	A->busy = 1;
	if (TB) {
		c->protect_anchors = 1;
		int busy = c->end.busy;
		c->end.busy = 1;
		rc = park_alloc(c, &B, b, TB, n + (uint32_t)with_end, limit);
		if (!rc) {
			B.blk = malloc((size_t)nbB * sizeof *B.blk);
			rc = B.blk ? 0 : -ENOMEM;
		}
		for (uint32_t j = 0; j < nbB && !rc; j++) {
			B.blk[j] = UINT64_MAX;
			B.n_blk = j + 1;
			if (j >= nbA)
				rc = cache_budget_grow(c, CACHE_LV_PARK, 1, bb,
						       limit, &B.blk[j]);
		}
		if (!rc && both)
			rc = cache_budget_grow(c, CACHE_LV_PARK, 1, bb, limit,
					       &bounce[0]);
		/* a second bounce only where the halves can overlap */
		if (!rc && both > 1 && cache_lanes(c) &&
		    cache_budget_try(c, 1, bb, limit, &bounce[1]))
			bounce[1] = UINT64_MAX;
		c->protect_anchors = 0;
		c->end.busy = busy;
		if (!rc)
			rc = park_copy_anchors(c, &B, idx, n, with_end);
		if (rc) {
			/* the rows in place are not parked; A comes back */
			cache_span_free(c, &B);
			for (int k = 0; k < 2; k++)
				if (bounce[k] != UINT64_MAX)
					arena_release(c->host, bounce[k]);
			bounce[0] = bounce[1] = UINT64_MAX;
			TB = 0;
			nbB = 0;
			both = 0;
			rc = 0;
		}
	}
	/* B keeps what it holds; the rows in place above b go */
	uint64_t taint_B = c->taint;
	char *session_B = TB ? cache_str_dup(c->res_session) : NULL;
	if (TB)
		B.mk = cache_marks_copy(c, TB, &B.n_mk);
	cache_resident_cut(c, b);
	/* A's marks are the rows' again (the end alignment's regions) */
	c->n_mk = 0;
	for (uint32_t i = 0; i < A->n_mk; i++)
		if (A->mk[i].start + A->mk[i].len <= src.line)
			(void)cache_marks_add(c, A->mk[i].start, A->mk[i].len,
					      A->mk[i].kind);
	uint32_t nb = nbA > nbB ? nbA : nbB;
	uint32_t K = bounce[1] != UINT64_MAX ? 2 : 1;
	uint64_t pt, freed[2]; /* IN's mark after it read a bounce's block */
	int have_freed[2] = {0, 0};
	/* the lanes after the mover's earlier copies */
	rc = cache_lane_mark(c, 0, &pt);
	if (!rc)
		rc = cache_lane_after(c, OUT, pt);
	if (!rc)
		rc = cache_lane_after(c, IN, pt);
	for (uint32_t j = 0; j < nb && !rc; j++) {
		uint64_t r0 = b + (uint64_t)j * blk;
		uint64_t ra = j < nbA ? cache_min64(blk, A->top - r0) : 0;
		uint64_t rb = j < nbB ? cache_min64(blk, TB - r0) : 0;
		if (ra && rb) {
			/* B's block out to a bounce, A's in; the bounce is
			 * B's block from now on and A's storage a bounce
			 * (no copy between two host blocks: on CUDA that was
			 * a sync and a CPU memcpy a block, the park ran at
			 * 4.6 GB/s where the pin ran at 44) */
			uint32_t k = j % K;
			if (have_freed[k])
				rc = cache_lane_after(c, OUT, freed[k]);
			if (!rc)
				rc = cache_rows_lane(c, OUT, 1,
						     cache_host_at(c, bounce[k]),
						     blk, 0, r0, rb);
			if (!rc)
				rc = cache_lane_mark(c, OUT, &pt);
			if (!rc)
				rc = cache_lane_after(c, IN, pt);
			if (!rc)
				rc = cache_rows_lane(c, IN, 0,
						     cache_host_at(c, A->blk[j]),
						     blk, 0, r0, ra);
			if (!rc)
				rc = cache_lane_mark(c, IN, &freed[k]);
			have_freed[k] = 1;
			B.blk[j] = bounce[k];
			bounce[k] = A->blk[j];
			A->blk[j] = UINT64_MAX;
		} else if (rb) {
			rc = cache_rows_lane(c, OUT, 1,
					     cache_host_at(c, B.blk[j]), blk, 0,
					     r0, rb);
		} else if (ra) {
			rc = cache_rows_lane(c, IN, 0,
					     cache_host_at(c, A->blk[j]), blk,
					     0, r0, ra);
		}
		c->k.park_blocks_swapped++;
	}
	/* the mover's later copies after both lanes (the sync below waits
	 * for them as well; the order holds without it) */
	int jr = cache_lane_mark(c, OUT, &pt);
	if (!jr)
		jr = cache_lane_after(c, 0, pt);
	if (!jr)
		jr = cache_lane_mark(c, IN, &pt);
	if (!jr)
		jr = cache_lane_after(c, 0, pt);
	if (!rc)
		rc = jr;
	/* the last bounces (A's storage) are read by copies that may still
	 * run: done before their storage goes back */
	int sync_rc = cache_sync(c);
	if (!rc)
		rc = sync_rc;
	for (int k = 0; k < 2; k++)
		if (bounce[k] != UINT64_MAX)
			arena_release(c->host, bounce[k]);
	if (!rc)
		rc = cache_secs_in(c, cache_host_at(c, src.off));
	/* A's grid anchors up to the resume line are the resident's again */
	for (uint32_t i = 0; i < A->n_anc && !rc; i++) {
		if (A->anc[i].end || A->anc[i].line > src.line ||
		    A->anc[i].line <= b)
			continue;
		if (i == (uint32_t)hi) /* the one just restored */
			(void)cache_anchor_adopt_live(c, A->anc[i].line, limit);
		else
			(void)cache_anchor_adopt(
			    c, A->anc[i].line, cache_host_at(c, A->anc[i].off),
			    limit);
	}
	A->busy = 0;
	cache_span_free(c, A);
	if (TB) {
		park_finish(c, &B, taint_B, session_B);
		c->park = B;
		c->k.parks++;
	}
	if (rc)
		cache_park_drop(c);
	c->k.park_hits++;
	return rc;
}

/* ---- the parked session as a tier ---- */

static int park_offer(cache *c, cache_tier_ask *q, cache_tier_offer *o)
{
	const cache_span *p = &c->park;
	if (!p->have || q->guest || q->c_res < p->base)
		return 0;
	const cache_req *r = q->r;
	uint64_t ck = cache_common_prefix(r->ids, r->n, p->ids, p->top);
	int j = cache_span_anchor_le(p, cache_min64(ck, r->n - 1), 1);
	if (j < 0 || p->anc[j].line <= q->best || ck <= q->c_res)
		return 0;
	uint64_t s = p->anc[j].line;
	memset(o, 0, sizeof *o);
	o->start = s;
	o->src = j;
	o->cut = p->base;
	o->taint = cache_min64(q->t_res < p->base ? q->t_res : CACHE_NO_TAINT,
			       p->taint < s ? p->taint : CACHE_NO_TAINT);
	return 1;
}

static void park_busy(cache *c, const cache_tier_offer *o, int on)
{
	c->park.busy = on;
}

static int park_restore(cache *c, const cache_tier_offer *o, const int32_t *ids,
			uint64_t limit)
{
	return cache_park_swap(c, o->src, limit);
}

/* the sections and every parked row: the swap copies them all */
static uint64_t park_restore_bytes(cache *c, const cache_tier_offer *o)
{
	return c->sec_bytes + (c->park.top - c->park.base) * c->row_bytes;
}

static uint64_t park_bytes(cache *c)
{
	return c->park.have ? c->park.bytes : 0;
}

static uint64_t park_give_back(cache *c)
{
	if (!c->park.have || c->park.busy)
		return 0;
	uint64_t b = c->park.bytes;
	cache_park_drop(c);
	return b;
}

static int park_clear(cache *c)
{
	cache_park_drop(c);
	return 0;
}

static json_t *park_stats(cache *c)
{
	json_t *o = cache_span_json(&c->park, c->cfg.park_bytes);
	CACHE_SETI(o, "parks", c->k.parks);
	CACHE_SETI(o, "park_hits", c->k.park_hits);
	CACHE_SETI(o, "dropped", c->k.park_dropped);
	CACHE_SETI(o, "blocks_swapped", c->k.park_blocks_swapped);
	return o;
}

/* The swap parks the rows in place from the park's base and brings the
 * park's rows, marks included, back: it makes its own cut. */
const cache_tier_ops cache_tier_park = {
    .tier = CACHE_TIER_PARK,
    .level = CACHE_LV_PARK,
    .lv_name = "park",
    .flags = CACHE_TF_HOST | CACHE_TF_MARKS | CACHE_TF_CUTS,
    .offer = park_offer,
    .busy = park_busy,
    .restore = park_restore,
    .restore_bytes = park_restore_bytes,
    .bytes = park_bytes,
    .give_back = park_give_back,
    .clear = park_clear,
    .stats = park_stats,
};
