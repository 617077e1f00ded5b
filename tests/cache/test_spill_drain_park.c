/* test_spill_drain_park: the drain writes the parked conversation too.
 *   - A (1,300 tokens, session a) then B (900 tokens, session b, parting
 *     at 0): A is parked whole with its end anchor (the park holds it);
 *   - the drain writes B (resident) and A (parked): two saves;
 *   - a new cache and engine read B back; A's next turn (A + its answer +
 *     60 tokens) resumes from the spill at A's end anchor (1305), and its
 *     logits, state and greedy tokens equal those of the same turn on a
 *     cache that never stopped (bit for bit);
 *   - with a prefill rate no read beats (--prefill-tps), a prompt sharing
 *     A's head is not served from the spill, and the refusal is counted
 *     ([spill] no entry served ... why=slow). */
#include <fcntl.h>

#include "cache_int.h"
#include "dfile.h"
#include "eng_harness.h"

static char dir[256];

static void open_h(harness *h, const char *name, int spill, uint32_t tps)
{
	cache_cfg cfg;
	h_cfg(&cfg, name);
	if (tps)
		cfg.prefill_tps = tps;
	cfg.spill_min_tokens = 600;
	cfg.store_sessions = 0;
	cfg.store_bytes = 0;
	cfg.disk_on = 0;
	if (spill)
		snprintf(cfg.spill_dir, sizeof cfg.spill_dir, "%s", dir);
	h_open(h, "f32_untied", 128, 2048, &cfg);
}

int main(void)
{
	moor_log_level = MOOR_LOG_WARN;
	snprintf(dir, sizeof dir, "/tmp/moor-spill-park-XXXXXX");
	REQUIRE(mkdtemp(dir), "mkdtemp");
	harness h, h3;
	h_turn t, t3;
	char err[MOOR_ERRLEN] = "";
	open_h(&h, "sdp-a", 1, 0);
	int V = h.V;
	int32_t *A = h_ids(1300, V, 111), *B = h_ids(900, V, 112),
		*N = h_ids(300, V, 113);
	h_part(B, A, 0, V);
	REQUIRE(h_turn_run(&h, A, 1300, "a", 6, &t) == 0, "A");
	int32_t ans[H_MAX_GEN];
	memcpy(ans, t.gen, sizeof ans);
	state_free(&t.st);
	REQUIRE(h_turn_run(&h, B, 900, "b", 4, &t) == 0, "B");
	state_free(&t.st);
	CHECK(h_stat(h.c, "park.parks") == 1, "A is parked");
	REQUIRE(cache_drain(h.c, err) == 0, "drain: %s", err);
	CHECK(h_stat(h.c, "spill.saves") == 2,
	      "the drain wrote the resident and the parked conversation: "
	      "%lld saves",
	      h_stat(h.c, "spill.saves"));
	h_close(&h);

	open_h(&h, "sdp-b", 1, 0);
	CHECK(h.ho.resident_len == 903, "B is read back: %llu",
	      (unsigned long long)h.ho.resident_len);
	int32_t *P = h_cat(A, 1300, ans, 6);
	int32_t *P2 = h_cat(P, 1306, N, 60);
	REQUIRE(h_turn_run(&h, P2, 1366, "a", 6, &t) == 0, "A again");
	CHECK(t.plan.tier == CACHE_TIER_SPILL && t.plan.start == 1305,
	      "A's next turn resumes from the spill at 1305: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	open_h(&h3, "sdp-c", 0, 0);
	REQUIRE(h_turn_run(&h3, A, 1300, "a", 6, &t3) == 0, "control A");
	state_free(&t3.st);
	REQUIRE(h_turn_run(&h3, P2, 1366, "a", 6, &t3) == 0, "control A2");
	CHECK(t3.plan.tier == CACHE_TIER_END && t3.plan.start == 1305,
	      "the control resumes at its end anchor");
	CHECK(!memcmp(h.lg + 1305 * (size_t)V, h3.lg + 1305 * (size_t)V,
		      61 * (size_t)V * sizeof(float)),
	      "the logits from the drained park equal the unstopped cache's");
	state_equal(h.y, &t.st, &t3.st, 1366,
		    "the state from the drained park equals the unstopped "
		    "cache's");
	CHECK(!memcmp(t.gen, t3.gen, 6 * sizeof(int32_t)),
	      "the same greedy tokens");
	state_free(&t.st);
	state_free(&t3.st);
	h_close(&h3);
	h_close(&h);

	/* an engine so fast that no read pays: the entry that shares A's
	 * head is not served, and says why */
	open_h(&h, "sdp-d", 1, 4000000000u);
	int32_t *Z = h_cat(A, 1200, N, 100);
	h_part(Z, A, 1200, V);
	REQUIRE(h_turn_run(&h, Z, 1300, "z", 3, &t) == 0, "Z");
	CHECK(t.plan.tier != CACHE_TIER_SPILL &&
		  h_stat(h.c, "spill.refused") == 1,
	      "Z is not served from the spill (%s) and the refusal is "
	      "counted: %lld",
	      cache_tier_name(t.plan.tier), h_stat(h.c, "spill.refused"));
	h_exact(&h, Z, 1300, &t, "Z without the spill");
	state_free(&t.st);
	h_close(&h);
	free(Z);
	free(A);
	free(B);
	free(N);
	free(P);
	free(P2);
	dfile_rm_rf(AT_FDCWD, dir);
	return t_done("test_spill_drain_park");
}
