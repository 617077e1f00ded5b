/* mm.c: the register-blocked micro-kernel, the block product kcpu_mm that
 * the attention and delta-rule files use, and the matmul op.
 *
 * Every output element is a sequential fp32 sum over the reduced index
 * (cpu.h), so the micro-kernel (MR rows x NV vectors of 4 columns in
 * registers), its narrower tails and a scalar column loop all compute the
 * same bits, and a k-blocked product whose partial sums wait in y between
 * blocks equals an unblocked one. matmul tiles y into (T-block, N-block)
 * tasks; a task converts its block of W rows to fp32 once per k-block, packed
 * as panels [k][NP] so the kernel reads NP consecutive columns per k. With
 * T <= MV_T rows it reads W's rows straight instead (the few-row path).
 * Where the CPU has AVX2 (ctx->avx2), both paths run their products in
 * 32-byte vectors (functions compiled for AVX2 beside the baseline ones):
 * the same sums in the same order, so the same bits. */
#include "cpu.h"

#include <stdlib.h>

/* Rows a[0 .. mr) (mr <= 2) times B over k < K into C[.., 0 .. N): blocks
 * of 16 columns, then of 4, then single columns, all the same sum. */
static void mm_rows(int mr, const float *const *a, int K, const float *B,
		    ptrdiff_t ldb, float *C, ptrdiff_t ldc, int N, int acc)
{
	int n = 0;
	if (mr == 2) {
		for (; n + 16 <= N; n += 16)
			kcpu_mk(2, 4, a, B + n, ldb, K, C + n, ldc, acc);
		for (; n + 4 <= N; n += 4)
			kcpu_mk(2, 1, a, B + n, ldb, K, C + n, ldc, acc);
	} else {
		for (; n + 16 <= N; n += 16)
			kcpu_mk(1, 4, a, B + n, ldb, K, C + n, ldc, acc);
		for (; n + 4 <= N; n += 4)
			kcpu_mk(1, 1, a, B + n, ldb, K, C + n, ldc, acc);
	}
	for (; n < N; n++) {
		for (int i = 0; i < mr; i++) {
			float s = acc ? C[i * ldc + n] : 0.0f;
			for (int k = 0; k < K; k++)
				s += a[i][k] * B[(ptrdiff_t)k * ldb + n];
			C[i * ldc + n] = s;
		}
	}
}

static int row_len(const int *klen, int i, int K)
{
	if (!klen)
		return K;
	int l = klen[i];
	return l < 0 ? 0 : l > K ? K : l;
}

void kcpu_mm(int M, int N, int K, const float *A, ptrdiff_t lda, const float *B,
	     ptrdiff_t ldb, float *C, ptrdiff_t ldc, const int *klen, int acc)
{
	for (int i = 0; i < M; i += 2) {
		int mr = M - i < 2 ? M - i : 2;
		int len[2] = {row_len(klen, i, K),
			      mr > 1 ? row_len(klen, i + 1, K) : 0};
		int kc = mr > 1 && len[1] < len[0] ? len[1] : len[0];
		const float *a[2] = {A + i * lda,
				     mr > 1 ? A + (i + 1) * lda : NULL};
		mm_rows(mr, a, kc, B, ldb, C + i * ldc, ldc, N, acc);
		/* A row longer than the pair's common prefix goes on alone,
		 * from where the pair stopped, in the same order. */
		for (int r = 0; r < mr; r++) {
			if (len[r] <= kc)
				continue;
			const float *ar = a[r] + kc;
			mm_rows(1, &ar, len[r] - kc, B + kc * ldb, ldb,
				C + (i + r) * ldc, ldc, N, 1);
		}
	}
}

/* ---- matmul ---- */

/* Panel width, rows per kernel call, columns and rows per task, k-block.
 * None of them changes a bit of the result, only the speed. */
