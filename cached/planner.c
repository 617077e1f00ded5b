/* planner.c: a turn (cache_plan, cache_commit, cache_abort).
 *
 * The plan asks every tier of cache_tiers (tiers.c) where the prompt could
 * resume and takes the source that starts latest (a tie goes to the tier
 * asked first, the cheaper restore: resident, end, pin, park, store, then
 * the spill and the disk tier, which offer only what starts later than
 * every RAM source and reads faster than it prefills). Every offer is a
 * line s < n (one token at least is forwarded, for the logits) whose
 * tokens were compared with the prompt's element by element: the rows in
 * place by their ids, the pin and the park by theirs, the store by each
 * entry's (its hash only picks which to compare), the NVMe tiers by their
 * index's and again by their files' before a byte is restored.
 *
 * Exactness (the taint line). Rows below taint and anchors at lines at or
 * below it are a cold grid prefill's bits; a resume there forwards exactly
 * the chunks a cold prefill forwards after it. A resume above taint, or at
 * a line off the grid (the end anchor), writes rows held to the greedy gate
 * from there, so the plan's taint is the lowest of the source's taint and,
 * off the grid, the start. A pin or store restore copies rows from
 * k = min(shared, taint in place, s), so rows it keeps in place are clean
 * and the ones it copies carry the source's line.
 *
 * Order inside a plan: the stash of the previous guest goes back; the plan
 * is worked out without touching anything (analyze); the memory policy
 * makes room for the prefill (or refuses, having changed nothing); the
 * sources that moved are looked at again; then the rows in place are
 * protected (stash, pin, park), the cut is made, the source restored, and
 * the slots reserved.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache_int.h"
#include "moor.h"

enum { ACT_NONE = 0, ACT_PIN, ACT_PARK };

typedef struct plan_a {
	uint64_t n, c_res;
	int guest, guest_declined;
	int tier;		   /* src's, CACHE_TIER_NONE when cold */
	const cache_tier_ops *src; /* NULL: cold */
	cache_tier_offer o;	   /* src's offer (cold: start 0, the cut) */
	uint64_t start, cut, taint, k;
	uint32_t seen; /* cache_tier_ask.seen */
	uint64_t stash_lo, stash_hi, stash_bytes;
	int act;
} plan_a;

/* The end of a scratch run: it only closes. */
static int scratch_end(cache *c)
{
	c->t.active = 0;
	c->t.scratch = 0;
	return 0;
}

static void analyze(cache *c, const cache_req *r, int allow_guest, plan_a *A)
{
	memset(A, 0, sizeof *A);
	uint64_t n = r->n, t_res = c->taint;
	A->n = n;
	A->c_res = cache_common_prefix(r->ids, n, c->res_ids, c->valid);
	A->guest = allow_guest && c->valid > 0 && n <= c->cfg.guest_max &&
		   4 * n < c->valid;
	A->tier = CACHE_TIER_NONE;
	/* a cold prefill rewrites rows [0, min(shared, taint)) with the same
	 * bits: for a request that keeps nothing, they and the anchors there
	 * stay */
	A->o.cut = r->no_cache ? cache_min64(A->c_res, t_res) : 0;
	A->o.taint = CACHE_NO_TAINT;
	if (!r->no_cache) {
		/* the prompt's chain hashes: the store's and the disk tier's
		 * keys */
		cache_store_prefix_hashes(c, r->ids, n);
		cache_tier_ask q = {.r = r,
				    .c_res = A->c_res,
				    .t_res = t_res,
				    .lim = cache_min64(A->c_res, n - 1),
				    .guest = A->guest};
		for (int i = 0; i < CACHE_N_TIERS; i++) {
			const cache_tier_ops *t = cache_tiers[i];
			cache_tier_offer o;
			if (t->offer && t->offer(c, &q, &o)) {
				A->src = t;
				A->tier = t->tier;
				A->o = o;
				q.best = o.start;
			}
		}
		A->seen = q.seen;
	}
	A->start = A->o.start;
	A->cut = A->o.cut;
	A->k = A->o.k;
	A->taint = A->o.taint;
	if (A->start % c->lay->grid)
		A->taint = cache_min64(A->taint, A->start);

	if (A->guest) {
		A->stash_lo = A->cut;
		A->stash_hi = cache_min64(
		    c->valid, n + r->max_tokens + 2ull * c->cfg.guest_margin);
		if (A->stash_lo < A->stash_hi)
			A->stash_bytes =
			    (A->stash_hi - A->stash_lo) * c->row_bytes;
		else
			A->stash_lo = A->stash_hi = 0;
		if (A->stash_bytes > c->cfg.stash_bytes) {
			analyze(c, r, 0, A);
			A->guest_declined = 1;
			return;
		}
		return;
	}
	/* what happens to the rows in place */
	A->act = ACT_NONE;
	if (cache_session_same(r->session, c->res_session)) {
		uint32_t idx[CACHE_SPAN_MAX_ANCHORS], m;
		uint64_t H = cache_pin_head(c, idx, &m);
		if (A->tier != CACHE_TIER_PIN && H && A->c_res < H &&
		    A->cut < H)
			A->act = ACT_PIN;
	} else if (A->tier != CACHE_TIER_PARK && A->c_res < c->valid &&
		   A->cut < c->valid) {
		A->act = ACT_PARK;
	}
}

