/* cuda.cuh: what the CUDA backend's files share (`kcu_`, internal; ops.h is
 * the contract). One context owns a device, two streams (compute, copy), a
 * cuBLASLt handle with its workspace, the scratch reserve() sized, and per
 * queue the position register that graph launches write.
 *
 * Errors. A failed launch or API call is logged once with its file and line
 * and returns MOOR_EBACKEND; errors of enqueued work surface at the next
 * sync or download (ops.h). Host-checkable arguments fail before anything
 * is enqueued. */
#ifndef KCU_CUH
#define KCU_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "moor.h"
#include "ops.h"
}

enum { KCU_PDL_OFF, KCU_PDL_ALL, KCU_PDL_GEMV };

struct kern_queue {
	kern_ctx *ctx;
	cudaStream_t s;
	int kind;
	/* graph capture: ops that take a position read *dpos + (pos0 -
	 * cap_pos) and attention is shaped for max_len keys */
	int capturing;
	int64_t cap_pos, max_len;
	int64_t *dpos; /* device int64: the launch's position */
	/* which launches may overlap their predecessor's tail
	 * (programmatic dependent launch, kcu_go): KCU_PDL_*, set while a
	 * graph is captured */
	int pdl;
};

#define KCU_GDN_PIECES 16 /* MOOR_GDN_PIPE: most pieces a call */
#define KCU_GDN_EVENTS (2 * KCU_GDN_PIECES + 2)

struct kern_event {
	cudaEvent_t e;
};

struct kern_graph {
	cudaGraph_t g;
	cudaGraphExec_t x;
};

/* A pinned GEMM algorithm: weight shape, row bucket, layouts, dtype. */
typedef struct kcu_algo {
	int used;
	int N, K, bucket, ldx, ldy, wdt, act_out_bf16;
	int pick; /* MOOR_GEMM_PICK's value when it was picked */
	cublasLtMatmulAlgo_t algo;
	size_t ws;
} kcu_algo;
#define KCU_ALGOS 256

struct kern_ctx {
	int device;
	cudaDeviceProp prop;
	kern_queue q[2]; /* KERN_Q_COMPUTE, KERN_Q_COPY */
	cublasLtHandle_t lt;
	void *lt_ws;
	size_t lt_ws_bytes;
	kcu_algo algo[KCU_ALGOS];
	kern_limits lim; /* what reserve() sized */
	/* matmul input staged in the weights' 16-bit dtype [rows, width] */
	void *stage;
	size_t stage_bytes;
	/* attention split partials [KCU_SPLIT_BATCH][Hq][splits][D + 2] */
	float *att_part;
	size_t att_part_bytes;
	/* sampler scratch */
	void *smp;
	size_t smp_bytes, smp_cub_bytes;
	int smp_v;
	int32_t *smp_host; /* pinned: the picked id, logprobs()' result */
	int failed; /* an error was logged: the context is unusable */
	/* the chunked delta rule's streams (its state pass at the highest
	 * priority, the rest at the lowest) and events (MOOR_GDN_PIPE,
	 * gdn.cu), made at their first use */
	cudaStream_t gdn_hi, gdn_lo;
	cudaEvent_t gdn_ev[KCU_GDN_EVENTS];
};

/* ---- errors ---- */

int kcu_fail(kern_ctx *c, cudaError_t e, const char *what, const char *file,
	     int line);
