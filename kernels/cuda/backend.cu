/* backend.cu: the CUDA backend's vtable, lifecycle, memory, queues, events,
 * graphs and the import of another process's device memory (ops.h). */
#include "cuda.cuh"

#include <cuda_profiler_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kcu_fail(kern_ctx *c, cudaError_t e, const char *what, const char *file,
	     int line)
{
	if (!c || !c->failed)
		moor_err("cuda: %s: %s (%s:%d)", what, cudaGetErrorString(e),
			 file, line);
	if (c && e != cudaErrorMemoryAllocation && e != cudaErrorInvalidValue)
		c->failed = 1;
	(void)cudaGetLastError(); /* clear a sticky launch error */
	return e == cudaErrorMemoryAllocation ? -ENOMEM : MOOR_EBACKEND;
}

/* ---- lifecycle ---- */

static int cu_probe(int device, char *err)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		moor_errf(err, "no CUDA device: %s", cudaGetErrorString(e));
		(void)cudaGetLastError();
		return MOOR_EUNSUP;
	}
	if (device < 0 || device >= n) {
		moor_errf(err, "CUDA device %d asked for, %d present", device, n);
		return MOOR_EUNSUP;
	}
	return 0;
}

static void cu_destroy(kern_ctx *c)
{
	if (!c)
		return;
	cudaSetDevice(c->device);
	for (int i = 0; i < 2; i++) {
		if (c->q[i].s)
			cudaStreamSynchronize(c->q[i].s);
		cudaFree(c->q[i].dpos);
		if (c->q[i].s)
			cudaStreamDestroy(c->q[i].s);
	}
	kcu_gemm_fini(c);
	kcu_sample_fini(c);
	kcu_gdn_fini(c);
	cudaFree(c->stage);
	cudaFree(c->att_part);
	free(c);
}

static int cu_create(const kern_config *cfg, kern_ctx **out)
{
	if (!out)
		return MOOR_ERANGE;
	*out = NULL;
	int dev = cfg ? cfg->device : 0;
	char err[MOOR_ERRLEN] = "";
	if (cu_probe(dev, err)) {
		moor_err("cuda: %s", err);
		return MOOR_EUNSUP;
	}
	kern_ctx *c = (kern_ctx *)calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	c->device = dev;
	int rc = 0;
	if (cudaSetDevice(dev) != cudaSuccess ||
	    cudaGetDeviceProperties(&c->prop, dev) != cudaSuccess) {
		rc = kcu_fail(c, cudaGetLastError(), "cudaSetDevice", __FILE__,
			      __LINE__);
		goto fail;
	}
	for (int i = 0; i < 2; i++) {
		c->q[i].ctx = c;
		c->q[i].kind = i;
		cudaError_t e =
		    cudaStreamCreateWithFlags(&c->q[i].s, cudaStreamNonBlocking);
		if (e == cudaSuccess)
			e = cudaMalloc((void **)&c->q[i].dpos, sizeof(int64_t));
		if (e != cudaSuccess) {
			rc = kcu_fail(c, e, "stream", __FILE__, __LINE__);
			goto fail;
		}
	}
	if ((rc = kcu_gemm_init(c)))
		goto fail;
	*out = c;
	return 0;
fail:
	cu_destroy(c);
	return rc;
}

static kern_queue *cu_queue(kern_ctx *c, int kind)
{
	if (!c || kind < 0 || kind > 1)
		return NULL;
	return &c->q[kind];
}

static int cu_reserve(kern_ctx *c, const kern_limits *lim)
{
	if (!c || !lim || lim->rows < 0 || lim->width < 0 || lim->window < 0)
		return MOOR_ERANGE;
	cudaSetDevice(c->device);
	kern_limits m = c->lim;
	if (lim->rows > m.rows)
		m.rows = lim->rows;
	if (lim->chunk > m.chunk)
		m.chunk = lim->chunk;
	if (lim->width > m.width)
		m.width = lim->width;
	if (lim->window > m.window)
		m.window = lim->window;
	if (lim->q_heads > m.q_heads)
		m.q_heads = lim->q_heads;
	if (lim->head_dim > m.head_dim)
		m.head_dim = lim->head_dim;
	if (lim->vocab > m.vocab)
		m.vocab = lim->vocab;
	/* the staged matmul input [rows, width]: 16-bit, or fp32 for an fp32
	 * model's SwiGLU (the lm_head's 8 rows of H fit too) */
	size_t st = (size_t)(m.rows > 8 ? m.rows : 8) * (size_t)m.width * 4;
	if (st > c->stage_bytes) {
		void *p;
		KCU(c, cudaMalloc(&p, st));
		cudaFree(c->stage);
		c->stage = p;
		c->stage_bytes = st;
	}
	size_t ap = kcu_att_part_bytes(&m);
	if (ap > c->att_part_bytes) {
		void *p;
		KCU(c, cudaMalloc(&p, ap));
		cudaFree(c->att_part);
		c->att_part = (float *)p;
		c->att_part_bytes = ap;
	}
	int rc = m.vocab > c->smp_v ? kcu_sample_reserve(c, m.vocab) : 0;
	if (rc)
		return rc;
	c->lim = m;
	return 0;
}

