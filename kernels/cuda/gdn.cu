/* gdn.cu: the delta rule on the GPU (ops.h, SPEC §5.5-§5.6).
 *
 * Chunked (prefill), in three kernels over the call's 64-token sub-chunks
 * (aligned to token 0 of the call, the last one short):
 *
 *   intra  one block per (sub-chunk, value head), all in parallel: what
 *          does not depend on the state entering the sub-chunk. G (the
 *          cumulative sum of g, in fp64 rounded per row, as the CPU does),
 *          A_ij = (beta_i k_i . k_j) e^(G_i - G_j) (j < i), the forward
 *          substitutions U = (I + A)^-1 beta V and W = (I + A)^-1 beta e^G K
 *          (a thread per column, rows in order), Am_ij = (q_i . k_j)
 *          e^(G_i - G_j) (j <= i), q e^G and k e^(G_last - G), written to
 *          the workspace;
 *   state  k_hstate, one block per (value head, 16 value columns; columns
 *          are independent), the sub-chunks in order, the state slice in
 *          shared memory: it records the state S each sub-chunk starts
 *          from, V' = U - W S, and S <- e^(G_last) S + (k e^(G_last - G))^T
 *          V' (the defaults: k_hstate_rt, 32 columns a block, and at dk
 *          128 on Hopper k_hstate_cl, whose 32 columns a pair of CTAs
 *          shares);
 *   out    k_out, one block per (sub-chunk, value head, 64 columns), all in
 *          parallel: O = (q e^G) S + Am V' (rounded when act is BF16).
 *   k_inter does state and out in one pass for shapes the 16-column path
 *   does not take (a product each thread, the same order of sums).
 *
 * At dk 128, on a device that gives a block 213 KB of shared memory,
 * gdn_tc.cuh's tensor-core kernels run instead (3xTF32; the workspace's
 * layout is gdn_ws.cuh's): k_intra_tc, then k_chunk_tc, state and out
 * in one kernel (MOOR_GDN_TC, below; 0 keeps the kernels above).
 *
 * Recurrent (decode): one block per (value head, 32-column slice), a
 * thread holds 16 rows of one column of the state in registers; the sums
 * over dk are partials per thread combined across the 8 row groups in a
 * fixed order.
 *
 * Everything is fp32; every sum has one order per shape; no atomics. The
 * results agree with the CPU backend within the kernel tests' tolerances.
 * Supported: dk, dv <= 128, and dv a multiple of 32 or below 32. */
#include "cuda.cuh"
#include "gdn_ws.cuh"
#include "gdn_tc.cuh"

#include <cooperative_groups.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DMAX 128
#define SLICE 32


static int shape_ok(int dk, int dv)
{
	return dk > 0 && dv > 0 && dk <= DMAX && dv <= DMAX &&
	       (dv % SLICE == 0 || dv < SLICE);
}

size_t kcu_delta_ws_bytes(kern_ctx *ctx, int T, int Hv, int dk, int dv)
{
	(void)ctx;
	if (T <= 0 || Hv <= 0 || !shape_ok(dk, dv))
		return 0;
	size_t nch = ((size_t)T + C - 1) / C;
	return nch * (size_t)Hv * unit_floats(dk, dv) * sizeof(float);
}

/* ---- intra ---- */

/* A thread of k_intra's 256 computes a 4 x 4 tile of the 64 x 64 products:
 * rows ti + 16 a, columns tj + 16 b (ti = tid / 16, tj = tid % 16), so a
 * warp's column loads hit 16 banks (k's rows are dk + 1 apart in shared
 * memory) and every load feeds four products. */
#define INTRA_THREADS 256

/* The parts k_intra and k_intra_rt share. */

/* A thread's 4 x 4 tile (rows ti + 16 a, columns tj + 16 b) of beta K K^T
 * (sa) and Q K^T (sqk), decayed by e^(G_i - G_j): the strict lower
 * triangle of the first into sA (A_ij at i ri + j rj: [C][C + 1] by rows
 * for k_intra, by columns for k_intra_rt), the lower triangle with its
 * diagonal of the second into Am [C][C]; zeros above, and on rows past
 * the sub-chunk's n. */
static __device__ inline void intra_store_a(const float (&sa)[4][4],
					    const float (&sqk)[4][4],
					    const float *sG, float *sA,
					    float *Am, int ti, int tj, int n,
					    int ri, int rj)
{
#pragma unroll
	for (int a = 0; a < 4; a++)
#pragma unroll
		for (int b = 0; b < 4; b++) {
			int i = ti + 16 * a, j = tj + 16 * b;
			float x = 0.0f, am = 0.0f;
			if (i < n && j <= i) {
				float dm = expf(sG[i] - sG[j]);
				if (j < i)
					x = sa[a][b] * dm;
				am = sqk[a][b] * dm;
			}
			sA[i * ri + j * rj] = x;
			Am[i * C + j] = am;
		}
}

/* sU [n][dv] = beta V of the sub-chunk's rows (v rows ldv apart, head h);
 * vec: 16-byte loads */
static __device__ inline void intra_bv(float *sU, const float *v, int ldv,
				       const float *sb, int t0, int n, int h,
				       int dv, int vec)
{
	const int tid = threadIdx.x, nt = blockDim.x;
	if (vec) {
		const int v4 = dv / 4;
#pragma unroll 4
		for (int e = tid; e < n * v4; e += nt) {
			int i = e / v4, d = (e - i * v4) * 4;
			float4 a = *(const float4 *)(v + (size_t)(t0 + i) * ldv +
						     (size_t)h * dv + d);
			float *pu = sU + i * dv + d;
			pu[0] = a.x * sb[i], pu[1] = a.y * sb[i];
			pu[2] = a.z * sb[i], pu[3] = a.w * sb[i];
		}
	} else {
		for (int e = tid; e < n * dv; e += nt) {
			int i = e / dv, d = e % dv;
			sU[e] = v[(size_t)(t0 + i) * ldv + (size_t)h * dv + d] * sb[i];
		}
	}
}

/* The forward substitutions (I + A)^-1 of W [C][dk] and U [C][dv] in
 * place, A [C][C + 1] strictly lower: a thread per column of [W | U],
 * the column in registers (rows past n are junk no row below n reads) */
static __device__ inline void intra_subst(float *sW, float *sU,
					  const float *sA, int dk, int dv)
{
	for (int col = threadIdx.x; col < dk + dv; col += blockDim.x) {
		float *X = col < dk ? sW + col : sU + (col - dk);
		int w = col < dk ? dk : dv;
		float xr[C];
#pragma unroll
		for (int i = 0; i < C; i++)
			xr[i] = X[i * w];
#pragma unroll
		for (int i = 1; i < C; i++) {
			const float *ar = sA + i * (C + 1);
			float x = xr[i];
#pragma unroll
			for (int j = 0; j < i; j++)
				x -= ar[j] * xr[j];
			xr[i] = x;
		}
#pragma unroll
		for (int i = 0; i < C; i++)
			X[i * w] = xr[i];
	}
}

static __global__ void __launch_bounds__(INTRA_THREADS)
    k_intra(float *ws, const float *q, const float *k, int ldqk, const float *v,
	    int ldv, const float *g, const float *beta, int T, int Hk, int Hv,
	    int dk, int dv)
{
	kcu_pdl_enter();
	extern __shared__ float sm[];
	const int c = blockIdx.x, h = blockIdx.y, t0 = c * C;
	const int n = T - t0 < C ? T - t0 : C;
	const int kh = h / (Hv / Hk);
	const int PK = dk + 1;
	float *sk = sm;		    /* [C][PK] */
	float *sq = sk + C * PK;    /* [C][PK] */
	float *sA = sq + C * PK;    /* [C][C+1] A, strictly lower */
	float *sW = sA + C * (C + 1); /* [C][dk] */
	float *sU = sW + C * dk;      /* [C][dv] */
	float *sG = sU + C * dv;      /* [C] */
	float *sb = sG + C;	      /* [C] beta */
	const int tid = threadIdx.x, nt = blockDim.x;

	const int vec = dk % 4 == 0 && dv % 4 == 0 && ldqk % 4 == 0 &&
			ldv % 4 == 0 && (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v) & 15) == 0;
	if (vec) {
		const int q4 = dk / 4;
#pragma unroll 4
		for (int e = tid; e < n * q4; e += nt) {
			int i = e / q4, d = (e - i * q4) * 4;
			size_t off = (size_t)(t0 + i) * ldqk + (size_t)kh * dk + d;
			float4 a = *(const float4 *)(k + off), b = *(const float4 *)(q + off);
			float *pk = sk + i * PK + d, *pq = sq + i * PK + d;
			pk[0] = a.x, pk[1] = a.y, pk[2] = a.z, pk[3] = a.w;
			pq[0] = b.x, pq[1] = b.y, pq[2] = b.z, pq[3] = b.w;
		}
	} else {
		for (int e = tid; e < n * dk; e += nt) {
			int i = e / dk, d = e % dk;
			size_t t = (size_t)(t0 + i);
			sk[i * PK + d] = k[t * ldqk + (size_t)kh * dk + d];
			sq[i * PK + d] = q[t * ldqk + (size_t)kh * dk + d];
		}
	}
	intra_gates(sG, sb, g, beta, t0, n, h, Hv);
	float *Am = ws + ((size_t)c * Hv + h) * unit_floats(dk, dv) +
		    (size_t)C * dk + (size_t)C * dv;
	{
		const int ti = tid / 16, tj = tid % 16;
		float sa[4][4], sqk[4][4], bi[4];
#pragma unroll
		for (int a = 0; a < 4; a++) {
			int i = ti + 16 * a;
			bi[a] = i < n ? sb[i] : 0.0f;
#pragma unroll
			for (int b = 0; b < 4; b++)
				sa[a][b] = sqk[a][b] = 0.0f;
		}
		/* rows past n hold stale values: their products are masked */
		for (int d = 0; d < dk; d++) {
			float ki[4], qi[4], kj[4];
#pragma unroll
			for (int a = 0; a < 4; a++) {
				ki[a] = sk[(ti + 16 * a) * PK + d];
				qi[a] = sq[(ti + 16 * a) * PK + d];
				kj[a] = sk[(tj + 16 * a) * PK + d];
			}
#pragma unroll
			for (int a = 0; a < 4; a++)
#pragma unroll
				for (int b = 0; b < 4; b++) {
					sa[a][b] += (ki[a] * bi[a]) * kj[b];
					sqk[a][b] += qi[a] * kj[b];
				}
		}
		intra_store_a(sa, sqk, sG, sA, Am, ti, tj, n, C + 1, 1);
	}
	for (int e = tid; e < n * dk; e += nt) {
		int i = e / dk, d = e % dk;
		sW[e] = (sk[i * PK + d] * sb[i]) * expf(sG[i]);
	}
	intra_bv(sU, v, ldv, sb, t0, n, h, dv, vec);
	__syncthreads();
	intra_subst(sW, sU, sA, dk, dv);
	__syncthreads();
	float *u = ws + ((size_t)c * Hv + h) * unit_floats(dk, dv);
	float *gW = u, *gU = u + off_U(dk), *gG = u + off_G(dk, dv);
	float *gQ = u + off_Q(dk, dv), *gK = u + off_K(dk, dv);
	const float gl = sG[n - 1];
	for (int e = tid; e < C * dk; e += nt) {
		int i = e / dk, d = e - i * dk;
		gW[e] = e < n * dk ? sW[e] : 0.0f;
		gQ[e] = i < n ? sq[i * PK + d] * expf(sG[i]) : 0.0f;
		gK[e] = i < n ? sk[i * PK + d] * expf(gl - sG[i]) : 0.0f;
	}
	for (int e = tid; e < C * dv; e += nt)
		gU[e] = e < n * dv ? sU[e] : 0.0f;
	for (int e = tid; e < C; e += nt)
		gG[e] = e < n ? sG[e] : 0.0f;
}