#define MM_NV 4
#define MM_NP (4 * MM_NV)
#define MM_MR 2
#define MM_NB (4 * MM_NP)
#define MM_KC 256

struct mm_job {
	float *y;
	const float *x;
	const void *W;
	int ldy, ldx, wdt, T, N, K, act;
	int tb, ntb; /* rows per task, T-blocks */
	int avx2;    /* ctx->avx2: the few-row path's bf16 rows on AVX2 */
};

/* Four consecutive elements of a W row as fp32 (exact). */
static inline v4f w4(const void *W, int wdt, size_t off)
{
	if (wdt == KERN_BF16)
		return v4_bf16((const uint16_t *)W + off);
	if (wdt == KERN_F32)
		return v4_load((const float *)W + off);
	const uint16_t *h = (const uint16_t *)W + off;
	return (v4f){moor_f16_to_f32(h[0]), moor_f16_to_f32(h[1]),
		     moor_f16_to_f32(h[2]), moor_f16_to_f32(h[3])};
}

#if defined(__clang__) || __GNUC__ >= 12
#define MM_SHUF(a, b, i, j, k, l) __builtin_shufflevector(a, b, i, j, k, l)
#else
#define MM_SHUF(a, b, i, j, k, l) __builtin_shuffle(a, b, (v4i){i, j, k, l})
#endif

/* w[j] = rows r .. r + 3 (row stride K) at column k + j, j < 8, as fp32
 * (exact); r points at row 0's column k. */
static inline __attribute__((always_inline)) void
mv_t4x8(const int wdt, const void *r, size_t K, v4f w[8])
{
	if (wdt == KERN_F32) {
		const float *f = r;
		for (int h = 0; h < 2; h++) {
			v4f r0 = v4_load(f + 4 * h),
			    r1 = v4_load(f + K + 4 * h);
			v4f r2 = v4_load(f + 2 * K + 4 * h);
			v4f r3 = v4_load(f + 3 * K + 4 * h);
			v4f t0 = MM_SHUF(r0, r1, 0, 4, 1, 5);
			v4f t1 = MM_SHUF(r0, r1, 2, 6, 3, 7);
			v4f t2 = MM_SHUF(r2, r3, 0, 4, 1, 5);
			v4f t3 = MM_SHUF(r2, r3, 2, 6, 3, 7);
			w[4 * h] = MM_SHUF(t0, t2, 0, 1, 4, 5);
			w[4 * h + 1] = MM_SHUF(t0, t2, 2, 3, 6, 7);
			w[4 * h + 2] = MM_SHUF(t1, t3, 0, 1, 4, 5);
			w[4 * h + 3] = MM_SHUF(t1, t3, 2, 3, 6, 7);
		}
		return;
	}
	/* Each row's 32-bit words hold k pairs (k even in the low half);
	 * the 4 x 4 transpose of the words gives the four rows' pair at
	 * k + 2i, and a bf16 value is the top half of its fp32: the even
	 * one shifted up, the odd one masked. */
	const uint16_t *h = r;
	v4u r0, r1, r2, r3;
	memcpy(&r0, h, 16);
	memcpy(&r1, h + K, 16);
	memcpy(&r2, h + 2 * K, 16);
	memcpy(&r3, h + 3 * K, 16);
	v4u t0 = MM_SHUF(r0, r1, 0, 4, 1, 5);
	v4u t1 = MM_SHUF(r0, r1, 2, 6, 3, 7);
	v4u t2 = MM_SHUF(r2, r3, 0, 4, 1, 5);
	v4u t3 = MM_SHUF(r2, r3, 2, 6, 3, 7);
	v4u p[4] = {MM_SHUF(t0, t2, 0, 1, 4, 5), MM_SHUF(t0, t2, 2, 3, 6, 7),
		    MM_SHUF(t1, t3, 0, 1, 4, 5), MM_SHUF(t1, t3, 2, 3, 6, 7)};
	for (int i = 0; i < 4; i++) {
		w[2 * i] = (v4f)(p[i] << 16);
		w[2 * i + 1] = (v4f)(p[i] & 0xffff0000u);
	}
}

