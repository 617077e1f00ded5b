/* test_cache_api: the parts of cache.h around the tiers (toy.h's
 * architecture):
 *   - cache_stats_json names every cache's counters (the seed's names:
 *     hits, misses, declined_big, declined_short, parks, park_hits, ...);
 *   - cache_commit_at: a state ahead of its key keeps no end anchor and no
 *     session snapshot (declined_short); behind it is MOOR_ERANGE;
 *   - cache_abort keeps rows [0, valid) and the anchors filled so far: the
 *     next plan resumes at the last of them, bit for bit;
 *   - a no_cache request starts cold and keeps nothing new (the rows it
 *     rewrites with the same bits, and their anchors, stay);
 *   - cache_clear per tier and "all"; an unknown tier is MOOR_ERANGE;
 *     "disk" and "spill" of a cache without a spill_dir (cached without
 *     --disk-dir) are MOOR_EUNSUP and change nothing (the stats byte for
 *     byte, the next turn's resume line), "ram" and "all" still clear;
 *     with a spill_dir and disk_on 0, "disk" alone is refused;
 *   - with unified 0 the memory limits count the device arena only;
 *   - bad arguments: no hello, an empty prompt, one past the window. */
#include <jansson.h>
#include <unistd.h>

#include "moor.h"
#include "toy.h"

#define G 16

static json_t *stats(cache *c)
{
	char *s = cache_stats_json(c);
	REQUIRE(s, "stats");
	json_t *r = json_loads(s, 0, NULL);
	free(s);
	REQUIRE(r, "stats parse");
	return r;
}

static long long st(cache *c, const char *tier, const char *name)
{
	json_t *r = stats(c);
	json_t *v = json_object_get(json_object_get(r, tier), name);
	REQUIRE(v, "no %s.%s", tier, name);
	long long x = json_is_integer(v) ? json_integer_value(v)
		      : json_is_true(v)	 ? 1
					 : 0;
	json_decref(r);
	return x;
}

static void cfg_of(cache_cfg *cfg, const char *name)
{
	cache_cfg_defaults(cfg);
	snprintf(cfg->arena_prefix, sizeof cfg->arena_prefix, "moor-api-%s-%d",
		 name, (int)getpid());
	cfg->device_bytes = 8ull << 20;
	cfg->host_bytes = 8ull << 20;
	cfg->mem_ceiling = cfg->mem_peak = 1ull << 40;
	cfg->resident_bytes = 1 << 20;
	cfg->pin_every = 64;
	cfg->pin_upto = 128;
	cfg->guest_max = 50;
	cfg->guest_margin = 8;
	cfg->stash_bytes = cfg->pin_bytes = cfg->park_bytes = 1 << 20;
	cfg->store_bytes = cfg->store_entry_bytes = 2 << 20;
}

static void test_stats_names(void)
{
	cache_cfg cfg;
	cfg_of(&cfg, "names");
	toy_env e;
	toy_open(&e, &cfg, 1024, G);
	json_t *r = stats(e.c);
	static const char *const need[][2] = {
	    {"resident", "hits"},      {"resident", "misses"},
	    {"resident", "anchors"},   {"resident", "evictions"},
	    {"resident", "bytes"},     {"resident", "taint"},
	    {"end", "kept"},	       {"end", "hits"},
	    {"end", "bytes"},	       {"stash", "stashes"},
	    {"stash", "restores"},     {"stash", "bytes"},
	    {"pin", "pins"},	       {"pin", "hits"},
	    {"pin", "bytes"},	       {"park", "parks"},
	    {"park", "park_hits"},     {"park", "bytes"},
	    {"store", "hits"},	       {"store", "misses"},
	    {"store", "declined_big"}, {"store", "declined_short"},
	    {"store", "evictions"},    {"store", "bytes"},
	    {"memory", "held"},	       {"memory", "shed_total"},
	    {"memory", "refused"},
	};
	for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
		CHECK(
		    json_object_get(json_object_get(r, need[i][0]), need[i][1]),
		    "the stats name %s.%s", need[i][0], need[i][1]);
	json_decref(r);
	toy_close(&e);
}

