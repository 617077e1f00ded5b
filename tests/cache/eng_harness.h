/* eng_harness.h: the real engine computing into cached's arena, in one
 * process, for the cache tests.
 *
 * A turn is what engined does: cache_plan; the sequence's length set to
 * the plan's start; eng_prefill_slots of the rest with the plan's slots
 * (device pointers: the arena's base plus their offsets); the state read
 * back right after the prefill (for the bit-for-bit checks); a few greedy
 * decode steps, the last sampled token not forwarded; cache_commit with
 * the tokens the state absorbed. A cold run does the same on a sequence
 * the engine owns, from length 0.
 *
 * The backend is MOOR_TEST_BACKEND's (tb.h). On CUDA the cache's device
 * arena is cudaMalloc'ed (cfg.dev_cuda 0) and its mover copies on a
 * stream; the engine, in the same process, computes into it through the
 * arena's base pointer. The daemons' ordering holds here too: the cache's
 * copies are waited for after a plan (cache_sync), the engine's queues
 * before a commit (eng_model_sync). */
#ifndef MOOR_TEST_ENG_HARNESS_H
#define MOOR_TEST_ENG_HARNESS_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "eng.h"
#include "layout_of.h"
#include "moor.h"
#include "state.h"
#include "t.h"
#include "tb.h"

#define H_MAX_GEN 64

typedef struct harness {
	const kern_ops *ops;
	kern_ctx *ctx;
	eng_model *m;
	const eng_layout *y;
	int V;
	int64_t window;
	cache *c;
	cache_layout *lay;
	cache_hello_out ho;
	eng_seq s;    /* into the arena */
	eng_seq cold; /* the engine's own */
	float *lg, *lc, *l1;
} harness;

typedef struct h_turn {
	cache_plan_out plan;
	int n_filled;
	int32_t gen[H_MAX_GEN];
	int n_gen; /* sampled; n_gen - 1 absorbed */
	host_state st;
} h_turn;

/* A small configuration for these models (vocab 512, grid 128). */
static inline void h_cfg(cache_cfg *cfg, const char *test)
{
	cache_cfg_defaults(cfg);
	snprintf(cfg->arena_prefix, sizeof cfg->arena_prefix, "moor-%s-%d",
		 test, (int)getpid());
	cfg->device_bytes = 64ull << 20;
	cfg->host_bytes = 64ull << 20;
	cfg->mem_ceiling = 1ull << 40;
	cfg->mem_peak = 1ull << 40;
	cfg->resident_bytes = 32ull << 20;
	cfg->pin_every = 256;
	cfg->pin_upto = 512;
	cfg->guest_max = 200;
	cfg->guest_margin = 16;
	cfg->stash_bytes = 4ull << 20;
	cfg->pin_bytes = 8ull << 20;
	cfg->park_bytes = 8ull << 20;
	cfg->store_bytes = 16ull << 20;
	cfg->store_entry_bytes = 8ull << 20;
	cfg->dev_cuda = tb_cuda() ? 0 : -1; /* the engine's memory */
	/* the NVMe tiers' free-space floor (the disk tier's and the
	 * spill's): none, whatever the drive has free */
	cfg->disk_min_free = 0;
}

/* h_cfg for the disk tier's tests: the RAM tiers that would serve first
 * off (no store, park or pin), the tier in dir from 256 tokens, whatever
 * the drive has free. */
static inline void h_cfg_disk(cache_cfg *cfg, const char *test,
			      const char *dir)
{
	h_cfg(cfg, test);
	cfg->store_sessions = 0;
	cfg->store_bytes = 0;
	cfg->park_bytes = 0;
	cfg->pin_bytes = 0;
	snprintf(cfg->spill_dir, sizeof cfg->spill_dir, "%s", dir);
	cfg->disk_min_tokens = 256;
	cfg->disk_min_free = 0;
}

static inline const char *h_model(const char *name, char *buf, size_t n)
{
	snprintf(buf, n, "%s/tests/golden/%s", t_src(), name);
	return buf;
}