/* W rows [n0, n0 + nc) x k [k0, k0 + kc) as fp32 panels P[p][k][MM_NP],
 * columns beyond nc zero. Four rows by eight k (bf16) or four k at a time,
 * transposed in registers. */
static void mm_pack(float *P, const void *W, int wdt, int K, int n0, int nc,
		    int k0, int kc)
{
	int np = (nc + MM_NP - 1) / MM_NP;
	const char *wb = W;
	size_t es = kern_dtype_size(wdt);
	for (int p = 0; p < np; p++) {
		float *pp = P + (size_t)p * kc * MM_NP;
		for (int j = 0; j < MM_NP; j += 4) {
			int c = p * MM_NP + j;
			if (c + 4 > nc) { /* the last rows: one by one */
				for (int jj = 0; jj < 4; jj++) {
					size_t off =
					    (size_t)(n0 + c + jj) * K + k0;
					for (int k = 0; k < kc; k++)
						pp[k * MM_NP + j + jj] =
						    c + jj < nc
							? kcpu_wget(W, wdt,
								    off + k)
							: 0.0f;
				}
				continue;
			}
			size_t off = (size_t)(n0 + c) * K + k0;
			/* the same four rows of the next panel, a cache line
			 * of each per line read here (W comes from memory:
			 * 14% on the tiny model's head at T = 16) */
			int pf = c + MM_NP + 4 <= nc;
			int line = 64 / (int)es;
			int k = 0;
			/* bf16 eight k at a time (mv_t4x8: half the
			 * shuffles per element of the four-k loop below) */
			for (; wdt == KERN_BF16 && k + 8 <= kc; k += 8) {
				if (pf && k % line == 0)
					for (size_t jj = 0; jj < 4; jj++)
						__builtin_prefetch(
						    wb + (off +
							  (MM_NP + jj) * K +
							  (size_t)k) *
							     es,
						    0, 3);
				v4f w[8];
				mv_t4x8(KERN_BF16, wb + (off + (size_t)k) * es,
					(size_t)K, w);
				for (int i = 0; i < 8; i++)
					v4_store(pp + (k + i) * MM_NP + j,
						 w[i]);
			}
			for (; k + 4 <= kc; k += 4) {
				if (pf && k % line == 0)
					for (size_t jj = 0; jj < 4; jj++)
						__builtin_prefetch(
						    wb + (off +
							  (MM_NP + jj) * K +
							  (size_t)k) *
							     es,
						    0, 3);
				v4f r0 = w4(W, wdt, off + k);
				v4f r1 = w4(W, wdt, off + K + k);
				v4f r2 = w4(W, wdt, off + 2 * (size_t)K + k);
				v4f r3 = w4(W, wdt, off + 3 * (size_t)K + k);
				v4f t0 = MM_SHUF(r0, r1, 0, 4, 1, 5);
				v4f t1 = MM_SHUF(r0, r1, 2, 6, 3, 7);
				v4f t2 = MM_SHUF(r2, r3, 0, 4, 1, 5);
				v4f t3 = MM_SHUF(r2, r3, 2, 6, 3, 7);
				float *d = pp + k * MM_NP + j;
				v4_store(d, MM_SHUF(t0, t2, 0, 1, 4, 5));
				v4_store(d + MM_NP,
					 MM_SHUF(t0, t2, 2, 3, 6, 7));
				v4_store(d + 2 * MM_NP,
					 MM_SHUF(t1, t3, 0, 1, 4, 5));
				v4_store(d + 3 * MM_NP,
					 MM_SHUF(t1, t3, 2, 3, 6, 7));
			}
			for (; k < kc; k++)
				for (int jj = 0; jj < 4; jj++)
					pp[k * MM_NP + j + jj] = kcpu_wget(
					    W, wdt, off + (size_t)jj * K + k);
		}
	}
}