static void test_commit_abort(void)
{
	cache_cfg cfg;
	cfg_of(&cfg, "commit");
	toy_env e;
	toy_open(&e, &cfg, 1024, G);
	char err[MOOR_ERRLEN];
	int32_t *P = toy_ids(100, 1), *N = toy_ids(200, 2);
	cache_req r = {.ids = P, .n = 100, .session = "s", .max_tokens = 4};
	cache_plan_out plan;
	REQUIRE(cache_plan(e.c, &r, &plan, err) == 0, "plan: %s", err);
	e.s.len = 0;
	int f = toy_prefill(e.lay, &e.s, P, 100, &plan, e.dev);
	int32_t gen[3] = {1, 2, 3};
	for (int i = 0; i < 3; i++)
		toy_step(e.lay, &e.s, gen[i]);
	toy_step(e.lay, &e.s, 4); /* the engine ran one ahead */
	CHECK(cache_commit_at(e.c, (uint32_t)f, gen, 3, 102) == MOOR_ERANGE,
	      "a state behind its key");
	REQUIRE(cache_commit_at(e.c, (uint32_t)f, gen, 3, 104) == 0, "commit");
	CHECK(st(e.c, "store", "declined_short") == 1, "declined_short");
	CHECK(st(e.c, "end", "have") == 0, "no end anchor when ahead");
	CHECK(st(e.c, "resident", "tokens") == 103, "the key's 103 tokens");
	CHECK(cache_commit(e.c, 0, NULL, 0) == MOOR_ERANGE, "no turn");

	/* abort after 3 chunks: rows [0, 48) and the anchors at 16..48 */
	int32_t *Q = toy_cat(P, 20, N, 180);
	toy_part(Q, P, 20);
	r.ids = Q;
	r.n = 200;
	REQUIRE(cache_plan(e.c, &r, &plan, err) == 0, "plan: %s", err);
	CHECK(plan.start == 16, "resumes at 16");
	e.s.len = 16;
	cache_plan_out part = plan;
	part.n_slots = 2; /* the prefill stopped at 48 */
	f = toy_prefill(e.lay, &e.s, Q + 16, 32, &part, e.dev);
	REQUIRE(f == 2, "two filled");
	REQUIRE(cache_abort(e.c, 2, 48) == 0, "abort");
	CHECK(st(e.c, "resident", "tokens") == 48, "rows [0, 48) stay");
	toy_turn t;
	REQUIRE(toy_run(&e, Q, 200, "s", 3, &t, 1, "after the abort") == 0,
		"Q");
	CHECK(t.plan.start == 48,
	      "resumes at the last filled anchor (48), "
	      "got %llu",
	      (unsigned long long)t.plan.start);

	/* no_cache: cold, no slots, nothing new kept */
	long long puts =
	    st(e.c, "store", "puts_prefix") + st(e.c, "store", "puts_session");
	r.ids = Q;
	r.n = 150;
	r.no_cache = 1;
	REQUIRE(cache_plan(e.c, &r, &plan, err) == 0, "plan: %s", err);
	CHECK(plan.start == 0 && plan.n_slots == 0, "no_cache: cold, no slot");
	uint8_t zero[TOY_S0] = {0};
	CHECK(!memcmp(e.s.sec[0], zero, TOY_S0) &&
		  !memcmp(e.s.sec[1], zero, TOY_S1),
	      "a cold start has zeroed sections");
	e.s.len = 0;
	toy_prefill(e.lay, &e.s, Q, 150, NULL, NULL);
	REQUIRE(cache_commit(e.c, 0, NULL, 0) == 0, "commit");
	CHECK(st(e.c, "store", "puts_prefix") +
		      st(e.c, "store", "puts_session") ==
		  puts,
	      "no_cache puts nothing in the store");
	r.no_cache = 0;
	/* its cold prefill rewrote rows [0, 150) with the same bits: the
	 * anchors under them still serve, bit for bit (the store, which
	 * would offer 192, cleared first) */
	REQUIRE(cache_clear(e.c, "store") == 0, "clear the store");
	REQUIRE(toy_run(&e, Q, 200, "s", 3, &t, 1, "after no_cache") == 0,
		"Q after no_cache");
	CHECK(t.plan.start == 144,
	      "resumes at 144 under the no_cache rows, "
	      "got %llu",
	      (unsigned long long)t.plan.start);
	free(P);
	free(N);
	free(Q);
	toy_close(&e);
}

