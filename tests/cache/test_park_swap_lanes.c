/* test_park_swap_lanes: the park's swap on two lanes of the mover (park.c:
 * OUT copies the rows in place out, IN copies the parked rows in, the
 * CUDA mover's two streams) keeps every byte read before it is written,
 * under any order the marks allow. On CPU, through a mover that queues
 * every copy on its lane and runs the queues only at sync(), in an order
 * the marks and afters allow and no further (defer_mover.h, dl_): lane 0
 * first, OUT first, IN first, and random orders. In each, two sessions
 * used in turn (A, B, A, B, A, as in test_park_swap_exact, the head 150
 * tokens: the park's base 128) swap the park three times, each resume
 * equal to a cold prefill bit for bit, the first right after a guest's
 * stash was put back (lane 0 writes B's rows from 128, which the guest
 * wrote over, just before OUT reads them), the
 * swap's copies on both lanes (with two bounces: the host arena has room
 * for the second). The CUDA run of test_park_swap_exact covers the
 * streams. */
#include "cache_int.h"
#include "defer_mover.h"
#include "eng_harness.h"

/* A's and B's turns through the lane mover d. */
static void run(dlanes *d, const char *what)
{
	cache_cfg cfg;
	h_cfg(&cfg, "plane");
	cfg.guest_max = 250;
	cfg.guest_margin = 32;
	harness h;
	h_open(&h, "f32_untied", 128, 2048, &cfg);
	arena_mover mv = dl_mover(d);
	/* as on CUDA (device memory, a host arena registered for DMA): a
	 * block released keeps its bytes until it is written again, so a
	 * copy queued before its release still reads them */
	arena_set_punch(h.c->dev, 0);
	arena_set_punch(h.c->host, 0);
	h.c->mv = &mv;
	int V = h.V;
	int32_t *H = h_ids(150, V, 31), *a = h_ids(850, V, 32),
		*b = h_ids(750, V, 33), *N = h_ids(400, V, 34);
	int32_t *A1 = h_cat(H, 150, a, 850), *B1 = h_cat(H, 150, b, 750);
	h_part(B1, A1, 150, V);
	int32_t *G = h_cat(B1, 140, N + 320, 80);
	h_part(G, B1, 140, V);
	int32_t *A2 = h_cat(A1, 950, N, 150);
	h_part(A2, A1, 950, V);
	int32_t *B2 = h_cat(B1, 850, N + 200, 150);
	h_part(B2, B1, 850, V);
	int32_t *A3 = h_cat(A2, 1000, N + 300, 100);
	h_part(A3, A2, 1000, V);
	const int32_t *p[6] = {A1, B1, G, A2, B2, A3};
	const int64_t n[6] = {1000, 900, 220, 1100, 1000, 1100};
	const char *ses[6] = {"A", "B", "G", "A", "B", "A"};
	uint64_t start[6] = {0, 128, 128, 896, 768, 896};
	int tier[6] = {CACHE_TIER_NONE, CACHE_TIER_RESIDENT,
		       CACHE_TIER_RESIDENT, CACHE_TIER_PARK,
		       CACHE_TIER_PARK, CACHE_TIER_PARK};
	for (int i = 0; i < 6; i++) {
		h_turn t;
		REQUIRE(h_turn_run(&h, p[i], n[i], ses[i], 4, &t) == 0,
			"%s: turn %d", what, i);
		/* the sync cached's reply to the COMMIT makes */
		REQUIRE(cache_sync(h.c) == 0, "%s: sync", what);
		CHECK(t.plan.tier == tier[i] && t.plan.start == start[i],
		      "%s: turn %d resumes from %s at %llu", what, i,
		      cache_tier_name(t.plan.tier),
		      (unsigned long long)t.plan.start);
		if (i == 2)
			CHECK(t.plan.guest, "%s: a guest", what);
		if (i >= 3) {
			char w[96];
			snprintf(w, sizeof w, "%s: turn %d (swapped)", what, i);
			h_exact(&h, p[i], n[i], &t, w);
		}
		state_free(&t.st);
	}
	CHECK(h_stat(h.c, "park.park_hits") == 3, "%s: three swaps", what);
	CHECK(d->marks >= 3 * 2 * 6 && d->afters >= 3 * 2 * 6,
	      "%s: the swaps ran on lanes (%llu marks, %llu afters)", what,
	      (unsigned long long)d->marks, (unsigned long long)d->afters);
	h.c->mv = &arena_mover_memcpy; /* mv goes out of scope */
	free(H);
	free(a);
	free(b);
	free(N);
	free(G);
	free(A1);
	free(B1);
	free(A2);
	free(B2);
	free(A3);
	h_close(&h);
}

int main(void)
{
	moor_log_level = MOOR_LOG_WARN;
	if (tb_cuda()) {
		printf("test_park_swap_lanes: skipped: a CPU test (the lane "
		       "mover copies host memory)\n");
		return 77;
	}
	static const int picks[3][ARENA_LANES] = {
	    {0, 1, 2}, /* lane 0 first: its later copies as early as allowed */
	    {1, 2, 0}, /* OUT first: out into a bounce before IN read it? */
	    {2, 1, 0}, /* IN first: rows in before OUT read them? */
	};
	static const char *const names[3] = {"lane 0 first", "OUT first",
					     "IN first"};
	for (int k = 0; k < 3; k++) {
		dlanes d = {0};
		memcpy(d.pick, picks[k], sizeof d.pick);
		run(&d, names[k]);
		dl_free(&d);
	}
	for (uint32_t seed = 1; seed <= 4; seed++) {
		dlanes d = {.seed = seed * 2654435761u};
		char w[32];
		snprintf(w, sizeof w, "random order %u", seed);
		run(&d, w);
		dl_free(&d);
	}
	return t_done("test_park_swap_lanes");
}
