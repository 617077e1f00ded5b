/* arena_cuda.c: the device arena on CUDA and the CUDA mover (arena.h).
 * Built only when CUDA is (arena_nocuda.c otherwise).
 *
 * The device arena is one cudaMalloc of the whole --device-gb, checked
 * against cudaMemGetInfo first and zeroed (a fresh shm arena reads as zeros
 * too; the zeroing waited for before the call returns: it runs on the
 * legacy stream, which no stream of the mover's or an engine's waits
 * for), exported with cudaIpcGetMemHandle; the engine opens the handle
 * (import_ipc) and computes into it. The memory is cached's: an engine
 * that dies frees nothing of it.
 *
 * The mover runs every copy of cached's on one stream of its own, in
 * order; sync() waits for them. A host pointer inside the host arena is
 * pinned memory (registered here, in parts of REG_PART bytes, each its own
 * cudaHostRegister): a copy is split at the parts' edges so that every DMA
 * reads or writes one registration. Host-to-host copies (the park's bounce
 * buffer) wait for the stream, then memcpy: the stream's earlier copies
 * may be writing their source.
 *
 * Batches (copyv; MOOR_MOVER_BATCH=0 turns them off): the pieces of a
 * copyv between the arenas gather into one cudaMemcpy3DBatchAsync, whose
 * copies run in no
 * order among themselves. The order given is kept by arena_batch.h's
 * rules: the gathered pieces go to the stream before a piece that does
 * not join them (issued alone: pageable memory; or on the CPU: host to
 * host), before one that writes bytes one of them reads or writes or
 * reads bytes one of them writes, when the batch is full, and at the end
 * of the call. So every call of the mover leaves nothing gathered: what
 * it was given is on a stream (or done) when it returns, for mark, sync
 * and sum2 to order.
 *
 * What a copy costs the CPU. A restore from the host arena is a thousand
 * copies or more (a copy a view a block of rows), so a copy asks the
 * runtime nothing it can answer itself: which side of it is device memory
 * is read from the addresses of the two arenas the mover knows (the
 * device arena and the registered host arena), the runtime asked only of
 * a pointer outside both (cudaPointerGetAttributes: a pageable staging
 * buffer of the spill or the disk tier, an engine's buffer); and the
 * mover's device is made current once per thread (a thread-local flag
 * that every cudaSetDevice of this file keeps), not once per copy.
 *
 * Lanes (arena.h): lane 0 is the mover's stream, lanes 1 and 2 streams
 * of their own, so that copies to the device and copies from it (the
 * park's swap) run side by side over a full-duplex PCIe link; a point is
 * an event recorded on a lane's stream (a ring of ARENA_MARKS a lane),
 * after() a cudaStreamWaitEvent on it, which waits for the event as it
 * was recorded when after() was called. Lanes are streams of their own
 * by default; MOOR_MOVER_LANES=0 makes every lane the one stream (after()
 * then does nothing: the swap in one line), and MOOR_MOVER_BATCH=0 issues
 * every copy alone, both for measuring. On an H100 (2026-12-06, bench_ttft
 * at 32k, every row's bits checked) the park's swap took a plan of 115 ms
 * in 75 calls with both against 152 ms in 277 calls without, the pin 49
 * ms in 3 calls against 49 ms in 224; the GPU suite passed either way.
 *
 * Sums (sum2): a block of the spill is checked by the two sums of
 * dfile_sum2 per buffer; over device memory they are computed by a kernel
 * (arena_cuda_sum.cu) on lane 0's stream, after the other lanes are waited
 * for, into 2 * ARENA_SUM_BLOCKS partials of a device buffer of the
 * mover's, copied back to a pinned buffer of its own on the same stream
 * and added on the host (16 KiB out instead of the block). Host memory is
 * summed by dfile_sum2 once every lane is done. On an H100 (test_arena_cuda,
 * 2026-12-06) 64 MiB of device memory sum in 0.046 ms, the call and its
 * sync included (1.45 TB/s), where a copy to pageable memory and
 * dfile_sum2 took 17 ms.
 */
#include "arena.h"

#include <cuda_runtime.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arena_batch.h"
#include "arena_cuda_sum.h"
#include "dfile.h"
#include "moor.h"

