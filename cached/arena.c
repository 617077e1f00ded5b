/* arena.c: POSIX shm arenas, their first-fit offset allocator and the
 * memcpy mover (arena.h). */
#include "arena.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "dfile.h"
#include "moor.h"

typedef struct extent {
	uint64_t off, size;
} extent;

/* A sorted array of extents (by offset). */
typedef struct extents {
	extent *v;
	uint32_t n, cap;
} extents;

struct arena {
	char name[ARENA_NAME_MAX];
	void *base;
	uint64_t size;
	int owner;
	/* the owner's shm descriptor (-1: none): blocks are reserved with
	 * posix_fallocate as they are allocated and, with punch, the whole
	 * pages of freed extents go back to the filesystem */
	int fd;
	int punch;
	uint64_t returned; /* bytes given back by hole punching */
	uint64_t refused;  /* blocks the filesystem had no room for */
	/* arena_adopt: memory allocated elsewhere (no shm object), given
	 * back by ext_release(ext_ctx) at arena_close */
	void (*ext_release)(void *ctx);
	void *ext_ctx;
	extents free_; /* owner only */
	extents used_; /* owner only: allocated blocks */
	uint64_t used_bytes;
};

static int ext_reserve(extents *e, uint32_t n)
{
	if (n <= e->cap)
		return 0;
	uint32_t cap = e->cap ? e->cap * 2 : 64;
	while (cap < n)
		cap *= 2;
	extent *v = realloc(e->v, (size_t)cap * sizeof *v);
	if (!v)
		return -ENOMEM;
	e->v = v;
	e->cap = cap;
	return 0;
}

