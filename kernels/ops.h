/* ops.h: the compute backend contract (`kern_`).
 *
 * A backend is a vtable (struct kern_ops) plus an opaque context, found by
 * name in the registry (kern_backend: "cpu", "cuda"); nothing outside the
 * registry and a backend's own tests names a backend's vtable. The model
 * code holds buffers as opaque device pointers (`void *` it never
 * dereferences; it may offset them by bytes with kern_at()), allocates every
 * buffer and workspace up front through the vtable, and enqueues ops on a
 * queue. The CPU backend runs an op to completion on its thread pool before
 * returning; the CUDA backend enqueues it on a stream. Either way, results
 * are visible to the host only after download() (which synchronises) or
 * sync().
 *
 * Queues and ordering. A context has a compute queue and a copy queue
 * (queue(ctx, KERN_Q_COMPUTE | KERN_Q_COPY)); work on one queue runs in
 * order; across queues, record() an event on one and wait() for it on the
 * other (the waiting queue stalls on the device, the host does not). On the
 * CPU backend every op is complete on return, so events order nothing that
 * is not ordered already.
 *
 * Errors. An argument the host can check (shapes, strides, dtypes, NULLs)
 * fails the call at once with a negative code and enqueues nothing. Work
 * that fails on the device (a fault, a launch failure) surfaces at the next
 * sync() or download() of that queue as MOOR_EBACKEND; the context is then
 * unusable. Data-dependent checks (an id >= vocab) are the caller's, on the
 * host, before the upload: a device kernel cannot fail a call.
 *
 * Host memory handed to an op. upload()'s source must stay valid and
 * unchanged until the next sync() of that queue (a device backend may read
 * it then); the same holds for sample()'s parameters, which are read at the
 * call. No caller uploads from its stack and returns.
 *
 * Memory of another process. import_ipc() maps memory that another process
 * allocated (cached's device arena): a shm object on the CPU backend, a CUDA
 * IPC handle on CUDA. The importer never frees it; unimport() ends the
 * mapping and the memory lives on in its owner. Whoever hands bytes of such
 * memory to another process synchronises the queues that wrote them first.
 *
 * Numerics. Activations are fp32 buffers. Weights are bf16, f16 or f32
 * (`wdt`). Where the model's compute dtype is bf16 the reference
 * implementation rounds intermediate tensors to bf16; an op given
 * act == KERN_ACT_BF16 rounds its outputs at those points, so the fp32
 * buffers hold exactly the bf16 values the reference holds. Each op below
 * says where it rounds. A device backend may round a matmul's input to the
 * weights' 16-bit dtype (exact when act is BF16: every matmul input of a
 * bf16 model is a rounded activation already).
 *
 * Determinism. Every op gives the same bits for the same inputs run after
 * run. The CPU backend also gives them whatever the thread count and
 * whatever rows surround a row: work is partitioned by output element, and
 * each output's reduction runs in one fixed order that depends only on the
 * reduced length (never on T or on the partition). A device backend fixes
 * its reduction orders per shape (one GEMM algorithm per weight shape and
 * row bucket, fixed splits of attention combined in a fixed order, no
 * atomics in arithmetic): the same call gives the same bits, so a prefill
 * split at grid lines (which forwards the same chunks) equals a one-shot
 * prefill bit for bit on either backend; the two backends agree within the
 * tolerances the kernel tests state, not bit for bit.
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
#define KERN_ABI_VERSION 5

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
typedef struct kern_event kern_event;
typedef struct kern_graph kern_graph;

typedef struct kern_config {
	int threads; /* CPU worker threads (>= 1); 0 = the backend's choice */
	int device;  /* GPU ordinal, for device backends */
} kern_config;

/* The chunk length of the chunked delta rule (SPEC §5.6). */
#define KERN_GDN_CHUNK 64

enum kern_queue_kind { KERN_Q_COMPUTE = 0, KERN_Q_COPY = 1 };

/* kern_ops.caps */
enum {
	/* Buffers are host memory: a host pointer may be passed where a
	 * buffer is expected (the CPU backend). */
	KERN_CAP_HOST_MEMORY = 1u << 0,
};

/* Memory another process exported (cached's device arena). */
enum kern_ipc_kind { KERN_IPC_SHM = 1, KERN_IPC_CUDA = 2 };
#define KERN_IPC_NAME_MAX 80
#define KERN_IPC_HANDLE_BYTES 64

