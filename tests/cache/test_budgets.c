/* test_budgets: every cache over its budget gives way in the seed's order,
 * and the memory policy gives room back cheapest first (through the toy
 * architecture of toy.h, grid 16).
 *   - resident anchors (resident_bytes): the newest 4 are never evicted,
 *     the anchors every pin_every up to pin_upto are kept over the others
 *     (and given up highest first), the others go lowest first; a later
 *     turn evicts the same way;
 *   - the state store evicts the least recently used entry (a hit renews
 *     it); a snapshot over the entry cap is declined_big;
 *   - a guest whose rows do not fit stash_bytes is no guest;
 *   - the pin holds as long a head as pin_bytes holds; the park the rows
 *     up to the newest anchor that fits park_bytes;
 *   - mem_ceiling: caches grow only under it;
 *   - mem_peak: before a prefill the caches give back cheapest first
 *     (state store, body anchors, end anchor, guest stash, park, pin) until
 *     the workspace fits; a prefill that cannot fit is refused with
 *     MOOR_ENOSPACE and nothing changes, and the next fitting request
 *     still resumes. */
#include <jansson.h>
#include <unistd.h>

#include "moor.h"
#include "toy.h"

#define G 16
#define AB 1088 /* an anchor: 1,080 bytes of sections, 64-byte blocks */

static long long st(cache *c, const char *path)
{
	char *s = cache_stats_json(c);
	json_t *r = json_loads(s, 0, NULL);
	free(s);
	REQUIRE(r, "stats json");
	char buf[128];
	snprintf(buf, sizeof buf, "%s", path);
	json_t *o = r;
	for (char *tok = strtok(buf, "."); tok; tok = strtok(NULL, ".")) {
		o = json_object_get(o, tok);
		REQUIRE(o, "no %s in the stats", path);
	}
	long long v = json_is_integer(o) ? json_integer_value(o)
		      : json_is_true(o)	 ? 1
					 : 0;
	json_decref(r);
	return v;
}

static int lines_of(cache *c, const char *tier, uint64_t *out, int max)
{
	char *s = cache_stats_json(c);
	json_t *r = json_loads(s, 0, NULL);
	free(s);
	json_t *a = json_object_get(json_object_get(r, tier), "lines");
	int n = 0;
	for (size_t i = 0; i < json_array_size(a) && n < max; i++)
		out[n++] = (uint64_t)json_integer_value(json_array_get(a, i));
	json_decref(r);
	return n;
}

static int lines_are(cache *c, const uint64_t *want, int n)
{
	uint64_t got[256];
	int m = lines_of(c, "resident", got, 256);
	if (m != n) {
		fprintf(stderr, "lines:");
		for (int i = 0; i < m; i++)
			fprintf(stderr, " %llu", (unsigned long long)got[i]);
		fprintf(stderr, "\n");
		return 0;
	}
	return memcmp(got, want, (size_t)n * sizeof *want) == 0;
}

static void base_cfg(cache_cfg *cfg, const char *name)
{
	cache_cfg_defaults(cfg);
	snprintf(cfg->arena_prefix, sizeof cfg->arena_prefix, "moor-bud-%s-%d",
		 name, (int)getpid());
	cfg->device_bytes = 8ull << 20;
	cfg->host_bytes = 16ull << 20;
	cfg->mem_ceiling = cfg->mem_peak = 1ull << 40;
	cfg->resident_bytes = 10 * AB;
	cfg->pin_every = 64;
	cfg->pin_upto = 256;
	cfg->guest_max = 100;
	cfg->guest_margin = 8;
	cfg->stash_bytes = 1 << 20;
	cfg->pin_bytes = 1 << 20;
	cfg->park_bytes = 1 << 20;
	cfg->store_bytes = 1 << 20;
	cfg->store_entry_bytes = 1 << 20;
}

