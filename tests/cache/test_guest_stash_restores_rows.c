/* test_guest_stash_restores_rows: a guest (a short unrelated request, at
 * most guest_max tokens and under a quarter of the resident prompt) gets
 * the rows it can write stashed, and they are put back before the next
 * request: the resident rows are byte-identical to before, the anchors and
 * the end anchor are as they were, and the next turn resumes as if no guest
 * came (bit for bit against a cold prefill).
 *   - turn 1: A (1,000 tokens), 4 sampled (3 absorbed: 1,003 rows);
 *   - the guest: 110 tokens sharing A's first 50, 8 sampled; its own
 *     prefill is a cold one's too;
 *   - the next plan: rows [0, 1003) equal the copy taken before the guest;
 *     the turn continues A's answer and resumes at the end anchor (1,003);
 *   - then A[:900] + new tokens resumes at 896, bit for bit;
 *   - a request of guest size but not under a quarter is no guest. */
#include "eng_harness.h"

static unsigned char *rows_copy(harness *h, uint64_t n)
{
	size_t rb = 0;
	for (int i = 0; i < h->y->n_views; i++)
		rb += h->y->view[i].row_bytes;
	unsigned char *p = malloc(rb * n + 1), *q = p;
	REQUIRE(p, "oom");
	/* the views are device memory on CUDA: read through the backend */
	kern_queue *kq = h->ops->queue(h->ctx, KERN_Q_COMPUTE);
	for (int i = 0; i < h->y->n_views; i++) {
		REQUIRE(h->ops->download(kq, q, h->s.view[i],
					 h->y->view[i].row_bytes * n) == 0,
			"download of view %d", i);
		q += h->y->view[i].row_bytes * n;
	}
	return p;
}

int main(void)
{
	moor_log_level = MOOR_LOG_WARN;
	cache_cfg cfg;
	h_cfg(&cfg, "guest");
	harness h;
	h_open(&h, "f32_untied", 128, 2048, &cfg);
	int V = h.V;
	int32_t *A = h_ids(1000, V, 51), *N = h_ids(400, V, 52);
	h_turn t;
	char err[MOOR_ERRLEN];

	REQUIRE(h_turn_run(&h, A, 1000, "s", 4, &t) == 0, "turn 1");
	state_free(&t.st);
	int32_t gen1[H_MAX_GEN];
	memcpy(gen1, t.gen, sizeof gen1);
	uint64_t valid = 1003;
	CHECK(h_stat(h.c, "resident.tokens") == (long long)valid, "1003 rows");
	unsigned char *before = rows_copy(&h, valid);
	uint64_t lines0[32];
	int nl0 = h_lines(h.c, "resident", lines0, 32);

	int32_t *G = h_cat(A, 50, N, 60);
	h_part(G, A, 50, V);
	REQUIRE(h_turn_run(&h, G, 110, "s", 8, &t) == 0, "guest");
	CHECK(t.plan.guest, "a guest");
	CHECK(t.plan.n_slots == 0, "a guest keeps no anchor (%u slots)",
	      t.plan.n_slots);
	h_exact(&h, G, 110, &t, "the guest's own prefill");
	state_free(&t.st);
	CHECK(h_stat(h.c, "stash.stashes") == 1, "stashed");
	CHECK(h_stat(h.c, "stash.rows") == 110 + 8 + 32,
	      "the stash holds its prompt, max_tokens and two margins: %lld",
	      h_stat(h.c, "stash.rows"));
	CHECK(h_stat(h.c, "resident.tokens") == (long long)valid,
	      "the resident prompt is unchanged");
	CHECK(h_stat(h.c, "end.len") == (long long)valid,
	      "the end anchor is unchanged");

	/* the next request: plan, then look at the rows before any prefill */
	int32_t *P = h_cat(A, 1000, gen1, 4);
	int32_t *P2 = h_cat(P, 1004, N + 100, 96);
	cache_req r = {.ids = P2, .n = 1100, .session = "s", .max_tokens = 4};
	cache_plan_out plan;
	REQUIRE(cache_plan(h.c, &r, &plan, err) == 0, "plan: %s", err);
	/* the put-back's copies run on cached's mover (its own stream on
	 * CUDA): waited for before anyone reads the rows, as cached does
	 * before its reply */
	REQUIRE(cache_sync(h.c) == 0, "the stash's put-back copies");
	unsigned char *after = rows_copy(&h, valid);
	size_t rb = cache_layout_row_bytes(h.lay);
	CHECK(memcmp(before, after, rb * valid) == 0,
	      "after a guest the resident rows are byte-identical to before");
	uint64_t lines1[32];
	int nl1 = h_lines(h.c, "resident", lines1, 32);
	CHECK(nl1 == nl0 && !memcmp(lines0, lines1, sizeof(uint64_t) * nl0),
	      "the anchors are as they were");
	CHECK(plan.start == valid, "resumes at the end anchor (%llu), got %llu",
	      (unsigned long long)valid, (unsigned long long)plan.start);
	CHECK(plan.tier == CACHE_TIER_STASH,
	      "the source is the rows the stash put back, got %s",
	      cache_tier_name(plan.tier));
	REQUIRE(cache_abort(h.c, 0, plan.start) == 0, "abort");

	int32_t *P3 = h_cat(A, 900, N + 200, 150);
	h_part(P3, A, 900, V);
	REQUIRE(h_turn_run(&h, P3, 1050, "s", 3, &t) == 0, "turn 3");
	CHECK(t.plan.start == 896,
	      "resumes at 896 as if no guest came, got "
	      "%llu",
	      (unsigned long long)t.plan.start);
	h_exact(&h, P3, 1050, &t, "turn 3 (after the guest)");
	state_free(&t.st);

	/* under guest_max but not under a quarter: no guest */
	int32_t *S = h_ids(190, V, 53);
	if (S[0] == P3[0])
		S[0] = (P3[0] + 1) % V;
	cache_cfg_defaults(&cfg);
	REQUIRE(h_turn_run(&h, S, 190, "s", 2, &t) == 0, "not a guest");
	CHECK(t.plan.guest == 0 || 4 * 190 < 1053, "guest rule");
	state_free(&t.st);

	free(before);
	free(after);
	free(A);
	free(N);
	free(G);
	free(P);
	free(P2);
	free(P3);
	free(S);
	h_close(&h);
	return t_done("test_guest_stash_restores_rows");
}
