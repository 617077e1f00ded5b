/* bench_ttft: time to the first token of a follow-up turn with H tokens of
 * history (default 8k and 32k), side by side in one run: cold; resumed from
 * the resident anchors; from the end anchor; from the park (after another
 * session's turn); and after an engine restart (the model freed and loaded
 * again and attached to the same cache, which hands its state back). The
 * engine computes into the cache's arena in this process, as engined does
 * into cached's; the daemon test (tests/daemon) shows the same resume after
 * a real kill -9; and after a planned restart of cached (the drain writes
 * the conversation to the session spill, a new cache and engine read it
 * back at the attach: the read-back is reported beside the row, the TTFT
 * is the request's, as a client sees it once the stack is up); and from
 * the disk tier after a kill -9 of cached (a new cache with no drain and
 * no spill: a new session that shares the history's head resumes from the
 * chunks and the anchor its first request wrote). Prints a table with each
 * source's ratio to cold.
 * Usage: bench_ttft MODEL_DIR [THREADS] [H...]   (MOOR_BENCH_DIR: where
 * the spill goes; default the current directory) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fcntl.h>

#include "cache.h"
#include "dfile.h"
#include "eng.h"
#include "layout_of.h"
#include "moor.h"

#define GEN 8
#define NEW 64

typedef struct env {
	const char *dir;
	int threads;
	kern_ctx *ctx;
	eng_model *m;
	cache *c;
	cache_layout lay;
	eng_seq s;
	float *logits;
	int V;
} env;

static void die(const char *what, int rc, const char *err)
{
	fprintf(stderr, "bench_ttft: %s: %s %s\n", what, moor_strerror(rc),
		err ? err : "");
	exit(1);
}

/* (Re)starts the engine and attaches it to the cache. */
static void engine_start(env *e, int64_t window)
{
	char err[MOOR_ERRLEN] = "";
	kern_config kc = {.threads = e->threads};
	int rc = kern_backend("cpu")->create(&kc, &e->ctx);
	if (rc)
		die("backend", rc, NULL);
	eng_opts o = {.grid = 1024, .window = window, .threads = e->threads};
	if ((rc = eng_model_load(e->dir, kern_backend("cpu"), e->ctx, &o, &e->m, err)))
		die("load", rc, err);
	const eng_layout *y = eng_model_layout(e->m);
	h_layout(y, e->dir, &e->lay);
	cache_hello_out ho;
	if ((rc = cache_hello(e->c, &e->lay, &ho, err)))
		die("hello", rc, err);
	e->s.sec = calloc((size_t)y->n_sections + 1, sizeof(void *));
	e->s.view = calloc((size_t)y->n_views + 1, sizeof(void *));
	char *base = cache_dev_base(e->c);
	for (int i = 0; i < y->n_sections; i++)
		e->s.sec[i] = base + ho.sec_off[i];
	for (int i = 0; i < y->n_views; i++)
		e->s.view[i] = base + ho.view_off[i];
	e->V = eng_model_vocab(e->m);
	e->logits = malloc((size_t)e->V * 4);
}

static void engine_stop(env *e)
{
	free(e->s.sec);
	free(e->s.view);
	free(e->logits);
	eng_model_free(e->m);
	kern_backend("cpu")->destroy(e->ctx);
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
	double ttft;
	uint64_t start;
	int tier;
	int32_t gen[GEN];
} turn;

/* One turn as engined runs it: plan, prefill with the slots, GEN greedy
 * tokens (the last one not forwarded), commit. ttft: plan to first token. */