static void test_resident(void)
{
	cache_cfg cfg;
	base_cfg(&cfg, "res");
	cfg.store_bytes = 0;
	toy_env e;
	toy_open(&e, &cfg, 2048, G);
	toy_turn t;
	int32_t *P = toy_ids(640, 11), *N = toy_ids(400, 12);
	REQUIRE(toy_run(&e, P, 640, "a", 4, &t, 1, "40 lines") == 0, "P");
	uint64_t w1[] = {64, 128, 192, 256, 560, 576, 592, 608, 624, 640};
	CHECK(t.plan.n_slots == 10,
	      "slots only for the 10 the budget keeps "
	      "(%u)",
	      t.plan.n_slots);
	CHECK(lines_are(e.c, w1, 10), "the pin's lines, the newest 4 and the "
				      "highest others");
	/* the next turn: 10 more lines; the old tail goes lowest first */
	int32_t *Pa = toy_cat(P, 640, t.gen, 4);
	int32_t *P2 = toy_cat(Pa, 644, N, 156);
	REQUIRE(toy_run(&e, P2, 800, "a", 3, &t, 1, "10 more") == 0, "P2");
	CHECK(t.plan.start == 643, "resumes at the end anchor");
	uint64_t w2[] = {64, 128, 192, 256, 720, 736, 752, 768, 784, 800};
	CHECK(lines_are(e.c, w2, 10), "after the next turn");
	CHECK(st(e.c, "resident.evictions") == 6, "6 anchors evicted (%lld)",
	      st(e.c, "resident.evictions"));
	toy_close(&e);

	/* 6 anchors: the newest 4, then the pin's lowest lines */
	base_cfg(&cfg, "res6");
	cfg.resident_bytes = 6 * AB;
	cfg.store_bytes = 0;
	toy_open(&e, &cfg, 2048, G);
	REQUIRE(toy_run(&e, P, 640, "a", 4, &t, 1, "6") == 0, "P");
	uint64_t w3[] = {64, 128, 592, 608, 624, 640};
	CHECK(lines_are(e.c, w3, 6), "the pin's lines go highest first");
	toy_close(&e);

	/* 2 anchors: the newest 4 are never evicted */
	base_cfg(&cfg, "res2");
	cfg.resident_bytes = 2 * AB;
	cfg.store_bytes = 0;
	toy_open(&e, &cfg, 2048, G);
	REQUIRE(toy_run(&e, P, 640, "a", 4, &t, 1, "2") == 0, "P");
	uint64_t w4[] = {592, 608, 624, 640};
	CHECK(lines_are(e.c, w4, 4), "the newest 4 stay over the budget");
	toy_close(&e);
	free(P);
	free(N);
	free(Pa);
	free(P2);
}

static void test_store(void)
{
	cache_cfg cfg;
	base_cfg(&cfg, "store");
	cfg.store_sessions = 0;
	cfg.park_bytes = 0;
	cfg.pin_bytes = 0;
	/* an entry of 64 tokens: 1,080 + 64 * 139 = 9,976 -> 10,048; the
	 * store holds two, the cap one of 64 rows and not of 80 */
	uint64_t e64 = 10048;
	cfg.store_bytes = 2 * e64 + 100;
	cfg.store_entry_bytes = e64 + 100;
	toy_env e;
	toy_open(&e, &cfg, 2048, G);
	toy_turn t;
	int32_t *p[5];
	for (int i = 0; i < 5; i++)
		p[i] = toy_ids(70, 20 + (uint64_t)i);
	for (int i = 0; i < 3; i++)
		REQUIRE(toy_run(&e, p[i], 70, "s", 2, &t, 1, "put") == 0, "p%d",
			i);
	CHECK(st(e.c, "store.puts_prefix") == 3, "three prefix snapshots");
	CHECK(st(e.c, "store.entries") == 2 && st(e.c, "store.evictions") == 1,
	      "the store holds two: p0 evicted");
	/* p1 hits (renewed), then p3 evicts p2, the least recently used */
	int32_t *q1 = toy_cat(p[1], 66, p[4], 4);
	REQUIRE(toy_run(&e, q1, 70, "s", 2, &t, 1, "hit p1") == 0, "q1");
	CHECK(t.plan.tier == CACHE_TIER_STORE && t.plan.start == 64,
	      "p1 from the store");
	REQUIRE(toy_run(&e, p[3], 70, "s", 2, &t, 1, "p3") == 0, "p3");
	int32_t *q2 = toy_cat(p[2], 66, p[4], 4);
	REQUIRE(toy_run(&e, q2, 70, "s", 2, &t, 1, "p2 gone") == 0, "q2");
	CHECK(t.plan.tier != CACHE_TIER_STORE, "p2 was evicted (LRU)");
	int32_t *q0 = toy_cat(p[0], 66, p[4], 4);
	REQUIRE(toy_run(&e, q0, 70, "s", 2, &t, 1, "p0 gone") == 0, "q0");
	CHECK(t.plan.tier != CACHE_TIER_STORE, "p0 was evicted");
	/* over the cap at its only line: declined_big */
	long long big = st(e.c, "store.declined_big");
	int32_t *r = toy_ids(100, 30);
	REQUIRE(toy_run(&e, r, 100, "s", 2, &t, 1, "big") == 0, "big");
	CHECK(st(e.c, "store.declined_big") == big, "64 fits, not declined");
	int32_t *r2 = toy_cat(r, 80, p[4], 30);
	r2[80] = (r[80] + 1) % TOY_V;
	REQUIRE(toy_run(&e, r2, 110, "s", 2, &t, 1, "big2") == 0, "big2");
	CHECK(st(e.c, "store.declined_big") == big + 1,
	      "a prefill from 80 whose lines are over the cap: declined_big");
	for (int i = 0; i < 5; i++)
		free(p[i]);
	free(q0);
	free(q1);
	free(q2);
	free(r);
	free(r2);
	toy_close(&e);
}

