/* arena.h: a shared-memory arena (`arena_`), its offset allocator and the
 * mover that copies bytes between arenas.
 *
 * An arena is one POSIX shm object. The owner (cached) creates it with
 * arena_create (shm_open O_CREAT|O_EXCL, ftruncate, mmap) and unlinks the
 * name at arena_close; any other process maps it by name with arena_map and
 * sees the same bytes. Offsets, never pointers, cross processes: a mapping's
 * base differs from one process to the next.
 *
 * The allocator runs in the owner only: a first-fit free list of extents,
 * kept sorted by offset in the owner's private memory (never in the shared
 * bytes, so a peer that scribbles over the arena cannot corrupt it), every
 * block 64-byte aligned and rounded up to 64 bytes, neighbours coalesced on
 * release. A mapping made with arena_map has no allocator.
 *
 * An arena can also be memory allocated elsewhere (arena_adopt): the
 * device arena on CUDA is cudaMalloc'ed by cached (arena_cuda_create) and
 * reaches the engine as a CUDA IPC handle; the allocator is the same.
 *
 * The mover copies between addresses inside the arenas. The memcpy mover
 * serves the CPU backend (both arenas are host memory). The CUDA mover
 * (arena_cuda_mover_new: cudaMemcpyAsync / cudaMemcpy2DAsync on a stream
 * of its own, between the device arena and the host arena it registered
 * with cudaHostRegister) replaces it behind the same vtable; its copies are
 * complete only after sync(). A mover also sums bytes where they are
 * (sum2: the spill's block check; on CUDA a kernel over device memory,
 * so a block's sums need no copy to the host).
 *
 * Ordering between processes: cached calls the mover's sync() before any
 * message that hands arena bytes to the engine (HELLO_OK, PLAN_OK, the OK
 * of COMMIT and ABORT: cache_sync), and the engine synchronises its queues
 * before COMMIT and ABORT (proto.h).
 *
 * Sizes are bytes. The tmpfs object is sparse: ftruncate reserves nothing,
 * and a page first touched when the filesystem is full is a SIGBUS in
 * whichever process touches it. So the owner reserves every block's pages
 * as it allocates it (posix_fallocate: a full /dev/shm makes arena_alloc
 * fail with MOOR_ENOSPACE, a cache refused, never a signal), and gives the
 * whole pages of what it releases back (fallocate PUNCH_HOLE; not for an
 * arena registered for DMA, arena_set_punch). Nothing outside allocated
 * blocks is ever written, by the owner or a peer.
 */
#ifndef ARENA_H
#define ARENA_H

#include <stddef.h>
#include <stdint.h>

#define ARENA_ALIGN 64
#define ARENA_NAME_MAX 80

typedef struct arena arena;

/* Creates the shm object `name` ("/moor.dev") of `size` bytes and maps it.
 * Fails with -EEXIST when the name is taken (a stale object of a crashed
 * owner: the error says which name to remove). err: MOOR_ERRLEN or NULL. */
int arena_create(const char *name, uint64_t size, arena **out, char *err);
/* Maps an existing arena by name (its size from fstat); no allocator. */
int arena_map(const char *name, arena **out, char *err);
/* An owner arena (with the allocator) over `size` bytes at base that
 * something else allocated, no shm object; arena_close calls
 * release(ctx) instead of unmapping. name labels it in logs. */
int arena_adopt(const char *name, void *base, uint64_t size,
		void (*release)(void *ctx), void *ctx, arena **out, char *err);
/* The ctx an adopted arena was given (NULL for shm arenas). */
void *arena_ext_ctx(const arena *a);
/* Unmaps; the owner also unlinks the name. Safe on NULL. */
void arena_close(arena *a);

void *arena_base(const arena *a);
uint64_t arena_size(const arena *a);
const char *arena_name(const arena *a);

/* A block of at least `bytes` (rounded up to ARENA_ALIGN), its offset in
 * *off. MOOR_ENOSPACE when no free extent is large enough; MOOR_EUNSUP on a
 * mapping without an allocator; MOOR_ERANGE for 0 bytes. */
int arena_alloc(arena *a, uint64_t bytes, uint64_t *off);
/* Returns the block at `off` (an offset arena_alloc gave; anything else is
 * a bug and asserts). */
void arena_release(arena *a, uint64_t off);
/* Bytes in allocated blocks (rounded sizes); the largest free extent; the
 * number of blocks; the size of the block at off (0 if none). */