static turn run(env *e, const int32_t *ids, int64_t n, const char *session,
		int no_cache)
{
	static cache_plan_out p;
	static eng_slot es[CACHE_MAX_SLOTS];
	char err[MOOR_ERRLEN] = "";
	turn t = {0};
	cache_req r = {.ids = ids, .n = (uint64_t)n, .session = session,
		       .max_tokens = GEN, .no_cache = no_cache};
	double t0 = moor_now();
	int rc = cache_plan(e->c, &r, &p, err);
	if (rc)
		die("plan", rc, err);
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
	t.tier = p.tier;
	for (int i = 1; i < GEN; i++) {
		if ((rc = eng_decode(e->m, &e->s, t.gen[i - 1], e->logits)))
			die("decode", rc, NULL);
		t.gen[i] = argmax(e->logits, e->V);
	}
	if ((rc = cache_commit(e->c, (uint32_t)filled, t.gen, GEN - 1)))
		die("commit", rc, NULL);
	return t;
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

static void row(const char *what, const turn *t, double cold, int64_t n)
{
	printf("  %-22s %10.3f %8.3f %10llu %10lld  %s\n", what, t->ttft,
	       cold / t->ttft, (unsigned long long)t->start,
	       (long long)(n - (int64_t)t->start), cache_tier_name(t->tier));
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s MODEL_DIR [THREADS] [H...]\n", argv[0]);
		return 2;
	}
	env e = {.dir = argv[1], .threads = argc > 2 ? atoi(argv[2]) : 2};
	int64_t hs[8] = {8192, 32768};
	int nh = 2;
	if (argc > 3)
		for (nh = 0; nh + 3 < argc && nh < 8; nh++)
			hs[nh] = atoll(argv[nh + 3]);
	printf("model %s, CPU backend, %d thread(s), grid 1024; follow-up = "
	       "history + %d answer tokens + %d new\n",
	       e.dir, e.threads, GEN, NEW);
	printf("  %-22s %10s %8s %10s %10s  %s\n", "source", "TTFT s",
	       "x cold", "cached", "reread", "tier");
	for (int k = 0; k < nh; k++) {
		int64_t H = hs[k], window = H + 4 * (GEN + NEW) + 64;
		cache_cfg cfg;
		cache_cfg_defaults(&cfg);
		snprintf(cfg.arena_prefix, sizeof cfg.arena_prefix,
			 "moor-bench-%d", (int)getpid());
		cfg.device_bytes = 1ull << 30;
		cfg.host_bytes = 1ull << 30;
		cfg.mem_ceiling = cfg.mem_peak = 1ull << 40;
		cfg.disk_min_free = 0; /* the bench's file system */
		snprintf(cfg.spill_dir, sizeof cfg.spill_dir, "%s/bench-spill-%d",
			 getenv("MOOR_BENCH_DIR") ? getenv("MOOR_BENCH_DIR")
						  : ".",
			 (int)getpid());
		char err[MOOR_ERRLEN] = "";
		int rc = cache_new(&cfg, &e.c, err);
		if (rc)
			die("cache_new", rc, err);
		engine_start(&e, window);
		int64_t nf = H + GEN + NEW;
		int32_t *A = malloc((size_t)(nf + GEN) * 4),
			*B = malloc((size_t)H * 4);
		ids_fill(A, H, e.V, 1 + (uint64_t)k);
		ids_fill(B, H, e.V, 100 + (uint64_t)k);
		printf("history %lld tokens\n", (long long)H);

		/* cold: the follow-up with nothing cached (its answer part is
		 * a placeholder; cold does the same work whatever it holds) */
		ids_fill(A + H, GEN + NEW, e.V, 50);
		turn cold = run(&e, A, nf, "A", 1);
		row("cold", &cold, cold.ttft, nf);

		/* turn 1, then the follow-up continuing its answer */
		turn t1 = run(&e, A, H, "A", 0);
		/* session A's first long request: the disk tier writes its
		 * head while nothing runs (not in a TTFT) */
		cache_disk_wait(e.c);
		memcpy(A + H, t1.gen, GEN * 4);
		ids_fill(A + H + GEN, NEW, e.V, 51);
		turn end = run(&e, A, nf, "A", 0);

		/* the same history with another answer: parts inside the
		 * generation, resumes at the resident anchor at H */
		int32_t *A2 = malloc((size_t)nf * 4);
		memcpy(A2, A, (size_t)H * 4);
		ids_fill(A2 + H, GEN + NEW, e.V, 52);
		turn res = run(&e, A2, nf, "A", 0);

		/* another session replaces the rows (parking A's); then A's
		 * next turn continues its last answer */
		run(&e, B, H, "B", 0);
		int64_t np = nf + GEN + NEW;
		int32_t *A3 = malloc((size_t)np * 4);
		memcpy(A3, A2, (size_t)nf * 4);
		ids_fill(A3 + nf, GEN + NEW, e.V, 53);
		turn park = run(&e, A3, np, "A", 0);

		/* engine restart: free the model, load it again, attach */
		engine_stop(&e);
		engine_start(&e, window);
		int64_t nr = np + GEN + NEW;
		int32_t *A4 = malloc((size_t)nr * 4);
		memcpy(A4, A3, (size_t)np * 4);
		memcpy(A4 + np, park.gen, GEN * 4);
		ids_fill(A4 + np + GEN, NEW, e.V, 54);
		turn rst = run(&e, A4, nr, "A", 0);

		/* cached restarts: the drain, a new cache, the engine attaches
		 * and the spill is read back */
		double d0 = moor_now();
		if ((rc = cache_drain(e.c, err)))
			die("drain", rc, err);
		double drain_s = moor_now() - d0;
		engine_stop(&e);
		cache_free(e.c);
		if ((rc = cache_new(&cfg, &e.c, err)))
			die("cache_new", rc, err);
		d0 = moor_now();
		engine_start(&e, window);
		double back_s = moor_now() - d0;
		int64_t ns = nr + GEN + NEW;
		int32_t *A5 = malloc((size_t)ns * 4);
		memcpy(A5, A4, (size_t)nr * 4);
		memcpy(A5 + nr, rst.gen, GEN * 4);
		ids_fill(A5 + nr + GEN, NEW, e.V, 55);
		turn sp = run(&e, A5, ns, "A", 0);

		/* a kill -9 of cached (no drain: a new cache, the spill
		 * emptied) and a new session that shares A's head: from the
		 * disk tier */
		cache_disk_wait(e.c);
		(void)cache_clear(e.c, "spill");
		engine_stop(&e);
		cache_free(e.c);
		if ((rc = cache_new(&cfg, &e.c, err)))
			die("cache_new", rc, err);
		engine_start(&e, window);
		int32_t *C = malloc((size_t)nf * 4);
		memcpy(C, A, (size_t)H * 4);
		ids_fill(C + H, GEN + NEW, e.V, 56);
		turn dk = run(&e, C, nf, "C", 0);

		row("resident anchors", &res, cold.ttft, nf);
		row("end anchor", &end, cold.ttft, nf);
		row("park (after B)", &park, cold.ttft, np);
		row("after engine restart", &rst, cold.ttft, nr);
		row("spill (cached restart)", &sp, cold.ttft, ns);
		printf("    (the drain took %.3f s; the attach with the "
		       "read-back and the model load %.3f s)\n",
		       drain_s, back_s);
		row("disk (new cached)", &dk, cold.ttft, nf);
		fflush(stdout);
		(void)cache_clear(e.c, "all");
		engine_stop(&e);
		cache_free(e.c);
		dfile_rm_rf(AT_FDCWD, cfg.spill_dir);
		free(C);
		free(A5);
		free(A);
		free(A2);
		free(A3);
		free(A4);
		free(B);
	}
	return 0;
}
