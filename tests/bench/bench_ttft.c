/* bench_ttft: time to the first token of a follow-up turn after H tokens of
 * history (default 8k and 32k), from every source side by side in one run,
 * on the CPU backend or a device backend (CUDA), with the engine computing
 * into the cache's arenas in this process as engined does into cached's:
 *
 *   cold              the follow-up with nothing cached (the reference)
 *   resident anchors  the rows in place and the grid anchor at H
 *   end anchor        the state where the last answer ended: only the new
 *                     tokens are prefilled. Goal (issue 10): 30 ms + a
 *                     plain prefill of the same tokens at the same
 *                     position, measured in the same run (the scratch rows
 *                     past the end anchor: cache_scratch_plan)
 *   park              after another session's turn parked the rows in the
 *                     host arena (the swap back, block by block)
 *   pin               after a compaction of the same session pinned the
 *                     head in the host arena (its rows and the anchor at H
 *                     copied back)
 *   engine restart    the model freed, loaded again and attached: the cache
 *                     hands the live state back (the daemon test shows the
 *                     same after a real kill -9)
 *   spill             a planned restart of cached: the drain writes the
 *                     conversation to the session spill, a new cache and
 *                     engine read it back at the attach (the read-back is
 *                     reported beside the row; the TTFT is the request's)
 *   disk              a kill -9 of cached (no drain, no spill) and a new
 *                     session that shares the history: from the chunks and
 *                     the anchor the first request wrote
 *
 * On CUDA the device arena is cudaMalloc'ed (cached/arena_cuda.c, as cached
 * makes it) and the host arena is shm registered by the CUDA mover, which
 * copies on its own stream: the park and pin rows time the real restore
 * path, and each prints its GB/s (the bytes the restore copies into the
 * live sequence over the plan's time, its sync included) and, below the
 * table, where that time went (the mover's counters, cache_mover_stats:
 * copies and calls to the runtime, the time issuing them, the time
 * waiting for them, and the rest: the plan's own work). The arenas are
 * sized from what a length needs (the live sequence of the window, the
 * resident anchors' budget, the park and the pin of the whole history)
 * against the device's free memory after the weights load and /dev/shm's
 * room; a length that does not fit is skipped with a line naming the
 * numbers. The park and pin budgets hold the whole history here (the
 * product's defaults, 4 GiB each, hold about 33k tokens of the 27B).
 *
 * Every row answers the same follow-up (the history, turn 1's answer, NEW
 * new tokens; the turns between them set up each source), so one cold
 * prefill of it is every row's reference. TTFT is cache_plan (its copies
 * synced) to the first token: the prefill with the last token's logits
 * brought to the host and their argmax there (the checks read them: for
 * the 27B a 1 MB copy and a scan of 248,320 floats, where the daemon
 * samples on the device).
 *
 * Exactness, on every backend: the resident, park, pin and disk rows resume
 * at the grid anchor at H, below any row a decode wrote, so their logits
 * equal the cold prefill's bit for bit (memcmp) and so do their greedy
 * tokens; the end anchor's state was written by decode steps, so its
 * tokens are held to the greedy gate (the same tokens as cold, the
 * design's rule above the taint line; on dummy weights, whose random
 * logits are near ties, to a distance a layer instead: check_row). The
 * restart and spill rows resume
 * from an end anchor recomputed to the same bits (the history's turn run
 * again from its anchor at H - 1024), so their logits equal the end
 * anchor row's (memcmp). A check that fails makes the exit status 1 after
 * the table.
 *
 * Usage: bench_ttft MODEL_DIR [THREADS] [H...]
 *          [--backend cpu|cuda|auto] [--load-format safetensors|dummy]
 *          [--lens H,H,...] [--new N] [--threads N] [--skip ROW,...]
 * (ROW: restart, spill, disk, park, pin; MOOR_BENCH_DIR: where the spill
 * and the disk tier go, default the current directory). Progress lines
 * with the time since start go to stdout before the table. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fcntl.h>

#include "arena.h"
#include "cache.h"
#include "dfile.h"
#include "eng.h"
#include "layout_of.h"
#include "moor.h"

#define GEN 8
#define MAX_LENS 8
#define GiB (1024.0 * 1024.0 * 1024.0)
/* device memory left beside the arena for what the engine allocates after
 * its load (decode graphs, cuBLAS' workspace, the sampler) */
#define DEV_MARGIN (2ull << 30)
#define GOAL_MS 30.0

typedef struct env {
	const char *dir;
	const kern_ops *ops;
	int threads, dummy, cuda;
	kern_ctx *ctx;
	eng_model *m;
	cache *c;
	cache_layout lay;
	eng_seq s;
	float *logits;
	int V;
} env;

static double T0;