static void set_busy(cache *c, const plan_a *A, int on)
{
	if (A->src && A->src->busy)
		A->src->busy(c, &A->o, on);
}

/* The source's state into the live buffers (a cold start: zeroed). */
static int restore(cache *c, const plan_a *A, const int32_t *ids,
		   uint64_t limit)
{
	if (!A->src)
		return cache_secs_zero(c);
	return A->src->restore(c, &A->o, ids, limit);
}

/* The tier reported: a resume on the rows in place above the line where a
 * guest's stash was put back is the stash's. */
static int reported_tier(const plan_a *A, uint64_t stash_lo)
{
	if (stash_lo != UINT64_MAX && A->src &&
	    (A->src->flags & CACHE_TF_IN_PLACE) && A->start > stash_lo)
		return CACHE_TIER_STASH;
	return A->tier;
}

double cache_prefill_rate(const cache *c)
{
	double best = 0;
	for (uint32_t i = 0; i < c->n_rate && i < 8; i++)
		best = c->rate[i] > best ? c->rate[i] : best;
	return best > 0 ? best : (double)c->cfg.prefill_tps;
}

static void turn_release_slots(cache *c, uint32_t from)
{
	for (uint32_t i = from; i < c->t.n_slots; i++)
		arena_release(c->dev, c->t.slot[i].off);
	c->t.n_slots = from;
}

/* Slots for the grid lines in (start, n]: the ones the anchor budget keeps
 * (not for a guest, which keeps no anchor) and the state store's prefix
 * line(s). */
static void reserve_slots(cache *c, uint64_t limit)
{
	cache_turn *t = &c->t;
	uint64_t g = c->lay->grid;
	uint64_t lines[CACHE_MAX_SLOTS];
	int keep[CACHE_MAX_SLOTS], store[CACHE_MAX_SLOTS], disk[CACHE_MAX_SLOTS];
	uint32_t n = 0;
	for (uint64_t L = (t->start / g + 1) * g;
	     L <= t->n && n < CACHE_MAX_SLOTS; L += g)
		lines[n++] = L;
	t->n_slots = 0;
	if (!n)
		return;
	if (t->guest)
		memset(keep, 0, n * sizeof *keep);
	else
		cache_anchors_plan_slots(c, lines, n, keep);
	memset(store, 0, n * sizeof *store);
	if (c->cfg.store_bytes && c->cfg.store_entry_bytes) {
		int clean = 0, best = -1;
		for (uint32_t j = 0; j < n; j++) {
			uint64_t L = lines[j];
			if (t->taint != CACHE_NO_TAINT && L > t->taint)
				break;
			clean = 1;
			if (cache_store_entry_size(c, L) >
			    c->cfg.store_entry_bytes)
				break;
			best = (int)j;
			if (c->cfg.store_boundaries == 0)
				store[j] = cache_store_has(c, t->ids, L) < 0;
		}
		/* the longest that fits; none when it is held already */
		if (best >= 0 && c->cfg.store_boundaries != 0) {
			int d = cache_store_has(c, t->ids, lines[best]);
			if (d < 0)
				store[best] = 1;
			else
				c->st[d].tick = ++c->tick;
		}
		if (clean && best < 0) {
			c->k.st_declined_big++;
			cache_store_declined(
			    c,
			    "over the entry cap at every line of "
			    "the prefill",
			    lines[0], cache_store_entry_size(c, lines[0]),
			    t->session);
		}
	}
	cache_disk_plan(c, t, lines, n, disk);
	for (uint32_t j = 0; j < n; j++) {
		if (!keep[j] && !store[j] && !disk[j])
			continue;
		uint64_t off;
		int rc = MOOR_ENOSPACE;
		if (keep[j] || disk[j])
			rc = cache_budget_grow(c, CACHE_LV_ANCHORS, 0,
					       c->sec_bytes, limit, &off);
		if (rc && store[j])
			rc = cache_budget_grow(c, CACHE_LV_STORE, 0,
					       c->sec_bytes, limit, &off);
		if (rc)
			continue;
		cache_tslot *s = &t->slot[t->n_slots++];
		s->line = lines[j];
		s->off = off;
		s->anchor = keep[j];
		s->store = store[j];
		s->disk = disk[j];
	}
}

