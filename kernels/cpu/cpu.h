/* cpu.h: what the files of the portable CPU backend share (`kcpu_`,
 * internal; ops.h is the public contract).
 *
 * Exactness. Every reduction below has one fixed order that depends only on
 * its length, so that partitions and batch shapes never change bits:
 *
 *  - products of matrices (matmul, attention's q·K and p·V, the delta rule's
 *    block products) sum each output element *sequentially* over the reduced
 *    index, starting from +0: s = ((0 + a0 b0) + a1 b1) + ...  Each product
 *    is rounded to fp32 before its add (-ffp-contract=off), so a SIMD kernel
 *    that keeps four outputs in a vector register computes the same bits as
 *    a scalar loop, and a reduction cut into k-blocks (the partial parked in
 *    fp32 memory) equals an uncut one. The vectorisation runs across output
 *    columns, never across the reduced index.
 *  - dot products of two rows (the norms' sums of squares, the delta rule's
 *    k·k and q·k) use kcpu_dot: 8 lanes over i mod 8, combined in a fixed
 *    tree, then the tail in order (see kcpu_dot).
 *
 * Vectors are GCC/Clang vector extensions (v4f): plain C that every target
 * compiles (SSE2 on x86-64, NEON on arm64, scalar code elsewhere), so the
 * backend needs no -march flag and no intrinsics.
 */
#ifndef KCPU_H
#define KCPU_H

#include "moor.h"
#include "ops.h"
#include "pool.h"

#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct kern_queue {
	kern_ctx *ctx;
};

/* Events order nothing on this backend (every op is complete on return);
 * they exist so that the model's code is the same on every backend. */
struct kern_event {
	int recorded;
};

/* An import_ipc() mapping, remembered for unimport(). */
typedef struct kcpu_map {
	void *p;
	size_t n;
} kcpu_map;
#define KCPU_MAPS 8

/* Floats of one scratch slot (8 MiB + 128 KiB): attention keeps a group's
 * scores there (64 rows of 32k keys) and its accumulators after them. */
#define KCPU_SCRATCH (((size_t)1 << 21) + ((size_t)1 << 15))

struct kern_ctx {
	moor_pool *pool; /* cfg->threads threads (the caller counts as one) */
	kern_queue q;	 /* the default (and only) queue */
	/* One scratch slot per thread, allocated at create: at most that
	 * many tasks run at once. A task takes a free slot and gives it back;
	 * which slot it gets changes nothing it computes. */
	int nslot;
	float *scratch;	  /* [nslot, KCPU_SCRATCH] */
	atomic_int *busy; /* [nslot] */
	/* Floats of a slot attention may fill with scores before it falls
	 * back to three passes over the keys; create() sets the most. A test
	 * seam: tests lower it to reach the three-pass path on short contexts
	 * (the bits must not change). */
	size_t att_cap;
	/* Whether the CPU has AVX2 (create() asks it), for the few-row
	 * matmul's eight-lane path (mm.c). A test seam: tests clear it to
	 * reach the four-lane path (the bits must not change); MOOR_CPU_NO_AVX2
	 * set at create clears it too, for measurements. */
	int avx2;
	kcpu_map maps[KCPU_MAPS]; /* import_ipc() mappings */
	void *sample_work;	  /* kern_sample_work_bytes(sample_v) */
	int sample_v;
};

static inline moor_pool *kcpu_pool(kern_queue *q)
{
	return q->ctx->pool;
}

/* A free scratch slot of KCPU_SCRATCH floats; *slot names it for
 * kcpu_scratch_put. */
static inline float *kcpu_scratch_get(kern_ctx *c, int *slot)
{
	for (;;)
		for (int i = 0; i < c->nslot; i++)
			if (!atomic_load_explicit(&c->busy[i],
						  memory_order_relaxed) &&
			    !atomic_exchange_explicit(&c->busy[i], 1,
						      memory_order_acquire)) {
				*slot = i;
				return c->scratch + (size_t)i * KCPU_SCRATCH;
			}
}