uint64_t arena_used(const arena *a);
uint64_t arena_largest_free(const arena *a);
uint32_t arena_blocks(const arena *a);
uint64_t arena_block_size(const arena *a, uint64_t off);

/* Whether released pages go back to the filesystem (default on for a shm
 * owner). Off for memory registered with the GPU (cudaHostRegister): the
 * DMA mapping keeps the old pages, the process would see new ones. */
void arena_set_punch(arena *a, int on);
/* Bytes given back so far; blocks refused for want of filesystem room. */
uint64_t arena_returned(const arena *a);
uint64_t arena_refused(const arena *a);
/* The shm filesystem's room (/dev/shm: free and total bytes, statvfs) and
 * the machine's memory. 0 or -errno. */
int arena_shm_room(uint64_t *fs_free, uint64_t *fs_size, uint64_t *ram);

/* ---- the mover ---- */

/* Lanes of a mover (copyv, mark, after): lane 0 is the order of copy,
 * copy2d and zero; copies given to one lane run in the order given, and
 * between lanes only as mark and after say. A copy the mover does on the
 * CPU (host to host; zero of host memory) waits for its lane's earlier
 * copies and the points after() gave that lane, not for the other lanes:
 * order those with mark and after, or sync(). A point (mark) stays usable
 * for after until its lane has made ARENA_MARKS more. */
#define ARENA_LANES 3
#define ARENA_MARKS 4

/* One copy of a batch (arena_mover.copyv): copy2d's arguments. */
typedef struct arena_copy {
	void *dst;
	const void *src;
	size_t dpitch, spitch, width, height;
} arena_copy;

/* What a mover did since it was made (arena_mover.stats). */
typedef struct arena_mover_stats {
	uint64_t copies; /* asked for: copy, copy2d, zero, each of a copyv */
	uint64_t calls;	 /* calls to the runtime that copy (a batch: one) */
	uint64_t bytes;	 /* what the copies move */
	uint64_t syncs;	 /* sync() */
	uint64_t sums, sum_bytes; /* sum2() calls, the bytes they read */
	/* seconds in the calls that copy (issuing: copy, copy2d, copyv,
	 * zero, mark, after) and waiting (sync(), and a host copy waiting
	 * for its lane); issue_s leaves the waits out */
	double issue_s, wait_s;
} arena_mover_stats;

typedef struct arena_mover {
	const char *name;
	void *ctx;
	/* n bytes from src to dst; the ranges do not overlap. */
	int (*copy)(void *ctx, void *dst, const void *src, size_t n);
	/* `height` runs of `width` bytes; run i at dst + i * dpitch and
	 * src + i * spitch (the shape of cudaMemcpy2D). */
	int (*copy2d)(void *ctx, void *dst, size_t dpitch, const void *src,
		      size_t spitch, size_t width, size_t height);
	int (*zero)(void *ctx, void *dst, size_t n);
	/* Optional (NULL: copies are complete on return). */
	int (*sync)(void *ctx);
	/* Optional (NULL: the caller calls copy2d for each). The n copies of
	 * v, on lane (0 .. ARENA_LANES - 1). All run after the lane's
	 * earlier copies and before its later ones; v is read during the
	 * call only. Callers give independent copies (none writes what
	 * another reads or writes; cached's vectors copy one way between
	 * the live buffers and other memory), which a mover may run side by
	 * side. The CUDA mover gathers the copies between the arenas into
	 * batches of one cudaMemcpy3DBatchAsync (MOOR_MOVER_BATCH=0: not), whose
	 * copies the runtime runs in no order, and keeps the order given
	 * even so (arena_batch.h): a batch goes to the lane before a copy
	 * that reads what one of it writes or writes what one of it reads
	 * or writes, before a copy issued alone (pageable memory) or on the
	 * CPU (host to host), when full, and before the call returns. A
	 * dependent vector costs calls, never bytes; and nothing of v is
	 * held back past the call, so a mark after it covers all of v. */
	int (*copyv)(void *ctx, int lane, const arena_copy *v, size_t n);
	/* Optional, both or neither (NULL: one lane, every copy in call
	 * order, whatever lane copyv names). mark: *pt, a point after
	 * everything given to lane so far. after: lane's later copies start
	 * once point pt (of any lane) is passed. sync() waits for every
	 * lane. The CUDA mover: a stream a lane, an event a point. */
	int (*mark)(void *ctx, int lane, uint64_t *pt);
	int (*after)(void *ctx, int lane, uint64_t pt);
	/* Optional (NULL: none kept): the counters so far. */
	void (*stats)(void *ctx, arena_mover_stats *out);
	/* Optional (NULL: the caller copies the bytes to host memory, waits
	 * for the copy, and calls dfile_sum2 there). The two sums of
	 * dfile_sum2 (dfile.h: over the 4-byte little-endian words x_i of the
	 * n bytes at src, a short last word zero-padded, out[0] = sum x_i and
	 * out[1] = sum (i + 1) x_i, both mod 2^64), computed where the bytes
	 * are, and equal to dfile_sum2's bit for bit. src: device or host
	 * memory (told apart as copy does), any alignment; n any size (0:
	 * out = {0, 0}). Ordering: sum2 first waits for every copy given to
	 * the mover before it, on every lane (as sync() does), so it sums
	 * what those copies wrote; complete on return: out is written and
	 * those copies are done. On failure (negative) out holds nothing to
	 * trust. The memcpy mover: dfile_sum2. The CUDA mover: device memory
	 * is summed by a kernel on lane 0's stream (arena_cuda_sum.cu;
	 * per-block partials into a small device buffer of the mover's,
	 * added on the host: addition mod 2^64 is exact in any order), the
	 * other lanes waited for first and lane 0 synchronised after; host
	 * memory (the registered host arena, pageable memory) by dfile_sum2
	 * on the host once every lane is done. */
	int (*sum2)(void *ctx, const void *src, size_t n, uint64_t out[2]);
} arena_mover;