/* The host arena is registered in parts of this many bytes (1 GiB;
 * MOOR_REG_PART_KB sets another, a test seam: test_arena_cuda crosses the
 * parts' edges with a small arena). */
static uint64_t reg_part = 1ull << 30;
#define REG_PART reg_part

/* The device this thread made current through set_device, plus one (0:
 * none yet). A runtime's current device is per thread: the disk tier's
 * writer calls its twin mover on a thread of its own. Only this file's
 * cudaSetDevice calls keep it (arena.h: a thread that calls a mover does
 * not switch devices behind it). */
static _Thread_local int tl_dev;

static cudaError_t set_device(int device)
{
	if (tl_dev == device + 1)
		return cudaSuccess;
	cudaError_t e = cudaSetDevice(device);
	tl_dev = e == cudaSuccess ? device + 1 : 0;
	return e;
}

static double gib(uint64_t b)
{
	return (double)b / (double)(1ull << 30);
}

static int cu_err(cudaError_t e, const char *what, char *err)
{
	moor_errf(err, "%s: %s", what, cudaGetErrorString(e));
	(void)cudaGetLastError();
	return e == cudaErrorMemoryAllocation ? -ENOMEM : MOOR_EBACKEND;
}

int arena_cuda_probe(int device, char *err)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		moor_errf(err, "no CUDA device: %s", cudaGetErrorString(e));
		(void)cudaGetLastError();
		return MOOR_EUNSUP;
	}
	if (device < 0 || device >= n) {
		moor_errf(err, "CUDA device %d asked for, %d present", device,
			  n);
		return MOOR_EUNSUP;
	}
	return 0;
}

int arena_cuda_mem(int device, uint64_t *free_b, uint64_t *total_b, char *err)
{
	*free_b = *total_b = 0;
	int rc = arena_cuda_probe(device, err);
	if (rc)
		return rc;
	cudaError_t e = set_device(device);
	if (e != cudaSuccess)
		return cu_err(e, "cudaSetDevice", err);
	size_t fr = 0, tot = 0;
	if ((e = cudaMemGetInfo(&fr, &tot)) != cudaSuccess)
		return cu_err(e, "cudaMemGetInfo", err);
	*free_b = fr;
	*total_b = tot;
	return 0;
}

/* ---- the device arena ---- */

typedef struct dev_mem {
	void *p;
	int device;
	cudaIpcMemHandle_t h;
} dev_mem;

static void dev_release(void *ctx)
{
	dev_mem *d = ctx;
	if (!d)
		return;
	set_device(d->device);
	cudaFree(d->p);
	free(d);
}

int arena_cuda_create(const char *name, uint64_t size, int device,
		      arena **out, char *err)
{
	*out = NULL;
	if (size == 0 || size % ARENA_ALIGN) {
		moor_errf(err,
			  "arena %s: size %llu is not a positive multiple of "
			  "%d",
			  name, (unsigned long long)size, ARENA_ALIGN);
		return MOOR_ERANGE;
	}
	int rc = arena_cuda_probe(device, err);
	if (rc)
		return rc;
	cudaError_t e = set_device(device);
	if (e != cudaSuccess)
		return cu_err(e, "cudaSetDevice", err);
	size_t fr = 0, tot = 0;
	if ((e = cudaMemGetInfo(&fr, &tot)) != cudaSuccess)
		return cu_err(e, "cudaMemGetInfo", err);
	if (size > fr) {
		moor_errf(err,
			  "the device arena of %.2f GiB does not fit on GPU "
			  "%d: %.2f GiB free of %.2f GiB (lower --device-gb; "
			  "the engine's weights and workspace need room too)",
			  gib(size), device, gib(fr), gib(tot));
		return MOOR_ENOSPACE;
	}
	dev_mem *d = calloc(1, sizeof *d);
	if (!d)
		return -ENOMEM;
	d->device = device;
	double t0 = moor_now();
	if ((e = cudaMalloc(&d->p, size)) != cudaSuccess) {
		free(d);
		return cu_err(e, "cudaMalloc of the device arena", err);
	}
	double t1 = moor_now();
	/* Zeroed before it is handed out. cudaMemset of device memory is
	 * asynchronous to the host and runs on the legacy default stream,
	 * which the mover's lanes and an engine's queues (non-blocking
	 * streams) do not wait for: unwaited, it could land over rows an
	 * engine in this process (a test, bench_ttft) computes right after,
	 * or over the mover's first copies. */
	if ((e = cudaMemset(d->p, 0, size)) != cudaSuccess ||
	    (e = cudaDeviceSynchronize()) != cudaSuccess ||
	    (e = cudaIpcGetMemHandle(&d->h, d->p)) != cudaSuccess) {
		rc = cu_err(e, "the device arena", err);
		dev_release(d);
		return rc;
	}
	rc = arena_adopt(name, d->p, size, dev_release, d, out, err);
	if (rc) {
		dev_release(d);
		return rc;
	}
	moor_info("device arena %s: %.2f GiB cudaMalloc'ed on GPU %d in "
		  "%.1f ms, zeroed in %.1f ms (%.2f GiB were free of %.2f)",
		  name, gib(size), device, (t1 - t0) * 1e3,
		  (moor_now() - t1) * 1e3, gib(fr), gib(tot));
	return 0;
}