static int req_check(cache *c, const cache_req *r, char *err)
{
	if (!c->have_layout) {
		moor_errf(err, "cache: no engine attached (cache_hello first)");
		return MOOR_ERANGE;
	}
	if (!r || !r->ids || r->n == 0 || r->n > c->lay->window) {
		moor_errf(err,
			  "cache: a prompt of %llu tokens (the window "
			  "holds %llu)",
			  (unsigned long long)(r ? r->n : 0),
			  (unsigned long long)c->lay->window);
		return MOOR_ERANGE;
	}
	return 0;
}

/* The plan without the plan. Its steps, and what stands for each here:
 *   a turn in flight is aborted with rows [0, start) valid: the state in
 *     flight already says so (valid, taint, the cut), only its slots are
 *     still held, and they are not counted below;
 *   the guest stash goes back: rows only, which analyze() does not read;
 *     its bytes are not counted below;
 *   analyze(): the same call;
 *   cache_policy_fit(): its refusal is computed as it computes it; where it
 *     would give caches back, gives_back says the answer may be high;
 *   the guest's cache_stash_make under cache_plan_limit(): the same;
 *   the tier reported: STASH where the plan reports it. */
int cache_peek(cache *c, const cache_req *r, cache_peek_out *out, char *err)
{
	int rc = req_check(c, r, err);
	if (rc)
		return rc;
	memset(out, 0, sizeof *out);
	uint64_t n = r->n, peak = c->cfg.mem_peak;
	uint64_t ws = c->lay->workspace_floor + c->lay->workspace_per_token * n;
	uint64_t stash_b = cache_lv_bytes(c, CACHE_LV_STASH),
		 held = cache_held_bytes(c), giv = 0;
	if (c->t.active)
		for (uint32_t i = 0; i < c->t.n_slots; i++)
			held -= arena_block_size(c->dev, c->t.slot[i].off);
	held -= stash_b;
	for (int l = 0; l < CACHE_LV_N; l++)
		if (cache_lv_counts(c, l))
			giv += cache_lv_bytes(c, l);
	giv -= stash_b;
	uint64_t floor = held > giv ? held - giv : 0;
	if (floor + ws > peak || ws > peak) {
		moor_errf(err,
			  "cache: a prefill needing %.3f GiB of workspace "
			  "does not fit under mem_peak %.3f GiB: the live "
			  "buffers hold %.3f GiB that no cache can give "
			  "back (caches hold %.3f GiB)",
			  (double)ws / (1 << 30), (double)peak / (1 << 30),
			  (double)floor / (1 << 30), (double)giv / (1 << 30));
		return MOOR_ENOSPACE;
	}
	plan_a A;
	analyze(c, r, 1, &A);
	uint64_t need = A.guest ? A.stash_bytes : 0;
	if (held + ws + need > peak)
		out->gives_back = 1;
	if (A.guest && A.stash_bytes &&
	    held + cache_round_up(A.stash_bytes, ARENA_ALIGN) >
		cache_plan_limit(c, ws))
		out->gives_back = 1;

	uint64_t rb = 0;
	if (c->stash.have)
		rb += (c->stash.hi - c->stash.lo) * c->row_bytes;
	if (A.src) {
		uint64_t sb = A.src->restore_bytes(c, &A.o);
		double bps = A.src->read_bps ? A.src->read_bps(c) : 0;
		rb += sb;
		if (bps > 0)
			out->read_us =
			    (uint64_t)llround((double)sb / bps * 1e6);
	}
	int tier = reported_tier(&A, c->stash.have ? c->stash.lo : UINT64_MAX);
	out->start = A.start;
	out->taint = A.taint;
	out->tier = tier;
	out->guest = A.guest;
	out->restore_bytes = rb;
	return 0;
}

