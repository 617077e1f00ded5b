/* test_disk_resume: the disk tier writes a cold grid prefill's chunks and
 * anchors off the request's path, and a new cache (a restart of cached)
 * resumes a prompt that shares the head from them, bit for bit:
 *   - A (1,300 tokens) is session a's first long request (min_tokens 256
 *     here): its 4 head anchors (896 to 1,280) and the 10 chunks below
 *     them are written by the writer thread; nothing else;
 *   - a new cache on the same directory (the restart): Q shares A's first
 *     1,100 tokens and resumes from the disk at 1,024 (8 chunks and the
 *     anchor read), and its logits, state, every view's rows and greedy
 *     tokens equal a cold prefill's (memcmp); the anchor it read is a
 *     resident anchor now;
 *   - admission by counts (head anchors off): two sessions in two folders
 *     (S1 = H + F1, S2 = H + F2, a restart between them so each forwards
 *     H cold) count H's lines twice; S2's plan admits the longest of them
 *     (640, also the branch line: the count falls at 768), and a third
 *     session in a third folder resumes there after a restart, bit for
 *     bit; a line counted once is not written;
 *   - the same restore through the deferring mover (the CUDA mover's
 *     semantics on host memory: a copy is done only at sync), staged in
 *     the host arena as on CUDA (O_DIRECT into 4 KiB aligned places of
 *     64-byte aligned blocks): a staging buffer the readers refill before
 *     the copies out of it are done would restore other bytes; its rows,
 *     sections and resident anchor equal the first restore's (memcmp);
 *     and when the 3rd file's read fails there, the plan is cold and the
 *     staging blocks go back to the host arena;
 *   - the counts outlive a fingerprint change: an engine of another
 *     fingerprint sweeps every file, and a prompt counted once before it
 *     is admitted at its second cold read after it;
 *   - the branch rule: that second cold read (S1 again) also writes the
 *     line where the counts fall (640: H read three times, S1's own lines
 *     twice), and with the RAM caches emptied a session in a fourth
 *     folder resumes there, bit for bit (without the rule only 1280 is
 *     written and it prefills cold);
 *   - nothing above the taint: with admit_after 1, a turn resumed at the
 *     end anchor (its lines forwarded over rows a decode's state computed)
 *     writes no anchor above it, and the same prompt of another session
 *     resumes from the disk's clean line below it, bit for bit;
 *   - a read that costs more than the prefill it saves (a prefill rate
 *     no read beats) is not taken: cold, bit for bit. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>

#include "cache_int.h"
#include "defer_mover.h"
#include "dfile.h"
#include "eng_harness.h"

static char dir[256];
static atomic_int n_read;

static int read3_fails(int op, const char *name)
{
	(void)name;
	return op == DFILE_OP_READ && atomic_fetch_add(&n_read, 1) + 1 == 3
		   ? -EIO
		   : 0;
}

/* Rows [0, n) of every view, then the live sections, then the resident
 * anchor at line's sections (zeros when there is none). A CPU arena only:
 * it reads the device arena with memcpy (on CUDA h_exact compares). */
static unsigned char *live_of(cache *c, uint64_t n, uint64_t line,
			      uint64_t *bytes)
{
	const cache_layout *l = c->lay;
	*bytes = n * c->row_bytes + 2 * c->sec_bytes;
	unsigned char *b = calloc(1, *bytes), *o = b;
	REQUIRE(b, "oom");
	for (uint32_t i = 0; i < l->n_views; i++) {
		const cache_vgeom *g = &c->vg[i];
		const unsigned char *v = cache_dev_at(c, c->view_off[i]);
		for (uint64_t r = 0; r < g->outer; r++) {
			memcpy(o, v + r * l->window * g->inner, n * g->inner);
			o += n * g->inner;
		}
	}
	for (uint32_t i = 0; i < l->n_sections; i++) {
		memcpy(o, cache_dev_at(c, c->sec_off[i]), l->sec[i].bytes);
		o += l->sec[i].bytes;
	}
	int a = cache_anchor_find(c, line);
	if (a >= 0)
		memcpy(o, cache_dev_at(c, c->anc[a].off), c->sec_bytes);
	return b;
}