static inline void kcpu_scratch_put(kern_ctx *c, int slot)
{
	atomic_store_explicit(&c->busy[slot], 0, memory_order_release);
}

/* ---- vectors ---- */

/* Four fp32 lanes; aligned(4) so that loads and stores through memcpy may
 * be unaligned. */
typedef float v4f __attribute__((vector_size(16), aligned(4)));

static inline v4f v4_load(const float *p)
{
	v4f v;
	memcpy(&v, p, sizeof v);
	return v;
}

static inline void v4_store(float *p, v4f v)
{
	memcpy(p, &v, sizeof v);
}

static inline v4f v4_splat(float x)
{
	return (v4f){x, x, x, x};
}

typedef int32_t v4i __attribute__((vector_size(16)));
typedef uint32_t v4u __attribute__((vector_size(16)));
typedef uint16_t v4h __attribute__((vector_size(8), aligned(2)));

/* Lanes of a where mask (all ones), else of b. */
static inline v4f v4_sel(v4i mask, v4f a, v4f b)
{
	return (v4f)((mask & (v4i)a) | (~mask & (v4i)b));
}

/* Four bf16 values to fp32 (exact). */
static inline v4f v4_bf16(const uint16_t *p)
{
	v4h h;
	memcpy(&h, p, sizeof h);
	return (v4f)(__builtin_convertvector(h, v4u) << 16);
}

/* e^x per lane, fp32, a fixed sequence of fp32 operations (so the same x
 * gives the same bits in any lane and any call): x = n ln2 + r with n
 * rounded to nearest and |r| <= ln2 / 2 (Cody-Waite, ln2 in two parts),
 * e^r from Cephes' expf polynomial, 2^n from the exponent bits. Relative
 * error below 1.4 u (measured over the range); x < -87.3 gives 0 (libm would
 * give a denormal, below 2^-126), x > 88.3 gives +inf (libm: inf above
 * 88.72). */
static inline v4f v4_exp(v4f x)
{
	const v4f lo = v4_splat(-87.3f), hi = v4_splat(88.3f);
	v4i under = x < lo;
	v4i over = x > hi;
	x = v4_sel(under, lo, x);
	x = v4_sel(over, hi, x);
	const v4f magic = v4_splat(12582912.0f); /* 1.5 * 2^23 */
	v4f n = (x * v4_splat(1.44269504088896341f) + magic) - magic;
	v4f r = x - n * v4_splat(0.693359375f);
	r = r - n * v4_splat(-2.12194440e-4f);
	v4f p = v4_splat(1.9875691500e-4f);
	p = p * r + v4_splat(1.3981999507e-3f);
	p = p * r + v4_splat(8.3334519073e-3f);
	p = p * r + v4_splat(4.1665795894e-2f);
	p = p * r + v4_splat(1.6666665459e-1f);
	p = p * r + v4_splat(5.0000001201e-1f);
	v4f y = (p * (r * r) + r) + v4_splat(1.0f);
	v4i e = (__builtin_convertvector(n, v4i) + 127) << 23;
	y = y * (v4f)e;
	y = v4_sel(over, v4_splat(INFINITY), y);
	return v4_sel(under, v4_splat(0.0f), y);
}

static inline v4f v4_sigmoid(v4f x)
{
	return v4_splat(1.0f) / (v4_splat(1.0f) + v4_exp(-x));
}

static inline v4f v4_silu(v4f x)
{
	return x / (v4_splat(1.0f) + v4_exp(-x));
}

/* moor_round_bf16 per lane, bit for bit (nearest even; a NaN stays a quiet
 * NaN). */
static inline v4f v4_round_bf16(v4f x)
{
	v4u u = (v4u)x;
	v4i nan = (v4i)(u & 0x7fffffffu) > 0x7f800000;
	v4u r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
	v4u q = (u & 0xffff0000u) | 0x00400000u;
	return v4_sel(nan, (v4f)q, (v4f)r);
}

