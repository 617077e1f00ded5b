/* test_end_anchor: the end anchor keeps the state at the last position the
 * engine forwarded (prompt + the generated tokens it absorbed), with the
 * taint line at the prompt's end.
 *   - turn 1: A (650 tokens, off the grid), 6 sampled, 5 absorbed: the end
 *     anchor at 655, taint 650;
 *   - turn 2 sends A + the whole answer + a new message: it resumes at 655
 *     (the previous prompt + absorbed) and forwards only what is new; it
 *     writes the same greedy tokens as a cold run of the same ids (the
 *     greedy gate: its state was written by decode, not by a prefill);
 *   - a prompt that parts inside the generation resumes at the prompt's
 *     last grid anchor (640 <= taint), bit for bit, and the end goes;
 *   - a later request parting below the taint line resumes at a grid anchor
 *     <= taint, bit for bit again;
 *   - end_anchor off keeps none.
 * Session snapshots are off here: they would offer the same state from the
 * store (the planner takes the latest start). */
#include "eng_harness.h"

int main(void)
{
	moor_log_level = MOOR_LOG_WARN;
	cache_cfg cfg;
	h_cfg(&cfg, "end");
	cfg.store_sessions = 0; /* the end anchor alone */
	harness h;
	h_open(&h, "f32_untied", 128, 2048, &cfg);
	int V = h.V;
	int32_t *A = h_ids(650, V, 61), *N = h_ids(600, V, 62);
	h_turn t;

	REQUIRE(h_turn_run(&h, A, 650, "s", 6, &t) == 0, "turn 1");
	state_free(&t.st);
	int32_t ans[H_MAX_GEN];
	memcpy(ans, t.gen, sizeof ans);
	CHECK(h_stat(h.c, "end.have") == 1 && h_stat(h.c, "end.len") == 655,
	      "the end anchor at 655, got %lld", h_stat(h.c, "end.len"));
	CHECK(h_stat(h.c, "resident.taint") == 650, "taint 650, got %lld",
	      h_stat(h.c, "resident.taint"));
	CHECK(h_stat(h.c, "end.taint") == 650, "the end's taint 650");

	/* the client sends the answer back (all 6 tokens) and a message */
	int32_t *P = h_cat(A, 650, ans, 6);
	int32_t *P2 = h_cat(P, 656, N, 40);
	REQUIRE(h_turn_run(&h, P2, 696, "s", 6, &t) == 0, "turn 2");
	CHECK(t.plan.tier == CACHE_TIER_END && t.plan.start == 655,
	      "turn 2 resumes at the end anchor 655: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	CHECK(t.plan.taint == 650,
	      "turn 2 is held to the greedy gate from "
	      "650, got %lld",
	      (long long)t.plan.taint);
	h_cold_out o;
	h_cold(&h, P2, 696, 6, &o);
	CHECK(!memcmp(o.gen, t.gen, 6 * sizeof(int32_t)),
	      "turn 2 writes the same greedy tokens as a cold run");
	state_free(&o.st);
	state_free(&t.st);
	CHECK(h_stat(h.c, "end.hits") == 1, "an end hit");
	CHECK(h_stat(h.c, "end.len") == 701, "the new end anchor at 701");

	/* parts inside turn 2's generation: its prompt's last grid anchor
	 * (640: below the taint, clean) */
	int32_t *P2g = h_cat(P2, 696, t.gen, 2);
	int32_t *P3 = h_cat(P2g, 698, N + 100, 100);
	if (P3[698] == t.gen[2])
		P3[698] = (P3[698] + 1) % V;
	free(P2g);
	REQUIRE(h_turn_run(&h, P3, 798, "s", 3, &t) == 0, "turn 3");
	CHECK(t.plan.tier == CACHE_TIER_RESIDENT && t.plan.start == 640,
	      "parting inside the generation resumes at 640: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	CHECK(t.plan.taint == CACHE_NO_TAINT, "clean again");
	h_exact(&h, P3, 798, &t, "turn 3 (grid anchor <= taint)");
	state_free(&t.st);

	/* parting below the (new) taint line */
	int32_t *P4 = h_cat(A, 600, N + 300, 200);
	h_part(P4, A, 600, V);
	REQUIRE(h_turn_run(&h, P4, 800, "s", 3, &t) == 0, "turn 4");
	CHECK(t.plan.start == 512 && t.plan.taint == CACHE_NO_TAINT,
	      "parting below taint resumes at 512, clean: %llu",
	      (unsigned long long)t.plan.start);
	h_exact(&h, P4, 800, &t, "turn 4 (below taint)");
	state_free(&t.st);
	h_close(&h);

	/* end_anchor off */
	h_cfg(&cfg, "end-off");
	cfg.end_anchor = 0;
	cfg.store_sessions = 0;
	h_open(&h, "f32_untied", 128, 2048, &cfg);
	REQUIRE(h_turn_run(&h, A, 650, "s", 6, &t) == 0, "off: turn 1");
	state_free(&t.st);
	CHECK(h_stat(h.c, "end.have") == 0, "no end anchor when off");
	REQUIRE(h_turn_run(&h, P2, 696, "s", 3, &t) == 0, "off: turn 2");
	CHECK(t.plan.start == 640, "off: resumes at the last grid anchor");
	h_exact(&h, P2, 696, &t, "off: turn 2");
	state_free(&t.st);
	h_close(&h);

	free(A);
	free(N);
	free(P);
	free(P2);
	free(P3);
	free(P4);
	return t_done("test_end_anchor");
}