/* First index whose offset is >= off. */
static uint32_t ext_lower(const extents *e, uint64_t off)
{
	uint32_t lo = 0, hi = e->n;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (e->v[mid].off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int ext_insert(extents *e, uint32_t at, extent x)
{
	int rc = ext_reserve(e, e->n + 1);
	if (rc)
		return rc;
	memmove(e->v + at + 1, e->v + at, (size_t)(e->n - at) * sizeof *e->v);
	e->v[at] = x;
	e->n++;
	return 0;
}

static void ext_remove(extents *e, uint32_t at)
{
	memmove(e->v + at, e->v + at + 1,
		(size_t)(e->n - at - 1) * sizeof *e->v);
	e->n--;
}

static int arena_open(const char *name, uint64_t size, int create, arena **out,
		      char *err)
{
	*out = NULL;
	if (!name || name[0] != '/' || strlen(name) >= ARENA_NAME_MAX) {
		moor_errf(err,
			  "arena name '%s': must start with '/' and be "
			  "shorter than %d bytes",
			  name ? name : "(null)", ARENA_NAME_MAX);
		return MOOR_ERANGE;
	}
	if (create && (size == 0 || size % ARENA_ALIGN)) {
		moor_errf(err,
			  "arena %s: size %llu is not a positive multiple "
			  "of %d",
			  name, (unsigned long long)size, ARENA_ALIGN);
		return MOOR_ERANGE;
	}
	arena *a = calloc(1, sizeof *a);
	if (!a)
		return -ENOMEM;
	snprintf(a->name, sizeof a->name, "%s", name);
	a->fd = -1;
	int fd =
	    shm_open(name, create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
	if (fd < 0) {
		int e = errno;
		if (e == EEXIST)
			moor_errf(err,
				  "arena %s exists (a stale object of an "
				  "earlier run? remove /dev/shm%s)",
				  name, name);
		else
			moor_errf(err, "shm_open %s: %s", name, strerror(e));
		free(a);
		return -e;
	}
	int rc = 0;
	if (create) {
		a->owner = 1;
		if (ftruncate(fd, (off_t)size) != 0) {
			rc = -errno;
			moor_errf(err, "ftruncate %s to %llu: %s", name,
				  (unsigned long long)size, strerror(errno));
		}
	} else {
		struct stat st;
		if (fstat(fd, &st) != 0) {
			rc = -errno;
			moor_errf(err, "fstat %s: %s", name, strerror(errno));
		} else if (st.st_size <= 0) {
			rc = MOOR_ETRUNC;
			moor_errf(err, "arena %s is empty", name);
		}
		size = (uint64_t)st.st_size;
	}
	if (!rc) {
		void *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE,
			       MAP_SHARED, fd, 0);
		if (p == MAP_FAILED) {
			rc = -errno;
			moor_errf(err, "mmap %s (%llu bytes): %s", name,
				  (unsigned long long)size, strerror(errno));
		} else {
			a->base = p;
			a->size = size;
		}
	}
	if (!rc && a->owner) {
		a->fd = fd;
		a->punch = 1;
	} else {
		close(fd);
	}
	if (!rc && a->owner)
		rc = ext_insert(&a->free_, 0, (extent){0, size});
	if (rc) {
		if (a->base)
			munmap(a->base, (size_t)a->size);
		if (a->fd >= 0)
			close(a->fd);
		if (create)
			shm_unlink(name);
		free(a->free_.v);
		free(a);
		return rc;
	}
	*out = a;
	return 0;
}

int arena_create(const char *name, uint64_t size, arena **out, char *err)
{
	return arena_open(name, size, 1, out, err);
}

int arena_map(const char *name, arena **out, char *err)
{
	return arena_open(name, 0, 0, out, err);
}

int arena_adopt(const char *name, void *base, uint64_t size,
		void (*release)(void *ctx), void *ctx, arena **out, char *err)
{
	*out = NULL;
	if (!base || size == 0 || size % ARENA_ALIGN || !release) {
		moor_errf(err, "arena %s: %llu bytes at %p cannot be adopted",
			  name ? name : "(null)", (unsigned long long)size,
			  base);
		return MOOR_ERANGE;
	}
	arena *a = calloc(1, sizeof *a);
	if (!a)
		return -ENOMEM;
	snprintf(a->name, sizeof a->name, "%s", name ? name : "");
	a->fd = -1;
	a->base = base;
	a->size = size;
	a->owner = 1;
	int rc = ext_insert(&a->free_, 0, (extent){0, size});
	if (rc) {
		free(a);
		return rc;
	}
	a->ext_release = release;
	a->ext_ctx = ctx;
	*out = a;
	return 0;
}

void *arena_ext_ctx(const arena *a)
{
	return a->ext_ctx;
}

void arena_close(arena *a)
{
	if (!a)
		return;
	if (a->ext_release) {
		a->ext_release(a->ext_ctx);
	} else {
		if (a->base)
			munmap(a->base, (size_t)a->size);
		if (a->fd >= 0)
			close(a->fd);
		if (a->owner)
			shm_unlink(a->name);
	}
	free(a->free_.v);
	free(a->used_.v);
	free(a);
}

void *arena_base(const arena *a)
{
	return a->base;
}

uint64_t arena_size(const arena *a)
{
	return a->size;
}

const char *arena_name(const arena *a)
{
	return a->name;
}

int arena_alloc(arena *a, uint64_t bytes, uint64_t *off)
{
	if (!a->owner)
		return MOOR_EUNSUP;
	if (bytes == 0 || bytes > a->size)
		return bytes ? MOOR_ENOSPACE : MOOR_ERANGE;
	uint64_t need =
	    (bytes + ARENA_ALIGN - 1) & ~(uint64_t)(ARENA_ALIGN - 1);
	/* free extents never outnumber the blocks by more than one, so with
	 * this room a release never needs memory */
	int rc = ext_reserve(&a->free_, a->used_.n + 2);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < a->free_.n; i++) {
		extent *f = &a->free_.v[i];
		if (f->size < need)
			continue;
		extent blk = {f->off, need};
		/* the filesystem's pages first: a full /dev/shm is this
		 * block refused, never a SIGBUS when it is first written */
		if (a->fd >= 0) {
			int e = posix_fallocate(a->fd, (off_t)blk.off,
						(off_t)need);
			if (e) {
				a->refused++;
				return e == ENOSPC || e == EFBIG ? MOOR_ENOSPACE
								 : -e;
			}
		}
		uint32_t at = ext_lower(&a->used_, blk.off);
		rc = ext_insert(&a->used_, at, blk);
		if (rc)
			return rc;
		f->off += need;
		f->size -= need;
		if (f->size == 0)
			ext_remove(&a->free_, i);
		a->used_bytes += need;
		*off = blk.off;
		return 0;
	}
	return MOOR_ENOSPACE;
}

void arena_release(arena *a, uint64_t off)
{
	MOOR_ASSERT(a->owner);
	uint32_t at = ext_lower(&a->used_, off);
	MOOR_ASSERT(at < a->used_.n && a->used_.v[at].off == off);
	extent b = a->used_.v[at];
	ext_remove(&a->used_, at);
	a->used_bytes -= b.size;
	/* insert into the free list, merging with the neighbours */
	uint32_t i = ext_lower(&a->free_, b.off);
	int merged = 0;
	if (i > 0) {
		extent *p = &a->free_.v[i - 1];
		if (p->off + p->size == b.off) {
			p->size += b.size;
			merged = 1;
			if (i < a->free_.n &&
			    p->off + p->size == a->free_.v[i].off) {
				p->size += a->free_.v[i].size;
				ext_remove(&a->free_, i);
			}
		}
	}
	if (!merged && i < a->free_.n && b.off + b.size == a->free_.v[i].off) {
		a->free_.v[i].off = b.off;
		a->free_.v[i].size += b.size;
		merged = 1;
	}
	if (!merged) {
		int rc = ext_insert(&a->free_, i, b); /* room reserved */
		MOOR_ASSERT(rc == 0);
	}
	if (a->fd >= 0 && a->punch) {
		/* the whole pages of the free extent that holds b go back:
		 * blocks are 64-byte aligned, so a page at either end may
		 * still hold a neighbour's bytes and is kept */
		uint32_t k = ext_lower(&a->free_, b.off + 1) - 1;
		const extent *f = &a->free_.v[k];
		uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
		uint64_t lo = (f->off + pg - 1) / pg * pg,
			 hi = (f->off + f->size) / pg * pg;
		uint64_t blo = b.off / pg * pg,
			 bhi = (b.off + b.size + pg - 1) / pg * pg;
		if (lo < blo)
			lo = blo;
		if (hi > bhi)
			hi = bhi;
		if (hi > lo &&
		    fallocate(a->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			      (off_t)lo, (off_t)(hi - lo)) == 0)
			a->returned += hi - lo;
	}
}

void arena_set_punch(arena *a, int on)
{
	a->punch = on;
}

uint64_t arena_returned(const arena *a)
{
	return a->returned;
}

uint64_t arena_refused(const arena *a)
{
	return a->refused;
}

int arena_shm_room(uint64_t *fs_free, uint64_t *fs_size, uint64_t *ram)
{
	struct statvfs v;
	if (statvfs("/dev/shm", &v))
		return -errno;
	*fs_free = (uint64_t)v.f_bavail * v.f_frsize;
	*fs_size = (uint64_t)v.f_blocks * v.f_frsize;
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	*ram = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
	return 0;
}

uint64_t arena_used(const arena *a)
{
	return a->used_bytes;
}

uint64_t arena_largest_free(const arena *a)
{
	uint64_t m = 0;
	for (uint32_t i = 0; i < a->free_.n; i++)
		if (a->free_.v[i].size > m)
			m = a->free_.v[i].size;
	return m;
}

uint32_t arena_blocks(const arena *a)
{
	return a->used_.n;
}

uint64_t arena_block_size(const arena *a, uint64_t off)
{
	uint32_t at = ext_lower(&a->used_, off);
	if (at < a->used_.n && a->used_.v[at].off == off)
		return a->used_.v[at].size;
	return 0;
}

/* ---- the memcpy mover ---- */

static int mc_copy(void *ctx, void *dst, const void *src, size_t n)
{
	if (n)
		memcpy(dst, src, n);
	return 0;
}

static int mc_copy2d(void *ctx, void *dst, size_t dpitch, const void *src,
		     size_t spitch, size_t width, size_t height)
{
	if (!width)
		return 0;
	if (dpitch == width && spitch == width) {
		memcpy(dst, src, width * height);
		return 0;
	}
	for (size_t i = 0; i < height; i++)
		memcpy((char *)dst + i * dpitch, (const char *)src + i * spitch,
		       width);
	return 0;
}

static int mc_zero(void *ctx, void *dst, size_t n)
{
	if (n)
		memset(dst, 0, n);
	return 0;
}

/* Host memory: the bytes are where the CPU sums them. */
static int mc_sum2(void *ctx, const void *src, size_t n, uint64_t out[2])
{
	(void)ctx;
	dfile_sum2(src, n, out);
	return 0;
}

const arena_mover arena_mover_memcpy = {
    .name = "memcpy",
    .ctx = NULL,
    .copy = mc_copy,
    .copy2d = mc_copy2d,
    .zero = mc_zero,
    .sync = NULL,
    .sum2 = mc_sum2,
};
