/* test_kern_matmul_rows_exact: the CPU matmul's few-row path (T <= 4, the
 * decode step's and the head's; kernels/cpu/mm.c) computes the bits of the
 * packed path (T > 4) and of the order ops.h fixes, in every shape that
 * reaches its tails.
 *
 *  1. For each dtype (bf16, f32; f16 takes the packed path at any T) and
 *     act, and shapes whose N leaves whole tiles, lone groups of four rows
 *     and single rows (N from 1 to 300, across the tasks of 128 rows)
 *     and whose K leaves whole steps of 8 and a tail (K = 1 .. 9, 16, 31,
 *     256, 300): one call of T = 7 rows (the packed path), then calls of
 *     T = 1, 2, 3, 4 rows at offsets into the same x (row stride ldx > K,
 *     y rows at ldy > N), each equal to the packed call's rows memcmp.
 *  2. Every output equals a scalar loop in fp32 of the order ops.h states,
 *     s = +0, s += x[k] * w[n, k] for k = 0 .. K-1 (rounded to bf16 at the
 *     end when act is BF16), bit for bit (-ffp-contract=off, as the
 *     kernels build).
 *  3. The same on 1, 2 and 3 threads, each with the AVX2 path (where the
 *     CPU has it) and without (the backend's avx2 seam cleared), and on
 *     the head's shape of the tiny model (151669 x 256 bf16) at T = 1
 *     against T = 5, both ways.
 *  4. y's columns beyond N and its rows' padding are never written.
 *  5. The packed path at T = 5, 6, 7 with and without AVX2 (its kernel
 *     takes rows in fours there, in pairs without) gives the same rows. */
#include "kt.h"

/* 1, 2, 3 threads; then the same without the AVX2 path */
static kt_be be[6];

/* The order of ops.h, in fp32. */
static float ref_dot(const float *x, const float *wf, int K)
{
	float s = 0.0f;
	for (int k = 0; k < K; k++)
		s += x[k] * wf[k];
	return s;
}

static void mm(kt_be *b, float *y, int ldy, const float *x, int ldx,
	       const void *W, int wdt, int T, int N, int K, int act)
{
	int rc = b->o->matmul(b->q, y, ldy, x, ldx, W, wdt, T, N, K, act);
	ASSERT(rc == 0, "matmul T%d N%d K%d: %d", T, N, K, rc);
}

static int bits_eq(const float *a, const float *b, size_t n)
{
	return memcmp(a, b, n * 4) == 0;
}