/* k_intra_rt: k_intra's arithmetic, every sum in the same order (the
 * same bits), for dk % 4 == 0, in 86 KB of shared memory and at most 128
 * registers so that two blocks share an SM (k_intra: 149 KB and 206
 * registers, one block an SM, 5.8 waves of the 27B's 768 blocks, 203 us
 * a 1,024-token chunk on the H100): k and q come in rows of dk + 4
 * (float4 loads over d in the products); q e^G and k e^(G_last - G) are
 * written out as soon as the products are done, then W is made in q's
 * place and beta V in k's. Taken with k_hstate_rt (gdn_rt_on).
 *
 * Since: the forward substitutions right-looking (intra_subst_rl), A kept
 * by columns; each row's exponentials taken once; only the tiles' pairs
 * that can lie on or below the diagonal summed; dk = dv = 128 a compile-
 * time constant (k_intra_rt<128>), and the writes in float4s. ncu on the
 * H100 (a 1,024-token chunk of the 27B's heads, test_kern_backends
 * holding every value to k_intra's by memcmp): 117 us against 163.
 * wqk = 0 leaves q e^G and k e^(G_last - G) out of the workspace (the
 * tensor-core kernels of MOOR_GDN_TC=1 make their own). */

/* k_intra_rt's A: by columns, a column's C rows padded to C + 4 floats
 * (float4 aligned) */
#define AT_P (C + 4)

/* intra_subst's forward substitutions with A by columns (AT_P apart),
 * right-looking: once row j of a column is final, it is taken off every
 * row below it, x_i -= A_ij x_j for i > j. Row i still subtracts A_i0
 * x_0, then A_i1 x_1, ... in order with the same operands, so the bits
 * are intra_subst's; but where intra_subst chains all 2,016 products of a
 * column one after another (a row's sum, then the next row's, which reads
 * it), here a step's 63 - j products are independent of each other and
 * the longest chain is 63, and the column of A comes in float4s. */
static __device__ inline void intra_subst_rl(float *sW, float *sU,
					     const float *sAt, int dk, int dv)
{
	for (int col = threadIdx.x; col < dk + dv; col += blockDim.x) {
		float *X = col < dk ? sW + col : sU + (col - dk);
		int w = col < dk ? dk : dv;
		float xr[C];
#pragma unroll
		for (int i = 0; i < C; i++)
			xr[i] = X[i * w];
		subst_col(xr, sAt, AT_P);
#pragma unroll
		for (int i = 0; i < C; i++)
			X[i * w] = xr[i];
	}
}

/* DKV: dk = dv = DKV known at compile time (128: every Qwen3.5), so that
 * the loops over a sub-chunk's values divide by constants; 0 takes the
 * arguments. The same arithmetic either way. */
template <int DKV>
static __global__ void __launch_bounds__(INTRA_THREADS, 2)
    k_intra_rt(float *ws, const float *q, const float *k, int ldqk,
	       const float *v, int ldv, const float *g, const float *beta,
	       int T, int Hk, int Hv, int dk, int dv, int wqk)
{
	kcu_pdl_enter();
	if (DKV)
		dk = dv = DKV;
	extern __shared__ __align__(16) float smr[];
	const int c = blockIdx.x, h = blockIdx.y, t0 = c * C;
	const int n = T - t0 < C ? T - t0 : C;
	const int kh = h / (Hv / Hk);
	const int PK = dk + 4, R1 = C * (PK > dv ? PK : dv);
	float *sk = smr;	    /* [C][PK] k, then U [C][dv] */
	float *sq = sk + R1;	    /* [C][PK] q, then W [C][dk] */
	float *sA = sq + C * PK;    /* [C][AT_P] A by columns, strictly lower */
	float *sG = sA + C * AT_P;  /* [C] */
	float *sb = sG + C;	    /* [C] beta */
	float *sEq = sb + C;	    /* [C] e^G */
	float *sEk = sEq + C;	    /* [C] e^(G_last - G) */
	float *sU = sk, *sW = sq;
	const int tid = threadIdx.x, nt = blockDim.x;

	const int vec = ldqk % 4 == 0 && ldv % 4 == 0 && dv % 4 == 0 &&
			(((uintptr_t)q | (uintptr_t)k | (uintptr_t)v) & 15) == 0;
	const int q4 = dk / 4;
	for (int e = tid; e < n * q4; e += nt) {
		int i = e / q4, d = (e - i * q4) * 4;
		size_t off = (size_t)(t0 + i) * ldqk + (size_t)kh * dk + d;
		float4 a, b;
		if (vec) {
			a = *(const float4 *)(k + off);
			b = *(const float4 *)(q + off);
		} else {
			a = make_float4(k[off], k[off + 1], k[off + 2], k[off + 3]);
			b = make_float4(q[off], q[off + 1], q[off + 2], q[off + 3]);
		}
		*(float4 *)(sk + i * PK + d) = a;
		*(float4 *)(sq + i * PK + d) = b;
	}
	intra_gates(sG, sb, g, beta, t0, n, h, Hv);
	/* the rows' exponentials once (k_intra takes each where it is used:
	 * the same expf of the same values) */
	for (int i = tid; i < C; i += nt) {
		sEq[i] = i < n ? expf(sG[i]) : 0.0f;
		sEk[i] = i < n ? expf(sG[n - 1] - sG[i]) : 0.0f;
	}
	float *u = ws + ((size_t)c * Hv + h) * unit_floats(dk, dv);
	float *Am = u + (size_t)C * dk + (size_t)C * dv;
	{
		const int ti = tid / 16, tj = tid % 16;
		float sa[4][4], sqk[4][4], bi[4];
#pragma unroll
		for (int a = 0; a < 4; a++) {
			int i = ti + 16 * a;
			bi[a] = i < n ? sb[i] : 0.0f;
#pragma unroll
			for (int b = 0; b < 4; b++)
				sa[a][b] = sqk[a][b] = 0.0f;
		}
		/* rows past n hold stale values: their products are masked.
		 * Column tj + 16 b lies above row ti + 16 a when b > a (at
		 * least 1 past it): those products are zeros in sA and Am, so
		 * they are not summed (the others' sums are unchanged) */
		for (int d = 0; d < dk; d += 4) {
			float4 ki[4], qi[4], kj[4];
#pragma unroll
			for (int a = 0; a < 4; a++) {
				ki[a] = *(const float4 *)(sk + (ti + 16 * a) * PK + d);
				qi[a] = *(const float4 *)(sq + (ti + 16 * a) * PK + d);
				kj[a] = *(const float4 *)(sk + (tj + 16 * a) * PK + d);
			}
#pragma unroll
			for (int e = 0; e < 4; e++)
#pragma unroll
				for (int a = 0; a < 4; a++)
#pragma unroll
					for (int b = 0; b <= a; b++) {
						sa[a][b] += (f4at(ki[a], e) * bi[a]) *
							    f4at(kj[b], e);
						sqk[a][b] += f4at(qi[a], e) * f4at(kj[b], e);
					}
		}
		intra_store_a(sa, sqk, sG, sA, Am, ti, tj, n, 1, AT_P);
	}
	__syncthreads(); /* k and q read by the products */
	float *gW = u, *gU = u + off_U(dk), *gG = u + off_G(dk, dv);
	float *gQ = u + off_Q(dk, dv), *gK = u + off_K(dk, dv);
	/* float4s of 4 values of a row (dk % 4 == 0), each value's
	 * arithmetic as k_intra's */
	const int d4 = dk / 4;
	for (int e = tid; e < (wqk ? C * d4 : 0); e += nt) {
		int i = e / d4, d = (e - i * d4) * 4;
		float4 oq = make_float4(0.0f, 0.0f, 0.0f, 0.0f), ok = oq;
		if (i < n) {
			float4 a = *(const float4 *)(sq + i * PK + d),
			       b = *(const float4 *)(sk + i * PK + d);
			float eq = sEq[i], ek = sEk[i];
			oq =
			    make_float4(a.x * eq, a.y * eq, a.z * eq, a.w * eq);
			ok =
			    make_float4(b.x * ek, b.y * ek, b.z * ek, b.w * ek);
		}
		*(float4 *)(gQ + 4 * e) = oq;
		*(float4 *)(gK + 4 * e) = ok;
	}
	for (int e = tid; e < C; e += nt)
		gG[e] = e < n ? sG[e] : 0.0f;
	__syncthreads(); /* q read: W goes in its place */
	for (int e = tid; e < n * d4; e += nt) {
		int i = e / d4, d = (e - i * d4) * 4;
		float4 a = *(const float4 *)(sk + i * PK + d);
		float bb = sb[i], eq = sEq[i];
		*(float4 *)(sW + 4 * e) =
		    make_float4((a.x * bb) * eq, (a.y * bb) * eq,
				(a.z * bb) * eq, (a.w * bb) * eq);
	}
	__syncthreads(); /* k read: beta V goes in its place */
	intra_bv(sU, v, ldv, sb, t0, n, h, dv, vec);
	__syncthreads();
	intra_subst_rl(sW, sU, sA, dk, dv);
	__syncthreads();
	const float4 z4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
	for (int e = tid; e < C * d4; e += nt)
		*(float4 *)(gW + 4 * e) =
		    e < n * d4 ? *(const float4 *)(sW + 4 * e) : z4;
	for (int e = tid; e < C * (dv / 4); e += nt)
		*(float4 *)(gU + 4 * e) =
		    e < n * (dv / 4) ? *(const float4 *)(sU + 4 * e) : z4;
}

static size_t intra_rt_smem(int dk, int dv)
{
	size_t pk = (size_t)dk + 4, r1 = pk > (size_t)dv ? pk : (size_t)dv;
	return ((size_t)C * r1 + (size_t)C * pk + (size_t)C * AT_P + 4 * C) *
	       sizeof(float);
}

/* ---- inter ---- */