/* Rows of x by one packed panel: MM_MR (or 1) rows through kcpu_mk here,
 * up to four through mk8 on AVX2 (the x86 block below). */
typedef void (*mm_kern_fn)(int mr, const float *const *a, const float *b, int K,
			   float *c, ptrdiff_t ldc, int acc);

static void mm_kern4(int mr, const float *const *a, const float *b, int K,
		     float *c, ptrdiff_t ldc, int acc)
{
	if (mr == 2)
		kcpu_mk(2, MM_NV, a, b, MM_NP, K, c, ldc, acc);
	else
		kcpu_mk(1, MM_NV, a, b, MM_NP, K, c, ldc, acc);
}

/* One (T-block, N-block) task of matmul; kern multiplies up to rmax rows
 * of x by a packed panel. */
static inline __attribute__((always_inline)) void
mm_body(const struct mm_job *jb, int task, const int rmax, mm_kern_fn kern)
{
	int t0 = (task % jb->ntb) * jb->tb, n0 = (task / jb->ntb) * MM_NB;
	int tn = jb->T - t0 < jb->tb ? jb->T - t0 : jb->tb;
	int nc = jb->N - n0 < MM_NB ? jb->N - n0 : MM_NB;
	int np = (nc + MM_NP - 1) / MM_NP;
	_Alignas(64) float P[MM_NB * MM_KC];
	float tmp[4 * MM_NP];
	ptrdiff_t ldy = jb->ldy, ldx = jb->ldx;

	for (int k0 = 0; k0 < jb->K; k0 += MM_KC) {
		int kc = jb->K - k0 < MM_KC ? jb->K - k0 : MM_KC;
		int acc = k0 > 0;
		mm_pack(P, jb->W, jb->wdt, jb->K, n0, nc, k0, kc);
		for (int p = 0; p < np; p++) {
			const float *pp = P + (size_t)p * kc * MM_NP;
			int c0 = n0 + p * MM_NP;
			int cw =
			    nc - p * MM_NP < MM_NP ? nc - p * MM_NP : MM_NP;
			for (int t = 0; t < tn;) {
				/* rmax rows at a time, then fewer */
				int mr = tn - t < rmax
					     ? (rmax == 2 ? 1 : tn - t)
					     : rmax;
				const float *a[4];
				for (int i = 0; i < mr; i++)
					a[i] = jb->x + (t0 + t + i) * ldx + k0;
				float *yt = jb->y + (t0 + t) * ldy + c0;
				t += mr;
				if (cw == MM_NP) {
					kern(mr, a, pp, kc, yt, ldy, acc);
					continue;
				}
				/* a partial panel: through tmp, so the
				 * columns beyond N are never touched */
				for (int i = 0; i < mr; i++)
					for (int j = 0; j < MM_NP; j++)
						tmp[i * MM_NP + j] =
						    acc && j < cw
							? yt[i * ldy + j]
							: 0.0f;
				kern(mr, a, pp, kc, tmp, MM_NP, 1);
				for (int i = 0; i < mr; i++)
					for (int j = 0; j < cw; j++)
						yt[i * ldy + j] =
						    tmp[i * MM_NP + j];
			}
		}
	}
	if (jb->K == 0)
		for (int t = 0; t < tn; t++)
			for (int j = 0; j < nc; j++)
				jb->y[(t0 + t) * ldy + n0 + j] = 0.0f;
	if (jb->act == KERN_ACT_BF16)
		for (int t = 0; t < tn; t++) {
			float *yr = jb->y + (t0 + t) * ldy + n0;
			for (int j = 0; j < nc; j++)
				yr[j] = moor_round_bf16(yr[j]);
		}
}

static void mm_task(void *arg, int task)
{
	mm_body(arg, task, MM_MR, mm_kern4);
}

