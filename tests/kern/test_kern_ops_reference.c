/* test_kern_ops_reference: every op of the CPU backend against a naive
 * double-precision reference written here from ops.h and SPEC-qwen35.md, on
 * seeded random non-zero inputs, for each weight dtype and both activation
 * modes, at odd sizes (lengths that are not multiples of the kernels' lane
 * counts or blocks, T = 1, T = 67, strided rows). Outputs are poisoned with
 * NaN first, so an element the op forgot fails, and the padding of strided
 * outputs must come back untouched.
 *
 * Tolerances. An fp32 result is held to a bound derived from its arithmetic
 * (stated at each check; u = 2^-24). A bf16-rounded result gets, on top, the
 * rounding itself (one bf16 ulp of the rounded reference, at most 2^-7
 * relative: a value within fp32 error of a tie may round either way) plus,
 * where the op rounds intermediates, one bf16 ulp per intermediate that may
 * round to the other side. Because the reference rounds at the same points,
 * nearly every bf16 result must also be *bit-equal* to the reference: 99%
 * of the elements (a rounding point left out or added makes 5-50% of them
 * differ; attention's long sums make honest flips more common: 95% over
 * 1000 keys, 90% over 10000). Attention also runs on a second backend whose
 * score buffer is lowered (the test seam of cpu/cpu.h), so that rows longer
 * than it take the three-pass path. */
#include "kt.h"

#include <float.h>

static kt_be B;

/* Comparison of one op's outputs. */
struct cmp {
	const char *what;
	size_t n, bad, exact;
	int bf16;
	int pct; /* bf16: the percentage that must be bit-equal */
};

static void cmp_init(struct cmp *c, const char *what, int act)
{
	memset(c, 0, sizeof *c);
	c->what = what;
	c->bf16 = act == KERN_ACT_BF16;
	c->pct = 99;
	kt_close_fails = 0;
}

static void cmp_one(struct cmp *c, float got, double ref, double tol)
{
	c->n++;
	if (!kt_close(c->what, c->n - 1, got, ref, tol))
		c->bad++;
	if ((double)got == ref)
		c->exact++;
}

static void cmp_end(struct cmp *c)
{
	ASSERT(c->bad == 0, "%s: %zu of %zu outside tolerance", c->what, c->bad,
	       c->n);
	/* two elements of slack for the small comparisons */
	if (c->bf16 && c->n >= 32)
		ASSERT((c->exact + 2) * 100 >= c->n * (size_t)c->pct,
		       "%s: only %zu of %zu bit-equal to the rounded reference",
		       c->what, c->exact, c->n);
}

/* ---- embed ---- */

static void test_embed(int wdt)
{
	int T = 67, H = 37, V = 50;
	void *tab;
	float *tf = kt_weights((size_t)V * H, wdt, -2, 2, &tab);
	int32_t ids[67];
	for (int t = 0; t < T; t++)
		ids[t] = (int32_t)(kt_next() % V);
	float *out = malloc((size_t)T * H * 4);
	kt_poison(out, (size_t)T * H);
	int rc = B.o->embed(B.q, out, tab, wdt, ids, T, H, V);
	ASSERT(rc == 0, "embed %s: %d", kt_dtname(wdt), rc);
	size_t bad = 0;
	for (int t = 0; t < T; t++)
		for (int h = 0; h < H; h++)
			/* exact: a dtype conversion to fp32 is exact */
			bad += out[t * H + h] != tf[(size_t)ids[t] * H + h];
	ASSERT(bad == 0, "embed %s: %zu elements differ", kt_dtname(wdt), bad);
	free(tf);
	free(tab);
	free(out);
}

/* ---- matmul ---- */

static void test_matmul(int T, int N, int K, int wdt, int act)
{
	int ldx = K + 3, ldy = N + 5;
	float *x = malloc((size_t)T * ldx * 4);
	kt_fill(x, (size_t)T * ldx, -1, 1);
	void *W;
	float *wf = kt_weights((size_t)N * K, wdt, -1, 1, &W);
	float *y = malloc((size_t)T * ldy * 4);
	kt_poison(y, (size_t)T * ldy);
	int rc = B.o->matmul(B.q, y, ldy, x, ldx, W, wdt, T, N, K, act);
	ASSERT(rc == 0, "matmul: %d", rc);
	char what[96];
	snprintf(what, sizeof what, "matmul T%d N%d K%d %s act%d", T, N, K,
		 kt_dtname(wdt), act);
	struct cmp c;
	cmp_init(&c, what, act);
	size_t pad_written = 0;
	for (int t = 0; t < T; t++) {
		for (int n = 0; n < N; n++) {
			double s = 0, mag = 0;
			for (int k = 0; k < K; k++) {
				double p =
				    (double)x[t * ldx + k] * wf[n * K + k];
				s += p;
				mag += fabs(p);
			}
			/* a sum of K rounded products: |err| <= (K+2) u
			 * sum |x w| (recursive summation bound) */
			double eps = (K + 2) * KT_U * mag;
			double ref = kt_rnd(s, act);
			double tol = eps;
			if (c.bf16) /* the final rounding */
				tol = eps * 1.01 + KT_BF16_ULP * fabs(s);
			cmp_one(&c, y[t * ldy + n], ref, tol);
		}
		for (int n = N; n < ldy; n++)
			pad_written += !isnan(y[t * ldy + n]);
	}
	cmp_end(&c);
	ASSERT(pad_written == 0, "%s: %zu padding elements written", what,
	       pad_written);
	free(x);
	free(wf);
	free(W);
	free(y);
}

