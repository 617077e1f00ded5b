/* sample_rule.h: the arithmetic of sample()'s rule (ops.h) that must give
 * the same bits on the CPU and on a GPU: kern_exp_det's sequence of double
 * operations. It is included by kernels/sample.c (host C, built with
 * -ffp-contract=off) and by the CUDA sampler, where every product and sum
 * is an explicitly rounded intrinsic, so neither compiler may fuse a
 * multiply into an add behind our back. */
#ifndef KERN_SAMPLE_RULE_H
#define KERN_SAMPLE_RULE_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KSR_FN static __device__ inline
#define KSR_MUL(a, b) __dmul_rn((a), (b))
#define KSR_ADD(a, b) __dadd_rn((a), (b))
#define KSR_SUB(a, b) __dsub_rn((a), (b))
#define KSR_FROM_BITS(u) __longlong_as_double((long long)(u))
#define KSR_FMUL(a, b) __fmul_rn((a), (b))
#define KSR_FADD(a, b) __fadd_rn((a), (b))
#define KSR_FSUB(a, b) __fsub_rn((a), (b))
#else
#include <string.h>
#define KSR_FN static inline
#define KSR_MUL(a, b) ((a) * (b))
#define KSR_ADD(a, b) ((a) + (b))
#define KSR_SUB(a, b) ((a) - (b))
#define KSR_FROM_BITS(u) ksr_from_bits(u)
#define KSR_FMUL(a, b) ((a) * (b))
#define KSR_FADD(a, b) ((a) + (b))
#define KSR_FSUB(a, b) ((a) - (b))
static inline double ksr_from_bits(uint64_t u)
{
	double d;
	memcpy(&d, &u, sizeof d);
	return d;
}
#endif

/* 2^n for -1022 <= n <= 1023, exactly. */
KSR_FN double ksr_pow2(int n)
{
	return KSR_FROM_BITS((uint64_t)(n + 1023) << 52);
}

/* kern_exp_det (ops.h): x = n ln2 + r (n to nearest by the 1.5 * 2^52
 * trick, ln2 in two parts so n * ln2_hi is exact), e^r by a degree-13
 * Taylor polynomial in Horner form (|r| <= 0.347: the first term left out
 * is under 4e-18), then 2^n applied in two exact halves so that results
 * down to the subnormals come out without a special case. */
KSR_FN double ksr_exp(double x)
{
	if (!(x > -745.0)) /* NaN too */
		return 0.0;
	if (x > 709.0)
		x = 709.0;
	const double magic = 6755399441055744.0; /* 1.5 * 2^52 */
	double t = KSR_MUL(x, 1.4426950408889634074);
	double nd = KSR_SUB(KSR_ADD(t, magic), magic);
	const double ln2_hi = 6.93147180369123816490e-01;
	const double ln2_lo = 1.90821492927058770002e-10;
	double r = KSR_SUB(x, KSR_MUL(nd, ln2_hi));
	r = KSR_SUB(r, KSR_MUL(nd, ln2_lo));
	/* 1/k! for k = 13 down to 1 */
	const double c[13] = {
	    1.6059043836821614599e-10, 2.0876756987868098979e-09,
	    2.5052108385441718775e-08, 2.7557319223985890653e-07,
	    2.7557319223985890653e-06, 2.4801587301587301587e-05,
	    1.9841269841269841270e-04, 1.3888888888888888889e-03,
	    8.3333333333333333333e-03, 4.1666666666666666667e-02,
	    1.6666666666666666667e-01, 5.0000000000000000000e-01,
	    1.0};
	double p = c[0];
	for (int i = 1; i < 13; i++)
		p = KSR_ADD(KSR_MUL(p, r), c[i]);
	p = KSR_ADD(KSR_MUL(p, r), 1.0);
	int n = (int)nd;
	int n1 = n / 2, n2 = n - n1;
	return KSR_MUL(KSR_MUL(p, ksr_pow2(n1)), ksr_pow2(n2));
}

/* kern_log_det (ops.h): ln x for a normal x > 0. x = m 2^e with m in
 * [sqrt(2)/2, sqrt(2)] from the bits (exact); s = (m - 1) / (m + 1),
 * |s| <= 0.1716; ln m = 2 s (1 + s^2/3 + ... + s^24/25) in Horner form
 * (the first term left out is under 1e-19 of the sum); ln x = e ln2_hi +
 * (e ln2_lo + ln m), where e ln2_hi is exact (ln2_hi's low bits are 0). Every
 * operation is IEEE double (a division included), so both compilers give
 * the same bits. */
KSR_FN double ksr_log(double x)
{
	uint64_t u;
#ifdef __CUDACC__
	u = (uint64_t)__double_as_longlong(x);
#else
	memcpy(&u, &x, sizeof u);
#endif
	int e = (int)((u >> 52) & 0x7ff) - 1023;
	double m =
	    KSR_FROM_BITS((u & 0x000fffffffffffffull) | 0x3ff0000000000000ull);
	if (m > 1.4142135623730951) {
		m = KSR_MUL(m, 0.5);
		e++;
	}
#ifdef __CUDACC__
	double s = __ddiv_rn(KSR_SUB(m, 1.0), KSR_ADD(m, 1.0));
#else
	double s = (m - 1.0) / (m + 1.0);
#endif
	double z = KSR_MUL(s, s);
	/* 1/(2k+1) for k = 12 down to 0 */
	const double c[13] = {0.04,
			      0.043478260869565216,
			      0.047619047619047616,
			      0.05263157894736842,
			      0.058823529411764705,
			      0.06666666666666667,
			      0.07692307692307693,
			      0.09090909090909091,
			      0.1111111111111111,
			      0.14285714285714285,
			      0.2,
			      0.3333333333333333,
			      1.0};
	double p = c[0];
	for (int i = 1; i < 13; i++)
		p = KSR_ADD(KSR_MUL(p, z), c[i]);
	double lnm = KSR_MUL(KSR_MUL(2.0, s), p);
	const double ln2_hi = 6.93147180369123816490e-01;
	const double ln2_lo = 1.90821492927058770002e-10;
	double de = (double)e;
	return KSR_ADD(KSR_MUL(de, ln2_hi), KSR_ADD(KSR_MUL(de, ln2_lo), lnm));
}

/* logprobs()'s value of a key (ops.h): mx the largest key, lnS the log of
 * the sum of the weights (mx finite). */
KSR_FN float ksr_lp(float key, float mx, double lnS)
{
	if (!(mx > -INFINITY && mx < INFINITY))
		return mx == INFINITY && key == INFINITY ? 0.0f : -INFINITY;
	return (float)KSR_SUB(KSR_SUB((double)key, (double)mx), lnS);
}

/* A logit as the sampler orders it: NaN is -inf, -0 is +0. */
KSR_FN float ksr_key(float x)
{
	if (x != x)
		return -INFINITY;
	return x == 0.0f ? 0.0f : x;
}

/* kern_fill_value (ops.h). */
KSR_FN float ksr_fill(uint64_t seed, uint64_t i, float lo, float hi)
{
	uint64_t z = seed + i * 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	float u = (float)(uint32_t)(z >> 40) * (1.0f / 16777216.0f);
	return KSR_FADD(lo, KSR_FMUL(KSR_FSUB(hi, lo), u));
}

#endif
