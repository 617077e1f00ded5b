/* ops.h: the compute backend contract (`kern_`).
 *
 * A backend is a vtable (struct kern_ops) plus an opaque context. The model
 * code holds buffers as opaque device pointers (`void *` it never
 * dereferences; it may offset them by bytes with kern_at()), allocates every
 * buffer and workspace up front through the vtable, and enqueues ops on a
 * queue. The CPU backend runs an op to completion on its thread pool before
 * returning; a CUDA backend enqueues it on a stream. Either way, results are
 * visible to the host only after download() (which synchronises) or sync().
 *
 * Numerics. Activations are fp32 buffers. Weights are bf16, f16 or f32
 * (`wdt`). Where the model's compute dtype is bf16 the reference
 * implementation rounds intermediate tensors to bf16; an op given
 * act == KERN_ACT_BF16 rounds its outputs at those points, so the fp32
 * buffers hold exactly the bf16 values the reference holds. Each op below
 * says where it rounds.
 *
 * Determinism. Every op gives the same bits for the same inputs whatever the
 * thread count and whatever rows surround a row: work is partitioned by
 * output element, and each output's reduction runs in one fixed order that
 * depends only on the reduced length (never on T or on the partition). No
 * atomics in arithmetic. This is what makes a prefill split at grid lines
 * equal a one-shot prefill bit for bit.
 *
 * Errors: 0 on success, a negative code (moor.h) on failure. Shapes are
 * row-major; `ld*` arguments are row strides in elements.
 *
 * Ownership: memory from alloc() belongs to the caller until free(). A
 * pointer from wrap_host() borrows the host memory, which must outlive it;
 * it is never passed to free(), but to unwrap() where the backend has one.
 */
#ifndef KERN_OPS_H
#define KERN_OPS_H

#include <stddef.h>
#include <stdint.h>

/* Bumped on any incompatible change of struct kern_ops. */
#define KERN_ABI_VERSION 1

enum kern_dtype { KERN_F32 = 0, KERN_BF16 = 1, KERN_F16 = 2 };
enum kern_act { KERN_ACT_F32 = 0, KERN_ACT_BF16 = 1 };

/* Bytes of one element of a kern_dtype. */
static inline size_t kern_dtype_size(int dt)
{
	return dt == KERN_F32 ? 4 : 2;
}

/* A device pointer offset by a number of bytes (never dereferenced here). */
static inline void *kern_at(void *p, size_t bytes)
{
	return (char *)p + bytes;
}

typedef struct kern_ctx kern_ctx;
typedef struct kern_queue kern_queue;

typedef struct kern_config {
	int threads; /* CPU worker threads (>= 1); 0 = the backend's choice */
	int device;  /* GPU ordinal, for device backends */
} kern_config;

/* The chunk length of the chunked delta rule (SPEC §5.6). */
#define KERN_GDN_CHUNK 64