static inline v4f v4_rnd(v4f x, int act)
{
	return act == KERN_ACT_BF16 ? v4_round_bf16(x) : x;
}

/* ---- elements ---- */

static inline int kcpu_dtype_ok(int dt)
{
	return dt == KERN_F32 || dt == KERN_BF16 || dt == KERN_F16;
}

static inline int kcpu_act_ok(int act)
{
	return act == KERN_ACT_F32 || act == KERN_ACT_BF16;
}

/* Element i of a weight vector of dtype dt, as fp32 (exact). */
static inline float kcpu_wget(const void *w, int dt, size_t i)
{
	if (dt == KERN_F32)
		return ((const float *)w)[i];
	if (dt == KERN_BF16)
		return moor_bf16_to_f32(((const uint16_t *)w)[i]);
	return moor_f16_to_f32(((const uint16_t *)w)[i]);
}

/* n elements of w (dtype dt) from element i0 into dst as fp32 (exact). */
void kcpu_wrow(float *dst, const void *w, int dt, size_t i0, int n);

/* The rounding point of an activation: to bf16 and back when act is BF16. */
static inline float kcpu_rnd(float x, int act)
{
	return act == KERN_ACT_BF16 ? moor_round_bf16(x) : x;
}

/* The scalar forms are the vector ones on lane 0, so a tail element gets
 * the bits its neighbours in a vector get. */
static inline float kcpu_sigmoid(float x)
{
	return v4_sigmoid(v4_splat(x))[0];
}

static inline float kcpu_silu(float x)
{
	return v4_silu(v4_splat(x))[0];
}

/* ---- reductions ---- */

/* sum_i a[i] * b[i], fp32, in the order this function fixes for n: lane l
 * (0..7) sums the products of i = l, l + 8, ... below n - n % 8 in order;
 * the lanes combine as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7));
 * the tail i = n - n % 8 .. n - 1 is then added in order. */
static inline float kcpu_dot(const float *a, const float *b, int n)
{
	v4f s0 = v4_splat(0.0f), s1 = v4_splat(0.0f);
	int i = 0;
	for (; i + 8 <= n; i += 8) {
		s0 += v4_load(a + i) * v4_load(b + i);
		s1 += v4_load(a + i + 4) * v4_load(b + i + 4);
	}
	v4f t = s0 + s1;
	float r = (t[0] + t[2]) + (t[1] + t[3]);
	for (; i < n; i++)
		r += a[i] * b[i];
	return r;
}

/* acc[i][0 .. 4 nv) (+)= sum_{k < K} a[i][k] * b[k * ldb + 0 .. 4 nv) for
 * i < mr, in order k = 0, 1, ...; c (row stride ldc) holds the accumulators
 * on entry when acc, and receives them. mr <= 4, nv <= 6; both are constants
 * at every call, so each call site compiles to its own unrolled kernel. */
static inline __attribute__((always_inline)) void
kcpu_mk(const int mr, const int nv, const float *const *a, const float *b,
	ptrdiff_t ldb, int K, float *c, ptrdiff_t ldc, int acc)
{
	v4f r[4][6];
	for (int i = 0; i < mr; i++)
		for (int j = 0; j < nv; j++)
			r[i][j] =
			    acc ? v4_load(c + i * ldc + 4 * j) : v4_splat(0.0f);
	for (int k = 0; k < K; k++) {
		const float *bk = b + (ptrdiff_t)k * ldb;
		v4f bv[6];
		for (int j = 0; j < nv; j++)
			bv[j] = v4_load(bk + 4 * j);
		for (int i = 0; i < mr; i++) {
			v4f av = v4_splat(a[i][k]);
			for (int j = 0; j < nv; j++)
				r[i][j] += av * bv[j];
		}
	}
	for (int i = 0; i < mr; i++)
		for (int j = 0; j < nv; j++)
			v4_store(c + i * ldc + 4 * j, r[i][j]);
}

