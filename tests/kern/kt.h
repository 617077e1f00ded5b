/* kt.h: what the kernel tests share: a tiny ASSERT, a seeded generator of
 * non-zero test values, weights in each dtype, NaN poisoning, tolerance
 * checks, and a CPU backend context per thread count. */
#ifndef KT_H
#define KT_H

#include "cpu/cpu.h" /* the CPU backend's context, for its test seam */
#include "moor.h"
#include "ops.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int kt_failed, kt_checks;

#define ASSERT(cond, ...)                                                      \
	do {                                                                   \
		kt_checks++;                                                   \
		if (!(cond)) {                                                 \
			kt_failed++;                                           \
			fprintf(stderr, "%s:%d: failed: %s: ", __FILE__,       \
				__LINE__, #cond);                              \
			fprintf(stderr, __VA_ARGS__);                          \
			fputc('\n', stderr);                                   \
		}                                                              \
	} while (0)

static inline int kt_done(const char *name)
{
	if (kt_failed)
		fprintf(stderr, "%s: %d of %d checks failed\n", name, kt_failed,
			kt_checks);
	else
		printf("%s: ok (%d checks)\n", name, kt_checks);
	return kt_failed ? 1 : 0;
}

/* ---- values ---- */

static uint64_t kt_state = 0x9e3779b97f4a7c15ull;

static inline void kt_seed(uint64_t s)
{
	kt_state = s ? s : 1;
}

static inline uint64_t kt_next(void)
{
	uint64_t z = (kt_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [lo, hi), never exactly 0 (zeros would hide a missing term). */
static inline float kt_unif(float lo, float hi)
{
	for (;;) {
		double u =
		    (double)(kt_next() >> 11) * (1.0 / 9007199254740992.0);
		float x = (float)(lo + (hi - lo) * u);
		if (x != 0.0f)
			return x;
	}
}

static inline void kt_fill(float *x, size_t n, float lo, float hi)
{
	for (size_t i = 0; i < n; i++)
		x[i] = kt_unif(lo, hi);
}

static inline void kt_poison(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = NAN;
}

/* x rounded to the values dtype dt can hold, in place (the reference then
 * uses the very values the kernel converts). */
static inline float kt_to_dt(float x, int dt)
{
	if (dt == KERN_BF16)
		return moor_round_bf16(x);
	if (dt == KERN_F16)
		return moor_f16_to_f32(moor_f32_to_f16(x));
	return x;
}

/* n values of dtype dt from the fp32 values src (already representable),
 * in a new buffer. */
static inline void *kt_pack(const float *src, size_t n, int dt)
{
	if (dt == KERN_F32) {
		float *p = malloc(n * 4 + 4);
		memcpy(p, src, n * 4);
		return p;
	}
	uint16_t *p = malloc(n * 2 + 2);
	for (size_t i = 0; i < n; i++)
		p[i] = dt == KERN_BF16 ? moor_f32_to_bf16(src[i])
				       : moor_f32_to_f16(src[i]);
	return p;
}

/* Weights: n random values in [lo, hi) representable in dt; *w gets the
 * packed buffer, the return value the fp32 copy. */
static inline float *kt_weights(size_t n, int dt, float lo, float hi, void **w)
{
	float *f = malloc(n * 4 + 4);
	for (size_t i = 0; i < n; i++) {
		float x;
		do
			x = kt_to_dt(kt_unif(lo, hi), dt);
		while (x == 0.0f);
		f[i] = x;
	}
	*w = kt_pack(f, n, dt);
	return f;
}

/* ---- rounding of the reference ---- */

static inline double kt_rnd(double x, int act)
{
	return act == KERN_ACT_BF16 ? (double)moor_round_bf16((float)x) : x;
}

static inline double kt_silu(double x)
{
	return x / (1.0 + exp(-x));
}

static inline double kt_sigmoid(double x)
{
	return 1.0 / (1.0 + exp(-x));
}

/* fp32 unit roundoff, and one bf16 ulp relative to the value (at most
 * 2^-7 of it): a bf16 result is held to within one ulp of the rounded
 * reference, because a value within fp32 error of a tie may round either
 * way. */
#define KT_U (1.0 / 16777216.0)
#define KT_BF16_ULP (1.0 / 128.0)

/* |got - ref| <= tol, counting and reporting the first failures of a
 * named check; NaN got always fails. */
static int kt_close_fails;
static inline int kt_close(const char *what, size_t i, float got, double ref,
			   double tol)
{
	double d = fabs((double)got - ref);
	if (d <= tol)
		return 1;
	if (kt_close_fails++ < 8)
		fprintf(stderr,
			"  %s[%zu]: got %.9g ref %.9g diff %.3g tol %.3g\n",
			what, i, got, ref, d, tol);
	return 0;
}

static inline const char *kt_dtname(int dt)
{
	return dt == KERN_F32 ? "f32" : dt == KERN_BF16 ? "bf16" : "f16";
}

/* ---- backend ---- */

typedef struct kt_be {
	kern_ctx *ctx;
	kern_queue *q;
	const kern_ops *o;
} kt_be;

static inline kt_be kt_open(int threads)
{
	kt_be b = {NULL, NULL, &kern_cpu_ops};
	kern_config cfg = {.threads = threads};
	int rc = b.o->create(&cfg, &b.ctx);
	if (rc) {
		fprintf(stderr, "create(%d threads): %s\n", threads,
			moor_strerror(rc));
		exit(1);
	}
	b.q = b.o->queue(b.ctx, KERN_Q_COMPUTE);
	return b;
}

/* A backend whose attention keeps at most cap floats of scores per group
 * (the test seam of cpu/cpu.h), so that short contexts take the three-pass
 * path. */
static inline kt_be kt_open_cap(int threads, size_t cap)
{
	kt_be b = kt_open(threads);
	b.ctx->att_cap = cap;
	return b;
}

static inline void kt_close_be(kt_be *b)
{
	b->o->destroy(b->ctx);
	b->ctx = NULL;
}

#endif