int cache_plan(cache *c, const cache_req *r, cache_plan_out *out, char *err)
{
	int rc0 = req_check(c, r, err);
	if (rc0)
		return rc0;
	cache_trace_plan(c, 1, 0, 0, 0, 0);
	uint64_t tr_bytes = 0; /* the restore's, for the trace */
	if (c->t.active && c->t.scratch)
		(void)scratch_end(c);
	if (c->t.active) {
		moor_warn("cache: a plan while a turn is in flight: the "
			  "earlier turn is aborted");
		cache_turn_abort(c, 0, c->t.start);
	}
	c->k.plans++;
	/* the disk tier's writer copies no row this plan may write: the
	 * clean rows in place it shares with the prompt stay (a cold prefill
	 * writes the same bits there), the guest's stash goes back */
	cache_disk_fence(
	    c, cache_min64(cache_min64(cache_common_prefix(
					   r->ids, r->n, c->res_ids, c->valid),
				       c->taint),
			   c->stash.have ? c->stash.lo : UINT64_MAX));
	uint64_t stash_lo = UINT64_MAX;
	if (c->stash.have) {
		stash_lo = c->stash.lo;
		tr_bytes += (c->stash.hi - c->stash.lo) * c->row_bytes;
		int rc = cache_stash_restore(c);
		if (rc) {
			moor_errf(err,
				  "cache: the guest stash could not be "
				  "put back: %s",
				  moor_strerror(rc));
			return rc;
		}
	}
	uint64_t n = r->n;
	uint64_t ws = c->lay->workspace_floor + c->lay->workspace_per_token * n;
	plan_a A;
	analyze(c, r, 1, &A);
	uint64_t need = A.guest ? A.stash_bytes : 0;
	int gave = 0, rc = cache_policy_fit(c, ws, &need, &gave, err);
	if (rc) {
		c->k.refused++;
		return rc;
	}
	int allow_guest = !(A.guest && A.stash_bytes && !need);
	if (gave || !allow_guest)
		analyze(c, r, allow_guest, &A);
	if (A.guest_declined)
		c->k.stash_declined++;
	uint64_t limit = cache_plan_limit(c, ws);
	/* and none from the cut on: a pin, park, store or spill restore
	 * writes rows there that a decode may have written */
	cache_disk_fence(c, A.cut);

	/* the tiers that could have served it and were not taken say so */
	for (int i = 0; i < CACHE_N_TIERS && !A.guest && !r->no_cache; i++)
		if (cache_tiers[i]->refused && cache_tiers[i] != A.src)
			cache_tiers[i]->refused(c, r->ids, n, A.start);

	set_busy(c, &A, 1);
	if (A.guest) {
		rc = cache_stash_make(c, A.stash_lo, A.stash_hi, limit);
		if (rc) {
			c->k.stash_declined++;
			set_busy(c, &A, 0);
			analyze(c, r, 0, &A);
			set_busy(c, &A, 1);
		}
	}
	if (!A.guest) {
		if (A.act == ACT_PIN) {
			(void)cache_pin_make(c, limit);
			/* a compaction drops its session's parked rows */
			if (c->park.have && !c->park.busy &&
			    cache_session_same(c->park.session, r->session))
				cache_park_drop(c);
		} else if (A.act == ACT_PARK) {
			/* a long conversation the park cannot hold whole goes
			 * to the spill instead */
			if (!cache_spill_evict(c, A.cut))
				(void)cache_park_make(c, A.cut, limit);
		}
		if (!A.src || !(A.src->flags & CACHE_TF_CUTS))
			cache_resident_cut(c, A.cut);
	}
	if (c->trace.on && A.src)
		tr_bytes += A.src->restore_bytes(c, &A.o);
	rc = restore(c, &A, r->ids, limit);
	set_busy(c, &A, 0);
	if (rc && A.src && (A.src->flags & CACHE_TF_NVME)) {
		/* a file that fails costs the entry, never an answer: the
		 * prompt prefills cold */
		moor_warn("cache: the %s's files failed their checks: a cold "
			  "prefill",
			  cache_tier_name(A.tier));
		cache_resident_cut(c, 0);
		A.tier = CACHE_TIER_NONE;
		A.src = NULL;
		A.start = A.cut = A.k = 0;
		A.taint = CACHE_NO_TAINT;
		rc = cache_secs_zero(c);
	}
	if (rc) {
		moor_errf(err, "cache: restoring from the %s failed: %s",
			  cache_tier_name(A.tier), moor_strerror(rc));
		if (!A.guest)
			cache_resident_cut(c, 0);
		return rc;
	}
	if (!A.guest) {
		memcpy(c->res_ids, r->ids, n * sizeof *r->ids);
		c->valid = r->no_cache ? A.cut : A.start;
		c->taint = r->no_cache ? CACHE_NO_TAINT : A.taint;
		free(c->res_session);
		c->res_session = cache_str_dup(r->session);
	}
	cache_turn *t = &c->t;
	t->active = 1;
	t->guest = A.guest;
	t->no_cache = r->no_cache;
	memcpy(t->ids, r->ids, n * sizeof *r->ids);
	t->n = n;
	free(t->session);
	t->session = cache_str_dup(r->session);
	t->max_tokens = r->max_tokens;
	t->user_at = r->user_at < r->n ? r->user_at : 0;
	t->start = A.start;
	t->taint = A.taint;
	t->cut = A.cut;
	t->tier = A.tier;
	t->t_plan = moor_now();
	/* the marks below the start describe the ids there: the park's came
	 * back with its rows; another source shares ids with the rows in
	 * place only up to c_res */
	t->mk_keep = A.src && (A.src->flags & CACHE_TF_MARKS)
			 ? A.start
			 : cache_min64(A.start, A.c_res);
	t->n_slots = 0;
	if (!r->no_cache)
		reserve_slots(c, limit);

	int tier = reported_tier(&A, stash_lo);
	memset(out, 0, sizeof *out);
	out->start = A.start;
	out->taint = A.taint;
	out->tier = tier;
	out->guest = A.guest;
	out->mem_held = cache_held_bytes(c);
	out->mem_shed = (uint32_t)gave;
	out->n_slots = t->n_slots;
	for (uint32_t i = 0; i < t->n_slots; i++) {
		out->slots[i].line = t->slot[i].line;
		out->slots[i].offset = t->slot[i].off;
	}
	cache_trace_plan(c, 0, n, A.start, tier, tr_bytes);
	c->k.tier_hits[tier]++;
	c->k.tokens_saved += A.start;
	if (A.tier == CACHE_TIER_RESIDENT)
		c->k.res_hits++;
	else
		c->k.res_misses++;
	if (!r->no_cache && !(A.seen & 1u << CACHE_TIER_STORE))
		c->k.st_misses++;
	if (A.tier == CACHE_TIER_NONE)
		c->k.cold++;
	moor_debug("cache: plan %llu tokens (shares %llu): %s at %llu (taint "
		   "%lld), cut %llu, %s%s%u slots",
		   (unsigned long long)n, (unsigned long long)A.c_res,
		   cache_tier_name(tier), (unsigned long long)A.start,
		   A.taint == CACHE_NO_TAINT ? -1ll : (long long)A.taint,
		   (unsigned long long)A.cut, A.guest ? "guest, " : "",
		   A.act == ACT_PIN    ? "pin, "
		   : A.act == ACT_PARK ? "park, "
				       : "",
		   t->n_slots);
	return 0;
}

