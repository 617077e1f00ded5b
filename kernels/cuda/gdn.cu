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
 *   inter  one block per (value head, slice of 32 value columns; columns
 *          are independent), the sub-chunks in order, the state slice in
 *          shared memory: V' = U - W S, O = (q e^G) S + Am V' (rounded when
 *          act is BF16), S <- e^(G_last) S + (k e^(G_last - G))^T V'.
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

static __global__ void k_intra(float *ws, const float *q, const float *k,
			       int ldqk, const float *v, int ldv, const float *g,
			       const float *beta, int T, int Hk, int Hv, int dk,
			       int dv)
{
	extern __shared__ float sm[];
	const int c = blockIdx.x, h = blockIdx.y, t0 = c * C;
	const int n = T - t0 < C ? T - t0 : C;
	const int kh = h / (Hv / Hk);
	float *sk = sm;		     /* [C][dk] */
	float *sq = sk + C * dk;     /* [C][dk] */
	float *sA = sq + C * dk;     /* [C][C+1] A, strictly lower */
	float *sD = sA + C * (C + 1); /* [C][C+1] e^(G_i - G_j) */
	float *sW = sD + C * (C + 1); /* [C][dk] */
	float *sU = sW + C * dk;      /* [C][dv] */
	float *sG = sU + C * dv;      /* [C] */
	float *sb = sG + C;	      /* [C] beta */
	const int tid = threadIdx.x, nt = blockDim.x;

	for (int e = tid; e < n * dk; e += nt) {
		int i = e / dk, d = e % dk;
		size_t t = (size_t)(t0 + i);
		sk[e] = k[t * ldqk + (size_t)kh * dk + d];
		sq[e] = q[t * ldqk + (size_t)kh * dk + d];
	}
	if (tid == 0) {
		double cum = 0.0;
		for (int i = 0; i < n; i++) {
			size_t t = (size_t)(t0 + i);
			cum += g[t * Hv + h];
			sG[i] = (float)cum;
			sb[i] = beta[t * Hv + h];
		}
	}
	__syncthreads();
	float *Am = ws + ((size_t)c * Hv + h) * unit_floats(dk, dv) +
		    (size_t)C * dk + (size_t)C * dv;
	for (int e = tid; e < C * C; e += nt) {
		int i = e / C, j = e % C;
		float dm = 0.0f, a = 0.0f, am = 0.0f;
		if (i < n && j <= i) {
			dm = expf(sG[i] - sG[j]);
			float sa = 0.0f, sqk = 0.0f;
			for (int d = 0; d < dk; d++) {
				float kj = sk[j * dk + d];
				sa += (sk[i * dk + d] * sb[i]) * kj;
				sqk += sq[i * dk + d] * kj;
			}
			if (j < i)
				a = sa * dm;
			am = sqk * dm;
		}
		sD[i * (C + 1) + j] = dm;
		sA[i * (C + 1) + j] = a;
		Am[e] = am;
	}
	for (int e = tid; e < n * dk; e += nt) {
		int i = e / dk;
		sW[e] = (sk[e] * sb[i]) * expf(sG[i]);
	}
	for (int e = tid; e < n * dv; e += nt) {
		int i = e / dv, d = e % dv;
		sU[e] = v[(size_t)(t0 + i) * ldv + (size_t)h * dv + d] * sb[i];
	}
	__syncthreads();
	/* forward substitution, a thread per column of [W | U] */
	for (int col = tid; col < dk + dv; col += nt) {
		float *X = col < dk ? sW + col : sU + (col - dk);
		int w = col < dk ? dk : dv;
		for (int i = 0; i < n; i++) {
			float x = X[i * w];
			for (int j = 0; j < i; j++)
				x -= sA[i * (C + 1) + j] * X[j * w];
			X[i * w] = x;
		}
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
	size_t sm1 = ((size_t)3 * C * dk + (size_t)C * dv +
		      2 * (size_t)C * (C + 1) + 2 * C) *
		     sizeof(float);
	int sw = slice_of(dv);
	size_t sm2 = ((size_t)3 * C * dk + (size_t)C * sw + (size_t)C * C +
		      (size_t)dk * sw + C) *
		     sizeof(float);
	KCU(cx, cudaFuncSetAttribute(k_intra,
				     cudaFuncAttributeMaxDynamicSharedMemorySize,
				     (int)sm1));
	KCU(cx, cudaFuncSetAttribute(k_inter,
				     cudaFuncAttributeMaxDynamicSharedMemorySize,
				     (int)sm2));
	k_intra<<<dim3(nch, Hv), 256, sm1, q->s>>>((float *)ws, qq, k, ldqk, v,
						   ldv, g, beta, T, Hk, Hv, dk,
						   dv);
	KCU_LAUNCHED(cx);
	k_inter<<<dim3(Hv, dv / sw), 256, sm2, q->s>>>(
	    o, S, (const float *)ws, qq, k, ldqk, T, Hk, Hv, dk, dv, sw, act);
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