/* The block product with sequential sums (see the top of this file):
 * for i < M, n < N:
 *   C[i, n] = (acc ? C[i, n] : +0) + sum_{k < K_i} A[i, k] * B[k, n]
 * in order k = 0, 1, ..., where K_i = klen ? min(klen[i], K) : K (a negative
 * klen[i] counts as 0). Row strides lda, ldb, ldc in elements. C must not
 * overlap A or B. */
void kcpu_mm(int M, int N, int K, const float *A, ptrdiff_t lda, const float *B,
	     ptrdiff_t ldb, float *C, ptrdiff_t ldc, const int *klen, int acc);

/* Whether this CPU runs mm.c's AVX2 path (x86-64 builds; 0 elsewhere). */
int kcpu_have_avx2(void);

/* ---- ops (one file each group) ---- */

int kcpu_embed(kern_queue *q, float *out, const void *table, int wdt,
	       const int32_t *ids, int T, int H, int V);
int kcpu_matmul(kern_queue *q, float *y, int ldy, const float *x, int ldx,
		const void *W, int wdt, int T, int N, int K, int act);
int kcpu_add(kern_queue *q, float *y, const float *x, size_t n, int act);
int kcpu_rmsnorm(kern_queue *q, float *y, int ldy, const float *x, int ldx,
		 const void *w, int wdt, int rows, int dim, float eps,
		 int plus_one, int act);
int kcpu_gated_rmsnorm(kern_queue *q, float *y, const float *x, const float *z,
		       int ldz, int zg, const void *w, int wdt, int rows,
		       int dim, float eps, int act);
int kcpu_conv1d(kern_queue *q, float *out, const float *in, int ldin,
		float *tail, const void *w, int wdt, int T, int C, int Kc,
		int act);
int kcpu_gdn_gates(kern_queue *q, float *beta, float *g, const float *b,
		   int ldb, const float *a, int lda, const float *A_log,
		   const float *dt_bias, int T, int Hv, int act);
int kcpu_l2norm(kern_queue *q, float *x, int ld, int T, int heads, int dim,
		float eps, float scale, int act);
int kcpu_delta_chunked(kern_queue *q, float *o, float *S, const float *qq,
		       const float *k, int ldqk, const float *v, int ldv,
		       const float *g, const float *beta, int T, int Hk, int Hv,
		       int dk, int dv, void *ws, int act);
size_t kcpu_delta_ws_bytes(kern_ctx *ctx, int T, int Hv, int dk, int dv);
int kcpu_delta_recurrent(kern_queue *q, float *o, float *S, const float *qq,
			 const float *k, int ldqk, const float *v, int ldv,
			 const float *g, const float *beta, int T, int Hk,
			 int Hv, int dk, int dv, int act);
int kcpu_rope(kern_queue *q, float *x, int ld, int T, int heads, int D, int rot,
	      int64_t pos0, float theta, int act);
int kcpu_attention(kern_queue *q, float *out, const float *qv, int ldq,
		   const void *K, const void *V, int kvdt, int T, int64_t pos0,
		   int Hq, int Hkv, int D, float scale, int act);
int kcpu_kv_write(kern_queue *q, void *dst, int kvdt, int64_t row0,
		  const float *src, int ld, int T, int width);
int kcpu_swiglu(kern_queue *q, float *y, const float *gate, const float *up,
		size_t n, int act);
int kcpu_split_qgate(kern_queue *q, float *qo, float *go, const float *qg,
		     int T, int Hq, int D);
int kcpu_sigmoid_mul(kern_queue *q, float *y, const float *x, const float *gate,
		     size_t n, int act);
int kcpu_fill_random(kern_queue *q, void *dst, int dt, size_t n, uint64_t seed,
		     float lo, float hi);
int kcpu_sample(kern_queue *q, const float *logits, int V,
		const kern_sampling *p, uint64_t draw, int32_t *dev_id,
		int32_t *host_id);

#endif