/* ---- the few-row path (decode) ----
 *
 * With a few rows of x (T <= MV_T), packing W costs more than the product
 * and is used once, so these tasks read W straight from its rows instead:
 * four W rows by eight k are loaded, transposed in registers (converting
 * bf16 on the way) into eight vectors of the four rows' values at one k,
 * and each is multiplied into the four rows' accumulator in order of k.
 * So every output is still the sequential sum of mm_task, bit for bit;
 * only the number of independent sums in flight (MV_G groups of four rows,
 * enough to hide the add's latency) is chosen for speed. */

/* T at most this takes the few-row path (measured on the tiny model's head,
 * 151669 x 256 bf16, one thread: T = 1 4.7 ms against the packed path's
 * 19 ms, T = 4 12.6 ms against 25 ms); W rows per task. */
#define MV_T 4
#define MV_ROWS 128
#define MV_G 4
/* Bytes of a tile of MV_G groups at most which the next tile is prefetched
 * for, into L1 (rows this short are too short for the hardware's stream
 * prefetchers to learn; longer ones they follow). */
#define MV_PF_MAX 32768

/* y[t][4g .. 4g + 4) = sum_k x[t][k] * W[r + 4g .. , k] for t < mt,
 * g < G, in order of k from +0: G groups of four rows at r (row 0 of the
 * tile at W row r; rows of y at ldy). */
static inline __attribute__((always_inline)) void
mv_tile(const int wdt, const int mt, const int G, const float *x, ptrdiff_t ldx,
	const void *W, size_t K, size_t r, float *y, ptrdiff_t ldy, int pf_ok)
{
	size_t es = kern_dtype_size(wdt);
	const char *w0 = (const char *)W + r * K * es;
	v4f acc[MV_T][MV_G];
	for (int t = 0; t < mt; t++)
		for (int g = 0; g < G; g++)
			acc[t][g] = v4_splat(0.0f);
	const char *pf = w0 + 4 * G * K * es;
	pf_ok = pf_ok && 4 * G * K * es <= MV_PF_MAX;
	size_t k = 0;
	for (; k + 8 <= K; k += 8) {
		/* the next tile, as far into it as this one has come: 8 k
		 * of the tile's 4 G rows are G * es / 2 cache lines */
		if (pf_ok)
			for (size_t l = 0; l < G * es / 2; l++)
				__builtin_prefetch(
				    pf + (k / 8 * G * es / 2 + l) * 64, 0, 3);
		for (int g = 0; g < G; g++) {
			v4f w[8];
			mv_t4x8(wdt, w0 + (4 * g * K + k) * es, K, w);
			for (int t = 0; t < mt; t++)
				for (int j = 0; j < 8; j++)
					acc[t][g] +=
					    v4_splat(x[t * ldx + k + j]) * w[j];
		}
	}
	for (; k < K; k++)
		for (int g = 0; g < G; g++) {
			size_t e = (r + 4 * g) * K + k;
			v4f w = {kcpu_wget(W, wdt, e), kcpu_wget(W, wdt, e + K),
				 kcpu_wget(W, wdt, e + 2 * K),
				 kcpu_wget(W, wdt, e + 3 * K)};
			for (int t = 0; t < mt; t++)
				acc[t][g] += v4_splat(x[t * ldx + k]) * w;
		}
	for (int t = 0; t < mt; t++)
		for (int g = 0; g < G; g++)
			v4_store(y + t * ldy + 4 * g, acc[t][g]);
}

