/* elem.cu: the CUDA backend's element-wise and per-row ops (ops.h): embed,
 * add, the norms, conv1d, the GDN gates, rope, kv_write, SwiGLU, the q/gate
 * split, the output gate and fill_random.
 *
 * Reductions (a row's sum of squares) run in one fixed order per row
 * length and block size: each thread sums its strided elements in order,
 * then kcu_block_sum or a warp's shuffle tree combines them. Arithmetic
 * follows the CPU backend's order of operations where it states one; the
 * two agree within the kernel tests' tolerances, not bit for bit (fused
 * multiply-adds, libdevice's expf/cosf/powf). */
#include "cuda.cuh"

#include "sample_rule.h"

#include <stdlib.h>
#include <string.h>

#define TPB 256

static unsigned grid1(size_t n)
{
	unsigned b = kcu_blocks(n, TPB);
	return b > 262140u ? 262140u : b;
}

#define FOR_N(i, n)                                                            \
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); \
	     i += (size_t)gridDim.x * blockDim.x)

/* ---- embed ---- */

static __global__ void k_embed(float *out, const void *tab, int wdt,
			       const int32_t *ids, int T, int H, int V)
{
	kcu_pdl_enter();
	FOR_N(i, (size_t)T * H)
	{
		size_t t = i / H, h = i % H;
		int32_t id = ids[t];
		out[i] = id >= 0 && id < V ? kcu_wget(tab, wdt, (size_t)id * H + h)
					   : 0.0f;
	}
}

int kcu_embed(kern_queue *q, float *out, const void *table, int wdt,
	      const int32_t *ids, int T, int H, int V)
{
	if (!q || !out || !table || !ids || T < 0 || H < 0 || V <= 0)
		return MOOR_ERANGE;
	if (!kcu_dtype_ok(wdt))
		return MOOR_EDTYPE;
	if (T == 0 || H == 0)
		return 0;
	size_t n = (size_t)T * H;
	kcu_go(q, k_embed, grid1(n), TPB, 0, out, table, wdt, ids, T, H, V);
	KCU_LAUNCHED(q->ctx);
	return 0;
}

/* ---- element-wise ---- */

enum { EW_ADD, EW_SWIGLU, EW_SIGMUL };

static __global__ void k_ew(float *y, const float *a, const float *b, size_t n,
			    int op, int act)
{
	kcu_pdl_enter();
	FOR_N(i, n)
	{
		float r;
		if (op == EW_ADD)
			r = kcu_rnd(y[i] + a[i], act);
		else if (op == EW_SWIGLU)
			r = kcu_rnd(kcu_rnd(kcu_silu(a[i]), act) * b[i], act);
		else
			r = kcu_rnd(a[i] * kcu_rnd(kcu_sigmoid(b[i]), act), act);
		y[i] = r;
	}
}

static int ew(kern_queue *q, float *y, const float *a, const float *b,
	      size_t n, int op, int act)
{
	if (!q || (n && (!y || !a || (op != EW_ADD && !b))))
		return MOOR_ERANGE;
	if (!kcu_act_ok(act))
		return MOOR_EDTYPE;
	if (n == 0)
		return 0;
	kcu_go(q, k_ew, grid1(n), TPB, 0, y, a, b, n, op, act);
	KCU_LAUNCHED(q->ctx);
	return 0;
}

int kcu_add(kern_queue *q, float *y, const float *x, size_t n, int act)
{
	return ew(q, y, x, NULL, n, EW_ADD, act);
}

int kcu_swiglu(kern_queue *q, float *y, const float *gate, const float *up,
	       size_t n, int act)
{
	return ew(q, y, gate, up, n, EW_SWIGLU, act);
}

int kcu_sigmoid_mul(kern_queue *q, float *y, const float *x,
		    const float *gate, size_t n, int act)
{
	return ew(q, y, x, gate, n, EW_SIGMUL, act);
}

/* ---- rmsnorm, add_rmsnorm: a block per row ---- */

/* A thread's elements are i = tid + blockDim.x j, summed in order of j,
 * then kcu_block_sum: one order per (dim, block size). k_rmsnorm_reg
 * keeps a row's VPT elements a thread in registers, every load issued
 * before any arithmetic (x, h and w all in flight at once; a branch
 * between them, as a runtime `add` or kcu_wget's dtype test an element
 * makes, kept them one at a time: 20 us of latency for a decode step's
 * 5,120-wide add + norm on the H100, ncu). The weights depend on no
 * earlier kernel: they load before the programmatic wait. k_rmsnorm
 * loops, for rows wider than RMS_REG_MAX. Both sum in the same order. */
template <int VPT, bool ADD>
static __global__ void k_rmsnorm_reg(float *y, int ldy, float *h,
				     const float *x, int ldx, const void *w,
				     int wdt, int dim, float eps, int plus_one,
				     int act)
{
	kcu_pdl_release();
	__shared__ float sh[32];
	size_t r = blockIdx.x;
	float *hr = ADD ? h + r * dim : NULL;
	const float *xr = x + r * (size_t)ldx;
	float *yr = y + r * (size_t)ldy;
	const int bd = blockDim.x, tid = threadIdx.x;
	float v[VPT], hv[VPT], wv[VPT];
	kcu_wgather<VPT>(wv, w, wdt, [&](int j) {
		int i = tid + bd * j;
		return i < dim ? (long long)i : -1LL;
	});
	kcu_pdl_wait();
#pragma unroll
	for (int j = 0; j < VPT; j++) {
		int i = tid + bd * j;
		v[j] = kcu_ldz(xr, i, i < dim);
		if (ADD)
			hv[j] = kcu_ldz(hr, i, i < dim);
	}
	float ss = 0.0f;
#pragma unroll
	for (int j = 0; j < VPT; j++) {
		int i = tid + bd * j;
		if (ADD)
			v[j] = kcu_rnd(hv[j] + v[j], act);
		if (i < dim) {
			if (ADD)
				hr[i] = v[j];
			ss += v[j] * v[j];
		}
	}
	ss = kcu_block_sum(ss, sh);
	float inv = 1.0f / sqrtf(ss / (float)dim + eps);
#pragma unroll
	for (int j = 0; j < VPT; j++) {
		int i = tid + bd * j;
		if (i < dim) {
			float ww = plus_one ? 1.0f + wv[j] : wv[j];
			yr[i] = kcu_rnd((v[j] * inv) * ww, act);
		}
	}
}