static __global__ void k_inter(float *o, float *S, const float *ws,
			       const float *q, const float *k, int ldqk, int T,
			       int Hk, int Hv, int dk, int dv, int sw, int act)
{
	kcu_pdl_enter();
	extern __shared__ float sm[];
	const int h = blockIdx.x, s0 = blockIdx.y * sw;
	const int kh = h / (Hv / Hk);
	float *sW = sm;		   /* [C][dk] */
	float *sQ = sW + C * dk;   /* [C][dk] q e^G */
	float *sK = sQ + C * dk;   /* [C][dk] k e^(G_last - G) */
	float *sU = sK + C * dk;   /* [C][sw] U, then V' */
	float *sA = sU + C * sw;   /* [C][C] */
	float *sS = sA + C * C;	   /* [dk][sw] */
	float *sG = sS + dk * sw;  /* [C] */
	const int tid = threadIdx.x, lane = tid & 31, wq = tid >> 5;
	const int nw = blockDim.x >> 5;
	float *Sh = S + (size_t)h * dk * dv;

	for (int e = tid; e < dk * sw; e += blockDim.x)
		sS[e] = Sh[(size_t)(e / sw) * dv + s0 + e % sw];
	const int nch = (T + C - 1) / C;
	for (int c = 0; c < nch; c++) {
		const int t0 = c * C, n = T - t0 < C ? T - t0 : C;
		const float *u = ws + ((size_t)c * Hv + h) * unit_floats(dk, dv);
		const float *gW = u, *gU = u + (size_t)C * dk;
		const float *gA = gU + (size_t)C * dv, *gG = gA + C * C;
		__syncthreads(); /* the last sub-chunk's reads of sU, sA are done */
		for (int e = tid; e < C; e += blockDim.x)
			sG[e] = gG[e];
		__syncthreads();
		const float gl = sG[n - 1];
		for (int e = tid; e < n * dk; e += blockDim.x) {
			int i = e / dk, d = e % dk;
			size_t t = (size_t)(t0 + i);
			sW[e] = gW[e];
			sQ[e] = q[t * ldqk + (size_t)kh * dk + d] * expf(sG[i]);
			sK[e] = k[t * ldqk + (size_t)kh * dk + d] *
				expf(gl - sG[i]);
		}
		for (int e = tid; e < n * sw; e += blockDim.x)
			sU[e] = gU[(size_t)(e / sw) * dv + s0 + e % sw];
		for (int e = tid; e < n * C; e += blockDim.x)
			sA[e] = gA[e];
		__syncthreads();
		/* V' = U - W S; rows i = wq, wq + nw, ..., column lane */
		if (lane < sw)
			for (int i = wq; i < n; i += nw) {
				float acc = 0.0f;
				for (int d = 0; d < dk; d++)
					acc += sW[i * dk + d] * sS[d * sw + lane];
				sU[i * sw + lane] -= acc;
			}
		__syncthreads();
		/* O = (q e^G) S + Am V' */
		if (lane < sw)
			for (int i = wq; i < n; i += nw) {
				float x = 0.0f, y = 0.0f;
				for (int d = 0; d < dk; d++)
					x += sQ[i * dk + d] * sS[d * sw + lane];
				for (int j = 0; j <= i; j++)
					y += sA[i * C + j] * sU[j * sw + lane];
				o[((size_t)(t0 + i) * Hv + h) * dv + s0 + lane] =
				    kcu_rnd(x + y, act);
			}
		__syncthreads();
		/* S <- e^(G_last) S + (k e^(G_last - G))^T V' */
		const float egl = expf(gl);
		if (lane < sw)
			for (int d = wq; d < dk; d += nw) {
				float acc = 0.0f;
				for (int j = 0; j < n; j++)
					acc += sK[j * dk + d] * sU[j * sw + lane];
				sS[d * sw + lane] = sS[d * sw + lane] * egl + acc;
			}
	}
	__syncthreads();
	for (int e = tid; e < dk * sw; e += blockDim.x)
		Sh[(size_t)(e / sw) * dv + s0 + e % sw] = sS[e];
}

/* k_hstate and k_out: the 16-column path (dk % 4 == 0, dv % 16 == 0).
 *
 * k_hstate carries the state alone, the sub-chunks in order: grid Hv x
 * dv / SW (SW = 16 value columns), 16 SW threads, two blocks an SM; a
 * thread (tx = tid % (SW / 4), ty = tid / (SW / 4)) holds columns 4 tx ..
 * 4 tx + 3 of row ty (for V') or of state rows ty + 64 m (for the update).
 * Per sub-chunk it writes the state it enters with to the unit (for
 * k_out), V' = U - W S over U (in place: the block is the only reader of
 * its columns of U), and S <- e^(G_last) S + (k e^(G_last - G))^T V'. W
 * and k e^(G_last - G) come by cp.async into two buffers, each copied
 * while the other's product runs (W of the next sub-chunk under the
 * state's update). Measured on the H200 (bench_kern, the 27B's 48 heads,
 * 1,024 tokens, the three kernels): 0.654 ms with SW = 16 (384 blocks, two
 * waves), 0.698 with SW = 32 (192 blocks of 512 threads, one wave), where
 * the one-kernel pass before (k_inter16, three blocks an SM) took 0.722.
 * The sequential loop is bound by its fp32 products' issue and latency
 * (about 28 us a sub-chunk under ncu): the next step is tensor cores.
 *
 * k_out makes the output of every sub-chunk at once (grid sub-chunks x Hv
 * x dv / OC): O = (q e^G) S + Am V', rounded when act is BF16.
 *
 * Every sum runs in the order k_inter's does (over d, then j, each from 0),
 * and intra makes q e^G and k e^(G_last - G) as k_inter does in place: the
 * same arithmetic as the one-kernel pass they replace (k_inter16, in the
 * history before d58e2b3). */
#define SL16 16


template <int SW>
static __global__ void __launch_bounds__(16 * SW, 2)
    k_hstate(float *S, float *ws, int T, int Hv, int dk, int dv)
{
	kcu_pdl_enter();
	constexpr int TXN = SW / 4; /* threads across a row */
	extern __shared__ __align__(16) float hsm[];
	const int h = blockIdx.x, s0 = blockIdx.y * SW;
	const int PK = I16_PK(dk);
	float *sW = hsm;	    /* [C][PK] W */
	float *sK = sW + C * PK;    /* [C][PK] k e^(G_last - G) */
	float *sU = sK + C * PK;    /* [C][SW] U, then V' */
	float *sS = sU + C * SW;  /* [dk][SW] */
	const int tid = threadIdx.x, tx = tid % TXN, ty = tid / TXN;
	const int c4 = tx * 4;
	float *Sh = S + (size_t)h * dk * dv;
	const size_t uf = unit_floats(dk, dv);
	const size_t oU = off_U(dk), oG = off_G(dk, dv), oK = off_K(dk, dv),
		     oS = off_S(dk, dv);

	for (int e = tid; e < dk * SW; e += blockDim.x)
		sS[e] = Sh[(size_t)(e / SW) * dv + s0 + e % SW];
	hs_rows(sW, ws + (size_t)h * uf, dk);
	cp_commit();
	const int nch = (T + C - 1) / C;
	for (int c = 0; c < nch; c++) {
		const int n = T - c * C < C ? T - c * C : C;
		float *u = ws + ((size_t)c * Hv + h) * uf;
		const float gl = u[oG + n - 1];
		hs_rows(sK, u + oK, dk);
		for (int e = tid; e < C * (SW / 4); e += blockDim.x) {
			int r = e / (SW / 4), p = (e % (SW / 4)) * 4;
			cp16(sU + r * SW + p, u + oU + (size_t)r * dv + s0 + p, 1);
		}
		cp_commit();
		/* the state this sub-chunk starts from, for k_out */
		for (int e = tid; e < dk * SW; e += blockDim.x)
			u[oS + (size_t)(e / SW) * dv + s0 + e % SW] = sS[e];
		cp_wait<1>();
		__syncthreads(); /* W in */
		/* V' = U - W S */
		float acc[4] = {};
		{
			const float *w0 = sW + ty * PK;
			for (int d = 0; d < dk; d++) {
				float4 sv = *(const float4 *)(sS + d * SW + c4);
				float a0 = w0[d];
				acc[0] += a0 * sv.x;
				acc[1] += a0 * sv.y;
				acc[2] += a0 * sv.z;
				acc[3] += a0 * sv.w;
			}
		}
		cp_wait<0>();
		__syncthreads(); /* k e^(G_last - G) and U in; W read */
		if (c + 1 < nch)
			hs_rows(sW, u + (size_t)Hv * uf, dk);
		cp_commit();
		if (ty < n)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				float v = sU[ty * SW + c4 + e] - acc[e];
				sU[ty * SW + c4 + e] = v;
				u[oU + (size_t)ty * dv + s0 + c4 + e] = v;
			}
		__syncthreads(); /* V' whole */
		/* S <- e^(G_last) S + (k e^(G_last - G))^T V' */
		{
			const float egl = expf(gl);
			float ac[2][4] = {};
			for (int j = 0; j < n; j++) {
				float4 uv = *(const float4 *)(sU + j * SW + c4);
				const float *kr = sK + j * PK + ty;
#pragma unroll
				for (int m = 0; m < 2; m++) {
					float kd = ty + 64 * m < dk ? kr[64 * m] : 0.0f;
					ac[m][0] += kd * uv.x;
					ac[m][1] += kd * uv.y;
					ac[m][2] += kd * uv.z;
					ac[m][3] += kd * uv.w;
				}
			}
#pragma unroll
			for (int m = 0; m < 2; m++) {
				const int d = ty + 64 * m;
				if (d < dk)
#pragma unroll
					for (int e = 0; e < 4; e++) {
						float *sp = sS + d * SW + c4 + e;
						*sp = *sp * egl + ac[m][e];
					}
			}
		}
		__syncthreads(); /* the state updated; k and V' read */
	}
	cp_wait<0>();
	for (int e = tid; e < dk * SW; e += blockDim.x)
		Sh[(size_t)(e / SW) * dv + s0 + e % SW] = sS[e];
}

/* k_hstate_rt: k_hstate's arithmetic, the sums in the same order (over d,
 * then over j, each from 0, as k_hstate<16> and k_inter: the same bits),
 * for dk = DK (32, 64 or 128) and dv % 32 == 0, with register tiles:
 * ncu on the H100 found k_hstate<16> bound by its shared-memory loads
 * (L1 80% busy: a float4 of S and a scalar of W a 4 products) and its 384
 * blocks in 1.45 waves (288 us a 1,024-token chunk of the 27B's heads).
 * Grid Hv x dv / 32 (192 blocks for the 27B: one wave at two an SM), 128
 * threads, tx = tid % 8 (columns 4 tx .. 4 tx + 3), ty = tid / 8:
 *   V' = U - W S: rows ty + 16 i (i < 4), over d four at a time (four
 *   float4 of W, four of S: 64 products);
 *   S <- e^(G_last) S + (k e^(G_last - G))^T V': state rows 4 ty + 64 i
 *   + k (i < 2, k < 4), over j (a float4 of k e^(G_last - G) an i and
 *   one of V': 32 products).
 * Shared: W and k e^(G_last - G) [C][DK + 4] (rows 4 banks apart: a
 * warp's four row groups hit four bank quads), U then V' [C][36], S
 * [DK][36]; 93 KB at DK 128. W of the next sub-chunk is copied under
 * the update, as in k_hstate. The default where it applies (gdn_rt_on),
 * but at dk 128 on Hopper, where k_hstate_cl takes its place.
 *
 * NT = 256 (the default at dk 128, hstate_nt): twice the warps on the
 * same tiles' columns, ty = tid / 8 < 32: V' rows ty + 32 i (i < 2),
 * state rows 4 ty + 128 i (i < 1); every element's sums in the same
 * order, so the same bits. ncu found the 128-thread form at 9%
 * occupancy, IPC-bound at 3.8 cycles an instruction, in 0.73 waves: an SM
 * with two blocks sets the time, and more warps there hide more of the
 * shared loads' latency (238 us a 1,024-token chunk; 204 with 256).
 *
 * Both sums load a step's float4s one step ahead of its products, and
 * ty is masked to its range so that the compiler drops the update's row
 * test (and the branch it put in every step over j, where ncu found 41%
 * of the stall samples): 197 us against 204 (unrolling W S by 4 or 8
 * and the update by 8 or 16 instead of 2 and 4 measured the same). */