static inline __attribute__((always_inline)) void
mv_rows(const int wdt, const int mt, const struct mm_job *jb, int n0, int n1)
{
	size_t K = (size_t)jb->K;
	int n = n0;
	for (; n + 4 * MV_G <= n1; n += 4 * MV_G)
		mv_tile(wdt, mt, MV_G, jb->x, jb->ldx, jb->W, K, (size_t)n,
			jb->y + n, jb->ldy, n + 8 * MV_G <= jb->N);
	for (; n + 4 <= n1; n += 4)
		mv_tile(wdt, mt, 1, jb->x, jb->ldx, jb->W, K, (size_t)n,
			jb->y + n, jb->ldy, 0);
	for (; n < n1; n++)
		for (int t = 0; t < mt; t++) {
			float s = 0.0f;
			const float *xt = jb->x + (ptrdiff_t)t * jb->ldx;
			for (size_t k = 0; k < K; k++)
				s += xt[k] *
				     kcpu_wget(jb->W, wdt, (size_t)n * K + k);
			jb->y[(ptrdiff_t)t * jb->ldy + n] = s;
		}
}

/* ---- the few-row path on AVX2 ----
 *
 * x86-64 CPUs with AVX2 (tested at create, cpu.h) run bf16 W eight rows to
 * a vector: rows r and r + 4 share a vector (one per 16-byte half), and the
 * 4 x 4 word transpose of mv_t4x8 runs in both halves at once, leaving the
 * eight rows' pair of k in each vector. The same sums as mv_tile, bit for
 * bit (IEEE fp32 products and sums in the same order; no FMA: the build's
 * -ffp-contract=off). */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

typedef float v8f __attribute__((vector_size(32), aligned(4)));
typedef uint32_t v8u __attribute__((vector_size(32), aligned(4)));

#define MV8_G 2

static inline __attribute__((always_inline)) void mv_t8x8(const uint16_t *h,
							  size_t K, v8f w[8])
{
	v8u r[4];
	for (int i = 0; i < 4; i++) {
		v4u lo, hi;
		memcpy(&lo, h + i * K, 16);
		memcpy(&hi, h + (i + 4) * K, 16);
		r[i] = __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7);
	}
	v8u t0 = __builtin_shufflevector(r[0], r[1], 0, 8, 1, 9, 4, 12, 5, 13);
	v8u t1 =
	    __builtin_shufflevector(r[0], r[1], 2, 10, 3, 11, 6, 14, 7, 15);
	v8u t2 = __builtin_shufflevector(r[2], r[3], 0, 8, 1, 9, 4, 12, 5, 13);
	v8u t3 =
	    __builtin_shufflevector(r[2], r[3], 2, 10, 3, 11, 6, 14, 7, 15);
	v8u p[4] = {
	    __builtin_shufflevector(t0, t2, 0, 1, 8, 9, 4, 5, 12, 13),
	    __builtin_shufflevector(t0, t2, 2, 3, 10, 11, 6, 7, 14, 15),
	    __builtin_shufflevector(t1, t3, 0, 1, 8, 9, 4, 5, 12, 13),
	    __builtin_shufflevector(t1, t3, 2, 3, 10, 11, 6, 7, 14, 15)};
	for (int i = 0; i < 4; i++) {
		w[2 * i] = (v8f)(p[i] << 16);
		w[2 * i + 1] = (v8f)(p[i] & 0xffff0000u);
	}
}

