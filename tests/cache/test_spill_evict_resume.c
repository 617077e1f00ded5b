/* test_spill_evict_resume: an eviction writes a long conversation the park
 * cannot hold to the session spill, and its next turn reads it back:
 *   - A (1,300 tokens, session a) then B (900 tokens, session b): A holds
 *     more than spill_min_tokens (600 here) and the park (64 KiB) cannot
 *     hold it, so B's plan writes A to the spill and parks nothing;
 *   - A's next turn (A + its answer + 60 tokens) resumes from the spill at
 *     A's end anchor (1305), as the peek before it says (with the drive
 *     read it would take: read_us), with B's rows in place, and its
 *     logits, state and greedy tokens equal those of the same turn on a
 *     cache where B never came (bit for bit);
 *   - (A's turn writes B to the spill in turn, and B's next turn reads it
 *     back); B again (A written again: incremental, its blocks kept), then a
 *     prompt that shares A's first 1,000 tokens only: it resumes at the
 *     spill's saved anchor 896 (below A's taint, so a cold grid prefill's
 *     bits) and equals a cold prefill bit for bit;
 *   - a flipped byte in the entry: the next such prompt is a cold prefill
 *     (a failure costs the entry, never an answer), bit for bit;
 *   - the TTL while cached runs: an entry unused for 49 hours goes at the
 *     next save, not only at the next start;
 *   - the budget: with spill_bytes at what one entry holds, the next save
 *     deletes the least recently used entry;
 *   - the mover's ordering (CPU): A's restore from the spill runs through
 *     a mover that does its copies only at sync(), like the CUDA one, and
 *     still equals the unevicted cache bit for bit (a staging buffer
 *     refilled before the copies out of it were done would not). */
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache_int.h"
#include "defer_mover.h"
#include "dfile.h"
#include "eng_harness.h"

static char dir[256];

static void open_h(harness *h, const char *name, int spill)
{
	cache_cfg cfg;
	h_cfg(&cfg, name);
	cfg.store_sessions = 0;
	cfg.park_bytes = 64 << 10;
	cfg.store_bytes = 0; /* no prefix snapshots: the spill alone */
	cfg.spill_min_tokens = 600;
	if (spill)
		snprintf(cfg.spill_dir, sizeof cfg.spill_dir, "%s", dir);
	h_open(h, "f32_untied", 128, 2048, &cfg);
}

