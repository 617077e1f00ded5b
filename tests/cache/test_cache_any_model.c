/* test_cache_any_model: a made-up third architecture (toy.h: two sections
 * of odd sizes, three views of 2-, 4- and 1-byte elements on token axes 1,
 * 0 and 2) through every cache with no edit in cached/: the resident prefix,
 * the end anchor, the guest stash, the pin, the park (A, B, A, B), the state
 * store's prefix and session snapshots, and an engine restart (hello with
 * the same layout: adopted; another fingerprint: every cache dropped). Each
 * turn's state (both sections, every view's rows [0, n)) and its greedy
 * tokens equal a cold toy run's (memcmp). */
#include <unistd.h>

#include "moor.h"
#include "toy.h"

#define G 32

static long long stat_of(cache *c, const char *tier, const char *name)
{
	char *s = cache_stats_json(c);
	REQUIRE(s, "stats");
	/* "tier":{..."name":123 : a small scan, the test's own */
	char key[96];
	snprintf(key, sizeof key, "\"%s\":{", tier);
	char *p = strstr(s, key);
	REQUIRE(p, "no %s", tier);
	snprintf(key, sizeof key, "\"%s\":", name);
	char *q = strstr(p, key);
	REQUIRE(q, "no %s.%s", tier, name);
	long long v = strtoll(q + strlen(key), NULL, 10);
	free(s);
	return v;
}