static void test_stash_pin_park(void)
{
	cache_cfg cfg;
	base_cfg(&cfg, "spp");
	cfg.resident_bytes = 100 * AB;
	cfg.store_bytes = 0;
	/* a stash of 40 rows; a pin of four blocks (of the grid's 16 rows,
	 * 2,240 bytes) and one anchor; a park of four blocks and two anchors */
	cfg.stash_bytes = 40 * 139;
	cfg.pin_bytes = 4 * 2240 + AB + 100;
	cfg.park_bytes = 4 * 2240 + 2 * AB;
	toy_env e;
	toy_open(&e, &cfg, 2048, G);
	toy_turn t;
	int32_t *P = toy_ids(400, 40), *g = toy_ids(50, 41);
	REQUIRE(toy_run(&e, P, 400, "a", 3, &t, 1, "P") == 0, "P");
	/* 30 tokens + 2 + 16 margin = 48 rows > 40: no guest */
	toy_part(g, P, 0);
	REQUIRE(toy_run(&e, g, 30, "a", 2, &t, 1, "guest?") == 0, "g");
	CHECK(!t.plan.guest, "the stash cannot hold it: no guest");
	CHECK(st(e.c, "stash.declined") == 1, "declined");
	/* a same-session compaction: pins rows [0, 64) and the anchor at 64
	 * (128 rows and two anchors would not fit) */
	REQUIRE(toy_run(&e, P, 400, "a", 3, &t, 1, "P again") == 0, "P");
	REQUIRE(toy_run(&e, g, 50, "a", 2, &t, 1, "compaction") == 0, "c");
	CHECK(st(e.c, "pin.tokens") == 64,
	      "as long a head as pin_bytes "
	      "holds (%lld)",
	      st(e.c, "pin.tokens"));
	uint64_t l[8];
	int n = lines_of(e.c, "pin", l, 8);
	CHECK(n == 1 && l[0] == 64, "one pinned anchor at 64 (%d)", n);
	/* another session parts from a cold prompt at 0: the park holds the
	 * rows up to the newest anchor that fits */
	int32_t *Q = toy_ids(400, 42), *B = toy_ids(320, 43);
	toy_part(Q, g, 0);
	toy_part(B, Q, 0);
	REQUIRE(toy_run(&e, Q, 400, "a", 3, &t, 1, "Q") == 0, "Q");
	CHECK(t.plan.start == 0, "Q is cold");
	REQUIRE(toy_run(&e, B, 320, "b", 2, &t, 1, "B") == 0, "B");
	CHECK(st(e.c, "park.parks") == 1, "parked");
	n = lines_of(e.c, "park", l, 8);
	/* 64 rows would need 4 blocks and 4 anchors; 48 take 3 and 3 */
	CHECK(st(e.c, "park.tokens") == 48 && n == 3,
	      "the rows up to the newest anchor that fits (%lld, %d)",
	      st(e.c, "park.tokens"), n);
	free(P);
	free(g);
	free(Q);
	free(B);
	toy_close(&e);
}

