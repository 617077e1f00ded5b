/* backend.c: the CPU backend's vtable, lifecycle and memory. Device memory
 * is host memory; every op runs to completion on the context's thread pool
 * before it returns, so sync() has nothing to wait for. create() also
 * allocates the per-thread scratch slots (cpu.h) the ops use instead of
 * allocating. */
#include "cpu.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void cpu_destroy(kern_ctx *ctx)
{
	if (!ctx)
		return;
	moor_pool_free(ctx->pool);
	for (int i = 0; i < KCPU_MAPS; i++)
		if (ctx->maps[i].p)
			munmap(ctx->maps[i].p, ctx->maps[i].n);
	free(ctx->sample_work);
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
	ctx->avx2 = kcpu_have_avx2() && !getenv("MOOR_CPU_NO_AVX2");
	ctx->q.ctx = ctx;
	*out = ctx;
	return 0;
}

static int cpu_probe(int device, char *err)
{
	(void)device;
	(void)err;
	return 0;
}

/* One queue serves both kinds: every op is complete on return. */
static kern_queue *cpu_queue(kern_ctx *ctx, int kind)
{
	(void)kind;
	return ctx ? &ctx->q : NULL;
}

static int cpu_reserve(kern_ctx *ctx, const kern_limits *lim)
{
	if (!ctx || !lim || lim->vocab < 0)
		return MOOR_ERANGE;
	if (lim->vocab <= ctx->sample_v)
		return 0;
	void *w = malloc(kern_sample_work_bytes(lim->vocab));
	if (!w)
		return -ENOMEM;
	free(ctx->sample_work);
	ctx->sample_work = w;
	ctx->sample_v = lim->vocab;
	return 0;
}

