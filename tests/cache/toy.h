/* toy.h: a made-up third architecture and its deterministic "engine", for
 * the cache tests that must pass with no model and no edit in cached/.
 *
 * Two sections of odd sizes (1,003 and 77 bytes), three views whose element
 * sizes, dims and token axes differ from Qwen3.5's:
 *   toy.a  [2, T, 24] of 2-byte elements, token axis 1
 *   toy.b  [T, 7]     of 4-byte elements, token axis 0
 *   toy.c  [3, 5, T]  of 1-byte elements, token axis 2
 * A step at position p with token x writes every element of row p from x, p
 * and the same element of row p-1, and mixes x into both sections (a
 * running mix of every token); the greedy "logits" are a hash of the
 * sections and the last row. Any cache that restores a wrong byte changes
 * what follows. */
#ifndef MOOR_TEST_TOY_H
#define MOOR_TEST_TOY_H

#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "t.h"

#define TOY_V 1000
#define TOY_S0 1003
#define TOY_S1 77

typedef struct toy_seq {
	uint8_t *sec[2];
	uint8_t *view[3];
	int64_t len;
} toy_seq;

static inline void toy_layout(cache_layout *l, uint64_t window, uint32_t grid,
			      uint8_t fp)
{
	memset(l, 0, sizeof *l);
	l->n_sections = 2;
	snprintf(l->sec[0].name, CACHE_NAME_MAX, "toy.mix");
	l->sec[0].layer = 0;
	l->sec[0].bytes = TOY_S0;
	snprintf(l->sec[1].name, CACHE_NAME_MAX, "toy.count");
	l->sec[1].layer = 1;
	l->sec[1].bytes = TOY_S1;
	l->n_views = 3;
	cache_view *v = l->view;
	snprintf(v[0].name, CACHE_NAME_MAX, "toy.a");
	v[0].elt = 2;
	v[0].ndim = 3;
	v[0].dims[0] = 2;
	v[0].dims[2] = 24;
	v[0].token_axis = 1;
	snprintf(v[1].name, CACHE_NAME_MAX, "toy.b");
	v[1].elt = 4;
	v[1].ndim = 2;
	v[1].dims[1] = 7;
	v[1].token_axis = 0;
	snprintf(v[2].name, CACHE_NAME_MAX, "toy.c");
	v[2].elt = 1;
	v[2].ndim = 3;
	v[2].dims[0] = 3;
	v[2].dims[1] = 5;
	v[2].token_axis = 2;
	l->window = window;
	l->grid = grid;
	memset(l->fingerprint, fp, sizeof l->fingerprint);
}

/* outer runs, inner elements a token, of view v */
static inline void toy_geom(const cache_view *v, uint64_t *outer,
			    uint64_t *inner)
{
	*outer = 1;
	*inner = 1;
	for (uint32_t d = 0; d < v->ndim; d++)
		if (d < v->token_axis)
			*outer *= (uint64_t)v->dims[d];
		else if (d > v->token_axis)
			*inner *= (uint64_t)v->dims[d];
}

static inline uint64_t toy_mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

static inline uint64_t toy_get(const uint8_t *p, uint32_t elt)
{
	uint64_t v = 0;
	memcpy(&v, p, elt);
	return v;
}

static inline void toy_step(const cache_layout *l, toy_seq *s, int32_t x)
{
	int64_t p = s->len;
	REQUIRE(p < (int64_t)l->window, "toy: past the window");
	for (uint32_t i = 0; i < l->n_views; i++) {
		const cache_view *v = &l->view[i];
		uint64_t outer, inner;
		toy_geom(v, &outer, &inner);
		for (uint64_t o = 0; o < outer; o++)
			for (uint64_t e = 0; e < inner; e++) {
				uint64_t at =
				    (o * l->window + (uint64_t)p) * inner + e;
				uint64_t prev =
				    p ? toy_get(s->view[i] +
						    (at - inner) * v->elt,
						v->elt)
				      : 0;
				uint64_t val = toy_mix(
				    (uint64_t)x * 2654435761u +
				    (uint64_t)p * 40503u +
				    (o * inner + e) * 97u + prev * 31u + i);
				memcpy(s->view[i] + at * v->elt, &val, v->elt);
			}
	}
	uint8_t *a = s->sec[0], *b = s->sec[1];
	for (int i = 0; i < TOY_S0; i++)
		a[i] = (uint8_t)(a[i] * 31u + (uint32_t)(x + i) +
				 (b[i % TOY_S1] ^ 0x5a));
	for (int j = 0; j < TOY_S1; j++)
		b[j] = (uint8_t)(b[j] + (uint32_t)x * (uint32_t)(j + 1) +
				 a[(j * 13) % TOY_S0]);
	s->len = p + 1;
}

