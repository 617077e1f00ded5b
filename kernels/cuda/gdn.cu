/* gdn.cu: the delta rule on the GPU (ops.h, SPEC §5.5-§5.6).
 *
 * Chunked (prefill), in two kernels over the call's 64-token sub-chunks
 * (aligned to token 0 of the call, the last one short):
 *
 *   intra  one block per (sub-chunk, value head), all in parallel: what
 *          does not depend on the state entering the sub-chunk. G (the
 *          cumulative sum of g, in fp64 rounded per row, as the CPU does),
 *          A_ij = (beta_i k_i . k_j) e^(G_i - G_j) (j < i), the forward
 *          substitutions U = (I + A)^-1 beta V and W = (I + A)^-1 beta e^G K
 *          (a thread per column, rows in order), and Am_ij = (q_i . k_j)
 *          e^(G_i - G_j) (j <= i), written to the workspace;
 *   inter  one block per (value head, slice of value columns; columns
 *          are independent), the sub-chunks in order, the state slice in
 *          shared memory: V' = U - W S, O = (q e^G) S + Am V' (rounded when
 *          act is BF16), S <- e^(G_last) S + (k e^(G_last - G))^T V'.
 *          k_inter16 (16-column slices, three blocks an SM: 0.56 ms a
 *          1,024-token chunk of the 27B's 48 heads on the H200, where
 *          32-column slices at one block an SM took 0.98) holds 1 x 4 and
 *          2 x 4 tiles of those products in registers; k_inter (other
 *          widths) a product each. Both sum in the same order.
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

#include <stdio.h>
#include <stdlib.h>

#define C KERN_GDN_CHUNK
#define DMAX 128
#define SLICE 32

/* Floats of one (sub-chunk, head) unit of the workspace. */
static __host__ __device__ size_t unit_floats(int dk, int dv)
{
	return (size_t)C * dk + (size_t)C * dv + (size_t)C * C + C;
}

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

static __global__ void __launch_bounds__(INTRA_THREADS)
    k_intra(float *ws, const float *q, const float *k, int ldqk, const float *v,
	    int ldv, const float *g, const float *beta, int T, int Hk, int Hv,
	    int dk, int dv)
{
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
	for (int i = tid; i < C; i += nt) {
		size_t t = (size_t)(t0 + i);
		sG[i] = i < n ? g[t * Hv + h] : 0.0f;
		sb[i] = i < n ? beta[t * Hv + h] : 0.0f;
	}
	__syncthreads();
	if (tid == 0) {
		/* the cumulative sum in fp64, rounded per row (as the CPU) */
		double cum = 0.0;
		for (int i = 0; i < n; i++) {
			cum += sG[i];
			sG[i] = (float)cum;
		}
	}
	__syncthreads();
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
				sA[i * (C + 1) + j] = x;
				Am[i * C + j] = am;
			}
	}
	for (int e = tid; e < n * dk; e += nt) {
		int i = e / dk, d = e % dk;
		sW[e] = (sk[i * PK + d] * sb[i]) * expf(sG[i]);
	}
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
	__syncthreads();
	/* forward substitution, a thread per column of [W | U], the column
	 * in registers (rows past n are junk no row below n reads) */
	for (int col = tid; col < dk + dv; col += nt) {
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
	__syncthreads();
	float *u = ws + ((size_t)c * Hv + h) * unit_floats(dk, dv);
	float *gW = u, *gU = u + (size_t)C * dk, *gG = Am + C * C;
	for (int e = tid; e < C * dk; e += nt)
		gW[e] = e < n * dk ? sW[e] : 0.0f;
	for (int e = tid; e < C * dv; e += nt)
		gU[e] = e < n * dv ? sU[e] : 0.0f;
	for (int e = tid; e < C; e += nt)
		gG[e] = e < n ? sG[e] : 0.0f;
}

/* ---- inter ---- */