#define KCU(c, call)                                                           \
	do {                                                                   \
		cudaError_t e_ = (call);                                       \
		if (e_ != cudaSuccess)                                         \
			return kcu_fail((c), e_, #call, __FILE__, __LINE__);   \
	} while (0)
/* After a launch: launch-time errors (a bad configuration) only. */
#define KCU_LAUNCHED(c) KCU((c), cudaPeekAtLastError())

/* ---- launch helpers ---- */

/* Programmatic dependent launch (Hopper) in captured decode graphs: the
 * GEMVs' launches alone by default, every launch with MOOR_PDL=1, none
 * with MOOR_PDL=0 (backend.cu says what each measured). Every kernel a
 * graph can capture begins with kcu_pdl_enter(): it lets the next grid in
 * the stream launch (griddepcontrol.launch_dependents), then waits until
 * the grid before it has completed and its writes are visible
 * (griddepcontrol.wait; both are no-ops for a grid launched without the
 * attribute). The GEMV (k_gemv) fetches its first weights, which depend
 * on no earlier kernel, before its wait, and lets the next grid launch
 * only after it. kcu_go_gemv launches a GEMV with the attribute unless
 * q->pdl is KCU_PDL_OFF, so it is resident and fetching while the small
 * kernel before it runs; kcu_go launches every other kernel with it only
 * when q->pdl is KCU_PDL_ALL (some 900 small launches a decode step, each
 * then resident and waiting while the one before it runs). The wait
 * comes before any early return and before any access but a weight's: a
 * grid whose blocks all returned unwaited would complete before its
 * predecessor, and the grid after it would read unfinished results. The
 * order of results is the stream's, whatever the trigger: a wait covers
 * the whole grid before it, which itself waited for its own, and a grid
 * launched without the attribute starts after the whole grid before it,
 * as any. (attn_wg.cu's kernels, never captured, are launched plainly
 * and need none of it.) */
static __device__ inline void kcu_pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
static __device__ inline void kcu_pdl_release(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
static __device__ inline void kcu_pdl_enter(void)
{
	kcu_pdl_release();
	kcu_pdl_wait();
}

/* k<<<g, b, shm, q->s>>>(args...), with the PDL attribute when `early`.
 * Launch errors are left for KCU_LAUNCHED (cudaPeekAtLastError). */
template <typename... P, typename... A>
static inline void kcu_launch(const kern_queue *q, int early, void (*k)(P...),
			      dim3 g, dim3 b, size_t shm, A &&...args)
{
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute at[1];
	cfg.gridDim = g;
	cfg.blockDim = b;
	cfg.dynamicSmemBytes = shm;
	cfg.stream = q->s;
	if (early) {
		at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
		at[0].val.programmaticStreamSerializationAllowed = 1;
		cfg.attrs = at;
		cfg.numAttrs = 1;
	}
	(void)cudaLaunchKernelEx(&cfg, k, static_cast<A &&>(args)...);
}

/* A launch with the PDL attribute where q->pdl is KCU_PDL_ALL */
template <typename... P, typename... A>
static inline void kcu_go(const kern_queue *q, void (*k)(P...), dim3 g, dim3 b,
			  size_t shm, A &&...args)
{
	kcu_launch(q, q->pdl == KCU_PDL_ALL, k, g, b, shm,
		   static_cast<A &&>(args)...);
}

/* A GEMV's launch (k_gemv: its weights load before its wait), with the
 * attribute where q->pdl is KCU_PDL_ALL or KCU_PDL_GEMV */
template <typename... P, typename... A>
static inline void kcu_go_gemv(const kern_queue *q, void (*k)(P...), dim3 g,
			       dim3 b, size_t shm, A &&...args)
{
	kcu_launch(q, q->pdl != KCU_PDL_OFF, k, g, b, shm,
		   static_cast<A &&>(args)...);
}

static inline unsigned kcu_blocks(size_t n, unsigned threads)
{
	size_t b = (n + threads - 1) / threads;
	return (unsigned)(b > 1u << 30 ? 1u << 30 : b);
}

/* The position an op at pos0 runs at (see struct kern_queue). */
static inline const int64_t *kcu_dpos(const kern_queue *q)
{
	return q->capturing ? q->dpos : NULL;
}
static inline int64_t kcu_padd(const kern_queue *q, int64_t pos0)
{
	return q->capturing ? pos0 - q->cap_pos : pos0;
}
/* Makes the context's device current for the calling thread, once per
 * thread and device: cudaSetDevice took about 0.1 ms a call on the lent
 * H200's runtime, too much for an op of a decode step. */
static inline void kcu_use(const kern_ctx *c)
{
	static __thread int cur = -1;
	if (cur != c->device && cudaSetDevice(c->device) == cudaSuccess)
		cur = c->device;
}

static __device__ inline int64_t kcu_pos(const int64_t *dpos, int64_t add)
{
	return (dpos ? *dpos : 0) + add;
}

/* ---- cp.async (16-byte copies global -> shared, in groups) ---- */

static __device__ inline void cp16(void *dst, const void *src, int ok)
{
	unsigned a = (unsigned)__cvta_generic_to_shared(dst);
	int n = ok ? 16 : 0; /* 0: the 16 bytes are zero-filled */
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a),
		     "l"(src), "r"(n));
}
static __device__ inline void cp_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> static __device__ inline void cp_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* ---- numerics shared by the kernels ---- */

