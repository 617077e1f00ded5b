/* test_golden_transformers: our loader and forward against transformers'
 * Qwen3_5ForCausalLM on the fixtures of tests/golden (three small random
 * models: f32 untied, bf16 tied with 8 layers, f32 tied with r = Hv/Hk = 3),
 * on the backend MOOR_TEST_BACKEND names (tb.h: the CPU by default; CUDA in
 * the gpu suite, held to the same bars, which are issue 10's for the GPU:
 * fp32 max rel <= 1e-4 and the same greedy tokens, bf16 the same argmax on
 * >= 99% of positions by the tie-aware count).
 * The prompt (300 tokens) is prefilled on a 128-token grid, so it crosses
 * two grid lines; then the fixture's 32 decode tokens are fed one by one
 * through the recurrent form. */
#include <math.h>

#include "eng.h"
#include "golden.h"
#include "moor.h"
#include "t.h"
#include "tb.h"

typedef struct rowerr {
	double max_rel; /* max |a - r| / max |r| over the row */
	double mean_abs;
	int argmax_a, argmax_r;
	double gap_r; /* reference's top-1 minus top-2 logit */
	/* our pick is one of the reference's argmaxes: the same index, or
	 * one exactly tied with it in the reference's logits (transformers
	 * breaks an exact tie to the lowest index; either token is its
	 * greedy answer) */
	int same;
} rowerr;

/* bf16: the reference's lm_head writes bf16 logits, so its argmax is taken
 * over rounded values, exact ties going to the lowest index; ours is taken
 * over our logits rounded the same way. */
static int round_argmax;

static rowerr compare_row(const float *a, const float *r, int V)
{
	rowerr e = {0};
	double mx = 0, md = 0, sum = 0;
	int ia = 0, ir = 0;
	for (int i = 0; i < V; i++) {
		double d = fabs((double)a[i] - r[i]);
		md = d > md ? d : md;
		sum += d;
		mx = fabs(r[i]) > mx ? fabs(r[i]) : mx;
		if (round_argmax ? moor_round_bf16(a[i]) > moor_round_bf16(a[ia])
				 : a[i] > a[ia])
			ia = i;
		if (r[i] > r[ir])
			ir = i;
	}
	double second = -1e30;
	for (int i = 0; i < V; i++)
		if (i != ir && r[i] > second)
			second = r[i];
	e.max_rel = md / (mx > 0 ? mx : 1);
	e.mean_abs = sum / V;
	e.argmax_a = ia;
	e.argmax_r = ir;
	e.gap_r = r[ir] - second;
	e.same = ia == ir || r[ia] == r[ir];
	return e;
}

/* Layer 0's GDN state after the prefill against transformers' (state0.bin,
 * f32_untied only): S as [Hv, dk, dv] (no transpose), the conv tail as the
 * last 3 of transformers' 4 columns. fp32 tolerance as for the logits. */
static const kern_ops *ops; /* MOOR_TEST_BACKEND's (tb.h) */

static void check_state0(const char *dir, eng_model *m, kern_ctx *ctx,
			 const eng_seq *s)
{
	char path[1100];
	snprintf(path, sizeof path, "%s/state0.bin", dir);
	FILE *f = fopen(path, "rb");
	REQUIRE(f, "cannot open %s", path);
	uint32_t h[12];
	char magic[8];
	REQUIRE(fread(magic, 1, 8, f) == 8 && memcmp(magic, "MOORGST1", 8) == 0 &&
			fread(h, 4, 10, f) == 10,
		"state0.bin header");
	uint32_t Hv = h[3], dk = h[4], dv = h[5], cd = h[6], cl = h[7];
	const eng_layout *y = eng_model_layout(m);
	REQUIRE(y->n_sections >= 2 && y->sec[0].layer == 0 &&
			y->sec[0].bytes == (size_t)Hv * dk * dv * 4 &&
			y->sec[1].bytes == (size_t)3 * cd * 4,
		"layer 0's sections do not match state0.bin's shapes");
	float *S = malloc((size_t)Hv * dk * dv * 4), *C = malloc((size_t)cd * cl * 4);
	float *ms = malloc(y->sec[0].bytes), *mc = malloc(y->sec[1].bytes);
	REQUIRE(S && C && ms && mc, "oom");
	REQUIRE(fread(S, 4, (size_t)Hv * dk * dv, f) == (size_t)Hv * dk * dv &&
			fread(C, 4, (size_t)cd * cl, f) == (size_t)cd * cl,
		"state0.bin body");
	fclose(f);
	kern_queue *q = ops->queue(ctx, KERN_Q_COMPUTE);
	ops->download(q, ms, s->sec[0], y->sec[0].bytes);
	ops->download(q, mc, s->sec[1], y->sec[1].bytes);
	double md = 0, mx = 0;
	for (size_t i = 0; i < (size_t)Hv * dk * dv; i++) {
		double d = fabs((double)ms[i] - S[i]);
		md = d > md ? d : md;
		mx = fabs(S[i]) > mx ? fabs(S[i]) : mx;
	}
	double cmd = 0, cmx = 0;
	for (uint32_t c = 0; c < cd; c++)
		for (uint32_t t = 0; t < 3; t++) {
			double ref = C[(size_t)c * cl + (cl - 3) + t];
			double d = fabs((double)mc[(size_t)t * cd + c] - ref);
			cmd = d > cmd ? d : cmd;
			cmx = fabs(ref) > cmx ? fabs(ref) : cmx;
		}
	printf("state0: S max rel %.3g, conv tail max rel %.3g\n", md / mx,
	       cmd / cmx);
	CHECK(md / mx <= 1e-4, "layer 0 recurrent state: max rel %.3g", md / mx);
	CHECK(cmd / cmx <= 1e-4, "layer 0 conv tail: max rel %.3g", cmd / cmx);
	free(S);
	free(C);
	free(ms);
	free(mc);
}