static void test_clear(void)
{
	cache_cfg cfg;
	cfg_of(&cfg, "clear");
	toy_env e;
	toy_open(&e, &cfg, 1024, G);
	toy_turn t;
	int32_t *P = toy_ids(300, 3), *C = toy_ids(200, 4),
		*D = toy_ids(200, 5);
	toy_part(C, P, 0);
	toy_part(D, C, 0);
	REQUIRE(toy_run(&e, P, 300, "a", 3, &t, 1, "P") == 0, "P");
	REQUIRE(toy_run(&e, C, 200, "a", 3, &t, 1, "C: pin") == 0, "C");
	REQUIRE(toy_run(&e, D, 200, "b", 3, &t, 1, "D: park") == 0, "D");
	CHECK(st(e.c, "pin", "tokens") && st(e.c, "park", "tokens") &&
		  st(e.c, "store", "entries") && st(e.c, "end", "have") &&
		  st(e.c, "resident", "anchors"),
	      "every tier holds something");
	CHECK(cache_clear(e.c, "bogus") == MOOR_ERANGE, "an unknown tier");
	/* no spill_dir: neither NVMe tier runs; their clear is refused and
	 * empties nothing */
	char *s0 = cache_stats_json(e.c);
	CHECK(cache_clear(e.c, "disk") == MOOR_EUNSUP, "disk without a dir");
	CHECK(cache_clear(e.c, "spill") == MOOR_EUNSUP, "spill without a dir");
	char *s1 = cache_stats_json(e.c);
	CHECK(s0 && s1 && !strcmp(s0, s1),
	      "a refused clear changed the stats:\n%s\n%s", s0, s1);
	free(s0);
	free(s1);
	CHECK(st(e.c, "disk", "on") == 0 && st(e.c, "spill", "on") == 0,
	      "the stats say both tiers are off");
	REQUIRE(cache_clear(e.c, "store") == 0, "clear store");
	CHECK(st(e.c, "store", "entries") == 0 && st(e.c, "pin", "tokens"),
	      "the store alone");
	REQUIRE(cache_clear(e.c, "pin") == 0, "clear pin");
	CHECK(st(e.c, "pin", "tokens") == 0 && st(e.c, "park", "tokens"),
	      "the pin alone");
	REQUIRE(cache_clear(e.c, "park") == 0, "clear park");
	CHECK(st(e.c, "park", "tokens") == 0, "the park");
	REQUIRE(cache_clear(e.c, "end") == 0, "clear end");
	CHECK(st(e.c, "end", "have") == 0 && st(e.c, "resident", "anchors"),
	      "the end alone");
	REQUIRE(cache_clear(e.c, "resident") == 0, "clear resident");
	CHECK(st(e.c, "resident", "anchors") == 0 &&
		  st(e.c, "resident", "tokens") == 0,
	      "the resident prefix");
	REQUIRE(toy_run(&e, D, 200, "b", 3, &t, 1, "D again") == 0, "D");
	CHECK(t.plan.start == 0, "cold after clearing everything");
	REQUIRE(cache_clear(e.c, "all") == 0, "clear all");
	CHECK(st(e.c, "resident", "anchors") == 0 &&
		  st(e.c, "store", "entries") == 0,
	      "all");
	uint64_t live = (uint64_t)st(e.c, "memory", "dev_used");
	CHECK(st(e.c, "memory", "host_used") == 0, "the host arena is empty");
	CHECK((uint64_t)st(e.c, "memory", "held") == live, "only live buffers");
	free(P);
	free(C);
	free(D);
	toy_close(&e);
}

/* The refusal is the tier's alone: with a spill_dir and disk_on 0 the
 * spill runs (its clear succeeds) and the disk tier does not; a refused
 * clear leaves the resident prefix, and the next turn resumes on it. */