static __device__ inline float kcu_bf16r(float x)
{
	return __bfloat162float(__float2bfloat16_rn(x));
}
static __device__ inline float kcu_rnd(float x, int act)
{
	return act == KERN_ACT_BF16 ? kcu_bf16r(x) : x;
}
static __device__ inline float kcu_wget(const void *w, int dt, size_t i)
{
	if (dt == KERN_F32)
		return ((const float *)w)[i];
	if (dt == KERN_BF16)
		return __bfloat162float(((const __nv_bfloat16 *)w)[i]);
	return __half2float(((const __half *)w)[i]);
}

/* The kernels' switches in the environment: 1 where NAME is "1", 0 where
 * it is "0", else dflt. kcu_env_once keeps the answer in *cache (-1:
 * not read yet), for a switch read once a process (or a file). */
static inline int kcu_env_flag(const char *name, int dflt)
{
	const char *e = getenv(name);
	return e && !strcmp(e, "1") ? 1 : e && !strcmp(e, "0") ? 0 : dflt;
}
/* The kernels' numeric knobs: the decimal integer NAME holds, else dflt
 * (unset, empty, or not wholly a number). Each caller clamps its own. */
static inline long kcu_env_int(const char *name, long dflt)
{
	const char *e = getenv(name);
	char *end;
	if (!e || !*e)
		return dflt;
	long v = strtol(e, &end, 10);
	return *end ? dflt : v;
}
static inline int kcu_env_once(int *cache, const char *name, int dflt)
{
	if (*cache < 0)
		*cache = kcu_env_flag(name, dflt);
	return *cache;
}

/* MOOR_DEC_FUSE=0 (read once a file) turns decode's fusions off: the
 * prologues of elem.cu (attn_prep, gdn_prep refuse T = 1, the unfused ops
 * run);
 * bench_gpu's "before" row and the tests' references. (The SwiGLU in the
 * down projection's GEMV has its own opt-in: gemm.cu, gemv_swiglu_on.) */
static inline int kcu_dec_fuse_on(void)
{
	static int on = -1;
	return kcu_env_once(&on, "MOOR_DEC_FUSE", 1);
}

/* MOOR_PF_FUSE=0 (read once a file) turns prefill's fusions off
 * (gemm.cu's kcu_mlp refuses: the model runs matmul and matmul_swiglu;
 * elem.cu's prologues refuse T > 1), for bench_gpu's A/B; the bits are
 * the same either way. */
static inline int kcu_pf_fuse_on(void)
{
	static int on = -1;
	return kcu_env_once(&on, "MOOR_PF_FUSE", 1);
}

/* a[i] where ok, else 0: a load that is never branched around (see
 * kcu_wgather); a[0] must be readable */
static __device__ inline float kcu_ldz(const float *a, long long i, bool ok)
{
	float v = a[ok ? i : 0];
	return ok ? v : 0.0f;
}

/* o[j] = w[ix(j)] as float for j < N, 0 where ix(j) < 0: one branch on
 * the dtype, then N loads in flight at once (an element past the end
 * loads w[0] and is then dropped: no branch around a load, which ptxas
 * may leave as one and keep the loads one at a time). kcu_wget in an
 * unrolled loop is a branch an element, and ptxas keeps its loads one at
 * a time: a 5,120-wide decode norm took 20 us of load latency on the
 * H100 that way (ncu), 5 us with its loads batched. */
static __device__ inline float kcu_tof(float v)
{
	return v;
}
static __device__ inline float kcu_tof(__nv_bfloat16 v)
{
	return __bfloat162float(v);
}
static __device__ inline float kcu_tof(__half v)
{
	return __half2float(v);
}

template <int N, typename T, typename Ix>
static __device__ inline void kcu_wgather_t(float *o, const T *p, Ix ix)
{
#pragma unroll
	for (int j = 0; j < N; j++) {
		long long i = ix(j);
		float v = kcu_tof(p[i < 0 ? 0 : i]);
		o[j] = i >= 0 ? v : 0.0f;
	}
}

template <int N, typename Ix>
static __device__ inline void kcu_wgather(float *o, const void *w, int dt,
					  Ix ix)
{
	if (dt == KERN_BF16)
		kcu_wgather_t<N>(o, (const __nv_bfloat16 *)w, ix);
	else if (dt == KERN_F32)
		kcu_wgather_t<N>(o, (const float *)w, ix);
	else
		kcu_wgather_t<N>(o, (const __half *)w, ix);
}
static __device__ inline float kcu_sigmoid(float x)
{
	return 1.0f / (1.0f + expf(-x));
}
static __device__ inline float kcu_silu(float x)
{
	return x / (1.0f + expf(-x));
}