static void test_ceiling(void)
{
	cache_cfg cfg;
	base_cfg(&cfg, "ceil");
	cfg.store_bytes = 0;
	toy_env e;
	toy_open(&e, &cfg, 2048, G);
	uint64_t live = (uint64_t)st(e.c, "memory.held");
	toy_close(&e);
	cfg.mem_ceiling = live + 3 * AB;
	toy_open(&e, &cfg, 2048, G);
	toy_turn t;
	int32_t *P = toy_ids(200, 50);
	REQUIRE(toy_run(&e, P, 200, "a", 3, &t, 1, "ceiling") == 0, "P");
	CHECK(t.plan.n_slots == 3, "3 slots under the ceiling (%u)",
	      t.plan.n_slots);
	CHECK((uint64_t)st(e.c, "memory.held") <= cfg.mem_ceiling,
	      "held under the ceiling");
	CHECK(st(e.c, "end.have") == 1 && st(e.c, "resident.anchors") == 2,
	      "the end anchor took an anchor's room (more valuable)");
	free(P);
	toy_close(&e);
}

/* the bytes the memory policy counts, by level */
static long long lv(cache *c, const char *t)
{
	char p[64];
	snprintf(p, sizeof p, "%s.bytes", t);
	return st(c, p);
}

static void set_ws(toy_env *e, uint64_t floor)
{
	char err[MOOR_ERRLEN];
	cache_hello_out ho;
	e->lay->workspace_floor = floor;
	REQUIRE(cache_hello(e->c, e->lay, &ho, err) == 0 && ho.adopted,
		"re-hello: %s", err);
}