/* the greedy next token: the sections and the last row */
static inline int32_t toy_next(const cache_layout *l, const toy_seq *s)
{
	uint64_t h = 0x1234;
	for (int i = 0; i < TOY_S0; i++)
		h = toy_mix(h ^ s->sec[0][i]);
	for (int j = 0; j < TOY_S1; j++)
		h = toy_mix(h ^ s->sec[1][j]);
	const cache_view *v = &l->view[1];
	uint64_t outer, inner;
	toy_geom(v, &outer, &inner);
	for (uint64_t e = 0; e < inner; e++)
		h = toy_mix(
		    h ^
		    toy_get(s->view[1] +
				((uint64_t)(s->len - 1) * inner + e) * v->elt,
			    v->elt));
	return (int32_t)(h % TOY_V);
}

/* A prefill that fills the slots it passes (sections back to back). */
static inline int toy_prefill(const cache_layout *l, toy_seq *s,
			      const int32_t *ids, int64_t n,
			      const cache_plan_out *plan, uint8_t *dev)
{
	uint32_t filled = 0;
	for (int64_t i = 0; i < n; i++) {
		toy_step(l, s, ids[i]);
		if (plan && filled < plan->n_slots &&
		    plan->slots[filled].line == (uint64_t)s->len) {
			uint8_t *d = dev + plan->slots[filled].offset;
			memcpy(d, s->sec[0], TOY_S0);
			memcpy(d + TOY_S0, s->sec[1], TOY_S1);
			filled++;
		}
	}
	return (int)filled;
}

static inline void toy_seq_alloc(const cache_layout *l, toy_seq *s)
{
	memset(s, 0, sizeof *s);
	s->sec[0] = calloc(1, TOY_S0);
	s->sec[1] = calloc(1, TOY_S1);
	for (uint32_t i = 0; i < 3; i++) {
		uint64_t outer, inner;
		toy_geom(&l->view[i], &outer, &inner);
		s->view[i] =
		    calloc(1, outer * inner * l->view[i].elt * l->window);
		REQUIRE(s->view[i], "oom");
	}
	REQUIRE(s->sec[0] && s->sec[1], "oom");
}

static inline void toy_seq_free(toy_seq *s)
{
	free(s->sec[0]);
	free(s->sec[1]);
	for (int i = 0; i < 3; i++)
		free(s->view[i]);
}

static inline void toy_seq_arena(toy_seq *s, uint8_t *dev,
				 const cache_hello_out *ho)
{
	s->sec[0] = dev + ho->sec_off[0];
	s->sec[1] = dev + ho->sec_off[1];
	for (int i = 0; i < 3; i++)
		s->view[i] = dev + ho->view_off[i];
	s->len = 0;
}

/* sections and each view's rows [0, n) of a and b, compared through
 * cache_view_copy into compact buffers */
static inline int toy_equal(const cache_layout *l, const toy_seq *a,
			    const toy_seq *b, uint64_t n, const char *what)
{
	if (memcmp(a->sec[0], b->sec[0], TOY_S0) ||
	    memcmp(a->sec[1], b->sec[1], TOY_S1)) {
		CHECK(0, "%s: sections differ", what);
		return 0;
	}
	for (uint32_t i = 0; i < 3; i++) {
		uint64_t outer, inner;
		toy_geom(&l->view[i], &outer, &inner);
		size_t sz = outer * inner * l->view[i].elt * n;
		uint8_t *x = malloc(sz + 1), *y = malloc(sz + 1);
		REQUIRE(x && y, "oom");
		cache_view_copy(&l->view[i], x, n, 0, a->view[i], l->window, 0,
				n);
		cache_view_copy(&l->view[i], y, n, 0, b->view[i], l->window, 0,
				n);
		int ok = memcmp(x, y, sz) == 0;
		free(x);
		free(y);
		if (!ok) {
			CHECK(0, "%s: view %s differs", what, l->view[i].name);
			return 0;
		}
	}
	return 1;
}