int main(void)
{
	moor_log_level = getenv("MOOR_DEBUG") ? MOOR_LOG_DEBUG : MOOR_LOG_WARN;
	cache_cfg cfg;
	cache_cfg_defaults(&cfg);
	snprintf(cfg.arena_prefix, sizeof cfg.arena_prefix, "moor-any-%d",
		 (int)getpid());
	cfg.device_bytes = 16ull << 20;
	cfg.host_bytes = 32ull << 20;
	cfg.mem_ceiling = cfg.mem_peak = 1ull << 40;
	cfg.resident_bytes = 40 * 1088;
	cfg.pin_every = 4 * G;
	cfg.pin_upto = 8 * G;
	cfg.guest_max = 40;
	cfg.guest_margin = 8;
	cfg.stash_bytes = 1 << 20;
	cfg.pin_bytes = 4 << 20;
	cfg.park_bytes = 4 << 20;
	cfg.store_bytes = 4 << 20;
	cfg.store_entry_bytes = 30000; /* sections + 208 rows */
	toy_env e;
	toy_open(&e, &cfg, 1024, G);
	toy_turn t;

	/* resident prefix */
	int32_t *A = toy_ids(300, 1), *N = toy_ids(600, 2);
	REQUIRE(toy_run(&e, A, 300, "a", 4, &t, 1, "A cold") == 0, "A");
	CHECK(t.plan.start == 0 && t.plan.n_slots == 9, "cold, 9 slots (%u)",
	      t.plan.n_slots);
	int32_t *P2 = toy_cat(A, 150, N, 100);
	toy_part(P2, A, 150);
	REQUIRE(toy_run(&e, P2, 250, "a", 4, &t, 1, "resident") == 0, "P2");
	CHECK(t.plan.tier == CACHE_TIER_RESIDENT && t.plan.start == 128,
	      "resident at 128: %s %llu", cache_tier_name(t.plan.tier),
	      (unsigned long long)t.plan.start);

	/* end anchor: the answer sent back, then a message */
	int32_t *P3a = toy_cat(P2, 250, t.gen, 4);
	int32_t *P3 = toy_cat(P3a, 254, N + 100, 60);
	REQUIRE(toy_run(&e, P3, 314, "a", 4, &t, 1, "end anchor") == 0, "P3");
	CHECK(t.plan.tier == CACHE_TIER_END && t.plan.start == 253,
	      "end anchor at 253: %s %llu", cache_tier_name(t.plan.tier),
	      (unsigned long long)t.plan.start);

	/* the guest stash */
	int32_t *Gs = toy_ids(30, 3);
	toy_part(Gs, P3, 0);
	REQUIRE(toy_run(&e, Gs, 30, "a", 4, &t, 1, "guest") == 0, "guest");
	CHECK(t.plan.guest, "a guest");
	int32_t *P4 = toy_cat(P3, 300, N + 200, 40);
	toy_part(P4, P3, 300);
	REQUIRE(toy_run(&e, P4, 340, "a", 4, &t, 1, "after the guest") == 0,
		"P4");
	CHECK(t.plan.start == 288, "after the guest: 288, got %llu",
	      (unsigned long long)t.plan.start);

	/* the pin: a same-session compaction, then the head again */
	int32_t *C = toy_ids(200, 4);
	toy_part(C, P4, 0);
	REQUIRE(toy_run(&e, C, 200, "a", 3, &t, 1, "compaction") == 0, "C");
	/* (P2, parting at 150 inside A's head of 256, pinned A's head) */
	CHECK(stat_of(e.c, "pin", "pins") == 2, "pinned");
	CHECK(stat_of(e.c, "pin", "tokens") == 256, "a head of 256");
	/* parts at 150: under the store's snapshots of 192 */
	int32_t *P5 = toy_cat(P4, 150, N + 300, 100);
	toy_part(P5, P4, 150);
	REQUIRE(toy_run(&e, P5, 250, "a", 3, &t, 1, "pin") == 0, "P5");
	CHECK(t.plan.tier == CACHE_TIER_PIN && t.plan.start == 128,
	      "the pin at 128: %s %llu", cache_tier_name(t.plan.tier),
	      (unsigned long long)t.plan.start);

	/* the park: A, B, A, B */
	int32_t *B = toy_cat(P5, 70, N + 350, 200);
	toy_part(B, P5, 70);
	REQUIRE(toy_run(&e, B, 270, "b", 3, &t, 1, "B") == 0, "B");
	CHECK(stat_of(e.c, "park", "parks") == 1, "A parked");
	int32_t *A2 = toy_cat(P5, 240, N + 400, 50);
	toy_part(A2, P5, 240);
	REQUIRE(toy_run(&e, A2, 290, "a", 3, &t, 1, "A back") == 0, "A2");
	CHECK(t.plan.tier == CACHE_TIER_PARK && t.plan.start == 224,
	      "the park at 224: %s %llu", cache_tier_name(t.plan.tier),
	      (unsigned long long)t.plan.start);
	int32_t *B2 = toy_cat(B, 260, N + 450, 30);
	toy_part(B2, B, 260);
	REQUIRE(toy_run(&e, B2, 290, "b", 3, &t, 1, "B back") == 0, "B2");
	CHECK(t.plan.tier == CACHE_TIER_PARK && t.plan.start == 256,
	      "the park at 256: %s %llu", cache_tier_name(t.plan.tier),
	      (unsigned long long)t.plan.start);
	CHECK(stat_of(e.c, "park", "park_hits") == 2, "two park hits");

	/* the state store: a prefix snapshot at 192 (the longest line under
	 * the cap) and a session snapshot of a short chat */
	int32_t *S = toy_ids(260, 5);
	toy_part(S, B2, 0);
	REQUIRE(toy_run(&e, S, 260, "s", 3, &t, 1, "S") == 0, "S");
	int32_t *Q = toy_ids(100, 6);
	toy_part(Q, S, 0);
	REQUIRE(toy_run(&e, Q, 100, "q", 5, &t, 1, "short chat") == 0, "Q");
	int32_t *Qa = toy_cat(Q, 100, t.gen, 5);
	int32_t *U = toy_ids(300, 7);
	toy_part(U, Q, 0);
	REQUIRE(toy_run(&e, U, 300, "u", 3, &t, 1, "other") == 0, "U");
	int32_t *S2 = toy_cat(S, 200, N, 40);
	toy_part(S2, S, 200);
	REQUIRE(toy_run(&e, S2, 240, "s", 3, &t, 1, "store prefix") == 0, "S2");
	CHECK(t.plan.tier == CACHE_TIER_STORE && t.plan.start == 192,
	      "the store at 192: %s %llu", cache_tier_name(t.plan.tier),
	      (unsigned long long)t.plan.start);
	int32_t *Q2 = toy_cat(Qa, 105, N + 50, 20);
	REQUIRE(toy_run(&e, Q2, 125, "q", 3, &t, 1, "store session") == 0,
		"Q2");
	CHECK(t.plan.tier == CACHE_TIER_STORE && t.plan.start == 104,
	      "the session snapshot at 104: %s %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);

	/* an engine restart: the same layout is adopted */
	char err[MOOR_ERRLEN];
	cache_hello_out ho;
	REQUIRE(cache_hello(e.c, e.lay, &ho, err) == 0, "hello: %s", err);
	CHECK(ho.adopted && ho.resident_len == 127,
	      "adopted, 127 tokens "
	      "(%llu)",
	      (unsigned long long)ho.resident_len);
	CHECK(!memcmp(ho.sec_off, e.ho.sec_off, sizeof ho.sec_off) &&
		  !memcmp(ho.view_off, e.ho.view_off, sizeof ho.view_off),
	      "the same live buffers");
	int32_t *Q3a = toy_cat(Q2, 125, t.gen, 3);
	int32_t *Q3 = toy_cat(Q3a, 127, N + 80, 10);
	REQUIRE(toy_run(&e, Q3, 137, "q", 3, &t, 1, "after the restart") == 0,
		"Q3");
	CHECK(t.plan.tier == CACHE_TIER_END && t.plan.start == 127,
	      "the end anchor survives the restart: %s %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	/* another fingerprint: everything goes */
	cache_layout *l2 = malloc(sizeof *l2);
	REQUIRE(l2, "oom");
	toy_layout(l2, 1024, G, 9);
	REQUIRE(cache_hello(e.c, l2, &ho, err) == 0, "hello: %s", err);
	CHECK(!ho.adopted && ho.resident_len == 0, "not adopted");
	CHECK(stat_of(e.c, "store", "entries") == 0 &&
		  stat_of(e.c, "resident", "anchors") == 0 &&
		  stat_of(e.c, "pin", "tokens") == 0 &&
		  stat_of(e.c, "park", "tokens") == 0,
	      "every cache dropped");
	toy_seq_arena(&e.s, e.dev, &ho);
	e.ho = ho;
	REQUIRE(toy_run(&e, Q3, 137, "q", 3, &t, 1, "new fingerprint") == 0,
		"Q3 again");
	CHECK(t.plan.start == 0, "cold after a new fingerprint");
	free(l2);

	free(A);
	free(N);
	free(P2);
	free(P3a);
	free(P3);
	free(Gs);
	free(P4);
	free(C);
	free(P5);
	free(B);
	free(A2);
	free(B2);
	free(S);
	free(Q);
	free(Qa);
	free(U);
	free(S2);
	free(Q2);
	free(Q3a);
	free(Q3);
	toy_close(&e);
	return t_done("test_cache_any_model");
}
