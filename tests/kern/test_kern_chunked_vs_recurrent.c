/* test_kern_chunked_vs_recurrent: the chunked delta rule (SPEC §5.6, prefill)
 * and the recurrent one (§5.5, decode) are the same function in exact
 * arithmetic, so on the same inputs (T = 200: three full chunks and a padded
 * one; Hk = 2, Hv = 4, so value heads share key heads; dk = dv = 32; a
 * non-zero initial state) their outputs and final states agree to fp32
 * summation-order noise: max |chunked - recurrent| / max |recurrent| <= 1e-4
 * for o and for S. Measured here ~1e-6; 1e-4 leaves room for any order of
 * the same sums while still failing a wrong decay, a wrong triangular solve,
 * a state read before instead of after the update, or padding that leaks.
 * The same holds with act BF16 (o rounded by both), where o is allowed one
 * bf16 ulp of the largest value more. */
#include "kt.h"

static double max_abs(const float *x, size_t n)
{
	double m = 0;
	for (size_t i = 0; i < n; i++)
		m = fmax(m, fabs((double)x[i]));
	return m;
}

static double max_diff(const float *a, const float *b, size_t n)
{
	double m = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);
		if (isnan(d))
			return INFINITY;
		m = fmax(m, d);
	}
	return m;
}

static void run(kt_be *B, int T, int Hk, int Hv, int dk, int dv, int act)
{
	int ld = 2 * Hk * dk + Hv * dv + 4;
	float *u = malloc((size_t)T * ld * 4);
	kt_fill(u, (size_t)T * ld, -1, 1);
	/* q and k L2-normalised as the op expects, q scaled by dk^-0.5 */
	for (int t = 0; t < T; t++)
		for (int w = 0; w < 2 * Hk; w++) {
			float *x = u + (size_t)t * ld + (size_t)w * dk;
			double ss = 0;
			for (int i = 0; i < dk; i++)
				ss += (double)x[i] * x[i];
			double f =
			    (w < Hk ? 1 / sqrt((double)dk) : 1) / sqrt(ss);
			for (int i = 0; i < dk; i++)
				x[i] = (float)(x[i] * f);
		}
	float *g = malloc((size_t)T * Hv * 4),
	      *beta = malloc((size_t)T * Hv * 4);
	kt_fill(g, (size_t)T * Hv, -2.0f, -0.001f);
	kt_fill(beta, (size_t)T * Hv, 0.01f, 0.99f);
	size_t nS = (size_t)Hv * dk * dv, no = (size_t)T * Hv * dv;
	float *S0 = malloc(nS * 4), *Sc = malloc(nS * 4), *Sr = malloc(nS * 4);
	kt_fill(S0, nS, -1, 1);
	memcpy(Sc, S0, nS * 4);
	memcpy(Sr, S0, nS * 4);
	float *oc = malloc(no * 4), *orr = malloc(no * 4);
	kt_poison(oc, no);
	kt_poison(orr, no);
	void *ws;
	ASSERT(B->o->alloc(B->ctx, B->o->delta_ws_bytes(B->ctx, T, Hv, dk, dv), &ws) == 0,
	       "alloc");
	const float *q = u, *k = u + (size_t)Hk * dk,
		    *v = u + (size_t)2 * Hk * dk;
	ASSERT(B->o->delta_chunked(B->q, oc, Sc, q, k, ld, v, ld, g, beta, T,
				   Hk, Hv, dk, dv, ws, act) == 0,
	       "delta_chunked");
	ASSERT(B->o->delta_recurrent(B->q, orr, Sr, q, k, ld, v, ld, g, beta, T,
				     Hk, Hv, dk, dv, act) == 0,
	       "delta_recurrent");
	double om = max_abs(orr, no), sm = max_abs(Sr, nS);
	double od = max_diff(oc, orr, no), sd = max_diff(Sc, Sr, nS);
	double otol = 1e-4 + (act == KERN_ACT_BF16 ? KT_BF16_ULP : 0);
	printf("T %d act %d: o max|diff|/max %.3g, S %.3g\n", T, act, od / om,
	       sd / sm);
	ASSERT(om > 0.05 && sm > 0.05, "degenerate inputs (o %g, S %g)", om,
	       sm);
	ASSERT(od <= otol * om, "o: max|diff| %.3g > %.3g * %.3g", od, otol,
	       om);
	ASSERT(sd <= 1e-4 * sm, "S: max|diff| %.3g > 1e-4 * %.3g", sd, sm);
	B->o->free(B->ctx, ws);
	free(u);
	free(g);
	free(beta);
	free(S0);
	free(Sc);
	free(Sr);
	free(oc);
	free(orr);
}

int main(void)
{
	kt_seed(4242);
	kt_be B = kt_open(2);
	run(&B, 200, 2, 4, 32, 32, KERN_ACT_F32);
	run(&B, 200, 2, 4, 32, 32, KERN_ACT_BF16);
	run(&B, 1, 2, 4, 32, 32, KERN_ACT_F32);	 /* one padded chunk */
	run(&B, 64, 1, 3, 24, 40, KERN_ACT_F32); /* exactly one chunk */
	kt_close_be(&B);
	return kt_done("test_kern_chunked_vs_recurrent");
}