/* ---- a turn through the cache ---- */

/* cached's config for the disk tier's toy tests: arenas of 16 MiB named
 * moor-TAG-NAME-PID, no ceiling to speak of, 40 toy rows of resident
 * cache, no store, the NVMe tiers in dir (the disk tier from 256 tokens)
 * and no free-space floor. */
static inline void toy_cfg_disk(cache_cfg *cfg, const char *tag,
				const char *name, const char *dir)
{
	cache_cfg_defaults(cfg);
	snprintf(cfg->arena_prefix, sizeof cfg->arena_prefix, "moor-%s-%s-%d",
		 tag, name, (int)getpid());
	cfg->device_bytes = 16ull << 20;
	cfg->host_bytes = 16ull << 20;
	cfg->mem_ceiling = cfg->mem_peak = 1ull << 40;
	cfg->resident_bytes = 40 * 1088;
	cfg->store_sessions = 0;
	cfg->store_bytes = 0;
	snprintf(cfg->spill_dir, sizeof cfg->spill_dir, "%s", dir);
	cfg->disk_min_tokens = 256;
	cfg->disk_min_free = 0;
}

typedef struct toy_env {
	cache *c;
	cache_layout *lay;
	cache_hello_out ho;
	toy_seq s, cold;
	uint8_t *dev;
} toy_env;

static inline void toy_open(toy_env *e, const cache_cfg *cfg, uint64_t window,
			    uint32_t grid)
{
	char err[MOOR_ERRLEN];
	memset(e, 0, sizeof *e);
	e->lay = malloc(sizeof *e->lay);
	REQUIRE(e->lay, "oom");
	toy_layout(e->lay, window, grid, 7);
	REQUIRE(cache_new(cfg, &e->c, err) == 0, "cache_new: %s", err);
	REQUIRE(cache_hello(e->c, e->lay, &e->ho, err) == 0, "hello: %s", err);
	e->dev = cache_dev_base(e->c);
	toy_seq_arena(&e->s, e->dev, &e->ho);
	toy_seq_alloc(e->lay, &e->cold);
}

static inline void toy_close(toy_env *e)
{
	cache_free(e->c);
	toy_seq_free(&e->cold);
	free(e->lay);
}

typedef struct toy_turn {
	cache_plan_out plan;
	int32_t gen[64];
	int n_gen;
} toy_turn;

/* plan, prefill, n_sample greedy tokens (the last not forwarded), commit;
 * then the same ids cold; the prefill's state is compared right after it */
static inline int toy_run(toy_env *e, const int32_t *ids, uint64_t n,
			  const char *session, int n_sample, toy_turn *t,
			  int check, const char *what)
{
	char err[MOOR_ERRLEN] = "";
	memset(t, 0, sizeof *t);
	cache_req r = {.ids = ids,
		       .n = n,
		       .session = session,
		       .max_tokens = (uint32_t)n_sample};
	int rc = cache_plan(e->c, &r, &t->plan, err);
	if (rc)
		return rc;
	REQUIRE(t->plan.start < n, "start");
	e->s.len = (int64_t)t->plan.start;
	int filled =
	    toy_prefill(e->lay, &e->s, ids + t->plan.start,
			(int64_t)(n - t->plan.start), &t->plan, e->dev);
	REQUIRE(filled == (int)t->plan.n_slots, "%s: filled %d of %u", what,
		filled, t->plan.n_slots);
	int ok = 1;
	if (check) {
		memset(e->cold.sec[0], 0, TOY_S0);
		memset(e->cold.sec[1], 0, TOY_S1);
		e->cold.len = 0;
		toy_prefill(e->lay, &e->cold, ids, (int64_t)n, NULL, NULL);
		ok = toy_equal(e->lay, &e->s, &e->cold, n, what);
	}
	t->n_gen = n_sample;
	for (int i = 0; i < n_sample; i++) {
		t->gen[i] = toy_next(e->lay, &e->s);
		if (check)
			CHECK(t->gen[i] == toy_next(e->lay, &e->cold),
			      "%s: token %d", what, i);
		if (i + 1 < n_sample) {
			toy_step(e->lay, &e->s, t->gen[i]);
			if (check)
				toy_step(e->lay, &e->cold, t->gen[i]);
		}
	}
	REQUIRE(cache_commit(e->c, (uint32_t)filled, t->gen,
			     (uint64_t)(n_sample - 1)) == 0,
		"%s: commit", what);
	return ok ? 0 : 1;
}