static __global__ void k_rmsnorm(float *y, int ldy, float *h, const float *x,
				 int ldx, const void *w, int wdt, int dim,
				 float eps, int plus_one, int act, int add)
{
	kcu_pdl_enter();
	__shared__ float sh[32];
	size_t r = blockIdx.x;
	float *hr = h ? h + r * dim : NULL;
	const float *xr = x + r * (size_t)ldx;
	float *yr = y + r * (size_t)ldy;
	float ss = 0.0f;
	for (int i = threadIdx.x; i < dim; i += blockDim.x) {
		float v = add ? kcu_rnd(hr[i] + xr[i], act) : xr[i];
		if (add)
			hr[i] = v;
		ss += v * v;
	}
	ss = kcu_block_sum(ss, sh);
	float inv = 1.0f / sqrtf(ss / (float)dim + eps);
	const float *src = add ? hr : xr;
	for (int i = threadIdx.x; i < dim; i += blockDim.x) {
		float wv = kcu_wget(w, wdt, (size_t)i);
		if (plus_one)
			wv = 1.0f + wv;
		yr[i] = kcu_rnd((src[i] * inv) * wv, act);
	}
}

/* Rows of at least RMS_V4_MIN floats (the hidden size's norms; a head's
 * norms keep k_rmsnorm_reg, whose order k_attn_prep repeats) whose
 * pointers and strides allow it run k_rmsnorm_v4: the same arithmetic
 * in float4s, a thread's float4s i = tid + blockDim.x j summed in order
 * of j and within each in order x, y, z, w, then kcu_block_sum: one order
 * per (dim, block size), another than k_rmsnorm_reg's, so MOOR_NORM_V4=0
 * (read at each call, for bench_kern's A/B) keeps the scalar kernels.
 * The loads of x and h are a quarter of the scalar kernel's
 * instructions, all in flight at once as there. */
#define RMS_V4_MIN 1024

/* 4 weights from element 4 i on (8- or 16-byte aligned) as floats */
static __device__ inline float4 w4_at(const void *w, int wdt, int i)
{
	if (wdt == KERN_F32)
		return __ldg((const float4 *)w + i);
	uint2 u = __ldg((const uint2 *)w + i);
	if (wdt == KERN_BF16) {
		const __nv_bfloat16 *e = (const __nv_bfloat16 *)&u;
		return make_float4(__bfloat162float(e[0]), __bfloat162float(e[1]),
				   __bfloat162float(e[2]), __bfloat162float(e[3]));
	}
	const __half *e = (const __half *)&u;
	return make_float4(__half2float(e[0]), __half2float(e[1]),
			   __half2float(e[2]), __half2float(e[3]));
}

static __device__ inline float4 f4_rnd(float4 v, int act)
{
	return make_float4(kcu_rnd(v.x, act), kcu_rnd(v.y, act),
			   kcu_rnd(v.z, act), kcu_rnd(v.w, act));
}

template <int V4, bool ADD>
static __global__ void k_rmsnorm_v4(float *y, int ldy, float *h,
				    const float *x, int ldx, const void *w,
				    int wdt, int dim, float eps, int plus_one,
				    int act)
{
	kcu_pdl_release();
	__shared__ float sh[32];
	const size_t r = blockIdx.x;
	const int d4 = dim >> 2, bd = blockDim.x, tid = threadIdx.x;
	float4 *hr = ADD ? (float4 *)(h + r * dim) : NULL;
	const float4 *xr = (const float4 *)(x + r * (size_t)ldx);
	float4 *yr = (float4 *)(y + r * (size_t)ldy);
	float4 v[V4], hv[V4], wv[V4];
#pragma unroll
	for (int j = 0; j < V4; j++) {
		int i = tid + bd * j;
		wv[j] = w4_at(w, wdt, i < d4 ? i : 0);
	}
	kcu_pdl_wait();
#pragma unroll
	for (int j = 0; j < V4; j++) {
		int i = tid + bd * j;
		v[j] = xr[i < d4 ? i : 0];
		if (ADD)
			hv[j] = hr[i < d4 ? i : 0];
	}
	float ss = 0.0f;
#pragma unroll
	for (int j = 0; j < V4; j++) {
		int i = tid + bd * j;
		if (i < d4) {
			if (ADD) {
				v[j] = f4_rnd(make_float4(hv[j].x + v[j].x,
							  hv[j].y + v[j].y,
							  hv[j].z + v[j].z,
							  hv[j].w + v[j].w),
					      act);
				hr[i] = v[j];
			}
			ss += v[j].x * v[j].x;
			ss += v[j].y * v[j].y;
			ss += v[j].z * v[j].z;
			ss += v[j].w * v[j].w;
		}
	}
	ss = kcu_block_sum(ss, sh);
	const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
#pragma unroll
	for (int j = 0; j < V4; j++) {
		int i = tid + bd * j;
		if (i < d4) {
			float4 ww = wv[j];
			if (plus_one)
				ww = make_float4(1.0f + ww.x, 1.0f + ww.y,
						 1.0f + ww.z, 1.0f + ww.w);
			yr[i] = f4_rnd(make_float4((v[j].x * inv) * ww.x,
						   (v[j].y * inv) * ww.y,
						   (v[j].z * inv) * ww.z,
						   (v[j].w * inv) * ww.w),
				       act);
		}
	}
}

/* Whether a norm of these rows can run k_rmsnorm_v4 (RMS_V4_MIN). */
static int rms_v4_ok(const float *y, int ldy, const float *h, const float *x,
		     int ldx, const void *w, int wdt, int dim)
{
	uintptr_t a = (uintptr_t)y | (uintptr_t)x | (uintptr_t)h;
	uintptr_t wa = wdt == KERN_F32 ? 15 : 7;
	return kcu_env_flag("MOOR_NORM_V4", 1) && dim >= RMS_V4_MIN && dim % 4 == 0 &&
	       dim / 4 <= 8 * 256 && ldy % 4 == 0 && ldx % 4 == 0 &&
	       (a & 15) == 0 && ((uintptr_t)w & wa) == 0;
}

static unsigned row_threads(int dim)
{
	unsigned t = 32;
	while (t < (unsigned)dim && t < 256)
		t <<= 1;
	return t;
}

#define RMS_REG_MAX (32 * 256) /* widest row k_rmsnorm_reg holds */

/* The kernel K<V, add> (k_rmsnorm_reg or k_rmsnorm_v4) for n values a
 * thread in NT threads where n <= V */