static void test_policy(void)
{
	cache_cfg cfg;
	base_cfg(&cfg, "pol");
	cfg.mem_ceiling = 1ull << 40;
	cfg.mem_peak = 64ull << 20;
	cfg.resident_bytes = 40 * AB;
	cfg.guest_max = 300;
	cfg.store_sessions = 0;
	toy_env e;
	toy_open(&e, &cfg, 2048, G);
	toy_turn t;
	int32_t *P = toy_ids(400, 60), *C = toy_ids(300, 61),
		*D = toy_ids(1300, 62), *N = toy_ids(300, 63);
	toy_part(C, P, 0);
	toy_part(D, C, 0);
	REQUIRE(toy_run(&e, P, 400, "a", 3, &t, 1, "P") == 0, "P");
	REQUIRE(toy_run(&e, C, 300, "a", 3, &t, 1, "C pins P") == 0, "C");
	REQUIRE(toy_run(&e, D, 1300, "b", 3, &t, 1, "D parks C") == 0, "D");
	CHECK(lv(e.c, "store") && lv(e.c, "resident") && lv(e.c, "end") &&
		  lv(e.c, "park") && lv(e.c, "pin"),
	      "every level holds something");
	uint64_t peak = cfg.mem_peak, held = (uint64_t)st(e.c, "memory.held");
	uint64_t first =
	    (uint64_t)(lv(e.c, "store") + lv(e.c, "resident") + lv(e.c, "end"));

	/* 1. a guest whose workspace fits once the store, the body anchors
	 * and the end anchor are given back, but not with its stash: the
	 * stash is the level that gives; the park and the pin stay */
	int32_t *Gs = toy_cat(D, 260, N, 10);
	toy_part(Gs, D, 260);
	set_ws(&e, peak - held + first);
	REQUIRE(toy_run(&e, Gs, 270, "b", 2, &t, 1, "stash level") == 0, "G");
	CHECK(!t.plan.guest, "the stash was given back: no guest");
	CHECK(st(e.c, "memory.shed.store") >= 1 &&
		  st(e.c, "memory.shed.anchors") >= 1 &&
		  st(e.c, "memory.shed.end") == 1 &&
		  st(e.c, "memory.shed.stash") == 1,
	      "store, anchors, end, then the stash");
	CHECK(st(e.c, "memory.shed.park") == 0 &&
		  st(e.c, "memory.shed.pin") == 0 && lv(e.c, "park") &&
		  lv(e.c, "pin"),
	      "the park and the pin stay");

	/* 2. a prefill that needs one byte more than the store, anchors and
	 * end hold: the park goes, the pin stays */
	set_ws(&e, 0);
	int32_t *R0 = toy_ids(500, 64);
	toy_part(R0, Gs, 0);
	REQUIRE(toy_run(&e, R0, 500, "b", 3, &t, 1, "refill") == 0, "R0");
	held = (uint64_t)st(e.c, "memory.held");
	first =
	    (uint64_t)(lv(e.c, "store") + lv(e.c, "resident") + lv(e.c, "end"));
	long long shed_park = st(e.c, "memory.shed.park");
	int32_t *Ra = toy_cat(R0, 500, t.gen, 3);
	int32_t *R = toy_cat(Ra, 503, N, 100);
	set_ws(&e, peak - held + first + 1);
	REQUIRE(toy_run(&e, R, 603, "b", 3, &t, 1, "park level") == 0, "R");
	CHECK(st(e.c, "memory.shed.park") == shed_park + 1 && !lv(e.c, "park"),
	      "the park was given back");
	CHECK(st(e.c, "memory.shed.pin") == 0 && lv(e.c, "pin"),
	      "the pin stays");

	/* 3. a prefill that does not fit with every cache given back: refused,
	 * and nothing changes */
	held = (uint64_t)st(e.c, "memory.held");
	uint64_t all =
	    (uint64_t)(lv(e.c, "store") + lv(e.c, "resident") + lv(e.c, "end") +
		       lv(e.c, "stash") + lv(e.c, "park") + lv(e.c, "pin"));
	set_ws(&e, peak - (held - all) + 1);
	char *before = cache_stats_json(e.c);
	int32_t *Ta = toy_cat(R, 603, t.gen, 3);
	int32_t *T2 = toy_cat(Ta, 606, N + 100, 50);
	cache_req rq = {.ids = T2, .n = 656, .session = "b", .max_tokens = 3};
	cache_plan_out plan;
	char err[MOOR_ERRLEN] = "";
	CHECK(cache_plan(e.c, &rq, &plan, err) == MOOR_ENOSPACE,
	      "refused with MOOR_ENOSPACE");
	CHECK(strstr(err, "mem_peak") != NULL, "a clear message: %s", err);
	char *after = cache_stats_json(e.c);
	json_t *jb = json_loads(before, 0, NULL),
	       *ja = json_loads(after, 0, NULL);
	const char *keep[] = {"resident", "end", "pin", "store", "park"};
	for (int i = 0; i < 5; i++)
		CHECK(json_equal(json_object_get(jb, keep[i]),
				 json_object_get(ja, keep[i])),
		      "%s unchanged by the refusal", keep[i]);
	CHECK(st(e.c, "memory.refused") == 1, "counted");
	json_decref(jb);
	json_decref(ja);
	free(before);
	free(after);

	/* 4. the next request that fits still resumes */
	set_ws(&e, 0);
	REQUIRE(toy_run(&e, T2, 656, "b", 3, &t, 1, "after the refusal") == 0,
		"T2");
	CHECK(t.plan.start == 605 && t.plan.tier == CACHE_TIER_END,
	      "resumes at the end anchor: %s %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	free(P);
	free(C);
	free(D);
	free(N);
	free(Gs);
	free(R0);
	free(Ra);
	free(R);
	free(Ta);
	free(T2);
	toy_close(&e);
}

int main(void)
{
	moor_log_level = getenv("MOOR_DEBUG") ? MOOR_LOG_DEBUG : MOOR_LOG_ERROR;
	test_resident();
	test_store();
	test_stash_pin_park();
	test_ceiling();
	test_policy();
	return t_done("test_budgets");
}