typedef struct kern_ipc {
	uint32_t kind;   /* kern_ipc_kind */
	int32_t device;  /* CUDA: the ordinal the memory lives on */
	uint64_t size;   /* bytes */
	char name[KERN_IPC_NAME_MAX];	       /* SHM: "/moor.dev" */
	uint8_t handle[KERN_IPC_HANDLE_BYTES]; /* CUDA: cudaIpcMemHandle_t */
} kern_ipc;

/* The most a model will ask of one op, given to reserve() at load so that a
 * device backend allocates its scratch (a matmul's staged input, attention's
 * split partials, the sampler's sort) once, never in the forward. */
typedef struct kern_limits {
	int rows;	/* tokens of one op (a prefill forward: one or more
			 * chunks) */
	/* The prefill chunk (0: rows): attention and the delta rule run on
	 * at most this many rows at a time, and a product of more rows runs
	 * the algorithm of this many, so that each of its rows has the bits
	 * it has in a product of one chunk (a forward of several chunks
	 * equals the chunks one at a time). */
	int chunk;
	int64_t width;	/* widest matmul input row (elements) */
	int64_t window; /* most keys one attention row reads */
	int q_heads, head_dim;
	int vocab; /* sample()'s V */
} kern_limits;

/* Token selection (sample()). temperature <= 0 or top_k == 1: greedy. */
typedef struct kern_sampling {
	float temperature;
	int top_k;   /* 0: off */
	float top_p; /* >= 1: off */
	float min_p; /* 0: off */
} kern_sampling;

/* Elements per block of the sampler's blocked sums (sample(), logprobs()). */
#define KERN_SAMPLE_BLOCK 256
/* The most alternatives logprobs() returns (OpenAI's top_logprobs). */
#define KERN_LOGPROBS_MAX 20