static __global__ void k_inter(float *o, float *S, const float *ws,
			       const float *q, const float *k, int ldqk, int T,
			       int Hk, int Hv, int dk, int dv, int sw, int act)
{
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

#define I16_PK(dk) ((dk) + 4) /* rows of W, q, k in k_inter16 */

/* k_inter for 16-column slices (grid Hv x dv / 16, three blocks an SM,
 * eight slices a head): 256 threads, a thread (tx = tid % 4, ty = tid /
 * 4) holds columns 4 tx .. 4 tx + 3 of row ty (for V' and O) or of state
 * rows ty + 64 m (for the state's update). One buffer holds W, then
 * q e^G, then k e^(G_last - G), each loaded when its product starts (the
 * other blocks of the SM compute meanwhile). Every output's sums run in
 * the order k_inter's do: the same bits. Needs dk <= 128. */
#define SL16 16

static __device__ inline void i16_load(float *sB, const float *src, int ld,
				       int kh, int t0, int n, int dk,
				       const float *sG, int mode, float gl,
				       int vec)
{
	/* mode 0: W from the workspace (rows dk apart); 1: q e^G; 2: k
	 * e^(G_last - G) (rows ld apart, head kh) */
	const int PK = I16_PK(dk);
	if (vec) {
		const int q4 = dk / 4;
		for (int e = threadIdx.x; e < n * q4; e += blockDim.x) {
			int i = e / q4, d = (e - i * q4) * 4;
			float4 v;
			float f = 1.0f;
			if (mode == 0) {
				v = *(const float4 *)(src + (size_t)i * dk + d);
			} else {
				v = *(const float4 *)(src + (size_t)(t0 + i) * ld +
						      (size_t)kh * dk + d);
				f = mode == 1 ? expf(sG[i]) : expf(gl - sG[i]);
			}
			if (mode)
				v = make_float4(v.x * f, v.y * f, v.z * f, v.w * f);
			*(float4 *)(sB + i * PK + d) = v;
		}
		return;
	}
	for (int e = threadIdx.x; e < n * dk; e += blockDim.x) {
		int i = e / dk, d = e % dk;
		if (mode == 0)
			sB[i * PK + d] = src[e];
		else
			sB[i * PK + d] =
			    src[(size_t)(t0 + i) * ld + (size_t)kh * dk + d] *
			    (mode == 1 ? expf(sG[i]) : expf(gl - sG[i]));
	}
}

static __global__ void __launch_bounds__(256)
    k_inter16(float *o, float *S, const float *ws, const float *q,
	      const float *k, int ldqk, int T, int Hk, int Hv, int dk, int dv,
	      int act)
{
	extern __shared__ float sm[];
	const int h = blockIdx.x, s0 = blockIdx.y * SL16;
	const int kh = h / (Hv / Hk);
	const int PK = I16_PK(dk), PA = C + 1;
	float *sB = sm;		    /* [C][PK] W, q e^G or k e^(G_last - G) */
	float *sU = sB + C * PK;    /* [C][SL16] U, then V' */
	float *sA = sU + C * SL16;  /* [C][PA] */
	float *sS = sA + C * PA;    /* [dk][SL16] */
	float *sG = sS + dk * SL16; /* [C] */
	const int tid = threadIdx.x, tx = tid & 3, ty = tid >> 2;
	const int c4 = tx * 4;
	float *Sh = S + (size_t)h * dk * dv;
	const int vec = dk % 4 == 0 && dv % 4 == 0 && ldqk % 4 == 0 &&
			(((uintptr_t)q | (uintptr_t)k | (uintptr_t)ws) & 15) == 0;

	for (int e = tid; e < dk * SL16; e += blockDim.x)
		sS[e] = Sh[(size_t)(e / SL16) * dv + s0 + e % SL16];
	const int nch = (T + C - 1) / C;
	for (int c = 0; c < nch; c++) {
		const int t0 = c * C, n = T - t0 < C ? T - t0 : C;
		const float *u = ws + ((size_t)c * Hv + h) * unit_floats(dk, dv);
		const float *gW = u, *gU = u + (size_t)C * dk;
		const float *gA = gU + (size_t)C * dv, *gG = gA + C * C;
		__syncthreads(); /* the last sub-chunk's reads are done */
		for (int e = tid; e < C; e += blockDim.x)
			sG[e] = gG[e];
		i16_load(sB, gW, 0, kh, t0, n, dk, sG, 0, 0.0f, vec);
		for (int e = tid; e < C * SL16; e += blockDim.x)
			sU[e] = e < n * SL16
				    ? gU[(size_t)(e / SL16) * dv + s0 + e % SL16]
				    : 0.0f;
		for (int e = tid; e < n * C; e += blockDim.x)
			sA[(e / C) * PA + e % C] = gA[e];
		__syncthreads();
		const float gl = sG[n - 1];
		/* V' = U - W S */
		{
			float acc[4] = {};
			const float *w0 = sB + ty * PK;
			for (int d = 0; d < dk; d++) {
				float4 sv = *(const float4 *)(sS + d * SL16 + c4);
				float a0 = w0[d];
				acc[0] += a0 * sv.x;
				acc[1] += a0 * sv.y;
				acc[2] += a0 * sv.z;
				acc[3] += a0 * sv.w;
			}
			if (ty < n)
#pragma unroll
				for (int e = 0; e < 4; e++)
					sU[ty * SL16 + c4 + e] -= acc[e];
		}
		__syncthreads();
		i16_load(sB, q, ldqk, kh, t0, n, dk, sG, 1, gl, vec);
		__syncthreads();
		/* O = (q e^G) S + Am V' */
		if (ty < n) {
			float x[4] = {}, y[4] = {};
			const float *q0 = sB + ty * PK;
			for (int d = 0; d < dk; d++) {
				float4 sv = *(const float4 *)(sS + d * SL16 + c4);
				float a0 = q0[d];
				x[0] += a0 * sv.x;
				x[1] += a0 * sv.y;
				x[2] += a0 * sv.z;
				x[3] += a0 * sv.w;
			}
			const float *ar = sA + ty * PA;
			for (int j = 0; j <= ty; j++) {
				float4 uv = *(const float4 *)(sU + j * SL16 + c4);
				float a = ar[j];
				y[0] += a * uv.x;
				y[1] += a * uv.y;
				y[2] += a * uv.z;
				y[3] += a * uv.w;
			}
			float *op = o + ((size_t)(t0 + ty) * Hv + h) * dv + s0 + c4;
#pragma unroll
			for (int e = 0; e < 4; e++)
				op[e] = kcu_rnd(x[e] + y[e], act);
		}
		__syncthreads();
		i16_load(sB, k, ldqk, kh, t0, n, dk, sG, 2, gl, vec);
		__syncthreads();
		/* S <- e^(G_last) S + (k e^(G_last - G))^T V' */
		{
			const float egl = expf(gl);
			float acc[2][4] = {};
			for (int j = 0; j < n; j++) {
				float4 uv = *(const float4 *)(sU + j * SL16 + c4);
				const float *kr = sB + j * PK + ty;
#pragma unroll
				for (int m = 0; m < 2; m++) {
					float kd = ty + 64 * m < dk ? kr[64 * m] : 0.0f;
					acc[m][0] += kd * uv.x;
					acc[m][1] += kd * uv.y;
					acc[m][2] += kd * uv.z;
					acc[m][3] += kd * uv.w;
				}
			}
#pragma unroll
			for (int m = 0; m < 2; m++) {
				const int d = ty + 64 * m;
				if (d < dk)
#pragma unroll
					for (int e = 0; e < 4; e++) {
						float *sp = sS + d * SL16 + c4 + e;
						*sp = *sp * egl + acc[m][e];
					}
			}
		}
	}
	__syncthreads();
	for (int e = tid; e < dk * SL16; e += blockDim.x)
		Sh[(size_t)(e / SL16) * dv + s0 + e % SL16] = sS[e];
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
static size_t inter16_smem(int dk)
{
	return ((size_t)C * I16_PK(dk) + (size_t)C * SL16 + (size_t)C * (C + 1) +
		(size_t)dk * SL16 + C) *
	       sizeof(float);
}

static int slice_of(int dv)
{
	return dv < SLICE ? dv : SLICE;
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
			    k_inter16, cudaFuncAttributeMaxDynamicSharedMemorySize,
			    (int)inter16_smem(DMAX)));
		attr_set = 1;
	}
	k_intra<<<dim3(nch, Hv), INTRA_THREADS, sm1, q->s>>>((float *)ws, qq, k, ldqk, v,
						   ldv, g, beta, T, Hk, Hv, dk,
						   dv);
	KCU_LAUNCHED(cx);
	if (dv % SL16 == 0) {
		k_inter16<<<dim3(Hv, dv / SL16), 256, inter16_smem(dk), q->s>>>(
		    o, S, (const float *)ws, qq, k, ldqk, T, Hk, Hv, dk, dv, act);
	} else {
		k_inter<<<dim3(Hv, dv / sw), 512, sm2, q->s>>>(
		    o, S, (const float *)ws, qq, k, ldqk, T, Hk, Hv, dk, dv, sw,
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
	__shared__ float red[RG][SLICE];
	__shared__ float sk[DMAX], sq[DMAX];
	const int h = blockIdx.x, s0 = blockIdx.y * sw;
	const int kh = h / (Hv / Hk);
	const int lane = threadIdx.x & 31, grp = threadIdx.x >> 5;
	const int col = s0 + lane;
	const int on = lane < sw;
	float *Sh = S + (size_t)h * dk * dv;
	float r[RPT];
#pragma unroll
	for (int j = 0; j < RPT; j++) {
		int i = grp + RG * j;
		r[j] = on && i < dk ? Sh[(size_t)i * dv + col] : 0.0f;
	}
	for (int t = 0; t < T; t++) {
		const float *kt = k + (size_t)t * ldqk + (size_t)kh * dk;
		const float *qt = q + (size_t)t * ldqk + (size_t)kh * dk;
		__syncthreads();
		for (int i = threadIdx.x; i < dk; i += blockDim.x) {
			sk[i] = kt[i];
			sq[i] = qt[i];
		}
		__syncthreads();
		float eg = expf(g[(size_t)t * Hv + h]);
		float b = beta[(size_t)t * Hv + h];
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
		float vv = on ? v[(size_t)t * ldv + (size_t)h * dv + col] : 0.0f;
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
	k_recurrent<<<dim3(Hv, dv / sw), RG * 32, 0, q->s>>>(
	    o, S, qq, k, ldqk, v, ldv, g, beta, T, Hk, Hv, dk, dv, sw, act);
	KCU_LAUNCHED(q->ctx);
	return 0;
}