/* ---- add, swiglu, sigmoid_mul ---- */

static void test_elementwise(int act)
{
	size_t n = 40000 + 13; /* several tasks of the element-wise block */
	float *a = malloc(n * 4), *b = malloc(n * 4), *y = malloc(n * 4),
	      *y0 = malloc(n * 4);
	kt_fill(a, n, -6, 6);
	kt_fill(b, n, -3, 3);
	kt_fill(y0, n, -3, 3);

	memcpy(y, y0, n * 4);
	ASSERT(B.o->add(B.q, y, a, n, act) == 0, "add");
	struct cmp c;
	cmp_init(&c, act ? "add bf16" : "add f32", act);
	for (size_t i = 0; i < n; i++) {
		double s = (double)a[i] + y0[i];
		/* one fp32 rounding: u |s|; then the bf16 rounding */
		double tol =
		    KT_U * fabs(s) + (c.bf16 ? KT_BF16_ULP * fabs(s) : 0);
		cmp_one(&c, y[i], kt_rnd(s, act), tol);
	}
	cmp_end(&c);

	kt_poison(y, n);
	ASSERT(B.o->swiglu(B.q, y, a, b, n, act) == 0, "swiglu");
	cmp_init(&c, act ? "swiglu bf16" : "swiglu f32", act);
	for (size_t i = 0; i < n; i++) {
		double s = kt_rnd(kt_silu(a[i]), act);
		double r = kt_rnd(s * b[i], act);
		/* fp32: expf, the add, the division, the product: 8 u; bf16:
		 * the intermediate's rounding may flip (2^-7) and the final
		 * rounding (one ulp, 2^-7) */
		double tol = 8 * KT_U * fabs(r) +
			     (c.bf16 ? (1.0 / 128 + KT_BF16_ULP) * fabs(r) : 0);
		cmp_one(&c, y[i], r, tol);
	}
	cmp_end(&c);

	kt_poison(y, n);
	ASSERT(B.o->sigmoid_mul(B.q, y, a, b, n, act) == 0, "sigmoid_mul");
	cmp_init(&c, act ? "sigmoid_mul bf16" : "sigmoid_mul f32", act);
	for (size_t i = 0; i < n; i++) {
		double s = kt_rnd(kt_sigmoid(b[i]), act);
		double r = kt_rnd(a[i] * s, act);
		double tol = 8 * KT_U * fabs(r) +
			     (c.bf16 ? (1.0 / 128 + KT_BF16_ULP) * fabs(r) : 0);
		cmp_one(&c, y[i], r, tol);
	}
	cmp_end(&c);

	/* in place, as the engine calls it: y = x * sigmoid(gate), y == x */
	memcpy(y, a, n * 4);
	ASSERT(B.o->sigmoid_mul(B.q, y, y, b, n, act) == 0, "sigmoid_mul");
	kt_poison(y0, n);
	ASSERT(B.o->sigmoid_mul(B.q, y0, a, b, n, act) == 0, "sigmoid_mul");
	ASSERT(memcmp(y, y0, n * 4) == 0, "sigmoid_mul in place differs");
	free(a);
	free(b);
	free(y);
	free(y0);
}

/* ---- rmsnorm ---- */

static void test_rmsnorm(int rows, int dim, int wdt, int plus_one, int act,
			 int inplace)
{
	int ldx = dim + 7, ldy = inplace ? ldx : dim + 2;
	float *x = malloc((size_t)rows * ldx * 4);
	kt_fill(x, (size_t)rows * ldx, -2, 2);
	float *y = inplace ? malloc((size_t)rows * ldx * 4)
			   : malloc((size_t)rows * ldy * 4);
	if (inplace)
		memcpy(y, x, (size_t)rows * ldx * 4);
	else
		kt_poison(y, (size_t)rows * ldy);
	void *w;
	float *wf = kt_weights(dim, wdt, -1, 1, &w);
	float eps = 1e-6f;
	int rc = B.o->rmsnorm(B.q, y, ldy, inplace ? y : x, ldx, w, wdt, rows,
			      dim, eps, plus_one, act);
	ASSERT(rc == 0, "rmsnorm: %d", rc);
	char what[96];
	snprintf(what, sizeof what, "rmsnorm r%d d%d %s +1=%d act%d inpl%d",
		 rows, dim, kt_dtname(wdt), plus_one, act, inplace);
	struct cmp c;
	cmp_init(&c, what, act);
	for (int r = 0; r < rows; r++) {
		const float *xr = x + (size_t)r * ldx;
		double ss = 0;
		for (int i = 0; i < dim; i++)
			ss += (double)xr[i] * xr[i];
		double inv = 1.0 / sqrt(ss / dim + eps);
		for (int i = 0; i < dim; i++) {
			double f = plus_one ? 1.0 + wf[i] : wf[i];
			double s = xr[i] * inv * f;
			/* sum of squares (dim + 2) u, halved by the square
			 * root, + the division, sqrt, 1 + w and two
			 * products: (dim / 2 + 8) u relative */
			double tol = (dim / 2.0 + 8) * KT_U * fabs(s);
			if (c.bf16)
				tol = tol * 1.01 + KT_BF16_ULP * fabs(s);
			cmp_one(&c, y[(size_t)r * ldy + i], kt_rnd(s, act),
				tol);
		}
		if (!inplace)
			for (int i = dim; i < ldy; i++)
				ASSERT(isnan(y[(size_t)r * ldy + i]),
				       "%s: padding written", what);
	}
	cmp_end(&c);
	free(x);
	free(y);
	free(wf);
	free(w);
}