int arena_cuda_handle(const arena *a, uint8_t handle[64], int *device)
{
	const dev_mem *d = arena_ext_ctx(a);
	if (!d)
		return MOOR_EUNSUP;
	_Static_assert(sizeof d->h <= 64, "cudaIpcMemHandle_t fits");
	memset(handle, 0, 64);
	memcpy(handle, &d->h, sizeof d->h);
	*device = d->device;
	return 0;
}

/* ---- the mover ---- */

/* Copies of one cudaMemcpy3DBatchAsync, at most. */
#define BATCH_MAX 256

typedef struct cmv {
	arena_mover m; /* handed out; m.ctx is this struct */
	cudaStream_t ls[ARENA_LANES]; /* a lane's stream (ls[0]: the mover's;
					 the others may be it) */
	cudaEvent_t ev[ARENA_LANES][ARENA_MARKS]; /* a lane's points, a ring */
	uint64_t seq[ARENA_LANES];		  /* points made on a lane */
	int device;
	char *hbase;	 /* the host arena */
	uint64_t hsize;
	const char *dbase; /* the device arena (dsize 0: none known) */
	uint64_t dsize;
	uint32_t nparts; /* registered parts of REG_PART from hbase (0 in a
			    twin: its first mover's) */
	size_t max_pitch; /* cudaDevAttrMaxPitch: a 2D copy's pitches */
	/* copyv through cudaMemcpy3DBatchAsync where the runtime has it,
	 * unless MOOR_MOVER_BATCH=0 (then one call a copy); off from the
	 * first batch the runtime refuses (the copies then go one call
	 * each) */
	int batch;
	arena_batch b; /* the pieces gathered for it (arena_batch.h: pend
			  and span [BATCH_MAX]); empty between calls */
	void *rt;      /* its records in the runtime's form (batch_new) */
	arena_mover_stats st; /* this mover's alone (a twin keeps its own) */
	/* sum2's per-block partials (a, w): [2 * ARENA_SUM_BLOCKS] uint64,
	 * on the device (cudaMalloc) and their copy on the host (pinned);
	 * each mover and twin its own */
	uint64_t *part_d, *part_h;
} cmv;

static int mv_fail(cudaError_t e, const char *what)
{
	moor_err("cuda mover: %s: %s", what, cudaGetErrorString(e));
	(void)cudaGetLastError();
	return MOOR_EBACKEND;
}

/* Whether p is device memory: by address inside the arenas the mover
 * knows, else by asking the runtime. */
static int is_device(const cmv *c, const void *p)
{
	const char *q = p;
	if (c->dsize && q >= c->dbase && q < c->dbase + c->dsize)
		return 1;
	if (q >= c->hbase && q < c->hbase + c->hsize)
		return 0;
	struct cudaPointerAttributes a;
	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return a.type == cudaMemoryTypeDevice ||
	       a.type == cudaMemoryTypeManaged;
}

/* Bytes from host pointer h to the end of its registered part; SIZE_MAX
 * when h is not in the host arena. */
static size_t part_left(const cmv *c, const void *h)
{
	const char *p = h;
	if (p < c->hbase || p >= c->hbase + c->hsize)
		return SIZE_MAX;
	uint64_t off = (uint64_t)(p - c->hbase);
	return (size_t)((off / REG_PART + 1) * REG_PART - off);
}

/* The mover's device current on the calling thread (set_device: a
 * cudaSetDevice the first time on a thread only). */