static inline __attribute__((always_inline)) void
mv8_tile(const int mt, const int G, const float *x, ptrdiff_t ldx,
	 const uint16_t *W, size_t K, size_t r, float *y, ptrdiff_t ldy,
	 int pf_ok)
{
	const uint16_t *w0 = W + r * K;
	v8f acc[MV_T][MV8_G];
	for (int t = 0; t < mt; t++)
		for (int g = 0; g < G; g++)
			acc[t][g] = (v8f){0};
	const char *pf = (const char *)(w0 + 8 * G * K);
	pf_ok = pf_ok && 8 * G * K * 2 <= MV_PF_MAX;
	size_t k = 0;
	for (; k + 8 <= K; k += 8) {
		/* 8 k of the tile's 8 G rows are G * 2 cache lines' worth */
		if (pf_ok)
			for (size_t l = 0; l < 2 * (size_t)G; l++)
				__builtin_prefetch(
				    pf + (k / 8 * 2 * G + l) * 64, 0, 3);
		for (int g = 0; g < G; g++) {
			v8f w[8];
			mv_t8x8(w0 + 8 * g * K + k, K, w);
			for (int t = 0; t < mt; t++)
				for (int j = 0; j < 8; j++)
					acc[t][g] += x[t * ldx + k + j] * w[j];
		}
	}
	for (; k < K; k++)
		for (int g = 0; g < G; g++) {
			v8f w;
			for (int i = 0; i < 8; i++)
				w[i] = moor_bf16_to_f32(
				    W[(r + 8 * g + i) * K + k]);
			for (int t = 0; t < mt; t++)
				acc[t][g] += x[t * ldx + k] * w;
		}
	for (int t = 0; t < mt; t++)
		for (int g = 0; g < G; g++)
			memcpy(y + t * ldy + 8 * g, &acc[t][g], 32);
}

static inline __attribute__((always_inline)) void
mv8_rows(const int mt, const struct mm_job *jb, int n0, int n1)
{
	size_t K = (size_t)jb->K;
	const uint16_t *W = jb->W;
	int n = n0;
	for (; n + 8 * MV8_G <= n1; n += 8 * MV8_G)
		mv8_tile(mt, MV8_G, jb->x, jb->ldx, W, K, (size_t)n, jb->y + n,
			 jb->ldy, n + 16 * MV8_G <= jb->N);
	for (; n + 8 <= n1; n += 8)
		mv8_tile(mt, 1, jb->x, jb->ldx, W, K, (size_t)n, jb->y + n,
			 jb->ldy, 0);
	mv_rows(KERN_BF16, mt, jb, n, n1); /* the last rows: fours, ones */
}

__attribute__((target("avx2"))) static void
mv_rows_avx2(const struct mm_job *jb, int n0, int n1)
{
	switch (jb->T) {
	case 1:
		mv8_rows(1, jb, n0, n1);
		break;
	case 2:
		mv8_rows(2, jb, n0, n1);
		break;
	case 3:
		mv8_rows(3, jb, n0, n1);
		break;
	default:
		mv8_rows(4, jb, n0, n1);
	}
}

/* kcpu_mk over a packed panel ([K][MM_NP] floats) in 32-byte vectors:
 * c[i][0 .. 16) (+)= sum_k a[i][k] * b[k][0 .. 16) for i < mr (<= 4), in
 * order of k, the sums of kcpu_mk bit for bit. */
static inline __attribute__((always_inline)) void
mk8(const int mr, const float *const *a, const float *b, int K, float *c,
    ptrdiff_t ldc, int acc)
{
	v8f r[4][2];
	for (int i = 0; i < mr; i++)
		for (int j = 0; j < 2; j++) {
			if (acc)
				memcpy(&r[i][j], c + i * ldc + 8 * j, 32);
			else
				r[i][j] = (v8f){0};
		}
	for (int k = 0; k < K; k++) {
		v8f b0, b1;
		memcpy(&b0, b + (ptrdiff_t)k * MM_NP, 32);
		memcpy(&b1, b + (ptrdiff_t)k * MM_NP + 8, 32);
		for (int i = 0; i < mr; i++) {
			float av = a[i][k];
			r[i][0] += av * b0;
			r[i][1] += av * b1;
		}
	}
	for (int i = 0; i < mr; i++)
		for (int j = 0; j < 2; j++)
			memcpy(c + i * ldc + 8 * j, &r[i][j], 32);
}

__attribute__((target("avx2"))) static void
mm_kern8(int mr, const float *const *a, const float *b, int K, float *c,
	 ptrdiff_t ldc, int acc)
{
	switch (mr) {
	case 1:
		mk8(1, a, b, K, c, ldc, acc);
		break;
	case 2:
		mk8(2, a, b, K, c, ldc, acc);
		break;
	case 3:
		mk8(3, a, b, K, c, ldc, acc);
		break;
	default:
		mk8(4, a, b, K, c, ldc, acc);
	}
}