/* ---- gated_rmsnorm ---- */

static void test_gated_rmsnorm(int rows, int dim, int wdt, int act)
{
	size_t n = (size_t)rows * dim;
	float *x = malloc(n * 4), *z = malloc(n * 4), *y = malloc(n * 4);
	kt_fill(x, n, -2, 2);
	kt_fill(z, n, -5, 5);
	kt_poison(y, n);
	void *w;
	float *wf = kt_weights(dim, wdt, -1.5f, 1.5f, &w);
	float eps = 1e-6f;
	ASSERT(B.o->gated_rmsnorm(B.q, y, x, z, dim, 1, w, wdt, rows, dim, eps, act) ==
		   0,
	       "gated_rmsnorm");
	char what[96];
	snprintf(what, sizeof what, "gated_rmsnorm r%d d%d %s act%d", rows, dim,
		 kt_dtname(wdt), act);
	struct cmp c;
	cmp_init(&c, what, act);
	for (int r = 0; r < rows; r++) {
		const float *xr = x + (size_t)r * dim;
		double ss = 0;
		for (int i = 0; i < dim; i++)
			ss += (double)xr[i] * xr[i];
		double inv = 1.0 / sqrt(ss / dim + eps);
		for (int i = 0; i < dim; i++) {
			double nn = kt_rnd(xr[i] * inv, act);
			double p = kt_rnd(wf[i] * nn, act);
			double s =
			    kt_rnd(p * kt_silu(z[(size_t)r * dim + i]), act);
			/* fp32: the norm (dim / 2 + 8) u, the weight, silu
			 * and the product 8 u more; bf16: n and p may each
			 * round to the other side (2^-7 each), then the final
			 * rounding */
			double tol = (dim / 2.0 + 16) * KT_U * fabs(s);
			if (c.bf16)
				tol += (2.0 / 128 + KT_BF16_ULP) * fabs(s);
			cmp_one(&c, y[(size_t)r * dim + i], s, tol);
		}
	}
	cmp_end(&c);
	free(x);
	free(z);
	free(y);
	free(wf);
	free(w);
}

/* ---- conv1d ---- */

static void test_conv1d(int T, int C, int Kc, int wdt, int act)
{
	int ldin = C + 3;
	float *in = malloc((size_t)T * ldin * 4);
	kt_fill(in, (size_t)T * ldin, -2, 2);
	float *tail = malloc((size_t)(Kc - 1) * C * 4 + 4);
	kt_fill(tail, (size_t)(Kc - 1) * C, -2, 2);
	float *tail0 = malloc((size_t)(Kc - 1) * C * 4 + 4);
	memcpy(tail0, tail, (size_t)(Kc - 1) * C * 4);
	void *w;
	float *wf = kt_weights((size_t)C * Kc, wdt, -1, 1, &w);
	float *out = malloc((size_t)T * C * 4);
	kt_poison(out, (size_t)T * C);
	int rc = B.o->conv1d(B.q, out, in, ldin, tail, w, wdt, T, C, Kc, act);
	ASSERT(rc == 0, "conv1d: %d", rc);
	char what[96];
	snprintf(what, sizeof what, "conv1d T%d C%d Kc%d %s act%d", T, C, Kc,
		 kt_dtname(wdt), act);
	struct cmp c;
	cmp_init(&c, what, act);
	/* [tail0; in] as one sequence of Kc - 1 + T rows */
	for (int t = 0; t < T; t++)
		for (int ch = 0; ch < C; ch++) {
			double s = 0, mag = 0;
			for (int j = 0; j < Kc; j++) {
				int r = t + j; /* row of the joined sequence */
				double xv =
				    r < Kc - 1
					? tail0[(size_t)r * C + ch]
					: in[(size_t)(r - (Kc - 1)) * ldin +
					     ch];
				double p = wf[(size_t)ch * Kc + j] * xv;
				s += p;
				mag += fabs(p);
			}
			double ref = kt_rnd(kt_silu(kt_rnd(s, act)), act);
			/* the sum: (Kc + 2) u sum |w x|; silu' <= 1.1 passes
			 * it on, silu adds 6 u; bf16: rnd(sum) may flip by a
			 * bf16 ulp of the sum (2^-7 |s|), then the final
			 * rounding */
			double es = (Kc + 2) * KT_U * mag;
			double tol = 1.1 * es + 6 * KT_U * fabs(ref);
			if (c.bf16)
				tol += 1.1 * fabs(s) / 128 +
				       KT_BF16_ULP * fabs(ref);
			cmp_one(&c, out[(size_t)t * C + ch], ref, tol);
		}
	cmp_end(&c);
	/* the new tail: exactly the last Kc - 1 rows of [tail0; in] */
	size_t bad = 0;
	for (int i = 0; i < Kc - 1; i++) {
		int r = T + i;
		for (int ch = 0; ch < C; ch++) {
			float e = r < Kc - 1
				      ? tail0[(size_t)r * C + ch]
				      : in[(size_t)(r - (Kc - 1)) * ldin + ch];
			bad += tail[(size_t)i * C + ch] != e;
		}
	}
	ASSERT(bad == 0, "%s: %zu tail elements wrong", what, bad);
	free(in);
	free(tail);
	free(tail0);
	free(wf);
	free(w);
	free(out);
}