#define RMS_CASE(K, n, NT, V)                                                  \
	if (n <= V) {                                                          \
		if (add)                                                       \
			kcu_go(q, K<V, true>, rows, NT, 0, y, ldy, h, x, ldx,  \
			       w, wdt, dim, eps, plus_one, act);               \
		else                                                           \
			kcu_go(q, K<V, false>, rows, NT, 0, y, ldy, h, x, ldx, \
			       w, wdt, dim, eps, plus_one, act);               \
		KCU_LAUNCHED(q->ctx);                                          \
		return 0;                                                      \
	}

static int rms_launch(kern_queue *q, float *y, int ldy, float *h,
		      const float *x, int ldx, const void *w, int wdt,
		      int rows, int dim, float eps, int plus_one, int act,
		      int add)
{
	if (rms_v4_ok(y, ldy, h, x, ldx, w, wdt, dim)) {
		unsigned nt4 = row_threads(dim / 4);
		int v4 = (int)((dim / 4 + nt4 - 1) / nt4);
		RMS_CASE(k_rmsnorm_v4, v4, nt4, 1)
		RMS_CASE(k_rmsnorm_v4, v4, nt4, 2)
		RMS_CASE(k_rmsnorm_v4, v4, nt4, 3)
		RMS_CASE(k_rmsnorm_v4, v4, nt4, 4)
		RMS_CASE(k_rmsnorm_v4, v4, nt4, 5)
		RMS_CASE(k_rmsnorm_v4, v4, nt4, 6)
		RMS_CASE(k_rmsnorm_v4, v4, nt4, 8)
	}
	unsigned nt = row_threads(dim);
	int vpt = (int)((dim + nt - 1) / nt);
	if (dim <= RMS_REG_MAX) {
		RMS_CASE(k_rmsnorm_reg, vpt, nt, 1)
		RMS_CASE(k_rmsnorm_reg, vpt, nt, 2)
		RMS_CASE(k_rmsnorm_reg, vpt, nt, 4)
		RMS_CASE(k_rmsnorm_reg, vpt, nt, 8)
		RMS_CASE(k_rmsnorm_reg, vpt, nt, 16)
		RMS_CASE(k_rmsnorm_reg, vpt, nt, 24)
		RMS_CASE(k_rmsnorm_reg, vpt, nt, 32)
	}
	kcu_go(q, k_rmsnorm, rows, nt, 0, y, ldy, h, x, ldx, w, wdt, dim, eps,
	       plus_one, act, add);
	KCU_LAUNCHED(q->ctx);
	return 0;
}

int kcu_rmsnorm(kern_queue *q, float *y, int ldy, const float *x, int ldx,
		const void *w, int wdt, int rows, int dim, float eps,
		int plus_one, int act)
{
	if (!q || !y || !x || !w || rows < 0 || dim < 0 || ldx < dim ||
	    ldy < dim)
		return MOOR_ERANGE;
	if (!kcu_dtype_ok(wdt) || !kcu_act_ok(act))
		return MOOR_EDTYPE;
	if (rows == 0 || dim == 0)
		return 0;
	return rms_launch(q, y, ldy, NULL, x, ldx, w, wdt, rows, dim, eps,
			  plus_one, act, 0);
}

int kcu_add_rmsnorm(kern_queue *q, float *h, const float *x, float *y,
		    const void *w, int wdt, int rows, int dim, float eps,
		    int act)
{
	if (!q || !h || !x || !y || !w || rows < 0 || dim < 0)
		return MOOR_ERANGE;
	if (!kcu_dtype_ok(wdt) || !kcu_act_ok(act))
		return MOOR_EDTYPE;
	if (rows == 0 || dim == 0)
		return 0;
	return rms_launch(q, y, dim, h, x, dim, w, wdt, rows, dim, eps, 1, act,
			  1);
}

/* ---- per-head rows: a warp per row ---- */

static __device__ inline float warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* A warp a row; lane l takes elements l, l + 32, ... in order. NV > 0:
 * the row's NV elements a lane in registers, every load in flight at once
 * (the weights before the programmatic wait: see k_rmsnorm_reg); NV = 0:
 * loops, for rows wider than 32 * 8. The same sums either way. */
template <int NV>
static __global__ void k_gated_rmsnorm(float *y, const float *x,
				       const float *z, int ldz, int zg,
				       const void *w, int wdt, int rows, int dim,
				       float eps, int act)
{
	kcu_pdl_release();
	int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	int l = threadIdx.x & 31;
	if (r >= rows)
		return;
	const float *xr = x + (size_t)r * dim;
	const float *zr = z + (size_t)(r / zg) * ldz + (size_t)(r % zg) * dim;
	float *yr = y + (size_t)r * dim;
	if (NV == 0) {
		kcu_pdl_wait();
		float ss = 0.0f;
		for (int i = l; i < dim; i += 32)
			ss += xr[i] * xr[i];
		ss = warp_sum(ss);
		float inv = 1.0f / sqrtf(ss / (float)dim + eps);
		for (int i = l; i < dim; i += 32) {
			float n = kcu_rnd(xr[i] * inv, act);
			float p = kcu_rnd(kcu_wget(w, wdt, (size_t)i) * n, act);
			yr[i] = kcu_rnd(p * kcu_silu(zr[i]), act);
		}
		return;
	}
	constexpr int N = NV > 0 ? NV : 1;
	float wv[N], xv[N], zv[N];
	kcu_wgather<N>(wv, w, wdt, [&](int j) {
		int i = l + 32 * j;
		return i < dim ? (long long)i : -1LL;
	});
	kcu_pdl_wait();
#pragma unroll
	for (int j = 0; j < N; j++) {
		int i = l + 32 * j;
		xv[j] = kcu_ldz(xr, i, i < dim);
		zv[j] = kcu_ldz(zr, i, i < dim);
	}
	float ss = 0.0f;
#pragma unroll
	for (int j = 0; j < N; j++)
		if (l + 32 * j < dim)
			ss += xv[j] * xv[j];
	ss = warp_sum(ss);
	float inv = 1.0f / sqrtf(ss / (float)dim + eps);
#pragma unroll
	for (int j = 0; j < N; j++) {
		int i = l + 32 * j;
		if (i < dim) {
			float n = kcu_rnd(xv[j] * inv, act);
			float p = kcu_rnd(wv[j] * n, act);
			yr[i] = kcu_rnd(p * kcu_silu(zv[j]), act);
		}
	}
}

