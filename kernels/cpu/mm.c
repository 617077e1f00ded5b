/* mm.c: the register-blocked micro-kernel, the block product kcpu_mm that
 * the attention and delta-rule files use, and the matmul op.
 *
 * Every output element is a sequential fp32 sum over the reduced index
 * (cpu.h), so the micro-kernel (MR rows x NV vectors of 4 columns in
 * registers), its narrower tails and a scalar column loop all compute the
 * same bits, and a k-blocked product whose partial sums wait in y between
 * blocks equals an unblocked one. matmul tiles y into (T-block, N-block)
 * tasks; a task converts its block of W rows to fp32 once per k-block, packed
 * as panels [k][NP] so the kernel reads NP consecutive columns per k. */
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

/* W rows [n0, n0 + nc) x k [k0, k0 + kc) as fp32 panels P[p][k][MM_NP],
 * columns beyond nc zero. Four rows by four k at a time, transposed in
 * registers. */
static void mm_pack(float *P, const void *W, int wdt, int K, int n0, int nc,
		    int k0, int kc)
{
	int np = (nc + MM_NP - 1) / MM_NP;
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
			int k = 0;
			for (; k + 4 <= kc; k += 4) {
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

static void mm_task(void *arg, int task)
{
	const struct mm_job *jb = arg;
	int t0 = (task % jb->ntb) * jb->tb, n0 = (task / jb->ntb) * MM_NB;
	int tn = jb->T - t0 < jb->tb ? jb->T - t0 : jb->tb;
	int nc = jb->N - n0 < MM_NB ? jb->N - n0 : MM_NB;
	int np = (nc + MM_NP - 1) / MM_NP;
	_Alignas(64) float P[MM_NB * MM_KC];
	float tmp[MM_MR * MM_NP];
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
				/* MM_MR rows at a time, then single rows */
				int mr = tn - t < MM_MR ? 1 : MM_MR;
				const float *a[MM_MR];
				for (int i = 0; i < mr; i++)
					a[i] = jb->x + (t0 + t + i) * ldx + k0;
				float *yt = jb->y + (t0 + t) * ldy + c0;
				t += mr;
				if (cw == MM_NP) {
					if (mr == MM_MR)
						kcpu_mk(MM_MR, MM_NV, a, pp,
							MM_NP, kc, yt, ldy,
							acc);
					else
						kcpu_mk(1, MM_NV, a, pp, MM_NP,
							kc, yt, ldy, acc);
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
				if (mr == MM_MR)
					kcpu_mk(MM_MR, MM_NV, a, pp, MM_NP, kc,
						tmp, MM_NP, 1);
				else
					kcpu_mk(1, MM_NV, a, pp, MM_NP, kc, tmp,
						MM_NP, 1);
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
	/* Rows per task: long enough to amortise the packing of W, short
	 * enough that every thread gets several tasks. */
	jb.tb = T >= 2048 ? 256 : T >= 256 ? 128 : T >= 64 ? 64 : T;
	jb.ntb = (T + jb.tb - 1) / jb.tb;
	int nnb = (N + MM_NB - 1) / MM_NB;
	moor_pool_run(kcpu_pool(q), jb.ntb * nnb, mm_task, &jb);
	return 0;
}