#define RT_SW 32
#define RT_PS (RT_SW + 4)

/* W S for a thread's NV rows ty + TY i (W's rows PW floats apart) and
 * its 4 columns c4 .. c4 + 3 of the state [DK][RT_PS]: acc[i][e] summed
 * over d from 0, a float4 of W a row and four of S a step of four d; the
 * next step's float4s are loaded before this step's products. The state
 * pass's kernels (k_hstate_rt, k_hstate_cl) share it, and with it the
 * order of every sum. */
template <int DK, int NV, int TY, int PW>
static __device__ inline void ws_rows(float (&acc)[NV][4], const float *sW,
				      const float *sS, int ty, int c4)
{
	float4 wn[NV], sn[4];
#pragma unroll
	for (int i = 0; i < NV; i++)
		wn[i] = *(const float4 *)(sW + (ty + TY * i) * PW);
#pragma unroll
	for (int k = 0; k < 4; k++)
		sn[k] = *(const float4 *)(sS + k * RT_PS + c4);
#pragma unroll 2
	for (int d = 0; d < DK; d += 4) {
		float4 wv[NV], sv[4];
		const int dn = d + 4 < DK ? d + 4 : d;
#pragma unroll
		for (int i = 0; i < NV; i++) {
			wv[i] = wn[i];
			wn[i] = *(const float4 *)(sW + (ty + TY * i) * PW + dn);
		}
#pragma unroll
		for (int k = 0; k < 4; k++) {
			sv[k] = sn[k];
			sn[k] = *(const float4 *)(sS + (dn + k) * RT_PS + c4);
		}
#pragma unroll
		for (int i = 0; i < NV; i++) {
			const float a[4] = {wv[i].x, wv[i].y, wv[i].z, wv[i].w};
#pragma unroll
			for (int k = 0; k < 4; k++) {
				acc[i][0] += a[k] * sv[k].x;
				acc[i][1] += a[k] * sv[k].y;
				acc[i][2] += a[k] * sv[k].z;
				acc[i][3] += a[k] * sv[k].w;
			}
		}
	}
}

/* The state update's sums for a thread's state rows d0 + k (k < 4),
 * d0 = 4 ty + 4 TY i (i < NI; rows at or past DK are skipped), and its 4
 * columns c4 .. c4 + 3 of V' [C][RT_PS]: ac[i][k][e] summed over j < n
 * from 0, a float4 of k e^(G_last - G)'s row j (rows PK floats apart,
 * the thread's state rows as its columns) an i and one of V''s row j;
 * row j + 1's float4s are loaded before row j's products. k_hstate_rt
 * and k_hstate_cl share it, and with it the order of every sum. */
template <int NI, int TY, int DK, int PK>
static __device__ inline void kv_rows(float (&ac)[NI][4][4], const float *sK,
				      const float *sU, int ty, int c4, int n)
{
	float4 un = *(const float4 *)(sU + c4), kn[NI];
#pragma unroll
	for (int i = 0; i < NI; i++) {
		const int d0 = 4 * ty + 4 * TY * i;
		kn[i] = *(const float4 *)(sK + (d0 < DK ? d0 : 0));
	}
#pragma unroll 4
	for (int j = 0; j < n; j++) {
		const int jn = j + 1 < C ? j + 1 : j;
		const float4 uv = un;
		un = *(const float4 *)(sU + jn * RT_PS + c4);
#pragma unroll
		for (int i = 0; i < NI; i++) {
			const int d0 = 4 * ty + 4 * TY * i;
			const float4 kv = kn[i];
			kn[i] = *(const float4 *)(sK + jn * PK +
						  (d0 < DK ? d0 : 0));
			if (d0 < DK) {
				const float kd[4] = {kv.x, kv.y, kv.z, kv.w};
#pragma unroll
				for (int k = 0; k < 4; k++) {
					ac[i][k][0] += kd[k] * uv.x;
					ac[i][k][1] += kd[k] * uv.y;
					ac[i][k][2] += kd[k] * uv.z;
					ac[i][k][3] += kd[k] * uv.w;
				}
			}
		}
	}
}

template <int DK, int NT = 128>
static __global__ void __launch_bounds__(NT, 2)
    k_hstate_rt(float *S, float *ws, int T, int Hv, int dv)
{
	kcu_pdl_enter();
	constexpr int TY = NT / 8;		   /* row groups */
	constexpr int NV = C / TY;		   /* V' rows a thread */
	constexpr int PK = DK + 4, NI = (DK + 4 * TY - 1) / (4 * TY);
	extern __shared__ __align__(16) float rsm[];
	float *sW = rsm;	      /* [C][PK] W */
	float *sK = sW + C * PK;      /* [C][PK] k e^(G_last - G) */
	float *sU = sK + C * PK;      /* [C][RT_PS] U, then V' */
	float *sS = sU + C * RT_PS;   /* [DK][RT_PS] */
	const int h = blockIdx.x, s0 = blockIdx.y * RT_SW;
	/* ty masked to its range (blockDim.x is NT): the compiler then knows
	 * that the update's rows 4 ty + 4 TY i lie below DK where they do,
	 * and takes the test, and the branch in every step over j, away */
	const int tid = threadIdx.x, tx = tid & 7, ty = (tid >> 3) & (TY - 1),
		  c4 = 4 * tx;
	float *Sh = S + (size_t)h * DK * dv;
	const size_t uf = unit_floats(DK, dv);
	const size_t oU = off_U(DK), oG = off_G(DK, dv), oK = off_K(DK, dv),
		     oS = off_S(DK, dv);

	for (int e = tid; e < DK * RT_SW; e += blockDim.x)
		sS[(e / RT_SW) * RT_PS + e % RT_SW] =
		    Sh[(size_t)(e / RT_SW) * dv + s0 + e % RT_SW];
	hs_rows(sW, ws + (size_t)h * uf, DK, PK);
	cp_commit();
	/* the first sub-chunk's copy of the state below reads it in float4s
	 * that other threads stored: without this barrier it read what an
	 * earlier block left in shared memory now and then (at the 27B's
	 * shapes a resumed turn's logits differed from a cold prefill's,
	 * bench_ttft on the H100) */
	__syncthreads();
	const int nch = (T + C - 1) / C;
	for (int c = 0; c < nch; c++) {
		const int n = T - c * C < C ? T - c * C : C;
		float *u = ws + ((size_t)c * Hv + h) * uf;
		const float gl = u[oG + n - 1];
		hs_rows(sK, u + oK, DK, PK);
		for (int e = tid; e < C * (RT_SW / 4); e += blockDim.x) {
			int r = e / (RT_SW / 4), p = (e % (RT_SW / 4)) * 4;
			cp16(sU + r * RT_PS + p, u + oU + (size_t)r * dv + s0 + p, 1);
		}
		cp_commit();
		/* the state this sub-chunk starts from, for k_out */
		for (int e = tid; e < DK * (RT_SW / 4); e += blockDim.x) {
			int d = e / (RT_SW / 4), p = (e % (RT_SW / 4)) * 4;
			*(float4 *)(u + oS + (size_t)d * dv + s0 + p) =
			    *(const float4 *)(sS + d * RT_PS + p);
		}
		cp_wait<1>();
		__syncthreads(); /* W in */
		/* W S for rows ty + TY i */
		float acc[NV][4] = {};
		ws_rows<DK, NV, TY, PK>(acc, sW, sS, ty, c4);
		cp_wait<0>();
		__syncthreads(); /* k e^(G_last - G) and U in; W read */
		if (c + 1 < nch)
			hs_rows(sW, u + (size_t)Hv * uf, DK, PK);
		cp_commit();
#pragma unroll
		for (int i = 0; i < NV; i++) {
			const int r = ty + TY * i;
			if (r < n) {
				float4 uv = *(const float4 *)(sU + r * RT_PS + c4);
				float4 v = make_float4(uv.x - acc[i][0], uv.y - acc[i][1],
						       uv.z - acc[i][2], uv.w - acc[i][3]);
				*(float4 *)(sU + r * RT_PS + c4) = v;
				*(float4 *)(u + oU + (size_t)r * dv + s0 + c4) = v;
			}
		}
		__syncthreads(); /* V' whole */
		/* S <- e^(G_last) S + (k e^(G_last - G))^T V' */
		{
			const float egl = expf(gl);
			float ac[NI][4][4] = {};
			kv_rows<NI, TY, DK, PK>(ac, sK, sU, ty, c4, n);
#pragma unroll
			for (int i = 0; i < NI; i++) {
				const int d0 = 4 * ty + 4 * TY * i;
				if (d0 < DK)
#pragma unroll
					for (int k = 0; k < 4; k++) {
						float *row = sS + (d0 + k) * RT_PS;
						float4 sv = *(float4 *)(row + c4);
						sv.x = sv.x * egl + ac[i][k][0];
						sv.y = sv.y * egl + ac[i][k][1];
						sv.z = sv.z * egl + ac[i][k][2];
						sv.w = sv.w * egl + ac[i][k][3];
						*(float4 *)(row + c4) = sv;
					}
			}
		}
		__syncthreads(); /* the state updated; k and V' read */
	}
	cp_wait<0>();
	for (int e = tid; e < DK * RT_SW; e += blockDim.x)
		Sh[(size_t)(e / RT_SW) * dv + s0 + e % RT_SW] =
		    sS[(e / RT_SW) * RT_PS + e % RT_SW];
}

static size_t hstate_rt_smem(int dk)
{
	return ((size_t)2 * C * (dk + 4) + (size_t)C * RT_PS +
		(size_t)dk * RT_PS) *
	       sizeof(float);
}

/* k_hstate_cl: k_hstate_rt<128>'s state pass on clusters of two CTAs a
 * (value head, 32 value columns), every element's sums in k_hstate_rt's
 * order (over d, then over j, each from 0): the same bits.
 * k_hstate_rt's 192 blocks of 93 KB fill 96 of an H100's 132 SMs, two an
 * SM, and the pass is the chain of the chunked rule (197 us of its 414 a
 * 1,024-token chunk of the 27B's heads). Here CTA r of a pair (r = 0, 1)
 * owns V' rows 32 r .. 32 r + 31 and state rows 64 r .. 64 r + 63, and
 * holds the whole state and the whole V':
 *   V' = U - W S   its 32 rows from its rows of W and the whole state
 *                  (rows ty + 16 i, i < 2; tx's 4 columns), written to its
 *                  own shared memory and to the peer's (DSMEM);
 *   cluster barrier;
 *   S update       its 64 rows from its 64 columns of k e^(G_last - G)
 *                  and the whole V' (rows 4 ty + k), written to both
 *                  CTAs' copies of the state;
 *   cluster barrier (the next sub-chunk's W S reads the whole state).
 * 384 CTAs of 60.5 KB, three an SM: one wave on 128 SMs. Shared: W's
 * rows [32][DK + 4], k's columns [C][64 + 4], U then V' [C][RT_PS], S
 * [DK][RT_PS]. The default where it applies (gdn_cl_on); case_gdn_rt and
 * case_gdn_rt_wide compare it with k_hstate_rt by memcmp. ncu on the H100
 * (a 1,024-token chunk of the 27B's heads): 170 us against 197, 0.97
 * waves, 146 registers a thread, L1 76% busy: shared loads bound it.
 * 256 threads a CTA (one W row a thread in W S, two state rows in the
 * update: the same sums) took 244 us (2026-12-07): each float4 of S
 * then feeds half the products. */
