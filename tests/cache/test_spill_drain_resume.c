/* test_spill_drain_resume: a drain (cached's SIGTERM) writes the resident
 * conversation to the session spill, and a new cache on the same weights
 * reads it back at the engine's attach, bit for bit:
 *   - turn 1: A (1,300 tokens: two spill blocks, the second partial), 6
 *     sampled, 5 absorbed; the drain writes it;
 *   - a new cache and engine: rows [0, 1305), the live sections (the end
 *     anchor's state), the end anchor, every anchor's line and bytes, the
 *     taint line, the session and the rows' marks (the generation region
 *     the end alignment reads) equal the first cache's, memcmp;
 *   - the next turn (A + the answer + a message) resumes at the end anchor
 *     (1305) and its prefill writes the same logits, state and greedy
 *     tokens as the same turn on a cache that never stopped;
 *   - incremental: a drain of the conversation as it was read back writes
 *     no block and no anchor (only its manifest); after turn 2 the drain
 *     writes the blocks that changed and keeps block 0, checked by the
 *     mover's sums where it is and never copied off the device
 *     (blocks_unread; on CUDA the CUDA mover's kernel);
 *   - the codec: the first cache writes raw, the second compresses (byte
 *     planes + zstd): its unchanged blocks stay raw, the new ones are
 *     encoded, and a cache reads the mixed entry back;
 *   - another fingerprint: the entry is swept at the attach and nothing is
 *     read back (a cold start);
 *   - the mover's ordering (CPU): a drain and a read-back through a mover
 *     that, like the CUDA one, does its copies only at sync() keep every
 *     block's sums and read back the same rows, sections and anchors bit
 *     for bit (a missing sync reads or refills the staging buffer early).
 * On CUDA (test_spill_drain_resume_cuda) the same runs on a cudaMalloc'ed
 * device arena and the CUDA mover, the deferring part aside.
 * Session snapshots are off: the store would offer the same state. */
#include <errno.h>
#include <fcntl.h>

#include "cache_int.h"
#include "defer_mover.h"
#include "dfile.h"
#include "eng_harness.h"

static char dir[256];

static void open_h(harness *h, const char *name, int spill, int codec)
{
	cache_cfg cfg;
	h_cfg(&cfg, name);
	cfg.store_sessions = 0;
	cfg.spill_codec = codec;
	if (spill)
		snprintf(cfg.spill_dir, sizeof cfg.spill_dir, "%s", dir);
	h_open(h, "f32_untied", 128, 2048, &cfg);
}

typedef struct snap {
	host_state st; /* live sections + rows [0, valid) */
	uint64_t valid, taint, end_len;
	uint32_t n_anc;
	uint64_t line[64];
	unsigned char *anc; /* n_anc * sec_bytes */
	unsigned char *end;
	char session[32];
	uint32_t n_mk;
	cache_mark mk[16];
} snap;

static void snap_take(harness *h, snap *s)
{
	cache *c = h->c;
	memset(s, 0, sizeof *s);
	s->valid = c->valid;
	s->taint = c->taint;
	s->st = state_read(h->ops, h->ctx, h->y, &h->s,
			   (int64_t)c->valid);
	s->end_len = c->end.have ? c->end.len : 0;
	s->n_anc = c->n_anc;
	REQUIRE(c->n_anc <= 64, "anchors");
	s->anc = malloc(c->n_anc * c->sec_bytes + 1);
	s->end = malloc(c->sec_bytes);
	REQUIRE(s->anc && s->end, "oom");
	/* through the cache's mover: on CUDA the device arena is GPU memory
	 * and the copies are done only after cache_sync */
	for (uint32_t i = 0; i < c->n_anc; i++) {
		s->line[i] = c->anc[i].line;
		REQUIRE(c->mv->copy(c->mv->ctx, s->anc + i * c->sec_bytes,
				    cache_dev_at(c, c->anc[i].off),
				    c->sec_bytes) == 0,
			"anchor %u out", i);
	}
	if (c->end.have)
		REQUIRE(c->mv->copy(c->mv->ctx, s->end,
				    cache_dev_at(c, c->end.off),
				    c->sec_bytes) == 0,
			"the end anchor out");
	REQUIRE(cache_sync(c) == 0, "the anchors' copies");
	snprintf(s->session, sizeof s->session, "%s",
		 c->res_session ? c->res_session : "");
	s->n_mk = c->n_mk < 16 ? c->n_mk : 16;
	memcpy(s->mk, c->mk, s->n_mk * sizeof *s->mk);
}