static void cu_describe(kern_ctx *c, char *out, size_t n)
{
	int rt = 0, drv = 0;
	cudaRuntimeGetVersion(&rt);
	cudaDriverGetVersion(&drv);
	size_t lt = cublasLtGetVersion();
	snprintf(out, n,
		 "%s, cc %d.%d, %d SMs, %.1f GiB, CUDA runtime %d.%d, driver "
		 "%d.%d, cuBLASLt %zu",
		 c->prop.name, c->prop.major, c->prop.minor,
		 c->prop.multiProcessorCount,
		 (double)c->prop.totalGlobalMem / (1u << 30), rt / 1000,
		 (rt % 1000) / 10, drv / 1000, (drv % 1000) / 10, lt);
}

/* ---- memory ---- */

static int cu_alloc(kern_ctx *c, size_t bytes, void **out)
{
	if (!c || !out)
		return MOOR_ERANGE;
	*out = NULL;
	cudaSetDevice(c->device);
	cudaError_t e = cudaMalloc(out, bytes ? bytes : 256);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		*out = NULL;
		return e == cudaErrorMemoryAllocation ? -ENOMEM
			: kcu_fail(c, e, "cudaMalloc", __FILE__, __LINE__);
	}
	return 0;
}

static void cu_free(kern_ctx *c, void *p)
{
	(void)c;
	if (p)
		cudaFree(p);
}

/* Pinned staging (ops.h host_alloc): an upload from it is a DMA. */
static int cu_host_alloc(kern_ctx *c, size_t bytes, void **out)
{
	if (!c || !out)
		return MOOR_ERANGE;
	*out = NULL;
	cudaSetDevice(c->device);
	cudaError_t e = cudaHostAlloc(out, bytes ? bytes : 1,
				      cudaHostAllocPortable);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		*out = NULL;
		return e == cudaErrorMemoryAllocation ? -ENOMEM
			: kcu_fail(c, e, "cudaHostAlloc", __FILE__, __LINE__);
	}
	return 0;
}

static void cu_host_free(kern_ctx *c, void *p)
{
	(void)c;
	if (p)
		cudaFreeHost(p);
}

static int cu_import_ipc(kern_ctx *c, const kern_ipc *h, void **out, char *err)
{
	if (!c || !h || !out)
		return MOOR_ERANGE;
	*out = NULL;
	if (h->kind != KERN_IPC_CUDA) {
		moor_errf(err,
			  "the cuda backend imports CUDA IPC handles, not memory "
			  "of kind %u (cached runs its device arena in shm: "
			  "start it with --device cuda)",
			  h->kind);
		return MOOR_EUNSUP;
	}
	if (h->device != c->device) {
		moor_errf(err, "the arena lives on device %d, this engine runs "
			       "on device %d",
			  h->device, c->device);
		return MOOR_EUNSUP;
	}
	cudaIpcMemHandle_t mh;
	static_assert(sizeof mh <= KERN_IPC_HANDLE_BYTES, "ipc handle size");
	memcpy(&mh, h->handle, sizeof mh);
	cudaSetDevice(c->device);
	cudaError_t e =
	    cudaIpcOpenMemHandle(out, mh, cudaIpcMemLazyEnablePeerAccess);
	if (e != cudaSuccess) {
		moor_errf(err, "cudaIpcOpenMemHandle: %s", cudaGetErrorString(e));
		(void)cudaGetLastError();
		*out = NULL;
		return MOOR_EBACKEND;
	}
	return 0;
}

static void cu_unimport(kern_ctx *c, void *p)
{
	(void)c;
	if (p)
		cudaIpcCloseMemHandle(p);
}

static int cu_upload(kern_queue *q, void *dst, const void *src, size_t n)
{
	if (!q || (n && (!dst || !src)))
		return MOOR_ERANGE;
	if (n)
		KCU(q->ctx, cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice,
					    q->s));
	return 0;
}

static int cu_sync(kern_queue *q)
{
	if (!q)
		return MOOR_ERANGE;
	KCU(q->ctx, cudaStreamSynchronize(q->s));
	return q->ctx->failed ? MOOR_EBACKEND : 0;
}