#define CL_NT 128
#define CL_PW (128 + 4)
#define CL_PK (64 + 4)

static size_t hstate_cl_smem(void)
{
	return ((size_t)(C / 2) * CL_PW + (size_t)C * CL_PK +
		(size_t)C * RT_PS + (size_t)128 * RT_PS) *
	       sizeof(float);
}

/* W's rows r0 .. r0 + C / 2 - 1 of a sub-chunk's unit (from Wg) into sW */
static __device__ inline void cl_w_rows(float *sW, const float *Wg, int r0,
					int tid)
{
	for (int e = tid; e < (C / 2) * (128 / 4); e += CL_NT) {
		int r = e / (128 / 4), p = (e % (128 / 4)) * 4;
		cp16(sW + r * CL_PW + p, Wg + (size_t)(r0 + r) * 128 + p, 1);
	}
}

static __global__ void __cluster_dims__(1, 1, 2) __launch_bounds__(CL_NT, 3)
    k_hstate_cl(float *S, float *ws, int T, int Hv, int dv)
{
	kcu_pdl_enter();
	namespace cg = cooperative_groups;
	constexpr int DK = 128, HR = C / 2, HD = DK / 2;
	extern __shared__ __align__(16) float csm[];
	float *sW = csm;	      /* [HR][CL_PW] W, this CTA's rows */
	float *sK = sW + HR * CL_PW;  /* [C][CL_PK] k e^(G_last - G), its columns */
	float *sU = sK + C * CL_PK;   /* [C][RT_PS] U (its rows), then V' */
	float *sS = sU + C * RT_PS;   /* [DK][RT_PS] the state */
	cg::cluster_group cl = cg::this_cluster();
	const int rk = (int)cl.block_rank();
	float *pU = cl.map_shared_rank(sU, rk ^ 1);
	float *pS = cl.map_shared_rank(sS, rk ^ 1);
	const int h = blockIdx.x, s0 = blockIdx.y * RT_SW;
	const int tid = threadIdx.x, tx = tid & 7, ty = (tid >> 3) & 15,
		  c4 = 4 * tx;
	const int r0 = rk * HR, d0 = rk * HD;
	float *Sh = S + (size_t)h * DK * dv;
	const size_t uf = unit_floats(DK, dv);
	const size_t oU = off_U(DK), oG = off_G(DK, dv), oK = off_K(DK, dv),
		     oS = off_S(DK, dv);

	for (int e = tid; e < DK * RT_SW; e += CL_NT)
		sS[(e / RT_SW) * RT_PS + e % RT_SW] =
		    Sh[(size_t)(e / RT_SW) * dv + s0 + e % RT_SW];
	cl_w_rows(sW, ws + (size_t)h * uf, r0, tid);
	cp_commit();
	/* the state in (k_hstate_rt's first barrier), and the peer started:
	 * no CTA touches the other's shared memory before this */
	cl.sync();
	const int nch = (T + C - 1) / C;
	for (int c = 0; c < nch; c++) {
		const int n = T - c * C < C ? T - c * C : C;
		float *u = ws + ((size_t)c * Hv + h) * uf;
		const float gl = u[oG + n - 1];
		for (int e = tid; e < C * (HD / 4); e += CL_NT) {
			int j = e / (HD / 4), p = (e % (HD / 4)) * 4;
			cp16(sK + j * CL_PK + p, u + oK + (size_t)j * DK + d0 + p,
			     1);
		}
		for (int e = tid; e < HR * (RT_SW / 4); e += CL_NT) {
			int r = r0 + e / (RT_SW / 4), p = (e % (RT_SW / 4)) * 4;
			cp16(sU + r * RT_PS + p, u + oU + (size_t)r * dv + s0 + p,
			     1);
		}
		cp_commit();
		/* the state this sub-chunk starts from, for k_out: its rows */
		for (int e = tid; e < HD * (RT_SW / 4); e += CL_NT) {
			int d = d0 + e / (RT_SW / 4), p = (e % (RT_SW / 4)) * 4;
			*(float4 *)(u + oS + (size_t)d * dv + s0 + p) =
			    *(const float4 *)(sS + d * RT_PS + p);
		}
		cp_wait<1>();
		__syncthreads(); /* W in */
		/* W S for its rows ty + 16 i */
		float acc[2][4] = {};
		ws_rows<DK, 2, 16, CL_PW>(acc, sW, sS, ty, c4);
		cp_wait<0>();
		__syncthreads(); /* k and U in; W read */
		if (c + 1 < nch)
			cl_w_rows(sW, u + (size_t)Hv * uf, r0, tid);
		cp_commit();
#pragma unroll
		for (int i = 0; i < 2; i++) {
			const int r = r0 + ty + 16 * i;
			if (r < n) {
				float4 uv = *(const float4 *)(sU + r * RT_PS + c4);
				float4 v = make_float4(uv.x - acc[i][0], uv.y - acc[i][1],
						       uv.z - acc[i][2], uv.w - acc[i][3]);
				*(float4 *)(sU + r * RT_PS + c4) = v;
				*(float4 *)(pU + r * RT_PS + c4) = v;
				*(float4 *)(u + oU + (size_t)r * dv + s0 + c4) = v;
			}
		}
		cl.sync(); /* V' whole in both CTAs */
		/* S <- e^(G_last) S + (k e^(G_last - G))^T V', rows d0 + 4 ty
		 * + k */
		{
			const float egl = expf(gl);
			float ac[1][4][4] = {};
			kv_rows<1, 16, HD, CL_PK>(ac, sK, sU, ty, c4, n);
#pragma unroll
			for (int k = 0; k < 4; k++) {
				const int o = (d0 + 4 * ty + k) * RT_PS + c4;
				float4 sv = *(float4 *)(sS + o);
				sv.x = sv.x * egl + ac[0][k][0];
				sv.y = sv.y * egl + ac[0][k][1];
				sv.z = sv.z * egl + ac[0][k][2];
				sv.w = sv.w * egl + ac[0][k][3];
				*(float4 *)(sS + o) = sv;
				*(float4 *)(pS + o) = sv;
			}
		}
		cl.sync(); /* the state whole in both; k and V' read */
	}
	cp_wait<0>();
	for (int e = tid; e < HD * RT_SW; e += CL_NT) {
		int d = d0 + e / RT_SW;
		Sh[(size_t)d * dv + s0 + e % RT_SW] =
		    sS[d * RT_PS + e % RT_SW];
	}
}

/* k_hstate_cl for the state pass where k_hstate_rt<128> would run, on a
 * device with clusters (cc 9.0 and later), unless MOOR_GDN_CL=0 (read at
 * each call, so that one process can compare). Measured on the H100
 * (2026-12-07): ncu 170 us a 1,024-token chunk of the 27B's heads against
 * k_hstate_rt<128, 256>'s 197; bench_kern's delta_chunked 0.377 ms
 * against 0.407; bench_gpu's prefill 4.06 s against 4.09 at 32k, 20.68
 * against 20.78 at 128k. */
static int gdn_cl_on(const kern_ctx *cx)
{
	return cx->prop.major >= 9 && kcu_env_flag("MOOR_GDN_CL", 1);
}

/* MOOR_GDN_TC (read at each call, so that one process can compare)
 * picks gdn_tc.cuh's tensor-core kernels of the chunked rule at dk 128:
 * 1, the default, k_intra_tc (where k_intra_rt<128> would run) and
 * k_chunk_tc (the state pass and the output in one kernel); 2 the state
 * pass's alone (k_hstate_tc where k_hstate_cl or k_hstate_rt<128> would
 * run); 3 k_intra_tc, k_hstate_tc and k_out_tc (where k_out4 would); 0
 * none. Other bits than the SIMT kernels' (and 1's than 3's): it is in
 * kern_bits_env. Measured on an H100 (2026-12-07): bench_kern's
 * delta_chunked 0.306 ms a 1,024-token chunk of the 27B's heads at 1
 * against 0.376 at 0 (2 0.364, 3 0.363); bench_gpu's prefill 3.79 s
 * against 3.91 at 32k, 19.54 against 20.02 at 128k; golden27 in the
 * same floors. After the split quads (2026-12-08): 0.258 ms at 1 against
 * 0.377 at 0, a 32k prefill 3.66 s, 128k 18.99. */
static int gdn_tc_on(void)
{
	long v = kcu_env_int("MOOR_GDN_TC", 1);
	return v >= 1 && v <= 3 ? (int)v : 0;
}

/* MOOR_GDN_CT (read at each call): 1, the default, k_chunk_tc's
 * warps (a warp a row tile, its every column); 2 k_chunk_tc2's (a warp
 * half the columns of two row tiles). The same tiles and sums, so the
 * same bits. */
static int gdn_ct(void)
{
	return kcu_env_int("MOOR_GDN_CT", 1) == 2 ? 2 : 1;
}

/* k_chunk_tc or k_chunk_tc2 (gdn_ct) of T tokens on q: its workspace
 * at ws, q and k at its first token */
static void chunk_tc_go(const kern_queue *q, float *o, float *S,
			const float *ws, const float *qq, const float *k,
			int ldqk, int T, int Hk, int Hv, int dv, int act)
{
	kcu_go(q, gdn_ct() == 2 ? k_chunk_tc2 : k_chunk_tc,
	       dim3(Hv, dv / CT_OC), 256, chunk_tc_smem(), o, S, ws, qq, k,
	       ldqk, T, Hk, Hv, dv, act);
}

/* MOOR_GDN_IT (read at each call): 1, the default, k_intra_tc; 2
 * k_intra_tc2 (k split once, as quads). The same sums, so the same
 * bits. */
static int gdn_it(void)
{
	return kcu_env_int("MOOR_GDN_IT", 1) == 2 ? 2 : 1;
}

/* k_intra_tc or k_intra_tc2 (gdn_it) of T tokens on q, each argument at
 * its first token */
static void intra_tc_go(const kern_queue *q, float *ws, const float *qq,
			const float *k, int ldqk, const float *v, int ldv,
			const float *g, const float *beta, int T, int Hk,
			int Hv)
{
	const dim3 grid((T + C - 1) / C, Hv);
	if (gdn_it() == 2)
		kcu_go(q, k_intra_tc2, grid, 256, intra_tc2_smem(), ws, qq, k,
		       ldqk, v, ldv, g, beta, T, Hk, Hv);
	else
		kcu_go(q, k_intra_tc, grid, 256, intra_tc_smem(), ws, qq, k,
		       ldqk, v, ldv, g, beta, T, Hk, Hv);
}

/* whether the device gives a block the tensor-core kernels' shared
 * memory (k_chunk_tc's 213 KB: sm_90's 227 do); where not, MOOR_GDN_TC
 * is taken as 0 and their attributes are not set */
static int tc_fits(const kern_ctx *cx)
{
	return cx->prop.sharedMemPerBlockOptin >= chunk_tc_smem();
}