#define GRN_CASE(V)                                                            \
	if (nv <= V) {                                                         \
		kcu_go(q, k_gated_rmsnorm<V>, blocks, 256, 0, y, x, z, ldz,   \
		       zg, w, wdt, rows, dim, eps, act);                       \
		KCU_LAUNCHED(q->ctx);                                          \
		return 0;                                                      \
	}

int kcu_gated_rmsnorm(kern_queue *q, float *y, const float *x, const float *z,
		      int ldz, int zg, const void *w, int wdt, int rows,
		      int dim, float eps, int act)
{
	if (!q || !y || !x || !z || !w || rows < 0 || dim < 0 || zg < 1 ||
	    (int64_t)ldz < (int64_t)zg * dim)
		return MOOR_ERANGE;
	if (!kcu_dtype_ok(wdt) || !kcu_act_ok(act))
		return MOOR_EDTYPE;
	if (rows == 0 || dim == 0)
		return 0;
	unsigned blocks = (unsigned)((rows + 7) / 8);
	int nv = (dim + 31) / 32;
	GRN_CASE(1)
	GRN_CASE(2)
	GRN_CASE(4)
	GRN_CASE(8)
	kcu_go(q, k_gated_rmsnorm<0>, blocks, 256, 0, y, x, z, ldz, zg, w,
	       wdt, rows, dim, eps, act);
	KCU_LAUNCHED(q->ctx);
	return 0;
}

static __global__ void k_l2norm(float *x, int ld, int T, int heads, int dim,
				float eps, float scale, int act)
{
	kcu_pdl_enter();
	int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	int l = threadIdx.x & 31;
	if (r >= T * heads)
		return;
	float *xr = x + (size_t)(r / heads) * ld + (size_t)(r % heads) * dim;
	float ss = 0.0f;
	for (int i = l; i < dim; i += 32)
		ss += xr[i] * xr[i];
	ss = warp_sum(ss);
	float inv = 1.0f / sqrtf(ss + eps);
	for (int i = l; i < dim; i += 32)
		xr[i] = kcu_rnd(xr[i] * inv, act) * scale;
}

int kcu_l2norm(kern_queue *q, float *x, int ld, int T, int heads, int dim,
	       float eps, float scale, int act)
{
	if (!q || !x || T < 0 || heads < 0 || dim < 0 ||
	    (int64_t)ld < (int64_t)heads * dim)
		return MOOR_ERANGE;
	if (!kcu_act_ok(act))
		return MOOR_EDTYPE;
	if (T == 0 || heads == 0 || dim == 0)
		return 0;
	int rows = T * heads;
	kcu_go(q, k_l2norm, (rows + 7) / 8, 256, 0, x, ld, T, heads, dim, eps,
	       scale, act);
	KCU_LAUNCHED(q->ctx);
	return 0;
}

/* ---- conv1d: a thread per (channel, tile of CONV_TT tokens) ----
 *
 * Each output reads its Kc - 1 inputs before it from in (or from the tail
 * before token 0), so the tiles are independent. The thread of tile 0 is
 * the only one that reads the channel's tail, and it writes the new tail
 * after (from in, or from the old tail it holds when T < Kc - 1): no two
 * threads touch one channel's tail. */

#define CONV_KMAX 16
#define CONV_TT 16

/* The conv of channel c over the tile's tokens ta .. tb - 1, KM taps a
 * loop (Kc of them live), weights wt: emit(i, t, y) takes token t = ta +
 * i's output. Tile 0's thread (blockIdx.y 0) then writes the channel's
 * new tail. k_conv1d and gdn_prep's prefill kernel share it. */
template <int KM, typename Emit>
static __device__ inline void conv_tile(const float *in, int ldin,
					float *tail, const float *wt, int Kc,
					int T, int C, int c, int ta, int tb,
					int act, Emit emit)
{
	float win[KM]; /* the Kc - 1 inputs before t */
#pragma unroll
	for (int k = 0; k < KM; k++) {
		/* input ta - (Kc - 1) + k */
		int t = ta - (Kc - 1) + k;
		win[k] = k >= Kc - 1 ? 0.0f
		       : t >= 0	     ? in[(size_t)t * ldin + c]
				     : tail[(size_t)(t + Kc - 1) * C + c];
	}
	/* the tile's inputs loaded at once (in flight together: one at a
	 * time, the loads' latency was most of the kernel's time; kcu_ldz,
	 * a load no branch goes around: bench_gpu --profile 1 had it at 127 us a
	 * 1,024-token chunk of the 27B's 10,240 channels on the H100) */
	float xin[CONV_TT];
#pragma unroll
	for (int i = 0; i < CONV_TT; i++)
		xin[i] = kcu_ldz(in + c, (long long)(ta + i) * ldin, ta + i < tb);
#pragma unroll
	for (int i = 0; i < CONV_TT; i++) {
		const int t = ta + i;
		if (t >= tb)
			break;
		float cur = xin[i];
		float acc = 0.0f;
#pragma unroll
		for (int k = 0; k < KM; k++)
			if (k < Kc)
				acc += wt[k] * (k < Kc - 1 ? win[k] : cur);
		emit(i, t, kcu_rnd(kcu_silu(kcu_rnd(acc, act)), act));
#pragma unroll
		for (int k = 0; k + 1 < KM; k++)
			if (k + 1 < Kc - 1)
				win[k] = win[k + 1];
#pragma unroll
		for (int k = 0; k < KM; k++)
			if (k == Kc - 2)
				win[k] = cur;
	}
	if (blockIdx.y != 0)
		return;
	/* the new tail: inputs T - (Kc - 1) .. T - 1 */
	float old[KM];
#pragma unroll
	for (int k = 0; k < KM; k++)
		old[k] = k < Kc - 1 ? tail[(size_t)k * C + c] : 0.0f;
#pragma unroll
	for (int k = 0; k < KM; k++)
		if (k < Kc - 1) {
			int t = T - (Kc - 1) + k;
			float x = 0.0f;
			if (t >= 0)
				x = in[(size_t)t * ldin + c];
			else
#pragma unroll
				for (int j = 0; j < KM; j++)
					if (j == t + Kc - 1)
						x = old[j];
			tail[(size_t)k * C + c] = x;
		}
}

