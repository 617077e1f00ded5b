/* bench_prefill_decode: prefill and decode speed of a model on the CPU
 * backend at several prompt lengths, and how prefill time grows with length.
 * Prints a table. Usage: bench_prefill_decode MODEL_DIR [THREADS] [LEN...]
 * (default lengths 1024 8192 32768, threads 2).
 *
 *   bench_prefill_decode MODEL_DIR THREADS --bound
 *
 * the short figures instead: a 16-token prefill and a decode step (medians
 * of many), this machine's memory read bandwidth with THREADS threads, and
 * the decode step's memory-bandwidth bound (every weight byte, the
 * recurrent state and the KV rows read once per token) with the ratio. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eng.h"
#include "moor.h"
#include "pool.h"

static void make_ids(int32_t *ids, int64_t n, int V)
{
	uint64_t x = 88172645463325252ULL;
	for (int64_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		ids[i] = (int32_t)(x % (uint64_t)V);
	}
}

/* ---- memory bandwidth ---- */

struct rd_job {
	const uint64_t *buf;
	size_t per; /* words per task */
	uint64_t sum[64];
};

static void rd_task(void *arg, int t)
{
	struct rd_job *j = arg;
	const uint64_t *p = j->buf + (size_t)t * j->per;
	uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
	for (size_t i = 0; i + 4 <= j->per; i += 4) {
		s0 += p[i];
		s1 += p[i + 1];
		s2 += p[i + 2];
		s3 += p[i + 3];
	}
	j->sum[t] = s0 + s1 + s2 + s3;
}

/* Best read bandwidth (bytes/s) of `reps` passes over `bytes` with the
 * pool's threads; *copy gets memcpy's (bytes read + written per second). */
static double read_bw(moor_pool *pool, size_t bytes, int reps, double *copy)
{
	uint64_t *a = malloc(bytes), *b = malloc(bytes / 2);
	if (!a || !b)
		return 0;
	memset(a, 1, bytes);
	memset(b, 2, bytes / 2);
	struct rd_job j = {.buf = a, .per = bytes / 8 / 64};
	double best = 1e30, bestc = 1e30;
	for (int r = 0; r < reps; r++) {
		double t0 = moor_now();
		moor_pool_run(pool, 64, rd_task, &j);
		double t1 = moor_now();
		best = t1 - t0 < best ? t1 - t0 : best;
		memcpy(b, a + (r & 1) * (bytes / 16), bytes / 2);
		double t2 = moor_now();
		bestc = t2 - t1 < bestc ? t2 - t1 : bestc;
	}
	uint64_t s = 0;
	for (int t = 0; t < 64; t++)
		s += j.sum[t];
	if (s == 42) /* keeps the sums alive */
		printf(" ");
	*copy = (double)bytes / bestc;
	free(a);
	free(b);
	return (double)bytes / best;
}

static int cmp_dbl(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return a < b ? -1 : a > b;
}

/* Bytes of tensor data in DIR/model.safetensors (the file less its header),
 * or 0. */
static double weight_bytes(const char *dir)
{
	char path[1024];
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	FILE *f = fopen(path, "rb");
	if (!f)
		return 0;
	uint8_t h[8];
	double r = 0;
	if (fread(h, 1, 8, f) == 8 && fseek(f, 0, SEEK_END) == 0) {
		uint64_t hl = 0;
		for (int i = 7; i >= 0; i--)
			hl = hl << 8 | h[i];
		r = (double)ftell(f) - 8.0 - (double)hl;
	}
	fclose(f);
	return r;
}