static int on_device(const cmv *c)
{
	cudaError_t e = set_device(c->device);
	return e == cudaSuccess ? 0 : mv_fail(e, "cudaSetDevice");
}

static int stream_sync(cmv *c, cudaStream_t st)
{
	double t0 = moor_now();
	cudaError_t e = cudaStreamSynchronize(st);
	c->st.wait_s += moor_now() - t0;
	return e == cudaSuccess ? 0 : mv_fail(e, "cudaStreamSynchronize");
}

/* Every lane's copies done. */
static int mv_sync(void *ctx)
{
	cmv *c = ctx;
	int rc = on_device(c);
	for (int l = 0; l < ARENA_LANES && !rc; l++)
		if (l == 0 || c->ls[l] != c->ls[0])
			rc = stream_sync(c, c->ls[l]);
	c->st.syncs++;
	return rc;
}

/* The time of an issuing call (from t0), its waits (wait_s since w0)
 * left out. */
static void issued(cmv *c, double t0, double w0)
{
	c->st.issue_s += moor_now() - t0 - (c->st.wait_s - w0);
}

static void mv_stats(void *ctx, arena_mover_stats *out)
{
	*out = ((const cmv *)ctx)->st;
}

/* The runtime's batch of copies (CUDA 12.8 on; the call lost its failIdx
 * in 13.0): batch_new makes the records of BATCH_MAX copies (NULL: this
 * runtime has none), batch_async fills them from v and calls it. */
#if CUDART_VERSION >= 13000
static cudaError_t batch_call(struct cudaMemcpy3DBatchOp *ops, size_t n,
			      cudaStream_t s)
{
	return cudaMemcpy3DBatchAsync(n, ops, 0, s);
}
#elif CUDART_VERSION >= 12080
static cudaError_t batch_call(struct cudaMemcpy3DBatchOp *ops, size_t n,
			      cudaStream_t s)
{
	size_t fail = 0;
	return cudaMemcpy3DBatchAsync(n, ops, &fail, 0, s);
}
#endif

#if CUDART_VERSION >= 12080
static void *batch_new(void)
{
	return calloc(BATCH_MAX, sizeof(struct cudaMemcpy3DBatchOp));
}

static cudaError_t batch_async(void *rt, const arena_copy *v, size_t n,
			       cudaStream_t s)
{
	struct cudaMemcpy3DBatchOp *ops = rt;
	for (size_t i = 0; i < n; i++) {
		const arena_copy *x = &v[i];
		struct cudaMemcpy3DBatchOp *o = &ops[i];
		size_t h = x->height;
		memset(o, 0, sizeof *o);
		o->src.type = cudaMemcpyOperandTypePointer;
		o->src.op.ptr.ptr = (void *)x->src;
		o->src.op.ptr.rowLength = h > 1 ? x->spitch : x->width;
		o->src.op.ptr.layerHeight = h;
		o->dst.type = cudaMemcpyOperandTypePointer;
		o->dst.op.ptr.ptr = x->dst;
		o->dst.op.ptr.rowLength = h > 1 ? x->dpitch : x->width;
		o->dst.op.ptr.layerHeight = h;
		o->extent = (struct cudaExtent){x->width, h, 1};
		o->srcAccessOrder = cudaMemcpySrcAccessOrderStream;
	}
	return batch_call(ops, n, s);
}
#else
static void *batch_new(void)
{
	return NULL;
}

static cudaError_t batch_async(void *rt, const arena_copy *v, size_t n,
			       cudaStream_t s)
{
	(void)rt;
	(void)v;
	(void)n;
	(void)s;
	return cudaErrorNotSupported;
}
#endif

/* One piece now, on the stream: h runs of w bytes (one run: a plain
 * copy). */
static int put_now(cmv *c, cudaStream_t st, const arena_copy *x)
{
	c->st.calls++;
	cudaError_t e =
	    x->height == 1
		? cudaMemcpyAsync(x->dst, x->src, x->width, cudaMemcpyDefault,
				  st)
		: cudaMemcpy2DAsync(x->dst, x->dpitch, x->src, x->spitch,
				    x->width, x->height, cudaMemcpyDefault, st);
	if (e != cudaSuccess)
		return mv_fail(e, x->height == 1 ? "cudaMemcpyAsync"
						 : "cudaMemcpy2DAsync");
	return 0;
}