/* KC > 0: the kernel of a KC-tap conv (Qwen3.5's 4), its loops and
 * windows sized at compile time; KC = 0: any Kc up to CONV_KMAX, every
 * tap loop run to CONV_KMAX under a runtime test (the generic kernel took
 * 127 to 154 us a 1,024-token chunk of the 27B's 10,240 channels on the
 * H100, 5x the time its bytes take). The same sums in the same order. */
template <int KC>
static __global__ void k_conv1d(float *out, const float *in, int ldin,
				float *tail, const void *w, int wdt, int T,
				int C, int kc_rt, int act)
{
	kcu_pdl_enter();
	constexpr int KM = KC > 0 ? KC : CONV_KMAX; /* taps a loop runs */
	const int Kc = KC > 0 ? KC : kc_rt;
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= C)
		return;
	const int ta = blockIdx.y * CONV_TT;
	const int tb = ta + CONV_TT < T ? ta + CONV_TT : T;
	float wt[KM];
	kcu_wgather<KM>(wt, w, wdt, [&](int k) {
		return k < Kc ? (long long)c * Kc + k : -1LL;
	});
	conv_tile<KM>(in, ldin, tail, wt, Kc, T, C, c, ta, tb, act,
		      [&](int, int t, float y) { out[(size_t)t * C + c] = y; });
}

int kcu_conv1d(kern_queue *q, float *out, const float *in, int ldin,
	       float *tail, const void *w, int wdt, int T, int C, int Kc,
	       int act)
{
	if (!q || !out || !in || !w || (Kc > 1 && !tail) || T < 0 || C < 0 ||
	    Kc < 1 || Kc > CONV_KMAX || ldin < C ||
	    (T + CONV_TT - 1) / CONV_TT > 65535)
		return MOOR_ERANGE;
	if (!kcu_dtype_ok(wdt) || !kcu_act_ok(act))
		return MOOR_EDTYPE;
	if (T == 0 || C == 0)
		return 0;
	dim3 gr(kcu_blocks((size_t)C, 128), (T + CONV_TT - 1) / CONV_TT);
	/* the 4-tap kernel where Kc is 4; MOOR_CONV_KC=0 (read at each
	 * call) the generic one: the same bits (case_conv_kc). bench_gpu on
	 * an H100: a 32k prefill 4.18 s against 4.30 */
	if (Kc == 4 && kcu_env_flag("MOOR_CONV_KC", 1))
		kcu_go(q, k_conv1d<4>, gr, 128, 0, out, in, ldin, tail, w, wdt,
		       T, C, Kc, act);
	else
		kcu_go(q, k_conv1d<0>, gr, 128, 0, out, in, ldin, tail, w, wdt,
		       T, C, Kc, act);
	KCU_LAUNCHED(q->ctx);
	return 0;
}

/* ---- gdn_gates ---- */

/* One (token, head)'s gates: beta = sigmoid(b) at the activation's
 * precision, g = -e^A_log softplus(a + dt_bias) (softplus is x past 20).
 * k_gates, k_gdn_prep and k_gdn_prep_pf all call this: their bits are the
 * same by construction. */
static __device__ inline void gdn_gate(float *beta, float *g, float b, float a,
				       float A_log, float dt_bias, int act)
{
	const float x = a + dt_bias;
	const float sp = x > 20.0f ? x : log1pf(expf(x));
	*beta = kcu_rnd(kcu_sigmoid(b), act);
	*g = -expf(A_log) * sp;
}

static __global__ void k_gates(float *beta, float *g, const float *b, int ldb,
			       const float *a, int lda, const float *A_log,
			       const float *dt_bias, int T, int Hv, int act)
{
	kcu_pdl_enter();
	FOR_N(i, (size_t)T * Hv)
	{
		size_t t = i / Hv, h = i % Hv;
		gdn_gate(beta + i, g + i, b[t * ldb + h], a[t * lda + h],
			 A_log[h], dt_bias[h], act);
	}
}

int kcu_gdn_gates(kern_queue *q, float *beta, float *g, const float *b,
		  int ldb, const float *a, int lda, const float *A_log,
		  const float *dt_bias, int T, int Hv, int act)
{
	if (!q || !beta || !g || !b || !a || !A_log || !dt_bias || T < 0 ||
	    Hv < 0 || ldb < Hv || lda < Hv)
		return MOOR_ERANGE;
	if (!kcu_act_ok(act))
		return MOOR_EDTYPE;
	size_t n = (size_t)T * Hv;
	if (n == 0)
		return 0;
	kcu_go(q, k_gates, grid1(n), TPB, 0, beta, g, b, ldb, a, lda, A_log,
	       dt_bias, T, Hv, act);
	KCU_LAUNCHED(q->ctx);
	return 0;
}

/* ---- rope ---- */

static __global__ void k_rope(float *x, int ld, int T, int heads, int D,
			      int half, const int64_t *dpos, int64_t padd,
			      float theta, int act)
{
	kcu_pdl_enter();
	FOR_N(e, (size_t)T * heads * half)
	{
		size_t i = e % half, th = e / half;
		size_t t = th / heads, h = th % heads;
		float p = (float)(kcu_pos(dpos, padd) + (int64_t)t);
		float inv =
		    1.0f / powf(theta, (float)(2 * (int)i) / (float)(2 * half));
		float a = inv * p;
		float cs = kcu_rnd(cosf(a), act), sn = kcu_rnd(sinf(a), act);
		float *xh = x + t * ld + h * D;
		float x1 = xh[i], x2 = xh[i + half];
		xh[i] = kcu_rnd(kcu_rnd(x1 * cs, act) - kcu_rnd(x2 * sn, act), act);
		xh[i + half] =
		    kcu_rnd(kcu_rnd(x2 * cs, act) + kcu_rnd(x1 * sn, act), act);
	}
}

int kcu_rope(kern_queue *q, float *x, int ld, int T, int heads, int D, int rot,
	     int64_t pos0, float theta, int act)
{
	if (!q || !x || T < 0 || heads < 0 || D < 0 || rot < 0 || rot > D ||
	    rot % 2 || pos0 < 0 || (int64_t)ld < (int64_t)heads * D)
		return MOOR_ERANGE;
	if (!kcu_act_ok(act))
		return MOOR_EDTYPE;
	size_t n = (size_t)T * heads * (rot / 2);
	if (n == 0)
		return 0;
	kcu_go(q, k_rope, grid1(n), TPB, 0, x, ld, T, heads, D, rot / 2,
	       kcu_dpos(q), kcu_padd(q, pos0), theta, act);
	KCU_LAUNCHED(q->ctx);
	return 0;
}