static int run_bound(const char *dir, int threads)
{
	enum { PROMPT = 16, PREFILLS = 40, STEPS = 64 };
	kern_config kc = {.threads = threads};
	kern_ctx *ctx;
	if (kern_backend("cpu")->create(&kc, &ctx))
		return 1;
	char err[MOOR_ERRLEN] = "";
	eng_opts o = {.grid = 1024, .window = 1024};
	eng_model *m;
	if (eng_model_load(dir, kern_backend("cpu"), ctx, &o, &m, err)) {
		fprintf(stderr, "load: %s\n", err);
		return 1;
	}
	int V = eng_model_vocab(m);
	int32_t ids[PROMPT + STEPS];
	make_ids(ids, PROMPT + STEPS, V);
	float *logits = malloc((size_t)V * 4);
	eng_seq s;
	if (!logits || eng_seq_alloc(m, &s))
		return 1;
	double pf[PREFILLS], dc[STEPS];
	for (int r = 0; r < PREFILLS; r++) {
		eng_seq_reset(m, &s);
		double t0 = moor_now();
		if (eng_prefill(m, &s, ids, PROMPT, logits, ENG_LOGITS_LAST))
			return 1;
		pf[r] = moor_now() - t0;
	}
	for (int k = 0; k < STEPS; k++) {
		double t0 = moor_now();
		if (eng_decode(m, &s, ids[PROMPT + k], logits))
			return 1;
		dc[k] = moor_now() - t0;
	}
	const eng_layout *lay = eng_model_layout(m);
	double w = weight_bytes(dir);
	double ctx_rows = PROMPT + STEPS / 2.0; /* the mean context */
	double per_tok = w + 2.0 * (double)lay->section_bytes +
			 ctx_rows * (double)lay->row_bytes;
	moor_pool *pool = moor_pool_new(threads);
	double cp = 0, bw = read_bw(pool, (size_t)1 << 29, 8, &cp);
	moor_pool_free(pool);
	qsort(pf, PREFILLS, sizeof *pf, cmp_dbl);
	qsort(dc, STEPS, sizeof *dc, cmp_dbl);
	double bound = per_tok / bw;
	printf("model %s, CPU backend, %d thread(s), spin %s us\n", dir,
	       threads,
	       getenv("MOOR_POOL_SPIN_US") ? getenv("MOOR_POOL_SPIN_US")
					   : "default");
	printf("prefill %d tokens: median %.2f ms, min %.2f ms (%d runs)\n",
	       PROMPT, 1e3 * pf[PREFILLS / 2], 1e3 * pf[0], PREFILLS);
	printf("decode: median %.2f ms/token, min %.2f ms (%d steps)\n",
	       1e3 * dc[STEPS / 2], 1e3 * dc[0], STEPS);
	printf("bytes read per decoded token: %.1f MB (weights %.1f MB, "
	       "state %.2f MB read and written, KV %.0f rows x %zu B)\n",
	       per_tok / 1e6, w / 1e6, (double)lay->section_bytes / 1e6,
	       ctx_rows, lay->row_bytes);
	printf("memory read bandwidth, %d thread(s): %.2f GB/s (memcpy, 1 "
	       "thread: %.2f GB/s)\n",
	       threads, bw / 1e9, cp / 1e9);
	printf("decode bound %.2f ms/token; median decode / bound = %.2f "
	       "(goal <= 1.5)\n",
	       1e3 * bound, dc[STEPS / 2] / bound);
	eng_seq_free(m, &s);
	free(logits);
	eng_model_free(m);
	kern_backend("cpu")->destroy(ctx);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s MODEL_DIR [THREADS] [LEN...]\n", argv[0]);
		return 2;
	}
	int threads = argc > 2 ? atoi(argv[2]) : 2;
	if (argc > 3 && !strcmp(argv[3], "--bound"))
		return run_bound(argv[1], threads);
	int64_t lens[16] = {1024, 8192, 32768};
	int nl = 3;
	if (argc > 3) {
		nl = 0;
		for (int i = 3; i < argc && nl < 16; i++)
			lens[nl++] = atoll(argv[i]);
	}
	int64_t maxlen = 0;
	for (int i = 0; i < nl; i++)
		maxlen = lens[i] > maxlen ? lens[i] : maxlen;
	const int steps = 32;
	kern_config kc = {.threads = threads};
	kern_ctx *ctx;
	if (kern_backend("cpu")->create(&kc, &ctx))
		return 1;
	char err[MOOR_ERRLEN] = "";
	eng_opts o = {.grid = 1024, .window = maxlen + steps};
	eng_model *m;
	if (eng_model_load(argv[1], kern_backend("cpu"), ctx, &o, &m, err)) {
		fprintf(stderr, "load: %s\n", err);
		return 1;
	}
	int V = eng_model_vocab(m);
	int32_t *ids = malloc((size_t)maxlen * sizeof *ids);
	float *logits = malloc((size_t)V * 4);
	make_ids(ids, maxlen, V);
	eng_seq s;
	if (!ids || !logits || eng_seq_alloc(m, &s))
		return 1;
	printf("model %s, CPU backend, %d thread(s), grid 1024\n", argv[1],
	       threads);
	printf("%8s %12s %12s %14s %12s %12s\n", "prompt", "prefill s",
	       "prefill t/s", "s / (1k tok)", "decode t/s", "ms / token");
	double base_per_k = 0;
	for (int i = 0; i < nl; i++) {
		eng_seq_reset(m, &s);
		double t0 = moor_now();
		if (eng_prefill(m, &s, ids, lens[i], logits, ENG_LOGITS_LAST))
			return 1;
		double t1 = moor_now();
		for (int k = 0; k < steps; k++)
			if (eng_decode(m, &s, ids[k], logits))
				return 1;
		double t2 = moor_now();
		double per_k = (t1 - t0) / ((double)lens[i] / 1024.0);
		if (i == 0)
			base_per_k = per_k;
		printf("%8lld %12.3f %12.0f %9.3f (x%.2f) %12.1f %12.2f\n",
		       (long long)lens[i], t1 - t0, (double)lens[i] / (t1 - t0),
		       per_k, per_k / base_per_k, steps / (t2 - t1),
		       1e3 * (t2 - t1) / steps);
		fflush(stdout);
	}
	eng_seq_free(m, &s);
	free(ids);
	free(logits);
	eng_model_free(m);
	kern_backend("cpu")->destroy(ctx);
	return 0;
}