static void run_case(const char *name, int bf16)
{
	char dir[1024], path[1100], err[MOOR_ERRLEN] = "";
	snprintf(dir, sizeof dir, "%s/tests/golden/%s", t_src(), name);
	snprintf(path, sizeof path, "%s/golden.bin", dir);
	round_argmax = bf16;
	golden g;
	REQUIRE(golden_read(path, &g) == 0, "cannot read %s", path);

	kern_config kc = {.threads = 2};
	kern_ctx *ctx;
	REQUIRE(ops->create(&kc, &ctx) == 0, "backend");
	eng_opts o = {.grid = 128, .window = 1024};
	eng_model *m;
	int rc = eng_model_load(dir, ops, ctx, &o, &m, err);
	REQUIRE(rc == 0, "load %s: %s", dir, err);
	int V = eng_model_vocab(m);
	REQUIRE(V == (int)g.vocab, "vocab %d vs fixture %u", V, g.vocab);
	eng_seq s;
	REQUIRE(eng_seq_alloc(m, &s) == 0, "seq");

	size_t np = g.n_prompt;
	float *lg = malloc(np * V * sizeof *lg);
	REQUIRE(lg, "oom");
	REQUIRE(eng_prefill(m, &s, g.prompt, (int64_t)np, lg, ENG_LOGITS_ALL) ==
			0,
		"prefill");
	if (strcmp(name, "f32_untied") == 0)
		check_state0(dir, m, ctx, &s);

	/* fp32: the same function in the same precision; what differs is
	 * summation order (our fixed 16-lane dot products against MKL/oneDNN
	 * GEMM, the chunked solve's order), ~1e-6 relative per op, well under
	 * 1e-4 after the stack. bf16: transformers rounds every projection,
	 * norm, the conv and gate outputs to bf16 (SPEC §9); one half-ulp
	 * flip of any intermediate (2^-9 relative) where our fp32 sum lands
	 * on the other side of a rounding boundary propagates through the
	 * residual stream. Measured max |d| / max |ref| is a few 1e-3 per
	 * layer; measured 0.042 over 8 layers (transformers' own bf16 on a
	 * GPU against its CPU run: 0.041); 0.06 leaves room, and the argmax
	 * check below is the one that matters for answers. */
	double tol = bf16 ? 6e-2 : 1e-4;
	double worst = 0, mean = 0;
	int agree = 0, strict = 0, total = 0, strict_fail = 0;
	for (size_t t = 0; t < np; t++) {
		rowerr e = compare_row(lg + t * V, g.prefill + t * V, V);
		worst = e.max_rel > worst ? e.max_rel : worst;
		mean += e.mean_abs;
		agree += e.same;
		strict += e.argmax_a == e.argmax_r;
		total++;
		if (e.argmax_a != e.argmax_r && !bf16)
			strict_fail++;
		if (e.argmax_a != e.argmax_r)
			printf("%s: row %zu: argmax %d vs %d, reference gap %.4g, "
			       "ours - ref at ours' pick %.4g%s\n",
			       name, t, e.argmax_a, e.argmax_r, e.gap_r,
			       (double)lg[t * V + e.argmax_a] -
				       g.prefill[t * V + e.argmax_r],
			       e.same ? " (tied in the reference)" : "");
	}
	/* decode, teacher-forced with the fixture's fed tokens */
	float *row = malloc(V * sizeof *row);
	double dworst = 0;
	int dagree = 0;
	for (uint32_t i = 0; i < g.n_decode; i++) {
		REQUIRE(eng_decode(m, &s, g.fed[i], row) == 0, "decode %u", i);
		rowerr e = compare_row(row, g.decode + (size_t)i * V, V);
		dworst = e.max_rel > dworst ? e.max_rel : dworst;
		dagree += e.same;
		strict += e.argmax_a == e.argmax_r;
		if (e.argmax_a != e.argmax_r)
			printf("%s: decode step %u: argmax %d vs %d, reference "
			       "gap %.4g%s\n",
			       name, i, e.argmax_a, e.argmax_r, e.gap_r,
			       e.same ? " (tied in the reference)" : "");
		if (!bf16 && i + 1 < g.n_decode)
			CHECK(e.argmax_a == g.fed[i + 1],
			      "%s: decode step %u: greedy %d, transformers %d",
			      name, i, e.argmax_a, g.fed[i + 1]);
	}
	/* the first fed token is the prefill's greedy choice */
	if (!bf16) {
		rowerr e = compare_row(lg + (np - 1) * V, g.prefill + (np - 1) * V, V);
		CHECK(e.argmax_a == g.fed[0], "%s: first greedy token", name);
	}
	printf("%s: prefill max rel %.3g (mean |d| %.3g), argmax %d/%d; "
	       "decode max rel %.3g, argmax %d/%u\n",
	       name, worst, mean / np, agree, total, dworst, dagree, g.n_decode);
	CHECK(worst <= tol, "%s: prefill max rel %.3g > %.3g", name, worst, tol);
	CHECK(dworst <= tol, "%s: decode max rel %.3g > %.3g", name, dworst, tol);
	if (bf16) {
		/* What is left is noise, not a missed rounding point: fed
		 * transformers' own inputs (tests/engine/golden_probe --force),
		 * every op of ours gives its bf16 values except for rare flips
		 * of fp32 summation order (about 1 element in 10^4: 26 of the
		 * prefill's 230,400 delta-rule outputs, 4 of its 76,800
		 * attention outputs), but the random fixture amplifies each
		 * flip through the recurrent state and attention until, by
		 * layer 4, most hidden values differ by an ulp: the result is
		 * one more independent bf16 rounding of the same function. Its
		 * noise floor, from transformers itself
		 * (tests/golden/floors_golden.py: its bf16 forward run in other
		 * valid ways, against the CPU reference, same-index count): on a
		 * GPU 329 and 330 of 332 rows (one-shot, chunked prefill), token
		 * by token 326 (GPU) and 328 (CPU), with oneDNN off 330; max rel
		 * 0.024 to 0.041, mean |d| 0.057 to 0.083. transformers in fp32:
		 * 302 (91.0%), max rel 0.23, mean |d| 0.41.
		 *
		 * The bar counts a row as agreeing when our pick is one of the
		 * reference's argmaxes: the reference's logits are bf16 values,
		 * and where two of them are exactly equal at the top (logits
		 * near 20 to 29 are 0.125 to 0.25 apart in bf16) either token is
		 * its greedy answer; torch breaks the tie to the lower index, an
		 * accident of its argmax, not of the model. Measured here: 329 of
		 * 332 (99.1%) by that count, 326 (98.2%) by index alone (rows
		 * 43, 204 and 283 are exact ties in the reference where we pick
		 * the other tied token); the three rows left have a reference
		 * top-2 gap of 0.125 to 0.25 (one or two bf16 ulps), and in two
		 * of them our own rounded logits tie with the reference's pick.
		 * mean |d| (smooth where the argmax count is not) is held near
		 * the floor too: a rounding point missed or added moves it
		 * toward the fp32 figure. transformers' own runs by this count
		 * (floors_golden.py, 2026-12-03): on a GPU 329 one-shot and 331
		 * chunked, token by token 327 (GPU) and 330 (CPU), oneDNN off
		 * 331; fp32 306. */
		int all = total + (int)g.n_decode, same = agree + dagree;
		printf("%s: argmax agrees on %d of %d (%.1f%%), the same index "
		       "on %d\n",
		       name, same, all, 100.0 * same / all, strict);
		CHECK(same * 100 >= all * 99, "%s: argmax agrees on %d of %d",
		      name, same, all);
		CHECK(mean / np <= 0.1, "%s: prefill mean |d| %.3g > 0.1", name,
		      mean / np);
	} else {
		CHECK(strict_fail == 0 && dagree == (int)g.n_decode,
		      "%s: fp32 argmax differs (%d prefill rows)", name,
		      strict_fail);
	}
	free(row);
	free(lg);
	eng_seq_free(m, &s);
	eng_model_free(m);
	ops->destroy(ctx);
	golden_free(&g);
}

int main(void)
{
	ops = tb_backend("test_golden_transformers");
	printf("test_golden_transformers: backend %s\n", ops->name);
	run_case("f32_untied", 0);
	run_case("f32_tied_r3", 0);
	run_case("bf16_tied", 1);
	return t_done("test_golden_transformers");
}
