/* store.c: the state store (host arena). Whole snapshots keyed by the
 * tokens that produced them: the sections, then rows [0, len) as a compact
 * rows buffer.
 *
 *   prefix snapshots  at the longest grid boundary of a prefill that fits
 *                     store_entry_bytes (store_boundaries 1; 0 takes one at
 *                     every boundary that fits), never above the taint line:
 *                     a resume there is a cold grid prefill's, bit for bit;
 *   session snapshots the end state of a turn (sections and rows), held to
 *                     the greedy gate like the end anchor.
 *
 * Room is made before a snapshot is cloned (reserve, then copy), the least
 * recently used entry first; a snapshot over the entry cap is declined
 * (declined_big, said once per conversation in the log), one whose state
 * is ahead of its key is declined before anything is cloned
 * (declined_short). A hit resumes at the longest snapshot whose tokens are
 * a prefix of the prompt; the hash is a hint, the ids are compared element
 * by element before a byte is restored.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cache_int.h"
#include "moor.h"

void cache_store_prefix_hashes(cache *c, const int32_t *ids, uint64_t n)
{
	uint64_t h = cache_ids_hash(ids, 0);
	c->ph[0] = h;
	for (uint64_t i = 0; i < n; i++) {
		h ^= (uint32_t)ids[i];
		h *= 0x100000001b3ull;
		c->ph[i + 1] = h;
	}
}

static int ids_equal(const int32_t *a, const int32_t *b, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return 0;
	return 1;
}

/* The longest entry whose ids are a prefix of ids[0, n) and shorter than
 * n (ph filled first), or -1. */
static int store_find(cache *c, const int32_t *ids, uint64_t n)
{
	int best = -1;
	for (uint32_t i = 0; i < c->n_st; i++) {
		const cache_store_entry *e = &c->st[i];
		if (e->len >= n || (best >= 0 && e->len <= c->st[best].len))
			continue;
		if (c->ph[e->len] != e->hash)
			continue;
		if (ids_equal(ids, e->ids, e->len))
			best = (int)i;
	}
	return best;
}

int cache_store_has(cache *c, const int32_t *ids, uint64_t len)
{
	uint64_t h = cache_ids_hash(ids, len);
	for (uint32_t i = 0; i < c->n_st; i++)
		if (c->st[i].len == len && c->st[i].hash == h &&
		    ids_equal(ids, c->st[i].ids, len))
			return (int)i;
	return -1;
}

static int store_restore(cache *c, int i, uint64_t k)
{
	cache_store_entry *e = &c->st[i];
	MOOR_ASSERT(k <= e->len);
	int rc = cache_secs_in(c, cache_host_at(c, e->off));
	if (!rc)
		rc = cache_rows_in(c, cache_host_at(c, e->off + c->sec_bytes),
				   e->len, k, k, e->len - k);
	e->tick = ++c->tick;
	e->hits++;
	return rc;
}

static void store_evict(cache *c, uint32_t i)
{
	MOOR_ASSERT(i < c->n_st);
	cache_store_entry *e = &c->st[i];
	arena_release(c->host, e->off);
	c->st_bytes -= e->bytes;
	free(e->ids);
	c->st[i] = c->st[--c->n_st];
	c->k.st_evictions++;
}

static int store_lru(cache *c)
{
	int r = -1;
	for (uint32_t i = 0; i < c->n_st; i++)
		if (!c->st[i].busy && (r < 0 || c->st[i].tick < c->st[r].tick))
			r = (int)i;
	return r;
}

void cache_store_clear(cache *c)
{
	while (c->n_st)
		store_evict(c, c->n_st - 1);
}

void cache_store_declined(cache *c, const char *why, uint64_t len,
			  uint64_t bytes, const char *session)
{
	uint64_t key = 0;
	if (!cache_session_none(session)) {
		key = 0xcbf29ce484222325ull;
		for (const char *p = session; *p; p++)
			key = (key ^ (unsigned char)*p) * 0x100000001b3ull;
	}
	if (key && key == c->declined_hash)
		return; /* said once per conversation */
	c->declined_hash = key;
	moor_info("cache: state store declined a snapshot of %llu tokens "
		  "(%llu bytes): %s",
		  (unsigned long long)len, (unsigned long long)bytes, why);
}

uint64_t cache_store_entry_size(cache *c, uint64_t len)
{
	return cache_round_up(c->sec_bytes + len * c->row_bytes, ARENA_ALIGN);
}

