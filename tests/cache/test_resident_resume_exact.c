/* test_resident_resume_exact: the resident prefix resumes at the largest
 * anchor at or below the shared length (and below n), and what it computes
 * equals a cold prefill bit for bit: the logits of the prefill, every GDN
 * state and conv tail, every KV row [0, n), the greedy tokens.
 *   - turn 1 (prompt A, 5.5 grids and 7 tokens) is cold and leaves an
 *     anchor at every grid line of its prefill;
 *   - turn 2, A[:448] + new tokens, resumes at 384;
 *   - turn 3 continues turn 2's prompt and parts from its answer: resumes
 *     at turn 2's last grid anchor;
 *   - turn 4 is A[:768] exactly (an anchor at 768): resumes at 640, so that
 *     one token at least is forwarded;
 *   - the bf16 model resumes as exactly. */
#include "eng_harness.h"

static void run(const char *model)
{
	cache_cfg cfg;
	h_cfg(&cfg, "resident");
	harness h;
	h_open(&h, model, 128, 2048, &cfg);
	int V = h.V;
	int64_t nA = 5 * 128 + 64 + 7;
	int32_t *A = h_ids(nA, V, 1), *N = h_ids(1200, V, 2);
	h_turn t;

	REQUIRE(h_turn_run(&h, A, nA, NULL, 4, &t) == 0, "turn 1");
	CHECK(t.plan.start == 0 && t.plan.tier == CACHE_TIER_NONE,
	      "turn 1 is cold: start %llu tier %d",
	      (unsigned long long)t.plan.start, t.plan.tier);
	CHECK(t.plan.n_slots == 5, "turn 1: 5 slots (128 .. 640), got %u",
	      t.plan.n_slots);
	h_exact(&h, A, nA, &t, "turn 1 (cold, in the arena)");
	state_free(&t.st);
	CHECK(h_stat(h.c, "resident.anchors") == 5, "5 anchors");

	int64_t k = 448, n2 = 900;
	int32_t *P2 = h_cat(A, k, N, n2 - k);
	h_part(P2, A, k, V);
	REQUIRE(h_turn_run(&h, P2, n2, NULL, 4, &t) == 0, "turn 2");
	CHECK(t.plan.start == 384 && t.plan.tier == CACHE_TIER_RESIDENT,
	      "turn 2 resumes at 384: start %llu tier %s",
	      (unsigned long long)t.plan.start, cache_tier_name(t.plan.tier));
	CHECK(t.plan.taint == CACHE_NO_TAINT, "turn 2 is clean");
	h_exact(&h, P2, n2, &t, "turn 2 (resumed at 384)");
	state_free(&t.st);

	int64_t n3 = 1100;
	int32_t *P3 = h_cat(P2, n2, N + 300, n3 - n2);
	/* parts from the answer at its first token */
	if (P3[n2] == t.gen[0])
		P3[n2] = (t.gen[0] + 1) % V;
	REQUIRE(h_turn_run(&h, P3, n3, NULL, 4, &t) == 0, "turn 3");
	CHECK(t.plan.start == 896 && t.plan.tier == CACHE_TIER_RESIDENT,
	      "turn 3 resumes at 896: start %llu tier %s",
	      (unsigned long long)t.plan.start, cache_tier_name(t.plan.tier));
	h_exact(&h, P3, n3, &t, "turn 3 (resumed at 896)");
	state_free(&t.st);

	int64_t n4 = 768;
	REQUIRE(h_turn_run(&h, P3, n4, NULL, 3, &t) == 0, "turn 4");
	CHECK(t.plan.start == 640,
	      "turn 4 (a prompt ending on an anchor) "
	      "resumes at 640, got %llu",
	      (unsigned long long)t.plan.start);
	h_exact(&h, P3, n4, &t, "turn 4 (resumed at 640)");
	state_free(&t.st);
	CHECK(h_stat(h.c, "resident.hits") == 3, "3 resident hits, got %lld",
	      h_stat(h.c, "resident.hits"));
	CHECK(h_stat(h.c, "resident.misses") == 1, "1 miss");

	free(A);
	free(N);
	free(P2);
	free(P3);
	h_close(&h);
}

int main(void)
{
	moor_log_level = MOOR_LOG_WARN;
	run("f32_untied");
	run("bf16_tied");
	return t_done("test_resident_resume_exact");
}