/* A progress line: the seconds since start, then the text. */
static void say(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("  [%8.1f s] ", moor_now() - T0);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static void die(const char *what, int rc, const char *err)
{
	fflush(stdout);
	fprintf(stderr, "bench_ttft: %s: %s %s\n", what, moor_strerror(rc),
		err ? err : "");
	exit(1);
}

/* Creates the backend's context and loads the model for a window. */
static void engine_load(env *e, int64_t window)
{
	char err[MOOR_ERRLEN] = "";
	kern_config kc = {.threads = e->threads, .device = 0};
	int rc = e->ops->create(&kc, &e->ctx);
	if (rc)
		die("backend", rc, NULL);
	eng_opts o = {.grid = 1024,
		      .window = window,
		      .threads = e->threads,
		      .load_format =
			  e->dummy ? ENG_LOAD_DUMMY : ENG_LOAD_SAFETENSORS,
		      .seed = 1,
		      .progress = e->cuda};
	double t0 = moor_now();
	if ((rc = eng_model_load(e->dir, e->ops, e->ctx, &o, &e->m, err)))
		die("load", rc, err);
	const eng_layout *y = eng_model_layout(e->m);
	h_layout(y, e->dir, &e->lay);
	e->V = eng_model_vocab(e->m);
	e->logits = malloc((size_t)e->V * 4);
	say("model loaded (%s, window %lld): %.2f GB of weights in %.2f s",
	    e->dummy ? "dummy weights" : "safetensors", (long long)window,
	    (double)eng_model_weight_bytes(e->m) / 1e9, moor_now() - t0);
	static int described;
	if (!described++) {
		char d[512];
		e->ops->describe(e->ctx, d, sizeof d);
		say("device: %s", d);
	}
}

/* Attaches the loaded engine to the cache (HELLO): the live sequence's
 * buffers are the device arena's. Returns the seconds it took (a new
 * cache reads the spill back here). */
static double engine_attach(env *e, cache_hello_out *ho)
{
	char err[MOOR_ERRLEN] = "";
	double t0 = moor_now();
	int rc = cache_hello(e->c, &e->lay, ho, err);
	if (rc)
		die("hello", rc, err);
	double dt = moor_now() - t0;
	const eng_layout *y = eng_model_layout(e->m);
	e->s.sec = calloc((size_t)y->n_sections + 1, sizeof(void *));
	e->s.view = calloc((size_t)y->n_views + 1, sizeof(void *));
	char *base = cache_dev_base(e->c);
	for (int i = 0; i < y->n_sections; i++)
		e->s.sec[i] = base + ho->sec_off[i];
	for (int i = 0; i < y->n_views; i++)
		e->s.view[i] = base + ho->view_off[i];
	return dt;
}

static void engine_stop(env *e)
{
	free(e->s.sec);
	free(e->s.view);
	e->s.sec = NULL;
	e->s.view = NULL;
	free(e->logits);
	e->logits = NULL;
	eng_model_free(e->m);
	e->m = NULL;
	e->ops->destroy(e->ctx);
	e->ctx = NULL;
}

static int32_t argmax(const float *l, int V)
{
	int32_t b = 0;
	for (int i = 1; i < V; i++)
		if (l[i] > l[b])
			b = i;
	return b;
}

typedef struct turn {
	double ttft;   /* plan to first token, s */
	double plan_s; /* the plan and its restore copies (synced), s */
	uint64_t start, taint, restore_bytes;
	int have_mv;		/* mv: the mover's counters over the plan */
	arena_mover_stats mv;	/* and its sync (the differences) */
	int tier;
	int32_t gen[GEN];
	float *lg; /* [V] the first token's logits (owned) */
} turn;

/* One turn as engined runs it: plan (and the cache's copies synced),
 * prefill with the slots, GEN greedy tokens (the last one not forwarded),
 * the engine's queues synced, commit. ttft: plan to first token. The
 * restore's bytes come from a peek before the plan (which changes
 * nothing), outside the timed part. */
static turn run(env *e, const int32_t *ids, int64_t n, const char *session,
		int no_cache)
{
	static cache_plan_out p;
	static eng_slot es[CACHE_MAX_SLOTS];
	char err[MOOR_ERRLEN] = "";
	turn t = {0};
	cache_req r = {.ids = ids,
		       .n = (uint64_t)n,
		       .session = session,
		       .max_tokens = GEN,
		       .no_cache = no_cache};
	int rc;
	if (!no_cache) {
		cache_peek_out pk;
		if ((rc = cache_peek(e->c, &r, &pk, err)))
			die("peek", rc, err);
		t.restore_bytes = pk.restore_bytes;
	}
	arena_mover_stats m0, m1;
	t.have_mv = cache_mover_stats(e->c, &m0) == 0;
	double t0 = moor_now();
	if ((rc = cache_plan(e->c, &r, &p, err)))
		die("plan", rc, err);
	if ((rc = cache_sync(e->c)))
		die("the cache's restore copies", rc, NULL);
	t.plan_s = moor_now() - t0;
	if (t.have_mv && cache_mover_stats(e->c, &m1) == 0) {
		t.mv.copies = m1.copies - m0.copies;
		t.mv.calls = m1.calls - m0.calls;
		t.mv.bytes = m1.bytes - m0.bytes;
		t.mv.syncs = m1.syncs - m0.syncs;
		t.mv.issue_s = m1.issue_s - m0.issue_s;
		t.mv.wait_s = m1.wait_s - m0.wait_s;
	}
	char *base = cache_dev_base(e->c);
	for (uint32_t i = 0; i < p.n_slots; i++) {
		es[i].line = (int64_t)p.slots[i].line;
		es[i].dst = base + p.slots[i].offset;
	}
	e->s.len = (int64_t)p.start;
	int filled = 0;
	rc = eng_prefill_slots(e->m, &e->s, ids + p.start, n - (int64_t)p.start,
			       e->logits, ENG_LOGITS_LAST, es, (int)p.n_slots,
			       &filled);
	if (rc)
		die("prefill", rc, NULL);
	t.gen[0] = argmax(e->logits, e->V);
	t.ttft = moor_now() - t0;
	t.start = p.start;
	t.taint = p.taint;
	t.tier = p.tier;
	t.lg = malloc((size_t)e->V * 4);
	memcpy(t.lg, e->logits, (size_t)e->V * 4);
	for (int i = 1; i < GEN; i++) {
		if ((rc = eng_decode(e->m, &e->s, t.gen[i - 1], e->logits)))
			die("decode", rc, NULL);
		t.gen[i] = argmax(e->logits, e->V);
	}
	if ((rc = eng_model_sync(e->m)))
		die("the engine's queues", rc, NULL);
	if ((rc = cache_commit(e->c, (uint32_t)filled, t.gen, GEN - 1)))
		die("commit", rc, NULL);
	return t;
}

/* A plain prefill of ids[end anchor, n) in the scratch rows past the end
 * anchor (cache_scratch_plan: nothing the caches hold changes), to the
 * first token; returns its seconds, the plan's section copy left out. */
static double plain_prefill(env *e, const int32_t *ids, int64_t n)
{
	static cache_plan_out p;
	char err[MOOR_ERRLEN] = "";
	cache_req r = {.ids = ids, .n = (uint64_t)n, .max_tokens = 1};
	int rc = cache_scratch_plan(e->c, &r, &p, err);
	if (rc)
		die("scratch plan", rc, err);
	if ((rc = cache_sync(e->c)))
		die("the cache's copies", rc, NULL);
	e->s.len = (int64_t)p.start;
	double t0 = moor_now();
	rc = eng_prefill(e->m, &e->s, ids + p.start, n - (int64_t)p.start,
			 e->logits, ENG_LOGITS_LAST);
	if (rc)
		die("scratch prefill", rc, NULL);
	(void)argmax(e->logits, e->V);
	double dt = moor_now() - t0;
	if ((rc = eng_model_sync(e->m)))
		die("the engine's queues", rc, NULL);
	if ((rc = cache_abort(e->c, 0, p.start)))
		die("scratch end", rc, NULL);
	return dt;
}

static void ids_fill(int32_t *d, int64_t n, int V, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 7;
	for (int64_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		d[i] = (int32_t)(x % (uint64_t)V);
	}
}

/* ---- the table ---- */

enum { R_COLD, R_RES, R_END, R_PARK, R_PIN, R_RST, R_SPILL, R_DISK, R_N };
static const char *const row_name[R_N] = {"cold",
					  "resident anchors",
					  "end anchor",
					  "park (after B)",
					  "pin (after compaction)",
					  "after engine restart",
					  "spill (cached restart)",
					  "disk (new cached)"};
/* --skip names */
static const char *const row_key[R_N] = {"cold", "resident", "end",   "park",
					 "pin",	 "restart",  "spill", "disk"};

typedef struct rowr {
	int done;
	char why[200]; /* skipped: why */
	turn t;
	int64_t n;
	double goal; /* s; 0: none */
	char check[64];
	char note[224]; /* the check's numbers */
	int bad;
} rowr;

typedef struct lenr {
	int64_t H;
	char skipped[400];
	rowr r[R_N];
	double plain_s;
	int plain_n;
	double drain_s, back_s, back_gb;
	double rst2_s; /* the turn after the first one after the restart */
	double load_s;
} lenr;

static void print_row(int64_t H, int k, const rowr *w, double cold)
{
	char gbs[16] = "-", goal[24] = "-", rest[16] = "-";
	if (!w->done) {
		printf("%8lld  %-24s  skipped: %s\n", (long long)H, row_name[k],
		       w->why);
		return;
	}
	const turn *t = &w->t;
	int host = t->tier == CACHE_TIER_PARK || t->tier == CACHE_TIER_PIN ||
		   t->tier == CACHE_TIER_DISK || t->tier == CACHE_TIER_STORE ||
		   t->tier == CACHE_TIER_SPILL;
	if (host && t->restore_bytes) {
		snprintf(rest, sizeof rest, "%.3f", t->restore_bytes / 1e9);
		snprintf(gbs, sizeof gbs, "%.3g",
			 t->restore_bytes / 1e9 / t->plan_s);
	}
	if (w->goal > 0)
		snprintf(goal, sizeof goal, "%.1f %s", w->goal * 1e3,
			 t->ttft <= w->goal ? "met" : "MISSED");
	printf("%8lld  %-24s %9.1f %9.1f %8llu %7lld %9s %6s %9.1f %-12s "
	       "%-9s %s\n",
	       (long long)H, row_name[k], t->ttft * 1e3, cold / t->ttft,
	       (unsigned long long)t->start,
	       (long long)(w->n - (int64_t)t->start), rest, gbs,
	       t->plan_s * 1e3, goal, cache_tier_name(t->tier), w->check);
}

/* Where a host restore's plan time went, from the mover's counters. */
static void plan_split(const turn *t, char *s, size_t n)
{
	const arena_mover_stats *m = &t->mv;
	snprintf(s, n,
		 "plan %.2f ms = %llu copies (%.3f GB) in %llu calls issued "
		 "in %.2f ms + %.2f ms waiting for them + %.2f ms of the "
		 "plan's own work",
		 t->plan_s * 1e3, (unsigned long long)m->copies,
		 m->bytes / 1e9, (unsigned long long)m->calls,
		 m->issue_s * 1e3, m->wait_s * 1e3,
		 (t->plan_s - m->issue_s - m->wait_s) * 1e3);
}

static void say_split(const char *what, const turn *t)
{
	char sp[256];
	if (!t->have_mv)
		return;
	plan_split(t, sp, sizeof sp);
	say("%s: %s", what, sp);
}

static void print_head(const env *e)
{
	printf("\nTTFT of a follow-up turn (%s, %s): plan to first token; "
	       "cached = the line it resumed at; restored GB and GB/s: the "
	       "bytes a host-arena restore copies into the live sequence over "
	       "the plan's time (the park's swap also moves the rows in place "
	       "out); goal: %.0f ms + a plain prefill of the re-read tokens "
	       "at that position\n",
	       e->ops->name, e->dummy ? "dummy weights" : "safetensors",
	       GOAL_MS);
	printf("%8s  %-24s %9s %9s %8s %7s %9s %6s %9s %-12s %-9s %s\n",
	       "history", "source", "TTFT ms", "cold/TTFT", "cached", "re-read",
	       "restored", "GB/s", "plan ms", "goal ms", "tier", "check");
}

static void print_len(const lenr *R)
{
	if (R->skipped[0]) {
		printf("%8lld  skipped: %s\n", (long long)R->H, R->skipped);
		return;
	}
	double cold = R->r[R_COLD].t.ttft;
	for (int j = 0; j < R_N; j++)
		print_row(R->H, j, &R->r[j], cold);
	printf("%8s  (plain prefill of %d tokens at %lld: %.2f ms", "",
	       R->plain_n, (long long)(R->H + GEN - 1), R->plain_s * 1e3);
	if (R->r[R_RST].done)
		printf("; the turn after the restart's first: %.2f ms",
		       R->rst2_s * 1e3);
	if (R->r[R_SPILL].done)
		printf("; the drain took %.2f s, the attach with the read-back "
		       "of about %.2f GB %.2f s",
		       R->drain_s, R->back_gb, R->back_s);
	printf("; a model load %.2f s)\n", R->load_s);
	for (int j = 0; j < R_N; j++) {
		const turn *t = &R->r[j].t;
		char sp[256];
		if (!R->r[j].done || !t->have_mv || !t->restore_bytes ||
		    (t->tier != CACHE_TIER_PARK && t->tier != CACHE_TIER_PIN))
			continue;
		plan_split(t, sp, sizeof sp);
		printf("%8s  (%s: %s)\n", "", row_name[j], sp);
	}
	fflush(stdout);
}

/* Checks a row against the cold reference (and, for the restart and spill
 * rows, the end anchor row): logits by memcmp where the resume is below
 * every row a decode wrote, the greedy tokens above. */
static void check_row(env *e, rowr *w, const turn *cold, const turn *end,
		      int want_tier, int want_tier2)
{
	const turn *t = &w->t;
	int V = e->V;
	char *c = w->check;
	size_t cn = sizeof w->check;
	int same_gen = memcmp(t->gen, cold->gen, sizeof t->gen) == 0;
	/* how far the first token's logits are from cold's, against the
	 * margin of cold's pick (its top two), and the greedy tokens
	 * that agree: what a reader needs to tell a near tie from a fault */
	double dmax = 0, top1 = -1e30, top2 = -1e30, dd = 0, cc = 0;
	for (int i = 0; i < V; i++) {
		double d = fabs((double)t->lg[i] - cold->lg[i]);
		dmax = d > dmax ? d : dmax;
		double v = cold->lg[i];
		dd += d * d;
		cc += v * v;
		if (v > top1) {
			top2 = top1;
			top1 = v;
		} else if (v > top2) {
			top2 = v;
		}
	}
	int agree = 0;
	while (agree < GEN && t->gen[agree] == cold->gen[agree])
		agree++;
	snprintf(w->note, sizeof w->note,
		 "max |logit - cold's| %.3g, rms %.3g of cold's rms %.3g "
		 "(cold's top two %.3g apart), greedy tokens %d of %d as "
		 "cold's",
		 dmax, sqrt(dd / V), sqrt(cc / V), top1 - top2, agree, GEN);
	if (t->tier != want_tier && t->tier != want_tier2) {
		snprintf(c, cn, "TIER (want %s)", cache_tier_name(want_tier));
		w->bad = 1;
		return;
	}
	if (end) {
		int eq = memcmp(t->lg, end->lg, (size_t)V * 4) == 0 &&
			 memcmp(t->gen, end->gen, sizeof t->gen) == 0;
		snprintf(c, cn, "%s, %s", eq ? "=end" : "DIFFERS from end",
			 same_gen   ? "greedy=cold"
			 : e->dummy ? "near ties (dummy: as the end row)"
				    : "GREEDY DIFFERS");
		/* on dummy weights the end anchor row holds the distance */
		w->bad = !eq || (!same_gen && !e->dummy);
	} else if (t->taint == CACHE_NO_TAINT) {
		int eq = memcmp(t->lg, cold->lg, (size_t)V * 4) == 0;
		snprintf(c, cn, "%s",
			 eq && same_gen ? "=cold (bits)"
			 : eq		? "GREEDY DIFFERS"
					: "LOGITS DIFFER");
		w->bad = !eq || !same_gen;
	} else if (e->dummy && !same_gen) {
		/* Dummy weights: seeded random values, whose logits are near
		 * ties (cold's top two 0.002 to 0.13 apart against an rms of
		 * 0.58 at the 27B's shapes), so the greedy gate cannot hold.
		 * What is held instead is the distance the decode steps
		 * leave: measured on the lent H200 and H100 (8k, bf16), the
		 * rms of the first token's logit difference over cold's rms
		 * grew with the depth as 0.33% to 0.41% a layer (4, 8, 16, 32
		 * and 64 layers: 1.3, 2.8, 5.7, 12.1 and 26%), and at 4
		 * layers the decode is at transformers' own floor
		 * (run_golden27.sh).
		 * The bound, 0.6% a layer, fails a decode 1.5 times off. */
		const eng_layout *L = eng_model_layout(e->m);
		int layers = L->n_sections / 2 + L->n_views / 2; /* GDN: conv
			tail + state; attention: K + V */
		double rel = cc > 0 ? sqrt(dd / cc) : 0, bound = 0.006 * layers;
		snprintf(c, cn, "%s (dummy: rms %.3g <= %.3g)",
			 rel <= bound ? "near ties" : "TOO FAR", rel, bound);
		w->bad = rel > bound;
	} else {
		snprintf(c, cn, "%s",
			 same_gen ? "greedy=cold" : "GREEDY DIFFERS");
		w->bad = !same_gen;
	}
}

/* One history length: every row, its checks; the count of failed
 * checks. A length that does not fit is skipped (R->skipped says why). */
static int bench_len(env *e, lenr *R, int k, int64_t H, int NEW,
		     const int *skip_row)
{
	int bad = 0;
	const int64_t grid = 1024, CN = 2 * grid;
	R->H = H;
	rowr *w = R->r;
	if (H % grid || H < 4 * grid) {
		snprintf(R->skipped, sizeof R->skipped,
			 "a history of %lld tokens: the bench needs a "
			 "multiple of the grid (%lld) of at least %lld",
			 (long long)H, (long long)grid, (long long)(4 * grid));
		say("%s", R->skipped);
		return 0;
	}
	int64_t nf = H + GEN + NEW, window = H + 4 * (GEN + NEW) + 64;
	say("history %lld: loading the model", (long long)H);
	double tl = moor_now();
	engine_load(e, window);
	R->load_s = moor_now() - tl;

	/* what the length needs: the live sequence (sections and the
	 * window's rows), the resident anchors' budget, the end
	 * anchor and the slots; in the host arena the park or the pin
	 * of the whole history with their anchors (the park is
	 * cleared before the pin), the state store, the spill's and
	 * the park's staging blocks */
	uint64_t row = cache_layout_row_bytes(&e->lay),
		 sec = cache_layout_section_bytes(&e->lay) + 64;
	cache_cfg cfg;
	cache_cfg_defaults(&cfg);
	uint64_t blk = (uint64_t)grid * row + 64;
	uint64_t lines = (uint64_t)(window / grid + 2);
	uint64_t resident = cfg.resident_bytes;
	if (resident > lines * sec)
		resident = lines * sec;
	uint64_t span = (lines + 1) * blk + 6 * sec;
	uint64_t dev_need = sec + (uint64_t)window * row + 64 * 4 + resident +
			    4 * sec + (256ull << 20);
	uint64_t store = cfg.store_bytes;
	if (store > 16 * sec)
		store = 16 * sec;
	uint64_t host_need = span + store + 4 * blk + (256ull << 20);
	char err[MOOR_ERRLEN] = "";
	if (e->cuda) {
		uint64_t fr, tot;
		int rc = arena_cuda_mem(0, &fr, &tot, err);
		if (rc)
			die("device memory", rc, err);
		say("device: %.2f GiB free of %.2f GiB after the "
		    "weights; the length needs %.2f GiB (live sequence "
		    "%.2f GiB, resident anchors %.2f GiB) + %.1f GiB "
		    "kept free",
		    fr / GiB, tot / GiB, dev_need / GiB,
		    (sec + (double)window * row) / GiB, resident / GiB,
		    DEV_MARGIN / GiB);
		if (dev_need + DEV_MARGIN > fr) {
			snprintf(R->skipped, sizeof R->skipped,
				 "does not fit the device: it needs "
				 "%.2f GiB + %.1f GiB kept free, "
				 "%.2f GiB are free of %.2f GiB after "
				 "%.2f GB of weights",
				 dev_need / GiB, DEV_MARGIN / GiB, fr / GiB,
				 tot / GiB, eng_model_weight_bytes(e->m) / 1e9);
			say("history %lld: skipped: %s", (long long)H,
			    R->skipped);
			engine_stop(e);
			return 0;
		}
	}
	/* /dev/shm's free room bounds the arenas in it (the machine's
	 * memory is not checked: a VM's grows as it is used) */
	uint64_t fs_free = 0, fs_size = 0, ram = 0;
	(void)arena_shm_room(&fs_free, &fs_size, &ram);
	uint64_t shm_need = host_need + (e->cuda ? 0 : dev_need);
	say("/dev/shm: %.2f GiB free of %.2f GiB, memory %.2f GiB; the "
	    "arenas there need %.2f GiB",
	    fs_free / GiB, fs_size / GiB, ram / GiB, shm_need / GiB);
	if (fs_size && shm_need > fs_free) {
		snprintf(R->skipped, sizeof R->skipped,
			 "the arenas in /dev/shm need %.2f GiB: %.2f GiB free "
			 "of %.2f GiB",
			 shm_need / GiB, fs_free / GiB, fs_size / GiB);
		say("history %lld: skipped: %s", (long long)H, R->skipped);
		engine_stop(e);
		return 0;
	}
	snprintf(cfg.arena_prefix, sizeof cfg.arena_prefix, "moor-bench-%d",
		 (int)getpid());
	cfg.device_bytes = dev_need;
	cfg.host_bytes = host_need;
	cfg.mem_ceiling = cfg.mem_peak = 1ull << 40;
	cfg.resident_bytes = resident;
	/* the pin holds the history's head up to H with the anchor
	 * at H alone (every other line is not the pin's), and the
	 * compaction (CN tokens, no guest) has no line of the pin's */
	cfg.pin_every = (uint32_t)H;
	cfg.pin_upto = (uint32_t)H;
	cfg.pin_bytes = span;
	cfg.park_bytes = span;
	cfg.guest_max = (uint32_t)grid;
	cfg.store_bytes = store;
	if (cfg.store_entry_bytes > store)
		cfg.store_entry_bytes = store;
	cfg.dev_cuda = e->cuda ? 0 : -1;
	cfg.unified = !e->cuda;
	cfg.disk_on = 1;
	cfg.disk_min_free = 0;	/* the bench's file system */
	snprintf(cfg.spill_dir, sizeof cfg.spill_dir, "%s/bench-spill-%d",
		 getenv("MOOR_BENCH_DIR") ? getenv("MOOR_BENCH_DIR") : ".",
		 (int)getpid());
	say("history %lld: the arenas: device %.2f GiB (%s), host "
	    "%.2f GiB (shm%s)",
	    (long long)H, dev_need / GiB, e->cuda ? "cudaMalloc" : "shm",
	    host_need / GiB, e->cuda ? ", registered by the CUDA mover" : "");
	double tc = moor_now();
	int rc = cache_new(&cfg, &e->c, err);
	if (rc)
		die("cache_new", rc, err);
	cache_hello_out ho;
	engine_attach(e, &ho);
	say("history %lld: cache up and attached in %.2f s", (long long)H,
	    moor_now() - tc);

	int32_t *A = malloc((size_t)(window + 64) * 4),
		*P1 = malloc((size_t)(window + 64) * 4),
		*S = malloc((size_t)(window + 64) * 4),
		*B = malloc((size_t)H * 4), *C = malloc((size_t)CN * 4);
	ids_fill(A, H, e->V, 1 + (uint64_t)k);
	ids_fill(B, H, e->V, 100 + (uint64_t)k);
	ids_fill(C, CN, e->V, 200 + (uint64_t)k);
	if (C[0] == A[0])
		C[0] = (A[0] + 1) % e->V;

	/* turn 1: the history, cold through the cache (its anchors,
	 * its end anchor at H + GEN - 1) */
	turn t1 = run(e, A, H, "A", 0);
	free(t1.lg);
	say("turn 1: %lld tokens prefilled cold in %.2f s (TTFT)", (long long)H,
	    t1.ttft);
	/* session A's first long request: the disk tier writes its
	 * head while nothing runs (not in a TTFT) */
	cache_disk_wait(e->c);
	/* the follow-up: the answer (the last token was sampled, not
	 * forwarded) and NEW new tokens */
	memcpy(P1, A, (size_t)H * 4);
	memcpy(P1 + H, t1.gen, GEN * 4);
	ids_fill(P1 + H + GEN, NEW, e->V, 51);

	/* the goal's plain prefill: the same count of tokens at the
	 * same position, in the scratch rows past the end anchor
	 * (twice: the first picks what a new shape needs) */
	memcpy(S, A, (size_t)H * 4);
	memcpy(S + H, t1.gen, (GEN - 1) * 4);
	ids_fill(S + H + GEN - 1, NEW + 1, e->V, 57);
	double pp = plain_prefill(e, S, nf);
	double pp2 = plain_prefill(e, S, nf);
	R->plain_s = pp2 < pp ? pp2 : pp;
	R->plain_n = NEW + 1;
	say("plain prefill of %d tokens at %lld: %.2f ms (then %.2f)", NEW + 1,
	    (long long)(H + GEN - 1), pp * 1e3, pp2 * 1e3);

	/* the end anchor */
	w[R_END].t = run(e, P1, nf, "A", 0);
	w[R_END].n = nf;
	w[R_END].done = 1;
	w[R_END].goal = GOAL_MS / 1e3 + R->plain_s;
	say("end anchor: TTFT %.2f ms from %llu (%s)", w[R_END].t.ttft * 1e3,
	    (unsigned long long)w[R_END].t.start,
	    cache_tier_name(w[R_END].t.tier));

	/* the restart and the spill resume from the end anchor of the
	 * history's turn recomputed: the same turn again from the
	 * anchor at H - 1024, the same bits */
	if (!skip_row[R_RST]) {
		turn a = run(e, A, H, "A", 0);
		free(a.lg);
		say("turn 1 again from %llu (%s): %s",
		    (unsigned long long)a.start, cache_tier_name(a.tier),
		    memcmp(a.gen, t1.gen, sizeof a.gen) ? "ANOTHER ANSWER"
							: "the same answer");
		say("engine restart: freeing the model");
		engine_stop(e);
		engine_load(e, window);
		double dt = engine_attach(e, &ho);
		say("engine attached in %.3f s (%s, %llu tokens "
		    "resident)",
		    dt, ho.adopted ? "the live state adopted" : "NOT ADOPTED",
		    (unsigned long long)ho.resident_len);
		w[R_RST].t = run(e, P1, nf, "A", 0);
		w[R_RST].n = nf;
		w[R_RST].done = 1;
		w[R_RST].goal = w[R_END].goal;
		say("after the restart: TTFT %.2f ms from %llu (%s)",
		    w[R_RST].t.ttft * 1e3, (unsigned long long)w[R_RST].t.start,
		    cache_tier_name(w[R_RST].t.tier));
		/* the next turn of the same engine: what the first turn
		 * after a restart pays for a new engine's first use */
		int64_t n2 = nf + GEN + NEW;
		memcpy(S, P1, (size_t)nf * 4);
		memcpy(S + nf, w[R_RST].t.gen, GEN * 4);
		ids_fill(S + nf + GEN, NEW, e->V, 58);
		turn a2 = run(e, S, n2, "A", 0);
		free(a2.lg);
		R->rst2_s = a2.ttft;
		say("the turn after it: TTFT %.2f ms from %llu (%s)",
		    a2.ttft * 1e3, (unsigned long long)a2.start,
		    cache_tier_name(a2.tier));
	} else {
		snprintf(w[R_RST].why, sizeof w[R_RST].why, "--skip");
	}

	if (!skip_row[R_SPILL]) {
		turn a = run(e, A, H, "A", 0);
		free(a.lg);
		say("turn 1 again from %llu (%s); cached's drain",
		    (unsigned long long)a.start, cache_tier_name(a.tier));
		double d0 = moor_now();
		if ((rc = cache_drain(e->c, err)))
			die("drain", rc, err);
		R->drain_s = moor_now() - d0;
		say("drained in %.2f s; a new cache and engine", R->drain_s);
		engine_stop(e);
		cache_free(e->c);
		if ((rc = cache_new(&cfg, &e->c, err)))
			die("cache_new", rc, err);
		engine_load(e, window);
		R->back_s = engine_attach(e, &ho);
		R->back_gb = ((double)ho.resident_len * row + 5.0 * sec) / 1e9;
		say("read back %llu tokens at the attach in %.2f s",
		    (unsigned long long)ho.resident_len, R->back_s);
		w[R_SPILL].t = run(e, P1, nf, "A", 0);
		w[R_SPILL].n = nf;
		w[R_SPILL].done = 1;
		w[R_SPILL].goal = w[R_END].goal;
		say("from the spill: TTFT %.2f ms from %llu (%s)",
		    w[R_SPILL].t.ttft * 1e3,
		    (unsigned long long)w[R_SPILL].t.start,
		    cache_tier_name(w[R_SPILL].t.tier));
	} else {
		snprintf(w[R_SPILL].why, sizeof w[R_SPILL].why, "--skip");
	}

	/* cold: the same follow-up, nothing cached (no_cache: the
	 * rows below the first decoded one and their anchors stay) */
	w[R_COLD].t = run(e, P1, nf, "A", 1);
	w[R_COLD].n = nf;
	w[R_COLD].done = 1;
	snprintf(w[R_COLD].check, sizeof w[R_COLD].check, "reference");
	say("cold: TTFT %.2f s", w[R_COLD].t.ttft);

	/* the resident anchors: the rows in place up to H (the
	 * cold turn kept nothing above), the anchor at H */
	w[R_RES].t = run(e, P1, nf, "A", 0);
	w[R_RES].n = nf;
	w[R_RES].done = 1;
	say("resident anchors: TTFT %.2f ms from %llu (%s)",
	    w[R_RES].t.ttft * 1e3, (unsigned long long)w[R_RES].t.start,
	    cache_tier_name(w[R_RES].t.tier));

	/* another session's turn parks A's rows; A comes back */
	if (!skip_row[R_PARK]) {
		turn b = run(e, B, H, "B", 0);
		free(b.lg);
		say("session B: %lld tokens in %.2f s (A parked)", (long long)H,
		    b.ttft);
		w[R_PARK].t = run(e, P1, nf, "A", 0);
		w[R_PARK].n = nf;
		w[R_PARK].done = 1;
		say("park: TTFT %.2f ms from %llu (%s), %.3f GB in "
		    "%.2f ms",
		    w[R_PARK].t.ttft * 1e3,
		    (unsigned long long)w[R_PARK].t.start,
		    cache_tier_name(w[R_PARK].t.tier),
		    w[R_PARK].t.restore_bytes / 1e9, w[R_PARK].t.plan_s * 1e3);
		say_split("park", &w[R_PARK].t);
	} else {
		snprintf(w[R_PARK].why, sizeof w[R_PARK].why, "--skip");
	}

	/* a compaction of session A (CN tokens sharing nothing)
	 * pins A's head [0, H) with its anchor; A's next turn gets
	 * them back */
	if (!skip_row[R_PIN]) {
		(void)cache_clear(e->c, "park");
		turn c = run(e, C, CN, "A", 0);
		free(c.lg);
		say("compaction: %lld tokens in %.2f s (A's head "
		    "pinned)",
		    (long long)CN, c.ttft);
		w[R_PIN].t = run(e, P1, nf, "A", 0);
		w[R_PIN].n = nf;
		w[R_PIN].done = 1;
		say("pin: TTFT %.2f ms from %llu (%s), %.3f GB in "
		    "%.2f ms",
		    w[R_PIN].t.ttft * 1e3, (unsigned long long)w[R_PIN].t.start,
		    cache_tier_name(w[R_PIN].t.tier),
		    w[R_PIN].t.restore_bytes / 1e9, w[R_PIN].t.plan_s * 1e3);
		say_split("pin", &w[R_PIN].t);
	} else {
		snprintf(w[R_PIN].why, sizeof w[R_PIN].why, "--skip");
	}

	/* a kill -9 of cached (no drain: a new cache, the spill
	 * emptied) and a new session with the same prompt: from the
	 * disk tier */
	if (skip_row[R_DISK]) {
		snprintf(w[R_DISK].why, sizeof w[R_DISK].why, "--skip");
	} else {
		cache_disk_wait(e->c);
		(void)cache_clear(e->c, "spill");
		engine_stop(e);
		cache_free(e->c);
		if ((rc = cache_new(&cfg, &e->c, err)))
			die("cache_new", rc, err);
		engine_load(e, window);
		engine_attach(e, &ho);
		w[R_DISK].t = run(e, P1, nf, "C", 0);
		w[R_DISK].n = nf;
		w[R_DISK].done = 1;
		say("disk: TTFT %.2f ms from %llu (%s)", w[R_DISK].t.ttft * 1e3,
		    (unsigned long long)w[R_DISK].t.start,
		    cache_tier_name(w[R_DISK].t.tier));
	}

	const turn *cold = &w[R_COLD].t, *end = &w[R_END].t;
	/* where the state store kept a snapshot of the end anchor (8k of
	 * the 27B on CUDA with the rows skipped: 157 MB, under its entry
	 * cap), it is a longer match than the anchor at H, and the
	 * resident row resumes from it, checked as a row above the taint */
	check_row(e, &w[R_RES], cold, NULL, CACHE_TIER_RESIDENT,
		  CACHE_TIER_STORE);
	check_row(e, &w[R_END], cold, NULL, CACHE_TIER_END, -1);
	if (w[R_PARK].done)
		check_row(e, &w[R_PARK], cold, NULL, CACHE_TIER_PARK, -1);
	if (w[R_PIN].done)
		check_row(e, &w[R_PIN], cold, NULL, CACHE_TIER_PIN, -1);
	if (w[R_RST].done)
		check_row(e, &w[R_RST], cold, end, CACHE_TIER_END, -1);
	if (w[R_SPILL].done)
		check_row(e, &w[R_SPILL], cold, end, CACHE_TIER_END,
			  CACHE_TIER_SPILL);
	if (w[R_DISK].done)
		check_row(e, &w[R_DISK], cold, NULL, CACHE_TIER_DISK, -1);
	for (int j = 0; j < R_N; j++) {
		if (j == R_COLD || !w[j].done)
			continue;
		bad += w[j].bad;
		say("history %lld: %s: %s%s: %s", (long long)H, row_name[j],
		    w[j].bad ? "CHECK FAILED: " : "", w[j].check, w[j].note);
	}
	(void)cache_clear(e->c, "all");
	engine_stop(e);
	cache_free(e->c);
	e->c = NULL;
	dfile_rm_rf(AT_FDCWD, cfg.spill_dir);
	free(A);
	free(P1);
	free(S);
	free(B);
	free(C);
	return bad;
}

/* ---- arguments ---- */

static int parse_lens(const char *s, int64_t *out)
{
	int n = 0;
	while (*s && n < MAX_LENS) {
		out[n++] = atoll(s);
		s = strchr(s, ',');
		if (!s)
			break;
		s++;
	}
	return n;
}

static int usage(const char *a0)
{
	fprintf(stderr,
		"usage: %s MODEL_DIR [THREADS] [H...] [--backend "
		"cpu|cuda|auto] [--load-format safetensors|dummy] [--lens "
		"H,H,...] [--new N] [--threads N] [--skip ROW,...]\n",
		a0);
	return 2;
}

int main(int argc, char **argv)
{
	T0 = moor_now();
	if (argc < 2)
		return usage(argv[0]);
	env e = {.dir = argv[1], .threads = 2};
	const char *bname = "cpu", *skip = "";
	int64_t hs[MAX_LENS] = {8192, 32768};
	int nh = 2, pos = 0, NEW = 64;
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i];
		if (strncmp(a, "--", 2) == 0) {
			if (i + 1 >= argc)
				return usage(argv[0]);
			const char *v = argv[++i];
			if (!strcmp(a, "--backend"))
				bname = v;
			else if (!strcmp(a, "--load-format")) {
				if (strcmp(v, "dummy") &&
				    strcmp(v, "safetensors"))
					return usage(argv[0]);
				e.dummy = !strcmp(v, "dummy");
			} else if (!strcmp(a, "--lens"))
				nh = parse_lens(v, hs);
			else if (!strcmp(a, "--new"))
				NEW = atoi(v);
			else if (!strcmp(a, "--threads"))
				e.threads = atoi(v);
			else if (!strcmp(a, "--skip"))
				skip = v;
			else
				return usage(argv[0]);
		} else if (pos++ == 0) {
			e.threads = atoi(a);
		} else {
			if (pos == 2)
				nh = 0;
			if (nh < MAX_LENS)
				hs[nh++] = atoll(a);
		}
	}
	if (NEW < 1 || NEW > 4096 || e.threads < 1 || nh < 1)
		return usage(argv[0]);
	char why[MOOR_ERRLEN] = "";
	e.ops = eng_backend_pick(bname, 0, why);
	if (!e.ops) {
		printf("bench_ttft: skipped: %s\n", why);
		return 77;
	}
	e.cuda = strcmp(e.ops->name, "cpu") != 0;
	int skip_row[R_N] = {0};
	for (int k = 0; k < R_N; k++) {
		const char *p = strstr(skip, row_key[k]);
		size_t kl = strlen(row_key[k]);
		skip_row[k] = p && (p == skip || p[-1] == ',') &&
			      (p[kl] == 0 || p[kl] == ',');
	}
	printf("bench_ttft: model %s (%s), %s; grid 1024; follow-up = "
	       "history + %d answer tokens + %d new\n",
	       e.dir, e.dummy ? "dummy weights" : "safetensors", why, GEN, NEW);
	fflush(stdout);

	lenr res[MAX_LENS];
	memset(res, 0, sizeof res);
	int bad = 0;
	for (int k = 0; k < nh; k++) {
		bad += bench_len(&e, &res[k], k, hs[k], NEW, skip_row);
		if (nh > 1 && !res[k].skipped[0]) { /* the table below too */
			print_head(&e);
			print_len(&res[k]);
		}
	}

	print_head(&e);
	for (int k = 0; k < nh; k++) {
		print_len(&res[k]);
		for (int j = 0; j < R_N; j++)
			free(res[k].r[j].t.lg);
	}
	if (bad)
		printf("\nbench_ttft: %d check(s) failed (see the check "
		       "column)\n",
		       bad);
	return bad ? 1 : 0;
}