/* ---- kv_write, split_qgate ---- */

static __global__ void k_kv_write(void *dst, int kvdt, const int64_t *dpos,
				  int64_t padd, const float *src, int ld, int T,
				  int width)
{
	kcu_pdl_enter();
	int64_t row0 = kcu_pos(dpos, padd);
	FOR_N(i, (size_t)T * width)
	{
		size_t t = i / width, j = i % width;
		size_t o = ((size_t)row0 + t) * width + j;
		float v = src[t * ld + j];
		if (kvdt == KERN_F32)
			((float *)dst)[o] = v;
		else if (kvdt == KERN_BF16)
			((__nv_bfloat16 *)dst)[o] = __float2bfloat16_rn(v);
		else
			((__half *)dst)[o] = __float2half_rn(v);
	}
}

int kcu_kv_write(kern_queue *q, void *dst, int kvdt, int64_t row0,
		 const float *src, int ld, int T, int width)
{
	if (!q || !dst || !src || row0 < 0 || T < 0 || width < 0 || ld < width)
		return MOOR_ERANGE;
	if (!kcu_dtype_ok(kvdt))
		return MOOR_EDTYPE;
	size_t n = (size_t)T * width;
	if (n == 0)
		return 0;
	kcu_go(q, k_kv_write, grid1(n), TPB, 0, dst, kvdt, kcu_dpos(q),
	       kcu_padd(q, row0), src, ld, T, width);
	KCU_LAUNCHED(q->ctx);
	return 0;
}

static __global__ void k_split(float *qo, float *go, const float *qg, int Hq,
			       int D, size_t n)
{
	kcu_pdl_enter();
	FOR_N(i, n)
	{
		size_t r = i / D, d = i % D;
		qo[i] = qg[r * 2 * D + d];
		go[i] = qg[r * 2 * D + D + d];
	}
}

int kcu_split_qgate(kern_queue *q, float *qo, float *go, const float *qg,
		    int T, int Hq, int D)
{
	if (!q || !qo || !go || !qg || T < 0 || Hq < 0 || D < 0)
		return MOOR_ERANGE;
	size_t n = (size_t)T * Hq * D;
	if (n == 0)
		return 0;
	kcu_go(q, k_split, grid1(n), TPB, 0, qo, go, qg, Hq, D, n);
	KCU_LAUNCHED(q->ctx);
	return 0;
}

/* ---- the fused prologues (ops.h attn_prep, gdn_prep) ----
 *
 * Each is the unfused ops' arithmetic, expression for expression, in one
 * launch: a decode step is some 900 launches, and these replace 7 a
 * full-attention layer and 4 a GDN layer; in a prefill chunk they save
 * passes through memory. The tests hold them to the unfused ops by
 * memcmp. */

/* MOOR_DEC_FUSE=0 refuses both at T = 1 (kcu_dec_fuse_on), MOOR_PF_FUSE=0
 * at T > 1 (kcu_pf_fuse_on): the unfused ops then run, for a benchmark's
 * side by side. */

static __device__ inline void kv_put(void *dst, int kvdt, size_t o, float v)
{
	if (kvdt == KERN_F32)
		((float *)dst)[o] = v;
	else if (kvdt == KERN_BF16)
		((__nv_bfloat16 *)dst)[o] = __float2bfloat16_rn(v);
	else
		((__half *)dst)[o] = __float2half_rn(v);
}

/* grid (Hq + Hkv, T), row_threads(D) threads (D <= 256: one element a
 * thread, as k_rmsnorm_reg<1> at that width): block h < Hq is query head
 * h (split_qgate, rmsnorm, rope into qo; the gate into go), block Hq + h
 * is KV head h (rmsnorm and rope of k, into K's row; v into V's). */
static __global__ void
k_attn_prep(float *qo, float *go, const float *qg, const float *k,
	    const float *v, const void *qw, const void *kw, int wdt, void *K,
	    void *V, int kvdt, const int64_t *dpos, int64_t padd, int Hq,
	    int Hkv, int D, int half, float theta, float eps, int act)
{
	kcu_pdl_enter();
	__shared__ float sh[32];
	__shared__ float row[256];
	const int hh = blockIdx.x, t = blockIdx.y, i = threadIdx.x;
	const int isq = hh < Hq, h = isq ? hh : hh - Hq;
	const float *src = isq ? qg + ((size_t)t * Hq + h) * 2 * D
			       : k + ((size_t)t * Hkv + h) * D;
	float x = 0.0f, wv = 0.0f;
	if (i < D) {
		x = src[i];
		wv = kcu_wget(isq ? qw : kw, wdt, (size_t)i);
		if (isq)
			go[((size_t)t * Hq + h) * D + i] = src[D + i];
	}
	float ss = 0.0f;
	if (i < D)
		ss += x * x;
	ss = kcu_block_sum(ss, sh);
	float inv = 1.0f / sqrtf(ss / (float)D + eps);
	if (i < D) {
		float ww = 1.0f + wv;
		row[i] = kcu_rnd((x * inv) * ww, act);
	}
	__syncthreads();
	const int64_t pos = kcu_pos(dpos, padd) + (int64_t)t;
	if (i < half) {
		float p = (float)pos;
		float invf =
		    1.0f / powf(theta, (float)(2 * i) / (float)(2 * half));
		float a = invf * p;
		float cs = kcu_rnd(cosf(a), act), sn = kcu_rnd(sinf(a), act);
		float x1 = row[i], x2 = row[i + half];
		row[i] =
		    kcu_rnd(kcu_rnd(x1 * cs, act) - kcu_rnd(x2 * sn, act), act);
		row[i + half] =
		    kcu_rnd(kcu_rnd(x2 * cs, act) + kcu_rnd(x1 * sn, act), act);
	}
	__syncthreads();
	if (i >= D)
		return;
	if (isq) {
		qo[((size_t)t * Hq + h) * D + i] = row[i];
		return;
	}
	size_t o = ((size_t)pos * Hkv + h) * D + i;
	kv_put(K, kvdt, o, row[i]);
	kv_put(V, kvdt, o, v[((size_t)t * Hkv + h) * D + i]);
}