static void cpu_describe(kern_ctx *ctx, char *out, size_t n)
{
	snprintf(out, n, "cpu, %d threads", ctx ? moor_pool_threads(ctx->pool) : 0);
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

/* The device arena of a cached on the CPU backend: a shm object, mapped
 * shared (both processes see the same bytes). */
static int cpu_import_ipc(kern_ctx *ctx, const kern_ipc *h, void **out,
			  char *err)
{
	if (!ctx || !h || !out)
		return MOOR_ERANGE;
	*out = NULL;
	if (h->kind != KERN_IPC_SHM) {
		moor_errf(err, "the cpu backend imports shm objects, not "
			       "memory of kind %u (a CUDA arena needs "
			       "--backend cuda)",
			  h->kind);
		return MOOR_EUNSUP;
	}
	char name[KERN_IPC_NAME_MAX + 1];
	memcpy(name, h->name, KERN_IPC_NAME_MAX);
	name[KERN_IPC_NAME_MAX] = 0;
	if (name[0] != '/' || strchr(name + 1, '/') || h->size == 0) {
		moor_errf(err, "arena name '%s' (%llu bytes) is not a shm object",
			  name, (unsigned long long)h->size);
		return MOOR_EFORMAT;
	}
	int slot = -1;
	for (int i = 0; i < KCPU_MAPS && slot < 0; i++)
		if (!ctx->maps[i].p)
			slot = i;
	if (slot < 0) {
		moor_errf(err, "more than %d arenas imported at once", KCPU_MAPS);
		return MOOR_ENOSPACE;
	}
	int fd = shm_open(name, O_RDWR, 0);
	if (fd < 0) {
		int e = -errno;
		moor_errf(err, "shm %s: %s", name, strerror(errno));
		return e;
	}
	struct stat st;
	if (fstat(fd, &st) || (uint64_t)st.st_size < h->size) {
		moor_errf(err, "shm %s: %lld bytes, the handle says %llu", name,
			  (long long)st.st_size, (unsigned long long)h->size);
		close(fd);
		return MOOR_ETRUNC;
	}
	void *p = mmap(NULL, h->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int e = errno;
	close(fd);
	if (p == MAP_FAILED) {
		moor_errf(err, "mmap %s: %s", name, strerror(e));
		return -e;
	}
	ctx->maps[slot] = (kcpu_map){p, h->size};
	*out = p;
	return 0;
}

static void cpu_unimport(kern_ctx *ctx, void *p)
{
	if (!ctx || !p)
		return;
	for (int i = 0; i < KCPU_MAPS; i++)
		if (ctx->maps[i].p == p) {
			munmap(p, ctx->maps[i].n);
			ctx->maps[i] = (kcpu_map){0};
			return;
		}
	MOOR_ASSERT(!"unimport of a pointer import_ipc did not give");
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

static int cpu_event_new(kern_ctx *ctx, kern_event **out)
{
	if (!ctx || !out)
		return MOOR_ERANGE;
	*out = calloc(1, sizeof **out);
	return *out ? 0 : -ENOMEM;
}

static void cpu_event_free(kern_ctx *ctx, kern_event *e)
{
	(void)ctx;
	free(e);
}

static int cpu_record(kern_queue *q, kern_event *e)
{
	if (!q || !e)
		return MOOR_ERANGE;
	e->recorded = 1;
	return 0;
}

static int cpu_wait(kern_queue *q, kern_event *e)
{
	return q && e ? 0 : MOOR_ERANGE;
}

/* ---- greedy sample() ----
 *
 * The rule's greedy token is the lowest index among the maxima of the
 * keys (NaN as -inf, sample_rule.h). Tasks of a block of indices each find
 * their block's first maximum, four lanes apart (a lane keeps the first
 * index of its strict maxima; lanes then combine, a tie to the lower
 * index), and the blocks combine in order, a tie to the earlier: the
 * sequential loop's answer. On the pool because it is 0.22 ms on one
 * thread at a 151669 vocabulary, longer than the pool's spin: the workers
 * would sleep between decode steps and the next step would pay their
 * wake. */

#define GREEDY_MIN_BLOCK 16384
#define GREEDY_MAX_TASKS 64

struct greedy_job {
	const float *l;
	int V, block;
	float key[GREEDY_MAX_TASKS];
	int idx[GREEDY_MAX_TASKS];
};

static void greedy_task(void *arg, int t)
{
	struct greedy_job *j = arg;
	int i0 = t * j->block;
	int i1 = j->V - i0 < j->block ? j->V : i0 + j->block;
	const v4f ninf = v4_splat(-INFINITY);
	v4f bk = ninf;
	v4i bi = (v4i){0, 1, 2, 3} + i0;
	int i = i0;
	for (; i + 4 <= i1; i += 4) {
		v4f x = v4_load(j->l + i);
		x = v4_sel(x != x, ninf, x);
		v4i up = x > bk;
		bk = v4_sel(up, x, bk);
		bi = (up & ((v4i){0, 1, 2, 3} + i)) | (~up & bi);
	}
	float k = -INFINITY;
	int b = i0;
	for (int l = 0; l < 4 && i0 + l < i1; l++)
		if (bk[l] > k || (bk[l] == k && bi[l] < b)) {
			k = bk[l];
			b = bi[l];
		}
	for (; i < i1; i++) { /* the tail, after every lane's index */
		float x = j->l[i] != j->l[i] ? -INFINITY : j->l[i];
		if (x > k) {
			k = x;
			b = i;
		}
	}
	j->key[t] = k;
	j->idx[t] = b;
}

static int32_t greedy_pick(moor_pool *pool, const float *logits, int V)
{
	struct greedy_job j = {.l = logits, .V = V};
	j.block = (V + GREEDY_MAX_TASKS - 1) / GREEDY_MAX_TASKS;
	if (j.block < GREEDY_MIN_BLOCK)
		j.block = GREEDY_MIN_BLOCK;
	int tasks = (V + j.block - 1) / j.block;
	moor_pool_run(pool, tasks, greedy_task, &j);
	int b = j.idx[0];
	float k = j.key[0];
	for (int t = 1; t < tasks; t++)
		if (j.key[t] > k) {
			k = j.key[t];
			b = j.idx[t];
		}
	return b;
}

int kcpu_sample(kern_queue *q, const float *logits, int V,
		const kern_sampling *p, uint64_t draw, int32_t *dev_id,
		int32_t *host_id)
{
	if (!q || !logits || !p || !host_id || V <= 0)
		return MOOR_ERANGE;
	kern_ctx *c = q->ctx;
	int greedy = p->temperature <= 0.0f || p->top_k == 1;
	if (!greedy && V > c->sample_v)
		return MOOR_ERANGE; /* reserve() sizes the work */
	int32_t t = greedy ? greedy_pick(c->pool, logits, V)
			   : kern_sample_host(logits, V, p, draw, c->sample_work);
	*host_id = t;
	if (dev_id)
		*dev_id = t;
	return 0;
}

/* logprobs(): the host rule over the logits where they are. */
static int cpu_logprobs(kern_queue *q, const float *logits, int V, int32_t tok,
			int n_top, float *lp, int32_t *ids)
{
	if (!q)
		return MOOR_ERANGE;
	return kern_logprobs_host(logits, V, tok, n_top, lp, ids);
}

const kern_ops kern_cpu_ops = {
    .abi = KERN_ABI_VERSION,
    .name = "cpu",
    .caps = KERN_CAP_HOST_MEMORY,
    .probe = cpu_probe,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .queue = cpu_queue,
    .reserve = cpu_reserve,
    .describe = cpu_describe,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .wrap_host = cpu_wrap_host,
    .unwrap = NULL, /* a wrapped pointer is the host's own: nothing to do */
    .import_ipc = cpu_import_ipc,
    .unimport = cpu_unimport,
    .upload = cpu_memcpy,
    .download = cpu_memcpy,
    .copy = cpu_memcpy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .event_new = cpu_event_new,
    .event_free = cpu_event_free,
    .record = cpu_record,
    .wait = cpu_wait,
    /* no graphs: a CPU op has no launch cost to save */
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
    /* add_rmsnorm, matmul_swiglu: the model runs the unfused ops (the
     * fused ones save device-memory passes, which the CPU has no use for) */
    .fill_random = kcpu_fill_random,
    .sample = kcpu_sample,
    .logprobs = cpu_logprobs,
};