__attribute__((target("avx2"))) static void mm_task_avx2(void *arg, int task)
{
	mm_body(arg, task, 4, mm_kern8);
}

int kcpu_have_avx2(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2");
}

#else

static void mv_rows_avx2(const struct mm_job *jb, int n0, int n1)
{
	(void)jb, (void)n0, (void)n1;
	MOOR_ASSERT(!"no AVX2 path on this target");
}

static void mm_task_avx2(void *arg, int task)
{
	(void)arg, (void)task;
	MOOR_ASSERT(!"no AVX2 path on this target");
}

int kcpu_have_avx2(void)
{
	return 0;
}

#endif

static void mv_task(void *arg, int task)
{
	const struct mm_job *jb = arg;
	int n0 = task * MV_ROWS;
	int n1 = jb->N - n0 < MV_ROWS ? jb->N : n0 + MV_ROWS;
	int bf = jb->wdt == KERN_BF16;
	if (bf && jb->avx2) {
		mv_rows_avx2(jb, n0, n1);
		goto round;
	}
	switch (jb->T) {
	case 1:
		bf ? mv_rows(KERN_BF16, 1, jb, n0, n1)
		   : mv_rows(KERN_F32, 1, jb, n0, n1);
		break;
	case 3:
		bf ? mv_rows(KERN_BF16, 3, jb, n0, n1)
		   : mv_rows(KERN_F32, 3, jb, n0, n1);
		break;
	case 4:
		bf ? mv_rows(KERN_BF16, 4, jb, n0, n1)
		   : mv_rows(KERN_F32, 4, jb, n0, n1);
		break;
	default:
		bf ? mv_rows(KERN_BF16, 2, jb, n0, n1)
		   : mv_rows(KERN_F32, 2, jb, n0, n1);
	}
round:
	if (jb->act == KERN_ACT_BF16)
		for (int t = 0; t < jb->T; t++) {
			float *yr = jb->y + (ptrdiff_t)t * jb->ldy;
			for (int j = n0; j < n1; j++)
				yr[j] = moor_round_bf16(yr[j]);
		}
}

int kcpu_matmul(kern_queue *q, float *y, int ldy, const float *x, int ldx,
		const void *W, int wdt, int T, int N, int K, int act)
{
	if (!q || !y || !x || !W || T < 0 || N < 0 || K < 0 || ldy < N ||
	    ldx < K)
		return MOOR_ERANGE;
	if (!kcpu_dtype_ok(wdt) || !kcpu_act_ok(act))
		return MOOR_EDTYPE;
	if (T == 0 || N == 0)
		return 0;
	struct mm_job jb = {.y = y,
			    .x = x,
			    .W = W,
			    .ldy = ldy,
			    .ldx = ldx,
			    .wdt = wdt,
			    .T = T,
			    .N = N,
			    .K = K,
			    .act = act};
	if (T <= MV_T && wdt != KERN_F16) {
		jb.avx2 = q->ctx->avx2;
		moor_pool_run(kcpu_pool(q), (N + MV_ROWS - 1) / MV_ROWS,
			      mv_task, &jb);
		return 0;
	}
	/* Rows per task: long enough to amortise the packing of W, short
	 * enough that every thread gets several tasks. */
	jb.tb = T >= 2048 ? 256 : T >= 256 ? 128 : T >= 64 ? 64 : T;
	jb.ntb = (T + jb.tb - 1) / jb.tb;
	int nnb = (N + MM_NB - 1) / MM_NB;
	moor_pool_run(kcpu_pool(q), jb.ntb * nnb,
		      q->ctx->avx2 ? mm_task_avx2 : mm_task, &jb);
	return 0;
}