/* The gathered pieces to the stream st, as one batch. A batch the
 * runtime refuses (a driver older than the runtime) turns batching off
 * and goes one call a piece, in the order gathered: no piece of a batch
 * writes what another reads or writes (arena_batch.h), so one the
 * runtime did start and does again moves the same bytes. */
static int batch_flush(cmv *c, cudaStream_t st)
{
	size_t n = c->b.n;
	c->b.n = 0;
	if (!n)
		return 0;
	c->st.calls++;
	cudaError_t e = batch_async(c->rt, c->b.pend, n, st);
	if (e == cudaSuccess)
		return 0;
	moor_warn("cuda mover: cudaMemcpy3DBatchAsync of %zu copies: %s; "
		  "one call a copy from now on",
		  n, cudaGetErrorString(e));
	(void)cudaGetLastError();
	c->batch = 0;
	for (size_t i = 0; i < n; i++) {
		int rc = put_now(c, st, &c->b.pend[i]);
		if (rc)
			return rc;
	}
	return 0;
}

/* One piece (its host side, if any, inside one registered part) into the
 * batch (join, while batching is on) or on the stream st; the gathered
 * pieces go first where arena_batch.h's rules say (a piece that does
 * not join, one that conflicts with a gathered piece, a full batch). */
static int put(cmv *c, cudaStream_t st, int join, const arena_copy *x)
{
	join = join && c->batch;
	if (arena_batch_before(&c->b, x, join)) {
		int rc = batch_flush(c, st);
		if (rc)
			return rc;
		join = join && c->batch; /* off if the runtime refused it */
	}
	if (!join)
		return put_now(c, st, x);
	arena_batch_add(&c->b, x);
	return 0;
}

static int put_at(cmv *c, cudaStream_t st, int join, char *d, size_t dp,
		  const char *s, size_t sp, size_t w, size_t h)
{
	arena_copy x = {d, s, dp, sp, w, h};
	return put(c, st, join, &x);
}

/* A copy2d with a device side (dd, sd: which) in pieces: the host side's
 * rows in runs that each lie in one registered part, a row that crosses a
 * part's edge split at it; a pitch past the device's limit one row at a
 * time. */
static int pieces(cmv *c, cudaStream_t st, int join, const arena_copy *x,
		  int dd, int sd)
{
	char *d = x->dst;
	const char *s = x->src;
	size_t w = x->width, h = x->height, dp = x->dpitch, sp = x->spitch;
	int rows = h > 1 && (dp > c->max_pitch || sp > c->max_pitch);
	if (dd && sd && !rows)
		return put(c, st, join, x);
	size_t hp = dd ? sp : dp; /* the host side's pitch */
	for (size_t i = 0; i < h;) {
		char *dr = d + i * dp;
		const char *sr = s + i * sp;
		size_t left = dd && sd ? SIZE_MAX : part_left(c, dd ? sr : dr);
		size_t k = 0; /* rows from i that lie in this part */
		if (rows)
			k = left >= w ? 1 : 0;
		else if (left >= w)
			k = (h - i - 1) * hp + w <= left ? h - i
							 : (left - w) / hp + 1;
		if (k) {
			int rc = put_at(c, st, join, dr, dp, sr, sp, w, k);
			if (rc)
				return rc;
			i += k;
			continue;
		}
		/* row i crosses a part's edge */
		for (size_t n = w; n;) {
			size_t m = part_left(c, dd ? sr : dr);
			m = m < n ? m : n;
			int rc = put_at(c, st, join, dr, m, sr, m, m, 1);
			if (rc)
				return rc;
			dr += m;
			sr += m;
			n -= m;
		}
		i++;
	}
	return 0;
}

/* Host to host: after the lane's earlier copies (its stream st, and the
 * points after() made it wait for), which may be writing the source or
 * reading the destination. Nothing may be gathered (a copyv flushes
 * first). */
static int host_copy(cmv *c, cudaStream_t st, const arena_copy *x)
{
	MOOR_ASSERT(c->b.n == 0);
	int rc = stream_sync(c, st);
	for (size_t i = 0; !rc && i < x->height; i++)
		memcpy((char *)x->dst + i * x->dpitch,
		       (const char *)x->src + i * x->spitch, x->width);
	return rc;
}