static inline int32_t *toy_ids(uint64_t n, uint64_t seed)
{
	int32_t *r = malloc((n + 1) * sizeof *r);
	REQUIRE(r, "oom");
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 7;
	for (uint64_t i = 0; i < n; i++) {
		x = toy_mix(x + i);
		r[i] = (int32_t)(x % TOY_V);
	}
	return r;
}

static inline int32_t *toy_cat(const int32_t *a, uint64_t na, const int32_t *b,
			       uint64_t nb)
{
	int32_t *r = malloc((na + nb + 1) * sizeof *r);
	REQUIRE(r, "oom");
	if (na) /* a may be NULL for an empty part (memcpy's contract) */
		memcpy(r, a, na * sizeof *r);
	if (nb)
		memcpy(r + na, b, nb * sizeof *r);
	return r;
}

/* Makes p part from a at k (p[k] != a[k]). */
static inline void toy_part(int32_t *p, const int32_t *a, uint64_t k)
{
	if (p[k] == a[k])
		p[k] = (a[k] + 1) % TOY_V;
}

/* The path of the disk tier's file of kind k ('a' an anchor, 'c' a chunk)
 * at line in DIR/disk (its names end in -LINE); 0 when there is none. */
static inline int toy_file_at(const char *dir, char k, uint64_t line, char *out,
			      size_t n)
{
	char d[300], suf[32];
	snprintf(d, sizeof d, "%s/disk", dir);
	snprintf(suf, sizeof suf, "-%llu", (unsigned long long)line);
	DIR *dp = opendir(d);
	REQUIRE(dp, "opendir %s", d);
	struct dirent *e;
	int got = 0;
	while ((e = readdir(dp))) {
		size_t l = strlen(e->d_name), ls = strlen(suf);
		if (e->d_name[0] == k && e->d_name[1] == '-' && l > ls &&
		    !strcmp(e->d_name + l - ls, suf)) {
			snprintf(out, n, "%s/%s", d, e->d_name);
			got = 1;
		}
	}
	closedir(dp);
	return got;
}

/* A new directory for a test's files in /dev/shm where it can write
 * there (the tests look at the order of operations and what a failure
 * leaves, not at a drive: an fsync a file on a shared disk cost seconds),
 * else in /tmp: out (n bytes) gets its path, "moor-TAG-XXXXXX" made. */
static inline void toy_tmpdir(char *out, size_t n, const char *tag)
{
	struct stat st;
	snprintf(out, n, "%s/moor-%s-XXXXXX",
		 stat("/dev/shm", &st) == 0 && access("/dev/shm", W_OK) == 0
		     ? "/dev/shm"
		     : "/tmp",
		 tag);
	REQUIRE(mkdtemp(out), "mkdtemp %s", out);
}

/* The integer KEY of the stats' object TIER (cache_stats_json), -1 when
 * it has none. */
static inline long long toy_stat(cache *c, const char *tier, const char *key)
{
	char *s = cache_stats_json(c);
	json_t *r = s ? json_loads(s, 0, NULL) : NULL;
	free(s);
	REQUIRE(r, "stats");
	json_t *v = json_object_get(json_object_get(r, tier), key);
	long long x = json_is_integer(v) ? json_integer_value(v) : -1;
	json_decref(r);
	return x;
}

#endif
