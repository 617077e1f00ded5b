/* gemm.cu: matmul and matmul_swiglu through cuBLASLt (ops.h).
 *
 * y[T, N] = x[T, K] W[N, K]^T, row-major, is the column-major product
 * y^T = W^T' x^T: A = W (column-major [K, N], transposed), B = x
 * (column-major [K, T]), D = y^T ([N, T], leading dimension ldy).
 *
 * 16-bit weights: x is staged in W's dtype first (a conversion kernel into
 * the context's stage buffer; exact when act is BF16, ops.h), then a
 * bf16/f16 x bf16/f16 product accumulates in fp32 into fp32 y, which is
 * rounded to bf16 in place when act is BF16. fp32 weights: a plain fp32
 * product (CUBLAS_COMPUTE_32F, no TF32: the fp32 golden bar is 1e-4).
 *
 * Determinism: one algorithm per (N, K, row bucket, layout, dtype), taken
 * from cuBLASLt's heuristic once (its first candidate, or the one
 * gemm_tuned names for this device and library) and kept in the context;
 * split-K algorithms are never taken (their reduction order is not fixed),
 * so the same call gives the same bits every time, in every process on the
 * same device and library. Row buckets are powers of two: T in (b/2, b] runs
 * the algorithm picked for b rows, up to the prefill chunk's bucket
 * (bucket_cap).
 *
 * One row (decode) of bf16 weights whose K is a multiple of 8 runs our own
 * GEMV instead (k_gemv): cuBLASLt reached 1.9 to 3.5 TB/s on the 27B's
 * one-row products on the H200, and the stage, product and rounding were
 * three launches. x is rounded to bf16 as the stage kernel does, on the
 * way in (a SwiGLU's input too, opt-in: gemv_swiglu_on), two warps
 * split a row's 16-byte pieces, a lane sums its pieces in order, the
 * lanes' sums meet in a fixed butterfly and the two warps' in order: one
 * order per K (k_gemv says which pieces are whose). */
#include "cuda.cuh"

#include <string.h>

#define LT_WS_BYTES (32u << 20)

int kcu_gemm_init(kern_ctx *c)
{
	cublasStatus_t st = cublasLtCreate(&c->lt);
	if (st != CUBLAS_STATUS_SUCCESS) {
		moor_err("cublasLtCreate: status %d", (int)st);
		return MOOR_EBACKEND;
	}
	KCU(c, cudaMalloc(&c->lt_ws, LT_WS_BYTES));
	c->lt_ws_bytes = LT_WS_BYTES;
	return 0;
}

void kcu_gemm_fini(kern_ctx *c)
{
	if (c->lt)
		cublasLtDestroy(c->lt);
	cudaFree(c->lt_ws);
	c->lt = NULL;
	c->lt_ws = NULL;
}

static int lt_fail(cublasStatus_t st, const char *what)
{
	moor_err("cublasLt: %s: status %d", what, (int)st);
	return MOOR_EBACKEND;
}