/* ---- gdn_gates ---- */

/* act F32 (an fp32 model: beta not rounded) or BF16 (a bf16 model, b from
 * a rounding matmul: beta rounded). */
static void test_gdn_gates(int bf16_b)
{
	int T = 67, Hv = 6, ldb = 9, lda = 11;
	float *b = malloc((size_t)T * ldb * 4),
	      *a = malloc((size_t)T * lda * 4);
	kt_fill(b, (size_t)T * ldb, -6, 6);
	kt_fill(a, (size_t)T * lda, -8, 8);
	if (bf16_b)
		for (int i = 0; i < T * ldb; i++)
			b[i] = moor_round_bf16(b[i]);
	/* a few a + dt_bias above 20: the softplus threshold */
	for (int t = 0; t < T; t += 7)
		a[(size_t)t * lda] = 25.0f + (float)t;
	float A_log[6], dt_bias[6];
	kt_fill(A_log, 6, -2, 2);
	kt_fill(dt_bias, 6, -1, 1);
	float *beta = malloc((size_t)T * Hv * 4),
	      *g = malloc((size_t)T * Hv * 4);
	kt_poison(beta, (size_t)T * Hv);
	kt_poison(g, (size_t)T * Hv);
	int act = bf16_b ? KERN_ACT_BF16 : KERN_ACT_F32;
	ASSERT(B.o->gdn_gates(B.q, beta, g, b, ldb, a, lda, A_log, dt_bias, T,
			      Hv, act) == 0,
	       "gdn_gates");
	struct cmp cb, cg;
	cmp_init(&cb, bf16_b ? "gdn_gates beta (bf16 b)" : "gdn_gates beta",
		 act);
	cmp_init(&cg, "gdn_gates g", KERN_ACT_F32);
	for (int t = 0; t < T; t++)
		for (int h = 0; h < Hv; h++) {
			double sb = kt_sigmoid(b[(size_t)t * ldb + h]);
			/* expf, the add, the division: 8 u; bf16: one ulp */
			cmp_one(&cb, beta[(size_t)t * Hv + h], kt_rnd(sb, act),
				8 * KT_U * sb +
				    (bf16_b ? KT_BF16_ULP * sb : 0));
			double x =
			    (double)(a[(size_t)t * lda + h] + dt_bias[h]);
			double sp = x > 20 ? x : log1p(exp(x));
			double rg = -exp((double)A_log[h]) * sp;
			/* expf, log1pf, the add before them (its rounding is
			 * part of the contract: x is an fp32 sum), the
			 * product: 8 u relative */
			cmp_one(&cg, g[(size_t)t * Hv + h], rg,
				8 * KT_U * fabs(rg));
		}
	cmp_end(&cb);
	cmp_end(&cg);
	free(a);
	free(b);
	free(beta);
	free(g);
}

/* ---- l2norm ---- */

