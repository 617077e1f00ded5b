/* test_pin_restore_exact: a same-session request that parts inside the head
 * (a compaction, sharing nothing) pins the old head first, and the turn
 * after it gets the head back bit for bit.
 *   - turn 1, session s1: prompt A (1,000 tokens), anchors every 128;
 *   - turn 2, session s1: C shares nothing with A and is too long to be a
 *     guest: the head [0, 512) and the anchors at 256 and 512 (every
 *     pin_every 256 up to pin_upto 512) are pinned before the rows go;
 *   - turn 3, session s1: A[:600] + new tokens shares 600 with the pin and
 *     nothing with the rows in place: the rows come back and it resumes at
 *     512, equal to a cold prefill (logits, sections, rows [0, n));
 *   - turn 4: A[:300] + other tokens resumes at 256, an anchor that came
 *     back with the head, equal to a cold prefill as well;
 *   - another session's request that parts is parked, not pinned. */
#include "eng_harness.h"

int main(void)
{
	moor_log_level = MOOR_LOG_WARN;
	cache_cfg cfg;
	h_cfg(&cfg, "pin");
	harness h;
	h_open(&h, "f32_untied", 128, 2048, &cfg);
	int V = h.V;
	int32_t *A = h_ids(1000, V, 21), *C = h_ids(700, V, 22),
		*N = h_ids(800, V, 23);
	h_turn t;

	REQUIRE(h_turn_run(&h, A, 1000, "s1", 3, &t) == 0, "turn 1");
	state_free(&t.st);
	if (C[0] == A[0])
		C[0] = (A[0] + 1) % V;
	REQUIRE(h_turn_run(&h, C, 700, "s1", 3, &t) == 0, "turn 2");
	CHECK(t.plan.start == 0 && !t.plan.guest, "turn 2 is cold, no guest");
	state_free(&t.st);
	CHECK(h_stat(h.c, "pin.pins") == 1, "one pin");
	CHECK(h_stat(h.c, "pin.tokens") == 512,
	      "the pin holds 512 tokens, "
	      "got %lld",
	      h_stat(h.c, "pin.tokens"));
	uint64_t lines[16];
	int nl = h_lines(h.c, "pin", lines, 16);
	CHECK(nl == 2 && lines[0] == 256 && lines[1] == 512,
	      "pinned anchors 256 and 512 (%d)", nl);
	CHECK(h_stat(h.c, "park.parks") == 0, "a same session does not park");

	int32_t *P3 = h_cat(A, 600, N, 200);
	h_part(P3, A, 600, V);
	REQUIRE(h_turn_run(&h, P3, 800, "s1", 3, &t) == 0, "turn 3");
	CHECK(t.plan.tier == CACHE_TIER_PIN && t.plan.start == 512,
	      "turn 3 resumes from the pin at 512: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	h_exact(&h, P3, 800, &t, "turn 3 (the pin restored)");
	state_free(&t.st);
	CHECK(h_stat(h.c, "pin.hits") == 1, "a pin hit");

	int32_t *P4 = h_cat(A, 300, N + 300, 400);
	h_part(P4, A, 300, V);
	REQUIRE(h_turn_run(&h, P4, 700, "s1", 3, &t) == 0, "turn 4");
	CHECK(t.plan.tier == CACHE_TIER_RESIDENT && t.plan.start == 256,
	      "turn 4 resumes at the restored anchor 256: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	h_exact(&h, P4, 700, &t, "turn 4 (a pinned anchor, back in place)");
	state_free(&t.st);

	/* another session that parts: parked, the pin stays as it was */
	int32_t *D = h_ids(900, V, 24);
	if (D[0] == P4[0])
		D[0] = (P4[0] + 1) % V;
	long long pins = h_stat(h.c, "pin.pins");
	REQUIRE(h_turn_run(&h, D, 900, "s2", 3, &t) == 0, "turn 5");
	state_free(&t.st);
	CHECK(h_stat(h.c, "pin.pins") == pins, "another session: no pin");
	CHECK(h_stat(h.c, "park.parks") == 1, "another session: parked");

	free(A);
	free(C);
	free(N);
	free(P3);
	free(P4);
	free(D);
	h_close(&h);
	return t_done("test_pin_restore_exact");
}
