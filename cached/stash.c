/* stash.c: the guest stash. A guest (at most guest_max tokens and under a
 * quarter of the resident prompt) writes over rows the resident prompt's
 * next turn needs; before it runs, the rows it can write (from where its
 * prefill starts to its prompt, its max_tokens and two margins, clipped to
 * the resident rows) are copied aside into the device arena, and they are
 * copied back at the next plan, before anything else. The guest changes
 * neither the resident prompt nor its anchors and keeps no end anchor. */
#include <jansson.h>

#include "cache_int.h"
#include "moor.h"

int cache_stash_make(cache *c, uint64_t lo, uint64_t hi, uint64_t limit)
{
	MOOR_ASSERT(!c->stash.have);
	if (lo >= hi)
		return 0;
	uint64_t rows = hi - lo, bytes = rows * c->row_bytes;
	if (bytes > c->cfg.stash_bytes)
		return MOOR_ENOSPACE;
	if (bytes == 0)
		return 0;
	uint64_t off;
	int rc = cache_budget_grow(c, CACHE_LV_STASH, 0, bytes, limit, &off);
	if (rc)
		return rc;
	rc = cache_rows_out(c, cache_dev_at(c, off), rows, 0, lo, rows);
	if (rc) {
		arena_release(c->dev, off);
		return rc;
	}
	c->stash.have = 1;
	c->stash.lo = lo;
	c->stash.hi = hi;
	c->stash.off = off;
	c->k.stashes++;
	return 0;
}

int cache_stash_restore(cache *c)
{
	if (!c->stash.have)
		return 0;
	uint64_t rows = c->stash.hi - c->stash.lo;
	int rc = cache_rows_in(c, cache_dev_at(c, c->stash.off), rows, 0,
			       c->stash.lo, rows);
	if (rc) {
		cache_stash_drop(c);
		return rc;
	}
	arena_release(c->dev, c->stash.off);
	c->stash.have = 0;
	c->k.stash_restores++;
	return 0;
}

void cache_stash_drop(cache *c)
{
	if (!c->stash.have)
		return;
	arena_release(c->dev, c->stash.off);
	c->stash.have = 0;
	c->k.stash_dropped++;
	/* the guest's rows stay where the resident prompt's were */
	cache_resident_cut(c, c->stash.lo);
}

/* ---- the stash as a tier: it offers nothing (it is put back before a
 * plan asks), it holds bytes the memory policy may take ---- */

static uint64_t stash_bytes(cache *c)
{
	return c->stash.have ? arena_block_size(c->dev, c->stash.off) : 0;
}

static uint64_t stash_give_back(cache *c)
{
	uint64_t b = stash_bytes(c);
	if (b)
		cache_stash_drop(c);
	return b;
}

static int stash_clear(cache *c)
{
	if (c->stash.have)
		cache_stash_drop(c);
	return 0;
}

static json_t *stash_stats(cache *c)
{
	json_t *o = json_object();
	CACHE_SETI(o, "stashes", c->k.stashes);
	CACHE_SETI(o, "restores", c->k.stash_restores);
	CACHE_SETI(o, "declined", c->k.stash_declined);
	CACHE_SETI(o, "dropped", c->k.stash_dropped);
	CACHE_SETI(o, "bytes", stash_bytes(c));
	CACHE_SETI(o, "budget", c->cfg.stash_bytes);
	CACHE_SETI(o, "rows", c->stash.have ? c->stash.hi - c->stash.lo : 0);
	return o;
}

const cache_tier_ops cache_tier_stash = {
    .tier = CACHE_TIER_STASH,
    .level = CACHE_LV_STASH,
    .lv_name = "stash",
    .bytes = stash_bytes,
    .give_back = stash_give_back,
    .clear = stash_clear,
    .stats = stash_stats,
};