static void test_l2norm(int T, int heads, int dim, int act)
{
	int ld = heads * dim + 5;
	float *x = malloc((size_t)T * ld * 4), *x0 = malloc((size_t)T * ld * 4);
	kt_fill(x0, (size_t)T * ld, -2, 2);
	memcpy(x, x0, (size_t)T * ld * 4);
	float eps = 1e-6f, scale = 1.0f / sqrtf((float)dim);
	ASSERT(B.o->l2norm(B.q, x, ld, T, heads, dim, eps, scale, act) == 0,
	       "l2norm");
	char what[64];
	snprintf(what, sizeof what, "l2norm T%d h%d d%d act%d", T, heads, dim,
		 act);
	struct cmp c;
	cmp_init(&c, what, act);
	for (int t = 0; t < T; t++) {
		for (int h = 0; h < heads; h++) {
			const float *xr = x0 + (size_t)t * ld + (size_t)h * dim;
			double ss = 0;
			for (int i = 0; i < dim; i++)
				ss += (double)xr[i] * xr[i];
			double d = sqrt(ss + eps);
			for (int i = 0; i < dim; i++) {
				double r0 = xr[i] / d;
				double ref = kt_rnd(r0, act) * scale;
				/* (dim / 2 + 6) u through the norm, one more
				 * for the scale; bf16: the rounding before
				 * the scale */
				double tol = (dim / 2.0 + 8) * KT_U * fabs(ref);
				if (c.bf16)
					tol += KT_BF16_ULP * fabs(r0) * scale;
				cmp_one(&c,
					x[(size_t)t * ld + (size_t)h * dim + i],
					ref, tol);
			}
		}
		for (int i = heads * dim; i < ld; i++)
			ASSERT(x[(size_t)t * ld + i] == x0[(size_t)t * ld + i],
			       "%s: padding changed", what);
	}
	/* bit-equality is about the rounded value, before the scale */
	c.bf16 = 0;
	cmp_end(&c);
	free(x);
	free(x0);
}

/* ---- the delta rule ---- */

/* Inputs laid out as the engine has them: one [T, ld] buffer of q | k | v
 * (the conv output), q and k L2-normalised, q scaled. */
struct dr_in {
	int T, Hk, Hv, dk, dv, ld;
	float *u, *g, *beta, *S0;
};

static void dr_make(struct dr_in *d, int T, int Hk, int Hv, int dk, int dv)
{
	d->T = T;
	d->Hk = Hk;
	d->Hv = Hv;
	d->dk = dk;
	d->dv = dv;
	d->ld = 2 * Hk * dk + Hv * dv + 3;
	d->u = malloc((size_t)T * d->ld * 4);
	kt_fill(d->u, (size_t)T * d->ld, -1, 1);
	for (int t = 0; t < T; t++)
		for (int w = 0; w < 2 * Hk; w++) {
			float *x = d->u + (size_t)t * d->ld + (size_t)w * dk;
			double ss = 0;
			for (int i = 0; i < dk; i++)
				ss += (double)x[i] * x[i];
			double f =
			    1.0 / sqrt(ss) * (w < Hk ? 1.0 / sqrt(dk) : 1.0);
			for (int i = 0; i < dk; i++)
				x[i] = (float)(x[i] * f);
		}
	d->g = malloc((size_t)T * Hv * 4);
	d->beta = malloc((size_t)T * Hv * 4);
	kt_fill(d->g, (size_t)T * Hv, -1.5f, -0.005f);
	kt_fill(d->beta, (size_t)T * Hv, 0.02f, 0.98f);
	d->S0 = malloc((size_t)Hv * dk * dv * 4);
	kt_fill(d->S0, (size_t)Hv * dk * dv, -0.5f, 0.5f);
}

static void dr_free(struct dr_in *d)
{
	free(d->u);
	free(d->g);
	free(d->beta);
	free(d->S0);
}

/* SPEC §5.5 in double: o [T, Hv, dv], S [Hv, dk, dv]. */
static void dr_ref(const struct dr_in *d, double *o, double *S)
{
	int dk = d->dk, dv = d->dv, r = d->Hv / d->Hk;
	for (size_t i = 0; i < (size_t)d->Hv * dk * dv; i++)
		S[i] = d->S0[i];
	double *m = malloc((size_t)dv * 8);
	for (int t = 0; t < d->T; t++)
		for (int h = 0; h < d->Hv; h++) {
			const float *u = d->u + (size_t)t * d->ld;
			const float *q = u + (size_t)(h / r) * dk;
			const float *k = u + (size_t)(d->Hk + h / r) * dk;
			const float *v =
			    u + (size_t)2 * d->Hk * dk + (size_t)h * dv;
			double *Sh = S + (size_t)h * dk * dv;
			double eg = exp((double)d->g[t * d->Hv + h]);
			double b = d->beta[t * d->Hv + h];
			for (int i = 0; i < dk * dv; i++)
				Sh[i] *= eg;
			for (int e = 0; e < dv; e++) {
				m[e] = 0;
				for (int i = 0; i < dk; i++)
					m[e] += Sh[i * dv + e] * k[i];
			}
			for (int e = 0; e < dv; e++) {
				double de = b * (v[e] - m[e]);
				for (int i = 0; i < dk; i++)
					Sh[i * dv + e] += k[i] * de;
			}
			for (int e = 0; e < dv; e++) {
				double s = 0;
				for (int i = 0; i < dk; i++)
					s += Sh[i * dv + e] * q[i];
				o[((size_t)t * d->Hv + h) * dv + e] = s;
			}
		}
	free(m);
}