int cache_store_put(cache *c, int kind, const int32_t *ids, uint64_t len,
		    uint64_t taint, const void *secs, const char *session)
{
	uint64_t bytes = cache_store_entry_size(c, len);
	if (bytes > c->cfg.store_entry_bytes || bytes > c->cfg.store_bytes) {
		c->k.st_declined_big++;
		cache_store_declined(c, "over the entry cap", len, bytes,
				     session);
		return MOOR_ENOSPACE;
	}
	int d = cache_store_has(c, ids, len);
	if (d >= 0) {
		c->st[d].tick = ++c->tick;
		c->k.st_dup++;
		return 0;
	}
	/* reserve: room first, then the clone */
	while (c->st_bytes + bytes > c->cfg.store_bytes) {
		int v = store_lru(c);
		if (v < 0)
			break;
		store_evict(c, (uint32_t)v);
	}
	uint64_t off;
	int rc = c->st_bytes + bytes > c->cfg.store_bytes
		     ? MOOR_ENOSPACE
		     : cache_budget_grow(c, CACHE_LV_STORE, 1, bytes,
					 c->cfg.mem_ceiling, &off);
	if (rc) {
		c->k.st_declined_room++;
		cache_store_declined(c, "no room under the memory ceiling", len,
				     bytes, session);
		return rc;
	}
	if (c->n_st == c->cap_st) {
		uint32_t cap = c->cap_st ? c->cap_st * 2 : 16;
		cache_store_entry *v = realloc(c->st, cap * sizeof *v);
		if (!v) {
			arena_release(c->host, off);
			return -ENOMEM;
		}
		c->st = v;
		c->cap_st = cap;
	}
	int32_t *kid = malloc((len ? len : 1) * sizeof *kid);
	if (!kid) {
		arena_release(c->host, off);
		return -ENOMEM;
	}
	memcpy(kid, ids, len * sizeof *kid);
	rc = secs ? c->mv->copy(c->mv->ctx, cache_host_at(c, off), secs,
				c->sec_bytes)
		  : cache_secs_out(c, cache_host_at(c, off));
	if (!rc)
		rc = cache_rows_out(c, cache_host_at(c, off + c->sec_bytes),
				    len, 0, 0, len);
	if (rc) {
		free(kid);
		arena_release(c->host, off);
		return rc;
	}
	cache_store_entry *e = &c->st[c->n_st++];
	memset(e, 0, sizeof *e);
	e->kind = kind;
	e->ids = kid;
	e->len = len;
	e->hash = cache_ids_hash(ids, len);
	e->off = off;
	e->bytes = bytes;
	e->taint = taint < len ? taint : CACHE_NO_TAINT;
	e->tick = ++c->tick;
	c->st_bytes += bytes;
	if (kind == CACHE_ENTRY_SESSION)
		c->k.st_puts_session++;
	else
		c->k.st_puts_prefix++;
	return 0;
}

/* ---- the state store as a tier ---- */

/* c->ph holds the prompt's prefix hashes (the planner fills them). */
static int store_offer(cache *c, cache_tier_ask *q, cache_tier_offer *o)
{
	int i = store_find(c, q->r->ids, q->r->n);
	if (i < 0)
		return 0;
	q->seen |= 1u << CACHE_TIER_STORE;
	if (c->st[i].len <= q->best)
		return 0;
	uint64_t s = c->st[i].len;
	memset(o, 0, sizeof *o);
	o->start = s;
	o->src = i;
	o->k = o->cut = cache_min64(cache_min64(q->c_res, q->t_res), s);
	o->taint = c->st[i].taint < s ? c->st[i].taint : CACHE_NO_TAINT;
	return 1;
}

/* Busy marks the entry (the memory policy keeps it); an eviction may move
 * the others in the array, so the restore finds it by the mark. */
static void store_busy(cache *c, const cache_tier_offer *o, int on)
{
	if (!on)
		for (uint32_t j = 0; j < c->n_st; j++)
			c->st[j].busy = 0;
	else
		c->st[o->src].busy = 1;
}

static int store_tier_restore(cache *c, const cache_tier_offer *o,
			      const int32_t *ids, uint64_t limit)
{
	for (uint32_t j = 0; j < c->n_st; j++)
		if (c->st[j].busy) {
			c->k.st_hits++;
			return store_restore(c, (int)j, o->k);
		}
	MOOR_ASSERT(0);
	return MOOR_ERANGE;
}

static uint64_t store_bytes(cache *c)
{
	return c->st_bytes;
}

static uint64_t store_give_back(cache *c)
{
	int i = store_lru(c);
	if (i < 0)
		return 0;
	uint64_t b = c->st[i].bytes;
	store_evict(c, (uint32_t)i);
	return b;
}

static int store_tier_clear(cache *c)
{
	cache_store_clear(c);
	return 0;
}

static json_t *store_stats(cache *c)
{
	const cache_counters *k = &c->k;
	json_t *o = json_object();
	CACHE_SETI(o, "hits", k->st_hits);
	CACHE_SETI(o, "misses", k->st_misses);
	CACHE_SETI(o, "puts_prefix", k->st_puts_prefix);
	CACHE_SETI(o, "puts_session", k->st_puts_session);
	CACHE_SETI(o, "declined_big", k->st_declined_big);
	CACHE_SETI(o, "declined_short", k->st_declined_short);
	CACHE_SETI(o, "declined_room", k->st_declined_room);
	CACHE_SETI(o, "duplicates", k->st_dup);
	CACHE_SETI(o, "evictions", k->st_evictions);
	CACHE_SETI(o, "entries", c->n_st);
	CACHE_SETI(o, "bytes", c->st_bytes);
	CACHE_SETI(o, "budget", c->cfg.store_bytes);
	CACHE_SETI(o, "entry_budget", c->cfg.store_entry_bytes);
	json_t *ent = json_array();
	for (uint32_t i = 0; i < c->n_st; i++) {
		json_t *e = json_object();
		json_object_set_new(
		    e, "kind",
		    json_string(c->st[i].kind == CACHE_ENTRY_SESSION
				    ? "session"
				    : "prefix"));
		CACHE_SETI(e, "tokens", c->st[i].len);
		CACHE_SETI(e, "bytes", c->st[i].bytes);
		CACHE_SETI(e, "hits", c->st[i].hits);
		json_array_append_new(ent, e);
	}
	json_object_set_new(o, "list", ent);
	return o;
}

const cache_tier_ops cache_tier_store = {
    .tier = CACHE_TIER_STORE,
    .level = CACHE_LV_STORE,
    .lv_name = "store",
    .flags = CACHE_TF_HOST,
    .offer = store_offer,
    .busy = store_busy,
    .restore = store_tier_restore,
    .restore_bytes = cache_tier_rows_bytes,
    .bytes = store_bytes,
    .give_back = store_give_back,
    .clear = store_tier_clear,
    .stats = store_stats,
};
