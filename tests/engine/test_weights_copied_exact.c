/* test_weights_copied_exact: a model whose weights are copied onto the
 * backend (alloc + upload, as on a device: the checkpoint reader's path)
 * computes the same bits as one that points into the mapped file
 * (wrap_host, the CPU backend's own path). The CPU backend is run twice:
 * as it is, and with wrap_host taken out of a copy of its vtable (host
 * memory kept, so the projections stay unfused and the kernels are the
 * same); the logits of every position of a prefill and of three decode
 * steps must be equal bit for bit (memcmp): a loader that moved, dropped
 * or reordered a byte of any weight changes them.
 *   test_weights_copied_exact MODEL_DIR */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t.h"

#include "eng.h"
#include "moor.h"

#define N 40

static float *run(const char *dir, const kern_ops *ops, int *V_out)
{
	kern_config kc = {.threads = 1};
	kern_ctx *ctx;
	REQUIRE(ops->create(&kc, &ctx) == 0, "create");
	char err[MOOR_ERRLEN] = "";
	eng_opts o = {.grid = 64, .window = 256, .threads = 1};
	eng_model *m;
	int rc = eng_model_load(dir, ops, ctx, &o, &m, err);
	REQUIRE(rc == 0, "load %s: %s", dir, err);
	int V = eng_model_vocab(m);
	*V_out = V;
	float *lg = calloc((size_t)(N + 3) * (size_t)V, sizeof *lg);
	int32_t ids[N];
	for (int i = 0; i < N; i++)
		ids[i] = (int32_t)((i * 7919 + 13) % V);
	eng_seq s;
	REQUIRE(eng_seq_alloc(m, &s) == 0, "seq");
	REQUIRE(eng_prefill(m, &s, ids, N, lg, ENG_LOGITS_ALL) == 0, "prefill");
	for (int k = 0; k < 3; k++)
		REQUIRE(eng_decode(m, &s, ids[k], lg + (size_t)(N + k) * V) == 0,
			"decode");
	eng_seq_free(m, &s);
	eng_model_free(m);
	ops->destroy(ctx);
	return lg;
}

int main(int argc, char **argv)
{
	REQUIRE(argc == 2, "usage: test_weights_copied_exact MODEL_DIR");
	const kern_ops *cpu = kern_backend("cpu");
	REQUIRE(cpu && cpu->wrap_host, "the CPU backend wraps host memory");
	kern_ops copied = *cpu;
	copied.wrap_host = NULL;
	copied.unwrap = NULL;
	int V1, V2;
	float *a = run(argv[1], cpu, &V1);
	float *b = run(argv[1], &copied, &V2);
	REQUIRE(V1 == V2, "vocab");
	size_t n = (size_t)(N + 3) * (size_t)V1;
	size_t diff = 0;
	for (size_t i = 0; i < n; i++)
		diff += memcmp(&a[i], &b[i], 4) != 0;
	CHECK(diff == 0, "%zu of %zu logits differ between mapped and copied "
			 "weights",
	      diff, n);
	/* the run is not vacuous: the logits vary */
	CHECK(memcmp(a, a + V1, (size_t)V1 * 4) != 0, "two positions' logits "
						      "are equal");
	free(a);
	free(b);
	return t_done("test_weights_copied_exact");
}