static inline void h_open(harness *h, const char *model, int grid,
			  int64_t window, const cache_cfg *cfg)
{
	memset(h, 0, sizeof *h);
	char err[MOOR_ERRLEN] = "", dir[1024];
	kern_config kc = {.threads = 1};
	h->ops = tb_backend("eng_harness");
	REQUIRE(h->ops->create(&kc, &h->ctx) == 0, "backend");
	eng_opts o = {.grid = grid, .window = window, .threads = 1};
	h_model(model, dir, sizeof dir);
	REQUIRE(eng_model_load(dir, h->ops, h->ctx, &o, &h->m, err) == 0,
		"load %s: %s", dir, err);
	h->y = eng_model_layout(h->m);
	h->V = eng_model_vocab(h->m);
	h->window = h->y->window;
	h->lay = malloc(sizeof *h->lay);
	REQUIRE(h->lay, "oom");
	h_layout(h->y, dir, h->lay);
	cache_cfg cc = *cfg;
	if (tb_cuda())
		cc.dev_cuda = 0;
	REQUIRE(cache_new(&cc, &h->c, err) == 0, "cache_new: %s", err);
	REQUIRE(cache_hello(h->c, h->lay, &h->ho, err) == 0, "hello: %s", err);
	h->s.sec = calloc((size_t)h->y->n_sections + 1, sizeof(void *));
	h->s.view = calloc((size_t)h->y->n_views + 1, sizeof(void *));
	REQUIRE(h->s.sec && h->s.view, "oom");
	char *base = cache_dev_base(h->c);
	for (int i = 0; i < h->y->n_sections; i++)
		h->s.sec[i] = base + h->ho.sec_off[i];
	for (int i = 0; i < h->y->n_views; i++)
		h->s.view[i] = base + h->ho.view_off[i];
	REQUIRE(eng_seq_alloc(h->m, &h->cold) == 0, "cold seq");
	size_t lb = (size_t)window * (size_t)h->V * sizeof(float);
	h->lg = malloc(lb);
	h->lc = malloc(lb);
	h->l1 = malloc((size_t)h->V * sizeof(float));
	REQUIRE(h->lg && h->lc && h->l1, "oom");
}

static inline void h_close(harness *h)
{
	cache_free(h->c);
	eng_seq_free(h->m, &h->cold);
	free(h->s.sec);
	free(h->s.view);
	free(h->lg);
	free(h->lc);
	free(h->l1);
	free(h->lay);
	eng_model_free(h->m);
	h->ops->destroy(h->ctx);
}

static inline int32_t h_argmax(const float *l, int V)
{
	int32_t b = 0;
	for (int i = 1; i < V; i++)
		if (l[i] > l[b])
			b = i;
	return b;
}

/* n_sample greedy tokens after the prefill whose last logits are `last`:
 * the first from them, each next after forwarding the one before. */
static inline void h_decode(harness *h, eng_seq *s, const float *last,
			    int n_sample, int32_t *gen)
{
	REQUIRE(n_sample >= 1 && n_sample <= H_MAX_GEN, "n_sample");
	gen[0] = h_argmax(last, h->V);
	for (int i = 1; i < n_sample; i++) {
		REQUIRE(eng_decode(h->m, s, gen[i - 1], h->l1) == 0, "decode");
		gen[i] = h_argmax(h->l1, h->V);
	}
}

/* One turn through the cache. Returns cache_plan's code (the turn ran
 * only when it is 0). */
static inline int h_turn_run(harness *h, const int32_t *ids, int64_t n,
			     const char *session, int n_sample, h_turn *t)
{
	char err[MOOR_ERRLEN] = "";
	memset(t, 0, sizeof *t);
	cache_req r = {.ids = ids,
		       .n = (uint64_t)n,
		       .session = session,
		       .max_tokens = (uint32_t)n_sample};
	int rc = cache_plan(h->c, &r, &t->plan, err);
	if (rc)
		return rc;
	REQUIRE(cache_sync(h->c) == 0, "the cache's restore copies");
	uint64_t st = t->plan.start;
	REQUIRE(st < (uint64_t)n, "start %llu of %lld", (unsigned long long)st,
		(long long)n);
	static eng_slot es[CACHE_MAX_SLOTS];
	char *base = cache_dev_base(h->c);
	for (uint32_t i = 0; i < t->plan.n_slots; i++) {
		es[i].line = (int64_t)t->plan.slots[i].line;
		es[i].dst = base + t->plan.slots[i].offset;
	}
	h->s.len = (int64_t)st;
	rc = eng_prefill_slots(h->m, &h->s, ids + st, n - (int64_t)st,
			       h->lg + st * (size_t)h->V, ENG_LOGITS_ALL, es,
			       (int)t->plan.n_slots, &t->n_filled);
	REQUIRE(rc == 0, "prefill [%llu, %lld) with %u slots: %s",
		(unsigned long long)st, (long long)n, t->plan.n_slots,
		moor_strerror(rc));
	REQUIRE(t->n_filled == (int)t->plan.n_slots, "filled %d of %u",
		t->n_filled, t->plan.n_slots);
	t->st = state_read(h->ops, h->ctx, h->y, &h->s, n);
	t->n_gen = n_sample;
	h_decode(h, &h->s, h->lg + (size_t)(n - 1) * h->V, n_sample, t->gen);
	REQUIRE(eng_model_sync(h->m) == 0, "the engine's queues");
	REQUIRE(cache_commit(h->c, (uint32_t)t->n_filled, t->gen,
			     (uint64_t)(n_sample - 1)) == 0,
		"commit");
	return 0;
}

