/* test_store_prefix_resume_exact: the state store takes a prefix snapshot
 * at the longest grid line of a prefill that fits the entry cap, and a
 * later prompt that starts with those tokens resumes there, bit for bit,
 * after the rows in place have gone to another prompt.
 *   - turn 1 (700 tokens): the cap holds sections + 512 rows, not 640: one
 *     prefix snapshot at 512; the session snapshot (703 tokens) is over the
 *     cap: declined_big;
 *   - turn 2: 800 unrelated tokens replace the rows (park and pin off);
 *   - turn 3: turn 1's prompt to 600 + new tokens resumes from the store at
 *     512, equal to a cold prefill (logits, sections, rows [0, n));
 *   - a prompt whose tokens differ inside the snapshot does not hit it;
 *   - with store_boundaries 0 every line that fits is snapshotted. */
#include "eng_harness.h"

static void run(int boundaries)
{
	cache_cfg cfg;
	h_cfg(&cfg, "store");
	cfg.park_bytes = 0;
	cfg.pin_bytes = 0;
	cfg.store_boundaries = boundaries;
	harness h;
	h_open(&h, "f32_untied", 128, 2048, &cfg);
	int V = h.V;
	uint64_t sec = 0, row = 0;
	for (uint32_t i = 0; i < h.lay->n_sections; i++)
		sec += h.lay->sec[i].bytes;
	row = cache_layout_row_bytes(h.lay);
	cache_free(h.c);
	cfg.store_entry_bytes = sec + 512 * row + 600 * 0 + 64;
	char err[MOOR_ERRLEN];
	REQUIRE(cache_new(&cfg, &h.c, err) == 0, "cache_new: %s", err);
	REQUIRE(cache_hello(h.c, h.lay, &h.ho, err) == 0, "hello: %s", err);
	char *base = cache_dev_base(h.c);
	for (int i = 0; i < h.y->n_sections; i++)
		h.s.sec[i] = base + h.ho.sec_off[i];
	for (int i = 0; i < h.y->n_views; i++)
		h.s.view[i] = base + h.ho.view_off[i];

	int32_t *P = h_ids(700, V, 41), *Q = h_ids(800, V, 42),
		*N = h_ids(400, V, 43);
	h_turn t;
	REQUIRE(h_turn_run(&h, P, 700, "x", 4, &t) == 0, "turn 1");
	state_free(&t.st);
	CHECK(h_stat(h.c, "store.puts_prefix") == (boundaries ? 1 : 4),
	      "prefix snapshots: %lld", h_stat(h.c, "store.puts_prefix"));
	CHECK(h_stat(h.c, "store.declined_big") >= 1,
	      "the session snapshot is over the cap");
	if (Q[0] == P[0])
		Q[0] = (P[0] + 1) % V;
	REQUIRE(h_turn_run(&h, Q, 800, "y", 3, &t) == 0, "turn 2");
	state_free(&t.st);

	int32_t *R = h_cat(P, 600, N, 150);
	h_part(R, P, 600, V);
	REQUIRE(h_turn_run(&h, R, 750, "x", 4, &t) == 0, "turn 3");
	CHECK(t.plan.tier == CACHE_TIER_STORE && t.plan.start == 512,
	      "turn 3 resumes from the store at 512: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	h_exact(&h, R, 750, &t, "turn 3 (store snapshot)");
	state_free(&t.st);
	CHECK(h_stat(h.c, "store.hits") == 1, "a store hit");

	/* a token changed inside the snapshot's prefix: no hit there */
	int32_t *S = h_cat(P, 700, N, 1);
	S[100] = (S[100] + 1) % V;
	REQUIRE(h_turn_run(&h, S, 700, "z", 2, &t) == 0, "turn 4");
	CHECK(t.plan.tier != CACHE_TIER_STORE || t.plan.start <= 100,
	      "a prompt that differs at 100 resumes at or below it (%s %llu)",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	h_exact(&h, S, 700, &t, "turn 4");
	state_free(&t.st);

	free(P);
	free(Q);
	free(N);
	free(R);
	free(S);
	h_close(&h);
}

int main(void)
{
	moor_log_level = MOOR_LOG_WARN;
	run(1);
	run(0);
	return t_done("test_store_prefix_resume_exact");
}