int kcu_attn_prep(kern_queue *q, float *qo, float *go, const float *qg,
		  const float *k, const float *v, const void *qw,
		  const void *kw, int wdt, void *K, void *V, int kvdt, int T,
		  int Hq, int Hkv, int D, int rot, int64_t pos0, float theta,
		  float eps, int act)
{
	if (!q || !qo || !go || !qg || !k || !v || !qw || !kw || !K || !V ||
	    T < 0 || Hq <= 0 || Hkv <= 0 || D <= 0 || rot < 0 || rot > D ||
	    rot % 2 || pos0 < 0)
		return MOOR_ERANGE;
	if (!kcu_dtype_ok(wdt) || !kcu_dtype_ok(kvdt) || !kcu_act_ok(act))
		return MOOR_EDTYPE;
	if (D > 256 || T > 65535 ||
	    !(T == 1 ? kcu_dec_fuse_on() : kcu_pf_fuse_on()))
		return MOOR_EUNSUP; /* the unfused ops take it */
	if (T == 0)
		return 0;
	kcu_go(q, k_attn_prep, dim3(Hq + Hkv, T), row_threads(D), 0, qo, go, qg,
	       k, v, qw, kw, wdt, K, V, kvdt, kcu_dpos(q), kcu_padd(q, pos0),
	       Hq, Hkv, D, rot / 2, theta, eps, act);
	KCU_LAUNCHED(q->ctx);
	return 0;
}

/* One token (T = 1): a warp per row of 2 Hk + Hv rows (q heads of dk
 * channels, k heads of dk, v heads of dv: the conv's C channels in
 * order), GP_WARPS a block. A lane takes channels l, l + 32, ... (NV of
 * them at most): the conv of k_conv1d (the sum over its KC taps in order,
 * the tail shifted by one), then for q and k rows k_l2norm's sum (the
 * lane's channels in order, then warp_sum) and its scaling; lane 0 of v
 * row h computes head h's gates as k_gates does. The conv weights load
 * before the programmatic wait and every other input right after it, all
 * in flight at once (as k_rmsnorm_reg: loads one at a time behind
 * kcu_wget's branches made this kernel 20 us on the H100, ncu). */
#define GP_WARPS 4
#define GP_MAXV 8 /* channels a lane holds: dk, dv <= 256 */
#define GP_MAXK 4 /* taps (Qwen3.5: 4); wider convs take the unfused ops */

template <int KC, int NV>
static __global__ void
k_gdn_prep(float *u, const float *in, float *tail, const void *w, int wdt,
	   int C, int Hk, int dk, int Hv, int dv, float eps, float qscale,
	   float *beta, float *g, const float *b, const float *a,
	   const float *A_log, const float *dt_bias, int act)
{
	kcu_pdl_release();
	const int r = blockIdx.x * GP_WARPS + (threadIdx.x >> 5);
	const int l = threadIdx.x & 31;
	if (r >= 2 * Hk + Hv)
		return;
	const int norm = r < 2 * Hk;
	const int dim = norm ? dk : dv;
	const int c0 = norm ? r * dk : 2 * Hk * dk + (r - 2 * Hk) * dv;
	float wt[NV * KC], win[NV * KC], cur[NV], y[NV];
	kcu_wgather<NV * KC>(wt, w, wdt, [&](int jk) {
		int i = l + 32 * (jk / KC);
		return i < dim ? (long long)(c0 + i) * KC + jk % KC : -1LL;
	});
	kcu_pdl_wait();
#pragma unroll
	for (int j = 0; j < NV; j++) {
		const int i = l + 32 * j, c = c0 + i;
#pragma unroll
		for (int kk = 0; kk < KC - 1; kk++)
			win[j * KC + kk] =
			    kcu_ldz(tail, (long long)kk * C + c, i < dim);
		cur[j] = kcu_ldz(in, c, i < dim);
	}
#pragma unroll
	for (int j = 0; j < NV; j++) {
		const int i = l + 32 * j, c = c0 + i;
		float acc = 0.0f;
#pragma unroll
		for (int kk = 0; kk < KC; kk++)
			acc += wt[j * KC + kk] *
			       (kk < KC - 1 ? win[j * KC + kk] : cur[j]);
		y[j] = kcu_rnd(kcu_silu(kcu_rnd(acc, act)), act);
		if (i < dim)
#pragma unroll
			for (int kk = 0; kk < KC - 1; kk++)
				tail[(size_t)kk * C + c] =
				    kk + 1 < KC - 1 ? win[j * KC + kk + 1]
						    : cur[j];
	}
	if (norm) {
		float ss = 0.0f;
#pragma unroll
		for (int j = 0; j < NV; j++)
			if (l + 32 * j < dim)
				ss += y[j] * y[j];
		ss = warp_sum(ss);
		float inv = 1.0f / sqrtf(ss + eps);
		const float scale = r < Hk ? qscale : 1.0f;
#pragma unroll
		for (int j = 0; j < NV; j++)
			if (l + 32 * j < dim)
				y[j] =
				    kcu_rnd(y[j] * inv, KERN_ACT_F32) * scale;
	} else if (l == 0) {
		const int h = r - 2 * Hk;
		gdn_gate(beta + h, g + h, b[h], a[h], A_log[h], dt_bias[h], act);
	}
#pragma unroll
	for (int j = 0; j < NV; j++)
		if (l + 32 * j < dim)
			u[c0 + l + 32 * j] = y[j];
}

/* T > 1 (a prefill's chunk): k_conv1d<4>'s blocks of 128 channels and
 * CONV_TT tokens and its conv (conv_tile: a thread a channel, its window
 * in registers, tile 0's thread the only one that reads and then writes
 * the channel's tail). With dk = 128 a q or k head is one block's
 * channels: its outputs go to shared memory and a warp a token takes
 * k_l2norm's sum (lane l: channels l, l + 32, ... in order, then
 * warp_sum) and scaling. One more column of blocks (blockIdx.x = nconv)
 * computes the tile's gates as k_gates. It replaces 4 launches and a pass
 * of q and k through memory; bench_kern --only elem times it beside the
 * unfused ops (H100, 1,024 tokens of the 27B's 10,240 channels: 0.0385
 * ms against 0.0621). */
#define GPF_THREADS 128