int cache_scratch_plan(cache *c, const cache_req *r, cache_plan_out *out,
		       char *err)
{
	int rc = req_check(c, r, err);
	if (rc)
		return rc;
	if (c->t.active) {
		moor_errf(err, "cache: a scratch run while a turn is in flight");
		return MOOR_ERANGE;
	}
	/* a guest's saved rows (opencode's title request after a turn) go
	 * back first, as at a plan: the conversation's rows and its end
	 * anchor are then in place again */
	if (c->stash.have) {
		cache_disk_fence(c, c->stash.lo);
		rc = cache_stash_restore(c);
		if (rc) {
			moor_errf(err,
				  "cache: the guest stash could not be put back: %s",
				  moor_strerror(rc));
			return rc;
		}
	}
	if (!c->end.have || c->end.len != c->valid) {
		moor_errf(err, "cache: a scratch run needs the end anchor at the "
			       "end of the rows in place");
		return MOOR_ERANGE;
	}
	uint64_t e = c->end.len;
	/* the rows it writes are above the end anchor: the disk tier's
	 * writer copies none of them */
	cache_disk_fence(c, e);
	if (r->n <= e || r->max_tokens > c->lay->window - r->n ||
	    cache_common_prefix(r->ids, r->n, c->res_ids, c->valid) < e) {
		moor_errf(err, "cache: a scratch run of %llu tokens does not "
			       "extend the end anchor at %llu inside the window",
			  (unsigned long long)r->n, (unsigned long long)e);
		return MOOR_ERANGE;
	}
	rc = cache_secs_in(c, cache_dev_at(c, c->end.off));
	if (rc) {
		moor_errf(err, "cache: the end anchor's sections: %s",
			  moor_strerror(rc));
		return rc;
	}
	cache_turn *t = &c->t;
	t->active = 1;
	t->scratch = 1;
	t->guest = 0;
	t->no_cache = 1;
	t->n = r->n;
	t->start = e;
	t->cut = e;
	t->tier = CACHE_TIER_END;
	t->taint = cache_min64(c->end.taint, e);
	t->n_slots = 0;
	t->n_hid = 0;
	memset(out, 0, sizeof *out);
	out->start = e;
	out->taint = t->taint;
	out->tier = CACHE_TIER_END;
	out->mem_held = cache_held_bytes(c);
	moor_debug("cache: scratch run of %llu tokens from the end anchor at "
		   "%llu", (unsigned long long)r->n, (unsigned long long)e);
	return 0;
}