static void test_clear_absent_disk(void)
{
	char dir[64];
	snprintf(dir, sizeof dir, "/tmp/moor-api-nodisk-XXXXXX");
	REQUIRE(mkdtemp(dir), "mkdtemp");
	cache_cfg cfg;
	cfg_of(&cfg, "nodisk");
	snprintf(cfg.spill_dir, sizeof cfg.spill_dir, "%s", dir);
	cfg.disk_on = 0;
	cfg.disk_min_free = 0;
	toy_env e;
	toy_open(&e, &cfg, 1024, G);
	toy_turn t;
	int32_t *P = toy_ids(300, 7);
	REQUIRE(toy_run(&e, P, 300, "a", 3, &t, 1, "P") == 0, "P");
	CHECK(st(e.c, "spill", "on") == 1 && st(e.c, "disk", "on") == 0,
	      "the spill on, the disk tier off");
	long long anchors = st(e.c, "resident", "anchors");
	CHECK(anchors > 0, "P left anchors");
	CHECK(cache_clear(e.c, "disk") == MOOR_EUNSUP, "disk, disk_on 0");
	CHECK(st(e.c, "resident", "anchors") == anchors,
	      "a refused clear left the anchors");
	CHECK(cache_clear(e.c, "spill") == 0, "the spill runs: cleared");
	REQUIRE(toy_run(&e, P, 300, "a", 3, &t, 1, "P again") == 0, "P");
	CHECK(t.plan.start > 0, "the next turn resumes (start %llu)",
	      (unsigned long long)t.plan.start);
	CHECK(cache_clear(e.c, "all") == 0 && cache_clear(e.c, "ram") == 0,
	      "all and ram");
	CHECK(st(e.c, "resident", "anchors") == 0, "all cleared RAM");
	free(P);
	toy_close(&e);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0, "rm %s", dir);
}

static void test_unified_off(void)
{
	cache_cfg cfg;
	cfg_of(&cfg, "split");
	cfg.unified = 0;
	toy_env e;
	toy_open(&e, &cfg, 1024, G);
	toy_turn t;
	int32_t *P = toy_ids(300, 6);
	REQUIRE(toy_run(&e, P, 300, "a", 3, &t, 1, "P") == 0, "P");
	CHECK(st(e.c, "memory", "host_used") > 0, "the store holds host bytes");
	CHECK(st(e.c, "memory", "held") == st(e.c, "memory", "dev_used"),
	      "unified 0: the device arena only");
	free(P);
	toy_close(&e);
}

static void test_bad_args(void)
{
	cache_cfg cfg;
	cfg_of(&cfg, "bad");
	cache *c;
	char err[MOOR_ERRLEN];
	REQUIRE(cache_new(&cfg, &c, err) == 0, "new: %s", err);
	int32_t ids[4] = {1, 2, 3, 4};
	cache_req r = {.ids = ids, .n = 4};
	cache_plan_out plan;
	CHECK(cache_plan(c, &r, &plan, err) == MOOR_ERANGE, "no hello yet");
	cache *c2;
	CHECK(cache_new(&cfg, &c2, err) == -EEXIST, "the arenas' names taken");
	cache_layout *l = malloc(sizeof *l);
	toy_layout(l, 64, G, 1);
	cache_hello_out ho;
	REQUIRE(cache_hello(c, l, &ho, err) == 0, "hello: %s", err);
	r.n = 0;
	CHECK(cache_plan(c, &r, &plan, err) == MOOR_ERANGE, "empty");
	int32_t big[65] = {0};
	r.ids = big;
	r.n = 65;
	CHECK(cache_plan(c, &r, &plan, err) == MOOR_ERANGE, "past the window");
	l->view[0].token_axis = 5;
	CHECK(cache_hello(c, l, &ho, err) == MOOR_ERANGE, "a bad layout");
	toy_layout(l, 1ull << 30, G, 1);
	CHECK(cache_hello(c, l, &ho, err) == MOOR_ENOSPACE,
	      "live buffers over the arena: %s", err);
	free(l);
	cache_free(c);
	cache_free(NULL);
}

int main(void)
{
	moor_log_level = MOOR_LOG_ERROR;
	test_stats_names();
	test_commit_abort();
	test_clear();
	test_clear_absent_disk();
	test_unified_off();
	test_bad_args();
	return t_done("test_cache_api");
}