/* at MOOR_GDN_TC=tc: intra on tensor cores (k_intra_tc) */
static int tc_intra(int tc, int dv)
{
	return (tc == 1 || tc == 3) && dv == 128;
}

/* O for a sub-chunk's rows and OC value columns: 256 threads, a thread
 * (tx = tid % (OC / 4), ty = tid / (OC / 4)) holds columns 4 tx .. 4 tx +
 * 3 of rows ty + TY a. */
template <int OC>
static __global__ void __launch_bounds__(256)
    k_out(float *o, const float *ws, int T, int Hv, int dk, int dv, int act)
{
	kcu_pdl_enter();
	constexpr int TX = OC / 4, TY = 256 / TX, RA = C / TY;
	extern __shared__ __align__(16) float osm[];
	const int c = blockIdx.x, h = blockIdx.y, s0 = blockIdx.z * OC;
	const int t0 = c * C, n = T - t0 < C ? T - t0 : C;
	const int PK = I16_PK(dk), PA = C + 1;
	float *sQ = osm;	  /* [C][PK] q e^G */
	float *sS = sQ + C * PK;  /* [dk][OC] */
	float *sA = sS + dk * OC; /* [C][PA] Am */
	float *sV = sA + C * PA;  /* [C][OC] V' */
	const float *u = ws + ((size_t)c * Hv + h) * unit_floats(dk, dv);
	const int tid = threadIdx.x, tx = tid % TX, ty = tid / TX;
	const int c4 = tx * 4;

	hs_rows(sQ, u + off_Q(dk, dv), dk);
	for (int e = tid; e < dk * TX; e += blockDim.x) {
		int d = e / TX, p = (e % TX) * 4;
		cp16(sS + d * OC + p, u + off_S(dk, dv) + (size_t)d * dv + s0 + p, 1);
	}
	for (int e = tid; e < n * TX; e += blockDim.x) {
		int j = e / TX, p = (e % TX) * 4;
		cp16(sV + j * OC + p, u + off_U(dk) + (size_t)j * dv + s0 + p, 1);
	}
	cp_commit();
	const float *gA = u + off_A(dk, dv);
	for (int e = tid; e < n * C; e += blockDim.x)
		sA[(e / C) * PA + e % C] = gA[e];
	cp_wait<0>();
	__syncthreads();

	float x[RA][4] = {}, y[RA][4] = {};
	for (int d = 0; d < dk; d++) {
		float4 sv = *(const float4 *)(sS + d * OC + c4);
#pragma unroll
		for (int a = 0; a < RA; a++) {
			float q0 = sQ[(ty + TY * a) * PK + d];
			x[a][0] += q0 * sv.x;
			x[a][1] += q0 * sv.y;
			x[a][2] += q0 * sv.z;
			x[a][3] += q0 * sv.w;
		}
	}
	int jmax = ty + TY * (RA - 1);
	if (jmax > n - 1)
		jmax = n - 1;
	for (int j = 0; j <= jmax; j++) {
		float4 uv = *(const float4 *)(sV + j * OC + c4);
#pragma unroll
		for (int a = 0; a < RA; a++) {
			const int r = ty + TY * a;
			if (j <= r) {
				float aa = sA[r * PA + j];
				y[a][0] += aa * uv.x;
				y[a][1] += aa * uv.y;
				y[a][2] += aa * uv.z;
				y[a][3] += aa * uv.w;
			}
		}
	}
#pragma unroll
	for (int a = 0; a < RA; a++) {
		const int r = ty + TY * a;
		if (r < n) {
			float *op = o + ((size_t)(t0 + r) * Hv + h) * dv + s0 + c4;
#pragma unroll
			for (int e = 0; e < 4; e++)
				op[e] = kcu_rnd(x[a][e] + y[a][e], act);
		}
	}
}

/* k_out4: k_out<64>'s arithmetic in the same order (x over d, y over
 * j, each from 0, then x + y rounded), its loads four at a time: a float4
 * of q e^G a row and four of S a step of four d (k_out: a float4 of S and
 * four scalars of q e^G a step of one), a float4 of Am a row and four of
 * V' a step of four j. Am's rows are padded to C + 4 floats (float4
 * aligned). Taken with k_hstate_rt (gdn_rt_on). Its copies come in two
 * groups, x's operands first, so that Am and V' land while x is summed
 * (ncu on the H100: 100 us a 1,024-token chunk of the 27B's heads
 * against 104). */