typedef struct h_cold_out {
	int32_t gen[H_MAX_GEN];
	host_state st;
} h_cold_out;

static inline void h_cold(harness *h, const int32_t *ids, int64_t n,
			  int n_sample, h_cold_out *o)
{
	REQUIRE(eng_seq_reset(h->m, &h->cold) == 0, "reset");
	REQUIRE(eng_prefill(h->m, &h->cold, ids, n, h->lc, ENG_LOGITS_ALL) == 0,
		"cold prefill");
	o->st = state_read(h->ops, h->ctx, h->y, &h->cold, n);
	h_decode(h, &h->cold, h->lc + (size_t)(n - 1) * h->V, n_sample, o->gen);
}

/* The turn's prefill against a cold one: logits of rows [start, n), every
 * section, every view's rows [0, n), and the greedy tokens; bit for bit. */
static inline int h_exact(harness *h, const int32_t *ids, int64_t n, h_turn *t,
			  const char *what)
{
	h_cold_out o;
	h_cold(h, ids, n, t->n_gen, &o);
	int ok = 1;
	size_t st = t->plan.start;
	if (memcmp(h->lg + st * h->V, h->lc + st * h->V,
		   (size_t)(n - (int64_t)st) * h->V * sizeof(float))) {
		CHECK(0,
		      "%s: logits of rows [%zu, %lld) differ from a cold "
		      "prefill's",
		      what, st, (long long)n);
		ok = 0;
	}
	ok &= state_equal(h->y, &t->st, &o.st, n, what);
	if (memcmp(t->gen, o.gen, (size_t)t->n_gen * sizeof(int32_t))) {
		CHECK(0, "%s: greedy tokens differ", what);
		ok = 0;
	}
	state_free(&o.st);
	return ok;
}

/* A counter of cache_stats_json, by "tier.name". */
static inline long long h_stat(cache *c, const char *path)
{
	char *s = cache_stats_json(c);
	REQUIRE(s, "stats");
	json_error_t e;
	json_t *r = json_loads(s, 0, &e);
	free(s);
	REQUIRE(r, "stats json: %s", e.text);
	char buf[128];
	snprintf(buf, sizeof buf, "%s", path);
	char *dot = strchr(buf, '.');
	json_t *o = r;
	if (dot) {
		*dot = 0;
		o = json_object_get(r, buf);
		REQUIRE(o, "no %s in the stats", buf);
	}
	json_t *v = json_object_get(o, dot ? dot + 1 : buf);
	REQUIRE(v, "no %s in the stats", path);
	long long x = json_is_integer(v) ? json_integer_value(v)
		      : json_is_true(v)	 ? 1
		      : json_is_null(v)	 ? -1
					 : 0;
	json_decref(r);
	return x;
}

/* The resident anchors' lines, as the stats report them. */
static inline int h_lines(cache *c, const char *tier, uint64_t *lines, int max)
{
	char *s = cache_stats_json(c);
	json_t *r = json_loads(s, 0, NULL);
	free(s);
	REQUIRE(r, "stats json");
	json_t *a = json_object_get(json_object_get(r, tier), "lines");
	int n = 0;
	for (size_t i = 0; a && i < json_array_size(a) && n < max; i++)
		lines[n++] = (uint64_t)json_integer_value(json_array_get(a, i));
	json_decref(r);
	return n;
}

/* ids: a[0, na) then b[0, nb) */
static inline int32_t *h_cat(const int32_t *a, int64_t na, const int32_t *b,
			     int64_t nb)
{
	int32_t *r = malloc((size_t)(na + nb + 1) * sizeof *r);
	REQUIRE(r, "oom");
	memcpy(r, a, (size_t)na * sizeof *r);
	memcpy(r + na, b, (size_t)nb * sizeof *r);
	return r;
}

static inline int32_t *h_ids(int64_t n, int V, uint64_t seed)
{
	int32_t *r = malloc((size_t)(n + 1) * sizeof *r);
	REQUIRE(r, "oom");
	make_ids(r, n, V, seed);
	return r;
}

/* Makes p part from a at k (p[k] != a[k]). */
static inline void h_part(int32_t *p, const int32_t *a, int64_t k, int V)
{
	if (p[k] == a[k])
		p[k] = (a[k] + 1) % V;
}

#endif