/* memcpy between host-mapped arenas; every call is complete on return;
 * sum2 is dfile_sum2. */
extern const arena_mover arena_mover_memcpy;

/* ---- CUDA (arena_cuda.c; arena_nocuda.c answers MOOR_EUNSUP in a build
 * without CUDA) ---- */

/* 0 when GPU `device` is present and the driver answers; else a negative
 * code and err says why. Creates nothing that outlives the call. */
int arena_cuda_probe(int device, char *err);
/* The free and total bytes of GPU `device` (cudaMemGetInfo), for sizing
 * the device arena beside an engine in the same process (bench_ttft:
 * after the weights load). err: MOOR_ERRLEN or NULL. */
int arena_cuda_mem(int device, uint64_t *free_b, uint64_t *total_b, char *err);
/* cudaMallocs `size` bytes on `device` (after cudaMemGetInfo says they fit:
 * else MOOR_ENOSPACE and err names the numbers), zeroed (done on return:
 * any stream may write it next), as an owner arena labelled name;
 * arena_close cudaFrees it. */
int arena_cuda_create(const char *name, uint64_t size, int device,
		      arena **out, char *err);
/* The cudaIpcMemHandle_t of an arena_cuda_create arena (64 bytes) and its
 * device. */
int arena_cuda_handle(const arena *a, uint8_t handle[64], int *device);
/* The CUDA mover on device: its own stream (and one for each other lane:
 * unless MOOR_MOVER_LANES=0, which makes them all the one); registers the
 * host arena
 * `host` with cudaHostRegister in parts (a progress line per part while it
 * takes more than a second), so copies to and from it run as DMA. `dev`
 * (NULL: none) is the device arena its copies mostly touch: a pointer
 * inside dev or host is known device or host memory by its address; any
 * other (an engine's buffer, a pageable staging buffer) is asked of the
 * runtime (cudaPointerGetAttributes), as every pointer once was. dev must
 * outlive the mover. The mover's ctx is freed by arena_cuda_mover_free
 * (which unregisters). err: MOOR_ERRLEN. */
int arena_cuda_mover_new(int device, const arena *dev, arena *host,
			 arena_mover **out, char *err);
/* A second mover beside m (an arena_cuda_mover_new one): a stream of its
 * own on the same device, the same registered host arena and known device
 * arena (it registers nothing, and its free unregisters nothing; m must
 * outlive it). For a thread of cached other than the one that uses m:
 * each syncs only its own copies. Any thread may call a mover, one thread
 * at a time. A mover makes its device current on a thread the first time
 * it runs there and not again (a per-thread flag, not a cudaSetDevice a
 * copy): a thread that calls a mover and also switches itself to another
 * device (cudaSetDevice outside arena_cuda.c) must not, in this process.
 * err: MOOR_ERRLEN. */
int arena_cuda_mover_twin(const arena_mover *m, arena_mover **out, char *err);
void arena_cuda_mover_free(arena_mover *m); /* safe on NULL */

#endif