int main(void)
{
	moor_log_level = MOOR_LOG_WARN;
	snprintf(dir, sizeof dir, "/tmp/moor-spill-evict-XXXXXX");
	REQUIRE(mkdtemp(dir), "mkdtemp");
	harness h, h3;
	h_turn t, t3;
	open_h(&h, "sev-a", 1);
	int V = h.V;
	int32_t *A = h_ids(1300, V, 81), *B = h_ids(900, V, 82),
		*N = h_ids(300, V, 83);
	h_part(B, A, 0, V);
	REQUIRE(h_turn_run(&h, A, 1300, "a", 6, &t) == 0, "A");
	int32_t ans[H_MAX_GEN];
	memcpy(ans, t.gen, sizeof ans);
	state_free(&t.st);
	REQUIRE(h_turn_run(&h, B, 900, "b", 4, &t) == 0, "B");
	state_free(&t.st);
	CHECK(h_stat(h.c, "spill.evict_saves") == 1,
	      "B's plan wrote A to the spill: %lld",
	      h_stat(h.c, "spill.evict_saves"));
	CHECK(h_stat(h.c, "park.parks") == 0, "and parked nothing: %lld",
	      h_stat(h.c, "park.parks"));

	int32_t *P = h_cat(A, 1300, ans, 6);
	int32_t *P2 = h_cat(P, 1306, N, 60);
	/* on CPU through a mover that, like the CUDA one, copies only at
	 * sync: the restore must wait for a block's copies out of its
	 * staging buffer before it reads the next block into it */
	defer dq = {0};
	arena_mover dmv = dm_mover(&dq);
	const arena_mover *mv0 = h.c->mv;
	if (!tb_cuda())
		h.c->mv = &dmv;
	{
		/* the peek says the spill, and the drive read it would take:
		 * restore_bytes at the spill's read rate (2 GB/s before its
		 * first restore) */
		cache_req q = {
		    .ids = P2, .n = 1366, .session = "a", .max_tokens = 6};
		cache_peek_out po;
		char perr[MOOR_ERRLEN] = "";
		REQUIRE(cache_peek(h.c, &q, &po, perr) == 0, "peek: %s", perr);
		uint64_t want =
		    (uint64_t)((double)po.restore_bytes / 2e9 * 1e6 + 0.5);
		CHECK(po.tier == CACHE_TIER_SPILL && po.start == 1305 &&
			  po.restore_bytes > 0 && po.read_us == want,
		      "A's peek: %s at %llu, %llu bytes, read %llu us (want "
		      "the spill at 1305, %llu us)",
		      cache_tier_name(po.tier), (unsigned long long)po.start,
		      (unsigned long long)po.restore_bytes,
		      (unsigned long long)po.read_us, (unsigned long long)want);
	}
	REQUIRE(h_turn_run(&h, P2, 1366, "a", 6, &t) == 0, "A again");
	/* the sync cached's reply to the COMMIT makes, before the swap back */
	REQUIRE(cache_sync(h.c) == 0, "sync");
	h.c->mv = mv0;
	free(dq.q);
	CHECK(t.plan.tier == CACHE_TIER_SPILL && t.plan.start == 1305,
	      "A's next turn resumes from the spill at 1305: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	CHECK(h_stat(h.c, "spill.hits") == 1, "a spill hit");
	open_h(&h3, "sev-c", 0);
	REQUIRE(h_turn_run(&h3, A, 1300, "a", 6, &t3) == 0, "control A");
	state_free(&t3.st);
	REQUIRE(h_turn_run(&h3, P2, 1366, "a", 6, &t3) == 0, "control A2");
	CHECK(t3.plan.tier == CACHE_TIER_END && t3.plan.start == 1305,
	      "the control resumes at its end anchor");
	CHECK(!memcmp(h.lg + 1305 * (size_t)V, h3.lg + 1305 * (size_t)V,
		      61 * (size_t)V * sizeof(float)),
	      "the logits from the spill equal the unevicted cache's");
	state_equal(h.y, &t.st, &t3.st, 1366,
		    "the state from the spill equals the unevicted cache's");
	CHECK(!memcmp(t.gen, t3.gen, 6 * sizeof(int32_t)),
	      "the same greedy tokens");
	state_free(&t.st);
	state_free(&t3.st);
	h_close(&h3);

	/* B again: A (1371 now) is written again, incrementally */
	/* (A's turn wrote B: it too is longer than spill_min_tokens) */
	CHECK(h_stat(h.c, "spill.evict_saves") == 2,
	      "A's turn wrote B to the spill");
	long long kept0 = h_stat(h.c, "spill.blocks_kept");
	REQUIRE(h_turn_run(&h, B, 900, "b", 4, &t) == 0, "B again");
	state_free(&t.st);
	CHECK(h_stat(h.c, "spill.evict_saves") == 3 &&
		  h_stat(h.c, "spill.blocks_kept") > kept0,
	      "A written again, its first block kept: %lld saves, %lld kept",
	      h_stat(h.c, "spill.evict_saves"),
	      h_stat(h.c, "spill.blocks_kept") - kept0);
	CHECK(h_stat(h.c, "spill.hits") == 2,
	      "B came back from the spill too: %lld hits",
	      h_stat(h.c, "spill.hits"));
	int32_t *Q = h_cat(A, 1000, N + 100, 200);
	h_part(Q, A, 1000, V);
	REQUIRE(h_turn_run(&h, Q, 1200, "a", 3, &t) == 0, "Q");
	CHECK(t.plan.tier == CACHE_TIER_SPILL && t.plan.start == 896 &&
		  t.plan.taint == CACHE_NO_TAINT,
	      "Q resumes at the spill's anchor 896, clean: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	h_exact(&h, Q, 1200, &t, "Q from the spill's anchor");
	state_free(&t.st);

	/* B again, then damage every block of A's entry */
	REQUIRE(h_turn_run(&h, B, 900, "b", 4, &t) == 0, "B 3");
	state_free(&t.st);
	for (uint32_t i = 0; i < h.c->spill.n_ent; i++) {
		char p[600];
		snprintf(p, sizeof p, "%s/sessions/%s/r0", dir,
			 cache_spill_ent_name(h.c, (int)i));
		int fd = open(p, O_RDWR);
		if (fd < 0)
			continue;
		uint8_t b = 0;
		REQUIRE(pread(fd, &b, 1, 200) == 1, "pread");
		b ^= 4;
		REQUIRE(pwrite(fd, &b, 1, 200) == 1, "pwrite");
		close(fd);
	}
	int32_t *Q2 = h_cat(A, 1100, N + 50, 100);
	h_part(Q2, A, 1100, V);
	REQUIRE(h_turn_run(&h, Q2, 1200, "a", 3, &t) == 0, "Q2");
	CHECK(t.plan.start == 0 && h_stat(h.c, "spill.hit_failed") == 1,
	      "a damaged entry: a cold prefill (%s at %llu), the entry gone",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	h_exact(&h, Q2, 1200, &t, "Q2 cold after a failed restore");
	state_free(&t.st);

	/* the TTL while cached runs: Q2's plan wrote B (the entry left);
	 * with its last use 49 hours back, the next save (C's plan writes
	 * Q2's conversation) deletes it, not only the next start */
	CHECK(h.c->spill.n_ent == 1, "one entry (B's): %u", h.c->spill.n_ent);
	char bname[17];
	snprintf(bname, sizeof bname, "%s", cache_spill_ent_name(h.c, 0));
	{
		char p[600];
		snprintf(p, sizeof p, "%s/sessions/%s/manifest", dir, bname);
		struct timespec ts[2] = {
		    {.tv_sec = time(NULL) - 49 * 3600, .tv_nsec = 0},
		    {.tv_sec = time(NULL) - 49 * 3600, .tv_nsec = 0}};
		REQUIRE(utimensat(AT_FDCWD, p, ts, 0) == 0, "utimensat %s", p);
	}
	long long ex0 = h_stat(h.c, "spill.expired"),
		  sv0 = h_stat(h.c, "spill.evict_saves");
	int32_t *C = h_ids(900, V, 84);
	h_part(C, A, 0, V);
	REQUIRE(h_turn_run(&h, C, 900, "c", 4, &t) == 0, "C");
	state_free(&t.st);
	{
		char p[600];
		snprintf(p, sizeof p, "%s/sessions/%s", dir, bname);
		CHECK(h_stat(h.c, "spill.evict_saves") == sv0 + 1 &&
			  h_stat(h.c, "spill.expired") == ex0 + 1 &&
			  access(p, F_OK) != 0 && h.c->spill.n_ent == 1,
		      "C's save expired B's entry unused for 49 h: %lld "
		      "saves, %lld expired, %s, %u entries",
		      h_stat(h.c, "spill.evict_saves") - sv0,
		      h_stat(h.c, "spill.expired") - ex0,
		      access(p, F_OK) ? "gone" : "still there",
		      h.c->spill.n_ent);
	}
	/* the budget (LRU): at what the one entry holds, D's plan writes C
	 * and the older entry (Q2's conversation) goes */
	char qname[17];
	snprintf(qname, sizeof qname, "%s", cache_spill_ent_name(h.c, 0));
	h.c->cfg.spill_bytes = (uint64_t)h_stat(h.c, "spill.bytes");
	long long ev0 = h_stat(h.c, "spill.evicted");
	sv0 = h_stat(h.c, "spill.evict_saves");
	int32_t *D = h_ids(900, V, 85);
	h_part(D, C, 0, V);
	REQUIRE(h_turn_run(&h, D, 900, "d", 4, &t) == 0, "D");
	state_free(&t.st);
	CHECK(h_stat(h.c, "spill.evict_saves") == sv0 + 1 &&
		  h_stat(h.c, "spill.evicted") == ev0 + 1 &&
		  h.c->spill.n_ent == 1 &&
		  strcmp(cache_spill_ent_name(h.c, 0), qname) &&
		  h_stat(h.c, "spill.bytes") <= (long long)h.c->cfg.spill_bytes,
	      "over the spill's budget the least recently used went: %lld "
	      "saves, %lld evicted, %u entries, %lld of %llu bytes",
	      h_stat(h.c, "spill.evict_saves") - sv0,
	      h_stat(h.c, "spill.evicted") - ev0, h.c->spill.n_ent,
	      h_stat(h.c, "spill.bytes"),
	      (unsigned long long)h.c->cfg.spill_bytes);
	free(C);
	free(D);
	h_close(&h);
	free(A);
	free(B);
	free(N);
	free(P);
	free(P2);
	free(Q);
	free(Q2);
	dfile_rm_rf(AT_FDCWD, dir);
	return t_done("test_spill_evict_resume");
}