static void test_delta(int T, int Hk, int Hv, int dk, int dv, int act)
{
	struct dr_in d;
	dr_make(&d, T, Hk, Hv, dk, dv);
	size_t no = (size_t)T * Hv * dv, nS = (size_t)Hv * dk * dv;
	double *ro = malloc(no * 8), *rS = malloc(nS * 8);
	dr_ref(&d, ro, rS);
	double omax = 0, smax = 0;
	for (size_t i = 0; i < no; i++)
		omax = fmax(omax, fabs(ro[i]));
	for (size_t i = 0; i < nS; i++)
		smax = fmax(smax, fabs(rS[i]));
	size_t wsb = B.o->delta_ws_bytes(B.ctx, T, Hv, dk, dv);
	ASSERT(wsb > 0, "delta_ws_bytes");
	void *ws;
	ASSERT(B.o->alloc(B.ctx, wsb, &ws) == 0, "alloc ws");
	float *o = malloc(no * 4), *S = malloc(nS * 4);
	const float *q = d.u, *k = d.u + (size_t)Hk * dk,
		    *v = d.u + (size_t)2 * Hk * dk;
	for (int form = 0; form < 2; form++) {
		kt_poison(o, no);
		memcpy(S, d.S0, nS * 4);
		int rc = form ? B.o->delta_recurrent(B.q, o, S, q, k, d.ld, v,
						     d.ld, d.g, d.beta, T, Hk,
						     Hv, dk, dv, act)
			      : B.o->delta_chunked(B.q, o, S, q, k, d.ld, v,
						   d.ld, d.g, d.beta, T, Hk, Hv,
						   dk, dv, ws, act);
		ASSERT(rc == 0, "delta: %d", rc);
		char what[96];
		snprintf(
		    what, sizeof what, "delta_%s T%d Hk%d Hv%d dk%d dv%d act%d",
		    form ? "recurrent" : "chunked", T, Hk, Hv, dk, dv, act);
		struct cmp c;
		cmp_init(&c, what, act);
		/* fp32 against the exact recurrence: every output is a
		 * dk-term product of the state, which itself sums O(T) decayed
		 * updates; measured errors are ~1e-6 of the largest value, the
		 * bound allows 3e-5 of it (either summation order). bf16: the
		 * final rounding of o on top. */
		for (size_t i = 0; i < no; i++) {
			double tol = 3e-5 * omax;
			if (c.bf16)
				tol += KT_BF16_ULP * fabs(ro[i]);
			cmp_one(&c, o[i], kt_rnd(ro[i], act), tol);
		}
		c.bf16 = 0; /* near-ties of o are not rare enough at 3e-5 */
		cmp_end(&c);
		snprintf(what, sizeof what, "delta_%s S T%d act%d",
			 form ? "recurrent" : "chunked", T, act);
		cmp_init(&c, what, KERN_ACT_F32);
		for (size_t i = 0; i < nS; i++)
			cmp_one(&c, S[i], rS[i], 3e-5 * smax);
		cmp_end(&c);
	}
	B.o->free(B.ctx, ws);
	free(o);
	free(S);
	free(ro);
	free(rS);
	dr_free(&d);
}

/* ---- rope ---- */

static void test_rope(int T, int heads, int D, int rot, int64_t pos0,
		      float theta, int act)
{
	int ld = heads * D + 3;
	float *x = malloc((size_t)T * ld * 4), *x0 = malloc((size_t)T * ld * 4);
	kt_fill(x0, (size_t)T * ld, -2, 2);
	memcpy(x, x0, (size_t)T * ld * 4);
	ASSERT(B.o->rope(B.q, x, ld, T, heads, D, rot, pos0, theta, act) == 0,
	       "rope");
	char what[96];
	snprintf(what, sizeof what, "rope T%d h%d D%d rot%d pos%lld act%d", T,
		 heads, D, rot, (long long)pos0, act);
	struct cmp c;
	cmp_init(&c, what, act);
	int half = rot / 2;
	for (int t = 0; t < T; t++) {
		for (int i = 0; i < half; i++) {
			/* the angle as the contract computes it, in fp32
			 * (inv_freq = 1 / theta^(2i/rot), times the position);
			 * cos and sin from it in double */
			float e = (float)(2 * i) / (float)rot;
			float inv =
			    (float)(1.0 / pow((double)theta, (double)e));
			float a = inv * (float)(pos0 + t);
			double cs = kt_rnd(cos((double)a), act);
			double sn = kt_rnd(sin((double)a), act);
			for (int h = 0; h < heads; h++) {
				size_t o = (size_t)t * ld + (size_t)h * D;
				double x1 = x0[o + i], x2 = x0[o + i + half];
				double r1 = kt_rnd(kt_rnd(x1 * cs, act) -
						       kt_rnd(x2 * sn, act),
						   act);
				double r2 = kt_rnd(kt_rnd(x2 * cs, act) +
						       kt_rnd(x1 * sn, act),
						   act);
				/* fp32: inv_freq's powf and division may
				 * differ by 2 u, moving the angle by 2 u |a|,
				 * cos/sin 1 u, products and sum 3 u; bf16:
				 * cos, sin and each product may round to the
				 * other side of a tie (2^-7 of |x1| + |x2|
				 * each), then the sum's rounding */
				double tol = (2 * fabs((double)a) + 6) * KT_U *
					     (fabs(x1) + fabs(x2));
				if (c.bf16)
					tol +=
					    (3.0 / 128) * (fabs(x1) + fabs(x2));
				cmp_one(&c, x[o + i], r1, tol);
				cmp_one(&c, x[o + i + half], r2, tol);
			}
		}
		for (int h = 0; h < heads; h++)
			for (int i = rot; i < D; i++) {
				size_t o = (size_t)t * ld + (size_t)h * D + i;
				ASSERT(x[o] == x0[o],
				       "%s: pass-through dim %d "
				       "changed",
				       what, i);
			}
		for (int i = heads * D; i < ld; i++)
			ASSERT(x[(size_t)t * ld + i] == x0[(size_t)t * ld + i],
			       "%s: padding changed", what);
	}
	cmp_end(&c);
	free(x);
	free(x0);
}