static int copy_one(cmv *c, const arena_copy *x)
{
	if (!x->width || !x->height)
		return 0;
	double t0 = moor_now(), w0 = c->st.wait_s;
	c->st.copies++;
	c->st.bytes += (uint64_t)x->width * x->height;
	int rc = on_device(c);
	if (!rc) {
		int dd = is_device(c, x->dst), sd = is_device(c, x->src);
		rc = dd || sd ? pieces(c, c->ls[0], 0, x, dd, sd)
			      : host_copy(c, c->ls[0], x);
	}
	issued(c, t0, w0);
	return rc;
}

static int mv_copy(void *ctx, void *dst, const void *src, size_t n)
{
	arena_copy x = {dst, src, n, n, n, 1};
	return copy_one(ctx, &x);
}

static int mv_copy2d(void *ctx, void *dst, size_t dpitch, const void *src,
		     size_t spitch, size_t width, size_t height)
{
	arena_copy x = {dst, src, dpitch, spitch, width, height};
	return copy_one(ctx, &x);
}

/* The copies between the arenas (the host side in the registered host
 * arena, or none) gather into batches; any other one call each, as
 * copy2d (pageable memory: the runtime stages it before the call returns,
 * as the caller may expect); host to host on the CPU. The order given is
 * kept (arena_batch.h): the gathered pieces go to the stream before a
 * piece that does not join them, before one that conflicts with one of
 * them, and at the end: nothing stays gathered past the call. */
static int mv_copyv(void *ctx, int lane, const arena_copy *v, size_t n)
{
	cmv *c = ctx;
	MOOR_ASSERT(lane >= 0 && lane < ARENA_LANES);
	cudaStream_t st = c->ls[lane];
	double t0 = moor_now(), w0 = c->st.wait_s;
	int rc = on_device(c);
	for (size_t i = 0; i < n && !rc; i++) {
		const arena_copy *x = &v[i];
		if (!x->width || !x->height)
			continue;
		c->st.copies++;
		c->st.bytes += (uint64_t)x->width * x->height;
		int dd = is_device(c, x->dst), sd = is_device(c, x->src);
		if (!dd && !sd) {
			rc = batch_flush(c, st);
			if (!rc)
				rc = host_copy(c, st, x);
			continue;
		}
		int in_arena = (dd || part_left(c, x->dst) != SIZE_MAX) &&
			       (sd || part_left(c, x->src) != SIZE_MAX);
		rc = pieces(c, st, in_arena, x, dd, sd);
	}
	int fr = batch_flush(c, st);
	issued(c, t0, w0);
	return rc ? rc : fr;
}

static int mv_mark(void *ctx, int lane, uint64_t *pt)
{
	cmv *c = ctx;
	MOOR_ASSERT(lane >= 0 && lane < ARENA_LANES);
	double t0 = moor_now();
	int rc = on_device(c);
	if (rc)
		return rc;
	uint64_t q = c->seq[lane]++;
	cudaError_t e =
	    cudaEventRecord(c->ev[lane][q % ARENA_MARKS], c->ls[lane]);
	*pt = q << 2 | (uint64_t)lane;
	c->st.issue_s += moor_now() - t0;
	return e == cudaSuccess ? 0 : mv_fail(e, "cudaEventRecord");
}

static int mv_after(void *ctx, int lane, uint64_t pt)
{
	cmv *c = ctx;
	int from = (int)(pt & 3);
	uint64_t q = pt >> 2;
	MOOR_ASSERT(lane >= 0 && lane < ARENA_LANES && from < ARENA_LANES);
	/* the point's event not recorded again since */
	MOOR_ASSERT(q < c->seq[from] && c->seq[from] - q <= ARENA_MARKS);
	if (c->ls[from] == c->ls[lane])
		return 0;
	double t0 = moor_now();
	int rc = on_device(c);
	if (rc)
		return rc;
	cudaError_t e = cudaStreamWaitEvent(
	    c->ls[lane], c->ev[from][q % ARENA_MARKS], 0);
	c->st.issue_s += moor_now() - t0;
	return e == cudaSuccess ? 0 : mv_fail(e, "cudaStreamWaitEvent");
}

