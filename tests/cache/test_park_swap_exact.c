/* test_park_swap_exact: two sessions used in turn (A, B, A, B) share a head
 * and nothing after it; each switch parks the rows the other would
 * overwrite and swaps them back a block at a time, bit for bit.
 *   - A1 (session A): head H (300 tokens) + A's own 700;
 *   - B1 (session B): H + B's 600 resumes at 256 (the last anchor of the
 *     head) and parks A's rows [256, end of A's answer) with its newest
 *     anchors and its end anchor;
 *   - A2: A1's prompt to 950 + new tokens shares more with the park than
 *     with B's rows: the park is swapped in block by block (B parked in
 *     turn) and A2 resumes at 896, equal to a cold prefill of A2 (logits,
 *     sections, every row [0, n): the head in place and every swapped
 *     block);
 *   - B2: B1's prompt to 850 + new tokens swaps B back, resumes at 768,
 *     equal to a cold prefill too;
 *   - a third session gives the park up. */
#include "eng_harness.h"

int main(void)
{
	moor_log_level = MOOR_LOG_WARN;
	cache_cfg cfg;
	h_cfg(&cfg, "park");
	harness h;
	h_open(&h, "f32_untied", 128, 2048, &cfg);
	int V = h.V;
	int32_t *H = h_ids(300, V, 31), *a = h_ids(700, V, 32),
		*b = h_ids(600, V, 33), *N = h_ids(400, V, 34);
	int32_t *A1 = h_cat(H, 300, a, 700), *B1 = h_cat(H, 300, b, 600);
	h_part(B1, A1, 300, V);
	h_turn t;

	REQUIRE(h_turn_run(&h, A1, 1000, "A", 4, &t) == 0, "A1");
	state_free(&t.st);
	REQUIRE(h_turn_run(&h, B1, 900, "B", 4, &t) == 0, "B1");
	CHECK(t.plan.tier == CACHE_TIER_RESIDENT && t.plan.start == 256,
	      "B1 resumes at 256: %s at %llu", cache_tier_name(t.plan.tier),
	      (unsigned long long)t.plan.start);
	h_exact(&h, B1, 900, &t, "B1");
	state_free(&t.st);
	CHECK(h_stat(h.c, "park.parks") == 1, "A parked");
	CHECK(h_stat(h.c, "park.base") == 256, "parked from 256");
	CHECK(h_stat(h.c, "park.tokens") == 1003,
	      "A parked up to its end anchor (1003), got %lld",
	      h_stat(h.c, "park.tokens"));
	CHECK(h_stat(h.c, "park.end") == 1, "the end anchor went along");
	/* with its marks: the end alignment's record of A (cache_end_get)
	 * is the park's, with A's generation region [1000, 1003); B's copy
	 * gets the resident end with B's region [900, 903) */
	cache_end_out eo;
	cache_end_get(h.c, A1, 1000, &eo);
	CHECK(eo.tier == CACHE_TIER_PARK && eo.end == 1003 &&
		  eo.common == 1000 && eo.n_marks == 1 &&
		  eo.marks[0].start == 1000 && eo.marks[0].len == 3 &&
		  eo.marks[0].kind == CACHE_MARK_GEN,
	      "A's record: tier %d end %llu common %llu marks %u",
	      eo.tier, (unsigned long long)eo.end,
	      (unsigned long long)eo.common, eo.n_marks);
	cache_end_get(h.c, B1, 900, &eo);
	CHECK(eo.tier == CACHE_TIER_END && eo.end == 903 && eo.n_marks == 1 &&
		  eo.marks[0].start == 900 && eo.marks[0].len == 3,
	      "B's record: tier %d end %llu marks %u", eo.tier,
	      (unsigned long long)eo.end, eo.n_marks);
	uint64_t lines[16];
	int nl = h_lines(h.c, "park", lines, 16);
	CHECK(nl == 4 && lines[0] == 640 && lines[2] == 896 && lines[3] == 1003,
	      "the newest 3 grid anchors and the end (%d)", nl);

	int32_t *A2 = h_cat(A1, 950, N, 150);
	h_part(A2, A1, 950, V);
	REQUIRE(h_turn_run(&h, A2, 1100, "A", 4, &t) == 0, "A2");
	CHECK(t.plan.tier == CACHE_TIER_PARK && t.plan.start == 896,
	      "A2 resumes from the park at 896: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	h_exact(&h, A2, 1100, &t, "A2 (swapped back)");
	state_free(&t.st);
	CHECK(h_stat(h.c, "park.park_hits") == 1, "a park hit");
	/* the swap brought A's marks back with its rows and parked B's */
	cache_end_get(h.c, B1, 900, &eo);
	CHECK(eo.tier == CACHE_TIER_PARK && eo.end == 903 && eo.n_marks == 1 &&
		  eo.marks[0].start == 900,
	      "B's record after the swap: tier %d end %llu marks %u", eo.tier,
	      (unsigned long long)eo.end, eo.n_marks);
	CHECK(h_stat(h.c, "park.parks") == 2, "B parked by the swap");
	CHECK(h_stat(h.c, "park.tokens") == 903,
	      "B parked to its end, got "
	      "%lld",
	      h_stat(h.c, "park.tokens"));
	CHECK(h_stat(h.c, "park.blocks_swapped") == 6,
	      "6 blocks of 128 rows over [256, 1003), got %lld",
	      h_stat(h.c, "park.blocks_swapped"));

	int32_t *B2 = h_cat(B1, 850, N + 200, 150);
	h_part(B2, B1, 850, V);
	REQUIRE(h_turn_run(&h, B2, 1000, "B", 4, &t) == 0, "B2");
	CHECK(t.plan.tier == CACHE_TIER_PARK && t.plan.start == 768,
	      "B2 resumes from the park at 768: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	h_exact(&h, B2, 1000, &t, "B2 (swapped back)");
	state_free(&t.st);
	CHECK(h_stat(h.c, "park.park_hits") == 2, "two park hits");

	/* A3 comes back once more: the park holds A2's rows now */
	int32_t *A3 = h_cat(A2, 1000, N + 300, 100);
	h_part(A3, A2, 1000, V);
	REQUIRE(h_turn_run(&h, A3, 1100, "A", 4, &t) == 0, "A3");
	CHECK(t.plan.tier == CACHE_TIER_PARK && t.plan.start == 896,
	      "A3 resumes from the park at 896: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	h_exact(&h, A3, 1100, &t, "A3 (swapped back again)");
	state_free(&t.st);

	/* a third session: B's park is given up for A's rows */
	int32_t *C = h_cat(H, 300, N, 400);
	h_part(C, A3, 300, V);
	REQUIRE(h_turn_run(&h, C, 700, "C", 3, &t) == 0, "C");
	state_free(&t.st);
	char *s = NULL;
	(void)s;
	CHECK(h_stat(h.c, "park.tokens") > 1000, "A parked, B given up");

	free(H);
	free(a);
	free(b);
	free(N);
	free(A1);
	free(B1);
	free(A2);
	free(B2);
	free(A3);
	free(C);
	h_close(&h);
	return t_done("test_park_swap_exact");
}
