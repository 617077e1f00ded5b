/* backend.c: the CPU backend's vtable, lifecycle and memory. Device memory
 * is host memory; every op runs to completion on the context's thread pool
 * before it returns, so sync() has nothing to wait for. create() also
 * allocates the per-thread scratch slots (cpu.h) the ops use instead of
 * allocating. */
#include "cpu.h"

#include <stdlib.h>

static void cpu_destroy(kern_ctx *ctx)
{
	if (!ctx)
		return;
	moor_pool_free(ctx->pool);
	free(ctx->scratch);
	free(ctx->busy);
	free(ctx);
}

static int cpu_create(const kern_config *cfg, kern_ctx **out)
{
	if (!out)
		return MOOR_ERANGE;
	*out = NULL;
	int threads = cfg ? cfg->threads : 0;
	if (threads < 0)
		return MOOR_ERANGE;
	if (threads == 0)
		threads = 1;
	kern_ctx *ctx = calloc(1, sizeof *ctx);
	if (!ctx)
		return -ENOMEM;
	ctx->pool = moor_pool_new(threads);
	ctx->nslot = threads;
	ctx->scratch = aligned_alloc(64, (size_t)threads * KCPU_SCRATCH * 4);
	ctx->busy = calloc((size_t)threads, sizeof *ctx->busy);
	if (!ctx->pool || !ctx->scratch || !ctx->busy) {
		cpu_destroy(ctx);
		return -ENOMEM;
	}
	for (int i = 0; i < threads; i++)
		atomic_init(&ctx->busy[i], 0);
	ctx->att_cap = KCPU_SCRATCH;
	ctx->q.ctx = ctx;
	*out = ctx;
	return 0;
}

static kern_queue *cpu_queue(kern_ctx *ctx)
{
	return ctx ? &ctx->q : NULL;
}

static int cpu_alloc(kern_ctx *ctx, size_t bytes, void **out)
{
	if (!ctx || !out)
		return MOOR_ERANGE;
	/* aligned_alloc wants a multiple of the alignment; never 0 bytes */
	size_t n = (bytes + 63) & ~(size_t)63;
	if (n < bytes)
		return -ENOMEM;
	*out = aligned_alloc(64, n ? n : 64);
	return *out ? 0 : -ENOMEM;
}

static void cpu_free(kern_ctx *ctx, void *p)
{
	(void)ctx;
	free(p);
}

static int cpu_wrap_host(kern_ctx *ctx, const void *host, size_t bytes,
			 void **out)
{
	if (!ctx || !out || (!host && bytes))
		return MOOR_ERANGE;
	*out = (void *)host;
	return 0;
}

static int cpu_memcpy(kern_queue *q, void *dst, const void *src, size_t n)
{
	if (!q || (n && (!dst || !src)))
		return MOOR_ERANGE;
	if (n)
		memmove(dst, src, n);
	return 0;
}

static int cpu_zero(kern_queue *q, void *dst, size_t n)
{
	if (!q || (n && !dst))
		return MOOR_ERANGE;
	if (n)
		memset(dst, 0, n);
	return 0;
}

static int cpu_sync(kern_queue *q)
{
	return q ? 0 : MOOR_ERANGE;
}

const kern_ops kern_cpu_ops = {
    .abi = KERN_ABI_VERSION,
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .queue = cpu_queue,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .wrap_host = cpu_wrap_host,
    .unwrap = NULL, /* a wrapped pointer is the host's own: nothing to do */
    .upload = cpu_memcpy,
    .download = cpu_memcpy,
    .copy = cpu_memcpy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .embed = kcpu_embed,
    .matmul = kcpu_matmul,
    .add = kcpu_add,
    .rmsnorm = kcpu_rmsnorm,
    .gated_rmsnorm = kcpu_gated_rmsnorm,
    .conv1d = kcpu_conv1d,
    .gdn_gates = kcpu_gdn_gates,
    .l2norm = kcpu_l2norm,
    .delta_chunked = kcpu_delta_chunked,
    .delta_ws_bytes = kcpu_delta_ws_bytes,
    .delta_recurrent = kcpu_delta_recurrent,
    .rope = kcpu_rope,
    .attention = kcpu_attention,
    .kv_write = kcpu_kv_write,
    .swiglu = kcpu_swiglu,
    .split_qgate = kcpu_split_qgate,
    .sigmoid_mul = kcpu_sigmoid_mul,
};