static int mv_zero(void *ctx, void *dst, size_t n)
{
	cmv *c = ctx;
	if (!n)
		return 0;
	double t0 = moor_now(), w0 = c->st.wait_s;
	c->st.copies++;
	c->st.bytes += n;
	int rc = on_device(c);
	if (!rc && is_device(c, dst)) {
		c->st.calls++;
		cudaError_t e = cudaMemsetAsync(dst, 0, n, c->ls[0]);
		rc = e == cudaSuccess ? 0 : mv_fail(e, "cudaMemsetAsync");
	} else if (!rc) {
		rc = stream_sync(c, c->ls[0]);
		if (rc == 0)
			memset(dst, 0, n);
	}
	issued(c, t0, w0);
	return rc;
}

/* The sums of dfile_sum2 where the bytes are (arena.h): every lane's
 * earlier copies first (lanes 1 and 2 waited for here, lane 0 by the
 * stream's order), then the kernel and the copy of its partials on lane
 * 0, then lane 0 synchronised; host memory after every lane. */
static int mv_sum2(void *ctx, const void *src, size_t n, uint64_t out[2])
{
	cmv *c = ctx;
	double t0 = moor_now(), w0 = c->st.wait_s;
	c->st.sums++;
	c->st.sum_bytes += n;
	out[0] = out[1] = 0;
	int rc = on_device(c);
	for (int l = 1; l < ARENA_LANES && !rc; l++)
		if (c->ls[l] != c->ls[0])
			rc = stream_sync(c, c->ls[l]);
	if (!rc && n && is_device(c, src)) {
		uint32_t nb = 0;
		cudaError_t e = arena_cuda_sum2_launch(src, n, c->part_d, &nb,
						       c->ls[0]);
		if (e == cudaSuccess)
			e = cudaMemcpyAsync(c->part_h, c->part_d,
					    2 * sizeof(uint64_t) * nb,
					    cudaMemcpyDeviceToHost, c->ls[0]);
		rc = e == cudaSuccess ? 0 : mv_fail(e, "the sums' kernel");
		if (!rc)
			rc = stream_sync(c, c->ls[0]);
		for (uint32_t b = 0; b < nb && !rc; b++) {
			out[0] += c->part_h[2 * b];
			out[1] += c->part_h[2 * b + 1];
		}
	} else if (!rc) {
		rc = stream_sync(c, c->ls[0]);
		if (!rc)
			dfile_sum2(src, n, out);
	}
	issued(c, t0, w0);
	return rc;
}

static void unregister_parts(cmv *c)
{
	for (uint32_t i = 0; i < c->nparts; i++)
		cudaHostUnregister(c->hbase + (uint64_t)i * REG_PART);
	c->nparts = 0;
}

void arena_cuda_mover_free(arena_mover *m)
{
	if (!m)
		return;
	cmv *c = m->ctx;
	set_device(c->device);
	for (int l = ARENA_LANES; l-- > 0;) {
		for (int k = 0; k < ARENA_MARKS; k++)
			if (c->ev[l][k])
				cudaEventDestroy(c->ev[l][k]);
		if (c->ls[l] && (l == 0 || c->ls[l] != c->ls[0])) {
			cudaStreamSynchronize(c->ls[l]);
			cudaStreamDestroy(c->ls[l]);
		}
	}
	unregister_parts(c);
	if (c->part_d)
		cudaFree(c->part_d);
	if (c->part_h)
		cudaFreeHost(c->part_h);
	free(c->b.pend);
	free(c->b.span);
	free(c->rt);
	free(c);
}

/* What a mover and its twin each have of their own: the lanes' streams
 * and points, the batch, the device's pitch limit, sum2's partials. On
 * failure what was made stays for arena_cuda_mover_free. */