typedef struct kern_ops {
	uint32_t abi; /* KERN_ABI_VERSION */
	const char *name;
	unsigned caps; /* KERN_CAP_* */

	/* ---- lifecycle ---- */
	/* 0 when the backend can run on cfg->device here (a GPU is present,
	 * the driver answers); else a negative code and err says why. Cheap,
	 * creates nothing that outlives the call. err: MOOR_ERRLEN or NULL. */
	int (*probe)(int device, char *err);
	int (*create)(const kern_config *cfg, kern_ctx **out);
	void (*destroy)(kern_ctx *ctx); /* safe on NULL */
	/* A queue of the context (enum kern_queue_kind); lives as long as ctx.
	 * The CPU backend returns one queue for both kinds. */
	kern_queue *(*queue)(kern_ctx *ctx, int kind);
	/* Optional (NULL: nothing to reserve). Sizes the backend's scratch for
	 * ops up to lim; an op past the reserved limits fails with
	 * MOOR_ERANGE. May be called again with larger limits (never inside
	 * a graph capture). */
	int (*reserve)(kern_ctx *ctx, const kern_limits *lim);
	/* A one-line description of the device and libraries, for logs and
	 * the fingerprint ("cpu, 4 threads"; "NVIDIA H200, cc 9.0, CUDA 13.0,
	 * cuBLAS 13.0.0"). */
	void (*describe)(kern_ctx *ctx, char *out, size_t n);

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
	/* Maps memory another process exported (see the header). h->kind
	 * must be the backend's own (CPU: KERN_IPC_SHM; CUDA: KERN_IPC_CUDA),
	 * else MOOR_EUNSUP. *out is a device pointer to h->size bytes.
	 * err: MOOR_ERRLEN or NULL. */
	int (*import_ipc)(kern_ctx *ctx, const kern_ipc *h, void **out,
			  char *err);
	/* Ends an import_ipc(); safe on NULL. The memory stays its owner's. */
	void (*unimport)(kern_ctx *ctx, void *p);
	/* src stays valid until the next sync() of q (the header). */
	int (*upload)(kern_queue *q, void *dst, const void *src, size_t n);
	/* Synchronises q: on return dst holds the bytes, and every error of
	 * work enqueued before surfaces here. */
	int (*download)(kern_queue *q, void *dst, const void *src, size_t n);
	int (*copy)(kern_queue *q, void *dst, const void *src, size_t n);
	int (*zero)(kern_queue *q, void *dst, size_t n);
	/* Waits for q's work; its errors surface here (MOOR_EBACKEND). */
	int (*sync)(kern_queue *q);

	/* ---- ordering between queues ---- */
	int (*event_new)(kern_ctx *ctx, kern_event **out);
	void (*event_free)(kern_ctx *ctx, kern_event *e); /* safe on NULL */
	/* e completes when q's work enqueued so far is done. */
	int (*record)(kern_queue *q, kern_event *e);
	/* Work enqueued on q from now on waits for e's last record(). */
	int (*wait)(kern_queue *q, kern_event *e);

	/* ---- graphs (optional: NULL on backends without them) ----
	 * graph_begin() starts capturing q's ops instead of running them;
	 * graph_end() turns what was captured into a graph; graph_launch()
	 * runs it as one unit. While capturing, the ops that take a position
	 * (rope, attention, kv_write) read it relative to the launch: an op
	 * captured with pos0 = cap_pos + d runs at pos + d, where cap_pos is
	 * graph_begin's and pos is graph_launch's. max_len bounds the keys
	 * attention reads in any launch (pos + T <= max_len): the graph is
	 * shaped for it. Nothing synchronous (download, sync, sample) may be
	 * captured; the caller checks a launch's bounds on the host. */
	int (*graph_begin)(kern_queue *q, int64_t cap_pos, int64_t max_len);
	int (*graph_end)(kern_queue *q, kern_graph **out);
	int (*graph_launch)(kern_queue *q, kern_graph *g, int64_t pos);
	void (*graph_free)(kern_ctx *ctx, kern_graph *g); /* safe on NULL */

	/* ---- ops ---- */

	/* out[T,H] = table[ids[t], :] converted to fp32. ids: device i32[T],
	 * each < V: the caller checks them on the host before the upload (the
	 * CPU backend also fails an id >= V with MOOR_ERANGE, nothing written;
	 * a device backend writes zeros for it). */
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
	 * (x and y contiguous): n = rnd(x * rsqrt(mean(x^2) + eps));
	 * p = rnd(w * n); y = rnd(p * silu(z)); rnd rounds to bf16 when act is
	 * BF16. z's rows come in groups of zg (a token's value heads): row r
	 * of z is at z + (r / zg) * ldz + (r % zg) * dim. */
	int (*gated_rmsnorm)(kern_queue *q, float *y, const float *x,
			     const float *z, int ldz, int zg, const void *w,
			     int wdt, int rows, int dim, float eps, int act);

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
	 * act BF16 rounds o. ws: at least delta_ws_bytes(ctx, T, Hv, dk, dv)
	 * bytes of device memory. */
	int (*delta_chunked)(kern_queue *q, float *o, float *S, const float *qq,
			     const float *k, int ldqk, const float *v, int ldv,
			     const float *g, const float *beta, int T, int Hk,
			     int Hv, int dk, int dv, void *ws, int act);
	/* The workspace delta_chunked needs for up to T tokens; 0 for shapes
	 * the backend cannot run. */
	size_t (*delta_ws_bytes)(kern_ctx *ctx, int T, int Hv, int dk, int dv);

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
	 * v_j) in order j = 0.. A row's bits do not depend on the rows called
	 * with it outside its piece: the rows between two lines of
	 * kern_limits.chunk (positions that are multiples of it), so that
	 * one call of a forward equals a call a piece (a device backend that
	 * cuts a row's keys into segments cuts them by its piece). */
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

	/* ---- fused ops (optional: NULL means the model runs the unfused
	 * ops named, which stay the reference in the tests) ---- */

	/* add then rmsnorm: h = rnd(h + x) over [rows, dim] contiguous, then
	 * y = rmsnorm(h) as rmsnorm() with plus_one (y contiguous). */
	int (*add_rmsnorm)(kern_queue *q, float *h, const float *x, float *y,
			   const void *w, int wdt, int rows, int dim, float eps,
			   int act);
	/* matmul of swiglu: y = matmul(rnd(rnd(silu(gate)) * up)) with the
	 * SwiGLU's [T, K] input computed on the way into the product (gate
	 * and up rows spaced ldgu apart); the same bits as swiglu() into a
	 * buffer and matmul() of it. */
	int (*matmul_swiglu)(kern_queue *q, float *y, int ldy,
			     const float *gate, const float *up, int ldgu,
			     const void *W, int wdt, int T, int N, int K,
			     int act);

	/* dst[0..n) of dtype dt (bf16, f16, f32) = uniform values in
	 * [lo, hi): element i is a function of (seed, i) alone, the same bits
	 * on every backend (kern_fill_value). For --load-format dummy. */
	int (*fill_random)(kern_queue *q, void *dst, int dt, size_t n,
			   uint64_t seed, float lo, float hi);

	/* ---- sampling ---- */

	/* Picks one token from logits [V] (device, fp32) and writes it to
	 * *host_id (synchronising q) and, when dev_id is not NULL, to the
	 * device int32 *dev_id (the next decode step's input). draw is 64
	 * random bits of the caller's generator (unused when greedy).
	 *
	 * The rule, the same on every backend so that the same draw and the
	 * same logits give the same token: a NaN logit counts as -inf. Greedy
	 * takes the lowest index among the maxima. Otherwise the candidates
	 * are sorted by (logit desc, index asc) and cut to top_k; with mx the
	 * first logit, w_i = kern_exp_det(((double)l_i - mx) / temperature);
	 * C(k) is the blocked prefix sum of w_0..w_{k-1} in double: with
	 * B = KERN_SAMPLE_BLOCK and b = k / B, C(k) = P_b + R_k, where P_b
	 * adds the sequential sums of blocks 0..b-1 in order and R_k sums
	 * w_{bB}..w_{k-1} in order (each sum starting from +0);
	 * min_p keeps the first k with w_i >= min_p; top_p then keeps the
	 * shortest prefix with C(k) >= top_p * C(n) (n: after top_k); u =
	 * (draw >> 11) * 2^-53 * C(kept), and the token is the first i with
	 * u < C(i + 1) (the last kept if none). */
	int (*sample)(kern_queue *q, const float *logits, int V,
		      const kern_sampling *p, uint64_t draw, int32_t *dev_id,
		      int32_t *host_id);

	/* The log-probabilities of logits [V] (device, fp32; the raw
	 * logits: no temperature, no cut), for OpenAI's logprobs: lp[0] is
	 * token tok's; ids[0..n_top) are the n_top likeliest tokens by
	 * (logit desc, index asc), lp[1 + r] that of ids[r]. 0 <= n_top <=
	 * KERN_LOGPROBS_MAX and n_top <= V; lp and ids are host memory, and
	 * the call synchronises q (2 n_top + 1 values come back, never the
	 * logits).
	 *
	 * The rule, the same bits on every backend: keys as sample()'s (NaN
	 * is -inf, -0 is +0), mx the largest; S sums w_i =
	 * kern_exp_det((double)key_i - mx) in blocks of KERN_SAMPLE_BLOCK
	 * indices (each block in index order from +0, then the blocks' sums
	 * in order from +0); lp_i = (float)(((double)key_i - mx) -
	 * kern_log_det(S)). With mx not finite, lp_i is 0 where key_i = mx =
	 * +inf and -inf elsewhere. */
	int (*logprobs)(kern_queue *q, const float *logits, int V, int32_t tok,
			int n_top, float *lp, int32_t *ids);

	/* ---- staging memory (optional: NULL on backends whose upload
	 * reads any host memory at full speed, or that have none) ---- */

	/* Host memory an upload() reads at the bus's rate (CUDA: pinned,
	 * cudaHostAlloc), for staging buffers the caller refills: bytes of
	 * it at *out, page aligned, which the caller frees with
	 * host_free(). An upload from it is asynchronous, so the caller
	 * refills it only after the queue's next sync (upload's rule). */
	int (*host_alloc)(kern_ctx *ctx, size_t bytes, void **out);
	void (*host_free)(kern_ctx *ctx, void *p); /* safe on NULL */

	/* ---- the fused prologues (optional: NULL, or MOOR_EUNSUP for a
	 * shape the backend does not fuse, means the model runs the
	 * unfused ops named, which stay the reference in the tests) ---- */

	/* A full-attention layer's ops between its projection and attention,
	 * for T rows at pos0, with the same bits as split_qgate(qo, go, qg);
	 * rmsnorm(qo; qw) over T Hq rows and rmsnorm(k; kw) over T Hkv rows
	 * (D wide, plus_one, eps); rope(qo) and rope(k) (rot, theta, pos0);
	 * kv_write(K, k) and kv_write(V, v) at row pos0. qg [T, Hq, 2D], k
	 * and v [T, Hkv, D] contiguous; qo, go [T, Hq, D]; qw and kw [D] of
	 * wdt. k itself is not written (K's row holds it normalised and
	 * rotated). */
	int (*attn_prep)(kern_queue *q, float *qo, float *go, const float *qg,
			 const float *k, const float *v, const void *qw,
			 const void *kw, int wdt, void *K, void *V, int kvdt,
			 int T, int Hq, int Hkv, int D, int rot, int64_t pos0,
			 float theta, float eps, int act);
	/* A GDN layer's ops between its projection and the delta rule, for
	 * T tokens, with the same bits as conv1d(u [T, C], mixed (rows ldin
	 * apart), tail; cw) over C = 2 Hk dk + Hv dv channels (q heads, k
	 * heads, v heads), l2norm() of u's q heads with scale qscale and of
	 * its k heads with scale 1 (both in fp32, act F32, eps), and
	 * gdn_gates(beta, g [T, Hv]; b, a (rows ldba apart), A_log, dt_bias)
	 * over Hv heads with act. Decode's step (T = 1) and a prefill's
	 * chunk are both fusable; which shapes a backend fuses is its own
	 * (CUDA: any at T = 1, dk = 128 and a 4-tap conv above). */
	int (*gdn_prep)(kern_queue *q, float *u, const float *mixed,
			int ldin, float *tail, const void *cw, int cwdt, int Kc,
			int Hk, int dk, int Hv, int dv, float eps, float qscale,
			float *beta, float *g, const float *b, const float *a,
			int ldba, const float *A_log, const float *dt_bias,
			int T, int act);

	/* ---- the fused MLP (optional: NULL, or MOOR_EUNSUP for a case
	 * the backend does not fuse, means the model runs the two ops
	 * named) ---- */

	/* The MLP of T rows with the same bits as matmul(tmp, 2I; x, Wgu
	 * [2I, H]) then matmul_swiglu(y; gate = tmp, up = tmp + I, ldgu 2I;
	 * Wd [H, I]). tmp is the caller's scratch of T x 2I floats; what it
	 * holds after the call is unspecified (CUDA leaves gate | up there
	 * unrounded and rounds them on their way into the SwiGLU, which
	 * saves a pass over [T, 2I] fp32; one row, a decode step's, it
	 * leaves them rounded, made by the GEMV that writes the SwiGLU). */
	int (*mlp)(kern_queue *q, float *y, int ldy, const float *x, int ldx,
		   float *tmp, const void *Wgu, const void *Wd, int wdt, int T,
		   int H, int I, int act);
} kern_ops;

