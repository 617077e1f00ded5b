/* test_threads_exact: 1 thread equals 2 threads, bit for bit: a prefill
 * (logits of every position, every section, every KV row) and 8 decode
 * steps after it. argv[1]: a model directory; argv[2]: the grid. */
#include "eng.h"
#include "moor.h"
#include "state.h"
#include "t.h"

typedef struct run {
	int V;
	float *logits; /* [n + steps, V] */
	host_state st;
} run;
static run run_with(const char *dir, int threads, int grid, int64_t n,
		    int steps)
{
	char err[MOOR_ERRLEN] = "";
	kern_config kc = {.threads = threads};
	kern_ctx *ctx;
	REQUIRE(kern_backend("cpu")->create(&kc, &ctx) == 0, "backend");
	eng_opts o = {.grid = grid, .window = n + steps + 1};
	eng_model *m;
	REQUIRE(eng_model_load(dir, kern_backend("cpu"), ctx, &o, &m, err) == 0,
		"load: %s", err);
	int V = eng_model_vocab(m);
	int32_t *ids = malloc(n * sizeof *ids);
	make_ids(ids, n, V, 7);
	run r;
	r.V = V;
	r.logits = malloc((size_t)(n + steps) * V * 4);
	REQUIRE(ids && r.logits, "oom");
	eng_seq s;
	REQUIRE(eng_seq_alloc(m, &s) == 0, "seq");
	REQUIRE(eng_prefill(m, &s, ids, n, r.logits, ENG_LOGITS_ALL) == 0,
		"prefill");
	for (int i = 0; i < steps; i++) {
		int32_t t = ids[i];
		REQUIRE(eng_decode(m, &s, t, r.logits + (size_t)(n + i) * V) == 0,
			"decode");
	}
	r.st = state_read(kern_backend("cpu"), ctx, eng_model_layout(m), &s,
			  n + steps);
	eng_seq_free(m, &s);
	free(ids);
	eng_model_free(m);
	kern_backend("cpu")->destroy(ctx);
	return r;
}

int main(int argc, char **argv)
{
	REQUIRE(argc >= 2, "usage: %s MODEL_DIR [GRID]", argv[0]);
	int grid = argc > 2 ? atoi(argv[2]) : 128;
	int64_t n = 2 * grid + 45;
	int steps = 8;
	run a = run_with(argv[1], 1, grid, n, steps);
	run b = run_with(argv[1], 2, grid, n, steps);
	CHECK(a.st.n == b.st.n && memcmp(a.st.bytes, b.st.bytes, a.st.n) == 0,
	      "state (sections and rows) differs between 1 and 2 threads");
	CHECK(memcmp(a.logits, b.logits, (size_t)(n + steps) * a.V * 4) == 0,
	      "logits differ between 1 and 2 threads");
	free(a.st.bytes);
	free(b.st.bytes);
	free(a.logits);
	free(b.logits);
	return t_done("test_threads_exact");
}