template <int KC>
static __global__ void __launch_bounds__(GPF_THREADS)
    k_gdn_prep_pf(float *u, const float *in, int ldin, float *tail,
		  const void *w, int wdt, int T, int C, int Hk, int nconv,
		  float eps, float qscale, float *beta, float *g,
		  const float *b, const float *a, int ldba, const float *A_log,
		  const float *dt_bias, int Hv, int act)
{
	kcu_pdl_enter();
	__shared__ float sy[CONV_TT][GPF_THREADS];
	const int tid = threadIdx.x;
	const int ta = blockIdx.y * CONV_TT;
	const int tb = ta + CONV_TT < T ? ta + CONV_TT : T;
	if ((int)blockIdx.x == nconv) { /* the gates */
		for (int i = tid; i < (tb - ta) * Hv; i += blockDim.x) {
			const size_t t = (size_t)ta + i / Hv, h = i % Hv;
			gdn_gate(beta + t * Hv + h, g + t * Hv + h,
				 b[t * ldba + h], a[t * ldba + h], A_log[h],
				 dt_bias[h], act);
		}
		return;
	}
	const int norm = (int)blockIdx.x < 2 * Hk; /* every thread's c < C */
	const int c = blockIdx.x * GPF_THREADS + tid;
	if (!norm && c >= C)
		return;
	float wt[KC];
	kcu_wgather<KC>(wt, w, wdt,
			[&](int k) { return (long long)c * KC + k; });
	conv_tile<KC>(in, ldin, tail, wt, KC, T, C, c, ta, tb, act,
		      [&](int i, int t, float y) {
			      if (norm)
				      sy[i][tid] = y;
			      else
				      u[(size_t)t * C + c] = y;
		      });
	if (!norm)
		return;
	__syncthreads(); /* the tile's conv outputs in sy */
	const int l = tid & 31;
	const float scale = (int)blockIdx.x < Hk ? qscale : 1.0f;
	for (int i = tid >> 5; i < tb - ta; i += GPF_THREADS / 32) {
		float ss = 0.0f;
#pragma unroll
		for (int j = l; j < GPF_THREADS; j += 32)
			ss += sy[i][j] * sy[i][j];
		ss = warp_sum(ss);
		float inv = 1.0f / sqrtf(ss + eps);
		float *ur = u + (size_t)(ta + i) * C + blockIdx.x * GPF_THREADS;
#pragma unroll
		for (int j = l; j < GPF_THREADS; j += 32)
			ur[j] = kcu_rnd(sy[i][j] * inv, KERN_ACT_F32) * scale;
	}
}

#define GP_CASE(K, V)                                                          \
	if (Kc == K && nv <= V) {                                              \
		kcu_go(q, k_gdn_prep<K, V>, blocks, GP_WARPS * 32, 0, u, mixed, \
		       tail, cw, cwdt, C, Hk, dk, Hv, dv, eps, qscale, beta, g, \
		       b, a, A_log, dt_bias, act);                              \
		KCU_LAUNCHED(q->ctx);                                          \
		return 0;                                                      \
	}
#define GP_CASES(K)                                                            \
	GP_CASE(K, 1) GP_CASE(K, 2) GP_CASE(K, 4) GP_CASE(K, 8)

int kcu_gdn_prep(kern_queue *q, float *u, const float *mixed, int ldin,
		 float *tail, const void *cw, int cwdt, int Kc, int Hk, int dk,
		 int Hv, int dv, float eps, float qscale, float *beta, float *g,
		 const float *b, const float *a, int ldba, const float *A_log,
		 const float *dt_bias, int T, int act)
{
	if (!q || !u || !mixed || !cw || (Kc > 1 && !tail) || !beta || !g ||
	    !b || !a || !A_log || !dt_bias || Kc < 1 || Kc > CONV_KMAX ||
	    Hk <= 0 || dk <= 0 || Hv <= 0 || dv <= 0 || T < 0 ||
	    (int64_t)ldin < 2 * (int64_t)Hk * dk + (int64_t)Hv * dv ||
	    ldba < Hv)
		return MOOR_ERANGE;
	if (!kcu_dtype_ok(cwdt) || !kcu_act_ok(act))
		return MOOR_EDTYPE;
	if (T > 1) {
		if (dk != GPF_THREADS || Kc != 4 ||
		    (T + CONV_TT - 1) / CONV_TT > 65535 || !kcu_pf_fuse_on())
			return MOOR_EUNSUP; /* the unfused ops take it */
		int C = 2 * Hk * dk + Hv * dv;
		int nconv = (C + GPF_THREADS - 1) / GPF_THREADS;
		kcu_go(q, k_gdn_prep_pf<4>,
		       dim3(nconv + 1, (T + CONV_TT - 1) / CONV_TT),
		       GPF_THREADS, 0, u, mixed, ldin, tail, cw, cwdt, T, C, Hk,
		       nconv, eps, qscale, beta, g, b, a, ldba, A_log, dt_bias,
		       Hv, act);
		KCU_LAUNCHED(q->ctx);
		return 0;
	}
	if (T != 1 || dk > 32 * GP_MAXV || dv > 32 * GP_MAXV ||
	    Kc > GP_MAXK || !kcu_dec_fuse_on())
		return MOOR_EUNSUP; /* the unfused ops take it */
	int rows = 2 * Hk + Hv, C = 2 * Hk * dk + Hv * dv;
	int nv = ((dk > dv ? dk : dv) + 31) / 32;
	unsigned blocks = (unsigned)((rows + GP_WARPS - 1) / GP_WARPS);
	GP_CASES(1)
	GP_CASES(2)
	GP_CASES(3)
	GP_CASES(4)
	return MOOR_EUNSUP;
}

/* ---- fill_random ---- */

static __global__ void k_fill(void *dst, int dt, size_t n, uint64_t seed,
			      float lo, float hi)
{
	kcu_pdl_enter();
	FOR_N(i, n)
	{
		float x = ksr_fill(seed, i, lo, hi);
		if (dt == KERN_F32)
			((float *)dst)[i] = x;
		else if (dt == KERN_BF16)
			((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(x);
		else
			((__half *)dst)[i] = __float2half_rn(x);
	}
}

int kcu_fill_random(kern_queue *q, void *dst, int dt, size_t n, uint64_t seed,
		    float lo, float hi)
{
	if (!q || (n && !dst) || !(lo <= hi))
		return MOOR_ERANGE;
	if (!kcu_dtype_ok(dt))
		return MOOR_EDTYPE;
	if (n == 0)
		return 0;
	kcu_go(q, k_fill, grid1(n), TPB, 0, dst, dt, n, seed, lo, hi);
	KCU_LAUNCHED(q->ctx);
	return 0;
}