/* ---- the registry ---- */

/* The backend of that name ("cpu", "cuda") when this build has it, else
 * NULL. */
const kern_ops *kern_backend(const char *name);
/* The backend `auto` picks: CUDA when it is built and its probe() finds
 * the device, else the CPU backend. why (MOOR_ERRLEN) gets a sentence for
 * the start-up log saying which and why. */
const kern_ops *kern_backend_auto(int device, char *why);
/* The names this build has, NULL-terminated. */
const char *const *kern_backend_names(void);
/* The environment variables whose values change the bits a prefill op
 * computes (NULL-terminated): the engine's fingerprint covers the ones
 * set, so that rows stored under one are never served to an engine
 * without it. A knob that keeps the bits (a bit-exact variant of a
 * kernel, a benchmark's sweep, a decode-only switch: decode's rows lie
 * above the taint line and are stored as what they are) is not listed;
 * a new knob that changes prefill's bits is added here. */
extern const char *const kern_bits_env[];

/* ---- the sampler's arithmetic, shared by every backend ---- */

/* e^x in double from + and * alone (a fixed sequence: x = n ln2 + r,
 * |r| <= ln2/2, a degree-13 Taylor polynomial of e^r, 2^n from the
 * exponent bits), so the CPU and a GPU give the same bits for the same x.
 * x <= 0 (the sampler's range): below -745 it gives 0. */
double kern_exp_det(double x);

/* ln x in double from +, *, / and the bits alone (x = m 2^e, an
 * atanh series of m), the same bits on the CPU and a GPU. x normal, > 0. */
double kern_log_det(double x);

/* fill_random()'s element i as fp32 before its conversion to the dtype:
 * lo + (hi - lo) * u, u = the top 24 bits of SplitMix64(seed + i *
 * 0x9e3779b97f4a7c15) times 2^-24, in fp32 with each operation rounded. */
float kern_fill_value(uint64_t seed, uint64_t i, float lo, float hi);

/* The host implementation of sample()'s rule over host logits [V]; work
 * holds at least kern_sample_work_bytes(V) bytes. */
int32_t kern_sample_host(const float *logits, int V, const kern_sampling *p,
			 uint64_t draw, void *work);
size_t kern_sample_work_bytes(int V);

/* The host implementation of logprobs()'s rule over host logits [V]. */
int kern_logprobs_host(const float *logits, int V, int32_t tok, int n_top,
		       float *lp, int32_t *ids);

/* The backends' vtables: for the registry and each backend's own tests
 * only (kernels/registry.c). kern_cuda_ops exists when CUDA is built. */
extern const kern_ops kern_cpu_ops;

#endif