static void shape(int wdt, int act, int N, int K)
{
	enum { TB = 7 };
	int ldx = K + 3, ldy = N + 5;
	float *x = malloc((size_t)TB * ldx * 4);
	kt_fill(x, (size_t)TB * ldx, -1, 1);
	void *W;
	float *wf = kt_weights((size_t)N * K, wdt, -1, 1, &W);
	float *yb = malloc((size_t)TB * ldy * 4);
	float *ys = malloc((size_t)TB * ldy * 4);
	kt_poison(yb, (size_t)TB * ldy);
	mm(&be[1], yb, ldy, x, ldx, W, wdt, TB, N, K, act);
	int bad_ref = 0;
	for (int t = 0; t < TB; t++)
		for (int n = 0; n < N; n++) {
			float r =
			    ref_dot(x + (size_t)t * ldx, wf + (size_t)n * K, K);
			r = act == KERN_ACT_BF16 ? moor_round_bf16(r) : r;
			bad_ref += !bits_eq(&r, yb + (size_t)t * ldy + n, 1);
		}
	ASSERT(bad_ref == 0,
	       "%s act%d N%d K%d: %d packed outputs differ "
	       "from the sequential fp32 sum",
	       kt_dtname(wdt), act, N, K, bad_ref);
	/* the packed path itself at T = 5, 6, 7 (on AVX2 rows go in fours:
	 * the tails of one, two and three rows), AVX2 on and off */
	for (int b = 1; b < 6; b += 3)
		for (int T = 5; T <= TB; T++) {
			kt_poison(ys, (size_t)TB * ldy);
			mm(&be[b], ys, ldy, x, ldx, W, wdt, T, N, K, act);
			int bad = 0;
			for (int t = 0; t < T; t++)
				bad +=
				    !bits_eq(ys + (size_t)t * ldy,
					     yb + (size_t)t * ldy, (size_t)N);
			ASSERT(bad == 0,
			       "%s act%d N%d K%d T%d%s: %d packed rows differ",
			       kt_dtname(wdt), act, N, K, T,
			       b >= 3 ? " (no AVX2)" : "", bad);
		}
	for (int th = 0; th < 6; th++)
		for (int T = 1; T <= 4; T++)
			for (int t0 = 0; t0 + T <= TB; t0 += 3) {
				kt_poison(ys, (size_t)TB * ldy);
				mm(&be[th], ys, ldy, x + (size_t)t0 * ldx, ldx,
				   W, wdt, T, N, K, act);
				int bad = 0, pad = 0;
				for (int t = 0; t < T; t++) {
					bad += !bits_eq(ys + (size_t)t * ldy,
							yb + (size_t)(t0 + t) *
								 ldy,
							(size_t)N);
					for (int j = N; j < ldy; j++)
						pad += !isnan(
						    ys[(size_t)t * ldy + j]);
				}
				ASSERT(bad == 0,
				       "%s act%d N%d K%d T%d at row %d, %d "
				       "thread(s)%s: %d rows differ from the "
				       "packed path",
				       kt_dtname(wdt), act, N, K, T, t0,
				       th % 3 + 1, th >= 3 ? " (no AVX2)" : "",
				       bad);
				ASSERT(pad == 0,
				       "%s N%d K%d T%d: %d padding floats "
				       "written",
				       kt_dtname(wdt), N, K, T, pad);
			}
	free(x);
	free(wf);
	free(W);
	free(yb);
	free(ys);
}

/* The tiny model's head: the shape the few-row path exists for. */
static void head(void)
{
	int N = 151669, K = 256, TB = 5;
	float *x = malloc((size_t)TB * K * 4);
	kt_fill(x, (size_t)TB * K, -1, 1);
	void *W;
	float *wf = kt_weights((size_t)N * K, KERN_BF16, -0.1f, 0.1f, &W);
	float *yb = malloc((size_t)TB * N * 4), *y1 = malloc((size_t)N * 4);
	mm(&be[1], yb, N, x, K, W, KERN_BF16, TB, N, K, KERN_ACT_F32);
	for (int t = 0; t < TB; t += 2)
		for (int b = 1; b < 6; b += 3) {
			mm(&be[b], y1, N, x + (size_t)t * K, K, W, KERN_BF16, 1,
			   N, K, KERN_ACT_F32);
			ASSERT(bits_eq(y1, yb + (size_t)t * N, (size_t)N),
			       "head row %d alone%s differs from the packed "
			       "call",
			       t, b >= 3 ? " (no AVX2)" : "");
		}
	free(x);
	free(wf);
	free(W);
	free(yb);
	free(y1);
}

int main(void)
{
	for (int i = 0; i < 6; i++) {
		be[i] = kt_open(i % 3 + 1);
		if (i >= 3)
			be[i].ctx->avx2 = 0;
	}
	printf("AVX2 path: %s\n",
	       be[0].ctx->avx2 ? "on (and off)" : "absent on this CPU");
	kt_seed(10);
	const int wdts[] = {KERN_BF16, KERN_F32, KERN_F16};
	const int Ks[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 31, 256, 300};
	const int Ns[] = {1,  2,  3,  4,  5,  7,   8,	15,  16, 17,
			  20, 31, 32, 33, 37, 127, 128, 129, 300};
	for (int w = 0; w < 3; w++)
		for (int act = 0; act < 2; act++)
			for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
				for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks;
				     ki++)
					shape(wdts[w], act, Ns[ni], Ks[ki]);
	head();
	for (int i = 0; i < 6; i++)
		be[i].o->destroy(be[i].ctx);
	return kt_done("test_kern_matmul_rows_exact");
}