static int mover_own(cmv *c, const char *what, char *err)
{
	c->part_d = c->part_h = NULL;
	memset(c->ls, 0, sizeof c->ls);
	memset(c->ev, 0, sizeof c->ev);
	memset(c->seq, 0, sizeof c->seq);
	c->b = (arena_batch){.pend = calloc(BATCH_MAX, sizeof(arena_copy)),
			     .span = calloc(BATCH_MAX, sizeof *c->b.span),
			     .max = BATCH_MAX};
	c->rt = batch_new();
	if (!c->b.pend || !c->b.span)
		return -ENOMEM;
	const char *b = getenv("MOOR_MOVER_BATCH");
	c->batch = c->rt && !(b && strcmp(b, "0") == 0);
	int mp = 0;
	cudaError_t e = set_device(c->device);
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&mp, cudaDevAttrMaxPitch, c->device);
	c->max_pitch = mp > 0 ? (size_t)mp : 0;
	const char *ln = getenv("MOOR_MOVER_LANES");
	int lanes = !(ln && strcmp(ln, "0") == 0);
	for (int l = 0; l < ARENA_LANES && e == cudaSuccess; l++) {
		if (l == 0 || lanes)
			e = cudaStreamCreateWithFlags(&c->ls[l],
						      cudaStreamNonBlocking);
		else
			c->ls[l] = c->ls[0];
		for (int k = 0; k < ARENA_MARKS && e == cudaSuccess; k++)
			e = cudaEventCreateWithFlags(&c->ev[l][k],
						     cudaEventDisableTiming);
	}
	size_t pb = 2 * sizeof(uint64_t) * ARENA_SUM_BLOCKS;
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&c->part_d, pb);
	if (e == cudaSuccess)
		e = cudaMallocHost((void **)&c->part_h, pb);
	return e == cudaSuccess ? 0 : cu_err(e, what, err);
}

int arena_cuda_mover_twin(const arena_mover *m, arena_mover **out, char *err)
{
	*out = NULL;
	const cmv *f = m->ctx;
	if (m->copy != mv_copy) {
		moor_errf(err, "a twin of the %s mover", m->name);
		return MOOR_EUNSUP;
	}
	cmv *c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	*c = *f;
	c->m.ctx = c;
	c->nparts = 0; /* the registration stays f's */
	memset(&c->st, 0, sizeof c->st);
	int rc = mover_own(c, "a twin mover's streams", err);
	if (rc) {
		arena_cuda_mover_free(&c->m);
		return rc;
	}
	*out = &c->m;
	return 0;
}

int arena_cuda_mover_new(int device, const arena *dev, arena *host,
			 arena_mover **out, char *err)
{
	*out = NULL;
	int rc = arena_cuda_probe(device, err);
	if (rc)
		return rc;
	cmv *c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	c->device = device;
	c->m = (arena_mover){.name = "cuda",
			     .ctx = c,
			     .copy = mv_copy,
			     .copy2d = mv_copy2d,
			     .zero = mv_zero,
			     .sync = mv_sync,
			     .copyv = mv_copyv,
			     .mark = mv_mark,
			     .after = mv_after,
			     .stats = mv_stats,
			     .sum2 = mv_sum2};
	rc = mover_own(c, "the mover's streams", err);
	if (rc) {
		arena_cuda_mover_free(&c->m);
		return rc;
	}
	cudaError_t e;
	const char *pk = getenv("MOOR_REG_PART_KB");
	if (pk && atol(pk) > 0)
		reg_part = (uint64_t)atol(pk) << 10;
	c->hbase = arena_base(host);
	c->hsize = arena_size(host);
	if (dev) {
		c->dbase = arena_base(dev);
		c->dsize = arena_size(dev);
	}
	/* the mapping covers whole pages: the last part may round up */
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t mapped = (c->hsize + pg - 1) / pg * pg;
	double t0 = moor_now(), last = t0;
	for (uint64_t off = 0; off < mapped; off += REG_PART) {
		uint64_t k = mapped - off < REG_PART ? mapped - off : REG_PART;
		e = cudaHostRegister(c->hbase + off, k,
				     cudaHostRegisterPortable);
		if (e != cudaSuccess) {
			char what[128];
			snprintf(what, sizeof what,
				 "cudaHostRegister of the host arena at "
				 "%.2f GiB (+%.2f GiB)",
				 gib(off), gib(k));
			rc = cu_err(e, what, err);
			arena_cuda_mover_free(&c->m);
			return rc;
		}
		c->nparts++;
		double now = moor_now();
		if (now - last >= 1.0) {
			moor_info("registering the host arena for DMA: %.1f of "
				  "%.1f GiB in %.1f s",
				  gib(off + k), gib(mapped), now - t0);
			last = now;
		}
	}
	moor_info("host arena %s: %.2f GiB registered for DMA on GPU %d in "
		  "%u parts, %.2f s",
		  arena_name(host), gib(mapped), device, c->nparts,
		  moor_now() - t0);
	*out = &c->m;
	return 0;
}