static int cu_download(kern_queue *q, void *dst, const void *src, size_t n)
{
	if (!q || (n && (!dst || !src)))
		return MOOR_ERANGE;
	if (n)
		KCU(q->ctx, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost,
					    q->s));
	return cu_sync(q);
}

static int cu_copy(kern_queue *q, void *dst, const void *src, size_t n)
{
	if (!q || (n && (!dst || !src)))
		return MOOR_ERANGE;
	if (n)
		KCU(q->ctx, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice,
					    q->s));
	return 0;
}

static int cu_zero(kern_queue *q, void *dst, size_t n)
{
	if (!q || (n && !dst))
		return MOOR_ERANGE;
	if (n)
		KCU(q->ctx, cudaMemsetAsync(dst, 0, n, q->s));
	return 0;
}

/* ---- events ---- */

static int cu_event_new(kern_ctx *c, kern_event **out)
{
	if (!c || !out)
		return MOOR_ERANGE;
	kern_event *e = (kern_event *)calloc(1, sizeof *e);
	if (!e)
		return -ENOMEM;
	cudaError_t r = cudaEventCreateWithFlags(&e->e, cudaEventDisableTiming);
	if (r != cudaSuccess) {
		free(e);
		return kcu_fail(c, r, "cudaEventCreate", __FILE__, __LINE__);
	}
	*out = e;
	return 0;
}

static void cu_event_free(kern_ctx *c, kern_event *e)
{
	(void)c;
	if (!e)
		return;
	cudaEventDestroy(e->e);
	free(e);
}

static int cu_record(kern_queue *q, kern_event *e)
{
	if (!q || !e)
		return MOOR_ERANGE;
	KCU(q->ctx, cudaEventRecord(e->e, q->s));
	return 0;
}

static int cu_wait(kern_queue *q, kern_event *e)
{
	if (!q || !e)
		return MOOR_ERANGE;
	KCU(q->ctx, cudaStreamWaitEvent(q->s, e->e, 0));
	return 0;
}

/* ---- graphs ---- */

/* Which of a captured graph's launches overlap their predecessor
 * (cuda.cuh, kcu_go): the GEMVs' alone by default (MOOR_PDL=gemv), every
 * launch with MOOR_PDL=1, none with MOOR_PDL=0 (read once). Measured on
 * an H100 with the 27B's shapes (bench_gpu, 32 decode steps), 2026-12-06:
 * the GEMVs' alone 18.73, 19.46, 20.42 and 22.29 ms a step at 8k, 32k,
 * 64k and 128k against 18.83, 19.58, 20.58 and 22.43 with none (the GEMV
 * prefetching 4 passes before its wait instead of 2: 19.12 at 8k);
 * earlier, every launch 22.35 ms at 8k against 21.64 with none: each
 * small kernel resident and waiting before its turn cost more than it
 * hid. The bits are the same in every mode (the GPU suite passed with
 * none and with the GEMVs' alone, on that H100). */
static int pdl_on(void)
{
	static int on = -1;
	if (on < 0) {
		const char *e = getenv("MOOR_PDL");
		on = e && !strcmp(e, "0")   ? KCU_PDL_OFF
		     : e && !strcmp(e, "1") ? KCU_PDL_ALL
					    : KCU_PDL_GEMV;
	}
	return on;
}

static int cu_graph_begin(kern_queue *q, int64_t cap_pos, int64_t max_len)
{
	if (!q || q->capturing || cap_pos < 0 || max_len < cap_pos + 1)
		return MOOR_ERANGE;
	KCU(q->ctx,
	    cudaStreamBeginCapture(q->s, cudaStreamCaptureModeThreadLocal));
	q->capturing = 1;
	q->pdl = pdl_on();
	q->cap_pos = cap_pos;
	q->max_len = max_len;
	return 0;
}

static int cu_graph_end(kern_queue *q, kern_graph **out)
{
	if (!q || !out || !q->capturing)
		return MOOR_ERANGE;
	*out = NULL;
	q->capturing = 0;
	q->pdl = 0;
	cudaGraph_t g = NULL;
	KCU(q->ctx, cudaStreamEndCapture(q->s, &g));
	kern_graph *kg = (kern_graph *)calloc(1, sizeof *kg);
	if (!kg) {
		cudaGraphDestroy(g);
		return -ENOMEM;
	}
	kg->g = g;
	cudaError_t e = cudaGraphInstantiate(&kg->x, g, 0);
	if (e != cudaSuccess) {
		cudaGraphDestroy(g);
		free(kg);
		return kcu_fail(q->ctx, e, "cudaGraphInstantiate", __FILE__,
				__LINE__);
	}
	*out = kg;
	return 0;
}