/* A block-wide sum in a fixed order (warp shuffles down, then the warps'
 * partials in order by warp 0): the same bits for the same inputs and
 * block size. sh: at least 32 floats. Every thread gets the sum. */
static __device__ inline float kcu_block_sum(float v, float *sh)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_down_sync(0xffffffffu, v, o);
	int w = threadIdx.x >> 5, l = threadIdx.x & 31;
	__syncthreads();
	if (l == 0)
		sh[w] = v;
	__syncthreads();
	int nw = (blockDim.x + 31) >> 5;
	if (w == 0) {
		float s = l < nw ? sh[l] : 0.0f;
		for (int o = 16; o > 0; o >>= 1)
			s += __shfl_down_sync(0xffffffffu, s, o);
		if (l == 0)
			sh[0] = s;
	}
	__syncthreads();
	float r = sh[0];
	__syncthreads();
	return r;
}

static inline int kcu_dtype_ok(int dt)
{
	return dt == KERN_F32 || dt == KERN_BF16 || dt == KERN_F16;
}
static inline int kcu_act_ok(int act)
{
	return act == KERN_ACT_F32 || act == KERN_ACT_BF16;
}

/* ---- the ops, by file ---- */

/* gemm.cu */
int kcu_gemm_init(kern_ctx *c);
void kcu_gemm_fini(kern_ctx *c);
int kcu_matmul(kern_queue *q, float *y, int ldy, const float *x, int ldx,
	       const void *W, int wdt, int T, int N, int K, int act);
int kcu_matmul_swiglu(kern_queue *q, float *y, int ldy, const float *gate,
		      const float *up, int ldgu, const void *W, int wdt, int T,
		      int N, int K, int act);
int kcu_mlp(kern_queue *q, float *y, int ldy, const float *x, int ldx,
	    float *tmp, const void *Wgu, const void *Wd, int wdt, int T, int H,
	    int I, int act);

/* elem.cu */
int kcu_embed(kern_queue *q, float *out, const void *table, int wdt,
	      const int32_t *ids, int T, int H, int V);
int kcu_add(kern_queue *q, float *y, const float *x, size_t n, int act);
int kcu_rmsnorm(kern_queue *q, float *y, int ldy, const float *x, int ldx,
		const void *w, int wdt, int rows, int dim, float eps,
		int plus_one, int act);
int kcu_add_rmsnorm(kern_queue *q, float *h, const float *x, float *y,
		    const void *w, int wdt, int rows, int dim, float eps,
		    int act);
int kcu_gated_rmsnorm(kern_queue *q, float *y, const float *x, const float *z,
		      int ldz, int zg, const void *w, int wdt, int rows,
		      int dim, float eps, int act);
int kcu_conv1d(kern_queue *q, float *out, const float *in, int ldin,
	       float *tail, const void *w, int wdt, int T, int C, int Kc,
	       int act);
int kcu_gdn_gates(kern_queue *q, float *beta, float *g, const float *b,
		  int ldb, const float *a, int lda, const float *A_log,
		  const float *dt_bias, int T, int Hv, int act);
int kcu_l2norm(kern_queue *q, float *x, int ld, int T, int heads, int dim,
	       float eps, float scale, int act);
int kcu_rope(kern_queue *q, float *x, int ld, int T, int heads, int D, int rot,
	     int64_t pos0, float theta, int act);
int kcu_kv_write(kern_queue *q, void *dst, int kvdt, int64_t row0,
		 const float *src, int ld, int T, int width);
int kcu_swiglu(kern_queue *q, float *y, const float *gate, const float *up,
	       size_t n, int act);
int kcu_split_qgate(kern_queue *q, float *qo, float *go, const float *qg,
		    int T, int Hq, int D);
int kcu_sigmoid_mul(kern_queue *q, float *y, const float *x,
		    const float *gate, size_t n, int act);
int kcu_attn_prep(kern_queue *q, float *qo, float *go, const float *qg,
		  const float *k, const float *v, const void *qw,
		  const void *kw, int wdt, void *K, void *V, int kvdt, int T,
		  int Hq, int Hkv, int D, int rot, int64_t pos0, float theta,
		  float eps, int act);
int kcu_gdn_prep(kern_queue *q, float *u, const float *mixed, int ldin,
		 float *tail, const void *cw, int cwdt, int Kc, int Hk, int dk,
		 int Hv, int dv, float eps, float qscale, float *beta, float *g,
		 const float *b, const float *a, int ldba, const float *A_log,
		 const float *dt_bias, int T, int act);
int kcu_fill_random(kern_queue *q, void *dst, int dt, size_t n, uint64_t seed,
		    float lo, float hi);