static void open_h(harness *h, const char *name, uint32_t head)
{
	cache_cfg cfg;
	h_cfg_disk(&cfg, name, dir); /* no prefix snapshots: the disk alone */
	cfg.disk_head_anchors = head;
	h_open(h, "f32_untied", 128, 2048, &cfg);
}

static int lines_has(cache *c, uint64_t line)
{
	uint64_t l[64];
	int n = h_lines(c, "disk", l, 64);
	for (int i = 0; i < n; i++)
		if (l[i] == line)
			return 1;
	return 0;
}

/* The engine says HELLO with layout l (another fingerprint); the
 * harness's pointers follow the arenas' new places. */
static void hello_as(harness *h, const cache_layout *l)
{
	char err[MOOR_ERRLEN];
	REQUIRE(cache_hello(h->c, l, &h->ho, err) == 0, "hello: %s", err);
	char *base = cache_dev_base(h->c);
	for (int i = 0; i < h->y->n_sections; i++)
		h->s.sec[i] = base + h->ho.sec_off[i];
	for (int i = 0; i < h->y->n_views; i++)
		h->s.view[i] = base + h->ho.view_off[i];
}

int main(void)
{
	moor_log_level = MOOR_LOG_WARN;
	snprintf(dir, sizeof dir, "/tmp/moor-disk-resume-XXXXXX");
	REQUIRE(mkdtemp(dir), "mkdtemp");
	harness h;
	h_turn t;
	open_h(&h, "dr-1", 4);
	int V = h.V;
	int32_t *A = h_ids(1300, V, 91), *N = h_ids(600, V, 92);
	REQUIRE(h_turn_run(&h, A, 1300, "a", 4, &t) == 0, "A");
	state_free(&t.st);
	REQUIRE(cache_disk_wait(h.c) == 0, "wait");
	CHECK(h_stat(h.c, "disk.anchors") == 4 &&
		  h_stat(h.c, "disk.chunks") == 10,
	      "A's head: 4 anchors and 10 chunks on the disk: %lld, %lld",
	      h_stat(h.c, "disk.anchors"), h_stat(h.c, "disk.chunks"));
	CHECK(lines_has(h.c, 896) && lines_has(h.c, 1024) &&
		  lines_has(h.c, 1152) && lines_has(h.c, 1280),
	      "the anchors at 896, 1024, 1152 and 1280");
	CHECK(h_stat(h.c, "disk.files_direct") +
			  h_stat(h.c, "disk.files_buffered") ==
		      14,
	      "14 files written, %lld with O_DIRECT",
	      h_stat(h.c, "disk.files_direct"));
	CHECK(h_stat(h.c, "disk.write_failed") == 0 &&
		  h_stat(h.c, "disk.window") == 0,
	      "nothing failed, nothing fenced");
	/* A's next turn resumes in RAM and writes nothing more */
	long long w0 = h_stat(h.c, "disk.anchors_written");
	int32_t *A2 = h_cat(A, 1300, N, 100);
	REQUIRE(h_turn_run(&h, A2, 1400, "a", 4, &t) == 0, "A2");
	state_free(&t.st);
	cache_disk_wait(h.c);
	CHECK(t.plan.tier != CACHE_TIER_DISK &&
		  h_stat(h.c, "disk.anchors_written") == w0,
	      "A's second turn: from RAM (%s), no write",
	      cache_tier_name(t.plan.tier));
	h_close(&h);

	/* the restart */
	open_h(&h, "dr-2", 4);
	int32_t *Q = h_cat(A, 1100, N, 200);
	h_part(Q, A, 1100, V);
	REQUIRE(h_turn_run(&h, Q, 1300, "q", 4, &t) == 0, "Q");
	CHECK(t.plan.tier == CACHE_TIER_DISK && t.plan.start == 1024 &&
		  t.plan.taint == CACHE_NO_TAINT,
	      "Q resumes from the disk at 1024, clean: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	h_exact(&h, Q, 1300, &t, "Q from the disk after a restart");
	state_free(&t.st);
	CHECK(h_stat(h.c, "disk.hits") == 1 &&
		  h_stat(h.c, "disk.bytes_read") > 0,
	      "one disk hit");
	CHECK(cache_anchor_find(h.c, 1024) >= 0,
	      "the disk anchor is a resident anchor now");
	cache_disk_wait(h.c);
	cache_layout *lay = malloc(sizeof *lay);
	REQUIRE(lay, "oom");
	*lay = *h.lay;
	/* Q, a session's first long request, wrote its own head (up to
	 * 1280): the reference is its rows below 1280 and its anchor there,
	 * as the live sections too (the prefill past it rewrote the live
	 * ones) */
	CHECK(cache_anchor_find(h.c, 1280) >= 0 && lines_has(h.c, 1280),
	      "Q's anchor at 1280, resident and on the disk");
	uint64_t ref_n = 0;
	unsigned char *ref = NULL;
	if (!tb_cuda()) { /* live_of reads the arena as host memory */
		ref = live_of(h.c, 1280, 1280, &ref_n);
		memcpy(ref + 1280 * h.c->row_bytes, ref + ref_n - h.c->sec_bytes,
		       h.c->sec_bytes);
	}
	h_close(&h);

	/* the same restore through the deferring mover (CPU only: a cache of
	 * its own, no engine) */
	if (!tb_cuda()) {
		cache_cfg xc;
		h_cfg_disk(&xc, "dr-x", dir);
		char xerr[MOOR_ERRLEN] = "";
		cache *x;
		cache_hello_out xo;
		REQUIRE(cache_new(&xc, &x, xerr) == 0, "cache x: %s", xerr);
		defer dq = {0};
		arena_mover dmv = dm_mover(&dq);
		x->mv = &dmv;
		REQUIRE(cache_hello(x, lay, &xo, xerr) == 0, "hello x: %s",
			xerr);
		cache_req r = {
		    .ids = Q, .n = 1300, .session = "qx", .max_tokens = 4};
		cache_plan_out *xp = malloc(sizeof *xp);
		REQUIRE(xp, "oom");
		REQUIRE(cache_plan(x, &r, xp, xerr) == 0, "plan x: %s", xerr);
		CHECK(xp->tier == CACHE_TIER_DISK && xp->start == 1280,
		      "the deferred restore: %s at %llu",
		      cache_tier_name(xp->tier), (unsigned long long)xp->start);
		/* the daemon's sync before PLAN_OK */
		REQUIRE(cache_sync(x) == 0, "sync x");
		CHECK(h_stat(x, "disk.last_staged_host") == 1,
		      "staged in the host arena (the CUDA mover's path)");
		x->mv = &arena_mover_memcpy;
		uint64_t got_n;
		unsigned char *got = live_of(x, 1280, 1280, &got_n);
		CHECK(got_n == ref_n && !memcmp(got, ref, ref_n),
		      "the deferred restore's rows, sections and resident "
		      "anchor, bit for bit");
		free(got);
		cache_free(x);

		/* the 3rd file's read fails (EIO, on a reader thread) in the
		 * same setting: the plan starts cold, and every staging block
		 * goes back to the host arena */
		REQUIRE(cache_new(&xc, &x, xerr) == 0, "cache x2: %s", xerr);
		x->mv = &dmv;
		REQUIRE(cache_hello(x, lay, &xo, xerr) == 0, "hello x2: %s",
			xerr);
		uint64_t used0 = arena_used(x->host);
		atomic_store(&n_read, 0);
		dfile_fault = read3_fails;
		REQUIRE(cache_plan(x, &r, xp, xerr) == 0, "plan x2: %s", xerr);
		dfile_fault = NULL;
		REQUIRE(cache_sync(x) == 0, "sync x2");
		CHECK(xp->start == 0 && h_stat(x, "disk.hit_failed") == 1,
		      "a failed read: cold (%s at %llu), one failed restore",
		      cache_tier_name(xp->tier), (unsigned long long)xp->start);
		CHECK(arena_used(x->host) == used0,
		      "the staging went back to the host arena: %llu bytes "
		      "held, %llu before",
		      (unsigned long long)arena_used(x->host),
		      (unsigned long long)used0);
		free(xp);
		cache_free(x);
		free(dq.q);
	}
	free(ref);
	free(lay);

	/* admission by counts: head anchors off, an empty tier */
	open_h(&h, "dr-3", 0);
	REQUIRE(cache_clear(h.c, "disk") == 0, "clear");
	CHECK(h_stat(h.c, "disk.anchors") == 0 &&
		  h_stat(h.c, "disk.chunks") == 0,
	      "?tier=disk empties the tier");
	int32_t *H = h_ids(700, V, 93), *F1 = h_ids(600, V, 94),
		*F2 = h_ids(600, V, 95), *F3 = h_ids(600, V, 96);
	int32_t *S1 = h_cat(H, 700, F1, 600), *S2 = h_cat(H, 700, F2, 600),
		*S3 = h_cat(H, 700, F3, 600);
	h_part(S2, S1, 700, V);
	h_part(S3, S1, 700, V);
	h_part(S3, S2, 700, V);
	REQUIRE(h_turn_run(&h, S1, 1300, "s1", 4, &t) == 0, "S1");
	state_free(&t.st);
	cache_disk_wait(h.c);
	CHECK(h_stat(h.c, "disk.anchors") == 0,
	      "S1: every line counted once, nothing written: %lld",
	      h_stat(h.c, "disk.anchors"));
	h_close(&h);
	open_h(&h, "dr-4", 0);
	REQUIRE(h_turn_run(&h, S2, 1300, "s2", 4, &t) == 0, "S2");
	CHECK(t.plan.start == 0, "S2 is cold (a restart: nothing in RAM)");
	state_free(&t.st);
	cache_disk_wait(h.c);
	CHECK(h_stat(h.c, "disk.anchors") == 1 && lines_has(h.c, 640) &&
		  h_stat(h.c, "disk.chunks") == 5,
	      "S2: the line H's two cold reads share (640) and its 5 chunks "
	      "are written: %lld anchors, %lld chunks",
	      h_stat(h.c, "disk.anchors"), h_stat(h.c, "disk.chunks"));
	h_close(&h);
	open_h(&h, "dr-5", 0);
	REQUIRE(h_turn_run(&h, S3, 1300, "s3", 4, &t) == 0, "S3");
	CHECK(t.plan.tier == CACHE_TIER_DISK && t.plan.start == 640,
	      "a third folder resumes from the disk at 640: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	h_exact(&h, S3, 1300, &t, "S3 from the disk's shared line");
	state_free(&t.st);
	cache_disk_wait(h.c);
	h_close(&h);

	/* another fingerprint: every file swept, the counts kept */
	open_h(&h, "dr-6", 0);
	cache_layout *l2 = malloc(sizeof *l2);
	REQUIRE(l2, "oom");
	*l2 = *h.lay;
	l2->fingerprint[0] ^= 1;
	hello_as(&h, l2);
	CHECK(h_stat(h.c, "disk.anchors") == 0 &&
		  h_stat(h.c, "disk.chunks") == 0 &&
		  h_stat(h.c, "disk.swept") > 0,
	      "another fingerprint sweeps every file: %lld swept",
	      h_stat(h.c, "disk.swept"));
	REQUIRE(h_turn_run(&h, S1, 1300, "s1", 4, &t) == 0, "S1 again");
	CHECK(t.plan.start == 0, "S1 cold under the new fingerprint");
	h_exact(&h, S1, 1300, &t, "S1 cold");
	state_free(&t.st);
	cache_disk_wait(h.c);
	CHECK(lines_has(h.c, 1280),
	      "S1's second cold read admits its longest line (1280): the "
	      "counts outlived the sweep");
	/* the branch rule: H's lines were read cold three times (S1, S2, S1
	 * again) and S1's own twice, so the count falls at 768: 640 is a
	 * branch line, written beside the longest repeated line although
	 * no request of this fingerprint has read it from the disk */
	CHECK(lines_has(h.c, 640) && h_stat(h.c, "disk.anchors") == 2,
	      "S1 again writes the branch line 640 beside 1280: %lld anchors",
	      h_stat(h.c, "disk.anchors"));
	/* a session in a fourth folder with the caches in RAM emptied (a new
	 * cache would say HELLO with the first fingerprint first, which
	 * sweeps these files): from the branch line */
	REQUIRE(cache_clear(h.c, "ram") == 0, "clear ram");
	int32_t *F4 = h_ids(600, V, 97), *S4 = h_cat(H, 700, F4, 600);
	h_part(S4, S1, 700, V);
	REQUIRE(h_turn_run(&h, S4, 1300, "s4", 4, &t) == 0, "S4");
	CHECK(t.plan.tier == CACHE_TIER_DISK && t.plan.start == 640,
	      "a fourth folder resumes from the disk's branch line 640: %s at "
	      "%llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	h_exact(&h, S4, 1300, &t, "S4 from the branch line");
	state_free(&t.st);
	cache_disk_wait(h.c);
	h_close(&h);
	free(F4);
	free(S4);
	free(l2);

	/* nothing above the taint: a turn resumed at the end anchor forwards
	 * rows a decode's state computed, which no cold prefill writes, so
	 * even lines counted admit_after times (1 here) are not written */
	{
		cache_cfg cfg;
		h_cfg_disk(&cfg, "dr-8", dir);
		cfg.disk_head_anchors = 0;
		cfg.disk_admit_after = 1;
		h_open(&h, "f32_untied", 128, 2048, &cfg);
	}
	REQUIRE(cache_clear(h.c, "disk") == 0, "clear");
	int32_t *T1 = h_ids(1300, V, 98), *T3 = h_ids(700, V, 99);
	REQUIRE(h_turn_run(&h, T1, 1300, "t", 6, &t) == 0, "T1");
	int32_t ans[H_MAX_GEN];
	memcpy(ans, t.gen, sizeof ans);
	state_free(&t.st);
	cache_disk_wait(h.c);
	CHECK(h_stat(h.c, "disk.anchors") == 1 && lines_has(h.c, 1280),
	      "T1 (admit_after 1): its longest line 1280 is written: %lld "
	      "anchors",
	      h_stat(h.c, "disk.anchors"));
	int32_t *T2a = h_cat(T1, 1300, ans, 6), *T2 = h_cat(T2a, 1306, T3, 700);
	REQUIRE(h_turn_run(&h, T2, 2006, "t", 4, &t) == 0, "T2");
	CHECK(t.plan.tier == CACHE_TIER_END && t.plan.start == 1305 &&
		  t.plan.taint != CACHE_NO_TAINT && t.plan.taint <= 1305,
	      "T2 resumes at the end anchor 1305, tainted: %s at %llu, taint "
	      "%lld",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start,
	      (long long)t.plan.taint);
	state_free(&t.st);
	cache_disk_wait(h.c);
	{
		uint64_t l[64];
		int n = h_lines(h.c, "disk", l, 64), above = 0;
		for (int i = 0; i < n; i++)
			above += l[i] > 1305;
		CHECK(n == 1 && !above,
		      "T2 wrote nothing above its taint: %d anchors, %d "
		      "above 1305",
		      n, above);
	}
	/* the same prompt of another session, the RAM caches emptied: from
	 * the disk's clean line, bit for bit a cold prefill's */
	REQUIRE(cache_clear(h.c, "ram") == 0, "clear ram");
	REQUIRE(h_turn_run(&h, T2, 2006, "u", 4, &t) == 0, "T2 again");
	CHECK(t.plan.tier == CACHE_TIER_DISK && t.plan.start == 1280,
	      "T2 of another session: from the disk at 1280: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	h_exact(&h, T2, 2006, &t, "T2 from the disk below the taint");
	state_free(&t.st);
	cache_disk_wait(h.c);
	h_close(&h);

	/* the read must cost less than the prefill it saves: with a prefill
	 * rate no read beats (before any prefill is measured), T2's line 1280
	 * stays on the disk and T2 prefills cold, bit for bit */
	{
		cache_cfg cfg;
		h_cfg_disk(&cfg, "dr-9", dir);
		cfg.disk_head_anchors = 0;
		cfg.prefill_tps = 4000000000u;
		h_open(&h, "f32_untied", 128, 2048, &cfg);
	}
	CHECK(lines_has(h.c, 1280), "T2's line 1280 is on the disk");
	REQUIRE(h_turn_run(&h, T2, 2006, "v", 4, &t) == 0, "T2, fast prefill");
	CHECK(t.plan.tier == CACHE_TIER_NONE && t.plan.start == 0 &&
		  h_stat(h.c, "disk.hits") == 0,
	      "a read dearer than the prefill is not taken: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	h_exact(&h, T2, 2006, &t, "T2 cold beside a dear read");
	state_free(&t.st);
	cache_disk_wait(h.c);
	h_close(&h);
	free(T1);
	free(T2a);
	free(T2);
	free(T3);
	free(H);
	free(F1);
	free(F2);
	free(F3);
	free(S1);
	free(S2);
	free(S3);
	free(A);
	free(A2);
	free(Q);
	free(N);
	dfile_rm_rf(AT_FDCWD, dir);
	return t_done("test_disk_resume");
}