static __global__ void set_pos(int64_t *dpos, int64_t pos)
{
	kcu_pdl_enter();
	*dpos = pos;
}

/* MOOR_CUPROF_LAUNCH=N: the process's Nth graph launch (from 1) runs
 * between cudaProfilerStart and cudaProfilerStop, for a profiler started
 * with its collection off (ncu --profile-from-start off): one decode step's
 * kernels, each timed on its own. Read once; 0 or unset: never. */
static long cuprof_launch(void)
{
	static long n = -1;
	if (n < 0) {
		n = kcu_env_int("MOOR_CUPROF_LAUNCH", 0);
		n = n > 0 ? n : 0;
	}
	return n;
}

static int cu_graph_launch(kern_queue *q, kern_graph *g, int64_t pos)
{
	static long launches;
	if (!q || !g || pos < 0)
		return MOOR_ERANGE;
	int prof = cuprof_launch() && ++launches == cuprof_launch();
	if (prof)
		cudaProfilerStart();
	kcu_go(q, set_pos, 1, 1, 0, q->dpos, pos);
	KCU_LAUNCHED(q->ctx);
	KCU(q->ctx, cudaGraphLaunch(g->x, q->s));
	if (prof) {
		KCU(q->ctx, cudaStreamSynchronize(q->s));
		cudaProfilerStop();
	}
	return 0;
}

static void cu_graph_free(kern_ctx *c, kern_graph *g)
{
	(void)c;
	if (!g)
		return;
	cudaGraphExecDestroy(g->x);
	cudaGraphDestroy(g->g);
	free(g);
}

extern "C" const kern_ops kern_cuda_ops = {
    /* .abi = */ KERN_ABI_VERSION,
    /* .name = */ "cuda",
    /* .caps = */ 0,
    /* .probe = */ cu_probe,
    /* .create = */ cu_create,
    /* .destroy = */ cu_destroy,
    /* .queue = */ cu_queue,
    /* .reserve = */ cu_reserve,
    /* .describe = */ cu_describe,
    /* .alloc = */ cu_alloc,
    /* .free = */ cu_free,
    /* .wrap_host = */ NULL,
    /* .unwrap = */ NULL,
    /* .import_ipc = */ cu_import_ipc,
    /* .unimport = */ cu_unimport,
    /* .upload = */ cu_upload,
    /* .download = */ cu_download,
    /* .copy = */ cu_copy,
    /* .zero = */ cu_zero,
    /* .sync = */ cu_sync,
    /* .event_new = */ cu_event_new,
    /* .event_free = */ cu_event_free,
    /* .record = */ cu_record,
    /* .wait = */ cu_wait,
    /* .graph_begin = */ cu_graph_begin,
    /* .graph_end = */ cu_graph_end,
    /* .graph_launch = */ cu_graph_launch,
    /* .graph_free = */ cu_graph_free,
    /* .embed = */ kcu_embed,
    /* .matmul = */ kcu_matmul,
    /* .add = */ kcu_add,
    /* .rmsnorm = */ kcu_rmsnorm,
    /* .gated_rmsnorm = */ kcu_gated_rmsnorm,
    /* .conv1d = */ kcu_conv1d,
    /* .gdn_gates = */ kcu_gdn_gates,
    /* .l2norm = */ kcu_l2norm,
    /* .delta_chunked = */ kcu_delta_chunked,
    /* .delta_ws_bytes = */ kcu_delta_ws_bytes,
    /* .delta_recurrent = */ kcu_delta_recurrent,
    /* .rope = */ kcu_rope,
    /* .attention = */ kcu_attention,
    /* .kv_write = */ kcu_kv_write,
    /* .swiglu = */ kcu_swiglu,
    /* .split_qgate = */ kcu_split_qgate,
    /* .sigmoid_mul = */ kcu_sigmoid_mul,
    /* .add_rmsnorm = */ kcu_add_rmsnorm,
    /* .matmul_swiglu = */ kcu_matmul_swiglu,
    /* .fill_random = */ kcu_fill_random,
    /* .sample = */ kcu_sample,
    /* .logprobs = */ kcu_logprobs,
    /* .host_alloc = */ cu_host_alloc,
    /* .host_free = */ cu_host_free,
    /* .attn_prep = */ kcu_attn_prep,
    /* .gdn_prep = */ kcu_gdn_prep,
    /* .mlp = */ kcu_mlp,
};

extern "C" const kern_ops *const kern_cuda_entry = &kern_cuda_ops;