typedef struct kern_ops {
	uint32_t abi; /* KERN_ABI_VERSION */
	const char *name;

	/* ---- lifecycle ---- */
	int (*create)(const kern_config *cfg, kern_ctx **out);
	void (*destroy)(kern_ctx *ctx); /* safe on NULL */
	/* The context's default queue; lives as long as ctx. */
	kern_queue *(*queue)(kern_ctx *ctx);

	/* ---- memory ---- */
	int (*alloc)(kern_ctx *ctx, size_t bytes, void **out);
	void (*free)(kern_ctx *ctx, void *p); /* safe on NULL */
	/* Optional (NULL: use alloc + upload). Makes host memory (a mmapped
	 * checkpoint) usable as a device buffer; the CPU backend returns the
	 * same pointer. */
	int (*wrap_host)(kern_ctx *ctx, const void *host, size_t bytes,
			 void **out);
	/* Optional (NULL: nothing to release). Ends a wrap_host(). */
	void (*unwrap)(kern_ctx *ctx, void *p);
	int (*upload)(kern_queue *q, void *dst, const void *src, size_t n);
	/* Synchronises: on return dst holds the bytes. */
	int (*download)(kern_queue *q, void *dst, const void *src, size_t n);
	int (*copy)(kern_queue *q, void *dst, const void *src, size_t n);
	int (*zero)(kern_queue *q, void *dst, size_t n);
	int (*sync)(kern_queue *q);

	/* ---- ops ---- */

	/* out[T,H] = table[ids[t], :] converted to fp32. ids: device i32[T],
	 * each < V (an id >= V is MOOR_ERANGE, nothing written). */
	int (*embed)(kern_queue *q, float *out, const void *table, int wdt,
		     const int32_t *ids, int T, int H, int V);

	/* y[t, n] = sum_k x[t, k] * W[n, k]  (y = x W^T), W [N, K] of wdt,
	 * fp32 accumulation in a fixed order over k. act BF16 rounds y. */
	int (*matmul)(kern_queue *q, float *y, int ldy, const float *x,
		      int ldx, const void *W, int wdt, int T, int N, int K,
		      int act);

	/* y[i] = x[i] + y[i] over n elements; act BF16 rounds the sum. */
	int (*add)(kern_queue *q, float *y, const float *x, size_t n, int act);

	/* Per row of [rows, dim] (rows spaced ldx / ldy apart):
	 * y = x * rsqrt(mean(x^2) + eps) * (plus_one ? 1 + w : w), in fp32,
	 * w [dim] of wdt; act BF16 rounds y once at the end. In place is
	 * allowed (y == x). */
	int (*rmsnorm)(kern_queue *q, float *y, int ldy, const float *x,
		       int ldx, const void *w, int wdt, int rows, int dim,
		       float eps, int plus_one, int act);

	/* Gated RMSNorm of the GDN output (SPEC §4), per row of [rows, dim]
	 * contiguous: n = rnd(x * rsqrt(mean(x^2) + eps)); p = rnd(w * n);
	 * y = rnd(p * silu(z)); rnd rounds to bf16 when act is BF16. */
	int (*gated_rmsnorm)(kern_queue *q, float *y, const float *x,
			     const float *z, const void *w, int wdt, int rows,
			     int dim, float eps, int act);

	/* Causal depthwise conv with its tail (SPEC §5.2), then SiLU:
	 * in [T, C] (row stride ldin), tail [Kc-1, C] fp32 = the Kc-1 inputs
	 * before in[0] (oldest first), w [C, Kc] of wdt (tap Kc-1 multiplies
	 * the current token). out[t, c] = rnd(silu(rnd(sum_j w[c, j] *
	 * x[t-(Kc-1)+j, c]))), the sum in order j = 0..Kc-1. On return tail
	 * holds the last Kc-1 inputs (of the tail and in together). out [T, C]
	 * contiguous, must not alias in. */
	int (*conv1d)(kern_queue *q, float *out, const float *in, int ldin,
		      float *tail, const void *w, int wdt, int T, int C, int Kc,
		      int act);

	/* GDN gates (SPEC §5.3), per [T, Hv]: beta = rnd(sigmoid(b))
	 * (transformers computes it in the model dtype); g = -exp(A_log) *
	 * softplus(a + dt_bias) in fp32 (softplus(x) = x above 20). b, a: row
	 * strides ldb, lda. A_log, dt_bias: fp32 [Hv]. */
	int (*gdn_gates)(kern_queue *q, float *beta, float *g, const float *b,
			 int ldb, const float *a, int lda, const float *A_log,
			 const float *dt_bias, int T, int Hv, int act);

	/* In place, per head of [T, heads, dim] (token stride ld):
	 * x = rnd(x * (1 / sqrt(sum(x^2) + eps))) * scale, in fp32 (torch's
	 * x * rsqrt(...)), the scale applied after the rounding (SPEC §5.4). */
	int (*l2norm)(kern_queue *q, float *x, int ld, int T, int heads,
		      int dim, float eps, float scale, int act);

	/* The chunked delta rule (SPEC §5.6), C = KERN_GDN_CHUNK sub-chunks
	 * aligned to token 0 of this call, the last padded. q, k [T, Hk, dk]
	 * (token stride ldqk) already L2-normalised, q scaled; v [T, Hv, dv]
	 * (stride ldv); g, beta [T, Hv]; S [Hv, dk, dv] fp32, read as the
	 * state entering and written as the state leaving. o [T, Hv, dv].
	 * Value head h reads q/k head h / (Hv / Hk). The state stays fp32;
	 * act BF16 rounds o. ws: at least delta_ws_bytes(Hv, dk, dv) bytes of
	 * device memory. */
	int (*delta_chunked)(kern_queue *q, float *o, float *S, const float *qq,
			     const float *k, int ldqk, const float *v, int ldv,
			     const float *g, const float *beta, int T, int Hk,
			     int Hv, int dk, int dv, void *ws, int act);
	size_t (*delta_ws_bytes)(int Hv, int dk, int dv);

	/* The recurrent delta rule (SPEC §5.5), token by token; same
	 * arguments as delta_chunked, no workspace. */
	int (*delta_recurrent)(kern_queue *q, float *o, float *S,
			       const float *qq, const float *k, int ldqk,
			       const float *v, int ldv, const float *g,
			       const float *beta, int T, int Hk, int Hv, int dk,
			       int dv, int act);

	/* In place partial RoPE, rotate-half, on dims [0, rot) of each head of
	 * x [T, heads, D] (token stride ld), at positions pos0 + t.
	 * inv_freq_i = theta^(-2i/rot); cos/sin in fp32, rounded to bf16 when
	 * act is BF16, each product and the sum rounded too (SPEC §6.3). */
	int (*rope)(kern_queue *q, float *x, int ld, int T, int heads, int D,
		    int rot, int64_t pos0, float theta, int act);

	/* Causal GQA attention over a KV view. qv [T, Hq, D] (stride ldq) at
	 * positions pos0 + t; K, V: [>= pos0 + T, Hkv, D] of kvdt, row 0 at the
	 * pointer. out [T, Hq, D] contiguous. Query head h uses KV head
	 * h / (Hq / Hkv). Scores s_j = rnd(rnd(q.k_j) * scale) over j <=
	 * pos0+t (transformers' eager path rounds the product and the scaled
	 * score to the model dtype), softmax in fp32 (max subtracted, sum in
	 * order j = 0..), p_j rounded when act is BF16, out = rnd(sum_j p_j
	 * v_j) in order j = 0.. */
	int (*attention)(kern_queue *q, float *out, const float *qv, int ldq,
			 const void *K, const void *V, int kvdt, int T,
			 int64_t pos0, int Hq, int Hkv, int D, float scale,
			 int act);

	/* Write T rows of width `width` elements from src (stride ld, fp32)
	 * into dst (kvdt, contiguous rows of `width`), starting at row row0. */
	int (*kv_write)(kern_queue *q, void *dst, int kvdt, int64_t row0,
			const float *src, int ld, int T, int width);

	/* y = rnd(rnd(silu(gate)) * up) over n elements (SwiGLU). */
	int (*swiglu)(kern_queue *q, float *y, const float *gate,
		      const float *up, size_t n, int act);

	/* Split q_proj's output qg [T, Hq, 2D] (per head D query values then D
	 * gate values) into qo [T, Hq, D] and go [T, Hq, D]. */
	int (*split_qgate)(kern_queue *q, float *qo, float *go, const float *qg,
			   int T, int Hq, int D);

	/* y = rnd(x * rnd(sigmoid(gate))) over n elements (output gate). */
	int (*sigmoid_mul)(kern_queue *q, float *y, const float *x,
			   const float *gate, size_t n, int act);
} kern_ops;

/* The portable CPU backend (kernels/cpu). Always built. */
extern const kern_ops kern_cpu_ops;

#endif