int cache_commit_at(cache *c, uint32_t n_filled, const int32_t *gen,
		    uint64_t n_gen, uint64_t state_len)
{
	cache_turn *t = &c->t;
	if (t->active && t->scratch)
		return scratch_end(c);
	if (!t->active || n_filled > t->n_slots || (n_gen && !gen) ||
	    n_gen > c->lay->window - t->n || state_len < t->n + n_gen)
		return MOOR_ERANGE;
	uint64_t n = t->n, e = n + n_gen;
	int ahead = state_len > e;
	c->k.commits++;
	double dt = moor_now() - t->t_plan;
	if (n - t->start >= 1024 && dt > 0)
		c->rate[c->n_rate++ % 8] = (double)(n - t->start) / dt;
	if (t->no_cache) {
		turn_release_slots(c, 0);
		t->active = 0;
		return 0;
	}
	uint64_t taint = n_gen ? cache_min64(t->taint, n) : t->taint;
	/* the disk tier's anchors to staging, its job to the writer */
	cache_disk_commit(c, t, n_filled);
	/* prefix snapshots from the slots the prefill filled */
	for (uint32_t i = 0; i < n_filled; i++)
		if (t->slot[i].store)
			(void)cache_store_put(c, CACHE_ENTRY_PREFIX, t->ids,
					      t->slot[i].line, t->taint,
					      cache_dev_at(c, t->slot[i].off),
					      t->session);
	if (n_gen) /* gen may be NULL when nothing was generated */
		memcpy(t->ids + n, gen, n_gen * sizeof *gen);
	if (t->guest) {
		if (c->cfg.store_sessions && ahead)
			c->k.st_declined_short++;
		else if (c->cfg.store_sessions)
			(void)cache_store_put(c, CACHE_ENTRY_SESSION, t->ids, e,
					      taint, NULL, t->session);
		turn_release_slots(c, 0);
		t->active = 0;
		return 0;
	}
	/* the filled slots become anchors; the rest go */
	for (uint32_t i = 0; i < t->n_slots; i++) {
		cache_tslot *s = &t->slot[i];
		if (i < n_filled && s->anchor &&
		    cache_anchor_insert(c, s->line, s->off) == 0) {
			c->k.anchors_made++;
			continue;
		}
		arena_release(c->dev, s->off);
	}
	t->n_slots = 0;
	if (n_gen)
		memcpy(c->res_ids + n, gen, n_gen * sizeof *gen);
	c->valid = e;
	c->taint = taint < e ? taint : CACHE_NO_TAINT;
	cache_marks_cut(c, t->mk_keep);
	(void)cache_marks_add(c, n, n_gen, CACHE_MARK_GEN);
	for (uint32_t i = 0; i < t->n_hid; i++)
		(void)cache_marks_add(c, n + t->hid[i].start, t->hid[i].len,
				      CACHE_MARK_HIDDEN);
	t->n_hid = 0;
	/* the end anchor first: a declined store put costs it nothing */
	if (c->cfg.end_anchor && !ahead && e > cache_anchor_top(c))
		(void)cache_end_keep(c, e, c->taint);
	if (c->cfg.store_sessions) {
		if (ahead)
			c->k.st_declined_short++;
		else
			(void)cache_store_put(c, CACHE_ENTRY_SESSION,
					      c->res_ids, e, c->taint, NULL,
					      t->session);
	}
	t->active = 0;
	return 0;
}