/* ---- attention ---- */

static kt_be BS; /* attention with a 3000-float score cap */

static void test_attention_on(kt_be *be, int T, int64_t pos0, int Hq, int Hkv,
			      int D, int kvdt, int act)
{
	int ldq = Hq * D + 5;
	size_t L = (size_t)pos0 + T, nkv = L * Hkv * D;
	float *qv = malloc((size_t)T * ldq * 4);
	kt_fill(qv, (size_t)T * ldq, -1, 1);
	void *K, *V;
	float *kf = kt_weights(nkv, kvdt, -1, 1, &K);
	float *vf = kt_weights(nkv, kvdt, -1, 1, &V);
	size_t no = (size_t)T * Hq * D;
	float *out = malloc(no * 4);
	kt_poison(out, no);
	float scale = 1.0f / sqrtf((float)D);
	int rc = be->o->attention(be->q, out, qv, ldq, K, V, kvdt, T, pos0, Hq,
				  Hkv, D, scale, act);
	ASSERT(rc == 0, "attention: %d", rc);
	char what[96];
	snprintf(what, sizeof what,
		 "attention%s T%d pos%lld Hq%d Hkv%d D%d %s act%d",
		 be == &BS ? " (3-pass)" : "", T, (long long)pos0, Hq, Hkv, D,
		 kt_dtname(kvdt), act);
	struct cmp c;
	cmp_init(&c, what, act);
	/* longer fp32 sums flip more honest near-ties */
	if (L > 1000)
		c.pct = L > 10000 ? 90 : 95;
	double *s = malloc(L * 8), *acc = malloc((size_t)D * 8),
	       *mag = malloc((size_t)D * 8);
	for (int t = 0; t < T; t++)
		for (int h = 0; h < Hq; h++) {
			int g = h / (Hq / Hkv);
			size_t len = (size_t)pos0 + t + 1;
			const float *q = qv + (size_t)t * ldq + (size_t)h * D;
			double m = -INFINITY, qk = 0;
			for (size_t j = 0; j < len; j++) {
				const float *k = kf + (j * Hkv + g) * D;
				double d = 0, dm = 0;
				for (int i = 0; i < D; i++) {
					d += (double)q[i] * k[i];
					dm += fabs((double)q[i] * k[i]);
				}
				/* the reference rounds q.k and the scaled
				 * score to bf16 (eager attention) */
				s[j] = kt_rnd((double)scale * kt_rnd(d, act),
					      act);
				qk = fmax(qk, scale * dm);
				m = fmax(m, s[j]);
			}
			double sum = 0;
			for (size_t j = 0; j < len; j++)
				sum += exp(s[j] - m);
			for (int i = 0; i < D; i++)
				acc[i] = mag[i] = 0;
			for (size_t j = 0; j < len; j++) {
				double p = kt_rnd(exp(s[j] - m) / sum, act);
				const float *v = vf + (j * Hkv + g) * D;
				for (int i = 0; i < D; i++) {
					acc[i] += p * v[i];
					mag[i] += p * fabs(v[i]);
				}
			}
			for (int i = 0; i < D; i++) {
				/* fp32: a score is off by (D + 2) u qk, which
				 * moves p_j relatively by twice that (its own
				 * and the max's), plus exp, the sum over len
				 * and the division; p V then adds (len + 2) u;
				 * all relative to sum_j p_j |v_j|. bf16: a p_j
				 * may round to the other side (2^-7 of it),
				 * then the final rounding. */
				double rel =
				    (2 * (D + 2) * qk + 2.0 * len + 10) * KT_U;
				double tol = rel * mag[i];
				if (c.bf16)
					tol += mag[i] / 128 +
					       KT_BF16_ULP * fabs(acc[i]);
				cmp_one(&c, out[((size_t)t * Hq + h) * D + i],
					kt_rnd(acc[i], act), tol);
			}
		}
	cmp_end(&c);
	free(s);
	free(acc);
	free(mag);
	free(qv);
	free(kf);
	free(vf);
	free(K);
	free(V);
	free(out);
}

static void test_attention(int T, int64_t pos0, int Hq, int Hkv, int D,
			   int kvdt, int act)
{
	test_attention_on(&B, T, pos0, Hq, Hkv, D, kvdt, act);
}

/* ---- kv_write, split_qgate ---- */

