/* gdn_ws.cuh: the chunked delta rule's workspace layout and the shared
 * pieces of gdn.cu's kernels, in a header of their own so that the host
 * emulation of the tensor-core kernels (tests/kern/test_gdn_tc_emu.cc)
 * compiles the same text. The includer provides cuda.cuh's cp16,
 * threadIdx, blockDim and float4 (the emulation: host stand-ins). */
#ifndef MOOR_GDN_WS_CUH
#define MOOR_GDN_WS_CUH

#define C KERN_GDN_CHUNK /* the sub-chunk (SPEC 5.6), in tokens */

/* One (sub-chunk, head) unit of the workspace, in floats: W [C][dk],
 * U [C][dv] (V' after k_hstate), Am [C][C], G [C], q e^G [C][dk],
 * k e^(G_last - G) [C][dk] (rows past the sub-chunk zero; left unwritten
 * at MOOR_GDN_TC=1, whose kernels make them from q, k and G), and the
 * state entering the sub-chunk [dk][dv] (k_hstate writes it, k_out reads
 * it).
 * Every part starts on a multiple of 4 floats when dk does. */
static __host__ __device__ size_t unit_floats(int dk, int dv)
{
	return (size_t)C * dk + (size_t)C * dv + (size_t)C * C + C +
	       2 * (size_t)C * dk + (size_t)dk * dv;
}
static __host__ __device__ size_t off_U(int dk)
{
	return (size_t)C * dk;
}
static __host__ __device__ size_t off_A(int dk, int dv)
{
	return (size_t)C * dk + (size_t)C * dv;
}
static __host__ __device__ size_t off_G(int dk, int dv)
{
	return off_A(dk, dv) + (size_t)C * C;
}
static __host__ __device__ size_t off_Q(int dk, int dv)
{
	return off_G(dk, dv) + C;
}
static __host__ __device__ size_t off_K(int dk, int dv)
{
	return off_Q(dk, dv) + (size_t)C * dk;
}
static __host__ __device__ size_t off_S(int dk, int dv)
{
	return off_K(dk, dv) + (size_t)C * dk;
}

/* component e (a constant once unrolled) of v */
static __device__ inline float f4at(const float4 &v, int e)
{
	return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;
}

#define I16_PK(dk) ((dk) + 4) /* rows of W, q, k in shared memory */

/* rows [0, C) of a [C][dk] part of the unit into shared rows PK apart
 * (I16_PK(dk) unless given) */
static __device__ inline void hs_rows(float *dst, const float *src, int dk,
				      int PK = 0)
{
	const int q4 = dk / 4;
	if (!PK)
		PK = I16_PK(dk);
	for (int e = threadIdx.x; e < C * q4; e += blockDim.x) {
		int r = e / q4, d = (e - r * q4) * 4;
		cp16(dst + r * PK + d, src + (size_t)r * dk + d, 1);
	}
}

/* intra's gates of a sub-chunk into shared memory: sG = G (the cumulative
 * sum of g, in fp64 rounded per row, as the CPU does) and sb = beta, zeros
 * past n; every thread of the block calls it (two barriers) */
static __device__ inline void intra_gates(float *sG, float *sb,
					  const float *g, const float *beta,
					  int t0, int n, int h, int Hv)
{
	for (int i = threadIdx.x; i < C; i += blockDim.x) {
		size_t t = (size_t)(t0 + i);
		sG[i] = i < n ? g[t * Hv + h] : 0.0f;
		sb[i] = i < n ? beta[t * Hv + h] : 0.0f;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		double cum = 0.0;
		for (int i = 0; i < n; i++) {
			cum += sG[i];
			sG[i] = (float)cum;
		}
	}
	__syncthreads();
}

/* The right-looking forward substitution x <- (I + A)^-1 x of one column
 * in registers, A strictly lower triangular and kept by columns in shared
 * memory (column j's C rows at sAt + j pa, pa a multiple of 4): once row
 * j of x is final it is taken off every row below it, x_i -= A_ij x_j,
 * the column of A read in float4s (gdn.cu's intra_subst_rl says why) */
static __device__ inline void subst_col(float (&xr)[C], const float *sAt,
					int pa)
{
#pragma unroll
	for (int j = 0; j < C - 1; j++) {
		const float xj = xr[j];
#pragma unroll
		for (int i4 = (j + 1) & ~3; i4 < C; i4 += 4) {
			const float4 a = *(const float4 *)(sAt + j * pa + i4);
#pragma unroll
			for (int e = 0; e < 4; e++)
				if (i4 + e > j)
					xr[i4 + e] -= f4at(a, e) * xj;
		}
	}
}

#endif