static void snap_free(snap *s)
{
	state_free(&s->st);
	free(s->anc);
	free(s->end);
}

/* The rows [0, valid) of every view and the live sections of c. */
static unsigned char *live_take(cache *c)
{
	size_t n = c->valid * c->row_bytes + c->sec_bytes;
	unsigned char *b = malloc(n + 1);
	REQUIRE(b, "oom");
	REQUIRE(cache_rows_out(c, b, c->valid, 0, 0, c->valid) == 0 &&
		    cache_secs_out(c, b + c->valid * c->row_bytes) == 0 &&
		    cache_sync(c) == 0,
		"the live rows out");
	return b;
}

int main(void)
{
	moor_log_level = MOOR_LOG_WARN;
	snprintf(dir, sizeof dir, "/tmp/moor-spill-test-XXXXXX");
	REQUIRE(mkdtemp(dir), "mkdtemp");
	harness h, h2, h3;
	h_turn t, t3;
	char err[MOOR_ERRLEN] = "";

	open_h(&h, "spill-a", 1, 0); /* written raw */
	int V = h.V;
	int32_t *A = h_ids(1300, V, 71), *N = h_ids(300, V, 72);
	REQUIRE(h_turn_run(&h, A, 1300, "sess-1", 6, &t) == 0, "turn 1");
	state_free(&t.st);
	int32_t ans[H_MAX_GEN];
	memcpy(ans, t.gen, sizeof ans);
	snap s1;
	snap_take(&h, &s1);
	CHECK(s1.valid == 1305 && s1.end_len == 1305 && s1.n_anc >= 4,
	      "turn 1 leaves 1305 rows, the end at 1305 and anchors: %llu "
	      "%llu %u",
	      (unsigned long long)s1.valid, (unsigned long long)s1.end_len,
	      s1.n_anc);
	REQUIRE(cache_drain(h.c, err) == 0, "drain: %s", err);
	CHECK(h_stat(h.c, "spill.saves") == 1 &&
		  h_stat(h.c, "spill.blocks_written") == 2,
	      "the drain wrote 2 blocks, got %lld",
	      h_stat(h.c, "spill.blocks_written"));
	CHECK(h_stat(h.c, "spill.anchors_written") == 5,
	      "4 anchors and the end written, got %lld",
	      h_stat(h.c, "spill.anchors_written"));
	h_close(&h);

	/* a new cache and engine on the same weights */
	open_h(&h2, "spill-b", 1, 1); /* the codec from here */
	CHECK(h2.ho.resident_len == 1305,
	      "hello hands back 1305 resident tokens, got %llu",
	      (unsigned long long)h2.ho.resident_len);
	CHECK(h_stat(h2.c, "spill.restores") == 1, "one restore");
	snap s2;
	snap_take(&h2, &s2);
	CHECK(s2.valid == s1.valid && s2.taint == s1.taint &&
		  s2.end_len == s1.end_len && !strcmp(s2.session, s1.session),
	      "valid, taint, end and session as drained");
	state_equal(h2.y, &s2.st, &s1.st, (int64_t)s1.valid,
		    "read back: live sections and rows [0, 1305)");
	CHECK(!memcmp(s2.end, s1.end, h2.c->sec_bytes),
	      "the end anchor's bytes");
	int mk_same = s1.n_mk >= 1 && s2.n_mk == s1.n_mk;
	for (uint32_t i = 0; mk_same && i < s1.n_mk; i++)
		mk_same = s1.mk[i].start == s2.mk[i].start &&
			  s1.mk[i].len == s2.mk[i].len &&
			  s1.mk[i].kind == s2.mk[i].kind;
	CHECK(mk_same,
	      "the rows' marks (the generation region) travel: %u and %u",
	      s1.n_mk, s2.n_mk);
	/* the newest 4 anchors travel */
	CHECK(s2.n_anc == 4, "4 anchors read back, got %u", s2.n_anc);
	for (uint32_t i = 0; i < s2.n_anc && i < 4; i++) {
		uint32_t k = s1.n_anc - 4 + i;
		CHECK(s2.line[i] == s1.line[k] &&
			  !memcmp(s2.anc + i * h2.c->sec_bytes,
				  s1.anc + k * h2.c->sec_bytes,
				  h2.c->sec_bytes),
		      "anchor %u (line %llu) bit for bit", i,
		      (unsigned long long)s1.line[k]);
	}
	/* a drain of what was read back writes nothing but the manifest;
	 * through the deferring mover (on CPU): the staged blocks' sums are
	 * still the manifest's */
	defer dq = {0};
	arena_mover dmv = dm_mover(&dq);
	const arena_mover *mv0 = h2.c->mv;
	if (!tb_cuda())
		h2.c->mv = &dmv;
	REQUIRE(cache_drain(h2.c, err) == 0, "drain 2: %s", err);
	h2.c->mv = mv0;
	CHECK(dq.n == 0, "the drain left %zu copies unsynced", dq.n);
	CHECK(h_stat(h2.c, "spill.blocks_written") == 0 &&
		  h_stat(h2.c, "spill.blocks_kept") == 2 &&
		  h_stat(h2.c, "spill.anchors_written") == 0,
	      "an unchanged conversation writes no block or anchor: %lld "
	      "written, %lld kept, %lld anchors",
	      h_stat(h2.c, "spill.blocks_written"),
	      h_stat(h2.c, "spill.blocks_kept"),
	      h_stat(h2.c, "spill.anchors_written"));

	/* a read back through the deferring mover (CPU; a cache of its own,
	 * no engine: the live buffers compared with h2's) */
	if (!tb_cuda()) {
		cache_cfg xc;
		h_cfg(&xc, "spill-x");
		xc.store_sessions = 0;
		snprintf(xc.spill_dir, sizeof xc.spill_dir, "%s", dir);
		cache *x;
		cache_hello_out xo;
		REQUIRE(cache_new(&xc, &x, err) == 0, "cache x: %s", err);
		x->mv = &dmv;
		uint64_t s0 = dq.syncs;
		REQUIRE(cache_hello(x, h2.lay, &xo, err) == 0, "hello x: %s",
			err);
		CHECK(dq.n == 0 && dq.syncs > s0,
		      "the read-back ends synced (%zu left)", dq.n);
		CHECK(xo.resident_len == 1305 && x->valid == h2.c->valid &&
			  x->taint == h2.c->taint && x->end.have &&
			  x->end.len == h2.c->end.len,
		      "the deferred read-back: %llu tokens",
		      (unsigned long long)xo.resident_len);
		x->mv = &arena_mover_memcpy;
		unsigned char *lx = live_take(x), *l2 = live_take(h2.c);
		CHECK(!memcmp(lx, l2,
			      h2.c->valid * h2.c->row_bytes + h2.c->sec_bytes),
		      "the deferred read-back's rows and sections, bit for "
		      "bit");
		free(lx);
		free(l2);
		CHECK(!memcmp(cache_dev_at(x, x->end.off),
			      cache_dev_at(h2.c, h2.c->end.off),
			      h2.c->sec_bytes),
		      "the deferred read-back's end anchor");
		CHECK(x->n_anc == h2.c->n_anc, "anchors %u", x->n_anc);
		for (uint32_t i = 0; i < x->n_anc && i < h2.c->n_anc; i++)
			CHECK(x->anc[i].line == h2.c->anc[i].line &&
				  !memcmp(cache_dev_at(x, x->anc[i].off),
					  cache_dev_at(h2.c, h2.c->anc[i].off),
					  h2.c->sec_bytes),
			      "the deferred read-back's anchor %u", i);
		cache_free(x);
	}
	free(dq.q);

	/* the next turn, against a cache that never stopped */
	int32_t *P = h_cat(A, 1300, ans, 6);
	int32_t *P2 = h_cat(P, 1306, N, 60);
	REQUIRE(h_turn_run(&h2, P2, 1366, "sess-1", 6, &t) == 0, "turn 2");
	CHECK(t.plan.tier == CACHE_TIER_END && t.plan.start == 1305,
	      "turn 2 after the restart resumes at the end anchor 1305: %s at "
	      "%llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	open_h(&h3, "spill-c", 0, 0);
	REQUIRE(h_turn_run(&h3, A, 1300, "sess-1", 6, &t3) == 0, "control 1");
	state_free(&t3.st);
	REQUIRE(h_turn_run(&h3, P2, 1366, "sess-1", 6, &t3) == 0, "control 2");
	CHECK(t3.plan.tier == CACHE_TIER_END && t3.plan.start == 1305,
	      "control resumes at 1305");
	CHECK(!memcmp(h2.lg + 1305 * (size_t)V, h3.lg + 1305 * (size_t)V,
		      61 * (size_t)V * sizeof(float)),
	      "turn 2's logits equal the unstopped cache's bit for bit");
	state_equal(h2.y, &t.st, &t3.st, 1366,
		    "turn 2's state equals the unstopped cache's");
	CHECK(!memcmp(t.gen, t3.gen, 6 * sizeof(int32_t)),
	      "turn 2 writes the same greedy tokens");
	state_free(&t.st);
	state_free(&t3.st);
	h_close(&h3);

	/* incremental after a turn: block 0 is kept, block 1 rewritten */
	long long w0 = h_stat(h2.c, "spill.blocks_written");
	long long k0 = h_stat(h2.c, "spill.blocks_kept");
	long long u0 = h_stat(h2.c, "spill.blocks_unread");
	long long ak0 = h_stat(h2.c, "spill.anchors_kept");
	long long au0 = h_stat(h2.c, "spill.anchors_unread");
	arena_mover_stats ms0, ms1;
	int have_ms = cache_mover_stats(h2.c, &ms0) == 0;
	REQUIRE(cache_drain(h2.c, err) == 0, "drain 3: %s", err);
	CHECK(h_stat(h2.c, "spill.blocks_written") - w0 == 1 &&
		  h_stat(h2.c, "spill.blocks_kept") - k0 == 1,
	      "after turn 2: 1 block written, 1 kept (got %lld, %lld)",
	      h_stat(h2.c, "spill.blocks_written") - w0,
	      h_stat(h2.c, "spill.blocks_kept") - k0);
	/* the kept block and anchors checked by the mover's sums where they
	 * are (every view of qwen35 one run a block): not copied off the
	 * device (on CUDA: the CUDA mover's kernel; its counters) */
	CHECK(h_stat(h2.c, "spill.blocks_unread") - u0 == 1 &&
		  h_stat(h2.c, "spill.anchors_unread") - au0 ==
		      h_stat(h2.c, "spill.anchors_kept") - ak0,
	      "after turn 2: block 0 and the kept anchors unread (got %lld, "
	      "%lld of %lld)",
	      h_stat(h2.c, "spill.blocks_unread") - u0,
	      h_stat(h2.c, "spill.anchors_unread") - au0,
	      h_stat(h2.c, "spill.anchors_kept") - ak0);
	if (have_ms && cache_mover_stats(h2.c, &ms1) == 0)
		CHECK(ms1.sums > ms0.sums && ms1.sum_bytes - ms0.sum_bytes >=
						 1024 * h2.c->row_bytes,
		      "the mover summed block 0 where it is: %llu sums, %llu "
		      "bytes",
		      (unsigned long long)(ms1.sums - ms0.sums),
		      (unsigned long long)(ms1.sum_bytes - ms0.sum_bytes));
	CHECK(h_stat(h2.c, "spill.codec_raw") > 0 &&
		  h_stat(h2.c, "spill.codec_out") <
		      h_stat(h2.c, "spill.codec_raw"),
	      "the codec encoded what the drain wrote: %lld -> %lld bytes",
	      h_stat(h2.c, "spill.codec_raw"), h_stat(h2.c, "spill.codec_out"));
	h_close(&h2);

	/* another fingerprint: swept, nothing read back */
	cache_cfg cfg;
	h_cfg(&cfg, "spill-d");
	cfg.store_sessions = 0;
	snprintf(cfg.spill_dir, sizeof cfg.spill_dir, "%s", dir);
	harness h4;
	h_open(&h4, "f32_untied", 128, 2048, &cfg); /* reads it back */
	CHECK(h4.ho.resident_len == 1371, "read back again: %llu",
	      (unsigned long long)h4.ho.resident_len);
	REQUIRE(cache_drain(h4.c, err) == 0, "drain 4: %s", err);
	cache_layout *l2 = malloc(sizeof *l2);
	REQUIRE(l2, "oom");
	*l2 = *h4.lay;
	l2->fingerprint[0] ^= 1;
	cache_hello_out ho;
	REQUIRE(cache_hello(h4.c, l2, &ho, err) == 0, "hello fp2: %s", err);
	CHECK(ho.adopted == 0 && ho.resident_len == 0,
	      "another fingerprint reads nothing back (%llu)",
	      (unsigned long long)ho.resident_len);
	CHECK(h_stat(h4.c, "spill.swept") == 1 &&
		  h_stat(h4.c, "spill.entries") == 0,
	      "the entry of the other fingerprint is swept: %lld swept, "
	      "%lld left",
	      h_stat(h4.c, "spill.swept"), h_stat(h4.c, "spill.entries"));
	free(l2);
	h_close(&h4);

	snap_free(&s1);
	snap_free(&s2);
	free(A);
	free(N);
	free(P);
	free(P2);
	dfile_rm_rf(AT_FDCWD, dir);
	return t_done("test_spill_drain_resume");
}