#define O4_PA (C + 4)
static __global__ void __launch_bounds__(256)
    k_out4(float *o, const float *ws, int T, int Hv, int dk, int dv, int act)
{
	kcu_pdl_enter();
	constexpr int OC = 64, TX = OC / 4, TY = 256 / TX, RA = C / TY;
	extern __shared__ __align__(16) float osm[];
	const int c = blockIdx.x, h = blockIdx.y, s0 = blockIdx.z * OC;
	const int t0 = c * C, n = T - t0 < C ? T - t0 : C;
	const int PK = I16_PK(dk);
	float *sQ = osm;	    /* [C][PK] q e^G */
	float *sS = sQ + C * PK;    /* [dk][OC] */
	float *sA = sS + dk * OC;   /* [C][O4_PA] Am */
	float *sV = sA + C * O4_PA; /* [C][OC] V' */
	const float *u = ws + ((size_t)c * Hv + h) * unit_floats(dk, dv);
	const int tid = threadIdx.x, tx = tid % TX, ty = tid / TX;
	const int c4 = tx * 4;

	/* two groups of copies: q e^G and S for x, then Am and V' for y,
	 * which land while x is summed */
	hs_rows(sQ, u + off_Q(dk, dv), dk);
	for (int e = tid; e < dk * TX; e += blockDim.x) {
		int d = e / TX, p = (e % TX) * 4;
		cp16(sS + d * OC + p, u + off_S(dk, dv) + (size_t)d * dv + s0 + p, 1);
	}
	cp_commit();
	for (int e = tid; e < n * TX; e += blockDim.x) {
		int j = e / TX, p = (e % TX) * 4;
		cp16(sV + j * OC + p, u + off_U(dk) + (size_t)j * dv + s0 + p, 1);
	}
	const float *gA = u + off_A(dk, dv);
	for (int e = tid; e < n * (C / 4); e += blockDim.x) {
		int i = e / (C / 4), p = (e % (C / 4)) * 4;
		cp16(sA + i * O4_PA + p, gA + (size_t)i * C + p, 1);
	}
	cp_commit();
	cp_wait<1>();
	__syncthreads();

	float x[RA][4] = {}, y[RA][4] = {};
#pragma unroll 2
	for (int d = 0; d < dk; d += 4) {
		float4 sv[4];
#pragma unroll
		for (int k = 0; k < 4; k++)
			sv[k] = *(const float4 *)(sS + (d + k) * OC + c4);
#pragma unroll
		for (int a = 0; a < RA; a++) {
			float4 qv = *(const float4 *)(sQ + (ty + TY * a) * PK + d);
			const float q4[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
			for (int k = 0; k < 4; k++) {
				x[a][0] += q4[k] * sv[k].x;
				x[a][1] += q4[k] * sv[k].y;
				x[a][2] += q4[k] * sv[k].z;
				x[a][3] += q4[k] * sv[k].w;
			}
		}
	}
	cp_wait<0>();
	__syncthreads(); /* Am and V' in */
	int jmax = ty + TY * (RA - 1);
	if (jmax > n - 1)
		jmax = n - 1;
	for (int j = 0; j <= jmax; j += 4) {
		float4 uv[4];
#pragma unroll
		for (int k = 0; k < 4; k++)
			uv[k] = *(const float4 *)(sV + (j + k <= jmax ? j + k : j) * OC + c4);
#pragma unroll
		for (int a = 0; a < RA; a++) {
			const int r = ty + TY * a;
			float4 av = *(const float4 *)(sA + r * O4_PA + j);
			const float a4[4] = {av.x, av.y, av.z, av.w};
#pragma unroll
			for (int k = 0; k < 4; k++)
				if (j + k <= r && j + k <= jmax) {
					y[a][0] += a4[k] * uv[k].x;
					y[a][1] += a4[k] * uv[k].y;
					y[a][2] += a4[k] * uv[k].z;
					y[a][3] += a4[k] * uv[k].w;
				}
		}
	}
#pragma unroll
	for (int a = 0; a < RA; a++) {
		const int r = ty + TY * a;
		if (r < n) {
			float *op = o + ((size_t)(t0 + r) * Hv + h) * dv + s0 + c4;
#pragma unroll
			for (int e = 0; e < 4; e++)
				op[e] = kcu_rnd(x[a][e] + y[a][e], act);
		}
	}
}

static size_t out4_smem(int dk)
{
	return ((size_t)C * I16_PK(dk) + (size_t)dk * 64 + (size_t)C * O4_PA +
		(size_t)C * 64) *
	       sizeof(float);
}



static int delta_check(float *o, float *S, const float *qq, const float *k,
		       int ldqk, const float *v, int ldv, const float *g,
		       const float *beta, int T, int Hk, int Hv, int dk, int dv,
		       int act)
{
	if (!o || !S || !qq || !k || !v || !g || !beta || T < 0 || Hk <= 0 ||
	    Hv <= 0 || Hv % Hk || dk <= 0 || dv <= 0 ||
	    (int64_t)ldqk < (int64_t)Hk * dk || (int64_t)ldv < (int64_t)Hv * dv)
		return MOOR_ERANGE;
	if (!kcu_act_ok(act))
		return MOOR_EDTYPE;
	if (!shape_ok(dk, dv))
		return MOOR_EUNSUP;
	return 0;
}

/* shared memory of the three kernels */
static size_t intra_smem(int dk, int dv)
{
	return ((size_t)2 * C * (dk + 1) + (size_t)C * dk + (size_t)C * dv +
		(size_t)C * (C + 1) + 2 * C) *
	       sizeof(float);
}
static size_t inter_smem(int dk, int sw)
{
	return ((size_t)3 * C * dk + (size_t)C * sw + (size_t)C * C +
		(size_t)dk * sw + C) *
	       sizeof(float);
}
static size_t hstate_smem(int dk, int sw)
{
	return ((size_t)2 * C * I16_PK(dk) + (size_t)C * sw + (size_t)dk * sw) *
	       sizeof(float);
}
static size_t out_smem(int dk, int oc)
{
	return ((size_t)C * I16_PK(dk) + (size_t)dk * oc +
		(size_t)C * (C + 1) + (size_t)C * oc) *
	       sizeof(float);
}

static int slice_of(int dv)
{
	return dv < SLICE ? dv : SLICE;
}

/* k_intra_rt, k_hstate_rt and k_out4 are the chunked rule's kernels
 * where they apply (dk 32, 64 or 128; dv a multiple of RT_SW); k_intra,
 * k_hstate and k_out elsewhere, or with MOOR_GDN_RT=0 (read at each call,
 * so that test_kern_backends' case_gdn_rt compares the two sets in one
 * process: the same bits). Measured on the H100 (ncu, a 1,024-token
 * chunk of the 27B's 48 heads): intra 162 against 205 us, the state pass
 * 238 against 288, the output 103 against 168; bench_gpu's 32k prefill
 * 4.48 s against 4.68. Since (the kernels' comments say how): intra 117,
 * the state pass 197, the output 100; the delta rule of a 32k prefill
 * 0.727 s against 0.821 (bench_gpu --profile 1, each op synced), its
 * prefill 4.06 to 4.08 s in three runs (4.13 before, on another H100). */
static int gdn_rt_on(int dk, int dv)
{
	return kcu_env_flag("MOOR_GDN_RT", 1) && dv % RT_SW == 0 &&
	       (dk == 32 || dk == 64 || dk == 128);
}

/* The state pass's threads a block at dk 128: 256 (k_hstate_rt<128,
 * 256>), or 128 with MOOR_HSTATE_NT=128 (read at each call, as
 * MOOR_GDN_RT, so that one process can compare the two). The bits do not
 * depend on it. ncu on the H100, a 1,024-token chunk of the 27B's heads:
 * 204 us against 238. */
static int hstate_nt(void)
{
	return kcu_env_int("MOOR_HSTATE_NT", 256) == 128 ? 128 : 256;
}

/* MOOR_GDN_PIPE=N (opt-in; read each call, so that one process can
 * compare): the chunked rule of the default kernels at dk = dv = 128 in
 * pieces of N sub-chunks, so that the pieces' intra and output kernels
 * run beside the state pass. The state pass is a chain over the
 * sub-chunks in 192 blocks (48 heads of 4 column slices), which leaves 72
 * of an H100's 132 SMs with one block and room for another kernel's;
 * intra, the state pass and the output took 117, 197 and 100 us a
 * 1,024-token chunk, one after the other (ncu on an H100). Each piece's
 * kernels do what the whole call's do for its sub-chunks (the state is
 * carried in S between the state pass's launches, in fp32 as in shared
 * memory), so the bits are the same. 0 (the default): one launch of
 * each. Measured on the H100 (2026-12-07, with k_hstate_rt): bench_kern's
 * delta_chunked 0.395 ms at 8 pieces, 0.401 at 4 and 0.492 at 2 against
 * 0.409; bench_gpu's 32k prefill 4.11 s either way: it stays opt-in. */
static int gdn_pipe(void)
{
	long v = kcu_env_int("MOOR_GDN_PIPE", 0);
	return v > 0 && v <= INT_MAX ? (int)v : 0;
}

void kcu_gdn_fini(kern_ctx *c)
{
	for (int i = 0; i < KCU_GDN_EVENTS; i++)
		if (c->gdn_ev[i])
			cudaEventDestroy(c->gdn_ev[i]);
	if (c->gdn_hi)
		cudaStreamDestroy(c->gdn_hi);
	if (c->gdn_lo)
		cudaStreamDestroy(c->gdn_lo);
}

/* Piece p of pieces of per sub-chunks of T rows: its first row (*t0)
 * and its rows. */
static int piece(int p, int per, int T, int *t0)
{
	*t0 = p * per * C;
	return T - *t0 < per * C ? T - *t0 : per * C;
}

/* kcu_delta_chunked's kernels at dk = dv = 128 (k_intra_rt<128>,
 * k_hstate_rt<128, 256> and k_out4; at MOOR_GDN_TC=tc, gdn_tc.cuh's where
 * kcu_delta_chunked takes them) in pieces of `per` sub-chunks
 * (MOOR_GDN_PIPE), on two
 * streams forked from q's and joined back to it, ordered by events:
 *   hi (the highest priority): [intra 0] state 0, [intra 1] state 1, ...
 *   lo (the lowest): intra 0, intra 1, ..., [state 0] out 0, [state 1]
 *       out 1, ...
 * The priorities let the state pass's blocks take the SMs first as they
 * come free: it is the chain that sets the time. */
static int delta_pieces(kern_queue *q, float *o, float *S, const float *qq,
			const float *k, int ldqk, const float *v, int ldv,
			const float *g, const float *beta, int T, int Hk,
			int Hv, int dk, int dv, float *ws, int act, int per,
			int tc)
{
	kern_ctx *cx = q->ctx;
	const int nch = (T + C - 1) / C;
	if ((nch + per - 1) / per > KCU_GDN_PIECES)
		per = (nch + KCU_GDN_PIECES - 1) / KCU_GDN_PIECES;
	const int np = (nch + per - 1) / per;
	if (!cx->gdn_hi) { /* made last: its being there says all are */
		int lo = 0, hi = 0;
		KCU(cx, cudaDeviceGetStreamPriorityRange(&lo, &hi));
		/* each made once: a call after a failure part way makes
		 * only what is missing (kcu_gdn_fini frees what is there) */
		if (!cx->gdn_lo)
			KCU(cx, cudaStreamCreateWithPriority(
				    &cx->gdn_lo, cudaStreamNonBlocking, lo));
		for (int i = 0; i < KCU_GDN_EVENTS; i++)
			if (!cx->gdn_ev[i])
				KCU(cx, cudaEventCreateWithFlags(
					    &cx->gdn_ev[i],
					    cudaEventDisableTiming));
		KCU(cx, cudaStreamCreateWithPriority(
			    &cx->gdn_hi, cudaStreamNonBlocking, hi));
	}
	cudaEvent_t fork = cx->gdn_ev[0], join = cx->gdn_ev[1],
		    *evi = cx->gdn_ev + 2, *evh = evi + KCU_GDN_PIECES;
	kern_queue hq = *q, lq = *q;
	hq.s = cx->gdn_hi;
	lq.s = cx->gdn_lo;
	hq.pdl = lq.pdl = KCU_PDL_OFF;
	const size_t uf = unit_floats(dk, dv);
	KCU(cx, cudaEventRecord(fork, q->s));
	KCU(cx, cudaStreamWaitEvent(lq.s, fork, 0));
	KCU(cx, cudaStreamWaitEvent(hq.s, fork, 0));
	for (int p = 0; p < np; p++) {
		int t0, tp = piece(p, per, T, &t0);
		float *wp = ws + (size_t)(t0 / C) * Hv * uf;
		const float *qp = qq + (size_t)t0 * ldqk,
			    *kp = k + (size_t)t0 * ldqk, *vp = v + (size_t)t0 * ldv,
			    *gp = g + (size_t)t0 * Hv, *bp = beta + (size_t)t0 * Hv;
		if (tc_intra(tc, dv))
			intra_tc_go(&lq, wp, qp, kp, ldqk, vp, ldv, gp, bp, tp,
				    Hk, Hv);
		else
			kcu_go(&lq, k_intra_rt<128>, dim3((tp + C - 1) / C, Hv),
			       INTRA_THREADS, intra_rt_smem(dk, dv), wp, qp, kp,
			       ldqk, vp, ldv, gp, bp, tp, Hk, Hv, dk, dv, 1);
		KCU_LAUNCHED(cx);
		KCU(cx, cudaEventRecord(evi[p], lq.s));
	}
	for (int p = 0; p < np; p++) {
		int t0, tp = piece(p, per, T, &t0);
		KCU(cx, cudaStreamWaitEvent(hq.s, evi[p], 0));
		if (tc == 1)
			chunk_tc_go(&hq, o + (size_t)t0 * Hv * dv, S,
				    (const float *)ws + (size_t)(t0 / C) * Hv * uf,
				    qq + (size_t)t0 * ldqk, k + (size_t)t0 * ldqk,
				    ldqk, tp, Hk, Hv, dv, act);
		else if (tc)
			kcu_go(&hq, k_hstate_tc, dim3(Hv, dv / TC_SW), TC_NT,
			       hstate_tc_smem(), S,
			       ws + (size_t)(t0 / C) * Hv * uf,
			       k + (size_t)t0 * ldqk, ldqk, tp, Hk, Hv, dv);
		else
			kcu_go(&hq, k_hstate_rt<128, 256>, dim3(Hv, dv / RT_SW),
			       256, hstate_rt_smem(dk), S,
			       ws + (size_t)(t0 / C) * Hv * uf, tp, Hv, dv);
		KCU_LAUNCHED(cx);
		KCU(cx, cudaEventRecord(evh[p], hq.s));
	}
	for (int p = 0; p < np; p++) {
		int t0, tp = piece(p, per, T, &t0);
		KCU(cx, cudaStreamWaitEvent(lq.s, evh[p], 0));
		const float *wp = ws + (size_t)(t0 / C) * Hv * uf;
		if (tc == 1) /* k_chunk_tc wrote it */
			continue;
		if (tc == 3)
			kcu_go(&lq, k_out_tc, dim3((tp + C - 1) / C, Hv, dv / 64),
			       256, out_tc_smem(dk), o + (size_t)t0 * Hv * dv, wp,
			       qq + (size_t)t0 * ldqk, ldqk, tp, Hk, Hv, dv, act);
		else
			kcu_go(&lq, k_out4, dim3((tp + C - 1) / C, Hv, dv / 64),
			       256, out4_smem(dk), o + (size_t)t0 * Hv * dv, wp,
			       tp, Hv, dk, dv, act);
		KCU_LAUNCHED(cx);
	}
	/* lo's last output waited for hi's last state pass */
	KCU(cx, cudaEventRecord(join, lq.s));
	KCU(cx, cudaStreamWaitEvent(q->s, join, 0));
	return 0;
}

int kcu_delta_chunked(kern_queue *q, float *o, float *S, const float *qq,
		      const float *k, int ldqk, const float *v, int ldv,
		      const float *g, const float *beta, int T, int Hk, int Hv,
		      int dk, int dv, void *ws, int act)
{
	if (!q || !ws)
		return MOOR_ERANGE;
	int rc = delta_check(o, S, qq, k, ldqk, v, ldv, g, beta, T, Hk, Hv, dk,
			     dv, act);
	if (rc || T == 0)
		return rc;
	kern_ctx *cx = q->ctx;
	int nch = (T + C - 1) / C;
	size_t sm1 = intra_smem(dk, dv);
	int sw = slice_of(dv);
	size_t sm2 = inter_smem(dk, sw);
	static int attr_set; /* once a process: sized for DMAX */
	if (!attr_set) {
		KCU(cx, cudaFuncSetAttribute(
			    k_intra, cudaFuncAttributeMaxDynamicSharedMemorySize,
			    (int)intra_smem(DMAX, DMAX)));
		KCU(cx, cudaFuncSetAttribute(
			    k_inter, cudaFuncAttributeMaxDynamicSharedMemorySize,
			    (int)inter_smem(DMAX, SLICE)));
		KCU(cx, cudaFuncSetAttribute(
			    k_hstate<SL16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
			    (int)hstate_smem(DMAX, SL16)));
		KCU(cx, cudaFuncSetAttribute(
			    k_hstate_rt<128>,
			    cudaFuncAttributeMaxDynamicSharedMemorySize,
			    (int)hstate_rt_smem(128)));
		KCU(cx, cudaFuncSetAttribute(
			    k_hstate_rt<128, 256>,
			    cudaFuncAttributeMaxDynamicSharedMemorySize,
			    (int)hstate_rt_smem(128)));
		KCU(cx, cudaFuncSetAttribute(
			    k_hstate_cl,
			    cudaFuncAttributeMaxDynamicSharedMemorySize,
			    (int)hstate_cl_smem()));
		if (tc_fits(cx)) { /* up to 213 KB */
			KCU(cx, cudaFuncSetAttribute(
				    k_intra_tc,
				    cudaFuncAttributeMaxDynamicSharedMemorySize,
				    (int)intra_tc_smem()));
			KCU(cx, cudaFuncSetAttribute(
				    k_intra_tc2,
				    cudaFuncAttributeMaxDynamicSharedMemorySize,
				    (int)intra_tc2_smem()));
			KCU(cx, cudaFuncSetAttribute(
				    k_out_tc,
				    cudaFuncAttributeMaxDynamicSharedMemorySize,
				    (int)out_tc_smem(DMAX)));
			KCU(cx, cudaFuncSetAttribute(
				    k_hstate_tc,
				    cudaFuncAttributeMaxDynamicSharedMemorySize,
				    (int)hstate_tc_smem()));
			KCU(cx, cudaFuncSetAttribute(
				    k_chunk_tc,
				    cudaFuncAttributeMaxDynamicSharedMemorySize,
				    (int)chunk_tc_smem()));
			KCU(cx, cudaFuncSetAttribute(
				    k_chunk_tc2,
				    cudaFuncAttributeMaxDynamicSharedMemorySize,
				    (int)chunk_tc_smem()));
		}
		KCU(cx, cudaFuncSetAttribute(
			    k_hstate_rt<64>,
			    cudaFuncAttributeMaxDynamicSharedMemorySize,
			    (int)hstate_rt_smem(64)));
		KCU(cx, cudaFuncSetAttribute(
			    k_intra_rt<0>,
			    cudaFuncAttributeMaxDynamicSharedMemorySize,
			    (int)intra_rt_smem(DMAX, DMAX)));
		KCU(cx, cudaFuncSetAttribute(
			    k_intra_rt<128>,
			    cudaFuncAttributeMaxDynamicSharedMemorySize,
			    (int)intra_rt_smem(128, 128)));
		KCU(cx, cudaFuncSetAttribute(
			    k_out4, cudaFuncAttributeMaxDynamicSharedMemorySize,
			    (int)out4_smem(DMAX)));
		KCU(cx, cudaFuncSetAttribute(
			    k_hstate_rt<32>,
			    cudaFuncAttributeMaxDynamicSharedMemorySize,
			    (int)hstate_rt_smem(32)));
		KCU(cx, cudaFuncSetAttribute(
			    k_out<64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
			    (int)out_smem(DMAX, 64)));
		KCU(cx, cudaFuncSetAttribute(
			    k_out<16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
			    (int)out_smem(DMAX, 16)));
		attr_set = 1;
	}
	/* the tensor-core kernels (MOOR_GDN_TC) where the register-tile ones
	 * run at dk 128, q and k in 16-byte rows; at 1 and 3 intra leaves
	 * q e^G and k e^(G_last - G) out of the workspace, which the
	 * tensor-core kernels after it make from q, k and G where they load
	 * them */
	const int tc =
	    tc_fits(cx) && gdn_rt_on(dk, dv) && dk == 128 && dv % 64 == 0 &&
		    ldqk % 4 == 0 && ldv % 4 == 0 &&
		    !(((uintptr_t)qq | (uintptr_t)k | (uintptr_t)v) & 15)
		? gdn_tc_on()
		: 0;
	const int per = gdn_pipe();
	if (per && per < nch && !q->capturing && gdn_rt_on(dk, dv) &&
	    dk == 128 && dv == 128 && (tc || hstate_nt() == 256))
		return delta_pieces(q, o, S, qq, k, ldqk, v, ldv, g, beta, T,
				    Hk, Hv, dk, dv, (float *)ws, act, per, tc);
	if (tc_intra(tc, dv))
		intra_tc_go(q, (float *)ws, qq, k, ldqk, v, ldv, g, beta, T,
			    Hk, Hv);
	else if (gdn_rt_on(dk, dv) && dk == 128 && dv == 128)
		kcu_go(q, k_intra_rt<128>, dim3(nch, Hv), INTRA_THREADS,
		       intra_rt_smem(dk, dv), (float *)ws, qq, k, ldqk, v, ldv,
		       g, beta, T, Hk, Hv, dk, dv, !tc || tc == 2);
	else if (gdn_rt_on(dk, dv))
		kcu_go(q, k_intra_rt<0>, dim3(nch, Hv), INTRA_THREADS,
		       intra_rt_smem(dk, dv), (float *)ws, qq, k, ldqk, v, ldv,
		       g, beta, T, Hk, Hv, dk, dv, !tc || tc == 2);
	else
		kcu_go(q, k_intra, dim3(nch, Hv), INTRA_THREADS, sm1,
		       (float *)ws, qq, k, ldqk, v, ldv, g, beta, T, Hk, Hv, dk,
		       dv);
	KCU_LAUNCHED(cx);
	if (dv % SL16 == 0 && dk % 4 == 0) {
		dim3 rg(Hv, dv / RT_SW);
		if (!gdn_rt_on(dk, dv))
			kcu_go(q, k_hstate<SL16>, dim3(Hv, dv / SL16), 16 * SL16,
			       hstate_smem(dk, SL16), S, (float *)ws, T, Hv, dk,
			       dv);
		else if (tc == 1) { /* the output too */
			chunk_tc_go(q, o, S, (const float *)ws, qq, k, ldqk, T,
				    Hk, Hv, dv, act);
			KCU_LAUNCHED(cx);
			return 0;
		} else if (tc)
			kcu_go(q, k_hstate_tc, dim3(Hv, dv / TC_SW), TC_NT,
			       hstate_tc_smem(), S, (float *)ws, k, ldqk, T, Hk,
			       Hv, dv);
		else if (dk == 128 && gdn_cl_on(cx))
			kcu_go(q, k_hstate_cl, dim3(Hv, dv / RT_SW, 2), CL_NT,
			       hstate_cl_smem(), S, (float *)ws, T, Hv, dv);
		else if (dk == 128 && hstate_nt() == 256)
			kcu_go(q, k_hstate_rt<128, 256>, rg, 256,
			       hstate_rt_smem(dk), S, (float *)ws, T, Hv, dv);
		else if (dk == 128)
			kcu_go(q, k_hstate_rt<128>, rg, 128, hstate_rt_smem(dk), S,
			       (float *)ws, T, Hv, dv);
		else if (dk == 64)
			kcu_go(q, k_hstate_rt<64>, rg, 128, hstate_rt_smem(dk), S,
			       (float *)ws, T, Hv, dv);
		else
			kcu_go(q, k_hstate_rt<32>, rg, 128, hstate_rt_smem(dk), S,
			       (float *)ws, T, Hv, dv);
		KCU_LAUNCHED(cx);
		if (tc == 3)
			kcu_go(q, k_out_tc, dim3(nch, Hv, dv / 64), 256,
			       out_tc_smem(dk), o, (const float *)ws, qq, ldqk,
			       T, Hk, Hv, dv, act);
		else if (dv % 64 == 0 && gdn_rt_on(dk, dv))
			kcu_go(q, k_out4, dim3(nch, Hv, dv / 64), 256,
			       out4_smem(dk), o, (const float *)ws, T, Hv, dk, dv,
			       act);
		else if (dv % 64 == 0)
			kcu_go(q, k_out<64>, dim3(nch, Hv, dv / 64), 256,
			       out_smem(dk, 64), o, (const float *)ws, T, Hv,
			       dk, dv, act);
		else
			kcu_go(q, k_out<16>, dim3(nch, Hv, dv / 16), 256,
			       out_smem(dk, 16), o, (const float *)ws, T, Hv,
			       dk, dv, act);
	} else {
		kcu_go(q, k_inter, dim3(Hv, dv / sw), 512, sm2, o, S,
		       (const float *)ws, qq, k, ldqk, T, Hk, Hv, dk, dv, sw,
		       act);
	}
	KCU_LAUNCHED(cx);
	return 0;
}

/* ---- recurrent ---- */

#define RG 8 /* row groups */
#define RPT (DMAX / RG)

static __global__ void k_recurrent(float *o, float *S, const float *q,
				   const float *k, int ldqk, const float *v,
				   int ldv, const float *g, const float *beta,
				   int T, int Hk, int Hv, int dk, int dv, int sw,
				   int act)
{
	kcu_pdl_enter();
	__shared__ float red[RG][SLICE];
	__shared__ float sk[DMAX], sq[DMAX];
	const int h = blockIdx.x, s0 = blockIdx.y * sw;
	const int kh = h / (Hv / Hk);
	const int lane = threadIdx.x & 31, grp = threadIdx.x >> 5;
	const int col = s0 + lane;
	const int on = lane < sw;
	float *Sh = S + (size_t)h * dk * dv;
	float r[RPT]; /* the state's loads in flight at once (kcu_ldz) */
#pragma unroll
	for (int j = 0; j < RPT; j++) {
		int i = grp + RG * j;
		r[j] = kcu_ldz(Sh, (long long)i * dv + col, on && i < dk);
	}
	for (int t = 0; t < T; t++) {
		const float *kt = k + (size_t)t * ldqk + (size_t)kh * dk;
		const float *qt = q + (size_t)t * ldqk + (size_t)kh * dk;
		/* this token's loads first, all in flight together */
		const float gt = g[(size_t)t * Hv + h];
		const float b = beta[(size_t)t * Hv + h];
		const float vv =
		    kcu_ldz(v, (long long)t * ldv + (long long)h * dv + col, on);
		__syncthreads();
		for (int i = threadIdx.x; i < dk; i += blockDim.x) {
			sk[i] = kt[i];
			sq[i] = qt[i];
		}
		__syncthreads();
		float eg = expf(gt);
		float m = 0.0f;
#pragma unroll
		for (int j = 0; j < RPT; j++) {
			int i = grp + RG * j;
			r[j] *= eg;
			if (i < dk)
				m += r[j] * sk[i];
		}
		red[grp][lane] = m;
		__syncthreads();
		float mt = 0.0f;
		for (int gi = 0; gi < RG; gi++)
			mt += red[gi][lane];
		float delta = (vv - mt) * b;
		float ov = 0.0f;
#pragma unroll
		for (int j = 0; j < RPT; j++) {
			int i = grp + RG * j;
			if (i < dk) {
				r[j] += sk[i] * delta;
				ov += r[j] * sq[i];
			}
		}
		__syncthreads();
		red[grp][lane] = ov;
		__syncthreads();
		if (grp == 0 && on) {
			float ot = 0.0f;
			for (int gi = 0; gi < RG; gi++)
				ot += red[gi][lane];
			o[((size_t)t * Hv + h) * dv + col] = kcu_rnd(ot, act);
		}
	}
#pragma unroll
	for (int j = 0; j < RPT; j++) {
		int i = grp + RG * j;
		if (on && i < dk)
			Sh[(size_t)i * dv + col] = r[j];
	}
}

int kcu_delta_recurrent(kern_queue *q, float *o, float *S, const float *qq,
			const float *k, int ldqk, const float *v, int ldv,
			const float *g, const float *beta, int T, int Hk,
			int Hv, int dk, int dv, int act)
{
	if (!q)
		return MOOR_ERANGE;
	int rc = delta_check(o, S, qq, k, ldqk, v, ldv, g, beta, T, Hk, Hv, dk,
			     dv, act);
	if (rc || T == 0)
		return rc;
	int sw = slice_of(dv);
	kcu_go(q, k_recurrent, dim3(Hv, dv / sw), RG * 32, 0, o, S, qq, k, ldqk,
	       v, ldv, g, beta, T, Hk, Hv, dk, dv, sw, act);
	KCU_LAUNCHED(q->ctx);
	return 0;
}
