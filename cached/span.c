/* span.c: rows held aside in blocks, for the pin and the park.
 *
 * A span holds rows [base, top) of a prompt in blocks of `grid` rows in
 * the host arena; block j is a compact rows buffer (every view, window
 * grid) of rows [base + j*grid, base + (j+1)*grid). Blocks of two spans
 * with the same base hold the same rows at the same places, which is what
 * lets the park swap two conversations a block at a time. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cache_int.h"
#include "moor.h"

uint64_t cache_span_blk_rows(cache *c)
{
	return c->lay->grid;
}

uint64_t cache_span_blk_bytes(cache *c)
{
	return cache_round_up(cache_span_blk_rows(c) * c->row_bytes,
			      ARENA_ALIGN);
}

uint32_t cache_span_blocks(cache *c, uint64_t rows)
{
	uint64_t b = cache_span_blk_rows(c);
	return (uint32_t)((rows + b - 1) / b);
}

void cache_span_free(cache *c, cache_span *s)
{
	for (uint32_t j = 0; j < s->n_blk; j++)
		if (s->blk[j] != UINT64_MAX)
			arena_release(c->host, s->blk[j]);
	for (uint32_t i = 0; i < s->n_anc; i++)
		if (s->anc[i].off != UINT64_MAX)
			arena_release(c->host, s->anc[i].off);
	free(s->blk);
	free(s->mk);
	free(s->ids);
	free(s->session);
	memset(s, 0, sizeof *s);
}

int cache_span_alloc_blocks(cache *c, cache_span *s, uint32_t n, int lv,
			    uint64_t limit)
{
	uint64_t *b = realloc(s->blk, (size_t)(n ? n : 1) * sizeof *b);
	if (!b)
		return -ENOMEM;
	s->blk = b;
	for (uint32_t j = s->n_blk; j < n; j++) {
		int rc = cache_budget_grow(c, lv, 1, cache_span_blk_bytes(c),
					   limit, &s->blk[j]);
		if (rc)
			return rc; /* cache_span_free releases what was taken */
		s->n_blk = j + 1;
	}
	return 0;
}

/* Every block's rows in [a, b), in or out, as one batch of the mover's
 * (the blocks are distinct host memory and distinct live rows). */
static int span_rows(cache *c, const cache_span *s, uint64_t a, uint64_t b,
		     int in)
{
	uint64_t blk = cache_span_blk_rows(c);
	MOOR_ASSERT(s->base <= a && a <= b && b <= s->top);
	int rc = 0;
	for (uint64_t r = a; r < b && !rc;) {
		uint64_t j = (r - s->base) / blk, r0 = s->base + j * blk;
		uint64_t m = cache_min64(b, r0 + blk) - r;
		void *p = cache_host_at(c, s->blk[j]);
		rc = cache_rows_add(c, !in, p, blk, r - r0, r, m);
		r += m;
	}
	int fr = cache_xq_flush(c);
	return rc ? rc : fr;
}

int cache_span_rows_in(cache *c, const cache_span *s, uint64_t a, uint64_t b)
{
	return span_rows(c, s, a, b, 1);
}

int cache_span_rows_out(cache *c, const cache_span *s, uint64_t a, uint64_t b)
{
	return span_rows(c, s, a, b, 0);
}

int cache_span_anchor_le(const cache_span *s, uint64_t lim, int with_end)
{
	int r = -1;
	for (uint32_t i = 0; s->have && i < s->n_anc; i++)
		if (s->anc[i].line <= lim && (with_end || !s->anc[i].end) &&
		    (r < 0 || s->anc[i].line > s->anc[r].line))
			r = (int)i;
	return r;
}

json_t *cache_span_json(const cache_span *s, uint64_t budget)
{
	json_t *o = json_object();
	CACHE_SETI(o, "bytes", s->bytes);
	CACHE_SETI(o, "budget", budget);
	CACHE_SETI(o, "tokens", s->have ? s->top : 0);
	CACHE_SETI(o, "base", s->have ? s->base : 0);
	json_object_set_new(o, "blocks", json_integer(s->have ? s->n_blk : 0));
	json_t *lines = json_array();
	for (uint32_t i = 0; s->have && i < s->n_anc; i++)
		json_array_append_new(lines,
				      json_integer((json_int_t)s->anc[i].line));
	json_object_set_new(o, "lines", lines);
	json_object_set_new(
	    o, "end",
	    json_boolean(s->have && s->n_anc && s->anc[s->n_anc - 1].end));
	json_object_set_new(o, "taint",
			    s->have && s->taint != CACHE_NO_TAINT
				? json_integer((json_int_t)s->taint)
				: json_null());
	json_object_set_new(o, "session",
			    s->have && s->session ? json_string(s->session)
						  : json_null());
	return o;
}