/* gdn.cu */
void kcu_gdn_fini(kern_ctx *c);
size_t kcu_delta_ws_bytes(kern_ctx *ctx, int T, int Hv, int dk, int dv);
int kcu_delta_chunked(kern_queue *q, float *o, float *S, const float *qq,
		      const float *k, int ldqk, const float *v, int ldv,
		      const float *g, const float *beta, int T, int Hk, int Hv,
		      int dk, int dv, void *ws, int act);
int kcu_delta_recurrent(kern_queue *q, float *o, float *S, const float *qq,
			const float *k, int ldqk, const float *v, int ldv,
			const float *g, const float *beta, int T, int Hk,
			int Hv, int dk, int dv, int act);

/* attn.cu */
/* The split kernel: rows of one launch (T at or below it runs split over
 * the keys when the tensor-core kernel could run too), keys of a split
 * (fixed: a row's splits and their combine do not depend on T, on the
 * window or on a graph's max_len), query heads of one KV head at most. */
#define KCU_SPLIT_ROWS 16
#define KCU_SPLIT_KEYS 64 /* keys of a split; also k_split's threads */
#define KCU_SPLIT_BATCH 4  /* rows of one split launch (the scratch's rows) */
#define KCU_GROUP_MAX 16
size_t kcu_att_part_bytes(const kern_limits *lim);
/* Prefill attention's pieces. kcu_attention cuts a call's rows at the
 * lines of kern_limits.chunk (absolute positions: the model's grid) and
 * gives each piece its own segments of keys (kcu_flash_segs, a rule of
 * the piece's rows, its last key, Hq and the scratch's size), so that a
 * row has the same bits in one call of a forward as in a call a piece.
 * k_flash_wg runs up to KCU_PIECES pieces in one launch; k_flash one. */
#define KCU_PIECES 16
typedef struct kcu_pieces {
	int n;
	int row0[KCU_PIECES + 1]; /* piece p: the call's rows row0[p] ..
				   * row0[p + 1] - 1 */
	int blk0[KCU_PIECES + 1]; /* its first row block of the launch */
	int nseg[KCU_PIECES];	  /* its segments (1: rows written whole) */
	int64_t seg[KCU_PIECES];  /* keys a segment, a multiple of 64 */
	int64_t part[KCU_PIECES]; /* its partials [rows][Hq][nseg][D + 2]:
				   * floats into the context's att_part */
} kcu_pieces;
/* The segments of a piece of T rows whose last key is keys - 1 (and *seg,
 * keys a segment): 1 under graph capture or when the partials would not
 * fit the context's att_part. */
int kcu_flash_segs(const kern_queue *q, int T, int64_t keys, int Hq, int D,
		   int64_t *seg);
/* The segments of pc's pieces (rows 0 .. row0[n] - 1 of a call at pos0)
 * added in order into out [T, Hq, D]; pieces of one segment are skipped
 * (their rows were written whole). k_flash's and k_flash_wg's. */
int kcu_flash_combine(kern_queue *q, float *out, const kcu_pieces *pc,
		      int64_t pos0, int Hq, int D);
int kcu_attention(kern_queue *q, float *out, const float *qv, int ldq,
		  const void *K, const void *V, int kvdt, int T, int64_t pos0,
		  int Hq, int Hkv, int D, float scale, int act);

/* attn_wg.cu: prefill attention on wgmma (sm_90, head dim 256, bf16),
 * taken by kcu_attention where kcu_attn_wg_wanted says so: pc's pieces
 * (n, row0 from 0, nseg, seg, part; blk0 it fills) of a call at pos0 in
 * one launch, then their combine. MOOR_EUNSUP: the driver gave no tensor
 * map for these keys (k_flash runs them). */
int kcu_attn_wg_wanted(const kern_ctx *c, int D);
int kcu_attention_wg(kern_queue *q, float *out, const float *qv, int ldq,
		     const void *K, const void *V, const kcu_pieces *pc,
		     int64_t pos0, int Hq, int Hkv, float scale);

/* sample.cu */
int kcu_sample_reserve(kern_ctx *c, int V);
void kcu_sample_fini(kern_ctx *c);
int kcu_logprobs(kern_queue *q, const float *logits, int V, int32_t tok,
		 int n_top, float *lp, int32_t *ids);
int kcu_sample(kern_queue *q, const float *logits, int V,
	       const kern_sampling *p, uint64_t draw, int32_t *dev_id,
	       int32_t *host_id);

#endif
