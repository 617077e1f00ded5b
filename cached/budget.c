/* budget.c: the memory policy (Budget of the seed). Three limits, counted
 * over the arenas' allocated bytes (the live buffers included; the host
 * arena too when the memories are one, cfg.unified):
 *
 *   mem_ceiling  a cache grows only while the counted bytes stay under it;
 *                a more valuable cache may take the room of cheaper ones;
 *   mem_peak     before a prefill the counted bytes plus its estimated
 *                workspace (workspace_floor + workspace_per_token * n)
 *                must fit under it: the caches give back, cheapest first,
 *                until it does, and a prefill that cannot fit even with
 *                every cache given back is refused before anything is
 *                touched;
 *   per-cache    each cache's own budget (resident_bytes, stash_bytes,
 *                pin_bytes, park_bytes, store_bytes), kept by the cache.
 *
 * The levels, cheapest first: state store, body anchors, end anchor, guest
 * stash, parked session, pinned head (cache_levels: each level is a tier,
 * whose bytes and give_back the policy calls).
 */
#include "cache_int.h"
#include "moor.h"

uint64_t cache_held_bytes(cache *c)
{
	return arena_used(c->dev) + (c->cfg.unified ? arena_used(c->host) : 0);
}

static int lv_on_host(int lv)
{
	return (cache_levels[lv]->flags & CACHE_TF_HOST) != 0;
}

int cache_lv_counts(cache *c, int lv)
{
	return c->cfg.unified || !lv_on_host(lv);
}

uint64_t cache_lv_bytes(cache *c, int lv)
{
	return cache_levels[lv]->bytes(c);
}

/* Gives back one unit of level lv (an entry, an anchor, a whole span);
 * returns the bytes freed, 0 when nothing of it can go. */
static uint64_t give_back_one(cache *c, int lv)
{
	uint64_t b = cache_levels[lv]->give_back(c);
	if (b) {
		c->k.shed[lv]++;
		c->k.shed_bytes[lv] += b;
	}
	return b;
}

/* One unit of the cheapest level below lv that passes the filter (host:
 * -1 any counted level, 0/1 levels of that arena). */
static int shed_cheaper(cache *c, int lv, int host)
{
	for (int l = 0; l < lv; l++) {
		if (host < 0 ? !cache_lv_counts(c, l) : lv_on_host(l) != host)
			continue;
		if (give_back_one(c, l))
			return 1;
	}
	return 0;
}

int cache_budget_grow(cache *c, int lv, int host, uint64_t bytes,
		      uint64_t limit, uint64_t *off)
{
	arena *a = host ? c->host : c->dev;
	uint64_t need = cache_round_up(bytes, ARENA_ALIGN);
	int counted = c->cfg.unified || !host;
	for (;;) {
		if (!counted || cache_held_bytes(c) + need <= limit) {
			int rc = arena_alloc(a, bytes, off);
			if (rc != MOOR_ENOSPACE)
				return rc;
			if (!shed_cheaper(c, lv, host))
				return MOOR_ENOSPACE;
			continue;
		}
		if (!shed_cheaper(c, lv, -1))
			return MOOR_ENOSPACE;
	}
}

int cache_budget_try(cache *c, int host, uint64_t bytes, uint64_t limit,
		     uint64_t *off)
{
	uint64_t need = cache_round_up(bytes, ARENA_ALIGN);
	int counted = c->cfg.unified || !host;
	if (counted && cache_held_bytes(c) + need > limit)
		return MOOR_ENOSPACE;
	return arena_alloc(host ? c->host : c->dev, bytes, off);
}

uint64_t cache_plan_limit(cache *c, uint64_t ws)
{
	uint64_t peak = c->cfg.mem_peak > ws ? c->cfg.mem_peak - ws : 0;
	return cache_min64(c->cfg.mem_ceiling, peak);
}

static double gib(uint64_t b)
{
	return (double)b / (1024.0 * 1024.0 * 1024.0);
}

uint64_t cache_policy_floor(cache *c, uint64_t *givable)
{
	uint64_t held = cache_held_bytes(c), giv = 0;
	for (int l = 0; l < CACHE_LV_N; l++)
		if (cache_lv_counts(c, l))
			giv += cache_lv_bytes(c, l);
	if (givable)
		*givable = giv;
	return held > giv ? held - giv : 0;
}

int cache_policy_fit(cache *c, uint64_t ws, uint64_t *stash_need, int *gave,
		     char *err)
{
	uint64_t peak = c->cfg.mem_peak, giv;
	uint64_t floor = cache_policy_floor(c, &giv);
	*gave = 0;
	if (floor + ws > peak || ws > peak) {
		moor_errf(err,
			  "cache: a prefill needing %.3f GiB of workspace "
			  "does not fit under mem_peak %.3f GiB: the live "
			  "buffers hold %.3f GiB that no cache can give "
			  "back (caches hold %.3f GiB)",
			  gib(ws), gib(peak), gib(floor), gib(giv));
		moor_warn("%s", err ? err : "cache: prefill refused");
		return MOOR_ENOSPACE;
	}
	/* the levels cheapest first; at the guest stash's, a guest that
	 * asks for one runs without it first (the rows it writes are cut
	 * from the resident prompt) */
	while (cache_held_bytes(c) + ws + *stash_need > peak) {
		int done = 0;
		for (int l = 0; l < CACHE_LV_N && !done; l++) {
			if (l == CACHE_LV_STASH && *stash_need) {
				*stash_need = 0;
				c->k.shed[CACHE_LV_STASH]++;
				done = 1;
			} else if (cache_lv_counts(c, l) &&
				   give_back_one(c, l)) {
				done = 1;
			}
		}
		if (!done) {
			moor_errf(err,
				  "cache: a prefill needing %.3f GiB of "
				  "workspace does not fit under mem_peak "
				  "%.3f GiB (%.3f GiB held)",
				  gib(ws), gib(peak), gib(cache_held_bytes(c)));
			return MOOR_ENOSPACE;
		}
		(*gave)++;
	}
	return 0;
}