#define LT(call)                                                               \
	do {                                                                   \
		cublasStatus_t st_ = (call);                                   \
		if (st_ != CUBLAS_STATUS_SUCCESS) {                            \
			rc = lt_fail(st_, #call);                              \
			goto out;                                              \
		}                                                              \
	} while (0)

static int bucket_of(int T)
{
	int b = 1;
	while (b < T)
		b <<= 1;
	return b;
}

static cudaDataType_t lt_type(int dt)
{
	return dt == KERN_F32 ? CUDA_R_32F : dt == KERN_BF16 ? CUDA_R_16BF
							     : CUDA_R_16F;
}

/* The descriptors of one product; n = the rows of x (T or a bucket). */
typedef struct lt_desc {
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t a, b, d;
} lt_desc;

static void desc_free(lt_desc *d)
{
	if (d->op)
		cublasLtMatmulDescDestroy(d->op);
	if (d->a)
		cublasLtMatrixLayoutDestroy(d->a);
	if (d->b)
		cublasLtMatrixLayoutDestroy(d->b);
	if (d->d)
		cublasLtMatrixLayoutDestroy(d->d);
	memset(d, 0, sizeof *d);
}

static int desc_make(lt_desc *d, int wdt, int N, int K, int n, int ldb,
		     int ldy)
{
	int rc = 0;
	memset(d, 0, sizeof *d);
	cudaDataType_t ab = lt_type(wdt);
	cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
	LT(cublasLtMatmulDescCreate(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	LT(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA,
					  &ta, sizeof ta));
	LT(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB,
					  &tb, sizeof tb));
	LT(cublasLtMatrixLayoutCreate(&d->a, ab, K, N, K));
	LT(cublasLtMatrixLayoutCreate(&d->b, ab, K, n, ldb));
	LT(cublasLtMatrixLayoutCreate(&d->d, CUDA_R_32F, N, n, ldy));
	return 0;
out:
	desc_free(d);
	return rc;
}

/* Products of more rows than the prefill chunk (kern_limits.chunk: a
 * forward of several chunks) run the algorithm of the chunk's bucket, so
 * that their rows keep the bits they have in one chunk's product (no
 * split-K: an output tile's sum runs over K alone, whatever the rows
 * around it). MOOR_GEMM_BUCKET_MAX=B (read at each call; a power of two)
 * caps the buckets at B instead, for bench_kern --only rows, which asks
 * whether the rows keep their bits and what the longer product gains. */
static int bucket_cap(const kern_ctx *c)
{
	long v = kcu_env_int("MOOR_GEMM_BUCKET_MAX", 0);
	if (v > 0 && v <= (1L << 30) && (v & (v - 1)) == 0)
		return (int)v;
	return c->lim.chunk > 0 ? bucket_of(c->lim.chunk) : 0;
}

/* Products whose heuristic's first candidate is not its fastest: the one
 * to take instead, P places after it (counting only the candidates taken
 * here: no split-K), for one device and cuBLASLt version. Measured with
 * bench_kern --only picks (4,096 rows on the 1,024-row bucket's algorithm,
 * as the model runs them), H100, cuBLASLt 130100, 2026-12-07: the MLP's
 * gate | up 641 against 615 TFLOP/s, the GDN in_proj 617 against 602; the
 * other prefill products' first candidates were the fastest or within 1%.
 * bench_gpu on an H100 the same day, twice each: 3.88 and 3.89 s at 32k
 * against 3.93 and 3.92 with MOOR_GEMM_PICK=0, 19.84 and 19.83 s at 128k
 * against 20.02 twice; the GPU suite and run_golden27.sh passed with it.
 * A prefill row must keep its bits whatever the forward that computes it
 * (a forward of 200 rows runs the 256-row bucket's algorithm, one of 4,096
 * the 1,024-row bucket's): every candidate 0 to 7 of every prefill
 * product gave the first rows the bits of the 64- and 256-row buckets'
 * first candidates (bench_kern --only picks at 100, 1,024 and 4,096 rows,
 * H100, the same day: no split-K, one order over K). Another version or
 * device takes the heuristic's first. */
static const struct {
	int cc, lt, N, K, bucket, pick;
} gemm_tuned[] = {
    {90, 130100, 34816, 5120, 1024, 1},
    {90, 130100, 16480, 5120, 1024, 2},
};

/* The candidate a new shape takes: MOOR_GEMM_PICK=P when set (read at
 * each call; P places after the heuristic's first for every shape, for
 * bench_kern --only picks; 0 the first, gemm_tuned off), else gemm_tuned's
 * pick for it, else 0. A product with no such candidate fails
 * (MOOR_EUNSUP). */
static int gemm_pick(const kern_ctx *c, int N, int K, int bucket)
{
	const char *e = getenv("MOOR_GEMM_PICK");
	if (e && *e) {
		long v = kcu_env_int("MOOR_GEMM_PICK", 0);
		return v > 0 && v < 16 ? (int)v : 0;
	}
	static int lt; /* the library's version, once (a benign race) */
	if (!lt)
		lt = (int)cublasLtGetVersion();
	const int cc = c->prop.major * 10 + c->prop.minor;
	for (size_t i = 0; i < sizeof gemm_tuned / sizeof gemm_tuned[0]; i++)
		if (gemm_tuned[i].cc == cc && gemm_tuned[i].lt == lt &&
		    gemm_tuned[i].N == N && gemm_tuned[i].K == K &&
		    gemm_tuned[i].bucket == bucket)
			return gemm_tuned[i].pick;
	return 0;
}

/* The pinned algorithm of a product shape, picked at its first use. */
static int algo_get(kern_ctx *c, int wdt, int N, int K, int T, int ldb,
		    int ldy, const kcu_algo **out)
{
	int bucket = bucket_of(T), cap = bucket_cap(c);
	if (cap && bucket > cap)
		bucket = cap;
	const int want = gemm_pick(c, N, K, bucket);
	unsigned h = (unsigned)N * 2654435761u ^ (unsigned)K * 40503u ^
		     (unsigned)bucket * 97u ^ (unsigned)ldb * 131u ^
		     (unsigned)ldy * 7u ^ (unsigned)wdt ^ (unsigned)want * 7919u;
	for (int probe = 0; probe < KCU_ALGOS; probe++) {
		kcu_algo *a = &c->algo[(h + probe) % KCU_ALGOS];
		if (a->used && a->N == N && a->K == K && a->bucket == bucket &&
		    a->ldx == ldb && a->ldy == ldy && a->wdt == wdt &&
		    a->pick == want) {
			*out = a;
			return 0;
		}
		if (a->used)
			continue;
		/* a new shape: ask the heuristic for the bucket's size */
		lt_desc d;
		int rc = desc_make(&d, wdt, N, K, bucket, ldb, ldy);
		if (rc)
			return rc;
		cublasLtMatmulPreference_t pref = NULL;
		cublasLtMatmulHeuristicResult_t res[16];
		int nres = 0, pick = -1, skip = want;
		char plain[16] = {0}; /* no split-K as the heuristic gave it */
		uint64_t wsmax = c->lt_ws_bytes;
		LT(cublasLtMatmulPreferenceCreate(&pref));
		LT(cublasLtMatmulPreferenceSetAttribute(
		    pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsmax,
		    sizeof wsmax));
		LT(cublasLtMatmulAlgoGetHeuristic(c->lt, d.op, d.a, d.b, d.d,
						  d.d, pref, 16, res, &nres));
		for (int i = 0; i < nres && pick < 0; i++) {
			int splitk = 1;
			size_t sz = 0;
			if (res[i].state != CUBLAS_STATUS_SUCCESS)
				continue;
			cublasLtMatmulAlgoConfigGetAttribute(
			    &res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
			    &splitk, sizeof splitk, &sz);
			plain[i] = splitk <= 1;
			if (plain[i] && skip-- == 0)
				pick = i;
		}
		/* none without split-K (or MOOR_GEMM_PICK past them): the
		 * heuristic's other candidates with split-K turned off, the
		 * first that cuBLASLt accepts */
		for (int i = 0; i < nres && pick < 0; i++) {
			if (res[i].state != CUBLAS_STATUS_SUCCESS || plain[i])
				continue;
			int one = 1;
			uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
			cublasLtMatmulHeuristicResult_t chk;
			if (cublasLtMatmulAlgoConfigSetAttribute(
				&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one,
				sizeof one) != CUBLAS_STATUS_SUCCESS ||
			    cublasLtMatmulAlgoConfigSetAttribute(
				&res[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
				&none, sizeof none) != CUBLAS_STATUS_SUCCESS)
				continue;
			if (cublasLtMatmulAlgoCheck(c->lt, d.op, d.a, d.b, d.d, d.d,
						    &res[i].algo, &chk) !=
				CUBLAS_STATUS_SUCCESS ||
			    chk.workspaceSize > wsmax)
				continue;
			res[i].workspaceSize = chk.workspaceSize;
			if (skip-- == 0)
				pick = i;
		}
		if (pick < 0) {
			moor_err("cublasLt: no algorithm without split-K for "
				 "[%d x %d] x %d rows (%d candidates, MOOR_GEMM_PICK "
				 "%d)",
				 N, K, bucket, nres, want);
			rc = MOOR_EUNSUP;
			goto out;
		}
		a->used = 1;
		a->N = N;
		a->K = K;
		a->bucket = bucket;
		a->ldx = ldb;
		a->ldy = ldy;
		a->wdt = wdt;
		a->pick = want;
		a->algo = res[pick].algo;
		a->ws = res[pick].workspaceSize;
		*out = a;
	out:
		if (pref)
			cublasLtMatmulPreferenceDestroy(pref);
		desc_free(&d);
		return rc;
	}
	moor_err("cublasLt: more than %d product shapes", KCU_ALGOS);
	return MOOR_ENOSPACE;
}

/* ---- staging ---- */

template <typename T16> static __device__ inline T16 to16(float x);
template <> __device__ inline __nv_bfloat16 to16(float x)
{
	return __float2bfloat16_rn(x);
}
template <> __device__ inline __half to16(float x)
{
	return __float2half_rn(x);
}

/* The staging and rounding kernels are element-wise (no sum: their bits
 * do not depend on the launch shape). Grid (column blocks, rows): a thread
 * takes four adjacent columns of a row, as one 16-byte access when the
 * rows allow it (vec), else four scalar ones; no 64-bit division per
 * element (the flat loops they replace took 10% of a 1,024-row chunk's
 * prefill on the H200). */
#define ST_THREADS 256
#define ST_COLS (4 * ST_THREADS)

static dim3 st_grid(int T, int K)
{
	unsigned gy = T > 65535 ? 65535u : (unsigned)T;
	return dim3((unsigned)((K + ST_COLS - 1) / ST_COLS), gy);
}

static int st_vec(const void *a, const void *b, const void *c, int lda, int ldb,
		  int K)
{
	return K % 4 == 0 && lda % 4 == 0 && ldb % 4 == 0 &&
	       (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15) == 0;
}

template <typename T16> static __device__ inline void st4(T16 *d, float4 v);
template <> __device__ inline void st4<__nv_bfloat16>(__nv_bfloat16 *d, float4 v)
{
	__nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y);
	__nv_bfloat162 hi = __floats2bfloat162_rn(v.z, v.w);
	uint2 u;
	u.x = *(unsigned *)&lo;
	u.y = *(unsigned *)&hi;
	*(uint2 *)d = u;
}
template <> __device__ inline void st4<__half>(__half *d, float4 v)
{
	__half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
	uint2 u;
	u.x = *(unsigned *)&lo;
	u.y = *(unsigned *)&hi;
	*(uint2 *)d = u;
}

#define ST_ROWS(t) for (int t = blockIdx.y; t < T; t += gridDim.y)

/* dst[t, k] = x[t, k] in the 16-bit dtype; dst contiguous [T, K]. */
template <typename T16>
static __global__ void stage_x(T16 *dst, const float *x, int ldx, int T, int K,
			       int vec)
{
	kcu_pdl_enter();
	const int k = (blockIdx.x * ST_THREADS + threadIdx.x) * 4;
	if (k >= K)
		return;
	ST_ROWS(t)
	{
		const float *xr = x + (size_t)t * ldx + k;
		T16 *dr = dst + (size_t)t * K + k;
		if (vec) {
			st4<T16>(dr, *(const float4 *)xr);
			continue;
		}
		for (int e = 0; e < 4 && k + e < K; e++)
			dr[e] = to16<T16>(xr[e]);
	}
}

static __device__ inline float swiglu1(float g, float u, int act)
{
	return kcu_rnd(kcu_rnd(kcu_silu(g), act) * u, act);
}

/* dst[t, k] = rnd(rnd(silu(g)) * u), the SwiGLU of ops.h, in the 16-bit
 * dtype, or in fp32 (T16 float: fp32 weights read their input as it is,
 * except for SwiGLU, whose result is staged in fp32). RIN: g and u are a
 * product's unrounded fp32 output, rounded to bf16 here on the way in
 * (kcu_mlp: the rounding pass the product would have made). */
template <typename T16, int RIN = 0>
static __global__ void stage_swiglu(T16 *dst, const float *g, const float *u,
				    int ld, int T, int K, int act, int vec)
{
	kcu_pdl_enter();
	const int k = (blockIdx.x * ST_THREADS + threadIdx.x) * 4;
	if (k >= K)
		return;
	ST_ROWS(t)
	{
		const float *gr = g + (size_t)t * ld + k, *ur = u + (size_t)t * ld + k;
		T16 *dr = dst + (size_t)t * K + k;
		if (vec) {
			float4 a = *(const float4 *)gr, b = *(const float4 *)ur;
			if (RIN) {
				a = make_float4(kcu_bf16r(a.x), kcu_bf16r(a.y),
						kcu_bf16r(a.z), kcu_bf16r(a.w));
				b = make_float4(kcu_bf16r(b.x), kcu_bf16r(b.y),
						kcu_bf16r(b.z), kcu_bf16r(b.w));
			}
			float4 r = make_float4(swiglu1(a.x, b.x, act), swiglu1(a.y, b.y, act),
					       swiglu1(a.z, b.z, act), swiglu1(a.w, b.w, act));
			if constexpr (sizeof(T16) == 4)
				*(float4 *)dr = r;
			else
				st4<T16>(dr, r);
			continue;
		}
		for (int e = 0; e < 4 && k + e < K; e++) {
			float r = RIN ? swiglu1(kcu_bf16r(gr[e]), kcu_bf16r(ur[e]), act)
				      : swiglu1(gr[e], ur[e], act);
			if constexpr (sizeof(T16) == 4)
				dr[e] = r;
			else
				dr[e] = to16<T16>(r);
		}
	}
}

static __global__ void round_rows(float *y, int ldy, int T, int N, int vec)
{
	kcu_pdl_enter();
	const int j = (blockIdx.x * ST_THREADS + threadIdx.x) * 4;
	if (j >= N)
		return;
	ST_ROWS(t)
	{
		float *yr = y + (size_t)t * ldy + j;
		if (vec) {
			float4 v = *(float4 *)yr;
			*(float4 *)yr = make_float4(kcu_bf16r(v.x), kcu_bf16r(v.y),
						    kcu_bf16r(v.z), kcu_bf16r(v.w));
			continue;
		}
		for (int e = 0; e < 4 && j + e < N; e++)
			yr[e] = kcu_bf16r(yr[e]);
	}
}

#define GEMV_THREADS 256
/* Passes of a warp whose lines k_gemv prefetches before its wait: 2 KB a
 * row at 2, 34 MB for a first wave of 1,056 blocks of 16 rows (L2 is 60
 * MB on the H200, 50 on the H100). */
#define GEMV_PREFETCH 2

/* MOOR_GEMV_PF=N (read once, 0 to 16) sets those passes, for a
 * benchmark's sweep; the bits do not depend on it. */
static int gemv_pf(void)
{
	static int pf = -1;
	if (pf < 0) {
		long v = kcu_env_int("MOOR_GEMV_PF", GEMV_PREFETCH);
		pf = v < 0 ? 0 : v > 16 ? 16 : (int)v;
	}
	return pf;
}

/* The SwiGLU computed on the GEMV's way in (GX_SWIGLU) is opt-in,
 * MOOR_GEMV_SWIGLU=1 (read once): measured on an H100 (bench_gpu --profile
 * 1, the 27B's down projection, 17408 wide) at 103 us a call against 72
 * for the GEMV of the staged bf16 input (bench_kern) plus about 10 for
 * the stage: every row group of a block reads gate and up in fp32, 4x the
 * bytes of a bf16 x, and the step took 21.3 ms against 20.4 staged. */
static int gemv_swiglu_on(void)
{
	static int on = -1;
	return kcu_env_once(&on, "MOOR_GEMV_SWIGLU", 0);
}

/* The GEMV's input, 8 values from piece i as bf16 values made float
 * (L1-resident after the first warp): GX_F32 an fp32 x rounded on the
 * way in (as stage_x), GX_B16 a bf16 x as it is,
 * GX_SWIGLU the SwiGLU of fp32 gate x and up x2 rounded to bf16 (as
 * stage_swiglu<bf16>: swiglu1, then the same round to nearest), so that
 * a decode step's down projection needs no staging launch. */
enum { GX_F32, GX_B16, GX_SWIGLU };

template <int GX>
static __device__ inline void gemv_x8(float *xf, const void *x, const float *x2,
				      int i, int act)
{
	if (GX == GX_B16) {
		uint4 u = __ldg((const uint4 *)x + i);
		const __nv_bfloat16 *e = (const __nv_bfloat16 *)&u;
#pragma unroll
		for (int k = 0; k < 8; k++)
			xf[k] = __bfloat162float(e[k]);
	} else if (GX == GX_F32) {
		float4 a = __ldg((const float4 *)x + 2 * i);
		float4 b = __ldg((const float4 *)x + 2 * i + 1);
		float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
		for (int k = 0; k < 8; k++)
			xf[k] = __bfloat162float(__float2bfloat16_rn(v[k]));
	} else {
		float4 a = __ldg((const float4 *)x + 2 * i);
		float4 b = __ldg((const float4 *)x + 2 * i + 1);
		float4 c = __ldg((const float4 *)x2 + 2 * i);
		float4 d = __ldg((const float4 *)x2 + 2 * i + 1);
		float g[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
		float u[8] = {c.x, c.y, c.z, c.w, d.x, d.y, d.z, d.w};
#pragma unroll
		for (int k = 0; k < 8; k++)
			xf[k] = __bfloat162float(
			    __float2bfloat16_rn(swiglu1(g[k], u[k], act)));
	}
}

/* y[n] = rnd(sum_k x16[k] W[n, k]) for one row, x16 as gemv_x8<GX>
 * makes it (x2: the SwiGLU's up, GX_SWIGLU only). W bf16
 * [N, K], K % 8 == 0. The block's 8 warps are 8 / KS row groups of RPW
 * rows, KS warps a group splitting K: warp ks of a group, lane l sums the
 * 16-byte pieces i = 32 ks + l + 32 KS j in order of j; the lanes' sums
 * meet in a fixed butterfly, then the KS warps' in order ks = 0, 1, ...
 *
 * GLU (a decode step's gate | up, kcu_mlp): W is [2N, K], gate rows over
 * up rows; a group takes RPW gate rows n and the up rows N + n beside
 * them (each row's sum as above), writes both rounded to y [2N] and the
 * SwiGLU of the pair as stage_swiglu<bf16> makes it to act [N], the down
 * projection's input: the same bits as the product, then the stage, one
 * launch fewer. */
template <int GX, int RPW, int KS, int GLU = 0>
static __global__ void __launch_bounds__(GEMV_THREADS)
    k_gemv(float *y, const void *x, const float *x2, const __nv_bfloat16 *W,
	   int N, int K, int act, int pf, __nv_bfloat16 *glu_act)
{
	constexpr int RG = GEMV_THREADS / 32 / KS;
	constexpr int RR = GLU ? 2 * RPW : RPW; /* rows a warp reads */
	__shared__ float red[RG][KS][RR];
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	const int rg = w / KS, ks = w - rg * KS;
	const int n0 = (blockIdx.x * RG + rg) * RPW;
	const int K8 = K / 8;
	float acc[RR];
	const uint4 *wr[RR];
#pragma unroll
	for (int r = 0; r < RR; r++) {
		acc[r] = 0.0f;
		int n = n0 + r % RPW < N ? n0 + r % RPW : N - 1; /* a spare row reads row N-1 */
		if (GLU && r >= RPW)
			n += N;
		wr[r] = (const uint4 *)(W + (size_t)n * K);
	}
	/* The weights depend on no earlier kernel: under a programmatic
	 * launch their first pieces are on their way to L2 while the kernel
	 * before this one drains (cuda.cuh, kcu_go). 128-byte lines: the
	 * lanes 8 apart of the first pf passes (GEMV_PREFETCH). */
	if (n0 < N && (lane & 7) == 0)
#pragma unroll
		for (int j = 0; j < pf; j++) {
			int i = 32 * ks + lane + 32 * KS * j;
			if (i < K8)
#pragma unroll
				for (int r = 0; r < RR; r++)
					asm volatile(
					    "prefetch.global.L2 [%0];" ::"l"(
						wr[r] + i));
		}
	kcu_pdl_wait();
	kcu_pdl_release();
	if (n0 < N) {
#pragma unroll 4
		for (int i = 32 * ks + lane; i < K8; i += 32 * KS) {
			uint4 wu[RR];
#pragma unroll
			for (int r = 0; r < RR; r++)
				wu[r] = __ldg(wr[r] + i);
			float xf[8];
			gemv_x8<GX>(xf, x, x2, i, act);
#pragma unroll
			for (int r = 0; r < RR; r++) {
				const __nv_bfloat16 *we = (const __nv_bfloat16 *)&wu[r];
#pragma unroll
				for (int e = 0; e < 8; e++)
					acc[r] = fmaf(xf[e], __bfloat162float(we[e]),
						      acc[r]);
			}
		}
	}
#pragma unroll
	for (int r = 0; r < RR; r++) {
		float v = acc[r];
		for (int o = 16; o > 0; o >>= 1)
			v += __shfl_xor_sync(0xffffffffu, v, o);
		acc[r] = v;
	}
	if (GLU) {
		static_assert(!GLU || (KS == 2 && GX == GX_F32), "GLU: KS 2, fp32 x");
		if (lane == 0)
#pragma unroll
			for (int r = 0; r < RR; r++)
				red[rg][ks][r] = acc[r];
		__syncthreads();
		if (ks == 0 && lane < RPW && n0 + lane < N) {
			float g = red[rg][0][lane] + red[rg][1][lane];
			float u = red[rg][0][RPW + lane] + red[rg][1][RPW + lane];
			g = kcu_rnd(g, act);
			u = kcu_rnd(u, act);
			y[n0 + lane] = g;
			y[N + n0 + lane] = u;
			glu_act[n0 + lane] = to16<__nv_bfloat16>(swiglu1(g, u, act));
		}
		return;
	}
	if (KS == 1) {
#pragma unroll
		for (int r = 0; r < RPW; r++)
			if (lane == 0 && n0 + r < N)
				y[n0 + r] = kcu_rnd(acc[r], act);
		return;
	}
	if (lane == 0)
#pragma unroll
		for (int r = 0; r < RPW; r++)
			red[rg][ks][r] = acc[r];
	__syncthreads();
	if (ks == 0 && lane < RPW && n0 + lane < N) {
		float v = red[rg][0][lane];
#pragma unroll
		for (int j = 1; j < KS; j++)
			v += red[rg][j][lane];
		y[n0 + lane] = kcu_rnd(v, act);
	}
}

static int gemv_ok(const void *x, const void *W, int wdt, int T, int K)
{
	return T == 1 && wdt == KERN_BF16 && K % 8 == 0 &&
	       ((uintptr_t)W & 15) == 0 && ((uintptr_t)x & 15) == 0;
}

/* The GEMV's shape for N x K, a rule of N alone (the bits depend on KS;
 * K's pieces are split across two warps in every shape). Measured on the
 * H200 (bench_kern, every variant): 4 rows a warp for N >= 8192 (MLP
 * gate+up 4.1, attention q+gate 3.8, lm_head 4.5 TB/s), 2 for N >= 4096
 * (MLP down 3.7, attention o 3.4, GDN out 3.2), 1 below (k and v 2.0;
 * they were 3.1, 3.4, 2.5 and 1.3 with 2 rows a warp and no split). */
static void gemv_shape(int N, int *rpw, int *ks)
{
	/* MOOR_GEMV_RPW=1, 2 or 4 (read once) forces the rows a warp for
	 * every N, for a benchmark's sweep (the bits do not depend on it) */
	static int force = -1;
	if (force < 0) {
		long v = kcu_env_int("MOOR_GEMV_RPW", 0);
		force = v == 1 || v == 2 || v == 4 ? (int)v : 0;
	}
	*ks = 2;
	*rpw = force ? force : N >= 8192 ? 4 : N >= 4096 ? 2 : 1;
}

#define GEMV_GX(G, R, S)                                                       \
	kcu_go_gemv(q, k_gemv<G, R, S>, nb, GEMV_THREADS, 0, y, x, x2,         \
		    (const __nv_bfloat16 *)W, N, K, act, gemv_pf(),            \
		    (__nv_bfloat16 *)NULL)
#define GEMV_CASE(R, S)                                                        \
	if (rpw == R && ks == S) {                                             \
		unsigned nb = (unsigned)((N + 8 / S * R - 1) / (8 / S * R));   \
		if (gx == GX_B16)                                              \
			GEMV_GX(GX_B16, R, S);                                 \
		else if (gx == GX_SWIGLU)                                      \
			GEMV_GX(GX_SWIGLU, R, S);                              \
		else                                                           \
			GEMV_GX(GX_F32, R, S);                                 \
		KCU_LAUNCHED(q->ctx);                                          \
		return 0;                                                      \
	}

/* x: fp32 (GX_F32), bf16 (GX_B16), or the SwiGLU's gate with x2 its up */
static int gemv(kern_queue *q, float *y, const void *x, const float *x2,
		int gx, const void *W, int N, int K, int act)
{
	int rpw, ks;
	gemv_shape(N, &rpw, &ks);
	GEMV_CASE(1, 2)
	GEMV_CASE(2, 2)
	GEMV_CASE(4, 2)
	moor_err("gemv: no kernel of %d rows a warp, K split %d", rpw, ks);
	return MOOR_EUNSUP;
}

/* MOOR_DEC_GLU=0 (read once) runs a decode step's MLP as the caller's
 * two ops (the gate | up GEMV, then the stage and the down GEMV) instead
 * of kcu_mlp's one row: the same bits, a launch more. */
static int dec_glu_on(void)
{
	static int on = -1;
	return kcu_env_once(&on, "MOOR_DEC_GLU", 1);
}

/* One row of gate | up (x fp32 [K], Wgu [2N, K]) into y [2N], rounded,
 * and their SwiGLU in bf16 into act [N]: k_gemv<GX_F32, 2, 2, 1>, the
 * 4 loads a warp of gate | up's own shape (gemv_shape: 4 rows a warp). */
static int gemv_glu(kern_queue *q, float *y, __nv_bfloat16 *act_out,
		    const float *x, const void *W, int N, int K, int act)
{
	unsigned nb = (unsigned)((N + 7) / 8); /* 4 groups of 2 a block */
	kcu_go_gemv(q, k_gemv<GX_F32, 2, 2, 1>, nb, GEMV_THREADS, 0, y,
		    (const void *)x, (const float *)NULL,
		    (const __nv_bfloat16 *)W, N, K, act, gemv_pf(), act_out);
	KCU_LAUNCHED(q->ctx);
	return 0;
}

/* The product of the staged (or fp32) input b [T, K] (row stride ldb). */
static int product(kern_queue *q, float *y, int ldy, const void *b, int ldb,
		   const void *W, int wdt, int T, int N, int K, int act)
{
	kern_ctx *c = q->ctx;
	const kcu_algo *al;
	int rc = algo_get(c, wdt, N, K, T, ldb, ldy, &al);
	if (rc)
		return rc;
	lt_desc d;
	if ((rc = desc_make(&d, wdt, N, K, T, ldb, ldy)))
		return rc;
	float one = 1.0f, zero = 0.0f;
	cublasStatus_t st = cublasLtMatmul(c->lt, d.op, &one, W, d.a, b, d.b,
					   &zero, y, d.d, y, d.d, &al->algo,
					   c->lt_ws, c->lt_ws_bytes, q->s);
	desc_free(&d);
	if (st != CUBLAS_STATUS_SUCCESS)
		return lt_fail(st, "cublasLtMatmul");
	if (act == KERN_ACT_BF16) {
		kcu_go(q, round_rows, st_grid(T, N), ST_THREADS, 0, y, ldy, T,
		       N, st_vec(y, y, y, ldy, ldy, N));
		KCU_LAUNCHED(c);
	}
	return 0;
}

static int mm_check(kern_queue *q, float *y, int ldy, const void *W, int wdt,
		    int T, int N, int K, int act)
{
	if (!q || !y || !W || T < 0 || N < 0 || K < 0 || ldy < N)
		return MOOR_ERANGE;
	if (!kcu_dtype_ok(wdt) || !kcu_act_ok(act))
		return MOOR_EDTYPE;
	if (wdt != KERN_F32 &&
	    (size_t)T * (size_t)K * 2 > q->ctx->stage_bytes)
		return MOOR_ERANGE; /* past what reserve() sized */
	return 0;
}

int kcu_matmul(kern_queue *q, float *y, int ldy, const float *x, int ldx,
	       const void *W, int wdt, int T, int N, int K, int act)
{
	int rc = mm_check(q, y, ldy, W, wdt, T, N, K, act);
	if (rc || !x || ldx < K)
		return rc ? rc : MOOR_ERANGE;
	if (T == 0 || N == 0)
		return 0;
	if (K == 0)
		return MOOR_ERANGE;
	if (wdt == KERN_F32)
		return product(q, y, ldy, x, ldx, W, wdt, T, N, K, act);
	if (gemv_ok(x, W, wdt, T, K))
		return gemv(q, y, x, NULL, GX_F32, W, N, K, act);
	void *st = q->ctx->stage;
	int vec = st_vec(x, x, st, ldx, K, K);
	if (wdt == KERN_BF16)
		kcu_go(q, stage_x<__nv_bfloat16>, st_grid(T, K), ST_THREADS, 0,
		       (__nv_bfloat16 *)st, x, ldx, T, K, vec);
	else
		kcu_go(q, stage_x<__half>, st_grid(T, K), ST_THREADS, 0,
		       (__half *)st, x, ldx, T, K, vec);
	KCU_LAUNCHED(q->ctx);
	return product(q, y, ldy, q->ctx->stage, K, W, wdt, T, N, K, act);
}

int kcu_matmul_swiglu(kern_queue *q, float *y, int ldy, const float *gate,
		      const float *up, int ldgu, const void *W, int wdt, int T,
		      int N, int K, int act)
{
	int rc = mm_check(q, y, ldy, W, wdt, T, N, K, act);
	if (rc || !gate || !up || ldgu < K)
		return rc ? rc : MOOR_ERANGE;
	if (T == 0 || N == 0)
		return 0;
	if (K == 0)
		return MOOR_ERANGE;
	if (gemv_ok(gate, W, wdt, T, K) && ((uintptr_t)up & 15) == 0 &&
	    gemv_swiglu_on())
		return gemv(q, y, gate, up, GX_SWIGLU, W, N, K, act);
	size_t n = (size_t)T * K;
	if (wdt == KERN_F32 && n * 4 > q->ctx->stage_bytes)
		return MOOR_ERANGE;
	void *st = q->ctx->stage;
	int vec = st_vec(gate, up, st, ldgu, ldgu, K);
	dim3 gr = st_grid(T, K);
	if (wdt == KERN_BF16)
		kcu_go(q, stage_swiglu<__nv_bfloat16>, gr, ST_THREADS, 0,
		       (__nv_bfloat16 *)st, gate, up, ldgu, T, K, act, vec);
	else if (wdt == KERN_F16)
		kcu_go(q, stage_swiglu<__half>, gr, ST_THREADS, 0, (__half *)st,
		       gate, up, ldgu, T, K, act, vec);
	else
		kcu_go(q, stage_swiglu<float>, gr, ST_THREADS, 0, (float *)st,
		       gate, up, ldgu, T, K, act, vec);
	KCU_LAUNCHED(q->ctx);
	if (gemv_ok(st, W, wdt, T, K))
		return gemv(q, y, st, NULL, GX_B16, W, N, K, act);
	return product(q, y, ldy, st, K, W, wdt, T, N, K, act);
}

/* matmul(tmp; x, Wgu) unrounded (the same algorithm and sums as the
 * rounded call: the rounding is a separate pass, ops.h), the SwiGLU
 * staged from it with gate and up rounded on the way in, the down
 * projection rounded: a [T, 2I] fp32 read and write fewer than matmul
 * then matmul_swiglu, the same bits. One row (decode, MOOR_DEC_GLU): the
 * gate | up GEMV writes the SwiGLU's bf16 input itself (gemv_glu), then
 * the down GEMV: two launches for the two ops' three, the same bits. */
int kcu_mlp(kern_queue *q, float *y, int ldy, const float *x, int ldx,
	    float *tmp, const void *Wgu, const void *Wd, int wdt, int T, int H,
	    int I, int act)
{
	if (act != KERN_ACT_BF16 || wdt != KERN_BF16 || T < 1 ||
	    (T == 1 ? !dec_glu_on() || !gemv_ok(x, Wgu, wdt, T, H) ||
			  !gemv_ok(q->ctx->stage, Wd, wdt, T, I)
		    : !kcu_pf_fuse_on()))
		return MOOR_EUNSUP;
	int rc = mm_check(q, y, ldy, Wd, wdt, T, H, I, act);
	if (!rc)
		rc = mm_check(q, tmp, 2 * I, Wgu, wdt, T, 2 * I, H, act);
	if (rc || !x || ldx < H || H <= 0 || I <= 0)
		return rc ? rc : MOOR_ERANGE;
	void *st = q->ctx->stage;
	if (T == 1) { /* decode: gate | up and the SwiGLU, then down */
		gemv_glu(q, tmp, (__nv_bfloat16 *)st, x, Wgu, I, H, act);
		return gemv(q, y, st, NULL, GX_B16, Wd, H, I, act);
	}
	kcu_go(q, stage_x<__nv_bfloat16>, st_grid(T, H), ST_THREADS, 0,
	       (__nv_bfloat16 *)st, x, ldx, T, H, st_vec(x, x, st, ldx, H, H));
	KCU_LAUNCHED(q->ctx);
	if ((rc = product(q, tmp, 2 * I, st, H, Wgu, wdt, T, 2 * I, H,
			  KERN_ACT_F32)))
		return rc;
	const float *g = tmp, *u = tmp + I;
	kcu_go(q, stage_swiglu<__nv_bfloat16, 1>, st_grid(T, I), ST_THREADS, 0,
	       (__nv_bfloat16 *)st, g, u, 2 * I, T, I, act,
	       st_vec(g, u, st, 2 * I, 2 * I, I));
	KCU_LAUNCHED(q->ctx);
	return product(q, y, ldy, st, I, Wd, wdt, T, H, I, act);
}
