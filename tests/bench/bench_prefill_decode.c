/* bench_prefill_decode: prefill and decode speed of a model on the CPU
 * backend at several prompt lengths, and how prefill time grows with length.
 * Prints a table. Usage: bench_prefill_decode MODEL_DIR [THREADS] [LEN...]
 * (default lengths 1024 8192 32768, threads 2). */
#include <stdio.h>
#include <stdlib.h>

#include "eng.h"
#include "moor.h"

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

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s MODEL_DIR [THREADS] [LEN...]\n", argv[0]);
		return 2;
	}
	int threads = argc > 2 ? atoi(argv[2]) : 2;
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
	if (kern_cpu_ops.create(&kc, &ctx))
		return 1;
	char err[MOOR_ERRLEN] = "";
	eng_opts o = {.grid = 1024, .window = maxlen + steps};
	eng_model *m;
	if (eng_model_load(argv[1], &kern_cpu_ops, ctx, &o, &m, err)) {
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
	kern_cpu_ops.destroy(ctx);
	return 0;
}