static void test_kv_write(int kvdt)
{
	int T = 67, width = 37, ld = 41;
	int64_t row0 = 5, rows = row0 + T + 3;
	float *src = malloc((size_t)T * ld * 4);
	kt_fill(src, (size_t)T * ld, -3, 3);
	size_t es = kern_dtype_size(kvdt), nb = (size_t)rows * width * es;
	unsigned char *dst = malloc(nb), *ref = malloc(nb);
	memset(dst, 0xa5, nb);
	memset(ref, 0xa5, nb);
	for (int t = 0; t < T; t++)
		for (int i = 0; i < width; i++) {
			size_t o = ((size_t)(row0 + t) * width + i) * es;
			float x = src[(size_t)t * ld + i];
			if (kvdt == KERN_F32) {
				memcpy(ref + o, &x, 4);
			} else {
				uint16_t h = kvdt == KERN_BF16
						 ? moor_f32_to_bf16(x)
						 : moor_f32_to_f16(x);
				memcpy(ref + o, &h, 2);
			}
		}
	ASSERT(B.o->kv_write(B.q, dst, kvdt, row0, src, ld, T, width) == 0,
	       "kv_write");
	/* exact: a rounding to the cache dtype (nearest even), rows outside
	 * [row0, row0 + T) untouched */
	ASSERT(memcmp(dst, ref, nb) == 0, "kv_write %s differs",
	       kt_dtname(kvdt));
	free(src);
	free(dst);
	free(ref);
}

static void test_split_qgate(void)
{
	int T = 67, Hq = 3, D = 13;
	size_t n = (size_t)T * Hq * D;
	float *qg = malloc(2 * n * 4), *qo = malloc(n * 4), *go = malloc(n * 4);
	kt_fill(qg, 2 * n, -1, 1);
	kt_poison(qo, n);
	kt_poison(go, n);
	ASSERT(B.o->split_qgate(B.q, qo, go, qg, T, Hq, D) == 0, "split_qgate");
	size_t bad = 0;
	for (size_t r = 0; r < (size_t)T * Hq; r++)
		for (int i = 0; i < D; i++) {
			bad += qo[r * D + i] != qg[r * 2 * D + i];
			bad += go[r * D + i] != qg[r * 2 * D + D + i];
		}
	ASSERT(bad == 0, "split_qgate: %zu elements wrong", bad);
	free(qg);
	free(qo);
	free(go);
}

int main(void)
{
	kt_seed(20261202);
	B = kt_open(2);
	BS = kt_open_cap(2, 3000);
	const int wdts[3] = {KERN_F32, KERN_BF16, KERN_F16};
	for (int a = 0; a < 2; a++) {
		for (int w = 0; w < 3; w++) {
			test_matmul(1, 5, 3, wdts[w], a);
			test_matmul(67, 37, 131, wdts[w], a);
			test_matmul(3, 70, 300, wdts[w], a); /* k-blocks */
			test_matmul(130, 81, 24, wdts[w], a);
			test_rmsnorm(67, 37, wdts[w], 1, a, 0);
			test_rmsnorm(5, 256, wdts[w], 0, a, 1);
			test_gated_rmsnorm(67, 20, wdts[w], a);
			test_conv1d(67, 70, 4, wdts[w], a);
			test_conv1d(1, 130, 4, wdts[w], a);
			test_conv1d(2, 9, 4, wdts[w], a); /* T < Kc - 1 */
			test_attention(5, 13, 4, 2, 36, wdts[w], a);
			/* more keys than the small cap: three passes */
			test_attention_on(&BS, 3, 5000, 4, 2, 36, wdts[w], a);
			test_kv_write(wdts[w]);
		}
		test_matmul(1, 1, 1, KERN_BF16, a);
		test_rmsnorm(1, 1, KERN_F32, 1, a, 0);
		test_conv1d(3, 5, 1, KERN_F32, a); /* Kc = 1: no tail */
		test_elementwise(a);
		test_l2norm(67, 3, 21, a);
		test_l2norm(1, 2, 128, a);
		test_delta(67, 2, 4, 24, 20, a);
		test_delta(1, 1, 2, 16, 8, a);
		test_delta(128, 1, 1, 32, 32, a);
		test_rope(67, 3, 16, 8, 7, 1e7f, a);
		test_rope(2, 2, 12, 12, 3, 10000.0f, a);
		test_attention(1, 0, 2, 1, 8, KERN_F32, a);
		test_attention(67, 0, 4, 2, 16, KERN_BF16, a);
		test_attention(3, 3, 6, 1, 64, KERN_F32, a);
	}
	/* a long context: 33k keys, one pass, the scores of several rows in
	 * the scratch slot */
	test_attention(3, 33000, 2, 1, 16, KERN_BF16, KERN_ACT_BF16);
	for (int w = 0; w < 3; w++)
		test_embed(wdts[w]);
	test_gdn_gates(0);
	test_gdn_gates(1);
	test_split_qgate();
	kt_close_be(&B);
	kt_close_be(&BS);
	return kt_done("test_kern_ops_reference");
}