int cache_commit_marks(cache *c, uint32_t n_filled, const int32_t *gen,
		       uint64_t n_gen, const cache_mark *hid, uint32_t n_hid)
{
	cache_turn *t = &c->t;
	if (t->active && t->scratch)
		return scratch_end(c);
	if (!t->active || n_hid > sizeof t->hid / sizeof t->hid[0])
		return MOOR_ERANGE;
	for (uint32_t i = 0; i < n_hid; i++)
		if (hid[i].start > n_gen || hid[i].len > n_gen - hid[i].start ||
		    (i && hid[i].start < hid[i - 1].start + hid[i - 1].len))
			return MOOR_ERANGE;
	memcpy(t->hid, hid, n_hid * sizeof *hid);
	t->n_hid = n_hid;
	int rc = cache_commit_at(c, n_filled, gen, n_gen, t->n + n_gen);
	t->n_hid = 0;
	return rc;
}

int cache_commit(cache *c, uint32_t n_filled, const int32_t *gen,
		 uint64_t n_gen)
{
	if (!c->t.active)
		return MOOR_ERANGE;
	return cache_commit_at(c, n_filled, gen, n_gen, c->t.n + n_gen);
}

void cache_turn_abort(cache *c, uint32_t n_filled, uint64_t valid)
{
	cache_turn *t = &c->t;
	if (!t->active)
		return;
	if (t->scratch) {
		(void)scratch_end(c);
		return;
	}
	c->k.aborts++;
	if (t->guest) {
		turn_release_slots(c, 0);
		t->active = 0;
		return;
	}
	uint64_t v = cache_min64(valid, t->n);
	if (t->no_cache)
		v = cache_min64(v, t->cut);
	for (uint32_t i = 0; i < t->n_slots; i++) {
		cache_tslot *s = &t->slot[i];
		if (i < n_filled && s->anchor && s->line <= v &&
		    cache_anchor_insert(c, s->line, s->off) == 0) {
			c->k.anchors_made++;
			continue;
		}
		arena_release(c->dev, s->off);
	}
	t->n_slots = 0;
	c->valid = v;
	c->taint = t->no_cache ? CACHE_NO_TAINT : t->taint;
	cache_resident_cut(c, v);
	t->active = 0;
}

int cache_abort(cache *c, uint32_t n_filled, uint64_t valid)
{
	if (c->t.active && c->t.scratch)
		return scratch_end(c);
	if (!c->t.active || n_filled > c->t.n_slots)
		return MOOR_ERANGE;
	cache_turn_abort(c, n_filled, valid);
	return 0;
}
